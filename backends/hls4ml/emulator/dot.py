"""``nnet::dot1d`` (nnet_merge.h): Keras ``Dot`` of two vectors."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..firmware_graph import Layer, UnsupportedLayerError, const_int
from ..fixed_point import FixedType
from .registry import register

if TYPE_CHECKING:
    from .model import FixedPointModel


def accumulate(layer: Layer, acc_t: FixedType, frac: int, n: int, bound: int, each_quantized: bool):
    """``acc = 0; for k: acc += term[k]`` into accum_t, on an (rows, ..., n) array of exact
    terms at ``frac`` fractional bits whose magnitudes are at most ``bound`` (raws).

    ``each_quantized``: the term was stored in accum_t before the sum (``mult[k]``, dot1d),
    so it is quantized on its own; otherwise ``acc + term`` is quantized (einsum's ``+=``).
    The sum is taken at once where the order of the additions cannot matter (modular
    accumulator, or no partial sum can leave the range, and every term exact in accum_t);
    else each addition is replayed in the C order, vectorised over everything else."""
    fa = acc_t.frac
    modular = acc_t.overflow == "AP_WRAP" and acc_t.sat_bits == 0
    top = max(fa, frac)
    width = bound.bit_length() + (top - frac) + n.bit_length() + 2
    if width > 62 or acc_t.width + (top - fa) + 2 > 62:
        raise UnsupportedLayerError(f"{layer.describe()}: the accumulation needs more than the int64 raws")
    if each_quantized or fa >= frac:
        per_term_bound = (bound << (fa - frac)) if fa >= frac else (bound >> (frac - fa)) + 1
        at_once = modular or per_term_bound * n <= min(acc_t.raw_max, -acc_t.raw_min)

        def quantized(t):
            return acc_t.from_raw(t, frac) if (each_quantized or fa != frac) else t

        if at_once:

            def summed(t):
                total = quantized(t).sum(axis=-1)
                return acc_t.wrap(total) if modular else total

            return summed

    def replayed(t):
        terms = acc_t.from_raw(t, frac) if each_quantized else t
        f = fa if each_quantized else frac
        s_acc, s_term = np.int64(max(fa, f) - fa), np.int64(max(fa, f) - f)
        acc = np.zeros(t.shape[:-1], np.int64)
        for k in range(n):
            acc = acc_t.from_raw((acc << s_acc) + (terms[..., k] << s_term), max(fa, f))
        return acc

    return replayed


@register("dot1d")
def build_dot1d(m: FixedPointModel, layer: Layer, in_t: FixedType):
    """``mult[i] = product(data1[i], data2[i])`` stored in accum_t, ``acc = 0; acc +=
    mult[i]`` in order, ``res[0] = res_T(acc)`` (``nnet::cast`` with input1_T: dot_config
    has no weight_t, so an ap_uint<1> input1 would not compile). Only ``product::mult``
    (hls4ml picks another one for 1-bit xnor inputs only)."""
    t1, t2 = m.in_types
    product = layer.config.get("using", {}).get("product", "nnet::product::mult").split("::")[-1]
    if product != "mult":
        raise UnsupportedLayerError(f"{layer.describe()}: dot1d with product {product} is not supported")
    n = const_int(layer, "n_in")
    if const_int(layer, "n_out") != 1:
        raise UnsupportedLayerError(f"{layer.describe()}: dot1d with n_out != 1")
    out_t = m.type_of(layer.template[2], layer)
    acc_t = m.config_type(layer, "accum_t")
    m.check_width(layer, t1.width + t2.width, "data1 * data2")
    frac = t1.frac + t2.frac
    acc = accumulate(layer, acc_t, frac, n, t1.max_abs_raw() * t2.max_abs_raw(), each_quantized=True)

    def dot(a, b):
        return out_t.cast(acc(a * b), acc_t)[:, None]

    return dot, out_t
