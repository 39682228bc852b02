/*
 * bench-sched.c - the SLA scheduler (scheduler/sched.h): its cost per request, counted in
 * instructions under valgrind's callgrind, and its goodput under 2x overload against a plain
 * FIFO queue, both on a simulated clock.
 *
 * DESIGN
 * Cost: "pairs N" fills a scheduler with 10,000 queued requests spread over three lanes, then
 * runs N rounds of enqueue + dispatch + finish (every request a real admission decision with
 * learned costs, the queue staying at 10,000) inside run_pairs(). "callgrind" runs "pairs"
 * twice under valgrind with --toggle-collect=run_pairs, for N1 and N2 rounds, and prints
 * (I(N2) - I(N1)) / (N2 - N1): the instructions of one round, with setup and any fixed cost
 * cancelled out. The requests are generated before run_pairs, so their generation is not
 * counted.
 *
 * Goodput: a discrete-event simulation of 4 executors fed by two Poisson streams, realtime
 * (1-3 ms of work, deadline 50 ms) at 60% of capacity and batch (10-30 ms, deadline 2 s) at
 * 140%: 2x overload. The same arrivals (same seed, same run times) go to the scheduler (lanes
 * realtime weight 8 and batch weight 1, costs learned per class from completions) and to a
 * FIFO queue that runs everything in arrival order (bounded at the scheduler's total queue
 * bound; beyond it, a request is refused). A FIFO that drops requests whose deadline passed
 * before they started is printed too, as a stronger baseline. Goodput is the number of
 * requests answered within their deadline per simulated second; the realtime SLO attainment
 * is the share of realtime requests so answered (refusals count as misses).
 *
 * Usage: rtx-bench-sched [all | callgrind [N1 N2] | goodput [SECONDS] | pairs N]
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "scheduler/sched.h"

#define MS 1000000LL
#define SEC 1000000000LL
#define QUEUED 10000
#define N_KEYS 64

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

static int cmd_callgrind(const char *self, long n1, long n2) {
    double i1 = callgrind_count(self, n1), i2 = callgrind_count(self, n2);
    if (i1 < 0 || i2 < 0) return 1;
    double per = (i2 - i1) / (double)(n2 - n1);
    printf("scheduling cost: %.0f instructions per enqueue + dispatch + finish, %d queued "
           "(callgrind: %.0f for %ld rounds, %.0f for %ld; target < 2000)\n",
           per, QUEUED, i1, n1, i2, n2);
    return per < 2000 ? 0 : 1;
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

struct outcome {
    long arrived[2], good[2], refused[2], expired[2], late[2];
    int64_t *rt_latency; /* realtime answers (run to the end): arrival to answer, ns */
    long n_rt_latency;
    int64_t answered_ns; /* when the last answer went out */
    int brownouts;
};

struct executor {
    int64_t end_ns;
    const struct sim_req *req;
    uint64_t handle;
};

static void answer(struct outcome *o, const struct sim_req *q, int64_t at) {
    if (q->cls == 0 && o->rt_latency) o->rt_latency[o->n_rt_latency++] = at - q->arrival_ns;
    if (at <= q->deadline_ns)
        o->good[q->cls]++;
    else
        o->late[q->cls]++;
    if (at > o->answered_ns) o->answered_ns = at;
}

/* The next executor to finish, or -1 when all are idle. */
static int next_done(const struct executor *ex) {
    int best = -1;
    for (int e = 0; e < EXECUTORS; e++)
        if (ex[e].req && (best < 0 || ex[e].end_ns < ex[best].end_ns)) best = e;
    return best;
}

static int sim_scheduler(const struct sim_req *reqs, long n, struct outcome *o) {
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
    memset(o, 0, sizeof *o);
    o->rt_latency = malloc(sizeof *o->rt_latency * (size_t)(n ? n : 1));
    if (!o->rt_latency) {
        rtx_sched_free(s);
        return 1;
    }
    long i = 0;
    for (;;) {
        int e = next_done(ex);
        int64_t now;
        if (i < n && (e < 0 || reqs[i].arrival_ns < ex[e].end_ns)) {
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
            rtx_sched_finish(s, ex[e].handle, RTX_SCHED_OK, ex[e].req->run_ns, now);
            answer(o, ex[e].req, now);
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
            ex[f].req = it.data;
            ex[f].handle = it.handle;
            ex[f].end_ns = now + ex[f].req->run_ns;
        }
    }
    struct rtx_sched_stats st;
    rtx_sched_get_stats(s, o->answered_ns, &st);
    o->brownouts = (int)st.brownout_entries;
    rtx_sched_free(s);
    return 0;
}

/* FIFO: runs in arrival order; drop_expired drops a request whose deadline passed before it
 * would start. bound: requests waiting at most. */
static int sim_fifo(const struct sim_req *reqs, long n, long bound, bool drop_expired,
                    struct outcome *o) {
    const struct sim_req **queue = malloc(sizeof *queue * (size_t)bound);
    if (!queue) return 1;
    long head = 0, len = 0;
    struct executor ex[EXECUTORS] = {{0}};
    memset(o, 0, sizeof *o);
    long i = 0;
    for (;;) {
        int e = next_done(ex);
        int64_t now;
        if (i < n && (e < 0 || reqs[i].arrival_ns < ex[e].end_ns)) {
            const struct sim_req *q = &reqs[i++];
            now = q->arrival_ns;
            o->arrived[q->cls]++;
            if (len == bound) {
                o->refused[q->cls]++;
            } else {
                queue[(head + len) % bound] = q;
                len++;
            }
        } else if (e >= 0) {
            now = ex[e].end_ns;
            answer(o, ex[e].req, now);
            ex[e].req = NULL;
        } else {
            break;
        }
        for (int f = 0; f < EXECUTORS && len > 0; f++) {
            if (ex[f].req) continue;
            while (len > 0) {
                const struct sim_req *q = queue[head];
                head = (head + 1) % bound;
                len--;
                if (drop_expired && q->deadline_ns <= now) {
                    o->expired[q->cls]++;
                    continue;
                }
                ex[f].req = q;
                ex[f].end_ns = now + q->run_ns;
                break;
            }
        }
    }
    free(queue);
    return 0;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static void print_outcome(const char *name, const struct outcome *o, double seconds) {
    long arrived = o->arrived[0] + o->arrived[1], good = o->good[0] + o->good[1];
    printf("  %-22s goodput %7.1f/s  realtime SLO %6.2f%%  (realtime: %ld good, %ld refused, "
           "%ld expired, %ld late; batch: %ld good, %ld refused, %ld expired, %ld late; "
           "%ld arrived)\n",
           name, (double)good / seconds,
           o->arrived[0] ? 100.0 * (double)o->good[0] / (double)o->arrived[0] : 0.0, o->good[0],
           o->refused[0], o->expired[0], o->late[0], o->good[1], o->refused[1], o->expired[1],
           o->late[1], arrived);
}

static int cmd_goodput(double seconds) {
    long n = 0;
    rng.s = 0x2545f4914f6cdd1dULL;
    struct sim_req *reqs = make_arrivals(seconds, &n);
    if (!reqs) {
        fprintf(stderr, "bench-sched: out of memory\n");
        return 1;
    }
    struct rtx_sched_config cfg;
    rtx_sched_config_init(&cfg);
    long bound = 0;
    for (int l = 0; l < cfg.n_lanes; l++)
        bound += cfg.lanes[l].max_queued;
    struct outcome sched, fifo, fifo_drop;
    if (sim_scheduler(reqs, n, &sched) || sim_fifo(reqs, n, bound, false, &fifo) ||
        sim_fifo(reqs, n, bound, true, &fifo_drop)) {
        free(reqs);
        return 1;
    }
    printf("goodput under 2x overload: %d executors, %.0f s simulated, %ld requests "
           "(realtime 1-3 ms, deadline 50 ms, 60%% of capacity; batch 10-30 ms, deadline 2 s, "
           "140%%)\n",
           EXECUTORS, seconds, n);
    print_outcome("scheduler", &sched, seconds);
    print_outcome("FIFO", &fifo, seconds);
    print_outcome("FIFO dropping expired", &fifo_drop, seconds);
    double g = (double)(sched.good[0] + sched.good[1]);
    double gf = (double)(fifo.good[0] + fifo.good[1]);
    double gd = (double)(fifo_drop.good[0] + fifo_drop.good[1]);
    double slo = 100.0 * (double)sched.good[0] / (double)(sched.arrived[0] ? sched.arrived[0] : 1);
    if (sched.n_rt_latency > 0) {
        qsort(sched.rt_latency, (size_t)sched.n_rt_latency, sizeof *sched.rt_latency, cmp_i64);
        int64_t p99 = sched.rt_latency[(long)ceil(0.99 * (double)sched.n_rt_latency) - 1];
        int64_t p50 = sched.rt_latency[(sched.n_rt_latency - 1) / 2];
        printf("  scheduler realtime latency (arrival to answer): p50 %.2f ms, p99 %.2f ms, "
               "max %.2f ms (deadline %.0f ms)\n",
               (double)p50 / 1e6, (double)p99 / 1e6,
               (double)sched.rt_latency[sched.n_rt_latency - 1] / 1e6, (double)RT_DEADLINE / 1e6);
    }
    free(sched.rt_latency);
    printf("  goodput ratio: %.2fx FIFO (target >= 1.5x), %.2fx FIFO dropping expired; "
           "realtime SLO %.2f%% (target >= 99%%); brownouts %d\n",
           gf > 0 ? g / gf : INFINITY, gd > 0 ? g / gd : INFINITY, slo, sched.brownouts);
    free(reqs);
    return gf > 0 && g / gf >= 1.5 && slo >= 99.0 ? 0 : 1;
}

int main(int argc, char **argv) {
    const char *cmd = argc > 1 ? argv[1] : "all";
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        fprintf(stderr, "bench-sched: cannot read /proc/self/exe\n");
        return 1;
    }
    self[len] = '\0';
    if (strcmp(cmd, "pairs") == 0 && argc == 3) return cmd_pairs(atol(argv[2]));
    if (strcmp(cmd, "callgrind") == 0 && (argc == 2 || argc == 4)) {
        long n1 = argc == 4 ? atol(argv[2]) : 20000, n2 = argc == 4 ? atol(argv[3]) : 40000;
        if (n1 < 1 || n2 <= n1) {
            fprintf(stderr, "bench-sched: callgrind N1 N2 needs 0 < N1 < N2\n");
            return 2;
        }
        return cmd_callgrind(self, n1, n2);
    }
    if (strcmp(cmd, "goodput") == 0 && argc <= 3) {
        double secs = argc == 3 ? atof(argv[2]) : 60;
        if (!(secs > 0)) {
            fprintf(stderr, "bench-sched: goodput SECONDS must be positive\n");
            return 2;
        }
        return cmd_goodput(secs);
    }
    if (strcmp(cmd, "all") == 0 && argc <= 2) {
        int rc = cmd_goodput(60);
        return cmd_callgrind(self, 20000, 40000) || rc;
    }
    fprintf(stderr, "usage: rtx-bench-sched [all | callgrind [N1 N2] | goodput [SECONDS] | "
                    "pairs N]\n");
    return 2;
}
