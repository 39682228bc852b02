"""
skips - the rule for checks that do not run, shared by `make test` and `make test-gpu`: a
skipped check is a failure unless the environment variable RTX_ALLOW_SKIP names the
dependency it skipped for as one meant to be absent on this machine.

    RTX_ALLOW_SKIP=perf_analyzer,curl-h2c make test
    RTX_ALLOW_SKIP=gpu make test-gpu          # a machine meant to have no GPU

The names (NAMES below) are the same for the Python suites, the GPU test programs
(tests/allow-skip.h) and the GPU scripts (tests/gpu/daemon-common.sh). A test that may skip
says why through skip(name, why), or a skipif mark whose reason starts "needs NAME: ", so the
reason names what is missing; tests/conftest.py turns every other skip, and every skip whose
name RTX_ALLOW_SKIP leaves out, into a failure, and lists the allowed ones at the end of the
run. Hardware-conditional checks do not skip: tests of the no-GPU path hide the GPU
(CUDA_VISIBLE_DEVICES="") so that they run on every host.

This module imports nothing outside the standard library at load time, so a plain script
(tests/gpu/test_ops_torch.py) can use allowed() without pytest.
"""

import os
import re

ENV = "RTX_ALLOW_SKIP"

# name -> what its absence means; docs/decisions.md and README.md list the same names
NAMES = {
    "gpu": "no CUDA device (make test-gpu on a machine without a GPU)",
    "cudnn": "cuDNN's headers at build time or libcudnn.so.9 at run time",
    "perf_analyzer": "Triton's perf_analyzer binary (tritonclient[all]) cannot run",
    "curl": "no curl program",
    "curl-h2c": "curl without HTTP/2 (cleartext h2c with prior knowledge)",
    "transformers": "torch and transformers, the reference of tests/interop/np_decoder.py "
                    "(installed on the GPU machine, not in CI)",
}

# "needs NAME: why", the reason of a skip that names its dependency
REASON = re.compile(r"^needs ([A-Za-z0-9_.-]+): ")


def allowed_names():
    """The names RTX_ALLOW_SKIP lists (comma-separated, spaces ignored)."""
    return {n.strip() for n in os.environ.get(ENV, "").split(",") if n.strip()}


def unknown_names():
    """Names RTX_ALLOW_SKIP lists that are not in NAMES (a typo would otherwise allow
    nothing and confuse)."""
    return sorted(allowed_names() - set(NAMES))


def allowed(name):
    """Whether RTX_ALLOW_SKIP says `name` is meant to be absent here."""
    assert name in NAMES, f"unknown dependency name {name!r}"
    return name in allowed_names()


def dependency_of(reason):
    """The dependency a skip reason names ("needs NAME: ..."), or None."""
    m = REASON.match(reason or "")
    return m.group(1) if m else None


def skip(name, why):
    """Skips the calling test because `name` (a key of NAMES) is missing: `why` says how it
    was found missing. Under the rule of tests/conftest.py this is a failure unless
    RTX_ALLOW_SKIP lists `name`."""
    import pytest
    assert name in NAMES, f"unknown dependency name {name!r}"
    pytest.skip(f"needs {name}: {why}")
