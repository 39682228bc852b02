"""
rtxgraph - the Python side of the interop tests: build rtx.v1.Graph files with graph_pb2 (an
encoder independent of the C one), run them through rtxrun, and evaluate them with a small
NumPy interpreter of the rtx graph IR that follows docs/ops.md (the reference).

The interpreter keeps every value as (NumPy array, rtx dtype name). f32 is float32, f16 is
float16, bf16 is a float32 array holding bf16-exact values, integers and bool their NumPy
types. Float ops compute in float64 from the stored values and round once to the output dtype
(for bf16: float64 -> f32 -> bf16 round-to-nearest-even, the C kernels' path), so the
reference is at least as accurate as the f32 kernels and the tests' tolerances only have to
cover the kernels' error.
"""

import json
import math
import os
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]


def build_dir():
    """Absolute build directory: $RTX_BUILD (set by the Makefile) or <repo>/build."""
    return Path(os.environ.get("RTX_BUILD") or (REPO / "build")).resolve()


def py_dir():
    """Generated Python protocol code: $RTX_PY, or the build directory's py/."""
    return Path(os.environ.get("RTX_PY") or (build_dir() / "py")).resolve()


def _import_graph_pb2():
    py = py_dir()
    if str(py) not in sys.path:
        sys.path.insert(0, str(py))
    try:
        from rtx.v1 import graph_pb2  # noqa: E402
    except ImportError as e:  # pragma: no cover - environment problem
        raise ImportError(
            f"cannot import rtx.v1.graph_pb2 from {py} ({e}); "
            "run `make build/py/rtx/v1/graph_pb2.py` (or make test-py)") from e
    return graph_pb2


pb = _import_graph_pb2()

# ------------------------------------------------------------------------------------------
# dtypes
# ------------------------------------------------------------------------------------------

DTYPES = ["f32", "f16", "bf16", "i8", "i32", "i64", "u8", "bool"]
FLOATS = ("f32", "f16", "bf16")
INTS = ("i8", "i32", "i64", "u8")
DT_ENUM = {
    "f32": pb.DATA_TYPE_F32, "f16": pb.DATA_TYPE_F16, "bf16": pb.DATA_TYPE_BF16,
    "i8": pb.DATA_TYPE_I8, "i32": pb.DATA_TYPE_I32, "i64": pb.DATA_TYPE_I64,
    "u8": pb.DATA_TYPE_U8, "bool": pb.DATA_TYPE_BOOL,
}
ENUM_DT = {v: k for k, v in DT_ENUM.items()}
# NumPy type that holds a value of each dtype in the interpreter (bf16 lives in float32).
NP_STORAGE = {
    "f32": np.float32, "f16": np.float16, "bf16": np.float32, "i8": np.int8,
    "i32": np.int32, "i64": np.int64, "u8": np.uint8, "bool": np.bool_,
}
# Little-endian wire type of each dtype's elements (Tensor.data); bf16 handled apart.
WIRE = {"f32": "<f4", "f16": "<f2", "i8": "i1", "i32": "<i4", "i64": "<i8", "u8": "u1",
        "bool": "u1"}
INT_RANGE = {"i8": (-128, 127), "i32": (-2**31, 2**31 - 1), "i64": (-2**63, 2**63 - 1),
             "u8": (0, 255)}
# Unit roundoff of each float dtype (half an ulp at 1.0).
UNIT_ROUNDOFF = {"f32": 2.0**-24, "f16": 2.0**-11, "bf16": 2.0**-8}
U32 = 2.0**-24


def dtype_of_array(a):
    """rtx dtype name of a NumPy array fed through .npy (no bf16: npy has none)."""
    m = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16", np.dtype(np.int8): "i8",
         np.dtype(np.int32): "i32", np.dtype(np.int64): "i64", np.dtype(np.uint8): "u8",
         np.dtype(np.bool_): "bool"}
    try:
        return m[np.asarray(a).dtype]
    except KeyError:
        raise TypeError(f"no rtx dtype for numpy dtype {np.asarray(a).dtype}") from None


def bf16_bits(x):
    """float32 array -> uint16 bf16 bit patterns, round to nearest even (as runtime.h)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    with np.errstate(over="ignore"):
        r = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16))
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    r = np.where(nan, (u >> np.uint32(16)) | np.uint32(0x40), r)
    return r.astype(np.uint16)


def bf16_from_bits(b):
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def bf16_round(x):
    """Rounds to bf16 (returned as float32). float64 input goes through f32 first, as C."""
    x = np.asarray(x)
    return bf16_from_bits(bf16_bits(x.astype(np.float32))).reshape(x.shape)


def round_to(x64, dt):
    """float64 result -> stored value of float dtype dt (one rounding, as the kernels)."""
    with np.errstate(all="ignore"):
        if dt == "f32":
            return np.asarray(x64).astype(np.float32, copy=False)
        if dt == "f16":
            return np.asarray(x64).astype(np.float16)
        if dt == "bf16":
            return bf16_round(x64)
    raise ValueError(dt)


def tensor_bytes(a, dt):
    a = np.asarray(a)
    if dt == "bf16":
        return bf16_bits(a.astype(np.float32)).astype("<u2").tobytes()
    if dt == "bool":
        return a.astype(bool).astype("u1").tobytes()
    return np.ascontiguousarray(a.astype(WIRE[dt])).tobytes()


def tensor_from_proto(t):
    dt = ENUM_DT.get(t.dtype)
    if dt is None:
        raise GraphError(f"tensor '{t.name}': bad dtype {t.dtype}")
    shape = tuple(int(d) for d in t.dims)
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if dt == "bf16":
        bits = np.frombuffer(t.data, dtype="<u2")
        a = bf16_from_bits(bits)
    elif dt == "bool":
        a = np.frombuffer(t.data, dtype="u1").astype(bool)
    else:
        a = np.frombuffer(t.data, dtype=WIRE[dt]).astype(NP_STORAGE[dt])
    if a.size != n:
        raise GraphError(f"tensor '{t.name}': {len(t.data)} data bytes for {dt}{list(shape)}")
    return V(a.reshape(shape).copy(), dt)


def make_tensor(name, a, dt=None):
    a = np.asarray(a)
    dt = dt or dtype_of_array(a)
    return pb.Tensor(name=name, dtype=DT_ENUM[dt], dims=list(a.shape), data=tensor_bytes(a, dt))


# ------------------------------------------------------------------------------------------
# Graph building
# ------------------------------------------------------------------------------------------

class Attr:
    """An attribute value with an explicit type: Attr('i', 3), Attr('floats', [1.0]),
    Attr('t', (array, 'bf16')). Plain Python values get their type inferred instead."""

    def __init__(self, kind, value):
        self.kind, self.value = kind, value


def set_attr(a, name, v):
    a.name = name
    if not isinstance(v, Attr):
        if isinstance(v, (bool, int, np.integer)):
            v = Attr("i", int(v))
        elif isinstance(v, (float, np.floating)):
            v = Attr("f", float(v))
        elif isinstance(v, str):
            v = Attr("s", v)
        elif isinstance(v, np.ndarray):
            v = Attr("t", (v, None))
        elif isinstance(v, (list, tuple)):
            if all(isinstance(e, (bool, int, np.integer)) for e in v):
                v = Attr("ints", v)
            else:
                v = Attr("floats", v)
        else:
            raise TypeError(f"attribute {name}: cannot infer type of {v!r}")
    k, val = v.kind, v.value
    if k == "i":
        a.i = int(val)
    elif k == "f":
        a.f = float(val)
    elif k == "s":
        a.s = val
    elif k == "ints":
        a.ints.values.extend(int(e) for e in val)
        a.ints.SetInParent()
    elif k == "floats":
        a.floats.values.extend(float(e) for e in val)
        a.floats.SetInParent()
    elif k == "t":
        arr, dt = val
        a.t.CopyFrom(make_tensor(name, arr, dt))
    else:
        raise ValueError(k)
    return a


class GraphBuilder:
    """Builds an rtx.v1.Graph. Inputs declared with a shape (None: no shape), outputs by
    name, initializers from arrays, nodes with attributes as keyword arguments."""

    def __init__(self, name="test"):
        self.g = pb.Graph(name=name, ir_version=1)
        self._n = 0

    def input(self, name, dt, shape):
        vi = self.g.inputs.add()
        vi.name, vi.dtype = name, DT_ENUM[dt] if isinstance(dt, str) else dt
        if shape is not None:
            vi.dims.extend(int(d) for d in shape)
            vi.has_shape = True
        return name

    def output(self, name, dt=None, shape=None):
        vo = self.g.outputs.add()
        vo.name = name
        if dt is not None:
            vo.dtype = DT_ENUM[dt]
        if shape is not None:
            vo.dims.extend(shape)
            vo.has_shape = True
        return name

    def init(self, name, a, dt=None):
        self.g.initializers.append(make_tensor(name, a, dt))
        return name

    def node(self, op, inputs, outputs, name=None, **attrs):
        if isinstance(outputs, str):
            outputs = [outputs]
        self._n += 1
        n = self.g.nodes.add()
        n.name = name if name is not None else f"{op}_{self._n}"
        n.op = op
        n.inputs.extend("" if i is None else i for i in inputs)
        n.outputs.extend(outputs)
        for k, v in attrs.items():
            set_attr(n.attrs.add(), k, v)
        return outputs[0] if len(outputs) == 1 else outputs

    def bytes(self):
        return self.g.SerializeToString()

    def save(self, path):
        Path(path).write_bytes(self.bytes())
        return path


def load_graph(path):
    g = pb.Graph()
    g.ParseFromString(Path(path).read_bytes())
    return g


# ------------------------------------------------------------------------------------------
# Running rtxrun
# ------------------------------------------------------------------------------------------

SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                   "SUMMARY: AddressSanitizer", "SUMMARY: UndefinedBehaviorSanitizer",
                   "ThreadSanitizer")
# ASan builds are several times slower; a hang is reported as a failure, never waited out.
RUN_TIMEOUT_S = float(os.environ.get("RTX_TEST_TIMEOUT", "120"))


def rtxrun_path():
    return build_dir() / "bin" / "rtxrun"


class RunResult:
    def __init__(self, args, rc, stdout, stderr):
        self.args, self.rc, self.stdout, self.stderr = args, rc, stdout, stderr
        self.json = None
        self.outputs = {}

    def describe(self):
        return (f"rtxrun {' '.join(map(str, self.args))}\n  exit {self.rc}\n"
                f"  stdout: {self.stdout[-2000:]!r}\n  stderr: {self.stderr[-4000:]!r}")


def rtxrun_raw(args, timeout=None, env=None):
    """Runs rtxrun with these arguments. Fails (AssertionError) on a hang, a death by a
    signal or a sanitizer report - never acceptable, whatever the arguments."""
    cmd = [str(rtxrun_path())] + [str(a) for a in args]
    e = dict(os.environ)
    if env:
        e.update(env)
    try:
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True,
                           timeout=timeout or RUN_TIMEOUT_S, env=e)
    except subprocess.TimeoutExpired as ex:
        raise AssertionError(f"rtxrun hung (> {ex.timeout}s): {' '.join(cmd)}") from None
    r = RunResult(args, p.returncode, p.stdout.decode("utf-8", "replace"),
                  p.stderr.decode("utf-8", "replace"))
    assert r.rc >= 0, f"rtxrun killed by signal {-r.rc}\n{r.describe()}"
    assert r.rc < 128, f"rtxrun exit {r.rc} looks like a signal/abort\n{r.describe()}"
    for m in SANITIZER_MARKS:
        assert m not in r.stderr, f"sanitizer report ({m})\n{r.describe()}"
    return r


def write_inputs(feeds, d):
    """Saves each array as d/in_<name>.npy; returns ['--input', 'name=path', ...]."""
    args = []
    for i, (name, a) in enumerate(feeds.items()):
        p = Path(d) / f"in{i}.npy"
        np.save(p, np.asarray(a), allow_pickle=False)
        args += ["--input", f"{name}={p}"]
    return args


def run_graph(graph, feeds, tmp_path, extra=(), threads=2, expect_rc=0):
    """Writes graph (GraphBuilder, Graph message or bytes) and feeds into tmp_path, runs
    rtxrun --json --output-dir, checks the exit code and loads the outputs."""
    tmp_path = Path(tmp_path)
    if isinstance(graph, GraphBuilder):
        data = graph.bytes()
    elif isinstance(graph, (bytes, bytearray)):
        data = bytes(graph)
    else:
        data = graph.SerializeToString()
    gpath = tmp_path / "graph.rtxg"
    gpath.write_bytes(data)
    outdir = tmp_path / "out"
    outdir.mkdir(exist_ok=True)
    args = [gpath] + write_inputs(feeds, tmp_path) + ["--output-dir", outdir, "--json",
                                                      "--threads", str(threads)] + list(extra)
    r = rtxrun_raw(args)
    assert r.rc == expect_rc, f"expected exit {expect_rc}\n{r.describe()}"
    if r.rc != 0:
        return r
    try:
        r.json = json.loads(r.stdout)
    except ValueError as e:
        raise AssertionError(f"--json output is not one JSON object ({e})\n{r.describe()}")
    for o in r.json["outputs"]:
        f = o.get("file") or str(outdir / f"{o['name']}.npy")
        r.outputs[o["name"]] = np.load(f, allow_pickle=False)
    return r


# ------------------------------------------------------------------------------------------
# The NumPy reference interpreter
# ------------------------------------------------------------------------------------------

class GraphError(Exception):
    """The reference found the graph invalid (the test then expects rtxrun to agree)."""


class V:
    """A value: array `a` in its storage type and rtx dtype `dt`."""
    __slots__ = ("a", "dt")

    def __init__(self, a, dt):
        self.a, self.dt = a, dt

    def __repr__(self):
        return f"V({self.dt}{list(np.shape(self.a))})"


# Float ops compute in COMPUTE: float64, so the reference is at least as accurate as the f32
# kernels (a caller may set float32 to run the interpreter at the kernels' precision).
COMPUTE = np.float64


def f64(v):
    return np.asarray(v.a).astype(COMPUTE, copy=False)


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x) if np.size(x) else np.asarray(x, float)


def _norm_axis(ax, nd, what="axis"):
    if not -nd <= ax < max(nd, 1) or (nd == 0 and ax not in (0, -1)):
        raise GraphError(f"{what} {ax} out of range for rank {nd}")
    return ax + nd if ax < 0 else ax


def _float_in(ins, op):
    dts = {v.dt for v in ins if v is not None}
    if len(dts) != 1:
        raise GraphError(f"{op}: input dtypes differ: {sorted(dts)}")
    dt = dts.pop()
    if dt not in FLOATS:
        raise GraphError(f"{op}: needs a float dtype, got {dt}")
    return dt


def _same_dt(ins, op):
    dts = {v.dt for v in ins if v is not None}
    if len(dts) != 1:
        raise GraphError(f"{op}: input dtypes differ: {sorted(dts)}")
    return dts.pop()


def op_binary(op, ins, at):
    a, b = ins
    dt = _same_dt(ins, op)
    if dt == "bool":
        raise GraphError(f"{op}: bool not allowed")
    with np.errstate(all="ignore"):
        if dt in FLOATS:
            x, y = f64(a), f64(b)
            r = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
                 "pow": np.power}[op](x, y)
            return [V(round_to(r, dt), dt)]
        if op == "pow":  # in double, truncated
            r = np.trunc(np.power(f64(a), f64(b)))
            return [V(r.astype(np.int64).astype(NP_STORAGE[dt]), dt)]
        x, y = a.a.astype(np.int64), b.a.astype(np.int64)
        if op == "div":  # truncates toward zero; by zero gives 0; MIN / -1 wraps
            ys = np.where((y == 0) | (y == -1), 1, y)
            q = x // ys  # floor division, then round toward zero
            q = np.where(((x - q * ys) != 0) & ((x < 0) != (ys < 0)), q + 1, q)
            r = np.where(y == 0, 0, np.where(y == -1, -x, q))
        else:
            r = {"add": np.add, "sub": np.subtract, "mul": np.multiply}[op](x, y)
        return [V(r.astype(NP_STORAGE[dt]), dt)]  # wraps to the dtype


def _sigmoid(x):
    with np.errstate(all="ignore"):
        return np.where(x >= 0, 1.0 / (1.0 + np.exp(-x)), np.exp(x) / (1.0 + np.exp(x)))


UNARY_F = {
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "exp": np.exp,
    "log": np.log,
    "tanh": np.tanh,
    "erf": _erf,
    "sigmoid": _sigmoid,
    "silu": lambda x: x * _sigmoid(x),
}


def op_unary(op, ins, at):
    (x,) = ins
    dt = x.dt
    with np.errstate(all="ignore"):
        if op in ("neg", "abs", "relu"):
            if dt == "bool" or (op == "relu" and dt == "u8"):
                raise GraphError(f"{op}: dtype {dt} not allowed")
            if dt in FLOATS:
                f = {"neg": np.negative, "abs": np.abs, "relu": lambda v: np.maximum(v, 0.0)}
                return [V(round_to(f[op](f64(x)), dt), dt)]
            i = x.a.astype(np.int64)
            r = {"neg": -i, "abs": np.abs(i), "relu": np.maximum(i, 0)}[op]
            return [V(r.astype(NP_STORAGE[dt]), dt)]
        if dt not in FLOATS:
            raise GraphError(f"{op}: needs a float dtype, got {dt}")
        v = f64(x)
        if op == "gelu":
            ap = at.get("approximate", "none")
            if ap == "none":
                r = 0.5 * v * (1.0 + _erf(v / math.sqrt(2.0)))
            elif ap == "tanh":
                # v * v * v: NumPy's v**3 calls pow() per element, about 200x slower here
                c = math.sqrt(2.0 / math.pi)
                r = 0.5 * v * (1.0 + np.tanh(c * (v + 0.044715 * v * v * v)))
            else:
                raise GraphError(f"gelu: bad approximate {ap!r}")
        else:
            r = UNARY_F[op](v)
        return [V(round_to(r, dt), dt)]


def cast_array(a, src, to):
    """docs/ops.md `cast` on a stored array."""
    a = np.asarray(a)
    with np.errstate(all="ignore"):
        if to == "bool":
            return a != 0
        if src == "bool":
            a = a.astype(np.uint8)
            src = "u8"
        if to in FLOATS:
            x32 = a.astype(np.float32)  # f16/bf16 -> f32 exact; ints as C's (float)i
            return x32 if to == "f32" else (x32.astype(np.float16) if to == "f16"
                                            else bf16_round(x32))
        if src in FLOATS:  # float -> int: truncate, saturate, NaN -> 0
            t = np.trunc(np.where(np.isnan(a), 0.0, a.astype(np.float64)))
            lo, hi = INT_RANGE[to]
            below, above = t < lo, t >= float(hi) + 1.0  # t is integral: t > hi
            r = np.where(below | above, 0.0, t).astype(np.int64)
            r[below] = lo
            r[above] = hi
            return r.astype(NP_STORAGE[to])
        return a.astype(np.int64).astype(NP_STORAGE[to])  # int -> int (in-range values)


def op_cast(op, ins, at):
    (x,) = ins
    to = at.get("to")
    if to not in DT_ENUM:
        raise GraphError(f"cast: bad 'to' {to!r}")
    return [V(cast_array(x.a, x.dt, to), to)]


def op_where(op, ins, at):
    c, x, y = ins
    if c.dt != "bool":
        raise GraphError("where: cond must be bool")
    dt = _same_dt([x, y], op)
    return [V(np.where(c.a, x.a, y.a).astype(NP_STORAGE[dt]), dt)]


def op_compare(op, ins, at):
    a, b = ins
    _same_dt(ins, op)
    f = {"equal": np.equal, "less": np.less, "greater": np.greater}[op]
    with np.errstate(all="ignore"):
        return [V(np.asarray(f(a.a, b.a)), "bool")]


def _swap_last(x):
    if x.ndim < 2:
        raise GraphError("trans_* on an operand of rank < 2")
    return np.swapaxes(x, -1, -2)


def ref_matmul(a, b, trans_a=0, trans_b=0):
    if trans_a:
        a = _swap_last(a)
    if trans_b:
        b = _swap_last(b)
    if a.ndim == 0 or b.ndim == 0:
        raise GraphError("matmul: rank-0 operand")
    try:
        return np.matmul(a, b)
    except ValueError as e:
        raise GraphError(f"matmul: {e}") from None


def op_matmul(op, ins, at):
    dt = _float_in(ins, op)
    a, b = ins
    r = ref_matmul(f64(a), f64(b), at.get("trans_a", 0), at.get("trans_b", 0))
    return [V(round_to(r, dt), dt)]


def ref_gemm(a, b, c, alpha=1.0, beta=1.0, trans_a=0, trans_b=0):
    if a.ndim != 2 or b.ndim != 2:
        raise GraphError("gemm: a and b must be 2-D")
    a = a.T if trans_a else a
    b = b.T if trans_b else b
    if a.shape[1] != b.shape[0]:
        raise GraphError(f"gemm: inner dims {a.shape} x {b.shape}")
    y = alpha * (a @ b)
    if c is not None:
        y = y + beta * np.broadcast_to(c, y.shape)
    return y


def op_gemm(op, ins, at):
    dt = _float_in(ins, op)
    a, b, c = (ins + [None])[:3]
    r = ref_gemm(f64(a), f64(b), None if c is None else f64(c), at.get("alpha", 1.0),
                 at.get("beta", 1.0), at.get("trans_a", 0), at.get("trans_b", 0))
    return [V(round_to(r, dt), dt)]


def op_transpose(op, ins, at):
    (x,) = ins
    perm = at.get("perm")
    if perm is None:
        perm = list(range(x.a.ndim))[::-1]
    if sorted(perm) != list(range(x.a.ndim)):
        raise GraphError(f"transpose: bad perm {perm}")
    if x.a.ndim == 0:  # np.transpose(scalar, []) would give shape (1,)
        return [V(x.a.copy(), x.dt)]
    return [V(np.ascontiguousarray(np.transpose(x.a, perm)), x.dt)]


def op_reshape(op, ins, at):
    (x,) = ins
    if "shape" not in at:
        raise GraphError("reshape: shape required")
    shape = [x.a.shape[i] if s == 0 else s for i, s in enumerate(at["shape"])]
    if shape.count(-1) > 1:
        raise GraphError("reshape: more than one -1")
    try:
        return [V(x.a.reshape(shape).copy(), x.dt)]
    except ValueError as e:
        raise GraphError(f"reshape: {e}") from None


def op_expand(op, ins, at):
    (x,) = ins
    shape = tuple(at["shape"])
    try:
        out = np.broadcast_shapes(x.a.shape, shape)
    except ValueError as e:
        raise GraphError(f"expand: {e}") from None
    return [V(np.broadcast_to(x.a, out).copy(), x.dt)]


def op_concat(op, ins, at):
    dt = _same_dt(ins, op)
    nd = {v.a.ndim for v in ins}
    if len(nd) != 1:
        raise GraphError("concat: ranks differ")
    ax = _norm_axis(at["axis"], nd.pop())
    return [V(np.concatenate([v.a for v in ins], axis=ax), dt)]


def op_slice(op, ins, at):
    (x,) = ins
    starts, ends = at["starts"], at["ends"]
    k = len(starts)
    axes = at.get("axes", list(range(k)))
    steps = at.get("steps", [1] * k)
    if len(ends) != k or len(axes) != k or len(steps) != k:
        raise GraphError("slice: attribute lengths differ")
    sl = [slice(None)] * x.a.ndim
    seen = set()
    for s, e, ax, st in zip(starts, ends, axes, steps):
        ax = _norm_axis(ax, x.a.ndim)
        if st == 0 or ax in seen:
            raise GraphError("slice: zero step or repeated axis")
        seen.add(ax)
        sl[ax] = slice(int(s), int(e), int(st))
    return [V(x.a[tuple(sl)].copy(), x.dt)]


def op_gather(op, ins, at):
    d, idx = ins
    if idx.dt not in ("i32", "i64"):
        raise GraphError("gather: indices must be i32 or i64")
    ax = _norm_axis(at.get("axis", 0), d.a.ndim)
    n = d.a.shape[ax]
    if np.any((idx.a < -n) | (idx.a >= n)):
        raise GraphError(f"gather: index out of range [-{n}, {n})")
    return [V(np.take(d.a, idx.a.astype(np.int64), axis=ax), d.dt)]


def _red_axes(at, nd):
    axes = at.get("axes") or list(range(nd))
    axes = [_norm_axis(a, nd, "axes") for a in axes]
    if len(set(axes)) != len(axes):
        raise GraphError("repeated axes")
    return tuple(axes)


def op_reduce(op, ins, at):
    (x,) = ins
    dt = x.dt
    axes = _red_axes(at, x.a.ndim)
    kd = bool(at.get("keepdims", 0))
    if dt == "bool":
        raise GraphError(f"{op}: bool")
    with np.errstate(all="ignore"):
        if op == "reduce_mean":
            if dt not in FLOATS:
                raise GraphError("reduce_mean: float only")
            n = int(np.prod([x.a.shape[a] for a in axes]))
            s = np.sum(f64(x), axis=axes, keepdims=kd)
            return [V(round_to(s / n if n else np.full_like(s, np.nan), dt), dt)]
        if op == "reduce_sum":
            if dt in FLOATS:
                return [V(round_to(np.sum(f64(x), axis=axes, keepdims=kd), dt), dt)]
            s = np.sum(x.a.astype(np.int64), axis=axes, keepdims=kd)
            return [V(np.asarray(s).astype(NP_STORAGE[dt]), dt)]
        if any(x.a.shape[a] == 0 for a in axes):
            raise GraphError(f"{op}: empty reduction")
        f = np.max if op == "reduce_max" else np.min
        return [V(np.asarray(f(x.a, axis=axes, keepdims=kd)).astype(NP_STORAGE[dt]), dt)]


def op_argmax(op, ins, at):
    (x,) = ins
    if x.dt == "bool":
        raise GraphError("argmax: bool")
    ax = _norm_axis(at.get("axis", -1), x.a.ndim)
    r = np.argmax(x.a, axis=ax)
    if at.get("keepdims", 0):
        r = np.expand_dims(r, ax)
    return [V(np.asarray(r, dtype=np.int64), "i64")]


def op_softmax(op, ins, at):
    (x,) = ins
    dt = _float_in(ins, op)
    ax = _norm_axis(at.get("axis", -1), x.a.ndim)
    v = f64(x)
    with np.errstate(all="ignore"):
        m = np.max(v, axis=ax, keepdims=True)
        e = np.exp(v - m)
        s = np.sum(e, axis=ax, keepdims=True)
        r = e / s if op == "softmax" else (v - m) - np.log(s)
    return [V(round_to(r, dt), dt)]


def ref_layer_norm(x, scale, bias, axis=-1, eps=1e-5):
    axes = tuple(range(_norm_axis(axis, x.ndim), x.ndim))
    mu = np.mean(x, axis=axes, keepdims=True)
    var = np.mean((x - mu) ** 2, axis=axes, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    if scale is not None:
        y = y * scale
    if bias is not None:
        y = y + bias
    return y


def _check_norm_param(p, x, axis, op):
    if p is not None and tuple(p.a.shape) != tuple(x.a.shape[_norm_axis(axis, x.a.ndim):]):
        raise GraphError(f"{op}: parameter shape {p.a.shape} != x.shape[axis:]")


def op_layer_norm(op, ins, at):
    x, s, b = (ins + [None, None])[:3]
    dt = _float_in(ins, op)
    ax = at.get("axis", -1)
    _check_norm_param(s, x, ax, op)
    _check_norm_param(b, x, ax, op)
    y = ref_layer_norm(f64(x), None if s is None else f64(s), None if b is None else f64(b),
                       ax, at.get("epsilon", 1e-5))
    return [V(round_to(y, dt), dt)]


def ref_rms_norm(x, scale, axis=-1, eps=1e-6):
    axes = tuple(range(_norm_axis(axis, x.ndim), x.ndim))
    y = x / np.sqrt(np.mean(x * x, axis=axes, keepdims=True) + eps)
    return y if scale is None else y * scale


def op_rms_norm(op, ins, at):
    x, s = (ins + [None])[:2]
    dt = _float_in(ins, op)
    ax = at.get("axis", -1)
    _check_norm_param(s, x, ax, op)
    y = ref_rms_norm(f64(x), None if s is None else f64(s), ax, at.get("epsilon", 1e-6))
    return [V(round_to(y, dt), dt)]


def ref_attention(q, k, v, mask=None, mask_is_bool=False, causal=0, scale=None):
    """Returns (out, p): p the attention probabilities (for error bounds)."""
    if q.ndim < 2 or q.shape[:-2] != k.shape[:-2] or q.shape[:-2] != v.shape[:-2]:
        raise GraphError(f"attention: leading dims {q.shape} {k.shape} {v.shape}")
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise GraphError(f"attention: shapes {q.shape} {k.shape} {v.shape}")
    lq, lk = q.shape[-2], k.shape[-2]
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    with np.errstate(all="ignore"):
        s = scale * np.matmul(q, np.swapaxes(k, -1, -2))
        allowed = np.ones(s.shape, dtype=bool)
        if mask is not None:
            try:
                mb = np.broadcast_to(mask, s.shape)
            except ValueError:
                raise GraphError(f"attention: mask {mask.shape} vs scores {s.shape}") from None
            if mask_is_bool:
                allowed &= mb
            else:
                s = s + mb
        if causal:
            allowed &= np.arange(lk)[None, :] <= np.arange(lq)[:, None]
        s = np.where(allowed, s, -np.inf)
        m = np.max(s, axis=-1, keepdims=True) if lk else np.zeros(s.shape[:-1] + (1,))
        m = np.where(np.isfinite(m), m, 0.0)
        e = np.where(allowed, np.exp(s - m), 0.0)
        tot = np.sum(e, axis=-1, keepdims=True)
        p = np.where(tot > 0, e / np.where(tot > 0, tot, 1.0), 0.0)
    return np.matmul(p, v), p


def mask_array(mask):
    """An attention mask as ref_attention takes it: bool as is, else float64."""
    if mask is None:
        return None
    return np.asarray(mask.a, dtype=bool) if mask.dt == "bool" else f64(mask)


def op_attention(op, ins, at):
    q, k, v, mask = (ins + [None])[:4]
    dt = _float_in([q, k, v], op)
    if mask is not None and mask.dt not in ("bool", dt):
        raise GraphError(f"attention: mask dtype {mask.dt}")
    out, _ = ref_attention(f64(q), f64(k), f64(v), mask_array(mask), mask is not None and
                           mask.dt == "bool", at.get("causal", 0), at.get("scale"))
    return [V(round_to(out, dt), dt)]


def ref_rope(x, pos, inv_freq, interleaved=0):
    """docs/ops.md rope of x [T, H, D] (float64) with the f32 angle pos * inv_freq."""
    half = inv_freq.shape[0]
    th = (pos.astype(np.float32)[:, None] * inv_freq.astype(np.float32)[None, :])
    c = np.cos(th.astype(np.float64))[:, None, :]
    s = np.sin(th.astype(np.float64))[:, None, :]
    y = np.array(x, dtype=np.float64)
    ia = slice(0, 2 * half, 2) if interleaved else slice(0, half)
    ib = slice(1, 2 * half, 2) if interleaved else slice(half, 2 * half)
    a, b = x[..., ia], x[..., ib]
    y[..., ia] = a * c - b * s
    y[..., ib] = b * c + a * s
    return y


def op_rope(op, ins, at):
    x, pos, inv = ins
    if x.dt not in FLOATS or x.a.ndim != 3:
        raise GraphError(f"rope: x must be a float [T, H, D], got {x.dt}{list(x.a.shape)}")
    if pos.dt not in ("i32", "i64") or pos.a.shape != (x.a.shape[0],):
        raise GraphError(f"rope: positions must be i32 or i64 [T], got {pos.dt}")
    if inv.dt != "f32" or inv.a.ndim != 1 or 2 * inv.a.shape[0] > x.a.shape[2]:
        raise GraphError("rope: inv_freq must be f32 [R / 2] with R <= D")
    if at.get("interleaved", 0) not in (0, 1):
        raise GraphError("rope: interleaved must be 0 or 1")
    y = ref_rope(f64(x), pos.a, inv.a, at.get("interleaved", 0))
    return [V(round_to(y, x.dt), x.dt)]


def paged_check(qs, ctx, tables, slots, T, NB, BS):
    """docs/ops.md's metadata rules: raises GraphError naming the first bad entry."""
    S, B = tables.shape
    for s in range(S + 1):
        if qs[s] < 0 or qs[s] > T or (s > 0 and qs[s] < qs[s - 1]):
            raise GraphError(f"paged_attention: query_start[{s}] = {qs[s]}")
    for s in range(S):
        if ctx[s] < qs[s + 1] - qs[s] or ctx[s] > B * BS:
            raise GraphError(f"paged_attention: context_lens[{s}] = {ctx[s]}")
    for s in range(S):
        for b in range((int(ctx[s]) + BS - 1) // BS):
            if not 0 <= tables[s, b] < NB:
                raise GraphError(f"paged_attention: block_tables[{s}][{b}] = {tables[s, b]}")
    for t in range(T):
        if slots[t] >= NB * BS:
            raise GraphError(f"paged_attention: slot_mapping[{t}] = {slots[t]}")


def ref_paged_attention(q, k, v, kc, vc, slots, tables, qs, ctx, scale=None, bound=False):
    """docs/ops.md paged_attention on float64 arrays: the writes into copies of the caches,
    then each row's causal softmax over its sequence's keys. Returns the output [T, H, D];
    with bound, (output, a per-element bound of an f32 evaluation's error as tol_attention
    derives it for attention)."""
    T, H, D = q.shape
    NB, BS, Hkv, _ = kc.shape
    G = H // Hkv
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    kf = np.array(kc, np.float64).reshape(NB * BS, Hkv, D)
    vf = np.array(vc, np.float64).reshape(NB * BS, Hkv, D)
    for t in range(T):
        if slots[t] >= 0:
            kf[slots[t]], vf[slots[t]] = k[t], v[t]
    out = np.zeros((T, H, D))
    err = np.zeros((T, H, D))
    u = 2.0**-24
    for s in range(len(ctx)):
        n, L = int(qs[s + 1] - qs[s]), int(ctx[s])
        idx = np.array([tables[s, j // BS] * BS + j % BS for j in range(L)], dtype=np.int64)
        for r in range(n):
            t, pos = int(qs[s]) + r, L - n + r
            for h in range(H):
                kk, vv = kf[idx[:pos + 1], h // G], vf[idx[:pos + 1], h // G]
                sc = scale * (kk @ q[t, h])
                e = np.exp(sc - np.max(sc))
                p = e / np.sum(e)
                out[t, h] = p @ vv
                if bound:  # as tol_attention (test_ops.py): the keys are 0 .. pos
                    ds = D * u / (1 - D * u) * abs(scale) * (np.abs(kk) @ np.abs(q[t, h])) \
                        + u * np.abs(sc)
                    g2 = (2 * pos + 10) * u / (1 - (2 * pos + 10) * u)
                    err[t, h] = (p @ np.abs(vv)) * (2 * ds.max() + 4 * u * np.abs(sc).max()
                                                    + g2)
    return (out, err) if bound else out


def op_paged_attention(op, ins, at):
    q, k, v, kc, vc, slots, tables, qs, ctx = ins
    dt = _float_in([q, k, v, kc, vc], op)
    for m, nd in ((slots, 1), (tables, 2), (qs, 1), (ctx, 1)):
        if m.dt != "i32" or m.a.ndim != nd:
            raise GraphError(f"paged_attention: metadata must be i32 of rank {nd}")
    T, H, D = q.a.shape
    NB, BS, Hkv, Dc = kc.a.shape
    if H % Hkv or k.a.shape != (T, Hkv, D) or v.a.shape != k.a.shape or Dc != D or \
            vc.a.shape != kc.a.shape or tables.a.shape[0] != ctx.a.shape[0] or \
            qs.a.shape != (ctx.a.shape[0] + 1,) or slots.a.shape != (T,):
        raise GraphError("paged_attention: shapes do not fit")
    paged_check(qs.a, ctx.a, tables.a, slots.a, T, NB, BS)
    y = ref_paged_attention(f64(q), f64(k), f64(v), f64(kc), f64(vc), slots.a, tables.a, qs.a,
                            ctx.a, at.get("scale"))
    # the op writes its cache inputs: so does the reference, into the arrays it was fed (a
    # later evaluation, a next step, sees them), as the runtime writes the caller's tensors
    w = slots.a >= 0
    for c, new in ((kc, k), (vc, v)):
        if not c.a.flags.c_contiguous or not c.a.flags.writeable:
            raise GraphError("paged_attention: the caches must be contiguous and writable")
        c.a.reshape(NB * BS, Hkv, D)[slots.a[w]] = new.a[w]
    return [V(round_to(y, dt), dt)]


def op_constant(op, ins, at):
    if "value" not in at:
        raise GraphError("constant: value required")
    return [at["value"]]


def _pairs(at, name, dflt, n=2):
    v = list(at.get(name, dflt))
    if len(v) != n:
        raise GraphError(f"{name} needs {n} ints")
    return v


def ref_conv2d(x, w, b, strides=(1, 1), pads=(0, 0, 0, 0), dil=(1, 1), groups=1):
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    if c % groups or o % groups or cg != c // groups:
        raise GraphError(f"conv2d: channels {c}/{o} vs groups {groups}, w {w.shape}")
    top, left, bottom, right = pads
    sh, sw = strides
    dh, dw = dil
    ho = (h + top + bottom - dh * (kh - 1) - 1) // sh + 1
    wo = (wd + left + right - dw * (kw - 1) - 1) // sw + 1
    if ho < 1 or wo < 1:
        raise GraphError("conv2d: empty output")
    xp = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    out = np.zeros((n, o, ho, wo))
    og = o // groups
    for g in range(groups):
        xg = xp[:, g * cg:(g + 1) * cg]
        wg = w[g * og:(g + 1) * og]
        for i in range(kh):
            for j in range(kw):
                patch = xg[:, :, i * dh:i * dh + sh * (ho - 1) + 1:sh,
                           j * dw:j * dw + sw * (wo - 1) + 1:sw]
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch, wg[:, :, i, j])
    if b is not None:
        out += b[None, :, None, None]
    return out


def op_conv2d(op, ins, at):
    x, w, b = (ins + [None])[:3]
    dt = _float_in(ins, op)
    if x.a.ndim != 4 or w.a.ndim != 4:
        raise GraphError("conv2d: x and w must be 4-D")
    r = ref_conv2d(f64(x), f64(w), None if b is None else f64(b), _pairs(at, "strides", (1, 1)),
                   _pairs(at, "pads", (0, 0, 0, 0), 4), _pairs(at, "dilations", (1, 1)),
                   at.get("groups", 1))
    return [V(round_to(r, dt), dt)]


def pool_out_size(size, k, s, pad_lo, pad_hi, d, ceil_mode):
    eff = size + pad_lo + pad_hi - d * (k - 1) - 1
    if ceil_mode:
        o = -(-eff // s) + 1
        if (o - 1) * s >= size + pad_lo:  # the last window must start inside input/top pad
            o -= 1
    else:
        o = eff // s + 1
    return o


def ref_pool2d(x, kind, kernel, strides=None, pads=(0, 0, 0, 0), dil=(1, 1), ceil_mode=0,
               count_include_pad=0):
    n, c, h, w = x.shape
    kh, kw = kernel
    sh, sw = strides if strides is not None else kernel
    top, left, bottom, right = pads
    dh, dw = dil
    ho = pool_out_size(h, kh, sh, top, bottom, dh, ceil_mode)
    wo = pool_out_size(w, kw, sw, left, right, dw, ceil_mode)
    if ho < 1 or wo < 1:
        raise GraphError("pool: empty output")
    # room for every window, including ceil_mode ones that run past the bottom/right pad
    need_h = (ho - 1) * sh + dh * (kh - 1) + 1
    need_w = (wo - 1) * sw + dw * (kw - 1) + 1
    eb = max(0, need_h - (h + top + bottom))
    er = max(0, need_w - (w + left + right))
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x, ((0, 0), (0, 0), (top, bottom + eb), (left, right + er)),
                constant_values=fill)
    real = np.pad(np.ones((h, w)), ((top, bottom + eb), (left, right + er)))
    padded = np.pad(np.ones((h + top + bottom, w + left + right)), ((0, eb), (0, er)))
    acc = np.full((n, c, ho, wo), -np.inf if kind == "max" else 0.0)
    cnt_real = np.zeros((ho, wo))
    cnt_pad = np.zeros((ho, wo))
    for i in range(kh):
        for j in range(kw):
            sl = (slice(i * dh, i * dh + sh * (ho - 1) + 1, sh),
                  slice(j * dw, j * dw + sw * (wo - 1) + 1, sw))
            patch = xp[(slice(None), slice(None)) + sl]
            if kind == "max":
                acc = np.maximum(acc, patch)
            else:
                acc = acc + patch
                cnt_real += real[sl]
                cnt_pad += padded[sl]
    if kind == "max":
        return acc
    return acc / (cnt_pad if count_include_pad else cnt_real)


def op_pool(op, ins, at):
    (x,) = ins
    dt = _float_in(ins, op)
    if x.a.ndim != 4:
        raise GraphError(f"{op}: x must be 4-D")
    k = _pairs(at, "kernel_shape", ())
    r = ref_pool2d(f64(x), "max" if op == "max_pool2d" else "avg", k,
                   _pairs(at, "strides", k), _pairs(at, "pads", (0, 0, 0, 0), 4),
                   _pairs(at, "dilations", (1, 1)), at.get("ceil_mode", 0),
                   at.get("count_include_pad", 0))
    return [V(round_to(r, dt), dt)]


# op -> (implementation, min inputs, max inputs, allowed attributes)
_BIN = ("add", "sub", "mul", "div", "pow")
_UN = ("neg", "abs", "relu", "sqrt", "rsqrt", "exp", "log", "tanh", "erf", "sigmoid", "silu")
OPS = {}
for _o in _BIN:
    OPS[_o] = (op_binary, 2, 2, ())
for _o in _UN:
    OPS[_o] = (op_unary, 1, 1, ())
OPS.update({
    "gelu": (op_unary, 1, 1, ("approximate",)),
    "cast": (op_cast, 1, 1, ("to",)),
    "where": (op_where, 3, 3, ()),
    "equal": (op_compare, 2, 2, ()),
    "less": (op_compare, 2, 2, ()),
    "greater": (op_compare, 2, 2, ()),
    "matmul": (op_matmul, 2, 2, ("trans_a", "trans_b")),
    "gemm": (op_gemm, 2, 3, ("alpha", "beta", "trans_a", "trans_b")),
    "transpose": (op_transpose, 1, 1, ("perm",)),
    "reshape": (op_reshape, 1, 1, ("shape",)),
    "expand": (op_expand, 1, 1, ("shape",)),
    "concat": (op_concat, 1, 1 << 30, ("axis",)),
    "slice": (op_slice, 1, 1, ("starts", "ends", "axes", "steps")),
    "gather": (op_gather, 2, 2, ("axis",)),
    "reduce_sum": (op_reduce, 1, 1, ("axes", "keepdims")),
    "reduce_mean": (op_reduce, 1, 1, ("axes", "keepdims")),
    "reduce_max": (op_reduce, 1, 1, ("axes", "keepdims")),
    "reduce_min": (op_reduce, 1, 1, ("axes", "keepdims")),
    "argmax": (op_argmax, 1, 1, ("axis", "keepdims")),
    "softmax": (op_softmax, 1, 1, ("axis",)),
    "log_softmax": (op_softmax, 1, 1, ("axis",)),
    "layer_norm": (op_layer_norm, 1, 3, ("axis", "epsilon")),
    "rms_norm": (op_rms_norm, 1, 2, ("axis", "epsilon")),
    "attention": (op_attention, 3, 4, ("causal", "scale")),
    "constant": (op_constant, 0, 0, ("value",)),
    "conv2d": (op_conv2d, 2, 3, ("strides", "pads", "dilations", "groups")),
    "max_pool2d": (op_pool, 1, 1, ("kernel_shape", "strides", "pads", "dilations",
                                   "ceil_mode")),
    "avg_pool2d": (op_pool, 1, 1, ("kernel_shape", "strides", "pads", "ceil_mode",
                                   "count_include_pad")),
    "rope": (op_rope, 3, 3, ("interleaved",)),
    "paged_attention": (op_paged_attention, 9, 9, ("scale",)),
})
ALL_OPS = sorted(OPS)


def decode_attrs(node):
    at = {}
    for a in node.attrs:
        k = a.WhichOneof("value")
        if k == "t":
            at[a.name] = tensor_from_proto(a.t)
        elif k in ("ints", "floats"):
            at[a.name] = list(getattr(a, k).values)
        else:
            at[a.name] = getattr(a, k)
    return at


class Interpreter:
    """The reference interpreter of one graph: decodes initializers and attributes and checks
    the structure once (known ops, arity, attribute names, inputs produced before use, each
    value produced once), then run() evaluates the nodes in file order."""

    def __init__(self, graph):
        if isinstance(graph, GraphBuilder):
            graph = graph.g
        elif isinstance(graph, (bytes, bytearray)):
            g = pb.Graph()
            g.ParseFromString(bytes(graph))
            graph = g
        self.graph = graph
        self.consts = {t.name: tensor_from_proto(t) for t in graph.initializers}
        known = set(self.consts) | {vi.name for vi in graph.inputs}
        self.steps = []
        for node in graph.nodes:
            if node.op not in OPS:
                raise GraphError(f"node '{node.name}': unknown op '{node.op}'")
            fn, lo, hi, allowed = OPS[node.op]
            if not lo <= len(node.inputs) <= hi:
                raise GraphError(f"node '{node.name}': {len(node.inputs)} inputs for {node.op}")
            at = decode_attrs(node)
            for k in at:
                if k not in allowed:
                    raise GraphError(f"node '{node.name}': unknown attribute '{k}'")
            for i, name in enumerate(node.inputs):
                if name == "" and i < lo:
                    raise GraphError(f"node '{node.name}': required input {i} omitted")
                if name and name not in known:
                    raise GraphError(f"node '{node.name}': input '{name}' not produced yet")
            for name in node.outputs:
                if name in known:
                    raise GraphError(f"value '{name}' produced twice")
                known.add(name)
            self.steps.append((node, fn, at))
        for vo in graph.outputs:
            if vo.name not in known:
                raise GraphError(f"output '{vo.name}' is never produced")

    def run(self, feeds, keep_all=False):
        """feeds {name: array} -> {output name: V}, or every value with keep_all."""
        env = dict(self.consts)
        for vi in self.graph.inputs:
            if vi.name not in feeds:
                raise GraphError(f"no feed for input '{vi.name}'")
            a = np.asarray(feeds[vi.name])
            dt = ENUM_DT[vi.dtype]
            if dtype_of_array(a) != dt:
                raise GraphError(f"input '{vi.name}': {a.dtype} fed for {dt}")
            if vi.has_shape and (len(vi.dims) != a.ndim or any(
                    d not in (-1, s) for d, s in zip(vi.dims, a.shape))):
                raise GraphError(f"input '{vi.name}': shape {a.shape} vs {list(vi.dims)}")
            env[vi.name] = V(a, dt)
        for node, fn, at in self.steps:
            ins = [env[name] if name else None for name in node.inputs]
            while ins and ins[-1] is None:
                ins.pop()
            try:
                outs = fn(node.op, ins, at)
            except GraphError as e:
                raise GraphError(f"node '{node.name}' ({node.op}): {e}") from None
            if len(outs) != len(node.outputs):
                raise GraphError(f"node '{node.name}': {len(node.outputs)} outputs")
            for name, v in zip(node.outputs, outs):
                env[name] = v
        if keep_all:
            return env
        return {vo.name: env[vo.name] for vo in self.graph.outputs}


def evaluate(graph, feeds, keep_all=False):
    """Runs the graph (rtx.v1.Graph, GraphBuilder or bytes) on feeds {name: array} node by
    node, in file order. Returns {output name: V}, or every value with keep_all."""
    return Interpreter(graph).run(feeds, keep_all)


# ------------------------------------------------------------------------------------------
# Comparison
# ------------------------------------------------------------------------------------------

def seed_of(text):
    return zlib.crc32(text.encode())


def assert_close(got, ref, rtol, atol, what=""):
    """|got - ref| <= atol + rtol*|ref| elementwise (atol may be an array); NaN must match NaN
    and infinities must match exactly. Reports the worst element."""
    got = np.asarray(got)
    ref = np.asarray(ref)
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != expected {ref.shape}"
    g = got.astype(np.float64)
    r = ref.astype(np.float64)
    atol = np.broadcast_to(np.asarray(atol, dtype=np.float64), r.shape)
    gn, rn = np.isnan(g), np.isnan(r)
    bad = gn != rn
    inf = np.isinf(r) | np.isinf(g)
    bad |= inf & ~rn & ~gn & (g != r)
    fin = ~(gn | rn | inf)
    with np.errstate(all="ignore"):
        err = np.where(fin, np.abs(g - r), 0.0)
        lim = atol + rtol * np.abs(r)
    bad |= fin & (err > lim)
    if bad.any():
        idx = np.argwhere(bad)
        score = np.where(bad, np.where(fin, err / np.maximum(lim, 1e-300), np.inf), -1)
        worst = np.unravel_index(np.argmax(score), r.shape) if r.ndim else ()
        raise AssertionError(
            f"{what}: {int(bad.sum())}/{r.size} elements differ (rtol {rtol:g}, atol "
            f"max {float(np.max(atol)) if atol.size else 0:g}); worst at {tuple(map(int, worst))}:"
            f" got {g[worst]!r} expected {r[worst]!r} (|err| {float(err[worst]):g}, allowed "
            f"{float(lim[worst]):g}); first bad {[tuple(map(int, i)) for i in idx[:5]]}")


def assert_equal(got, ref, what=""):
    got = np.asarray(got)
    ref = np.asarray(ref)
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != expected {ref.shape}"
    assert got.dtype == ref.dtype, f"{what}: dtype {got.dtype} != expected {ref.dtype}"
    bad = got != ref
    if bad.any():
        idx = [tuple(map(int, i)) for i in np.argwhere(bad)[:5]]
        raise AssertionError(f"{what}: {int(bad.sum())}/{ref.size} elements differ; first at "
                             f"{idx}: got {[got[i] for i in idx]} expected "
                             f"{[ref[i] for i in idx]}")


def npy_dtype_for(dt):
    """The NumPy dtype rtxrun writes for an output of rtx dtype dt (bf16 -> <f4)."""
    return np.dtype(np.float32) if dt == "bf16" else np.dtype(NP_STORAGE[dt])
