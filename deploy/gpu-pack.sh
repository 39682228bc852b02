#!/usr/bin/env bash
# gpu-pack.sh OUT.tar.xz BINARY... - packs what `make test-gpu` and `make bench-gpu` need on
# the GPU machine into one compressed archive: the binaries (stripped), build/py and .gpu/lib
# (make gpu-bundle). Unpacked in a copy of the working tree there (`tar xJf OUT.tar.xz`), it
# recreates build/bin, build/py and .gpu/lib; build/examples is made there with
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
mkdir -p "$(dirname "$out")"
tar -C "$stage" -cf - build .gpu | xz -9 -T0 >"$out.tmp"
mv "$out.tmp" "$out"
echo "gpu-pack: $(du -h "$out" | cut -f1) in $out"
