/*
 * test-plan.c - the planner and executor: input binding, dead-node pruning, buffer reuse,
 * correct results through multi-node graphs, pass-through outputs, cancellation, reshapes as
 * views of their input's bytes (intermediates, chains, graph inputs and initializers, the
 * storage kept live for a view's readers, graph outputs still copied), and an out-of-memory
 * loop over plan + execute.
 */
#include <math.h>
#include <string.h>

#include "kernels/cpu/backend-cpu.h"
#include "runtime/backend-impl.h"
#include "tests/unit/test-util.h"

static struct rtx_backend *cpu(void) {
    struct rtx_backend *be;
    struct rtx_err err;
    ck_assert_msg(rtx_backend_cpu_new(&(struct rtx_cpu_options){.n_threads = 2}, &be, &err) == 0,
                  "%s", err.msg);
    return be;
}

static void add_unary(struct rtx_graph *g, const char *op, const char *in, const char *out) {
    const char *i[] = {in}, *o[] = {out};
    struct rtx_err err;
    ck_assert_msg(rtx_graph_add_node(g, op, out, i, 1, o, 1, &err) >= 0, "%s", err.msg);
}

/* x -> neg -> abs -> neg -> ... (n nodes), all [64] f32 */
static struct rtx_graph *chain(int n) {
    struct rtx_graph *g;
    int64_t d[] = {-1};
    rtx_graph_new("chain", &g, NULL);
    rtx_graph_add_input(g, "x", RTX_F32, 1, d, NULL);
    char a[16] = "x", b[16];
    for (int i = 0; i < n; i++) {
        snprintf(b, sizeof b, "v%d", i);
        add_unary(g, i % 2 ? "abs" : "neg", a, b);
        memcpy(a, b, sizeof a);
    }
    rtx_graph_add_output(g, a, NULL);
    return g;
}

/* A reshape node in -> out with the given shape. */
static void add_reshape(struct rtx_graph *g, const char *in, const char *out, int ndim,
                        const int64_t *shape) {
    const char *i[] = {in}, *o[] = {out};
    struct rtx_err err;
    int n = rtx_graph_add_node(g, "reshape", out, i, 1, o, 1, &err);
    ck_assert_msg(n >= 0, "%s", err.msg);
    ck_assert_int_eq(rtx_graph_set_attr_ints(g, n, "shape", shape, ndim, &err), 0);
}

static void add_binary(struct rtx_graph *g, const char *op, const char *a, const char *b,
                       const char *out) {
    const char *i[] = {a, b}, *o[] = {out};
    struct rtx_err err;
    ck_assert_msg(rtx_graph_add_node(g, op, out, i, 2, o, 1, &err) >= 0, "%s", err.msg);
}

START_TEST(chain_reuses_two_buffers) {
    struct rtx_graph *g = chain(10);
    int64_t d[] = {64};
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 1, d, -1, 1, 1), *y;
    struct rtx_plan *p;
    struct rtx_err err;
    ck_assert_msg(rtx_plan_new(g, (const struct rtx_tensor *const *)&x, 1, NULL, &p, &err) == 0,
                  "%s", err.msg);
    /* 9 intermediates of 256 bytes; at most two are alive at once */
    ck_assert_uint_eq(rtx_plan_unplanned_bytes(p), 9 * 256);
    ck_assert_uint_eq(rtx_plan_arena_bytes(p), 2 * 256);
    struct rtx_backend *be = cpu();
    struct rtx_exec_stats st;
    ck_assert_msg(rtx_plan_execute(p, be, &x, 1, &y, 1, NULL, &st, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(st.nodes_run, 10);
    ck_assert_uint_ge(st.peak_bytes, 2 * 256 + 256);
    for (int i = 0; i < 64; i++) /* neg, abs, ..., abs: |x| */
        ck_assert(rtx_tensor_get(y, i) == fabs(rtx_tensor_get(x, i)));
    rtx_tensor_unref(y);
    /* a plan runs again with new data */
    rtx_tensor_set(x, 0, 5.0);
    ck_assert_int_eq(rtx_plan_execute(p, be, &x, 1, &y, 1, NULL, NULL, &err), 0);
    ck_assert(rtx_tensor_get(y, 0) == 5.0);
    rtx_tensor_unref(y);
    rtx_backend_free(be);
    rtx_plan_free(p);
    rtx_tensor_unref(x);
    rtx_graph_free(g);
}
END_TEST

START_TEST(diamond_keeps_shared_value_alive) {
    /* x -> a = neg(x); b = exp(a); c = abs(a); z = add(b, c): a must survive until add */
    struct rtx_graph *g;
    int64_t d[] = {8};
    rtx_graph_new("diamond", &g, NULL);
    rtx_graph_add_input(g, "x", RTX_F32, 1, d, NULL);
    add_unary(g, "neg", "x", "a");
    add_unary(g, "exp", "a", "b");
    add_unary(g, "abs", "a", "c");
    const char *in[] = {"b", "c"}, *out[] = {"z"};
    rtx_graph_add_node(g, "add", "z", in, 2, out, 1, NULL);
    rtx_graph_add_output(g, "z", NULL);
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 1, d, -2, 2, 3), *z;
    struct rtx_plan *p;
    struct rtx_err err;
    ck_assert_int_eq(rtx_plan_new(g, (const struct rtx_tensor *const *)&x, 1, NULL, &p, &err), 0);
    ck_assert_uint_eq(rtx_plan_arena_bytes(p), 3 * 64);
    struct rtx_backend *be = cpu();
    ck_assert_int_eq(rtx_plan_execute(p, be, &x, 1, &z, 1, NULL, NULL, &err), 0);
    for (int i = 0; i < 8; i++) {
        double v = rtx_tensor_get(x, i);
        ck_assert_double_eq_tol(rtx_tensor_get(z, i), exp(-v) + fabs(v), 1e-5);
    }
    rtx_tensor_unref(z);
    rtx_backend_free(be);
    rtx_plan_free(p);
    rtx_tensor_unref(x);
    rtx_graph_free(g);
}
END_TEST

START_TEST(dead_nodes_are_not_run) {
    struct rtx_graph *g;
    int64_t d[] = {4};
    rtx_graph_new("dead", &g, NULL);
    rtx_graph_add_input(g, "x", RTX_F32, 1, d, NULL);
    add_unary(g, "neg", "x", "used");
    add_unary(g, "exp", "x", "unused");
    add_unary(g, "log", "unused", "unused2");
    rtx_graph_add_output(g, "used", NULL);
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 1, d, 0, 1, 1), *y;
    struct rtx_plan *p;
    struct rtx_exec_stats st;
    ck_assert_int_eq(rtx_plan_new(g, (const struct rtx_tensor *const *)&x, 1, NULL, &p, NULL), 0);
    struct rtx_backend *be = cpu();
    ck_assert_int_eq(rtx_plan_execute(p, be, &x, 1, &y, 1, NULL, &st, NULL), 0);
    ck_assert_int_eq(st.nodes_run, 1);
    ck_assert_uint_eq(rtx_plan_arena_bytes(p), 0);
    rtx_tensor_unref(y);
    rtx_backend_free(be);
    rtx_plan_free(p);
    rtx_tensor_unref(x);
    rtx_graph_free(g);
}
END_TEST

START_TEST(outputs_may_be_inputs_or_initializers) {
    struct rtx_graph *g;
    int64_t d[] = {2};
    rtx_graph_new("pass", &g, NULL);
    rtx_graph_add_input(g, "x", RTX_I32, 1, d, NULL);
    double wv[] = {7, 8};
    struct rtx_tensor *w = tu_tensor(RTX_I64, 1, d, wv);
    rtx_graph_add_initializer(g, "w", w, NULL);
    rtx_tensor_unref(w);
    rtx_graph_add_output(g, "w", NULL);
    rtx_graph_add_output(g, "x", NULL);
    double xv[] = {1, 2};
    struct rtx_tensor *x = tu_tensor(RTX_I32, 1, d, xv), *outs[2];
    struct rtx_plan *p;
    ck_assert_int_eq(rtx_plan_new(g, (const struct rtx_tensor *const *)&x, 1, NULL, &p, NULL), 0);
    struct rtx_backend *be = cpu();
    ck_assert_int_eq(rtx_plan_execute(p, be, &x, 1, outs, 2, NULL, NULL, NULL), 0);
    ck_assert(rtx_tensor_get(outs[0], 1) == 8);
    ck_assert(rtx_tensor_get(outs[1], 0) == 1);
    rtx_tensor_unref(outs[0]);
    rtx_tensor_unref(outs[1]);
    rtx_backend_free(be);
    rtx_plan_free(p);
    rtx_tensor_unref(x);
    rtx_graph_free(g);
}
END_TEST

START_TEST(binding_checks_dtype_rank_and_fixed_dims) {
    struct rtx_graph *g;
    int64_t d[] = {-1, 3};
    rtx_graph_new("bind", &g, NULL);
    rtx_graph_add_input(g, "x", RTX_F32, 2, d, NULL);
    add_unary(g, "neg", "x", "y");
    rtx_graph_add_output(g, "y", NULL);
    struct rtx_plan *p = NULL;
    struct rtx_err err;
    int64_t ok[] = {5, 3}, bad[] = {5, 4};
    struct rtx_tensor *t = tu_tensor(RTX_F32, 2, ok, NULL);
    ck_assert_int_eq(rtx_plan_new(g, (const struct rtx_tensor *const *)&t, 1, NULL, &p, &err), 0);
    rtx_plan_free(p);
    rtx_tensor_unref(t);
    t = tu_tensor(RTX_F32, 2, bad, NULL);
    ck_assert_int_eq(rtx_plan_new(g, (const struct rtx_tensor *const *)&t, 1, NULL, &p, &err),
                     RTX_EINVAL);
    ck_assert_str_eq(err.msg, "input 'x': expected f32[-1,3], got f32[5,4]");
    rtx_tensor_unref(t);
    t = tu_tensor(RTX_F16, 2, ok, NULL);
    ck_assert_int_eq(rtx_plan_new(g, (const struct rtx_tensor *const *)&t, 1, NULL, &p, &err),
                     RTX_EINVAL);
    rtx_tensor_unref(t);
    ck_assert_int_eq(rtx_plan_new(g, NULL, 0, NULL, &p, &err), RTX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "1 inputs, 0 given"));
    rtx_graph_free(g);
}
END_TEST

START_TEST(execute_rejects_inputs_unlike_the_plan) {
    struct rtx_graph *g = chain(2);
    int64_t d[] = {4}, d2[] = {5};
    struct rtx_tensor *x = tu_tensor(RTX_F32, 1, d, NULL), *x2 = tu_tensor(RTX_F32, 1, d2, NULL);
    struct rtx_tensor *y;
    struct rtx_plan *p;
    struct rtx_err err;
    ck_assert_int_eq(rtx_plan_new(g, (const struct rtx_tensor *const *)&x, 1, NULL, &p, NULL), 0);
    struct rtx_backend *be = cpu();
    ck_assert_int_eq(rtx_plan_execute(p, be, &x2, 1, &y, 1, NULL, NULL, &err), RTX_EINVAL);
    ck_assert_ptr_null(y);
    ck_assert_ptr_nonnull(strstr(err.msg, "does not match the planned f32[4]"));
    rtx_backend_free(be);
    rtx_plan_free(p);
    rtx_tensor_unref(x);
    rtx_tensor_unref(x2);
    rtx_graph_free(g);
}
END_TEST

START_TEST(non_contiguous_inputs_are_made_contiguous) {
    struct rtx_graph *g;
    int64_t d[] = {3, 2};
    rtx_graph_new("nc", &g, NULL);
    rtx_graph_add_input(g, "x", RTX_F32, 2, d, NULL);
    add_unary(g, "neg", "x", "y");
    rtx_graph_add_output(g, "y", NULL);
    int64_t td[] = {2, 3};
    double v[] = {0, 1, 2, 3, 4, 5};
    struct rtx_tensor *t = tu_tensor(RTX_F32, 2, td, v), *x, *y;
    int perm[] = {1, 0};
    rtx_tensor_permute(t, perm, &x, NULL);
    struct rtx_plan *p;
    ck_assert_int_eq(rtx_plan_new(g, (const struct rtx_tensor *const *)&x, 1, NULL, &p, NULL), 0);
    struct rtx_backend *be = cpu();
    ck_assert_int_eq(rtx_plan_execute(p, be, &x, 1, &y, 1, NULL, NULL, NULL), 0);
    double want[] = {-0., -3, -1, -4, -2, -5};
    tu_assert_close(y, want, 0, 0);
    rtx_tensor_unref(y);
    rtx_backend_free(be);
    rtx_plan_free(p);
    rtx_tensor_unref(x);
    rtx_tensor_unref(t);
    rtx_graph_free(g);
}
END_TEST

/* A strided view given as an initializer is stored contiguous: a reshape of it (a raw view of
 * its bytes in the plan, a byte copy for a graph output) sees the logical element order. */
START_TEST(non_contiguous_initializers_are_stored_contiguous) {
    struct rtx_graph *g;
    int64_t td[] = {2, 3}, six[] = {6};
    double v[] = {0, 1, 2, 3, 4, 5};
    struct rtx_tensor *t = tu_tensor(RTX_F32, 2, td, v), *w, *x = NULL, *y[2] = {NULL, NULL};
    int perm[] = {1, 0};
    ck_assert_int_eq(rtx_tensor_permute(t, perm, &w, NULL), 0); /* [3, 2], strides {1, 3} */
    rtx_graph_new("nci", &g, NULL);
    rtx_graph_add_input(g, "x", RTX_F32, 1, six, NULL);
    ck_assert_int_ge(rtx_graph_add_initializer(g, "w", w, NULL), 0);
    add_reshape(g, "w", "flat", 1, six);   /* a view (read by the add) */
    add_binary(g, "add", "flat", "x", "y");
    add_reshape(g, "w", "wflat", 1, six);  /* a graph output: copied */
    rtx_graph_add_output(g, "y", NULL);
    rtx_graph_add_output(g, "wflat", NULL);
    double zeros[] = {0, 0, 0, 0, 0, 0};
    x = tu_tensor(RTX_F32, 1, six, zeros);
    struct rtx_plan *p;
    ck_assert_int_eq(rtx_plan_new(g, (const struct rtx_tensor *const *)&x, 1, NULL, &p, NULL), 0);
    struct rtx_backend *be = cpu();
    ck_assert_int_eq(rtx_plan_execute(p, be, &x, 1, y, 2, NULL, NULL, NULL), 0);
    double want[] = {0, 3, 1, 4, 2, 5};
    tu_assert_close(y[0], want, 0, 0);
    tu_assert_close(y[1], want, 0, 0);
    rtx_tensor_unref(y[0]);
    rtx_tensor_unref(y[1]);
    rtx_backend_free(be);
    rtx_plan_free(p);
    rtx_tensor_unref(x);
    rtx_tensor_unref(w);
    rtx_tensor_unref(t);
    rtx_graph_free(g);
}
END_TEST

START_TEST(cancel_flag_stops_between_ops) {
    struct rtx_graph *g = chain(3);
    int64_t d[] = {4};
    struct rtx_tensor *x = tu_tensor(RTX_F32, 1, d, NULL), *y;
    struct rtx_plan *p;
    struct rtx_err err;
    struct rtx_exec_stats st;
    ck_assert_int_eq(rtx_plan_new(g, (const struct rtx_tensor *const *)&x, 1, NULL, &p, NULL), 0);
    struct rtx_backend *be = cpu();
    volatile int cancel = 1;
    ck_assert_int_eq(rtx_plan_execute(p, be, &x, 1, &y, 1, &cancel, &st, &err), RTX_ECANCELED);
    ck_assert_int_eq(st.nodes_run, 0);
    ck_assert_ptr_null(y);
    rtx_backend_free(be);
    rtx_plan_free(p);
    rtx_tensor_unref(x);
    rtx_graph_free(g);
}
END_TEST

/* x -> a = neg(x) -> r = reshape(a) -> z = exp(r): r is a view of a */
START_TEST(reshape_of_an_intermediate_is_a_view) {
    struct rtx_graph *g;
    int64_t d[] = {2, 8}, flat[] = {16};
    rtx_graph_new("view", &g, NULL);
    rtx_graph_add_input(g, "x", RTX_F32, 2, d, NULL);
    add_unary(g, "neg", "x", "a");
    add_reshape(g, "a", "r", 1, flat);
    add_unary(g, "exp", "r", "z");
    rtx_graph_add_output(g, "z", NULL);
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 2, d, -2, 2, 4), *z;
    struct rtx_plan *p;
    struct rtx_exec_stats st;
    struct rtx_err err;
    ck_assert_int_eq(rtx_plan_new(g, (const struct rtx_tensor *const *)&x, 1, NULL, &p, &err), 0);
    /* a alone: the view adds no bytes */
    ck_assert_uint_eq(rtx_plan_arena_bytes(p), 64);
    ck_assert_uint_eq(rtx_plan_unplanned_bytes(p), 64);
    struct rtx_backend *be = cpu();
    ck_assert_msg(rtx_plan_execute(p, be, &x, 1, &z, 1, NULL, &st, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(st.nodes_run, 2); /* neg and exp; the reshape is not run */
    int64_t zd[] = {16};
    tu_assert_shape(z, RTX_F32, 1, zd);
    for (int i = 0; i < 16; i++)
        ck_assert_double_eq_tol(rtx_tensor_get(z, i), exp(-rtx_tensor_get(x, i)), 1e-6);
    rtx_tensor_unref(z);
    rtx_backend_free(be);
    rtx_plan_free(p);
    rtx_tensor_unref(x);
    rtx_graph_free(g);
}
END_TEST

/* x [1,16] -> a = neg(x); r = reshape(a, [16]); c = exp(x); z = add(r, c). a's last direct
 * reader is the reshape (not run); if a's bytes were freed there, best fit would give c the
 * only gap, a's, and z would be exp(x) + exp(x). */
START_TEST(view_keeps_its_storage_live_past_later_outputs) {
    struct rtx_graph *g;
    int64_t d[] = {1, 16}, flat[] = {16};
    rtx_graph_new("live", &g, NULL);
    rtx_graph_add_input(g, "x", RTX_F32, 2, d, NULL);
    add_unary(g, "neg", "x", "a");
    add_reshape(g, "a", "r", 1, flat);
    add_unary(g, "exp", "x", "c");
    add_binary(g, "add", "r", "c", "z");
    rtx_graph_add_output(g, "z", NULL);
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 2, d, -2, 2, 5), *z;
    struct rtx_plan *p;
    struct rtx_exec_stats st;
    struct rtx_err err;
    ck_assert_int_eq(rtx_plan_new(g, (const struct rtx_tensor *const *)&x, 1, NULL, &p, &err), 0);
    ck_assert_uint_eq(rtx_plan_arena_bytes(p), 2 * 64); /* a and c side by side */
    struct rtx_backend *be = cpu();
    ck_assert_msg(rtx_plan_execute(p, be, &x, 1, &z, 1, NULL, &st, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(st.nodes_run, 3);
    for (int i = 0; i < 16; i++) {
        double v = rtx_tensor_get(x, i);
        ck_assert_double_eq_tol(rtx_tensor_get(z, i), -v + exp(v), 1e-5);
    }
    rtx_tensor_unref(z);
    rtx_backend_free(be);
    rtx_plan_free(p);
    rtx_tensor_unref(x);
    rtx_graph_free(g);
}
END_TEST

/* a = neg(x) [4,6] -> [24] -> [6,4] -> [4,6], then c = exp(x) and z = add(r3, c): a chain of
 * views of a, read after c is placed. */
START_TEST(reshape_chain_shares_one_storage) {
    struct rtx_graph *g;
    int64_t d[] = {4, 6}, s1[] = {24}, s2[] = {6, 4};
    rtx_graph_new("chain of views", &g, NULL);
    rtx_graph_add_input(g, "x", RTX_F32, 2, d, NULL);
    add_unary(g, "neg", "x", "a");
    add_reshape(g, "a", "r1", 1, s1);
    add_reshape(g, "r1", "r2", 2, s2);
    add_reshape(g, "r2", "r3", 2, d);
    add_unary(g, "exp", "x", "c");
    add_binary(g, "add", "r3", "c", "z");
    rtx_graph_add_output(g, "z", NULL);
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 2, d, -2, 2, 6), *z;
    struct rtx_plan *p;
    struct rtx_exec_stats st;
    struct rtx_err err;
    ck_assert_int_eq(rtx_plan_new(g, (const struct rtx_tensor *const *)&x, 1, NULL, &p, &err), 0);
    ck_assert_uint_eq(rtx_plan_unplanned_bytes(p), 2 * 128); /* a and c: 96 bytes, aligned */
    ck_assert_uint_eq(rtx_plan_arena_bytes(p), 2 * 128);
    struct rtx_backend *be = cpu();
    ck_assert_msg(rtx_plan_execute(p, be, &x, 1, &z, 1, NULL, &st, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(st.nodes_run, 3);
    tu_assert_shape(z, RTX_F32, 2, d);
    for (int i = 0; i < 24; i++) {
        double v = rtx_tensor_get(x, i);
        ck_assert_double_eq_tol(rtx_tensor_get(z, i), -v + exp(v), 1e-5);
    }
    rtx_tensor_unref(z);
    rtx_backend_free(be);
    rtx_plan_free(p);
    rtx_tensor_unref(x);
    rtx_graph_free(g);
}
END_TEST

/* z = add(reshape(x, [16]), w) and y = mul(x, reshape(w, [2, 8])): views of a graph input and
 * of an initializer, on the host and on a device backend; the caller's x is never written. */
static struct rtx_graph *input_views_graph(void) {
    struct rtx_graph *g;
    int64_t d[] = {2, 8}, flat[] = {16};
    rtx_graph_new("input views", &g, NULL);
    rtx_graph_add_input(g, "x", RTX_F32, 2, d, NULL);
    struct rtx_tensor *w = tu_tensor_random(RTX_F32, 1, flat, -1, 1, 9);
    rtx_graph_add_initializer(g, "w", w, NULL);
    rtx_tensor_unref(w);
    add_reshape(g, "x", "rx", 1, flat);
    add_reshape(g, "w", "rw", 2, d);
    add_binary(g, "add", "rx", "w", "z");
    add_binary(g, "mul", "x", "rw", "y");
    rtx_graph_add_output(g, "z", NULL);
    rtx_graph_add_output(g, "y", NULL);
    return g;
}

static void check_input_views(const struct rtx_graph *g, const struct rtx_tensor *x,
                              struct rtx_tensor *const *out) {
    const struct rtx_tensor *w = g->values[1].constant;
    ck_assert_ptr_nonnull(w);
    for (int i = 0; i < 16; i++) {
        double xv = rtx_tensor_get(x, i), wv = rtx_tensor_get(w, i);
        ck_assert_double_eq_tol(rtx_tensor_get(out[0], i), xv + wv, 1e-6);
        ck_assert_double_eq_tol(rtx_tensor_get(out[1], i), xv * wv, 1e-6);
    }
}

/* A reshape whose output is a graph output runs and fills a buffer of its own: of a graph
 * input (r = reshape(x)) and of an intermediate (s = reshape(neg(x))). */
START_TEST(reshape_to_a_graph_output_gets_its_own_buffer) {
    struct rtx_graph *g;
    int64_t d[] = {2, 3}, flat[] = {6}, t[] = {3, 2};
    rtx_graph_new("output reshape", &g, NULL);
    rtx_graph_add_input(g, "x", RTX_F32, 2, d, NULL);
    add_reshape(g, "x", "r", 1, flat);
    add_unary(g, "neg", "x", "a");
    add_reshape(g, "a", "s", 2, t);
    add_unary(g, "abs", "s", "b");
    rtx_graph_add_output(g, "r", NULL);
    rtx_graph_add_output(g, "s", NULL);
    rtx_graph_add_output(g, "b", NULL);
    double xv[] = {1, -2, 3, -4, 5, -6};
    struct rtx_tensor *x = tu_tensor(RTX_F32, 2, d, xv), *out[3];
    struct rtx_plan *p;
    struct rtx_exec_stats st;
    struct rtx_err err;
    ck_assert_int_eq(rtx_plan_new(g, (const struct rtx_tensor *const *)&x, 1, NULL, &p, &err), 0);
    ck_assert_uint_eq(rtx_plan_arena_bytes(p), 64); /* a */
    struct rtx_backend *be = cpu();
    /* device-resident on the CPU: the outputs are the executor's own tensors */
    ck_assert_msg(rtx_plan_execute_device(p, be, &x, 1, out, 3, NULL, &st, &err) == 0, "%s",
                  err.msg);
    ck_assert_int_eq(st.nodes_run, 4); /* both reshapes copy */
    ck_assert_ptr_ne(out[0]->buf, x->buf);
    ck_assert_ptr_ne(out[1]->buf, out[2]->buf);
    double nx[] = {-1, 2, -3, 4, -5, 6}, ax[] = {1, 2, 3, 4, 5, 6};
    tu_assert_shape(out[0], RTX_F32, 1, flat);
    tu_assert_shape(out[1], RTX_F32, 2, t);
    tu_assert_close(out[0], xv, 0, 0);
    tu_assert_close(out[1], nx, 0, 0);
    tu_assert_close(out[2], ax, 0, 0);
    for (int i = 0; i < 3; i++) rtx_tensor_unref(out[i]);
    rtx_backend_free(be);
    rtx_plan_free(p);
    rtx_tensor_unref(x);
    rtx_graph_free(g);
}
END_TEST

/* Intermediates of zero bytes: the arena is empty, and the run still binds them. */
START_TEST(empty_intermediates_need_no_arena) {
    struct rtx_graph *g = chain(3);
    int64_t d[] = {0};
    struct rtx_tensor *x = tu_tensor(RTX_F32, 1, d, NULL), *y;
    struct rtx_plan *p;
    struct rtx_exec_stats st;
    struct rtx_err err;
    ck_assert_int_eq(rtx_plan_new(g, (const struct rtx_tensor *const *)&x, 1, NULL, &p, &err), 0);
    ck_assert_uint_eq(rtx_plan_arena_bytes(p), 0);
    struct rtx_backend *be = cpu();
    ck_assert_msg(rtx_plan_execute(p, be, &x, 1, &y, 1, NULL, &st, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(st.nodes_run, 3);
    tu_assert_shape(y, RTX_F32, 1, d);
    rtx_tensor_unref(y);
    rtx_backend_free(be);
    rtx_plan_free(p);
    rtx_tensor_unref(x);
    rtx_graph_free(g);
}
END_TEST

START_TEST(plan_and_execute_survive_allocation_failures) {
    struct rtx_graph *g = chain(4);
    int64_t d[] = {16};
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 1, d, -1, 1, 2);
    struct rtx_backend *be = cpu();
    int ok = 0;
    for (long n = 1; n < 500 && !ok; n++) {
        struct rtx_plan *p = NULL;
        struct rtx_tensor *y = NULL;
        rtx_alloc_fail_after(n);
        int rc = rtx_plan_new(g, (const struct rtx_tensor *const *)&x, 1, NULL, &p, NULL);
        if (rc == 0) rc = rtx_plan_execute(p, be, &x, 1, &y, 1, NULL, NULL, NULL);
        rtx_alloc_fail_after(0);
        if (rc == 0) {
            ok = 1;
            ck_assert(rtx_tensor_get(y, 3) == fabs(rtx_tensor_get(x, 3)));
        } else {
            ck_assert_msg(rc == RTX_ENOMEM, "failure %ld gave %d", n, rc);
            ck_assert_ptr_null(y);
        }
        rtx_tensor_unref(y);
        rtx_plan_free(p);
    }
    ck_assert(ok);
    rtx_backend_free(be);
    rtx_tensor_unref(x);
    rtx_graph_free(g);
}
END_TEST

/* A "device" backend for the executor's transfer path: the CPU backend's kernels, with
 * upload/download that copy and count, so host and "device" tensors are always distinct. */
struct fake_device {
    struct rtx_backend be;
    struct rtx_backend *cpu;
    int uploads, downloads;
};

static const char *fake_name(struct rtx_backend *be) {
    (void)be;
    return "fake-device";
}
static void fake_free(struct rtx_backend *be) {
    struct fake_device *f = be->ctx;
    rtx_backend_free(f->cpu);
}
static bool fake_supports(struct rtx_backend *be, const struct rtx_graph *g,
                          const struct rtx_node *n) {
    return rtx_backend_supports_node(((struct fake_device *)be->ctx)->cpu, g, n);
}
static int fake_buffer(struct rtx_backend *be, size_t bytes, struct rtx_buffer **out,
                       struct rtx_err *err) {
    return rtx_backend_buffer_new(((struct fake_device *)be->ctx)->cpu, bytes, out, err);
}
static int fake_run(struct rtx_backend *be, const struct rtx_node_args *a, struct rtx_err *err) {
    return rtx_backend_run_node(((struct fake_device *)be->ctx)->cpu, a, err);
}
static int fake_copy(const struct rtx_tensor *src, struct rtx_tensor **dst, struct rtx_err *err) {
    int rc = rtx_tensor_new(src->dtype, src->ndim, src->dims, dst, err);
    if (rc == 0) memcpy(rtx_tensor_data(*dst), rtx_tensor_data(src), rtx_tensor_nbytes(src));
    return rc;
}
static int fake_upload(struct rtx_backend *be, const struct rtx_tensor *host,
                       struct rtx_tensor **dev, struct rtx_err *err) {
    ((struct fake_device *)be->ctx)->uploads++;
    return fake_copy(host, dev, err);
}
static int fake_download(struct rtx_backend *be, const struct rtx_tensor *dev,
                         struct rtx_tensor **host, struct rtx_err *err) {
    ((struct fake_device *)be->ctx)->downloads++;
    return fake_copy(dev, host, err);
}
static const struct rtx_backend_i fake_iface = {
    .name = fake_name, .free = fake_free, .supports_node = fake_supports,
    .buffer_new = fake_buffer, .run_node = fake_run, .upload = fake_upload,
    .download = fake_download,
};

START_TEST(device_backend_uploads_once_and_downloads_outputs) {
    struct fake_device f = {.be = {.iface = &fake_iface, .ctx = &f}, .cpu = cpu()};
    struct rtx_graph *g;
    int64_t d[] = {4};
    rtx_graph_new("dev", &g, NULL);
    rtx_graph_add_input(g, "x", RTX_F32, 1, d, NULL);
    double wv[] = {1, 2, 3, 4};
    struct rtx_tensor *w = tu_tensor(RTX_F32, 1, d, wv);
    rtx_graph_add_initializer(g, "w", w, NULL);
    rtx_tensor_unref(w);
    const char *in[] = {"x", "w"}, *out[] = {"y"};
    rtx_graph_add_node(g, "add", "add", in, 2, out, 1, NULL);
    rtx_graph_add_output(g, "y", NULL);
    double xv[] = {10, 20, 30, 40};
    struct rtx_tensor *x = tu_tensor(RTX_F32, 1, d, xv), *y = NULL;
    struct rtx_plan *p;
    struct rtx_err err;
    ck_assert(!rtx_backend_is_host(&f.be));
    ck_assert_int_eq(rtx_plan_new(g, (const struct rtx_tensor *const *)&x, 1, NULL, &p, &err), 0);
    for (int run = 0; run < 2; run++) {
        ck_assert_msg(rtx_plan_execute(p, &f.be, &x, 1, &y, 1, NULL, NULL, &err) == 0, "%s",
                      err.msg);
        double want[] = {11, 22, 33, 44};
        tu_assert_close(y, want, 0, 0);
        ck_assert_ptr_ne(y->buf, x->buf);
        rtx_tensor_unref(y);
    }
    /* the initializer once, the input per run; the output per run */
    ck_assert_int_eq(f.uploads, 1 + 2);
    ck_assert_int_eq(f.downloads, 2);
    rtx_plan_free(p);
    rtx_tensor_unref(x);
    rtx_graph_free(g);
    rtx_backend_free(&f.be); /* fake_free, after the constants cache */
}
END_TEST

START_TEST(reshape_of_graph_inputs_and_initializers_is_a_view) {
    struct rtx_graph *g = input_views_graph();
    int64_t d[] = {2, 8};
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 2, d, -1, 1, 10), *out[2];
    struct rtx_tensor *x0 = tu_tensor(RTX_F32, 2, d, NULL);
    memcpy(rtx_tensor_data(x0), rtx_tensor_data(x), rtx_tensor_nbytes(x));
    struct rtx_plan *p;
    struct rtx_exec_stats st;
    struct rtx_err err;
    ck_assert_int_eq(rtx_plan_new(g, (const struct rtx_tensor *const *)&x, 1, NULL, &p, &err), 0);
    ck_assert_uint_eq(rtx_plan_arena_bytes(p), 0); /* both reshapes are views */
    ck_assert_uint_eq(rtx_plan_unplanned_bytes(p), 0);
    struct rtx_backend *be = cpu();
    ck_assert_msg(rtx_plan_execute(p, be, &x, 1, out, 2, NULL, &st, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(st.nodes_run, 2);
    check_input_views(g, x, out);
    ck_assert(memcmp(rtx_tensor_data(x), rtx_tensor_data(x0), rtx_tensor_nbytes(x)) == 0);
    rtx_tensor_unref(out[0]);
    rtx_tensor_unref(out[1]);
    rtx_backend_free(be);
    /* a device backend: views of the uploaded input and initializer */
    struct fake_device f = {.be = {.iface = &fake_iface, .ctx = &f}, .cpu = cpu()};
    ck_assert_msg(rtx_plan_execute(p, &f.be, &x, 1, out, 2, NULL, &st, &err) == 0, "%s",
                  err.msg);
    ck_assert_int_eq(st.nodes_run, 2);
    ck_assert_int_eq(f.uploads, 2); /* x and w */
    check_input_views(g, x, out);
    rtx_tensor_unref(out[0]);
    rtx_tensor_unref(out[1]);
    rtx_backend_free(&f.be); /* fake_free, after the constants cache */
    rtx_plan_free(p);
    rtx_tensor_unref(x);
    rtx_tensor_unref(x0);
    rtx_graph_free(g);
}
END_TEST

Suite *rtx_plan_suite(void) {
    Suite *s = suite_create("plan");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, chain_reuses_two_buffers);
    tcase_add_test(tc, diamond_keeps_shared_value_alive);
    tcase_add_test(tc, dead_nodes_are_not_run);
    tcase_add_test(tc, outputs_may_be_inputs_or_initializers);
    tcase_add_test(tc, binding_checks_dtype_rank_and_fixed_dims);
    tcase_add_test(tc, execute_rejects_inputs_unlike_the_plan);
    tcase_add_test(tc, non_contiguous_inputs_are_made_contiguous);
    tcase_add_test(tc, non_contiguous_initializers_are_stored_contiguous);
    tcase_add_test(tc, cancel_flag_stops_between_ops);
    tcase_add_test(tc, plan_and_execute_survive_allocation_failures);
    tcase_add_test(tc, device_backend_uploads_once_and_downloads_outputs);
    tcase_add_test(tc, reshape_of_an_intermediate_is_a_view);
    tcase_add_test(tc, view_keeps_its_storage_live_past_later_outputs);
    tcase_add_test(tc, reshape_chain_shares_one_storage);
    tcase_add_test(tc, reshape_of_graph_inputs_and_initializers_is_a_view);
    tcase_add_test(tc, reshape_to_a_graph_output_gets_its_own_buffer);
    tcase_add_test(tc, empty_intermediates_need_no_arena);
    suite_add_tcase(s, tc);
    return s;
}
