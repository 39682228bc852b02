"""
rtxctl generation (Admin.Generation) against rtxd serving the example repository, whose
tiny-chat is a generative model (a random-weight Llama checkpoint) beside graph models:

- the zero state of a fresh engine: the model listed with its device, architecture and
  lanes, a KV pool of whole blocks that /metrics counts the same, nothing used, no counts;
- after completions over OpenAI's POST /v1/completions: the token, request and latency
  counts move by what the responses' usage says, the KV blocks come back to 0, the prefix
  cache counts a repeated long prompt, and every figure equals /metrics' (the percentiles are
  recomputed here from /metrics' buckets with Prometheus' histogram_quantile rule);
- --watch: one JSON line per sample, rates from the second on that agree with the counters;
- the text table, the MODEL filter, and the errors: an unknown model (NOT_FOUND, exit 1), a
  graph model (INVALID_ARGUMENT naming it, exit 1), usage errors (exit 2).
"""

import concurrent.futures as cf
import json
import math
import threading
import time

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

import gen_util as gu
import harness as h
import http_util as hu
import serving_harness as sh
from harness import admin_pb2

MODEL = "tiny-chat"
LANES = ["realtime", "interactive", "batch"]  # the daemon's default lanes


@pytest.fixture(scope="module")
def d(server):
    hu.wait_http(server)
    return server


def ctl(d, *args, **kw):
    return h.rtxctl(*args, address=d.address, **kw)


def generation(d, *args):
    """`rtxctl --json generation ARGS` as {model name: model object}."""
    j = ctl(d, "--json", "generation", *args, check_rc=0).json()
    assert set(j) == {"models"}, j
    return {m["name"]: m for m in j["models"]}


def tiny(d):
    models = generation(d)
    assert MODEL in models, f"{MODEL} not listed: {sorted(models)}{d.log_excerpt()}"
    return models[MODEL]


def scrape(d):
    r = hu.get(d, "/metrics")
    assert r.status == 200, r
    return {f.name: f for f in text_string_to_metric_families(r.body.decode())}


def samples(fams, family, sample=None, **labels):
    sample = sample or family
    return [s for s in fams[family].samples
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())]


def metric(fams, family, sample=None, **labels):
    hits = samples(fams, family, sample, **labels)
    assert len(hits) == 1, f"{sample or family}{labels}: {len(hits)} samples"
    return hits[0].value


def histogram_quantile(q, buckets):
    """Prometheus' histogram_quantile over cumulative (le, count) pairs, +Inf last
    (promql/quantile.go: the rank q * total falls in the first bucket whose cumulative count
    reaches it; linear within it, from 0 for the first; the +Inf bucket gives the bound
    before it). A bucket that adds no sample is passed over (the Go code would divide 0 by 0
    at rank 0)."""
    total = buckets[-1][1]
    if total == 0:
        return 0.0
    rank = q * total
    prev_le, prev_count = 0.0, 0.0
    for i, (le, count) in enumerate(buckets):
        if count > prev_count and (count >= rank or count == total):
            if math.isinf(le):
                return buckets[i - 1][0]
            return prev_le + (le - prev_le) * (rank - prev_count) / (count - prev_count)
        prev_le, prev_count = le, count
    raise AssertionError("unreachable")


HISTOGRAMS = {"ttft": "rtx_gen_time_to_first_token_seconds",
              "itl": "rtx_gen_inter_token_latency_seconds",
              "tpot": "rtx_gen_time_per_output_token_seconds",
              "e2e": "rtx_gen_request_latency_seconds"}


def check_against_metrics(d, m):
    """Every figure of model object m equals its /metrics sample (nothing runs meanwhile)."""
    fams = scrape(d)
    lbl = {"model": MODEL}
    for key, fam in [("prompt_tokens", "rtx_gen_prompt_tokens"),
                     ("generation_tokens", "rtx_gen_generation_tokens"),
                     ("steps", "rtx_gen_steps"),
                     ("prefix_queries", "rtx_gen_prefix_cache_queries"),
                     ("prefix_hits", "rtx_gen_prefix_cache_hits"),
                     ("kv_evictions", "rtx_gen_kv_evictions")]:
        assert m[key] == metric(fams, fam, fam + "_total", **lbl), key
    for outcome in ("finished", "canceled", "failed"):
        assert m["requests_" + outcome] == metric(fams, "rtx_gen_requests",
                                                  "rtx_gen_requests_total", outcome=outcome,
                                                  **lbl), outcome
    used = metric(fams, "rtx_gen_kv_blocks", state="used", **lbl)
    cached = metric(fams, "rtx_gen_kv_blocks", state="cached", **lbl)
    free = metric(fams, "rtx_gen_kv_blocks", state="free", **lbl)
    assert (m["kv_blocks_used"], m["kv_blocks_cached"]) == (used, cached)
    assert m["kv_blocks_total"] == used + cached + free
    assert m["prefix_hit_rate"] == pytest.approx(
        metric(fams, "rtx_gen_prefix_cache_hit_ratio", **lbl), rel=1e-5, abs=1e-12)
    for lane in m["lanes"]:
        ll = {"lane": lane["lane"], **lbl}
        assert lane["running"] == metric(fams, "rtx_gen_sequences", state="running", **ll)
        assert lane["waiting"] == metric(fams, "rtx_gen_sequences", state="waiting", **ll)
        assert lane["preempted"] == metric(fams, "rtx_gen_preemptions",
                                           "rtx_gen_preemptions_total", **ll)
        assert lane["refused"] == metric(fams, "rtx_gen_refused", "rtx_gen_refused_total", **ll)
    for key, fam in HISTOGRAMS.items():
        lat = m[key]
        buckets = sorted(((float(s.labels["le"]), s.value)
                          for s in samples(fams, fam, fam + "_bucket", **lbl)),
                         key=lambda b: b[0])
        count = metric(fams, fam, fam + "_count", **lbl)
        total = metric(fams, fam, fam + "_sum", **lbl)
        assert lat["count"] == count == buckets[-1][1], (key, lat, buckets)
        assert lat["sum_s"] == pytest.approx(total, rel=1e-6, abs=1e-9), key
        assert lat["mean_s"] == pytest.approx(total / count if count else 0.0, rel=1e-6,
                                              abs=1e-9), key
        for q, field in ((0.5, "p50_s"), (0.99, "p99_s")):
            assert lat[field] == pytest.approx(histogram_quantile(q, buckets), rel=1e-9,
                                               abs=1e-12), (key, field, lat, buckets)


def wait_idle(d, timeout=10.0):
    """The model's object once no block is held and no sequence runs or waits."""
    end = time.monotonic() + timeout * sh.SLOW
    while True:
        m = tiny(d)
        busy = m["kv_blocks_used"] or any(x["running"] or x["waiting"] for x in m["lanes"])
        if not busy:
            return m
        assert time.monotonic() < end, (
            f"{MODEL} still holds blocks or sequences after its requests ended: {m}"
            f"{d.log_excerpt()}")
        time.sleep(0.02)


def complete(d, prompt, max_tokens, **extra):
    """One non-streaming completion (greedy, EOS ignored so max_tokens are generated);
    returns its usage."""
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, **extra}
    r = hu.post(d, "/v1/completions", body, headers={"Content-Type": "application/json"})
    assert r.status == 200, f"POST /v1/completions: {r}{d.log_excerpt()}"
    j = r.json()
    assert j["choices"][0]["finish_reason"] == "length", j
    return j["usage"]


def delta(after, before, key):
    return after[key] - before[key]


# ------------------------------------------------------------------------------------------
# The zero state (a daemon of its own: nothing has generated on it)
# ------------------------------------------------------------------------------------------

def test_zero_state(make_server, tmp_path):
    repo = sh.copy_repository(tmp_path / "models", models=(MODEL, "simple"))
    s = make_server("fresh", repository=repo)
    s.start()
    hu.wait_http(s)
    models = generation(s)
    assert list(models) == [MODEL], f"only the generative model is listed: {sorted(models)}"
    m = models[MODEL]
    assert (m["version"], m["device"], m["arch"]) == (1, "cpu", "llama"), m
    hf = json.loads((repo / MODEL / "1" / "config.json").read_text())
    assert m["context_length"] == hf["max_position_embeddings"], (m, hf)
    assert [x["lane"] for x in m["lanes"]] == LANES, m["lanes"]
    assert all(x == {"lane": x["lane"], "running": 0, "waiting": 0, "preempted": 0,
                     "refused": 0} for x in m["lanes"]), m["lanes"]
    # the pool: whole blocks of K and V rows of every layer, within the configured 8 MiB
    assert m["block_size"] == 16, m
    assert m["kv_blocks_total"] > 0 and m["kv_blocks_used"] == 0, m
    assert m["kv_blocks_cached"] == 0 and m["kv_usage"] == 0.0, m
    head_dim = hf["hidden_size"] // hf["num_attention_heads"]
    row = 2 * hf["num_hidden_layers"] * m["block_size"] * hf["num_key_value_heads"] * head_dim
    assert m["kv_cache_bytes"] % m["kv_blocks_total"] == 0, m
    per_block = m["kv_cache_bytes"] // m["kv_blocks_total"]
    assert per_block in (2 * row, 4 * row), (per_block, row)  # bf16/f16 or f32 rows
    assert m["kv_cache_bytes"] <= 8 * 2**20, m
    assert m["weight_bytes"] > 0, m
    for key in ("prefix_queries", "prefix_hits", "kv_evictions", "prompt_tokens",
                "generation_tokens", "requests_finished", "requests_canceled",
                "requests_failed", "steps"):
        assert m[key] == 0, (key, m)
    assert m["prefix_hit_rate"] == 0.0
    for key in HISTOGRAMS:
        assert m[key] == {"count": 0, "sum_s": 0.0, "mean_s": 0.0, "p50_s": 0.0,
                          "p99_s": 0.0}, (key, m[key])
    assert "rates" not in m, "one sample has no rates"
    check_against_metrics(s, m)
    text = ctl(s, "generation", check_rc=0).out
    assert f"{MODEL}  version 1, llama on cpu" in text, text
    assert f"0/{m['kv_blocks_total']} blocks used (0.0%)" in text, text
    assert "[" + "." * 30 + "]" in text, text
    for lane in LANES:
        assert lane in text, text
    assert "ttft" in text and "e2e" in text, text


def test_no_repository(tmp_path):
    """A daemon that serves no models lists none; a named model is not found."""
    dm = h.Daemon(tmp_path / "bare")
    try:
        dm.start()
        r = h.rtxctl("--json", "generation", address=dm.address, check_rc=0)
        assert r.json() == {"models": []}, r.describe()
        r = h.rtxctl("generation", address=dm.address, check_rc=0)
        assert "no generative model is ready" in r.out, r.describe()
        r = h.rtxctl("generation", MODEL, address=dm.address, check_rc=1)
        assert "unknown model" in r.err and "no model repository" in r.err, r.describe()
    finally:
        err = dm.cleanup()
    assert err is None, err


# ------------------------------------------------------------------------------------------
# Counters after generating
# ------------------------------------------------------------------------------------------

def test_counts_follow_completions(d):
    before = wait_idle(d)
    prompts = ["Hello", "The daemon", "A lane", "Blocks"]  # each well under one block
    usages = [complete(d, p, 6 + i) for i, p in enumerate(prompts)]
    after = wait_idle(d)
    n = len(prompts)
    gen = sum(u["completion_tokens"] for u in usages)
    assert gen == sum(6 + i for i in range(n)), usages
    assert delta(after, before, "generation_tokens") == gen
    computed = sum(u["prompt_tokens"] - u.get("prompt_tokens_details", {}).get(
        "cached_tokens", 0) for u in usages)
    assert delta(after, before, "prompt_tokens") == computed, (before, after, usages)
    assert delta(after, before, "requests_finished") == n
    assert delta(after, before, "requests_canceled") == 0
    assert delta(after, before, "requests_failed") == 0
    assert delta(after, before, "steps") >= max(6 + i for i in range(n))
    # one TTFT and one e2e per request, one ITL per token after a sequence's first, one TPOT
    # per finished sequence of more than one token
    assert after["ttft"]["count"] - before["ttft"]["count"] == n
    assert after["e2e"]["count"] - before["e2e"]["count"] == n
    assert after["itl"]["count"] - before["itl"]["count"] == gen - n
    assert after["tpot"]["count"] - before["tpot"]["count"] == n
    assert after["kv_blocks_used"] == 0, after
    for key in HISTOGRAMS:
        lat = after[key]
        assert 0 < lat["p50_s"] <= lat["p99_s"], (key, lat)
        assert lat["mean_s"] == pytest.approx(lat["sum_s"] / lat["count"], rel=1e-9)
    check_against_metrics(d, after)


def test_prefix_cache_counts_repeated_prompt(d):
    before = wait_idle(d)
    prompt = ("The scheduler runs each step's decode tokens first and fills the rest of "
              "its budget with prompt chunks of waiting sequences. ") * 3
    first = complete(d, prompt, 4)
    assert first["prompt_tokens"] >= 3 * 16, first  # at least three full blocks
    second = complete(d, prompt, 4)
    after = wait_idle(d)
    hits = delta(after, before, "prefix_hits")
    queries = delta(after, before, "prefix_queries")
    cached = second.get("prompt_tokens_details", {}).get("cached_tokens", 0)
    assert hits >= 1 and queries >= hits, (before, after)
    assert cached > 0 and hits * after["block_size"] >= cached, (hits, second)
    assert after["prefix_hit_rate"] == pytest.approx(
        after["prefix_hits"] / after["prefix_queries"], rel=1e-12)
    computed = first["prompt_tokens"] + second["prompt_tokens"] - cached
    assert delta(after, before, "prompt_tokens") == computed, (first, second)
    assert after["kv_blocks_used"] == 0
    assert after["kv_blocks_cached"] > 0, "the prompt's full blocks stay cached for reuse"
    check_against_metrics(d, after)
    text = ctl(d, "generation", MODEL, check_rc=0).out
    pct = 100.0 * after["prefix_hit_rate"]
    assert f"{pct:.1f}% of {after['prefix_queries']} full blocks found" in text, text


def test_watch_rates(d):
    """--watch prints one JSON line per sample; from the second on each model's rates are
    the counters' differences over interval_s."""
    stop = threading.Event()
    errors = []

    def load():
        try:
            while not stop.is_set():
                complete(d, "Tokens per second", 8)
        except BaseException as e:  # reported below
            errors.append(e)

    t = threading.Thread(target=load, daemon=True)
    t.start()
    try:
        r = ctl(d, "--json", "generation", MODEL, "--watch", "700ms", "--count", "3",
                check_rc=0)
    finally:
        stop.set()
        t.join(60 * sh.SLOW)
    assert not errors, errors
    lines = [json.loads(x) for x in r.out.splitlines()]
    assert len(lines) == 3, r.describe()
    assert lines[0]["interval_s"] == 0.0 and lines[0]["models"][0]["rates"] is None
    moved = 0
    for prev, cur in zip(lines, lines[1:]):
        dt = cur["interval_s"]
        assert dt >= 0.69, (dt, r.describe())
        p, c = prev["models"][0], cur["models"][0]
        rates = c["rates"]
        assert rates is not None, cur
        for key, counter in (("generation_tokens_per_s", "generation_tokens"),
                             ("prompt_tokens_per_s", "prompt_tokens"),
                             ("steps_per_s", "steps")):
            assert rates[key] == pytest.approx((c[counter] - p[counter]) / dt, rel=1e-9), key
        done = sum(c[k] - p[k] for k in ("requests_finished", "requests_canceled",
                                         "requests_failed"))
        assert rates["requests_per_s"] == pytest.approx(done / dt, rel=1e-9)
        moved += rates["generation_tokens_per_s"] > 0
        assert cur["time_unix_ms"] > prev["time_unix_ms"]
    assert moved >= 1, f"no tokens generated during the watch: {r.out}"
    text = ctl(d, "generation", "--watch", "300ms", "--count", "2", check_rc=0).out
    assert text.count(f"{MODEL}  version 1") == 2, text
    assert "tok/s generated" in text, "the second sample shows rates"
    wait_idle(d)


def test_cancel_counts_and_frees_blocks(d):
    """Streams closed by their clients while generating: held blocks and running sequences
    per lane while they run; then counted as canceled, and every block back.

    tiny-chat makes a token in well under a millisecond, so a stream may end on its own before
    the snapshot or before its socket is closed; such an attempt proves nothing and is made
    again (a fresh set of streams), up to five times."""
    for attempt in range(5):
        before = wait_idle(d)
        socks = []
        try:
            for i, lane in enumerate(["realtime", "batch", "batch"]):
                s, _ = gu.open_stream(d, "/v1/completions", {
                    "model": MODEL, "prompt": "Once upon a time", "max_tokens": 500,
                    "stream": True, "ignore_eos": True, "seed": i, "lane": lane})
                socks.append(s)
            mid = tiny(d)
        finally:
            for s in socks:
                s.close()
        ended = lambda m: m["requests_finished"] + m["requests_canceled"]  # noqa: E731
        gu.wait_for(lambda: ended(tiny(d)) >= ended(before) + 3, "three requests ended")
        after = wait_idle(d)
        if delta(after, before, "requests_finished") == 0:
            break
    else:
        pytest.fail(f"in five attempts a stream always ended before it was closed: {after}")
    lanes = {x["lane"]: x for x in mid["lanes"]}
    assert lanes["realtime"]["running"] + lanes["realtime"]["waiting"] == 1, mid["lanes"]
    assert lanes["batch"]["running"] + lanes["batch"]["waiting"] == 2, mid["lanes"]
    assert lanes["interactive"]["running"] + lanes["interactive"]["waiting"] == 0
    assert mid["kv_blocks_used"] >= 3, mid
    assert 0 < mid["kv_usage"] == pytest.approx(mid["kv_blocks_used"] / mid["kv_blocks_total"])
    assert delta(after, before, "requests_canceled") == 3, (before, after)
    assert after["kv_blocks_used"] == 0
    check_against_metrics(d, after)


def test_refusals_counted_per_lane(make_server, tmp_path):
    """Requests its lane cannot take are refused (429) and counted on that lane."""
    s = gu.overload_server(make_server, tmp_path,
                           repository=sh.copy_repository(tmp_path / "models", models=(MODEL,)))
    body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 300,
            "ignore_eos": True, "lane": "tiny"}

    def one(i):
        return hu.post(s, "/v1/completions", {**body, "seed": i},
                       headers={"Content-Type": "application/json"})

    with cf.ThreadPoolExecutor(32) as ex:
        results = list(ex.map(one, range(32)))
    ok = sum(r.status == 200 for r in results)
    refused = sum(r.status == 429 for r in results)
    assert ok + refused == len(results), [r for r in results if r.status not in (200, 429)][:3]
    assert ok and refused, f"{ok} answered, {refused} refused"
    m = wait_idle(s)
    lanes = {x["lane"]: x for x in m["lanes"]}
    assert list(lanes) == LANES + ["tiny"], list(lanes)
    assert lanes["tiny"]["refused"] == refused, (lanes, refused)
    assert all(lanes[x]["refused"] == 0 for x in LANES), lanes
    assert m["requests_finished"] == ok, (m, ok)
    text = ctl(s, "generation", check_rc=0).out
    row = next(x.split() for x in text.splitlines() if x.split()[:1] == ["tiny"])
    assert row == ["tiny", "0", "0", "0", str(refused)], (row, text)


# ------------------------------------------------------------------------------------------
# Filter and errors
# ------------------------------------------------------------------------------------------

def test_filter_and_errors(d):
    models = generation(d, MODEL)
    assert list(models) == [MODEL], models
    assert generation(d)[MODEL]["kv_blocks_total"] == models[MODEL]["kv_blocks_total"]
    r = ctl(d, "generation", "nosuch", check_rc=1)
    assert "unknown model 'nosuch'" in r.err and "[not found" in r.err, r.describe()
    r = ctl(d, "generation", "simple", check_rc=1)
    assert "'simple' is not a generative model" in r.err and "rtx_graph" in r.err, r.describe()
    assert "[invalid argument" in r.err, r.describe()
    c = d.client()
    h.expect_rpc_error(lambda: c.admin.Generation(admin_pb2.GenerationRequest(model="nosuch"),
                                                  timeout=h.RPC_TIMEOUT),
                       grpc.StatusCode.NOT_FOUND, "nosuch", daemon=d, what="unknown model")
    h.expect_rpc_error(lambda: c.admin.Generation(admin_pb2.GenerationRequest(model="simple"),
                                                  timeout=h.RPC_TIMEOUT),
                       grpc.StatusCode.INVALID_ARGUMENT, "simple", "generative", daemon=d,
                       what="graph model")
    got = c.admin.Generation(admin_pb2.GenerationRequest(), timeout=h.RPC_TIMEOUT)
    assert [m.name for m in got.models] == [MODEL]


@pytest.mark.parametrize("args,needle", [
    (["--count", "2"], "--count needs --watch"),
    (["--watch", "0"], "--watch wants an interval"),
    (["--watch", "fast"], "--watch wants an interval"),
    (["--watch", "1", "--count", "0"], "--count wants a positive integer"),
    ([MODEL, "other"], "one model name only"),
    (["--bogus"], "unknown option '--bogus'"),
    (["--watch"], "option --watch needs a value"),
])
def test_usage_errors(args, needle):
    r = h.rtxctl("generation", *args, address="127.0.0.1:1", check_rc=2)
    assert needle in r.err, r.describe()


def test_help():
    r = h.rtxctl("generation", "--help", check_rc=0)
    assert "usage: rtxctl [global options] generation [MODEL]" in r.out, r.describe()
    assert "--watch" in r.out and "--count" in r.out
    assert "generation" in h.rtxctl("--help", check_rc=0).out
