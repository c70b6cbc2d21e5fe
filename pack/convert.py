"""From a trained model to an hls4ml project on disk.

Contract: :func:`convert` loads the model the request names (from_pytorch, from_onnx,
from_keras), converts it with the hls4ml backend of the request's kernel ABI (settings from
hls_config.py) and writes the project into ``staging`` as hls4ml writes it; it returns hls4ml's
ModelGraph, which the xclbin build needs. One addition: a kernel_wrapper project written by the
Vitis backend (no VitisAccelerator in the installed hls4ml) gets the AcceleratorConfig block
hls4ml PR #991 would have written, so the project records the kernel it is for. It makes no
float reference (reference.py), fixes no file (project_files.py) and builds nothing
(xclbin.py). Whatever hls4ml raises becomes PackError: its converters raise bare Exceptions for
unsupported layers.
"""

from __future__ import annotations

from pathlib import Path

from . import from_keras, from_onnx, from_pytorch, project_files
from .hls_config import VITIS, accelerator_kwargs, vitis_accelerator_config
from .request import PackError, PackRequest


def _hls4ml():
    import hls4ml  # slow import (seconds): only conversions need it

    return hls4ml


def convert(req: PackRequest, staging: Path, platform: str | None):
    hls4ml = _hls4ml()
    kwargs = accelerator_kwargs(req, staging, platform)
    try:
        if req.pytorch or req.pytorch_module is not None:
            hls_model = from_pytorch.to_hls(hls4ml, from_pytorch.module_of(req), req, kwargs)
        elif req.onnx:
            hls_model = from_onnx.to_hls(hls4ml, req, kwargs)
        else:
            assert req.keras is not None  # pack() checked that exactly one source is given
            hls_model = from_keras.to_hls(hls4ml, from_keras.load(req.keras), req, kwargs)
        hls_model.write()
    except PackError:
        raise
    except Exception as e:
        raise PackError(f"hls4ml could not convert the model: {type(e).__name__}: {e}") from e
    if req.kernel_abi == "kernel_wrapper" and kwargs["backend"] == VITIS:
        project_files.add_accelerator_config(staging, vitis_accelerator_config(req, platform))
    return hls_model
