/*
 * engine-sched.c - the iteration scheduler (generation/engine-impl.h): which sequences compute
 * how many tokens in the next step, in which lane order, with which blocks; preemption;
 * cancellation and deadlines; the end of sequences and requests.
 *
 * DESIGN
 * Each step has a token budget (max_batch_tokens) and room for max_seqs sequences. Lanes with
 * work share the budget by weight first (a lane's quota is budget * weight / the active lanes'
 * weights, so a lane flooded with work cannot starve another), then what is left goes to the
 * lanes in priority order (the first lane is the highest). Inside a lane, running sequences
 * come first in admission order (so decoding ones get their next token every step), then
 * waiting ones in arrival order (preempted ones first), each taking a chunk of its prompt up
 * to what is left (chunked prefill). A sequence that needs blocks when none are free preempts
 * the youngest running sequence of a lower lane (or a younger one of its own lane); with no
 * such victim it computes only what its blocks hold, or waits. Seats are preempted the same
 * way: a waiting sequence that finds max_seqs sequences running takes the seat of the
 * youngest running sequence of a lower lane (never of its own lane), so a batch flood that
 * fills every seat does not hold a realtime arrival until a batch sequence ends.
 *
 * Time limit. A step cannot be interrupted: a request arriving mid-step waits for its end,
 * and a decoding sequence waits one step per token, so long steps stretch the first token
 * and the inter-token latency of every lane in them. While a lane with work below the
 * highest lane that had work in the last second (the tight lane) exists, and the step-time
 * model (step-cost-impl.h) is ready, the tight lane and those above it are scheduled first
 * and in full (token budget only), and the lanes below may then add tokens only while the
 * modelled step stays within 1/STEP_TARGET_SHARE of the tight lane's target, or within a
 * quarter of that beyond what the tight lanes took alone, whichever is more: a batch flood
 * then neither lengthens a realtime stream's steps much nor stops (a quarter of the limit is
 * always the lower lanes', and the first of their sequences in a step gets a token even when
 * that alone passes the limit, as a decode over a very long context does). A lower lane's
 * waiting sequence takes a seat from a still lower lane only when the limit leaves it a
 * token. The model counts decode tokens by the keys they read, which a token budget does
 * not: 256 flooded decodes cost as much as ~1,000 prompt tokens.
 */
#include "generation/engine-impl.h"

#include <string.h>

#define STEP_TARGET_SHARE 8 /* a step of lower lanes' work: 1/8 of the tight lane's target */

/* ------------------------------------------------------------------------------------------
 * Lists
 * ---------------------------------------------------------------------------------------- */

static int64_t seq_left(const struct gen_seq *s) { return s->n_tokens - s->computed; }

static void wait_push(struct rtx_gen_engine *e, struct gen_seq *s, bool head) {
    struct gen_lane *l = &e->lanes[s->req->lane];
    s->state = SEQ_WAITING;
    if (head) {
        s->next = l->waiting;
        l->waiting = s;
        if (!l->waiting_tail) l->waiting_tail = s;
    } else {
        s->next = NULL;
        if (l->waiting_tail) l->waiting_tail->next = s;
        else l->waiting = s;
        l->waiting_tail = s;
    }
    l->n_waiting++;
    l->queued_tokens += seq_left(s);
}

static void wait_remove(struct rtx_gen_engine *e, struct gen_seq *s) {
    struct gen_lane *l = &e->lanes[s->req->lane];
    struct gen_seq *prev = NULL;
    for (struct gen_seq *it = l->waiting; it; prev = it, it = it->next) {
        if (it != s) continue;
        if (prev) prev->next = s->next;
        else l->waiting = s->next;
        if (l->waiting_tail == s) l->waiting_tail = prev;
        s->next = NULL;
        l->n_waiting--;
        l->queued_tokens -= seq_left(s);
        return;
    }
}

static int run_push(struct rtx_gen_engine *e, struct gen_seq *s) {
    if (e->n_run == e->cap_run) {
        int cap = e->cap_run ? e->cap_run * 2 : 64;
        struct gen_seq **n = rtx_realloc(e->run, (size_t)cap * sizeof *n);
        if (!n) return RTX_ENOMEM;
        e->run = n;
        e->cap_run = cap;
    }
    e->run[e->n_run++] = s;
    s->state = SEQ_RUNNING;
    e->lanes[s->req->lane].n_running++;
    return 0;
}

static void run_remove(struct rtx_gen_engine *e, struct gen_seq *s) {
    for (int i = 0; i < e->n_run; i++) {
        if (e->run[i] != s) continue;
        memmove(&e->run[i], &e->run[i + 1], (size_t)(e->n_run - i - 1) * sizeof *e->run);
        e->n_run--;
        e->lanes[s->req->lane].n_running--;
        return;
    }
}

static void blocks_drop(struct rtx_gen_engine *e, struct gen_seq *s) {
    for (int i = 0; i < s->n_blocks; i++) rtx__kv_blocks_unref(e->blocks, s->blocks[i]);
    s->n_blocks = 0;
    s->n_hashed = 0;
    s->computed = 0;
}

/* ------------------------------------------------------------------------------------------
 * Ends
 * ---------------------------------------------------------------------------------------- */

static void req_done(struct rtx_gen_engine *e, struct gen_req *r) {
    r->done_called = true;
    int64_t now = rtx_mono_ns();
    pthread_mutex_lock(&e->mu);
    if (r->status == 0) {
        e->stats.requests_finished++;
        rtx__gen_hist_add(&e->stats.e2e, (double)(now - r->arrival_ns) / 1e9);
    } else if (r->status == RTX_ECANCELED) {
        e->stats.requests_canceled++;
    } else {
        e->stats.requests_failed++;
    }
    pthread_mutex_unlock(&e->mu);
    r->on_done(r->ctx, r->status, r->status ? &r->err : NULL, &r->usage);
}

void rtx__gen_seq_end(struct rtx_gen_engine *e, struct gen_seq *s, int status,
                      const struct rtx_err *err) {
    if (s->state == SEQ_DONE) return;
    struct gen_req *r = s->req;
    if (s->state == SEQ_RUNNING) {
        run_remove(e, s);
        blocks_drop(e, s);
    } else if (s->state == SEQ_WAITING) {
        wait_remove(e, s);
    }
    s->state = SEQ_DONE;
    s->step_tokens = 0;
    if (status && !r->status) {
        r->status = status;
        if (err) r->err = *err;
        else rtx_err_set(&r->err, status, "%s", rtx_strerror(status));
    }
    if (--r->n_live == 0 && !r->done_called) req_done(e, r);
    /* a failure ends every choice of the request */
    if (status)
        for (int i = 0; i < r->n_seqs; i++)
            if (r->seqs[i].state != SEQ_DONE) rtx__gen_seq_end(e, &r->seqs[i], status, err);
}

void rtx__gen_fail_all(struct rtx_gen_engine *e, int status, const struct rtx_err *err) {
    for (int i = 0; i < e->n_reqs; i++) {
        struct gen_req *r = e->reqs[i];
        for (int j = 0; j < r->n_seqs; j++) rtx__gen_seq_end(e, &r->seqs[j], status, err);
    }
    for (int i = 0; i < e->n_reqs; i++) rtx__gen_req_unref(e->reqs[i]);
    e->n_reqs = 0;
}

/* ------------------------------------------------------------------------------------------
 * Inbox, cancellation, deadlines
 * ---------------------------------------------------------------------------------------- */

void rtx__gen_take_inbox(struct rtx_gen_engine *e) {
    pthread_mutex_lock(&e->mu);
    struct gen_req *r = e->inbox;
    e->inbox = e->inbox_tail = NULL;
    for (int i = 0; i < e->n_lanes; i++) e->inbox_tokens[i] = 0, e->inbox_count[i] = 0;
    pthread_mutex_unlock(&e->mu);
    while (r) {
        struct gen_req *next = r->inbox_next;
        r->inbox_next = NULL;
        struct rtx_err err = {0};
        int rc = 0;
        if (e->n_reqs == e->cap_reqs) {
            int cap = e->cap_reqs ? e->cap_reqs * 2 : 64;
            struct gen_req **n = rtx_realloc(e->reqs, (size_t)cap * sizeof *n);
            if (n) e->reqs = n, e->cap_reqs = cap;
            else rc = rtx_err_set(&err, RTX_ENOMEM, "out of memory queuing a request");
        }
        if (rc == 0) {
            e->reqs[e->n_reqs++] = r;
            for (int i = 0; i < r->n_seqs && rc == 0; i++)
                rc = rtx__gen_seq_prepare(e, &r->seqs[i], &err);
        }
        if (rc) {
            if (e->n_reqs > 0 && e->reqs[e->n_reqs - 1] == r) {
                for (int i = 0; i < r->n_seqs; i++) rtx__gen_seq_end(e, &r->seqs[i], rc, &err);
            } else { /* not tracked: answer and drop it here */
                r->status = rc;
                r->err = err;
                r->done_called = true;
                r->on_done(r->ctx, rc, &err, &r->usage);
                rtx__gen_req_unref(r);
            }
        } else {
            wait_push(e, &r->seqs[0], false);
        }
        r = next;
    }
}

bool rtx__gen_sweep(struct rtx_gen_engine *e, int64_t now) {
    struct rtx_err err;
    int kept = 0;
    for (int i = 0; i < e->n_reqs; i++) {
        struct gen_req *r = e->reqs[i];
        if (!r->done_called && atomic_load(&r->canceled)) {
            rtx_err_set(&err, RTX_ECANCELED, "the request was canceled");
            for (int j = 0; j < r->n_seqs; j++) rtx__gen_seq_end(e, &r->seqs[j], RTX_ECANCELED, &err);
        } else if (!r->done_called && r->first_token_ns == 0 && now > r->deadline_ns &&
                   e->lanes[r->lane].on_timeout == RTX_SCHED_TIMEOUT_REJECT &&
                   r->seqs[0].state == SEQ_WAITING && r->seqs[0].n_out == 0) {
            rtx_err_set(&err, RTX_EEXPIRED,
                        "the request's deadline passed before it was scheduled (lane '%s')",
                        e->lanes[r->lane].name);
            for (int j = 0; j < r->n_seqs; j++) rtx__gen_seq_end(e, &r->seqs[j], RTX_EEXPIRED, &err);
        }
        if (r->done_called) rtx__gen_req_unref(r);
        else e->reqs[kept++] = r;
    }
    e->n_reqs = kept;
    return kept > 0;
}

/* ------------------------------------------------------------------------------------------
 * Blocks and preemption
 * ---------------------------------------------------------------------------------------- */

static void preempt(struct rtx_gen_engine *e, struct gen_seq *v) {
    run_remove(e, v);
    blocks_drop(e, v);
    v->preemptions++;
    e->lanes[v->req->lane].preempted_total++;
    wait_push(e, v, true);
}

/* The youngest running sequence not in this step that s may preempt: a lower lane's, or (when
 * own_lane) a younger one of its own lane. */
static struct gen_seq *victim_for(struct rtx_gen_engine *e, const struct gen_seq *s,
                                  bool own_lane) {
    for (int lane = e->n_lanes - 1; lane >= s->req->lane + !own_lane; lane--)
        for (int i = e->n_run - 1; i >= 0; i--) {
            struct gen_seq *v = e->run[i];
            if (v == s || v->req->lane != lane || v->step_tokens > 0) continue;
            if (lane == s->req->lane && v->req->arrival_ns <= s->req->arrival_ns) continue;
            return v;
        }
    return NULL;
}

/* Tokens s can compute now, at most k: allocates the blocks they need, preempting when free
 * blocks run short; fewer when some cannot be had. */
static int grow(struct rtx_gen_engine *e, struct gen_seq *s, int k) {
    int bs = e->block_size;
    int need = (s->computed + k + bs - 1) / bs - s->n_blocks;
    while (need > rtx__kv_blocks_available(e->blocks)) {
        struct gen_seq *v = victim_for(e, s, true);
        if (!v) break;
        preempt(e, v);
    }
    int avail = rtx__kv_blocks_available(e->blocks);
    if (need > avail) {
        k = (s->n_blocks + avail) * bs - s->computed;
        need = avail;
    }
    if (k <= 0) return 0;
    for (int i = 0; i < need; i++) {
        int32_t b;
        if (rtx__kv_blocks_alloc(e->blocks, &b) != 0) return 0; /* cannot: counted above */
        s->blocks[s->n_blocks++] = b;
    }
    return k;
}

void rtx__gen_register_blocks(struct rtx_gen_engine *e, struct gen_seq *s) {
    int bs = e->block_size;
    int full = s->computed / bs;
    while (s->n_hashed < full) {
        int i = s->n_hashed;
        rtx__kv_blocks_hash(i > 0 ? s->hashes[i - 1] : NULL, s->tokens + (size_t)i * bs, bs,
                            s->hashes[i]);
        rtx__kv_blocks_register(e->blocks, s->blocks[i], s->hashes[i]);
        s->n_hashed++;
    }
}

/* ------------------------------------------------------------------------------------------
 * The step's schedule
 * ---------------------------------------------------------------------------------------- */

struct plan_state {
    int budget;       /* tokens left in the step */
    int64_t tokens, keys; /* the step so far (struct rtx__step_shape's terms) */
    int limited;      /* lanes from this one on are held to limit_ns */
    double limit_ns;  /* the step's modelled time at most (0: no limit) */
    int64_t lower;    /* tokens the held lanes have in the step */
};

static void step_add(struct rtx_gen_engine *e, struct gen_seq *s, int k, struct plan_state *ps) {
    s->step_tokens = k;
    s->step_row = e->n_step;
    e->step_seqs[e->n_step++] = s;
    ps->budget -= k;
    ps->tokens += k;
    ps->keys += s->computed + k;
    if (s->req->lane >= ps->limited) ps->lower += k;
}

/* The model's time of the step with `tokens` more rows and `keys` more keys. */
static double step_estimate(const struct rtx_gen_engine *e, const struct plan_state *ps,
                            int64_t tokens, int64_t keys) {
    int64_t t = rtx__gen_bucket((int)(ps->tokens + tokens > 0 ? ps->tokens + tokens : 1));
    struct rtx__step_shape sh = {.tokens = t, .keys = ps->keys + keys,
                                 .eager = !e->replays || t > e->graph_max_tokens};
    return rtx__step_cost_estimate(&e->cost, &sh);
}

/* The most of k tokens of s that a limited lane may add to the step (DESIGN: time limit); the
 * first of the held lanes' sequences in a step gets at least one token whatever it costs, so
 * that a long context below the tight lane still moves. */
static int within_limit(const struct rtx_gen_engine *e, const struct plan_state *ps, int lane,
                        const struct gen_seq *s, int k) {
    if (ps->limit_ns <= 0 || lane < ps->limited || k <= 0) return k;
    int lo = 0, hi = k; /* the estimate grows with k: the largest k that fits */
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (step_estimate(e, ps, mid, s->computed + mid) <= ps->limit_ns) lo = mid;
        else hi = mid - 1;
    }
    return lo == 0 && ps->lower == 0 ? 1 : lo;
}

/* Running sequences of a lane, up to `quota` tokens; returns the tokens taken. */
static int take_running(struct rtx_gen_engine *e, int lane, int quota, struct plan_state *ps) {
    int taken = 0;
    /* decoding sequences first, then prompt chunks, each in admission order */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < e->n_run && quota - taken > 0 && ps->budget > 0; i++) {
            struct gen_seq *s = e->run[i];
            if (s->req->lane != lane || s->step_tokens > 0 || e->n_step >= e->max_seqs) continue;
            int64_t left = seq_left(s);
            if ((pass == 0) != (left == 1)) continue;
            int k = (int)(left < quota - taken ? left : quota - taken);
            if (k > ps->budget) k = ps->budget;
            k = within_limit(e, ps, lane, s, k);
            k = grow(e, s, k);
            if (k <= 0) continue;
            step_add(e, s, k, ps);
            taken += k;
        }
    return taken;
}

/* Admits waiting sequences of a lane, up to `quota` tokens. */
static int take_waiting(struct rtx_gen_engine *e, int lane, int quota, struct plan_state *ps) {
    struct gen_lane *l = &e->lanes[lane];
    int taken = 0;
    while (l->waiting && quota - taken > 0 && ps->budget > 0 && e->n_step < e->max_seqs) {
        struct gen_seq *s = l->waiting;
        if (e->n_run >= e->max_seqs) { /* every seat taken: a lower lane's sequence gives its own */
            if (within_limit(e, ps, lane, s, 1) <= 0) break; /* not for a token it cannot have */
            struct gen_seq *v = victim_for(e, s, false);
            if (!v) break;
            preempt(e, v);
        }
        struct gen_req *r = s->req;
        int cap = (int)((s->n_tokens + e->block_size - 1) / e->block_size);
        int m = rtx__kv_blocks_match(e->blocks, s->tokens, s->n_tokens, cap, s->blocks, s->hashes);
        wait_remove(e, s);
        s->n_blocks = s->n_hashed = m;
        s->computed = m * e->block_size;
        int64_t left = seq_left(s);
        int k = (int)(left < quota - taken ? left : quota - taken);
        if (k > ps->budget) k = ps->budget;
        k = within_limit(e, ps, lane, s, k);
        k = grow(e, s, k);
        if (k <= 0) { /* no room (blocks or time): back to the head of the queue, nothing held */
            blocks_drop(e, s);
            wait_push(e, s, true);
            break;
        }
        if (s->choice == 0 && s->preemptions == 0 && r->first_step_ns == 0) {
            r->usage.cached_tokens = s->computed < r->n_prompt ? s->computed : r->n_prompt;
            r->first_step_ns = rtx_mono_ns();
            r->usage.queue_ns = r->first_step_ns - r->arrival_ns;
        }
        if (run_push(e, s) != 0) {
            blocks_drop(e, s);
            wait_push(e, s, true);
            break;
        }
        step_add(e, s, k, ps);
        taken += k;
    }
    return taken;
}

/* The highest lane that has work or had some in the last second; -1: none. */
static int tight_lane(struct rtx_gen_engine *e, const bool *active, int64_t now) {
    int tight = -1;
    for (int i = 0; i < e->n_lanes; i++) {
        struct gen_lane *l = &e->lanes[i];
        if (active[i]) l->last_busy_ns = now;
        if (tight < 0 && l->last_busy_ns != 0 && now - l->last_busy_ns <= INT64_C(1000000000))
            tight = i;
    }
    return tight;
}

int rtx__gen_schedule(struct rtx_gen_engine *e, int64_t now) {
    e->n_step = 0;
    struct plan_state ps = {.budget = e->max_batch_tokens, .limited = e->n_lanes};
    bool active[RTX_SCHED_MAX_LANES] = {0};
    for (int i = 0; i < e->n_run; i++) active[e->run[i]->req->lane] = true;
    for (int i = 0; i < e->n_lanes; i++)
        if (e->lanes[i].waiting) active[i] = true;
    int first = 0, tight = tight_lane(e, active, now);
    bool below = false;
    for (int i = tight + 1; tight >= 0 && i < e->n_lanes; i++) below = below || active[i];
    if (below && rtx__step_cost_ready(&e->cost)) {
        /* DESIGN: time limit. The tight lane and those above it first, in full; then the
         * lanes below within the limit. */
        for (int i = 0; i <= tight && ps.budget > 0; i++) {
            if (!active[i]) continue;
            take_running(e, i, ps.budget, &ps);
            take_waiting(e, i, ps.budget, &ps);
        }
        double cap = (double)e->lanes[tight].target_ns / STEP_TARGET_SHARE;
        double floor = step_estimate(e, &ps, 0, 0) + cap / 4;
        ps.limit_ns = cap > floor ? cap : floor;
        ps.limited = first = tight + 1;
    }
    int64_t wsum = 0;
    for (int i = first; i < e->n_lanes; i++)
        if (active[i]) wsum += e->lanes[i].weight;
    int budget = ps.budget;
    /* 1: each active lane up to its weighted quota; 2: the rest in priority order */
    for (int pass = 0; pass < 2 && wsum > 0; pass++)
        for (int i = first; i < e->n_lanes && ps.budget > 0; i++) {
            if (!active[i]) continue;
            int quota = pass == 0 ? (int)((int64_t)budget * e->lanes[i].weight / wsum) : ps.budget;
            if (quota < 1) quota = 1;
            int got = take_running(e, i, quota, &ps);
            take_waiting(e, i, quota - got, &ps);
        }
    return (int)ps.tokens;
}

void rtx__gen_publish(struct rtx_gen_engine *e) {
    struct rtx_kv_blocks_stats ks;
    rtx__kv_blocks_stats(e->blocks, &ks);
    pthread_mutex_lock(&e->mu);
    for (int i = 0; i < e->n_lanes; i++) {
        struct gen_lane *l = &e->lanes[i];
        e->stats.lanes[i].running = l->n_running;
        e->stats.lanes[i].waiting = l->n_waiting;
        e->stats.lanes[i].preempted_total = l->preempted_total;
        e->lane_waiting[i] = l->n_waiting;
        e->lane_running[i] = l->n_running;
        e->lane_queued_tokens[i] = l->queued_tokens;
    }
    e->stats.kv_blocks_used = ks.used;
    e->stats.kv_blocks_cached = ks.cached;
    e->stats.prefix_queries_blocks = ks.prefix_queries;
    e->stats.prefix_hit_blocks = ks.prefix_hits;
    e->stats.kv_evictions = ks.evictions;
    e->stats.steps_total = e->steps;
    e->admit_per_token_ns = e->per_token_ns;
    e->admit_base_ns = e->base_ns;
    pthread_mutex_unlock(&e->mu);
}

void rtx__gen_forks(struct rtx_gen_engine *e, struct gen_seq *parent) {
    struct gen_req *r = parent->req;
    int bs = e->block_size;
    int share = (r->n_prompt - 1) / bs;
    if (share > parent->computed / bs) share = parent->computed / bs;
    for (int i = 1; i < r->n_seqs; i++) {
        struct gen_seq *c = &r->seqs[i];
        if (c->state != SEQ_FORK_WAIT) continue;
        for (int b = 0; b < share; b++) {
            rtx__kv_blocks_ref(e->blocks, parent->blocks[b]);
            c->blocks[b] = parent->blocks[b];
            if (b < parent->n_hashed) memcpy(c->hashes[b], parent->hashes[b], RTX_KV_HASH_BYTES);
        }
        c->n_blocks = share;
        c->n_hashed = share < parent->n_hashed ? share : parent->n_hashed;
        c->computed = share * bs;
        if (run_push(e, c) != 0) {
            struct rtx_err err;
            rtx_err_set(&err, RTX_ENOMEM, "out of memory forking choice %d", i);
            rtx__gen_seq_end(e, c, RTX_ENOMEM, &err);
            return;
        }
    }
}
