#!/usr/bin/env bash
# Installs every Debian package that building and testing rtxd needs (curl: the serving
# tests' HTTP/2 client; libb64-0d: perf_analyzer's). Idempotent; prints nothing when
# everything is already there. The CUDA toolkit (nvcc, cudart) is not a Debian package here:
# the machine provides it in /usr/local/cuda (or CUDA_HOME), and the Makefile stops with a
# message when nvcc is missing.
set -euo pipefail
pkgs=(build-essential pkg-config protobuf-c-compiler libprotobuf-c-dev check libsubunit-dev
      libopenblas-dev libgrpc-dev libsqlite3-dev libssl-dev libinih-dev libuv1-dev
      libh2o-dev libjansson-dev libpcre2-dev libutf8proc-dev libonnx-dev libb64-0d
      python3 python3-venv python3-pip
      curl
      valgrind)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "install-deps: installing ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >&2
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
