/*
 * jobs-lifecycle.c - the job manager's life: options, start (devices, workers, schedulers,
 * learned costs, recovery of the journal's unfinished jobs), drain, settings that change at
 * run time (restart policy, lanes) and stop. The job manager's DESIGN is in jobs-impl.h.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/jobs-impl.h"
#include "daemon/log.h"
#include "kernels/cpu/backend-cpu.h"
#include "runtime/backend.h"

int64_t (*rtx__jobs_clock_hook)(void);

/* ------------------------------------------------------------------------------------------
 * Options and start
 * ---------------------------------------------------------------------------------------- */

static int check_options(const struct rtx_jobs_options *o, struct rtx_err *err) {
    if (!o->store) return rtx_err_set(err, RTX_EINVAL, "jobs: no store");
    if (o->workers < 1) return rtx_err_set(err, RTX_EINVAL, "jobs: workers must be >= 1");
    if (o->cpu_threads < 1) return rtx_err_set(err, RTX_EINVAL, "jobs: cpu_threads must be >= 1");
    if (o->max_queued < 1) return rtx_err_set(err, RTX_EINVAL, "jobs: max_queued must be >= 1");
    if (o->gpu_workers_per_device < 0 || o->gpu_workers_per_device > 64)
        return rtx_err_set(err, RTX_EINVAL, "jobs: gpu_workers_per_device must be in [0, 64]");
    if (!o->devices) return rtx_err_set(err, RTX_EINVAL, "jobs: no device set");
    if (!(o->jobs_reserve >= 0 && o->jobs_reserve <= 1))
        return rtx_err_set(err, RTX_EINVAL, "jobs: jobs_reserve must be in [0, 1]");
    if (o->default_restart_policy != RTX_RESTART_RERUN &&
        o->default_restart_policy != RTX_RESTART_FAIL)
        return rtx_err_set(err, RTX_EINVAL, "jobs: invalid default restart policy %d",
                           (int)o->default_restart_policy);
    if (o->n_lanes < 1 || o->n_lanes > MAX_LANES || !o->lanes)
        return rtx_err_set(err, RTX_EINVAL, "jobs: between 1 and %d lanes are needed, got %d",
                           MAX_LANES, o->n_lanes);
    for (int i = 0; i < o->n_lanes; i++) {
        if (!o->lanes[i] || !o->lanes[i][0])
            return rtx_err_set(err, RTX_EINVAL, "jobs: lane %d has no name", i);
        for (int k = 0; k < i; k++)
            if (strcmp(o->lanes[k], o->lanes[i]) == 0)
                return rtx_err_set(err, RTX_EINVAL, "jobs: lane '%s' is listed twice",
                                   o->lanes[i]);
    }
    bool found = false;
    for (int i = 0; i < o->n_lanes && o->default_lane; i++)
        found = found || strcmp(o->lanes[i], o->default_lane) == 0;
    if (!found)
        return rtx_err_set(err, RTX_EINVAL, "jobs: the default lane '%s' is not a lane",
                           o->default_lane ? o->default_lane : "");
    return 0;
}

/* The scheduler configuration of the options: their sched (or the defaults) with exactly
 * their lanes, in their order. */
static int sched_config(const struct rtx_jobs_options *o, struct rtx_sched_config *cfg,
                        struct rtx_err *err) {
    if (o->sched)
        *cfg = *o->sched;
    else
        rtx_sched_config_init(cfg);
    char names[MAX_LANES * (RTX_SCHED_LANE_NAME_MAX + 2)] = "";
    for (int i = 0; i < o->n_lanes; i++) {
        size_t used = strlen(names);
        snprintf(names + used, sizeof names - used, "%s%.*s", i ? "," : "",
                 RTX_SCHED_LANE_NAME_MAX + 1, o->lanes[i]);
    }
    int rc = rtx_sched_config_select_lanes(cfg, names, err);
    if (rc == 0) rc = rtx_sched_config_check(cfg, err);
    return rc < 0 ? rtx_err_prefix(err, "jobs: lanes") : 0;
}

int rtx__jobs_find_lane(const struct rtx_jobs *j, const char *name) {
    for (int i = 0; i < j->n_lanes; i++)
        if (strcmp(j->lanes[i].name, name) == 0) return i;
    return -1;
}

/* ------------------------------------------------------------------------------------------
 * Recovery
 * ---------------------------------------------------------------------------------------- */

/* Journals a recovered job terminal with reason and counts it: failed with failure code
 * `code`, or expired when code is NULL. */
static int recover_end(struct rtx_jobs *j, const char *id, int lane, const char *code,
                       const char *reason, int *n, struct rtx_err *err) {
    enum rtx_job_state st = code ? RTX_JOB_FAILED : RTX_JOB_EXPIRED;
    int rc = code ? rtx_store_job_fail(j->store, id, code, reason, now_ms(), err)
                  : rtx_store_job_set_state(j->store, id, st, reason, now_ms(), err);
    if (rc < 0) return rc;
    if (st == RTX_JOB_FAILED) j->failed++;
    if (st == RTX_JOB_EXPIRED) j->expired++;
    (*n)++;
    rtx__jobs_log_state(j, id, lane, st, reason, 0);
    return 0;
}

/* Re-queues unfinished jobs from the journal: queued ones as they are, running ones by their
 * restart policy. A job whose deadline passed is journaled expired; one no device can take,
 * or that its lane has no room for, failed with the reason. A job whose deadline cannot be
 * met any more is queued without a scheduler deadline (the worker expires it when it comes
 * to it). Runs before the workers exist. */
static int recover(struct rtx_jobs *j, struct rtx_err *err) {
    struct rtx_job_info *jobs = NULL;
    int n = 0, n_queued = 0, n_rerun = 0, n_failed = 0, n_expired = 0;
    int rc = rtx_store_job_unfinished(j->store, &jobs, &n, err);
    if (rc < 0) return rtx_err_prefix(err, "recovering jobs");
    for (int i = 0; i < n && rc == 0; i++) {
        struct rtx_job_info *info = &jobs[i];
        int lane = rtx__jobs_find_lane(j, info->lane ? info->lane : "");
        if (lane < 0) {
            rtx_log(RTX_LOG_WARN, "recovered job's lane is gone; using the default lane", "job",
                    info->id, "lane", info->lane ? info->lane : "", NULL);
            lane = j->default_lane;
        }
        enum job_class asked = CLS_AUTO;
        struct rtx_err derr = {0};
        const char *dev = info->requested_device ? info->requested_device : "";
        if (dev[0] && rtx__jobs_class_parse(j, dev, &asked, &derr) < 0) {
            char reason[300];
            snprintf(reason, sizeof reason, "cannot be placed: %.*s", (int)(sizeof reason - 19), derr.msg);
            rc = recover_end(j, info->id, lane, "INTERNAL", reason, &n_failed, err);
            continue;
        }
        if (info->state == RTX_JOB_RUNNING) {
            enum rtx_restart_policy pol = info->restart_policy;
            if (pol != RTX_RESTART_RERUN && pol != RTX_RESTART_FAIL) pol = j->default_policy;
            if (pol == RTX_RESTART_FAIL) {
                rc = recover_end(j, info->id, lane, "UNAVAILABLE", REASON_RESTART, &n_failed,
                                 err);
                continue;
            }
            rc = rtx_store_job_set_state(j->store, info->id, RTX_JOB_QUEUED, "", now_ms(), err);
            if (rc < 0) break;
            n_rerun++;
        } else {
            n_queued++;
        }
        int64_t wall = now_ms();
        if (info->deadline_ms > 0 && info->deadline_ms <= wall) {
            rc = recover_end(j, info->id, lane, NULL, REASON_EXPIRED, &n_expired, err);
            continue;
        }
        struct job *job = rtx_calloc(1, sizeof *job);
        if (!job) {
            rc = rtx_err_set(err, RTX_ENOMEM, "out of memory recovering jobs");
            break;
        }
        memcpy(job->id, info->id, sizeof job->id);
        job->id[RTX_JOB_ID_LEN - 1] = '\0';
        job->lane = lane;
        job->asked = job->cls = asked;
        job->deadline_ms = info->deadline_ms;
        if (job->deadline_ms > 0)
            job->deadline_ns = sched_now() + (job->deadline_ms - wall) * 1000000;
        struct rtx_err perr = {0};
        int prc = rtx__jobs_sched_place(j, job, &perr);
        if (prc == RTX_EOVERLOAD && job->deadline_ns > 0) {
            job->deadline_ns = 0;
            prc = rtx__jobs_sched_place(j, job, &perr);
        }
        if (prc < 0) {
            char reason[300];
            snprintf(reason, sizeof reason, "cannot be placed: %.*s", (int)(sizeof reason - 19), perr.msg);
            rtx_free(job);
            rc = recover_end(j, info->id, lane, rtx__jobs_failure_code(prc), reason, &n_failed,
                             err);
            continue;
        }
        job->where = JOB_QUEUED;
        rtx__jobs_index_add(j, job);
    }
    rtx_job_info_free_array(jobs, n);
    if (rc < 0) return rtx_err_prefix(err, "recovering jobs");
    if (n > 0) {
        char q[24], r[24], f[24], x[24];
        snprintf(q, sizeof q, "%d", n_queued);
        snprintf(r, sizeof r, "%d", n_rerun);
        snprintf(f, sizeof f, "%d", n_failed);
        snprintf(x, sizeof x, "%d", n_expired);
        rtx_log(RTX_LOG_INFO, "recovered unfinished jobs", "queued", q, "rerun", r, "failed", f,
                "expired", x, NULL);
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Start and stop
 * ---------------------------------------------------------------------------------------- */

/* Frees what start built; the workers and the housekeeper must have been joined. */
static void destroy(struct rtx_jobs *j) {
    for (size_t b = 0; j->index && b < j->index_cap; b++) {
        for (struct job *job = j->index[b], *nx; job; job = nx) {
            nx = job->hnext;
            if (job->in_sched) rtx__jobs_load_add(j, job, -1); /* the set outlives us */
            rtx__jobs_job_free(job);
        }
    }
    for (int l = 0; l < j->n_lanes; l++)
        rtx_free(j->lanes[l].name);
    for (size_t b = 0; b < WATCH_BUCKETS; b++) {
        for (struct watch *w = j->watches[b], *nx; w; w = nx) {
            nx = w->next;
            rtx_free(w);
        }
    }
    rtx__jobs_devices_close(j);
    for (int d = 0; d < j->n_devs; d++)
        rtx_sched_free(j->devs[d].sched);
    rtx_free(j->workers);
    rtx_free(j->index);
    rtx_free(j->runs);
    pthread_cond_destroy(&j->work_cv);
    pthread_cond_destroy(&j->idle_cv);
    pthread_cond_destroy(&j->pending_cv);
    pthread_cond_destroy(&j->hk_cv);
    pthread_cond_destroy(&j->wcv);
    pthread_mutex_destroy(&j->mu);
    pthread_mutex_destroy(&j->wmu);
    pthread_mutex_destroy(&j->rmu);
    rtx_free(j);
}

/* Stops and joins the started workers (interrupting their jobs) and the housekeeper. */
static void join_workers(struct rtx_jobs *j) {
    pthread_mutex_lock(&j->mu);
    j->stopping = true;
    j->draining = true;
    rtx__jobs_interrupt_running(j);
    pthread_cond_broadcast(&j->work_cv);
    pthread_cond_broadcast(&j->hk_cv);
    pthread_mutex_unlock(&j->mu);
    for (int i = 0; i < j->n_workers; i++)
        if (j->workers[i].started) pthread_join(j->workers[i].thread, NULL);
    if (j->hk_started) pthread_join(j->hk_thread, NULL);
}

static int init_sync(struct rtx_jobs *j) {
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0) return -1;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&j->mu, NULL);
    pthread_mutex_init(&j->wmu, NULL);
    pthread_mutex_init(&j->rmu, NULL);
    pthread_cond_init(&j->work_cv, NULL);
    pthread_cond_init(&j->idle_cv, &ca);
    pthread_cond_init(&j->pending_cv, NULL);
    pthread_cond_init(&j->hk_cv, &ca);
    pthread_cond_init(&j->wcv, NULL);
    pthread_condattr_destroy(&ca);
    return 0;
}

int rtx_jobs_start(const struct rtx_jobs_options *opt, struct rtx_jobs **out,
                   struct rtx_err *err) {
    struct rtx_err local;
    if (!err) err = &local;
    if (!opt || !out) return rtx_err_set(err, RTX_EINVAL, "jobs: invalid argument");
    *out = NULL;
    int rc = check_options(opt, err);
    if (rc < 0) return rc;
    struct rtx_jobs *j = rtx_calloc(1, sizeof *j);
    if (!j) return rtx_err_set(err, RTX_ENOMEM, "jobs: out of memory");
    if (init_sync(j) < 0) {
        rtx_free(j);
        return rtx_err_set(err, RTX_ENOMEM, "jobs: out of memory");
    }
    if ((rc = sched_config(opt, &j->sched_cfg, err)) < 0) goto fail;
    j->store = opt->store;
    struct rtx_limits dl = rtx_limits_default(), lim = opt->limits;
    if (lim.max_nodes <= 0) lim.max_nodes = dl.max_nodes;
    if (lim.max_values <= 0) lim.max_values = dl.max_values;
    if (lim.max_dims <= 0) lim.max_dims = dl.max_dims;
    if (lim.max_elements <= 0) lim.max_elements = dl.max_elements;
    if (lim.max_tensor_bytes <= 0) lim.max_tensor_bytes = dl.max_tensor_bytes;
    if (lim.max_total_bytes <= 0) lim.max_total_bytes = dl.max_total_bytes;
    j->limits = lim;
    j->max_queued = opt->max_queued;
    j->cpu_threads = opt->cpu_threads;
    j->default_policy = opt->default_restart_policy;
    j->n_lanes = opt->n_lanes;
    j->index_cap = INDEX_MIN_BUCKETS;
    j->index = rtx_calloc(j->index_cap, sizeof *j->index);
    j->jobs_reserve = opt->jobs_reserve;
    j->runs = rtx_calloc(RTX_JOBS_RUNS_KEPT, sizeof *j->runs);
    for (int b = 0; b < RUN_BUCKETS; b++)
        j->run_heads[b] = -1;
    int n_gpu_workers = rtx__jobs_devices_init(j, opt, err);
    if (n_gpu_workers < 0) {
        rc = n_gpu_workers;
        goto fail;
    }
    j->workers = rtx_calloc((size_t)(opt->workers + n_gpu_workers), sizeof *j->workers);
    if (!j->index || !j->runs || !j->workers) goto oom;
    for (int i = 0; i < opt->n_lanes; i++) {
        if (!(j->lanes[i].name = rtx_strdup(opt->lanes[i]))) goto oom;
        if (strcmp(opt->lanes[i], opt->default_lane) == 0) j->default_lane = i;
    }
    rc = rtx__jobs_class_parse(j, opt->default_device ? opt->default_device : "auto",
                               &j->default_cls, err);
    if (rc < 0) {
        rtx_err_prefix(err, "jobs: default device");
        goto fail;
    }
    if ((rc = rtx__jobs_workers_new(j, DEV_CPU, err)) < 0) goto fail;
    j->n_cpu_workers = j->n_workers;
    for (int d = 1; d < j->n_devs; d++)
        rtx__jobs_workers_new(j, d, err); /* a GPU that cannot take workers runs no jobs */
    if ((rc = rtx__jobs_scheds_new(j, err)) < 0) goto fail;
    rtx__jobs_load_costs(j);
    if ((rc = recover(j, err)) < 0) goto fail;
    for (int i = 0; i < j->n_workers; i++) {
        if (pthread_create(&j->workers[i].thread, NULL, rtx__jobs_worker_main,
                           &j->workers[i]) != 0) {
            rc = rtx_err_set(err, RTX_ENOMEM, "jobs: cannot start worker thread %d", i);
            join_workers(j);
            goto fail;
        }
        j->workers[i].started = true;
    }
    if (pthread_create(&j->hk_thread, NULL, rtx__jobs_housekeeper_main, j) != 0) {
        rc = rtx_err_set(err, RTX_ENOMEM, "jobs: cannot start the housekeeping thread");
        join_workers(j);
        goto fail;
    }
    j->hk_started = true;
    char nw[16], nt[16], ng[16], dd[24];
    snprintf(nw, sizeof nw, "%d", j->n_cpu_workers);
    snprintf(nt, sizeof nt, "%d", j->cpu_threads);
    snprintf(ng, sizeof ng, "%d", j->n_workers - j->n_cpu_workers);
    rtx__jobs_class_text(j->default_cls, dd, sizeof dd);
    char jr[16];
    snprintf(jr, sizeof jr, "%.3g", j->jobs_reserve);
    rtx_log(RTX_LOG_INFO, "job workers started", "workers", nw, "cpu_threads", nt, "gpu_workers",
            ng, "default_device", dd, "jobs_reserve", jr, NULL);
    *out = j;
    return 0;
oom:
    rc = rtx_err_set(err, RTX_ENOMEM, "jobs: out of memory");
fail:
    destroy(j);
    return rc;
}

void rtx_jobs_stop(struct rtx_jobs *j) {
    if (!j) return;
    join_workers(j);
    if (j->costs_dirty) rtx__jobs_save_costs(j);
    char q[24];
    snprintf(q, sizeof q, "%d", j->n_queued);
    rtx_log(RTX_LOG_INFO, "job workers stopped", "queued", q, NULL);
    destroy(j);
}

/* ------------------------------------------------------------------------------------------
 * Drain and settings
 * ---------------------------------------------------------------------------------------- */

void rtx_jobs_drain(struct rtx_jobs *j, int *running, int *queued) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    j->draining = true;
    int r = j->n_running, q = j->n_queued; /* pending jobs are counted queued */
    pthread_mutex_unlock(&j->mu);
    if (running) *running = r;
    if (queued) *queued = q;
    char rs[24], qs[24];
    snprintf(rs, sizeof rs, "%d", r);
    snprintf(qs, sizeof qs, "%d", q);
    rtx_log(RTX_LOG_INFO, "draining jobs", "running", rs, "queued", qs, NULL);
}

/* Whether a worker still runs a job that was interrupted (under mu). */
static bool interrupted_running(struct rtx_jobs *j) {
    for (int i = 0; i < j->n_workers; i++)
        if (j->workers[i].current && j->workers[i].current->interrupted) return true;
    return false;
}

void rtx_jobs_wait_idle(struct rtx_jobs *j, int grace_ms) {
    if (!j) return;
    int64_t end = mono_ms() + (grace_ms > 0 ? grace_ms : 0);
    pthread_mutex_lock(&j->mu);
    while (j->n_running > 0) {
        int64_t left = end - mono_ms();
        if (left <= 0) break;
        struct timespec ts = mono_after(left);
        pthread_cond_timedwait(&j->idle_cv, &j->mu, &ts);
    }
    int n = j->n_running > 0 ? rtx__jobs_interrupt_running(j) : 0;
    if (n > 0) {
        char ns[24];
        snprintf(ns, sizeof ns, "%d", n);
        rtx_log(RTX_LOG_WARN, "drain grace over: interrupting running jobs", "jobs", ns, NULL);
    }
    while (interrupted_running(j))
        pthread_cond_wait(&j->idle_cv, &j->mu);
    pthread_mutex_unlock(&j->mu);
}

void rtx_jobs_set_restart_policy(struct rtx_jobs *j, enum rtx_restart_policy p) {
    if (!j || (p != RTX_RESTART_RERUN && p != RTX_RESTART_FAIL)) return;
    pthread_mutex_lock(&j->mu);
    j->default_policy = p;
    pthread_mutex_unlock(&j->mu);
}

int rtx_jobs_reconfigure(struct rtx_jobs *j, const struct rtx_sched_config *sched,
                         struct rtx_err *err) {
    if (!j || !sched) return rtx_err_set(err, RTX_EINVAL, "jobs: invalid argument");
    int64_t now = sched_now();
    int rc = 0, d;
    pthread_mutex_lock(&j->mu);
    for (d = 0; d < j->n_devs && rc == 0; d++) {
        struct dev *dv = &j->devs[d];
        if (!dv->sched) continue;
        struct rtx_sched_config c = rtx__jobs_device_sched_config(sched, dv);
        rc = rtx_sched_reconfigure(dv->sched, &c, now, err);
        if (rc) rtx_err_prefix(err, "jobs: the scheduler of %s", dv->name);
    }
    if (rc == 0) {
        j->sched_cfg = *sched;
    } else {
        /* back to what they ran: their storage is at least as large, so this cannot fail */
        for (int k = 0; k < d - 1; k++) {
            if (!j->devs[k].sched) continue;
            struct rtx_sched_config c = rtx__jobs_device_sched_config(&j->sched_cfg, &j->devs[k]);
            rtx_sched_reconfigure(j->devs[k].sched, &c, now, NULL);
        }
    }
    pthread_mutex_unlock(&j->mu);
    return rc;
}
