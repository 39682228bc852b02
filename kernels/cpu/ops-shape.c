/*
 * ops-shape.c - CPU kernels for transpose, reshape, expand, concat, slice, gather and
 * constant (docs/ops.md). Every dtype: elements are copied by size, never converted.
 *
 * DESIGN
 * transpose, expand, slice and constant all reduce to one strided gather into a contiguous
 * output: output dims plus a source stride per output dim (a permuted stride, 0 for a
 * broadcast dim, stride * step for a slice, possibly negative), which kernels/geometry.c
 * computes for both backends (rtx__shape_view). Dims of size 1 are dropped and neighbours that
 * are contiguous in the source are merged (rtx__view_simplify, also shared), so a reshape-like
 * or row-preserving copy becomes memcpy of long rows. When the source's unit-stride dim is the
 * second to last output dim (a transpose of the last two dims after merging) the copy goes
 * in 32x32 tiles so reads and writes both stay in cache. Rows, or rows of tiles, are split
 * over the pool.
 */
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/cpu-impl.h"
#include "kernels/geometry.h"

#define TILE 32
#define COPY_GRAIN_BYTES (1 << 15) /* bytes per parallel chunk, about */

/* ------------------------------------------------------------------------------------------
 * Strided copy
 * ---------------------------------------------------------------------------------------- */

struct copy_job {
    int nd;                        /* >= 1 after simplify */
    int64_t dims[RTX_MAX_DIMS];    /* output dims */
    int64_t str[RTX_MAX_DIMS];     /* source strides per output dim, elements */
    const char *src;               /* source of output element 0 */
    char *dst;                     /* contiguous output */
    size_t esize;                  /* bytes per element */
    bool tiled;                    /* tile the last two dims */
    int64_t row_tiles;             /* tiles along dims[nd-2] when tiled */
};

/* dst[i] = src[i * stride] for i < n. */
static void copy_row(char *dst, const char *src, int64_t n, int64_t stride, size_t esize) {
    if (stride == 1) {
        memcpy(dst, src, (size_t)n * esize);
        return;
    }
    switch (esize) {
#define COPY_ROW(T)                                                                             \
    do {                                                                                        \
        T *d = (T *)dst;                                                                        \
        const T *s = (const T *)src;                                                            \
        for (int64_t i = 0; i < n; i++) d[i] = s[i * stride];                                   \
    } while (0)
    case 1: COPY_ROW(uint8_t); break;
    case 2: COPY_ROW(uint16_t); break;
    case 4: COPY_ROW(uint32_t); break;
    case 8: COPY_ROW(uint64_t); break;
#undef COPY_ROW
    default:
        for (int64_t i = 0; i < n; i++) memcpy(dst + i * esize, src + i * stride * esize, esize);
    }
}

/* Tile: dst[r * ld + c] = src[r + c * cstride] for r < nr, c < nc. */
static void copy_tile(char *dst, int64_t ld, const char *src, int64_t nr, int64_t nc,
                      int64_t cstride, size_t esize) {
    switch (esize) {
#define COPY_TILE(T)                                                                            \
    do {                                                                                        \
        T *d = (T *)dst;                                                                        \
        const T *s = (const T *)src;                                                            \
        for (int64_t c = 0; c < nc; c++)                                                        \
            for (int64_t r = 0; r < nr; r++) d[r * ld + c] = s[r + c * cstride];                \
    } while (0)
    case 1: COPY_TILE(uint8_t); break;
    case 2: COPY_TILE(uint16_t); break;
    case 4: COPY_TILE(uint32_t); break;
    case 8: COPY_TILE(uint64_t); break;
#undef COPY_TILE
    default:
        for (int64_t c = 0; c < nc; c++)
            for (int64_t r = 0; r < nr; r++)
                memcpy(dst + (r * ld + c) * esize, src + (r + c * cstride) * esize, esize);
    }
}

/* Source offset (elements) of the first element of "row" `row` of dims[0..upto). */
static int64_t row_offset(const struct copy_job *j, int upto, int64_t row) {
    int64_t off = 0;
    for (int d = upto - 1; d >= 0; d--) {
        off += (row % j->dims[d]) * j->str[d];
        row /= j->dims[d];
    }
    return off;
}

static void copy_rows_chunk(void *ctx, int64_t begin, int64_t end) {
    const struct copy_job *j = ctx;
    int64_t inner = j->dims[j->nd - 1], s = j->str[j->nd - 1];
    for (int64_t r = begin; r < end; r++)
        copy_row(j->dst + (size_t)(r * inner) * j->esize,
                 j->src + row_offset(j, j->nd - 1, r) * (int64_t)j->esize, inner, s, j->esize);
}

static void copy_tiles_chunk(void *ctx, int64_t begin, int64_t end) {
    const struct copy_job *j = ctx;
    int nd = j->nd;
    int64_t R = j->dims[nd - 2], C = j->dims[nd - 1], cs = j->str[nd - 1];
    for (int64_t u = begin; u < end; u++) {
        int64_t outer = u / j->row_tiles, r0 = (u % j->row_tiles) * TILE;
        int64_t nr = R - r0 < TILE ? R - r0 : TILE;
        const char *src = j->src + (row_offset(j, nd - 2, outer) + r0) * (int64_t)j->esize;
        char *dst = j->dst + (size_t)((outer * R + r0) * C) * j->esize;
        for (int64_t c0 = 0; c0 < C; c0 += TILE) {
            int64_t nc = C - c0 < TILE ? C - c0 : TILE;
            copy_tile(dst + (size_t)c0 * j->esize, C, src + c0 * cs * (int64_t)j->esize, nr, nc,
                      cs, j->esize);
        }
    }
}

/* Copies the strided view v (its offset already applied to src) into the contiguous dst. */
static void strided_copy(struct rtx_cpu *cpu, struct rtx__strided_view v, const void *src,
                         void *dst, size_t esize) {
    int64_t numel = rtx__view_simplify(&v);
    if (numel == 0) return;
    if (v.ndim == 0) {
        memcpy(dst, src, esize);
        return;
    }
    struct copy_job j = {.nd = v.ndim, .src = src, .dst = dst, .esize = esize};
    memcpy(j.dims, v.dims, (size_t)v.ndim * sizeof *j.dims);
    memcpy(j.str, v.strides, (size_t)v.ndim * sizeof *j.str);
    int64_t inner = j.dims[j.nd - 1];
    if (j.nd >= 2 && j.str[j.nd - 2] == 1 && j.str[j.nd - 1] != 1 && j.str[j.nd - 1] != 0 &&
        inner >= 4) {
        j.tiled = true;
        j.row_tiles = (j.dims[j.nd - 2] + TILE - 1) / TILE;
        int64_t units = numel / (j.dims[j.nd - 2] * inner) * j.row_tiles;
        int64_t unit_bytes = TILE * inner * (int64_t)esize;
        rtx__cpu_parallel_for(cpu, units, COPY_GRAIN_BYTES / unit_bytes + 1, copy_tiles_chunk,
                              &j);
        return;
    }
    int64_t row_bytes = inner * (int64_t)esize;
    rtx__cpu_parallel_for(cpu, numel / inner, COPY_GRAIN_BYTES / row_bytes + 1, copy_rows_chunk,
                          &j);
}

/* ------------------------------------------------------------------------------------------
 * The ops
 * ---------------------------------------------------------------------------------------- */

/* transpose, expand and slice: the node's view of its input, copied out. */
static int run_view_copy(struct rtx_cpu *cpu, const struct rtx_node_args *a,
                         struct rtx_err *err) {
    const struct rtx_tensor *x = a->in[0];
    struct rtx_tensor *y = a->out[0];
    struct rtx__strided_view v;
    char why[128];
    int rc = rtx__shape_view(a->node, x, y, &v, why, sizeof why);
    if (rc) return rtx__backend_node_err(err, a, rc, "%s", why);
    size_t es = rtx_dtype_size(x->dtype);
    strided_copy(cpu, v, (const char *)rtx_tensor_data(x) + v.offset * (int64_t)es,
                 rtx_tensor_data(y), es);
    return 0;
}

static int run_reshape(const struct rtx_node_args *a, struct rtx_err *err) {
    const struct rtx_tensor *x = a->in[0];
    struct rtx_tensor *y = a->out[0];
    size_t bytes = rtx_tensor_nbytes(x);
    if (rtx_tensor_nbytes(y) != bytes || y->dtype != x->dtype)
        return rtx__backend_node_err(err, a, RTX_EINTERNAL, "output size differs from input");
    void *src = rtx_tensor_data(x), *dst = rtx_tensor_data(y);
    if (bytes > 0 && src != dst) memmove(dst, src, bytes);
    return 0;
}

struct concat_job {
    const struct rtx_node_args *a;
    int64_t inner_bytes;          /* bytes of one index step along axis and all later dims */
    int axis;
};

static void concat_chunk(void *ctx, int64_t begin, int64_t end) {
    const struct concat_job *j = ctx;
    const struct rtx_node_args *a = j->a;
    int64_t out_row = a->out[0]->dims[j->axis] * j->inner_bytes;
    char *dst = rtx_tensor_data(a->out[0]);
    for (int64_t o = begin; o < end; o++) {
        int64_t off = o * out_row;
        for (int i = 0; i < a->n_in; i++) {
            int64_t row = a->in[i]->dims[j->axis] * j->inner_bytes;
            if (row > 0)
                memcpy(dst + off, (const char *)rtx_tensor_data(a->in[i]) + o * row,
                       (size_t)row);
            off += row;
        }
    }
}

static int run_concat(struct rtx_cpu *cpu, const struct rtx_node_args *a, struct rtx_err *err) {
    struct rtx_tensor *y = a->out[0];
    int nd = y->ndim;
    int64_t axis = rtx_node_attr_int(a->node, "axis", 0);
    if (axis < 0) axis += nd;
    if (axis < 0 || axis >= nd)
        return rtx__backend_node_err(err, a, RTX_EINVAL, "axis out of range for rank %d", nd);
    int64_t total = 0;
    for (int i = 0; i < a->n_in; i++) {
        const struct rtx_tensor *x = a->in[i];
        if (x == NULL || x->ndim != nd || x->dtype != y->dtype)
            return rtx__backend_node_err(err, a, RTX_EINVAL, "input %d differs in rank or dtype",
                                         i);
        for (int d = 0; d < nd; d++)
            if (d != axis && x->dims[d] != y->dims[d])
                return rtx__backend_node_err(err, a, RTX_EINVAL,
                                             "input %d dimension %d is %lld, want %lld", i, d,
                                             (long long)x->dims[d], (long long)y->dims[d]);
        total += x->dims[axis];
    }
    if (total != y->dims[axis])
        return rtx__backend_node_err(err, a, RTX_EINTERNAL, "concat axis sums to %lld, want %lld",
                                     (long long)total, (long long)y->dims[axis]);
    struct concat_job j = {.a = a, .axis = (int)axis,
                           .inner_bytes = (int64_t)rtx_dtype_size(y->dtype)};
    int64_t outer = 1;
    for (int d = 0; d < axis; d++) outer *= y->dims[d];
    for (int d = (int)axis + 1; d < nd; d++) j.inner_bytes *= y->dims[d];
    int64_t row = y->dims[axis] * j.inner_bytes;
    if (row == 0) return 0;
    rtx__cpu_parallel_for(cpu, outer, COPY_GRAIN_BYTES / row + 1, concat_chunk, &j);
    return 0;
}

struct gather_job {
    const char *data;
    char *out;
    const void *idx;
    bool idx64;
    int64_t n_idx, axis_dim, inner_bytes;
};

static int64_t gather_index(const struct gather_job *j, int64_t i) {
    return j->idx64 ? ((const int64_t *)j->idx)[i] : ((const int32_t *)j->idx)[i];
}

static void gather_chunk(void *ctx, int64_t begin, int64_t end) {
    const struct gather_job *j = ctx;
    for (int64_t u = begin; u < end; u++) {
        int64_t o = u / j->n_idx, i = u % j->n_idx, ix = gather_index(j, i);
        if (ix < 0) ix += j->axis_dim;
        memcpy(j->out + u * j->inner_bytes, j->data + (o * j->axis_dim + ix) * j->inner_bytes,
               (size_t)j->inner_bytes);
    }
}

static int run_gather(struct rtx_cpu *cpu, const struct rtx_node_args *a, struct rtx_err *err) {
    const struct rtx_tensor *x = a->in[0], *ind = a->in[1];
    struct rtx_tensor *y = a->out[0];
    int nd = x->ndim;
    int64_t axis = rtx_node_attr_int(a->node, "axis", 0);
    if (axis < 0) axis += nd;
    if (axis < 0 || axis >= nd)
        return rtx__backend_node_err(err, a, RTX_EINVAL, "axis out of range for rank %d", nd);
    if (ind->dtype != RTX_I32 && ind->dtype != RTX_I64)
        return rtx__backend_node_err(err, a, RTX_EINVAL, "indices must be i32 or i64, not %s",
                                     rtx_dtype_name(ind->dtype));
    struct gather_job j = {
        .data = rtx_tensor_data(x), .out = rtx_tensor_data(y), .idx = rtx_tensor_data(ind),
        .idx64 = ind->dtype == RTX_I64, .n_idx = rtx_tensor_numel(ind),
        .axis_dim = x->dims[axis], .inner_bytes = (int64_t)rtx_dtype_size(x->dtype),
    };
    int64_t outer = 1;
    for (int d = 0; d < axis; d++) outer *= x->dims[d];
    for (int d = (int)axis + 1; d < nd; d++) j.inner_bytes *= x->dims[d];
    if (rtx_tensor_numel(y) * (int64_t)rtx_dtype_size(x->dtype) !=
        outer * j.n_idx * j.inner_bytes)
        return rtx__backend_node_err(err, a, RTX_EINTERNAL, "output size does not match");
    for (int64_t i = 0; i < j.n_idx; i++) {
        int64_t ix = gather_index(&j, i);
        if (ix < -j.axis_dim || ix >= j.axis_dim)
            return rtx__backend_node_err(err, a, RTX_EINVAL,
                                         "index %lld (indices element %lld) out of range for axis "
                                         "%lld of size %lld",
                                         (long long)ix, (long long)i, (long long)axis,
                                         (long long)j.axis_dim);
    }
    if (j.inner_bytes == 0) return 0;
    rtx__cpu_parallel_for(cpu, outer * j.n_idx, COPY_GRAIN_BYTES / j.inner_bytes + 1,
                          gather_chunk, &j);
    return 0;
}

static int run_constant(struct rtx_cpu *cpu, const struct rtx_node_args *a,
                        struct rtx_err *err) {
    const struct rtx_attr *attr = rtx_node_attr(a->node, "value");
    struct rtx_tensor *y = a->out[0];
    if (attr == NULL || attr->type != RTX_ATTR_TENSOR || attr->t == NULL)
        return rtx__backend_node_err(err, a, RTX_EINVAL, "attribute value (tensor) is missing");
    const struct rtx_tensor *t = attr->t;
    if (t->dtype != y->dtype || t->ndim != y->ndim ||
        memcmp(t->dims, y->dims, (size_t)t->ndim * sizeof *t->dims) != 0)
        return rtx__backend_node_err(err, a, RTX_EINTERNAL, "output differs from value's shape");
    struct rtx__strided_view v = {.ndim = t->ndim};
    memcpy(v.dims, t->dims, (size_t)t->ndim * sizeof *v.dims);
    memcpy(v.strides, t->strides, (size_t)t->ndim * sizeof *v.strides);
    strided_copy(cpu, v, rtx_tensor_data(t), rtx_tensor_data(y), rtx_dtype_size(t->dtype));
    return 0;
}

int rtx__cpu_shape(struct rtx_cpu *cpu, const struct rtx_node_args *a, struct rtx_err *err) {
    switch (a->node->op) {
    case RTX_OP_TRANSPOSE: case RTX_OP_EXPAND: case RTX_OP_SLICE:
        return run_view_copy(cpu, a, err);
    case RTX_OP_RESHAPE: return run_reshape(a, err);
    case RTX_OP_CONCAT: return run_concat(cpu, a, err);
    case RTX_OP_GATHER: return run_gather(cpu, a, err);
    case RTX_OP_CONSTANT: return run_constant(cpu, a, err);
    default: break;
    }
    return rtx__backend_node_err(err, a, RTX_EINTERNAL, "not a shape op");
}
