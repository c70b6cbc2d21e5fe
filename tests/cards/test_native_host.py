"""The native host program of the benchmarks (``tests/benchmarks/native_host.c``): C, no Python of
its own, XRT's C API, against the simulated card through the C double -- the reference
``bench_card.py`` measures fpgaserve against.

It must compute what the card computes (its outputs bit for bit the C-simulation's of the same
rows), keep every event in C (the card's cold path runs in an interpreter the double embeds),
and leave the card as it found it. No duration is asserted.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
NATIVE = TESTS / "benchmarks" / "native_host.c"
JET_TAGGER = ROOT / "bitstreams" / "jet_tagger" / "1"

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the simulated kernels run the C-simulation (g++)")


def _events(rows: int, n_in: int) -> np.ndarray:
    """The rows native_host.c makes (its fixed-seed generator; every value exact in float32)."""
    seed, out = 12345, np.empty(rows * n_in, dtype=np.float32)
    for i in range(out.size):
        seed = (seed * 1664525 + 1013904223) % 2**32
        out[i] = ((seed >> 8) / 2**24 - 0.5) * 4.0
    return out.reshape(rows, n_in)


def test_the_native_host_program_computes_what_the_card_computes(tmp_path):
    from fpga_sim import native
    from fpga_sim.errors import SimulationError
    from fpga_sim.projects import kernel_wrapper_project
    from fpga_sim.xclbin import write_xclbin
    from fpga_sim.xrt_c import BuildUnavailable, build_xrt_root
    from fpgaserve.backends.hls4ml.csim import CsimLibrary
    from fpgaserve.backends.hls4ml.project import Hls4mlProject

    if native.libpython() is None:
        pytest.skip("this interpreter has no shared libpython for the C double to embed (the card's cold path)")
    try:
        xrt_root = build_xrt_root(tmp_path / "xrt")
        exe = native.compile_host(NATIVE, tmp_path / "native_host", xrt_root)
    except (BuildUnavailable, SimulationError) as e:
        pytest.skip(f"the native host program cannot be built: {e}")
    folder = kernel_wrapper_project(JET_TAGGER, tmp_path / "kw" / "1", num_kernel=2, hw_quant=True)
    write_xclbin(folder / "model.xclbin", kernel_abi="kernel_wrapper", cus=2, project=folder)
    control = tmp_path / "control"
    control.mkdir()
    env = native.environment(
        {
            "FPGASERVE_SIM_CARDS": "1",
            "FPGASERVE_SIM_CONTROL_DIR": str(control),
            "FPGASERVE_SIM_DEVICE": "inline",
            "XILINX_XRT": str(xrt_root),
        }
    )
    rows, n_in, n_out = 64, 16, 5
    out_file = tmp_path / "out.bin"
    cmd = [str(exe), str(folder / "model.xclbin"), "kernel_wrapper", "2", "2", str(rows), str(n_in), str(n_out)]
    done = subprocess.run([*cmd, "0.3", "--out", str(out_file)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    line = done.stdout.strip().splitlines()[-1]
    assert re.fullmatch(
        r"native_host: events=\d+ seconds=[\d.]+ events_per_s=[\d.]+ cpu_us_per_event=[\d.]+ cus=2 buffers=2 "
        r"card_model_us_per_event=[\d.]+ blocked_us_per_event=[\d.]+",
        line,
    ), line
    assert int(re.search(r"events=(\d+)", line).group(1)) > 0
    # the kernel converts float -> input_t, and returns (float) result_t
    want = CsimLibrary.load(Hls4mlProject.load(folder)).predict(_events(rows, n_in)).astype(np.float32)
    assert out_file.read_bytes() == want.tobytes()
    state = json.loads((control / "state-card0.json").read_text())
    assert state["holders"] == {} and state["programs"] == 1  # it closed the card: nobody holds it
