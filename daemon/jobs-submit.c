/*
 * jobs-submit.c - Submit and Cancel: admission of a request (its fields checked, the job
 * decoded, placed on a device and admitted by that device's scheduler before the journal
 * insert) and cancellation of a job wherever it is (the admission paragraphs of DESIGN in
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
#include "rtx/v1/jobs.pb-c.h"

void (*rtx__jobs_after_enqueue_hook)(void);

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
    } else if ((*lane = rtx__jobs_find_lane(j, m->lane)) < 0) {
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
    int rc = device[0] ? rtx__jobs_class_parse(j, device, &c, err) : 0;
    if (rc < 0) return rc;
    pthread_mutex_lock(&j->mu);
    rc = rtx__jobs_placement_error(j, c, err);
    struct rtx_backend *be = rc == 0 ? rtx__jobs_gpu_backend_for(j, c) : NULL;
    pthread_mutex_unlock(&j->mu);
    if (rc < 0) return rc;
    *asked = *cls = c;
    int bad = be ? rtx__jobs_first_unsupported(be, p->graph) : -1;
    if (bad < 0) return 0;
    if (c == CLS_AUTO) {
        *cls = CLS_CPU;
        return 0;
    }
    char why[300];
    rtx__jobs_unsupported_text(be, p->graph, bad, why, sizeof why);
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
    rtx__jobs_class_text(job->asked, requested, sizeof requested);
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
    if ((rc = rtx__jobs_unpack_request(request, len, &m, err)) < 0) return rc;
    if ((rc = check_fields(j, m, now, &lane, &policy, err)) < 0) goto out;
    if ((rc = rtx__jobs_prepare(m, &j->limits, &p, err)) < 0) goto out;
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
    if ((rc = admission_open(j, err)) == 0 && (rc = rtx__jobs_sched_place(j, job, err)) == 0) {
        rtx__jobs_index_add(j, job);
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
        rtx__jobs_index_remove(j, job);
        cancel = rc == 0 && !dup && job->cancel_requested;
        expired = rc == 0 && !dup && !cancel && job->expired;
        if (job->claimed) { /* its worker finishes the scheduler item and frees it */
            job->where = JOB_DROPPED;
            pthread_cond_broadcast(&j->pending_cv);
            job = NULL;
        } else if (job->in_sched) {
            rtx__jobs_sched_remove(j, job);
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
    rtx__jobs_log_state(j, job_id, lane, RTX_JOB_QUEUED, "", 0);
    if (cancel) {
        struct rtx_err cerr = {0};
        rtx__jobs_cancel_journaled(j, job_id, lane, &cerr);
    } else if (expired) {
        struct rtx_err xerr = {0};
        rtx__jobs_change_state(j, job_id, lane, RTX_JOB_EXPIRED, NULL, REASON_EXPIRED, &xerr);
    }
out:
    rtx__jobs_job_free(job);
    rtx__jobs_prepared_free(p);
    rtx__jobs_free_request(m);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * Cancel
 * ---------------------------------------------------------------------------------------- */

int rtx_jobs_cancel(struct rtx_jobs *j, const char *id, struct rtx_job_info *out,
                    struct rtx_err *err) {
    struct rtx_err local;
    if (!err) err = &local;
    if (!j || !id) return rtx_err_set(err, RTX_EINVAL, "cancel: invalid argument");
    if (out) memset(out, 0, sizeof *out);
    int rc = 0;
    pthread_mutex_lock(&j->mu);
    struct job *job = strlen(id) < RTX_JOB_ID_LEN ? rtx__jobs_index_find(j, id) : NULL;
    struct job *taken = NULL;
    if (job && job->where == JOB_QUEUED) {
        rtx__jobs_sched_remove(j, job);
        job->where = JOB_CANCELLING;
        taken = job;
    } else if (job) { /* pending: its submitter cancels it; claimed, running: its worker */
        job->cancel_requested = true;
        if (job->where == JOB_RUNNING || job->where == JOB_CLAIMED) rtx__jobs_raise_cancel(job);
    }
    pthread_mutex_unlock(&j->mu);

    if (taken) {
        rc = rtx__jobs_cancel_journaled(j, taken->id, taken->lane, err);
        pthread_mutex_lock(&j->mu);
        if (rc < 0) { /* still queued in the journal: queued here too, if a scheduler admits it */
            struct rtx_err qerr = {0};
            if (rtx__jobs_sched_place(j, taken, &qerr) == 0) {
                taken->where = JOB_QUEUED;
                taken = NULL;
            } else {
                rtx__jobs_forget(j, taken);
                rtx_log(RTX_LOG_ERROR, "job left queued in the journal until the next start",
                        "job", taken->id, "error", qerr.msg, NULL);
            }
        } else {
            rtx__jobs_forget(j, taken);
        }
        pthread_mutex_unlock(&j->mu);
        rtx__jobs_job_free(taken); /* NULL when it is queued again */
        if (rc < 0) return rc;
    } else if (!job) {
        /* Not in memory: terminal, unknown, or left running by an interrupted drain. */
        struct rtx_job_info info = {0};
        if ((rc = rtx_store_job_get(j->store, id, &info, err)) < 0) return rc;
        bool live = !rtx_job_state_is_terminal(info.state);
        int lane = rtx__jobs_find_lane(j, info.lane ? info.lane : "");
        rtx_job_info_clear(&info);
        if (live &&
            (rc = rtx__jobs_cancel_journaled(j, id, lane < 0 ? j->default_lane : lane, err)) < 0)
            return rc;
    }
    if (out && (rc = rtx_store_job_get(j->store, id, out, err)) < 0) return rc;
    return 0;
}
