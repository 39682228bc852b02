"""
16 concurrent clients (threads, each with its own channel) x 100 jobs each against one rtxd:
every job succeeds, every output equals the NumPy reference for that job's own random input,
ids are unique, and the whole run stays within a time bound.
"""

import threading
import time
import uuid

import numpy as np

import harness as h
from harness import SUCCEEDED, GraphBuilder, rg, state_name

CLIENTS = 16
JOBS_PER_CLIENT = 100
TIME_BOUND_S = 120.0


def graph():
    """Tiny, but with several kernels and dtypes: y = softmax(x·w) [n, 4] (f32),
    m = argmax(x, 1) [n] (i64), s = sum of x*x [n] (f32)."""
    rng = np.random.default_rng(17)
    g = GraphBuilder("conc")
    g.input("x", "f32", [-1, 6])
    g.init("w", rng.uniform(-1, 1, (6, 4)).astype(np.float32))
    t = g.node("matmul", ["x", "w"], "t", name="mm")
    g.node("softmax", [t], "y", name="sm")
    g.node("argmax", ["x"], "m", name="am", axis=1)
    sq = g.node("mul", ["x", "x"], "sq", name="sq")
    g.node("reduce_sum", [sq], "s", name="rs", axes=[1])
    g.output("y")
    g.output("m")
    g.output("s")
    return g


G = graph()


def test_16_clients_x_100_jobs(make_daemon):
    d = make_daemon("conc", workers=2).start()
    run = str(uuid.uuid4())
    interp = rg.Interpreter(G.g)
    errors, ids, lock = [], [], threading.Lock()
    start = threading.Barrier(CLIENTS)

    def client_thread(k):
        try:
            with h.Client(d.address, d) as c:
                rng = np.random.default_rng(1000 + k)
                feeds = [{"x": rng.uniform(-3, 3, (int(rng.integers(1, 5)), 6))
                          .astype(np.float32)} for _ in range(JOBS_PER_CLIENT)]
                start.wait(30)
                mine = [c.submit_id(G, f, labels={"run": run, "client": str(k)})
                        for f in feeds]
                with lock:
                    ids.extend(mine)
                for i, (jid, f) in enumerate(zip(mine, feeds)):
                    job = c.wait(jid, timeout=TIME_BOUND_S)
                    assert job.state == SUCCEEDED, (
                        f"client {k} job {i} {jid}: {state_name(job.state)} {job.reason!r}")
                    outs, tensors = c.outputs(jid)
                    h.check_outputs(G, f, outs, what=f"client {k} job {i}",
                                    ref=interp.run(f))
        except Exception as e:  # noqa: BLE001 - reported below with the client's number
            with lock:
                errors.append(f"client {k}: {type(e).__name__}: {e}")

    t0 = time.monotonic()
    threads = [threading.Thread(target=client_thread, args=(k,), daemon=True)
               for k in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(1.0, TIME_BOUND_S * h.SLOW - (time.monotonic() - t0)))
    took = time.monotonic() - t0
    hung = [k for k, t in enumerate(threads) if t.is_alive()]
    assert not hung, f"clients {hung} still running after {took:.0f}s{d.log_excerpt()}"
    assert not errors, f"{len(errors)} clients failed:\n" + "\n".join(errors[:5]) + \
        d.log_excerpt()
    assert len(ids) == CLIENTS * JOBS_PER_CLIENT and len(set(ids)) == len(ids), \
        "job ids are not unique"
    assert took < TIME_BOUND_S * h.SLOW, f"{len(ids)} jobs took {took:.1f}s"
    print(f"\n{len(ids)} jobs from {CLIENTS} clients in {took:.1f}s "
          f"({len(ids) / took:.0f} jobs/s)")
    # List over jobs created many to a millisecond: all pages, none twice, newest first
    for ps in (1000, 37):
        listed, pages = d.client().list_all(labels={"run": run}, states=[SUCCEEDED],
                                            page_size=ps)
        got = [j.id for j in listed]
        assert len(got) == len(set(got)), f"page_size {ps}: a job listed twice"
        assert set(got) == set(ids), f"page_size {ps}: {len(set(ids) - set(got))} missing"
        created = [j.created_unix_ms for j in listed]
        assert created == sorted(created, reverse=True), f"page_size {ps}: not newest first"
        assert pages == -(-len(ids) // ps), (ps, pages)
    d.stop()
