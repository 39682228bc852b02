"""
The example model repository $RTX_BUILD/examples/models (docs/serving.md), read here without
any rtxd code: safetensors headers parsed in Python and checked as the format requires
(aligned tensors tiling the data section), config.json in Triton's JSON form matching the
graph, weights declared as graph inputs that config.json does not list, and each graph run
by the NumPy reference interpreter with its weights from model.safetensors, which must give
exactly what the standalone example graph (weights as initializers) gives. The served outputs
themselves are compared with NumPy by the serving tests (tests/serving).
"""

import json
import struct

import numpy as np
import pytest

import rtxgraph as rg

ST_DTYPES = {"F32": np.float32, "F16": np.float16, "I8": np.int8, "I32": np.int32,
             "I64": np.int64, "U8": np.uint8, "BOOL": np.bool_}
CONFIG_DT = {"TYPE_FP32": "f32", "TYPE_INT32": "i32"}

MODELS = {
    # model: (standalone example graph or None, config expectations)
    "simple": (None, {"max_batch_size": 8, "batching": False}),
    "mlp": ("mlp", {"max_batch_size": 64, "batching": True, "preferred": [16, 32],
                    "delay": 500}),
    "mlp_nobatch": ("mlp", {"max_batch_size": 64, "batching": False}),
    "transformer_block": ("transformer_block", {"max_batch_size": 8, "batching": False}),
    # no standalone graph (32 MiB of weights, kept in the repository only): checked against
    # NumPy below
    "mlp_wide": (None, {"max_batch_size": 64, "batching": True, "preferred": [16, 32],
                        "delay": 1000}),
    "mlp_wide_nobatch": (None, {"max_batch_size": 64, "batching": False}),
}


def read_safetensors(path):
    """{name: array} from a safetensors file, checking the layout rules rtxd enforces."""
    data = path.read_bytes()
    (hlen,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + hlen])
    base = 8 + hlen
    out, spans = {}, []
    for name, t in header.items():
        if name == "__metadata__":
            assert all(isinstance(v, str) for v in t.values())
            continue
        dt = np.dtype(ST_DTYPES[t["dtype"]])
        b, e = t["data_offsets"]
        assert e - b == int(np.prod(t["shape"], dtype=np.int64)) * dt.itemsize, name
        assert (base + b) % dt.itemsize == 0, f"{name} is not aligned"
        spans.append((b, e))
        out[name] = np.frombuffer(data, dtype=dt, count=(e - b) // dt.itemsize,
                                  offset=base + b).reshape(t["shape"])
    at = 0
    for b, e in sorted(spans):
        assert b == at, "tensors must tile the data section"
        at = e
    assert at == len(data) - base
    return out


@pytest.fixture
def repo(examples_dir):
    r = examples_dir / "models"
    assert r.is_dir(), f"{r} missing (make examples)"
    return r


GENERATIVE = ["tiny-chat"]


def test_repository_lists_the_example_models(repo):
    assert sorted(p.name for p in repo.iterdir() if p.is_dir()) == sorted(list(MODELS) +
                                                                          GENERATIVE)


def test_tiny_chat_is_a_checkpoint_the_references_read(repo, tmp_path):
    """models/tiny-chat: a generative model whose version directory is a Hugging Face
    checkpoint; its tokenizer gives `tokenizers`' ids through rtxgen, and rtxgen's step-graph
    logits equal the NumPy reference decoder's (tests/interop/np_decoder.py)."""
    import subprocess
    from tokenizers import Tokenizer
    build = rg.build_dir()
    from np_decoder import Decoder
    cfg = json.loads((repo / "tiny-chat" / "config.json").read_text())
    assert cfg["platform"] == "rtx_generate" and "input" not in cfg
    ckpt = repo / "tiny-chat" / "1"
    hf = json.loads((ckpt / "config.json").read_text())
    assert hf["architectures"] == ["LlamaForCausalLM"] and hf["vocab_size"] == 512
    text = "The device layer owns each GPU once: jobs and models share it. \u00e9\u4e16 \U0001f600"
    want = Tokenizer.from_file(str(ckpt / "tokenizer.json")).encode(text).ids
    got = subprocess.run([str(build / "bin" / "rtxgen"), str(ckpt), "encode", text],
                         check=True, capture_output=True, text=True).stdout
    assert json.loads(got) == want
    ids = want[:20]
    out = tmp_path / "logits.npy"
    subprocess.run([str(build / "bin" / "rtxgen"), str(ckpt), "logits", "--ids",
                    ",".join(map(str, ids[:12])), "--decode", ",".join(map(str, ids[12:])),
                    "--out", str(out)], check=True)
    got = np.load(out)
    ref = Decoder(ckpt).forward(ids)
    np.testing.assert_allclose(got, ref[11:], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("model", sorted(MODELS))
def test_model_files(model, repo, examples_dir):
    standalone, want = MODELS[model]
    cfg = json.loads((repo / model / "config.json").read_text())
    assert cfg["name"] == model and cfg["platform"] == "rtx_graph"
    assert cfg["max_batch_size"] == want["max_batch_size"]
    assert ("dynamic_batching" in cfg) == want["batching"]
    if want["batching"]:
        db = cfg["dynamic_batching"]
        assert db["preferred_batch_size"] == want["preferred"]
        assert db["max_queue_delay_microseconds"] == want["delay"]
    g = rg.load_graph(repo / model / "1" / "model.rtxg")
    assert len(g.initializers) == 0, "model.rtxg must carry no weight bytes"
    inputs = {vi.name: vi for vi in g.inputs}
    config_inputs = {i["name"]: i for i in cfg["input"]}
    for name, ci in config_inputs.items():
        vi = inputs[name]
        assert rg.ENUM_DT[vi.dtype] == CONFIG_DT[ci["data_type"]]
        assert list(vi.dims) == [-1] + ci["dims"]  # the batch dimension, then config dims
    assert {o.name for o in g.outputs} >= {o["name"] for o in cfg["output"]}

    st_path = repo / model / "1" / "model.safetensors"
    weights = read_safetensors(st_path) if st_path.exists() else {}
    # every graph input that config.json does not list is a weight of model.safetensors
    assert set(inputs) - set(config_inputs) == set(weights)
    for name, w in weights.items():
        assert rg.ENUM_DT[inputs[name].dtype] == "f32"
        assert list(inputs[name].dims) == list(w.shape)

    rng = np.random.default_rng(7)
    feeds = {}
    for name, ci in config_inputs.items():
        shape = [3] + ci["dims"]
        if ci["data_type"] == "TYPE_INT32":
            feeds[name] = rng.integers(-100, 100, shape).astype(np.int32)
        else:
            feeds[name] = rng.standard_normal(shape).astype(np.float32)
    got = rg.evaluate(g, {**feeds, **{k: np.array(v) for k, v in weights.items()}})
    if model.startswith("mlp_wide"):  # y = gelu_tanh(x @ w1 + b1) @ w2 + b2
        h = feeds["x"].astype(np.float64) @ weights["w1"] + weights["b1"]
        h = 0.5 * h * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (h + 0.044715 * h ** 3)))
        np.testing.assert_allclose(got["y"].a, h @ weights["w2"] + weights["b2"], rtol=1e-4,
                                   atol=2e-5)
        return
    if standalone is None:  # simple: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1
        np.testing.assert_array_equal(got["OUTPUT0"].a, feeds["INPUT0"] + feeds["INPUT1"])
        np.testing.assert_array_equal(got["OUTPUT1"].a, feeds["INPUT0"] - feeds["INPUT1"])
        return
    ref_graph = rg.load_graph(examples_dir / f"{standalone}.rtxg")
    inits = {t.name: rg.tensor_from_proto(t).a for t in ref_graph.initializers}
    assert set(inits) == set(weights)
    for name in weights:  # the same weights, byte for byte
        assert inits[name].tobytes() == weights[name].tobytes(), name
    ref = rg.evaluate(ref_graph, feeds)
    for o in cfg["output"]:
        np.testing.assert_array_equal(got[o["name"]].a, ref[o["name"]].a)
