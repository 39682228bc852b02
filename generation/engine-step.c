/*
 * engine-step.c - running one step (generation/engine-impl.h): the step's input tensors, the
 * plan for its bucket of shapes, the run, and for each sequence that reached its last token
 * the draw, the stop conditions and the text its event carries.
 *
 * DESIGN
 * Plans bind shapes, so a step's tokens, sequences and block-table width are rounded up to
 * powers of two (padding tokens write no slot, padding sequences have no tokens) and the
 * engine keeps the plans of the buckets it met (least recently used dropped beyond
 * GEN_MAX_PLANS). On a backend that captures graphs, a plan of at most graph_max_tokens tokens
 * binds the KV pool and the weights by address (rtx_plan_bind_device_inputs), so that its
 * third and later runs replay one CUDA graph instead of launching some 15 kernels per layer
 * (decision 147). Larger plans run node by node: their kernels are long enough, and a
 * replaying plan keeps its arena and outputs allocated (up to ~200 MB at 512 tokens and 256
 * sequences, the f32 logits most of it), so at most GEN_MAX_BOUND_PLANS of them are kept.
 * Text: each choice decodes its tokens through a streaming decoder (never
 * half a UTF-8 character); with stop strings, the last (longest stop - 1) bytes stay held
 * back until they can no longer begin a stop string, and a stop string found ends the choice
 * with the text before it.
 */
#include "generation/engine-impl.h"

#include <inttypes.h>
#include <string.h>

#include "runtime/backend.h"

#define STEP_INPUTS 7

/* ------------------------------------------------------------------------------------------
 * Sequences
 * ---------------------------------------------------------------------------------------- */

int rtx__gen_seq_prepare(struct rtx_gen_engine *e, struct gen_seq *s, struct rtx_err *err) {
    struct gen_req *r = s->req;
    int max_new = r->params.max_tokens > 0 ? r->params.max_tokens : e->context - r->n_prompt;
    int cap = r->n_prompt + max_new;
    if (cap > e->context) cap = e->context;
    s->cap_tokens = cap + 1;
    s->cap_blocks = (s->cap_tokens + e->block_size - 1) / e->block_size + 1;
    s->tokens = rtx_malloc((size_t)s->cap_tokens * sizeof *s->tokens);
    s->blocks = rtx_malloc((size_t)s->cap_blocks * sizeof *s->blocks);
    s->hashes = rtx_malloc((size_t)s->cap_blocks * sizeof *s->hashes);
    uint64_t seed = r->params.has_seed ? r->params.seed + (uint64_t)s->choice
                                       : (uint64_t)rtx_mono_ns() ^ ((uint64_t)(uintptr_t)s << 16);
    struct rtx_gen_params sp = r->params;
    sp.max_tokens = max_new; /* resolved: the sampler sizes its token counts by it */
    s->sampler = rtx__sampler_seq_new(&sp, e->arch->vocab, seed, r->prompt, r->n_prompt);
    s->detok = rtx_tokenizer_stream_new(rtx_gen_model_tokenizer(e->model), r->params.skip_special);
    if (r->params.logprobs > 0)
        s->ev_top = rtx_malloc(sizeof *s->ev_top * RTX_GEN_MAX_LOGPROBS);
    if (!s->tokens || !s->blocks || !s->hashes || !s->sampler || !s->detok ||
        (r->params.logprobs > 0 && !s->ev_top))
        return rtx_err_set(err, RTX_ENOMEM, "out of memory preparing a sequence");
    memcpy(s->tokens, r->prompt, (size_t)r->n_prompt * sizeof *s->tokens);
    s->n_tokens = r->n_prompt;
    /* The decoder starts after the prompt's last tokens, so that the text of the first
     * generated one is what it adds to the prompt (SentencePiece decoders drop the leading
     * space of a stream's first token); what the prompt's tokens decode to is dropped. */
    for (int i = r->n_prompt > 4 ? r->n_prompt - 4 : 0; i < r->n_prompt; i++) {
        const char *text;
        size_t len;
        if (rtx_tokenizer_stream_feed(s->detok, r->prompt[i], &text, &len, err))
            return rtx_err_prefix(err, "prompt token %d", i);
    }
    return 0;
}

static int held_append(struct gen_seq *s, const char *text, size_t len) {
    if (s->n_held + len + 1 > s->cap_held) {
        size_t cap = s->cap_held ? s->cap_held : 64;
        while (cap < s->n_held + len + 1) cap *= 2;
        char *n = rtx_realloc(s->held, cap);
        if (!n) return RTX_ENOMEM;
        s->held = n;
        s->cap_held = cap;
    }
    memcpy(s->held + s->n_held, text, len);
    s->n_held += len;
    s->held[s->n_held] = 0;
    return 0;
}

/* Finds the first stop string in the held text; returns its offset or -1. */
static int64_t find_stop(const struct gen_req *r, const struct gen_seq *s) {
    int64_t best = -1;
    for (int i = 0; i < r->params.n_stop; i++) {
        const char *hit = s->held ? strstr(s->held, r->params.stop[i]) : NULL;
        if (hit && (best < 0 || hit - s->held < best)) best = hit - s->held;
    }
    return best;
}

static bool is_eos(const struct rtx_gen_engine *e, int32_t t) {
    for (int i = 0; i < e->arch->n_eos; i++)
        if (e->arch->eos_ids[i] == t) return true;
    return false;
}

static bool is_stop_id(const struct gen_req *r, int32_t t) {
    for (int i = 0; i < r->params.n_stop_ids; i++)
        if (r->params.stop_ids[i] == t) return true;
    return false;
}

/* Sends what may be sent of the held text (all of it when the choice finished). */
static void send_event(struct gen_seq *s, int n_tokens) {
    struct gen_req *r = s->req;
    size_t send = s->n_held;
    if (s->finish == RTX_GEN_FINISH_NONE && r->max_stop_len > 1) {
        size_t keep = (size_t)r->max_stop_len - 1;
        send = s->n_held > keep ? s->n_held - keep : 0;
        while (send > 0 && ((unsigned char)s->held[send] & 0xC0) == 0x80) send--; /* char start */
    }
    if (n_tokens == 0 && send == 0 && s->finish == RTX_GEN_FINISH_NONE) return;
    struct rtx_gen_event ev = {
        .index = s->choice,
        .n_tokens = n_tokens,
        .tokens = s->ev_tokens,
        .logprobs = r->params.logprobs >= 0 ? s->ev_logprobs : NULL,
        .n_top = r->params.logprobs > 0 ? r->params.logprobs : 0,
        .top = r->params.logprobs > 0 ? s->ev_top : NULL,
        .text = s->held ? s->held : "",
        .text_len = send,
        .finish = s->finish,
    };
    if (r->on_event) r->on_event(r->ctx, &ev);
    if (send > 0) memmove(s->held, s->held + send, s->n_held - send); /* held may be NULL */
    s->n_held -= send;
    if (s->held) s->held[s->n_held] = 0;
}

void rtx__gen_seq_emit(struct rtx_gen_engine *e, struct gen_seq *s, int64_t now) {
    struct gen_req *r = s->req;
    int32_t tok = s->tokens[s->n_tokens - 1];
    s->n_out++;
    r->usage.completion_tokens++;
    pthread_mutex_lock(&e->mu);
    e->stats.generation_tokens_total++;
    if (r->first_token_ns == 0) {
        r->first_token_ns = now;
        r->usage.ttft_ns = now - r->arrival_ns;
        rtx__gen_hist_add(&e->stats.ttft, (double)r->usage.ttft_ns / 1e9);
    }
    if (s->last_token_ns) rtx__gen_hist_add(&e->stats.itl, (double)(now - s->last_token_ns) / 1e9);
    pthread_mutex_unlock(&e->mu);
    s->last_token_ns = now;

    bool eos = !r->params.ignore_eos && is_eos(e, tok);
    bool stop_id = is_stop_id(r, tok);
    int rc = 0;
    if (eos || stop_id) {
        s->finish = RTX_GEN_FINISH_STOP;
    } else {
        const char *text;
        size_t len;
        struct rtx_err err;
        rc = rtx_tokenizer_stream_feed(s->detok, tok, &text, &len, &err);
        if (rc == 0 && len) rc = held_append(s, text, len);
        int64_t at = r->params.n_stop > 0 ? find_stop(r, s) : -1;
        if (at >= 0) {
            s->n_held = (size_t)at;
            s->held[at] = 0;
            s->finish = RTX_GEN_FINISH_STOP;
        }
    }
    int max_new = r->params.max_tokens > 0 ? r->params.max_tokens : e->context;
    if (s->finish == RTX_GEN_FINISH_NONE && (s->n_out >= max_new || s->n_tokens >= e->context))
        s->finish = RTX_GEN_FINISH_LENGTH;
    if (s->finish != RTX_GEN_FINISH_NONE && !(s->finish == RTX_GEN_FINISH_STOP && eos)) {
        const char *text;
        size_t len;
        if (rtx_tokenizer_stream_flush(s->detok, &text, &len, NULL) == 0 && len &&
            s->finish == RTX_GEN_FINISH_LENGTH)
            rc = rc ? rc : held_append(s, text, len);
    }
    if (rc) {
        struct rtx_err err;
        rtx_err_set(&err, rc, "decoding token %" PRId32 ": %s", tok, rtx_strerror(rc));
        rtx__gen_seq_end(e, s, rc, &err);
        return;
    }
    s->ev_tokens[0] = tok;
    send_event(s, 1);
    if (s->finish != RTX_GEN_FINISH_NONE) {
        if (s->n_out > 1) {
            pthread_mutex_lock(&e->mu);
            rtx__gen_hist_add(&e->stats.tpot, (double)(now - r->first_token_ns) / 1e9 /
                                                  (double)(s->n_out - 1));
            pthread_mutex_unlock(&e->mu);
        }
        rtx__gen_seq_end(e, s, 0, NULL);
    }
}

/* ------------------------------------------------------------------------------------------
 * Plans
 * ---------------------------------------------------------------------------------------- */

int rtx__gen_bucket(int n) {
    int p = 1;
    while (p < n) p <<= 1;
    return p;
}

void rtx__gen_plans_free(struct rtx_gen_engine *e) {
    for (int i = 0; i < e->n_plans; i++) rtx_plan_free(e->plans[i].plan);
    e->n_plans = 0;
}

/* The plan of a bucket; *fresh: made now. */
static struct rtx_plan *plan_for(struct rtx_gen_engine *e, int t, int s, int b,
                                 struct rtx_tensor *const *in, int n_in, bool *fresh,
                                 struct rtx_err *err) {
    *fresh = false;
    for (int i = 0; i < e->n_plans; i++) {
        struct gen_plan *p = &e->plans[i];
        if (p->t == t && p->s == s && p->b == b) {
            p->used = e->steps;
            return p->plan;
        }
    }
    *fresh = true;
    bool bind = e->replays && t <= e->graph_max_tokens;
    int n_bound = 0, lru = -1;
    for (int i = 0; bind && i < e->n_plans; i++) {
        if (!e->plans[i].bound) continue;
        n_bound++;
        if (lru < 0 || e->plans[i].used < e->plans[lru].used) lru = i;
    }
    if (n_bound >= GEN_MAX_BOUND_PLANS) { /* its memory goes back before the new one's */
        rtx_plan_free(e->plans[lru].plan);
        e->plans[lru] = e->plans[--e->n_plans];
    }
    struct rtx_plan *plan;
    if (rtx_plan_new(e->graph, (const struct rtx_tensor *const *)in, n_in, NULL, &plan, err))
        return NULL;
    if (bind && rtx_plan_bind_device_inputs(plan, STEP_INPUTS, n_in - STEP_INPUTS, err)) {
        rtx_plan_free(plan);
        return NULL;
    }
    int slot = e->n_plans;
    if (slot == GEN_MAX_PLANS) {
        slot = 0;
        for (int i = 1; i < e->n_plans; i++)
            if (e->plans[i].used < e->plans[slot].used) slot = i;
        rtx_plan_free(e->plans[slot].plan);
    } else {
        e->n_plans++;
    }
    e->plans[slot] =
        (struct gen_plan){.t = t, .s = s, .b = b, .plan = plan, .used = e->steps, .bound = bind};
    return plan;
}

/* ------------------------------------------------------------------------------------------
 * The step
 * ---------------------------------------------------------------------------------------- */

static void unref_all(struct rtx_tensor **t, int n) {
    for (int i = 0; i < n; i++) rtx_tensor_unref(t[i]);
}

/* Fills the step's host tensors (arch-impl.h's input order 0..6). */
static int step_tensors(struct rtx_gen_engine *e, int tb, int sb, int bb,
                        struct rtx_tensor **host, struct rtx_err *err) {
    int64_t d_t[1] = {tb}, d_bt[2] = {sb, bb}, d_qs[1] = {sb + 1}, d_s[1] = {sb};
    int rc = 0;
    rc = rc ? rc : rtx_tensor_new(RTX_I32, 1, d_t, &host[0], err);
    rc = rc ? rc : rtx_tensor_new(RTX_I32, 1, d_t, &host[1], err);
    rc = rc ? rc : rtx_tensor_new(RTX_I32, 1, d_t, &host[2], err);
    rc = rc ? rc : rtx_tensor_new(RTX_I32, 2, d_bt, &host[3], err);
    rc = rc ? rc : rtx_tensor_new(RTX_I32, 1, d_qs, &host[4], err);
    rc = rc ? rc : rtx_tensor_new(RTX_I32, 1, d_s, &host[5], err);
    rc = rc ? rc : rtx_tensor_new(RTX_I32, 1, d_s, &host[6], err);
    if (rc) return rc;
    int32_t *ids = rtx_tensor_data(host[0]), *pos = rtx_tensor_data(host[1]);
    int32_t *slot = rtx_tensor_data(host[2]), *bt = rtx_tensor_data(host[3]);
    int32_t *qs = rtx_tensor_data(host[4]), *cl = rtx_tensor_data(host[5]);
    int32_t *li = rtx_tensor_data(host[6]);
    for (int i = 0; i < tb; i++) slot[i] = -1;
    for (int i = 0; i < sb * bb; i++) bt[i] = -1;
    int row = 0, bs = e->block_size;
    for (int i = 0; i < e->n_step; i++) {
        struct gen_seq *s = e->step_seqs[i];
        qs[i] = row;
        for (int j = 0; j < s->step_tokens; j++, row++) {
            int p = s->computed + j;
            ids[row] = s->tokens[p];
            pos[row] = p;
            slot[row] = s->blocks[p / bs] * bs + p % bs;
        }
        memcpy(bt + (size_t)i * bb, s->blocks, (size_t)s->n_blocks * sizeof *bt);
        cl[i] = s->computed + s->step_tokens;
        li[i] = row - 1;
    }
    for (int i = e->n_step; i <= sb; i++) qs[i] = row;
    return 0;
}

int rtx__gen_step_run(struct rtx_gen_engine *e, int n_tokens, struct rtx_err *err) {
    int64_t t0 = rtx_mono_ns();
    int max_b = 1;
    for (int i = 0; i < e->n_step; i++)
        if (e->step_seqs[i]->n_blocks > max_b) max_b = e->step_seqs[i]->n_blocks;
    int tb = rtx__gen_bucket(n_tokens), sb = rtx__gen_bucket(e->n_step);
    int bb = rtx__gen_bucket(max_b);
    struct rtx__step_shape shape = {.tokens = tb};
    for (int i = 0; i < e->n_step; i++)
        shape.keys += e->step_seqs[i]->computed + e->step_seqs[i]->step_tokens;
    int n_layers = e->arch->n_layers;
    int n_in = STEP_INPUTS + 2 * n_layers + e->weights.n;
    struct rtx_tensor *host[STEP_INPUTS] = {0}, *dev[STEP_INPUTS] = {0};
    struct rtx_tensor *out_dev[2] = {0}, *logits = NULL, *greedy = NULL;
    struct rtx_tensor **in = rtx_malloc((size_t)n_in * sizeof *in);
    int rc = in ? step_tensors(e, tb, sb, bb, host, err)
                : rtx_err_set(err, RTX_ENOMEM, "out of memory");
    for (int i = 0; rc == 0 && i < STEP_INPUTS; i++) rc = rtx_backend_upload(e->be, host[i], &dev[i], err);
    struct rtx_plan *plan = NULL;
    struct rtx_exec_stats st = {0};
    bool fresh = false;
    if (rc == 0) {
        memcpy(in, dev, sizeof dev);
        memcpy(in + STEP_INPUTS, e->kv, (size_t)(2 * n_layers) * sizeof *in);
        memcpy(in + STEP_INPUTS + 2 * n_layers, e->dev_weights, (size_t)e->weights.n * sizeof *in);
        plan = plan_for(e, tb, sb, bb, in, n_in, &fresh, err);
        if (!plan) rc = err->code ? err->code : RTX_EINTERNAL;
    }
    if (rc == 0) rc = rtx_plan_execute_device(plan, e->be, in, n_in, out_dev, 2, NULL, &st, err);
    /* a step whose sampling sequences all draw greedily needs only the argmax (8 bytes per
     * sequence instead of a row of the vocabulary) */
    bool all_greedy = true;
    for (int i = 0; i < e->n_step && all_greedy; i++) {
        const struct gen_seq *s = e->step_seqs[i];
        if (s->computed + s->step_tokens < s->n_tokens) continue; /* samples nothing */
        all_greedy = rtx__sampler_is_greedy(&s->req->params) && s->n_out >= s->req->params.min_tokens;
    }
    if (rc == 0) rc = rtx_backend_download(e->be, out_dev[all_greedy ? 1 : 0],
                                           all_greedy ? &greedy : &logits, err);
    unref_all(host, STEP_INPUTS);
    unref_all(dev, STEP_INPUTS);
    unref_all(out_dev, 2);
    rtx_free(in);
    if (rc) {
        rtx_tensor_unref(logits);
        rtx_tensor_unref(greedy);
        return rc;
    }
    e->steps++;
    int64_t now = rtx_mono_ns();

    const float *lg = logits ? rtx_tensor_data(logits) : NULL;
    const int64_t *gr = greedy ? rtx_tensor_data(greedy) : NULL;
    int vocab = e->arch->vocab;
    int32_t suppress[RTX_GEN_MAX_EOS + 64];
    for (int i = 0; i < e->n_step; i++) {
        struct gen_seq *s = e->step_seqs[i];
        if (s->state != SEQ_RUNNING) continue;
        struct gen_req *r = s->req;
        int k = s->step_tokens;
        s->step_tokens = 0;
        int prompt_part = s->computed < r->n_prompt ? (r->n_prompt < s->computed + k ? r->n_prompt : s->computed + k) - s->computed : 0;
        if (prompt_part > 0 && s->preemptions == 0) {
            pthread_mutex_lock(&e->mu);
            e->stats.prompt_tokens_total += (uint64_t)prompt_part;
            pthread_mutex_unlock(&e->mu);
        }
        s->computed += k;
        rtx__gen_register_blocks(e, s);
        if (s->choice == 0 && s->computed >= r->n_prompt && r->n_seqs > 1) rtx__gen_forks(e, s);
        if (s->computed < s->n_tokens) continue;
        int n_sup = 0;
        if (s->n_out < r->params.min_tokens) {
            for (int j = 0; j < e->arch->n_eos && !r->params.ignore_eos; j++) suppress[n_sup++] = e->arch->eos_ids[j];
            for (int j = 0; j < r->params.n_stop_ids && n_sup < (int)(sizeof suppress / sizeof *suppress); j++)
                suppress[n_sup++] = r->params.stop_ids[j];
        }
        int32_t tok = gr ? (int32_t)gr[s->step_row]
                         : rtx__sampler_draw(s->sampler, e->scratch,
                                             lg + (size_t)s->step_row * vocab,
                                             n_sup ? suppress : NULL, n_sup, &s->ev_logprobs[0],
                                             s->ev_top,
                                             r->params.logprobs > 0 ? r->params.logprobs : 0);
        rtx__sampler_seq_accept(s->sampler, tok);
        s->tokens[s->n_tokens++] = tok;
        rtx__gen_seq_emit(e, s, now);
    }
    for (int i = 0; i < e->n_step; i++) e->step_seqs[i]->step_tokens = 0;
    rtx_tensor_unref(logits);
    rtx_tensor_unref(greedy);
    /* the step-time model learns from steps that ran a plan as it usually runs (not its first
     * run, nor the one that captured its graph), counting the tokens' events: the time until
     * the next step can start */
    if (!fresh && (st.mode == RTX_EXEC_PLAIN || st.mode == RTX_EXEC_REPLAYED)) {
        shape.eager = st.mode == RTX_EXEC_PLAIN;
        rtx__step_cost_add(&e->cost, &shape, (double)(rtx_mono_ns() - t0));
        if (rtx__step_cost_ready(&e->cost)) {
            e->base_ns = e->cost.cost[0] + e->cost.cost[1];
            e->per_token_ns = e->cost.cost[2];
        }
    }
    return 0;
}
