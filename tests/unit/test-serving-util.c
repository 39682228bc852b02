/*
 * test-serving-util.c - the serving tests' repositories, requests and checks
 * (tests/unit/test-serving-util.h).
 */
#include <check.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tests/unit/test-serving-util.h"

/* ------------------------------------------------------------------------------------------
 * Repository fixtures
 * ---------------------------------------------------------------------------------------- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    return remove(path);
}

void rm_tree(const char *dir) {
    nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

void write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "%s", path);
    ck_assert_uint_eq(fwrite(data, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
}

void write_text(const char *path, const char *text) {
    write_file(path, text, strlen(text));
}

const float scale_w[4] = {1.5f, -2.0f, 0.25f, 3.0f};

/* DIR/model.safetensors holding w = scale_w * factor. */
void write_weights(const char *dir, float factor) {
    char path[1024], h[160];
    int n = snprintf(h, sizeof h,
                     "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}");
    while ((8 + n) % 8) h[n++] = ' ';
    uint8_t buf[8 + sizeof h + 16];
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(buf + 8, h, (size_t)n);
    float w[4];
    for (int i = 0; i < 4; i++)
        w[i] = scale_w[i] * factor;
    memcpy(buf + 8 + n, w, sizeof w);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    write_file(path, buf, 8 + (size_t)n + sizeof w);
}

/* DIR/model.rtxg: the scale graph, w declared as an input (bound from the weights). */
void write_graph(const char *dir, bool with_weight_input) {
    struct rtx_graph *g;
    struct rtx_err err = {0};
    ck_assert(rtx_graph_new("scale", &g, &err) == 0);
    const int64_t d[2] = {-1, 4}, wd[1] = {4};
    ck_assert(rtx_graph_add_input(g, "a", RTX_F32, 2, d, &err) >= 0);
    ck_assert(rtx_graph_add_input(g, "b", RTX_F32, 2, d, &err) >= 0);
    if (with_weight_input) ck_assert(rtx_graph_add_input(g, "w", RTX_F32, 1, wd, &err) >= 0);
    const char *mul_in[] = {"a", "w"}, *add_in[] = {"aw", "b"}, *sub_in[] = {"a", "b"};
    const char *aw = "aw", *y = "y", *z = "z";
    ck_assert(rtx_graph_add_node(g, "mul", "mul", mul_in, 2, &aw, 1, &err) >= 0);
    ck_assert(rtx_graph_add_node(g, "add", "add", add_in, 2, &y, 1, &err) >= 0);
    ck_assert(rtx_graph_add_node(g, "sub", "sub", sub_in, 2, &z, 1, &err) >= 0);
    ck_assert(rtx_graph_add_output(g, "y", &err) == 0);
    ck_assert(rtx_graph_add_output(g, "z", &err) == 0);
    char path[1024];
    snprintf(path, sizeof path, "%s/model.rtxg", dir);
    ck_assert_msg(rtx_graph_save_file(g, path, &err) == 0, "%s", err.msg);
    rtx_graph_free(g);
}

/* A config.json for the scale model; `extra` is appended inside the object (", ..."). */
void write_config(const char *repo, const char *name, int max_batch, const char *extra) {
    char path[1024], text[2048];
    snprintf(text, sizeof text,
             "{\"name\": \"%s\", \"platform\": \"rtx_graph\", \"max_batch_size\": %d,\n"
             " \"input\": [{\"name\": \"a\", \"data_type\": \"TYPE_FP32\", \"dims\": [4]},\n"
             "            {\"name\": \"b\", \"data_type\": \"TYPE_FP32\", \"dims\": [4]}],\n"
             " \"output\": [{\"name\": \"y\", \"data_type\": \"TYPE_FP32\", \"dims\": [4]},\n"
             "             {\"name\": \"z\", \"data_type\": \"TYPE_FP32\", \"dims\": [4]}]%s}\n",
             name, max_batch, extra ? extra : "");
    snprintf(path, sizeof path, "%s/%s", repo, name);
    mkdir(path, 0777);
    snprintf(path, sizeof path, "%s/%s/config.json", repo, name);
    write_text(path, text);
}

/* REPO/NAME/VERSION with graph and weights (factor scales w). */
void write_version(const char *repo, const char *name, int version, float factor) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s/%d", repo, name, version);
    mkdir(dir, 0777);
    write_graph(dir, true);
    write_weights(dir, factor);
}

/* Overwrites <repo>/<name>/config.json with a config of max_batch_size 8, inputs a (data type
 * a_type) and b (TYPE_FP32) of dims [4] and one TYPE_FP32 output `out` of dims [out_dim]. */
void write_io_config(const char *repo, const char *name, const char *a_type,
                     const char *out, int out_dim) {
    char path[1024], text[1024];
    snprintf(path, sizeof path, "%s/%s/config.json", repo, name);
    snprintf(text, sizeof text,
             "{\"max_batch_size\": 8, \"input\": [{\"name\": \"a\", \"data_type\": \"%s\", "
             "\"dims\": [4]}, {\"name\": \"b\", \"data_type\": \"TYPE_FP32\", \"dims\": [4]}], "
             "\"output\": [{\"name\": \"%s\", \"data_type\": \"TYPE_FP32\", \"dims\": [%d]}]}",
             a_type, out, out_dim);
    write_text(path, text);
}

void write_model(const char *repo, const char *name, int max_batch, const char *extra) {
    write_config(repo, name, max_batch, extra);
    write_version(repo, name, 1, 1.0f);
}


/* Replaces f's device set with one made with o (NULL: the CPU, one thread, a plan cache). */
void serving_fx_devices(struct serving_fx *f, const struct rtx_devices_options *o) {
    struct rtx_devices_options dflt = {.cpu_threads = 1, .plan_cache = 16};
    struct rtx_err err = {0};
    rtx_devices_free(f->devices);
    f->devices = NULL;
    ck_assert_msg(rtx_devices_new(o ? o : &dflt, &f->devices, &err) == 0, "%s", err.msg);
}

void fx_repo(struct serving_fx *f) {
    memset(f, 0, sizeof *f);
    snprintf(f->repo, sizeof f->repo, "/tmp/rtx-serving-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(f->repo));
    serving_fx_devices(f, NULL);
}

struct rtx_serving_options fx_opts(struct serving_fx *f, enum rtx_model_control c) {
    return (struct rtx_serving_options){
        .repository = f->repo, .control = c, .poll_ms = 20, .devices = f->devices,
        .max_queue = 1000,
    };
}

void fx_start_opts(struct serving_fx *f, const struct rtx_serving_options *o) {
    struct rtx_err err = {0};
    ck_assert_msg(rtx_serving_start(o, &f->s, &err) == 0, "%s", err.msg);
}

void fx_start(struct serving_fx *f, enum rtx_model_control c) {
    struct rtx_serving_options o = fx_opts(f, c);
    fx_start_opts(f, &o);
}

/* A new repository holding one model `name` (write_model(): max_batch, extra), served with
 * model control c. */
void fx_model(struct serving_fx *f, const char *name, int max_batch, const char *extra,
              enum rtx_model_control c) {
    fx_repo(f);
    write_model(f->repo, name, max_batch, extra);
    fx_start(f, c);
}

void fx_stop(struct serving_fx *f) {
    rtx_serving_stop(f->s);
    f->s = NULL;
    rtx_devices_free(f->devices);
    f->devices = NULL;
    rm_tree(f->repo);
}

/* ------------------------------------------------------------------------------------------
 * Requests
 * ---------------------------------------------------------------------------------------- */


void call_init(struct call *c) {
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
}

void on_done(void *ctx, const struct rtx_infer_result *res) {
    struct call *c = ctx;
    pthread_mutex_lock(&c->mu);
    c->entered = true;
    pthread_cond_broadcast(&c->cv);
    while (c->gate)
        pthread_cond_wait(&c->cv, &c->mu);
    c->code = res->code;
    snprintf(c->msg, sizeof c->msg, "%s", res->msg);
    c->batch_size = res->batch_size;
    c->queue_ns = res->queue_ns;
    c->n_outputs = res->n_outputs;
    for (int j = 0; j < res->n_outputs; j++) {
        const struct rtx_tensor *t = res->outputs[j];
        float *dst = strcmp(res->output_names[j], "y") == 0 ? c->y : c->z;
        if (j == 0) snprintf(c->out0, sizeof c->out0, "%s", res->output_names[j]);
        int64_t n = rtx_tensor_numel(t);
        for (int64_t i = 0; i < n && i < 64 * 4; i++)
            dst[i] = (float)rtx_tensor_get(t, i);
    }
    c->done++;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

void call_wait(struct call *c) {
    pthread_mutex_lock(&c->mu);
    while (!c->done)
        pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
}

void call_wait_entered(struct call *c) {
    pthread_mutex_lock(&c->mu);
    while (!c->entered)
        pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
}

void call_open_gate(struct call *c) {
    pthread_mutex_lock(&c->mu);
    c->gate = false;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

void call_close(struct call *c) {
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
}

/* a[r][k] = seed + r + k / 8, b[r][k] = seed * 0.5 - k, for `rows` rows. */
struct rtx_tensor *make_input(int rows, float seed, bool is_b) {
    struct rtx_tensor *t;
    struct rtx_err err = {0};
    const int64_t d[2] = {rows, 4};
    ck_assert(rtx_tensor_new(RTX_F32, 2, d, &t, &err) == 0);
    float *p = rtx_tensor_data(t);
    for (int r = 0; r < rows; r++)
        for (int k = 0; k < 4; k++)
            p[r * 4 + k] = is_b ? seed * 0.5f - (float)k : seed + (float)r + (float)k / 8;
    return t;
}

/* Submits a scale request of `rows` rows to the newest version of `name`, with the rest of
 * the request (id, deadline, cancel, priority, lane, callback) from tmpl; returns the code of
 * rtx_serving_infer (and its message in err). */
int submit_req(struct rtx_serving *s, const char *name, int rows, float seed,
               const struct rtx_infer_request *tmpl, struct rtx_err *err) {
    struct rtx_model *m;
    int rc = rtx_serving_model_get(s, name, 0, &m, err);
    if (rc) return rc;
    struct rtx_tensor *a = make_input(rows, seed, false), *b = make_input(rows, seed, true);
    struct rtx_infer_input ins[2] = {{"a", a}, {"b", b}};
    struct rtx_infer_request req = *tmpl;
    req.model = m;
    req.n_inputs = 2;
    req.inputs = ins;
    rc = rtx_serving_infer(s, &req, err);
    rtx_tensor_unref(a);
    rtx_tensor_unref(b);
    rtx_model_unref(m);
    return rc;
}

int submit(struct rtx_serving *s, const char *name, int rows, float seed, struct call *c,
           int64_t deadline_ns, const volatile int *cancel, struct rtx_err *err) {
    struct rtx_infer_request req = {
        .id = "req", .deadline_ns = deadline_ns, .cancel = cancel, .done = on_done, .ctx = c,
    };
    return submit_req(s, name, rows, seed, &req, err);
}

/* submit() with a KServe priority, a lane name and a callback of one's own. */
int submit_lane(struct rtx_serving *s, const char *name, int rows, float seed,
                rtx_infer_done_fn done, void *ctx, int64_t deadline_ns, int priority,
                const char *lane, struct rtx_err *err) {
    struct rtx_infer_request req = {
        .id = "lane", .deadline_ns = deadline_ns, .priority = priority, .lane = lane,
        .done = done, .ctx = ctx,
    };
    return submit_req(s, name, rows, seed, &req, err);
}

/* Holds the only worker of `name` in the callback of a request of `rows` rows and KServe
 * priority `priority`. */
void hold_worker(struct rtx_serving *s, const char *name, int rows, int priority,
                 struct call *gate) {
    struct rtx_err err = {0};
    call_init(gate);
    gate->gate = true;
    ck_assert_msg(submit_lane(s, name, rows, 0.0f, on_done, gate, 0, priority, NULL, &err) == 0,
                  "%s", err.msg);
    call_wait_entered(gate);
}

void check_scale(const struct call *c, int rows, float seed, float factor) {
    ck_assert_msg(c->code == 0, "request failed: %s", c->msg);
    for (int r = 0; r < rows; r++)
        for (int k = 0; k < 4; k++) {
            float a = seed + (float)r + (float)k / 8, b = seed * 0.5f - (float)k;
            ck_assert_float_eq(c->y[r * 4 + k], a * (scale_w[k] * factor) + b);
            ck_assert_float_eq(c->z[r * 4 + k], a - b);
        }
}

struct rtx_model_stats get_stats(struct rtx_serving *s, const char *name) {
    struct rtx_model_stats *st = NULL, out;
    int n = 0;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_serving_stats(s, name, 0, &st, &n, &err) == 0, "%s", err.msg);
    ck_assert_int_ge(n, 1);
    out = st[n - 1];
    rtx_free(st);
    return out;
}

enum rtx_model_state index_state(struct rtx_serving *s, const char *name, char *reason) {
    struct rtx_model_index_entry *e;
    int n;
    struct rtx_err err = {0};
    ck_assert(rtx_serving_index(s, false, &e, &n, &err) == 0);
    enum rtx_model_state st = RTX_MODEL_STATE_COUNT;
    for (int i = 0; i < n; i++)
        if (strcmp(e[i].name, name) == 0) {
            st = e[i].state;
            if (reason) snprintf(reason, 256, "%.255s", e[i].reason);
        }
    rtx_free(e);
    return st;
}

void sleep_ms(int ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}
