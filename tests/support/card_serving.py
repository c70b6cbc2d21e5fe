"""Serving on the simulated Alveo cards (tests/fpga_sim): the repository a card test serves
(bundled projects with an xclbin and card.json beside them), the server started through
``tests/fpga_sim/serve.py``, the simulator's per-card stats, and the C-simulation reference
a client's bytes must equal. Used by tests/cards/ and by the engine tests that run on cards.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
from pathlib import Path

import numpy as np

from support import ap_fixed
from support.server_process import BUNDLED_REPO, ROOT, ServerProcess
from support.waiting import wait_until

SERVE = ROOT / "tests" / "fpga_sim" / "serve.py"


# model -> (input, output, features, outputs)
MODELS = {
    "facile": ("input", "output/BiasAdd", 47, 1),
    "jet_tagger": ("input", "output", 16, 5),
}


SIM_ENV = (
    "FPGASERVE_SIM_CARDS",
    "FPGASERVE_SIM_CONTROL_DIR",
    "FPGASERVE_SIM_KERNEL_DELAY_MS",
    "FPGASERVE_SIM_RENDEZVOUS",
    "FPGASERVE_SIM_RENDEZVOUS_TIMEOUT_S",
    "FPGASERVE_SIM_PLATFORM",
    "FPGASERVE_SIM_API",
)


# ------------------------------------------------------------------------------ repository
def card_model(
    repo: Path,
    source: str,
    name: str,
    params: dict[str, str],
    count: int = 1,
    xclbin: bool = True,
    batcher: bool = True,
):
    """Copy a bundled model under ``name`` with extra config parameters; returns its xclbin uuid."""

    folder = repo / name
    shutil.copytree(BUNDLED_REPO / source, folder)
    config = folder / "config.pbtxt"
    text = config.read_text()
    for old, new in ((f'name: "{source}"', f'name: "{name}"'), ("count: 1", f"count: {count}")):
        assert old in text, (old, config)
        text = text.replace(old, new)
    if not batcher:
        old = "dynamic_batching {\n  max_queue_delay_microseconds: 0\n}\n"
        assert old in text, config
        text = text.replace(old, "")
    for key, value in params.items():
        text += f'parameters {{\n  key: "{key}"\n  value: {{ string_value: "{value}" }}\n}}\n'
    config.write_text(text)
    # the simulated cards run the default shell: the xclbin must be linked for it
    return write_card_xclbin(folder / "1", "krnl_rtl") if xclbin else None


def write_card_xclbin(version: Path, abi: str, **kw) -> str:
    """An xclbin from the simulator's writer next to the project, and card.json recorded for it
    as `fpgaserve pack --xclbin` does; returns the xclbin's uuid."""
    from fpga_sim.xclbin import write_xclbin
    from fpgaserve.backends.hls4ml.card.axlf import read_xclbin
    from fpgaserve.backends.hls4ml.card.manifest import CardManifest
    from fpgaserve.backends.hls4ml.project import Hls4mlProject

    uuid = write_xclbin(version / "model.xclbin", kernel_abi=abi, project=version, **kw)
    CardManifest.for_project(Hls4mlProject.load(version), abi, read_xclbin(version / "model.xclbin")).write(version)
    return uuid


def serve_cards(
    repo_path: Path,
    tmp_path_factory,
    label: str,
    mode: str,
    cards: int,
    *load: str,
    extra: tuple[str, ...] = (),
    api: str = "xrt",
) -> ServerProcess:
    """``api``: how serve.py presents the cards: ``xrt`` (the test-only pyxrt alone: card-api
    auto takes it) or ``xrt-c`` (also the C double of libxrt_coreutil: auto takes XRT's C API)."""
    control = tmp_path_factory.mktemp(f"{label}-control")
    log = tmp_path_factory.mktemp(label) / "fpgaserve.log"
    env = {k: v for k, v in os.environ.items() if k not in SIM_ENV}
    env.update(FPGASERVE_SIM_CARDS=str(cards), FPGASERVE_SIM_CONTROL_DIR=str(control), FPGASERVE_SIM_API=api)
    args = ["--fpga-mode", mode, "--model-control-mode", "explicit", *extra]
    for name in load:
        args += ["--load-model", name]
    proc = ServerProcess([repo_path], *args, log_path=log, env=env, entry=[SERVE])
    proc.control = control
    return proc.start(timeout=240)


def card_stats(server: ServerProcess, card: int) -> dict:
    return json.loads((server.control / f"stats-card{card}.json").read_text())


def card_stats_after(server: ServerProcess, card: int, before: dict, completions: int) -> dict:
    """The card's stats once ``completions`` more kernel calls completed than in ``before``: the
    simulator writes its stats file at most 50 ms after a change, so a read right after the
    server answered may be older than the answer."""
    return wait_until(
        lambda: (
            (s := card_stats(server, card))["kernel_completions"] - before["kernel_completions"] >= completions and s
        ),
        f"card {card} to record {completions} completed kernel call(s)",
    )


@functools.cache
def _csim(model: str, cache_dir: str):
    from fpgaserve.backends.hls4ml.csim import CsimLibrary
    from fpgaserve.backends.hls4ml.project import Hls4mlProject

    return CsimLibrary.load(Hls4mlProject.load(BUNDLED_REPO / model / "1"), cache_dir=cache_dir)


def csim_reference(model: str, x: np.ndarray, cache_dir) -> np.ndarray:
    """What --fpga-mode csim serves: hls4ml's C-simulation of the bundled project, as FP32."""
    return _csim(model.replace("_pair", ""), str(cache_dir)).predict(x).astype(np.float32)


def assert_bitwise(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.dtype == want.dtype == np.float32 and got.shape == want.shape, (what, got.shape, want.shape)
    bad = np.flatnonzero((got.view(np.uint32) != want.view(np.uint32)).reshape(len(got), -1).any(axis=1))
    assert bad.size == 0, f"{what}: {bad.size} rows differ, first {bad[0]}: got {got[bad[0]]} want {want[bad[0]]}"


def edge_inputs(features: int) -> dict[str, np.ndarray]:
    """Random rows and the fixed-point corners of ap_fixed<16,6> (range [-32, 32), step 2^-10)."""
    rng = np.random.default_rng(features)
    corners = np.array([*ap_fixed.STEPS, *ap_fixed.BEYOND, 1e30, -1e30], dtype=np.float32)
    grid = ap_fixed.grid_rows(rng, features)
    return {
        "unit": rng.standard_normal((2000, features), dtype=np.float32),
        "saturating": rng.standard_normal((500, features), dtype=np.float32) * 40,  # beyond the input range
        "negative": -np.abs(rng.standard_normal((300, features), dtype=np.float32)) * 4,
        "zeros": np.zeros((5, features), np.float32),
        "corners": np.concatenate(
            [
                np.stack([np.full(features, v, np.float32) for v in corners]),
                rng.choice(corners, (30, features)).astype(np.float32),
                *grid,
            ]
        ),
        "single": rng.standard_normal((1, features), dtype=np.float32),
    }


# ------------------------------------------------------------------------------ every kernel ABI
def abi_model(repo: Path, name: str, version: Path, n_in: int, n_out: int, instances: int, max_batch: int) -> None:
    """A model folder around a project already in ``version`` (its config written here)."""
    (repo / name).mkdir(parents=True, exist_ok=True)
    (repo / name / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "hls4ml"\nmax_batch_size: {max_batch}\n'
        f'input [ {{ name: "x" data_type: TYPE_FP32 dims: [ {n_in} ] }} ]\n'
        f'output [ {{ name: "y" data_type: TYPE_FP32 dims: [ {n_out} ] }} ]\n'
        f"instance_group [ {{ count: {instances} kind: KIND_MODEL }} ]\n"
    )
