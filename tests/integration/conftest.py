"""
pytest setup for the integration tests: real rtxd processes of $RTX_BUILD (the Makefile sets
it; default <repo>/build) driven through the generated grpcio client ($RTX_PY, else
$RTX_BUILD/py), rtxctl and rtx-client-check. Results are compared with the NumPy reference
interpreter of tests/interop/rtxgraph.py.

Fixtures:
  daemon       one rtxd per test module (and xdist worker): a free loopback port, a temporary
               store, JSON logs captured to a file. The module may set DAEMON_KW (keyword
               arguments of harness.Daemon: workers, cpu_threads, flags). It is SERVING when
               the first test gets it; at teardown it gets SIGTERM and must exit 0 with no
               sanitizer report in its stderr.
  make_daemon  a factory of daemons private to one test (make_daemon(name, **kw), not started),
               with the same teardown for those still running.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402


def pytest_report_header(config):
    b = harness.rg.build_dir()
    have = {n: (b / "bin" / n).exists() for n in ("rtxd", "rtxctl", "rtx-client-check")}
    found = ", ".join(f"{n} {'present' if v else 'MISSING'}" for n, v in have.items())
    return [f"rtx build: {b} ({found}); time scale {harness.SLOW:g}"]


def pytest_sessionfinish(session, exitstatus):
    harness.kill_all()


def _teardown(daemons):
    errors = [e for e in (d.cleanup() for d in daemons) if e]
    assert not errors, "daemon teardown:\n" + "\n".join(errors)


@pytest.fixture(scope="module")
def daemon(request, tmp_path_factory):
    kw = dict(getattr(request.module, "DAEMON_KW", {}))
    d = harness.Daemon(tmp_path_factory.mktemp(request.module.__name__.split(".")[-1]), **kw)
    d.start()
    yield d
    _teardown([d])


@pytest.fixture
def make_daemon(tmp_path):
    made = []

    def make(name="rtxd", **kw):
        d = harness.Daemon(tmp_path / name, **kw)
        made.append(d)
        return d

    yield make
    _teardown(made)


@pytest.fixture
def client(daemon):
    return daemon.client()
