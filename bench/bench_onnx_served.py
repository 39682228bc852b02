#!/usr/bin/env python3
"""
bench_onnx_served.py (make bench-onnx-served, on the GPU machine) - issue 14's GPU target:
models exported by torch.onnx.export, served by rtxd from a Triton model repository and
driven by Triton's perf_analyzer at batch 32, against PyTorch eager running the same module
on the same GPU in the same run. Target: rtxd's served throughput >= 1.2x PyTorch eager's
for the encoder and the decoder.

Models (tests/gpu/test_onnx_torch.py's builders, random weights, fixed seeds, exported with
a dynamic batch and sequence, weights as external data beside model.onnx):
  bert   a BERT-style encoder, 2 layers, width 768, 12 heads, FFN 3072, vocabulary 30522;
         inputs input_ids and attention_mask [batch, 128] (INT64), outputs last_hidden_state
         [batch, 128, 768] and pooler_output [batch, 768]
  gpt2   a GPT-2-style decoder, 2 layers, width 768, 12 heads, vocabulary 50257, answering
         the next-token logits of the last position [batch, 50257] (a served decoder's answer;
         every position's logits would be 823 MB per batch of 32)

The repository is what a Triton user has: MODEL/config.pbtxt (platform onnxruntime_onnx,
max_batch_size 32, the inputs and outputs, instance_group of --instances KIND_GPU instances,
no dynamic batching: each request is already a batch of 32) and MODEL/1/model.onnx.

rtxd's side: perf_analyzer over gRPC with system shared memory for inputs and outputs (as a
throughput-minded Triton client on the same host uses it; --no-shm sends tensors in the
messages instead), `-b 32`, the same input rows as PyTorch's (--input-data JSON), at each
concurrency of --concurrency (default 1,2,4); the judged figure is the best inferences/s over
those levels, whose p99 latency is printed beside it. Before timing, one HTTP request's outputs
are compared with PyTorch's (1e-4 relative plus 1e-4 of the output's scale).

PyTorch's side: the module in eval mode under no_grad on the same GPU with TF32 off (f32 as
exported), each batch's inputs copied from host memory and its outputs back to host memory
(as the served path does), one batch after another: inferences/s = 32 / the median time of a
batch over windows before and after rtxd's runs.

Options: --report (or RTX_BENCH_REPORT=1: report without judging), --case bert|gpt2
(repeatable), --concurrency LIST, --instances N (default 2), --window-ms N (perf_analyzer's
measurement interval, default 3000), --no-shm, --device cuda:N or cpu, --quick (small models:
a smoke run of the harness, on the CPU as well). Needs RTX_BUILD (the Makefile
sets it), PyTorch, onnx and onnxscript in this python3, and perf_analyzer: RTX_PERF_ANALYZER,
else .gpu/tools/perf_analyzer (make gpu-pack bundles the venv's with its libraries), else the
one beside this python3. Exit status (bench_harness.Report): 1 when a case failed, or a judged
target was missed unless --report.
"""

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "gpu"))
import bench_harness as harness  # noqa: E402
import bench_serving  # noqa: E402

TARGET = 1.2
BATCH, SEQ = 32, 128
CASES = {
    "bert": {"vocab": 30522, "d": 768, "heads": 12, "ff": 3072, "layers": 2, "max_pos": 512},
    "gpt2": {"vocab": 50257, "d": 768, "heads": 12, "layers": 2, "max_pos": 1024,
             "last_only": True},
}
# --quick: small models (a smoke run of the harness, on the CPU too)
QUICK = {"bert": {"vocab": 1000, "d": 64, "heads": 4, "ff": 128, "max_pos": 128},
         "gpt2": {"vocab": 1000, "d": 64, "heads": 4, "max_pos": 128}}
LABEL = {"bert": "BERT-style encoder", "gpt2": "GPT-2-style decoder (last-position logits)"}


def outputs(name, kw):
    """(name, dims without the batch) of a model's outputs (all FP32)."""
    if name == "bert":
        return [("last_hidden_state", [-1, kw["d"]]), ("pooler_output", [kw["d"]])]
    return [("logits", [kw["vocab"]])]


def config_pbtxt(name, kw, feeds, instances, kind, gpu):
    ins = ",\n".join(f'  {{ name: "{k}" data_type: TYPE_INT64 dims: [ -1 ] }}' for k in feeds)
    outs = ",\n".join(f'  {{ name: "{n}" data_type: TYPE_FP32 dims: [ {", ".join(map(str, d))} ] }}'
                      for n, d in outputs(name, kw))
    return (f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: {BATCH}\n'
            f"input [\n{ins}\n]\noutput [\n{outs}\n]\n"
            f"instance_group [ {{ count: {instances} kind: {kind}"
            f"{f' gpus: [ {gpu} ]' if kind == 'KIND_GPU' else ''} }} ]\n")


def write_input_data(path, feeds):
    """perf_analyzer's --input-data JSON: one row per request element (without the batch
    dimension); with -b 32 it fills a request's batch from consecutive rows, so the 32 rows
    of the PyTorch batch make its requests."""
    rows = [{k: {"content": a[i].tolist(), "shape": list(a.shape[1:])}
             for k, a in feeds.items()} for i in range(BATCH)]
    path.write_text(json.dumps({"data": rows}))


def infer_http(port, model, feeds, outputs):
    """{output name: array} of one KServe v2 HTTP request (JSON inputs, binary outputs)."""
    body = json.dumps({
        "inputs": [{"name": k, "datatype": "INT64", "shape": list(a.shape),
                    "data": a.ravel().tolist()} for k, a in feeds.items()],
        "outputs": [{"name": n, "parameters": {"binary_data": True}} for n in outputs],
    }).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/{model}/infer", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        data = r.read()
        hlen = int(r.headers.get("Inference-Header-Content-Length", len(data)))
    head = json.loads(data[:hlen])
    got, off = {}, hlen
    for o in head["outputs"]:
        size = o["parameters"]["binary_data_size"]
        got[o["name"]] = np.frombuffer(data[off:off + size], np.float32).reshape(o["shape"])
        off += size
    return got


def check(label, got, ref):
    for k, r in ref.items():
        g = got.get(k)
        if g is None or g.shape != r.shape:
            raise harness.CaseError(f"{label}: output {k}: got "
                                    f"{None if g is None else g.shape}, expected {r.shape}")
        r64, g64 = r.astype(np.float64), g.astype(np.float64)
        lim = 1e-4 * np.abs(r64) + 1e-4 * max(1.0, float(np.abs(r64).max()))
        err = np.abs(g64 - r64)
        if not (err <= lim).all():
            raise harness.CaseError(f"{label}: {k} differs from PyTorch's: max abs diff "
                                    f"{float(err.max()):.3g}")
    print(f"{label}: rtxd's served outputs match PyTorch's", flush=True)


def eager_batch_ms(torch, model, feeds, dev, window_ms=1500, windows=3):
    """Median milliseconds of one batch, host inputs to host outputs, over windows."""
    def run():
        with torch.no_grad():
            out = model(*(torch.from_numpy(a).to(dev) for a in feeds.values()))
            out = out if isinstance(out, tuple) else (out,)
            return [o.cpu() for o in out]
    for _ in range(5):
        run()
    meds = []
    for _ in range(windows):
        t, end = [], time.perf_counter() + window_ms / 1e3
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            run()
            t.append((time.perf_counter() - t0) * 1e3)
        meds.append(statistics.median(t))
    return meds, run


def run_pa(exe, env, model, port, c, data_file, tmp, args, out_bytes):
    out = Path(tmp) / f"{model}-{c}.csv"
    argv = [str(exe), "-m", model, "-u", f"127.0.0.1:{port}", "-i", "grpc", "-b", str(BATCH),
            "--concurrency-range", f"{c}:{c}", "--measurement-interval", str(args.window_ms),
            "-s", "100000", "--max-trials", "4", "--percentile=99", "--input-data",
            str(data_file), "-f", str(out)]
    if not args.no_shm:
        argv += ["--shared-memory", "system", "--output-shared-memory-size", str(out_bytes)]
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    if p.returncode != 0:
        raise harness.CaseError(f"perf_analyzer exit {p.returncode} at concurrency {c}: "
                                f"{(p.stdout + p.stderr).strip()[-800:]}")
    row = next(csv.DictReader(out.open()))
    return float(row["Inferences/Second"]), int(row["p99 latency"])


def find_perf_analyzer():
    for cand in (os.environ.get("RTX_PERF_ANALYZER"), REPO / ".gpu" / "tools" / "perf_analyzer",
                 Path(sys.executable).parent / "perf_analyzer"):
        if cand and Path(cand).exists():
            return Path(cand).resolve()
    raise SystemExit("bench_onnx_served: no perf_analyzer: set RTX_PERF_ANALYZER, or make "
                     "gpu-pack where the venv has tritonclient[all] (it bundles the binary)")


def case(args, name, torch, report, tmp, exe, env, build):
    import test_onnx_torch as tot
    kw = dict(CASES[name], **QUICK[name]) if args.quick else CASES[name]
    dev = torch.device(args.device)
    kind = "KIND_CPU" if dev.type == "cpu" else "KIND_GPU"
    model = tot.make_models(torch)[name](**kw)
    repo = Path(tmp) / f"repo-{name}"
    (repo / name / "1").mkdir(parents=True)
    tot.export(torch, name, model, repo / name / "1" / "model.onnx", max_seq=kw["max_pos"])
    feeds = tot.example_inputs(name, BATCH, SEQ, seed=1, vocab=kw["vocab"])
    (repo / name / "config.pbtxt").write_text(
        config_pbtxt(name, kw, feeds, args.instances, kind, dev.index or 0))
    data_file = Path(tmp) / f"{name}-input.json"
    write_input_data(data_file, feeds)
    model = model.to(dev)
    before, eager = eager_batch_ms(torch, model, feeds, dev, args.window_ms / 2)
    ref = {n: o.numpy() for n, o in zip(tot.OUTPUT_NAMES[name], eager())}
    out_bytes = max(r.nbytes for r in ref.values())
    rundir = Path(tmp) / f"rtxd-{name}"
    rundir.mkdir()
    rtxd, grpc_port, http_port = bench_serving.start_rtxd(build, rundir, [name], repository=repo,
                                                          wait_s=180, who="bench_onnx_served")
    try:
        print("  " + bench_serving.describe(grpc_port, http_port, name), flush=True)
        check(LABEL[name], infer_http(http_port, name, feeds, list(ref)), ref)
        runs = {}
        for c in args.concurrency:
            runs[c] = run_pa(exe, env, name, grpc_port, c, data_file, tmp, args, out_bytes)
            print(f"  {name}: concurrency {c}: {runs[c][0]:.0f} infer/s, p99 "
                  f"{runs[c][1] / 1e3:.2f} ms", flush=True)
    finally:
        bench_serving.stop_rtxd(rtxd)
    after, _ = eager_batch_ms(torch, model, feeds, dev, args.window_ms / 2)
    wins = before + after
    ms = statistics.median(wins)
    eager_ips = BATCH * 1e3 / ms
    best = max(runs, key=lambda c: runs[c][0])
    ips, p99 = runs[best]
    levels = ", ".join(f"c{c} {runs[c][0]:.0f}" for c in args.concurrency)
    shp = ", ".join(f"{k} {BATCH}x{SEQ}" for k in feeds)
    how = "gRPC, system shared memory" if not args.no_shm else "gRPC, tensors in messages"
    report.row(f"{LABEL[name]}, batch {BATCH}, served", shp,
               f"perf_analyzer -b {BATCH}, {how}, {args.instances} {kind} instances",
               f"{ips:.0f} infer/s at concurrency {best} (p99 {p99 / 1e3:.2f} ms; {levels})",
               f"PyTorch eager: {eager_ips:.0f} infer/s ({ms:.3f} ms a batch, windows "
               f"{min(wins):.3f}..{max(wins):.3f})", ips / eager_ips, TARGET)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--report", action="store_true")
    ap.add_argument("--case", action="append", choices=sorted(CASES))
    ap.add_argument("--concurrency", default="1,2,4")
    ap.add_argument("--instances", type=int, default=2)
    ap.add_argument("--window-ms", type=int, default=3000)
    ap.add_argument("--no-shm", action="store_true")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        args.concurrency = [int(c) for c in args.concurrency.split(",") if c.strip()]
    except ValueError:
        ap.error("--concurrency: a comma-separated list of counts")
    if not args.concurrency or min(args.concurrency) < 1 or args.instances < 1:
        ap.error("--concurrency and --instances take counts >= 1")
    report = harness.Report(judge=not (args.report or harness.report_only(argv)))
    import skips
    try:
        import torch
    except ImportError as e:
        print(f"bench_onnx_served: needs PyTorch: {e}", file=sys.stderr)
        return 1
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        if skips.allowed("gpu") and not Path("/dev/nvidia0").exists():
            print("bench_onnx_served: skipped (no CUDA device, RTX_ALLOW_SKIP lists gpu)")
            return 0
        print("bench_onnx_served: no CUDA device", file=sys.stderr)
        return 1
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    build = Path(os.environ.get("RTX_BUILD") or REPO / "build").resolve()
    exe = find_perf_analyzer()
    env = bench_serving.perf_analyzer_env()
    # a bundled perf_analyzer finds its libraries (libcudart.so.12, libb64) beside it
    env["LD_LIBRARY_PATH"] = f"{exe.parent}:{env.get('LD_LIBRARY_PATH', '')}".rstrip(":")
    where = torch.cuda.get_device_name(args.device) if args.device != "cpu" else "cpu"
    print(f"device: {where}; torch {torch.__version__}; "
          f"perf_analyzer {exe}; window {args.window_ms} ms; concurrency {args.concurrency}",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="rtx-bench-onnx-served-") as tmp:
        for name in args.case or sorted(CASES):
            report.run_case(LABEL[name],
                            lambda: case(args, name, torch, report, tmp, exe, env, build))
    return report.finish()


if __name__ == "__main__":
    sys.exit(main())
