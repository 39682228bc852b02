"""
tokenizer.json through rtxtok (formats/tokenizer.c) against Hugging Face `tokenizers`: tiny
byte-level BPE tokenizers are trained here with `tokenizers` itself (GPT-2 style: ByteLevel
pre-tokenizer; Llama 3 / Qwen2 style: Split(their pattern, Isolated) then ByteLevel without
its regex; special and added tokens), saved as tokenizer.json, and rtxtok's ids and text must
equal `tokenizers`' on a few hundred varied strings.
"""

import json
import os
import random
import subprocess

import pytest
from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, trainers)

import rtxgraph

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>"]

CORPUS = [
    "The quick brown fox jumps over the lazy dog. It's 2024; we've got 1234567890 reasons.",
    "Ça va? Élégant café, naïve façade, jalapeño, Straße, Ünïcödé.",
    "東京は日本の首都です。我爱自然语言处理。한국어 텍스트도 있습니다.",
    "Emoji: 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷 ❤️ 😀😃😄",
    "def f(x):\n\treturn x ** 2  # square\n\n\n    indented   spaces",
    "I'm sure you'll see they'd said we're here, isn't it? DON'T SHOUT, I'LL GO.",
    "Numbers: 3.14159, 1,000,000, 0x1F, 2e10, 123456789012345678901234567890.",
    "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\nhi there<|im_end|>",
] * 30


def rtxtok_path():
    return rtxgraph.build_dir() / "bin" / "rtxtok"


@pytest.fixture(autouse=True)
def _need_rtxtok():
    p = rtxtok_path()
    if not (p.is_file() and os.access(p, os.X_OK)):
        pytest.fail(f"{p} is missing: build it first (make all)", pytrace=False)


def rtxtok(path, mode, lines, *flags, check=True):
    """Runs rtxtok on JSON lines; returns the decoded JSON results, one per line."""
    inp = "".join(json.dumps(x) + "\n" for x in lines)
    r = subprocess.run([str(rtxtok_path()), str(path), mode, *flags], input=inp.encode(),
                       capture_output=True, timeout=120)
    if check:
        assert r.returncode == 0, r.stderr.decode()
    out = r.stdout.decode().splitlines()
    assert len(out) == len(lines), r.stderr.decode()
    return [json.loads(x) for x in out]


def train(tmp_path, name, pre, ignore_merges, merges_as_strings=False, nfc=False):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    tok.add_tokens([AddedToken("[TOOL]", special=False, normalized=False),
                    AddedToken("fox jumps", special=False, normalized=True)])
    path = tmp_path / f"{name}.json"
    tok.save(str(path))
    if merges_as_strings:  # the older form of merges: "a b" strings
        doc = json.loads(path.read_text())
        doc["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m
                                  for m in doc["model"]["merges"]]
        path.write_text(json.dumps(doc, ensure_ascii=False))
        tok = Tokenizer.from_file(str(path))
    return tok, path


def texts():
    rnd = random.Random(13)
    pieces = [
        "", " ", "  ", "\n", "\n\n", "\t", " \t \n ", "a", "A", "é", "e\u0301", "ß", "中文",
        "日本語のテキスト", "👨‍👩‍👧‍👦", "👍🏽", "🏳️‍🌈", "🇯🇵🇰🇷", "1", "12", "123", "1234",
        "12345678901234567890", "3.14", "don't", "I'M", "we've", "they'll", "you'd", "it's",
        "hello", " world", "    four spaces", "trailing   ", "\r\n", "x\r\ny", "!!!", "...",
        "—", "«quoted»", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|im_start", "[TOOL]",
        "fox jumps", "<|endoftext|><|endoftext|>", "\u00a0nbsp", "\u3000ideographic", "\u200b",
        "Ωμέγα", "Привет мир", "مرحبا", "שלום", "नमस्ते", "ไทย", "\U0001F600" * 5, "a" * 50,
        " " * 17, "\n" * 9, "\t\t\tx", "tab\tsep\tvalues",
        "A\u030angstro\u0308m", "\u1100\u1161\u11a8", "\ufb01ne", "\u212b", "o\u0302\u0323",
        "fox ju\u0301mps", "e\u0301<|endoftext|>\u0301",
    ]
    out = list(pieces)
    out += CORPUS[:8]
    for _ in range(300):
        k = rnd.randint(1, 6)
        out.append("".join(rnd.choice(pieces + [" ", "  ", "\n"]) for _ in range(k)))
    return out


PRE_GPT2 = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)


def pre_split(pattern):
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


@pytest.mark.parametrize("style", ["gpt2", "gpt2_prefix", "llama3", "qwen2", "gpt2_str_merges",
                                   "qwen2_nfc"])
def test_encode_decode_match_hf(tmp_path, style):
    pre, ignore, strs, nfc = {
        "gpt2": (PRE_GPT2, False, False, False),
        "gpt2_prefix": (pre_tokenizers.ByteLevel(add_prefix_space=True), False, False, False),
        "gpt2_str_merges": (PRE_GPT2, False, True, False),
        "llama3": (pre_split(LLAMA3_PATTERN), True, False, False),
        "qwen2": (pre_split(QWEN2_PATTERN), False, False, False),
        "qwen2_nfc": (pre_split(QWEN2_PATTERN), False, False, True),  # Qwen2's own files
    }[style]
    tok, path = train(tmp_path, style, pre, ignore, strs, nfc)
    ts = texts()
    want = [tok.encode(t, add_special_tokens=False).ids for t in ts]
    got = rtxtok(path, "encode", ts)
    for t, w, g in zip(ts, want, got):
        assert g == w, f"encode {t!r}"
    assert sum(len(w) for w in want) > 1000

    got_text = rtxtok(path, "decode", want)
    got_skip = rtxtok(path, "decode", want, "--skip-special")
    for w, g, gs in zip(want, got_text, got_skip):
        assert g == tok.decode(w, skip_special_tokens=False), f"decode {w}"
        assert gs == tok.decode(w, skip_special_tokens=True), f"decode skipping specials {w}"

    streamed = rtxtok(path, "stream", want)
    for w, pieces in zip(want, streamed):
        assert len(pieces) == len(w) + 1
        assert "".join(pieces) == tok.decode(w, skip_special_tokens=False)
        assert all("\ufffd" not in p for p in pieces), "a stream piece split a character"


@pytest.mark.parametrize("style", ["gpt2", "llama3"])
def test_long_inputs_match_hf(tmp_path, style):
    """Long pre-tokens (a run of 100,000 spaces, one long word) merge in O(n log n)."""
    pre = PRE_GPT2 if style == "gpt2" else pre_split(LLAMA3_PATTERN)
    tok, path = train(tmp_path, style, pre, style == "llama3")
    ts = [" " * 100000, "ab" * 20000, "the quick brown fox 12345. " * 3000,
          "\n" * 5000 + "x", "é" * 30000]
    want = [tok.encode(t, add_special_tokens=False).ids for t in ts]
    assert rtxtok(path, "encode", ts) == want


def test_special_tokens_as_text(tmp_path):
    tok, path = train(tmp_path, "llama3", pre_split(LLAMA3_PATTERN), True)
    ts = [t for t in texts() if "<|" in t]
    assert ts
    tok.encode_special_tokens = True
    want = [tok.encode(t, add_special_tokens=False).ids for t in ts]
    assert rtxtok(path, "encode", ts, "--no-special") == want


def test_random_ids_decode_like_hf(tmp_path):
    tok, path = train(tmp_path, "gpt2", PRE_GPT2, False)
    rnd = random.Random(7)
    n = tok.get_vocab_size()
    seqs = [[rnd.randrange(n) for _ in range(rnd.randint(0, 12))] for _ in range(300)]
    got = rtxtok(path, "decode", seqs)
    for s, g in zip(seqs, got):
        assert g == tok.decode(s, skip_special_tokens=False), f"decode {s}"
    streamed = rtxtok(path, "stream", seqs)
    for s, pieces in zip(seqs, streamed):
        assert "".join(pieces) == tok.decode(s, skip_special_tokens=False)


def test_bad_input_is_an_error_not_a_crash(tmp_path):
    tok, path = train(tmp_path, "gpt2", PRE_GPT2, False)
    r = subprocess.run([str(rtxtok_path()), str(path), "decode"],
                       input=b"[1, 2, 99999999]\n[1]\nnot json\n", capture_output=True, timeout=60)
    assert r.returncode == 1
    assert r.stdout.decode().splitlines()[0] == "null"
    assert "unknown token id 99999999" in r.stderr.decode()
    assert json.loads(r.stdout.decode().splitlines()[1]) == tok.decode([1], skip_special_tokens=False)


def test_unsupported_file_is_refused_by_name(tmp_path):
    tok, path = train(tmp_path, "gpt2", PRE_GPT2, False)
    doc = json.loads(path.read_text())
    doc["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
        {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}]}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    r = subprocess.run([str(rtxtok_path()), str(bad), "encode"], input=b'"x"\n',
                       capture_output=True, timeout=60)
    assert r.returncode == 2
    assert ("pre_tokenizer.pretokenizers[1].type 'Metaspace' is not supported"
            in r.stderr.decode())


def _mutate(node, rnd):
    """One random structural change somewhere in a JSON document (in place)."""
    junk = [None, True, 0, -1, 2**40, 1.5, "", "x", "Ġ", [], {}, ["a"], {"type": "BPE"}]
    path = []
    while isinstance(node, (dict, list)) and node and rnd.random() < 0.8:
        keys = list(node.keys()) if isinstance(node, dict) else list(range(len(node)))
        k = rnd.choice(keys)
        if not isinstance(node[k], (dict, list)) or rnd.random() < 0.3:
            path.append((node, k))
            break
        path.append((node, k))
        node = node[k]
    if not path:
        return
    parent, k = path[-1]
    if isinstance(parent, dict) and rnd.random() < 0.3:
        del parent[k]
    else:
        parent[k] = rnd.choice(junk)


def test_mutated_files_never_crash(tmp_path):
    """Random structural mutations of a valid file: rtxtok loads or refuses, never crashes."""
    _, path = train(tmp_path, "llama3", pre_split(LLAMA3_PATTERN), True)
    base = json.loads(path.read_text())
    for key in ("vocab", "merges"):  # keep the document small so that mutations hit structure
        base["model"][key] = (dict(list(base["model"][key].items())[:300]) if key == "vocab"
                              else [])
    rnd = random.Random(5)
    bad = tmp_path / "mutated.json"
    outcomes = set()
    for i in range(150):
        doc = json.loads(json.dumps(base))
        for _ in range(rnd.randint(1, 3)):
            _mutate(doc, rnd)
        bad.write_text(json.dumps(doc))
        r = subprocess.run([str(rtxtok_path()), str(bad), "encode"],
                           input=b'"Hello <|im_start|> w\\u00f6rld 123"\n"\\u0000"\n',
                           capture_output=True, timeout=60)
        assert r.returncode in (0, 1, 2), f"mutation {i}: {r.returncode} {r.stderr.decode()}"
        if r.returncode == 2:
            assert r.stderr.decode().startswith("rtxtok: mutated.json: "), r.stderr.decode()
        outcomes.add(r.returncode)
    assert outcomes >= {0, 2}
