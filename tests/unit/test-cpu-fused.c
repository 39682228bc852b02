/*
 * test-cpu-fused.c - the CPU backend's fused groups (backend-cpu.c cpu_fused_span, the
 * rtx__cpu_epilogue of ops-linalg.c, ops-conv.c and conv-direct.c): which node chains it
 * groups, and that a group computes the same bits as its nodes run one at a time (each
 * checked against NumPy-style references by the cpu_* suites), on both ISA builds (make
 * test-unit runs this suite under RTX_CPU_ISA=generic too).
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/backend-cpu.h"
#include "runtime/backend-impl.h"
#include "tests/unit/test-util.h"

#define MAX_STEPS 4

/* One node of a chain: op, attributes, inputs (names: "x0".. for the chain's inputs, "s0"..
 * for earlier steps' outputs). Step k writes "s<k>"; the last step's output is the graph's. */
struct step {
    const char *op, *attrs;
    const char *in[3];
    int n_in;
};

static struct rtx_graph *chain_graph(const struct step *st, int n, struct rtx_tensor **x,
                                     int nx, bool extra_reader) {
    struct rtx_graph *g;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_graph_new("chain", &g, &err), 0);
    char name[16];
    for (int i = 0; i < nx; i++) {
        snprintf(name, sizeof name, "x%d", i);
        ck_assert_int_ge(rtx_graph_add_input(g, name, x[i]->dtype, x[i]->ndim, x[i]->dims, &err),
                         0);
    }
    for (int k = 0; k < n; k++) {
        const char *out[1] = {name};
        snprintf(name, sizeof name, "s%d", k);
        int node = rtx_graph_add_node(g, st[k].op, name, st[k].in, st[k].n_in, out, 1, &err);
        ck_assert_msg(node >= 0, "%s: %s", st[k].op, err.msg);
        tu_set_attrs(g, node, st[k].attrs);
    }
    snprintf(name, sizeof name, "s%d", n - 1);
    ck_assert_int_eq(rtx_graph_add_output(g, name, &err), 0);
    if (extra_reader) ck_assert_int_eq(rtx_graph_add_output(g, "s0", &err), 0);
    return g;
}

/* The chain's output through the executor (groups fused where the backend groups them). */
static struct rtx_tensor *run_chain(const struct step *st, int n, struct rtx_tensor **x, int nx) {
    struct rtx_graph *g = chain_graph(st, n, x, nx, false);
    struct rtx_plan *plan;
    struct rtx_backend *be;
    struct rtx_tensor *out[1] = {NULL};
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_plan_new(g, (const struct rtx_tensor *const *)x, nx, NULL, &plan, &err),
                     0);
    ck_assert_int_eq(rtx_backend_cpu_new(&(struct rtx_cpu_options){.n_threads = 2}, &be, &err),
                     0);
    int rc = rtx_plan_execute(plan, be, x, nx, out, 1, NULL, NULL, &err);
    ck_assert_msg(rc == 0, "chain: %s", err.msg);
    rtx_backend_free(be);
    rtx_plan_free(plan);
    rtx_graph_free(g);
    return out[0];
}

/* The same chain one node per graph: nothing to fuse. */
static struct rtx_tensor *run_steps(const struct step *st, int n, struct rtx_tensor **x) {
    struct rtx_tensor *s[MAX_STEPS] = {NULL};
    for (int k = 0; k < n; k++) {
        struct rtx_tensor *in[3];
        for (int i = 0; i < st[k].n_in; i++)
            in[i] = st[k].in[i][0] == 'x' ? x[atoi(st[k].in[i] + 1)] : s[atoi(st[k].in[i] + 1)];
        struct rtx_err err = {0};
        int rc = tu_run_op(st[k].op, st[k].attrs, in, st[k].n_in, &s[k], 1, &err);
        ck_assert_msg(rc == 0, "%s: %s", st[k].op, err.msg);
    }
    for (int k = 0; k < n - 1; k++) rtx_tensor_unref(s[k]);
    return s[n - 1];
}

/* The span the CPU backend gives the chain (every value read once, or s0 twice). */
static int chain_span(const struct step *st, int n, struct rtx_tensor **x, int nx,
                      bool extra_reader) {
    struct rtx_graph *g = chain_graph(st, n, x, nx, extra_reader);
    struct rtx_backend *be;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_backend_cpu_new(NULL, &be, &err), 0);
    int order[MAX_STEPS], *uses = calloc((size_t)g->n_values, sizeof *uses);
    for (int k = 0; k < n; k++) {
        order[k] = k;
        for (int i = 0; i < g->nodes[k].n_inputs; i++) uses[g->nodes[k].inputs[i]]++;
    }
    for (int i = 0; i < g->n_outputs; i++) uses[g->outputs[i]]++;
    int span = rtx_backend_fused_span(be, g, order, n, uses);
    free(uses);
    rtx_backend_free(be);
    rtx_graph_free(g);
    return span;
}

/* chain fused == chain node by node, bit for bit, and the backend groups `want` nodes. */
static void check_chain(const struct step *st, int n, struct rtx_tensor **x, int nx, int want) {
    ck_assert_int_eq(chain_span(st, n, x, nx, false), want);
    struct rtx_tensor *a = run_chain(st, n, x, nx), *b = run_steps(st, n, x);
    ck_assert_int_eq(a->ndim, b->ndim);
    ck_assert_int_eq(rtx_tensor_numel(a), rtx_tensor_numel(b));
    ck_assert_msg(memcmp(rtx_tensor_data(a), rtx_tensor_data(b),
                         (size_t)rtx_tensor_numel(a) * rtx_dtype_size(a->dtype)) == 0,
                  "%s chain of %d: the fused result differs from the nodes'", st[0].op, n);
    rtx_tensor_unref(a);
    rtx_tensor_unref(b);
    for (int i = 0; i < nx; i++) rtx_tensor_unref(x[i]);
}

START_TEST(matmul_bias_activation_residual) {
    int64_t dx[3] = {2, 5, 37}, dw[2] = {37, 29}, db[1] = {29};
    struct step gelu[3] = {{"matmul", "", {"x0", "x1"}, 2}, {"add", "", {"s0", "x2"}, 2},
                           {"gelu", "", {"s1"}, 1}};
    struct rtx_tensor *x[4] = {tu_tensor_random(RTX_F32, 3, dx, -2, 2, 1),
                               tu_tensor_random(RTX_F32, 2, dw, -1, 1, 2),
                               tu_tensor_random(RTX_F32, 1, db, -1, 1, 3)};
    check_chain(gelu, 3, x, 3, 3);
    /* large enough for column panels over the pool; the bias first, tanh GELU */
    int64_t dx2[2] = {128, 160}, dw2[2] = {160, 192}, db2[1] = {192};
    struct step tanh[3] = {{"matmul", "", {"x0", "x1"}, 2}, {"add", "", {"x2", "s0"}, 2},
                           {"gelu", "approximate=s:tanh", {"s1"}, 1}};
    x[0] = tu_tensor_random(RTX_F32, 2, dx2, -2, 2, 4);
    x[1] = tu_tensor_random(RTX_F32, 2, dw2, -1, 1, 5);
    x[2] = tu_tensor_random(RTX_F32, 1, db2, -1, 1, 6);
    check_chain(tanh, 3, x, 3, 3);
    /* bias then residual */
    int64_t dr[2] = {128, 192};
    struct step res[3] = {{"matmul", "", {"x0", "x1"}, 2}, {"add", "", {"s0", "x2"}, 2},
                          {"add", "", {"x3", "s1"}, 2}};
    x[0] = tu_tensor_random(RTX_F32, 2, dx2, -2, 2, 7);
    x[1] = tu_tensor_random(RTX_F32, 2, dw2, -1, 1, 8);
    x[2] = tu_tensor_random(RTX_F32, 1, db2, -1, 1, 9);
    x[3] = tu_tensor_random(RTX_F32, 2, dr, -1, 1, 10);
    check_chain(res, 3, x, 4, 3);
    /* a real batch (b is no shared matrix): the epilogue runs as a pass after the products */
    int64_t da[3] = {3, 7, 9}, dbm[3] = {3, 9, 5}, dbb[1] = {5};
    struct step batch[3] = {{"matmul", "", {"x0", "x1"}, 2}, {"add", "", {"s0", "x2"}, 2},
                            {"relu", "", {"s1"}, 1}};
    x[0] = tu_tensor_random(RTX_F32, 3, da, -2, 2, 11);
    x[1] = tu_tensor_random(RTX_F32, 3, dbm, -1, 1, 12);
    x[2] = tu_tensor_random(RTX_F32, 1, dbb, -1, 1, 13);
    check_chain(batch, 3, x, 3, 3);
}
END_TEST

START_TEST(gemm_and_conv_groups) {
    int64_t dx[2] = {33, 20}, dw[2] = {24, 20}, dc[1] = {24};
    struct step gemm[2] = {{"gemm", "trans_b=i:1;beta=f:0.5", {"x0", "x1", "x2"}, 3},
                           {"relu", "", {"s0"}, 1}};
    struct rtx_tensor *x[4] = {tu_tensor_random(RTX_F32, 2, dx, -2, 2, 20),
                               tu_tensor_random(RTX_F32, 2, dw, -1, 1, 21),
                               tu_tensor_random(RTX_F32, 1, dc, -1, 1, 22)};
    check_chain(gemm, 2, x, 3, 2);
    /* large enough for the product to be split over the pool's threads (panels of columns),
     * each panel's epilogue applied by its own thread */
    int64_t dx2[2] = {128, 160}, dw2[2] = {192, 160}, dc2[1] = {192};
    struct step big[2] = {{"gemm", "trans_b=i:1;alpha=f:0.75;beta=f:0.5", {"x0", "x1", "x2"}, 3},
                          {"relu", "", {"s0"}, 1}};
    x[0] = tu_tensor_random(RTX_F32, 2, dx2, -2, 2, 29);
    x[1] = tu_tensor_random(RTX_F32, 2, dw2, -1, 1, 30);
    x[2] = tu_tensor_random(RTX_F32, 1, dc2, -1, 1, 31);
    check_chain(big, 2, x, 3, 2);
    int64_t di[4] = {2, 8, 12, 11}, dk[4] = {16, 8, 3, 3}, db[1] = {16}, dy[4] = {2, 16, 12, 11};
    struct step conv[3] = {{"conv2d", "pads=I:1,1,1,1", {"x0", "x1", "x2"}, 3},
                           {"add", "", {"x3", "s0"}, 2}, {"relu", "", {"s1"}, 1}};
    x[0] = tu_tensor_random(RTX_F32, 4, di, -1, 1, 23);
    x[1] = tu_tensor_random(RTX_F32, 4, dk, -1, 1, 24);
    x[2] = tu_tensor_random(RTX_F32, 1, db, -1, 1, 25);
    x[3] = tu_tensor_random(RTX_F32, 4, dy, -1, 1, 26);
    check_chain(conv, 3, x, 4, 3);
    struct step conv2[2] = {{"conv2d", "strides=I:2,2", {"x0", "x1"}, 2},
                            {"gelu", "", {"s0"}, 1}};
    x[0] = tu_tensor_random(RTX_F32, 4, di, -1, 1, 27);
    x[1] = tu_tensor_random(RTX_F32, 4, dk, -1, 1, 28);
    check_chain(conv2, 2, x, 2, 2);
    /* 40 output channels: the channel-vector tiles (both widths), a partial last block */
    int64_t dk3[4] = {40, 8, 3, 3}, db3[1] = {40}, dy3[4] = {2, 40, 12, 11};
    x[0] = tu_tensor_random(RTX_F32, 4, di, -1, 1, 40);
    x[1] = tu_tensor_random(RTX_F32, 4, dk3, -1, 1, 41);
    x[2] = tu_tensor_random(RTX_F32, 1, db3, -1, 1, 42);
    x[3] = tu_tensor_random(RTX_F32, 4, dy3, -1, 1, 43);
    check_chain(conv, 3, x, 4, 3);
    x[0] = tu_tensor_random(RTX_F32, 4, di, -1, 1, 44);
    x[1] = tu_tensor_random(RTX_F32, 4, dk3, -1, 1, 45);
    check_chain(conv2, 2, x, 2, 2);
    /* an even output width: Winograd's rows take the bias, the residual and relu in its
     * registers (an odd one goes through its row buffer) */
    int64_t de[4] = {2, 8, 12, 10}, dye[4] = {2, 40, 12, 10};
    x[0] = tu_tensor_random(RTX_F32, 4, de, -1, 1, 48);
    x[1] = tu_tensor_random(RTX_F32, 4, dk3, -1, 1, 49);
    x[2] = tu_tensor_random(RTX_F32, 1, db3, -1, 1, 50);
    x[3] = tu_tensor_random(RTX_F32, 4, dye, -1, 1, 51);
    check_chain(conv, 3, x, 4, 3);
    /* strided convs of 40 channels (channel-vector tiles: two whole blocks, stored through a
     * transpose in registers in the AVX2 object, and a partial one), 7x7 outputs (tiles of
     * 6 pixels and one of 1), with a residual and relu: 1x1 unpadded, 3x3 padded */
    int64_t ds[4] = {2, 8, 13, 13}, dy7[4] = {2, 40, 7, 7}, dk1[4] = {40, 8, 1, 1};
    struct step s1x1[3] = {{"conv2d", "strides=I:2,2", {"x0", "x1", "x2"}, 3},
                           {"add", "", {"s0", "x3"}, 2}, {"relu", "", {"s1"}, 1}};
    x[0] = tu_tensor_random(RTX_F32, 4, ds, -1, 1, 52);
    x[1] = tu_tensor_random(RTX_F32, 4, dk1, -1, 1, 53);
    x[2] = tu_tensor_random(RTX_F32, 1, db3, -1, 1, 54);
    x[3] = tu_tensor_random(RTX_F32, 4, dy7, -1, 1, 55);
    check_chain(s1x1, 3, x, 4, 3);
    struct step s3x3[3] = {{"conv2d", "strides=I:2,2;pads=I:1,1,1,1", {"x0", "x1", "x2"}, 3},
                           {"add", "", {"x3", "s0"}, 2}, {"relu", "", {"s1"}, 1}};
    x[0] = tu_tensor_random(RTX_F32, 4, ds, -1, 1, 56);
    x[1] = tu_tensor_random(RTX_F32, 4, dk3, -1, 1, 57);
    x[2] = tu_tensor_random(RTX_F32, 1, db3, -1, 1, 58);
    x[3] = tu_tensor_random(RTX_F32, 4, dy7, -1, 1, 59);
    check_chain(s3x3, 3, x, 4, 3);
    /* a 3x3 stride-1 conv (Winograd in the AVX2 build) with an activation other than relu */
    struct step conv3[2] = {{"conv2d", "pads=I:1,0,1,2", {"x0", "x1"}, 2},
                            {"gelu", "", {"s0"}, 1}};
    x[0] = tu_tensor_random(RTX_F32, 4, di, -1, 1, 46);
    x[1] = tu_tensor_random(RTX_F32, 4, dk3, -1, 1, 47);
    check_chain(conv3, 2, x, 2, 2);
}
END_TEST

START_TEST(groups_that_do_not_fit_run_node_by_node) {
    /* an add broadcasting a column is no row bias: grouped, then run node by node */
    int64_t dx[2] = {9, 6}, dw[2] = {6, 7}, dcol[2] = {9, 1};
    struct step col[2] = {{"matmul", "", {"x0", "x1"}, 2}, {"add", "", {"s0", "x2"}, 2}};
    struct rtx_tensor *x[3] = {tu_tensor_random(RTX_F32, 2, dx, -2, 2, 30),
                               tu_tensor_random(RTX_F32, 2, dw, -1, 1, 31),
                               tu_tensor_random(RTX_F32, 2, dcol, -1, 1, 32)};
    check_chain(col, 2, x, 3, 2);
    /* f16: not fused either */
    int64_t db[1] = {7};
    struct step half[3] = {{"matmul", "", {"x0", "x1"}, 2}, {"add", "", {"s0", "x2"}, 2},
                           {"relu", "", {"s1"}, 1}};
    x[0] = tu_tensor_random(RTX_F16, 2, dx, -2, 2, 33);
    x[1] = tu_tensor_random(RTX_F16, 2, dw, -1, 1, 34);
    x[2] = tu_tensor_random(RTX_F16, 1, db, -1, 1, 35);
    check_chain(half, 3, x, 3, 3);
}
END_TEST

START_TEST(span_stops_at_shared_values_and_other_ops) {
    int64_t dx[2] = {4, 6}, dw[2] = {6, 5}, db[1] = {5};
    struct step st[3] = {{"matmul", "", {"x0", "x1"}, 2}, {"add", "", {"s0", "x2"}, 2},
                         {"relu", "", {"s1"}, 1}};
    struct rtx_tensor *x[3] = {tu_tensor_random(RTX_F32, 2, dx, -1, 1, 40),
                               tu_tensor_random(RTX_F32, 2, dw, -1, 1, 41),
                               tu_tensor_random(RTX_F32, 1, db, -1, 1, 42)};
    ck_assert_int_eq(chain_span(st, 3, x, 3, false), 3);
    ck_assert_int_eq(chain_span(st, 3, x, 3, true), 1); /* s0 is also a graph output */
    struct step tail[3] = {{"matmul", "", {"x0", "x1"}, 2}, {"relu", "", {"s0"}, 1},
                           {"add", "", {"s1", "x2"}, 2}};
    ck_assert_int_eq(chain_span(tail, 3, x, 3, false), 2); /* nothing after the activation */
    struct step other[2] = {{"add", "", {"x0", "x0"}, 2}, {"relu", "", {"s0"}, 1}};
    ck_assert_int_eq(chain_span(other, 2, x, 3, false), 1);
    for (int i = 0; i < 3; i++) rtx_tensor_unref(x[i]);
}
END_TEST

Suite *rtx_cpu_fused_suite(void) {
    Suite *s = suite_create("cpu_fused");
    TCase *tc = tcase_create("fused");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, matmul_bias_activation_residual);
    tcase_add_test(tc, gemm_and_conv_groups);
    tcase_add_test(tc, groups_that_do_not_fit_run_node_by_node);
    tcase_add_test(tc, span_stops_at_shared_values_and_other_ops);
    suite_add_tcase(s, tc);
    return s;
}
