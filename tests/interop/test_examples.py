"""
The example graphs of $RTX_BUILD/examples through rtxrun against the NumPy reference
interpreter, which reads the very same file with graph_pb2 and walks its nodes in order (so it
also checks, independently of the C decoder, that the file is a well-formed graph of documented
ops: nothing here knows the initializer names).

Tolerances, |got - ref| <= rel * (|ref| + max|ref|):
  * mlp (rel 1e-5): two gemms (K = 64, 128) and a softmax over 10 classes. The worst-case f32
    bound of a K-term dot product is gamma_K = K*2^-24 (7.6e-6 for K = 128) of |a|.|b|; with
    weights of mixed sign the realized error is ~sqrt(K)*2^-24 ~ 1e-6 relative, and the
    softmax adds a few ulps: 1e-5 leaves margin without hiding an indexing or layout bug
    (those are O(1)).
  * transformer block (rel 1e-4): about ten chained f32 stages - layer norms over 256, four
    K = 256 projections, 128-key causal softmax, a K = 1024 projection, gelu, two residual
    adds. Each K-sum contributes up to gamma_1024 = 6.1e-5 worst case (~2e-6 typically), and
    the layer norms divide by the row's standard deviation, amplifying the absolute error of
    their input; compounding ~10 stages of ~1e-5 gives the 1e-4 budget. Errors from a wrong
    head split, mask or transpose are O(1) and fail loudly.
"""

import numpy as np
import pytest

import rtxgraph as rg

EXAMPLES = {
    # name: (input shape with the batch dim to fill, relative tolerance)
    "mlp": ([None, 64], 1e-5),
    "transformer_block": ([None, 128, 256], 1e-4),
}


def _nbytes(shape, dt):
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(rg.npy_dtype_for(dt)).itemsize


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example(name, batch, examples_dir, tmp_path):
    path = examples_dir / f"{name}.rtxg"
    assert path.is_file(), f"{path} missing (make examples)"
    g = rg.load_graph(path)
    assert g.name == name
    shape, rel = EXAMPLES[name]
    (vi,) = g.inputs
    assert vi.name == "x" and rg.ENUM_DT[vi.dtype] == "f32"
    assert list(vi.dims) == [-1] + shape[1:], list(vi.dims)
    rng = np.random.default_rng(1000 + batch)
    x = rng.standard_normal([batch] + shape[1:]).astype(np.float32)

    ref = rg.evaluate(g, {"x": x})
    res = rg.run_graph(path.read_bytes(), {"x": x}, tmp_path)

    j = res.json
    assert j["graph"] == name
    assert [o["name"] for o in j["outputs"]] == [o.name for o in g.outputs]
    for o in j["outputs"]:
        want = ref[o["name"]]
        assert o["dtype"] == want.dt
        assert o["shape"] == list(want.a.shape)
        got = res.outputs[o["name"]]
        assert got.dtype == np.float32
        r = rg.f64(want)
        scale = float(np.max(np.abs(r)))
        rg.assert_close(got, want.a, rel, rel * scale, f"{name} batch {batch} {o['name']}")
        if name == "mlp":
            np.testing.assert_allclose(got.sum(axis=-1), 1.0, rtol=1e-5)

    t = j["time_ms"]
    assert t["runs"] == 1 and 0 <= t["min"] <= t["median"] <= t["max"], t
    for k in ("peak_bytes", "arena_bytes", "unplanned_bytes"):
        assert isinstance(j[k], int) and j[k] >= 0, (k, j[k])
    assert j["arena_bytes"] <= j["unplanned_bytes"], j
    if name == "transformer_block":
        # ~25 intermediates, few alive at once: the planner must reuse memory. peak_bytes is
        # arena + outputs + converted inputs, so without reuse it would be at least
        # unplanned + outputs.
        io = _nbytes(x.shape, "f32") + sum(_nbytes(o["shape"], o["dtype"])
                                           for o in j["outputs"])
        assert j["arena_bytes"] < j["unplanned_bytes"], j
        assert j["peak_bytes"] < j["unplanned_bytes"] + io, j
        assert j["arena_bytes"] > 0


def test_transformer_repeat_is_stable(examples_dir, tmp_path):
    """--warmup/--repeat: the outputs of the last run equal those of a single run, and the
    timing object counts the timed runs."""
    path = examples_dir / "transformer_block.rtxg"
    x = np.random.default_rng(5).standard_normal([1, 128, 256]).astype(np.float32)
    one = rg.run_graph(path.read_bytes(), {"x": x}, tmp_path / "a")
    rep = rg.run_graph(path.read_bytes(), {"x": x}, tmp_path / "b",
                       extra=["--repeat", "3", "--warmup", "1"])
    assert rep.json["time_ms"]["runs"] == 3
    rg.assert_close(rep.outputs["y"], one.outputs["y"], 1e-6, 1e-6, "repeat vs single run")


@pytest.fixture(autouse=True)
def _mkdirs(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
