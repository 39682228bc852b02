"""
Triton's own HTTP client (tritonclient.http) against rtxd: every endpoint it has, inference
with JSON and binary tensors (sync and async), outputs against NumPy, statistics, the model
repository (index, load with and without a config, unload, memory freed), system shared
memory (inputs read from and outputs written to the client's regions) and the errors as
tritonclient reports them.
"""

import json
import warnings

import numpy as np
import pytest

import grpc_util as gu
import http_util as hu
import serving_harness as sh

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # pkg_resources' deprecation notice
    import tritonclient.http as th
    import tritonclient.utils.shared_memory as shm
    from tritonclient.utils import InferenceServerException


@pytest.fixture(scope="module")
def d(server):
    hu.wait_http(server)
    return server


def client(d, **kw):
    return th.InferenceServerClient(d.http_address, network_timeout=hu.TIMEOUT, **kw)


def ins(binary=True, **arrays):
    res = []
    for name, a in arrays.items():
        i = th.InferInput(name, list(a.shape), hu.NP_TO_KSERVE[a.dtype])
        i.set_data_from_numpy(a, binary_data=binary)
        res.append(i)
    return res


def expect_error(fn, status, *needles, what=""):
    try:
        r = fn()
    except InferenceServerException as e:
        msg = e.message() or ""
        assert str(e.status()) == str(status), f"{what}: status {e.status()} {msg!r}"
        for n in needles:
            assert n.lower() in msg.lower(), f"{what}: {msg!r} lacks {n!r}"
        return e
    raise AssertionError(f"{what}: expected {status}, the call returned {str(r)[:200]!r}")


def test_server_endpoints(d):
    c = client(d)
    assert c.is_server_live() and c.is_server_ready()
    md = c.get_server_metadata()
    assert md["name"] == "rtxd" and "binary_tensor_data" in md["extensions"]
    assert c.is_model_ready("simple") and c.is_model_ready("mlp", "1")
    assert not c.is_model_ready("nosuch")
    meta = c.get_model_metadata("mlp")
    assert meta["inputs"][0]["shape"] == [-1, 64]
    cfg = c.get_model_config("simple")
    assert cfg["name"] == "simple" and cfg["max_batch_size"] == 8
    idx = {m["name"]: m["state"] for m in c.get_model_repository_index()}
    assert idx["simple"] == "READY"
    c.close()


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_infer_simple(d, binary):
    c = client(d)
    a, b = hu.simple_inputs(5, seed=int(binary))
    outs = [th.InferRequestedOutput(n, binary_data=binary) for n in ("OUTPUT0", "OUTPUT1")]
    r = c.infer("simple", ins(binary, INPUT0=a, INPUT1=b), outputs=outs, request_id="abc")
    assert r.get_response()["id"] == "abc"
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
    c.close()


def test_infer_mlp_against_numpy(d):
    c = client(d)
    w = gu.read_safetensors(d.repository / "mlp" / "1" / "model.safetensors")
    x = np.random.default_rng(2).standard_normal((7, 64)).astype(np.float32)
    for model in ("mlp", "mlp_nobatch"):
        r = c.infer(model, ins(True, x=x))
        np.testing.assert_allclose(r.as_numpy("probs"), hu.mlp_reference(w, x), rtol=1e-5,
                                   atol=1e-6)
    c.close()


def test_async_infer_many(d):
    """Many requests in flight on a pool of connections (the batcher merges them)."""
    c = client(d, concurrency=8)
    w = gu.read_safetensors(d.repository / "mlp" / "1" / "model.safetensors")
    xs = np.random.default_rng(3).standard_normal((40, 1, 64)).astype(np.float32)
    pending = [c.async_infer("mlp", ins(True, x=x)) for x in xs]
    for x, p in zip(xs, pending):
        np.testing.assert_allclose(p.get_result().as_numpy("probs"), hu.mlp_reference(w, x),
                                   rtol=1e-5, atol=1e-6)
    c.close()


def test_statistics(d):
    c = client(d)
    a, b = hu.simple_inputs(1)
    c.infer("simple", ins(True, INPUT0=a, INPUT1=b))
    st = c.get_inference_statistics("simple")["model_stats"][0]
    assert st["name"] == "simple" and st["inference_count"] >= 1
    assert st["inference_stats"]["success"]["count"] >= 1
    every = c.get_inference_statistics()["model_stats"]
    assert {"simple", "mlp"} <= {m["name"] for m in every}
    expect_error(lambda: c.get_inference_statistics("nosuch"), 404, "nosuch")
    c.close()


def test_errors_through_tritonclient(d):
    c = client(d)
    a, b = hu.simple_inputs(1)
    expect_error(lambda: c.infer("nosuch", ins(True, INPUT0=a, INPUT1=b)), 404, "nosuch",
                 what="unknown model")
    expect_error(lambda: c.infer("simple", ins(True, INPUT0=a.astype(np.float32), INPUT1=b)),
                 400, "INPUT0", what="wrong datatype")
    expect_error(lambda: c.infer("simple", ins(True, INPUT0=a)), 400, "INPUT1",
                 what="missing input")
    expect_error(lambda: c.infer("simple", ins(True, INPUT0=a[:, :8], INPUT1=b[:, :8])), 400,
                 "INPUT0", what="wrong shape")
    expect_error(lambda: c.get_model_metadata("nosuch"), 404, "nosuch")
    expect_error(lambda: c.get_cuda_shared_memory_status(), 400, "CUDA")
    expect_error(lambda: c.load_model("simple"), 400, what="load in control none")
    hu.assert_serving(d)
    c.close()


# ------------------------------------------------------------------------------------------
# System shared memory
# ------------------------------------------------------------------------------------------

def test_system_shared_memory(d):
    c = client(d)
    a, b = hu.simple_inputs(2, seed=8)
    nbytes = a.nbytes
    key = f"/rtxd_http_test_{d.http_port}"
    h_in = shm.create_shared_memory_region("in_region", key + "_in", 2 * nbytes)
    h_out = shm.create_shared_memory_region("out_region", key + "_out", 2 * nbytes)
    try:
        shm.set_shared_memory_region(h_in, [a, b])
        c.unregister_system_shared_memory()
        c.register_system_shared_memory("in_region", key + "_in", 2 * nbytes)
        c.register_system_shared_memory("out_region", key + "_out", 2 * nbytes)
        st = {s["name"]: s for s in c.get_system_shared_memory_status()}
        assert st["in_region"]["key"] == key + "_in"
        assert int(st["in_region"]["byte_size"]) == 2 * nbytes
        one = c.get_system_shared_memory_status("out_region")
        assert [s["name"] for s in one] == ["out_region"]

        i0, i1 = ins(True, INPUT0=a, INPUT1=b)
        i0.set_shared_memory("in_region", nbytes)
        i1.set_shared_memory("in_region", nbytes, offset=nbytes)
        o0 = th.InferRequestedOutput("OUTPUT0")
        o0.set_shared_memory("out_region", nbytes)
        o1 = th.InferRequestedOutput("OUTPUT1")
        o1.set_shared_memory("out_region", nbytes, offset=nbytes)
        r = c.infer("simple", [i0, i1], outputs=[o0, o1])
        out = r.get_output("OUTPUT0")  # the data went to the region, not into the body
        # name, datatype and shape only, as Triton answers (its C++ client reads
        # binary_data_size from any output that has parameters)
        assert out == {"name": "OUTPUT0", "datatype": "INT32", "shape": [2, 16]}
        got0 = shm.get_contents_as_numpy(h_out, np.int32, [2, 16], offset=0)
        got1 = shm.get_contents_as_numpy(h_out, np.int32, [2, 16], offset=nbytes)
        np.testing.assert_array_equal(got0, a + b)
        np.testing.assert_array_equal(got1, a - b)

        # an output window too small for the output
        o_small = th.InferRequestedOutput("OUTPUT0")
        o_small.set_shared_memory("out_region", nbytes // 2)
        expect_error(lambda: c.infer("simple", [i0, i1], outputs=[o_small]), 400, "out_region",
                     what="output window too small")
        # an input window past the region's end
        i_bad = ins(True, INPUT0=a)[0]
        i_bad.set_shared_memory("in_region", nbytes, offset=2 * nbytes - 8)
        expect_error(lambda: c.infer("simple", [i_bad, i1]), 400, "in_region",
                     what="input window past the end")
        # a region registered twice
        expect_error(lambda: c.register_system_shared_memory("in_region", key + "_in", 8), 400,
                     "in_region", what="registered twice")
        c.unregister_system_shared_memory("in_region")
        assert [s["name"] for s in c.get_system_shared_memory_status()] == ["out_region"]
        expect_error(lambda: c.infer("simple", [i0, i1]), 400, "in_region",
                     what="unregistered region")
        c.unregister_system_shared_memory()
        assert c.get_system_shared_memory_status() == []
        hu.assert_serving(d)
    finally:
        shm.destroy_shared_memory_region(h_in)
        shm.destroy_shared_memory_region(h_out)
        c.close()


# ------------------------------------------------------------------------------------------
# Model repository: explicit control
# ------------------------------------------------------------------------------------------

def model_memory(d):
    from prometheus_client.parser import text_string_to_metric_families
    text = hu.get(d, "/metrics").body.decode()
    for fam in text_string_to_metric_families(text):
        if fam.name == "rtxd_model_memory_bytes":
            return sum(s.value for s in fam.samples)
    return 0


def test_load_unload_explicit(make_server):
    d = make_server("explicit", control="explicit", startup=["simple"]).start()
    hu.wait_http(d)
    c = client(d)
    assert c.is_model_ready("simple") and not c.is_model_ready("mlp")
    idx = {m["name"]: m for m in c.get_model_repository_index()}
    assert set(idx) >= {"simple", "mlp", "mlp_nobatch", "transformer_block"}
    mem0 = model_memory(d)

    c.load_model("mlp")
    assert c.is_model_ready("mlp")
    w = gu.read_safetensors(d.repository / "mlp" / "1" / "model.safetensors")
    x = np.random.default_rng(4).standard_normal((2, 64)).astype(np.float32)
    np.testing.assert_allclose(c.infer("mlp", ins(True, x=x)).as_numpy("probs"),
                               hu.mlp_reference(w, x), rtol=1e-5, atol=1e-6)
    mem1 = model_memory(d)
    assert mem1 > mem0, f"model memory did not grow on load: {mem0} -> {mem1}"

    c.unload_model("mlp")
    assert not c.is_model_ready("mlp")
    expect_error(lambda: c.infer("mlp", ins(True, x=x)), 503, "mlp", what="infer after unload")
    mem2 = model_memory(d)
    assert mem2 <= mem0, f"model memory not freed on unload: {mem0} -> {mem1} -> {mem2}"

    # load with a config given in the request (Triton's "config" parameter)
    cfg = c.get_model_config("simple")
    cfg["max_batch_size"] = 4
    c.load_model("simple", config=json.dumps(cfg))
    assert c.get_model_config("simple")["max_batch_size"] == 4
    a, b = hu.simple_inputs(5)
    expect_error(lambda: c.infer("simple", ins(True, INPUT0=a, INPUT1=b)), 400, "5",
                 what="batch above the new max")
    a, b = hu.simple_inputs(4)
    np.testing.assert_array_equal(
        c.infer("simple", ins(True, INPUT0=a, INPUT1=b)).as_numpy("OUTPUT0"), a + b)

    # errors: unknown model, a bad config (the old version keeps serving)
    expect_error(lambda: c.load_model("nosuch"), 404, "nosuch", what="load unknown")
    expect_error(lambda: c.load_model("simple", config="{not json"), 400, what="bad config")
    assert c.is_model_ready("simple")
    r = hu.post(d, "/v2/repository/models/simple/load",
                {"parameters": {"file:1/model.rtxg": "AAAA"}})
    assert r.status == 400 and "file:" in r.error(), r
    expect_error(lambda: c.unload_model("nosuch"), 404, "nosuch", what="unload unknown")
    c.close()
    d.stop()
