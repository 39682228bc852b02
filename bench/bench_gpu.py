"""bench_gpu.py - the CUDA backend against PyTorch on the same GPU, timed the same way.

rtxd's side is build/bin/rtx-bench-gpu (bench/bench-gpu.c) run as a driver (--serve,
bench/bench-driver.h); PyTorch's runs in this process. Every case is timed by bench_harness.py's one
method: warm-up, then windows of N runs back to back between two synchronizations, rtxd's and
PyTorch's windows alternating, the median window with its spread. Outputs are preallocated on
both sides where PyTorch allows it (matmul, add and softmax write into `out=`; layer norm,
whose out= form is the allocating op plus a copy, scaled_dot_product_attention and the
transformer block allocate from PyTorch's caching allocator). Each row names the route that ran on rtxd's side (for attention the route the
backend reports, not the one asked for), the two medians with their spread, the ratio and
its target; the device-to-device copy bandwidth (Tensor.copy_) is the bound the memory-bound
targets refer to.

Rows:
- GEMM, add + row, layer_norm, softmax, attention: rtxd's one-node graph vs the PyTorch op.
- block_io: the bf16 transformer block with x uploaded from pageable memory and y downloaded
  into pinned memory every run, vs eager PyTorch doing the same (x.cuda() from pageable, y
  copied into a preallocated pinned tensor); block_device (graph replay, node by node): x and
  y on the device, vs eager and vs torch.compile. rtxd's plan execution synchronizes at its
  end (as a job does), so the judged rows time PyTorch synchronizing after each run as well;
  eager without that synchronize is reported beside them.
- upload: 64 MiB from pageable host memory on both sides (torch: a preallocated device
  tensor's copy_ from pageable memory); download: into pinned memory on both sides (torch:
  a preallocated pinned tensor's copy_).
- allocator: one pseudo-random trace (the driver's) through rtx_mem_pool, judged against a
  warm cudaMallocAsync pool; raw cudaMalloc/cudaFree and PyTorch's caching allocator (through
  torch.empty from Python, so Python's call overhead is inside its figure) are reported.

After the table, an accuracy check: rtx-bench-gpu --attention-check writes small attention
cases (f16 and bf16, head dims 64 and 128, odd lengths, causal, boolean and additive masks)
with rtxd's GPU output; each is compared with PyTorch's scaled_dot_product_attention on the
same inputs, both against an f32 reference: rtxd passes when its max error is at most twice
PyTorch's own plus one unit of the dtype (2^-10 f16, 2^-7 bf16) times max |ref|.

Exit status: 1 when a case fails to run, the driver fails, an accuracy check fails, or a
judged target is missed (unless --report or RTX_BENCH_REPORT=1: then targets are reported,
not judged); 1 also when there is no CUDA device, unless RTX_ALLOW_SKIP lists "gpu" (the
tests' rule, tests/skips.py: none is meant to be there).

Usage (on the GPU machine, after `make all gpu-bundle` elsewhere): make bench-gpu
  python3 bench/bench_gpu.py [--report] [--check-only] [--harness-check] [--cases REGEX]
  --check-only: only the accuracy check; --cases: only cases whose "name shape" matches;
  --harness-check: checks that the verdicts can flip (a slowed rtxd, a slowed PyTorch, a
  failing case) on one attention case, running this script five times (make test-gpu).
Environment: RTX_BUILD (the build folder, default ./build), RTX_BENCH_ARGS (arguments for
rtx-bench-gpu, e.g. --quick or --attention), RTX_BENCH_WINDOWS (timed windows per side,
default 7), RTX_BENCH_WINDOW_MS (the length a window aims at, default 40),
RTX_BENCH_DELAY_US / RTX_BENCH_REF_DELAY_US (slow rtxd / PyTorch on purpose, bench_harness.py).
"""
import argparse
import functools
import json
import math
import os
import re
import subprocess
import sys
import tempfile

import bench_harness as H

TARGETS = {"gemm": 0.95, "attention": 0.8, "block": 1.3, "alloc": 1.0}
MEM_TARGET, COPY_TARGET = 1.0, 0.8


def gpu_may_be_absent():
    """RTX_ALLOW_SKIP lists "gpu" (tests/skips.py's rule, which this script shares)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    import skips
    return skips.allowed("gpu")


def driver_cmd(args=None):
    build = os.environ.get("RTX_BUILD", "build")
    cmd = [os.path.join(build, "bin", "rtx-bench-gpu")]
    return cmd + (os.environ.get("RTX_BENCH_ARGS", "").split() if args is None else args)


def run_rtx(args):
    """rtx-bench-gpu run once (not as a driver): its JSON lines."""
    cmd = driver_cmd(args)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    sys.stderr.write(proc.stderr)
    rows = []
    for line in proc.stdout.splitlines():
        print(line, flush=True)
        if line.startswith("{"):
            rows.append(json.loads(line))
    if proc.returncode != 0:
        rows.append({"name": "attention_check",
                     "error": f"{cmd[0]} exited with {proc.returncode}"})
    return rows


def torch_dtype(name):
    import torch
    return {"bf16": torch.bfloat16, "f32": torch.float32, "f16": torch.float16}[name]


def parse_dims(shape, sep="x"):
    return [int(v) for v in shape.split(sep)]


def sync():
    import torch
    torch.cuda.synchronize()


def with_out(fast, slow):
    """fast (writes a preallocated output) if this PyTorch runs it, else slow; and a label."""
    try:
        fast()
        return fast, "out="
    except (RuntimeError, TypeError, AttributeError):
        return slow, "allocates"


def op_reference(c):
    """(run, label) of PyTorch's side of one op case."""
    import torch
    import torch.nn.functional as F
    name, dt = c["name"], torch_dtype(c["dtype"])
    if name == "gemm":
        m, n, k = parse_dims(c["shape"])
        a = torch.randn(m, k, device="cuda", dtype=dt)
        b = torch.randn(k, n, device="cuda", dtype=dt) / math.sqrt(k)
        y = torch.empty(m, n, device="cuda", dtype=dt)
        return with_out(lambda: torch.matmul(a, b, out=y), lambda: torch.matmul(a, b))
    if name in ("add", "layer_norm", "softmax"):
        rows, cols = parse_dims(c["shape"])
        x = torch.randn(rows, cols, device="cuda", dtype=dt)
        w = torch.randn(cols, device="cuda", dtype=dt)
        bias = torch.randn(cols, device="cuda", dtype=dt)
        y = torch.empty_like(x)
        if name == "add":
            return with_out(lambda: torch.add(x, w, out=y), lambda: x + w)
        if name == "layer_norm":
            # native_layer_norm.out is generated as the allocating op plus a copy into out:
            # using it would charge PyTorch a copy rtxd does not make
            return (lambda: F.layer_norm(x, (cols,), w, bias, 1e-5)), "allocates"
        return with_out(lambda: torch.ops.aten._softmax.out(x, -1, False, out=y),
                        lambda: torch.softmax(x, -1))
    if name == "attention":
        parts = c["shape"].split()
        b, h, seq, d = (int(p[1:]) for p in parts[:4])
        causal = "causal" in parts
        q, k, v = (torch.randn(b, h, seq, d, device="cuda", dtype=dt) for _ in range(3))
        return (lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)), "allocates"
    return None, ""


def copy_bandwidth(windows):
    """GB/s of the device-to-device copy (torch copy_, 1 GiB bf16), the harness's way."""
    import torch
    src = torch.empty(1 << 29, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    ref = functools.partial(H.reference_window, lambda: dst.copy_(src), sync, slowable=False)
    ref(3)
    st = H.Stats([ref(10) for _ in range(windows)])
    ref = src = dst = None
    torch.cuda.empty_cache()
    return 2 * (1 << 29) * 2 / st.median / 1e6, st


@functools.lru_cache(maxsize=None)
def block_torch(shape):
    """The block's PyTorch functions for rtxd's shape: eager, eager with host copies (x from
    pageable memory, y into preallocated pinned memory) and torch.compile (None if it fails)."""
    import torch
    import torch.nn.functional as F
    parts = shape.replace("[", "").replace("]", "").split()
    batch, seq, width = (int(v) for v in parts[0].split(","))
    heads = int(parts[1][1:])
    ff, dt = 4 * width, torch.bfloat16

    def p(*dims, center=0.0, scale=1.0):
        return (center + scale * (2 * torch.rand(*dims, device="cuda") - 1)).to(dt)

    s, sf = 1 / math.sqrt(width), 1 / math.sqrt(ff)
    W = dict(ln1_s=p(width, center=1, scale=0.1), ln1_b=p(width, scale=0.1),
             wq=p(width, width, scale=s), bq=p(width, scale=s),
             wk=p(width, width, scale=s), bk=p(width, scale=s),
             wv=p(width, width, scale=s), bv=p(width, scale=s),
             wo=p(width, width, scale=s), bo=p(width, scale=s),
             ln2_s=p(width, center=1, scale=0.1), ln2_b=p(width, scale=0.1),
             w_up=p(width, ff, scale=s), b_up=p(ff, scale=s),
             w_down=p(ff, width, scale=sf), b_down=p(width, scale=sf))

    def block(x):
        h = F.layer_norm(x, (width,), W["ln1_s"], W["ln1_b"], 1e-5)

        def heads_of(w, b):
            return (h @ w + b).view(batch, seq, heads, width // heads).transpose(1, 2)

        q, k, v = heads_of(W["wq"], W["bq"]), heads_of(W["wk"], W["bk"]), \
            heads_of(W["wv"], W["bv"])
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        a = a.transpose(1, 2).reshape(batch, seq, width)
        res1 = x + (a @ W["wo"] + W["bo"])
        h2 = F.layer_norm(res1, (width,), W["ln2_s"], W["ln2_b"], 1e-5)
        u = F.gelu(h2 @ W["w_up"] + W["b_up"], approximate="tanh")
        return res1 + (u @ W["w_down"] + W["b_down"])

    x = p(batch, seq, width)
    x_host = x.cpu()  # pageable
    y_pinned = torch.empty(batch, seq, width, dtype=dt, pin_memory=True)

    def eager():
        with torch.no_grad():
            block(x)

    def eager_io():
        with torch.no_grad():
            y_pinned.copy_(block(x_host.cuda()))

    def run_compiled():
        with torch.no_grad():
            cb(x)

    compiled = None
    try:
        cb = torch.compile(block)
        for _ in range(3):
            run_compiled()
        sync()
        compiled = run_compiled
    except Exception as e:  # noqa: BLE001 - report the row as failed and go on
        print(f"torch.compile failed: {e}", file=sys.stderr)
    return eager, eager_io, compiled


def transfer_reference(c):
    """PyTorch's side of a 64 MiB transfer: pageable upload or download into pinned memory."""
    import torch
    n = int(c["bytes"]) // 2
    if c["name"] == "upload":
        src = torch.rand(n).to(torch.bfloat16)  # pageable
        dst = torch.empty(n, device="cuda", dtype=torch.bfloat16)
        return lambda: dst.copy_(src)
    src = torch.rand(n, device="cuda").to(torch.bfloat16)
    dst = torch.empty(n, dtype=torch.bfloat16, pin_memory=True)
    return lambda: dst.copy_(src)


def alloc_trace_torch(ops):
    """One pass of bench-gpu.c's allocator trace through PyTorch's caching allocator."""
    import torch
    mask = (1 << 64) - 1
    s = 0x2545f4914f6cdd1d
    slots = [None] * 256

    def nxt():
        nonlocal s
        s ^= (s << 13) & mask
        s ^= s >> 7
        s ^= (s << 17) & mask
        return s

    def run():
        nonlocal s
        s = 0x2545f4914f6cdd1d
        for _ in range(ops):
            k = nxt() % 256
            if slots[k] is not None:
                slots[k] = None
            else:
                bits = 9 + nxt() % 13
                n = (1 << bits) + nxt() % (1 << bits)
                slots[k] = torch.empty(n, dtype=torch.uint8, device="cuda")
        for k in range(256):
            slots[k] = None
    return run

def load_raw(path, dtype, shape):
    """A raw little-endian file of rtxd's dtype as a torch tensor on the GPU."""
    import numpy as np
    import torch
    if dtype == "bf16":
        bits = np.fromfile(path, dtype="<u2").astype(np.uint32) << 16
        a = torch.from_numpy(bits.view(np.float32).reshape(shape)).to(torch.bfloat16)
    elif dtype == "f16":
        a = torch.from_numpy(np.fromfile(path, dtype="<f2").reshape(shape))
    elif dtype == "bool":
        a = torch.from_numpy(np.fromfile(path, dtype="u1").reshape(shape) != 0)
    else:
        raise ValueError(f"attention check: dtype {dtype}")
    return a.cuda()


def attention_check():
    """rtxd's attention output against PyTorch SDPA on the same inputs; returns failures."""
    import torch
    import torch.nn.functional as F
    unit = {"f16": 2.0 ** -10, "bf16": 2.0 ** -7}
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        rows = [r for r in run_rtx(["--attention-check", tmp])
                if r.get("name") == "attention_check"]
        if not rows:
            print("attention check: rtx-bench-gpu wrote no case")
            return 1
        print("| attention vs torch SDPA | shape | rtxd err | torch err | bound | |")
        print("| --- | --- | --- | --- | --- | --- |")
        for r in rows:
            if "error" in r:
                print(f"| case | | error: {r['error']} | | | FAIL |")
                failures += 1
                continue
            b, h, lq, lk, d = r["b"], r["h"], r["lq"], r["lk"], r["d"]
            dt, pre = r["dtype"], r["prefix"]
            q = load_raw(pre + "q.bin", dt, (b, h, lq, d))
            k = load_raw(pre + "k.bin", dt, (b, h, lk, d))
            v = load_raw(pre + "v.bin", dt, (b, h, lk, d))
            out = load_raw(pre + "out.bin", dt, (b, h, lq, d)).float()
            mask = None
            if r["mask"] == "bool":  # [lk] in rtxd; torch wants rank >= 2
                mask = load_raw(pre + "mask.bin", "bool", (1, lk))
            elif r["mask"] == "additive":
                mask = load_raw(pre + "mask.bin", dt, (b, 1, lq, lk))
            causal = bool(r["causal"])
            ref = F.scaled_dot_product_attention(
                q.float(), k.float(), v.float(),
                attn_mask=None if mask is None else (mask if mask.dtype == torch.bool
                                                     else mask.float()),
                is_causal=causal)
            low = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                 is_causal=causal).float()
            mag = ref.abs().max().item()
            e_rtx = (out - ref).abs().max().item()
            e_torch = (low - ref).abs().max().item()
            bound = 2 * e_torch + unit[dt] * max(mag, 1e-30)
            ok = e_rtx <= bound
            failures += 0 if ok else 1
            what = (f"{dt} b{b} h{h} lq{lq} lk{lk} d{d}" + (" causal" if causal else "")
                    + ("" if r["mask"] == "none" else f" mask {r['mask']}"))
            print(f"| {what} | | {e_rtx:.3g} | {e_torch:.3g} | {bound:.3g} | "
                  f"{'ok' if ok else 'FAIL'} |", flush=True)
    print(f"attention check: {len(rows) - failures} passed, {failures} failed")
    return failures



def harness_check():
    """The verdicts can flip, on one attention case (L 1k, D 64; its target 0.8x sits well
    below the parity both sides reach through cuDNN): met as it is, MISSED with rtxd slowed,
    met again with PyTorch slowed more, MISSED but exit 0 with --report, and a failed case
    (a bad RTX_ATTN_ROUTE) fails the run. Runs this script as a child each time; returns the
    number of wrong outcomes."""
    script = os.path.abspath(__file__)
    case = ["--cases", "^attention bf16 b8 h16 l1024 d64$", "--no-accuracy"]
    quick = {"RTX_BENCH_ARGS": "--quick --attention", "RTX_BENCH_WINDOWS": "3"}
    slow = {"RTX_BENCH_DELAY_US": "20000"}
    runs = [
        ("as it is", [], {}, 0, "met"),
        ("rtxd slowed by 20 ms per run", [], slow, 1, "MISSED"),
        ("rtxd slowed by 20 ms, PyTorch by 100 ms", [],
         {**slow, "RTX_BENCH_REF_DELAY_US": "100000"}, 0, "met"),
        ("report only, rtxd slowed", ["--report"], slow, 0, "MISSED"),
        ("a case that fails to run", [], {"RTX_ATTN_ROUTE": "no-such-route"}, 1, "FAILED"),
    ]
    # the knobs each run sets come from nothing else in the environment
    knobs = ("RTX_ATTN_ROUTE", "RTX_BENCH_DELAY_US", "RTX_BENCH_REF_DELAY_US",
             "RTX_BENCH_REPORT", "RTX_BENCH_WINDOW_MS", "RTX_BENCH_WINDOWS", "RTX_BENCH_ARGS")
    base = {k: v for k, v in os.environ.items() if k not in knobs}
    wrong = 0
    for what, args, env, want_rc, want_word in runs:
        p = subprocess.run([sys.executable, script] + case + args, capture_output=True,
                           text=True, env={**base, **quick, **env})
        rows = [ln for ln in p.stdout.splitlines() if ln.startswith("| attention |")]
        ok = (p.returncode == want_rc and len(rows) == 1
              and rows[0].rstrip(" |").endswith(want_word))
        route = rows[0].strip(" |").split(" | ")[2] if rows else ""
        if what == "as it is" and route != "cudnn":
            # the 0.8x target has its margin with cuDNN on both sides only
            ok = False
            print(f"harness check: rtxd's attention ran '{route}', not cudnn: cuDNN must load "
                  "for this check (the GPU tests say why it did not)")
        wrong += 0 if ok else 1
        print(f"harness check: {what}: exit {p.returncode} (want {want_rc}), row "
              f"{rows[0] if rows else 'missing'} (want {want_word}): "
              f"{'ok' if ok else 'WRONG'}", flush=True)
        if not ok:
            print(p.stdout + p.stderr)
    print(f"harness check: {len(runs) - wrong} passed, {wrong} failed")
    return wrong


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--report", action="store_true", help="report targets without judging")
    ap.add_argument("--check-only", action="store_true", help="only the accuracy check")
    ap.add_argument("--no-accuracy", action="store_true", help="skip the accuracy check")
    ap.add_argument("--harness-check", action="store_true",
                    help="check that verdicts flip (slowed sides, a failing case)")
    ap.add_argument("--cases", help="only cases whose 'name dtype shape' matches this regex")
    args = ap.parse_args()
    drv = H.Driver(driver_cmd())
    try:
        cases = drv.cases()
    except H.CaseError as e:
        drv.close()
        if "no CUDA device" in str(e) and gpu_may_be_absent():
            print(f"bench_gpu: skipped (RTX_ALLOW_SKIP=gpu): {e}")
            return 0
        print(f"bench_gpu: FAILED: {e}")
        return 1
    if args.harness_check or args.check_only:
        drv.close()
        if args.check_only:
            return 1 if attention_check() else 0
        return 1 if harness_check() else 0
    windows = int(os.environ.get("RTX_BENCH_WINDOWS", "7"))
    window_ms = float(os.environ.get("RTX_BENCH_WINDOW_MS", "40"))
    import torch
    print(f"# {torch.cuda.get_device_name(0)}, torch {torch.__version__}, cuDNN "
          f"{torch.backends.cudnn.version()}; {windows} windows of ~{window_ms:.0f} ms per "
          f"side, alternating; median (+-half the min..max spread)", flush=True)
    rep = H.Report(judge=not H.report_only())
    copy_gbps, copy_st = copy_bandwidth(windows)
    rep.note("device copy (torch copy_)", "bf16 1 GiB", f"{copy_gbps:.0f} GB/s "
             f"(+-{100 * copy_st.spread / 2:.0f}%)")
    by_name = {}
    for c in cases:
        by_name.setdefault(c["name"], []).append(c["case"])

    def compare(i, run_ref, reps=None):
        ours = functools.partial(drv.window, i)
        ref = functools.partial(H.reference_window, run_ref, sync)
        return H.compare(ours, ref, reps or H.reps_for(ours, window_ms), windows)

    def rate(st, per_run, unit, scale):
        return f"{per_run / st.median / scale:.1f} {unit} (+-{100 * st.spread / 2:.0f}%)"

    for c in cases:
        i, name = c["case"], c["name"]
        what = f"{name} {c['dtype']} {c['shape']}"
        if args.cases and not re.search(args.cases, what):
            continue
        if name in ("alloc_async", "alloc_cudamalloc"):
            continue  # the baselines of alloc_pool
        shape = f"{c['dtype']} {c['shape']}"
        try:
            info = drv.prepare(i)
            route = info["route"]
            if name in ("gemm", "attention"):
                run_ref, how = op_reference(info)
                a, b = compare(i, run_ref)
                f = info["flops"]
                rep.row(name, shape, route, rate(a, f, "TFLOP/s", 1e9),
                        rate(b, f, "TFLOP/s", 1e9) + f" ({how})", b.median / a.median,
                        TARGETS[name])
            elif name in ("add", "layer_norm", "softmax"):
                run_ref, how = op_reference(info)
                a, b = compare(i, run_ref)
                by = info["bytes"]
                gb = by / a.median / 1e6
                rep.row(name, shape, route, rate(a, by, "GB/s", 1e6),
                        rate(b, by, "GB/s", 1e6) + f" ({how})", b.median / a.median,
                        MEM_TARGET)
                rep.row(f"{name} vs device copy", shape, route, f"{gb:.0f} GB/s",
                        f"copy {copy_gbps:.0f} GB/s", gb / copy_gbps, COPY_TARGET)
            elif name == "block_io":
                _, eager_io, _ = block_torch(info["shape"])
                a, b = compare(i, eager_io)
                rep.row("block vs eager with the same copies", shape, route, a.text(),
                        b.text(), b.median / a.median, TARGETS["block"])
            elif name == "block_device":
                eager, _, compiled = block_torch(info["shape"])
                synced = lambda f: lambda: (f(), sync())  # noqa: E731
                a, b = compare(i, synced(eager))
                rep.row(f"block ({route}) vs eager, both synchronized per run", shape, route,
                        a.text(), b.text(), b.median / a.median, TARGETS["block"])
                a, b = compare(i, eager)
                rep.row(f"block ({route}) vs eager not synchronized per run", shape, route,
                        a.text(), b.text(), b.median / a.median)
                if compiled is None:  # a row that could not be measured is a failure
                    rep.error("block vs torch.compile", shape, "torch.compile failed")
                else:
                    a, b = compare(i, synced(compiled))
                    rep.row(f"block ({route}) vs torch.compile, both synchronized per run",
                            shape, route, a.text(), b.text(), b.median / a.median)
            elif name in ("upload", "download"):
                a, b = compare(i, transfer_reference(info))
                by = info["bytes"]
                rep.row(name, shape, route, rate(a, by, "GB/s", 1e6),
                        rate(b, by, "GB/s", 1e6) + " (torch copy_)", b.median / a.median)
            elif name == "alloc_pool":
                ops = int(info["shape"].split()[0])
                per_op = lambda st, n: st.median * 1e6 / n  # noqa: E731 - ns per op
                ours = functools.partial(drv.window, i)
                reps = H.reps_for(ours, window_ms)
                for base in by_name.get("alloc_async", []) + by_name.get("alloc_cudamalloc",
                                                                         []):
                    binfo = drv.prepare(base)
                    bops = int(binfo["shape"].split()[0])
                    judged = binfo["name"] == "alloc_async"
                    a, b = H.compare(ours, functools.partial(drv.window, base),
                                     reps if judged else 3, windows if judged else 3)
                    rep.row(f"alloc vs {binfo['route']}", c["shape"], route,
                            f"{per_op(a, ops):.0f} ns/op", f"{per_op(b, bops):.0f} ns/op",
                            per_op(b, bops) / per_op(a, ops),
                            TARGETS["alloc"] if judged else None)
                    drv.release(base)
                a, b = H.compare(ours, functools.partial(
                    H.reference_window, alloc_trace_torch(ops), sync), 2, 3)
                rep.row("alloc vs PyTorch caching allocator (torch.empty from Python)",
                        c["shape"], route, f"{per_op(a, ops):.0f} ns/op",
                        f"{per_op(b, ops):.0f} ns/op", per_op(b, ops) / per_op(a, ops))
            else:
                rep.error(name, shape, "no PyTorch reference for this case")
        except H.CaseError as e:
            rep.error(name, shape, str(e))
        except Exception as e:  # noqa: BLE001 - PyTorch's side failed: a failed row, go on
            rep.error(name, shape, f"{type(e).__name__}: {e}")
        try:
            drv.release(i)
        except H.CaseError:
            pass
        torch.cuda.empty_cache()
    rep.print_table()
    status = rep.exit_status()
    rc = drv.close()
    if rc:
        print(f"bench_gpu: FAILED: rtx-bench-gpu exited with {rc}")
        status = 1
    if not args.no_accuracy and attention_check():
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
