"""
Devices as rtxd reports them: Admin.Devices and Admin.Status list the CPU, then one row per
CUDA device found at start. Placement (the device field of Submit, the device a job records,
rtxctl submit --device, the setting jobs.device) and the memory pools (Admin.Pools, rtxctl
pools) are checked here too, on whatever devices the machine has. Without a GPU there is no
cuda row and rtxd logs "no CUDA device: <reason>; running on the CPU backend" exactly once,
at info, and still runs jobs (on the CPU): those checks run against an rtxd whose GPUs are
hidden (CUDA_VISIBLE_DEVICES=""), so they run, and mean the same, on every host, GPU or not
(no hardware-conditional skip; tests/skips.py). On a machine with a GPU device node the GPU
rows are checked too (tests/gpu/daemon-devices.sh and tests/gpu/daemon-jobs.sh are the full
GPU-machine checks).
"""

import json
import os
import re

import grpc
import numpy as np
import pytest

import harness as h

HAVE_GPU = os.path.exists("/dev/nvidia0")


def log_records(daemon):
    return [json.loads(line) for line in daemon.log().splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def no_gpu_daemon(tmp_path_factory):
    """An rtxd that sees no CUDA device on any host: CUDA_VISIBLE_DEVICES="" hides every GPU
    from the CUDA runtime, which then answers cudaErrorNoDevice as on a host without one."""
    d = h.Daemon(tmp_path_factory.mktemp("no_gpu"), env={"CUDA_VISIBLE_DEVICES": ""})
    d.start()
    yield d
    err = d.cleanup()
    assert not err, f"daemon teardown: {err}"


def test_devices_lists_cpu_first(daemon):
    devs = daemon.client().admin.Devices(h.admin_pb2.DevicesRequest(),
                                         timeout=h.RPC_TIMEOUT).devices
    assert devs, "Admin.Devices listed nothing"
    cpu = devs[0]
    assert cpu.kind == "cpu" and cpu.index == 0 and cpu.healthy, cpu
    assert cpu.name and cpu.threads >= 1 and cpu.memory_bytes > 0, cpu
    assert [d.kind for d in devs].count("cpu") == 1, devs
    # the device layer's budget: 0.9 of the memory by default, a quarter reserved for jobs
    for d in devs:
        if not d.healthy:
            continue
        assert 0 < d.budget_bytes <= d.memory_bytes, d
        jobs = [c for c in d.consumers if c.name == "jobs"]
        if d.workers > 0:
            assert len(jobs) == 1, d
            assert jobs[0].reserved_bytes == pytest.approx(d.budget_bytes * 0.25, rel=1e-3), d
            assert d.reserved_bytes >= jobs[0].reserved_bytes and d.backends >= d.workers, d


def test_no_gpu_lists_no_cuda_device(no_gpu_daemon):
    devs = no_gpu_daemon.client().admin.Devices(h.admin_pb2.DevicesRequest(),
                                                timeout=h.RPC_TIMEOUT).devices
    assert [d.kind for d in devs] == ["cpu"], devs
    status = no_gpu_daemon.client().status()
    assert [d.kind for d in status.devices] == ["cpu"], status.devices


def test_no_gpu_logged_once(no_gpu_daemon):
    recs = [r for r in log_records(no_gpu_daemon)
            if r.get("msg", "").startswith("no CUDA device")]
    assert len(recs) == 1, (f"'no CUDA device' logged {len(recs)} times"
                            f"{no_gpu_daemon.log_excerpt()}")
    r = recs[0]
    assert r["level"] == "info", r
    assert r["msg"].endswith("; running on the CPU backend"), r
    reason = r["msg"][len("no CUDA device: "):-len("; running on the CPU backend")]
    assert reason.strip(), r
    assert not [x for x in log_records(no_gpu_daemon) if x.get("msg") == "cuda device"]


def test_no_gpu_jobs_run_on_cpu(no_gpu_daemon):
    g = h.GraphBuilder("devices_add")
    g.input("x", "f32", [4])
    g.node("add", ["x", "x"], "y", name="add")
    g.output("y")
    x = np.arange(4, dtype=np.float32)
    _, outs = no_gpu_daemon.client().run(g, {"x": x})
    np.testing.assert_array_equal(outs["y"].a, x + x)


def test_rtxctl_devices_json_matches(daemon):
    j = h.rtxctl("--json", "devices", address=daemon.address, check_rc=0).json()
    kinds = [d["kind"] for d in j]
    assert kinds[0] == "cpu", j
    cuda = [d for d in j if d["kind"] == "cuda"]
    assert bool(cuda) == HAVE_GPU, j  # a GPU device node and no cuda row: the driver failed
    for d in cuda:
        assert d["healthy"], d
        assert d["sm_count"] > 0 and d["memory_bytes"] > 0, d
        assert d["compute_capability"].count(".") == 1, d
    for d in j:
        for k in ("budget_bytes", "reserved_bytes", "used_bytes", "plan_cache_hits",
                  "plan_cache_misses", "plan_cache_evictions", "plans_kept", "backends"):
            assert isinstance(d[k], int), (k, d)
        assert any(c["name"] == "jobs" for c in j[0]["consumers"]), j[0]
    out = h.rtxctl("devices", address=daemon.address, check_rc=0).out
    assert "BUDGET" in out and "PLANS" in out and "CONSUMER" in out and "jobs" in out, out


# ------------------------------------------------------------------------------------------
# Placement: the device field of Submit, the job's device, rtxctl submit --device
# ------------------------------------------------------------------------------------------

def add_graph(name="devices_place"):
    g = h.GraphBuilder(name)
    g.input("x", "f32", [4])
    g.node("add", ["x", "x"], "y", name="add")
    g.output("y")
    return g


def n_gpus(daemon):
    devs = daemon.client().admin.Devices(h.admin_pb2.DevicesRequest(),
                                         timeout=h.RPC_TIMEOUT).devices
    return len([d for d in devs if d.kind == "cuda"])


def submit_error(client, g, feeds, device):
    with pytest.raises(grpc.RpcError) as e:
        client.submit(g, feeds, device=device)
    return e.value


def test_device_field_is_validated(daemon):
    c = daemon.client()
    g, x = add_graph(), np.arange(4, dtype=np.float32)
    before = len(c.list_all()[0])
    e = submit_error(c, g, {"x": x}, "cuda:7")
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
    assert "device 'cuda:7' does not exist" in e.details(), e.details()
    if n_gpus(daemon) == 0:
        assert e.details().startswith(
            "device 'cuda:7' does not exist: this host has no CUDA device ("), e.details()
        e = submit_error(c, g, {"x": x}, "cuda")
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
        assert "this host has no CUDA device" in e.details(), e.details()
    for bad in ("gpu", "cuda:", "cuda:x", "CPU", "cuda:-1"):
        e = submit_error(c, g, {"x": x}, bad)
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, (bad, e)
        assert "device" in e.details(), (bad, e.details())
    assert len(c.list_all()[0]) == before, "a refused submission was journaled"


def test_job_records_its_device(daemon):
    c = daemon.client()
    g, x = add_graph(), np.arange(4, dtype=np.float32)
    job, outs = c.run(g, {"x": x}, device="cpu")
    assert job.device == "cpu" and job.requested_device == "cpu", job
    np.testing.assert_array_equal(outs["y"].a, x + x)
    job, outs = c.run(g, {"x": x})
    assert job.requested_device == "auto", job
    if n_gpus(daemon) == 0:
        assert job.device == "cpu", job
    else:
        assert job.device.startswith("cuda:"), job
    np.testing.assert_array_equal(outs["y"].a, x + x)
    queued = c.get(c.submit_id(g, {"x": x}, device="cpu"))
    assert queued.requested_device == "cpu", queued


def test_rtxctl_submit_device(daemon, tmp_path):
    gp = add_graph("devices_cli").save(tmp_path / "g.rtxg")
    r = h.rtxctl("submit", gp, "--random-inputs", "--device", "cuda:7", address=daemon.address,
                 check_rc=1)
    assert "device 'cuda:7' does not exist" in r.err, r.describe()
    r = h.rtxctl("--json", "submit", gp, "--random-inputs", "--device", "cpu", "--wait",
                 address=daemon.address, check_rc=0)
    job = h.find_key(r.json(), "job")
    assert job["device"] == "cpu" and job["requested_device"] == "cpu", job
    r = h.rtxctl("jobs", "show", job["id"], address=daemon.address, check_rc=0)
    assert re.search(r"^device:\s+cpu \(asked for cpu\)$", r.out, re.M), r.describe()
    assert re.search(r"^execution:\s+plain$", r.out, re.M), r.describe()
    # the same graph and shapes again: the worker's kept plan runs it
    r = h.rtxctl("--json", "submit", gp, "--random-inputs", "--device", "cpu", "--wait",
                 address=daemon.address, check_rc=0)
    again = h.find_key(r.json(), "job")
    assert again["exec_mode"] == "plain" and again["plan_reused"] is True, again
    r = h.rtxctl("jobs", "show", again["id"], address=daemon.address, check_rc=0)
    assert re.search(r"^execution:\s+plain \(plan reused\)$", r.out, re.M), r.describe()
    r = h.rtxctl("submit", gp, "--random-inputs", "--device", address=daemon.address,
                 check_rc=2)


def test_devices_report_workers(daemon):
    devs = daemon.client().admin.Devices(h.admin_pb2.DevicesRequest(),
                                         timeout=h.RPC_TIMEOUT).devices
    assert devs[0].workers >= 1, devs[0]
    for d in devs[1:]:
        assert d.workers >= (1 if d.healthy else 0), d


# ------------------------------------------------------------------------------------------
# Pools: Admin.Pools and rtxctl pools
# ------------------------------------------------------------------------------------------

POOL_FIELDS = ("device", "kind", "pools", "allocated_bytes", "reserved_bytes", "active_bytes",
               "allocated_peak_bytes", "reserved_peak_bytes", "fragmentation", "alloc_retries",
               "ooms", "cap_bytes", "free_bytes", "allocs", "cache_hits", "segments", "healthy",
               "detail")


def test_admin_pools(daemon):
    c = daemon.client()
    c.run(add_graph(), {"x": np.arange(4, dtype=np.float32)}, device="cpu")
    pools = c.admin.Pools(h.admin_pb2.PoolsRequest(), timeout=h.RPC_TIMEOUT).pools
    assert pools and pools[-1].device == "cpu" and pools[-1].kind == "cpu", pools
    cpu = pools[-1]
    assert cpu.pools == 0 and cpu.healthy and "malloc" in cpu.detail, cpu
    assert cpu.allocated_peak_bytes > 0, cpu  # the job above ran on the CPU
    gpus = [p for p in pools if p.kind == "cuda"]
    assert len(gpus) == n_gpus(daemon) or not all(p.healthy for p in gpus), pools
    for p in pools[:-1]:
        assert p.kind in ("cuda", "pinned") and p.pools >= 1, p
        assert p.reserved_bytes >= p.active_bytes >= p.allocated_bytes >= 0, p
        assert 0.0 <= p.fragmentation <= 1.0, p
    if n_gpus(daemon) == 0:
        assert len(pools) == 1, pools


def test_rtxctl_pools(daemon):
    r = h.rtxctl("pools", address=daemon.address, check_rc=0)
    head = r.out.splitlines()[0].split()
    assert head == ["DEVICE", "ALLOCATED", "RESERVED", "ACTIVE", "PEAK", "FRAG", "RETRIES",
                    "OOMS", "CAP", "HEALTHY"], r.describe()
    assert any(line.split()[0] == "cpu" for line in r.out.splitlines()[1:]), r.describe()
    j = h.rtxctl("--json", "pools", address=daemon.address, check_rc=0).json()
    assert isinstance(j, list) and j[-1]["device"] == "cpu", j
    for row in j:
        assert set(POOL_FIELDS) <= set(row), row
    h.rtxctl("pools", "extra", address=daemon.address, check_rc=2)


def test_setting_jobs_device_cpu(make_daemon):
    d = make_daemon(flags=["--jobs.device=cpu", "--jobs.gpu_workers_per_device=0"])
    d.start()
    c = d.client()
    job, _ = c.run(add_graph(), {"x": np.ones(4, np.float32)})
    assert job.device == "cpu" and job.requested_device == "cpu", job
    settings = c.config()
    assert settings["jobs.device"].value == "cpu", settings["jobs.device"]
    assert settings["jobs.gpu_workers_per_device"].value == "0"
    assert "jobs.gpu_pool_cap_bytes" not in settings  # retired: the device budgets bound it
    assert settings["device.jobs_reserve"].value == "0.25"
    assert settings["device.memory_fraction"].value == "0.9"
    assert settings["device.plan_cache"].value == "64"
    e = submit_error(c, add_graph(), {"x": np.ones(4, np.float32)}, "cuda:0")
    assert e.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNAVAILABLE), e
