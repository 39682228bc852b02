#!/usr/bin/env python3
"""
bench_serving.py (make bench) - Triton's perf_analyzer against rtxd serving the example
models on the CPU, dynamic batching off and on, at concurrency 1, 8 and 32, over gRPC and
HTTP. Two pairs of models (the same weights within a pair):

  mlp_wide_nobatch / mlp_wide   FP32 1024 -> 4096 -> GELU -> 1024 (32 MiB of weights; batching
                                on: preferred batch sizes 16/32, max queue delay 1000 us) - the
                                case batching is for: batch 1 is a memory-bound GEMV that reads
                                every weight, batch 32 one GEMM that reads them once
  mlp_nobatch / mlp             FP32 64 -> 128 -> 10 (preferred 16/32, 500 us): compute of a
                                few microseconds, so per-request overhead bounds throughput

Prints throughput (inferences/s) and p99 latency (client side, us) per case, and for each pair
and protocol at concurrency 32 the ratios batching on / off against the target (issue 5):
batching on >= 3x the throughput of batching off with a p99 no worse than 2x. Exit status 0
whether or not a target is met (the figures are the result); non-zero when a run fails.

One rtxd (free loopback ports, a store in a temporary folder, --models.control=explicit loading
the benchmarked models) serves all of them; perf_analyzer comes from the tritonclient wheel in
the venv (it needs libcudart.so.12 from nvidia-cuda-runtime-cu12, put on LD_LIBRARY_PATH here,
and Debian's libb64-0d). Needs RTX_BUILD (the Makefile sets it) and the venv's Python.
Environment: RTX_BENCH_SERVING_MS (measurement window, default 3000),
RTX_BENCH_SERVING_PROTOCOLS ("grpc,http"), RTX_PERF_ANALYZER (the binary, default the venv's),
RTX_BENCH_SERVING_MODELS (the batching-on model of
each pair to run, default "mlp_wide,mlp"), RTX_BENCH_SERVING_CONCURRENCY ("1,8,32").
"""
import csv
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

# batching on -> the same model with batching off
PAIRS = {"mlp_wide": "mlp_wide_nobatch", "mlp": "mlp_nobatch"}
WINDOW_MS = int(os.environ.get("RTX_BENCH_SERVING_MS", "3000"))


def env_list(name, default):
    return [v.strip() for v in os.environ.get(name, default).split(",") if v.strip()]


PROTOCOLS = env_list("RTX_BENCH_SERVING_PROTOCOLS", "grpc,http")
ON_MODELS = env_list("RTX_BENCH_SERVING_MODELS", "mlp_wide,mlp")
CONCURRENCY = [int(c) for c in env_list("RTX_BENCH_SERVING_CONCURRENCY", "1,8,32")]
TARGET_THROUGHPUT, TARGET_P99 = 3.0, 2.0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def perf_analyzer_env():
    env = dict(os.environ)
    try:
        import nvidia.cuda_runtime
        lib = Path(list(nvidia.cuda_runtime.__path__)[0]) / "lib"
        env["LD_LIBRARY_PATH"] = f"{lib}:{env.get('LD_LIBRARY_PATH', '')}".rstrip(":")
    except ImportError:
        pass
    env.pop("ASAN_OPTIONS", None)
    return env


def start_rtxd(build, tmp, models):
    grpc_port, http_port = free_port(), free_port()
    argv = [str(build / "bin" / "rtxd"), f"--server.listen=127.0.0.1:{grpc_port}",
            f"--http.listen=127.0.0.1:{http_port}", f"--store.path={tmp}/rtxd.db",
            f"--models.repository={build / 'examples' / 'models'}",
            "--models.control=explicit", f"--models.startup={','.join(models)}",
            "--log.level=warn"]
    log = open(Path(tmp) / "rtxd.log", "wb")
    p = subprocess.Popen(argv, stdout=log, stderr=log)
    end = time.monotonic() + 60
    while time.monotonic() < end:
        if p.poll() is not None:
            raise SystemExit(f"bench_serving: rtxd exited {p.returncode}; log in {tmp}/rtxd.log")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/health/ready",
                                        timeout=2) as r:
                if r.status == 200:
                    return p, grpc_port, http_port
        except OSError:
            pass
        time.sleep(0.1)
    p.kill()
    raise SystemExit("bench_serving: rtxd did not become ready within 60 s")


def run_pa(exe, env, model, protocol, url, c, tmp):
    out = Path(tmp) / f"{model}-{protocol}-{c}.csv"
    argv = [str(exe), "-m", model, "-u", url, "-i", protocol, "--concurrency-range", f"{c}:{c}",
            "--measurement-interval", str(WINDOW_MS), "-s", "100000", "--max-trials", "3",
            "--percentile=99", "-f", str(out)]
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"bench_serving: perf_analyzer failed ({' '.join(argv)}):\n"
                         f"{(p.stdout + p.stderr)[-2000:]}")
    row = next(csv.DictReader(out.open()))
    return float(row["Inferences/Second"]), int(row["p99 latency"])


def ratio_lines(res, on, off):
    """The target lines of one pair at concurrency 32 (empty when 32 was not measured)."""
    lines = []
    for protocol in PROTOCOLS:
        if (protocol, on, 32) not in res:
            continue
        (t0, l0), (t1, l1) = res[protocol, off, 32], res[protocol, on, 32]
        tr, lr = t1 / t0, l1 / l0
        ok = "meets" if tr >= TARGET_THROUGHPUT and lr <= TARGET_P99 else "misses"
        lines.append(f"{on} vs {off}, {protocol}, concurrency 32: throughput x{tr:.2f}, "
                     f"p99 x{lr:.2f} - {ok} the target (>= {TARGET_THROUGHPUT:g}x throughput, "
                     f"p99 <= {TARGET_P99:g}x)")
    return lines


def main():
    build = Path(os.environ.get("RTX_BUILD", Path(__file__).resolve().parents[1] / "build"))
    exe = Path(os.environ.get("RTX_PERF_ANALYZER")
               or Path(sys.executable).parent / "perf_analyzer")
    if not exe.exists():
        raise SystemExit(f"bench_serving: {exe} missing (tests/requirements.txt installs "
                         f"tritonclient[all], whose wheel ships it)")
    unknown = [m for m in ON_MODELS if m not in PAIRS]
    if unknown:
        raise SystemExit(f"bench_serving: RTX_BENCH_SERVING_MODELS names {unknown}; known: "
                         f"{sorted(PAIRS)}")
    models = [m for on in ON_MODELS for m in (PAIRS[on], on)]
    env = perf_analyzer_env()
    with tempfile.TemporaryDirectory(prefix="rtx-bench-serving-") as tmp:
        rtxd, grpc_port, http_port = start_rtxd(build, tmp, models)
        try:
            where = ("a GPU (the models' KIND_GPU instances)" if os.path.exists("/dev/nvidia0")
                     else "the CPU")
            print(f"perf_analyzer against rtxd on {where}: {platform.processor() or 'cpu'}, "
                  f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
                  f"window {WINDOW_MS} ms, p99 client latency", flush=True)
            print(f"{'protocol':8} {'model':17} {'conc':>4} {'infer/s':>10} {'p99 us':>9}")
            res = {}
            for on in ON_MODELS:
                for protocol in PROTOCOLS:
                    url = f"127.0.0.1:{grpc_port if protocol == 'grpc' else http_port}"
                    for model in (PAIRS[on], on):
                        for c in CONCURRENCY:
                            thr, p99 = run_pa(exe, env, model, protocol, url, c, tmp)
                            res[protocol, model, c] = (thr, p99)
                            print(f"{protocol:8} {model:17} {c:>4} {thr:>10.0f} {p99:>9}",
                                  flush=True)
            print()
            for on in ON_MODELS:
                for line in ratio_lines(res, on, PAIRS[on]):
                    print(line)
        finally:
            rtxd.send_signal(signal.SIGTERM)
            try:
                rtxd.wait(30)
            except subprocess.TimeoutExpired:
                rtxd.kill()


if __name__ == "__main__":
    main()
