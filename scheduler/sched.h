/*
 * sched.h - the SLA scheduler: named lanes with a latency target, a weight, a queue bound and
 * a timeout action; earliest-deadline-first inside a lane, weighted fair sharing across lanes,
 * admission control from learned run times, deadlines, cancellation and brownout.
 *
 * DESIGN
 * The scheduler is a self-contained data structure with an injected clock: every call that
 * depends on time takes `now_ns` (CLOCK_MONOTONIC in the daemon, a simulated clock in tests
 * and benchmarks), so nothing here sleeps, reads a clock or starts a thread. It owns no work:
 * an item is an opaque pointer the caller gets back when the item is dispatched, expires or is
 * cancelled; the caller runs it and reports its completion with the measured run time.
 *
 * Inside a lane the queue is a binary heap ordered by deadline (an item without one sorts at
 * its arrival plus the lane's latency target), ties in arrival order. Across lanes, stride
 * scheduling on virtual time: each lane has a pass that advances by an item's estimated cost
 * divided by the lane's weight when the lane is served, the backlogged lane with the smallest
 * pass is served next, and a lane that becomes backlogged starts at the current virtual time,
 * so an idle lane banks no credit. Dispatch is work conserving: it returns an item whenever
 * one is queued.
 *
 * Admission estimates when an item would finish: now, plus the work queued in its lane and the
 * part of every other lane's queued work that weighted sharing serves meanwhile, plus what is
 * left of the running work, all divided by the number of executors, plus the item's own cost.
 * The cost is the item's own estimate, else the exponential moving average of measured run
 * times for its cost key (a graph or model), else a default. An item whose deadline cannot be
 * met is refused at once with a retry-after hint: rejecting early beats timing out late.
 *
 * Brownout: the scheduler periodically estimates each lane's queueing delay against its target
 * (the lane's pressure). When some admitted lane stays above the entry pressure for a window,
 * the lowest admitted lane is shed (admission refuses it); another window of overload sheds
 * the next one (never the first lane). When every admitted lane and the next one to readmit
 * stay below the exit pressure for the exit window, one lane is readmitted. While in
 * brownout the batch-delay factor tells batchers to shorten their waits.
 *
 * Memory: rtx_sched_new allocates every item slot, heap and table once; enqueue, dispatch,
 * expire, cancel and finish never allocate. rtx_sched_reconfigure changes lanes' settings and
 * the knobs of a live scheduler (same lanes) and allocates only when a bound grows.
 *
 * Threads: none of these functions lock. The caller serializes every call on one scheduler
 * (one mutex around it in the daemon); rtx_sched_get_stats counts as a call.
 */
#ifndef RTX_SCHEDULER_SCHED_H
#define RTX_SCHEDULER_SCHED_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/runtime.h"

#define RTX_SCHED_MAX_LANES 16
#define RTX_SCHED_LANE_NAME_MAX 32 /* characters of a lane name, [a-z0-9_-] */

/* ------------------------------------------------------------------------------------------
 * Configuration
 * ---------------------------------------------------------------------------------------- */

/* What happens to an item of a lane whose deadline cannot be met or has passed. */
#define RTX_SCHED_TIMEOUT_MAP(X)                                                                  \
    X(REJECT, "reject") /* refused at admission when unmeetable; dropped (expired) when past */   \
    X(DELAY, "delay")   /* admitted anyway; when past, runs behind everything else */

enum rtx_sched_timeout {
#define RTX_SCHED_TIMEOUT_ENUM(name, str) RTX_SCHED_TIMEOUT_##name,
    RTX_SCHED_TIMEOUT_MAP(RTX_SCHED_TIMEOUT_ENUM)
#undef RTX_SCHED_TIMEOUT_ENUM
        RTX_SCHED_TIMEOUT_COUNT
};
/* "reject", "delay"; "?" for another value. */
const char *rtx_sched_timeout_name(enum rtx_sched_timeout t);

struct rtx_sched_lane_config {
    char name[RTX_SCHED_LANE_NAME_MAX + 1];
    int64_t target_ns;  /* latency target: the p99 wait + run the lane promises, ns */
    int weight;         /* share across lanes, 1..1000 */
    int64_t max_queued; /* items queued (not running) at most, 1..10,000,000 */
    enum rtx_sched_timeout on_timeout;
    bool preemptible; /* running work may yield at a batch boundary */
};

struct rtx_sched_config {
    int n_lanes;
    /* Lanes in priority order: the first is the highest; brownout sheds from the last. */
    struct rtx_sched_lane_config lanes[RTX_SCHED_MAX_LANES];
    int executors;                   /* items that run at once (workers, instances), 1..65536 */
    int64_t max_running;             /* items dispatched and not finished at most (dispatch waits
                                      * beyond it), >= executors; a batcher may hold many */
    int64_t default_cost_ns;         /* cost of an item with no estimate and an unknown key, ns */
    double cost_ema_alpha;           /* weight of a new run time in the moving average, (0, 1] */
    int cost_keys;                   /* cost keys remembered at most, 1..1,048,576 */
    int64_t brownout_window_ns;      /* overload lasting this long sheds one more lane, ns */
    int64_t brownout_exit_window_ns; /* calm lasting this long readmits one lane, ns */
    double brownout_enter_pressure;  /* estimated delay / target above which a lane is over */
    double brownout_exit_pressure;   /* ... below which it is calm; < enter (hysteresis) */
    double brownout_delay_factor;    /* batch-delay factor per shed lane, (0, 1] */
};

/* The defaults: lanes realtime (50 ms, weight 8, 1000 queued), interactive (500 ms, weight 2,
 * 5000 queued) and batch (60 s, weight 1, 20000 queued, preemptible), all rejecting; one
 * executor, 4096 running, default cost 10 ms, alpha 0.2, 4096 cost keys, brownout after 1 s
 * of overload (pressure > 1.0), readmission after 5 s of calm (pressure < 0.5), batch delays
 * halved per shed lane. */
void rtx_sched_config_init(struct rtx_sched_config *cfg);

/* Sets one setting from text, as the INI file holds it. section "scheduler" takes
 * executors, max_running, default_cost_us, cost_ema_alpha, cost_keys, brownout_window_ms,
 * brownout_exit_window_ms, brownout_enter_pressure, brownout_exit_pressure and
 * brownout_delay_factor; section "lane.NAME" takes target_p99_us, weight, max_queued,
 * on_timeout (reject | delay) and preemptible (true | false). A lane section for a lane not
 * yet defined adds it after the others, with target 1 s, weight 1, 10000 queued, reject,
 * not preemptible. RTX_ENOTFOUND when the section is neither (the caller's own section),
 * RTX_EINVAL naming section, key and value for an unknown key, a bad or out-of-range value, a
 * bad lane name or a 17th lane. cfg is unchanged on error. */
int rtx_sched_config_set(struct rtx_sched_config *cfg, const char *section, const char *key,
                         const char *value, struct rtx_err *err);

/* One [scheduler] or [lane.NAME] setting of a config, as text in the INI file's units. */
struct rtx_sched_setting {
    char section[8 + RTX_SCHED_LANE_NAME_MAX]; /* "scheduler" or "lane.NAME" */
    const char *key;                            /* "executors", "target_p99_us", ... */
    char value[32];                             /* reads back as the same value */
    const char *description;
    bool is_default;                            /* the built-in value (for a lane not among
                                                 * the defaults: that of a lane added by name) */
    bool is_mutable; /* rtx_sched_reconfigure can change it: all but executors, max_running
                      * and cost_keys */
};
/* The [scheduler] knobs, then every setting of each lane in lane order. */
#define RTX_SCHED_SETTINGS_MAX (10 + 5 * RTX_SCHED_MAX_LANES)
/* Writes cfg's settings into out (room for RTX_SCHED_SETTINGS_MAX); returns their count. What
 * rtxd --print-config and Admin.Config show of the scheduler. */
int rtx_sched_config_list(const struct rtx_sched_config *cfg, struct rtx_sched_setting *out);

/* Applies every [scheduler] and [lane.NAME] setting of an INI text (rtxd's config file) to
 * cfg, through rtx_sched_config_set; other sections are ignored. Errors are prefixed with
 * "ORIGIN:LINE: " (origin names the text, e.g. the file's path). On error cfg may hold the
 * settings before the failing line: parse into a copy to keep the old one. */
int rtx_sched_config_parse(struct rtx_sched_config *cfg, const char *text, const char *origin,
                           struct rtx_err *err);

/* Checks one lane name (len bytes of name): 1..RTX_SCHED_LANE_NAME_MAX characters of
 * [a-z0-9_-]. 0, or RTX_EINVAL with the reason prefixed by "where: ". */
int rtx_sched_lane_name_check(const char *name, size_t len, const char *where,
                              struct rtx_err *err);
/* Splits a comma-separated lane list (as jobs.lanes holds it) into names, blanks around each
 * dropped, every name checked as rtx_sched_lane_name_check does, none twice, at most
 * RTX_SCHED_MAX_LANES. Returns the number of names, or RTX_EINVAL prefixed by "where: ". */
int rtx_sched_lane_names(const char *text, const char *where,
                         char names[RTX_SCHED_MAX_LANES][RTX_SCHED_LANE_NAME_MAX + 1],
                         struct rtx_err *err);

/* Keeps exactly the lanes named in `names` (comma-separated, as jobs.lanes holds them), in
 * that order: lanes already defined keep their settings, new ones get the settings of a lane
 * added by rtx_sched_config_set. RTX_EINVAL for a bad or repeated name or more than 16. */
int rtx_sched_config_select_lanes(struct rtx_sched_config *cfg, const char *names,
                                  struct rtx_err *err);

/* Checks every value and the settings that span values (exit pressure < enter pressure,
 * max_running >= executors, at least one lane, unique names); RTX_EINVAL naming the problem. */
int rtx_sched_config_check(const struct rtx_sched_config *cfg, struct rtx_err *err);

/* ------------------------------------------------------------------------------------------
 * The scheduler
 * ---------------------------------------------------------------------------------------- */

struct rtx_sched;

/* Checks cfg (rtx_sched_config_check) and allocates a scheduler with every item slot
 * (sum of max_queued + max_running), heap and cost table it will use. now_ns starts the
 * clock. RTX_EINVAL for a bad config, RTX_ENOMEM (nothing leaked). */
int rtx_sched_new(const struct rtx_sched_config *cfg, int64_t now_ns, struct rtx_sched **out,
                  struct rtx_err *err);
/* Frees the scheduler. Items still queued or running are forgotten (their data is the
 * caller's). NULL: no-op. */
void rtx_sched_free(struct rtx_sched *s);

/* Changes a live scheduler's lane settings and knobs to cfg's (a SIGHUP that changed the
 * config file). cfg must pass rtx_sched_config_check, name the same lanes in the same order,
 * and keep the executors, max_running and cost_keys the scheduler was made with (they size
 * its storage, and its owner sets the first two). RTX_EINVAL names the difference or the bad
 * value; RTX_ENOMEM when a raised queue bound needs more item slots than there are. On error
 * the scheduler runs on as before. What a change means for the work already in it:
 * - max_queued: queued items stay, however many; a lower bound refuses new items until the
 *   lane drains below it. A higher one may allocate (storage grows and never shrinks).
 * - weight: future dispatches share by the new weights. Each lane's lead over the virtual
 *   time (what its last items were charged at the old weight) is rescaled by old / new
 *   weight, so no lane waits out a charge made at a weight it no longer has, and none gets a
 *   burst.
 * - target_p99_us: admission, pressure and brownout use it from now; a queued item without a
 *   deadline keeps its place (its arrival plus the target it was admitted under).
 * - on_timeout: applies as items are enqueued, dispatched or expired from now; items already
 *   moved behind everything stay there.
 * - preemptible, default_cost_us (items admitted from now), cost_ema_alpha (run times learned
 *   from now) and the brownout knobs take effect at once: the brownout level is kept and the
 *   next evaluation, within 1/8 of the shorter window, uses the new windows and pressures.
 * Allocates only to grow. Call it under the lock that serializes the scheduler's calls. */
int rtx_sched_reconfigure(struct rtx_sched *s, const struct rtx_sched_config *cfg, int64_t now_ns,
                          struct rtx_err *err);

/* The config the scheduler runs with (lanes in index order). */
const struct rtx_sched_config *rtx_sched_config(const struct rtx_sched *s);
/* A lane's index by name, or RTX_ENOTFOUND. */
int rtx_sched_lane_find(const struct rtx_sched *s, const char *name);
/* The lane for a KServe / Triton "priority" request parameter (lower is more urgent): 0 (not
 * given) gives default_lane, 1 the first lane, 2 the second, and a priority beyond the last
 * lane the last one. RTX_EINVAL for a negative priority or a default_lane that is no lane. */
int rtx_sched_lane_for_priority(const struct rtx_sched *s, int64_t priority, int default_lane);

/* A cost key for a graph or model id: 64-bit FNV-1a of the string, never 0. */
uint64_t rtx_sched_cost_key(const char *id);

struct rtx_sched_request {
    void *data;          /* the caller's item, given back by dispatch, expire and cancel */
    int lane;            /* lane index */
    int64_t deadline_ns; /* absolute, on the scheduler's clock; 0 = none */
    int64_t cost_ns;     /* the caller's estimate of its run time; 0 = learned by key.
                          * Estimates are capped at 2^38 ns (about 4.6 minutes) */
    uint64_t cost_key;   /* graph or model (rtx_sched_cost_key); 0 = none */
};

#define RTX_SCHED_REJECT_MAP(X)                                                                   \
    X(LANE_FULL, "lane_full", "the lane's queue is full")                                         \
    X(DEADLINE, "deadline", "the deadline cannot be met")                                         \
    X(SHED, "shed", "the lane is shed by brownout")                                               \
    X(FULL, "full", "every item slot is taken by running work")

enum rtx_sched_reject_reason {
#define RTX_SCHED_REJECT_ENUM(name, str, msg) RTX_SCHED_REJECT_##name,
    RTX_SCHED_REJECT_MAP(RTX_SCHED_REJECT_ENUM)
#undef RTX_SCHED_REJECT_ENUM
        RTX_SCHED_REJECT_COUNT
};
/* "lane_full", "deadline", "shed", "full"; "?" for another value. */
const char *rtx_sched_reject_name(enum rtx_sched_reject_reason r);

struct rtx_sched_reject {
    enum rtx_sched_reject_reason reason;
    int64_t retry_after_ns;    /* a hint: when a retry may be admitted, ns from now, >= 1 */
    int64_t est_completion_ns; /* DEADLINE: the estimated completion, absolute; else 0 */
    char msg[256];             /* names the lane and the figures; NUL-terminated */
};

/* Admits an item or refuses it at once. 0: queued, *handle (may be NULL) identifies it for
 * cancel and finish (never 0). RTX_EUNAVAILABLE: refused, *rej (may be NULL) says why, with a
 * retry-after hint; the caller answers RESOURCE_EXHAUSTED / HTTP 429. RTX_EINVAL: no such
 * lane or a negative cost. Refusals are, in order: the lane shed by brownout, the lane full,
 * no free item slot, and (lanes that reject on timeout, items with a deadline) an estimated
 * completion after the deadline. Never allocates. */
int rtx_sched_enqueue(struct rtx_sched *s, const struct rtx_sched_request *req, int64_t now_ns,
                      uint64_t *handle, struct rtx_sched_reject *rej);

enum rtx_sched_pick {
    RTX_SCHED_NONE = 0,    /* nothing queued */
    RTX_SCHED_RUN = 1,     /* run it, then call rtx_sched_finish with its handle */
    RTX_SCHED_EXPIRED = 2, /* its deadline passed before it ran: answer it; it is gone */
};

struct rtx_sched_item {
    void *data;
    uint64_t handle; /* RUN: for finish, cancel and requeue; EXPIRED: no longer valid */
    int lane;
    int64_t deadline_ns; /* as enqueued */
    int64_t cost_ns;     /* estimated cost used for admission and fair share */
    int64_t wait_ns;     /* from enqueue to now */
    bool late;           /* RUN: a delay-lane item whose deadline passed while queued */
};

/* Picks the next item: the lane with the smallest pass among lanes with queued items, and in
 * it the earliest deadline. An item whose deadline has passed is not run: in a rejecting lane
 * it is returned as RTX_SCHED_EXPIRED (counted; call dispatch again for the next one), in a
 * delaying lane it moves behind everything else. Items moved so run only when no lane has
 * queued work, oldest first. Returns RTX_SCHED_NONE when nothing is queued, or when
 * max_running items are dispatched and not finished. */
enum rtx_sched_pick rtx_sched_dispatch(struct rtx_sched *s, int64_t now_ns,
                                       struct rtx_sched_item *out);

/* Removes every queued item whose deadline has passed (a timer calls this so that expired
 * items are answered without waiting for a dispatch): up to cap of them go to out[] and are
 * counted as expired; the count is returned (call again while it returns cap). Items of
 * delaying lanes move behind everything else instead and are not returned. */
int rtx_sched_expire(struct rtx_sched *s, int64_t now_ns, struct rtx_sched_item *out, int cap);

/* Cancels an item. A queued item is removed and counted at once: *data (may be NULL) gets it
 * and *was_running false; the handle is then invalid. A running item is marked: *was_running
 * is true, the caller stops it (at its next op boundary) and calls rtx_sched_finish, which
 * counts it cancelled. RTX_ENOTFOUND for a handle that is not queued or running. */
int rtx_sched_cancel(struct rtx_sched *s, uint64_t handle, int64_t now_ns, void **data,
                     bool *was_running);

enum rtx_sched_outcome {
    RTX_SCHED_OK,        /* ran to the end: run_ns feeds the cost key's moving average */
    RTX_SCHED_FAILED,    /* ran and failed */
    RTX_SCHED_CANCELLED, /* stopped by a cancel */
};

/* Ends a dispatched item: counts it (completed, failed or cancelled; cancelled also when
 * rtx_sched_cancel marked it), learns run_ns (ns, > 0) for its cost key when it completed and
 * frees its slot; the handle is then invalid. RTX_ENOTFOUND for a handle that is not running,
 * RTX_EINVAL for outcome OK with run_ns <= 0. */
int rtx_sched_finish(struct rtx_sched *s, uint64_t handle, enum rtx_sched_outcome outcome,
                     int64_t run_ns, int64_t now_ns);

/* Puts a running item back into its lane's queue (it yielded at a batch boundary), keeping
 * its deadline; remaining_ns (> 0) is its cost from here. Counted as preempted. RTX_ENOTFOUND
 * for a handle that is not running, RTX_ECANCELED when it was cancelled (finish it instead). */
int rtx_sched_requeue(struct rtx_sched *s, uint64_t handle, int64_t remaining_ns, int64_t now_ns);

/* Whether the running item should yield at its next batch boundary: its lane is preemptible,
 * every executor is busy and a higher lane has queued work. false for an unknown handle. */
bool rtx_sched_preempt_wanted(const struct rtx_sched *s, uint64_t handle);

/* Re-evaluates brownout (enqueue and dispatch also do, at most every 1/8 of the shorter
 * window); call it from a timer so that brownout ends while no request comes. */
void rtx_sched_tick(struct rtx_sched *s, int64_t now_ns);

/* The factor batchers multiply their batching delays with: 1.0 outside brownout, the
 * config's delay factor to the power of the number of shed lanes in it. */
double rtx_sched_batch_delay_factor(const struct rtx_sched *s);

/* ------------------------------------------------------------------------------------------
 * Learned costs (the store keeps them across restarts)
 * ---------------------------------------------------------------------------------------- */

/* The moving average for a key: 0 and *ema_ns, *samples, or RTX_ENOTFOUND. */
int rtx_sched_cost_get(const struct rtx_sched *s, uint64_t key, int64_t *ema_ns, int64_t *samples);
/* Puts a saved average (at start, from the store). RTX_EINVAL for key 0 or ema_ns <= 0,
 * RTX_ELIMIT when the table holds cost_keys keys already. Replaces an existing entry. */
int rtx_sched_cost_load(struct rtx_sched *s, uint64_t key, int64_t ema_ns, int64_t samples,
                        struct rtx_err *err);
/* Calls fn for every key in the table (in no particular order) and stops at the first nonzero
 * return, which it returns; 0 when every call returned 0. fn must not call into s. */
typedef int (*rtx_sched_cost_fn)(void *ctx, uint64_t key, int64_t ema_ns, int64_t samples);
int rtx_sched_cost_save(const struct rtx_sched *s, rtx_sched_cost_fn fn, void *ctx);

/* ------------------------------------------------------------------------------------------
 * Statistics (rtxctl lanes, /metrics)
 * ---------------------------------------------------------------------------------------- */

/* Per-lane counters since start, in table order. */
#define RTX_SCHED_COUNTER_MAP(X)                                                                  \
    X(ADMITTED, "admitted")                   /* enqueued */                                      \
    X(REJECTED_FULL, "rejected_full")         /* refused: lane full or no slot */                 \
    X(REJECTED_DEADLINE, "rejected_deadline") /* refused: deadline cannot be met */               \
    X(SHED, "shed")                           /* refused: lane shed by brownout */                \
    X(EXPIRED, "expired")                     /* dropped: deadline passed while queued */         \
    X(DELAYED, "delayed")                     /* moved behind everything: deadline passed */      \
    X(DISPATCHED, "dispatched")               /* handed out to run */                             \
    X(COMPLETED, "completed")                 /* finished OK */                                   \
    X(FAILED, "failed")                       /* finished with an error */                        \
    X(CANCELLED, "cancelled")                 /* cancelled queued or running */                   \
    X(PREEMPTED, "preempted")                 /* requeued at a batch boundary */

enum rtx_sched_counter {
#define RTX_SCHED_COUNTER_ENUM(name, str) RTX_SCHED_CTR_##name,
    RTX_SCHED_COUNTER_MAP(RTX_SCHED_COUNTER_ENUM)
#undef RTX_SCHED_COUNTER_ENUM
        RTX_SCHED_CTR_COUNT
};
/* "admitted", ...; "?" for another value. */
const char *rtx_sched_counter_name(enum rtx_sched_counter c);

struct rtx_sched_lane_stats {
    struct rtx_sched_lane_config config;
    int64_t queued;         /* items waiting in the lane's queue */
    int64_t delayed;        /* items waiting behind everything (deadline passed) */
    int64_t running;        /* items dispatched and not finished */
    int64_t queued_work_ns; /* estimated cost of the queued items, ns */
    int64_t est_delay_ns;   /* estimated queueing delay of an item arriving now, ns */
    double pressure;        /* est_delay_ns / target */
    bool shed;              /* refused by brownout now */
    int64_t counters[RTX_SCHED_CTR_COUNT];
    /* wait (enqueue to dispatch) of dispatched items since start, ns; bucket upper bounds of
     * a log histogram (8 buckets per power of two: within 12.5%), 0 when none */
    int64_t wait_samples;
    int64_t wait_p50_ns, wait_p90_ns, wait_p99_ns, wait_max_ns;
};

struct rtx_sched_stats {
    int n_lanes;
    struct rtx_sched_lane_stats lanes[RTX_SCHED_MAX_LANES];
    int executors;
    int64_t running;          /* items dispatched and not finished, all lanes */
    int brownout_level;       /* lanes shed now, 0 = not in brownout */
    int64_t brownout_entries; /* times brownout began (level 0 -> 1) */
    int64_t brownout_exits;   /* times it ended (level 1 -> 0) */
    double batch_delay_factor;
    int64_t cost_keys;         /* keys in the cost table */
    int64_t cost_keys_dropped; /* run times not learned: the table was full */
};

/* A snapshot; also re-evaluates brownout at now_ns (like rtx_sched_tick). */
void rtx_sched_get_stats(struct rtx_sched *s, int64_t now_ns, struct rtx_sched_stats *st);

#endif /* RTX_SCHEDULER_SCHED_H */
