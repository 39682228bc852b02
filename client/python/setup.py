"""
setup.py - the build step of rtxd-client that pyproject.toml cannot express: the protocol code.

build_py runs grpc_tools.protoc on rtx/v1/{graph,jobs,admin}.proto (the repository's proto/,
or the copy an sdist carries) and writes the modules into the package as rtxd._proto.rtx.v1
(*_pb2.py with .pyi stubs, *_pb2_grpc.py). Two rewrites make them private to the package:
  - `from rtx.v1 import ...` becomes `from rtxd._proto.rtx.v1 import ...`, so they never
    import, or collide with, a top-level `rtx` package (rtxd's test suites generate one);
  - the descriptors go into rtxd's own descriptor pool (rtxd._proto._pool) instead of
    protobuf's default one, where another copy of rtx/v1/*.proto, of another version, would
    refuse to load beside them ("duplicate file name").
The generated code checks at import that the protobuf and grpcio runtimes are at least the
versions that generated it; the package's dependencies say the same (install_requires is
computed here from the generated files), so pip installs a runtime that fits.
"""

import os
import re
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
PROTOS = ["rtx/v1/graph.proto", "rtx/v1/jobs.proto", "rtx/v1/admin.proto"]
IMPORT_RE = re.compile(r"^(from|import) rtx\.v1\b", re.M)
POOL_IMPORT = "from google.protobuf import descriptor_pool as _descriptor_pool"
POOL_PRIVATE = "from rtxd._proto import _pool as _descriptor_pool"
PROTOBUF_RE = re.compile(r"ValidateProtobufRuntimeVersion\(\s*_runtime_version\.Domain\.PUBLIC,"
                         r"\s*(\d+),\s*(\d+),\s*(\d+),")
GRPC_RE = re.compile(r"^GRPC_GENERATED_VERSION = '([0-9.]+)'", re.M)


def proto_root():
    """Where rtx/v1/*.proto are: $RTXD_PROTO_DIR, the sdist's copy, or the repository's."""
    cands = [Path(os.environ["RTXD_PROTO_DIR"])] if os.environ.get("RTXD_PROTO_DIR") else []
    cands += [HERE / "proto", HERE.parents[1] / "proto"]
    for c in cands:
        if all((c / p).is_file() for p in PROTOS):
            return c
    sys.exit("rtxd-client: cannot find " + ", ".join(PROTOS) + " under any of " +
             ", ".join(str(c) for c in cands) + " (build from the rtxd repository, an sdist, "
             "or set RTXD_PROTO_DIR)")


def rewrite(path):
    """Points a generated module at rtxd._proto.rtx.v1 and rtxd's descriptor pool."""
    text = path.read_text()
    text = IMPORT_RE.sub(r"\1 rtxd._proto.rtx.v1", text)
    if path.name.endswith("_pb2.py"):
        if text.count(POOL_IMPORT) != 1:
            sys.exit(f"rtxd-client: {path.name}: the generated code does not import "
                     f"descriptor_pool as expected ({POOL_IMPORT!r}); this grpcio-tools "
                     "is not supported")
        text = text.replace(POOL_IMPORT, POOL_PRIVATE)
    path.write_text(text)


def generate(pkg_dir):
    """Generates rtxd._proto.rtx.v1 under pkg_dir (the folder holding rtxd/)."""
    out = Path(pkg_dir) / "rtxd" / "_proto"
    shutil.rmtree(out / "rtx", ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    root = proto_root()
    from grpc_tools import protoc  # a build requirement (pyproject.toml)
    import grpc_tools
    include = Path(grpc_tools.__file__).resolve().parent / "_proto"
    args = ["grpc_tools.protoc", f"--proto_path={root}", f"--proto_path={include}",
            f"--python_out={out}", f"--pyi_out={out}", f"--grpc_python_out={out}"] + PROTOS
    if protoc.main(args) != 0:
        sys.exit(f"rtxd-client: grpc_tools.protoc failed on {root}: {' '.join(args[1:])}")
    for d in (out / "rtx", out / "rtx" / "v1"):
        (d / "__init__.py").write_text("")
    for f in sorted((out / "rtx" / "v1").iterdir()):
        if f.suffix in (".py", ".pyi") and f.name != "__init__.py":
            rewrite(f)
    return out / "rtx" / "v1"


def runtime_requirements(gen):
    """The protobuf and grpcio the generated modules need at import."""
    reqs = ["numpy>=1.22"]
    m = PROTOBUF_RE.search((gen / "graph_pb2.py").read_text())
    if m:
        major, minor, patch = (int(x) for x in m.groups())
        reqs.append(f"protobuf>={major}.{minor}.{patch},<{major + 1}")
    else:  # older generators do not check the runtime; the builder API came in 4.21
        reqs.append("protobuf>=4.21")
    m = GRPC_RE.search((gen / "jobs_pb2_grpc.py").read_text())
    reqs.append(f"grpcio>={m.group(1)}" if m else "grpcio>=1.50")
    return reqs


class BuildPy(build_py):
    """build_py, then the protocol modules: into build_lib, or next to the sources for an
    editable install (pip install -e), where build_lib is not what gets imported."""

    def run(self):
        super().run()
        target = HERE if getattr(self, "editable_mode", False) else Path(self.build_lib)
        generate(target)


class Sdist(sdist):
    """An sdist carries its own copy of rtx/v1/*.proto (proto/), to build away from the
    repository."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        root = proto_root()
        for p in PROTOS:
            dst = Path(base_dir) / "proto" / p
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / p, dst)


def requirements():
    """install_requires, from the modules generated into a scratch folder (setuptools wants
    the metadata before it builds)."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        return runtime_requirements(generate(tmp))


setup(cmdclass={"build_py": BuildPy, "sdist": Sdist}, install_requires=requirements())
