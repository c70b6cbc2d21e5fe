"""Build the simulated ``libxrt_coreutil.so.2`` into an XRT-like install folder (cached by hash)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCE = Path(__file__).resolve().with_name("xrt_coreutil_double.c")
LIBRARY = "libxrt_coreutil.so.2"
#: the XRT release the double presents in version.json (the C API is the same from 2.8 on)
XRT_VERSION = "2.17.319"
FLAGS = ["-O2", "-shared", "-fPIC", "-Wall", "-Werror", "-fvisibility=hidden", "-pthread"]
HASH_FILE = ".fpgaserve-source-hash"


class BuildFailed(RuntimeError):
    """The double's source did not compile: never a reason to skip."""


class BuildUnavailable(RuntimeError):
    """The double cannot be built here (no C compiler, or it failed): tests skip with this text."""


def _compiler() -> str:
    cc = os.environ.get("CC") or "cc"
    found = shutil.which(cc)
    if found is None:
        raise BuildUnavailable(
            f"no C compiler ({cc!r} is not on PATH): the simulated libxrt_coreutil.so.2 cannot be built"
        )
    return found


def source_hash() -> str:
    digest = hashlib.sha256(SOURCE.read_bytes())
    digest.update(" ".join(FLAGS).encode())
    digest.update(XRT_VERSION.encode())
    return digest.hexdigest()[:20]


def default_xrt_root() -> Path:
    """Where serve.py builds it: ``$XDG_CACHE_HOME/fpgaserve/xrt-c-<hash>`` or under the temp dir."""
    base = os.environ.get("XDG_CACHE_HOME")
    folder = Path(base) / "fpgaserve" if base else Path(tempfile.gettempdir()) / f"fpgaserve-{os.getuid()}"
    return folder / f"xrt-c-{source_hash()}"


def build_xrt_root(dest: str | os.PathLike) -> Path:
    """Compile the double into ``dest/lib/libxrt_coreutil.so.2`` (unless the same source built
    it there already) and write ``dest/version.json``; returns ``dest``, usable as XILINX_XRT.
    Raises :class:`BuildUnavailable` without a compiler (the machine cannot: tests skip) and
    :class:`BuildFailed` when the source does not compile (a fault of ours: tests fail)."""
    dest = Path(dest)
    lib = dest / "lib" / LIBRARY
    stamp = dest / "lib" / HASH_FILE
    digest = source_hash()
    if lib.is_file() and stamp.is_file() and stamp.read_text().strip() == digest:
        _write_version(dest)
        return dest
    cc = _compiler()
    lib.parent.mkdir(parents=True, exist_ok=True)
    tmp = lib.with_name(f".{LIBRARY}.{os.getpid()}.tmp")
    cmd = [cc, *FLAGS, f"-Wl,-soname,{LIBRARY}", "-o", str(tmp), str(SOURCE), "-ldl"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BuildUnavailable(f"cannot run {cc}: {e}") from None
    if done.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BuildFailed(f"{' '.join(cmd)} failed:\n{done.stderr.strip()}")
    os.replace(tmp, lib)  # a new inode: a process that has the old one loaded keeps it
    stamp.write_text(digest + "\n")
    _write_version(dest)
    return dest


def _write_version(dest: Path) -> None:
    path = dest / "version.json"
    info = {
        "BUILD_VERSION": XRT_VERSION,
        "BUILD_VERSION_DATE": "n/a",
        "BUILD_BRANCH": "2024.1",
        "VERSION_HASH": "simulated (fpgaserve tests/fpga_sim/xrt_c)",
        "VERSION_HASH_DATE": "n/a",
    }
    text = json.dumps(info, indent=4) + "\n"
    if not path.is_file() or path.read_text() != text:
        tmp = path.with_name(f".version.json.{os.getpid()}")
        tmp.write_text(text)
        os.replace(tmp, path)
