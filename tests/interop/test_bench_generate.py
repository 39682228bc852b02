"""
test_bench_generate.py - the generation benchmark's harness (bench/bench_generate.py,
bench/gen_client.py, bench/gen_static.py) without a GPU:

  * its pure parts on synthetic data: the SSE parser and the per-request figures, percentiles
    (against NumPy), Poisson arrivals, the statistics of a run, the length mix, the verdicts
    (a target met, missed, a failure; report-only), static batching's derived figures;
  * the open-loop client against tests/interop/fake_gen_server.py, a stand-in with known
    timings: requests leave at their due times, results come back in order, the lane goes as
    the x-rtx-lane header, a request past its deadline is closed and the server sees it go;
  * the whole script (--smoke) against the stand-in, as if it were rtxd (a build folder whose
    bin/rtxd starts it): verdicts flip with the stand-in's behaviour (prefix cache on or off,
    realtime slowed under a flood or not), --report judges nothing, --out writes the JSON;
  * the script --smoke against the real rtxd serving the example model tiny-chat (the
    repository `make run` serves), reporting only: every scenario runs and nothing fails.
"""

import json
import math
import os
import random
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import rtxgraph as rg

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import bench_generate as BG  # noqa: E402
import bench_harness as H  # noqa: E402
import gen_client as C  # noqa: E402
import gen_static as S  # noqa: E402
from bench_serving import free_port  # noqa: E402

FAKE = Path(__file__).resolve().parent / "fake_gen_server.py"
SCRIPT = REPO / "bench" / "bench_generate.py"


# ------------------------------------------------------------------------------------------
# SSE and per-request figures
# ------------------------------------------------------------------------------------------

def chunk(text="x", finish=None):
    return "data: " + json.dumps({"choices": [{"index": 0, "text": text,
                                               "finish_reason": finish}]})


def usage(prompt, completion, cached=0):
    return "data: " + json.dumps({"choices": [], "usage": {
        "prompt_tokens": prompt, "completion_tokens": completion,
        "prompt_tokens_details": {"cached_tokens": cached}}})


def fold(lines, sent=10.0, times=None):
    """read_events over lines, the clock giving `times` one per data line."""
    clock = iter(times or [sent + 0.1 * (i + 1) for i in range(len(lines))])
    res = C.Result(sent=sent, status=200)
    C.read_events([ln.encode() for ln in lines], res, clock=lambda: next(clock))
    return res


def test_sse_data_lines():
    assert C.sse_data(b'data: {"a": 1}\n') == {"a": 1}
    assert C.sse_data("data:[DONE]\r\n") == "[DONE]"
    assert C.sse_data(": keep-alive\n") is None
    assert C.sse_data("\n") is None
    assert C.sse_data("event: x\n") is None
    with pytest.raises(ValueError):
        C.sse_data("data: {not json\n")


def test_read_events_times_tokens_and_usage():
    res = fold([chunk("a"), "", chunk(""), chunk("c", "length"), usage(7, 3, 4), "data: [DONE]"],
               times=[10.05, 10.07, 10.10, 10.11, 99.0])
    assert res.completion_tokens == 3 and res.prompt_tokens == 7 and res.cached_tokens == 4
    assert res.token_times == [10.05, 10.07, 10.10]
    assert res.ttft == pytest.approx(0.05)
    assert res.itl == pytest.approx([0.02, 0.03])
    assert res.tpot == pytest.approx(0.05 / 2)
    assert res.ok and not res.error


def test_read_events_drops_a_finish_only_chunk():
    """A last chunk with no text that only says finish_reason carries no token when the
    chunks outnumber usage's tokens; with as many chunks as tokens it is kept."""
    res = fold([chunk("a"), chunk("b"), chunk("", "length"), usage(5, 2), "data: [DONE]"])
    assert len(res.token_times) == 2
    res = fold([chunk("a"), chunk(""), chunk("", "length"), usage(5, 3), "data: [DONE]"])
    assert len(res.token_times) == 3


def test_read_events_without_usage_counts_chunks_and_stops_at_errors():
    res = fold([chunk("a"), chunk("b"), "data: [DONE]", chunk("late")])
    assert res.completion_tokens == 2 and len(res.token_times) == 2
    res = fold([chunk("a"), 'data: {"error": {"message": "engine stopped"}}', chunk("b")])
    assert res.error == "engine stopped" and not res.ok
    res = fold([chunk("a"), "data: {oops"])
    assert "not JSON" in res.error


# ------------------------------------------------------------------------------------------
# statistics
# ------------------------------------------------------------------------------------------

def test_percentile_matches_numpy():
    rng = np.random.default_rng(3)
    for n in (1, 2, 7, 100, 1001):
        v = rng.exponential(size=n).tolist()
        for q in (0, 1, 50, 90, 99, 100):
            assert C.percentile(v, q) == pytest.approx(np.percentile(v, q), rel=1e-12)
    assert C.percentile([], 50) is None
    assert C.percentile([1.0, 2.0, math.inf], 99) == math.inf
    assert C.percentile([1.0, 2.0, math.inf], 50) == 2.0
    assert C.percentile([math.inf] * 3, 50) == math.inf


def test_poisson_times_rate_and_gaps():
    t = C.poisson_times(200.0, 50.0, random.Random(5))
    assert t == C.poisson_times(200.0, 50.0, random.Random(5))
    assert all(0 <= a < b < 50.0 for a, b in zip(t, t[1:]))
    assert len(t) == pytest.approx(200 * 50, rel=0.05)
    gaps = np.diff(t)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)  # exponential: CV 1
    assert C.poisson_times(0, 10, random.Random(1)) == []


def result(ttft, n, itl=0.01, status=200, sent=0.0, tag="", error=""):
    r = C.Result(tag=tag, sent=sent, due=sent, status=status, error=error)
    if status == 200 and not error:
        r.token_times = [sent + ttft + i * itl for i in range(n)]
        r.completion_tokens = n
        r.ttft = ttft
        r.end = r.token_times[-1] + 0.001
    else:
        r.end = sent + 0.001
    return r


def test_summarize_known_figures():
    rs = [result(0.02 * (i + 1), 11, sent=i * 0.1) for i in range(10)]
    rs += [result(0, 0, status=429, sent=0.5), result(0, 0, status=500, error="boom", sent=0.6),
           result(0, 0, status=503, sent=0.3, error="the request's deadline passed before it "
                  "was scheduled (lane 'realtime')")]
    s = C.summarize(rs, {"fast": 0.05, "slow": 1.0})
    assert (s["requests"], s["completed"], s["refused"], s["expired"], s["failed"]) == \
        (13, 10, 1, 1, 1)
    assert s["errors"] == ["boom"]
    span = max(r.end for r in rs)
    assert s["span_s"] == pytest.approx(span)
    assert s["output_tokens"] == 110
    assert s["output_tokens_per_s"] == pytest.approx(110 / span)
    assert s["ttft_p50_ms"] == pytest.approx(np.percentile([20 * (i + 1) for i in range(10)], 50))
    assert s["itl_p99_ms"] == pytest.approx(10.0)
    assert s["tpot_p50_ms"] == pytest.approx(10.0)
    assert s["goodput"]["fast"]["requests_per_s"] == pytest.approx(2 / span)
    assert s["goodput"]["fast"]["output_tokens_per_s"] == pytest.approx(22 / span)
    assert s["goodput"]["slow"]["share"] == pytest.approx(10 / 13)


def test_p99_with_refusals_counts_a_refusal_as_infinite():
    rs = [result(0.01, 5) for _ in range(199)]
    assert BG.p99_with_refusals(rs, "ttft") == pytest.approx(10.0)
    assert BG.p99_with_refusals(rs + [result(0, 0, status=429)], "ttft") == pytest.approx(10.0)
    assert BG.p99_with_refusals(rs[:99] + [result(0, 0, status=429)], "ttft") == math.inf
    assert BG.p99_with_refusals(rs + [result(0, 0, status=500, error="x")] * 3,
                                "ttft") == math.inf
    assert BG.p99_with_refusals(rs[:10], "itl") == pytest.approx(10.0)
    assert BG.p99_with_refusals(rs[:10] + [result(0, 0, status=429)], "itl") == math.inf


def test_mixed_lengths_seeded_in_range_log_uniform():
    m = BG.mixed_lengths(random.Random(1), 4000, (16, 2048), (16, 256))
    assert m == BG.mixed_lengths(random.Random(1), 4000, (16, 2048), (16, 256))
    p, o = np.array(m).T
    assert p.min() >= 16 and p.max() <= 2048 and o.min() >= 16 and o.max() <= 256
    assert np.median(p) == pytest.approx(math.sqrt(16 * 2048), rel=0.1)
    assert np.median(o) == pytest.approx(136, rel=0.1)


def test_requests_and_vocabulary(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 40}))
    (tmp_path / "tokenizer.json").write_text(json.dumps({
        "model": {"vocab": {f"t{i}": i for i in range(2, 30)}},
        "added_tokens": [{"id": 0}, {"id": 1}, {"id": 30}]}))
    ids = BG.vocab_of(tmp_path)
    assert ids == list(range(2, 30))  # 31 ids known, special ones out
    reqs = BG.requests_at([0.0, 0.5], [(5, 3), (2, 9)], ids, random.Random(1), "m", "realtime",
                          "t", deadline=4.0)
    assert [len(r.body["prompt"]) for r in reqs] == [5, 2]
    assert [r.body["max_tokens"] for r in reqs] == [3, 9]
    b = reqs[0].body
    assert b["stream"] and b["ignore_eos"] and b["stream_options"] == {"include_usage": True}
    assert b["temperature"] == 0 and b["model"] == "m" and set(b["prompt"]) <= set(ids)
    assert reqs[1].due == 0.5 and reqs[1].lane == "realtime" and reqs[1].deadline == 4.0


# ------------------------------------------------------------------------------------------
# verdicts
# ------------------------------------------------------------------------------------------

def rung(rate, tok_s, ttft_p99, failed=0):
    return {"rate": rate, "output_tokens_per_s": tok_s, "ttft_p99_ms": ttft_p99,
            "failed": failed}


def figures(speedup=12.0, ttft_ok=True, flood=(10.0, 14.0, 5.0, 7.0), batch=100.0,
            prefix=(5.0, 20.0), failures=()):
    ref = {"output_tokens_per_s": 1000.0, "batch": 64, "ttft_p99_ms": 4000.0}
    return {
        "shapes": {"uniform": "512 in / 128 out", "mixed": "mix"},
        "ladder_uniform": [rung(1, 500, 50), rung(2, 1000 * speedup,
                                                  3000 if ttft_ok else 9000)],
        "ladder_mixed": [rung(1, 800, 40)],
        "reference": {"uniform": ref, "mixed": None, "why": "test"},
        "flood": {"shape": "s", "batch_output_tokens_per_s": batch,
                  "unloaded": {"ttft_p99_ms": flood[0], "itl_p99_ms": flood[2]},
                  "flooded": {"ttft_p99_ms": flood[1], "itl_p99_ms": flood[3]}},
        "prefix": {"shape": "p", "with_ttft_p50_ms": prefix[0],
                   "without_ttft_p50_ms": prefix[1], "cached_tokens_mean": 992},
        "failures": list(failures),
    }


def verdicts(res, judge=True):
    rep = H.Report(judge=judge)
    BG.judge(rep, res)
    return {r[0]: r[-1] for r in rep.rows}, rep


def test_verdicts_met():
    v, rep = verdicts(figures())
    assert v["throughput vs static batching (uniform)"] == "met"
    assert v["throughput vs static batching (mixed)"] == ""  # no reference: a note
    assert v["flood: realtime p99 TTFT"] == "met" and v["flood: realtime p99 ITL"] == "met"
    assert v["flood: batch lane progressing"] == "met"
    assert v["prefix caching: TTFT p50"] == "met"
    assert rep.exit_status() == 0


@pytest.mark.parametrize("change, case", [
    ({"speedup": 9.0}, "throughput vs static batching (uniform)"),
    ({"ttft_ok": False}, "throughput vs static batching (uniform)"),
    ({"flood": (10.0, 16.0, 5.0, 7.0)}, "flood: realtime p99 TTFT"),
    ({"flood": (10.0, 14.0, 5.0, math.inf)}, "flood: realtime p99 ITL"),
    ({"batch": 0.0}, "flood: batch lane progressing"),
    ({"prefix": (10.0, 20.0)}, "prefix caching: TTFT p50"),
])
def test_verdicts_missed(change, case):
    v, rep = verdicts(figures(**change))
    assert v[case] == "MISSED", v
    assert sum(x == "MISSED" for x in v.values()) == 1
    assert rep.exit_status() == 1
    _, rep = verdicts(figures(**change), judge=False)
    assert rep.exit_status() == 0


def test_throughput_compares_only_rates_within_the_reference_ttft():
    """The fast rate's p99 TTFT is past transformers': the slower rate is compared."""
    res = figures(ttft_ok=False)
    res["ladder_uniform"][0]["output_tokens_per_s"] = 10500
    v, _ = verdicts(res)
    assert v["throughput vs static batching (uniform)"] == "met"
    assert BG.best_rate(res["ladder_uniform"], 4000)["rate"] == 1
    assert BG.best_rate(res["ladder_uniform"], 10) is None
    assert BG.best_rate([rung(1, 5, 1, failed=1)], 10) is None


def test_a_failure_fails_even_report_only():
    v, rep = verdicts(figures(failures=[("uniform at 3 req/s", "2 requests failed")]),
                      judge=False)
    assert v["uniform at 3 req/s"] == "FAILED" and rep.exit_status() == 1


def test_saturation_and_static_batching_figures():
    assert BG.saturated([rung(1, 100, 1), rung(2, 103, 1)])
    assert not BG.saturated([rung(1, 100, 1), rung(2, 150, 1)])
    p = S.derive([(0.2, 2.0, 128), (0.3, 2.2, 128), (0.25, 2.1, 128)], 1)
    assert p["prefill_ms"] == pytest.approx(250) and p["batch_ms"] == pytest.approx(2100)
    assert p["output_tokens_per_s"] == pytest.approx(384 / 6.3)
    assert p["ttft_p99_ms"] == pytest.approx((0.99 * 2.1 + 0.25) * 1e3)
    assert S.best([p, dict(p, output_tokens_per_s=1.0)]) is p and S.best([]) is None


# ------------------------------------------------------------------------------------------
# the client against the stand-in
# ------------------------------------------------------------------------------------------

def start_fake(tmp_path, **env):
    port = free_port()
    p = subprocess.Popen([sys.executable, str(FAKE), f"--http.listen=127.0.0.1:{port}",
                          "--models.startup=tiny-chat"],
                         env={**os.environ, **{k: str(v) for k, v in env.items()}})
    end = time.monotonic() + 30
    while time.monotonic() < end:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1)
            return p, port
        except OSError:
            time.sleep(0.05)
    p.kill()
    raise AssertionError("the stand-in did not start")


def running(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    return sum(float(ln.split()[-1]) for ln in text.splitlines() if ln.startswith("rtx_gen_"))


def test_client_open_loop_against_the_stand_in(tmp_path):
    p, port = start_fake(tmp_path, FAKE_GEN_TTFT_MS=20, FAKE_GEN_ITL_MS=5)
    try:
        rng = random.Random(1)
        due = [0.0, 0.05, 0.1, 0.3, 0.31, 0.6]
        reqs = [C.Request(d, BG.body("tiny-chat", rng.choices(range(3, 500), k=20), 4 + i),
                          lane="realtime" if i % 2 else "", tag=str(i))
                for i, d in enumerate(due)]
        reqs.append(C.Request(0.2, BG.body("tiny-chat", [5] * 20, 10000), deadline=0.6,
                              tag="long"))
        out, start = C.drive("127.0.0.1", port, reqs[::-1], procs=3)
        out = out[::-1]
        assert [r.tag for r in out] == [str(i) for i in range(6)] + ["long"]
        for i, r in enumerate(out[:6]):
            assert r.ok and r.completion_tokens == 4 + i and len(r.token_times) == 4 + i
            assert r.lane == ("realtime" if i % 2 else "")
            assert 0 <= r.sent - r.due < 0.5, "sent early or late"  # loose: loaded CI
            assert r.due == pytest.approx(start + due[i])
            assert 0.015 < r.ttft < 1.0
            assert len(r.itl) == 3 + i and 0.003 < np.median(r.itl) < 0.2, r.itl
        long = out[-1]
        assert long.aborted and not long.error and 10 < long.completion_tokens < 10000
        assert 0.55 < long.end - start < 1.5
        end = time.monotonic() + 5
        while running(port) and time.monotonic() < end:
            time.sleep(0.05)
        assert running(port) == 0, "the stand-in still streams to the closed request"
        bad = C.Result()
        C.send("127.0.0.1", port, C.Request(0, {"prompt": "text"}), bad, time.monotonic())
        assert bad.status == 400 and bad.error == "prompt must be token ids" and not bad.ok
    finally:
        p.kill()
        p.wait()


# ------------------------------------------------------------------------------------------
# the whole script
# ------------------------------------------------------------------------------------------

def fake_build(tmp_path):
    """A build folder whose bin/rtxd is the stand-in and whose example repository has a
    tiny-chat with a tokenizer (the script reads its vocabulary)."""
    b = tmp_path / "build"
    (b / "bin").mkdir(parents=True)
    rtxd = b / "bin" / "rtxd"
    rtxd.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE} \"$@\"\n")
    rtxd.chmod(0o755)
    m = b / "examples" / "models" / "tiny-chat" / "1"
    m.mkdir(parents=True)
    (m / "config.json").write_text(json.dumps({"vocab_size": 512}))
    (m / "tokenizer.json").write_text(json.dumps({
        "model": {"vocab": {f"t{i}": i for i in range(3, 512)}},
        "added_tokens": [{"id": i} for i in range(3)]}))
    return b


def run_script(build, *args, **env):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("RTX_BENCH_", "FAKE_"))}
    p = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--reference", "none", *args],
                       capture_output=True, text=True, timeout=600,
                       env={**clean, "RTX_BUILD": str(build),
                            **{k: str(v) for k, v in env.items()}})
    rows = {}
    for line in p.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if (line.startswith("| ") and len(cells) == 8 and cells[0] != "case"
                and not line.startswith("| ---")):
            rows[cells[0]] = cells[-1]
    return SimpleNamespace(rc=p.returncode, rows=rows, text=f"exit {p.returncode}\n"
                           f"{p.stdout}\n{p.stderr[-3000:]}")


def test_script_prefix_verdict_flips(tmp_path):
    b = fake_build(tmp_path)
    out = tmp_path / "r.json"
    r = run_script(b, "--only", "prefix", "--out", out, FAKE_GEN_PREFILL_MS_PER_1K=3000)
    assert r.rc == 0 and r.rows == {"prefix caching: TTFT p50": "met"}, r.text
    res = json.loads(out.read_text())
    assert res["prefix"]["cached_tokens_mean"] == 96 and res["exit_status"] == 0
    assert res["rows"][0]["verdict"] == "met" and res["smoke"] is True
    r = run_script(b, "--only", "prefix", FAKE_GEN_PREFILL_MS_PER_1K=3000, FAKE_GEN_NO_PREFIX=1)
    assert r.rc == 1 and r.rows == {"prefix caching: TTFT p50": "MISSED"}, r.text
    r = run_script(b, "--only", "prefix", "--report", FAKE_GEN_NO_PREFIX=1)
    assert r.rc == 0 and r.rows == {"prefix caching: TTFT p50": "MISSED"}, r.text


def test_script_flood_verdict_flips(tmp_path):
    b = fake_build(tmp_path)
    r = run_script(b, "--only", "flood", "--duration", "1.5", FAKE_GEN_TTFT_MS=50,
                   FAKE_GEN_ITL_MS=40, FAKE_GEN_REALTIME_SLOW=10)
    assert r.rc == 1, r.text
    assert r.rows["flood: realtime p99 TTFT"] == "MISSED", r.text
    assert r.rows["flood: realtime p99 ITL"] == "MISSED", r.text
    assert r.rows["flood: batch lane progressing"] == "met", r.text


def test_script_every_scenario_report_only(tmp_path):
    b = fake_build(tmp_path)
    out = tmp_path / "r.json"
    r = run_script(b, "--report", "--out", out)
    assert r.rc == 0, r.text
    res = json.loads(out.read_text())
    assert not res["failures"]
    for key in ("ladder_uniform", "ladder_mixed", "flood", "prefix", "probe_uniform"):
        assert res[key], key
    assert [s["fraction"] for s in res["ladder_uniform"]] == list(BG.SMOKE["rates"])
    assert all(s["completed"] == s["requests"] > 0 for s in res["ladder_uniform"])
    assert res["reference"] == {"why": "--reference none"}


def test_script_against_rtxd_tiny_chat(tmp_path):
    """The real thing on the CPU: rtxd serving the example repository's tiny-chat."""
    build = rg.build_dir()
    model = build / "examples" / "models" / "tiny-chat"
    if not (model / "config.json").exists():
        pytest.fail(f"{model} is missing: it needs the example generative model "
                    f"(make examples)", pytrace=False)
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--report", "--reference",
                        "none", "--out", str(out)], capture_output=True, text=True,
                       timeout=900, env={**os.environ, "RTX_BUILD": str(build)})
    assert p.returncode == 0, f"{p.stdout}\n{p.stderr[-3000:]}"
    res = json.loads(out.read_text())
    assert not res["failures"], res["failures"]
    for s in res["ladder_uniform"] + res["ladder_mixed"]:
        assert s["completed"] + s["refused"] + s["expired"] == s["requests"]
        assert s["completed"] > 0
        assert s["output_tokens"] >= s["completed"]
    assert res["prefix"]["cached_tokens_mean"] >= BG.SMOKE["prefix"] // 16 * 16 - 16
