"""
Prometheus /metrics: the text format 0.0.4 read back by prometheus_client's parser, Triton's
metric names and labels, figures that agree with the statistics endpoint and move with the
requests (successes, failures by reason, batch sizes), and rtxd's own families.
"""

import re

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

import http_util as hu


@pytest.fixture(scope="module")
def d(server):
    hu.wait_http(server)
    return server


def scrape(d):
    r = hu.get(d, "/metrics")
    assert r.status == 200, r
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4"), r.headers
    text = r.body.decode()
    return text, {f.name: f for f in text_string_to_metric_families(text)}


def value(fams, family, sample=None, **labels):
    fam = fams[family]
    sample = sample or family
    hits = [s.value for s in fam.samples
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(hits) == 1, f"{sample}{labels}: {len(hits)} samples in {fam.samples[:5]}"
    return hits[0]


NAME = r'[a-zA-Z_:][a-zA-Z0-9_:]*'
LABELS = r'(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\.)*",?)*\})?'
SAMPLE = re.compile(rf'^{NAME}{LABELS} (-?[0-9.e+]+|\+Inf|-Inf|NaN)$')


def test_format(d):
    text, fams = scrape(d)
    assert text.endswith("\n")
    seen_type = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            name = line.split()[2]
            assert name not in seen_type, f"family {name} declared twice"
            seen_type.add(name)
        elif line.startswith("# HELP "):
            continue
        else:
            assert SAMPLE.match(line), f"not a sample line: {line!r}"
    for f in fams.values():
        assert f.documentation, f"{f.name} has no HELP"
        assert f.type in ("counter", "gauge", "histogram"), (f.name, f.type)


TRITON = ["nv_inference_request_success", "nv_inference_request_failure", "nv_inference_count",
          "nv_inference_exec_count", "nv_inference_request_duration_us",
          "nv_inference_queue_duration_us", "nv_inference_compute_input_duration_us",
          "nv_inference_compute_infer_duration_us", "nv_inference_compute_output_duration_us",
          "nv_inference_pending_request_count", "nv_cpu_memory_total_bytes",
          "nv_gpu_memory_total_bytes"]
RTXD = ["rtxd_inference_batch_executions", "rtxd_inference_batch_size", "rtxd_jobs",
        "rtxd_jobs_finished", "rtxd_models", "rtxd_model_memory_bytes", "rtxd_build_info",
        "rtxd_shm_regions", "rtxd_draining", "rtxd_memory_pool_allocated_bytes",
        "rtxd_memory_pool_reserved_bytes", "rtxd_memory_pool_allocated_peak_bytes",
        "rtxd_memory_pool_allocs"]


def test_families_present(d):
    _, fams = scrape(d)
    for name in TRITON + RTXD:
        assert name in fams, f"{name} missing; have {sorted(fams)}"
    labels = {s.labels.get("model") for s in fams["nv_inference_count"].samples}
    assert {"simple", "mlp", "mlp_nobatch"} <= labels
    assert value(fams, "rtxd_models", state="READY") >= 3
    assert value(fams, "nv_cpu_memory_total_bytes") > 0
    assert value(fams, "rtxd_model_memory_bytes", device="cpu") > 0
    assert {s.labels["lane"] for s in fams["rtxd_jobs"].samples} >= {"batch"}
    # the job workers' pools: at least the CPU row
    devices = {s.labels["device"] for s in fams["rtxd_memory_pool_reserved_bytes"].samples}
    assert "cpu" in devices, devices


def test_figures_follow_requests(d):
    _, f0 = scrape(d)
    a, b = hu.simple_inputs(3)
    for _ in range(4):
        hu.decode_infer(hu.infer(d, "simple", {"INPUT0": a, "INPUT1": b}))
    bad = hu.infer(d, "simple", {"INPUT0": a.astype(np.float32), "INPUT1": b})
    assert bad.status == 400
    _, f1 = scrape(d)
    m = {"model": "simple", "version": "1"}
    delta = {k: value(f1, k, k + "_total", **m) - value(f0, k, k + "_total", **m)
             for k in ("nv_inference_request_success", "nv_inference_count",
                       "nv_inference_exec_count")}
    assert delta == {"nv_inference_request_success": 4, "nv_inference_count": 12,
                     "nv_inference_exec_count": 4}, delta
    rej = ("nv_inference_request_failure", "nv_inference_request_failure_total")
    assert (value(f1, *rej, reason="REJECTED", **m) -
            value(f0, *rej, reason="REJECTED", **m)) == 1
    for r in ("CANCELED", "BACKEND", "OTHER"):
        value(f1, *rej, reason=r, **m)  # present
    assert value(f1, "nv_inference_request_duration_us", "nv_inference_request_duration_us_total",
                 **m) > 0
    assert value(f1, "nv_inference_pending_request_count", **m) == 0
    # the batch-size counts and histogram saw batches of 3
    assert value(f1, "rtxd_inference_batch_executions",
                 "rtxd_inference_batch_executions_total", batch_size="3", **m) >= 4
    h = "rtxd_inference_batch_size"
    count = value(f1, h, h + "_count", **m)
    assert value(f1, h, h + "_bucket", le="+Inf", **m) == count
    assert value(f1, h, h + "_bucket", le="2", **m) <= value(f1, h, h + "_bucket", le="4",
                                                               **m)
    # agree with the statistics endpoint
    st = hu.get(d, "/v2/models/simple/stats").json()["model_stats"][0]
    assert value(f1, "nv_inference_count", "nv_inference_count_total", **m) == \
        st["inference_count"]
    assert value(f1, "nv_inference_exec_count", "nv_inference_exec_count_total", **m) == \
        st["execution_count"]


def test_label_escaping_and_methods(d):
    r = hu.post(d, "/metrics")
    assert r.status == 405, r
    text, _ = scrape(d)
    assert 'rtxd_build_info{version="' in text
