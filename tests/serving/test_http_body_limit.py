"""
http.max_body_bytes: a request body over the limit is refused with 413 and rtxd's
{"error": "..."} JSON body (application/json, naming the setting and the limit) like every
other error, whether the body announces its size (Content-Length: refused before a byte of it
is read) or comes chunked; a body at the limit is served; rtxd keeps serving after each.
Over HTTP/2 (curl, prior knowledge) h2o 2.2 resets the stream instead of answering; rtxd keeps
serving after that too.
"""

import json
import socket
import subprocess

import pytest

import http_util as hu
import serving_harness as sh

LIMIT = 4096
SERVER_KW = {"flags": [f"--http.max_body_bytes={LIMIT}"]}


@pytest.fixture(scope="module")
def d(server):
    hu.wait_http(server)
    return server


def exchange(d, data, timeout=10.0 * sh.SLOW):
    """Sends data on a new connection (without half-closing it) and reads until the server
    closes; returns (status, {header: value}, body)."""
    with socket.create_connection(("127.0.0.1", d.http_port), timeout=timeout) as s:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered and closed before taking everything: read the answer
        out = b""
        while True:
            try:
                b = s.recv(65536)
            except ConnectionResetError:
                break
            if not b:
                break
            out += b
    head, _, body = out.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0].startswith("HTTP/1.1 "), f"not an HTTP answer: {out[:300]!r}"
    headers = {k.strip().lower(): v.strip() for k, v in
               (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
    return int(lines[0].split()[1]), headers, body


def assert_json_413(status, headers, body):
    assert status == 413, (status, body[:300])
    assert headers.get("content-type") == "application/json", headers
    assert int(headers["content-length"]) == len(body), (headers, body)
    err = json.loads(body)
    assert set(err) == {"error"}, err
    assert "http.max_body_bytes" in err["error"] and str(LIMIT) in err["error"], err


def test_content_length_over_the_limit(d):
    # only the headers: the answer must come without waiting for the body
    req = (f"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n"
           f"Content-Type: application/json\r\nContent-Length: {LIMIT + 1}\r\n\r\n").encode()
    assert_json_413(*exchange(d, req))
    hu.assert_serving(d)


def test_chunked_body_over_the_limit(d):
    chunk = b" " * 1024
    body = b"".join(b"%x\r\n" % len(chunk) + chunk + b"\r\n" for _ in range(LIMIT // 1024 + 2))
    req = (b"POST /v2/repository/index HTTP/1.1\r\nHost: x\r\n"
           b"Transfer-Encoding: chunked\r\n\r\n" + body + b"0\r\n\r\n")
    assert_json_413(*exchange(d, req))
    hu.assert_serving(d)


def test_http_client_over_the_limit(d):
    r = hu.post(d, "/v2/models/simple/infer", b"{" + b" " * LIMIT + b"}",
                headers={"Content-Type": "application/json"})
    assert r.status == 413 and "http.max_body_bytes" in r.error(), r
    assert r.headers.get("content-type") == "application/json", r.headers
    hu.assert_serving(d)


def test_body_at_the_limit_is_served(d):
    body = b'{"ready": true}'
    body += b" " * (LIMIT - len(body))
    assert len(body) == LIMIT
    r = hu.post(d, "/v2/repository/index", body)
    assert r.status == 200, r
    assert {m["name"] for m in r.json()} >= {"simple", "mlp"}
    # other errors keep their own status: a malformed body at the limit is a 400
    r = hu.post(d, "/v2/repository/index", b"{" * LIMIT)
    assert r.status == 400 and "malformed JSON" in r.error(), r


def test_http2_body_over_the_limit(d, tmp_path):
    curl = hu.curl_h2c()
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (LIMIT * 2))
    p = subprocess.run([curl, "-sS", "--http2-prior-knowledge", "--max-time", "20",
                        "-o", "/dev/null", "-w", "%{http_code}", "--data-binary", f"@{big}",
                        f"{d.http_url}/v2/repository/index"],
                       capture_output=True, text=True, timeout=60 * sh.SLOW)
    # the stream is refused (curl fails), never answered 200
    assert p.returncode != 0 or p.stdout.strip() == "413", (p.returncode, p.stdout, p.stderr)
    hu.assert_serving(d)
    # a body within the limit still works over HTTP/2
    p = subprocess.run([curl, "-sS", "--http2-prior-knowledge", "--max-time", "20",
                        "-d", '{"ready": true}', f"{d.http_url}/v2/repository/index"],
                       capture_output=True, text=True, timeout=60 * sh.SLOW)
    assert p.returncode == 0 and "simple" in p.stdout, (p.returncode, p.stdout, p.stderr)
