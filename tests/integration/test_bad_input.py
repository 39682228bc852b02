"""
Bad input to a real rtxd: random bytes as the request of every method, truncated protobuf,
invalid graphs, wrong inputs, tensors over jobs.max_tensor_bytes and messages over
server.max_message_bytes, unknown job ids, bad List page sizes. Each is answered with the
documented status and a message that names the problem; after EACH, Admin.Health is SERVING
and a tiny job still succeeds with the right outputs (the daemon keeps serving).

Codes: malformed/invalid -> INVALID_ARGUMENT; unknown job -> NOT_FOUND; graph or tensor over
the limits -> RESOURCE_EXHAUSTED (also gRPC's own answer to a message over
server.max_message_bytes); GetOutputs of a job that did not succeed -> FAILED_PRECONDITION.
"""

import grpc
import numpy as np
import pytest
from google.protobuf import empty_pb2
from google.protobuf.message import DecodeError

import harness as h
from harness import GraphBuilder, jobs_pb2, state_name
from rtxgraph import Attr

MAX_TENSOR = 64 * 1024
MAX_MESSAGE = 1024 * 1024
MAX_NODES = 64
DAEMON_KW = {"workers": 1, "flags": [f"--jobs.max_tensor_bytes={MAX_TENSOR}",
                                     f"--server.max_message_bytes={MAX_MESSAGE}",
                                     f"--jobs.max_graph_nodes={MAX_NODES}"]}

INVALID = grpc.StatusCode.INVALID_ARGUMENT
NOT_FOUND = grpc.StatusCode.NOT_FOUND
EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED
PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION

# (service, method, request type, server streaming)
METHODS = [
    ("rtx.v1.Jobs", "Submit", jobs_pb2.SubmitRequest, False),
    ("rtx.v1.Jobs", "Get", jobs_pb2.GetJobRequest, False),
    ("rtx.v1.Jobs", "Wait", jobs_pb2.WaitJobRequest, True),
    ("rtx.v1.Jobs", "Cancel", jobs_pb2.CancelJobRequest, False),
    ("rtx.v1.Jobs", "List", jobs_pb2.ListJobsRequest, False),
    ("rtx.v1.Jobs", "GetOutputs", jobs_pb2.GetOutputsRequest, False),
    ("rtx.v1.Admin", "Status", h.admin_pb2.StatusRequest, False),
    ("rtx.v1.Admin", "Devices", h.admin_pb2.DevicesRequest, False),
    ("rtx.v1.Admin", "Health", h.admin_pb2.HealthRequest, False),
    ("rtx.v1.Admin", "Config", h.admin_pb2.ConfigRequest, False),
    ("rtx.v1.Admin", "Drain", h.admin_pb2.DrainRequest, False),
]
# what a message about an undecodable request says, one of
DECODE_WORDS = ("decode", "parse", "malformed", "invalid", "protobuf", "truncated", "request")


def raw_call(client, service, method, data, stream):
    path = f"/{service}/{method}"
    if stream:
        return lambda: list(client.channel.unary_stream(path)(data, timeout=h.RPC_TIMEOUT))
    return lambda: client.channel.unary_unary(path)(data, timeout=h.RPC_TIMEOUT)


def random_request(seed, n):
    """Random bytes that no protobuf parser accepts: the first tag byte is forced to wire
    type 7 (there is none), the rest is random."""
    rng = np.random.default_rng(seed)
    b = bytearray(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
    b[0] = (b[0] & 0x78) | 0x07
    with pytest.raises(DecodeError):
        empty_pb2.Empty().ParseFromString(bytes(b))
    return bytes(b)


def structurally_invalid(data):
    try:
        empty_pb2.Empty().ParseFromString(data)  # wire structure only: no field checks
    except DecodeError:
        return True
    return False


@pytest.fixture
def d(daemon):
    """The module daemon; after the test, it must still be SERVING and run a tiny job."""
    yield daemon
    daemon.assert_serving()


# ------------------------------------------------------------------------------------------
# Undecodable requests
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("service,method,req,stream",
                         [m for m in METHODS if m[1] != "Drain"],
                         ids=[m[1] for m in METHODS if m[1] != "Drain"])
def test_random_bytes(d, service, method, req, stream, seed):
    data = random_request(seed * 100 + len(method), 16 + 97 * seed)
    h.expect_rpc_error(raw_call(d.client(), service, method, data, stream), INVALID,
                       DECODE_WORDS, daemon=d, what=f"{method}(random bytes)")


def test_random_bytes_drain(make_daemon):
    """Garbage sent to Admin.Drain is refused - and does not drain (its own daemon)."""
    dd = make_daemon("drain-garbage").start()
    for seed in (1, 2):
        data = random_request(seed, 40 * seed)
        h.expect_rpc_error(raw_call(dd.client(), "rtx.v1.Admin", "Drain", data, False),
                           INVALID, DECODE_WORDS, daemon=dd, what="Drain(random bytes)")
        dd.assert_serving()
    assert not dd.client().status().draining
    dd.stop()


def valid_submit_bytes():
    g = GraphBuilder("trunc")
    g.input("x", "f32", [4, 64])
    g.init("w", np.linspace(-1, 1, 64 * 8, dtype=np.float32).reshape(64, 8))
    g.node("matmul", ["x", "w"], "y", name="mm")
    g.output("y")
    return h.submit_request(g, {"x": np.ones((4, 64), np.float32)},
                            labels={"k": "v"}).SerializeToString()


@pytest.mark.parametrize("frac", [0.1, 0.5, 0.9, -1])
def test_truncated_submit(d, frac):
    full = valid_submit_bytes()
    cut = len(full) - 1 if frac == -1 else int(len(full) * frac)
    data = full[:cut]
    assert structurally_invalid(data), "pick a cut inside a field"
    h.expect_rpc_error(raw_call(d.client(), "rtx.v1.Jobs", "Submit", data, False), INVALID,
                       DECODE_WORDS, daemon=d, what=f"Submit(truncated at {cut}/{len(full)})")


@pytest.mark.parametrize("method", ["Get", "Wait", "Cancel", "GetOutputs"])
def test_truncated_job_request(d, method):
    data = jobs_pb2.GetJobRequest(job_id="j" + "0" * 28).SerializeToString()[:-5]
    assert structurally_invalid(data)
    h.expect_rpc_error(raw_call(d.client(), "rtx.v1.Jobs", method, data, method == "Wait"),
                       INVALID, DECODE_WORDS, daemon=d, what=f"{method}(truncated)")


# ------------------------------------------------------------------------------------------
# Invalid graphs: INVALID_ARGUMENT naming the node
# ------------------------------------------------------------------------------------------

X23 = {"x": np.ones((2, 3), np.float32)}


def g_unknown_op():
    g = GraphBuilder("bad")
    g.input("x", "f32", [2, 3])
    g.node("frobnicate", ["x"], "y", name="node_frob")
    g.output("y")
    return g, ("frobnicate",)


def g_cycle():
    g = GraphBuilder("bad")
    g.input("x", "f32", [2, 3])
    g.node("add", ["x", "t2"], "t1", name="cyc_add")
    g.node("relu", ["t1"], "t2", name="cyc_relu")
    g.node("neg", ["t2"], "y", name="after")
    g.output("y")
    return g, ("cycle", ("cyc_add", "cyc_relu"))


def g_dangling():
    g = GraphBuilder("bad")
    g.input("x", "f32", [2, 3])
    g.node("add", ["x", "nowhere_value"], "y", name="dangler")
    g.output("y")
    return g, ("dangler", "nowhere_value")


def g_unknown_attr():
    g = GraphBuilder("bad")
    g.input("x", "f32", [2, 3])
    g.node("softmax", ["x"], "y", name="soft_node", axis=-1, flavour="sour")
    g.output("y")
    return g, ("soft_node", "flavour")


def g_attr_wrong_type():
    g = GraphBuilder("bad")
    g.input("x", "f32", [2, 3])
    g.node("softmax", ["x"], "y", name="typed_node", axis=Attr("s", "last"))
    g.output("y")
    return g, ("typed_node", "axis")


def g_attr_out_of_range():
    g = GraphBuilder("bad")
    g.input("x", "f32", [2, 3])
    g.node("softmax", ["x"], "y", name="axis_node", axis=5)
    g.output("y")
    return g, ("axis_node", "axis")


def g_shape_mismatch():
    g = GraphBuilder("bad")
    g.input("x", "f32", [2, 3])
    g.init("w", np.ones((4, 5), np.float32))
    g.node("matmul", ["x", "w"], "y", name="mm_mismatch")
    g.output("y")
    return g, ("mm_mismatch",)


def g_dtype_mismatch():
    g = GraphBuilder("bad")
    g.input("x", "f32", [2, 3])
    g.init("i", np.ones((2, 3), np.int32))
    g.node("add", ["x", "i"], "y", name="mixed_add")
    g.output("y")
    return g, ("mixed_add",)


def g_no_graph():
    return None, ("graph",)


BAD_GRAPHS = {f.__name__[2:]: f for f in (g_unknown_op, g_cycle, g_dangling, g_unknown_attr,
                                          g_attr_wrong_type, g_attr_out_of_range,
                                          g_shape_mismatch, g_dtype_mismatch, g_no_graph)}


@pytest.mark.parametrize("case", sorted(BAD_GRAPHS))
def test_invalid_graph(d, case):
    g, needles = BAD_GRAPHS[case]()
    c = d.client()
    before = len(c.list_all(labels={"case": case})[0])
    h.expect_rpc_error(lambda: c.submit(g, X23, labels={"case": case}), INVALID, *needles,
                       daemon=d, what=f"Submit({case})")
    # refused before acknowledging: nothing journaled
    assert len(c.list_all(labels={"case": case})[0]) == before


# ------------------------------------------------------------------------------------------
# Wrong inputs
# ------------------------------------------------------------------------------------------

def two_input_graph():
    g = GraphBuilder("inputs")
    g.input("alpha", "f32", [2, 3])
    g.input("beta_in", "i32", [-1, 3])
    c = g.node("cast", ["beta_in"], "bf", name="cast_beta", to="f32")
    g.node("add", ["alpha", c], "y", name="sum")
    g.output("y")
    return g


A23 = np.ones((2, 3), np.float32)
B23 = np.ones((2, 3), np.int32)

BAD_INPUTS = {
    # case: (feeds, what the message must name)
    "unknown_name": ({"alpha": A23, "beta_in": B23, "gamma": A23}, ("gamma",)),
    "missing": ({"alpha": A23}, ("beta_in",)),
    "misnamed": ({"alpha": A23, "beta": B23}, ("beta",)),
    "wrong_shape": ({"alpha": np.ones((3, 2), np.float32), "beta_in": B23}, ("alpha",)),
    "wrong_rank": ({"alpha": A23, "beta_in": np.ones((2, 3, 1), np.int32)}, ("beta_in",)),
    "wrong_dtype": ({"alpha": A23.astype(np.float16), "beta_in": B23},
                    ("alpha", ("f16", "f32", "dtype"))),
    "wrong_dtype_int": ({"alpha": A23, "beta_in": B23.astype(np.int64)},
                        ("beta_in", ("i64", "i32", "dtype"))),
    "data_size": ({"alpha": h.graph_pb2.Tensor(dtype=h.graph_pb2.DATA_TYPE_F32, dims=[2, 3],
                                               data=b"\0" * 23),
                   "beta_in": B23}, ("alpha",)),
    "duplicate": ({"alpha": A23, "beta_in": B23}, ("alpha",)),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_wrong_inputs(d, case):
    feeds, needles = BAD_INPUTS[case]
    req = h.submit_request(two_input_graph(), feeds)
    if case == "duplicate":
        req.inputs.append(req.inputs[0])
    h.expect_rpc_error(lambda: d.client().jobs.Submit(req, timeout=h.RPC_TIMEOUT), INVALID,
                       *needles, daemon=d, what=f"Submit(inputs: {case})")


# ------------------------------------------------------------------------------------------
# Limits
# ------------------------------------------------------------------------------------------

def test_input_over_max_tensor_bytes(d):
    g = GraphBuilder("big_in")
    g.input("big_x", "f32", [-1, 256])
    g.node("relu", ["big_x"], "y", name="r")
    g.output("y")
    x = np.ones((128, 256), np.float32)  # 128 KiB > 64 KiB, < 1 MiB message
    h.expect_rpc_error(lambda: d.client().submit(g, {"big_x": x}), EXHAUSTED, "big_x",
                       daemon=d, what="input over jobs.max_tensor_bytes")


def test_initializer_over_max_tensor_bytes(d):
    g = GraphBuilder("big_init")
    g.input("x", "f32", [2, 256])
    g.init("big_w", np.ones((256, 128), np.float32))
    g.node("matmul", ["x", "big_w"], "y", name="mm")
    g.output("y")
    h.expect_rpc_error(lambda: d.client().submit(g, {"x": np.ones((2, 256), np.float32)}),
                       EXHAUSTED, "big_w", daemon=d, what="initializer over max_tensor_bytes")


def test_intermediate_over_max_tensor_bytes(d):
    g = GraphBuilder("big_mid")
    g.input("x", "f32", [1, 8])
    e = g.node("expand", ["x"], "wide", name="blow_up", shape=[4096, 8])  # 128 KiB
    g.node("reduce_sum", [e], "y", name="sum")
    g.output("y")
    h.expect_rpc_error(lambda: d.client().submit(g, {"x": np.ones((1, 8), np.float32)}),
                       EXHAUSTED, ("blow_up", "wide"), daemon=d,
                       what="intermediate over max_tensor_bytes")


def test_graph_over_max_nodes(d):
    g = GraphBuilder("many_nodes")
    g.input("x", "f32", [2])
    v = "x"
    for i in range(MAX_NODES + 1):
        v = g.node("neg", [v], f"v{i}", name=f"n{i}")
    g.output(v)
    h.expect_rpc_error(lambda: d.client().submit(g, {"x": np.ones(2, np.float32)}), EXHAUSTED,
                       "node", (str(MAX_NODES), str(MAX_NODES + 1)), daemon=d,
                       what="graph over max_graph_nodes")


def test_message_over_max_message_bytes(d):
    g = GraphBuilder("huge_msg")
    g.input("x", "f32", [-1])
    g.node("relu", ["x"], "y", name="r")
    g.output("y")
    x = np.ones(2 * MAX_MESSAGE // 4 + 100, np.float32)  # a 2 MiB message
    h.expect_rpc_error(lambda: d.client().submit(g, {"x": x}), EXHAUSTED,
                       ("larger than", "max", str(MAX_MESSAGE)), daemon=d,
                       what="message over server.max_message_bytes")


# ------------------------------------------------------------------------------------------
# Job ids, job states, List
# ------------------------------------------------------------------------------------------

UNKNOWN_ID = "j" + "0" * 12 + "0123456789abcdef"


@pytest.mark.parametrize("method", ["Get", "Wait", "Cancel", "GetOutputs"])
def test_unknown_job_id(d, method):
    c = d.client()
    call = {
        "Get": lambda i: c.get(i),
        "Wait": lambda i: c.jobs.Wait(jobs_pb2.WaitJobRequest(job_id=i),
                                      timeout=h.RPC_TIMEOUT),
        "Cancel": lambda i: c.cancel(i),
        "GetOutputs": lambda i: c.outputs(i),
    }[method]
    h.expect_rpc_error(lambda: call(UNKNOWN_ID), NOT_FOUND, UNKNOWN_ID, daemon=d,
                       what=f"{method}(unknown id)")
    # not even id-shaped: unknown as well (or refused as invalid), naming it
    try:
        r = call("no-such-job")
        if method == "Wait":
            list(r)
        raise AssertionError(f"{method}('no-such-job') succeeded")
    except grpc.RpcError as e:
        assert e.code() in (NOT_FOUND, INVALID), f"{method}('no-such-job'): {e.code()}"
        assert "no-such-job" in (e.details() or ""), e.details()


def test_get_outputs_of_failed_job(d):
    """A job that fails at run time (gather index out of range): FAILED with a reason naming
    the node; GetOutputs answers FAILED_PRECONDITION."""
    g = GraphBuilder("fails")
    g.input("idx", "i64", [3])
    g.init("table", np.arange(20, dtype=np.float32).reshape(5, 4))
    g.node("gather", ["table", "idx"], "y", name="lookup_node", axis=0)
    g.output("y")
    c = d.client()
    jid = c.submit_id(g, {"idx": np.array([0, 1, 99], np.int64)})
    job = c.wait(jid)
    assert job.state == h.FAILED, f"{state_name(job.state)} {job.reason!r}"
    assert "lookup_node" in job.reason and "99" in job.reason, job.reason
    assert job.failure_code == "INTERNAL", job.failure_code
    h.expect_rpc_error(lambda: c.outputs(jid), PRECONDITION, (jid, "failed", "succeeded"),
                       daemon=d, what="GetOutputs of a failed job")


@pytest.mark.parametrize("page_size", [-1, -1000, 1001, 2**31 - 1])
def test_bad_page_size(d, page_size):
    h.expect_rpc_error(lambda: d.client().list(page_size=page_size), INVALID,
                       ("page_size", "page size"), daemon=d, what=f"List(page_size={page_size})")
