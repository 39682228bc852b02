/*
 * warmup.c - the warm-up of a GPU backend before rtx_device_backend_new returns it: a tiny
 * graph run twice, node by node and then captured (the Backends paragraph of DESIGN in
 * device/device.h), so that kernels, cuBLASLt's choices, pool segments and the first graph
 * capture exist before the first request. Taken over from the job manager.
 */
#include "device/device-impl.h"
#include "runtime/backend.h"

/* The warm-up input is f32[ROWS, ROWS]: 1 MiB, the size from which the CUDA backend stages
 * copies in pinned memory, so the pinned pool is warmed too. */
#define ROWS 512
#define COLS 16 /* columns of the warm-up weight */

/* y = tanh(x @ w + b) with x f32[ROWS, ROWS] (its input, zeros, in *x), w f32[ROWS, COLS]
 * and b f32[COLS]. */
static int warmup_graph(struct rtx_graph **out, struct rtx_tensor **x, struct rtx_err *err) {
    const int64_t xd[] = {ROWS, ROWS}, wd[] = {ROWS, COLS}, bd[] = {COLS};
    struct rtx_graph *g = NULL;
    struct rtx_tensor *w = NULL, *b = NULL;
    *out = NULL;
    *x = NULL;
    int rc = rtx_graph_new("rtxd-warmup", &g, err);
    if (rc >= 0) rc = rtx_tensor_new(RTX_F32, 2, xd, x, err);
    if (rc >= 0) rc = rtx_tensor_new(RTX_F32, 2, wd, &w, err);
    if (rc >= 0) rc = rtx_tensor_new(RTX_F32, 1, bd, &b, err);
    if (rc >= 0) rc = rtx_graph_add_input(g, "x", RTX_F32, 2, xd, err);
    if (rc >= 0) rc = rtx_graph_add_initializer(g, "w", w, err);
    if (rc >= 0) rc = rtx_graph_add_initializer(g, "b", b, err);
    if (rc >= 0)
        rc = rtx_graph_add_node(g, "matmul", "warmup_matmul", (const char *[]){"x", "w"}, 2,
                                (const char *[]){"xw"}, 1, err);
    if (rc >= 0)
        rc = rtx_graph_add_node(g, "add", "warmup_bias", (const char *[]){"xw", "b"}, 2,
                                (const char *[]){"z"}, 1, err);
    if (rc >= 0)
        rc = rtx_graph_add_node(g, "tanh", "warmup_tanh", (const char *[]){"z"}, 1,
                                (const char *[]){"y"}, 1, err);
    if (rc >= 0) rc = rtx_graph_add_output(g, "y", err);
    rtx_tensor_unref(w);
    rtx_tensor_unref(b);
    if (rc < 0) {
        rtx_graph_free(g);
        rtx_tensor_unref(*x);
        *x = NULL;
        return rc;
    }
    *out = g;
    return 0;
}

int rtx__device_warm_up(struct rtx_backend *be, bool *skipped, struct rtx_err *err) {
    struct rtx_graph *g = NULL;
    struct rtx_tensor *x = NULL;
    struct rtx_plan *plan = NULL;
    *skipped = false;
    int rc = warmup_graph(&g, &x, err);
    for (int i = 0; rc == 0 && i < g->n_nodes && !*skipped; i++)
        *skipped = !rtx_backend_supports_node(be, g, &g->nodes[i]);
    if (rc == 0 && !*skipped)
        rc = rtx_plan_new(g, (const struct rtx_tensor *const *)&x, 1, NULL, &plan, err);
    for (int run = 0; rc == 0 && !*skipped && run < 2; run++) {
        struct rtx_tensor *y = NULL;
        rc = rtx_plan_execute(plan, be, &x, 1, &y, 1, NULL, NULL, err);
        rtx_tensor_unref(y);
    }
    rtx_plan_free(plan);
    rtx_graph_free(g);
    rtx_tensor_unref(x);
    return rc;
}
