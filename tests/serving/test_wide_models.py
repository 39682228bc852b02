"""
The wide example MLPs (mlp_wide: dynamic batching on; mlp_wide_nobatch: off; the same 32 MiB
of weights, docs/serving.md), which the serving benchmark uses to show what batching buys:
their configs, and outputs that are identical batched and unbatched and equal NumPy's.

rtxd serves the build's example repository itself (read only, explicit control loading just
these two models), so no test copies the weights.
"""

import threading

import numpy as np
import pytest

import grpc_util as gu
import http_util as hu
import serving_harness as sh

WIDE = ("mlp_wide", "mlp_wide_nobatch")
SERVER_KW = {"repository": sh.example_repository(), "control": "explicit", "startup": WIDE}
ROWS = 32


@pytest.fixture(scope="module")
def d(server):
    hu.wait_http(server)
    return server


@pytest.fixture(scope="module")
def weights():
    return gu.read_safetensors(sh.example_repository() / "mlp_wide" / "1" / "model.safetensors")


def numpy_reference(w, x):
    """y = gelu_tanh(x @ w1 + b1) @ w2 + b2 in float64."""
    h = x.astype(np.float64) @ w["w1"] + w["b1"]
    h = 0.5 * h * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (h + 0.044715 * h ** 3)))
    return h @ w["w2"] + w["b2"]


def infer_y(d, model, x):
    _, out = hu.decode_infer(hu.infer(d, model, {"x": x}, binary_output=True))
    return out["y"]


def test_configs(d, weights):
    on = hu.get(d, "/v2/models/mlp_wide/config").json()
    off = hu.get(d, "/v2/models/mlp_wide_nobatch/config").json()
    assert on["max_batch_size"] == off["max_batch_size"] == 64
    db = on["dynamic_batching"]
    assert [int(v) for v in db["preferred_batch_size"]] == [16, 32]
    assert 0 < int(db["max_queue_delay_microseconds"]) <= 2000
    assert "dynamic_batching" not in off
    for cfg in (on, off):
        assert cfg["input"][0]["name"] == "x" and [int(v) for v in cfg["input"][0]["dims"]] \
            == [1024]
        assert cfg["output"][0]["name"] == "y" and [int(v) for v in cfg["output"][0]["dims"]] \
            == [1024]
    assert weights["w1"].shape == (1024, 4096) and weights["w2"].shape == (4096, 1024)


def test_batched_equals_unbatched_and_numpy(d, weights):
    """32 concurrent one-row requests to mlp_wide (merged into batches: the statistics must
    show a batch of more than one) give, bit for bit, what each row gives alone from
    mlp_wide_nobatch, and what all 32 rows give as one request (over gRPC); and NumPy's."""
    xs = np.random.default_rng(5).standard_normal((ROWS, 1, 1024)).astype(np.float32)
    before = hu.get(d, "/v2/models/mlp_wide/stats").json()["model_stats"][0]
    got = [None] * ROWS
    errors = []

    def one(i):
        try:
            got[i] = infer_y(d, "mlp_wide", xs[i])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"request {i}: {e!r}")

    ts = [threading.Thread(target=one, args=(i,)) for i in range(ROWS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120 * sh.SLOW)
    assert not errors, errors
    after = hu.get(d, "/v2/models/mlp_wide/stats").json()["model_stats"][0]
    runs = after["execution_count"] - before["execution_count"]
    assert after["inference_count"] - before["inference_count"] == ROWS, after
    assert runs < ROWS, f"dynamic batching merged nothing: {ROWS} requests ran in {runs} " \
                        f"batches (batch sizes {[b['batch_size'] for b in after['batch_stats']]})"

    alone = np.concatenate([infer_y(d, "mlp_wide_nobatch", x) for x in xs])
    batched = np.concatenate(got)
    assert batched.shape == (ROWS, 1024)
    np.testing.assert_array_equal(batched, alone)
    whole = gu.client(d).infer("mlp_wide_nobatch",
                               gu.inputs(("x", xs.reshape(ROWS, 1024)))).as_numpy("y")
    np.testing.assert_array_equal(whole, alone)
    np.testing.assert_allclose(alone, numpy_reference(weights, xs.reshape(ROWS, 1024)),
                               rtol=1e-4, atol=2e-5)
