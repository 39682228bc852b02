/*
 * jobs-watch.c - watchers of a job's state (rtx_jobs_watch and rtx_jobs_unwatch, the streams
 * behind the Wait and Watch RPCs; the Watchers paragraph of DESIGN in jobs-impl.h) and the run
 * records of the jobs that succeeded (rtx_jobs_get_run), which the watchers deliver with a
 * job's final state.
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
 * Run records
 * ---------------------------------------------------------------------------------------- */

/* Takes the slot of a run record out of its bucket's chain (under rmu). */
static void run_unlink(struct rtx_jobs *j, int slot) {
    int *pp = &j->run_heads[hash_id(j->runs[slot].id) & (RUN_BUCKETS - 1)];
    while (*pp >= 0 && *pp != slot)
        pp = &j->runs[*pp].hnext;
    if (*pp == slot) *pp = j->runs[slot].hnext;
}

/* Remembers how a job that succeeded ran, in place of the oldest record. */
void rtx__jobs_record_run(struct rtx_jobs *j, const char *id, const struct rtx_jobs_run *run) {
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
void rtx__jobs_forget_run(struct rtx_jobs *j, const char *id) {
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
 * Watchers
 * ---------------------------------------------------------------------------------------- */

static int state_rank(enum rtx_job_state s) {
    if (rtx_job_state_is_terminal(s)) return 3;
    return s == RTX_JOB_RUNNING ? 2 : 1;
}

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
void rtx__jobs_publish(struct rtx_jobs *j, const char *id) {
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
