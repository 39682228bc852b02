"""
rtxrun --batch-dir (docs/rtxrun.md): many case directories, one process, one backend. Each
case's outputs must equal a single-graph run's; a failing case is reported with its exit
status and message while the others still run; usage, directory and input errors are clear.
Also tests/gpu/test_ops_torch.py (the GPU-vs-PyTorch op test) in its CPU mode: every op of
docs/ops.md through one batch on the CPU backend against the NumPy reference.
"""

import json
import os
import re
import subprocess
import sys

import numpy as np

import rtxgraph as rg
from rtxgraph import GraphBuilder

REPO = rg.REPO


def mlp_graph():
    g = GraphBuilder("mlp")
    g.input("x", "f32", [-1, 4])
    g.init("w", np.arange(12, dtype=np.float32).reshape(4, 3) / 8)
    h = g.node("matmul", ["x", "w"], "h")
    g.node("relu", [h], "y")
    g.output("y")
    return g


def add_graph(name="add"):
    g = GraphBuilder(name)
    g.input("a", "i32", [3])
    g.input("b", "i32", [3])
    g.node("add", ["a", "b"], "s")
    g.output("s")
    return g


def make_case(root, name, graph, feeds):
    d = root / name
    (d / "inputs").mkdir(parents=True)
    (d / "graph.rtxg").write_bytes(graph.bytes() if isinstance(graph, GraphBuilder)
                                   else graph)
    for k, a in feeds.items():
        np.save(d / "inputs" / f"{k}.npy", a, allow_pickle=False)
    return d


def json_lines(r):
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def test_batch_runs_every_case_like_single_runs(tmp_path):
    root = tmp_path / "batch"
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    make_case(root, "b-mlp", mlp_graph(), {"x": x})
    a, b = np.array([1, 2, 3], np.int32), np.array([10, -20, 30], np.int32)
    make_case(root, "a-add", add_graph(), {"a": a, "b": b})
    (root / "not-a-case.txt").write_text("files beside the case folders are ignored")
    r = rg.rtxrun_raw(["--batch-dir", root, "--json", "--repeat", "2", "--threads", "2"])
    assert r.rc == 0, r.describe()
    lines = json_lines(r)
    assert [o.get("case") for o in lines[:2]] == ["a-add", "b-mlp"], r.stdout  # name order
    assert lines[2] == {"batch": str(root), "cases": 2, "ok": 2, "failed": 0}
    for o in lines[:2]:
        assert o["exit"] == 0 and o["time_ms"]["runs"] == 2, o
    (out,) = lines[0]["outputs"]
    assert out["file"] == str(root / "a-add" / "out" / "s.npy")
    rg.assert_equal(np.load(out["file"]), a + b, "batch add")
    single = rg.run_graph(mlp_graph(), {"x": x}, tmp_path)
    got = np.load(lines[1]["outputs"][0]["file"])
    rg.assert_equal(got, single.outputs["y"], "batch mlp vs single run")


def test_failing_case_is_reported_and_the_batch_goes_on(tmp_path):
    root = tmp_path / "batch"
    a = np.array([1, 2, 3], np.int32)
    make_case(root, "1-ok", add_graph(), {"a": a, "b": a})
    bad = GraphBuilder("bad")
    bad.input("x", "f32", [2])
    bad.node("no_such_op", ["x"], "y", name="weird")
    bad.output("y")
    make_case(root, "2-bad-graph", bad, {"x": np.zeros(2, np.float32)})
    make_case(root, "3-wrong-dtype", add_graph(), {"a": a.astype(np.int64), "b": a})
    make_case(root, "4-missing-input", add_graph(), {"a": a})
    make_case(root, "5-unknown-input", add_graph(), {"a": a, "b": a, "zz": a})
    d = make_case(root, "6-stray-file", add_graph(), {"a": a, "b": a})
    (d / "inputs" / "notes.txt").write_text("x")
    (root / "7-no-graph" / "inputs").mkdir(parents=True)
    make_case(root, "8-garbage-graph", b"\xff\xff\xff\xff", {})
    make_case(root, "9-ok", add_graph(), {"a": a, "b": a})
    r = rg.rtxrun_raw(["--batch-dir", root, "--json"])
    assert r.rc == 1, r.describe()
    by = {o["case"]: o for o in json_lines(r) if "case" in o}
    assert by["1-ok"]["exit"] == 0 and by["9-ok"]["exit"] == 0
    assert by["2-bad-graph"]["exit"] == 3
    assert "no_such_op" in by["2-bad-graph"]["error"], by["2-bad-graph"]
    assert by["3-wrong-dtype"]["exit"] == 4 and "input a" in by["3-wrong-dtype"]["error"]
    assert by["4-missing-input"]["exit"] == 4 and "input b not given" in \
        by["4-missing-input"]["error"]
    assert by["5-unknown-input"]["exit"] == 4 and "no input of that name" in \
        by["5-unknown-input"]["error"]
    assert by["6-stray-file"]["exit"] == 4 and "notes.txt" in by["6-stray-file"]["error"]
    assert by["7-no-graph"]["exit"] == 3 and "graph.rtxg" in by["7-no-graph"]["error"]
    assert by["8-garbage-graph"]["exit"] == 3
    summary = json_lines(r)[-1]
    assert summary == {"batch": str(root), "cases": 9, "ok": 2, "failed": 7}, summary
    # stderr names the case of each message
    assert "rtxrun: case 2-bad-graph: " in r.stderr, r.stderr
    # text mode: one line per case, then the summary
    t = rg.rtxrun_raw(["--batch-dir", root, "--quiet"])
    assert t.rc == 1
    assert "case 1-ok: ok" in t.stdout
    assert re.search(r"^case 2-bad-graph: failed \(exit 3\): .*no_such_op", t.stdout, re.M)
    assert t.stdout.rstrip().endswith(f"batch {root}: 9 cases, 2 ok, 7 failed"), t.stdout


def test_random_inputs_fill_a_case_without_inputs(tmp_path):
    root = tmp_path / "batch"
    make_case(root, "c", add_graph(), {})
    r = rg.rtxrun_raw(["--batch-dir", root, "--random-inputs", "--seed", "3", "--json"])
    assert r.rc == 0, r.describe()
    assert json_lines(r)[0]["outputs"][0]["shape"] == [3]


def test_empty_batch_dir(tmp_path):
    r = rg.rtxrun_raw(["--batch-dir", tmp_path, "--json"])
    assert r.rc == 0, r.describe()
    assert json_lines(r) == [{"batch": str(tmp_path), "cases": 0, "ok": 0, "failed": 0}]


def test_batch_usage_and_directory_errors(tmp_path):
    g = tmp_path / "g.rtxg"
    g.write_bytes(add_graph().bytes())
    for extra, what in (([g], str(g)), (["--input", f"a={g}"], "--input"),
                        (["--output-dir", tmp_path / "o"], "--output-dir")):
        r = rg.rtxrun_raw(["--batch-dir", tmp_path] + extra)
        assert r.rc == 2, r.describe()
        assert "--batch-dir" in r.stderr and what in r.stderr, r.stderr
    r = rg.rtxrun_raw(["--batch-dir"])
    assert r.rc == 2 and "needs a value" in r.stderr, r.stderr
    r = rg.rtxrun_raw(["--batch-dir", tmp_path / "nope"])
    assert r.rc == 4 and "nope" in r.stderr and "No such file" in r.stderr, r.describe()
    r = rg.rtxrun_raw(["--batch-dir", g])
    assert r.rc == 4 and "Not a directory" in r.stderr, r.describe()


def test_backend_that_cannot_open_stops_the_batch(tmp_path):
    """No such CUDA device (this host has none, or not 999): the first case that reaches
    execution fails with the backend's reason and the batch stops there."""
    root = tmp_path / "batch"
    a = np.array([1, 2, 3], np.int32)
    for n in ("a", "b", "c"):
        make_case(root, n, add_graph(), {"a": a, "b": a})
    r = rg.rtxrun_raw(["--batch-dir", root, "--json", "--device", "cuda:999"])
    assert r.rc == 1, r.describe()
    lines = json_lines(r)
    assert [o.get("case") for o in lines] == ["a", None], r.stdout
    assert lines[0]["exit"] == 1 and "CUDA backend" in lines[0]["error"], lines[0]
    assert lines[1]["ok"] == 0 and lines[1]["cases"] == 3
    assert "stopped after case a" in r.stderr, r.stderr


def test_ops_torch_script_cpu_mode_passes():
    """tests/gpu/test_ops_torch.py --device cpu --reference numpy: every op's cases (all
    dtypes, odd and broadcast shapes) through one rtxrun batch on the CPU backend."""
    script = REPO / "tests" / "gpu" / "test_ops_torch.py"
    env = dict(os.environ, RTX_BUILD=str(rg.build_dir()), RTX_PY=str(rg.py_dir()))
    p = subprocess.run([sys.executable, str(script), "--device", "cpu", "--reference",
                        "numpy", "--build", str(rg.build_dir())], capture_output=True,
                       text=True, env=env, timeout=600)
    for m in rg.SANITIZER_MARKS:
        assert m not in p.stdout + p.stderr, p.stdout[-4000:]
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-3000:]
    sys.path.insert(0, str(REPO / "tests" / "gpu"))
    import test_ops_torch as t
    m = re.search(r"^(\d+) passed, 0 failed$", p.stdout, re.M)
    assert m and int(m.group(1)) == len(t.CASES), p.stdout[-2000:]  # every case ran


def test_ops_torch_script_covers_every_op():
    sys.path.insert(0, str(REPO / "tests" / "gpu"))
    import test_ops_torch as t
    missing = sorted(set(rg.ALL_OPS) - {c.op for c in t.CASES})
    assert not missing, f"ops without a case in test_ops_torch.py: {missing}"
    assert len({c.id for c in t.CASES}) == len(t.CASES)
