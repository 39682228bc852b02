/*
 * safetensors.c - safetensors weight files: parsing and checking the header, mapping the file
 * read-only, and tensors over the mapped bytes.
 *
 * DESIGN
 * The format (huggingface/safetensors): 8 bytes of little-endian header length N, N bytes of
 * a UTF-8 JSON object {"NAME": {"dtype": "F32", "shape": [..], "data_offsets": [BEGIN, END]},
 * ..., "__metadata__": {"k": "v"}}, then the data section; offsets are relative to it. The
 * whole file is mapped with mmap(PROT_READ, MAP_PRIVATE) once, and each tensor is an
 * rtx_tensor_wrap view of its bytes (no copy) that holds a reference to the mapping; the file
 * is unmapped when the loader and every tensor have dropped theirs. Writing through a view
 * faults, which is what read-only weights should do. Everything in the header is checked
 * before a single tensor is made, as the reference implementation does: known dtype, shape,
 * END - BEGIN = numel * dtype size, END within the data section, each tensor aligned to its
 * element size in the file (so typed loads are aligned in the mapping), no overlap, and no hole
 * (the tensors tile the data section, which the format requires).
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/formats.h"

static const struct {
    const char *name;
    enum rtx_dtype dt;
} st_dtypes[] = {
    {"F32", RTX_F32}, {"F16", RTX_F16}, {"BF16", RTX_BF16}, {"I8", RTX_I8},
    {"I32", RTX_I32}, {"I64", RTX_I64}, {"U8", RTX_U8},     {"BOOL", RTX_BOOL},
};

/* Safetensors dtypes that exist but rtxd has no dtype for. */
static const char *const st_unsupported[] = {"F64", "I16", "U16", "U32", "U64", "F8_E4M3",
                                             "F8_E5M2", NULL};

void rtx_safetensors_entries_free(struct rtx_safetensors_entry *e, int n) {
    if (!e) return;
    for (int i = 0; i < n; i++)
        rtx_free(e[i].name);
    rtx_free(e);
}

static int cmp_begin(const void *a, const void *b) {
    const struct rtx_safetensors_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* One tensor's header entry. */
static int parse_entry(const char *what, const char *name, json_t *v, uint64_t data_bytes,
                       struct rtx_safetensors_entry *e, struct rtx_err *err) {
    if (!json_is_object(v))
        return rtx_err_set(err, RTX_EFORMAT, "%s: tensor '%s': expected an object", what, name);
    json_t *dt = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape");
    json_t *offs = json_object_get(v, "data_offsets");
    if (!json_is_string(dt))
        return rtx_err_set(err, RTX_EFORMAT, "%s: tensor '%s': dtype missing or not a string",
                           what, name);
    const char *dts = json_string_value(dt);
    size_t k = 0;
    while (k < sizeof st_dtypes / sizeof st_dtypes[0] && strcmp(st_dtypes[k].name, dts) != 0)
        k++;
    if (k == sizeof st_dtypes / sizeof st_dtypes[0]) {
        for (int u = 0; st_unsupported[u]; u++)
            if (strcmp(st_unsupported[u], dts) == 0)
                return rtx_err_set(err, RTX_EUNSUPPORTED,
                                   "%s: tensor '%s': dtype %s is not supported by rtxd", what,
                                   name, dts);
        return rtx_err_set(err, RTX_EFORMAT, "%s: tensor '%s': unknown dtype \"%.32s\"", what,
                           name, dts);
    }
    e->dtype = st_dtypes[k].dt;
    if (!json_is_array(shape))
        return rtx_err_set(err, RTX_EFORMAT, "%s: tensor '%s': shape missing or not an array",
                           what, name);
    if (json_array_size(shape) > RTX_MAX_DIMS)
        return rtx_err_set(err, RTX_EFORMAT, "%s: tensor '%s': %zu dimensions (at most %d)",
                           what, name, json_array_size(shape), RTX_MAX_DIMS);
    e->ndim = (int)json_array_size(shape);
    uint64_t numel = 1;
    bool overflow = false;
    for (int d = 0; d < e->ndim; d++) {
        json_t *x = json_array_get(shape, (size_t)d);
        if (!json_is_integer(x) || json_integer_value(x) < 0)
            return rtx_err_set(err, RTX_EFORMAT,
                               "%s: tensor '%s': shape[%d] is not a non-negative integer", what,
                               name, d);
        e->dims[d] = json_integer_value(x);
        if (e->dims[d] != 0 && numel > UINT64_MAX / (uint64_t)e->dims[d]) overflow = true;
        numel *= (uint64_t)e->dims[d];
    }
    if (!json_is_array(offs) || json_array_size(offs) != 2 ||
        !json_is_integer(json_array_get(offs, 0)) || !json_is_integer(json_array_get(offs, 1)))
        return rtx_err_set(err, RTX_EFORMAT,
                           "%s: tensor '%s': data_offsets must be [BEGIN, END] integers", what,
                           name);
    json_int_t b = json_integer_value(json_array_get(offs, 0));
    json_int_t en = json_integer_value(json_array_get(offs, 1));
    if (b < 0 || en < b)
        return rtx_err_set(err, RTX_EFORMAT, "%s: tensor '%s': data_offsets [%lld, %lld] invalid",
                           what, name, (long long)b, (long long)en);
    e->begin = (uint64_t)b;
    e->end = (uint64_t)en;
    if (e->end > data_bytes)
        return rtx_err_set(err, RTX_EFORMAT,
                           "%s: tensor '%s': data_offsets end %llu beyond the %llu bytes of data "
                           "(file truncated?)",
                           what, name, (unsigned long long)e->end,
                           (unsigned long long)data_bytes);
    size_t es = rtx_dtype_size(e->dtype);
    if (overflow || numel > UINT64_MAX / es || numel * es != e->end - e->begin)
        return rtx_err_set(err, RTX_EFORMAT,
                           "%s: tensor '%s': %llu bytes in data_offsets, the shape needs %s%llu",
                           what, name, (unsigned long long)(e->end - e->begin),
                           overflow ? "more than " : "",
                           overflow ? (unsigned long long)UINT64_MAX
                                    : (unsigned long long)(numel * es));
    return 0;
}

int rtx_safetensors_parse(const void *data, size_t len, const char *what,
                          struct rtx_safetensors_entry **entries, int *n, uint64_t *data_off,
                          struct rtx_err *err) {
    *entries = NULL;
    *n = 0;
    const uint8_t *p = data;
    if (len < 8)
        return rtx_err_set(err, RTX_EFORMAT, "%s: %zu bytes, too short for the header length",
                           what, len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | p[i];
    if (hlen > RTX_SAFETENSORS_MAX_HEADER)
        return rtx_err_set(err, RTX_EFORMAT, "%s: header length %llu exceeds the limit of %llu",
                           what, (unsigned long long)hlen,
                           (unsigned long long)RTX_SAFETENSORS_MAX_HEADER);
    if (hlen > len - 8)
        return rtx_err_set(err, RTX_EFORMAT,
                           "%s: header length %llu beyond the end of the file (%zu bytes)", what,
                           (unsigned long long)hlen, len);
    if (hlen < 2 || p[8] != '{')
        return rtx_err_set(err, RTX_EFORMAT, "%s: the header is not a JSON object", what);
    uint64_t dbytes = len - 8 - hlen;
    json_error_t je;
    json_t *root = json_loadb((const char *)p + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return rtx_err_set(err, RTX_EFORMAT, "%s: header JSON: %s (at byte %d)", what, je.text,
                           je.position);
    int rc = 0;
    if (!json_is_object(root)) {
        rc = rtx_err_set(err, RTX_EFORMAT, "%s: the header is not a JSON object", what);
        goto out;
    }
    size_t cap = json_object_size(root);
    struct rtx_safetensors_entry *es = rtx_calloc(cap + 1, sizeof *es);
    if (!es) {
        rc = rtx_err_set(err, RTX_ENOMEM, "%s: out of memory", what);
        goto out;
    }
    int m = 0;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0) {
            const char *mk;
            json_t *mv;
            if (!json_is_object(v)) {
                rc = rtx_err_set(err, RTX_EFORMAT, "%s: __metadata__ is not an object", what);
                break;
            }
            json_object_foreach(v, mk, mv) {
                if (!json_is_string(mv)) {
                    rc = rtx_err_set(err, RTX_EFORMAT,
                                     "%s: __metadata__['%s'] is not a string", what, mk);
                    break;
                }
            }
            if (rc) break;
            continue;
        }
        if (key[0] == '\0') {
            rc = rtx_err_set(err, RTX_EFORMAT, "%s: a tensor has an empty name", what);
            break;
        }
        if ((rc = parse_entry(what, key, v, dbytes, &es[m], err))) break;
        if (!(es[m].name = rtx_strdup(key))) {
            rc = rtx_err_set(err, RTX_ENOMEM, "%s: out of memory", what);
            break;
        }
        m++;
    }
    if (rc == 0) {
        qsort(es, (size_t)m, sizeof *es, cmp_begin);
        uint64_t at = 0;
        for (int i = 0; i < m && rc == 0; i++) {
            size_t a = rtx_dtype_size(es[i].dtype);
            if (es[i].begin < at)
                rc = rtx_err_set(err, RTX_EFORMAT, "%s: tensors '%s' and '%s' overlap", what,
                                 es[i - 1].name, es[i].name);
            else if (es[i].begin > at)
                rc = rtx_err_set(err, RTX_EFORMAT,
                                 "%s: bytes [%llu, %llu) of the data section belong to no "
                                 "tensor (before '%s')",
                                 what, (unsigned long long)at, (unsigned long long)es[i].begin,
                                 es[i].name);
            else if ((8 + hlen + es[i].begin) % a != 0)
                rc = rtx_err_set(err, RTX_EFORMAT,
                                 "%s: tensor '%s' at file offset %llu is not aligned to its "
                                 "%zu-byte elements",
                                 what, es[i].name, (unsigned long long)(8 + hlen + es[i].begin),
                                 a);
            at = es[i].end > at ? es[i].end : at;
        }
        if (rc == 0 && at != dbytes)
            rc = rtx_err_set(err, RTX_EFORMAT,
                             "%s: %llu bytes after the last tensor belong to no tensor", what,
                             (unsigned long long)(dbytes - at));
    }
    if (rc) {
        rtx_safetensors_entries_free(es, m);
        goto out;
    }
    *entries = es;
    *n = m;
    *data_off = 8 + hlen;
out:
    json_decref(root);
    return rc;
}

int rtx_safetensors_open(const char *path, struct rtx_safetensors **out, struct rtx_err *err) {
    *out = NULL;
    struct rtx_safetensors *st = rtx_calloc(1, sizeof *st);
    if (!st || !(st->path = rtx_strdup(path))) {
        rtx_free(st);
        return rtx_err_set(err, RTX_ENOMEM, "%s: out of memory", path);
    }
    atomic_init(&st->refs, 1);
    int rc = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        rc = rtx_err_set(err, RTX_EIO, "%s: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        rc = rtx_err_set(err, RTX_EIO, "%s: not a regular file", path);
        goto fail;
    }
    st->map_bytes = (size_t)sb.st_size;
    if (st->map_bytes > 0) {
        st->map = mmap(NULL, st->map_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
        if (st->map == MAP_FAILED) {
            st->map = NULL;
            rc = rtx_err_set(err, RTX_EIO, "%s: mmap: %s", path, strerror(errno));
            goto fail;
        }
    }
    close(fd);
    fd = -1;
    uint64_t off = 0;
    if ((rc = rtx_safetensors_parse(st->map, st->map_bytes, path, &st->entries, &st->n, &off, err)))
        goto fail;
    st->data = (const uint8_t *)st->map + off;
    st->data_bytes = st->map_bytes - off;
    *out = st;
    return 0;
fail:
    if (fd >= 0) close(fd);
    rtx_safetensors_unref(st);
    return rc;
}

void rtx_safetensors_unref(struct rtx_safetensors *st) {
    if (!st || atomic_fetch_sub(&st->refs, 1) != 1) return;
    if (st->map) munmap(st->map, st->map_bytes);
    rtx_safetensors_entries_free(st->entries, st->n);
    rtx_free(st->path);
    rtx_free(st);
}

int rtx_safetensors_find(const struct rtx_safetensors *st, const char *name) {
    for (int i = 0; i < st->n; i++)
        if (strcmp(st->entries[i].name, name) == 0) return i;
    return -1;
}

static void release_mapping(void *ctx, void *data) {
    (void)data;
    rtx_safetensors_unref(ctx);
}

int rtx_safetensors_tensor(struct rtx_safetensors *st, int i, struct rtx_tensor **out,
                           struct rtx_err *err) {
    const struct rtx_safetensors_entry *e = &st->entries[i];
    atomic_fetch_add(&st->refs, 1);
    /* the views never write: the const goes with the read-only mapping */
    void *p = (void *)(uintptr_t)(st->data + e->begin);
    int rc = rtx_tensor_wrap(e->dtype, e->ndim, e->dims, p, (size_t)(e->end - e->begin),
                             release_mapping, st, out, err);
    if (rc) {
        atomic_fetch_sub(&st->refs, 1);
        return rtx_err_prefix(err, "%s: tensor '%s'", st->path, e->name);
    }
    return 0;
}
