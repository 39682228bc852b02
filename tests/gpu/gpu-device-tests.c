/*
 * gpu-device-tests.c - rtx-gpu-device-tests, the device layer (device/device.h) on a real
 * CUDA device (make test-gpu): GPU backends made for a consumer are warmed up; what the
 * consumer's account is charged equals what its backends' device pools reserved, before and
 * after runs; the plan cache gives a repeated graph back to its backend, which then replays
 * its captured CUDA graph; a consumer with a small share fails a large run with RTX_ENOMEM
 * naming it, leaves the device healthy, and cannot take the memory another consumer
 * reserved; everything is credited back when the backends are freed.
 * A plain C program (no Check, no fork) for the reason tests/gpu/gpu-tests.c gives.
 */
#include <stdio.h>
#include <string.h>

#include "device/device.h"
#include "kernels/cuda/backend-cuda.h"
#include "runtime/backend.h"
#include "runtime/mem-pool.h"
#include "tests/gpu/gpu-util.h"

#define MIB ((size_t)1 << 20)

static size_t used_of(struct rtx_device *d, int consumer) {
    struct rtx_device_consumer_info ci[4];
    rtx_device_consumers(d, ci, 4);
    return ci[consumer].used_bytes;
}

/* Bytes the device pools of two backends reserved. */
static size_t reserved_of(struct rtx_device *d, struct rtx_backend *a, struct rtx_backend *b) {
    struct rtx_mem_pool_stats sa, sb;
    struct rtx_err err = {0};
    if (!gpu_check(rtx_device_backend_pool_stats(d, a, &sa, NULL, &err) == 0 &&
                       rtx_device_backend_pool_stats(d, b, &sb, NULL, &err) == 0,
                   "pool statistics %s", err.msg))
        return 0;
    return sa.total.bytes_reserved + sb.total.bytes_reserved;
}

/* z = tanh(x @ x), x f32[n, n] (zeros, in *x). */
static struct rtx_graph *square_graph(int64_t n, struct rtx_tensor **x) {
    struct rtx_err err = {0};
    struct rtx_graph *g = NULL;
    const int64_t d[] = {n, n};
    int rc = rtx_graph_new("square", &g, &err);
    if (rc >= 0) rc = rtx_graph_add_input(g, "x", RTX_F32, 2, d, &err);
    if (rc >= 0)
        rc = rtx_graph_add_node(g, "matmul", "mm", (const char *[]){"x", "x"}, 2,
                                (const char *[]){"y"}, 1, &err);
    if (rc >= 0)
        rc = rtx_graph_add_node(g, "tanh", "t", (const char *[]){"y"}, 1, (const char *[]){"z"},
                                1, &err);
    if (rc >= 0) rc = rtx_graph_add_output(g, "z", &err);
    if (rc >= 0) rc = rtx_tensor_new(RTX_F32, 2, d, x, &err);
    gpu_check(rc >= 0, "square graph f32[%lld, %lld] %s", (long long)n, (long long)n, err.msg);
    return g;
}

/* Runs g three times on be through the device's plan cache: plain, captured, replayed. */
static void test_plan_cache(struct rtx_device *d, struct rtx_backend *be, struct rtx_graph *g,
                            struct rtx_tensor *x) {
    static const enum rtx_exec_mode want[] = {RTX_EXEC_FIXED, RTX_EXEC_CAPTURED,
                                              RTX_EXEC_REPLAYED};
    struct rtx_err err = {0};
    uint8_t key[RTX_DEVICE_PLAN_KEY_LEN];
    gpu_check(rtx_device_plan_key("square", 6, (const struct rtx_tensor *const *)&x, 1, NULL,
                                  key, &err) == 0,
              "plan key %s", err.msg);
    struct rtx_device_info before, after;
    rtx_device_info(d, &before);
    for (int run = 0; run < 3; run++) {
        struct rtx_device_plan *kept = rtx_device_plan_take(d, be, key);
        struct rtx_plan *plan = kept ? rtx_device_plan_get(kept) : NULL;
        gpu_check((kept != NULL) == (run > 0), "run %d: %s", run, kept ? "a hit" : "a miss");
        if (!plan && rtx_plan_new(g, (const struct rtx_tensor *const *)&x, 1, NULL, &plan,
                                  &err) != 0) {
            gpu_check(false, "plan %s", err.msg);
            return;
        }
        struct rtx_tensor *y = NULL;
        struct rtx_exec_stats st = {0};
        int rc = rtx_plan_execute(plan, be, &x, 1, &y, 1, NULL, &st, &err);
        gpu_check(rc == 0 && st.mode == want[run], "run %d ran %s (%.3f ms) %s", run,
                  rtx_exec_mode_name(st.mode), st.wall_ms, err.msg);
        rtx_tensor_unref(y);
        if (kept)
            rtx_device_plan_return(d, kept, rc == 0);
        else
            gpu_check(rtx_device_plan_keep(d, be, key, plan, rtx_device_plan_bytes(plan), NULL,
                                           NULL),
                      "the plan is kept");
    }
    rtx_device_info(d, &after);
    gpu_check(after.plan_hits - before.plan_hits == 2 && after.plan_misses - before.plan_misses == 1,
              "plan cache: 2 hits, 1 miss (%llu, %llu)",
              (unsigned long long)(after.plan_hits - before.plan_hits),
              (unsigned long long)(after.plan_misses - before.plan_misses));
}

/* A consumer that may borrow only 100 MiB fails a 256 MiB input with RTX_ENOMEM naming it;
 * the device stays healthy and the consumer with a reservation still runs. */
static void test_small_share(struct rtx_device *d, struct rtx_backend *reserved_be,
                             struct rtx_graph *g, struct rtx_tensor *x) {
    struct rtx_err err = {0};
    struct rtx_device_info in;
    rtx_device_info(d, &in);
    size_t rest = in.budget_bytes - in.reserved_bytes - in.borrowed_bytes;
    struct rtx_device_consumer *hog = NULL, *tiny = NULL;
    struct rtx_backend *tb = NULL;
    if (!gpu_check(rest > 200 * MIB &&
                       rtx_device_consumer_new(d, "hog", rest - 100 * MIB, &hog, &err) == 0 &&
                       rtx_device_consumer_new(d, "tiny", 0, &tiny, &err) == 0,
                   "consumers hog and tiny %s", err.msg))
        goto out;
    if (!gpu_check(rtx_device_backend_new(tiny, &tb, &err) == 0, "tiny's backend %s", err.msg))
        goto out;
    struct rtx_tensor *bx = NULL, *by = NULL;
    struct rtx_graph *bg = square_graph(8192, &bx);
    struct rtx_plan *bp = NULL;
    int rc = rtx_plan_new(bg, (const struct rtx_tensor *const *)&bx, 1, NULL, &bp, &err);
    if (rc == 0) rc = rtx_plan_execute(bp, tb, &bx, 1, &by, 1, NULL, NULL, &err);
    gpu_check(rc == RTX_ENOMEM && strstr(err.msg, "consumer 'tiny'"),
              "256 MiB on a 100 MiB share: RTX_ENOMEM naming the consumer (%s)", err.msg);
    char reason[sizeof err.msg + 80];
    snprintf(reason, sizeof reason, "%s", err.msg);
    gpu_check(!rtx_device_check(d, tb, reason, sizeof reason), "the device stays healthy");
    rtx_tensor_unref(by);
    rtx_plan_free(bp);
    rtx_graph_free(bg);
    rtx_tensor_unref(bx);
    rtx_device_info(d, &in);
    gpu_check(in.refusals > 0, "refusals counted (%llu)", (unsigned long long)in.refusals);
    struct rtx_plan *p = NULL;
    struct rtx_tensor *y = NULL;
    rc = rtx_plan_new(g, (const struct rtx_tensor *const *)&x, 1, NULL, &p, &err);
    if (rc == 0) rc = rtx_plan_execute(p, reserved_be, &x, 1, &y, 1, NULL, NULL, &err);
    gpu_check(rc == 0, "a consumer within its reservation still runs %s", err.msg);
    rtx_tensor_unref(y);
    rtx_plan_free(p);
out:
    rtx_device_backend_free(tiny, tb);
    rtx_device_consumer_free(tiny);
    rtx_device_consumer_free(hog);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int n = gpu_device_count("rtx-gpu-device-tests");
    if (n <= 0) return n == 0 ? 0 : gpu_check_summary();
    struct rtx_cuda_devices l;
    struct rtx_err err = {0};
    struct rtx_devices *s = NULL;
    struct rtx_device_consumer *jobs = NULL;
    struct rtx_backend *a = NULL, *b = NULL;
    gpu_check(rtx_cuda_devices_init(&l, true, &err) == 0 && l.n > 0, "devices %s", err.msg);
    struct rtx_devices_options o = {.gpus = &l, .plan_cache = 4, .cpu_threads = 2,
                                    .memory_fraction = 0.5};
    if (!gpu_check(rtx_devices_new(&o, &s, &err) == 0, "device set %s", err.msg)) goto out;
    struct rtx_device *d = rtx_devices_cuda(s, 0);
    struct rtx_device_info in;
    rtx_device_info(d, &in);
    gpu_note("%s: %s, %d SMs, cc %d.%d, %zu MiB, budget %zu MiB", in.name, in.model, in.sm_count,
             in.cc_major, in.cc_minor, in.memory_bytes / MIB, in.budget_bytes / MIB);
    gpu_check(in.healthy && in.budget_bytes == in.memory_bytes / 2, "healthy, budget half");
    if (!gpu_check(rtx_device_consumer_new(d, "jobs", 1024 * MIB, &jobs, &err) == 0 &&
                       rtx_device_backend_new(jobs, &a, &err) == 0 &&
                       rtx_device_backend_new(jobs, &b, &err) == 0,
                   "consumer 'jobs' with two backends %s", err.msg))
        goto out;
    rtx_device_info(d, &in);
    gpu_check(in.backends == 2 && in.backends_warm == 2, "two backends, both warmed up (%.1f ms)",
              in.warmup_ms);
    size_t r = reserved_of(d, a, b);
    gpu_check(r > 0 && r == used_of(d, 0), "charged %zu = pools reserved %zu", used_of(d, 0), r);
    struct rtx_tensor *x = NULL;
    struct rtx_graph *g = square_graph(1024, &x);
    test_plan_cache(d, a, g, x);
    r = reserved_of(d, a, b);
    gpu_check(r == used_of(d, 0), "after runs: charged %zu = pools reserved %zu", used_of(d, 0),
              r);
    test_small_share(d, b, g, x);
    rtx_device_backend_free(jobs, a);
    rtx_device_backend_free(jobs, b);
    a = b = NULL;
    rtx_graph_free(g);
    rtx_tensor_unref(x);
    rtx_device_info(d, &in);
    gpu_check(in.used_bytes == 0 && in.backends == 0 && in.plans == 0 && in.healthy,
              "all credited back: used %zu, backends %d, plans %d", in.used_bytes, in.backends,
              in.plans);
out:
    if (jobs) rtx_device_backend_free(jobs, a); /* NULL after a failure: no-ops */
    if (jobs) rtx_device_backend_free(jobs, b);
    rtx_device_consumer_free(jobs);
    rtx_devices_free(s);
    rtx_cuda_devices_close(&l);
    return gpu_check_summary();
}
