/*
 * plan-cache.c - one plan cache per device, shared by every consumer (the Plan cache
 * paragraph of DESIGN in device/device.h), and the plan key. Taken over from the job
 * manager's per-worker cache.
 *
 * DESIGN
 * Entries are keyed by (key, backend): a plan holds the state of the backend that ran it
 * (uploaded initializers, fixed buffers, a captured graph), so the same graph on two
 * backends of a device is two entries, while jobs and served batches share the cache's
 * bounds and counters. One list, most recently used first; a lookup is a linear scan
 * (caches hold tens of plans). A plan is out of the list while it runs; whether its backend
 * still lives when it comes back is told by the backend's id (backends.c), not its address,
 * which a later backend may reuse. Plans are unlinked under the device's mutex and freed
 * after it is released, since freeing one releases buffers that credit an account.
 * Evictions count plans dropped for the bounds and plans dropped after a failed run; a
 * backend's plans dropped when it is freed, and rtx_device_plans_clear, are not evictions.
 */
#include <string.h>

#include <openssl/evp.h>

#include "device/device-impl.h"

static void plan_free(struct rtx_device_plan *e) {
    if (!e) return;
    rtx_plan_free(e->plan); /* first: it may point into what release frees */
    if (e->release) e->release(e->owner);
    rtx_free(e);
}

void rtx__device_plans_free(struct rtx_device_plan *list) {
    while (list) {
        struct rtx_device_plan *next = list->next;
        plan_free(list);
        list = next;
    }
}

static void cache_unlink(struct plan_cache *c, struct rtx_device_plan *e) {
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

static void cache_push_front(struct plan_cache *c, struct rtx_device_plan *e) {
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

/* Moves e onto the front of *list (a list to free, linked through next). */
static void to_free(struct rtx_device_plan **list, struct rtx_device_plan *e) {
    e->next = *list;
    *list = e;
}

int rtx__device_plans_unlink(struct rtx_device *d, const struct rtx_backend *be,
                             struct rtx_device_plan **out) {
    int n = 0;
    for (struct rtx_device_plan *e = d->cache.head, *next; e; e = next) {
        next = e->next;
        if (be && e->be != be) continue;
        cache_unlink(&d->cache, e);
        to_free(out, e);
        n++;
    }
    return n;
}

/* Whether the backend e was made for still lives (under mu). */
static bool backend_live(struct rtx_device *d, const struct rtx_backend *be, uint64_t id) {
    const struct backend_rec *r = rtx__device_backend_find(d, be);
    return r && r->id == id;
}

/* Puts e first after dropping the least recently used plans until both bounds hold with it
 * (into *dropped, counted as evictions); e must fit the byte bound (under mu). */
static void cache_put(struct rtx_device *d, struct rtx_device_plan *e,
                      struct rtx_device_plan **dropped) {
    struct plan_cache *c = &d->cache;
    while (c->tail && (c->n + 1 > c->max_plans ||
                       (c->max_bytes > 0 && c->bytes + e->bytes > c->max_bytes))) {
        struct rtx_device_plan *victim = c->tail;
        cache_unlink(c, victim);
        to_free(dropped, victim);
        c->evictions++;
    }
    cache_push_front(c, e);
}

struct rtx_device_plan *rtx_device_plan_take(struct rtx_device *d, struct rtx_backend *be,
                                             const uint8_t key[RTX_DEVICE_PLAN_KEY_LEN]) {
    struct rtx_device_plan *found = NULL;
    pthread_mutex_lock(&d->mu);
    if (d->cache.max_plans > 0) {
        for (struct rtx_device_plan *e = d->cache.head; e && !found; e = e->next)
            if (e->be == be && memcmp(e->key, key, RTX_DEVICE_PLAN_KEY_LEN) == 0) found = e;
        if (found) {
            cache_unlink(&d->cache, found);
            d->cache.hits++;
        } else {
            d->cache.misses++;
        }
    }
    pthread_mutex_unlock(&d->mu);
    return found;
}

struct rtx_plan *rtx_device_plan_get(const struct rtx_device_plan *p) { return p->plan; }

void rtx_device_plan_return(struct rtx_device *d, struct rtx_device_plan *p, bool ok) {
    if (!p) return;
    struct rtx_device_plan *dropped = NULL;
    pthread_mutex_lock(&d->mu);
    struct plan_cache *c = &d->cache;
    if (ok && c->max_plans > 0 && (c->max_bytes == 0 || p->bytes <= c->max_bytes) &&
        backend_live(d, p->be, p->be_id)) {
        cache_put(d, p, &dropped);
    } else {
        to_free(&dropped, p);
        if (!ok) c->evictions++;
    }
    pthread_mutex_unlock(&d->mu);
    rtx__device_plans_free(dropped);
}

bool rtx_device_plan_keep(struct rtx_device *d, struct rtx_backend *be,
                          const uint8_t key[RTX_DEVICE_PLAN_KEY_LEN], struct rtx_plan *plan,
                          size_t bytes, void (*release)(void *owner), void *owner) {
    struct rtx_device_plan *e = rtx_calloc(1, sizeof *e);
    if (!e) { /* not kept: freed at once, as promised */
        rtx_plan_free(plan);
        if (release) release(owner);
        return false;
    }
    *e = (struct rtx_device_plan){.be = be, .plan = plan, .bytes = bytes, .release = release,
                                  .owner = owner};
    memcpy(e->key, key, RTX_DEVICE_PLAN_KEY_LEN);
    struct rtx_device_plan *dropped = NULL;
    bool kept = false;
    pthread_mutex_lock(&d->mu);
    struct plan_cache *c = &d->cache;
    const struct backend_rec *r = rtx__device_backend_find(d, be);
    if (r && c->max_plans > 0 && (c->max_bytes == 0 || bytes <= c->max_bytes)) {
        e->be_id = r->id;
        /* a plan already kept for (key, be) gives way: one entry per key and backend */
        for (struct rtx_device_plan *o = c->head; o; o = o->next)
            if (o->be == be && memcmp(o->key, key, RTX_DEVICE_PLAN_KEY_LEN) == 0) {
                cache_unlink(c, o);
                to_free(&dropped, o);
                break;
            }
        cache_put(d, e, &dropped);
        kept = true;
    } else {
        to_free(&dropped, e);
    }
    pthread_mutex_unlock(&d->mu);
    rtx__device_plans_free(dropped);
    return kept;
}

size_t rtx_device_plan_bytes(const struct rtx_plan *plan) { return rtx_plan_held_bytes(plan); }

int rtx_device_plans_clear(struct rtx_device *d) {
    struct rtx_device_plan *list = NULL;
    pthread_mutex_lock(&d->mu);
    int n = rtx__device_plans_unlink(d, NULL, &list);
    pthread_mutex_unlock(&d->mu);
    rtx__device_plans_free(list);
    return n;
}

/* ---- the plan key ---- */

static int digest_i64(EVP_MD_CTX *c, int64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)v >> (8 * i));
    return EVP_DigestUpdate(c, b, sizeof b);
}

int rtx_device_plan_key(const void *content, size_t len, const struct rtx_tensor *const *inputs,
                        int n_inputs, const struct rtx_limits *limits,
                        uint8_t key[RTX_DEVICE_PLAN_KEY_LEN], struct rtx_err *err) {
    static const char tag[] = "rtxd plan key v2";
    struct rtx_limits dl = rtx_limits_default();
    const struct rtx_limits *lim = limits ? limits : &dl; /* what rtx_plan_new uses for NULL */
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    if (!c) return rtx_err_set(err, RTX_ENOMEM, "out of memory hashing the graph");
    int ok = EVP_DigestInit_ex(c, EVP_sha256(), NULL) && EVP_DigestUpdate(c, tag, sizeof tag) &&
             digest_i64(c, (int64_t)len) && (len == 0 || EVP_DigestUpdate(c, content, len)) &&
             digest_i64(c, n_inputs);
    for (int i = 0; ok && i < n_inputs; i++) {
        const struct rtx_tensor *t = inputs[i];
        ok = digest_i64(c, t ? (int64_t)t->dtype : -1) && digest_i64(c, t ? t->ndim : -1);
        for (int k = 0; ok && t && k < t->ndim; k++) ok = digest_i64(c, t->dims[k]);
    }
    const int64_t lims[] = {lim->max_nodes,    lim->max_values,       lim->max_dims,
                            lim->max_elements, lim->max_tensor_bytes, lim->max_total_bytes};
    for (size_t i = 0; ok && i < sizeof lims / sizeof lims[0]; i++) ok = digest_i64(c, lims[i]);
    unsigned int n = 0;
    ok = ok && EVP_DigestFinal_ex(c, key, &n) && n == RTX_DEVICE_PLAN_KEY_LEN;
    EVP_MD_CTX_free(c);
    return ok ? 0 : rtx_err_set(err, RTX_EINTERNAL, "SHA-256 of the graph failed (OpenSSL)");
}
