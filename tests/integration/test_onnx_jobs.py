"""
ONNX models as jobs: SubmitRequest.onnx_model through the gRPC API and `rtxctl submit
MODEL.onnx`, answers compared with onnxruntime on the same inputs; a dynamic batch dimension
resolved per job; a model rtxd cannot run (unsupported ops, malformed bytes, external data,
wrong inputs, both a graph and a model) refused at Submit with INVALID_ARGUMENT naming the
problem, the daemon serving on; a journaled ONNX job that survives a restart.
"""

import grpc
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as oh
from onnx import numpy_helper as nh

import harness as h
from harness import jobs_pb2

DAEMON_KW = {"workers": 1}
INVALID = grpc.StatusCode.INVALID_ARGUMENT


def mlp_model(opset=17):
    """x [N, 8] -> MatMul, Add, Relu, Gemm(transB), Softmax -> y [N, 3]; the batch is symbolic,
    the reshape target comes from the input's Shape (a shape sub-graph)."""
    rng = np.random.default_rng(7)
    w1 = nh.from_array(rng.standard_normal((8, 16)).astype(np.float32), "w1")
    b1 = nh.from_array(rng.standard_normal(16).astype(np.float32), "b1")
    w2 = nh.from_array(rng.standard_normal((3, 16)).astype(np.float32), "w2")
    idx = nh.from_array(np.array([0], np.int64), "idx")
    minus1 = nh.from_array(np.array([-1], np.int64), "minus1")
    nodes = [
        oh.make_node("Shape", ["x"], ["shape"]),
        oh.make_node("Gather", ["shape", "idx"], ["batch"], axis=0),
        oh.make_node("Concat", ["batch", "minus1"], ["target"], axis=0),
        oh.make_node("Reshape", ["x", "target"], ["x2"]),
        oh.make_node("MatMul", ["x2", "w1"], ["h"]),
        oh.make_node("Add", ["h", "b1"], ["hb"]),
        oh.make_node("Relu", ["hb"], ["r"]),
        oh.make_node("Gemm", ["r", "w2"], ["logits"], transB=1),
        oh.make_node("Softmax", ["logits"], ["y"], axis=-1),
    ]
    g = oh.make_graph(nodes, "mlp", [oh.make_tensor_value_info("x", T.FLOAT, ["N", 8])],
                      [oh.make_tensor_value_info("y", T.FLOAT, ["N", 3])],
                      [w1, b1, w2, idx, minus1])
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", opset)])


def reference(model, feeds):
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def submit_onnx(c, model_bytes, feeds, **fields):
    return c.submit(None, feeds, onnx_model=model_bytes, **fields)


@pytest.mark.parametrize("batch", [1, 5])
def test_onnx_job_matches_onnxruntime(daemon, batch):
    model = mlp_model()
    x = np.random.default_rng(batch).standard_normal((batch, 8)).astype(np.float32)
    with h.Client(daemon.address) as c:
        jid = submit_onnx(c, model.SerializeToString(), {"x": x}).job_id
        job = c.wait(jid)
        assert job.state == h.SUCCEEDED, job.reason
        outs, raw = c.outputs(jid)
    (want,) = reference(model, {"x": x})
    got = outs["y"].a
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    assert job.graph_name == "mlp"


def test_rtxctl_submits_an_onnx_file(daemon, tmp_path):
    model = mlp_model(opset=13)
    path = tmp_path / "mlp.onnx"
    onnx.save(model, path)
    x = np.random.default_rng(3).standard_normal((4, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = h.rtxctl("submit", str(path), "--input", f"x={tmp_path / 'x.npy'}", "--wait",
                 "--output-dir", str(tmp_path / "out"), address=daemon.address, check_rc=0)
    assert "succeeded" in r.out, r.describe()
    (want,) = reference(model, {"x": x})
    np.testing.assert_allclose(np.load(tmp_path / "out" / "y.npy"), want, rtol=1e-4,
                               atol=1e-6)
    # random inputs: the symbolic batch becomes 1
    r = h.rtxctl("--json", "submit", str(path), "--random-inputs", "--wait",
                 address=daemon.address, check_rc=0)
    assert '"SUCCEEDED"' in r.out or "succeeded" in r.out.lower(), r.describe()


def unsupported_model():
    nodes = [oh.make_node("Relu", ["x"], ["a"], name="ok"),
             oh.make_node("Hardmax", ["a"], ["b"], name="hm"),
             oh.make_node("NonMaxSuppression", ["b", "b"], ["c"], name="nms"),
             oh.make_node("Inverse", ["c"], ["y"], name="inv", domain="com.microsoft")]
    g = oh.make_graph(nodes, "bad", [oh.make_tensor_value_info("x", T.FLOAT, [2, 2])],
                      [oh.make_tensor_value_info("y", T.FLOAT, [2, 2])])
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17),
                                           oh.make_opsetid("com.microsoft", 1)])


def external_data_model():
    m = mlp_model()
    t = next(i for i in m.graph.initializer if i.name == "w1")
    t.ClearField("raw_data")
    t.data_location = T.EXTERNAL
    t.external_data.add(key="location", value="w1.bin")
    return m


BAD = [
    ("unsupported ops", lambda: unsupported_model().SerializeToString(),
     ["3 nodes with ops rtxd does not support", "Hardmax (node 'hm', opset 17)",
      "NonMaxSuppression (node 'nms', opset 17)", "com.microsoft.Inverse (node 'inv'"]),
    ("random bytes", lambda: np.random.default_rng(0).bytes(200), ["not an ONNX model"]),
    ("truncated", lambda: mlp_model().SerializeToString()[:150], ["not an ONNX model"]),
    ("external data", lambda: external_data_model().SerializeToString(),
     ["external data is not accepted"]),
    ("opset 12", lambda: mlp_model(opset=12).SerializeToString(),
     ["opset 12 is not supported", "13 to 23"]),
]


@pytest.mark.parametrize("what,make,needles", BAD, ids=[b[0] for b in BAD])
def test_bad_onnx_models_are_refused_at_submit(daemon, what, make, needles):
    x = np.ones((2, 8), np.float32) if what != "unsupported ops" else np.ones((2, 2), np.float32)
    with h.Client(daemon.address) as c:
        with pytest.raises(grpc.RpcError) as e:
            submit_onnx(c, make(), {"x": x})
        assert e.value.code() == INVALID, e.value
        for n in needles:
            assert n in e.value.details(), (n, e.value.details())
        assert c.health().status == 1  # SERVING
        # and a good model still runs
        jid = submit_onnx(c, mlp_model().SerializeToString(), {"x": np.ones((1, 8), np.float32)}
                          ).job_id
        assert c.wait(jid).state == h.SUCCEEDED


def test_wrong_inputs_and_both_graph_and_model(daemon):
    m = mlp_model().SerializeToString()
    cases = [
        ({"x": np.ones((2, 7), np.float32)}, "input 'x' dimension 1 is 7, the model declares 8"),
        ({"x": np.ones((2, 8), np.int32)}, "input 'x' is i32, the model declares f32"),
        ({"z": np.ones((2, 8), np.float32)}, "unknown input 'z'"),
        ({}, "missing input: x"),
    ]
    with h.Client(daemon.address) as c:
        for feeds, needle in cases:
            with pytest.raises(grpc.RpcError) as e:
                submit_onnx(c, m, feeds)
            assert e.value.code() == INVALID and needle in e.value.details(), \
                (needle, e.value.details())
        req = h.submit_request(h.GraphBuilder("g"), {}, onnx_model=m)
        with pytest.raises(grpc.RpcError) as e:
            c.jobs.Submit(req, timeout=h.RPC_TIMEOUT)
        assert e.value.code() == INVALID and "both a graph and an onnx_model" in \
            e.value.details()


def test_queued_onnx_job_survives_kill9(make_daemon):
    """An acknowledged ONNX job still queued behind a long job when rtxd is killed runs after
    the restart from its journaled request, with onnxruntime's answer."""
    d = make_daemon("crash", workers=1)
    d.start()
    model = mlp_model()
    x = np.random.default_rng(11).standard_normal((3, 8)).astype(np.float32)
    with h.Client(d.address) as c:
        long_id = c.submit_id(h.long_graph(), h.long_feeds(1))
        c.wait_for_state(long_id, h.RUNNING)
        jid = submit_onnx(c, model.SerializeToString(), {"x": x}).job_id
        assert c.get(jid).state == h.QUEUED
    d.kill9()
    d.restart()
    with h.Client(d.address) as c:
        job = c.wait(jid)
        assert job.state == h.SUCCEEDED, job.reason
        outs, _ = c.outputs(jid)
    (want,) = reference(model, {"x": x})
    np.testing.assert_allclose(outs["y"].a, want, rtol=1e-4, atol=1e-6)
