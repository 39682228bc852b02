/*
 * jobs-housekeeping.c - the housekeeping thread: every HOUSEKEEP_MS it journals the jobs whose
 * deadline passed while queued and ticks brownout; every COST_SAVE_MS it saves the schedulers'
 * learned costs when they changed, through the device set's book (load_costs reads them
 * back from it at start; DESIGN in jobs-impl.h).
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

struct cost_put {
    struct rtx_jobs *j;
    const char *device;
    int failed;              /* puts that failed (out of memory) */
    int loaded, saved;       /* load_costs: costs loaded into schedulers, kept */
    struct rtx_sched *sched; /* load_costs: the device's scheduler */
    struct rtx_err err;
};

static int cost_put(void *ctx, uint64_t key, int64_t ema_ns, int64_t samples) {
    struct cost_put *p = ctx;
    if (rtx_devices_cost_put(p->j->devices, p->device, key, ema_ns, samples, &p->err) != 0)
        p->failed++;
    return 0;
}

/* Puts every scheduler's learned costs into the device set's book and saves it (a failure is
 * logged; the costs stay marked changed, so the next save tries again). */
void rtx__jobs_save_costs(struct rtx_jobs *j) {
    struct cost_put p = {.j = j};
    pthread_mutex_lock(&j->mu);
    for (int d = 0; d < j->n_devs; d++) {
        if (!j->devs[d].sched) continue;
        p.device = j->devs[d].name;
        rtx_sched_cost_save(j->devs[d].sched, cost_put, &p);
    }
    j->costs_dirty = p.failed > 0;
    pthread_mutex_unlock(&j->mu);
    struct rtx_err err = {0};
    if (p.failed) {
        rtx_log(RTX_LOG_ERROR, "cannot save learned costs", "error", p.err.msg, NULL);
    } else if (rtx_devices_costs_save(j->devices, &err) < 0) {
        rtx_log(RTX_LOG_ERROR, "cannot save learned costs", "error", err.msg, NULL);
        pthread_mutex_lock(&j->mu);
        j->costs_dirty = true;
        pthread_mutex_unlock(&j->mu);
    }
}

static void cost_load(void *ctx, uint64_t key, int64_t ema_ns, int64_t samples) {
    struct cost_put *p = ctx;
    struct rtx_err err = {0};
    p->saved++;
    if (rtx_sched_cost_load(p->sched, key, ema_ns, samples, &err) == 0) p->loaded++;
}

/* Loads the learned costs the device set's book keeps for this host's devices into their
 * schedulers (before the workers start). */
void rtx__jobs_load_costs(struct rtx_jobs *j) {
    struct cost_put p = {.j = j};
    for (int d = 0; d < j->n_devs; d++) {
        if (!(p.sched = j->devs[d].sched)) continue;
        rtx_devices_costs_each(j->devices, j->devs[d].name, cost_load, &p);
    }
    if (p.saved > 0) {
        char ls[24], ns[24];
        snprintf(ls, sizeof ls, "%d", p.loaded);
        snprintf(ns, sizeof ns, "%d", p.saved);
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
