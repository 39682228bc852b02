"""
genfixtures - tiny decoder checkpoints in Hugging Face's layout, made with NumPy and
`tokenizers` only (no torch): random weights (seeded), a byte-level BPE tokenizer trained here
on a small corpus, tokenizer_config.json with a ChatML chat template, generation_config.json.
The generation tests and the daemon's tests load them; np_decoder.py is their reference.

    python tests/interop/genfixtures.py OUTDIR [NAME ...]    # every fixture, or those named

Each fixture is OUTDIR/NAME (FIXTURES below): config.json, model.safetensors (or
model-0000N-of-00002.safetensors and model.safetensors.index.json), tokenizer.json,
tokenizer_config.json, generation_config.json.
"""

import json
import sys
from pathlib import Path

import numpy as np

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>"]

CORPUS = [
    "The quick brown fox jumps over the lazy dog. It's 2024; we've got 1234567890 reasons.",
    "Ça va? Élégant café, naïve façade, jalapeño, Straße, Ünïcödé.",
    "東京は日本の首都です。我爱自然语言处理。",
    "Emoji: 👍🏽 👨‍👩‍👧‍👦 😀😃😄",
    "def f(x):\n\treturn x ** 2  # square\n\n    indented   spaces",
    "Once upon a time there was a tiny model that generated text one token at a time.",
    "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\nhi there<|im_end|>",
] * 20

# name -> (architecture, weight dtype, options)
FIXTURES = {
    "llama-f32": ("llama", "f32", {}),
    "llama-bf16": ("llama", "bf16", {}),
    "llama-tied-f32": ("llama", "f32", {"tied": True, "bos_object": True}),
    "llama3-rope-f32": ("llama", "f32", {"rope": "llama3", "layers": 3}),
    "llama-linear-bf16": ("llama", "bf16", {"rope": "linear", "sharded": True}),
    "qwen2-f32": ("qwen2", "f32", {"tied": True}),
    "qwen2-bf16": ("qwen2", "bf16", {"templates_list": True}),
    "qwen2-f16": ("qwen2", "f16", {}),
    "gpt2-f32": ("gpt2", "f32", {}),
    "gpt2-bf16": ("gpt2", "bf16", {"no_prefix": True}),
}


# ------------------------------------------------------------------------------------------
# safetensors
# ------------------------------------------------------------------------------------------

def bf16_bits(a):
    """float32 -> bfloat16 bit patterns (round to nearest even)."""
    u = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_round(a):
    """float32 values rounded to bfloat16 (as float32)."""
    return (bf16_bits(a).astype(np.uint32) << 16).view(np.float32)


def write_safetensors(path, tensors, dtype):
    """tensors: {name: float array}; dtype 'f32', 'f16' or 'bf16'."""
    st_dtype = {"f32": "F32", "f16": "F16", "bf16": "BF16"}[dtype]
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = np.asarray(tensors[name], dtype=np.float32)
        if dtype == "bf16":
            raw = bf16_bits(a).tobytes()
        elif dtype == "f16":
            raw = a.astype("<f2").tobytes()
        else:
            raw = a.astype("<f4").tobytes()
        header[name] = {"dtype": st_dtype, "shape": list(a.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)


def write_weights(out, tensors, dtype, sharded):
    if not sharded:
        write_safetensors(out / "model.safetensors", tensors, dtype)
        return
    names = sorted(tensors)
    parts = [names[: len(names) // 2], names[len(names) // 2:]]
    wmap, total = {}, 0
    for i, part in enumerate(parts):
        fname = f"model-{i + 1:05d}-of-{len(parts):05d}.safetensors"
        write_safetensors(out / fname, {n: tensors[n] for n in part}, dtype)
        for n in part:
            wmap[n] = fname
            total += tensors[n].size * (4 if dtype == "f32" else 2)
    (out / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": wmap}, indent=2))


# ------------------------------------------------------------------------------------------
# tokenizer
# ------------------------------------------------------------------------------------------

def train_tokenizer(path, vocab_size=400):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                  show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    tok.save(str(path))
    return tok


# ------------------------------------------------------------------------------------------
# weights and configs
# ------------------------------------------------------------------------------------------

def _lin(rng, out_dim, in_dim):
    return rng.standard_normal((out_dim, in_dim)).astype(np.float32) / np.sqrt(in_dim)


def _norm(rng, n):
    return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)


def _bias(rng, n):
    return (0.1 * rng.standard_normal(n)).astype(np.float32)


def llama_model(rng, vocab, kind, opts):
    hidden, heads, kv, inter = 64, 4, 2, 160
    layers = opts.get("layers", 2)
    d = hidden // heads
    tied = opts.get("tied", False)
    cfg = {
        "architectures": ["Qwen2ForCausalLM" if kind == "qwen2" else "LlamaForCausalLM"],
        "model_type": kind, "hidden_size": hidden, "intermediate_size": inter,
        "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv,
        "vocab_size": vocab, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": tied,
        "bos_token_id": 3, "eos_token_id": 2,
    }
    if kind == "llama":
        cfg.update({"attention_bias": False, "mlp_bias": False})
    else:
        cfg.update({"use_sliding_window": False, "sliding_window": 4096, "max_window_layers": 2,
                    "bos_token_id": None, "eos_token_id": 0})
    if opts.get("rope") == "llama3":
        cfg["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    elif opts.get("rope") == "linear":
        cfg["rope_scaling"] = {"type": "linear", "factor": 2.0}
    w = {"model.embed_tokens.weight": rng.standard_normal((vocab, hidden)).astype(np.float32)}
    for i in range(layers):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = _norm(rng, hidden)
        w[p + "post_attention_layernorm.weight"] = _norm(rng, hidden)
        for name, n in (("q", heads * d), ("k", kv * d), ("v", kv * d)):
            w[p + f"self_attn.{name}_proj.weight"] = _lin(rng, n, hidden)
            if kind == "qwen2":
                w[p + f"self_attn.{name}_proj.bias"] = _bias(rng, n)
        w[p + "self_attn.o_proj.weight"] = _lin(rng, hidden, heads * d)
        w[p + "mlp.gate_proj.weight"] = _lin(rng, inter, hidden)
        w[p + "mlp.up_proj.weight"] = _lin(rng, inter, hidden)
        w[p + "mlp.down_proj.weight"] = _lin(rng, hidden, inter)
    w["model.norm.weight"] = _norm(rng, hidden)
    if not tied:
        w["lm_head.weight"] = _lin(rng, vocab, hidden)
    return cfg, w


def gpt2_model(rng, vocab, opts):
    hidden, heads, layers, positions = 64, 4, 2, 128
    cfg = {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": hidden,
        "n_head": heads, "n_layer": layers, "n_positions": positions, "n_ctx": positions,
        "n_inner": None, "vocab_size": vocab, "layer_norm_epsilon": 1e-5,
        "activation_function": "gelu_new", "bos_token_id": 0, "eos_token_id": 0,
        "tie_word_embeddings": True,
    }
    pre = "" if opts.get("no_prefix") else "transformer."
    w = {pre + "wte.weight": (0.5 * rng.standard_normal((vocab, hidden))).astype(np.float32),
         pre + "wpe.weight": (0.5 * rng.standard_normal((positions, hidden))).astype(np.float32)}
    for i in range(layers):
        p = f"{pre}h.{i}."
        w[p + "ln_1.weight"], w[p + "ln_1.bias"] = _norm(rng, hidden), _bias(rng, hidden)
        w[p + "ln_2.weight"], w[p + "ln_2.bias"] = _norm(rng, hidden), _bias(rng, hidden)
        # Conv1D: [in, out]
        w[p + "attn.c_attn.weight"] = _lin(rng, 3 * hidden, hidden).T.copy()
        w[p + "attn.c_attn.bias"] = _bias(rng, 3 * hidden)
        w[p + "attn.c_proj.weight"] = _lin(rng, hidden, hidden).T.copy()
        w[p + "attn.c_proj.bias"] = _bias(rng, hidden)
        w[p + "mlp.c_fc.weight"] = _lin(rng, 4 * hidden, hidden).T.copy()
        w[p + "mlp.c_fc.bias"] = _bias(rng, 4 * hidden)
        w[p + "mlp.c_proj.weight"] = _lin(rng, hidden, 4 * hidden).T.copy()
        w[p + "mlp.c_proj.bias"] = _bias(rng, hidden)
    w[pre + "ln_f.weight"], w[pre + "ln_f.bias"] = _norm(rng, hidden), _bias(rng, hidden)
    return cfg, w


def make(out, name, seed=None):
    """Writes fixture `name` (a key of FIXTURES) into directory out; returns its path."""
    kind, dtype, opts = FIXTURES[name]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(out / "tokenizer.json")
    n_tok = tok.get_vocab_size()
    rng = np.random.default_rng(seed if seed is not None else sum(map(ord, name)))
    if kind == "gpt2":
        cfg, w = gpt2_model(rng, n_tok, opts)
    else:  # Qwen2's embeddings are padded past the tokenizer's ids, as the real ones are
        cfg, w = llama_model(rng, n_tok + (5 if kind == "qwen2" else 0), kind, opts)
    cfg["torch_dtype"] = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}[dtype]
    cfg["transformers_version"] = "4.46.0"
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    write_weights(out, w, dtype, opts.get("sharded", False))

    bos = "<|begin_of_text|>" if kind == "llama" else None
    eos = {"llama": "<|im_end|>", "qwen2": "<|im_end|>", "gpt2": "<|endoftext|>"}[kind]
    tc = {"model_max_length": cfg.get("max_position_embeddings", 128),
          "tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False,
          "eos_token": eos, "bos_token": bos}
    if kind == "llama":
        tc["add_bos_token"] = True
        if opts.get("bos_object"):
            tc["bos_token"] = {"__type": "AddedToken", "content": bos, "lstrip": False,
                               "normalized": False, "rstrip": False, "single_word": False}
    if kind != "gpt2":
        tc["chat_template"] = ([{"name": "default", "template": CHATML},
                                {"name": "tool_use", "template": CHATML + "{# tools #}"}]
                               if opts.get("templates_list") else CHATML)
    (out / "tokenizer_config.json").write_text(json.dumps(tc, indent=2))

    gen = {"_from_model_config": True, "transformers_version": "4.46.0"}
    if kind == "llama":
        gen.update({"bos_token_id": 3, "eos_token_id": [2, 1], "do_sample": True,
                    "temperature": 0.6, "top_p": 0.9, "top_k": 20,
                    "repetition_penalty": 1.1, "max_new_tokens": 64})
    elif kind == "qwen2":
        gen.update({"eos_token_id": [0, 2], "do_sample": False})
    else:
        gen.update({"bos_token_id": 0, "eos_token_id": 0})
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2))
    return out


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    names = argv[2:] or list(FIXTURES)
    for n in names:
        if n not in FIXTURES:
            print(f"unknown fixture {n!r} (known: {', '.join(FIXTURES)})", file=sys.stderr)
            return 2
        print(make(Path(argv[1]) / n, n))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
