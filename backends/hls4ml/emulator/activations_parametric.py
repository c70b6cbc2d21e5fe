"""Activations with a parameter argument: ``prelu`` (one slope per element, a weight array)
and ``thresholded_relu`` (one threshold, a literal in the call).

hls4ml 1.3 writes (nnet_activation.h, io_parallel)::

    nnet::prelu<data_T, param_T, res_T, CONFIG_T>(data, a3, res);       // a3: param_T[n_in]
    nnet::thresholded_relu<data_T, param_T, res_T, CONFIG_T>(data, 0.75, res);

``prelu``: ``res = data > 0 ? data : alpha[ii] * data`` (the product exact, then one cast to
res_T); ``thresholded_relu``: ``res = data > theta ? data : 0`` with ``theta`` the literal
converted to param_T when the call binds it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..firmware_graph import Layer, UnsupportedLayerError, const_int
from ..fixed_point import FixedType, cast_f64
from .registry import register

if TYPE_CHECKING:
    from .model import FixedPointModel

#: float64 raws hold integers exactly below 2**52: products must stay under it
_F64_BITS = 52


def _trailing_zeros(raw: np.ndarray, limit: int) -> int:
    """How many low bits every raw shares as zeros, at most ``limit``."""
    nonzero = [abs(int(v)) for v in raw if v != 0]
    if not nonzero:
        return max(0, limit)
    shared = min((v & -v).bit_length() - 1 for v in nonzero)
    return max(0, min(shared, limit))


@register("prelu")
def build_prelu(m: FixedPointModel, layer: Layer, in_t: FixedType):
    """``res[ii] = data[ii] > 0 ? data[ii] : alpha[ii] * data[ii]``.

    Both branches are one exact product cast to res_T: the positive one is ``data * 2**k``
    at the same fractional width, so one multiply by a per-element choice and one cast serve
    both. The slopes come quantized to param_T from float32 weights, so they share trailing
    zero bits: those are dropped from the integer multiplier (and from its fractional width)
    before the product, which keeps a wide param_T (hls4ml sets it to the input's precision,
    36 bits after an auto-sized Dense) inside int64 and often float64."""
    param_t = m.type_of(layer.template[1], layer)
    out_t = m.type_of(layer.template[2], layer)
    arg = layer.args[1]
    n_in = const_int(layer, "n_in")
    if arg not in layer.weights:
        raise UnsupportedLayerError(f"{layer.describe()}: no load_weights_from_txt call fills the slopes '{arg}'")
    n_alpha = layer.weights[arg][2]
    if n_alpha != n_in:
        # PyTorch's PReLU() (one shared slope) is written as a 1-value array that the C++
        # indexes up to n_in - 1: it reads past the array, so its results are not defined
        raise UnsupportedLayerError(
            f"{layer.describe()}: the slope array '{arg}' has {n_alpha} values but the layer reads {n_in} "
            "(hls4ml writes a shared PReLU slope as a single value; the firmware reads beyond it)"
        )
    alpha = m.weight_raws(layer, arg, param_t)
    k = _trailing_zeros(alpha, param_t.frac)
    alpha_k = alpha >> np.int64(k)  # exact: every slope is a multiple of 2**k
    frac_k = param_t.frac - k  # >= 0, so the positive branch's multiplier 2**frac_k is an integer
    one = np.int64(1) << np.int64(frac_k)
    mult_bits = max(int(np.abs(alpha_k).max(initial=0)).bit_length(), frac_k + 1) + 1
    m.check_width(layer, in_t.width + mult_bits, "alpha * x")
    frac = in_t.frac + frac_k

    def prelu(x):
        return out_t.from_raw(x * np.where(x > 0, one, alpha_k), frac)

    if in_t.width + mult_bits > _F64_BITS:
        return prelu, out_t  # the float64 chain runs the int64 op on the same integers

    alpha_f, one_f = alpha_k.astype(np.float64), float(one)
    peak = float(max(-in_t.raw_min, in_t.raw_max)) * float(max(one, int(np.abs(alpha_k).max(initial=0))))

    def prelu_f64(x):
        x *= np.where(x > 0, one_f, alpha_f)
        return cast_f64(out_t, x, frac, -peak, peak)

    return prelu, out_t, prelu_f64


@register("thresholded_relu")
def build_thresholded_relu(m: FixedPointModel, layer: Layer, in_t: FixedType):
    """``res[ii] = data[ii] > theta ? data[ii] : 0``, theta = param_T(literal).

    The comparison is exact between the two fixed-point values: theta is moved to the input's
    grid as ``floor(theta * 2**F_in)`` (an integer raw ``x`` exceeds a real ``q`` exactly when it
    exceeds ``floor(q)``)."""
    param_t = m.type_of(layer.template[1], layer)
    out_t = m.type_of(layer.template[2], layer)
    theta_value = m.literal_arg(layer, 1, "theta")
    try:
        theta = int(param_t.from_float(np.array([theta_value]))[0])
    except ValueError as e:
        raise UnsupportedLayerError(f"{layer.describe()}: theta {theta_value}: {e}") from None
    shift = in_t.frac - param_t.frac
    thr = theta << shift if shift >= 0 else theta >> -shift  # Python ints: exact, floor for >>
    # beyond the input's raw range the comparison has one answer for every input
    thr = min(max(thr, in_t.raw_min - 1), in_t.raw_max)
    lo, hi = float(in_t.raw_min), float(in_t.raw_max)
    thr_i, thr_f = np.int64(thr), float(thr)

    def thresholded(x):
        return np.where(x > thr_i, out_t.cast(x, in_t), np.int64(0))

    def thresholded_f64(x):
        below = x <= thr_f
        v = cast_f64(out_t, x, in_t.frac, lo, hi)
        v[below] = 0.0
        return v

    return thresholded, out_t, thresholded_f64
