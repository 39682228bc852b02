#!/usr/bin/env python3
"""
fake_gen_server.py - a stand-in for rtxd's generation endpoints with known timings, so that
tests/interop/test_bench_generate.py can run bench/bench_generate.py end to end and know what
it must find. It takes rtxd's command line (--http.listen=HOST:PORT, --models.startup=NAME;
the rest is ignored) and answers:

  GET  /v2/health/ready, /v2/models/NAME/ready   200
  GET  /v2/models/NAME/config                    {"name", "platform": "rtx_generate", ...}
  GET  /metrics                                  rtx_gen_sequences{model,lane,state} gauges
  POST /v1/completions                           stream true: one SSE chunk per token, then
                                                 a usage chunk and [DONE]; 400 for a prompt
                                                 that is not a list of token ids

Timings (environment, milliseconds): FAKE_GEN_TTFT_MS (5) plus FAKE_GEN_PREFILL_MS_PER_1K
(20) per 1,000 prompt tokens not in its prefix cache (16-token blocks, a hash chain over full
blocks, as rtxd's), then FAKE_GEN_ITL_MS (2) per further token; FAKE_GEN_REALTIME_SLOW=K
multiplies the TTFT and ITL of realtime requests (header x-rtx-lane or body "lane") by K while
batch requests are running; FAKE_GEN_NO_PREFIX=1 turns the prefix cache off. No batching and
no limit: every request runs on its own thread.
"""
import hashlib
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BLOCK = 16
MODEL = "tiny-chat"
TTFT = float(os.environ.get("FAKE_GEN_TTFT_MS", "5")) / 1e3
PREFILL = float(os.environ.get("FAKE_GEN_PREFILL_MS_PER_1K", "20")) / 1e6
ITL = float(os.environ.get("FAKE_GEN_ITL_MS", "2")) / 1e3
RT_SLOW = float(os.environ.get("FAKE_GEN_REALTIME_SLOW", "1"))
NO_PREFIX = os.environ.get("FAKE_GEN_NO_PREFIX", "") not in ("", "0")

lock = threading.Lock()
cache = set()
running = {}  # lane -> sequences


def cached_tokens(ids):
    """Leading full blocks found in the cache (then all full blocks are added)."""
    h, hit, n = b"", True, 0
    for i in range(len(ids) // BLOCK):
        h = hashlib.sha256(h + json.dumps(ids[i * BLOCK:(i + 1) * BLOCK]).encode()).digest()
        with lock:
            hit = hit and h in cache and not NO_PREFIX
            cache.add(h)
        n += BLOCK if hit else 0
    return min(n, len(ids) - 1)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, obj, ctype="application/json"):
        data = (obj if isinstance(obj, str) else json.dumps(obj)).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path in ("/v2/health/ready", f"/v2/models/{MODEL}/ready"):
            self.answer(200, {})
        elif self.path == f"/v2/models/{MODEL}/config":
            self.answer(200, {"name": MODEL, "platform": "rtx_generate",
                              "instance_group": [{"count": 1, "kind": "KIND_CPU"}]})
        elif self.path == "/metrics":
            with lock:
                lines = [f'rtx_gen_sequences{{model="{MODEL}",lane="{ln}",state="running"}} {n}'
                         for ln, n in running.items()]
            self.answer(200, "\n".join(lines) + "\n", "text/plain")
        else:
            self.answer(404, {"error": "not found"})

    def chunk(self, payload):
        data = f"data: {payload}\n\n".encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = body.get("prompt")
        if self.path != "/v1/completions" or not isinstance(prompt, list) or not prompt:
            self.answer(400, {"error": {"message": "prompt must be token ids"}})
            return
        lane = self.headers.get("x-rtx-lane") or body.get("lane") or "batch"
        n = int(body.get("max_tokens", 16))
        with lock:
            running[lane] = running.get(lane, 0) + 1
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            cached = cached_tokens(prompt)

            def slow():
                with lock:
                    return RT_SLOW if lane == "realtime" and running.get("batch") else 1.0
            time.sleep((TTFT + PREFILL * (len(prompt) - cached)) * slow())
            for i in range(n):
                if i:
                    time.sleep(ITL * slow())
                self.chunk(json.dumps({"id": "cmpl-1", "object": "text_completion", "choices": [
                    {"index": 0, "text": "x", "logprobs": None,
                     "finish_reason": "length" if i == n - 1 else None}]}))
            self.chunk(json.dumps({"id": "cmpl-1", "choices": [], "usage": {
                "prompt_tokens": len(prompt), "completion_tokens": n,
                "total_tokens": len(prompt) + n,
                "prompt_tokens_details": {"cached_tokens": cached}}}))
            self.chunk("[DONE]")
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass  # the client left
        finally:
            with lock:
                running[lane] -= 1


def main(argv):
    host, port = "127.0.0.1", 0
    global MODEL
    for a in argv:
        if a.startswith("--http.listen="):
            host, _, p = a.split("=", 1)[1].rpartition(":")
            port = int(p)
        elif a.startswith("--models.startup="):
            MODEL = a.split("=", 1)[1]
    srv = ThreadingHTTPServer((host, port), Handler)
    srv.daemon_threads = True
    srv.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
