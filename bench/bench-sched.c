/*
 * bench-sched.c - the SLA scheduler (scheduler/sched.h): its cost per request, counted in
 * instructions under valgrind's callgrind, and its goodput under 2x overload against the
 * simple queues a reader would put in its place, all on a simulated clock. Judged targets.
 *
 * DESIGN
 * Cost: "pairs N" fills a scheduler with 10,000 queued requests spread over three lanes, then
 * runs N rounds of enqueue + dispatch + finish (every request a real admission decision with
 * learned costs, the queue staying at 10,000) inside run_pairs(). "callgrind" runs "pairs"
 * twice under valgrind with --toggle-collect=run_pairs, for N1 and N2 rounds, and prints
 * (I(N2) - I(N1)) / (N2 - N1): the instructions of one round, with setup and any fixed cost
 * cancelled out. The requests are generated before run_pairs, so their generation is not
 * counted. Target: < 2,000 instructions per round.
 *
 * Goodput: a discrete-event simulation of 4 executors fed by two Poisson streams, realtime
 * (1-3 ms of work, deadline 50 ms) at 60% of capacity and batch (10-30 ms, deadline 2 s) at
 * 140%: 2x overload. Goodput is the number of requests answered within their deadline per
 * simulated second; the realtime SLO attainment is the share of realtime requests so
 * answered (refusals and drops count as misses). The same arrivals (same seed, same run
 * times, executors and event order) go to each side:
 *   scheduler            rtxd's scheduler with its default lanes (realtime weight 8, batch
 *                        weight 1, each lane bounded, rejecting), costs learned per class
 *                        from completions; admission control refuses what cannot finish in
 *                        time, expired items are dropped at dispatch;
 *   FIFO                 one queue in arrival order, bounded at the sum of the two lanes'
 *                        bounds; beyond it a request is refused;
 *   FIFO dropping expired the same, but a request whose deadline passed before it starts is
 *                        dropped instead of run;
 *   strict priority      a realtime queue always served before a batch queue (no admission
 *                        control), each bounded at its lane's bound;
 *   strict priority dropping expired  the same, dropping as the dropping FIFO does - the
 *                        strongest of these simple baselines.
 * No side preempts running work, and no baseline knows run times (none could: they are what
 * a request takes, not what it says). Each baseline is judged: the scheduler's goodput >= the
 * baseline's (ratio >= 1.00, --target-goodput sets another ratio) and the scheduler's realtime
 * SLO >= 99%.
 *
 * Handicaps, for tests that the verdict can fail: --handicap-sched F runs every request F
 * times slower on the scheduler's executors, --handicap-baseline F on every baseline's.
 *
 * Usage: rtx-bench-sched [--report] [--handicap-sched F] [--handicap-baseline F]
 *                        [--target-goodput X] [all | callgrind [N1 N2] | goodput [SECONDS] |
 *                        pairs N]
 * --report (or RTX_BENCH_REPORT=1 in the environment) prints the verdicts without judging.
 * Exit status: 0 when every judged target is met (or --report); 1 when one is missed or a
 * case fails to run (also with --report); 2 for bad arguments.
 */
#include <assert.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench-util.h"
#include "scheduler/sched.h"

#define MS 1000000LL
#define SEC 1000000000LL
#define QUEUED 10000
#define N_KEYS 64
#define TARGET_INSTRUCTIONS 2000 /* per enqueue + dispatch + finish, fewer */
#define TARGET_SLO 99.0          /* % of realtime requests answered in time, at least */

/* The options of a run. */
struct opts {
    bool report;           /* print verdicts, do not judge */
    double handicap_sched; /* run-time factor on the scheduler's executors, >= 1 */
    double handicap_base;  /* run-time factor on every baseline's executors, >= 1 */
    double target_goodput; /* scheduler goodput / baseline goodput, at least */
};

/* The verdict word: met, MISSED, or either marked as not judged under --report. */
static const char *verdict(const struct opts *o, bool met) {
    if (o->report)
        return met ? "met (report only, not judged)" : "MISSED (report only, not judged)";
    return met ? "met" : "MISSED";
}

/* runtime's xorshift64* (rtx_rng_next), its state set directly so the streams stay fixed */
static struct rtx_rng rng = {.s = 0x9e3779b97f4a7c15ULL};

static uint64_t rng_next(void) {
    return rtx_rng_next(&rng);
}

/* Uniform in [0, 1). */
static double rng_unit(void) {
    return (double)(rng_next() >> 11) / 9007199254740992.0;
}

/* ------------------------------------------------------------------------------------------
 * Cost per enqueue + dispatch
 * ---------------------------------------------------------------------------------------- */

struct pair_req {
    struct rtx_sched_request req;
    int64_t run_ns;
};

static struct rtx_sched *pairs_setup(struct pair_req **reqs, long n, int64_t *now) {
    struct rtx_sched_config cfg;
    rtx_sched_config_init(&cfg);
    for (int l = 0; l < cfg.n_lanes; l++)
        cfg.lanes[l].max_queued = 2 * QUEUED;
    cfg.executors = 4;
    struct rtx_err err = {0};
    struct rtx_sched *s = NULL;
    *now = 1000 * SEC;
    if (rtx_sched_new(&cfg, *now, &s, &err)) {
        fprintf(stderr, "bench-sched: %s\n", err.msg);
        exit(1);
    }
    for (int k = 0; k < N_KEYS; k++)
        rtx_sched_cost_load(s, (uint64_t)k + 1, (1 + k % 8) * MS / 4, 10, NULL);
    *reqs = calloc((size_t)(n + QUEUED), sizeof **reqs);
    if (!*reqs) {
        fprintf(stderr, "bench-sched: out of memory\n");
        exit(1);
    }
    for (long i = 0; i < n + QUEUED; i++) {
        struct pair_req *r = &(*reqs)[i];
        r->req.lane = (int)(rng_next() % 3);
        r->req.cost_key = rng_next() % N_KEYS + 1;
        /* far deadlines: every request is admitted and none expires */
        int64_t spread = (int64_t)(rng_next() % (1000 * SEC));
        r->req.deadline_ns = r->req.lane == 2 ? 0 : *now + 10000 * SEC + spread;
        r->run_ns = (int64_t)(rng_next() % (2 * MS)) + 1;
    }
    for (long i = 0; i < QUEUED; i++) {
        if (rtx_sched_enqueue(s, &(*reqs)[i].req, *now, NULL, NULL)) {
            fprintf(stderr, "bench-sched: setup enqueue %ld refused\n", i);
            exit(1);
        }
    }
    return s;
}

/* The measured loop: one enqueue, one dispatch and one finish per round. */
__attribute__((noinline)) static long run_pairs(struct rtx_sched *s, const struct pair_req *reqs,
                                                long n, int64_t now) {
    long ran = 0;
    struct rtx_sched_item it;
    for (long i = 0; i < n; i++) {
        now += 1000;
        if (rtx_sched_enqueue(s, &reqs[i].req, now, NULL, NULL)) continue;
        if (rtx_sched_dispatch(s, now, &it) != RTX_SCHED_RUN) continue;
        rtx_sched_finish(s, it.handle, RTX_SCHED_OK, reqs[i].run_ns, now);
        ran++;
    }
    return ran;
}

static int cmd_pairs(long n) {
    struct pair_req *reqs;
    int64_t now;
    struct rtx_sched *s = pairs_setup(&reqs, n, &now);
    long ran = run_pairs(s, reqs + QUEUED, n, now);
    struct rtx_sched_stats st;
    rtx_sched_get_stats(s, now + n * 1000, &st);
    int64_t queued = 0;
    for (int l = 0; l < st.n_lanes; l++)
        queued += st.lanes[l].queued;
    printf("pairs: %ld of %ld rounds ran, %" PRId64 " queued at the end\n", ran, n, queued);
    rtx_sched_free(s);
    free(reqs);
    return ran == n ? 0 : 1;
}

/* Instructions counted by callgrind in run_pairs for n rounds, or -1. */
static double callgrind_count(const char *self, long n) {
    char out[64], cmd[1024];
    snprintf(out, sizeof out, "/tmp/rtx-bench-sched.%d.%ld.cg", (int)getpid(), n);
    snprintf(cmd, sizeof cmd,
             "valgrind --tool=callgrind --callgrind-out-file=%s --toggle-collect=run_pairs "
             "%s pairs %ld >/dev/null 2>&1",
             out, self, n);
    if (system(cmd) != 0) {
        fprintf(stderr, "bench-sched: \"%s\" failed (is valgrind installed?)\n", cmd);
        return -1;
    }
    FILE *f = fopen(out, "r");
    if (!f) {
        fprintf(stderr, "bench-sched: no callgrind output %s\n", out);
        return -1;
    }
    char line[512];
    double total = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "summary:", 8) == 0 || strncmp(line, "totals:", 7) == 0)
            total = strtod(line + (line[0] == 's' ? 8 : 7), NULL);
    fclose(f);
    unlink(out);
    if (total < 0) fprintf(stderr, "bench-sched: no totals in %s\n", out);
    return total;
}

static int cmd_callgrind(const char *self, long n1, long n2, const struct opts *o) {
    printf("scheduling cost: rtx_sched_enqueue + rtx_sched_dispatch + rtx_sched_finish, %d "
           "queued over 3 lanes, instructions counted by valgrind's callgrind\n",
           QUEUED);
    double i1 = callgrind_count(self, n1), i2 = callgrind_count(self, n2);
    if (i1 < 0 || i2 < 0) {
        printf("verdict: scheduling cost < %d instructions: FAILED to run\n", TARGET_INSTRUCTIONS);
        return 1;
    }
    double per = (i2 - i1) / (double)(n2 - n1);
    printf("  %.0f instructions per round (callgrind: %.0f for %ld rounds, %.0f for %ld)\n", per,
           i1, n1, i2, n2);
    bool met = per < TARGET_INSTRUCTIONS;
    printf("verdict: scheduling cost %.0f instructions per round, target < %d: %s\n", per,
           TARGET_INSTRUCTIONS, verdict(o, met));
    return o->report || met ? 0 : 1;
}

/* ------------------------------------------------------------------------------------------
 * Goodput under 2x overload
 * ---------------------------------------------------------------------------------------- */

#define EXECUTORS 4
#define RT_DEADLINE (50 * MS)
#define BATCH_DEADLINE (2 * SEC)

struct sim_req {
    int64_t arrival_ns, deadline_ns, run_ns;
    int cls; /* 0 realtime, 1 batch */
};

/* Both Poisson streams merged in arrival order, for `seconds` of simulated time. */
static struct sim_req *make_arrivals(double seconds, long *n_out) {
    double cap = EXECUTORS;                                  /* executor-seconds per second */
    double rate[2] = {0.6 * cap / 0.002, 1.4 * cap / 0.020}; /* requests per second */
    long n = 0, room = (long)(seconds * (rate[0] + rate[1]) * 1.2) + 16;
    struct sim_req *r = malloc(sizeof *r * (size_t)room);
    if (!r) return NULL;
    double next[2] = {0, 0};
    for (int c = 0; c < 2; c++)
        next[c] = -log(1 - rng_unit()) / rate[c];
    for (;;) {
        int c = next[0] <= next[1] ? 0 : 1;
        if (next[c] >= seconds || n == room) break;
        struct sim_req *q = &r[n++];
        q->cls = c;
        q->arrival_ns = (int64_t)(next[c] * 1e9);
        q->run_ns =
            c == 0 ? (int64_t)((1 + 2 * rng_unit()) * MS) : (int64_t)((10 + 20 * rng_unit()) * MS);
        q->deadline_ns = q->arrival_ns + (c == 0 ? RT_DEADLINE : BATCH_DEADLINE);
        next[c] += -log(1 - rng_unit()) / rate[c];
    }
    *n_out = n;
    return r;
}

/* What one side did with the arrivals. */
struct outcome {
    long arrived[2], good[2], refused[2], expired[2], late[2];
    int64_t *rt_latency; /* realtime answers (run to the end): arrival to answer, ns */
    long n_rt_latency;
    int64_t answered_ns;  /* when the last answer went out */
    int64_t busy_ns;      /* executor time spent running requests, ns */
    int64_t good_work_ns; /* ... of which on requests answered in time, ns */
    int brownouts;        /* the scheduler: times brownout began */
};

static int outcome_init(struct outcome *o, long n) {
    memset(o, 0, sizeof *o);
    o->rt_latency = malloc(sizeof *o->rt_latency * (size_t)(n ? n : 1));
    return o->rt_latency ? 0 : -1;
}

static double outcome_goodput(const struct outcome *o, double seconds) {
    return (double)(o->good[0] + o->good[1]) / seconds;
}

/* Realtime SLO attainment, %. */
static double outcome_slo(const struct outcome *o) {
    return o->arrived[0] ? 100.0 * (double)o->good[0] / (double)o->arrived[0] : 0.0;
}

struct executor {
    int64_t end_ns, run_ns;
    const struct sim_req *req;
    uint64_t handle;
};

/* Executor x answers its request at `at`. */
static void answer(struct outcome *o, const struct executor *x, int64_t at) {
    const struct sim_req *q = x->req;
    if (q->cls == 0) o->rt_latency[o->n_rt_latency++] = at - q->arrival_ns;
    o->busy_ns += x->run_ns;
    if (at <= q->deadline_ns) {
        o->good[q->cls]++;
        o->good_work_ns += x->run_ns;
    } else {
        o->late[q->cls]++;
    }
    if (at > o->answered_ns) o->answered_ns = at;
}

/* The next executor to finish, or -1 when all are idle. */
static int next_done(const struct executor *ex) {
    int best = -1;
    for (int e = 0; e < EXECUTORS; e++)
        if (ex[e].req && (best < 0 || ex[e].end_ns < ex[best].end_ns)) best = e;
    return best;
}

/* Starts q on executor x at now; `slow` is the side's run-time factor. */
static void start(struct executor *x, const struct sim_req *q, int64_t now, double slow) {
    x->req = q;
    x->run_ns = slow == 1.0 ? q->run_ns : (int64_t)((double)q->run_ns * slow);
    if (x->run_ns < 1) x->run_ns = 1;
    x->end_ns = now + x->run_ns;
}

/* The event order every side shares: whether the next event is request i's arrival (true)
 * or executor e's completion (false); a completion at the same instant goes first. */
static bool arrival_next(const struct sim_req *reqs, long i, long n, const struct executor *ex,
                         int e) {
    return i < n && (e < 0 || reqs[i].arrival_ns < ex[e].end_ns);
}

static int sim_scheduler(const struct sim_req *reqs, long n, double slow, struct outcome *o) {
    struct rtx_sched_config cfg;
    rtx_sched_config_init(&cfg);
    cfg.executors = EXECUTORS;
    struct rtx_err err = {0};
    struct rtx_sched *s = NULL;
    if (rtx_sched_new(&cfg, 0, &s, &err)) {
        fprintf(stderr, "bench-sched: %s\n", err.msg);
        return 1;
    }
    int lane[2] = {rtx_sched_lane_find(s, "realtime"), rtx_sched_lane_find(s, "batch")};
    uint64_t key[2] = {rtx_sched_cost_key("realtime-model"), rtx_sched_cost_key("batch-graph")};
    struct executor ex[EXECUTORS] = {{0}};
    long i = 0;
    for (;;) {
        int e = next_done(ex);
        int64_t now;
        if (arrival_next(reqs, i, n, ex, e)) {
            const struct sim_req *q = &reqs[i++];
            now = q->arrival_ns;
            o->arrived[q->cls]++;
            struct rtx_sched_request r = {.data = (void *)q,
                                          .lane = lane[q->cls],
                                          .deadline_ns = q->deadline_ns,
                                          .cost_key = key[q->cls]};
            if (rtx_sched_enqueue(s, &r, now, NULL, NULL)) {
                o->refused[q->cls]++;
                if (now > o->answered_ns) o->answered_ns = now;
            }
        } else if (e >= 0) {
            now = ex[e].end_ns;
            rtx_sched_finish(s, ex[e].handle, RTX_SCHED_OK, ex[e].run_ns, now);
            answer(o, &ex[e], now);
            ex[e].req = NULL;
        } else {
            break;
        }
        for (int f = 0; f < EXECUTORS; f++) {
            if (ex[f].req) continue;
            struct rtx_sched_item it;
            enum rtx_sched_pick p;
            while ((p = rtx_sched_dispatch(s, now, &it)) == RTX_SCHED_EXPIRED) {
                const struct sim_req *q = it.data;
                o->expired[q->cls]++;
            }
            if (p == RTX_SCHED_NONE) break;
            start(&ex[f], it.data, now, slow);
            ex[f].handle = it.handle;
        }
    }
    struct rtx_sched_stats st;
    rtx_sched_get_stats(s, o->answered_ns, &st);
    o->brownouts = (int)st.brownout_entries;
    rtx_sched_free(s);
    return 0;
}

/* A bounded ring of waiting requests. */
struct ring {
    const struct sim_req **v;
    long cap, head, len;
};

static bool ring_push(struct ring *r, const struct sim_req *q) {
    if (r->len == r->cap) return false;
    r->v[(r->head + r->len++) % r->cap] = q;
    return true;
}

static const struct sim_req *ring_pop(struct ring *r) {
    const struct sim_req *q = r->v[r->head];
    r->head = (r->head + 1) % r->cap;
    r->len--;
    return q;
}

/* A simple queue without admission control. strict_priority false: one FIFO in arrival
 * order bounded at bound[0] + bound[1]; true: realtime (class 0) always before batch, each
 * class in its own FIFO bounded at bound[class]. A request that finds its queue full is
 * refused. drop_expired: a request whose deadline passed before it would start is dropped
 * (counted expired) instead of run. slow: the run-time factor of the side's executors. */
static int sim_queue(const struct sim_req *reqs, long n, bool strict_priority, const long bound[2],
                     bool drop_expired, double slow, struct outcome *o) {
    struct ring q[2] = {{0}};
    int n_rings = strict_priority ? 2 : 1;
    for (int c = 0; c < n_rings; c++) {
        q[c].cap = strict_priority ? bound[c] : bound[0] + bound[1];
        q[c].v = malloc(sizeof *q[c].v * (size_t)q[c].cap);
        if (!q[c].v) {
            free(q[0].v);
            return 1;
        }
    }
    struct executor ex[EXECUTORS] = {{0}};
    long i = 0;
    for (;;) {
        int e = next_done(ex);
        int64_t now;
        if (arrival_next(reqs, i, n, ex, e)) {
            const struct sim_req *r = &reqs[i++];
            now = r->arrival_ns;
            o->arrived[r->cls]++;
            if (!ring_push(&q[strict_priority ? r->cls : 0], r)) o->refused[r->cls]++;
        } else if (e >= 0) {
            now = ex[e].end_ns;
            answer(o, &ex[e], now);
            ex[e].req = NULL;
        } else {
            break;
        }
        for (int f = 0; f < EXECUTORS; f++) {
            if (ex[f].req) continue;
            const struct sim_req *r = NULL;
            while (!r) {
                struct ring *from = q[0].len > 0                  ? &q[0]
                                    : n_rings > 1 && q[1].len > 0 ? &q[1]
                                                                  : NULL;
                if (!from) break;
                r = ring_pop(from);
                if (drop_expired && r->deadline_ns <= now) {
                    o->expired[r->cls]++;
                    r = NULL;
                }
            }
            if (!r) break;
            start(&ex[f], r, now, slow);
        }
    }
    for (int c = 0; c < n_rings; c++)
        free(q[c].v);
    return 0;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The p-th percentile (0..100) of the realtime latencies, ms; NAN when none. Sorts them. */
static double rt_latency_ms(struct outcome *o, double p) {
    if (o->n_rt_latency == 0) return NAN;
    qsort(o->rt_latency, (size_t)o->n_rt_latency, sizeof *o->rt_latency, cmp_i64);
    long k = (long)ceil(p / 100.0 * (double)o->n_rt_latency) - 1;
    if (k < 0) k = 0;
    return (double)o->rt_latency[k] / 1e6;
}

enum side { SIDE_SCHED, SIDE_FIFO, SIDE_FIFO_DROP, SIDE_PRIO, SIDE_PRIO_DROP, SIDE_COUNT };
static const char *const side_names[] = {
    "scheduler (rtxd)",
    "FIFO",
    "FIFO dropping expired",
    "strict priority",
    "strict priority dropping expired",
};
static_assert(sizeof side_names / sizeof side_names[0] == SIDE_COUNT, "side_names");

static void print_lane(const struct rtx_sched_lane_config *l) {
    printf("    lane %-11s target %.0f ms, weight %d, %" PRId64 " queued at most, %s\n", l->name,
           (double)l->target_ns / 1e6, l->weight, l->max_queued,
           rtx_sched_timeout_name(l->on_timeout));
}

static int cmd_goodput(double seconds, const struct opts *op) {
    long n = 0;
    rng.s = 0x2545f4914f6cdd1dULL;
    struct sim_req *reqs = make_arrivals(seconds, &n);
    if (!reqs) {
        fprintf(stderr, "bench-sched: out of memory\n");
        return 1;
    }
    struct rtx_sched_config cfg;
    rtx_sched_config_init(&cfg);
    long bound[2] = {0, 0};
    for (int l = 0; l < cfg.n_lanes; l++) {
        if (strcmp(cfg.lanes[l].name, "realtime") == 0) bound[0] = cfg.lanes[l].max_queued;
        if (strcmp(cfg.lanes[l].name, "batch") == 0) bound[1] = cfg.lanes[l].max_queued;
    }
    struct outcome o[SIDE_COUNT];
    int rc = 0;
    for (int k = 0; k < SIDE_COUNT; k++)
        if (outcome_init(&o[k], n)) rc = 1;
    if (!rc) rc = sim_scheduler(reqs, n, op->handicap_sched, &o[SIDE_SCHED]);
    if (!rc) rc = sim_queue(reqs, n, false, bound, false, op->handicap_base, &o[SIDE_FIFO]);
    if (!rc) rc = sim_queue(reqs, n, false, bound, true, op->handicap_base, &o[SIDE_FIFO_DROP]);
    if (!rc) rc = sim_queue(reqs, n, true, bound, false, op->handicap_base, &o[SIDE_PRIO]);
    if (!rc) rc = sim_queue(reqs, n, true, bound, true, op->handicap_base, &o[SIDE_PRIO_DROP]);
    free(reqs);
    if (rc) {
        fprintf(stderr, "bench-sched: out of memory\n");
        printf("verdict: goodput: FAILED to run\n");
        for (int k = 0; k < SIDE_COUNT; k++)
            free(o[k].rt_latency);
        return 1;
    }

    printf("goodput under 2x overload: %d executors, %.0f s simulated, %ld requests "
           "(realtime 1-3 ms, deadline 50 ms, 60%% of capacity; batch 10-30 ms, deadline 2 s, "
           "140%%); the same arrivals for every side\n",
           EXECUTORS, seconds, n);
    printf("  scheduler: rtx_sched, default lanes, %d executors, costs learned per class:\n",
           EXECUTORS);
    for (int l = 0; l < cfg.n_lanes; l++)
        print_lane(&cfg.lanes[l]);
    printf("  baselines: no admission control, no run-time knowledge; FIFO bounded at %ld "
           "(realtime + batch lane bounds), strict priority at %ld realtime and %ld batch\n",
           bound[0] + bound[1], bound[0], bound[1]);
    if (op->handicap_sched != 1.0 || op->handicap_base != 1.0)
        printf("  HANDICAPS: scheduler's executors %.3gx slower, baselines' %.3gx slower\n",
               op->handicap_sched, op->handicap_base);
    printf("  %-33s %9s %8s %7s %7s %7s | %-28s | %s\n", "side", "goodput/s", "rt SLO %", "rt p50",
           "rt p99", "useful", "realtime good/refus/exp/late", "batch good/refus/exp/late");
    for (int k = 0; k < SIDE_COUNT; k++) {
        struct outcome *x = &o[k];
        char rt[64];
        snprintf(rt, sizeof rt, "%ld/%ld/%ld/%ld", x->good[0], x->refused[0], x->expired[0],
                 x->late[0]);
        double p50 = rt_latency_ms(x, 50), p99 = rt_latency_ms(x, 99);
        double useful = x->busy_ns ? 100.0 * (double)x->good_work_ns / (double)x->busy_ns : 0.0;
        printf("  %-33s %9.1f %8.2f %7.1f %7.1f %6.1f%% | %-28s | %ld/%ld/%ld/%ld\n",
               side_names[k], outcome_goodput(x, seconds), outcome_slo(x), p50, p99, useful, rt,
               x->good[1], x->refused[1], x->expired[1], x->late[1]);
    }
    printf("  (rt p50/p99: realtime latency of the answered requests, arrival to answer, ms; "
           "useful: share of the executors' busy time spent on requests answered in time; "
           "scheduler brownouts: %d)\n",
           o[SIDE_SCHED].brownouts);

    double g = outcome_goodput(&o[SIDE_SCHED], seconds), slo = outcome_slo(&o[SIDE_SCHED]);
    bool all_met = true;
    for (int k = SIDE_FIFO; k < SIDE_COUNT; k++) {
        double gb = outcome_goodput(&o[k], seconds);
        double ratio = gb > 0 ? g / gb : g > 0 ? INFINITY : 0;
        bool met = ratio >= op->target_goodput && slo >= TARGET_SLO;
        all_met = all_met && met;
        printf("verdict: scheduler vs %s: goodput %.1f/s vs %.1f/s = %.2fx (target >= %.2fx), "
               "realtime SLO %.2f%% vs %.2f%% (target >= %.0f%%): %s\n",
               side_names[k], g, gb, ratio, op->target_goodput, slo, outcome_slo(&o[k]),
               TARGET_SLO, verdict(op, met));
    }
    for (int k = 0; k < SIDE_COUNT; k++)
        free(o[k].rt_latency);
    return op->report || all_met ? 0 : 1;
}

/* A factor or ratio option's value: a number in (0, 1000]; exits 2 otherwise. */
static double opt_number(const char *name, const char *v) {
    char *end;
    double x = v ? strtod(v, &end) : 0;
    if (!v || *end || !(x > 0) || x > 1000) {
        fprintf(stderr, "bench-sched: %s wants a number in (0, 1000]\n", name);
        exit(2);
    }
    return x;
}

static void usage(FILE *out) {
    fprintf(out, "usage: rtx-bench-sched [--report] [--handicap-sched F] [--handicap-baseline F]"
                 " [--target-goodput X]\n"
                 "                       [all | callgrind [N1 N2] | goodput [SECONDS] | pairs N]\n"
                 "  --report (or RTX_BENCH_REPORT=1): print verdicts without judging\n"
                 "  --handicap-sched F / --handicap-baseline F: that side's executors run F "
                 "times slower (tests)\n"
                 "  --target-goodput X: the goodput ratio each baseline is judged against "
                 "(default 1.00)\n");
}

int main(int argc, char **argv) {
    struct opts op = {.report = bench_report_only(argc, argv),
                      .handicap_sched = 1.0,
                      .handicap_base = 1.0,
                      .target_goodput = 1.0};
    char *pos[4];
    int n_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--report") == 0) {
            op.report = true;
        } else if (strcmp(argv[i], "--handicap-sched") == 0) {
            op.handicap_sched = opt_number(argv[i], v);
            i++;
        } else if (strcmp(argv[i], "--handicap-baseline") == 0) {
            op.handicap_base = opt_number(argv[i], v);
            i++;
        } else if (strcmp(argv[i], "--target-goodput") == 0) {
            op.target_goodput = opt_number(argv[i], v);
            i++;
        } else if (strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (argv[i][0] == '-' || n_pos == 4) {
            usage(stderr);
            return 2;
        } else {
            pos[n_pos++] = argv[i];
        }
    }
    const char *cmd = n_pos > 0 ? pos[0] : "all";
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        fprintf(stderr, "bench-sched: cannot read /proc/self/exe\n");
        return 1;
    }
    self[len] = '\0';
    if (strcmp(cmd, "pairs") == 0 && n_pos == 2) return cmd_pairs(atol(pos[1]));
    if (strcmp(cmd, "callgrind") == 0 && (n_pos == 1 || n_pos == 3)) {
        long n1 = n_pos == 3 ? atol(pos[1]) : 20000, n2 = n_pos == 3 ? atol(pos[2]) : 40000;
        if (n1 < 1 || n2 <= n1) {
            fprintf(stderr, "bench-sched: callgrind N1 N2 needs 0 < N1 < N2\n");
            return 2;
        }
        return cmd_callgrind(self, n1, n2, &op);
    }
    if (strcmp(cmd, "goodput") == 0 && n_pos <= 2) {
        double secs = n_pos == 2 ? atof(pos[1]) : 60;
        if (!(secs > 0)) {
            fprintf(stderr, "bench-sched: goodput SECONDS must be positive\n");
            return 2;
        }
        return cmd_goodput(secs, &op);
    }
    if (strcmp(cmd, "all") == 0 && n_pos <= 1) {
        int rc = cmd_goodput(60, &op);
        return cmd_callgrind(self, 20000, 40000, &op) || rc;
    }
    usage(stderr);
    return 2;
}
