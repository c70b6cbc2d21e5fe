"""The hls4ml settings every source framework shares, per kernel ABI.

Contract: :func:`accelerator_kwargs` is what pack hands hls4ml's converters besides the model and
its config: the hls4ml backend that writes a project for the request's kernel ABI, with that
backend's options (board, platform or part, the kernel's I/O precision, compute units), the
output folder and the project name. Which backend that is:

==============  ======================================================================
kernel ABI      hls4ml backend
==============  ======================================================================
krnl_rtl        VivadoAccelerator (axi_stream, float or ap_fixed words), as hls4ml 1.3
kernel_wrapper  VitisAccelerator when the installed hls4ml has it (PR #991), else Vitis;
                for Vitis, :func:`vitis_accelerator_config` is the AcceleratorConfig block
                PR #991 would have written, which convert.py adds to the project
faast           Vivado: a plain io_parallel project, which FaaST's own kernel wraps
==============  ======================================================================

:func:`hls_config` is the layer configuration: the config hls4ml generated for the model, then
``--default-precision``, then ``--precision-config`` (a YAML file), then the programmatic
``hls_overrides``, each merged over the previous one key by key. Both are pure functions of the
request and of the installed hls4ml, so other tools (tests/benchmarks/bench_fpga_modes.py)
reproduce pack's conversion exactly.
"""

from __future__ import annotations

import copy
import inspect
from pathlib import Path

import yaml

from .request import NATIVE, PackError, PackRequest
from .toolchain import board_part

#: the hls4ml backend of the default kernel ABI (krnl_rtl): the Alveo ``krnl_rtl`` kernel
#: (axi_stream, one 32-bit word per element) of hls4ml's VivadoAccelerator backend
HLS4ML_BACKEND = "VivadoAccelerator"
#: hls4ml's backend for kernel_wrapper projects (hls4ml PR #991), and what stands in for it
VITIS_ACCELERATOR = "VitisAccelerator"
VITIS = "Vitis"
#: hls4ml names the top function and the files after it; fpgaserve reads the name from the config
PROJECT_NAME = "myproject"


def vitis_accelerator_available() -> bool:
    """Whether the installed hls4ml has the VitisAccelerator backend (hls4ml PR #991)."""
    # slow import: only conversions and kernel_wrapper builds need it (hls4ml's package imports
    # its backends and registers them, plugins included)
    import hls4ml

    return VITIS_ACCELERATOR.lower() in hls4ml.backends.get_available_backends()


def vitis_accelerator_backend():
    """The installed hls4ml's VitisAccelerator backend object (vitis_accelerator_available first)."""
    import hls4ml

    return hls4ml.backends.get_backend(VITIS_ACCELERATOR)


def backend_name(req: PackRequest) -> str:
    """The hls4ml backend that writes the request's project (see the module docstring)."""
    if req.kernel_abi == "kernel_wrapper":
        return VITIS_ACCELERATOR if vitis_accelerator_available() else VITIS
    if req.kernel_abi == "faast":
        return "Vivado"
    return HLS4ML_BACKEND


def hw_quant(req: PackRequest) -> bool:
    """kernel_wrapper: whether the kernel reads float32 and quantizes on chip (``HW_Quant``)."""
    return req.effective_io_precision != NATIVE


def accelerator_kwargs(req: PackRequest, staging: Path, platform: str | None) -> dict:
    backend = backend_name(req)
    common = {"output_dir": str(staging), "project_name": PROJECT_NAME}
    if backend == HLS4ML_BACKEND:
        precision = req.effective_io_precision
        kwargs = {
            "backend": backend,
            "board": req.board,
            "interface": "axi_stream",
            "driver": "python",
            "io_type": req.effective_io_type,
            "input_type": precision,
            "output_type": precision,
            **common,
        }
        if platform is not None:
            # hls4ml writes it to AcceleratorConfig.Platform for Alveo boards only; left out, its
            # default would be the 2018.3 U250 shell whatever the board
            kwargs["platform"] = platform
        return kwargs
    if backend == VITIS_ACCELERATOR:
        return {"backend": backend, **_vitis_accelerator_options(req, platform), **common}
    # Vitis (kernel_wrapper without PR #991) and Vivado (faast): plain io_parallel projects; the
    # part is the board's, as VitisAccelerator forces it (their default part is of no card)
    kwargs = {"backend": backend, "io_type": req.effective_io_type, **common}
    part = board_part(req.board)
    if part is not None:
        kwargs["part"] = part
    return kwargs


def _vitis_accelerator_options(req: PackRequest, platform: str | None) -> dict:
    """The VitisAccelerator ``create_initial_config`` options for the request, only those the
    installed backend names: PR #991's signature changed over its life (``num_thread`` became
    ``num_worker``, ``platform`` and ``hw_quant`` came later), and its oldest versions take no
    other keyword, so an option it lacks must not be passed; one the request needs is an error."""
    params = inspect.signature(vitis_accelerator_backend().create_initial_config).parameters
    wanted = {
        "board": req.board,
        "platform": platform,
        "io_type": req.effective_io_type,
        "num_kernel": req.effective_compute_units,
        "num_worker": 1,
        "batchsize": req.effective_batchsize,
        "hw_quant": hw_quant(req),
    }
    # what a backend that cannot be told decides the same way by itself: the host threads per
    # CU (fpgaserve drives the card, not PR #991's host code), the defaults, and the platform
    # when --platform was not given (it picks the board's installed one)
    may_drop = {"num_worker"}
    if not hw_quant(req):
        may_drop.add("hw_quant")
    if req.compute_units is None:
        may_drop.add("num_kernel")
    if req.batchsize is None:
        may_drop.add("batchsize")
    if req.platform is None:
        may_drop.add("platform")
    lacking = [k for k in wanted if k not in params and k not in may_drop]
    if lacking:
        raise PackError(
            f"the installed hls4ml's VitisAccelerator backend takes no {', '.join(lacking)} (an early version of "
            "PR #991); install a current one, or leave the option at its default"
            + (" (--io-precision native)" if "hw_quant" in lacking else "")
        )
    return {k: v for k, v in wanted.items() if k in params}


def vitis_accelerator_config(req: PackRequest, platform: str | None) -> dict:
    """The AcceleratorConfig block hls4ml PR #991 writes for these settings (its
    create_initial_config keys); the Vitis stand-in's project gets it, so that the project says
    which kernel it is for (``Hls4mlProject.host_io`` reads HW_Quant from it)."""
    return {
        "Board": req.board,
        "Platform": platform,
        "Num_Kernel": req.effective_compute_units,
        "Num_Worker": 1,
        "Batchsize": req.effective_batchsize,
        "HW_Quant": hw_quant(req),
    }


def hls_config(req: PackRequest, generated: dict) -> dict:
    config = copy.deepcopy(generated)
    config.setdefault("Model", {})["Precision"] = req.default_precision
    if req.precision_config:
        try:
            user = yaml.safe_load(Path(req.precision_config).read_text())
        except (OSError, yaml.YAMLError) as e:
            raise PackError(f"cannot read the precision config {req.precision_config}: {e}") from None
        if not isinstance(user, dict):
            raise PackError(f"{req.precision_config}: expected an hls4ml config mapping (Model:, LayerName:, ...)")
        _merge(config, user)
    _merge(config, copy.deepcopy(req.hls_overrides))
    return config


def _merge(base: dict, extra: dict) -> None:
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _merge(base[k], v)
        else:
            base[k] = v
