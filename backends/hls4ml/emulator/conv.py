"""``nnet::conv_1d_cl``/``conv_2d_cl`` and their pointwise forms (io_parallel): a window of
the input times the weights is the dense layer the C++ loops form."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..firmware_graph import Layer, UnsupportedLayerError, const_int
from ..fixed_point import FixedType
from .dense import build_dense
from .registry import register

if TYPE_CHECKING:
    from .model import FixedPointModel


# convolutions
@register("conv_1d_cl", "conv_2d_cl", "pointwise_conv_1d_cl", "pointwise_conv_2d_cl")
def build_conv(m: FixedPointModel, layer: Layer, in_t: FixedType):
    """conv_1d_cl / conv_2d_cl (io_parallel, latency or resource): the buffer filler's
    im2col table gathers each output pixel's window, and the window times the weights is
    the dense layer the C++ loops form (the same products in accum_t, the same order)."""
    table = m.graph.fill_buffer(layer)  # (pixels, window) of input indices, -1 = zero
    n_filt = const_int(layer, "n_filt")
    consts = layer.config.get("consts", {})
    strategy = consts.get("strategy", "nnet::latency").split("::")[-1]
    mult_name = layer.config.get("types", {}).get("mult_config", "")
    mult = m.graph.configs.get(mult_name)
    if mult is None:
        raise UnsupportedLayerError(f"{layer.describe()}: mult_config '{mult_name}' not found in parameters.h")
    for type_key in ("accum_t", "weight_t", "bias_t"):
        if m._cfg_type(layer, type_key) != m._type(mult["types"].get(type_key, type_key), layer):
            raise UnsupportedLayerError(f"{layer.describe()}: {type_key} differs between the layer and its mult_config")
    pixels, window = table.shape
    n_in_total = int(np.prod([const_int(layer, k) for k in _conv_in_dims(layer)]))
    if table.max(initial=-1) >= n_in_total:
        raise UnsupportedLayerError(f"{layer.describe()}: buffer filler reads beyond the input")
    rf = const_int(layer, "reuse_factor")
    if strategy == "latency":
        kernel = "nnet::DenseLatency"
    elif strategy == "resource":
        if rf > window:
            raise UnsupportedLayerError(f"{layer.describe()}: resource conv with reuse factor {rf} > window {window}")
        kernel = "nnet::DenseResource_rf_leq_nin"
    else:
        raise UnsupportedLayerError(f"{layer.describe()}: conv strategy '{strategy}' is not supported")
    dense_cfg = {
        "base": "dense_config",
        "consts": {"n_in": str(window), "n_out": str(n_filt), "reuse_factor": str(rf)},
        "types": {
            **mult.get("types", {}),
            **{k: layer.config["types"][k] for k in ("accum_t", "weight_t", "bias_t")},
        },
        "using": {**mult.get("using", {}), "kernel": kernel},
    }
    dense_layer = Layer(
        "dense", layer.name, layer.template, layer.args, layer.config_name, dense_cfg, weights=layer.weights
    )
    built = build_dense(m, dense_layer, in_t)
    op, out_t = built[0], built[1]
    fop = built[2] if len(built) > 2 else None
    padded = bool((table < 0).any())
    flat_index = np.where(table < 0, n_in_total, table).reshape(-1)

    key = m._layer_key

    def gather(x, zero):
        rows = x.shape[0]
        if padded:
            x = np.concatenate([x, np.full((rows, 1), zero, dtype=x.dtype)], axis=1)
        # np.take along axis 1 writes a C-contiguous (rows, pixels * window) array, so the
        # reshape is free; the float64 chain reuses one buffer (no page faults per call);
        # mode="clip" skips numpy's bounds checks (3x faster): the table was checked at build
        out = m._buffer((key, "im2col"), (rows, flat_index.size)) if x.dtype == np.float64 else None
        return np.take(x, flat_index, axis=1, out=out, mode="clip").reshape(rows * pixels, window)

    def conv(x):
        return op(gather(x, 0)).reshape(x.shape[0], pixels * n_filt)

    def conv_f64(x):
        return fop(gather(x, 0.0)).reshape(x.shape[0], pixels * n_filt)

    return conv, out_t, (conv_f64 if fop is not None else None)


def _conv_in_dims(layer: Layer) -> tuple[str, ...]:
    if "in_height" in layer.config.get("consts", {}):
        return ("in_height", "in_width", "n_chan")
    return ("in_width", "n_chan")
