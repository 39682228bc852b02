/*
 * costs.c - the set's book of learned costs (device/device.h, "Learned costs"): a table of
 * (where, key) -> moving average kept sorted for binary search, read from the store once at
 * open and written back in one transaction per save, only the rows changed since they were
 * last written.
 *
 * DESIGN
 * Each row has a generation (gen, from the book's counter, bumped by every put that changes
 * it) and the generation last written (saved_gen); it is dirty while they differ. A save
 * copies the dirty rows and their generations out under cmu, writes them with cmu released,
 * and on success sets saved_gen to the copied generation of each row, so a put that came in
 * meanwhile (a newer gen) stays dirty; on failure nothing changes and the next save retries.
 * save_mu serializes saves, so an older copy is never written after a newer one.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "device/device-impl.h"
#include "store/store.h"

struct rtx_device_cost {
    char where[RTX_DEVICE_COST_WHERE_LEN];
    uint64_t key;
    int64_t ema_ns, samples;
    uint64_t gen, saved_gen; /* dirty while they differ */
};

static int64_t unix_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int cmp_row(const char *where, uint64_t key, const struct rtx_device_cost *r) {
    int c = strcmp(where, r->where);
    if (c) return c;
    return key < r->key ? -1 : key > r->key;
}

/* The index of (where, key), or -(insertion point) - 1. Under cmu. */
static int find(const struct rtx_devices *s, const char *where, uint64_t key) {
    int lo = 0, hi = s->n_costs;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2, c = cmp_row(where, key, &s->costs[mid]);
        if (c == 0) return mid;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return -lo - 1;
}

/* What the store would refuse (rtx_store_cost_put's RTX_EINVAL): never enters the book, so
 * one bad row cannot keep every save failing. */
static int check_row(const char *where, uint64_t key, int64_t ema_ns, int64_t samples,
                     struct rtx_err *err) {
    if (!where || !where[0] || strlen(where) >= RTX_DEVICE_COST_WHERE_LEN)
        return rtx_err_set(err, RTX_EINVAL, "learned cost: '%.32s' is not a place",
                           where ? where : "");
    if (key == 0 || ema_ns <= 0 || samples < 0)
        return rtx_err_set(err, RTX_EINVAL,
                           "learned cost of %s: key %llu, ema_ns %lld, samples %lld", where,
                           (unsigned long long)key, (long long)ema_ns, (long long)samples);
    return 0;
}

/* Inserts or updates a row (under cmu). `saved`: it came from the store (clean). */
static int put_locked(struct rtx_devices *s, const char *where, uint64_t key, int64_t ema_ns,
                      int64_t samples, bool saved) {
    int i = find(s, where, key);
    if (i >= 0) {
        struct rtx_device_cost *r = &s->costs[i];
        if (r->ema_ns == ema_ns && r->samples == samples) return 0;
        r->ema_ns = ema_ns;
        r->samples = samples;
        r->gen = ++s->cost_gen;
        if (saved) r->saved_gen = r->gen;
        return 0;
    }
    i = -i - 1;
    if (s->n_costs == s->cap_costs) {
        int cap = s->cap_costs ? 2 * s->cap_costs : 64;
        void *p = rtx_realloc(s->costs, (size_t)cap * sizeof *s->costs);
        if (!p) return RTX_ENOMEM;
        s->costs = p;
        s->cap_costs = cap;
    }
    memmove(&s->costs[i + 1], &s->costs[i], (size_t)(s->n_costs - i) * sizeof *s->costs);
    s->n_costs++;
    struct rtx_device_cost *r = &s->costs[i];
    memset(r, 0, sizeof *r);
    snprintf(r->where, sizeof r->where, "%s", where);
    r->key = key;
    r->ema_ns = ema_ns;
    r->samples = samples;
    r->gen = ++s->cost_gen;
    r->saved_gen = saved ? r->gen : 0;
    return 0;
}

int rtx_devices_costs_open(struct rtx_devices *s, struct rtx_store *store, struct rtx_err *err) {
    struct rtx_store_cost *rows = NULL;
    int n = 0, rc = store ? rtx_store_cost_list(store, &rows, &n, err) : 0;
    if (rc) n = 0; /* an empty book: the costs are learned again */
    pthread_mutex_lock(&s->cmu);
    s->costs_open = true;
    s->store = store;
    for (int i = 0; i < n && rc == 0; i++) {
        const struct rtx_store_cost *r = &rows[i];
        /* the store refuses such rows; one written by hand is skipped */
        if (check_row(r->device, r->key, r->ema_ns, r->samples, NULL) != 0) continue;
        if (put_locked(s, r->device, r->key, r->ema_ns, r->samples, true) != 0)
            rc = rtx_err_set(err, RTX_ENOMEM, "learned costs: out of memory");
    }
    pthread_mutex_unlock(&s->cmu);
    rtx_free(rows);
    return rc;
}

bool rtx_devices_cost_get(struct rtx_devices *s, const char *where, uint64_t key, int64_t *ema_ns,
                          int64_t *samples) {
    pthread_mutex_lock(&s->cmu);
    int i = where ? find(s, where, key) : -1;
    bool found = i >= 0;
    if (found) {
        *ema_ns = s->costs[i].ema_ns;
        *samples = s->costs[i].samples;
    }
    pthread_mutex_unlock(&s->cmu);
    return found;
}

void rtx_devices_costs_each(struct rtx_devices *s, const char *where,
                            void (*fn)(void *ctx, uint64_t key, int64_t ema_ns, int64_t samples),
                            void *ctx) {
    pthread_mutex_lock(&s->cmu);
    int n = 0;
    for (int i = 0; i < s->n_costs; i++)
        if (strcmp(s->costs[i].where, where) == 0) n++;
    struct rtx_device_cost *copy = n > 0 ? rtx_malloc((size_t)n * sizeof *copy) : NULL;
    int k = 0;
    for (int i = 0; copy && i < s->n_costs; i++)
        if (strcmp(s->costs[i].where, where) == 0) copy[k++] = s->costs[i];
    pthread_mutex_unlock(&s->cmu);
    /* fn runs without cmu (it may call back into the book); out of memory: nothing is heard,
     * as after a read error at open */
    for (int i = 0; i < k; i++)
        fn(ctx, copy[i].key, copy[i].ema_ns, copy[i].samples);
    rtx_free(copy);
}

int rtx_devices_cost_put(struct rtx_devices *s, const char *where, uint64_t key, int64_t ema_ns,
                         int64_t samples, struct rtx_err *err) {
    int rc = check_row(where, key, ema_ns, samples, err);
    if (rc) return rc;
    pthread_mutex_lock(&s->cmu);
    if (s->costs_open) rc = put_locked(s, where, key, ema_ns, samples, false);
    pthread_mutex_unlock(&s->cmu);
    if (rc) return rtx_err_set(err, RTX_ENOMEM, "learned costs: out of memory");
    return 0;
}

int rtx_devices_costs_save(struct rtx_devices *s, struct rtx_err *err) {
    pthread_mutex_lock(&s->save_mu);
    pthread_mutex_lock(&s->cmu);
    struct rtx_store *store = s->store;
    int n = 0;
    for (int i = 0; store && i < s->n_costs; i++)
        if (s->costs[i].gen != s->costs[i].saved_gen) n++;
    struct rtx_store_cost *rows = n > 0 ? rtx_calloc((size_t)n, sizeof *rows) : NULL;
    uint64_t *gens = n > 0 ? rtx_malloc((size_t)n * sizeof *gens) : NULL;
    int k = 0;
    for (int i = 0; rows && gens && i < s->n_costs; i++) {
        const struct rtx_device_cost *r = &s->costs[i];
        if (r->gen == r->saved_gen) continue;
        snprintf(rows[k].device, sizeof rows[k].device, "%s", r->where);
        rows[k].key = r->key;
        rows[k].ema_ns = r->ema_ns;
        rows[k].samples = r->samples;
        gens[k++] = r->gen;
    }
    pthread_mutex_unlock(&s->cmu);
    int rc = 0;
    if (n > 0 && (!rows || !gens))
        rc = rtx_err_set(err, RTX_ENOMEM, "learned costs: out of memory");
    else if (n > 0)
        rc = rtx_store_cost_put(store, rows, n, unix_ms(), err);
    if (rc == 0 && n > 0) {
        pthread_mutex_lock(&s->cmu);
        for (int j = 0; j < n; j++) {
            int i = find(s, rows[j].device, rows[j].key); /* rows are never removed */
            if (i >= 0 && s->costs[i].gen == gens[j]) s->costs[i].saved_gen = gens[j];
        }
        pthread_mutex_unlock(&s->cmu);
    }
    pthread_mutex_unlock(&s->save_mu);
    rtx_free(rows);
    rtx_free(gens);
    return rc;
}

int rtx_devices_costs_dirty(struct rtx_devices *s) {
    pthread_mutex_lock(&s->cmu);
    int n = 0;
    for (int i = 0; i < s->n_costs; i++)
        if (s->costs[i].gen != s->costs[i].saved_gen) n++;
    pthread_mutex_unlock(&s->cmu);
    return n;
}

void rtx__devices_costs_free(struct rtx_devices *s) {
    rtx_free(s->costs);
    s->costs = NULL;
    s->n_costs = s->cap_costs = 0;
}
