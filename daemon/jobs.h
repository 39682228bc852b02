/*
 * jobs.h - the job manager: admission of Submit requests (decode, validate, journal, queue),
 * worker threads that run jobs on their own backends, cancellation, watchers for Wait,
 * recovery of unfinished jobs at start, drain, placement of jobs on the CPU or on CUDA devices,
 * device health, and the memory pool statistics of the devices.
 *
 * DESIGN
 * A job is acknowledged only after rtx_store_job_insert returned (it is durable). Queueing is
 * the SLA scheduler's (scheduler/sched.h), one scheduler per device that runs jobs: a job is
 * admitted into a lane (its request's lane, else default_lane) of the scheduler of the device
 * it is placed on, with its deadline and a cost key (a hash of its graph and input shapes)
 * whose learned run time feeds admission control. A job the scheduler refuses (the lane is
 * full or shed by brownout, or its deadline cannot be met) is refused at once with
 * RTX_EOVERLOAD and a retry-after hint in the message, and is never journaled. Workers
 * dispatch from their device's scheduler (earliest deadline first in a lane, weighted fair
 * share across lanes); a job whose deadline passes while queued is journaled expired without
 * running. Learned run times are kept in the device set's book of learned costs (persisted
 * in the store's sched_costs when the book was opened on it) and loaded from it at start. A
 * worker marks a job running in the journal before it executes it, so after a crash the
 * journal tells which jobs were interrupted; recovery then re-queues them or fails them by the
 * job's restart policy. Each state change is journaled first and then published to watchers.
 *
 * Placement. The job manager runs on the device layer (device/device.h): the CPU has
 * jobs.workers workers; every CUDA device healthy at start has gpu_workers_per_device more,
 * each with its own backend made by the device layer (its own stream and pools, charged to the
 * consumer "jobs", whose reservation is jobs_reserve of the device's budget). A job asks for
 * "auto" (a healthy GPU when there is one, else the CPU), "cpu", "cuda" (any healthy GPU) or
 * "cuda:N"; "" takes default_device. A job is journaled with what it asked for and, when it
 * starts, with the device it runs on. A job whose graph has a node the CUDA backend cannot run
 * goes to the CPU when it asked for "auto" and is refused at Submit when it asked for a GPU. A
 * failed job whose device then answers with a sticky error (the backend stays unusable) marks
 * the device unhealthy for every consumer (and a fault found by serving does so for jobs): its
 * workers take no more jobs, "auto" jobs go to the other GPUs or the CPU, and queued jobs that
 * can no longer be placed (asked for that device, or for "cuda" with no healthy GPU left) fail
 * with the reason.
 *
 * Plan reuse. A worker runs a job on the plan its device's cache kept for its backend when
 * the cache holds the job's key (rtx_device_plan_key: the graph's wire bytes, the inputs'
 * dtypes and shapes, the planning limits), so on a GPU the second such job captures a CUDA
 * graph and later ones replay it (runtime/plan.c). A failed job has a failure code
 * (Job.failure_code, journaled): RESOURCE_EXHAUSTED when it ran out of memory past the jobs
 * share (its reason names the share), UNAVAILABLE when its device was lost or no device could
 * take it, INTERNAL otherwise. How each job ran (rtx_jobs_get_run) is kept in memory for the
 * last RTX_JOBS_RUNS_KEPT runs; it is not journaled.
 */
#ifndef RTX_DAEMON_JOBS_H
#define RTX_DAEMON_JOBS_H

#include "device/device.h"
#include "kernels/cuda/backend-cuda.h"
#include "runtime/mem-pool.h"
#include "scheduler/sched.h"
#include "store/store.h"

struct rtx_jobs;

#define RTX_JOBS_MAX_GPUS 16 /* CUDA devices the job manager runs jobs on (the first ones) */

struct rtx_jobs_options {
    struct rtx_store *store;
    int workers;                        /* worker threads, >= 1 */
    int cpu_threads;                    /* CPU backend threads per worker, >= 1: reported
                                           only, the device set's cpu_threads makes them */
    struct rtx_limits limits;           /* graph and tensor limits for admission */
    int64_t max_queued;                 /* Submit fails with RTX_EUNAVAILABLE beyond this */
    enum rtx_restart_policy default_restart_policy;
    int n_lanes;
    const char *const *lanes;           /* the lanes, highest first (brownout sheds the last) */
    const char *default_lane;
    /* The lanes' settings and the scheduler's knobs (NULL: rtx_sched_config_init's); exactly
     * the lanes named above are kept, in that order (rtx_sched_config_select_lanes: a lane it
     * does not define gets a new lane's settings). Each device's scheduler overrides executors
     * and max_running with the device's worker count. rtx_jobs_reconfigure changes them. */
    const struct rtx_sched_config *sched;
    /* The device set (device/device.h, required): it owns the devices' backends, memory
     * budgets, plan caches and health. The job manager registers one consumer "jobs" on
     * each device it runs workers on, the CPU and the first RTX_JOBS_MAX_GPUS CUDA devices
     * healthy at start; the set must outlive the job manager. The CPU workers' backends
     * have the set's cpu_threads threads (main.c makes the set with jobs.cpu_threads).
     * Learned costs are read from and saved through the set's book (rtx_devices_costs_open
     * it on the store first, or they are not kept across a restart). */
    struct rtx_devices *devices;
    double jobs_reserve;                /* of each device's budget reserved for jobs, [0, 1]
                                           (setting device.jobs_reserve); beyond it jobs
                                           borrow from the unreserved rest */
    int gpu_workers_per_device;         /* workers per healthy GPU, 0: run nothing on GPUs */
    const char *default_device;         /* for jobs that name none: "auto" (also NULL),
                                           "cpu", "cuda" or "cuda:N" */
};

#define RTX_JOBS_RUNS_KEPT 4096      /* runs rtx_jobs_get_run remembers (the latest) */

/* Recovers unfinished jobs from the store (queued: queued again; running: by policy) and
 * starts the workers. */
int rtx_jobs_start(const struct rtx_jobs_options *opt, struct rtx_jobs **out,
                   struct rtx_err *err);
/* Stops the workers after their current job (which stays "running" in the journal unless it
 * finished) and frees everything. NULL: no-op. A job still running is interrupted at its next
 * op boundary, as by rtx_jobs_wait_idle past its grace; drain and wait first to let it end. */
void rtx_jobs_stop(struct rtx_jobs *j);

/* Admits a serialized rtx.v1.SubmitRequest: decode (RTX_EFORMAT), graph + inputs validation
 * with a plan (RTX_EGRAPH / RTX_EINVAL / RTX_ELIMIT naming the problem), unknown lane
 * (RTX_EINVAL), the device: a malformed name, a CUDA device this host does not have or a graph
 * the asked-for GPU cannot run (RTX_EINVAL), a device that is unhealthy or has no workers
 * (RTX_EUNAVAILABLE); draining or jobs.max_queued reached (RTX_EUNAVAILABLE); admission
 * control (RTX_EOVERLOAD: "overloaded on DEVICE (REASON): ...; retry after N ms", REASON being
 * lane_full, deadline, shed or full), journal (store errors). Refused jobs are not journaled.
 * On 0 the job is durable and queued; job_id is set, *deduplicated tells an idempotent repeat
 * (which the scheduler counted admitted and then cancelled). */
int rtx_jobs_submit(struct rtx_jobs *j, const void *request, size_t len,
                    char job_id[RTX_JOB_ID_LEN], bool *deduplicated, struct rtx_err *err);

/* Cancels a job: a queued job becomes cancelled at once; a running job is stopped at its next
 * op boundary and becomes cancelled; a terminal job is left as it is. *out (may be NULL)
 * receives the job as it is after the call. RTX_ENOTFOUND for an unknown id. */
int rtx_jobs_cancel(struct rtx_jobs *j, const char *id, struct rtx_job_info *out,
                    struct rtx_err *err);

/* How a job's run executed, as the process that ran it saw it (not journaled). */
struct rtx_jobs_run {
    enum rtx_exec_mode mode;            /* plain, fixed, captured or replayed (runtime.h) */
    int nodes_run;
    bool plan_reused;                   /* its worker had kept the plan from an earlier job */
    char device[24];                    /* where it ran: "cpu", "cuda:0" */
};

/* The run of a job that succeeded in this process: 0 and *out, or RTX_ENOTFOUND when the job
 * has not succeeded here, or succeeded more than RTX_JOBS_RUNS_KEPT runs ago. Thread-safe; it
 * may be called from a watch callback. */
int rtx_jobs_get_run(struct rtx_jobs *j, const char *id, struct rtx_jobs_run *out);

/* Calls cb(ctx, job, run, last) with the job's current state and then at each state change,
 * from the thread that made the change, until a terminal state has been delivered (then the
 * watch ends by itself and cb gets `last` = true). run is the job's rtx_jobs_get_run when it
 * has one, else NULL. *watch receives a handle for rtx_jobs_unwatch. RTX_ENOTFOUND for an
 * unknown id. cb must not block and must not call back into rtx_jobs (rtx_jobs_get_run
 * excepted). */
typedef void (*rtx_jobs_watch_cb)(void *ctx, const struct rtx_job_info *job,
                                  const struct rtx_jobs_run *run, bool last);
int rtx_jobs_watch(struct rtx_jobs *j, const char *id, rtx_jobs_watch_cb cb, void *ctx,
                   uint64_t *watch, struct rtx_err *err);
/* Ends a watch early (client went away). After it returns cb is not running and will not be
 * called again. Unknown or finished handles are ignored. */
void rtx_jobs_unwatch(struct rtx_jobs *j, uint64_t watch);

/* Stops admitting jobs and starting queued ones; returns at once. rtx_jobs_wait_idle then
 * waits up to grace_ms for running jobs; past it, running jobs are interrupted (left running
 * in the journal, so the next start applies their restart policy). */
void rtx_jobs_drain(struct rtx_jobs *j, int *running, int *queued);
void rtx_jobs_wait_idle(struct rtx_jobs *j, int grace_ms);

/* New settings after SIGHUP. */
void rtx_jobs_set_restart_policy(struct rtx_jobs *j, enum rtx_restart_policy p);
/* New lane settings and scheduler knobs after SIGHUP: every device's scheduler takes sched's
 * (rtx_sched_reconfigure, under the job manager's lock), keeping its executors and
 * max_running (the device's worker count). sched must have the lanes the job manager started
 * with, in the same order, and the same cost_keys. All or nothing: on an error (RTX_EINVAL
 * naming the difference, RTX_ENOMEM for a raised queue bound) every scheduler keeps the
 * settings it had. Queued and running jobs stay where they are. */
int rtx_jobs_reconfigure(struct rtx_jobs *j, const struct rtx_sched_config *sched,
                         struct rtx_err *err);

struct rtx_lane_depth {
    const char *lane;
    int queued, running;
};
/* A device jobs run on, as the job manager sees it now (its plan cache and budget as a whole
 * are the device layer's: rtx_device_info). */
struct rtx_jobs_device {
    char name[24];                      /* "cpu", "cuda:0" */
    int cuda_index;                     /* CUDA device index; -1 for the CPU */
    int workers;                        /* job workers on it */
    bool healthy;                       /* the device layer's health (rtx_device_healthy) */
    char detail[256];                   /* why not healthy; "" when healthy */
    int64_t jobs_started;               /* jobs started on it since start */
    /* Its budget share: the consumer "jobs" (device/device.h; 0s without workers). */
    size_t reserved_bytes;              /* bytes: device.jobs_reserve of the budget */
    size_t used_bytes;                  /* bytes charged to jobs now */
    uint64_t refusals;                  /* charges refused for want of share */
};

struct rtx_jobs_stats {
    int n_lanes;
    struct rtx_lane_depth lanes[16];
    int64_t succeeded, failed, cancelled, expired; /* since start */
    bool draining;
    int workers;                        /* CPU workers */
    int cpu_threads;                    /* per CPU worker */
    int n_devices;                      /* the CPU, then each CUDA device listed at start */
    struct rtx_jobs_device devices[1 + RTX_JOBS_MAX_GPUS];
};
void rtx_jobs_get_stats(struct rtx_jobs *j, struct rtx_jobs_stats *st);

/* Pool statistics of one device (rows of Admin.Pools). */
struct rtx_jobs_pool_row {
    char device[32];                    /* "cuda:0", "cuda:0/pinned", "cpu" */
    const char *kind;                   /* "cuda", "pinned", "cpu" (static strings) */
    int pools;                          /* caching pools summed (one per worker); 0: the CPU */
    /* Sums over those pools of their totals. Peaks add up the pools' own peaks (exact with
     * one worker per device, an upper bound with more); fragmentation is recomputed from
     * the summed free bytes and the largest free block of any of them. The CPU row has no
     * pool: only bytes_allocated_peak is set, to the largest peak of a job run on the CPU. */
    struct rtx_mem_pool_kind_stats total;
    size_t cap_bytes;                   /* bytes: the cap of each pool, 0 = none */
    bool healthy;
    char detail[256];                   /* why not healthy; for the CPU, what the row means */
};
#define RTX_JOBS_MAX_POOL_ROWS (1 + 2 * RTX_JOBS_MAX_GPUS)

/* Fills rows[0..*n) (at most max rows): for each CUDA device with workers its device pool and
 * its pinned pool, then the CPU. RTX_EINVAL for bad arguments, or the error of reading a pool. */
int rtx_jobs_get_pools(struct rtx_jobs *j, struct rtx_jobs_pool_row *rows, int max, int *n,
                       struct rtx_err *err);

/* The schedulers of the devices that run jobs (rows of Admin.Lanes). */
struct rtx_jobs_lane_device {
    char device[24];              /* "cpu", "cuda:0" */
    int workers;                  /* its executors */
    bool healthy;
    struct rtx_sched_stats stats; /* its lanes, in lane order, and brownout state */
};
struct rtx_jobs_lanes {
    char default_lane[RTX_SCHED_LANE_NAME_MAX + 1];
    int n_devices;
    struct rtx_jobs_lane_device devices[1 + RTX_JOBS_MAX_GPUS];
};
/* A snapshot of every device scheduler (the CPU first, then each CUDA device with workers);
 * also ticks their brownout state. *out is large (about 80 KiB): allocate it. */
void rtx_jobs_get_lanes(struct rtx_jobs *j, struct rtx_jobs_lanes *out);

/* Test hook: when set, rtx_jobs_submit calls it after queuing a new job and before returning
 * (tests use it to let a worker finish the job first). NULL in production. */
extern void (*rtx__jobs_after_enqueue_hook)(void);
/* Test hook: the schedulers' clock in ns (deadlines, waits, expiry, brownout); NULL (the
 * default): CLOCK_MONOTONIC. Set it before rtx_jobs_start; run times are always measured on
 * CLOCK_MONOTONIC. */
extern int64_t (*rtx__jobs_clock_hook)(void);

#endif /* RTX_DAEMON_JOBS_H */
