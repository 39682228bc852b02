"""
Malformed and unsupported .onnx files through rtxrun: each must be refused with exit status 3
and an "rtxrun: <message>" that names the problem (the file, the node, the initializer, the
op and opset), never a crash, a hang or a sanitizer report (rtxgraph.rtxrun_raw fails the
test on those; `make test-asan` runs this module against the ASan build).

Cases: truncated protobuf, random bytes, an empty file, wrong wire types, attributes and
tensors of the wrong type, an initializer whose raw_data length does not match its dims, a
node input nothing produces, a graph output nothing produces, a cycle, huge dims (1e12
elements) in an initializer and computed by ConstantOfShape/Expand, unsupported ops (every
one listed as `OpType (node 'name', opset N)`), a missing external data file, external data
outside the model's directory (../ and an absolute path) or past the end of its file, opsets
12 and 24 (the supported range named). Then the same files as one --batch-dir: every bad
case is reported and the good case still runs.
"""

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_models as om
import rtxgraph as rg

GRAPH = 3
PARSE_WORDS = ("protobuf", "parse", "malformed", "truncated", "invalid", "decode", "corrupt")


def expect(r, rc, *needles):
    """Exit status rc, an 'rtxrun: ' message, and each needle (a tuple: any of) in stderr,
    case-insensitive."""
    assert r.rc == rc, f"expected exit {rc}\n{r.describe()}"
    assert r.stderr.startswith("rtxrun: ") or "\nrtxrun: " in r.stderr, \
        f"stderr lacks 'rtxrun: <message>'\n{r.describe()}"
    low = r.stderr.lower()
    for n in needles:
        alts = n if isinstance(n, tuple) else (n,)
        assert any(a.lower() in low for a in alts), \
            f"stderr names none of {alts}\n{r.describe()}"


def run_model(tmp_path, model, feeds=None, name="model.onnx"):
    """Writes model (ModelProto or bytes) as tmp_path/name and runs rtxrun on it."""
    p = tmp_path / name
    p.write_bytes(model if isinstance(model, (bytes, bytearray)) else model.SerializeToString())
    args = [p] + rg.write_inputs(feeds or {}, tmp_path) + ["--json", "--threads", "2"]
    if feeds is None:
        args.append("--random-inputs")
    return rg.rtxrun_raw(args)


def relu_model(opset=17):
    return om.make_model([helper.make_node("Relu", ["x"], ["y"], name="the_relu")],
                         [om.value_info("x", om.F32, ["N", 4])], ["y"], opset=opset)


W = "fc_weight"  # the initializer the cases break, named in their messages


def linear_model():
    w = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    return om.make_model([helper.make_node("MatMul", ["x", W], ["y"], name="mm")],
                         [om.value_info("x", om.F32, [2, 4])], ["y"], {W: w})


X24 = {"x": np.ones((2, 4), np.float32)}

# ------------------------------------------------------------------------------------------
# Not a model
# ------------------------------------------------------------------------------------------


def test_good_model_runs(tmp_path):
    """The control: the models the cases below break run."""
    r = run_model(tmp_path, linear_model(), X24)
    assert r.rc == 0, r.describe()
    r = run_model(tmp_path, relu_model(), X24, name="relu.onnx")
    assert r.rc == 0, r.describe()


@pytest.mark.parametrize("frac", [0.1, 0.5, 0.97])
def test_truncated_protobuf(tmp_path, frac):
    data = om.bert()[0].SerializeToString()
    cut = data[:int(len(data) * frac)]
    with pytest.raises(Exception):  # the cut must be invalid protobuf for the test to mean it
        onnx.ModelProto().ParseFromString(cut)
    r = run_model(tmp_path, cut)
    expect(r, GRAPH, "model.onnx", PARSE_WORDS)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_bytes(tmp_path, seed):
    data = np.random.default_rng(seed).integers(0, 256, 4096).astype(np.uint8).tobytes()
    r = run_model(tmp_path, data)
    expect(r, GRAPH, "model.onnx")


def test_empty_file_and_no_graph(tmp_path):
    r = run_model(tmp_path, b"")
    expect(r, GRAPH, "model.onnx")
    m = onnx.ModelProto(ir_version=8)
    m.opset_import.add(domain="", version=17)
    r = run_model(tmp_path, m, name="nograph.onnx")
    expect(r, GRAPH, "nograph.onnx", "graph")


def test_directory_and_missing_file(tmp_path):
    (tmp_path / "dir.onnx").mkdir()
    expect(rg.rtxrun_raw([tmp_path / "dir.onnx", "--random-inputs"]), GRAPH, "dir.onnx")
    expect(rg.rtxrun_raw([tmp_path / "nope.onnx", "--random-inputs"]), GRAPH, "nope.onnx")


def test_wrong_wire_types(tmp_path):
    """ModelProto.graph (field 7, a message) written as a varint; ir_version (field 1, a
    varint) written as bytes: protobuf-c must refuse, not misread."""
    good = linear_model().SerializeToString()
    for i, tail in enumerate((b"\x38\x05", b"\x0a\x03abc")):
        r = run_model(tmp_path, good + tail, name=f"wire{i}.onnx")
        expect(r, GRAPH, f"wire{i}.onnx")


def test_attribute_of_the_wrong_type(tmp_path):
    n = helper.make_node("Softmax", ["x"], ["y"], name="sm")
    n.attribute.append(helper.make_attribute("axis", "1"))  # a string where an int belongs
    y = om.value_info("y", om.F32, [2, 4])
    m = om.make_model([n], [om.value_info("x", om.F32, [2, 4])], [y], infer=False)
    expect(run_model(tmp_path, m, X24), GRAPH, "axis", "sm")


def test_attribute_whose_type_is_not_the_field_it_fills(tmp_path):
    n = helper.make_node("Gemm", ["x", "w"], ["y"], name="gm")
    a = n.attribute.add()
    a.name, a.type, a.f = "transB", onnx.AttributeProto.INT, 1.0
    m = om.make_model([n], [om.value_info("x", om.F32, [2, 4])],
                      [om.value_info("y", om.F32, [2, 3])],
                      {"w": np.ones((4, 3), np.float32)}, infer=False)
    expect(run_model(tmp_path, m, X24, name="gemm.onnx"), GRAPH, "transB", "gm")


def test_tensor_of_the_wrong_type(tmp_path):
    m = linear_model()
    t = m.graph.initializer[0]
    a = numpy_helper.to_array(t)
    t.ClearField("raw_data")
    t.int64_data.extend(a.ravel().astype(np.int64).tolist())  # float tensor, int64 field
    expect(run_model(tmp_path, m, X24), GRAPH, W, "model.onnx")
    m = linear_model()
    m.graph.initializer[0].data_type = TensorProto.STRING
    expect(run_model(tmp_path, m, X24, name="str.onnx"), GRAPH, W, "str.onnx")
    m = linear_model()
    m.graph.initializer[0].data_type = 999
    expect(run_model(tmp_path, m, X24, name="bad-type.onnx"), GRAPH, W, "bad-type.onnx")


@pytest.mark.parametrize("delta", [-4, 4, -48])
def test_raw_data_length_does_not_match_dims(tmp_path, delta):
    m = linear_model()
    t = m.graph.initializer[0]
    t.raw_data = t.raw_data[:len(t.raw_data) + delta] if delta < 0 else t.raw_data + b"\0" * delta
    r = run_model(tmp_path, m, X24)
    expect(r, GRAPH, "model.onnx", W, ("raw_data", "bytes", "size", "length"))


def test_negative_initializer_dim(tmp_path):
    m = linear_model()
    del m.graph.initializer[0].dims[:]
    m.graph.initializer[0].dims.extend([-4, -3])
    expect(run_model(tmp_path, m, X24), GRAPH, W)


# ------------------------------------------------------------------------------------------
# Graph structure
# ------------------------------------------------------------------------------------------

def test_input_nothing_produces(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="first"),
             helper.make_node("Add", ["r", "ghost"], ["y"], name="adder")]
    m = om.make_model(nodes, [om.value_info("x", om.F32, [2, 4])],
                      [om.value_info("y", om.F32, [2, 4])], infer=False)
    expect(run_model(tmp_path, m, X24), GRAPH, "ghost", "adder")


def test_output_nothing_produces(tmp_path):
    m = om.make_model([helper.make_node("Relu", ["x"], ["r"], name="first")],
                      [om.value_info("x", om.F32, [2, 4])],
                      [om.value_info("missing_out", om.F32, [2, 4])], infer=False)
    expect(run_model(tmp_path, m, X24), GRAPH, "missing_out")


def test_cycle(tmp_path):
    nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="node_a"),
             helper.make_node("Relu", ["a"], ["b"], name="node_b")]
    m = om.make_model(nodes, [om.value_info("x", om.F32, [2, 4])],
                      [om.value_info("b", om.F32, [2, 4])], infer=False)
    expect(run_model(tmp_path, m, X24), GRAPH, ("node_a", "node_b"),
           ("cycle", "topolog", "before", "not produced", "undefined"))


def test_two_nodes_write_one_value(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="one"),
             helper.make_node("Neg", ["x"], ["y"], name="two")]
    m = om.make_model(nodes, [om.value_info("x", om.F32, [2, 4])],
                      [om.value_info("y", om.F32, [2, 4])], infer=False)
    expect(run_model(tmp_path, m, X24), GRAPH, "y")


def test_node_with_too_few_inputs(tmp_path):
    m = om.make_model([helper.make_node("Gemm", ["x"], ["y"], name="lonely")],
                      [om.value_info("x", om.F32, [2, 4])],
                      [om.value_info("y", om.F32, None)], infer=False)
    expect(run_model(tmp_path, m, X24), GRAPH, "lonely")


HUGE = 1_000_000  # HUGE x HUGE = 1e12 elements


def test_huge_initializer_dims(tmp_path):
    m = linear_model()
    t = m.graph.initializer[0]
    del t.dims[:]
    t.dims.extend([HUGE, HUGE])
    expect(run_model(tmp_path, m, X24), GRAPH, W)


@pytest.mark.parametrize("how", ["ConstantOfShape", "Expand", "declared-input"])
def test_huge_computed_dims(tmp_path, how):
    """A 1e12-element tensor computed at instantiation: refused by the limits, not
    allocated."""
    shape = {"shape": np.array([HUGE, HUGE], np.int64)}
    if how == "ConstantOfShape":
        nodes = [helper.make_node("ConstantOfShape", ["shape"], ["c"], name="huge",
                                  value=numpy_helper.from_array(np.array([1.0], np.float32))),
                 helper.make_node("ReduceSum", ["c"], ["y"], name="sum", keepdims=0)]
        inputs, feeds = [om.value_info("x", om.F32, [2, 4])], X24
    elif how == "Expand":
        nodes = [helper.make_node("Expand", ["x", "shape"], ["y"], name="huge")]
        inputs, feeds = [om.value_info("x", om.F32, [1, 1])], {"x": np.ones((1, 1),
                                                                           np.float32)}
    else:
        nodes = [helper.make_node("Relu", ["x"], ["y"], name="huge")]
        inputs, feeds = [om.value_info("x", om.F32, [HUGE, HUGE])], None
        shape = {}
    m = om.make_model(nodes, inputs, [om.value_info("y", om.F32, None)], shape, infer=False)
    r = run_model(tmp_path, m, feeds)
    if how == "declared-input":
        # --random-inputs for a declared 1e12-element input: refused as too large
        assert r.rc in (GRAPH, 4), r.describe()
        expect(r, r.rc, "x", ("limit", "too large", "exceed", str(HUGE)))
    else:
        expect(r, GRAPH, "huge", ("limit", "too large", "exceed", str(HUGE)))


# ------------------------------------------------------------------------------------------
# Unsupported ops and opsets
# ------------------------------------------------------------------------------------------

def test_every_unsupported_op_is_listed(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="ok_relu"),
             helper.make_node("Einsum", ["r", "r"], ["e"], name="ein", equation="ij,ij->ij"),
             helper.make_node("Hardmax", ["e"], ["h"], name="hmax"),
             helper.make_node("Add", ["h", "r"], ["s"], name="ok_add"),
             helper.make_node("Sin", ["s"], ["c"], name="sin"),
             helper.make_node("Einsum", ["c", "c"], ["y"], name="ein2", equation="ij,ij->ij")]
    m = om.make_model(nodes, [om.value_info("x", om.F32, [2, 4])], ["y"], {}, opset=17)
    r = run_model(tmp_path, m, X24)
    expect(r, GRAPH, "model.onnx")
    for op, node in (("Einsum", "ein"), ("Hardmax", "hmax"), ("Sin", "sin"),
                     ("Einsum", "ein2")):
        assert f"{op} (node '{node}', opset 17)" in r.stderr, \
            f"{op} of node {node} not listed as `{op} (node '{node}', opset 17)`\n" \
            f"{r.describe()}"
    for node in ("ok_relu", "ok_add"):
        assert f"node '{node}'" not in r.stderr, f"supported node {node} listed\n{r.describe()}"


def test_unsupported_op_of_another_domain(tmp_path):
    n = helper.make_node("FusedMatMul", ["x", "x"], ["y"], name="fused", domain="com.microsoft")
    m = om.make_model([n], [om.value_info("x", om.F32, [4, 4])],
                      [om.value_info("y", om.F32, [4, 4])], infer=False)
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    r = run_model(tmp_path, m, {"x": np.ones((4, 4), np.float32)})
    expect(r, GRAPH, "FusedMatMul", "fused")


@pytest.mark.parametrize("opset", [12, 24, 7])
def test_opset_outside_the_supported_range(tmp_path, opset):
    m = relu_model(opset=13)
    m.opset_import[0].version = opset
    r = run_model(tmp_path, m, X24)
    expect(r, GRAPH, "model.onnx", str(opset), "13", "23")


def test_no_ai_onnx_opset(tmp_path):
    m = relu_model()
    del m.opset_import[:]
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    expect(run_model(tmp_path, m, X24), GRAPH, "model.onnx", "opset")


# ------------------------------------------------------------------------------------------
# External data
# ------------------------------------------------------------------------------------------

def external_model(d, location="weights.bin"):
    """The linear model with its weight in external data file d/location; returns the path."""
    m = linear_model()
    t = m.graph.initializer[0]
    raw = t.raw_data
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", str(len(raw)))):
        e = t.external_data.add()
        e.key, e.value = k, v
    p = d / "model.onnx"
    p.write_bytes(m.SerializeToString())
    return p, raw


def run_path(p, feeds=X24):
    return rg.rtxrun_raw([p] + rg.write_inputs(feeds, p.parent) + ["--json"])


def test_external_data_control(tmp_path):
    p, raw = external_model(tmp_path)
    (tmp_path / "weights.bin").write_bytes(raw)
    r = run_path(p)
    assert r.rc == 0, r.describe()


def test_missing_external_data_file(tmp_path):
    p, _ = external_model(tmp_path)
    expect(run_path(p), GRAPH, "weights.bin")


def test_external_data_outside_the_model_directory(tmp_path):
    d = tmp_path / "models"
    d.mkdir()
    p, raw = external_model(d, "../outside.bin")
    (tmp_path / "outside.bin").write_bytes(raw)  # present: only the path rule may refuse it
    expect(run_path(p), GRAPH, "outside.bin", W)
    p, _ = external_model(d, str(tmp_path / "outside.bin"))  # an absolute path
    expect(run_path(p), GRAPH, "outside.bin")
    p, _ = external_model(d, "sub/../../outside.bin")
    expect(run_path(p), GRAPH, "outside.bin")


def test_external_data_past_the_end_of_its_file(tmp_path):
    p, raw = external_model(tmp_path)
    (tmp_path / "weights.bin").write_bytes(raw[:20])
    expect(run_path(p), GRAPH, "weights.bin", W)
    m = onnx.load(str(p), load_external_data=False)
    for e in m.graph.initializer[0].external_data:
        if e.key == "offset":
            e.value = str(2**62)
    p.write_bytes(m.SerializeToString())
    (tmp_path / "weights.bin").write_bytes(raw)
    expect(run_path(p), GRAPH, "weights.bin", W)


# ------------------------------------------------------------------------------------------
# All of it in one batch: every bad case reported, the good one still runs
# ------------------------------------------------------------------------------------------

def test_bad_models_in_a_batch(tmp_path):
    root = tmp_path / "batch"
    good = linear_model()
    unsupported = om.make_model(
        [helper.make_node("Einsum", ["x", "x"], ["y"], name="ein", equation="ij,ij->ij")],
        [om.value_info("x", om.F32, [2, 4])], ["y"])
    cases = {"a-truncated": good.SerializeToString()[:40],
             "b-random": np.random.default_rng(7).integers(0, 256, 999).astype(
                 np.uint8).tobytes(),
             "c-opset12": None, "d-unsupported": unsupported.SerializeToString(),
             "e-good": good.SerializeToString()}
    m12 = relu_model()
    m12.opset_import[0].version = 12
    cases["c-opset12"] = m12.SerializeToString()
    for name, data in cases.items():
        (root / name / "inputs").mkdir(parents=True)
        (root / name / "model.onnx").write_bytes(data)
        np.save(root / name / "inputs" / "x.npy", X24["x"])
    res = om.run_batch(root)
    om.assert_batch_clean(res, 5)
    assert res["_run"]["rc"] == 1, res["_run"]
    assert res["_summary"] == {"batch": str(root), "cases": 5, "ok": 1, "failed": 4}, res
    for name in ("a-truncated", "b-random", "c-opset12", "d-unsupported"):
        assert res[name]["exit"] == GRAPH, res[name]
        assert res[name]["error"], res[name]
    assert "Einsum (node 'ein', opset 17)" in res["d-unsupported"]["error"], res
    assert re.search(r"\b12\b", res["c-opset12"]["error"]), res
    assert res["e-good"]["exit"] == 0, res["e-good"]
    got = np.load(res["e-good"]["outputs"][0]["file"])
    om.compare(got, om.ort_run(good, X24)["y"], "sum", "the good case of the batch")


def test_data_dependent_constant_ops_are_refused_by_name(tmp_path):
    """GatherElements, GatherND and CumSum run on constants only: on the model's input data
    the instantiation fails naming the node and why, never a wrong answer."""
    for op, ins, extra, attrs in (
            ("CumSum", ["x", "ax"], {"ax": np.array(1, np.int64)}, {}),
            ("GatherElements", ["x", "gi"], {"gi": np.zeros((2, 4), np.int64)}, {"axis": 0}),
            ("GatherND", ["x", "ni"], {"ni": np.zeros((2, 1), np.int64)}, {})):
        n = helper.make_node(op, ins, ["y"], name="dd", **attrs)
        m = om.make_model([n], [om.value_info("x", om.F32, [2, 4])], ["y"], extra, opset=17)
        d = tmp_path / op
        d.mkdir()
        r = run_model(d, m, X24)
        expect(r, GRAPH, f"node 'dd' ({op}, opset 17)")
        assert "computed from the model's inputs" in r.stderr, r.describe()


def test_attention_features_rtxd_lacks_are_refused_by_name(tmp_path):
    """Attention (opset 23) with softcap, with its qk_matmul_output output, or 3-D inputs
    without their head counts: refused naming the node and what, never a wrong answer."""
    q4 = om.value_info("q", om.F32, [1, 2, 4, 8])
    q3 = om.value_info("q", om.F32, [1, 4, 16])
    for what, inputs, attrs, outs, needle in (
            ("softcap", [q4], {"softcap": 30.0}, ["y"], "softcap"),
            ("qk", [q4], {}, ["y", "", "", "qk"], "qk_matmul_output"),
            ("heads", [q3], {}, ["y"], "q_num_heads")):
        n = helper.make_node("Attention", ["q", "q", "q"], outs, name="att", **attrs)
        m = om.make_model([n], inputs, [om.value_info(o, om.F32, None) for o in outs if o], {},
                          opset=23, infer=False)
        d = tmp_path / what
        d.mkdir()
        shape = [1, 2, 4, 8] if inputs[0] is q4 else [1, 4, 16]
        r = run_model(d, m, {"q": np.ones(shape, np.float32)})
        expect(r, GRAPH, "att", needle)
