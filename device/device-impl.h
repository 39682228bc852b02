/*
 * device-impl.h - what the files of the device layer share (device.c: the set, its devices,
 * health and placement; budget.c: consumers and their accounts; backends.c: backends and
 * their warm-up's bookkeeping; warmup.c: the warm-up graph; plan-cache.c: the plan cache
 * and plan keys; costs.c: the book of learned costs). Only the files under device/ include it;
 * everyone else goes through device.h.
 *
 * Locking: each device has one mutex (mu) over everything in struct rtx_device below it.
 * It is never held across a backend call, a plan free or a listener call: those can come
 * back into the device (a CPU buffer's release credits its consumer's account, which takes
 * mu), so the code unlinks under mu and frees after unlocking. Lock order: a pool's mutex,
 * then a device's mu (pools charge accounts with their own mutex held); the set's listener
 * mutex is never held with a device's mu. The book's cmu is a leaf (held with no other lock
 * and never across a store call); save_mu, which serializes saves, is taken before it.
 */
#ifndef RTX_DEVICE_IMPL_H
#define RTX_DEVICE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "device/device.h"
#include "runtime/mem-pool.h"

#define DEVICE_LISTENERS_MAX 8

struct rtx_device_consumer {
    struct rtx_mem_account account;  /* charge/credit: budget.c */
    struct rtx_device *d;
    char name[RTX_DEVICE_CONSUMER_NAME_LEN];
    /* under d->mu */
    size_t reserved, used, peak;     /* bytes */
    uint64_t refusals;
    int backends;
    int cpu_threads;                 /* CPU backends' threads; 0: the set's */
    struct rtx_device_consumer *next; /* registration order */
};

/* A backend the device made and has not freed. `id` tells a backend from a later one made
 * at the same address, so a plan of a freed backend is never kept for its successor. */
struct backend_rec {
    struct rtx_backend *be;
    struct rtx_device_consumer *c;
    uint64_t id;
    bool warm;                       /* warmed up */
    struct backend_rec *next;
};

/* A kept plan (in the cache's list) or a taken one (out of it, run by its backend's thread). */
struct rtx_device_plan {
    uint8_t key[RTX_DEVICE_PLAN_KEY_LEN];
    struct rtx_backend *be;
    uint64_t be_id;
    struct rtx_plan *plan;
    size_t bytes;
    void (*release)(void *owner);
    void *owner;
    struct rtx_device_plan *prev, *next; /* most recently used first */
};

struct plan_cache {
    struct rtx_device_plan *head, *tail;
    int n;
    size_t bytes;
    int max_plans;                   /* 0: off */
    size_t max_bytes;                /* 0: only the count bounds */
    uint64_t hits, misses, evictions;
};

struct rtx_device {
    struct rtx_devices *set;
    int slot;
    enum rtx_device_kind kind;
    int cuda;
    char name[RTX_DEVICE_NAME_LEN];
    char model[256];
    int sm_count, cc_major, cc_minor;
    size_t memory_bytes, budget;     /* bytes */
    pthread_mutex_t mu;
    atomic_bool healthy;             /* written under mu, read without it (every batch) */
    /* under mu */
    char detail[256];
    size_t reserved, used, borrowed; /* bytes: sum of reservations, of uses, of uses beyond */
    uint64_t refusals;
    struct rtx_device_consumer *consumers, *consumers_tail;
    int n_consumers;
    struct backend_rec *backends;
    int n_backends, n_warm;
    uint64_t next_backend_id;
    double warmup_ms;                /* the longest warm-up */
    int64_t load;
    struct plan_cache cache;
};

struct listener {
    rtx_device_fault_fn fn;          /* NULL: free slot (once running is 0) */
    void *ctx;
    int running;                     /* calls in progress */
};

struct rtx_devices {
    int n;
    struct rtx_device *dev[RTX_DEVICES_MAX];
    char no_gpu[256];
    const struct rtx_device_gpu_i *gpu;
    void *gpu_ctx;
    int cpu_threads;
    bool no_warm_up;
    pthread_mutex_t lmu;             /* listeners */
    pthread_cond_t lcv;              /* a listener call ended */
    struct listener listeners[DEVICE_LISTENERS_MAX];
    /* learned costs (costs.c) */
    pthread_mutex_t cmu;             /* the book: everything below */
    pthread_mutex_t save_mu;         /* one save at a time; taken before cmu */
    bool costs_open;                 /* rtx_devices_costs_open ran: puts are kept */
    struct rtx_store *store;         /* NULL: kept in memory only */
    struct rtx_device_cost *costs;   /* sorted by (where, key) */
    int n_costs, cap_costs;
    uint64_t cost_gen;               /* generations of changes */
};

/* budget.c: "1.5 GiB", "512 MiB", "100 B". */
const char *rtx__device_bytes_str(size_t bytes, char *buf, size_t len);
/* budget.c: the account slots of a consumer. */
void rtx__device_consumer_account_init(struct rtx_device_consumer *c);

/* backends.c: the backend record of be on d, or NULL (under d->mu). */
struct backend_rec *rtx__device_backend_find(struct rtx_device *d, const struct rtx_backend *be);

/* plan-cache.c: unlinks every plan of be (or every plan when be is NULL) into *out, a list
 * linked through next, for rtx__device_plans_free after mu is released (under d->mu).
 * Returns how many. */
int rtx__device_plans_unlink(struct rtx_device *d, const struct rtx_backend *be,
                             struct rtx_device_plan **out);
/* plan-cache.c: frees a list from rtx__device_plans_unlink (without d->mu). */
void rtx__device_plans_free(struct rtx_device_plan *list);

/* costs.c: frees the book (rtx_devices_free). */
void rtx__devices_costs_free(struct rtx_devices *s);

/* warmup.c: runs the warm-up graph on be twice (node by node, then captured). 0, or the
 * error of the run; *skipped when be cannot run the graph (then nothing ran). */
int rtx__device_warm_up(struct rtx_backend *be, bool *skipped, struct rtx_err *err);

#endif /* RTX_DEVICE_IMPL_H */
