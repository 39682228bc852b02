"""
KServe BYTES tensors over both protocols against a generative model (the example repository's
tiny-chat): the same greedy request as gRPC raw_input_contents (Triton's length-prefixed
form), gRPC typed bytes_contents, HTTP JSON strings and the HTTP binary-data extension (with
binary and JSON answers, read by tritonclient.http and by hand) all give the same text; the
length prefixes are checked against tritonclient's own serialize_byte_tensor; a BYTES input
to a graph model is refused over both protocols; malformed binary BYTES are a clear 400.
"""

import json
import struct

import numpy as np
import pytest

import gen_util
import grpc_util as gu
import http_util as hu
from grpc_util import service_pb2, tg

import tritonclient.http as th  # noqa: E402
from tritonclient.utils import serialize_byte_tensor  # noqa: E402

MODEL = gen_util.MODEL
PROMPT = "Streams of bytes, caf\u00e9 \u2615"
SAMPLING = json.dumps({"temperature": 0, "max_tokens": 12, "ignore_eos": True})


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = gen_util.serve_generation(tmp_path_factory.mktemp("test_kserve_bytes"))
    yield d
    gen_util.stop_clean(d)


def packed(*strings):
    """The length-prefixed form, written by hand: 4-byte little-endian length, then bytes."""
    return b"".join(struct.pack("<I", len(s)) + s for s in (x.encode() for x in strings))


def unpacked(buf):
    out, at = [], 0
    while at < len(buf):
        (n,) = struct.unpack_from("<I", buf, at)
        out.append(buf[at + 4:at + 4 + n].decode())
        at += 4 + n
    return out


def grpc_text(server, typed):
    req = service_pb2.ModelInferRequest(model_name=MODEL, id="b1")
    for name, value in (("text_input", PROMPT), ("sampling_parameters", SAMPLING)):
        t = req.inputs.add(name=name, datatype="BYTES", shape=[1])
        if typed:
            t.contents.bytes_contents.append(value.encode())
        else:
            req.raw_input_contents.append(packed(value))
    e = req.inputs.add(name="exclude_input_in_output", datatype="BOOL", shape=[1])
    if typed:
        e.contents.bool_contents.append(True)
    else:
        req.raw_input_contents.append(b"\x01")
    resp = service_pb2.ModelInferResponse.FromString(
        gu.raw_call(server, "ModelInfer", req.SerializeToString()))
    assert resp.id == "b1"
    (out,) = resp.outputs
    assert (out.name, out.datatype, list(out.shape)) == ("text_output", "BYTES", [1])
    return unpacked(resp.raw_output_contents[0])


def test_prefixes_match_tritonclient():
    arr = np.array([PROMPT.encode(), b"", b"x" * 300], dtype=np.object_)
    ser = serialize_byte_tensor(arr)  # an object array holding the serialized bytes
    ser = ser.item() if ser.dtype == np.object_ else ser.tobytes()
    assert ser == packed(PROMPT, "", "x" * 300)


def test_same_text_over_every_form(server):
    raw = grpc_text(server, typed=False)
    assert len(raw) == 1 and raw[0]
    assert grpc_text(server, typed=True) == raw

    # HTTP, JSON strings in and out
    body = {"id": "h1", "inputs": [
        {"name": "text_input", "datatype": "BYTES", "shape": [1], "data": [PROMPT]},
        {"name": "sampling_parameters", "datatype": "BYTES", "shape": [1], "data": [SAMPLING]},
        {"name": "exclude_input_in_output", "datatype": "BOOL", "shape": [1], "data": [True]}]}
    r = hu.post(server, f"/v2/models/{MODEL}/infer", body)
    assert r.status == 200, r
    j = r.json()
    assert j["id"] == "h1" and j["model_name"] == MODEL
    (out,) = j["outputs"]
    assert (out["name"], out["datatype"], out["shape"]) == ("text_output", "BYTES", [1])
    assert out["data"] == raw
    assert j["parameters"]["completion_tokens"] == 12

    # HTTP binary data in, binary out, read by hand
    bins = [packed(PROMPT), packed(SAMPLING), b"\x01"]
    head = {"inputs": [
        {"name": n, "datatype": dt, "shape": [1], "parameters": {"binary_data_size": len(b)}}
        for (n, dt), b in zip((("text_input", "BYTES"), ("sampling_parameters", "BYTES"),
                               ("exclude_input_in_output", "BOOL")), bins)],
        "outputs": [{"name": "text_output", "parameters": {"binary_data": True}}]}
    hj = json.dumps(head).encode()
    r = hu.post(server, f"/v2/models/{MODEL}/infer", hj + b"".join(bins),
                headers={"Inference-Header-Content-Length": str(len(hj))})
    assert r.status == 200, r
    n = int(r.headers["inference-header-content-length"])
    meta = json.loads(r.body[:n])
    assert meta["outputs"][0]["parameters"]["binary_data_size"] == len(r.body) - n
    assert unpacked(r.body[n:]) == raw

    # tritonclient.http with binary inputs and outputs
    c = th.InferenceServerClient(server.http_address)
    try:
        ins = []
        for name, value in (("text_input", PROMPT), ("sampling_parameters", SAMPLING)):
            t = th.InferInput(name, [1], "BYTES")
            t.set_data_from_numpy(np.array([value.encode()], dtype=np.object_), binary_data=True)
            ins.append(t)
        e = th.InferInput("exclude_input_in_output", [1], "BOOL")
        e.set_data_from_numpy(np.array([True]), binary_data=False)
        ins.append(e)
        res = c.infer(MODEL, ins, outputs=[th.InferRequestedOutput("text_output",
                                                                   binary_data=True)])
        assert [t.decode() for t in res.as_numpy("text_output")] == raw
        md = c.get_model_metadata(MODEL)
        assert {i["name"]: i["datatype"] for i in md["inputs"]}["text_input"] == "BYTES"
        cfg = c.get_model_config(MODEL)
        assert cfg["model_transaction_policy"]["decoupled"] is True
    finally:
        c.close()


def test_bad_bytes_over_http(server):
    for data, needle in [(struct.pack("<I", 50) + b"abc", "claims 50 bytes"),
                         (b"\x01\x00", "cannot hold the 1 BYTES elements"),
                         (b"\x01\x00\x00\x00a\x01", "length prefix runs past the end"),
                         (packed("a", "b"), "more than the 1 BYTES elements")]:
        head = json.dumps({"inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1],
                                       "parameters": {"binary_data_size": len(data)}}]}).encode()
        r = hu.post(server, f"/v2/models/{MODEL}/infer", head + data,
                    headers={"Inference-Header-Content-Length": str(len(head))})
        assert r.status == 400, r
        assert needle in r.error() and "text_input" in r.error()
    r = hu.post(server, f"/v2/models/{MODEL}/infer", {"inputs": [
        {"name": "text_input", "datatype": "BYTES", "shape": [1], "data": [5]}]})
    assert r.status == 400 and "not a string" in r.error(), r
    r = hu.post(server, f"/v2/models/{MODEL}/infer", {"inputs": [
        {"name": "sampling_parameters", "datatype": "BYTES", "shape": [1], "data": ["{}"]}]})
    assert r.status == 400 and "missing input 'text_input'" in r.error(), r


def test_graph_model_refuses_bytes(server):
    r = hu.post(server, "/v2/models/simple/infer", {"inputs": [
        {"name": "INPUT0", "datatype": "BYTES", "shape": [1, 1], "data": ["a"]}]})
    assert r.status == 400, r
    assert "INPUT0" in r.error() and "BYTES" in r.error() and "graph model" in r.error()
    c = gu.client(server)
    try:
        b = tg.InferInput("INPUT0", [1, 16], "BYTES")
        b.set_data_from_numpy(np.array([[b"x"] * 16], dtype=np.object_))
        gu.expect_error(lambda: c.infer("simple", [b]), "INVALID_ARGUMENT", "INPUT0",
                        "graph model", daemon=server)
        assert c.is_model_ready("simple")
    finally:
        c.close()
