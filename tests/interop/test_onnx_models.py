"""
Small models as exporters write them (tests/interop/onnx_models.py builds them with
onnx.helper): an MLP, a ResNet-style CNN, a BERT-style encoder layer and a GPT-2-style decoder
block, each with a dynamic batch (the transformers also a dynamic sequence), run by rtxrun at
several batch sizes and compared with onnxruntime's CPU provider on the same inputs.

Every (model, opset, batch, sequence) runs in ONE `rtxrun --batch-dir` process: the same
model file instantiated for several shapes. Then single runs: `rtxrun MODEL.onnx --input ...`
(the JSON report and the output files), --random-inputs on a model with a symbolic batch,
initializers stored as external data and in the typed fields (float_data, int64_data) instead
of raw_data. Tolerance: onnx_models.compare, kind 'model' (f32 within 1e-4 relative plus 1e-5
of the output's scale).
"""

import json

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import onnx_models as om
import rtxgraph as rg
from onnx_models import Case

# (model key, builder kwargs, opset) -> batch sizes and sequence lengths
VARIANTS = [
    ("mlp", {}, 17, [(1,), (3,), (8,)]),
    ("mlp", {}, 13, [(2,)]),
    ("mlp", {}, 18, [(5,)]),
    ("resnet", {}, 13, [(1,), (2,), (4,)]),
    ("resnet", {}, 18, [(3,)]),
    ("bert", {}, 17, [(1, 8), (3, 8), (4, 5)]),
    ("bert", {}, 18, [(2, 7)]),
    ("gpt2", {"causal": "slice"}, 18, [(1, 8), (3, 8), (2, 13)]),
    ("gpt2", {"causal": "trilu"}, 17, [(1, 6), (4, 8)]),
    ("gpt2", {"causal": "slice"}, 13, [(2, 5)]),
]


def build_cases():
    cases = []
    for key, kw, opset, shapes in VARIANTS:
        m, feeds = om.MODELS[key](opset=opset, **kw)
        tag = "-".join(f"{k}{v}" for k, v in kw.items())
        for shape in shapes:
            cid = f"{key}{'-' + tag if tag else ''}-op{opset}-b" + "x".join(map(str, shape))
            cases.append(Case(cid, m, feeds(*shape, seed=om.seed_of(cid)), "model"))
    return cases


CASES = build_cases()


# the batch fixture, the test that the batch ran clean, a test per case
batch, test_the_batch_ran_every_model, test_model_against_onnxruntime = \
    om.batch_tests("models", CASES)


# The transformers' decomposed patterns run as fused rtx ops (rtxrun --json `ops`): every
# layer norm, the GELU and the attention; none of their pieces is left.
FUSED = {"bert": {"layer_norm": 3, "gelu": 1, "attention": 1},
         "gpt2": {"layer_norm": 3, "gelu": 1, "attention": 1}}
PIECES = {"reduce_mean", "sqrt", "pow", "erf", "softmax", "div"}


@pytest.mark.parametrize("c", [c for c in CASES if c.id.split("-")[0] in FUSED], ids=str)
def test_transformer_patterns_are_fused(c, batch):
    res, _ = batch
    bad = om.rtx_failure_text(res, c.id)
    assert bad is None, f"{c.describe()}: {bad}"
    ops = res[c.id]["ops"]
    for op, n in FUSED[c.id.split("-")[0]].items():
        assert ops.get(op) == n, f"{c.id}: {n} x {op} expected, ops {ops}"
    assert not set(ops) & PIECES, f"{c.id}: unfused pieces {set(ops) & PIECES} in {ops}"
    if c.id.startswith("gpt2"):
        assert "tanh" not in ops, f"{c.id}: the tanh GELU left a tanh: {ops}"


@pytest.mark.parametrize("c", [c for c in CASES if c.id.startswith("resnet")], ids=str)
def test_batchnorm_folds_into_its_conv(c, batch):
    """Every BatchNormalization of the ResNet follows a Conv that only it reads: each becomes
    part of its conv's weight and bias, so the graph runs convs with no per-channel scale and
    shift left (mul / sub / div / sqrt)."""
    res, _ = batch
    bad = om.rtx_failure_text(res, c.id)
    assert bad is None, f"{c.describe()}: {bad}"
    ops = res[c.id]["ops"]
    assert ops.get("conv2d", 0) >= 2, ops
    assert not set(ops) & {"mul", "sub", "div", "sqrt"}, f"{c.id}: BN left as ops: {ops}"


def test_models_use_what_they_claim():
    """The test models hold the operators and patterns their descriptions promise (so that a
    passing comparison covers them)."""
    want = {
        "mlp": {"Flatten", "Gemm", "Relu", "MatMul", "Add", "Softmax"},
        "resnet": {"Conv", "BatchNormalization", "Relu", "MaxPool", "Add", "GlobalAveragePool",
                   "Flatten", "Gemm"},
        "bert": {"Gather", "LayerNormalization", "ReduceMean", "Sub", "Pow", "Sqrt", "Div",
                 "MatMul", "Transpose", "Reshape", "Softmax", "Erf", "Where", "Cast", "Expand",
                 "Equal", "Unsqueeze", "Concat", "Shape", "ConstantOfShape", "Range", "Tanh"},
        "gpt2": {"Split", "Slice", "Tanh", "Pow", "Where", "Softmax", "Range", "Gather"},
    }
    for key, ops in want.items():
        m, _ = om.MODELS[key]()
        have = {n.op_type for n in m.graph.node}
        assert ops <= have, f"{key} lacks {sorted(ops - have)}"
        dims = [d.dim_param for i in m.graph.input for d in i.type.tensor_type.shape.dim]
        assert "batch" in dims, f"{key}: batch not symbolic ({dims})"
    m, _ = om.gpt2(opset=17, causal="trilu")
    assert "Trilu" in {n.op_type for n in m.graph.node}


def _single(tmp_path, model, feeds, extra=()):
    mp = tmp_path / "model.onnx"
    if model is not None:
        onnx.save_model(model, str(mp))
    out = tmp_path / "out"
    args = [mp] + rg.write_inputs(feeds, tmp_path) + ["--output-dir", out, "--json",
                                                      "--threads", "2"] + list(extra)
    return rg.rtxrun_raw(args), out


def _outputs_equal_ort(r, model, feeds, out, what):
    assert r.rc == 0, f"{what}\n{r.describe()}"
    j = json.loads(r.stdout)
    ref = om.ort_run(model, feeds)
    assert [o["name"] for o in j["outputs"]] == list(ref), j
    for o in j["outputs"]:
        assert o["file"] == str(out / f"{o['name']}.npy"), o
        assert list(o["shape"]) == list(ref[o["name"]].shape), o
        om.compare(np.load(o["file"]), ref[o["name"]], "model", f"{what} {o['name']}")
    return j


def test_single_run_with_inputs_and_output_dir(tmp_path):
    m, feeds = om.gpt2()
    f = feeds(2, 6, seed=5)
    r, out = _single(tmp_path, m, f, ["--repeat", "2"])
    j = _outputs_equal_ort(r, m, f, out, "gpt2 single run")
    assert j["time_ms"]["runs"] == 2, j
    assert j["outputs"][0]["dtype"] == "f32", j


def test_random_inputs_resolve_symbolic_dims(tmp_path):
    """--random-inputs on a model with a symbolic batch: the batch becomes 1 (docs/rtxrun.md)
    and the outputs are a valid softmax."""
    m, _ = om.mlp()
    mp = tmp_path / "mlp.onnx"
    onnx.save_model(m, str(mp))
    r = rg.rtxrun_raw([mp, "--random-inputs", "--seed", "3", "--output-dir", tmp_path / "o",
                       "--json"])
    assert r.rc == 0, r.describe()
    probs = np.load(tmp_path / "o" / "probs.npy")
    logits = np.load(tmp_path / "o" / "logits.npy")
    assert probs.shape == (1, 10) and logits.shape == (1, 10)
    e = np.exp(logits.astype(np.float64) - logits.max())
    rg.assert_close(probs, e / e.sum(), 1e-5, 1e-7, "softmax of the logits")


def test_external_data_initializers(tmp_path):
    """Initializers saved as external data (one file, and one file per tensor) load as the
    inline model does."""
    m, feeds = om.resnet()
    f = feeds(2, seed=9)
    for i, all_in_one in enumerate((True, False)):
        d = tmp_path / f"ext{i}"
        d.mkdir()
        mm = onnx.ModelProto()
        mm.CopyFrom(m)
        onnx.save_model(mm, str(d / "model.onnx"), save_as_external_data=True,
                        all_tensors_to_one_file=all_in_one, location="weights.bin",
                        size_threshold=0)
        ext = [t for t in onnx.load(str(d / "model.onnx"), load_external_data=False)
               .graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
        assert len(ext) >= 10, "the model was not saved with external data"
        r, out = _single(d, None, f)
        _outputs_equal_ort(r, m, f, out, f"resnet, external data (one file: {all_in_one})")


def test_typed_field_initializers(tmp_path):
    """Initializers in float_data / int64_data instead of raw_data (older exporters)."""
    m, feeds = om.bert()
    typed = onnx.ModelProto()
    typed.CopyFrom(m)
    for t in typed.graph.initializer:
        a = numpy_helper.to_array(t)
        t.ClearField("raw_data")
        if a.dtype == np.float32:
            t.float_data.extend(a.ravel().tolist())
        elif a.dtype == np.int64:
            t.int64_data.extend(a.ravel().tolist())
        elif a.dtype == np.bool_:
            t.int32_data.extend(a.ravel().astype(np.int32).tolist())
        else:
            raise AssertionError(f"unexpected initializer dtype {a.dtype}")
    f = feeds(3, 6, seed=2)
    r, out = _single(tmp_path, typed, f)
    _outputs_equal_ort(r, typed, f, out, "bert, typed-field initializers")
