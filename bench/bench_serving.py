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

Prints throughput (inferences/s), p99 latency (client side, us) and the mean batch size rtxd
actually executed during the run (from its statistics) per case, each model's device and
batching config as rtxd loaded it, and judges, for each pair and protocol at concurrency 32,
the ratios batching on / off against the target (issue 5): batching on >= 3x the throughput
of batching off with a p99 no worse than 2x. The judged case is measured in rounds that
alternate the two models (off on, on off, ...; RTX_BENCH_SERVING_ROUNDS, default 3), and the
ratios are those of the medians over the rounds (the per-round ratios' range is printed); the
other concurrencies are one run each, printed, not judged. Each perf_analyzer run warms up
and repeats its window until stable (up to 3 windows), the same for both models.

Exit status: 0 when every judged target is met; 1 when one is missed or a run fails (the
other cases still run); --report (or RTX_BENCH_REPORT=1) prints the verdicts without judging
(exit 0 unless a run fails).

One rtxd (free loopback ports, a store in a temporary folder, --models.control=explicit loading
the benchmarked models) serves all of them; perf_analyzer comes from the tritonclient wheel in
the venv (it needs libcudart.so.12 from nvidia-cuda-runtime-cu12, put on LD_LIBRARY_PATH here,
and Debian's libb64-0d). Needs RTX_BUILD (the Makefile sets it) and the venv's Python.
Environment: RTX_BENCH_SERVING_MS (measurement window, default 3000),
RTX_BENCH_SERVING_PROTOCOLS ("grpc,http"), RTX_PERF_ANALYZER (the binary, default the venv's),
RTX_BENCH_SERVING_MODELS (the batching-on model of each pair to run, default "mlp_wide,mlp"),
RTX_BENCH_SERVING_CONCURRENCY ("1,8,32"), RTX_BENCH_SERVING_ROUNDS (3), RTX_BENCH_REPORT,
RTX_BENCH_SERVING_PROFILE=1 (one more run of each batching-on model at the judged concurrency,
not counted, during which rtxd's CPU per thread group is read and, with RTX_PROFILE_GDB=gdb or
cuda-gdb, stacks are sampled: bench/thread_profile.py).
"""
import csv
import json
import statistics
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import thread_profile  # noqa: E402

# batching on -> the same model with batching off
PAIRS = {"mlp_wide": "mlp_wide_nobatch", "mlp": "mlp_nobatch"}
WINDOW_MS = int(os.environ.get("RTX_BENCH_SERVING_MS", "3000"))


def env_list(name, default):
    return [v.strip() for v in os.environ.get(name, default).split(",") if v.strip()]


PROTOCOLS = env_list("RTX_BENCH_SERVING_PROTOCOLS", "grpc,http")
ON_MODELS = env_list("RTX_BENCH_SERVING_MODELS", "mlp_wide,mlp")
CONCURRENCY = [int(c) for c in env_list("RTX_BENCH_SERVING_CONCURRENCY", "1,8,32")]
ROUNDS = int(os.environ.get("RTX_BENCH_SERVING_ROUNDS", "3"))
TARGET_THROUGHPUT, TARGET_P99 = 3.0, 2.0
JUDGED_CONCURRENCY = 32
PROFILE = os.environ.get("RTX_BENCH_SERVING_PROFILE", "") not in ("", "0")


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


def start_rtxd(build, tmp, models, repository=None, wait_s=60, who="bench_serving"):
    """rtxd on free loopback ports serving `models` of repository (default the example
    models), its store and log (rtxd.log) in tmp: (process, gRPC port, HTTP port) once it
    answers ready."""
    grpc_port, http_port = free_port(), free_port()
    argv = [str(build / "bin" / "rtxd"), f"--server.listen=127.0.0.1:{grpc_port}",
            f"--http.listen=127.0.0.1:{http_port}", f"--store.path={tmp}/rtxd.db",
            f"--models.repository={repository or build / 'examples' / 'models'}",
            "--models.control=explicit", f"--models.startup={','.join(models)}",
            "--log.level=warn"]
    log = open(Path(tmp) / "rtxd.log", "wb")
    p = subprocess.Popen(argv, stdout=log, stderr=log)
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        if p.poll() is not None:
            raise SystemExit(f"{who}: rtxd exited {p.returncode}; log in {tmp}/rtxd.log")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/health/ready",
                                        timeout=2) as r:
                if r.status == 200:
                    return p, grpc_port, http_port
        except OSError:
            pass
        time.sleep(0.1)
    p.kill()
    raise SystemExit(f"{who}: rtxd did not become ready within {wait_s} s")


def stop_rtxd(p):
    """SIGTERM (rtxd's graceful shutdown), then SIGKILL after 30 s."""
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        p.kill()


def http_json(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return json.load(r)


def counts(port, model):
    """(inference_count, execution_count) of a model's statistics, summed over versions;
    None when rtxd does not answer."""
    try:
        st = http_json(port, f"/v2/models/{model}/stats")["model_stats"]
    except (OSError, ValueError, KeyError):
        return None
    return (sum(int(v["inference_count"]) for v in st),
            sum(int(v["execution_count"]) for v in st))


def describe(grpc_port, http_port, model):
    """One line: how rtxd loaded the model. The gRPC ModelConfig reports the loaded version's
    instances as they run (KIND_CPU where a KIND_GPU group fell back to the CPU), where the
    HTTP config echoes config.json: that is the fallback where tritonclient is not installed
    (the GPU machine)."""
    try:
        import tritonclient.grpc as grpcclient
    except ImportError:
        cfg = http_json(http_port, f"/v2/models/{model}/config")
        how = " (as config.json says: tritonclient is not installed)"
    else:
        with grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}") as client:
            cfg = client.get_model_config(model, as_json=True)["config"]
        how = ""
    groups = ", ".join(f"{g.get('count', 1)} x {g.get('kind', '?')}"
                       for g in cfg.get("instance_group", [])) or "default instances"
    db = cfg.get("dynamic_batching")
    batching = (f"dynamic batching on (preferred {db.get('preferred_batch_size', [])}, max "
                f"queue delay {db.get('max_queue_delay_microseconds', 0)} us)" if db is not None
                else "dynamic batching off")
    return (f"{model}: platform {cfg.get('platform', '?')}, max_batch_size "
            f"{cfg.get('max_batch_size', 0)}, instances {groups}, {batching}{how}")


def run_pa(exe, env, model, protocol, url, c, tmp, tag):
    """(inferences/s, p99 us) of one perf_analyzer run, or None when it failed (reported)."""
    out = Path(tmp) / f"{model}-{protocol}-{c}-{tag}.csv"
    argv = [str(exe), "-m", model, "-u", url, "-i", protocol, "--concurrency-range", f"{c}:{c}",
            "--measurement-interval", str(WINDOW_MS), "-s", "100000", "--max-trials", "3",
            "--percentile=99", "-f", str(out)]
    try:
        p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    except subprocess.TimeoutExpired:
        print(f"bench_serving: perf_analyzer timed out ({' '.join(argv)})", file=sys.stderr)
        return None
    if p.returncode != 0:
        print(f"bench_serving: perf_analyzer failed ({' '.join(argv)}):\n"
              f"{(p.stdout + p.stderr)[-2000:]}", file=sys.stderr)
        return None
    row = next(csv.DictReader(out.open()))
    return float(row["Inferences/Second"]), int(row["p99 latency"])


def verdict_word(met, report):
    word = "met" if met else "MISSED"
    return f"{word} (report only, not judged)" if report else word


def judge(res, on, off, protocol, report):
    """The verdict line of one pair and protocol at the judged concurrency, and whether it
    passes (met, or --report); None when that concurrency was not measured."""
    c = JUDGED_CONCURRENCY
    runs = {m: res.get((protocol, m, c), []) for m in (off, on)}
    head = f"verdict: {on} vs {off}, {protocol}, concurrency {c}: "
    target = f"target >= {TARGET_THROUGHPUT:g}x throughput with p99 <= {TARGET_P99:g}x"
    if c not in CONCURRENCY:
        return None
    if any(r is None for m in runs for r in runs[m]) or not all(runs.values()):
        return head + f"FAILED to run ({target})", False
    med = {m: (statistics.median(t for t, _ in runs[m]), statistics.median(l for _, l in runs[m]))
           for m in runs}
    tr, lr = med[on][0] / med[off][0], med[on][1] / med[off][1]
    per_round = [(a[0] / b[0], a[1] / b[1]) for a, b in zip(runs[on], runs[off])]
    met = tr >= TARGET_THROUGHPUT and lr <= TARGET_P99
    return (head + f"throughput x{tr:.2f} (per round x{min(r[0] for r in per_round):.2f} .. "
            f"x{max(r[0] for r in per_round):.2f}), p99 x{lr:.2f} (per round "
            f"x{min(r[1] for r in per_round):.2f} .. x{max(r[1] for r in per_round):.2f}); "
            f"medians of {len(per_round)} alternating rounds; {target}: "
            f"{verdict_word(met, report)}", met or report)


def main():
    report = os.environ.get("RTX_BENCH_REPORT", "") not in ("", "0")
    for arg in sys.argv[1:]:
        if arg == "--report":
            report = True
        else:
            raise SystemExit(f"usage: bench_serving.py [--report] (got {arg!r})")
    if ROUNDS < 1:
        raise SystemExit("bench_serving: RTX_BENCH_SERVING_ROUNDS must be >= 1")
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
    ok = True
    with tempfile.TemporaryDirectory(prefix="rtx-bench-serving-") as tmp:
        rtxd, grpc_port, http_port = start_rtxd(build, tmp, models)
        try:
            where = ("a GPU (the models' KIND_GPU instances)" if os.path.exists("/dev/nvidia0")
                     else "the CPU")
            print(f"perf_analyzer against rtxd on {where}: {platform.processor() or 'cpu'}, "
                  f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
                  f"window {WINDOW_MS} ms, p99 client latency", flush=True)
            for m in models:
                print("  " + describe(grpc_port, http_port, m))
            print(f"{'protocol':8} {'model':17} {'conc':>4} {'round':>5} {'infer/s':>10} "
                  f"{'p99 us':>9} {'batch':>6}")
            res, profiles = {}, []
            for on in ON_MODELS:
                off = PAIRS[on]
                for protocol in PROTOCOLS:
                    url = f"127.0.0.1:{grpc_port if protocol == 'grpc' else http_port}"
                    for c in CONCURRENCY:
                        rounds = ROUNDS if c == JUDGED_CONCURRENCY else 1
                        for r in range(rounds):
                            for model in ((off, on) if r % 2 == 0 else (on, off)):
                                before = counts(http_port, model)
                                got = run_pa(exe, env, model, protocol, url, c, tmp, r)
                                after = counts(http_port, model)
                                res.setdefault((protocol, model, c), []).append(got)
                                execs = after[1] - before[1] if before and after else 0
                                batch = (f"{(after[0] - before[0]) / execs:.1f}" if execs > 0
                                         else "-")
                                if got is None:
                                    print(f"{protocol:8} {model:17} {c:>4} {r + 1:>5} "
                                          f"{'FAILED':>10}", flush=True)
                                else:
                                    print(f"{protocol:8} {model:17} {c:>4} {r + 1:>5} "
                                          f"{got[0]:>10.0f} {got[1]:>9} {batch:>6}", flush=True)
                    if PROFILE:  # one more run, not counted: sampling slows rtxd down
                        prof = thread_profile.Profile(rtxd.pid, os.environ.get("RTX_PROFILE_GDB"))
                        prof.start()
                        got = run_pa(exe, env, on, protocol, url, JUDGED_CONCURRENCY, tmp, "prof")
                        text = prof.report(*prof.stop())
                        rate = f"{got[0]:.0f} infer/s while profiled" if got else "run FAILED"
                        profiles.append((protocol, on, JUDGED_CONCURRENCY, f"{rate}\n{text}"))
            print("(batch: inferences / executions in rtxd during the run: the mean batch size "
                  "that actually ran)")
            for protocol, model, c, text in profiles:
                print(f"\nprofile: {protocol} {model} at concurrency {c} (an extra run)")
                print(text)
            print()
            for on in ON_MODELS:
                for protocol in PROTOCOLS:
                    v = judge(res, on, PAIRS[on], protocol, report)
                    if v is None:
                        print(f"verdict: {on} vs {PAIRS[on]}, {protocol}: not judged "
                              f"(concurrency {JUDGED_CONCURRENCY} not measured)")
                        continue
                    print(v[0])
                    ok = ok and v[1]
            failed = [k for k, runs in res.items() if any(r is None for r in runs)]
            if failed:
                print(f"bench_serving: {len(failed)} case(s) FAILED to run: "
                      f"{', '.join(f'{p} {m} c={c}' for p, m, c in failed)}")
                ok = False
        finally:
            stop_rtxd(rtxd)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
