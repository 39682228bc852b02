#!/usr/bin/env python3
"""
thread_profile.py - where a running rtxd spends its CPU while a benchmark drives it: per
thread (grouped by the names rtxd gives its threads, e.g. "rtx-cq", "rtx-inst"), the share
of one core each used over a window, read from /proc/PID/task/*/stat (utime + stime); and,
when a debugger is named (RTX_PROFILE_GDB=gdb or cuda-gdb; the GPU machine has only
cuda-gdb), a sampled profile: RTX_PROFILE_SAMPLES (10) stack dumps of every thread ("thread apply all bt"), the
innermost frames counted per thread group, so that the bound of a throughput ceiling shows as
the thread near 100% and the frames it sits in.

Used by bench_serving.py (RTX_BENCH_SERVING_PROFILE=1); runnable alone:
    python3 bench/thread_profile.py PID SECONDS
"""
import collections
import os
import re
import shutil
import subprocess
import sys
import threading
import time

TICK = os.sysconf("SC_CLK_TCK")


def _group(name):
    """The thread group of a thread name: trailing digits and separators dropped."""
    return re.sub(r"[-_:.]?\d+$", "", name) or name


def snapshot(pid):
    """{tid: (name, cpu seconds)} of every thread of pid now."""
    out = {}
    base = f"/proc/{pid}/task"
    for tid in os.listdir(base):
        try:
            with open(f"{base}/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # the thread ended
        # comm is in parentheses and may hold spaces; the fields after it are space-separated
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        rest = stat[stat.rindex(")") + 2:].split()
        out[int(tid)] = (name, (int(rest[11]) + int(rest[12])) / TICK)
    return out


def cpu_table(before, after, seconds):
    """[(group, threads, % of one core summed, busiest thread's %)] busiest first."""
    groups = collections.defaultdict(list)
    for tid, (name, cpu) in after.items():
        used = cpu - before.get(tid, (name, 0.0))[1]
        groups[_group(name)].append(100.0 * used / seconds)
    rows = [(g, len(v), sum(v), max(v)) for g, v in groups.items()]
    return sorted(rows, key=lambda r: -r[2])


# a thread stopped in one of these is waiting, not working: counted apart, not listed
_IDLE = re.compile(r"futex_abstimed_wait|futex_wait|epoll_wait|Waiter::Wait|pthread_cond_\w*wait|"
                   r"clock_nanosleep|__GI___nanosleep|__GI___poll|__libc_accept")
_FRAME = re.compile(r"^#\d+\s+(?:0x[0-9a-f]+ in )?([A-Za-z_][\w:.<>~]*)")
_THREAD = re.compile(r'^Thread \d+ \(.*?(?:LWP (\d+))\)(?: "([^"]*)")?')


def stacks_once(debugger, pid, depth=6):
    """[(thread name, [frames innermost first])] from one stop of every thread."""
    argv = [debugger, "-p", str(pid), "-batch", "-nx", "-ex", "set pagination off",
            "-ex", f"thread apply all bt {depth}"]
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return []
    threads, cur = [], None
    for line in p.stdout.splitlines():
        m = _THREAD.match(line)
        if m:
            cur = (m.group(2) or m.group(1) or "?", [])
            threads.append(cur)
            continue
        m = _FRAME.match(line.strip())
        if m and cur is not None:
            cur[1].append(m.group(1))
    return threads


class Profile:
    """CPU per thread group over [start, stop], and stack samples taken meanwhile when a
    debugger is named."""

    def __init__(self, pid, debugger=None, samples=None, interval=0.3):
        self.pid = pid
        self.debugger = debugger if debugger and shutil.which(debugger) else None
        if samples is None:
            samples = int(os.environ.get("RTX_PROFILE_SAMPLES", "10"))
        self.samples, self.interval = samples, interval
        self.frames = collections.Counter()
        self.idle = 0
        self.n_stacks = 0
        self._stop = threading.Event()
        self._thread = None

    def start(self):
        self.t0, self.before = time.monotonic(), snapshot(self.pid)
        if self.debugger:
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()

    def _sample(self):
        time.sleep(self.interval)
        for _ in range(self.samples):
            if self._stop.is_set():
                return
            for name, frames in stacks_once(self.debugger, self.pid):
                if not frames:
                    continue
                where = " <- ".join(frames[:3])
                if _IDLE.search(where):
                    self.idle += 1
                else:
                    self.frames[(_group(name), where)] += 1
            self.n_stacks += 1
            time.sleep(self.interval)

    def stop(self):
        after, seconds = snapshot(self.pid), time.monotonic() - self.t0
        self._stop.set()
        if self._thread:
            self._thread.join()
        return cpu_table(self.before, after, seconds), seconds

    def report(self, table, seconds, top=25):
        lines = [f"rtxd CPU by thread group over {seconds:.1f} s (100% = one core busy):",
                 f"  {'threads':28} {'n':>3} {'sum %':>7} {'busiest %':>9}"]
        for g, n, total, busiest in table:
            if total >= 0.5:
                lines.append(f"  {g:28} {n:>3} {total:>7.1f} {busiest:>9.1f}")
        if self.debugger:
            lines.append(f"stack samples ({self.n_stacks} stops of every thread, "
                         f"{self.debugger}; {self.idle} thread stacks waiting, not listed); "
                         f"working threads' innermost three frames, most frequent first:")
            for (g, f), k in self.frames.most_common(top):
                lines.append(f"  {k:>4}  {g:20} {f}")
        elif os.environ.get("RTX_PROFILE_GDB"):
            lines.append(f"(no stack samples: {os.environ['RTX_PROFILE_GDB']} not found)")
        return "\n".join(lines)


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: thread_profile.py PID SECONDS")
    prof = Profile(int(sys.argv[1]), os.environ.get("RTX_PROFILE_GDB"))
    prof.start()
    time.sleep(float(sys.argv[2]))
    print(prof.report(*prof.stop()))


if __name__ == "__main__":
    main()
