/*
 * jobs-plan-cache.c - the plans a worker keeps (one LRU cache per worker, touched only by its
 * thread; the Plan reuse paragraph of DESIGN in jobs-impl.h) and their hit, miss and eviction
 * counts. Kept apart from the workers so that a device layer can take it over.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/jobs-impl.h"
#include "runtime/backend.h"

static void cached_plan_free(struct cached_plan *e) {
    if (!e) return;
    rtx_plan_free(e->plan); /* first: it points into the graph */
    rtx_graph_free(e->graph);
    rtx_free(e);
}

static void cache_unlink(struct plan_cache *c, struct cached_plan *e) {
    if (e->prev)
        e->prev->next = e->next;
    else
        c->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        c->tail = e->prev;
    e->prev = e->next = NULL;
    c->n--;
    c->bytes -= e->bytes;
}

static void cache_push_front(struct plan_cache *c, struct cached_plan *e) {
    e->prev = NULL;
    e->next = c->head;
    if (c->head)
        c->head->prev = e;
    else
        c->tail = e;
    c->head = e;
    c->n++;
    c->bytes += e->bytes;
}

/* Takes the plan of `key` out of the cache for its job to run (cache_put brings it back);
 * NULL when the cache does not hold it. */
static struct cached_plan *cache_take(struct plan_cache *c, const uint8_t *key) {
    for (struct cached_plan *e = c->head; e; e = e->next) {
        if (memcmp(e->key, key, PLAN_KEY_LEN) == 0) {
            cache_unlink(c, e);
            return e;
        }
    }
    return NULL;
}

/* Whether a plan that may hold `bytes` can be kept at all. */
static bool cache_fits(const struct plan_cache *c, size_t bytes) {
    return c->max_plans > 0 && (c->max_bytes == 0 || bytes <= c->max_bytes);
}

/* Puts e first (most recently used) after dropping the least recently used plans until both
 * bounds hold with it; e must fit (cache_fits). Returns how many plans it dropped. */
static int cache_put(struct plan_cache *c, struct cached_plan *e) {
    int dropped = 0;
    while (c->tail &&
           (c->n + 1 > c->max_plans || (c->max_bytes > 0 && c->bytes + e->bytes > c->max_bytes))) {
        struct cached_plan *victim = c->tail;
        cache_unlink(c, victim);
        cached_plan_free(victim);
        dropped++;
    }
    cache_push_front(c, e);
    return dropped;
}

/* Drops every plan; returns how many. */
int rtx__jobs_cache_clear(struct plan_cache *c) {
    int n = 0;
    while (c->head) {
        struct cached_plan *e = c->head;
        cache_unlink(c, e);
        cached_plan_free(e);
        n++;
    }
    return n;
}

/* The bytes a kept plan of p may hold (see DESIGN): its graph's initializers, its arena, its
 * inputs and its outputs. */
static size_t plan_bytes(const struct prepared *p) {
    const struct rtx_graph *g = p->graph;
    size_t bytes = rtx_plan_arena_bytes(p->plan);
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].constant) bytes += rtx_tensor_nbytes(g->values[v].constant);
    for (int i = 0; i < p->n_inputs; i++)
        bytes += rtx_tensor_nbytes(p->inputs[i]);
    for (int i = 0; i < g->n_outputs; i++) {
        enum rtx_dtype dt;
        int nd = 0;
        int64_t dims[RTX_MAX_DIMS];
        if (rtx_plan_value_shape(p->plan, g->outputs[i], &dt, &nd, dims) == 0)
            bytes += (size_t)rtx_shape_numel(nd, dims) * rtx_dtype_size(dt);
    }
    return bytes;
}

/* Counts plan cache hits, misses and dropped plans on w's device and publishes w's cache size
 * for the stats (takes mu). */
void rtx__jobs_count_plans(struct worker *w, int hits, int misses, int dropped) {
    struct rtx_jobs *j = w->j;
    struct dev *dv = &j->devs[w->dev];
    pthread_mutex_lock(&j->mu);
    dv->plan_hits += hits;
    dv->plan_misses += misses;
    dv->plan_evictions += dropped;
    w->kept_plans = w->plans.n;
    w->kept_bytes = w->plans.bytes;
    pthread_mutex_unlock(&j->mu);
}

/* The plan w keeps for the job, taken out of its cache while the job runs; NULL when the
 * cache is off or does not hold it (the job then runs its own plan). */
struct cached_plan *rtx__jobs_kept_plan_take(struct worker *w, const struct prepared *p) {
    if (w->plans.max_plans == 0) return NULL;
    struct cached_plan *kept = cache_take(&w->plans, p->plan_key);
    rtx__jobs_count_plans(w, kept != NULL, kept == NULL, 0);
    return kept;
}

/* After a job ran on w: a kept plan goes back first into the cache when the job succeeded and
 * is dropped when it failed; after a miss, a job that succeeded leaves its own graph and plan
 * in the cache when they fit. */
void rtx__jobs_kept_plan_return(struct worker *w, struct prepared *p, struct cached_plan *kept,
                                bool ok) {
    if (w->plans.max_plans == 0) return;
    int dropped = 0;
    if (kept && ok) {
        dropped = cache_put(&w->plans, kept);
    } else if (kept) {
        cached_plan_free(kept);
        dropped = 1;
    } else if (ok) {
        size_t bytes = plan_bytes(p);
        struct cached_plan *e = cache_fits(&w->plans, bytes) ? rtx_calloc(1, sizeof *e) : NULL;
        if (!e) return; /* too large to keep, or no memory for the entry: not kept */
        memcpy(e->key, p->plan_key, PLAN_KEY_LEN);
        e->graph = p->graph;
        e->plan = p->plan;
        e->bytes = bytes;
        p->graph = NULL; /* the cache owns them now; the job's outputs are journaled */
        p->plan = NULL;
        dropped = cache_put(&w->plans, e);
    }
    rtx__jobs_count_plans(w, 0, 0, dropped);
}
