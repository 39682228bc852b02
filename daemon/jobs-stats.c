/*
 * jobs-stats.c - what the job manager reports: job counters and devices (rtx_jobs_get_stats),
 * memory pools (rtx_jobs_get_pools) and the device schedulers' lanes (rtx_jobs_get_lanes).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/jobs-impl.h"

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
        o->healthy = rtx_device_healthy(dv->d);
        rtx_device_detail(dv->d, o->detail, sizeof o->detail);
        o->jobs_started = dv->jobs_started;
        struct rtx_device_consumer_info share = rtx__jobs_share(dv);
        o->reserved_bytes = share.reserved_bytes;
        o->used_bytes = share.used_bytes;
        o->refusals = share.refusals;
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
            int rc = rtx_device_backend_pool_stats(dv->d, j->workers[i].be, &ds, &ps, err);
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
        dr->healthy = pr->healthy = rtx_device_healthy(dv->d);
        rtx_device_detail(dv->d, dr->detail, sizeof dr->detail);
        rtx_device_detail(dv->d, pr->detail, sizeof pr->detail);
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
        o->healthy = rtx_device_healthy(j->devs[d].d);
        rtx_sched_get_stats(j->devs[d].sched, now, &o->stats);
    }
    pthread_mutex_unlock(&j->mu);
}
