/*
 * jobs-impl.h - the job manager's internals, shared by its own files (daemon/jobs-*.c) and
 * included by no other module: its structs, constants, small helpers and the rtx__jobs_*
 * functions that one of its files calls in another. The contract is daemon/jobs.h.
 *
 * Files: jobs-lifecycle.c (start, recovery, drain, settings, stop), jobs-submit.c (Submit and
 * Cancel), jobs-decode.c (a request decoded into a runnable job), jobs-queue.c (the job index,
 * the device queues, state changes), jobs-watch.c (watchers and run records),
 * jobs-housekeeping.c (expiry sweeps, brownout ticks, learned costs), jobs-stats.c (stats,
 * pools, lanes), jobs-devices.c (device slots, job classes, the consumer "jobs" and the
 * workers' backends on the device layer, faults, load) and jobs-worker.c (the workers).
 *
 * DESIGN
 * One mutex (mu) guards the in-memory state: one SLA scheduler (scheduler/sched.h) per device
 * slot that runs jobs, an index of every job this process holds in memory (being admitted,
 * queued or running) keyed by id, the counters and the drain/stop flags. The schedulers are
 * not thread-safe by contract; every call on them is made under mu (they never allocate or
 * block, so the hold stays short). The store is never called with mu held: every journal
 * write is a synchronous commit, and holding mu across it would stall every other submitter
 * and worker.
 *
 * Queues. A job is bound to one device slot when it is admitted, and each slot's scheduler
 * holds exactly the jobs that slot's workers may run: a worker only ever dispatches from its
 * own device's scheduler, so placement holds by construction and a dispatch costs what the
 * scheduler's costs (EDF inside a lane, stride fair share across lanes). "cpu" jobs go to the
 * CPU's scheduler, "cuda:N" jobs to device N's, "cuda" and "auto" jobs to the usable GPU with
 * the fewest jobs per worker whose scheduler admits them ("auto" goes to the CPU while no GPU
 * is usable). The price of binding at admission: two GPUs do not steal each other's queued
 * work. The schedulers share one lane configuration (lane indices are the same everywhere);
 * each has executors = max_running = its device's worker count, its own admission estimate,
 * brownout state and learned costs (a graph runs at different speeds on a CPU and a GPU).
 * A SIGHUP's new lane settings reach every scheduler at once under mu (rtx_jobs_reconfigure),
 * all or none: a scheduler that cannot take them (out of memory for a raised bound) puts the
 * ones already changed back, which cannot fail since storage only grows.
 *
 * Admission runs before the journal insert, so a refused job (RTX_EOVERLOAD, with the
 * scheduler's reason and retry-after hint in the message) is never journaled and leaves no
 * trace but the scheduler's counters; only an admitted job is journaled and acknowledged.
 * Because the job is in its scheduler while its submitter journals it ("pending"), a worker
 * may dispatch it before the insert commits: the worker then marks it claimed and waits on
 * pending_cv until the submitter says whether the insert succeeded (queued: run it) or not
 * (dropped: the worker finishes the scheduler item as cancelled and frees the job; a drain
 * that began meanwhile puts it back in its queue). A cancel that races the insert (a client
 * that learnt the id from an idempotent repeat) is remembered and applied by the submitter
 * once the job is durable; so is an expiry.
 *
 * Deadlines: a job's deadline_unix_ms becomes a deadline on the scheduler's clock
 * (CLOCK_MONOTONIC; rtx__jobs_clock_hook in tests) at admission. The scheduler refuses a job
 * that cannot meet it, a worker's dispatch hands back an expired job instead of running it,
 * and a housekeeping thread sweeps expired jobs every HOUSEKEEP_MS so that their clients hear
 * of it while every worker is busy; all of them are journaled expired. The housekeeper also
 * ticks brownout and saves the learned costs every COST_SAVE_MS when they changed, and
 * rtx_jobs_stop saves them once more; rtx_jobs_start loads them. The device set's book keeps
 * them (device/device.h, "Learned costs"): a save puts every scheduler's costs into it under
 * the device's name and has it write the changed ones to the store (sched_costs); a load
 * reads each device's costs from it.
 *
 * A worker journals a job running before it executes it, so after a crash the journal tells
 * which jobs were interrupted; recovery then re-queues them or fails them by the job's restart
 * policy. A worker executes a job with a per-job cancel flag that the executor reads between
 * ops, journals the result and reports the run time to its scheduler (the cost's moving
 * average). rtx_jobs_cancel removes a queued job from its scheduler, or sets that flag for a
 * running job; drain past its grace and stop set it too but mark the job "interrupted", and an
 * interrupted job is left as the journal says (running, or queued if it had not started), for
 * recovery to handle at the next start by the job's restart policy. Jobs run at most once per
 * start; recovery is the only place that re-queues a job that was running.
 *
 * Decoded graphs, inputs and plans made for validation at admission are kept with the queued
 * job (up to CACHE_MAX_BYTES of request bytes in all) so a worker does not decode them again;
 * beyond that, and for recovered jobs, the worker decodes the journaled request. A job's cost
 * key is a hash of its graph's wire bytes and its inputs' dtypes and shapes; recovered jobs
 * have none (the scheduler's default cost).
 *
 * Plan reuse is the device layer's (device/device.h, "Plan cache"): one cache per device,
 * shared with serving, whose entries are keyed by the plan key and the backend that made them,
 * so a kept plan holds state of one worker's backend and is only ever run by that worker's
 * thread. A job's key is rtx_device_plan_key over its graph's wire bytes, its inputs' dtypes
 * and shapes and the planning limits (computed at decode, with the cost key). Admission still
 * plans every job (that plan is its validation); a worker whose device holds the key for its
 * backend takes the kept plan out (rtx_device_plan_take), runs it instead of the job's own and
 * gives it back (kept when the job succeeded, dropped when it failed); after a miss, a job
 * that succeeded hands its own plan to the cache (rtx_device_plan_keep) with its decoded graph
 * as the owner the release callback frees, since the plan points into it. A repeated graph so
 * replays on a GPU: run 1 node by node, run 2 captured, later runs launched (runtime/plan.c).
 * Kept plans hold memory charged to the consumers whose backends made them, so a job that
 * fails with RTX_ENOMEM while the device keeps plans runs once more after
 * rtx_device_plans_clear dropped them; a lost device's plans are cleared by the fault
 * listener. How each job that succeeded ran (mode, nodes, plan reused) is kept for the last
 * RTX_JOBS_RUNS_KEPT jobs in a ring indexed by job id (rmu, never held while calling out) for
 * rtx_jobs_get_run and the watchers; it is not journaled.
 *
 * Memory. The job manager is the consumer "jobs" of every device it runs workers on, with a
 * reservation of jobs_reserve of the device's budget (device.jobs_reserve); its workers'
 * backends charge it, and a job whose run the share refuses fails with RTX_ENOMEM, failure
 * code RESOURCE_EXHAUSTED and a reason naming the share. Failure codes (Job.failure_code,
 * journaled) are gRPC status names: RESOURCE_EXHAUSTED, UNAVAILABLE (a lost device, no device
 * can take the job, a restart under policy fail), INTERNAL (anything else).
 *
 * Warm-up is the device layer's: rtx_device_backend_new returns a GPU backend warmed up (a
 * tiny graph run node by node, then captured), so a worker's first job does not pay for the
 * backend's lazily made state; it happens in rtx_jobs_start, before the workers start.
 *
 * Watchers live in their own table (wmu, hashed by job id) so that publishing never holds mu.
 * A publisher reads the job back from the store (only when someone watches it) and calls each
 * watch's callback without wmu held, marking the watch "in callback"; rtx_jobs_unwatch marks
 * the watch removed and waits on wcv until its deliverer, which then frees it, clears that mark
 * (from inside the callback itself it only marks it, so it cannot wait for itself). Every
 * watch remembers the rank of the last state it got (queued < running < terminal) and never
 * gets an equal or lower one, so the snapshot that rtx_jobs_watch reads (after registering, so
 * no change can slip between) and a concurrent publication cannot arrive out of order or
 * twice.
 *
 * Admission limits: zero fields of rtx_jobs_options.limits take rtx_limits_default()'s value.
 *
 * Placement. Devices are slots, the same as the device set's: 0 the CPU, 1 + N CUDA device N.
 * Every job has a class: CPU, AUTO, GPU_ANY or GPU_N (CLS_GPU0 + N). Admission asks a usable
 * GPU worker's backend whether it supports every node (supports_node is a pure function of the
 * node, so calling it beside the worker's own use is safe); a job the GPU cannot run becomes
 * CPU when it asked for "auto" and is refused when it asked for a GPU. A worker checks again
 * before it journals the job running (recovered jobs and jobs whose decoded form was not
 * cached arrive unchecked): an "auto" job moves to the CPU's scheduler as CPU. "cuda" and
 * "auto" jobs go to the usable GPUs in the order rtx_devices_place gives (least work in flight
 * per backend, then most budget headroom); a job adds 1 to its device's load
 * (rtx_device_load_add) while it is in that device's scheduler, queued or running. Health is
 * the device layer's (rtx_device_healthy, shared with serving): after a failed job on a GPU
 * the worker calls rtx_device_check, which synchronizes the backend and, when the CUDA backend
 * answers RTX_EGPU (it kept a sticky error), marks the device unhealthy before the job is
 * journaled failed (a client that sees the failure sees the device unhealthy too); an
 * out-of-memory or other ordinary error leaves it usable. Devices never become healthy again
 * in a process. The device layer's fault listener (on_device_fault, whoever found the fault:
 * a job, a model's batch, a warm-up) wakes the workers: the workers of a lost device keep
 * dispatching from its scheduler, but move each job to another device ("auto" and "cuda"
 * jobs, when one can take them) or journal it failed with the reason it cannot be placed.
 */
#ifndef RTX_DAEMON_JOBS_IMPL_H
#define RTX_DAEMON_JOBS_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "daemon/jobs.h"
#include "rtx/v1/jobs.pb-c.h"

#include "kernels/cpu/backend-cpu.h"
#include "kernels/cuda/backend-cuda.h"
#include "rtx/v1/jobs.pb-c.h"
#include "runtime/backend.h"

#define MAX_LANES                                                                                 \
    ((int)(sizeof(((struct rtx_jobs_stats *)0)->lanes) / sizeof(struct rtx_lane_depth)))
#define CACHE_MAX_BYTES ((size_t)256 << 20) /* request bytes of decoded jobs kept in memory */
#define WATCH_BUCKETS 256                   /* a watch handle's low 8 bits: its bucket */
#define INDEX_MIN_BUCKETS 1024
#define HOUSEKEEP_MS 20    /* ms between sweeps of expired jobs (and brownout ticks) */
#define COST_SAVE_MS 10000 /* ms between saves of changed learned costs */
#define EXPIRE_BATCH 64    /* expired items taken per rtx_sched_expire call */
#define RUN_BUCKETS 1024   /* hash buckets of the run records (a power of two) */
static_assert(RTX_SCHED_MAX_LANES == 16, "struct rtx_jobs_stats holds 16 lanes");

static const char REASON_CANCELLED[] = "cancelled by request";
static const char REASON_EXPIRED[] = "deadline passed before the job started";
static const char REASON_RESTART[] = "interrupted by a daemon restart";

/* ------------------------------------------------------------------------------------------
 * Types
 * ---------------------------------------------------------------------------------------- */

/* A decoded job ready to run: its graph, the inputs in graph-input order, and its plan. */
struct prepared {
    struct rtx_graph *graph;
    int n_inputs;
    struct rtx_tensor **inputs;
    struct rtx_plan *plan;
    uint64_t cost_key; /* the graph's wire bytes and the inputs' dtypes and shapes, hashed */
    uint8_t plan_key[RTX_DEVICE_PLAN_KEY_LEN]; /* what the plan depends on (rtx_device_plan_key) */
};

/* The run of a job that succeeded (rtx_jobs_get_run), in a ring indexed by job id. */
struct run_rec {
    char id[RTX_JOB_ID_LEN]; /* "" while unused */
    struct rtx_jobs_run run;
    int hnext;               /* the next record of its bucket; -1: none */
};

/* Where an in-memory job is: being journaled by its submitter, queued in a scheduler, being
 * journaled as cancelled, expired or failed by the thread that took it out, with a worker;
 * or, for a job a worker dispatched while it was pending: journaled and about to be run by
 * that worker (claimed), or given up by its submitter to that worker (dropped: the journal
 * insert failed, or the job was cancelled or repeated meanwhile). */
enum job_where {
    JOB_PENDING,
    JOB_QUEUED,
    JOB_CANCELLING,
    JOB_RUNNING,
    JOB_CLAIMED,
    JOB_DROPPED,
};

/* Which workers may take a job (see DESIGN): CLS_GPU0 + N is CUDA device N only. */
enum job_class {
    CLS_CPU,
    CLS_AUTO,
    CLS_GPU_ANY,
    CLS_GPU0,
    CLS_COUNT = CLS_GPU0 + RTX_JOBS_MAX_GPUS,
};

#define DEV_CPU 0 /* device slot of the CPU; CUDA device N is slot 1 + N */

#define MAX_DEVS (1 + RTX_JOBS_MAX_GPUS)

struct job {
    char id[RTX_JOB_ID_LEN];
    int lane;                /* lane index, the same in every scheduler */
    enum job_class cls;      /* who may take it now (under mu once queued) */
    enum job_class asked;    /* what the submitter asked for (journaled as requested_device) */
    int dev;                 /* under mu: the device slot whose scheduler holds it */
    uint64_t handle;         /* under mu: its scheduler handle while in_sched */
    bool in_sched;           /* under mu: queued or running in devs[dev].sched */
    bool claimed;            /* under mu: dispatched while pending; a worker waits for it */
    bool expired;            /* under mu: expired while pending; its submitter journals it */
    uint64_t cost_key;       /* 0: none (the scheduler's default cost) */
    int64_t deadline_ms;     /* unix ms; 0 = none */
    int64_t deadline_ns;     /* the same on the scheduler's clock; 0 = none */
    enum job_where where;    /* under mu */
    struct prepared *prep;   /* NULL: decode the journaled request when it runs */
    size_t cached_bytes;     /* bytes charged to rtx_jobs.cache_bytes */
    volatile int cancel;     /* the executor's flag; set with __atomic_store_n */
    bool cancel_requested;   /* rtx_jobs_cancel asked (under mu) */
    bool interrupted;        /* drain past grace or stop (under mu) */
    struct job *next;        /* a list of expired jobs being journaled */
    struct job *hnext;       /* index chain */
};

struct lane {
    char *name;
    int queued, running; /* over every device */
};

struct worker {
    struct rtx_jobs *j;
    pthread_t thread;
    bool started;
    int dev;             /* device slot */
    struct rtx_backend *be;
    struct job *current; /* under mu */
};

/* A device slot: the CPU or one CUDA device listed at start (the same slot as in the device
 * set). Health, plans and memory are the device layer's (device/device.h). */
struct dev {
    char name[24];         /* "cpu", "cuda:N" */
    int cuda;              /* CUDA index; -1 for the CPU */
    struct rtx_device *d;  /* the device layer's device */
    struct rtx_device_consumer *consumer; /* "jobs" on it; NULL when it has no workers */
    size_t reserve_bytes;  /* bytes: the consumer's reservation */
    int n_workers;         /* workers on it (fixed after start) */
    int64_t jobs_started;  /* under mu */
    size_t peak_bytes;     /* under mu: largest job peak (reported for the CPU) */
    struct rtx_sched *sched; /* under mu: its queue; NULL when it has no workers */
    int queued, running;   /* under mu: jobs in sched */
};

struct watch {
    uint64_t handle;
    char job[RTX_JOB_ID_LEN];
    rtx_jobs_watch_cb cb;
    void *ctx;
    int rank;            /* rank of the last state delivered; 0 = none yet */
    bool in_cb;          /* a thread is running cb */
    pthread_t cb_thread; /* that thread */
    bool removed;        /* unwatched: no more deliveries; freed after the running one */
    struct watch *next;
};

struct rtx_jobs {
    struct rtx_store *store;
    struct rtx_limits limits;
    int64_t max_queued;
    int cpu_threads;
    int n_lanes;
    struct lane lanes[MAX_LANES];
    int default_lane;
    struct rtx_sched_config sched_cfg; /* the lanes' settings every scheduler starts from */

    pthread_mutex_t mu;
    pthread_cond_t work_cv;    /* a job was queued, or stop */
    pthread_cond_t idle_cv;    /* a worker finished a job */
    pthread_cond_t pending_cv; /* a submitter settled a pending job that a worker claimed */
    pthread_cond_t hk_cv;      /* wakes the housekeeper (stop) */
    enum rtx_restart_policy default_policy;
    bool draining, stopping;
    int n_queued;  /* jobs in the schedulers' queues (pending ones included) */
    int n_running; /* jobs with a worker */
    size_t cache_bytes; /* bytes */
    struct job **index;
    size_t index_cap, index_n;
    int64_t succeeded, failed, cancelled, expired;
    int n_workers;
    struct worker *workers;
    int n_cpu_workers; /* workers[0..n_cpu_workers) are the CPU's */
    pthread_t hk_thread;
    bool hk_started;
    bool costs_dirty; /* under mu: a run time was learned since the last save */

    int n_devs; /* slots in devs: the CPU and every listed CUDA device up to the maximum */
    struct dev devs[MAX_DEVS];
    enum job_class default_cls; /* class of a job that names no device */
    struct rtx_devices *devices; /* the device set (not owned) */
    double jobs_reserve;     /* of each device's budget reserved for the consumer "jobs" */
    bool on_fault;           /* the fault listener is registered */

    pthread_mutex_t rmu;     /* guards the run records (never held while calling out) */
    struct run_rec *runs;    /* RTX_JOBS_RUNS_KEPT records, a ring */
    int runs_next;           /* the record the next run takes */
    int run_heads[RUN_BUCKETS]; /* the newest record of each bucket; -1: none */

    pthread_mutex_t wmu;
    pthread_cond_t wcv; /* a callback returned */
    struct watch *watches[WATCH_BUCKETS];
    uint64_t watch_seq;
};

/* ------------------------------------------------------------------------------------------
 * Small helpers
 * ---------------------------------------------------------------------------------------- */

/* The scheduler's clock, ns: CLOCK_MONOTONIC, or the test hook. */
static inline int64_t sched_now(void) {
    return rtx__jobs_clock_hook ? rtx__jobs_clock_hook() : rtx_mono_ns();
}

/* CLOCK_MONOTONIC in ns (run times are measured on it, whatever the scheduler's clock). */
static inline int64_t mono_ns(void) { return rtx_mono_ns(); }

/* An absolute CLOCK_MONOTONIC time ms from now, for pthread_cond_timedwait. */
static inline struct timespec mono_after(int64_t ms) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    return ts;
}

static inline int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline int64_t mono_ms(void) { return rtx_mono_ns() / 1000000; }

static inline uint64_t hash_id(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Appends ", name" (or "name" at the start) to buf, truncating silently. */
static inline void list_append(char *buf, size_t len, const char *name) {
    size_t used = strlen(buf);
    if (used + 1 >= len) return;
    snprintf(buf + used, len - used, "%s%s", used ? ", " : "", name);
}

/* ------------------------------------------------------------------------------------------
 * Functions one file of the job manager calls in another (documented where they are defined)
 * ---------------------------------------------------------------------------------------- */

/* jobs-lifecycle.c */
int rtx__jobs_find_lane(const struct rtx_jobs *j, const char *name);

/* jobs-decode.c */
int rtx__jobs_unpack_request(const void *data, size_t len, Rtx__V1__SubmitRequest **out,
                             struct rtx_err *err);
void rtx__jobs_free_request(Rtx__V1__SubmitRequest *m);
void rtx__jobs_prepared_free(struct prepared *p);
int rtx__jobs_prepare(const Rtx__V1__SubmitRequest *m, const struct rtx_limits *lim,
                      struct prepared **out, struct rtx_err *err);
int rtx__jobs_load_prepared(struct rtx_jobs *j, const char *id, struct prepared **out,
                            struct rtx_err *err);

/* jobs-queue.c */
void rtx__jobs_log_state(struct rtx_jobs *j, const char *id, int lane, enum rtx_job_state state,
                         const char *reason, double run_ms);
void rtx__jobs_index_add(struct rtx_jobs *j, struct job *job);
struct job *rtx__jobs_index_find(struct rtx_jobs *j, const char *id);
void rtx__jobs_index_remove(struct rtx_jobs *j, struct job *job);
int rtx__jobs_sched_place(struct rtx_jobs *j, struct job *job, struct rtx_err *err);
void rtx__jobs_unqueued(struct rtx_jobs *j, struct job *job);
void rtx__jobs_sched_remove(struct rtx_jobs *j, struct job *job);
void rtx__jobs_finish_item(struct rtx_jobs *j, struct job *job, enum rtx_sched_outcome outcome,
                           int64_t run_ns);
void rtx__jobs_forget(struct rtx_jobs *j, struct job *job);
void rtx__jobs_job_free(struct job *job);
void rtx__jobs_raise_cancel(struct job *job);
int rtx__jobs_interrupt_running(struct rtx_jobs *j);
int rtx__jobs_change_state(struct rtx_jobs *j, const char *id, int lane, enum rtx_job_state st,
                           const char *code, const char *reason, struct rtx_err *err);
int rtx__jobs_cancel_journaled(struct rtx_jobs *j, const char *id, int lane, struct rtx_err *err);
const char *rtx__jobs_failure_code(int rc);
void rtx__jobs_fail_job(struct rtx_jobs *j, struct job *job, const char *code, const char *reason);

/* jobs-watch.c */
void rtx__jobs_record_run(struct rtx_jobs *j, const char *id, const struct rtx_jobs_run *run);
void rtx__jobs_forget_run(struct rtx_jobs *j, const char *id);
void rtx__jobs_publish(struct rtx_jobs *j, const char *id);

/* jobs-devices.c */
void rtx__jobs_class_text(enum job_class c, char *buf, size_t len);
int rtx__jobs_class_parse(const struct rtx_jobs *j, const char *s, enum job_class *out,
                          struct rtx_err *err);
bool rtx__jobs_dev_usable(const struct dev *d);
int rtx__jobs_placement_error(const struct rtx_jobs *j, enum job_class c, struct rtx_err *err);
struct rtx_backend *rtx__jobs_gpu_backend_for(const struct rtx_jobs *j, enum job_class c);
int rtx__jobs_first_unsupported(struct rtx_backend *be, const struct rtx_graph *g);
void rtx__jobs_unsupported_text(struct rtx_backend *be, const struct rtx_graph *g, int ni,
                                char *buf, size_t len);
int rtx__jobs_candidates(const struct rtx_jobs *j, enum job_class c, int out[MAX_DEVS]);
void rtx__jobs_load_add(struct rtx_jobs *j, struct job *job, int64_t delta);
struct rtx_device_consumer_info rtx__jobs_share(const struct dev *dv);
int rtx__jobs_devices_init(struct rtx_jobs *j, const struct rtx_jobs_options *o,
                           struct rtx_err *err);
int rtx__jobs_workers_new(struct rtx_jobs *j, int d, struct rtx_err *err);
void rtx__jobs_devices_close(struct rtx_jobs *j);
struct rtx_sched_config rtx__jobs_device_sched_config(const struct rtx_sched_config *cfg,
                                                      const struct dev *dv);
int rtx__jobs_scheds_new(struct rtx_jobs *j, struct rtx_err *err);

/* jobs-worker.c */
void *rtx__jobs_worker_main(void *arg);

/* jobs-housekeeping.c */
void rtx__jobs_save_costs(struct rtx_jobs *j);
void rtx__jobs_load_costs(struct rtx_jobs *j);
void *rtx__jobs_housekeeper_main(void *arg);

#endif /* RTX_DAEMON_JOBS_IMPL_H */
