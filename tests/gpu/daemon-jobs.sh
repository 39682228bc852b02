#!/usr/bin/env bash
# daemon-jobs.sh - jobs through rtxd on the GPU, part of `make test-gpu`: starts rtxd from
# $RTX_BUILD (default build/) on a free loopback port with a temporary store, submits the
# example graphs (mlp, transformer_block; built by `make all`) with the same random inputs
# once with --device cuda:0 and once with --device cpu through `rtxctl submit --output-dir`,
# and checks that every output agrees within a relative tolerance (f32; TF32 is off), that the
# jobs record where they ran, that a job naming no device went to a GPU (jobs.device = auto),
# that Admin.Devices shows the GPU's worker and that `rtxctl pools` reports the GPU pool the
# jobs used. Without a GPU (no /dev/nvidia0) it fails, unless RTX_ALLOW_SKIP=gpu: then it says
# it skipped.
# $PYTHON (default python3) needs numpy.
set -euo pipefail
source "$(dirname "$0")/daemon-common.sh"
require_gpu daemon-jobs
for f in bin/rtxd bin/rtxctl examples/mlp.rtxg examples/transformer_block.rtxg; do
    [ -e "$build/$f" ] || { echo "daemon-jobs: $build/$f is missing (make all)" >&2; exit 2; }
done

daemon_start
ctl() { "$build/bin/rtxctl" --address $addr --timeout 60000 "$@"; }
for _ in $(seq 300); do
    ctl --json health >/dev/null 2>&1 && break
    kill -0 "$pid" 2>/dev/null || { cat "$work/rtxd.log" >&2; exit 1; }
    sleep 0.1
done

for g in mlp transformer_block; do
    for dev in cuda:0 cpu auto; do
        out="$work/$g-${dev/:/_}"
        ctl --json submit "$build/examples/$g.rtxg" --random-inputs --seed 7 --device $dev \
            --output-dir "$out" >"$out.json" || echo "daemon-jobs: $g on $dev: rtxctl exit $?"
    done
done
echo "--- rtxctl devices"
ctl devices
echo "--- rtxctl pools"
ctl pools
ctl --json pools >"$work/pools.json"
ctl --json devices >"$work/devices.json"

"${PYTHON:-python3}" - "$work" <<'PY'
import json, os, sys
import numpy as np
work = sys.argv[1]
failed = []
def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failed.append(what)
for g in ("mlp", "transformer_block"):
    jobs = {}
    for dev in ("cuda:0", "cpu", "auto"):
        try:
            jobs[dev] = json.load(open(f"{work}/{g}-{dev.replace(':', '_')}.json"))["job"]
        except (ValueError, KeyError) as e:
            jobs[dev] = {"state": "not submitted", "reason": repr(e), "device": "",
                         "requested_device": ""}
        check(jobs[dev]["state"] == "succeeded", f"{g} on {dev}: {jobs[dev]['state']} "
              f"{jobs[dev]['reason']!r}")
    print(f"     {g}: run_ms " + ", ".join(f"{d} {jobs[d].get('run_ms', 0):.3f}"
                                         for d in jobs))
    check(jobs["cuda:0"]["device"] == "cuda:0", f"{g}: the cuda:0 job ran on "
          f"{jobs['cuda:0']['device']}")
    check(jobs["cpu"]["device"] == "cpu", f"{g}: the cpu job ran on {jobs['cpu']['device']}")
    check(jobs["auto"]["device"].startswith("cuda:") and
          jobs["auto"]["requested_device"] == "auto",
          f"{g}: the auto job ran on {jobs['auto']['device']}")
    gdir, cdir = f"{work}/{g}-cuda_0", f"{work}/{g}-cpu"
    names = sorted(os.listdir(cdir)) if os.path.isdir(cdir) else []
    gnames = sorted(os.listdir(gdir)) if os.path.isdir(gdir) else []
    check(bool(names) and names == gnames, f"{g}: outputs {names} and {gnames}")
    for n in names if names == gnames else []:
        a, b = np.load(f"{gdir}/{n}"), np.load(f"{cdir}/{n}")
        err = float(np.max(np.abs(a - b) / (1e-4 + np.abs(b)))) if a.size else 0.0
        check(a.shape == b.shape and err < 1e-2,
              f"{g}/{n}: cuda:0 vs cpu, shape {a.shape}, max rel err {err:.2e} (< 1e-2)")
pools = json.load(open(f"{work}/pools.json"))
gpu = [p for p in pools if p["device"] == "cuda:0"]
check(len(gpu) == 1 and gpu[0]["allocs"] > 0 and gpu[0]["reserved_bytes"] > 0 and
      gpu[0]["healthy"], f"pools: cuda:0 {gpu}")
check(any(p["device"] == "cuda:0/pinned" for p in pools), "pools: cuda:0/pinned listed")
check(pools[-1]["device"] == "cpu" and pools[-1]["allocated_peak_bytes"] > 0,
      "pools: the cpu row has the cpu jobs' peak")
devs = json.load(open(f"{work}/devices.json"))
cuda = [d for d in devs if d["kind"] == "cuda"]
check(bool(cuda) and all(d["workers"] >= 1 and d["healthy"] for d in cuda),
      f"devices: a cuda row, each healthy with a worker: {cuda}")
print(f"daemon-jobs: {len(failed)} failed")
sys.exit(1 if failed else 0)
PY
daemon_stop daemon-jobs
echo "daemon-jobs: passed"
