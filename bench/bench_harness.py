"""bench_harness.py - the one way rtxd's benchmarks time two sides and judge the ratio.

Every comparison times rtxd and its reference the same way: warm-up, then N runs back to back
between two synchronizations (a window), several windows, the median window with its spread
(min and max). The two sides' windows alternate (rtxd, reference, reference, rtxd, ...), so
clock and thermal drift fall on both. rtxd's side is a C driver (bench/bench-driver.h) run as
a child process with --serve and steered one window at a time over its stdin; the reference
is a Python callable timed here.

A Report collects one row per comparison: the figures, the ratio and its target. A row with
a target is judged (met or MISSED); an error row is a failure. Report.exit_status() is 1
when a case failed to run, or when a judged target was missed unless the report is
report-only (--report on the command line or RTX_BENCH_REPORT=1), and 0 otherwise.

RTX_BENCH_REF_DELAY_US (microseconds) waits that long after every timed run of the
reference, inside its window: a deliberately slowed reference, as RTX_BENCH_DELAY_US is a
deliberately slowed rtxd in the driver. The harness's tests use both to check that a verdict
can flip (tests/interop/test_bench_harness.py).
"""
import json
import os
import statistics
import subprocess
import sys
import traceback
import time


class CaseError(RuntimeError):
    """A benchmark case that failed to prepare or to run."""


def _env_us(name):
    try:
        return max(0, int(os.environ.get(name, "0") or "0")) / 1e6
    except ValueError:
        sys.exit(f"{name}={os.environ[name]!r}: want whole microseconds")


def report_only(argv=None):
    """Whether the command line (--report) or RTX_BENCH_REPORT=1 asks for no verdicts."""
    argv = sys.argv[1:] if argv is None else argv
    return "--report" in argv or os.environ.get("RTX_BENCH_REPORT", "") not in ("", "0")


class Stats:
    """Per-run milliseconds of each window: the median and the spread around it."""

    def __init__(self, samples):
        self.samples = list(samples)
        self.median = statistics.median(self.samples)
        self.lo, self.hi = min(self.samples), max(self.samples)

    @property
    def spread(self):
        """(max - min) / median of the windows."""
        return (self.hi - self.lo) / self.median if self.median > 0 else 0.0

    def text(self, unit="ms"):
        return f"{self.median:.4g} {unit} (+-{100 * self.spread / 2:.0f}%)"


def reference_window(run, sync, reps, slowable=True):
    """Milliseconds per run of `run` over one window of reps runs between two sync() calls.
    slowable=False: RTX_BENCH_REF_DELAY_US does not apply (a bound such as the device's copy
    bandwidth, not a side of a comparison)."""
    delay = _env_us("RTX_BENCH_REF_DELAY_US") if slowable else 0
    sync()
    t0 = time.perf_counter()
    for _ in range(reps):
        run()
        if delay:
            time.sleep(delay)
    sync()
    return (time.perf_counter() - t0) * 1e3 / reps


def reps_for(window_ms_fn, target_ms, lo=3, hi=2000):
    """Runs per window so that a window lasts about target_ms, from one timed window of 1."""
    one = window_ms_fn(1)
    return int(min(hi, max(lo, round(target_ms / max(one, 1e-6)))))


def compare(ours, ref, reps, windows=7, warmup=1):
    """(Stats of ours, Stats of ref): `windows` windows of `reps` runs each, alternating.

    ours and ref take reps and return milliseconds per run of one window; warmup windows of
    each are run first and not counted."""
    for _ in range(warmup):
        ours(reps)
        ref(reps)
    a, b = [], []
    for w in range(windows):
        if w % 2 == 0:
            a.append(ours(reps))
            b.append(ref(reps))
        else:
            b.append(ref(reps))
            a.append(ours(reps))
    return Stats(a), Stats(b)


class Driver:
    """An rtxd benchmark driver (bench/bench-driver.h) run with --serve."""

    def __init__(self, cmd, env=None):
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd + ["--serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1, env=env)

    def _exited(self, during):
        """The CaseError for a driver that has exited: its last error line if it left one."""
        rc = self.proc.wait()
        msg = f"{self.cmd[0]} exited with {rc} {during}"
        for out in self.proc.stdout.read().splitlines():
            if out.startswith("{") and "error" in out:
                msg = f"{json.loads(out)['error']} ({msg})"
        return CaseError(msg)

    def _ask(self, line):
        if self.proc.poll() is not None:
            raise self._exited(f"before '{line}'")
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise self._exited(f"before '{line}'") from None
        out = self.proc.stdout.readline()
        if not out:
            raise self._exited(f"during '{line}'")
        r = json.loads(out)
        if "error" in r:
            raise CaseError(r["error"])
        return r

    def cases(self):
        n = self._ask("list")["cases"]
        return [json.loads(self.proc.stdout.readline()) for _ in range(n)]

    def prepare(self, i):
        return self._ask(f"prepare {i}")

    def window(self, i, reps):
        return self._ask(f"window {i} {reps}")["ms"]

    def release(self, i):
        self._ask(f"release {i}")

    def close(self):
        """The driver's exit status after quit."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        return self.proc.wait()


class Report:
    """Rows of one benchmark run, their verdicts and the exit status."""

    HEAD = ("case", "shape", "route", "rtxd", "reference", "ratio", "target", "")

    def __init__(self, judge=True):
        self.judge = judge
        self.rows = []
        self.failed = 0
        self.missed = 0

    def row(self, case, shape, route, ours, ref, ratio, target=None, ratio_text=None,
            target_text=None):
        """One comparison; ratio > 1 means rtxd is better. target None: reported only."""
        if target is None:
            verdict = ""
        elif ratio >= target:
            verdict = "met"
        else:
            verdict = "MISSED"
            self.missed += 1
        self.rows.append((case, shape, route or "-", ours, ref,
                          ratio_text or f"{ratio:.2f}x",
                          target_text or (f">= {target}x" if target is not None
                                          else "(reported)"), verdict))
        return verdict

    def error(self, case, shape, msg):
        self.failed += 1
        self.rows.append((case, shape, "-", f"error: {msg}", "", "", "", "FAILED"))

    def note(self, case, shape, ours, ref=""):
        self.rows.append((case, shape, "-", ours, ref, "", "", ""))

    def print_table(self, out=None):
        """The rows as a Markdown table on out (sys.stdout as it is when called)."""
        out = out or sys.stdout
        print("| " + " | ".join(self.HEAD) + " |", file=out)
        print("|" + " --- |" * len(self.HEAD), file=out)
        for r in self.rows:
            # a '|' inside a cell (an error message) would split it: escape it as Markdown does
            print("| " + " | ".join(str(v).replace("|", "\\|") for v in r) + " |", file=out)
        mode = "judged" if self.judge else "report only: targets not judged"
        print(f"{len(self.rows)} rows, {self.failed} failed, {self.missed} targets missed "
              f"({mode})", file=out, flush=True)

    def exit_status(self):
        return 1 if self.failed or (self.judge and self.missed) else 0

    def run_case(self, case, fn):
        """Runs fn(); a CaseError, or any other exception (its traceback printed), becomes a
        failed row of case, so that the other cases still run."""
        try:
            fn()
        except CaseError as e:
            self.error(case, "", str(e))
        except Exception as e:  # noqa: BLE001 - a failed case is a row, the rest go on
            traceback.print_exc()
            self.error(case, "", f"{type(e).__name__}: {e}")

    def finish(self):
        """Prints the table after a blank line; -> the exit status."""
        print()
        self.print_table()
        return self.exit_status()
