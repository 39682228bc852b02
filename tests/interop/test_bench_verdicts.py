"""
The benchmarks' verdicts can fail: rtx-bench-sched (goodput, on a simulated clock, so the
figures are the same on every machine) and rtx-bench-mem-pool (a small trace, with the delay
knobs RTX_BENCH_DELAY_US / RTX_BENCH_REF_DELAY_US set to 10 times an allocation's measured
cost, so the outcome does not depend on the machine's load) are run with one side
handicapped, and the verdict lines and exit status must follow: a slowed rtxd side turns met
into MISSED with a non-zero exit, a slowed baseline turns MISSED into met, --report (and
RTX_BENCH_REPORT=1) exits 0 whatever the verdict, and a case that cannot run exits non-zero
even then. Both binaries are part of `make all`; each run takes well under a second.
"""

import os
import re
import subprocess

import pytest

import rtxgraph

SCHED_BASELINES = ["FIFO", "FIFO dropping expired", "strict priority",
                   "strict priority dropping expired"]


def bench(name, *args, env=None):
    exe = rtxgraph.build_dir() / "bin" / name
    if not exe.is_file():
        pytest.fail(f"{exe} is missing: build it first (make all)", pytrace=False)
    e = {k: v for k, v in os.environ.items()
         if k not in ("RTX_BENCH_REPORT", "RTX_BENCH_DELAY_US", "RTX_BENCH_REF_DELAY_US")}
    e.update(env or {})
    return subprocess.run([str(exe), *args], capture_output=True, text=True, env=e, timeout=120)


def sched_verdicts(p):
    """{baseline: verdict word} from rtx-bench-sched's goodput verdict lines."""
    out = {}
    for m in re.finditer(r"^verdict: scheduler vs (.+?): goodput .*: (met|MISSED)(.*)$",
                         p.stdout, re.M):
        out[m.group(1)] = m.group(2) + m.group(3)
    assert sorted(out) == sorted(SCHED_BASELINES), p.stdout
    return out


def test_sched_goodput_met_against_every_baseline():
    p = bench("rtx-bench-sched", "goodput")
    assert p.returncode == 0, p.stdout + p.stderr
    assert set(sched_verdicts(p).values()) == {"met"}
    # the route: the scheduler's lanes and each baseline's figures beside the scheduler's
    assert "lane realtime" in p.stdout and "lane batch" in p.stdout
    for name in ["scheduler (rtxd)"] + SCHED_BASELINES:
        assert re.search(rf"^  {re.escape(name)} +\d", p.stdout, re.M), p.stdout


def test_sched_slowed_scheduler_misses():
    p = bench("rtx-bench-sched", "--handicap-sched", "2", "goodput")
    assert p.returncode == 1, p.stdout + p.stderr
    v = sched_verdicts(p)
    assert v["strict priority dropping expired"] == "MISSED"
    assert "HANDICAPS" in p.stdout


def test_sched_slowed_baseline_meets_a_target_missed_before():
    p = bench("rtx-bench-sched", "--target-goodput", "5", "goodput")
    assert p.returncode == 1, p.stdout + p.stderr
    assert sched_verdicts(p)["strict priority dropping expired"] == "MISSED"
    p = bench("rtx-bench-sched", "--target-goodput", "5", "--handicap-baseline", "3", "goodput")
    assert p.returncode == 0, p.stdout + p.stderr
    assert set(sched_verdicts(p).values()) == {"met"}


@pytest.mark.parametrize("how", ["option", "environment"])
def test_sched_report_exits_zero_on_a_miss(how):
    args, env = (["--report"], None) if how == "option" else ([], {"RTX_BENCH_REPORT": "1"})
    p = bench("rtx-bench-sched", *args, "--handicap-sched", "2", "goodput", env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    v = sched_verdicts(p)
    assert v["strict priority dropping expired"] == "MISSED (report only, not judged)"


def test_sched_case_that_cannot_run_fails_even_with_report():
    # callgrind needs valgrind on PATH: without it the case fails to run
    p = bench("rtx-bench-sched", "--report", "callgrind", "10", "20",
              env={"PATH": "/nonexistent"})
    assert p.returncode == 1, p.stdout + p.stderr
    assert "FAILED to run" in p.stdout


def test_sched_rejects_bad_arguments():
    assert bench("rtx-bench-sched", "--handicap-sched", "0", "goodput").returncode == 2
    assert bench("rtx-bench-sched", "--bogus").returncode == 2


def mem_pool(env, *args):
    return bench("rtx-bench-mem-pool", "--windows", "3", *args, "500", env=env)


def mem_pool_verdict(p):
    m = re.search(r"^verdict: pool / malloc throughput ([0-9.]+)x .*: (met|MISSED)(.*)$",
                  p.stdout, re.M)
    assert m, p.stdout + p.stderr
    return float(m.group(1)), m.group(2) + m.group(3)


@pytest.fixture(scope="module")
def delay_us():
    """A delay that dwarfs one allocation on either side on this build and machine (a
    sanitizer build's malloc takes tens of microseconds): 10 times the slower side's
    measured time per operation, at least 20 us."""
    p = mem_pool({})
    assert p.returncode in (0, 1), p.stdout + p.stderr
    ns = [float(x) for x in re.findall(r"^  (?:malloc|pool) *: median .*\((\d+) ns/op\)",
                                       p.stdout, re.M)]
    assert len(ns) == 2, p.stdout
    return max(20.0, 10 * max(ns) / 1000)


def test_mem_pool_slowed_pool_misses(delay_us):
    p = mem_pool({"RTX_BENCH_DELAY_US": str(delay_us)})
    assert p.returncode == 1, p.stdout + p.stderr
    ratio, word = mem_pool_verdict(p)
    assert word == "MISSED" and ratio < 0.5
    assert "rtx_mem_pool_alloc" in p.stdout and "malloc" in p.stdout  # the route


def test_mem_pool_slowed_reference_meets_a_target_missed_before(delay_us):
    p = mem_pool({"RTX_BENCH_DELAY_US": str(delay_us),
                  "RTX_BENCH_REF_DELAY_US": str(3 * delay_us)})
    assert p.returncode == 0, p.stdout + p.stderr
    ratio, word = mem_pool_verdict(p)
    assert word == "met" and ratio >= 0.5


@pytest.mark.parametrize("how", ["option", "environment"])
def test_mem_pool_report_exits_zero_on_a_miss(how, delay_us):
    args, env = (["--report"], {}) if how == "option" else ([], {"RTX_BENCH_REPORT": "1"})
    env["RTX_BENCH_DELAY_US"] = str(delay_us)
    p = mem_pool(env, *args)
    assert p.returncode == 0, p.stdout + p.stderr
    assert mem_pool_verdict(p)[1] == "MISSED (report only, not judged)"


def test_mem_pool_rejects_bad_knobs():
    assert mem_pool({"RTX_BENCH_DELAY_US": "-1"}).returncode == 2
    assert mem_pool({"RTX_BENCH_REF_DELAY_US": "fast"}).returncode == 2
