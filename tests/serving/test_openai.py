"""
OpenAI's API on rtxd's HTTP server, driven by the official `openai` Python client and by raw
HTTP: /v1/models, /v1/completions and /v1/chat/completions, streaming and not, against the
example repository's generative model (tiny-chat). Prompt token counts are checked against
Hugging Face's `tokenizers` on the model's tokenizer.json (and the chat prompt against the
template rendered by jinja2, as transformers renders it); greedy streams against whole
answers; seeds for reproducibility; the SSE framing over HTTP/1.1 (chunked) and HTTP/2;
every class of bad request with its status and OpenAI error body; overload (429 +
Retry-After) on a lane with a tiny queue; and a client that closes its stream mid-generation
(the engine's KV blocks come back, the request counts as canceled).
"""

import concurrent.futures as cf
import json
import socket
import time

import openai
import pytest

import gen_util as gu
import http_util as hu
import serving_harness as sh

M = gu.MODEL
PROMPT = "Once upon a time there was"


@pytest.fixture(scope="module")
def d(server):
    hu.wait_http(server)
    return server


@pytest.fixture(scope="module")
def client(d):
    return openai.OpenAI(base_url=f"{d.http_url}/v1", api_key="unused", max_retries=0,
                         timeout=60 * sh.SLOW)


def greedy(client, prompt, n_tokens, **kw):
    r = client.completions.create(model=M, prompt=prompt, max_tokens=n_tokens, temperature=0,
                                  **kw)
    return r.choices[0].text


# ------------------------------------------------------------------------------------------
# Models
# ------------------------------------------------------------------------------------------

def test_models(client, d):
    ids = [m.id for m in client.models.list().data]
    assert M in ids and "simple" not in ids and "mlp" not in ids, ids
    m = client.models.retrieve(M)
    assert m.id == M and m.object == "model" and m.owned_by == "rtxd" and m.created > 0
    raw = hu.get(d, "/v1/models").json()
    assert raw["object"] == "list"
    assert {"id", "object", "created", "owned_by"} == set(raw["data"][0])
    with pytest.raises(openai.NotFoundError) as e:
        client.models.retrieve("no-such-model")
    assert e.value.body["code"] == "model_not_found"
    with pytest.raises(openai.NotFoundError) as e:
        client.models.retrieve("simple")  # a graph model
    assert "not a generative model" in e.value.body["message"]


# ------------------------------------------------------------------------------------------
# Completions
# ------------------------------------------------------------------------------------------

def test_completion_whole_and_usage(client, d):
    tok = gu.hf_tokenizer(d)
    r = client.completions.create(model=M, prompt=PROMPT, max_tokens=12, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert r.object == "text_completion" and r.id.startswith("cmpl-") and r.model == M
    assert len(r.choices) == 1
    c = r.choices[0]
    assert c.index == 0 and c.finish_reason == "length" and c.logprobs is None
    assert r.usage.prompt_tokens == len(tok.encode(PROMPT, add_special_tokens=False).ids)
    assert r.usage.completion_tokens == 12
    assert r.usage.total_tokens == r.usage.prompt_tokens + 12
    assert c.text
    # OpenAI's default max_tokens is 16
    r = client.completions.create(model=M, prompt=PROMPT, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 16 and r.choices[0].finish_reason == "length"


def test_completion_stream_equals_whole(client):
    whole = greedy(client, PROMPT, 20)
    chunks = list(client.completions.create(model=M, prompt=PROMPT, max_tokens=20,
                                            temperature=0, stream=True))
    assert chunks, "no chunks"
    assert all(c.object == "text_completion" and c.id == chunks[0].id for c in chunks)
    assert "".join(c.choices[0].text for c in chunks) == whole
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    assert all(c.choices[0].finish_reason is None for c in chunks[:-1])


def test_completion_include_usage(client):
    chunks = list(client.completions.create(model=M, prompt=PROMPT, max_tokens=5, temperature=0,
                                            stream=True, stream_options={"include_usage": True},
                                            extra_body={"ignore_eos": True}))
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert last.usage.completion_tokens == 5
    assert all(c.usage is None for c in chunks[:-1])


def test_completion_n_seed_and_prompts(client):
    kw = dict(model=M, max_tokens=10, temperature=1.0, seed=1234, n=2,
              extra_body={"ignore_eos": True})
    a = client.completions.create(prompt=PROMPT, **kw)
    b = client.completions.create(prompt=PROMPT, **kw)
    assert [c.index for c in a.choices] == [0, 1]
    assert [c.text for c in a.choices] == [c.text for c in b.choices]  # seeds reproduce
    assert a.usage.completion_tokens == 20
    # several prompts: index = prompt * n + i, each prompt's choices as when asked alone
    p2 = "The tiny model"
    g1, g2 = greedy(client, PROMPT, 6), greedy(client, p2, 6)
    r = client.completions.create(model=M, prompt=[PROMPT, p2], max_tokens=6, temperature=0,
                                  n=2)
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    assert [c.text for c in r.choices] == [g1, g1, g2, g2]
    streamed = {}
    for ch in client.completions.create(model=M, prompt=[PROMPT, p2], max_tokens=6,
                                        temperature=0, n=2, stream=True):
        for c in ch.choices:
            streamed[c.index] = streamed.get(c.index, "") + c.text
    assert streamed == {0: g1, 1: g1, 2: g2, 3: g2}


def test_completion_token_ids_and_echo(client, d):
    tok = gu.hf_tokenizer(d)
    ids = tok.encode(PROMPT, add_special_tokens=False).ids
    text = greedy(client, PROMPT, 8)
    assert greedy(client, ids, 8) == text
    r = client.completions.create(model=M, prompt=[ids, ids], max_tokens=8, temperature=0)
    assert [c.text for c in r.choices] == [text, text]
    assert greedy(client, PROMPT, 8, echo=True) == PROMPT + text
    assert greedy(client, ids, 8, echo=True) == tok.decode(ids, skip_special_tokens=False) + text
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=M, prompt=PROMPT, max_tokens=8, temperature=0, echo=True, stream=True))
    assert streamed == PROMPT + text


def test_completion_logprobs(client):
    r = client.completions.create(model=M, prompt=PROMPT, max_tokens=8, temperature=0,
                                  logprobs=3, extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 8
    offset = 0
    for t, l, top, off in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, lp.text_offset):
        assert off == offset
        offset += len(t)
        assert l <= 0 and len(top) <= 4
        if not any("\ufffd" in k for k in top):  # distinct strings: nothing merged
            assert len(top) >= 3 and top[t] == l
        # greedy: the sampled token is the most likely one
        assert l == pytest.approx(max(top.values()), abs=1e-5)
    if not any("\ufffd" in t for t in lp.tokens):  # no character split over tokens
        assert "".join(lp.tokens) == r.choices[0].text
    streamed = [c.choices[0].logprobs for c in client.completions.create(
        model=M, prompt=PROMPT, max_tokens=8, temperature=0, logprobs=3, stream=True,
        extra_body={"ignore_eos": True}) if c.choices[0].logprobs]
    assert sum((s.tokens for s in streamed), []) == lp.tokens
    assert sum((s.text_offset for s in streamed), []) == lp.text_offset


def test_completion_stop_and_length(client):
    full = greedy(client, PROMPT, 24, extra_body={"ignore_eos": True})
    stop = next((full[i:i + 3] for i in range(4, len(full) - 3)
                 if full[i:i + 3].strip() and full.find(full[i:i + 3]) == i), None)
    assert stop, f"no stop string candidate in {full!r}"
    r = client.completions.create(model=M, prompt=PROMPT, max_tokens=24, temperature=0,
                                  stop=[stop, "\u2603never"], extra_body={"ignore_eos": True})
    c = r.choices[0]
    assert c.text == full[:full.find(stop)] and c.finish_reason == "stop"
    streamed = list(client.completions.create(model=M, prompt=PROMPT, max_tokens=24,
                                              temperature=0, stop=stop, stream=True,
                                              extra_body={"ignore_eos": True}))
    assert "".join(s.choices[0].text for s in streamed) == c.text
    assert streamed[-1].choices[0].finish_reason == "stop"
    r = client.completions.create(model=M, prompt=PROMPT, max_tokens=3, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 3


# ------------------------------------------------------------------------------------------
# Chat
# ------------------------------------------------------------------------------------------

MESSAGES = [{"role": "system", "content": "You are tiny."},
            {"role": "user", "content": "Tell me a story."}]


def test_chat_whole_and_stream(client, d):
    tok = gu.hf_tokenizer(d)
    r = client.chat.completions.create(model=M, messages=MESSAGES, max_tokens=10,
                                       temperature=0)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    c = r.choices[0]
    assert c.message.role == "assistant" and c.finish_reason in ("stop", "length")
    prompt = gu.render_chat(d, MESSAGES)
    assert r.usage.prompt_tokens == len(tok.encode(prompt, add_special_tokens=False).ids)
    chunks = list(client.chat.completions.create(model=M, messages=MESSAGES, max_tokens=10,
                                                 temperature=0, stream=True,
                                                 stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(ch.object == "chat.completion.chunk" for ch in chunks)
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == \
        c.message.content
    assert chunks[-2].choices[0].finish_reason == c.finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == r.usage.total_tokens
    # content parts of type text are joined; max_completion_tokens bounds the answer
    r = client.chat.completions.create(
        model=M, max_completion_tokens=4, temperature=0, extra_body={"ignore_eos": True},
        messages=[{"role": "user", "content": [{"type": "text", "text": "Tell me"},
                                               {"type": "text", "text": "a story."}]}])
    assert r.usage.completion_tokens == 4 and r.choices[0].finish_reason == "length"
    joined = gu.render_chat(d, [{"role": "user", "content": "Tell me\na story."}])
    assert r.usage.prompt_tokens == len(tok.encode(joined, add_special_tokens=False).ids)


def test_chat_n_logprobs_seed(client):
    kw = dict(model=M, messages=MESSAGES, max_tokens=6, temperature=0.9, seed=7, n=2,
              logprobs=True, top_logprobs=2, extra_body={"ignore_eos": True})
    a = client.chat.completions.create(**kw)
    b = client.chat.completions.create(**kw)
    assert [c.message.content for c in a.choices] == [c.message.content for c in b.choices]
    for c in a.choices:
        content = c.logprobs.content
        assert len(content) == 6
        assert "".join(t.token for t in content) == c.message.content
        for t in content:
            assert t.bytes == list(t.token.encode()) and t.logprob <= 0
            assert len(t.top_logprobs) == 2
            assert t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob


# ------------------------------------------------------------------------------------------
# The wire: SSE framing, HTTP/1.1 chunked, HTTP/2
# ------------------------------------------------------------------------------------------

def test_sse_framing_http1(d):
    s = gu.post_sse(d, "/v1/completions", {"model": M, "prompt": PROMPT, "max_tokens": 5,
                                           "stream": True, "temperature": 0})
    assert s.status == 200, s.raw
    assert s.headers["content-type"].startswith("text/event-stream")
    assert s.headers.get("transfer-encoding") == "chunked"
    assert "content-length" not in s.headers
    assert s.done and len(s.data()) >= 1
    s = gu.post_sse(d, "/v1/chat/completions", {"model": M, "messages": MESSAGES,
                                                "max_tokens": 3, "stream": True})
    assert s.status == 200 and s.done
    assert s.data()[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}


def test_sse_over_curl_http1_and_http2(client, d):
    whole = greedy(client, PROMPT, 7)
    body = {"model": M, "prompt": PROMPT, "max_tokens": 7, "temperature": 0, "stream": True}
    for http2, version in ((False, "1.1"), (True, "2")):
        v, code, events = gu.curl_sse(d, "/v1/completions", body, http2=http2)
        assert (v, code) == (version, 200)
        assert events[-1] == "[DONE]"
        assert "".join(e["choices"][0]["text"] for e in events[:-1]) == whole


# ------------------------------------------------------------------------------------------
# Bad requests
# ------------------------------------------------------------------------------------------

def err_of(r, status):
    assert r.status == status, r
    j = r.json()
    assert set(j) == {"error"} and set(j["error"]) == {"message", "type", "param", "code"}, j
    return j["error"]


def test_bad_requests(d, client):
    post = lambda path, body: hu.post(d, path, body=body,
                                      headers={"Content-Type": "application/json"})
    e = err_of(post("/v1/completions", b'{"model": "tiny-chat", "prompt": "x",}'), 400)
    assert e["type"] == "invalid_request_error" and "malformed JSON" in e["message"]
    assert "line 1" in e["message"] and "column" in e["message"]
    e = err_of(post("/v1/completions", {"model": M, "prompt": "x", "temperature": "hot"}), 400)
    assert e["param"] == "temperature"
    e = err_of(post("/v1/completions", {"model": M, "prompt": "x", "top_p": 2}), 400)
    assert e["param"] == "top_p" and "top_p" in e["message"]
    e = err_of(post("/v1/chat/completions", {"model": M, "messages": "hi"}), 400)
    assert e["param"] == "messages"
    e = err_of(post("/v1/completions", {"model": M, "prompt": "x", "suffix": "y"}), 400)
    assert e["param"] == "suffix"
    e = err_of(post("/v1/chat/completions", {"model": M, "messages": MESSAGES,
                                             "tools": [{"type": "function", "function":
                                                        {"name": "f"}}]}), 400)
    assert e["param"] == "tools"
    e = err_of(post("/v1/completions", {"model": "no-such", "prompt": "x"}), 404)
    assert e["code"] == "model_not_found" and "no-such" in e["message"]
    e = err_of(post("/v1/completions", {"model": "simple", "prompt": "x"}), 404)
    assert "not a generative model" in e["message"]
    # past the context (512 tokens): the prompt alone, or with max_tokens
    tok = gu.hf_tokenizer(d)
    ids = tok.encode(PROMPT, add_special_tokens=False).ids
    e = err_of(post("/v1/completions", {"model": M, "prompt": (ids * 200)[:600]}), 400)
    assert "600 tokens" in e["message"] and "512" in e["message"]
    e = err_of(post("/v1/completions", {"model": M, "prompt": ids, "max_tokens": 510}), 400)
    assert e["param"] == "max_tokens" and "512" in e["message"]
    e = err_of(post("/v1/completions", {"model": M, "prompt": [999999]}), 400)
    assert "999999" in e["message"]
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=M, prompt="x", n=99)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=MESSAGES)
    assert hu.get(d, "/v1/completions").status == 405
    assert hu.get(d, "/v1/nothing").status == 404
    # still serving
    assert greedy(client, PROMPT, 2)


# ------------------------------------------------------------------------------------------
# Cancellation and overload
# ------------------------------------------------------------------------------------------

def test_client_closing_stream_frees_blocks(d, client):
    tok = gu.hf_tokenizer(d)
    n_prompt = len(tok.encode(PROMPT, add_special_tokens=False).ids)
    canceled = gu.requests_total(d, "canceled")
    socks = []
    for i in range(4):
        s, first = gu.open_stream(d, "/v1/completions", {
            "model": M, "prompt": PROMPT, "max_tokens": 500 - n_prompt, "stream": True,
            "ignore_eos": True, "seed": i})
        assert b"200 OK" in first.split(b"\r\n", 1)[0], first[:200]
        socks.append(s)
    for s in socks:
        s.close()
    gu.wait_for(lambda: gu.requests_total(d, "canceled") >= canceled + 4,
                "four canceled requests on /metrics")
    gu.wait_for(lambda: gu.kv_used(d) == 0, "the KV blocks of the canceled sequences back")
    assert greedy(client, PROMPT, 2)


def test_overload_429(make_server, tmp_path):
    d = gu.overload_server(make_server, tmp_path)
    body = {"model": M, "prompt": PROMPT, "max_tokens": 200, "ignore_eos": True}

    def one(i):
        return hu.post(d, "/v1/completions", body={**body, "seed": i},
                       headers={"Content-Type": "application/json", "x-rtx-lane": "tiny"})

    with cf.ThreadPoolExecutor(12) as ex:
        results = list(ex.map(one, range(12)))
    ok = [r for r in results if r.status == 200]
    refused = [r for r in results if r.status == 429]
    assert len(ok) + len(refused) == len(results), [r for r in results if r.status not in
                                                    (200, 429)][:3]
    # the two sequences the engine runs are always admitted; the one the lane may queue is
    # admitted only when the learned step time says it can start in time, which a loaded
    # machine (or a sanitizer build beside another test worker) can make it refuse
    assert len(ok) >= 2 and refused, f"{len(ok)} answered, {len(refused)} refused"
    for r in refused:
        assert int(r.headers["retry-after"]) >= 1
        e = r.json()["error"]
        assert e["type"] == "rate_limit_exceeded" and "retry after" in e["message"]
    for r in ok:
        assert r.json()["usage"]["completion_tokens"] == 200
    # the body's lane names it too; an unknown lane is a bad request naming it
    r = hu.post(d, "/v1/completions", body={**body, "max_tokens": 2, "lane": "nope"},
                headers={"Content-Type": "application/json"})
    assert r.status == 400 and "nope" in r.json()["error"]["message"], r
    assert r.json()["error"]["param"] == "lane"
    r = hu.post(d, "/v1/completions", body={**body, "max_tokens": 2, "lane": "tiny"},
                headers={"Content-Type": "application/json"})
    assert r.status == 200, r
    d.stop()


def test_shutdown_with_streams(make_server):
    """SIGTERM while streams are in flight: a client that reads gets its stream to the end
    ([DONE], or an error event and [DONE] when the grace runs out), a client that stopped
    reading (a large stream, a small receive window) does not hold the drain, and rtxd exits
    0 with no sanitizer report."""
    d = make_server("shutdown")
    d.start()
    hu.wait_http(d)
    stuck = socket.create_connection(("127.0.0.1", d.http_port), timeout=hu.TIMEOUT)
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    big = json.dumps({"model": M, "messages": MESSAGES, "n": 16, "logprobs": True,
                      "top_logprobs": 20, "stream": True, "ignore_eos": True}).encode()
    stuck.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                  b"application/json\r\nContent-Length: %d\r\n\r\n" % len(big) + big)
    assert stuck.recv(64).startswith(b"HTTP/1.1 200")
    reader = cf.ThreadPoolExecutor(1).submit(
        gu.post_sse, d, "/v1/completions",
        {"model": M, "prompt": PROMPT, "stream": True, "max_tokens": 400, "ignore_eos": True})
    time.sleep(0.05)
    t0 = time.monotonic()
    d.stop()
    took = time.monotonic() - t0
    s = reader.result(timeout=30 * sh.SLOW)
    stuck.close()
    assert s.status in (200, 503), s.raw[:300]
    if s.status == 200:
        assert s.done, s.raw[-300:]
        if "error" in s.events[-2]:
            assert "shutting down" in s.events[-2]["error"]["message"]
    # the server's grace (5 s) and linger (2 s) bound the drain
    assert took < 20 * sh.SLOW, f"the drain took {took:.1f} s"
