/*
 * const-cache.c - device copies of constant host tensors, shared by every plan that runs on
 * one backend (runtime-impl.h, rtx__const_acquire).
 *
 * DESIGN
 * A plan on a device backend needs its graph's constants (weights) in device memory. Plans
 * of the same weights at other shapes - an ONNX model instantiated for each batch size, a
 * served model's batch shapes - hold the very same host tensors, so the copies are kept per
 * backend, keyed by the host tensor's address: the first plan uploads, the others take the
 * kept copy, and a model served at 32 batch sizes holds its weights on the device once, not
 * 32 times. An entry holds a reference to its host tensor (so the address cannot be reused by
 * another tensor while the entry lives) and to the device copy, and counts its users; the
 * last user's release drops it, so weights of plans that are gone (a finished job's) never
 * stay behind. The cache is reference counted: the backend holds one reference until it is
 * freed, and every use one more, so a plan that outlives its backend can still release
 * (device buffers outlive their backend). A backend may keep its own forms of a constant with
 * the entry (rtx__const_derived: the CPU's packed weights), made on first use under the mutex
 * and dropped with the entry; on host backends the entry's copy is the host tensor itself.
 * Open addressing with linear probing, deletion by
 * shifting back the entries after the removed one; one mutex (backends are driven by one
 * thread at a time, but nothing here relies on that). Uploads happen under the mutex.
 */
#include <pthread.h>
#include <stdint.h>

#include "runtime/backend-impl.h"
#include "runtime/runtime-impl.h"

struct derived {
    uint32_t kind;
    size_t bytes;
    void *data;
    void (*drop)(void *data);
    struct derived *next;
};

struct entry {
    const struct rtx_tensor *host; /* NULL: a free slot */
    struct rtx_tensor *dev;
    int users;
    struct derived *derived;       /* the backend's own forms of it (rtx__const_derived) */
};

struct rtx__const_cache {
    pthread_mutex_t mu;
    int refs;            /* the backend's, until it is freed, and one per use */
    struct entry *slots; /* capacity a power of two, at most half full */
    int cap, n;
    size_t derived_bytes; /* held by the entries' derived forms */
};

static size_t slot_of(const struct rtx__const_cache *c, const struct rtx_tensor *host) {
    uint64_t h = (uint64_t)(uintptr_t)host * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) & (size_t)(c->cap - 1);
}

/* The slot holding host, or the free slot where it would go. */
static struct entry *find(struct rtx__const_cache *c, const struct rtx_tensor *host) {
    size_t i = slot_of(c, host);
    while (c->slots[i].host && c->slots[i].host != host) i = (i + 1) & (size_t)(c->cap - 1);
    return &c->slots[i];
}

static int grow(struct rtx__const_cache *c) {
    int ncap = c->cap ? 2 * c->cap : 64;
    struct entry *old = c->slots, *nv = rtx_calloc((size_t)ncap, sizeof *nv);
    if (nv == NULL) return RTX_ENOMEM;
    int ocap = c->cap;
    c->slots = nv;
    c->cap = ncap;
    for (int i = 0; i < ocap; i++)
        if (old[i].host) *find(c, old[i].host) = old[i];
    rtx_free(old);
    return 0;
}

/* Removes the entry in slot e, moving later entries of its probe run back. */
static void remove_at(struct rtx__const_cache *c, struct entry *e) {
    size_t mask = (size_t)(c->cap - 1), i = (size_t)(e - c->slots), j = i;
    c->slots[i] = (struct entry){0};
    c->n--;
    for (;;) {
        j = (j + 1) & mask;
        if (!c->slots[j].host) return;
        size_t home = slot_of(c, c->slots[j].host);
        /* the entry at j may fill the hole at i when its home is not in (i, j] cyclically */
        bool keep = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (keep) continue;
        c->slots[i] = c->slots[j];
        c->slots[j] = (struct entry){0};
        i = j;
    }
}

static void unref_cache(struct rtx__const_cache *c) {
    pthread_mutex_lock(&c->mu);
    bool last = --c->refs == 0;
    pthread_mutex_unlock(&c->mu);
    if (!last) return;
    pthread_mutex_destroy(&c->mu);
    rtx_free(c->slots);
    rtx_free(c);
}

/* be's cache, made on first use. */
static struct rtx__const_cache *cache_of(struct rtx_backend *be, struct rtx_err *err) {
    struct rtx__const_cache *c = __atomic_load_n(&be->consts, __ATOMIC_ACQUIRE);
    if (c) return c;
    c = rtx_calloc(1, sizeof *c);
    if (c == NULL || pthread_mutex_init(&c->mu, NULL) != 0) {
        rtx_free(c);
        rtx_err_set(err, RTX_ENOMEM, "%s: out of memory for the constants cache",
                    rtx_backend_name(be));
        return NULL;
    }
    c->refs = 1;
    struct rtx__const_cache *none = NULL;
    if (__atomic_compare_exchange_n(&be->consts, &none, c, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
        return c;
    unref_cache(c); /* another thread made one first */
    return none;
}

int rtx__const_acquire(struct rtx_backend *be, const struct rtx_tensor *host,
                       struct rtx__const_cache **cache, struct rtx_tensor **dev,
                       struct rtx_err *err) {
    *dev = NULL;
    struct rtx__const_cache *c = cache_of(be, err);
    if (c == NULL) return RTX_ENOMEM;
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    if (2 * (c->n + 1) > c->cap && grow(c) != 0) {
        rc = rtx_err_set(err, RTX_ENOMEM, "%s: out of memory for the constants cache",
                         rtx_backend_name(be));
    } else {
        struct entry *e = find(c, host);
        if (e->host == NULL) {
            struct rtx_tensor *d = NULL;
            rc = rtx_backend_upload(be, host, &d, err);
            if (rc == 0) {
                *e = (struct entry){rtx_tensor_ref((struct rtx_tensor *)host), d, 0, NULL};
                c->n++;
            }
        }
        if (rc == 0) {
            e->users++;
            c->refs++;
            *dev = rtx_tensor_ref(e->dev);
            *cache = c;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void rtx__const_release(struct rtx__const_cache *c, const struct rtx_tensor *host) {
    if (c == NULL || host == NULL) return;
    struct rtx_tensor *drop_host = NULL, *drop_dev = NULL;
    struct derived *drop_derived = NULL;
    pthread_mutex_lock(&c->mu);
    struct entry *e = c->cap ? find(c, host) : NULL;
    if (e && e->host && --e->users == 0) {
        drop_host = (struct rtx_tensor *)e->host;
        drop_dev = e->dev;
        drop_derived = e->derived;
        for (struct derived *d = drop_derived; d; d = d->next) c->derived_bytes -= d->bytes;
        remove_at(c, e);
    }
    pthread_mutex_unlock(&c->mu);
    while (drop_derived) {
        struct derived *next = drop_derived->next;
        drop_derived->drop(drop_derived->data);
        rtx_free(drop_derived);
        drop_derived = next;
    }
    rtx_tensor_unref(drop_dev);
    rtx_tensor_unref(drop_host);
    unref_cache(c);
}

void *rtx__const_derived(struct rtx_backend *be, const struct rtx_tensor *t, uint32_t kind,
                         size_t bytes, void *(*make)(void *ctx, const struct rtx_tensor *t),
                         void *ctx, void (*drop)(void *data)) {
    struct rtx__const_cache *c = be ? __atomic_load_n(&be->consts, __ATOMIC_ACQUIRE) : NULL;
    if (c == NULL || t == NULL) return NULL;
    void *data = NULL;
    pthread_mutex_lock(&c->mu);
    struct entry *e = c->cap ? find(c, t) : NULL;
    if (e && e->host && e->dev == t && e->users > 0) {
        struct derived *d = e->derived;
        while (d && d->kind != kind) d = d->next;
        if (d) {
            data = d->data;
        } else if ((d = rtx_calloc(1, sizeof *d))) {
            d->data = make(ctx, t);
            if (d->data) {
                *d = (struct derived){kind, bytes, d->data, drop, e->derived};
                e->derived = d;
                c->derived_bytes += bytes;
                data = d->data;
            } else {
                rtx_free(d);
            }
        }
    }
    pthread_mutex_unlock(&c->mu);
    return data;
}

size_t rtx__const_derived_bytes(struct rtx_backend *be) {
    struct rtx__const_cache *c = be ? __atomic_load_n(&be->consts, __ATOMIC_ACQUIRE) : NULL;
    if (c == NULL) return 0;
    pthread_mutex_lock(&c->mu);
    size_t n = c->derived_bytes;
    pthread_mutex_unlock(&c->mu);
    return n;
}

void rtx__const_cache_close(struct rtx_backend *be) {
    struct rtx__const_cache *c = __atomic_exchange_n(&be->consts, NULL, __ATOMIC_ACQ_REL);
    if (c) unref_cache(c);
}

int rtx__const_cache_entries(struct rtx_backend *be) {
    struct rtx__const_cache *c = be ? __atomic_load_n(&be->consts, __ATOMIC_ACQUIRE) : NULL;
    if (c == NULL) return 0;
    pthread_mutex_lock(&c->mu);
    int n = c->n;
    pthread_mutex_unlock(&c->mu);
    return n;
}
