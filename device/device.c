/*
 * device.c - the device set of device/device.h: its slots (the CPU and each CUDA device
 * listed at start) and their budgets, what a device is and holds (rtx_device_info), health
 * and its fault listeners, load, and placement. Consumers and their accounts are budget.c,
 * backends backends.c, the plan cache plan-cache.c.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "device/device-impl.h"
#include "kernels/cuda/backend-cuda.h"
#include "runtime/backend.h"

#define DEFAULT_MEMORY_FRACTION 0.9

/* ------------------------------------------------------------------------------------------
 * The set
 * ---------------------------------------------------------------------------------------- */

static size_t physical_ram(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
}

static size_t budget_of(size_t memory, const struct rtx_devices_options *o) {
    double f = o->memory_fraction > 0 ? o->memory_fraction : DEFAULT_MEMORY_FRACTION;
    size_t b = (size_t)((double)memory * f);
    if (o->memory_cap_bytes && b > o->memory_cap_bytes) b = o->memory_cap_bytes;
    return b;
}

static struct rtx_device *device_new(struct rtx_devices *s, int slot, size_t memory,
                                     const struct rtx_devices_options *o) {
    struct rtx_device *d = rtx_calloc(1, sizeof *d);
    if (!d) return NULL;
    if (pthread_mutex_init(&d->mu, NULL) != 0) {
        rtx_free(d);
        return NULL;
    }
    d->set = s;
    d->slot = slot;
    d->kind = slot == 0 ? RTX_DEVICE_CPU : RTX_DEVICE_CUDA;
    d->cuda = slot - 1;
    if (slot == 0)
        snprintf(d->name, sizeof d->name, "cpu");
    else
        snprintf(d->name, sizeof d->name, "cuda:%d", (unsigned char)(slot - 1)); /* < 16 */
    d->healthy = true;
    d->memory_bytes = memory;
    d->budget = budget_of(memory, o);
    d->cache.max_plans = o->plan_cache;
    d->cache.max_bytes = o->plan_cache_bytes;
    return d;
}

static void device_free(struct rtx_device *d) {
    if (!d) return;
    struct rtx_device_plan *list = NULL;
    rtx__device_plans_unlink(d, NULL, &list);
    rtx__device_plans_free(list);
    pthread_mutex_destroy(&d->mu);
    rtx_free(d);
}

/* ---- the CUDA backend as the default GPU interface ---- */

static int cuda_backend_new(void *ctx, int cuda, struct rtx_mem_account *account,
                            struct rtx_backend **out, struct rtx_err *err) {
    struct rtx_cuda_options co = {.device = cuda, .account = account};
    return rtx_backend_cuda_new(&co, out, err);
}

static int cuda_pool_stats(void *ctx, struct rtx_backend *be, struct rtx_mem_pool_stats *dev,
                           struct rtx_mem_pool_stats *pinned, struct rtx_err *err) {
    return rtx_backend_cuda_pool_stats(be, dev, pinned, err);
}

static const struct rtx_device_gpu_i cuda_iface = {
    .backend_new = cuda_backend_new,
    .pool_stats = cuda_pool_stats,
};

int rtx_devices_new(const struct rtx_devices_options *o, struct rtx_devices **out,
                    struct rtx_err *err) {
    if (!o || !out) return rtx_err_set(err, RTX_EINVAL, "devices: options or out is NULL");
    *out = NULL;
    if (o->memory_fraction < 0 || o->memory_fraction > 1)
        return rtx_err_set(err, RTX_EINVAL, "devices: memory_fraction %g is not in (0, 1]",
                           o->memory_fraction);
    if (o->cpu_threads < 0 || o->plan_cache < 0)
        return rtx_err_set(err, RTX_EINVAL, "devices: cpu_threads %d or plan_cache %d is negative",
                           o->cpu_threads, o->plan_cache);
    if (o->gpu_iface && !o->gpu_iface->backend_new)
        return rtx_err_set(err, RTX_EINVAL, "devices: the GPU interface has no backend_new");
    struct rtx_devices *s = rtx_calloc(1, sizeof *s);
    if (!s) return rtx_err_set(err, RTX_ENOMEM, "devices: out of memory");
    if (pthread_mutex_init(&s->lmu, NULL) != 0) {
        rtx_free(s);
        return rtx_err_set(err, RTX_EINTERNAL, "devices: cannot create a mutex");
    }
    if (pthread_cond_init(&s->lcv, NULL) != 0) {
        pthread_mutex_destroy(&s->lmu);
        rtx_free(s);
        return rtx_err_set(err, RTX_EINTERNAL, "devices: cannot create a condition variable");
    }
    bool cmu = pthread_mutex_init(&s->cmu, NULL) == 0;
    if (!cmu || pthread_mutex_init(&s->save_mu, NULL) != 0) {
        if (cmu) pthread_mutex_destroy(&s->cmu);
        pthread_cond_destroy(&s->lcv);
        pthread_mutex_destroy(&s->lmu);
        rtx_free(s);
        return rtx_err_set(err, RTX_EINTERNAL, "devices: cannot create a mutex");
    }
    s->gpu = o->gpu_iface ? o->gpu_iface : &cuda_iface;
    s->gpu_ctx = o->gpu_iface ? o->gpu_ctx : NULL;
    s->cpu_threads = o->cpu_threads;
    s->no_warm_up = o->no_warm_up;
    const struct rtx_cuda_devices *g = o->gpus;
    if (!g || g->n <= 0)
        snprintf(s->no_gpu, sizeof s->no_gpu, "%s",
                 g && g->absent[0] ? g->absent : "none was listed at start");
    s->dev[0] = device_new(s, 0, o->cpu_memory_bytes ? o->cpu_memory_bytes : physical_ram(), o);
    bool ok = s->dev[0] != NULL;
    s->n = 1;
    /* devices past RTX_DEVICES_MAX - 1 are not used (the caller may say so) */
    for (int i = 0; ok && g && i < g->n && s->n < RTX_DEVICES_MAX; i++) {
        const struct rtx_cuda_device *cd = &g->devs[i];
        struct rtx_device *d = device_new(s, s->n, cd->memory_bytes, o);
        if (!(ok = d != NULL)) break;
        snprintf(d->model, sizeof d->model, "%s", cd->name);
        d->sm_count = cd->sm_count;
        d->cc_major = cd->cc_major;
        d->cc_minor = cd->cc_minor;
        d->healthy = cd->healthy;
        if (!d->healthy)
            snprintf(d->detail, sizeof d->detail, "%s", cd->detail[0] ? cd->detail : "unhealthy");
        s->dev[s->n++] = d;
    }
    if (!ok) {
        rtx_devices_free(s);
        return rtx_err_set(err, RTX_ENOMEM, "devices: out of memory");
    }
    *out = s;
    return 0;
}

void rtx_devices_free(struct rtx_devices *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++) device_free(s->dev[i]);
    rtx__devices_costs_free(s);
    pthread_mutex_destroy(&s->save_mu);
    pthread_mutex_destroy(&s->cmu);
    pthread_cond_destroy(&s->lcv);
    pthread_mutex_destroy(&s->lmu);
    rtx_free(s);
}

int rtx_devices_count(const struct rtx_devices *s) { return s->n; }

struct rtx_device *rtx_devices_get(struct rtx_devices *s, int slot) {
    return slot >= 0 && slot < s->n ? s->dev[slot] : NULL;
}

struct rtx_device *rtx_devices_cuda(struct rtx_devices *s, int cuda) {
    return cuda >= 0 ? rtx_devices_get(s, 1 + cuda) : NULL;
}

const char *rtx_devices_no_gpu_reason(const struct rtx_devices *s) { return s->no_gpu; }

/* ------------------------------------------------------------------------------------------
 * Fault listeners
 * ---------------------------------------------------------------------------------------- */

int rtx_devices_on_fault(struct rtx_devices *s, rtx_device_fault_fn fn, void *ctx,
                         struct rtx_err *err) {
    if (!fn) return rtx_err_set(err, RTX_EINVAL, "devices: the fault listener is NULL");
    int rc = RTX_ELIMIT;
    pthread_mutex_lock(&s->lmu);
    for (int i = 0; i < DEVICE_LISTENERS_MAX; i++) {
        struct listener *l = &s->listeners[i];
        if (l->fn || l->running) continue; /* a removed listener may still be running */
        *l = (struct listener){.fn = fn, .ctx = ctx};
        rc = 0;
        break;
    }
    pthread_mutex_unlock(&s->lmu);
    if (rc) rtx_err_set(err, rc, "devices: at most %d fault listeners", DEVICE_LISTENERS_MAX);
    return rc;
}

void rtx_devices_off_fault(struct rtx_devices *s, rtx_device_fault_fn fn, void *ctx) {
    pthread_mutex_lock(&s->lmu);
    for (int i = 0; i < DEVICE_LISTENERS_MAX; i++) {
        struct listener *l = &s->listeners[i];
        if (l->fn != fn || l->ctx != ctx) continue;
        l->fn = NULL;
        while (l->running > 0) pthread_cond_wait(&s->lcv, &s->lmu);
    }
    pthread_mutex_unlock(&s->lmu);
}

/* Calls every listener once for d, without any device lock; a listener removed meanwhile is
 * not called, and its removal waits for a call already under way. */
static void notify(struct rtx_device *d, const char *why) {
    struct rtx_devices *s = d->set;
    pthread_mutex_lock(&s->lmu);
    for (int i = 0; i < DEVICE_LISTENERS_MAX; i++) {
        struct listener *l = &s->listeners[i];
        if (!l->fn) continue;
        rtx_device_fault_fn fn = l->fn;
        void *ctx = l->ctx;
        l->running++;
        pthread_mutex_unlock(&s->lmu);
        fn(ctx, d, why);
        pthread_mutex_lock(&s->lmu);
        l->running--;
        pthread_cond_broadcast(&s->lcv);
    }
    pthread_mutex_unlock(&s->lmu);
}

/* ------------------------------------------------------------------------------------------
 * One device: what it is, health, load
 * ---------------------------------------------------------------------------------------- */

int rtx_device_slot(const struct rtx_device *d) { return d->slot; }
enum rtx_device_kind rtx_device_kind(const struct rtx_device *d) { return d->kind; }
int rtx_device_cuda_index(const struct rtx_device *d) { return d->cuda; }
const char *rtx_device_name(const struct rtx_device *d) { return d->name; }

void rtx_device_info(struct rtx_device *d, struct rtx_device_info *out) {
    *out = (struct rtx_device_info){
        .slot = d->slot,
        .kind = d->kind,
        .cuda = d->cuda,
        .sm_count = d->sm_count,
        .cc_major = d->cc_major,
        .cc_minor = d->cc_minor,
        .memory_bytes = d->memory_bytes,
        .budget_bytes = d->budget,
    };
    snprintf(out->name, sizeof out->name, "%s", d->name);
    snprintf(out->model, sizeof out->model, "%s", d->model);
    pthread_mutex_lock(&d->mu);
    out->healthy = d->healthy;
    snprintf(out->detail, sizeof out->detail, "%s", d->detail);
    out->reserved_bytes = d->reserved;
    out->used_bytes = d->used;
    out->borrowed_bytes = d->borrowed;
    out->refusals = d->refusals;
    out->consumers = d->n_consumers;
    out->backends = d->n_backends;
    out->load = d->load;
    out->plans = d->cache.n;
    out->plan_bytes = d->cache.bytes;
    out->plan_hits = d->cache.hits;
    out->plan_misses = d->cache.misses;
    out->plan_evictions = d->cache.evictions;
    out->backends_warm = d->n_warm;
    out->warmup_ms = d->warmup_ms;
    pthread_mutex_unlock(&d->mu);
}

int rtx_device_consumers(struct rtx_device *d, struct rtx_device_consumer_info *out, int max) {
    int n = 0;
    pthread_mutex_lock(&d->mu);
    for (const struct rtx_device_consumer *c = d->consumers; c; c = c->next, n++) {
        if (n >= max || !out) continue;
        struct rtx_device_consumer_info *ci = &out[n];
        snprintf(ci->name, sizeof ci->name, "%s", c->name);
        ci->reserved_bytes = c->reserved;
        ci->used_bytes = c->used;
        ci->peak_bytes = c->peak;
        ci->refusals = c->refusals;
        ci->backends = c->backends;
    }
    pthread_mutex_unlock(&d->mu);
    return n;
}

bool rtx_device_healthy(struct rtx_device *d) {
    return atomic_load_explicit(&d->healthy, memory_order_acquire);
}

void rtx_device_detail(struct rtx_device *d, char *buf, size_t len) {
    if (!buf || len == 0) return;
    pthread_mutex_lock(&d->mu);
    snprintf(buf, len, "%s", d->detail);
    pthread_mutex_unlock(&d->mu);
}

bool rtx_device_fault(struct rtx_device *d, const char *why) {
    if (!why || !why[0]) why = "faulted";
    pthread_mutex_lock(&d->mu);
    bool first = atomic_load_explicit(&d->healthy, memory_order_relaxed);
    if (first) {
        snprintf(d->detail, sizeof d->detail, "%s", why);
        atomic_store_explicit(&d->healthy, false, memory_order_release);
    }
    pthread_mutex_unlock(&d->mu);
    if (!first) return false;
    /* the kept plans hold memory of a context that cannot recover; plans taken out now are
     * dropped when their failed runs return them */
    rtx_device_plans_clear(d);
    notify(d, why);
    return true;
}

bool rtx_device_check(struct rtx_device *d, struct rtx_backend *be, char *reason, size_t len) {
    struct rtx_err herr = {0};
    if (rtx_backend_synchronize(be, &herr) != 0 && herr.code == RTX_EGPU) {
        rtx_device_fault(d, herr.msg);
        size_t used = reason ? strlen(reason) : 0;
        if (reason && used + 1 < len)
            snprintf(reason + used, len - used, " [%s is now unhealthy and takes no more work]",
                     d->name);
    }
    return !rtx_device_healthy(d);
}

void rtx_device_load_add(struct rtx_device *d, int64_t delta) {
    pthread_mutex_lock(&d->mu);
    d->load += delta;
    pthread_mutex_unlock(&d->mu);
}

/* ------------------------------------------------------------------------------------------
 * Placement
 * ---------------------------------------------------------------------------------------- */

/* What placement reads of a device, copied under its mutex. */
struct candidate {
    int slot;
    int64_t load;      /* work in flight per executor, x1000 */
    size_t headroom;   /* bytes: budget - used */
};

static bool named(const struct rtx_device_place *req, int cuda) {
    if (!req || req->n_only <= 0 || !req->only) return true;
    for (int i = 0; i < req->n_only; i++)
        if (req->only[i] == cuda) return true;
    return false;
}

static bool before(const struct candidate *a, const struct candidate *b) {
    if (a->load != b->load) return a->load < b->load;
    if (a->headroom != b->headroom) return a->headroom > b->headroom;
    return a->slot < b->slot;
}

/* Headroom is budget - used: the work's memory will be charged to some consumer, and what
 * no one uses now is what it can get (its own reservation's unused part included). The
 * check is a snapshot, not a promise: the charge itself is what enforces the budget. */
int rtx_devices_place(struct rtx_devices *s, const struct rtx_device_place *req,
                      int out[RTX_DEVICES_MAX]) {
    struct candidate c[RTX_DEVICES_MAX];
    int n = 0;
    for (int slot = 1; slot < s->n; slot++) {
        struct rtx_device *d = s->dev[slot];
        if (!named(req, d->cuda)) continue;
        pthread_mutex_lock(&d->mu);
        bool ok = d->healthy;
        struct candidate x = {
            .slot = slot,
            .load = d->load * 1000 / (d->n_backends > 0 ? d->n_backends : 1),
            .headroom = d->budget > d->used ? d->budget - d->used : 0,
        };
        pthread_mutex_unlock(&d->mu);
        if (!ok || (req && req->need_bytes > x.headroom)) continue;
        int b = n++;
        while (b > 0 && before(&x, &c[b - 1])) { /* insertion sort: 16 devices at most */
            c[b] = c[b - 1];
            b--;
        }
        c[b] = x;
    }
    for (int i = 0; i < n; i++) out[i] = c[i].slot;
    return n;
}
