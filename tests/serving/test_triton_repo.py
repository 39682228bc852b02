"""
Triton model repositories served by rtxd: ONNX models built here with onnx.helper, laid out as
Triton's docs lay them out (config.pbtxt beside 1/model.onnx; model.onnx as a directory with
its external data; default_model_filename; no config at all, auto-completed from the model),
queried with tritonclient over gRPC and HTTP, every answer compared with onnxruntime's on the
same inputs (f32 within 1e-4 relative). Also: dynamic batching merges concurrent requests,
dynamic_batching's priority levels and queue policies act on the lanes, fields rtxd does not
act on are logged by name, an unknown field or unsupported setting fails that model's load
naming it, and each kind of syntax error in config.pbtxt fails the load with
config.pbtxt:LINE:COL while rtxd serves the other models.
"""

import concurrent.futures
import json
import re
import time

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import grpc_util as gu
import http_util as hu
import serving_harness as sh

import tritonclient.http as th  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5


# ------------------------------------------------------------------------------------------
# Models
# ------------------------------------------------------------------------------------------

def finish(graph, path, external=None):
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    onnx.checker.check_model(m)
    path.parent.mkdir(parents=True, exist_ok=True)
    if external:
        onnx.save_model(m, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=external, size_threshold=0)
    else:
        onnx.save(m, str(path))
    return path


def mlp(path, seed, n_in=8, hidden=16, n_out=4, external=None):
    """x [N, n_in] -> softmax(relu(x W1 + b1) W2 + b2) [N, n_out]."""
    rng = np.random.default_rng(seed)
    init = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in (
        ("w1", rng.standard_normal((n_in, hidden)) / 3), ("b1", rng.standard_normal(hidden)),
        ("w2", rng.standard_normal((hidden, n_out)) / 3), ("b2", rng.standard_normal(n_out)))]
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["z"]),
             helper.make_node("Softmax", ["z"], ["y"], axis=-1)]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                       ["N", n_in])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", n_out])],
                          init)
    return finish(g, path, external)


def simple(path):
    """Triton's "simple" in ONNX: INPUT0, INPUT1 INT32 [N, 16] -> sum and difference."""
    io = [helper.make_tensor_value_info(n, TensorProto.INT32, ["batch", 16])
          for n in ("INPUT0", "INPUT1", "OUTPUT0", "OUTPUT1")]
    nodes = [helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
             helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"])]
    return finish(helper.make_graph(nodes, "simple", io[:2], io[2:]), path)


def scalar(path):
    """x [N] -> y = 3 x + 1 [N]: a tensor with no dimension but the batch."""
    init = [numpy_helper.from_array(np.float32(3), "three"),
            numpy_helper.from_array(np.float32(1), "one")]
    nodes = [helper.make_node("Mul", ["x", "three"], ["t"]),
             helper.make_node("Add", ["t", "one"], ["y"])]
    g = helper.make_graph(nodes, "scalar",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N"])], init)
    return finish(g, path)


def fixed(path):
    """a [2, 3] -> tanh(a W) [2, 5]: no batch dimension."""
    w = np.random.default_rng(7).standard_normal((3, 5)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["a", "w"], ["m"]), helper.make_node("Tanh", ["m"], ["b"])]
    g = helper.make_graph(nodes, "fixed",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 5])],
                          [numpy_helper.from_array(w, "w")])
    return finish(g, path)


def reference(path, feeds):
    """onnxruntime's CPU provider on the same model and inputs."""
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds)))


# ------------------------------------------------------------------------------------------
# The repository
# ------------------------------------------------------------------------------------------

MLP_PBTXT = """
# Triton's documented form: platform, max_batch_size, inputs and outputs, all versions
name: "mlp"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  {
    name: "x"
    data_type: TYPE_FP32
    dims: [ 8 ]
  }
]
output [
  {
    name: "y"
    data_type: TYPE_FP32
    dims: [ 4 ]
  }
]
version_policy: { all { }}
instance_group [
  {
    count: 2
    kind: KIND_CPU
  }
]
"""

SIMPLE_PBTXT = f"""
backend: "onnxruntime"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }},
        {{ name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }},
         {{ name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }} ]
dynamic_batching {{
  preferred_batch_size: [ 8 ]
  max_queue_delay_microseconds: {sh.BATCH_WAIT_US}
}}
"""

IGNORED_PBTXT = """
platform: "onnxruntime_onnx"
max_batch_size: 4
input [ { name: "x" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 8 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "labels.txt" } ]
instance_group [ { name: "cpus" count: 1 kind: KIND_CPU host_policy: "policy_0" } ]
optimization { execution_accelerators { cpu_execution_accelerator: [ { name: "openvino" } ] } }
model_warmup [ { name: "w" batch_size: 1 inputs { key: "x" value: {
  data_type: TYPE_FP32 dims: [ 8 ] zero_data: true } } } ]
metric_tags { key: "team" value: "search" }
response_cache { enable: true }
parameters { key: "intra_op_thread_count" value: { string_value: "2" } }
parameters { key: "lane" value: { string_value: "interactive" } }
"""
IGNORED_FIELDS = ["input[0].format", "output[0].label_filename", "instance_group[0].name",
                  "instance_group[0].host_policy", "optimization", "model_warmup",
                  "metric_tags", "response_cache", 'parameters["intra_op_thread_count"]']

QUEUED_PBTXT = """
platform: "onnxruntime_onnx"
max_batch_size: 8
dynamic_batching {
  priority_levels: 2
  default_priority_level: 2
  default_queue_policy { max_queue_size: 64 timeout_action: DELAY }
  priority_queue_policy { key: 1 value: { timeout_action: REJECT
                                          default_timeout_microseconds: 1 } }
}
"""

# config.pbtxt texts that must fail their model's load: (text, needle, line, col)
BAD = {
    "bad_unknown_field": ('platform: "onnxruntime_onnx"\nmax_batch_size: 4\nfoo: 1\n',
                          "inference.ModelConfig has no field named 'foo'", 3, 1),
    "bad_brace": ('platform: "onnxruntime_onnx"\ninput [ {\n  name: "x"\n',
                  "'{' at 2:9 is not closed", 4, 1),
    "bad_close": ('platform: "onnxruntime_onnx" }\n', "expected a field name, found '}'", 1, 30),
    "bad_escape": ('name: "bad_\\q"\n', "unknown escape '\\q'", 1, 12),
    "bad_string": ('platform: "onnxruntime_onnx\n', "string without its closing quote", 1, 11),
    "bad_type": ('max_batch_size: "4"\n', "max_batch_size: expected an integer", 1, 17),
    "bad_range": ('max_batch_size: 99999999999\n', "out of range for int32", 1, 17),
    "bad_enum": ('input [ { name: "x" data_type: TYPE_FLOAT32 dims: [ 8 ] } ]\n',
                 "input[0].data_type: inference.DataType has no value named 'TYPE_FLOAT32'", 1,
                 32),
    "bad_twice": ('max_batch_size: 4\nmax_batch_size: 8\n',
                  "max_batch_size: given twice", 2, 1),
    "bad_colon": ('max_batch_size 4\n', "max_batch_size: expected ':'", 1, 16),
    "bad_char": ('max_batch_size: 4 $\n', "unexpected character '$'", 1, 19),
    "bad_list": ('input [ { name: "x" dims: [ 8, ] } ]\n', "input[0].dims[1]: expected an integer",
                 1, 32),
}

# fields rtxd refuses: (text, every needle of the error)
UNSUPPORTED = {
    "bad_sequence": ('platform: "onnxruntime_onnx"\nmax_batch_size: 4\n'
                     'input [ { name: "x" data_type: TYPE_FP32 dims: [ 8 ] allow_ragged_batch: true } ]\n'
                     'sequence_batching { max_sequence_idle_microseconds: 100 }\n',
                     ["not supported by rtxd", "input[0].allow_ragged_batch (ragged batching)",
                      "sequence_batching (sequence batching"]),
    "bad_platform": ('platform: "tensorrt_plan"\n', ['platform "tensorrt_plan"']),
    "bad_kind": ('instance_group [ { kind: KIND_MODEL } ]\n', ["instance_group[0].kind",
                                                               "KIND_MODEL"]),
}


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    r = tmp_path_factory.mktemp("triton") / "models"
    mlp(r / "mlp" / "1" / "model.onnx", seed=1)
    mlp(r / "mlp" / "2" / "model.onnx", seed=2)
    (r / "mlp" / "config.pbtxt").write_text(MLP_PBTXT)
    (r / "mlp" / "labels.txt").write_text("a\nb\nc\nd\n")  # an output-labels file: ignored
    simple(r / "simple" / "1" / "model.onnx")
    (r / "simple" / "config.pbtxt").write_text(SIMPLE_PBTXT)
    mlp(r / "auto_mlp" / "1" / "model.onnx", seed=3)
    scalar(r / "auto_scalar" / "1" / "model.onnx")
    fixed(r / "auto_fixed" / "1" / "model.onnx")
    # Triton's layout of a model with external data: 1/model.onnx/ holding model.onnx
    mlp(r / "extdata" / "1" / "model.onnx" / "model.onnx", seed=4, external="weights.bin")
    (r / "extdata" / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\n'
                                                "max_batch_size: 2\n")
    mlp(r / "renamed" / "1" / "net.onnx", seed=5)
    (r / "renamed" / "config.pbtxt").write_text('backend: "onnxruntime"\n'
                                                'default_model_filename: "net.onnx"\n')
    mlp(r / "ignored" / "1" / "model.onnx", seed=6)
    (r / "ignored" / "config.pbtxt").write_text(IGNORED_PBTXT)
    mlp(r / "queued" / "1" / "model.onnx", seed=8)
    (r / "queued" / "config.pbtxt").write_text(QUEUED_PBTXT)
    for name, (text, *_) in {**BAD, **UNSUPPORTED}.items():
        mlp(r / name / "1" / "model.onnx", seed=9)
        (r / name / "config.pbtxt").write_text(text)
    unsupported_ops(r / "onnx_ops" / "1" / "model.onnx")
    return r


def unsupported_ops(path):
    """A model with ops rtxd does not lower (and no config: auto-complete reads it first)."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="fine"),
             helper.make_node("Hardmax", ["a"], ["b"], name="hardmax_1"),
             helper.make_node("LpNormalization", ["b"], ["c"], name="lpnorm_1"),
             helper.make_node("Hardmax", ["c"], ["y"], name="hardmax_2")]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", 8]) for n in ("x", "y")]
    return finish(helper.make_graph(nodes, "ops", io[:1], io[1:]), path)


def test_unsupported_onnx_ops_are_all_named(server, gc):
    """The load fails with every unsupported op of the model (type, node, opset), in the
    repository index and the log; the other models serve on."""
    reason = index(gc)["onnx_ops"][2]
    for needle in ("3 nodes with ops rtxd does not support",
                   "Hardmax (node 'hardmax_1', opset 17)",
                   "LpNormalization (node 'lpnorm_1', opset 17)",
                   "Hardmax (node 'hardmax_2', opset 17)"):
        assert needle in reason, (needle, reason)
    assert gc.is_model_ready("mlp")


@pytest.fixture(scope="module")
def server(repo, tmp_path_factory):
    d = sh.ServingDaemon(tmp_path_factory.mktemp("rtxd"), repository=repo)
    d.start()
    hu.wait_http(d)
    yield d
    err = d.cleanup()
    assert not err, f"daemon teardown: {err}"


@pytest.fixture(scope="module")
def gc(server):
    c = gu.client(server)
    yield c
    c.close()


@pytest.fixture(scope="module")
def hc(server):
    c = th.InferenceServerClient(server.http_address, concurrency=8)
    yield c
    c.close()


def infer_grpc(c, model, feeds, version="", **kw):
    r = c.infer(model, gu.inputs(*feeds.items()), model_version=version, **kw)
    return {o.name: r.as_numpy(o.name) for o in r.get_response().outputs}


def http_inputs(feeds):
    ins = []
    for name, a in feeds.items():
        x = th.InferInput(name, list(a.shape), hu.NP_TO_KSERVE[a.dtype])
        x.set_data_from_numpy(a, binary_data=True)
        ins.append(x)
    return ins


def infer_http(c, model, feeds, version=""):
    r = c.infer(model, http_inputs(feeds), model_version=version)
    return {o["name"]: r.as_numpy(o["name"]) for o in r.get_response()["outputs"]}


def assert_like_ort(got, want):
    assert set(got) == set(want), (set(got), set(want))
    for k in want:
        assert got[k].shape == want[k].shape, (k, got[k].shape, want[k].shape)
        if want[k].dtype.kind == "f":
            np.testing.assert_allclose(got[k], want[k], rtol=RTOL, atol=ATOL, err_msg=k)
        else:
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def log_lines(d):
    return [json.loads(ln) for ln in d.log().splitlines() if ln.startswith("{")]


def index(c):
    return {m.name: (m.version, m.state, m.reason) for m in c.get_model_repository_index().models}


# ------------------------------------------------------------------------------------------
# Tests
# ------------------------------------------------------------------------------------------

def test_good_models_ready_bad_ones_named(server, gc):
    idx = index(gc)
    good = ["mlp", "simple", "auto_mlp", "auto_scalar", "auto_fixed", "extdata", "renamed",
            "ignored", "queued"]
    for m in good:
        assert idx[m][1] == "READY", (m, idx[m], server.log_excerpt())
    for m in list(BAD) + list(UNSUPPORTED):
        assert idx[m][1] == "UNAVAILABLE", (m, idx[m])
    assert gc.is_server_live()
    assert not gc.is_server_ready()  # models loaded at start failed (Triton's rule)


@pytest.mark.parametrize("name", sorted(BAD))
def test_syntax_error_names_file_line_col(server, gc, repo, name):
    text, needle, line, col = BAD[name]
    reason = index(gc)[name][2]
    want = f"{repo / name / 'config.pbtxt'}:{line}:{col}: "
    assert reason.startswith(want), (reason, want)
    # the log has the whole message
    errors = [ln.get("error", "") for ln in log_lines(server)
              if ln.get("msg") == "model load failed" and ln.get("model") == name]
    assert any(e.startswith(want) and needle in e for e in errors), (errors, needle)
    gu.expect_error(lambda: gc.infer(name, gu.inputs(("x", np.zeros((1, 8), np.float32)))),
                    "UNAVAILABLE", name, f"config.pbtxt:{line}:{col}", daemon=server)


@pytest.mark.parametrize("name", sorted(UNSUPPORTED))
def test_unsupported_settings_named(server, gc, name):
    errors = [ln.get("error", "") for ln in log_lines(server)
              if ln.get("msg") == "model load failed" and ln.get("model") == name]
    assert errors and index(gc)[name][2] == errors[0][:len(index(gc)[name][2])]
    for n in UNSUPPORTED[name][1]:
        assert n in errors[0], (n, errors)


def test_mlp_versions_match_onnxruntime_over_grpc_and_http(server, gc, hc, repo):
    rng = np.random.default_rng(10)
    for batch in (1, 3, 8):
        x = rng.standard_normal((batch, 8)).astype(np.float32)
        for v in ("1", "2"):
            want = reference(repo / "mlp" / v / "model.onnx", {"x": x})
            assert_like_ort(infer_grpc(gc, "mlp", {"x": x}, version=v), want)
            assert_like_ort(infer_http(hc, "mlp", {"x": x}, version=v), want)
    # the newest version answers a request that names none
    x = rng.standard_normal((2, 8)).astype(np.float32)
    assert_like_ort(infer_grpc(gc, "mlp", {"x": x}), reference(repo / "mlp/2/model.onnx",
                                                               {"x": x}))
    cfg = gc.get_model_config("mlp", as_json=True)["config"]
    assert cfg["platform"] == "onnxruntime_onnx" and int(cfg["max_batch_size"]) == 8
    assert cfg["backend"] == "onnxruntime", cfg
    meta = hc.get_model_metadata("mlp")
    assert meta["platform"] == "onnxruntime_onnx"
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 8]}]
    # requests outside the config are refused before they run
    gu.expect_error(lambda: gc.infer("mlp", gu.inputs(("x", np.zeros((9, 8), np.float32)))),
                    "INVALID_ARGUMENT", "max_batch_size", daemon=server)
    gu.expect_error(lambda: gc.infer("mlp", gu.inputs(("x", np.zeros((1, 7), np.float32)))),
                    "INVALID_ARGUMENT", "'x'", daemon=server)


def test_dynamic_batching_merges_concurrent_requests(server, gc, hc, repo):
    rng = np.random.default_rng(11)
    feeds = [{"INPUT0": rng.integers(-100, 100, (1, 16), dtype=np.int32),
              "INPUT1": rng.integers(-100, 100, (1, 16), dtype=np.int32)} for _ in range(8)]
    before = gc.get_inference_statistics("simple", as_json=True)["model_stats"][0]
    # half over gRPC from threads, half over HTTP from tritonclient's own (gevent) pool
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        futs = [ex.submit(infer_grpc, gc, "simple", f) for f in feeds[:4]]
        pending = [hc.async_infer("simple", http_inputs(f)) for f in feeds[4:]]
        outs = [f.result(timeout=60 * sh.SLOW) for f in futs]
        for p in pending:
            r = p.get_result()
            outs.append({o["name"]: r.as_numpy(o["name"]) for o in r.get_response()["outputs"]})
    for f, o in zip(feeds, outs):
        assert_like_ort(o, reference(repo / "simple/1/model.onnx", f))
    st = gc.get_inference_statistics("simple", as_json=True)["model_stats"][0]
    done = int(st.get("inference_count", 0)) - int(before.get("inference_count", 0))
    assert done == 8, st
    sizes = [int(b["batch_size"]) for b in st.get("batch_stats", [])]
    assert max(sizes) > 1, f"no request was batched with another: {st}"


def test_auto_complete_from_model_onnx(server, gc, hc, repo):
    cfg = hc.get_model_config("auto_mlp")
    assert cfg["platform"] == "onnxruntime_onnx" and cfg["backend"] == "onnxruntime"
    assert cfg["max_batch_size"] == 4  # Triton's default-max-batch-size
    assert "dynamic_batching" in cfg
    assert cfg["input"][0]["name"] == "x" and cfg["input"][0]["dims"] == [8]
    assert cfg["output"][0]["name"] == "y" and cfg["output"][0]["dims"] == [4]
    x = np.random.default_rng(12).standard_normal((4, 8)).astype(np.float32)
    want = reference(repo / "auto_mlp/1/model.onnx", {"x": x})
    assert_like_ort(infer_grpc(gc, "auto_mlp", {"x": x}), want)
    assert_like_ort(infer_http(hc, "auto_mlp", {"x": x}), want)
    gu.expect_error(lambda: gc.infer("auto_mlp", gu.inputs(("x", np.zeros((5, 8), np.float32)))),
                    "INVALID_ARGUMENT", "max_batch_size 4", daemon=server)


def test_auto_complete_scalar_gets_a_reshape(gc, hc, repo):
    cfg = hc.get_model_config("auto_scalar")
    assert cfg["max_batch_size"] == 4
    assert cfg["input"][0]["dims"] == [1] and cfg["input"][0]["reshape"] == {"shape": []}
    assert cfg["output"][0]["dims"] == [1] and cfg["output"][0]["reshape"] == {"shape": []}
    # gRPC: the reshape is there (an empty shape: a message with no fields set in JSON)
    g = gc.get_model_config("auto_scalar", as_json=True)["config"]
    assert g["input"][0].get("reshape") == {} and g["output"][0].get("reshape") == {}, g
    assert "reshape" not in gc.get_model_config("auto_mlp", as_json=True)["config"]["input"][0]
    x = np.array([[1.5], [-2.0], [0.25]], np.float32)
    want = reference(repo / "auto_scalar/1/model.onnx", {"x": x[:, 0]})
    got = infer_grpc(gc, "auto_scalar", {"x": x})
    np.testing.assert_allclose(got["y"], want["y"][:, None], rtol=RTOL)
    np.testing.assert_allclose(infer_http(hc, "auto_scalar", {"x": x})["y"], got["y"], rtol=0)


def test_auto_complete_without_batch_dimension(gc, hc, repo):
    cfg = hc.get_model_config("auto_fixed")
    assert cfg["max_batch_size"] == 0 and "dynamic_batching" not in cfg
    assert cfg["input"][0]["dims"] == [2, 3] and cfg["output"][0]["dims"] == [2, 5]
    a = np.random.default_rng(13).standard_normal((2, 3)).astype(np.float32)
    want = reference(repo / "auto_fixed/1/model.onnx", {"a": a})
    assert_like_ort(infer_grpc(gc, "auto_fixed", {"a": a}), want)
    assert_like_ort(infer_http(hc, "auto_fixed", {"a": a}), want)


def test_external_data_directory_and_default_model_filename(gc, hc, repo):
    x = np.random.default_rng(14).standard_normal((2, 8)).astype(np.float32)
    assert (repo / "extdata/1/model.onnx/weights.bin").is_file()
    want = reference(repo / "extdata/1/model.onnx/model.onnx", {"x": x})
    assert_like_ort(infer_grpc(gc, "extdata", {"x": x}), want)
    assert_like_ort(infer_http(hc, "renamed", {"x": x}),
                    reference(repo / "renamed/1/net.onnx", {"x": x}))
    assert hc.get_model_config("renamed")["default_model_filename"] == "net.onnx"
    # the gRPC ModelConfig says the same as the HTTP one
    g = gc.get_model_config("renamed", as_json=True)["config"]
    assert g["backend"] == "onnxruntime" and g["default_model_filename"] == "net.onnx", g
    q = gc.get_model_config("queued", as_json=True)["config"]["dynamic_batching"]
    assert int(q["priority_levels"]) == 2 and int(q["default_priority_level"]) == 2, q


def test_ignored_fields_are_logged_by_name(server, gc, repo):
    x = np.random.default_rng(15).standard_normal((1, 8)).astype(np.float32)
    assert_like_ort(infer_grpc(gc, "ignored", {"x": x}),
                    reference(repo / "ignored/1/model.onnx", {"x": x}))
    ignored = {ln.get("field") for ln in log_lines(server)
               if ln.get("msg") == "config setting ignored" and ln.get("model") == "ignored"}
    assert set(IGNORED_FIELDS) <= ignored, (ignored, server.log_excerpt())
    # parameters.lane is rtxd's: mapped, not ignored
    assert "parameters[\"lane\"]" not in ignored


def test_priority_levels_and_queue_policies(server, gc, repo):
    x = np.random.default_rng(16).standard_normal((2, 8)).astype(np.float32)
    want = reference(repo / "queued/1/model.onnx", {"x": x})
    # the default level (2) has no timeout; level 1's policy gives 1 us, which no run meets
    assert_like_ort(infer_grpc(gc, "queued", {"x": x}), want)
    assert_like_ort(infer_grpc(gc, "queued", {"x": x}, priority=2), want)
    e = gu.expect_error(lambda: gc.infer("queued", gu.inputs(("x", x)), priority=1),
                        "RESOURCE_EXHAUSTED", "deadline", daemon=server)
    assert "queued" in e.message()
    # a priority beyond priority_levels is the default level
    assert_like_ort(infer_grpc(gc, "queued", {"x": x}, priority=7), want)
    db = hu.get(server, "/v2/models/queued/config").json()["dynamic_batching"]
    assert db["priority_levels"] == 2 and db["default_priority_level"] == 2
    assert db["default_queue_policy"]["max_queue_size"] == 64
    assert db["priority_queue_policy"]["1"]["default_timeout_microseconds"] == 1
    # the gRPC ModelConfig reports the same policies (uint64 fields as JSON strings)
    g = gc.get_model_config("queued", as_json=True)["config"]["dynamic_batching"]
    assert g["default_queue_policy"]["max_queue_size"] == 64, g
    assert g["default_queue_policy"]["timeout_action"] == "DELAY", g
    p1 = g["priority_queue_policy"]["1"]
    # REJECT is the enum's zero, which JSON leaves out
    assert p1.get("timeout_action", "REJECT") == "REJECT", g
    assert int(p1["default_timeout_microseconds"]) == 1, g


def test_explicit_reload_with_broken_pbtxt_keeps_serving(make_server, tmp_path):
    r = tmp_path / "repo"
    mlp(r / "m" / "1" / "model.onnx", seed=20)
    (r / "m" / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\nmax_batch_size: 2\n')
    d = make_server("explicit", repository=r, control="explicit", startup=["m"])
    d.start()
    c = gu.client(d)
    try:
        x = np.ones((1, 8), np.float32)
        want = reference(r / "m/1/model.onnx", {"x": x})
        assert_like_ort(infer_grpc(c, "m", {"x": x}), want)
        (r / "m" / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\n'
                                              'max_batch_size: 2\ninput [ { name: "x" ]\n')
        e = gu.expect_error(lambda: c.load_model("m"), "INVALID_ARGUMENT", "keeps serving",
                            daemon=d)
        assert re.search(r"config\.pbtxt:3:21: input\[0\]: expected a field name", e.message()), \
            e.message()
        assert_like_ort(infer_grpc(c, "m", {"x": x}), want)
        # fixed: the reload takes it (a config without inputs: completed from the model)
        (r / "m" / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\nmax_batch_size: 1\n')
        c.load_model("m")
        assert c.get_model_config("m", as_json=True)["config"]["max_batch_size"] == 1
        assert_like_ort(infer_grpc(c, "m", {"x": x}), want)
    finally:
        c.close()


def test_both_config_files_are_refused(make_server, tmp_path):
    r = tmp_path / "repo"
    mlp(r / "m" / "1" / "model.onnx", seed=21)
    (r / "m" / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\n')
    (r / "m" / "config.json").write_text('{"platform": "onnxruntime_onnx"}')
    mlp(r / "j" / "1" / "model.onnx", seed=22)
    (r / "j" / "config.json").write_text('{"backend": "onnxruntime", "max_batch_size": 2}')
    d = make_server("both", repository=r)
    d.start()
    c = gu.client(d)
    try:
        idx = index(c)
        assert idx["m"][1] == "UNAVAILABLE" and "both config.pbtxt and config.json" in idx["m"][2]
        # config.json (Triton's JSON form) serves ONNX models too
        assert idx["j"][1] == "READY", idx
        x = np.ones((2, 8), np.float32)
        assert_like_ort(infer_grpc(c, "j", {"x": x}), reference(r / "j/1/model.onnx", {"x": x}))
    finally:
        c.close()
