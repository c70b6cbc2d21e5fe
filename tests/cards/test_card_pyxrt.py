"""The card path through XRT's own Python binding (``backends/hls4ml/card/runtime/xrt.py``).

``tests/cards/test_card_runner.py`` drives the default API, XRT's C API; this module runs the part of
it where the two XRT APIs differ -- every kernel ABI, buffers over request memory, hung
compute units and their recovery, telemetry -- with ``FPGASERVE_TEST_CARD_API=xrt``, over the
simulated ``pyxrt`` (which holds the GIL in syncs and waits, as XRT's binding does). The
whole-server tests (``test_fpga_serving.py``, ``test_fpga_sim.py``) serve through ``pyxrt``.
"""

from __future__ import annotations

import sys

import pytest

from support.tools import run_runner_tests

#: the runner tests whose outcome depends on the card API (the rest exercise the runner alone)
SELECTION = "abi or memory or hung or reset or reloading or telemetry or sensors or overlap"


@pytest.mark.quiet  # the runner tests check DMA overlapping a kernel in time
def test_the_runner_tests_pass_through_pyxrt():
    run_runner_tests(sys.executable, "xrt", "-k", SELECTION)
