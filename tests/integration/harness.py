"""
harness - what the integration tests share: starting and stopping real rtxd processes, a
grpcio client of rtx.v1.Jobs / rtx.v1.Admin built on the generated stubs, the graphs the tests
submit (built with tests/interop/rtxgraph.py's GraphBuilder) and checks of results against
rtxgraph's NumPy reference interpreter.

Every daemon runs on a free loopback port with its own temporary store and JSON logs (its
stderr) captured to a file; every process started here is killed when the test process exits,
whatever happens to the test. Nothing is waited on without a time limit.
"""

import atexit
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "interop"))

import rtxgraph as rg  # noqa: E402  (puts the generated code's folder on sys.path)
from rtxgraph import GraphBuilder  # noqa: E402,F401

import grpc  # noqa: E402
from rtx.v1 import admin_pb2, admin_pb2_grpc, graph_pb2, jobs_pb2, jobs_pb2_grpc  # noqa: E402,F401

SANITIZER_MARKS = rg.SANITIZER_MARKS

# Sanitizer builds run several times slower: every time limit here is multiplied by SLOW.
SLOW = float(os.environ.get("RTX_TEST_SLOW") or
             (3.0 if "asan" in rg.build_dir().name else 1.0))
RPC_TIMEOUT = 15.0 * SLOW
START_TIMEOUT = 20.0 * SLOW

QUEUED, RUNNING = jobs_pb2.JOB_STATE_QUEUED, jobs_pb2.JOB_STATE_RUNNING
SUCCEEDED, FAILED = jobs_pb2.JOB_STATE_SUCCEEDED, jobs_pb2.JOB_STATE_FAILED
CANCELLED, EXPIRED = jobs_pb2.JOB_STATE_CANCELLED, jobs_pb2.JOB_STATE_EXPIRED
TERMINAL = (SUCCEEDED, FAILED, CANCELLED, EXPIRED)
RERUN, FAIL = jobs_pb2.RESTART_POLICY_RERUN, jobs_pb2.RESTART_POLICY_FAIL
POLICY_DEFAULT = jobs_pb2.RESTART_POLICY_UNSPECIFIED
SERVING = admin_pb2.HealthResponse.SERVING
NOT_SERVING = admin_pb2.HealthResponse.NOT_SERVING


def state_name(s):
    return jobs_pb2.JobState.Name(s) if s in jobs_pb2.JobState.values() else str(s)


def states(jobs):
    return [state_name(j.state) for j in jobs]


def now_ms():
    return int(time.time() * 1000)


def bin_path(name):
    return rg.build_dir() / "bin" / name


def need_binary(name):
    p = bin_path(name)
    if not (p.is_file() and os.access(p, os.X_OK)):
        pytest.fail(f"{p} is missing: build it first (make all)", pytrace=False)
    return p


def clean_env(extra=None):
    """The environment for rtxd/rtxctl: no proxies (loopback only), no RTXD_* settings that
    the developer's shell may hold, leak checking on in sanitizer builds (unless set)."""
    e = {k: v for k, v in os.environ.items()
         if not k.lower().endswith("_proxy") and not k.startswith("RTXD_")}
    e.setdefault("ASAN_OPTIONS", "detect_leaks=1")
    if extra:
        e.update(extra)
    return e


# ------------------------------------------------------------------------------------------
# Processes: never leave one behind
# ------------------------------------------------------------------------------------------

_LIVE = set()
_LIVE_LOCK = threading.Lock()
# rtxd and rtxctl get SIGKILL when the test process dies, whatever kills it: setpriv sets the
# parent-death signal and execs the program (same pid). Not a preexec_fn: a fork of this
# process runs grpcio's fork handlers, and its poller thread then aborts the child on the fds
# that close_fds closes before exec ("epoll_wait error: Bad file descriptor", SIGABRT).
_SETPRIV = shutil.which("setpriv")


def with_pdeathsig(cmd):
    cmd = [str(c) for c in cmd]
    return [_SETPRIV, "--pdeathsig", "KILL", "--"] + cmd if _SETPRIV else cmd


def popen(cmd, **kw):
    p = subprocess.Popen(with_pdeathsig(cmd), stdin=subprocess.DEVNULL, **kw)
    with _LIVE_LOCK:
        _LIVE.add(p)
    return p


def reap(p, timeout):
    try:
        rc = p.wait(timeout)
    finally:
        if p.poll() is not None:
            with _LIVE_LOCK:
                _LIVE.discard(p)
    return rc


def kill_all():
    with _LIVE_LOCK:
        procs = list(_LIVE)
    for p in procs:
        if p.poll() is None:
            try:
                p.kill()
            except OSError:
                pass
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            pass
        with _LIVE_LOCK:
            _LIVE.discard(p)


atexit.register(kill_all)


def free_port():
    """A loopback port nobody listens on right now (the kernel's choice, so two xdist
    workers do not pick the same one)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sanitizer_report(text):
    for m in SANITIZER_MARKS:
        i = text.find(m)
        if i >= 0:
            return text[max(0, i - 200):i + 3000]
    return None


def tail(text, n=3000):
    return text if len(text) <= n else "..." + text[-n:]


# ------------------------------------------------------------------------------------------
# The client
# ------------------------------------------------------------------------------------------

CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
    ("grpc.enable_http_proxy", 0),
    ("grpc.enable_retries", 0),
    # reconnect fast (a daemon that is starting, or restarted on the same port)
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 250),
]


def feeds_to_tensors(feeds):
    out = []
    for name, a in feeds.items():
        if isinstance(a, graph_pb2.Tensor):
            t = graph_pb2.Tensor()
            t.CopyFrom(a)
            t.name = name
            out.append(t)
        elif isinstance(a, tuple):  # (array, rtx dtype name)
            out.append(rg.make_tensor(name, a[0], a[1]))
        else:
            out.append(rg.make_tensor(name, a))
    return out


def graph_message(graph):
    if isinstance(graph, GraphBuilder):
        return graph.g
    if isinstance(graph, (bytes, bytearray)):
        g = graph_pb2.Graph()
        g.ParseFromString(bytes(graph))
        return g
    return graph


def submit_request(graph, feeds=None, labels=None, **fields):
    req = jobs_pb2.SubmitRequest(**fields)
    if graph is not None:
        req.graph.CopyFrom(graph_message(graph))
    req.inputs.extend(feeds_to_tensors(feeds or {}))
    for k, v in (labels or {}).items():
        req.labels.add(key=k, value=v)
    return req


class Client:
    """One channel to one rtxd, with the Jobs and Admin stubs and the calls the tests use.
    Every call has a deadline."""

    def __init__(self, address, daemon=None):
        self.address = address
        self.daemon = daemon
        self.channel = grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
        self.jobs = jobs_pb2_grpc.JobsStub(self.channel)
        self.admin = admin_pb2_grpc.AdminStub(self.channel)

    def close(self):
        self.channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    # --- Admin
    def health(self, timeout=RPC_TIMEOUT):
        return self.admin.Health(admin_pb2.HealthRequest(), timeout=timeout)

    def status(self):
        return self.admin.Status(admin_pb2.StatusRequest(), timeout=RPC_TIMEOUT)

    def config(self):
        return {s.name: s for s in
                self.admin.Config(admin_pb2.ConfigRequest(), timeout=RPC_TIMEOUT).settings}

    # --- Jobs
    def submit(self, graph, feeds=None, labels=None, **fields):
        """Submits; returns the SubmitResponse."""
        req = submit_request(graph, feeds, labels, **fields)
        return self.jobs.Submit(req, timeout=RPC_TIMEOUT)

    def submit_id(self, graph, feeds=None, labels=None, **fields):
        return self.submit(graph, feeds, labels, **fields).job_id

    def get(self, job_id):
        return self.jobs.Get(jobs_pb2.GetJobRequest(job_id=job_id), timeout=RPC_TIMEOUT)

    def cancel(self, job_id):
        return self.jobs.Cancel(jobs_pb2.CancelJobRequest(job_id=job_id), timeout=RPC_TIMEOUT)

    def list(self, **fields):
        labels = fields.pop("labels", None) or {}
        req = jobs_pb2.ListJobsRequest(**fields)
        for k, v in labels.items():
            req.labels.add(key=k, value=v)
        return self.jobs.List(req, timeout=RPC_TIMEOUT)

    def list_all(self, page_size=100, max_pages=10000, page_token="", **fields):
        """Every page (from page_token on); returns (jobs in order, number of pages)."""
        out, token, pages = [], page_token, 0
        while True:
            r = self.list(page_size=page_size, page_token=token, **fields)
            pages += 1
            out.extend(r.jobs)
            token = r.next_page_token
            if not token:
                return out, pages
            assert pages < max_pages, "List never ends: next_page_token keeps coming"

    def wait_stream(self, job_id, timeout=60.0):
        """The whole Wait stream: every Job message until the server ends it."""
        msgs = []
        call = self.jobs.Wait(jobs_pb2.WaitJobRequest(job_id=job_id), timeout=timeout * SLOW)
        try:
            for j in call:
                msgs.append(j)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise AssertionError(
                    f"Wait({job_id}) did not end within {timeout * SLOW:.0f}s; states so far "
                    f"{states(msgs)}{self.daemon.log_excerpt() if self.daemon else ''}") from None
            raise
        return msgs

    def wait(self, job_id, timeout=60.0):
        """The job's final state via Wait; asserts the stream ended on a terminal state."""
        msgs = self.wait_stream(job_id, timeout)
        assert msgs, f"Wait({job_id}) ended without a message"
        last = msgs[-1]
        assert last.state in TERMINAL, (
            f"Wait({job_id}) ended on non-terminal state {state_name(last.state)}; "
            f"states {states(msgs)}")
        return last

    def wait_for_state(self, job_id, state, timeout=30.0):
        """Reads the Wait stream until the job is in `state` (or past it); returns that Job
        and cancels the stream."""
        call = self.jobs.Wait(jobs_pb2.WaitJobRequest(job_id=job_id), timeout=timeout * SLOW)
        seen = []
        try:
            for j in call:
                seen.append(j)
                if j.state == state:
                    return j
                if j.state in TERMINAL:
                    raise AssertionError(f"job {job_id} reached {state_name(j.state)} "
                                         f"({j.reason!r}) before {state_name(state)}")
        finally:
            call.cancel()
        raise AssertionError(f"job {job_id}: Wait ended before {state_name(state)}: "
                             f"{states(seen)}")

    def poll_until(self, job_id, pred, timeout=30.0, what="condition"):
        end = time.monotonic() + timeout * SLOW
        while True:
            j = self.get(job_id)
            if pred(j):
                return j
            if time.monotonic() > end:
                raise AssertionError(f"job {job_id}: {what} not reached within "
                                     f"{timeout * SLOW:.0f}s; last {state_name(j.state)}")
            time.sleep(0.01)

    def outputs(self, job_id):
        """GetOutputs as {name: rtxgraph.V} in response order (and the raw tensors)."""
        r = self.jobs.GetOutputs(jobs_pb2.GetOutputsRequest(job_id=job_id), timeout=RPC_TIMEOUT)
        return {t.name: rg.tensor_from_proto(t) for t in r.outputs}, list(r.outputs)

    def run(self, graph, feeds=None, timeout=60.0, **fields):
        """Submit, wait, fetch outputs; asserts success. Returns (job, {name: V})."""
        jid = self.submit_id(graph, feeds, **fields)
        job = self.wait(jid, timeout)
        assert job.state == SUCCEEDED, (
            f"job {jid} ended {state_name(job.state)}: {job.reason!r}"
            f"{self.daemon.log_excerpt() if self.daemon else ''}")
        outs, _ = self.outputs(jid)
        return job, outs


# ------------------------------------------------------------------------------------------
# Daemons
# ------------------------------------------------------------------------------------------

class Daemon:
    """One rtxd: `start()` (waits for Health SERVING), `stop()` (SIGTERM, asserts exit 0 and
    no sanitizer report), `kill9()`, `restart()` on the same store. Each start logs to its
    own file dir/rtxd.N.log (stderr: the JSON log) and dir/rtxd.N.out (stdout)."""

    def __init__(self, workdir, flags=(), workers=1, cpu_threads=1, store=None, port=None,
                 config=None, env=None, log_format="json"):
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.store = Path(store) if store else self.dir / "rtxd.db"
        self.flags = [str(f) for f in flags]
        self.workers, self.cpu_threads = workers, cpu_threads
        self.fixed_port = port
        self.port = None
        self.config = config
        self.env = env or {}
        self.log_format = log_format
        self.proc = None
        self.starts = 0
        self.log_path = None
        self.started_at_ms = 0
        self._client = None

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    def argv(self, port):
        a = [need_binary("rtxd"), f"--server.listen=127.0.0.1:{port}",
             f"--store.path={self.store}", f"--log.format={self.log_format}",
             f"--jobs.workers={self.workers}", f"--jobs.cpu_threads={self.cpu_threads}",
             "--http.listen="]  # no HTTP server on the default port (tests/serving sets one)
        if self.config:
            a += ["--config", str(self.config)]
        return a + self.flags

    def log(self):
        if self.log_path and self.log_path.exists():
            return self.log_path.read_text(errors="replace")
        return ""

    def all_logs(self):
        return "".join(p.read_text(errors="replace") for p in sorted(self.dir.glob("rtxd.*.log")))

    def log_excerpt(self, n=2500):
        return f"\n--- rtxd log ({self.log_path}) ---\n{tail(self.log(), n)}"

    def start(self, wait=True, timeout=START_TIMEOUT):
        for attempt in range(3):
            port = self.fixed_port or free_port()
            self.port = port
            self.starts += 1
            self.log_path = self.dir / f"rtxd.{self.starts}.log"
            with open(self.log_path, "wb") as err, \
                    open(self.dir / f"rtxd.{self.starts}.out", "wb") as out:
                self.started_at_ms = now_ms()
                self.proc = popen(self.argv(port), stdout=out, stderr=err,
                                  env=clean_env(self.env), cwd=self.dir)
            if self._client:
                self._client.close()
                self._client = None
            if not wait:
                return self
            try:
                self.wait_serving(timeout)
                return self
            except _PortTaken:
                if self.fixed_port:
                    raise AssertionError(f"port {port} taken{self.log_excerpt()}") from None
                continue  # another test grabbed the port between free_port() and bind
        raise AssertionError("rtxd could not bind a free port three times")

    def wait_serving(self, timeout=START_TIMEOUT):
        end = time.monotonic() + timeout
        last = None
        with Client(self.address) as c:
            while True:
                rc = self.proc.poll()
                if rc is not None:
                    reap(self.proc, 1)
                    self.check_sanitizer()
                    text = self.log()
                    if rc != 0 and re.search(r"in use|EADDRINUSE", text, re.I):
                        raise _PortTaken()
                    raise AssertionError(f"rtxd exited {rc} while starting: "
                                         f"{' '.join(map(str, self.argv(self.port)))}"
                                         f"{self.log_excerpt()}")
                try:
                    h = c.health(timeout=1.0)
                    if h.status == SERVING:
                        return
                    last = f"{admin_pb2.HealthResponse.ServingStatus.Name(h.status)} {h.detail}"
                except grpc.RpcError as e:
                    last = f"{e.code()} {e.details()}"
                if time.monotonic() > end:
                    raise AssertionError(f"rtxd not SERVING within {timeout:.0f}s (last: "
                                         f"{last}){self.log_excerpt()}")
                time.sleep(0.05)

    def client(self):
        """A shared client of the current process (new channel after a restart)."""
        if self._client is None:
            self._client = Client(self.address, self)
        return self._client

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def check_sanitizer(self):
        rep = sanitizer_report(self.log())
        assert rep is None, f"sanitizer report in rtxd's stderr ({self.log_path}):\n{rep}"

    def wait_exit(self, timeout):
        """Waits for the process to exit; returns its exit status (AssertionError on a
        hang, after killing it)."""
        try:
            return reap(self.proc, timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            reap(self.proc, 10)
            raise AssertionError(f"rtxd did not exit within {timeout:.0f}s (killed)"
                                 f"{self.log_excerpt()}") from None

    def signal(self, sig):
        self.proc.send_signal(sig)

    def stop(self, timeout=None, expect_rc=0):
        """SIGTERM; asserts the exit status and that stderr holds no sanitizer report."""
        if self._client:
            self._client.close()
            self._client = None
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        rc = self.wait_exit(timeout or (40.0 * SLOW))
        self.check_sanitizer()
        assert rc == expect_rc, (f"rtxd exited {rc} after SIGTERM, expected {expect_rc}"
                                 f"{self.log_excerpt()}")
        return rc

    def kill9(self):
        if self._client:
            self._client.close()
            self._client = None
        self.proc.send_signal(signal.SIGKILL)
        reap(self.proc, 30)

    def restart(self):
        """A new process on the same store (a new port: the old one may linger)."""
        assert not self.alive(), "restart of a running daemon"
        return self.start()

    def cleanup(self):
        """Finalizer: a still-running daemon gets SIGTERM and must exit 0 cleanly; a hang is
        killed. Returns an error text or None."""
        if self.proc is None or self.proc.poll() is not None:
            if self.proc is not None:
                reap(self.proc, 1)
            return None
        try:
            self.stop()
        except AssertionError as e:
            return str(e)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                reap(self.proc, 10)
        return None

    # --- checks
    def assert_serving(self):
        """Health is SERVING and a tiny job still succeeds with the right outputs."""
        assert self.alive(), f"rtxd died (exit {self.proc.poll()}){self.log_excerpt()}"
        c = self.client()
        h = c.health()
        assert h.status == SERVING, f"Health {h.status} {h.detail!r}{self.log_excerpt()}"
        check_tiny_job(c, seed=int(time.time() * 1000) % 100000)


class _PortTaken(Exception):
    pass


# ------------------------------------------------------------------------------------------
# Graphs
# ------------------------------------------------------------------------------------------

def tiny_graph(name="tiny"):
    """x f32 [-1, 8] -> y = softmax(x·w + b) [n, 4], s = sum(x*x, axis 1) [n]."""
    rng = np.random.default_rng(7)
    g = GraphBuilder(name)
    g.input("x", "f32", [-1, 8])
    g.init("w", rng.uniform(-1, 1, (8, 4)).astype(np.float32))
    g.init("b", rng.uniform(-1, 1, (4,)).astype(np.float32))
    h = g.node("gemm", ["x", "w", "b"], "h", name="fc")
    g.node("softmax", [h], "y", name="sm", axis=-1)
    sq = g.node("mul", ["x", "x"], "sq", name="square")
    g.node("reduce_sum", [sq], "s", name="sumsq", axes=[1])
    g.output("y")
    g.output("s")
    return g


TINY = tiny_graph()


def tiny_feeds(seed, rows=3):
    rng = np.random.default_rng(seed)
    return {"x": rng.uniform(-2, 2, (rows, 8)).astype(np.float32)}


def check_tiny_job(c, seed=0):
    feeds = tiny_feeds(seed)
    _, outs = c.run(TINY, feeds, timeout=30.0)
    check_outputs(TINY, feeds, outs, what=f"tiny job (seed {seed})")


# A long job: expand x [1, 1024] to a 1024x1024 matrix and multiply it N times by
# W = ones/1024 (materialized by expand from an initializer row). Each product is a full
# 1024^3 GEMM (~20 ms on one core here) but the values stay put: every element of every
# product is mean(x), so y = mean(x) * ones(1024) whatever N is. The executor checks the
# cancel flag between ops, so a cancel or a drain past its grace stops it within one GEMM.
LONG_N = int(os.environ.get("RTX_TEST_LONG_MATMULS", "60"))  # ~1.3 s on one core here


def long_graph(n=None, name="long"):
    n = LONG_N if n is None else n
    g = GraphBuilder(name)
    g.input("x", "f32", [1, 1024])
    g.init("wrow", np.full((1, 1024), 1.0 / 1024, np.float32))
    w = g.node("expand", ["wrow"], "W", name="W", shape=[1024, 1024])
    h = g.node("expand", ["x"], "h0", name="h0", shape=[1024, 1024])
    for i in range(n):
        h = g.node("matmul", [h, w], f"h{i + 1}", name=f"mm{i + 1}")
    g.node("reduce_mean", [h], "y", name="colmean", axes=[0])
    g.output("y")
    return g


def long_feeds(seed):
    return {"x": np.random.default_rng(seed).uniform(-1, 1, (1, 1024)).astype(np.float32)}


def check_long_outputs(feeds, outs, what="long job"):
    assert list(outs) == ["y"], f"{what}: outputs {list(outs)}"
    y = outs["y"]
    assert y.dt == "f32", f"{what}: dtype {y.dt}"
    want = np.full((1024,), np.mean(feeds["x"].astype(np.float64)))
    rg.assert_close(y.a, want, 1e-4, 1e-5, what)


# ------------------------------------------------------------------------------------------
# Reference checks
# ------------------------------------------------------------------------------------------

def check_outputs(graph, feeds, outs, rtol=1e-5, atol=1e-6, what="job", ref=None):
    """outs {name: V} (from Client.outputs) against the NumPy reference interpreter: the same
    names in the same order, dtypes and shapes; floats within rtol/atol (atol scaled by the
    largest |ref|), everything else bit-equal."""
    ref = ref if ref is not None else rg.evaluate(graph_message(graph), feeds)
    assert list(outs) == list(ref), f"{what}: outputs {list(outs)}, expected {list(ref)}"
    for name, want in ref.items():
        got = outs[name]
        assert got.dt == want.dt, f"{what} {name}: dtype {got.dt}, expected {want.dt}"
        assert got.a.shape == want.a.shape, (f"{what} {name}: shape {got.a.shape}, "
                                             f"expected {want.a.shape}")
        if want.dt in rg.FLOATS:
            scale = float(np.nanmax(np.abs(rg.f64(want)))) if want.a.size else 1.0
            rg.assert_close(got.a, want.a, rtol, atol * max(1.0, scale), f"{what} {name}")
        else:
            rg.assert_equal(got.a, want.a, f"{what} {name}")


def check_output_infos(job, tensors):
    """Job.outputs (OutputInfo) describe the tensors GetOutputs returned."""
    assert [o.name for o in job.outputs] == [t.name for t in tensors], (
        f"Job.outputs {[o.name for o in job.outputs]} vs GetOutputs "
        f"{[t.name for t in tensors]}")
    for o, t in zip(job.outputs, tensors):
        assert o.dtype == t.dtype and list(o.dims) == list(t.dims), (o, t.dtype, t.dims)
        assert o.bytes == len(t.data), f"{o.name}: bytes {o.bytes} vs {len(t.data)} received"
        assert o.sha256.lower() == hashlib.sha256(t.data).hexdigest(), (
            f"{o.name}: sha256 {o.sha256} is not the digest of the data received")


# ------------------------------------------------------------------------------------------
# Errors
# ------------------------------------------------------------------------------------------

def expect_rpc_error(fn, code, *needles, daemon=None, what=""):
    """fn() must raise grpc.RpcError with `code` and details naming every needle (a tuple:
    any one of them), case-insensitively. Returns the error."""
    try:
        r = fn()
        if hasattr(r, "__iter__") and not isinstance(r, (bytes, str)):
            r = list(r)  # a stream: the error comes while reading it
    except grpc.RpcError as e:
        got, det = e.code(), e.details() or ""
        ex = daemon.log_excerpt(1500) if daemon else ""
        assert got == code, (f"{what}: expected {code.name}, got {got.name}: {det!r}{ex}")
        low = det.lower()
        for n in needles:
            alts = n if isinstance(n, tuple) else (n,)
            assert any(str(a).lower() in low for a in alts), (
                f"{what}: {code.name} message {det!r} names none of {alts}{ex}")
        return e
    raise AssertionError(f"{what}: expected {code.name}, but the call succeeded: "
                         f"{str(r)[:300]!r}")


# ------------------------------------------------------------------------------------------
# rtxctl
# ------------------------------------------------------------------------------------------

class CtlResult:
    def __init__(self, args, rc, out, err):
        self.args, self.rc, self.out, self.err = args, rc, out, err

    def describe(self):
        return (f"rtxctl {' '.join(map(str, self.args))}\n  exit {self.rc}\n"
                f"  stdout: {tail(self.out, 2000)!r}\n  stderr: {tail(self.err, 2000)!r}")

    def json(self):
        try:
            return json.loads(self.out)
        except ValueError as e:
            raise AssertionError(f"--json output is not JSON ({e})\n{self.describe()}")


def rtxctl(*args, address=None, timeout=60.0, check_rc=None):
    """Runs rtxctl [--address A] args...; fails on a hang, a signal or a sanitizer report."""
    argv = [need_binary("rtxctl")] + (["--address", address] if address else []) + \
        [str(a) for a in args]
    try:
        p = subprocess.run(with_pdeathsig(argv), stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=timeout * SLOW, env=clean_env())
    except subprocess.TimeoutExpired:
        raise AssertionError(f"rtxctl hung (> {timeout * SLOW:.0f}s): {argv}") from None
    r = CtlResult(argv[1:], p.returncode, p.stdout.decode("utf-8", "replace"),
                  p.stderr.decode("utf-8", "replace"))
    assert r.rc >= 0, f"rtxctl killed by signal {-r.rc}\n{r.describe()}"
    rep = sanitizer_report(r.err)
    assert rep is None, f"sanitizer report from rtxctl\n{rep}\n{r.describe()}"
    if check_rc is not None:
        assert r.rc == check_rc, f"expected exit {check_rc}\n{r.describe()}"
    return r


JOB_ID_RE = re.compile(r"\bj[0-9a-f]{28}\b")


def norm_key(k):
    return re.sub(r"[^a-z0-9]", "", str(k).lower())


def find_key(obj, *names):
    """The first value in a JSON tree under a key matching one of names (ignoring case,
    '_' and camelCase), breadth first; KeyError if none."""
    want = {norm_key(n) for n in names}
    queue = [obj]
    while queue:
        o = queue.pop(0)
        if isinstance(o, dict):
            for k, v in o.items():
                if norm_key(k) in want:
                    return v
            queue.extend(o.values())
        elif isinstance(o, list):
            queue.extend(o)
    raise KeyError(names)


def norm_state(v):
    """'succeeded', 'JOB_STATE_SUCCEEDED', 3 -> 'succeeded'."""
    if isinstance(v, int):
        return jobs_pb2.JobState.Name(v)[len("JOB_STATE_"):].lower()
    s = str(v).lower()
    return s[len("job_state_"):] if s.startswith("job_state_") else s
