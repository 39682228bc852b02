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
 * and its single-reader rule are covered too; its fused run fails the test when an output of
 * the group shares bytes with an input the group does not produce (a fused kernel would read
 * that input while writing over it). Reshapes that are views must never reach the backend,
 * recorded or not, and a block-shaped graph must fuse every projection.
 */
#include <math.h>
#include <string.h>

#include "kernels/cpu/backend-cpu.h"
#include "runtime/backend-impl.h"
#include "runtime/runtime-impl.h"
#include "tests/unit/test-util.h"

#define MAX_IN 9

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
    int reshapes;                /* reshape nodes given to run_node, run or recorded */
    int recorded;                /* nodes in the last kept capture */
    int uploads;                 /* upload calls */
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
    if (a->node->op == RTX_OP_RESHAPE) f->reshapes++;
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
/* Whether tensors a and b share bytes (both contiguous). */
static bool overlap(const struct rtx_tensor *a, const struct rtx_tensor *b) {
    size_t na = rtx_tensor_nbytes(a), nb = rtx_tensor_nbytes(b);
    if (a->buf != b->buf || na == 0 || nb == 0) return false;
    size_t oa = (size_t)a->offset, ob = (size_t)b->offset;
    return oa < ob + nb && ob < oa + na;
}

/* Fails the test when an output of the group shares bytes with an input that no earlier
 * node of the group produces: a fused kernel reads those inputs while it writes. */
static void check_group_memory(const struct rtx_node_args *args, int n) {
    for (int j = 0; j < n; j++)
        for (int i = 0; i < args[j].n_in; i++) {
            const struct rtx_tensor *t = args[j].in[i];
            bool made_here = false;
            for (int w = 0; w < j; w++) made_here = made_here || args[w].out[0] == t;
            for (int w = 0; w < n && t && !made_here; w++)
                ck_assert_msg(!overlap(t, args[w].out[0]),
                              "fused group at node '%s': input %d of '%s' shares bytes with "
                              "the output of '%s'", args[0].node->name, i, args[j].node->name,
                              args[w].node->name);
        }
}

static int f_run_fused(struct rtx_backend *be, const struct rtx_node_args *args, int n,
                       struct rtx_err *err) {
    ((struct fake *)be->ctx)->fused_groups++;
    check_group_memory(args, n);
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
    ((struct fake *)be->ctx)->uploads++;
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
    f->recorded = g->n;
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
    rtx_backend_free(&f.be); /* f_free, after the constants cache */
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
    rtx_backend_free(&f.be); /* f_free, after the constants cache */
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
    rtx_backend_free(&f.be); /* f_free, after the constants cache */
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
    rtx_backend_free(&f.be); /* f_free, after the constants cache */
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
    rtx_backend_free(&f.be); /* f_free, after the constants cache */
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
    rtx_backend_free(&f.be); /* f_free, after the constants cache */
}
END_TEST

/* Plans of one graph at two shapes on one backend hold one device copy of each constant
 * (runtime/const-cache.c), dropped with the last plan that uses it. */
START_TEST(plans_of_one_graph_share_its_constants) {
    struct fake f;
    struct rtx_err err;
    fake_init(&f);
    struct rtx_graph *g = mixed_graph();
    int64_t d1[] = {3, 8}, d2[] = {11, 8};
    struct rtx_tensor *x[2] = {tu_tensor_random(RTX_F32, 2, d1, -2, 2, 31),
                               tu_tensor_random(RTX_F32, 2, d2, -2, 2, 32)};
    struct rtx_plan *p[2];
    for (int i = 0; i < 2; i++) {
        struct rtx_tensor *ref[2], *y[2];
        reference(g, x[i], ref);
        ck_assert_int_eq(rtx_plan_new(g, (const struct rtx_tensor *const *)&x[i], 1, NULL, &p[i],
                                      &err), 0);
        int before = f.uploads;
        for (int run = 0; run < 3; run++) { /* fixed, captured, replayed */
            ck_assert_msg(rtx_plan_execute(p[i], &f.be, &x[i], 1, y, 2, NULL, NULL, &err) == 0,
                          "%s", err.msg);
            ck_assert(same_bits(ref[0], y[0]) && same_bits(ref[1], y[1]));
            rtx_tensor_unref(y[0]);
            rtx_tensor_unref(y[1]);
        }
        /* the first plan uploads w and b; the second finds them */
        ck_assert_int_eq(f.uploads - before, i == 0 ? 2 : 0);
        ck_assert_int_eq(rtx__const_cache_entries(&f.be), 2);
        rtx_tensor_unref(ref[0]);
        rtx_tensor_unref(ref[1]);
    }
    rtx_plan_free(p[0]);
    ck_assert_int_eq(rtx__const_cache_entries(&f.be), 2); /* the second plan still uses them */
    rtx_plan_free(p[1]);
    ck_assert_int_eq(rtx__const_cache_entries(&f.be), 0);
    /* a plan freed after its backend releases into the closed cache */
    struct fake f2;
    fake_init(&f2);
    ck_assert_int_eq(rtx_plan_new(g, (const struct rtx_tensor *const *)&x[0], 1, NULL, &p[0],
                                  &err), 0);
    struct rtx_tensor *y[2];
    ck_assert_int_eq(rtx_plan_execute(p[0], &f2.be, &x[0], 1, y, 2, NULL, NULL, &err), 0);
    rtx_tensor_unref(y[0]);
    rtx_tensor_unref(y[1]);
    rtx_backend_free(&f2.be);
    rtx_plan_free(p[0]);
    rtx_tensor_unref(x[0]);
    rtx_tensor_unref(x[1]);
    rtx_graph_free(g);
    rtx_backend_free(&f.be);
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
    rtx_backend_free(&f.be); /* f_free, after the constants cache */
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
    rtx_backend_free(&f.be); /* f_free, after the constants cache */
}
END_TEST

/* Adds node `op` named after its output, inputs a comma-separated list; returns its index. */
static int add_node(struct rtx_graph *g, const char *op, const char *ins, const char *out) {
    char buf[128];
    const char *in[4];
    int n = 0;
    snprintf(buf, sizeof buf, "%s", ins);
    for (char *tok = strtok(buf, ","); tok && n < 4; tok = strtok(NULL, ",")) in[n++] = tok;
    struct rtx_err err;
    int idx = rtx_graph_add_node(g, op, out, in, n, &out, 1, &err);
    ck_assert_msg(idx >= 0, "%s: %s", out, err.msg);
    return idx;
}

static void set_ints(struct rtx_graph *g, int node, const char *name, const int64_t *v, int n) {
    struct rtx_err err;
    ck_assert_msg(rtx_graph_set_attr_ints(g, node, name, v, n, &err) == 0, "%s", err.msg);
}

static void add_weight(struct rtx_graph *g, const char *name, int ndim, const int64_t *dims,
                       unsigned seed) {
    struct rtx_tensor *t = tu_tensor_random(RTX_F32, ndim, dims, -1, 1, seed);
    struct rtx_err err;
    ck_assert_msg(rtx_graph_add_initializer(g, name, t, &err) >= 0, "%s", err.msg);
    rtx_tensor_unref(t);
}

/* Runs g on the fake `runs` times on two alternating inputs of shape xd, each bit for bit
 * against plain CPU execution; returns the last run's stats. */
static struct rtx_exec_stats run_against_cpu(struct fake *f, struct rtx_graph *g, int ndim,
                                             const int64_t *xd, int n_out, int runs) {
    struct rtx_tensor *x[2], *ref[2][4], *y[4];
    struct rtx_plan *p;
    struct rtx_exec_stats st = {0};
    struct rtx_err err;
    ck_assert(n_out <= 4);
    for (int s = 0; s < 2; s++) {
        x[s] = tu_tensor_random(RTX_F32, ndim, xd, -2, 2, 40 + (unsigned)s);
        ck_assert_int_eq(rtx_plan_new(g, (const struct rtx_tensor *const *)&x[s], 1, NULL, &p,
                                      &err), 0);
        ck_assert_msg(rtx_plan_execute(p, f->cpu, &x[s], 1, ref[s], n_out, NULL, NULL, &err) == 0,
                      "%s", err.msg);
        rtx_plan_free(p);
    }
    ck_assert_int_eq(rtx_plan_new(g, (const struct rtx_tensor *const *)&x[0], 1, NULL, &p, &err),
                     0);
    for (int r = 0; r < runs; r++) {
        int s = r % 2;
        ck_assert_msg(rtx_plan_execute(p, &f->be, &x[s], 1, y, n_out, NULL, &st, &err) == 0,
                      "run %d: %s", r, err.msg);
        ck_assert_int_eq(st.mode, r == 0 ? RTX_EXEC_FIXED : r == 1 ? RTX_EXEC_CAPTURED
                                                                  : RTX_EXEC_REPLAYED);
        for (int o = 0; o < n_out; o++) {
            ck_assert_msg(same_bits(ref[s][o], y[o]), "run %d output %d", r, o);
            rtx_tensor_unref(y[o]);
        }
    }
    rtx_plan_free(p);
    for (int s = 0; s < 2; s++) {
        rtx_tensor_unref(x[s]);
        for (int o = 0; o < n_out; o++) rtx_tensor_unref(ref[s][o]);
    }
    return st;
}

/* Views of a graph input (rx), of a fused group's result (rs), of a view (rs2) and of an
 * intermediate read by the last node (tr), plus a reshape to a graph output (o, a copy). */
START_TEST(views_replay_over_their_sources_memory) {
    struct fake f;
    struct rtx_graph *g;
    struct rtx_err err;
    int64_t xd[] = {-1, 8}, wd[] = {8, 8}, bd[] = {8};
    int64_t s24[] = {0, 2, 4}, s8[] = {0, 8}, s42[] = {0, 4, 2};
    fake_init(&f);
    ck_assert_int_eq(rtx_graph_new("views", &g, &err), 0);
    ck_assert_int_ge(rtx_graph_add_input(g, "x", RTX_F32, 2, xd, &err), 0);
    add_weight(g, "w", 2, wd, 1);
    add_weight(g, "b", 1, bd, 2);
    set_ints(g, add_node(g, "reshape", "x", "rx"), "shape", s24, 3);
    add_node(g, "matmul", "x,w", "m");
    add_node(g, "add", "m,b", "s");
    set_ints(g, add_node(g, "reshape", "s", "rs"), "shape", s24, 3);
    set_ints(g, add_node(g, "reshape", "rs", "rs2"), "shape", s8, 2);
    add_node(g, "tanh", "rs2", "t");
    set_ints(g, add_node(g, "reshape", "t", "tr"), "shape", s24, 3);
    add_node(g, "mul", "tr,rx", "y");
    set_ints(g, add_node(g, "reshape", "s", "o"), "shape", s42, 3);
    ck_assert_int_ge(rtx_graph_add_output(g, "y", &err), 0);
    ck_assert_int_ge(rtx_graph_add_output(g, "o", &err), 0);
    int64_t x3[] = {3, 8};
    struct rtx_exec_stats st = run_against_cpu(&f, g, 2, x3, 2, 20);
    /* matmul, add, tanh, mul and the output's reshape run; four views do not */
    ck_assert_int_eq(st.nodes_run, 5);
    ck_assert_int_eq(f.direct_nodes, 5);   /* run 1 */
    ck_assert_int_eq(f.recorded, 5);       /* the capture */
    ck_assert_int_eq(f.reshapes, 2);       /* o, in run 1 and in the capture */
    ck_assert_int_eq(f.fused_groups, 2);   /* matmul + add, in run 1 and in the capture */
    ck_assert_int_eq(f.launches, 19);      /* the capture's run launches too */
    rtx_graph_free(g);
    rtx_backend_free(&f.be); /* f_free, after the constants cache */
}
END_TEST

/* h = neg(x); s = add(matmul(h, w), b); y = tanh(s). h's last reader is the matmul, so with
 * each node run by itself s may take h's bytes; fused, matmul + add read h while writing s,
 * so the backend's layout keeps h until the add. */
START_TEST(fused_group_keeps_its_inputs_until_it_ends) {
    struct fake f;
    struct rtx_graph *g;
    struct rtx_err err;
    int64_t xd[] = {4, 4}, bd[] = {4};
    fake_init(&f);
    ck_assert_int_eq(rtx_graph_new("group inputs", &g, &err), 0);
    ck_assert_int_ge(rtx_graph_add_input(g, "x", RTX_F32, 2, xd, &err), 0);
    add_weight(g, "w", 2, xd, 3);
    add_weight(g, "b", 1, bd, 4);
    add_node(g, "neg", "x", "h");
    add_node(g, "matmul", "h,w", "m");
    add_node(g, "add", "m,b", "s");
    add_node(g, "tanh", "s", "y");
    ck_assert_int_ge(rtx_graph_add_output(g, "y", &err), 0);
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 2, xd, -1, 1, 5);
    struct rtx_plan *p;
    ck_assert_int_eq(rtx_plan_new(g, (const struct rtx_tensor *const *)&x, 1, NULL, &p, &err), 0);
    ck_assert_uint_eq(rtx_plan_arena_bytes(p), 2 * 64); /* node by node: s reuses h's bytes */
    rtx_plan_free(p);
    rtx_tensor_unref(x);
    struct rtx_exec_stats st = run_against_cpu(&f, g, 2, xd, 1, 4);
    ck_assert_int_eq(f.fused_groups, 2);
    /* h, m and s live at once, with the input and the output held by the plan */
    ck_assert_uint_eq(st.peak_bytes, 3 * 64 + 2 * 64);
    rtx_graph_free(g);
    rtx_backend_free(&f.be); /* f_free, after the constants cache */
}
END_TEST

/* One projection of the block as bench/bench-gpu.c writes it: matmul, bias add, split into
 * heads (a view), heads first. */
static void block_projection(struct rtx_graph *g, const char *name, int64_t width,
                             int64_t heads, unsigned seed) {
    char w[16], b[16], mm[16], split[16], hd[16], ins[64];
    int64_t wd[] = {width, width}, split_shape[] = {0, 0, heads, width / heads};
    int64_t perm[] = {0, 2, 1, 3};
    snprintf(w, sizeof w, "w%s", name);
    snprintf(b, sizeof b, "b%s", name);
    snprintf(mm, sizeof mm, "%s_mm", name);
    snprintf(split, sizeof split, "%s_split", name);
    snprintf(hd, sizeof hd, "%s_heads", name);
    add_weight(g, w, 2, wd, seed);
    add_weight(g, b, 1, &width, seed + 1);
    snprintf(ins, sizeof ins, "h,%s", w);
    add_node(g, "matmul", ins, mm);
    snprintf(ins, sizeof ins, "%s,%s", mm, b);
    add_node(g, "add", ins, name);
    set_ints(g, add_node(g, "reshape", name, split), "shape", split_shape, 4);
    set_ints(g, add_node(g, "transpose", split, hd), "perm", perm, 4);
}

/* The transformer block of bench/bench-gpu.c (pre-norm, causal attention, tanh-GELU MLP) at
 * a small size: 26 nodes, four of them reshapes that are views. */
static struct rtx_graph *block_graph(int64_t width, int64_t heads) {
    struct rtx_graph *g;
    struct rtx_err err;
    int64_t xd[] = {-1, -1, width}, ff = 4 * width, wo[] = {width, width};
    int64_t up[] = {width, ff}, down[] = {ff, width}, merge[] = {0, 0, width};
    int64_t perm[] = {0, 2, 1, 3};
    ck_assert_int_eq(rtx_graph_new("block", &g, &err), 0);
    ck_assert_int_ge(rtx_graph_add_input(g, "x", RTX_F32, 3, xd, &err), 0);
    add_weight(g, "ln1_scale", 1, &width, 10);
    add_weight(g, "ln1_bias", 1, &width, 11);
    add_node(g, "layer_norm", "x,ln1_scale,ln1_bias", "h");
    block_projection(g, "q", width, heads, 12);
    block_projection(g, "k", width, heads, 14);
    block_projection(g, "v", width, heads, 16);
    int n = add_node(g, "attention", "q_heads,k_heads,v_heads", "att");
    ck_assert_int_eq(rtx_graph_set_attr_int(g, n, "causal", 1, &err), 0);
    set_ints(g, add_node(g, "transpose", "att", "att_t"), "perm", perm, 4);
    set_ints(g, add_node(g, "reshape", "att_t", "att_m"), "shape", merge, 3);
    add_weight(g, "wo", 2, wo, 18);
    add_weight(g, "bo", 1, &width, 19);
    add_node(g, "matmul", "att_m,wo", "o_mm");
    add_node(g, "add", "o_mm,bo", "o");
    add_node(g, "add", "x,o", "res1");
    add_weight(g, "ln2_scale", 1, &width, 20);
    add_weight(g, "ln2_bias", 1, &width, 21);
    add_node(g, "layer_norm", "res1,ln2_scale,ln2_bias", "h2");
    add_weight(g, "w_up", 2, up, 22);
    add_weight(g, "b_up", 1, &ff, 23);
    add_weight(g, "w_down", 2, down, 24);
    add_weight(g, "b_down", 1, &width, 25);
    add_node(g, "matmul", "h2,w_up", "up_mm");
    add_node(g, "add", "up_mm,b_up", "up");
    n = add_node(g, "gelu", "up", "act");
    ck_assert_int_eq(rtx_graph_set_attr_string(g, n, "approximate", "tanh", &err), 0);
    add_node(g, "matmul", "act,w_down", "down_mm");
    add_node(g, "add", "down_mm,b_down", "down");
    add_node(g, "add", "res1,down", "y");
    ck_assert_int_ge(rtx_graph_add_output(g, "y", &err), 0);
    return g;
}

/* In the author's order each matmul is followed by its bias add, so all six fuse (a
 * breadth-first order ran q, k and v's matmuls before their adds: three groups); the views
 * never reach the backend and no fused group writes over its own inputs. */
START_TEST(block_fuses_every_projection) {
    struct fake f;
    fake_init(&f);
    struct rtx_graph *g = block_graph(16, 2);
    ck_assert_int_eq(g->n_nodes, 26);
    int64_t xd[] = {2, 5, 16};
    struct rtx_exec_stats st = run_against_cpu(&f, g, 3, xd, 1, 6);
    ck_assert_int_eq(st.nodes_run, 22);
    ck_assert_int_eq(f.fused_groups, 2 * 6); /* run 1 and the capture */
    ck_assert_int_eq(f.direct_nodes, 22);
    ck_assert_int_eq(f.recorded, 22);
    ck_assert_int_eq(f.reshapes, 0);
    rtx_graph_free(g);
    rtx_backend_free(&f.be); /* f_free, after the constants cache */
}
END_TEST

START_TEST(block_survives_allocation_failures) {
    struct fake f;
    fake_init(&f);
    struct rtx_graph *g = block_graph(8, 2);
    int64_t xd[] = {1, 3, 8};
    struct rtx_tensor *x = tu_tensor_random(RTX_F32, 3, xd, -1, 1, 6), *ref, *y;
    struct rtx_plan *p;
    struct rtx_err err;
    ck_assert_int_eq(rtx_plan_new(g, (const struct rtx_tensor *const *)&x, 1, NULL, &p, &err), 0);
    ck_assert_int_eq(rtx_plan_execute(p, f.cpu, &x, 1, &ref, 1, NULL, NULL, &err), 0);
    rtx_plan_free(p);
    int ok = 0;
    for (long n = 1; n < 2000 && !ok; n++) {
        p = NULL;
        y = NULL;
        rtx_alloc_fail_after(n);
        int rc = rtx_plan_new(g, (const struct rtx_tensor *const *)&x, 1, NULL, &p, NULL);
        if (rc == 0) rc = rtx_plan_execute(p, &f.be, &x, 1, &y, 1, NULL, NULL, NULL);
        rtx_alloc_fail_after(0);
        if (rc == 0) {
            ok = 1;
            ck_assert(same_bits(ref, y));
        } else {
            ck_assert_msg(rc == RTX_ENOMEM, "failure %ld gave %d", n, rc);
            ck_assert_ptr_null(y);
        }
        rtx_tensor_unref(y);
        rtx_plan_free(p);
    }
    ck_assert(ok);
    rtx_tensor_unref(ref);
    rtx_tensor_unref(x);
    rtx_graph_free(g);
    rtx_backend_free(&f.be); /* f_free, after the constants cache */
}
END_TEST

/* A one-node paged_attention graph (docs/ops.md) and its host inputs in[9]: one sequence
 * whose 3 new tokens are positions 2..4 of 5 keys in blocks {1, 0} of 4; the caches (inputs
 * 3 and 4) hold random stale data. */
static struct rtx_graph *paged_graph(struct rtx_tensor **in) {
    struct rtx_graph *g;
    struct rtx_err err;
    const int64_t qd[3] = {3, 2, 4}, kd[3] = {3, 1, 4}, cd[4] = {2, 4, 1, 4}, t1 = 3,
                  td[2] = {1, 2}, s1 = 2, one = 1;
    const double slots[3] = {6, 7, 0}, tables[2] = {1, 0}, qs[2] = {0, 3}, ctx[1] = {5};
    in[0] = tu_tensor_random(RTX_F32, 3, qd, -1, 1, 21);
    in[1] = tu_tensor_random(RTX_F32, 3, kd, -1, 1, 22);
    in[2] = tu_tensor_random(RTX_F32, 3, kd, -1, 1, 23);
    in[3] = tu_tensor_random(RTX_F32, 4, cd, -1, 1, 24);
    in[4] = tu_tensor_random(RTX_F32, 4, cd, -1, 1, 25);
    in[5] = tu_tensor(RTX_I32, 1, &t1, slots);
    in[6] = tu_tensor(RTX_I32, 2, td, tables);
    in[7] = tu_tensor(RTX_I32, 1, &s1, qs);
    in[8] = tu_tensor(RTX_I32, 1, &one, ctx);
    static const char *const names[9] = {"q", "k", "v", "k_cache", "v_cache", "slots",
                                         "tables", "query_start", "context_lens"};
    ck_assert_int_eq(rtx_graph_new("paged", &g, &err), 0);
    for (int i = 0; i < 9; i++)
        ck_assert_int_ge(rtx_graph_add_input(g, names[i], in[i]->dtype, in[i]->ndim,
                                             in[i]->dims, &err), 0);
    const char *out[] = {"y"};
    ck_assert_int_ge(rtx_graph_add_node(g, "paged_attention", "attn", (const char **)names, 9,
                                        out, 1, &err), 0);
    ck_assert_int_eq(rtx_graph_add_output(g, "y", &err), 0);
    return g;
}

static struct rtx_tensor *host_copy(const struct rtx_tensor *t) {
    struct rtx_tensor *c = tu_tensor(t->dtype, t->ndim, t->dims, NULL);
    memcpy(rtx_tensor_data(c), rtx_tensor_data(t), rtx_tensor_nbytes(t));
    return c;
}

/* A graph whose op writes its inputs (paged_attention's caches) and binds none of them is
 * never captured, on either entry point: every run goes node by node with the caller's
 * tensors, whose caches end up written (on rtx_plan_execute through a device backend,
 * copied back into the host tensors). */
START_TEST(in_place_writers_run_node_by_node_on_the_callers_tensors) {
    struct fake f;
    struct rtx_tensor *in[9], *fresh[9], *ref[1], *y[1];
    struct rtx_exec_stats st;
    struct rtx_err err;
    struct rtx_backend *cpu;
    struct rtx_plan *p;
    fake_init(&f);
    struct rtx_graph *g = paged_graph(in);
    /* the reference: plain CPU execution on copies of the caches */
    for (int i = 0; i < 9; i++) fresh[i] = i == 3 || i == 4 ? host_copy(in[i]) : in[i];
    ck_assert_int_eq(rtx_backend_cpu_new(&(struct rtx_cpu_options){.n_threads = 1}, &cpu, &err),
                     0);
    ck_assert_int_eq(rtx_plan_new(g, (const struct rtx_tensor *const *)in, 9, NULL, &p, &err), 0);
    ck_assert_msg(rtx_plan_execute(p, cpu, fresh, 9, ref, 1, NULL, NULL, &err) == 0, "%s",
                  err.msg);
    ck_assert(!same_bits(fresh[3], in[3]) && !same_bits(fresh[4], in[4])); /* written */
    for (int r = 0; r < 3; r++) {
        struct rtx_tensor *kc = host_copy(in[3]), *vc = host_copy(in[4]), *run_in[9];
        memcpy(run_in, in, sizeof run_in);
        run_in[3] = kc;
        run_in[4] = vc;
        ck_assert_msg(rtx_plan_execute(p, &f.be, run_in, 9, y, 1, NULL, &st, &err) == 0, "%s",
                      err.msg);
        ck_assert_int_eq(st.mode, RTX_EXEC_PLAIN);
        ck_assert(same_bits(y[0], ref[0]));
        ck_assert(same_bits(kc, fresh[3]) && same_bits(vc, fresh[4])); /* copied back */
        rtx_tensor_unref(y[0]);
        rtx_tensor_unref(kc);
        rtx_tensor_unref(vc);
    }
    /* device-resident: the caller's device caches are the ones the kernel writes */
    struct rtx_tensor *dev[9];
    for (int i = 0; i < 9; i++) ck_assert_int_eq(rtx_backend_upload(&f.be, in[i], &dev[i], &err), 0);
    for (int r = 0; r < 2; r++) {
        ck_assert_msg(rtx_plan_execute_device(p, &f.be, dev, 9, y, 1, NULL, &st, &err) == 0,
                      "%s", err.msg);
        ck_assert_int_eq(st.mode, RTX_EXEC_PLAIN);
        ck_assert(same_bits(y[0], ref[0]));
        ck_assert(same_bits(dev[3], fresh[3]) && same_bits(dev[4], fresh[4]));
        rtx_tensor_unref(y[0]);
    }
    ck_assert_int_eq(f.captures, 0);
    ck_assert_int_eq(f.launches, 0);
    for (int i = 0; i < 9; i++) rtx_tensor_unref(dev[i]);
    rtx_tensor_unref(ref[0]);
    rtx_tensor_unref(fresh[3]);
    rtx_tensor_unref(fresh[4]);
    for (int i = 0; i < 9; i++) rtx_tensor_unref(in[i]);
    rtx_plan_free(p);
    rtx_backend_free(cpu);
    rtx_graph_free(g);
    rtx_backend_free(&f.be); /* f_free, after the constants cache */
}
END_TEST

/* Inputs bound by address (rtx_plan_bind_device_inputs) let a plan that writes its caches
 * replay on the device: the graph reads and writes the caller's bound tensors, the unbound
 * q, k, v are copied into fixed buffers each run; a bound input at another address makes a
 * new capture; rtx_plan_execute (host tensors) ignores the binding and runs node by node. Every
 * run's output and caches equal the CPU's, applied in the same order. */
START_TEST(bound_inputs_replay_in_place_writers) {
    struct fake f;
    struct rtx_tensor *in[9], *ref_in[9], *dev[9], *y[1], *ref[1];
    struct rtx_exec_stats st;
    struct rtx_err err;
    struct rtx_backend *cpu;
    struct rtx_plan *p, *rp;
    fake_init(&f);
    struct rtx_graph *g = paged_graph(in);
    ck_assert_int_eq(rtx_backend_cpu_new(&(struct rtx_cpu_options){.n_threads = 1}, &cpu, &err),
                     0);
    ck_assert_int_eq(rtx_plan_new(g, (const struct rtx_tensor *const *)in, 9, NULL, &p, &err), 0);
    ck_assert_int_eq(rtx_plan_new(g, (const struct rtx_tensor *const *)in, 9, NULL, &rp, &err), 0);
    ck_assert_int_eq(rtx_plan_bind_device_inputs(p, 8, 2, &err), RTX_EINVAL);
    ck_assert_int_eq(rtx_plan_bind_device_inputs(p, -1, 2, &err), RTX_EINVAL);
    ck_assert_int_eq(rtx_plan_bind_device_inputs(p, 3, 6, &err), 0);
    for (int i = 0; i < 9; i++) {
        ref_in[i] = i == 3 || i == 4 ? host_copy(in[i]) : in[i];
        ck_assert_int_eq(rtx_backend_upload(&f.be, in[i], &dev[i], &err), 0);
    }
    const enum rtx_exec_mode want[] = {RTX_EXEC_FIXED, RTX_EXEC_CAPTURED, RTX_EXEC_REPLAYED,
                                       RTX_EXEC_REPLAYED, RTX_EXEC_FIXED, RTX_EXEC_CAPTURED,
                                       RTX_EXEC_REPLAYED};
    for (int r = 0; r < (int)(sizeof want / sizeof *want); r++) {
        if (r == 4) { /* the caches move: the graph recorded the old addresses */
            for (int c = 3; c <= 4; c++) {
                struct rtx_tensor *moved;
                ck_assert_int_eq(rtx_backend_upload(&f.be, dev[c], &moved, &err), 0);
                rtx_tensor_unref(dev[c]);
                dev[c] = moved;
            }
        }
        for (int i = 0; i < 3; i++) { /* new q, k, v at new addresses */
            struct rtx_tensor *h = tu_tensor_random(RTX_F32, in[i]->ndim, in[i]->dims, -1, 1,
                                                    (uint64_t)(40 + 3 * r + i));
            rtx_tensor_unref(dev[i]);
            ck_assert_int_eq(rtx_backend_upload(&f.be, h, &dev[i], &err), 0);
            ref_in[i] = h;
        }
        ck_assert_msg(rtx_plan_execute(rp, cpu, ref_in, 9, ref, 1, NULL, NULL, &err) == 0, "%s",
                      err.msg);
        ck_assert_msg(rtx_plan_execute_device(p, &f.be, dev, 9, y, 1, NULL, &st, &err) == 0,
                      "%s", err.msg);
        ck_assert_msg(st.mode == want[r], "run %d: %s", r, rtx_exec_mode_name(st.mode));
        ck_assert(same_bits(y[0], ref[0]));
        ck_assert(same_bits(dev[3], ref_in[3]) && same_bits(dev[4], ref_in[4]));
        rtx_tensor_unref(y[0]);
        rtx_tensor_unref(ref[0]);
        for (int i = 0; i < 3; i++) rtx_tensor_unref(ref_in[i]);
    }
    ck_assert_int_eq(f.captures, 2);
    ck_assert_int_eq(f.graphs_live, 1);
    /* host tensors: the binding does not apply, the caches are copied back */
    struct rtx_tensor *kc = host_copy(ref_in[3]), *vc = host_copy(ref_in[4]), *run_in[9];
    memcpy(run_in, in, sizeof run_in);
    memcpy(ref_in, in, 3 * sizeof *ref_in);
    run_in[3] = kc;
    run_in[4] = vc;
    ck_assert_int_eq(rtx_plan_execute(rp, cpu, ref_in, 9, ref, 1, NULL, NULL, &err), 0);
    ck_assert_msg(rtx_plan_execute(p, &f.be, run_in, 9, y, 1, NULL, &st, &err) == 0, "%s",
                  err.msg);
    ck_assert_int_eq(st.mode, RTX_EXEC_PLAIN);
    ck_assert(same_bits(y[0], ref[0]));
    ck_assert(same_bits(kc, ref_in[3]) && same_bits(vc, ref_in[4]));
    ck_assert_int_eq(f.graphs_live, 0); /* the node-by-node run dropped the replay state */
    rtx_tensor_unref(y[0]);
    rtx_tensor_unref(ref[0]);
    rtx_tensor_unref(kc);
    rtx_tensor_unref(vc);
    for (int i = 0; i < 9; i++) rtx_tensor_unref(dev[i]);
    rtx_tensor_unref(ref_in[3]);
    rtx_tensor_unref(ref_in[4]);
    for (int i = 0; i < 9; i++) rtx_tensor_unref(in[i]);
    rtx_plan_free(p);
    rtx_plan_free(rp);
    rtx_backend_free(cpu);
    rtx_graph_free(g);
    rtx_backend_free(&f.be); /* f_free, after the constants cache */
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
    tcase_add_test(tc, plans_of_one_graph_share_its_constants);
    tcase_add_test(tc, replay_survives_allocation_failures);
    tcase_add_test(tc, fusion_needs_a_single_reader);
    tcase_add_test(tc, views_replay_over_their_sources_memory);
    tcase_add_test(tc, fused_group_keeps_its_inputs_until_it_ends);
    tcase_add_test(tc, block_fuses_every_projection);
    tcase_add_test(tc, block_survives_allocation_failures);
    tcase_add_test(tc, in_place_writers_run_node_by_node_on_the_callers_tensors);
    tcase_add_test(tc, bound_inputs_replay_in_place_writers);
    suite_add_tcase(s, tc);
    return s;
}
