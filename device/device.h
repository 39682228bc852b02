/*
 * device.h - the device layer: one owner per device (the CPU and every CUDA device) for
 * everything that runs work on it - the job manager, each served model version and, later,
 * the generation KV cache. The SLA schedulers decide the order of work; the device layer
 * decides where it runs and owns what the device holds: the backends made on it (one per
 * executing thread, each with its own stream and caching pools), one memory budget with a
 * reservation per consumer, one plan cache, one health state, the load that placement
 * reads, and the book of the schedulers' learned costs with their persistence in the store.
 *
 * DESIGN
 * Slots. A device set (struct rtx_devices) is made once at start from the CUDA devices
 * discovered then: slot 0 is the CPU, slot 1 + N is CUDA device N (at most RTX_DEVICES_MAX
 * slots). A device (struct rtx_device) lives as long as its set.
 *
 * Budget. Each device has a budget in bytes: its memory (physical RAM for the CPU) times
 * memory_fraction, capped at memory_cap_bytes when set. A consumer (struct
 * rtx_device_consumer: "jobs", "model mlp:1", "kv-cache") registers on a device with a
 * reservation: the sum of reservations never exceeds the budget (a registration that does
 * not fit fails with RTX_ELIMIT naming the device, the consumer, what it asked and what is
 * left). A consumer may always use its reservation; beyond it, it borrows from the unreserved
 * rest of the budget while that lasts (first come). So no consumer can take memory another
 * consumer reserved. Usage is charged through the consumer's struct rtx_mem_account
 * (runtime/mem-pool.h): the caching pools of the backends the consumer made charge every
 * segment they obtain from the device and credit it when they return it (the CPU backend
 * charges each buffer). A charge past the consumer's share fails with RTX_ENOMEM and a
 * message naming the device, the consumer, its reservation, its use and the borrowable rest;
 * the pool then returns its cached segments and tries once more, and the request that needed
 * the memory fails (gRPC RESOURCE_EXHAUSTED, HTTP 429), never another consumer's work.
 *
 * Backends. A consumer makes the backends of its threads with rtx_device_backend_new: the CPU
 * backend on slot 0, the CUDA backend (or, in tests, a fake through rtx_device_gpu_i) on a
 * GPU, charged to the consumer's account. A GPU backend is warmed up before it is returned (a
 * tiny graph run twice: node by node, then captured), so that kernels, cuBLASLt's choices,
 * pool segments and the first graph capture exist before the first request. The device counts
 * its backends: they are its executors, which placement divides the load by.
 *
 * Health. One sticky state per device, shared by every consumer: rtx_device_check, called by
 * a consumer after a run failed on one of its backends, synchronizes the backend; RTX_EGPU
 * there means the CUDA context kept a sticky error, and the device is marked unhealthy at once
 * for every consumer (a CUDA context cannot recover in a process). Fault listeners
 * (rtx_devices_on_fault) hear of it once, so the job manager wakes its workers and serving
 * stops giving the device batches. Admin, rtxctl and /metrics read it through
 * rtx_device_info.
 *
 * Plan cache. One per device, shared by every consumer: plans keyed by
 * rtx_device_plan_key (SHA-256 of the graph's content, the inputs' dtypes and shapes, the
 * planning limits) and by the backend that made them (a plan holds the state of one backend:
 * uploaded initializers, fixed buffers, its captured CUDA graph). Bounded by count and by the
 * bytes the kept plans may hold, least recently used dropped first; hits, misses and
 * evictions counted per device. A plan is taken out while it runs (so one backend thread runs
 * it at a time) and returned after: kept as most recently used when the run succeeded, dropped
 * when it failed. Run 1 of a plan goes node by node, run 2 captures a CUDA graph, later runs
 * replay it (runtime/plan.c): a repeated graph, whether it came as a job or as a served
 * model's batch, replays from this cache.
 *
 * Placement. rtx_devices_place orders the GPUs a piece of work may go to: healthy ones (of
 * those it names, when it names some) with room in the budget for what it needs, least
 * loaded first (load: the work consumers report in flight, per executor), then most
 * headroom.
 *
 * Learned costs. The set keeps one book of the SLA schedulers' learned run-time costs (a
 * moving average and its sample count per cost key) and persists it in the store's
 * sched_costs table, for every consumer: rows are keyed by (where, key), `where` being the
 * store's device column - a device's name ("cpu", "cuda:0") for the job manager's per-device
 * schedulers, "infer" for served model versions (whose costs follow the version, not a
 * device). rtx_devices_costs_open reads every saved row once, at start; consumers read the
 * book when their schedulers start (rtx_devices_costs_each, rtx_devices_cost_get), put what
 * they learned into it (rtx_devices_cost_put marks a row dirty when it changed) and save it
 * (rtx_devices_costs_save writes the dirty rows in one transaction). A failed save leaves the
 * rows dirty, so the next save retries them; a put during a save leaves its row dirty. A set
 * whose book was never opened keeps no costs (puts are ignored); opened without a store it
 * keeps them in memory only.
 *
 * Thread safety: every call is thread-safe unless it says otherwise; each device has one
 * mutex, held briefly and never across a backend call; the book has one, never held across a
 * store call.
 */
#ifndef RTX_DEVICE_H
#define RTX_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RTX_DEVICES_MAX 17          /* slots: the CPU and 16 CUDA devices */
#define RTX_DEVICE_NAME_LEN 16      /* "cpu", "cuda:15" with the NUL */
#define RTX_DEVICE_PLAN_KEY_LEN 32  /* a SHA-256 */
#define RTX_DEVICE_CONSUMER_NAME_LEN 128
#define RTX_DEVICE_COST_WHERE_LEN 24 /* a learned cost's place: store.h's device column */

struct rtx_backend;             /* runtime/backend.h */
struct rtx_mem_account;         /* runtime/mem-pool.h */
struct rtx_mem_pool_stats;      /* runtime/mem-pool.h */
struct rtx_cuda_devices;        /* kernels/cuda/backend-cuda.h */
struct rtx_plan;                /* runtime/runtime.h */
struct rtx_store;               /* store/store.h */

enum rtx_device_kind { RTX_DEVICE_CPU, RTX_DEVICE_CUDA };

/* How GPU backends are made: NULL in rtx_devices_options means the CUDA backend; tests pass
 * fakes. Every slot gets the interface's ctx. */
struct rtx_device_gpu_i {
    /* Creates a backend on CUDA device `cuda` whose device memory is charged to `account`
     * (may be NULL: no budget). */
    int (*backend_new)(void *ctx, int cuda, struct rtx_mem_account *account,
                       struct rtx_backend **out, struct rtx_err *err);
    /* Statistics of a backend's device pool and pinned host pool (either may be NULL); called
     * from any thread while the backend's own thread may be running on it. */
    int (*pool_stats)(void *ctx, struct rtx_backend *be, struct rtx_mem_pool_stats *dev,
                      struct rtx_mem_pool_stats *pinned, struct rtx_err *err);
};

struct rtx_devices_options {
    const struct rtx_cuda_devices *gpus; /* discovered at start; NULL or n == 0: the CPU only */
    int cpu_threads;              /* threads of each CPU backend; 0: one per online CPU */
    double memory_fraction;       /* of each device's memory the budget holds; 0: 0.9 */
    size_t memory_cap_bytes;      /* bytes: most any device's budget holds; 0: no cap */
    size_t cpu_memory_bytes;      /* bytes: the CPU's memory; 0: physical RAM (tests set it) */
    int plan_cache;               /* plans kept per device; 0: none */
    size_t plan_cache_bytes;      /* bytes: most the kept plans of a device may hold; 0: only
                                     the count bounds them */
    bool no_warm_up;              /* GPU backends are returned without warm-up (tests) */
    const struct rtx_device_gpu_i *gpu_iface; /* NULL: the CUDA backend */
    void *gpu_ctx;
};

struct rtx_devices;
struct rtx_device;
struct rtx_device_consumer;

/* Makes the set: the CPU's slot and one per listed CUDA device (a device listed unhealthy
 * stays unhealthy with its detail). RTX_EINVAL for a bad option, RTX_ENOMEM. */
int rtx_devices_new(const struct rtx_devices_options *o, struct rtx_devices **out,
                    struct rtx_err *err);
/* Frees the set, its plan caches and listeners. Every consumer must have been freed (its
 * backends too). NULL: no-op. */
void rtx_devices_free(struct rtx_devices *s);

/* Slots in the set (>= 1: the CPU is slot 0). */
int rtx_devices_count(const struct rtx_devices *s);
/* The device in slot `slot`, NULL when out of range. */
struct rtx_device *rtx_devices_get(struct rtx_devices *s, int slot);
/* CUDA device `cuda` (slot 1 + cuda), NULL when the host has no such device. */
struct rtx_device *rtx_devices_cuda(struct rtx_devices *s, int cuda);
/* Why the set has no GPU ("none was listed at start", or the discovery's reason); "" when it
 * has one. */
const char *rtx_devices_no_gpu_reason(const struct rtx_devices *s);

/* Called once per device when it becomes unhealthy, from the thread that found the fault,
 * without any device lock held. */
typedef void (*rtx_device_fault_fn)(void *ctx, struct rtx_device *d, const char *why);
/* Adds a listener (at most 8). RTX_ELIMIT beyond that. Not removable: a listener must
 * outlive the set's last fault, i.e. be added by a consumer that lives as long as the set or
 * that tolerates calls until rtx_devices_off_fault. */
int rtx_devices_on_fault(struct rtx_devices *s, rtx_device_fault_fn fn, void *ctx,
                         struct rtx_err *err);
/* Removes the listener (fn, ctx); waits until no call of it is running (so not from inside
 * that listener: it would wait for itself). */
void rtx_devices_off_fault(struct rtx_devices *s, rtx_device_fault_fn fn, void *ctx);

/* ------------------------------------------------------------------------------------------
 * One device
 * ---------------------------------------------------------------------------------------- */

int rtx_device_slot(const struct rtx_device *d);
enum rtx_device_kind rtx_device_kind(const struct rtx_device *d);
int rtx_device_cuda_index(const struct rtx_device *d);  /* -1 for the CPU */
const char *rtx_device_name(const struct rtx_device *d); /* "cpu", "cuda:0" */

/* What a device is and holds, for Admin, rtxctl and /metrics. */
struct rtx_device_info {
    int slot;
    enum rtx_device_kind kind;
    int cuda;                      /* -1 for the CPU */
    char name[RTX_DEVICE_NAME_LEN];
    char model[256];               /* "NVIDIA H200"; the CPU: "" */
    int sm_count;                  /* CUDA; 0 for the CPU */
    int cc_major, cc_minor;        /* CUDA */
    size_t memory_bytes;           /* the device's memory (physical RAM for the CPU) */
    bool healthy;
    char detail[256];              /* why not healthy; "" when healthy */
    /* budget */
    size_t budget_bytes;
    size_t reserved_bytes;         /* sum of the consumers' reservations */
    size_t used_bytes;             /* charged by every consumer now */
    size_t borrowed_bytes;         /* used beyond reservations (from the unreserved rest) */
    uint64_t refusals;             /* charges refused for want of share */
    int consumers;
    /* execution */
    int backends;                  /* backends made on it and not freed: its executors */
    int64_t load;                  /* work in flight that consumers reported */
    /* plan cache */
    int plans;                     /* plans kept */
    size_t plan_bytes;             /* bytes they may hold */
    uint64_t plan_hits, plan_misses, plan_evictions;
    /* warm-up (GPU backends) */
    int backends_warm;             /* backends made on it that were warmed up */
    double warmup_ms;              /* milliseconds: the longest warm-up of one */
};
void rtx_device_info(struct rtx_device *d, struct rtx_device_info *out);

/* One consumer's share of a device, for Admin and /metrics. */
struct rtx_device_consumer_info {
    char name[RTX_DEVICE_CONSUMER_NAME_LEN];
    size_t reserved_bytes;
    size_t used_bytes;
    size_t peak_bytes;
    uint64_t refusals;
    int backends;
};
/* Fills up to `max` consumers of d (in registration order) and returns how many it has. */
int rtx_device_consumers(struct rtx_device *d, struct rtx_device_consumer_info *out, int max);

/* ---- health ---- */

bool rtx_device_healthy(struct rtx_device *d);
/* Copies why d is unhealthy into buf ("" when healthy). */
void rtx_device_detail(struct rtx_device *d, char *buf, size_t len);
/* Marks d unhealthy with why (the first fault's reason stays) and calls the fault listeners
 * once; logs nothing (the caller does). Returns true when this call made it unhealthy. */
bool rtx_device_fault(struct rtx_device *d, const char *why);
/* After a run failed on be (a backend of d): synchronizes it; when that fails with RTX_EGPU
 * the device kept a sticky error and is faulted with that message, and when reason is not
 * NULL " [cuda:0 is now unhealthy and takes no more work]" is appended to it (within len).
 * Returns true when d is unhealthy afterwards. Out-of-memory and other ordinary failures
 * leave the device healthy. Call from be's own thread. */
bool rtx_device_check(struct rtx_device *d, struct rtx_backend *be, char *reason, size_t len);

/* ---- load (placement) ---- */

/* Work items in flight on d change by delta (a consumer adds when it queues or starts work
 * there and subtracts when it is done). */
void rtx_device_load_add(struct rtx_device *d, int64_t delta);

/* ------------------------------------------------------------------------------------------
 * Consumers: budget shares and backends
 * ---------------------------------------------------------------------------------------- */

/* Registers a consumer on d with a reservation of reserve_bytes (0: it only borrows).
 * RTX_ELIMIT when the reservation does not fit in what the budget has left unreserved (the
 * message names the device, the consumer, the reservation and what is left), RTX_EUNAVAILABLE
 * when d is unhealthy, RTX_ENOMEM. */
int rtx_device_consumer_new(struct rtx_device *d, const char *name, size_t reserve_bytes,
                            struct rtx_device_consumer **out, struct rtx_err *err);
/* Releases the reservation. Every backend the consumer made must have been freed; its
 * account must be at zero then. NULL: no-op. */
void rtx_device_consumer_free(struct rtx_device_consumer *c);
struct rtx_device *rtx_device_consumer_device(struct rtx_device_consumer *c);
/* The account its pools charge (runtime/mem-pool.h); for consumers that hold memory outside
 * any backend (a KV cache pool made directly). */
struct rtx_mem_account *rtx_device_consumer_account(struct rtx_device_consumer *c);
/* Charges bytes to the consumer directly (0, or RTX_ENOMEM with the message the pools give)
 * and gives them back. */
int rtx_device_consumer_charge(struct rtx_device_consumer *c, size_t bytes, struct rtx_err *err);
void rtx_device_consumer_credit(struct rtx_device_consumer *c, size_t bytes);

/* The threads of the CPU backends the consumer makes from now on (serving's
 * models.cpu_threads); 0: the set's cpu_threads. */
void rtx_device_consumer_set_cpu_threads(struct rtx_device_consumer *c, int n_threads);

/* Makes a backend on the consumer's device for one executing thread, charged to the
 * consumer: the CPU backend (cpu_threads threads) or a GPU backend, warmed up. A GPU backend
 * that cannot be made, or whose warm-up fails with a sticky error, faults the device.
 * RTX_EUNAVAILABLE when the device is unhealthy. */
int rtx_device_backend_new(struct rtx_device_consumer *c, struct rtx_backend **out,
                           struct rtx_err *err);
/* Drops the plans the cache keeps for be, then frees it. Call once be's thread is done with
 * it. NULL: no-op. */
void rtx_device_backend_free(struct rtx_device_consumer *c, struct rtx_backend *be);
/* The device and pinned pool statistics of a backend the device made (a CPU backend has
 * none: RTX_EUNSUPPORTED). */
int rtx_device_backend_pool_stats(struct rtx_device *d, struct rtx_backend *be,
                                  struct rtx_mem_pool_stats *dev,
                                  struct rtx_mem_pool_stats *pinned, struct rtx_err *err);

/* ------------------------------------------------------------------------------------------
 * The plan cache
 * ---------------------------------------------------------------------------------------- */

/* The key of a plan: SHA-256 over a tag, `content` (what identifies the graph: a job's graph
 * wire bytes; a served model's digest of its graph and weights), the inputs' dtypes and
 * shapes and every planning limit - everything rtx_plan_new reads. RTX_EINTERNAL when OpenSSL
 * fails. */
int rtx_device_plan_key(const void *content, size_t len, const struct rtx_tensor *const *inputs,
                        int n_inputs, const struct rtx_limits *limits,
                        uint8_t key[RTX_DEVICE_PLAN_KEY_LEN], struct rtx_err *err);

/* A plan the cache keeps, taken out while its run lasts. */
struct rtx_device_plan;

/* Takes the plan kept for (key, be) out of the cache: a hit (counted) or NULL, a miss
 * (counted). Only be's own thread may run the plan; it gives it back with
 * rtx_device_plan_return. */
struct rtx_device_plan *rtx_device_plan_take(struct rtx_device *d, struct rtx_backend *be,
                                             const uint8_t key[RTX_DEVICE_PLAN_KEY_LEN]);
struct rtx_plan *rtx_device_plan_get(const struct rtx_device_plan *p);
/* Gives a taken plan back: kept as most recently used when ok, freed (with its owner's
 * release) when not, or when the device's cache is off now or its backend was freed. */
void rtx_device_plan_return(struct rtx_device *d, struct rtx_device_plan *p, bool ok);
/* Hands a plan made after a miss to the cache, for (key, be): kept as most recently used
 * (least recently used plans dropped beyond the bounds) unless the cache is off or the plan
 * alone is over the byte bound; then it is freed at once. Either way the cache owns it from
 * now: the caller must not use it again. `bytes` is what the plan holds
 * (rtx_device_plan_bytes); release(owner) is called after the plan is freed (it frees what
 * the plan points into, e.g. a job's decoded graph; NULL: nothing). Returns true when kept. */
bool rtx_device_plan_keep(struct rtx_device *d, struct rtx_backend *be,
                          const uint8_t key[RTX_DEVICE_PLAN_KEY_LEN], struct rtx_plan *plan,
                          size_t bytes, void (*release)(void *owner), void *owner);
/* Bytes a plan may hold on its device: initializers, arena, inputs and outputs. */
size_t rtx_device_plan_bytes(const struct rtx_plan *plan);
/* Drops every kept plan of d (not those taken out); for a consumer that got RTX_ENOMEM and
 * retries once with the cache's memory freed. Returns how many were dropped. */
int rtx_device_plans_clear(struct rtx_device *d);

/* ------------------------------------------------------------------------------------------
 * Placement
 * ---------------------------------------------------------------------------------------- */

struct rtx_device_place {
    size_t need_bytes;          /* memory the work needs on the device (0: unknown) */
    int n_only;                 /* > 0: only these CUDA devices (a job's --device cuda:N,
                                   a model's instance_group gpus) */
    const int *only;            /* CUDA indices */
};
/* Fills out[] with the slots of the healthy GPUs the work may go to, whose budget has
 * need_bytes unreserved or free, least loaded per executor first, then most headroom; returns
 * how many (0: none; the CPU is never listed: falling back to it is the caller's choice). */
int rtx_devices_place(struct rtx_devices *s, const struct rtx_device_place *req,
                      int out[RTX_DEVICES_MAX]);

/* ------------------------------------------------------------------------------------------
 * Learned costs
 * ---------------------------------------------------------------------------------------- */

/* Opens the book on store (NULL: costs are kept in memory only) and reads every saved row
 * once. A read error is returned (the book is open and empty then: the caller logs it and
 * goes on, the costs are learned again); RTX_ENOMEM. Call once, before consumers start. */
int rtx_devices_costs_open(struct rtx_devices *s, struct rtx_store *store, struct rtx_err *err);
/* The learned cost of (where, key): true with *ema_ns (ns) and *samples, or false. */
bool rtx_devices_cost_get(struct rtx_devices *s, const char *where, uint64_t key,
                          int64_t *ema_ns, int64_t *samples);
/* Calls fn for every cost kept for `where`, in key order, without the book's lock (fn may
 * call into the book). */
void rtx_devices_costs_each(struct rtx_devices *s, const char *where,
                            void (*fn)(void *ctx, uint64_t key, int64_t ema_ns, int64_t samples),
                            void *ctx);
/* Records a learned cost: a new row, or a changed one, is dirty until a save writes it; an
 * unchanged one stays as it was. Ignored (0) while the book is not open. RTX_EINVAL for what
 * the store would refuse (where empty or longer than RTX_DEVICE_COST_WHERE_LEN - 1, key 0,
 * ema_ns <= 0, samples < 0), RTX_ENOMEM. */
int rtx_devices_cost_put(struct rtx_devices *s, const char *where, uint64_t key, int64_t ema_ns,
                         int64_t samples, struct rtx_err *err);
/* Writes every dirty cost to the store in one transaction (none: nothing is written; no
 * store: 0, the rows stay dirty). On failure the store's error is returned and the rows stay
 * dirty, to be retried by the next save; a row put again while the save ran stays dirty. */
int rtx_devices_costs_save(struct rtx_devices *s, struct rtx_err *err);
/* Dirty rows now (tests, diagnostics). */
int rtx_devices_costs_dirty(struct rtx_devices *s);

#ifdef __cplusplus
}
#endif
#endif /* RTX_DEVICE_H */
