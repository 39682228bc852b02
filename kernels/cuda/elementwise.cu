/*
 * elementwise.cu - the kernels of the CUDA elementwise ops; elementwise.c prepares a
 * struct rtx_cuda_ew (launch.h) and calls rtx__cuda_ew_launch.
 *
 * DESIGN
 * Five kernels, chosen per launch:
 * - flat float arithmetic (f32/f16/bf16 binary and unary ops over one merged dim whose input
 *   strides are 1 or 0): each thread handles one 16-byte pack (4 f32 or 8 f16/bf16) with
 *   vector loads and stores; a broadcast scalar input is read once. Needs 16-byte aligned
 *   operands, which the pool and the 64-byte arena offsets give; otherwise:
 * - row-broadcast float arithmetic (a binary op over a merged [R, C] output, C a multiple of
 *   the pack, each operand the full matrix, a [C] row or an [R] column): the same 16-byte
 *   packs, a pack never straddling rows, in a grid-stride loop of two waves per SM;
 * - strided float arithmetic, templated on the storage type, one element per thread, the
 *   input offsets computed from the output index (32-bit divisions when the output has
 *   fewer than 2^31 elements);
 * - a cast between float types over one contiguous run: 8 elements a thread (ew_cast_flat);
 * - everything else (integer arithmetic, other casts, where, the comparisons) in one kernel that
 *   switches on the dtypes at run time: a switch on a launch constant is uniform across the
 *   warp, and these ops are bound by memory traffic, not instructions.
 * Floats compute in f32 and round once on store (round to nearest even); integers compute in
 * int64 through uint64 so that overflow wraps, then wrap to the output width. The scalar
 * functions follow kernels/cpu/ops-elementwise.c formula by formula, so results agree to the
 * last few ulps of the CUDA math library; integer pow, whose result is truncated, is computed
 * exactly instead (see i_pow), since an ulp below an integer would truncate to the next one.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "kernels/cuda/launch.h"
#include "runtime/runtime.h"

#define EW_THREADS 256
#define EW_MAX_BLOCKS 8192 /* grid-stride loops cover the rest */

#define SQRT_2_OVER_PI 0.79788456080286535588f
#define SQRT_1_2 0.70710678118654752440f

/* ---- storage <-> f32 ---- */

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f<__half>(float v) {
    return __float2half_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

/* ---- scalar operations (as the CPU reference) ---- */

__device__ __forceinline__ float f_binary(int op, float x, float y) {
    switch (op) {
    case RTX_OP_ADD: return x + y;
    case RTX_OP_SUB: return x - y;
    case RTX_OP_MUL: return x * y;
    case RTX_OP_DIV: return x / y;
    default: return powf(x, y);
    }
}

__device__ __forceinline__ float f_unary(int op, int gelu_tanh, float x) {
    switch (op) {
    case RTX_OP_NEG: return -x;
    case RTX_OP_ABS: return fabsf(x);
    case RTX_OP_SQRT: return sqrtf(x);
    case RTX_OP_RSQRT: return 1.0f / sqrtf(x);
    case RTX_OP_EXP: return expf(x);
    case RTX_OP_LOG: return logf(x);
    case RTX_OP_TANH: return tanhf(x);
    case RTX_OP_ERF: return erff(x);
    case RTX_OP_RELU: return x < 0.0f ? 0.0f : x;
    case RTX_OP_SILU: return x / (1.0f + expf(-x));
    case RTX_OP_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case RTX_OP_GELU:
        if (gelu_tanh) {
            float u = SQRT_2_OVER_PI * (x + 0.044715f * x * x * x);
            return x / (1.0f + expf(-2.0f * u));
        }
        return 0.5f * x * erfcf(-x * SQRT_1_2);
    default: return x;
    }
}

__device__ __forceinline__ float f_apply(const rtx_cuda_ew &p, float x, float y) {
    return p.n_in == 2 ? f_binary(p.op, x, y) : f_unary(p.op, p.gelu_tanh, x);
}

__device__ __forceinline__ int64_t i_neg(int64_t x) { return (int64_t)(0ull - (uint64_t)x); }

__device__ void int_range(int dt, int64_t *lo, int64_t *hi) {
    switch (dt) {
    case RTX_I8: *lo = INT8_MIN; *hi = INT8_MAX; break;
    case RTX_I32: *lo = INT32_MIN; *hi = INT32_MAX; break;
    case RTX_U8: *lo = 0; *hi = UINT8_MAX; break;
    case RTX_BOOL: *lo = 0; *hi = 1; break;
    default: *lo = INT64_MIN; *hi = INT64_MAX; break;
    }
}

/* Truncates toward zero and clamps to the dtype's range; NaN gives 0. */
__device__ int64_t saturate(double v, int dt) {
    int64_t lo, hi;
    int_range(dt, &lo, &hi);
    if (v != v) return 0;
    if (v <= (double)lo) return lo;
    if (v >= (double)hi) return hi;
    return (int64_t)v;
}

/* Integer pow as the CPU computes it, pow() in double, truncated and saturated; but exact:
 * CUDA's pow may land an ulp below an integer (2.9999999999999996 for 3^1), which truncation
 * would turn into the integer below. Squaring in double is exact while every value stays
 * within 2^53; larger powers fall back to pow() (they saturate but for i64 results between
 * 2^53 and 2^63, where the last bits may differ from the host's pow). */
__device__ int64_t i_pow(int64_t x, int64_t y, int dt) {
    const double exact = 9007199254740992.0; /* 2^53 */
    if (y < 0) {
        if (x == 0) return saturate((double)INFINITY, dt);
        if (x == 1 || (x == -1 && (y & 1) == 0)) return 1;
        return x == -1 ? -1 : 0; /* |x^y| < 1 truncates to 0 */
    }
    double r = 1.0, b = (double)x;
    for (int64_t e = y; e > 0;) {
        if (e & 1) r *= b;
        e >>= 1;
        if (e) b *= b;
        if (fabs(r) > exact || fabs(b) > exact) return saturate(pow((double)x, (double)y), dt);
    }
    return saturate(r, dt);
}

__device__ int64_t i_binary(int op, int64_t x, int64_t y, int dt) {
    switch (op) {
    case RTX_OP_ADD: return (int64_t)((uint64_t)x + (uint64_t)y);
    case RTX_OP_SUB: return (int64_t)((uint64_t)x - (uint64_t)y);
    case RTX_OP_MUL: return (int64_t)((uint64_t)x * (uint64_t)y);
    case RTX_OP_DIV:
        if (y == 0) return 0;
        if (y == -1) return i_neg(x);
        return x / y;
    default: return i_pow(x, y, dt);
    }
}

__device__ int64_t i_unary(int op, int64_t x) {
    switch (op) {
    case RTX_OP_NEG: return i_neg(x);
    case RTX_OP_ABS: return x < 0 ? i_neg(x) : x;
    case RTX_OP_RELU: return x < 0 ? 0 : x;
    default: return x;
    }
}

/* ---- run-time typed loads and stores ---- */

__device__ __forceinline__ bool is_float(int dt) {
    return dt == RTX_F32 || dt == RTX_F16 || dt == RTX_BF16;
}

__device__ float load_f(const void *base, int dt, int64_t i) {
    switch (dt) {
    case RTX_F32: return ((const float *)base)[i];
    case RTX_F16: return to_f(((const __half *)base)[i]);
    default: return to_f(((const __nv_bfloat16 *)base)[i]);
    }
}

__device__ int64_t load_i(const void *base, int dt, int64_t i) {
    switch (dt) {
    case RTX_I8: return ((const int8_t *)base)[i];
    case RTX_I32: return ((const int32_t *)base)[i];
    case RTX_I64: return ((const int64_t *)base)[i];
    case RTX_U8: return ((const uint8_t *)base)[i];
    default: return ((const uint8_t *)base)[i] != 0; /* bool */
    }
}

__device__ void store_f(void *base, int dt, int64_t i, float v) {
    switch (dt) {
    case RTX_F32: ((float *)base)[i] = v; break;
    case RTX_F16: ((__half *)base)[i] = from_f<__half>(v); break;
    default: ((__nv_bfloat16 *)base)[i] = from_f<__nv_bfloat16>(v); break;
    }
}

/* Wraps to the integer width; bool stores v != 0. */
__device__ void store_i(void *base, int dt, int64_t i, int64_t v) {
    switch (dt) {
    case RTX_I8: ((int8_t *)base)[i] = (int8_t)v; break;
    case RTX_I32: ((int32_t *)base)[i] = (int32_t)v; break;
    case RTX_I64: ((int64_t *)base)[i] = v; break;
    case RTX_U8: ((uint8_t *)base)[i] = (uint8_t)v; break;
    default: ((uint8_t *)base)[i] = v != 0; break;
    }
}

/* ---- indexing ---- */

/* Input offsets (elements) of output element i. The loops run over the fixed bounds, fully
 * unrolled, so off[] and the parameter reads use constant indices and stay in registers. */
template <typename I>
__device__ __forceinline__ void offsets_t(const rtx_cuda_ew &p, I i, int64_t *off) {
#pragma unroll
    for (int k = 0; k < RTX_CUDA_EW_IN; k++) off[k] = 0;
#pragma unroll
    for (int j = 0; j < RTX_CUDA_DIMS; j++) {
        int d = RTX_CUDA_DIMS - 1 - j;
        if (d >= p.ndim) continue;
        I c = i;
        if (d > 0) {
            I dim = (I)p.dims[d];
            c = i % dim;
            i /= dim;
        }
#pragma unroll
        for (int k = 0; k < RTX_CUDA_EW_IN; k++)
            if (k < p.n_in) off[k] += (int64_t)c * p.st[k][d];
    }
}

__device__ __forceinline__ void offsets(const rtx_cuda_ew &p, int64_t i, int64_t *off) {
    if (p.n <= INT32_MAX)
        offsets_t<uint32_t>(p, (uint32_t)i, off);
    else
        offsets_t<int64_t>(p, i, off);
}

__device__ __forceinline__ int64_t thread_index() {
    return (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ int64_t grid_stride() { return (int64_t)gridDim.x * blockDim.x; }

/* ---- kernels ---- */

template <typename T, int V> struct __align__(16) pack {
    T v[V];
};

/* Float arithmetic over one merged dim, input strides 1 or 0, V elements per thread. */
template <typename T>
__global__ void ew_float_flat(const rtx_cuda_ew p) {
    constexpr int V = 16 / sizeof(T);
    typedef pack<T, V> P;
    const T *a = (const T *)p.in[0], *b = (const T *)p.in[1];
    bool va = p.st[0][0] != 0, vb = p.n_in == 2 && p.st[1][0] != 0;
    float a0 = to_f(a[0]), b0 = p.n_in == 2 ? to_f(b[0]) : 0.0f;
    int64_t nv = p.n / V;
    for (int64_t v = thread_index(); v < nv; v += grid_stride()) {
        P xa, xb, y;
        if (va) xa = ((const P *)a)[v];
        if (vb) xb = ((const P *)b)[v];
#pragma unroll
        for (int j = 0; j < V; j++) {
            float x = va ? to_f(xa.v[j]) : a0, z = vb ? to_f(xb.v[j]) : b0;
            y.v[j] = from_f<T>(f_apply(p, x, z));
        }
        ((P *)p.out)[v] = y;
    }
    int64_t i = nv * V + thread_index(); /* the tail, fewer than V elements */
    if (i < p.n) {
        float x = va ? to_f(a[i]) : a0, z = vb ? to_f(b[i]) : b0;
        ((T *)p.out)[i] = from_f<T>(f_apply(p, x, z));
    }
}

/* How an operand of the row kernel is read: the whole [R, C] matrix, a row vector of C
 * elements repeated on every row, or a column vector of R elements, one per row. */
enum { OPD_FULL, OPD_ROW, OPD_COL };

template <typename T, int V>
__device__ __forceinline__ void load_operand(const T *base, int kind, int64_t v, int64_t row,
                                             int64_t cv, float *out) {
    typedef pack<T, V> P;
    if (kind == OPD_COL) {
        float c = to_f(base[row]);
#pragma unroll
        for (int j = 0; j < V; j++) out[j] = c;
        return;
    }
    P x = ((const P *)base)[kind == OPD_FULL ? v : cv];
#pragma unroll
    for (int j = 0; j < V; j++) out[j] = to_f(x.v[j]);
}

/* Binary float arithmetic over a contiguous [R, C] output with C a multiple of V, each
 * operand full, a row vector or a column vector (p.dims[1] == C, kinds from p.st): each
 * thread takes 16-byte packs, which never straddle rows, in a grid-stride loop. I is the
 * index type (32-bit when the pack count allows: the row/column split is a division). */
template <typename T, typename I>
__global__ void ew_float_rows(const rtx_cuda_ew p, int ka, int kb) {
    constexpr int V = 16 / sizeof(T);
    typedef pack<T, V> P;
    const T *a = (const T *)p.in[0], *b = (const T *)p.in[1];
    I cpk = (I)(p.dims[1] / V), nv = (I)(p.n / V);
    I stride = (I)gridDim.x * blockDim.x;
    for (I v = (I)blockIdx.x * blockDim.x + threadIdx.x; v < nv; v += stride) {
        I row = v / cpk, cv = v - row * cpk;
        float xa[V], xb[V];
        load_operand<T, V>(a, ka, v, row, cv, xa);
        load_operand<T, V>(b, kb, v, row, cv, xb);
        P y;
#pragma unroll
        for (int j = 0; j < V; j++) y.v[j] = from_f<T>(f_binary(p.op, xa[j], xb[j]));
        ((P *)p.out)[v] = y;
    }
}

/* Float arithmetic over any broadcast. */
template <typename T>
__global__ void ew_float_strided(const rtx_cuda_ew p) {
    const T *a = (const T *)p.in[0], *b = (const T *)p.in[1];
    for (int64_t i = thread_index(); i < p.n; i += grid_stride()) {
        int64_t off[RTX_CUDA_EW_IN];
        offsets(p, i, off);
        float x = to_f(a[off[0]]), z = p.n_in == 2 ? to_f(b[off[1]]) : 0.0f;
        ((T *)p.out)[i] = from_f<T>(f_apply(p, x, z));
    }
}

/* A cast between float types over one contiguous merged dim: 8 elements a thread (16 or 32
 * bytes each way), converted as ew_generic converts them (through f32, rounded to nearest
 * even on store). The f32 cast of a step's logits ([rows, vocabulary]) took ew_generic's
 * per-element offsets and dtype switches: 0.29 ms for [256, 128256] on the H200. */
template <typename Ti, typename To>
__global__ void ew_cast_flat(const rtx_cuda_ew p) {
    constexpr int V = 8;
    const Ti *a = (const Ti *)p.in[0];
    To *o = (To *)p.out;
    int64_t nv = p.n / V;
    for (int64_t v = thread_index(); v < nv; v += grid_stride()) {
        pack<Ti, V> x = ((const pack<Ti, V> *)a)[v];
        pack<To, V> y;
#pragma unroll
        for (int j = 0; j < V; j++) y.v[j] = from_f<To>(to_f(x.v[j]));
        ((pack<To, V> *)o)[v] = y;
    }
    int64_t i = nv * V + thread_index(); /* the tail, fewer than V elements */
    if (i < p.n) o[i] = from_f<To>(to_f(a[i]));
}

/* Integer arithmetic, cast, where and the comparisons, typed at run time. */
__global__ void ew_generic(const rtx_cuda_ew p) {
    for (int64_t i = thread_index(); i < p.n; i += grid_stride()) {
        int64_t off[RTX_CUDA_EW_IN];
        offsets(p, i, off);
        int dt = p.in_dt[0];
        switch (p.op) {
        case RTX_OP_CAST:
            if (is_float(dt)) {
                float f = load_f(p.in[0], dt, off[0]);
                if (is_float(p.out_dt))
                    store_f(p.out, p.out_dt, i, f);
                else if (p.out_dt == RTX_BOOL)
                    store_i(p.out, p.out_dt, i, f != 0.0f);
                else
                    store_i(p.out, p.out_dt, i, saturate((double)f, p.out_dt));
            } else {
                int64_t v = load_i(p.in[0], dt, off[0]);
                if (is_float(p.out_dt))
                    store_f(p.out, p.out_dt, i, (float)v);
                else
                    store_i(p.out, p.out_dt, i, v);
            }
            break;
        case RTX_OP_WHERE: {
            bool c = ((const uint8_t *)p.in[0])[off[0]] != 0;
            int k = c ? 1 : 2;
            switch (p.out_dt) {
            case RTX_F32: case RTX_I32:
                ((uint32_t *)p.out)[i] = ((const uint32_t *)p.in[k])[off[k]];
                break;
            case RTX_F16: case RTX_BF16:
                ((uint16_t *)p.out)[i] = ((const uint16_t *)p.in[k])[off[k]];
                break;
            case RTX_I64:
                ((uint64_t *)p.out)[i] = ((const uint64_t *)p.in[k])[off[k]];
                break;
            default:
                ((uint8_t *)p.out)[i] = ((const uint8_t *)p.in[k])[off[k]];
                break;
            }
            break;
        }
        case RTX_OP_EQUAL: case RTX_OP_LESS: case RTX_OP_GREATER: {
            bool r;
            if (is_float(dt)) {
                float x = load_f(p.in[0], dt, off[0]), y = load_f(p.in[1], dt, off[1]);
                r = p.op == RTX_OP_EQUAL ? x == y : p.op == RTX_OP_LESS ? x < y : x > y;
            } else {
                int64_t x = load_i(p.in[0], dt, off[0]), y = load_i(p.in[1], dt, off[1]);
                r = p.op == RTX_OP_EQUAL ? x == y : p.op == RTX_OP_LESS ? x < y : x > y;
            }
            ((uint8_t *)p.out)[i] = r;
            break;
        }
        default:
            if (is_float(dt)) {
                float x = load_f(p.in[0], dt, off[0]);
                float y = p.n_in == 2 ? load_f(p.in[1], dt, off[1]) : 0.0f;
                store_f(p.out, p.out_dt, i, f_apply(p, x, y));
            } else {
                int64_t x = load_i(p.in[0], dt, off[0]);
                int64_t r = p.n_in == 2 ? i_binary(p.op, x, load_i(p.in[1], dt, off[1]), dt)
                                        : i_unary(p.op, x);
                store_i(p.out, p.out_dt, i, r);
            }
            break;
        }
    }
}

/* ---- launch ---- */

static unsigned blocks_for(int64_t work) {
    int64_t b = (work + EW_THREADS - 1) / EW_THREADS;
    if (b < 1) b = 1;
    return (unsigned)(b < EW_MAX_BLOCKS ? b : EW_MAX_BLOCKS);
}

static bool aligned16(const void *ptr) { return ((uintptr_t)ptr & 15u) == 0; }

/* Multiprocessors of the current device (cached per device; 132 if the query fails). */
static int sm_count() {
    static int cached[64];
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0) dev = 0;
    if (dev < 64 && cached[dev] > 0) return cached[dev];
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0)
        n = 132;
    if (dev < 64) cached[dev] = n;
    return n;
}

/* The row kernel's operand kind for input k of a merged [R, C] op, or -1 when the input walks
 * the output otherwise (or is not aligned for 16-byte packs). */
static int row_kind(const rtx_cuda_ew &p, int k) {
    const int64_t *st = p.st[k];
    if (!aligned16(p.in[k])) return -1;
    if (st[0] == p.dims[1] && st[1] == 1) return OPD_FULL;
    if (st[0] == 0 && st[1] == 1) return OPD_ROW;
    if (st[0] == 1 && st[1] == 0) return OPD_COL;
    return -1;
}

/* Launches ew_float_rows when p is a binary op over [R, C] that it takes; false otherwise. */
template <typename T>
static bool launch_rows(const rtx_cuda_ew &p, cudaStream_t s) {
    const int64_t v = 16 / sizeof(T);
    if (p.n_in != 2 || p.ndim != 2 || p.dims[1] % v != 0 || !aligned16(p.out)) return false;
    int ka = row_kind(p, 0), kb = row_kind(p, 1);
    if (ka < 0 || kb < 0) return false;
    int64_t nv = p.n / v;
    int64_t cap = (int64_t)sm_count() * (2048 / EW_THREADS) * 2; /* two waves of full SMs */
    int64_t want = (nv + EW_THREADS - 1) / EW_THREADS;
    unsigned blocks = (unsigned)(want < cap ? want : cap);
    if (nv + (int64_t)blocks * EW_THREADS <= (int64_t)UINT32_MAX)
        ew_float_rows<T, uint32_t><<<blocks, EW_THREADS, 0, s>>>(p, ka, kb);
    else
        ew_float_rows<T, int64_t><<<blocks, EW_THREADS, 0, s>>>(p, ka, kb);
    return true;
}

template <typename T>
static void launch_float(const rtx_cuda_ew &p, cudaStream_t s) {
    bool flat = p.ndim == 1 && aligned16(p.out);
    for (int k = 0; k < p.n_in && flat; k++)
        flat = (p.st[k][0] == 0 || (p.st[k][0] == 1 && aligned16(p.in[k])));
    if (flat) {
        int64_t v = 16 / sizeof(T);
        int64_t work = p.n / v > p.n % v ? p.n / v : p.n % v;
        ew_float_flat<T><<<blocks_for(work), EW_THREADS, 0, s>>>(p);
    } else if (!launch_rows<T>(p, s)) {
        ew_float_strided<T><<<blocks_for(p.n), EW_THREADS, 0, s>>>(p);
    }
}

template <typename Ti>
static bool launch_cast_from(const rtx_cuda_ew &p, cudaStream_t s) {
    unsigned blocks = blocks_for(p.n / 8 > 0 ? p.n / 8 : 1);
    switch (p.out_dt) {
    case RTX_F32: ew_cast_flat<Ti, float><<<blocks, EW_THREADS, 0, s>>>(p); return true;
    case RTX_F16: ew_cast_flat<Ti, __half><<<blocks, EW_THREADS, 0, s>>>(p); return true;
    case RTX_BF16: ew_cast_flat<Ti, __nv_bfloat16><<<blocks, EW_THREADS, 0, s>>>(p); return true;
    default: return false;
    }
}

/* Launches ew_cast_flat when p is a float-to-float cast of one contiguous, aligned run. */
static bool launch_cast(const rtx_cuda_ew &p, cudaStream_t s) {
    if (p.op != RTX_OP_CAST || p.ndim != 1 || p.st[0][0] != 1 || !aligned16(p.in[0]) ||
        !aligned16(p.out))
        return false;
    switch (p.in_dt[0]) {
    case RTX_F32: return launch_cast_from<float>(p, s);
    case RTX_F16: return launch_cast_from<__half>(p, s);
    case RTX_BF16: return launch_cast_from<__nv_bfloat16>(p, s);
    default: return false;
    }
}

extern "C" cudaError_t rtx__cuda_ew_launch(const struct rtx_cuda_ew *p, cudaStream_t stream) {
    if (p->n <= 0) return cudaSuccess;
    bool arith = p->op != RTX_OP_CAST && p->op != RTX_OP_WHERE && p->op != RTX_OP_EQUAL &&
                 p->op != RTX_OP_LESS && p->op != RTX_OP_GREATER;
    if (arith && p->out_dt == RTX_F32)
        launch_float<float>(*p, stream);
    else if (arith && p->out_dt == RTX_F16)
        launch_float<__half>(*p, stream);
    else if (arith && p->out_dt == RTX_BF16)
        launch_float<__nv_bfloat16>(*p, stream);
    else if (!launch_cast(*p, stream))
        ew_generic<<<blocks_for(p->n), EW_THREADS, 0, stream>>>(*p);
    return cudaGetLastError();
}
