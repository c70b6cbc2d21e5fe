"""ONNX and QONNX sources: ``--onnx MODEL.onnx``.

Contract: :func:`to_hls` converts the model with hls4ml's ONNX converter after qonnx has
prepared it as that converter expects; :func:`make_reference` writes the float reference
``model.onnx``: the file itself for plain ONNX, or for QONNX (``Quant`` nodes, which ONNX
Runtime cannot run) its QCDQ form. It raises :class:`ReferenceUnavailable` when the QCDQ form
still holds operators ONNX Runtime lacks (``BipolarQuant``, ``Trunc``: qonnx's QuantToQCDQ
covers ``Quant`` only); pack then goes on without a reference.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import Any

from .hls_config import hls_config
from .request import PackError, PackRequest

_QONNX_OPS = ("Quant", "BipolarQuant", "Trunc")


class ReferenceUnavailable(Exception):
    """The model has no float form ONNX Runtime can run."""


def to_hls(hls4ml: Any, req: PackRequest, kwargs: dict):
    if importlib.util.find_spec("qonnx") is None:
        raise PackError("--onnx: hls4ml's ONNX converter needs qonnx (pip install 'fpgaserve[qonnx]')")
    assert req.onnx is not None  # the caller dispatched on it
    model = _qonnx_prepared(req.onnx)
    generated = hls4ml.utils.config_from_onnx_model(
        model,
        granularity=req.granularity,
        backend=kwargs["backend"],  # the layer defaults of the backend that converts
        default_precision=req.default_precision,
    )
    return hls4ml.converters.convert_from_onnx_model(model, hls_config=hls_config(req, generated), **kwargs)


def _qonnx_prepared(path: str):
    """The ONNX/QONNX model as hls4ml's ONNX converter expects it: cleaned up (shapes inferred,
    constants folded, Quant nodes kept), channels-last, Gemm as MatMul + Add."""
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.transformation.channels_last import ConvertToChannelsLastAndClean
    from qonnx.transformation.gemm_to_matmul import GemmToMatMul
    from qonnx.util.cleanup import cleanup_model

    try:
        model = cleanup_model(ModelWrapper(path))
        model = model.transform(ConvertToChannelsLastAndClean())
        model = model.transform(GemmToMatMul())
        return cleanup_model(model)
    except Exception as e:
        raise PackError(f"qonnx cannot prepare {path}: {type(e).__name__}: {e}") from None


def make_reference(path: str, out: Path) -> None:
    import onnx

    nodes = onnx.load(path).graph.node
    if not any(n.domain.startswith("qonnx") or n.op_type in _QONNX_OPS for n in nodes):
        shutil.copyfile(path, out)
        return
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.transformation.qonnx_to_qcdq import QuantToQCDQ
    from qonnx.util.cleanup import cleanup_model

    # QCDQ: each Quant becomes QuantizeLinear/Clip/DequantizeLinear, the same quantized network
    # in standard operators
    model = cleanup_model(cleanup_model(ModelWrapper(path)).transform(QuantToQCDQ()))
    left = sorted({n.op_type for n in model.graph.node if n.domain not in ("", "ai.onnx")})
    if left:
        raise ReferenceUnavailable(
            f"the QONNX model keeps operators ONNX Runtime cannot run after its QCDQ conversion: {', '.join(left)}"
        )
    model.save(str(out))
