/*
 * test-validate.c - one test per validation error class: arity, attributes, dtypes, shapes,
 * dangling inputs, cycles, limits, outputs. Each checks the code and that the message names
 * the node and the reason. Also the node order (rtx__topo_order): the smallest ready index
 * first, on hand-made graphs and against a quadratic reference on random ones.
 */
#include <string.h>

#include "runtime/runtime-impl.h"
#include "tests/unit/test-util.h"

/* Splits "a,b" into names (empty list for ""); returns the count. */
static int split(const char *list, char buf[][32], const char **names) {
    int n = 0;
    const char *p = list;
    while (*p || (n > 0 && p[-1] == ',')) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        snprintf(buf[n], 32, "%.*s", (int)len, p);
        names[n] = buf[n];
        n++;
        if (!e) break;
        p = e + 1;
    }
    return n;
}

static int node(struct rtx_graph *g, const char *op, const char *name, const char *ins,
                const char *outs) {
    char ib[8][32], ob[8][32];
    const char *in[8], *out[8];
    int ni = split(ins, ib, in), no = split(outs, ob, out);
    struct rtx_err err;
    int rc = rtx_graph_add_node(g, op, name, in, ni, out, no, &err);
    ck_assert_msg(rc >= 0, "add_node: %s", err.msg);
    return rc;
}

static struct rtx_graph *graph_xy(enum rtx_dtype dx, int ndx, const int64_t *dimx,
                                  enum rtx_dtype dy, int ndy, const int64_t *dimy) {
    struct rtx_graph *g;
    rtx_graph_new("t", &g, NULL);
    ck_assert_int_ge(rtx_graph_add_input(g, "x", dx, ndx, dimx, NULL), 0);
    if (ndy >= 0) ck_assert_int_ge(rtx_graph_add_input(g, "y", dy, ndy, dimy, NULL), 0);
    return g;
}

/* Validates and checks the code and that every `needles` substring is in the message. */
static void expect_invalid(struct rtx_graph *g, int code, const char *n1, const char *n2) {
    struct rtx_err err = {0};
    int rc = rtx_graph_validate(g, NULL, &err);
    ck_assert_msg(rc == code, "validate gave %d (%s), want %d", rc, err.msg, code);
    ck_assert_msg(strstr(err.msg, n1), "message '%s' lacks '%s'", err.msg, n1);
    if (n2) ck_assert_msg(strstr(err.msg, n2), "message '%s' lacks '%s'", err.msg, n2);
    rtx_graph_free(g);
}

static const int64_t d23[] = {2, 3}, d34[] = {3, 4}, d43[] = {4, 3};

START_TEST(rejects_wrong_arity) {
    struct rtx_graph *g = graph_xy(RTX_F32, 2, d23, RTX_F32, 2, d23);
    node(g, "add", "plus", "x", "z");
    rtx_graph_add_output(g, "z", NULL);
    expect_invalid(g, RTX_EGRAPH, "node 0 'plus' (add)", "takes 2 inputs, got 1");
}
END_TEST

START_TEST(rejects_missing_required_input) {
    struct rtx_graph *g = graph_xy(RTX_F32, 2, d23, RTX_F32, 2, d23);
    node(g, "add", "plus", ",y", "z");
    rtx_graph_add_output(g, "z", NULL);
    expect_invalid(g, RTX_EGRAPH, "node 0 'plus' (add)", "input 0 is required");
}
END_TEST

START_TEST(rejects_unknown_attribute) {
    struct rtx_graph *g = graph_xy(RTX_F32, 2, d23, 0, -1, NULL);
    int n = node(g, "softmax", "sm", "x", "z");
    rtx_graph_set_attr_int(g, n, "axes", 1, NULL);
    rtx_graph_add_output(g, "z", NULL);
    expect_invalid(g, RTX_EGRAPH, "node 0 'sm' (softmax)", "no attribute 'axes'");
}
END_TEST

START_TEST(rejects_attribute_of_wrong_type) {
    struct rtx_graph *g = graph_xy(RTX_F32, 2, d23, 0, -1, NULL);
    int n = node(g, "softmax", "sm", "x", "z");
    rtx_graph_set_attr_float(g, n, "axis", 1.0, NULL);
    rtx_graph_add_output(g, "z", NULL);
    expect_invalid(g, RTX_EGRAPH, "'axis' must be int, not float", "node 0 'sm'");
}
END_TEST

START_TEST(rejects_missing_required_attribute) {
    struct rtx_graph *g = graph_xy(RTX_F32, 2, d23, 0, -1, NULL);
    node(g, "reshape", "r", "x", "z");
    rtx_graph_add_output(g, "z", NULL);
    expect_invalid(g, RTX_EGRAPH, "requires attribute 'shape'", "node 0 'r'");
}
END_TEST

START_TEST(rejects_bad_attribute_value) {
    struct rtx_graph *g = graph_xy(RTX_F32, 2, d23, 0, -1, NULL);
    int n = node(g, "softmax", "sm", "x", "z");
    rtx_graph_set_attr_int(g, n, "axis", 2, NULL);
    rtx_graph_add_output(g, "z", NULL);
    expect_invalid(g, RTX_EGRAPH, "node 0 'sm' (softmax)", "axis 2 out of range for rank 2");

    g = graph_xy(RTX_F32, 2, d23, 0, -1, NULL);
    n = node(g, "cast", "c", "x", "z");
    rtx_graph_set_attr_string(g, n, "to", "f64", NULL);
    rtx_graph_add_output(g, "z", NULL);
    expect_invalid(g, RTX_EGRAPH, "node 0 'c' (cast)", "unknown dtype \"f64\"");

    g = graph_xy(RTX_F32, 2, d23, 0, -1, NULL);
    n = node(g, "transpose", "t", "x", "z");
    int64_t perm[] = {0, 0};
    rtx_graph_set_attr_ints(g, n, "perm", perm, 2, NULL);
    rtx_graph_add_output(g, "z", NULL);
    expect_invalid(g, RTX_EGRAPH, "node 0 't' (transpose)", "not a permutation");

    g = graph_xy(RTX_F32, 2, d23, 0, -1, NULL);
    n = node(g, "gelu", "g", "x", "z");
    rtx_graph_set_attr_string(g, n, "approximate", "fast", NULL);
    rtx_graph_add_output(g, "z", NULL);
    expect_invalid(g, RTX_EGRAPH, "node 0 'g' (gelu)", "\"fast\"");
}
END_TEST

START_TEST(rejects_dtype_mismatch) {
    struct rtx_graph *g = graph_xy(RTX_F32, 2, d23, RTX_F16, 2, d23);
    node(g, "mul", "m", "x,y", "z");
    rtx_graph_add_output(g, "z", NULL);
    expect_invalid(g, RTX_EGRAPH, "node 0 'm' (mul)", "dtype mismatch: input 1 is f16");

    g = graph_xy(RTX_I32, 2, d23, 0, -1, NULL);
    node(g, "exp", "e", "x", "z");
    rtx_graph_add_output(g, "z", NULL);
    expect_invalid(g, RTX_EGRAPH, "node 0 'e' (exp)", "must be f32, f16 or bf16, not i32");
}
END_TEST

START_TEST(rejects_shape_mismatch) {
    struct rtx_graph *g = graph_xy(RTX_F32, 2, d23, RTX_F32, 2, d43);
    node(g, "add", "a", "x,y", "z");
    rtx_graph_add_output(g, "z", NULL);
    expect_invalid(g, RTX_EGRAPH, "node 0 'a' (add)", "f32[2,3] and f32[4,3] do not broadcast");

    g = graph_xy(RTX_F32, 2, d23, RTX_F32, 2, d43);
    node(g, "matmul", "mm", "x,y", "z");
    rtx_graph_add_output(g, "z", NULL);
    expect_invalid(g, RTX_EGRAPH, "node 0 'mm' (matmul)", "inner dimensions differ");
}
END_TEST

START_TEST(shape_errors_name_the_downstream_node) {
    struct rtx_graph *g = graph_xy(RTX_F32, 2, d23, RTX_F32, 2, d34);
    node(g, "matmul", "mm", "x,y", "h");   /* [2,4] */
    node(g, "add", "bad", "h,x", "z");     /* [2,4] + [2,3] */
    rtx_graph_add_output(g, "z", NULL);
    expect_invalid(g, RTX_EGRAPH, "node 1 'bad' (add)", "f32[2,4] and f32[2,3]");
}
END_TEST

START_TEST(rejects_dangling_input) {
    struct rtx_graph *g = graph_xy(RTX_F32, 2, d23, 0, -1, NULL);
    node(g, "add", "a", "x,ghost", "z");
    rtx_graph_add_output(g, "z", NULL);
    expect_invalid(g, RTX_EGRAPH, "node 0 'a' (add): input 1 'ghost' is dangling", NULL);
}
END_TEST

START_TEST(rejects_cycle_naming_its_path) {
    struct rtx_graph *g = graph_xy(RTX_F32, 2, d23, 0, -1, NULL);
    node(g, "add", "a", "x,c", "a_out");
    node(g, "relu", "b", "a_out", "b_out");
    node(g, "neg", "c", "b_out", "c");
    node(g, "neg", "out", "a_out", "z");
    rtx_graph_add_output(g, "z", NULL);
    expect_invalid(g, RTX_EGRAPH, "graph has a cycle", "node 0 'a' -> node 1 'b' -> node 2 'c'");
}
END_TEST

START_TEST(rejects_self_loop) {
    struct rtx_graph *g = graph_xy(RTX_F32, 2, d23, 0, -1, NULL);
    node(g, "add", "loop", "x,z", "z");
    rtx_graph_add_output(g, "z", NULL);
    expect_invalid(g, RTX_EGRAPH, "graph has a cycle", "node 0 'loop' -> node 0 'loop'");
}
END_TEST

START_TEST(accepts_nodes_out_of_order) {
    struct rtx_graph *g = graph_xy(RTX_F32, 2, d23, 0, -1, NULL);
    node(g, "neg", "second", "h", "z");
    node(g, "relu", "first", "x", "h");
    rtx_graph_add_output(g, "z", NULL);
    ck_assert_int_eq(rtx_graph_validate(g, NULL, NULL), 0);
    rtx_graph_free(g);
}
END_TEST

START_TEST(rejects_graph_without_outputs_or_with_unproduced_output) {
    struct rtx_graph *g = graph_xy(RTX_F32, 2, d23, 0, -1, NULL);
    node(g, "neg", "n", "x", "z");
    expect_invalid(g, RTX_EGRAPH, "no outputs", NULL);
    g = graph_xy(RTX_F32, 2, d23, 0, -1, NULL);
    rtx_graph_add_output(g, "nothing", NULL);
    expect_invalid(g, RTX_EGRAPH, "output 'nothing' is never produced", NULL);
}
END_TEST

START_TEST(enforces_limits) {
    struct rtx_limits lim = rtx_limits_default();
    struct rtx_err err;
    struct rtx_graph *g = graph_xy(RTX_F32, 2, d23, 0, -1, NULL);
    node(g, "neg", "n1", "x", "a");
    node(g, "neg", "n2", "a", "b");
    node(g, "neg", "n3", "b", "z");
    rtx_graph_add_output(g, "z", NULL);
    lim.max_nodes = 2;
    ck_assert_int_eq(rtx_graph_validate(g, &lim, &err), RTX_ELIMIT);
    ck_assert_ptr_nonnull(strstr(err.msg, "3 nodes, limit 2"));
    lim = rtx_limits_default();
    lim.max_elements = 5;
    ck_assert_int_eq(rtx_graph_validate(g, &lim, &err), RTX_ELIMIT);
    ck_assert_ptr_nonnull(strstr(err.msg, "input 'x' has 6 elements, limit 5"));
    lim = rtx_limits_default();
    lim.max_dims = 1;
    ck_assert_int_eq(rtx_graph_validate(g, &lim, &err), RTX_ELIMIT);
    rtx_graph_free(g);

    /* an intermediate that exceeds the byte limit is named with its node */
    int64_t d[] = {4, 4};
    g = graph_xy(RTX_F32, 2, d, 0, -1, NULL);
    int n = node(g, "expand", "big", "x", "z");
    int64_t shp[] = {1000, 4, 4};
    rtx_graph_set_attr_ints(g, n, "shape", shp, 3, NULL);
    rtx_graph_add_output(g, "z", NULL);
    lim = rtx_limits_default();
    lim.max_tensor_bytes = 1000;
    ck_assert_int_eq(rtx_graph_validate(g, &lim, &err), RTX_ELIMIT);
    ck_assert_ptr_nonnull(strstr(err.msg, "node 0 'big' (expand): output 'z' has 64000 bytes"));
    rtx_graph_free(g);
}
END_TEST

START_TEST(dynamic_inputs_skip_shape_inference_until_bound) {
    int64_t d[] = {-1, 3};
    struct rtx_graph *g = graph_xy(RTX_F32, 2, d, RTX_F32, 2, d43);
    node(g, "matmul", "mm", "x,y", "z"); /* [?,3] x [4,3]: only a plan can tell */
    rtx_graph_add_output(g, "z", NULL);
    ck_assert_int_eq(rtx_graph_validate(g, NULL, NULL), 0);
    rtx_graph_free(g);
}
END_TEST

/* The order of g as rtx__topo_order gives it, checked against want[n]. */
static void expect_order(const struct rtx_graph *g, const int *want, int n) {
    int order[64];
    struct rtx_err err = {0};
    ck_assert_int_eq(g->n_nodes, n);
    ck_assert_msg(rtx__topo_order(g, order, &err) == 0, "%s", err.msg);
    for (int k = 0; k < n; k++)
        ck_assert_msg(order[k] == want[k], "position %d: node %d, want %d", k, order[k],
                      want[k]);
}

START_TEST(order_takes_the_smallest_ready_index) {
    /* a diamond as written: breadth-first would run abs (2) before exp (1) */
    struct rtx_graph *g = graph_xy(RTX_F32, 2, d23, 0, -1, NULL);
    node(g, "neg", "a", "x", "a");
    node(g, "exp", "b", "a", "b");
    node(g, "abs", "c", "x", "c");
    node(g, "relu", "d", "b", "d");
    node(g, "add", "z", "d,c", "z");
    rtx_graph_add_output(g, "z", NULL);
    expect_order(g, (const int[]){0, 1, 2, 3, 4}, 5);
    rtx_graph_free(g);
    /* written out of order: the smallest index among the ready nodes, not overall */
    g = graph_xy(RTX_F32, 2, d23, 0, -1, NULL);
    node(g, "add", "z", "b,c", "z");
    node(g, "exp", "b", "a", "b");
    node(g, "neg", "a", "x", "a");
    node(g, "abs", "c", "x", "c");
    rtx_graph_add_output(g, "z", NULL);
    expect_order(g, (const int[]){2, 1, 3, 0}, 4);
    rtx_graph_free(g);
}
END_TEST

START_TEST(order_keeps_each_matmul_next_to_its_add) {
    /* the block's three projections of one h: breadth-first ran 1, 3, 5, 2, 4, 6 */
    int64_t wd[] = {3, 3};
    struct rtx_graph *g = graph_xy(RTX_F32, 2, d23, RTX_F32, 2, wd);
    node(g, "relu", "ln", "x", "h");
    node(g, "matmul", "q_mm", "h,y", "q_mm");
    node(g, "add", "q", "q_mm,h", "q");
    node(g, "matmul", "k_mm", "h,y", "k_mm");
    node(g, "add", "k", "k_mm,h", "k");
    node(g, "matmul", "v_mm", "h,y", "v_mm");
    node(g, "add", "v", "v_mm,h", "v");
    node(g, "attention", "att", "q,k,v", "att");
    rtx_graph_add_output(g, "att", NULL);
    expect_order(g, (const int[]){0, 1, 2, 3, 4, 5, 6, 7}, 8);
    rtx_graph_free(g);
}
END_TEST

/* The reference: repeatedly the smallest index whose producers are all placed, O(n^2). */
static void reference_order(const struct rtx_graph *g, int *order) {
    bool placed[300] = {false};
    for (int k = 0; k < g->n_nodes; k++) {
        for (int i = 0; i < g->n_nodes; i++) {
            const struct rtx_node *n = &g->nodes[i];
            bool ready = !placed[i];
            for (int j = 0; j < n->n_inputs && ready; j++) {
                int p = g->values[n->inputs[j]].producer;
                ready = p < 0 || placed[p];
            }
            if (ready) {
                order[k] = i;
                placed[i] = true;
                break;
            }
        }
    }
}

START_TEST(order_matches_the_reference_on_random_graphs) {
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int round = 0; round < 20; round++) {
        enum { N = 300 };
        /* value t_i comes from node i and reads 1-3 earlier values (or x); the nodes are added
         * in a shuffled order, so node indices and the data flow disagree */
        int perm[N], srcs[N][3], nsrc[N];
        for (int i = 0; i < N; i++) {
            perm[i] = i;
            nsrc[i] = 1 + (int)((s = s * 6364136223846793005ull + 1) >> 62) % 3;
            for (int j = 0; j < nsrc[i]; j++)
                srcs[i][j] = (int)((s = s * 6364136223846793005ull + 1) >> 33) % (i + 1) - 1;
        }
        for (int i = N - 1; i > 0; i--) {
            int j = (int)((s = s * 6364136223846793005ull + 1) >> 33) % (i + 1);
            int t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        int64_t d[] = {2};
        struct rtx_graph *g = graph_xy(RTX_F32, 1, d, 0, -1, NULL);
        for (int k = 0; k < N; k++) {
            int i = perm[k];
            char ins[64] = "", out[16];
            for (int j = 0; j < nsrc[i]; j++) {
                char one[16];
                if (srcs[i][j] < 0) snprintf(one, sizeof one, "x");
                else snprintf(one, sizeof one, "t%d", srcs[i][j]);
                snprintf(ins + strlen(ins), sizeof ins - strlen(ins), "%s%s", j ? "," : "", one);
            }
            snprintf(out, sizeof out, "t%d", i);
            node(g, nsrc[i] == 1 ? "neg" : nsrc[i] == 2 ? "add" : "where", out, ins, out);
        }
        int got[N], want[N];
        struct rtx_err err = {0};
        ck_assert_msg(rtx__topo_order(g, got, &err) == 0, "%s", err.msg);
        reference_order(g, want);
        for (int k = 0; k < N; k++) ck_assert_int_eq(got[k], want[k]);
        rtx_graph_free(g);
    }
}
END_TEST

Suite *rtx_validate_suite(void) {
    Suite *s = suite_create("validate");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, rejects_wrong_arity);
    tcase_add_test(tc, rejects_missing_required_input);
    tcase_add_test(tc, rejects_unknown_attribute);
    tcase_add_test(tc, rejects_attribute_of_wrong_type);
    tcase_add_test(tc, rejects_missing_required_attribute);
    tcase_add_test(tc, rejects_bad_attribute_value);
    tcase_add_test(tc, rejects_dtype_mismatch);
    tcase_add_test(tc, rejects_shape_mismatch);
    tcase_add_test(tc, shape_errors_name_the_downstream_node);
    tcase_add_test(tc, rejects_dangling_input);
    tcase_add_test(tc, rejects_cycle_naming_its_path);
    tcase_add_test(tc, rejects_self_loop);
    tcase_add_test(tc, accepts_nodes_out_of_order);
    tcase_add_test(tc, rejects_graph_without_outputs_or_with_unproduced_output);
    tcase_add_test(tc, enforces_limits);
    tcase_add_test(tc, dynamic_inputs_skip_shape_inference_until_bound);
    tcase_add_test(tc, order_takes_the_smallest_ready_index);
    tcase_add_test(tc, order_keeps_each_matmul_next_to_its_add);
    tcase_add_test(tc, order_matches_the_reference_on_random_graphs);
    suite_add_tcase(s, tc);
    return s;
}
