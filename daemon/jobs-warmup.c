/*
 * jobs-warmup.c - warm-up of a GPU worker before it takes jobs: a tiny graph run twice, node by
 * node and then captured (the Warm-up paragraph of DESIGN in jobs-impl.h). Kept apart from the
 * workers so that a device layer can take it over.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/jobs-impl.h"
#include "daemon/log.h"
#include "runtime/backend.h"

/* The warm-up graph (see DESIGN): y = tanh(x @ w + b) with x f32[WARMUP_ROWS, WARMUP_ROWS]
 * (its input, zeros, in *x), w f32[WARMUP_ROWS, WARMUP_COLS] and b f32[WARMUP_COLS]. */
static int warmup_graph(struct rtx_graph **out, struct rtx_tensor **x, struct rtx_err *err) {
    const int64_t xd[] = {WARMUP_ROWS, WARMUP_ROWS}, wd[] = {WARMUP_ROWS, WARMUP_COLS},
                  bd[] = {WARMUP_COLS};
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

/* Runs the warm-up graph twice on a GPU worker's backend, node by node and then captured (see
 * DESIGN), counts and logs how long it took; a sticky device error marks the device
 * unhealthy. A backend that cannot run the graph is not warmed up. */
void rtx__jobs_warm_up(struct worker *w) {
    struct rtx_jobs *j = w->j;
    struct dev *dv = &j->devs[w->dev];
    struct rtx_err err = {0};
    int64_t t0 = mono_ns();
    struct rtx_graph *g = NULL;
    struct rtx_tensor *x = NULL;
    struct rtx_plan *plan = NULL;
    int rc = warmup_graph(&g, &x, &err);
    bool skipped = rc == 0 && rtx__jobs_first_unsupported(w->be, g) >= 0;
    if (rc == 0 && !skipped)
        rc = rtx_plan_new(g, (const struct rtx_tensor *const *)&x, 1, NULL, &plan, &err);
    for (int run = 0; rc == 0 && !skipped && run < 2; run++) {
        struct rtx_tensor *y = NULL;
        rc = rtx_plan_execute(plan, w->be, &x, 1, &y, 1, NULL, NULL, &err);
        rtx_tensor_unref(y);
    }
    rtx_plan_free(plan);
    rtx_graph_free(g);
    rtx_tensor_unref(x);
    double ms = (double)(mono_ns() - t0) / 1e6;
    pthread_mutex_lock(&j->mu);
    dv->workers_warm++;
    if (ms > dv->warmup_ms) dv->warmup_ms = ms;
    pthread_mutex_unlock(&j->mu);
    char wk[16], mss[32];
    snprintf(wk, sizeof wk, "%d", (int)(w - j->workers));
    snprintf(mss, sizeof mss, "%.3f", ms);
    if (skipped) {
        rtx_log(RTX_LOG_DEBUG, "GPU worker not warmed up: its backend cannot run the warm-up graph",
                "device", dv->name, "worker", wk, NULL);
    } else if (rc == 0) {
        rtx_log(RTX_LOG_INFO, "GPU worker warmed up", "device", dv->name, "worker", wk,
                "warmup_ms", mss, NULL);
    } else {
        char reason[sizeof err.msg + 80];
        snprintf(reason, sizeof reason, "%s", err.msg);
        rtx__jobs_check_device(w, reason, sizeof reason);
        rtx_log(RTX_LOG_WARN, "GPU worker warm-up failed", "device", dv->name, "worker", wk,
                "warmup_ms", mss, "error", reason, NULL);
    }
}
