/*
 * test-gen-sampler.c - sampling one token from logits (generation/sampler-impl.h).
 *
 * DESIGN
 * The distributions are checked against a reference written here from the definitions, in
 * double and with a full sort (vLLM's order: penalties, temperature, top-k keeping ties,
 * top-p over the renormalized top-k, min-p against the largest probability): 20,000 seeded
 * draws must match it within a chi-square bound and a maximum absolute difference, and
 * tokens the reference gives no mass must never be drawn. Counts are probed through greedy
 * draws over logits built so that a wrong count changes the argmax.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "generation/sampler-impl.h"
#include "tests/unit/test-util.h"

#define N_DRAWS 20000

static struct rtx_gen_params params_default(void) {
    struct rtx_gen_params p;
    memset(&p, 0, sizeof p);
    p.max_tokens = 16;
    p.temperature = 1;
    p.top_p = 1;
    p.repetition_penalty = 1;
    p.n = 1;
    p.logprobs = -1;
    p.skip_special = true;
    return p;
}

static struct rtx_sampler_seq *seq_new(const struct rtx_gen_params *p, int vocab, uint64_t seed,
                                       const int32_t *prompt, int n_prompt) {
    struct rtx_sampler_seq *s = rtx__sampler_seq_new(p, vocab, seed, prompt, n_prompt);
    ck_assert_ptr_nonnull(s);
    return s;
}

static int32_t draw(struct rtx_sampler_seq *s, struct rtx_sampler_scratch *sc, const float *l) {
    return rtx__sampler_draw(s, sc, l, NULL, 0, NULL, NULL, 0);
}

/* ---- the reference ---- */

struct ref_item {
    double v;
    int id;
};

static int ref_desc(const void *pa, const void *pb) {
    const struct ref_item *a = pa, *b = pb;
    if (a->v != b->v) return a->v > b->v ? -1 : 1;
    return a->id - b->id;
}

/* The target distribution of a draw over (already penalized) logits l. */
static void reference(const double *l, int vocab, const struct rtx_gen_params *p, double *prob) {
    struct ref_item *it = calloc((size_t)vocab, sizeof *it);
    ck_assert_ptr_nonnull(it);
    for (int i = 0; i < vocab; i++)
        it[i] = (struct ref_item){l[i] / p->temperature, i};
    qsort(it, (size_t)vocab, sizeof *it, ref_desc);
    int n = vocab;
    if (p->top_k > 0 && p->top_k < vocab) {
        n = p->top_k;
        while (n < vocab && it[n].v == it[p->top_k - 1].v)
            n++; /* ties kept */
    }
    double z = 0;
    for (int i = 0; i < n; i++)
        z += exp(it[i].v - it[0].v);
    if (p->top_p < 1) {
        double before = 0;
        int keep = 0;
        while (keep < n && before < p->top_p)
            before += exp(it[keep++].v - it[0].v) / z;
        n = keep;
    }
    if (p->min_p > 0) { /* against the largest probability after top-k and top-p */
        int keep = 0;
        while (keep < n && exp(it[keep].v - it[0].v) >= p->min_p)
            keep++;
        n = keep;
    }
    memset(prob, 0, (size_t)vocab * sizeof *prob);
    double total = 0;
    for (int i = 0; i < n; i++)
        total += exp(it[i].v - it[0].v);
    for (int i = 0; i < n; i++)
        prob[it[i].id] = exp(it[i].v - it[0].v) / total;
    free(it);
}

/* Draws N_DRAWS tokens (seeded) and compares their frequencies with prob. */
static void assert_distribution(const float *logits, int vocab, const struct rtx_gen_params *p,
                                const int32_t *prompt, int n_prompt, const int32_t *out, int n_out,
                                const double *prob, uint64_t seed) {
    struct rtx_sampler_seq *s = seq_new(p, vocab, seed, prompt, n_prompt);
    for (int i = 0; i < n_out; i++)
        rtx__sampler_seq_accept(s, out[i]);
    struct rtx_sampler_scratch *sc = rtx__sampler_scratch_new(vocab);
    ck_assert_ptr_nonnull(sc);
    long *count = calloc((size_t)vocab, sizeof *count);
    ck_assert_ptr_nonnull(count);
    for (int i = 0; i < N_DRAWS; i++) {
        int32_t t = draw(s, sc, logits);
        ck_assert(t >= 0 && t < vocab);
        count[t]++;
    }
    double chi2 = 0, max_diff = 0;
    int df = -1;
    for (int i = 0; i < vocab; i++) {
        if (prob[i] == 0) {
            ck_assert_msg(count[i] == 0, "token %d has no mass but was drawn %ld times", i,
                          count[i]);
            continue;
        }
        double want = prob[i] * N_DRAWS, d = (double)count[i] - want;
        chi2 += d * d / want;
        df++;
        double diff = fabs((double)count[i] / N_DRAWS - prob[i]);
        if (diff > max_diff) max_diff = diff;
    }
    /* p = 1e-6 critical values stay below df + 7 sqrt(2 df) + 14 for df <= 64 */
    double bound = df + 7 * sqrt(2.0 * (df > 0 ? df : 1)) + 14;
    ck_assert_msg(chi2 < bound, "chi-square %.1f over %d degrees of freedom (bound %.1f)", chi2,
                  df, bound);
    ck_assert_msg(max_diff < 0.015, "frequencies differ from the target by %.4f", max_diff);
    free(count);
    rtx__sampler_scratch_free(sc);
    rtx__sampler_seq_free(s);
}

/* Logits whose probabilities spread over several orders of magnitude, no two equal. */
static void spread_logits(float *l, double *d, int vocab) {
    for (int i = 0; i < vocab; i++) {
        d[i] = 2.5 * sin(1.7 * i + 0.3) - 0.02 * i;
        l[i] = (float)d[i];
        d[i] = l[i]; /* the reference sees exactly the float the sampler sees */
    }
}

static int argmax_d(const double *d, int vocab) {
    int best = 0;
    for (int i = 1; i < vocab; i++)
        if (d[i] > d[best]) best = i;
    return best;
}

/* ---- greedy ---- */

START_TEST(sampler_greedy_is_argmax_first_on_ties) {
    enum { V = 10 };
    struct rtx_gen_params p = params_default();
    p.temperature = 0;
    struct rtx_sampler_seq *s = seq_new(&p, V, 1, NULL, 0);
    struct rtx_sampler_scratch *sc = rtx__sampler_scratch_new(V);
    float l[V] = {0.5f, 3, -1, 3, 2.9f, 0, 0, 0, 0, 3};
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(draw(s, sc, l), 1);
    l[1] = 2;
    ck_assert_int_eq(draw(s, sc, l), 3);
    const int32_t sup[2] = {3, 9};
    ck_assert_int_eq(rtx__sampler_draw(s, sc, l, sup, 2, NULL, NULL, 0), 4);
    rtx__sampler_scratch_free(sc);
    rtx__sampler_seq_free(s);
}
END_TEST

START_TEST(sampler_small_temperature_and_top_k_1_are_greedy) {
    enum { V = 500 };
    float l[V];
    double d[V];
    struct rtx_sampler_scratch *sc = rtx__sampler_scratch_new(V);
    struct rtx_gen_params p = params_default();
    struct rtx_rng r;
    rtx_rng_seed(&r, 7);
    for (int round = 0; round < 200; round++) {
        for (int i = 0; i < V; i++)
            d[i] = l[i] = (float)((rtx_rng_next(&r) >> 40) * 0x1p-20);
        int want = argmax_d(d, V);
        p.temperature = 1e-4; /* the runner-up is e^(-gap / t): at least 1e-5 apart */
        struct rtx_sampler_seq *cold = seq_new(&p, V, (uint64_t)round, NULL, 0);
        p.temperature = 1e-40; /* 1 / t past the float range */
        struct rtx_sampler_seq *frozen = seq_new(&p, V, (uint64_t)round, NULL, 0);
        p.temperature = 1.5;
        p.top_k = 1;
        struct rtx_sampler_seq *k1 = seq_new(&p, V, (uint64_t)round, NULL, 0);
        p.top_k = 0;
        double gap = 1;
        for (int i = 0; i < V; i++)
            if (i != want && d[want] - d[i] < gap) gap = d[want] - d[i];
        if (gap > 2e-3) ck_assert_int_eq(draw(cold, sc, l), want);
        ck_assert_int_eq(draw(k1, sc, l), want);
        ck_assert_int_eq(draw(frozen, sc, l), want);
        rtx__sampler_seq_free(frozen);
        rtx__sampler_seq_free(cold);
        rtx__sampler_seq_free(k1);
    }
    rtx__sampler_scratch_free(sc);
}
END_TEST

/* ---- distributions ---- */

/* Rows: temperature, top_k, top_p, min_p; one loop test each (seeded by the row). */
static const struct {
    double temperature;
    int top_k;
    double top_p, min_p;
} dist_cases[] = {
    {1, 0, 1, 0},        {0.6, 0, 1, 0},       {2.5, 0, 1, 0},  /* temperature */
    {1, 5, 1, 0},        {1.7, 12, 1, 0},                       /* top-k */
    {1, 0, 0.5, 0},      {1.3, 0, 0.9, 0},     {1, 0, 0.05, 0}, /* top-p (0.05: the first alone) */
    {1, 0, 1, 0.2},      {0.8, 0, 1, 0.05},                     /* min-p */
    {1.4, 15, 0.8, 0.1}, {1.4, 3, 0.95, 0.02},                  /* all in vLLM's order */
};

START_TEST(sampler_distribution_matches_reference) {
    enum { V = 40 };
    float l[V];
    double d[V], prob[V];
    spread_logits(l, d, V);
    struct rtx_gen_params p = params_default();
    p.temperature = dist_cases[_i].temperature;
    p.top_k = dist_cases[_i].top_k;
    p.top_p = dist_cases[_i].top_p;
    p.min_p = dist_cases[_i].min_p;
    reference(d, V, &p, prob);
    assert_distribution(l, V, &p, NULL, 0, NULL, 0, prob, 11 + (uint64_t)_i);
}
END_TEST

START_TEST(sampler_ties_at_the_boundaries) {
    enum { V = 8 };
    const float l[V] = {1, 2, 2, 2, 0.5f, 2, -1, 0};
    double d[V], prob[V];
    for (int i = 0; i < V; i++)
        d[i] = l[i];
    struct rtx_gen_params p = params_default();
    p.top_k = 2; /* keeps all four tokens tied with the second */
    reference(d, V, &p, prob);
    ck_assert_double_eq_tol(prob[1], 0.25, 1e-12);
    assert_distribution(l, V, &p, NULL, 0, NULL, 0, prob, 61);
    /* top-p ranks equal probabilities by id: of the three tied at 1, only id 0 makes 0.5 */
    const float t[5] = {1, 2, 1, 0, 1};
    for (int i = 0; i < 5; i++)
        d[i] = t[i];
    p = params_default();
    p.top_p = 0.5;
    reference(d, 5, &p, prob);
    ck_assert(prob[0] > 0 && prob[1] > 0 && prob[2] == 0 && prob[4] == 0);
    assert_distribution(t, 5, &p, NULL, 0, NULL, 0, prob, 62);
}
END_TEST

/* Top-p over a large vocabulary where the kept set runs past the first rounds of ordering. */
START_TEST(sampler_top_p_large_vocabulary) {
    enum { V = 151936, HIGH = 3000 };
    float *l = malloc(V * sizeof *l);
    double *d = malloc(V * sizeof *d), *prob = malloc(V * sizeof *prob);
    ck_assert(l && d && prob);
    struct rtx_rng r;
    rtx_rng_seed(&r, 5);
    for (int i = 0; i < V; i++) { /* a high group at scattered ids, the rest low and flat */
        double x = (double)(rtx_rng_next(&r) >> 11) * 0x1p-53;
        d[i] = l[i] = (float)((i * 7919) % V < HIGH ? 4 + x : x);
    }
    struct rtx_gen_params p = params_default();
    p.top_p = 0.4;
    reference(d, V, &p, prob);
    int kept = 0;
    for (int i = 0; i < V; i++)
        kept += prob[i] > 0;
    ck_assert_int_gt(kept, 1000); /* past the 64 and 256 of the first rounds */
    ck_assert_int_lt(kept, HIGH);
    struct rtx_sampler_seq *s = seq_new(&p, V, 3, NULL, 0);
    struct rtx_sampler_scratch *sc = rtx__sampler_scratch_new(V);
    int distinct = 0;
    char *seen = calloc(V, 1);
    for (int i = 0; i < 500; i++) {
        int32_t t = draw(s, sc, l);
        ck_assert_msg(prob[t] > 0, "token %d outside the top-p set", t);
        distinct += !seen[t];
        seen[t] = 1;
    }
    ck_assert_int_gt(distinct, 300);
    free(seen);
    rtx__sampler_scratch_free(sc);
    rtx__sampler_seq_free(s);
    free(l);
    free(d);
    free(prob);
}
END_TEST

/* ---- penalties and token counts ---- */

/* Applies the penalties by their definitions (HF's repetition rule over prompt and output,
 * OpenAI's presence and frequency over the output). */
static void penalize_ref(double *d, int vocab, const struct rtx_gen_params *p,
                         const int32_t *prompt, int n_prompt, const int32_t *out, int n_out) {
    for (int t = 0; t < vocab; t++) {
        int in_prompt = 0, c = 0;
        for (int i = 0; i < n_prompt; i++)
            in_prompt |= prompt[i] == t;
        for (int i = 0; i < n_out; i++)
            c += out[i] == t;
        if (in_prompt || c > 0)
            d[t] = d[t] > 0 ? d[t] / p->repetition_penalty : d[t] * p->repetition_penalty;
        if (c > 0) d[t] -= p->presence_penalty + p->frequency_penalty * c;
    }
}

/* Spread logits placed at every stride-th id of the vocabulary (the rest -1e30, no mass). */
static void check_penalties(int vocab, int stride, int max_tokens, uint64_t seed) {
    enum { N = 40 };
    float *l = malloc((size_t)vocab * sizeof *l);
    double *d = malloc((size_t)vocab * sizeof *d), *prob = malloc((size_t)vocab * sizeof *prob);
    ck_assert(l && d && prob);
    float small[N];
    double smalld[N];
    spread_logits(small, smalld, N);
    for (int i = 0; i < vocab; i++)
        d[i] = l[i] = -1e30f;
    for (int i = 0; i < N; i++)
        d[i * stride] = l[i * stride] = small[i];
    /* tokens 3 and 7 have negative logits, 5 and 8 positive ones (spread_logits) */
    ck_assert(smalld[3] < 0 && smalld[7] < 0 && smalld[5] > 0 && smalld[8] > 0);
    const int32_t prompt[5] = {3 * stride, 5 * stride, 5 * stride, 17 * stride, 1};
    const int32_t out[7] = {5 * stride,  8 * stride, 8 * stride, 8 * stride,
                            20 * stride, 3 * stride, 7 * stride};
    struct rtx_gen_params p = params_default();
    p.max_tokens = max_tokens;
    p.repetition_penalty = 1.3;
    p.presence_penalty = 0.4;
    p.frequency_penalty = 0.25;
    p.temperature = 0.9;
    penalize_ref(d, vocab, &p, prompt, 5, out, 7);
    reference(d, vocab, &p, prob);
    assert_distribution(l, vocab, &p, prompt, 5, out, 7, prob, seed);
    free(l);
    free(d);
    free(prob);
}

START_TEST(sampler_penalties_follow_their_formulas) {
    check_penalties(40, 1, 16, 71);    /* a small vocabulary: dense counts */
    check_penalties(4096, 97, 16, 72); /* counts in a table */
    check_penalties(4096, 97, 0, 73);  /* max_tokens 0: dense */
}
END_TEST

START_TEST(sampler_greedy_sees_penalties) {
    enum { V = 6 };
    const float l[V] = {2.0f, 1.9f, -0.5f, -0.6f, 0, 0};
    struct rtx_gen_params p = params_default();
    p.temperature = 0;
    p.repetition_penalty = 1.1; /* 2.0 -> 1.818 < 1.9 */
    const int32_t prompt[1] = {0};
    struct rtx_sampler_seq *s = seq_new(&p, V, 0, prompt, 1);
    struct rtx_sampler_scratch *sc = rtx__sampler_scratch_new(V);
    ck_assert_int_eq(draw(s, sc, l), 1);
    rtx__sampler_seq_free(s);
    p.repetition_penalty = 1;
    p.presence_penalty = -2; /* a negative penalty favours what was said */
    s = seq_new(&p, V, 0, prompt, 1);
    ck_assert_int_eq(draw(s, sc, l), 0); /* the prompt does not count for presence */
    rtx__sampler_seq_accept(s, 3);
    ck_assert_int_eq(draw(s, sc, l), 0); /* -0.6 + 2 = 1.4 */
    rtx__sampler_seq_accept(s, 1);
    ck_assert_int_eq(draw(s, sc, l), 1); /* 1.9 + 2 */
    rtx__sampler_seq_free(s);
    p.presence_penalty = 0;
    p.repetition_penalty = 2; /* a negative logit is multiplied: -0.5 -> -1 < -0.6 */
    const float neg[V] = {-5, -5, -0.5f, -0.6f, -5, -5};
    s = seq_new(&p, V, 0, (const int32_t[]){2}, 1);
    ck_assert_int_eq(draw(s, sc, neg), 3);
    rtx__sampler_seq_free(s);
    rtx__sampler_scratch_free(sc);
}
END_TEST

/* Asserts through two greedy draws (frequency penalty 1, nothing else) that token a has
 * output count c: logits c + 0.5 and c - 0.5 against a token at 0 must be drawn and lost. */
static void assert_count(struct rtx_sampler_seq *s, struct rtx_sampler_scratch *sc, float *l,
                         int32_t a, int32_t sentinel, int c) {
    l[sentinel] = 0;
    l[a] = (float)c + 0.5f;
    ck_assert_msg(draw(s, sc, l) == a, "token %d counted more than %d times", a, c);
    l[a] = (float)c - 0.5f;
    ck_assert_msg(draw(s, sc, l) == sentinel, "token %d counted fewer than %d times", a, c);
    l[a] = l[sentinel] = -100;
}

static int32_t probe_token(int i, int vocab) {
    return (int32_t)(((int64_t)i * 7919 + 11) % vocab);
}

static void assert_counts(struct rtx_sampler_seq *s, struct rtx_sampler_scratch *sc, int vocab,
                          int n, int bonus) {
    float *l = malloc((size_t)vocab * sizeof *l);
    ck_assert_ptr_nonnull(l);
    for (int i = 0; i < vocab; i++)
        l[i] = -100;
    for (int i = 0; i < n; i++)
        assert_count(s, sc, l, probe_token(i, vocab), 5, 1 + i % 3 + bonus);
    free(l);
}

START_TEST(sampler_counts_survive_growth_and_fork) {
    enum { V = 100000, N = 300 };
    struct rtx_gen_params p = params_default();
    p.temperature = 0;
    p.frequency_penalty = 1;
    p.max_tokens = 1; /* sized for 2 distinct tokens: the table has to grow */
    struct rtx_sampler_seq *s = seq_new(&p, V, 0, (const int32_t[]){9}, 1);
    struct rtx_sampler_scratch *sc = rtx__sampler_scratch_new(V);
    ck_assert_ptr_nonnull(sc);
    for (int i = 0; i < N; i++)
        for (int k = 0; k <= i % 3; k++)
            rtx__sampler_seq_accept(s, probe_token(i, V));
    assert_counts(s, sc, V, N, 0);
    struct rtx_sampler_seq *f = rtx__sampler_seq_fork(s, 99);
    ck_assert_ptr_nonnull(f);
    assert_counts(f, sc, V, N, 0);
    for (int i = 0; i < N; i++)
        rtx__sampler_seq_accept(f, probe_token(i, V));
    assert_counts(f, sc, V, N, 1);
    assert_counts(s, sc, V, N, 0);  /* the original keeps its own counts */
    rtx__sampler_seq_accept(s, -1); /* out of range: ignored */
    rtx__sampler_seq_accept(s, V);
    rtx__sampler_seq_free(f);
    rtx__sampler_seq_free(s);
    rtx__sampler_scratch_free(sc);
}
END_TEST

START_TEST(sampler_suppressed_tokens_are_never_drawn) {
    enum { V = 40 };
    float l[V];
    double d[V], prob[V];
    spread_logits(l, d, V);
    int32_t sup[4] = {argmax_d(d, V), 0, 1, 2};
    struct rtx_gen_params p = params_default();
    p.top_k = 6;
    for (int i = 0; i < 4; i++)
        d[sup[i]] = -INFINITY;
    reference(d, V, &p, prob);
    struct rtx_sampler_seq *s = seq_new(&p, V, 81, NULL, 0);
    struct rtx_sampler_scratch *sc = rtx__sampler_scratch_new(V);
    long count[V] = {0};
    for (int i = 0; i < N_DRAWS; i++)
        count[rtx__sampler_draw(s, sc, l, sup, 4, NULL, NULL, 0)]++;
    for (int i = 0; i < V; i++) {
        if (prob[i] == 0) ck_assert_int_eq(count[i], 0);
        ck_assert_double_eq_tol((double)count[i] / N_DRAWS, prob[i], 0.015);
    }
    rtx__sampler_scratch_free(sc);
    rtx__sampler_seq_free(s);
}
END_TEST

/* ---- logprobs ---- */

static void log_softmax(const float *l, int vocab, double *out) {
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < vocab; i++)
        if (l[i] > mx) mx = l[i];
    for (int i = 0; i < vocab; i++)
        sum += exp(l[i] - mx);
    for (int i = 0; i < vocab; i++)
        out[i] = l[i] - mx - log(sum);
}

START_TEST(sampler_logprobs_are_the_raw_log_softmax) {
    enum { V = 1000, TOP = RTX_GEN_MAX_LOGPROBS };
    float l[V];
    double ls[V];
    struct rtx_rng r;
    rtx_rng_seed(&r, 3);
    for (int i = 0; i < V; i++)
        l[i] = (float)((double)(rtx_rng_next(&r) >> 11) * 0x1p-53 * 12 - 6);
    log_softmax(l, V, ls);
    struct rtx_gen_params p = params_default();
    p.temperature = 0.7; /* none of these changes the reported logprobs */
    p.top_k = 50;
    p.repetition_penalty = 1.5;
    p.frequency_penalty = 1;
    struct rtx_sampler_seq *s = seq_new(&p, V, 4, (const int32_t[]){1, 2, 3}, 3);
    struct rtx_sampler_scratch *sc = rtx__sampler_scratch_new(V);
    struct rtx_gen_logprob top[TOP + 1];
    for (int round = 0; round < 50; round++) {
        float lp = 1;
        int n_top = round % (TOP + 1);
        top[n_top].token = -7; /* must stay untouched */
        int32_t t = rtx__sampler_draw(s, sc, l, NULL, 0, &lp, top, n_top);
        rtx__sampler_seq_accept(s, t);
        ck_assert_double_eq_tol(lp, ls[t], 1e-5);
        ck_assert_int_eq(top[n_top].token, -7);
        for (int j = 0; j < n_top; j++) {
            int32_t id = top[j].token;
            ck_assert(id >= 0 && id < V);
            ck_assert_double_eq_tol(top[j].logprob, ls[id], 1e-5);
            if (j > 0) ck_assert(l[top[j - 1].token] > l[id]);
            int larger = 0; /* exactly j tokens rank above the j-th */
            for (int i = 0; i < V; i++)
                larger += l[i] > l[id];
            ck_assert_int_eq(larger, j);
        }
    }
    /* ties: the lower id first */
    const float tied[4] = {1, 3, 3, 0};
    struct rtx_sampler_seq *s4 = seq_new(&p, 4, 4, NULL, 0);
    rtx__sampler_draw(s4, sc, tied, NULL, 0, NULL, top, 3);
    ck_assert_int_eq(top[0].token, 1);
    ck_assert_int_eq(top[1].token, 2);
    ck_assert_int_eq(top[2].token, 0);
    top[0].token = -7; /* n_top below 0: nothing written */
    rtx__sampler_draw(s4, sc, tied, NULL, 0, NULL, top, -3);
    ck_assert_int_eq(top[0].token, -7);
    rtx__sampler_seq_free(s4);
    rtx__sampler_scratch_free(sc);
    rtx__sampler_seq_free(s);
}
END_TEST

/* ---- reproducibility ---- */

static void draw_sequence(struct rtx_sampler_seq *s, struct rtx_sampler_scratch *sc,
                          const float *l, int32_t *out, int n) {
    for (int i = 0; i < n; i++) {
        out[i] = draw(s, sc, l);
        rtx__sampler_seq_accept(s, out[i]);
    }
}

START_TEST(sampler_seeds_reproduce) {
    enum { V = 40, N = 64 };
    float l[V];
    double d[V];
    spread_logits(l, d, V);
    struct rtx_gen_params p = params_default();
    p.top_p = 0.95;
    p.frequency_penalty = 0.3;
    struct rtx_sampler_scratch *sc = rtx__sampler_scratch_new(V);
    int32_t a[N], b[N], c[N], f1[N], f2[N];
    struct rtx_sampler_seq *sa = seq_new(&p, V, 42, NULL, 0), *sb = seq_new(&p, V, 42, NULL, 0),
                           *scc = seq_new(&p, V, 43, NULL, 0);
    draw_sequence(sa, sc, l, a, N);
    draw_sequence(sb, sc, l, b, N);
    draw_sequence(scc, sc, l, c, N);
    ck_assert_mem_eq(a, b, sizeof a);
    ck_assert(memcmp(a, c, sizeof a) != 0);
    /* forks with one seed continue alike from the same counts */
    struct rtx_sampler_seq *x = rtx__sampler_seq_fork(sa, 7), *y = rtx__sampler_seq_fork(sb, 7);
    draw_sequence(x, sc, l, f1, N);
    draw_sequence(y, sc, l, f2, N);
    ck_assert_mem_eq(f1, f2, sizeof f1);
    rtx__sampler_seq_free(x);
    rtx__sampler_seq_free(y);
    rtx__sampler_seq_free(sa);
    rtx__sampler_seq_free(sb);
    rtx__sampler_seq_free(scc);
    rtx__sampler_scratch_free(sc);
}
END_TEST

/* ---- edge cases ---- */

START_TEST(sampler_vocabulary_of_one) {
    struct rtx_gen_params p = params_default();
    p.top_k = 1;
    p.top_p = 0.3;
    p.min_p = 0.5;
    p.repetition_penalty = 2;
    struct rtx_sampler_seq *s = seq_new(&p, 1, 1, (const int32_t[]){0}, 1);
    struct rtx_sampler_scratch *sc = rtx__sampler_scratch_new(1);
    const float l[1] = {-3.5f};
    struct rtx_gen_logprob top[3];
    for (int i = 0; i < 10; i++) {
        float lp = 1;
        ck_assert_int_eq(rtx__sampler_draw(s, sc, l, NULL, 0, &lp, top, 3), 0);
        rtx__sampler_seq_accept(s, 0);
        ck_assert(lp == 0);
        ck_assert_int_eq(top[0].token, 0);
        ck_assert(top[0].logprob == 0);
        ck_assert_int_eq(top[1].token, -1); /* beyond the vocabulary */
        ck_assert(top[2].logprob == -INFINITY);
    }
    rtx__sampler_scratch_free(sc);
    rtx__sampler_seq_free(s);
}
END_TEST

START_TEST(sampler_non_finite_logits) {
    enum { V = 40 };
    float l[V];
    double d[V], prob[V];
    spread_logits(l, d, V);
    int best = argmax_d(d, V);
    l[best] = NAN;
    l[(best + 1) % V] = -INFINITY;
    d[best] = d[(best + 1) % V] = -INFINITY; /* NaN counts as -inf */
    struct rtx_gen_params p = params_default();
    reference(d, V, &p, prob);
    assert_distribution(l, V, &p, NULL, 0, NULL, 0, prob, 91);
    struct rtx_sampler_scratch *sc = rtx__sampler_scratch_new(V);
    struct rtx_sampler_seq *s = seq_new(&p, V, 92, NULL, 0);
    float lp;
    struct rtx_gen_logprob top[RTX_GEN_MAX_LOGPROBS];
    rtx__sampler_draw(s, sc, l, NULL, 0, &lp, top, RTX_GEN_MAX_LOGPROBS);
    for (int j = 0; j < RTX_GEN_MAX_LOGPROBS; j++)
        ck_assert(top[j].token != best);
    double finite[V], ls[V];
    for (int i = 0; i < V; i++)
        finite[i] = isnan(l[i]) ? -INFINITY : l[i];
    float ff[V];
    for (int i = 0; i < V; i++)
        ff[i] = (float)finite[i];
    log_softmax(ff, V, ls);
    ck_assert_double_eq_tol(top[0].logprob, ls[top[0].token], 1e-5);

    /* +inf: those tokens share the mass; greedy takes the first */
    l[4] = l[9] = INFINITY;
    long count[V] = {0};
    for (int i = 0; i < N_DRAWS; i++)
        count[draw(s, sc, l)]++;
    ck_assert_int_eq(count[4] + count[9], N_DRAWS);
    ck_assert_double_eq_tol((double)count[4] / N_DRAWS, 0.5, 0.015);
    rtx__sampler_draw(s, sc, l, NULL, 0, &lp, top, 3);
    ck_assert_double_eq_tol(lp, -log(2.0), 1e-6);
    ck_assert_int_eq(top[0].token, 4);
    ck_assert_int_eq(top[1].token, 9);
    ck_assert(top[2].logprob == -INFINITY);
    p.temperature = 0;
    struct rtx_sampler_seq *g = seq_new(&p, V, 0, NULL, 0);
    ck_assert_int_eq(draw(g, sc, l), 4);

    /* nothing drawable: the first token not suppressed */
    for (int i = 0; i < V; i++)
        l[i] = i % 2 ? NAN : -INFINITY;
    ck_assert_int_eq(draw(g, sc, l), 0);
    ck_assert_int_eq(draw(s, sc, l), 0);
    const int32_t sup[2] = {0, 1};
    ck_assert_int_eq(rtx__sampler_draw(s, sc, l, sup, 2, &lp, NULL, 0), 2);
    ck_assert(lp == -INFINITY);
    rtx__sampler_seq_free(g);
    rtx__sampler_seq_free(s);
    rtx__sampler_scratch_free(sc);
}
END_TEST

/* ---- parameter check ---- */

/* The i-th bad parameter set (vocabulary 32), with the field and value its message names;
 * false past the last. */
static bool bad_params(int i, struct rtx_gen_params *p, const char **field, const char **got) {
    static const int32_t bad_ids[2] = {3, 32};
    static const char *stops[2] = {"end", ""};
    *p = params_default();
    switch (i) {
    case 0: p->max_tokens = -1, *field = "max_tokens", *got = "got -1"; break;
    case 1: p->min_tokens = -2, *field = "min_tokens", *got = "got -2"; break;
    case 2: p->min_tokens = 17, *field = "min_tokens", *got = "got 17"; break;
    case 3: p->temperature = 200, *field = "temperature", *got = "got 200"; break;
    case 4: p->temperature = -0.5, *field = "temperature", *got = "got -0.5"; break;
    case 5: p->temperature = NAN, *field = "temperature", *got = "got nan"; break;
    case 6: p->top_p = 0, *field = "top_p", *got = "got 0"; break;
    case 7: p->top_p = 1.5, *field = "top_p", *got = "got 1.5"; break;
    case 8: p->top_k = -2, *field = "top_k", *got = "got -2"; break;
    case 9: p->top_k = 33, *field = "top_k", *got = "got 33"; break;
    case 10: p->min_p = -0.1, *field = "min_p", *got = "got -0.1"; break;
    case 11: p->min_p = 1.01, *field = "min_p", *got = "got 1.01"; break;
    case 12: p->repetition_penalty = 0, *field = "repetition_penalty", *got = "got 0"; break;
    case 13: p->repetition_penalty = 11, *field = "repetition_penalty", *got = "got 11"; break;
    case 14: p->presence_penalty = 2.5, *field = "presence_penalty", *got = "got 2.5"; break;
    case 15: p->presence_penalty = -3, *field = "presence_penalty", *got = "got -3"; break;
    case 16: p->frequency_penalty = -2.01, *field = "frequency_penalty", *got = "got -2.01"; break;
    case 17:
        p->frequency_penalty = INFINITY, *field = "frequency_penalty", *got = "got inf";
        break;
    case 18: p->n = 0, *field = "n", *got = "got 0"; break;
    case 19: p->n = RTX_GEN_MAX_N + 1, *field = "n", *got = "got 17"; break;
    case 20: p->logprobs = -2, *field = "logprobs", *got = "got -2"; break;
    case 21: p->logprobs = RTX_GEN_MAX_LOGPROBS + 1, *field = "logprobs", *got = "got 21"; break;
    case 22: p->n_stop = RTX_GEN_MAX_STOP + 1, *field = "n_stop", *got = "got 9"; break;
    case 23:
        p->n_stop = 2, p->stop[0] = stops[0], p->stop[1] = stops[1];
        *field = "stop[1]", *got = "non-empty";
        break;
    case 24: p->n_stop = 1, *field = "stop[0]", *got = "non-empty"; break; /* NULL */
    case 25: p->n_stop_ids = -1, *field = "n_stop_ids", *got = "got -1"; break;
    case 26: p->n_stop_ids = 1, *field = "n_stop_ids", *got = "got 1"; break; /* NULL ids */
    case 27:
        p->n_stop_ids = 2, p->stop_ids = bad_ids, *field = "stop_ids[1]", *got = "got 32";
        break;
    default: return false;
    }
    return true;
}

START_TEST(sampler_check_refuses_each_field) {
    struct rtx_gen_params p = params_default();
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx__sampler_check(&p, 32, &err), 0);
    p.temperature = 0; /* the bounds themselves are accepted */
    p.top_k = 32;
    p.min_p = 1;
    p.repetition_penalty = 10;
    p.presence_penalty = -2;
    p.frequency_penalty = 2;
    p.n = RTX_GEN_MAX_N;
    p.logprobs = RTX_GEN_MAX_LOGPROBS;
    p.min_tokens = 16;
    p.n_stop_ids = 1;
    p.stop_ids = (const int32_t[]){31};
    ck_assert_int_eq(rtx__sampler_check(&p, 32, &err), 0);
    p.top_k = -1;
    p.max_tokens = 0;
    p.min_tokens = 100; /* no bound from max_tokens 0 */
    ck_assert_int_eq(rtx__sampler_check(&p, 32, NULL), 0);
    const char *field, *got;
    int i = 0;
    for (; bad_params(i, &p, &field, &got); i++) {
        memset(&err, 0, sizeof err);
        ck_assert_msg(rtx__sampler_check(&p, 32, &err) == RTX_EINVAL, "case %d passed", i);
        ck_assert_msg(strncmp(err.msg, field, strlen(field)) == 0 && strstr(err.msg, got),
                      "case %d: \"%s\" should name %s and say %s", i, err.msg, field, got);
        ck_assert_int_eq(rtx__sampler_check(&p, 32, NULL), RTX_EINVAL);
    }
    ck_assert_int_eq(i, 28);
    p = params_default();
    ck_assert_int_eq(rtx__sampler_check(&p, 0, &err), RTX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "vocabulary"));
}
END_TEST

/* ---- allocation ---- */

START_TEST(sampler_oom_returns_null) {
    struct rtx_gen_params p = params_default();
    p.repetition_penalty = 1.2;
    const int32_t prompt[3] = {1, 2, 3};
    for (int which = 0; which < 3; which++) {
        for (int n = 1;; n++) {
            struct rtx_sampler_seq *base = which == 2 ? seq_new(&p, 5000, 1, prompt, 3) : NULL;
            rtx_alloc_fail_after(n);
            void *o = which == 0   ? (void *)rtx__sampler_seq_new(&p, 5000, 1, prompt, 3)
                      : which == 1 ? (void *)rtx__sampler_scratch_new(5000)
                                   : (void *)rtx__sampler_seq_fork(base, 2);
            rtx_alloc_fail_after(0);
            rtx__sampler_seq_free(base);
            if (!o) continue;
            ck_assert_int_gt(n, 1);
            if (which == 1)
                rtx__sampler_scratch_free(o);
            else
                rtx__sampler_seq_free(o);
            break;
        }
    }
}
END_TEST

Suite *rtx_gen_sampler_suite(void) {
    Suite *s = suite_create("gen_sampler");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, sampler_greedy_is_argmax_first_on_ties);
    tcase_add_test(tc, sampler_small_temperature_and_top_k_1_are_greedy);
    tcase_add_loop_test(tc, sampler_distribution_matches_reference, 0,
                        (int)(sizeof dist_cases / sizeof dist_cases[0]));
    tcase_add_test(tc, sampler_ties_at_the_boundaries);
    tcase_add_test(tc, sampler_top_p_large_vocabulary);
    tcase_add_test(tc, sampler_penalties_follow_their_formulas);
    tcase_add_test(tc, sampler_greedy_sees_penalties);
    tcase_add_test(tc, sampler_counts_survive_growth_and_fork);
    tcase_add_test(tc, sampler_suppressed_tokens_are_never_drawn);
    tcase_add_test(tc, sampler_logprobs_are_the_raw_log_softmax);
    tcase_add_test(tc, sampler_seeds_reproduce);
    tcase_add_test(tc, sampler_vocabulary_of_one);
    tcase_add_test(tc, sampler_non_finite_logits);
    tcase_add_test(tc, sampler_check_refuses_each_field);
    tcase_add_test(tc, sampler_oom_returns_null);
    suite_add_tcase(s, tc);
    return s;
}
