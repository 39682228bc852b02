"""
Every op of docs/ops.md through rtxrun against the NumPy reference interpreter (rtxgraph.py).

Each case is a one-op graph built with graph_pb2: its data inputs are graph inputs fed as .npy
(or initializers where `init` says so), f16 data is fed as <f2 directly, bf16 data is fed as f32
and cast to bf16 inside the graph (and a bf16 result cast back to f32, which is exact), so the
reference sees exactly the bf16-rounded values the kernels see. Shapes and data are seeded
(collection is deterministic, as pytest-xdist needs).

Tolerances (|got - ref| <= atol + rtol*|ref|, the reference computed in float64 and rounded
once to the output dtype):
  * f32 elementwise: rtol 1e-5, atol 1e-6*max(1, max|ref|) (libm-grade f32 functions; the
    atol covers cancellation inside formulas such as gelu's 1+erf(x) near x = -5).
  * f16 / bf16: rtol = one ulp of the format (2^-10 / 2^-7, as 1e-3 / 8e-3): the kernel rounds
    an f32 result once, the reference rounds the exact one, so they may differ by one ulp at
    a tie; atol as f32 plus the smallest f16 subnormal.
  * integer, bool and pure data movement (transpose, slice, gather, cast, max/min, ...): exact.
  * ops that sum K products (matmul, gemm, conv2d, reduce_sum/mean, avg_pool): the standard
    forward error bound of any f32 summation order, |err| <= gamma_K * (|A|.|B|) with
    gamma_K = K*u/(1-K*u), u = 2^-24 (docs/ops.md: accumulation in f32), computed per element
    from the absolute values of the inputs; plus the output rounding (rtol above).
  * softmax, log_softmax, layer_norm, rms_norm, attention, rope, paged_attention: bounds
    derived the same way, see the tol_* functions.
"""

import math
import re

import numpy as np
import pytest

import rtxgraph as rg
from rtxgraph import GraphBuilder, f64
from opgen import (argmax_gen, attn_gen, cmp_gen, concat_gen, ints, ln_gen, nrm, paged_gen,
                   rope_gen, uni, where_gen)
from opgen import data as data_gen

U = rg.U32
RTOL = {"f32": 1e-5, "f16": 1e-3, "bf16": 8e-3}
FLOOR = {"f32": 1e-30, "f16": 2.0**-24, "bf16": 1e-30}
INPUT_NAMES = {
    "where": ["cond", "x", "y"], "matmul": ["a", "b"], "gemm": ["a", "b", "c"],
    "gather": ["data", "indices"], "layer_norm": ["x", "scale", "bias"],
    "rms_norm": ["x", "scale"], "attention": ["q", "k", "v", "mask"],
    "conv2d": ["x", "w", "b"], "equal": ["a", "b"], "less": ["a", "b"],
    "greater": ["a", "b"], "rope": ["x", "positions", "inv_freq"],
    "paged_attention": ["q", "k", "v", "k_cache", "v_cache", "slot_mapping", "block_tables",
                        "query_start", "context_lens"],
}
for _o in rg._BIN:
    INPUT_NAMES[_o] = ["a", "b"]


def gamma(k):
    k = max(int(k), 1)
    return k * U / (1 - k * U)


# ------------------------------------------------------------------------------------------
# Case machinery
# ------------------------------------------------------------------------------------------

class Case:
    def __init__(self, op, dt, gen, attrs=None, tol=None, init=(), tag="", dyn=None,
                 names=None, fixed=()):
        self.op, self.dt, self.gen = op, dt, gen
        self.attrs = attrs or {}
        self.tol = tol
        self.init = tuple(init)
        self.fixed = tuple(fixed)  # float32 inputs fed as f32 whatever the case's dtype
        self.tag = tag
        self.dyn = dyn
        self.names = names
        self.id = f"{op}-{dt}" + (f"-{tag}" if tag else "")
        self.index = 0

    def __repr__(self):
        return self.id


CASES = []
_SHAPE_RNG = np.random.default_rng(20240607)


def case(*a, **k):
    c = Case(*a, **k)
    CASES.append(c)
    return c


def rshape(rank, lo=1, hi=7):
    return [int(d) for d in _SHAPE_RNG.integers(lo, hi + 1, size=rank)]


def qnt(rng, shape, lo=-4, hi=4, step=0.25):
    """Multiples of `step` in [lo, hi]: chosen so that every product and partial sum of a
    test below is exact in f32, whatever the summation order, so results must be exact."""
    return (rng.integers(int(lo / step), int(hi / step), size=shape, endpoint=True)
            * step).astype(np.float32)


def build(c, arrays):
    """-> (GraphBuilder, feeds, output name, op-node input names)."""
    g = GraphBuilder(c.id)
    if c.op == "concat":
        names = [f"x{i}" for i in range(len(arrays))]
    else:
        names = c.names or INPUT_NAMES.get(c.op) or ["x"]
    feeds, op_in = {}, []
    dyn_done = False
    for i, (nm, a) in enumerate(zip(names, arrays)):
        if a is None:
            op_in.append(None)
            continue
        a = np.asarray(a)
        is_float = a.dtype == np.float32 and i not in c.fixed
        if i in c.init:
            dt = c.dt if (is_float and c.dt in rg.FLOATS) else rg.dtype_of_array(a)
            g.init(nm, a, dt)
            op_in.append(nm)
            continue
        if is_float and c.dt == "f16":
            a = a.astype(np.float16)
        shape = list(a.shape)
        dyn = c.dyn if c.dyn is not None else (c.index % 3 == 0)
        if dyn and shape and not dyn_done:
            shape[0] = -1
            dyn_done = True
        g.input(nm, rg.dtype_of_array(a), shape)
        feeds[nm] = a
        if is_float and c.dt == "bf16":
            op_in.append(g.node("cast", [nm], nm + "_bf16", name=f"to_bf16_{nm}", to="bf16"))
        else:
            op_in.append(nm)
    g.node(c.op, op_in, "out", name="op", **c.attrs)
    env = rg.evaluate(g, feeds, keep_all=True)
    out = "out"
    if env["out"].dt == "bf16":
        out = g.node("cast", ["out"], "out_f32", name="from_bf16", to="f32")
    g.output(out)
    return g, feeds, out, op_in


def check_case(c, tmp_path):
    rng = np.random.default_rng(rg.seed_of(c.id))
    arrays = c.gen(rng)
    g, feeds, out, op_in = build(c, arrays)
    env = rg.evaluate(g, feeds, keep_all=True)
    ref = env["out"]
    # --repeat 2: the second run reuses the first run's buffers, which catches kernels that
    # count on zeroed outputs
    res = rg.run_graph(g, feeds, tmp_path, extra=["--repeat", "2"])
    final = env[out]
    # the JSON description of the output
    (o,) = res.json["outputs"]
    assert o["name"] == out, res.json
    assert o["dtype"] == final.dt, f"json dtype {o['dtype']} != {final.dt}"
    assert list(o["shape"]) == list(final.a.shape), f"json shape {o['shape']}"
    got = res.outputs[out]
    what = f"{c.id}: {c.op} {c.attrs} inputs " + ", ".join(
        f"{n}={env[n].dt}{list(env[n].a.shape)}" if n else "<omitted>" for n in op_in)
    assert got.dtype == rg.npy_dtype_for(final.dt), f"{what}: npy dtype {got.dtype}"
    assert got.shape == final.a.shape, f"{what}: shape {got.shape} != {final.a.shape}"
    if ref.dt not in rg.FLOATS or c.tol == "exact":
        if ref.dt in rg.FLOATS:
            rg.assert_close(got, final.a, 0.0, 0.0, what)  # equal values; NaN where NaN
        else:
            rg.assert_equal(got, final.a, what)
        return
    ins = [None if n is None else env[n] for n in op_in]
    tol = c.tol or tol_default
    rtol, atol = tol(c, ins, ref)
    rg.assert_close(got, final.a, rtol, atol, what)


# Functions whose f32 formulas lose relative accuracy near a zero of the result (tanh and
# erf near 0 when built from exp, log near 1, silu/gelu where 1+erf or 1+tanh cancels): an
# absolute 1e-6 * max(1, max|ref|) on top of rtol. Everything else is held to rtol alone.
ATOL_SCALED = ("tanh", "erf", "log", "silu", "gelu")


def tol_default(c, ins, ref):
    if c.op not in ATOL_SCALED:
        return RTOL[ref.dt], FLOOR[ref.dt]
    r = f64(ref)
    fin = r[np.isfinite(r)]
    scale = max(1.0, float(np.max(np.abs(fin)))) if fin.size else 1.0
    return RTOL[ref.dt], 1e-6 * scale + FLOOR[ref.dt]


def tol_linear(mag_fn, k_fn):
    """Sum-of-products ops: gamma_K * magnitude (the same op on |inputs|) + rounding."""
    def tol(c, ins, ref):
        a = [None if v is None else np.abs(f64(v)) for v in ins]
        return RTOL[ref.dt], gamma(k_fn(c, ins)) * mag_fn(c, a) + FLOOR[ref.dt]
    return tol


def tol_softmax(c, ins, ref):
    # p = exp(x - m) / S: exp() of an argument with absolute error u|x - m| has relative error
    # (|x - m| + 2) u; S adds gamma_n. log_softmax = (x - m) - log S: absolute error
    # u(|x - m| + |log S|) + gamma_n + a few ulps.
    x = f64(ins[0])
    ax = c.attrs.get("axis", -1)
    n = x.shape[ax] if x.ndim else 1
    m = np.max(x, axis=ax, keepdims=True)
    d = np.abs(x - m)
    if c.op == "softmax":
        rel = 2 * (d + 4) * U + gamma(n + 4)
        return RTOL[ref.dt], rel * np.abs(f64(ref)) + FLOOR[ref.dt]
    logs = np.log(np.sum(np.exp(x - m), axis=ax, keepdims=True))
    return RTOL[ref.dt], 4 * U * (d + np.abs(logs) + 1) + gamma(n + 4) + FLOOR[ref.dt]


def _norm_axes(x, axis):
    ax = axis + x.ndim if axis < 0 else axis
    return tuple(range(ax, x.ndim)), int(np.prod(x.shape[ax:]))


def tol_layer_norm(c, ins, ref):
    # y = (x - mu) * rstd * s + b. The mean carries gamma_n*mean|x|, x - mu a further
    # u(|x| + |mu|); rstd a relative gamma_n * E[x^2]/var (covers a one-pass variance) plus a
    # few u for sqrt/division; then the scale and bias add a few u each.
    x = f64(ins[0])
    s = None if len(ins) < 2 or ins[1] is None else f64(ins[1])
    b = None if len(ins) < 3 or ins[2] is None else f64(ins[2])
    axes, n = _norm_axes(x, c.attrs.get("axis", -1))
    eps = c.attrs.get("epsilon", 1e-5)
    mu = np.mean(x, axis=axes, keepdims=True)
    var = np.mean((x - mu) ** 2, axis=axes, keepdims=True)
    sd = np.sqrt(var + eps)
    xn = (x - mu) / sd
    ex2 = np.mean(x * x, axis=axes, keepdims=True)
    e1 = (4 * U * (np.abs(x) + np.abs(mu)) + gamma(n) * np.mean(np.abs(x), axis=axes,
                                                                keepdims=True)) / sd
    e2 = np.abs(xn) * (gamma(n + 4) * ex2 / (var + eps) + 6 * U)
    err = (e1 + e2) * (1.0 if s is None else np.abs(s))
    if b is not None:
        err = err + 4 * U * np.abs(b)
    return RTOL[ref.dt], err + 4 * U * np.abs(f64(ref)) + FLOOR[ref.dt]


def tol_rms_norm(c, ins, ref):
    # y = x * rsqrt(mean(x^2) + eps) * s: relative error gamma_n + a few u.
    x = f64(ins[0])
    _, n = _norm_axes(x, c.attrs.get("axis", -1))
    return RTOL[ref.dt], (gamma(n + 4) + 6 * U) * np.abs(f64(ref)) + FLOOR[ref.dt]


def tol_attention(c, ins, ref):
    # scores s = scale*q.k: |ds| <= gamma_D*scale*(|q|.|k|) + u|s| (+ u|mask|). softmax turns
    # a score error ds into a relative probability error <= 2 max_row(ds) + (|s - m| + 4)u
    # (+ gamma_Lk for the normalizer); out = p.v adds gamma_Lk: in all
    # |err| <= (p.|v|) * (2 max_row(ds) + 2u max_row|s| + gamma_{2Lk+8}).
    q, k, v = (f64(t) for t in ins[:3])
    mask = ins[3] if len(ins) > 3 else None
    d = q.shape[-1]
    lk = k.shape[-2]
    scale = c.attrs.get("scale", 1.0 / math.sqrt(d))
    _, p = rg.ref_attention(q, k, v, rg.mask_array(mask), mask is not None and
                            mask.dt == "bool", c.attrs.get("causal", 0), scale)
    s = abs(scale) * np.matmul(q, np.swapaxes(k, -1, -2))
    sa = abs(scale) * np.matmul(np.abs(q), np.swapaxes(np.abs(k), -1, -2))
    ds = gamma(d) * sa + U * np.abs(s)
    big = np.abs(s)
    if mask is not None and mask.dt != "bool":
        mm = np.broadcast_to(np.abs(f64(mask)), s.shape)
        mm = np.where(np.isfinite(mm), mm, 0.0)
        ds = ds + U * mm
        big = big + mm
    dsr = np.max(ds, axis=-1, keepdims=True)
    bigr = np.max(big, axis=-1, keepdims=True)
    pv = np.matmul(p, np.abs(v))
    return RTOL[ref.dt], pv * (2 * dsr + 4 * U * bigr + gamma(2 * lk + 8)) + FLOOR[ref.dt]


def tol_rope(c, ins, ref):
    # a' = a cos - b sin in f32 from cosf/sinf of the same f32 angle (an ulp or two each):
    # |err| <= 8u (|a| + |b|) for both members of a pair; other dims are copied.
    x = np.abs(f64(ins[0]))
    half = ins[2].a.shape[0]
    il = c.attrs.get("interleaved", 0)
    ia = slice(0, 2 * half, 2) if il else slice(0, half)
    ib = slice(1, 2 * half, 2) if il else slice(half, 2 * half)
    mag = np.zeros_like(x)
    mag[..., ia] = mag[..., ib] = x[..., ia] + x[..., ib]
    return RTOL[ref.dt], 8 * U * mag + FLOOR[ref.dt]


def tol_paged(c, ins, ref):
    # attention's bound (tol_attention) per row over the keys it sees
    q, k, v, kc, vc = (f64(t) for t in ins[:5])
    _, err = rg.ref_paged_attention(q, k, v, kc, vc, *(t.a for t in ins[5:]),
                                    scale=c.attrs.get("scale"), bound=True)
    return RTOL[ref.dt], err + FLOOR[ref.dt]


# ------------------------------------------------------------------------------------------
# Elementwise binary
# ------------------------------------------------------------------------------------------

BIN_SHAPES = [([3, 4], [3, 4]), ([2, 3, 5], [5]), ([4, 1, 6], [1, 5, 1]), ([], [2, 3]),
              ([7], []), ([2, 1, 3, 1], [4, 1, 5]), ([13, 17], [13, 1]), ([1], [1]),
              ([], []), ([1, 9], [11, 1])]
_r = rshape(3)
BIN_SHAPES.append((_r, [1] + _r[1:]))


def bin_float_gen(op, sa, sb):
    def gen(rng):
        if op == "div":
            b = uni(rng, sb, 0.25, 3.0) * np.where(rng.random(sb) < 0.5, -1, 1).astype(np.float32)
            return [uni(rng, sa), b]
        if op == "pow":
            return [uni(rng, sa, 0.1, 3.0), uni(rng, sb, -2.0, 2.0)]
        return [uni(rng, sa), uni(rng, sb)]
    return gen


INT_BIN_RANGE = {  # (a range, b range) keeping every result in range (u8 sub wraps)
    ("add", "i8"): ((-60, 60), (-60, 60)), ("sub", "i8"): ((-60, 60), (-60, 60)),
    ("mul", "i8"): ((-11, 11), (-11, 11)), ("div", "i8"): ((-127, 127), (-5, 5)),
    ("pow", "i8"): ((-3, 3), (0, 4)),
    ("add", "u8"): ((0, 127), (0, 127)), ("sub", "u8"): ((0, 30), (0, 30)),
    ("mul", "u8"): ((0, 15), (0, 15)), ("div", "u8"): ((0, 255), (0, 7)),
    ("pow", "u8"): ((0, 5), (0, 3)),
    ("add", "i32"): ((-2**30, 2**30 - 1), (-2**30, 2**30 - 1)),
    ("sub", "i32"): ((-2**30, 2**30 - 1), (-2**30, 2**30 - 1)),
    ("mul", "i32"): ((-40000, 40000), (-40000, 40000)),
    ("div", "i32"): ((-10**9, 10**9), (-9, 9)), ("pow", "i32"): (None, (-3, 10)),
    ("add", "i64"): ((-2**62, 2**62 - 1), (-2**62, 2**62 - 1)),
    ("sub", "i64"): ((-2**62, 2**62 - 1), (-2**62, 2**62 - 1)),
    ("mul", "i64"): ((-2**31, 2**31), (-2**31, 2**31)),
    ("div", "i64"): ((-10**15, 10**15), (-1000, 1000)), ("pow", "i64"): ((-9, 9), (0, 9)),
}


def bin_int_gen(op, dt, sa, sb):
    ra, rb = INT_BIN_RANGE[(op, dt)]

    def gen(rng):
        if ra is None:  # i32 pow: negative exponents with bases +-1, +-2 (no 0^-n)
            a = rng.choice(np.array([-2, -1, 1, 2], dtype=np.int32), size=sa)
            return [np.asarray(a, dtype=np.int32), ints(rng, sb, dt, *rb)]
        b = ints(rng, sb, dt, *rb)
        return [ints(rng, sa, dt, *ra), b]
    return gen


for _i, _op in enumerate(rg._BIN):
    for _j in range(4):
        _sa, _sb = BIN_SHAPES[(_i * 2 + _j * 3) % len(BIN_SHAPES)]
        case(_op, "f32", bin_float_gen(_op, _sa, _sb), tag=f"s{_j}-{_sa}by{_sb}")
    for _dt in ("f16", "bf16"):
        for _j in range(2):
            _sa, _sb = BIN_SHAPES[(_i + _j * 5 + (_dt == "bf16")) % len(BIN_SHAPES)]
            case(_op, _dt, bin_float_gen(_op, _sa, _sb), tag=f"s{_j}-{_sa}by{_sb}")
    for _k, _dt in enumerate(("i8", "i32", "i64", "u8")):
        _sa, _sb = BIN_SHAPES[(_i + _k * 3 + 1) % len(BIN_SHAPES)]
        case(_op, _dt, bin_int_gen(_op, _dt, _sa, _sb), tag=f"{_sa}by{_sb}")

# pow with a negative base and integral exponents (powf is defined there), and a zero divisor
case("pow", "f32", lambda r: [uni(r, [4, 6], -3, 3),
                              r.integers(-3, 4, size=[6]).astype(np.float32)], tag="negbase")
case("div", "f32", lambda r: [np.array([1.0, -1.0, 0.0, 2.5], np.float32),
                              np.array([0.0, 0.0, 0.0, -0.0], np.float32)], tag="byzero")

# ------------------------------------------------------------------------------------------
# Elementwise unary
# ------------------------------------------------------------------------------------------

UNARY_DOMAIN = {"neg": (-5, 5), "abs": (-5, 5), "relu": (-5, 5), "sqrt": (0, 50),
                "rsqrt": (0.05, 50), "exp": (-15, 10), "log": (0.01, 100), "tanh": (-5, 5),
                "erf": (-4, 4), "sigmoid": (-20, 20), "silu": (-10, 10), "gelu": (-6, 6)}
UNARY_SHAPES = [[5, 7], [], [1, 3, 1, 4], [33], [2, 3, 4, 5], [1], rshape(3), [3, 1, 17]]
_EXACT_UNARY = ("neg", "abs", "relu")


def un_gen(op, shape):
    lo, hi = UNARY_DOMAIN[op]
    return lambda rng: [uni(rng, shape, lo, hi)]


_ucount = 0
for _op in list(rg._UN) + ["gelu"]:
    _variants = [{}] if _op != "gelu" else [{"approximate": "none"}, {"approximate": "tanh"},
                                            {}]
    for _attrs in _variants:
        _t = f"{_attrs.get('approximate', 'default')}-" if _op == "gelu" else ""
        _dts = ["f32", "f32", "f16", "bf16"] if _attrs != {} or _op != "gelu" else ["f32"]
        for _j, _dt in enumerate(_dts):
            _s = UNARY_SHAPES[_ucount % len(UNARY_SHAPES)]
            _ucount += 1
            case(_op, _dt, un_gen(_op, _s), attrs=dict(_attrs), tag=f"{_t}{_j}-{_s}",
                 tol="exact" if _op in _EXACT_UNARY else None)

_INT_UN = {("neg", "i8"): (-127, 127), ("neg", "i32"): (-2**31 + 1, 2**31 - 1),
           ("neg", "i64"): (-2**63 + 1, 2**63 - 1), ("neg", "u8"): (0, 255),
           ("abs", "i8"): (-127, 127), ("abs", "i32"): (-2**31 + 1, 2**31 - 1),
           ("abs", "i64"): (-2**63 + 1, 2**63 - 1), ("abs", "u8"): (0, 255),
           ("relu", "i8"): (-128, 127), ("relu", "i32"): (-2**31, 2**31 - 1),
           ("relu", "i64"): (-2**63, 2**63 - 1)}
for (_op, _dt), (_lo, _hi) in _INT_UN.items():
    _s = UNARY_SHAPES[_ucount % len(UNARY_SHAPES)]
    _ucount += 1
    case(_op, _dt, (lambda lo, hi, dt, s: lambda r: [ints(r, s, dt, lo, hi)])(_lo, _hi, _dt, _s),
         tag=f"{_s}")

# IEEE special values where the math is unambiguous
_SPECIAL = {
    "exp": [-np.inf, np.inf, 100.0, -110.0, 0.0, np.nan],
    "log": [0.0, -1.0, np.inf, 1.0, np.nan, 1e-30],
    "sqrt": [-1.0, np.inf, 0.0, -0.0, np.nan, 1e30],
    "rsqrt": [0.0, np.inf, 1e-30, -1.0, 4.0, np.nan],
    "tanh": [-np.inf, np.inf, 50.0, -50.0, 0.0, np.nan],
    "sigmoid": [-np.inf, np.inf, 200.0, -200.0, 0.0, np.nan],
    "erf": [-np.inf, np.inf, 10.0, -10.0, 0.0, np.nan],
    "neg": [np.inf, -np.inf, 0.0, -0.0, 1e38, np.nan],
    "abs": [np.inf, -np.inf, -0.0, -1e38, 3.0, np.nan],
}
for _op, _vals in _SPECIAL.items():
    case(_op, "f32", (lambda v: lambda r: [np.array(v, np.float32)])(_vals), tag="special",
         tol="exact" if _op in _EXACT_UNARY else None)

# integer overflow wraps (two's complement, as "u8 wraps" and the i64 sums of docs/ops.md);
# INT_MIN / -1 wraps to INT_MIN. Under the sanitizer build these also prove there is no UB.
_I32_MIN, _I32_MAX = -2**31, 2**31 - 1
_I64_MIN, _I64_MAX = -2**63, 2**63 - 1
for _op, _dt, _a, _b in [
        ("add", "i32", [_I32_MAX, _I32_MIN, 5], [1, -1, 7]),
        ("sub", "i32", [_I32_MIN, _I32_MAX, 0], [1, -1, _I32_MIN]),
        ("mul", "i32", [65536, _I32_MAX, -3], [65536, 2, _I32_MIN]),
        ("div", "i32", [_I32_MIN, _I32_MIN, 7], [-1, 1, 0]),
        ("add", "i64", [_I64_MAX, _I64_MIN, 1], [1, -1, 2]),
        ("mul", "i64", [2**32, _I64_MIN, 3], [2**32, -1, 5]),
        ("div", "i64", [_I64_MIN, _I64_MIN, -9], [-1, 2, 0]),
        ("add", "i8", [127, -128, 100], [1, -1, 100]),
        ("mul", "u8", [16, 255, 3], [16, 255, 5])]:
    case(_op, _dt, (lambda a, b, dt: lambda r: [np.array(a, rg.NP_STORAGE[dt]),
                                               np.array(b, rg.NP_STORAGE[dt])])(_a, _b, _dt),
         tag="wrap")
for _op, _dt, _v in [("neg", "i32", [_I32_MIN, _I32_MAX, 0]), ("abs", "i32", [_I32_MIN, -5, 5]),
                     ("neg", "i64", [_I64_MIN, 1, -1]), ("abs", "i64", [_I64_MIN, -7, 0]),
                     ("neg", "i8", [-128, 127, 0]), ("abs", "i8", [-128, -1, 3])]:
    case(_op, _dt, (lambda v, dt: lambda r: [np.array(v, rg.NP_STORAGE[dt])])(_v, _dt),
         tag="wrap")

# f16 range: overflow to inf, subnormal inputs and results
case("mul", "f16", lambda r: [np.array([300.0, -300.0, 1e-4, 6e-5, 2.0], np.float32),
                              np.array([300.0, 300.0, 1e-3, 0.5, 65504.0], np.float32)],
     tag="range")
case("add", "f16", lambda r: [np.array([65504.0, 6e-8, -6e-8, 1e-7, 60000.0], np.float32),
                              np.array([32.0, 6e-8, 1.2e-7, 0.0, 10000.0], np.float32)],
     tag="range")
case("sqrt", "f16", lambda r: [np.array([6e-8, 1e-6, 4e-5, 65504.0, 0.0], np.float32)],
     tag="subnormal")
case("exp", "f16", lambda r: [np.array([11.0, 12.0, -17.0, -20.0, 0.0], np.float32)],
     tag="range")
case("mul", "bf16", lambda r: [np.array([1e38, -3e38, 1e-38, 2.0], np.float32),
                               np.array([10.0, 2.0, 1e-3, 1e38], np.float32)], tag="range")

# ------------------------------------------------------------------------------------------
# cast
# ------------------------------------------------------------------------------------------

_FLOAT_VALS = [0.0, -0.0, 0.5, -0.5, 0.99, -0.99, 1.5, -1.5, 2.5, 100.7, -100.7, 127.4, 127.6,
               128.2, -128.2, -129.9, 255.3, 255.9, 256.1, 300.0, -300.0, 1e5, -1e5, 3e9, -3e9,
               1e19, -1e19, 1e30, np.nan, np.inf, -np.inf, 65504.0, 65520.0, 70000.0, 1e-8,
               6e-5, 3.14159, 1.00390625, 1.01171875, 2049.0, 16777217.0]


def cast_gen(src, dst):
    def gen(rng):
        if src in rg.FLOATS:
            a = np.concatenate([np.array(_FLOAT_VALS, np.float32),
                                uni(rng, [24], -300, 300)])
            if src == "f16":
                with np.errstate(over="ignore"):  # 1e19 etc. become inf in f16, as meant
                    a = a.astype(np.float16).astype(np.float32)  # built as f32, fed as f16
            return [a.reshape(5, -1) if a.size % 5 == 0 else a]
        if src == "bool":
            return [rng.random([3, 5]) < 0.5]
        lo, hi = rg.INT_RANGE[src]
        if dst in rg.INTS:  # int -> int: values both can hold (docs leave the rest open)
            dlo, dhi = rg.INT_RANGE[dst]
            lo, hi = max(lo, dlo), min(hi, dhi)
            special = [v for v in (lo, hi, 0, 1, -1) if lo <= v <= hi]
            return [np.concatenate([np.array(special, dtype=rg.NP_STORAGE[src]),
                                    ints(rng, [20], src, lo, hi)])]
        special = [v for v in (lo, hi, 0, 1, -1, 2049, 65504, 65520, 70000, 16777217,
                               2**40 + 3, 2**53 + 1, -(2**31)) if lo <= v <= hi]
        return [np.concatenate([np.array(special, dtype=rg.NP_STORAGE[src]),
                                ints(rng, [20], src, max(lo, -10**6), min(hi, 10**6)),
                                np.zeros(2, rg.NP_STORAGE[src])])]
    return gen


for _src in rg.DTYPES:
    for _dst in rg.DTYPES:
        if _src == _dst and _src not in ("f32", "bf16", "i64"):
            continue
        case("cast", _src if _src in rg.FLOATS else _src, cast_gen(_src, _dst),
             attrs={"to": _dst}, tag=f"to-{_dst}", tol="exact")

# ------------------------------------------------------------------------------------------
# where, comparisons
# ------------------------------------------------------------------------------------------

WHERE_SHAPES = [([3, 4], [3, 4], [3, 4]), ([2, 1, 5], [4, 1], []), ([], [3], [3]),
                ([6, 1], [1, 7], [6, 7]), ([1], [2, 2], [1, 2])]


for _k, _dt in enumerate(["f32", "f32", "f16", "bf16", "i32", "u8", "bool", "i64", "i8"]):
    _sh = WHERE_SHAPES[_k % len(WHERE_SHAPES)]
    case("where", _dt, where_gen(_dt, *_sh), tag=f"{_k}", tol="exact")


for _i, _op in enumerate(("equal", "less", "greater")):
    for _k, _dt in enumerate(["f32", "f16", "bf16", "i8", "i32", "i64", "u8", "bool"]):
        _sa, _sb = BIN_SHAPES[(_i * 3 + _k) % len(BIN_SHAPES)]
        case(_op, _dt, cmp_gen(_dt, _sa, _sb), tag=f"{_sa}by{_sb}")
    case(_op, "f32", cmp_gen("f32", [4, 6], [6], nan=True), tag="nan")

# ------------------------------------------------------------------------------------------
# matmul, gemm
# ------------------------------------------------------------------------------------------

def _mm_k(c, ins):
    a = ins[0].a
    if a.ndim == 1:
        return a.shape[0]
    return a.shape[-2] if c.attrs.get("trans_a") else a.shape[-1]


TOL_MATMUL = tol_linear(lambda c, a: rg.ref_matmul(a[0], a[1], c.attrs.get("trans_a", 0),
                                                   c.attrs.get("trans_b", 0)), _mm_k)


def mm_case(dt, sa, sb, tag, init=(), **attrs):
    case("matmul", dt, lambda r: [nrm(r, sa), nrm(r, sb)], attrs=attrs, tol=TOL_MATMUL,
         tag=tag, init=init)


mm_case("f32", [5, 7], [7, 3], "2d")
mm_case("f32", [1, 1], [1, 1], "1x1")
mm_case("f32", [2, 3, 4, 5], [5, 6], "batch-2d")
mm_case("f32", [3, 4, 6], [6], "vec-b")
mm_case("f32", [6], [2, 6, 3], "vec-a")
mm_case("f32", [8], [8], "dot")
mm_case("f32", [2, 1, 4, 5], [3, 5, 2], "bcast")
mm_case("f32", [7, 5], [7, 3], "ta", trans_a=1)
mm_case("f32", [2, 5, 7], [3, 7], "tb", trans_b=1)
mm_case("f32", [3, 7, 5], [3, 4, 7], "ta-tb", trans_a=1, trans_b=1)
mm_case("f32", [17, 33], [33, 19], "odd-init", init=(1,))
mm_case("f32", [64, 300], [300, 50], "k300")
mm_case("f16", [4, 9, 16], [16, 5], "batch")
mm_case("f16", [33, 21], [5, 21], "tb", trans_b=1)
mm_case("bf16", [2, 3, 8, 12], [2, 1, 12, 6], "bcast")
mm_case("bf16", [40, 64], [64, 24], "init", init=(1,))


def _gemm_mag(c, a):
    return rg.ref_gemm(a[0], a[1], a[2] if len(a) > 2 else None, abs(c.attrs.get("alpha", 1.0)),
                       abs(c.attrs.get("beta", 1.0)), c.attrs.get("trans_a", 0),
                       c.attrs.get("trans_b", 0))


def _gemm_k(c, ins):
    a = ins[0].a
    return (a.shape[0] if c.attrs.get("trans_a") else a.shape[1]) + 2


TOL_GEMM = tol_linear(_gemm_mag, _gemm_k)


def gemm_case(dt, sa, sb, sc, tag, init=(), **attrs):
    case("gemm", dt, lambda r: [nrm(r, sa), nrm(r, sb)] + ([] if sc is None else [nrm(r, sc)]),
         attrs=attrs, tol=TOL_GEMM, tag=tag, init=init)


gemm_case("f32", [5, 7], [7, 3], [3], "bias-row")
gemm_case("f32", [7, 5], [7, 4], [5, 1], "ta-bias-col", trans_a=1)
gemm_case("f32", [6, 9], [4, 9], [6, 4], "tb-full-alpha-beta", trans_b=1, alpha=0.5, beta=2.0)
gemm_case("f32", [3, 8], [8, 2], [], "bias-scalar", alpha=-1.5)
gemm_case("f32", [9, 11], [11, 13], None, "no-c")
gemm_case("f32", [32, 64], [64, 128], [128], "init-w", init=(1, 2), beta=0.0)
gemm_case("f32", [1, 64], [10, 64], [10], "ta-tb", trans_a=0, trans_b=1)
gemm_case("f16", [8, 16], [16, 12], [12], "bias")
gemm_case("bf16", [5, 32], [32, 6], [1, 6], "bias", alpha=2.0)

# ------------------------------------------------------------------------------------------
# transpose, reshape, expand, concat, slice, gather
# ------------------------------------------------------------------------------------------

for _k, (_dt, _s, _perm) in enumerate([
        ("f32", [2, 3, 4], None), ("f32", [2, 5, 3, 4], [0, 2, 1, 3]), ("f32", [7], None),
        ("i64", [3, 1, 4], [2, 0, 1]), ("bool", [4, 5], [1, 0]), ("f16", [3, 4, 5], [1, 2, 0]),
        ("bf16", [2, 1, 3, 5], [3, 1, 0, 2]), ("u8", [2, 3, 1, 2, 2, 3], [5, 3, 1, 0, 4, 2]),
        ("i8", [], None)]):
    case("transpose", _dt, data_gen(_dt, _s), attrs={} if _perm is None else {"perm": _perm},
         tag=f"{_k}-{_s}", tol="exact")

for _k, (_dt, _s, _shape) in enumerate([
        ("f32", [2, 3, 4], [0, -1]), ("f32", [2, 3, 4], [4, -1, 2]), ("f32", [2, 3, 4], [24]),
        ("f32", [1], []), ("i32", [], [1, 1]), ("bf16", [6, 4], [2, 0, -1]),
        ("bool", [3, 2, 2], [0, 0, 2]), ("f16", [5, 1, 7], [35])]):
    case("reshape", _dt, data_gen(_dt, _s), attrs={"shape": rg.Attr("ints", _shape)},
         tag=f"{_k}-{_s}to{_shape}", tol="exact")

for _k, (_dt, _s, _shape) in enumerate([
        ("f32", [3, 1], [2, 3, 4]), ("f32", [1, 4], [3, 1]), ("f32", [], [2, 3]),
        ("i8", [2, 1, 3], [1, 5, 1]), ("bool", [4, 1], [4, 6]), ("f16", [1], [3, 2]),
        ("bf16", [2, 3], [2, 2, 1])]):
    case("expand", _dt, data_gen(_dt, _s), attrs={"shape": _shape}, tag=f"{_k}-{_s}to{_shape}",
         tol="exact")


for _k, (_dt, _shapes, _ax) in enumerate([
        ("f32", [[2, 3], [4, 3]], 0), ("f32", [[2, 3, 1], [2, 3, 5], [2, 3, 2]], -1),
        ("f32", [[3, 4]], 1), ("i64", [[2, 1, 3], [2, 4, 3]], 1), ("bool", [[1], [5]], 0),
        ("f16", [[2, 2], [2, 1], [2, 7]], 1), ("bf16", [[1, 4], [3, 4]], -2),
        ("f32", [[2, 3], [2, 0]], 1)]):
    case("concat", _dt, concat_gen(_dt, _shapes), attrs={"axis": _ax}, tag=f"{_k}-ax{_ax}",
         tol="exact")

for _k, (_dt, _s, _at) in enumerate([
        ("f32", [10], dict(starts=[2], ends=[8])),
        ("f32", [10], dict(starts=[-1], ends=[-100], steps=[-1])),
        ("f32", [11], dict(starts=[9], ends=[0], steps=[-3])),
        ("f32", [4, 9], dict(starts=[1], ends=[1000], axes=[1])),
        ("f32", [4, 9], dict(starts=[-3], ends=[-1], axes=[-2])),
        ("f32", [5, 6, 7], dict(starts=[4, 1], ends=[-6, 100], axes=[0, 2], steps=[-2, 2])),
        ("f32", [6, 5], dict(starts=[3], ends=[2], axes=[0])),  # empty
        ("f32", [6, 5], dict(starts=[0, -1], ends=[2**63 - 1, -(2**63)], steps=[1, -1])),
        ("i32", [3, 8], dict(starts=[7], ends=[-9], axes=[1], steps=[-2])),
        ("bool", [9], dict(starts=[1], ends=[9], steps=[4])),
        ("f16", [4, 4, 4], dict(starts=[-2, 0], ends=[4, 3], axes=[2, 1])),
        ("bf16", [7, 3], dict(starts=[6], ends=[-8], steps=[-1])),
        ("u8", [2, 12], dict(starts=[-100], ends=[100], axes=[-1], steps=[5]))]):
    case("slice", _dt, data_gen(_dt, _s), attrs=_at, tag=f"{_k}-{_s}", tol="exact")


def gather_gen(dt, ds, ishape, idt, n_axis):
    def gen(rng):
        idx = rng.integers(-n_axis, n_axis, size=ishape).astype(rg.NP_STORAGE[idt])
        return [data_gen(dt, ds)(rng)[0], np.asarray(idx)]
    return gen


for _k, (_dt, _ds, _is, _idt, _ax, _init) in enumerate([
        ("f32", [5, 3], [2, 3], "i64", 0, ()), ("f32", [4, 6, 2], [5], "i32", 1, ()),
        ("f32", [3, 7], [2, 2], "i64", -1, ()), ("f32", [6, 4], [], "i64", 0, ()),
        ("f32", [50, 16], [2, 7], "i64", 0, (0,)),  # embedding: table as initializer
        ("i64", [9], [3, 3], "i32", 0, ()), ("bool", [4, 3], [6], "i64", 0, ()),
        ("f16", [8, 5], [4], "i32", 0, (1,)), ("bf16", [2, 9, 3], [2, 2], "i64", 1, ())]):
    case("gather", _dt, gather_gen(_dt, _ds, _is, _idt, _ds[_ax]), attrs={"axis": _ax},
         init=_init, tag=f"{_k}-ax{_ax}-{_is}", tol="exact")

# ------------------------------------------------------------------------------------------
# reductions, argmax
# ------------------------------------------------------------------------------------------

def _red_k(c, ins):
    x = ins[0].a
    axes = c.attrs.get("axes") or range(x.ndim)
    return int(np.prod([x.shape[a] for a in axes])) + 1


def _red_mag(c, a):
    axes = tuple(c.attrs.get("axes") or range(a[0].ndim))
    s = np.sum(a[0], axis=axes, keepdims=bool(c.attrs.get("keepdims", 0)))
    n = int(np.prod([a[0].shape[i] for i in axes]))
    return s if c.op == "reduce_sum" else s / max(n, 1)


TOL_RED = tol_linear(_red_mag, _red_k)

RED_F32 = [([3, 4, 5], {}), ([3, 4, 5], {"axes": [1], "keepdims": 1}),
           ([2, 3, 4, 5], {"axes": [-1, 0]}), ([7, 1, 9], {"axes": [], "keepdims": 1}),
           ([257], {"axes": [0]})]
for _i, _op in enumerate(("reduce_sum", "reduce_mean", "reduce_max", "reduce_min")):
    _tol = TOL_RED if _op in ("reduce_sum", "reduce_mean") else "exact"
    for _j in range(3):
        _s, _at = RED_F32[(_i + _j) % len(RED_F32)]
        case(_op, "f32", data_gen("f32", _s), attrs=_at, tol=_tol, tag=f"{_j}-{_s}")
    case(_op, "f16", data_gen("f16", [6, 33]), attrs={"axes": [1]}, tol=_tol)
    case(_op, "bf16", data_gen("bf16", [4, 5, 6]), attrs={"axes": [0, 2], "keepdims": 1},
         tol=_tol)
    if _op == "reduce_mean":
        continue
    _idts = ("i8", "i32", "i64", "u8") if _op == "reduce_sum" else ("i8", "u8", "i32")
    for _dt in _idts:
        lo, hi = rg.INT_RANGE[_dt]
        if _op == "reduce_sum" and _dt in ("i32", "i64"):
            lo, hi = -10**6, 10**6
        case(_op, _dt, (lambda dt, lo, hi: lambda r: [ints(r, [3, 40], dt, lo, hi)])(_dt, lo, hi),
             attrs={"axes": [1]}, tag="wrap" if _dt in ("i8", "u8") and _op == "reduce_sum"
             else "")
    if _op in ("reduce_max", "reduce_min"):
        def _nan_gen(r):
            x = uni(r, [3, 5])
            x[1, 2] = np.nan
            return [x]
        case(_op, "f32", _nan_gen, attrs={"axes": [1]}, tol="exact", tag="nan")
case("reduce_sum", "f32", lambda r: [np.zeros((3, 0), np.float32)], attrs={"axes": [1]},
     tol=TOL_RED, tag="empty", dyn=False)
case("reduce_mean", "f32", lambda r: [np.zeros((3, 0), np.float32)], attrs={"axes": [1]},
     tol=TOL_RED, tag="empty", dyn=False)
case("reduce_sum", "i32", lambda r: [np.zeros((0, 4), np.int32)], attrs={"axes": [0]},
     tag="empty", dyn=False)


for _k, (_dt, _s, _at, _nan) in enumerate([
        ("f32", [4, 7], {}, False), ("f32", [5, 3, 2], {"axis": 0, "keepdims": 1}, False),
        ("f32", [9], {}, False), ("f32", [3, 8], {"axis": 1}, True),
        ("f16", [6, 5], {"axis": -2}, False), ("bf16", [2, 3, 11], {"keepdims": 1}, False),
        ("i32", [4, 6], {"axis": 1}, False), ("u8", [5, 5], {"axis": 0}, False),
        ("i8", [2, 9], {}, False), ("i64", [3, 2, 4], {"axis": 1}, False)]):
    case("argmax", _dt, argmax_gen(_dt, _s, _nan), attrs=_at, tag=f"{_k}-{_s}")

# ------------------------------------------------------------------------------------------
# softmax, log_softmax, layer_norm, rms_norm
# ------------------------------------------------------------------------------------------

for _op in ("softmax", "log_softmax"):
    for _k, (_dt, _s, _at, _sc) in enumerate([
            ("f32", [4, 10], {}, 3.0), ("f32", [5, 3, 4], {"axis": 0}, 3.0),
            ("f32", [2, 6, 3], {"axis": 1}, 3.0), ("f32", [3, 100], {}, 1e4),
            ("f32", [17], {}, 5.0), ("f16", [3, 40], {"axis": -1}, 4.0),
            ("bf16", [2, 3, 30], {}, 4.0)]):
        case(_op, _dt, (lambda s, sc: lambda r: [uni(r, s, -sc, sc)])(_s, _sc), attrs=_at,
             tol=tol_softmax, tag=f"{_k}-{_s}" + ("-large" if _sc > 100 else ""))


for _k, (_dt, _xs, _ps, _at, _s, _b, _init) in enumerate([
        ("f32", [4, 64], [64], {}, True, True, ()),
        ("f32", [2, 3, 5, 6], [5, 6], {"axis": -2}, True, True, (1, 2)),
        ("f32", [3, 33], [33], {}, False, False, ()),
        ("f32", [5, 7], [7], {"epsilon": 1e-3}, True, False, ()),
        ("f32", [2, 9], [9], {"axis": 1}, False, True, ()),  # scale omitted, bias given
        ("f32", [4, 3, 8], [3, 8], {"axis": 1}, True, True, ()),
        ("f16", [6, 48], [48], {}, True, True, ()),
        ("bf16", [3, 2, 40], [40], {}, True, True, (1,))]):
    case("layer_norm", _dt, ln_gen(_xs, _ps, _s, _b), attrs=_at, init=_init,
         tol=tol_layer_norm, tag=f"{_k}-{_xs}" + ("" if _s else "-noscale") +
         ("" if _b else "-nobias"))

for _k, (_dt, _xs, _ps, _at, _s) in enumerate([
        ("f32", [4, 64], [64], {}, True), ("f32", [3, 17], [17], {}, False),
        ("f32", [2, 4, 6], [4, 6], {"axis": -2, "epsilon": 1e-2}, True),
        ("f32", [5, 1], [1], {}, True), ("f16", [4, 32], [32], {}, True),
        ("bf16", [2, 50], [50], {}, True)]):
    case("rms_norm", _dt, (lambda xs, ps, s: lambda r: [nrm(r, xs, 2.0),
                                                       nrm(r, ps, 0.5, 1.0) if s else None])
         (_xs, _ps, _s), attrs=_at, tol=tol_rms_norm, tag=f"{_k}-{_xs}")

# ------------------------------------------------------------------------------------------
# attention
# ------------------------------------------------------------------------------------------

for _k, (_dt, _g, _at) in enumerate([
        ("f32", ([2, 3], 5, 5, 8, 8, None), {}),
        ("f32", ([2, 2], 6, 6, 4, 4, None), {"causal": 1}),
        ("f32", ([3], 3, 7, 8, 5, None), {"causal": 1}),  # Lq < Lk, top-left aligned
        ("f32", ([1, 2], 7, 4, 4, 6, None), {"causal": 1}),  # Lq > Lk
        ("f32", ([2, 2], 5, 6, 8, 8, ("bool", [5, 6])), {}),
        ("f32", ([2], 4, 5, 8, 8, ("bool-row", [2, 4, 5])), {}),
        ("f32", ([2, 2], 4, 6, 8, 8, ("float", [1, 1, 4, 6])), {}),
        ("f32", ([2, 2], 6, 6, 8, 8, ("bool", [2, 1, 6, 6])), {"causal": 1}),
        ("f32", ([], 5, 9, 16, 3, None), {"scale": 0.3}),
        ("f32", ([4], 1, 1, 2, 2, None), {}),
        ("f32", ([2, 4], 64, 64, 32, 32, None), {"causal": 1}),
        ("f16", ([2, 2], 8, 8, 16, 16, None), {"causal": 1}),
        ("f16", ([2], 6, 7, 8, 8, ("float", [6, 7])), {}),
        ("bf16", ([1, 3], 9, 9, 16, 16, ("bool", [9, 9])), {"causal": 1})]):
    case("attention", _dt, attn_gen(*_g), attrs=_at, tol=tol_attention,
         tag=f"{_k}-{_g[0]}q{_g[1]}k{_g[2]}d{_g[3]}" + ("-causal" if _at.get("causal") else "")
         + (f"-{_g[5][0]}mask" if _g[5] else ""))

# ------------------------------------------------------------------------------------------
# rope, paged_attention
# ------------------------------------------------------------------------------------------

for _dt in ("f32", "f16", "bf16"):
    for _il in (0, 1):
        case("rope", _dt, rope_gen(7, 3, 16, 8, "i32"), attrs={"interleaved": _il},
             tol=tol_rope, fixed=(2,), tag=f"full-il{_il}")
        case("rope", _dt, rope_gen(5, 2, 20, 6, "i64", max_pos=100000),
             attrs={"interleaved": _il}, tol=tol_rope, fixed=(2,), tag=f"partial-il{_il}")
case("rope", "f32", rope_gen(4, 3, 6, 0), tol=tol_rope, fixed=(2,), tag="no-rotated-dims")

# paged_attention writes its k_cache and v_cache inputs, which must be graph inputs, so its
# cases are f32 and f16 only: bf16 data would reach the op through a cast node (build()).
for _k, (_dt, _seqs, _geo, _pad, _at) in enumerate([
        ("f32", [(10, 1), (7, 3), (5, 5), (0, 0)], (4, 2, 8, 4), (1, 2), {}),
        ("f32", [(20, 1), (33, 33)], (6, 1, 16, 8), (0, 0), {}),
        ("f32", [(9, 2), (16, 4)], (3, 3, 5, 2), (0, 1), {"scale": 0.3}),
        ("f32", [(5, 5), (3, 1)], (2, 1, 4, 1), (2, 0), {}),
        ("f32", [(600, 600)], (2, 1, 16, 32), (0, 0), {}),
        ("f16", [(40, 1), (33, 17), (20, 20), (0, 0)], (8, 2, 16, 16), (1, 2), {})]):
    case("paged_attention", _dt, paged_gen(_seqs, *_geo, *_pad), attrs=_at, tol=tol_paged,
         tag=f"{_k}-S{len(_seqs)}-H{_geo[0]}kv{_geo[1]}d{_geo[2]}bs{_geo[3]}")

# ------------------------------------------------------------------------------------------
# constant
# ------------------------------------------------------------------------------------------

def const_case(dt, shape):
    rng = np.random.default_rng(rg.seed_of(f"const-{dt}"))
    if dt in rg.FLOATS:
        val = uni(rng, shape)
        if dt == "f16":
            val = val.astype(np.float16)
        elif dt == "bf16":
            val = rg.bf16_round(val)
    else:
        val = data_gen(dt, shape)(rng)[0]
    case("constant", dt, lambda r: [], attrs={"value": rg.Attr("t", (val, dt))},
         tag=f"{shape}", tol="exact")


for _dt in rg.DTYPES:
    const_case(_dt, [2, 3] if _dt != "i64" else [5])
const_case("f32", [])

# ------------------------------------------------------------------------------------------
# conv2d, pools
# ------------------------------------------------------------------------------------------

def _conv_k(c, ins):
    w = ins[1].a
    return w.shape[1] * w.shape[2] * w.shape[3] + 1


def _conv_mag(c, a):
    at = c.attrs
    return rg.ref_conv2d(a[0], a[1], a[2] if len(a) > 2 else None, at.get("strides", (1, 1)),
                         at.get("pads", (0, 0, 0, 0)), at.get("dilations", (1, 1)),
                         at.get("groups", 1))


TOL_CONV = tol_linear(_conv_mag, _conv_k)


def conv_gen(xs, ws, bias=True):
    return lambda r: [nrm(r, xs), nrm(r, ws, 0.5)] + ([nrm(r, [ws[0]])] if bias else [])


for _k, (_dt, _xs, _ws, _b, _at, _init) in enumerate([
        ("f32", [1, 3, 8, 8], [4, 3, 3, 3], True, {}, ()),
        ("f32", [2, 3, 7, 9], [5, 3, 3, 3], True, {"pads": [1, 1, 1, 1]}, ()),
        ("f32", [1, 2, 11, 10], [3, 2, 3, 2], True, {"strides": [2, 3], "pads": [1, 0, 1, 0]}, ()),
        ("f32", [1, 4, 12, 12], [2, 4, 3, 3], True, {"dilations": [2, 3], "pads": [2, 2, 2, 2]},
         ()),
        ("f32", [2, 4, 6, 6], [6, 2, 3, 3], True, {"groups": 2, "pads": [1, 1, 1, 1]}, ()),
        ("f32", [1, 6, 9, 9], [6, 1, 3, 3], True, {"groups": 6, "strides": [2, 2]}, ()),
        ("f32", [1, 2, 5, 6], [3, 2, 2, 3], True, {"pads": [0, 1, 2, 0]}, ()),
        ("f32", [3, 5, 4, 4], [7, 5, 1, 1], False, {}, ()),
        ("f32", [2, 3, 13, 7], [4, 3, 5, 3], True, {"strides": [3, 2], "pads": [2, 1, 0, 1],
                                                    "dilations": [1, 2]}, (1, 2)),
        ("f32", [1, 1, 1, 1], [1, 1, 1, 1], True, {}, ()),
        ("f16", [1, 4, 8, 8], [4, 2, 3, 3], True, {"groups": 2, "pads": [1, 1, 1, 1]}, ()),
        ("bf16", [2, 3, 9, 9], [4, 3, 3, 3], True, {"strides": [2, 2], "pads": [1, 1, 1, 1]},
         (1,))]):
    case("conv2d", _dt, conv_gen(_xs, _ws, _b), attrs=_at, init=_init, tol=TOL_CONV,
         tag=f"{_k}-{_xs}w{_ws}" + ("" if _b else "-nobias"))


for _k, (_dt, _xs, _at) in enumerate([
        ("f32", [1, 2, 6, 6], {"kernel_shape": [2, 2]}),
        ("f32", [2, 3, 7, 9], {"kernel_shape": [3, 3], "strides": [2, 2],
                               "pads": [1, 1, 1, 1]}),
        ("f32", [1, 2, 7, 7], {"kernel_shape": [2, 2], "ceil_mode": 1}),
        ("f32", [1, 2, 8, 10], {"kernel_shape": [3, 3], "strides": [2, 3], "pads": [1, 1, 1, 1],
                                "ceil_mode": 1}),
        ("f32", [1, 3, 9, 9], {"kernel_shape": [3, 2], "dilations": [2, 2], "strides": [1, 1]}),
        ("f32", [2, 2, 5, 6], {"kernel_shape": [3, 3], "pads": [0, 1, 1, 0], "strides": [1, 2]}),
        ("f16", [1, 4, 8, 8], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                               "ceil_mode": 1}),
        ("bf16", [2, 2, 6, 7], {"kernel_shape": [2, 3]})]):
    case("max_pool2d", _dt, data_gen(_dt, _xs), attrs=_at, tol="exact", tag=f"{_k}-{_xs}")


def _pool_k(c, ins):
    k = c.attrs["kernel_shape"]
    return k[0] * k[1] + 1


TOL_AVG = tol_linear(lambda c, a: rg.ref_pool2d(
    a[0], "avg", c.attrs["kernel_shape"], c.attrs.get("strides"),
    c.attrs.get("pads", (0, 0, 0, 0)), (1, 1), c.attrs.get("ceil_mode", 0),
    c.attrs.get("count_include_pad", 0)), _pool_k)

for _k, (_dt, _xs, _at) in enumerate([
        ("f32", [1, 2, 6, 6], {"kernel_shape": [2, 2]}),
        ("f32", [2, 3, 7, 9], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
        ("f32", [2, 3, 7, 9], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                               "count_include_pad": 1}),
        ("f32", [1, 2, 8, 10], {"kernel_shape": [3, 3], "strides": [2, 3], "pads": [1, 1, 1, 1],
                                "ceil_mode": 1}),
        ("f32", [1, 2, 8, 10], {"kernel_shape": [3, 3], "strides": [2, 3], "pads": [1, 1, 1, 1],
                                "ceil_mode": 1, "count_include_pad": 1}),
        ("f32", [1, 2, 7, 7], {"kernel_shape": [2, 2], "ceil_mode": 1, "count_include_pad": 1}),
        ("f32", [2, 2, 5, 6], {"kernel_shape": [3, 3], "pads": [0, 1, 1, 0], "strides": [1, 2],
                               "count_include_pad": 1}),
        ("f16", [1, 4, 8, 8], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
        ("bf16", [2, 2, 6, 7], {"kernel_shape": [2, 3], "strides": [1, 1]})]):
    case("avg_pool2d", _dt, data_gen(_dt, _xs), attrs=_at, tol=TOL_AVG, tag=f"{_k}-{_xs}")

# ------------------------------------------------------------------------------------------
# Larger cases: cross the kernels' parallel-for grain and blocking thresholds
# ------------------------------------------------------------------------------------------

case("add", "f32", lambda r: [uni(r, [257, 513]), uni(r, [513])], tag="big")
case("exp", "f32", lambda r: [uni(r, [131071], -10, 10)], tag="big")
case("gelu", "f16", lambda r: [uni(r, [3, 40000], -6, 6)], attrs={"approximate": "tanh"},
     tag="big")
case("softmax", "f32", lambda r: [uni(r, [300, 257], -5, 5)], tol=tol_softmax, tag="big")
case("layer_norm", "f32", ln_gen([512, 300], [300]), tol=tol_layer_norm, tag="big")
case("transpose", "f32", data_gen("f32", [3, 200, 300]), attrs={"perm": [2, 0, 1]},
     tol="exact", tag="big")
case("reduce_sum", "f32", lambda r: [qnt(r, [64, 4096], -3, 3, 2.0**-10)], attrs={"axes": [1]},
     tol="exact", tag="big-exact")
case("reduce_mean", "f32", data_gen("f32", [3, 5000, 7]), attrs={"axes": [1]}, tol=TOL_RED,
     tag="big")
case("reduce_max", "f32", data_gen("f32", [4096, 64]), attrs={"axes": [0]}, tol="exact",
     tag="big")
case("matmul", "f32", lambda r: [qnt(r, [4, 96, 200]), qnt(r, [200, 160])], tol="exact",
     tag="big-batch-exact")
case("matmul", "f32", lambda r: [qnt(r, [150, 70]), qnt(r, [130, 150])], tol="exact",
     attrs={"trans_a": 1, "trans_b": 1}, tag="ta-tb-exact")
case("matmul", "f16", lambda r: [qnt(r, [2, 33, 64]), qnt(r, [2, 64, 17])], tol="exact",
     tag="exact")
case("gemm", "f32", lambda r: [qnt(r, [100, 129]), qnt(r, [129, 64]), qnt(r, [64])],
     tol="exact", tag="exact")
case("conv2d", "f32", lambda r: [qnt(r, [2, 16, 33, 33]), qnt(r, [32, 16, 3, 3], -2, 2),
                                 qnt(r, [32])], attrs={"pads": [1, 1, 1, 1]},
     tol="exact", tag="big-exact")
case("conv2d", "f32", lambda r: [qnt(r, [1, 8, 20, 17]), qnt(r, [8, 2, 3, 3], -2, 2),
                                 qnt(r, [8])],
     attrs={"groups": 4, "strides": [2, 1], "dilations": [2, 1], "pads": [1, 2, 0, 1]},
     tol="exact", tag="grouped-exact")
case("max_pool2d", "f32", data_gen("f32", [2, 8, 64, 64]),
     attrs={"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, tol="exact",
     tag="big")
case("attention", "f32", attn_gen([2, 4], 128, 128, 64, 64), attrs={"causal": 1},
     tol=tol_attention, tag="big-causal")
case("gather", "f32", gather_gen("f32", [1000, 64], [8, 128], "i64", 1000), tol="exact",
     tag="big-embedding")

# integer and bool paths over the parallel grain, and broadcasting at size
case("cast", "f32", lambda r: [uni(r, [301, 517], -3e9, 3e9)], attrs={"to": "i32"},
     tol="exact", tag="big")
case("where", "i64", lambda r: [np.asarray(r.random([64, 1, 129]) < .5),
                                ints(r, [1, 33, 129], "i64", -9, 9), ints(r, [129], "i64", 0, 5)],
     tol="exact", tag="big")
case("equal", "i32", lambda r: [ints(r, [400, 300], "i32", 0, 3), ints(r, [300], "i32", 0, 3)],
     tag="big")
case("reduce_sum", "i64", lambda r: [ints(r, [33, 5000], "i64", -2**40, 2**40)],
     attrs={"axes": [1]}, tag="big")
case("argmax", "f32", lambda r: [uni(r, [257, 1001])], attrs={"axis": 1}, tag="big")
case("slice", "f32", data_gen("f32", [120, 130, 7]),
     attrs={"starts": [-1, 100], "ends": [-1000, 3], "axes": [0, 1], "steps": [-1, -3]},
     tol="exact", tag="big")
case("concat", "f16", concat_gen("f16", [[64, 100, 3], [64, 100, 5]]), attrs={"axis": 2},
     tol="exact", tag="big")
case("add", "f16", lambda r: [uni(r, [300, 1, 257]), uni(r, [1, 40, 1])], tag="big-bcast")
case("softmax", "bf16", lambda r: [uni(r, [200, 301], -8, 8)], tol=tol_softmax, tag="big")
case("layer_norm", "f16", ln_gen([256, 200], [200]), tol=tol_layer_norm, tag="big")
case("avg_pool2d", "f32", data_gen("f32", [2, 8, 48, 40]),
     attrs={"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
     tol=TOL_AVG, tag="big")

# more corners
case("softmax", "f32", data_gen("f32", [4, 1]), tol=tol_softmax, tag="axis-size-1")
case("log_softmax", "f32", data_gen("f32", [1, 5]), attrs={"axis": 0}, tol=tol_softmax,
     tag="axis-size-1")
case("layer_norm", "f32", ln_gen([3, 4, 5], [3, 4, 5]), attrs={"axis": 0},
     tol=tol_layer_norm, tag="axis0")
case("reshape", "f32", data_gen("f32", []), attrs={"shape": [-1]}, tol="exact",
     tag="scalar-to-1")
case("expand", "f32", data_gen("f32", [2, 3, 4]), attrs={"shape": [3, 1]}, tol="exact",
     tag="shape-shorter")
case("slice", "f32", data_gen("f32", [6]), attrs={"starts": [100], "ends": [-100],
                                                  "steps": [-2]}, tol="exact", tag="clamp-back")
case("transpose", "f32", data_gen("f32", [2, 3, 1, 4]), tol="exact", tag="default-rank4")
case("conv2d", "f32", conv_gen([1, 2, 4, 5], [3, 2, 2, 2]), attrs={"pads": [3, 2, 3, 2]},
     tol=TOL_CONV, tag="pads-over-kernel")
for _op, _extra in (("max_pool2d", {}), ("avg_pool2d", {}),
                    ("avg_pool2d", {"count_include_pad": 1})):
    # H = 7, k 2, s 2, pad 1, ceil: ceil(7/2)+1 = 5 windows, the last would start in the
    # bottom padding, so 4 (PyTorch's rule)
    case(_op, "f32", data_gen("f32", [1, 2, 7, 9]),
         attrs=dict({"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1],
                     "ceil_mode": 1}, **_extra),
         tol="exact" if _op == "max_pool2d" else TOL_AVG,
         tag="ceil-drop-last" + ("-incl" if _extra else ""))
case("max_pool2d", "f32", data_gen("f32", [2, 3, 10, 11]),
     attrs={"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 0, 1, 1],
            "dilations": [2, 1], "ceil_mode": 1}, tol="exact", tag="dil-ceil-pads")
case("max_pool2d", "f32", data_gen("f32", [1, 2, 5, 5]), attrs={"kernel_shape": [1, 1]},
     tol="exact", tag="k1")
# ceil_mode where the (dilated) kernel reaches past the padded input: docs/ops.md sizes the
# output as conv2d's with a ceiling, ceil((H + pads - d(k-1) - 1) / s) + 1, >= 1 here, and the
# one window starts inside the input (PyTorch accepts these too). H = 4, k 3, d 2: ceil(-1/3)+1
# = 1 row; W = 5, k 3, s 2 with H = 2: ceil(-1/2)+1 = 1 row.
case("max_pool2d", "f32", data_gen("f32", [1, 2, 4, 4]),
     attrs={"kernel_shape": [3, 1], "strides": [3, 3], "dilations": [2, 2], "ceil_mode": 1},
     tol="exact", tag="ceil-dilated-kernel-past-input")
case("avg_pool2d", "f32", data_gen("f32", [1, 2, 2, 5]),
     attrs={"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, tol=TOL_AVG,
     tag="ceil-kernel-past-input")

# test ids: shapes as 3x4 ("scalar" for []), no spaces or brackets (handy with -k); unique;
# the index also drives which cases declare a -1 (run-time) dim


def _clean_id(s):
    s = s.replace("[]", "scalar")
    s = re.sub(r"\[([^\]]*)\]", lambda m: m.group(1).replace(", ", "x"), s)
    return s.replace(" ", "")


for _c in CASES:
    _c.id = _clean_id(_c.id)
_ids = [c.id for c in CASES]
_dups = {i for i in _ids if _ids.count(i) > 1}
for _c in CASES:
    if _c.id in _dups:
        _n = sum(1 for x in CASES[:CASES.index(_c)] if x.id == _c.id)
        _c.id = f"{_c.id}-{_n}"
for _n, _c in enumerate(CASES):
    _c.index = _n


@pytest.mark.parametrize("op_case", CASES, ids=[c.id for c in CASES])
def test_op(op_case, tmp_path):
    check_case(op_case, tmp_path)


def test_every_op_is_covered():
    """The case table covers every op of docs/ops.md, and the reference knows them all."""
    import re
    documented = set()
    for line in (rg.REPO / "docs" / "ops.md").read_text().splitlines():
        if line.startswith("## "):
            documented |= set(re.findall(r"`([a-z_0-9]+)`", line))
        elif line.startswith("| `"):
            documented |= set(re.findall(r"`([a-z_0-9]+)`", line.split("|")[1]))
    assert documented == set(rg.ALL_OPS), (sorted(documented - set(rg.ALL_OPS)),
                                           sorted(set(rg.ALL_OPS) - documented))
    missing = sorted(documented - {c.op for c in CASES})
    assert not missing, f"ops without a case: {missing}"
