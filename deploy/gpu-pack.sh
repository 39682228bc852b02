#!/usr/bin/env bash
# gpu-pack.sh OUT.tar.xz BINARY... - packs what `make test-gpu` and `make bench-gpu` need on
# the GPU machine into one compressed archive: the binaries (stripped), build/py and .gpu/lib
# (make gpu-bundle), and perf_analyzer in .gpu/tools when the venv has it. Unpacked in a copy of
# the working tree there (`tar xJf OUT.tar.xz`), it recreates build/bin, build/py and .gpu/lib; build/examples is made there with
# `build/bin/make-examples build/examples`. About 12 MiB instead of about 110 MiB unpacked,
# for links that limit what travels (docs/gpu.md).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 OUT.tar.xz BINARY..." >&2; exit 2; }
out=$1
shift
[ -d .gpu/lib ] || { echo "gpu-pack: .gpu/lib is missing: run make gpu-bundle first" >&2; exit 2; }
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/build/bin" "$stage/.gpu"
for b in "$@"; do
    [ -x "$b" ] || { echo "gpu-pack: $b is missing: build it first (make all)" >&2; exit 2; }
    strip -o "$stage/build/bin/$(basename "$b")" "$b"
done
py=${BUILD:-build}/py
[ -d "$py" ] && cp -a "$py" "$stage/build/"
cp -a .gpu/lib "$stage/.gpu/"
# Triton's perf_analyzer from the venv's tritonclient wheel, for the served benchmarks there
# (bench/bench_onnx_served.py), with the two libraries that machine lacks: libcudart.so.12
# (PyPI's nvidia-cuda-runtime-cu12) and libb64.so.0d (Debian's libb64-0d). Skipped, with a
# note, where the venv has none.
pa=${VENV:-build/venv}/bin/perf_analyzer
if [ -x "$pa" ]; then
    mkdir -p "$stage/.gpu/tools"
    strip -o "$stage/.gpu/tools/perf_analyzer" "$pa"
    cudart=$(ls "${VENV:-build/venv}"/lib/python3*/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12 \
        2>/dev/null | head -1)
    b64=$(ldconfig -p | awk '/libb64.so.0d /{print $NF; exit}')
    for lib in "$cudart" "$b64"; do
        [ -n "$lib" ] && [ -f "$lib" ] || { echo "gpu-pack: perf_analyzer needs libcudart.so.12" \
            "and libb64.so.0d: one is missing" >&2; exit 2; }
        cp -L "$lib" "$stage/.gpu/tools/"
    done
else
    echo "gpu-pack: $pa missing: the archive has no perf_analyzer (make bench-onnx-served needs it)"
fi
mkdir -p "$(dirname "$out")"
tar -C "$stage" -cf - build .gpu | xz -9 -T0 >"$out.tmp"
mv "$out.tmp" "$out"
echo "gpu-pack: $(du -h "$out" | cut -f1) in $out"
