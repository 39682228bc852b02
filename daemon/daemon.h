/*
 * daemon.h - the daemon's shared state: struct rtx_daemon (config, store, job manager,
 * serving, shared-memory regions, the devices found at start) and its lifecycle (init, close,
 * drain), with the version and build id. main.c owns it; the gRPC handlers (server.h), the
 * HTTP server (http.c) and /metrics (metrics.c) read it. Only daemon/ and the unit tests
 * include it.
 *
 * DESIGN
 * The state is one struct that main.c fills and hands to every front end; nothing here knows
 * gRPC or HTTP, so a front end includes this header and not another front end's. A drain
 * begins exactly once, whoever asks first (a signal on the loop thread or Admin.Drain on a
 * completion-queue thread): rtx__daemon_drain_begin sets the draining flag that Submit reads,
 * calls rtx_jobs_drain and records its counts and grace under a mutex, so every later caller
 * answers with the same numbers. What follows the drain belongs to main.c's loop.
 */
#ifndef RTX_DAEMON_DAEMON_H
#define RTX_DAEMON_DAEMON_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "daemon/config.h"
#include "daemon/jobs.h"
#include "daemon/shm.h"
#include "kernels/cuda/backend-cuda.h"
#include "serving/serving.h"
#include "store/store.h"

#define RTX_VERSION "0.1.0"

/* The build id: `git describe` passed by the Makefile, else "dev". */
#ifndef RTX_BUILD_ID
#define RTX_BUILD_ID "dev"
#endif

/* ------------------------------------------------------------------------------------------
 * Daemon state shared by main.c and the front ends
 * ---------------------------------------------------------------------------------------- */

struct rtx_daemon {
    struct rtx_config *cfg; /* read under cfg_lock; SIGHUP writes under it */
    pthread_rwlock_t cfg_lock;
    struct rtx_store *store;
    struct rtx_jobs *jobs;
    int64_t started_ms;   /* unix ms */
    char cpu_name[128];   /* /proc/cpuinfo "model name" */
    int64_t memory_bytes; /* physical memory, bytes */
    /* CUDA devices found at start (main.c fills it before the server starts; read-only after;
     * rtx__daemon_close frees it). Their health while serving comes from the job manager. */
    struct rtx_cuda_devices gpus;
    /* The device set (device/device.h) made from gpus at start, shared by the job manager and
     * serving; main.c frees it after both stopped. */
    struct rtx_devices *devices;
    /* Inference serving (serving/serving.h) and the clients' shared-memory regions
     * (daemon/shm.h), shared by the KServe v2 gRPC service and the HTTP server; serving is
     * NULL when no model repository is configured. */
    struct rtx_serving *serving;
    struct rtx_shm *shm;

    atomic_bool draining;     /* Submit answers UNAVAILABLE once set */
    pthread_mutex_t drain_mu; /* guards the fields below */
    bool drain_begun;
    int drain_running, drain_queued; /* what rtx_jobs_drain reported */
    int drain_grace_ms;              /* grace of the drain that began first */

    /* Called (from a CQ thread) after Admin.Drain began a drain; main.c hands it to its loop
     * with uv_async_send. */
    void (*on_drain)(struct rtx_daemon *d);
    void *on_drain_ctx;
};

/* Fills the fields that do not depend on main.c's objects (locks, start time, CPU name and
 * memory). cfg, store, jobs, gpus and on_drain are set by the caller afterwards. */
int rtx__daemon_init(struct rtx_daemon *d, struct rtx_err *err);
void rtx__daemon_close(struct rtx_daemon *d);
/* Milliseconds since rtx__daemon_init (wall clock). */
int64_t rtx__daemon_uptime_ms(const struct rtx_daemon *d);
/* server.max_message_bytes as it stands now (read under cfg_lock; SIGHUP may change it), the
 * bound of a reply's size; 0 without a config. */
int64_t rtx__daemon_max_reply_bytes(struct rtx_daemon *d);

/* Begins a drain (stop admitting, stop starting queued jobs) once: the first call runs
 * rtx_jobs_drain and records its counts and grace_ms; every call returns those counts and the
 * recorded grace. Returns true for the call that began it. Thread-safe. */
bool rtx__daemon_drain_begin(struct rtx_daemon *d, int grace_ms, int *running, int *queued,
                             int *grace_used);

#endif /* RTX_DAEMON_DAEMON_H */
