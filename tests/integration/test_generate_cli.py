"""
Text generation from the command line and from C: `rtxctl generate` (streamed text, --json
chunks and summary, options, bad requests, Ctrl-C cancelling the stream) and librtx's
rtx_client_generate through rtx-client-check --generate, against an rtxd serving the example
repository's generative model tiny-chat. rtxctl's greedy text is compared with what
tritonclient.grpc gets from ModelInfer for the same request.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest

import harness as h

MODEL = "tiny-chat"
PROMPT = "Once the daemon"


@pytest.fixture(scope="module")
def gen_daemon(tmp_path_factory):
    work = tmp_path_factory.mktemp("test_generate_cli")
    src = h.rg.build_dir() / "examples" / "models" / MODEL
    assert src.is_dir(), f"{src} missing: run make"
    repo = work / "models"
    shutil.copytree(src, repo / MODEL)
    d = h.Daemon(work, flags=[f"--models.repository={repo}", "--http.listen="])
    d.start()
    yield d
    err = d.cleanup()
    assert not err, f"daemon teardown: {err}"


def unary_text(daemon, sampling, prompt=PROMPT):
    """The text ModelInfer answers for prompt (tritonclient.grpc, the prompt excluded)."""
    import tritonclient.grpc as tg

    c = tg.InferenceServerClient(daemon.address)
    try:
        ins = []
        for name, value in (("text_input", prompt), ("sampling_parameters", json.dumps(sampling))):
            t = tg.InferInput(name, [1], "BYTES")
            t.set_data_from_numpy(np.array([value.encode()], dtype=np.object_))
            ins.append(t)
        e = tg.InferInput("exclude_input_in_output", [1], "BOOL")
        e.set_data_from_numpy(np.array([True]))
        ins.append(e)
        return c.infer(MODEL, ins).as_numpy("text_output")[0].decode()
    finally:
        c.close()


def test_generate_text_and_json(gen_daemon):
    want = unary_text(gen_daemon, {"temperature": 0, "max_tokens": 16, "ignore_eos": True,
                                   "stop": ["\u00a7\u00a7"]})
    r = h.rtxctl("generate", MODEL, PROMPT, "--max-tokens", 16, "--temperature", 0,
                 "--stop", "\u00a7\u00a7", address=gen_daemon.address, check_rc=0)
    assert r.out == want + ("" if want.endswith("\n") else "\n"), r.describe()

    r = h.rtxctl("--json", "generate", MODEL, PROMPT, "--max-tokens", 16, "--temperature", 0,
                 "--stop", "\u00a7\u00a7", address=gen_daemon.address, check_rc=0)
    lines = [json.loads(x) for x in r.out.splitlines()]
    chunks, summary = lines[:-1], lines[-1]
    assert all(set(c) == {"text"} for c in chunks), r.describe()
    assert "".join(c["text"] for c in chunks) == want
    assert summary["done"] is True and summary["chunks"] == len(chunks)
    assert summary["finish_reason"] in ("length", "stop")
    u = summary["usage"]
    assert u["prompt_tokens"] > 0 and 1 <= u["completion_tokens"] <= 16
    assert re.fullmatch(r"rtxc-[0-9a-f]{16}", summary["request_id"]), summary

    # a seed makes sampling repeat
    a = h.rtxctl("generate", MODEL, PROMPT, "--temperature", 1.0, "--top-k", 40, "--top-p",
                 0.9, "--seed", 11, "--max-tokens", 12, address=gen_daemon.address, check_rc=0)
    b = h.rtxctl("generate", MODEL, PROMPT, "--temperature", 1.0, "--top-k", 40, "--top-p",
                 0.9, "--seed", 11, "--max-tokens", 12, address=gen_daemon.address, check_rc=0)
    assert a.out == b.out and a.out.strip()


def test_generate_errors(gen_daemon):
    r = h.rtxctl("generate", MODEL, address=gen_daemon.address, check_rc=2)
    assert "MODEL and PROMPT" in r.err
    r = h.rtxctl("generate", MODEL, PROMPT, "--temperature", "hot",
                 address=gen_daemon.address, check_rc=2)
    assert "--temperature" in r.err
    r = h.rtxctl("generate", "no_such_model", PROMPT, address=gen_daemon.address, check_rc=1)
    assert "no_such_model" in r.err
    r = h.rtxctl("generate", MODEL, " word" * 700, address=gen_daemon.address, check_rc=1)
    assert "context" in r.err, r.describe()
    r = h.rtxctl("generate", MODEL, PROMPT, "--lane", "no_such_lane",
                 address=gen_daemon.address, check_rc=1)
    assert "no_such_lane" in r.err, r.describe()
    gen_daemon.assert_serving()


def test_ctrl_c_cancels(gen_daemon):
    """SIGINT while text streams: rtxctl stops, exits 4 and the daemon serves on."""
    argv = [str(h.need_binary("rtxctl")), "--address", gen_daemon.address, "generate", MODEL,
            PROMPT, "--max-tokens", "480", "--temperature", "1", "--seed", "5"]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, env=h.clean_env())
    first = p.stdout.read(1)  # text is flowing
    assert first, p.stderr.read().decode()
    p.send_signal(signal.SIGINT)
    try:
        out, err = p.communicate(timeout=20 * h.SLOW)
    except subprocess.TimeoutExpired:
        p.kill()
        pytest.fail("rtxctl generate did not stop on SIGINT")
    if p.returncode == 0:
        pytest.fail("the generation ended before SIGINT could cancel it")
    assert p.returncode == 4, (p.returncode, err)
    assert b"cancelled" in err
    assert h.sanitizer_report(err.decode()) is None
    gen_daemon.assert_serving()


def test_librtx_generate(gen_daemon):
    exe = h.need_binary("rtx-client-check")
    p = subprocess.run([str(exe), "--generate", MODEL, gen_daemon.address],
                       capture_output=True, timeout=120 * h.SLOW, env=h.clean_env(),
                       stdin=subprocess.DEVNULL)
    out = p.stdout.decode(errors="replace") + p.stderr.decode(errors="replace")
    m = re.search(r"(\d+) passed, (\d+) failed", out)
    assert m and p.returncode == 0 and m.group(2) == "0" and int(m.group(1)) >= 15, (
        f"rtx-client-check --generate exit {p.returncode}:\n{h.tail(out)}"
        f"{gen_daemon.log_excerpt()}")
    # its greedy text is the one ModelInfer gives for the same prompt (client-check's)
    text = bytes.fromhex(re.search(r"^# text \(hex\): ([0-9a-f]*)$", out, re.M).group(1))
    assert text.decode() == unary_text(gen_daemon, {"temperature": 0, "max_tokens": 20},
                                       prompt="The daemon")
    assert h.sanitizer_report(out) is None, h.sanitizer_report(out)
