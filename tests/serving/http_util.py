"""
http_util - what the HTTP serving tests share: plain HTTP/1.1 requests to a ServingDaemon's
KServe v2 REST endpoint (http.client and raw sockets, no Triton code), building inference
bodies in the JSON and binary forms, decoding answers, and the NumPy reference of the example
models.
"""

import http.client
import json
import shutil
import socket
import subprocess
import time

import numpy as np

import serving_harness as sh
import skips

TIMEOUT = 30.0 * sh.SLOW

NP_TO_KSERVE = {np.dtype(np.float32): "FP32", np.dtype(np.float16): "FP16",
                np.dtype(np.int8): "INT8", np.dtype(np.int32): "INT32",
                np.dtype(np.int64): "INT64", np.dtype(np.uint8): "UINT8",
                np.dtype(np.bool_): "BOOL"}
KSERVE_TO_NP = {v: k for k, v in NP_TO_KSERVE.items()}


class Resp:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    def json(self):
        return json.loads(self.body)

    def error(self):
        """The message of an {"error": ...} body."""
        j = self.json()
        assert set(j) == {"error"}, f"not an error body: {self.body[:300]!r}"
        return j["error"]

    def __repr__(self):
        return f"<{self.status} {self.body[:300]!r}>"


def request(d, method, path, body=None, headers=None, timeout=TIMEOUT):
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
    c = http.client.HTTPConnection("127.0.0.1", d.http_port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        data = r.read()
        return Resp(r.status, {k.lower(): v for k, v in r.getheaders()}, data)
    finally:
        c.close()


def get(d, path, **kw):
    return request(d, "GET", path, **kw)


def post(d, path, body=None, **kw):
    return request(d, "POST", path, body=body, **kw)


def wait_http(d, timeout=20.0 * sh.SLOW):
    """Waits until the daemon's HTTP server answers /v2/health/live."""
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        try:
            r = get(d, "/v2/health/live", timeout=2)
            if r.status == 200:
                return
            last = r
        except OSError as e:
            last = e
        time.sleep(0.05)
    raise AssertionError(f"HTTP not live on {d.http_address}: {last}{d.log_excerpt()}")


def raw(d, data, timeout=5.0 * sh.SLOW):
    """Sends raw bytes on a new connection; returns what comes back until the server closes
    or goes quiet."""
    with socket.create_connection(("127.0.0.1", d.http_port), timeout=timeout) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        out = b""
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    break
                out += b
        except socket.timeout:
            pass
        return out


def infer_body(inputs, outputs=None, binary_inputs=False, binary_output=None, rid=None,
               params=None):
    """(body, headers) of an inference request. inputs: {name: array}; outputs: None (all),
    or {name: {parameters}}; binary_inputs: send the tensors after the JSON."""
    j = {"inputs": []}
    if rid is not None:
        j["id"] = rid
    p = dict(params or {})
    if binary_output is not None:
        p["binary_data_output"] = binary_output
    if p:
        j["parameters"] = p
    blobs = []
    for name, a in inputs.items():
        a = np.ascontiguousarray(a)
        e = {"name": name, "shape": list(a.shape), "datatype": NP_TO_KSERVE[a.dtype]}
        if binary_inputs:
            e["parameters"] = {"binary_data_size": a.nbytes}
            blobs.append(a.tobytes())
        else:
            e["data"] = a.flatten().tolist()
        j["inputs"].append(e)
    if outputs is not None:
        j["outputs"] = [{"name": n, **({"parameters": pp} if pp else {})}
                        for n, pp in outputs.items()]
    head = json.dumps(j).encode()
    if not binary_inputs:
        return head, {"Content-Type": "application/json"}
    return head + b"".join(blobs), {"Inference-Header-Content-Length": str(len(head)),
                                    "Content-Type": "application/octet-stream"}


def decode_infer(r):
    """(JSON header, {name: array}) of a successful inference answer."""
    assert r.status == 200, f"inference failed: {r}"
    hl = r.headers.get("inference-header-content-length")
    n = int(hl) if hl is not None else len(r.body)
    head = json.loads(r.body[:n])
    at = n
    out = {}
    for o in head["outputs"]:
        dt = KSERVE_TO_NP[o["datatype"]]
        size = (o.get("parameters") or {}).get("binary_data_size")
        if size is not None:
            out[o["name"]] = np.frombuffer(r.body[at:at + size], dtype=dt).reshape(o["shape"])
            at += size
        elif "data" in o:
            out[o["name"]] = np.array(o["data"], dtype=dt).reshape(o["shape"])
    assert at == len(r.body), f"{len(r.body) - at} unclaimed bytes after the outputs"
    return head, out


def infer(d, model, inputs, version=None, **kw):
    body, headers = infer_body(inputs, **kw)
    path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/infer"
    return post(d, path, body=body, headers=headers)


def mlp_reference(weights, x):
    """probs = softmax(relu(x @ w1 + b1) @ w2 + b2), in float64 then float32."""
    h = np.maximum(x.astype(np.float64) @ weights["w1"] + weights["b1"], 0)
    z = h @ weights["w2"] + weights["b2"]
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    return (z / z.sum(axis=-1, keepdims=True)).astype(np.float32)


def simple_inputs(batch=1, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(-1000, 1000, size=(batch, 16), dtype=np.int32)
    b = rng.integers(-1000, 1000, size=(batch, 16), dtype=np.int32)
    return a, b


def curl_h2c():
    """The path of a curl that speaks HTTP/2 (h2c with prior knowledge), or a skip naming
    what is missing ("curl", "curl-h2c": tests/skips.py; deploy/install-deps.sh installs
    Debian's curl, which has it)."""
    curl = shutil.which("curl")
    if not curl:
        skips.skip("curl", "no curl on PATH")
    v = subprocess.run([curl, "--version"], capture_output=True, text=True, timeout=30)
    features = [ln for ln in v.stdout.splitlines() if ln.startswith("Features:")]
    if v.returncode != 0 or not features or "HTTP2" not in features[0].split():
        skips.skip("curl-h2c", f"{curl} lists no HTTP2 feature: {v.stdout.strip()[-300:]}")
    return curl


def assert_serving(d):
    """The daemon is alive and still answers inference over HTTP."""
    assert d.alive(), f"rtxd died{d.log_excerpt()}"
    a, b = simple_inputs(2, seed=99)
    _, out = decode_infer(infer(d, "simple", {"INPUT0": a, "INPUT1": b}))
    np.testing.assert_array_equal(out["OUTPUT0"], a + b)
    np.testing.assert_array_equal(out["OUTPUT1"], a - b)
