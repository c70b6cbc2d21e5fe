"""Run fpgaserve with simulated Alveo cards: ``python tests/fpga_sim/serve.py <fpgaserve args>``.

Test-only entry point. It registers :class:`fpga_sim.device.SimulatedAlveoDevice` with PYNQ
(by importing the module) before fpgaserve starts, so the first ``pynq.Device.devices`` probe
lists ``FPGASERVE_SIM_CARDS`` simulated cards (default 1), then runs the unmodified
``fpgaserve.server.cli.main``. The installed ``fpgaserve`` command never imports the simulator.

Environment: ``FPGASERVE_SIM_CARDS``, ``FPGASERVE_SIM_CONTROL_DIR`` (hang requests and
per-card statistics, see fpga_sim/device.py), ``FPGASERVE_SIM_KERNEL_DELAY_MS``,
``FPGASERVE_SIM_PLATFORM`` (shell name, default xilinx_u250_gen3x16_xdma_shell_4_1).
"""

from __future__ import annotations

import os
import sys


def _bootstrap() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    tests_dir = os.path.dirname(here)
    # Run as a script, Python puts this folder first on sys.path, which would make device.py
    # and xclbin.py importable as top-level "device"/"xclbin" (a second copy of the classes).
    # Import the package from the tests folder instead.
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    if tests_dir not in sys.path:
        sys.path.insert(0, tests_dir)
    import fpga_sim.device  # noqa: F401  (registers the simulated device class with PYNQ)


def main(argv: list[str] | None = None) -> int:
    _bootstrap()
    sys.stderr.write(
        f"fpgaserve test entry point: PYNQ sees {os.environ.get('FPGASERVE_SIM_CARDS', '1')} "
        "SIMULATED Alveo card(s) (tests/fpga_sim), not hardware\n"
    )
    from fpgaserve.server.cli import main as fpgaserve_main

    return fpgaserve_main(argv)


if __name__ == "__main__":
    sys.exit(main())
