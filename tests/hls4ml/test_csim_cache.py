"""The C-simulation build cache when it is read-only (backends/hls4ml/csim/library.py).

An image's cache (/var/cache/fpgaserve/csim, the bundled models' builds) is read-only in an
apptainer SIF or a ``--read-only`` container. A model whose build is not there must still load:
it is compiled into a per-user directory ($XDG_CACHE_HOME/fpgaserve/csim, else a temp dir),
the switch logged once; a finished build in the read-only cache is used as it is.

Each case runs in a fresh process (the library registry is per process) that really cannot
write the cache: as root (who writes anywhere but on a read-only mount), in a mount namespace of
its own where the directory is bind-mounted read-only (as in a SIF); otherwise with the
directory's mode 0555. One compile of the bundled facile project (~4 s).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fpgaserve.backends.hls4ml.emulator import FixedPointModel
from fpgaserve.backends.hls4ml.project import Hls4mlProject
from support.server_process import BUNDLED_REPO

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the C-simulation needs g++")

PROJECT = BUNDLED_REPO / "facile" / "1"

# loads the project with the process's default cache (FPGASERVE_CACHE_DIR), predicts a fixed
# batch, and prints where the library came from and its result as JSON
CHILD = """
import json, logging, sys
import numpy as np
from fpgaserve.backends.hls4ml.csim import CsimLibrary
from fpgaserve.backends.hls4ml.project import Hls4mlProject
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
lib = CsimLibrary.load(Hls4mlProject.load(sys.argv[1]))
x = np.random.default_rng(7).standard_normal((64, lib.n_in)).astype(np.float32) * 3
print(json.dumps({"path": str(lib.path), "built": lib.built, "y": lib.predict(x).tolist()}))
"""


def _read_only(path: Path) -> list[str]:
    """The command prefix that runs a child with ``path`` read-only (see the module's docstring)."""
    if os.geteuid() != 0:
        for p in [path, *path.rglob("*")]:
            if p.is_dir():
                p.chmod(0o555)
        return []
    if shutil.which("unshare") is None:
        pytest.skip("as root, a read-only cache needs a read-only bind mount: unshare (util-linux) is missing")
    mount = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount, "sh", str(path)]


def _writable_again(path: Path) -> None:
    for p in [path, *path.rglob("*")]:
        if p.is_dir():
            p.chmod(0o755)


def _load(read_only: Path, cache: Path, home: Path, tmp: Path | None = None) -> subprocess.CompletedProcess:
    """The child with ``read_only`` read-only, FPGASERVE_CACHE_DIR=``cache``, ``home`` as its
    home and XDG cache, ``tmp`` (default: ``home``) as its temp dir."""
    env = {**os.environ, "FPGASERVE_CACHE_DIR": str(cache), "XDG_CACHE_HOME": str(home), "HOME": str(home)}
    env["TMPDIR"] = str(tmp or home)
    command = [*_read_only(read_only), sys.executable, "-c", CHILD, str(PROJECT)]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    _writable_again(read_only)
    if os.geteuid() == 0 and proc.returncode != 0 and "mount" in proc.stderr and "fpgaserve" not in proc.stderr:
        pytest.skip(f"cannot make a read-only bind mount here: {proc.stderr.strip()}")
    return proc


def _result(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _reference() -> np.ndarray:
    project = Hls4mlProject.load(PROJECT)
    x = np.random.default_rng(7).standard_normal((64, project.input.size)).astype(np.float32) * 3
    return FixedPointModel(project).predict(x)


def test_read_only_cache_builds_into_the_user_cache_and_serves_its_builds(tmp_path):
    image_cache = tmp_path / "image-cache"
    image_cache.mkdir()
    home = tmp_path / "home"
    home.mkdir()

    # no build in the read-only cache: compiled into $XDG_CACHE_HOME/fpgaserve/csim, said once
    proc = _load(image_cache, image_cache / "csim", home)
    first = _result(proc)
    fallback = home / "fpgaserve" / "csim"
    assert Path(first["path"]).parent.parent == fallback, first["path"]
    assert first["built"] is True
    assert proc.stderr.count("C-simulation build cache") == 1, proc.stderr
    assert f"build cache {image_cache / 'csim'} is " in proc.stderr and str(fallback) in proc.stderr, proc.stderr
    assert not list(image_cache.iterdir())
    # the firmware's arithmetic: bit for bit the ap_fixed emulation
    assert np.array_equal(np.asarray(first["y"]), _reference())

    # that cache, now read-only itself (as an image's is): its finished build is used, nothing is
    # compiled or written anywhere, and no fallback is taken
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = _load(fallback, fallback, elsewhere)
    second = _result(proc)
    assert second["path"] == first["path"] and second["built"] is False
    assert "C-simulation build cache" not in proc.stderr, proc.stderr
    assert not list(elsewhere.iterdir())
    assert second["y"] == first["y"]


def test_a_temp_dir_others_may_write_is_not_used(tmp_path):
    """The per-user temp dir is refused when someone else could have put libraries in it (here:
    it exists with mode 0777); with no other writable cache, the load fails saying what to do."""
    read_only = tmp_path / "ro"
    read_only.mkdir()
    tmp = tmp_path / "tmp"
    planted = tmp / f"fpgaserve-csim-{os.getuid()}"
    planted.mkdir(parents=True)
    planted.chmod(0o777)
    proc = _load(read_only, read_only / "csim", read_only, tmp)
    assert proc.returncode != 0
    assert f"the build cache {read_only / 'csim'} is " in proc.stderr, proc.stderr[-3000:]
    assert f"nor {tmp}/fpgaserve-csim-{os.getuid()} is a directory of this user's" in proc.stderr, proc.stderr[-3000:]
    assert "set FPGASERVE_CACHE_DIR to one" in proc.stderr, proc.stderr[-3000:]
    assert not list(planted.iterdir())
