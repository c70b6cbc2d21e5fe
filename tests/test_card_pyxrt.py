"""The card path through XRT's own Python binding (``backends/hls4ml/card/runtime/xrt.py``).

``tests/test_card_runner.py`` drives the default API, XRT's C API; this module runs the part of
it where the two XRT APIs differ -- every kernel ABI, buffers over request memory, hung
compute units and their recovery, telemetry -- with ``FPGASERVE_TEST_CARD_API=xrt``, over the
simulated ``pyxrt`` (which holds the GIL in syncs and waits, as XRT's binding does). The
whole-server tests (``test_fpga_serving.py``, ``test_fpga_sim.py``) serve through ``pyxrt``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the runner tests whose outcome depends on the card API (the rest exercise the runner alone)
SELECTION = "abi or memory or hung or reset or reloading or telemetry or sensors or overlap"


def test_the_runner_tests_pass_through_pyxrt():
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", FPGASERVE_TEST_CARD_API="xrt")
    out = subprocess.run(
        [sys.executable, "-m", "pytest", str(ROOT / "tests" / "test_card_runner.py"), "-q", "-p", "no:cacheprovider"]
        + ["-rs", "-k", SELECTION],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-30:])
    assert out.returncode == 0, tail
    assert " passed" in tail, tail
