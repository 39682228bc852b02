/*
 * backends.c - the backends a device makes for its consumers' threads: the CPU backend on
 * slot 0, a GPU backend (the CUDA backend or a test's fake) warmed up on the others, each
 * charged to its consumer's account and counted as one of the device's executors.
 */
#include <stdio.h>
#include <string.h>

#include "device/device-impl.h"
#include "kernels/cpu/backend-cpu.h"
#include "runtime/backend.h"

struct backend_rec *rtx__device_backend_find(struct rtx_device *d, const struct rtx_backend *be) {
    for (struct backend_rec *r = d->backends; r; r = r->next)
        if (r->be == be) return r;
    return NULL;
}

void rtx_device_consumer_set_cpu_threads(struct rtx_device_consumer *c, int n_threads) {
    c->cpu_threads = n_threads > 0 ? n_threads : 0;
}

static int make_backend(struct rtx_device_consumer *c, struct rtx_backend **be,
                        struct rtx_err *err) {
    struct rtx_device *d = c->d;
    struct rtx_devices *s = d->set;
    if (d->kind == RTX_DEVICE_CPU) {
        struct rtx_cpu_options co = {.n_threads = c->cpu_threads ? c->cpu_threads : s->cpu_threads,
                                     .account = &c->account};
        return rtx_backend_cpu_new(&co, be, err);
    }
    int rc = s->gpu->backend_new(s->gpu_ctx, d->cuda, &c->account, be, err);
    if (rc == 0 && !*be) rc = rtx_err_set(err, RTX_EINTERNAL, "the GPU interface made no backend");
    if (rc == RTX_EGPU) { /* out of memory or a bad option leave the device usable */
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "cannot create its backend: %.220s", err->msg);
        rtx_device_fault(d, why);
    }
    return rc;
}

/* Warms a GPU backend up (see warmup.c): 0 with *warm set when it ran, 0 with *warm unset
 * when it was skipped or failed without a device fault (the backend still works: the first
 * request pays the warm-up), or RTX_EGPU after faulting the device. */
static int warm_up(struct rtx_device *d, struct rtx_backend *be, bool *warm, double *ms,
                   struct rtx_err *err) {
    *warm = false;
    if (d->kind == RTX_DEVICE_CPU || d->set->no_warm_up) return 0;
    int64_t t0 = rtx_mono_ns();
    bool skipped = false;
    int rc = rtx__device_warm_up(be, &skipped, err);
    *ms = (double)(rtx_mono_ns() - t0) / 1e6;
    if (rc == 0) {
        *warm = !skipped;
        return 0;
    }
    char reason[sizeof err->msg + 80];
    snprintf(reason, sizeof reason, "warm-up failed: %s", err->msg);
    if (rc == RTX_EGPU)
        rtx_device_fault(d, reason);
    else
        rtx_device_check(d, be, NULL, 0); /* a sticky error behind another failure */
    if (!rtx_device_healthy(d))
        return rtx_err_set(err, RTX_EGPU, "%s: %.200s", d->name, reason);
    return 0;
}

int rtx_device_backend_new(struct rtx_device_consumer *c, struct rtx_backend **out,
                           struct rtx_err *err) {
    if (!c || !out) return rtx_err_set(err, RTX_EINVAL, "device backend: consumer or out is NULL");
    *out = NULL;
    struct rtx_device *d = c->d;
    struct rtx_err e = {0};
    char detail[sizeof d->detail];
    rtx_device_detail(d, detail, sizeof detail);
    if (!rtx_device_healthy(d))
        return rtx_err_set(err, RTX_EUNAVAILABLE, "%s is unhealthy: %s", d->name, detail);
    struct backend_rec *rec = rtx_calloc(1, sizeof *rec);
    if (!rec) return rtx_err_set(err, RTX_ENOMEM, "%s: out of memory for a backend", d->name);
    struct rtx_backend *be = NULL;
    bool warm = false;
    double ms = 0;
    int rc = make_backend(c, &be, &e);
    if (rc == 0) rc = warm_up(d, be, &warm, &ms, &e);
    if (rc) {
        rtx_backend_free(be);
        rtx_free(rec);
        if (err) *err = e;
        return rc;
    }
    pthread_mutex_lock(&d->mu);
    *rec = (struct backend_rec){.be = be, .c = c, .id = ++d->next_backend_id, .warm = warm,
                                .next = d->backends};
    d->backends = rec;
    d->n_backends++;
    c->backends++;
    if (warm) d->n_warm++;
    if (ms > d->warmup_ms) d->warmup_ms = ms;
    pthread_mutex_unlock(&d->mu);
    *out = be;
    return 0;
}

void rtx_device_backend_free(struct rtx_device_consumer *c, struct rtx_backend *be) {
    if (!c || !be) return;
    struct rtx_device *d = c->d;
    struct rtx_device_plan *plans = NULL;
    pthread_mutex_lock(&d->mu);
    struct backend_rec **pp = &d->backends, *rec = NULL;
    while (*pp && (*pp)->be != be) pp = &(*pp)->next;
    if ((rec = *pp)) {
        *pp = rec->next;
        d->n_backends--;
        rec->c->backends--;
        if (rec->warm) d->n_warm--;
    }
    rtx__device_plans_unlink(d, be, &plans);
    pthread_mutex_unlock(&d->mu);
    rtx__device_plans_free(plans); /* before the backend: they hold its memory */
    rtx_backend_free(be);
    rtx_free(rec);
}

int rtx_device_backend_pool_stats(struct rtx_device *d, struct rtx_backend *be,
                                  struct rtx_mem_pool_stats *dev,
                                  struct rtx_mem_pool_stats *pinned, struct rtx_err *err) {
    if (d->kind == RTX_DEVICE_CPU || !d->set->gpu->pool_stats)
        return rtx_err_set(err, RTX_EUNSUPPORTED, "%s: its backends keep no pools", d->name);
    return d->set->gpu->pool_stats(d->set->gpu_ctx, be, dev, pinned, err);
}
