/*
 * jobs.h - the job manager: admission of Submit requests (decode, validate, journal, queue),
 * worker threads that run jobs on their own backends, cancellation, watchers for Wait,
 * recovery of unfinished jobs at start, and drain.
 *
 * DESIGN
 * A job is acknowledged only after rtx_store_job_insert returned (it is durable). The queue is
 * FIFO per lane with lanes served round robin (the SLA scheduler replaces this later). A
 * worker marks a job running in the journal before it executes it, so after a crash the
 * journal tells which jobs were interrupted; recovery then re-queues them or fails them by the
 * job's restart policy. Each state change is journaled first and then published to watchers.
 */
#ifndef RTX_DAEMON_JOBS_H
#define RTX_DAEMON_JOBS_H

#include "store/store.h"

struct rtx_jobs;

struct rtx_jobs_options {
    struct rtx_store *store;
    int workers;                        /* worker threads, >= 1 */
    int cpu_threads;                    /* CPU backend threads per worker, >= 1 */
    struct rtx_limits limits;           /* graph and tensor limits for admission */
    int64_t max_queued;                 /* Submit fails with RTX_EUNAVAILABLE beyond this */
    enum rtx_restart_policy default_restart_policy;
    int n_lanes;
    const char *const *lanes;           /* known lane names */
    const char *default_lane;
};

/* Recovers unfinished jobs from the store (queued: queued again; running: by policy) and
 * starts the workers. */
int rtx_jobs_start(const struct rtx_jobs_options *opt, struct rtx_jobs **out,
                   struct rtx_err *err);
/* Stops the workers after their current job (which stays "running" in the journal unless it
 * finished) and frees everything. NULL: no-op. A job still running is interrupted at its next
 * op boundary, as by rtx_jobs_wait_idle past its grace; drain and wait first to let it end. */
void rtx_jobs_stop(struct rtx_jobs *j);

/* Admits a serialized rtx.v1.SubmitRequest: decode (RTX_EFORMAT), graph + inputs validation
 * with a plan (RTX_EGRAPH / RTX_EINVAL / RTX_ELIMIT naming the problem), unknown lane
 * (RTX_EINVAL), draining or queue full (RTX_EUNAVAILABLE), journal (store errors). On 0 the
 * job is durable and queued; job_id is set, *deduplicated tells an idempotent repeat. */
int rtx_jobs_submit(struct rtx_jobs *j, const void *request, size_t len,
                    char job_id[RTX_JOB_ID_LEN], bool *deduplicated, struct rtx_err *err);

/* Cancels a job: a queued job becomes cancelled at once; a running job is stopped at its next
 * op boundary and becomes cancelled; a terminal job is left as it is. *out (may be NULL)
 * receives the job as it is after the call. RTX_ENOTFOUND for an unknown id. */
int rtx_jobs_cancel(struct rtx_jobs *j, const char *id, struct rtx_job_info *out,
                    struct rtx_err *err);

/* Calls cb(ctx, job) with the job's current state and then at each state change, from the
 * thread that made the change, until a terminal state has been delivered (then the watch ends
 * by itself and cb gets `last` = true). *watch receives a handle for rtx_jobs_unwatch.
 * RTX_ENOTFOUND for an unknown id. cb must not block and must not call back into rtx_jobs. */
typedef void (*rtx_jobs_watch_cb)(void *ctx, const struct rtx_job_info *job, bool last);
int rtx_jobs_watch(struct rtx_jobs *j, const char *id, rtx_jobs_watch_cb cb, void *ctx,
                   uint64_t *watch, struct rtx_err *err);
/* Ends a watch early (client went away). After it returns cb is not running and will not be
 * called again. Unknown or finished handles are ignored. */
void rtx_jobs_unwatch(struct rtx_jobs *j, uint64_t watch);

/* Stops admitting jobs and starting queued ones; returns at once. rtx_jobs_wait_idle then
 * waits up to grace_ms for running jobs; past it, running jobs are interrupted (left running
 * in the journal, so the next start applies their restart policy). */
void rtx_jobs_drain(struct rtx_jobs *j, int *running, int *queued);
void rtx_jobs_wait_idle(struct rtx_jobs *j, int grace_ms);

/* New settings after SIGHUP. */
void rtx_jobs_set_restart_policy(struct rtx_jobs *j, enum rtx_restart_policy p);

struct rtx_lane_depth {
    const char *lane;
    int queued, running;
};
struct rtx_jobs_stats {
    int n_lanes;
    struct rtx_lane_depth lanes[16];
    int64_t succeeded, failed, cancelled, expired; /* since start */
    bool draining;
    int workers;
    int cpu_threads;                    /* per worker */
};
void rtx_jobs_get_stats(struct rtx_jobs *j, struct rtx_jobs_stats *st);

/* Test hook: when set, rtx_jobs_submit calls it after queuing a new job and before returning
 * (tests use it to let a worker finish the job first). NULL in production. */
extern void (*rtx__jobs_after_enqueue_hook)(void);

#endif /* RTX_DAEMON_JOBS_H */
