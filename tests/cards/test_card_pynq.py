"""The card path through the legacy PYNQ 3.0.1 API (``backends/hls4ml/card/runtime/pynq.py``).

PYNQ 3.0.1 needs numpy 1.x, so it lives in the ``card`` extra and the card venv
(``.tools/venv-card``, see tests/support/tools.py), not in the test venv. This module runs
``tests/cards/test_card_runner.py`` there with ``FPGASERVE_TEST_CARD_API=pynq``: the same runner,
recovery and telemetry tests, driving the simulator's PYNQ device plug-in (ERT exec buffers,
PYNQ's xclbin parser, ``allocate``, syncs) instead of the simulated ``pyxrt``. It passes or
fails with them, or is skipped with the reason when the venv cannot be had.
"""

from __future__ import annotations

import pytest

from support.tools import NEEDS_CARD_VENV


@NEEDS_CARD_VENV
@pytest.mark.quiet  # the runner tests check DMA overlapping a kernel in time
def test_the_runner_tests_pass_through_pynq():
    from support.tools import card_venv_python, run_runner_tests

    python = card_venv_python()  # skips, saying why, when the venv cannot be built
    run_runner_tests(python, "pynq")
