"""
test_bench_harness.py - the benchmark harness (bench/bench_harness.py and bench/bench-driver.c) as
bench/bench_cpu.py uses it with its driver build/bin/rtx-bench-cpu: a verdict flips when one
side is slowed on purpose (RTX_BENCH_DELAY_US for rtxd, RTX_BENCH_REF_DELAY_US for the
reference), a case that fails reaches the exit status, --report judges nothing but still fails
on a failure, a reference that computes something else fails its case, and the driver's line
protocol holds.

Timing tests run `bench_cpu.py --quick --case gemm --threads 1` (a 256^3 GEMM on one thread:
about 1 ms a run on either side) with delays of tens of milliseconds per run, so each verdict
has a margin of about 4x either way and holds on a loaded 2-core machine. One thread, because
a 2-thread OpenBLAS on an overloaded machine can take 100x its time (measured: NumPy's 256^3
sgemm at 61 ms a run under a load average of 7), which no fixed delay outweighs.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rtxgraph as rg

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import bench_harness as harness  # noqa: E402

BENCH_CPU = REPO / "bench" / "bench_cpu.py"
FAST_US, SLOW_US = 20_000, 80_000  # delays per run; the quick GEMM runs in ~0.3 ms
TIMEOUT_S = 300


def driver_path():
    return rg.build_dir() / "bin" / "rtx-bench-cpu"


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RTX_BENCH_")}
    env["RTX_BUILD"] = str(rg.build_dir())
    env.update({k: str(v) for k, v in extra.items()})
    return env


class BenchRun:
    def __init__(self, p):
        self.rc, self.out, self.err = p.returncode, p.stdout, p.stderr
        head = None
        self.rows = []
        for line in self.out.splitlines():
            if not line.startswith("| "):
                continue
            cells = [c.strip().replace("\\|", "|")
                     for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])]
            if head is None:
                head = cells
            elif not line.startswith("| ---"):
                self.rows.append(dict(zip(head, cells)))

    def verdicts(self):
        return [r[""] for r in self.rows]

    def describe(self):
        return f"exit {self.rc}\nstdout:\n{self.out}\nstderr:\n{self.err[-3000:]}"


def bench_cpu(*args, **env):
    p = subprocess.run([sys.executable, str(BENCH_CPU), "--quick", "--threads", "1", *args],
                       capture_output=True, text=True, env=clean_env(**env), timeout=TIMEOUT_S)
    return BenchRun(p)


# ------------------------------------------------------------------------------------------
# Verdicts and exit status through bench_cpu.py
# ------------------------------------------------------------------------------------------

def test_slowed_rtxd_turns_met_into_missed():
    met = bench_cpu("--case", "gemm", RTX_BENCH_REF_DELAY_US=FAST_US)
    assert met.rc == 0 and met.verdicts() == ["met"], met.describe()
    missed = bench_cpu("--case", "gemm", RTX_BENCH_REF_DELAY_US=FAST_US,
                       RTX_BENCH_DELAY_US=SLOW_US)
    assert missed.verdicts() == ["MISSED"], missed.describe()
    assert missed.rc == 1, missed.describe()
    assert "1 targets missed (judged)" in missed.out


def test_slowed_reference_turns_missed_into_met():
    missed = bench_cpu("--case", "gemm", RTX_BENCH_DELAY_US=FAST_US)
    assert missed.rc == 1 and missed.verdicts() == ["MISSED"], missed.describe()
    met = bench_cpu("--case", "gemm", RTX_BENCH_DELAY_US=FAST_US,
                    RTX_BENCH_REF_DELAY_US=SLOW_US)
    assert met.rc == 0 and met.verdicts() == ["met"], met.describe()


@pytest.mark.parametrize("how", ["--report", "RTX_BENCH_REPORT=1"])
def test_report_only_exits_0_on_a_miss(how):
    args, env = (["--report"], {}) if how == "--report" else ([], {"RTX_BENCH_REPORT": "1"})
    r = bench_cpu("--case", "gemm", *args, RTX_BENCH_DELAY_US=FAST_US, **env)
    assert r.rc == 0, r.describe()
    assert r.verdicts() == ["MISSED"], r.describe()  # still shown, not judged
    assert "report only" in r.out


@pytest.mark.parametrize("report", [False, True])
def test_failed_case_fails_the_exit_status(tmp_path, report):
    missing = tmp_path / "no-such-graph.rtxg"
    r = bench_cpu("--case", "block", "--block-graph", str(missing),
                  *(["--report"] if report else []))
    assert r.rc == 1, r.describe()
    assert r.verdicts() == ["FAILED"], r.describe()
    assert "no-such-graph.rtxg" in r.rows[0]["rtxd"], r.describe()
    assert "1 failed" in r.out


@pytest.mark.parametrize("dies", ["at start", "during prepare"])
def test_dead_driver_fails_the_run_even_when_report_only(tmp_path, dies):
    fake = tmp_path / "bin" / "rtx-bench-cpu"
    fake.parent.mkdir()
    answer = ("" if dies == "at start" else
              """read line; echo '{"cases": 1}'
echo '{"case": 0, "name": "gemm", "shape": "", "dtype": "f32"}'; read line
""")
    fake.write_text(f"#!/bin/sh\n[ \"$1\" = --blas ] && exit 0\n{answer}exit 3\n")
    fake.chmod(0o755)
    p = subprocess.run([sys.executable, str(BENCH_CPU), "--quick", "--case", "gemm",
                        "--report"], capture_output=True, text=True, timeout=TIMEOUT_S,
                       env={**clean_env(), "RTX_BUILD": str(tmp_path), "RTX_PY": str(rg.py_dir())})
    r = BenchRun(p)
    assert r.rc == 1, r.describe()
    assert "FAILED" in r.verdicts() and "exited with 3" in r.out, r.describe()


def test_quick_run_checks_both_references_and_reports():
    r = bench_cpu("--report")
    assert r.rc == 0, r.describe()
    assert [row["case"] for row in r.rows] == ["f32 GEMM", "transformer block, batch 1"]
    assert "FAILED" not in r.verdicts(), r.describe()
    assert "gemm: NumPy's result matches rtxd's" in r.out
    assert "transformer block: NumPy's result matches rtxd's" in r.out
    assert "(the same); NumPy's elementwise" in r.out, r.describe()  # equal thread counts
    gemm, block = r.rows
    assert gemm["route"].startswith("OpenBLAS cblas_sgemm"), gemm
    assert gemm["target"] == ">= 0.9x" and block["target"] == ">= 1.0x"


def test_wrong_reference_fails_its_case(monkeypatch, capsys):
    import bench_cpu
    right = bench_cpu.NumpyBlock.__call__
    monkeypatch.setattr(bench_cpu.NumpyBlock, "__call__", lambda self, x: right(self, x) + 1e-2)
    for k in [k for k in os.environ if k.startswith("RTX_BENCH_")]:
        monkeypatch.delenv(k)
    rc = bench_cpu.main(["--quick", "--threads", "1", "--case", "block", "--report"])
    out = capsys.readouterr().out
    assert rc == 1, out
    assert "NumPy's result differs from rtxd's" in out
    assert "FAILED" in out


# ------------------------------------------------------------------------------------------
# The driver: delays, stand-alone mode, the line protocol
# ------------------------------------------------------------------------------------------

def serve(lines, *args, env=None):
    """Feeds lines to rtx-bench-cpu --serve; returns (exit status, answers as dicts)."""
    p = subprocess.run([str(driver_path()), "--serve", "--gemm", "64", *args],
                       input="".join(line + "\n" for line in lines), capture_output=True,
                       text=True, env=env or clean_env(), timeout=TIMEOUT_S)
    return p.returncode, [json.loads(line) for line in p.stdout.splitlines()]


def test_driver_answers_malformed_commands_with_an_error_line():
    rc, out = serve(["bogus", "prepare", "prepare x", "prepare 7", "window 0", "window 0 0",
                     "window 0 -3", "x" * 300, "list"])
    assert rc == 1
    assert len(out) == 8 + 3, out  # one answer per line; list: a header and two cases
    for a in out[:8]:
        assert "error" in a and "bad command" in a["error"], a
    assert out[8] == {"cases": 2}


def test_driver_refuses_a_window_before_prepare_and_eof_exits_0():
    rc, out = serve(["window 0 2", "prepare 0", "window 0 2", "release 0", "window 0 2"])
    assert rc == 0, out
    assert out[0] == {"case": 0, "error": "window before prepare"}
    assert out[1]["name"] == "gemm" and out[1]["shape"] == "64x64x64", out[1]
    assert out[1]["route"].startswith("OpenBLAS cblas_sgemm"), out[1]
    assert out[2]["ms"] > 0 and out[2]["reps"] == 2
    assert out[3] == {"case": 0, "released": True}
    assert out[4] == {"case": 0, "error": "window before prepare"}


def test_driver_quit_exits_0_and_a_failing_prepare_is_an_error_line(tmp_path):
    bad = tmp_path / "garbage.rtxg"
    bad.write_bytes(b"\xff\x00 not a graph")
    rc, out = serve(["prepare 1", "quit", "list"], "--block", str(bad))
    assert rc == 0
    assert len(out) == 1 and out[0]["case"] == 1 and "error" in out[0], out


def test_driver_delay_slows_every_run():
    env = clean_env(RTX_BENCH_DELAY_US=FAST_US)
    rc, out = serve(["prepare 0", "window 0 3"], env=env)
    assert rc == 0
    assert out[1]["ms"] >= FAST_US / 1000, out


def test_driver_alone_times_every_case_and_fails_on_a_failed_case(tmp_path):
    p = subprocess.run([str(driver_path()), "--quick", "--gemm", "64", "--windows", "2",
                        "--block", str(tmp_path / "missing.rtxg")], capture_output=True,
                       text=True, env=clean_env(), timeout=TIMEOUT_S)
    out = [json.loads(line) for line in p.stdout.splitlines()]
    assert p.returncode == 1, p.stderr
    assert out[0]["name"] == "gemm" and out[0]["windows"] == 2, out
    assert out[0]["ms_min"] <= out[0]["ms"] <= out[0]["ms_max"], out
    assert out[1]["case"] == 1 and "missing.rtxg" in out[1]["error"], out


def test_harness_driver_raises_case_errors_and_closes_with_0(tmp_path):
    d = harness.Driver([str(driver_path()), "--gemm", "64", "--block",
                        str(tmp_path / "missing.rtxg"), "--data", str(tmp_path)],
                       env=clean_env())
    try:
        assert [c["name"] for c in d.cases()] == ["gemm", "transformer_block"]
        with pytest.raises(harness.CaseError, match="window before prepare"):
            d.window(0, 2)
        with pytest.raises(harness.CaseError, match="missing.rtxg"):
            d.prepare(1)
        info = d.prepare(0)
        assert info["flops"] == 2 * 64 ** 3
        # --data: the inputs and the outputs of the warm-up runs, for the reference's check
        a, b, c = (np.load(tmp_path / f"gemm-{v}.npy") for v in "abc")
        assert np.allclose(a @ b, c, rtol=1e-5, atol=1e-5)
        assert d.window(0, 3) > 0
    finally:
        assert d.close() == 0


# ------------------------------------------------------------------------------------------
# bench_harness.py on its own
# ------------------------------------------------------------------------------------------

def test_reference_window_honours_its_delay(monkeypatch):
    monkeypatch.setenv("RTX_BENCH_REF_DELAY_US", str(FAST_US))
    assert harness.reference_window(lambda: None, lambda: None, 3) >= FAST_US / 1000


def test_compare_alternates_and_takes_the_median():
    calls = []

    def side(name, values):
        it = iter(values)

        def f(reps):
            calls.append(name)
            return next(it)
        return f

    a, b = harness.compare(side("a", [9, 1, 2, 3]), side("b", [9, 5, 6, 40]), reps=4,
                           windows=3)
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b"]
    assert (a.median, a.lo, a.hi) == (2, 1, 3)
    assert (b.median, b.lo, b.hi) == (6, 5, 40)


@pytest.mark.parametrize("judge,failed,missed,status", [
    (True, False, False, 0), (True, False, True, 1), (True, True, False, 1),
    (False, False, True, 0), (False, True, True, 1)])
def test_report_exit_status(judge, failed, missed, status):
    r = harness.Report(judge=judge)
    r.row("a", "s", "route", "1 ms", "2 ms", 2.0, target=1.0)
    if missed:
        assert r.row("b", "s", "route", "2 ms", "1 ms", 0.5, target=1.0) == "MISSED"
    if failed:
        r.error("c", "s", "it broke")
    assert r.exit_status() == status


def test_report_table_keeps_a_pipe_inside_its_cell():
    import io
    r = harness.Report()
    r.error("case", "shape", "max |diff| too large")
    buf = io.StringIO()
    r.print_table(buf)
    line = buf.getvalue().splitlines()[2]
    assert len(re.split(r"(?<!\\)\|", line.strip()[1:-1])) == len(harness.Report.HEAD), line
