#!/usr/bin/env python3
"""
bench_cpu.py (make bench) - rtxd on the CPU against NumPy, both sides timed the same way.

rtxd's side is build/bin/rtx-bench-cpu (bench/bench-cpu.c): graphs through the runtime's plan
and executor on the CPU backend, exactly what rtxrun runs, timed in-process by the benchmark
driver (bench/bench-driver.h). NumPy's side is timed in this process. bench/bench_harness.py steers
both: windows of N runs back to back, alternating between the sides, the median window with
its spread, a ratio (> 1: rtxd is faster) and a verdict against the target.

  f32 GEMM N^3 (1024; --quick 256): a one-node matmul graph against np.matmul(a, b, out=c).
      Target >= 0.9x (both are OpenBLAS sgemm; rtxd's is Debian's build, NumPy's its wheel's).
  transformer block, batch 1 (the example graph, examples/README.md): against the same block
      written in plain NumPy float32 (NumpyBlock below) with the graph's own weights.
      Target >= 1.0x: a compiled runtime with a fused attention kernel should not be slower
      than NumPy calls on the same BLAS with the same threads.

Both references are checked against rtxd's outputs for the same inputs (the driver writes
them with --data) before anything is timed: a reference that computes something else is no
reference, and the case fails. Both sides get the same thread count: --threads N (default:
one per online CPU, which is what rtxrun uses) for rtxd's CPU backend and its OpenBLAS, and
threadpoolctl's limit for NumPy's BLAS; NumPy's elementwise operations run on one thread.

Options: --quick (small GEMM, short windows: a few seconds), --report (or RTX_BENCH_REPORT=1:
report without judging), --threads N, --case gemm|block (repeatable; default both),
--block-graph PATH (default $RTX_BUILD/examples/transformer_block.rtxg), --windows N.
Exit status (harness.Report): 1 when a case failed, or a target was missed unless --report.
RTX_BENCH_DELAY_US / RTX_BENCH_REF_DELAY_US slow one side on purpose (the harness's tests).
Needs RTX_BUILD (the Makefile sets it) and the venv's Python.
"""

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "interop"))
sys.path.insert(0, str(REPO / "bench"))
import bench_harness as harness  # noqa: E402
import rtxgraph as rg  # noqa: E402

try:
    from threadpoolctl import threadpool_info, threadpool_limits
except ImportError:  # pragma: no cover - tests/requirements.txt installs it
    threadpool_info = threadpool_limits = None

GEMM_TARGET = 0.9
BLOCK_TARGET = 1.0
CHECK_RTOL = 1e-4  # max |reference - rtxd| <= CHECK_RTOL * max(1, max |reference|)


# ------------------------------------------------------------------------------------------
# The NumPy transformer block
# ------------------------------------------------------------------------------------------

def layer_norm(x, scale, bias, out, eps):
    np.subtract(x, x.mean(-1, keepdims=True), out=out)
    out /= np.sqrt(np.mean(out * out, -1, keepdims=True) + eps)
    out *= scale
    out += bias
    return out


class NumpyBlock:
    """The example transformer block (examples/README.md) in NumPy float32, written as a
    NumPy user would: one matmul per projection into buffers made once (out=), the bias and
    residual adds, softmax and GELU in place, the causal mask as an additive -inf triangle."""

    def __init__(self, graph, x_shape):
        w = {t.name: rg.tensor_from_proto(t).a for t in graph.initializers}
        nodes = {n.name: n for n in graph.nodes}
        heads = rg.decode_attrs(nodes["q_split"])["shape"][2]
        self.eps = rg.decode_attrs(nodes["ln1"]).get("epsilon", 1e-5)
        B, L, D = x_shape
        FF = w["w_up"].shape[1]
        for k, v in w.items():
            if v.dtype != np.float32:
                raise ValueError(f"initializer {k} is {v.dtype}, want float32")
        self.w, self.H, self.Dh = w, heads, D // heads
        f = np.float32
        self.h = np.empty((B, L, D), f)
        self.qkv = [np.empty((B, L, D), f) for _ in range(3)]
        self.s = np.empty((B, heads, L, L), f)
        self.a = np.empty((B, heads, L, D // heads), f)
        self.res1 = np.empty((B, L, D), f)
        self.u = np.empty((B, L, FF), f)
        self.t = np.empty((B, L, FF), f)
        self.y = np.empty((B, L, D), f)
        self.mask = np.triu(np.full((L, L), -np.inf, f), 1)
        self.scale = f(1.0 / math.sqrt(D // heads))

    def __call__(self, x):
        w, H, Dh = self.w, self.H, self.Dh
        B, L, D = x.shape
        h = layer_norm(x, w["ln1_scale"], w["ln1_bias"], self.h, self.eps)
        heads = []
        for n, buf in zip("qkv", self.qkv):
            np.matmul(h, w["w" + n], out=buf)
            buf += w["b" + n]
            heads.append(buf.reshape(B, L, H, Dh).transpose(0, 2, 1, 3))
        q, k, v = heads
        s = np.matmul(q, k.transpose(0, 1, 3, 2), out=self.s)
        s *= self.scale
        s += self.mask
        s -= s.max(-1, keepdims=True)
        np.exp(s, out=s)
        s /= s.sum(-1, keepdims=True)
        a = np.matmul(s, v, out=self.a).transpose(0, 2, 1, 3).reshape(B, L, D)
        res1 = np.matmul(a, w["wo"], out=self.res1)
        res1 += w["bo"]
        res1 += x
        h2 = layer_norm(res1, w["ln2_scale"], w["ln2_bias"], self.h, self.eps)
        u = np.matmul(h2, w["w_up"], out=self.u)
        u += w["b_up"]
        t = np.multiply(u, u, out=self.t)  # gelu_tanh(u) = 0.5 u (1 + tanh(c (u + 0.044715 u^3)))
        t *= u
        t *= 0.044715
        t += u
        t *= math.sqrt(2.0 / math.pi)
        np.tanh(t, out=t)
        t += 1.0
        t *= 0.5
        u *= t
        y = np.matmul(u, w["w_down"], out=self.y)
        y += w["b_down"]
        y += res1
        return y


# ------------------------------------------------------------------------------------------
# Cases
# ------------------------------------------------------------------------------------------

def check_same(what, ref, got):
    """The reference's result against rtxd's, within f32 tolerance; returns the max error."""
    if ref.shape != got.shape:
        raise harness.CaseError(f"{what}: NumPy's shape {ref.shape}, rtxd's {got.shape}")
    err = float(np.max(np.abs(ref.astype(np.float64) - got)))
    tol = CHECK_RTOL * max(1.0, float(np.max(np.abs(ref))))
    if not err <= tol:
        raise harness.CaseError(f"{what}: NumPy's result differs from rtxd's: max abs diff "
                                f"{err:.3g} > {tol:.3g}")
    print(f"{what}: NumPy's result matches rtxd's (max abs diff {err:.2g} <= {tol:.2g})",
          flush=True)
    return err


class Bench:
    def __init__(self, args, drv, data, report):
        self.args, self.drv, self.data, self.report = args, drv, data, report

    def load(self, case, value):
        return np.load(self.data / f"{case}-{value}.npy", allow_pickle=False)

    def timed(self, i, ref_run):
        """(Stats of rtxd, Stats of NumPy) of case i against ref_run, windows alternating.

        Each window starts after a pause of args.settle_s: OpenBLAS's idle threads spin for
        about 0.1 s after their last call (measured: a whole core, in either process), and
        without the pause a window would share the CPUs with the other side's spinners."""
        settle = self.args.settle_s

        def ours(reps):
            time.sleep(settle)
            return self.drv.window(i, reps)

        def ref(reps):
            time.sleep(settle)
            return harness.reference_window(ref_run, lambda: None, reps)

        ms = self.args.window_ms
        reps = min(harness.reps_for(ours, ms), harness.reps_for(ref, ms))
        return harness.compare(ours, ref, reps, windows=self.args.windows)

    def gemm(self, i):
        info = self.drv.prepare(i)
        a, b, c_rtx = (self.load("gemm", v) for v in "abc")
        c = np.empty_like(c_rtx)
        check_same("gemm", np.matmul(a, b, out=c), c_rtx)
        ours, ref = self.timed(i, lambda: np.matmul(a, b, out=c))
        self.drv.release(i)

        def gflops(st):
            return f"{info['flops'] / (st.median * 1e-3) / 1e9:.1f} GFLOP/s"
        self.report.row("f32 GEMM", info["shape"], info["route"],
                        f"{gflops(ours)}, {ours.text()}",
                        f"np.matmul(out=): {gflops(ref)}, {ref.text()}",
                        ref.median / ours.median, GEMM_TARGET)

    def block(self, i):
        info = self.drv.prepare(i)
        x, y_rtx = self.load("transformer_block", "x"), self.load("transformer_block", "y")
        blk = NumpyBlock(rg.load_graph(self.args.block_graph), x.shape)
        check_same("transformer block", blk(x), y_rtx)
        ours, ref = self.timed(i, lambda: blk(x))
        self.drv.release(i)
        self.report.row(f"transformer block, batch {x.shape[0]}", info["shape"], info["route"],
                        ours.text(), f"NumPy f32 block: {ref.text()}",
                        ref.median / ours.median, BLOCK_TARGET)


CASES = {"gemm": ("gemm", "f32 GEMM"), "block": ("transformer_block", "transformer block")}


# ------------------------------------------------------------------------------------------
# Main
# ------------------------------------------------------------------------------------------

def cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def numpy_blas():
    """(description, threads) of NumPy's BLAS."""
    if threadpool_info is None:
        return "unknown (no threadpoolctl)", None
    for i in threadpool_info():
        if i.get("user_api") == "blas":
            return (f"{i.get('internal_api')} {i.get('version')} arch={i.get('architecture')} "
                    f"({Path(i.get('filepath', '')).name})", i.get("num_threads"))
    return "none found", None


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small GEMM, short windows")
    ap.add_argument("--report", action="store_true", help="report without judging targets")
    ap.add_argument("--threads", type=int, default=0,
                    help="threads of each side (default 0: one per online CPU, as rtxrun)")
    ap.add_argument("--case", action="append", choices=sorted(CASES),
                    help="run only this case (repeatable)")
    ap.add_argument("--block-graph", type=Path,
                    default=rg.build_dir() / "examples" / "transformer_block.rtxg")
    ap.add_argument("--windows", type=int, default=0, help="timed windows per side")
    args = ap.parse_args(argv)
    if args.threads < 0 or args.windows < 0:
        ap.error("--threads and --windows take a count >= 0 (0: the default)")
    args.gemm = 256 if args.quick else 1024
    args.windows = args.windows or (3 if args.quick else 9)
    args.window_ms = 30.0 if args.quick else 250.0
    args.settle_s = 0.0 if args.quick else 0.25
    args.threads = args.threads or os.cpu_count() or 1
    return args


def run(args, report):
    driver_bin = rg.build_dir() / "bin" / "rtx-bench-cpu"
    if not driver_bin.is_file():
        sys.exit(f"bench_cpu: {driver_bin} missing (make all)")
    rtxd_blas = subprocess.run([str(driver_bin), "--blas"], capture_output=True, text=True,
                               timeout=60).stdout.strip() or "unknown"
    np_blas, np_threads = numpy_blas()
    print(f"machine: {cpu_model()}, {os.cpu_count()} logical CPUs, load average "
          f"{os.getloadavg()[0]:.2f}; numpy {np.__version__}")
    print(f"BLAS: rtxd {rtxd_blas}; NumPy {np_blas}")
    same = ("the same" if np_threads == args.threads else
            "unknown" if np_threads is None else "DIFFERENT: the comparison is not like with like")
    print(f"threads: rtxd {args.threads} (CPU backend pool and its OpenBLAS), NumPy BLAS "
          f"{np_threads} ({same}); NumPy's elementwise operations run on 1 thread")
    env = {k: v for k, v in os.environ.items()
           if k.startswith(("OPENBLAS_", "OMP_", "RTX_BENCH_"))}
    if env:
        print("env: " + " ".join(f"{k}={v}" for k, v in sorted(env.items())))
    print(f"windows: {args.windows} per side after 1 warm-up window, alternating, about "
          f"{args.window_ms:.0f} ms each, each after a {args.settle_s:g} s pause; median window "
          f"per run (+- half its spread)", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        drv = harness.Driver([str(driver_bin), "--threads", str(args.threads), "--gemm",
                              str(args.gemm), "--block", str(args.block_graph), "--data", tmp])
        bench = Bench(args, drv, data, report)
        try:
            try:
                index = {c["name"]: c["case"] for c in drv.cases()}
            except harness.CaseError as e:
                report.error("driver", "", str(e))
                return
            for key in args.case or list(CASES):
                name, label = CASES[key]
                try:
                    getattr(bench, key)(index[name])
                except harness.CaseError as e:
                    report.error(label, "", str(e))
                except Exception as e:  # noqa: BLE001 - a failed reference fails its case
                    traceback.print_exc()
                    report.error(label, "", f"{type(e).__name__}: {e}")
        finally:
            rc = drv.close()
        if rc != 0:
            report.error("driver", "", f"rtx-bench-cpu exited with {rc}")


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    report = harness.Report(judge=not harness.report_only(argv))
    if threadpool_limits is not None:
        with threadpool_limits(limits=args.threads, user_api="blas"):
            run(args, report)
    else:
        run(args, report)
    print()
    report.print_table()
    return report.exit_status()


if __name__ == "__main__":
    sys.exit(main())
