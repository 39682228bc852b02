/*
 * test-gen-engine.c - the generation engine (generation/generation.h) on the CPU with the
 * example checkpoint (build/examples/models/tiny-chat/1, or $RTX_TEST_GEN_MODEL): greedy
 * outputs do not depend on what else runs (continuous batching, prefix cache hits,
 * preemption), cancellation frees every block, n > 1, stop strings, bad requests, overload.
 */
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device/device.h"
#include "generation/generation.h"
#include "scheduler/sched.h"

#define MAX_OUT 512

struct run {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n_choices;
    int32_t tokens[RTX_GEN_MAX_N][MAX_OUT];
    int n_tokens[RTX_GEN_MAX_N];
    char text[RTX_GEN_MAX_N][4096];
    enum rtx_gen_finish finish[RTX_GEN_MAX_N];
    int events;
    bool done;
    int status;
    char msg[256];
    struct rtx_gen_usage usage;
    struct rtx_gen_handle *h;
    bool cancel_on_first; /* cancel from the first event */
};

static void on_event(void *ctx, const struct rtx_gen_event *ev) {
    struct run *r = ctx;
    pthread_mutex_lock(&r->mu);
    int c = ev->index;
    for (int i = 0; i < ev->n_tokens && r->n_tokens[c] < MAX_OUT; i++)
        r->tokens[c][r->n_tokens[c]++] = ev->tokens[i];
    size_t have = strlen(r->text[c]);
    if (have + ev->text_len < sizeof r->text[c]) {
        memcpy(r->text[c] + have, ev->text, ev->text_len);
        r->text[c][have + ev->text_len] = 0;
    }
    if (ev->finish) r->finish[c] = ev->finish;
    r->events++;
    bool cancel = r->cancel_on_first && r->h;
    pthread_cond_broadcast(&r->cv); /* for waits on tokens, not only on the end */
    pthread_mutex_unlock(&r->mu);
    if (cancel) rtx_gen_cancel(r->h);
}

static void on_done(void *ctx, int status, const struct rtx_err *err,
                    const struct rtx_gen_usage *usage) {
    struct run *r = ctx;
    pthread_mutex_lock(&r->mu);
    r->done = true;
    r->status = status;
    if (err) snprintf(r->msg, sizeof r->msg, "%.*s", (int)(sizeof r->msg) - 1, err->msg);
    r->usage = *usage;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void run_init(struct run *r) {
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
}

static void run_wait(struct run *r) {
    pthread_mutex_lock(&r->mu);
    while (!r->done) pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
}

static void run_close(struct run *r) {
    rtx_gen_handle_unref(r->h);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
}

static struct rtx_devices *devs;
static struct rtx_gen_model *model;

static const char *model_dir(void) {
    const char *d = getenv("RTX_TEST_GEN_MODEL");
    return d && d[0] ? d : "build/examples/models/tiny-chat/1";
}

static void setup(void) {
    struct rtx_err err = {0};
    struct rtx_devices_options o = {.cpu_threads = 2, .plan_cache = 4};
    ck_assert_msg(rtx_devices_new(&o, &devs, &err) == 0, "%s", err.msg);
    ck_assert_msg(rtx_gen_model_load(model_dir(), NULL, &model, &err) == 0, "%s", err.msg);
}

static void teardown(void) {
    rtx_gen_model_unref(model);
    rtx_devices_free(devs);
}

static struct rtx_gen_engine *engine(int64_t kv_bytes, int max_batch_tokens,
                                     const struct rtx_sched_config *lanes) {
    struct rtx_gen_engine_options o;
    rtx_gen_engine_options_init(&o);
    o.devices = devs;
    o.device = 0;
    o.consumer = "model tiny-chat:1";
    o.kv_cache_bytes = kv_bytes;
    o.max_batch_tokens = max_batch_tokens;
    o.lanes = lanes;
    struct rtx_gen_engine *e;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_gen_engine_start(model, &o, &e, &err) == 0, "%s", err.msg);
    return e;
}

/* A prompt of n ids from a seed (ids 3.. : no special tokens). */
static void prompt_ids(int32_t *ids, int n, uint32_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        ids[i] = 3 + (int32_t)((seed >> 8) % 500);
    }
}

static int submit(struct rtx_gen_engine *e, struct run *r, const int32_t *ids, int n,
                  const struct rtx_gen_params *p, const char *lane) {
    /* a deadline far away: these checks are about outputs, not about the lanes' targets on a
     * loaded machine */
    struct rtx_gen_request rq = {.prompt = ids, .n_prompt = n, .params = *p, .lane = lane,
                                 .deadline_ns = rtx_mono_ns() + INT64_C(120000000000),
                                 .on_event = on_event, .on_done = on_done, .ctx = r};
    struct rtx_err err = {0};
    int rc = rtx_gen_submit(e, &rq, &r->h, &err);
    if (rc) snprintf(r->msg, sizeof r->msg, "%.*s", (int)(sizeof r->msg) - 1, err.msg);
    return rc;
}

static void greedy(struct rtx_gen_params *p, int max_tokens) {
    rtx_gen_params_init(p);
    p->temperature = 0;
    p->max_tokens = max_tokens;
    p->ignore_eos = true;
}

static void used_blocks_drop_to_zero(struct rtx_gen_engine *e) {
    struct rtx_gen_stats st;
    for (int i = 0; i < 200; i++) {
        rtx_gen_engine_stats(e, &st);
        if (st.kv_blocks_used == 0) return;
        usleep(5000);
    }
    ck_abort_msg("%lld KV blocks still used", (long long)st.kv_blocks_used);
}

/* At least one sequence was preempted, and every KV block comes back. */
static void preempted_and_freed(struct rtx_gen_engine *e) {
    struct rtx_gen_stats st;
    rtx_gen_engine_stats(e, &st);
    uint64_t preempted = 0;
    for (int l = 0; l < st.n_lanes; l++) preempted += st.lanes[l].preempted_total;
    ck_assert_uint_gt(preempted, 0);
    used_blocks_drop_to_zero(e);
}

/* Solo greedy runs, then the same requests arriving while others run (staggered, mixed
 * lengths, chunked prefill through a small token budget): identical tokens. */
START_TEST(continuous_batching_matches_solo) {
    enum { N = 6 };
    static const int lens[N] = {5, 40, 17, 90, 1, 33};
    int32_t ids[N][128];
    struct rtx_gen_params p;
    greedy(&p, 24);
    static struct run solo[N], mixed[N];
    struct rtx_gen_engine *e = engine(0, 64, NULL);
    for (int i = 0; i < N; i++) {
        prompt_ids(ids[i], lens[i], 100 + (uint32_t)i);
        run_init(&solo[i]);
        ck_assert_msg(submit(e, &solo[i], ids[i], lens[i], &p, NULL) == 0, "%s", solo[i].msg);
        run_wait(&solo[i]);
        ck_assert_msg(solo[i].status == 0, "%s", solo[i].msg);
        ck_assert_int_eq(solo[i].n_tokens[0], 24);
        ck_assert_int_eq(solo[i].finish[0], RTX_GEN_FINISH_LENGTH);
    }
    rtx_gen_engine_stop(e);
    e = engine(0, 32, NULL); /* no prefix cache content, a smaller budget: other chunks */
    for (int i = 0; i < N; i++) {
        run_init(&mixed[i]);
        ck_assert(submit(e, &mixed[i], ids[i], lens[i], &p, NULL) == 0);
        if (i % 2 == 1) usleep(3000);
    }
    for (int i = 0; i < N; i++) {
        run_wait(&mixed[i]);
        ck_assert_msg(mixed[i].status == 0, "%s", mixed[i].msg);
        ck_assert_int_eq(mixed[i].n_tokens[0], 24);
        ck_assert_msg(memcmp(mixed[i].tokens[0], solo[i].tokens[0], 24 * sizeof(int32_t)) == 0,
                      "request %d: batched tokens differ from its solo run", i);
        ck_assert_str_eq(mixed[i].text[0], solo[i].text[0]);
        ck_assert_int_eq(mixed[i].usage.prompt_tokens, lens[i]);
        ck_assert_int_eq(mixed[i].usage.completion_tokens, 24);
    }
    used_blocks_drop_to_zero(e);
    struct rtx_gen_stats st;
    rtx_gen_engine_stats(e, &st);
    ck_assert_uint_eq(st.requests_finished, N);
    ck_assert_uint_ge(st.ttft.n, N);
    for (int i = 0; i < N; i++) run_close(&solo[i]), run_close(&mixed[i]);
    rtx_gen_engine_stop(e);
}
END_TEST

/* A second request with the same 70-token prompt reuses 4 full blocks, same tokens. */
START_TEST(prefix_cache_hit_gives_same_tokens) {
    int32_t ids[70];
    prompt_ids(ids, 70, 7);
    struct rtx_gen_params p;
    greedy(&p, 16);
    struct rtx_gen_engine *e = engine(0, 0, NULL);
    struct run a, b;
    run_init(&a);
    run_init(&b);
    ck_assert(submit(e, &a, ids, 70, &p, NULL) == 0);
    run_wait(&a);
    ck_assert(submit(e, &b, ids, 70, &p, NULL) == 0);
    run_wait(&b);
    ck_assert_int_eq(a.status, 0);
    ck_assert_int_eq(b.status, 0);
    ck_assert_int_eq(a.usage.cached_tokens, 0);
    ck_assert_int_eq(b.usage.cached_tokens, 64);
    ck_assert(memcmp(a.tokens[0], b.tokens[0], 16 * sizeof(int32_t)) == 0);
    struct rtx_gen_stats st;
    used_blocks_drop_to_zero(e);
    rtx_gen_engine_stats(e, &st);
    ck_assert_uint_ge(st.prefix_hit_blocks, 4);
    ck_assert_int_gt(st.kv_blocks_cached, 0);
    run_close(&a);
    run_close(&b);
    rtx_gen_engine_stop(e);
}
END_TEST

/* A pool of 40 blocks (640 tokens): four batch-lane requests fill it; a realtime one
 * arriving then preempts batch sequences, which resume later. Every output equals its solo
 * run. */
START_TEST(preempted_sequences_resume_with_same_tokens) {
    struct rtx_gen_params p;
    greedy(&p, 100);
    int32_t ids[5][120];
    static struct run solo[5], mixed[5];
    int64_t kv = 40 * 8192; /* a block: 2 layers x K,V x 16 tokens x 2 heads x 16 x f32 */
    struct rtx_gen_engine *e = engine(kv, 0, NULL);
    for (int i = 0; i < 5; i++) {
        prompt_ids(ids[i], 100, 300 + (uint32_t)i);
        run_init(&solo[i]);
        ck_assert(submit(e, &solo[i], ids[i], 100, &p, NULL) == 0);
        run_wait(&solo[i]);
        ck_assert_msg(solo[i].status == 0, "%s", solo[i].msg);
    }
    rtx_gen_engine_stop(e);
    e = engine(kv, 0, NULL);
    for (int i = 0; i < 4; i++) {
        run_init(&mixed[i]);
        ck_assert(submit(e, &mixed[i], ids[i], 100, &p, "batch") == 0);
    }
    usleep(20000);
    run_init(&mixed[4]);
    ck_assert(submit(e, &mixed[4], ids[4], 100, &p, "realtime") == 0);
    for (int i = 0; i < 5; i++) {
        run_wait(&mixed[i]);
        ck_assert_msg(mixed[i].status == 0, "%s", mixed[i].msg);
        ck_assert_msg(memcmp(mixed[i].tokens[0], solo[i].tokens[0], 100 * sizeof(int32_t)) == 0,
                      "request %d differs after preemption", i);
    }
    preempted_and_freed(e);
    for (int i = 0; i < 5; i++) run_close(&solo[i]), run_close(&mixed[i]);
    rtx_gen_engine_stop(e);
}
END_TEST

/* Seats are preempted like blocks: with max_seqs 2 and two long batch-lane requests decoding,
 * a realtime arrival takes a batch sequence's seat at once (its 4 tokens come while both
 * batch requests, 400 tokens each, are still generating) and the preempted one resumes with
 * the same tokens. */
START_TEST(realtime_arrival_takes_a_batch_seat) {
    struct rtx_gen_params pb, pr;
    greedy(&pb, 400);
    greedy(&pr, 4);
    int32_t ids[3][40];
    static struct run solo[3], mixed[3];
    for (int i = 0; i < 3; i++) prompt_ids(ids[i], 40, 700 + (uint32_t)i);
    struct rtx_gen_engine_options o;
    rtx_gen_engine_options_init(&o);
    o.devices = devs;
    o.device = 0;
    o.consumer = "model tiny-chat:1";
    o.max_seqs = 2;
    struct rtx_gen_engine *e;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_gen_engine_start(model, &o, &e, &err) == 0, "%s", err.msg);
    for (int i = 0; i < 3; i++) {
        run_init(&solo[i]);
        ck_assert(submit(e, &solo[i], ids[i], 40, i < 2 ? &pb : &pr, NULL) == 0);
        run_wait(&solo[i]);
        ck_assert_msg(solo[i].status == 0, "%s", solo[i].msg);
    }
    for (int i = 0; i < 2; i++) {
        run_init(&mixed[i]);
        ck_assert(submit(e, &mixed[i], ids[i], 40, &pb, "batch") == 0);
    }
    for (int i = 0; i < 2; i++) { /* both decoding: every seat taken */
        pthread_mutex_lock(&mixed[i].mu);
        while (mixed[i].n_tokens[0] < 2 && !mixed[i].done)
            pthread_cond_wait(&mixed[i].cv, &mixed[i].mu);
        pthread_mutex_unlock(&mixed[i].mu);
    }
    run_init(&mixed[2]);
    ck_assert(submit(e, &mixed[2], ids[2], 40, &pr, "realtime") == 0);
    run_wait(&mixed[2]);
    ck_assert_msg(mixed[2].status == 0, "%s", mixed[2].msg);
    pthread_mutex_lock(&mixed[0].mu);
    bool first_done = mixed[0].done;
    pthread_mutex_unlock(&mixed[0].mu);
    pthread_mutex_lock(&mixed[1].mu);
    bool second_done = mixed[1].done;
    pthread_mutex_unlock(&mixed[1].mu);
    ck_assert_msg(!first_done && !second_done,
                  "the realtime request waited for a batch sequence to end");
    for (int i = 0; i < 3; i++) {
        run_wait(&mixed[i]);
        ck_assert_msg(mixed[i].status == 0, "%s", mixed[i].msg);
        int n = i < 2 ? 400 : 4;
        ck_assert_msg(
            memcmp(mixed[i].tokens[0], solo[i].tokens[0], (size_t)n * sizeof(int32_t)) == 0,
            "request %d differs", i);
    }
    preempted_and_freed(e);
    for (int i = 0; i < 3; i++) run_close(&solo[i]), run_close(&mixed[i]);
    rtx_gen_engine_stop(e);
}
END_TEST

START_TEST(cancel_frees_blocks) {
    int32_t ids[50];
    prompt_ids(ids, 50, 9);
    struct rtx_gen_params p;
    greedy(&p, 400);
    struct rtx_gen_engine *e = engine(0, 0, NULL);
    struct run r;
    run_init(&r);
    r.cancel_on_first = true;
    pthread_mutex_lock(&r.mu); /* the handle is set before the first event can cancel */
    ck_assert(submit(e, &r, ids, 50, &p, NULL) == 0);
    pthread_mutex_unlock(&r.mu);
    run_wait(&r);
    ck_assert_int_eq(r.status, RTX_ECANCELED);
    ck_assert_int_lt(r.n_tokens[0], 400);
    used_blocks_drop_to_zero(e);
    struct rtx_gen_stats st;
    rtx_gen_engine_stats(e, &st);
    ck_assert_uint_eq(st.requests_canceled, 1);
    run_close(&r);
    rtx_gen_engine_stop(e);
}
END_TEST

START_TEST(n_choices_and_seeds) {
    int32_t ids[40];
    prompt_ids(ids, 40, 11);
    struct rtx_gen_params p;
    rtx_gen_params_init(&p);
    p.max_tokens = 20;
    p.n = 3;
    p.has_seed = true;
    p.seed = 42;
    p.ignore_eos = true;
    struct rtx_gen_engine *e = engine(0, 0, NULL);
    struct run a, b;
    run_init(&a);
    run_init(&b);
    ck_assert(submit(e, &a, ids, 40, &p, NULL) == 0);
    ck_assert(submit(e, &b, ids, 40, &p, NULL) == 0);
    run_wait(&a);
    run_wait(&b);
    ck_assert_int_eq(a.status, 0);
    for (int c = 0; c < 3; c++) {
        ck_assert_int_eq(a.n_tokens[c], 20);
        ck_assert(memcmp(a.tokens[c], b.tokens[c], 20 * sizeof(int32_t)) == 0);
    }
    ck_assert(memcmp(a.tokens[0], a.tokens[1], 20 * sizeof(int32_t)) != 0);
    ck_assert_int_eq(a.usage.completion_tokens, 60);
    used_blocks_drop_to_zero(e);
    run_close(&a);
    run_close(&b);
    rtx_gen_engine_stop(e);
}
END_TEST

START_TEST(stop_string_ends_before_it) {
    int32_t ids[30];
    prompt_ids(ids, 30, 13);
    struct rtx_gen_params p;
    greedy(&p, 40);
    struct rtx_gen_engine *e = engine(0, 0, NULL);
    struct run a, b;
    run_init(&a);
    ck_assert(submit(e, &a, ids, 30, &p, NULL) == 0);
    run_wait(&a);
    size_t len = strlen(a.text[0]);
    ck_assert_uint_gt(len, 12);
    char stop[4];
    memcpy(stop, a.text[0] + len / 2, 3);
    stop[3] = 0;
    const char *first = strstr(a.text[0], stop);
    p.n_stop = 1;
    p.stop[0] = stop;
    run_init(&b);
    ck_assert(submit(e, &b, ids, 30, &p, NULL) == 0);
    run_wait(&b);
    ck_assert_int_eq(b.status, 0);
    ck_assert_int_eq(b.finish[0], RTX_GEN_FINISH_STOP);
    ck_assert_uint_eq(strlen(b.text[0]), (size_t)(first - a.text[0]));
    ck_assert(strncmp(b.text[0], a.text[0], strlen(b.text[0])) == 0);
    run_close(&a);
    run_close(&b);
    rtx_gen_engine_stop(e);
}
END_TEST

START_TEST(bad_requests_refused) {
    struct rtx_gen_engine *e = engine(0, 0, NULL);
    struct rtx_gen_params p;
    greedy(&p, 8);
    int32_t ids[600];
    prompt_ids(ids, 600, 1);
    struct run r;
    run_init(&r);
    ck_assert_int_eq(submit(e, &r, ids, 0, &p, NULL), RTX_EINVAL);
    ck_assert_int_eq(submit(e, &r, ids, 600, &p, NULL), RTX_EINVAL);
    ck_assert_msg(strstr(r.msg, "context"), "%s", r.msg);
    p.max_tokens = 500;
    ck_assert_int_eq(submit(e, &r, ids, 20, &p, NULL), RTX_EINVAL);
    p.max_tokens = 8;
    int32_t bad[2] = {5, 512};
    ck_assert_int_eq(submit(e, &r, bad, 2, &p, NULL), RTX_EINVAL);
    ck_assert_msg(strstr(r.msg, "512"), "%s", r.msg);
    ck_assert_int_eq(submit(e, &r, ids, 4, &p, "nope"), RTX_ENOTFOUND);
    p.temperature = 500;
    ck_assert_int_eq(submit(e, &r, ids, 4, &p, NULL), RTX_EINVAL);
    ck_assert_msg(strstr(r.msg, "temperature"), "%s", r.msg);
    p.temperature = 0;
    p.n = 0;
    ck_assert_int_eq(submit(e, &r, ids, 4, &p, NULL), RTX_EINVAL);
    ck_assert(!r.done);
    run_close(&r);
    rtx_gen_engine_stop(e);
}
END_TEST

/* A lane with room for one waiting request refuses the rest with RTX_EOVERLOAD and a
 * retry hint. */
START_TEST(full_lane_refuses_with_retry_hint) {
    struct rtx_sched_config lanes;
    rtx_sched_config_init(&lanes);
    lanes.lanes[lanes.n_lanes - 1].max_queued = 1;
    struct rtx_gen_engine *e = engine(0, 0, &lanes);
    struct rtx_gen_params p;
    greedy(&p, 50);
    int32_t ids[200];
    prompt_ids(ids, 200, 3);
    static struct run r[20];
    int refused = 0, accepted = 0;
    for (int i = 0; i < 20; i++) {
        run_init(&r[i]);
        int rc = submit(e, &r[i], ids, 200, &p, NULL);
        if (rc == RTX_EOVERLOAD) {
            refused++;
            ck_assert_msg(rtx_err_retry_after_ms(r[i].msg, strlen(r[i].msg)) > 0, "%s", r[i].msg);
        } else {
            ck_assert_int_eq(rc, 0);
            accepted++;
        }
    }
    ck_assert_int_gt(refused, 0);
    for (int i = 0; i < 20; i++) {
        if (r[i].h) run_wait(&r[i]);
        run_close(&r[i]);
    }
    ck_assert_int_gt(accepted, 0);
    rtx_gen_engine_stop(e);
}
END_TEST

/* Stopping with requests in flight answers each once with RTX_EUNAVAILABLE. */
START_TEST(stop_fails_requests_in_flight) {
    struct rtx_gen_engine *e = engine(0, 0, NULL);
    struct rtx_gen_params p;
    greedy(&p, 400);
    int32_t ids[20];
    prompt_ids(ids, 20, 5);
    static struct run r[4];
    for (int i = 0; i < 4; i++) {
        run_init(&r[i]);
        ck_assert(submit(e, &r[i], ids, 20, &p, NULL) == 0);
    }
    rtx_gen_engine_stop(e);
    for (int i = 0; i < 4; i++) {
        ck_assert(r[i].done);
        ck_assert_int_eq(r[i].status, RTX_EUNAVAILABLE);
        run_close(&r[i]);
    }
}
END_TEST

Suite *rtx_gen_engine_suite(void) {
    Suite *s = suite_create("gen_engine");
    TCase *tc = tcase_create("engine");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, continuous_batching_matches_solo);
    tcase_add_test(tc, prefix_cache_hit_gives_same_tokens);
    tcase_add_test(tc, preempted_sequences_resume_with_same_tokens);
    tcase_add_test(tc, realtime_arrival_takes_a_batch_seat);
    tcase_add_test(tc, cancel_frees_blocks);
    tcase_add_test(tc, n_choices_and_seeds);
    tcase_add_test(tc, stop_string_ends_before_it);
    tcase_add_test(tc, bad_requests_refused);
    tcase_add_test(tc, full_lane_refuses_with_retry_hint);
    tcase_add_test(tc, stop_fails_requests_in_flight);
    suite_add_tcase(s, tc);
    return s;
}
