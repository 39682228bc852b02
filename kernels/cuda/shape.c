/*
 * shape.c - the CUDA shape ops: transpose, reshape, expand, concat, slice, gather and
 * constant (docs/ops.md), every dtype, elements moved by size.
 *
 * DESIGN
 * As on the CPU (kernels/cpu/ops-shape.c), transpose, expand and slice are one strided
 * gather into the contiguous output: output dims plus a source stride per dim (permuted,
 * 0 where broadcast, times the step for a slice, negative for a reversed one), from the view
 * both backends share (kernels/geometry.c). Size-1 dims are dropped and neighbours contiguous
 * in the source merged; what is then one unit-stride run is a cudaMemcpyAsync, anything else
 * shape.cu's kernel. When the innermost dim is a unit-stride run, the kernel moves 16-, 8-, 4-
 * or 2-byte units instead of elements where the run's length, the other strides and both
 * addresses allow (rtx__view_widen): a transpose that keeps the last dim (attention's head
 * split) then copies whole 16-byte vectors. When instead the last dim's source stride is not
 * 1 but an earlier dim's is (a transpose that moves the last dim), the kernel goes through
 * 32 x 32 tiles in shared memory so that loads and stores both coalesce. reshape is a device
 * copy.
 * concat is one cudaMemcpy2DAsync per input: the input's rows (its slab along the axis and
 * everything after it) into the matching columns of the output's rows. constant copies its
 * attribute tensor from the host. gather checks its indices on the device without waiting
 * for the result: its kernels record the first out-of-range index in a scratch flag and the
 * node hands the flag to the backend as a deferred check (rtx__cuda_check_defer), which the
 * backend's next synchronize reads and turns into the CPU's message for this node. Nothing
 * stalls the stream mid-run, and a gather can be captured into a CUDA graph (every replay
 * re-arms the flag with its recorded memset).
 */
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/cuda-impl.h"
#include "kernels/cuda/launch.h"
#include "kernels/geometry.h"
#include "runtime/backend-impl.h"

#define COPY_MAX_UNIT 16  /* bytes: the widest unit a copy moves (uint4) */
#define COPY_TILE_MIN 16  /* shortest dims the tiled transpose takes (its tiles are 32 x 32) */

/* A failed CUDA call inside a node: the node's label before the call's message. */
static int node_gpu_err(const struct rtx_node_args *a, int rc, struct rtx_err *err) {
    if (rc == 0 || err == NULL) return rc;
    char msg[sizeof err->msg];
    snprintf(msg, sizeof msg, "%s", err->msg);
    return rtx__backend_node_err(err, a, rc, "%s", msg);
}

bool rtx__cuda_shape_supports(const struct rtx_graph *g, const struct rtx_node *n) {
    switch (n->op) {
    case RTX_OP_TRANSPOSE: case RTX_OP_RESHAPE: case RTX_OP_EXPAND: case RTX_OP_CONCAT:
    case RTX_OP_SLICE: case RTX_OP_CONSTANT:
        return true;
    case RTX_OP_GATHER: {
        /* indices are i32 or i64 (when the graph already knows their dtype) */
        if (g == NULL || n->n_inputs < 2 || n->inputs[1] < 0 || n->inputs[1] >= g->n_values)
            return true;
        const struct rtx_value *v = &g->values[n->inputs[1]];
        if (v->producer >= 0 && v->ndim < 0) return true;
        return v->dtype == RTX_I32 || v->dtype == RTX_I64;
    }
    default:
        return false;
    }
}

/* The dim that the tiled kernel moves with the last one: the last dim's source stride is
 * neither 1 nor 0 (a broadcast), an earlier dim's is 1, and both dims are long enough that the
 * kernel's square tiles are mostly full. -1: the plain kernel. */
static int tile_dim(const struct rtx__strided_view *v) {
    int nd = v->ndim;
    int64_t last = v->strides[nd - 1];
    if (nd < 2 || last == 1 || last == 0 || v->dims[nd - 1] < COPY_TILE_MIN) return -1;
    for (int d = nd - 2; d >= 0; d--)
        if (v->strides[d] == 1) return v->dims[d] >= COPY_TILE_MIN ? d : -1;
    return -1;
}

/* Copies the strided view v (its offset already applied to src) into the contiguous dst: a
 * cudaMemcpyAsync when it is one run, else shape.cu's kernel, in the widest unit that fits. */
static int strided_copy(struct rtx_cuda *cu, struct rtx__strided_view v, const void *src,
                        void *dst, size_t esize, struct rtx_err *err) {
    int64_t numel = rtx__view_simplify(&v);
    if (numel == 0) return 0;
    if (v.ndim == 0 || (v.ndim == 1 && v.strides[0] == 1))
        return RTX_CUDA_CHECK(err, cudaMemcpyAsync(dst, src, (size_t)numel * esize,
                                                   cudaMemcpyDeviceToDevice, cu->stream));
    size_t unit = rtx__view_widen(&v, esize, (uintptr_t)src, (uintptr_t)dst, COPY_MAX_UNIT);
    struct rtx_cuda_copy p = {
        .ndim = v.ndim, .esize = (int32_t)unit, .tile = tile_dim(&v),
        .n = numel / (int64_t)(unit / esize), .src = src, .dst = dst,
    };
    memcpy(p.dims, v.dims, (size_t)v.ndim * sizeof *p.dims);
    memcpy(p.str, v.strides, (size_t)v.ndim * sizeof *p.str);
    return RTX_CUDA_CHECK(err, rtx__cuda_copy_launch(&p, cu->stream));
}

/* transpose, expand and slice: the node's view of its input, copied out. */
static int run_view_copy(struct rtx_cuda *cu, const struct rtx_node_args *a,
                         struct rtx_err *err) {
    const struct rtx_tensor *x = a->in[0];
    struct rtx_tensor *y = a->out[0];
    struct rtx__strided_view v;
    char why[128];
    int rc = rtx__shape_view(a->node, x, y, &v, why, sizeof why);
    if (rc) return rtx__backend_node_err(err, a, rc, "%s", why);
    size_t es = rtx_dtype_size(x->dtype);
    return strided_copy(cu, v, (const char *)rtx_tensor_data(x) + v.offset * (int64_t)es,
                        rtx_tensor_data(y), es, err);
}

/* Copies x's bytes into y. The executor runs a reshape only when its output is a graph output
 * (a buffer handed to the caller) or its input an initializer given as a strided view; any
 * other reshape is a view of its input's bytes and never reaches a backend (runtime/plan.c,
 * DESIGN: views). */
static int run_reshape(struct rtx_cuda *cu, const struct rtx_node_args *a, struct rtx_err *err) {
    const struct rtx_tensor *x = a->in[0];
    struct rtx_tensor *y = a->out[0];
    size_t bytes = rtx_tensor_nbytes(x);
    if (rtx_tensor_nbytes(y) != bytes || y->dtype != x->dtype)
        return rtx__backend_node_err(err, a, RTX_EINTERNAL, "output size differs from input");
    void *src = rtx_tensor_data(x), *dst = rtx_tensor_data(y);
    if (bytes == 0 || src == dst) return 0;
    return RTX_CUDA_CHECK(err, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                               cu->stream));
}

static int run_concat(struct rtx_cuda *cu, const struct rtx_node_args *a, struct rtx_err *err) {
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
    size_t inner = rtx_dtype_size(y->dtype); /* bytes per index step along the axis */
    size_t outer = 1;
    for (int d = 0; d < axis; d++) outer *= (size_t)y->dims[d];
    for (int d = (int)axis + 1; d < nd; d++) inner *= (size_t)y->dims[d];
    size_t out_row = (size_t)y->dims[axis] * inner, col = 0;
    char *dst = rtx_tensor_data(y);
    for (int i = 0; i < a->n_in && outer > 0; i++) {
        size_t row = (size_t)a->in[i]->dims[axis] * inner;
        const void *src = rtx_tensor_data(a->in[i]);
        int rc = 0;
        if (row > 0 && outer == 1)
            rc = RTX_CUDA_CHECK(err, cudaMemcpyAsync(dst + col, src, row,
                                                     cudaMemcpyDeviceToDevice, cu->stream));
        else if (row > 0)
            rc = RTX_CUDA_CHECK(err, cudaMemcpy2DAsync(dst + col, out_row, src, row, row, outer,
                                                       cudaMemcpyDeviceToDevice, cu->stream));
        if (rc) return node_gpu_err(a, rc, err);
        col += row;
    }
    return 0;
}

static int run_gather(struct rtx_cuda *cu, const struct rtx_node_args *a, struct rtx_err *err) {
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
    struct rtx_cuda_gather p = {
        .idx64 = ind->dtype == RTX_I64, .n_idx = rtx_tensor_numel(ind),
        .axis_dim = x->dims[axis], .data = rtx_tensor_data(x), .idx = rtx_tensor_data(ind),
        .out = rtx_tensor_data(y), .outer = 1,
    };
    int64_t inner_bytes = (int64_t)rtx_dtype_size(x->dtype);
    for (int d = 0; d < axis; d++) p.outer *= x->dims[d];
    for (int d = (int)axis + 1; d < nd; d++) inner_bytes *= x->dims[d];
    if (rtx_tensor_numel(y) * (int64_t)rtx_dtype_size(x->dtype) !=
        p.outer * p.n_idx * inner_bytes)
        return rtx__backend_node_err(err, a, RTX_EINTERNAL, "output size does not match");
    if (p.n_idx == 0) return 0;
    p.unit = inner_bytes % 8 == 0 ? 8 : inner_bytes % 4 == 0 ? 4 : inner_bytes % 2 == 0 ? 2 : 1;
    p.inner = inner_bytes / p.unit;
    /* the check's label: how rtx__backend_node_err starts this node's messages */
    struct rtx_err label;
    rtx__backend_node_err(&label, a, RTX_EINVAL, "%s", "");
    struct rtx__cuda_check c = {.label = rtx_strdup(label.msg), .axis = axis,
                                .axis_dim = p.axis_dim};
    if (c.label == NULL) return rtx__backend_node_err(err, a, RTX_ENOMEM, "out of memory");
    void *flag = NULL;
    int rc = rtx__cuda_scratch(cu, 2 * sizeof *c.flag, &flag, err);
    if (rc) {
        rtx_free(c.label);
        return node_gpu_err(a, rc, err);
    }
    p.bad = c.flag = flag;
    rc = RTX_CUDA_CHECK(err, cudaMemsetAsync(flag, 0xff, sizeof *c.flag, cu->stream));
    if (rc == 0) rc = RTX_CUDA_CHECK(err, rtx__cuda_gather_launch(&p, cu->stream));
    if (rc) {
        rtx__cuda_scratch_release(cu, flag);
        rtx_free(c.label);
        return node_gpu_err(a, rc, err);
    }
    rc = rtx__cuda_check_defer(cu, &c, err);
    return rc ? node_gpu_err(a, rc, err) : 0;
}

static int run_constant(struct rtx_cuda *cu, const struct rtx_node_args *a,
                        struct rtx_err *err) {
    const struct rtx_attr *attr = rtx_node_attr(a->node, "value");
    struct rtx_tensor *y = a->out[0];
    if (attr == NULL || attr->type != RTX_ATTR_TENSOR || attr->t == NULL)
        return rtx__backend_node_err(err, a, RTX_EINVAL, "attribute value (tensor) is missing");
    const struct rtx_tensor *t = attr->t;
    if (t->dtype != y->dtype || t->ndim != y->ndim ||
        memcmp(t->dims, y->dims, (size_t)t->ndim * sizeof *t->dims) != 0)
        return rtx__backend_node_err(err, a, RTX_EINTERNAL, "output differs from value's shape");
    struct rtx_tensor *c = NULL;
    int rc = rtx_tensor_contiguous(t, &c, err);
    if (rc) return rc;
    size_t bytes = rtx_tensor_nbytes(c);
    /* from pageable memory: the call returns once the source is staged, so c may go */
    if (bytes > 0)
        rc = RTX_CUDA_CHECK(err, cudaMemcpyAsync(rtx_tensor_data(y), rtx_tensor_data(c), bytes,
                                                 cudaMemcpyHostToDevice, cu->stream));
    rtx_tensor_unref(c);
    return rc;
}

int rtx__cuda_shape(struct rtx_cuda *cu, const struct rtx_node_args *a, struct rtx_err *err) {
    if (a->n_out < 1 || !a->out[0] || (a->node->op != RTX_OP_CONSTANT && a->n_in < 1))
        return rtx__backend_node_err(err, a, RTX_EINTERNAL, "missing input or output tensor");
    for (int i = 0; i < a->n_in; i++)
        if (!a->in[i])
            return rtx__backend_node_err(err, a, RTX_EINTERNAL, "input %d is missing", i);
    int rc;
    switch (a->node->op) {
    case RTX_OP_TRANSPOSE: case RTX_OP_EXPAND: case RTX_OP_SLICE:
        rc = run_view_copy(cu, a, err);
        break;
    case RTX_OP_RESHAPE: rc = run_reshape(cu, a, err); break;
    case RTX_OP_CONCAT: rc = run_concat(cu, a, err); break;
    case RTX_OP_GATHER:
        if (a->n_in < 2) return rtx__backend_node_err(err, a, RTX_EINTERNAL, "indices missing");
        return run_gather(cu, a, err);
    case RTX_OP_CONSTANT: rc = run_constant(cu, a, err); break;
    default: return rtx__backend_node_err(err, a, RTX_EINTERNAL, "not a shape op");
    }
    /* GPU failures get the node's label; the op functions' own errors already have it */
    if (rc == RTX_EGPU && err && strncmp(err->msg, "node ", 5) != 0)
        return node_gpu_err(a, rc, err);
    return rc;
}
