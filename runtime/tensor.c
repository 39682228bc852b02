/*
 * tensor.c - reference-counted tensors over reference-counted buffers; views, permutes,
 * contiguous copies and element access for slow paths.
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "runtime/runtime.h"

int64_t rtx_shape_numel(int ndim, const int64_t *dims) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= dims[i];
    return n;
}

static int check_shape(enum rtx_dtype dt, int ndim, const int64_t *dims, struct rtx_err *err) {
    if ((unsigned)dt >= RTX_DTYPE_COUNT) return rtx_err_set(err, RTX_EINVAL, "bad dtype %d", dt);
    if (ndim < 0 || ndim > RTX_MAX_DIMS)
        return rtx_err_set(err, RTX_EINVAL, "rank %d outside 0..%d", ndim, RTX_MAX_DIMS);
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (dims[i] < 0)
            return rtx_err_set(err, RTX_EINVAL, "dimension %d is negative (%lld)", i,
                               (long long)dims[i]);
        if (dims[i] > 0 && n > INT64_MAX / 8 / dims[i])
            return rtx_err_set(err, RTX_ELIMIT, "shape too large");
        n *= dims[i];
    }
    return 0;
}

static void set_contiguous_strides(struct rtx_tensor *t) {
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        t->strides[i] = s;
        s *= t->dims[i];
    }
}

static struct rtx_tensor *tensor_alloc(enum rtx_dtype dt, int ndim, const int64_t *dims) {
    struct rtx_tensor *t = rtx_calloc(1, sizeof *t);
    if (!t) return NULL;
    t->refcount = 1;
    t->dtype = dt;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->dims[i] = dims[i];
    set_contiguous_strides(t);
    return t;
}

static void no_release(void *ctx, void *data) {
    (void)ctx;
    (void)data;
}

int rtx_tensor_wrap(enum rtx_dtype dt, int ndim, const int64_t *dims, void *data, size_t bytes,
                    void (*release)(void *ctx, void *data), void *release_ctx,
                    struct rtx_tensor **out, struct rtx_err *err) {
    *out = NULL;
    int rc = check_shape(dt, ndim, dims, err);
    if (rc) return rc;
    size_t need = (size_t)rtx_shape_numel(ndim, dims) * rtx_dtype_size(dt);
    if (bytes < need)
        return rtx_err_set(err, RTX_EINVAL, "buffer of %zu bytes too small for %zu", bytes,
                           need);
    struct rtx_buffer *b = rtx_calloc(1, sizeof *b);
    struct rtx_tensor *t = tensor_alloc(dt, ndim, dims);
    if (!b || !t) {
        rtx_free(b);
        rtx_free(t);
        return rtx_err_set(err, RTX_ENOMEM, "out of memory allocating a tensor");
    }
    b->refcount = 1;
    b->data = data;
    b->bytes = bytes;
    b->release = release ? release : no_release;
    b->release_ctx = release_ctx;
    t->buf = b;
    *out = t;
    return 0;
}

int rtx_tensor_new(enum rtx_dtype dt, int ndim, const int64_t *dims, struct rtx_tensor **out,
                   struct rtx_err *err) {
    *out = NULL;
    int rc = check_shape(dt, ndim, dims, err);
    if (rc) return rc;
    size_t bytes = (size_t)rtx_shape_numel(ndim, dims) * rtx_dtype_size(dt);
    void *data = rtx_malloc_aligned(bytes);
    if (!data) return rtx_err_set(err, RTX_ENOMEM, "out of memory allocating %zu bytes", bytes);
    memset(data, 0, bytes);
    rc = rtx_tensor_wrap(dt, ndim, dims, data, bytes, NULL, NULL, out, err);
    if (rc) {
        rtx_free_aligned(data);
        return rc;
    }
    (*out)->buf->release = NULL; /* the buffer owns data: rtx_free_aligned */
    return 0;
}

void rtx_buffer_unref(struct rtx_buffer *b) {
    if (!b) return;
    if (atomic_fetch_sub_explicit((_Atomic int *)&b->refcount, 1, memory_order_acq_rel) != 1)
        return;
    if (b->release == no_release) {
        /* caller-owned memory */
    } else if (b->release) {
        b->release(b->release_ctx, b->data);
    } else {
        rtx_free_aligned(b->data);
    }
    rtx_free(b);
}

struct rtx_tensor *rtx_tensor_ref(struct rtx_tensor *t) {
    if (t) atomic_fetch_add_explicit((_Atomic int *)&t->refcount, 1, memory_order_relaxed);
    return t;
}

void rtx_tensor_unref(struct rtx_tensor *t) {
    if (!t) return;
    if (atomic_fetch_sub_explicit((_Atomic int *)&t->refcount, 1, memory_order_acq_rel) != 1)
        return;
    rtx_buffer_unref(t->buf);
    rtx_free(t);
}

int rtx_tensor_from_buffer(struct rtx_buffer *buf, size_t offset, enum rtx_dtype dt, int ndim,
                           const int64_t *dims, struct rtx_tensor **out, struct rtx_err *err) {
    *out = NULL;
    int rc = check_shape(dt, ndim, dims, err);
    if (rc) return rc;
    size_t bytes = (size_t)rtx_shape_numel(ndim, dims) * rtx_dtype_size(dt);
    if (offset > buf->bytes || bytes > buf->bytes - offset)
        return rtx_err_set(err, RTX_EINVAL, "tensor of %zu bytes at %zu outside a buffer of %zu",
                           bytes, offset, buf->bytes);
    struct rtx_tensor *t = tensor_alloc(dt, ndim, dims);
    if (!t) return rtx_err_set(err, RTX_ENOMEM, "out of memory allocating a tensor");
    t->offset = (int64_t)offset;
    t->buf = buf;
    atomic_fetch_add_explicit((_Atomic int *)&buf->refcount, 1, memory_order_relaxed);
    *out = t;
    return 0;
}

int rtx_tensor_view(const struct rtx_tensor *t, int ndim, const int64_t *dims,
                    const int64_t *strides, int64_t offset, struct rtx_tensor **out,
                    struct rtx_err *err) {
    *out = NULL;
    int rc = check_shape(t->dtype, ndim, dims, err);
    if (rc) return rc;
    /* the lowest and highest byte the view touches must lie inside the buffer */
    int64_t esz = (int64_t)rtx_dtype_size(t->dtype);
    int64_t lo = offset, hi = offset;
    bool empty = false;
    for (int i = 0; i < ndim; i++) {
        if (dims[i] == 0) empty = true;
        int64_t span = (dims[i] - 1) * strides[i] * esz;
        if (span < 0) lo += span; else hi += span;
    }
    if (!empty && (lo < 0 || hi + esz > (int64_t)t->buf->bytes))
        return rtx_err_set(err, RTX_EINVAL, "view outside its buffer");
    struct rtx_tensor *v = tensor_alloc(t->dtype, ndim, dims);
    if (!v) return rtx_err_set(err, RTX_ENOMEM, "out of memory allocating a view");
    for (int i = 0; i < ndim; i++) v->strides[i] = strides[i];
    v->offset = offset;
    v->buf = t->buf;
    atomic_fetch_add_explicit((_Atomic int *)&t->buf->refcount, 1, memory_order_relaxed);
    *out = v;
    return 0;
}

int rtx_tensor_permute(const struct rtx_tensor *t, const int *perm, struct rtx_tensor **out,
                       struct rtx_err *err) {
    int64_t dims[RTX_MAX_DIMS], strides[RTX_MAX_DIMS];
    unsigned seen = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (perm[i] < 0 || perm[i] >= t->ndim || (seen & (1u << perm[i]))) {
            *out = NULL;
            return rtx_err_set(err, RTX_EINVAL, "not a permutation of %d axes", t->ndim);
        }
        seen |= 1u << perm[i];
        dims[i] = t->dims[perm[i]];
        strides[i] = t->strides[perm[i]];
    }
    return rtx_tensor_view(t, t->ndim, dims, strides, t->offset, out, err);
}

bool rtx_tensor_is_contiguous(const struct rtx_tensor *t) {
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->dims[i] != 1 && t->strides[i] != s) return false;
        s *= t->dims[i];
    }
    return true;
}

int64_t rtx_tensor_numel(const struct rtx_tensor *t) { return rtx_shape_numel(t->ndim, t->dims); }

size_t rtx_tensor_nbytes(const struct rtx_tensor *t) {
    return (size_t)rtx_tensor_numel(t) * rtx_dtype_size(t->dtype);
}

void *rtx_tensor_data(const struct rtx_tensor *t) { return (char *)t->buf->data + t->offset; }

/* Byte offset of the element with logical row-major index i. */
static int64_t element_offset(const struct rtx_tensor *t, int64_t i) {
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        int64_t n = t->dims[d];
        off += (i % n) * t->strides[d];
        i /= n;
    }
    return off * (int64_t)rtx_dtype_size(t->dtype);
}

int rtx_tensor_contiguous(const struct rtx_tensor *t, struct rtx_tensor **out,
                          struct rtx_err *err) {
    if (rtx_tensor_is_contiguous(t)) {
        *out = rtx_tensor_ref((struct rtx_tensor *)t);
        return 0;
    }
    int rc = rtx_tensor_new(t->dtype, t->ndim, t->dims, out, err);
    if (rc) return rc;
    size_t esz = rtx_dtype_size(t->dtype);
    int64_t n = rtx_tensor_numel(t);
    const char *src = rtx_tensor_data(t);
    char *dst = rtx_tensor_data(*out);
    int inner = t->ndim - 1;
    int64_t run = t->dims[inner];
    if (t->strides[inner] == 1) {
        /* copy rows of the innermost dimension at once */
        for (int64_t i = 0; i < n; i += run)
            memcpy(dst + i * esz, src + element_offset(t, i), (size_t)run * esz);
    } else {
        for (int64_t i = 0; i < n; i++) memcpy(dst + i * esz, src + element_offset(t, i), esz);
    }
    return 0;
}

const char *rtx_shape_str(enum rtx_dtype dt, int ndim, const int64_t *dims, char *buf,
                          size_t len) {
    size_t pos = 0;
    int w = snprintf(buf, len, "%s[", rtx_dtype_name(dt));
    pos = w > 0 ? (size_t)w : 0;
    for (int i = 0; i < ndim && pos < len; i++) {
        w = snprintf(buf + pos, len - pos, i ? ",%lld" : "%lld", (long long)dims[i]);
        if (w > 0) pos += (size_t)w;
    }
    if (pos < len) snprintf(buf + pos, len - pos, "]");
    return buf;
}

double rtx_tensor_get(const struct rtx_tensor *t, int64_t i) {
    const char *p = (const char *)rtx_tensor_data(t) + element_offset(t, i);
    switch (t->dtype) {
    case RTX_F32: return *(const float *)p;
    case RTX_F16: return rtx_f16_to_f32(*(const uint16_t *)p);
    case RTX_BF16: return rtx_bf16_to_f32(*(const uint16_t *)p);
    case RTX_I8: return *(const int8_t *)p;
    case RTX_I32: return *(const int32_t *)p;
    case RTX_I64: return (double)*(const int64_t *)p;
    case RTX_U8: return *(const uint8_t *)p;
    case RTX_BOOL: return *(const uint8_t *)p ? 1.0 : 0.0;
    default: return NAN;
    }
}

/* v clamped to [lo, hi], NaN to 0: the integer conversions below are then defined. */
static double clamp_int(double v, double lo, double hi) {
    if (isnan(v)) return 0;
    return v < lo ? lo : (v > hi ? hi : v);
}

void rtx_tensor_set(struct rtx_tensor *t, int64_t i, double v) {
    char *p = (char *)rtx_tensor_data(t) + element_offset(t, i);
    if (!rtx_dtype_is_float(t->dtype) && t->dtype != RTX_BOOL) {
        switch (t->dtype) {
        case RTX_I8: v = clamp_int(v, INT8_MIN, INT8_MAX); break;
        case RTX_I32: v = clamp_int(v, INT32_MIN, INT32_MAX); break;
        case RTX_U8: v = clamp_int(v, 0, UINT8_MAX); break;
        default: v = clamp_int(v, -0x1p63, 0x1p63); break; /* 2^63 saturates below */
        }
    }
    switch (t->dtype) {
    case RTX_F32: *(float *)p = (float)v; break;
    case RTX_F16: *(uint16_t *)p = rtx_f32_to_f16((float)v); break;
    case RTX_BF16: *(uint16_t *)p = rtx_f32_to_bf16((float)v); break;
    case RTX_I8: *(int8_t *)p = (int8_t)v; break;
    case RTX_I32: *(int32_t *)p = (int32_t)v; break;
    case RTX_I64: *(int64_t *)p = v >= 0x1p63 ? INT64_MAX : (int64_t)v; break;
    case RTX_U8: *(uint8_t *)p = (uint8_t)v; break;
    case RTX_BOOL: *(uint8_t *)p = v != 0; break;
    default: break;
    }
}

/* ---- random data ---- */

void rtx_rng_seed(struct rtx_rng *r, uint64_t seed) {
    uint64_t z = seed + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    r->s = (z ^ (z >> 31)) | 1;
}

uint64_t rtx_rng_next(struct rtx_rng *r) {
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545f4914f6cdd1dull;
}

int rtx_tensor_random(struct rtx_rng *r, enum rtx_dtype dt, int ndim, const int64_t *dims,
                      struct rtx_tensor **out, struct rtx_err *err) {
    int64_t d[RTX_MAX_DIMS];
    if (ndim < 0 || ndim > RTX_MAX_DIMS) {
        *out = NULL;
        return rtx_err_set(err, RTX_EINVAL, "rank %d outside 0..%d", ndim, RTX_MAX_DIMS);
    }
    for (int i = 0; i < ndim; i++) d[i] = dims[i] < 0 ? 1 : dims[i];
    int rc = rtx_tensor_new(dt, ndim, d, out, err);
    if (rc < 0) return rc;
    int64_t n = rtx_tensor_numel(*out);
    for (int64_t i = 0; i < n; i++) {
        double x;
        if (rtx_dtype_is_float(dt))
            x = (double)(rtx_rng_next(r) >> 11) * 0x1.0p-53 * 2.0 - 1.0;
        else if (dt == RTX_BOOL)
            x = (double)(rtx_rng_next(r) >> 63);
        else
            x = (double)(rtx_rng_next(r) % 10);
        rtx_tensor_set(*out, i, x);
    }
    return 0;
}
