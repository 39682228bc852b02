#!/usr/bin/env python3
"""
test_onnx_torch.py - models exported by torch.onnx.export run by rtxrun on the GPU and
compared with PyTorch's own outputs on the same GPU (issue 14, `make test-gpu`), and with
onnxruntime's where it is importable; or, to debug without a GPU, on the CPU backend against
PyTorch on the CPU.

    python3 tests/gpu/test_onnx_torch.py                 # --device cuda
    python3 tests/gpu/test_onnx_torch.py --device cpu
    options: --build DIR (default $RTX_BUILD or ./build), -k SUBSTRING (only matching cases),
             --keep DIR (write the models and the batch there and keep them), --repeat N
             (default 2: the second run reuses the first's buffers, on CUDA a graph replay)

Four models with random weights (fixed seeds), in eval mode, written the way PyTorch users
write them:
  * resnet: a small ResNet (stem Conv/BatchNorm/ReLU/MaxPool, a basic block, a downsampling
    block with a 1x1 stride-2 shortcut, AdaptiveAvgPool2d, Linear), input [batch, 3, 32, 32];
  * bert: a BERT-style encoder of 2 layers (word/position/token-type embeddings, LayerNorm,
    attention with the additive mask (1 - mask) * finfo.min from attention_mask, erf GELU, a
    tanh pooler), inputs input_ids and attention_mask [batch, sequence];
  * gpt2: a GPT-2-style decoder of 2 layers (fused QKV Linear split in three, a causal
    mask sliced from a lower-triangular buffer and applied with torch.where, the tanh GELU
    with torch.pow, tied logits), input input_ids [batch, sequence];
  * llama: a Llama-style decoder of 2 layers of nn.RMSNorm, scaled_dot_product_attention
    (causal, 4 query heads on 2 KV heads) and SwiGLU, exported at opset 23, where ONNX's
    RMSNormalization and Attention ops carry them.
Each is exported once with torch.onnx.export (the exporter's default, dynamo, at its default
opset) with the batch dimension dynamic (and the sequence for the transformers); the one
.onnx file then runs at several batch sizes (and sequence lengths) as case directories of ONE
`rtxrun --batch-dir` process. PyTorch computes the same on the same device with TF32 and
reduced-precision reductions off. Comparison: |got - ref| <= 1e-4 |ref| + 1e-4 max(1,
max|ref|) per output (f32 through whole networks: the absolute term covers values near zero
after cancellation). With onnxruntime importable, its CPU provider's outputs on the same
exported file are compared with rtxrun's the same way (the exporter's file, not only the
module, is then checked). The rtx ops each model ran (rtxrun --json `ops`) are printed, so a
decomposed pattern the importer did not fuse is visible.

Nothing is skipped silently: a missing GPU is a failure unless RTX_ALLOW_SKIP lists gpu and
the machine has no GPU device node (tests/skips.py); missing PyTorch or onnx (which the
exporter needs) is a failure. One line per failure, then "N passed, M failed"; exit status 1
when a case failed.

Needs only numpy, torch and onnx (and onnxscript, which torch.onnx.export's dynamo exporter
imports) in the running python3; not the build's generated protobuf code.
"""

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "gpu"))
# one rtxrun --batch-dir process and the skip rule, as for the op tests
from test_ops_torch import gpu_skip_allowed, run_batch  # noqa: E402

RTOL = 1e-4
ATOL_FRAC = 1e-4

# (model, batch, sequence or None): the shapes each exported model runs at
SHAPES = {
    "resnet": [(1, None), (3, None), (8, None)],
    "bert": [(1, 16), (3, 16), (8, 16), (2, 7)],
    "gpt2": [(1, 16), (3, 16), (8, 16), (2, 9)],
    "llama": [(1, 16), (3, 16), (2, 9)],
}


# ------------------------------------------------------------------------------------------
# The models (torch imported by the caller, passed in)
# ------------------------------------------------------------------------------------------

def make_models(torch):
    nn = torch.nn
    F = torch.nn.functional

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

        def forward(self, x):
            y = F.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return F.relu(y + (x if self.down is None else self.down(x)))

    class ResNet(nn.Module):
        def __init__(self, ch=16, classes=10):
            super().__init__()
            self.conv1 = nn.Conv2d(3, ch, 3, 1, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(ch)
            self.pool = nn.MaxPool2d(3, 2, 1)
            self.layer1 = BasicBlock(ch, ch, 1)
            self.layer2 = BasicBlock(ch, 2 * ch, 2)
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(2 * ch, classes)

        def forward(self, x):
            y = self.pool(F.relu(self.bn1(self.conv1(x))))
            y = self.layer2(self.layer1(y))
            return self.fc(torch.flatten(self.avgpool(y), 1))

    class SelfAttention(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.h, self.dh = heads, d // heads
            self.query, self.key, self.value = (nn.Linear(d, d) for _ in range(3))

        def split(self, x):
            b, s, _ = x.shape
            return x.view(b, s, self.h, self.dh).transpose(1, 2)

        def forward(self, x, mask):
            q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
            s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.dh) + mask
            a = torch.matmul(torch.softmax(s, dim=-1), v)
            b, _, t, _ = a.shape
            return a.transpose(1, 2).reshape(b, t, self.h * self.dh)

    class BertLayer(nn.Module):
        def __init__(self, d, heads, ff):
            super().__init__()
            self.attn = SelfAttention(d, heads)
            self.attn_out = nn.Linear(d, d)
            self.ln1 = nn.LayerNorm(d, eps=1e-12)
            self.inter = nn.Linear(d, ff)
            self.out = nn.Linear(ff, d)
            self.ln2 = nn.LayerNorm(d, eps=1e-12)

        def forward(self, x, mask):
            x = self.ln1(x + self.attn_out(self.attn(x, mask)))
            return self.ln2(x + self.out(F.gelu(self.inter(x))))

    class Bert(nn.Module):
        def __init__(self, vocab=100, d=64, heads=4, ff=128, layers=2, max_pos=64):
            super().__init__()
            self.word = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(max_pos, d)
            self.token_type = nn.Embedding(2, d)
            self.ln = nn.LayerNorm(d, eps=1e-12)
            self.layers = nn.ModuleList(BertLayer(d, heads, ff) for _ in range(layers))
            self.pooler = nn.Linear(d, d)

        def forward(self, input_ids, attention_mask):
            s = input_ids.shape[1]
            pos = torch.arange(s, device=input_ids.device).unsqueeze(0)
            x = self.word(input_ids) + self.pos(pos) + self.token_type(torch.zeros_like(input_ids))
            x = self.ln(x)
            m = attention_mask[:, None, None, :].to(x.dtype)
            m = (1.0 - m) * torch.finfo(x.dtype).min
            for layer in self.layers:
                x = layer(x, m)
            return x, torch.tanh(self.pooler(x[:, 0]))

    class NewGELU(nn.Module):
        def forward(self, x):
            return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) *
                                               (x + 0.044715 * torch.pow(x, 3.0))))

    class GPT2Block(nn.Module):
        def __init__(self, d, heads, max_pos):
            super().__init__()
            self.h, self.d = heads, d
            self.ln_1 = nn.LayerNorm(d)
            self.c_attn = nn.Linear(d, 3 * d)
            self.c_proj = nn.Linear(d, d)
            self.ln_2 = nn.LayerNorm(d)
            self.c_fc = nn.Linear(d, 4 * d)
            self.act = NewGELU()
            self.mlp_proj = nn.Linear(4 * d, d)
            self.register_buffer("bias", torch.tril(torch.ones(max_pos, max_pos, dtype=torch.bool))
                                 .view(1, 1, max_pos, max_pos), persistent=False)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(self.d, dim=2)
            q, k, v = (z.view(b, t, self.h, d // self.h).transpose(1, 2) for z in (q, k, v))
            att = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d // self.h)
            keep = self.bias[:, :, :t, :t]
            att = torch.where(keep, att, torch.finfo(att.dtype).min)
            y = torch.matmul(torch.softmax(att, dim=-1), v)
            x = x + self.c_proj(y.transpose(1, 2).reshape(b, t, d))
            return x + self.mlp_proj(self.act(self.c_fc(self.ln_2(x))))

    class GPT2(nn.Module):
        """last_only: the logits of the last position only ([batch, vocab], what a served
        decoder answers with) instead of every position's."""

        def __init__(self, vocab=100, d=64, heads=4, layers=2, max_pos=64, last_only=False):
            super().__init__()
            self.last_only = last_only
            self.wte = nn.Embedding(vocab, d)
            self.wpe = nn.Embedding(max_pos, d)
            self.blocks = nn.ModuleList(GPT2Block(d, heads, max_pos) for _ in range(layers))
            self.ln_f = nn.LayerNorm(d)

        def forward(self, input_ids):
            t = input_ids.shape[1]
            pos = torch.arange(t, device=input_ids.device)
            x = self.wte(input_ids) + self.wpe(pos)
            for blk in self.blocks:
                x = blk(x)
            x = self.ln_f(x)
            return torch.matmul(x[:, -1] if self.last_only else x, self.wte.weight.t())

    class Llama(nn.Module):
        """nn.RMSNorm and scaled_dot_product_attention (causal, grouped queries), which the
        exporter at opset 23 writes as ONNX's RMSNormalization and Attention ops."""

        def __init__(self, vocab=100, d=64, heads=4, kv_heads=2, layers=2):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.h, self.hkv, self.hd = heads, kv_heads, d // heads
            self.layers = nn.ModuleList(nn.ModuleDict(dict(
                n1=nn.RMSNorm(d, eps=1e-6), q=nn.Linear(d, d, bias=False),
                k=nn.Linear(d, kv_heads * self.hd, bias=False),
                v=nn.Linear(d, kv_heads * self.hd, bias=False), o=nn.Linear(d, d, bias=False),
                n2=nn.RMSNorm(d, eps=1e-6), gate=nn.Linear(d, 2 * d, bias=False),
                up=nn.Linear(d, 2 * d, bias=False), down=nn.Linear(2 * d, d, bias=False)))
                for _ in range(layers))
            self.norm = nn.RMSNorm(d, eps=1e-6)
            self.head = nn.Linear(d, vocab, bias=False)

        def forward(self, input_ids):
            b, s = input_ids.shape
            x = self.emb(input_ids)
            for ly in self.layers:
                h = ly.n1(x)
                q = ly.q(h).view(b, s, self.h, self.hd).transpose(1, 2)
                k = ly.k(h).view(b, s, self.hkv, self.hd).transpose(1, 2)
                v = ly.v(h).view(b, s, self.hkv, self.hd).transpose(1, 2)
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
                x = x + ly.o(a.transpose(1, 2).reshape(b, s, -1))
                h = ly.n2(x)
                x = x + ly.down(F.silu(ly.gate(h)) * ly.up(h))
            return self.head(self.norm(x))

    def randomize(m, seed):
        """Random weights, and BatchNorm/LayerNorm parameters and statistics away from the
        identity, so that every layer matters."""
        torch.manual_seed(seed)
        with torch.no_grad():
            for mod in m.modules():
                if isinstance(mod, nn.RMSNorm):
                    mod.weight.uniform_(0.5, 1.5)
                if isinstance(mod, (nn.BatchNorm2d, nn.LayerNorm)):
                    mod.weight.uniform_(0.5, 1.5)
                    mod.bias.uniform_(-0.2, 0.2)
                if isinstance(mod, nn.BatchNorm2d):
                    mod.running_mean.uniform_(-0.2, 0.2)
                    mod.running_var.uniform_(0.5, 1.5)
        return m.eval()

    # keyword arguments: the sizes (bench/bench_onnx.py --device cuda builds larger ones)
    return {"resnet": lambda **kw: randomize(ResNet(**kw), 1),
            "bert": lambda **kw: randomize(Bert(**kw), 2),
            "gpt2": lambda **kw: randomize(GPT2(**kw), 3),
            "llama": lambda **kw: randomize(Llama(**kw), 4)}


def example_inputs(name, batch, seq, seed, vocab=100):
    """{input name: numpy array} for the model's forward arguments, in order."""
    r = np.random.default_rng(seed)
    if name == "resnet":
        return {"x": r.uniform(-1, 1, (batch, 3, 32, 32)).astype(np.float32)}
    ids = r.integers(0, vocab, (batch, seq)).astype(np.int64)
    if name in ("gpt2", "llama"):
        return {"input_ids": ids}
    mask = np.ones((batch, seq), np.int64)
    for b in range(1, batch, 2):  # padding at the end of every other sequence
        mask[b, seq - 1 - b % (seq - 1):] = 0
    return {"input_ids": ids, "attention_mask": mask}


OUTPUT_NAMES = {"resnet": ["logits"], "bert": ["last_hidden_state", "pooler_output"],
                "gpt2": ["logits"], "llama": ["logits"]}
# the exporter's opset per model (None: its default); at 23 it writes ONNX's Attention and
# RMSNormalization ops
OPSET = {"llama": 23}


def export(torch, name, model, path, max_seq=64):
    """torch.onnx.export with a dynamic batch (and sequence, up to max_seq) into path (the
    exporter writes the weights beside it, path + '.data'); -> (the opset written, the
    inputs' dimensions)."""
    import onnx
    feeds = example_inputs(name, 2, 16 if name != "resnet" else None, 0)
    args = tuple(torch.from_numpy(a) for a in feeds.values())
    batch = torch.export.Dim("batch", min=1, max=1024)
    if name == "resnet":
        dyn = {"x": {0: batch}}
    else:
        seq = torch.export.Dim("sequence", min=1, max=max_seq)
        dyn = {k: {0: batch, 1: seq} for k in feeds}
    torch.onnx.export(model, args, str(path), input_names=list(feeds),
                      output_names=OUTPUT_NAMES[name], dynamic_shapes=dyn, dynamo=True,
                      opset_version=OPSET.get(name))
    m = onnx.load(str(path))
    dims = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
            for i in m.graph.input}
    for k, d in dims.items():
        if not isinstance(d[0], str):
            raise AssertionError(f"{name}: the exported input {k} has a static batch {d}")
    return next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), dims


# ------------------------------------------------------------------------------------------
# Running and comparing
# ------------------------------------------------------------------------------------------

def compare(got, ref, what):
    """None when got matches ref (shape, dtype, values within RTOL and ATOL_FRAC), else why."""
    if got.shape != ref.shape:
        return f"{what}: shape {got.shape}, expected {ref.shape}"
    if got.dtype != ref.dtype:
        return f"{what}: dtype {got.dtype}, expected {ref.dtype}"
    g, r = got.astype(np.float64), ref.astype(np.float64)
    if not np.isfinite(r).all():
        return f"{what}: the reference has non-finite values"
    atol = ATOL_FRAC * max(1.0, float(np.abs(r).max()))
    err = np.abs(g - r)
    lim = atol + RTOL * np.abs(r)
    bad = ~(err <= lim)  # NaN in got counts as bad
    if bad.any():
        i = np.unravel_index(np.argmax(np.where(bad, err / lim, -1)), r.shape)
        return (f"{what}: {int(bad.sum())}/{r.size} elements differ (rtol {RTOL:g}, atol "
                f"{atol:.3g}); worst at {tuple(map(int, i))}: got {g[i]!r} expected {r[i]!r}")
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", help="rtxrun's device: cuda, cuda:N or cpu")
    ap.add_argument("--build", default=os.environ.get("RTX_BUILD") or str(REPO / "build"))
    ap.add_argument("-k", dest="filter", default=None, help="only cases whose id contains this")
    ap.add_argument("--keep", default=None, help="write everything into this (new) directory")
    ap.add_argument("--repeat", type=int, default=2, help="rtxrun --repeat (default 2)")
    args = ap.parse_args(argv)
    me = "test_onnx_torch"
    rtxrun = Path(args.build).resolve() / "bin" / "rtxrun"
    if not os.access(rtxrun, os.X_OK):
        print(f"{me}: {rtxrun} is missing: build it first (make all)", file=sys.stderr)
        return 2
    on_gpu = args.device.startswith("cuda")
    try:
        import torch
    except ImportError as e:
        if on_gpu and gpu_skip_allowed():
            print(f"{me}: skipped (no GPU, RTX_ALLOW_SKIP lists gpu; and no PyTorch: {e})")
            return 0
        print(f"{me}: FAIL: PyTorch is needed: {e}", file=sys.stderr)
        return 1
    if on_gpu and not torch.cuda.is_available():
        if gpu_skip_allowed():
            print(f"{me}: skipped (no CUDA device, RTX_ALLOW_SKIP lists gpu)")
            return 0
        print(f"{me}: FAIL: torch.cuda.is_available() is False (set RTX_ALLOW_SKIP=gpu where "
              f"this machine is meant to have no GPU)", file=sys.stderr)
        return 1
    try:
        import onnx  # noqa: F401  (torch.onnx.export needs it)
    except ImportError as e:
        print(f"{me}: FAIL: onnx is needed by torch.onnx.export: {e}", file=sys.stderr)
        return 1
    try:
        import onnxruntime as ort
    except ImportError as e:
        ort = None
        print(f"note: onnxruntime not importable ({e}): PyTorch is the only reference")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.set_float32_matmul_precision("highest")
    dev = torch.device(args.device if on_gpu else "cpu")

    if args.keep:
        root = Path(args.keep)
        root.mkdir(parents=True)
        passed, failed = run_models(args, torch, ort, dev, rtxrun, root)
    else:
        with tempfile.TemporaryDirectory(prefix="rtx-onnx-torch-") as tmp:
            passed, failed = run_models(args, torch, ort, dev, rtxrun, Path(tmp))
    print(f"{passed} passed, {failed} failed")
    if not passed + failed:
        print("FAIL no case ran (-k matched nothing?)")
    return 0 if passed and not failed else 1


def run_models(args, torch, ort, dev, rtxrun, root):
    """Exports the models into root, runs their cases in one rtxrun process, compares;
    -> (passed, failed), one line printed per failure."""
    me = "test_onnx_torch"
    passed, failed = 0, 0

    def fail(msg):
        nonlocal failed
        failed += 1
        print(f"FAIL {msg}", flush=True)

    builders = make_models(torch)
    cases = {}  # case id -> (model name, feeds, {output: torch ref}, {output: ort ref})
    batch = root / "batch"
    batch.mkdir()
    t0 = time.monotonic()
    for name, build in builders.items():
        shapes = [s for s in SHAPES[name]
                  if not args.filter or args.filter in case_id(name, *s)]
        if not shapes:
            continue
        model = build()
        (root / name).mkdir()
        path = root / name / "model.onnx"  # and model.onnx.data, the exporter's weights
        try:
            opset, dims = export(torch, name, model, path)
        except Exception as e:  # noqa: BLE001 - an export failure fails the model's cases
            fail(f"{name}: torch.onnx.export: {type(e).__name__}: {str(e)[:2000]}")
            continue
        print(f"{name}: exported, opset {opset}, inputs {dims}", flush=True)
        sess = None
        if ort is not None:
            try:
                sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            except Exception as e:  # noqa: BLE001
                fail(f"{name}: onnxruntime cannot load the exported model: {e}")
        model = model.to(dev)
        for b, s in shapes:
            cid = case_id(name, b, s)
            feeds = example_inputs(name, b, s, seed=b * 100 + (s or 0))
            d = batch / cid
            (d / "inputs").mkdir(parents=True)
            for f in path.parent.iterdir():  # the model and its external data
                shutil.copyfile(f, d / f.name)
            for k, a in feeds.items():
                np.save(d / "inputs" / f"{k}.npy", a, allow_pickle=False)
            with torch.no_grad():
                out = model(*(torch.from_numpy(a).to(dev) for a in feeds.values()))
            out = out if isinstance(out, tuple) else (out,)
            tref = {n: o.float().cpu().numpy() for n, o in zip(OUTPUT_NAMES[name], out)}
            oref = dict(zip([o.name for o in sess.get_outputs()],
                            sess.run(None, feeds))) if sess else None
            cases[cid] = (name, feeds, tref, oref)
    t1 = time.monotonic()
    results, stderr, rc, cmd = run_batch(rtxrun, batch, args.device, args.repeat)
    t2 = time.monotonic()
    if rc not in (0, 1):
        tail = "\n".join(stderr.strip().splitlines()[-20:])
        fail(f"rtxrun exit {rc}: {' '.join(cmd)}\n{tail}")
    shown = set()
    for cid, (name, feeds, tref, oref) in sorted(cases.items()):
        what = f"{cid} (inputs " + ", ".join(f"{k} {list(a.shape)}"
                                             for k, a in feeds.items()) + ")"
        res = results.get(cid)
        if res is None:
            fail(f"{what}: no result from rtxrun (it stopped early?)")
            continue
        if res.get("exit") != 0:
            fail(f"{what}: rtxrun exit {res.get('exit')}: {res.get('error')}")
            continue
        if name not in shown:
            shown.add(name)
            print(f"{name}: rtx ops {json.dumps(res.get('ops'), sort_keys=True)}")
        got = {o["name"]: np.load(o["file"], allow_pickle=False) for o in res["outputs"]}
        whys = []
        if list(got) != OUTPUT_NAMES[name]:
            whys.append(f"outputs {list(got)}, expected {OUTPUT_NAMES[name]}")
        for n, ref in tref.items():
            if n in got:
                whys.append(compare(got[n], ref, f"{n} vs PyTorch on {dev}"))
                if oref is not None:
                    whys.append(compare(got[n], oref[n], f"{n} vs onnxruntime CPU"))
        whys = [w for w in whys if w]
        if whys:
            fail(f"{what}: " + "; ".join(whys))
        else:
            passed += 1
    print(f"{me}: rtxrun --device {args.device} ({len(cases)} cases, one process: "
          f"{t2 - t1:.1f} s) against PyTorch on {dev}"
          f"{' and onnxruntime CPU' if ort else ''}; export and references {t1 - t0:.1f} s")
    return passed, failed


def case_id(name, batch, seq):
    return f"{name}-b{batch}" + (f"-s{seq}" if seq else "")


if __name__ == "__main__":
    sys.exit(main())
