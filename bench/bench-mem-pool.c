/*
 * bench-mem-pool.c - allocation throughput of the caching allocator (runtime/mem-pool.h) over
 * malloc, against malloc itself, on the CPU; a judged target.
 *
 * DESIGN
 * The raw allocator is a device interface over malloc/free, the same shape the CUDA glue
 * gives cudaMalloc/cudaFree. Both sides replay one pseudo-random trace: a working set of 256
 * slots, each step frees the slot's block if it holds one and otherwise allocates a size drawn
 * log-uniformly from 512 B .. 4 MiB on one of two streams, and touches its first byte. The
 * reference side ("malloc") calls the interface's alloc/free directly; the rtxd side ("pool")
 * goes through rtx_mem_pool_alloc/release, the pool drawing its segments from the same
 * interface.
 *
 * Like with like: both sides are warm - each replays the whole trace once before anything is
 * timed (the pool fills its cache; glibc raises its mmap and trim thresholds and keeps its
 * heap) - and every timed window replays the same trace, the same number of operations, on
 * each side. The windows alternate the sides and the order within a pair alternates too
 * (pool, malloc, malloc, pool, ...), so drift in the machine's load falls on both. Reported:
 * the median throughput of each side with its spread (min .. max over the windows), and the
 * ratio of the medians, with the per-window ratios' range.
 *
 * Target: the pool's median throughput >= 0.5x malloc's (judged; --report or
 * RTX_BENCH_REPORT=1 only reports). On the CPU the pool cannot win: glibc's warm malloc serves
 * this trace from its bins in 130-180 ns per operation, and the pool does the same best-fit
 * work behind a mutex plus its statistics. What it buys is on the GPU, where
 * cudaMalloc/cudaFree cost microseconds to milliseconds and synchronize the device
 * (bench-gpu.c measures that). The target bounds the price of the pool's bookkeeping on top
 * of a cheap allocator: half of malloc's throughput keeps the pool within twice malloc's
 * cost, a few tenths of a microsecond per operation on this trace, negligible next to any
 * kernel launch. Measured 0.63-0.70x on the 2-core development machine (docs/benchmarks.md),
 * so the target is not a formality either: a pool that doubled its per-operation cost would
 * miss it.
 *
 * Delay knobs (for tests that the verdict can fail): RTX_BENCH_DELAY_US adds a busy wait of
 * that many microseconds to every operation of the rtxd side (the pool), RTX_BENCH_REF_DELAY_US
 * to every operation of the reference side (malloc).
 *
 * Usage: rtx-bench-mem-pool [--report] [--windows W] [OPS]   (OPS per window, default 500000;
 * W windows per side, default 5). Exit status: 0 when the target is met or --report; 1 when
 * it is missed or a run fails; 2 for bad arguments.
 */
#include <errno.h>
#include <gnu/libc-version.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench-util.h"
#include "runtime/mem-pool.h"

#define SLOTS 256
#define MAX_WINDOWS 101
#define TARGET_RATIO 0.5 /* pool throughput / malloc throughput, at least */

static int raw_alloc(void *ctx, size_t bytes, void **ptr) {
    *ptr = malloc(bytes);
    return *ptr ? 0 : RTX_ENOMEM;
}
static void raw_free(void *ctx, void *ptr) {
    free(ptr);
}
static char raw_event;
static int raw_event_create(void *ctx, void **event) {
    *event = &raw_event;
    return 0;
}
static int raw_event_record(void *ctx, void *event, void *stream) {
    return 0;
}
static int raw_event_query(void *ctx, void *event) {
    return 1;
}
static void raw_event_destroy(void *ctx, void *event) {}

static const struct rtx_mem_pool_device_i raw_iface = {
    .alloc = raw_alloc,
    .free = raw_free,
    .event_create = raw_event_create,
    .event_record = raw_event_record,
    .event_query = raw_event_query,
    .event_destroy = raw_event_destroy,
};

static uint64_t rng;
static uint64_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static size_t trace_size(void) {
    int bits = 9 + (int)(rnd() % 13); /* 512 B .. 4 MiB */
    size_t base = (size_t)1 << bits;
    return base + (size_t)(rnd() % base);
}

static char stream_b;

struct side {
    const char *name;
    struct rtx_mem_pool *pool; /* NULL: the raw interface (malloc) */
    double delay_us;           /* busy wait per operation (delay knob) */
    double ops_per_s[MAX_WINDOWS];
};

/* Replays the trace on one side; returns 0, or -1 when an allocation failed. */
static int run(const struct side *sd, long ops) {
    void *slot[SLOTS] = {0};
    void *streams[2] = {NULL, &stream_b};
    int status = 0;
    rng = UINT64_C(0x9e3779b97f4a7c15);
    for (long i = 0; i < ops; i++) {
        int k = (int)(rnd() % SLOTS);
        bench_wait_us(sd->delay_us);
        if (slot[k]) {
            if (sd->pool)
                rtx_mem_pool_release(sd->pool, slot[k], NULL);
            else
                raw_iface.free(NULL, slot[k]);
            slot[k] = NULL;
        } else {
            size_t bytes = trace_size();
            void *s = streams[k & 1];
            int rc = sd->pool ? rtx_mem_pool_alloc(sd->pool, bytes, s, &slot[k], NULL)
                              : raw_iface.alloc(NULL, bytes, &slot[k]);
            if (rc != 0) {
                fprintf(stderr, "rtx-bench-mem-pool: %s: allocation of %zu bytes failed: %s\n",
                        sd->name, bytes, rtx_strerror(rc));
                status = -1;
                break;
            }
            ((char *)slot[k])[0] = 1; /* touch it, as a user would */
        }
    }
    for (int k = 0; k < SLOTS; k++) {
        if (!slot[k]) continue;
        if (sd->pool)
            rtx_mem_pool_release(sd->pool, slot[k], NULL);
        else
            raw_iface.free(NULL, slot[k]);
    }
    return status;
}

/* One timed window of one side into sd->ops_per_s[w]. */
static int timed(struct side *sd, int w, long ops) {
    double t0 = bench_now_s();
    if (run(sd, ops) != 0) return -1;
    sd->ops_per_s[w] = (double)ops / (bench_now_s() - t0);
    return 0;
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: rtx-bench-mem-pool [--report] [--windows W] [OPS]\n"
            "  OPS operations per window and side (default 500000), W windows per side\n"
            "  (default 5, at most %d); --report (or RTX_BENCH_REPORT=1) prints the verdict\n"
            "  without judging. RTX_BENCH_DELAY_US / RTX_BENCH_REF_DELAY_US add a busy wait\n"
            "  per operation to the pool / malloc side.\n",
            MAX_WINDOWS);
}

int main(int argc, char **argv) {
    long ops = 500000;
    int windows = 5;
    bool report = bench_report_only(argc, argv);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--report") == 0) {
            report = true;
        } else if (strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--windows") == 0 && i + 1 < argc) {
            windows = atoi(argv[++i]);
        } else if (argv[i][0] != '-') {
            char *end;
            ops = strtol(argv[i], &end, 10);
            if (*end) ops = 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (ops <= 0 || windows < 1 || windows > MAX_WINDOWS) {
        usage(stderr);
        return 2;
    }
    struct side pool = {.name = "pool"}, raw = {.name = "malloc"};
    if (bench_env_us("RTX_BENCH_DELAY_US", &pool.delay_us) ||
        bench_env_us("RTX_BENCH_REF_DELAY_US", &raw.delay_us))
        return 2;
    struct rtx_err err;
    if (rtx_mem_pool_new(&raw_iface, NULL, NULL, &pool.pool, &err) != 0) {
        fprintf(stderr, "rtx-bench-mem-pool: %s\n", err.msg);
        return 1;
    }

    printf("rtx-bench-mem-pool: rtxd side: rtx_mem_pool_alloc/release (caching allocator, "
           "segments from malloc); reference: glibc %s malloc/free through the same device "
           "interface\n",
           gnu_get_libc_version());
    printf("  trace: %d slots, 512 B .. 4 MiB log-uniform, 2 streams; %ld operations per "
           "window and side, %d windows alternating, after one warm-up replay per side\n",
           SLOTS, ops, windows);
    if (pool.delay_us > 0 || raw.delay_us > 0)
        printf("  delay knobs: pool +%.3g us per operation (RTX_BENCH_DELAY_US), malloc +%.3g "
               "us (RTX_BENCH_REF_DELAY_US)\n",
               pool.delay_us, raw.delay_us);

    int status = 0;
    /* the warm-up: the whole trace once per side, untimed */
    if (run(&pool, ops) || run(&raw, ops)) status = 1;
    for (int w = 0; w < windows && !status; w++) {
        struct side *first = w % 2 ? &raw : &pool, *second = w % 2 ? &pool : &raw;
        if (timed(first, w, ops) || timed(second, w, ops)) status = 1;
    }
    struct rtx_mem_pool_stats st;
    rtx_mem_pool_get_stats(pool.pool, &st);
    rtx_mem_pool_free(pool.pool);
    if (status) {
        printf("verdict: pool >= %.2fx malloc: FAILED to run\n", TARGET_RATIO);
        return 1;
    }

    double ratio[MAX_WINDOWS];
    for (int w = 0; w < windows; w++)
        ratio[w] = pool.ops_per_s[w] / raw.ops_per_s[w];
    struct bench_summary ps = bench_summarize(pool.ops_per_s, windows),
                         rs = bench_summarize(raw.ops_per_s, windows),
                         qs = bench_summarize(ratio, windows);
    double pm = ps.median, plo = ps.lo, phi = ps.hi, rm = rs.median, rlo = rs.lo, rhi = rs.hi,
           qlo = qs.lo, qhi = qs.hi;
    printf("  malloc: median %6.2f M ops/s (%.0f ns/op), spread %.2f .. %.2f\n", rm / 1e6,
           1e9 / rm, rlo / 1e6, rhi / 1e6);
    printf("  pool  : median %6.2f M ops/s (%.0f ns/op), spread %.2f .. %.2f\n", pm / 1e6,
           1e9 / pm, plo / 1e6, phi / 1e6);
    printf("  pool: %" PRIu64 " allocs, %.2f%% cache hits, %zu segments (%zu MiB reserved "
           "peak), fragmentation %.3f\n",
           st.total.n_allocs,
           100.0 * (double)st.total.n_cache_hits /
               (double)(st.total.n_allocs ? st.total.n_allocs : 1),
           st.total.n_segments, st.total.bytes_reserved_peak >> 20, st.total.fragmentation);
    bool met = pm / rm >= TARGET_RATIO;
    printf("verdict: pool / malloc throughput %.2fx (medians; per-window %.2f .. %.2f), target "
           ">= %.2fx: %s\n",
           pm / rm, qlo, qhi, TARGET_RATIO,
           report ? (met ? "met (report only, not judged)" : "MISSED (report only, not judged)")
                  : (met ? "met" : "MISSED"));
    return report || met ? 0 : 1;
}
