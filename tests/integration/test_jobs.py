"""
rtx.v1.Jobs against a real rtxd: Submit / Wait / GetOutputs equal to the NumPy reference for
both example graphs and a few small graphs, the Wait stream's order, Get, Cancel of a queued
and of a running job, List with state, label and time filters and pagination, idempotency
keys, deadline expiry, and drain (Admin.Drain and `rtxctl drain`): Submit answered
UNAVAILABLE, the running job finishes, exit 0, queued jobs still queued after the restart and
then run.

The module's daemon has ONE worker, so a long job (harness.long_graph, ~1 s of GEMMs) holds it
while the test looks at jobs queued behind it; every test leaves the worker idle.
"""

import contextlib
import threading
import time
import uuid

import grpc
import numpy as np
import pytest

import harness as h
from harness import (CANCELLED, EXPIRED, QUEUED, RUNNING, SUCCEEDED, GraphBuilder, rg,
                     state_name, states)

DAEMON_KW = {"workers": 1}


@contextlib.contextmanager
def busy_worker(c, seed=1, labels=None):
    """Holds the single worker with a long job (running when the block starts); cancels it
    at the end and waits until it is terminal, so the next test finds the worker idle."""
    jid = c.submit_id(h.long_graph(), h.long_feeds(seed), labels=labels)
    c.wait_for_state(jid, RUNNING)
    try:
        yield jid
    finally:
        c.cancel(jid)
        c.wait(jid)


# ------------------------------------------------------------------------------------------
# Results equal to the reference
# ------------------------------------------------------------------------------------------

EXAMPLES = {"mlp": ([None, 64], 1e-5), "transformer_block": ([None, 128, 256], 1e-4)}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_graph(client, name):
    path = rg.build_dir() / "examples" / f"{name}.rtxg"
    assert path.is_file(), f"{path} missing (make examples)"
    g = rg.load_graph(path)
    shape, rel = EXAMPLES[name]
    x = np.random.default_rng(42).standard_normal([2] + shape[1:]).astype(np.float32)
    t0 = h.now_ms()
    jid = client.submit_id(g, {"x": x})
    job = client.wait(jid, timeout=60)
    assert job.state == SUCCEEDED, f"{name}: {state_name(job.state)} {job.reason!r}"
    outs, tensors = client.outputs(jid)
    ref = rg.evaluate(g, {"x": x})
    assert list(outs) == [o.name for o in g.outputs]
    for o, want in ref.items():
        scale = float(np.max(np.abs(rg.f64(want))))
        assert outs[o].dt == want.dt and outs[o].a.shape == want.a.shape
        rg.assert_close(outs[o].a, want.a, rel, rel * scale, f"{name} {o}")
    job = client.get(jid)
    assert job.id == jid and job.graph_name == name
    assert job.attempts == 1 and job.outputs_available
    assert t0 - 1000 <= job.created_unix_ms <= job.started_unix_ms <= job.finished_unix_ms \
        <= h.now_ms() + 1000, job
    assert job.run_ms > 0, job
    h.check_output_infos(job, tensors)


def small_graphs():
    """name -> (GraphBuilder, feeds): broadcasting elementwise chains, a matmul + softmax
    head, integer arithmetic with a bool output, several dtypes and outputs, a graph without
    inputs."""
    rng = np.random.default_rng(3)
    out = {}

    g = GraphBuilder("ew_chain")
    g.input("a", "f32", [-1, 5])
    g.input("b", "f32", [1, 5])
    t = g.node("add", ["a", "b"], "t1", name="add")
    t = g.node("tanh", [t], "t2", name="tanh")
    t = g.node("mul", [t, "a"], "t3", name="mul")
    g.node("sigmoid", [t], "y", name="sig")
    g.output("y")
    out["ew_chain"] = (g, {"a": rng.standard_normal((4, 5)).astype(np.float32),
                           "b": rng.standard_normal((1, 5)).astype(np.float32)})

    g = GraphBuilder("mm_head")
    g.input("x", "f32", [3, 16])
    g.init("w", rng.uniform(-0.5, 0.5, (16, 6)).astype(np.float32))
    t = g.node("matmul", ["x", "w"], "logits", name="proj")
    g.node("log_softmax", [t], "lp", name="lsm", axis=-1)
    g.node("argmax", [t], "cls", name="am", axis=-1)
    g.output("lp")
    g.output("cls")
    out["mm_head"] = (g, {"x": rng.standard_normal((3, 16)).astype(np.float32)})

    g = GraphBuilder("int_ops")
    g.input("i", "i32", [2, 6])
    g.input("j", "i32", [2, 6])
    s = g.node("add", ["i", "j"], "s", name="iadd")
    g.node("reduce_sum", [s], "tot", name="isum", axes=[1], keepdims=1)
    g.node("greater", ["i", "j"], "gt", name="cmp")
    g.node("cast", [s], "sf", name="tof16", to="f16")
    g.output("tot")
    g.output("gt")
    g.output("sf")
    out["int_ops"] = (g, {"i": rng.integers(-50, 50, (2, 6)).astype(np.int32),
                          "j": rng.integers(-50, 50, (2, 6)).astype(np.int32)})

    g = GraphBuilder("no_inputs")
    c = g.node("constant", [], "c", name="const",
               value=np.arange(12, dtype=np.float32).reshape(3, 4))
    t = g.node("transpose", [c], "ct", name="tr")
    g.node("reshape", [t], "y", name="rs", shape=[2, -1])
    g.output("y")
    out["no_inputs"] = (g, {})
    return out


SMALL = small_graphs()


@pytest.mark.parametrize("name", sorted(SMALL))
def test_small_graph(client, name):
    g, feeds = SMALL[name]
    job, outs = client.run(g, feeds)
    h.check_outputs(g, feeds, outs, what=name)
    assert job.graph_name == name


# ------------------------------------------------------------------------------------------
# Wait, Get
# ------------------------------------------------------------------------------------------

def test_wait_stream_order(client):
    """A job queued behind a running one: the stream shows queued, running, succeeded in
    that order, each once, and ends after the terminal state."""
    feeds = h.tiny_feeds(11)
    with busy_worker(client) as long_id:
        jid = client.submit_id(h.TINY, feeds)
        call = client.jobs.Wait(h.jobs_pb2.WaitJobRequest(job_id=jid), timeout=60 * h.SLOW)
        first = next(call)
        assert first.id == jid and first.state == QUEUED, (
            f"first Wait message: {state_name(first.state)}, expected QUEUED (the only worker "
            f"is busy)")
        client.cancel(long_id)  # frees the worker
        rest = list(call)
    seq = [first] + rest
    assert all(j.id == jid for j in seq)
    assert states(seq) == ["JOB_STATE_QUEUED", "JOB_STATE_RUNNING", "JOB_STATE_SUCCEEDED"], (
        f"Wait stream states {states(seq)}")
    assert seq[-1].attempts == 1 and seq[-1].finished_unix_ms > 0
    outs, _ = client.outputs(jid)
    h.check_outputs(h.TINY, feeds, outs)
    # Wait on a finished job: one message, the terminal state, then the end
    again = client.wait_stream(jid)
    assert states(again) == ["JOB_STATE_SUCCEEDED"], states(again)


def test_get(client):
    key = f"get-{uuid.uuid4()}"
    deadline = h.now_ms() + 3_600_000
    labels = {"team": "infra", "run": str(uuid.uuid4())}
    t0 = h.now_ms()
    resp = client.submit(h.TINY, h.tiny_feeds(2), labels=labels, lane="interactive",
                         deadline_unix_ms=deadline, idempotency_key=key,
                         restart_policy=h.FAIL)
    t1 = h.now_ms()
    assert resp.job_id and not resp.deduplicated
    jid = resp.job_id
    j = client.get(jid)
    assert j.id == jid
    assert {(lb.key, lb.value) for lb in j.labels} == set(labels.items()), j.labels
    assert j.lane == "interactive" and j.graph_name == "tiny"
    assert j.idempotency_key == key and j.deadline_unix_ms == deadline
    assert j.restart_policy == h.FAIL
    assert t0 - 1000 <= j.created_unix_ms <= t1 + 1000, (t0, j.created_unix_ms, t1)
    assert j.state in (QUEUED, RUNNING, SUCCEEDED)
    client.wait(jid)
    j = client.get(jid)
    assert j.state == SUCCEEDED and j.attempts == 1 and j.reason == ""
    assert j.created_unix_ms <= j.started_unix_ms <= j.finished_unix_ms
    assert j.run_ms > 0 and j.outputs_available
    _, tensors = client.outputs(jid)
    h.check_output_infos(j, tensors)
    # the default lane is the setting jobs.default_lane ("batch")
    j2 = client.get(client.submit_id(h.TINY, h.tiny_feeds(3)))
    assert j2.lane == client.config()["jobs.default_lane"].value
    client.wait(j2.id)


# ------------------------------------------------------------------------------------------
# Cancel
# ------------------------------------------------------------------------------------------

def test_cancel_queued(client):
    with busy_worker(client) as long_id:
        jid = client.submit_id(h.TINY, h.tiny_feeds(4))
        assert client.get(jid).state == QUEUED
        h.expect_rpc_error(lambda: client.outputs(jid), grpc.StatusCode.FAILED_PRECONDITION,
                           what="GetOutputs of a queued job")
        j = client.cancel(jid)
        assert j.id == jid and j.state == CANCELLED, state_name(j.state)
        final = client.wait(jid, timeout=10)
        assert final.state == CANCELLED and final.attempts == 0 and final.started_unix_ms == 0
        assert client.get(long_id).state == RUNNING, "cancelling a queued job touched another"
        h.expect_rpc_error(lambda: client.outputs(jid), grpc.StatusCode.FAILED_PRECONDITION,
                           what="GetOutputs of a cancelled job")
        # cancelling a terminal job leaves it as it is
        assert client.cancel(jid).state == CANCELLED
    # the worker then runs the next job
    h.check_tiny_job(client, seed=5)


def test_cancel_running(client):
    jid = client.submit_id(h.long_graph(), h.long_feeds(6))
    client.wait_for_state(jid, RUNNING)
    h.expect_rpc_error(lambda: client.outputs(jid), grpc.StatusCode.FAILED_PRECONDITION,
                       what="GetOutputs of a running job")
    t = time.monotonic()
    j = client.cancel(jid)
    assert j.state in (RUNNING, CANCELLED), state_name(j.state)
    final = client.wait(jid, timeout=30)
    took = time.monotonic() - t
    assert final.state == CANCELLED, f"{state_name(final.state)} {final.reason!r}"
    assert final.attempts == 1 and final.started_unix_ms > 0 and final.finished_unix_ms > 0
    # stopped at an op boundary (one GEMM is ~20 ms), not after the whole job (~1 s)
    assert took < 0.5 * h.SLOW, f"cancel of a running job took {took:.2f}s to take effect"
    h.expect_rpc_error(lambda: client.outputs(jid), grpc.StatusCode.FAILED_PRECONDITION,
                       what="GetOutputs of a cancelled job")
    h.check_tiny_job(client, seed=7)


# ------------------------------------------------------------------------------------------
# List
# ------------------------------------------------------------------------------------------

def assert_newest_first(jobs, order):
    """Newest first: created_unix_ms never increases down the list, and jobs created in
    different milliseconds come in reverse submission order (jobs acknowledged within one
    millisecond have equal times: their order is not defined)."""
    for a, b in zip(jobs, jobs[1:]):
        assert a.created_unix_ms >= b.created_unix_ms, (
            f"not newest first: {a.id} ({a.created_unix_ms}) before {b.id} "
            f"({b.created_unix_ms})")
        if a.created_unix_ms > b.created_unix_ms:
            assert order[a.id] > order[b.id], (f"{a.id} (submitted #{order[a.id]}) listed "
                                               f"before {b.id} (#{order[b.id]})")


def test_list_filters_and_pagination(client):
    run = str(uuid.uuid4())
    ids, kinds, cancelled = [], {}, set()
    with busy_worker(client, labels={"run": run, "kind": "long"}) as long_id:
        ids.append(long_id)
        kinds[long_id] = "long"
        cancelled.add(long_id)
        for i in range(12):
            kind = "a" if i % 2 == 0 else "b"
            jid = client.submit_id(h.TINY, h.tiny_feeds(100 + i),
                                   labels={"run": run, "kind": kind, "i": str(i)})
            ids.append(jid)
            kinds[jid] = kind
            if i % 4 == 3:
                assert client.cancel(jid).state == CANCELLED
                cancelled.add(jid)
        time.sleep(0.05)
        t_mid = h.now_ms()
        time.sleep(0.05)
        group2 = []
        for i in range(12, 20):
            jid = client.submit_id(h.TINY, h.tiny_feeds(100 + i),
                                   labels={"run": run, "kind": "a", "i": str(i)})
            ids.append(jid)
            group2.append(jid)
            kinds[jid] = "a"
        # the long job is cancelled on leaving the block; the rest then run
    for jid in ids:
        client.wait(jid)
    mine = {"run": run}
    order = {jid: n for n, jid in enumerate(ids)}  # submission order (one client, in turn)

    # all pages: every job once, newest first
    for ps in (1, 7, 0, 1000):
        got, pages = client.list_all(page_size=ps, labels=mine)
        gids = [j.id for j in got]
        assert len(gids) == len(set(gids)), f"page_size {ps}: duplicates in {gids}"
        assert set(gids) == set(ids), f"page_size {ps}: {len(gids)} jobs, expected {len(ids)}"
        assert_newest_first(got, order)
        if ps == 1:
            assert pages == len(ids), f"page_size 1 gave {pages} pages for {len(ids)} jobs"
        if ps in (0, 1000):
            assert pages == 1

    # a job submitted between pages neither repeats nor shifts what follows
    first = client.list(page_size=5, labels=mine)
    late = client.submit_id(h.TINY, h.tiny_feeds(99), labels={"run": run, "kind": "late"})
    rest, _ = client.list_all(page_size=5, page_token=first.next_page_token, labels=mine)
    walked = [j.id for j in first.jobs] + [j.id for j in rest]
    assert late not in walked and len(walked) == len(set(walked)) and set(walked) == set(ids)
    client.wait(late)
    ids.append(late)
    kinds[late] = "late"

    # state filter
    got, _ = client.list_all(labels=mine, states=[CANCELLED])
    assert {j.id for j in got} == cancelled and all(j.state == CANCELLED for j in got)
    got, _ = client.list_all(labels=mine, states=[SUCCEEDED])
    assert {j.id for j in got} == set(ids) - cancelled
    got, _ = client.list_all(labels=mine, states=[SUCCEEDED, CANCELLED])
    assert {j.id for j in got} == set(ids)
    got, _ = client.list_all(labels=mine, states=[QUEUED, RUNNING, EXPIRED])
    assert got == []

    # label filter: every label must match
    got, _ = client.list_all(labels={"run": run, "kind": "a"})
    assert {j.id for j in got} == {i for i in ids if kinds[i] == "a"}
    got, _ = client.list_all(labels={"run": run, "kind": "a", "i": "4"})
    assert [j.id for j in got] == [ids[5]]
    got, _ = client.list_all(labels={"run": run, "kind": "nope"})
    assert got == []

    # time filters (t_mid lies 50 ms away from every creation time)
    got, _ = client.list_all(labels=mine, created_after_unix_ms=t_mid)
    assert {j.id for j in got} == set(group2) | {late}
    got, _ = client.list_all(labels=mine, created_before_unix_ms=t_mid)
    assert {j.id for j in got} == set(ids) - set(group2) - {late}
    got, _ = client.list_all(labels=mine, created_after_unix_ms=t_mid,
                             created_before_unix_ms=t_mid + 10_000_000, states=[SUCCEEDED],
                             page_size=3)
    assert {j.id for j in got} == {late} | set(group2)
    order[late] = len(order)
    assert_newest_first(got, order)


# ------------------------------------------------------------------------------------------
# Idempotency, deadlines
# ------------------------------------------------------------------------------------------

def test_idempotency_key(client):
    key = f"idem-{uuid.uuid4()}"
    feeds = h.tiny_feeds(20)
    r1 = client.submit(h.TINY, feeds, idempotency_key=key)
    assert r1.job_id and not r1.deduplicated
    # same key, other inputs: the first job, not a new one
    r2 = client.submit(h.TINY, h.tiny_feeds(21), idempotency_key=key)
    assert r2.job_id == r1.job_id and r2.deduplicated
    job = client.wait(r1.job_id)
    assert job.state == SUCCEEDED and job.idempotency_key == key
    outs, _ = client.outputs(r1.job_id)
    h.check_outputs(h.TINY, feeds, outs, what="first submission's outputs")
    # and after it finished
    r3 = client.submit(h.TINY, feeds, idempotency_key=key)
    assert r3.job_id == r1.job_id and r3.deduplicated
    assert client.get(r1.job_id).attempts == 1, "the repeat ran the job again"
    # another key, or none: new jobs
    r4 = client.submit(h.TINY, feeds, idempotency_key=key + "-2")
    r5 = client.submit(h.TINY, feeds)
    r6 = client.submit(h.TINY, feeds)
    assert len({r1.job_id, r4.job_id, r5.job_id, r6.job_id}) == 4
    assert not (r4.deduplicated or r5.deduplicated or r6.deduplicated)
    for r in (r4, r5, r6):
        client.wait(r.job_id)

    # 16 clients racing with one new key: one job, the other 15 answers deduplicated
    key = f"race-{uuid.uuid4()}"
    start, got = threading.Barrier(16), []

    def racer(k):
        with h.Client(client.address) as c:
            start.wait(30)
            got.append(c.submit(h.TINY, h.tiny_feeds(200 + k), idempotency_key=key))

    racers = [threading.Thread(target=racer, args=(k,)) for k in range(16)]
    for t in racers:
        t.start()
    for t in racers:
        t.join(60)
    assert len(got) == 16, "some racing Submits failed"
    assert len({r.job_id for r in got}) == 1, f"one key, jobs {sorted({r.job_id for r in got})}"
    assert sorted(r.deduplicated for r in got) == [False] + [True] * 15
    client.wait(got[0].job_id)
    assert sum(j.idempotency_key == key for j in client.list_all()[0]) == 1


def test_deadline_expiry(client):
    with busy_worker(client) as long_id:
        deadline = h.now_ms() + 300
        late = client.submit_id(h.TINY, h.tiny_feeds(30), deadline_unix_ms=deadline)
        in_time = client.submit_id(h.TINY, h.tiny_feeds(31),
                                   deadline_unix_ms=h.now_ms() + 600_000)
        assert client.get(late).state == QUEUED
        time.sleep(0.5)
        client.cancel(long_id)
        j = client.wait(late, timeout=30)
        ok = client.wait(in_time, timeout=30)
    assert j.state == EXPIRED, f"{state_name(j.state)} {j.reason!r}"
    assert j.attempts == 0 and j.started_unix_ms == 0, j
    assert j.finished_unix_ms >= deadline, (j.finished_unix_ms, deadline)
    assert any(w in j.reason.lower() for w in ("deadline", "expir")), j.reason
    assert j.deadline_unix_ms == deadline
    h.expect_rpc_error(lambda: client.outputs(late), grpc.StatusCode.FAILED_PRECONDITION,
                       what="GetOutputs of an expired job")
    assert ok.state == SUCCEEDED, f"{state_name(ok.state)} {ok.reason!r}"


# ------------------------------------------------------------------------------------------
# Drain
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("via", ["admin", "rtxctl"])
def test_drain(make_daemon, via):
    d = make_daemon("drain", workers=1).start()
    c = d.client()
    running = c.submit_id(h.long_graph(), h.long_feeds(40))
    c.wait_for_state(running, RUNNING)
    # a client already waiting on the running job sees it finish before the daemon exits
    streamed = []

    def follow():
        try:
            streamed.extend(h.Client(d.address).wait_stream(running))
        except Exception as e:  # noqa: BLE001 - checked below
            streamed.append(e)

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    q_long = c.submit_id(h.long_graph(), h.long_feeds(41))
    q_tiny = [c.submit_id(h.TINY, h.tiny_feeds(42 + i)) for i in range(2)]
    queued = [q_long] + q_tiny
    assert [c.get(j).state for j in queued] == [QUEUED] * 3

    ctl, ctl_result = None, []
    if via == "admin":
        r = c.admin.Drain(h.admin_pb2.DrainRequest(grace_ms=60_000), timeout=h.RPC_TIMEOUT)
        assert (r.running, r.queued) == (1, 3), f"DrainResponse {r}"
    else:
        # rtxctl may return at once or wait for the exit: run it beside the checks
        ctl = threading.Thread(
            target=lambda: ctl_result.append(h.rtxctl("drain", address=d.address)))
        ctl.start()
        # drain has begun when Health says NOT_SERVING
        end = time.monotonic() + 10 * h.SLOW
        while c.health().status != h.NOT_SERVING:
            assert time.monotonic() < end, "rtxctl drain: Health never left SERVING"
            time.sleep(0.01)

    assert c.health().status == h.NOT_SERVING
    assert c.status().draining
    h.expect_rpc_error(lambda: c.submit(h.TINY, h.tiny_feeds(50)),
                       grpc.StatusCode.UNAVAILABLE, "drain", daemon=d,
                       what="Submit while draining")
    assert c.get(running).state == RUNNING
    rc = d.wait_exit(60 * h.SLOW)
    d.check_sanitizer()
    assert rc == 0, f"rtxd exited {rc} after drain{d.log_excerpt()}"
    follower.join(30)
    assert streamed and not isinstance(streamed[-1], Exception), (
        f"Wait on the running job during the drain: {streamed[-1:]}")
    assert streamed[-1].state == SUCCEEDED, states(streamed)
    if ctl:
        ctl.join(60 * h.SLOW)
        assert ctl_result, "rtxctl drain did not finish"
        assert ctl_result[0].rc == 0, ctl_result[0].describe()

    restart_ms = h.now_ms()
    d.restart()
    c = d.client()
    # right after the restart: the queued jobs are still there, queued (the long one may
    # have started already), none ran before
    now = {j: c.get(j) for j in queued}
    assert now[q_long].state in (QUEUED, RUNNING), state_name(now[q_long].state)
    for j in q_tiny:
        assert now[j].state == QUEUED and now[j].attempts == 0, (
            f"queued job {j} after restart: {state_name(now[j].state)}, "
            f"attempts {now[j].attempts}")
    # the running job finished before the exit
    r = c.get(running)
    assert r.state == SUCCEEDED and r.attempts == 1, f"{state_name(r.state)} {r.reason!r}"
    assert r.finished_unix_ms <= restart_ms
    outs, _ = c.outputs(running)
    h.check_long_outputs(h.long_feeds(40), outs)
    # then the queued ones run, once
    for j in queued:
        f = c.wait(j, timeout=60)
        assert f.state == SUCCEEDED and f.attempts == 1, (j, state_name(f.state), f.reason)
        assert f.started_unix_ms >= restart_ms
    for i, j in enumerate(q_tiny):
        outs, _ = c.outputs(j)
        h.check_outputs(h.TINY, h.tiny_feeds(42 + i), outs)
    d.stop()
