#!/usr/bin/env python3
"""
test_ops_torch.py - every op of docs/ops.md run by rtxrun on the GPU and compared with
PyTorch on the same GPU (issue 4, `make test-gpu`), or, to debug the cases and the batch mode
without a GPU, run on the CPU backend and compared with the NumPy reference of
tests/interop/rtxgraph.py.

    python3 tests/gpu/test_ops_torch.py                  # --device cuda --reference torch
    python3 tests/gpu/test_ops_torch.py --device cpu --reference numpy
    options: --build DIR (default $RTX_BUILD or ./build), -k SUBSTRING (only matching cases),
             --list, --keep DIR (write the batch there and keep it), --repeat N (default 2)

For every op, each dtype the op allows and 2-3 shapes (odd sizes, broadcasting both ways,
size-1 dims), a one-node graph and its inputs are made here (NumPy, fixed seeds), written as
case directories, and run by ONE `rtxrun --batch-dir` process (the device is initialised
once); --repeat 2 makes the second run reuse the first run's buffers and, on CUDA, capture
and replay the graph. Then the same computation in PyTorch (torch ops of the same semantics)
or in the NumPy reference, and a comparison:
  * floats: |got - ref| <= rtol * |ref| + atol, rtol by the output dtype (f32 1e-4 with TF32
    and reduced-precision reductions off, f16 1e-2, bf16 2e-2), atol = rtol * frac *
    max(1, max|ref|) with frac 0.01 for elementwise ops, 0.1 for sums of products and
    normalizations, 0.5 for attention (both sides may round P to f16/bf16 in fused kernels);
    NaN must match NaN and infinities must match exactly;
  * data movement, max/min, casts, comparisons, integers and bool: exact.
One line per failure, then "N passed, M failed"; exit status 1 when a case failed.

Inputs: f16 data is fed as <f2; bf16 data is rounded to bf16 here, fed as f32 and cast to
bf16 inside the graph (rtxrun writes a bf16 output as exact f32), so both sides see the same
bf16 values.

Where PyTorch's semantics differ from docs/ops.md, the torch side follows docs/ops.md:
  * integer div truncates and x / 0 is 0 (torch: rounding_mode="trunc", undefined for 0);
  * integer pow is computed in double and truncated (torch refuses negative exponents);
  * neg of u8 wraps (computed in int16, modulo 256);
  * float -> integer cast truncates, saturates and maps NaN to 0 (torch: undefined out of
    range); integer -> f16/bf16 goes through f32, as the kernels' (float)i;
  * attention: a query row with every key masked gives zeros (torch: NaN); causal with a mask
    is one combined mask (torch takes one or the other); leading dims flattened to [B, 1];
  * conv2d's asymmetric pads are applied with F.pad first (the pool cases use symmetric pads,
    which torch takes directly);
  * gemm is alpha * (a @ b) + beta * c computed in f32 and rounded once (docs/ops.md's
    rounding), not torch.addmm on f16 data.

The graph files are encoded here (a few lines of protobuf wire format for rtx.v1.Graph), not
with the generated graph_pb2: that code pins the protobuf runtime to the version of the build
machine's grpcio-tools, and the GPU machine's protobuf (from its onnx) need not match. With
--reference numpy the encoding is checked against graph_pb2: each graph must parse and
re-serialize to the same bytes.
"""

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
# the case generators, shared with tests/interop/test_ops.py (NumPy only, as here)
sys.path.insert(0, str(REPO / "tests" / "interop"))
sys.path.insert(0, str(REPO / "tests"))
from opgen import (FLOATS, INT_RANGE, INTS, NP_DT, argmax_gen, attn_gen,  # noqa: E402
                   cmp_gen, concat_gen, data, ints, ln_gen, nrm, paged_gen, rope_gen, uni,
                   where_gen)
import skips  # noqa: E402  (the skip rule: RTX_ALLOW_SKIP)

DTYPES = FLOATS + INTS + ("bool",)
DT_ENUM = {"f32": 1, "f16": 2, "bf16": 3, "i8": 4, "i32": 5, "i64": 6, "u8": 7, "bool": 8}
RTOL = {"f32": 1e-4, "f16": 1e-2, "bf16": 2e-2}

# ------------------------------------------------------------------------------------------
# rtx.v1.Graph in protobuf wire format (proto/rtx/v1/graph.proto)
# ------------------------------------------------------------------------------------------

def _varint(n):
    n &= (1 << 64) - 1  # int64: two's complement, 10 bytes when negative
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key(field, wire):
    return _varint(field << 3 | wire)


def _ld(field, payload):
    return _key(field, 2) + _varint(len(payload)) + payload


def _str(field, s):
    return _ld(field, s.encode()) if s else b""


def _uint(field, v):
    return _key(field, 0) + _varint(v) if v else b""


def _packed_ints(field, vals):
    return _ld(field, b"".join(_varint(int(v)) for v in vals)) if len(vals) else b""


def bf16_round(x):
    """float32 array -> float32 array of the nearest bf16 values (round to nearest even)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    with np.errstate(over="ignore"):
        r = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    r = np.where(nan, (u >> np.uint32(16)) | np.uint32(0x40), r).astype(np.uint32)
    return (r << np.uint32(16)).view(np.float32).reshape(np.shape(x))


def tensor_pb(name, a, dt):
    a = np.asarray(a)
    if dt == "bf16":
        bits = (np.ascontiguousarray(bf16_round(a.astype(np.float32))).view(np.uint32)
                >> np.uint32(16)).astype("<u2")
        data = bits.tobytes()
    elif dt == "bool":
        data = a.astype(bool).astype("u1").tobytes()
    else:
        data = np.ascontiguousarray(a.astype(np.dtype(NP_DT[dt]).newbyteorder("<"))).tobytes()
    return (_str(1, name) + _uint(2, DT_ENUM[dt]) + _packed_ints(3, a.shape) +
            (_ld(4, data) if data else b""))


def attr_pb(name, v):
    """An attribute: int (bool), float, str, list of ints, list of floats, or (array, dtype)."""
    out = _str(1, name)
    if isinstance(v, tuple):
        return out + _ld(7, tensor_pb(name, v[0], v[1]))
    if isinstance(v, (bool, int, np.integer)):
        return out + _key(2, 0) + _varint(int(v))  # a oneof member is written even when 0
    if isinstance(v, float):
        return out + _key(3, 1) + struct.pack("<d", v)
    if isinstance(v, str):
        return out + _ld(4, v.encode())
    if all(isinstance(e, (bool, int, np.integer)) for e in v):
        return out + _ld(5, _packed_ints(1, v))
    vals = [float(e) for e in v]
    return out + _ld(6, _ld(1, struct.pack(f"<{len(vals)}d", *vals)) if vals else b"")


class Graph:
    """A graph under construction: inputs with dtype and shape, nodes, named outputs."""

    def __init__(self, name):
        self.name, self.inputs, self.nodes, self.outputs = name, [], [], []

    def input(self, name, dt, shape):
        self.inputs.append(_str(1, name) + _uint(2, DT_ENUM[dt]) + _packed_ints(3, shape) +
                           _uint(4, 1))
        return name

    def node(self, op, inputs, output, name, attrs=None):
        body = _str(1, name) + _str(2, op)
        for i in inputs:  # "" for an omitted optional input is written too
            body += _ld(3, (i or "").encode())
        body += _ld(4, output.encode())
        for k, v in (attrs or {}).items():
            body += _ld(5, attr_pb(k, v))
        self.nodes.append(body)
        return output

    def output(self, name):
        self.outputs.append(_str(1, name))

    def bytes(self):
        return (_str(1, self.name) + b"".join(_ld(2, i) for i in self.inputs) +
                b"".join(_ld(3, o) for o in self.outputs) +
                b"".join(_ld(4, n) for n in self.nodes) + _uint(6, 1))


# ------------------------------------------------------------------------------------------
# Cases
# ------------------------------------------------------------------------------------------

ELEMENTWISE = ("add", "sub", "mul", "div", "pow", "neg", "abs", "relu", "sqrt", "rsqrt", "exp",
               "log", "tanh", "erf", "sigmoid", "silu", "gelu", "where")
EXACT_OPS = ("neg", "abs", "relu", "cast", "where", "equal", "less", "greater", "transpose",
             "reshape", "expand", "concat", "slice", "gather", "reduce_max", "reduce_min",
             "argmax", "max_pool2d", "constant")
INPUT_NAMES = {"where": ["cond", "x", "y"], "matmul": ["a", "b"], "gemm": ["a", "b", "c"],
               "gather": ["data", "indices"], "layer_norm": ["x", "scale", "bias"],
               "rms_norm": ["x", "scale"], "attention": ["q", "k", "v", "mask"],
               "conv2d": ["x", "w", "b"], "rope": ["x", "positions", "inv_freq"],
               "paged_attention": ["q", "k", "v", "k_cache", "v_cache", "slot_mapping",
                                   "block_tables", "query_start", "context_lens"]}
for _o in ("add", "sub", "mul", "div", "pow", "equal", "less", "greater"):
    INPUT_NAMES[_o] = ["a", "b"]


class Case:
    """One op on one dtype and shape: gen(rng) gives the op's input arrays (None for an
    omitted optional input); float32 arrays take the case's float dtype, except those whose
    index is in fixed (rope's inv_freq is f32 whatever x is)."""

    def __init__(self, op, dt, gen, attrs=None, tag="", fixed=()):
        self.op, self.dt, self.gen, self.attrs = op, dt, gen, dict(attrs or {})
        self.fixed = tuple(fixed)
        self.id = f"{op}-{dt}" + (f"-{tag}" if tag else "")

    def frac(self):
        if self.op in ELEMENTWISE or self.op in ("cast", "rope"):
            return 0.01
        return 0.5 if self.op in ("attention", "paged_attention") else 0.1


CASES = []


def case(op, dt, gen, attrs=None, tag="", fixed=()):
    CASES.append(Case(op, dt, gen, attrs, tag, fixed))


def sh(s):
    return "x".join(map(str, s)) if s else "scalar"


# elementwise binary: same shape (odd), a row broadcast, both ways, a scalar side
BIN_SHAPES = [([7, 13], [7, 13]), ([2, 3, 5], [5]), ([4, 1, 6], [1, 5, 1]), ([33, 257], [257]),
              ([], [3, 2])]
INT_BIN = {  # (a range, b range): results in range; divisors include 0 (docs: x / 0 = 0)
    ("add", "i8"): ((-60, 60), (-60, 60)), ("sub", "i8"): ((-60, 60), (-60, 60)),
    ("mul", "i8"): ((-11, 11), (-11, 11)), ("div", "i8"): ((-127, 127), (-5, 5)),
    ("pow", "i8"): ((-3, 3), (0, 4)),
    ("add", "u8"): ((0, 127), (0, 127)), ("sub", "u8"): ((30, 60), (0, 30)),
    ("mul", "u8"): ((0, 15), (0, 15)), ("div", "u8"): ((0, 255), (0, 7)),
    ("pow", "u8"): ((0, 5), (0, 3)),
    ("add", "i32"): ((-2**30, 2**30 - 1), (-2**30, 2**30 - 1)),
    ("sub", "i32"): ((-2**30, 2**30 - 1), (-2**30, 2**30 - 1)),
    ("mul", "i32"): ((-40000, 40000), (-40000, 40000)),
    ("div", "i32"): ((-10**9, 10**9), (-9, 9)), ("pow", "i32"): ((-3, 3), (0, 10)),
    ("add", "i64"): ((-2**62, 2**62 - 1), (-2**62, 2**62 - 1)),
    ("sub", "i64"): ((-2**62, 2**62 - 1), (-2**62, 2**62 - 1)),
    ("mul", "i64"): ((-2**31, 2**31), (-2**31, 2**31)),
    ("div", "i64"): ((-10**15, 10**15), (-1000, 1000)), ("pow", "i64"): ((-9, 9), (0, 9)),
}


def bin_gen(op, dt, sa, sb):
    def gen(rng):
        if dt in FLOATS:
            if op == "div":
                sign = np.where(rng.random(sb) < 0.5, -1, 1).astype(np.float32)
                return [uni(rng, sa), uni(rng, sb, 0.25, 3.0) * sign]
            if op == "pow":
                return [uni(rng, sa, 0.1, 3.0), uni(rng, sb, -2.0, 2.0)]
            return [uni(rng, sa), uni(rng, sb)]
        ra, rb = INT_BIN[(op, dt)]
        return [ints(rng, sa, dt, *ra), ints(rng, sb, dt, *rb)]
    return gen


for _i, _op in enumerate(("add", "sub", "mul", "div", "pow")):
    for _j, _dt in enumerate(DTYPES[:-1]):
        for _k in range(3 if _dt == "f32" else 2):
            _sa, _sb = BIN_SHAPES[(_i + _j + 2 * _k) % len(BIN_SHAPES)]
            case(_op, _dt, bin_gen(_op, _dt, _sa, _sb), tag=f"{sh(_sa)}by{sh(_sb)}")

UNARY_DOMAIN = {"neg": (-5, 5), "abs": (-5, 5), "relu": (-5, 5), "sqrt": (0, 50),
                "rsqrt": (0.05, 50), "exp": (-15, 10), "log": (0.01, 100), "tanh": (-5, 5),
                "erf": (-4, 4), "sigmoid": (-20, 20), "silu": (-10, 10), "gelu": (-6, 6)}
UNARY_SHAPES = [[5, 7], [2, 3, 33], [1031], [1, 3, 1, 4]]
for _i, (_op, (_lo, _hi)) in enumerate(UNARY_DOMAIN.items()):
    for _j, _dt in enumerate(("f32", "f32", "f16", "bf16")):
        _s = UNARY_SHAPES[(_i + _j) % len(UNARY_SHAPES)]
        _at = [{}] if _op != "gelu" else [{"approximate": "none"}, {"approximate": "tanh"}]
        for _a in _at:
            case(_op, _dt, data(_dt, _s, _lo, _hi), _a,
                 tag=f"{_a.get('approximate', '') + '-' if _a else ''}{_j}-{sh(_s)}")
for _op in ("neg", "abs", "relu"):
    for _dt in ("i8", "i32", "i64", "u8"):
        if _op == "relu" and _dt == "u8":
            continue
        _lo, _hi = INT_RANGE[_dt]  # no MIN: -MIN overflows
        case(_op, _dt, (lambda dt, lo: lambda r: [ints(r, [3, 17], dt, lo, INT_RANGE[dt][1])])
             (_dt, _lo + (_dt != "u8")), tag="3x17")
case("exp", "f32", lambda r: [np.array([-np.inf, np.inf, 100.0, -110.0, 0.0, np.nan],
                                       np.float32)], tag="special")
case("sqrt", "f32", lambda r: [np.array([-1.0, np.inf, 0.0, 4.0, np.nan, 1e30], np.float32)],
     tag="special")

# cast: every pair of dtypes, with NaN, infinities, ties and out-of-range values
FLOAT_VALS = [0.0, -0.0, 0.5, -0.5, 0.99, -0.99, 1.5, -1.5, 2.5, 100.7, -100.7, 127.4, 127.6,
              128.2, -128.2, -129.9, 255.3, 255.9, 256.1, 300.0, -300.0, 1e5, -1e5, 3e9, -3e9,
              1e19, -1e19, 1e30, np.nan, np.inf, -np.inf, 65504.0, 65520.0, 70000.0, 1e-8,
              6e-5, 3.14159, 1.00390625, 1.01171875, 2049.0, 16777217.0]


def cast_gen(src, dst):
    def gen(rng):
        if src in FLOATS:
            a = np.concatenate([np.array(FLOAT_VALS, np.float32), uni(rng, [24], -300, 300)])
            if src == "f16":
                with np.errstate(over="ignore"):
                    a = a.astype(np.float16).astype(np.float32)
            return [a.reshape(5, 13)]
        if src == "bool":
            return [np.asarray(rng.random([3, 5]) < 0.5)]
        lo, hi = INT_RANGE[src]
        if dst in INTS:  # values both can hold
            lo, hi = max(lo, INT_RANGE[dst][0]), min(hi, INT_RANGE[dst][1])
            special = [v for v in (lo, hi, 0, 1, -1) if lo <= v <= hi]
            return [np.concatenate([np.array(special, NP_DT[src]), ints(rng, [20], src, lo, hi)])]
        special = [v for v in (lo, hi, 0, 1, -1, 2049, 65504, 65520, 70000, 16777217,
                               2**40 + 3, 2**53 + 1, -(2**31)) if lo <= v <= hi]
        return [np.concatenate([np.array(special, NP_DT[src]),
                                ints(rng, [20], src, max(lo, -10**6), min(hi, 10**6))])]
    return gen


for _src in DTYPES:
    for _dst in DTYPES:
        if _src != _dst:
            case("cast", _src, cast_gen(_src, _dst), {"to": _dst}, tag=f"to-{_dst}")


WHERE_SHAPES = [([3, 4], [3, 4], [3, 4]), ([2, 1, 5], [4, 1], []), ([6, 1], [1, 7], [6, 7]),
                ([37, 1, 65], [1, 9, 65], [65])]
for _k, _dt in enumerate(DTYPES):
    for _j in range(2):
        _s = WHERE_SHAPES[(_k + _j) % len(WHERE_SHAPES)]
        case("where", _dt, where_gen(_dt, *_s), tag=f"{_j}-{sh(_s[0])}")


for _i, _op in enumerate(("equal", "less", "greater")):
    for _k, _dt in enumerate(DTYPES):
        for _j in range(2):
            _sa, _sb = BIN_SHAPES[(_i + _k + 2 * _j) % len(BIN_SHAPES)]
            case(_op, _dt, cmp_gen(_dt, _sa, _sb), tag=f"{sh(_sa)}by{sh(_sb)}")
    case(_op, "f32", cmp_gen("f32", [4, 6], [6], nan=True), tag="nan")


def mm(dt, sa, sb, tag, **at):
    case("matmul", dt, lambda r: [nrm(r, sa), nrm(r, sb)], at, tag=tag)


mm("f32", [17, 33], [33, 19], "odd")
mm("f32", [2, 3, 4, 5], [5, 6], "batch-2d")
mm("f32", [2, 1, 4, 5], [3, 5, 2], "bcast")
mm("f32", [3, 7, 5], [3, 4, 7], "ta-tb", trans_a=1, trans_b=1)
mm("f32", [7, 5], [7, 3], "ta", trans_a=1)
mm("f32", [2, 5, 7], [3, 7], "tb", trans_b=1)
mm("f32", [6], [2, 6, 3], "vec-a")
mm("f32", [3, 4, 6], [6], "vec-b")
mm("f32", [8], [8], "dot")
mm("f32", [64, 300], [300, 50], "k300")
mm("f16", [4, 9, 16], [16, 5], "batch")
mm("f16", [33, 21], [5, 21], "tb", trans_b=1)
mm("f16", [2, 3, 65, 64], [1, 3, 64, 31], "bcast")
mm("bf16", [2, 3, 8, 12], [2, 1, 12, 6], "bcast")
mm("bf16", [40, 64], [24, 64], "tb", trans_b=1)
mm("bf16", [129, 70], [129, 33], "ta", trans_a=1)


def gemm(dt, sa, sb, sc, tag, **at):
    case("gemm", dt, lambda r: [nrm(r, sa), nrm(r, sb)] + ([None] if sc is None else
                                                          [nrm(r, sc)]), at, tag=tag)


gemm("f32", [5, 7], [7, 3], [3], "bias-row")
gemm("f32", [7, 5], [7, 4], [5, 1], "ta-bias-col", trans_a=1)
gemm("f32", [6, 9], [4, 9], [6, 4], "tb-alpha-beta", trans_b=1, alpha=0.5, beta=2.0)
gemm("f32", [9, 11], [11, 13], None, "no-c", alpha=-1.5)
gemm("f16", [8, 16], [16, 12], [12], "bias")
gemm("f16", [33, 17], [9, 33], [], "ta-tb-scalar", trans_a=1, trans_b=1, alpha=2.0)
gemm("bf16", [5, 32], [32, 6], [1, 6], "bias", alpha=2.0)
gemm("bf16", [65, 40], [40, 3], [65, 3], "full", beta=0.5)

for _k, (_dt, _s, _perm) in enumerate([
        ("f32", [2, 3, 4], None), ("f32", [2, 5, 3, 4], [0, 2, 1, 3]),
        ("i64", [3, 1, 4], [2, 0, 1]), ("bool", [4, 5], [1, 0]), ("f16", [3, 4, 5], [1, 2, 0]),
        ("bf16", [2, 1, 3, 5], [3, 1, 0, 2]),
        ("u8", [2, 3, 1, 2, 2, 3], [5, 3, 1, 0, 4, 2]), ("i8", [33, 65], None),
        ("i32", [3, 130, 7], [2, 0, 1])]):
    case("transpose", _dt, data(_dt, _s), {} if _perm is None else {"perm": _perm},
         tag=f"{_k}-{sh(_s)}")

for _k, (_dt, _s, _shape) in enumerate([
        ("f32", [2, 3, 4], [0, -1]), ("f32", [2, 3, 4], [4, -1, 2]), ("i32", [], [1, 1]),
        ("bf16", [6, 4], [2, 0, -1]), ("bool", [3, 2, 2], [0, 0, 2]), ("f16", [5, 1, 7], [35]),
        ("i64", [7, 3], [3, 7]), ("u8", [4, 5], [20]), ("i8", [2, 9], [3, 3, 2])]):
    case("reshape", _dt, data(_dt, _s), {"shape": _shape}, tag=f"{_k}-{sh(_s)}")

for _k, (_dt, _s, _shape) in enumerate([
        ("f32", [3, 1], [2, 3, 4]), ("f32", [1, 4], [3, 1]), ("f32", [], [2, 3]),
        ("i8", [2, 1, 3], [1, 5, 1]), ("bool", [4, 1], [4, 6]), ("f16", [1], [3, 2]),
        ("bf16", [2, 3], [2, 2, 1]), ("i64", [5, 1], [5, 7]), ("u8", [1, 3], [2, 3]),
        ("i32", [1, 33], [17, 33])]):
    case("expand", _dt, data(_dt, _s), {"shape": _shape}, tag=f"{_k}-{sh(_s)}")


for _k, (_dt, _shapes, _ax) in enumerate([
        ("f32", [[2, 3], [4, 3]], 0), ("f32", [[2, 3, 1], [2, 3, 5], [2, 3, 2]], -1),
        ("i64", [[2, 1, 3], [2, 4, 3]], 1), ("bool", [[1], [5]], 0),
        ("f16", [[2, 2], [2, 1], [2, 7]], 1), ("bf16", [[1, 4], [3, 4]], -2),
        ("f32", [[2, 3], [2, 0]], 1), ("i32", [[3, 5], [3, 5]], 0), ("u8", [[2, 7], [2, 9]], 1),
        ("i8", [[1, 2, 3], [1, 2, 3]], 2)]):
    case("concat", _dt, concat_gen(_dt, _shapes), {"axis": _ax}, tag=f"{_k}-ax{_ax}")

for _k, (_dt, _s, _at) in enumerate([
        ("f32", [10], dict(starts=[2], ends=[8])),
        ("f32", [10], dict(starts=[-1], ends=[-100], steps=[-1])),
        ("f32", [11], dict(starts=[9], ends=[0], steps=[-3])),
        ("f32", [4, 9], dict(starts=[1], ends=[1000], axes=[1])),
        ("f32", [5, 6, 7], dict(starts=[4, 1], ends=[-6, 100], axes=[0, 2], steps=[-2, 2])),
        ("f32", [6, 5], dict(starts=[3], ends=[2], axes=[0])),  # empty
        ("i32", [3, 8], dict(starts=[7], ends=[-9], axes=[1], steps=[-2])),
        ("bool", [9], dict(starts=[1], ends=[9], steps=[4])),
        ("f16", [4, 4, 4], dict(starts=[-2, 0], ends=[4, 3], axes=[2, 1])),
        ("bf16", [7, 3], dict(starts=[6], ends=[-8], steps=[-1])),
        ("u8", [2, 12], dict(starts=[-100], ends=[100], axes=[-1], steps=[5])),
        ("i64", [5, 4], dict(starts=[1, 3], ends=[4, 0], steps=[2, -1])),
        ("i8", [6], dict(starts=[0], ends=[5], steps=[2]))]):
    case("slice", _dt, data(_dt, _s), _at, tag=f"{_k}-{sh(_s)}")


def gather_gen(dt, ds, ishape, idt, n):
    return lambda rng: [data(dt, ds)(rng)[0],
                        np.asarray(rng.integers(-n, n, size=ishape).astype(NP_DT[idt]))]


for _k, (_dt, _ds, _is, _idt, _ax) in enumerate([
        ("f32", [5, 3], [2, 3], "i64", 0), ("f32", [4, 6, 2], [5], "i32", 1),
        ("f32", [3, 7], [2, 2], "i64", -1), ("f32", [6, 4], [], "i64", 0),
        ("f32", [1000, 64], [8, 33], "i64", 0), ("i64", [9], [3, 3], "i32", 0),
        ("bool", [4, 3], [6], "i64", 0), ("f16", [8, 5], [4], "i32", 0),
        ("bf16", [2, 9, 3], [2, 2], "i64", 1), ("i32", [7, 2], [3], "i64", 0),
        ("u8", [3, 5], [4], "i32", 1), ("i8", [6], [2, 2], "i64", 0)]):
    case("gather", _dt, gather_gen(_dt, _ds, _is, _idt, _ds[_ax]), {"axis": _ax},
         tag=f"{_k}-ax{_ax}-{sh(_is)}")

RED_SHAPES = [([3, 4, 5], {}), ([3, 4, 5], {"axes": [1], "keepdims": 1}),
              ([2, 3, 4, 5], {"axes": [-1, 0]}), ([7, 1, 9], {"axes": [], "keepdims": 1}),
              ([1027], {"axes": [0]}), ([33, 65], {"axes": [1]})]
for _i, _op in enumerate(("reduce_sum", "reduce_mean", "reduce_max", "reduce_min")):
    for _j in range(3):
        _s, _at = RED_SHAPES[(_i + 2 * _j) % len(RED_SHAPES)]
        case(_op, "f32", data("f32", _s), _at, tag=f"{_j}-{sh(_s)}")
    case(_op, "f16", data("f16", [6, 33]), {"axes": [1]}, tag="6x33")
    case(_op, "bf16", data("bf16", [4, 5, 6]), {"axes": [0, 2], "keepdims": 1}, tag="4x5x6")
    if _op == "reduce_mean":
        continue
    for _dt in ("i8", "i32", "i64", "u8"):
        _lo, _hi = INT_RANGE[_dt]
        if _op == "reduce_sum" and _dt in ("i32", "i64"):
            _lo, _hi = -10**6, 10**6
        case(_op, _dt, (lambda dt, lo, hi: lambda r: [ints(r, [3, 40], dt, lo, hi)])
             (_dt, _lo, _hi), {"axes": [1]}, tag="3x40")
    if _op in ("reduce_max", "reduce_min"):
        def _nan_gen(r):
            x = uni(r, [3, 5])
            x[1, 2] = np.nan
            return [x]
        case(_op, "f32", _nan_gen, {"axes": [1]}, tag="nan")


for _k, (_dt, _s, _at) in enumerate([
        ("f32", [4, 7], {}), ("f32", [5, 3, 2], {"axis": 0, "keepdims": 1}), ("f32", [1001], {}),
        ("f16", [6, 5], {"axis": -2}), ("bf16", [2, 3, 11], {"keepdims": 1}),
        ("i32", [4, 6], {"axis": 1}), ("u8", [5, 5], {"axis": 0}), ("i8", [2, 9], {}),
        ("i64", [3, 2, 4], {"axis": 1})]):
    case("argmax", _dt, argmax_gen(_dt, _s), _at, tag=f"{_k}-{sh(_s)}")

for _op in ("softmax", "log_softmax"):
    for _k, (_dt, _s, _at, _sc) in enumerate([
            ("f32", [4, 10], {}, 3.0), ("f32", [5, 3, 4], {"axis": 0}, 3.0),
            ("f32", [3, 1000], {}, 30.0), ("f16", [3, 40], {"axis": -1}, 4.0),
            ("f16", [2, 7, 5], {"axis": 1}, 4.0), ("bf16", [2, 3, 30], {}, 4.0),
            ("bf16", [65, 129], {}, 8.0)]):
        case(_op, _dt, data(_dt, _s, -_sc, _sc), _at, tag=f"{_k}-{sh(_s)}")


for _k, (_dt, _xs, _ps, _at, _s, _b) in enumerate([
        ("f32", [4, 64], [64], {}, True, True),
        ("f32", [2, 3, 5, 6], [5, 6], {"axis": -2}, True, True),
        ("f32", [3, 33], [33], {}, False, False),
        ("f32", [2, 9], [9], {"axis": 1, "epsilon": 1e-3}, False, True),
        ("f16", [6, 48], [48], {}, True, True), ("f16", [5, 1027], [1027], {}, True, False),
        ("bf16", [3, 2, 40], [40], {}, True, True), ("bf16", [7, 513], [513], {}, True, True)]):
    case("layer_norm", _dt, ln_gen(_xs, _ps, _s, _b), _at, tag=f"{_k}-{sh(_xs)}")

for _k, (_dt, _xs, _ps, _at, _s) in enumerate([
        ("f32", [4, 64], [64], {}, True), ("f32", [3, 17], [17], {}, False),
        ("f32", [2, 4, 6], [4, 6], {"axis": -2, "epsilon": 1e-2}, True),
        ("f16", [4, 32], [32], {}, True), ("f16", [3, 1025], [1025], {}, True),
        ("bf16", [2, 50], [50], {}, True)]):
    case("rms_norm", _dt, (lambda xs, ps, s: lambda r: [nrm(r, xs, 2.0),
                                                       nrm(r, ps, 0.5, 1.0) if s else None])
         (_xs, _ps, _s), _at, tag=f"{_k}-{sh(_xs)}")


for _k, (_dt, _g, _at) in enumerate([
        ("f32", ([2, 3], 5, 5, 8, 8, None), {}),
        ("f32", ([2, 2], 6, 6, 4, 4, None), {"causal": 1}),
        ("f32", ([3], 3, 7, 8, 5, None), {"causal": 1}),  # Lq < Lk: top-left aligned
        ("f32", ([1, 2], 7, 4, 4, 6, None), {"causal": 1}),  # Lq > Lk
        ("f32", ([2, 2], 5, 6, 8, 8, ("bool", [5, 6])), {}),
        ("f32", ([2], 4, 5, 8, 8, ("bool-row", [2, 4, 5])), {}),
        ("f32", ([2, 2], 4, 6, 8, 8, ("float", [1, 1, 4, 6])), {}),
        ("f32", ([2, 2], 6, 6, 8, 8, ("bool", [2, 1, 6, 6])), {"causal": 1}),
        ("f32", ([], 5, 9, 16, 3, None), {"scale": 0.3}),
        ("f32", ([2, 4], 65, 65, 32, 32, None), {"causal": 1}),
        ("f16", ([2, 2], 8, 8, 16, 16, None), {"causal": 1}),
        ("f16", ([2], 6, 7, 8, 8, ("float", [6, 7])), {}),
        ("f16", ([2, 4], 77, 77, 64, 64, None), {}),  # the fused kernel's shapes
        ("f16", ([1, 2], 33, 130, 128, 128, ("bool", [1, 1, 33, 130])), {"causal": 1}),
        ("bf16", ([1, 3], 9, 9, 16, 16, ("bool", [9, 9])), {"causal": 1}),
        ("bf16", ([2, 2], 130, 130, 128, 128, None), {"causal": 1}),
        ("bf16", ([1, 2], 40, 17, 64, 64, ("float", [1, 1, 40, 17])), {})]):
    case("attention", _dt, attn_gen(*_g), _at,
         tag=f"{_k}-q{_g[1]}k{_g[2]}d{_g[3]}" + ("-causal" if _at.get("causal") else "") +
         (f"-{_g[5][0]}mask" if _g[5] else ""))

case("constant", "f32", lambda r: [], {"value": (np.arange(6, dtype=np.float32).reshape(2, 3)
                                                 / 4, "f32")}, tag="2x3")
case("constant", "i64", lambda r: [], {"value": (np.array([5, -7, 2**40]), "i64")}, tag="3")
case("constant", "bf16", lambda r: [], {"value": (bf16_round(np.array([1.5, -2.25, 3e5],
                                                                     np.float32)), "bf16")},
     tag="3")


for _dt in ("f32", "f16", "bf16"):
    for _il in (0, 1):
        case("rope", _dt, rope_gen(37, 5, 64, 32, "i32"), {"interleaved": _il},
             tag=f"full-il{_il}", fixed=(2,))
        case("rope", _dt, rope_gen(19, 3, 80, 16, "i64", max_pos=100000), {"interleaved": _il},
             tag=f"partial-il{_il}", fixed=(2,))

# paged_attention writes its caches, which must be graph inputs: no bf16 cases here (bf16
# data reaches the op through a cast node); tests/gpu/gpu-generation.c covers bf16
for _k, (_dt, _seqs, _geo, _pad) in enumerate([
        ("f32", [(40, 1), (33, 17), (20, 20), (0, 0)], (8, 2, 64, 16), (1, 2)),
        ("f16", [(40, 1), (33, 17), (20, 20), (0, 0)], (8, 2, 64, 16), (1, 2)),
        ("f32", [(300, 300)], (4, 1, 128, 16), (0, 0)),
        ("f16", [(3000, 1), (4100, 3), (7, 1)], (16, 4, 128, 32), (0, 0)),  # key partitions
        ("f32", [(70, 2)], (16, 1, 512, 16), (0, 0)),  # shared memory past 48 KiB
        ("f16", [(20, 4), (9, 9)], (4, 4, 36, 8), (0, 1))]):  # rows of 72 bytes
    case("paged_attention", _dt, paged_gen(_seqs, *_geo, *_pad),
         tag=f"{_k}-S{len(_seqs)}-H{_geo[0]}kv{_geo[1]}d{_geo[2]}bs{_geo[3]}")


def conv_gen(xs, ws, bias=True):
    return lambda r: [nrm(r, xs), nrm(r, ws, 0.5)] + ([nrm(r, [ws[0]])] if bias else [None])


for _k, (_dt, _xs, _ws, _b, _at) in enumerate([
        ("f32", [1, 3, 8, 8], [4, 3, 3, 3], True, {}),
        ("f32", [2, 3, 7, 9], [5, 3, 3, 3], True, {"pads": [1, 1, 1, 1]}),
        ("f32", [1, 2, 11, 10], [3, 2, 3, 2], True, {"strides": [2, 3], "pads": [1, 0, 1, 0]}),
        ("f32", [1, 4, 12, 12], [2, 4, 3, 3], True, {"dilations": [2, 3], "pads": [2, 2, 2, 2]}),
        ("f32", [2, 4, 6, 6], [6, 2, 3, 3], True, {"groups": 2, "pads": [1, 1, 1, 1]}),
        ("f32", [1, 6, 9, 9], [6, 1, 3, 3], True, {"groups": 6, "strides": [2, 2]}),
        ("f32", [1, 2, 5, 6], [3, 2, 2, 3], True, {"pads": [0, 1, 2, 0]}),
        ("f32", [3, 5, 4, 4], [7, 5, 1, 1], False, {}),
        ("f32", [2, 16, 33, 33], [32, 16, 3, 3], True, {"pads": [1, 1, 1, 1]}),
        ("f16", [1, 4, 8, 8], [4, 2, 3, 3], True, {"groups": 2, "pads": [1, 1, 1, 1]}),
        ("f16", [2, 8, 17, 15], [16, 8, 3, 3], True, {"strides": [2, 1], "pads": [1, 1, 1, 1]}),
        ("bf16", [2, 3, 9, 9], [4, 3, 3, 3], True, {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
        ("bf16", [1, 8, 20, 17], [8, 2, 3, 3], False, {"groups": 4, "dilations": [2, 1],
                                                        "pads": [1, 2, 0, 1]})]):
    case("conv2d", _dt, conv_gen(_xs, _ws, _b), _at, tag=f"{_k}-{sh(_xs)}w{sh(_ws)}")

POOLS = [  # symmetric pads, which PyTorch's pools take directly
    ("f32", [1, 2, 6, 6], {"kernel_shape": [2, 2]}),
    ("f32", [2, 3, 7, 9], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("f32", [1, 2, 7, 7], {"kernel_shape": [2, 2], "ceil_mode": 1}),
    ("f32", [1, 2, 8, 10], {"kernel_shape": [3, 3], "strides": [2, 3], "pads": [1, 1, 1, 1],
                            "ceil_mode": 1}),
    ("f32", [1, 2, 7, 9], {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1],
                           "ceil_mode": 1}),
    ("f32", [2, 8, 64, 63], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("f16", [1, 4, 8, 8], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                           "ceil_mode": 1}),
    ("bf16", [2, 2, 6, 7], {"kernel_shape": [2, 3], "strides": [1, 1]})]
for _k, (_dt, _xs, _at) in enumerate(POOLS):
    case("max_pool2d", _dt, data(_dt, _xs), _at, tag=f"{_k}-{sh(_xs)}")
    case("avg_pool2d", _dt, data(_dt, _xs), _at, tag=f"{_k}-{sh(_xs)}")
    if _at.get("pads"):
        case("avg_pool2d", _dt, data(_dt, _xs), dict(_at, count_include_pad=1),
             tag=f"{_k}-{sh(_xs)}-incl")
case("max_pool2d", "f32", data("f32", [1, 3, 9, 9]),
     {"kernel_shape": [3, 2], "dilations": [2, 2], "strides": [1, 1]}, tag="dilated")
case("max_pool2d", "f32", data("f32", [2, 3, 10, 11]),
     {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "dilations": [2, 1],
      "ceil_mode": 1}, tag="dilated-ceil")

_seen = {}
for _c in CASES:  # ids double as directory names: unique, no '/'
    _n = _seen.get(_c.id, 0)
    _seen[_c.id] = _n + 1
    if _n:
        _c.id = f"{_c.id}-{_n + 1}"

# ------------------------------------------------------------------------------------------
# Writing the batch
# ------------------------------------------------------------------------------------------

def materialize(c):
    """-> (graph bytes, feeds {name: array as fed}, op inputs {name: array in the op's dtype
    as float32/float16/int/bool NumPy arrays}). bf16 values are bf16-exact float32."""
    rng = np.random.default_rng(zlib.crc32(c.id.encode()))
    arrays = c.gen(rng)
    g = Graph(c.id)
    names = [f"x{i}" for i in range(len(arrays))] if c.op == "concat" else \
        INPUT_NAMES.get(c.op, ["x"])
    feeds, op_in, values = {}, [], []
    for i, (nm, a) in enumerate(zip(names, arrays)):
        if a is None:
            op_in.append(None)
            values.append(None)
            continue
        a = np.array(a, order="C")  # (np.ascontiguousarray would make a scalar 1-D)
        fixed = i in c.fixed
        if a.dtype == np.float32 and c.dt in FLOATS and not fixed:
            if c.dt == "f16":
                with np.errstate(over="ignore"):
                    a = a.astype(np.float16)
            elif c.dt == "bf16":
                a = bf16_round(a)
        dt = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16"}.get(a.dtype) or \
            next(k for k in INTS + ("bool",) if np.dtype(NP_DT[k]) == a.dtype)
        g.input(nm, dt, a.shape)
        feeds[nm] = a
        if a.dtype == np.float32 and c.dt == "bf16" and not fixed:
            op_in.append(g.node("cast", [nm], nm + "_bf16", f"to_bf16_{nm}", {"to": "bf16"}))
        else:
            op_in.append(nm)
        values.append(a)
    while op_in and op_in[-1] is None:
        op_in.pop()
    g.node(c.op, op_in, "out", "op", c.attrs)
    g.output("out")
    return g.bytes(), feeds, values


def write_batch(cases, root):
    """Writes root/<case>/graph.rtxg and inputs/<name>.npy; returns {id: (bytes, feeds,
    values)}."""
    made = {}
    for c in cases:
        gbytes, feeds, values = materialize(c)
        d = root / c.id
        (d / "inputs").mkdir(parents=True)
        (d / "graph.rtxg").write_bytes(gbytes)
        for nm, a in feeds.items():
            np.save(d / "inputs" / f"{nm}.npy", a, allow_pickle=False)
        made[c.id] = (gbytes, feeds, values)
    return made


def run_batch(rtxrun, root, device, repeat):
    """One rtxrun process over the batch in root; -> ({case id: JSON object}, stderr text,
    exit status or a message when it hung, the command)."""
    cmd = [str(rtxrun), "--batch-dir", str(root), "--device", device, "--json", "--repeat",
           str(repeat)]
    timeout = float(os.environ.get("RTX_TEST_TIMEOUT", "300"))
    try:
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode("utf-8", "replace") if isinstance(e.stdout, bytes) else \
            (e.stdout or "")
        err = e.stderr.decode("utf-8", "replace") if isinstance(e.stderr, bytes) else \
            (e.stderr or "")
        stdout, stderr, rc = out, err, f"killed after {timeout:g} s (hung)"
    else:
        stdout, stderr, rc = p.stdout, p.stderr, p.returncode
    results = {}
    for line in stdout.splitlines():
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except ValueError:
                continue  # a line cut short by a crash
            if "case" in obj:
                results[obj["case"]] = obj
    return results, stderr, rc, cmd


def run_all(rtxrun, root, cases, device, repeat, rounds=4):
    """Runs the batch; when cases failed in execution or got no result (a crash, a hang, a
    sticky CUDA error makes every later case fail), runs those again, without the first of
    them, in a fresh process: each case's own result. -> (results, [(rc, stderr, cmd)],
    notes)."""
    results, runs, notes = {}, [], []
    pending, sub = sorted(cases, key=lambda c: c.id), root  # rtxrun's order
    for n in range(rounds):
        res, stderr, rc, cmd = run_batch(rtxrun, sub, device, repeat)
        results.update(res)
        runs.append((rc, stderr, cmd))
        bad = [c for c in pending if c.id not in res or res[c.id].get("exit") == 1]
        if len(bad) < 2:
            break
        culprit = bad[0].id
        pending = bad[1:]
        sub = root / f".rerun{n + 1}"
        sub.mkdir()
        for c in pending:
            (sub / c.id).symlink_to(root / c.id, target_is_directory=True)
        notes.append(f"{len(pending)} cases that failed in execution or got no result after "
                     f"{culprit} (rtxrun exit {rc}) run again in a fresh process")
    return results, runs, notes


# ------------------------------------------------------------------------------------------
# References
# ------------------------------------------------------------------------------------------

def numpy_reference(build):
    """The NumPy interpreter of tests/interop/rtxgraph.py: -> fn(case, gbytes, feeds,
    values) returning (array, rtx dtype). Also checks the encoding against graph_pb2."""
    os.environ.setdefault("RTX_BUILD", str(build))
    sys.path.insert(0, str(REPO / "tests" / "interop"))
    import rtxgraph  # noqa: E402

    def ref(c, gbytes, feeds, values):
        g = rtxgraph.pb.Graph()
        g.ParseFromString(gbytes)
        again = g.SerializeToString()
        if again != gbytes:
            raise AssertionError(f"graph encoding differs from graph_pb2's ({len(gbytes)} vs "
                                 f"{len(again)} bytes)")
        v = rtxgraph.evaluate(g, feeds)["out"]
        return np.asarray(v.a), v.dt
    return ref


def torch_reference(device):
    """PyTorch on `device`: -> fn(case, gbytes, feeds, values) -> (array, rtx dtype)."""
    import torch
    import torch.nn.functional as F

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.set_float32_matmul_precision("highest")
    TDT = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
           "i8": torch.int8, "i32": torch.int32, "i64": torch.int64, "u8": torch.uint8,
           "bool": torch.bool}
    RTX = {v: k for k, v in TDT.items()}
    dev = torch.device(device)

    def norm_axis(ax, nd):
        return ax + nd if ax < 0 else ax

    def binary(op, a, b, dt):
        f = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
             "pow": torch.pow}
        if dt in FLOATS:
            return f[op](a, b)
        if op == "pow":  # docs/ops.md: in double (the host's pow), truncated. CUDA's double
            # pow may land an ulp below an integer (2.9999999999999996 for 3^1) and truncate to
            # the next one down, so the reference computes on the CPU.
            r = torch.trunc(torch.pow(a.double().cpu(), b.double().cpu()))
            return r.to(torch.int64).to(TDT[dt]).to(a.device)
        if op == "div":  # docs/ops.md: truncates toward zero, x / 0 = 0
            zero = b == 0
            q = torch.div(a, torch.where(zero, torch.ones_like(b), b), rounding_mode="trunc")
            return torch.where(zero, torch.zeros_like(q), q)
        return f[op](a, b)

    def unary(op, x, dt, at):
        if op == "neg":
            if dt == "u8":  # wraps
                return torch.remainder(-x.to(torch.int16), 256).to(torch.uint8)
            return torch.neg(x)
        if op == "abs":
            return x.clone() if dt == "u8" else torch.abs(x)
        if op == "relu":
            return torch.relu(x) if dt in FLOATS else torch.clamp(x, min=0)
        if op == "gelu":
            return F.gelu(x, approximate=at.get("approximate", "none"))
        f = {"sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "exp": torch.exp, "log": torch.log,
             "tanh": torch.tanh, "erf": torch.erf, "sigmoid": torch.sigmoid, "silu": F.silu}
        return f[op](x)

    def cast(x, src, to):
        if to == "bool":
            return x != 0
        if src == "bool":
            x, src = x.to(torch.uint8), "u8"
        if to in FLOATS:
            if src in INTS:
                x = x.to(torch.float32)  # C's (float)i, then the float conversion
            return x.to(TDT[to])
        if src in FLOATS:  # truncate, saturate, NaN -> 0
            xd = x.double()
            t = torch.trunc(torch.where(torch.isnan(xd), torch.zeros_like(xd), xd))
            lo, hi = INT_RANGE[to]
            below, above = t < lo, t >= float(hi) + 1.0
            r = torch.where(below | above, torch.zeros_like(t), t).to(torch.int64)
            r = torch.where(below, torch.full_like(r, lo), r)
            r = torch.where(above, torch.full_like(r, hi), r)
            return r.to(TDT[to])
        return x.to(torch.int64).to(TDT[to])

    def attention(q, k, v, mask, at):
        lead, lq, lk = tuple(q.shape[:-2]), q.shape[-2], k.shape[-2]
        full = lead + (lq, lk)
        allowed, add = None, None
        if mask is not None and mask.dtype == torch.bool:
            allowed = mask.expand(full)
        elif mask is not None:
            add = mask.expand(full)
        if at.get("causal", 0):
            tri = torch.ones(lq, lk, dtype=torch.bool, device=q.device).tril()
            allowed = tri.expand(full) if allowed is None else allowed & tri
        if add is not None and allowed is not None:
            add = add.masked_fill(~allowed, float("-inf"))
            allowed = None
        if add is not None:
            dead = torch.isneginf(add).all(dim=-1, keepdim=True)
            m = add
        elif allowed is not None:
            dead = ~allowed.any(dim=-1, keepdim=True)
            m = allowed
        else:
            dead, m = None, None
        b = int(np.prod(lead)) if lead else 1
        q4 = q.reshape(b, 1, lq, q.shape[-1])
        k4 = k.reshape(b, 1, lk, k.shape[-1])
        v4 = v.reshape(b, 1, lk, v.shape[-1])
        m4 = None if m is None else m.reshape(b, 1, lq, lk)
        out = F.scaled_dot_product_attention(q4, k4, v4, attn_mask=m4, scale=at.get("scale"))
        out = out.reshape(lead + (lq, v.shape[-1]))
        if dead is not None:  # docs/ops.md: a row with every key masked gives zeros
            out = out.masked_fill(dead, 0.0)
        return out

    def rope(x, pos, inv, at):
        # docs/ops.md: the angle pos * inv_freq in f32, the rotation in f32, one rounding
        half = inv.shape[0]
        th = pos.float()[:, None] * inv[None, :]
        cos, sin = torch.cos(th)[:, None, :], torch.sin(th)[:, None, :]
        xf = x.float()
        y = xf.clone()
        il = at.get("interleaved", 0)
        ia = slice(0, 2 * half, 2) if il else slice(0, half)
        ib = slice(1, 2 * half, 2) if il else slice(half, 2 * half)
        a, b = xf[..., ia], xf[..., ib]
        y[..., ia] = a * cos - b * sin
        y[..., ib] = b * cos + a * sin
        return y.to(x.dtype)

    def paged_attention(q, k, v, kc, vc, slots, tables, qs, ctx, at):
        # docs/ops.md: the writes (on copies of the caches), then per sequence a causal
        # attention of its rows (at positions L - n ..) over its keys read through the table
        nb, bs, hkv, d = kc.shape
        h = q.shape[1]
        kf = kc.float().reshape(nb * bs, hkv, d).clone()
        vf = vc.float().reshape(nb * bs, hkv, d).clone()
        sl = slots.long()
        w = sl >= 0
        kf[sl[w]] = k.float()[w]
        vf[sl[w]] = v.float()[w]
        out = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        qs_l, ctx_l = qs.tolist(), ctx.tolist()
        for s, L in enumerate(ctx_l):
            q0, n = qs_l[s], qs_l[s + 1] - qs_l[s]
            if n == 0:
                continue
            p = torch.arange(L, device=q.device)
            idx = tables[s].long()[p // bs] * bs + p % bs
            kk = kf[idx].repeat_interleave(h // hkv, dim=1).transpose(0, 1)[None]
            vv = vf[idx].repeat_interleave(h // hkv, dim=1).transpose(0, 1)[None]
            qq = q[q0:q0 + n].float().transpose(0, 1)[None]
            mask = p[None, :] <= (L - n + torch.arange(n, device=q.device))[:, None]
            o = F.scaled_dot_product_attention(qq, kk, vv, attn_mask=mask, scale=at.get("scale"))
            out[q0:q0 + n] = o[0].transpose(0, 1)
        return out.to(q.dtype)

    def slice_(x, at):
        starts, ends = at["starts"], at["ends"]
        axes = at.get("axes", list(range(len(starts))))
        steps = at.get("steps", [1] * len(starts))
        for s, e, ax, st in zip(starts, ends, axes, steps):
            ax = norm_axis(ax, x.dim())
            idx = list(range(*slice(s, e, st).indices(x.shape[ax])))
            x = torch.index_select(x, ax, torch.tensor(idx, dtype=torch.int64, device=x.device))
        return x

    def reduce(op, x, dt, at):
        axes = tuple(norm_axis(a, x.dim()) for a in (at.get("axes") or range(x.dim())))
        kd = bool(at.get("keepdims", 0))
        if op == "reduce_sum":
            if dt in FLOATS:
                return torch.sum(x, dim=axes, keepdim=kd)
            return torch.sum(x, dim=axes, keepdim=kd, dtype=torch.int64).to(TDT[dt])  # wraps
        if op == "reduce_mean":
            return torch.mean(x, dim=axes, keepdim=kd)
        return (torch.amax if op == "reduce_max" else torch.amin)(x, dim=axes, keepdim=kd)

    def pool(op, x, at):
        k = tuple(at["kernel_shape"])
        s = tuple(at.get("strides", k))
        top, left, bottom, right = at.get("pads", (0, 0, 0, 0))
        assert (top, left) == (bottom, right), "torch pools take symmetric pads only"
        cm = bool(at.get("ceil_mode", 0))
        if op == "max_pool2d":
            return F.max_pool2d(x, k, s, (top, left), tuple(at.get("dilations", (1, 1))),
                                ceil_mode=cm)
        return F.avg_pool2d(x, k, s, (top, left), ceil_mode=cm,
                            count_include_pad=bool(at.get("count_include_pad", 0)))

    def compute(c, ins):
        op, at, dt = c.op, c.attrs, c.dt
        if op in ("add", "sub", "mul", "div", "pow"):
            return binary(op, ins[0], ins[1], dt)
        if op in UNARY_DOMAIN:
            return unary(op, ins[0], dt, at)
        if op == "cast":
            return cast(ins[0], dt, at["to"])
        if op == "where":
            return torch.where(ins[0], ins[1], ins[2])
        if op in ("equal", "less", "greater"):
            a, b = ins
            if dt == "bool":
                a, b = a.to(torch.uint8), b.to(torch.uint8)
            return {"equal": torch.eq, "less": torch.lt, "greater": torch.gt}[op](a, b)
        if op == "matmul":
            a, b = ins
            if at.get("trans_a"):
                a = a.transpose(-1, -2)
            if at.get("trans_b"):
                b = b.transpose(-1, -2)
            return torch.matmul(a, b)
        if op == "gemm":
            a, b = ins[0].float(), ins[1].float()
            a = a.t() if at.get("trans_a") else a
            b = b.t() if at.get("trans_b") else b
            y = at.get("alpha", 1.0) * (a @ b)
            if len(ins) > 2 and ins[2] is not None:
                y = y + at.get("beta", 1.0) * ins[2].float()
            return y.to(TDT[dt])
        if op == "transpose":
            x = ins[0]
            perm = at.get("perm", list(range(x.dim()))[::-1])
            return x.permute(perm) if x.dim() else x.clone()
        if op == "reshape":
            x = ins[0]
            return x.reshape([x.shape[i] if s == 0 else s for i, s in enumerate(at["shape"])])
        if op == "expand":
            x = ins[0]
            return x.expand(torch.broadcast_shapes(tuple(x.shape), tuple(at["shape"])))
        if op == "concat":
            return torch.cat(ins, dim=at["axis"])
        if op == "slice":
            return slice_(ins[0], at)
        if op == "gather":
            d, idx = ins
            ax = norm_axis(at.get("axis", 0), d.dim())
            i = idx.to(torch.int64)
            i = torch.where(i < 0, i + d.shape[ax], i)
            out = torch.index_select(d, ax, i.reshape(-1))
            return out.reshape(tuple(d.shape[:ax]) + tuple(idx.shape) + tuple(d.shape[ax + 1:]))
        if op.startswith("reduce_"):
            return reduce(op, ins[0], dt, at)
        if op == "argmax":
            x = ins[0]
            return torch.argmax(x, dim=norm_axis(at.get("axis", -1), x.dim()),
                                keepdim=bool(at.get("keepdims", 0)))
        if op in ("softmax", "log_softmax"):
            f = F.softmax if op == "softmax" else F.log_softmax
            return f(ins[0], dim=at.get("axis", -1))
        if op in ("layer_norm", "rms_norm"):
            x = ins[0]
            shape = tuple(x.shape[norm_axis(at.get("axis", -1), x.dim()):])
            s = ins[1] if len(ins) > 1 else None
            if op == "rms_norm":
                return F.rms_norm(x, shape, weight=s, eps=at.get("epsilon", 1e-6))
            b = ins[2] if len(ins) > 2 else None
            return F.layer_norm(x, shape, weight=s, bias=b, eps=at.get("epsilon", 1e-5))
        if op == "attention":
            return attention(ins[0], ins[1], ins[2], ins[3] if len(ins) > 3 else None, at)
        if op == "rope":
            return rope(ins[0], ins[1], ins[2], at)
        if op == "paged_attention":
            return paged_attention(*ins, at)
        if op == "conv2d":
            top, left, bottom, right = at.get("pads", (0, 0, 0, 0))
            x = F.pad(ins[0], (left, right, top, bottom))
            return F.conv2d(x, ins[1], ins[2] if len(ins) > 2 else None,
                            stride=tuple(at.get("strides", (1, 1))),
                            dilation=tuple(at.get("dilations", (1, 1))),
                            groups=at.get("groups", 1))
        if op in ("max_pool2d", "avg_pool2d"):
            return pool(op, ins[0], at)
        if op == "constant":
            a, vdt = at["value"]
            return torch.from_numpy(np.array(a, dtype=NP_DT[vdt], order="C")).to(
                dev).to(TDT[vdt])
        raise ValueError(f"no PyTorch reference for op {op}")

    def ref(c, gbytes, feeds, values):
        ins = []
        for i, a in enumerate(values):
            if a is None:
                ins.append(None)
                continue
            t = torch.from_numpy(np.array(a, order="C")).to(dev)
            if c.dt == "bf16" and a.dtype == np.float32 and i not in c.fixed:
                t = t.to(torch.bfloat16)  # bf16-exact values: no rounding
            ins.append(t)
        while ins and ins[-1] is None:
            ins.pop()
        with torch.no_grad():
            out = compute(c, ins).contiguous()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        dt = RTX[out.dtype]
        arr = out.float().cpu().numpy() if dt == "bf16" else out.cpu().numpy()
        return arr, dt
    return ref


# ------------------------------------------------------------------------------------------
# Comparison
# ------------------------------------------------------------------------------------------

def compare(c, got, ref, dt):
    """None when got matches the reference (array, rtx dtype), else the reason."""
    want_np = np.dtype(np.float32) if dt == "bf16" else np.dtype(NP_DT[dt])
    if got.dtype != want_np:
        return f"npy dtype {got.dtype}, expected {want_np} ({dt})"
    if got.shape != ref.shape:
        return f"shape {list(got.shape)}, expected {list(ref.shape)}"
    if dt not in FLOATS or c.op in EXACT_OPS:
        g = got.astype(np.float64) if dt in FLOATS else got
        r = ref.astype(np.float64) if dt in FLOATS else ref
        bad = (g != r) & ~(np.isnan(g) & np.isnan(r)) if dt in FLOATS else g != r
        if not np.any(bad):
            return None
        i = tuple(int(v) for v in np.argwhere(bad)[0])
        return (f"{int(np.sum(bad))}/{bad.size} elements differ (exact); first at {i}: "
                f"got {got[i].item()!r} expected {ref[i].item()!r}")
    g, r = got.astype(np.float64), ref.astype(np.float64)
    gn, rn = np.isnan(g), np.isnan(r)
    inf = np.isinf(g) | np.isinf(r)
    fin = ~(gn | rn | inf)
    rtol = RTOL[dt]
    scale = max(1.0, float(np.max(np.abs(r[fin]))) if np.any(fin) else 1.0)
    atol = rtol * c.frac() * scale
    with np.errstate(all="ignore"):
        err = np.where(fin, np.abs(g - r), 0.0)
        lim = atol + rtol * np.abs(r)
    bad = (gn != rn) | (inf & ~gn & ~rn & (g != r)) | (fin & (err > lim))
    if not np.any(bad):
        return None
    score = np.where(bad, np.where(fin, err / lim, np.inf), -1.0)
    i = np.unravel_index(int(np.argmax(score)), r.shape) if r.ndim else ()
    return (f"{int(np.sum(bad))}/{bad.size} elements differ (rtol {rtol:g}, atol {atol:.3g});"
            f" worst at {tuple(int(v) for v in i)}: got {g[i].item()!r} expected "
            f"{r[i].item()!r}")


def describe(c, values):
    shapes = ", ".join("-" if a is None else f"{a.dtype}{list(a.shape)}" for a in values)
    return f"{c.op} {c.dt} ({shapes}) {c.attrs if c.op != 'constant' else ''}".rstrip()


# ------------------------------------------------------------------------------------------
# Main
# ------------------------------------------------------------------------------------------

def gpu_skip_allowed():
    """Whether a missing GPU may skip the run (exit 0): only where RTX_ALLOW_SKIP lists gpu
    (tests/skips.py: the machine is meant to have none) and there is no GPU device node
    (with one, the driver or PyTorch's CUDA is what fails)."""
    return skips.allowed("gpu") and not Path("/dev/nvidia0").exists()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", help="rtxrun's device: cuda, cuda:N or cpu")
    ap.add_argument("--reference", choices=("torch", "numpy"), default="torch")
    ap.add_argument("--build", default=os.environ.get("RTX_BUILD") or str(REPO / "build"))
    ap.add_argument("-k", dest="filter", default=None, help="only cases whose id contains this")
    ap.add_argument("--list", action="store_true", help="list the case ids and exit")
    ap.add_argument("--keep", default=None, help="write the batch into this (new) directory")
    ap.add_argument("--repeat", type=int, default=2, help="rtxrun --repeat (default 2)")
    args = ap.parse_args(argv)

    cases = [c for c in CASES if not args.filter or args.filter in c.id]
    if args.list:
        for c in cases:
            print(c.id)
        return 0
    build = Path(args.build).resolve()
    rtxrun = build / "bin" / "rtxrun"
    if not os.access(rtxrun, os.X_OK):
        print(f"test_ops_torch: {rtxrun} is missing: build it first (make all)", file=sys.stderr)
        return 2
    torch_device = None
    if args.reference == "torch":
        want = args.device if args.device.startswith("cuda") else "cpu"
        try:
            import torch
        except ImportError as e:
            if want != "cpu" and gpu_skip_allowed():
                print(f"test_ops_torch: skipped (no GPU, RTX_ALLOW_SKIP lists gpu; and no "
                      f"PyTorch: {e})")
                return 0
            print(f"test_ops_torch: PyTorch is needed for --reference torch: {e}",
                  file=sys.stderr)
            return 2
        if want != "cpu" and not torch.cuda.is_available():
            if gpu_skip_allowed():
                print("test_ops_torch: skipped (no CUDA device, RTX_ALLOW_SKIP lists gpu)")
                return 0
            print("test_ops_torch: FAIL: torch.cuda.is_available() is False (set "
                  "RTX_ALLOW_SKIP=gpu where this machine is meant to have no GPU)",
                  file=sys.stderr)
            return 1
        torch_device = want
        ref = torch_reference(want)
    else:
        ref = numpy_reference(build)

    t0 = time.monotonic()
    tmp = None
    if args.keep:
        root = Path(args.keep)
        root.mkdir(parents=True)
    else:
        tmp = tempfile.mkdtemp(prefix="rtx-ops-torch-")
        root = Path(tmp)
    try:
        made = write_batch(cases, root)
        t1 = time.monotonic()
        results, runs, notes = run_all(rtxrun, root, cases, args.device, args.repeat)
        t2 = time.monotonic()
        for note in notes:
            print(f"note: {note}", flush=True)
        passed, failed = 0, 0
        for c in cases:
            gbytes, feeds, values = made[c.id]
            what = f"{c.id}: {describe(c, values)}"
            res = results.get(c.id)
            try:
                if res is None:
                    raise AssertionError("no result from rtxrun (it stopped early?)")
                if res.get("exit") != 0:
                    raise AssertionError(f"rtxrun exit {res.get('exit')}: {res.get('error')}")
                (o,) = res["outputs"]
                got = np.load(o["file"], allow_pickle=False)
                want, dt = ref(c, gbytes, feeds, values)
                if o["dtype"] != dt:
                    raise AssertionError(f"output dtype {o['dtype']}, expected {dt}")
                why = compare(c, got, want, dt)
                if why:
                    raise AssertionError(why)
                passed += 1
            except Exception as e:  # noqa: BLE001 - every failure is one line, then go on
                failed += 1
                msg = str(e).replace("\n", " | ")
                if not isinstance(e, AssertionError):
                    msg = f"{type(e).__name__}: {msg}"
                print(f"FAIL {what}: {msg}", flush=True)
        t3 = time.monotonic()
        for rc, stderr, cmd in runs:  # a crash or hang is shown, with rtxrun's last words
            if rc not in (0, 1):
                tail = "\n".join(stderr.strip().splitlines()[-20:])
                print(f"FAIL rtxrun exit {rc}: {' '.join(cmd)}\n{tail}")
                failed += 1
        ref_name = f"PyTorch on {torch_device}" if torch_device else "the NumPy reference"
        print(f"test_ops_torch: rtxrun --device {args.device} ({len(cases)} cases, "
              f"{len(runs)} process{'es' if len(runs) > 1 else ''}: {t2 - t1:.1f} s) against "
              f"{ref_name} ({t3 - t2:.1f} s); writing {t1 - t0:.1f} s")
        print(f"{passed} passed, {failed} failed")
        if not passed + failed:
            print("FAIL no case ran (-k matched nothing?)")
        return 1 if failed or not passed + failed else 0
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
