"""Running a native host program (no Python of its own) against the simulated cards.

The C double of ``libxrt_coreutil.so.2`` keeps the simulated card's cold path (xclbin loads,
contexts, state files) in ``fpga_sim.card``, which is Python: in a process without an
interpreter it starts one for that (``FPGASERVE_SIM_LIBPYTHON``), and no event of the program
runs in it. :func:`environment` is what such a program's environment needs;
:func:`compile_host` builds one against the double (or a real XRT's library) with ``cc``.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

from .errors import SimulationError

TESTS = Path(__file__).resolve().parents[1]


def libpython() -> Path | None:
    """This interpreter's shared libpython, None when it is linked statically."""
    path = Path(sysconfig.get_config_var("LIBDIR") or "") / (sysconfig.get_config_var("INSTSONAME") or "")
    return path if path.is_file() and path.suffix != ".a" else None


def environment(card_settings: dict[str, str]) -> dict[str, str]:
    """The environment of a native program on the simulated cards: ``card_settings``
    (``FPGASERVE_SIM_*``), ``XILINX_XRT`` at the double, and the interpreter the double embeds
    for the cold path (this one's, with the tests and this venv's site-packages)."""
    from .xrt_c import build_core, build_xrt_root, default_xrt_root

    lib = libpython()
    if lib is None:
        raise SimulationError(
            f"the simulated card's cold path needs a shared libpython to embed; {sys.executable} has none"
        )
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("FPGASERVE_SIM_")},
        **card_settings,
        "XILINX_XRT": card_settings.get("XILINX_XRT") or str(build_xrt_root(default_xrt_root())),
        "FPGASERVE_SIM_LIBPYTHON": str(lib),
        "FPGASERVE_SIM_PYTHONPATH": os.pathsep.join([str(TESTS), *site.getsitepackages()]),
        "PYTHONHOME": sys.base_prefix,
        # lets a program report the card model's own CPU (fpgasim_cpu), as native_host.c does
        "FPGASERVE_SIM_CORE_LIBRARY": str(build_core()),
    }


def compile_host(source: Path, exe: Path, xrt_root: Path) -> Path:
    """``source`` compiled with ``cc`` and linked to ``xrt_root/lib/libxrt_coreutil.so.2``."""
    cc = shutil.which(os.environ.get("CC") or "cc")
    if cc is None:
        raise SimulationError("no C compiler (cc) to build the native host program")
    lib = Path(xrt_root) / "lib"
    cmd = [cc, "-O2", "-Wall", "-Werror", "-pthread", str(source), "-o", str(exe)]
    cmd += [f"-L{lib}", "-l:libxrt_coreutil.so.2", f"-Wl,-rpath,{lib}", "-ldl"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise SimulationError(f"{' '.join(cmd)} failed:\n{done.stderr}")
    return exe
