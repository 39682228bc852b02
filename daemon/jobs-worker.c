/*
 * jobs-worker.c - the job workers: each dispatches from its device's scheduler, journals the
 * job running, executes it on its backend (with a plan from its device's plan cache when the
 * cache holds one for the backend), journals the result and reports the run time to the
 * scheduler; jobs of a lost device move elsewhere (DESIGN in jobs-impl.h).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/jobs-impl.h"
#include "daemon/log.h"
#include "runtime/backend.h"

/* ------------------------------------------------------------------------------------------
 * Running a job
 * ---------------------------------------------------------------------------------------- */

/* Journals the outputs of a run (or fails the job when that is impossible). How it ran is
 * remembered before the journal says it succeeded, so whoever reads it succeeded (a client, a
 * watcher) finds the run too; a failed journal write forgets it again. */
static void succeed_job(struct rtx_jobs *j, struct job *job, struct rtx_tensor **outs,
                        const struct rtx_exec_stats *st, const struct rtx_jobs_run *run) {
    const struct rtx_graph *g = job->prep->graph;
    int n = g->n_outputs;
    const char **names = rtx_calloc((size_t)n + 1, sizeof *names);
    struct rtx_err err = {0};
    if (!names) {
        rtx__jobs_fail_job(j, job, "RESOURCE_EXHAUSTED", "out of memory storing the outputs");
        return;
    }
    for (int i = 0; i < n; i++)
        names[i] = g->values[g->outputs[i]].name;
    rtx__jobs_record_run(j, job->id, run);
    int rc =
        rtx_store_job_succeed(j->store, job->id, now_ms(), st->wall_ms, (int64_t)st->peak_bytes, n,
                              names, (const struct rtx_tensor *const *)outs, &err);
    rtx_free(names);
    if (rc < 0) {
        rtx__jobs_forget_run(j, job->id);
        char reason[300];
        snprintf(reason, sizeof reason, "cannot store the outputs: %.*s", (int)(sizeof reason - 27), err.msg);
        rtx_log(RTX_LOG_ERROR, "cannot journal a job's outputs", "job", job->id, "error", err.msg,
                NULL);
        rtx__jobs_fail_job(j, job, rtx__jobs_failure_code(rc), reason);
        return;
    }
    pthread_mutex_lock(&j->mu);
    j->succeeded++;
    pthread_mutex_unlock(&j->mu);
    rtx__jobs_log_state(j, job->id, job->lane, RTX_JOB_SUCCEEDED, "", st->wall_ms);
    rtx__jobs_publish(j, job->id);
}

/* What a raised cancel flag means for this job: cancelled by request (journal it) or
 * interrupted (leave the journal as it is: running, or queued when it had not started). */
static void stop_job(struct rtx_jobs *j, struct job *job, bool started) {
    pthread_mutex_lock(&j->mu);
    bool requested = job->cancel_requested;
    pthread_mutex_unlock(&j->mu);
    if (requested) {
        struct rtx_err err = {0};
        rtx__jobs_change_state(j, job->id, job->lane, RTX_JOB_CANCELLED, NULL, REASON_CANCELLED,
                               &err);
        return;
    }
    rtx_log(RTX_LOG_WARN, "job interrupted", "job", job->id, "lane", j->lanes[job->lane].name,
            "state", started ? "running" : "queued", NULL);
}

/* Runs `plan` with the job's inputs on w's backend. A job that runs out of memory while its
 * device's plan cache keeps plans (which hold memory charged to their consumers) runs once
 * more after the cache dropped them. */
static int execute_job(struct worker *w, struct job *job, struct rtx_plan *plan,
                       struct rtx_tensor **outs, struct rtx_exec_stats *st, struct rtx_err *err) {
    struct prepared *p = job->prep;
    struct dev *dv = &w->j->devs[w->dev];
    int n_out = p->graph->n_outputs;
    int rc = rtx_plan_execute(plan, w->be, p->inputs, p->n_inputs, outs, n_out, &job->cancel, st,
                              err);
    if (rc != RTX_ENOMEM) return rc;
    int dropped = rtx_device_plans_clear(dv->d);
    if (dropped == 0) return rc;
    char nd[16];
    snprintf(nd, sizeof nd, "%d", dropped);
    rtx_log(RTX_LOG_INFO, "out of memory: kept plans dropped, running the job again", "job",
            job->id, "device", dv->name, "plans", nd, NULL);
    return rtx_plan_execute(plan, w->be, p->inputs, p->n_inputs, outs, n_out, &job->cancel, st,
                            err);
}

/* The plan cache's release: frees the decoded graph a kept plan pointed into. */
static void release_graph(void *graph) {
    rtx_graph_free(graph);
}

/* After a job ran on w without a kept plan: its own plan and graph move into the device's plan
 * cache when it succeeded (the cache frees them when it does not keep them). */
static void keep_plan(struct worker *w, struct prepared *p) {
    struct rtx_device *d = w->j->devs[w->dev].d;
    size_t bytes = rtx_device_plan_bytes(p->plan);
    rtx_device_plan_keep(d, w->be, p->plan_key, p->plan, bytes, release_graph, p->graph);
    p->graph = NULL; /* the cache owns them now; the job's outputs are journaled */
    p->plan = NULL;
}

/* The reason of a job that failed with rc on w's device, from its error; an out-of-memory
 * failure that the jobs share refused (its refusals grew past `refusals` during the run; a
 * concurrent job's refusal may be counted too) names the share (device.jobs_reserve). *code
 * gets its failure code. */
static void failure_reason(struct worker *w, int rc, const struct rtx_err *err,
                           uint64_t refusals, char *reason, size_t len, const char **code) {
    struct dev *dv = &w->j->devs[w->dev];
    snprintf(reason, len, "%s", err->msg);
    *code = rtx__jobs_failure_code(rc);
    if (!rtx_backend_is_host(w->be) && rtx_device_check(dv->d, w->be, reason, len)) {
        *code = "UNAVAILABLE"; /* the device was lost */
        return;
    }
    size_t used = strlen(reason);
    if (rc == RTX_ENOMEM && rtx__jobs_share(dv).refusals > refusals && used + 1 < len)
        snprintf(reason + used, len - used,
                 " [past the jobs share of %s: %zu bytes reserved (device.jobs_reserve) and "
                 "what the budget has unreserved]",
                 dv->name, dv->reserve_bytes);
}

/* How a worker's run of a job ended, for its scheduler. */
enum run_result {
    RUN_OK,      /* ran to the end (its outputs may still have failed to store) */
    RUN_FAILED,  /* ran, or tried to, and failed */
    RUN_STOPPED, /* cancelled, interrupted, or expired before it started */
    RUN_BACK,    /* an "auto" job this GPU cannot run: to the CPU */
};

/* Runs a job on worker w; *run_ns gets the execution's duration (ns) when it ran. */
static enum run_result run_job(struct worker *w, struct job *job, int64_t *run_ns) {
    struct rtx_jobs *j = w->j;
    struct dev *dv = &j->devs[w->dev];
    struct rtx_err err = {0};
    char reason[sizeof err.msg + 200];
    /* the scheduler expires jobs by its deadline; a recovered job admitted without one (it
     * could not be met after the restart) is checked here */
    if (job->deadline_ms > 0 && now_ms() >= job->deadline_ms) {
        rtx__jobs_change_state(j, job->id, job->lane, RTX_JOB_EXPIRED, NULL, REASON_EXPIRED, &err);
        return RUN_STOPPED;
    }
    if (__atomic_load_n(&job->cancel, __ATOMIC_SEQ_CST)) {
        stop_job(j, job, false);
        return RUN_STOPPED;
    }
    int rc;
    if (!job->prep && (rc = rtx__jobs_load_prepared(j, job->id, &job->prep, &err)) < 0) {
        rtx__jobs_fail_job(j, job, rtx__jobs_failure_code(rc), err.msg);
        return RUN_FAILED;
    }
    struct prepared *p = job->prep;
    if (w->dev != DEV_CPU) {
        int bad = rtx__jobs_first_unsupported(w->be, p->graph);
        if (bad >= 0 && job->asked == CLS_AUTO) return RUN_BACK;
        if (bad >= 0) {
            rtx__jobs_unsupported_text(w->be, p->graph, bad, reason, sizeof reason);
            rtx__jobs_fail_job(j, job, "INTERNAL", reason);
            return RUN_FAILED;
        }
    }
    rc = rtx_store_job_start(j->store, job->id, dv->name, now_ms(), &err);
    if (rc < 0) {
        snprintf(reason, sizeof reason, "cannot journal the job as running: %s", err.msg);
        rtx_log(RTX_LOG_ERROR, "cannot journal a job state", "job", job->id, "state", "running",
                "error", err.msg, NULL);
        rtx__jobs_fail_job(j, job, rtx__jobs_failure_code(rc), reason);
        return RUN_FAILED;
    }
    pthread_mutex_lock(&j->mu);
    dv->jobs_started++;
    pthread_mutex_unlock(&j->mu);
    rtx__jobs_log_state(j, job->id, job->lane, RTX_JOB_RUNNING, "", 0);
    rtx__jobs_publish(j, job->id);

    int n_out = p->graph->n_outputs;
    struct rtx_tensor **outs = rtx_calloc((size_t)n_out + 1, sizeof *outs);
    if (!outs) {
        rtx__jobs_fail_job(j, job, "RESOURCE_EXHAUSTED", "out of memory running the job");
        return RUN_FAILED;
    }
    struct rtx_device_plan *kept = rtx_device_plan_take(dv->d, w->be, p->plan_key);
    struct rtx_exec_stats st = {0};
    uint64_t refusals = rtx__jobs_share(dv).refusals;
    int64_t t0 = mono_ns();
    rc = execute_job(w, job, kept ? rtx_device_plan_get(kept) : p->plan, outs, &st, &err);
    *run_ns = mono_ns() - t0;
    enum run_result res = RUN_OK;
    if (rc == 0) {
        pthread_mutex_lock(&j->mu);
        if (st.peak_bytes > dv->peak_bytes) dv->peak_bytes = st.peak_bytes;
        pthread_mutex_unlock(&j->mu);
        struct rtx_jobs_run run = {
            .mode = st.mode, .nodes_run = st.nodes_run, .plan_reused = kept != NULL};
        snprintf(run.device, sizeof run.device, "%s", dv->name);
        succeed_job(j, job, outs, &st, &run);
    } else if (rc == RTX_ECANCELED) {
        stop_job(j, job, true);
        res = RUN_STOPPED;
    } else {
        const char *code;
        failure_reason(w, rc, &err, refusals, reason, sizeof reason, &code);
        rtx__jobs_fail_job(j, job, code, reason);
        res = RUN_FAILED;
    }
    for (int i = 0; i < n_out; i++)
        rtx_tensor_unref(outs[i]);
    rtx_free(outs);
    if (kept)
        rtx_device_plan_return(dv->d, kept, rc == 0);
    else if (rc == 0)
        keep_plan(w, p);
    return res;
}

/* ------------------------------------------------------------------------------------------
 * The worker loop
 * ---------------------------------------------------------------------------------------- */

/* Journals a job that left its scheduler without running as `st` with `reason` (and failure
 * code `code` when st is RTX_JOB_FAILED), then forgets
 * and frees it. Called and returns with mu held (released meanwhile). */
static void settle_job(struct rtx_jobs *j, struct job *job, enum rtx_job_state st,
                       const char *code, const char *reason) {
    pthread_mutex_unlock(&j->mu);
    struct rtx_err err = {0};
    rtx__jobs_change_state(j, job->id, job->lane, st, code, reason, &err);
    pthread_mutex_lock(&j->mu);
    rtx__jobs_forget(j, job);
    pthread_mutex_unlock(&j->mu);
    rtx__jobs_job_free(job);
    pthread_mutex_lock(&j->mu);
}

/* Queues a job that left its device's scheduler on another device (under mu): a lost
 * device's jobs, and an "auto" job a GPU cannot run (now CPU). A job no device can take now
 * is journaled failed with the reason (mu is released meanwhile). */
static void move_job(struct rtx_jobs *j, struct job *job) {
    struct rtx_err err = {0};
    if (rtx__jobs_sched_place(j, job, &err) == 0) {
        job->where = JOB_QUEUED;
        return;
    }
    char reason[300];
    snprintf(reason, sizeof reason, "cannot be placed: %.*s", (int)(sizeof reason - 19), err.msg);
    job->where = JOB_CANCELLING;
    settle_job(j, job, RTX_JOB_FAILED, rtx__jobs_failure_code(err.code), reason);
}

void *rtx__jobs_worker_main(void *arg) {
    struct worker *w = arg;
    struct rtx_jobs *j = w->j;
    struct dev *dv = &j->devs[w->dev];
    rtx_thread_name("rtx-job-%s", rtx_device_name(dv->d));
    pthread_mutex_lock(&j->mu);
    while (!j->stopping) {
        struct rtx_sched_item it;
        enum rtx_sched_pick pick = RTX_SCHED_NONE;
        if (!j->draining && dv->sched) pick = rtx_sched_dispatch(dv->sched, sched_now(), &it);
        if (pick == RTX_SCHED_NONE) {
            pthread_cond_wait(&j->work_cv, &j->mu);
            continue;
        }
        struct job *job = it.data;
        rtx__jobs_unqueued(j, job);
        if (pick == RTX_SCHED_EXPIRED) {
            job->in_sched = false;
            rtx__jobs_load_add(j, job, -1);
            if (job->where == JOB_PENDING) { /* its submitter journals it */
                job->expired = true;
                continue;
            }
            job->where = JOB_CANCELLING;
            settle_job(j, job, RTX_JOB_EXPIRED, NULL, REASON_EXPIRED);
            continue;
        }
        dv->running++;
        while (job->where == JOB_PENDING) { /* dispatched before its journal insert ended */
            job->claimed = true;
            pthread_cond_wait(&j->pending_cv, &j->mu);
        }
        if (job->where == JOB_DROPPED) { /* not journaled, or cancelled meanwhile */
            rtx__jobs_finish_item(j, job, RTX_SCHED_CANCELLED, 0);
            pthread_mutex_unlock(&j->mu);
            rtx__jobs_job_free(job);
            pthread_mutex_lock(&j->mu);
            continue;
        }
        if (j->draining) { /* a drain began while it was pending: it stays queued */
            rtx_sched_requeue(dv->sched, job->handle, it.cost_ns > 0 ? it.cost_ns : 1,
                              sched_now());
            dv->running--;
            dv->queued++;
            j->lanes[job->lane].queued++;
            j->n_queued++;
            job->where = JOB_QUEUED;
            continue;
        }
        if (!rtx__jobs_dev_usable(dv)) { /* the device was lost: the job goes elsewhere or fails */
            rtx__jobs_finish_item(j, job, RTX_SCHED_CANCELLED, 0);
            move_job(j, job);
            continue;
        }
        job->where = JOB_RUNNING;
        j->lanes[job->lane].running++;
        j->n_running++;
        w->current = job;
        pthread_mutex_unlock(&j->mu);

        int64_t run_ns = 0;
        enum run_result res = run_job(w, job, &run_ns);

        pthread_mutex_lock(&j->mu);
        w->current = NULL;
        j->lanes[job->lane].running--;
        j->n_running--;
        rtx__jobs_finish_item(j, job,
                              res == RUN_OK       ? RTX_SCHED_OK
                              : res == RUN_FAILED ? RTX_SCHED_FAILED
                                                  : RTX_SCHED_CANCELLED,
                              run_ns);
        pthread_cond_broadcast(&j->idle_cv);
        if (res == RUN_BACK) {
            job->cls = CLS_CPU;
            move_job(j, job);
            continue;
        }
        rtx__jobs_forget(j, job);
        pthread_mutex_unlock(&j->mu);
        rtx__jobs_job_free(job);
        pthread_mutex_lock(&j->mu);
    }
    pthread_mutex_unlock(&j->mu);
    return NULL;
}
