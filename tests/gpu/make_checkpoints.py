#!/usr/bin/env python3
"""
make_checkpoints.py - random-weight Hugging Face checkpoints of real model configurations,
made with transformers' save_pretrained (safetensors, bf16), for the generation tests and the
generation benchmark on the GPU machine (issue 13; tests/gpu/test_generate_torch.py,
bench/bench_generate.py). The GPU machine cannot download, so nothing comes from a hub:

  gpt2-small     GPT-2 small: width 768, 12 layers, 12 heads, 1024 positions, gelu_new,
                 vocab 50257, tied embeddings
  llama-3.2-1b   Llama-3.2-1B: width 2048, 16 layers, 32 heads and 8 KV heads of 64,
                 SwiGLU 8192, vocab 128256, rope_theta 500000 with Llama 3's rope scaling
                 (factor 32, low 1, high 4, original 8192), RMSNorm eps 1e-5, tied
  qwen2.5-0.5b   Qwen2.5-0.5B: width 896, 24 layers, 14 heads and 2 KV heads of 64, SwiGLU
                 4864, vocab 151936, QKV bias, rope_theta 1e6, RMSNorm eps 1e-6, tied

    python3 tests/gpu/make_checkpoints.py [OUTDIR] [--only NAME[,NAME]] [--smoke]
                                          [--device cuda|cpu] [--force]

OUTDIR (default $RTX_BUILD/gen-checkpoints, else build/gen-checkpoints) gets one folder per
model, NAME/ (NAME-smoke/ with --smoke) holding config.json, model.safetensors,
generation_config.json, tokenizer.json, tokenizer_config.json and special_tokens_map.json,
and a stamp (.made) of what made it: a folder whose stamp matches is kept as it is, so the
tests and the benchmark share one set (--force remakes it). --smoke makes the same three
architectures with the same features (rope scaling, grouped-query attention, QKV bias, tied
embeddings) at width 64 and 2 layers, in seconds on a CPU, for checking the test scripts
without a GPU.

Weights: transformers' own initialization (normal, std initializer_range 0.02), made on
--device (default cuda when there is one) in f32 from a fixed seed, then changed where that
initialization would hide mistakes or drown the checks in rounding noise: every bias (QKV,
GPT-2's) and every norm's weight and bias are drawn at random (a bias of zero passes whatever
is done with it); Llama's and Qwen2's attention and MLP output projections are scaled by
1/sqrt(2 layers), as GPT-2's own initialization does (a random deep stack amplifies bf16
rounding from layer to layer less so); and the final norm's weight is scaled so that the
logits have a standard deviation of about LOGIT_STD (with 0.02 weights they would be nearly
flat over the vocabulary and every token a near-tie, so the greedy-token checks would judge
nothing). Then cast to bf16 and saved.

Tokenizer: a byte-level BPE trained here with `tokenizers` (which transformers brings) to
exactly the model's vocabulary size, so that every id the model can emit is a token rtxd can
decode: on this repository's docs (real text) plus a seeded synthetic corpus of random
lowercase words that gives the trainer enough distinct pairs to reach 128k-152k merges. The
special tokens are the model's own names (Llama 3's <|begin_of_text|> ..., Qwen's
<|endoftext|> <|im_start|> <|im_end|>, GPT-2's <|endoftext|>) at the first ids, and
config.json's bos/eos ids point at them. No chat template (the tests send token ids).

Needs torch, transformers and tokenizers (the GPU machine's python3 has them). make() is the
entry point for the other scripts.
"""

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LOGIT_STD = 4.0
SEED = 13
VERSION = 2  # bump when what make() writes changes: stamps of older folders stop matching

LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                   "<|end_header_id|>", "<|eot_id|>"]
QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# name -> architecture, the Hugging Face config's fields, special tokens, bos and eos
MODELS = {
    "gpt2-small": {
        "arch": "gpt2",
        "config": {"n_embd": 768, "n_layer": 12, "n_head": 12, "n_positions": 1024,
                   "n_inner": None, "vocab_size": 50257, "activation_function": "gelu_new",
                   "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True},
        "specials": ["<|endoftext|>"], "bos": "<|endoftext|>", "eos": "<|endoftext|>",
        "context": 1024,
    },
    "llama-3.2-1b": {
        "arch": "llama",
        "config": {"hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32,
                   "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 8192,
                   "vocab_size": 128256, "hidden_act": "silu", "rms_norm_eps": 1e-5,
                   "max_position_embeddings": 131072, "rope_theta": 500000.0,
                   "rope_scaling": {"rope_type": "llama3", "factor": 32.0,
                                    "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                    "original_max_position_embeddings": 8192},
                   "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": True},
        "specials": LLAMA3_SPECIALS, "bos": "<|begin_of_text|>", "eos": "<|end_of_text|>",
        "context": 131072,
    },
    "qwen2.5-0.5b": {
        "arch": "qwen2",
        "config": {"hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14,
                   "num_key_value_heads": 2, "intermediate_size": 4864, "vocab_size": 151936,
                   "hidden_act": "silu", "rms_norm_eps": 1e-6,
                   "max_position_embeddings": 32768, "rope_theta": 1000000.0,
                   "use_sliding_window": False, "sliding_window": 32768,
                   "max_window_layers": 24, "tie_word_embeddings": True},
        "specials": QWEN_SPECIALS, "bos": None, "eos": "<|endoftext|>", "context": 32768,
    },
}

# --smoke: the same models at width 64, 2 layers, a 512-id vocabulary
SMOKE = {
    "gpt2-small": {"n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 256,
                   "vocab_size": 512},
    "llama-3.2-1b": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                     "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128,
                     "vocab_size": 512, "max_position_embeddings": 4096,
                     "rope_scaling": {"rope_type": "llama3", "factor": 32.0,
                                      "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                      "original_max_position_embeddings": 64}},
    "qwen2.5-0.5b": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                     "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 512,
                     "max_position_embeddings": 4096, "max_window_layers": 2},
}


def default_outdir():
    return Path(os.environ.get("RTX_BUILD") or REPO / "build") / "gen-checkpoints"


def spec(name, smoke=False):
    """The model's description: MODELS[name] with --smoke's sizes applied."""
    s = json.loads(json.dumps(MODELS[name]))
    if smoke:
        s["config"].update(SMOKE[name])
        s["context"] = s["config"].get("n_positions") or s["config"]["max_position_embeddings"]
    return s


def folder_name(name, smoke=False):
    return f"{name}-smoke" if smoke else name


# ------------------------------------------------------------------------------------------
# tokenizer
# ------------------------------------------------------------------------------------------

def corpus(vocab_size, scale=1):
    """Text to train on: the repository's docs, then random lowercase words (seeded), about
    3 words per vocabulary entry beyond what the docs give (times scale)."""
    import numpy as np
    texts = [p.read_text(encoding="utf-8", errors="replace")
             for p in sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"] if p.exists()]
    n_words = max(0, vocab_size - 4000) * 3 * scale
    if n_words:
        rng = np.random.default_rng(SEED)
        lens = rng.integers(2, 11, n_words)
        letters = rng.integers(ord("a"), ord("z") + 1, int(lens.sum()), dtype=np.uint8).tobytes()
        ends = np.cumsum(lens)
        words = [letters[a:b].decode() for a, b in zip(np.r_[0, ends[:-1]], ends)]
        texts += [" ".join(words[i:i + 200]) for i in range(0, n_words, 200)]
    return texts


def train_tokenizer(vocab_size, specials):
    """A byte-level BPE of exactly vocab_size ids (specials first), or RuntimeError."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    for scale in (1, 2, 4):
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                      show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(corpus(vocab_size, scale), trainer)
        if tok.get_vocab_size() == vocab_size:
            return tok
    raise RuntimeError(f"the BPE trainer reached {tok.get_vocab_size()} ids, not {vocab_size}")


# ------------------------------------------------------------------------------------------
# model
# ------------------------------------------------------------------------------------------

def hf_config(s, tok):
    """The transformers config object of spec s, its bos/eos ids from the tokenizer."""
    from transformers import GPT2Config, LlamaConfig, Qwen2Config
    cls = {"gpt2": GPT2Config, "llama": LlamaConfig, "qwen2": Qwen2Config}[s["arch"]]
    fields = dict(s["config"])
    eos = tok.token_to_id(s["eos"])
    bos = tok.token_to_id(s["bos"]) if s["bos"] else None
    fields.update({"bos_token_id": bos, "eos_token_id": eos})
    return cls(**fields)


def randomize(model, s, seed):
    """Biases and norm parameters drawn at random, residual output projections scaled, the
    final norm's weight scaled so that the logits' standard deviation is about LOGIT_STD (see
    the module's comment)."""
    import torch
    g = torch.Generator(device="cpu").manual_seed(seed)
    hidden = s["config"].get("hidden_size") or s["config"]["n_embd"]
    init = getattr(model.config, "initializer_range", 0.02)
    final = "transformer.ln_f.weight" if s["arch"] == "gpt2" else "model.norm.weight"
    layers = s["config"].get("num_hidden_layers") or s["config"]["n_layer"]
    with torch.no_grad():
        for name, p in model.named_parameters():
            if s["arch"] != "gpt2" and name.endswith(("o_proj.weight", "down_proj.weight")):
                p.mul_(1 / (2 * layers) ** 0.5)
                continue
            is_norm = ("norm" in name or ".ln_" in name or name.startswith("transformer.ln_"))
            if name.endswith("bias"):
                r = 0.1 * torch.randn(p.shape, generator=g)
            elif is_norm:
                r = 1.0 + 0.1 * torch.randn(p.shape, generator=g)
            else:
                continue
            if name == final:
                r = r * LOGIT_STD / (init * hidden ** 0.5)
            p.copy_(r.to(p.device, p.dtype))


def stamp_of(name, s, smoke):
    text = json.dumps({"version": VERSION, "name": name, "spec": s, "smoke": smoke,
                       "seed": SEED, "logit_std": LOGIT_STD}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def make(name, outdir=None, smoke=False, device=None, force=False, log=print):
    """Makes (or keeps, when its stamp matches) the checkpoint folder of model `name`; returns
    its path."""
    s = spec(name, smoke)
    out = Path(outdir or default_outdir()) / folder_name(name, smoke)
    stamp = stamp_of(name, s, smoke)
    if not force and (out / ".made").exists() and (out / ".made").read_text().strip() == stamp:
        return out
    import torch
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast
    if device is None:
        device = "cuda" if torch.cuda.is_available() and not smoke else "cpu"
    t0 = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    (out / ".made").unlink(missing_ok=True)
    tok = train_tokenizer(s["config"]["vocab_size"], s["specials"])
    t1 = time.monotonic()
    cfg = hf_config(s, tok)
    seed = SEED + sum(map(ord, name))
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg)
    model = model.to(device=device, dtype=torch.float32)
    randomize(model, s, seed)
    model = model.to(torch.bfloat16)
    model.generation_config.do_sample = False
    model.save_pretrained(out, safe_serialization=True)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=s["eos"],
                                   bos_token=s["bos"], model_max_length=s["context"],
                                   clean_up_tokenization_spaces=False)
    fast.save_pretrained(out)
    n_params = sum(p.numel() for p in model.parameters())
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    (out / ".made").write_text(stamp + "\n")
    log(f"make_checkpoints: {out}: {s['arch']}, {n_params / 1e6:.1f}M parameters, vocab "
        f"{s['config']['vocab_size']} (tokenizer {t1 - t0:.1f} s, model "
        f"{time.monotonic() - t1:.1f} s on {device})")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir", nargs="?", default=None)
    ap.add_argument("--only", default="", help="comma-separated names (default: all)")
    ap.add_argument("--smoke", action="store_true", help="tiny versions, on the CPU")
    ap.add_argument("--device", default=None, help="where the weights are made")
    ap.add_argument("--force", action="store_true", help="remake folders whose stamp matches")
    args = ap.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        print(f"make_checkpoints: unknown model(s) {unknown}; known: {list(MODELS)}",
              file=sys.stderr)
        return 2
    for n in names:
        print(make(n, args.outdir, args.smoke, args.device, args.force))
    return 0


if __name__ == "__main__":
    sys.exit(main())
