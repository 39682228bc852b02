"""
np_decoder - a NumPy reference forward pass for the decoders rtxd generates with (GPT-2, Llama
with Llama 3 / linear rope scaling and grouped-query attention, Qwen2), read from a Hugging
Face checkpoint directory (config.json and model.safetensors or its shards). It follows
transformers' modeling code (GPT2LMHeadModel, LlamaForCausalLM, Qwen2ForCausalLM) step by
step, in float64 over the weights as stored (bf16 weights are widened exactly), except the
rotary angles, which transformers computes in float32 (inv_freq, then position * inv_freq).

    dec = Decoder(path)
    logits = dec.forward([1, 2, 3])   # [T, vocab] float64, one row per position (causal)

As a program it checks itself against transformers (torch and transformers needed; the GPU
machine's python3 has them, `make test-gpu` runs it):

    python3 tests/interop/np_decoder.py --against-transformers [DIR]
        makes genfixtures.py's checkpoints in DIR (default: a temporary directory) and
        compares each with transformers' AutoModelForCausalLM on the same files
"""

import json
import math
import sys
import tempfile
from pathlib import Path

import numpy as np

ST_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": "bf16", "I32": np.int32,
             "I64": np.int64}


def read_safetensors(path):
    """{name: float64 array} of one safetensors file (BF16 widened exactly)."""
    raw = Path(path).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        buf = data[b:end]
        dt = ST_DTYPES[e["dtype"]]
        if dt == "bf16":
            a = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            a = np.frombuffer(buf, dtype=np.dtype(dt).newbyteorder("<"))
        out[name] = a.reshape(e["shape"]).astype(np.float64)
    return out


def read_weights(path):
    """Every tensor of a checkpoint directory (single file or the index's shards)."""
    path = Path(path)
    if (path / "model.safetensors").exists():
        return read_safetensors(path / "model.safetensors")
    index = json.loads((path / "model.safetensors.index.json").read_text())
    out = {}
    for f in sorted(set(index["weight_map"].values())):
        out.update(read_safetensors(path / f))
    return out


def inv_freq(cfg, head_dim):
    """transformers' rotary inverse frequencies (float32), with rope_scaling applied."""
    rs = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    base = rs.get("rope_theta", cfg.get("rope_theta", 10000.0))
    inv = (1.0 / (np.float32(base) ** (np.arange(0, head_dim, 2, dtype=np.float32)
                                       / np.float32(head_dim)))).astype(np.float32)
    kind = rs.get("rope_type", rs.get("type", "default"))
    if kind == "linear":
        inv = (inv / np.float32(rs["factor"])).astype(np.float32)
    elif kind == "llama3":
        factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        low_wl, high_wl = old / low, old / high
        wl = (2 * math.pi / inv).astype(np.float32)
        llama = np.where(wl > low_wl, inv / np.float32(factor), inv).astype(np.float32)
        smooth = ((old / wl - low) / (high - low)).astype(np.float32)
        smoothed = ((1 - smooth) * llama / np.float32(factor) + smooth * llama).astype(np.float32)
        medium = ~(wl < high_wl) & ~(wl > low_wl)
        inv = np.where(medium, smoothed, llama).astype(np.float32)
    elif kind != "default":
        raise ValueError(f"rope type {kind}")
    return inv


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_exact(x):
    from math import erf
    return 0.5 * x * (1.0 + np.vectorize(erf)(x / math.sqrt(2.0)))


def silu(x):
    return x / (1.0 + np.exp(-x))


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def causal_attention(q, k, v):
    """q [T, H, D], k and v [T, Hkv, D]: query head h reads KV head h // (H // Hkv)."""
    t, h, d = q.shape
    rep = h // k.shape[1]
    k = np.repeat(k, rep, axis=1)
    v = np.repeat(v, rep, axis=1)
    s = np.einsum("thd,shd->hts", q, k) / math.sqrt(d)
    s = np.where(np.tril(np.ones((t, t), dtype=bool))[None], s, -np.inf)
    return np.einsum("hts,shd->thd", softmax(s), v)


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


class Decoder:
    def __init__(self, path):
        self.path = Path(path)
        self.cfg = json.loads((self.path / "config.json").read_text())
        self.w = read_weights(self.path)
        arch = (self.cfg.get("architectures") or [None])[0]
        self.kind = {"GPT2LMHeadModel": "gpt2", "LlamaForCausalLM": "llama",
                     "MistralForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2"}[arch]

    def _get(self, prefix, name):
        for k in (prefix + name, name):
            if k in self.w:
                return self.w[k]
        raise KeyError(prefix + name)

    def forward(self, ids):
        ids = np.asarray(ids, dtype=np.int64)
        return self._gpt2(ids) if self.kind == "gpt2" else self._llama(ids)

    def _gpt2(self, ids):
        c, g = self.cfg, (lambda n: self._get("transformer.", n))
        h, nh = c["n_embd"], c["n_head"]
        d, eps = h // nh, c.get("layer_norm_epsilon", 1e-5)
        act = c.get("activation_function", "gelu_new")
        f = {"gelu": gelu_exact, "relu": lambda x: np.maximum(x, 0)}.get(act, gelu_tanh)
        t = len(ids)
        x = g("wte.weight")[ids] + g("wpe.weight")[np.arange(t)]
        for i in range(c["n_layer"]):
            p = f"h.{i}."
            a = layer_norm(x, g(p + "ln_1.weight"), g(p + "ln_1.bias"), eps)
            qkv = a @ g(p + "attn.c_attn.weight") + g(p + "attn.c_attn.bias")
            q, k, v = (qkv[:, j * h:(j + 1) * h].reshape(t, nh, d) for j in range(3))
            o = causal_attention(q, k, v).reshape(t, h)
            x = x + o @ g(p + "attn.c_proj.weight") + g(p + "attn.c_proj.bias")
            a = layer_norm(x, g(p + "ln_2.weight"), g(p + "ln_2.bias"), eps)
            m = f(a @ g(p + "mlp.c_fc.weight") + g(p + "mlp.c_fc.bias"))
            x = x + m @ g(p + "mlp.c_proj.weight") + g(p + "mlp.c_proj.bias")
        x = layer_norm(x, g("ln_f.weight"), g("ln_f.bias"), eps)
        head = (g("wte.weight") if c.get("tie_word_embeddings", True)
                else self.w["lm_head.weight"])
        return x @ head.T

    def _llama(self, ids):
        c, g = self.cfg, (lambda n: self._get("model.", n))
        h, nh = c["hidden_size"], c["num_attention_heads"]
        nkv = c.get("num_key_value_heads", nh)
        d = c.get("head_dim") or h // nh
        eps = c.get("rms_norm_eps", 1e-6)
        qwen = self.kind == "qwen2"
        bias = qwen or c.get("attention_bias", False)
        o_bias = (not qwen) and c.get("attention_bias", False)
        mlp_bias = (not qwen) and c.get("mlp_bias", False)
        t = len(ids)
        freqs = np.arange(t, dtype=np.float32)[:, None] * inv_freq(c, d)[None, :]
        emb = np.concatenate([freqs, freqs], axis=-1).astype(np.float64)
        cos, sin = np.cos(emb)[:, None, :], np.sin(emb)[:, None, :]

        def lin(x, p, name, with_bias):
            y = x @ g(p + name + ".weight").T
            return y + g(p + name + ".bias") if with_bias else y

        x = g("embed_tokens.weight")[ids]
        for i in range(c["num_hidden_layers"]):
            p = f"layers.{i}."
            a = rms_norm(x, g(p + "input_layernorm.weight"), eps)
            q = lin(a, p, "self_attn.q_proj", bias).reshape(t, nh, d)
            k = lin(a, p, "self_attn.k_proj", bias).reshape(t, nkv, d)
            v = lin(a, p, "self_attn.v_proj", bias).reshape(t, nkv, d)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            o = causal_attention(q, k, v).reshape(t, nh * d)
            x = x + lin(o, p, "self_attn.o_proj", o_bias)
            a = rms_norm(x, g(p + "post_attention_layernorm.weight"), eps)
            m = silu(lin(a, p, "mlp.gate_proj", mlp_bias)) * lin(a, p, "mlp.up_proj", mlp_bias)
            x = x + lin(m, p, "mlp.down_proj", mlp_bias)
        x = rms_norm(x, g("norm.weight"), eps)
        head = (g("embed_tokens.weight") if c.get("tie_word_embeddings", False)
                else self.w["lm_head.weight"])
        return x @ head.T


def against_transformers(path, n_ids=48, seed=5):
    """The largest |np_decoder - transformers| over logits of n_ids random ids, relative to
    transformers' largest logit (transformers computing in float32 on the CPU)."""
    import torch
    import transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path),
                                                              torch_dtype=torch.float32)
    model.eval()
    vocab = json.loads((Path(path) / "config.json").read_text())["vocab_size"]
    ids = [int(x) for x in np.random.default_rng(seed).integers(0, vocab, n_ids)]
    with torch.no_grad():
        ref = model(torch.tensor([ids])).logits[0].double().numpy()
    mine = Decoder(path).forward(ids)
    return float(np.abs(ref - mine).max() / np.abs(ref).max())


TOLERANCE = 2e-6  # relative: float32 transformers against this float64 reference


def main(argv):
    if len(argv) < 2 or argv[1] != "--against-transformers" or len(argv) > 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    import genfixtures
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(argv[2]) if len(argv) == 3 else Path(tmp)
        bad = 0
        for name in genfixtures.FIXTURES:
            err = against_transformers(genfixtures.make(root / name, name))
            ok = err < TOLERANCE
            bad += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {name}: relative error {err:.3g}")
        print(f"{len(genfixtures.FIXTURES) - bad} passed, {bad} failed")
        return 1 if bad else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main(sys.argv))
