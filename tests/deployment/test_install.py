"""The base install, as a user makes it: ``pip install <repo>`` into a fresh venv.

For Python 3.12 and 3.13 (each skipped, saying so, when no such interpreter is found: on PATH,
or among pyenv's versions), a new venv gets the project installed non-editable from a copy of
the working tree (what git tracks or would track: no venvs, build folders or egg-info). Then:

* numpy >= 2 is installed and pynq is not (pynq and its numpy<2 cap live in the ``card`` extra),
  nor grpcio-tools (a build requirement only: the build compiled the protos' descriptors);
* the venv's ``fpgaserve`` command serves ``bitstreams/`` on free loopback ports, and one
  inference per bundled model returns the right shape, finite values, and the same float32 bits
  as this (the main) venv's numpy emulator of the same firmware.

Slow: pip resolves and downloads every dependency's wheels for that Python (onnxruntime,
numpy, hls4ml's dependencies, grpcio-tools for the build; pip's cache helps where it has them) and builds the
project, about 20-30 s per Python version on a fast network; marked ``slow``, with a generous
timeout for slow networks.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from fpgaserve.backends.hls4ml.emulator import FixedPointModel
from fpgaserve.backends.hls4ml.project import Hls4mlProject
from support.server_process import BUNDLED_REPO, ROOT, ServerProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

# name -> (input, output, item shape, outputs per row), as bitstreams/*/config.pbtxt declare them
MODELS = {
    "facile": ("input", "output/BiasAdd", (47,), 1),
    "jet_tagger": ("input", "output", (16,), 5),
    "calo_cnn": ("input", "output", (1, 16, 16), 5),
}
PIP_TIMEOUT_S = 1800


def _reports(exe: str | Path, version: str) -> bool:
    """Whether ``exe`` runs and is Python ``version`` (a pyenv shim for a version that is not
    selected exists on PATH but fails)."""
    try:
        proc = subprocess.run(
            [str(exe), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0 and proc.stdout.strip() == version


def _find_python(version: str) -> str | None:
    """``python<version>`` from PATH, else the newest pyenv-installed ``<version>.N``."""
    exe = shutil.which(f"python{version}")
    if exe and _reports(exe, version):
        return exe
    pyenv = shutil.which("pyenv")
    if pyenv is None:
        return None
    try:
        bare = subprocess.run([pyenv, "versions", "--bare"], capture_output=True, text=True, timeout=60).stdout
        root = subprocess.run([pyenv, "root"], capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    pattern = re.compile(rf"^{re.escape(version)}\.(\d+)$")
    patches = sorted(int(m.group(1)) for m in map(pattern.match, bare.split()) if m)
    if not patches or not root:
        return None
    exe = Path(root) / "versions" / f"{version}.{patches[-1]}" / "bin" / f"python{version}"
    return str(exe) if _reports(exe, version) else None


def _copy_tree(dest: Path) -> Path:
    """The working tree's files that git tracks or would track, copied to ``dest``: what a
    checkout holds, without this machine's venvs, build folders or egg-info. Outside a git
    checkout (an unpacked archive): everything but what .gitignore names."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
            timeout=120,
        ).stdout
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired):
        ignored = (".git", ".venv", ".tools", "build", "dist", "tmp", "*.egg-info", "__pycache__", "*.pyc", ".*_cache")
        shutil.copytree(ROOT, dest, ignore=shutil.ignore_patterns(*ignored))
        return dest
    for rel in filter(None, listed.decode().split("\0")):
        src = ROOT / rel
        if src.is_file():  # listed but deleted in the working tree: skip
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def _clean_env() -> dict[str, str]:
    """This environment without what would point the new venv's Python at other packages."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}


def _run(cmd: list[str], timeout: float, cwd: Path) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=_clean_env())
    assert proc.returncode == 0, (
        f"{' '.join(cmd)} failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc.stdout


class InstalledServer(ServerProcess):
    """ServerProcess running a venv's ``fpgaserve`` console script instead of this interpreter."""

    def __init__(self, program: Path, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.program = str(program)

    @property
    def args(self) -> list[str]:
        # ServerProcess's command is [sys.executable, *entry, <options>]; keep the options
        return [self.program, *super().args[1 + len(self.entry) :]]


def _inputs(shape: tuple[int, ...]) -> np.ndarray:
    """Rows of unit and large magnitudes (the large ones saturate/wrap ap_fixed<16,6>), zeros."""
    rng = np.random.default_rng(18)
    x = rng.standard_normal((24, *shape), dtype=np.float32)
    x[8:16] *= 40
    x[16] = 0
    return x


@pytest.mark.parametrize("version", ["3.12", "3.13"])
def test_base_install_takes_numpy2_without_pynq_and_serves_bitstreams(version, tmp_path):
    python = _find_python(version)
    if python is None:
        pytest.skip(f"no Python {version}: python{version} is not on PATH (or does not run) and pyenv has none")
    src = _copy_tree(tmp_path / "src")
    venv = tmp_path / "venv"
    _run([python, "-m", "venv", str(venv)], 300, tmp_path)
    vpy = venv / "bin" / "python"
    _run([str(vpy), "-m", "pip", "install", "-q", str(src)], PIP_TIMEOUT_S, tmp_path)

    probe = (
        "import importlib.metadata as m, importlib.util as u, json, numpy, fpgaserve.server as s\n"
        "try:\n    pynq = m.version('pynq')\nexcept m.PackageNotFoundError:\n    pynq = None\n"
        "print(json.dumps({'numpy': numpy.__version__, 'pynq': pynq, 'pynq_importable': "
        "u.find_spec('pynq') is not None, 'grpc_tools': u.find_spec('grpc_tools') is not None, "
        "'server': s.__file__}))\n"
    )
    facts = json.loads(_run([str(vpy), "-c", probe], 120, tmp_path).strip().splitlines()[-1])
    assert int(facts["numpy"].split(".")[0]) >= 2, facts
    assert facts["pynq"] is None and not facts["pynq_importable"], facts
    assert not facts["grpc_tools"], facts
    # installed, not this checkout's sources
    assert Path(facts["server"]).is_relative_to(venv), facts

    log = tmp_path / "fpgaserve.log"
    server = InstalledServer(venv / "bin" / "fpgaserve", [BUNDLED_REPO], log_path=log, env=_clean_env())
    server.start(timeout=300)
    try:
        with grpcclient.InferenceServerClient(server.url) as client:
            for name, (inp, out, shape, n_out) in MODELS.items():
                x = _inputs(shape)
                t = grpcclient.InferInput(inp, list(x.shape), "FP32")
                t.set_data_from_numpy(x)
                y = client.infer(name, [t], outputs=[grpcclient.InferRequestedOutput(out)]).as_numpy(out)
                assert y.dtype == np.float32 and y.shape == (len(x), n_out), (name, y.dtype, y.shape)
                assert np.isfinite(y).all(), name
                want = FixedPointModel(Hls4mlProject.load(BUNDLED_REPO / name / "1")).predict(x).astype(np.float32)
                differ = np.flatnonzero((y.view(np.uint32) != want.view(np.uint32)).any(axis=1))
                assert differ.size == 0, (
                    f"{name} on Python {version}: {differ.size} rows differ from this venv's numpy emulator "
                    f"(numpy {np.__version__}, Python {sys.version_info[0]}.{sys.version_info[1]}), first row "
                    f"{differ[0]}: served {y[differ[0]]} emulated {want[differ[0]]}; installed {facts}\n"
                    f"{server.log()}"
                )
    finally:
        rc = server.stop()
    assert rc == 0, f"the installed server exited with {rc}: {server.log()}"
    # for the CI log (pytest -rA / -s): what was installed and which mode served each model
    print(f"Python {version}: {facts}")
    print("\n".join(line for line in server.log().splitlines() if "loaded model" in line or " runs in " in line))
