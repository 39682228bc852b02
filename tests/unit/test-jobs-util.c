/*
 * test-jobs-util.c - the helpers and the fake CUDA device that the job manager's test files
 * share (declared, with what each does, in test-jobs-util.h).
 */
#include "tests/unit/test-jobs-util.h"

#include <check.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/cpu/backend-cpu.h"
#include "rtx/v1/jobs.pb-c.h"
#include "tests/unit/test-util.h"

/* ------------------------------------------------------------------------------------------
 * Stores, graphs, submissions and watches
 * ---------------------------------------------------------------------------------------- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    return remove(path);
}

void fx_open_sync(struct fx *f, bool sync_normal) {
    snprintf(f->dir, sizeof f->dir, "/tmp/rtx-jobs-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(f->dir));
    snprintf(f->path, sizeof f->path, "%s/rtxd.db", f->dir);
    f->devices = NULL;
    f->dopts = devices_opts();
    struct rtx_store_options so = {.path = f->path, .sync_normal = sync_normal};
    struct rtx_err err = {0};
    ck_assert_msg(rtx_store_open(&so, &f->store, &err) == 0, "%s", err.msg);
}

void fx_open(struct fx *f) {
    fx_open_sync(f, false);
}

void fx_close(struct fx *f) {
    rtx_devices_free(f->devices);
    f->devices = NULL;
    rtx_store_close(f->store);
    f->store = NULL;
    nftw(f->dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

static const char *const lanes3[] = {"realtime", "interactive", "batch"};

struct rtx_devices_options devices_opts(void) {
    return (struct rtx_devices_options){
        .cpu_threads = 1,
        .plan_cache = 16, /* the daemon's default: every test runs with plan reuse */
        .plan_cache_bytes = (size_t)1 << 30,
    };
}

struct rtx_devices *fx_devices(struct fx *f, const struct rtx_devices_options *o) {
    rtx_devices_free(f->devices);
    f->devices = NULL;
    f->dopts = *o;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_devices_new(o, &f->devices, &err) == 0, "%s", err.msg);
    /* the learned costs, as rtxd opens them */
    ck_assert_msg(rtx_devices_costs_open(f->devices, f->store, &err) == 0, "%s", err.msg);
    return f->devices;
}

void fx_plan_cache(struct fx *f, struct rtx_jobs_options *o, int plans, size_t bytes) {
    struct rtx_devices_options d = f->dopts;
    d.plan_cache = plans;
    d.plan_cache_bytes = bytes;
    o->devices = fx_devices(f, &d);
}

struct rtx_device_info dev_info(struct fx *f, int slot) {
    struct rtx_device_info info;
    struct rtx_device *d = rtx_devices_get(f->devices, slot);
    ck_assert_ptr_nonnull(d);
    rtx_device_info(d, &info);
    return info;
}

struct rtx_jobs_options jobs_opts(struct fx *f, int workers) {
    if (!f->devices) fx_devices(f, &f->dopts);
    return (struct rtx_jobs_options){
        .store = f->store,
        .workers = workers,
        .cpu_threads = 1,
        .limits = rtx_limits_default(),
        .max_queued = 1000,
        .default_restart_policy = RTX_RESTART_RERUN,
        .n_lanes = 3,
        .lanes = lanes3,
        .default_lane = "batch",
        .devices = f->devices,
        .jobs_reserve = 0.25, /* the daemon's default */
    };
}

struct rtx_jobs *start(const struct rtx_jobs_options *o) {
    struct rtx_jobs *j = NULL;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_jobs_start(o, &j, &err) == 0, "%s", err.msg);
    return j;
}

struct rtx_graph *small_graph_seeded(unsigned wseed) {
    struct rtx_graph *g = NULL;
    struct rtx_err err = {0};
    ck_assert(rtx_graph_new("small", &g, &err) == 0);
    ck_assert(rtx_graph_add_input(g, "x", RTX_F32, 2, (const int64_t[]){-1, 3}, &err) >= 0);
    struct rtx_tensor *w = tu_tensor_random(RTX_F32, 2, (const int64_t[]){3, 4}, -1, 1, wseed);
    struct rtx_tensor *b = tu_tensor_random(RTX_F32, 1, (const int64_t[]){4}, -1, 1, 8);
    ck_assert(rtx_graph_add_initializer(g, "w", w, &err) >= 0);
    ck_assert(rtx_graph_add_initializer(g, "b", b, &err) >= 0);
    rtx_tensor_unref(w);
    rtx_tensor_unref(b);
    ck_assert(rtx_graph_add_node(g, "matmul", "mm", (const char *[]){"x", "w"}, 2,
                                 (const char *[]){"xw"}, 1, &err) >= 0);
    ck_assert(rtx_graph_add_node(g, "add", "bias", (const char *[]){"xw", "b"}, 2,
                                 (const char *[]){"z"}, 1, &err) >= 0);
    ck_assert(rtx_graph_add_node(g, "relu", "act", (const char *[]){"z"}, 1, (const char *[]){"y"},
                                 1, &err) >= 0);
    ck_assert(rtx_graph_add_output(g, "y", &err) == 0);
    return g;
}

struct rtx_graph *small_graph(void) {
    return small_graph_seeded(7);
}

void *make_request(const struct rtx_graph *g, int n_inputs, const char *const *names,
                   struct rtx_tensor *const *inputs, const struct req_opts *o,
                   size_t *len) {
    struct rtx_err err = {0};
    void *gbytes = NULL;
    size_t glen = 0;
    ck_assert_msg(rtx_graph_encode(g, &gbytes, &glen, &err) == 0, "%s", err.msg);
    Rtx__V1__Graph *gm = rtx__v1__graph__unpack(NULL, glen, gbytes);
    ck_assert_ptr_nonnull(gm);
    rtx_free(gbytes);

    Rtx__V1__SubmitRequest req = RTX__V1__SUBMIT_REQUEST__INIT;
    req.graph = gm;
    Rtx__V1__Tensor tm[8];
    Rtx__V1__Tensor *tp[8];
    ck_assert_int_le(n_inputs, 8);
    for (int i = 0; i < n_inputs; i++) {
        rtx__v1__tensor__init(&tm[i]);
        tm[i].name = (char *)names[i];
        tm[i].dtype = (Rtx__V1__DataType)(inputs[i]->dtype + 1); /* wire = rtx dtype + 1 */
        tm[i].n_dims = (size_t)inputs[i]->ndim;
        tm[i].dims = inputs[i]->dims;
        tm[i].data.len = rtx_tensor_nbytes(inputs[i]);
        tm[i].data.data = rtx_tensor_data(inputs[i]);
        tp[i] = &tm[i];
    }
    req.n_inputs = (size_t)n_inputs;
    req.inputs = tp;
    Rtx__V1__Label lm[8];
    Rtx__V1__Label *lp[8];
    if (o) {
        if (o->lane) req.lane = (char *)o->lane;
        req.deadline_unix_ms = o->deadline_ms;
        if (o->idempotency_key) req.idempotency_key = (char *)o->idempotency_key;
        req.restart_policy = (Rtx__V1__RestartPolicy)o->restart_policy;
        ck_assert_int_le(o->n_labels, 8);
        for (int i = 0; i < o->n_labels; i++) {
            rtx__v1__label__init(&lm[i]);
            lm[i].key = (char *)o->labels[2 * i];
            lm[i].value = (char *)o->labels[2 * i + 1];
            lp[i] = &lm[i];
        }
        req.n_labels = (size_t)o->n_labels;
        req.labels = lp;
        if (o->device) req.device = (char *)o->device;
    }
    *len = rtx__v1__submit_request__get_packed_size(&req);
    void *out = malloc(*len ? *len : 1);
    ck_assert_ptr_nonnull(out);
    rtx__v1__submit_request__pack(&req, out);
    rtx__v1__graph__free_unpacked(gm, NULL);
    return out;
}

enum rtx_job_state wait_state(struct rtx_store *s, const char *id, int state,
                              int timeout_ms) {
    for (int waited = 0;; waited++) {
        struct rtx_job_info info = {0};
        struct rtx_err err = {0};
        ck_assert_msg(rtx_store_job_get(s, id, &info, &err) == 0, "%s", err.msg);
        enum rtx_job_state st = info.state;
        rtx_job_info_clear(&info);
        if ((state == 0 && rtx_job_state_is_terminal(st)) || (int)st == state) return st;
        ck_assert_msg(waited < timeout_ms, "job %s still %s after %d ms", id,
                      rtx_job_state_name(st), timeout_ms);
        usleep(1000);
    }
}

struct rtx_graph *long_graph(int n) {
    struct rtx_graph *g = NULL;
    struct rtx_err err = {0};
    ck_assert(rtx_graph_new("long", &g, &err) == 0);
    ck_assert(rtx_graph_add_input(g, "x", RTX_F32, 2, (const int64_t[]){512, 512}, &err) >= 0);
    struct rtx_tensor *w = tu_tensor_random(RTX_F32, 2, (const int64_t[]){512, 512}, -0.1, 0.1, 5);
    ck_assert(rtx_graph_add_initializer(g, "w", w, &err) >= 0);
    rtx_tensor_unref(w);
    char prev[16] = "x", mm[16], act[16];
    for (int i = 0; i < n; i++) {
        snprintf(mm, sizeof mm, "mm%d", i);
        snprintf(act, sizeof act, "act%d", i);
        ck_assert(rtx_graph_add_node(g, "matmul", mm, (const char *[]){prev, "w"}, 2,
                                     (const char *[]){mm}, 1, &err) >= 0);
        ck_assert(rtx_graph_add_node(g, "tanh", act, (const char *[]){mm}, 1,
                                     (const char *[]){act}, 1, &err) >= 0);
        memcpy(prev, act, sizeof prev);
    }
    ck_assert(rtx_graph_add_output(g, prev, &err) == 0);
    return g;
}

int submit_x(struct rtx_jobs *j, const struct rtx_graph *g, struct rtx_tensor *x,
             const struct req_opts *o, char id[RTX_JOB_ID_LEN], bool *dedup,
             struct rtx_err *err) {
    size_t len;
    void *req = make_request(g, 1, (const char *[]){"x"}, &x, o, &len);
    int rc = rtx_jobs_submit(j, req, len, id, dedup, err);
    free(req);
    return rc;
}

void submit_ok(struct rtx_jobs *j, const struct rtx_graph *g, struct rtx_tensor *x,
               const struct req_opts *o, char id[RTX_JOB_ID_LEN]) {
    struct rtx_err err = {0};
    bool dedup = false;
    ck_assert_msg(submit_x(j, g, x, o, id, &dedup, &err) == 0, "%s", err.msg);
    ck_assert(!dedup);
}

struct rtx_job_info get_job(struct rtx_store *s, const char *id) {
    struct rtx_job_info info = {0};
    struct rtx_err err = {0};
    ck_assert_msg(rtx_store_job_get(s, id, &info, &err) == 0, "%s", err.msg);
    return info;
}

int count_jobs(struct rtx_store *s) {
    struct rtx_job_filter flt = {.limit = 1000};
    struct rtx_job_info *jobs = NULL;
    int n = 0;
    char next[RTX_JOB_ID_LEN + 32];
    struct rtx_err err = {0};
    ck_assert_msg(rtx_store_job_list(s, &flt, &jobs, &n, next, &err) == 0, "%s", err.msg);
    rtx_job_info_free_array(jobs, n);
    return n;
}

void settle(struct rtx_jobs *j) {
    for (int waited = 0;; waited++) {
        struct rtx_jobs_stats st;
        rtx_jobs_get_stats(j, &st);
        int busy = 0;
        for (int i = 0; i < st.n_lanes; i++)
            busy += st.lanes[i].queued + st.lanes[i].running;
        if (busy == 0) return;
        ck_assert_msg(waited < 10000, "jobs still busy after 10 s");
        usleep(1000);
    }
}

struct rtx_tensor *small_x(void) {
    return tu_tensor_random(RTX_F32, 2, (const int64_t[]){2, 3}, -1, 1, 3);
}

struct rtx_tensor *long_x(void) {
    return tu_tensor_random(RTX_F32, 2, (const int64_t[]){512, 512}, -1, 1, 1);
}

void submit_running(struct rtx_jobs *j, struct fx *f, const struct rtx_graph *g,
                    struct rtx_tensor *x, const struct req_opts *o,
                    char id[RTX_JOB_ID_LEN]) {
    submit_ok(j, g, x, o, id);
    wait_state(f->store, id, RTX_JOB_RUNNING, 10000);
}

void finish(struct fx *f, struct rtx_jobs *j, struct rtx_graph *g, struct rtx_tensor *x) {
    rtx_jobs_stop(j);
    rtx_tensor_unref(x);
    rtx_graph_free(g);
    fx_close(f);
}

static int g_seq; /* atomic */

void rec_init(struct rec *r) {
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
}

void rec_cb(void *ctx, const struct rtx_job_info *job, const struct rtx_jobs_run *run,
            bool last) {
    struct rec *r = ctx;
    ck_assert_int_eq(__atomic_fetch_add(&r->in_cb, 1, __ATOMIC_SEQ_CST), 0);
    __atomic_fetch_add(&r->calls, 1, __ATOMIC_SEQ_CST);
    if (r->delay_us) usleep((useconds_t)r->delay_us);
    pthread_mutex_lock(&r->mu);
    if (r->n < 16) {
        r->states[r->n] = job->state;
        r->last[r->n] = last;
        r->have_run[r->n] = run != NULL;
        if (run) r->runs[r->n] = *run;
        r->seq[r->n] = __atomic_add_fetch(&g_seq, 1, __ATOMIC_SEQ_CST);
        r->n++;
    }
    pthread_mutex_unlock(&r->mu);
    __atomic_fetch_sub(&r->in_cb, 1, __ATOMIC_SEQ_CST);
}

void rec_wait_last(struct rec *r, int timeout_ms) {
    for (int waited = 0;; waited++) {
        pthread_mutex_lock(&r->mu);
        bool done = r->n > 0 && r->last[r->n - 1];
        pthread_mutex_unlock(&r->mu);
        if (done) return;
        ck_assert_msg(waited < timeout_ms, "watch did not end in %d ms", timeout_ms);
        usleep(1000);
    }
}

int64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ------------------------------------------------------------------------------------------
 * Fake CUDA devices
 * ---------------------------------------------------------------------------------------- */

int fake_refuse_op = -1;
int fake_fail_device = -1;
bool fake_capture;
int fake_fault_next;
struct fake_gpu *fake_made[4];

struct rtx_backend_graph {
    struct fake_rec *recs;
    int n;
};

static const char *fake_gpu_name(struct rtx_backend *be) {
    return ((struct fake_gpu *)be->ctx)->name;
}
static void fake_gpu_free(struct rtx_backend *be) {
    struct fake_gpu *f = be->ctx;
    for (int d = 0; d < 4; d++)
        if (fake_made[d] == f) fake_made[d] = NULL;
    rtx_backend_free(f->cpu);
    free(f->recs);
    free(f);
}
static bool fake_gpu_supports(struct rtx_backend *be, const struct rtx_graph *g,
                              const struct rtx_node *n) {
    if ((int)n->op == fake_refuse_op) return false;
    return rtx_backend_supports_node(((struct fake_gpu *)be->ctx)->cpu, g, n);
}
static int fake_gpu_check(struct fake_gpu *f, struct rtx_err *err) {
    if (f->faulted)
        return rtx_err_set(err, RTX_EGPU, "%s is unusable after an earlier device error "
                           "(cudaErrorIllegalAddress: fake)", f->name);
    return 0;
}
static int fake_gpu_buffer(struct rtx_backend *be, size_t bytes, struct rtx_buffer **out,
                           struct rtx_err *err) {
    struct fake_gpu *f = be->ctx;
    int rc = fake_gpu_check(f, err);
    if (rc) return rc;
    __atomic_fetch_add(&f->buffers, 1, __ATOMIC_SEQ_CST);
    return rtx_backend_buffer_new(f->cpu, bytes, out, err);
}
static int fake_gpu_run(struct rtx_backend *be, const struct rtx_node_args *a,
                        struct rtx_err *err) {
    struct fake_gpu *f = be->ctx;
    int rc = fake_gpu_check(f, err);
    if (rc) return rc;
    const char *name = a->node->name ? a->node->name : "";
    if (strncmp(name, "sticky", 6) == 0 ||
        __atomic_exchange_n(&fake_fault_next, 0, __ATOMIC_SEQ_CST)) {
        f->faulted = true;
        return rtx_err_set(err, RTX_EGPU, "node '%s': cudaErrorIllegalAddress (fake)", name);
    }
    if (strncmp(name, "oom", 3) == 0)
        return rtx_err_set(err, RTX_ENOMEM, "node '%s': out of device memory (fake)", name);
    if (!f->capturing) return rtx_backend_run_node(f->cpu, a, err);
    ck_assert(a->n_in <= FAKE_REC_MAX_IO && a->n_out <= FAKE_REC_MAX_IO);
    if (f->n_recs == f->cap_recs) {
        f->cap_recs = f->cap_recs ? 2 * f->cap_recs : 8;
        f->recs = realloc(f->recs, sizeof *f->recs * (size_t)f->cap_recs);
        ck_assert_ptr_nonnull(f->recs);
    }
    struct fake_rec *r = &f->recs[f->n_recs++];
    *r = (struct fake_rec){.graph = a->graph, .node = a->node, .n_in = a->n_in,
                           .n_out = a->n_out};
    for (int i = 0; i < a->n_in; i++) r->in[i] = a->in[i];
    for (int i = 0; i < a->n_out; i++) r->out[i] = a->out[i];
    return 0;
}
static int fake_capture_begin(struct rtx_backend *be, struct rtx_err *err) {
    struct fake_gpu *f = be->ctx;
    int rc = fake_gpu_check(f, err);
    if (rc) return rc;
    ck_assert(!f->capturing);
    f->capturing = true;
    f->n_recs = 0;
    return 0;
}
static int fake_capture_end(struct rtx_backend *be, bool keep, struct rtx_backend_graph **graph,
                            struct rtx_err *err) {
    struct fake_gpu *f = be->ctx;
    ck_assert(f->capturing);
    f->capturing = false;
    *graph = NULL;
    if (!keep) return 0;
    struct rtx_backend_graph *g = calloc(1, sizeof *g);
    ck_assert_ptr_nonnull(g);
    g->recs = f->recs;
    g->n = f->n_recs;
    f->recs = NULL;
    f->n_recs = f->cap_recs = 0;
    *graph = g;
    return 0;
}
static int fake_graph_launch(struct rtx_backend *be, struct rtx_backend_graph *g,
                             struct rtx_err *err) {
    struct fake_gpu *f = be->ctx;
    int rc = fake_gpu_check(f, err);
    __atomic_fetch_add(&f->launches, 1, __ATOMIC_SEQ_CST);
    for (int i = 0; i < g->n && rc == 0; i++) {
        struct fake_rec *r = &g->recs[i];
        struct rtx_node_args a = {.graph = r->graph, .node = r->node, .n_in = r->n_in,
                                  .in = r->in, .n_out = r->n_out, .out = r->out};
        rc = rtx_backend_run_node(f->cpu, &a, err);
    }
    return rc;
}
static void fake_graph_free(struct rtx_backend *be, struct rtx_backend_graph *g) {
    free(g->recs);
    free(g);
}
static int fake_gpu_sync(struct rtx_backend *be, struct rtx_err *err) {
    return fake_gpu_check(be->ctx, err);
}
static int fake_gpu_copy(struct fake_gpu *f, const struct rtx_tensor *src,
                         struct rtx_tensor **dst, struct rtx_err *err) {
    int rc = fake_gpu_check(f, err);
    if (rc == 0) rc = rtx_tensor_new(src->dtype, src->ndim, src->dims, dst, err);
    if (rc == 0) memcpy(rtx_tensor_data(*dst), rtx_tensor_data(src), rtx_tensor_nbytes(src));
    return rc;
}
static int fake_gpu_upload(struct rtx_backend *be, const struct rtx_tensor *host,
                           struct rtx_tensor **dev, struct rtx_err *err) {
    return fake_gpu_copy(be->ctx, host, dev, err);
}
static int fake_gpu_download(struct rtx_backend *be, const struct rtx_tensor *dev,
                             struct rtx_tensor **host, struct rtx_err *err) {
    return fake_gpu_copy(be->ctx, dev, host, err);
}
static const struct rtx_backend_i fake_gpu_iface = {
    .name = fake_gpu_name,
    .free = fake_gpu_free,
    .supports_node = fake_gpu_supports,
    .buffer_new = fake_gpu_buffer,
    .run_node = fake_gpu_run,
    .synchronize = fake_gpu_sync,
    .upload = fake_gpu_upload,
    .download = fake_gpu_download,
};
static const struct rtx_backend_i fake_gpu_capture_iface = {
    .name = fake_gpu_name,
    .free = fake_gpu_free,
    .supports_node = fake_gpu_supports,
    .buffer_new = fake_gpu_buffer,
    .run_node = fake_gpu_run,
    .synchronize = fake_gpu_sync,
    .upload = fake_gpu_upload,
    .download = fake_gpu_download,
    .capture_begin = fake_capture_begin,
    .capture_end = fake_capture_end,
    .graph_launch = fake_graph_launch,
    .graph_free = fake_graph_free,
};

static int fake_gpu_new(void *ctx, int device, struct rtx_mem_account *account,
                        struct rtx_backend **out, struct rtx_err *err) {
    if (device == fake_fail_device)
        return rtx_err_set(err, RTX_EGPU, "cuda:%d: cudaErrorDevicesUnavailable (fake)", device);
    struct fake_gpu *f = calloc(1, sizeof *f);
    ck_assert_ptr_nonnull(f);
    struct rtx_cpu_options co = {.n_threads = 1};
    ck_assert(rtx_backend_cpu_new(&co, &f->cpu, err) == 0);
    snprintf(f->name, sizeof f->name, "cuda:%d", device);
    f->device = device;
    f->be.iface = fake_capture ? &fake_gpu_capture_iface : &fake_gpu_iface;
    f->be.ctx = f;
    if (device >= 0 && device < 4) fake_made[device] = f;
    *out = &f->be;
    return 0;
}

/* Device pool: the buffers allocated and 1 MiB reserved per backend; pinned: empty. */
static int fake_gpu_pools(void *ctx, struct rtx_backend *be, struct rtx_mem_pool_stats *dev,
                          struct rtx_mem_pool_stats *pinned, struct rtx_err *err) {
    ck_assert(be->iface == &fake_gpu_iface || be->iface == &fake_gpu_capture_iface);
    struct fake_gpu *f = be->ctx;
    memset(dev, 0, sizeof *dev);
    memset(pinned, 0, sizeof *pinned);
    dev->total.n_allocs = (uint64_t)__atomic_load_n(&f->buffers, __ATOMIC_SEQ_CST);
    dev->total.bytes_reserved = (size_t)1 << 20;
    dev->total.bytes_free = (size_t)1 << 20;
    dev->total.bytes_free_largest = (size_t)1 << 19;
    dev->cap_bytes = (size_t)8 << 20;
    return 0;
}

static const struct rtx_device_gpu_i fake_gpus = {
    .backend_new = fake_gpu_new,
    .pool_stats = fake_gpu_pools,
};

void gpu_list_init(struct gpu_list *g, int n) {
    memset(g, 0, sizeof *g);
    for (int i = 0; i < n; i++) {
        g->devs[i].index = i;
        snprintf(g->devs[i].name, sizeof g->devs[i].name, "Fake GPU %d", i);
        g->devs[i].healthy = true;
        g->devs[i].memory_bytes = (size_t)1 << 30; /* room in the budget for a served model too */
    }
    g->l.n = n;
    g->l.devs = n ? g->devs : NULL;
    if (!n) snprintf(g->l.absent, sizeof g->l.absent, "no NVIDIA driver is installed");
}

struct rtx_jobs_options gpu_opts(struct fx *f, struct gpu_list *g, int per_device) {
    struct rtx_devices_options d = devices_opts();
    d.gpus = &g->l;
    d.gpu_iface = &fake_gpus;
    fx_devices(f, &d);
    struct rtx_jobs_options o = jobs_opts(f, 1);
    o.gpu_workers_per_device = per_device;
    return o;
}

struct rtx_jobs *gpu_start(struct fx *f, struct gpu_list *gl, int n, int per_device,
                           struct rtx_jobs_options *o) {
    fx_open_sync(f, true);
    gpu_list_init(gl, n);
    *o = gpu_opts(f, gl, per_device);
    return start(o);
}

struct rtx_graph *named_graph(const char *node) {
    struct rtx_graph *g = NULL;
    struct rtx_err err = {0};
    ck_assert(rtx_graph_new("named", &g, &err) == 0);
    ck_assert(rtx_graph_add_input(g, "x", RTX_F32, 2, (const int64_t[]){-1, 3}, &err) >= 0);
    ck_assert(rtx_graph_add_node(g, "relu", node, (const char *[]){"x"}, 1, (const char *[]){"y"},
                                 1, &err) >= 0);
    ck_assert(rtx_graph_add_output(g, "y", &err) == 0);
    return g;
}

struct rtx_job_info run_on(struct rtx_jobs *j, struct fx *f, const struct rtx_graph *g,
                           struct rtx_tensor *x, const char *device) {
    struct req_opts ro = {.device = device};
    char id[RTX_JOB_ID_LEN];
    submit_ok(j, g, x, &ro, id);
    wait_state(f->store, id, 0, 20000);
    return get_job(f->store, id);
}

struct rtx_jobs_device dev_stats(struct rtx_jobs *j, int slot) {
    struct rtx_jobs_stats st;
    rtx_jobs_get_stats(j, &st);
    ck_assert_int_lt(slot, st.n_devices);
    return st.devices[slot];
}
