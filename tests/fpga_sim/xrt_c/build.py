"""Build the simulated ``libxrt_coreutil.so.2`` into an XRT-like install folder, and the card core
(``libfpgasim_card.so``, card_core.c) it calls, both cached by source hash."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCE = Path(__file__).resolve().with_name("xrt_coreutil_double.c")
CORE_SOURCE = SOURCE.with_name("card_core.c")
CORE_HEADER = SOURCE.with_name("card_core.h")
LIBRARY = "libxrt_coreutil.so.2"
CORE_LIBRARY = "libfpgasim_card.so"
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
    digest.update(CORE_HEADER.read_bytes())
    digest.update(" ".join(FLAGS).encode())
    digest.update(XRT_VERSION.encode())
    return digest.hexdigest()[:20]


def core_hash() -> str:
    digest = hashlib.sha256(CORE_SOURCE.read_bytes())
    digest.update(CORE_HEADER.read_bytes())
    digest.update(" ".join(FLAGS).encode())
    return digest.hexdigest()[:20]


def _cache_base() -> Path:
    base = os.environ.get("XDG_CACHE_HOME")
    return Path(base) / "fpgaserve" if base else Path(tempfile.gettempdir()) / f"fpgaserve-{os.getuid()}"


def default_xrt_root() -> Path:
    """Where serve.py builds it: ``$XDG_CACHE_HOME/fpgaserve/xrt-c-<hash>`` or under the temp dir."""
    return _cache_base() / f"xrt-c-{source_hash()}"


def default_core_path() -> Path:
    """Where the card core is built: one place per source, so that every loader of this process
    (the card model, the C double) reaches the same copy (one card model, one timeline)."""
    return _cache_base() / f"fpgasim-card-{core_hash()}" / CORE_LIBRARY


def build_core(path: str | os.PathLike | None = None) -> Path:
    """Compile the card core (card_core.c) into ``path`` (default :func:`default_core_path`)
    unless the same source built it there already. Raises :class:`BuildUnavailable` without a
    compiler and :class:`BuildFailed` when the source does not compile."""
    lib = Path(path) if path is not None else default_core_path()
    stamp = lib.with_name(HASH_FILE)
    digest = core_hash()
    if lib.is_file() and stamp.is_file() and stamp.read_text().strip() == digest:
        return lib
    _compile(CORE_SOURCE, lib, [f"-Wl,-soname,{CORE_LIBRARY}"], ["-lm"])
    stamp.write_text(digest + "\n")
    return lib


def _compile(source: Path, lib: Path, extra: list[str], libs: list[str]) -> None:
    cc = _compiler()
    lib.parent.mkdir(parents=True, exist_ok=True)
    tmp = lib.with_name(f".{lib.name}.{os.getpid()}.tmp")
    cmd = [cc, *FLAGS, *extra, "-o", str(tmp), str(source), *libs]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BuildUnavailable(f"cannot run {cc}: {e}") from None
    if done.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BuildFailed(f"{' '.join(cmd)} failed:\n{done.stderr.strip()}")
    os.replace(tmp, lib)  # a new inode: a process that has the old one loaded keeps it


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
    build_core()  # the double calls the card core the card model loads
    _compile(SOURCE, lib, [f"-Wl,-soname,{LIBRARY}", f"-I{CORE_HEADER.parent}"], ["-ldl"])
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
