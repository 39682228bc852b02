"""
Generative models over the KServe gRPC service, through Triton's own client (tritonclient.grpc)
as Triton's vLLM backend is driven: ModelStreamInfer with text_input, stream and
sampling_parameters (streamed and not), the triton_final_response flag and
enable_empty_final_response, several requests in flight on one stream, request parameters
as sampling fields, ModelInfer (unary) on a generative model, model metadata and config, every
kind of bad request (INVALID_ARGUMENT naming the input or field), and cancellation
(stop_stream(cancel_requests=True)) freeing the sequences and their KV blocks. The model is the
example repository's tiny-chat (a random-weight Llama checkpoint with its own tokenizer); the
prompt's token count is checked against Hugging Face `tokenizers` on the same tokenizer.json.
"""

import json
import queue
import re
import threading
import time

import numpy as np
import pytest

import gen_util
import grpc_util as gu
import http_util as hu
from grpc_util import tg


MODEL = gen_util.MODEL
PROMPT = "The daemon schedules"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = gen_util.serve_generation(tmp_path_factory.mktemp("test_grpc_generate"))
    yield d
    gen_util.stop_clean(d)


@pytest.fixture(scope="module")
def c(server):
    cl = gu.client(server)
    yield cl
    cl.close()


def text_inputs(prompt, sampling=None, stream=None, exclude=None):
    """The inputs of a generate request, as Triton's vLLM clients build them."""
    t = tg.InferInput("text_input", [1], "BYTES")
    t.set_data_from_numpy(np.array([prompt.encode()], dtype=np.object_))
    ins = [t]
    if stream is not None:
        s = tg.InferInput("stream", [1], "BOOL")
        s.set_data_from_numpy(np.array([stream], dtype=bool))
        ins.append(s)
    if sampling is not None:
        p = tg.InferInput("sampling_parameters", [1], "BYTES")
        body = sampling if isinstance(sampling, str) else json.dumps(sampling)
        p.set_data_from_numpy(np.array([body.encode()], dtype=np.object_))
        ins.append(p)
    if exclude is not None:
        e = tg.InferInput("exclude_input_in_output", [1], "BOOL")
        e.set_data_from_numpy(np.array([exclude], dtype=bool))
        ins.append(e)
    return ins


def final_flag(result):
    p = result.get_response().parameters
    return p["triton_final_response"].bool_param if "triton_final_response" in p else None


class Stream:
    """A tritonclient stream whose responses are collected per request id."""

    def __init__(self, daemon):
        self.cl = gu.client(daemon)
        self.q = queue.Queue()
        self.cl.start_stream(callback=lambda result, error: self.q.put((result, error)))

    def send(self, request_id, inputs, **kw):
        self.cl.async_stream_infer(MODEL, inputs, request_id=request_id, **kw)

    def collect(self, n_requests, timeout=gu.TIMEOUT):
        """Responses until n_requests have had their final one: {id: [(result, error)]}."""
        got, finals = {}, 0
        deadline = time.monotonic() + timeout
        while finals < n_requests:
            left = deadline - time.monotonic()
            assert left > 0, f"{finals} of {n_requests} requests ended: {got}"
            result, error = self.q.get(timeout=left)
            rid = result.get_response().id if result else None
            if error is not None:
                m = re.match(r"request '([^']*)'", error.message() or "")
                rid = m.group(1) if m else None
            got.setdefault(rid, []).append((result, error))
            if error is not None or final_flag(result):
                finals += 1
        return got

    def close(self, cancel=False):
        self.cl.stop_stream(cancel_requests=cancel)
        self.cl.close()


def texts(responses):
    """The text_output elements of each response, concatenated per choice."""
    out = None
    for result, error in responses:
        assert error is None, error
        arr = result.as_numpy("text_output")
        if arr is None:
            continue
        if out is None:
            out = [b""] * len(arr)
        for i, t in enumerate(arr):
            out[i] += t
    return [t.decode() for t in out] if out is not None else []


def infer_text(c, prompt, sampling, exclude=True):
    r = c.infer(MODEL, text_inputs(prompt, sampling, exclude=exclude))
    return [t.decode() for t in r.as_numpy("text_output")], r.get_response()


GREEDY = {"temperature": 0, "max_tokens": 24, "ignore_eos": True}


# ------------------------------------------------------------------------------------------
# Metadata and configuration
# ------------------------------------------------------------------------------------------

def test_metadata_and_config(c):
    md = c.get_model_metadata(MODEL)
    assert md.platform == "rtx_generate"
    ins = {t.name: (t.datatype, list(t.shape)) for t in md.inputs}
    assert ins["text_input"] == ("BYTES", [1])
    assert ins["stream"] == ("BOOL", [1])
    assert ins["sampling_parameters"] == ("BYTES", [1])
    assert ins["exclude_input_in_output"] == ("BOOL", [1])
    assert [(t.name, t.datatype, list(t.shape)) for t in md.outputs] == [
        ("text_output", "BYTES", [-1])]
    cfg = c.get_model_config(MODEL, as_json=True)["config"]
    assert cfg["model_transaction_policy"] == {"decoupled": True}
    assert cfg.get("max_batch_size", 0) == 0
    types = {i["name"]: i["data_type"] for i in cfg["input"]}
    assert types["text_input"] == "TYPE_STRING" and types["stream"] == "TYPE_BOOL"
    assert cfg["output"][0]["data_type"] == "TYPE_STRING"
    assert "model_transaction_policy" not in c.get_model_config("simple", as_json=True)["config"]


# ------------------------------------------------------------------------------------------
# Streams
# ------------------------------------------------------------------------------------------

def test_stream_concatenates_to_the_unary_text(server, c):
    """Greedy decoding: the streamed pieces add up to the text ModelInfer answers at once,
    each streamed response but the last is flagged not final, and the last carries the
    usage; the prompt's token count is Hugging Face tokenizers' count."""
    want, resp = infer_text(c, PROMPT, GREEDY)
    assert len(want) == 1 and want[0]
    assert resp.parameters["finish_reason"].string_param == "length"
    assert resp.parameters["completion_tokens"].int64_param == GREEDY["max_tokens"]
    import tokenizers

    tok = tokenizers.Tokenizer.from_file(str(server.repository / MODEL / "1" / "tokenizer.json"))
    assert resp.parameters["prompt_tokens"].int64_param == len(tok.encode(PROMPT).ids)

    s = Stream(server)
    try:
        s.send("a", text_inputs(PROMPT, GREEDY, stream=True))
        got = s.collect(1)["a"]
    finally:
        s.close()
    assert len(got) >= 2, "a stream of one response"
    flags = [final_flag(r) for r, _ in got]
    assert flags[:-1] == [False] * (len(got) - 1) and flags[-1] is True
    assert texts(got) == want
    last = got[-1][0].get_response().parameters
    assert last["finish_reason"].string_param == "length"
    assert last["completion_tokens"].int64_param == GREEDY["max_tokens"]


def test_not_streamed_on_a_stream(server, c):
    """stream false on ModelStreamInfer: one response with the whole text, flagged final;
    exclude_input_in_output left out prepends the prompt (Triton's vLLM backend)."""
    want, _ = infer_text(c, PROMPT, GREEDY)
    s = Stream(server)
    try:
        s.send("x", text_inputs(PROMPT, GREEDY, stream=False, exclude=True))
        s.send("y", text_inputs(PROMPT, GREEDY, stream=False))
        got = s.collect(2)
    finally:
        s.close()
    assert len(got["x"]) == 1 and final_flag(got["x"][0][0]) is True
    assert texts(got["x"]) == want
    assert texts(got["y"]) == [PROMPT + want[0]]


def test_empty_final_response(server, c):
    """enable_empty_final_response: every text response is not final, then an empty one
    (no outputs) is."""
    want, _ = infer_text(c, PROMPT, GREEDY)
    s = Stream(server)
    try:
        s.send("e", text_inputs(PROMPT, GREEDY, stream=True), enable_empty_final_response=True)
        got = s.collect(1)["e"]
    finally:
        s.close()
    assert [final_flag(r) for r, _ in got] == [False] * (len(got) - 1) + [True]
    assert got[-1][0].get_response().outputs == [] or len(got[-1][0].get_response().outputs) == 0
    assert texts(got) == want


def test_many_requests_in_flight_on_one_stream(server, c):
    """Eight requests at once on one stream, different prompts and lengths: each id gets its
    own responses, which add up to its own unary text."""
    prompts = [f"{PROMPT} {i} times" for i in range(8)]
    wants = [infer_text(c, p, dict(GREEDY, max_tokens=8 + 3 * i))[0] for i, p in
             enumerate(prompts)]
    s = Stream(server)
    try:
        for i, p in enumerate(prompts):
            s.send(f"r{i}", text_inputs(p, dict(GREEDY, max_tokens=8 + 3 * i), stream=True))
        got = s.collect(len(prompts))
    finally:
        s.close()
    for i in range(len(prompts)):
        assert texts(got[f"r{i}"]) == wants[i], i


def test_parameters_as_sampling_fields(server, c):
    """Sampling fields as request parameters (tritonclient's parameters=), and
    sampling_parameters winning over them."""
    want, _ = infer_text(c, PROMPT, dict(GREEDY, max_tokens=6))
    # tritonclient 2.41 sends ints, bools and strings as parameters (no floats)
    r = c.infer(MODEL, text_inputs(PROMPT, exclude=True),
                parameters={"max_tokens": 6, "temperature": "0", "ignore_eos": True})
    assert [t.decode() for t in r.as_numpy("text_output")] == want
    r = c.infer(MODEL, text_inputs(PROMPT, {"max_tokens": 6}, exclude=True),
                parameters={"max_tokens": 40, "temperature": "0", "ignore_eos": True})
    assert r.get_response().parameters["completion_tokens"].int64_param == 6
    assert [t.decode() for t in r.as_numpy("text_output")] == want
    # Triton's vLLM clients send numbers as strings
    r = c.infer(MODEL, text_inputs(PROMPT, {"max_tokens": "6", "temperature": "0",
                                            "ignore_eos": "true"}, exclude=True))
    assert [t.decode() for t in r.as_numpy("text_output")] == want
    # a double_param, as other KServe clients send it
    from grpc_util import service_pb2

    req = service_pb2.ModelInferRequest(model_name=MODEL)
    for name, value in (("text_input", PROMPT.encode()), ("exclude_input_in_output", True)):
        t = req.inputs.add(name=name, datatype="BYTES" if name == "text_input" else "BOOL",
                           shape=[1])
        if name == "text_input":
            t.contents.bytes_contents.append(value)
        else:
            t.contents.bool_contents.append(value)
    req.parameters["temperature"].double_param = 0.0
    req.parameters["max_tokens"].int64_param = 6
    req.parameters["ignore_eos"].bool_param = True
    resp = service_pb2.ModelInferResponse.FromString(
        gu.raw_call(server, "ModelInfer", req.SerializeToString()))
    assert [e.decode() for e in
            [resp.raw_output_contents[0][4:]]] == want


def test_seeded_sampling_and_n(server, c):
    """The same seed gives the same text; n = 3 gives three choices."""
    sp = {"temperature": 1.0, "top_k": 20, "seed": 7, "max_tokens": 12, "ignore_eos": True}
    a, _ = infer_text(c, PROMPT, sp)
    b, _ = infer_text(c, PROMPT, sp)
    assert a == b
    three, resp = infer_text(c, PROMPT, dict(sp, n=3))
    assert len(three) == 3
    assert resp.parameters["finish_reason"].string_param == "length,length,length"


def test_stop_string(server, c):
    """A stop string ends the text before it (the text before matches the text without it)."""
    full, _ = infer_text(c, PROMPT, dict(GREEDY, max_tokens=40))
    text = full[0]
    cut = next((k for k in range(3, len(text)) if text[k] not in " \n"), None)
    if cut is None:
        pytest.fail(f"the greedy text {text!r} has no character to stop at")
    stop = text[cut:cut + 2]
    first = text.find(stop)
    got, resp = infer_text(c, PROMPT, dict(GREEDY, max_tokens=40, stop=[stop]))
    assert got == [text[:first]]
    assert resp.parameters["finish_reason"].string_param == "stop"


# ------------------------------------------------------------------------------------------
# Bad requests
# ------------------------------------------------------------------------------------------

def stream_error(server, inputs):
    s = Stream(server)
    try:
        s.send("bad", inputs)
        got = s.collect(1)
    finally:
        s.close()
    (result, error), = got["bad"]
    assert error is not None, "no error on the stream"
    return error.message()


@pytest.mark.parametrize("inputs,needles", [
    (lambda: text_inputs(PROMPT, stream=True)[1:], ["missing input 'text_input'"]),
    (lambda: text_inputs(PROMPT, "{max_tokens: 3", stream=True),
     ["sampling_parameters", "malformed JSON"]),
    (lambda: text_inputs(PROMPT, {"temperature": 250}, stream=True), ["temperature"]),
    (lambda: text_inputs(PROMPT, {"temprature": 0.5}, stream=True), ["unknown field",
                                                                     "temprature"]),
    (lambda: text_inputs(PROMPT, {"max_tokens": "many"}, stream=True), ["max_tokens"]),
    (lambda: text_inputs(PROMPT, {"logprobs": 2}, stream=True), ["logprobs"]),
    (lambda: text_inputs(" word" * 700, GREEDY, stream=True), ["context"]),
    (lambda: text_inputs(PROMPT, GREEDY, stream=True, exclude=False),
     ["exclude_input_in_output"]),
])
def test_bad_requests_on_a_stream(server, c, inputs, needles):
    msg = stream_error(server, inputs())
    assert msg.startswith("request 'bad': "), msg
    for n in needles:
        assert n.lower() in msg.lower(), (n, msg)
    # the same request over ModelInfer is INVALID_ARGUMENT with the same words
    ins = [i for i in inputs() if i.name() != "stream"]
    if any(i.name() == "exclude_input_in_output" for i in ins):
        return  # exclude false is fine without streaming
    gu.expect_error(lambda: c.infer(MODEL, ins), "INVALID_ARGUMENT", *needles, daemon=server)
    assert c.is_model_ready(MODEL)


def test_bad_inputs(server, c):
    t = tg.InferInput("text_input", [2], "BYTES")
    t.set_data_from_numpy(np.array([b"a", b"b"], dtype=np.object_))
    gu.expect_error(lambda: c.infer(MODEL, [t]), "INVALID_ARGUMENT", "text_input", "one",
                    daemon=server)
    t = tg.InferInput("text_input", [1], "INT32")
    t.set_data_from_numpy(np.array([1], dtype=np.int32))
    gu.expect_error(lambda: c.infer(MODEL, [t]), "INVALID_ARGUMENT", "text_input", "BYTES",
                    daemon=server)
    x = tg.InferInput("prompt", [1], "BYTES")
    x.set_data_from_numpy(np.array([b"a"], dtype=np.object_))
    gu.expect_error(lambda: c.infer(MODEL, text_inputs(PROMPT) + [x]), "INVALID_ARGUMENT",
                    "unknown input 'prompt'", daemon=server)
    # stream true asks for many answers, which ModelInfer cannot give
    gu.expect_error(lambda: c.infer(MODEL, text_inputs(PROMPT, GREEDY, stream=True)),
                    "INVALID_ARGUMENT", "stream", "ModelStreamInfer", daemon=server)
    # a BYTES input to a graph model
    b = tg.InferInput("INPUT0", [1, 16], "BYTES")
    b.set_data_from_numpy(np.array([[b"x"] * 16], dtype=np.object_))
    gu.expect_error(lambda: c.infer("simple", [b]), "INVALID_ARGUMENT", "INPUT0", "BYTES",
                    "graph model", daemon=server)
    assert c.is_model_ready(MODEL) and c.is_model_ready("simple")


def test_bad_length_prefix_over_raw_contents(server):
    """raw_input_contents whose length prefix runs past its end, or holds two elements for a
    shape of one."""
    from grpc_util import service_pb2

    def call(raw):
        req = service_pb2.ModelInferRequest(model_name=MODEL)
        t = req.inputs.add(name="text_input", datatype="BYTES", shape=[1])
        del t
        req.raw_input_contents.append(raw)
        return gu.raw_call(server, "ModelInfer", req.SerializeToString())

    import grpc
    for raw, needle in [((9).to_bytes(4, "little") + b"abc", "claims 9 bytes"),
                        (b"\x02\x00", "length prefix runs past the end"),
                        ((1).to_bytes(4, "little") + b"a" + (1).to_bytes(4, "little") + b"b",
                         "more than the 1 BYTES elements")]:
        with pytest.raises(grpc.RpcError) as e:
            call(raw)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert needle in e.value.details() and "text_input" in e.value.details()


# ------------------------------------------------------------------------------------------
# Cancellation
# ------------------------------------------------------------------------------------------

def gen_metrics(server):
    """{(name, labels...): value} of the rtx_gen_* families for MODEL."""
    out = {}
    for line in hu.get(server, "/metrics").body.decode().splitlines():
        if not line.startswith("rtx_gen_") or f'model="{MODEL}"' not in line:
            continue
        key, value = line.rsplit(" ", 1)
        out[key] = float(value)
    return out


def metric(m, name, **labels):
    for key, v in m.items():
        if key.split("{")[0] == name and all(f'{k}="{x}"' in key for k, x in labels.items()):
            return v
    return 0.0


def test_cancel_frees_the_sequences(server, c):
    """Sixteen long generations, the stream cancelled after the first text arrives: the engine
    cancels them, their KV blocks come back and nothing runs or waits any more."""
    before = gen_metrics(server)
    s = Stream(server)
    first = threading.Event()
    n = 16
    try:
        for i in range(n):
            s.send(f"c{i}", text_inputs(f"{PROMPT} {i}", {"max_tokens": 480, "ignore_eos": True,
                                                          "temperature": 0}, stream=True))
        result, error = s.q.get(timeout=gu.TIMEOUT)
        assert error is None, error
        first.set()
    finally:
        s.close(cancel=True)
    deadline = time.monotonic() + gu.TIMEOUT
    while True:
        m = gen_metrics(server)
        used = metric(m, "rtx_gen_kv_blocks", state="used")
        running = sum(v for k, v in m.items() if k.startswith("rtx_gen_sequences{"))
        canceled = (metric(m, "rtx_gen_requests_total", outcome="canceled") -
                    metric(before, "rtx_gen_requests_total", outcome="canceled"))
        finished = (metric(m, "rtx_gen_requests_total", outcome="finished") -
                    metric(before, "rtx_gen_requests_total", outcome="finished"))
        # requests the server had not read off the stream when it was cancelled never start
        if used == 0 and running == 0 and canceled >= 1:
            break
        assert time.monotonic() < deadline, \
            f"after cancel: {used} KV blocks used, {running} sequences, {canceled} canceled"
        time.sleep(0.05)
    assert canceled + finished <= n and canceled >= 1, (canceled, finished)
    # the engine serves on
    assert infer_text(c, PROMPT, GREEDY)[0]
