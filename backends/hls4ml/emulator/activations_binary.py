"""Binary and ternary activations: ``binary_tanh`` and ``ternary_tanh`` (QKeras' binary/ternary
quantizers, QONNX's ``BipolarQuant``).

hls4ml 1.3 (nnet_activation.h, io_parallel)::

    binary_tanh:  cache = data >= 0 ? 1 : -1  (an ap_int<2>);
                  res = res_T is ap_uint<1> ? (cache > 0 ? cache : 0) : res_T(cache)
    ternary_tanh: datareg = 2 * data   (stored back in data_T: it wraps or saturates there);
                  cache = datareg > 1 ? 1 : datareg > -1 ? 0 : -1   (ints assigned to res_T)

So each output is one of at most three constants, chosen by comparisons on the input's raws.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..firmware_graph import Layer
from ..fixed_point import FixedType, cast_f64
from .activations_tables import tabulate_domain
from .registry import register

if TYPE_CHECKING:
    from .model import FixedPointModel


def _from_int(t: FixedType, value: int) -> np.int64:
    """``t = (int) value``: an integer assigned to the type, with its overflow mode."""
    return np.int64(t.from_raw(np.array([value], np.int64), 0)[0])


@register("binary_tanh")
def build_binary_tanh(m: FixedPointModel, layer: Layer, in_t: FixedType):
    """+1 for data >= 0, -1 below; an ``ap_uint<1>`` result (QONNX's XNOR type) gets 1/0
    (``binary_cast``'s overload), any other res_T the cast of the ap_int<2> (-1 wraps or
    saturates in an unsigned type)."""
    out_t = m.type_of(layer.template[1], layer)
    xnor = out_t.integer_type and not out_t.signed and out_t.width == 1  # std::is_same<res_T, ap_uint<1>>
    pos = _from_int(out_t, 1)
    neg = np.int64(0) if xnor else _from_int(out_t, -1)
    step = pos - neg

    # neg + (x >= 0) * (pos - neg): a comparison and a conversion (np.where with scalars is 8x slower)
    def binary(x):
        r = (x >= 0).astype(np.int64)
        if step != 1:
            r *= step
        if neg:
            r += neg
        return r

    def binary_f64(x):
        r = (x >= 0).astype(np.float64)
        if step != 1:
            r *= float(step)
        if neg:
            r += float(neg)
        return r

    return binary, out_t, binary_f64


@register("ternary_tanh")
def build_ternary_tanh(m: FixedPointModel, layer: Layer, in_t: FixedType):
    """``2 * data`` is stored in data_T first (so it wraps or saturates by data_T's mode), then
    compared with 1 and -1; the comparisons are exact on raws: a raw exceeds the real ``c``
    exactly when it exceeds ``floor(c * 2**F)``."""
    out_t = m.type_of(layer.template[1], layer)
    m.check_width(layer, in_t.width + 1, "2 * x")
    f = in_t.frac
    t_pos = (1 << f) if f >= 0 else 0  # floor(+1 * 2**f)
    t_neg = -(1 << f) if f >= 0 else -1  # floor(-1 * 2**f)
    one, zero, minus = _from_int(out_t, 1), _from_int(out_t, 0), _from_int(out_t, -1)
    lo, hi = 2.0 * in_t.raw_min, 2.0 * in_t.raw_max

    def ternary(x):
        d = in_t.from_raw(x * np.int64(2), f)
        return np.where(d > t_pos, one, np.where(d > t_neg, zero, minus))

    def ternary_f64(x):
        x *= 2.0
        d = cast_f64(in_t, x, f, lo, hi)
        return np.where(d > t_pos, float(one), np.where(d > t_neg, float(zero), float(minus)))

    tabulated = tabulate_domain(ternary, in_t)  # a narrow input: one gather per value
    if tabulated is not None:
        return tabulated[0], out_t, tabulated[1]
    return ternary, out_t, ternary_f64
