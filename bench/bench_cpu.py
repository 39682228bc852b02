#!/usr/bin/env python3
"""
bench_cpu.py (make bench) - rtxrun on the CPU against NumPy, in one run:

  (a) f32 GEMM 1024x1024x1024: a one-node matmul graph through
      `rtxrun --repeat 20 --warmup 3 --json --threads 0` (its median time_ms) against the
      median of 20 numpy.matmul calls after 3 warm-up calls; GFLOP/s = 2*M*N*K / time.
  (b) the transformer-block example at batch 1: rtxrun's median against the same graph run
      by the NumPy interpreter of tests/interop/rtxgraph.py in float32, weights decoded once
      beforehand, timing only the compute.

Prints NumPy's BLAS (threadpoolctl when installed) and a short table. Needs RTX_BUILD (the
Makefile sets it) and the venv's Python. OPENBLAS_* variables of the environment are left as
they are, for both sides.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "interop"))
import rtxgraph as rg  # noqa: E402

REPEAT, WARMUP = 20, 3
N = 1024


def blas_line():
    try:
        from threadpoolctl import threadpool_info
        parts = []
        for i in threadpool_info():
            if i.get("user_api") != "blas":
                continue
            parts.append(f"{i.get('internal_api')} {i.get('version')} "
                         f"threads={i.get('num_threads')} arch={i.get('architecture')} "
                         f"({Path(i.get('filepath', '')).name})")
        if parts:
            return "; ".join(parts)
    except ImportError:
        pass
    try:
        cfg = np.show_config(mode="dicts")
        b = cfg.get("Build Dependencies", {}).get("blas", {})
        return f"{b.get('name')} {b.get('version')} (numpy.show_config)"
    except Exception:  # noqa: BLE001 - older NumPy
        return "unknown (no threadpoolctl)"


def rtxrun(graph_path, inputs, tmp):
    args = [str(rg.rtxrun_path()), str(graph_path), "--repeat", str(REPEAT), "--warmup",
            str(WARMUP), "--json", "--threads", "0", "--quiet"]
    for i, (name, a) in enumerate(inputs.items()):
        p = Path(tmp) / f"in{i}.npy"
        np.save(p, a)
        args += ["--input", f"{name}={p}"]
    p = subprocess.run(args, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"bench: rtxrun failed (exit {p.returncode}): {p.stderr.strip()}")
    j = json.loads(p.stdout)
    assert j["time_ms"]["runs"] == REPEAT, j["time_ms"]
    return j["time_ms"]["median"]


def median_ms(fn):
    for _ in range(WARMUP):
        fn()
    ts = []
    for _ in range(REPEAT):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def bench_gemm(tmp):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((N, N)).astype(np.float32)
    b = rng.standard_normal((N, N)).astype(np.float32)
    g = rg.GraphBuilder("gemm1024")
    g.input("a", "f32", [N, N])
    g.input("b", "f32", [N, N])
    g.node("matmul", ["a", "b"], "c", name="mm")
    g.output("c")
    gp = g.save(Path(tmp) / "gemm.rtxg")
    t_rtx = rtxrun(gp, {"a": a, "b": b}, tmp)
    t_np = median_ms(lambda: np.matmul(a, b))
    return t_rtx, t_np


def bench_transformer(tmp):
    path = rg.build_dir() / "examples" / "transformer_block.rtxg"
    if not path.is_file():
        sys.exit(f"bench: {path} missing (make examples)")
    x = np.random.default_rng(1).standard_normal((1, 128, 256)).astype(np.float32)
    t_rtx = rtxrun(path, {"x": x}, tmp)
    rg.COMPUTE = np.float32  # the interpreter at the kernels' precision
    try:
        interp = rg.Interpreter(rg.load_graph(path))  # weights decoded here, not timed
        t_np = median_ms(lambda: interp.run({"x": x}))
    finally:
        rg.COMPUTE = np.float64
    return t_rtx, t_np


def main():
    rtx = rg.rtxrun_path()
    if not rtx.exists():
        sys.exit(f"bench: {rtx} missing (make all)")
    print(f"cpu: {os.cpu_count()} logical cores; numpy {np.__version__}; BLAS: {blas_line()}")
    env = {k: v for k, v in os.environ.items() if k.startswith(("OPENBLAS_", "OMP_"))}
    if env:
        print("env: " + " ".join(f"{k}={v}" for k, v in sorted(env.items())))
    with tempfile.TemporaryDirectory() as tmp:
        g_rtx, g_np = bench_gemm(tmp)
        t_rtx, t_np = bench_transformer(tmp)
    flop = 2.0 * N * N * N
    gf_rtx, gf_np = flop / (g_rtx * 1e6), flop / (g_np * 1e6)
    print(f"median of {REPEAT} runs after {WARMUP} warm-up runs\n")
    print(f"{'benchmark':<30} {'rtxrun':>16} {'numpy':>16} {'rtxrun/numpy':>13}")
    print(f"{'f32 gemm 1024^3 (GFLOP/s)':<30} {gf_rtx:>16.1f} {gf_np:>16.1f} "
          f"{gf_rtx / gf_np:>12.2f}x")
    print(f"{'f32 gemm 1024^3 (ms)':<30} {g_rtx:>16.3f} {g_np:>16.3f}")
    print(f"{'transformer block b=1 (ms)':<30} {t_rtx:>16.3f} {t_np:>16.3f} "
          f"{t_np / t_rtx:>12.2f}x")
    print("\n(rtxrun/numpy: throughput ratio, > 1 means rtxrun is faster; target >= 0.9x)")
    if gf_rtx / gf_np < 0.9:
        print(f"NOTE: gemm at {gf_rtx / gf_np:.2f}x numpy, below the 0.9x target")


if __name__ == "__main__":
    main()
