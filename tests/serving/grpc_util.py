"""
grpc_util - what the gRPC serving tests share: a tritonclient.grpc client of a ServingDaemon,
checks of tritonclient errors (status code and message), raw calls that bypass tritonclient
(garbage bytes, typed contents), and reference outputs from rtxrun for the example models
(their safetensors weights bound as graph inputs, as the model loader binds them).
"""

import json
import struct
import subprocess
from pathlib import Path

import numpy as np

import serving_harness as sh
from serving_harness import harness

import grpc  # noqa: E402
import tritonclient.grpc as tg  # noqa: E402
from tritonclient.grpc import service_pb2, service_pb2_grpc  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

SERVICE = "/inference.GRPCInferenceService/"
TIMEOUT = 30.0 * sh.SLOW


class GrpcDaemon(sh.ServingDaemon):
    """A ServingDaemon without its HTTP server: these tests exercise the gRPC service alone."""

    def argv(self, port):
        a = [x for x in super().argv(port) if not str(x).startswith("--http.listen=")]
        return a + ["--http.listen="]


def client(daemon):
    return tg.InferenceServerClient(daemon.address)


def expect_error(fn, code, *needles, daemon=None, what=""):
    """fn() must raise InferenceServerException with gRPC status `code` ("NOT_FOUND", ...)
    and a message naming every needle (case-insensitive). Returns the exception."""
    try:
        r = fn()
    except InferenceServerException as e:
        status, msg = str(e.status()), e.message() or ""
        ex = daemon.log_excerpt(1500) if daemon else ""
        assert status == f"StatusCode.{code}", \
            f"{what}: expected {code}, got {status}: {msg!r}{ex}"
        for n in needles:
            assert n.lower() in msg.lower(), f"{what}: {code} message {msg!r} lacks {n!r}{ex}"
        return e
    raise AssertionError(f"{what}: expected {code}, but the call succeeded: {str(r)[:300]!r}")


def raw_call(daemon, method, payload, timeout=TIMEOUT):
    """Calls a method with raw request bytes; returns the raw response bytes."""
    with grpc.insecure_channel(daemon.address) as ch:
        fn = ch.unary_unary(SERVICE + method, request_serializer=None,
                            response_deserializer=None)
        return fn(payload, timeout=timeout)


def stub_call(daemon, method, request, timeout=TIMEOUT):
    """Calls a method through Triton's generated stub with a request message."""
    with grpc.insecure_channel(daemon.address) as ch:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(ch)
        return getattr(stub, method)(request, timeout=timeout)


def assert_serving(daemon, c=None):
    """The daemon is alive and still answers inference."""
    c = c or client(daemon)
    assert c.is_server_live(), f"rtxd not live{daemon.log_excerpt()}"
    out = infer_simple(c, np.arange(16, dtype=np.int32)[None], np.ones((1, 16), np.int32))
    assert (out["OUTPUT0"] == np.arange(1, 17)).all()


def inputs(*pairs):
    """[InferInput] from (name, array) pairs, data set as raw contents."""
    res = []
    for name, a in pairs:
        dt = "BOOL" if a.dtype == np.bool_ else tg.np_to_triton_dtype(a.dtype)
        i = tg.InferInput(name, list(a.shape), dt)
        i.set_data_from_numpy(a)
        res.append(i)
    return res


def infer_simple(c, a, b, **kw):
    r = c.infer("simple", inputs(("INPUT0", a), ("INPUT1", b)), **kw)
    return {n: r.as_numpy(n) for n in ("OUTPUT0", "OUTPUT1")}


# ------------------------------------------------------------------------------------------
# Reference outputs through rtxrun
# ------------------------------------------------------------------------------------------

_ST_DTYPES = {"F32": np.float32, "F16": np.float16, "I8": np.int8, "I32": np.int32,
              "I64": np.int64, "U8": np.uint8, "BOOL": np.bool_}


def read_safetensors(path):
    """{name: array} of a safetensors file (the dtypes the examples use)."""
    b = Path(path).read_bytes()
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8:8 + n])
    out = {}
    for name, v in header.items():
        if name == "__metadata__":
            continue
        lo, hi = v["data_offsets"]
        out[name] = np.frombuffer(b[8 + n + lo:8 + n + hi],
                                  dtype=_ST_DTYPES[v["dtype"]]).reshape(v["shape"])
    return out


def mlp_numpy(model_dir, x):
    """probs of the model in model_dir (the example mlp's graph and weights) for x, from the
    NumPy interpreter of tests/interop/rtxgraph.py: the graph file evaluated in float64 and
    rounded once, the weights of model.safetensors bound as graph inputs as the model loader
    binds them - a reference independent of rtxd's kernels and of its batching."""
    v = Path(model_dir) / "1"
    feeds = dict(read_safetensors(v / "model.safetensors"))
    feeds["x"] = x
    return harness.rg.Interpreter(harness.rg.load_graph(v / "model.rtxg")).run(feeds)["probs"].a


def rtxrun_outputs(model_dir, feeds, workdir):
    """Runs version 1 of the model in model_dir through rtxrun with `feeds` and the model's
    weights as inputs; returns {output name: array}."""
    model_dir, workdir = Path(model_dir), Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    graph = model_dir / "1" / "model.rtxg"
    weights = model_dir / "1" / "model.safetensors"
    all_feeds = dict(read_safetensors(weights)) if weights.exists() else {}
    all_feeds.update(feeds)
    argv = [str(harness.need_binary("rtxrun")), str(graph), "--quiet",
            "--output-dir", str(workdir / "out")]
    for name, a in all_feeds.items():
        p = workdir / f"in_{name}.npy"
        np.save(p, np.ascontiguousarray(a))
        argv += ["--input", f"{name}={p}"]
    p = subprocess.run(argv, capture_output=True, timeout=120 * sh.SLOW,
                       env=harness.clean_env())
    assert p.returncode == 0, f"rtxrun failed: {argv}\n{p.stdout!r}\n{p.stderr!r}"
    return {f.stem: np.load(f) for f in (workdir / "out").glob("*.npy")}
