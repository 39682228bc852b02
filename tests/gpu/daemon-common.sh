# shellcheck shell=bash
# daemon-common.sh - sourced (not run) by the daemon-level checks of `make test-gpu`
# (daemon-devices.sh, daemon-jobs.sh, daemon-serving.sh): where the build is, the rule for a
# host without a GPU (tests/skips.py: a failure unless RTX_ALLOW_SKIP=gpu), and starting and
# stopping one rtxd on a free loopback port with a temporary store.
# Sets repo and build ($RTX_BUILD, default build/); daemon_start sets work, port, addr and pid.

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${RTX_BUILD:-$repo/build}
work=
pid=

# allow_skip DEP: true when RTX_ALLOW_SKIP (comma-separated, spaces ignored) lists DEP as
# meant to be absent on this machine (tests/skips.py, tests/allow-skip.h).
allow_skip() {
    local list=",${RTX_ALLOW_SKIP:-},"
    list=${list// /}
    [[ $list == *",$1,"* ]]
}

# require_gpu NAME: returns when there is a GPU device node (/dev/nvidia0). Without one NAME
# fails (exit 1): make test-gpu is for a GPU machine. Only RTX_ALLOW_SKIP=gpu (this machine is
# meant to have no GPU) makes it say NAME skipped and exit 0.
require_gpu() {
    [ -e /dev/nvidia0 ] && return 0
    if allow_skip gpu; then
        echo "$1: skipped: no GPU device node (/dev/nvidia0); RTX_ALLOW_SKIP lists gpu"
        exit 0
    fi
    echo "$1: FAIL: no GPU device node (/dev/nvidia0); set RTX_ALLOW_SKIP=gpu where this" \
        "machine is meant to have no GPU" >&2
    exit 1
}

# The EXIT trap of daemon_start: stops rtxd (SIGTERM, SIGKILL after 10 s) and removes $work.
daemon_cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    [ -z "$work" ] || rm -rf "$work"
}

# daemon_start [RTXD-ARGS...]: starts $build/bin/rtxd in the background with gRPC on a free
# loopback port (addr=127.0.0.1:port), no HTTP listener, a store in a new temporary folder
# $work and JSON logs in $work/rtxd.log; the extra arguments follow. Installs daemon_cleanup
# as the EXIT trap. The caller waits until rtxd answers.
daemon_start() {
    work=$(mktemp -d)
    trap daemon_cleanup EXIT
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')
    addr=127.0.0.1:$port
    "$build/bin/rtxd" --server.listen="$addr" --http.listen= --store.path="$work/rtxd.db" \
        --log.format=json "$@" 2>"$work/rtxd.log" &
    pid=$!
}

# daemon_stop NAME: SIGTERM, then exits 1 (naming NAME) unless rtxd exits with status 0.
daemon_stop() {
    kill -TERM "$pid"
    local rc=0
    wait "$pid" || rc=$?
    pid=
    [ "$rc" -eq 0 ] || { echo "$1: rtxd exited $rc after SIGTERM" >&2; exit 1; }
}
