"""
pytest setup for the interop tests: they run the real rtxrun binary of $RTX_BUILD (the
Makefile sets it; default <repo>/build) on graphs built here with graph_pb2 and compare the
results with the NumPy reference interpreter in rtxgraph.py.
"""

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import rtxgraph  # noqa: E402


def pytest_report_header(config):
    return [f"rtx build: {rtxgraph.build_dir()} (rtxrun "
            f"{'present' if rtxgraph.rtxrun_path().exists() else 'MISSING'})"]


@pytest.fixture(autouse=True)
def _need_rtxrun():
    p = rtxgraph.rtxrun_path()
    if not (p.is_file() and os.access(p, os.X_OK)):
        pytest.fail(f"{p} is missing: build it first (make all)", pytrace=False)


@pytest.fixture
def examples_dir():
    return rtxgraph.build_dir() / "examples"
