#!/usr/bin/env bash
# daemon-devices.sh - the daemon-level GPU check of `make test-gpu`: starts rtxd from
# $RTX_BUILD (default build/) on a free loopback port with a temporary store, and asserts
# through `rtxctl --json devices` that the CPU and every GPU are listed, each GPU healthy with
# SMs, memory and the expected compute capability (RTX_EXPECT_CC, default 9.0: the H200 of
# docs/gpu.md), as many as nvidia-smi sees. Also checks that rtxd logged one line per GPU.
# Without a GPU (no /dev/nvidia0) it fails, unless RTX_ALLOW_SKIP=gpu: then it says it skipped.
set -euo pipefail
source "$(dirname "$0")/daemon-common.sh"
expect_cc=${RTX_EXPECT_CC:-9.0}
require_gpu daemon-devices
for b in rtxd rtxctl; do
    [ -x "$build/bin/$b" ] || { echo "daemon-devices: $build/bin/$b is missing" >&2; exit 2; }
done

daemon_start
ok=
for _ in $(seq 300); do
    if "$build/bin/rtxctl" --address 127.0.0.1:$port --timeout 2000 --json devices \
        >"$work/devices.json" \
        2>"$work/rtxctl.err"; then
        ok=1
        break
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
done
if [ -z "$ok" ]; then
    echo "daemon-devices: rtxd did not answer on port $port" >&2
    cat "$work/rtxctl.err" "$work/rtxd.log" >&2
    exit 1
fi
echo "--- rtxd log"
cat "$work/rtxd.log"
echo "--- rtxctl devices"
"$build/bin/rtxctl" --address 127.0.0.1:$port devices

n_smi=
if command -v nvidia-smi >/dev/null; then
    n_smi=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
fi
python3 - "$work/devices.json" "$work/rtxd.log" "$expect_cc" "${n_smi:-}" <<'PY'
import json, sys
devs = json.load(open(sys.argv[1]))
logs = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
expect_cc, n_smi = sys.argv[3], sys.argv[4]
failed = []
def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failed.append(what)
check(any(d["kind"] == "cpu" for d in devs), "the CPU is listed")
gpus = [d for d in devs if d["kind"] == "cuda"]
check(len(gpus) > 0, f"{len(gpus)} cuda device(s) listed")
if n_smi:
    check(len(gpus) == int(n_smi), f"as many as nvidia-smi lists ({n_smi})")
for d in gpus:
    i = d["index"]
    check(d["healthy"], f"cuda {i} ({d['name']}) healthy {d['detail']!r}")
    check(d["compute_capability"] == expect_cc,
          f"cuda {i}: compute capability {d['compute_capability']} == {expect_cc}")
    check(d["sm_count"] > 0, f"cuda {i}: {d['sm_count']} SMs")
    check(d["memory_bytes"] >= 1 << 30, f"cuda {i}: {d['memory_bytes']} bytes of memory")
lines = [l for l in logs if l.get("msg") == "cuda device"]
check(len(lines) == len(gpus), f"rtxd logged {len(lines)} 'cuda device' line(s)")
check(not any(l.get("msg", "").startswith("no CUDA device") for l in logs),
      "rtxd did not log 'no CUDA device'")
print(f"daemon-devices: {len(failed)} failed")
sys.exit(1 if failed else 0)
PY
daemon_stop daemon-devices
echo "daemon-devices: passed"
