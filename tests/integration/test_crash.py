"""
Crash safety: 200 acknowledged jobs (small ones of a few ms each, and two triples of long
ones), mixed restart policies; `kill -9` rtxd while jobs run; a restart on the same store;
then, within 60 s, every job is terminal and:
  * none is lost: all 200 acknowledged ids are in the journal, nothing else is;
  * every job ended succeeded, or failed with a reason - and failed only if its policy is
    FAIL and it was running at the kill ("interrupted ...");
  * none ran twice unless RERUN: attempts == 1 for all, except RERUN jobs running at the kill,
    which have attempts == 2;
  * the outputs of every succeeded job equal the NumPy reference.
Two more clients keep submitting tiny jobs with idempotency keys while this happens, so the
kill also lands among Submits: each one acknowledged is in the journal after the restart (a
retry with its key gets the same id back, deduplicated), one in flight is there at most once.

Which jobs were running at the kill is known exactly: the daemon has three workers, and the
kill comes while a triple of long jobs (RERUN, FAIL, and UNSPECIFIED with the daemon's default
set to fail) all run, just started (over 1 s of work left each). So the interrupted jobs must be
exactly that triple.
"""

import threading
import time
import uuid

import grpc
import numpy as np

import harness as h
from harness import FAILED, RUNNING, SUCCEEDED, GraphBuilder, state_name

N_JOBS = 200
WORKERS = 3
TRIPLES = (120, 170)  # positions of the long-job triples in submission order; the 27 jobs
# after the last one are submitted in well under the 2 s it may have run by then
POLICIES = (h.RERUN, h.FAIL, h.POLICY_DEFAULT)


def small_graph():
    """~5-10 ms of work: x [16, 256] stacked 16 times into A [256, 256]; then
    h <- tanh(0.05 * h·A) eight times; y = row sums [256]."""
    g = GraphBuilder("crash_small")
    g.input("x", "f32", [16, 256])
    g.init("k", np.array(0.05, np.float32))
    a = g.node("concat", ["x"] * 16, "A", name="stack", axis=0)
    hv = a
    for i in range(8):
        m = g.node("matmul", [hv, a], f"m{i}", name=f"mm{i}")
        s = g.node("mul", [m, "k"], f"s{i}", name=f"scale{i}")
        hv = g.node("tanh", [s], f"t{i}", name=f"tanh{i}")
    g.node("reduce_sum", [hv], "y", name="rowsum", axes=[1])
    g.output("y")
    return g


SMALL = small_graph()


def small_feeds(i):
    return {"x": np.random.default_rng(5000 + i).uniform(-1, 1, (16, 256)).astype(np.float32)}


def test_kill9_restart_recovers_every_job(make_daemon):
    d = make_daemon("crash", workers=WORKERS, flags=["--jobs.restart_policy=fail"]).start()
    c = d.client()
    run = str(uuid.uuid4())
    rng = np.random.default_rng(9)
    long_g = h.long_graph(2 * h.LONG_N)  # ~2.5 s on one core

    plan = []  # (kind, policy, feeds seed) in submission order
    i = 0
    while len(plan) < N_JOBS:
        if len(plan) in TRIPLES:
            plan += [("long", p, 7000 + len(plan) + k) for k, p in enumerate(POLICIES)]
        else:
            plan.append(("small", POLICIES[int(rng.integers(3))], i))
            i += 1
    assert len(plan) == N_JOBS

    # two more clients keep submitting tiny jobs with idempotency keys, so the
    # kill also lands among Submits: every one acknowledged must survive it
    stop = threading.Event()
    acked, in_flight = {}, {}  # idempotency key -> job id / feeds seed

    def submitter(k):
        with h.Client(d.address) as sc:
            for n in range(300):
                if stop.is_set():
                    return
                key = f"{run}-s{k}-{n}"
                in_flight[key] = k * 1000 + n
                try:
                    r = sc.submit(h.TINY, h.tiny_feeds(k * 1000 + n),
                                  labels={"extra": run}, idempotency_key=key)
                except grpc.RpcError:
                    return  # the kill: this one may or may not be journaled
                acked[key] = r.job_id
                del in_flight[key]
                time.sleep(0.02)

    subs = [threading.Thread(target=submitter, args=(k,), daemon=True) for k in range(2)]
    for t in subs:
        t.start()

    ids = []
    for n, (kind, pol, seed) in enumerate(plan):
        g, feeds = (SMALL, small_feeds(seed)) if kind == "small" else (long_g,
                                                                       h.long_feeds(seed))
        ids.append(c.submit_id(g, feeds, labels={"run": run, "n": str(n)},
                               restart_policy=pol))
    assert len(set(ids)) == N_JOBS, "Submit gave the same id twice"
    triples = [ids[p:p + 3] for p in TRIPLES]

    # kill -9 while a whole triple runs, each started less than 2 s ago (it has more left)
    victims, polls = None, 0
    end = time.monotonic() + 60 * h.SLOW
    while victims is None:
        assert time.monotonic() < end, "no triple of long jobs was ever seen running together"
        r = c.list(labels={"run": run}, states=[RUNNING], page_size=10)
        running = {j.id: j for j in r.jobs}
        t = h.now_ms()
        for tr in triples:
            if all(x in running and t - running[x].started_unix_ms < 2000 for x in tr):
                d.kill9()
                killed_ms = h.now_ms()
                victims = tr
                break
        else:
            polls += 1
            if polls % 50 == 0:
                assert c.get(triples[-1][-1]).state not in h.TERMINAL, (
                    "both triples finished before they were seen running together")
            time.sleep(0.003)

    stop.set()
    for t in subs:
        t.join(30)
    assert acked, "no Submit was acknowledged while the jobs ran"

    t0 = time.monotonic()
    d.restart()
    c = d.client()
    end = t0 + 60
    while True:
        jobs, _ = c.list_all(labels={"run": run}, page_size=100)
        if all(j.state in h.TERMINAL for j in jobs) and len(jobs) >= N_JOBS:
            break
        assert time.monotonic() < end, (
            f"not all jobs terminal 60 s after the restart: "
            f"{sorted(state_name(j.state) for j in jobs if j.state not in h.TERMINAL)[:10]}"
            f"{d.log_excerpt()}")
        time.sleep(0.1)
    recovery_s = time.monotonic() - t0

    by_id = {j.id: j for j in jobs}
    assert len(jobs) == len(by_id), "List returned a job twice"
    lost = [n for n, x in enumerate(ids) if x not in by_id]
    assert not lost, f"{len(lost)} acknowledged jobs lost, e.g. positions {lost[:10]}"
    unknown = set(by_id) - set(ids)
    assert not unknown, f"jobs nobody submitted: {sorted(unknown)[:5]}"

    # a client retrying after the crash with the same keys: the acknowledged jobs come back
    # deduplicated with their ids, the in-flight ones at most once
    for key, jid in acked.items():
        r = c.submit(h.TINY, h.tiny_feeds(0), labels={"extra": run}, idempotency_key=key)
        assert r.job_id == jid and r.deduplicated, (
            f"acknowledged job {jid} (key {key}) after the kill: Submit gave {r.job_id}, "
            f"deduplicated={r.deduplicated}")
    for key, seed in in_flight.items():
        r = c.submit(h.TINY, h.tiny_feeds(seed), labels={"extra": run}, idempotency_key=key)
        acked[key] = r.job_id
    extra, _ = c.list_all(labels={"extra": run}, page_size=1000)
    by_key = {}
    for j in extra:
        by_key.setdefault(j.idempotency_key, []).append(j.id)
    twice = {k: v for k, v in by_key.items() if len(v) > 1}
    assert not twice, f"one idempotency key, several jobs: {list(twice.items())[:3]}"
    assert {k: v[0] for k, v in by_key.items()} == acked, (
        f"jobs acknowledged while the daemon was killed: {len(acked)}, in the journal "
        f"{len(by_key)}; missing {sorted(set(acked) - set(by_key))[:5]}")
    end = time.monotonic() + 60
    while any(j.state not in h.TERMINAL for j in extra):
        assert time.monotonic() < end, "extra jobs not terminal within 60 s"
        time.sleep(0.1)
        extra, _ = c.list_all(labels={"extra": run}, page_size=1000)
    bad = [(j.id, state_name(j.state), j.attempts, j.reason) for j in extra
           if not (j.state == SUCCEEDED and j.attempts == 1)]
    assert not bad, f"jobs submitted around the kill: {bad[:5]}"

    problems = []
    for n, (x, (kind, pol, _)) in enumerate(zip(ids, plan)):
        j = by_id[x]
        effective = h.FAIL if pol == h.POLICY_DEFAULT else pol
        where = f"job #{n} {x} ({kind}, {h.jobs_pb2.RestartPolicy.Name(pol)})"
        if j.restart_policy not in (pol, effective):
            problems.append(f"{where}: restart_policy {j.restart_policy}")
        if x in victims:
            if effective == h.RERUN:
                if not (j.state == SUCCEEDED and j.attempts == 2):
                    problems.append(f"{where}: running at the kill, RERUN: expected succeeded "
                                    f"with attempts 2, got {state_name(j.state)} "
                                    f"attempts {j.attempts} {j.reason!r}")
            else:
                if not (j.state == FAILED and j.attempts == 1
                        and "interrupted" in j.reason.lower()):
                    problems.append(f"{where}: running at the kill, FAIL: expected failed "
                                    f"'interrupted...' with attempts 1, got "
                                    f"{state_name(j.state)} attempts {j.attempts} "
                                    f"{j.reason!r}")
        elif not (j.state == SUCCEEDED and j.attempts == 1 and j.reason == ""):
            problems.append(f"{where}: expected succeeded once, got {state_name(j.state)} "
                            f"attempts {j.attempts} {j.reason!r}")
    assert not problems, (f"{len(problems)} jobs broke the crash contract:\n  "
                          + "\n  ".join(problems[:20]) + d.log_excerpt())

    # outputs of every succeeded job equal the reference
    for n, (x, (kind, _, seed)) in enumerate(zip(ids, plan)):
        if by_id[x].state != SUCCEEDED:
            continue
        outs, tensors = c.outputs(x)
        h.check_output_infos(by_id[x], tensors)
        if kind == "small":
            h.check_outputs(SMALL, small_feeds(seed), outs, rtol=1e-4, atol=1e-5,
                            what=f"job #{n}")
        else:
            h.check_long_outputs(h.long_feeds(seed), outs, what=f"job #{n}")

    before = sum(1 for j in jobs if j.finished_unix_ms and j.finished_unix_ms < killed_ms)
    print(f"\nkill -9 with {before} of {N_JOBS} jobs finished and the triple at "
          f"#{ids.index(victims[0])} running, {len(extra)} more submitted meanwhile; all "
          f"terminal {recovery_s:.1f}s after the restart")
    assert 0 < before < N_JOBS - 3, "the kill did not come while jobs were running"
    assert recovery_s < 60
    d.stop()
    assert h.sanitizer_report(d.all_logs()) is None, h.sanitizer_report(d.all_logs())
