"""
gen_util - what the generation front-end tests (test_openai.py, test_http_generate.py) share:
the example repository's generative model (tiny-chat: a random-weight Llama checkpoint with
its own tokenizer and a ChatML template), its tokenizer through Hugging Face's `tokenizers`
(the reference for prompt token counts), Server-Sent Events read off a raw HTTP/1.1 response
and off curl (HTTP/1.1 and HTTP/2), and the generation families of /metrics.
"""

import http.client
import json
import shutil
import socket
import subprocess
import time

from prometheus_client.parser import text_string_to_metric_families

import http_util as hu
import serving_harness as sh
import skips

MODEL = "tiny-chat"


def model_dir(d, name=MODEL):
    """The checkpoint directory (version 1) of the daemon's copy of the model."""
    return d.repository / name / "1"


def hf_tokenizer(d):
    from tokenizers import Tokenizer
    return Tokenizer.from_file(str(model_dir(d) / "tokenizer.json"))


def chat_template(d):
    return json.loads((model_dir(d) / "tokenizer_config.json").read_text())["chat_template"]


def render_chat(d, messages, add_generation_prompt=True):
    """The prompt text as transformers' apply_chat_template renders it (jinja2)."""
    import jinja2
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(chat_template(d)).render(
        messages=messages, add_generation_prompt=add_generation_prompt)


class SSE:
    """A response read as it comes: status, headers, and its events (the JSON objects of
    `data:` lines; "[DONE]" as the string)."""

    def __init__(self, status, headers, events, raw):
        self.status, self.headers, self.events, self.raw = status, headers, events, raw

    @property
    def done(self):
        return bool(self.events) and self.events[-1] == "[DONE]"

    def data(self):
        return [e for e in self.events if e != "[DONE]"]


def parse_sse(raw):
    """Events of an event-stream body; asserts the framing: every event one `data: ` line
    followed by a blank line."""
    text = raw.decode("utf-8")
    assert text.endswith("\n\n"), f"the stream does not end with a blank line: {text[-80:]!r}"
    events = []
    for block in text[:-2].split("\n\n"):
        assert block.startswith("data: ") and "\n" not in block, f"bad SSE event: {block!r}"
        payload = block[6:]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def post_sse(d, path, body, headers=None, timeout=hu.TIMEOUT):
    """POSTs over HTTP/1.1 and reads the whole event stream (or an error body)."""
    c = http.client.HTTPConnection("127.0.0.1", d.http_port, timeout=timeout)
    try:
        h = {"Content-Type": "application/json", **(headers or {})}
        c.request("POST", path, body=json.dumps(body).encode(), headers=h)
        r = c.getresponse()
        raw = r.read()
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        if r.status != 200:
            return SSE(r.status, hdrs, [], raw)
        return SSE(r.status, hdrs, parse_sse(raw), raw)
    finally:
        c.close()


def curl_sse(d, path, body, http2=False):
    """An event stream read by curl (-N: no buffering), over HTTP/1.1 or h2c with prior
    knowledge; returns (HTTP version, status, events)."""
    curl = hu.curl_h2c() if http2 else shutil.which("curl")
    if not curl:
        skips.skip("curl", "no curl on PATH")
    args = [curl, "-sS", "-N", "-o", "-", "-w", "\n%{http_version} %{http_code}",
            "-H", "Content-Type: application/json", "--data-binary", json.dumps(body),
            f"http://127.0.0.1:{d.http_port}{path}"]
    args.insert(1, "--http2-prior-knowledge" if http2 else "--http1.1")
    p = subprocess.run(args, capture_output=True, timeout=60 * sh.SLOW)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    body_raw, _, tail = p.stdout.rpartition(b"\n")
    version, code = tail.decode().split()
    return version, int(code), parse_sse(body_raw)


def open_stream(d, path, body, headers=None):
    """A raw socket that sent a streaming request over HTTP/1.1; returns (socket, the bytes
    read up to and including the first event)."""
    s = socket.create_connection(("127.0.0.1", d.http_port), timeout=hu.TIMEOUT)
    data = json.dumps(body).encode()
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(data)}\r\n{extra}\r\n".encode() + data)
    got = b""
    while b"data: " not in got or b"\n\n" not in got.split(b"data: ", 1)[1]:
        b = s.recv(65536)
        assert b, f"the stream closed before its first event: {got!r}"
        got += b
    return s, got


def gen_metrics(d, model=MODEL):
    """{(family name, frozenset of labels except model): value} of rtx_gen_* samples of model."""
    r = hu.get(d, "/metrics")
    assert r.status == 200
    out = {}
    for fam in text_string_to_metric_families(r.body.decode()):
        for s in fam.samples:
            if not s.name.startswith("rtx_gen_") or not s.labels.get("model", "").startswith(
                    model):
                continue
            labels = frozenset((k, v) for k, v in s.labels.items() if k != "model")
            out[(s.name, labels)] = s.value
    return out


def kv_used(d, model=MODEL):
    return gen_metrics(d, model)[("rtx_gen_kv_blocks", frozenset({("state", "used")}))]


def requests_total(d, outcome, model=MODEL):
    return gen_metrics(d, model)[("rtx_gen_requests_total", frozenset({("outcome", outcome)}))]


def wait_for(pred, what, timeout=10.0 * sh.SLOW):
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.02)


# a lane "tiny" (after the default ones) that holds one queued request: a burst overloads it
OVERLOAD_INI = """
[lane.tiny]
max_queued = 1
"""


def overload_server(make_server, tmp_path, **kw):
    """A started server (HTTP up) whose settings add lane "tiny" (OVERLOAD_INI), serving (unless
    kw names a repository) a copy of tiny-chat that runs two sequences at most
    (generation.max_seqs), so a burst always overloads it; kw go to make_server."""
    ini = tmp_path / "rtxd.ini"
    ini.write_text(OVERLOAD_INI)
    if "repository" not in kw:
        repo = sh.copy_repository(tmp_path / "models", models=("tiny-chat",))
        cfg_path = repo / "tiny-chat" / "config.json"
        cfg = json.loads(cfg_path.read_text())
        cfg["generation"] = {**cfg.get("generation", {}), "max_seqs": 2}
        cfg_path.unlink()  # a copy of the build's file (or a link to it): never write through
        cfg_path.write_text(json.dumps(cfg))
        kw["repository"] = repo
    d = make_server("overload", config=ini, **kw)
    d.start()
    hu.wait_http(d)
    return d


def serve_generation(work):
    """A started daemon in `work` serving copies of the example repository's generative model
    and `simple` (a graph model), for the KServe generation modules; stop it with
    stop_clean."""
    d = sh.ServingDaemon(work, repository=sh.copy_repository(work / "models",
                                                             models=(MODEL, "simple")))
    d.start()
    return d


def stop_clean(d):
    """Stops d and fails on anything its teardown reports (a sanitizer report, a bad exit)."""
    err = d.cleanup()
    assert not err, f"daemon teardown: {err}"
