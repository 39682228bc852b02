/*
 * bench-mem-pool.c - allocation throughput of the caching allocator (runtime/mem-pool.h)
 * against the raw allocator it caches, on the CPU.
 *
 * DESIGN
 * The raw allocator is a device interface over malloc/free, the same shape the CUDA glue
 * gives cudaMalloc/cudaFree. Both runs replay one pseudo-random trace: a working set of
 * slots, each step frees the slot's block if it holds one and otherwise allocates a size
 * drawn log-uniformly from 512 B .. 4 MiB on one of two streams. The raw run calls the
 * interface's alloc/free directly; the pool run goes through rtx_mem_pool_alloc/release
 * after a warm-up pass fills the cache. Prints allocs+frees per second for each. On a GPU the
 * gap is far wider: cudaMalloc/cudaFree cost microseconds to milliseconds and synchronize
 * the device, where malloc costs tens of nanoseconds.
 * Usage: rtx-bench-mem-pool [OPS]  (default 2000000)
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/mem-pool.h"

#define SLOTS 256

static int raw_alloc(void *ctx, size_t bytes, void **ptr) {
    *ptr = malloc(bytes);
    return *ptr ? 0 : RTX_ENOMEM;
}
static void raw_free(void *ctx, void *ptr) { free(ptr); }
static char raw_event;
static int raw_event_create(void *ctx, void **event) {
    *event = &raw_event;
    return 0;
}
static int raw_event_record(void *ctx, void *event, void *stream) { return 0; }
static int raw_event_query(void *ctx, void *event) { return 1; }
static void raw_event_destroy(void *ctx, void *event) {}

static const struct rtx_mem_pool_device_i raw_iface = {
    .alloc = raw_alloc,
    .free = raw_free,
    .event_create = raw_event_create,
    .event_record = raw_event_record,
    .event_query = raw_event_query,
    .event_destroy = raw_event_destroy,
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

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

/* Replays the trace on the raw interface (pool NULL) or the pool; returns operations done. */
static long run(struct rtx_mem_pool *pool, long ops) {
    void *slot[SLOTS] = {0};
    void *streams[2] = {NULL, &stream_b};
    long done = 0;
    rng = UINT64_C(0x9e3779b97f4a7c15);
    for (long i = 0; i < ops; i++) {
        int k = (int)(rnd() % SLOTS);
        if (slot[k]) {
            if (pool)
                rtx_mem_pool_release(pool, slot[k], NULL);
            else
                raw_iface.free(NULL, slot[k]);
            slot[k] = NULL;
        } else {
            size_t bytes = trace_size();
            void *s = streams[k & 1];
            int rc = pool ? rtx_mem_pool_alloc(pool, bytes, s, &slot[k], NULL)
                          : raw_iface.alloc(NULL, bytes, &slot[k]);
            if (rc != 0) {
                fprintf(stderr, "bench-mem-pool: allocation of %zu bytes failed\n", bytes);
                exit(1);
            }
            ((char *)slot[k])[0] = 1; /* touch it, as a user would */
        }
        done++;
    }
    for (int k = 0; k < SLOTS; k++) {
        if (!slot[k]) continue;
        if (pool)
            rtx_mem_pool_release(pool, slot[k], NULL);
        else
            raw_iface.free(NULL, slot[k]);
    }
    return done;
}

int main(int argc, char **argv) {
    long ops = argc > 1 ? atol(argv[1]) : 2000000;
    if (ops <= 0) {
        fprintf(stderr, "usage: rtx-bench-mem-pool [OPS]\n");
        return 2;
    }
    double t0 = now_s();
    long n_raw = run(NULL, ops);
    double raw_s = now_s() - t0;

    struct rtx_mem_pool *pool = NULL;
    struct rtx_err err;
    if (rtx_mem_pool_new(&raw_iface, NULL, NULL, &pool, &err) != 0) {
        fprintf(stderr, "bench-mem-pool: %s\n", err.msg);
        return 1;
    }
    run(pool, ops / 10); /* warm-up: fills the cache */
    t0 = now_s();
    long n_pool = run(pool, ops);
    double pool_s = now_s() - t0;
    struct rtx_mem_pool_stats st;
    rtx_mem_pool_get_stats(pool, &st);
    rtx_mem_pool_free(pool);

    printf("raw (malloc) : %ld ops in %.3f s = %.2f M allocs+frees/s\n", n_raw, raw_s,
           (double)n_raw / raw_s / 1e6);
    printf("pool (cached): %ld ops in %.3f s = %.2f M allocs+frees/s\n", n_pool, pool_s,
           (double)n_pool / pool_s / 1e6);
    printf("pool: %" PRIu64 " allocs, %.1f%% cache hits, %zu segments (%zu MiB reserved "
           "peak), fragmentation %.3f\n",
           st.total.n_allocs, 100.0 * (double)st.total.n_cache_hits / (double)st.total.n_allocs,
           st.total.n_segments, st.total.bytes_reserved_peak >> 20, st.total.fragmentation);
    return 0;
}
