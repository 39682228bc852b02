/*
 * gpu-jobs-tests.c - rtx-gpu-jobs-tests, the job manager (daemon/jobs-*.c) on real CUDA devices
 * (make test-gpu): jobs placed by their device field run on the GPU and give the CPU's
 * results; several workers per device share it; the pools report what the jobs allocated; an
 * out-of-memory failure (past the jobs share of a device budget capped by
 * device.memory_cap_bytes) fails the job with RESOURCE_EXHAUSTED and leaves the device usable;
 * a sticky
 * error (an illegal address) marks the device unhealthy, later jobs go elsewhere and the
 * process keeps working. Prints one line per check and "N passed, M failed"; exits 1 when a
 * check failed or there is no GPU (0, having said it skipped, only with RTX_ALLOW_SKIP=gpu
 * and no GPU device node: gpu-util.h).
 * Every test runs with plan reuse on (device.plan_cache's default): the same graph submitted
 * again to one GPU worker runs the plan its device's cache kept, so the third such job replays
 * a captured CUDA graph with the first job's results, bit for bit; the device layer warmed the
 * worker's backend up before its first job.
 *
 * DESIGN
 * The illegal address comes from a test-only hook that production code does not carry: the
 * device layer takes its GPU backends from an rtx_device_gpu_i (the seam the unit tests use
 * for fake devices), and here that interface wraps each real CUDA backend in one whose run_node,
 * for a node named "illegal_address", launches the device self-test's probe kernel
 * (kernels/cuda/probe.cu) on an address that is not mapped, waits for it, and fails the node
 * with RTX_EGPU. Every other slot is the CUDA backend's own (the wrapper copies its vtable and
 * shares its context), so what the job manager then sees - the backend refusing to
 * synchronize after the sticky error - is the real CUDA backend's behaviour. The sticky error
 * poisons device 0's context for the rest of the process, so that test runs last.
 * A plain C program (no Check, no fork) for the reason tests/gpu/gpu-tests.c gives.
 */
#include <ftw.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon/jobs.h"
#include "daemon/log.h"
#include "kernels/cuda/backend-cuda.h"
#include "kernels/cuda/cuda-impl.h"
#include "rtx/v1/jobs.pb-c.h"
#include "runtime/backend-impl.h"
#include "tests/gpu/gpu-util.h"

/* Fails the program: a step every later check needs did not work. */
static void die(const char *what, const struct rtx_err *err) {
    gpu_check(false, "%s: %s", what, err ? err->msg : "");
    exit(gpu_check_summary());
}

/* ------------------------------------------------------------------------------------------
 * A store, graphs, requests
 * ---------------------------------------------------------------------------------------- */

static char store_dir[64];

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    return remove(path);
}

static struct rtx_store *store_open(void) {
    snprintf(store_dir, sizeof store_dir, "/tmp/rtx-gpu-jobs-XXXXXX");
    if (!mkdtemp(store_dir)) die("mkdtemp", NULL);
    char path[128];
    snprintf(path, sizeof path, "%s/rtxd.db", store_dir);
    struct rtx_store_options so = {.path = path, .sync_normal = true};
    struct rtx_store *s = NULL;
    struct rtx_err err = {0};
    if (rtx_store_open(&so, &s, &err) != 0) die("open the store", &err);
    return s;
}

static void store_close(struct rtx_store *s) {
    rtx_store_close(s);
    nftw(store_dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

/* Deterministic values in [-1, 1). */
static struct rtx_tensor *random_tensor(int ndim, const int64_t *dims, unsigned seed) {
    struct rtx_tensor *t = NULL;
    struct rtx_err err = {0};
    if (rtx_tensor_new(RTX_F32, ndim, dims, &t, &err) != 0) die("tensor", &err);
    float *p = rtx_tensor_data(t);
    uint32_t x = seed * 2654435761u + 1;
    for (int64_t i = 0; i < rtx_tensor_numel(t); i++) {
        x = x * 1664525u + 1013904223u;
        p[i] = (float)((x >> 8) / 8388608.0 - 1.0);
    }
    return t;
}

/* softmax(tanh(x @ w + b)) with x f32[rows, 256], w f32[256, 512], the last node named
 * `last` (the hook's trigger when "illegal_address"). */
static struct rtx_graph *mlp_graph(const char *last) {
    struct rtx_graph *g = NULL;
    struct rtx_err err = {0};
    if (rtx_graph_new("mlp", &g, &err) != 0) die("graph", &err);
    struct rtx_tensor *w = random_tensor(2, (const int64_t[]){256, 512}, 11);
    struct rtx_tensor *b = random_tensor(1, (const int64_t[]){512}, 12);
    int rc = rtx_graph_add_input(g, "x", RTX_F32, 2, (const int64_t[]){-1, 256}, &err) < 0;
    rc |= rtx_graph_add_initializer(g, "w", w, &err) < 0;
    rc |= rtx_graph_add_initializer(g, "b", b, &err) < 0;
    rc |= rtx_graph_add_node(g, "matmul", "mm", (const char *[]){"x", "w"}, 2,
                             (const char *[]){"xw"}, 1, &err) < 0;
    rc |= rtx_graph_add_node(g, "add", "bias", (const char *[]){"xw", "b"}, 2,
                             (const char *[]){"z"}, 1, &err) < 0;
    rc |= rtx_graph_add_node(g, "tanh", "act", (const char *[]){"z"}, 1, (const char *[]){"h"},
                             1, &err) < 0;
    rc |= rtx_graph_add_node(g, "softmax", last, (const char *[]){"h"}, 1,
                             (const char *[]){"y"}, 1, &err) < 0;
    rc |= rtx_graph_add_output(g, "y", &err) != 0;
    rtx_tensor_unref(w);
    rtx_tensor_unref(b);
    if (rc) die("build the graph", &err);
    return g;
}

/* A serialized SubmitRequest of g with input x on `device`; free() it. */
static void *make_request(const struct rtx_graph *g, struct rtx_tensor *x, const char *device,
                          size_t *len) {
    struct rtx_err err = {0};
    void *gbytes = NULL;
    size_t glen = 0;
    if (rtx_graph_encode(g, &gbytes, &glen, &err) != 0) die("encode the graph", &err);
    Rtx__V1__Graph *gm = rtx__v1__graph__unpack(NULL, glen, gbytes);
    rtx_free(gbytes);
    if (!gm) die("decode the graph", NULL);
    Rtx__V1__Tensor tm = RTX__V1__TENSOR__INIT, *tp = &tm;
    tm.name = "x";
    tm.dtype = (Rtx__V1__DataType)rtx_dtype_to_wire(x->dtype);
    tm.n_dims = (size_t)x->ndim;
    tm.dims = x->dims;
    tm.data.len = rtx_tensor_nbytes(x);
    tm.data.data = rtx_tensor_data(x);
    Rtx__V1__SubmitRequest req = RTX__V1__SUBMIT_REQUEST__INIT;
    req.graph = gm;
    req.n_inputs = 1;
    req.inputs = &tp;
    req.device = (char *)(device ? device : "");
    *len = rtx__v1__submit_request__get_packed_size(&req);
    void *out = malloc(*len);
    if (!out) die("out of memory", NULL);
    rtx__v1__submit_request__pack(&req, out);
    rtx__v1__graph__free_unpacked(gm, NULL);
    return out;
}

/* Submits; returns the code (id filled on 0). */
static int submit(struct rtx_jobs *j, const struct rtx_graph *g, struct rtx_tensor *x,
                  const char *device, char id[RTX_JOB_ID_LEN], struct rtx_err *err) {
    size_t len;
    void *req = make_request(g, x, device, &len);
    int rc = rtx_jobs_submit(j, req, len, id, NULL, err);
    free(req);
    return rc;
}

/* Waits (up to 120 s) for the job's end; returns its journal row. */
static struct rtx_job_info wait_job(struct rtx_store *s, const char *id) {
    struct rtx_job_info info = {0};
    struct rtx_err err = {0};
    for (int i = 0; i < 120000; i++) {
        rtx_job_info_clear(&info);
        if (rtx_store_job_get(s, id, &info, &err) != 0) die("read a job", &err);
        if (rtx_job_state_is_terminal(info.state)) return info;
        usleep(1000);
    }
    die("a job did not end within 120 s", NULL);
    return info;
}

/* The first output of a succeeded job (a new reference), NULL otherwise. */
static struct rtx_tensor *output_of(struct rtx_store *s, const char *id) {
    struct rtx_tensor **ts = NULL;
    char **names = NULL;
    int n = 0;
    struct rtx_err err = {0};
    if (rtx_store_job_outputs(s, id, &ts, &names, &n, &err) != 0 || n < 1) return NULL;
    struct rtx_tensor *t = ts[0];
    for (int i = 1; i < n; i++)
        rtx_tensor_unref(ts[i]);
    for (int i = 0; i < n; i++)
        rtx_free(names[i]);
    rtx_free(ts);
    rtx_free(names);
    return t;
}

/* Largest |a - b| / (1e-5 + |b|) over the elements, or -1 when the shapes differ. */
static double max_rel_err(const struct rtx_tensor *a, const struct rtx_tensor *b) {
    if (!a || !b || rtx_tensor_numel(a) != rtx_tensor_numel(b)) return -1;
    const float *x = rtx_tensor_data(a), *y = rtx_tensor_data(b);
    double worst = 0;
    for (int64_t i = 0; i < rtx_tensor_numel(a); i++) {
        double d = x[i] > y[i] ? x[i] - y[i] : y[i] - x[i];
        double r = d / (1e-5 + (y[i] < 0 ? -y[i] : y[i]));
        if (r > worst) worst = r;
    }
    return worst;
}

static const char *const lanes[] = {"batch"};

/* A device set over the listed devices with the daemon's plan cache defaults; gpu_iface
 * NULL: the CUDA backend; cap: device.memory_cap_bytes. */
static struct rtx_devices *devices_new(const struct rtx_cuda_devices *l,
                                       const struct rtx_device_gpu_i *gpu_iface, size_t cap) {
    struct rtx_devices_options o = {
        .gpus = l, .cpu_threads = 4, .memory_cap_bytes = cap, .plan_cache = 16,
        .plan_cache_bytes = (size_t)1 << 30, .gpu_iface = gpu_iface,
    };
    struct rtx_devices *set = NULL;
    struct rtx_err err = {0};
    if (rtx_devices_new(&o, &set, &err) != 0) die("make the device set", &err);
    return set;
}

static struct rtx_jobs_options options(struct rtx_store *s, struct rtx_devices *set,
                                       int per_device) {
    return (struct rtx_jobs_options){
        .store = s, .workers = 1, .cpu_threads = 4, .max_queued = 1000,
        .default_restart_policy = RTX_RESTART_RERUN, .n_lanes = 1, .lanes = lanes,
        .default_lane = "batch", .devices = set, .jobs_reserve = 0.25,
        .gpu_workers_per_device = per_device,
    };
}

static struct rtx_jobs *start(const struct rtx_jobs_options *o) {
    struct rtx_jobs *j = NULL;
    struct rtx_err err = {0};
    if (rtx_jobs_start(o, &j, &err) != 0) die("start the job manager", &err);
    return j;
}

static const struct rtx_jobs_pool_row *find_row(const struct rtx_jobs_pool_row *rows, int n,
                                                const char *device) {
    for (int i = 0; i < n; i++)
        if (strcmp(rows[i].device, device) == 0) return &rows[i];
    return NULL;
}

/* ------------------------------------------------------------------------------------------
 * Tests
 * ---------------------------------------------------------------------------------------- */

/* auto, cuda, cuda:N and cpu jobs, two workers per device; results against the CPU job. */
static void test_placement_and_parity(struct rtx_store *s, const struct rtx_cuda_devices *l) {
    struct rtx_devices *set = devices_new(l, NULL, 0);
    struct rtx_jobs_options o = options(s, set, 2);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *g = mlp_graph("out");
    struct rtx_tensor *x = random_tensor(2, (const int64_t[]){2048, 256}, 7); /* 2 MiB */
    struct rtx_err err = {0};
    char cpu_id[RTX_JOB_ID_LEN];
    if (submit(j, g, x, "cpu", cpu_id, &err) != 0) die("submit on the CPU", &err);
    struct rtx_job_info info = wait_job(s, cpu_id);
    gpu_check(info.state == RTX_JOB_SUCCEEDED && strcmp(info.device, "cpu") == 0,
          "a cpu job ran on %s: %s %s", info.device, rtx_job_state_name(info.state),
          info.reason);
    rtx_job_info_clear(&info);
    struct rtx_tensor *want = output_of(s, cpu_id);

    enum { N = 12 };
    char ids[N][RTX_JOB_ID_LEN], dev[24];
    for (int i = 0; i < N; i++) {
        const char *asked = i % 3 == 0 ? NULL : i % 3 == 1 ? "cuda" : dev;
        snprintf(dev, sizeof dev, "cuda:%d", (i / 3) % l->n);
        if (submit(j, g, x, asked, ids[i], &err) != 0) die("submit on a GPU", &err);
    }
    int on_gpu = 0, close = 0;
    for (int i = 0; i < N; i++) {
        info = wait_job(s, ids[i]);
        struct rtx_tensor *got = output_of(s, ids[i]);
        double e = max_rel_err(got, want);
        on_gpu += info.state == RTX_JOB_SUCCEEDED && strncmp(info.device, "cuda:", 5) == 0;
        close += e >= 0 && e < 2e-3;
        if (e < 0 || e >= 2e-3 || strncmp(info.device, "cuda:", 5) != 0)
            printf("     job %d (asked %s): %s on %s, max rel err %.3g: %s\n", i,
                   info.requested_device, rtx_job_state_name(info.state), info.device, e,
                   info.reason);
        rtx_tensor_unref(got);
        rtx_job_info_clear(&info);
    }
    gpu_check(on_gpu == N, "%d of %d auto/cuda/cuda:N jobs succeeded on a GPU", on_gpu, N);
    gpu_check(close == N, "%d of %d GPU results within 2e-3 relative of the CPU job's", close, N);

    struct rtx_jobs_pool_row rows[RTX_JOBS_MAX_POOL_ROWS];
    int n = 0;
    int rc = rtx_jobs_get_pools(j, rows, RTX_JOBS_MAX_POOL_ROWS, &n, &err);
    gpu_check(rc == 0 && n == 2 * l->n + 1, "pools: %d rows for %d device(s) %s", n, l->n,
              err.msg);
    const struct rtx_jobs_pool_row *r = find_row(rows, n, "cuda:0");
    if (gpu_check(r != NULL, "pools: a cuda:0 row")) {
        printf("     cuda:0: %d pools, allocated %zu, reserved %zu (peak %zu), active %zu, "
               "%llu allocs, %llu cache hits, %zu segments, frag %.3f\n",
               r->pools, r->total.bytes_allocated, r->total.bytes_reserved,
               r->total.bytes_reserved_peak, r->total.bytes_active,
               (unsigned long long)r->total.n_allocs, (unsigned long long)r->total.n_cache_hits,
               r->total.n_segments, r->total.fragmentation);
        gpu_check(r->pools == 2 && r->total.n_allocs > 0 && r->total.bytes_reserved > 0 &&
                  r->total.bytes_reserved_peak >= r->total.bytes_reserved && r->healthy,
              "pools: cuda:0 sums 2 worker pools that served the jobs");
    }
    r = find_row(rows, n, "cuda:0/pinned");
    gpu_check(r && r->pools == 2 && r->total.n_allocs > 0,
          "pools: the pinned pool staged the 2 MiB inputs (%llu allocs)",
          r ? (unsigned long long)r->total.n_allocs : 0ull);
    r = find_row(rows, n, "cpu");
    gpu_check(r && r->total.bytes_allocated_peak > 0, "pools: the cpu row has the CPU job's peak");
    rtx_jobs_stop(j);
    rtx_devices_free(set);
    rtx_tensor_unref(want);
    rtx_tensor_unref(x);
    rtx_graph_free(g);
}

/* A device budget smaller than an input (device.memory_cap_bytes, the jobs share all of it):
 * the job fails with out of memory (RESOURCE_EXHAUSTED, naming the share), the device stays. */
static void test_oom_is_not_sticky(struct rtx_store *s, const struct rtx_cuda_devices *l) {
    const size_t cap = (size_t)8 << 20;
    struct rtx_devices *set = devices_new(l, NULL, cap);
    struct rtx_jobs_options o = options(s, set, 1);
    o.jobs_reserve = 1;
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *g = mlp_graph("out");
    struct rtx_tensor *big = random_tensor(2, (const int64_t[]){16384, 256}, 8); /* 16 MiB */
    struct rtx_tensor *x = random_tensor(2, (const int64_t[]){8, 256}, 9);
    struct rtx_err err = {0};
    char id[RTX_JOB_ID_LEN];
    if (submit(j, g, big, "cuda:0", id, &err) != 0) die("submit the big job", &err);
    struct rtx_job_info info = wait_job(s, id);
    gpu_check(info.state == RTX_JOB_FAILED && strstr(info.reason, "unhealthy") == NULL &&
                  strcmp(info.failure_code, "RESOURCE_EXHAUSTED") == 0 &&
                  strstr(info.reason, "jobs share"),
          "a job beyond the jobs share failed (%s) without harming the device: %s",
          info.failure_code, info.reason);
    rtx_job_info_clear(&info);
    struct rtx_jobs_stats st;
    rtx_jobs_get_stats(j, &st);
    gpu_check(st.devices[1].healthy, "cuda:0 stays healthy after an out-of-memory failure");
    if (submit(j, g, x, "cuda:0", id, &err) != 0) die("submit the small job", &err);
    info = wait_job(s, id);
    gpu_check(info.state == RTX_JOB_SUCCEEDED && strcmp(info.device, "cuda:0") == 0,
          "the next job succeeds on cuda:0: %s %s", rtx_job_state_name(info.state), info.reason);
    rtx_job_info_clear(&info);
    struct rtx_jobs_pool_row rows[RTX_JOBS_MAX_POOL_ROWS];
    int n = 0;
    rtx_jobs_get_pools(j, rows, RTX_JOBS_MAX_POOL_ROWS, &n, &err);
    const struct rtx_jobs_pool_row *r = find_row(rows, n, "cuda:0");
    gpu_check(r && r->total.n_ooms >= 1 && r->total.n_retries >= 1,
          "pools: cuda:0 counts the out-of-memory failure (%llu) and its retry (%llu)",
          r ? (unsigned long long)r->total.n_ooms : 0ull,
          r ? (unsigned long long)r->total.n_retries : 0ull);
    rtx_jobs_stop(j);
    rtx_devices_free(set);
    rtx_tensor_unref(x);
    rtx_tensor_unref(big);
    rtx_graph_free(g);
}

/* Whether a and b hold the same bytes with the same element count. */
static bool same_bits(const struct rtx_tensor *a, const struct rtx_tensor *b) {
    return a && b && rtx_tensor_nbytes(a) == rtx_tensor_nbytes(b) &&
           memcmp(rtx_tensor_data(a), rtx_tensor_data(b), rtx_tensor_nbytes(a)) == 0;
}

/* Waits (up to 60 s) until no job is queued or running; returns the stats then. */
static struct rtx_jobs_stats settle(struct rtx_jobs *j) {
    struct rtx_jobs_stats st;
    for (int i = 0; i < 60000; i++) {
        rtx_jobs_get_stats(j, &st);
        int busy = 0;
        for (int k = 0; k < st.n_lanes; k++)
            busy += st.lanes[k].queued + st.lanes[k].running;
        if (busy == 0) break;
        usleep(1000);
    }
    return st;
}

/* One GPU worker, the same graph five times: the worker keeps the plan, so job 1 runs node by
 * node (fixed), job 2 captures a CUDA graph, jobs 3 to 5 replay it, each with job 1's output
 * bit for bit; another input of the same shape replays too and matches the CPU. */
static void test_repeated_graph_replays(struct rtx_store *s, const struct rtx_cuda_devices *l) {
    struct rtx_devices *set = devices_new(l, NULL, 0);
    struct rtx_jobs_options o = options(s, set, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *g = mlp_graph("out");
    struct rtx_tensor *x = random_tensor(2, (const int64_t[]){64, 256}, 21);
    struct rtx_tensor *x2 = random_tensor(2, (const int64_t[]){64, 256}, 22);
    struct rtx_device_info d0;
    rtx_device_info(rtx_devices_cuda(set, 0), &d0);
    gpu_check(d0.backends == 1 && d0.plan_misses == 0,
              "cuda:0's worker backend was made (and warmed up) before its first job");
    struct rtx_err err = {0};
    char id[RTX_JOB_ID_LEN];
    enum { N = 5 };
    const enum rtx_exec_mode want[N] = {RTX_EXEC_FIXED, RTX_EXEC_CAPTURED, RTX_EXEC_REPLAYED,
                                        RTX_EXEC_REPLAYED, RTX_EXEC_REPLAYED};
    struct rtx_tensor *first = NULL;
    for (int i = 0; i < N; i++) {
        if (submit(j, g, x, "cuda:0", id, &err) != 0) die("submit the repeated graph", &err);
        struct rtx_job_info info = wait_job(s, id);
        struct rtx_jobs_run run = {0};
        int rc = rtx_jobs_get_run(j, id, &run);
        gpu_check(info.state == RTX_JOB_SUCCEEDED && rc == 0 && run.mode == want[i] &&
                      run.plan_reused == (i > 0) && strcmp(run.device, "cuda:0") == 0,
                  "job %d of the same graph on cuda:0: %s, ran %s (want %s), plan reused %d, "
                  "%.3f ms %s",
                  i + 1, rtx_job_state_name(info.state), rtx_exec_mode_name(run.mode),
                  rtx_exec_mode_name(want[i]), run.plan_reused, info.run_ms, info.reason);
        struct rtx_tensor *got = output_of(s, id);
        if (i == 0)
            first = got;
        else
            gpu_check(same_bits(got, first), "job %d's output is job 1's, bit for bit", i + 1);
        if (i > 0) rtx_tensor_unref(got);
        rtx_job_info_clear(&info);
    }

    char cpu_id[RTX_JOB_ID_LEN];
    if (submit(j, g, x2, "cuda:0", id, &err) != 0) die("submit another input", &err);
    if (submit(j, g, x2, "cpu", cpu_id, &err) != 0) die("submit on the CPU", &err);
    struct rtx_job_info info = wait_job(s, id), cinfo = wait_job(s, cpu_id);
    struct rtx_jobs_run run = {0};
    int rc = rtx_jobs_get_run(j, id, &run);
    struct rtx_tensor *got = output_of(s, id), *want_cpu = output_of(s, cpu_id);
    double e = max_rel_err(got, want_cpu);
    gpu_check(info.state == RTX_JOB_SUCCEEDED && rc == 0 && run.mode == RTX_EXEC_REPLAYED &&
                  e >= 0 && e < 2e-3,
              "another input of the same shape replays (%s) within 2e-3 of the CPU (%.3g)",
              rtx_exec_mode_name(run.mode), e);
    rtx_job_info_clear(&info);
    rtx_job_info_clear(&cinfo);
    settle(j); /* the worker has put the plan back */
    rtx_device_info(rtx_devices_cuda(set, 0), &d0);
    gpu_check(d0.plan_hits == N && d0.plan_misses == 1 && d0.plans == 1,
              "cuda:0's plan cache: %" PRIu64 " hits, %" PRIu64 " misses, %d plan(s) kept "
              "(%zu bytes)",
              d0.plan_hits, d0.plan_misses, d0.plans, d0.plan_bytes);
    rtx_tensor_unref(got);
    rtx_tensor_unref(want_cpu);
    rtx_tensor_unref(first);
    rtx_jobs_stop(j);
    rtx_devices_free(set);
    rtx_tensor_unref(x);
    rtx_tensor_unref(x2);
    rtx_graph_free(g);
}

/* The test-only hook (see DESIGN): the CUDA backend with a run_node that faults on demand. */
struct hook_be {
    struct rtx_backend be; /* be.ctx is the CUDA backend's own context */
    struct rtx_backend *inner;
    struct rtx_backend_i iface;
    int device;
};

static struct hook_be *hook_of(struct rtx_backend *be) {
    return (struct hook_be *)((char *)be - offsetof(struct hook_be, be));
}

static int hook_run(struct rtx_backend *be, const struct rtx_node_args *a, struct rtx_err *err) {
    struct hook_be *h = hook_of(be);
    if (a->node->name && strcmp(a->node->name, "illegal_address") == 0) {
        cudaError_t e = cudaSetDevice(h->device);
        /* the probe kernel writing through a pointer nothing maps */
        if (e == cudaSuccess)
            e = rtx__cuda_probe_launch((uint32_t *)(uintptr_t)0x1000, 1u << 20, 1, NULL);
        if (e == cudaSuccess) e = cudaDeviceSynchronize();
        return rtx_err_set(err, RTX_EGPU, "node 'illegal_address' (test hook): %s: %s",
                           cudaGetErrorName(e), cudaGetErrorString(e));
    }
    return h->inner->iface->run_node(be, a, err);
}

/* Hook backends made and freed (test_sticky_error checks that stopping frees them all). */
static atomic_int hooks_made, hooks_freed;

static void hook_free(struct rtx_backend *be) {
    struct hook_be *h = hook_of(be);
    h->inner->iface->free(h->inner);
    free(h);
    atomic_fetch_add(&hooks_freed, 1);
}

static int hook_new(void *ctx, int device, struct rtx_mem_account *account,
                    struct rtx_backend **out, struct rtx_err *err) {
    struct rtx_cuda_options co = {.device = device, .account = account};
    struct rtx_backend *inner = NULL;
    int rc = rtx_backend_cuda_new(&co, &inner, err);
    if (rc) return rc;
    struct hook_be *h = calloc(1, sizeof *h);
    if (!h) {
        rtx_backend_free(inner);
        return rtx_err_set(err, RTX_ENOMEM, "hook backend");
    }
    h->inner = inner;
    h->device = device;
    h->iface = *inner->iface;
    h->iface.run_node = hook_run;
    h->iface.free = hook_free;
    h->be.iface = &h->iface;
    h->be.ctx = inner->ctx;
    *out = &h->be;
    atomic_fetch_add(&hooks_made, 1);
    return 0;
}

static int hook_pools(void *ctx, struct rtx_backend *be, struct rtx_mem_pool_stats *dev,
                      struct rtx_mem_pool_stats *pinned, struct rtx_err *err) {
    return rtx_backend_cuda_pool_stats(hook_of(be)->inner, dev, pinned, err);
}

static const struct rtx_device_gpu_i hook_gpus = {
    .backend_new = hook_new,
    .pool_stats = hook_pools,
};

/* An illegal address on cuda:0: the job fails, cuda:0 is unhealthy with the error, an auto
 * job runs elsewhere, cuda:0 jobs are refused, the job manager stops cleanly. */
static void test_sticky_error(struct rtx_store *s, const struct rtx_cuda_devices *l) {
    struct rtx_devices *set = devices_new(l, &hook_gpus, 0);
    struct rtx_jobs_options o = options(s, set, 1);
    struct rtx_jobs *j = start(&o);
    struct rtx_graph *ok = mlp_graph("out"), *bad = mlp_graph("illegal_address");
    struct rtx_tensor *x = random_tensor(2, (const int64_t[]){8, 256}, 9);
    struct rtx_err err = {0};
    char id[RTX_JOB_ID_LEN];
    if (submit(j, ok, x, "cuda:0", id, &err) != 0) die("submit", &err);
    struct rtx_job_info info = wait_job(s, id);
    gpu_check(info.state == RTX_JOB_SUCCEEDED,
          "through the hook, a job succeeds on cuda:0 first: %s", info.reason);
    rtx_job_info_clear(&info);

    if (submit(j, bad, x, "cuda:0", id, &err) != 0) die("submit the faulting job", &err);
    info = wait_job(s, id);
    printf("     the faulting job: %s\n", info.reason);
    gpu_check(info.state == RTX_JOB_FAILED && strstr(info.reason, "cudaErrorIllegalAddress") &&
              strstr(info.reason, "cuda:0 is now unhealthy"),
          "the illegal address fails the job and says cuda:0 is now unhealthy");
    rtx_job_info_clear(&info);
    struct rtx_jobs_stats st;
    rtx_jobs_get_stats(j, &st);
    printf("     cuda:0 detail: %s\n", st.devices[1].detail);
    gpu_check(!st.devices[1].healthy && strstr(st.devices[1].detail, "cudaErrorIllegalAddress"),
          "cuda:0 is unhealthy, the detail names the sticky error");

    int rc = submit(j, ok, x, "cuda:0", id, &err);
    gpu_check(rc == RTX_EUNAVAILABLE && strstr(err.msg, "device cuda:0 is unhealthy"),
          "a cuda:0 job is refused: %s", err.msg);
    if (submit(j, ok, x, "auto", id, &err) != 0) die("submit auto", &err);
    info = wait_job(s, id);
    gpu_check(info.state == RTX_JOB_SUCCEEDED && strcmp(info.device, "cuda:0") != 0,
          "an auto job succeeds elsewhere (%s)", info.device);
    rtx_job_info_clear(&info);
    rtx_jobs_stop(j);
    rtx_devices_free(set);
    int made = atomic_load(&hooks_made), freed = atomic_load(&hooks_freed);
    gpu_check(made > 0 && freed == made,
              "the job manager stopped with a faulted device and freed the %d CUDA backend(s) "
              "it made (%d freed)", made, freed);
    rtx_tensor_unref(x);
    rtx_graph_free(ok);
    rtx_graph_free(bad);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    rtx_log_configure("text", "warn");
    int n = gpu_device_count("rtx-gpu-jobs-tests");
    if (n <= 0) return n == 0 ? 0 : gpu_check_summary();
    struct rtx_cuda_devices l;
    struct rtx_err err = {0};
    if (rtx_cuda_devices_init(&l, true, &err) != 0) die("list the devices", &err);
    struct rtx_store *s = store_open();
    if (gpu_check(l.devs[0].healthy, "cuda:0 is healthy at start %s", l.devs[0].detail)) {
        test_placement_and_parity(s, &l);
        test_oom_is_not_sticky(s, &l);
        test_repeated_graph_replays(s, &l);
        test_sticky_error(s, &l); /* last: it poisons cuda:0 for the rest of the process */
    }
    store_close(s);
    rtx_cuda_devices_close(&l);
    return gpu_check_summary();
}
