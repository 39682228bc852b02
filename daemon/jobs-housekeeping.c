/*
 * jobs-housekeeping.c - the housekeeping thread: every HOUSEKEEP_MS it journals the jobs whose
 * deadline passed while queued and ticks brownout; every COST_SAVE_MS it saves the schedulers'
 * learned costs when they changed (load_costs reads them back at start; DESIGN in
 * jobs-impl.h).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/jobs-impl.h"
#include "daemon/log.h"

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
void rtx__jobs_save_costs(struct rtx_jobs *j) {
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
void rtx__jobs_load_costs(struct rtx_jobs *j) {
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
void *rtx__jobs_housekeeper_main(void *arg) {
    struct rtx_jobs *j = arg;
    rtx_thread_name("rtx-jobs-hk");
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
                    rtx__jobs_unqueued(j, job);
                    job->in_sched = false;
                    rtx__jobs_load_add(j, job, -1);
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
            rtx__jobs_change_state(j, job->id, job->lane, RTX_JOB_EXPIRED, NULL, REASON_EXPIRED,
                                   &err);
            pthread_mutex_lock(&j->mu);
            rtx__jobs_forget(j, job);
            pthread_mutex_unlock(&j->mu);
            rtx__jobs_job_free(job);
        }
        if (save) {
            rtx__jobs_save_costs(j);
            last_save = mono_ms();
        }
        pthread_mutex_lock(&j->mu);
    }
    pthread_mutex_unlock(&j->mu);
    return NULL;
}
