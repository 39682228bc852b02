"""
SLA lanes under overload, end to end (issue 6): one rtxd with one CPU worker, realtime and
batch job traffic at about twice its capacity on loopback for a few seconds. Every job is the
same steady matmul graph (one 1024^3 GEMM). The capacity is measured, first from a few runs
and then during the load from the daemon's completion counters (Admin.Lanes), and the offered
rate follows it: on a shared CI host a job's run time varies several-fold with what else
runs, and a rate fixed in advance would be anything from 1x to 4x the capacity.

Checks: realtime jobs (each with a deadline of its lane's target) are admitted and finish
within the target at the 99th percentile; batch jobs beyond their lane's bound are refused at
once with RESOURCE_EXHAUSTED and a retry-after hint (in the message and as the
grpc-retry-pushback-ms trailer), and are not journaled; every Submit gets
exactly one answer (a job id or RESOURCE_EXHAUSTED, nothing else); every admitted job ends in
a terminal state, none stays queued or running and none is missing from the journal; the
daemon's RSS stays flat; `rtxctl lanes` (table and --json) shows the lanes with the counts the
test observed.
"""

import json
import re
import threading
import time

import grpc
import numpy as np

import harness as h
from harness import EXPIRED, SUCCEEDED, TERMINAL, state_name

LOAD_S = 6.0            # seconds of overload
TARGET_MS = int(1000 * h.SLOW)  # realtime latency target (its deadline too); x3 under ASan
BATCH_BOUND = 40        # batch jobs queued at most: a backlog longer than the target
MAX_RATE = 300.0        # jobs/s the senders offer at most
RT_SHARE, BATCH_SHARE = 0.6, 1.4   # of capacity: 2x in all

CONFIG = f"""
[lane.realtime]
target_p99_us = {TARGET_MS * 1000}

[lane.batch]
max_queued = {BATCH_BOUND}

[scheduler]
default_cost_us = 20000
"""

STEADY = h.long_graph(1, name="steady")  # one 1024^3 GEMM: ~20 ms on one core


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def percentile(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(np.ceil(p / 100.0 * len(v))) - 1)]


def test_realtime_meets_target_while_batch_is_shed(make_daemon, tmp_path):
    cfg = tmp_path / "rtxd.ini"
    cfg.write_text(CONFIG)
    d = make_daemon("lanes", workers=1, config=cfg, flags=["--store.sync=normal"]).start()
    c = d.client()
    feeds = h.long_feeds(1)

    # the cost of one job, measured (and learned by the scheduler) before the load
    # (the fastest run: on a busy host the slower ones would understate the capacity, and the
    # load would be less than twice it)
    runs = [c.run(STEADY, feeds, timeout=30)[0].run_ms for _ in range(6)]
    t_ms = float(min(runs))
    assert 1.0 < t_ms < 400.0, f"steady job takes {t_ms:.1f} ms"
    cap = [1000.0 / t_ms]  # jobs/s of the one worker, updated during the load
    caps = []
    stop = threading.Event()

    def completed():
        r = c.admin.Lanes(h.admin_pb2.LanesRequest(), timeout=h.RPC_TIMEOUT)
        return sum(ln.completed for ln in r.lanes)

    def monitor():
        # while overloaded, completions per second are the capacity; while not, they are
        # the offered rate, which then doubles each round until the worker saturates
        last_n, last_t = completed(), time.monotonic()
        while not stop.wait(0.5):
            n, t = completed(), time.monotonic()
            seen = (n - last_n) / (t - last_t)
            if seen > 0:
                cap[0] = min(MAX_RATE / 2, max(seen, 0.5 * cap[0]))
                caps.append(round(seen, 1))
            last_n, last_t = n, t

    req_rt = h.submit_request(STEADY, feeds, lane="realtime")
    req_batch = h.submit_request(STEADY, feeds, lane="batch")
    answers = []  # (lane, future)
    lock = threading.Lock()

    def send(req, lane, share):
        start = time.monotonic()
        at = start
        sent = 0
        while True:
            at += 1.0 / (share * cap[0])
            # batch goes on past LOAD_S (up to 4x) until it has offered twice its lane's
            # bound: on a slow host (sanitizers, a loaded machine) the capacity-paced rate
            # alone may not overfill the lane, and the shedding checked below needs that
            if at - start > LOAD_S and (lane != "batch" or sent > 2 * BATCH_BOUND or
                                        at - start > 4 * LOAD_S):
                return
            sent += 1
            now = time.monotonic()
            if at > now:
                time.sleep(at - now)
            r = h.jobs_pb2.SubmitRequest()
            r.CopyFrom(req)
            if lane == "realtime":  # slack for the trip: the target is checked below
                r.deadline_unix_ms = h.now_ms() + 2 * TARGET_MS
            fut = c.jobs.Submit.future(r, timeout=h.RPC_TIMEOUT)
            with lock:
                answers.append((lane, fut))

    mon = threading.Thread(target=monitor)
    senders = [threading.Thread(target=send, args=(req_rt, "realtime", RT_SHARE)),
               threading.Thread(target=send, args=(req_batch, "batch", BATCH_SHARE))]
    mon.start()
    for s in senders:
        s.start()
    time.sleep(LOAD_S / 3)
    rss_mid = rss_kib(d.proc.pid)
    for s in senders:
        s.join(4 * LOAD_S + 30)
        assert not s.is_alive(), "a sender hung"
    rss_end = rss_kib(d.proc.pid)
    stop.set()
    mon.join(30)

    # exactly one answer each: an id or RESOURCE_EXHAUSTED with a retry-after hint (or, for
    # a realtime request that reached the daemon after its deadline on a starved host,
    # INVALID_ARGUMENT "deadline already passed": the daemon never saw it in time)
    accepted = {"realtime": [], "batch": []}
    refused = {"realtime": 0, "batch": 0}
    arrived_late = 0
    for lane, fut in answers:
        try:
            accepted[lane].append(fut.result(timeout=h.RPC_TIMEOUT).job_id)
        except grpc.RpcError as e:
            if (lane == "realtime" and e.code() == grpc.StatusCode.INVALID_ARGUMENT and
                    e.details().startswith("deadline already passed")):
                arrived_late += 1
                continue
            assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, (
                f"{lane} Submit answered {e.code()}: {e.details()}{d.log_excerpt()}")
            m = re.search(r"overloaded on cpu \((lane_full|deadline|shed)\).*retry after "
                          r"(\d+) ms", e.details())
            assert m, e.details()
            # the same hint as gRPC's standard retry pushback, in the trailing metadata
            trailers = dict(e.trailing_metadata() or ())
            assert trailers.get("grpc-retry-pushback-ms") == m.group(2), (trailers, e.details())
            refused[lane] += 1
    n_rt = len(accepted["realtime"]) + refused["realtime"] + arrived_late
    assert arrived_late <= max(2, 0.05 * n_rt), f"{arrived_late} of {n_rt} realtime came late"
    n_batch = len(accepted["batch"]) + refused["batch"]
    assert n_batch > 2 * BATCH_BOUND, f"only {n_batch} batch jobs sent (capacity {caps})"
    assert refused["batch"] > 0.25 * n_batch, f"batch was not shed: {refused} of {n_batch}"
    # realtime is refused only when a noisy host makes its deadline look unmeetable
    assert refused["realtime"] <= max(2, 0.05 * n_rt), (
        f"realtime refused {refused['realtime']} of {n_rt}")

    # none stuck: every admitted job ends, and the queues empty
    end = time.monotonic() + 30 * h.SLOW
    while True:
        st = c.status()
        busy = sum(ln.queued + ln.running for ln in st.lanes)
        if busy == 0:
            break
        assert time.monotonic() < end, f"still {busy} jobs queued or running{d.log_excerpt()}"
        time.sleep(0.05)

    # none lost: the journal holds exactly the calibration jobs and the admitted ones
    jobs, _ = c.list_all(page_size=500)
    by_id = {j.id: j for j in jobs}
    ids = accepted["realtime"] + accepted["batch"]
    assert len(set(ids)) == len(ids), "a job id was given twice"
    assert len(jobs) == len(ids) + len(runs), (
        f"journal has {len(jobs)} jobs, {len(ids)} admitted + {len(runs)} calibration")
    for jid in ids:
        assert jid in by_id, f"admitted job {jid} is not in the journal"
        assert by_id[jid].state in TERMINAL, f"{jid} is {state_name(by_id[jid].state)}"

    # realtime within its target at p99 (admission to the end, on the daemon's clock)
    rt = [by_id[jid] for jid in accepted["realtime"]]
    done = [j for j in rt if j.state == SUCCEEDED]
    late = [j for j in rt if j.state == EXPIRED]
    assert len(done) + len(late) == len(rt), [state_name(j.state) for j in rt]
    assert len(late) <= max(1, 0.01 * len(rt)), f"{len(late)} of {len(rt)} realtime expired"
    lat = [j.finished_unix_ms - j.created_unix_ms for j in done]
    p50, p99 = percentile(lat, 50), percentile(lat, 99)
    print(f"\nlanes: job {t_ms:.1f} ms, capacity seen {caps} jobs/s; realtime {n_rt} sent, "
          f"{refused['realtime']} refused, {arrived_late} late, {len(late)} expired, "
          f"latency p50 {p50} ms, p99 {p99} ms (target {TARGET_MS}); batch {n_batch} sent, "
          f"{refused['batch']} refused; RSS {rss_mid} -> {rss_end} KiB")
    assert p99 <= TARGET_MS, f"realtime p99 {p99} ms > target {TARGET_MS} ms (p50 {p50})"
    batch_done = sum(1 for jid in accepted["batch"] if by_id[jid].state == SUCCEEDED)
    assert batch_done == len(accepted["batch"]), "an admitted batch job did not succeed"

    # memory flat: the second two thirds of the load added little (not under AddressSanitizer,
    # whose quarantine keeps up to 256 MiB of freed memory: each job frees 12 MiB of tensors)
    if "asan" not in h.rg.build_dir().name:
        assert rss_end - rss_mid < 24 * 1024, f"RSS grew {rss_mid} -> {rss_end} KiB under load"

    # rtxctl lanes: the lanes with the counts seen here
    r = h.rtxctl("lanes", "--json", address=d.address, check_rc=0)
    doc = json.loads(r.out)
    assert doc["default_lane"] == "batch"
    assert [s["device"] for s in doc["schedulers"]] == ["cpu"]
    assert doc["schedulers"][0]["executors"] == 1
    lanes = {ln["lane"]: ln for ln in doc["lanes"]}
    assert list(lanes) == ["realtime", "interactive", "batch"], list(lanes)
    rtl, bl = lanes["realtime"], lanes["batch"]
    assert rtl["target_p99_us"] == TARGET_MS * 1000 and rtl["weight"] == 8
    assert bl["max_queued"] == BATCH_BOUND
    assert rtl["admitted"] == len(accepted["realtime"])
    assert rtl["rejected_full"] + rtl["rejected_deadline"] + rtl["rejected_shed"] == \
        refused["realtime"]
    assert rtl["completed"] == len(done) and rtl["expired"] == len(late)
    assert rtl["wait_samples"] == len(done)
    assert 0 < rtl["wait_p99_us"] <= TARGET_MS * 1000
    assert bl["admitted"] == len(accepted["batch"]) + len(runs)
    assert bl["rejected_full"] + bl["rejected_deadline"] + bl["rejected_shed"] == \
        refused["batch"]
    assert bl["completed"] == batch_done + len(runs)
    assert bl["queued"] == 0 and bl["running"] == 0

    r = h.rtxctl("lanes", address=d.address, check_rc=0)
    lines = r.out.splitlines()
    assert lines[0].split()[:4] == ["DEVICE", "LANE", "TARGET", "WEIGHT"], r.out
    row = next(ln.split() for ln in lines if ln.split()[:2] == ["cpu", "realtime"])
    assert row[2] == f"{TARGET_MS / 1000:.2f}s" and row[3] == "8", row  # TARGET_MS >= 1000
    assert row[8] == str(len(accepted["realtime"])), row
    assert any(ln.startswith("cpu: 1 executor") for ln in lines), r.out
    assert "default lane: batch" in r.out
