"""Build step that compiles the wire schema: everything else about the package is in pyproject.toml.

``protos/*.proto`` are compiled by grpc_tools' bundled protoc (a build requirement, see
``[build-system]``) into one FileDescriptorSet, ``protos/descriptors-<hash>.binpb``, which
``fpgaserve.protos`` loads into its private descriptor pool at import. Compiling here instead of
at import keeps grpcio-tools (protoc, ~8 MB of wheels per platform) out of the runtime
dependencies and the compile out of every process's start.

The file is written into the source tree (protos/), for both kinds of install:

* a wheel (``pip install .``): build_py then copies it into the wheel as package data;
* an editable install (``pip install -e .``): the package is imported from the source tree,
  where the file now is.

A source checkout used without installing (``PYTHONPATH``) builds it with one command, in an
interpreter that has grpcio-tools==1.81.1 and setuptools::

    python setup.py build_protos

``<hash>`` is a digest of the .proto files (names and contents; ``protos/descriptor_file.py``,
shared with ``fpgaserve.protos``): after a .proto changes, the package finds no descriptors for it
and says to rebuild instead of loading a stale schema.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from pathlib import Path
from typing import ClassVar

from setuptools import Command, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
PROTO_DIR = HERE / "protos"
# what protoc is given (grpc_service.proto imports model_config.proto; --include_imports adds the rest)
PROTO_FILES = ("model_config.proto", "grpc_service.proto", "health.proto")


def _descriptor_file():
    """protos/descriptor_file.py, loaded by path (the package is not importable while it is
    built): the one place that names the descriptor file, for the build and for the import."""
    spec = importlib.util.spec_from_file_location("_fpgaserve_descriptor_file", PROTO_DIR / "descriptor_file.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compile_descriptors(proto_dir: Path = PROTO_DIR) -> Path:
    """Compile ``PROTO_FILES`` into ``proto_dir/descriptors-<digest>.binpb`` (with their
    imports), remove descriptor files of other digests, and return the new file's path."""
    import grpc_tools  # a build requirement; imported here so `setup.py --help` works without it
    from grpc_tools import protoc

    target = _descriptor_file().descriptor_path(proto_dir)
    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "descriptors.binpb")
        args = [
            "protoc",
            f"-I{proto_dir}",
            f"-I{well_known}",
            f"--descriptor_set_out={out}",
            "--include_imports",
            *PROTO_FILES,
        ]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed to compile {PROTO_FILES} in {proto_dir} (its errors are above)")
        # written whole, then renamed: a concurrent import never reads half a file
        staged = proto_dir / f".{target.name}.tmp"
        staged.write_bytes(Path(out).read_bytes())
        staged.replace(target)
    for old in proto_dir.glob("descriptors-*.binpb"):
        if old != target:
            old.unlink()
    return target


class BuildProtos(Command):
    """``python setup.py build_protos``: compile the descriptors into protos/ (see the module
    docstring); also run by build_py, so every build and install does it."""

    description = "compile protos/*.proto into protos/descriptors-<hash>.binpb (grpc_tools' protoc)"
    user_options: ClassVar[list] = []  # no options

    def initialize_options(self) -> None:
        pass

    def finalize_options(self) -> None:
        pass

    def run(self) -> None:
        path = compile_descriptors()
        print(f"wrote {path.relative_to(HERE)}", file=sys.stderr)


class BuildPy(build_py):
    """build_py that compiles the descriptors first, so that the package-data glob
    ``*.binpb`` (pyproject.toml) ships them in wheels and editable installs find them in protos/."""

    def run(self) -> None:
        self.run_command("build_protos")
        # package data is listed lazily on first use; drop a listing made before the file existed
        self.__dict__.pop("data_files", None)
        super().run()


setup(cmdclass={"build_protos": BuildProtos, "build_py": BuildPy})
