"""
Inference through the SLA lanes under overload: realtime (KServe priority 1) and batch
(priority 9) requests to mlp_wide, each a full batch of 64 rows (heavy on the CPU), offered at
about twice what rtxd serves, over HTTP and gRPC at once. Realtime requests must all succeed
within their timeout; batch requests are refused at admission with HTTP 429 + Retry-After /
gRPC RESOURCE_EXHAUSTED and a "retry after N ms" hint; every request gets exactly one
answer, /metrics counts the lanes' outcomes, and rtxd keeps serving afterwards.

Capacity is measured first (sequential requests), so the offered load follows the machine.
"""

import concurrent.futures as cf
import json
import time

import numpy as np
import pytest
import tritonclient.grpc as tg
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

import grpc_util as gu
import http_util as hu
import serving_harness as sh

SERVER_KW = {"repository": sh.example_repository(), "control": "explicit",
             "startup": ("mlp_wide", "simple")}
ROWS = 64           # one full batch per request
LOAD_S = 5.0        # seconds of offered load
# realtime requests per service time: a fifth of capacity, so the realtime lane alone stays
# within what rtxd serves even when the other test worker slows the CPU down several times
# over (its queue then fills to the deadline and refusals are right, not a failure of the lanes)
RT_SHARE = 0.2
BATCH_SHARE = 1.8   # batch requests per service time: 2x capacity in all


@pytest.fixture(scope="module")
def d(server):
    hu.wait_http(server)
    return server


def x_of(seed):
    return np.random.default_rng(seed).standard_normal((ROWS, 1024)).astype(np.float32)


def http_call(d, seed, priority, timeout_us):
    """('ok' | 'overload' | 'expired' | 'error', detail) of one HTTP request."""
    r = hu.infer(d, "mlp_wide", {"x": x_of(seed)}, binary_inputs=True, binary_output=True,
                 params={"priority": priority, "timeout": timeout_us})
    if r.status == 200:
        hu.decode_infer(r)
        return "ok", ""
    msg = r.body.decode(errors="replace")
    if r.status == 429:
        ra = r.headers.get("retry-after")
        assert ra is not None and int(ra) >= 1, f"429 without a Retry-After: {r.headers}"
        assert "retry after" in msg, msg
        return "overload", msg
    if r.status == 503 and "deadline" in msg:
        return "expired", msg
    return "error", f"HTTP {r.status}: {msg}"


def grpc_call(d, seed, priority, timeout_us):
    c = tg.InferenceServerClient(d.address)
    try:
        inp = gu.inputs(("x", x_of(seed)))
        c.infer("mlp_wide", inp, priority=priority, timeout=timeout_us,
                client_timeout=60 * sh.SLOW)
        return "ok", ""
    except InferenceServerException as e:
        status, msg = str(e.status()), e.message() or ""
        if status == "StatusCode.RESOURCE_EXHAUSTED":
            assert "retry after" in msg, msg
            return "overload", msg
        if status == "StatusCode.DEADLINE_EXCEEDED":
            return "expired", msg
        return "error", f"{status}: {msg}"
    finally:
        c.close()


def lane_counts(d):
    text = hu.get(d, "/metrics").body.decode()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    out = {}
    for s in fams["rtxd_lane_requests"].samples:
        if s.name == "rtxd_lane_requests_total" and s.labels["kind"] == "inference":
            out[(s.labels["lane"], s.labels["outcome"])] = s.value
    depth = {s.labels["lane"]: s.value for s in fams["rtxd_lane_queue_depth"].samples
             if s.labels["kind"] == "inference"}
    brown = [s.value for s in fams["rtxd_brownout"].samples if s.labels["kind"] == "inference"]
    assert len(brown) == 1
    jobs = {s.labels["lane"] for s in fams["rtxd_lane_queue_depth"].samples
            if s.labels["kind"] == "jobs"}
    assert jobs == set(depth), (jobs, depth)  # the job manager's lanes are the same ones
    return out, depth


def compute_ns(d):
    """(requests, ns) of mlp_wide's compute so far (Triton's statistics)."""
    st = hu.get(d, "/v2/models/mlp_wide/stats").json()["model_stats"][0]["inference_stats"]
    return sum(int(st[k]["count"]) for k in ("compute_infer",)), \
        sum(int(st[k]["ns"]) for k in ("compute_input", "compute_infer", "compute_output"))


def test_realtime_served_batch_shed_under_overload(d):
    # capacity: the server's own time per full-batch request, over sequential requests (the
    # first ones also teach rtxd the cost)
    for i in range(2):
        assert http_call(d, i, 1, 0)[0] == "ok"
    n0, ns0 = compute_ns(d)
    for i in range(4):
        assert http_call(d, 10 + i, 1, 0)[0] == "ok"
    n1, ns1 = compute_ns(d)
    service = (ns1 - ns0) / max(1, n1 - n0) / 1e9
    rt_timeout = max(2.0, 12 * service) * sh.SLOW      # seconds
    batch_timeout = max(0.2, 2 * service)                # seconds: unmeetable under overload

    # offered load: open loop, both lanes, alternating HTTP and gRPC
    sends = []
    for lane, share, prio, tmo in (("rt", RT_SHARE, 1, rt_timeout),
                                   ("batch", BATCH_SHARE, 9, batch_timeout)):
        gap = service / share
        n = max(4, int(LOAD_S / gap))
        for k in range(n):
            sends.append((k * gap, lane, prio, tmo, "http" if k % 2 == 0 else "grpc"))
    sends.sort()
    start = time.monotonic()
    results = []
    with cf.ThreadPoolExecutor(max_workers=64) as pool:
        futs = []
        for i, (at, lane, prio, tmo, proto) in enumerate(sends):
            delay = start + at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            fn = http_call if proto == "http" else grpc_call
            sent = time.monotonic()
            futs.append((lane, proto, tmo, sent,
                         pool.submit(lambda f=fn, s=i, p=prio, t=tmo:
                                     (f(d, 100 + s, p, int(t * 1e6)), time.monotonic()))))
        for lane, proto, tmo, sent, f in futs:
            (kind, detail), done = f.result(timeout=60 * sh.SLOW)  # exactly one answer each
            results.append((lane, proto, kind, detail, done - sent, tmo))

    rt = [r for r in results if r[0] == "rt"]
    batch = [r for r in results if r[0] == "batch"]
    bad_rt = [r for r in rt if r[2] != "ok"]
    assert not bad_rt, f"realtime requests failed: {bad_rt[:5]} (service {service:.3f} s)" \
        f"{d.log_excerpt()}"
    late = [r for r in rt if r[4] > r[5] + 0.5 * sh.SLOW]
    assert not late, f"realtime answered after its timeout: {late[:5]}"
    errors = [r for r in results if r[2] == "error"]
    assert not errors, f"unexpected answers: {errors[:5]}"
    shed = [r for r in batch if r[2] == "overload"]
    assert shed, f"no batch request was refused; service {service:.3f} s, " \
        f"batch outcomes {[r[2] for r in batch]}"
    assert {r[1] for r in shed} == {"http", "grpc"}, \
        f"both front ends refuse with a retry hint: {[(r[1], r[2], r[3][:80]) for r in batch]}"

    rt_lat = sorted(r[4] for r in rt)
    print(f"service {service * 1e3:.1f} ms; realtime {len(rt)} ok, max {rt_lat[-1] * 1e3:.0f} ms"
          f" (timeout {rt_timeout * 1e3:.0f} ms); batch {len(batch)}: {len(shed)} refused, "
          f"{sum(r[2] == 'ok' for r in batch)} ok, {sum(r[2] == 'expired' for r in batch)} "
          f"expired")
    counts, depth = lane_counts(d)
    refused = sum(counts.get(("batch", o), 0) for o in ("rejected_full", "rejected_deadline",
                                                         "shed"))
    assert refused >= len(shed), counts
    assert counts[("realtime", "completed")] >= len(rt) + 6
    assert counts[("realtime", "admitted")] == counts[("realtime", "completed")], counts
    assert depth and all(v == 0 for v in depth.values()), depth
    hu.assert_serving(d)
    gu.assert_serving(d)


def test_rtxctl_lanes_lists_the_inference_lanes(d):
    """Admin.Lanes (rtxctl lanes) has a row for the inference lanes beside the job devices',
    with the counters /metrics shows."""
    for seed in range(3):
        r = hu.infer(d, "simple", {"INPUT0": np.ones((1, 16), np.int32),
                                   "INPUT1": np.ones((1, 16), np.int32)},
                     params={"lane": "interactive"})
        assert r.status == 200, r
    counts, _ = lane_counts(d)
    r = sh.harness.rtxctl("--json", "lanes", address=d.address, check_rc=0)
    doc = json.loads(r.out)
    infer = [s for s in doc["schedulers"] if s["kind"] == "inference"]
    assert len(infer) == 1 and infer[0]["device"] == "inference", doc["schedulers"]
    assert infer[0]["executors"] >= 2, infer  # one instance per loaded model at least
    assert {s["kind"] for s in doc["schedulers"]} == {"jobs", "inference"}
    lanes = {ln["lane"]: ln for ln in doc["lanes"] if ln["device"] == "inference"}
    assert list(lanes) == ["realtime", "interactive", "batch"], lanes
    for lane, ln in lanes.items():
        assert ln["admitted"] == counts.get((lane, "admitted"), 0), (lane, ln, counts)
    assert lanes["interactive"]["admitted"] >= 3
    r = sh.harness.rtxctl("lanes", address=d.address, check_rc=0)
    assert any(ln.split()[:2] == ["inference", "interactive"] for ln in r.out.splitlines()), \
        r.out
    assert "\ninference: " in r.out and " model instance" in r.out, r.out
