"""
Models as PyTorch exports them: the files of onnx_exports/ (written by make_onnx_exports.py
with torch.onnx.export, the TorchScript exporter at opset 17 and the dynamo exporter at its
own opset with weights as external data) run through rtxrun at two batch sizes, compared
with onnxruntime's CPU provider on the same inputs. The decomposed attention, GELU and layer
norm of the encoder and decoder must run as rtxd's fused ops (rtxrun --json lists the ops).
The hf-*.onnx files are Hugging Face transformers' own BertModel, GPT2LMHeadModel and
LlamaForCausalLM (tiny random configurations) as exported from transformers 5; the *-op23-*
files (a Llama-style decoder of nn.RMSNorm and scaled_dot_product_attention, and
transformers' Llama) are exported at opset 23, where ONNX's Attention and RMSNormalization
ops carry them.
"""

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import rtxgraph

HERE = Path(__file__).resolve().parent / "onnx_exports"
MODELS = sorted(p.name for p in HERE.glob("*.onnx"))


def inputs_for(model, batch, rng):
    feeds = {}
    for vi in model.graph.input:
        # a symbolic sequence length (the Hugging Face exports) is given 16
        shape = [batch] + [d.dim_value or 16 for d in vi.type.tensor_type.shape.dim[1:]]
        if vi.name == "x":
            feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
        elif vi.name in ("ids", "input_ids"):
            feeds[vi.name] = rng.integers(0, 64, shape).astype(np.int64)
        elif vi.name in ("mask", "attention_mask"):
            m = np.ones(shape, np.int64)
            m[-1, shape[1] * 3 // 4:] = 0  # padding in the last row
            feeds[vi.name] = m
        else:
            raise AssertionError(f"unexpected input {vi.name}")
    return feeds


def test_every_export_is_here():
    assert len(MODELS) == 11, MODELS
    # the dynamo exporter keeps the weights beside the model
    assert all((HERE / f"{m}.data").exists() for m in MODELS if "dynamo" in m)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """One rtxrun --batch-dir process over every model and batch size."""
    root = tmp_path_factory.mktemp("exports")
    rng = np.random.default_rng(2026)
    cases = {}
    for name in MODELS:
        model = onnx.load(str(HERE / name), load_external_data=False)
        for batch in (1, 3):
            case = root / f"{name[:-5]}-b{batch}"
            (case / "inputs").mkdir(parents=True)
            shutil.copy(HERE / name, case / "model.onnx")
            data = HERE / f"{name}.data"
            if data.exists():
                shutil.copy(data, case / data.name)
            feeds = inputs_for(model, batch, rng)
            for k, v in feeds.items():
                np.save(case / "inputs" / f"{k}.npy", v)
            cases[case.name] = (name, feeds)
    p = subprocess.run([str(rtxgraph.rtxrun_path()), "--batch-dir", str(root), "--json"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    reports = {}
    for line in p.stdout.splitlines():
        doc = json.loads(line)
        if "case" in doc:
            reports[doc["case"]] = doc
    return root, cases, reports


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("batch", [1, 3])
def test_export_matches_onnxruntime(results, name, batch):
    root, cases, reports = results
    case = f"{name[:-5]}-b{batch}"
    doc = reports[case]
    assert doc["exit"] == 0, doc
    _, feeds = cases[case]
    sess = ort.InferenceSession(str(HERE / name), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, feeds)
    got = np.load(root / case / "out" / "y.npy")
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
    ops = doc["ops"]
    if "op23" in name:
        # opset 23: ONNX's own Attention (causal, grouped queries; transformers' with its
        # mask) and RMSNormalization ops, each one rtx op
        assert ops.get("attention") == 2 and ops.get("rms_norm") == 5, ops
        assert "softmax" not in ops and "sqrt" not in ops, ops
    elif name.startswith("hf-"):
        # transformers' own graphs: GELU, layer norm and attention fused where written out,
        # Llama's RMSNorm (x * reciprocal(sqrt(mean(x^2) + eps))) as rms_norm
        assert "erf" not in ops and "tanh" not in ops, ops
        if "llama" in name:
            assert ops.get("rms_norm") == 5 and "sqrt" not in ops and "pow" not in ops, ops
        # every attention fused: queries and keys each scaled before their product, the
        # probabilities through transformers' NaN guard Where(IsNaN(P), 0, P)
        assert ops.get("attention") == 2 and "softmax" not in ops, ops
    elif name.startswith(("bert", "gpt2")):
        assert ops.get("attention") == 2, ops   # two layers, each one fused attention
        assert ops.get("layer_norm", 0) >= 4, ops
        assert ops.get("gelu") == 2, ops
        assert "softmax" not in ops and "erf" not in ops and "tanh" not in ops, ops
    else:
        assert ops.get("conv2d") == 6 and ops.get("max_pool2d") == 1, ops
