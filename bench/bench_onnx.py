#!/usr/bin/env python3
"""
bench_onnx.py (make bench-onnx, make bench-onnx-gpu) - ONNX models end to end: rtxd (rtxrun)
against onnxruntime on the same .onnx file, timed the same way in the same run.

CPU (the default; the venv's Python): the models of tests/interop/test_onnx_models.py
(tests/interop/onnx_models.py) at CI-sized shapes: an MLP, a ResNet-style CNN, a BERT-style
encoder layer and a GPT-2-style decoder block. rtxd's side is `rtxrun MODEL.onnx --input ...
--threads T --warmup 1 --repeat N --json` (the model loaded and instantiated once per
window, outside the timing: rtxrun times execution only), onnxruntime's an InferenceSession
of the same file with the CPU provider, its default graph optimizations (ORT_ENABLE_ALL) and
intra_op_num_threads T, inter_op 1. T is --threads (default: one per online CPU, as rtxrun).
Target >= 1.0x onnxruntime (issue 14).

CUDA (--device cuda[:N], on the GPU machine with its python3): the PyTorch models of
tests/gpu/test_onnx_torch.py at batch 32 (a ResNet on 32x32 images, a BERT-style encoder and a
GPT-2-style decoder of 2 layers at width 768, sequence 128) exported by torch.onnx.export;
rtxrun --device cuda (its time includes the inputs' upload and the outputs' download) against
PyTorch eager on the same GPU doing the same (inputs from host memory, outputs back to the
host, TF32 off), and against onnxruntime's CUDA provider when its wheel there has one (a row
says when it has not). These rows are reported, not judged: issue 14's GPU target (>= 1.2x
PyTorch eager for the encoder and decoder at batch 32) is for the served path
(perf_analyzer), not for rtxrun.

Timing (bench/bench_harness.py): a warm-up window per side, then windows alternating between
the sides (rtxd, reference, reference, rtxd, ...), each after a short pause (OpenBLAS's and
onnxruntime's idle threads spin after their last call); a window's figure is the median of
its runs on both sides (rtxrun reports its runs' median); the table gives the median window
with its spread, the ratio (> 1: rtxd is faster) and the verdict. Before any timing, rtxrun's
outputs are checked against the reference's (f32 within 1e-4 relative plus 1e-5 of the
output's scale on the CPU, 1e-4 on the GPU): a reference that computes something else is no
reference, and the case fails.

Options: --quick (small batches, short windows: seconds), --report (or RTX_BENCH_REPORT=1:
report without judging), --threads N, --case NAME (repeatable: mlp, resnet, bert, gpt2),
--windows N, --device cpu|cuda[:N]. Exit status (harness.Report): 1 when a case failed, or a
judged target was missed unless --report. Needs RTX_BUILD (the Makefile sets it).
"""

import argparse
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
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests" / "interop"))
sys.path.insert(0, str(REPO / "tests" / "gpu"))
import bench_harness as harness  # noqa: E402

CPU_TARGET = 1.0
NAMES = ("mlp", "resnet", "bert", "gpt2")
# CPU: builder keyword arguments (tests/interop/onnx_models.py) and the input shape
CPU_CASES = {
    "mlp": ({"d_in": 256, "hidden": 512}, (64,), (4,)),
    "resnet": ({"ch": 32, "size": 32}, (8,), (2,)),
    "bert": ({"vocab": 1000, "max_pos": 128, "d": 128, "heads": 4, "ff": 512}, (8, 64),
             (2, 32)),
    "gpt2": ({"vocab": 1000, "max_pos": 128, "d": 128, "heads": 4}, (8, 64), (2, 32)),
}
LABEL = {"mlp": "MLP", "resnet": "ResNet-style CNN", "bert": "BERT-style encoder",
         "gpt2": "GPT-2-style decoder"}
# CUDA: tests/gpu/test_onnx_torch.py's builders with these sizes, at batch 32
GPU_CASES = {
    "resnet": ({"ch": 64}, 32, None),
    "bert": ({"vocab": 30522, "d": 768, "heads": 12, "ff": 3072, "layers": 2,
              "max_pos": 512}, 32, 128),
    "gpt2": ({"vocab": 50257, "d": 768, "heads": 12, "layers": 2, "max_pos": 1024}, 32, 128),
}


def rtx_ops_text(ops):
    if not ops:
        return "-"
    top = sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))
    return f"{sum(ops.values())} rtx nodes: " + ", ".join(f"{k} {v}" for k, v in top)


class RtxSide:
    """rtxrun on one model and its inputs: a check run, then windows."""

    def __init__(self, model_path, feeds, workdir, threads, device):
        self.bin = Path(os.environ.get("RTX_BUILD") or REPO / "build").resolve() / "bin" / \
            "rtxrun"
        if not os.access(self.bin, os.X_OK):
            raise harness.CaseError(f"{self.bin} is missing (make all)")
        self.args = [str(self.bin), str(model_path), "--device", device, "--threads",
                     str(threads), "--json"]
        for i, (k, a) in enumerate(feeds.items()):
            p = Path(workdir) / f"in{i}.npy"
            np.save(p, a, allow_pickle=False)
            self.args += ["--input", f"{k}={p}"]
        self.out = Path(workdir) / "out"

    def _run(self, extra):
        p = subprocess.run(self.args + extra, capture_output=True, text=True, timeout=600,
                           stdin=subprocess.DEVNULL)
        if p.returncode != 0:
            raise harness.CaseError(f"rtxrun exit {p.returncode}: {p.stderr.strip()[-500:]}")
        return json.loads(p.stdout)

    def outputs(self):
        j = self._run(["--output-dir", str(self.out)])
        return {o["name"]: np.load(o["file"], allow_pickle=False) for o in j["outputs"]}, \
            j.get("ops")

    def window(self, reps):
        return self._run(["--warmup", "1", "--repeat", str(reps), "--quiet"])["time_ms"]["median"]


def median_window(run, reps):
    """Median milliseconds per run over reps runs of run() (the reference's window);
    RTX_BENCH_REF_DELAY_US is waited inside each timed run (a slowed reference)."""
    delay = harness._env_us("RTX_BENCH_REF_DELAY_US")
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        run()
        if delay:
            time.sleep(delay)
        t.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(t)


def check(name, got, ref, frac):
    for k, r in ref.items():
        g = got.get(k)
        if g is None:
            raise harness.CaseError(f"{name}: rtxrun gave no output {k} (gave {list(got)})")
        if g.shape != r.shape:
            raise harness.CaseError(f"{name}: {k} shape {g.shape}, reference {r.shape}")
        r64, g64 = r.astype(np.float64), g.astype(np.float64)
        err = np.abs(g64 - r64)
        lim = 1e-4 * np.abs(r64) + frac * max(1.0, float(np.abs(r64).max()))
        if not (err <= lim).all():
            raise harness.CaseError(f"{name}: {k} differs from the reference's: max abs diff "
                                    f"{float(err.max()):.3g} (allowed {float(lim.min()):.3g}"
                                    f" and up)")
    print(f"{name}: rtxrun's outputs match the reference's", flush=True)


def timed(args, ours, ref):
    settle = args.settle_s

    def o(reps):
        time.sleep(settle)
        return ours(reps)

    def r(reps):
        time.sleep(settle)
        return ref(reps)
    reps = min(harness.reps_for(o, args.window_ms), harness.reps_for(r, args.window_ms))
    return harness.compare(o, r, reps, windows=args.windows)


# ------------------------------------------------------------------------------------------
# CPU: against onnxruntime's CPU provider
# ------------------------------------------------------------------------------------------

def cpu_case(args, name, report, tmp):
    import onnx_models as om
    kw, shape, quick_shape = CPU_CASES[name]
    shape = quick_shape if args.quick else shape
    model, feeds_fn = om.MODELS[name](**kw)
    feeds = feeds_fn(*shape, seed=1)
    d = Path(tmp) / name
    d.mkdir()
    mp = d / "model.onnx"
    mp.write_bytes(model.SerializeToString())
    rtx = RtxSide(mp, feeds, d, args.threads, "cpu")
    sess = om.ort_session(model, threads=args.threads, optimize=True)
    got, ops = rtx.outputs()
    check(LABEL[name], got, dict(zip([o.name for o in sess.get_outputs()],
                                     sess.run(None, feeds))), 1e-5)
    ours, ref = timed(args, rtx.window, lambda reps: median_window(
        lambda: sess.run(None, feeds), reps))
    shp = ", ".join(f"{k} {'x'.join(map(str, a.shape))}" for k, a in feeds.items())
    report.row(f"{LABEL[name]}, batch {shape[0]}", shp, rtx_ops_text(ops), ours.text(),
               f"onnxruntime CPU ({args.threads} threads): {ref.text()}",
               ref.median / ours.median, CPU_TARGET)


# ------------------------------------------------------------------------------------------
# CUDA: against PyTorch eager and onnxruntime's CUDA provider
# ------------------------------------------------------------------------------------------

def gpu_case(args, name, report, tmp, torch, ort):
    import test_onnx_torch as tot
    kw, batch, seq = GPU_CASES[name]
    if args.quick:
        batch = 4
    model = tot.make_models(torch)[name](**kw)
    d = Path(tmp) / name
    d.mkdir()
    mp = d / "model.onnx"
    tot.export(torch, name, model, mp, max_seq=kw.get("max_pos", 64))
    feeds = tot.example_inputs(name, batch, seq, seed=1, vocab=kw.get("vocab", 100))
    dev = torch.device(args.device)
    model = model.to(dev)
    rtx = RtxSide(mp, feeds, d, args.threads, args.device)

    def eager():
        with torch.no_grad():
            out = model(*(torch.from_numpy(a).to(dev) for a in feeds.values()))
            out = out if isinstance(out, tuple) else (out,)
            return [o.cpu() for o in out]
    got, ops = rtx.outputs()
    check(f"{LABEL[name]} (PyTorch)", got, {n: o.numpy() for n, o in
                                          zip(tot.OUTPUT_NAMES[name], eager())}, 1e-4)
    shp = ", ".join(f"{k} {'x'.join(map(str, a.shape))}" for k, a in feeds.items())
    label = f"{LABEL[name]}, batch {batch}"
    ours, ref = timed(args, rtx.window, lambda reps: median_window(eager, reps))
    report.row(label, shp, rtx_ops_text(ops), ours.text(), f"PyTorch eager: {ref.text()}",
               ref.median / ours.median)
    if ort is None or "CUDAExecutionProvider" not in ort.get_available_providers():
        have = "not importable" if ort is None else \
            f"providers {', '.join(ort.get_available_providers())}"
        report.note(label, shp, "onnxruntime CUDA provider: none here", have)
        return
    idx = int(args.device.split(":")[1]) if ":" in args.device else 0
    # TF32 off, as for PyTorch: the outputs are checked at f32 accuracy
    sess = ort.InferenceSession(str(mp), providers=[("CUDAExecutionProvider",
                                                     {"device_id": idx, "use_tf32": 0})])
    check(f"{LABEL[name]} (onnxruntime CUDA)", got,
          dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds))), 1e-4)
    ours, ref = timed(args, rtx.window, lambda reps: median_window(
        lambda: sess.run(None, feeds), reps))
    report.row(label, shp, "same", ours.text(), f"onnxruntime CUDA: {ref.text()}",
               ref.median / ours.median)


# ------------------------------------------------------------------------------------------
# Main
# ------------------------------------------------------------------------------------------

OPTIONS = {
    "--quick": {"action": "store_true", "help": "small batches, short windows"},
    "--report": {"action": "store_true", "help": "report without judging targets"},
    "--threads": {"type": int, "default": 0,
                  "help": "CPU threads of each side (default 0: one per online CPU)"},
    "--case": {"action": "append", "choices": NAMES, "help": "only this model (repeatable)"},
    "--windows": {"type": int, "default": 0, "help": "timed windows per side"},
    "--device": {"default": "cpu", "help": "cpu (default), cuda or cuda:N"},
}


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name, kw in OPTIONS.items():
        ap.add_argument(name, **kw)
    args = ap.parse_args(argv)
    if args.threads < 0 or args.windows < 0:
        ap.error("--threads and --windows take a count >= 0 (0: the default)")
    if args.device != "cpu" and not args.device.startswith("cuda"):
        ap.error("--device: cpu, cuda or cuda:N")
    args.windows = args.windows or (3 if args.quick else 7)
    args.window_ms = 30.0 if args.quick else 250.0
    args.settle_s = 0.0 if args.quick else 0.25
    args.threads = args.threads or os.cpu_count() or 1
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    report = harness.Report(judge=not harness.report_only(argv))
    gpu = args.device.startswith("cuda")
    torch = ort = None
    if gpu:
        sys.path.insert(0, str(REPO / "tests"))
        import skips
        try:
            import torch
        except ImportError as e:
            print(f"bench_onnx: --device {args.device} needs PyTorch: {e}", file=sys.stderr)
            return 1
        if not torch.cuda.is_available():
            if skips.allowed("gpu") and not Path("/dev/nvidia0").exists():
                print("bench_onnx: skipped (no CUDA device, RTX_ALLOW_SKIP lists gpu)")
                return 0
            print("bench_onnx: no CUDA device (torch.cuda.is_available() is False)",
                  file=sys.stderr)
            return 1
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        try:
            import onnxruntime as ort
        except ImportError:
            ort = None
        print(f"device: {torch.cuda.get_device_name(args.device)}; torch {torch.__version__}; "
              f"onnxruntime {ort.__version__ if ort else 'not importable'}")
        names = [n for n in (args.case or NAMES) if n in GPU_CASES]
    else:
        import onnxruntime as ort
        print(f"machine: {os.cpu_count()} logical CPUs, load average "
              f"{os.getloadavg()[0]:.2f}; onnxruntime {ort.__version__}; threads {args.threads}"
              f" on each side (rtxrun --threads, onnxruntime intra_op_num_threads)")
        names = list(args.case or NAMES)
    print(f"windows: {args.windows} per side after 1 warm-up window, alternating, about "
          f"{args.window_ms:.0f} ms each, each after a {args.settle_s:g} s pause; the median "
          f"window (+- half its spread) of per-window median run times", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            report.run_case(LABEL[name], lambda: gpu_case(args, name, report, tmp, torch, ort)
                            if gpu else cpu_case(args, name, report, tmp))
    return report.finish()


if __name__ == "__main__":
    sys.exit(main())
