/*
 * shm.c - the registry of clients' system (POSIX) shared-memory regions (daemon/shm.h): the
 * KServe v2 system shared-memory extension shared by the gRPC service and the HTTP server.
 *
 * DESIGN
 * The registry is a list of regions sorted by name under one mutex; registration and lookups
 * are rare next to inference, so a list is enough. Each region owns a reference to a mapping
 * (struct rtx_shm_ref): the object named by the key is opened with shm_open, checked to be long
 * enough (fstat), mapped read-write from the page boundary below the region's offset, and the
 * descriptor closed at once (the mapping keeps the memory). rtx_shm_map hands out the same
 * mapping with one more reference, so unregistering (or freeing the registry) while requests
 * still read or write a region only drops the registry's reference: the memory is unmapped
 * when the last request releases its reference. Reference counts are atomic; the mapping
 * itself never changes after registration.
 */
#include "daemon/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* A mapping of one registered region; the handle requests hold. */
struct rtx_shm_ref {
    atomic_int refs;
    void *base;     /* mmap's address (page aligned) */
    size_t map_len; /* bytes mapped from base */
    uint8_t *data;  /* the region's first byte (base + offset within the first page) */
    uint64_t bytes; /* the region's size, bytes */
};

struct region {
    struct region *next;
    char name[sizeof((struct rtx_shm_status *)0)->name];
    char key[sizeof((struct rtx_shm_status *)0)->key];
    uint64_t offset, byte_size; /* bytes */
    struct rtx_shm_ref *map;    /* the registry's reference */
};

struct rtx_shm {
    pthread_mutex_t mu;
    struct region *regions; /* sorted by name */
    int n;
};

int rtx_shm_new(struct rtx_shm **out, struct rtx_err *err) {
    if (!out) return rtx_err_set(err, RTX_EINVAL, "shm: no output pointer");
    *out = NULL;
    struct rtx_shm *r = rtx_calloc(1, sizeof *r);
    if (!r) return rtx_err_set(err, RTX_ENOMEM, "out of memory for the shared-memory registry");
    if (pthread_mutex_init(&r->mu, NULL) != 0) {
        rtx_free(r);
        return rtx_err_set(err, RTX_ENOMEM, "cannot create the shared-memory registry's lock");
    }
    *out = r;
    return 0;
}

void rtx_shm_ref_release(struct rtx_shm_ref *ref) {
    if (!ref) return;
    if (atomic_fetch_sub(&ref->refs, 1) != 1) return;
    munmap(ref->base, ref->map_len);
    rtx_free(ref);
}

static void region_free(struct region *g) {
    rtx_shm_ref_release(g->map);
    rtx_free(g);
}

void rtx_shm_free(struct rtx_shm *r) {
    if (!r) return;
    while (r->regions) {
        struct region *g = r->regions;
        r->regions = g->next;
        region_free(g);
    }
    pthread_mutex_destroy(&r->mu);
    rtx_free(r);
}

/* Opens and maps key's bytes [offset, offset + size). */
static int map_key(const char *key, uint64_t offset, uint64_t size, struct rtx_shm_ref **out,
                   struct rtx_err *err) {
    int fd = shm_open(key, O_RDWR, 0);
    if (fd < 0)
        return rtx_err_set(err, RTX_EIO, "shared memory key '%s' cannot be opened: %s", key,
                           strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return rtx_err_set(err, RTX_EIO, "shared memory key '%s': fstat failed: %s", key,
                           strerror(e));
    }
    uint64_t len = st.st_size > 0 ? (uint64_t)st.st_size : 0;
    if (offset > len || size > len - offset) {
        close(fd);
        return rtx_err_set(err, RTX_EIO,
                           "shared memory key '%s' holds %llu bytes: offset %llu + byte_size "
                           "%llu lies past its end",
                           key, (unsigned long long)len, (unsigned long long)offset,
                           (unsigned long long)size);
    }
    long page = sysconf(_SC_PAGESIZE);
    uint64_t pg = page > 0 ? (uint64_t)page : 4096;
    uint64_t start = offset / pg * pg;
    uint64_t map_len = offset - start + size;
    if (map_len > SIZE_MAX) {
        close(fd);
        return rtx_err_set(err, RTX_EIO, "shared memory key '%s': region too large to map", key);
    }
    struct rtx_shm_ref *m = rtx_calloc(1, sizeof *m);
    if (!m) {
        close(fd);
        return rtx_err_set(err, RTX_ENOMEM, "out of memory registering shared memory '%s'", key);
    }
    void *base = mmap(NULL, (size_t)map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)start);
    int e = errno;
    close(fd);
    if (base == MAP_FAILED) {
        rtx_free(m);
        return rtx_err_set(err, RTX_EIO, "shared memory key '%s' cannot be mapped: %s", key,
                           strerror(e));
    }
    atomic_init(&m->refs, 1);
    m->base = base;
    m->map_len = (size_t)map_len;
    m->data = (uint8_t *)base + (offset - start);
    m->bytes = size;
    *out = m;
    return 0;
}

int rtx_shm_register(struct rtx_shm *r, const char *name, const char *key, uint64_t offset,
                     uint64_t byte_size, struct rtx_err *err) {
    if (!r) return rtx_err_set(err, RTX_EINVAL, "shm: no registry");
    if (!name || !name[0])
        return rtx_err_set(err, RTX_EINVAL, "shared memory region: the name is empty");
    if (!key || !key[0])
        return rtx_err_set(err, RTX_EINVAL, "shared memory region '%s': the key is empty", name);
    if (strlen(name) >= sizeof((struct region *)0)->name)
        return rtx_err_set(err, RTX_EINVAL, "shared memory region name longer than %zu bytes",
                           sizeof((struct region *)0)->name - 1);
    if (strlen(key) >= sizeof((struct region *)0)->key)
        return rtx_err_set(err, RTX_EINVAL, "shared memory region '%s': key longer than %zu bytes",
                           name, sizeof((struct region *)0)->key - 1);
    if (byte_size == 0)
        return rtx_err_set(err, RTX_EINVAL, "shared memory region '%s': byte_size is 0", name);

    pthread_mutex_lock(&r->mu);
    struct region **at = &r->regions;
    while (*at && strcmp((*at)->name, name) < 0)
        at = &(*at)->next;
    bool taken = *at && strcmp((*at)->name, name) == 0;
    pthread_mutex_unlock(&r->mu);
    if (taken)
        return rtx_err_set(err, RTX_EINVAL,
                           "shared memory region '%s' is already registered (unregister it "
                           "first)",
                           name);

    struct region *g = rtx_calloc(1, sizeof *g);
    if (!g) return rtx_err_set(err, RTX_ENOMEM, "out of memory registering region '%s'", name);
    snprintf(g->name, sizeof g->name, "%s", name);
    snprintf(g->key, sizeof g->key, "%s", key);
    g->offset = offset;
    g->byte_size = byte_size;
    int rc = map_key(key, offset, byte_size, &g->map, err);
    if (rc != 0) {
        rtx_free(g);
        return rtx_err_prefix(err, "registering shared memory region '%s'", name);
    }

    /* insert; a racing registration of the same name may have won meanwhile */
    pthread_mutex_lock(&r->mu);
    at = &r->regions;
    while (*at && strcmp((*at)->name, name) < 0)
        at = &(*at)->next;
    taken = *at && strcmp((*at)->name, name) == 0;
    if (!taken) {
        g->next = *at;
        *at = g;
        r->n++;
    }
    pthread_mutex_unlock(&r->mu);
    if (taken) {
        region_free(g);
        return rtx_err_set(err, RTX_EINVAL,
                           "shared memory region '%s' is already registered (unregister it "
                           "first)",
                           name);
    }
    return 0;
}

int rtx_shm_unregister(struct rtx_shm *r, const char *name, struct rtx_err *err) {
    if (!r) return rtx_err_set(err, RTX_EINVAL, "shm: no registry");
    struct region *gone = NULL;
    pthread_mutex_lock(&r->mu);
    if (!name || !name[0]) {
        gone = r->regions;
        r->regions = NULL;
        r->n = 0;
    } else {
        for (struct region **at = &r->regions; *at; at = &(*at)->next) {
            if (strcmp((*at)->name, name) != 0) continue;
            gone = *at;
            *at = gone->next;
            gone->next = NULL;
            r->n--;
            break;
        }
    }
    pthread_mutex_unlock(&r->mu);
    if (!gone && name && name[0])
        return rtx_err_set(err, RTX_ENOTFOUND, "unable to find system shared memory region: '%s'",
                           name);
    while (gone) {
        struct region *g = gone;
        gone = g->next;
        region_free(g);
    }
    return 0;
}

int rtx_shm_list(struct rtx_shm *r, const char *name, struct rtx_shm_status **out, int *n,
                 struct rtx_err *err) {
    if (!r || !out || !n) return rtx_err_set(err, RTX_EINVAL, "shm: invalid arguments");
    *out = NULL;
    *n = 0;
    bool one = name && name[0];
    pthread_mutex_lock(&r->mu);
    size_t cap = one ? 1 : (size_t)r->n;
    struct rtx_shm_status *st = rtx_calloc(cap ? cap : 1, sizeof *st);
    if (!st) {
        pthread_mutex_unlock(&r->mu);
        return rtx_err_set(err, RTX_ENOMEM, "out of memory listing shared memory regions");
    }
    int k = 0;
    for (struct region *g = r->regions; g; g = g->next) {
        if (one && strcmp(g->name, name) != 0) continue;
        snprintf(st[k].name, sizeof st[k].name, "%s", g->name);
        snprintf(st[k].key, sizeof st[k].key, "%s", g->key);
        st[k].offset = g->offset;
        st[k].byte_size = g->byte_size;
        k++;
        if (one) break;
    }
    pthread_mutex_unlock(&r->mu);
    if (one && k == 0) {
        rtx_free(st);
        return rtx_err_set(err, RTX_ENOTFOUND, "unable to find system shared memory region: '%s'",
                           name);
    }
    *out = st;
    *n = k;
    return 0;
}

int rtx_shm_map(struct rtx_shm *r, const char *name, uint64_t offset, uint64_t byte_size,
                void **addr, struct rtx_shm_ref **ref, struct rtx_err *err) {
    if (!r || !addr || !ref) return rtx_err_set(err, RTX_EINVAL, "shm: invalid arguments");
    *addr = NULL;
    *ref = NULL;
    if (!name || !name[0])
        return rtx_err_set(err, RTX_EINVAL, "shared memory region: the name is empty");
    pthread_mutex_lock(&r->mu);
    struct region *g = r->regions;
    while (g && strcmp(g->name, name) != 0)
        g = g->next;
    if (!g) {
        pthread_mutex_unlock(&r->mu);
        return rtx_err_set(err, RTX_ENOTFOUND, "unable to find system shared memory region: '%s'",
                           name);
    }
    if (offset > g->byte_size || byte_size > g->byte_size - offset) {
        uint64_t size = g->byte_size;
        pthread_mutex_unlock(&r->mu);
        return rtx_err_set(err, RTX_EINVAL,
                           "shared memory region '%s' holds %llu bytes: offset %llu + byte_size "
                           "%llu exceeds it",
                           name, (unsigned long long)size, (unsigned long long)offset,
                           (unsigned long long)byte_size);
    }
    atomic_fetch_add(&g->map->refs, 1);
    *ref = g->map;
    *addr = g->map->data + offset;
    pthread_mutex_unlock(&r->mu);
    return 0;
}
