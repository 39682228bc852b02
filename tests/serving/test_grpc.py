"""
The KServe v2 gRPC service (inference.GRPCInferenceService) through Triton's own client,
tritonclient.grpc, against one rtxd serving a copy of the example repository (control none):
health, metadata, configuration, inference (raw, typed, requested outputs, parameters),
outputs equal to rtxrun's, concurrent requests, streaming inference, system shared memory,
statistics, and every kind of bad request with the status code and message Triton gives,
rtxd serving on after each.
"""

import threading

import numpy as np
import pytest

import grpc_util as gu
import serving_harness as sh
from grpc_util import service_pb2, tg

import grpc  # noqa: E402
import tritonclient.utils.shared_memory as shm  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The module's daemon (control none): the gRPC service alone, no HTTP server."""
    d = gu.GrpcDaemon(tmp_path_factory.mktemp("test_grpc"))
    d.start()
    yield d
    err = d.cleanup()
    assert not err, f"daemon teardown: {err}"


@pytest.fixture(scope="module")
def c(server):
    cl = gu.client(server)
    yield cl
    cl.close()


def rand(shape, seed, dtype=np.float32):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(dtype)


# ------------------------------------------------------------------------------------------
# Health, metadata, configuration
# ------------------------------------------------------------------------------------------

def test_health(server, c):
    assert c.is_server_live()
    assert c.is_server_ready()
    for m in ("simple", "mlp", "mlp_nobatch", "transformer_block"):
        assert c.is_model_ready(m), m
        assert c.is_model_ready(m, "1"), m
    assert not c.is_model_ready("no_such_model")
    assert not c.is_model_ready("simple", "7")


def test_server_metadata(c):
    md = c.get_server_metadata()
    assert md.name == "rtxd"
    assert md.version
    for ext in ("model_repository", "system_shared_memory", "statistics",
                "model_configuration", "binary_tensor_data"):
        assert ext in md.extensions


def test_model_metadata(server, c):
    md = c.get_model_metadata("simple")
    assert md.name == "simple" and list(md.versions) == ["1"] and md.platform == "rtx_graph"
    assert [(t.name, t.datatype, list(t.shape)) for t in md.inputs] == [
        ("INPUT0", "INT32", [-1, 16]), ("INPUT1", "INT32", [-1, 16])]
    assert [t.name for t in md.outputs] == ["OUTPUT0", "OUTPUT1"]
    md = c.get_model_metadata("mlp", "1", as_json=True)
    assert md["inputs"][0]["datatype"] == "FP32"
    assert [int(d) for d in md["inputs"][0]["shape"]] == [-1, 64]
    gu.expect_error(lambda: c.get_model_metadata("no_such_model"), "NOT_FOUND",
                    "no_such_model", daemon=server)
    gu.expect_error(lambda: c.get_model_metadata("simple", "9"), "NOT_FOUND", "simple",
                    daemon=server)
    gu.expect_error(lambda: c.get_model_metadata("simple", "one"), "INVALID_ARGUMENT",
                    "'one'", daemon=server)


def test_model_config(server, c):
    cfg = c.get_model_config("mlp").config
    assert cfg.name == "mlp" and cfg.platform == "rtx_graph" and cfg.max_batch_size == 64
    assert cfg.input[0].name == "x" and list(cfg.input[0].dims) == [64]
    assert cfg.input[0].data_type == tg.model_config_pb2.TYPE_FP32
    assert cfg.output[0].name == "probs" and list(cfg.output[0].dims) == [10]
    assert list(cfg.dynamic_batching.preferred_batch_size) == [16, 32]
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 500
    assert cfg.instance_group[0].count >= 1
    nob = c.get_model_config("mlp_nobatch").config
    assert not nob.HasField("dynamic_batching")
    gu.expect_error(lambda: c.get_model_config("no_such_model"), "NOT_FOUND", "no_such_model",
                    daemon=server)


# ------------------------------------------------------------------------------------------
# Inference
# ------------------------------------------------------------------------------------------

def test_infer_simple_raw(c):
    a = np.arange(48, dtype=np.int32).reshape(3, 16)
    b = np.full((3, 16), 5, np.int32)
    r = c.infer("simple", gu.inputs(("INPUT0", a), ("INPUT1", b)), request_id="req-17")
    assert r.get_response().id == "req-17"
    assert r.get_response().model_name == "simple"
    assert r.get_response().model_version == "1"
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)


def test_infer_requested_outputs(c):
    a, b = np.ones((2, 16), np.int32), np.full((2, 16), 3, np.int32)
    r = c.infer("simple", gu.inputs(("INPUT0", a), ("INPUT1", b)),
                outputs=[tg.InferRequestedOutput("OUTPUT1")])
    assert [o.name for o in r.get_response().outputs] == ["OUTPUT1"]
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
    assert r.as_numpy("OUTPUT0") is None


def test_infer_typed_contents_both_ways(server):
    """InferTensorContents in; binary_data=false asks for typed contents out."""
    req = service_pb2.ModelInferRequest(model_name="simple", id="typed")
    for name, base in (("INPUT0", 10), ("INPUT1", 1)):
        t = req.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        t.contents.int_contents.extend(range(base, base + 16))
    for name in ("OUTPUT0", "OUTPUT1"):
        o = req.outputs.add(name=name)
        o.parameters["binary_data"].bool_param = False
    resp = gu.stub_call(server, "ModelInfer", req)
    assert len(resp.raw_output_contents) == 0
    out = {o.name: list(o.contents.int_contents) for o in resp.outputs}
    assert out["OUTPUT0"] == [11 + 2 * i for i in range(16)]
    assert out["OUTPUT1"] == [9] * 16
    # FP32 typed in, raw out
    req = service_pb2.ModelInferRequest(model_name="mlp")
    x = rand((2, 64), 3)
    t = req.inputs.add(name="x", datatype="FP32", shape=[2, 64])
    t.contents.fp32_contents.extend(x.ravel().tolist())
    resp = gu.stub_call(server, "ModelInfer", req)
    probs = np.frombuffer(resp.raw_output_contents[0], np.float32).reshape(2, 10)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)


def test_outputs_equal_rtxrun(server, c, tmp_path):
    repo = server.repository
    x = rand((5, 64), 11)
    want = gu.rtxrun_outputs(repo / "mlp", {"x": x}, tmp_path / "mlp")
    for model in ("mlp", "mlp_nobatch"):
        got = c.infer(model, gu.inputs(("x", x))).as_numpy("probs")
        np.testing.assert_allclose(got, want["probs"], rtol=1e-5, atol=1e-6, err_msg=model)
    md = c.get_model_metadata("transformer_block")
    feeds = {}
    for i, t in enumerate(md.inputs):
        shape = [2 if d == -1 else int(d) for d in t.shape]
        feeds[t.name] = rand(shape, 20 + i)
    r = c.infer("transformer_block", gu.inputs(*feeds.items()))
    want = gu.rtxrun_outputs(repo / "transformer_block", feeds, tmp_path / "tb")
    for o in md.outputs:
        np.testing.assert_allclose(r.as_numpy(o.name), want[o.name], rtol=1e-4, atol=1e-5,
                                   err_msg=o.name)


def batch_runs(stats):
    """{batch size: runs} of a tritonclient ModelStatistics."""
    return {b.batch_size: b.compute_infer.count for b in stats.batch_stats}


def test_concurrent_requests_are_merged_and_match_numpy(make_server, tmp_path):
    """64 single-row requests in flight at once on the example mlp (dynamic batching,
    preferred sizes 16 and 32; its queue delay raised to sh.BATCH_WAIT_US so that every
    request reaches the batcher in time on any host) run merged: the statistics count 64
    inferences in at most 8 runs, all of them batches of more than one row, and every answer
    is its own row of the NumPy reference (rtxgraph.py's interpreter of the model's graph and
    weights), not of another rtxd model."""
    d = make_server("batching", repository=sh.batching_repository(tmp_path / "models"))
    d.start()
    n = 64
    x = rand((n, 64), 5)
    want = gu.mlp_numpy(d.repository / "mlp", x)
    c = gu.client(d)
    before = c.get_inference_statistics("mlp").model_stats[0]
    results, done = {}, threading.Semaphore(0)

    def cb(i):
        def f(result, error):
            results[i] = error if error else result.as_numpy("probs")
            done.release()
        return f

    for i in range(n):
        c.async_infer("mlp", gu.inputs(("x", x[i:i + 1])), cb(i), request_id=str(i))
    for _ in range(n):
        assert done.acquire(timeout=gu.TIMEOUT), "an async request never completed"
    for i in range(n):
        assert not isinstance(results[i], Exception), results[i]
        assert results[i].shape == (1, 10), results[i].shape
        np.testing.assert_allclose(results[i][0], want[i], rtol=1e-5, atol=1e-6,
                                   err_msg=f"request {i}")
    after = c.get_inference_statistics("mlp").model_stats[0]
    c.close()
    assert after.inference_count - before.inference_count == n
    runs = after.execution_count - before.execution_count
    sizes = {b: k - batch_runs(before).get(b, 0) for b, k in batch_runs(after).items()}
    sizes = {b: k for b, k in sizes.items() if k}
    assert sum(sizes.values()) == runs and sum(b * k for b, k in sizes.items()) == n, sizes
    assert 1 <= runs <= 8, f"{n} concurrent requests ran in {runs} batches: {sizes}"
    assert min(sizes) > 1, f"a request ran alone: batch sizes {sizes}"


def test_parameters_priority_and_timeout(server, c):
    a, b = np.ones((1, 16), np.int32), np.ones((1, 16), np.int32)
    out = gu.infer_simple(c, a, b, priority=1, timeout=10_000_000)
    np.testing.assert_array_equal(out["OUTPUT0"], a + b)
    # a server-side timeout of 1 us passes before the request can run
    gu.expect_error(lambda: gu.infer_simple(c, a, b, timeout=1), "DEADLINE_EXCEEDED",
                    daemon=server)
    # parameters tritonclient will not send: through the generated stub
    for key, value, needle in (("binary_data_output", "int64_param", "bool"),
                               ("priority", "string_param", "integer"),
                               ("timeout", "bool_param", "integer")):
        r = service_pb2.ModelInferRequest(model_name="simple")
        for name in ("INPUT0", "INPUT1"):
            r.inputs.add(name=name, datatype="INT32", shape=[1, 16])
            r.raw_input_contents.append(a.tobytes())
        setattr(r.parameters[key], value, 1 if value != "string_param" else "x")
        with pytest.raises(grpc.RpcError) as ei:
            gu.stub_call(server, "ModelInfer", r)
        assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT, ei.value.details()
        assert key in ei.value.details() and needle in ei.value.details()
    gu.assert_serving(server, c)


def test_client_deadline_and_cancel_keep_serving(server, c):
    md = c.get_model_metadata("transformer_block")
    feeds = [(t.name, rand([8 if d == -1 else int(d) for d in t.shape], 1)) for t in md.inputs]
    for _ in range(3):
        try:
            c.infer("transformer_block", gu.inputs(*feeds), client_timeout=0.0005)
        except gu.InferenceServerException as e:
            assert "DEADLINE" in str(e.status()).upper() or "deadline" in e.message().lower()
    ctxs = [c.async_infer("transformer_block", gu.inputs(*feeds), lambda result, error: None)
            for _ in range(8)]
    for ctx in ctxs:
        ctx.cancel()
    gu.assert_serving(server, c)


# ------------------------------------------------------------------------------------------
# Streaming
# ------------------------------------------------------------------------------------------

def test_stream_infer_many_with_an_error_in_between(server):
    cl = gu.client(server)
    got, lock, done = {}, threading.Lock(), threading.Semaphore(0)

    def cb(result, error):
        with lock:
            if error is not None:
                got.setdefault("errors", []).append(str(error))
            else:
                got[result.get_response().id] = (result.as_numpy("OUTPUT0"),
                                                 result.as_numpy("OUTPUT1"))
        done.release()

    cl.start_stream(callback=cb)
    n = 40
    for i in range(n):
        a = np.full((1, 16), i, np.int32)
        b = np.arange(16, dtype=np.int32)[None]
        if i == 17:  # a bad request: the stream answers it with an error and goes on
            cl.async_stream_infer("simple", gu.inputs(("INPUT0", a)), request_id="bad")
        cl.async_stream_infer("simple", gu.inputs(("INPUT0", a), ("INPUT1", b)),
                              request_id=f"r{i}")
    for _ in range(n + 1):
        assert done.acquire(timeout=gu.TIMEOUT), f"stream answered {len(got)} of {n + 1}"
    cl.stop_stream()
    cl.close()
    errors = got.pop("errors")
    assert len(errors) == 1 and "INPUT1" in errors[0] and "request 'bad'" in errors[0], errors
    assert sorted(got) == sorted(f"r{i}" for i in range(n))
    for i in range(n):
        o0, o1 = got[f"r{i}"]
        np.testing.assert_array_equal(o0[0], i + np.arange(16))
        np.testing.assert_array_equal(o1[0], i - np.arange(16))


def test_stream_closed_with_requests_in_flight(server, c):
    md = c.get_model_metadata("transformer_block")
    feeds = [(t.name, rand([4 if d == -1 else int(d) for d in t.shape], 2)) for t in md.inputs]
    for _ in range(3):
        cl = gu.client(server)
        cl.start_stream(callback=lambda result, error: None)
        for i in range(20):
            cl.async_stream_infer("transformer_block", gu.inputs(*feeds), request_id=str(i))
        cl.stop_stream(cancel_requests=True)
        cl.close()
    gu.assert_serving(server, c)


# ------------------------------------------------------------------------------------------
# System shared memory
# ------------------------------------------------------------------------------------------

def test_shared_memory_inputs_and_outputs(server, c):
    tag = f"rtx{server.port}"
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.full((2, 16), 7, np.int32)
    nbytes = a.nbytes
    h_in = shm.create_shared_memory_region(f"{tag}_in", f"/{tag}_in", 2 * nbytes)
    h_out = shm.create_shared_memory_region(f"{tag}_out", f"/{tag}_out", 2 * nbytes + 64)
    try:
        shm.set_shared_memory_region(h_in, [a, b])
        c.unregister_system_shared_memory()
        c.register_system_shared_memory(f"{tag}_in", f"/{tag}_in", 2 * nbytes)
        c.register_system_shared_memory(f"{tag}_out", f"/{tag}_out", 2 * nbytes, offset=64)
        st = c.get_system_shared_memory_status(as_json=True)["regions"]
        assert st[f"{tag}_out"]["key"] == f"/{tag}_out"
        assert int(st[f"{tag}_out"]["offset"]) == 64
        assert int(st[f"{tag}_in"]["byte_size"]) == 2 * nbytes

        ins = [tg.InferInput(n, [2, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        ins[0].set_shared_memory(f"{tag}_in", nbytes)
        ins[1].set_shared_memory(f"{tag}_in", nbytes, offset=nbytes)
        outs = [tg.InferRequestedOutput("OUTPUT0"), tg.InferRequestedOutput("OUTPUT1")]
        outs[0].set_shared_memory(f"{tag}_out", nbytes)
        outs[1].set_shared_memory(f"{tag}_out", nbytes, offset=nbytes)
        r = c.infer("simple", ins, outputs=outs)
        o = r.get_output("OUTPUT0")
        assert o.datatype == "INT32" and list(o.shape) == [2, 16]
        # one raw_output_contents entry per output, empty for those in shared memory, as
        # Triton answers (its C++ client, perf_analyzer's, reads entry i for output i)
        assert list(r.get_response().raw_output_contents) == [b"", b""]
        got = shm.get_contents_as_numpy(h_out, np.int32, [2 * nbytes // 4 + 16])
        np.testing.assert_array_equal(got[16:16 + 32].reshape(2, 16), a + b)
        np.testing.assert_array_equal(got[48:80].reshape(2, 16), a - b)

        # mixed: one input from shared memory, one raw; raw outputs
        ins = [tg.InferInput("INPUT0", [2, 16], "INT32")] + gu.inputs(("INPUT1", b))
        ins[0].set_shared_memory(f"{tag}_in", nbytes)
        r = c.infer("simple", ins)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)

        # errors: past the region, unknown region, output region too small
        ins[0].set_shared_memory(f"{tag}_in", nbytes, offset=nbytes + 4)
        gu.expect_error(lambda: c.infer("simple", ins), "INVALID_ARGUMENT", f"{tag}_in",
                        "INPUT0", daemon=server)
        ins[0].set_shared_memory("no_such_region", nbytes)
        gu.expect_error(lambda: c.infer("simple", ins), "NOT_FOUND", "no_such_region",
                        daemon=server)
        ins[0].set_shared_memory(f"{tag}_in", nbytes - 4)
        gu.expect_error(lambda: c.infer("simple", ins), "INVALID_ARGUMENT", "INPUT0",
                        "shared_memory_byte_size", daemon=server)
        ins = [tg.InferInput("INPUT0", [2, 16], "INT32")] + gu.inputs(("INPUT1", b))
        ins[0].set_shared_memory(f"{tag}_in", nbytes)  # (a set offset cannot be cleared)
        small = [tg.InferRequestedOutput("OUTPUT0")]
        small[0].set_shared_memory(f"{tag}_out", nbytes // 2)
        gu.expect_error(lambda: c.infer("simple", ins, outputs=small), "INVALID_ARGUMENT",
                        "OUTPUT0", daemon=server)

        # registration errors
        gu.expect_error(lambda: c.register_system_shared_memory(f"{tag}_in", f"/{tag}_in", 8),
                        "INVALID_ARGUMENT", "already registered", daemon=server)
        gu.expect_error(lambda: c.register_system_shared_memory("x", "/rtx_no_such_key", 8),
                        "INTERNAL", "/rtx_no_such_key", daemon=server)
        gu.expect_error(lambda: c.register_system_shared_memory("y", f"/{tag}_in",
                                                                4 * nbytes),
                        "INTERNAL", "past its end", daemon=server)

        c.unregister_system_shared_memory(f"{tag}_in")
        gu.expect_error(lambda: c.get_system_shared_memory_status(f"{tag}_in"), "NOT_FOUND",
                        f"{tag}_in", daemon=server)
        gu.expect_error(lambda: c.unregister_system_shared_memory(f"{tag}_in"), "NOT_FOUND",
                        f"{tag}_in", daemon=server)
        c.unregister_system_shared_memory()
        assert not c.get_system_shared_memory_status(as_json=True).get("regions")
    finally:
        shm.destroy_shared_memory_region(h_in)
        shm.destroy_shared_memory_region(h_out)
    gu.assert_serving(server, c)


def test_cuda_shared_memory_trace_and_log_are_unimplemented(server, c):
    gu.expect_error(lambda: c.get_cuda_shared_memory_status(), "UNIMPLEMENTED",
                    "system (POSIX) shared memory", daemon=server)
    gu.expect_error(lambda: c.unregister_cuda_shared_memory(), "UNIMPLEMENTED", "CUDA",
                    daemon=server)
    gu.expect_error(lambda: c.get_trace_settings(), "UNIMPLEMENTED", "tracing", daemon=server)
    gu.expect_error(lambda: c.get_log_settings(), "UNIMPLEMENTED", "log", daemon=server)


# ------------------------------------------------------------------------------------------
# Statistics and the repository in control mode none
# ------------------------------------------------------------------------------------------

def test_statistics(server, c):
    before = c.get_inference_statistics("simple", "1").model_stats[0]
    for _ in range(3):
        gu.infer_simple(c, np.ones((2, 16), np.int32), np.ones((2, 16), np.int32))
    # a refused request (INPUT1 missing) counts in neither the inferences nor the runs
    gu.expect_error(lambda: c.infer("simple", gu.inputs(("INPUT0", np.ones((2, 16), np.int32)))),
                    "INVALID_ARGUMENT", "INPUT1", daemon=server)
    s = c.get_inference_statistics("simple", "1").model_stats[0]
    assert s.name == "simple" and s.version == "1"
    assert s.inference_count - before.inference_count == 6  # batch elements
    assert s.execution_count - before.execution_count == 3
    assert s.inference_stats.success.count - before.inference_stats.success.count == 3
    assert s.inference_stats.success.ns > before.inference_stats.success.ns
    assert s.last_inference > 0
    assert any(b.batch_size == 2 for b in s.batch_stats)
    every = c.get_inference_statistics().model_stats
    assert {m.name for m in every} >= {"simple", "mlp", "mlp_nobatch", "transformer_block"}
    gu.expect_error(lambda: c.get_inference_statistics("no_such_model"), "NOT_FOUND",
                    "no_such_model", daemon=server)


def test_repository_index_and_control_none(server, c):
    idx = c.get_model_repository_index().models
    assert [(m.name, m.version, m.state) for m in idx] == [
        (m, "1", "READY")
        for m in ("mlp", "mlp_nobatch", "simple", "tiny-chat", "transformer_block")]
    gu.expect_error(lambda: c.load_model("simple"), "UNIMPLEMENTED", daemon=server)
    gu.expect_error(lambda: c.unload_model("simple"), "UNIMPLEMENTED", daemon=server)
    assert c.is_model_ready("simple")


# ------------------------------------------------------------------------------------------
# Bad requests: the right code and message, and rtxd serves on
# ------------------------------------------------------------------------------------------

I16 = np.ones((1, 16), np.int32)


@pytest.mark.parametrize("what,call,code,needles", [
    ("unknown model",
     lambda c: c.infer("no_such_model", gu.inputs(("INPUT0", I16))),
     "NOT_FOUND", ["no_such_model"]),
    ("unknown version",
     lambda c: c.infer("simple", gu.inputs(("INPUT0", I16), ("INPUT1", I16)),
                       model_version="3"),
     "NOT_FOUND", ["simple"]),
    ("wrong datatype",
     lambda c: c.infer("simple", gu.inputs(("INPUT0", I16.astype(np.float32)),
                                           ("INPUT1", I16))),
     "INVALID_ARGUMENT", ["INPUT0", "FP32"]),
    ("unsupported datatype",
     lambda c: c.infer("simple", gu.inputs(("INPUT0", I16.astype(np.float64)),
                                           ("INPUT1", I16))),
     "INVALID_ARGUMENT", ["INPUT0", "FP64"]),
    ("wrong shape",
     lambda c: c.infer("simple", gu.inputs(("INPUT0", np.ones((1, 15), np.int32)),
                                           ("INPUT1", I16))),
     "INVALID_ARGUMENT", ["INPUT0"]),
    ("batch too large",
     lambda c: c.infer("simple", gu.inputs(("INPUT0", np.ones((9, 16), np.int32)),
                                           ("INPUT1", np.ones((9, 16), np.int32)))),
     "INVALID_ARGUMENT", ["batch"]),
    ("missing input",
     lambda c: c.infer("simple", gu.inputs(("INPUT0", I16))),
     "INVALID_ARGUMENT", ["INPUT1"]),
    ("unknown input",
     lambda c: c.infer("simple", gu.inputs(("INPUT0", I16), ("INPUT1", I16),
                                           ("INPUT9", I16))),
     "INVALID_ARGUMENT", ["INPUT9"]),
    ("unknown output",
     lambda c: c.infer("simple", gu.inputs(("INPUT0", I16), ("INPUT1", I16)),
                       outputs=[tg.InferRequestedOutput("OUTPUT7")]),
     "INVALID_ARGUMENT", ["OUTPUT7"]),
])
def test_bad_request(server, c, what, call, code, needles):
    gu.expect_error(lambda: call(c), code, *needles, daemon=server, what=what)
    gu.assert_serving(server, c)


def test_bad_raw_contents(server, c):
    def req(raw):
        r = service_pb2.ModelInferRequest(model_name="simple")
        for name in ("INPUT0", "INPUT1"):
            r.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        r.raw_input_contents.extend(raw)
        return r

    good = np.ones(16, np.int32).tobytes()
    cases = [
        ([good], "INPUT1", "no data"),
        ([good, good[:-4]], "INPUT1", "60 bytes"),
        ([good, good, good], "3 raw_input_contents", None),
    ]
    for raw, n1, n2 in cases:
        with pytest.raises(grpc.RpcError) as ei:
            gu.stub_call(server, "ModelInfer", req(raw))
        assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT, ei.value.details()
        assert n1 in ei.value.details() and (n2 is None or n2 in ei.value.details())
    # typed contents of the wrong field and count
    r = service_pb2.ModelInferRequest(model_name="simple")
    t = r.inputs.add(name="INPUT0", datatype="INT32", shape=[1, 16])
    t.contents.fp32_contents.extend([1.0] * 16)
    r.inputs.add(name="INPUT1", datatype="INT32", shape=[1, 16]).contents.int_contents.extend(
        [1] * 15)
    with pytest.raises(grpc.RpcError) as ei:
        gu.stub_call(server, "ModelInfer", r)
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "INPUT0" in ei.value.details() and "int_contents" in ei.value.details()
    gu.assert_serving(server, c)


@pytest.mark.parametrize("method", ["ModelInfer", "ModelMetadata", "ModelConfig",
                                    "RepositoryIndex", "SystemSharedMemoryRegister",
                                    "ModelStatistics", "ServerLive"])
def test_garbage_bytes(server, c, method):
    for payload in (b"\xff\xff\xff\xff", b"\x0a\x10abc", bytes(range(256)) * 4):
        with pytest.raises(grpc.RpcError) as ei:
            gu.raw_call(server, method, payload)
        assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT, ei.value.details()
        assert "malformed inference." in ei.value.details()
    gu.assert_serving(server, c)


def test_empty_model_name_and_unknown_method(server, c):
    gu.expect_error(lambda: c.infer("", gu.inputs(("INPUT0", I16))), "INVALID_ARGUMENT",
                    "model name", daemon=server)
    with pytest.raises(grpc.RpcError) as ei:
        gu.raw_call(server, "NoSuchMethod", b"")
    assert ei.value.code() == grpc.StatusCode.UNIMPLEMENTED
    gu.assert_serving(server, c)


def test_proto_matches_tritons(tmp_path):
    """proto/inference/*.proto against tritonclient's compiled copy: every message and field
    rtxd defines exists in Triton's with the same number, type and label."""
    import subprocess
    import sys
    code = r"""
import sys
from google.protobuf import descriptor_pb2
def fields(fd_proto, prefix, out):
    for m in fd_proto.message_type:
        walk(m, prefix + m.name, out)
def walk(m, name, out):
    for f in m.field:
        out[(name, f.name)] = (f.number, f.type, f.label, f.type_name.split('.')[-1])
    for n in m.nested_type:
        walk(n, name + '.' + n.name, out)
def load(mods):
    out = {}
    for mod in mods:
        p = descriptor_pb2.FileDescriptorProto()
        mod.DESCRIPTOR.CopyToProto(p)
        fields(p, '', out)
    return out
if sys.argv[1] == 'triton':
    from tritonclient.grpc import model_config_pb2, service_pb2
    print(repr(load([model_config_pb2, service_pb2])))
else:
    sys.path.insert(0, sys.argv[2])
    from inference import model_config_pb2, grpc_service_pb2
    print(repr(load([model_config_pb2, grpc_service_pb2])))
"""
    (tmp_path / "inference").mkdir()
    (tmp_path / "inference" / "__init__.py").write_text("")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"--proto_path={sh.REPO}/proto",
                    f"--python_out={tmp_path}", f"{sh.REPO}/proto/inference/model_config.proto",
                    f"{sh.REPO}/proto/inference/grpc_service.proto"], check=True)
    triton = eval(subprocess.run([sys.executable, "-c", code, "triton"], check=True,
                                 capture_output=True, text=True).stdout)
    ours = eval(subprocess.run([sys.executable, "-c", code, "ours", str(tmp_path)], check=True,
                               capture_output=True, text=True).stdout)
    assert len(ours) > 150
    bad = {k: (v, triton.get(k)) for k, v in ours.items() if triton.get(k) != v}
    assert not bad, bad
