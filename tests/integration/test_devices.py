"""
Devices as rtxd reports them: Admin.Devices and Admin.Status list the CPU, then one row per
CUDA device found at start. On a machine without a GPU (CI, the build machines) there is no
cuda row and rtxd logs "no CUDA device: <reason>; running on the CPU backend" exactly once,
at info, and still runs jobs (on the CPU). On a machine with a GPU device node the GPU rows
are checked instead (tests/gpu/daemon-devices.sh is the full GPU-machine check).
"""

import json
import os

import numpy as np
import pytest

import harness as h

HAVE_GPU = os.path.exists("/dev/nvidia0")


def log_records(daemon):
    return [json.loads(line) for line in daemon.log().splitlines() if line.startswith("{")]


def test_devices_lists_cpu_first(daemon):
    devs = daemon.client().admin.Devices(h.admin_pb2.DevicesRequest(),
                                         timeout=h.RPC_TIMEOUT).devices
    assert devs, "Admin.Devices listed nothing"
    cpu = devs[0]
    assert cpu.kind == "cpu" and cpu.index == 0 and cpu.healthy, cpu
    assert cpu.name and cpu.threads >= 1 and cpu.memory_bytes > 0, cpu
    assert [d.kind for d in devs].count("cpu") == 1, devs


@pytest.mark.skipif(HAVE_GPU, reason="this machine has a GPU device node")
def test_no_gpu_lists_no_cuda_device(daemon):
    devs = daemon.client().admin.Devices(h.admin_pb2.DevicesRequest(),
                                         timeout=h.RPC_TIMEOUT).devices
    assert [d.kind for d in devs] == ["cpu"], devs
    status = daemon.client().status()
    assert [d.kind for d in status.devices] == ["cpu"], status.devices


@pytest.mark.skipif(HAVE_GPU, reason="this machine has a GPU device node")
def test_no_gpu_logged_once(daemon):
    recs = [r for r in log_records(daemon) if r.get("msg", "").startswith("no CUDA device")]
    assert len(recs) == 1, f"'no CUDA device' logged {len(recs)} times{daemon.log_excerpt()}"
    r = recs[0]
    assert r["level"] == "info", r
    assert r["msg"].endswith("; running on the CPU backend"), r
    reason = r["msg"][len("no CUDA device: "):-len("; running on the CPU backend")]
    assert reason.strip(), r
    assert not [x for x in log_records(daemon) if x.get("msg") == "cuda device"]


@pytest.mark.skipif(HAVE_GPU, reason="this machine has a GPU device node")
def test_no_gpu_jobs_run_on_cpu(daemon):
    g = h.GraphBuilder("devices_add")
    g.input("x", "f32", [4])
    g.node("add", ["x", "x"], "y", name="add")
    g.output("y")
    x = np.arange(4, dtype=np.float32)
    _, outs = daemon.client().run(g, {"x": x})
    np.testing.assert_array_equal(outs["y"].a, x + x)


def test_rtxctl_devices_json_matches(daemon):
    j = h.rtxctl("--json", "devices", address=daemon.address, check_rc=0).json()
    kinds = [d["kind"] for d in j]
    assert kinds[0] == "cpu", j
    cuda = [d for d in j if d["kind"] == "cuda"]
    if not HAVE_GPU:
        assert not cuda, j
    for d in cuda:
        assert d["healthy"], d
        assert d["sm_count"] > 0 and d["memory_bytes"] > 0, d
        assert d["compute_capability"].count(".") == 1, d
