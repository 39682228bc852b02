/*
 * tensor.c - librtx dtypes and tensors: the dtype table built from RTX_CLIENT_DTYPE_MAP,
 * tensors that own their data, checks of caller-made tensors, and the conversions to
 * rtx.v1.Tensor (borrowing for requests, copying for graphs).
 */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client/client-impl.h"

static const struct {
    const char *name;
    size_t size; /* bytes per element */
} dtype_table[RTX_CLIENT_DTYPE_COUNT] = {
    [RTX_CLIENT_DTYPE_UNSPECIFIED] = {"?", 0},
#define RTX_CLIENT_DTYPE_ROW(name, str, size) [RTX_CLIENT_DTYPE_##name] = {str, size},
    RTX_CLIENT_DTYPE_MAP(RTX_CLIENT_DTYPE_ROW)
#undef RTX_CLIENT_DTYPE_ROW
};

/* The public enum is the wire enum: a value passes between them unchanged. */
#define RTX_CLIENT_DTYPE_SAME(name, str, size)                                                  \
    static_assert((int)RTX_CLIENT_DTYPE_##name == (int)RTX__V1__DATA_TYPE__DATA_TYPE_##name,    \
                  "dtype " str " matches rtx.v1.DataType");
RTX_CLIENT_DTYPE_MAP(RTX_CLIENT_DTYPE_SAME)
#undef RTX_CLIENT_DTYPE_SAME

static bool dtype_valid(enum rtx_client_dtype dt) {
    return dt > RTX_CLIENT_DTYPE_UNSPECIFIED && dt < RTX_CLIENT_DTYPE_COUNT;
}

const char *rtx_client_dtype_name(enum rtx_client_dtype dt) {
    return dtype_valid(dt) ? dtype_table[dt].name : "?";
}

size_t rtx_client_dtype_size(enum rtx_client_dtype dt) {
    return dtype_valid(dt) ? dtype_table[dt].size : 0;
}

int rtx_client_dtype_from_name(const char *name, enum rtx_client_dtype *out) {
    for (int dt = 1; name && dt < RTX_CLIENT_DTYPE_COUNT; dt++) {
        if (strcmp(name, dtype_table[dt].name) == 0) {
            *out = (enum rtx_client_dtype)dt;
            return 0;
        }
    }
    return RTX_CLIENT_EINVAL;
}

int64_t rtx_client_shape_numel(int ndim, const int64_t *dims) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (dims[i] < 0) return -1;
        if (dims[i] != 0 && n > INT64_MAX / dims[i]) return -1;
        n *= dims[i];
    }
    return n;
}

/* Bytes of a tensor of this dtype and shape, or -1 (err set) when the shape is invalid. */
static int64_t shape_bytes(enum rtx_client_dtype dt, int ndim, const int64_t *dims,
                           const char *what, struct rtx_client_err *err) {
    if (!dtype_valid(dt)) {
        rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "%s: invalid dtype %d", what, (int)dt);
        return -1;
    }
    if (ndim < 0 || ndim > RTX_CLIENT_MAX_DIMS || (ndim > 0 && !dims)) {
        rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "%s: rank %d (0..%d)", what, ndim,
                        RTX_CLIENT_MAX_DIMS);
        return -1;
    }
    int64_t n = rtx_client_shape_numel(ndim, dims);
    int64_t size = (int64_t)dtype_table[dt].size;
    if (n < 0 || n > INT64_MAX / size) {
        rtx__client_err(err, RTX_CLIENT_EINVAL, -1,
                        "%s: invalid shape (negative or overflowing dimensions)", what);
        return -1;
    }
    return n * size;
}

int rtx__client_tensor_check(const struct rtx_client_tensor *t, const char *what,
                             struct rtx_client_err *err) {
    if (!t) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "%s: no tensor", what);
    int64_t bytes = shape_bytes(t->dtype, t->ndim, t->dims, what, err);
    if (bytes < 0) return RTX_CLIENT_EINVAL;
    if ((uint64_t)bytes != (uint64_t)t->bytes)
        return rtx__client_err(err, RTX_CLIENT_EINVAL, -1,
                               "%s: %zu bytes of data, the shape needs %lld", what, t->bytes,
                               (long long)bytes);
    if (t->bytes > 0 && !t->data)
        return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "%s: no data", what);
    return 0;
}

int rtx_client_tensor_new(const char *name, enum rtx_client_dtype dt, int ndim,
                          const int64_t *dims, const void *data, struct rtx_client_tensor **out,
                          struct rtx_client_err *err) {
    if (!out) return rtx__client_err(err, RTX_CLIENT_EINVAL, -1, "no output pointer");
    *out = NULL;
    int64_t bytes = shape_bytes(dt, ndim, dims, name && *name ? name : "tensor", err);
    if (bytes < 0) return RTX_CLIENT_EINVAL;
    if ((uint64_t)bytes > SIZE_MAX)
        return rtx__client_err(err, RTX_CLIENT_ENOMEM, -1, "tensor of %lld bytes",
                               (long long)bytes);
    struct rtx_client_tensor *t = calloc(1, sizeof *t);
    char *name_copy = strdup(name ? name : "");
    void *mem = calloc(1, bytes ? (size_t)bytes : 1);
    if (!t || !name_copy || !mem) {
        free(t);
        free(name_copy);
        free(mem);
        return rtx__client_err(err, RTX_CLIENT_ENOMEM, -1, "out of memory");
    }
    if (data && bytes) memcpy(mem, data, (size_t)bytes);
    t->name = name_copy;
    t->dtype = dt;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        t->dims[i] = dims[i];
    t->data = mem;
    t->bytes = (size_t)bytes;
    t->owned = true;
    *out = t;
    rtx__client_err_clear(err);
    return 0;
}

static void tensor_release(struct rtx_client_tensor *t) {
    if (!t->owned) return;
    free((void *)t->name);
    free(t->data);
    t->name = NULL;
    t->data = NULL;
}

void rtx_client_tensor_free(struct rtx_client_tensor *t) {
    if (!t) return;
    tensor_release(t);
    free(t);
}

void rtx_client_tensors_free(struct rtx_client_tensor *ts, int n) {
    if (!ts) return;
    for (int i = 0; i < n; i++)
        tensor_release(&ts[i]);
    free(ts);
}

void rtx__client_tensor_borrow(const struct rtx_client_tensor *t, Rtx__V1__Tensor *pb) {
    rtx__v1__tensor__init(pb);
    pb->name = (char *)(t->name ? t->name : "");
    pb->dtype = (Rtx__V1__DataType)t->dtype;
    pb->n_dims = (size_t)t->ndim;
    pb->dims = (int64_t *)t->dims;
    pb->data.len = t->bytes;
    pb->data.data = t->data;
}

Rtx__V1__Tensor *rtx__client_tensor_copy(const struct rtx_client_tensor *t) {
    Rtx__V1__Tensor *pb = malloc(sizeof *pb);
    if (!pb) return NULL;
    rtx__v1__tensor__init(pb);
    pb->dtype = (Rtx__V1__DataType)t->dtype;
    pb->name = strdup(t->name ? t->name : "");
    if (t->ndim > 0) pb->dims = malloc(sizeof *pb->dims * (size_t)t->ndim);
    if (t->bytes > 0) pb->data.data = malloc(t->bytes);
    if (!pb->name || (t->ndim > 0 && !pb->dims) || (t->bytes > 0 && !pb->data.data)) {
        rtx__v1__tensor__free_unpacked(pb, NULL);
        return NULL;
    }
    pb->n_dims = (size_t)t->ndim;
    if (t->ndim > 0) memcpy(pb->dims, t->dims, sizeof *pb->dims * (size_t)t->ndim);
    pb->data.len = t->bytes;
    if (t->bytes > 0) memcpy(pb->data.data, t->data, t->bytes);
    return pb;
}
