"""``nnet::normalize_binary_tanh`` and ``nnet::normalize_ternary_tanh``: a BatchNormalization
fused with the binary or ternary tanh after it (hls4ml's ``merge_batch_norm_quantized_tanh``
pass, layer ``BatchNormalizationQuantizedTanh``, nnet_batchnorm.h).

hls4ml folds the normalization into thresholds at conversion time
(``BatchNormalizationQuantizedTanh.set_thresholds``: ``t = -bias / scale``, ternary
``t_hi = t + 0.5 / scale`` and ``t_lo = t - 0.5 / scale``, each floored to the input's grid)
and writes them as weights of the input's precision. The firmware only compares::

    binary:  res[i] = data[i] >= threshold[k] ? 1 : 0                  (ap_uint<1>, the XNOR type)
    ternary: res[i] = data[i] > hi[k] ? 1 : data[i] <= lo[k] ? -1 : 0  (ap_int<2>)

with ``k = i`` (``n_filt == -1``) or ``i % n_filt``. The comparisons are on data_T values, so
on raws; what the thresholds are is whatever the weight texts give once converted to their C
type (a threshold beyond data_T's range wraps or saturates there, as the C++ does): the
firmware is emulated, not the float normalization (for a negative scale the two differ, and
the firmware's comparison direction is kept).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..firmware_graph import Layer, UnsupportedLayerError, const_int
from ..fixed_point import FixedType
from .registry import register, register_stream

if TYPE_CHECKING:
    from .model import FixedPointModel

#: the result types the two functions' signatures fix (``ap_uint<1> res[]``, ``ap_int<2> res[]``)
_BINARY_T = "ap_uint<1>"
_TERNARY_T = "ap_int<2>"


def _thresholds(m: FixedPointModel, layer: Layer, in_t: FixedType, arg: str) -> np.ndarray:
    """The raws of threshold array ``arg``, one per input position (n_filt's modulo applied).
    The C++ parameter is ``data_T threshold[]``, so the array must be of data_T (any other
    element type does not compile); it is read as its declared type, which must equal in_t."""
    declared = layer.weights.get(arg)
    t = m.type_of(declared[1], layer) if declared is not None else in_t
    if t != in_t:
        raise UnsupportedLayerError(f"{layer.describe()}: threshold '{arg}' of type {t}, the data is {in_t}")
    raw = m.weight_raws(layer, arg, t)
    n_in = const_int(layer, "n_in")
    n_filt_text = layer.config.get("consts", {}).get("n_filt", "-1").strip()
    n_filt = -1 if n_filt_text == "-1" else const_int(layer, "n_filt")
    idx = np.arange(n_in) if n_filt == -1 else np.arange(n_in) % n_filt
    if n_in == 0 or idx.max() >= raw.size:
        raise UnsupportedLayerError(f"{layer.describe()}: threshold '{arg}' shorter than n_in ({raw.size} < {n_in})")
    return raw[idx]


@register("normalize_binary_tanh")
def build_normalize_binary_tanh(m: FixedPointModel, layer: Layer, in_t: FixedType):
    """1 where ``data >= threshold``, 0 elsewhere, as ap_uint<1>: one vector comparison."""
    if len(layer.args) != 3:
        raise UnsupportedLayerError(
            f"{layer.describe()}: expected (data, res, threshold), got {len(layer.args)} arguments"
        )
    out_t = FixedType.parse(_BINARY_T)
    t = _thresholds(m, layer, in_t, layer.args[2])
    t_f = t.astype(np.float64)

    def binary(x):
        return (x >= t).astype(np.int64)

    def binary_f64(x):
        return (x >= t_f).astype(np.float64)

    return binary, out_t, binary_f64


@register("normalize_ternary_tanh")
def build_normalize_ternary_tanh(m: FixedPointModel, layer: Layer, in_t: FixedType):
    """1 above ``threshold_hi``, -1 at or below ``threshold_lo`` (tested second, so where
    lo >= hi a value above hi is still 1), 0 between, as ap_int<2>."""
    if len(layer.args) != 4:
        raise UnsupportedLayerError(
            f"{layer.describe()}: expected (data, res, threshold_hi, threshold_lo), got {len(layer.args)} arguments"
        )
    out_t = FixedType.parse(_TERNARY_T)
    hi = _thresholds(m, layer, in_t, layer.args[2])
    lo = _thresholds(m, layer, in_t, layer.args[3])
    hi_f, lo_f = hi.astype(np.float64), lo.astype(np.float64)

    def ternary(x):
        # (x > hi) - (x <= lo and not x > hi): the C++'s if / else if
        up = x > hi
        return up.astype(np.int64) - ((x <= lo) & ~up)

    def ternary_f64(x):
        up = x > hi_f
        return up.astype(np.float64) - ((x <= lo_f) & ~up)

    return ternary, out_t, ternary_f64


@register_stream("normalize_binary_tanh", "normalize_ternary_tanh")
def build_normalize_quantized_tanh_stream(m: FixedPointModel, layer: Layer, in_t: FixedType):
    """The stream forms (nnet_batchnorm_stream.h) index the thresholds by ``i * size + j``
    (n_filt == -1: the position in the array) or ``j % n_filt`` (the position in the word):
    the io_parallel values when a word holds whole pixels, which is what hls4ml writes."""
    from .streams import stream_pack

    text = layer.config.get("consts", {}).get("n_filt", "-1").strip()
    if text != "-1" and stream_pack(m, layer, 0) % const_int(layer, "n_filt"):
        raise UnsupportedLayerError(f"{layer.describe()}: stream words that split a pixel's channels")
    if layer.kind == "normalize_binary_tanh":
        return build_normalize_binary_tanh(m, layer, in_t)
    return build_normalize_ternary_tanh(m, layer, in_t)
