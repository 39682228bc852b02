"""
pytest setup shared by every Python suite under tests/ (interop, integration, serving): the
skip rule of tests/skips.py. A test that skips, at collection, setup, call or teardown, or
ends as an expected failure (xfail), is reported as failed, unless its skip names a
dependency ("needs NAME: why", tests/skips.py skip()) and RTX_ALLOW_SKIP lists NAME as meant
to be absent here. The skips so allowed stay skips and are listed at the end of the run, so
`make test` never passes with checks that did not run without saying so.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import skips  # noqa: E402


def pytest_configure(config):
    bad = skips.unknown_names()
    if bad:
        raise pytest.UsageError(
            f"{skips.ENV} names {', '.join(bad)}: not a dependency the tests know "
            f"(known: {', '.join(sorted(skips.NAMES))}; tests/skips.py)")


def _skip_reason(rep):
    """The reason of a skipped report (its longrepr is (path, lineno, reason))."""
    lr = rep.longrepr
    reason = str(lr[2]) if isinstance(lr, tuple) and len(lr) == 3 else str(lr)
    return reason[len("Skipped: "):] if reason.startswith("Skipped: ") else reason


def _judge(rep):
    """Turns a skipped report into a failed one unless RTX_ALLOW_SKIP allows its skip."""
    if not rep.skipped:
        return
    if hasattr(rep, "wasxfail"):
        why = (f"an expected failure (xfail: {rep.wasxfail or 'no reason'}) is a check that "
               f"does not pass; the rule of tests/skips.py allows no xfail")
    else:
        reason = _skip_reason(rep)
        dep = skips.dependency_of(reason)
        if dep in skips.NAMES and dep in skips.allowed_names():
            return
        if dep in skips.NAMES:
            why = (f"skipped, so the check did not run: {reason}\n"
                   f"A skipped check is a failure. If {dep} ({skips.NAMES[dep]}) is meant to "
                   f"be absent on this machine, run with {skips.ENV}={dep} (tests/skips.py).")
        else:
            why = (f"skipped, so the check did not run: {reason}\n"
                   f"A skipped check is a failure, and this skip names no dependency that "
                   f"{skips.ENV} could allow (skip with tests/skips.py skip(name, why)).")
    rep.outcome = "failed"
    rep.longrepr = why


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    rep = yield
    _judge(rep)
    return rep


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_make_collect_report(collector):
    rep = yield
    _judge(rep)
    return rep


def pytest_terminal_summary(terminalreporter):
    allowed = terminalreporter.stats.get("skipped", [])
    if not allowed:
        return
    terminalreporter.section(f"checks skipped as {skips.ENV} allows", sep="-")
    for r in allowed:
        terminalreporter.line(f"SKIPPED {r.nodeid}: {_skip_reason(r)}")
