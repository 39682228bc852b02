#!/usr/bin/env bash
# gpu-bundle.sh DEST BINARY... - copies into DEST the shared libraries the GPU test machine
# lacks (see docs/gpu.md): every library the binaries resolve (ldd) under /lib/x86_64-linux-gnu
# or /usr/lib/x86_64-linux-gnu, except glibc's own, libgcc_s and libstdc++, which the machine
# has in a newer version, and the CUDA, NCCL and cuDNN libraries, which it has for its driver.
# Each is copied under the name the binaries ask for (its soname). DEST is emptied first, so
# it holds exactly what the current binaries need.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 DEST BINARY..." >&2; exit 2; }
dest=$1
shift
for b in "$@"; do
    [ -x "$b" ] || { echo "gpu-bundle: $b is missing: build it first (make all)" >&2; exit 2; }
done

skip='^(libc|libm|libdl|libpthread|librt|libresolv|libutil|ld-linux-x86-64|libgcc_s|libstdc\+\+'
skip+='|libcuda|libcudart|libcublas|libcublasLt|libnvrtc|libnccl|libcudnn[a-z_]*'
skip+='|libnvidia-[a-z-]+)'
skip+='\.so'

rm -rf "$dest"
mkdir -p "$dest"
declare -A seen=()
n=0
while read -r name path; do
    [ -n "${seen[$name]:-}" ] && continue
    seen[$name]=1
    case "$path" in
        /lib/x86_64-linux-gnu/* | /usr/lib/x86_64-linux-gnu/*) ;;
        *) continue ;;
    esac
    [[ $name =~ $skip ]] && continue
    cp -L "$path" "$dest/$name"
    n=$((n + 1))
done < <(for b in "$@"; do
             ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }'
         done | sort -u)
echo "gpu-bundle: $n libraries, $(du -sh "$dest" | cut -f1) in $dest"
