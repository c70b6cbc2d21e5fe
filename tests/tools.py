"""External tools the tests drive, located or installed once, skipped with a reason if impossible.

perf_analyzer (NVIDIA's C++ load generator, release 2.49): ``$PERF_ANALYZER`` if set and
working, else ``<repo>/.tools/perf-analyzer/perf_analyzer``, installed (idempotently) by
``<repo>/../shared/tools/get-perf-analyzer``. Tests ask for the ``perf_analyzer`` fixture by
name: conftest.py imports it, which registers it for every test module (a fixture imported
into each test module instead would make each test that uses it redefine the import, F811).
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

import pytest

from server_process import ROOT

PA_DEST = ROOT / ".tools" / "perf-analyzer"
INSTALLER = ROOT.parent / "shared" / "tools" / "get-perf-analyzer"


def _works(exe: Path) -> bool:
    try:
        return subprocess.run([str(exe), "--version"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@functools.cache
def _locate_perf_analyzer() -> tuple[str | None, str]:
    """(path, "") or (None, why not). Cached: the installer runs at most once per session."""
    override = os.environ.get("PERF_ANALYZER")
    if override and _works(Path(override)):
        return override, ""
    exe = PA_DEST / "perf_analyzer"
    if not INSTALLER.is_file():
        if _works(exe):
            return str(exe), ""
        return None, f"perf_analyzer is not installed at {exe} and the installer {INSTALLER} does not exist"
    try:
        proc = subprocess.run(["bash", str(INSTALLER), str(PA_DEST)], capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        return None, f"installing perf_analyzer with {INSTALLER} timed out (slow or no network?)"
    if proc.returncode != 0 or not _works(exe):
        why = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:]) or "no output"
        return None, (
            f"perf_analyzer could not be installed with {INSTALLER} (rc {proc.returncode}; no network? "
            f"it pip-downloads tritonclient==2.49.0 and nvidia-cuda-runtime-cu12 and apt-gets "
            f"libb64-0d): {why}"
        )
    return str(exe), ""


def perf_analyzer_path() -> str:
    """The perf_analyzer executable, or ``pytest.skip`` with the reason it is unavailable."""
    path, why = _locate_perf_analyzer()
    if path is None:
        pytest.skip(why)
    return path


@pytest.fixture(scope="module")
def perf_analyzer() -> str:
    return perf_analyzer_path()
