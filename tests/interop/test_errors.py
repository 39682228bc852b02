"""
rtxrun on bad input: every case must end with the documented exit status and an
"rtxrun: <message>" on stderr that names the problem (the node, the input, the attribute, the
dtype), and never hang, die by a signal or trip a sanitizer (rtxgraph.rtxrun_raw checks
those on every run).

Exit statuses (tools/rtxrun): 1 execution, 2 usage, 3 graph load/validation/planning,
4 input file/binding.
"""

import re
import struct

import numpy as np
import pytest

import rtxgraph as rg
from rtxgraph import Attr, GraphBuilder

EXEC, USAGE, GRAPH, INPUT = 1, 2, 3, 4


def expect(r, rc, *needles):
    assert r.rc == rc, f"expected exit {rc}\n{r.describe()}"
    assert r.stderr.startswith("rtxrun: ") or "\nrtxrun: " in r.stderr, \
        f"stderr lacks 'rtxrun: <message>'\n{r.describe()}"
    for n in needles:
        if isinstance(n, tuple):  # any of
            assert any(x.lower() in r.stderr.lower() for x in n), \
                f"stderr names none of {n}\n{r.describe()}"
        else:
            assert n.lower() in r.stderr.lower(), f"stderr does not name {n!r}\n{r.describe()}"


def run_bytes(tmp_path, data, feeds=None, extra=()):
    gp = tmp_path / "g.rtxg"
    gp.write_bytes(data)
    args = [gp] + rg.write_inputs(feeds or {}, tmp_path) + ["--json"] + list(extra)
    return rg.rtxrun_raw(args)


def run_g(tmp_path, g, feeds=None, extra=()):
    return run_bytes(tmp_path, g.bytes(), feeds, extra)


def simple_graph(shape=(2, 3), dt="f32"):
    g = GraphBuilder("simple")
    g.input("x", dt, list(shape))
    g.node("relu", ["x"], "y", name="the_relu")
    g.output("y")
    return g


def big_graph():
    g = GraphBuilder("big")
    g.input("x", "f32", [4, 256])
    g.init("w", np.arange(256 * 8, dtype=np.float32).reshape(256, 8) / 100)
    g.node("matmul", ["x", "w"], "y", name="mm")
    g.output("y")
    return g


X23 = {"x": np.ones((2, 3), np.float32)}

# ------------------------------------------------------------------------------------------
# Graph files that cannot be read
# ------------------------------------------------------------------------------------------


def test_garbage_graph(tmp_path):
    data = np.random.default_rng(1).integers(0, 256, 4096).astype(np.uint8).tobytes()
    expect(run_bytes(tmp_path, b"\xff\xff\xff\xff" + data), GRAPH)


def test_text_file_as_graph(tmp_path):
    expect(run_bytes(tmp_path, b"this is not a protobuf graph\n" * 10), GRAPH)


def test_truncated_graph(tmp_path):
    data = big_graph().bytes()
    # the cut lands inside the initializer's data bytes (a length-delimited field that now
    # claims more bytes than the file has)
    expect(run_bytes(tmp_path, data[:len(data) // 2], {"x": np.ones((4, 256), np.float32)}),
           GRAPH)


@pytest.mark.parametrize("cut", [1, 7, 33, 101, -3])
def test_truncated_graph_never_crashes(tmp_path, cut):
    data = big_graph().bytes()
    r = run_bytes(tmp_path, data[:cut], {"x": np.ones((4, 256), np.float32)})
    assert r.rc in (GRAPH, INPUT), r.describe()


def test_missing_graph_file(tmp_path):
    r = rg.rtxrun_raw([tmp_path / "nope.rtxg", "--random-inputs"])
    expect(r, GRAPH, "nope.rtxg")


def test_graph_is_a_directory(tmp_path):
    r = rg.rtxrun_raw([tmp_path, "--random-inputs"])
    assert r.rc == GRAPH, r.describe()


@pytest.mark.parametrize("seed", range(12))
def test_mutated_graph_never_crashes(tmp_path, seed):
    """Random byte flips of a valid graph: any documented outcome, never a crash."""
    g = GraphBuilder("fuzz")
    g.input("x", "f32", [2, 4])
    g.init("w", np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3))
    g.init("b", np.zeros(3, np.float32))
    g.node("gemm", ["x", "w", "b"], "h", name="fc", alpha=1.0, trans_b=0)
    g.node("softmax", ["h"], "p", name="sm", axis=-1)
    g.node("reshape", ["p"], "y", name="rs", shape=[-1])
    g.output("y")
    data = bytearray(g.bytes())
    rng = np.random.default_rng(seed)
    for pos in rng.integers(0, len(data), size=1 + seed % 4):
        data[pos] = int(rng.integers(0, 256))
    r = run_bytes(tmp_path, bytes(data), {"x": np.ones((2, 4), np.float32)})
    assert r.rc in (0, EXEC, GRAPH, INPUT), r.describe()
    if r.rc:
        assert "rtxrun: " in r.stderr, r.describe()


# ------------------------------------------------------------------------------------------
# Graphs that decode but are invalid
# ------------------------------------------------------------------------------------------


def test_unknown_op(tmp_path):
    g = GraphBuilder()
    g.input("x", "f32", [2, 3])
    g.node("frobnicate", ["x"], "y", name="node_frob")
    g.output("y")
    expect(run_g(tmp_path, g, X23), GRAPH, "frobnicate")


def test_cycle(tmp_path):
    g = GraphBuilder()
    g.input("x", "f32", [2, 3])
    g.node("add", ["x", "t2"], "t1", name="cyc_add")
    g.node("relu", ["t1"], "t2", name="cyc_relu")
    g.node("neg", ["t2"], "y", name="after")
    g.output("y")
    expect(run_g(tmp_path, g, X23), GRAPH, "cycle", ("cyc_add", "cyc_relu"))


def test_self_loop(tmp_path):
    g = GraphBuilder()
    g.input("x", "f32", [2, 3])
    g.node("add", ["x", "t"], "t", name="loop_add")
    g.output("t")
    expect(run_g(tmp_path, g, X23), GRAPH, "loop_add")


def test_dangling_input(tmp_path):
    g = GraphBuilder()
    g.input("x", "f32", [2, 3])
    g.node("add", ["x", "nowhere_value"], "y", name="dangler")
    g.output("y")
    expect(run_g(tmp_path, g, X23), GRAPH, "dangler", "nowhere_value")


def test_output_never_produced(tmp_path):
    g = simple_graph()
    g.output("ghost_output")
    expect(run_g(tmp_path, g, X23), GRAPH, "ghost_output")


def test_duplicate_producer(tmp_path):
    g = GraphBuilder()
    g.input("x", "f32", [2, 3])
    g.node("relu", ["x"], "y", name="first")
    g.node("neg", ["x"], "y", name="second")
    g.output("y")
    expect(run_g(tmp_path, g, X23), GRAPH, "y")


def test_node_overwrites_graph_input(tmp_path):
    g = GraphBuilder()
    g.input("x", "f32", [2, 3])
    g.node("relu", ["x"], "x", name="clobber")
    g.node("neg", ["x"], "y", name="n")
    g.output("y")
    expect(run_g(tmp_path, g, X23), GRAPH, ("clobber", "'x'", "x"))


@pytest.mark.parametrize("op,n_in", [("add", 1), ("add", 3), ("relu", 2), ("where", 2),
                                     ("gemm", 4), ("constant", 1), ("concat", 0)])
def test_wrong_arity(tmp_path, op, n_in):
    g = GraphBuilder()
    g.input("x", "f32", [2, 3])
    attrs = {"axis": 0} if op == "concat" else {}
    if op == "constant":
        attrs = {"value": np.ones(2, np.float32)}
    g.node(op, ["x"] * n_in, "y", name="bad_arity_node", **attrs)
    g.output("y")
    expect(run_g(tmp_path, g, X23), GRAPH, "bad_arity_node")


def test_required_input_omitted(tmp_path):
    g = GraphBuilder()
    g.input("x", "f32", [2, 3])
    g.node("matmul", ["", "x"], "y", name="no_a")
    g.output("y")
    expect(run_g(tmp_path, g, X23), GRAPH, "no_a")


@pytest.mark.parametrize("op,attr,value", [
    ("softmax", "axis", Attr("f", 1.0)),
    ("reshape", "shape", Attr("i", 6)),
    ("cast", "to", Attr("i", 1)),
    ("transpose", "perm", Attr("floats", [1.0, 0.0])),
    ("gelu", "approximate", Attr("i", 1)),
    ("reduce_sum", "keepdims", Attr("s", "yes")),
])
def test_bad_attribute_type(tmp_path, op, attr, value):
    g = GraphBuilder()
    g.input("x", "f32", [2, 3])
    g.node(op, ["x"], "y", name="typed_node", **{attr: value})
    g.output("y")
    expect(run_g(tmp_path, g, X23), GRAPH, "typed_node", attr)


def test_unknown_attribute(tmp_path):
    g = GraphBuilder()
    g.input("x", "f32", [2, 3])
    g.node("relu", ["x"], "y", name="extra_attr", slope=0.1)
    g.output("y")
    expect(run_g(tmp_path, g, X23), GRAPH, "extra_attr", "slope")


def test_avg_pool_has_no_dilations(tmp_path):
    g = GraphBuilder()
    g.input("x", "f32", [1, 1, 4, 4])
    g.node("avg_pool2d", ["x"], "y", name="avg", kernel_shape=[2, 2], dilations=[2, 2])
    g.output("y")
    expect(run_g(tmp_path, g, {"x": np.ones((1, 1, 4, 4), np.float32)}), GRAPH, "avg",
           "dilations")


@pytest.mark.parametrize("op,attr", [("reshape", "shape"), ("cast", "to"),
                                     ("max_pool2d", "kernel_shape"), ("concat", "axis"),
                                     ("slice", "starts")])
def test_missing_required_attribute(tmp_path, op, attr):
    g = GraphBuilder()
    g.input("x", "f32", [1, 1, 4, 4])
    attrs = {"ends": [1]} if op == "slice" else {}
    g.node(op, ["x"], "y", name="needs_attr", **attrs)
    g.output("y")
    expect(run_g(tmp_path, g, {"x": np.ones((1, 1, 4, 4), np.float32)}), GRAPH,
           "needs_attr", attr)


@pytest.mark.parametrize("desc,build", [
    ("add-f32-i32", lambda g: g.node("add", ["x", "i"], "y", name="mixed")),
    ("matmul-f32-f16", lambda g: g.node("matmul", ["x", "h"], "y", name="mixed")),
    ("sqrt-i32", lambda g: g.node("sqrt", ["i"], "y", name="mixed")),
    ("relu-u8", lambda g: g.node("relu", ["u"], "y", name="mixed")),
    ("add-bool", lambda g: g.node("add", ["b", "b"], "y", name="mixed")),
    ("reduce_mean-i32", lambda g: g.node("reduce_mean", ["i"], "y", name="mixed")),
    ("where-cond-f32", lambda g: g.node("where", ["x", "x", "x"], "y", name="mixed")),
    ("gather-f32-indices", lambda g: g.node("gather", ["x", "x"], "y", name="mixed")),
    ("matmul-i32", lambda g: g.node("matmul", ["i", "i2"], "y", name="mixed")),
    ("cast-to-f64", lambda g: g.node("cast", ["x"], "y", name="mixed", to="f64")),
    ("attention-mask-i32", lambda g: g.node("attention", ["x", "x", "x", "i"], "y",
                                            name="mixed")),
])
def test_dtype_mismatch(tmp_path, desc, build):
    g = GraphBuilder()
    g.input("x", "f32", [3, 3])
    g.input("h", "f16", [3, 3])
    g.input("i", "i32", [3, 3])
    g.input("i2", "i32", [3, 3])
    g.input("u", "u8", [3, 3])
    g.input("b", "bool", [3, 3])
    build(g)
    g.output("y")
    feeds = {"x": np.ones((3, 3), np.float32), "h": np.ones((3, 3), np.float16),
             "i": np.ones((3, 3), np.int32), "i2": np.ones((3, 3), np.int32),
             "u": np.ones((3, 3), np.uint8), "b": np.ones((3, 3), bool)}
    expect(run_g(tmp_path, g, feeds), GRAPH, "mixed")


@pytest.mark.parametrize("desc,sa,sb,op,attrs", [
    ("add", [2, 3], [4, 3], "add", {}),
    ("add-bcast", [2, 3], [2, 2], "mul", {}),
    ("matmul-inner", [2, 3], [4, 5], "matmul", {}),
    ("matmul-batch", [2, 2, 3], [3, 3, 4], "matmul", {}),
    ("gemm-inner", [2, 3], [2, 3], "gemm", {}),
    ("concat", [2, 3], [3, 4], "concat", {"axis": 0}),
    ("concat-rank", [2, 3], [2, 3, 1], "concat", {"axis": 0}),
    ("where", [2, 3], [3, 2], "where", {}),
])
def test_shape_mismatch(tmp_path, desc, sa, sb, op, attrs):
    g = GraphBuilder()
    g.input("a", "f32", sa)
    g.input("b", "f32", sb)
    ins = ["a", "b"]
    if op == "where":
        g.input("c", "bool", sa)
        ins = ["c", "a", "b"]
    g.node(op, ins, "y", name="shapes_node", **attrs)
    g.output("y")
    feeds = {"a": np.ones(sa, np.float32), "b": np.ones(sb, np.float32)}
    if op == "where":
        feeds["c"] = np.ones(sa, bool)
    r = run_g(tmp_path, g, feeds)
    expect(r, GRAPH, "shapes_node")
    # the message may show shapes with their dtypes: only dtypes of this graph can appear
    shown = set(re.findall(r"\b(f32|f16|bf16|i8|i32|i64|u8|bool)\[", r.stderr))
    assert shown <= {"f32", "bool"}, f"message shows dtypes {shown} not in the graph\n" + \
        r.describe()


def test_shape_mismatch_found_at_planning(tmp_path):
    """Dims of -1 leave the mismatch to planning, which still names the node (exit 3)."""
    g = GraphBuilder()
    g.input("a", "f32", [-1, 3])
    g.input("b", "f32", [-1, 3])
    g.node("add", ["a", "b"], "y", name="late_add")
    g.output("y")
    r = run_g(tmp_path, g, {"a": np.ones((2, 3), np.float32), "b": np.ones((5, 3), np.float32)})
    expect(r, GRAPH, "late_add")


@pytest.mark.parametrize("desc,shape,op,attrs", [
    ("softmax-axis", [2, 3], "softmax", {"axis": 2}),
    ("concat-axis", [2, 3], "concat", {"axis": -3}),
    ("reduce-axes", [2, 3], "reduce_sum", {"axes": [0, 5]}),
    ("reduce-repeat", [2, 3], "reduce_sum", {"axes": [1, -1]}),
    ("perm-not-permutation", [2, 3], "transpose", {"perm": [0, 0]}),
    ("perm-length", [2, 3], "transpose", {"perm": [1, 0, 2]}),
    ("reshape-count", [2, 3], "reshape", {"shape": [4, 2]}),
    ("reshape-two-minus1", [2, 3], "reshape", {"shape": [-1, -1]}),
    ("expand-incompatible", [2, 3], "expand", {"shape": [4, 3]}),
    ("slice-zero-step", [2, 3], "slice", {"starts": [0], "ends": [1], "steps": [0]}),
    ("slice-lengths", [2, 3], "slice", {"starts": [0, 0], "ends": [1]}),
    ("slice-repeated-axis", [2, 3], "slice", {"starts": [0, 0], "ends": [1, 1],
                                              "axes": [1, -1]}),
    ("gather-axis", [2, 3], "gather", {"axis": 2}),
    ("argmax-axis", [2, 3], "argmax", {"axis": -3}),
    ("layer_norm-axis", [2, 3], "layer_norm", {"axis": 2}),
    ("cast-to", [2, 3], "cast", {"to": "float128"}),
    ("gelu-approximate", [2, 3], "gelu", {"approximate": "fast"}),
    ("conv-groups", [1, 3, 5, 5], "conv2d", {"groups": 2}),
    ("conv-empty-output", [1, 2, 2, 2], "conv2d", {}),
    ("pool-kernel-size", [1, 1, 4, 4], "max_pool2d", {"kernel_shape": [2]}),
    ("pool-pad-over-half", [1, 1, 8, 8], "max_pool2d", {"kernel_shape": [2, 2],
                                                        "pads": [2, 2, 2, 2]}),
    ("pool-empty-output", [1, 1, 2, 2], "avg_pool2d", {"kernel_shape": [3, 3]}),
    ("reduce_max-empty-dim", [3, 0], "reduce_max", {"axes": [1]}),
])
def test_bad_attribute_value(tmp_path, desc, shape, op, attrs):
    g = GraphBuilder()
    g.input("x", "f32", shape)
    ins = ["x"]
    if op == "gather":
        g.init("idx", np.zeros(2, np.int64))
        ins = ["x", "idx"]
    if op == "conv2d":
        wshape = [4, 2, 3, 3] if desc == "conv-groups" else [1, 2, 3, 3]
        g.init("w", np.ones(wshape, np.float32))
        ins = ["x", "w"]
    g.node(op, ins, "y", name="attr_value_node", **attrs)
    g.output("y")
    expect(run_g(tmp_path, g, {"x": np.ones(shape, np.float32)}), GRAPH, "attr_value_node")


def test_initializer_size_mismatch(tmp_path):
    g = simple_graph()
    t = g.g.initializers.add()
    t.name, t.dtype = "short_weights", rg.DT_ENUM["f32"]
    t.dims.extend([4, 4])
    t.data = b"\0" * 60  # 64 needed
    g.node("neg", ["short_weights"], "z", name="uses_it")
    g.output("z")
    expect(run_g(tmp_path, g, X23), GRAPH, "short_weights")


@pytest.mark.parametrize("where_", ["input", "initializer"])
def test_bad_dtype_enum(tmp_path, where_):
    g = GraphBuilder()
    if where_ == "input":
        g.input("odd_input", 99, [2])
        g.node("neg", ["odd_input"], "y", name="n")
        feeds = {"odd_input": np.ones(2, np.float32)}
        needle = "odd_input"
    else:
        t = g.g.initializers.add()
        t.name, t.dtype = "odd_init", 42
        t.dims.append(2)
        t.data = b"\0" * 8
        g.node("neg", ["odd_init"], "y", name="n")
        feeds = {}
        needle = "odd_init"
    g.output("y")
    expect(run_g(tmp_path, g, feeds), GRAPH, needle)


def test_too_many_dims(tmp_path):
    g = GraphBuilder()
    g.input("x", "f32", [1] * 9)
    g.node("relu", ["x"], "y", name="r")
    g.output("y")
    r = run_g(tmp_path, g, {"x": np.ones([1] * 9, np.float32)})
    assert r.rc in (GRAPH, INPUT), r.describe()
    expect(r, r.rc, "x")


def test_huge_declared_tensor(tmp_path):
    """An initializer claiming 2^40 elements must fail cleanly, not try to allocate."""
    g = simple_graph()
    t = g.g.initializers.add()
    t.name, t.dtype = "huge", rg.DT_ENUM["f32"]
    t.dims.extend([1 << 20, 1 << 20])
    t.data = b"\0" * 16
    g.node("neg", ["huge"], "z", name="uses_huge")
    g.output("z")
    expect(run_g(tmp_path, g, X23), GRAPH, "huge")


def test_expand_to_huge_shape(tmp_path):
    """Inference yields 2^44 elements: a limit error at planning, not an allocation."""
    g = GraphBuilder()
    g.input("x", "f32", [1])
    g.node("expand", ["x"], "y", name="too_big", shape=[1 << 22, 1 << 22])
    g.output("y")
    expect(run_g(tmp_path, g, {"x": np.ones(1, np.float32)}), GRAPH, "too_big")


# ------------------------------------------------------------------------------------------
# Inputs
# ------------------------------------------------------------------------------------------


def test_wrong_input_dtype(tmp_path):
    expect(run_g(tmp_path, simple_graph(), {"x": np.ones((2, 3), np.int32)}), INPUT, "x",
           ("f32", "i32"))


def test_wrong_input_rank(tmp_path):
    expect(run_g(tmp_path, simple_graph(), {"x": np.ones((2, 3, 1), np.float32)}), INPUT, "x")


def test_wrong_input_dim(tmp_path):
    g = GraphBuilder()
    g.input("the_input", "f32", [-1, 3])
    g.node("relu", ["the_input"], "y", name="r")
    g.output("y")
    expect(run_g(tmp_path, g, {"the_input": np.ones((2, 4), np.float32)}), INPUT, "the_input")


def test_scalar_input_given_vector(tmp_path):
    g = GraphBuilder()
    g.input("s", "f32", [])
    g.node("neg", ["s"], "y", name="n")
    g.output("y")
    expect(run_g(tmp_path, g, {"s": np.ones((1,), np.float32)}), INPUT, "s")


def test_missing_input_file(tmp_path):
    gp = simple_graph().save(tmp_path / "g.rtxg")
    r = rg.rtxrun_raw([gp, "--input", f"x={tmp_path / 'absent.npy'}"])
    expect(r, INPUT, "absent.npy")


def test_input_not_given(tmp_path):
    gp = simple_graph().save(tmp_path / "g.rtxg")
    expect(rg.rtxrun_raw([gp]), INPUT, "x")


def test_unknown_input_name(tmp_path):
    gp = simple_graph().save(tmp_path / "g.rtxg")
    np.save(tmp_path / "x.npy", np.ones((2, 3), np.float32))
    r = rg.rtxrun_raw([gp, "--input", f"x={tmp_path / 'x.npy'}",
                       "--input", f"not_an_input={tmp_path / 'x.npy'}"])
    expect(r, INPUT, "not_an_input")


def test_float64_npy(tmp_path):
    r = run_g(tmp_path, simple_graph(), {"x": np.ones((2, 3), np.float64)})
    expect(r, INPUT, ("<f8", "float64", "f8"))


@pytest.mark.parametrize("dtype", [">f4", "<c8", "<u2", "<U3", "O"])
def test_unsupported_npy_dtype(tmp_path, dtype):
    p = tmp_path / "x.npy"
    a = np.ones((2, 3), dtype=dtype) if dtype not in ("<U3", "O") else \
        np.array([["a"] * 3] * 2, dtype=dtype)
    np.save(p, a, allow_pickle=True)
    gp = simple_graph().save(tmp_path / "g.rtxg")
    expect(rg.rtxrun_raw([gp, "--input", f"x={p}"]), INPUT)


def _npy_bytes(a):
    import io
    b = io.BytesIO()
    np.save(b, a)
    return b.getvalue()


@pytest.mark.parametrize("kind", ["bad-magic", "truncated-data", "truncated-header",
                                  "header-garbage", "header-len-huge", "shape-negative",
                                  "empty-file", "extra-bytes"])
def test_corrupted_npy(tmp_path, kind):
    good = _npy_bytes(np.ones((2, 3), np.float32))
    hlen = struct.unpack("<H", good[8:10])[0]
    if kind == "bad-magic":
        data = b"\x93NUMPZ" + good[6:]
    elif kind == "truncated-data":
        data = good[:-5]
    elif kind == "truncated-header":
        data = good[:20]
    elif kind == "header-garbage":
        data = good[:10] + b"{'descr': '<f4', 'fortran_order': Fals, 'shape': (2, 3)}".ljust(
            hlen - 1) + b"\n" + good[10 + hlen:]
    elif kind == "header-len-huge":
        data = good[:8] + struct.pack("<H", 0xFFFF) + good[10:]
    elif kind == "shape-negative":
        data = good[:10] + b"{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 3), }".ljust(
            hlen - 1) + b"\n" + good[10 + hlen:]
    elif kind == "extra-bytes":
        data = good + b"\0" * 12
    else:
        data = b""
    p = tmp_path / "bad.npy"
    p.write_bytes(data)
    gp = simple_graph().save(tmp_path / "g.rtxg")
    r = rg.rtxrun_raw([gp, "--input", f"x={p}"])
    if kind == "extra-bytes":  # trailing bytes: rejected, or ignored - never a crash
        assert r.rc in (0, INPUT), r.describe()
        return
    expect(r, INPUT, ("bad.npy", "'x'", "x"))


@pytest.mark.parametrize("seed", range(8))
def test_mutated_npy_never_crashes(tmp_path, seed):
    data = bytearray(_npy_bytes(np.arange(6, dtype=np.float32).reshape(2, 3)))
    rng = np.random.default_rng(100 + seed)
    for pos in rng.integers(0, 80, size=2):
        data[pos] = int(rng.integers(0, 256))
    p = tmp_path / "m.npy"
    p.write_bytes(bytes(data))
    gp = simple_graph().save(tmp_path / "g.rtxg")
    r = rg.rtxrun_raw([gp, "--input", f"x={p}"])
    assert r.rc in (0, INPUT), r.describe()


def test_npy_variants_accepted(tmp_path):
    """Fortran order and format 2.0 headers load as the same values (docs: C or F order,
    format 1.0-3.0)."""
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 10
    g = GraphBuilder()
    g.input("x", "f32", [2, 3, 4])
    g.node("relu", ["x"], "y", name="r")
    g.output("y")
    gp = g.save(tmp_path / "g.rtxg")
    pf = tmp_path / "f.npy"
    np.save(pf, np.asfortranarray(a))
    assert b"'fortran_order': True" in pf.read_bytes()[:128]
    p2 = tmp_path / "v2.npy"
    with open(p2, "wb") as f:
        np.lib.format.write_array(f, a, version=(2, 0))
    for p in (pf, p2):
        out = tmp_path / f"out_{p.stem}"
        r = rg.rtxrun_raw([gp, "--input", f"x={p}", "--output-dir", out, "--json"])
        assert r.rc == 0, r.describe()
        rg.assert_equal(np.load(out / "y.npy"), np.maximum(a, 0), p.name)


# ------------------------------------------------------------------------------------------
# Command line
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [[], ["--bogus-flag"], ["G", "--input", "x"],
                                  ["G", "--input", "=f.npy"], ["G", "--repeat", "abc"],
                                  ["G", "--repeat", "-1"], ["G", "--threads", "-2"],
                                  ["G", "--seed"], ["G", "G"], ["G", "--warmup", "1x"]],
                         ids=lambda a: "_".join(a).replace("-", "") or "no-args")
def test_usage_errors(tmp_path, args):
    gp = simple_graph().save(tmp_path / "g.rtxg")
    r = rg.rtxrun_raw([str(gp) if a == "G" else a for a in args])
    expect(r, USAGE)


def test_help(tmp_path):
    r = rg.rtxrun_raw(["--help"])
    assert r.rc == 0 and "usage" in (r.stdout + r.stderr).lower(), r.describe()


# ------------------------------------------------------------------------------------------
# Execution errors
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [5, -6, 1 << 40])
def test_gather_index_out_of_range(tmp_path, bad):
    g = GraphBuilder()
    g.input("data", "f32", [5, 2])
    g.input("idx", "i64", [3])
    g.node("gather", ["data", "idx"], "y", name="lookup_node")
    g.output("y")
    r = run_g(tmp_path, g, {"data": np.ones((5, 2), np.float32),
                            "idx": np.array([0, bad, 1], np.int64)})
    expect(r, EXEC, "lookup_node", str(bad), "5")


def test_gather_index_out_of_range_i32_initializer(tmp_path):
    g = GraphBuilder()
    g.input("data", "f32", [4, 3])
    g.init("idx", np.array([[0, 1], [2, 7]], np.int32))
    g.node("gather", ["data", "idx"], "y", name="emb_lookup", axis=0)
    g.output("y")
    r = run_g(tmp_path, g, {"data": np.ones((4, 3), np.float32)})
    expect(r, EXEC, "emb_lookup", "7", "4")


def test_random_inputs_run(tmp_path):
    """--random-inputs binds every input (dims of -1 become 1) and runs."""
    g = GraphBuilder()
    g.input("x", "f32", [-1, 3])
    g.input("i", "i64", [2])
    g.input("c", "bool", [1, 3])
    g.init("tbl", np.arange(20, dtype=np.float32).reshape(10, 2))
    g.node("where", ["c", "x", "x"], "w", name="w")
    g.node("gather", ["tbl", "i"], "e", name="e")  # random integers are in [0, 10)
    g.output("w")
    g.output("e")
    gp = g.save(tmp_path / "g.rtxg")
    import json
    r = rg.rtxrun_raw([gp, "--random-inputs", "--seed", "7", "--json", "--output-dir",
                       tmp_path / "o"])
    assert r.rc == 0, r.describe()
    j = json.loads(r.stdout)
    assert [o["name"] for o in j["outputs"]] == ["w", "e"]
    assert j["outputs"][0]["shape"] == [1, 3] and j["outputs"][1]["shape"] == [2, 2]
