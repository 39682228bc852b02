#!/usr/bin/env bash
# daemon-serving.sh - KServe v2 serving on the GPU, part of `make test-gpu`: starts rtxd from
# $RTX_BUILD (default build/) with a copy of three models of the example repository (mlp,
# simple, transformer_block; their configs ask for KIND_GPU instances; mlp's queue delay raised
# to 2 s, so that concurrent requests are merged on any host) in explicit control mode and its
# HTTP server on a free port, and checks over HTTP that: the models are READY; inference on the
# GPU instances equals the same requests answered by a second rtxd whose GPU is hidden
# (CUDA_VISIBLE_DEVICES="", so KIND_GPU falls back to the CPU), within f32 tolerance and exactly
# for the integer model; 16 concurrent single-row requests to mlp are merged into at most 4
# batches (the statistics before and after them) and equal one 16-row request; /metrics
# reports the models' device memory on cuda:0, and unloading every model returns it to 0.
# Without a GPU (no /dev/nvidia0) it fails, unless RTX_ALLOW_SKIP=gpu: then it says it
# skipped. $PYTHON needs numpy.
set -euo pipefail
source "$(dirname "$0")/daemon-common.sh"
require_gpu daemon-serving
src="$build/examples/models"
[ -d "$src" ] || { echo "daemon-serving: $src is missing (make all)" >&2; exit 2; }

cpu_work=$(mktemp -d)
cpu_pid=
on_exit() {
    [ -z "$cpu_pid" ] || kill -TERM "$cpu_pid" 2>/dev/null || true
    rm -rf "$cpu_work"
    daemon_cleanup
}
trap on_exit EXIT
models=$cpu_work/models
mkdir "$models"
for m in mlp simple transformer_block; do cp -r "$src/$m" "$models/"; done
python3 - "$models/mlp/config.json" <<'PY'
import json, sys
path = sys.argv[1]
cfg = json.load(open(path))
cfg["dynamic_batching"]["max_queue_delay_microseconds"] = 2000000
with open(path + ".new", "w") as f:
    f.write(json.dumps(cfg, indent=2) + "\n")
PY
mv "$models/mlp/config.json.new" "$models/mlp/config.json"

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}
gpu_http=$(free_port)
daemon_start --models.repository="$models" --models.control=explicit \
    --models.startup=mlp,simple,transformer_block --http.listen=127.0.0.1:$gpu_http
trap on_exit EXIT  # daemon_start set its own
gpu_pid=$pid
cpu_http=$(free_port)
CUDA_VISIBLE_DEVICES="" "$build/bin/rtxd" --server.listen=127.0.0.1:$(free_port) \
    --store.path="$cpu_work/rtxd.db" --log.format=json --models.repository="$models" \
    --models.control=explicit --models.startup=mlp,simple,transformer_block \
    --http.listen=127.0.0.1:$cpu_http 2>"$cpu_work/rtxd.log" &
cpu_pid=$!

rc=0
"${PYTHON:-python3}" - "$gpu_http" "$cpu_http" <<'PY' || rc=$?
import json, sys, threading, time, urllib.request, urllib.error
import numpy as np
gpu, cpu = (f"http://127.0.0.1:{p}" for p in sys.argv[1:3])
failed = []
def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failed.append(what)
def call(base, path, body=None, timeout=60):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError as e:
        return 0, str(e).encode()
for base in (gpu, cpu):
    end = time.time() + 120
    while time.time() < end and call(base, "/v2/health/ready")[0] != 200:
        time.sleep(0.2)
    check(call(base, "/v2/health/ready")[0] == 200, f"{base} ready")
def infer(base, model, inputs):
    body = {"inputs": [{"name": n, "shape": list(a.shape), "datatype": dt,
                        "data": a.ravel().tolist()} for n, (a, dt) in inputs.items()]}
    st, out = call(base, f"/v2/models/{model}/infer", body)
    if st != 200:
        return st, out.decode(errors="replace")
    return st, {o["name"]: np.array(o["data"]).reshape(o["shape"])
                for o in json.loads(out)["outputs"]}
rng = np.random.default_rng(5)
cases = {
    "mlp": {"x": (rng.standard_normal((8, 64)).astype(np.float32), "FP32")},
    "simple": {"INPUT0": (rng.integers(-100, 100, (4, 16)).astype(np.int32), "INT32"),
               "INPUT1": (rng.integers(-100, 100, (4, 16)).astype(np.int32), "INT32")},
}
st, cfg = call(gpu, "/v2/models/transformer_block/config")
if st == 200:
    c = json.loads(cfg)
    inp = c["input"][0]
    shape = ([2] if c.get("max_batch_size", 0) > 0 else []) + \
        [d if d > 0 else 16 for d in inp["dims"]]
    cases["transformer_block"] = {inp["name"]: (
        rng.standard_normal(shape).astype(np.float32), "FP32")}
check("transformer_block" in cases, f"transformer_block config: {st}")
for model, inputs in cases.items():
    g, c = infer(gpu, model, inputs), infer(cpu, model, inputs)
    ok = g[0] == 200 and c[0] == 200
    check(ok, f"{model} answered on both (gpu {g[0]}, cpu {c[0]})"
          + ("" if ok else f": {g[1] if g[0] != 200 else c[1]}"))
    if not ok:
        continue
    for name, a in c[1].items():
        b = g[1][name]
        if np.issubdtype(a.dtype, np.integer):
            check(np.array_equal(a, b), f"{model}/{name} identical on GPU and CPU")
        else:
            err = float(np.max(np.abs(a - b)) / (np.max(np.abs(a)) + 1e-12))
            check(err < 1e-3, f"{model}/{name} GPU vs CPU: max rel err {err:.2e}")
def mlp_stats():
    st, body = call(gpu, "/v2/models/mlp/stats")
    check(st == 200, f"mlp statistics: HTTP {st}")
    s = json.loads(body)["model_stats"][0] if st == 200 else {}
    return s.get("inference_count", -1), s.get("execution_count", -1)
x = rng.standard_normal((16, 64)).astype(np.float32)
res = [None] * 16
def one(i):
    res[i] = infer(gpu, "mlp", {"x": (x[i:i + 1], "FP32")})
ts = [threading.Thread(target=one, args=(i,)) for i in range(16)]
inf0, exe0 = mlp_stats()
[t.start() for t in ts]
[t.join(120) for t in ts]
inf1, exe1 = mlp_stats()
# 16 rows in at most 4 runs: the concurrent requests were merged (the queue delay of 2 s
# gives every one of them time to arrive; a batch of 16, a preferred size, runs at once)
check(min(inf0, exe0, inf1, exe1) >= 0 and inf1 - inf0 == 16 and 1 <= exe1 - exe0 <= 4,
      f"mlp batched: {inf1 - inf0} inferences in {exe1 - exe0} runs (16 in at most 4)")
whole = infer(gpu, "mlp", {"x": (x, "FP32")})
ok = all(r and r[0] == 200 for r in res) and whole[0] == 200
check(ok, "16 concurrent single-row mlp requests and one 16-row request answered")
if ok:
    rows = np.concatenate([r[1]["probs"] for r in res])
    err = float(np.max(np.abs(rows - whole[1]["probs"])))
    check(err < 1e-5, f"concurrent rows equal one 16-row request (max abs diff {err:.1e})")
def device_bytes():
    st, m = call(gpu, "/metrics")
    for line in m.decode().splitlines():
        if line.startswith('rtxd_model_memory_bytes{device="cuda:0"}'):
            return float(line.split()[-1])
    return None
before = device_bytes()
check(before is not None and before > 0, f"models hold {before} bytes on cuda:0")
for model in ("mlp", "simple", "transformer_block"):
    st, out = call(gpu, f"/v2/repository/models/{model}/unload", {})
    check(st == 200, f"unload {model}: {st} {out[:200]!r}")
end = time.time() + 30
while time.time() < end and device_bytes() not in (0, 0.0):
    time.sleep(0.2)
after = device_bytes()
check(after == 0, f"after unloading every model cuda:0 holds {after} bytes")
print(f"daemon-serving: {len(failed)} failed")
sys.exit(1 if failed else 0)
PY
kill -TERM $cpu_pid 2>/dev/null || true
wait $cpu_pid || { echo "daemon-serving: CPU rtxd exited $? after SIGTERM" >&2; rc=1; }
cpu_pid=
pid=$gpu_pid
daemon_stop daemon-serving
if [ $rc -ne 0 ]; then
    echo "--- GPU rtxd log (tail)"; tail -20 "$work/rtxd.log"
    echo "--- CPU rtxd log (tail)"; tail -20 "$cpu_work/rtxd.log"
    exit 1
fi
echo "daemon-serving: passed"
