/*
 * test-graph.c - the graph builder: values, forward references, duplicate definitions,
 * attributes, lookups, and an out-of-memory loop over a whole build.
 */
#include <string.h>

#include "tests/unit/test-util.h"

static const int64_t d23[] = {2, 3};

START_TEST(builder_resolves_names_and_forward_references) {
    struct rtx_graph *g;
    struct rtx_err err;
    ck_assert_int_eq(rtx_graph_new("g", &g, &err), 0);
    ck_assert_int_ge(rtx_graph_add_input(g, "x", RTX_F32, 2, d23, &err), 0);
    const char *in1[] = {"x", "t"}, *out1[] = {"y"};
    int n0 = rtx_graph_add_node(g, "add", "first", in1, 2, out1, 1, &err);
    ck_assert_int_eq(n0, 0);
    /* "t" is referenced before it is produced */
    int t = rtx_graph_find_value(g, "t");
    ck_assert_int_ge(t, 0);
    ck_assert_int_eq(g->values[t].producer, -1);
    const char *in2[] = {"x"}, *out2[] = {"t"};
    ck_assert_int_eq(rtx_graph_add_node(g, "relu", "second", in2, 1, out2, 1, &err), 1);
    ck_assert_int_eq(g->values[t].producer, 1);
    ck_assert_int_eq(rtx_graph_add_output(g, "y", &err), 0);
    ck_assert_int_eq(rtx_graph_find_value(g, "nope"), -1);
    ck_assert_int_eq(rtx_graph_validate(g, NULL, &err), 0);
    rtx_graph_free(g);
}
END_TEST

START_TEST(builder_rejects_double_definitions) {
    struct rtx_graph *g;
    struct rtx_err err;
    rtx_graph_new("g", &g, NULL);
    rtx_graph_add_input(g, "x", RTX_F32, 2, d23, &err);
    ck_assert_int_eq(rtx_graph_add_input(g, "x", RTX_F32, 2, d23, &err), RTX_EGRAPH);
    ck_assert_ptr_nonnull(strstr(err.msg, "already defined as a graph input"));
    const char *in[] = {"x"}, *out[] = {"x"};
    ck_assert_int_eq(rtx_graph_add_node(g, "relu", "r", in, 1, out, 1, &err), RTX_EGRAPH);
    ck_assert_ptr_nonnull(strstr(err.msg, "node 0 'r'"));
    const char *out2[] = {"y"};
    ck_assert_int_eq(rtx_graph_add_node(g, "relu", "r1", in, 1, out2, 1, &err), 0);
    ck_assert_int_eq(rtx_graph_add_node(g, "relu", "r2", in, 1, out2, 1, &err), RTX_EGRAPH);
    ck_assert_ptr_nonnull(strstr(err.msg, "already the output of node 0 'r1'"));
    struct rtx_tensor *t = tu_tensor(RTX_F32, 2, d23, NULL);
    ck_assert_int_eq(rtx_graph_add_initializer(g, "y", t, &err), RTX_EGRAPH);
    rtx_tensor_unref(t);
    ck_assert_int_eq(rtx_graph_add_output(g, "y", &err), 0);
    ck_assert_int_eq(rtx_graph_add_output(g, "y", &err), RTX_EGRAPH);
    rtx_graph_free(g);
}
END_TEST

START_TEST(builder_rejects_unknown_op_naming_node) {
    struct rtx_graph *g;
    struct rtx_err err;
    rtx_graph_new("g", &g, NULL);
    const char *in[] = {"x"}, *out[] = {"y"};
    ck_assert_int_eq(rtx_graph_add_node(g, "frobnicate", "f", in, 1, out, 1, &err), RTX_EGRAPH);
    ck_assert_str_eq(err.msg, "node 0 'f': unknown op 'frobnicate'");
    ck_assert_int_eq(g->n_nodes, 0);
    rtx_graph_free(g);
}
END_TEST

START_TEST(attributes_are_typed_and_unique) {
    struct rtx_graph *g;
    struct rtx_err err;
    rtx_graph_new("g", &g, NULL);
    const char *in[] = {"x"}, *out[] = {"y"};
    int n = rtx_graph_add_node(g, "softmax", "s", in, 1, out, 1, &err);
    ck_assert_int_eq(rtx_graph_set_attr_int(g, n, "axis", -1, &err), 0);
    ck_assert_int_eq(rtx_graph_set_attr_int(g, n, "axis", 0, &err), RTX_EGRAPH);
    ck_assert_ptr_nonnull(strstr(err.msg, "set twice"));
    int64_t v[] = {1, 2, 3};
    double f[] = {0.5};
    ck_assert_int_eq(rtx_graph_set_attr_ints(g, n, "ints", v, 3, &err), 0);
    ck_assert_int_eq(rtx_graph_set_attr_floats(g, n, "floats", f, 1, &err), 0);
    ck_assert_int_eq(rtx_graph_set_attr_string(g, n, "s", "hello", &err), 0);
    ck_assert_int_eq(rtx_graph_set_attr_float(g, n, "f", 2.5, &err), 0);
    const struct rtx_node *node = &g->nodes[n];
    ck_assert_int_eq(rtx_node_attr_int(node, "axis", 7), -1);
    ck_assert_int_eq(rtx_node_attr_int(node, "s", 7), 7); /* wrong type: default */
    ck_assert_int_eq(rtx_node_attr_int(node, "missing", 7), 7);
    const int64_t *got;
    ck_assert_int_eq(rtx_node_attr_ints(node, "ints", &got), 3);
    ck_assert_int_eq(got[2], 3);
    ck_assert_int_eq(rtx_node_attr_ints(node, "missing", &got), -1);
    ck_assert_str_eq(rtx_node_attr_string(node, "s", ""), "hello");
    ck_assert(rtx_node_attr_float(node, "f", 0) == 2.5);
    ck_assert_int_eq(rtx_graph_set_attr_int(g, 99, "x", 1, &err), RTX_EINVAL);
    rtx_graph_free(g);
}
END_TEST

START_TEST(many_values_lookup_scales) {
    struct rtx_graph *g;
    rtx_graph_new("g", &g, NULL);
    int64_t d[] = {1};
    rtx_graph_add_input(g, "v0", RTX_F32, 1, d, NULL);
    char a[32], b[32];
    for (int i = 0; i < 20000; i++) {
        snprintf(a, sizeof a, "v%d", i);
        snprintf(b, sizeof b, "v%d", i + 1);
        const char *in[] = {a}, *out[] = {b};
        ck_assert_int_eq(rtx_graph_add_node(g, "neg", "", in, 1, out, 1, NULL), i);
    }
    ck_assert_int_eq(rtx_graph_find_value(g, "v12345"), 12345);
    ck_assert_int_eq(rtx_graph_add_output(g, "v20000", NULL), 0);
    ck_assert_int_eq(rtx_graph_validate(g, NULL, NULL), 0);
    rtx_graph_free(g);
}
END_TEST

/* Builds a small graph; returns the first failing code. */
static int build_small(struct rtx_graph **out) {
    struct rtx_graph *g = NULL;
    int rc = rtx_graph_new("small", &g, NULL);
    if (rc) return rc;
    *out = g;
    if ((rc = rtx_graph_add_input(g, "x", RTX_F32, 2, d23, NULL)) < 0) return rc;
    struct rtx_tensor *w;
    if ((rc = rtx_tensor_new(RTX_F32, 2, d23, &w, NULL))) return rc;
    rc = rtx_graph_add_initializer(g, "w", w, NULL);
    rtx_tensor_unref(w);
    if (rc < 0) return rc;
    const char *in[] = {"x", "w"}, *o1[] = {"s"}, *in2[] = {"s"}, *o2[] = {"y"};
    if ((rc = rtx_graph_add_node(g, "add", "a", in, 2, o1, 1, NULL)) < 0) return rc;
    if ((rc = rtx_graph_add_node(g, "softmax", "b", in2, 1, o2, 1, NULL)) < 0) return rc;
    if ((rc = rtx_graph_set_attr_int(g, rc, "axis", -1, NULL))) return rc;
    int64_t ints[] = {1, 2};
    if ((rc = rtx_graph_set_attr_ints(g, 0, "unused", ints, 2, NULL))) return rc;
    if ((rc = rtx_graph_set_attr_string(g, 0, "s", "x", NULL))) return rc;
    return rtx_graph_add_output(g, "y", NULL);
}

START_TEST(build_survives_every_allocation_failure) {
    int successes = 0;
    for (long n = 1; n < 200 && !successes; n++) {
        struct rtx_graph *g = NULL;
        rtx_alloc_fail_after(n);
        int rc = build_small(&g);
        rtx_alloc_fail_after(0);
        if (rc == 0) successes++;
        else ck_assert_msg(rc == RTX_ENOMEM, "failure %ld gave %d", n, rc);
        rtx_graph_free(g);
    }
    ck_assert_int_eq(successes, 1);
}
END_TEST

Suite *rtx_graph_suite(void) {
    Suite *s = suite_create("graph");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, builder_resolves_names_and_forward_references);
    tcase_add_test(tc, builder_rejects_double_definitions);
    tcase_add_test(tc, builder_rejects_unknown_op_naming_node);
    tcase_add_test(tc, attributes_are_typed_and_unique);
    tcase_add_test(tc, many_values_lookup_scales);
    tcase_add_test(tc, build_survives_every_allocation_failure);
    suite_add_tcase(s, tc);
    return s;
}
