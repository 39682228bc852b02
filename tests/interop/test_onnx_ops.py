"""
Every ONNX operator the importer lowers (onnx/, docs/rtxrun.md), one small model per case
built with onnx.helper, run by rtxrun against onnxruntime's CPU provider on the same inputs.

Each operator at several shapes, dtypes and attribute settings: broadcasting, negative axes,
keepdims, transA/transB, strides/pads/dilations/groups/auto_pad, ceil_mode,
count_include_pad, Slice with negative steps and clamped ends, Gather with negative indices,
Reshape's 0 and allowzero, and the opset variants where an operator changed (axes as inputs
of Squeeze/Unsqueeze since 13 and of the Reduce ops since 18, Split's num_outputs in 18, Gelu
in 20). Ops whose definition did not change over opsets 13 to 23 rotate through them. Some
cases declare their inputs' first dimension symbolic and are given a concrete one. Then the
shape sub-graph (Shape -> Gather -> Unsqueeze -> Concat -> Reshape) at three batch sizes, and
the decomposed patterns exporters write (layer norm, both GELUs, attention with and without
a mask).

All cases run in ONE `rtxrun --batch-dir` process (onnx_models.shared_batch: once per session,
also under pytest-xdist); each case is then its own test, so a failure names the model, op,
attributes and inputs. Comparison: onnx_models.compare (f32 within 1e-4 relative plus an
absolute 1e-6 or 1e-5 of the output's scale; integers and bool exact; data movement exact).
"""

import itertools

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_models as om
from onnx_models import INT64_MAX, INT64_MIN, uni

CASES = om.CaseList(opsets=(13, 17, 18, 21, 23))  # the rotation for ops unchanged over 13..23
one, model_case, decomposed = CASES.one, CASES.model_case, CASES.decomposed


def R(cid):
    return om.rng_for(cid)


def ints(rng, shape, lo=-9, hi=9, dtype=np.int64):
    return rng.integers(lo, hi, size=shape, endpoint=True).astype(dtype)


def qnt(rng, shape, n=4):
    """Values k/2 for |k| <= n: comparisons and max/min see ties and exact equalities."""
    return (rng.integers(-n, n, size=shape, endpoint=True) / 2).astype(np.float32)


def i64(*v):
    return np.array(v, np.int64)


# ------------------------------------------------------------------------------------------
# Elementwise
# ------------------------------------------------------------------------------------------

BIN_SHAPES = [([3, 4], [3, 4]), ([2, 3, 4], [4]), ([2, 1, 4], [3, 1]), ([5], []),
              ([1, 3, 1], [2, 1, 5])]
for op in ("Add", "Sub", "Mul", "Div"):
    for i, (sa, sb) in enumerate(BIN_SHAPES):
        cid = f"{op}-f32-{i}"
        r = R(cid)
        b = uni(r, sb, 0.5, 2.0) * np.where(r.random(sb) < 0.5, -1, 1).astype(np.float32)
        one(cid, op, {"a": uni(r, sa, -3, 3), "b": b}, sym=(0,) if i in (0, 2) else ())
    for dt in (np.int32, np.int64):
        for i, (sa, sb) in enumerate(BIN_SHAPES[:3]):
            cid = f"{op}-{np.dtype(dt).name}-{i}"
            r = R(cid)
            b = ints(r, sb, 1, 7, dt) * np.where(r.random(sb) < 0.5, -1, 1).astype(dt)
            one(cid, op, {"a": ints(r, sa, -50, 50, dt), "b": b}, kind="exact")
    cid = f"{op}-f16"
    r = R(cid)
    one(cid, op, {"a": uni(r, [2, 3, 4], -3, 3, np.float16),
                  "b": uni(r, [4], 0.5, 2, np.float16)})
    cid = f"{op}-f32-bias-init"
    r = R(cid)
    one(cid, op, {"x": uni(r, [4, 6])}, {"bias": uni(r, [6], 0.5, 2)}, sym=(0,))

for i, (sa, sb, lo, hi) in enumerate([([3, 4], [3, 4], 0.1, 2.0), ([2, 3, 4], [4], 0.5, 3.0),
                                      ([6], [], 0.1, 4.0)]):
    cid = f"Pow-f32-{i}"
    r = R(cid)
    one(cid, "Pow", {"a": uni(r, sa, lo, hi), "b": uni(r, sb, -2, 2)})
for e in (2.0, 3.0, 0.5):
    cid = f"Pow-f32-const{e}"
    r = R(cid)
    lo = 0.0 if e == 0.5 else -2.0
    one(cid, "Pow", {"x": uni(r, [3, 8], lo, 2)}, {"e": np.float32(e)}, sym=(0,))
cid = "Pow-f32-int64-exponent"
r = R(cid)
one(cid, "Pow", {"a": uni(r, [4, 5], -2, 2), "b": ints(r, [5], 0, 4)})
cid = "Pow-int32"
r = R(cid)
one(cid, "Pow", {"a": ints(r, [3, 4], -5, 5, np.int32), "b": ints(r, [4], 0, 4, np.int32)},
    kind="exact")

UNARY = {"Neg": (-4, 4), "Abs": (-4, 4), "Sqrt": (0.01, 9), "Reciprocal": (0.1, 4),
         "Exp": (-6, 6), "Log": (0.01, 20), "Tanh": (-5, 5), "Erf": (-4, 4), "Relu": (-4, 4),
         "Sigmoid": (-8, 8)}
for op, (lo, hi) in UNARY.items():
    for i, shape in enumerate(([2, 3, 5], [7], [1, 1, 4, 3])):
        cid = f"{op}-f32-{i}"
        r = R(cid)
        x = uni(r, shape, lo, hi)
        if op == "Reciprocal":
            x *= np.where(r.random(shape) < 0.5, -1, 1).astype(np.float32)
        one(cid, op, {"x": x}, sym=(0,) if i == 0 else ())
    if op in ("Neg", "Abs", "Relu", "Exp", "Tanh", "Sigmoid", "Sqrt"):
        cid = f"{op}-f16"
        one(cid, op, {"x": uni(R(cid), [3, 9], lo, min(hi, 4), np.float16)})
# IEEE special values: infinities, signed zeros, overflow and underflow (no NaN inputs:
# onnxruntime's vectorized tanh/exp clamp their argument, so NaN in is not NaN out there)
SPECIAL = np.array([-np.inf, -100.0, -20.0, -1e-30, -0.0, 0.0, 1e-30, 20.0, 100.0, np.inf],
                   np.float32)
for op in ("Neg", "Abs", "Sqrt", "Reciprocal", "Exp", "Log", "Tanh", "Erf", "Relu", "Sigmoid"):
    one(f"{op}-f32-special", op, {"x": SPECIAL})
cid = "Div-f32-by-zero"
one(cid, "Div", {"a": np.array([1, -1, 0, 2, np.inf, -3], np.float32),
                 "b": np.array([0, 0, 0, -0.0, 0, np.inf], np.float32)})
for op in ("Neg", "Abs"):
    for dt in (np.int32, np.int64):
        cid = f"{op}-{np.dtype(dt).name}"
        one(cid, op, {"x": ints(R(cid), [3, 5], -100, 100, dt)}, kind="exact")
cid = "Relu-int32"
one(cid, "Relu", {"x": ints(R(cid), [4, 5], -9, 9, np.int32)}, kind="exact")

for approx in ("none", "tanh"):
    for i, shape in enumerate(([2, 3, 8], [5])):
        cid = f"Gelu20-{approx}-{i}"
        one(cid, "Gelu", {"x": uni(R(cid), shape, -6, 6)}, attrs={"approximate": approx},
            opset=20 + i, sym=(0,))
    cid = f"Gelu20-{approx}-f16"
    one(cid, "Gelu", {"x": uni(R(cid), [4, 6], -4, 4, np.float16)},
        attrs={"approximate": approx}, opset=20)

for name, x in (("f32", uni(R("Identity"), [3, 4])), ("i64", i64(3, -1, 7)),
                ("bool", np.array([[True, False], [False, False]]))):
    one(f"Identity-{name}", "Identity", {"x": x}, kind="exact")
cid = "Dropout-noratio"
one(cid, "Dropout", {"x": uni(R(cid), [2, 3, 4])}, kind="exact", sym=(0,))
cid = "Dropout-ratio"
one(cid, "Dropout", {"x": uni(R(cid), [5, 6])}, {"ratio": np.float32(0.3)}, kind="exact",
    ins=["x", "ratio"])

# Cast: (from array, to); float -> integer truncates toward zero (values kept in range)
_cr = R("Cast")
CASTS = [
    ("f32-i32", uni(_cr, [3, 5], -100, 100), TensorProto.INT32),
    ("f32-i64", uni(_cr, [7], -1e6, 1e6), TensorProto.INT64),
    ("f32-f16", uni(_cr, [2, 6], -50, 50), TensorProto.FLOAT16),
    ("f32-bool", np.array([0.0, -0.0, 1.5, -2.0, 1e-30, 0.0], np.float32), TensorProto.BOOL),
    ("f32-u8", uni(_cr, [9], 0, 255.9), TensorProto.UINT8),
    ("f32-i8", uni(_cr, [9], -128.9, 127.9), TensorProto.INT8),
    ("i64-f32", ints(_cr, [4, 3], -10**6, 10**6), TensorProto.FLOAT),
    ("i32-f32", ints(_cr, [5], -1000, 1000, np.int32), TensorProto.FLOAT),
    ("i64-i32", ints(_cr, [6], -10**9, 10**9), TensorProto.INT32),
    ("i32-i64", ints(_cr, [6], -10**9, 10**9, np.int32), TensorProto.INT64),
    ("bool-f32", np.array([[True, False, True]]), TensorProto.FLOAT),
    ("bool-i64", np.array([True, False, False, True]), TensorProto.INT64),
    ("f16-f32", uni(_cr, [3, 4], -8, 8, np.float16), TensorProto.FLOAT),
    ("u8-f32", ints(_cr, [8], 0, 255, np.uint8), TensorProto.FLOAT),
    ("i8-i32", ints(_cr, [8], -128, 127, np.int8), TensorProto.INT32),
    ("i64-bool", i64(0, 3, -1, 0, 9), TensorProto.BOOL),
    ("f32-f32", uni(_cr, [4], -1, 1), TensorProto.FLOAT),
    ("f32-f16-overflow", np.array([1e5, -1e5, 65504, 65520, 1e-8, -np.inf, 2.0**-24],
                                  np.float32), TensorProto.FLOAT16),
]
for name, x, to in CASTS:
    one(f"Cast-{name}", "Cast", {"x": x}, attrs={"to": to}, kind="exact")

for op in ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"):
    for i, (sa, sb) in enumerate(BIN_SHAPES[:4]):
        cid = f"{op}-f32-{i}"
        r = R(cid)
        one(cid, op, {"a": qnt(r, sa), "b": qnt(r, sb)}, kind="exact", sym=(0,) if i else ())
    for dt in (np.int32, np.int64):
        cid = f"{op}-{np.dtype(dt).name}"
        r = R(cid)
        one(cid, op, {"a": ints(r, [2, 3, 4], -3, 3, dt), "b": ints(r, [3, 1], -3, 3, dt)},
            kind="exact")
cid = "Equal-bool"
r = R(cid)
one(cid, "Equal", {"a": r.random([3, 4]) < 0.5, "b": r.random([4]) < 0.5}, kind="exact")
cid = "Not-bool"
one(cid, "Not", {"x": R(cid).random([3, 5]) < 0.5}, kind="exact", sym=(0,))
for op in ("And", "Or"):
    for i, (sa, sb) in enumerate(BIN_SHAPES[:4]):
        cid = f"{op}-{i}"
        r = R(cid)
        one(cid, op, {"a": r.random(sa) < 0.5, "b": r.random(sb) < 0.5}, kind="exact")

for i, (sc, sx, sy, dt) in enumerate([([3, 1], [1, 4], [], np.float32),
                                      ([2, 3, 4], [2, 3, 4], [4], np.int64),
                                      ([5], [5], [5], np.int32),
                                      ([2, 1, 3], [4, 1], [2, 4, 3], np.float32)]):
    cid = f"Where-{i}"
    r = R(cid)
    mk = (lambda s: uni(r, s, -5, 5)) if dt == np.float32 else (lambda s: ints(r, s, dtype=dt))
    one(cid, "Where", {"c": r.random(sc) < 0.5, "a": mk(sx), "b": mk(sy)}, kind="exact")

# ------------------------------------------------------------------------------------------
# MatMul and Gemm
# ------------------------------------------------------------------------------------------

MM = [([3, 4], [4, 5]), ([2, 3, 4], [4, 5]), ([2, 3, 4], [2, 4, 5]), ([2, 1, 3, 4], [3, 4, 5]),
      ([4], [4, 5]), ([3, 4], [4]), ([5, 64], [64, 33]), ([2, 7, 16], [1, 16, 9])]
for i, (sa, sb) in enumerate(MM):
    cid = f"MatMul-{i}"
    r = R(cid)
    one(cid, "MatMul", {"a": uni(r, sa), "b": uni(r, sb)}, kind="sum",
        sym=(0,) if i in (1, 2, 6) else ())
cid = "MatMul-weight-init"
r = R(cid)
one(cid, "MatMul", {"x": uni(r, [3, 5, 24])}, {"w": uni(r, [24, 10])}, kind="sum", sym=(0, 1))
cid = "MatMul-f16"
r = R(cid)
one(cid, "MatMul", {"a": uni(r, [4, 8], dtype=np.float16), "b": uni(r, [8, 3],
                                                                    dtype=np.float16)},
    kind="sum")

M_, K_, N_ = 3, 5, 4
for ta, tb in itertools.product((0, 1), (0, 1)):
    for cshape in ([N_], [M_, N_], [1, N_], [M_, 1], [], None):
        cname = "none" if cshape is None else "x".join(map(str, cshape)) or "scalar"
        cid = f"Gemm-tA{ta}-tB{tb}-C{cname}"
        r = R(cid)
        a = uni(r, [K_, M_] if ta else [M_, K_])
        b = uni(r, [N_, K_] if tb else [K_, N_])
        attrs = {"transA": ta, "transB": tb}
        if cshape is not None and len(cshape) == 2:
            attrs.update(alpha=0.5, beta=2.0)
        feeds = {"a": a, "b": b}
        if cshape is not None:
            feeds["c"] = uni(r, cshape)
        one(cid, "Gemm", feeds, attrs=attrs, kind="sum")
cid = "Gemm-linear-init"
r = R(cid)
one(cid, "Gemm", {"x": uni(r, [6, 12])}, {"w": uni(r, [8, 12]), "b": uni(r, [8])},
    attrs={"transB": 1}, kind="sum", sym=(0,))

# ------------------------------------------------------------------------------------------
# Shapes and data movement
# ------------------------------------------------------------------------------------------

_x234 = uni(R("reshape"), [2, 3, 4])
for i, (shape, attrs) in enumerate([([6, 4], {}), ([-1], {}), ([0, -1], {}),
                                    ([2, 0, 2, 2], {}), ([4, -1, 3], {}),
                                    ([4, 6], {"allowzero": 1}), ([1, 24, 1], {"allowzero": 1})]):
    one(f"Reshape-{i}", "Reshape", {"x": _x234}, {"shape": i64(*shape)}, attrs=attrs,
        kind="exact", opset=14 + i % 6 if attrs else None)
cid = "Reshape-dyn-batch"
one(cid, "Reshape", {"x": uni(R(cid), [5, 3, 4])}, {"shape": i64(0, 12)}, kind="exact",
    sym=(0,))
cid = "Reshape-dyn-batch-minus1"
one(cid, "Reshape", {"x": uni(R(cid), [3, 6, 2])}, {"shape": i64(-1, 4)}, kind="exact",
    sym=(0,))
cid = "Reshape-int64"
one(cid, "Reshape", {"x": ints(R(cid), [2, 6])}, {"shape": i64(3, 4)}, kind="exact")

_x4 = uni(R("flatten"), [2, 3, 4, 5])
for ax in (0, 1, 2, -1, 4):
    one(f"Flatten-axis{ax}", "Flatten", {"x": _x4}, attrs={"axis": ax}, kind="exact",
        sym=(0,) if ax == 1 else ())

_xs = uni(R("squeeze"), [1, 3, 1, 4, 1])
for i, axes in enumerate(([0], [-1], [0, 2], [2, -1, 0], None)):
    inits = {} if axes is None else {"axes": i64(*axes)}
    one(f"Squeeze-{i}", "Squeeze", {"x": _xs}, inits, kind="exact")
_xu = uni(R("unsqueeze"), [3, 4])
for i, axes in enumerate(([0], [-1], [1, 3], [3, 1], [-1, -4], [0, 1, 2])):
    one(f"Unsqueeze-{i}", "Unsqueeze", {"x": _xu}, {"axes": i64(*axes)}, kind="exact",
        sym=(0,) if i == 0 else ())
cid = "Unsqueeze-scalar"
one(cid, "Unsqueeze", {"x": np.float32(2.5)}, {"axes": i64(0)}, kind="exact")

for i, (shape, perm) in enumerate([([3, 4], None), ([2, 3, 4, 5], [0, 2, 1, 3]),
                                   ([2, 3, 4], [2, 0, 1]), ([2, 3, 4, 5], None),
                                   ([2, 3, 4, 5], [0, 2, 3, 1]), ([4, 1, 6], [1, 0, 2])]):
    cid = f"Transpose-{i}"
    one(cid, "Transpose", {"x": uni(R(cid), shape)},
        attrs={} if perm is None else {"perm": perm}, kind="exact", sym=(0,) if i == 1 else ())
cid = "Transpose-int64"
one(cid, "Transpose", {"x": ints(R(cid), [3, 5])}, kind="exact")
cid = "Transpose-bool"
one(cid, "Transpose", {"x": R(cid).random([2, 3, 2]) < 0.5}, attrs={"perm": [1, 2, 0]},
    kind="exact")

for i, (shapes, axis) in enumerate([([[2, 3], [4, 3]], 0), ([[2, 3, 4], [2, 1, 4],
                                                             [2, 5, 4]], 1),
                                    ([[3, 2], [3, 5]], -1), ([[2, 2, 2], [2, 2, 3]], -1)]):
    cid = f"Concat-{i}"
    r = R(cid)
    one(cid, "Concat", {f"x{j}": uni(r, s) for j, s in enumerate(shapes)},
        attrs={"axis": axis}, kind="exact")
cid = "Concat-int64-init"
one(cid, "Concat", {"a": i64(4, 5)}, {"b": i64(-1, 7, 8)}, attrs={"axis": 0}, kind="exact")

_xsl = uni(R("slice"), [6, 7, 8])
SLICES = [  # (starts, ends, axes, steps)
    ([1], [4], [0], None),
    ([-3], [INT64_MAX], [1], None),
    ([0, 1], [100, -1], [0, 2], [2, 3]),
    ([-1], [INT64_MIN], [1], [-1]),
    ([5], [1], [2], [-2]),
    ([1, 2], [5, 6], None, None),
    ([1, 0], [-1, 3], [-1, -3], None),
    ([-100], [3], [0], None),
    ([6], [-100], [0], [-3]),
    ([2, -2, 7], [-1, 0, 0], [0, 1, 2], [1, -1, -2]),
]
for i, (st, en, ax, sp) in enumerate(SLICES):
    inits = {"starts": i64(*st), "ends": i64(*en)}
    ins = ["x", "starts", "ends"]
    if ax is not None:
        inits["axes"] = i64(*ax)
        ins.append("axes")
    if sp is not None:
        if ax is None:
            ins.append("")
        inits["steps"] = i64(*sp)
        ins.append("steps")
    one(f"Slice-{i}", "Slice", {"x": _xsl}, inits, ins=ins, kind="exact",
        sym=(0,) if i == 2 else ())
cid = "Slice-int32-indices"
one(cid, "Slice", {"x": ints(R(cid), [5, 6])},
    {"starts": np.array([1], np.int32), "ends": np.array([-1], np.int32),
     "axes": np.array([1], np.int32)}, kind="exact")

_xsp = uni(R("split"), [3, 7, 6])
SPLITS = [  # (opset, axis, split sizes or None, num_outputs attr or None, outputs)
    (13, 1, [2, 3, 2], None, 3), (13, 2, None, None, 3), (17, -1, [1, 5], None, 2),
    (18, 1, None, 3, 3), (18, 2, None, 2, 2), (18, 0, [1, 2], None, 2), (23, -2, None, 4, 4),
]
for i, (ops, axis, split, nout_attr, nout) in enumerate(SPLITS):
    attrs = {"axis": axis}
    if nout_attr:
        attrs["num_outputs"] = nout_attr
    one(f"Split-op{ops}-{i}", "Split", {"x": _xsp}, {"split": i64(*split)} if split else {},
        attrs=attrs, opset=ops, nout=nout, kind="exact", sym=(0,) if axis != 0 else ())

_xg = uni(R("gather"), [5, 4, 6])
GATHERS = [(np.array([[0, -1, 2], [-5, 4, 1]], np.int64), 0),
           (np.array([3, -4], np.int32), 1), (np.array([[-1, 0], [2, -6]], np.int64), -1),
           (np.array(-2, np.int64), 0), (np.array(1, np.int32), 2)]
for i, (idx, axis) in enumerate(GATHERS):
    one(f"Gather-{i}", "Gather", {"x": _xg}, {"idx": idx}, attrs={"axis": axis}, kind="exact")
cid = "Gather-indices-input"
one(cid, "Gather", {"table": uni(R(cid), [10, 4]), "ids": ints(R(cid), [2, 3], -10, 9)},
    attrs={"axis": 0}, kind="exact", sym=(0,))
cid = "Gather-int64-data"
one(cid, "Gather", {"x": i64(2, 3, 5, 7)}, {"idx": i64(0, -1)}, attrs={"axis": 0},
    kind="exact")

_xsh = uni(R("shape"), [2, 3, 4, 5])
for i, attrs in enumerate(({}, {"start": 1}, {"start": -2, "end": -1}, {"end": 2},
                           {"start": 1, "end": 100})):
    one(f"Shape-{i}", "Shape", {"x": _xsh}, attrs=attrs, kind="exact",
        opset=15 + i if attrs else 13, sym=(0, 2) if i < 2 else ())
one("Size-f32", "Size", {"x": _xsh}, kind="exact", sym=(0,))
one("Size-i64", "Size", {"x": i64(1, 2, 3)}, kind="exact")

for i, (shape, val) in enumerate([([2, 3], np.array([1.5], np.float32)),
                                  ([4], np.array([7], np.int64)), ([2, 1, 3], None),
                                  ([3], np.array([True]))]):
    attrs = {} if val is None else {"value": numpy_helper.from_array(val)}
    one(f"ConstantOfShape-{i}", "ConstantOfShape", {}, {"shape": i64(*shape)}, attrs=attrs,
        kind="exact")
cid = "ConstantOfShape-from-Shape"
model_case(cid, [helper.make_node("Shape", ["x"], ["s"], name="shape"),
                 helper.make_node("ConstantOfShape", ["s"], ["y"], name="op",
                                  value=numpy_helper.from_array(np.array([2.0], np.float32)))],
           {"x": uni(R(cid), [3, 2])}, ["y"], kind="exact", sym=(0,))

for i, (start, limit, delta) in enumerate([(np.float32(0.5), np.float32(4.0), np.float32(0.75)),
                                           (i64(10)[0], i64(2)[0], i64(-3)[0]),
                                           (np.int32(0), np.int32(5), np.int32(1)),
                                           (np.float32(3), np.float32(-1), np.float32(-0.5))]):
    one(f"Range-{i}", "Range", {}, {"start": np.array(start), "limit": np.array(limit),
                                    "delta": np.array(delta)}, kind="exact")
cid = "Range-from-Shape"
model_case(cid, [helper.make_node("Shape", ["x"], ["s"], name="shape"),
                 helper.make_node("Gather", ["s", "one"], ["n"], name="gather", axis=0),
                 helper.make_node("Range", ["zero", "n", "one"], ["y"], name="op")],
           {"x": uni(R(cid), [2, 5])}, ["y"], {"one": np.array(1, np.int64),
                                              "zero": np.array(0, np.int64)},
           kind="exact", sym=(1,))

for i, (sx, shape, dt) in enumerate([([3, 1], [2, 3, 4], np.float32), ([4], [3, 4], np.float32),
                                     ([2, 1, 4], [1, 3, 1], np.float32),
                                     ([1, 3], [2, 1], np.int64), ([3, 4], [1, 1], np.float32),
                                     ([1], [2, 2, 2], np.bool_)]):
    cid = f"Expand-{i}"
    r = R(cid)
    x = (uni(r, sx) if dt == np.float32 else r.random(sx) < 0.5 if dt == np.bool_
         else ints(r, sx))
    one(cid, "Expand", {"x": x}, {"shape": i64(*shape)}, kind="exact")

cid = "Constant-value"
cv = uni(R(cid), [2, 3])
model_case(cid, [helper.make_node("Constant", [], ["c"], name="const",
                                  value=numpy_helper.from_array(cv)),
                 helper.make_node("Add", ["x", "c"], ["y"], name="op")],
           {"x": uni(R(cid + "x"), [4, 2, 3])}, ["y"], sym=(0,))
model_case("Constant-value_float", [
    helper.make_node("Constant", [], ["c"], name="const", value_float=2.5),
    helper.make_node("Mul", ["x", "c"], ["y"], name="op")],
    {"x": uni(R("cvf"), [3, 3])}, ["y"], opset=13)
model_case("Constant-value_ints-shape", [
    helper.make_node("Constant", [], ["s"], name="const", value_ints=[3, 2, -1]),
    helper.make_node("Reshape", ["x", "s"], ["y"], name="op")],
    {"x": uni(R("cvi"), [6, 4])}, ["y"], opset=18, kind="exact")
model_case("Constant-value_int", [
    helper.make_node("Constant", [], ["c"], name="const", value_int=4),
    helper.make_node("Mul", ["x", "c"], ["y"], name="op")],
    {"x": i64(1, -2, 3)}, ["y"], opset=21, kind="exact")

for i, (shape, attrs, k) in enumerate([([4, 5], {}, None), ([4, 5], {"upper": 0}, None),
                                       ([4, 5], {"upper": 1}, 1), ([5, 4], {"upper": 0}, -1),
                                       ([2, 4, 5], {}, 2), ([2, 3, 3], {"upper": 0}, -5),
                                       ([3, 6], {"upper": 0}, 2)]):
    cid = f"Trilu-{i}"
    one(cid, "Trilu", {"x": uni(R(cid), shape)}, {} if k is None else {"k": i64(k)[0]},
        attrs=attrs, kind="exact", sym=(0,) if len(shape) == 3 else (),
        opset=(14, 17, 18, 21, 23)[i % 5])  # Trilu is new in opset 14
cid = "Trilu-int64"
one(cid, "Trilu", {"x": ints(R(cid), [3, 3])}, attrs={"upper": 0}, kind="exact", opset=18)

# ------------------------------------------------------------------------------------------
# Reductions, softmax, normalization
# ------------------------------------------------------------------------------------------

_xr = uni(R("reduce"), [3, 4, 5], -2, 2)
REDUCE_AXES = [([1], 1), ([-1], 0), ([0, 2], 1), ([-3, -1], 0), (None, 0), (None, 1)]
for op in ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin"):
    kind = "exact" if op in ("ReduceMax", "ReduceMin") else "sum"
    for opset in (13, 18):
        for i, (axes, keep) in enumerate(REDUCE_AXES):
            as_input = opset >= 18 or op == "ReduceSum"
            attrs = {"keepdims": keep}
            inits = {}
            if axes is not None:
                if as_input:
                    inits["axes"] = i64(*axes)
                else:
                    attrs["axes"] = axes
            one(f"{op}-op{opset}-{i}", op, {"x": _xr}, inits, attrs=attrs, opset=opset,
                kind=kind, sym=(0,) if i == 1 else ())
    one(f"{op}-op18-noop", op, {"x": _xr}, {}, attrs={"noop_with_empty_axes": 1},
        opset=18, kind="exact")
cid = "ReduceSum-int64"
one(cid, "ReduceSum", {"x": ints(R(cid), [4, 6])}, {"axes": i64(1)}, attrs={"keepdims": 0},
    kind="exact")
cid = "ReduceMax-int32"
one(cid, "ReduceMax", {"x": ints(R(cid), [4, 6], dtype=np.int32)}, {"axes": i64(0)},
    opset=18, kind="exact")
cid = "ReduceMean-op18-axes-input-dyn"
one(cid, "ReduceMean", {"x": uni(R(cid), [6, 16])}, {"axes": i64(-1)}, opset=18, kind="sum",
    sym=(0,))

_xa = qnt(R("argmax"), [3, 4, 6], 2)  # ties: select_last_index matters
for i, attrs in enumerate(({"axis": 1}, {"axis": -1, "keepdims": 0},
                           {"axis": 2, "select_last_index": 1},
                           {"axis": 0, "keepdims": 0, "select_last_index": 1}, {})):
    one(f"ArgMax-{i}", "ArgMax", {"x": _xa}, attrs=attrs, kind="exact")
cid = "ArgMax-int32"
one(cid, "ArgMax", {"x": ints(R(cid), [5, 4], -3, 3, np.int32)}, attrs={"axis": 1},
    kind="exact")

for op in ("Softmax", "LogSoftmax"):
    for i, (shape, axis, scale) in enumerate([([2, 3, 7], -1, 3), ([2, 5, 3], 1, 3),
                                              ([4, 9], 1, 30), ([3, 4], 0, 1),
                                              ([2, 2, 3, 5], -1, 5)]):
        cid = f"{op}-{i}"
        one(cid, op, {"x": uni(R(cid), shape, -scale, scale)},
            attrs={} if axis == -1 and i == 0 else {"axis": axis}, kind="sum",
            sym=(0,) if i == 0 else ())

for i, (shape, axis, eps, bias) in enumerate([([2, 5, 16], -1, 1e-5, True),
                                              ([3, 8], -1, 1e-3, False),
                                              ([2, 3, 4, 6], -2, 1e-5, True),
                                              ([2, 7, 32], 2, 1e-12, True)]):
    cid = f"LayerNormalization-{i}"
    r = R(cid)
    nshape = shape[axis:]
    inits = {"scale": uni(r, nshape, 0.5, 1.5)}
    if bias:
        inits["bias"] = uni(r, nshape)
    one(cid, "LayerNormalization", {"x": uni(r, shape, -3, 3)}, inits,
        attrs={"axis": axis, "epsilon": eps}, opset=17 + i * 2, kind="sum", sym=(0,))

# ------------------------------------------------------------------------------------------
# Convolution, normalization and pooling
# ------------------------------------------------------------------------------------------

CONVS = [  # (x shape, w shape, bias, attrs)
    ([1, 3, 9, 9], [4, 3, 3, 3], True, {"pads": [1, 1, 1, 1]}),
    ([2, 3, 9, 9], [4, 3, 3, 3], False, {"strides": [2, 2]}),
    ([1, 2, 11, 11], [3, 2, 3, 3], True, {"dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    ([1, 4, 8, 8], [6, 2, 3, 3], True, {"group": 2, "pads": [1, 1, 1, 1]}),
    ([2, 4, 7, 7], [4, 1, 3, 3], True, {"group": 4, "pads": [1, 1, 1, 1]}),
    ([1, 3, 9, 9], [4, 3, 3, 3], True, {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ([1, 3, 8, 8], [4, 3, 4, 4], True, {"auto_pad": "SAME_LOWER"}),
    ([1, 3, 8, 8], [4, 3, 2, 2], True, {"auto_pad": "SAME_UPPER"}),
    ([1, 3, 9, 9], [4, 3, 3, 3], True, {"auto_pad": "VALID", "strides": [2, 2]}),
    ([1, 3, 8, 8], [4, 3, 3, 3], True, {"pads": [0, 1, 1, 0]}),
    ([2, 8, 5, 5], [16, 8, 1, 1], True, {}),
    ([1, 3, 7, 10], [5, 3, 2, 3], True, {"strides": [1, 2], "pads": [1, 0, 1, 2]}),
    ([1, 2, 6, 6], [2, 2, 3, 3], False, {"kernel_shape": [3, 3], "strides": [1, 1],
                                          "dilations": [1, 1], "pads": [0, 0, 0, 0]}),
    ([3, 16, 8, 8], [16, 16, 3, 3], True, {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
]
for i, (sx, sw, bias, attrs) in enumerate(CONVS):
    cid = f"Conv-{i}"
    r = R(cid)
    fan = sw[1] * sw[2] * sw[3]
    inits = {"w": om.weight(r, sw, fan)}
    if bias:
        inits["b"] = uni(r, [sw[0]])
    one(cid, "Conv", {"x": uni(r, sx)}, inits, attrs=attrs, kind="sum",
        sym=(0,) if i % 3 == 0 else ())
cid = "Conv-weight-input"
r = R(cid)
one(cid, "Conv", {"x": uni(r, [1, 2, 5, 5]), "w": uni(r, [3, 2, 3, 3])}, kind="sum")

for i, (shape, eps, opset) in enumerate([([2, 3, 4, 4], 1e-5, 15), ([1, 5, 3, 7], 1e-3, 14),
                                         ([4, 6], 1e-5, 15), ([2, 3, 5], 1e-5, 13)]):
    cid = f"BatchNormalization-{i}"
    r = R(cid)
    c = shape[1]
    inits = {"scale": uni(r, [c], 0.5, 1.5), "B": uni(r, [c]), "mean": uni(r, [c]),
             "var": uni(r, [c], 0.2, 2)}
    one(cid, "BatchNormalization", {"x": uni(r, shape, -3, 3)}, inits,
        attrs={"epsilon": eps}, opset=opset, kind="sum", sym=(0,))

POOLS = [  # (x shape, attrs)
    ([1, 2, 9, 9], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ([1, 2, 8, 8], {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ([2, 3, 8, 8], {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ([1, 2, 8, 8], {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ([1, 2, 7, 9], {"kernel_shape": [2, 3], "pads": [0, 1, 1, 0]}),
    ([1, 1, 7, 7], {"kernel_shape": [3, 3], "auto_pad": "SAME_LOWER"}),
    ([1, 2, 5, 5], {"kernel_shape": [3, 3], "auto_pad": "VALID"}),
]
for op in ("MaxPool", "AveragePool"):
    for i, (sx, attrs) in enumerate(POOLS):
        cid = f"{op}-{i}"
        one(cid, op, {"x": uni(R(cid), sx, -4, 4)}, attrs=attrs,
            kind="exact" if op == "MaxPool" else "sum", sym=(0,) if i == 2 else ())
    if op == "MaxPool":
        cid = "MaxPool-dilations"
        one(cid, op, {"x": uni(R(cid), [1, 2, 9, 9])},
            attrs={"kernel_shape": [2, 2], "dilations": [2, 2], "strides": [1, 1]},
            kind="exact")
for cip in (0, 1):
    for i, (sx, attrs) in enumerate([([1, 2, 6, 6], {"kernel_shape": [3, 3],
                                                     "pads": [1, 1, 1, 1]}),
                                     ([1, 2, 7, 7], {"kernel_shape": [3, 3], "strides": [2, 2],
                                                     "pads": [1, 1, 1, 1], "ceil_mode": 1}),
                                     ([1, 1, 8, 8], {"kernel_shape": [3, 3], "strides": [2, 2],
                                                     "ceil_mode": 1})]):
        cid = f"AveragePool-cip{cip}-{i}"
        one(cid, "AveragePool", {"x": uni(R(cid), sx, -4, 4)},
            attrs=dict(attrs, count_include_pad=cip), kind="sum")
for op in ("GlobalAveragePool", "GlobalMaxPool"):
    for i, sx in enumerate(([2, 3, 5, 7], [1, 8, 1, 1], [3, 4, 6, 6])):
        cid = f"{op}-{i}"
        one(cid, op, {"x": uni(R(cid), sx, -4, 4)},
            kind="exact" if op == "GlobalMaxPool" else "sum", sym=(0,) if i == 2 else ())

# ------------------------------------------------------------------------------------------
# More dtypes: int8, uint8 and float16 through data movement; float16 through compute
# ------------------------------------------------------------------------------------------

_dt_rng = R("dtypes")
for dt in (np.int8, np.uint8, np.float16):
    tag = np.dtype(dt).name
    if dt == np.float16:
        def mk(s):
            return uni(_dt_rng, s, -4, 4, np.float16)
    else:
        def mk(s, dt=dt):
            return ints(_dt_rng, s, 0 if dt == np.uint8 else -100, 100, dt)
    one(f"Transpose-{tag}", "Transpose", {"x": mk([2, 3, 4])}, attrs={"perm": [2, 0, 1]},
        kind="exact")
    one(f"Reshape-{tag}", "Reshape", {"x": mk([2, 6])}, {"shape": i64(3, -1)}, kind="exact")
    one(f"Concat-{tag}", "Concat", {"a": mk([2, 3]), "b": mk([2, 2])}, attrs={"axis": 1},
        kind="exact")
    one(f"Gather-{tag}", "Gather", {"x": mk([5, 3])}, {"idx": i64(4, -1, 0)},
        attrs={"axis": 0}, kind="exact")
    one(f"Slice-{tag}", "Slice", {"x": mk([4, 6])},
        {"starts": i64(-1), "ends": i64(INT64_MIN), "axes": i64(1), "steps": i64(-2)},
        kind="exact")
    one(f"Expand-{tag}", "Expand", {"x": mk([3, 1])}, {"shape": i64(2, 3, 4)}, kind="exact")
    one(f"Unsqueeze-{tag}", "Unsqueeze", {"x": mk([3, 4])}, {"axes": i64(-1)}, kind="exact")
    one(f"Where-{tag}", "Where", {"c": _dt_rng.random([3, 4]) < 0.5, "a": mk([3, 4]),
                                  "b": mk([4])}, kind="exact")
    one(f"Split-{tag}", "Split", {"x": mk([4, 6])}, {"split": i64(2, 4)}, attrs={"axis": 1},
        nout=2, kind="exact", opset=13)
    one(f"Identity-{tag}", "Identity", {"x": mk([5])}, kind="exact")
for op, attrs, inits, kind in (
        ("Softmax", {"axis": -1}, {}, "sum"), ("LogSoftmax", {"axis": 1}, {}, "sum"),
        ("ReduceMean", {"keepdims": 0}, {"axes": i64(-1)}, "sum"),
        ("ReduceMax", {"keepdims": 1}, {"axes": i64(1)}, "exact"),
        ("LayerNormalization", {"axis": -1}, {"scale": uni(_dt_rng, [16], 0.5, 1.5, np.float16),
                                              "bias": uni(_dt_rng, [16], -1, 1, np.float16)},
         "sum"),
        ("Erf", {}, {}, "ew"), ("Log", {}, {}, "ew"), ("Reciprocal", {}, {}, "ew"),
        ("Where", {}, {}, "exact")):
    cid = f"{op}-f16"
    x = uni(R(cid), [3, 16], 0.1 if op in ("Log", "Reciprocal") else -4, 4, np.float16)
    feeds = {"c": R(cid).random([3, 16]) < 0.5, "a": x, "b": -x} if op == "Where" else {"x": x}
    one(cid, op, feeds, inits, attrs=attrs, kind=kind, opset=18)
cid = "Conv-f16"
one(cid, "Conv", {"x": uni(R(cid), [1, 3, 8, 8], dtype=np.float16)},
    {"w": uni(R(cid), [4, 3, 3, 3], -0.3, 0.3, np.float16),
     "b": uni(R(cid), [4], dtype=np.float16)},
    attrs={"pads": [1, 1, 1, 1]}, kind="sum")
cid = "MaxPool-f16"
one(cid, "MaxPool", {"x": uni(R(cid), [1, 2, 8, 8], dtype=np.float16)},
    attrs={"kernel_shape": [2, 2], "strides": [2, 2]}, kind="exact")
cid = "Gemm-f16"
one(cid, "Gemm", {"a": uni(R(cid), [3, 8], dtype=np.float16),
                  "b": uni(R(cid), [5, 8], dtype=np.float16)}, attrs={"transB": 1}, kind="sum")

# ------------------------------------------------------------------------------------------
# Larger shapes (the CPU backend splits these across its threads)
# ------------------------------------------------------------------------------------------

cid = "Large-Add-broadcast"
one(cid, "Add", {"a": uni(R(cid), [256, 513]), "b": uni(R(cid), [513])}, sym=(0,))
cid = "Large-Softmax"
one(cid, "Softmax", {"x": uni(R(cid), [64, 1000], -8, 8)}, attrs={"axis": -1}, kind="sum")
cid = "Large-MatMul"
one(cid, "MatMul", {"a": uni(R(cid), [128, 256])}, {"b": uni(R(cid), [256, 192])},
    kind="sum", sym=(0,))
cid = "Large-ReduceSum-axis0"
one(cid, "ReduceSum", {"x": uni(R(cid), [300, 257])}, {"axes": i64(0)},
    attrs={"keepdims": 0}, kind="sum")
cid = "Large-Transpose"
one(cid, "Transpose", {"x": uni(R(cid), [64, 65, 33])}, attrs={"perm": [2, 0, 1]},
    kind="exact")
cid = "Large-Conv"
one(cid, "Conv", {"x": uni(R(cid), [2, 16, 32, 32])},
    {"w": om.weight(R(cid), [32, 16, 3, 3], 144), "b": uni(R(cid), [32])},
    attrs={"pads": [1, 1, 1, 1]}, kind="sum", sym=(0,))
cid = "Large-MaxPool"
one(cid, "MaxPool", {"x": uni(R(cid), [2, 16, 32, 32])},
    attrs={"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, kind="exact")
cid = "Large-LayerNormalization"
one(cid, "LayerNormalization", {"x": uni(R(cid), [64, 768], -3, 3)},
    {"scale": uni(R(cid), [768], 0.5, 1.5), "bias": uni(R(cid), [768])},
    attrs={"axis": -1}, opset=17, kind="sum", sym=(0,))
cid = "Large-Gather-embedding"
one(cid, "Gather", {"table": uni(R(cid), [1000, 64]),
                    "ids": ints(R(cid), [8, 128], -1000, 999)}, attrs={"axis": 0},
    kind="exact")

# ------------------------------------------------------------------------------------------
# The shape sub-graph at three batch sizes, and decomposed patterns
# ------------------------------------------------------------------------------------------


def shape_chain_nodes():
    return [helper.make_node("Shape", ["x"], ["s"], name="shape"),
            helper.make_node("Gather", ["s", "zero"], ["n"], name="gather_batch", axis=0),
            helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"], name="unsqueeze"),
            helper.make_node("Concat", ["n1", "rest"], ["target"], name="concat", axis=0),
            helper.make_node("Reshape", ["x", "target"], ["r"], name="reshape"),
            helper.make_node("Mul", ["r", "two"], ["y"], name="scale")]


for batch in (1, 3, 8):
    cid = f"ShapeChain-batch{batch}"
    model_case(cid, shape_chain_nodes(), {"x": uni(R(cid), [batch, 4, 6])}, ["y"],
               {"zero": np.array(0, np.int64), "axes0": i64(0), "rest": i64(24),
                "two": np.float32(2.0)}, opset=13 + 5 * (batch % 3), sym=(0,),
               fused=(None, {"gather", "concat", "unsqueeze", "cast"}))


# fused: (the fused rtx op, the rtx ops of its pieces that must not run)
for opset in (13, 17, 18):
    cid = f"LayerNorm-decomposed-op{opset}"
    decomposed(cid, opset, lambda n, o=opset: n.layer_norm_decomposed("x", 16, "ln", 1e-5, o,
                                                                     out="y"),
               {"x": uni(R(cid), [2, 5, 16], -3, 3)}, ["y"], "sum",
               ("layer_norm", {"reduce_mean", "sub", "pow", "sqrt", "div"}))
for form in ("erf", "tanh"):
    for opset in (13, 18):
        cid = f"Gelu-decomposed-{form}-op{opset}"

        def gelu(n, form=form):
            y = n.gelu_erf("x") if form == "erf" else n.gelu_tanh("x")
            n.op("Identity", [y], outs=["y"], name="out")
        decomposed(cid, opset, gelu, {"x": uni(R(cid), [3, 7, 16], -6, 6)}, ["y"], "ew",
                   ("gelu", {"erf", "tanh", "pow", "div", "mul", "add"}))


for variant in ("plain", "mask", "mask-broadcast", "causal-const", "mul-scale"):
    for opset in (13, 18):
        cid = f"Attention-decomposed-{variant}-op{opset}"
        r = R(cid)
        B, H, S, Dh = 2, 3, 6, 8
        feeds = {k: uni(r, [B, H, S, Dh], -2, 2) for k in "qkv"}

        def build(n, variant=variant, S=S, B=B):
            if variant == "plain":
                n.attention_decomposed()
            elif variant == "mul-scale":
                n.attention_decomposed(scale_mul=True)
            elif variant == "causal-const":
                tri = np.triu(np.full((S, S), -1e9, np.float32), 1)
                n.attention_decomposed(n.init("causal", tri))
            else:
                n.attention_decomposed("mask")
        if variant == "mask":
            keep = r.random([B, 1, S, S]) < 0.8
            keep[..., 0] = True
            feeds["mask"] = np.where(keep, 0.0, -1e4).astype(np.float32)
        elif variant == "mask-broadcast":
            feeds["mask"] = np.where(np.arange(S) < S - 2, 0.0, -np.inf).astype(
                np.float32).reshape(1, 1, 1, S)
        decomposed(cid, opset, build, feeds, ["y"], "sum",
                   ("attention", {"softmax", "matmul", "transpose", "div", "mul"}))


# ------------------------------------------------------------------------------------------
# Compositions: Clip, Min / Max / Sum / Mean, LeakyRelu, HardSigmoid, HardSwish, Pad, Tile
# ------------------------------------------------------------------------------------------

for i, (lo, hi) in enumerate([(-0.5, 0.5), (None, 1.0), (-1.0, None), (None, None)]):
    cid = f"Clip-{i}"
    r = R(cid)
    inits = {}
    ins = ["x", "", ""]
    if lo is not None:
        inits["lo"] = np.array(lo, np.float32)
        ins[1] = "lo"
    if hi is not None:
        inits["hi"] = np.array(hi, np.float32)
        ins[2] = "hi"
    while ins and ins[-1] == "":
        ins.pop()
    one(cid, "Clip", {"x": qnt(r, [3, 5])}, inits, ins=ins, sym=(0,))
for op in ("Max", "Min", "Sum", "Mean"):
    for i, shapes in enumerate([([3, 4],), ([3, 4], [3, 4]), ([2, 3, 4], [4], [3, 1]),
                                ([5], [])]):
        cid = f"{op}-{i}"
        r = R(cid)
        feeds = {f"x{k}": qnt(r, sh) for k, sh in enumerate(shapes)}
        one(cid, op, feeds, sym=(0,) if i == 1 else ())
    if op in ("Max", "Min"):  # Sum and Mean are float-only in ONNX
        cid = f"{op}-int64"
        r = R(cid)
        one(cid, op, {"a": ints(r, [3, 4]), "b": ints(r, [4])}, kind="exact")
for i, alpha in enumerate([None, 0.2]):
    cid = f"LeakyRelu-{i}"
    r = R(cid)
    one(cid, "LeakyRelu", {"x": uni(r, [4, 6], -3, 3)},
        attrs={} if alpha is None else {"alpha": alpha})
for i, attrs in enumerate([{}, {"alpha": 0.5, "beta": 0.25}]):
    cid = f"HardSigmoid-{i}"
    r = R(cid)
    one(cid, "HardSigmoid", {"x": uni(r, [4, 6], -6, 6)}, attrs=attrs)
cid = "HardSwish-0"
one(cid, "HardSwish", {"x": uni(R(cid), [2, 3, 8], -6, 6)}, opset=17)
for i, (shape, pads, value, axes, opset) in enumerate([
        ([2, 3], [1, 2, 0, 1], None, None, 13),
        ([2, 3, 4], [0, 0, 1, 0, 1, 2], 1.5, None, 17),
        ([3, 5], [0, -1, 1, -2], None, None, 17),      # negative pads cut
        ([2, 3, 4], [2, 1], -1.0, [-1], 18),           # axes as an input (18)
        ([1, 2, 4, 4], [0, 0, 1, 1, 0, 0, 1, 1], None, None, 21)]):
    cid = f"Pad-{i}"
    r = R(cid)
    inits = {"pads": np.array(pads, np.int64)}
    ins = ["x", "pads"]
    if value is not None or axes is not None:
        inits["value"] = np.array(value if value is not None else 0, np.float32)
        ins.append("value")
    if axes is not None:
        inits["axes"] = np.array(axes, np.int64)
        ins.append("axes")
    one(cid, "Pad", {"x": uni(r, shape)}, inits, ins=ins, opset=opset)
for i, (shape, reps) in enumerate([([2, 3], [2, 1]), ([3], [4]), ([2, 1, 3], [1, 3, 2]),
                                   ([2, 2], [1, 1])]):
    cid = f"Tile-{i}"
    r = R(cid)
    one(cid, "Tile", {"x": uni(r, shape)}, {"reps": np.array(reps, np.int64)}, kind="exact")
cid = "Tile-int64-sym"
one(cid, "Tile", {"x": ints(R(cid), [3, 2])}, {"reps": np.array([2, 2], np.int64)},
    kind="exact", sym=(0,))
# IsNaN (NaN, infinities, zeros); GatherElements of constants (an exporter's index buffers)
cid = "IsNaN-0"
one(cid, "IsNaN", {"x": np.array([[np.nan, 1.0, -np.inf], [0.0, np.nan, np.inf]], np.float32)},
    kind="exact")
for i, (dshape, ishape, axis) in enumerate([([3, 4], [2, 4], 0), ([3, 4], [3, 2], 1),
                                             ([2, 3, 4], [2, 3, 2], -1)]):
    cid = f"GatherElements-{i}"
    r = R(cid)
    ax = axis % len(dshape)
    idx = r.integers(-dshape[ax], dshape[ax], size=ishape).astype(np.int64)
    one(cid, "GatherElements", {"x": uni(r, [2])},
        {"data": uni(r, dshape), "idx": idx}, ins=["data", "idx"], attrs={"axis": axis},
        kind="exact", what="constants only: the graph input is unused")


# Attention and RMSNormalization (opset 23: torch.onnx.export writes them for
# scaled_dot_product_attention and torch.nn.RMSNorm at opset_version=23)
ATTN = [  # (q, k, v shapes, attrs, mask (shape, "bool"/"float") or None, past length)
    ([2, 3, 6, 8], [2, 3, 6, 8], [2, 3, 6, 8], {}, None, 0),
    ([2, 3, 6, 8], [2, 3, 6, 8], [2, 3, 6, 8], {"is_causal": 1}, None, 0),
    ([1, 2, 3, 8], [1, 2, 5, 8], [1, 2, 5, 6], {"is_causal": 1, "scale": 0.25}, None, 0),
    ([2, 3, 6, 8], [2, 3, 6, 8], [2, 3, 6, 8], {}, ([2, 1, 6, 6], "bool"), 0),
    ([2, 3, 6, 8], [2, 3, 6, 8], [2, 3, 6, 8], {}, ([6, 6], "float"), 0),
    ([2, 5, 32], [2, 5, 16], [2, 5, 16], {"q_num_heads": 4, "kv_num_heads": 2}, None, 0),
    ([2, 5, 32], [2, 7, 16], [2, 7, 24], {"q_num_heads": 4, "kv_num_heads": 2, "is_causal": 1},
     ([2, 1, 5, 7], "bool"), 0),
    ([1, 4, 5, 8], [1, 2, 5, 8], [1, 2, 5, 8], {"is_causal": 1}, None, 0),
    ([1, 2, 3, 8], [1, 2, 3, 8], [1, 2, 3, 8], {"is_causal": 1}, None, 4),
    ([2, 4, 1, 8], [2, 2, 1, 8], [2, 2, 1, 8], {"is_causal": 1}, ([2, 1, 1, 6], "float"), 5),
    ([1, 2, 3, 8], [1, 2, 3, 8], [1, 2, 3, 8], {}, ([1, 1, 3, 7], "bool"), 4),
]
for i, (qs, ks, vs, attrs, mask, past) in enumerate(ATTN):
    cid = f"Attention-op23-{i}"
    r = R(cid)
    feeds = {"q": uni(r, qs, -2, 2), "k": uni(r, ks, -2, 2), "v": uni(r, vs, -2, 2)}
    ins = ["q", "k", "v"]
    if mask:
        mshape, kind = mask
        keep = r.random(mshape) < 0.75
        keep[..., 0] = True  # no row without a key (onnxruntime gives NaN there, rtx zeros)
        feeds["mask"] = keep if kind == "bool" else np.where(keep, 0.0, -1e4).astype(np.float32)
        ins.append("mask")
    if past:
        four = len(ks) == 4
        hk = ks[1] if four else attrs["kv_num_heads"]
        dk = ks[3] if four else ks[2] // hk
        dv = vs[3] if four else vs[2] // hk
        feeds["past_k"] = uni(r, [qs[0], hk, past, dk], -2, 2)
        feeds["past_v"] = uni(r, [qs[0], hk, past, dv], -2, 2)
        ins += ([""] if len(ins) == 3 else []) + ["past_k", "past_v"]  # no mask: ''
    one(cid, "Attention", feeds, attrs=attrs, ins=ins, opset=23, nout=3 if past else 1,
        kind="sum")

for i, (shape, axis, eps, sshape) in enumerate([([2, 5, 16], -1, 1e-5, [16]),
                                                 ([2, 3, 4, 6], -2, 1e-3, [4, 6]),
                                                 ([3, 4, 6], 1, 1e-6, [1, 6]),
                                                 ([2, 7, 32], -1, None, [32])]):
    cid = f"RMSNormalization-{i}"
    r = R(cid)
    attrs = {"axis": axis} if eps is None else {"axis": axis, "epsilon": eps}
    one(cid, "RMSNormalization", {"x": uni(r, shape, -3, 3)},
        {"scale": uni(r, sshape, 0.5, 1.5)}, attrs=attrs, opset=23, kind="sum", sym=(0,))


# GatherND and CumSum of constants (exporters' masks and position ids built from shapes)
for i, (dshape, idx, bd) in enumerate([([3, 4], [[0, 1], [2, 3]], 0), ([3, 4, 2], [[1], [0]], 0),
                                       ([2, 3, 4], [[[1], [0]], [[2], [2]]], 1)]):
    cid = f"GatherND-{i}"
    r = R(cid)
    one(cid, "GatherND", {"x": uni(r, [2])},
        {"data": uni(r, dshape), "idx": np.array(idx, np.int64)}, ins=["data", "idx"],
        attrs={"batch_dims": bd}, kind="exact", opset=17)
for i, (shape, axis, attrs, dt) in enumerate([([5], 0, {}, np.int64), ([3, 4], 1, {}, np.float32),
                                               ([3, 4], 0, {"exclusive": 1}, np.int64),
                                               ([2, 5], -1, {"reverse": 1}, np.float32),
                                               ([2, 5], 1, {"reverse": 1, "exclusive": 1},
                                                np.int32)]):
    cid = f"CumSum-{i}"
    r = R(cid)
    data = ints(r, shape, -5, 5, dt) if dt != np.float32 else qnt(r, shape)
    one(cid, "CumSum", {"x": uni(r, [2])}, {"data": data, "axis": np.array(axis, np.int64)},
        ins=["data", "axis"], attrs=attrs, kind="exact")


# ------------------------------------------------------------------------------------------
# The tests
# ------------------------------------------------------------------------------------------

# the batch fixture, the test that the batch ran clean, a test per case
batch, test_the_batch_ran_every_case, test_op_against_onnxruntime = \
    om.batch_tests("ops", CASES)


def test_case_ids_are_unique():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


FUSED = [c for c in CASES if c.fused]


@pytest.mark.parametrize("c", FUSED, ids=str)
def test_pattern_is_fused(c, batch):
    """rtxrun --json's `ops` (the rtx ops the graph runs): a decomposed layer norm, GELU or
    attention runs as the one fused op, none of its pieces left; the shape sub-graph is
    folded (only the reshape and the scale run)."""
    res, _ = batch
    bad = om.rtx_failure_text(res, c.id)
    assert bad is None, f"{c.describe()}: {bad}"
    ops = res[c.id].get("ops")
    assert ops is not None, f"{c.id}: no 'ops' in rtxrun --json: {res[c.id]}"
    want, pieces = c.fused
    if want:
        assert ops.get(want) == 1, f"{c.describe()}: {want} not fused: ops {ops}"
    left = sorted(set(ops) & pieces)
    assert not left, f"{c.describe()}: pieces {left} still run (ops {ops})"
