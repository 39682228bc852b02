"""
Checkpoints made by the tests (tests/interop/genfixtures.py: tiny GPT-2, Llama and Qwen2 with
random weights and a byte-level BPE tokenizer trained with `tokenizers`) served end to end by
rtxd: greedy completions over the OpenAI API, one at a time and many at once (continuous
batching), equal greedy decoding with the NumPy reference decoder (tests/interop/
np_decoder.py, which the interop tests hold against transformers), and the prompt's token
count equals `tokenizers`'.
"""

import concurrent.futures as cf
import json
import shutil
import sys

import numpy as np
import pytest
from tokenizers import Tokenizer

import http_util as hu
import serving_harness as sh

sys.path.insert(0, str(sh.REPO / "tests" / "interop"))
import genfixtures  # noqa: E402
from np_decoder import Decoder  # noqa: E402

FIXTURES = ["gpt2-f32", "llama-f32", "qwen2-f32", "llama-bf16"]
PROMPTS = ["The quick brown fox", "Once upon a time there was a tiny model",
           "Ça va? Élégant café 東京 👍🏽", "def f(x):\n\treturn x"]
N_NEW = 8
TIE = 1e-3  # a reference step whose two best logits are closer than this ends the comparison


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A daemon serving every fixture as a generative model (name = fixture name)."""
    tmp = tmp_path_factory.mktemp("ckpt")
    made = tmp / "fixtures"
    for name in FIXTURES:
        genfixtures.make(made / name, name)
    repo = tmp / "models"
    for name in FIXTURES:
        shutil.copytree(made / name, repo / name / "1")
        (repo / name / "config.json").write_text(json.dumps({
            "name": name, "platform": "rtx_generate",
            "generation": {"kv_cache_bytes": 4 << 20, "max_batch_tokens": 64}}))
    d = sh.ServingDaemon(tmp / "rtxd", repository=repo)
    d.start()
    hu.wait_http(d)
    yield d, made
    d.stop()


def reference(path, ids):
    """Greedy continuation of ids by the NumPy decoder: (tokens, how many are comparable)."""
    dec = Decoder(path)
    ids = list(ids)
    out, safe = [], N_NEW
    for k in range(N_NEW):
        logits = dec.forward(ids)[-1]
        top = np.sort(logits)[-2:]
        if top[1] - top[0] < TIE and safe == N_NEW:
            safe = k
        nxt = int(np.argmax(logits))
        out.append(nxt)
        ids.append(nxt)
    return out, safe


def complete(d, model, prompt):
    """A greedy completion; repetition_penalty 1 overrides the fixtures' generation_config.json
    (which sets one, and which rtxd applies as the request's default, as vLLM does)."""
    r = hu.post(d, "/v1/completions", body={
        "model": model, "prompt": prompt, "max_tokens": N_NEW, "temperature": 0,
        "ignore_eos": True, "repetition_penalty": 1.0}, headers={"Content-Type": "application/json"})
    assert r.status == 200, r.body
    return r.json()


@pytest.mark.parametrize("name", FIXTURES)
def test_greedy_completions_match_the_reference(served, name):
    d, made = served
    tok = Tokenizer.from_file(str(made / name / "tokenizer.json"))
    jobs = []
    for prompt in PROMPTS:
        ids = tok.encode(prompt, add_special_tokens=False).ids
        want, safe = reference(made / name, ids)
        jobs.append((prompt, ids, want, safe))
    # one at a time, then all at once (and twice each: prefix-cache hits)
    alone = [complete(d, name, ids) for _, ids, _, _ in jobs]
    with cf.ThreadPoolExecutor(8) as ex:
        together = list(ex.map(lambda j: complete(d, name, j[1]), jobs + jobs))
    for i, (prompt, ids, want, safe) in enumerate(jobs):
        for got in (alone[i], together[i], together[i + len(jobs)]):
            assert got["usage"]["prompt_tokens"] == len(ids)
            assert got["usage"]["completion_tokens"] == N_NEW
            text = got["choices"][0]["text"]
            expect = tok.decode(want[:safe], skip_special_tokens=True).rstrip("\ufffd")
            assert text.startswith(expect), (name, prompt, text, expect, safe)
        # a text prompt: the model's own encoding, BOS first when tokenizer_config.json's
        # add_bos_token says so (as transformers' encode does)
        tc = json.loads((made / name / "tokenizer_config.json").read_text())
        bos = [tok.token_to_id(tc["bos_token"] if isinstance(tc["bos_token"], str) else
                               tc["bos_token"]["content"])] if tc.get("add_bos_token") else []
        by_text = complete(d, name, prompt)
        assert by_text["usage"]["prompt_tokens"] == len(bos) + len(ids)
        assert by_text["choices"][0]["text"] == complete(d, name, bos + ids)["choices"][0]["text"]
