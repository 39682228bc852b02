/*
 * reduce.cu - the CUDA kernels of the reductions (reduce_sum, reduce_mean, reduce_max,
 * reduce_min, argmax) and of the normalizations along axes (softmax, log_softmax, layer_norm,
 * rms_norm), as docs/ops.md defines them, with their entry points rtx__cuda_reduce and
 * rtx__cuda_reduce_supports.
 *
 * DESIGN
 * Unlike the elementwise and shape groups (a C half filling a launch.h struct, a .cu half that
 * only launches), this group keeps its host side in this file: the view computations are
 * short, and the dtype x op dispatch is templates, which only C++ has. Errors still go through
 * RTX_CUDA_CHECK and rtx__backend_node_err; nothing here aborts.
 *
 * Reductions, permute-free. As on the CPU, the input's axes are kept (K) or reduced (R); size-1
 * axes are dropped and neighbours of one kind merged. With one R block the input is
 * [outer, r, inner]: inner == 1 gives rows, reduced by one block per output (threads stride
 * the run, a warp-shuffle tree combines them); inner > 1 gives columns, where a 32 x 8 block
 * takes 32 neighbouring outputs (coalesced loads) and splits r over its 8 rows. Any other
 * pattern (R K R ...) uses the block-per-output kernel with the reduced index decomposed over
 * the R blocks' dims and strides. An empty reduced axis gives the identity (sum 0, mean NaN).
 *
 * Accumulation: float sums in f64 per thread and in the tree (exact enough to match the CPU's
 * double sums to a few f32 ulp; the H200 has the f64 rate to make this free in a memory-bound
 * kernel); integer sums wrap in uint64; max/min propagate NaN. argmax keeps (value, index)
 * pairs: a NaN beats any number, ties keep the lower index, as NumPy. A few long float rows
 * (a generation step's logits: 1-256 rows of a 128k vocabulary) split over blocks that combine
 * by atomicMax on a 64-bit key (argmax_split_kernel): one block per row left most of the device
 * idle, 0.23 ms for 64 rows of 128,256.
 *
 * softmax / log_softmax: the last axis (inner == 1) is one block per row with three passes
 * (max, sum of exp, write), the row staying in L1/L2 between them; another axis is one thread
 * per (outer, inner) column, whose loads are coalesced across neighbouring threads.
 * layer_norm / rms_norm: one block per contiguous row of prod(dims[axis:]), two-pass mean and
 * variance in f32 (the row is re-read from cache), optional scale and bias.
 *
 * Register rows: softmax / log_softmax over the last axis and both norms take a faster path
 * when a row is a whole number of 16-byte packs (4 f32, 8 f16/bf16) at 16-byte aligned
 * addresses and has at most REG_MAX_PACKS packs: the row is read once with vector loads into
 * registers (NV packs per thread), reduced there, and written once. Rows of at most 128 packs
 * take a warp each (several rows per block, shuffle reductions only); longer ones a block of
 * up to 512 threads with 4 packs each. Math is f32 with one rounding on store, as above; only
 * the order of the partial sums differs from the block-strided kernels.
 *
 * softmax's per-element work decides its speed in f16/bf16 (a 16-byte pack holds 8 elements,
 * twice f32's work per byte): the register-row kernel is specialised for softmax and
 * log_softmax, pads rows with -inf so its reductions need no bounds checks, takes the max with
 * PTX max.NaN, converts bf16 by shifting 32-bit words, and every f16/bf16 softmax kernel takes
 * e^d as the SFU's ex2.approx of d * log2(e) (softmax_exp: 2 instructions, not expf's 8; f32
 * keeps expf, whose accuracy its outputs can show).
 */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "kernels/cuda/cuda-impl.h"
#include "kernels/cuda/dtype.cuh"
#include "runtime/backend-impl.h"

#define COL_X 32             /* outputs per column block */
#define COL_Y 8              /* r-splits per column block */
#define MAX_BLOCKS (1 << 20) /* grid-stride loops cover the rest */
#define FLAT_THREADS 256

using namespace rtxcu;

/* ------------------------------------------------------------------------------------------
 * Reduction kinds: accumulator type, identity, load, combine, final value
 * ---------------------------------------------------------------------------------------- */

enum { K_FSUM, K_FMEAN, K_FMAX, K_FMIN, K_ISUM, K_IMAX, K_IMIN };

template <int K> struct Kind;

template <> struct Kind<K_FSUM> {
    typedef double A;
    static __device__ A id() {
        return 0.0;
    }
    template <typename T> static __device__ A load(T v) {
        return (double)to_f32(v);
    }
    static __device__ A comb(A a, A b) {
        return a + b;
    }
    template <typename T> static __device__ T fin(A a, int64_t) {
        return from_f32<T>((float)a);
    }
};
template <> struct Kind<K_FMEAN> : Kind<K_FSUM> {
    template <typename T> static __device__ T fin(A a, int64_t n) {
        return from_f32<T>(n > 0 ? (float)(a / (double)n) : NAN);
    }
};
template <> struct Kind<K_FMAX> {
    typedef float A;
    static __device__ A id() {
        return -INFINITY;
    }
    template <typename T> static __device__ A load(T v) {
        return to_f32(v);
    }
    static __device__ A comb(A a, A b) {
        return nan_max(a, b);
    }
    template <typename T> static __device__ T fin(A a, int64_t) {
        return from_f32<T>(a);
    }
};
template <> struct Kind<K_FMIN> {
    typedef float A;
    static __device__ A id() {
        return INFINITY;
    }
    template <typename T> static __device__ A load(T v) {
        return to_f32(v);
    }
    static __device__ A comb(A a, A b) {
        return (b < a || b != b) ? b : a;
    }
    template <typename T> static __device__ T fin(A a, int64_t) {
        return from_f32<T>(a);
    }
};
template <> struct Kind<K_ISUM> {
    typedef unsigned long long A;
    static __device__ A id() {
        return 0;
    }
    template <typename T> static __device__ A load(T v) {
        return (A)(long long)v;
    }
    static __device__ A comb(A a, A b) {
        return a + b;
    }
    template <typename T> static __device__ T fin(A a, int64_t) {
        return (T)(long long)a;
    }
};
template <> struct Kind<K_IMAX> {
    typedef long long A;
    static __device__ A id() {
        return LLONG_MIN;
    }
    template <typename T> static __device__ A load(T v) {
        return (A)v;
    }
    static __device__ A comb(A a, A b) {
        return b > a ? b : a;
    }
    template <typename T> static __device__ T fin(A a, int64_t) {
        return (T)a;
    }
};
template <> struct Kind<K_IMIN> : Kind<K_IMAX> {
    static __device__ A id() {
        return LLONG_MAX;
    }
    static __device__ A comb(A a, A b) {
        return b < a ? b : a;
    }
};

template <typename KD> __device__ typename KD::A warp_reduce(typename KD::A v) {
    for (int o = 16; o > 0; o >>= 1)
        v = KD::comb(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Combines v over the block; every thread gets the result. */
template <typename KD> __device__ typename KD::A block_reduce(typename KD::A v) {
    __shared__ typename KD::A sh[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = warp_reduce<KD>(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < n_warps ? sh[lane] : KD::id();
    return warp_reduce<KD>(v);
}

/* The view of one reduction: kept dims (outputs) and reduced dims, strides in elements. */
struct rd_view {
    int nk, nr;
    int64_t n_out, count;
    int64_t kdims[RTX_MAX_DIMS], kst[RTX_MAX_DIMS];
    int64_t rdims[RTX_MAX_DIMS], rst[RTX_MAX_DIMS];
};

/* Block per output q: its kept coordinates give a base; threads stride the reduced indices. */
template <typename T, typename KD>
__global__ static void reduce_flat_kernel(const T *x, T *y, struct rd_view v) {
    for (int64_t q = blockIdx.x; q < v.n_out; q += gridDim.x) {
        int64_t rem = q, base = 0;
        for (int d = v.nk - 1; d >= 0; d--) {
            base += (rem % v.kdims[d]) * v.kst[d];
            rem /= v.kdims[d];
        }
        typename KD::A acc = KD::id();
        for (int64_t t = threadIdx.x; t < v.count; t += blockDim.x) {
            int64_t off = base;
            if (v.nr == 1) {
                off += t * v.rst[0];
            } else {
                int64_t r = t;
                for (int d = v.nr - 1; d >= 0; d--) {
                    off += (r % v.rdims[d]) * v.rst[d];
                    r /= v.rdims[d];
                }
            }
            acc = KD::comb(acc, KD::load(x[off]));
        }
        acc = block_reduce<KD>(acc);
        if (threadIdx.x == 0) y[q] = KD::template fin<T>(acc, v.count);
    }
}

/* [outer, r, inner] with inner > 1: block (COL_X, COL_Y) takes COL_X neighbouring outputs. */
template <typename T, typename KD>
__global__ static void reduce_cols_kernel(const T *x, T *y, int64_t outer, int64_t r,
                                          int64_t inner) {
    __shared__ typename KD::A sh[COL_Y][COL_X + 1];
    int64_t n_tiles = (inner + COL_X - 1) / COL_X;
    for (int64_t t = blockIdx.x; t < outer * n_tiles; t += gridDim.x) {
        int64_t o = t / n_tiles, i = (t % n_tiles) * COL_X + threadIdx.x;
        typename KD::A acc = KD::id();
        if (i < inner) {
            const T *p = x + o * r * inner + i;
            for (int64_t j = threadIdx.y; j < r; j += COL_Y)
                acc = KD::comb(acc, KD::load(p[j * inner]));
        }
        sh[threadIdx.y][threadIdx.x] = acc;
        __syncthreads();
        if (threadIdx.y == 0 && i < inner) {
            for (int k = 1; k < COL_Y; k++)
                acc = KD::comb(acc, sh[k][threadIdx.x]);
            y[o * inner + i] = KD::template fin<T>(acc, r);
        }
        __syncthreads();
    }
}

static unsigned grid_of(int64_t n) {
    return (unsigned)(n < MAX_BLOCKS ? (n > 0 ? n : 1) : MAX_BLOCKS);
}

/* Threads for a block that strides n elements: 32 .. 256. */
static unsigned threads_for(int64_t n) {
    unsigned t = 32;
    while (t < FLAT_THREADS && (int64_t)t * 4 < n)
        t *= 2;
    return t;
}

template <typename T, typename KD>
static void reduce_launch(const void *x, void *y, const struct rd_view *v, bool cols,
                          int64_t outer, int64_t r, int64_t inner, cudaStream_t s) {
    if (cols) {
        int64_t tiles = outer * ((inner + COL_X - 1) / COL_X);
        reduce_cols_kernel<T, KD>
            <<<grid_of(tiles), dim3(COL_X, COL_Y), 0, s>>>((const T *)x, (T *)y, outer, r, inner);
    } else {
        reduce_flat_kernel<T, KD>
            <<<grid_of(v->n_out), threads_for(v->count), 0, s>>>((const T *)x, (T *)y, *v);
    }
}

template <typename T>
static void reduce_float(int op, const void *x, void *y, const struct rd_view *v, bool cols,
                         int64_t outer, int64_t r, int64_t inner, cudaStream_t s) {
    switch (op) {
    case RTX_OP_REDUCE_SUM:
        reduce_launch<T, Kind<K_FSUM>>(x, y, v, cols, outer, r, inner, s);
        break;
    case RTX_OP_REDUCE_MEAN:
        reduce_launch<T, Kind<K_FMEAN>>(x, y, v, cols, outer, r, inner, s);
        break;
    case RTX_OP_REDUCE_MAX:
        reduce_launch<T, Kind<K_FMAX>>(x, y, v, cols, outer, r, inner, s);
        break;
    default: reduce_launch<T, Kind<K_FMIN>>(x, y, v, cols, outer, r, inner, s); break;
    }
}

template <typename T>
static void reduce_int(int op, const void *x, void *y, const struct rd_view *v, bool cols,
                       int64_t outer, int64_t r, int64_t inner, cudaStream_t s) {
    switch (op) {
    case RTX_OP_REDUCE_SUM:
        reduce_launch<T, Kind<K_ISUM>>(x, y, v, cols, outer, r, inner, s);
        break;
    case RTX_OP_REDUCE_MAX:
        reduce_launch<T, Kind<K_IMAX>>(x, y, v, cols, outer, r, inner, s);
        break;
    default: reduce_launch<T, Kind<K_IMIN>>(x, y, v, cols, outer, r, inner, s); break;
    }
}

static int run_reduce(struct rtx_cuda *cu, const struct rtx_node_args *a, struct rtx_err *err) {
    const struct rtx_tensor *x = a->in[0];
    struct rtx_tensor *Y = a->out[0];
    int op = a->node->op;
    enum rtx_dtype dt = x->dtype;
    bool is_float = rtx_dtype_is_float(dt);
    if (dt == RTX_BOOL || Y->dtype != dt || (op == RTX_OP_REDUCE_MEAN && !is_float))
        return rtx__backend_node_err(err, a, RTX_EUNSUPPORTED, "%s of %s", rtx_op_name(a->node->op),
                                     rtx_dtype_name(dt));
    bool red[RTX_MAX_DIMS];
    const int64_t *axes = NULL;
    int na = rtx_node_attr_ints(a->node, "axes", &axes);
    for (int d = 0; d < x->ndim; d++)
        red[d] = na <= 0;
    for (int k = 0; k < na; k++) {
        int64_t ax = axes[k] < 0 ? axes[k] + x->ndim : axes[k];
        if (ax < 0 || ax >= x->ndim)
            return rtx__backend_node_err(err, a, RTX_EINVAL, "axis %lld out of range for rank %d",
                                         (long long)axes[k], x->ndim);
        red[ax] = true;
    }
    struct rd_view v;
    memset(&v, 0, sizeof v);
    v.n_out = rtx_tensor_numel(Y);
    v.count = 1;
    for (int d = 0; d < x->ndim; d++)
        if (red[d]) v.count *= x->dims[d];
    if (v.n_out == 0) return 0;
    bool cols = false;
    int64_t outer = 1, r = 1, inner = 1;
    if (v.count == 0) {
        if (op == RTX_OP_REDUCE_MAX || op == RTX_OP_REDUCE_MIN)
            return rtx__backend_node_err(err, a, RTX_EINVAL, "cannot reduce an empty axis");
        v.nk = 1; /* every output gets the identity: nothing is read */
        v.kdims[0] = v.n_out;
    } else {
        /* Drop size-1 axes, merge neighbours of one kind, then strides per block. */
        int nb = 0;
        int64_t bdims[RTX_MAX_DIMS], bst[RTX_MAX_DIMS];
        bool bred[RTX_MAX_DIMS];
        for (int d = 0; d < x->ndim; d++) {
            if (x->dims[d] == 1) continue;
            if (nb > 0 && bred[nb - 1] == red[d]) {
                bdims[nb - 1] *= x->dims[d];
                continue;
            }
            bdims[nb] = x->dims[d];
            bred[nb++] = red[d];
        }
        int64_t s = 1;
        for (int b = nb - 1; b >= 0; b--) {
            bst[b] = s;
            s *= bdims[b];
        }
        for (int b = 0; b < nb; b++) {
            if (bred[b]) {
                v.rdims[v.nr] = bdims[b];
                v.rst[v.nr++] = bst[b];
            } else {
                v.kdims[v.nk] = bdims[b];
                v.kst[v.nk++] = bst[b];
            }
        }
        if (v.nr == 1) {
            int rb = 0;
            while (!bred[rb])
                rb++;
            r = bdims[rb];
            for (int b = 0; b < nb; b++) {
                if (b < rb) outer *= bdims[b];
                if (b > rb) inner *= bdims[b];
            }
            cols = inner > 1;
        }
        if (v.nk == 0) { /* one output */
            v.nk = 1;
            v.kdims[0] = 1;
        }
    }
    const void *xp = rtx_tensor_data(x);
    void *yp = rtx_tensor_data(Y);
    switch (dt) {
    case RTX_F32: reduce_float<float>(op, xp, yp, &v, cols, outer, r, inner, cu->stream); break;
    case RTX_F16: reduce_float<__half>(op, xp, yp, &v, cols, outer, r, inner, cu->stream); break;
    case RTX_BF16:
        reduce_float<__nv_bfloat16>(op, xp, yp, &v, cols, outer, r, inner, cu->stream);
        break;
    case RTX_I8: reduce_int<int8_t>(op, xp, yp, &v, cols, outer, r, inner, cu->stream); break;
    case RTX_I32: reduce_int<int32_t>(op, xp, yp, &v, cols, outer, r, inner, cu->stream); break;
    case RTX_I64: reduce_int<int64_t>(op, xp, yp, &v, cols, outer, r, inner, cu->stream); break;
    default: reduce_int<uint8_t>(op, xp, yp, &v, cols, outer, r, inner, cu->stream); break;
    }
    return RTX_CUDA_CHECK(err, cudaGetLastError());
}

/* ------------------------------------------------------------------------------------------
 * argmax, softmax, log_softmax: rows along one axis, [outer, r, inner]
 * ---------------------------------------------------------------------------------------- */

/* Normalizes the "axis" attribute and sets outer, r, inner around it. */
static int axis_view(const struct rtx_node_args *a, int64_t *outer, int64_t *r, int64_t *inner,
                     struct rtx_err *err) {
    const struct rtx_tensor *x = a->in[0];
    int64_t axis = rtx_node_attr_int(a->node, "axis", -1);
    int nd = x->ndim;
    *outer = *r = *inner = 1;
    if (nd == 0) return 0; /* a scalar is one row of one element */
    int64_t ax = axis < 0 ? axis + nd : axis;
    if (ax < 0 || ax >= nd)
        return rtx__backend_node_err(err, a, RTX_EINVAL, "axis %lld out of range for rank %d",
                                     (long long)axis, nd);
    for (int d = 0; d < nd; d++) {
        if (d < ax)
            *outer *= x->dims[d];
        else if (d == ax)
            *r = x->dims[d];
        else
            *inner *= x->dims[d];
    }
    return 0;
}

/* What argmax compares: f32 for float dtypes, int64 for integers. */
template <typename T> struct ArgVal { typedef long long V; static const bool is_float = false; };
template <> struct ArgVal<float> { typedef float V; static const bool is_float = true; };
template <> struct ArgVal<__half> { typedef float V; static const bool is_float = true; };
template <> struct ArgVal<__nv_bfloat16> { typedef float V; static const bool is_float = true; };

template <typename V> __device__ __forceinline__ V arg_lowest();
template <> __device__ __forceinline__ float arg_lowest<float>() {
    return -INFINITY;
}
template <> __device__ __forceinline__ long long arg_lowest<long long>() {
    return LLONG_MIN;
}

template <typename T> __device__ __forceinline__ typename ArgVal<T>::V arg_load(T v) {
    return (long long)v;
}
template <> __device__ __forceinline__ float arg_load<float>(float v) {
    return v;
}
template <> __device__ __forceinline__ float arg_load<__half>(__half v) {
    return to_f32(v);
}
template <> __device__ __forceinline__ float arg_load<__nv_bfloat16>(__nv_bfloat16 v) {
    return to_f32(v);
}

/* Whether (v2, i2) beats (v1, i1): NaN first, then the larger value, then the lower index. */
template <typename V>
__device__ __forceinline__ bool arg_better(V v1, long long i1, V v2, long long i2) {
    bool n1 = v1 != v1, n2 = v2 != v2;
    if (n1 || n2) return n1 && n2 ? i2 < i1 : n2;
    if (v2 != v1) return v2 > v1;
    return i2 < i1;
}

/* Block per row (inner == 1). */
template <typename T>
__global__ static void argmax_rows_kernel(const T *x, int64_t *y, int64_t rows, int64_t r) {
    typedef typename ArgVal<T>::V V;
    __shared__ V shv[32];
    __shared__ long long shi[32];
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const T *p = x + row * r;
        V best = arg_lowest<V>();
        long long bi = LLONG_MAX;
        for (int64_t j = threadIdx.x; j < r; j += blockDim.x) {
            V v = arg_load(p[j]);
            if (arg_better(best, bi, v, (long long)j)) {
                best = v;
                bi = j;
            }
        }
        for (int o = 16; o > 0; o >>= 1) {
            V ov = __shfl_xor_sync(0xffffffffu, best, o);
            long long oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (arg_better(best, bi, ov, oi)) {
                best = ov;
                bi = oi;
            }
        }
        int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        __syncthreads();
        if (lane == 0) {
            shv[warp] = best;
            shi[warp] = bi;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            for (int w = 1; w < (int)(blockDim.x >> 5); w++) {
                if (arg_better(best, bi, shv[w], shi[w])) {
                    best = shv[w];
                    bi = shi[w];
                }
            }
            y[row] = bi;
        }
    }
}

/* Thread per (outer, inner) column (inner > 1). */
template <typename T>
__global__ static void argmax_cols_kernel(const T *x, int64_t *y, int64_t outer, int64_t r,
                                          int64_t inner) {
    typedef typename ArgVal<T>::V V;
    int64_t n = outer * inner, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += stride) {
        int64_t o = t / inner, i = t % inner;
        const T *p = x + o * r * inner + i;
        V best = arg_load(p[0]);
        long long bi = 0;
        for (int64_t j = 1; j < r; j++) {
            V v = arg_load(p[j * inner]);
            if (arg_better(best, bi, v, (long long)j)) {
                best = v;
                bi = j;
            }
        }
        y[t] = bi;
    }
}

/* Split rows (inner == 1, float dtypes, few long rows: the logits of a generation step). A
 * row's (value, index) pairs order as one 64-bit key: the value's bits made monotonic (-0 as
 * +0, NaN above everything) above the complement of the index (the lower index wins a tie),
 * so blocks of one row combine by atomicMax on the row's output word, which starts at 0 (no
 * key is 0) and a last kernel turns into the index. */
#define SPLIT_MIN_ROW 8192   /* shorter rows: one block each */
#define SPLIT_SEGMENT 4096   /* elements per block at least */
#define SPLIT_THREADS 256

__device__ __forceinline__ unsigned long long arg_key(float v, int64_t j) {
    unsigned u;
    if (v != v) {
        u = 0xffffffffu;
    } else {
        u = __float_as_uint(v == 0.0f ? 0.0f : v);
        u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    }
    return ((unsigned long long)u << 32) | (0xffffffffu - (unsigned)j);
}

template <typename T>
__global__ static void argmax_split_kernel(const T *x, int64_t *y, int64_t r, int64_t seg) {
    int64_t row = blockIdx.y, lo = (int64_t)blockIdx.x * seg;
    int64_t hi = lo + seg < r ? lo + seg : r;
    const T *p = x + row * r;
    unsigned long long best = 0;
    for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) {
        unsigned long long k = arg_key(arg_load(p[j]), j);
        best = k > best ? k : best;
    }
    for (int o = 16; o > 0; o >>= 1) {
        unsigned long long ok = __shfl_xor_sync(0xffffffffu, best, o);
        best = ok > best ? ok : best;
    }
    if ((threadIdx.x & 31) == 0 && best) atomicMax((unsigned long long *)&y[row], best);
}

__global__ static void argmax_split_finish(int64_t *y, int64_t rows) {
    int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (row < rows) y[row] = (int64_t)(0xffffffffu - (unsigned)((unsigned long long)y[row]));
}

/* Blocks per row for the split kernel; 0: the row kernel (the rows fill the device). */
static int64_t argmax_parts(int64_t outer, int64_t r, int sms) {
    if (r < SPLIT_MIN_ROW || r > INT32_MAX || outer > 65535 || outer >= 2 * (int64_t)sms) return 0;
    int64_t want = (2 * (int64_t)sms + outer - 1) / outer, most = r / SPLIT_SEGMENT;
    return want < most ? want : most;
}

template <typename T>
static void argmax_launch(const void *x, int64_t *y, int64_t outer, int64_t r, int64_t inner,
                          int sms, cudaStream_t s) {
    int64_t parts = inner == 1 && ArgVal<T>::is_float ? argmax_parts(outer, r, sms) : 0;
    if (parts > 1) {
        int64_t seg = (r + parts - 1) / parts;
        cudaMemsetAsync(y, 0, (size_t)outer * sizeof *y, s);
        argmax_split_kernel<T><<<dim3((unsigned)parts, (unsigned)outer), SPLIT_THREADS, 0, s>>>(
            (const T *)x, y, r, seg);
        argmax_split_finish<<<(unsigned)((outer + 255) / 256), 256, 0, s>>>(y, outer);
    } else if (inner == 1) {
        argmax_rows_kernel<T><<<grid_of(outer), threads_for(r), 0, s>>>((const T *)x, y, outer, r);
    } else {
        int64_t n = outer * inner;
        argmax_cols_kernel<T>
            <<<grid_of((n + 255) / 256), 256, 0, s>>>((const T *)x, y, outer, r, inner);
    }
}

/* ------------------------------------------------------------------------------------------
 * Register rows (softmax over the last axis, layer_norm, rms_norm)
 * ---------------------------------------------------------------------------------------- */

#define REG_PACKS 4          /* packs per thread in the block-per-row kernels */
#define REG_MAX_THREADS 512  /* their largest block */
#define REG_MAX_PACKS (REG_PACKS * REG_MAX_THREADS)
#define REG_WARP_PACKS 128   /* longest row that a warp takes */
#define REG_WARP_BLOCK 128   /* threads (4 warps, 4 rows) per block of the warp kernels */

/* max that propagates NaN (as nan_max), in one instruction (PTX max.NaN, sm_80 and later). */
__device__ __forceinline__ float max_nan(float a, float b) {
    float m;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(m) : "f"(a), "f"(b));
    return m;
}

/* e^d for the softmax kernels, d = x - max (<= 0, or NaN). f32 keeps expf. f16 and bf16, whose
 * outputs carry 11 and 8 bits, take the special-function unit's 2^x of d * log2(e)
 * (ex2.approx.ftz: about 2 ulp of f32, results below 2^-126 flushed to 0, -inf gives 0 and
 * NaN NaN): two instructions where expf takes about eight, which is what kept bf16 softmax
 * below the copy bandwidth. d is formed before scaling so large |x| lose nothing. */
template <typename T> __device__ __forceinline__ float softmax_exp(float d) {
    return expf(d);
}
__device__ __forceinline__ float sfu_exp(float d) {
    float e;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(d * 1.4426950408889634f));
    return e;
}
template <> __device__ __forceinline__ float softmax_exp<__half>(float d) {
    return sfu_exp(d);
}
template <> __device__ __forceinline__ float softmax_exp<__nv_bfloat16>(float d) {
    return sfu_exp(d);
}

template <typename T, int V> struct __align__(16) vpack {
    T v[V];
};

/* The 32-bit word holding two (one for f32) copies of v, exact in T (0 and -inf here). */
template <typename T> __device__ __forceinline__ uint32_t splat_word(float v) {
    return __float_as_uint(v);
}
template <> __device__ __forceinline__ uint32_t splat_word<__nv_bfloat16>(float v) {
    return (__float_as_uint(v) >> 16) * 0x10001u;
}
template <> __device__ __forceinline__ uint32_t splat_word<__half>(float v) {
    return (uint32_t)__half_as_ushort(__float2half_rn(v)) * 0x10001u;
}

/* The 1 (f32) or 2 values of T in a 32-bit word as f32: a bf16 is the high half of its f32,
 * so one shift or mask each; f16 pairs through the paired conversion. */
template <typename T> __device__ __forceinline__ void word_f32(uint32_t w, float *f) {
    f[0] = __uint_as_float(w);
}
template <> __device__ __forceinline__ void word_f32<__nv_bfloat16>(uint32_t w, float *f) {
    f[0] = __uint_as_float(w << 16);
    f[1] = __uint_as_float(w & 0xffff0000u);
}
template <> __device__ __forceinline__ void word_f32<__half>(uint32_t w, float *f) {
    __half2 h = *reinterpret_cast<const __half2 *>(&w);
    float2 t = __half22float2(h);
    f[0] = t.x;
    f[1] = t.y;
}

/* Loads packs lane, lane + lanes, ... (NV of them) of a row of cp packs as f32; packs past
 * the row read as `pad` (0 or -inf: a value that leaves the caller's reductions unchanged). */
template <typename T, int NV, int V>
__device__ __forceinline__ void row_load(const T *p, int cp, int lane, int lanes, float pad,
                                         float (&f)[NV][V]) {
    constexpr int PER_WORD = 4 / sizeof(T);
    uint32_t pw = splat_word<T>(pad);
#pragma unroll
    for (int k = 0; k < NV; k++) {
        int c = k * lanes + lane;
        uint4 x = make_uint4(pw, pw, pw, pw);
        if (c < cp) x = ((const uint4 *)p)[c];
        word_f32<T>(x.x, &f[k][0]);
        word_f32<T>(x.y, &f[k][PER_WORD]);
        word_f32<T>(x.z, &f[k][2 * PER_WORD]);
        word_f32<T>(x.w, &f[k][3 * PER_WORD]);
    }
}

template <bool WARP> __device__ __forceinline__ float row_sum(float v, float *sh) {
    return WARP ? warp_sum(v) : block_sum(v, sh);
}
template <bool WARP> __device__ __forceinline__ float row_max(float v, float *sh) {
    return WARP ? warp_max(v) : block_max(v, sh);
}

/* The rows a warp (WARP) or a block walks, and its lane among the threads of a row. */
template <bool WARP> struct RowWalk {
    int lane, lanes;
    int64_t first, step;
    __device__ RowWalk() {
        int per = WARP ? (int)(blockDim.x >> 5) : 1;
        lane = WARP ? (int)(threadIdx.x & 31) : (int)threadIdx.x;
        lanes = WARP ? 32 : (int)blockDim.x;
        first = (int64_t)blockIdx.x * per + (WARP ? (int64_t)(threadIdx.x >> 5) : 0);
        step = (int64_t)gridDim.x * per;
    }
};

/* softmax / log_softmax (LOG) of rows of cp packs held in registers. Packs past the row
 * load as -inf: they leave the max alone and add exp(-inf) = 0 to the sum (a row whose max
 * is -inf, NaN or +inf gives NaN either way), so only the store checks the row's end. Max and
 * sum keep one partial per pack, NV independent chains instead of one. */
template <typename T, int NV, bool WARP, bool LOG>
__global__ static void __launch_bounds__(REG_MAX_THREADS)
softmax_reg_kernel(const T *x, T *y, int64_t rows, int cp) {
    constexpr int V = 16 / sizeof(T);
    typedef vpack<T, V> P;
    __shared__ float sh[32];
    RowWalk<WARP> w;
    for (int64_t row = w.first; row < rows; row += w.step) {
        float f[NV][V], part[NV];
        row_load<T, NV, V>(x + row * cp * V, cp, w.lane, w.lanes, -INFINITY, f);
#pragma unroll
        for (int k = 0; k < NV; k++) {
            part[k] = f[k][0];
#pragma unroll
            for (int j = 1; j < V; j++)
                part[k] = max_nan(part[k], f[k][j]);
        }
        float mx = part[0];
#pragma unroll
        for (int k = 1; k < NV; k++)
            mx = max_nan(mx, part[k]);
        mx = row_max<WARP>(mx, sh);
#pragma unroll
        for (int k = 0; k < NV; k++) {
            part[k] = 0.0f;
#pragma unroll
            for (int j = 0; j < V; j++) {
                float e = softmax_exp<T>(f[k][j] - mx);
                part[k] += e;
                if (!LOG) f[k][j] = e;
            }
        }
        float sum = part[0];
#pragma unroll
        for (int k = 1; k < NV; k++)
            sum += part[k];
        sum = row_sum<WARP>(sum, sh);
        float lse = logf(sum), inv = 1.0f / sum;
        P *q = (P *)(y + row * cp * V);
#pragma unroll
        for (int k = 0; k < NV; k++) {
            int c = k * w.lanes + w.lane;
            if (c >= cp) continue;
            P o;
#pragma unroll
            for (int j = 0; j < V; j++)
                o.v[j] = from_f32<T>(LOG ? f[k][j] - mx - lse : f[k][j] * inv);
            q[c] = o;
        }
    }
}

/* layer_norm / rms_norm of rows of cp packs held in registers. */
template <typename T, int NV, bool WARP>
__global__ static void __launch_bounds__(REG_MAX_THREADS)
norm_reg_kernel(const T *x, const T *scale, const T *bias, T *y, int64_t rows, int cp,
                float eps, bool is_layer) {
    constexpr int V = 16 / sizeof(T);
    typedef vpack<T, V> P;
    __shared__ float sh[32];
    RowWalk<WARP> w;
    float r = (float)((int64_t)cp * V);
    for (int64_t row = w.first; row < rows; row += w.step) {
        float f[NV][V];
        row_load<T, NV, V>(x + row * cp * V, cp, w.lane, w.lanes, 0.0f, f);
        float mean = 0.0f, acc = 0.0f;
        if (is_layer) {
#pragma unroll
            for (int k = 0; k < NV; k++)
#pragma unroll
                for (int j = 0; j < V; j++)
                    mean += f[k][j]; /* packs past the row hold 0 */
            mean = row_sum<WARP>(mean, sh) / r;
#pragma unroll
            for (int k = 0; k < NV; k++) {
                if (k * w.lanes + w.lane >= cp) continue;
#pragma unroll
                for (int j = 0; j < V; j++) {
                    float d = f[k][j] - mean;
                    acc += d * d;
                }
            }
        } else {
#pragma unroll
            for (int k = 0; k < NV; k++)
#pragma unroll
                for (int j = 0; j < V; j++)
                    acc += f[k][j] * f[k][j];
        }
        float rstd = rsqrtf(row_sum<WARP>(acc, sh) / r + eps);
        P *q = (P *)(y + row * cp * V);
#pragma unroll
        for (int k = 0; k < NV; k++) {
            int c = k * w.lanes + w.lane;
            if (c >= cp) continue;
            P sc, bi, o;
            if (scale) sc = ((const P *)scale)[c];
            if (bias) bi = ((const P *)bias)[c];
#pragma unroll
            for (int j = 0; j < V; j++) {
                float v = (f[k][j] - mean) * rstd;
                if (scale) v *= to_f32(sc.v[j]);
                if (bias) v += to_f32(bi.v[j]);
                o.v[j] = from_f32<T>(v);
            }
            q[c] = o;
        }
    }
}

static bool aligned16(const void *p) {
    return ((uintptr_t)p & 15u) == 0;
}

/* Launch shape of the register-row kernels for rows of r elements of esize bytes: false when
 * a row is not a whole number of packs or is too long (the caller checks alignment). */
struct RegCfg {
    int cp, nv;
    bool warp;
    unsigned threads, blocks;
};

static bool reg_cfg(int64_t rows, int64_t r, size_t esize, RegCfg *c) {
    int64_t v = 16 / (int64_t)esize;
    if (r % v != 0 || r / v > REG_MAX_PACKS || r / v < 1) return false;
    int64_t cp = r / v;
    c->cp = (int)cp;
    if (cp <= REG_WARP_PACKS) {
        int per = REG_WARP_BLOCK / 32;
        c->warp = true;
        c->nv = cp <= 32 ? 1 : cp <= 64 ? 2 : 4;
        c->threads = REG_WARP_BLOCK;
        c->blocks = grid_of((rows + per - 1) / per);
    } else {
        int64_t t = (cp + REG_PACKS - 1) / REG_PACKS;
        c->warp = false;
        c->nv = REG_PACKS;
        c->threads = (unsigned)((t + 31) / 32 * 32);
        c->blocks = grid_of(rows);
    }
    return true;
}

template <typename T, bool LOG>
static void softmax_reg_launch(const T *x, T *y, int64_t rows, const RegCfg &c,
                               cudaStream_t s) {
    if (!c.warp)
        softmax_reg_kernel<T, REG_PACKS, false, LOG>
            <<<c.blocks, c.threads, 0, s>>>(x, y, rows, c.cp);
    else if (c.nv == 1)
        softmax_reg_kernel<T, 1, true, LOG><<<c.blocks, c.threads, 0, s>>>(x, y, rows, c.cp);
    else if (c.nv == 2)
        softmax_reg_kernel<T, 2, true, LOG><<<c.blocks, c.threads, 0, s>>>(x, y, rows, c.cp);
    else
        softmax_reg_kernel<T, 4, true, LOG><<<c.blocks, c.threads, 0, s>>>(x, y, rows, c.cp);
}

template <typename T>
static bool softmax_reg(const void *xv, void *yv, int64_t rows, int64_t r, bool lg,
                        cudaStream_t s) {
    RegCfg c;
    if (!aligned16(xv) || !aligned16(yv) || !reg_cfg(rows, r, sizeof(T), &c)) return false;
    if (lg)
        softmax_reg_launch<T, true>((const T *)xv, (T *)yv, rows, c, s);
    else
        softmax_reg_launch<T, false>((const T *)xv, (T *)yv, rows, c, s);
    return true;
}

template <typename T>
static bool norm_reg(const void *xv, const void *sv, const void *bv, void *yv, int64_t rows,
                     int64_t r, float eps, bool is_layer, cudaStream_t s) {
    RegCfg c;
    if (!aligned16(xv) || !aligned16(yv) || !aligned16(sv) || !aligned16(bv) ||
        !reg_cfg(rows, r, sizeof(T), &c))
        return false;
    const T *x = (const T *)xv, *sc = (const T *)sv, *bi = (const T *)bv;
    T *y = (T *)yv;
    if (!c.warp)
        norm_reg_kernel<T, REG_PACKS, false>
            <<<c.blocks, c.threads, 0, s>>>(x, sc, bi, y, rows, c.cp, eps, is_layer);
    else if (c.nv == 1)
        norm_reg_kernel<T, 1, true>
            <<<c.blocks, c.threads, 0, s>>>(x, sc, bi, y, rows, c.cp, eps, is_layer);
    else if (c.nv == 2)
        norm_reg_kernel<T, 2, true>
            <<<c.blocks, c.threads, 0, s>>>(x, sc, bi, y, rows, c.cp, eps, is_layer);
    else
        norm_reg_kernel<T, 4, true>
            <<<c.blocks, c.threads, 0, s>>>(x, sc, bi, y, rows, c.cp, eps, is_layer);
    return true;
}

/* softmax / log_softmax, block per row of the last axis. */
template <typename T>
__global__ static void softmax_rows_kernel(const T *x, T *y, int64_t rows, int64_t r,
                                           bool is_log) {
    __shared__ float sh[32];
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const T *p = x + row * r;
        T *q = y + row * r;
        float mx = -INFINITY;
        for (int64_t j = threadIdx.x; j < r; j += blockDim.x)
            mx = nan_max(mx, to_f32(p[j]));
        mx = block_max(mx, sh);
        float sum = 0.0f;
        for (int64_t j = threadIdx.x; j < r; j += blockDim.x)
            sum += softmax_exp<T>(to_f32(p[j]) - mx);
        sum = block_sum(sum, sh);
        if (is_log) {
            float lse = logf(sum);
            for (int64_t j = threadIdx.x; j < r; j += blockDim.x)
                q[j] = from_f32<T>(to_f32(p[j]) - mx - lse);
        } else {
            float inv = 1.0f / sum;
            for (int64_t j = threadIdx.x; j < r; j += blockDim.x)
                q[j] = from_f32<T>(softmax_exp<T>(to_f32(p[j]) - mx) * inv);
        }
    }
}

/* softmax / log_softmax, thread per (outer, inner) column of another axis. */
template <typename T>
__global__ static void softmax_cols_kernel(const T *x, T *y, int64_t outer, int64_t r,
                                           int64_t inner, bool is_log) {
    int64_t n = outer * inner, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += stride) {
        int64_t o = t / inner, i = t % inner, base = o * r * inner + i;
        float mx = -INFINITY;
        for (int64_t j = 0; j < r; j++)
            mx = nan_max(mx, to_f32(x[base + j * inner]));
        float sum = 0.0f;
        for (int64_t j = 0; j < r; j++)
            sum += softmax_exp<T>(to_f32(x[base + j * inner]) - mx);
        float lse = logf(sum), inv = 1.0f / sum;
        for (int64_t j = 0; j < r; j++) {
            float v = to_f32(x[base + j * inner]);
            y[base + j * inner] =
                from_f32<T>(is_log ? v - mx - lse : softmax_exp<T>(v - mx) * inv);
        }
    }
}

template <typename T>
static void softmax_launch(const void *x, void *y, int64_t outer, int64_t r, int64_t inner,
                           bool is_log, cudaStream_t s) {
    if (inner == 1 && softmax_reg<T>(x, y, outer, r, is_log, s)) return;
    if (inner == 1) {
        softmax_rows_kernel<T>
            <<<grid_of(outer), threads_for(r), 0, s>>>((const T *)x, (T *)y, outer, r, is_log);
    } else {
        int64_t n = outer * inner;
        softmax_cols_kernel<T><<<grid_of((n + 255) / 256), 256, 0, s>>>((const T *)x, (T *)y,
                                                                        outer, r, inner, is_log);
    }
}

static int run_rows(struct rtx_cuda *cu, const struct rtx_node_args *a, struct rtx_err *err) {
    const struct rtx_tensor *x = a->in[0];
    struct rtx_tensor *Y = a->out[0];
    enum rtx_dtype dt = x->dtype;
    bool is_arg = a->node->op == RTX_OP_ARGMAX;
    if (is_arg ? (dt == RTX_BOOL || Y->dtype != RTX_I64)
               : (!rtx_dtype_is_float(dt) || Y->dtype != dt))
        return rtx__backend_node_err(err, a, RTX_EUNSUPPORTED, "%s of %s", rtx_op_name(a->node->op),
                                     rtx_dtype_name(dt));
    int64_t outer, r, inner;
    int rc = axis_view(a, &outer, &r, &inner, err);
    if (rc < 0) return rc;
    if (rtx_tensor_numel(Y) == 0) return 0;
    if (r == 0)
        return rtx__backend_node_err(err, a, RTX_EINVAL, "%s of an empty axis",
                                     rtx_op_name(a->node->op));
    const void *xp = rtx_tensor_data(x);
    void *yp = rtx_tensor_data(Y);
    cudaStream_t s = cu->stream;
    if (is_arg) {
        int64_t *yi = (int64_t *)yp;
        switch (dt) {
        case RTX_F32: argmax_launch<float>(xp, yi, outer, r, inner, cu->sm_count, s); break;
        case RTX_F16: argmax_launch<__half>(xp, yi, outer, r, inner, cu->sm_count, s); break;
        case RTX_BF16:
            argmax_launch<__nv_bfloat16>(xp, yi, outer, r, inner, cu->sm_count, s);
            break;
        case RTX_I8: argmax_launch<int8_t>(xp, yi, outer, r, inner, cu->sm_count, s); break;
        case RTX_I32: argmax_launch<int32_t>(xp, yi, outer, r, inner, cu->sm_count, s); break;
        case RTX_I64: argmax_launch<int64_t>(xp, yi, outer, r, inner, cu->sm_count, s); break;
        default: argmax_launch<uint8_t>(xp, yi, outer, r, inner, cu->sm_count, s); break;
        }
    } else {
        bool lg = a->node->op == RTX_OP_LOG_SOFTMAX;
        switch (dt) {
        case RTX_F32: softmax_launch<float>(xp, yp, outer, r, inner, lg, s); break;
        case RTX_F16: softmax_launch<__half>(xp, yp, outer, r, inner, lg, s); break;
        default: softmax_launch<__nv_bfloat16>(xp, yp, outer, r, inner, lg, s); break;
        }
    }
    return RTX_CUDA_CHECK(err, cudaGetLastError());
}

/* ------------------------------------------------------------------------------------------
 * layer_norm, rms_norm: contiguous rows of r = prod(dims[axis:]) elements
 * ---------------------------------------------------------------------------------------- */

template <typename T>
__global__ static void norm_kernel(const T *x, const T *scale, const T *bias, T *y, int64_t rows,
                                   int64_t r, float eps, bool is_layer) {
    __shared__ float sh[32];
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const T *p = x + row * r;
        T *q = y + row * r;
        float mean = 0.0f, acc = 0.0f;
        if (is_layer) {
            for (int64_t j = threadIdx.x; j < r; j += blockDim.x)
                mean += to_f32(p[j]);
            mean = block_sum(mean, sh) / (float)r;
            for (int64_t j = threadIdx.x; j < r; j += blockDim.x) {
                float d = to_f32(p[j]) - mean;
                acc += d * d;
            }
        } else {
            for (int64_t j = threadIdx.x; j < r; j += blockDim.x) {
                float v = to_f32(p[j]);
                acc += v * v;
            }
        }
        float rstd = rsqrtf(block_sum(acc, sh) / (float)r + eps);
        for (int64_t j = threadIdx.x; j < r; j += blockDim.x) {
            float v = (to_f32(p[j]) - mean) * rstd;
            if (scale) v *= to_f32(scale[j]);
            if (bias) v += to_f32(bias[j]);
            q[j] = from_f32<T>(v);
        }
    }
}

template <typename T>
static void norm_launch(const void *x, const void *scale, const void *bias, void *y, int64_t rows,
                        int64_t r, float eps, bool is_layer, cudaStream_t s) {
    if (norm_reg<T>(x, scale, bias, y, rows, r, eps, is_layer, s)) return;
    norm_kernel<T><<<grid_of(rows), threads_for(r), 0, s>>>(
        (const T *)x, (const T *)scale, (const T *)bias, (T *)y, rows, r, eps, is_layer);
}

static int run_norm(struct rtx_cuda *cu, const struct rtx_node_args *a, struct rtx_err *err) {
    const struct rtx_tensor *x = a->in[0];
    struct rtx_tensor *Y = a->out[0];
    enum rtx_dtype dt = x->dtype;
    bool is_layer = a->node->op == RTX_OP_LAYER_NORM;
    if (!rtx_dtype_is_float(dt) || Y->dtype != dt)
        return rtx__backend_node_err(err, a, RTX_EUNSUPPORTED, "%s of %s", rtx_op_name(a->node->op),
                                     rtx_dtype_name(dt));
    int64_t axis = rtx_node_attr_int(a->node, "axis", -1);
    int nd = x->ndim;
    int64_t ax = axis < 0 ? axis + nd : axis;
    if (ax < 0 || ax >= (nd > 0 ? nd : 1))
        return rtx__backend_node_err(err, a, RTX_EINVAL, "axis %lld out of range for rank %d",
                                     (long long)axis, nd);
    int64_t rows = 1, r = 1;
    for (int d = 0; d < nd; d++) {
        if (d < ax)
            rows *= x->dims[d];
        else
            r *= x->dims[d];
    }
    float eps = (float)rtx_node_attr_float(a->node, "epsilon", is_layer ? 1e-5 : 1e-6);
    const void *params[2] = {NULL, NULL};
    int n_params = is_layer ? 2 : 1;
    for (int k = 1; k <= n_params && k < a->n_in; k++) {
        const struct rtx_tensor *p = a->in[k];
        if (!p) continue;
        if (p->dtype != dt || rtx_tensor_numel(p) != r)
            return rtx__backend_node_err(err, a, RTX_EINVAL,
                                         "input %d must be %s with %lld elements", k,
                                         rtx_dtype_name(dt), (long long)r);
        params[k - 1] = rtx_tensor_data(p);
    }
    if (rows == 0 || r == 0) return 0;
    const void *xp = rtx_tensor_data(x);
    void *yp = rtx_tensor_data(Y);
    switch (dt) {
    case RTX_F32:
        norm_launch<float>(xp, params[0], params[1], yp, rows, r, eps, is_layer, cu->stream);
        break;
    case RTX_F16:
        norm_launch<__half>(xp, params[0], params[1], yp, rows, r, eps, is_layer, cu->stream);
        break;
    default:
        norm_launch<__nv_bfloat16>(xp, params[0], params[1], yp, rows, r, eps, is_layer,
                                   cu->stream);
        break;
    }
    return RTX_CUDA_CHECK(err, cudaGetLastError());
}

/* ------------------------------------------------------------------------------------------
 * Entry points
 * ---------------------------------------------------------------------------------------- */

extern "C" int rtx__cuda_reduce(struct rtx_cuda *cu, const struct rtx_node_args *a,
                                struct rtx_err *err) {
    if (a->n_in < 1 || !a->in[0] || a->n_out < 1 || !a->out[0])
        return rtx__backend_node_err(err, a, RTX_EINTERNAL, "missing input or output tensor");
    switch (a->node->op) {
    case RTX_OP_REDUCE_SUM:
    case RTX_OP_REDUCE_MEAN:
    case RTX_OP_REDUCE_MAX:
    case RTX_OP_REDUCE_MIN: return run_reduce(cu, a, err);
    case RTX_OP_ARGMAX:
    case RTX_OP_SOFTMAX:
    case RTX_OP_LOG_SOFTMAX: return run_rows(cu, a, err);
    case RTX_OP_LAYER_NORM:
    case RTX_OP_RMS_NORM: return run_norm(cu, a, err);
    default: break;
    }
    return rtx__backend_node_err(err, a, RTX_EINTERNAL, "not a reduction op");
}

extern "C" bool rtx__cuda_reduce_supports(const struct rtx_graph *g, const struct rtx_node *n) {
    if (n->n_inputs < 1 || n->inputs[0] < 0) return false;
    enum rtx_dtype dt = g->values[n->inputs[0]].dtype;
    bool is_float = rtx_dtype_is_float(dt);
    switch (n->op) {
    case RTX_OP_REDUCE_SUM:
    case RTX_OP_REDUCE_MAX:
    case RTX_OP_REDUCE_MIN:
    case RTX_OP_ARGMAX: return dt != RTX_BOOL && (int)dt >= 0 && dt < RTX_DTYPE_COUNT;
    case RTX_OP_REDUCE_MEAN:
    case RTX_OP_SOFTMAX:
    case RTX_OP_LOG_SOFTMAX:
    case RTX_OP_LAYER_NORM:
    case RTX_OP_RMS_NORM: return is_float;
    default: return false;
    }
}
