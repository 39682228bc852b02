/*
 * jobs-queue.c - the job index and the device schedulers' queues (all under mu), and the
 * journaled state changes that end a job: a terminal state is journaled, counted, logged and
 * published to the job's watchers (DESIGN in jobs-impl.h).
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
 * Logging a state change
 * ---------------------------------------------------------------------------------------- */

void rtx__jobs_log_state(struct rtx_jobs *j, const char *id, int lane, enum rtx_job_state state,
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

void rtx__jobs_index_add(struct rtx_jobs *j, struct job *job) {
    if (j->index_n >= j->index_cap * 2) index_grow(j);
    size_t h = hash_id(job->id) & (j->index_cap - 1);
    job->hnext = j->index[h];
    j->index[h] = job;
    j->index_n++;
}

struct job *rtx__jobs_index_find(struct rtx_jobs *j, const char *id) {
    for (struct job *x = j->index[hash_id(id) & (j->index_cap - 1)]; x; x = x->hnext)
        if (strcmp(x->id, id) == 0) return x;
    return NULL;
}

void rtx__jobs_index_remove(struct rtx_jobs *j, struct job *job) {
    for (struct job **pp = &j->index[hash_id(job->id) & (j->index_cap - 1)]; *pp;
         pp = &(*pp)->hnext) {
        if (*pp == job) {
            *pp = job->hnext;
            j->index_n--;
            return;
        }
    }
}

/* Admits a job into the scheduler of a device its class allows (under mu), trying the
 * candidates least loaded first. 0: queued there (in_sched, dev and handle set, counted,
 * workers woken); job->where is the caller's to set. The placement error when no device can
 * take the class; RTX_EOVERLOAD naming the device, the scheduler's reason and its retry-after
 * hint when every candidate refused (the last refusal is reported). */
int rtx__jobs_sched_place(struct rtx_jobs *j, struct job *job, struct rtx_err *err) {
    int rc = rtx__jobs_placement_error(j, job->cls, err);
    if (rc < 0) return rc;
    int cand[MAX_DEVS];
    int n = rtx__jobs_candidates(j, job->cls, cand);
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
            rtx__jobs_load_add(j, job, 1);
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
void rtx__jobs_unqueued(struct rtx_jobs *j, struct job *job) {
    j->devs[job->dev].queued--;
    j->lanes[job->lane].queued--;
    j->n_queued--;
}

/* Removes a queued job from its scheduler (under mu), counted there as cancelled. */
void rtx__jobs_sched_remove(struct rtx_jobs *j, struct job *job) {
    int rc = rtx_sched_cancel(j->devs[job->dev].sched, job->handle, sched_now(), NULL, NULL);
    if (rc < 0)
        rtx_log(RTX_LOG_ERROR, "scheduler lost a queued job", "job", job->id, "error",
                rtx_strerror(rc), NULL);
    rtx__jobs_unqueued(j, job);
    job->in_sched = false;
    rtx__jobs_load_add(j, job, -1);
}

/* Ends a dispatched job's scheduler item (under mu): outcome and, for RTX_SCHED_OK, its run
 * time (ns) for the cost's moving average. */
void rtx__jobs_finish_item(struct rtx_jobs *j, struct job *job, enum rtx_sched_outcome outcome,
                           int64_t run_ns) {
    struct dev *dv = &j->devs[job->dev];
    if (outcome == RTX_SCHED_OK && run_ns <= 0) run_ns = 1;
    int rc = rtx_sched_finish(dv->sched, job->handle, outcome, run_ns, sched_now());
    if (rc < 0)
        rtx_log(RTX_LOG_ERROR, "scheduler lost a running job", "job", job->id, "error",
                rtx_strerror(rc), NULL);
    dv->running--;
    job->in_sched = false;
    rtx__jobs_load_add(j, job, -1);
    if (outcome == RTX_SCHED_OK) j->costs_dirty = true;
}

/* Drops a job that is in no queue from the index (under mu); the caller frees it. */
void rtx__jobs_forget(struct rtx_jobs *j, struct job *job) {
    rtx__jobs_index_remove(j, job);
    j->cache_bytes -= job->cached_bytes;
    job->cached_bytes = 0;
}

void rtx__jobs_job_free(struct job *job) {
    if (!job) return;
    rtx__jobs_prepared_free(job->prep);
    rtx_free(job);
}

/* Sets the executor's flag of a running job (under mu). */
void rtx__jobs_raise_cancel(struct job *job) {
    __atomic_store_n(&job->cancel, 1, __ATOMIC_SEQ_CST);
}

/* Interrupts every running job (under mu). Returns how many. */
int rtx__jobs_interrupt_running(struct rtx_jobs *j) {
    int n = 0;
    for (int i = 0; i < j->n_workers; i++) {
        struct job *job = j->workers[i].current;
        if (job && !job->interrupted) {
            job->interrupted = true;
            rtx__jobs_raise_cancel(job);
            n++;
        }
    }
    return n;
}

/* ------------------------------------------------------------------------------------------
 * State changes
 * ---------------------------------------------------------------------------------------- */

/* Journals a terminal state (with failure code `code` when it is RTX_JOB_FAILED), counts it,
 * logs it and publishes it. */
int rtx__jobs_change_state(struct rtx_jobs *j, const char *id, int lane, enum rtx_job_state st,
                           const char *code, const char *reason, struct rtx_err *err) {
    int rc = st == RTX_JOB_FAILED
                 ? rtx_store_job_fail(j->store, id, code ? code : "INTERNAL", reason, now_ms(), err)
                 : rtx_store_job_set_state(j->store, id, st, reason, now_ms(), err);
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
    rtx__jobs_log_state(j, id, lane, st, reason, 0);
    rtx__jobs_publish(j, id);
    return 0;
}

/* Journals CANCELLED for a job no worker or queue holds. A job that became terminal
 * meanwhile (a concurrent cancel) is left as it is. */
int rtx__jobs_cancel_journaled(struct rtx_jobs *j, const char *id, int lane, struct rtx_err *err) {
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
    rtx__jobs_log_state(j, id, lane, RTX_JOB_CANCELLED, REASON_CANCELLED, 0);
    rtx__jobs_publish(j, id);
    return 0;
}

/* The failure code (Job.failure_code: a gRPC status name) of a job that failed with error
 * rc: RESOURCE_EXHAUSTED when memory or a limit ran out (a device budget share refused it),
 * UNAVAILABLE when no usable device could take it, INTERNAL otherwise. A job whose device
 * was lost while it ran is UNAVAILABLE whatever its error (the caller says so). */
const char *rtx__jobs_failure_code(int rc) {
    switch (rc) {
    case RTX_ENOMEM:
    case RTX_ELIMIT:
    case RTX_EOVERLOAD: return "RESOURCE_EXHAUSTED";
    case RTX_EUNAVAILABLE: return "UNAVAILABLE";
    default: return "INTERNAL";
    }
}

/* Fails a job with a failure code and a reason; a journal error is logged (the job then
 * stays as the journal has it, for recovery). */
void rtx__jobs_fail_job(struct rtx_jobs *j, struct job *job, const char *code,
                        const char *reason) {
    struct rtx_err err = {0};
    rtx__jobs_change_state(j, job->id, job->lane, RTX_JOB_FAILED, code, reason, &err);
}
