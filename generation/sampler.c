/*
 * sampler.c - one row of logits to one token (generation/sampler-impl.h): penalties,
 * temperature, top-k, top-p, min-p and a seeded draw, with the logprobs a request asked for.
 *
 * DESIGN
 * A draw copies the logits into the scratch row (NaN becomes -inf), applies the penalties at
 * the tokens the sequence has seen and sets the suppressed ids to -inf. Greedy (temperature
 * 0) is then an argmax (straight over the logits when there is nothing to apply). Otherwise
 * the tokens above -inf become candidates {logit, id}. Top-k keeps the k largest logits and
 * every one tied with the k-th (Hugging Face's and vLLM's rule). The values then become
 * e = exp((logit - max) / temperature) (unnormalized, the largest 1, nothing overflows) and
 * Z, their sum, is what top-p is measured against. Min-p is a threshold (e >= min_p, as the
 * largest e is 1); applied after top-p it keeps a prefix of the same descending order, so it
 * is applied first and top-p only ranks what survives it. Top-p keeps a token when the mass
 * ranked before it is below top_p * Z (the smallest set reaching top_p, the most likely token
 * always in it; ties rank the lower id first). Neither sorts: both are a radix selection
 * (radix_keep) over the values' bits, so a draw is a few passes over the vocabulary whatever
 * the distribution, and a sort only of candidates with equal values at top-p's boundary. The
 * draw is one uniform number from the sequence's generator against the kept masses, so the
 * same seed and logits give the same tokens. Logprobs are the raw logits' log-softmax and the
 * top alternatives their n_top largest (ties: the lower id first); entries past the
 * vocabulary are {-1, -inf}.
 * Non-finite logits: NaN counts as -inf (never drawn, logprob -inf); -inf is never drawn;
 * +inf logits take all the mass, shared equally (greedy takes the first). When nothing is
 * drawable (every token -inf, NaN or suppressed) the draw returns the first token that is not
 * suppressed (0 when all are); its logprob is still the raw logits' (-inf when it is -inf).
 *
 * Token counts (only when a penalty is on; otherwise nothing is kept): per token seen, a
 * 32-bit word whose top bit says "in the prompt" and whose low 31 bits count it in the
 * output. They live in an open-addressing table (8 bytes a slot, half full at most) sized at
 * creation for the distinct tokens the sequence can have, n_prompt + max_tokens, so accept
 * does not allocate; when that table would take more than a dense array of vocab words (a
 * small vocabulary, or max_tokens 0 with a long context) the dense array is used. For 256
 * sequences over a 150k vocabulary with 1k-token prompts and max_tokens 256: 32 KiB each
 * (8 MiB in all) instead of 600 KiB each (150 MiB) dense. A table that fills up anyway (more
 * output than max_tokens) doubles; if that fails it keeps counting into its spare slots, and
 * only a table with no spare slot left, under memory exhaustion, leaves new tokens uncounted.
 */
#include <assert.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "generation/sampler-impl.h"

#define PROMPT_BIT 0x80000000u
#define COUNT_MASK 0x7fffffffu
#define EMPTY_SLOT (-1)

struct count_slot {
    int32_t token; /* EMPTY_SLOT when free */
    uint32_t v;    /* PROMPT_BIT | output count */
};

enum counts_mode { COUNTS_NONE, COUNTS_DENSE, COUNTS_TABLE };

struct rtx_sampler_seq {
    int vocab;
    double temperature, top_p, min_p;
    int top_k; /* 0: off */
    double repetition, presence, frequency;
    struct rtx_rng rng;
    enum counts_mode mode;
    uint32_t *dense;          /* [vocab], COUNTS_DENSE */
    struct count_slot *slots; /* [cap], COUNTS_TABLE */
    uint32_t cap, n_slots;    /* cap: a power of two */
};

struct cand {
    float v; /* the logit, then its unnormalized probability e */
    int32_t id;
};

struct rtx_sampler_scratch {
    int vocab;
    float *w;                 /* [vocab] working logits */
    struct cand *c;           /* [vocab] candidates */
    double bin_mass[1 << 11]; /* radix_keep's histogram */
    uint32_t bin_count[1 << 11];
};

/* ---- token counts ---- */

static uint32_t slot_of(int32_t token, uint32_t cap) {
    uint32_t h = (uint32_t)token * 0x9e3779b1u;
    return (h ^ (h >> 15)) & (cap - 1);
}

static struct count_slot *slots_new(uint32_t cap) {
    struct count_slot *t = rtx_malloc((size_t)cap * sizeof *t);
    if (t)
        for (uint32_t i = 0; i < cap; i++)
            t[i].token = EMPTY_SLOT;
    return t;
}

/* The slot of token, or the empty slot where it goes; NULL when the table is full. */
static struct count_slot *slot_find(struct count_slot *t, uint32_t cap, int32_t token) {
    for (uint32_t i = slot_of(token, cap), n = 0; n < cap; i = (i + 1) & (cap - 1), n++)
        if (t[i].token == token || t[i].token == EMPTY_SLOT) return &t[i];
    return NULL;
}

static void table_grow(struct rtx_sampler_seq *s) {
    if (s->cap > UINT32_MAX / 2) return;
    uint32_t cap = s->cap * 2;
    struct count_slot *t = slots_new(cap);
    if (!t) return; /* the spare slots of the old table keep counting */
    for (uint32_t i = 0; i < s->cap; i++)
        if (s->slots[i].token != EMPTY_SLOT) *slot_find(t, cap, s->slots[i].token) = s->slots[i];
    rtx_free(s->slots);
    s->slots = t;
    s->cap = cap;
}

/* The count word of token, created when new; NULL when it cannot be kept. */
static uint32_t *count_word(struct rtx_sampler_seq *s, int32_t token) {
    if (token < 0 || token >= s->vocab) return NULL;
    if (s->mode == COUNTS_DENSE) return &s->dense[token];
    if (s->mode != COUNTS_TABLE) return NULL;
    struct count_slot *e = slot_find(s->slots, s->cap, token);
    if (e && e->token == token) return &e->v;
    if ((s->n_slots + 1) * 2 > s->cap) {
        table_grow(s);
        e = slot_find(s->slots, s->cap, token);
    }
    if (!e || s->n_slots + 1 >= s->cap) return NULL; /* one slot stays empty for lookups */
    e->token = token;
    e->v = 0;
    s->n_slots++;
    return &e->v;
}

static void penalize(const struct rtx_sampler_seq *s, float *w, int32_t token, uint32_t v) {
    double x = w[token];
    if (s->repetition != 1.0) x = x > 0 ? x / s->repetition : x * s->repetition;
    uint32_t c = v & COUNT_MASK;
    if (c > 0) x -= s->presence + s->frequency * (double)c;
    w[token] = (float)x;
}

static void apply_penalties(const struct rtx_sampler_seq *s, float *w) {
    if (s->mode == COUNTS_DENSE) {
        for (int i = 0; i < s->vocab; i++)
            if (s->dense[i]) penalize(s, w, i, s->dense[i]);
    } else if (s->mode == COUNTS_TABLE) {
        for (uint32_t i = 0; i < s->cap; i++)
            if (s->slots[i].token != EMPTY_SLOT) penalize(s, w, s->slots[i].token, s->slots[i].v);
    }
}

/* ---- sequences ---- */

struct rtx_sampler_seq *rtx__sampler_seq_new(const struct rtx_gen_params *params, int vocab,
                                             uint64_t seed, const int32_t *prompt, int n_prompt) {
    if (!params || vocab < 1 || n_prompt < 0) return NULL;
    struct rtx_sampler_seq *s = rtx_calloc(1, sizeof *s);
    if (!s) return NULL;
    s->vocab = vocab;
    s->temperature = params->temperature;
    s->top_p = params->top_p;
    s->top_k = params->top_k > 0 && params->top_k < vocab ? params->top_k : 0;
    s->min_p = params->min_p;
    s->repetition = params->repetition_penalty;
    s->presence = params->presence_penalty;
    s->frequency = params->frequency_penalty;
    rtx_rng_seed(&s->rng, seed);
    if (s->repetition == 1.0 && s->presence == 0.0 && s->frequency == 0.0) return s;
    /* distinct tokens the sequence can see, and the table that holds them half full */
    int64_t distinct = (int64_t)n_prompt + (params->max_tokens > 0 ? params->max_tokens : vocab);
    if (distinct > vocab) distinct = vocab;
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)distinct)
        cap <<= 1;
    if (cap * sizeof(struct count_slot) < (uint64_t)vocab * sizeof(uint32_t)) {
        s->mode = COUNTS_TABLE;
        s->cap = (uint32_t)cap;
        s->slots = slots_new(s->cap);
        if (!s->slots) goto oom;
    } else {
        s->mode = COUNTS_DENSE;
        s->dense = rtx_calloc((size_t)vocab, sizeof *s->dense);
        if (!s->dense) goto oom;
    }
    for (int i = 0; i < n_prompt; i++) {
        uint32_t *v = count_word(s, prompt[i]);
        if (v) *v |= PROMPT_BIT;
    }
    return s;
oom:
    rtx__sampler_seq_free(s);
    return NULL;
}

struct rtx_sampler_seq *rtx__sampler_seq_fork(const struct rtx_sampler_seq *s, uint64_t seed) {
    struct rtx_sampler_seq *f = rtx_malloc(sizeof *f);
    if (!f) return NULL;
    *f = *s;
    f->dense = NULL;
    f->slots = NULL;
    rtx_rng_seed(&f->rng, seed);
    if (s->mode == COUNTS_DENSE) {
        f->dense = rtx_malloc((size_t)s->vocab * sizeof *f->dense);
        if (!f->dense) goto oom;
        memcpy(f->dense, s->dense, (size_t)s->vocab * sizeof *f->dense);
    } else if (s->mode == COUNTS_TABLE) {
        f->slots = rtx_malloc((size_t)s->cap * sizeof *f->slots);
        if (!f->slots) goto oom;
        memcpy(f->slots, s->slots, (size_t)s->cap * sizeof *f->slots);
    }
    return f;
oom:
    rtx__sampler_seq_free(f);
    return NULL;
}

void rtx__sampler_seq_free(struct rtx_sampler_seq *s) {
    if (!s) return;
    rtx_free(s->dense);
    rtx_free(s->slots);
    rtx_free(s);
}

void rtx__sampler_seq_accept(struct rtx_sampler_seq *s, int32_t token) {
    uint32_t *v = count_word(s, token);
    if (v && (*v & COUNT_MASK) != COUNT_MASK) (*v)++;
}

/* ---- scratch ---- */

struct rtx_sampler_scratch *rtx__sampler_scratch_new(int vocab) {
    if (vocab < 1) return NULL;
    struct rtx_sampler_scratch *sc = rtx_calloc(1, sizeof *sc);
    if (!sc) return NULL;
    sc->vocab = vocab;
    sc->w = rtx_malloc((size_t)vocab * sizeof *sc->w);
    sc->c = rtx_malloc((size_t)vocab * sizeof *sc->c);
    if (!sc->w || !sc->c) {
        rtx__sampler_scratch_free(sc);
        return NULL;
    }
    return sc;
}

void rtx__sampler_scratch_free(struct rtx_sampler_scratch *sc) {
    if (!sc) return;
    rtx_free(sc->w);
    rtx_free(sc->c);
    rtx_free(sc);
}

/* ---- selecting candidates ---- */

/* Float order as unsigned order (-0 and +0 alike). */
static uint32_t order_key(float v) {
    uint32_t u;
    v += 0.0f;
    memcpy(&u, &v, sizeof u);
    return u & 0x80000000u ? ~u : u | 0x80000000u;
}

static void swap_cand(struct cand *a, struct cand *b) {
    struct cand t = *a;
    *a = *b;
    *b = t;
}

static int cmp_id(const void *pa, const void *pb) {
    const struct cand *a = pa, *b = pb;
    return (a->id > b->id) - (a->id < b->id);
}

/* Moves to the front of c[0..n) what top-k (by_mass false: the candidates ranked before the
 * target-th, by value) or top-p (by_mass true: those whose mass ranked before them, values
 * being masses, is below target) keeps, and returns how many. Ranking is by value, then by
 * the lower id; top-k keeps every candidate tied with the target-th value. A radix selection
 * over the values' bits, 11 + 11 + 10 of them: each level histograms the candidates still in
 * question, finds the bin the boundary falls in, moves the bins above it to the kept front
 * and keeps looking in that bin only, so the cost is one or two passes over c plus passes
 * over the boundary bin, without sorting. */
static int radix_keep(struct rtx_sampler_scratch *sc, struct cand *c, int n, double target,
                      bool by_mass) {
    static const int shift[3] = {21, 10, 0}, width[3] = {11, 11, 10};
    int lo = 0, hi = n; /* c[0..lo) kept, c[hi..n) dropped, the boundary in c[lo..hi) */
    for (int level = 0; level < 3 && hi - lo > 1; level++) {
        uint32_t n_bins = 1u << width[level], mask = n_bins - 1;
        double *mass = sc->bin_mass;
        memset(mass, 0, n_bins * sizeof *mass);
        if (by_mass) {
            for (int i = lo; i < hi; i++)
                mass[(order_key(c[i].v) >> shift[level]) & mask] += c[i].v;
        } else {
            uint32_t *count = sc->bin_count;
            memset(count, 0, n_bins * sizeof *count);
            for (int i = lo; i < hi; i++)
                count[(order_key(c[i].v) >> shift[level]) & mask]++;
            for (uint32_t b = 0; b < n_bins; b++)
                mass[b] = count[b];
        }
        double above = 0;
        uint32_t bin = n_bins;
        while (bin-- > 0 && above + mass[bin] < target)
            above += mass[bin];
        if (bin >= n_bins) return hi; /* rounding: the whole range stays below target */
        int j = lo; /* the boundary bin and those above it to the front, then split them */
        for (int i = lo; i < hi; i++)
            if (((order_key(c[i].v) >> shift[level]) & mask) >= bin) swap_cand(&c[i], &c[j++]);
        hi = j;
        j = lo;
        for (int i = lo; i < hi; i++)
            if (((order_key(c[i].v) >> shift[level]) & mask) > bin) swap_cand(&c[i], &c[j++]);
        lo = j;
        target -= above;
    }
    if (!by_mass || hi - lo <= 1) return hi;
    /* equal masses: the lower ids first, each kept while the mass before it is below target */
    qsort(c + lo, (size_t)(hi - lo), sizeof *c, cmp_id);
    double before = 0;
    for (int i = lo; i < hi; i++) {
        if (before >= target) return i;
        before += c[i].v;
    }
    return hi;
}

/* ---- the draw ---- */

static bool suppressed(int32_t token, const int32_t *sup, int n_sup) {
    for (int i = 0; i < n_sup; i++)
        if (sup[i] == token) return true;
    return false;
}

/* What the draw returns when no token can be drawn. */
static int32_t fallback(int vocab, const int32_t *sup, int n_sup) {
    for (int32_t i = 0; i < vocab; i++)
        if (!sup || !suppressed(i, sup, n_sup)) return i;
    return 0;
}

/* The first largest value above -inf (NaN never compares larger), or -1. */
static int32_t argmax(const float *w, int vocab) {
    int32_t best = -1;
    float top = -INFINITY;
    for (int32_t i = 0; i < vocab; i++)
        if (w[i] > top) top = w[best = i];
    return best;
}

static int32_t sample(struct rtx_sampler_seq *s, struct rtx_sampler_scratch *sc) {
    const float *w = sc->w;
    struct cand *c = sc->c;
    float mx = -INFINITY;
    int n = 0;
    for (int32_t i = 0; i < s->vocab; i++) {
        if (!(w[i] > -INFINITY)) continue;
        c[n++] = (struct cand){w[i], i};
        if (w[i] > mx) mx = w[i];
    }
    if (n == 0) return -1;
    if (mx == INFINITY) { /* the +inf tokens share the mass equally */
        int m = 0;
        for (int i = 0; i < n; i++)
            if (c[i].v == INFINITY) c[m++] = (struct cand){0.0f, c[i].id};
        n = m;
        mx = 0;
    }
    /* top-k on the logits: the order of the probabilities */
    if (s->top_k > 0 && s->top_k < n) n = radix_keep(sc, c, n, s->top_k, false);
    float inv_t = (float)fmin(1.0 / s->temperature, FLT_MAX); /* the max stays 0 * inv_t */
    double total = 0;
    for (int i = 0; i < n; i++) {
        c[i].v = expf((c[i].v - mx) * inv_t);
        total += c[i].v;
    }
    if (s->min_p > 0) { /* a prefix of top-p's order: applied first, same result */
        int m = 0;
        for (int i = 0; i < n; i++)
            if (c[i].v >= (float)s->min_p) c[m++] = c[i];
        n = m;
    }
    if (s->top_p < 1.0) n = radix_keep(sc, c, n, s->top_p * total, true);
    if (s->min_p > 0 || s->top_p < 1.0) {
        total = 0;
        for (int i = 0; i < n; i++)
            total += c[i].v;
    }
    double r = (double)(rtx_rng_next(&s->rng) >> 11) * 0x1.0p-53 * total, acc = 0;
    int last = -1;
    for (int i = 0; i < n; i++) {
        if (c[i].v <= 0) continue;
        acc += c[i].v;
        last = i;
        if (r < acc) return c[i].id;
    }
    return c[last].id; /* rounding left r at the total: the last token with mass */
}

/* The logprobs of the raw logits: the sampled token's and the n_top largest. */
static void raw_logprobs(const float *logits, int vocab, int32_t token, float *logprob,
                         struct rtx_gen_logprob *top, int n_top) {
    float mx = -INFINITY;
    int n_inf = 0, n = 0; /* top[0..n) sorted: the largest logit first, then the lower id */
    for (int32_t i = 0; i < vocab; i++) {
        float x = isnan(logits[i]) ? -INFINITY : logits[i];
        if (x > mx) mx = x;
        n_inf += x == INFINITY;
        if (n_top == 0 || (n == n_top && !(x > top[n - 1].logprob))) continue;
        int j = n < n_top ? n++ : n - 1;
        for (; j > 0 && x > top[j - 1].logprob; j--)
            top[j] = top[j - 1];
        top[j] = (struct rtx_gen_logprob){i, x};
    }
    double lse = mx; /* log of the sum of exp: -inf when nothing is finite */
    if (n_inf > 0) {
        lse = INFINITY;
    } else if (mx > -INFINITY) {
        double sum = 0;
        for (int i = 0; i < vocab; i++)
            if (logits[i] > -INFINITY) sum += expf(logits[i] - mx);
        lse = mx + log(sum);
    }
    /* +inf logits each get log(1 / n_inf); NaN counts as -inf */
#define LOGPROB(x)                                                                                \
    (n_inf > 0 ? ((x) == INFINITY ? -log((double)n_inf) : -INFINITY)                              \
               : ((x) > -INFINITY ? (x)-lse : -INFINITY))
    if (logprob) *logprob = (float)LOGPROB(logits[token]);
    for (int j = 0; j < n; j++)
        top[j].logprob = (float)LOGPROB(top[j].logprob);
    for (int j = n; j < n_top; j++)
        top[j] = (struct rtx_gen_logprob){-1, -INFINITY};
#undef LOGPROB
}

int32_t rtx__sampler_draw(struct rtx_sampler_seq *s, struct rtx_sampler_scratch *sc,
                          const float *logits, const int32_t *suppress, int n_sup, float *logprob,
                          struct rtx_gen_logprob *top, int n_top) {
    assert(sc->vocab >= s->vocab);
    int vocab = s->vocab;
    float *w = sc->w;
    int32_t token;
    if (s->temperature == 0 && s->mode == COUNTS_NONE && (!suppress || n_sup <= 0)) {
        token = argmax(logits, vocab); /* nothing to change: no copy (NaN fails every >) */
    } else {
        for (int i = 0; i < vocab; i++)
            w[i] = isnan(logits[i]) ? -INFINITY : logits[i];
        apply_penalties(s, w);
        for (int i = 0; suppress && i < n_sup; i++)
            if (suppress[i] >= 0 && suppress[i] < vocab) w[suppress[i]] = -INFINITY;
        token = s->temperature == 0 ? argmax(w, vocab) : sample(s, sc);
    }
    if (token < 0) token = fallback(vocab, suppress, n_sup);
    n_top = n_top < 0 || !top ? 0 : n_top > RTX_GEN_MAX_LOGPROBS ? RTX_GEN_MAX_LOGPROBS : n_top;
    if (logprob || n_top > 0) raw_logprobs(logits, vocab, token, logprob, top, n_top);
    return token;
}

/* ---- parameter check ---- */

int rtx__sampler_check(const struct rtx_gen_params *p, int vocab, struct rtx_err *err) {
#define RANGE(field, ok, range)                                                                   \
    if (!(ok))                                                                                    \
    return rtx_err_set(err, RTX_EINVAL, #field " must be " range ", got %g", (double)p->field)
    if (vocab < 1)
        return rtx_err_set(err, RTX_EINVAL, "vocabulary size must be at least 1, got %d", vocab);
    RANGE(max_tokens, p->max_tokens >= 0, "at least 0 (0: up to the context)");
    RANGE(min_tokens, p->min_tokens >= 0, "at least 0");
    if (p->max_tokens > 0 && p->min_tokens > p->max_tokens)
        return rtx_err_set(err, RTX_EINVAL, "min_tokens must be at most max_tokens (%d), got %d",
                           p->max_tokens, p->min_tokens);
    RANGE(temperature, p->temperature >= 0 && p->temperature <= 100, "in [0, 100]");
    RANGE(top_p, p->top_p > 0 && p->top_p <= 1, "in (0, 1]");
    if (!(p->top_k == 0 || p->top_k == -1 || (p->top_k >= 1 && p->top_k <= vocab)))
        return rtx_err_set(err, RTX_EINVAL, "top_k must be -1, 0 or in [1, %d], got %d", vocab,
                           p->top_k);
    RANGE(min_p, p->min_p >= 0 && p->min_p <= 1, "in [0, 1]");
    RANGE(repetition_penalty, p->repetition_penalty > 0 && p->repetition_penalty <= 10,
          "in (0, 10]");
    RANGE(presence_penalty, fabs(p->presence_penalty) <= 2, "in [-2, 2]");
    RANGE(frequency_penalty, fabs(p->frequency_penalty) <= 2, "in [-2, 2]");
    RANGE(n, p->n >= 1 && p->n <= RTX_GEN_MAX_N, "in [1, 16]");
    RANGE(logprobs, p->logprobs >= -1 && p->logprobs <= RTX_GEN_MAX_LOGPROBS, "in [-1, 20]");
    RANGE(n_stop, p->n_stop >= 0 && p->n_stop <= RTX_GEN_MAX_STOP, "in [0, 8]");
    for (int i = 0; i < p->n_stop; i++)
        if (!p->stop[i] || !p->stop[i][0])
            return rtx_err_set(err, RTX_EINVAL, "stop[%d] must be a non-empty string", i);
    RANGE(n_stop_ids, p->n_stop_ids >= 0 && (p->n_stop_ids == 0 || p->stop_ids),
          "at least 0, with stop_ids set");
    for (int i = 0; i < p->n_stop_ids; i++)
        if (p->stop_ids[i] < 0 || p->stop_ids[i] >= vocab)
            return rtx_err_set(err, RTX_EINVAL, "stop_ids[%d] must be in [0, %d), got %d", i,
                               vocab, (int)p->stop_ids[i]);
    return 0;
#undef RANGE
}

bool rtx__sampler_is_greedy(const struct rtx_gen_params *p) {
    return p->temperature == 0 && p->logprobs < 0 && p->repetition_penalty == 1 &&
           p->presence_penalty == 0 && p->frequency_penalty == 0;
}
