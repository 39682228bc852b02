"""
Triton's perf_analyzer (from the tritonclient wheel) against rtxd over HTTP and gRPC at
concurrency 1 to 8: every level completes, and rtxd counts no failed request.

perf_analyzer is a prebuilt binary that links libcudart.so.12 (from PyPI's
nvidia-cuda-runtime-cu12, found through LD_LIBRARY_PATH) and libb64.so.0d (Debian's libb64-0d,
from deploy/install-deps.sh); it needs no GPU for a remote server. When the binary is missing
or cannot run at all the test skips with the loader's message, naming the dependency
"perf_analyzer": a failure unless RTX_ALLOW_SKIP=perf_analyzer (tests/skips.py).
"""

import csv
import subprocess
import sys
from pathlib import Path

import pytest

import http_util as hu
import serving_harness as sh
import skips


def perf_analyzer():
    """(path, environment) of a runnable perf_analyzer, or a skip saying why not."""
    exe = Path(sys.executable).parent / "perf_analyzer"
    if not exe.exists():
        skips.skip("perf_analyzer", f"{exe} missing: tests/requirements.txt installs "
                   f"tritonclient[all], whose wheel ships it")
    env = sh.harness.clean_env()
    try:
        import nvidia.cuda_runtime
        lib = Path(list(nvidia.cuda_runtime.__path__)[0]) / "lib"
        env["LD_LIBRARY_PATH"] = f"{lib}:{env.get('LD_LIBRARY_PATH', '')}".rstrip(":")
    except ImportError:
        pass
    env.pop("ASAN_OPTIONS", None)  # the client is not a sanitizer build
    p = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=60)
    text = p.stdout + p.stderr
    if "error while loading shared libraries" in text:
        skips.skip("perf_analyzer", f"it cannot run here: {text.strip()[:300]}")
    return exe, env


@pytest.fixture(scope="module")
def d(server):
    hu.wait_http(server)
    return server


def fails(d, model):
    s = hu.get(d, f"/v2/models/{model}/stats").json()["model_stats"][0]
    return s["inference_stats"]["fail"]["count"], s["inference_stats"]["success"]["count"]


def run_pa(d, protocol, tmp_path, levels, extra):
    """perf_analyzer on mlp at each concurrency of levels ("1:8:1"), extra arguments added:
    -> its CSV rows, after asserting that it succeeded, printed no error and that rtxd counted
    successes and no failure."""
    exe, env = perf_analyzer()
    url = d.http_address if protocol == "http" else d.address
    f0, s0 = fails(d, "mlp")
    out = tmp_path / "pa.csv"
    argv = [str(exe), "-m", "mlp", "-u", url, "-i", protocol, "--concurrency-range", levels,
            "--measurement-interval", str(int(300 * sh.SLOW)), "-s", "100000", "--max-trials", "3",
            "-f", str(out)] + extra
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300 * sh.SLOW)
    text = p.stdout + p.stderr
    assert p.returncode == 0, f"perf_analyzer exit {p.returncode}:\n{text[-3000:]}" \
                              f"{d.log_excerpt()}"
    assert "error" not in text.lower(), text[-3000:]
    rows = list(csv.DictReader(out.open()))
    for r in rows:
        assert float(r["Inferences/Second"]) > 0, r
    f1, s1 = fails(d, "mlp")
    assert f1 == f0, f"rtxd counted {f1 - f0} failed requests"
    assert s1 > s0
    return rows


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_concurrency_1_to_8(d, protocol, tmp_path):
    rows = run_pa(d, protocol, tmp_path, "1:8:1", ["--percentile=99"])
    assert sorted(int(r["Concurrency"]) for r in rows) == list(range(1, 9)), rows
    hu.assert_serving(d)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_system_shared_memory(d, protocol, tmp_path):
    """perf_analyzer --shared-memory system: inputs and outputs in regions it registers.
    Triton's C++ client reads raw_output_contents entry i for output i (gRPC) and
    binary_data_size from any output with parameters (HTTP): answers shaped otherwise crashed
    it or failed every request."""
    rows = run_pa(d, protocol, tmp_path, "1:2:1", ["-b", "4", "--shared-memory", "system",
                                                   "--output-shared-memory-size", "4096"])
    assert sorted(int(r["Concurrency"]) for r in rows) == [1, 2], rows
    # every region perf_analyzer registered is unregistered again
    assert hu.get(d, "/v2/systemsharedmemory/status").json() == []
    hu.assert_serving(d)
