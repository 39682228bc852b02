"""
onnx_models - the Python side of the ONNX tests (tests/interop/test_onnx_*.py) and of
bench/bench_onnx.py: ONNX models built with onnx.helper, the reference answers from
onnxruntime's CPU provider, and rtxrun --batch-dir runs of many models in one process.

A Case is one model with its inputs. run_cases() writes every case as a --batch-dir case
directory (model.onnx, inputs/NAME.npy), computes onnxruntime's outputs into ref/NAME.npy,
runs ONE rtxrun process over the directory and returns each case's result line. shared_batch()
does that once per test session even under pytest-xdist: the first worker to get the lock
builds and runs, the others read its results.

Comparison (check_outputs): integers and bool exactly (dtype, shape and every value); floats
|got - ref| <= rtol*|ref| + atol with rtol 1e-4 for f32 (one f16 ulp, 2^-10, for f16) and
atol = frac * max(1, max|ref|), frac by the kind of computation: 1e-6 for elementwise
functions, 1e-5 for sums of products, normalizations and whole models (values near zero from
cancellation carry the absolute error of the terms, not of the result).

The models of the model tests and the benchmark (an MLP, a ResNet-style CNN, a BERT-style
encoder layer, a GPT-2-style decoder block) are written as exporters write them: shape
sub-graphs for reshapes, masks built from the inputs, layer norm and GELU decomposed where
older exporters decompose them.
"""

import fcntl
import json
import math
import os
import subprocess
import zlib
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import rtxgraph as rg

# The ir_version each opset needs (onnx.helper.VERSION_TABLE), the lowest that carries it:
# exporters write the lowest, and onnxruntime reads them all.
IR_FOR_OPSET = {12: 7, 13: 7, 14: 7, 15: 8, 16: 8, 17: 8, 18: 8, 19: 9, 20: 9, 21: 10, 22: 10,
                23: 11, 24: 11}
F32, F16, I64, I32, BOOL = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64,
                            TensorProto.INT32, TensorProto.BOOL)
RTOL = {np.dtype(np.float32): 1e-4, np.dtype(np.float16): 2.0**-10}
ATOL_FRAC = {"ew": 1e-6, "sum": 1e-5, "model": 1e-5}
INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min
# rtxrun in an ASan build is several times slower; a batch of hundreds of cases needs more
# than one graph's RUN_TIMEOUT_S
BATCH_TIMEOUT_S = max(rg.RUN_TIMEOUT_S, 600.0)


def elem_of(a):
    return helper.np_dtype_to_tensor_dtype(np.asarray(a).dtype)


def seed_of(text):
    return zlib.crc32(text.encode())


# ------------------------------------------------------------------------------------------
# Building models
# ------------------------------------------------------------------------------------------

def value_info(name, elem, shape):
    """A graph input: shape entries are ints or strings (symbolic dimensions)."""
    return helper.make_tensor_value_info(name, elem, shape)


def make_model(nodes, inputs, outputs, inits=(), opset=17, name="g", infer=True,
               producer="rtx-tests"):
    """A ModelProto. inputs: value infos (or (name, array, symbolic dims) tuples: the
    array's dtype and shape, dims listed in the tuple declared symbolic 'd<i>'); outputs:
    names (types filled by ONNX shape inference) or value infos; inits: {name: array}."""
    vis = []
    for i in inputs:
        if isinstance(i, tuple):
            nm, a, sym = i
            a = np.asarray(a)
            shape = [f"{nm}_d{d}" if d in sym else int(s) for d, s in enumerate(a.shape)]
            vis.append(value_info(nm, elem_of(a), shape))
        else:
            vis.append(i)
    if not infer and any(isinstance(o, str) for o in outputs):
        raise ValueError("outputs named without a type need infer=True")
    outs = [helper.make_value_info(o, onnx.TypeProto()) if isinstance(o, str) else o
            for o in outputs]
    tensors = [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(inits).items()]
    g = helper.make_graph(nodes, name, vis, outs, initializer=tensors)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)],
                          ir_version=IR_FOR_OPSET[opset], producer_name=producer)
    if infer:
        m = onnx.shape_inference.infer_shapes(m, strict_mode=True)
    return m


def to_f32_model(m):
    """The same model computing in float32 where it computes in float16 (the reference of
    f16 cases: onnxruntime's CPU provider lacks most f16 kernels)."""
    m2 = onnx.ModelProto()
    m2.CopyFrom(m)
    g = m2.graph
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.type.tensor_type.elem_type == F16:
            vi.type.tensor_type.elem_type = F32
    for i, t in enumerate(g.initializer):
        if t.data_type == F16:
            g.initializer[i].CopyFrom(numpy_helper.from_array(
                numpy_helper.to_array(t).astype(np.float32), t.name))
    for n in g.node:
        for a in n.attribute:
            if a.name == "to" and a.i == F16:
                a.i = F32
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == F16:
                a.t.CopyFrom(numpy_helper.from_array(
                    numpy_helper.to_array(a.t).astype(np.float32), a.t.name))
    return m2


# ------------------------------------------------------------------------------------------
# onnxruntime, the reference
# ------------------------------------------------------------------------------------------

def ort_session(model, threads=1, optimize=False, providers=("CPUExecutionProvider",)):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    if not optimize:
        # the model's own semantics node by node, no fusions of onnxruntime's
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    data = model if isinstance(model, (bytes, bytearray)) else model.SerializeToString()
    return ort.InferenceSession(data, so, providers=list(providers))


def ort_run(model, feeds, threads=1):
    """{output name: array} from onnxruntime's CPU provider."""
    s = ort_session(model, threads)
    names = [o.name for o in s.get_outputs()]
    return dict(zip(names, s.run(names, feeds)))


# ------------------------------------------------------------------------------------------
# Cases and the batch run
# ------------------------------------------------------------------------------------------

class Case:
    """One model and its inputs. kind: 'exact' (every output compared exactly, floats too),
    'ew', 'sum' or 'model' (float tolerance, see ATOL_FRAC). f16: onnxruntime runs the model
    as it is where it has the f16 kernels; where it has not (NOT_IMPLEMENTED), the reference
    is the float32 model's output rounded to float16."""

    def __init__(self, cid, model, feeds, kind="ew", what="", fused=None):
        self.id, self.model, self.kind = cid, model, kind
        self.feeds = {k: np.asarray(v) for k, v in feeds.items()}
        self.what = what
        self.fused = fused  # the rtx op a decomposed pattern must become (when visible)

    def __repr__(self):
        return self.id

    def describe(self):
        m = self.model
        ins = ", ".join(f"{k}={np.asarray(v).dtype}{list(np.shape(v))}"
                        for k, v in self.feeds.items())
        ops = ", ".join(n.op_type + ("(" + ", ".join(
            f"{a.name}={helper.get_attribute_value(a)!r}" for a in n.attribute
            if a.type != onnx.AttributeProto.TENSOR) + ")" if n.attribute else "")
            for n in m.graph.node) if len(m.graph.node) <= 3 else f"{len(m.graph.node)} nodes"
        op = m.opset_import[0].version
        return f"{self.id} [opset {op}; {ops}; inputs {ins}]" + (
            f" {self.what}" if self.what else "")

    def reference(self):
        has16 = any(np.asarray(v).dtype == np.float16 for v in self.feeds.values()) or any(
            t.data_type == F16 for t in self.model.graph.initializer) or any(
            o.type.tensor_type.elem_type == F16 for o in self.model.graph.output)
        if not has16:
            return ort_run(self.model, self.feeds)
        try:
            return ort_run(self.model, self.feeds)
        except Exception as e:  # noqa: BLE001 - only a missing f16 kernel falls through
            if "NOT_IMPLEMENTED" not in str(e):
                raise
        feeds = {k: (v.astype(np.float32) if v.dtype == np.float16 else v)
                 for k, v in self.feeds.items()}
        out = ort_run(to_f32_model(self.model), feeds)
        for o in self.model.graph.output:
            if o.type.tensor_type.elem_type == F16:
                with np.errstate(over="ignore"):
                    out[o.name] = out[o.name].astype(np.float16)
        return out


class CaseList(list):
    """Cases as the op tests declare them: one(), model_case(), decomposed() append a Case.
    Ops whose definition did not change over the supported opsets take the next opset of
    the rotation `opsets` when a case names none."""

    def __init__(self, opsets):
        super().__init__()
        self.opsets, self.turn = opsets, 0

    def next_opset(self):
        self.turn += 1
        return self.opsets[(self.turn - 1) % len(self.opsets)]

    @staticmethod
    def inputs(feeds, sym):
        """(name, array, symbolic dims) for make_model: the dims in sym of every input of
        rank > 0 declared symbolic."""
        return [(k, v, tuple(d for d in sym if d < np.ndim(v))) for k, v in feeds.items()]

    def one(self, cid, op_type, feeds, inits=None, attrs=None, ins=None, opset=None, nout=1,
            kind="ew", sym=(), what=""):
        """A case of one node `op_type` named 'op': graph inputs `feeds` (name -> array),
        initializers `inits`, node inputs `ins` (default: feeds then inits, '' for an omitted
        optional one); outputs y (y0, y1, ... when nout > 1)."""
        inits = dict(inits or {})
        ins = list(ins) if ins is not None else list(feeds) + list(inits)
        outs = ["y"] if nout == 1 else [f"y{i}" for i in range(nout)]
        node = helper.make_node(op_type, ins, outs, name="op", **(attrs or {}))
        m = make_model([node], self.inputs(feeds, sym), outs, inits,
                       opset=opset or self.next_opset(), name=cid)
        self.append(Case(cid, m, feeds, kind, what))

    def model_case(self, cid, nodes, feeds, outs, inits=None, opset=17, kind="ew", sym=(),
                   fused=None, what=""):
        m = make_model(nodes, self.inputs(feeds, sym), outs, inits or {}, opset=opset,
                       name=cid)
        self.append(Case(cid, m, feeds, kind, what, fused=fused))

    def decomposed(self, cid, opset, build, feeds, outs, kind, fused, sym=(0,)):
        """A case whose nodes build(net) adds to a Net (the decomposed patterns)."""
        n = Net(seed_of(cid))
        build(n)
        m = make_model(n.nodes, self.inputs(feeds, sym), outs, n.inits, opset=opset,
                       name=cid)
        self.append(Case(cid, m, feeds, kind, fused=fused))


def write_case(root, c):
    d = Path(root) / c.id
    (d / "inputs").mkdir(parents=True)
    (d / "ref").mkdir()
    (d / "model.onnx").write_bytes(c.model.SerializeToString())
    for k, v in c.feeds.items():
        np.save(d / "inputs" / f"{k}.npy", np.asarray(v), allow_pickle=False)
    try:
        ref = c.reference()
    except Exception as e:  # noqa: BLE001 - a bad test model is the test's failure, named
        (d / "ref" / "error.txt").write_text(f"{type(e).__name__}: {e}")
        return
    for k, v in ref.items():
        np.save(d / "ref" / f"{k}.npy", v, allow_pickle=False)


def run_batch(root, extra=(), timeout=None):
    """One rtxrun --batch-dir --json process over root: {case: its result line}, plus
    '_summary' (the batch line) and '_run' (exit status, stderr's tail, and what went wrong
    with the process itself: a hang, a signal, a sanitizer report). The process's own
    failures are recorded, not raised, so that every case still reports what it got; the
    batch tests assert that the process was clean (assert_batch_clean)."""
    cmd = [str(rg.rtxrun_path()), "--batch-dir", str(root), "--json", "--threads", "2"] + \
        [str(a) for a in extra]
    timeout = timeout or BATCH_TIMEOUT_S
    try:
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           errors="replace", timeout=timeout)
        rc, out, err, problem = p.returncode, p.stdout, p.stderr, None
    except subprocess.TimeoutExpired as e:
        rc, problem = None, f"hung (killed after {timeout:g} s)"
        out = e.stdout.decode("utf-8", "replace") if isinstance(e.stdout, bytes) else ""
        err = e.stderr.decode("utf-8", "replace") if isinstance(e.stderr, bytes) else ""
    if rc is not None and (rc < 0 or rc >= 128):
        problem = f"killed by a signal (exit {rc})"
    marks = [m for m in rg.SANITIZER_MARKS if m in err]
    if marks:
        problem = f"sanitizer report ({', '.join(marks)})"
    res = {"_run": {"rc": rc, "problem": problem, "cmd": " ".join(cmd),
                    "stderr": err[:6000] if marks else err[-4000:]}}
    for line in out.splitlines():
        if not line.strip():
            continue
        try:
            o = json.loads(line)
        except ValueError:
            res.setdefault("_bad_lines", []).append(line)
            continue
        if "case" in o:
            res[o["case"]] = o
        elif "batch" in o:
            res["_summary"] = o
    return res


def run_cases(root, cases, extra=()):
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    ids = [c.id for c in cases]
    assert len(set(ids)) == len(ids), "case ids must be unique"
    for c in cases:
        write_case(root, c)
    return run_batch(root, extra)


def shared_batch(tmp_path_factory, name, cases_fn, extra=()):
    """run_cases once per session (under pytest-xdist, once for all workers): the results
    and the batch directory. cases_fn() gives the cases (called only by the builder)."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # shared by the workers of this session
    root = base / f"onnx-batch-{name}"
    done = base / f"onnx-batch-{name}.json"
    with open(base / f"onnx-batch-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            if root.exists():
                import shutil
                shutil.rmtree(root)
            res = run_cases(root, cases_fn(), extra)
            tmp = done.with_suffix(".tmp")
            tmp.write_text(json.dumps(res))
            tmp.rename(done)
    return json.loads(done.read_text()), root


def batch_tests(name, cases):
    """The pytest side of a case list: (the module-scoped fixture `batch` giving (results,
    batch directory) of shared_batch, a test that the batch process was clean and reported
    every case, a test per case against onnxruntime). A test module assigns the three to
    module names (batch, test_..., test_...)."""
    import pytest

    @pytest.fixture(scope="module")
    def batch(tmp_path_factory):
        return shared_batch(tmp_path_factory, name, lambda: cases)

    def test_clean(batch):
        assert_batch_clean(batch[0], len(cases))

    @pytest.mark.parametrize("c", cases, ids=str)
    def test_case(c, batch):
        check_outputs(c, *batch)
    return batch, test_clean, test_case


def assert_batch_clean(res, n_cases):
    """The batch process ended by itself, without a sanitizer report, and reported every
    case."""
    run = res["_run"]
    assert run["problem"] is None, f"rtxrun --batch-dir: {run['problem']}: {run['cmd']}\n" \
                                   f"{run['stderr']}"
    assert run["rc"] in (0, 1), f"rtxrun --batch-dir exit {run['rc']}: {run['stderr']}"
    s = res.get("_summary")
    assert s is not None, f"no batch summary line: {run}"
    assert s["cases"] == n_cases, s
    assert not res.get("_bad_lines"), res["_bad_lines"][:5]


def rtx_failure_text(res, cid):
    r = res.get(cid)
    if r is None:
        run = res.get("_run", {})
        return (f"no result line for case {cid} (rtxrun exit {run.get('rc')}"
                f"{', ' + run['problem'] if run.get('problem') else ''}; stderr "
                f"{run.get('stderr', '')[:1500]!r})")
    if r.get("exit") != 0:
        return f"rtxrun exit {r.get('exit')}: {r.get('error')}"
    return None


def check_outputs(c, res, root):
    """Asserts case c's rtxrun outputs equal onnxruntime's (see the module's comparison)."""
    d = Path(root) / c.id
    err = d / "ref" / "error.txt"
    assert not err.exists(), f"{c.describe()}: onnxruntime refused the test model: " \
                             f"{err.read_text()}"
    bad = rtx_failure_text(res, c.id)
    assert bad is None, f"{c.describe()}: {bad}"
    r = res[c.id]
    got_names = [o["name"] for o in r["outputs"]]
    want = [o.name for o in c.model.graph.output]
    assert got_names == want, f"{c.describe()}: outputs {got_names}, the model's {want}"
    for o in r["outputs"]:
        got = np.load(o["file"], allow_pickle=False)
        ref = np.load(d / "ref" / f"{o['name']}.npy", allow_pickle=False)
        compare(got, ref, c.kind, f"{c.describe()} output {o['name']}")


def compare(got, ref, kind, what):
    assert got.shape == ref.shape, f"{what}: shape {got.shape}, onnxruntime's {ref.shape}"
    assert got.dtype == ref.dtype, f"{what}: dtype {got.dtype}, onnxruntime's {ref.dtype}"
    if ref.dtype.kind in "iub" or kind == "exact":
        if ref.dtype.kind == "f":
            rg.assert_close(got, ref, 0.0, 0.0, what)
        else:
            rg.assert_equal(got, ref, what)
        return
    fin = np.abs(ref[np.isfinite(ref)].astype(np.float64))
    scale = max(1.0, float(fin.max())) if fin.size else 1.0
    atol = ATOL_FRAC[kind] * scale
    if ref.dtype == np.float16:
        atol += 2.0**-24
    rg.assert_close(got, ref, RTOL[ref.dtype], atol, what)


# ------------------------------------------------------------------------------------------
# Data
# ------------------------------------------------------------------------------------------

def rng_for(cid):
    return np.random.default_rng(seed_of(cid))


def uni(rng, shape, lo=-1.0, hi=1.0, dtype=np.float32):
    return np.asarray(rng.uniform(lo, hi, size=shape)).astype(dtype)


def weight(rng, shape, fan_in=None):
    fan_in = fan_in or shape[0]
    return (rng.standard_normal(shape) / math.sqrt(fan_in)).astype(np.float32)


# ------------------------------------------------------------------------------------------
# The models of the model tests and of the benchmark
# ------------------------------------------------------------------------------------------

class Net:
    """A graph under construction: nodes, initializers and fresh names."""

    def __init__(self, seed):
        self.nodes, self.inits, self.rng, self.n = [], {}, np.random.default_rng(seed), 0

    def name(self, base):
        self.n += 1
        return f"{base}_{self.n}"

    def init(self, base, a):
        nm = self.name(base)
        self.inits[nm] = np.asarray(a)
        return nm

    def const(self, base, a):
        """A Constant node (exporters write small constants so)."""
        nm = self.name(base)
        self.nodes.append(helper.make_node("Constant", [], [nm], name=nm + "_node",
                                           value=numpy_helper.from_array(np.asarray(a))))
        return nm

    def op(self, op_type, inputs, nout=1, name=None, outs=None, **attrs):
        name = name or self.name(op_type.lower())
        outs = outs or ([f"{name}_out"] if nout == 1 else
                        [f"{name}_out{i}" for i in range(nout)])
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=name, **attrs))
        return outs[0] if nout == 1 else outs

    # -- pieces exporters write ------------------------------------------------------------
    def linear(self, x, fan_in, fan_out, base="fc"):
        """MatMul + Add (torch.nn.Linear on a 3-D input)."""
        w = self.init(base + ".weight", weight(self.rng, (fan_in, fan_out)))
        b = self.init(base + ".bias", (0.1 * self.rng.standard_normal(fan_out)).astype(
            np.float32))
        return self.op("Add", [self.op("MatMul", [x, w]), b])

    def gemm(self, x, fan_in, fan_out, base="fc"):
        """Gemm with transB=1 (torch.nn.Linear on a 2-D input)."""
        w = self.init(base + ".weight", weight(self.rng, (fan_out, fan_in), fan_in))
        b = self.init(base + ".bias", (0.1 * self.rng.standard_normal(fan_out)).astype(
            np.float32))
        return self.op("Gemm", [x, w, b], transB=1, alpha=1.0, beta=1.0)

    def ln_params(self, d, base):
        g = self.init(base + ".weight", (1 + 0.1 * self.rng.standard_normal(d)).astype(
            np.float32))
        b = self.init(base + ".bias", (0.1 * self.rng.standard_normal(d)).astype(np.float32))
        return g, b

    def layer_norm(self, x, d, base="ln", eps=1e-5):
        g, b = self.ln_params(d, base)
        return self.op("LayerNormalization", [x, g, b], axis=-1, epsilon=eps)

    def layer_norm_decomposed(self, x, d, base="ln", eps=1e-5, opset=17, out=None):
        """ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add (exporters before opset 17);
        out names the result."""
        g, b = self.ln_params(d, base)
        mean = self.reduce_mean(x, [-1], opset)
        c = self.op("Sub", [x, mean])
        var = self.reduce_mean(self.op("Pow", [c, self.const("two", np.float32(2.0))]),
                               [-1], opset)
        den = self.op("Sqrt", [self.op("Add", [var, self.const("eps", np.float32(eps))])])
        return self.op("Add", [self.op("Mul", [self.op("Div", [c, den]), g]), b],
                       outs=[out] if out else None)

    def reduce_mean(self, x, axes, opset):
        if opset >= 18:
            return self.op("ReduceMean", [x, self.const("axes", np.array(axes, np.int64))],
                           keepdims=1)
        return self.op("ReduceMean", [x], axes=axes, keepdims=1)

    def gelu_erf(self, x):
        """x * 0.5 * (1 + erf(x / sqrt(2))) as torch.onnx.export writes F.gelu."""
        e = self.op("Erf", [self.op("Div", [x, self.const("sqrt2", np.float32(math.sqrt(2)))])])
        h = self.op("Mul", [self.op("Add", [e, self.const("one", np.float32(1.0))]),
                            self.const("half", np.float32(0.5))])
        return self.op("Mul", [x, h])

    def gelu_tanh(self, x):
        """GPT-2's 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))."""
        cube = self.op("Pow", [x, self.const("three", np.float32(3.0))])
        inner = self.op("Add", [x, self.op("Mul", [cube, self.const("c", np.float32(0.044715))])])
        t = self.op("Tanh", [self.op("Mul", [inner, self.const(
            "k", np.float32(math.sqrt(2.0 / math.pi)))])])
        half_x = self.op("Mul", [x, self.const("half", np.float32(0.5))])
        return self.op("Mul", [half_x, self.op("Add", [t, self.const("one", np.float32(1.0))])])

    def attention_decomposed(self, mask=None, scale_mul=False):
        """Graph inputs q, k, v [B, H, S, Dh=8] -> MatMul(q, Transpose(k)) / sqrt(Dh) (or *
        1/sqrt(Dh)) (+ mask) -> Softmax -> MatMul(v) -> output y."""
        kt = self.op("Transpose", ["k"], perm=[0, 1, 3, 2])
        s = self.op("MatMul", ["q", kt])
        if scale_mul:
            s = self.op("Mul", [s, self.const("scale", np.float32(1 / math.sqrt(8)))])
        else:
            s = self.op("Div", [s, self.const("sqrt_dh", np.float32(math.sqrt(8)))])
        if mask is not None:
            s = self.op("Add", [s, mask])
        p = self.op("Softmax", [s], axis=-1)
        self.op("MatMul", [p, "v"], outs=["y"], name="attn_out")

    def dim(self, shape, i):
        """Shape -> Gather(i) -> Unsqueeze: dimension i as a 1-element int64 tensor."""
        g = self.op("Gather", [shape, self.const("idx", np.array(i, np.int64))], axis=0)
        return self.op("Unsqueeze", [g, self.const("axes0", np.array([0], np.int64))])

    def model(self, inputs, outputs, opset, name):
        return make_model(self.nodes, inputs, outputs, self.inits, opset=opset, name=name)


def mlp(opset=17, d_in=64, hidden=128, classes=10):
    """x [N, 1, 8, 8] -> Flatten -> Gemm/Relu -> MatMul+Add/Relu -> Gemm -> logits, probs."""
    n = Net(1)
    side = int(math.isqrt(d_in))
    x = n.op("Flatten", ["x"], axis=1)
    h = n.op("Relu", [n.gemm(x, d_in, hidden, "fc1")])
    h = n.op("Relu", [n.linear(h, hidden, hidden, "fc2")])
    n.op("Gemm", [h, n.init("fc3.weight", weight(n.rng, (classes, hidden), hidden)),
                  n.init("fc3.bias", np.zeros(classes, np.float32))], transB=1,
         outs=["logits"], name="fc3")
    n.op("Softmax", ["logits"], axis=-1, outs=["probs"], name="softmax")
    m = n.model([value_info("x", F32, ["batch", 1, side, side])], ["logits", "probs"],
                opset, "mlp")

    def feeds(batch, seed=0):
        r = np.random.default_rng(seed)
        return {"x": uni(r, (batch, 1, side, side))}
    return m, feeds


def _conv_bn(n, x, cin, cout, k, stride, pad, base, relu=True):
    w = n.init(base + ".weight", weight(n.rng, (cout, cin, k, k), cin * k * k))
    y = n.op("Conv", [x, w], kernel_shape=[k, k], strides=[stride, stride],
             pads=[pad] * 4, dilations=[1, 1], group=1)
    scale = n.init(base + ".bn.weight", (1 + 0.1 * n.rng.standard_normal(cout)).astype(
        np.float32))
    bias = n.init(base + ".bn.bias", (0.1 * n.rng.standard_normal(cout)).astype(np.float32))
    mean = n.init(base + ".bn.running_mean", (0.1 * n.rng.standard_normal(cout)).astype(
        np.float32))
    var = n.init(base + ".bn.running_var", n.rng.uniform(0.5, 1.5, cout).astype(np.float32))
    y = n.op("BatchNormalization", [y, scale, bias, mean, var], epsilon=1e-5, momentum=0.9)
    return n.op("Relu", [y]) if relu else y


def resnet(opset=13, ch=16, size=16, classes=10):
    """A ResNet-style CNN: stem Conv/BN/Relu/MaxPool, a basic block, a downsampling block
    (1x1 stride-2 shortcut), GlobalAveragePool, Flatten, Gemm."""
    n = Net(2)
    y = _conv_bn(n, "x", 3, ch, 3, 1, 1, "stem")
    y = n.op("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    h = _conv_bn(n, y, ch, ch, 3, 1, 1, "layer1.conv1")
    h = _conv_bn(n, h, ch, ch, 3, 1, 1, "layer1.conv2", relu=False)
    y = n.op("Relu", [n.op("Add", [h, y])])
    h = _conv_bn(n, y, ch, 2 * ch, 3, 2, 1, "layer2.conv1")
    h = _conv_bn(n, h, 2 * ch, 2 * ch, 3, 1, 1, "layer2.conv2", relu=False)
    sc = _conv_bn(n, y, ch, 2 * ch, 1, 2, 0, "layer2.downsample", relu=False)
    y = n.op("Relu", [n.op("Add", [h, sc])])
    y = n.op("Flatten", [n.op("GlobalAveragePool", [y])], axis=1)
    n.op("Gemm", [y, n.init("fc.weight", weight(n.rng, (classes, 2 * ch), 2 * ch)),
                  n.init("fc.bias", np.zeros(classes, np.float32))], transB=1,
         outs=["logits"], name="fc")
    m = n.model([value_info("x", F32, ["batch", 3, size, size])], ["logits"], opset, "resnet")

    def feeds(batch, seed=0):
        r = np.random.default_rng(seed)
        return {"x": uni(r, (batch, 3, size, size))}
    return m, feeds


def _split_heads(n, x, heads, dh, perm):
    """[B, S, D] -> [B, H, S, Dh] (perm [0,2,1,3]) or [B, H, Dh, S] (perm [0,2,3,1]), the
    target shape from Shape -> Gather -> Unsqueeze -> Concat of x."""
    shp = n.op("Shape", [x])
    target = n.op("Concat", [n.dim(shp, 0), n.dim(shp, 1),
                             n.const("heads", np.array([heads, dh], np.int64))], axis=0)
    return n.op("Transpose", [n.op("Reshape", [x, target])], perm=perm)


def _merge_heads(n, a, d):
    """[B, H, S, Dh] -> [B, S, D] (Reshape with 0 = copy the input's dimension)."""
    t = n.op("Transpose", [a], perm=[0, 2, 1, 3])
    return n.op("Reshape", [t, n.const("merge", np.array([0, 0, d], np.int64))])


def bert(opset=17, vocab=50, max_pos=16, d=32, heads=4, ff=64):
    """A BERT-style encoder: embeddings (word, position from Range over the sequence length,
    token type 0 from ConstantOfShape) with LayerNormalization; one layer of attention whose
    additive mask is built from attention_mask by Cast/Unsqueeze/Expand/Equal/Where, decomposed
    layer norms, an Erf GELU; a tanh pooler over the first token."""
    n = Net(3)
    dh = d // heads
    shp = n.op("Shape", ["input_ids"])
    seq = n.op("Gather", [shp, n.const("one_i", np.array(1, np.int64))], axis=0)
    pos = n.op("Range", [n.const("zero", np.array(0, np.int64)), seq,
                         n.const("step", np.array(1, np.int64))])
    pos = n.op("Unsqueeze", [pos, n.const("axes0", np.array([0], np.int64))])
    tok = n.op("ConstantOfShape", [shp], value=numpy_helper.from_array(np.array([0], np.int64)))
    emb = n.op("Gather", [n.init("word_embeddings", (0.5 * n.rng.standard_normal(
        (vocab, d))).astype(np.float32)), "input_ids"], axis=0)
    emb = n.op("Add", [emb, n.op("Gather", [n.init("position_embeddings", (
        0.5 * n.rng.standard_normal((max_pos, d))).astype(np.float32)), pos], axis=0)])
    emb = n.op("Add", [emb, n.op("Gather", [n.init("token_type_embeddings", (
        0.5 * n.rng.standard_normal((2, d))).astype(np.float32)), tok], axis=0)])
    h = n.layer_norm(emb, d, "embeddings.LayerNorm", eps=1e-12)
    # the mask: [B, S] int64 -> [B, 1, S, S] float, 0 where attended, float32 min elsewhere
    m = n.op("Unsqueeze", [n.op("Cast", ["attention_mask"], to=F32),
                           n.const("axes12", np.array([1, 2], np.int64))])
    full = n.op("Concat", [n.dim(shp, 0), n.const("one1", np.array([1], np.int64)),
                           n.dim(shp, 1), n.dim(shp, 1)], axis=0)
    m = n.op("Expand", [m, full])
    masked = n.op("Equal", [m, n.const("zf", np.float32(0.0))])
    bias = n.op("Where", [masked, n.const("neg", np.float32(np.finfo(np.float32).min)),
                          n.const("zf2", np.float32(0.0))])
    q = _split_heads(n, n.linear(h, d, d, "attn.query"), heads, dh, [0, 2, 1, 3])
    kt = _split_heads(n, n.linear(h, d, d, "attn.key"), heads, dh, [0, 2, 3, 1])
    v = _split_heads(n, n.linear(h, d, d, "attn.value"), heads, dh, [0, 2, 1, 3])
    s = n.op("Div", [n.op("MatMul", [q, kt]), n.const("sqrt_dh", np.float32(math.sqrt(dh)))])
    p = n.op("Softmax", [n.op("Add", [s, bias])], axis=-1)
    a = _merge_heads(n, n.op("MatMul", [p, v]), d)
    h = n.layer_norm_decomposed(n.op("Add", [n.linear(a, d, d, "attn.output"), h]), d,
                                "attn.LayerNorm", 1e-12, opset)
    f = n.linear(n.gelu_erf(n.linear(h, d, ff, "intermediate")), ff, d, "output")
    n.layer_norm_decomposed(n.op("Add", [f, h]), d, "output.LayerNorm", 1e-12, opset,
                            out="last_hidden_state")
    first = n.op("Gather", ["last_hidden_state", n.const("zero_i", np.array(0, np.int64))],
                 axis=1)
    n.op("Tanh", [n.gemm(first, d, d, "pooler")], outs=["pooler_output"], name="pooler_tanh")
    m = n.model([value_info("input_ids", I64, ["batch", "sequence"]),
                 value_info("attention_mask", I64, ["batch", "sequence"])],
                ["last_hidden_state", "pooler_output"], opset, "bert")

    def feeds(batch, seq=8, seed=0):
        r = np.random.default_rng(seed)
        ids = r.integers(0, vocab, (batch, seq)).astype(np.int64)
        mask = np.ones((batch, seq), np.int64)
        for b in range(batch):  # padding at the end of every other sequence
            if b % 2 == 1:
                mask[b, seq - 1 - (b % max(1, seq - 1)):] = 0
        return {"input_ids": ids, "attention_mask": mask}
    return m, feeds


def gpt2(opset=18, vocab=64, max_pos=32, d=32, heads=4, causal="slice"):
    """A GPT-2-style decoder block: token and position embeddings, decomposed layer norm, a
    fused QKV projection Split in three, a causal mask (causal='slice': Slice of a constant
    lower triangle by the sequence length; 'trilu': Trilu over ConstantOfShape), masked fill
    with Where, a tanh GELU with Pow, the final layer norm and tied logits."""
    n = Net(4)
    dh = d // heads
    wte = (0.5 * n.rng.standard_normal((vocab, d))).astype(np.float32)
    shp = n.op("Shape", ["input_ids"])
    seq = n.op("Gather", [shp, n.const("one_i", np.array(1, np.int64))], axis=0)
    pos = n.op("Range", [n.const("zero", np.array(0, np.int64)), seq,
                         n.const("step", np.array(1, np.int64))])
    h = n.op("Add", [n.op("Gather", [n.init("wte", wte), "input_ids"], axis=0),
                     n.op("Gather", [n.init("wpe", (0.1 * n.rng.standard_normal(
                         (max_pos, d))).astype(np.float32)), pos], axis=0)])
    x = n.layer_norm_decomposed(h, d, "ln_1", 1e-5, opset)
    qkv = n.linear(x, d, 3 * d, "attn.c_attn")
    if opset >= 18:
        q, k, v = n.op("Split", [qkv], nout=3, axis=2, num_outputs=3)
    else:
        q, k, v = n.op("Split", [qkv, n.const("split", np.array([d, d, d], np.int64))],
                       nout=3, axis=-1)
    q = _split_heads(n, q, heads, dh, [0, 2, 1, 3])
    kt = _split_heads(n, k, heads, dh, [0, 2, 3, 1])
    v = _split_heads(n, v, heads, dh, [0, 2, 1, 3])
    s = n.op("Div", [n.op("MatMul", [q, kt]), n.const("sqrt_dh", np.float32(math.sqrt(dh)))])
    seq1 = n.op("Unsqueeze", [seq, n.const("axes0", np.array([0], np.int64))])
    if causal == "slice":
        tri = np.tril(np.ones((max_pos, max_pos), bool))[None, None]
        keep = n.op("Slice", [n.init("attn.bias", tri), n.const("s0", np.array([0, 0], np.int64)),
                              n.op("Concat", [seq1, seq1], axis=0),
                              n.const("ax23", np.array([2, 3], np.int64))])
    else:
        ones = n.op("ConstantOfShape", [n.op("Concat", [seq1, seq1], axis=0)],
                    value=numpy_helper.from_array(np.array([1.0], np.float32)))
        keep = n.op("Cast", [n.op("Trilu", [ones], upper=0)], to=BOOL)
    s = n.op("Where", [keep, s, n.const("minval", np.float32(np.finfo(np.float32).min))])
    p = n.op("Softmax", [s], axis=-1)
    a = _merge_heads(n, n.op("MatMul", [p, v]), d)
    h = n.op("Add", [h, n.linear(a, d, d, "attn.c_proj")])
    x = n.layer_norm_decomposed(h, d, "ln_2", 1e-5, opset)
    f = n.linear(n.gelu_tanh(n.linear(x, d, 4 * d, "mlp.c_fc")), 4 * d, d, "mlp.c_proj")
    h = n.op("Add", [h, f])
    x = n.layer_norm_decomposed(h, d, "ln_f", 1e-5, opset)
    n.op("MatMul", [x, n.init("lm_head", np.ascontiguousarray(wte.T))], outs=["logits"],
         name="lm_head")
    m = n.model([value_info("input_ids", I64, ["batch", "sequence"])], ["logits"], opset,
                f"gpt2-{causal}")

    def feeds(batch, seq=8, seed=0):
        r = np.random.default_rng(seed)
        return {"input_ids": r.integers(0, vocab, (batch, seq)).astype(np.int64)}
    return m, feeds


MODELS = {"mlp": mlp, "resnet": resnet, "bert": bert, "gpt2": gpt2}
