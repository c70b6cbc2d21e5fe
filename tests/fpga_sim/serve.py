"""Run fpgaserve with simulated Alveo cards: ``python tests/fpga_sim/serve.py <fpgaserve args>``.

Test-only entry point; the installed ``fpgaserve`` command never imports the simulator. Before
fpgaserve starts it

* puts ``tests/fpga_sim/xrt_python`` first on ``sys.path`` (and on ``PYTHONPATH`` for child
  processes), so ``import pyxrt`` finds the test-only pyxrt over the simulated cards;
* puts ``tests/fpga_sim/bin`` first on ``PATH``, so ``xbutil`` is the simulated one;
* with ``FPGASERVE_SIM_API=pynq``, instead registers the PYNQ 3.0.1 plug-in
  (``fpga_sim.pynq_device``) and leaves pyxrt off the path (a host with PYNQ and no pyxrt);
* with ``FPGASERVE_SIM_API=xrt-c``, also builds the simulated ``libxrt_coreutil.so.2``
  (``fpga_sim.xrt_c``, with the machine's ``cc``, cached by source hash under
  ``$XDG_CACHE_HOME/fpgaserve`` or the temp folder) and sets ``XILINX_XRT`` to it: XRT's C API
  over the same simulated cards, with the test-only pyxrt still importable (a real XRT host has
  both);

then runs the unmodified ``fpgaserve.server.cli.main``. Environment: see fpga_sim/card.py
(``FPGASERVE_SIM_CARDS``, ``FPGASERVE_SIM_CONTROL_DIR``, ``FPGASERVE_SIM_PLATFORM``,
``FPGASERVE_SIM_PCIE_GBPS``, ``FPGASERVE_SIM_SENSORS``, rendezvous) and fpga_sim/kernels.py
(``FPGASERVE_SIM_KERNEL_II``/``_LATENCY``/``_CLOCK_MHZ``/``_DELAY_MS``).
"""

from __future__ import annotations

import os
import sys

ENV_API = "FPGASERVE_SIM_API"
_API_NAMES = {"pynq": "PYNQ", "xrt": "pyxrt", "xrt-c": "XRT's C API (simulated libxrt_coreutil) and pyxrt"}


def _prepend(var: str, path: str) -> None:
    parts = [p for p in os.environ.get(var, "").split(os.pathsep) if p and os.path.abspath(p) != path]
    os.environ[var] = os.pathsep.join([path, *parts])


def _bootstrap() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    tests_dir = os.path.dirname(here)
    xrt_python = os.path.join(here, "xrt_python")
    # Run as a script, Python puts this folder first on sys.path, which would make card.py and
    # xclbin.py importable as top-level modules (second copies): import the package from tests/.
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) not in (here, xrt_python)]
    if tests_dir not in sys.path:
        sys.path.insert(0, tests_dir)
    _prepend("PATH", os.path.join(here, "bin"))
    api = os.environ.get(ENV_API, "xrt").strip().lower() or "xrt"
    if api == "pynq":
        import fpga_sim.pynq_device  # noqa: F401  (registers the simulated cards with PYNQ)
    elif api in ("xrt", "pyxrt", "xrt-c"):
        sys.path.insert(0, xrt_python)
        _prepend("PYTHONPATH", tests_dir)
        _prepend("PYTHONPATH", xrt_python)
        if api == "xrt-c":
            from fpga_sim.xrt_c import BuildUnavailable, build_xrt_root, default_xrt_root

            try:
                os.environ["XILINX_XRT"] = str(build_xrt_root(default_xrt_root()))
            except BuildUnavailable as e:
                raise SystemExit(f"{ENV_API}=xrt-c: {e}") from None
        else:
            api = "xrt"
    else:
        raise SystemExit(f"{ENV_API} must be 'xrt' (the test-only pyxrt), 'xrt-c' or 'pynq', got {api!r}")
    return api


def main(argv: list[str] | None = None) -> int:
    api = _bootstrap()
    sys.stderr.write(
        f"fpgaserve test entry point: {os.environ.get('FPGASERVE_SIM_CARDS', '1')} SIMULATED Alveo card(s) "
        f"(tests/fpga_sim) through {_API_NAMES[api]}, not hardware\n"
    )
    from fpgaserve.server.cli import main as fpgaserve_main

    return fpgaserve_main(argv)


if __name__ == "__main__":
    sys.exit(main())
