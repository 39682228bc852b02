"""
rtxctl against a real rtxd: status / devices / config (--json parses, fields present),
submit --wait with .npy inputs and --output-dir, jobs list / show / wait / cancel, outputs
--dir (the .npy files equal the NumPy reference), exit codes (0 ok, 1 server error - an
unknown job, 2 usage, 3 failed / 4 cancelled / 5 expired for waits, 6 unreachable daemon),
`--help` of every command; and rtx-client-check (the C driver of librtx) against the live
daemon.
"""

import re
import subprocess
import time

import numpy as np
import pytest

import harness as h
from harness import CANCELLED, RUNNING, SUCCEEDED, GraphBuilder, find_key, norm_state, rg

DAEMON_KW = {"workers": 1}

COMMANDS = [["status"], ["devices"], ["config"], ["drain"], ["submit"], ["outputs"],
            ["jobs"], ["jobs", "list"], ["jobs", "show"], ["jobs", "wait"], ["jobs", "cancel"]]


def ctl(daemon, *args, **kw):
    return h.rtxctl(*args, address=daemon.address, **kw)


def cli_graph():
    g = GraphBuilder("cli_graph")
    g.input("x", "f32", [-1, 5])
    g.input("n", "i32", [3])
    g.init("w", np.linspace(-1, 1, 15, dtype=np.float32).reshape(5, 3))
    t = g.node("matmul", ["x", "w"], "t", name="mm")
    g.node("tanh", [t], "y", name="th")
    g.node("mul", ["n", "n"], "n2", name="sq")
    g.output("y")
    g.output("n2")
    return g


def cli_feeds():
    rng = np.random.default_rng(5)
    return {"x": rng.standard_normal((4, 5)).astype(np.float32),
            "n": np.array([3, -4, 7], np.int32)}


@pytest.fixture
def graph_files(tmp_path):
    g = cli_graph()
    gp = g.save(tmp_path / "g.rtxg")
    args = []
    for name, a in cli_feeds().items():
        p = tmp_path / f"{name}.npy"
        np.save(p, a, allow_pickle=False)
        args += ["--input", f"{name}={p}"]
    return g, gp, args


def check_npy_dir(d, g, feeds):
    ref = rg.evaluate(g.g, feeds)
    files = sorted(p.name for p in d.glob("*.npy"))
    assert files == sorted(f"{n}.npy" for n in ref), files
    for name, want in ref.items():
        got = np.load(d / f"{name}.npy", allow_pickle=False)
        assert got.dtype == rg.npy_dtype_for(want.dt), (name, got.dtype)
        if want.dt in rg.FLOATS:
            rg.assert_close(got, want.a, 1e-5, 1e-6, name)
        else:
            rg.assert_equal(got, want.a, name)


def job_id_of(r):
    m = h.JOB_ID_RE.findall(r.out)
    assert m, f"no job id in the output\n{r.describe()}"
    return m[0]


# ------------------------------------------------------------------------------------------
# status, devices, config
# ------------------------------------------------------------------------------------------

def test_status_json(daemon):
    r = ctl(daemon, "--json", "status", check_rc=0)
    j = r.json()
    for k in ("version", "uptime_ms", "devices", "store", "draining", "lanes"):
        find_key(j, k)
    assert find_key(j, "draining") is False
    up = find_key(j, "uptime_ms")
    assert int(up) > 0, up
    assert ctl(daemon, "status", check_rc=0).out.strip(), "plain status printed nothing"


def test_devices_json(daemon):
    j = ctl(daemon, "--json", "devices", check_rc=0).json()
    devs = j if isinstance(j, list) else find_key(j, "devices")
    assert isinstance(devs, list) and devs, j
    cpu = [x for x in devs if str(find_key(x, "kind")).lower() == "cpu"]
    assert cpu, f"no cpu device in {devs}"
    for k in ("index", "name", "healthy"):
        find_key(cpu[0], k)
    assert find_key(cpu[0], "healthy") is True


def test_config_json(daemon):
    j = ctl(daemon, "--json", "config", check_rc=0).json()
    settings = j if isinstance(j, list) else find_key(j, "settings")
    by_name = {find_key(s, "name"): s for s in settings}
    want = daemon.client().config()
    assert set(by_name) == set(want), set(by_name) ^ set(want)
    s = by_name["server.listen"]
    assert find_key(s, "value") == daemon.address
    assert find_key(s, "origin") == "flag"
    assert find_key(by_name["log.level"], "mutable") is True
    assert "server.listen" in ctl(daemon, "config", check_rc=0).out


# ------------------------------------------------------------------------------------------
# submit, jobs, outputs
# ------------------------------------------------------------------------------------------

def test_submit_wait_output_dir(daemon, graph_files, tmp_path):
    g, gp, inputs = graph_files
    out = tmp_path / "out"
    r = ctl(daemon, "submit", gp, *inputs, "--wait", "--output-dir", out, check_rc=0)
    jid = job_id_of(r)
    check_npy_dir(out, g, cli_feeds())
    j = daemon.client().get(jid)
    assert j.state == SUCCEEDED and j.graph_name == "cli_graph"


def test_submit_jobs_show_list_wait_outputs(daemon, graph_files, tmp_path):
    g, gp, inputs = graph_files
    r = ctl(daemon, "--json", "submit", gp, *inputs, check_rc=0)
    r.json()
    jid = job_id_of(r)
    w = ctl(daemon, "jobs", "wait", jid, check_rc=0)
    assert jid in w.out or "succeeded" in w.out.lower(), w.describe()
    show = ctl(daemon, "--json", "jobs", "show", jid, check_rc=0).json()
    assert find_key(show, "id") == jid
    assert norm_state(find_key(show, "state")) == "succeeded", show
    assert int(find_key(show, "attempts")) == 1
    assert jid in ctl(daemon, "jobs", "show", jid, check_rc=0).out
    lst = ctl(daemon, "--json", "jobs", "list", check_rc=0)
    lj = lst.json()
    assert jid in lst.out and lj is not None
    assert jid in ctl(daemon, "jobs", "list", check_rc=0).out
    d = tmp_path / "outs"
    ctl(daemon, "outputs", jid, "--dir", d, check_rc=0)
    check_npy_dir(d, g, cli_feeds())


def test_jobs_cancel_and_wait_exit_codes(daemon, graph_files):
    """cancel of a queued job; jobs wait exits 4 for it, 5 for an expired job, 3 for a
    failed one, 7 when --timeout-s runs out first (the job is left alone)."""
    c = daemon.client()
    _, gp, inputs = graph_files
    long_id = c.submit_id(h.long_graph(3 * h.LONG_N), h.long_feeds(1))  # ~4 s
    c.wait_for_state(long_id, RUNNING)
    try:
        q = job_id_of(ctl(daemon, "submit", gp, *inputs, check_rc=0))
        exp = c.submit_id(h.TINY, h.tiny_feeds(1), deadline_unix_ms=h.now_ms() + 200)
        ctl(daemon, "jobs", "wait", q, "--timeout-s", "1", check_rc=7)
        assert c.get(q).state == h.QUEUED, "jobs wait --timeout-s touched the job"
        ctl(daemon, "jobs", "cancel", q, check_rc=0)
        assert c.get(q).state == CANCELLED
        ctl(daemon, "jobs", "wait", q, check_rc=4)
    finally:
        ctl(daemon, "jobs", "cancel", long_id, check_rc=0)
    assert c.wait(long_id).state == CANCELLED
    ctl(daemon, "jobs", "wait", long_id, check_rc=4)
    ctl(daemon, "jobs", "wait", exp, check_rc=5)
    bad = GraphBuilder("fails")
    bad.input("i", "i64", [1])
    bad.init("t", np.zeros((2, 2), np.float32))
    bad.node("gather", ["t", "i"], "y", name="g")
    bad.output("y")
    f = c.submit_id(bad, {"i": np.array([7], np.int64)})
    ctl(daemon, "jobs", "wait", f, check_rc=3)
    # submit --wait exits as jobs wait does
    bp = bad.save(gp.parent / "bad.rtxg")
    ip = gp.parent / "i.npy"
    np.save(ip, np.array([7], np.int64))
    r = ctl(daemon, "submit", bp, "--input", f"i={ip}", "--wait", check_rc=3)
    assert c.get(job_id_of(r)).state == h.FAILED
    # outputs of a job that did not succeed: a server error
    ctl(daemon, "outputs", f, "--dir", gp.parent / "nope", check_rc=1)


# ------------------------------------------------------------------------------------------
# exit codes
# ------------------------------------------------------------------------------------------

UNKNOWN = "j" + "0" * 12 + "fedcba9876543210"


@pytest.mark.parametrize("args", [["jobs", "show", UNKNOWN], ["jobs", "wait", UNKNOWN],
                                  ["jobs", "cancel", UNKNOWN], ["outputs", UNKNOWN, "--dir",
                                                                "/tmp/rtx-never-written"]],
                         ids=["show", "wait", "cancel", "outputs"])
def test_unknown_job_exit_1(daemon, args):
    r = ctl(daemon, *args, check_rc=1)
    assert UNKNOWN in r.err or "not found" in r.err.lower(), r.describe()


@pytest.mark.parametrize("args", [["frobnicate"], ["jobs", "show"], ["jobs", "explode"],
                                  ["submit"], ["--bogus-flag", "status"],
                                  ["submit", "g.rtxg", "--input", "no-equals-sign"]],
                         ids=["unknown-command", "show-no-id", "unknown-subcommand",
                              "submit-no-graph", "unknown-flag",
                              "bad-input-arg"])
def test_usage_error_exit_2(daemon, args):
    r = ctl(daemon, *args, check_rc=2)
    assert r.err.strip(), f"no message on stderr\n{r.describe()}"


def test_unreachable_exit_6():
    port = h.free_port()  # nobody listens there
    t = time.monotonic()
    for args in (["status"], ["jobs", "list"], ["devices"]):
        r = h.rtxctl(*args, address=f"127.0.0.1:{port}", check_rc=6, timeout=30)
        assert str(port) in r.err or "connect" in r.err.lower() or \
            "unavailable" in r.err.lower(), r.describe()
    assert time.monotonic() - t < 30 * h.SLOW


# ------------------------------------------------------------------------------------------
# --help
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cmd", COMMANDS, ids=["-".join(c) for c in COMMANDS])
def test_help(cmd):
    # an address nobody listens on: --help must not contact the daemon (nor drain one)
    r = h.rtxctl(*cmd, "--help", address=f"127.0.0.1:{h.free_port()}", check_rc=0)
    text = r.out + r.err
    assert cmd[-1] in text, f"help does not mention {cmd[-1]!r}\n{r.describe()}"
    assert "usage" in text.lower() or "--" in text, r.describe()


def test_top_level_help():
    r = h.rtxctl("--help", check_rc=0)
    text = r.out + r.err
    for cmd in ("status", "devices", "jobs", "submit", "outputs", "config", "drain"):
        assert cmd in text, f"rtxctl --help does not list {cmd}\n{r.describe()}"


# ------------------------------------------------------------------------------------------
# librtx
# ------------------------------------------------------------------------------------------

def test_rtx_client_check(daemon):
    exe = h.need_binary("rtx-client-check")
    try:
        p = subprocess.run([str(exe), daemon.address], capture_output=True, timeout=120 * h.SLOW,
                           env=h.clean_env(), stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"rtx-client-check hung{daemon.log_excerpt()}")
    out = p.stdout.decode(errors="replace") + p.stderr.decode(errors="replace")
    m = re.search(r"(\d+) passed, (\d+) failed", out)
    assert m, f"no 'N passed, M failed' line (exit {p.returncode}):\n{h.tail(out)}"
    assert p.returncode == 0 and m.group(2) == "0" and int(m.group(1)) > 0, (
        f"rtx-client-check exit {p.returncode}: {m.group(0)}\n{h.tail(out)}"
        f"{daemon.log_excerpt()}")
    # the checks it makes only on a daemon with one worker (DAEMON_KW) ran
    for what in ("a queued job is cancelled at once",
                 "a job whose deadline passed while queued expires"):
        assert re.search(rf"^ok +- {re.escape(what)}", out, re.M), (
            f"rtx-client-check did not check that {what}:\n{h.tail(out)}")
    assert h.sanitizer_report(out) is None, h.sanitizer_report(out)
    daemon.assert_serving()
