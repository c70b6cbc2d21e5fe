"""hls4ml projects shaped the way each kernel flow leaves them, for tests of the simulated card.

* :func:`kernel_wrapper_project`: a VitisAccelerator (hls4ml PR #991) project made from a
  VivadoAccelerator one: the ``<name>_axi`` wrapper files removed (that backend writes
  ``kernel_wrapper.cpp`` instead) and ``hls4ml_config.yml`` rewritten with ``Backend:
  VitisAccelerator`` and the ``AcceleratorConfig`` keys its ``create_initial_config`` writes
  (``Board``, ``Num_Kernel``, ``Num_Worker``, ``Batchsize``, ``HW_Quant``, ...). The firmware
  itself is untouched, so the C-simulation is the same network.
* :func:`faast_project`: a small PyTorch MLP (16 -> 8 -> ReLU -> 1, every type ap_fixed<16,6>,
  granularity "model", io_parallel, backend Vivado) converted and written by hls4ml itself: the
  16-bit input_t/result_t FaaST's ``alveo_hls4ml`` kernel packs.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import yaml

#: PR #991's AcceleratorConfig defaults (vitis_accelerator_config.py / create_initial_config)
VITIS_ACCELERATOR_DEFAULTS = {
    "Board": "alveo-u55c",
    "Platform": None,
    "Num_Kernel": 1,
    "Num_Worker": 1,
    "Batchsize": 8192,
    "HW_Quant": False,
    "Vivado_Directives": [],
}


def kernel_wrapper_project(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    *,
    num_kernel: int = 1,
    batchsize: int = 8192,
    hw_quant: bool = False,
    board: str = "alveo-u55c",
) -> Path:
    """Copy the hls4ml project ``src`` to ``dst`` as hls4ml's VitisAccelerator backend would have
    written it (see the module docstring); returns ``dst``."""
    src, dst = Path(src), Path(dst)
    # card.json describes the source project and its krnl_rtl kernel: not this one
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.xclbin", "reports", "card.json"))
    config_path = dst / "hls4ml_config.yml"
    text = config_path.read_text()
    # hls4ml writes tuples with !!python/tuple; a safe loader keeps the rest as written
    loader = type("Loader", (yaml.SafeLoader,), {})
    loader.add_constructor("tag:yaml.org,2002:python/tuple", lambda ld, node: list(ld.construct_sequence(node)))
    config = yaml.load(text, Loader=loader)
    name = config.get("ProjectName", "myproject")
    for f in (dst / "firmware").glob(f"{name}_axi.*"):
        f.unlink()
    config["Backend"] = "VitisAccelerator"
    config["AcceleratorConfig"] = {
        **VITIS_ACCELERATOR_DEFAULTS,
        "Board": board,
        "Num_Kernel": num_kernel,
        "Batchsize": batchsize,
        "HW_Quant": hw_quant,
    }
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    return dst


def faast_project(dst: str | os.PathLike, seed: int = 0) -> Path:
    """A 16 -> 8 -> 1 MLP written by hls4ml (Vivado backend, io_parallel, ap_fixed<16,6>)."""
    import torch

    import hls4ml

    dst = Path(dst)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1)).eval()
    rng = np.random.default_rng(seed + 1234)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.from_numpy(rng.normal(0, 0.5, size=tuple(p.shape)).astype(np.float32)))
    cfg = hls4ml.utils.config_from_pytorch_model(
        model, input_shape=(16,), granularity="model", backend="Vivado", default_precision="ap_fixed<16,6>"
    )
    hm = hls4ml.converters.convert_from_pytorch_model(
        model, output_dir=str(dst), backend="Vivado", hls_config=cfg, io_type="io_parallel"
    )
    hm.write()
    return dst
