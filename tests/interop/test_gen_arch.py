"""
The model side of generation (generation/arch-*.c, generation/model.c) through rtxgen against
the NumPy reference of np_decoder.py, on the tiny checkpoints of genfixtures.py (GPT-2, Llama
with GQA, tied and untied, Llama 3 and linear rope scaling, Qwen2 with QKV bias; f32, bf16 and
f16 weight files; one sharded): the step graph's logits after a prefill and after each decode step
(teacher forcing) equal the reference's, chunked prefill equals whole prefill, a ragged batch
of sequences with shuffled block tables and padding equals each sequence alone; the model's
special tokens, defaults and prompt encoding; malformed checkpoints refused naming the file
and the tensor or field. np_decoder itself is checked against transformers where torch and
transformers are installed (the GPU machine; RTX_ALLOW_SKIP=transformers elsewhere).
"""

import json
import os
import shutil
import re
import subprocess

import numpy as np
import pytest
from tokenizers import Tokenizer

import genfixtures
import np_decoder
import rtxgraph
import skips

# A prompt that crosses block boundaries (block size 16 and 4) and a few decode tokens.
PROMPT = [3, 17, 250, 9, 42, 100, 101, 7, 64, 33, 2, 5, 77, 300, 12, 13, 14, 15, 16, 99, 98,
          97, 5, 5, 5, 120, 121, 122, 1, 0, 333, 44, 45, 46, 47]
DECODE = [61, 62, 201, 8, 8, 390]


def rtxgen_path():
    return rtxgraph.build_dir() / "bin" / "rtxgen"


@pytest.fixture(autouse=True)
def _need_rtxgen():
    p = rtxgen_path()
    if not (p.is_file() and os.access(p, os.X_OK)):
        pytest.fail(f"{p} is missing: build it first (make all)", pytrace=False)


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    root = tmp_path_factory.mktemp("genfixtures")
    return {n: genfixtures.make(root / n, n) for n in genfixtures.FIXTURES}


def rtxgen(*args, check=True):
    r = subprocess.run([str(rtxgen_path()), *map(str, args)], capture_output=True, timeout=300)
    if check:
        assert r.returncode == 0, r.stderr.decode()
    return r


def logits(path, tmp_path, *args):
    out = tmp_path / "logits.npy"
    rtxgen(path, "logits", *args, "--out", out, "--threads", 2)
    return np.load(out)


def ids_arg(ids):
    return ",".join(map(str, ids))


def reference(path, prompt, decode):
    """The reference's logits of the prompt's last token and of each decode token."""
    full = np_decoder.Decoder(path).forward(list(prompt) + list(decode))
    return full[len(prompt) - 1:]


def assert_close(got, ref, rel):
    """Every logit within rel of the largest reference logit (they are O(1..60) here)."""
    assert got.shape == ref.shape, (got.shape, ref.shape)
    scale = np.abs(ref).max()
    err = np.abs(got - ref).max()
    assert err <= rel * scale, f"max |rtx - reference| = {err:.3g}, scale {scale:.3g}"


# ------------------------------------------------------------------------------------------
# Logits
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(genfixtures.FIXTURES))
def test_prefill_and_decode_match_reference_f32(fixtures, tmp_path, name):
    """f32 compute: bf16 files are widened exactly, so the reference sees the same weights.
    (The error seen is about 3e-7 of the largest logit.)"""
    path = fixtures[name]
    got = logits(path, tmp_path, "--ids", ids_arg(PROMPT), "--decode", ids_arg(DECODE))
    assert_close(got, reference(path, PROMPT, DECODE), 1e-5)


@pytest.mark.parametrize("name,dtype", [(n, "bf16") for n in genfixtures.FIXTURES] +
                         [("qwen2-f16", "f16"), ("llama-f32", "f16"), ("gpt2-bf16", "f16")])
def test_half_compute_tracks_reference(fixtures, tmp_path, name, dtype):
    """bf16 compute rounds every op's output (and f32 files' weights) to 8 bits of mantissa:
    the logits stay within 2% of the largest reference logit (about 0.4-0.9% seen) and the
    most likely token mostly agrees (all steps seen). f16 keeps 11 bits."""
    path = fixtures[name]
    got = logits(path, tmp_path, "--ids", ids_arg(PROMPT), "--decode", ids_arg(DECODE),
                 "--dtype", dtype)
    ref = reference(path, PROMPT, DECODE)
    assert_close(got, ref, 0.02)
    agree = np.mean(got.argmax(-1) == ref.argmax(-1))
    assert agree >= 0.85, f"greedy tokens agree on {agree:.0%} of the steps"


@pytest.mark.parametrize("name", ["llama-f32", "gpt2-f32", "qwen2-f32"])
def test_every_position_matches_reference(fixtures, tmp_path, name):
    """A prefill one token per step (--chunk 1) gives every position's logits."""
    path = fixtures[name]
    got = logits(path, tmp_path, "--ids", ids_arg(PROMPT), "--chunk", 1, "--every-chunk",
                 "--block-size", 4)
    ref = np_decoder.Decoder(path).forward(PROMPT)
    assert_close(got, ref, 1e-5)


@pytest.mark.parametrize("name", ["llama-f32", "gpt2-bf16", "qwen2-f32", "llama3-rope-f32"])
@pytest.mark.parametrize("chunk,block", [(5, 16), (16, 16), (7, 4), (1, 3)])
def test_chunked_prefill_equals_whole(fixtures, tmp_path, name, chunk, block):
    path = fixtures[name]
    args = ["--ids", ids_arg(PROMPT), "--decode", ids_arg(DECODE)]
    whole = logits(path, tmp_path, *args)
    chunked = logits(path, tmp_path, *args, "--chunk", chunk, "--block-size", block)
    assert_close(chunked, whole, 1e-5)


def test_batch_from_file_timing_and_plan_profile(fixtures, tmp_path):
    """--batch @FILE reads the same text from a file; --timing prints one line per step with
    its shape; RTX_PLAN_PROFILE=1 prints each step plan's node groups with their weights'
    names (digits as '#'), their times adding up to the stated total, and changes no logit."""
    path = fixtures["llama-f32"]
    seqs = [(PROMPT, DECODE[:2]), (PROMPT[3:20], [9])]
    spec = ";".join(f"{ids_arg(p)}|{ids_arg(d)}" for p, d in seqs)
    (tmp_path / "batch.txt").write_text(spec + "\n")
    direct = logits(path, tmp_path, "--batch", spec, "--chunk", 8)
    out = tmp_path / "f.npy"
    env = dict(os.environ, RTX_PLAN_PROFILE="1")
    r = subprocess.run([str(rtxgen_path()), str(path), "logits", "--batch",
                        f"@{tmp_path / 'batch.txt'}", "--chunk", "8", "--timing", "--threads",
                        "2", "--out", str(out)], capture_output=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr.decode()
    np.testing.assert_array_equal(np.load(out), direct)
    err = r.stderr.decode()
    steps = re.findall(r"^step: (\d+) tokens, (\d+) sequences, (\d+) blocks: plan [\d.]+ ms, "
                       r"run [\d.]+ ms \(plain\)$", err, re.M)  # the CPU never replays
    # chunks of 8: PROMPT (len(PROMPT) tokens) then 2 decode steps; the second sequence's 17
    # prompt tokens in 3 steps, then 1 decode step
    n_steps = max(-(-len(PROMPT) // 8) + 2, 3 + 1)
    assert len(steps) == n_steps, err
    assert steps[0][:2] == ("16", "2"), steps[0]
    tables = re.findall(r"^plan profile of 'decoder_step': 1 runs, ([\d.]+) ms per run in "
                        r"node groups\n((?:  .*\n?)+)", err, re.M)
    assert len(tables) == n_steps, err
    total, rows = tables[0]
    times = [float(x) for x in re.findall(r"^\s+([\d.]+) ms", rows, re.M)]
    assert abs(sum(times) - float(total)) <= 0.002 * len(times) + 1e-3, (times, total)
    assert "layers.#.wq" in rows and "paged_attention" in rows, rows
    bad = subprocess.run([str(rtxgen_path()), str(path), "logits", "--batch",
                          f"@{tmp_path / 'missing.txt'}", "--out", str(out)],
                         capture_output=True, timeout=60)
    assert bad.returncode == 2 and b"missing.txt" in bad.stderr, bad.stderr


@pytest.mark.parametrize("name", ["llama-f32", "gpt2-f32", "qwen2-bf16", "llama-tied-f32"])
@pytest.mark.parametrize("extra", [[], ["--chunk", 4, "--pad", 3, "--block-size", 4],
                                   ["--chunk", 9, "--seed", 7]])
def test_ragged_batch_equals_one_at_a_time(fixtures, tmp_path, name, extra):
    """Sequences of mixed lengths in one step (with --chunk, later steps mix one sequence's
    decode tokens with another's prompt chunks), non-contiguous block tables, padding tokens
    and sequences: each sequence's rows equal its run alone and the reference."""
    path = fixtures[name]
    seqs = [(PROMPT, DECODE), (PROMPT[5:9], [11, 12, 13, 14, 15, 16, 17, 18, 19]),
            (PROMPT[::-1][:30], [7]), ([42], [43, 44])]
    spec = ";".join(f"{ids_arg(p)}|{ids_arg(d)}" for p, d in seqs)
    got = logits(path, tmp_path, "--batch", spec, *extra)
    row = 0
    for p, d in seqs:
        alone = logits(path, tmp_path, "--ids", ids_arg(p), "--decode", ids_arg(d))
        mine = got[row:row + 1 + len(d)]
        row += 1 + len(d)
        assert_close(mine, alone, 1e-5)
        assert_close(mine, reference(path, p, d), 1e-5)
    assert row == got.shape[0]


def test_inv_freq_matches_reference(fixtures):
    """The rotary inverse frequencies (default, linear, Llama 3) agree with transformers'
    formulas as np_decoder computes them (float32) within an ulp or two."""
    for name in ("llama-f32", "llama3-rope-f32", "llama-linear-bf16"):
        info = json.loads(rtxgen(fixtures[name], "info").stdout)
        cfg = json.loads((fixtures[name] / "config.json").read_text())
        ref = np_decoder.inv_freq(cfg, info["head_dim"])
        np.testing.assert_allclose(np.array(info["inv_freq"], dtype=np.float32), ref,
                                   rtol=3e-7)
    info = json.loads(rtxgen(fixtures["llama3-rope-f32"], "info").stdout)
    plain = json.loads(rtxgen(fixtures["llama-f32"], "info").stdout)
    # the Llama 3 scaling keeps high frequencies, divides low ones by 8, smooths in between
    assert info["inv_freq"][0] == plain["inv_freq"][0]
    assert info["inv_freq"][-1] == pytest.approx(plain["inv_freq"][-1] / 8, rel=1e-6)
    assert plain["inv_freq"][2] / 8 < info["inv_freq"][2] < plain["inv_freq"][2]


# ------------------------------------------------------------------------------------------
# The model's files
# ------------------------------------------------------------------------------------------

def test_info_reports_the_checkpoint(fixtures):
    info = {n: json.loads(rtxgen(p, "info").stdout) for n, p in fixtures.items()}
    llama, qwen, gpt2 = info["llama-f32"], info["qwen2-bf16"], info["gpt2-f32"]
    assert (llama["arch"], llama["layers"], llama["hidden"], llama["heads"], llama["kv_heads"],
            llama["head_dim"], llama["vocab"], llama["context"]) == \
        ("llama", 2, 64, 4, 2, 16, 400, 256)
    assert llama["dtype"] == "f32" and info["llama-bf16"]["dtype"] == "bf16"
    assert info["qwen2-f16"]["dtype"] == "f16"
    assert llama["weight_bytes_cpu"] == 2 * llama["weight_bytes_gpu"]
    assert not llama["tied"] and info["llama-tied-f32"]["tied"] and gpt2["tied"]
    # EOS: config.json's 2, tokenizer_config's <|im_end|> (2), generation_config's [2, 1]
    assert sorted(llama["eos_ids"]) == [1, 2] and llama["bos_id"] == 3
    # Qwen2: config's 0, tokenizer_config's <|im_end|> (2); no BOS; padded vocabulary
    assert sorted(qwen["eos_ids"]) == [0, 2] and qwen["bos_id"] == -1
    assert qwen["vocab"] == qwen["tokenizer_vocab"] + 5 and qwen["qkv_bias"]
    assert gpt2["arch"] == "gpt2" and gpt2["eos_ids"] == [0] and gpt2["intermediate"] == 256
    # sampling defaults: Llama's generation_config sets them; Qwen2's do_sample false is greedy
    assert llama["defaults"] == {"temperature": 0.6, "top_p": 0.9, "top_k": 20, "min_p": 0.0,
                                 "repetition_penalty": 1.1}
    assert qwen["defaults"]["temperature"] == 0.0
    assert gpt2["defaults"]["temperature"] == 1.0 and gpt2["defaults"]["top_k"] == 0
    # chat templates: a string, a list with a default, none for GPT-2
    assert llama["chat_template"] and qwen["chat_template"] and not gpt2["chat_template"]


def test_encode_prompt_adds_bos_as_the_model_does(fixtures):
    tok = Tokenizer.from_file(str(fixtures["llama-f32"] / "tokenizer.json"))
    text = "Once upon a time <|im_start|>user"
    plain = tok.encode(text, add_special_tokens=False).ids
    for name, bos in (("llama-f32", [3]), ("llama-tied-f32", [3]), ("qwen2-f32", []),
                      ("gpt2-f32", [])):
        got = json.loads(rtxgen(fixtures[name], "encode", text).stdout)
        assert got == bos + plain, name
    # a prompt that already starts with BOS does not get a second one
    got = json.loads(rtxgen(fixtures["llama-f32"], "encode", "<|begin_of_text|>hi").stdout)
    assert got == [3] + tok.encode("hi", add_special_tokens=False).ids
    # add_bos_token false wins over the Llama convention
    path = fixtures["llama-f32"]
    tc = json.loads((path / "tokenizer_config.json").read_text())
    copy = path.parent / "llama-nobos"
    shutil.copytree(path, copy)
    tc["add_bos_token"] = False
    (copy / "tokenizer_config.json").write_text(json.dumps(tc))
    assert json.loads(rtxgen(copy, "encode", text).stdout) == plain
    # without tokenizer_config.json: Llama's convention, BOS from config.json
    (copy / "tokenizer_config.json").unlink()
    assert json.loads(rtxgen(copy, "encode", text).stdout) == [3] + plain


def test_chat_template_from_separate_files(fixtures, tmp_path):
    copy = tmp_path / "ck"
    shutil.copytree(fixtures["gpt2-f32"], copy)
    (copy / "chat_template.jinja").write_text(genfixtures.CHATML)
    assert json.loads(rtxgen(copy, "info").stdout)["chat_template"]
    (copy / "chat_template.jinja").unlink()
    (copy / "chat_template.json").write_text(json.dumps({"chat_template": genfixtures.CHATML}))
    assert json.loads(rtxgen(copy, "info").stdout)["chat_template"]


# ------------------------------------------------------------------------------------------
# Malformed checkpoints
# ------------------------------------------------------------------------------------------

def broken(fixtures, tmp_path, name="llama-f32"):
    copy = tmp_path / "broken"
    shutil.copytree(fixtures[name], copy)
    return copy


def rewrite_weights(path, change):
    """Rewrites model.safetensors (f32) after change(dict of tensors)."""
    w = np_decoder.read_safetensors(path / "model.safetensors")
    change(w)
    genfixtures.write_safetensors(path / "model.safetensors", w, "f32")


def refused(path, *needles):
    r = rtxgen(path, "info", check=False)
    msg = r.stderr.decode()
    assert r.returncode == 1, msg
    for n in needles:
        assert n in msg, f"{n!r} not in {msg!r}"
    return msg


def test_refuses_a_missing_tensor(fixtures, tmp_path):
    path = broken(fixtures, tmp_path)
    rewrite_weights(path, lambda w: w.pop("model.layers.1.mlp.up_proj.weight"))
    refused(path, "model.safetensors", "model.layers.1.mlp.up_proj.weight", "missing")


def test_refuses_a_missing_lm_head_when_untied(fixtures, tmp_path):
    path = broken(fixtures, tmp_path)
    rewrite_weights(path, lambda w: w.pop("lm_head.weight"))
    refused(path, "model.safetensors", "'lm_head.weight' is missing")


def test_refuses_a_mis_shaped_tensor(fixtures, tmp_path):
    path = broken(fixtures, tmp_path)
    rewrite_weights(path, lambda w: w.update(
        {"model.layers.0.self_attn.k_proj.weight": np.zeros((64, 64))}))
    refused(path, "model.safetensors", "model.layers.0.self_attn.k_proj.weight",
            "[64,64]", "expected f32[32,64]")


def test_refuses_a_mis_shaped_gpt2_c_attn(fixtures, tmp_path):
    path = broken(fixtures, tmp_path, "gpt2-f32")
    rewrite_weights(path, lambda w: w.update(
        {"transformer.h.1.attn.c_attn.weight": np.zeros((64, 64))}))
    refused(path, "transformer.h.1.attn.c_attn.weight", "expected f32[64,192]")


def test_refuses_a_truncated_file(fixtures, tmp_path):
    path = broken(fixtures, tmp_path)
    data = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(data[:len(data) - 100])
    refused(path, "model.safetensors")


def test_refuses_a_missing_shard(fixtures, tmp_path):
    path = broken(fixtures, tmp_path, "llama-linear-bf16")
    (path / "model-00002-of-00002.safetensors").unlink()
    refused(path, "model-00002-of-00002.safetensors")


def test_refuses_a_tensor_missing_from_its_shard(fixtures, tmp_path):
    path = broken(fixtures, tmp_path, "llama-linear-bf16")
    idx = json.loads((path / "model.safetensors.index.json").read_text())
    idx["weight_map"]["model.norm.weight"] = "model-00002-of-00002.safetensors" \
        if idx["weight_map"]["model.norm.weight"].startswith("model-00001") \
        else "model-00001-of-00002.safetensors"
    (path / "model.safetensors.index.json").write_text(json.dumps(idx))
    refused(path, "model.norm.weight", "missing")


def test_refuses_a_shard_path_outside_the_directory(fixtures, tmp_path):
    path = broken(fixtures, tmp_path, "llama-linear-bf16")
    idx = json.loads((path / "model.safetensors.index.json").read_text())
    idx["weight_map"]["model.norm.weight"] = "../elsewhere.safetensors"
    (path / "model.safetensors.index.json").write_text(json.dumps(idx))
    refused(path, "model.safetensors.index.json", "not a file name")


def test_refuses_no_weights(fixtures, tmp_path):
    path = broken(fixtures, tmp_path)
    (path / "model.safetensors").unlink()
    refused(path, "neither model.safetensors nor model.safetensors.index.json")


@pytest.mark.parametrize("change,needles", [
    ({"num_attention_heads": 6, "num_key_value_heads": 3},
     ["config.json", "num_attention_heads (6) does not divide hidden_size (64)"]),
    ({"num_key_value_heads": 3}, ["num_key_value_heads (3)"]),
    ({"architectures": ["BertForMaskedLM"]}, ["architectures[0] 'BertForMaskedLM' is not "
                                              "supported"]),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, ["rope_scaling.rope_type 'yarn'"]),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, ["rope_scaling.low_freq_factor "
                                                                "is missing"]),
    ({"hidden_size": None}, ["hidden_size is missing"]),
    ({"vocab_size": -4}, ["vocab_size is -4"]),
    ({"hidden_act": "gelu"}, ["hidden_act 'gelu' is not supported"]),
    ({"torch_dtype": "float64"}, ["torch_dtype 'float64' is not supported"]),
    ({"vocab_size": 300}, ["tokenizer.json", "more than config.json's vocabulary of 300"]),
])
def test_refuses_bad_config(fixtures, tmp_path, change, needles):
    path = broken(fixtures, tmp_path)
    cfg = json.loads((path / "config.json").read_text())
    cfg.update(change)
    (path / "config.json").write_text(json.dumps(cfg))
    refused(path, *needles)


def test_refuses_bad_json_and_missing_config(fixtures, tmp_path):
    path = broken(fixtures, tmp_path)
    (path / "config.json").write_text("{\"architectures\": [")
    refused(path, "config.json", "line 1")
    (path / "config.json").unlink()
    refused(path, "config.json")


@pytest.mark.parametrize("content,needles", [
    (None, ["tokenizer.json"]),
    ("not json", ["tokenizer.json"]),
    ('{"model": {"type": "WordPiece"}}', ["tokenizer.json", "WordPiece"]),
])
def test_refuses_an_unreadable_tokenizer(fixtures, tmp_path, content, needles):
    path = broken(fixtures, tmp_path)
    if content is None:
        (path / "tokenizer.json").unlink()
    else:
        (path / "tokenizer.json").write_text(content)
    refused(path, *needles)


@pytest.mark.parametrize("file,change,needles", [
    ("tokenizer_config.json", {"bos_token": "<nope>"},
     ["tokenizer_config.json", "bos_token '<nope>' is not a token"]),
    ("tokenizer_config.json", {"chat_template": 7}, ["chat_template must be"]),
    ("tokenizer_config.json", {"add_bos_token": "yes"}, ["add_bos_token"]),
    ("generation_config.json", {"top_p": 1.5}, ["generation_config.json", "top_p is 1.5"]),
    ("generation_config.json", {"eos_token_id": [2, 9999]}, ["eos_token_id"]),
    ("generation_config.json", {"temperature": "hot"}, ["temperature must be a number"]),
])
def test_refuses_bad_side_files(fixtures, tmp_path, file, change, needles):
    path = broken(fixtures, tmp_path)
    doc = json.loads((path / file).read_text())
    doc.update(change)
    (path / file).write_text(json.dumps(doc))
    refused(path, *needles)


def test_step_errors_are_reported(fixtures, tmp_path):
    """An id past the vocabulary fails the step with the graph's message, not a crash."""
    r = rtxgen(fixtures["llama-f32"], "logits", "--ids", "1,2,99999", "--out",
               tmp_path / "x.npy", check=False)
    assert r.returncode == 1 and b"99999" in r.stderr, r.stderr.decode()
    r = rtxgen(fixtures["llama-f32"], "logits", "--ids", "1,x", "--out", tmp_path / "x.npy",
               check=False)
    assert r.returncode == 2


# ------------------------------------------------------------------------------------------
# The reference against transformers
# ------------------------------------------------------------------------------------------

def test_np_decoder_matches_transformers(fixtures):
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        skips.skip("transformers", f"cannot import torch and transformers ({e})")
    for name, path in fixtures.items():
        err = np_decoder.against_transformers(path)
        assert err < np_decoder.TOLERANCE, f"{name}: relative error {err:.3g}"
