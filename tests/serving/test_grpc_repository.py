"""
The model repository through the KServe v2 gRPC service in control mode explicit (index, load
with and without a config override, reload, unload, failures that keep the serving version),
and `rtxctl models list|show|load|unload`, which use the same service through librtx.
"""

import json
import shutil
import signal
import threading
import time

import numpy as np
import pytest

import grpc_util as gu
import serving_harness as sh
from serving_harness import harness


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = gu.GrpcDaemon(tmp_path_factory.mktemp("test_grpc_repository"), control="explicit",
                      startup=["simple"])
    d.start()
    yield d
    err = d.cleanup()
    assert not err, f"daemon teardown: {err}"


@pytest.fixture(scope="module")
def c(server):
    cl = gu.client(server)
    yield cl
    cl.close()


def index(c):
    return {m.name: (m.version, m.state, m.reason) for m in c.get_model_repository_index().models}


def ctl(server, *args, rc=0):
    return harness.rtxctl(*args, address=server.address, check_rc=rc)


def test_index_load_infer_unload(server, c):
    idx = index(c)
    assert idx["simple"][:2] == ("1", "READY")
    assert idx["mlp"][1] in ("UNKNOWN", "UNAVAILABLE") and idx["mlp"][0] == ""
    assert set(idx) == {"mlp", "mlp_nobatch", "simple", "tiny-chat", "transformer_block"}
    assert [m.name for m in c.get_model_repository_index(as_json=False).models if
            m.state == "READY"] == ["simple"]
    # never loaded: unknown to the server, as in Triton
    gu.expect_error(lambda: c.get_model_metadata("mlp"), "NOT_FOUND", "mlp", daemon=server)

    c.load_model("mlp")
    assert c.is_model_ready("mlp")
    assert index(c)["mlp"][:2] == ("1", "READY")
    x = np.random.default_rng(0).uniform(-1, 1, (3, 64)).astype(np.float32)
    probs = c.infer("mlp", gu.inputs(("x", x))).as_numpy("probs")
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)

    c.unload_model("mlp")
    assert not c.is_model_ready("mlp")
    assert index(c)["mlp"][1] == "UNAVAILABLE"
    gu.expect_error(lambda: c.infer("mlp", gu.inputs(("x", x))), "UNAVAILABLE", "mlp",
                    daemon=server)
    # a reload after the unload serves again
    c.load_model("mlp")
    np.testing.assert_allclose(c.infer("mlp", gu.inputs(("x", x))).as_numpy("probs"), probs,
                               rtol=1e-6)
    c.unload_model("mlp")


def test_load_errors_keep_serving(server, c):
    gu.expect_error(lambda: c.load_model("no_such_model"), "NOT_FOUND", "no_such_model",
                    daemon=server)
    gu.expect_error(lambda: c.unload_model("no_such_model"), "NOT_FOUND", "no_such_model",
                    daemon=server)
    # a reload with a broken config keeps the version that was serving
    gu.expect_error(lambda: c.load_model("simple", config='{"max_batch_size": "eight"}'),
                    "INVALID_ARGUMENT", "max_batch_size", daemon=server)
    assert c.is_model_ready("simple")
    gu.assert_serving(server, c)
    # a model whose files are broken: UNAVAILABLE in the index with the reason
    broken = server.repository / "broken"
    (broken / "1").mkdir(parents=True)
    (broken / "config.json").write_text('{"name": "broken", "platform": "rtx_graph", '
                                        '"max_batch_size": 0, "input": [], "output": []}')
    (broken / "1" / "model.rtxg").write_bytes(b"\x08\x96\x01 not a graph")
    gu.expect_error(lambda: c.load_model("broken"), "INVALID_ARGUMENT", "broken",
                    daemon=server)
    st = index(c)["broken"]
    assert st[1] == "UNAVAILABLE" and st[2], st
    gu.assert_serving(server, c)


def test_load_with_config_override(server, c):
    cfg = json.loads((server.repository / "mlp" / "config.json").read_text())
    cfg["max_batch_size"] = 4
    cfg.pop("dynamic_batching", None)
    c.load_model("mlp", config=json.dumps(cfg))
    got = c.get_model_config("mlp").config
    assert got.max_batch_size == 4 and not got.HasField("dynamic_batching")
    x = np.zeros((5, 64), np.float32)
    gu.expect_error(lambda: c.infer("mlp", gu.inputs(("x", x))), "INVALID_ARGUMENT", "batch",
                    daemon=server)
    c.load_model("mlp")  # back to the repository's config
    assert c.get_model_config("mlp").config.max_batch_size == 64
    c.unload_model("mlp")


def test_load_refused_for_a_reservation_that_does_not_fit(server, c):
    # a copy of mlp, so that no other test's load of mlp is in the way
    src, dst = server.repository / "mlp", server.repository / "mlp_reserve"
    shutil.copytree(src, dst)
    cfg = json.loads((src / "config.json").read_text())
    cfg["name"] = "mlp_reserve"
    (dst / "config.json").write_text(json.dumps(cfg))
    # the device layer refuses a reservation beyond the budget: RESOURCE_EXHAUSTED naming the
    # version's consumer, and the model is UNAVAILABLE with that reason
    cfg["memory_reserve_bytes"] = 1 << 50
    gu.expect_error(lambda: c.load_model("mlp_reserve", config=json.dumps(cfg)),
                    "RESOURCE_EXHAUSTED", "model mlp_reserve:1", "reserve", daemon=server)
    st = index(c)["mlp_reserve"]
    assert st[1] == "UNAVAILABLE" and "model mlp_reserve:1" in st[2], st
    assert not c.is_model_ready("mlp_reserve")
    cfg["memory_reserve_bytes"] = -1
    gu.expect_error(lambda: c.load_model("mlp_reserve", config=json.dumps(cfg)),
                    "INVALID_ARGUMENT", "memory_reserve_bytes", daemon=server)
    # one that fits loads, serves and shows in the config
    cfg["memory_reserve_bytes"] = 1 << 20
    c.load_model("mlp_reserve", config=json.dumps(cfg))
    assert c.is_model_ready("mlp_reserve")
    out = c.infer("mlp_reserve", gu.inputs(("x", np.zeros((2, 64), np.float32))))
    assert out.as_numpy("probs").shape == (2, 10)
    c.unload_model("mlp_reserve")
    gu.assert_serving(server, c)


def test_unload_with_requests_in_flight(server, c):
    c.load_model("mlp_nobatch")
    x = np.random.default_rng(1).uniform(-1, 1, (8, 64)).astype(np.float32)
    results, lock, done = [], threading.Lock(), threading.Semaphore(0)

    def cb(result, error):
        with lock:
            results.append(error if error else result.as_numpy("probs"))
        done.release()

    cl = gu.client(server)
    n = 0
    for i in range(40):
        try:
            cl.async_infer("mlp_nobatch", gu.inputs(("x", x)), cb)
            n += 1
        except gu.InferenceServerException:
            break
        if i == 10:
            # unload once a request has been answered, so some run before it on a slow host
            end = time.monotonic() + gu.TIMEOUT
            while time.monotonic() < end:
                with lock:
                    if results:
                        break
                time.sleep(0.005)
            threading.Thread(target=lambda: c.unload_model("mlp_nobatch")).start()
    for _ in range(n):
        assert done.acquire(timeout=gu.TIMEOUT), "a request never completed"
    cl.close()
    ok = [r for r in results if not isinstance(r, Exception)]
    failed = [r for r in results if isinstance(r, Exception)]
    assert ok, "no request ran before the unload"
    for r in failed:
        assert str(r.status()) in ("StatusCode.UNAVAILABLE", "StatusCode.NOT_FOUND"), r
    for r in ok:
        np.testing.assert_allclose(r, ok[0], rtol=1e-6)
    gu.assert_serving(server, c)


# ------------------------------------------------------------------------------------------
# rtxctl models
# ------------------------------------------------------------------------------------------

def test_rtxctl_models(server, c):
    r = ctl(server, "models", "list", "--json")
    models = {m["name"]: m for m in r.json()}
    assert models["simple"]["state"] == "READY" and models["simple"]["version"] == 1
    assert models["mlp_nobatch"]["state"] != "READY"
    r = ctl(server, "models", "list")
    assert "MODEL" in r.out and "simple" in r.out and "READY" in r.out
    r = ctl(server, "models", "list", "--ready", "--json")
    assert [m["name"] for m in r.json()] == ["simple"]

    ctl(server, "models", "load", "mlp_nobatch")
    assert c.is_model_ready("mlp_nobatch")
    gu.infer_simple(c, np.ones((2, 16), np.int32), np.ones((2, 16), np.int32))
    info = ctl(server, "models", "show", "simple", "--json").json()
    assert info["name"] == "simple" and info["version"] == 1 and info["ready"]
    assert info["max_batch_size"] == 8 and info["platform"] == "rtx_graph"
    assert [(t["name"], t["datatype"], t["shape"]) for t in info["inputs"]] == [
        ("INPUT0", "INT32", [-1, 16]), ("INPUT1", "INT32", [-1, 16])]
    assert info["inference_count"] >= 2 and info["success_count"] >= 1
    text = ctl(server, "models", "show", "mlp_nobatch").out
    assert "mlp_nobatch" in text and "FP32" in text and "input" in text

    cfg = json.loads((server.repository / "mlp_nobatch" / "config.json").read_text())
    cfg["max_batch_size"] = 2
    path = server.dir / "override.json"
    path.write_text(json.dumps(cfg))
    r = ctl(server, "--json", "models", "load", "mlp_nobatch", "--config", str(path))
    assert r.json()["state"] == "READY"
    assert ctl(server, "models", "show", "mlp_nobatch", "--json").json()["max_batch_size"] == 2

    ctl(server, "models", "unload", "mlp_nobatch")
    assert not c.is_model_ready("mlp_nobatch")
    r = ctl(server, "models", "show", "mlp_nobatch", rc=6)  # UNAVAILABLE
    assert "mlp_nobatch" in r.err
    r = ctl(server, "models", "show", "nope", rc=1)
    assert "nope" in r.err
    r = ctl(server, "models", "load", "nope", rc=1)
    assert "nope" in r.err
    ctl(server, "models", "load", "x", "--config", str(server.dir / "missing.json"), rc=8)


def test_rtxctl_models_usage():
    r = harness.rtxctl("models", "--help", check_rc=0)
    for sub in ("list", "show", "load", "unload"):
        assert f"models {sub}" in r.out
    r = harness.rtxctl("models", "show", "--help", check_rc=0)
    assert "--version" in r.out
    harness.rtxctl("models", check_rc=2)
    harness.rtxctl("models", "show", check_rc=2)
    harness.rtxctl("models", "list", "--bogus", check_rc=2)
    harness.rtxctl("models", "show", "m", "--version", "x", check_rc=2)
    r = harness.rtxctl("models", "frob", check_rc=2)
    assert "models" in r.err
    r = harness.rtxctl("--help", check_rc=0)
    assert "models list" in r.out


def test_sigterm_with_requests_and_streams_in_flight(tmp_path):
    """SIGTERM while unary calls and streams wait for inference: every call ends, rtxd exits 0
    with no sanitizer report (checked by cleanup)."""
    d = gu.GrpcDaemon(tmp_path / "rtxd")
    d.start()
    try:
        cl = gu.client(d)
        md = cl.get_model_metadata("transformer_block")
        feeds = [(t.name, np.ones([4 if x == -1 else int(x) for x in t.shape], np.float32))
                 for t in md.inputs]
        ends, done = [], threading.Semaphore(0)

        def cb(result, error):
            ends.append(error)
            done.release()

        for _ in range(24):
            cl.async_infer("transformer_block", gu.inputs(*feeds), cb)
        streams = []
        for s in range(3):
            sc = gu.client(d)
            sc.start_stream(callback=lambda result, error: None)
            for i in range(10):
                sc.async_stream_infer("transformer_block", gu.inputs(*feeds), request_id=str(i))
            streams.append(sc)
        d.signal(signal.SIGTERM)
        for _ in range(24):
            assert done.acquire(timeout=gu.TIMEOUT), "a call never ended after SIGTERM"
        for e in ends:  # answered, or ended by the shutdown
            assert e is None or "UNAVAILABLE" in str(e.status()) or "CANCELLED" in str(
                e.status()), e
        rc = d.wait_exit(gu.TIMEOUT)
        assert rc == 0, f"rtxd exited {rc} after SIGTERM{d.log_excerpt()}"
        d.check_sanitizer()
        for sc in streams:
            sc.stop_stream(cancel_requests=True)
            sc.close()
        cl.close()
    finally:
        err = d.cleanup()
    assert not err, f"daemon teardown: {err}"


class NoModelsDaemon(gu.GrpcDaemon):
    """rtxd without a model repository (and without HTTP)."""

    def argv(self, port):
        return [x for x in super().argv(port) if not str(x).startswith("--models.")]


def test_without_a_repository(tmp_path):
    d = NoModelsDaemon(tmp_path / "rtxd")
    d.start()
    try:
        c = gu.client(d)
        assert c.is_server_live() and c.is_server_ready()
        assert not c.is_model_ready("simple")
        for call in (lambda: c.get_model_metadata("simple"),
                     lambda: c.get_model_repository_index(),
                     lambda: c.get_inference_statistics(),
                     lambda: c.load_model("simple"),
                     lambda: c.infer("simple", gu.inputs(("INPUT0", np.ones((1, 16), np.int32))))):
            gu.expect_error(call, "UNAVAILABLE", "no model repository", daemon=d)
        r = harness.rtxctl("models", "list", address=d.address, check_rc=6)
        assert "no model repository" in r.err
        # shared memory does not need models
        assert not c.get_system_shared_memory_status(as_json=True).get("regions")
        c.close()
    finally:
        err = d.cleanup()
    assert not err, f"daemon teardown: {err}"



def test_cancel_and_deadline_reach_the_queue(tmp_path):
    """Calls cancelled by the client or past their gRPC deadline while the model is busy do
    not run: rtxd either never queues them (the cancel came first) or the core fails them in
    its queue (the cancel flag and deadline_ns reached it). How many take which path depends
    on timing, so the test checks that the busy calls ran and most of the others did not."""
    d = gu.GrpcDaemon(tmp_path / "rtxd")
    d.start()
    try:
        cl = gu.client(d)
        x = np.ones((8, 128, 256), np.float32)
        ends, done = [], threading.Semaphore(0)

        def cb(result, error):
            ends.append(error)
            done.release()

        busy = [cl.async_infer("transformer_block", gu.inputs(("x", x)), cb) for _ in range(12)]
        victims = [cl.async_infer("transformer_block", gu.inputs(("x", x)), cb)
                   for _ in range(6)]
        for v in victims:
            v.cancel()
        late = [cl.async_infer("transformer_block", gu.inputs(("x", x)), cb,
                               client_timeout=0.05) for _ in range(6)]
        for _ in range(len(busy) + len(victims) + len(late)):
            assert done.acquire(timeout=gu.TIMEOUT), "a call never ended"
        assert sum(e is None for e in ends) <= 18, ends
        st = cl.get_inference_statistics("transformer_block").model_stats[0].inference_stats
        failed, ok = st.fail.count, st.success.count
        assert ok >= 12 and ok + failed <= 24 and ok <= 18, (ok, failed)
        cl.close()
        gu.assert_serving(d)
    finally:
        err = d.cleanup()
    assert not err, f"daemon teardown: {err}"
