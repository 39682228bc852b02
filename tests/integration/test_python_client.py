"""
The Python client package (client/python, import name rtxd) against a real rtxd. The venv has
it installed (the Makefile's venv rule); this module installs nothing.

Checks: rtxd.Graph encodes byte for byte as rtxgraph.py's independent builder does, and
refuses what it can see is wrong; its enums match the generated rtx.v1 ones; a graph job with
NumPy inputs gives outputs equal to NumPy's computation (and to rtxd's sha256 of them); every
DataType travels both ways exactly (bf16 rounded as the reference rounds); Wait with a progress
callback and with text progress, a wait that times out; cancel of a queued and a running job,
an expiring job, outputs and result() of jobs that did not succeed; idempotency keys; listing
by labels and states, page by page; bad input (an unknown input, a wrong dtype, an unknown op)
raising InvalidArgument with exactly the daemon's message and a request id the daemon logged;
NotFound, Unavailable, Overloaded with its retry hint; an .rtxg file; an .onnx model made with
onnx.helper against onnxruntime; and the package type-checks under mypy --strict.
"""

import hashlib
import subprocess
import sys
import textwrap
import time
import uuid
from datetime import timedelta
from pathlib import Path

import grpc
import numpy as np
import pytest

import harness as h
from harness import rg

try:
    import rtxd
    from rtxd import proto as rtxd_proto
except ImportError as e:  # pragma: no cover - environment problem
    raise ImportError(f"the rtxd package is not installed in this venv ({e}): the Makefile's "
                      "venv rule installs client/python (make build/venv/.ok)") from e

DAEMON_KW = {"workers": 1}
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def rc(daemon):
    with rtxd.Client(daemon.address, timeout=h.RPC_TIMEOUT,
                     options=[("grpc.enable_http_proxy", 0)]) as c:
        yield c


def uniq():
    return uuid.uuid4().hex[:12]


def long_graph(n=None):
    """harness.long_graph (~1 s of GEMMs on one core), read back through rtxd.Graph, under a
    name of its own: the scheduler has learned no cost for it (admission estimates it at
    scheduler.default_cost_us), so a deadline behind it can be admitted."""
    return rtxd.Graph.from_bytes(h.long_graph(n, name=f"py-long-{uniq()}").bytes())


def wait_running(job, timeout=30.0):
    """Waits until the job runs: the progress callback stops the wait by raising."""
    class Running(Exception):
        pass

    def stop_when_running(j):
        assert not j.state.terminal, f"job {j.id} ended {j.state.name} before running: {j.reason}"
        if j.state is rtxd.JobState.RUNNING:
            raise Running()

    with pytest.raises(Running):
        job.wait(timeout * h.SLOW, progress=stop_when_running)
    assert job.state is rtxd.JobState.RUNNING


# ------------------------------------------------------------------------------------------
# Without a daemon: the builder and the enums
# ------------------------------------------------------------------------------------------

def encoding_case(b, init, attr):
    """The same graph through either builder (rtxd.Graph or rtxgraph.GraphBuilder: the same
    method signatures but the initializer's name); init and attr are that builder's."""
    rng = np.random.default_rng(3)
    b.input("x", "f32", [-1, 4])
    b.input("any", "i32", None)
    init("w", rng.standard_normal((4, 3)).astype(np.float32))
    init("wh", rng.standard_normal((3,)).astype(np.float16))
    init("wb", rng.standard_normal((2, 2)).astype(np.float32), "bf16")
    init("idx", np.array([[0, 2], [1, 1]], np.int64))
    init("mask", np.array([True, False, True]))
    b.node("gemm", ["x", "w"], "h", alpha=0.5, trans_b=0)
    b.node("gelu", ["h"], "g", approximate="tanh")
    b.node("reshape", ["g"], "r", name="flat", shape=[-1])
    b.node("constant", [], "c", value=np.arange(3, dtype=np.float32))
    b.node("layer_norm", ["g", None], "ln", epsilon=1e-5)
    b.node("slice", ["r"], "s", starts=[0], ends=[2], steps=attr("ints", []))
    b.node("rope", ["g", "g", "g"], "q", interleaved=True)
    b.output("ln")
    b.output("s", "f32", [2])
    return b


def test_graph_encodes_as_rtxgraph_does():
    ours = rtxd.Graph("encode")
    encoding_case(ours, ours.initializer, rtxd.Attr)
    ref = rg.GraphBuilder("encode")
    encoding_case(ref, ref.init, rg.Attr)
    assert ours.to_bytes() == ref.bytes()
    again = rtxd.Graph.from_bytes(ref.bytes())
    assert again.to_bytes() == ref.bytes()
    assert again.outputs == ["ln", "s"]
    assert again.inputs == {"x": (rtxd.DataType.F32, (-1, 4)), "any": (rtxd.DataType.I32, None)}
    # None is -1; a dtype may be NumPy's
    g = rtxd.Graph("encode")
    g.input("x", np.float32, [None, 4])
    assert g.inputs == {"x": (rtxd.DataType.F32, (-1, 4))}
    # node names follow the builder's count; a default output is named after its node
    assert ours.node("relu", ["c"]) == "relu_8"


def test_graph_refuses_what_it_can_see():
    g = rtxd.Graph("bad")
    g.input("x", "f32", [2])
    g.initializer("w", np.ones(2, np.float32))
    with pytest.raises(ValueError, match="value 'x' is already defined by an input"):
        g.initializer("x", np.ones(2, np.float32))
    with pytest.raises(ValueError, match="'w' is already defined by an initializer"):
        g.node("relu", ["x"], "w")
    g.node("add", ["x", "w"], "y", name="sum")
    with pytest.raises(ValueError, match="node 'sum': a node of that name already exists"):
        g.node("relu", ["y"], "z", name="sum")
    with pytest.raises(TypeError, match="float64 has no rtx dtype.*float32"):
        g.initializer("w64", np.ones(2))
    with pytest.raises(TypeError, match="attribute 'axes': cannot tell the type"):
        g.node("reduce_sum", ["y"], "r", axes=[1, "a"])
    with pytest.raises(ValueError, match="bad dimension -2"):
        g.input("x2", "f32", [-2])
    with pytest.raises(TypeError, match="not a dtype"):
        g.input("x3", 3.5, [1])
    with pytest.raises(TypeError, match="inputs must be a list"):
        g.node("relu", "y", "z")
    with pytest.raises(ValueError, match="has no outputs"):
        g.to_bytes()
    g.node("relu", ["nowhere"], "z")
    g.output("y")
    with pytest.raises(ValueError, match="node 'relu_2': input 'nowhere' is not an input"):
        g.to_bytes()
    # nothing of a refused call stayed behind: two nodes, the names of refused ones free
    assert len(g) == 2 and g.outputs == ["y"]
    assert g.node("relu", ["x"], "w2", name="relu_ok") == "w2"


def test_enums_match_the_protocol():
    pb_dt = rtxd_proto.graph_pb2.DataType
    assert {f"DATA_TYPE_{d.name}": int(d) for d in rtxd.DataType} == \
        {k: v for k, v in pb_dt.items() if v != 0}
    pb_js = rtxd_proto.jobs_pb2.JobState
    assert {f"JOB_STATE_{s.name}": int(s) for s in rtxd.JobState} == dict(pb_js.items())
    pb_rp = rtxd_proto.jobs_pb2.RestartPolicy
    assert {int(p) for p in rtxd.RestartPolicy} == set(pb_rp.values())
    assert rtxd.JobState.parse("succeeded") is rtxd.JobState.SUCCEEDED
    assert rtxd.JobState.parse("JOB_STATE_FAILED") is rtxd.JobState.FAILED
    assert [s for s in rtxd.JobState if s.terminal] == [
        rtxd.JobState.SUCCEEDED, rtxd.JobState.FAILED, rtxd.JobState.CANCELLED,
        rtxd.JobState.EXPIRED]


def test_generated_code_stays_inside_the_package():
    """rtxd's rtx.v1 modules neither are nor collide with the top-level rtx package the test
    suites generate (harness imports it): each has its own descriptor pool."""
    assert rtxd_proto.graph_pb2.__name__ == "rtxd._proto.rtx.v1.graph_pb2"
    assert rtxd_proto.graph_pb2.Graph is not h.graph_pb2.Graph
    assert rtxd_proto.graph_pb2.DESCRIPTOR.pool is not h.graph_pb2.DESCRIPTOR.pool


# ------------------------------------------------------------------------------------------
# Jobs
# ------------------------------------------------------------------------------------------

def mlp(d_in=16, d_hidden=32, d_out=8, seed=0):
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((d_in, d_hidden)) / 4).astype(np.float32)
    b1 = rng.standard_normal(d_hidden).astype(np.float32)
    w2 = (rng.standard_normal((d_hidden, d_out)) / 4).astype(np.float32)
    b2 = rng.standard_normal(d_out).astype(np.float32)
    g = rtxd.Graph("py_mlp")
    x = g.input("x", np.float32, [None, d_in])
    h1 = g.node("gemm", [x, g.initializer("w1", w1), g.initializer("b1", b1)], name="fc1")
    a = g.node("relu", [h1], name="act")
    h2 = g.node("matmul", [a, g.initializer("w2", w2)], name="fc2")
    logits = g.node("add", [h2, g.initializer("b2", b2)], "logits")
    g.output(g.node("softmax", [logits], "probs", axis=-1))
    g.output(logits)

    def reference(xv):
        x64 = xv.astype(np.float64)
        hid = np.maximum(x64 @ w1 + b1, 0.0)
        lg = hid @ w2 + b2
        e = np.exp(lg - lg.max(axis=-1, keepdims=True))
        return {"probs": e / e.sum(axis=-1, keepdims=True), "logits": lg}
    return g, reference


def test_graph_job_equals_numpy(rc):
    g, reference = mlp()
    x = np.random.default_rng(7).standard_normal((5, 16)).astype(np.float32)
    job = rc.submit(g, {"x": x}, labels={"suite": "py"})
    assert job.id and not job.deduplicated
    assert job.wait(60 * h.SLOW) is job
    assert job.state is rtxd.JobState.SUCCEEDED, job.reason
    assert job.done and job.device == "cpu" and job.graph_name == "py_mlp"
    assert job.labels == {"suite": "py"} and job.attempts == 1 and job.run_ms > 0
    assert job.created <= job.started <= job.finished
    outs = job.outputs()
    want = reference(x)
    assert list(outs) == ["probs", "logits"]
    for name, got in outs.items():
        assert got.dtype == np.float32 and got.shape == (5, 8), name
        np.testing.assert_allclose(got, want[name], rtol=1e-5, atol=1e-6, err_msg=name)
        got[0, 0] = 1.0  # arrays are the caller's, writable
    info = {o.name: o for o in job.output_info}
    for name, arr in job.outputs().items():
        assert info[name].dtype is rtxd.DataType.F32 and info[name].shape == (5, 8)
        assert info[name].nbytes == arr.nbytes
        assert info[name].sha256 == hashlib.sha256(arr.astype("<f4").tobytes()).hexdigest()
    # run(): submit + result in one call
    again = rc.run(g, {"x": x}, timeout=60 * h.SLOW)
    np.testing.assert_array_equal(again["probs"], job.outputs()["probs"])


def test_every_dtype_round_trips(rc):
    rng = np.random.default_rng(11)
    arrays = {
        "f32": rng.standard_normal((2, 3)).astype(np.float32),
        "f16": rng.standard_normal((2, 3)).astype(np.float16),
        "i8": np.array([[-128, 127, 0], [1, -1, 5]], np.int8),
        "i32": np.array([[-2**31, 2**31 - 1, 0], [7, -7, 3]], np.int32),
        "i64": np.array([[-2**63, 2**63 - 1, 0], [9, -9, 2**40]], np.int64),
        "u8": np.array([[0, 255, 128], [1, 2, 3]], np.uint8),
        "bool": np.array([[True, False, True], [False, False, True]]),
    }
    bf_in = rng.standard_normal((2, 3)).astype(np.float32) * 100
    g = rtxd.Graph("dtypes")
    for name, a in arrays.items():
        g.input(name, a.dtype, a.shape)
        g.output(g.node("transpose", [name], f"t_{name}"))
    g.input("bf", "bf16", [2, 3])
    g.output(g.node("transpose", ["bf"], "t_bf"))
    g.input("x32", "f32", [2, 3])
    g.output(g.node("cast", ["x32"], "to_bf", to="bf16"))
    feeds = dict(arrays, bf=rtxd.Tensor(bf_in, "bf16"), x32=bf_in)
    outs = rc.run(g, feeds, timeout=60 * h.SLOW)
    for name, a in arrays.items():
        got = outs[f"t_{name}"]
        assert got.dtype == a.dtype, name
        np.testing.assert_array_equal(got, a.T, err_msg=name)
    # bf16 arrives as float32 holding the bf16 values: rounded to nearest even, as rtxgraph's
    # independent rounding does
    want = rg.bf16_round(bf_in)
    assert not np.array_equal(want, bf_in)
    assert outs["t_bf"].dtype == np.float32
    np.testing.assert_array_equal(outs["t_bf"], want.T)
    np.testing.assert_array_equal(outs["to_bf"], want)
    np.testing.assert_array_equal(rtxd.bf16_round(bf_in), want)
    assert rtxd.numpy_dtype("bf16") == np.float32


def test_wait_progress_callback(rc):
    feeds = h.long_feeds(5)
    job = rc.submit(long_graph(), feeds)
    seen = []

    def progress(j):
        assert j is job
        seen.append((j.state, j.device))

    job.wait(60 * h.SLOW, progress=progress)
    states = [s for s, _ in seen]
    assert states[-1] is rtxd.JobState.SUCCEEDED, (states, job.reason)
    assert len(states) >= 2 and states == sorted(states), states
    assert states[0] in (rtxd.JobState.QUEUED, rtxd.JobState.RUNNING)
    assert all(d == "cpu" for s, d in seen if s is not rtxd.JobState.QUEUED)
    outs = job.outputs()
    h.check_long_outputs(feeds, {k: rg.V(v, "f32") for k, v in outs.items()})


def test_wait_text_progress(rc, capsys):
    g, _ = mlp()
    job = rc.submit(g, {"x": np.ones((1, 16), np.float32)})
    job.wait(60 * h.SLOW, progress=True)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith(f"rtxd: job {job.id} ")]
    assert lines and "succeeded in" in lines[-1] and "on cpu" in lines[-1], err
    assert len(lines) == len(set(lines)), err


def test_wait_timeout_cancel_and_expiry(rc):
    running = rc.submit(long_graph(), h.long_feeds(1))
    wait_running(running)
    with pytest.raises(rtxd.DeadlineExceeded, match=f"job {running.id} is still running") as ei:
        running.wait(timeout=0.05)
    assert isinstance(ei.value, TimeoutError)
    # queued behind the running job (one worker): cancelled at once
    queued = rc.submit(long_graph(1), h.long_feeds(2))
    assert queued.state is rtxd.JobState.QUEUED
    assert queued.cancel().state is rtxd.JobState.CANCELLED
    # a deadline that passes while it is queued
    late = rc.submit(rtxd.Graph.from_bytes(h.TINY.bytes()), h.tiny_feeds(3), deadline=0.3)
    assert late.state is rtxd.JobState.QUEUED and late.deadline is not None
    time.sleep(0.5)
    # the running one stops at its next op
    running.cancel()
    assert running.wait(30 * h.SLOW).state is rtxd.JobState.CANCELLED
    assert late.wait(30 * h.SLOW).state is rtxd.JobState.EXPIRED, late.reason
    with pytest.raises(rtxd.FailedPrecondition) as ei:
        queued.outputs()
    assert queued.id in ei.value.message and ei.value.code is grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(rtxd.JobFailed) as ei:
        late.result()
    assert ei.value.job is late and "expired" in str(ei.value)
    # cancelling a job that has ended changes nothing
    assert queued.cancel().state is rtxd.JobState.CANCELLED


def test_idempotency_key(rc):
    g, _ = mlp()
    x = np.ones((2, 16), np.float32)
    key = f"py-{uniq()}"
    first = rc.submit(g, {"x": x}, idempotency_key=key)
    second = rc.submit(g, {"x": x * 2}, idempotency_key=key)
    assert second.id == first.id
    assert not first.deduplicated and second.deduplicated
    assert second.idempotency_key == key
    first.wait(60 * h.SLOW)
    np.testing.assert_array_equal(second.outputs()["logits"], first.outputs()["logits"])


def test_list_jobs(rc):
    g, _ = mlp()
    label = {"py-list": uniq()}
    t0 = time.time() - 1
    ids = [rc.submit(g, {"x": np.full((1, 16), i, np.float32)}, labels=label).id
           for i in range(3)]
    for jid in ids:
        rc.job(jid).wait(60 * h.SLOW)
    listed = list(rc.jobs(labels=label))
    assert [j.id for j in listed] == ids[::-1]  # newest first
    assert all(j.state is rtxd.JobState.SUCCEEDED for j in listed)
    assert [j.id for j in rc.jobs(labels=label, page_size=1)] == ids[::-1]
    assert [j.id for j in rc.jobs(labels=label, page_size=2, limit=2)] == ids[:0:-1]
    assert list(rc.jobs(labels=label, states=["failed", rtxd.JobState.CANCELLED])) == []
    assert len(list(rc.jobs(labels=label, states=["succeeded"]))) == 3
    hour = timedelta(hours=1)
    assert list(rc.jobs(labels=label, created_after=listed[0].created + hour)) == []
    assert len(list(rc.jobs(labels=label, created_after=t0, created_before=time.time() + 1))) == 3
    assert list(rc.jobs(labels=label, created_before=listed[-1].created - hour)) == []


def test_rtxg_file(rc, tmp_path):
    g, reference = mlp(seed=4)
    path = g.save(tmp_path / "mlp.rtxg")
    x = np.random.default_rng(1).standard_normal((3, 16)).astype(np.float32)
    outs = rc.run(path, {"x": x}, timeout=60 * h.SLOW)
    np.testing.assert_allclose(outs["probs"], reference(x)["probs"], rtol=1e-5, atol=1e-6)
    loaded = rtxd.Graph.load(path)
    assert loaded.to_bytes() == g.to_bytes()
    with pytest.raises(ValueError, match="not an rtx.v1.Graph"):
        rtxd.Graph.from_bytes(b"\x07garbage")


# ------------------------------------------------------------------------------------------
# Errors
# ------------------------------------------------------------------------------------------

def two_inputs():
    g = rtxd.Graph("inputs")
    g.input("alpha", "f32", [2, 3])
    g.input("beta_in", "i32", [-1, 3])
    c = g.node("cast", ["beta_in"], "bf", name="cast_beta", to="f32")
    g.output(g.node("add", ["alpha", c], "y", name="sum"))
    return g


A23 = np.ones((2, 3), np.float32)
B23 = np.ones((2, 3), np.int32)


@pytest.mark.parametrize("case,feeds,needles", [
    ("unknown input", {"alpha": A23, "beta_in": B23, "gamma": A23}, ("gamma",)),
    ("wrong dtype", {"alpha": A23.astype(np.float16), "beta_in": B23}, ("alpha", "f16")),
])
def test_bad_input_raises_the_daemons_message(daemon, rc, case, feeds, needles):
    g = two_inputs()
    with pytest.raises(rtxd.InvalidArgument) as ei:
        rc.submit(g, feeds)
    e = ei.value
    assert isinstance(e, ValueError) and e.code is grpc.StatusCode.INVALID_ARGUMENT
    for n in needles:
        assert n in e.message, f"{case}: {e.message!r}"
    # exactly what the daemon answers the same request through the generated stubs
    raw = h.expect_rpc_error(
        lambda: daemon.client().jobs.Submit(
            h.jobs_pb2.SubmitRequest.FromString(request_bytes(g, feeds)), timeout=h.RPC_TIMEOUT),
        grpc.StatusCode.INVALID_ARGUMENT, *needles, daemon=daemon, what=case)
    assert e.message == raw.details()
    assert str(e) == f"INVALID_ARGUMENT: {e.message}"
    # the request id the call carried is on the daemon's log line of the failed call
    assert e.request_id and e.request_id.startswith("rtxpy-")
    assert e.request_id in daemon.log()


def request_bytes(g, feeds):
    req = rtxd_proto.jobs_pb2.SubmitRequest(graph=g.to_proto())
    for name, a in feeds.items():
        req.inputs.append(rtxd.dtypes.encode(name, a))
    return req.SerializeToString()


def test_invalid_graph_and_client_side_refusals(rc):
    g = rtxd.Graph("unknown_op")
    g.input("x", "f32", [2])
    g.output(g.node("no_such_op", ["x"], "y", name="n0"))
    with pytest.raises(rtxd.InvalidArgument, match="n0.*no_such_op|no_such_op.*n0"):
        rc.submit(g, {"x": np.ones(2, np.float32)})
    # refused before any call: what the client can see
    with pytest.raises(TypeError, match="input 'alpha'.*float64.*float32"):
        rc.submit(two_inputs(), {"alpha": np.ones((2, 3)), "beta_in": B23})
    with pytest.raises(TypeError, match="cannot be sent as bf16"):
        rc.submit(two_inputs(), {"alpha": rtxd.Tensor(np.array(["a"]), "bf16")})
    with pytest.raises(TypeError, match="a job runs an rtxd.Graph"):
        rc.submit(42, {})
    with pytest.raises(FileNotFoundError, match="cannot read the job's ONNX model"):
        rc.submit("/nonexistent/model.onnx", {})


def test_not_found_unavailable_and_health(daemon, rc):
    with pytest.raises(rtxd.NotFound, match="not found") as ei:
        rc.job("j0123456789abcdef")
    assert isinstance(ei.value, LookupError)
    with pytest.raises(rtxd.NotFound):
        rc.job("j0123456789abcdef").outputs()
    assert rc.health().serving
    # nobody listens there: Unavailable (a ConnectionError) on the first call
    with rtxd.Client(f"127.0.0.1:{h.free_port()}", timeout=5 * h.SLOW,
                     options=[("grpc.enable_http_proxy", 0)]) as nobody:
        with pytest.raises(rtxd.Unavailable) as ei:
            nobody.submit(two_inputs(), {"alpha": A23, "beta_in": B23})
        assert isinstance(ei.value, ConnectionError)
    # a channel of the caller's own: used as is, left open at close
    ch = grpc.insecure_channel(daemon.address, options=[("grpc.enable_http_proxy", 0)])
    with rtxd.Client(channel=ch, timeout=h.RPC_TIMEOUT) as c:
        assert c.health().serving
    assert rtxd.Client(channel=ch, timeout=h.RPC_TIMEOUT).health().serving
    ch.close()


OVERLOAD_CONFIG = """
[lane.batch]
max_queued = 1
"""


def test_overloaded_with_retry_after(make_daemon, tmp_path):
    cfg = tmp_path / "rtxd.ini"
    cfg.write_text(OVERLOAD_CONFIG)
    d = make_daemon("overload", workers=1, config=cfg).start()
    label = {"py-overload": uniq()}
    with rtxd.Client(d.address, timeout=h.RPC_TIMEOUT,
                     options=[("grpc.enable_http_proxy", 0)]) as c:
        running = c.submit(long_graph(), h.long_feeds(1), lane="interactive", labels=label)
        wait_running(running)
        queued = c.submit(long_graph(1), h.long_feeds(2), lane="batch", labels=label)
        with pytest.raises(rtxd.Overloaded) as ei:
            c.submit(long_graph(1), h.long_feeds(3), lane="batch", labels=label)
        e = ei.value
        assert isinstance(e, rtxd.ResourceExhausted)
        assert e.code is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert e.reason == "lane_full" and e.device == "cpu", e.message
        assert e.retry_after is not None and 0 < e.retry_after < 60, e.message
        # refused jobs are not journaled
        assert {j.id for j in c.jobs(labels=label)} == {running.id, queued.id}
        for j in (queued, running):
            j.cancel()
            assert j.wait(30 * h.SLOW).state is rtxd.JobState.CANCELLED


# ------------------------------------------------------------------------------------------
# ONNX models
# ------------------------------------------------------------------------------------------

def onnx_mlp(d_in=6, d_hidden=10, d_out=4, seed=0):
    """x [N, d_in] -> Relu(x·W1 + b1)·W2 + b2, a dynamic batch, opset 17 (onnx.helper)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((d_in, d_hidden)).astype(np.float32)
    b1 = rng.standard_normal(d_hidden).astype(np.float32)
    w2 = rng.standard_normal((d_hidden, d_out)).astype(np.float32)
    b2 = rng.standard_normal(d_out).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["h0"], name="mm1"),
        helper.make_node("Add", ["h0", "B1"], ["h1"], name="add1"),
        helper.make_node("Relu", ["h1"], ["a"], name="relu"),
        helper.make_node("Gemm", ["a", "W2", "B2"], ["y"], name="gemm2"),
    ]
    graph = helper.make_graph(
        nodes, "py_onnx_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", d_in])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", d_out])],
        [numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(b1, "B1"),
         numpy_helper.from_array(w2, "W2"), numpy_helper.from_array(b2, "B2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def test_onnx_file_equals_onnxruntime(rc, tmp_path):
    import onnx
    import onnxruntime as ort
    model = onnx_mlp()
    path = tmp_path / "mlp.onnx"
    onnx.save(model, path)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for rows, source in ((3, path), (5, path.read_bytes()), (1, model)):
        x = np.random.default_rng(rows).standard_normal((rows, 6)).astype(np.float32)
        (want,) = sess.run(["y"], {"x": x})
        outs = rc.run(source, {"x": x}, timeout=60 * h.SLOW)
        assert list(outs) == ["y"] and outs["y"].shape == (rows, 4)
        np.testing.assert_allclose(outs["y"], want, rtol=1e-4, atol=1e-5,
                                   err_msg=f"{rows} rows from {type(source).__name__}")
    # a model rtxd cannot run: refused at submit, the daemon's message naming the op
    bad = onnx_mlp()
    bad.graph.node[2].op_type = "Hardmax"
    with pytest.raises(rtxd.InvalidArgument, match=r"Hardmax \(node 'relu', opset 17\)"):
        rc.submit(bad, {"x": np.ones((2, 6), np.float32)})


# ------------------------------------------------------------------------------------------
# Types
# ------------------------------------------------------------------------------------------

USER_CODE = '''
from typing import Dict
import numpy as np
import numpy.typing as npt
import rtxd


def double(address: str, x: npt.NDArray[np.float32]) -> Dict[str, object]:
    g = rtxd.Graph("double")
    g.input("x", np.float32, [None, x.shape[1]])
    y: str = g.node("add", ["x", "x"], "y")
    parts: list[str] = g.node("relu", [y], ["r"])
    g.output(parts[0])
    with rtxd.Client(address, timeout=10.0) as c:
        job: rtxd.Job = c.submit(g, {"x": x}, labels={"k": "v"}, deadline=5.0)
        state: rtxd.JobState = job.wait(timeout=30, progress=True).state
        try:
            return dict(job.outputs())
        except rtxd.Overloaded as e:
            delay: float | None = e.retry_after
            raise RuntimeError(f"{state} {delay}") from e
'''


def test_package_type_checks(tmp_path):
    """mypy --strict on the installed package (with its pyproject's settings) and on code
    that uses it."""
    user = tmp_path / "user.py"
    user.write_text(textwrap.dedent(USER_CODE))
    cfg = REPO / "client" / "python" / "pyproject.toml"
    for args in (["--config-file", str(cfg), "-p", "rtxd"], ["--strict", str(user)]):
        p = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "c"),
                            "--python-version", "3.10"] + args,
                           capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert p.returncode == 0, f"mypy {' '.join(args)}:\n{p.stdout}{p.stderr}"
