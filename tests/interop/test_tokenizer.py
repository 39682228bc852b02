"""
tokenizer.json through rtxtok (formats/tokenizer*.c) against Hugging Face `tokenizers`: tiny
tokenizers are trained here with `tokenizers` itself and saved as tokenizer.json, and rtxtok's
ids and text must equal `tokenizers`' on a few hundred varied strings and on random ones:
- byte-level BPE: GPT-2 style (ByteLevel pre-tokenizer), Llama 3 / Qwen2 style (Split(their
  pattern, Isolated) then ByteLevel without its regex), special and added tokens, the BOS the
  post-processor adds;
- SentencePiece-style BPE with byte fallback (Llama 2, Mistral, TinyLlama): the normalizer
  Prepend("▁") + Replace(" " -> "▁") or a Metaspace pre-tokenizer, "<0xNN>" byte tokens for
  the characters the trainer left out (its alphabet is limited so that this happens), the
  decoder Replace + ByteFallback + Fuse + Strip or Metaspace, added tokens with lstrip, rstrip,
  single_word and normalized.
"""

import json
import os
import random
import subprocess

import pytest
from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)

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


def train(tmp_path, name, pre, ignore_merges, merges_as_strings=False, nfc=False, bos=False):
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
    if bos:  # Llama 3's post-processor: ByteLevel, then a template that puts the BOS first
        bos_id = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                          special_tokens=[("<|begin_of_text|>", bos_id)])])
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
    tok, path = train(tmp_path, style, pre, ignore, strs, nfc, bos=style == "llama3")
    ts = texts()
    want = [tok.encode(t, add_special_tokens=False).ids for t in ts]
    got = rtxtok(path, "encode", ts)
    for t, w, g in zip(ts, want, got):
        assert g == w, f"encode {t!r}"
    assert sum(len(w) for w in want) > 1000
    with_bos = [tok.encode(t).ids for t in ts[:50]]
    assert rtxtok(path, "encode", ts[:50], "--add-special") == with_bos
    assert style != "llama3" or with_bos[0][0] == tok.token_to_id("<|begin_of_text|>")

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
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}]}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    r = subprocess.run([str(rtxtok_path()), str(bad), "encode"], input=b'"x"\n',
                       capture_output=True, timeout=60)
    assert r.returncode == 2
    assert ("pre_tokenizer.pretokenizers[0].type 'Digits' is not supported"
            in r.stderr.decode())


# ------------------------------------------------------------------------------------------
# SentencePiece-style BPE with byte fallback (Llama 2, Mistral, TinyLlama)
# ------------------------------------------------------------------------------------------

SP = "\u2581"  # "▁", SentencePiece's space
SP_ADDED = [  # added tokens with each of the flags the crate implements
    AddedToken("<tool>", special=False, lstrip=True, rstrip=True, normalized=False),
    AddedToken("[MASK]", special=True, single_word=True, lstrip=True, normalized=False),
    AddedToken("word", special=False, single_word=True, normalized=False),
    AddedToken("fox jumps", special=False, normalized=True),
    AddedToken("brown", special=False, rstrip=True, normalized=True),
    AddedToken("<|im_start|>", special=True, normalized=False),
    AddedToken("<|im_end|>", special=True, normalized=False, rstrip=True),
]
SP_LEGACY_DECODER = decoders.Sequence([decoders.Replace(SP, " "), decoders.ByteFallback(),
                                       decoders.Fuse(), decoders.Strip(" ", 1, 0)])


def sp_config(tok, variant):
    """The normalizer, pre-tokenizer and decoder of one SentencePiece-style layout."""
    if variant == "llama2":  # Llama 2, Mistral 7B v0.1, TinyLlama: the "legacy" layout
        tok.normalizer = normalizers.Sequence([normalizers.Prepend(SP),
                                               normalizers.Replace(" ", SP)])
        tok.pre_tokenizer = None
        tok.decoder = SP_LEGACY_DECODER
    elif variant == "replace_only":  # a Replace normalizer alone: no prefix space
        tok.normalizer = normalizers.Replace(" ", SP)
        tok.pre_tokenizer = None
        tok.decoder = SP_LEGACY_DECODER
    elif variant == "metaspace_first":  # newer conversions (legacy=False)
        tok.normalizer = None
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SP, prepend_scheme="first",
                                                     split=False)
        tok.decoder = SP_LEGACY_DECODER
    elif variant in ("metaspace_always", "metaspace_never"):  # Metaspace decoding too
        scheme = variant.split("_")[1]
        tok.normalizer = None
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SP, prepend_scheme=scheme,
                                                     split=True)
        tok.decoder = decoders.Sequence([decoders.ByteFallback(),
                                         decoders.Metaspace(replacement=SP,
                                                            prepend_scheme=scheme)])
    else:
        raise AssertionError(variant)


def train_sp(tmp_path, variant, fuse_unk=True, all_bytes=True):
    """A Llama-2-like tokenizer: <unk> <s> </s> first, BPE trained over Metaspace words with a
    limited alphabet (the rarer characters of the corpus stay out), "<0xNN>" byte tokens added
    to the vocabulary (all 256, or all but a few so that <unk> happens too), BOS added by the
    post-processor."""
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=fuse_unk))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SP, prepend_scheme="always")
    trainer = trainers.BpeTrainer(vocab_size=900, special_tokens=["<unk>", "<s>", "</s>"],
                                  limit_alphabet=70, show_progress=False)
    tok.train_from_iterator(CORPUS + [t for t in texts() if t.isascii()], trainer)
    sp_config(tok, variant)
    path = tmp_path / f"sp_{variant}.json"
    tok.save(str(path))
    doc = json.loads(path.read_text())
    vocab = doc["model"]["vocab"]
    next_id = max(vocab.values()) + 1
    for b in range(256):  # the byte tokens go into the vocabulary before the added tokens
        if not all_bytes and b in (0xF0, 0x80, 0x9F):
            continue
        vocab[f"<0x{b:02X}>"] = next_id
        next_id += 1
    path.write_text(json.dumps(doc, ensure_ascii=False))
    tok = Tokenizer.from_file(str(path))
    tok.add_tokens(SP_ADDED)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", 1)])
    tok.save(str(path))
    return tok, path


def sp_texts():
    """texts() plus what SentencePiece layouts and the added tokens' flags make interesting."""
    extra = [
        " leading", "  two leading", "\tx", "\n\nnewlines first", "trailing ", "a  b   c",
        "x\u0301\u0327y", "\u0915\u094d\u0937", "a <tool> b", "a<tool>b", "a \t<tool>\n b",
        "<tool><tool>", " <tool>", "[MASK]", "a [MASK] b", "a[MASK]b", "x [MASK]", "\u3000[MASK]",
        "word", "a word.", "words", "sword", "word_x", "wordé", "(word)", "the fox jumps",
        "fox jumps", "a fox  jumps", "brown  fox", "brown", "<|im_start|>user\nhi<|im_end|>\n",
        "<|im_end|>  x", "\u2581already", "x\u2581y", "\U0001F600\U0001F600 \u4e2d\u6587",
        "\u0000nul", "\ufeffbom",
    ]
    return texts() + extra


SP_VARIANTS = ["llama2", "replace_only", "metaspace_first", "metaspace_always",
               "metaspace_never"]


@pytest.mark.parametrize("variant", SP_VARIANTS)
def test_sentencepiece_encode_decode_match_hf(tmp_path, variant):
    tok, path = train_sp(tmp_path, variant)
    ts = sp_texts()
    want = [tok.encode(t, add_special_tokens=False).ids for t in ts]
    got = rtxtok(path, "encode", ts)
    for t, w, g in zip(ts, want, got):
        assert g == w, f"encode {t!r}: {tok.encode(t, add_special_tokens=False).tokens}"
    byte_ids = {tok.token_to_id(f"<0x{b:02X}>") for b in range(256)}
    assert sum(i in byte_ids for w in want for i in w) > 200, "byte fallback did not happen"
    with_bos = [tok.encode(t).ids for t in ts]
    assert rtxtok(path, "encode", ts, "--add-special") == with_bos
    assert all(w[0] == 1 for w in with_bos)
    tok.encode_special_tokens = True
    assert (rtxtok(path, "encode", ts, "--no-special") ==
            [tok.encode(t, add_special_tokens=False).ids for t in ts])
    tok.encode_special_tokens = False

    check_decode_and_stream(tok, path, want + with_bos, variant, whole_chars=True)


def check_decode_and_stream(tok, path, seqs, what, whole_chars=False):
    """decode equals the crate's, with and without special tokens, and the stream's pieces
    concatenate to it (whole_chars: none of them holds a U+FFFD, i.e. split a character)."""
    for skip in (False, True):
        flags = ["--skip-special"] if skip else []
        got = rtxtok(path, "decode", seqs, *flags)
        streamed = rtxtok(path, "stream", seqs, *flags)
        for seq, g, pieces in zip(seqs, got, streamed):
            ref = tok.decode(seq, skip_special_tokens=skip)
            assert g == ref, f"{what} decode {seq}"
            assert "".join(pieces) == ref, f"{what} stream {seq}: {pieces}"
            assert not whole_chars or all("\ufffd" not in p for p in pieces), \
                f"{what} stream {seq}: a piece split a character: {pieces}"


def test_sentencepiece_unknown_and_fuse_unk_match_hf(tmp_path):
    """Some byte tokens missing: a character that cannot fall back becomes <unk> (fused with
    its neighbours or not), ordered among the byte tokens as the crate orders them."""
    for fuse in (True, False):
        tok, path = train_sp(tmp_path, "llama2", fuse_unk=fuse, all_bytes=False)
        ts = sp_texts() + ["\U0001F600\U0001F601x\u4e2d\U0001F602\u4e2d", "\u0080\u07ff"]
        want = [tok.encode(t, add_special_tokens=False).ids for t in ts]
        assert any(0 in w for w in want)
        assert rtxtok(path, "encode", ts) == want
        got = rtxtok(path, "decode", want)
        assert got == [tok.decode(w, skip_special_tokens=False) for w in want]


def test_sentencepiece_random_text_matches_hf(tmp_path):
    """Random strings from a pool of characters and pieces the corpus and added tokens make
    interesting."""
    rnd = random.Random(2024)
    pool = (list("abcdefghijklmnopqrstuvwxyz ABCXYZ0123456789.,;!?'\"-_()[]{}<>|/\\") +
            [" ", "  ", "\n", "\t", "\r\n", "\u00a0", "\u3000", "é", "e\u0301", "ñ", "ß", "Ω",
             "中", "文", "日本", "한", "😀", "👍🏽", "👨‍👩‍👧", "🇫🇷", "\u0301", "\u200d", SP,
             "<tool>", "[MASK]", "word", "fox jumps", "brown", "<|im_start|>", "<|im_end|>",
             "<s>", "</s>", "<0x41>", "the", " the", "quick"])
    ts = ["".join(rnd.choice(pool) for _ in range(rnd.randint(0, 25))) for _ in range(600)]
    for variant in ("llama2", "metaspace_first", "metaspace_always"):
        tok, path = train_sp(tmp_path, variant)
        want = [tok.encode(t, add_special_tokens=False).ids for t in ts]
        assert rtxtok(path, "encode", ts) == want, variant
        dec = rtxtok(path, "decode", want)
        assert dec == [tok.decode(w, skip_special_tokens=False) for w in want], variant


def test_sentencepiece_random_ids_decode_like_hf(tmp_path):
    """Random ids, byte tokens among them in runs that are often not valid UTF-8 (one U+FFFD
    per byte of such a run): decode equals the crate's, the stream's pieces concatenate to it
    and never end inside a character."""
    rnd = random.Random(11)
    for variant in ("llama2", "metaspace_always", "metaspace_never"):
        tok, path = train_sp(tmp_path, variant)
        n = tok.get_vocab_size(with_added_tokens=True)
        byte_ids = [tok.token_to_id(f"<0x{b:02X}>") for b in range(256)]
        utf8_runs = [[byte_ids[b] for b in c.encode()] for c in "é中😀👍🏽"]
        seqs = []
        for _ in range(400):
            seq = []
            for _ in range(rnd.randint(0, 14)):
                r = rnd.random()
                seq += ([rnd.randrange(n)] if r < 0.4 else [rnd.choice(byte_ids)] if r < 0.7
                        else rnd.choice(utf8_runs))
            seqs.append(seq)
        check_decode_and_stream(tok, path, seqs, variant)


def test_sentencepiece_stream_holds_byte_runs(tmp_path):
    """"中" falls back to three byte tokens: nothing comes out until the run ends; the leading
    space of the first token is dropped, a later one kept."""
    tok, path = train_sp(tmp_path, "llama2")
    ids = tok.encode("\u4e2d x \u4e2d").ids[1:]  # without the BOS
    toks = [tok.id_to_token(i) for i in ids]
    assert toks[:4] == [SP, "<0xE4>", "<0xB8>", "<0xAD>"], toks
    pieces = rtxtok(path, "stream", [ids])[0]
    assert pieces[:4] == ["", "", "", ""]
    assert pieces[4] == tok.decode(ids[:5])  # the run ends when the next token comes
    assert pieces[4].startswith("\u4e2d ")
    assert "".join(pieces) == tok.decode(ids) == "\u4e2d x \u4e2d"


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
