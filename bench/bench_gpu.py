"""bench_gpu.py - the CUDA backend against PyTorch on the same GPU, in one run.

Runs build/bin/rtx-bench-gpu (bench/bench-gpu.c: one JSON line per case), then the same cases
in PyTorch in this process: same shapes and dtypes, CUDA-event timing of each call after
warm-up, the median. Also the device-to-device copy bandwidth (Tensor.copy_), which the
memory-bound targets are measured against, and the transformer block under torch.compile.
Prints one table: rtxd's figure, PyTorch's, the ratio, the target and met/MISSED.

Attention rows name the route rtxd ran (the fused kernel unless RTX_ATTN_ROUTE says otherwise,
docs/gpu.md). After the table, an accuracy check: rtx-bench-gpu --attention-check writes small
attention cases (f16 and bf16, head dims 64 and 128, odd lengths, causal, boolean and additive
masks) with rtxd's GPU output; each is compared with PyTorch's scaled_dot_product_attention on
the same inputs, both against an f32 reference: rtxd passes when its max error is at most
twice PyTorch's own plus one unit of the dtype (2^-10 f16, 2^-7 bf16) times max |ref|.
The exit status is 1 when a check fails.

Usage (on the GPU machine, after `make all gpu-bundle` elsewhere): make bench-gpu
  python3 bench/bench_gpu.py [--check-only]   (--check-only: only the accuracy check)
Environment: RTX_BUILD (the build folder, default ./build), RTX_BENCH_ARGS (extra arguments
for rtx-bench-gpu, e.g. --quick or --attention).
"""
import functools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time


def run_rtx(args=None):
    build = os.environ.get("RTX_BUILD", "build")
    cmd = [os.path.join(build, "bin", "rtx-bench-gpu")]
    cmd += os.environ.get("RTX_BENCH_ARGS", "").split() if args is None else args
    proc = subprocess.run(cmd, capture_output=True, text=True)
    sys.stderr.write(proc.stderr)
    if proc.returncode != 0:
        print(f"bench_gpu: {cmd[0]} exited with {proc.returncode}", file=sys.stderr)
    rows = []
    for line in proc.stdout.splitlines():
        print(line, flush=True)
        if line.startswith("{"):
            rows.append(json.loads(line))
    return rows


def cuda_time_ms(fn, warmup=3, reps=20):
    """Median milliseconds of fn() by CUDA events around each call."""
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def torch_dtype(name):
    import torch
    return {"bf16": torch.bfloat16, "f32": torch.float32, "f16": torch.float16}[name]


def parse_dims(shape, sep="x"):
    return [int(v) for v in shape.split(sep)]


def torch_case(r):
    """PyTorch's figure for one rtxd row: (ms, tflops or None, gbps or None)."""
    import torch
    import torch.nn.functional as F
    name, dt = r["name"], torch_dtype(r["dtype"])
    if name == "gemm":
        m, n, k = parse_dims(r["shape"])
        a = torch.randn(m, k, device="cuda", dtype=dt)
        b = torch.randn(k, n, device="cuda", dtype=dt) / math.sqrt(k)
        ms = cuda_time_ms(lambda: torch.matmul(a, b), reps=30)
        return ms, 2.0 * m * n * k / ms / 1e9, None
    if name in ("add", "layer_norm", "softmax"):
        rows, cols = parse_dims(r["shape"])
        x = torch.randn(rows, cols, device="cuda", dtype=dt)
        w = torch.randn(cols, device="cuda", dtype=dt)
        bias = torch.randn(cols, device="cuda", dtype=dt)
        es = x.element_size()
        if name == "add":
            fn, moved = (lambda: x + w), 2 * x.numel() * es + cols * es
        elif name == "layer_norm":
            fn = lambda: F.layer_norm(x, (cols,), w, bias)  # noqa: E731
            moved = 2 * x.numel() * es + 2 * cols * es
        else:
            fn, moved = (lambda: torch.softmax(x, -1)), 2 * x.numel() * es
        ms = cuda_time_ms(fn)
        return ms, None, moved / ms / 1e6
    if name == "attention":
        parts = r["shape"].split()
        b, h, seq, d = (int(p[1:]) for p in parts[:4])
        causal = "causal" in parts
        q, k, v = (torch.randn(b, h, seq, d, device="cuda", dtype=dt) for _ in range(3))
        ms = cuda_time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                          reps=10)
        flops = 4.0 * b * h * seq * seq * d / (2 if causal else 1)
        return ms, flops / ms / 1e9, None
    return None


def copy_bandwidth():
    import torch
    src = torch.empty(1 << 29, device="cuda", dtype=torch.bfloat16)  # 1 GiB
    dst = torch.empty_like(src)
    ms = cuda_time_ms(lambda: dst.copy_(src))
    return 2 * src.numel() * src.element_size() / ms / 1e6


@functools.lru_cache(maxsize=None)
def block_torch(shape):
    """Eager, eager with the host copies rtxd's figure includes, and torch.compile (ms)."""
    import torch
    import torch.nn.functional as F
    parts = shape.replace("bf16[", "").replace("]", "").split()
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
    with torch.no_grad():
        eager = cuda_time_ms(lambda: block(x), warmup=5, reps=50)
        x_host = x.cpu()
        for _ in range(3):
            block(x_host.cuda()).cpu()
        times = []
        for _ in range(30):
            t0 = time.perf_counter()
            block(x_host.cuda()).cpu()
            times.append((time.perf_counter() - t0) * 1e3)
        eager_io = statistics.median(times)
        try:
            compiled = torch.compile(block)
            comp = cuda_time_ms(lambda: compiled(x), warmup=5, reps=50)
        except Exception as e:  # noqa: BLE001 - report and go on
            print(f"torch.compile failed: {e}", file=sys.stderr)
            comp = float("nan")
    return eager, eager_io, comp


def transfer_torch(nbytes, reps=10):
    """PyTorch's pageable host->device (.cuda()) and device->host (.cpu()) GB/s."""
    import torch
    x = torch.rand(nbytes // 2).to(torch.bfloat16)  # pageable host memory
    up = down = 0.0
    for i in range(reps + 1):  # one warm-up
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        d = x.cuda()
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        d.cpu()
        t2 = time.perf_counter()
        if i:
            up, down = up + t1 - t0, down + t2 - t1
    return nbytes * reps / up / 1e9, nbytes * reps / down / 1e9


def verdict(ratio, target):
    return "met" if ratio >= target else "MISSED"


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


def main():
    if "--check-only" in sys.argv[1:]:
        return 1 if attention_check() else 0
    rows = run_rtx()
    if not rows:
        print("bench_gpu: rtx-bench-gpu ran no case (no GPU?)")
        return 0
    import torch
    print(f"# {torch.cuda.get_device_name(0)}, torch {torch.__version__}", flush=True)
    copy_gbps = copy_bandwidth()
    table = [("device copy (torch copy_)", "bf16 1 GiB", "", f"{copy_gbps:.0f} GB/s", "", "",
              "")]
    for r in rows:
        if "error" in r:
            table.append((r["name"], "", f"error: {r['error']}", "", "", "", ""))
            continue
        name, shape = r["name"], f"{r.get('dtype', '')} {r.get('shape', '')}"
        if name == "alloc":
            ratio = r["pool_ops_per_s"] / r["raw_ops_per_s"]
            table.append(("alloc: pool vs cudaMalloc/cudaFree", r["shape"],
                          f"{r['pool_ops_per_s']:.3g} ops/s",
                          f"raw {r['raw_ops_per_s']:.3g} ops/s", f"{ratio:.0f}x", "-", "-"))
            continue
        if name == "block":
            eager, eager_io, comp = block_torch(r["shape"])
            ms = r["ms"]
            # rtxd's copies against eager without them: not like for like, so reported only;
            # the target rows are eager with the same copies and both device-resident
            table.append(("block (rtxd incl. upload+download) vs device-resident eager", shape,
                          f"{ms:.3f} ms", f"eager {eager:.3f} ms", f"{eager / ms:.2f}x",
                          "(reported)", ""))
            table.append(("block vs eager incl. host copies", shape, f"{ms:.3f} ms",
                          f"eager+io {eager_io:.3f} ms", f"{eager_io / ms:.2f}x", ">= 1.3x",
                          verdict(eager_io / ms, 1.3)))
            table.append(("block vs torch.compile", shape, f"{ms:.3f} ms",
                          f"compile {comp:.3f} ms", f"{comp / ms:.2f}x", "(reported)", ""))
            continue
        if name == "block_device":
            eager, _, comp = block_torch(r["shape"])
            ms, mode = r["ms"], r.get("mode", "")
            table.append((f"block device-resident ({mode}) vs eager", shape, f"{ms:.3f} ms",
                          f"eager {eager:.3f} ms", f"{eager / ms:.2f}x", ">= 1.3x",
                          verdict(eager / ms, 1.3)))
            table.append((f"block device-resident ({mode}) vs torch.compile", shape,
                          f"{ms:.3f} ms", f"compile {comp:.3f} ms", f"{comp / ms:.2f}x",
                          "(reported)", ""))
            continue
        if name == "transfer":
            t_up, t_down = transfer_torch(r["bytes"])
            for way, key in (("upload", "upload_gbps"), ("download", "download_gbps")):
                raw = r["raw_" + key]
                torch_gbps = t_up if way == "upload" else t_down
                how = "pinned chunks" if way == "upload" else "into a pinned block"
                table.append((f"{way} ({how}, copy stream)", r["shape"],
                              f"{r[key]:.1f} GB/s",
                              f"torch {torch_gbps:.1f} GB/s, cudaMemcpy {raw:.1f} GB/s",
                              f"{r[key] / torch_gbps:.2f}x torch", "(reported)", ""))
            continue
        t = torch_case(r)
        if t is None:
            continue
        tms, ttf, tgb = t
        if r.get("tflops") is not None and ttf is not None:
            ratio = r["tflops"] / ttf
            target = 0.95 if name == "gemm" else 0.8
            if "route" in r:
                name = f"{name} ({r['route']})"
            table.append((name, shape, f"{r['tflops']:.1f} TFLOP/s", f"{ttf:.1f} TFLOP/s",
                          f"{ratio:.2f}x", f">= {target}x", verdict(ratio, target)))
        else:
            ratio, cr = r["gbps"] / tgb, r["gbps"] / copy_gbps
            ok = ratio >= 1.0 and cr >= 0.8
            table.append((name, shape, f"{r['gbps']:.0f} GB/s", f"{tgb:.0f} GB/s",
                          f"{ratio:.2f}x torch, {cr:.2f}x copy", ">= 1.0x, >= 0.8x copy",
                          "met" if ok else "MISSED"))
        torch.cuda.empty_cache()
    head = ("case", "shape", "rtxd", "PyTorch", "ratio", "target", "")
    print("| " + " | ".join(head) + " |")
    print("|" + " --- |" * len(head))
    for row in table:
        print("| " + " | ".join(row) + " |")
    return 1 if attention_check() else 0


if __name__ == "__main__":
    sys.exit(main())
