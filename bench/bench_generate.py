#!/usr/bin/env python3
"""
bench_generate.py (make bench-generate) - text generation served by rtxd under an open-loop
Poisson client, against transformers' `generate` with static batching on the same checkpoint
and GPU, in one run (issue 13). docs/benchmarks.md, "Generation (issue 13)", explains the
method; in short:

  model      the Llama-3.2-1B configuration with random weights (tests/gpu/make_checkpoints.py,
             made on first use), bf16, served from a repository made here (MODEL/1 links to the
             checkpoint) with instance_group KIND_GPU on --device's GPU
  client     OpenAI /v1/completions, stream true with stream_options.include_usage, prompts
             as token ids (random, seeded, no special token), ignore_eos true, temperature 0;
             threads and http.client in --procs processes (bench/gen_client.py); TTFT, ITL,
             TPOT as defined there; output tokens/s over the first send to the last answer;
             goodput at each lane's target (rtxd's lanes, `rtxctl lanes`): tokens/s of the
             requests whose TTFT met that lane's target
  1. uniform 512 in / 128 out: a burst of --probe requests estimates capacity (requests/s),
     then a ladder of Poisson rates (0.1x .. 1.5x of it, --duration s each), batch lane
  2. a seeded mix of lengths (prompts log-uniform in [16, 2048], outputs uniform in [16, 256]):
     its own burst and a shorter ladder
  3. SLA flood: a realtime stream (x-rtx-lane: realtime) at 10% of capacity alone, then the
     same arrivals on top of batch traffic at 150% of capacity; batch requests still open
     when the flood ends are closed (rtxd cancels them)
  4. prefix caching: one request at a time, alternating: a 1,000-token shared system prompt
     + 64 new tokens (after one request that warms the prefix), and 1,064 new tokens
  5. rtxd stopped; transformers generate, static batches of --hf-batches sizes on the same
     prompts (bench/gen_static.py: TTFT of static batching defined there)
Verdicts (bench_harness.Report; ratio > 1 is better for rtxd):
  - throughput: rtxd's best output tokens/s over the ladder rates whose p99 TTFT is at most
    transformers' p99 TTFT at its best batch size, / transformers' tokens/s there: >= 10x
    (uniform and mixed)
  - flood: realtime p99 TTFT and p99 ITL under the flood <= 1.5x their unloaded values (a
    realtime request refused, expired or failed counts as an infinite TTFT); batch output tokens/s
    during the flood > 0
  - prefix caching: median TTFT without / with the shared prefix >= 3x
A scenario where a request failed (not shed: refused with 429 or expired at its deadline, see
bench/gen_client.py) is a failed row.

    python3 bench/bench_generate.py [--report] [--smoke] [--out FILE.json] [options]

--smoke: everything tiny on the CPU against the example model tiny-chat (build/examples/models,
the repository `make run` serves), the reference transformers on the CPU when it can be
imported (--reference none: no reference; its rows say so and are not judged). --out: the
figures, definitions and verdicts as JSON. Exit status: 1 when a run failed or a judged target
was missed (not with --report or RTX_BENCH_REPORT=1: then only a failure), 2 for bad usage or
what it needs missing. Environment: RTX_BUILD (default ./build).
"""
import argparse
import json
import math
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests" / "gpu"))
import bench_harness as H  # noqa: E402
import gen_client as C  # noqa: E402
from bench_serving import http_json, start_rtxd  # noqa: E402

DEFAULT_LANES = {"realtime": 0.05, "interactive": 0.5, "batch": 60.0}  # docs/scheduler.md
TARGET_SPEEDUP, FLOOD_FACTOR, PREFIX_TARGET = 10.0, 1.5, 3.0
RT_SHARE, FLOOD_SHARE = 0.10, 1.50
SCENARIOS = {"uniform", "mixed", "flood", "prefix", "reference"}

FULL = dict(model="llama-3.2-1b", isl=512, osl=128, mix_prompt=(16, 2048), mix_output=(16, 256),
            prefix=1000, suffix=64, rates=(0.1, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5),
            mixed_rates=(0.5, 1.0, 1.25, 1.5, 2.0), duration=15.0, flood_duration=20.0, prefix_pairs=16,
            hf_batches=(1, 16, 64, 256), probe=256, drain=120.0, max_rate=None,
            generation={"kv_cache_bytes": 32 << 30, "max_batch_tokens": 8192, "max_seqs": 256})
SMOKE = dict(model="tiny-chat", isl=24, osl=8, mix_prompt=(4, 64), mix_output=(2, 16),
             prefix=96, suffix=8, rates=(0.25, 1.0), mixed_rates=(1.0,), duration=2.0,
             flood_duration=2.0, prefix_pairs=3, hf_batches=(1, 4), probe=8, drain=60.0,
             max_rate=40.0,
             generation=None)


# ------------------------------------------------------------------------------------------
# workloads
# ------------------------------------------------------------------------------------------

def vocab_of(ckpt):
    """(ids a prompt may use, from the tokenizer: every id below the model's vocabulary
    size that the tokenizer has and that is not an added/special token)."""
    cfg = json.loads((Path(ckpt) / "config.json").read_text())
    tok = json.loads((Path(ckpt) / "tokenizer.json").read_text())
    n = min(int(cfg["vocab_size"]), len(tok["model"]["vocab"]) + len(tok.get("added_tokens", [])))
    special = {int(t["id"]) for t in tok.get("added_tokens", [])}
    return [i for i in range(n) if i not in special]


def body(model, prompt, max_tokens):
    return {"model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True}, "ignore_eos": True, "temperature": 0}


def mixed_lengths(rng, n, prompt_range, output_range):
    """n (prompt length, output length): prompts log-uniform over prompt_range, outputs
    uniform over output_range, from rng (random.Random)."""
    lo, hi = math.log(prompt_range[0]), math.log(prompt_range[1])
    return [(int(round(math.exp(rng.uniform(lo, hi)))), rng.randint(*output_range))
            for _ in range(n)]


def requests_at(times, shapes, ids, rng, model, lane, tag, deadline=0.0):
    """Requests due at `times`, the i-th of shape shapes[i % len(shapes)] (prompt length,
    output length), prompts of random ids."""
    return [C.Request(due=t, body=body(model, rng.choices(ids, k=shapes[i % len(shapes)][0]),
                                       shapes[i % len(shapes)][1]),
                      lane=lane, tag=tag, deadline=deadline)
            for i, t in enumerate(times)]


# ------------------------------------------------------------------------------------------
# verdicts (pure: tests/interop/test_bench_generate.py runs them on synthetic figures)
# ------------------------------------------------------------------------------------------

def best_rate(rungs, ttft_cap_ms):
    """The ladder rung of highest output tokens/s whose p99 TTFT is at most ttft_cap_ms and
    where nothing failed; None when there is none."""
    ok = [r for r in rungs if not r["failed"] and r["ttft_p99_ms"] is not None
          and r["ttft_p99_ms"] <= ttft_cap_ms]
    return max(ok, key=lambda r: r["output_tokens_per_s"]) if ok else None


def saturated(rungs, tol=0.05):
    """Whether the ladder reached saturation: its last rate gave less than (1 + tol) times
    the tokens/s of the one before."""
    if len(rungs) < 2:
        return False
    a, b = rungs[-2]["output_tokens_per_s"], rungs[-1]["output_tokens_per_s"]
    return b < a * (1 + tol)


def p99_with_refusals(results, attr):
    """p99 (ms) of a per-request figure where a request that was not served counts as
    infinite (realtime requests shed under a flood are a miss, not a gap)."""
    vals = []
    for r in results:
        if attr == "ttft":
            vals.append(r.ttft if r.ok and r.ttft is not None else math.inf)
        elif r.ok:
            vals.extend(r.itl)
        else:
            vals.append(math.inf)
    p = C.percentile(vals, 99)
    return None if p is None else p * 1e3


def fmt_ms(v):
    return "-" if v is None else ("inf" if v == math.inf else f"{v:.1f} ms")


def judge(rep, res):
    """Adds the verdict rows of the figures in res (see main) to rep (bench_harness.Report)."""
    ref = res.get("reference") or {}
    for work in ("uniform", "mixed"):
        rungs = res.get(f"ladder_{work}") or []
        shape = res["shapes"][work]
        point = ref.get(work)
        if not rungs:
            continue
        if point is None:
            top = max(rungs, key=lambda r: r["output_tokens_per_s"])
            rep.note(f"throughput vs static batching ({work})", shape,
                     f"{top['output_tokens_per_s']:.0f} tok/s at {top['rate']:.2f} req/s",
                     f"no reference ({ref.get('why', 'not run')})")
            continue
        pick = best_rate(rungs, point["ttft_p99_ms"])
        head = f"throughput vs static batching ({work})"
        theirs = (f"{point['output_tokens_per_s']:.0f} tok/s, batch {point['batch']}, p99 TTFT "
                  f"{point['ttft_p99_ms']:.0f} ms")
        if pick is None:
            rep.row(head, shape, "stream", "no ladder rate with p99 TTFT <= the reference's",
                    theirs, 0.0, TARGET_SPEEDUP)
            continue
        rep.row(head, shape, "stream",
                f"{pick['output_tokens_per_s']:.0f} tok/s at {pick['rate']:.2f} req/s, p99 TTFT "
                f"{pick['ttft_p99_ms']:.0f} ms", theirs,
                pick["output_tokens_per_s"] / point["output_tokens_per_s"], TARGET_SPEEDUP)
    fl = res.get("flood")
    if fl:
        for name, key in (("TTFT", "ttft_p99_ms"), ("ITL", "itl_p99_ms")):
            alone, flood = fl["unloaded"][key], fl["flooded"][key]
            if alone is None or flood is None or alone <= 0:
                rep.error(f"flood: realtime p99 {name}", fl["shape"], "no figure measured")
                continue
            rep.row(f"flood: realtime p99 {name}", fl["shape"], "realtime", fmt_ms(flood),
                    f"unloaded {fmt_ms(alone)}", alone / flood if flood > 0 else math.inf,
                    1 / FLOOD_FACTOR, ratio_text=f"{flood / alone:.2f}x unloaded",
                    target_text=f"<= {FLOOD_FACTOR}x unloaded")
        b = fl["batch_output_tokens_per_s"]
        rep.row("flood: batch lane progressing", fl["shape"], "batch", f"{b:.1f} tok/s",
                f"offered {FLOOD_SHARE:.0%} of capacity", b, 1e-9,
                ratio_text="yes" if b > 0 else "no", target_text="> 0 tok/s")
    px = res.get("prefix")
    if px:
        w, wo = px["with_ttft_p50_ms"], px["without_ttft_p50_ms"]
        if not w or not wo:
            rep.error("prefix caching: TTFT", px["shape"], "no figure measured")
        else:
            rep.row("prefix caching: TTFT p50", px["shape"], "-",
                    f"{w:.1f} ms shared ({px['cached_tokens_mean']:.0f} cached tokens)",
                    f"{wo:.1f} ms unshared", wo / w, PREFIX_TARGET)
    for name, s in res.get("failures", []):
        rep.error(name, "-", s)


# ------------------------------------------------------------------------------------------
# rtxd
# ------------------------------------------------------------------------------------------

class Daemon:
    """rtxd serving one generative model; its HTTP API, /metrics and lanes."""

    def __init__(self, build, repo, model, tmp):
        self.build, self.model, self.tmp = Path(build), model, tmp
        self.proc, self.grpc, self.http = start_rtxd(self.build, tmp, [model], repo,
                                                     wait_s=600, who="bench_generate")
        end = time.monotonic() + 600
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/v2/models/"
                                            f"{model}/ready", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > end:
                self.stop()
                raise SystemExit(f"bench_generate: {model} did not become ready; "
                                 f"{self.log_tail()}")
            time.sleep(0.2)

    def log_tail(self, n=2000):
        try:
            return "rtxd's log ends: " + (Path(self.tmp) / "rtxd.log").read_text(
                errors="replace")[-n:]
        except OSError:
            return "no rtxd log"

    def describe(self):
        try:
            cfg = http_json(self.http, f"/v2/models/{self.model}/config")
        except (OSError, ValueError) as e:
            return f"{self.model}: its config did not come ({e})"
        groups = ", ".join(f"{g.get('count', 1)} x {g.get('kind', '?')} {g.get('gpus', '')}"
                           for g in cfg.get("instance_group", []))
        return f"{self.model}: platform {cfg.get('platform')}, instances {groups or '-'}"

    def lanes(self):
        """{lane: TTFT target in seconds} from `rtxctl lanes --json`, else the defaults."""
        try:
            p = subprocess.run([str(self.build / "bin" / "rtxctl"), "--address",
                                f"127.0.0.1:{self.grpc}", "--json", "lanes"],
                               capture_output=True, text=True, timeout=30)
            out = {}
            for ln in json.loads(p.stdout)["lanes"]:
                out.setdefault(ln["lane"], ln["target_p99_us"] / 1e6)
            return out or dict(DEFAULT_LANES), "rtxctl lanes"
        except (OSError, ValueError, KeyError, subprocess.SubprocessError):
            return dict(DEFAULT_LANES), "defaults (rtxctl lanes did not answer)"

    def metrics(self):
        """The rtx_gen_* samples of /metrics of this model: {name{labels}: value}."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/metrics", timeout=10) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if line.startswith("rtx_gen_") and f'model="{self.model}"' in line:
                key, _, val = line.rpartition(" ")
                try:
                    out[key] = float(val)
                except ValueError:
                    pass
        return out

    def wait_idle(self, timeout=60.0):
        """Waits until the model has no running or waiting sequence (cancelled ones freed);
        False at the timeout."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            m = self.metrics()
            if sum(v for k, v in m.items() if k.startswith("rtx_gen_sequences{")) == 0:
                return True
            time.sleep(0.2)
        return False

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def make_repository(tmp, model, ckpt, generation, device):
    """A model repository with one generative model whose version 1 links to ckpt."""
    root = Path(tmp) / "models"
    (root / model).mkdir(parents=True)
    cfg = {"name": model, "platform": "rtx_generate"}
    if device.startswith("cuda"):
        gpu = int(device.split(":")[1]) if ":" in device else 0
        cfg["instance_group"] = [{"count": 1, "kind": "KIND_GPU", "gpus": [gpu]}]
    else:
        cfg["instance_group"] = [{"count": 1, "kind": "KIND_CPU"}]
    if generation:
        cfg["generation"] = generation
    (root / model / "config.json").write_text(json.dumps(cfg, indent=2))
    os.symlink(Path(ckpt).resolve(), root / model / "1")
    return root


# ------------------------------------------------------------------------------------------
# scenarios
# ------------------------------------------------------------------------------------------

class Scenarios:
    """The client's side of every scenario against one Daemon; figures go into self.res."""

    def __init__(self, args, P, daemon, ids, slo, res):
        self.a, self.P, self.d, self.ids, self.slo, self.res = args, P, daemon, ids, slo, res

    def rng(self, k):
        return random.Random(self.a.seed * 1000 + k)

    def run(self, reqs):
        results, start = C.drive("127.0.0.1", self.d.http, reqs, self.a.procs)
        if not self.d.wait_idle():
            self.res["failures"].append(("sequences left running", "rtxd still had sequences "
                                         "60 s after the client closed them"))
        return results, start

    def summary(self, results, **extra):
        s = C.summarize(results, self.slo)
        s.update(extra)
        return s

    def burst(self, shapes, k):
        """Capacity in requests/s: P["probe"] requests at once (batch lane)."""
        reqs = requests_at([0.0] * self.P["probe"], shapes, self.ids, self.rng(k),
                           self.P["model"], "batch", "probe")
        s = self.summary(self.run(reqs)[0])
        if s["output_tokens_per_s"] <= 0:
            raise RuntimeError(f"a burst of {self.P['probe']} requests produced no token: "
                               f"{s['refused']} refused, {s['expired']} expired, "
                               f"{s['failed']} failed "
                               f"({'; '.join(s['errors'])})")
        mean_out = statistics.fmean(o for _, o in shapes[:self.P["probe"]])
        s["capacity_requests_per_s"] = s["output_tokens_per_s"] / mean_out
        if self.P["max_rate"]:  # --smoke: a 2-core machine runs the client too
            s["capacity_requests_per_s"] = min(s["capacity_requests_per_s"], self.P["max_rate"])
        return s

    def ladder(self, work, shapes, fractions, cap_rps, k):
        rungs = []
        dur = self.P["duration"]
        for i, f in enumerate(fractions):
            rate = f * cap_rps
            rng = self.rng(k + i)
            times = C.poisson_times(rate, dur, rng)
            reqs = requests_at(times, shapes, self.ids, rng, self.P["model"], self.a.lane,
                               work, deadline=dur + self.P["drain"])
            s = self.summary(self.run(reqs)[0], rate=rate, fraction=f, work=work)
            if s["failed"]:
                self.res["failures"].append((f"{work} at {rate:.2f} req/s", f"{s['failed']} "
                                             f"requests failed: {'; '.join(s['errors'])}"))
            rungs.append(s)
            print_rung(s, list(self.slo))
        return rungs

    def flood(self, cap_rps, k):
        P, dur = self.P, self.P["flood_duration"]
        shapes = [(P["isl"], P["osl"])]
        rt_times = C.poisson_times(RT_SHARE * cap_rps, dur, self.rng(k))
        b_times = C.poisson_times(FLOOD_SHARE * cap_rps, dur, self.rng(k + 1))

        def realtime():
            return requests_at(rt_times, shapes, self.ids, self.rng(k + 2), P["model"],
                               "realtime", "realtime", deadline=dur + P["drain"])
        alone, _ = self.run(realtime())
        batch = requests_at(b_times, shapes, self.ids, self.rng(k + 3), P["model"], "batch",
                            "batch", deadline=dur + 5.0)
        both, start = self.run(realtime() + batch)
        rt = [r for r in both if r.tag == "realtime"]
        bt = [r for r in both if r.tag == "batch"]
        in_window = sum(1 for r in bt for t in r.token_times if t <= start + dur)
        out = {"shape": f"{P['isl']} in / {P['osl']} out, realtime {RT_SHARE:.0%} + batch "
                        f"{FLOOD_SHARE:.0%} of {cap_rps:.2f} req/s, {dur:g} s",
               "capacity_requests_per_s": cap_rps,
               "batch_output_tokens_per_s": in_window / dur,
               "batch": self.summary(bt)}
        for name, rs in (("unloaded", alone), ("flooded", rt)):
            s = self.summary(rs)
            s["ttft_p99_ms"] = p99_with_refusals(rs, "ttft")
            s["itl_p99_ms"] = p99_with_refusals(rs, "itl")
            out[name] = s
        for name, s in (("realtime alone", out["unloaded"]), ("realtime flooded",
                                                                out["flooded"])):
            if s["failed"]:
                self.res["failures"].append((f"flood: {name}", f"{s['failed']} requests "
                                             f"failed: {'; '.join(s['errors'])}"))
        return out

    def prefix(self, k):
        """One request at a time: shared prefix + suffix, and as many new tokens."""
        P, rng = self.P, self.rng(k)
        shared = rng.choices(self.ids, k=P["prefix"])
        n = P["prefix"] + P["suffix"]

        def one(prompt):
            res = C.Result()
            C.send("127.0.0.1", self.d.http, C.Request(0.0, body(P["model"], prompt, 2)), res,
                   time.monotonic())
            if not res.ok:
                raise RuntimeError(f"prefix request failed: status {res.status} {res.error}")
            return res
        one(shared + rng.choices(self.ids, k=P["suffix"]))  # computes the shared blocks
        with_, without = [], []
        for i in range(P["prefix_pairs"]):
            pair = [("with", shared + rng.choices(self.ids, k=P["suffix"])),
                    ("without", rng.choices(self.ids, k=n))]
            for kind, prompt in (pair if i % 2 == 0 else pair[::-1]):
                (with_ if kind == "with" else without).append(one(prompt))
        return {"shape": f"{P['prefix']} shared + {P['suffix']} new vs {n} new tokens, "
                         f"{P['prefix_pairs']} of each, one at a time",
                "with_ttft_p50_ms": 1e3 * statistics.median(r.ttft for r in with_),
                "without_ttft_p50_ms": 1e3 * statistics.median(r.ttft for r in without),
                "with_ttft_p99_ms": 1e3 * C.percentile([r.ttft for r in with_], 99),
                "without_ttft_p99_ms": 1e3 * C.percentile([r.ttft for r in without], 99),
                "cached_tokens_mean": statistics.fmean(r.cached_tokens for r in with_),
                "cached_tokens_without_mean": statistics.fmean(r.cached_tokens
                                                               for r in without)}


def print_rung(s, lanes):
    g = "/".join(f"{s['goodput'][n]['output_tokens_per_s']:.0f}" for n in lanes)
    num = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
    pair = lambda n: f"{num(s[n + '_p50_ms'])}/{num(s[n + '_p99_ms'])}"  # noqa: E731
    print(f"| {s['work']} | {s['rate']:.2f} ({s['fraction']:.2f}x) | {s['requests']} | "
          f"{s['completed']} | {s['refused']}/{s['expired']} | {s['failed']} | "
          f"{s['output_tokens_per_s']:.0f} | "
          f"{pair('ttft')} | {pair('itl')} | {pair('tpot')} | {g} | "
          f"{fmt_ms(s['client_lag_p99_ms'])} |", flush=True)


# ------------------------------------------------------------------------------------------
# the reference
# ------------------------------------------------------------------------------------------

def reference(args, P, ckpt, ids, mix):
    """transformers static batching on the uniform and the mixed workload: {work: best point,
    "points": {...}}, or {"why": ...} when it does not run."""
    if args.reference == "none":
        return {"why": "--reference none"}
    try:
        import gen_static
        st = gen_static.Static(ckpt, "cpu" if args.smoke else args.device)
    except ImportError as e:
        if args.reference == "transformers":
            raise
        return {"why": f"transformers not importable: {e}"}
    out = {"points": {"uniform": [], "mixed": []}}
    try:
        for b in P["hf_batches"]:
            rng = random.Random(args.seed * 1000 + 900 + b)
            prompts = [rng.choices(ids, k=P["isl"]) for _ in range(b)]
            pt = st.measure([(prompts, [P["osl"]] * b)])
            out["points"]["uniform"].append(pt)
            shapes = mix[:b]
            pm = st.measure([([rng.choices(ids, k=n) for n, _ in shapes],
                              [o for _, o in shapes])])
            out["points"]["mixed"].append(pm)
            print(f"| static batch {b} | uniform {pt['output_tokens_per_s']:.0f} tok/s, "
                  f"prefill {pt['prefill_ms']:.0f} ms, batch {pt['batch_ms']:.0f} ms | mixed "
                  f"{pm['output_tokens_per_s']:.0f} tok/s, batch {pm['batch_ms']:.0f} ms |",
                  flush=True)
    finally:
        st.close()
    for work in ("uniform", "mixed"):
        out[work] = gen_static.best(out["points"][work])
    return out


# ------------------------------------------------------------------------------------------
# main
# ------------------------------------------------------------------------------------------

def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--report", action="store_true", help="report targets without judging")
    ap.add_argument("--smoke", action="store_true", help="tiny, on the CPU, model tiny-chat")
    ap.add_argument("--out", help="write the figures and verdicts as JSON here")
    ap.add_argument("--device", default="cuda:0", help="rtxd's and transformers' GPU")
    ap.add_argument("--checkpoints", help="make_checkpoints.py's folder")
    ap.add_argument("--reference", choices=("auto", "transformers", "none"), default="auto")
    ap.add_argument("--lane", default="batch", help="lane of the ladders' requests")
    ap.add_argument("--procs", type=int, default=max(1, min(8, (os.cpu_count() or 2) // 2)))
    ap.add_argument("--duration", type=float, help="seconds of arrivals per ladder rate")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", default=",".join(sorted(SCENARIOS)),
                    help="scenarios to run (comma-separated)")
    ap.add_argument("--kv-cache-gib", type=float, help="the model's generation.kv_cache_bytes")
    ap.add_argument("--max-batch-tokens", type=int)
    ap.add_argument("--max-seqs", type=int)
    return ap.parse_args(argv)


def serve(args, P, d, ids, mix, only, res):
    """Scenarios 1-4 against the running rtxd d; figures and failures into res."""
    slo, where = d.lanes()
    print(f"# rtxd: {d.describe()}; lanes' TTFT targets {slo} ({where}); client "
          f"{args.procs} processes", flush=True)
    res.update({"model": d.describe(), "lanes": slo})
    sc = Scenarios(args, P, d, ids, slo, res)
    print("| work | rate req/s | sent | done | 429/expired | failed | tok/s | TTFT p50/p99 ms "
          "| ITL p50/p99 ms | TPOT p50/p99 ms | goodput tok/s " + "/".join(slo) +
          " | client lag p99 |\n" + "|" + " --- |" * 12, flush=True)
    cap = None
    for work, shapes, fr, k in (("uniform", [(P["isl"], P["osl"])], P["rates"], 100),
                                ("mixed", mix, P["mixed_rates"], 200)):
        if work not in only and not (work == "uniform" and "flood" in only):
            continue
        try:
            probe = sc.burst(shapes, k)
            res[f"probe_{work}"] = probe
            print(f"# {work}: burst of {P['probe']}: {probe['output_tokens_per_s']:.0f} tok/s, "
                  f"capacity about {probe['capacity_requests_per_s']:.2f} req/s", flush=True)
            if work in only:
                rungs = sc.ladder(work, shapes, fr, probe["capacity_requests_per_s"], k + 10)
                res[f"ladder_{work}"] = rungs
                res[f"saturated_{work}"] = saturated(rungs)
            if work == "uniform":
                top = max([probe] + res.get("ladder_uniform", []),
                          key=lambda s: s["output_tokens_per_s"])
                cap = top["output_tokens_per_s"] / P["osl"]
                cap = min(cap, P["max_rate"] or cap)
        except (RuntimeError, OSError) as e:
            res["failures"].append((work, f"{type(e).__name__}: {e}"))
    try:
        if "flood" in only and cap:
            f = res["flood"] = sc.flood(cap, 300)
            print(f"# flood: realtime p99 TTFT {fmt_ms(f['unloaded']['ttft_p99_ms'])} alone, "
                  f"{fmt_ms(f['flooded']['ttft_p99_ms'])} flooded; p99 ITL "
                  f"{fmt_ms(f['unloaded']['itl_p99_ms'])} / {fmt_ms(f['flooded']['itl_p99_ms'])}"
                  f"; batch {f['batch_output_tokens_per_s']:.0f} tok/s in the flood", flush=True)
    except (RuntimeError, OSError) as e:
        res["failures"].append(("flood", f"{type(e).__name__}: {e}"))
    try:
        if "prefix" in only:
            res["prefix"] = sc.prefix(400)
        res["rtxd_metrics"] = d.metrics()
    except (RuntimeError, OSError) as e:
        res["failures"].append(("prefix caching", f"{type(e).__name__}: {e}"))


def main(argv=None):
    args = parse_args(argv)
    P = dict(SMOKE if args.smoke else FULL)
    if args.duration:
        P["duration"] = P["flood_duration"] = args.duration
    if P["generation"]:
        g = dict(P["generation"])
        if args.kv_cache_gib:
            g["kv_cache_bytes"] = int(args.kv_cache_gib * (1 << 30))
        if args.max_batch_tokens:
            g["max_batch_tokens"] = args.max_batch_tokens
        if args.max_seqs:
            g["max_seqs"] = args.max_seqs
        P["generation"] = g
    only = set(args.only.split(","))
    if only - SCENARIOS:
        print(f"bench_generate: --only names {sorted(only - SCENARIOS)}; known: "
              f"{sorted(SCENARIOS)}", file=sys.stderr)
        return 2
    build = Path(os.environ.get("RTX_BUILD") or REPO / "build").resolve()
    if not os.access(build / "bin" / "rtxd", os.X_OK):
        print(f"bench_generate: {build}/bin/rtxd is missing: build it first", file=sys.stderr)
        return 2
    if not args.smoke and not os.path.exists("/dev/nvidiactl"):
        sys.path.insert(0, str(REPO / "tests"))
        import skips
        if skips.allowed("gpu"):
            print("bench_generate: skipped (no CUDA device, RTX_ALLOW_SKIP lists gpu)")
            return 0
        print("bench_generate: FAILED: no CUDA device (--smoke runs on the CPU)")
        return 1
    if args.smoke:
        repo = build / "examples" / "models"
        ckpt = repo / P["model"] / "1"
        if not (ckpt / "config.json").exists():
            print(f"bench_generate: {ckpt} is missing: make examples", file=sys.stderr)
            return 2
    else:
        import make_checkpoints
        ckpt = make_checkpoints.make(P["model"], args.checkpoints)
    ids = vocab_of(ckpt)
    mix = mixed_lengths(random.Random(args.seed), 4096, P["mix_prompt"], P["mix_output"])
    res = {"failures": [], "shapes": {"uniform": f"{P['isl']} in / {P['osl']} out",
                      "mixed": f"prompts {P['mix_prompt'][0]}..{P['mix_prompt'][1]} "
                               f"(log-uniform), outputs {P['mix_output'][0]}.."
                               f"{P['mix_output'][1]}"},
           "settings": {k: v for k, v in P.items()}, "smoke": args.smoke,
           "definitions": {"client": C.__doc__, "reference": None}}
    rep = H.Report(judge=not (args.report or H.report_only([])))
    with tempfile.TemporaryDirectory(prefix="rtx-bench-generate-") as tmp:
        if not args.smoke:
            repo = make_repository(tmp, P["model"], ckpt, P["generation"], args.device)
        d = Daemon(build, repo, P["model"], tmp)
        try:
            serve(args, P, d, ids, mix, only, res)
        finally:
            if d.proc.poll() is not None:
                res["failures"].append(("rtxd", f"exited {d.proc.returncode} during the run; "
                                        f"{d.log_tail()}"))
            d.stop()
    if "reference" in only:
        import gen_static
        res["definitions"]["reference"] = gen_static.__doc__
        try:
            res["reference"] = reference(args, P, ckpt, ids, mix)
        except Exception as e:  # noqa: BLE001 - the reference failed: a failed row
            res["failures"].append(("transformers static batching", f"{type(e).__name__}: {e}"))
            res["reference"] = {"why": "it failed"}
    judge(rep, res)
    print()
    rep.print_table()
    res["rows"] = [dict(zip(H.Report.HEAD[:-1] + ("verdict",), r)) for r in rep.rows]
    res["exit_status"] = rep.exit_status()
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=2, default=str))
    return rep.exit_status()


if __name__ == "__main__":
    sys.exit(main())
