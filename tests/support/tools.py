"""External tools the tests drive, located or installed once, skipped with a reason if impossible.

A fixture module: tests/conftest.py registers it (``pytest_plugins``), so every test asks for
``perf_analyzer`` or ``tritonserver_path`` by name and no test module imports another.

perf_analyzer (NVIDIA's C++ load generator, release 2.49): ``$PERF_ANALYZER`` if set and
working, else ``<repo>/.tools/perf-analyzer/perf_analyzer``, installed (idempotently) by
``<repo>/../shared/tools/get-perf-analyzer``. The real Triton server 2.51 (the differential
tests' reference): ``<repo>/.tools/tritonserver/tritonserver``, installed by
``<repo>/../shared/tools/get-tritonserver``. Each installer runs at most once per session
(per process), under a file lock shared with parallel workers.

Under ``CI=true`` a test that needs the real Triton, perf_analyzer or Model Analyzer FAILS
when the tool cannot be installed (:func:`unavailable`): CI must not be green without them.
Elsewhere it skips, saying why.

Three virtual environments beside the project's own, built once under ``<repo>/.tools/`` and
reused (rebuilt when what they install changes):

* ``venv-card``: the ``card`` extra (PYNQ 3.0.1, numpy<2) for the tests that drive the
  simulated card through PYNQ; the main venv runs numpy 2 without PYNQ. Tests ask for its
  interpreter with :func:`card_venv_python` (skips, saying why, when it cannot be built).
* ``venv-triton-stub-<X.Y>``: only ``numpy<2``, for NVIDIA's tritonserver (the reference in
  tests/support/reference_triton.py): its Python-backend stub runs the first ``python3`` on PATH and,
  with numpy 2, silently returns empty outputs. :func:`triton_stub_bin_dir`.
* ``venv-model-analyzer``: NVIDIA's Model Analyzer (``model-analyzer``) and the tritonclient it
  profiles through, for tests/protocol/test_model_analyzer.py. :func:`model_analyzer_executable`.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NoReturn

import pytest

from support.server_process import ROOT

PA_DEST = ROOT / ".tools" / "perf-analyzer"
INSTALLER = ROOT.parent / "shared" / "tools" / "get-perf-analyzer"
TRITON_DEST = ROOT / ".tools" / "tritonserver"
TRITON_INSTALLER = ROOT.parent / "shared" / "tools" / "get-tritonserver"


def unavailable(why: str) -> NoReturn:
    """Skip saying why, or under ``CI=true`` fail saying why: the real Triton, perf_analyzer and
    Model Analyzer are installable wherever CI runs, so a CI run without them is a broken run,
    not a green one."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{why} (CI=true: a test that needs it fails instead of skipping)", pytrace=False)
    pytest.skip(why)


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
        with _locked("perf-analyzer"):
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
    """The perf_analyzer executable, or :func:`unavailable` with the reason it is not."""
    path, why = _locate_perf_analyzer()
    if path is None:
        unavailable(why)
    return path


@pytest.fixture(scope="module")
def perf_analyzer() -> str:
    return perf_analyzer_path()


@functools.cache
def _locate_tritonserver() -> tuple[Path | None, str]:
    """(the tritonserver wrapper, "") or (None, why not). Cached: the installer runs at most once per session."""
    from support.reference_triton import find_tritonserver

    path = find_tritonserver()
    if path is not None:
        return path, ""
    if not TRITON_INSTALLER.exists():
        return None, f"real Triton not installed and no installer at {TRITON_INSTALLER}"
    try:
        with _locked("tritonserver"):
            r = subprocess.run(
                ["bash", str(TRITON_INSTALLER), str(TRITON_DEST)], capture_output=True, text=True, timeout=900
            )
    except subprocess.TimeoutExpired:
        return None, f"installing the real Triton with {TRITON_INSTALLER} timed out (slow or no network?)"
    if r.returncode != 0:
        return None, f"could not install the real Triton: {r.stderr.strip()[-500:]}"
    path = find_tritonserver()
    if path is None:
        return None, "real Triton not available"
    return path, ""


@pytest.fixture(scope="module")
def tritonserver_path() -> Path:
    """The real Triton 2.51 (``.tools/tritonserver/tritonserver``), installed on first use, or
    :func:`unavailable` with the reason it cannot be."""
    path, why = _locate_tritonserver()
    if path is None:
        unavailable(why)
    return path


# ----------------------------------------------------------------------------- side venvs
TOOLS = ROOT / ".tools"
CARD_VENV = TOOLS / "venv-card"
# What the card venv installs besides the project: the `card` extra (pynq and its caps) and
# `pack` (torch and onnx: test_fpga_sim builds its hls4ml project from a PyTorch module, and the
# FPGA tests pack models), plus the test tools those tests import, pinned as in the `test` extra.
CARD_VENV_EXTRAS = "card,pack"
# `pack`'s torch==2.13.0 is the CUDA build on public PyPI (~4 GB): the CPU build goes in first,
# as for the main venv (.ci/install-torch says how), and satisfies the extra's pin.
INSTALL_TORCH = ROOT / ".ci" / "install-torch"
CARD_VENV_TOOLS = ("pytest>=8", "pytest-timeout>=2", "tritonclient[grpc,http]==2.73.0")
# PYNQ 3.0.1 needs numpy<2, which has no wheels for Python 3.13.
CARD_PYTHONS = ((3, 12), (3, 11), (3, 10))
# The Python-backend stub needs numpy 1.x (pybind11's numpy support in the 2.51 stub).
STUB_REQUIREMENT = "numpy<2"


def _tail(proc: subprocess.CompletedProcess, n: int = 3) -> str:
    return " | ".join((proc.stderr or proc.stdout or "").strip().splitlines()[-n:]) or "no output"


@contextlib.contextmanager
def _locked(name: str) -> Iterator[None]:
    """Serializes installing one tool or venv across processes: parallel pytest runs in one
    checkout, xdist's workers and the tests' own servers must not install into the same
    folder at once (the second one waits, then finds it installed)."""
    TOOLS.mkdir(parents=True, exist_ok=True)
    with open(TOOLS / f".{name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _interpreter(versions: Sequence[tuple[int, int]]) -> str | None:
    """This interpreter if its version is one of ``versions``, else the first ``pythonX.Y`` on
    PATH that runs (a pyenv shim of a version that is not selected is on PATH but fails)."""
    if sys.version_info[:2] in versions:
        return sys.executable
    for major, minor in versions:
        found = shutil.which(f"python{major}.{minor}")
        if not found:
            continue
        try:
            proc = subprocess.run(
                [found, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True, timeout=60
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if proc.returncode == 0 and proc.stdout.strip() == str((major, minor)):
            return found
    return None


def _build_venv(
    venv: Path,
    versions: Sequence[tuple[int, int]],
    install: Sequence[str],
    check: str,
    timeout: float,
    with_project: bool,
    prepare: Path | None = None,
) -> tuple[str | None, str]:
    """Create ``venv`` with a Python of ``versions``, run ``prepare VENV`` if given (a script
    that installs what pip must not resolve by itself, such as torch's CPU build), ``pip install``
    ``install`` into it, and return (its python, "") once ``python -c check`` passes, else
    (None, why not). Nothing is installed when the stamp (a hash of ``install``, of ``prepare``'s
    text, and of pyproject.toml if ``with_project``: its dependencies and package list) matches
    and ``check`` passes; after a change it all runs again in the same venv and brings it up to
    date."""
    python = venv / "bin" / "python"
    stamp_file = venv / ".fpgaserve-stamp"
    project = (ROOT / "pyproject.toml").read_text() if with_project else ""
    script = prepare.read_text() if prepare else ""
    stamp = hashlib.sha256("\0".join([*install, project, script]).encode()).hexdigest()

    def checked() -> tuple[bool, str]:
        try:
            proc = subprocess.run([str(python), "-c", check], capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as e:
            return False, str(e)
        return proc.returncode == 0, _tail(proc)

    with _locked(venv.name):
        if python.exists() and stamp_file.is_file() and stamp_file.read_text() == stamp and checked()[0]:
            return str(python), ""
        if not python.exists():
            base = _interpreter(versions)
            if base is None:
                wanted = ", ".join(f"python{a}.{b}" for a, b in versions)
                return None, f"building {venv} needs one of {wanted}; none is on PATH"
            shutil.rmtree(venv, ignore_errors=True)
            proc = subprocess.run([base, "-m", "venv", str(venv)], capture_output=True, text=True, timeout=300)
            if proc.returncode != 0:
                return None, f"{base} -m venv {venv} failed (rc {proc.returncode}): {_tail(proc)}"
        stamp_file.unlink(missing_ok=True)
        if prepare is not None:
            try:
                proc = subprocess.run([str(prepare), str(venv)], capture_output=True, text=True, timeout=timeout)
            except subprocess.TimeoutExpired:
                return None, f"{prepare} {venv} timed out after {timeout:.0f} s (slow or no network?)"
            if proc.returncode != 0:
                return None, f"{prepare} {venv} failed (rc {proc.returncode}): {_tail(proc, 8)}"
        cmd = [str(python), "-m", "pip", "install", "-q", *install]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
        except subprocess.TimeoutExpired:
            return None, f"pip install into {venv} timed out after {timeout:.0f} s (slow or no network?)"
        if proc.returncode != 0:
            return None, f"pip install {' '.join(install)} into {venv} failed (rc {proc.returncode}): {_tail(proc)}"
        ok, why = checked()
        if not ok:
            return None, f"{venv} was built but its check failed ({check!r}): {why}"
        stamp_file.write_text(stamp)
        return str(python), ""


@functools.cache
def _locate_card_venv() -> tuple[str | None, str]:
    return _build_venv(
        CARD_VENV,
        CARD_PYTHONS,
        ["-e", f"{ROOT}[{CARD_VENV_EXTRAS}]", *CARD_VENV_TOOLS],
        # the PYNQ path: pynq imports (with numpy 1.x, which it was built for) and so does the
        # project's code that drives it
        "import numpy, pynq, fpgaserve.backends.hls4ml.backend; assert numpy.__version__.startswith('1.'), numpy.__version__",
        timeout=1800,
        with_project=True,
        prepare=INSTALL_TORCH,
    )


#: for a test that may be the first of the run to need the card venv (or waits on the worker
#: building it): its setup includes the build, bounded by the build's own limits (torch's CPU
#: build, then pip, up to 1,800 s), not by the suite's 300 s per test. Measured: 261 s with
#: four workers on two cores, past 300 s with other runs beside it.
NEEDS_CARD_VENV = pytest.mark.timeout(2400)


def card_venv_python() -> str:
    """The python of ``.tools/venv-card`` (the project with its ``card`` extra, PYNQ 3.0.1 and
    numpy<2, plus pytest and tritonclient), built on first use; ``pytest.skip`` with the reason
    when it cannot be built (no Python 3.10-3.12, no network for the wheels, ...)."""
    path, why = _locate_card_venv()
    if path is None:
        pytest.skip(f"the PYNQ venv {CARD_VENV} is unavailable: {why}")
    return path


@functools.cache
def _locate_stub_venv(version: tuple[int, int]) -> tuple[str | None, str]:
    major, minor = version
    return _build_venv(
        TOOLS / f"venv-triton-stub-{major}.{minor}",
        [version],
        [STUB_REQUIREMENT],
        "import numpy; assert numpy.__version__.startswith('1.'), numpy.__version__",
        timeout=900,
        with_project=False,
    )


def triton_stub_bin_dir(version: tuple[int, int]) -> Path:
    """A ``bin`` folder whose ``python3`` is Python ``version`` with numpy<2 and nothing else,
    for tritonserver's Python-backend stub (put it first on PATH). Built on first use; raises
    RuntimeError saying why when it cannot be (benchmarks call this outside pytest)."""
    path, why = _locate_stub_venv(version)
    if path is None:
        raise RuntimeError(
            f"no Python {version[0]}.{version[1]} with {STUB_REQUIREMENT} for tritonserver's stub: {why}"
        )
    return Path(path).parent


# NVIDIA's Model Analyzer for tests/protocol/test_model_analyzer.py, in a venv of its own: it drags in
# numba, matplotlib, optuna, docker and tritonclient[all] (cuda-python), none of which the project
# needs. 1.58.0 is the release whose floor (grpcio>=1.81.1, tritonclient[all]>=2.4) admits the
# project's pin tritonclient 2.73.0 with grpcio 1.8x and protobuf 6, so the analyzer's own gRPC
# client is the one the project tests with; tritonclient is pinned beside it so pip cannot
# resolve another.
MODEL_ANALYZER_VENV = TOOLS / "venv-model-analyzer"
MODEL_ANALYZER_REQUIREMENTS = ("triton-model-analyzer==1.58.0", "tritonclient[all]==2.73.0")
MODEL_ANALYZER_PYTHONS = ((3, 11), (3, 12), (3, 10))


@functools.cache
def _locate_model_analyzer_venv() -> tuple[str | None, str]:
    return _build_venv(
        MODEL_ANALYZER_VENV,
        MODEL_ANALYZER_PYTHONS,
        list(MODEL_ANALYZER_REQUIREMENTS),
        # the console script's module and the client it profiles through
        "import model_analyzer.entrypoint, tritonclient.grpc, tritonclient.http",
        timeout=900,
        with_project=False,
    )


def model_analyzer_executable() -> str:
    """The ``model-analyzer`` command of ``.tools/venv-model-analyzer`` (Model Analyzer 1.58.0
    with tritonclient 2.73.0), built on first use; ``pytest.skip`` with the reason when it
    cannot be built (no Python 3.10-3.12, no network for the wheels, pip failing); under CI=true it fails instead."""
    python, why = _locate_model_analyzer_venv()
    if python is None:
        unavailable(f"Model Analyzer's venv {MODEL_ANALYZER_VENV} is unavailable: {why}")
    exe = Path(python).parent / "model-analyzer"
    if not exe.is_file():
        unavailable(f"Model Analyzer's venv {MODEL_ANALYZER_VENV} was built but has no {exe}")
    return str(exe)


def run_runner_tests(python: str, api: str, *pytest_args: str) -> str:
    """``tests/cards/test_card_runner.py`` in a child ``python`` with ``FPGASERVE_TEST_CARD_API=api``
    (the same runner, recovery and telemetry tests over another card API); asserts that it
    passed and ran tests, and returns the end of its output."""
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", FPGASERVE_TEST_CARD_API=api)
    out = subprocess.run(
        [
            python,
            "-m",
            "pytest",
            str(root / "tests" / "cards" / "test_card_runner.py"),
            "-q",
            "-p",
            "no:cacheprovider",
            "-rs",
        ]
        + list(pytest_args),
        cwd=root,
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-30:])
    assert out.returncode == 0, tail
    assert " passed" in tail, tail
    return tail
