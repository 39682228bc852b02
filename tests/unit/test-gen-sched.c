/*
 * test-gen-sched.c - the iteration scheduler's time limit (generation/engine-sched.c, DESIGN:
 * time limit) on an engine state built by hand: decoding sequences of a realtime lane and of a
 * batch lane with 2,000-key contexts, a step-time model fitted to known costs. The realtime
 * lane's sequences all get their token; the batch lane gets some but only as many as keep the
 * modelled step within an eighth of realtime's target (or a quarter of that beyond realtime's
 * own part); without realtime work, or before the model is ready, every batch sequence gets
 * its token; when one batch token alone passes the limit, the batch lane still gets one a
 * step.
 */
#include <check.h>
#include <string.h>

#include "generation/engine-impl.h"

#define N_RT 8
#define N_BATCH 200
#define CTX 2000
#define BS 16

struct fixture {
    struct rtx_gen_engine e;
    struct gen_req req[2];
    struct gen_seq seqs[N_RT + N_BATCH];
    int32_t blocks[N_RT + N_BATCH][CTX / BS + 2];
};

/* t = 1 ms + 4 us per token + key_ns per key, as the engine would have measured it. */
static void fit(struct rtx__step_cost *m, double key_ns) {
    rtx__step_cost_init(m);
    for (int i = 0; i < STEP_COST_WINDOW; i++) {
        struct rtx__step_shape s = {.tokens = (int64_t)1 << (i % 12), .keys = 5000 * (i % 37),
                                    .eager = true};
        rtx__step_cost_add(m, &s, 1e6 + 4e3 * (double)s.tokens + key_ns * (double)s.keys);
    }
    ck_assert(rtx__step_cost_ready(m));
}

static void setup_engine(struct fixture *f, bool with_rt) {
    memset(f, 0, sizeof *f);
    struct rtx_gen_engine *e = &f->e;
    struct rtx_err err;
    e->n_lanes = 2;
    snprintf(e->lanes[0].name, sizeof e->lanes[0].name, "realtime");
    e->lanes[0].target_ns = 50000000;
    e->lanes[0].weight = 8;
    snprintf(e->lanes[1].name, sizeof e->lanes[1].name, "batch");
    e->lanes[1].target_ns = 60000000000;
    e->lanes[1].weight = 1;
    e->block_size = BS;
    e->max_seqs = 256;
    e->max_batch_tokens = 8192;
    e->graph_max_tokens = 512;
    e->n_blocks = (N_RT + N_BATCH) * (CTX / BS + 2);
    ck_assert_int_eq(rtx__kv_blocks_new(e->n_blocks, BS, false, &e->blocks, &err), 0);
    e->step_seqs = rtx_calloc((size_t)e->max_seqs, sizeof *e->step_seqs);
    e->run = rtx_calloc(N_RT + N_BATCH, sizeof *e->run);
    e->cap_run = N_RT + N_BATCH;
    f->req[0].lane = 0;
    f->req[1].lane = 1;
    for (int i = 0; i < N_RT + N_BATCH; i++) {
        bool rt = i < N_RT;
        if (rt && !with_rt) continue;
        struct gen_seq *s = &f->seqs[i];
        s->req = &f->req[rt ? 0 : 1];
        s->state = SEQ_RUNNING;
        s->n_tokens = CTX;
        s->computed = CTX - 1; /* decoding: one token left to compute */
        s->blocks = f->blocks[i];
        s->cap_blocks = CTX / BS + 2;
        for (; s->n_blocks * BS < CTX; s->n_blocks++)
            ck_assert_int_eq(rtx__kv_blocks_alloc(e->blocks, &s->blocks[s->n_blocks]), 0);
        e->run[e->n_run++] = s;
        e->lanes[s->req->lane].n_running++;
    }
}

static void teardown_engine(struct fixture *f) {
    rtx__kv_blocks_free(f->e.blocks);
    rtx_free(f->e.step_seqs);
    rtx_free(f->e.run);
}

/* Tokens the step gave each lane, and the step's modelled time. */
static double schedule(struct fixture *f, int *per_lane) {
    struct rtx_gen_engine *e = &f->e;
    int n = rtx__gen_schedule(e, rtx_mono_ns());
    struct rtx__step_shape sh = {.tokens = rtx__gen_bucket(n), .eager = true};
    per_lane[0] = per_lane[1] = 0;
    for (int i = 0; i < e->n_step; i++) {
        per_lane[e->step_seqs[i]->req->lane] += e->step_seqs[i]->step_tokens;
        sh.keys += e->step_seqs[i]->computed + e->step_seqs[i]->step_tokens;
    }
    ck_assert_int_eq(per_lane[0] + per_lane[1], n);
    for (int i = 0; i < e->n_step; i++) e->step_seqs[i]->step_tokens = 0;
    return rtx__step_cost_estimate(&e->cost, &sh);
}

START_TEST(batch_decodes_held_to_the_realtime_limit) {
    static struct fixture f;
    int got[2];
    setup_engine(&f, true);
    fit(&f.e.cost, 20.0);
    double t = schedule(&f, got);
    ck_assert_int_eq(got[0], N_RT); /* realtime: every sequence, first */
    ck_assert_msg(got[1] > 0 && got[1] < N_BATCH, "batch tokens %d", got[1]);
    struct rtx__step_shape rt = {.tokens = N_RT, .keys = N_RT * CTX, .eager = true};
    double cap = 50e6 / 8, floor = rtx__step_cost_estimate(&f.e.cost, &rt) + cap / 4;
    double limit = cap > floor ? cap : floor;
    ck_assert_msg(t <= limit, "step %.0f ns over the limit %.0f", t, limit);
    /* one more batch sequence would have passed it: the batch lane took what fits */
    struct rtx__step_shape more = {.tokens = rtx__gen_bucket(N_RT + got[1] + 1),
                                   .keys = (int64_t)(N_RT + got[1] + 1) * CTX, .eager = true};
    ck_assert(rtx__step_cost_estimate(&f.e.cost, &more) > limit);
    teardown_engine(&f);
}
END_TEST

START_TEST(batch_alone_or_no_model_is_not_held) {
    static struct fixture f;
    int got[2];
    setup_engine(&f, false); /* no realtime work (and none in the last second) */
    fit(&f.e.cost, 20.0);
    schedule(&f, got);
    ck_assert_int_eq(got[0], 0);
    ck_assert_int_eq(got[1], N_BATCH);
    teardown_engine(&f);
    setup_engine(&f, true); /* realtime work, but the model is not ready yet */
    schedule(&f, got);
    ck_assert_int_eq(got[0], N_RT);
    ck_assert_int_eq(got[1], N_BATCH);
    teardown_engine(&f);
}
END_TEST

/* Keys so dear that one batch decode alone passes the limit: the batch lane still gets one
 * token a step (its first sequence), never none. */
START_TEST(one_batch_token_a_step_whatever_it_costs) {
    static struct fixture f;
    int got[2];
    setup_engine(&f, true);
    fit(&f.e.cost, 1000.0); /* 2 ms a batch token's keys, over a quarter of the 6.25 ms cap */
    for (int step = 0; step < 3; step++) {
        schedule(&f, got);
        ck_assert_int_eq(got[0], N_RT);
        ck_assert_int_eq(got[1], 1);
    }
    teardown_engine(&f);
}
END_TEST

Suite *rtx_gen_sched_suite(void) {
    Suite *s = suite_create("gen_sched");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, batch_decodes_held_to_the_realtime_limit);
    tcase_add_test(tc, batch_alone_or_no_model_is_not_held);
    tcase_add_test(tc, one_batch_token_a_step_whatever_it_costs);
    suite_add_tcase(s, tc);
    return s;
}
