/*
 * sched.c - the SLA scheduler (sched.h): item slots, per-lane deadline heaps, stride
 * scheduling across lanes, admission control, expiry, cancellation, brownout, the learned
 * cost table and statistics.
 *
 * DESIGN
 * Storage is fixed at creation: one array of item slots (a free list threads the unused ones),
 * one heap array per lane and an open-addressing cost table. An item's handle is its slot
 * index plus a generation that changes whenever the slot is freed, so a stale handle (the
 * item already finished, expired or was cancelled) is recognised and refused instead of
 * touching a slot's next occupant.
 *
 * A lane's heap holds (key, sequence, slot) entries; the key is the deadline, or the arrival
 * plus the lane's target for an item without one, and the sequence breaks ties in arrival
 * order. Each slot remembers its heap position, so cancel removes an item in O(log n).
 * Items of a delaying lane whose deadline passed go to one FIFO list (doubly linked through
 * the slots) that dispatch serves only when every heap is empty.
 *
 * Fair share: lane l has pass_l and stride_l = 2^24 / weight_l; serving an item of estimated
 * cost c advances pass_l by c * stride_l (costs are capped at 2^38 ns, so a charge stays
 * below 2^62). The backlogged lane with the smallest pass is served (ties: the higher lane); the
 * virtual time is the pass of the lane served last, and a lane whose heap was empty starts at
 * max(pass, virtual time) when an item arrives. Passes are compared by signed difference, so
 * they may wrap around. The backlogged lanes are a bit mask, so a dispatch looks at no more
 * than 16 lanes.
 *
 * Estimates use the queued work per lane (the sum of its items' estimated costs) and the
 * work still running (the sum of each running item's start plus cost, minus now per item,
 * clamped at 0 as a whole). A lane's queued work counts entirely as ahead of a new item,
 * which is exact when its items' deadlines come in arrival order and conservative otherwise.
 *
 * Reconfiguration (rtx_sched_reconfigure) keeps every queued item where it is: heap keys are
 * not recomputed (an item keeps the deadline or arrival + target it was admitted with), so
 * no heap is rebuilt. Storage only grows: a lane's heap is sized for the largest bound it
 * ever had plus max_running, which is what it may still hold after its bound was lowered, and
 * new item slots join the free list. A new weight rescales the lane's lead over the virtual
 * time (pass - vtime) by old / new stride, the dynamic ticket change of stride scheduling:
 * the lane's next turn comes as if it had always had the new weight, so it neither waits out
 * a charge made at a low weight nor jumps ahead after a high one. Backlogged lanes never lag
 * the virtual time (the lane served last has the smallest pass), and an idle lane that does
 * is moved up to it when it becomes backlogged anyway, so only leads are rescaled.
 */
#include "scheduler/sched.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STRIDE_ONE (1ULL << 24)
#define LEAD_MAX (1LL << 62) /* a lane's pass ahead of the virtual time at most (one charge) */
/* Costs are capped here (about 4.6 minutes) for accounting: 2e7 slots of it fit an int64
 * sum, and one charge (cost * stride <= 2^62) keeps passes comparable by signed difference. */
#define COST_MAX_NS (1LL << 38)
#define DELAY_MAX_NS 1e18 /* estimates are capped here (about 31 years) */

/* Wait histogram: values up to 2^41 ns (~37 min), 8 buckets per power of two. */
#define HIST_SUB_BITS 3
#define HIST_SUB (1 << HIST_SUB_BITS)
#define HIST_MAX_EXP 40
#define HIST_BUCKETS ((HIST_MAX_EXP - HIST_SUB_BITS + 2) * HIST_SUB)

enum item_state {
    ST_FREE,
    ST_QUEUED,           /* in its lane's heap */
    ST_DELAYED,          /* in the delayed list */
    ST_RUNNING,          /* dispatched */
    ST_RUNNING_CANCELLED /* dispatched, then cancelled: finish counts it cancelled */
};

struct item {
    void *data;
    int64_t deadline_ns; /* 0 = none */
    int64_t key_ns;      /* heap key */
    int64_t cost_ns;     /* estimated cost (remaining cost after a requeue) */
    int64_t enq_ns;      /* when it was enqueued */
    int64_t end_ns;      /* running: start + cost_ns (the estimated end) */
    uint64_t cost_key;
    uint32_t gen; /* generation, part of the handle */
    uint32_t seq; /* arrival order, breaks key ties */
    int32_t pos;  /* queued: heap position; delayed and free: next slot or -1 */
    int32_t prev; /* delayed: previous slot or -1 */
    uint8_t lane;
    uint8_t state; /* enum item_state */
};

struct heap_entry {
    int64_t key;
    uint32_t seq;
    uint32_t slot;
};

struct lane {
    struct heap_entry *heap;
    int64_t n; /* items in the heap */
    int64_t cap;
    int64_t work_ns; /* sum of the heap items' estimated costs, ns */
    uint64_t pass;   /* stride scheduling */
    uint64_t stride; /* STRIDE_ONE / weight */
    int weight;
    bool delay; /* on_timeout == DELAY */
    int64_t max_queued;
    int64_t target_ns;
    int64_t delayed_n; /* items in the delayed list */
    int64_t running_n;
    int64_t period_work_ns; /* estimated cost admitted since the last evaluation, ns */
    double rate;            /* admitted work per unit of time (ns/ns), averaged */
    int64_t counters[RTX_SCHED_CTR_COUNT];
    int64_t wait_n, wait_max_ns;
    int64_t hist[HIST_BUCKETS];
};

struct cost_entry {
    uint64_t key; /* 0 = empty */
    int64_t ema_ns;
    int64_t samples;
};

struct rtx_sched {
    struct rtx_sched_config cfg;
    struct lane lanes[RTX_SCHED_MAX_LANES];
    int n_lanes;
    struct item *items;
    int64_t n_items;
    int32_t free_head;
    uint32_t backlog;   /* bit l: lane l's heap is not empty */
    uint32_t rate_mask; /* bit l: lane l has a nonzero admitted-work rate */
    uint64_t vtime;     /* virtual time: the pass of the lane served last */
    uint32_t seq;
    int32_t delayed_head, delayed_tail;
    int64_t running;
    __int128 run_end_sum; /* sum of running items' end_ns (exact: no overflow) */
    /* brownout */
    int level;          /* lanes shed, the last `level` ones */
    int64_t over_since; /* first evaluation of the current overload, -1 = none */
    int64_t calm_since; /* first evaluation of the current calm, -1 = none */
    int64_t next_eval;
    int64_t last_eval;
    int64_t eval_period;
    int64_t entries, exits;
    double delay_factor;
    /* learned costs */
    struct cost_entry *costs;
    uint64_t cost_mask;
    int cost_shift; /* 64 - log2(table size) */
    int64_t cost_n;
    int64_t cost_dropped;
};

/* ------------------------------------------------------------------------------------------
 * Names
 * ---------------------------------------------------------------------------------------- */

static const char *const reject_names[RTX_SCHED_REJECT_COUNT] = {
#define REJECT_NAME(name, str, msg) [RTX_SCHED_REJECT_##name] = str,
    RTX_SCHED_REJECT_MAP(REJECT_NAME)
#undef REJECT_NAME
};
static const char *const reject_msgs[RTX_SCHED_REJECT_COUNT] = {
#define REJECT_MSG(name, str, msg) [RTX_SCHED_REJECT_##name] = msg,
    RTX_SCHED_REJECT_MAP(REJECT_MSG)
#undef REJECT_MSG
};
_Static_assert(sizeof reject_names / sizeof reject_names[0] == RTX_SCHED_REJECT_COUNT,
               "a name per reject reason");

static const char *const counter_names[RTX_SCHED_CTR_COUNT] = {
#define COUNTER_NAME(name, str) [RTX_SCHED_CTR_##name] = str,
    RTX_SCHED_COUNTER_MAP(COUNTER_NAME)
#undef COUNTER_NAME
};
_Static_assert(sizeof counter_names / sizeof counter_names[0] == RTX_SCHED_CTR_COUNT,
               "a name per counter");
_Static_assert(RTX_SCHED_MAX_LANES <= 32, "the backlog mask has a bit per lane");

const char *rtx_sched_reject_name(enum rtx_sched_reject_reason r) {
    return (unsigned)r < RTX_SCHED_REJECT_COUNT ? reject_names[r] : "?";
}

const char *rtx_sched_counter_name(enum rtx_sched_counter c) {
    return (unsigned)c < RTX_SCHED_CTR_COUNT ? counter_names[c] : "?";
}

uint64_t rtx_sched_cost_key(const char *id) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const unsigned char *p = (const unsigned char *)(id ? id : ""); *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ULL;
    }
    return h ? h : 1;
}

/* ------------------------------------------------------------------------------------------
 * Creation
 * ---------------------------------------------------------------------------------------- */

void rtx_sched_free(struct rtx_sched *s) {
    if (!s) return;
    for (int l = 0; l < RTX_SCHED_MAX_LANES; l++)
        rtx_free(s->lanes[l].heap);
    rtx_free(s->items);
    rtx_free(s->costs);
    rtx_free(s);
}

/* Time between brownout evaluations: 1/8 of the shorter window, ns. */
static int64_t eval_period_of(const struct rtx_sched_config *cfg) {
    int64_t w = cfg->brownout_window_ns < cfg->brownout_exit_window_ns
                    ? cfg->brownout_window_ns
                    : cfg->brownout_exit_window_ns;
    return w / 8 > 0 ? w / 8 : 1;
}

int rtx_sched_new(const struct rtx_sched_config *cfg, int64_t now_ns, struct rtx_sched **out,
                  struct rtx_err *err) {
    if (!out) return rtx_err_set(err, RTX_EINVAL, "rtx_sched_new: no output pointer");
    *out = NULL;
    int rc = rtx_sched_config_check(cfg, err);
    if (rc) return rc;
    struct rtx_sched *s = rtx_calloc(1, sizeof *s);
    if (!s) return rtx_err_set(err, RTX_ENOMEM, "scheduler: out of memory");
    s->cfg = *cfg;
    s->n_lanes = cfg->n_lanes;
    s->n_items = cfg->max_running;
    for (int l = 0; l < s->n_lanes; l++) {
        const struct rtx_sched_lane_config *lc = &cfg->lanes[l];
        struct lane *ln = &s->lanes[l];
        ln->cap = lc->max_queued + cfg->max_running; /* requeued items may exceed the bound */
        ln->heap = rtx_malloc(sizeof *ln->heap * (size_t)ln->cap);
        if (!ln->heap) goto nomem;
        ln->weight = lc->weight;
        ln->stride = STRIDE_ONE / (uint64_t)lc->weight;
        ln->delay = lc->on_timeout == RTX_SCHED_TIMEOUT_DELAY;
        ln->max_queued = lc->max_queued;
        ln->target_ns = lc->target_ns;
        s->n_items += lc->max_queued;
    }
    s->items = rtx_malloc(sizeof *s->items * (size_t)s->n_items);
    if (!s->items) goto nomem;
    for (int64_t i = 0; i < s->n_items; i++) {
        memset(&s->items[i], 0, sizeof s->items[i]);
        s->items[i].gen = 1;
        s->items[i].pos = i + 1 < s->n_items ? (int32_t)(i + 1) : -1;
    }
    s->free_head = 0;
    int bits = 1;
    while ((1LL << bits) < 2LL * cfg->cost_keys)
        bits++;
    s->costs = rtx_calloc((size_t)1 << bits, sizeof *s->costs);
    if (!s->costs) goto nomem;
    s->cost_mask = (1ULL << bits) - 1;
    s->cost_shift = 64 - bits;
    s->delayed_head = s->delayed_tail = -1;
    s->over_since = s->calm_since = -1;
    s->eval_period = eval_period_of(cfg);
    s->next_eval = now_ns + s->eval_period;
    s->last_eval = now_ns;
    s->delay_factor = 1.0;
    *out = s;
    return 0;
nomem:
    rtx_sched_free(s);
    int64_t slots = cfg->max_running;
    for (int l = 0; l < cfg->n_lanes; l++)
        slots += cfg->lanes[l].max_queued;
    return rtx_err_set(err, RTX_ENOMEM, "scheduler: out of memory for %lld item slots",
                       (long long)slots);
}

const struct rtx_sched_config *rtx_sched_config(const struct rtx_sched *s) {
    return &s->cfg;
}

int rtx_sched_lane_find(const struct rtx_sched *s, const char *name) {
    for (int l = 0; name && l < s->n_lanes; l++)
        if (strcmp(s->cfg.lanes[l].name, name) == 0) return l;
    return RTX_ENOTFOUND;
}

int rtx_sched_lane_for_priority(const struct rtx_sched *s, int64_t priority, int default_lane) {
    if (priority < 0 || default_lane < 0 || default_lane >= s->n_lanes) return RTX_EINVAL;
    if (priority == 0) return default_lane;
    return priority >= s->n_lanes ? s->n_lanes - 1 : (int)priority - 1;
}

/* ------------------------------------------------------------------------------------------
 * Reconfiguration
 * ---------------------------------------------------------------------------------------- */

/* "a,b,c": the lane names of cfg, truncated to fit out. */
static void lane_names(const struct rtx_sched_config *cfg, char *out, size_t len) {
    size_t used = 0;
    out[0] = '\0';
    for (int l = 0; l < cfg->n_lanes && used < len; l++)
        used += (size_t)snprintf(out + used, len - used, "%s%s", l ? "," : "", cfg->lanes[l].name);
}

/* Whether cfg can replace s's config: valid, the same lanes, the same fixed settings. */
static int reconfigure_check(const struct rtx_sched *s, const struct rtx_sched_config *cfg,
                             struct rtx_err *err) {
    int rc = rtx_sched_config_check(cfg, err);
    if (rc) return rc;
    bool same = cfg->n_lanes == s->n_lanes;
    for (int l = 0; same && l < s->n_lanes; l++)
        same = strcmp(cfg->lanes[l].name, s->cfg.lanes[l].name) == 0;
    if (!same) {
        char have[100], want[100];
        lane_names(&s->cfg, have, sizeof have);
        lane_names(cfg, want, sizeof want);
        return rtx_err_set(err, RTX_EINVAL,
                           "scheduler: lanes %s are not the running lanes %s (names and order "
                           "change only with a new scheduler)",
                           want, have);
    }
    if (cfg->executors != s->cfg.executors || cfg->max_running != s->cfg.max_running ||
        cfg->cost_keys != s->cfg.cost_keys)
        return rtx_err_set(err, RTX_EINVAL,
                           "scheduler: executors, max_running and cost_keys (%d, %lld, %d) are "
                           "fixed when it is made (%d, %lld, %d)",
                           cfg->executors, (long long)cfg->max_running, cfg->cost_keys,
                           s->cfg.executors, (long long)s->cfg.max_running, s->cfg.cost_keys);
    return 0;
}

/* Grows the lanes' heaps and the item slots to what cfg's bounds need. On RTX_ENOMEM the
 * scheduler behaves as before (a heap may have grown: room is never a wrong state). */
static int reserve(struct rtx_sched *s, const struct rtx_sched_config *cfg, struct rtx_err *err) {
    int64_t slots = cfg->max_running;
    for (int l = 0; l < s->n_lanes; l++) {
        struct lane *ln = &s->lanes[l];
        int64_t cap = cfg->lanes[l].max_queued + cfg->max_running;
        slots += cfg->lanes[l].max_queued;
        if (cap <= ln->cap) continue;
        struct heap_entry *h = rtx_realloc(ln->heap, sizeof *h * (size_t)cap);
        if (!h)
            return rtx_err_set(err, RTX_ENOMEM,
                               "scheduler: out of memory for %lld places in lane %s",
                               (long long)cap, cfg->lanes[l].name);
        ln->heap = h;
        ln->cap = cap;
    }
    if (slots <= s->n_items) return 0;
    struct item *items = rtx_realloc(s->items, sizeof *items * (size_t)slots);
    if (!items)
        return rtx_err_set(err, RTX_ENOMEM, "scheduler: out of memory for %lld item slots",
                           (long long)slots);
    s->items = items;
    for (int64_t i = s->n_items; i < slots; i++) {
        memset(&items[i], 0, sizeof items[i]);
        items[i].gen = 1;
        items[i].pos = i + 1 < slots ? (int32_t)(i + 1) : s->free_head;
    }
    s->free_head = (int32_t)s->n_items;
    s->n_items = slots;
    return 0;
}

/* Gives lane ln a new weight, rescaling its lead over the virtual time (see DESIGN). */
static void lane_reweight(struct rtx_sched *s, struct lane *ln, int weight) {
    uint64_t stride = STRIDE_ONE / (uint64_t)weight;
    int64_t lead = (int64_t)(ln->pass - s->vtime);
    if (lead > 0 && stride != ln->stride) {
        __int128 scaled = (__int128)lead * stride / ln->stride;
        ln->pass = s->vtime + (uint64_t)(scaled < LEAD_MAX ? (int64_t)scaled : LEAD_MAX);
    }
    ln->weight = weight;
    ln->stride = stride;
}

int rtx_sched_reconfigure(struct rtx_sched *s, const struct rtx_sched_config *cfg, int64_t now_ns,
                          struct rtx_err *err) {
    if (!s || !cfg) return rtx_err_set(err, RTX_EINVAL, "rtx_sched_reconfigure: no scheduler");
    int rc = reconfigure_check(s, cfg, err);
    if (rc == 0) rc = reserve(s, cfg, err);
    if (rc) return rc;
    for (int l = 0; l < s->n_lanes; l++) {
        const struct rtx_sched_lane_config *lc = &cfg->lanes[l];
        struct lane *ln = &s->lanes[l];
        lane_reweight(s, ln, lc->weight);
        ln->delay = lc->on_timeout == RTX_SCHED_TIMEOUT_DELAY;
        ln->max_queued = lc->max_queued;
        ln->target_ns = lc->target_ns;
    }
    s->cfg = *cfg;
    s->eval_period = eval_period_of(cfg);
    if (s->next_eval - now_ns > s->eval_period) s->next_eval = now_ns + s->eval_period;
    s->delay_factor = pow(cfg->brownout_delay_factor, s->level);
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Slots and handles
 * ---------------------------------------------------------------------------------------- */

static uint64_t handle_of(const struct rtx_sched *s, const struct item *it) {
    return (uint64_t)it->gen << 32 | (uint64_t)(it - s->items + 1);
}

/* The slot of a live handle, or NULL. */
static struct item *item_of(const struct rtx_sched *s, uint64_t handle) {
    uint64_t idx = (handle & 0xffffffffULL) - 1;
    if (handle == 0 || idx >= (uint64_t)s->n_items) return NULL;
    struct item *it = &s->items[idx];
    if (it->state == ST_FREE || it->gen != (uint32_t)(handle >> 32)) return NULL;
    return it;
}

static void slot_free(struct rtx_sched *s, struct item *it) {
    it->state = ST_FREE;
    it->gen++;
    it->data = NULL;
    it->pos = s->free_head;
    s->free_head = (int32_t)(it - s->items);
}

/* ------------------------------------------------------------------------------------------
 * Heaps
 * ---------------------------------------------------------------------------------------- */

static inline bool before(const struct heap_entry *a, const struct heap_entry *b) {
    return a->key < b->key || (a->key == b->key && (int32_t)(a->seq - b->seq) < 0);
}

static void sift_up(struct rtx_sched *s, struct lane *ln, int64_t i) {
    struct heap_entry *h = ln->heap;
    struct heap_entry e = h[i];
    while (i > 0) {
        int64_t p = (i - 1) / 2;
        if (!before(&e, &h[p])) break;
        h[i] = h[p];
        s->items[h[i].slot].pos = (int32_t)i;
        i = p;
    }
    h[i] = e;
    s->items[e.slot].pos = (int32_t)i;
}

static void sift_down(struct rtx_sched *s, struct lane *ln, int64_t i) {
    struct heap_entry *h = ln->heap;
    int64_t n = ln->n;
    struct heap_entry e = h[i];
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && before(&h[c + 1], &h[c])) c++;
        if (!before(&h[c], &e)) break;
        h[i] = h[c];
        s->items[h[i].slot].pos = (int32_t)i;
        i = c;
    }
    h[i] = e;
    s->items[e.slot].pos = (int32_t)i;
}

/* Puts a queued item into its lane's heap and queued work; marks the lane backlogged. */
static void lane_push(struct rtx_sched *s, struct item *it) {
    int l = it->lane;
    struct lane *ln = &s->lanes[l];
    if (ln->n == 0) {
        /* a lane that was idle starts at the virtual time: no banked credit */
        if ((int64_t)(ln->pass - s->vtime) < 0) ln->pass = s->vtime;
        s->backlog |= 1u << l;
    }
    it->state = ST_QUEUED;
    /* a lane holds at most max_queued admitted plus max_running requeued items */
    assert(ln->n < ln->cap);
    ln->heap[ln->n] = (struct heap_entry){it->key_ns, it->seq, (uint32_t)(it - s->items)};
    ln->n++;
    sift_up(s, ln, ln->n - 1);
    ln->work_ns += it->cost_ns;
}

/* Takes a queued item out of its lane's heap. */
static void lane_remove(struct rtx_sched *s, struct item *it) {
    int l = it->lane;
    struct lane *ln = &s->lanes[l];
    int64_t i = it->pos;
    ln->n--;
    if (i != ln->n) {
        ln->heap[i] = ln->heap[ln->n];
        if (i > 0 && before(&ln->heap[i], &ln->heap[(i - 1) / 2]))
            sift_up(s, ln, i);
        else
            sift_down(s, ln, i);
    }
    if (ln->n == 0) s->backlog &= ~(1u << l);
    ln->work_ns -= it->cost_ns;
    it->pos = -1;
}

/* ------------------------------------------------------------------------------------------
 * The delayed list
 * ---------------------------------------------------------------------------------------- */

static void delayed_append(struct rtx_sched *s, struct item *it) {
    int32_t idx = (int32_t)(it - s->items);
    it->state = ST_DELAYED;
    it->pos = -1;
    it->prev = s->delayed_tail;
    if (s->delayed_tail >= 0)
        s->items[s->delayed_tail].pos = idx;
    else
        s->delayed_head = idx;
    s->delayed_tail = idx;
    s->lanes[it->lane].delayed_n++;
    s->lanes[it->lane].counters[RTX_SCHED_CTR_DELAYED]++;
}

static void delayed_remove(struct rtx_sched *s, struct item *it) {
    if (it->prev >= 0)
        s->items[it->prev].pos = it->pos;
    else
        s->delayed_head = it->pos;
    if (it->pos >= 0)
        s->items[it->pos].prev = it->prev;
    else
        s->delayed_tail = it->prev;
    s->lanes[it->lane].delayed_n--;
    it->pos = it->prev = -1;
}

/* ------------------------------------------------------------------------------------------
 * Learned costs
 * ---------------------------------------------------------------------------------------- */

/* The entry of key, or the empty entry where it would go (key 0 there). The table is never
 * full: it has at least twice as many entries as keys are allowed. */
static struct cost_entry *cost_slot(const struct rtx_sched *s, uint64_t key) {
    uint64_t i = (key * 0x9e3779b97f4a7c15ULL) >> s->cost_shift;
    while (s->costs[i].key != key && s->costs[i].key != 0)
        i = (i + 1) & s->cost_mask;
    return &s->costs[i];
}

static const struct cost_entry *cost_find(const struct rtx_sched *s, uint64_t key) {
    const struct cost_entry *e = cost_slot(s, key);
    return e->key == key ? e : NULL;
}

/* The entry of key, inserted when there is room; NULL when the table holds cost_keys keys. */
static struct cost_entry *cost_insert(struct rtx_sched *s, uint64_t key) {
    struct cost_entry *e = cost_slot(s, key);
    if (e->key == key) return e;
    if (s->cost_n >= s->cfg.cost_keys) return NULL;
    e->key = key;
    e->ema_ns = 0;
    e->samples = 0;
    s->cost_n++;
    return e;
}

static int64_t cost_estimate(const struct rtx_sched *s, uint64_t key) {
    if (key) {
        const struct cost_entry *e = cost_find(s, key);
        if (e && e->samples > 0) return e->ema_ns;
    }
    return s->cfg.default_cost_ns;
}

static void cost_learn(struct rtx_sched *s, uint64_t key, int64_t run_ns) {
    if (!key) return;
    if (run_ns > COST_MAX_NS) run_ns = COST_MAX_NS;
    struct cost_entry *e = cost_insert(s, key);
    if (!e) {
        s->cost_dropped++;
        return;
    }
    if (e->samples == 0) {
        e->ema_ns = run_ns;
    } else {
        double v = (double)e->ema_ns + s->cfg.cost_ema_alpha * (double)(run_ns - e->ema_ns);
        e->ema_ns = v < 1 ? 1 : (int64_t)llround(v);
    }
    e->samples++;
}

int rtx_sched_cost_get(const struct rtx_sched *s, uint64_t key, int64_t *ema_ns,
                       int64_t *samples) {
    const struct cost_entry *e = key ? cost_find(s, key) : NULL;
    if (!e || e->samples == 0) return RTX_ENOTFOUND;
    if (ema_ns) *ema_ns = e->ema_ns;
    if (samples) *samples = e->samples;
    return 0;
}

int rtx_sched_cost_load(struct rtx_sched *s, uint64_t key, int64_t ema_ns, int64_t samples,
                        struct rtx_err *err) {
    if (key == 0 || ema_ns <= 0 || samples < 1)
        return rtx_err_set(err, RTX_EINVAL,
                           "cost %016llx: key 0, average %lld ns or %lld samples is invalid",
                           (unsigned long long)key, (long long)ema_ns, (long long)samples);
    struct cost_entry *e = cost_insert(s, key);
    if (!e)
        return rtx_err_set(err, RTX_ELIMIT, "cost %016llx: the table holds %d keys already",
                           (unsigned long long)key, s->cfg.cost_keys);
    e->ema_ns = ema_ns;
    e->samples = samples;
    return 0;
}

int rtx_sched_cost_save(const struct rtx_sched *s, rtx_sched_cost_fn fn, void *ctx) {
    for (uint64_t i = 0; i <= s->cost_mask; i++) {
        const struct cost_entry *e = &s->costs[i];
        if (e->key == 0 || e->samples == 0) continue;
        int rc = fn(ctx, e->key, e->ema_ns, e->samples);
        if (rc) return rc;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Estimates and brownout
 * ---------------------------------------------------------------------------------------- */

/* What is left of the running work, ns (all executors together). */
static int64_t running_left(const struct rtx_sched *s, int64_t now) {
    __int128 left = s->run_end_sum - (__int128)s->running * now;
    return left <= 0 ? 0 : left >= INT64_MAX ? INT64_MAX : (int64_t)left;
}

/* The queueing delay of an item of cost `cost` arriving in lane l now, ns. During the delay T
 * the executors (E of them) serve this lane's queued work W_l, the running work left, and
 * from every other lane j its queued work B_j plus what arrives meanwhile (its recent rate
 * a_j times T), but no more than its weighted share of what this lane gets served through the
 * item, C_j = (W_l + cost) * w_j / w_l. So E * T = W_l + left + sum_j min(B_j + a_j T, C_j),
 * solved by capping the lanes whose demand exceeds their share until none changes (each lane
 * is capped at most once). */
static double lane_delay(const struct rtx_sched *s, int l, int64_t cost, int64_t now) {
    const struct lane *ln = &s->lanes[l];
    double mine = (double)ln->work_ns + (double)cost;
    double per_weight = mine / ln->weight;
    double fixed = (double)ln->work_ns + (double)running_left(s, now);
    double open_work = 0, open_rate = 0, t;
    double exec = s->cfg.executors;
    uint32_t open = (s->backlog | s->rate_mask) & ~(1u << l);
    for (uint32_t m = open; m; m &= m - 1) {
        const struct lane *o = &s->lanes[__builtin_ctz(m)];
        open_work += (double)o->work_ns;
        open_rate += o->rate;
    }
    for (;;) {
        double room = exec - open_rate;
        if (room <= exec * 1e-3) {
            /* their arrivals alone would fill the executors: each gets its share */
            for (uint32_t m = open; m; m &= m - 1)
                fixed += per_weight * s->lanes[__builtin_ctz(m)].weight;
            open = 0;
            open_work = open_rate = 0;
            room = exec;
        }
        t = (fixed + open_work) / room;
        uint32_t capped = 0;
        for (uint32_t m = open; m; m &= m - 1) {
            int j = __builtin_ctz(m);
            const struct lane *o = &s->lanes[j];
            double share = per_weight * o->weight;
            if ((double)o->work_ns + o->rate * t > share) {
                capped |= 1u << j;
                fixed += share;
                open_work -= (double)o->work_ns;
                open_rate -= o->rate;
            }
        }
        if (!capped) break;
        open &= ~capped;
    }
    return t < DELAY_MAX_NS ? t : DELAY_MAX_NS;
}

static double lane_pressure(const struct rtx_sched *s, int l, int64_t now) {
    return lane_delay(s, l, 0, now) / (double)s->lanes[l].target_ns;
}

/* Folds the work admitted since the last evaluation into each lane's rate, a moving average
 * with a time constant of one brownout window. */
static void update_rates(struct rtx_sched *s, int64_t now) {
    int64_t elapsed = now - s->last_eval;
    if (elapsed <= 0) return;
    double beta = 1.0 - exp(-(double)elapsed / (double)s->cfg.brownout_window_ns);
    s->last_eval = now;
    s->rate_mask = 0;
    for (int l = 0; l < s->n_lanes; l++) {
        struct lane *ln = &s->lanes[l];
        double inst = (double)ln->period_work_ns / (double)elapsed;
        ln->rate += beta * (inst - ln->rate);
        if (ln->rate < 1e-6) ln->rate = 0; /* a lane idle for long has no rate */
        if (ln->rate > 0) s->rate_mask |= 1u << l;
        ln->period_work_ns = 0;
    }
}

static void evaluate(struct rtx_sched *s, int64_t now) {
    s->next_eval = now + s->eval_period;
    update_rates(s, now);
    const struct rtx_sched_config *c = &s->cfg;
    int admitted = s->n_lanes - s->level;
    double over = 0;
    for (int l = 0; l < admitted; l++) {
        double p = lane_pressure(s, l, now);
        if (p > over) over = p;
    }
    if (s->level < s->n_lanes - 1 && over > c->brownout_enter_pressure) {
        s->calm_since = -1;
        if (s->over_since < 0) {
            s->over_since = now;
        } else if (now - s->over_since >= c->brownout_window_ns) {
            if (s->level++ == 0) s->entries++;
            s->over_since = now; /* the next lane needs another window */
        }
    } else {
        s->over_since = -1;
        if (s->level > 0) {
            double next = lane_pressure(s, admitted, now);
            if (next < over) next = over;
            if (next >= c->brownout_exit_pressure) {
                s->calm_since = -1;
            } else if (s->calm_since < 0) {
                s->calm_since = now;
            } else if (now - s->calm_since >= c->brownout_exit_window_ns) {
                if (--s->level == 0) s->exits++;
                s->calm_since = s->level > 0 ? now : -1;
            }
        }
    }
    s->delay_factor = pow(c->brownout_delay_factor, s->level);
}

void rtx_sched_tick(struct rtx_sched *s, int64_t now_ns) {
    evaluate(s, now_ns);
}

double rtx_sched_batch_delay_factor(const struct rtx_sched *s) {
    return s->delay_factor;
}

/* ------------------------------------------------------------------------------------------
 * Enqueue
 * ---------------------------------------------------------------------------------------- */

static int reject(struct rtx_sched *s, int l, enum rtx_sched_reject_reason why, int64_t retry_ns,
                  int64_t est_ns, int64_t deadline_ns, int64_t now, struct rtx_sched_reject *rej) {
    static const enum rtx_sched_counter ctr[RTX_SCHED_REJECT_COUNT] = {
        [RTX_SCHED_REJECT_LANE_FULL] = RTX_SCHED_CTR_REJECTED_FULL,
        [RTX_SCHED_REJECT_DEADLINE] = RTX_SCHED_CTR_REJECTED_DEADLINE,
        [RTX_SCHED_REJECT_SHED] = RTX_SCHED_CTR_SHED,
        [RTX_SCHED_REJECT_FULL] = RTX_SCHED_CTR_REJECTED_FULL,
    };
    struct lane *ln = &s->lanes[l];
    ln->counters[ctr[why]]++;
    if (!rej) return RTX_EUNAVAILABLE;
    rej->reason = why;
    rej->retry_after_ns = retry_ns > 0 ? retry_ns : 1;
    rej->est_completion_ns = why == RTX_SCHED_REJECT_DEADLINE ? est_ns : 0;
    const char *name = s->cfg.lanes[l].name;
    switch (why) {
    case RTX_SCHED_REJECT_LANE_FULL:
        snprintf(rej->msg, sizeof rej->msg, "lane %s: %s (%lld queued, bound %lld)", name,
                 reject_msgs[why], (long long)(ln->n + ln->delayed_n), (long long)ln->max_queued);
        break;
    case RTX_SCHED_REJECT_DEADLINE:
        snprintf(rej->msg, sizeof rej->msg,
                 "lane %s: %s: estimated completion in %.3f ms, deadline in %.3f ms", name,
                 reject_msgs[why], (double)(est_ns - now) / 1e6,
                 (double)(deadline_ns - now) / 1e6);
        break;
    case RTX_SCHED_REJECT_SHED:
        snprintf(rej->msg, sizeof rej->msg, "lane %s: %s (%d of %d lanes shed)", name,
                 reject_msgs[why], s->level, s->n_lanes);
        break;
    default:
        snprintf(rej->msg, sizeof rej->msg, "lane %s: %s (%lld running)", name, reject_msgs[why],
                 (long long)s->running);
        break;
    }
    return RTX_EUNAVAILABLE;
}

int rtx_sched_enqueue(struct rtx_sched *s, const struct rtx_sched_request *req, int64_t now_ns,
                      uint64_t *handle, struct rtx_sched_reject *rej) {
    if (!s || !req || req->lane < 0 || req->lane >= s->n_lanes || req->cost_ns < 0 ||
        req->deadline_ns < 0)
        return RTX_EINVAL;
    if (now_ns >= s->next_eval) evaluate(s, now_ns);
    int l = req->lane;
    struct lane *ln = &s->lanes[l];
    if (l >= s->n_lanes - s->level) {
        int64_t calm = s->calm_since >= 0 ? now_ns - s->calm_since : 0;
        return reject(s, l, RTX_SCHED_REJECT_SHED, s->cfg.brownout_exit_window_ns - calm, 0, 0,
                      now_ns, rej);
    }
    if (ln->n + ln->delayed_n >= ln->max_queued) {
        int64_t depth = ln->n + ln->delayed_n;
        double per_item = lane_delay(s, l, 0, now_ns) / (double)(depth > 0 ? depth : 1);
        return reject(s, l, RTX_SCHED_REJECT_LANE_FULL, (int64_t)per_item, 0, 0, now_ns, rej);
    }
    if (s->free_head < 0)
        return reject(s, l, RTX_SCHED_REJECT_FULL,
                      running_left(s, now_ns) / (s->running > 0 ? s->running : 1), 0, 0, now_ns,
                      rej);
    int64_t cost = req->cost_ns ? req->cost_ns : cost_estimate(s, req->cost_key);
    if (cost > COST_MAX_NS) cost = COST_MAX_NS;
    if (req->deadline_ns && !ln->delay) {
        int64_t est = now_ns + (int64_t)lane_delay(s, l, cost, now_ns) + cost;
        if (est > req->deadline_ns)
            return reject(s, l, RTX_SCHED_REJECT_DEADLINE, est - req->deadline_ns, est,
                          req->deadline_ns, now_ns, rej);
    }
    struct item *it = &s->items[s->free_head];
    s->free_head = it->pos;
    it->data = req->data;
    it->deadline_ns = req->deadline_ns;
    it->key_ns = req->deadline_ns                     ? req->deadline_ns
                 : now_ns > INT64_MAX - ln->target_ns ? INT64_MAX
                                                      : now_ns + ln->target_ns;
    it->cost_ns = cost;
    it->enq_ns = now_ns;
    it->end_ns = 0;
    it->cost_key = req->cost_key;
    it->seq = s->seq++;
    it->prev = -1;
    it->lane = (uint8_t)l;
    lane_push(s, it);
    ln->period_work_ns += cost;
    ln->counters[RTX_SCHED_CTR_ADMITTED]++;
    if (handle) *handle = handle_of(s, it);
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Dispatch and expiry
 * ---------------------------------------------------------------------------------------- */

static int hist_index(uint64_t v) {
    if (v >= (1ULL << (HIST_MAX_EXP + 1))) v = (1ULL << (HIST_MAX_EXP + 1)) - 1;
    if (v < HIST_SUB) return (int)v;
    int e = 63 - __builtin_clzll(v);
    int sub = (int)((v >> (e - HIST_SUB_BITS)) & (HIST_SUB - 1));
    return (e - HIST_SUB_BITS + 1) * HIST_SUB + sub;
}

/* The largest value that falls into bucket i. */
static int64_t hist_upper(int i) {
    if (i < HIST_SUB) return i;
    int e = i / HIST_SUB + HIST_SUB_BITS - 1;
    int64_t lower = (int64_t)(HIST_SUB + i % HIST_SUB) << (e - HIST_SUB_BITS);
    return lower + ((int64_t)1 << (e - HIST_SUB_BITS)) - 1;
}

static void fill_out(const struct rtx_sched *s, const struct item *it, int64_t now,
                     struct rtx_sched_item *out) {
    out->data = it->data;
    out->handle = handle_of(s, it);
    out->lane = it->lane;
    out->deadline_ns = it->deadline_ns;
    out->cost_ns = it->cost_ns;
    out->wait_ns = now - it->enq_ns;
    out->late = it->deadline_ns && it->deadline_ns <= now;
}

/* Hands out a queued or delayed item to run. */
static void start(struct rtx_sched *s, struct item *it, int64_t now, struct rtx_sched_item *out) {
    struct lane *ln = &s->lanes[it->lane];
    fill_out(s, it, now, out);
    it->state = ST_RUNNING;
    it->end_ns = now + it->cost_ns;
    s->running++;
    s->run_end_sum += it->end_ns;
    ln->running_n++;
    ln->counters[RTX_SCHED_CTR_DISPATCHED]++;
    int64_t wait = now - it->enq_ns;
    if (wait < 0) wait = 0;
    ln->hist[hist_index((uint64_t)wait)]++;
    ln->wait_n++;
    if (wait > ln->wait_max_ns) ln->wait_max_ns = wait;
}

/* Counts and frees an item dropped because its deadline passed. */
static void expire_item(struct rtx_sched *s, struct item *it, int64_t now,
                        struct rtx_sched_item *out) {
    fill_out(s, it, now, out);
    s->lanes[it->lane].counters[RTX_SCHED_CTR_EXPIRED]++;
    slot_free(s, it);
}

enum rtx_sched_pick rtx_sched_dispatch(struct rtx_sched *s, int64_t now_ns,
                                       struct rtx_sched_item *out) {
    if (now_ns >= s->next_eval) evaluate(s, now_ns);
    if (s->running >= s->cfg.max_running) return RTX_SCHED_NONE;
    for (;;) {
        uint32_t m = s->backlog;
        if (!m) {
            if (s->delayed_head < 0) return RTX_SCHED_NONE;
            struct item *it = &s->items[s->delayed_head];
            delayed_remove(s, it);
            start(s, it, now_ns, out);
            return RTX_SCHED_RUN;
        }
        int best = __builtin_ctz(m);
        uint64_t best_pass = s->lanes[best].pass;
        for (m &= m - 1; m; m &= m - 1) {
            int j = __builtin_ctz(m);
            if ((int64_t)(s->lanes[j].pass - best_pass) < 0) {
                best = j;
                best_pass = s->lanes[j].pass;
            }
        }
        struct lane *ln = &s->lanes[best];
        struct item *it = &s->items[ln->heap[0].slot];
        lane_remove(s, it);
        if (it->deadline_ns && it->deadline_ns <= now_ns) {
            if (ln->delay) {
                delayed_append(s, it);
                continue;
            }
            expire_item(s, it, now_ns, out);
            return RTX_SCHED_EXPIRED;
        }
        s->vtime = best_pass;
        ln->pass = best_pass + (uint64_t)it->cost_ns * ln->stride;
        start(s, it, now_ns, out);
        return RTX_SCHED_RUN;
    }
}

/* Slots of up to cap items of lane l whose deadline passed, found by walking the part of the
 * heap whose keys are <= now (a key > now prunes its subtree: a child's key is not smaller,
 * and an item's key is its deadline when it has one). Returns how many. */
static int collect_overdue(const struct rtx_sched *s, const struct lane *ln, int64_t now,
                           uint32_t *slots, int cap) {
    int64_t stack[64]; /* depth-first: at most one pending sibling per level, depth < 25 */
    int sp = 0, n = 0;
    if (ln->n > 0) stack[sp++] = 0;
    while (sp > 0 && n < cap) {
        int64_t i = stack[--sp];
        const struct heap_entry *e = &ln->heap[i];
        if (e->key > now) continue;
        const struct item *it = &s->items[e->slot];
        if (it->deadline_ns && it->deadline_ns <= now) slots[n++] = e->slot;
        int64_t c = 2 * i + 1;
        if (c + 1 < ln->n) stack[sp++] = c + 1;
        if (c < ln->n) stack[sp++] = c;
    }
    return n;
}

int rtx_sched_expire(struct rtx_sched *s, int64_t now_ns, struct rtx_sched_item *out, int cap) {
    int got = 0;
    if (cap < 0 || !out) cap = 0;
    for (int l = 0; l < s->n_lanes; l++) {
        struct lane *ln = &s->lanes[l];
        for (;;) {
            uint32_t slots[64];
            int room = ln->delay ? 64 : cap - got < 64 ? cap - got : 64;
            if (room <= 0) break;
            int k = collect_overdue(s, ln, now_ns, slots, room);
            for (int i = 0; i < k; i++) {
                struct item *it = &s->items[slots[i]];
                lane_remove(s, it);
                if (ln->delay)
                    delayed_append(s, it);
                else
                    expire_item(s, it, now_ns, &out[got++]);
            }
            if (k < room) break;
        }
    }
    return got;
}

/* ------------------------------------------------------------------------------------------
 * Cancel, finish, requeue
 * ---------------------------------------------------------------------------------------- */

int rtx_sched_cancel(struct rtx_sched *s, uint64_t handle, int64_t now_ns, void **data,
                     bool *was_running) {
    struct item *it = item_of(s, handle);
    if (!it) return RTX_ENOTFOUND;
    if (it->state == ST_RUNNING || it->state == ST_RUNNING_CANCELLED) {
        it->state = ST_RUNNING_CANCELLED;
        if (data) *data = it->data;
        if (was_running) *was_running = true;
        return 0;
    }
    if (it->state == ST_QUEUED)
        lane_remove(s, it);
    else
        delayed_remove(s, it);
    s->lanes[it->lane].counters[RTX_SCHED_CTR_CANCELLED]++;
    if (data) *data = it->data;
    if (was_running) *was_running = false;
    slot_free(s, it);
    return 0;
}

/* Takes a running item off the running totals. */
static void stop_running(struct rtx_sched *s, struct item *it) {
    s->running--;
    s->run_end_sum -= it->end_ns;
    s->lanes[it->lane].running_n--;
}

int rtx_sched_finish(struct rtx_sched *s, uint64_t handle, enum rtx_sched_outcome outcome,
                     int64_t run_ns, int64_t now_ns) {
    struct item *it = item_of(s, handle);
    if (!it || (it->state != ST_RUNNING && it->state != ST_RUNNING_CANCELLED))
        return RTX_ENOTFOUND;
    if (outcome == RTX_SCHED_OK && run_ns <= 0) return RTX_EINVAL;
    if ((unsigned)outcome > RTX_SCHED_CANCELLED) return RTX_EINVAL;
    struct lane *ln = &s->lanes[it->lane];
    stop_running(s, it);
    if (outcome == RTX_SCHED_OK) cost_learn(s, it->cost_key, run_ns);
    if (it->state == ST_RUNNING_CANCELLED || outcome == RTX_SCHED_CANCELLED)
        ln->counters[RTX_SCHED_CTR_CANCELLED]++;
    else if (outcome == RTX_SCHED_OK)
        ln->counters[RTX_SCHED_CTR_COMPLETED]++;
    else
        ln->counters[RTX_SCHED_CTR_FAILED]++;
    slot_free(s, it);
    if (now_ns >= s->next_eval) evaluate(s, now_ns);
    return 0;
}

int rtx_sched_requeue(struct rtx_sched *s, uint64_t handle, int64_t remaining_ns, int64_t now_ns) {
    struct item *it = item_of(s, handle);
    if (!it || (it->state != ST_RUNNING && it->state != ST_RUNNING_CANCELLED))
        return RTX_ENOTFOUND;
    if (it->state == ST_RUNNING_CANCELLED) return RTX_ECANCELED;
    if (remaining_ns <= 0) return RTX_EINVAL;
    stop_running(s, it);
    it->cost_ns = remaining_ns < COST_MAX_NS ? remaining_ns : COST_MAX_NS;
    it->end_ns = 0;
    lane_push(s, it);
    s->lanes[it->lane].counters[RTX_SCHED_CTR_PREEMPTED]++;
    if (now_ns >= s->next_eval) evaluate(s, now_ns);
    return 0;
}

bool rtx_sched_preempt_wanted(const struct rtx_sched *s, uint64_t handle) {
    const struct item *it = item_of(s, handle);
    if (!it || it->state != ST_RUNNING) return false;
    if (!s->cfg.lanes[it->lane].preemptible || s->running < s->cfg.executors) return false;
    return (s->backlog & ((1u << it->lane) - 1)) != 0;
}

/* ------------------------------------------------------------------------------------------
 * Statistics
 * ---------------------------------------------------------------------------------------- */

static int64_t hist_quantile(const struct lane *ln, double q) {
    if (ln->wait_n == 0) return 0;
    int64_t rank = (int64_t)ceil(q * (double)ln->wait_n);
    if (rank < 1) rank = 1;
    int64_t seen = 0;
    for (int i = 0; i < HIST_BUCKETS; i++) {
        seen += ln->hist[i];
        if (seen >= rank) {
            int64_t up = hist_upper(i);
            return up < ln->wait_max_ns ? up : ln->wait_max_ns;
        }
    }
    return ln->wait_max_ns;
}

void rtx_sched_get_stats(struct rtx_sched *s, int64_t now_ns, struct rtx_sched_stats *st) {
    evaluate(s, now_ns);
    memset(st, 0, sizeof *st);
    st->n_lanes = s->n_lanes;
    for (int l = 0; l < s->n_lanes; l++) {
        const struct lane *ln = &s->lanes[l];
        struct rtx_sched_lane_stats *o = &st->lanes[l];
        o->config = s->cfg.lanes[l];
        o->queued = ln->n;
        o->delayed = ln->delayed_n;
        o->running = ln->running_n;
        o->queued_work_ns = ln->work_ns;
        double d = lane_delay(s, l, 0, now_ns);
        o->est_delay_ns = (int64_t)d;
        o->pressure = d / (double)ln->target_ns;
        o->shed = l >= s->n_lanes - s->level;
        memcpy(o->counters, ln->counters, sizeof o->counters);
        o->wait_samples = ln->wait_n;
        o->wait_p50_ns = hist_quantile(ln, 0.50);
        o->wait_p90_ns = hist_quantile(ln, 0.90);
        o->wait_p99_ns = hist_quantile(ln, 0.99);
        o->wait_max_ns = ln->wait_max_ns;
    }
    st->executors = s->cfg.executors;
    st->running = s->running;
    st->brownout_level = s->level;
    st->brownout_entries = s->entries;
    st->brownout_exits = s->exits;
    st->batch_delay_factor = s->delay_factor;
    st->cost_keys = s->cost_n;
    st->cost_keys_dropped = s->cost_dropped;
}
