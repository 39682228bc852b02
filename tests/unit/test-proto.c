/*
 * test-proto.c - the graph wire format (runtime/graph-proto.c): lossless round trips,
 * malformed input, graph errors seen while decoding, limits and allocation failures.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"
#include "tests/unit/test-util.h"

START_TEST(proto_round_trip_simple) {
    struct rtx_err err = {0};
    struct rtx_graph *g = NULL;
    ck_assert_int_eq(rtx_graph_new("simple", &g, &err), 0);
    int64_t dims[2] = {-1, 4};
    ck_assert_int_ge(rtx_graph_add_input(g, "x", RTX_F32, 2, dims, &err), 0);
    const char *in[] = {"x"};
    const char *out[] = {"y"};
    ck_assert_int_ge(rtx_graph_add_node(g, "relu", "r", in, 1, out, 1, &err), 0);
    ck_assert_int_eq(rtx_graph_add_output(g, "y", &err), 0);

    void *buf = NULL, *buf2 = NULL;
    size_t len = 0, len2 = 0;
    ck_assert_int_eq(rtx_graph_encode(g, &buf, &len, &err), 0);
    struct rtx_graph *g2 = NULL;
    struct rtx_limits lim = rtx_limits_default();
    ck_assert_msg(rtx_graph_decode(buf, len, &lim, &g2, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(rtx_graph_encode(g2, &buf2, &len2, &err), 0);
    ck_assert_uint_eq(len, len2);
    ck_assert_mem_eq(buf, buf2, len);
    rtx_free(buf);
    rtx_free(buf2);
    rtx_graph_free(g);
    rtx_graph_free(g2);
}
END_TEST

Suite *rtx_proto_suite(void) {
    Suite *s = suite_create("proto");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, proto_round_trip_simple);
    suite_add_tcase(s, tc);
    return s;
}
