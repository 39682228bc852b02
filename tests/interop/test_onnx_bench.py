"""
bench/bench_onnx.py (make bench-onnx) as a smoke run: the CPU mode on the MLP with short
windows prints one judged row (rtxd against onnxruntime's CPU provider, the rtx ops that
ran, the ratio), and its verdict flips with the reference slowed on purpose
(RTX_BENCH_REF_DELAY_US, bench/bench_harness.py). Figures are not judged here.
"""

import os
import re
import subprocess
import sys

import rtxgraph as rg

BENCH = rg.REPO / "bench" / "bench_onnx.py"


def run_bench(args, env=None):
    e = dict(os.environ, RTX_BUILD=str(rg.build_dir()))
    e.pop("RTX_BENCH_REPORT", None)
    e.update(env or {})
    p = subprocess.run([sys.executable, str(BENCH), "--quick", "--case", "mlp", "--windows",
                        "1", "--threads", "1"] + args, capture_output=True, text=True,
                       timeout=600, env=e)
    return p


def mlp_row(p):
    rows = [line for line in p.stdout.splitlines() if line.startswith("| MLP")]
    assert len(rows) == 1, p.stdout + p.stderr
    return [c.strip() for c in rows[0].strip("|").split("|")]


def test_report_only_run_prints_the_row():
    p = run_bench(["--report"])
    assert p.returncode == 0, p.stdout + p.stderr
    assert "MLP: rtxrun's outputs match the reference's" in p.stdout, p.stdout
    case, shape, route, ours, ref, ratio, target, verdict = mlp_row(p)
    assert case == "MLP, batch 4" and shape == "x 4x1x16x16", (case, shape)
    assert "gemm" in route and "softmax" in route, route
    assert re.fullmatch(r"[\d.e+-]+ ms \(\+-\d+%\)", ours), ours
    assert ref.startswith("onnxruntime CPU (1 threads): "), ref
    assert re.fullmatch(r"\d+\.\d\dx", ratio), ratio
    assert target == ">= 1.0x" and verdict in ("met", "MISSED"), (target, verdict)
    assert "1 rows, 0 failed" in p.stdout and "report only" in p.stdout, p.stdout


def test_verdict_flips_with_a_slowed_reference():
    # 20 ms after every onnxruntime run: any working rtxd beats the MLP's reference then
    p = run_bench([], env={"RTX_BENCH_REF_DELAY_US": "20000"})
    assert p.returncode == 0, p.stdout + p.stderr
    assert mlp_row(p)[-1] == "met", p.stdout
    assert "0 targets missed (judged)" in p.stdout, p.stdout


def test_a_failing_case_fails_the_run():
    p = run_bench(["--report"], env={"RTX_BUILD": "/nonexistent-build"})
    assert p.returncode == 1, p.stdout + p.stderr
    assert "1 failed" in p.stdout and "rtxrun" in p.stdout, p.stdout
