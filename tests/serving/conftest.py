"""
pytest setup for the serving tests: rtxd processes of $RTX_BUILD with a model repository,
driven by Triton's own clients (tritonclient.grpc, tritonclient.http), plain HTTP requests and
perf_analyzer.

Fixtures:
  server        one ServingDaemon per test module (and xdist worker), control mode "none",
                SERVING when the first test gets it; the module may set SERVER_KW (keyword
                arguments of ServingDaemon). At teardown it gets SIGTERM and must exit 0 with no
                sanitizer report.
  make_server   a factory of servers private to one test (make_server(name, **kw), not started).
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import serving_harness as sh  # noqa: E402


def pytest_sessionfinish(session, exitstatus):
    sh.harness.kill_all()


def _teardown(daemons):
    errors = [e for e in (d.cleanup() for d in daemons) if e]
    assert not errors, "daemon teardown:\n" + "\n".join(errors)


@pytest.fixture(scope="module")
def server(request, tmp_path_factory):
    kw = dict(getattr(request.module, "SERVER_KW", {}))
    d = sh.ServingDaemon(tmp_path_factory.mktemp(request.module.__name__.split(".")[-1]), **kw)
    d.start()
    yield d
    _teardown([d])


@pytest.fixture
def make_server(tmp_path):
    made = []

    def make(name="rtxd", **kw):
        d = sh.ServingDaemon(tmp_path / name, **kw)
        made.append(d)
        return d

    yield make
    _teardown(made)
