/*
 * test-serving-requests.c - inference requests through the serving core (serving/serving.h):
 * request checks before queuing, dynamic batching (merge, split, preferred sizes, queue delay,
 * max batch, identical outputs with batching on and off, for elementwise ops and a GEMM
 * model), queue bound, deadlines, cancel, instances in parallel, stop answering every request
 * once, statistics, and an out-of-memory loop over a load.
 *
 * The test model "scale" and the fixtures are in test-serving-util.h.
 */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "serving/serving-impl.h"
#include "tests/unit/test-serving-util.h"

/* ------------------------------------------------------------------------------------------
 * Requests
 * ---------------------------------------------------------------------------------------- */

START_TEST(serving_rejects_bad_requests_before_queuing) {
    struct serving_fx f;
    fx_model(&f, "scale", 4, NULL, RTX_MODEL_CONTROL_NONE);
    struct rtx_model *m;
    struct rtx_err err = {0};
    ck_assert(rtx_serving_model_get(f.s, "scale", 0, &m, &err) == 0);
    struct rtx_tensor *a2 = make_input(2, 0, false), *b2 = make_input(2, 0, true);
    struct rtx_tensor *b3 = make_input(3, 0, true), *a5 = make_input(5, 0, false);
    struct rtx_tensor *b5 = make_input(5, 0, true), *i32, *flat;
    ck_assert(rtx_tensor_new(RTX_I32, 2, (const int64_t[]){2, 4}, &i32, &err) == 0);
    ck_assert(rtx_tensor_new(RTX_F32, 1, (const int64_t[]){4}, &flat, &err) == 0);
    struct rtx_tensor *a2x3;
    ck_assert(rtx_tensor_new(RTX_F32, 2, (const int64_t[]){2, 3}, &a2x3, &err) == 0);
    const char *y = "y", *q = "q", *yy[] = {"y", "y"};
    const struct {
        struct rtx_infer_input in[3];
        int n_in;
        const char *const *outs;
        int n_out;
        int code;
        const char *msg;
    } cases[] = {
        {{{"a", a2}}, 1, NULL, 0, RTX_EINVAL, "missing input 'b'"},
        {{{"a", a2}, {"b", b2}, {"c", b2}}, 3, NULL, 0, RTX_EINVAL, "unknown input 'c'"},
        {{{"a", a2}, {"a", a2}}, 2, NULL, 0, RTX_EINVAL, "input 'a' is given twice"},
        {{{"a", i32}, {"b", b2}}, 2, NULL, 0, RTX_EINVAL, "datatype INT32"},
        {{{"a", a2x3}, {"b", b2}}, 2, NULL, 0, RTX_EINVAL, "input 'a': shape f32[2,3]"},
        {{{"a", flat}, {"b", b2}}, 2, NULL, 0, RTX_EINVAL, "input 'a': shape"},
        {{{"a", a2}, {"b", b3}}, 2, NULL, 0, RTX_EINVAL, "batch size 3 differs"},
        {{{"a", a5}, {"b", b5}}, 2, NULL, 0, RTX_ELIMIT, "max_batch_size 4"},
        {{{"a", a2}, {"b", b2}}, 2, &q, 1, RTX_EINVAL, "unknown output 'q'"},
        {{{"a", a2}, {"b", b2}}, 2, yy, 2, RTX_EINVAL, "requested twice"},
    };
    struct call c;
    call_init(&c);
    int n_cases = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n_cases; i++) {
        struct rtx_infer_request req = {
            .model = m, .n_inputs = cases[i].n_in, .inputs = cases[i].in,
            .n_outputs = cases[i].n_out, .outputs = cases[i].outs, .done = on_done, .ctx = &c,
        };
        int rc = rtx_serving_infer(f.s, &req, &err);
        ck_assert_msg(rc == cases[i].code, "case %d: rc %d (%s)", i, rc, err.msg);
        ck_assert_msg(strstr(err.msg, cases[i].msg), "case %d: '%s' lacks '%s'", i, err.msg,
                      cases[i].msg);
    }
    /* a requested output comes alone */
    struct rtx_infer_input ok[2] = {{"a", a2}, {"b", b2}};
    struct rtx_infer_request req = {.model = m, .n_inputs = 2, .inputs = ok, .n_outputs = 1,
                                    .outputs = &y, .done = on_done, .ctx = &c};
    ck_assert(rtx_serving_infer(f.s, &req, &err) == 0);
    call_wait(&c);
    ck_assert_int_eq(c.done, 1); /* the rejected ones never called back */
    ck_assert_int_eq(c.n_outputs, 1);
    ck_assert_str_eq(c.out0, "y");
    struct rtx_model_stats st = get_stats(f.s, "scale");
    ck_assert_int_eq(st.failures[RTX_INFER_FAIL_REJECTED], n_cases);
    ck_assert_int_eq(st.success.count, 1);
    rtx_tensor_unref(a2);
    rtx_tensor_unref(b2);
    rtx_tensor_unref(b3);
    rtx_tensor_unref(a5);
    rtx_tensor_unref(b5);
    rtx_tensor_unref(i32);
    rtx_tensor_unref(flat);
    rtx_tensor_unref(a2x3);
    rtx_model_unref(m);
    call_close(&c);
    fx_stop(&f);
}
END_TEST

#define N_BATCH 6

START_TEST(batching_merges_splits_and_matches_unbatched) {
    struct serving_fx f;
    fx_repo(&f);
    /* a long delay: the batch closes at the preferred size 8, not on time */
    write_model(f.repo, "batched", 16,
                ", \"dynamic_batching\": {\"preferred_batch_size\": [8],"
                " \"max_queue_delay_microseconds\": 5000000}");
    write_model(f.repo, "plain", 16, NULL);
    fx_start(&f, RTX_MODEL_CONTROL_NONE);
    struct call on[N_BATCH], off[N_BATCH];
    struct rtx_err err = {0};
    const int rows[N_BATCH] = {1, 2, 1, 1, 2, 1}; /* 8 rows in all */
    int64_t t0 = rtx_mono_ns();
    for (int i = 0; i < N_BATCH; i++) {
        call_init(&on[i]);
        call_init(&off[i]);
        ck_assert(submit(f.s, "batched", rows[i], (float)i, &on[i], 0, NULL, &err) == 0);
        ck_assert(submit(f.s, "plain", rows[i], (float)i, &off[i], 0, NULL, &err) == 0);
    }
    for (int i = 0; i < N_BATCH; i++) {
        call_wait(&on[i]);
        call_wait(&off[i]);
        ck_assert_msg(on[i].code == 0 && off[i].code == 0, "%s %s", on[i].msg, off[i].msg);
        ck_assert_int_eq(on[i].batch_size, 8);
        ck_assert_int_eq(off[i].batch_size, rows[i]);
        ck_assert(memcmp(on[i].y, off[i].y, sizeof(float) * 4 * (size_t)rows[i]) == 0);
        ck_assert(memcmp(on[i].z, off[i].z, sizeof(float) * 4 * (size_t)rows[i]) == 0);
        check_scale(&on[i], rows[i], (float)i, 1.0f);
    }
    ck_assert_int_lt(rtx_mono_ns() - t0, 2000000000LL); /* did not wait for the delay */
    struct rtx_model_stats st = get_stats(f.s, "batched");
    ck_assert_int_eq(st.execution_count, 1);
    ck_assert_int_eq(st.inference_count, 8);
    ck_assert_int_eq(st.success.count, N_BATCH);
    ck_assert_int_eq(st.n_batch_stats, 1);
    ck_assert_int_eq(st.batch_stats[0].batch_size, 8);
    ck_assert_int_eq(st.batch_stats[0].compute_infer.count, 1);
    st = get_stats(f.s, "plain");
    ck_assert_int_eq(st.execution_count, N_BATCH);
    for (int i = 0; i < N_BATCH; i++) {
        call_close(&on[i]);
        call_close(&off[i]);
    }
    fx_stop(&f);
}
END_TEST

/* REPO/NAME/1: p = softmax(relu(x @ w1 + b1) @ w2 + b2), x f32 [batch, 64], weights from a
 * fixed seed in model.safetensors (the shape of the example mlp). */
static void write_mlp(const char *repo, const char *name, const char *extra) {
    char dir[1024], text[2048];
    snprintf(dir, sizeof dir, "%s/%s", repo, name);
    mkdir(dir, 0777);
    snprintf(text, sizeof text,
             "{\"max_batch_size\": 64, \"input\": [{\"name\": \"x\", \"data_type\": "
             "\"TYPE_FP32\", \"dims\": [64]}], \"output\": [{\"name\": \"p\", "
             "\"data_type\": \"TYPE_FP32\", \"dims\": [10]}]%s}",
             extra ? extra : "");
    snprintf(dir, sizeof dir, "%s/%s/config.json", repo, name);
    write_text(dir, text);
    snprintf(dir, sizeof dir, "%s/%s/1", repo, name);
    mkdir(dir, 0777);
    struct rtx_graph *g;
    struct rtx_err err = {0};
    ck_assert(rtx_graph_new("mlp", &g, &err) == 0);
    const char *names[4] = {"w1", "b1", "w2", "b2"};
    const int64_t shapes[4][2] = {{64, 128}, {128, 0}, {128, 10}, {10, 0}};
    ck_assert(rtx_graph_add_input(g, "x", RTX_F32, 2, (const int64_t[]){-1, 64}, &err) >= 0);
    char h[512];
    int hn = 0;
    uint64_t off = 0, total = 0;
    for (int i = 0; i < 4; i++) {
        int nd = shapes[i][1] ? 2 : 1;
        ck_assert(rtx_graph_add_input(g, names[i], RTX_F32, nd, shapes[i], &err) >= 0);
        uint64_t bytes = 4 * (uint64_t)shapes[i][0] * (uint64_t)(nd == 2 ? shapes[i][1] : 1);
        hn += snprintf(h + hn, sizeof h - (size_t)hn,
                       "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld%s%s],"
                       "\"data_offsets\":[%llu,%llu]}",
                       i ? "," : "{", names[i], (long long)shapes[i][0], nd == 2 ? "," : "",
                       nd == 2 ? (i == 0 ? "128" : "10") : "", (unsigned long long)off,
                       (unsigned long long)(off + bytes));
        off += bytes;
    }
    total = off;
    h[hn++] = '}';
    while ((8 + hn) % 8) h[hn++] = ' ';
    size_t len = 8 + (size_t)hn + total;
    uint8_t *buf = malloc(len);
    ck_assert_ptr_nonnull(buf);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)((uint64_t)hn >> (8 * i));
    memcpy(buf + 8, h, (size_t)hn);
    struct rtx_rng rng;
    rtx_rng_seed(&rng, 7);
    float *w = (float *)(buf + 8 + hn);
    for (uint64_t i = 0; i < total / 4; i++)
        w[i] = (float)((double)(rtx_rng_next(&rng) >> 11) * 0x1.0p-53 - 0.5) * 0.25f;
    snprintf(dir, sizeof dir, "%s/%s/1/model.safetensors", repo, name);
    write_file(dir, buf, len);
    free(buf);
    const char *fc1[] = {"x", "w1", "b1"}, *r[] = {"h"}, *fc2[] = {"hr", "w2", "b2"};
    const char *sm[] = {"logits"}, *o1 = "h", *o2 = "hr", *o3 = "logits", *o4 = "p";
    ck_assert(rtx_graph_add_node(g, "gemm", "fc1", fc1, 3, &o1, 1, &err) >= 0);
    ck_assert(rtx_graph_add_node(g, "relu", "relu", r, 1, &o2, 1, &err) >= 0);
    ck_assert(rtx_graph_add_node(g, "gemm", "fc2", fc2, 3, &o3, 1, &err) >= 0);
    int n = rtx_graph_add_node(g, "softmax", "softmax", sm, 1, &o4, 1, &err);
    ck_assert(n >= 0);
    ck_assert(rtx_graph_set_attr_int(g, n, "axis", -1, &err) == 0);
    ck_assert(rtx_graph_add_output(g, "p", &err) == 0);
    snprintf(dir, sizeof dir, "%s/%s/1/model.rtxg", repo, name);
    ck_assert_msg(rtx_graph_save_file(g, dir, &err) == 0, "%s", err.msg);
    rtx_graph_free(g);
}

struct mlp_call {
    struct call c;
    float p[64 * 10];
};

static void on_mlp(void *ctx, const struct rtx_infer_result *res) {
    struct mlp_call *mc = ctx;
    if (res->code == 0)
        for (int64_t i = 0; i < rtx_tensor_numel(res->outputs[0]) && i < 64 * 10; i++)
            mc->p[i] = (float)rtx_tensor_get(res->outputs[0], i);
    on_done(&mc->c, res);
}

/* rows x 64 inputs: row r of request `seed` holds sin(seed * 64 + r * 7 + k). */
static void submit_mlp(struct rtx_serving *s, const char *name, int rows, int seed,
                       struct mlp_call *mc) {
    struct rtx_model *m;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_serving_model_get(s, name, 0, &m, &err) == 0, "%s", err.msg);
    struct rtx_tensor *x;
    ck_assert(rtx_tensor_new(RTX_F32, 2, (const int64_t[]){rows, 64}, &x, &err) == 0);
    float *p = rtx_tensor_data(x);
    for (int i = 0; i < rows * 64; i++)
        p[i] = sinf((float)(seed * 64 + (i / 64) * 7 + i % 64));
    struct rtx_infer_input in = {"x", x};
    struct rtx_infer_request req = {.model = m, .n_inputs = 1, .inputs = &in, .done = on_mlp,
                                    .ctx = mc};
    ck_assert_msg(rtx_serving_infer(s, &req, &err) == 0, "%s", err.msg);
    rtx_tensor_unref(x);
    rtx_model_unref(m);
}

START_TEST(batching_matches_unbatched_for_gemm) {
    struct serving_fx f;
    fx_repo(&f);
    write_mlp(f.repo, "mlp", ", \"dynamic_batching\": {\"preferred_batch_size\": [16, 32],"
                             " \"max_queue_delay_microseconds\": 200000}");
    write_mlp(f.repo, "mlp_nobatch", NULL);
    /* threaded GEMM must not change a row's result either */
    serving_fx_devices(&f, &(struct rtx_devices_options){.cpu_threads = 2, .plan_cache = 16});
    struct rtx_serving_options o = fx_opts(&f, RTX_MODEL_CONTROL_NONE);
    fx_start_opts(&f, &o);
    enum { N = 12 };
    const int rows[N] = {1, 3, 2, 1, 5, 4, 1, 2, 3, 1, 2, 7}; /* 32 in all */
    struct mlp_call *on = calloc(N, sizeof *on), *off = calloc(N, sizeof *off);
    ck_assert(on && off);
    for (int i = 0; i < N; i++) {
        call_init(&on[i].c);
        call_init(&off[i].c);
        submit_mlp(f.s, "mlp", rows[i], i, &on[i]);
        submit_mlp(f.s, "mlp_nobatch", rows[i], i, &off[i]);
    }
    int batched = 0;
    for (int i = 0; i < N; i++) {
        call_wait(&on[i].c);
        call_wait(&off[i].c);
        ck_assert_msg(on[i].c.code == 0 && off[i].c.code == 0, "%s", on[i].c.msg);
        batched += on[i].c.batch_size > rows[i];
        ck_assert_msg(memcmp(on[i].p, off[i].p, sizeof(float) * 10 * (size_t)rows[i]) == 0,
                      "request %d: batched outputs differ from unbatched ones", i);
        call_close(&on[i].c);
        call_close(&off[i].c);
    }
    ck_assert_int_gt(batched, 0);
    free(on);
    free(off);
    fx_stop(&f);
}
END_TEST

START_TEST(batching_waits_at_most_the_queue_delay) {
    struct serving_fx f;
    fx_model(&f, "delay", 8, ", \"dynamic_batching\": {\"max_queue_delay_microseconds\": 60000}",
             RTX_MODEL_CONTROL_NONE);
    struct call c;
    call_init(&c);
    struct rtx_err err = {0};
    int64_t t0 = rtx_mono_ns();
    ck_assert(submit(f.s, "delay", 1, 1.0f, &c, 0, NULL, &err) == 0);
    call_wait(&c);
    int64_t waited = rtx_mono_ns() - t0;
    check_scale(&c, 1, 1.0f, 1.0f);
    ck_assert_int_eq(c.batch_size, 1);
    ck_assert_int_ge(c.queue_ns, 55000000);
    ck_assert_int_lt(waited, 1000000000);
    call_close(&c);
    fx_stop(&f);
}
END_TEST

START_TEST(batching_respects_max_batch_size_and_shapes) {
    struct serving_fx f;
    fx_model(&f, "max4", 4, ", \"dynamic_batching\": {\"max_queue_delay_microseconds\": 100000}",
             RTX_MODEL_CONTROL_NONE);
    /* hold the worker so that everything queues, then let it go */
    struct call gate;
    call_init(&gate);
    gate.gate = true;
    struct rtx_err err = {0};
    ck_assert(submit(f.s, "max4", 4, 0.0f, &gate, 0, NULL, &err) == 0);
    call_wait_entered(&gate);
    struct call c[5];
    int rows[5] = {3, 2, 1, 1, 3};
    for (int i = 0; i < 5; i++) {
        call_init(&c[i]);
        ck_assert(submit(f.s, "max4", rows[i], (float)i, &c[i], 0, NULL, &err) == 0);
    }
    call_open_gate(&gate);
    for (int i = 0; i < 5; i++) {
        call_wait(&c[i]);
        check_scale(&c[i], rows[i], (float)i, 1.0f);
        ck_assert_int_le(c[i].batch_size, 4);
    }
    /* FIFO with a full stop: [3], then 2+1+1 = 4, then [3] after the delay */
    ck_assert_int_eq(c[0].batch_size, 3);
    ck_assert_int_eq(c[1].batch_size, 4);
    ck_assert_int_eq(c[3].batch_size, 4);
    struct rtx_model_stats st = get_stats(f.s, "max4");
    ck_assert_int_eq(st.inference_count, 14);
    call_close(&gate);
    for (int i = 0; i < 5; i++)
        call_close(&c[i]);
    fx_stop(&f);
}
END_TEST

START_TEST(batching_sends_the_largest_preferred_batch) {
    struct serving_fx f;
    fx_model(&f, "pref", 8,
             ", \"dynamic_batching\": {\"preferred_batch_size\": [2, 4],"
             " \"max_queue_delay_microseconds\": 50000}",
             RTX_MODEL_CONTROL_NONE);
    struct call gate, c[5];
    call_init(&gate);
    gate.gate = true;
    struct rtx_err err = {0};
    ck_assert(submit(f.s, "pref", 2, 0.0f, &gate, 0, NULL, &err) == 0); /* preferred: at once */
    call_wait_entered(&gate);
    for (int i = 0; i < 5; i++) {
        call_init(&c[i]);
        ck_assert(submit(f.s, "pref", 1, (float)i, &c[i], 0, NULL, &err) == 0);
    }
    call_open_gate(&gate);
    for (int i = 0; i < 5; i++) {
        call_wait(&c[i]);
        check_scale(&c[i], 1, (float)i, 1.0f);
        ck_assert_int_eq(c[i].batch_size, i < 4 ? 4 : 1); /* 4 now, the fifth after the delay */
    }
    ck_assert_int_ge(c[4].queue_ns, 45000000);
    call_close(&gate);
    for (int i = 0; i < 5; i++)
        call_close(&c[i]);
    fx_stop(&f);
}
END_TEST

START_TEST(queue_bound_deadline_and_cancel) {
    struct serving_fx f;
    fx_repo(&f);
    write_model(f.repo, "scale", 8, NULL);
    struct rtx_serving_options o = fx_opts(&f, RTX_MODEL_CONTROL_NONE);
    o.max_queue = 3;
    fx_start_opts(&f, &o);
    struct call gate, exp, can, ok, full;
    call_init(&gate);
    call_init(&exp);
    call_init(&can);
    call_init(&ok);
    call_init(&full);
    gate.gate = true;
    struct rtx_err err = {0};
    ck_assert(submit(f.s, "scale", 1, 0.0f, &gate, 0, NULL, &err) == 0);
    call_wait_entered(&gate); /* the only worker is busy now */
    volatile int cancel = 0;
    ck_assert(submit(f.s, "scale", 1, 1.0f, &exp, rtx_mono_ns() + 1000000, NULL, &err) == 0);
    ck_assert(submit(f.s, "scale", 1, 2.0f, &can, 0, &cancel, &err) == 0);
    ck_assert(submit(f.s, "scale", 1, 3.0f, &ok, rtx_mono_ns() + 60000000000LL, NULL, &err) == 0);
    ck_assert_int_eq(submit(f.s, "scale", 1, 4.0f, &full, 0, NULL, &err), RTX_EUNAVAILABLE);
    ck_assert(strstr(err.msg, "queue full"));
    struct rtx_model_stats st = get_stats(f.s, "scale");
    ck_assert_int_eq(st.pending, 3); /* queued; the gated one is being answered */
    cancel = 1;
    sleep_ms(5); /* past the first deadline */
    call_open_gate(&gate);
    call_wait(&exp);
    call_wait(&can);
    call_wait(&ok);
    ck_assert_int_eq(exp.code, RTX_EEXPIRED);
    ck_assert(strstr(exp.msg, "deadline"));
    ck_assert_int_eq(can.code, RTX_ECANCELED);
    check_scale(&ok, 1, 3.0f, 1.0f);
    ck_assert_int_eq(full.done, 0);
    st = get_stats(f.s, "scale");
    ck_assert_int_eq(st.failures[RTX_INFER_FAIL_EXPIRED], 1);
    ck_assert_int_eq(st.failures[RTX_INFER_FAIL_CANCELED], 1);
    ck_assert_int_eq(st.failures[RTX_INFER_FAIL_REJECTED], 1);
    ck_assert_int_eq(st.fail.count, 3);
    ck_assert_int_eq(st.success.count, 2);
    ck_assert_int_eq(st.pending, 0);
    call_close(&gate);
    call_close(&exp);
    call_close(&can);
    call_close(&ok);
    call_close(&full);
    fx_stop(&f);
}
END_TEST

START_TEST(instances_serve_in_parallel) {
    struct serving_fx f;
    fx_model(&f, "two", 8, ", \"instance_group\": [{\"count\": 2, \"kind\": \"KIND_CPU\"}]",
             RTX_MODEL_CONTROL_NONE);
    struct rtx_model *m;
    struct rtx_err err = {0};
    ck_assert(rtx_serving_model_get(f.s, "two", 0, &m, &err) == 0);
    ck_assert_int_eq(rtx_model_info(m)->instances, 2);
    rtx_model_unref(m);
    struct call gate, c;
    call_init(&gate);
    call_init(&c);
    gate.gate = true;
    ck_assert(submit(f.s, "two", 1, 0.0f, &gate, 0, NULL, &err) == 0);
    call_wait_entered(&gate); /* one instance is held */
    ck_assert(submit(f.s, "two", 2, 1.0f, &c, 0, NULL, &err) == 0);
    call_wait(&c); /* the other one answers meanwhile */
    check_scale(&c, 2, 1.0f, 1.0f);
    call_open_gate(&gate);
    call_wait(&gate);
    call_close(&gate);
    call_close(&c);
    fx_stop(&f);
}
END_TEST

struct stopper {
    struct rtx_serving *s;
};

static void *stop_main(void *arg) {
    struct stopper *st = arg;
    rtx_serving_stop(st->s);
    return NULL;
}

START_TEST(stop_answers_every_request_once) {
    struct serving_fx f;
    fx_model(&f, "scale", 8, NULL, RTX_MODEL_CONTROL_NONE);
    struct call gate, c[6];
    call_init(&gate);
    gate.gate = true;
    struct rtx_err err = {0};
    ck_assert(submit(f.s, "scale", 1, 0.0f, &gate, 0, NULL, &err) == 0);
    call_wait_entered(&gate);
    for (int i = 0; i < 6; i++) {
        call_init(&c[i]);
        ck_assert(submit(f.s, "scale", 1, (float)i, &c[i], 0, NULL, &err) == 0);
    }
    struct stopper sp = {f.s};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, stop_main, &sp), 0);
    sleep_ms(20); /* the stop is waiting for the running batch */
    call_open_gate(&gate);
    pthread_join(th, NULL);
    f.s = NULL;
    ck_assert_int_eq(gate.done, 1);
    ck_assert_int_eq(gate.code, 0);
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(c[i].done, 1);
        ck_assert_int_eq(c[i].code, RTX_EUNAVAILABLE);
        ck_assert(strstr(c[i].msg, "shutting down"));
        call_close(&c[i]);
    }
    call_close(&gate);
    fx_stop(&f);
}
END_TEST

START_TEST(load_survives_out_of_memory) {
    struct serving_fx f;
    fx_model(&f, "scale", 8, NULL, RTX_MODEL_CONTROL_EXPLICIT);
    struct rtx_err err = {0};
    int rc = -1;
    long n;
    for (n = 1; n < 5000 && rc != 0; n++) {
        rtx_alloc_fail_after(n);
        rc = rtx_serving_load(f.s, "scale", NULL, &err);
        rtx_alloc_fail_after(0);
        ck_assert_msg(rc == 0 || rc == RTX_ENOMEM, "n=%ld: rc %d (%s)", n, rc, err.msg);
        if (rc == 0) break;
        ck_assert(!rtx_serving_model_ready(f.s, "scale", 0));
    }
    ck_assert_int_eq(rc, 0);
    ck_assert_int_gt(n, 5);
    struct call c;
    call_init(&c);
    ck_assert(submit(f.s, "scale", 2, 1.0f, &c, 0, NULL, &err) == 0);
    call_wait(&c);
    check_scale(&c, 2, 1.0f, 1.0f);
    call_close(&c);
    fx_stop(&f);
}
END_TEST

Suite *rtx_serving_requests_suite(void) {
    Suite *s = suite_create("serving_requests");
    TCase *tc = tcase_create("serving_requests");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, serving_rejects_bad_requests_before_queuing);
    tcase_add_test(tc, batching_merges_splits_and_matches_unbatched);
    tcase_add_test(tc, batching_matches_unbatched_for_gemm);
    tcase_add_test(tc, batching_waits_at_most_the_queue_delay);
    tcase_add_test(tc, batching_respects_max_batch_size_and_shapes);
    tcase_add_test(tc, batching_sends_the_largest_preferred_batch);
    tcase_add_test(tc, queue_bound_deadline_and_cancel);
    tcase_add_test(tc, instances_serve_in_parallel);
    tcase_add_test(tc, stop_answers_every_request_once);
    tcase_add_test(tc, load_survives_out_of_memory);
    suite_add_tcase(s, tc);
    return s;
}
