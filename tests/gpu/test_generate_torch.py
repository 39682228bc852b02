#!/usr/bin/env python3
"""
test_generate_torch.py - rtxd's bf16 logits against transformers' on the GPU (issue 13,
`make test-gpu`), for random-weight checkpoints of the GPT-2-small, Llama-3.2-1B and
Qwen2.5-0.5B configurations (tests/gpu/make_checkpoints.py, made on first use and kept).

    python3 tests/gpu/test_generate_torch.py                 # on cuda:0, the three models
    python3 tests/gpu/test_generate_torch.py --smoke         # tiny models, on the CPU
    options: --device cuda:N|cpu, --models NAME[,NAME], --build DIR (default $RTX_BUILD or
             ./build), --checkpoints DIR (make_checkpoints.py's), --decode N (default 64),
             --lengths N,N,.. (the prompts' lengths), --keep DIR (write the logits of both
             sides there)

For each model, a batch of sequences of mixed prompt lengths (1, 17, 100, 333 and 517 random
token ids; --smoke: 1, 5, 17, 40) runs through rtxd's step graph in ONE rtxgen process per
run (`rtxgen DIR logits --batch "P|D;P|D;..." --dtype bf16 --device DEV`: every step holds
each unfinished sequence's prompt or its next decode token, ragged), twice:
  * whole prompts: the first step prefills every prompt together, then 64 decode steps of
    the whole batch; with --graphs, as the engine runs small steps: plans kept per shape with
    the pool and weights bound, so that on a GPU the decode steps replay CUDA graphs;
  * chunked prefill (--chunk 48 --every-chunk): long prompts take several steps while short
    ones already decode, so steps mix prefill chunks and decode tokens; a row for the last
    token of every chunk.
The decode tokens are transformers' own greedy continuation of each prompt (generate, bf16,
64 new tokens), fed to both sides (teacher forcing). transformers' side: one forward pass over
prompt + decode tokens per sequence, in bf16 (the same weights, its default attention) and in
f32 (the bf16 weights upcast; TF32 off): the f32 pass is the truth both bf16 results are
measured against, as bench/bench_gpu.py measures attention.

Checks per model and run (the rows: each chunk's last prompt token, then each decode token).
rtxd's bf16 is held to transformers' own bf16 error against the f32 truth, on average and on
the worst row (measured with rtxd's CPU backend on the Llama-3.2-1B configuration: its mean
error 0.94x to 1.15x transformers', its worst row up to 2x, the maximum of a few dozen rows
being the noisier figure). Both of transformers' models are loaded in their dtype
(load_model): converting one with .to(dtype) rounds its rotary inv_freq to bf16, an error
that grows with the position and that rtxd, computing the angles in f32, does not share:
  1. log-softmax: per row, e = max over the truth's top-16 tokens of |log_softmax(x) -
     log_softmax(truth)|; mean(e rtxd) <= 1.5 mean(e transformers bf16) + u/4 and max(e rtxd)
     <= 3 max(e transformers bf16) + u, u = 2^-7 max|truth logit| (one bf16 unit of the
     logits).
  2. probabilities: the same with e = max over the vocabulary of |softmax(x) -
     softmax(truth)| and u = 2^-7 max softmax(truth).
  3. greedy tokens under teacher forcing: at every row where transformers' top-2 margin (f32,
     in logits) exceeds eps, rtxd's argmax is transformers' top-1. eps = 2 M + u, M = the
     largest change transformers' own bf16 pass makes to a row's top-2 margin (the logit of
     the f32 top-1 minus that of the f32 top-2, bf16 against f32): a bf16 computation twice
     as noisy as transformers' cannot swap two tokens that far apart, a wrong one does. A
     random network's bf16 noise is large next to its margins (measured on the Llama-3.2-1B
     configuration on a CPU: M about 0.37 against a median margin of 0.55; 38% of the rows
     decisive), so at least a tenth of the rows, and 8, must be that decisive, or the check
     would judge too little (the checkpoints are made for this: make_checkpoints.py's
     LOGIT_STD and scaled projections).
One line per check; then "N passed, M failed"; exit status 1 when a check failed, 2 when
something it needs is missing (rtxgen, torch, transformers). Without a CUDA device (and not
--smoke or --device cpu) it fails unless RTX_ALLOW_SKIP lists gpu (tests/skips.py).
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_checkpoints as MC  # noqa: E402
import skips  # noqa: E402

LENGTHS = (1, 17, 100, 333, 517)
SMOKE_LENGTHS = (1, 5, 17, 40)
CHUNK, SMOKE_CHUNK = 48, 8
TOP_K = 16
MIN_DECISIVE, MIN_DECISIVE_ROWS = 0.1, 8
MEAN_FACTOR, MAX_FACTOR = 1.5, 3.0


# ------------------------------------------------------------------------------------------
# the two sides
# ------------------------------------------------------------------------------------------

def prompts_for(vocab, n_specials, lengths, seed):
    """Random token ids (no special token), one list per length."""
    rng = np.random.default_rng(seed)
    return [rng.integers(n_specials, vocab, n).tolist() for n in lengths]


def batch_arg(seqs):
    """rtxgen's --batch: "PROMPT|DECODE;..." """
    return ";".join(",".join(map(str, p)) + ("|" + ",".join(map(str, d)) if d else "")
                    for p, d in seqs)


def row_positions(n_prompt, n_decode, chunk):
    """The positions whose logits rtxgen writes for one sequence: the last token of every
    prompt chunk (chunk 0: the whole prompt), then each decode token's."""
    ends = [n_prompt] if not chunk else list(range(chunk, n_prompt, chunk)) + [n_prompt]
    return [e - 1 for e in ends] + list(range(n_prompt, n_prompt + n_decode))


def run_rtxgen(rtxgen, ckpt, seqs, device, chunk, out):
    argv = [str(rtxgen), str(ckpt), "logits", "--batch", batch_arg(seqs), "--dtype", "bf16"]
    if device != "cpu":
        argv += ["--device", device]
    if chunk:
        argv += ["--chunk", str(chunk), "--every-chunk"]
    else:
        argv += ["--graphs"]
    argv += ["--out", str(out)]
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        what = " ".join(a if len(a) < 80 else a[:60] + "..." for a in argv)
        raise RuntimeError(f"rtxgen exited {p.returncode}: {p.stderr.strip()[-800:]} ({what})")
    return np.load(out)


def load_model(ckpt, dtype):
    """transformers' model of ckpt computing in dtype. Loaded in that dtype, never converted
    with .to(dtype): that also converts the rotary embedding's inv_freq buffer, which
    transformers keeps in f32 (it computes the angles in f32), and a bf16 inv_freq puts an
    error into every angle that grows with the position - at 517 tokens the "truth" built
    that way was 4x farther from rtxd's bf16 logits than from a correct f32 forward pass."""
    from transformers import AutoModelForCausalLM
    try:
        return AutoModelForCausalLM.from_pretrained(ckpt, dtype=dtype)
    except TypeError:  # transformers before 4.56 names it torch_dtype
        return AutoModelForCausalLM.from_pretrained(ckpt, torch_dtype=dtype)


class Reference:
    """transformers' side of one checkpoint: its bf16 model and the f32 upcast."""

    def __init__(self, ckpt, device):
        import torch
        self.torch, self.device = torch, device
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        self.bf16 = load_model(ckpt, torch.bfloat16).to(device).eval()
        self.f32 = None
        self.ckpt = ckpt

    def greedy(self, prompt, n):
        """transformers' greedy continuation of prompt: n tokens (EOS not allowed to end it)."""
        torch = self.torch
        ids = torch.tensor([prompt], device=self.device)
        with torch.no_grad():
            out = self.bf16.generate(ids, attention_mask=torch.ones_like(ids),
                                     max_new_tokens=n, min_new_tokens=n, do_sample=False,
                                     pad_token_id=self.bf16.config.eos_token_id)
        return out[0, len(prompt):].tolist()

    def logits(self, tokens, positions):
        """(bf16 logits, f32 logits) at positions of one forward pass over tokens, as f64."""
        torch = self.torch
        if self.f32 is None:  # the checkpoint's bf16 weights, upcast as they load
            self.f32 = load_model(self.ckpt, torch.float32).to(self.device).eval()
        ids = torch.tensor([tokens], device=self.device)
        pos = torch.tensor(positions, device=self.device)
        with torch.no_grad():
            lo = self.bf16(ids).logits[0, pos].double().cpu().numpy()
            hi = self.f32(ids).logits[0, pos].double().cpu().numpy()
        return lo, hi

    def close(self):
        self.bf16 = self.f32 = None
        if self.device.startswith("cuda"):
            self.torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------------
# the comparison (NumPy, f64)
# ------------------------------------------------------------------------------------------

def log_softmax(x):
    x = np.asarray(x, dtype=np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def row_errors(x, truth, top):
    """Per row: the largest |log_softmax(x) - log_softmax(truth)| over the truth's top tokens
    `top`, and the largest |softmax(x) - softmax(truth)| over the vocabulary."""
    ls_x, ls_t = log_softmax(x), log_softmax(truth)
    lp = np.abs(np.take_along_axis(ls_x, top, axis=-1) -
                np.take_along_axis(ls_t, top, axis=-1)).max(axis=-1)
    p = np.abs(np.exp(ls_x) - np.exp(ls_t)).max(axis=-1)
    return lp, p


def compare(ours, tf, truth, top_k=TOP_K):
    """The figures of the checks for rows [rows, vocab] of rtxd (ours), transformers bf16 (tf)
    and the f32 truth; a dict (see the module's comment)."""
    top = np.argsort(-truth, axis=-1)[:, :top_k]
    lp_o, p_o = row_errors(ours, truth, top)
    lp_f, p_f = row_errors(tf, truth, top)
    unit = 2.0 ** -7 * float(np.abs(truth).max())
    p_unit = 2.0 ** -7 * float(np.exp(log_softmax(truth)).max())
    out = {"rows": int(truth.shape[0]), "unit": unit}
    for name, o, f, u in (("lp", lp_o, lp_f, unit), ("p", p_o, p_f, p_unit)):
        out[name] = {"mean": float(o.mean()), "mean_tf": float(f.mean()),
                     "mean_bound": MEAN_FACTOR * float(f.mean()) + u / 4,
                     "max": float(o.max()), "max_tf": float(f.max()),
                     "max_bound": MAX_FACTOR * float(f.max()) + u,
                     "worst_row": int(o.argmax())}
    rows = np.arange(truth.shape[0])
    a, b = top[:, 0], top[:, 1]
    margin = truth[rows, a] - truth[rows, b]
    m_tf = float(np.abs(tf[rows, a] - tf[rows, b] - margin).max())
    eps = 2 * m_tf + unit
    decisive = margin > eps
    same = np.argmax(ours, axis=-1) == a
    out.update({
        "eps": eps, "margin_err_tf": m_tf, "decisive": int(decisive.sum()),
        "greedy_equal": int((decisive & same).sum()),
        "tf_equal": int((decisive & (np.argmax(tf, axis=-1) == a)).sum()),
        "greedy_equal_all": int((np.argmax(ours, axis=-1) == np.argmax(tf, axis=-1)).sum()),
        "bad_rows": np.nonzero(decisive & ~same)[0].tolist(),
        "lp_vs_tf": float(np.abs(np.take_along_axis(log_softmax(ours) - log_softmax(tf), top,
                                                    axis=-1)).max()),
    })
    return out


def verdicts(c, min_decisive=MIN_DECISIVE):
    """[(check name, ok, text)] of compare()'s figures."""
    n = c["rows"]
    out = []
    for name, key, what in (("log-softmax", "lp", f"|dlogp| on the truth's top-{TOP_K}"),
                            ("probabilities", "p", "|dp|")):
        e = c[key]
        ok = e["mean"] <= e["mean_bound"] and e["max"] <= e["max_bound"]
        out.append((name, ok, f"max {what} per row, mean over rows: rtxd {e['mean']:.4g}, "
                    f"transformers bf16 {e['mean_tf']:.4g}, bound {e['mean_bound']:.4g}; worst "
                    f"row: rtxd {e['max']:.4g} (row {e['worst_row']}), transformers "
                    f"{e['max_tf']:.4g}, bound {e['max_bound']:.4g}"
                    + (f" (rtxd vs transformers bf16 {c['lp_vs_tf']:.4g})" if key == "lp"
                       else "")))
    enough = c["decisive"] >= max(min_decisive * n, min(MIN_DECISIVE_ROWS, n))
    ok = enough and not c["bad_rows"]
    text = (f"rtxd's argmax is transformers' (f32) on {c['greedy_equal']} of the "
            f"{c['decisive']} rows whose margin > {c['eps']:.3g} (transformers bf16: "
            f"{c['tf_equal']}; its margin error {c['margin_err_tf']:.3g}); rtxd's and "
            f"transformers' bf16 argmax equal on {c['greedy_equal_all']} of all {n} rows")
    if c["bad_rows"]:
        text += f"; differs at rows {c['bad_rows'][:10]}"
    if not enough:
        text += (f"; fewer than {min_decisive:.0%} of the rows (or {MIN_DECISIVE_ROWS}) "
                 f"decisive: the check judges too little")
    out.append(("greedy tokens", ok, text))
    return out


# ------------------------------------------------------------------------------------------
# main
# ------------------------------------------------------------------------------------------

def check_model(name, args, rtxgen, keep):
    """[(what, ok, text)] for one model."""
    t0 = time.monotonic()
    ckpt = MC.make(name, args.checkpoints, smoke=args.smoke,
                   device="cpu" if args.device == "cpu" else None)
    s = MC.spec(name, args.smoke)
    vocab, n_specials = s["config"]["vocab_size"], len(s["specials"])
    lengths = args.lengths or (SMOKE_LENGTHS if args.smoke else LENGTHS)
    chunk = SMOKE_CHUNK if args.smoke else CHUNK
    torch_device = "cpu" if args.device == "cpu" else args.device
    ref = Reference(ckpt, torch_device)
    results = []
    try:
        prompts = prompts_for(vocab, n_specials, lengths, seed=sum(map(ord, name)))
        seqs = [(p, ref.greedy(p, args.decode)) for p in prompts]
        for run, ch in (("whole prompts", 0), (f"chunks of {chunk}", chunk)):
            what = f"{name} bf16, {run}, prompts {list(lengths)} + {args.decode} decode"
            try:
                with tempfile.TemporaryDirectory() as tmp:
                    ours = run_rtxgen(rtxgen, ckpt, seqs, args.device, ch, Path(tmp) / "o.npy")
                pos = [row_positions(len(p), len(d), ch) for p, d in seqs]
                want = sum(len(x) for x in pos)
                if ours.shape != (want, vocab):
                    raise RuntimeError(f"rtxgen wrote {ours.shape}, expected ({want}, {vocab})")
                tf, truth = [], []
                for (p, d), ps in zip(seqs, pos):
                    lo, hi = ref.logits(p + d, ps)
                    tf.append(lo)
                    truth.append(hi)
                tf, truth = np.concatenate(tf), np.concatenate(truth)
                if keep:
                    stem = Path(keep) / f"{name}-{'chunked' if ch else 'whole'}"
                    np.save(f"{stem}-rtxd.npy", ours)
                    np.save(f"{stem}-tf-bf16.npy", tf)
                    np.save(f"{stem}-tf-f32.npy", truth)
                for check, ok, text in verdicts(compare(ours, tf, truth)):
                    results.append((f"{what}: {check}", ok, text))
            except Exception as e:  # noqa: BLE001 - one failed run, the others go on
                results.append((what, False, f"{type(e).__name__}: {e}"))
    finally:
        ref.close()
    print(f"# {name}: {time.monotonic() - t0:.1f} s", flush=True)
    return results


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default=None, help="cuda:N or cpu (default cuda:0; cpu "
                    "with --smoke)")
    ap.add_argument("--smoke", action="store_true", help="tiny checkpoints")
    ap.add_argument("--models", default=",".join(MC.MODELS))
    ap.add_argument("--build", default=os.environ.get("RTX_BUILD") or str(REPO / "build"))
    ap.add_argument("--checkpoints", default=None, help="make_checkpoints.py's folder")
    ap.add_argument("--decode", type=int, default=None, help="decode steps (64; smoke 8)")
    ap.add_argument("--lengths", type=lambda v: [int(x) for x in v.split(",")], default=None,
                    help="prompt lengths (default 1,17,100,333,517; smoke 1,5,17,40)")
    ap.add_argument("--keep", default=None, help="write every side's logits into this folder")
    args = ap.parse_args(argv)
    args.device = args.device or ("cpu" if args.smoke else "cuda:0")
    args.decode = args.decode if args.decode is not None else (8 if args.smoke else 64)
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in MC.MODELS]
    if unknown:
        print(f"test_generate_torch: unknown model(s) {unknown}; known: {list(MC.MODELS)}",
              file=sys.stderr)
        return 2
    rtxgen = Path(args.build) / "bin" / "rtxgen"
    if not os.access(rtxgen, os.X_OK):
        print(f"test_generate_torch: {rtxgen} is missing: build it first (make all)",
              file=sys.stderr)
        return 2
    try:
        import torch
        import transformers
    except ImportError as e:
        print(f"test_generate_torch: torch and transformers are needed: {e}", file=sys.stderr)
        return 2
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        if skips.allowed("gpu"):
            print("test_generate_torch: skipped (no CUDA device, RTX_ALLOW_SKIP lists gpu)")
            return 0
        print("test_generate_torch: FAIL: torch.cuda.is_available() is False (set "
              "RTX_ALLOW_SKIP=gpu where this machine is meant to have no GPU)", file=sys.stderr)
        return 1
    if args.keep:
        Path(args.keep).mkdir(parents=True, exist_ok=True)
    print(f"# rtxgen {rtxgen} on {args.device}; torch {torch.__version__}, transformers "
          f"{transformers.__version__}{', smoke' if args.smoke else ''}", flush=True)
    passed = failed = 0
    for name in names:
        try:
            results = check_model(name, args, rtxgen, args.keep)
        except Exception as e:  # noqa: BLE001 - the checkpoint or the reference failed
            results = [(name, False, f"{type(e).__name__}: {e}")]
        for what, ok, text in results:
            print(f"{'ok  ' if ok else 'FAIL'} {what}: {text}", flush=True)
            passed += ok
            failed += not ok
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
