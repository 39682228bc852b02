"""
serving_harness - what the serving tests (KServe v2 over gRPC and HTTP) share: an rtxd started
with a model repository and an HTTP port besides its gRPC port, built on the integration
tests' harness (process handling, logs, sanitizer checks, teardown).

The repository is a copy of the example repository the build writes
($RTX_BUILD/examples/models: mlp, simple, transformer_block, ...), so tests may add, break or
remove models in it without touching the build. The copy leaves out the wide MLPs (LARGE:
32 MiB of weights) unless asked for by name; tests that only read them serve the build's
repository itself (test_wide_models.py), so no test copies their weights.
"""

import json
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))

import harness  # noqa: E402
from harness import free_port, rg  # noqa: E402,F401

SLOW = harness.SLOW


def example_repository():
    return rg.build_dir() / "examples" / "models"


# example models with large weight files: copied only when named
LARGE = ("mlp_wide", "mlp_wide_nobatch")


def copy_repository(dest, models=None):
    """Copies the example repository (every model but LARGE ones, or only `models`) into
    dest; returns dest."""
    src = example_repository()
    assert src.is_dir(), f"{src} missing: run make"
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for m in sorted(p.name for p in src.iterdir() if p.is_dir()):
        if (m not in LARGE) if models is None else (m in models):
            shutil.copytree(src / m, dest / m)
    return dest


# mlp's max_queue_delay_microseconds in batching_repository(): long enough that concurrent
# requests reach the batcher within it on any host (sanitizers, a loaded machine), so a test
# can require that they were merged; batches of a preferred size (16, 32) still run at once
BATCH_WAIT_US = 2_000_000


def batching_repository(dest):
    """A repository (dest) holding the example mlp alone, its dynamic batching as built
    (preferred sizes 16 and 32, max_batch_size 64) but with a queue delay of BATCH_WAIT_US,
    so concurrent single-row requests are merged whatever the host's speed; returns dest."""
    dest = copy_repository(dest, models=("mlp",))
    cfg_path = dest / "mlp" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    assert cfg["dynamic_batching"]["preferred_batch_size"] == [16, 32], cfg
    cfg["dynamic_batching"]["max_queue_delay_microseconds"] = BATCH_WAIT_US
    cfg_path.unlink()  # a copy of the build's file (or a link to it): never write through
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
    return dest


class ServingDaemon(harness.Daemon):
    """An rtxd serving `repository` with model control `control` (none|explicit|poll) and
    its HTTP server on a free loopback port (http_address)."""

    def __init__(self, workdir, repository=None, control="none", startup=None, flags=(),
                 **kw):
        workdir = Path(workdir)
        self.repository = Path(repository) if repository else copy_repository(workdir / "models")
        self.control = control
        self.startup = startup
        self.http_port = None
        super().__init__(workdir, flags=flags, **kw)

    @property
    def http_address(self):
        return f"127.0.0.1:{self.http_port}"

    @property
    def http_url(self):
        return f"http://{self.http_address}"

    def argv(self, port):
        self.http_port = free_port()
        a = super().argv(port)
        a += [f"--models.repository={self.repository}", f"--models.control={self.control}",
              f"--http.listen=127.0.0.1:{self.http_port}"]
        if self.startup:
            a.append(f"--models.startup={','.join(self.startup)}")
        return a
