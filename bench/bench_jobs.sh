#!/usr/bin/env bash
# bench_jobs.sh - rtxd's job round trip next to a bare gRPC echo, in one run on loopback.
#
# Starts build/bin/rtx-echo-server (port chosen by the kernel, read from its "port N" line)
# and build/bin/rtxd (a free loopback port, no HTTP server, a store in a temporary folder), runs
# build/bin/rtx-bench-jobs against both - calls or jobs per second, p50 and p99 at 1 and 16
# in flight, in windows that alternate the two servers, and the judged ratio rtxd p50 / echo
# p50 (target <= 2x) - then stops both servers and removes the temporary folder, also when
# interrupted.
#
# Usage: bench_jobs.sh [--report]   (--report, or RTX_BENCH_REPORT=1: print the verdicts
# without judging)
# Environment: RTX_BUILD (build folder, default ./build), RTX_BENCH_SECONDS (per window,
# default 1), RTX_BENCH_WINDOWS (windows per server and concurrency, default 5),
# RTX_BENCH_CONCURRENCY (default 1,16), RTX_BENCH_RTXD_ARGS (more rtxd flags, e.g.
# --store.sync=normal), RTX_BENCH_REPORT. Exit status: the client's (0 met or --report, 1 a
# target missed or a phase failed, 2 bad arguments), 1 when a server does not start.
set -euo pipefail

build=${RTX_BUILD:-build}
seconds=${RTX_BENCH_SECONDS:-1}
windows=${RTX_BENCH_WINDOWS:-5}
report=()
case "${RTX_BENCH_REPORT:-}" in "" | 0) ;; *) report=(--report) ;; esac
for arg in "$@"; do
    case "$arg" in
    --report) report=(--report) ;;
    *)
        echo "usage: bench_jobs.sh [--report]" >&2
        exit 2
        ;;
    esac
done
concurrency=${RTX_BENCH_CONCURRENCY:-1,16}
for bin in rtx-echo-server rtx-bench-jobs rtxd; do
    if [ ! -x "$build/bin/$bin" ]; then
        echo "bench_jobs.sh: $build/bin/$bin is missing (make $build/bin/$bin)" >&2
        exit 2
    fi
done

tmp=$(mktemp -d /tmp/rtx-bench-jobs.XXXXXX)
echo_pid=
rtxd_pid=

# Stops one server: SIGTERM, then SIGKILL if it has not exited within 10 s.
stop() {
    local pid=$1
    [ -n "$pid" ] || return 0
    kill -TERM "$pid" 2>/dev/null || return 0
    for _ in $(seq 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        echo "bench_jobs.sh: pid $pid ignored SIGTERM; killing it" >&2
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}

cleanup() {
    stop "$echo_pid"
    stop "$rtxd_pid"
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Waits until something accepts connections on 127.0.0.1:$1 (up to 10 s).
wait_listening() {
    for _ in $(seq 100); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    return 1
}

# A loopback port nobody listens on now (the kernel's pick for an ephemeral bind).
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); \
print(s.getsockname()[1])'
}

"$build/bin/rtx-echo-server" 127.0.0.1:0 >"$tmp/echo.out" 2>"$tmp/echo.err" &
echo_pid=$!
echo_port=
for _ in $(seq 100); do
    echo_port=$(sed -n 's/^port \([0-9][0-9]*\)$/\1/p' "$tmp/echo.out")
    [ -n "$echo_port" ] && break
    kill -0 "$echo_pid" 2>/dev/null || break
    sleep 0.1
done
if [ -z "$echo_port" ]; then
    echo "bench_jobs.sh: the echo server did not start:" >&2
    cat "$tmp/echo.err" >&2
    exit 1
fi

rtxd_port=$(free_port)
# --http.listen= : no HTTP server, so parallel runs never collide on its default port 8000
"$build/bin/rtxd" --server.listen="127.0.0.1:$rtxd_port" --http.listen= \
    --store.path="$tmp/rtxd.db" --log.level=warn --drain.grace_ms=2000 \
    ${RTX_BENCH_RTXD_ARGS:-} >"$tmp/rtxd.log" 2>&1 &
rtxd_pid=$!
if ! wait_listening "$rtxd_port"; then
    echo "bench_jobs.sh: rtxd did not listen on 127.0.0.1:$rtxd_port; its log:" >&2
    tail -n 20 "$tmp/rtxd.log" >&2
    exit 1
fi

echo "bench_jobs.sh: echo server on 127.0.0.1:$echo_port, rtxd on 127.0.0.1:$rtxd_port," \
     "$(nproc) CPUs"
status=0
timeout 300 "$build/bin/rtx-bench-jobs" --echo "127.0.0.1:$echo_port" \
    --rtxd "127.0.0.1:$rtxd_port" --seconds "$seconds" --windows "$windows" \
    --concurrency "$concurrency" ${report[@]+"${report[@]}"} || status=$?
if [ "$status" -ne 0 ] && [ -s "$tmp/rtxd.log" ]; then
    echo "bench_jobs.sh: rtxd's log (last lines):" >&2
    tail -n 20 "$tmp/rtxd.log" >&2
fi
exit "$status"
