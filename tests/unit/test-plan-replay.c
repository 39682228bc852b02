/*
 * test-plan-replay.c - the executor's graph-replay logic (runtime/plan.c) without a GPU,
 * through a fake capturing backend.
 *
 * DESIGN
 * The fake backend computes with the CPU backend's kernels on host memory and implements the
 * capture slots the way CUDA graphs behave: between capture_begin and capture_end, run_node
 * records the node and the tensor pointers it was given and runs nothing; graph_launch runs
 * the recorded nodes again on those same tensors. So a replay is right only if the executor
 * keeps every tensor's address fixed and copies each run's inputs into the fixed input
 * tensors, which is what these tests check: bit-for-bit equality with plain execution over
 * 100 runs on alternating inputs, the modes of each run, the fallback after a failed capture
 * (a node or the end of the capture failing), cancellation before a launch and inside a
 * capture, device-resident execution, and moving a plan between backends. The fake also
 * fuses matmul -> add groups (as the CUDA backend does), so the executor's fused-group path
 * and its single-reader rule are covered too.
 */
#include <math.h>
#include <string.h>

#include "kernels/backend-impl.h"
#include "tests/unit/test-util.h"

#define MAX_IN 4

struct rec {
    const struct rtx_graph *graph;
    const struct rtx_node *node;
    int n_in;
    struct rtx_tensor *in[MAX_IN];
    struct rtx_tensor *out;
};

struct rtx_backend_graph {
    struct rec *recs;
    int n;
};

struct fake {
    struct rtx_backend be;
    struct rtx_backend *cpu;
    bool capturing;
    struct rec *recs;            /* the capture in progress */
    int n, cap;
    int fail_node_in_capture;    /* > 0: the Nth node recorded fails */
    bool fail_end;               /* capture_end fails as an invalidated capture */
    int captures, launches, direct_nodes, graphs_live;
    int fused_groups;            /* run_fused calls */
};

static const char *f_name(struct rtx_backend *be) {
    (void)be;
    return "fake-gpu";
}
static void f_free(struct rtx_backend *be) {
    struct fake *f = be->ctx;
    rtx_free(f->recs);
    rtx_backend_free(f->cpu);
}
static bool f_supports(struct rtx_backend *be, const struct rtx_graph *g,
                       const struct rtx_node *n) {
    return rtx_backend_supports_node(((struct fake *)be->ctx)->cpu, g, n);
}
static int f_buffer(struct rtx_backend *be, size_t bytes, struct rtx_buffer **out,
                    struct rtx_err *err) {
    return rtx_backend_buffer_new(((struct fake *)be->ctx)->cpu, bytes, out, err);
}
static int f_run(struct rtx_backend *be, const struct rtx_node_args *a, struct rtx_err *err) {
    struct fake *f = be->ctx;
    if (!f->capturing) {
        f->direct_nodes++;
        return rtx_backend_run_node(f->cpu, a, err);
    }
    if (f->fail_node_in_capture > 0 && f->n + 1 == f->fail_node_in_capture)
        return rtx_err_set(err, RTX_EGPU, "fake: operation not permitted when capturing");
    ck_assert(a->n_in <= MAX_IN && a->n_out == 1);
    if (f->n == f->cap) {
        f->cap = f->cap ? 2 * f->cap : 8;
        f->recs = rtx_realloc(f->recs, sizeof *f->recs * (size_t)f->cap);
        ck_assert_ptr_nonnull(f->recs);
    }
    struct rec *r = &f->recs[f->n++];
    r->graph = a->graph;
    r->node = a->node;
    r->n_in = a->n_in;
    for (int i = 0; i < a->n_in; i++) r->in[i] = a->in[i];
    r->out = a->out[0];
    return 0;
}
/* Fuses matmul -> add when the product has that one reader, as the CUDA backend does. */
static int f_fused_span(struct rtx_backend *be, const struct rtx_graph *g, const int *order,
                        int n, const int *uses) {
    const struct rtx_node *a = &g->nodes[order[0]], *b = &g->nodes[order[1]];
    ck_assert_int_ge(n, 2);
    if (a->op != RTX_OP_MATMUL || b->op != RTX_OP_ADD || uses[a->outputs[0]] != 1) return 1;
    return b->inputs[0] == a->outputs[0] || b->inputs[1] == a->outputs[0] ? 2 : 1;
}
static int f_run_fused(struct rtx_backend *be, const struct rtx_node_args *args, int n,
                       struct rtx_err *err) {
    ((struct fake *)be->ctx)->fused_groups++;
    for (int i = 0; i < n; i++) {
        int rc = f_run(be, &args[i], err);
        if (rc) return rc;
    }
    return 0;
}
static int f_copy(const struct rtx_tensor *src, struct rtx_tensor **dst, struct rtx_err *err) {
    int rc = rtx_tensor_new(src->dtype, src->ndim, src->dims, dst, err);
    if (rc == 0) memcpy(rtx_tensor_data(*dst), rtx_tensor_data(src), rtx_tensor_nbytes(src));
    return rc;
}
static int f_upload(struct rtx_backend *be, const struct rtx_tensor *host,
                    struct rtx_tensor **dev, struct rtx_err *err) {
    return f_copy(host, dev, err);
}
static int f_download(struct rtx_backend *be, const struct rtx_tensor *dev,
                      struct rtx_tensor **host, struct rtx_err *err) {
    return f_copy(dev, host, err);
}
static int f_capture_begin(struct rtx_backend *be, struct rtx_err *err) {
    struct fake *f = be->ctx;
    if (f->capturing) return rtx_err_set(err, RTX_EINVAL, "fake: already capturing");
    f->capturing = true;
    f->n = 0;
    return 0;
}
static int f_capture_end(struct rtx_backend *be, bool keep, struct rtx_backend_graph **graph,
                         struct rtx_err *err) {
    struct fake *f = be->ctx;
    ck_assert(f->capturing);
    f->capturing = false;
    f->captures++;
    if (f->fail_end) return rtx_err_set(err, RTX_EGPU, "fake: the capture was invalidated");
    if (!keep) return 0;
    struct rtx_backend_graph *g = rtx_calloc(1, sizeof *g);
    ck_assert_ptr_nonnull(g);
    g->recs = f->recs;
    g->n = f->n;
    f->recs = NULL;
    f->n = f->cap = 0;
    f->graphs_live++;
    *graph = g;
    return 0;
}
static int f_launch(struct rtx_backend *be, struct rtx_backend_graph *g, struct rtx_err *err) {
    struct fake *f = be->ctx;
    f->launches++;
    for (int i = 0; i < g->n; i++) {
        struct rec *r = &g->recs[i];
        struct rtx_tensor *outs[1] = {r->out};
        struct rtx_node_args a = {.graph = r->graph, .node = r->node, .n_in = r->n_in,
                                  .in = r->in, .n_out = 1, .out = outs};
        int rc = rtx_backend_run_node(f->cpu, &a, err);
        if (rc) return rc;
    }
    return 0;
}
static void f_graph_free(struct rtx_backend *be, struct rtx_backend_graph *g) {
    ((struct fake *)be->ctx)->graphs_live--;
    rtx_free(g->recs);
    rtx_free(g);
}

static const struct rtx_backend_i fake_iface = {
    .name = f_name, .free = f_free, .supports_node = f_supports, .buffer_new = f_buffer,
    .run_node = f_run, .upload = f_upload, .download = f_download,
    .capture_begin = f_capture_begin, .capture_end = f_capture_end, .graph_launch = f_launch,
    .graph_free = f_graph_free, .fused_span = f_fused_span, .run_fused = f_run_fused,
};

static void fake_init(struct fake *f) {
    memset(f, 0, sizeof *f);
    f->be.iface = &fake_iface;
    f->be.ctx = f;
    struct rtx_err err;
    ck_assert_msg(rtx_backend_cpu_new(&(struct rtx_cpu_options){.n_threads = 1}, &f->cpu, &err)
                  == 0, "%s", err.msg);
}

/* y = tanh(x @ w + b) * x ; z = softmax(y) with an intermediate output; x [-1, 8], w [8, 8]
 * an initializer, b [8] an initializer. */
static struct rtx_graph *mixed_graph(void) {
    struct rtx_graph *g;
    struct rtx_err err;
    int64_t xd[] = {-1, 8}, wd[] = {8, 8}, bd[] = {8};
    ck_assert_int_eq(rtx_graph_new("mixed", &g, &err), 0);
    ck_assert_int_ge(rtx_graph_add_input(g, "x", RTX_F32, 2, xd, &err), 0);
    struct rtx_tensor *w = tu_tensor_random(RTX_F32, 2, wd, -1, 1, 7);
    struct rtx_tensor *b = tu_tensor_random(RTX_F32, 1, bd, -1, 1, 8);
    ck_assert_int_ge(rtx_graph_add_initializer(g, "w", w, &err), 0);
    ck_assert_int_ge(rtx_graph_add_initializer(g, "b", b, &err), 0);
    rtx_tensor_unref(w);
    rtx_tensor_unref(b);
    struct {
        const char *op, *a, *b, *out;
    } nodes[] = {{"matmul", "x", "w", "m"}, {"add", "m", "b", "s"}, {"tanh", "s", NULL, "t"},
                 {"mul", "t", "x", "y"},    {"softmax", "y", NULL, "z"}};
    for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; i++) {
        const char *in[] = {nodes[i].a, nodes[i].b}, *out[] = {nodes[i].out};
        ck_assert_msg(rtx_graph_add_node(g, nodes[i].op, nodes[i].out, in, nodes[i].b ? 2 : 1,
                                         out, 1, &err) >= 0, "%s", err.msg);
    }
    ck_assert_int_ge(rtx_graph_add_output(g, "z", &err), 0);
    ck_assert_int_ge(rtx_graph_add_output(g, "t", &err), 0);
    return g;
}

static bool same_bits(const struct rtx_tensor *a, const struct rtx_tensor *b) {
    return a && b && rtx_tensor_nbytes(a) == rtx_tensor_nbytes(b) &&
           memcmp(rtx_tensor_data(a), rtx_tensor_data(b), rtx_tensor_nbytes(a)) == 0;
}

/* Plain CPU results of g for x. */
static void reference(struct rtx_graph *g, struct rtx_tensor *x, struct rtx_tensor **ref) {
    struct rtx_backend *cpu;
    struct rtx_plan *p;
    struct rtx_err err;
    ck_assert_int_eq(rtx_backend_cpu_new(&(struct rtx_cpu_options){.n_threads = 1}, &cpu, &err),
                     0);
    ck_assert_int_eq(rtx_plan_new(g, (const struct rtx_tensor *const *)&x, 1, NULL, &p, &err), 0);
    ck_assert_msg(rtx_plan_execute(p, cpu, &x, 1, ref, 2, NULL, NULL, &err) == 0, "%s", err.msg);
    rtx_plan_free(p);
    rtx_backend_free(cpu);
}

struct fixture {
    struct rtx_graph *g;
    struct rtx_tensor *x[2], *ref[2][2];
    struct rtx_plan *p;
};

static void fixture_init(struct fixture *fx, int64_t rows) {
    int64_t xd[] = {rows, 8};
    fx->g = mixed_graph();
    for (int s = 0; s < 2; s++) {
        fx->x[s] = tu_tensor_random(RTX_F32, 2, xd, -2, 2, 100 + (uint64_t)s);
        reference(fx->g, fx->x[s], fx->ref[s]);
    }
    struct rtx_err err;
    ck_assert_int_eq(rtx_plan_new(fx->g, (const struct rtx_tensor *const *)&fx->x[0], 1, NULL,
                                  &fx->p, &err), 0);
}

static void fixture_close(struct fixture *fx) {
    rtx_plan_free(fx->p);
    for (int s = 0; s < 2; s++) {
        rtx_tensor_unref(fx->x[s]);
        rtx_tensor_unref(fx->ref[s][0]);
        rtx_tensor_unref(fx->ref[s][1]);
    }
    rtx_graph_free(fx->g);
}

/* One run on input set s; checks both outputs bit for bit and returns the mode. */
static enum rtx_exec_mode run_set(struct fixture *fx, struct rtx_backend *be, int s) {
    struct rtx_tensor *y[2];
    struct rtx_exec_stats st;
    struct rtx_err err;
    ck_assert_msg(rtx_plan_execute(fx->p, be, &fx->x[s], 1, y, 2, NULL, &st, &err) == 0, "%s",
                  err.msg);
    ck_assert(same_bits(fx->ref[s][0], y[0]));
    ck_assert(same_bits(fx->ref[s][1], y[1]));
    rtx_tensor_unref(y[0]);
    rtx_tensor_unref(y[1]);
    return st.mode;
}

START_TEST(replay_equals_plain_execution_over_100_runs) {
    struct fake f;
    struct fixture fx;
    fake_init(&f);
    fixture_init(&fx, 5);
    ck_assert(rtx_backend_can_capture(&f.be));
    for (int r = 0; r < 100; r++) {
        enum rtx_exec_mode m = run_set(&fx, &f.be, r % 2);
        ck_assert_int_eq(m, r == 0 ? RTX_EXEC_FIXED : r == 1 ? RTX_EXEC_CAPTURED
                                                            : RTX_EXEC_REPLAYED);
    }
    /* one node-by-node run, one capture, then only launches; matmul + add went as a group
     * in the first run and in the capture */
    ck_assert_int_eq(f.direct_nodes, 5);
    ck_assert_int_eq(f.fused_groups, 2);
    ck_assert_int_eq(f.captures, 1);
    ck_assert_int_eq(f.launches, 99);
    ck_assert_str_eq(rtx_plan_capture_note(fx.p), "");
    fixture_close(&fx);
    ck_assert_int_eq(f.graphs_live, 0); /* freed with the plan */
    f_free(&f.be);
}
END_TEST

START_TEST(failed_node_in_capture_falls_back_to_node_by_node) {
    struct fake f;
    struct fixture fx;
    fake_init(&f);
    fixture_init(&fx, 3);
    f.fail_node_in_capture = 3;
    ck_assert_int_eq(run_set(&fx, &f.be, 0), RTX_EXEC_FIXED);
    ck_assert_int_eq(run_set(&fx, &f.be, 1), RTX_EXEC_FIXED); /* capture failed, ran again */
    const char *note = rtx_plan_capture_note(fx.p);
    ck_assert_msg(strstr(note, "graph capture on fake-gpu failed") &&
                      strstr(note, "not permitted when capturing"), "%s", note);
    for (int r = 0; r < 4; r++) ck_assert_int_eq(run_set(&fx, &f.be, r % 2), RTX_EXEC_PLAIN);
    ck_assert_int_eq(f.captures, 1); /* never tried again */
    ck_assert_int_eq(f.launches, 0);
    ck_assert_int_eq(f.graphs_live, 0);
    fixture_close(&fx);
    f_free(&f.be);
}
END_TEST

START_TEST(failed_capture_end_falls_back_to_node_by_node) {
    struct fake f;
    struct fixture fx;
    fake_init(&f);
    fixture_init(&fx, 2);
    f.fail_end = true;
    ck_assert_int_eq(run_set(&fx, &f.be, 0), RTX_EXEC_FIXED);
    ck_assert_int_eq(run_set(&fx, &f.be, 1), RTX_EXEC_FIXED);
    ck_assert_ptr_nonnull(strstr(rtx_plan_capture_note(fx.p), "invalidated"));
    ck_assert_int_eq(run_set(&fx, &f.be, 0), RTX_EXEC_PLAIN);
    ck_assert_int_eq(f.graphs_live, 0);
    fixture_close(&fx);
    f_free(&f.be);
}
END_TEST

START_TEST(cancel_is_read_before_launch_and_inside_capture) {
    struct fake f;
    struct fixture fx;
    struct rtx_tensor *y[2];
    struct rtx_err err;
    fake_init(&f);
    fixture_init(&fx, 4);
    volatile int cancel = 0;
    ck_assert_int_eq(run_set(&fx, &f.be, 0), RTX_EXEC_FIXED);
    /* canceled during the capture: no graph, and capture stays on */
    cancel = 1;
    ck_assert_int_eq(rtx_plan_execute(fx.p, &f.be, &fx.x[1], 1, y, 2, &cancel, NULL, &err),
                     RTX_ECANCELED);
    ck_assert_ptr_null(y[0]);
    ck_assert_int_eq(f.graphs_live, 0);
    ck_assert_str_eq(rtx_plan_capture_note(fx.p), "");
    cancel = 0;
    ck_assert_int_eq(run_set(&fx, &f.be, 1), RTX_EXEC_CAPTURED);
    /* a set flag stops a replay before its launch */
    cancel = 1;
    ck_assert_int_eq(rtx_plan_execute(fx.p, &f.be, &fx.x[0], 1, y, 2, &cancel, NULL, &err),
                     RTX_ECANCELED);
    ck_assert_ptr_nonnull(strstr(err.msg, "before the graph launch"));
    ck_assert_int_eq(f.launches, 1);
    cancel = 0;
    ck_assert_int_eq(run_set(&fx, &f.be, 0), RTX_EXEC_REPLAYED);
    fixture_close(&fx);
    f_free(&f.be);
}
END_TEST

START_TEST(device_resident_execution_replays_on_fixed_outputs) {
    struct fake f;
    struct fixture fx;
    struct rtx_tensor *dx[2], *y[2], *first = NULL;
    struct rtx_exec_stats st;
    struct rtx_err err;
    fake_init(&f);
    fixture_init(&fx, 6);
    for (int s = 0; s < 2; s++)
        ck_assert_int_eq(rtx_backend_upload(&f.be, fx.x[s], &dx[s], &err), 0);
    for (int r = 0; r < 6; r++) {
        int s = r % 2;
        ck_assert_msg(rtx_plan_execute_device(fx.p, &f.be, &dx[s], 1, y, 2, NULL, &st, &err) == 0,
                      "%s", err.msg);
        ck_assert(same_bits(fx.ref[s][0], y[0]) && same_bits(fx.ref[s][1], y[1]));
        if (r == 0) first = y[0];
        ck_assert_ptr_eq(y[0], first); /* the plan's fixed output tensor, every run */
        rtx_tensor_unref(y[0]);
        rtx_tensor_unref(y[1]);
    }
    ck_assert_int_eq(st.mode, RTX_EXEC_REPLAYED);
    /* a non-contiguous device input is refused */
    int64_t sq[] = {8, 8};
    const int perm[] = {1, 0};
    struct rtx_tensor *h = tu_tensor_random(RTX_F32, 2, sq, -1, 1, 5), *dsq, *tv;
    ck_assert_int_eq(rtx_backend_upload(&f.be, h, &dsq, &err), 0);
    ck_assert_int_eq(rtx_tensor_permute(dsq, perm, &tv, &err), 0);
    struct rtx_plan *p2;
    ck_assert_int_eq(rtx_plan_new(fx.g, (const struct rtx_tensor *const *)&tv, 1, NULL, &p2,
                                  &err), 0);
    ck_assert_int_eq(rtx_plan_execute_device(p2, &f.be, &tv, 1, y, 2, NULL, NULL, &err),
                     RTX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "not contiguous"));
    rtx_tensor_unref(h);
    rtx_tensor_unref(dsq);
    rtx_plan_free(p2);
    rtx_tensor_unref(tv);
    for (int s = 0; s < 2; s++) rtx_tensor_unref(dx[s]);
    fixture_close(&fx);
    f_free(&f.be);
}
END_TEST

START_TEST(another_backend_drops_the_graph_and_shapes_get_their_own) {
    struct fake f;
    struct fixture fx, fx2;
    struct rtx_backend *cpu;
    struct rtx_err err;
    fake_init(&f);
    fixture_init(&fx, 3);
    fixture_init(&fx2, 11); /* another shape: another plan */
    ck_assert_int_eq(rtx_backend_cpu_new(&(struct rtx_cpu_options){.n_threads = 1}, &cpu, &err),
                     0);
    ck_assert_int_eq(run_set(&fx, &f.be, 0), RTX_EXEC_FIXED);
    ck_assert_int_eq(run_set(&fx, &f.be, 1), RTX_EXEC_CAPTURED);
    ck_assert_int_eq(run_set(&fx2, &f.be, 0), RTX_EXEC_FIXED);
    ck_assert_int_eq(run_set(&fx2, &f.be, 1), RTX_EXEC_CAPTURED);
    ck_assert_int_eq(f.graphs_live, 2);
    ck_assert_int_eq(run_set(&fx, &f.be, 0), RTX_EXEC_REPLAYED);
    ck_assert_int_eq(run_set(&fx2, &f.be, 1), RTX_EXEC_REPLAYED);
    ck_assert_int_eq(run_set(&fx, cpu, 1), RTX_EXEC_PLAIN); /* drops fx's graph */
    ck_assert_int_eq(f.graphs_live, 1);
    ck_assert_int_eq(run_set(&fx, &f.be, 0), RTX_EXEC_FIXED);
    ck_assert_int_eq(run_set(&fx, &f.be, 1), RTX_EXEC_CAPTURED);
    ck_assert_int_eq(run_set(&fx, &f.be, 0), RTX_EXEC_REPLAYED);
    rtx_backend_free(cpu);
    fixture_close(&fx);
    fixture_close(&fx2);
    ck_assert_int_eq(f.graphs_live, 0);
    f_free(&f.be);
}
END_TEST

START_TEST(replay_survives_allocation_failures) {
    struct fake f;
    struct fixture fx;
    fake_init(&f);
    fixture_init(&fx, 4);
    int ok = 0;
    /* fail the Nth allocation of the first (fixed-buffer) run; later runs then succeed */
    for (long n = 1; n < 300 && !ok; n++) {
        struct rtx_tensor *y[2] = {NULL, NULL};
        rtx_alloc_fail_after(n);
        int rc = rtx_plan_execute(fx.p, &f.be, &fx.x[0], 1, y, 2, NULL, NULL, NULL);
        rtx_alloc_fail_after(0);
        if (rc == 0) {
            ok = 1;
            ck_assert(same_bits(fx.ref[0][0], y[0]));
        } else {
            ck_assert_msg(rc == RTX_ENOMEM, "failure %ld gave %d", n, rc);
            ck_assert_ptr_null(y[0]);
        }
        rtx_tensor_unref(y[0]);
        rtx_tensor_unref(y[1]);
    }
    ck_assert(ok);
    ck_assert_int_eq(run_set(&fx, &f.be, 1), RTX_EXEC_CAPTURED);
    ck_assert_int_eq(run_set(&fx, &f.be, 0), RTX_EXEC_REPLAYED);
    fixture_close(&fx);
    f_free(&f.be);
}
END_TEST

START_TEST(fusion_needs_a_single_reader) {
    struct fake f;
    struct rtx_graph *g;
    struct rtx_err err;
    int64_t xd[] = {3, 4}, wd[] = {4, 4};
    fake_init(&f);
    ck_assert_int_eq(rtx_graph_new("two readers", &g, &err), 0);
    ck_assert_int_ge(rtx_graph_add_input(g, "x", RTX_F32, 2, xd, &err), 0);
    ck_assert_int_ge(rtx_graph_add_input(g, "w", RTX_F32, 2, wd, &err), 0);
    const char *mi[] = {"x", "w"}, *mo[] = {"m"}, *ai[] = {"m", "x"}, *ao[] = {"s"};
    const char *ti[] = {"m"}, *to[] = {"t"}, *ri[] = {"s", "t"}, *ro[] = {"y"};
    ck_assert_int_ge(rtx_graph_add_node(g, "matmul", "mm", mi, 2, mo, 1, &err), 0);
    ck_assert_int_ge(rtx_graph_add_node(g, "add", "add", ai, 2, ao, 1, &err), 0);
    ck_assert_int_ge(rtx_graph_add_node(g, "tanh", "tanh", ti, 1, to, 1, &err), 0);
    ck_assert_int_ge(rtx_graph_add_node(g, "add", "sum", ri, 2, ro, 1, &err), 0);
    ck_assert_int_ge(rtx_graph_add_output(g, "y", &err), 0);
    struct rtx_tensor *in[2] = {tu_tensor_random(RTX_F32, 2, xd, -1, 1, 3),
                                tu_tensor_random(RTX_F32, 2, wd, -1, 1, 4)};
    struct rtx_tensor *y, *ref;
    struct rtx_plan *p;
    ck_assert_int_eq(rtx_plan_new(g, (const struct rtx_tensor *const *)in, 2, NULL, &p, &err), 0);
    ck_assert_int_eq(rtx_plan_execute(p, f.cpu, in, 2, &ref, 1, NULL, NULL, &err), 0);
    ck_assert_int_eq(rtx_plan_execute(p, &f.be, in, 2, &y, 1, NULL, NULL, &err), 0);
    ck_assert(same_bits(ref, y));
    ck_assert_int_eq(f.fused_groups, 0); /* m has two readers: no group */
    ck_assert_int_eq(f.direct_nodes, 4);
    rtx_tensor_unref(y);
    rtx_tensor_unref(ref);
    rtx_tensor_unref(in[0]);
    rtx_tensor_unref(in[1]);
    rtx_plan_free(p);
    rtx_graph_free(g);
    f_free(&f.be);
}
END_TEST

Suite *rtx_plan_replay_suite(void) {
    Suite *s = suite_create("plan_replay");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, replay_equals_plain_execution_over_100_runs);
    tcase_add_test(tc, failed_node_in_capture_falls_back_to_node_by_node);
    tcase_add_test(tc, failed_capture_end_falls_back_to_node_by_node);
    tcase_add_test(tc, cancel_is_read_before_launch_and_inside_capture);
    tcase_add_test(tc, device_resident_execution_replays_on_fixed_outputs);
    tcase_add_test(tc, another_backend_drops_the_graph_and_shapes_get_their_own);
    tcase_add_test(tc, replay_survives_allocation_failures);
    tcase_add_test(tc, fusion_needs_a_single_reader);
    suite_add_tcase(s, tc);
    return s;
}
