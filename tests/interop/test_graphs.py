"""
Multi-node graphs: what single-op cases cannot reach - the planner's buffer reuse (values whose
memory is recycled while others stay live, outputs that later nodes still read), topological
ordering of nodes stored out of order, mixed dtypes of odd byte sizes side by side in one
arena, and repeated runs over the same plan. Reference: the NumPy interpreter (rtxgraph.py).
"""

import numpy as np
import pytest

import rtxgraph as rg
from rtxgraph import GraphBuilder


def run_and_compare(g, feeds, tmp_path, rtol=1e-5, atol=1e-6, extra=(), ref_graph=None):
    ref = rg.evaluate(ref_graph or g, feeds)
    res = rg.run_graph(g, feeds, tmp_path, extra=list(extra))
    names = [o.name for o in (ref_graph or g).g.outputs]
    assert [o["name"] for o in res.json["outputs"]] == names
    for o in res.json["outputs"]:
        want = ref[o["name"]]
        got = res.outputs[o["name"]]
        assert o["dtype"] == want.dt and o["shape"] == list(want.a.shape), (o, want)
        if want.dt in rg.FLOATS:
            rg.assert_close(got, want.a, rtol, atol * max(1.0, float(np.nanmax(np.abs(
                rg.f64(want)))) if want.a.size else 1.0), o["name"])
        else:
            rg.assert_equal(got, want.a, o["name"])
    return res


EW_UNARY = ["neg", "tanh", "relu", "abs", "sigmoid"]
EW_BINARY = ["add", "sub", "mul"]


def random_dag(seed, n_nodes=40, shape=(5, 13)):
    """Elementwise DAG over same-shape values; inputs drawn from every earlier value (long
    lifetimes), some results consumed again much later, several outputs (some of which are
    read by later nodes too)."""
    rng = np.random.default_rng(seed)
    g = GraphBuilder(f"dag{seed}")
    g.input("x", "f32", [-1, shape[1]])
    g.input("x2", "f32", list(shape))
    g.init("w", rng.uniform(-1, 1, (1, shape[1])).astype(np.float32))
    vals = ["x", "x2", "w"]
    for i in range(n_nodes):
        if rng.random() < 0.4:
            op = EW_UNARY[rng.integers(len(EW_UNARY))]
            ins = [vals[rng.integers(len(vals))]]
        else:
            op = EW_BINARY[rng.integers(len(EW_BINARY))]
            ins = [vals[rng.integers(len(vals))], vals[rng.integers(len(vals))]]
        # keep magnitudes bounded: squash after every multiply
        out = g.node(op, ins, f"v{i}", name=f"n{i}")
        if op == "mul":
            out = g.node("tanh", [out], f"t{i}", name=f"sq{i}")
        vals.append(out)
    outs = sorted(set(rng.choice(vals[3:], size=4, replace=False)) | {vals[-1]})
    for o in outs:
        g.output(o)
    feeds = {"x": rng.uniform(-2, 2, shape).astype(np.float32),
             "x2": rng.uniform(-2, 2, shape).astype(np.float32)}
    return g, feeds


@pytest.mark.parametrize("seed", range(4))
def test_random_dag(seed, tmp_path):
    g, feeds = random_dag(seed)
    run_and_compare(g, feeds, tmp_path, extra=["--repeat", "2"])


@pytest.mark.parametrize("seed", range(3))
def test_nodes_stored_out_of_order(seed, tmp_path):
    """The plan orders nodes topologically; the file order must not matter."""
    g, feeds = random_dag(100 + seed, n_nodes=25)
    shuffled = GraphBuilder(g.g.name)
    shuffled.g.CopyFrom(g.g)
    nodes = list(g.g.nodes)
    perm = np.random.default_rng(seed).permutation(len(nodes))
    del shuffled.g.nodes[:]
    for i in perm:
        shuffled.g.nodes.add().CopyFrom(nodes[i])
    run_and_compare(shuffled, feeds, tmp_path, ref_graph=g)


def test_output_read_by_later_nodes(tmp_path):
    g = GraphBuilder()
    g.input("x", "f32", [4, 6])
    g.node("relu", ["x"], "a", name="a")
    g.node("neg", ["a"], "b", name="b")
    g.node("exp", ["b"], "c", name="c")
    g.node("add", ["a", "c"], "d", name="d")
    g.output("a")
    g.output("d")
    g.output("b")
    run_and_compare(g, {"x": np.linspace(-2, 2, 24, dtype=np.float32).reshape(4, 6)}, tmp_path)


def test_outputs_that_are_inputs_or_initializers(tmp_path):
    g = GraphBuilder()
    g.input("x", "f32", [3])
    g.init("w", np.array([1.0, 2.0, 3.0], np.float32))
    g.node("mul", ["x", "w"], "y", name="m")
    g.output("y")
    g.output("x")
    g.output("w")
    run_and_compare(g, {"x": np.array([4.0, 5.0, 6.0], np.float32)}, tmp_path)


def test_mixed_dtypes_odd_sizes(tmp_path):
    """1-, 2-, 4- and 8-byte values of odd element counts live side by side in the arena
    (alignment: the sanitizer build reports misaligned loads)."""
    g = GraphBuilder("mixed")
    g.input("x", "f32", [7, 5])
    g.node("greater", ["x", "zero"], "pos", name="pos")          # bool [7,5]
    g.init("zero", np.zeros((1,), np.float32))
    g.node("cast", ["x"], "xi8", name="to_i8", to="i8")          # i8
    g.node("cast", ["x"], "xh", name="to_f16", to="f16")         # f16
    g.node("cast", ["xi8"], "xl", name="to_i64", to="i64")       # i64
    g.node("cast", ["pos"], "pu", name="to_u8", to="u8")         # u8
    g.node("reduce_sum", ["pu"], "npos", name="count", axes=[1])  # u8 [7]
    g.node("argmax", ["xl"], "am", name="am", axis=1)            # i64 [7]
    g.node("gather", ["x", "am"], "rows", name="rows", axis=0)   # f32 [7,5]
    g.node("cast", ["xh"], "xb", name="to_bf16", to="bf16")      # bf16
    g.node("softmax", ["xb"], "sb", name="smb")                  # bf16
    g.node("cast", ["sb"], "sf", name="from_bf16", to="f32")
    g.node("where", ["pos", "xl", "xl2"], "wl", name="wl")       # i64
    g.node("neg", ["xl"], "xl2", name="negl")
    g.node("mul", ["xh", "xh"], "hh", name="hh")                 # f16
    g.node("concat", ["pu", "pu"], "pp", name="pp", axis=0)      # u8 [14,5]
    for o in ("npos", "am", "rows", "sf", "wl", "hh", "pp", "xi8"):
        g.output(o)
    # order the nodes topologically for the reference (rtxrun gets the same order)
    x = (np.random.default_rng(3).uniform(-40, 40, (7, 5))).astype(np.float32)
    ref_g = GraphBuilder("mixed")
    ref_g.g.CopyFrom(g.g)
    order = ["pos", "to_i8", "to_f16", "to_i64", "to_u8", "count", "am", "rows", "to_bf16",
             "smb", "from_bf16", "negl", "wl", "hh", "pp"]
    nodes = {n.name: n for n in g.g.nodes}
    del ref_g.g.nodes[:]
    for n in order:
        ref_g.g.nodes.add().CopyFrom(nodes[n])
    run_and_compare(g, {"x": x}, tmp_path, rtol=8e-3, atol=1e-3, ref_graph=ref_g,
                    extra=["--repeat", "2"])


def test_wide_fanout_and_concat(tmp_path):
    """One value read by many nodes, their results concatenated: many values live at once."""
    g = GraphBuilder()
    g.input("x", "f32", [2, 3, 4])
    parts = []
    for i in range(12):
        parts.append(g.node("slice", ["x"], f"s{i}", name=f"s{i}", starts=[i % 4],
                            ends=[i % 4 + 1], axes=[2]))
        parts[-1] = g.node(EW_UNARY[i % len(EW_UNARY)], [parts[-1]], f"u{i}", name=f"u{i}")
    g.node("concat", parts, "cat", name="cat", axis=-1)
    g.node("reduce_mean", ["cat"], "m", name="m", axes=[0], keepdims=1)
    g.node("sub", ["cat", "m"], "y", name="y")
    g.output("y")
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    run_and_compare(g, {"x": x}, tmp_path, extra=["--repeat", "3", "--warmup", "1"])


def test_embedding_mlp_pipeline(tmp_path):
    """gather (embedding) -> rms_norm -> matmul -> gelu -> reduce_mean -> log_softmax ->
    argmax, with weights as initializers and a run-time batch dimension."""
    rng = np.random.default_rng(7)
    g = GraphBuilder("emb")
    g.input("tok", "i64", [-1, 6])
    g.init("table", rng.standard_normal((50, 16)).astype(np.float32))
    g.init("scale", rng.uniform(0.5, 1.5, 16).astype(np.float32))
    g.init("w", (rng.standard_normal((16, 8)) / 4).astype(np.float32))
    g.node("gather", ["table", "tok"], "e", name="embed")
    g.node("rms_norm", ["e", "scale"], "n", name="norm")
    g.node("matmul", ["n", "w"], "h", name="proj")
    g.node("gelu", ["h"], "a", name="act")
    g.node("reduce_mean", ["a"], "pooled", name="pool", axes=[1])
    g.node("log_softmax", ["pooled"], "lp", name="lsm")
    g.node("argmax", ["lp"], "cls", name="cls")
    g.output("lp")
    g.output("cls")
    tok = rng.integers(-50, 50, (3, 6)).astype(np.int64)
    run_and_compare(g, {"tok": tok}, tmp_path, rtol=1e-5, atol=1e-5)


def test_bf16_output_saved_as_f32(tmp_path):
    """A bf16 graph output is written as <f4 holding the exact bf16 values."""
    g = GraphBuilder()
    g.input("x", "f32", [5])
    g.node("cast", ["x"], "xb", name="c", to="bf16")
    g.node("mul", ["xb", "xb"], "y", name="m")
    g.output("y")
    x = np.array([1.00390625, -3.3, 1e-3, 300.7, 0.0], np.float32)
    res = run_and_compare(g, {"x": x}, tmp_path, rtol=0, atol=0)
    assert res.json["outputs"][0]["dtype"] == "bf16"
    assert res.outputs["y"].dtype == np.dtype("<f4")
    assert np.array_equal(rg.bf16_round(res.outputs["y"]), res.outputs["y"])


def test_output_names_with_path_characters(tmp_path):
    """--output-dir writes DIR/<name>.npy with '/' and ':' replaced by '_'."""
    g = GraphBuilder()
    g.input("x", "f32", [2])
    g.node("neg", ["x"], "block/out:0", name="n")
    g.output("block/out:0")
    res = rg.run_graph(g, {"x": np.array([1.0, -2.0], np.float32)}, tmp_path)
    (o,) = res.json["outputs"]
    assert o["name"] == "block/out:0"
    f = tmp_path / "out" / "block_out_0.npy"
    assert f.is_file() and (o["file"] is None or o["file"].endswith("block_out_0.npy")), o
    rg.assert_equal(np.load(f), np.array([-1.0, 2.0], np.float32))


@pytest.mark.parametrize("flags", [[], ["--quiet"], ["--json", "--quiet"]])
def test_text_and_quiet_modes(tmp_path, flags):
    g = GraphBuilder("textmode")
    g.input("x", "f32", [3])
    g.node("relu", ["x"], "result_value", name="r")
    g.output("result_value")
    gp = g.save(tmp_path / "g.rtxg")
    np.save(tmp_path / "x.npy", np.array([-1.0, 0.5, 2.0], np.float32))
    r = rg.rtxrun_raw([gp, "--input", f"x={tmp_path / 'x.npy'}"] + flags)
    assert r.rc == 0, r.describe()
    if "--json" in flags:
        import json
        assert json.loads(r.stdout)["outputs"][0]["name"] == "result_value"
    elif "--quiet" not in flags:
        assert "result_value" in r.stdout, r.describe()
