/*
 * jobs.c - the job manager: admission of Submit requests, worker threads, cancellation,
 * watchers, recovery at start and drain (the contract is daemon/jobs.h).
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
 * ticks brownout and saves the learned costs (sched_costs in the store) every COST_SAVE_MS
 * when they changed, and rtx_jobs_stop saves them once more; rtx_jobs_start loads them.
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
 * Plan reuse. Each worker keeps the plans of the jobs it ran in a small LRU cache (struct
 * plan_cache): per worker and not per device, because a plan holds state of one backend (the
 * uploaded initializers, and on a GPU its fixed buffers and captured CUDA graph) and a worker
 * is one thread with one backend, so a kept plan is only ever run by one job at a time. The key
 * is a SHA-256 (OpenSSL EVP, the digest the store addresses outputs by) of the graph's wire
 * bytes, the inputs' dtypes and shapes and the planning limits, which is everything
 * rtx_plan_new reads: a graph with the same name and other content, or other input shapes,
 * misses. An entry owns the job's decoded graph, since the plan points into it. Admission
 * still plans every job (that plan is its validation); a worker that holds the key runs the
 * kept plan instead of the job's own, which is what lets a repeated graph replay on a GPU:
 * run 1 of a plan goes node by node, run 2 captures a CUDA graph, later runs launch it
 * (runtime/plan.c). A kept plan is taken out of the cache while its job runs and put back
 * first (most recently used) when the job succeeded; a plan whose job failed is dropped. After
 * a miss the job's own graph and plan move into the cache. The cache is bounded by count
 * (jobs.plan_cache; 0 turns it off) and by the bytes its plans may hold
 * (jobs.plan_cache_bytes: each plan's initializers, arena, inputs and outputs), least recently
 * used dropped first; a plan larger than the byte bound is not kept. On a GPU those plans hold
 * device memory, so a job that fails with RTX_ENOMEM while its worker keeps plans is run once
 * more after the worker dropped them all. A worker whose device was lost drops its plans; a
 * backend is never made again in a process, so no other reset exists. How each job that
 * succeeded ran (mode, nodes, plan reused) is kept for the last RTX_JOBS_RUNS_KEPT jobs in a
 * ring indexed by job id (rmu, never held while calling out) for rtx_jobs_get_run and the
 * watchers; it is not journaled.
 *
 * Warm-up. A GPU worker first runs a tiny graph twice (matmul, bias add, tanh on a 1 MiB
 * input: node by node, then captured) before it takes jobs, so that the lazily made state of
 * its backend - kernels loaded, cuBLASLt's algorithm choice, device and pinned pool segments,
 * the first graph capture - exists before the first job, and logs how long that took. Jobs
 * placed on the device meanwhile wait in its queue. A warm-up that fails with a sticky device
 * error marks the device unhealthy, as a failed job would.
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
 * Placement. Devices are slots: 0 the CPU, 1 + N CUDA device N. Every job has a class: CPU,
 * AUTO, GPU_ANY or GPU_N (CLS_GPU0 + N). Admission asks a usable GPU worker's backend whether
 * it supports every node (supports_node is a pure function of the node, so calling it beside
 * the worker's own use is safe); a job the GPU cannot run becomes CPU when it asked for "auto"
 * and is refused when it asked for a GPU. A worker checks again before it journals the job
 * running (recovered jobs and jobs whose decoded form was not cached arrive unchecked): an
 * "auto" job moves to the CPU's scheduler as CPU. After a failed job on a GPU, the worker
 * synchronizes its backend: the CUDA backend answers RTX_EGPU from then on when the failure
 * was a sticky error (it has kept the fault), so the device is marked unhealthy before the job
 * is journaled failed (a client that sees the failure sees the device unhealthy too); an
 * out-of-memory or other ordinary error leaves the backend usable. Devices never become
 * healthy again in a process: a sticky error poisons the CUDA context until the process
 * exits. The workers of a lost device keep dispatching from its scheduler, but move each job
 * to another device ("auto" and "cuda" jobs, when one can take them) or journal it failed
 * with the reason it cannot be placed.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>
#include <protobuf-c/protobuf-c.h>

#include "daemon/jobs.h"

void (*rtx__jobs_after_enqueue_hook)(void);
int64_t (*rtx__jobs_clock_hook)(void);
#include "daemon/log.h"
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
#define PLAN_KEY_LEN 32    /* bytes of a plan key: a SHA-256 */
#define RUN_BUCKETS 1024   /* hash buckets of the run records (a power of two) */
#define WARMUP_ROWS 512    /* the warm-up input is f32[WARMUP_ROWS, WARMUP_ROWS]: 1 MiB, the
                              size from which the CUDA backend stages copies in pinned memory */
#define WARMUP_COLS 16     /* columns of the warm-up weight */

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
    uint8_t plan_key[PLAN_KEY_LEN]; /* what the plan depends on, SHA-256 (plan_key_of) */
};

/* A plan a worker kept (see DESIGN), with the decoded graph it points into. */
struct cached_plan {
    uint8_t key[PLAN_KEY_LEN];
    struct rtx_graph *graph;         /* owned: the plan points into it */
    struct rtx_plan *plan;           /* owned */
    size_t bytes;                    /* bytes it may hold: initializers, arena, inputs, outputs */
    struct cached_plan *prev, *next; /* the LRU list, most recently used first */
};

/* The plans a worker kept. Only the worker's own thread touches it (and destroy, after the
 * workers were joined). */
struct plan_cache {
    int max_plans;                   /* 0: off */
    size_t max_bytes;                /* bytes; 0: no bound but the count */
    int n;
    size_t bytes;                    /* bytes: the sum of the entries' */
    struct cached_plan *head, *tail;
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
    struct plan_cache plans; /* its thread's only */
    int kept_plans;      /* under mu: plans.n as of its last change */
    size_t kept_bytes;   /* under mu: plans.bytes as of its last change */
};

/* A device slot: the CPU or one CUDA device listed at start. */
struct dev {
    char name[24];         /* "cpu", "cuda:N" */
    int cuda;              /* CUDA index; -1 for the CPU */
    bool healthy;          /* under mu; never true again once false */
    char detail[256];      /* under mu: why not healthy */
    int n_workers;         /* workers on it (fixed after start) */
    int64_t jobs_started;  /* under mu */
    size_t peak_bytes;     /* under mu: largest job peak (reported for the CPU) */
    struct rtx_sched *sched; /* under mu: its queue; NULL when it has no workers */
    int queued, running;   /* under mu: jobs in sched */
    int64_t plan_hits, plan_misses, plan_evictions; /* under mu: its workers' plan caches */
    int workers_warm;      /* under mu: workers whose warm-up ended */
    double warmup_ms;      /* under mu: ms, the longest of those warm-ups */
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
    char no_gpu_why[256];    /* why no CUDA device is listed ("" when one is) */
    enum job_class default_cls; /* class of a job that names no device */
    size_t gpu_pool_cap;     /* bytes */
    const struct rtx_jobs_gpu_i *gpu_iface;
    void *gpu_ctx;
    int plan_cache;          /* plans kept per worker, 0: none */
    size_t plan_cache_bytes; /* bytes per worker, 0: no bound but the count */

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
static int64_t sched_now(void) {
    if (rtx__jobs_clock_hook) return rtx__jobs_clock_hook();
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* CLOCK_MONOTONIC in ns (run times are measured on it, whatever the scheduler's clock). */
static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* An absolute CLOCK_MONOTONIC time ms from now, for pthread_cond_timedwait. */
static struct timespec mono_after(int64_t ms) {
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

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint64_t hash_id(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int state_rank(enum rtx_job_state s) {
    if (rtx_job_state_is_terminal(s)) return 3;
    return s == RTX_JOB_RUNNING ? 2 : 1;
}

static void log_state(struct rtx_jobs *j, const char *id, int lane, enum rtx_job_state state,
                      const char *reason, double run_ms) {
    enum rtx_log_level level = state == RTX_JOB_FAILED ? RTX_LOG_WARN : RTX_LOG_INFO;
    const char *lname = j->lanes[lane].name, *sname = rtx_job_state_name(state);
    if (state == RTX_JOB_SUCCEEDED) {
        char ms[32];
        snprintf(ms, sizeof ms, "%.3f", run_ms);
        rtx_log(level, "job state", "job", id, "lane", lname, "state", sname, "run_ms", ms, NULL);
    } else if (reason && reason[0]) {
        rtx_log(level, "job state", "job", id, "lane", lname, "state", sname, "reason", reason,
                NULL);
    } else {
        rtx_log(level, "job state", "job", id, "lane", lname, "state", sname, NULL);
    }
}

/* Appends ", name" (or "name" at the start) to buf, truncating silently. */
static void list_append(char *buf, size_t len, const char *name) {
    size_t used = strlen(buf);
    if (used + 1 >= len) return;
    snprintf(buf + used, len - used, "%s%s", used ? ", " : "", name);
}

/* ------------------------------------------------------------------------------------------
 * Devices and job classes
 * ---------------------------------------------------------------------------------------- */

/* The requested_device text of a class: "cpu", "auto", "cuda", "cuda:N". */
static void class_text(enum job_class c, char *buf, size_t len) {
    if (c == CLS_CPU)
        snprintf(buf, len, "cpu");
    else if (c == CLS_AUTO)
        snprintf(buf, len, "auto");
    else if (c == CLS_GPU_ANY)
        snprintf(buf, len, "cuda");
    else
        snprintf(buf, len, "cuda:%d", (int)(c - CLS_GPU0));
}

/* "this host has no CUDA device (why)" or "this host lists N CUDA device(s)". */
static void host_gpus_text(const struct rtx_jobs *j, char *buf, size_t len) {
    int n = j->n_devs - 1;
    if (n == 0)
        snprintf(buf, len, "this host has no CUDA device (%.150s)", j->no_gpu_why);
    else if (n == 1)
        snprintf(buf, len, "this host lists 1 CUDA device, cuda:0");
    else
        snprintf(buf, len, "this host lists %d CUDA devices, cuda:0 to cuda:%d", n, n - 1);
}

/* Parses a device name ("auto", "cpu", "cuda", "cuda:N"); whether the device can take jobs is
 * placement_error's business. RTX_EINVAL naming the problem. */
static int class_parse(const struct rtx_jobs *j, const char *s, enum job_class *out,
                       struct rtx_err *err) {
    if (strcmp(s, "auto") == 0) {
        *out = CLS_AUTO;
    } else if (strcmp(s, "cpu") == 0) {
        *out = CLS_CPU;
    } else if (strcmp(s, "cuda") == 0) {
        *out = CLS_GPU_ANY;
    } else if (strncmp(s, "cuda:", 5) == 0) {
        const char *num = s + 5;
        size_t len = strlen(num);
        if (len == 0 || len > 6 || strspn(num, "0123456789") != len)
            return rtx_err_set(err, RTX_EINVAL,
                               "device '%.40s': 'cuda:' must be followed by a device index", s);
        long n = strtol(num, NULL, 10);
        if (n >= RTX_JOBS_MAX_GPUS || 1 + n >= j->n_devs) {
            char host[200];
            host_gpus_text(j, host, sizeof host);
            return rtx_err_set(err, RTX_EINVAL, "device '%s' does not exist: %s", s, host);
        }
        *out = (enum job_class)(CLS_GPU0 + n);
    } else {
        return rtx_err_set(err, RTX_EINVAL,
                           "unknown device '%.40s' (devices: auto, cpu, cuda, cuda:N)", s);
    }
    return 0;
}

static bool dev_usable(const struct dev *d) {
    return d->healthy && d->n_workers > 0;
}

/* Whether some GPU can take jobs (under mu). */
static bool any_gpu_usable(const struct rtx_jobs *j) {
    for (int d = 1; d < j->n_devs; d++)
        if (dev_usable(&j->devs[d])) return true;
    return false;
}

/* Why a job of class c cannot be placed now (under mu): 0, RTX_EINVAL when the host has no
 * such device, RTX_EUNAVAILABLE when it is unhealthy or runs no jobs. */
static int placement_error(const struct rtx_jobs *j, enum job_class c, struct rtx_err *err) {
    char host[200];
    if (c == CLS_CPU || c == CLS_AUTO) return 0;
    if (c == CLS_GPU_ANY) {
        if (j->n_devs == 1) {
            host_gpus_text(j, host, sizeof host);
            return rtx_err_set(err, RTX_EINVAL, "device 'cuda': %s", host);
        }
        if (any_gpu_usable(j)) return 0;
        char why[200] = "";
        for (int d = 1; d < j->n_devs; d++) {
            char one[120];
            const struct dev *dv = &j->devs[d];
            snprintf(one, sizeof one, "%s %s", dv->name,
                     dv->healthy ? "runs no jobs" : "is unhealthy");
            list_append(why, sizeof why, one);
        }
        return rtx_err_set(err, RTX_EUNAVAILABLE, "device 'cuda': no usable CUDA device (%s)",
                           why);
    }
    int slot = 1 + (int)(c - CLS_GPU0);
    if (slot >= j->n_devs) {
        host_gpus_text(j, host, sizeof host);
        return rtx_err_set(err, RTX_EINVAL, "device 'cuda:%d' does not exist: %s", slot - 1,
                           host);
    }
    const struct dev *dv = &j->devs[slot];
    if (!dv->healthy)
        return rtx_err_set(err, RTX_EUNAVAILABLE, "device %s is unhealthy: %s", dv->name,
                           dv->detail);
    if (dv->n_workers == 0)
        return rtx_err_set(err, RTX_EUNAVAILABLE,
                           "device %s runs no jobs (jobs.gpu_workers_per_device is 0)", dv->name);
    return 0;
}

/* A backend of a usable GPU that jobs of class c may run on, to ask supports_node (under mu):
 * device N's first worker for GPU_N, the first usable GPU's for AUTO and GPU_ANY; NULL for
 * the CPU class and when no GPU is usable. */
static struct rtx_backend *gpu_backend_for(const struct rtx_jobs *j, enum job_class c) {
    if (c == CLS_CPU) return NULL;
    for (int i = j->n_cpu_workers; i < j->n_workers; i++) {
        const struct worker *w = &j->workers[i];
        const struct dev *d = &j->devs[w->dev];
        if (!dev_usable(d)) continue;
        if (c == CLS_AUTO || c == CLS_GPU_ANY || c == (enum job_class)(CLS_GPU0 + d->cuda))
            return w->be;
    }
    return NULL;
}

/* The first node of g that be cannot run, or -1 when it runs them all. */
static int first_unsupported(struct rtx_backend *be, const struct rtx_graph *g) {
    for (int i = 0; i < g->n_nodes; i++)
        if (!rtx_backend_supports_node(be, g, &g->nodes[i])) return i;
    return -1;
}

/* The reason a GPU refuses node `ni` of g. */
static void unsupported_text(struct rtx_backend *be, const struct rtx_graph *g, int ni,
                             char *buf, size_t len) {
    const struct rtx_node *n = &g->nodes[ni];
    snprintf(buf, len,
             "node %d '%.60s' (%s) cannot run on %s: its backend has no kernel for it with "
             "these dtypes; submit the job with device cpu or auto",
             ni, n->name ? n->name : "", rtx_op_name(n->op), rtx_backend_name(be));
}

/* ------------------------------------------------------------------------------------------
 * protobuf-c allocator over rtx_malloc (a NULL from unpack is ENOMEM, not malformed bytes,
 * when an allocation failed)
 * ---------------------------------------------------------------------------------------- */

struct pb_state {
    bool failed;
};

static void *pb_alloc(void *data, size_t size) {
    struct pb_state *st = data;
    void *p = rtx_malloc(size ? size : 1);
    if (!p) st->failed = true;
    return p;
}

static void pb_free(void *data, void *p) {
    rtx_free(p);
}

static int unpack_request(const void *data, size_t len, Rtx__V1__SubmitRequest **out,
                          struct rtx_err *err) {
    struct pb_state st = {.failed = false};
    ProtobufCAllocator alloc = {.alloc = pb_alloc, .free = pb_free, .allocator_data = &st};
    *out = rtx__v1__submit_request__unpack(&alloc, len, data);
    if (*out) return 0;
    if (st.failed) return rtx_err_set(err, RTX_ENOMEM, "out of memory decoding SubmitRequest");
    return rtx_err_set(err, RTX_EFORMAT, "malformed SubmitRequest (%zu bytes)", len);
}

static void free_request(Rtx__V1__SubmitRequest *m) {
    struct pb_state st = {.failed = false};
    ProtobufCAllocator alloc = {.alloc = pb_alloc, .free = pb_free, .allocator_data = &st};
    rtx__v1__submit_request__free_unpacked(m, &alloc);
}

/* ------------------------------------------------------------------------------------------
 * Decoding a request into a runnable job
 * ---------------------------------------------------------------------------------------- */

static void prepared_free(struct prepared *p) {
    if (!p) return;
    rtx_plan_free(p->plan);
    for (int i = 0; i < p->n_inputs; i++)
        rtx_tensor_unref(p->inputs[i]);
    rtx_free(p->inputs);
    rtx_graph_free(p->graph);
    rtx_free(p);
}

/* An input tensor message as a new tensor, checked against the limits; *total accumulates
 * input bytes against lim->max_total_bytes. */
static int input_from_msg(const Rtx__V1__Tensor *m, const struct rtx_limits *lim, int64_t *total,
                          struct rtx_tensor **out, struct rtx_err *err) {
    char what[RTX_JOB_ID_LEN + 200];
    snprintf(what, sizeof what, "input '%.180s'", m->name);
    return rtx_tensor_from_wire(m, what, lim, total, out, err);
}

/* Binds the request's input tensors to the graph's inputs by name: unknown names, names given
 * twice and missing inputs are RTX_EINVAL naming them. */
static int bind_inputs(const struct rtx_graph *g, const Rtx__V1__SubmitRequest *m,
                       const struct rtx_limits *lim, struct rtx_tensor **inputs,
                       struct rtx_err *err) {
    int *slot = rtx_calloc(m->n_inputs + 1, sizeof *slot);
    if (!slot) return rtx_err_set(err, RTX_ENOMEM, "out of memory binding inputs");
    int rc = 0;
    for (size_t k = 0; k < m->n_inputs; k++) {
        const char *name = m->inputs[k]->name;
        int v = rtx_graph_find_value(g, name), pos = -1;
        for (int i = 0; v >= 0 && i < g->n_inputs; i++)
            if (g->inputs[i] == v) pos = i;
        if (pos < 0) {
            char known[160] = "";
            for (int i = 0; i < g->n_inputs; i++)
                list_append(known, sizeof known, g->values[g->inputs[i]].name);
            rc = rtx_err_set(err, RTX_EINVAL, "unknown input '%s' (graph inputs: %s)", name,
                             g->n_inputs ? known : "none");
            goto out;
        }
        for (size_t q = 0; q < k; q++) {
            if (slot[q] == pos) {
                rc = rtx_err_set(err, RTX_EINVAL, "input '%s' is given more than once", name);
                goto out;
            }
        }
        slot[k] = pos;
    }
    char missing[200] = "";
    int n_missing = 0;
    for (int i = 0; i < g->n_inputs; i++) {
        bool given = false;
        for (size_t k = 0; k < m->n_inputs && !given; k++)
            given = slot[k] == i;
        if (!given) {
            list_append(missing, sizeof missing, g->values[g->inputs[i]].name);
            n_missing++;
        }
    }
    if (n_missing) {
        rc =
            rtx_err_set(err, RTX_EINVAL, "missing input%s: %s", n_missing > 1 ? "s" : "", missing);
        goto out;
    }
    int64_t total = 0;
    for (size_t k = 0; k < m->n_inputs; k++)
        if ((rc = input_from_msg(m->inputs[k], lim, &total, &inputs[slot[k]], err)) < 0) break;
out:
    rtx_free(slot);
    return rc;
}

/* FNV-1a over len bytes, continuing from h. */
static uint64_t fnv1a(uint64_t h, const void *data, size_t len) {
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* The cost key of a job: its graph's wire bytes and its inputs' dtypes and shapes (what
 * decides its run time on a device), never 0. */
static uint64_t cost_key_of(const uint8_t *gbytes, size_t glen, const struct prepared *p) {
    uint64_t h = fnv1a(1469598103934665603ull, gbytes, glen);
    for (int i = 0; i < p->n_inputs; i++) {
        const struct rtx_tensor *t = p->inputs[i];
        int32_t head[2] = {(int32_t)t->dtype, t->ndim};
        h = fnv1a(h, head, sizeof head);
        h = fnv1a(h, t->dims, (size_t)t->ndim * sizeof t->dims[0]);
    }
    return h ? h : 1;
}

/* Feeds v into a digest as 8 little-endian bytes (fixed width: no struct padding or host
 * byte order in a key). */
static int digest_i64(EVP_MD_CTX *c, int64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)((uint64_t)v >> (8 * i));
    return EVP_DigestUpdate(c, b, sizeof b);
}

/* The plan key of a job (see DESIGN): SHA-256 over its graph's wire bytes, its inputs' dtypes
 * and shapes in graph-input order and the planning limits, everything rtx_plan_new reads. */
static int plan_key_of(const uint8_t *gbytes, size_t glen, const struct prepared *p,
                       const struct rtx_limits *lim, uint8_t key[PLAN_KEY_LEN],
                       struct rtx_err *err) {
    static const char tag[] = "rtxd plan key v1";
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    if (!c) return rtx_err_set(err, RTX_ENOMEM, "out of memory hashing the graph");
    int ok = EVP_DigestInit_ex(c, EVP_sha256(), NULL) && EVP_DigestUpdate(c, tag, sizeof tag) &&
             digest_i64(c, (int64_t)glen) && EVP_DigestUpdate(c, gbytes, glen) &&
             digest_i64(c, p->n_inputs);
    for (int i = 0; ok && i < p->n_inputs; i++) {
        const struct rtx_tensor *t = p->inputs[i];
        ok = digest_i64(c, (int64_t)t->dtype) && digest_i64(c, t->ndim);
        for (int d = 0; ok && d < t->ndim; d++)
            ok = digest_i64(c, t->dims[d]);
    }
    const int64_t limits[] = {lim->max_nodes,    lim->max_values,       lim->max_dims,
                              lim->max_elements, lim->max_tensor_bytes, lim->max_total_bytes};
    for (size_t i = 0; ok && i < sizeof limits / sizeof limits[0]; i++)
        ok = digest_i64(c, limits[i]);
    unsigned int n = 0;
    ok = ok && EVP_DigestFinal_ex(c, key, &n) && n == PLAN_KEY_LEN;
    EVP_MD_CTX_free(c);
    return ok ? 0 : rtx_err_set(err, RTX_EINTERNAL, "SHA-256 of the graph failed (OpenSSL)");
}

/* Decodes the graph of a request (through runtime's wire decoder), binds its inputs and plans
 * it: every graph, input and limit problem shows here, naming the node or input. */
static int prepare(const Rtx__V1__SubmitRequest *m, const struct rtx_limits *lim,
                   struct prepared **out, struct rtx_err *err) {
    *out = NULL;
    if (!m->graph) return rtx_err_set(err, RTX_EINVAL, "SubmitRequest has no graph");
    struct prepared *p = rtx_calloc(1, sizeof *p);
    if (!p) return rtx_err_set(err, RTX_ENOMEM, "out of memory decoding the graph");
    size_t glen = rtx__v1__graph__get_packed_size(m->graph);
    uint8_t *gbytes = rtx_malloc(glen ? glen : 1);
    int rc;
    if (!gbytes) {
        rc = rtx_err_set(err, RTX_ENOMEM, "out of memory decoding the graph");
        goto fail;
    }
    rtx__v1__graph__pack(m->graph, gbytes);
    rc = rtx_graph_decode(gbytes, glen, lim, &p->graph, err);
    if (rc < 0) goto fail;
    p->inputs = rtx_calloc((size_t)p->graph->n_inputs + 1, sizeof *p->inputs);
    if (!p->inputs) {
        rc = rtx_err_set(err, RTX_ENOMEM, "out of memory binding inputs");
        goto fail;
    }
    p->n_inputs = p->graph->n_inputs;
    if ((rc = bind_inputs(p->graph, m, lim, p->inputs, err)) < 0) goto fail;
    rc = rtx_plan_new(p->graph, (const struct rtx_tensor *const *)p->inputs, p->n_inputs, lim,
                      &p->plan, err);
    if (rc < 0) goto fail;
    p->cost_key = cost_key_of(gbytes, glen, p);
    if ((rc = plan_key_of(gbytes, glen, p, lim, p->plan_key, err)) < 0) goto fail;
    rtx_free(gbytes);
    *out = p;
    return 0;
fail:
    rtx_free(gbytes);
    prepared_free(p);
    return rc;
}


/* The journaled request of a job, decoded and planned (for recovered jobs and jobs whose
 * decoded form was not cached). */
static int load_prepared(struct rtx_jobs *j, const char *id, struct prepared **out,
                         struct rtx_err *err) {
    void *bytes = NULL;
    size_t len = 0;
    int rc = rtx_store_job_request(j->store, id, &bytes, &len, err);
    if (rc < 0) return rtx_err_prefix(err, "loading the request");
    Rtx__V1__SubmitRequest *m = NULL;
    rc = unpack_request(bytes, len, &m, err);
    rtx_free(bytes);
    if (rc < 0) return rc;
    rc = prepare(m, &j->limits, out, err);
    free_request(m);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * Plan caches (one per worker, touched only by its thread; see DESIGN) and run records
 * ---------------------------------------------------------------------------------------- */

static void cached_plan_free(struct cached_plan *e) {
    if (!e) return;
    rtx_plan_free(e->plan); /* first: it points into the graph */
    rtx_graph_free(e->graph);
    rtx_free(e);
}

static void cache_unlink(struct plan_cache *c, struct cached_plan *e) {
    if (e->prev)
        e->prev->next = e->next;
    else
        c->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        c->tail = e->prev;
    e->prev = e->next = NULL;
    c->n--;
    c->bytes -= e->bytes;
}

static void cache_push_front(struct plan_cache *c, struct cached_plan *e) {
    e->prev = NULL;
    e->next = c->head;
    if (c->head)
        c->head->prev = e;
    else
        c->tail = e;
    c->head = e;
    c->n++;
    c->bytes += e->bytes;
}

/* Takes the plan of `key` out of the cache for its job to run (cache_put brings it back);
 * NULL when the cache does not hold it. */
static struct cached_plan *cache_take(struct plan_cache *c, const uint8_t *key) {
    for (struct cached_plan *e = c->head; e; e = e->next) {
        if (memcmp(e->key, key, PLAN_KEY_LEN) == 0) {
            cache_unlink(c, e);
            return e;
        }
    }
    return NULL;
}

/* Whether a plan that may hold `bytes` can be kept at all. */
static bool cache_fits(const struct plan_cache *c, size_t bytes) {
    return c->max_plans > 0 && (c->max_bytes == 0 || bytes <= c->max_bytes);
}

/* Puts e first (most recently used) after dropping the least recently used plans until both
 * bounds hold with it; e must fit (cache_fits). Returns how many plans it dropped. */
static int cache_put(struct plan_cache *c, struct cached_plan *e) {
    int dropped = 0;
    while (c->tail &&
           (c->n + 1 > c->max_plans || (c->max_bytes > 0 && c->bytes + e->bytes > c->max_bytes))) {
        struct cached_plan *victim = c->tail;
        cache_unlink(c, victim);
        cached_plan_free(victim);
        dropped++;
    }
    cache_push_front(c, e);
    return dropped;
}

/* Drops every plan; returns how many. */
static int cache_clear(struct plan_cache *c) {
    int n = 0;
    while (c->head) {
        struct cached_plan *e = c->head;
        cache_unlink(c, e);
        cached_plan_free(e);
        n++;
    }
    return n;
}

/* The bytes a kept plan of p may hold (see DESIGN): its graph's initializers, its arena, its
 * inputs and its outputs. */
static size_t plan_bytes(const struct prepared *p) {
    const struct rtx_graph *g = p->graph;
    size_t bytes = rtx_plan_arena_bytes(p->plan);
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].constant) bytes += rtx_tensor_nbytes(g->values[v].constant);
    for (int i = 0; i < p->n_inputs; i++)
        bytes += rtx_tensor_nbytes(p->inputs[i]);
    for (int i = 0; i < g->n_outputs; i++) {
        enum rtx_dtype dt;
        int nd = 0;
        int64_t dims[RTX_MAX_DIMS];
        if (rtx_plan_value_shape(p->plan, g->outputs[i], &dt, &nd, dims) == 0)
            bytes += (size_t)rtx_shape_numel(nd, dims) * rtx_dtype_size(dt);
    }
    return bytes;
}

/* Takes the slot of a run record out of its bucket's chain (under rmu). */
static void run_unlink(struct rtx_jobs *j, int slot) {
    int *pp = &j->run_heads[hash_id(j->runs[slot].id) & (RUN_BUCKETS - 1)];
    while (*pp >= 0 && *pp != slot)
        pp = &j->runs[*pp].hnext;
    if (*pp == slot) *pp = j->runs[slot].hnext;
}

/* Remembers how a job that succeeded ran, in place of the oldest record. */
static void record_run(struct rtx_jobs *j, const char *id, const struct rtx_jobs_run *run) {
    pthread_mutex_lock(&j->rmu);
    int slot = j->runs_next;
    j->runs_next = (slot + 1) % RTX_JOBS_RUNS_KEPT;
    struct run_rec *r = &j->runs[slot];
    if (r->id[0]) run_unlink(j, slot);
    snprintf(r->id, sizeof r->id, "%s", id);
    r->run = *run;
    size_t b = hash_id(r->id) & (RUN_BUCKETS - 1);
    r->hnext = j->run_heads[b];
    j->run_heads[b] = slot;
    pthread_mutex_unlock(&j->rmu);
}

/* Forgets the run of a job (its outputs could not be journaled after all). */
static void forget_run(struct rtx_jobs *j, const char *id) {
    pthread_mutex_lock(&j->rmu);
    for (int k = j->run_heads[hash_id(id) & (RUN_BUCKETS - 1)]; k >= 0; k = j->runs[k].hnext) {
        if (strcmp(j->runs[k].id, id) == 0) {
            run_unlink(j, k);
            j->runs[k].id[0] = '\0';
            break;
        }
    }
    pthread_mutex_unlock(&j->rmu);
}

int rtx_jobs_get_run(struct rtx_jobs *j, const char *id, struct rtx_jobs_run *out) {
    if (!j || !id || !out || !id[0] || strlen(id) >= RTX_JOB_ID_LEN) return RTX_ENOTFOUND;
    int rc = RTX_ENOTFOUND;
    pthread_mutex_lock(&j->rmu);
    for (int k = j->run_heads[hash_id(id) & (RUN_BUCKETS - 1)]; k >= 0; k = j->runs[k].hnext) {
        if (strcmp(j->runs[k].id, id) == 0) {
            *out = j->runs[k].run;
            rc = 0;
            break;
        }
    }
    pthread_mutex_unlock(&j->rmu);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * The job index and the lane queues (all under mu)
 * ---------------------------------------------------------------------------------------- */

static void index_grow(struct rtx_jobs *j) {
    size_t cap = j->index_cap * 2;
    struct job **b = rtx_calloc(cap, sizeof *b);
    if (!b) return; /* longer chains, still correct */
    for (size_t i = 0; i < j->index_cap; i++) {
        for (struct job *x = j->index[i], *nx; x; x = nx) {
            nx = x->hnext;
            size_t h = hash_id(x->id) & (cap - 1);
            x->hnext = b[h];
            b[h] = x;
        }
    }
    rtx_free(j->index);
    j->index = b;
    j->index_cap = cap;
}

static void index_add(struct rtx_jobs *j, struct job *job) {
    if (j->index_n >= j->index_cap * 2) index_grow(j);
    size_t h = hash_id(job->id) & (j->index_cap - 1);
    job->hnext = j->index[h];
    j->index[h] = job;
    j->index_n++;
}

static struct job *index_find(struct rtx_jobs *j, const char *id) {
    for (struct job *x = j->index[hash_id(id) & (j->index_cap - 1)]; x; x = x->hnext)
        if (strcmp(x->id, id) == 0) return x;
    return NULL;
}

static void index_remove(struct rtx_jobs *j, struct job *job) {
    for (struct job **pp = &j->index[hash_id(job->id) & (j->index_cap - 1)]; *pp;
         pp = &(*pp)->hnext) {
        if (*pp == job) {
            *pp = job->hnext;
            j->index_n--;
            return;
        }
    }
}

/* Jobs per worker queued or running on device slot d, x1000 (under mu): the load that
 * spreads "cuda" and "auto" jobs over the GPUs. */
static int64_t dev_load(const struct rtx_jobs *j, int d) {
    const struct dev *dv = &j->devs[d];
    return (int64_t)(dv->queued + dv->running) * 1000 / (dv->n_workers > 0 ? dv->n_workers : 1);
}

/* The device slots a job of class c may be queued on now, least loaded first (under mu);
 * returns how many. */
static int candidates(const struct rtx_jobs *j, enum job_class c, int out[MAX_DEVS]) {
    int n = 0;
    if (c == CLS_CPU || (c == CLS_AUTO && !any_gpu_usable(j))) {
        out[n++] = DEV_CPU;
        return n;
    }
    if (c >= CLS_GPU0) {
        int d = 1 + (int)(c - CLS_GPU0);
        if (d < j->n_devs && dev_usable(&j->devs[d]) && j->devs[d].sched) out[n++] = d;
        return n;
    }
    for (int d = 1; d < j->n_devs; d++)
        if (dev_usable(&j->devs[d]) && j->devs[d].sched) out[n++] = d;
    for (int a = 1; a < n; a++) { /* insertion sort by load: 16 devices at most */
        int x = out[a], b = a;
        int64_t lx = dev_load(j, x);
        while (b > 0 && dev_load(j, out[b - 1]) > lx) {
            out[b] = out[b - 1];
            b--;
        }
        out[b] = x;
    }
    return n;
}

/* Admits a job into the scheduler of a device its class allows (under mu), trying the
 * candidates least loaded first. 0: queued there (in_sched, dev and handle set, counted,
 * workers woken); job->where is the caller's to set. The placement error when no device can
 * take the class; RTX_EOVERLOAD naming the device, the scheduler's reason and its retry-after
 * hint when every candidate refused (the last refusal is reported). */
static int sched_place(struct rtx_jobs *j, struct job *job, struct rtx_err *err) {
    int rc = placement_error(j, job->cls, err);
    if (rc < 0) return rc;
    int cand[MAX_DEVS];
    int n = candidates(j, job->cls, cand);
    if (n == 0) return rtx_err_set(err, RTX_EUNAVAILABLE, "no device can take the job now");
    struct rtx_sched_reject rej = {0};
    const char *last = "";
    int64_t now = sched_now();
    for (int k = 0; k < n; k++) {
        struct dev *dv = &j->devs[cand[k]];
        struct rtx_sched_request req = {
            .data = job,
            .lane = job->lane,
            .deadline_ns = job->deadline_ns,
            .cost_key = job->cost_key,
        };
        uint64_t handle = 0;
        rc = rtx_sched_enqueue(dv->sched, &req, now, &handle, &rej);
        if (rc == 0) {
            job->dev = cand[k];
            job->handle = handle;
            job->in_sched = true;
            dv->queued++;
            j->lanes[job->lane].queued++;
            j->n_queued++;
            pthread_cond_broadcast(&j->work_cv);
            return 0;
        }
        if (rc != RTX_EUNAVAILABLE)
            return rtx_err_set(err, rc, "the scheduler of %s refused lane %d: %s", dv->name,
                               job->lane, rtx_strerror(rc));
        last = dv->name;
    }
    int64_t retry_ms = (rej.retry_after_ns + 999999) / 1000000;
    return rtx_err_set(err, RTX_EOVERLOAD, "overloaded on %s (%s): %s; retry after %" PRId64 " ms",
                       last, rtx_sched_reject_name(rej.reason), rej.msg, retry_ms);
}

/* Counts a job out of its scheduler's queue (dispatched, expired or cancelled; under mu). */
static void unqueued(struct rtx_jobs *j, struct job *job) {
    j->devs[job->dev].queued--;
    j->lanes[job->lane].queued--;
    j->n_queued--;
}

/* Removes a queued job from its scheduler (under mu), counted there as cancelled. */
static void sched_remove(struct rtx_jobs *j, struct job *job) {
    int rc = rtx_sched_cancel(j->devs[job->dev].sched, job->handle, sched_now(), NULL, NULL);
    if (rc < 0)
        rtx_log(RTX_LOG_ERROR, "scheduler lost a queued job", "job", job->id, "error",
                rtx_strerror(rc), NULL);
    unqueued(j, job);
    job->in_sched = false;
}

/* Ends a dispatched job's scheduler item (under mu): outcome and, for RTX_SCHED_OK, its run
 * time (ns) for the cost's moving average. */
static void finish_item(struct rtx_jobs *j, struct job *job, enum rtx_sched_outcome outcome,
                        int64_t run_ns) {
    struct dev *dv = &j->devs[job->dev];
    if (outcome == RTX_SCHED_OK && run_ns <= 0) run_ns = 1;
    int rc = rtx_sched_finish(dv->sched, job->handle, outcome, run_ns, sched_now());
    if (rc < 0)
        rtx_log(RTX_LOG_ERROR, "scheduler lost a running job", "job", job->id, "error",
                rtx_strerror(rc), NULL);
    dv->running--;
    job->in_sched = false;
    if (outcome == RTX_SCHED_OK) j->costs_dirty = true;
}

/* Drops a job that is in no queue from the index (under mu); the caller frees it. */
static void forget(struct rtx_jobs *j, struct job *job) {
    index_remove(j, job);
    j->cache_bytes -= job->cached_bytes;
    job->cached_bytes = 0;
}

static void job_free(struct job *job) {
    if (!job) return;
    prepared_free(job->prep);
    rtx_free(job);
}

/* Sets the executor's flag of a running job (under mu). */
static void raise_cancel(struct job *job) {
    __atomic_store_n(&job->cancel, 1, __ATOMIC_SEQ_CST);
}

/* Interrupts every running job (under mu). Returns how many. */
static int interrupt_running(struct rtx_jobs *j) {
    int n = 0;
    for (int i = 0; i < j->n_workers; i++) {
        struct job *job = j->workers[i].current;
        if (job && !job->interrupted) {
            job->interrupted = true;
            raise_cancel(job);
            n++;
        }
    }
    return n;
}

/* ------------------------------------------------------------------------------------------
 * Watchers
 * ---------------------------------------------------------------------------------------- */

static size_t watch_bucket(const char *id) {
    return (size_t)(hash_id(id) % WATCH_BUCKETS);
}

static bool has_watchers(struct rtx_jobs *j, const char *id) {
    bool any = false;
    pthread_mutex_lock(&j->wmu);
    for (struct watch *w = j->watches[watch_bucket(id)]; w && !any; w = w->next)
        any = !w->removed && strcmp(w->job, id) == 0;
    pthread_mutex_unlock(&j->wmu);
    return any;
}

static void watch_unlink_free(struct rtx_jobs *j, struct watch *w) {
    for (struct watch **pp = &j->watches[w->handle % WATCH_BUCKETS]; *pp; pp = &(*pp)->next) {
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    }
    rtx_free(w);
}

/* Delivers `info` (and its run, NULL when none) to the watches of its job that have not yet
 * seen a state of its rank (only the watch `only` when it is not 0). A terminal state ends
 * those watches. */
static void deliver(struct rtx_jobs *j, const struct rtx_job_info *info,
                    const struct rtx_jobs_run *run, uint64_t only) {
    int rank = state_rank(info->state);
    bool last = rank == 3;
    size_t b = watch_bucket(info->id);
    pthread_mutex_lock(&j->wmu);
    for (;;) {
        struct watch *w = j->watches[b];
        while (w && (w->removed || w->rank >= rank || strcmp(w->job, info->id) != 0 ||
                     (only && w->handle != only)))
            w = w->next;
        if (!w) break;
        if (w->in_cb) { /* another thread is delivering to it: keep the order */
            pthread_cond_wait(&j->wcv, &j->wmu);
            continue;
        }
        w->in_cb = true;
        w->cb_thread = pthread_self();
        w->rank = rank;
        pthread_mutex_unlock(&j->wmu);
        w->cb(w->ctx, info, run, last);
        pthread_mutex_lock(&j->wmu);
        w->in_cb = false;
        if (last || w->removed) watch_unlink_free(j, w);
        pthread_cond_broadcast(&j->wcv);
    }
    pthread_mutex_unlock(&j->wmu);
}

/* Publishes a job's journaled state to its watchers (journal first, then publish). */
static void publish(struct rtx_jobs *j, const char *id) {
    if (!has_watchers(j, id)) return;
    struct rtx_job_info info = {0};
    struct rtx_err err = {0};
    if (rtx_store_job_get(j->store, id, &info, &err) < 0) {
        rtx_log(RTX_LOG_ERROR, "cannot read a job back for its watchers", "job", id, "error",
                err.msg, NULL);
        return;
    }
    struct rtx_jobs_run run;
    bool ran = info.state == RTX_JOB_SUCCEEDED && rtx_jobs_get_run(j, id, &run) == 0;
    deliver(j, &info, ran ? &run : NULL, 0);
    rtx_job_info_clear(&info);
}

/* ------------------------------------------------------------------------------------------
 * State changes
 * ---------------------------------------------------------------------------------------- */

/* Journals a terminal state, counts it, logs it and publishes it. */
static int change_state(struct rtx_jobs *j, const char *id, int lane, enum rtx_job_state st,
                        const char *reason, struct rtx_err *err) {
    int rc = rtx_store_job_set_state(j->store, id, st, reason, now_ms(), err);
    if (rc < 0) {
        rtx_log(RTX_LOG_ERROR, "cannot journal a job state", "job", id, "state",
                rtx_job_state_name(st), "error", err->msg, NULL);
        return rc;
    }
    pthread_mutex_lock(&j->mu);
    if (st == RTX_JOB_FAILED) j->failed++;
    if (st == RTX_JOB_CANCELLED) j->cancelled++;
    if (st == RTX_JOB_EXPIRED) j->expired++;
    pthread_mutex_unlock(&j->mu);
    log_state(j, id, lane, st, reason, 0);
    publish(j, id);
    return 0;
}

/* Journals CANCELLED for a job no worker or queue holds. A job that became terminal
 * meanwhile (a concurrent cancel) is left as it is. */
static int cancel_journaled(struct rtx_jobs *j, const char *id, int lane, struct rtx_err *err) {
    int rc =
        rtx_store_job_set_state(j->store, id, RTX_JOB_CANCELLED, REASON_CANCELLED, now_ms(), err);
    if (rc == RTX_EINVAL) {
        struct rtx_job_info info = {0};
        struct rtx_err gerr = {0};
        bool terminal = rtx_store_job_get(j->store, id, &info, &gerr) == 0 &&
                        rtx_job_state_is_terminal(info.state);
        rtx_job_info_clear(&info);
        if (terminal) return 0;
    }
    if (rc < 0) {
        rtx_log(RTX_LOG_ERROR, "cannot journal a job state", "job", id, "state", "cancelled",
                "error", err->msg, NULL);
        return rc;
    }
    pthread_mutex_lock(&j->mu);
    j->cancelled++;
    pthread_mutex_unlock(&j->mu);
    log_state(j, id, lane, RTX_JOB_CANCELLED, REASON_CANCELLED, 0);
    publish(j, id);
    return 0;
}

/* Fails a job with a reason; a journal error is logged (the job then stays as the journal
 * has it, for recovery). */
static void fail_job(struct rtx_jobs *j, struct job *job, const char *reason) {
    struct rtx_err err = {0};
    change_state(j, job->id, job->lane, RTX_JOB_FAILED, reason, &err);
}

/* ------------------------------------------------------------------------------------------
 * Device health
 * ---------------------------------------------------------------------------------------- */

/* Marks a device unhealthy (once) with why and wakes the workers: the device's own workers
 * then move its queued jobs to other devices or fail them (worker_main). */
static void device_fault(struct rtx_jobs *j, struct dev *d, const char *why) {
    pthread_mutex_lock(&j->mu);
    bool first = d->healthy;
    if (first) {
        d->healthy = false;
        snprintf(d->detail, sizeof d->detail, "%s", why);
        pthread_cond_broadcast(&j->work_cv);
    }
    pthread_mutex_unlock(&j->mu);
    if (!first) return;
    rtx_log(RTX_LOG_ERROR, "device unhealthy: it takes no more jobs", "device", d->name, "error",
            why, NULL);
}

/* After a job failed on a GPU worker: a backend that no longer synchronizes with RTX_EGPU
 * kept a sticky error, so its device is marked unhealthy and reason (a failure reason of
 * `len` bytes) says so. Other failures (out of memory, a bad argument) leave it usable. */
static void check_device(struct worker *w, char *reason, size_t len) {
    struct rtx_err herr = {0};
    if (rtx_backend_synchronize(w->be, &herr) == 0 || herr.code != RTX_EGPU) return;
    struct dev *d = &w->j->devs[w->dev];
    device_fault(w->j, d, herr.msg);
    size_t used = strlen(reason);
    if (used + 1 < len)
        snprintf(reason + used, len - used, " [%s is now unhealthy and takes no more jobs]",
                 d->name);
}

/* ------------------------------------------------------------------------------------------
 * Workers
 * ---------------------------------------------------------------------------------------- */

/* Journals the outputs of a run (or fails the job when that is impossible). How it ran is
 * remembered before the journal says it succeeded, so whoever reads it succeeded (a client, a
 * watcher) finds the run too; a failed journal write forgets it again. */
static void succeed_job(struct rtx_jobs *j, struct job *job, struct rtx_tensor **outs,
                        const struct rtx_exec_stats *st, const struct rtx_jobs_run *run) {
    const struct rtx_graph *g = job->prep->graph;
    int n = g->n_outputs;
    const char **names = rtx_calloc((size_t)n + 1, sizeof *names);
    struct rtx_err err = {0};
    if (!names) {
        fail_job(j, job, "out of memory storing the outputs");
        return;
    }
    for (int i = 0; i < n; i++)
        names[i] = g->values[g->outputs[i]].name;
    record_run(j, job->id, run);
    int rc =
        rtx_store_job_succeed(j->store, job->id, now_ms(), st->wall_ms, (int64_t)st->peak_bytes, n,
                              names, (const struct rtx_tensor *const *)outs, &err);
    rtx_free(names);
    if (rc < 0) {
        forget_run(j, job->id);
        char reason[300];
        snprintf(reason, sizeof reason, "cannot store the outputs: %s", err.msg);
        rtx_log(RTX_LOG_ERROR, "cannot journal a job's outputs", "job", job->id, "error", err.msg,
                NULL);
        fail_job(j, job, reason);
        return;
    }
    pthread_mutex_lock(&j->mu);
    j->succeeded++;
    pthread_mutex_unlock(&j->mu);
    log_state(j, job->id, job->lane, RTX_JOB_SUCCEEDED, "", st->wall_ms);
    publish(j, job->id);
}

/* What a raised cancel flag means for this job: cancelled by request (journal it) or
 * interrupted (leave the journal as it is: running, or queued when it had not started). */
static void stop_job(struct rtx_jobs *j, struct job *job, bool started) {
    pthread_mutex_lock(&j->mu);
    bool requested = job->cancel_requested;
    pthread_mutex_unlock(&j->mu);
    if (requested) {
        struct rtx_err err = {0};
        change_state(j, job->id, job->lane, RTX_JOB_CANCELLED, REASON_CANCELLED, &err);
        return;
    }
    rtx_log(RTX_LOG_WARN, "job interrupted", "job", job->id, "lane", j->lanes[job->lane].name,
            "state", started ? "running" : "queued", NULL);
}

/* Counts plan cache hits, misses and dropped plans on w's device and publishes w's cache size
 * for the stats (takes mu). */
static void count_plans(struct worker *w, int hits, int misses, int dropped) {
    struct rtx_jobs *j = w->j;
    struct dev *dv = &j->devs[w->dev];
    pthread_mutex_lock(&j->mu);
    dv->plan_hits += hits;
    dv->plan_misses += misses;
    dv->plan_evictions += dropped;
    w->kept_plans = w->plans.n;
    w->kept_bytes = w->plans.bytes;
    pthread_mutex_unlock(&j->mu);
}

/* The plan w keeps for the job, taken out of its cache while the job runs; NULL when the
 * cache is off or does not hold it (the job then runs its own plan). */
static struct cached_plan *kept_plan_take(struct worker *w, const struct prepared *p) {
    if (w->plans.max_plans == 0) return NULL;
    struct cached_plan *kept = cache_take(&w->plans, p->plan_key);
    count_plans(w, kept != NULL, kept == NULL, 0);
    return kept;
}

/* After a job ran on w: a kept plan goes back first into the cache when the job succeeded and
 * is dropped when it failed; after a miss, a job that succeeded leaves its own graph and plan
 * in the cache when they fit. */
static void kept_plan_return(struct worker *w, struct prepared *p, struct cached_plan *kept,
                             bool ok) {
    if (w->plans.max_plans == 0) return;
    int dropped = 0;
    if (kept && ok) {
        dropped = cache_put(&w->plans, kept);
    } else if (kept) {
        cached_plan_free(kept);
        dropped = 1;
    } else if (ok) {
        size_t bytes = plan_bytes(p);
        struct cached_plan *e = cache_fits(&w->plans, bytes) ? rtx_calloc(1, sizeof *e) : NULL;
        if (!e) return; /* too large to keep, or no memory for the entry: not kept */
        memcpy(e->key, p->plan_key, PLAN_KEY_LEN);
        e->graph = p->graph;
        e->plan = p->plan;
        e->bytes = bytes;
        p->graph = NULL; /* the cache owns them now; the job's outputs are journaled */
        p->plan = NULL;
        dropped = cache_put(&w->plans, e);
    }
    count_plans(w, 0, 0, dropped);
}

/* Runs `plan` with the job's inputs on w's backend. A job that runs out of memory on a GPU
 * while w keeps plans (which hold device memory) runs once more after w dropped them. */
static int execute_job(struct worker *w, struct job *job, struct rtx_plan *plan,
                       struct rtx_tensor **outs, struct rtx_exec_stats *st, struct rtx_err *err) {
    struct prepared *p = job->prep;
    int n_out = p->graph->n_outputs;
    int rc = rtx_plan_execute(plan, w->be, p->inputs, p->n_inputs, outs, n_out, &job->cancel, st,
                              err);
    if (rc != RTX_ENOMEM || w->plans.n == 0 || rtx_backend_is_host(w->be)) return rc;
    int dropped = cache_clear(&w->plans);
    count_plans(w, 0, 0, dropped);
    char nd[16];
    snprintf(nd, sizeof nd, "%d", dropped);
    rtx_log(RTX_LOG_INFO, "out of device memory: kept plans dropped, running the job again",
            "job", job->id, "device", w->j->devs[w->dev].name, "plans", nd, NULL);
    return rtx_plan_execute(plan, w->be, p->inputs, p->n_inputs, outs, n_out, &job->cancel, st,
                            err);
}

/* How a worker's run of a job ended, for its scheduler. */
enum run_result {
    RUN_OK,      /* ran to the end (its outputs may still have failed to store) */
    RUN_FAILED,  /* ran, or tried to, and failed */
    RUN_STOPPED, /* cancelled, interrupted, or expired before it started */
    RUN_BACK,    /* an "auto" job this GPU cannot run: to the CPU */
};

/* Runs a job on worker w; *run_ns gets the execution's duration (ns) when it ran. */
static enum run_result run_job(struct worker *w, struct job *job, int64_t *run_ns) {
    struct rtx_jobs *j = w->j;
    struct dev *dv = &j->devs[w->dev];
    struct rtx_err err = {0};
    /* the scheduler expires jobs by its deadline; a recovered job admitted without one (it
     * could not be met after the restart) is checked here */
    if (job->deadline_ms > 0 && now_ms() >= job->deadline_ms) {
        change_state(j, job->id, job->lane, RTX_JOB_EXPIRED, REASON_EXPIRED, &err);
        return RUN_STOPPED;
    }
    if (__atomic_load_n(&job->cancel, __ATOMIC_SEQ_CST)) {
        stop_job(j, job, false);
        return RUN_STOPPED;
    }
    int rc;
    if (!job->prep && (rc = load_prepared(j, job->id, &job->prep, &err)) < 0) {
        fail_job(j, job, err.msg);
        return RUN_FAILED;
    }
    struct prepared *p = job->prep;
    if (w->dev != DEV_CPU) {
        int bad = first_unsupported(w->be, p->graph);
        if (bad >= 0 && job->asked == CLS_AUTO) return RUN_BACK;
        if (bad >= 0) {
            char reason[300];
            unsupported_text(w->be, p->graph, bad, reason, sizeof reason);
            fail_job(j, job, reason);
            return RUN_FAILED;
        }
    }
    rc = rtx_store_job_start(j->store, job->id, dv->name, now_ms(), &err);
    if (rc < 0) {
        char reason[300];
        snprintf(reason, sizeof reason, "cannot journal the job as running: %s", err.msg);
        rtx_log(RTX_LOG_ERROR, "cannot journal a job state", "job", job->id, "state", "running",
                "error", err.msg, NULL);
        fail_job(j, job, reason);
        return RUN_FAILED;
    }
    pthread_mutex_lock(&j->mu);
    dv->jobs_started++;
    pthread_mutex_unlock(&j->mu);
    log_state(j, job->id, job->lane, RTX_JOB_RUNNING, "", 0);
    publish(j, job->id);

    int n_out = p->graph->n_outputs;
    struct rtx_tensor **outs = rtx_calloc((size_t)n_out + 1, sizeof *outs);
    if (!outs) {
        fail_job(j, job, "out of memory running the job");
        return RUN_FAILED;
    }
    struct cached_plan *kept = kept_plan_take(w, p);
    struct rtx_exec_stats st = {0};
    int64_t t0 = mono_ns();
    rc = execute_job(w, job, kept ? kept->plan : p->plan, outs, &st, &err);
    *run_ns = mono_ns() - t0;
    enum run_result res = RUN_OK;
    if (rc == 0) {
        pthread_mutex_lock(&j->mu);
        if (st.peak_bytes > dv->peak_bytes) dv->peak_bytes = st.peak_bytes;
        pthread_mutex_unlock(&j->mu);
        struct rtx_jobs_run run = {
            .mode = st.mode, .nodes_run = st.nodes_run, .plan_reused = kept != NULL};
        snprintf(run.device, sizeof run.device, "%s", dv->name);
        succeed_job(j, job, outs, &st, &run);
    } else if (rc == RTX_ECANCELED) {
        stop_job(j, job, true);
        res = RUN_STOPPED;
    } else {
        char reason[sizeof err.msg + 80];
        snprintf(reason, sizeof reason, "%s", err.msg);
        if (!rtx_backend_is_host(w->be)) check_device(w, reason, sizeof reason);
        fail_job(j, job, reason);
        res = RUN_FAILED;
    }
    for (int i = 0; i < n_out; i++)
        rtx_tensor_unref(outs[i]);
    rtx_free(outs);
    kept_plan_return(w, p, kept, rc == 0);
    return res;
}

/* Journals a job that left its scheduler without running as `st` with `reason`, then forgets
 * and frees it. Called and returns with mu held (released meanwhile). */
static void settle_job(struct rtx_jobs *j, struct job *job, enum rtx_job_state st,
                       const char *reason) {
    pthread_mutex_unlock(&j->mu);
    struct rtx_err err = {0};
    change_state(j, job->id, job->lane, st, reason, &err);
    pthread_mutex_lock(&j->mu);
    forget(j, job);
    pthread_mutex_unlock(&j->mu);
    job_free(job);
    pthread_mutex_lock(&j->mu);
}

/* Queues a job that left its device's scheduler on another device (under mu): a lost
 * device's jobs, and an "auto" job a GPU cannot run (now CPU). A job no device can take now
 * is journaled failed with the reason (mu is released meanwhile). */
static void move_job(struct rtx_jobs *j, struct job *job) {
    struct rtx_err err = {0};
    if (sched_place(j, job, &err) == 0) {
        job->where = JOB_QUEUED;
        return;
    }
    char reason[300];
    snprintf(reason, sizeof reason, "cannot be placed: %s", err.msg);
    job->where = JOB_CANCELLING;
    settle_job(j, job, RTX_JOB_FAILED, reason);
}

/* The warm-up graph (see DESIGN): y = tanh(x @ w + b) with x f32[WARMUP_ROWS, WARMUP_ROWS]
 * (its input, zeros, in *x), w f32[WARMUP_ROWS, WARMUP_COLS] and b f32[WARMUP_COLS]. */
static int warmup_graph(struct rtx_graph **out, struct rtx_tensor **x, struct rtx_err *err) {
    const int64_t xd[] = {WARMUP_ROWS, WARMUP_ROWS}, wd[] = {WARMUP_ROWS, WARMUP_COLS},
                  bd[] = {WARMUP_COLS};
    struct rtx_graph *g = NULL;
    struct rtx_tensor *w = NULL, *b = NULL;
    *out = NULL;
    *x = NULL;
    int rc = rtx_graph_new("rtxd-warmup", &g, err);
    if (rc >= 0) rc = rtx_tensor_new(RTX_F32, 2, xd, x, err);
    if (rc >= 0) rc = rtx_tensor_new(RTX_F32, 2, wd, &w, err);
    if (rc >= 0) rc = rtx_tensor_new(RTX_F32, 1, bd, &b, err);
    if (rc >= 0) rc = rtx_graph_add_input(g, "x", RTX_F32, 2, xd, err);
    if (rc >= 0) rc = rtx_graph_add_initializer(g, "w", w, err);
    if (rc >= 0) rc = rtx_graph_add_initializer(g, "b", b, err);
    if (rc >= 0)
        rc = rtx_graph_add_node(g, "matmul", "warmup_matmul", (const char *[]){"x", "w"}, 2,
                                (const char *[]){"xw"}, 1, err);
    if (rc >= 0)
        rc = rtx_graph_add_node(g, "add", "warmup_bias", (const char *[]){"xw", "b"}, 2,
                                (const char *[]){"z"}, 1, err);
    if (rc >= 0)
        rc = rtx_graph_add_node(g, "tanh", "warmup_tanh", (const char *[]){"z"}, 1,
                                (const char *[]){"y"}, 1, err);
    if (rc >= 0) rc = rtx_graph_add_output(g, "y", err);
    rtx_tensor_unref(w);
    rtx_tensor_unref(b);
    if (rc < 0) {
        rtx_graph_free(g);
        rtx_tensor_unref(*x);
        *x = NULL;
        return rc;
    }
    *out = g;
    return 0;
}

/* Runs the warm-up graph twice on a GPU worker's backend, node by node and then captured (see
 * DESIGN), counts and logs how long it took; a sticky device error marks the device
 * unhealthy. A backend that cannot run the graph is not warmed up. */
static void warm_up(struct worker *w) {
    struct rtx_jobs *j = w->j;
    struct dev *dv = &j->devs[w->dev];
    struct rtx_err err = {0};
    int64_t t0 = mono_ns();
    struct rtx_graph *g = NULL;
    struct rtx_tensor *x = NULL;
    struct rtx_plan *plan = NULL;
    int rc = warmup_graph(&g, &x, &err);
    bool skipped = rc == 0 && first_unsupported(w->be, g) >= 0;
    if (rc == 0 && !skipped)
        rc = rtx_plan_new(g, (const struct rtx_tensor *const *)&x, 1, NULL, &plan, &err);
    for (int run = 0; rc == 0 && !skipped && run < 2; run++) {
        struct rtx_tensor *y = NULL;
        rc = rtx_plan_execute(plan, w->be, &x, 1, &y, 1, NULL, NULL, &err);
        rtx_tensor_unref(y);
    }
    rtx_plan_free(plan);
    rtx_graph_free(g);
    rtx_tensor_unref(x);
    double ms = (double)(mono_ns() - t0) / 1e6;
    pthread_mutex_lock(&j->mu);
    dv->workers_warm++;
    if (ms > dv->warmup_ms) dv->warmup_ms = ms;
    pthread_mutex_unlock(&j->mu);
    char wk[16], mss[32];
    snprintf(wk, sizeof wk, "%d", (int)(w - j->workers));
    snprintf(mss, sizeof mss, "%.3f", ms);
    if (skipped) {
        rtx_log(RTX_LOG_DEBUG, "GPU worker not warmed up: its backend cannot run the warm-up graph",
                "device", dv->name, "worker", wk, NULL);
    } else if (rc == 0) {
        rtx_log(RTX_LOG_INFO, "GPU worker warmed up", "device", dv->name, "worker", wk,
                "warmup_ms", mss, NULL);
    } else {
        char reason[sizeof err.msg + 80];
        snprintf(reason, sizeof reason, "%s", err.msg);
        check_device(w, reason, sizeof reason);
        rtx_log(RTX_LOG_WARN, "GPU worker warm-up failed", "device", dv->name, "worker", wk,
                "warmup_ms", mss, "error", reason, NULL);
    }
}

/* Drops the plans of a worker whose device was lost (called and returns with mu held,
 * released meanwhile). */
static void drop_lost_plans(struct worker *w) {
    pthread_mutex_unlock(&w->j->mu);
    int dropped = cache_clear(&w->plans);
    count_plans(w, 0, 0, dropped);
    pthread_mutex_lock(&w->j->mu);
}

static void *worker_main(void *arg) {
    struct worker *w = arg;
    struct rtx_jobs *j = w->j;
    struct dev *dv = &j->devs[w->dev];
    if (w->dev != DEV_CPU) warm_up(w);
    pthread_mutex_lock(&j->mu);
    while (!j->stopping) {
        if (!dv->healthy && w->plans.n > 0) {
            drop_lost_plans(w);
            continue;
        }
        struct rtx_sched_item it;
        enum rtx_sched_pick pick = RTX_SCHED_NONE;
        if (!j->draining && dv->sched) pick = rtx_sched_dispatch(dv->sched, sched_now(), &it);
        if (pick == RTX_SCHED_NONE) {
            pthread_cond_wait(&j->work_cv, &j->mu);
            continue;
        }
        struct job *job = it.data;
        unqueued(j, job);
        if (pick == RTX_SCHED_EXPIRED) {
            job->in_sched = false;
            if (job->where == JOB_PENDING) { /* its submitter journals it */
                job->expired = true;
                continue;
            }
            job->where = JOB_CANCELLING;
            settle_job(j, job, RTX_JOB_EXPIRED, REASON_EXPIRED);
            continue;
        }
        dv->running++;
        while (job->where == JOB_PENDING) { /* dispatched before its journal insert ended */
            job->claimed = true;
            pthread_cond_wait(&j->pending_cv, &j->mu);
        }
        if (job->where == JOB_DROPPED) { /* not journaled, or cancelled meanwhile */
            finish_item(j, job, RTX_SCHED_CANCELLED, 0);
            pthread_mutex_unlock(&j->mu);
            job_free(job);
            pthread_mutex_lock(&j->mu);
            continue;
        }
        if (j->draining) { /* a drain began while it was pending: it stays queued */
            rtx_sched_requeue(dv->sched, job->handle, it.cost_ns > 0 ? it.cost_ns : 1,
                              sched_now());
            dv->running--;
            dv->queued++;
            j->lanes[job->lane].queued++;
            j->n_queued++;
            job->where = JOB_QUEUED;
            continue;
        }
        if (!dev_usable(dv)) { /* the device was lost: the job goes elsewhere or fails */
            finish_item(j, job, RTX_SCHED_CANCELLED, 0);
            move_job(j, job);
            continue;
        }
        job->where = JOB_RUNNING;
        j->lanes[job->lane].running++;
        j->n_running++;
        w->current = job;
        pthread_mutex_unlock(&j->mu);

        int64_t run_ns = 0;
        enum run_result res = run_job(w, job, &run_ns);

        pthread_mutex_lock(&j->mu);
        w->current = NULL;
        j->lanes[job->lane].running--;
        j->n_running--;
        finish_item(j, job,
                    res == RUN_OK       ? RTX_SCHED_OK
                    : res == RUN_FAILED ? RTX_SCHED_FAILED
                                        : RTX_SCHED_CANCELLED,
                    run_ns);
        pthread_cond_broadcast(&j->idle_cv);
        if (res == RUN_BACK) {
            job->cls = CLS_CPU;
            move_job(j, job);
            continue;
        }
        forget(j, job);
        pthread_mutex_unlock(&j->mu);
        job_free(job);
        pthread_mutex_lock(&j->mu);
    }
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

/* ------------------------------------------------------------------------------------------
 * Housekeeping: expiry sweeps, brownout ticks, learned costs
 * ---------------------------------------------------------------------------------------- */

struct cost_buf {
    struct rtx_store_cost *rows;
    int n, cap;
    const char *device;
    bool oom;
};

static int cost_collect(void *ctx, uint64_t key, int64_t ema_ns, int64_t samples) {
    struct cost_buf *b = ctx;
    if (b->n == b->cap) {
        int cap = b->cap ? 2 * b->cap : 64;
        void *p = rtx_realloc(b->rows, (size_t)cap * sizeof *b->rows);
        if (!p) {
            b->oom = true;
            return 1;
        }
        b->rows = p;
        b->cap = cap;
    }
    struct rtx_store_cost *r = &b->rows[b->n++];
    memset(r, 0, sizeof *r);
    snprintf(r->device, sizeof r->device, "%s", b->device);
    r->key = key;
    r->ema_ns = ema_ns;
    r->samples = samples;
    return 0;
}

/* Writes every scheduler's learned costs to the store (a failure is logged). */
static void save_costs(struct rtx_jobs *j) {
    struct cost_buf b = {0};
    pthread_mutex_lock(&j->mu);
    for (int d = 0; d < j->n_devs && !b.oom; d++) {
        if (!j->devs[d].sched) continue;
        b.device = j->devs[d].name;
        rtx_sched_cost_save(j->devs[d].sched, cost_collect, &b);
    }
    if (!b.oom) j->costs_dirty = false;
    pthread_mutex_unlock(&j->mu);
    struct rtx_err err = {0};
    if (b.oom)
        rtx_log(RTX_LOG_ERROR, "cannot save learned costs", "error", "out of memory", NULL);
    else if (rtx_store_cost_put(j->store, b.rows, b.n, now_ms(), &err) < 0)
        rtx_log(RTX_LOG_ERROR, "cannot save learned costs", "error", err.msg, NULL);
    rtx_free(b.rows);
}

/* Loads the saved costs of this host's devices into their schedulers (before the workers
 * start). A read error is logged: the costs are then learned again. */
static void load_costs(struct rtx_jobs *j) {
    struct rtx_store_cost *rows = NULL;
    int n = 0, loaded = 0;
    struct rtx_err err = {0};
    if (rtx_store_cost_list(j->store, &rows, &n, &err) < 0) {
        rtx_log(RTX_LOG_WARN, "cannot load learned costs", "error", err.msg, NULL);
        return;
    }
    for (int i = 0; i < n; i++) {
        for (int d = 0; d < j->n_devs; d++) {
            if (!j->devs[d].sched || strcmp(j->devs[d].name, rows[i].device) != 0) continue;
            struct rtx_err lerr = {0};
            if (rtx_sched_cost_load(j->devs[d].sched, rows[i].key, rows[i].ema_ns,
                                    rows[i].samples, &lerr) == 0)
                loaded++;
        }
    }
    rtx_free(rows);
    if (n > 0) {
        char ls[24], ns[24];
        snprintf(ls, sizeof ls, "%d", loaded);
        snprintf(ns, sizeof ns, "%d", n);
        rtx_log(RTX_LOG_INFO, "learned costs loaded", "loaded", ls, "saved", ns, NULL);
    }
}

/* Every HOUSEKEEP_MS: journals the jobs whose deadline passed while queued (so their clients
 * hear of it while the workers are busy), ticks brownout, and saves changed costs every
 * COST_SAVE_MS. */
static void *housekeeper_main(void *arg) {
    struct rtx_jobs *j = arg;
    int64_t last_save = mono_ms();
    pthread_mutex_lock(&j->mu);
    while (!j->stopping) {
        struct timespec ts = mono_after(HOUSEKEEP_MS);
        pthread_cond_timedwait(&j->hk_cv, &j->mu, &ts);
        if (j->stopping) break;
        struct job *list = NULL;
        int64_t now = sched_now();
        for (int d = 0; d < j->n_devs; d++) {
            struct rtx_sched *s = j->devs[d].sched;
            if (!s) continue;
            struct rtx_sched_item items[EXPIRE_BATCH];
            int n;
            do {
                n = rtx_sched_expire(s, now, items, EXPIRE_BATCH);
                for (int i = 0; i < n; i++) {
                    struct job *job = items[i].data;
                    unqueued(j, job);
                    job->in_sched = false;
                    if (job->where == JOB_PENDING) { /* its submitter journals it */
                        job->expired = true;
                        continue;
                    }
                    job->where = JOB_CANCELLING;
                    job->next = list;
                    list = job;
                }
            } while (n == EXPIRE_BATCH);
            rtx_sched_tick(s, now);
        }
        bool save = j->costs_dirty && mono_ms() - last_save >= COST_SAVE_MS;
        pthread_mutex_unlock(&j->mu);
        for (struct job *job = list, *nx; job; job = nx) {
            nx = job->next;
            struct rtx_err err = {0};
            change_state(j, job->id, job->lane, RTX_JOB_EXPIRED, REASON_EXPIRED, &err);
            pthread_mutex_lock(&j->mu);
            forget(j, job);
            pthread_mutex_unlock(&j->mu);
            job_free(job);
        }
        if (save) {
            save_costs(j);
            last_save = mono_ms();
        }
        pthread_mutex_lock(&j->mu);
    }
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

/* ------------------------------------------------------------------------------------------
 * Start, recovery, stop
 * ---------------------------------------------------------------------------------------- */

static int check_options(const struct rtx_jobs_options *o, struct rtx_err *err) {
    if (!o->store) return rtx_err_set(err, RTX_EINVAL, "jobs: no store");
    if (o->workers < 1) return rtx_err_set(err, RTX_EINVAL, "jobs: workers must be >= 1");
    if (o->cpu_threads < 1) return rtx_err_set(err, RTX_EINVAL, "jobs: cpu_threads must be >= 1");
    if (o->max_queued < 1) return rtx_err_set(err, RTX_EINVAL, "jobs: max_queued must be >= 1");
    if (o->gpu_workers_per_device < 0 || o->gpu_workers_per_device > 64)
        return rtx_err_set(err, RTX_EINVAL, "jobs: gpu_workers_per_device must be in [0, 64]");
    if (o->plan_cache < 0 || o->plan_cache > RTX_JOBS_PLAN_CACHE_MAX)
        return rtx_err_set(err, RTX_EINVAL, "jobs: plan_cache must be in [0, %d]",
                           RTX_JOBS_PLAN_CACHE_MAX);
    if (o->default_restart_policy != RTX_RESTART_RERUN &&
        o->default_restart_policy != RTX_RESTART_FAIL)
        return rtx_err_set(err, RTX_EINVAL, "jobs: invalid default restart policy %d",
                           (int)o->default_restart_policy);
    if (o->n_lanes < 1 || o->n_lanes > MAX_LANES || !o->lanes)
        return rtx_err_set(err, RTX_EINVAL, "jobs: between 1 and %d lanes are needed, got %d",
                           MAX_LANES, o->n_lanes);
    for (int i = 0; i < o->n_lanes; i++) {
        if (!o->lanes[i] || !o->lanes[i][0])
            return rtx_err_set(err, RTX_EINVAL, "jobs: lane %d has no name", i);
        for (int k = 0; k < i; k++)
            if (strcmp(o->lanes[k], o->lanes[i]) == 0)
                return rtx_err_set(err, RTX_EINVAL, "jobs: lane '%s' is listed twice",
                                   o->lanes[i]);
    }
    bool found = false;
    for (int i = 0; i < o->n_lanes && o->default_lane; i++)
        found = found || strcmp(o->lanes[i], o->default_lane) == 0;
    if (!found)
        return rtx_err_set(err, RTX_EINVAL, "jobs: the default lane '%s' is not a lane",
                           o->default_lane ? o->default_lane : "");
    return 0;
}

/* The scheduler configuration of the options: their sched (or the defaults) with exactly
 * their lanes, in their order. */
static int sched_config(const struct rtx_jobs_options *o, struct rtx_sched_config *cfg,
                        struct rtx_err *err) {
    if (o->sched)
        *cfg = *o->sched;
    else
        rtx_sched_config_init(cfg);
    char names[MAX_LANES * (RTX_SCHED_LANE_NAME_MAX + 2)] = "";
    for (int i = 0; i < o->n_lanes; i++) {
        size_t used = strlen(names);
        snprintf(names + used, sizeof names - used, "%s%.*s", i ? "," : "",
                 RTX_SCHED_LANE_NAME_MAX + 1, o->lanes[i]);
    }
    int rc = rtx_sched_config_select_lanes(cfg, names, err);
    if (rc == 0) rc = rtx_sched_config_check(cfg, err);
    return rc < 0 ? rtx_err_prefix(err, "jobs: lanes") : 0;
}

static int find_lane(const struct rtx_jobs *j, const char *name) {
    for (int i = 0; i < j->n_lanes; i++)
        if (strcmp(j->lanes[i].name, name) == 0) return i;
    return -1;
}

/* Journals a recovered job terminal (state with reason) and counts it. */
static int recover_end(struct rtx_jobs *j, const char *id, int lane, enum rtx_job_state st,
                       const char *reason, int *n, struct rtx_err *err) {
    int rc = rtx_store_job_set_state(j->store, id, st, reason, now_ms(), err);
    if (rc < 0) return rc;
    if (st == RTX_JOB_FAILED) j->failed++;
    if (st == RTX_JOB_EXPIRED) j->expired++;
    (*n)++;
    log_state(j, id, lane, st, reason, 0);
    return 0;
}

/* Re-queues unfinished jobs from the journal: queued ones as they are, running ones by their
 * restart policy. A job whose deadline passed is journaled expired; one no device can take,
 * or that its lane has no room for, failed with the reason. A job whose deadline cannot be
 * met any more is queued without a scheduler deadline (the worker expires it when it comes
 * to it). Runs before the workers exist. */
static int recover(struct rtx_jobs *j, struct rtx_err *err) {
    struct rtx_job_info *jobs = NULL;
    int n = 0, n_queued = 0, n_rerun = 0, n_failed = 0, n_expired = 0;
    int rc = rtx_store_job_unfinished(j->store, &jobs, &n, err);
    if (rc < 0) return rtx_err_prefix(err, "recovering jobs");
    for (int i = 0; i < n && rc == 0; i++) {
        struct rtx_job_info *info = &jobs[i];
        int lane = find_lane(j, info->lane ? info->lane : "");
        if (lane < 0) {
            rtx_log(RTX_LOG_WARN, "recovered job's lane is gone; using the default lane", "job",
                    info->id, "lane", info->lane ? info->lane : "", NULL);
            lane = j->default_lane;
        }
        enum job_class asked = CLS_AUTO;
        struct rtx_err derr = {0};
        const char *dev = info->requested_device ? info->requested_device : "";
        if (dev[0] && class_parse(j, dev, &asked, &derr) < 0) {
            char reason[300];
            snprintf(reason, sizeof reason, "cannot be placed: %s", derr.msg);
            rc = recover_end(j, info->id, lane, RTX_JOB_FAILED, reason, &n_failed, err);
            continue;
        }
        if (info->state == RTX_JOB_RUNNING) {
            enum rtx_restart_policy pol = info->restart_policy;
            if (pol != RTX_RESTART_RERUN && pol != RTX_RESTART_FAIL) pol = j->default_policy;
            if (pol == RTX_RESTART_FAIL) {
                rc = recover_end(j, info->id, lane, RTX_JOB_FAILED, REASON_RESTART, &n_failed,
                                 err);
                continue;
            }
            rc = rtx_store_job_set_state(j->store, info->id, RTX_JOB_QUEUED, "", now_ms(), err);
            if (rc < 0) break;
            n_rerun++;
        } else {
            n_queued++;
        }
        int64_t wall = now_ms();
        if (info->deadline_ms > 0 && info->deadline_ms <= wall) {
            rc = recover_end(j, info->id, lane, RTX_JOB_EXPIRED, REASON_EXPIRED, &n_expired, err);
            continue;
        }
        struct job *job = rtx_calloc(1, sizeof *job);
        if (!job) {
            rc = rtx_err_set(err, RTX_ENOMEM, "out of memory recovering jobs");
            break;
        }
        memcpy(job->id, info->id, sizeof job->id);
        job->id[RTX_JOB_ID_LEN - 1] = '\0';
        job->lane = lane;
        job->asked = job->cls = asked;
        job->deadline_ms = info->deadline_ms;
        if (job->deadline_ms > 0)
            job->deadline_ns = sched_now() + (job->deadline_ms - wall) * 1000000;
        struct rtx_err perr = {0};
        int prc = sched_place(j, job, &perr);
        if (prc == RTX_EOVERLOAD && job->deadline_ns > 0) {
            job->deadline_ns = 0;
            prc = sched_place(j, job, &perr);
        }
        if (prc < 0) {
            char reason[300];
            snprintf(reason, sizeof reason, "cannot be placed: %s", perr.msg);
            rtx_free(job);
            rc = recover_end(j, info->id, lane, RTX_JOB_FAILED, reason, &n_failed, err);
            continue;
        }
        job->where = JOB_QUEUED;
        index_add(j, job);
    }
    rtx_job_info_free_array(jobs, n);
    if (rc < 0) return rtx_err_prefix(err, "recovering jobs");
    if (n > 0) {
        char q[24], r[24], f[24], x[24];
        snprintf(q, sizeof q, "%d", n_queued);
        snprintf(r, sizeof r, "%d", n_rerun);
        snprintf(f, sizeof f, "%d", n_failed);
        snprintf(x, sizeof x, "%d", n_expired);
        rtx_log(RTX_LOG_INFO, "recovered unfinished jobs", "queued", q, "rerun", r, "failed", f,
                "expired", x, NULL);
    }
    return 0;
}

/* Frees what start built; the workers and the housekeeper must have been joined. */
static void destroy(struct rtx_jobs *j) {
    for (size_t b = 0; j->index && b < j->index_cap; b++) {
        for (struct job *job = j->index[b], *nx; job; job = nx) {
            nx = job->hnext;
            job_free(job);
        }
    }
    for (int l = 0; l < j->n_lanes; l++)
        rtx_free(j->lanes[l].name);
    for (size_t b = 0; b < WATCH_BUCKETS; b++) {
        for (struct watch *w = j->watches[b], *nx; w; w = nx) {
            nx = w->next;
            rtx_free(w);
        }
    }
    for (int i = 0; i < j->n_workers; i++) {
        cache_clear(&j->workers[i].plans); /* before the backend their plans hold memory of */
        rtx_backend_free(j->workers[i].be);
    }
    for (int d = 0; d < j->n_devs; d++)
        rtx_sched_free(j->devs[d].sched);
    rtx_free(j->workers);
    rtx_free(j->index);
    rtx_free(j->runs);
    pthread_cond_destroy(&j->work_cv);
    pthread_cond_destroy(&j->idle_cv);
    pthread_cond_destroy(&j->pending_cv);
    pthread_cond_destroy(&j->hk_cv);
    pthread_cond_destroy(&j->wcv);
    pthread_mutex_destroy(&j->mu);
    pthread_mutex_destroy(&j->wmu);
    pthread_mutex_destroy(&j->rmu);
    rtx_free(j);
}

/* Stops and joins the started workers (interrupting their jobs) and the housekeeper. */
static void join_workers(struct rtx_jobs *j) {
    pthread_mutex_lock(&j->mu);
    j->stopping = true;
    j->draining = true;
    interrupt_running(j);
    pthread_cond_broadcast(&j->work_cv);
    pthread_cond_broadcast(&j->hk_cv);
    pthread_mutex_unlock(&j->mu);
    for (int i = 0; i < j->n_workers; i++)
        if (j->workers[i].started) pthread_join(j->workers[i].thread, NULL);
    if (j->hk_started) pthread_join(j->hk_thread, NULL);
}

static int cuda_gpu_backend_new(void *ctx, int device, struct rtx_backend **out,
                                struct rtx_err *err) {
    struct rtx_jobs *j = ctx;
    struct rtx_cuda_options co = {.device = device, .memory_cap_bytes = j->gpu_pool_cap};
    return rtx_backend_cuda_new(&co, out, err);
}

static int cuda_gpu_pool_stats(void *ctx, struct rtx_backend *be, struct rtx_mem_pool_stats *dev,
                               struct rtx_mem_pool_stats *pinned, struct rtx_err *err) {
    return rtx_backend_cuda_pool_stats(be, dev, pinned, err);
}

static const struct rtx_jobs_gpu_i cuda_gpu_iface = {
    .backend_new = cuda_gpu_backend_new,
    .pool_stats = cuda_gpu_pool_stats,
};

/* Fills the device slots (the CPU, then each listed CUDA device up to the maximum) and the
 * GPU interface; returns how many GPU workers the healthy devices get. */
static int devices_init(struct rtx_jobs *j, const struct rtx_jobs_options *o) {
    j->gpu_iface = o->gpu_iface ? o->gpu_iface : &cuda_gpu_iface;
    j->gpu_ctx = o->gpu_iface ? o->gpu_ctx : j;
    j->gpu_pool_cap = o->gpu_pool_cap_bytes;
    struct dev *cpu = &j->devs[DEV_CPU];
    snprintf(cpu->name, sizeof cpu->name, "cpu");
    cpu->cuda = -1;
    cpu->healthy = true;
    cpu->n_workers = o->workers;
    j->n_devs = 1;
    const struct rtx_cuda_devices *g = o->gpus;
    if (!g || g->n <= 0)
        snprintf(j->no_gpu_why, sizeof j->no_gpu_why, "%s",
                 g && g->absent[0] ? g->absent : "none was listed at start");
    int n_workers = 0;
    for (int i = 0; g && i < g->n && j->n_devs < MAX_DEVS; i++) {
        struct dev *d = &j->devs[j->n_devs++];
        snprintf(d->name, sizeof d->name, "cuda:%d", i);
        d->cuda = i;
        d->healthy = g->devs[i].healthy;
        snprintf(d->detail, sizeof d->detail, "%s", g->devs[i].detail);
        d->n_workers = d->healthy ? o->gpu_workers_per_device : 0;
        n_workers += d->n_workers;
    }
    if (g && g->n > RTX_JOBS_MAX_GPUS) {
        char n[16];
        snprintf(n, sizeof n, "%d", g->n);
        rtx_log(RTX_LOG_WARN, "more CUDA devices than the job manager uses", "devices", n,
                "used", "16", NULL);
    }
    return n_workers;
}

/* Creates the workers of device slot d (appended to j->workers). When a backend cannot be
 * made, the device's workers are dropped and it is marked unhealthy with the error. */
static void gpu_workers_new(struct rtx_jobs *j, int d) {
    struct dev *dv = &j->devs[d];
    int first = j->n_workers;
    for (int k = 0; k < dv->n_workers; k++) {
        struct worker *w = &j->workers[first + k];
        struct rtx_err berr = {0};
        w->j = j;
        w->dev = d;
        if (j->gpu_iface->backend_new(j->gpu_ctx, dv->cuda, &w->be, &berr) == 0) continue;
        for (int q = 0; q < k; q++) {
            rtx_backend_free(j->workers[first + q].be);
            j->workers[first + q].be = NULL;
        }
        w->be = NULL;
        dv->healthy = false;
        dv->n_workers = 0;
        snprintf(dv->detail, sizeof dv->detail, "cannot create its backend: %.220s", berr.msg);
        rtx_log(RTX_LOG_WARN, "device unhealthy: no jobs run on it", "device", dv->name, "error",
                dv->detail, NULL);
        return;
    }
    j->n_workers += dv->n_workers;
}

/* cfg as device slot dv's scheduler runs it: executors and max_running are its workers. */
static struct rtx_sched_config device_sched_config(const struct rtx_sched_config *cfg,
                                                   const struct dev *dv) {
    struct rtx_sched_config c = *cfg;
    c.executors = dv->n_workers;
    c.max_running = dv->n_workers;
    return c;
}

/* Creates the scheduler of every device slot with workers: the shared lane configuration,
 * with executors and max_running set to the slot's worker count. */
static int scheds_new(struct rtx_jobs *j, struct rtx_err *err) {
    for (int d = 0; d < j->n_devs; d++) {
        struct dev *dv = &j->devs[d];
        if (dv->n_workers <= 0) continue;
        struct rtx_sched_config c = device_sched_config(&j->sched_cfg, dv);
        int rc = rtx_sched_new(&c, sched_now(), &dv->sched, err);
        if (rc < 0) return rtx_err_prefix(err, "jobs: the scheduler of %s", dv->name);
    }
    return 0;
}

static int init_sync(struct rtx_jobs *j) {
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0) return -1;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&j->mu, NULL);
    pthread_mutex_init(&j->wmu, NULL);
    pthread_mutex_init(&j->rmu, NULL);
    pthread_cond_init(&j->work_cv, NULL);
    pthread_cond_init(&j->idle_cv, &ca);
    pthread_cond_init(&j->pending_cv, NULL);
    pthread_cond_init(&j->hk_cv, &ca);
    pthread_cond_init(&j->wcv, NULL);
    pthread_condattr_destroy(&ca);
    return 0;
}

int rtx_jobs_start(const struct rtx_jobs_options *opt, struct rtx_jobs **out,
                   struct rtx_err *err) {
    struct rtx_err local;
    if (!err) err = &local;
    if (!opt || !out) return rtx_err_set(err, RTX_EINVAL, "jobs: invalid argument");
    *out = NULL;
    int rc = check_options(opt, err);
    if (rc < 0) return rc;
    struct rtx_jobs *j = rtx_calloc(1, sizeof *j);
    if (!j) return rtx_err_set(err, RTX_ENOMEM, "jobs: out of memory");
    if (init_sync(j) < 0) {
        rtx_free(j);
        return rtx_err_set(err, RTX_ENOMEM, "jobs: out of memory");
    }
    if ((rc = sched_config(opt, &j->sched_cfg, err)) < 0) goto fail;
    j->store = opt->store;
    struct rtx_limits dl = rtx_limits_default(), lim = opt->limits;
    if (lim.max_nodes <= 0) lim.max_nodes = dl.max_nodes;
    if (lim.max_values <= 0) lim.max_values = dl.max_values;
    if (lim.max_dims <= 0) lim.max_dims = dl.max_dims;
    if (lim.max_elements <= 0) lim.max_elements = dl.max_elements;
    if (lim.max_tensor_bytes <= 0) lim.max_tensor_bytes = dl.max_tensor_bytes;
    if (lim.max_total_bytes <= 0) lim.max_total_bytes = dl.max_total_bytes;
    j->limits = lim;
    j->max_queued = opt->max_queued;
    j->cpu_threads = opt->cpu_threads;
    j->default_policy = opt->default_restart_policy;
    j->n_lanes = opt->n_lanes;
    j->index_cap = INDEX_MIN_BUCKETS;
    j->index = rtx_calloc(j->index_cap, sizeof *j->index);
    j->plan_cache = opt->plan_cache;
    j->plan_cache_bytes = opt->plan_cache_bytes;
    j->runs = rtx_calloc(RTX_JOBS_RUNS_KEPT, sizeof *j->runs);
    for (int b = 0; b < RUN_BUCKETS; b++)
        j->run_heads[b] = -1;
    int n_gpu_workers = devices_init(j, opt);
    j->workers = rtx_calloc((size_t)(opt->workers + n_gpu_workers), sizeof *j->workers);
    if (!j->index || !j->runs || !j->workers) goto oom;
    for (int i = 0; i < opt->n_lanes; i++) {
        if (!(j->lanes[i].name = rtx_strdup(opt->lanes[i]))) goto oom;
        if (strcmp(opt->lanes[i], opt->default_lane) == 0) j->default_lane = i;
    }
    rc = class_parse(j, opt->default_device ? opt->default_device : "auto", &j->default_cls, err);
    if (rc < 0) {
        rtx_err_prefix(err, "jobs: default device");
        goto fail;
    }
    j->n_workers = j->n_cpu_workers = opt->workers;
    for (int i = 0; i < j->n_workers; i++) {
        j->workers[i].j = j;
        j->workers[i].dev = DEV_CPU;
        struct rtx_cpu_options co = {.n_threads = opt->cpu_threads};
        if ((rc = rtx_backend_cpu_new(&co, &j->workers[i].be, err)) < 0) {
            rtx_err_prefix(err, "jobs: worker %d backend", i);
            goto fail;
        }
    }
    for (int d = 1; d < j->n_devs; d++) gpu_workers_new(j, d);
    for (int i = 0; i < j->n_workers; i++) {
        j->workers[i].plans.max_plans = j->plan_cache;
        j->workers[i].plans.max_bytes = j->plan_cache_bytes;
    }
    if ((rc = scheds_new(j, err)) < 0) goto fail;
    load_costs(j);
    if ((rc = recover(j, err)) < 0) goto fail;
    for (int i = 0; i < j->n_workers; i++) {
        if (pthread_create(&j->workers[i].thread, NULL, worker_main, &j->workers[i]) != 0) {
            rc = rtx_err_set(err, RTX_ENOMEM, "jobs: cannot start worker thread %d", i);
            join_workers(j);
            goto fail;
        }
        j->workers[i].started = true;
    }
    if (pthread_create(&j->hk_thread, NULL, housekeeper_main, j) != 0) {
        rc = rtx_err_set(err, RTX_ENOMEM, "jobs: cannot start the housekeeping thread");
        join_workers(j);
        goto fail;
    }
    j->hk_started = true;
    char nw[16], nt[16], ng[16], dd[24];
    snprintf(nw, sizeof nw, "%d", j->n_cpu_workers);
    snprintf(nt, sizeof nt, "%d", j->cpu_threads);
    snprintf(ng, sizeof ng, "%d", j->n_workers - j->n_cpu_workers);
    class_text(j->default_cls, dd, sizeof dd);
    char pc[16], pcb[32];
    snprintf(pc, sizeof pc, "%d", j->plan_cache);
    snprintf(pcb, sizeof pcb, "%zu", j->plan_cache_bytes);
    rtx_log(RTX_LOG_INFO, "job workers started", "workers", nw, "cpu_threads", nt, "gpu_workers",
            ng, "default_device", dd, "plan_cache", pc, "plan_cache_bytes", pcb, NULL);
    *out = j;
    return 0;
oom:
    rc = rtx_err_set(err, RTX_ENOMEM, "jobs: out of memory");
fail:
    destroy(j);
    return rc;
}

void rtx_jobs_stop(struct rtx_jobs *j) {
    if (!j) return;
    join_workers(j);
    if (j->costs_dirty) save_costs(j);
    char q[24];
    snprintf(q, sizeof q, "%d", j->n_queued);
    rtx_log(RTX_LOG_INFO, "job workers stopped", "queued", q, NULL);
    destroy(j);
}

/* ------------------------------------------------------------------------------------------
 * Submit
 * ---------------------------------------------------------------------------------------- */

/* Whether a new job may be admitted (under mu). */
static int admission_open(struct rtx_jobs *j, struct rtx_err *err) {
    if (j->draining) return rtx_err_set(err, RTX_EUNAVAILABLE, "draining: not accepting jobs");
    if ((int64_t)j->n_queued >= j->max_queued) /* pending jobs are in their queue already */
        return rtx_err_set(err, RTX_EUNAVAILABLE, "queue full: %d jobs queued (limit %" PRId64 ")",
                           j->n_queued, j->max_queued);
    return 0;
}

/* Checks the request's fields other than graph and inputs. */
static int check_fields(struct rtx_jobs *j, const Rtx__V1__SubmitRequest *m, int64_t now,
                        int *lane, enum rtx_restart_policy *policy, struct rtx_err *err) {
    if (m->lane[0] == '\0') {
        *lane = j->default_lane;
    } else if ((*lane = find_lane(j, m->lane)) < 0) {
        char known[200] = "";
        for (int i = 0; i < j->n_lanes; i++)
            list_append(known, sizeof known, j->lanes[i].name);
        return rtx_err_set(err, RTX_EINVAL, "unknown lane '%s' (lanes: %s)", m->lane, known);
    }
    switch (m->restart_policy) {
    case RTX__V1__RESTART_POLICY__RESTART_POLICY_UNSPECIFIED:
        pthread_mutex_lock(&j->mu);
        *policy = j->default_policy;
        pthread_mutex_unlock(&j->mu);
        break;
    case RTX__V1__RESTART_POLICY__RESTART_POLICY_RERUN: *policy = RTX_RESTART_RERUN; break;
    case RTX__V1__RESTART_POLICY__RESTART_POLICY_FAIL: *policy = RTX_RESTART_FAIL; break;
    default:
        return rtx_err_set(err, RTX_EINVAL, "unknown restart policy %d", (int)m->restart_policy);
    }
    if (m->deadline_unix_ms < 0)
        return rtx_err_set(err, RTX_EINVAL, "deadline_unix_ms is negative (%" PRId64 ")",
                           m->deadline_unix_ms);
    if (m->deadline_unix_ms > 0 && m->deadline_unix_ms <= now)
        return rtx_err_set(err, RTX_EINVAL, "deadline already passed (%" PRId64 " ms ago)",
                           now - m->deadline_unix_ms);
    for (size_t i = 0; i < m->n_labels; i++) {
        if (m->labels[i]->key[0] == '\0')
            return rtx_err_set(err, RTX_EINVAL, "label %zu has an empty key", i);
        for (size_t k = 0; k < i; k++)
            if (strcmp(m->labels[k]->key, m->labels[i]->key) == 0)
                return rtx_err_set(err, RTX_EINVAL, "label '%s' is given more than once",
                                   m->labels[i]->key);
    }
    return 0;
}

/* Places a validated job: the class it asked for (device "" takes the default) and the class
 * it runs as, CPU for an "auto" job with a node the GPU cannot run. Errors as
 * rtx_jobs_submit documents them. */
static int place(struct rtx_jobs *j, const char *device, const struct prepared *p,
                 enum job_class *asked, enum job_class *cls, struct rtx_err *err) {
    enum job_class c = j->default_cls;
    int rc = device[0] ? class_parse(j, device, &c, err) : 0;
    if (rc < 0) return rc;
    pthread_mutex_lock(&j->mu);
    rc = placement_error(j, c, err);
    struct rtx_backend *be = rc == 0 ? gpu_backend_for(j, c) : NULL;
    pthread_mutex_unlock(&j->mu);
    if (rc < 0) return rc;
    *asked = *cls = c;
    int bad = be ? first_unsupported(be, p->graph) : -1;
    if (bad < 0) return 0;
    if (c == CLS_AUTO) {
        *cls = CLS_CPU;
        return 0;
    }
    char why[300];
    unsupported_text(be, p->graph, bad, why, sizeof why);
    return rtx_err_set(err, RTX_EINVAL, "%s", why);
}

/* Journals a validated job (pending in the index). Returns 0 with existing_id set to the
 * first job's id on an idempotent repeat. */
static int journal_new(struct rtx_jobs *j, const struct job *job, const Rtx__V1__SubmitRequest *m,
                       const struct prepared *p, enum rtx_restart_policy policy, int64_t now,
                       const void *request, size_t len, char existing_id[RTX_JOB_ID_LEN],
                       struct rtx_err *err) {
    struct rtx_job_label *labels = rtx_calloc(m->n_labels + 1, sizeof *labels);
    if (!labels) return rtx_err_set(err, RTX_ENOMEM, "out of memory journaling the job");
    for (size_t i = 0; i < m->n_labels; i++) {
        labels[i].key = m->labels[i]->key;
        labels[i].value = m->labels[i]->value;
    }
    char requested[24];
    class_text(job->asked, requested, sizeof requested);
    struct rtx_job_info info = {
        .requested_device = requested,
        .state = RTX_JOB_QUEUED,
        .reason = (char *)"",
        .lane = j->lanes[job->lane].name,
        .graph_name = p->graph->name ? p->graph->name : (char *)"",
        .idempotency_key = m->idempotency_key,
        .restart_policy = policy,
        .n_labels = (int)m->n_labels,
        .labels = labels,
        .created_ms = now,
        .deadline_ms = m->deadline_unix_ms,
    };
    memcpy(info.id, job->id, sizeof info.id);
    int rc = rtx_store_job_insert(j->store, &info, request, len, existing_id, err);
    rtx_free(labels);
    return rc;
}


int rtx_jobs_submit(struct rtx_jobs *j, const void *request, size_t len,
                    char job_id[RTX_JOB_ID_LEN], bool *deduplicated, struct rtx_err *err) {
    struct rtx_err local;
    if (!err) err = &local;
    if (!j || (!request && len > 0) || !job_id)
        return rtx_err_set(err, RTX_EINVAL, "submit: invalid argument");
    job_id[0] = '\0';
    if (deduplicated) *deduplicated = false;

    pthread_mutex_lock(&j->mu);
    int rc = admission_open(j, err); /* refuse early, before any decoding */
    pthread_mutex_unlock(&j->mu);
    if (rc < 0) return rc;

    int64_t now = now_ms();
    Rtx__V1__SubmitRequest *m = NULL;
    struct prepared *p = NULL;
    struct job *job = NULL;
    int lane = 0;
    enum rtx_restart_policy policy = RTX_RESTART_RERUN;
    enum job_class asked = CLS_AUTO, cls = CLS_AUTO;
    if ((rc = unpack_request(request, len, &m, err)) < 0) return rc;
    if ((rc = check_fields(j, m, now, &lane, &policy, err)) < 0) goto out;
    if ((rc = prepare(m, &j->limits, &p, err)) < 0) goto out;
    if ((rc = place(j, m->device, p, &asked, &cls, err)) < 0) goto out;
    if (!(job = rtx_calloc(1, sizeof *job))) {
        rc = rtx_err_set(err, RTX_ENOMEM, "out of memory queueing the job");
        goto out;
    }
    rtx_store_new_job_id(job->id);
    job->lane = lane;
    job->asked = asked;
    job->cls = cls;
    job->cost_key = p->cost_key;
    job->deadline_ms = m->deadline_unix_ms;
    job->where = JOB_PENDING;

    /* admission control: queued in a scheduler before the journal insert, so that a refused
     * job is never journaled (a worker that dispatches it meanwhile waits for the insert) */
    pthread_mutex_lock(&j->mu);
    if (job->deadline_ms > 0) /* on the scheduler's clock; one that passed meanwhile is refused */
        job->deadline_ns = sched_now() + (job->deadline_ms - now_ms()) * 1000000;
    if ((rc = admission_open(j, err)) == 0 && (rc = sched_place(j, job, err)) == 0) {
        index_add(j, job);
    }
    pthread_mutex_unlock(&j->mu);
    if (rc < 0) goto out;

    char existing[RTX_JOB_ID_LEN] = "";
    rc = journal_new(j, job, m, p, policy, now, request, len, existing, err);
    bool dup = rc == 0 && existing[0] != '\0';
    bool cancel = false, expired = false;
    /* the id is copied before the job is released: from then on a worker may run and free it */
    if (rc == 0 && !dup) memcpy(job_id, job->id, RTX_JOB_ID_LEN);
    pthread_mutex_lock(&j->mu);
    if (rc < 0 || dup || job->cancel_requested || job->expired) {
        index_remove(j, job);
        cancel = rc == 0 && !dup && job->cancel_requested;
        expired = rc == 0 && !dup && !cancel && job->expired;
        if (job->claimed) { /* its worker finishes the scheduler item and frees it */
            job->where = JOB_DROPPED;
            pthread_cond_broadcast(&j->pending_cv);
            job = NULL;
        } else if (job->in_sched) {
            sched_remove(j, job);
        }
    } else {
        if (j->cache_bytes + len <= CACHE_MAX_BYTES) { /* keep the decoded job for the worker */
            job->prep = p;
            job->cached_bytes = len;
            j->cache_bytes += len;
            p = NULL;
        }
        if (job->claimed) { /* its worker runs it: out of any queue, so cancel stops it */
            job->where = JOB_CLAIMED;
            pthread_cond_broadcast(&j->pending_cv);
        } else {
            job->where = JOB_QUEUED;
        }
        job = NULL; /* owned by its scheduler (or worker) now */
    }
    pthread_mutex_unlock(&j->mu);
    bool queued = rc == 0 && !dup && !cancel && !expired;
    if (rtx__jobs_after_enqueue_hook && queued) rtx__jobs_after_enqueue_hook();
    if (rc < 0) goto out;
    if (dup) {
        memcpy(job_id, existing, RTX_JOB_ID_LEN);
        job_id[RTX_JOB_ID_LEN - 1] = '\0';
        if (deduplicated) *deduplicated = true;
        goto out;
    }
    log_state(j, job_id, lane, RTX_JOB_QUEUED, "", 0);
    if (cancel) {
        struct rtx_err cerr = {0};
        cancel_journaled(j, job_id, lane, &cerr);
    } else if (expired) {
        struct rtx_err xerr = {0};
        change_state(j, job_id, lane, RTX_JOB_EXPIRED, REASON_EXPIRED, &xerr);
    }
out:
    job_free(job);
    prepared_free(p);
    free_request(m);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * Cancel, watch
 * ---------------------------------------------------------------------------------------- */

int rtx_jobs_cancel(struct rtx_jobs *j, const char *id, struct rtx_job_info *out,
                    struct rtx_err *err) {
    struct rtx_err local;
    if (!err) err = &local;
    if (!j || !id) return rtx_err_set(err, RTX_EINVAL, "cancel: invalid argument");
    if (out) memset(out, 0, sizeof *out);
    int rc = 0;
    pthread_mutex_lock(&j->mu);
    struct job *job = strlen(id) < RTX_JOB_ID_LEN ? index_find(j, id) : NULL;
    struct job *taken = NULL;
    if (job && job->where == JOB_QUEUED) {
        sched_remove(j, job);
        job->where = JOB_CANCELLING;
        taken = job;
    } else if (job) { /* pending: its submitter cancels it; claimed, running: its worker */
        job->cancel_requested = true;
        if (job->where == JOB_RUNNING || job->where == JOB_CLAIMED) raise_cancel(job);
    }
    pthread_mutex_unlock(&j->mu);

    if (taken) {
        rc = cancel_journaled(j, taken->id, taken->lane, err);
        pthread_mutex_lock(&j->mu);
        if (rc < 0) { /* still queued in the journal: queued here too, if a scheduler admits it */
            struct rtx_err qerr = {0};
            if (sched_place(j, taken, &qerr) == 0) {
                taken->where = JOB_QUEUED;
                taken = NULL;
            } else {
                forget(j, taken);
                rtx_log(RTX_LOG_ERROR, "job left queued in the journal until the next start",
                        "job", taken->id, "error", qerr.msg, NULL);
            }
        } else {
            forget(j, taken);
        }
        pthread_mutex_unlock(&j->mu);
        job_free(taken); /* NULL when it is queued again */
        if (rc < 0) return rc;
    } else if (!job) {
        /* Not in memory: terminal, unknown, or left running by an interrupted drain. */
        struct rtx_job_info info = {0};
        if ((rc = rtx_store_job_get(j->store, id, &info, err)) < 0) return rc;
        bool live = !rtx_job_state_is_terminal(info.state);
        int lane = find_lane(j, info.lane ? info.lane : "");
        rtx_job_info_clear(&info);
        if (live && (rc = cancel_journaled(j, id, lane < 0 ? j->default_lane : lane, err)) < 0)
            return rc;
    }
    if (out && (rc = rtx_store_job_get(j->store, id, out, err)) < 0) return rc;
    return 0;
}

int rtx_jobs_watch(struct rtx_jobs *j, const char *id, rtx_jobs_watch_cb cb, void *ctx,
                   uint64_t *watch, struct rtx_err *err) {
    struct rtx_err local;
    if (!err) err = &local;
    if (!j || !id || !cb || !watch) return rtx_err_set(err, RTX_EINVAL, "watch: invalid argument");
    *watch = 0;
    if (strlen(id) >= RTX_JOB_ID_LEN) return rtx_err_set(err, RTX_ENOTFOUND, "no job '%.40s'", id);
    struct watch *w = rtx_calloc(1, sizeof *w);
    if (!w) return rtx_err_set(err, RTX_ENOMEM, "watch: out of memory");
    snprintf(w->job, sizeof w->job, "%s", id);
    w->cb = cb;
    w->ctx = ctx;
    size_t b = watch_bucket(id);
    pthread_mutex_lock(&j->wmu);
    w->handle = (++j->watch_seq) * WATCH_BUCKETS + b;
    w->next = j->watches[b];
    j->watches[b] = w;
    uint64_t handle = w->handle;
    pthread_mutex_unlock(&j->wmu);

    /* Registered first, read second: a change journaled after this read is published to
     * the watch, and one before it is in the snapshot. */
    struct rtx_job_info info = {0};
    int rc = rtx_store_job_get(j->store, id, &info, err);
    if (rc < 0) {
        rtx_jobs_unwatch(j, handle);
        return rc;
    }
    *watch = handle;
    struct rtx_jobs_run run;
    bool ran = info.state == RTX_JOB_SUCCEEDED && rtx_jobs_get_run(j, id, &run) == 0;
    deliver(j, &info, ran ? &run : NULL, handle);
    rtx_job_info_clear(&info);
    return 0;
}

void rtx_jobs_unwatch(struct rtx_jobs *j, uint64_t watch) {
    if (!j || !watch) return;
    pthread_mutex_lock(&j->wmu);
    for (;;) {
        struct watch *w = j->watches[watch % WATCH_BUCKETS];
        while (w && w->handle != watch)
            w = w->next;
        if (!w) break;
        if (!w->in_cb) {
            watch_unlink_free(j, w);
            break;
        }
        w->removed = true; /* no new deliveries; its deliverer frees it after the callback */
        if (pthread_equal(w->cb_thread, pthread_self())) break; /* unwatch from the callback */
        pthread_cond_wait(&j->wcv, &j->wmu);
    }
    pthread_mutex_unlock(&j->wmu);
}

/* ------------------------------------------------------------------------------------------
 * Drain, settings, stats
 * ---------------------------------------------------------------------------------------- */

void rtx_jobs_drain(struct rtx_jobs *j, int *running, int *queued) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    j->draining = true;
    int r = j->n_running, q = j->n_queued; /* pending jobs are counted queued */
    pthread_mutex_unlock(&j->mu);
    if (running) *running = r;
    if (queued) *queued = q;
    char rs[24], qs[24];
    snprintf(rs, sizeof rs, "%d", r);
    snprintf(qs, sizeof qs, "%d", q);
    rtx_log(RTX_LOG_INFO, "draining jobs", "running", rs, "queued", qs, NULL);
}

/* Whether a worker still runs a job that was interrupted (under mu). */
static bool interrupted_running(struct rtx_jobs *j) {
    for (int i = 0; i < j->n_workers; i++)
        if (j->workers[i].current && j->workers[i].current->interrupted) return true;
    return false;
}

void rtx_jobs_wait_idle(struct rtx_jobs *j, int grace_ms) {
    if (!j) return;
    int64_t end = mono_ms() + (grace_ms > 0 ? grace_ms : 0);
    pthread_mutex_lock(&j->mu);
    while (j->n_running > 0) {
        int64_t left = end - mono_ms();
        if (left <= 0) break;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += left / 1000;
        ts.tv_nsec += (left % 1000) * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&j->idle_cv, &j->mu, &ts);
    }
    int n = j->n_running > 0 ? interrupt_running(j) : 0;
    if (n > 0) {
        char ns[24];
        snprintf(ns, sizeof ns, "%d", n);
        rtx_log(RTX_LOG_WARN, "drain grace over: interrupting running jobs", "jobs", ns, NULL);
    }
    while (interrupted_running(j))
        pthread_cond_wait(&j->idle_cv, &j->mu);
    pthread_mutex_unlock(&j->mu);
}

void rtx_jobs_set_restart_policy(struct rtx_jobs *j, enum rtx_restart_policy p) {
    if (!j || (p != RTX_RESTART_RERUN && p != RTX_RESTART_FAIL)) return;
    pthread_mutex_lock(&j->mu);
    j->default_policy = p;
    pthread_mutex_unlock(&j->mu);
}

int rtx_jobs_reconfigure(struct rtx_jobs *j, const struct rtx_sched_config *sched,
                         struct rtx_err *err) {
    if (!j || !sched) return rtx_err_set(err, RTX_EINVAL, "jobs: invalid argument");
    int64_t now = sched_now();
    int rc = 0, d;
    pthread_mutex_lock(&j->mu);
    for (d = 0; d < j->n_devs && rc == 0; d++) {
        struct dev *dv = &j->devs[d];
        if (!dv->sched) continue;
        struct rtx_sched_config c = device_sched_config(sched, dv);
        rc = rtx_sched_reconfigure(dv->sched, &c, now, err);
        if (rc) rtx_err_prefix(err, "jobs: the scheduler of %s", dv->name);
    }
    if (rc == 0) {
        j->sched_cfg = *sched;
    } else {
        /* back to what they ran: their storage is at least as large, so this cannot fail */
        for (int k = 0; k < d - 1; k++) {
            if (!j->devs[k].sched) continue;
            struct rtx_sched_config c = device_sched_config(&j->sched_cfg, &j->devs[k]);
            rtx_sched_reconfigure(j->devs[k].sched, &c, now, NULL);
        }
    }
    pthread_mutex_unlock(&j->mu);
    return rc;
}

void rtx_jobs_get_stats(struct rtx_jobs *j, struct rtx_jobs_stats *st) {
    if (!j || !st) return;
    memset(st, 0, sizeof *st);
    pthread_mutex_lock(&j->mu);
    st->n_lanes = j->n_lanes;
    for (int i = 0; i < j->n_lanes; i++) {
        st->lanes[i].lane = j->lanes[i].name;
        st->lanes[i].queued = j->lanes[i].queued;
        st->lanes[i].running = j->lanes[i].running;
    }
    st->succeeded = j->succeeded;
    st->failed = j->failed;
    st->cancelled = j->cancelled;
    st->expired = j->expired;
    st->draining = j->draining;
    st->workers = j->n_cpu_workers;
    st->cpu_threads = j->cpu_threads;
    st->n_devices = j->n_devs;
    for (int d = 0; d < j->n_devs; d++) {
        const struct dev *dv = &j->devs[d];
        struct rtx_jobs_device *o = &st->devices[d];
        snprintf(o->name, sizeof o->name, "%s", dv->name);
        o->cuda_index = dv->cuda;
        o->workers = dv->n_workers;
        o->healthy = dv->healthy;
        snprintf(o->detail, sizeof o->detail, "%s", dv->detail);
        o->jobs_started = dv->jobs_started;
        o->plan_cache_hits = dv->plan_hits;
        o->plan_cache_misses = dv->plan_misses;
        o->plan_cache_evictions = dv->plan_evictions;
        o->workers_warm = dv->workers_warm;
        o->warmup_ms = dv->warmup_ms;
    }
    for (int i = 0; i < j->n_workers; i++) {
        const struct worker *w = &j->workers[i];
        st->devices[w->dev].plan_cache_plans += w->kept_plans;
        st->devices[w->dev].plan_cache_bytes += w->kept_bytes;
    }
    pthread_mutex_unlock(&j->mu);
}

/* Adds pool totals b into a (fragmentation is left for pool_finish). */
static void pool_add(struct rtx_mem_pool_kind_stats *a, const struct rtx_mem_pool_kind_stats *b) {
    a->bytes_requested += b->bytes_requested;
    a->bytes_allocated += b->bytes_allocated;
    a->bytes_allocated_peak += b->bytes_allocated_peak;
    a->bytes_active += b->bytes_active;
    a->bytes_reserved += b->bytes_reserved;
    a->bytes_reserved_peak += b->bytes_reserved_peak;
    a->bytes_free += b->bytes_free;
    if (b->bytes_free_largest > a->bytes_free_largest)
        a->bytes_free_largest = b->bytes_free_largest;
    a->n_active_blocks += b->n_active_blocks;
    a->n_free_blocks += b->n_free_blocks;
    a->n_segments += b->n_segments;
    a->n_allocs += b->n_allocs;
    a->n_frees += b->n_frees;
    a->n_cache_hits += b->n_cache_hits;
    a->n_segment_allocs += b->n_segment_allocs;
    a->n_segment_frees += b->n_segment_frees;
    a->n_retries += b->n_retries;
    a->n_ooms += b->n_ooms;
}

static void pool_finish(struct rtx_mem_pool_kind_stats *a) {
    a->fragmentation =
        a->bytes_free ? 1.0 - (double)a->bytes_free_largest / (double)a->bytes_free : 0.0;
}

int rtx_jobs_get_pools(struct rtx_jobs *j, struct rtx_jobs_pool_row *rows, int max, int *n,
                       struct rtx_err *err) {
    if (!j || !rows || !n || max < 0)
        return rtx_err_set(err, RTX_EINVAL, "pools: invalid argument");
    *n = 0;
    for (int d = 1; d < j->n_devs; d++) {
        const struct dev *dv = &j->devs[d];
        if (dv->n_workers == 0) continue;
        if (*n + 2 > max) return rtx_err_set(err, RTX_ELIMIT, "pools: more than %d rows", max);
        struct rtx_jobs_pool_row *dr = &rows[*n], *pr = &rows[*n + 1];
        memset(dr, 0, sizeof *dr);
        memset(pr, 0, sizeof *pr);
        snprintf(dr->device, sizeof dr->device, "%s", dv->name);
        snprintf(pr->device, sizeof pr->device, "%s/pinned", dv->name);
        dr->kind = "cuda";
        pr->kind = "pinned";
        for (int i = j->n_cpu_workers; i < j->n_workers; i++) {
            if (j->workers[i].dev != d) continue;
            struct rtx_mem_pool_stats ds, ps;
            int rc = j->gpu_iface->pool_stats(j->gpu_ctx, j->workers[i].be, &ds, &ps, err);
            if (rc < 0) return rtx_err_prefix(err, "pools of %s", dv->name);
            pool_add(&dr->total, &ds.total);
            pool_add(&pr->total, &ps.total);
            dr->cap_bytes = ds.cap_bytes;
            pr->cap_bytes = ps.cap_bytes;
            dr->pools++;
            pr->pools++;
        }
        pool_finish(&dr->total);
        pool_finish(&pr->total);
        pthread_mutex_lock(&j->mu);
        dr->healthy = pr->healthy = dv->healthy;
        snprintf(dr->detail, sizeof dr->detail, "%s", dv->detail);
        snprintf(pr->detail, sizeof pr->detail, "%s", dv->detail);
        pthread_mutex_unlock(&j->mu);
        *n += 2;
    }
    if (*n + 1 > max) return rtx_err_set(err, RTX_ELIMIT, "pools: more than %d rows", max);
    struct rtx_jobs_pool_row *cr = &rows[(*n)++];
    memset(cr, 0, sizeof *cr);
    snprintf(cr->device, sizeof cr->device, "cpu");
    cr->kind = "cpu";
    cr->healthy = true;
    snprintf(cr->detail, sizeof cr->detail,
             "host memory comes from malloc, not from a caching pool; allocated_peak_bytes is "
             "the largest peak of a job run on the CPU");
    pthread_mutex_lock(&j->mu);
    cr->total.bytes_allocated_peak = j->devs[DEV_CPU].peak_bytes;
    pthread_mutex_unlock(&j->mu);
    return 0;
}

void rtx_jobs_get_lanes(struct rtx_jobs *j, struct rtx_jobs_lanes *out) {
    if (!j || !out) return;
    memset(out, 0, sizeof *out);
    int64_t now = sched_now();
    pthread_mutex_lock(&j->mu);
    snprintf(out->default_lane, sizeof out->default_lane, "%s", j->lanes[j->default_lane].name);
    for (int d = 0; d < j->n_devs; d++) {
        if (!j->devs[d].sched) continue;
        struct rtx_jobs_lane_device *o = &out->devices[out->n_devices++];
        snprintf(o->device, sizeof o->device, "%s", j->devs[d].name);
        o->workers = j->devs[d].n_workers;
        o->healthy = j->devs[d].healthy;
        rtx_sched_get_stats(j->devs[d].sched, now, &o->stats);
    }
    pthread_mutex_unlock(&j->mu);
}
