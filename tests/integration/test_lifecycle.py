"""
rtxd's lifecycle: SIGTERM with jobs running (exit 0; running jobs finish within the grace
period, or are left for the restart to handle by their policy when it runs out; queued jobs
are kept and run after the restart), SIGHUP reload of a mutable setting from the config file
(Admin.Config shows the new value with origin "reload"), `rtxd --print-config` printing every
setting, every setting of `--print-config` in docs/daemon.md's settings table, a bad flag
refused with a message naming it, and a port already in use refused with a clear error. Every
rtxd started here has its HTTP server off (--http.listen=) or on a free port, so parallel tests
never meet on the default port 8000.
"""

import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

import harness as h
from harness import FAILED, QUEUED, RUNNING, SUCCEEDED, state_name


def start_long_jobs(c, policies):
    ids = [c.submit_id(h.long_graph(), h.long_feeds(60 + i), restart_policy=p)
           for i, p in enumerate(policies)]
    for j in ids:
        c.wait_for_state(j, RUNNING)
    return ids


def test_sigterm_running_jobs_finish_queued_kept(make_daemon):
    d = make_daemon("term", workers=1, flags=["--drain.grace_ms=30000"]).start()
    c = d.client()
    (running,) = start_long_jobs(c, [h.RERUN])
    queued = [c.submit_id(h.TINY, h.tiny_feeds(70 + i)) for i in range(3)]
    assert all(c.get(j).state == QUEUED for j in queued)
    d.signal(signal.SIGTERM)
    rc = d.wait_exit(60 * h.SLOW)
    d.check_sanitizer()
    assert rc == 0, f"exit {rc} after SIGTERM{d.log_excerpt()}"

    restart_ms = h.now_ms()
    d.restart()
    c = d.client()
    r = c.get(running)
    assert r.state == SUCCEEDED and r.attempts == 1, (
        f"the running job did not finish within the grace: {state_name(r.state)} "
        f"attempts {r.attempts} {r.reason!r}")
    assert r.finished_unix_ms <= restart_ms
    outs, _ = c.outputs(running)
    h.check_long_outputs(h.long_feeds(60), outs)
    for i, j in enumerate(queued):
        f = c.wait(j)
        assert f.state == SUCCEEDED and f.attempts == 1, (state_name(f.state), f.reason)
        assert f.started_unix_ms >= restart_ms, "a queued job ran during the drain"
        outs, _ = c.outputs(j)
        h.check_outputs(h.TINY, h.tiny_feeds(70 + i), outs)
    d.stop()


def test_sigterm_grace_expired_leaves_running_for_restart(make_daemon):
    """Past drain.grace_ms, running jobs are interrupted and stay "running" in the journal:
    the restart re-runs the RERUN one (attempts 2) and fails the FAIL one ("interrupted");
    the queued one simply runs."""
    d = make_daemon("grace", workers=2, flags=["--drain.grace_ms=200"]).start()
    c = d.client()
    rerun, fail = start_long_jobs(c, [h.RERUN, h.FAIL])
    q = c.submit_id(h.TINY, h.tiny_feeds(80))
    assert c.get(q).state == QUEUED
    t = time.monotonic()
    d.signal(signal.SIGTERM)
    rc = d.wait_exit(30 * h.SLOW)
    took = time.monotonic() - t
    d.check_sanitizer()
    assert rc == 0, f"exit {rc} after SIGTERM{d.log_excerpt()}"
    assert took < 0.2 + 2.0 * h.SLOW, f"exit took {took:.1f}s with a 200 ms grace"

    restart_ms = h.now_ms()
    d.restart()
    c = d.client()
    r = c.wait(rerun, timeout=60)
    assert r.state == SUCCEEDED and r.attempts == 2, (
        f"RERUN job interrupted by the drain: {state_name(r.state)} attempts {r.attempts} "
        f"{r.reason!r}")
    assert r.started_unix_ms >= restart_ms
    outs, _ = c.outputs(rerun)
    h.check_long_outputs(h.long_feeds(60), outs)
    f = c.wait(fail, timeout=30)
    assert f.state == FAILED and f.attempts == 1 and "interrupted" in f.reason.lower(), (
        f"FAIL job interrupted by the drain: {state_name(f.state)} attempts {f.attempts} "
        f"{f.reason!r}")
    j = c.wait(q, timeout=30)
    assert j.state == SUCCEEDED and j.attempts == 1 and j.started_unix_ms >= restart_ms
    d.stop()


def wait_setting(d, name, value):
    """Polls Admin.Config until setting `name` has `value` with origin "reload"."""
    end = time.monotonic() + 10 * h.SLOW
    while True:
        assert d.alive(), f"rtxd died on SIGHUP (exit {d.proc.poll()}){d.log_excerpt()}"
        s = d.client().config()[name]
        if s.value == value and s.origin == "reload":
            return
        assert time.monotonic() < end, (f"after SIGHUP {name} is {s.value!r} ({s.origin}), "
                                         f"expected {value!r} (reload){d.log_excerpt()}")
        time.sleep(0.05)


@pytest.mark.parametrize("given_by", ["flag", "env"])
def test_sighup_reloads_mutable_setting(make_daemon, tmp_path, given_by):
    """The file named by --config PATH (or $RTXD_CONFIG) sets log.level; after the file
    changes, SIGHUP applies the new value (origin "reload") and rtxd keeps serving."""
    ini = tmp_path / "rtxd.ini"
    ini.write_text("[log]\nlevel = info\n")
    if given_by == "flag":
        d = make_daemon("hup", config=ini).start()
    else:
        d = make_daemon("hup", env={"RTXD_CONFIG": str(ini)}).start()
    c = d.client()
    s = c.config()["log.level"]
    assert (s.value, s.origin, s.mutable) == ("info", "file", True), s
    assert c.config()["log.format"].origin == "flag"

    ini.write_text("[log]\nlevel = debug\n")
    d.signal(signal.SIGHUP)
    wait_setting(d, "log.level", "debug")
    assert c.config()["log.format"].origin == "flag", "a flag lost to the reload"
    d.assert_serving()

    # an invalid file: SIGHUP keeps the running settings (and the daemon)
    ini.write_text("[log]\nlevel = loudest\n")
    d.signal(signal.SIGHUP)
    time.sleep(0.5 * h.SLOW)
    assert d.alive(), f"rtxd died on SIGHUP with an invalid file{d.log_excerpt()}"
    s = c.config()["log.level"]
    assert (s.value, s.origin) == ("debug", "reload"), s
    d.assert_serving()
    ini.write_text("[log]\nlevel = warn\n")
    d.signal(signal.SIGHUP)
    wait_setting(d, "log.level", "warn")
    d.stop()


def parse_ini(text):
    """{section.key: value} of rtxd --print-config's output (comments and quotes removed)."""
    out, section = {}, None
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in ";#":
            continue
        m = re.fullmatch(r"\[([^\]]+)\]", line)
        if m:
            section = m.group(1).strip()
            continue
        m = re.fullmatch(r"([^=\s]+)\s*=\s*(.*?)", line)
        assert m and section, f"not an INI line: {line!r}"
        v = re.split(r"\s+[;#]", m.group(2), maxsplit=1)[0].strip()
        if len(v) >= 2 and v[0] == v[-1] == '"':
            v = v[1:-1]
        out[f"{section}.{m.group(1)}"] = v
    return out


# the settings the brief and daemon/config.h name (Admin.Config may list more, never fewer)
DOCUMENTED = ["server.listen", "server.max_message_bytes", "store.path", "jobs.workers",
              "jobs.cpu_threads", "jobs.restart_policy", "jobs.max_graph_nodes",
              "jobs.max_tensor_bytes", "jobs.default_lane", "jobs.lanes", "drain.grace_ms",
              "log.format", "log.level", "http.listen", "http.max_body_bytes"]


def test_print_config_prints_every_setting(make_daemon):
    d = make_daemon("print", workers=2, flags=["--drain.grace_ms=1234"]).start()
    live = d.client().config()
    d.stop()
    missing = [n for n in DOCUMENTED if n not in live]
    assert not missing, f"Admin.Config lacks {missing}"
    assert len(live) >= 17, f"Admin.Config lists {len(live)} settings: {sorted(live)}"

    argv = d.argv(d.port) + ["--print-config"]
    p = subprocess.run([str(a) for a in argv], capture_output=True, timeout=20 * h.SLOW,
                       env=h.clean_env(), stdin=subprocess.DEVNULL)
    out = p.stdout.decode(errors="replace")
    assert p.returncode == 0, f"--print-config exit {p.returncode}: {p.stderr[-2000:]!r}"
    printed = parse_ini(out)
    assert set(printed) == set(live), (f"--print-config vs Admin.Config: only printed "
                                       f"{sorted(set(printed) - set(live))}, not printed "
                                       f"{sorted(set(live) - set(printed))}")
    wrong = {n: (printed[n], live[n].value) for n in live if printed[n] != live[n].value}
    assert not wrong, f"--print-config value vs Admin.Config value: {wrong}"
    assert printed["drain.grace_ms"] == "1234" and printed["jobs.workers"] == "2"
    assert "flag" in out and "default" in out, "origins are not shown as comments"


def test_daemon_md_lists_every_setting(tmp_path):
    """docs/daemon.md's settings table names exactly the settings --print-config prints
    (the [lane.NAME] and [scheduler] sections are documented in prose there, not as rows)."""
    argv = [h.need_binary("rtxd"), "--http.listen=", f"--store.path={tmp_path}/rtxd.db",
            "--print-config"]
    p = subprocess.run(argv, capture_output=True, timeout=20 * h.SLOW, env=h.clean_env(),
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 0, f"--print-config exit {p.returncode}: {p.stderr[-2000:]!r}"
    printed = {n for n in parse_ini(p.stdout.decode(errors="replace"))
               if not n.startswith(("lane.", "scheduler."))}
    doc = (Path(__file__).resolve().parents[2] / "docs" / "daemon.md").read_text()
    table = set(re.findall(r"^\| `([a-z_]+\.[a-z_0-9]+)` \|", doc, re.M))
    assert printed - table == set(), f"settings missing from docs/daemon.md: " \
                                     f"{sorted(printed - table)}"
    assert table - printed == set(), f"docs/daemon.md lists settings rtxd does not have: " \
                                     f"{sorted(table - printed)}"


@pytest.mark.parametrize("flag,needle", [
    ("--no.such_setting=1", "no.such_setting"),
    ("--frobnicate", "frobnicate"),
    ("--jobs.workers=many", "jobs.workers"),
    ("--jobs.workers=0", "jobs.workers"),
    ("--log.format=xml", "log.format"),
], ids=["unknown-setting", "unknown-flag", "bad-number", "out-of-bounds", "bad-enum"])
def test_bad_flag(tmp_path, flag, needle):
    argv = [h.need_binary("rtxd"), f"--server.listen=127.0.0.1:{h.free_port()}",
            "--http.listen=", f"--store.path={tmp_path}/rtxd.db", flag]
    p = h.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=h.clean_env(),
                cwd=tmp_path)
    try:
        out, err = p.communicate(timeout=15 * h.SLOW)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        pytest.fail(f"rtxd {flag} did not exit: it accepted the flag and started")
    finally:
        h.reap(p, 10)
    text = (out + err).decode(errors="replace")
    assert p.returncode not in (0, None) and p.returncode > 0, (
        f"rtxd {flag}: exit {p.returncode}\n{text[-2000:]}")
    assert needle in text, f"rtxd {flag}: message does not name {needle!r}:\n{text[-2000:]}"
    assert h.sanitizer_report(text) is None, h.sanitizer_report(text)


def _expect_bind_failure(tmp_path, port, name):
    argv = [h.need_binary("rtxd"), f"--server.listen=127.0.0.1:{port}", "--http.listen=",
            f"--store.path={tmp_path}/{name}.db", "--log.format=json"]
    p = h.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=h.clean_env(),
                cwd=tmp_path)
    try:
        out, err = p.communicate(timeout=20 * h.SLOW)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        pytest.fail(f"rtxd on 127.0.0.1:{port}, which is in use, did not exit")
    finally:
        h.reap(p, 10)
    text = (out + err).decode(errors="replace")
    assert p.returncode > 0, f"exit {p.returncode} on a port in use:\n{text[-2000:]}"
    assert str(port) in text, f"the error does not name the address:\n{text[-2000:]}"
    assert re.search(r"in use|bind|listen", text, re.I), f"unclear error:\n{text[-2000:]}"
    assert h.sanitizer_report(text) is None, h.sanitizer_report(text)


def test_port_in_use_by_a_socket(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        _expect_bind_failure(tmp_path, s.getsockname()[1], "second")


def test_port_in_use_by_another_rtxd(make_daemon, tmp_path):
    """gRPC sets SO_REUSEPORT by default: a second rtxd must still refuse the port."""
    first = make_daemon("first").start()
    _expect_bind_failure(tmp_path, first.port, "second")
    first.assert_serving()
    first.stop()
