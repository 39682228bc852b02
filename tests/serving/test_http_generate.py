"""
Triton's generate extension on rtxd's HTTP server: POST /v2/models/{m}[/versions/{v}]/generate
and /generate_stream with plain HTTP (http.client) and curl over HTTP/1.1 and HTTP/2, against
the example repository's generative model (tiny-chat): text_input and the parameters as
top-level fields, in "parameters" and in the vLLM backend's "sampling_parameters" string; the
prompt in text_output unless exclude_input_in_output; greedy streams equal to whole answers
and to OpenAI's /v1/completions; seeds; and the errors in Triton's {"error": "..."} shape.
"""

import json

import pytest

import gen_util as gu
import http_util as hu

M = gu.MODEL
PROMPT = "Once upon a time there was"
GEN = f"/v2/models/{M}/generate"
STREAM = f"/v2/models/{M}/generate_stream"


@pytest.fixture(scope="module")
def d(server):
    hu.wait_http(server)
    return server


def post(d, path, body):
    return hu.post(d, path, body=body if isinstance(body, bytes) else json.dumps(body).encode(),
                   headers={"Content-Type": "application/json"})


def completion(d, **kw):
    r = post(d, "/v1/completions", {"model": M, "prompt": PROMPT, **kw})
    assert r.status == 200, r
    return r.json()["choices"][0]["text"]


def test_generate(d):
    want = completion(d, max_tokens=8, temperature=0)
    r = post(d, GEN, {"text_input": PROMPT, "max_tokens": 8, "temperature": 0})
    assert r.status == 200 and r.headers["content-type"] == "application/json", r
    assert r.json() == {"model_name": M, "model_version": "1", "text_output": PROMPT + want}
    r = post(d, f"/v2/models/{M}/versions/1/generate",
             {"text_input": PROMPT, "parameters": {"max_tokens": 8, "temperature": 0,
                                                   "exclude_input_in_output": True}})
    assert r.json()["text_output"] == want
    # vLLM's sampling_parameters string, and a seed that reproduces
    sp = json.dumps({"temperature": 1.0, "seed": 99, "max_tokens": 10, "ignore_eos": True})
    a = post(d, GEN, {"text_input": PROMPT, "sampling_parameters": sp,
                      "exclude_input_in_output": True}).json()["text_output"]
    b = post(d, GEN, {"text_input": PROMPT, "parameters": {
        "temperature": 1.0, "seed": 99, "max_tokens": 10, "ignore_eos": True,
        "exclude_input_in_output": True}}).json()["text_output"]
    assert a == b == completion(d, max_tokens=10, temperature=1.0, seed=99, ignore_eos=True)


def test_generate_stream(d):
    whole = post(d, GEN, {"text_input": PROMPT, "max_tokens": 9, "temperature": 0}).json()
    s = gu.post_sse(d, STREAM, {"text_input": PROMPT, "max_tokens": 9, "temperature": 0})
    assert s.status == 200 and s.headers["content-type"].startswith("text/event-stream"), s.raw
    assert s.headers.get("transfer-encoding") == "chunked"
    assert not s.done and len(s.events) >= 2  # no [DONE] in Triton's streams
    for e in s.events:
        assert set(e) == {"model_name", "model_version", "text_output"}
        assert e["model_name"] == M and e["model_version"] == "1"
    assert s.events[0]["text_output"].startswith(PROMPT)
    assert "".join(e["text_output"] for e in s.events) == whole["text_output"]
    # "stream": false: one event with everything
    s = gu.post_sse(d, STREAM, {"text_input": PROMPT, "max_tokens": 9, "temperature": 0,
                                "stream": False, "exclude_input_in_output": True})
    assert [e["text_output"] for e in s.events] == [whole["text_output"][len(PROMPT):]]


def test_generate_stream_curl(d):
    whole = post(d, GEN, {"text_input": PROMPT, "max_tokens": 6, "temperature": 0,
                          "exclude_input_in_output": True}).json()["text_output"]
    body = {"text_input": PROMPT, "max_tokens": 6, "temperature": 0,
            "exclude_input_in_output": True}
    for http2, version in ((False, "1.1"), (True, "2")):
        v, code, events = gu.curl_sse(d, STREAM, body, http2=http2)
        assert (v, code) == (version, 200)
        assert "".join(e["text_output"] for e in events) == whole


def test_generate_errors(d):
    def err(path, body, status, words):
        r = post(d, path, body)
        assert r.status == status, r
        msg = r.error()  # exactly {"error": "..."}
        assert words in msg, msg

    err(GEN, b'{"text_input": "x"', 400, "malformed JSON")
    err(GEN, {"max_tokens": 3}, 400, "text_input")
    err(GEN, {"text_input": "x", "beams": 3}, 400, "unexpected field 'beams'")
    err(GEN, {"text_input": "x", "temperature": -1}, 400, "temperature")
    err(GEN, {"text_input": "x", "parameters": {"top_p": 0}}, 400, "top_p")
    err(GEN, {"text_input": "x", "sampling_parameters": "{bad"}, 400, "sampling_parameters")
    err(STREAM, {"text_input": "x", "max_tokens": "many"}, 400, "max_tokens")
    err(GEN, {"text_input": PROMPT, "max_tokens": 510}, 400, "context")
    err("/v2/models/simple/generate", {"text_input": "x"}, 400, "not a generative model")
    err("/v2/models/nope/generate", {"text_input": "x"}, 404, "nope")
    err(f"/v2/models/{M}/versions/7/generate", {"text_input": "x"}, 404, "7")
    assert hu.get(d, GEN).status == 405
    assert post(d, GEN, {"text_input": PROMPT, "max_tokens": 1}).status == 200
