"""``nnet::layernormalize`` (Keras LayerNormalization on axis 2, PyTorch nn.LayerNorm), as
nnet_layernorm.h computes it for each of the ``seq_len`` rows of ``dim = n_in / seq_len``
values:

* ``sum += accum_t(x[i])`` in index order, each step quantized into ``accum_t`` (the order
  matters once a saturating accumulator clips), ``mean = accum_t(sum * k_inv)`` with
  ``k_inv = accum_t(1.0 / dim)``;
* ``d[i] = accum_t(accum_t(x[i]) - mean)``, ``sum2 += accum_t(d[i] * d[i])`` in order,
  ``var = accum_t(sum2 * k_inv)``;
* the inverse square root from a table of ``table_size`` entries ``table_t(1.0 / sqrtf(
  min + step * i))`` (min = 10**-epsilon_power_of_10, step = 2**-table_range_power2 /
  table_size, single precision as the C++ builds it), indexed by ``int(var * table_size *
  2**table_range_power2)`` clamped to the table;
* ``res[i] = d[i] * inv * scale[i] + bias[i]``, exact, quantized once into the result type.

The float64 form (used where every exact intermediate stays below 2**52) quantizes the
full-size arrays (the input into accum_t, ``d``, the squares, the result) in a few in-place
passes each and replays only the two ordered sums column by column, with the overflow step
after each addition skipped where no partial sum can leave accum_t; the per-row scalars
(mean, variance, table index) are as in the int64 form.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..firmware_graph import Layer, UnsupportedLayerError, const_int
from ..fixed_point import F64_EXACT, FixedType, cast_f64, f64_capable, overflow_f64, quantize_f64
from .maths import trunc_div, wrap32
from .registry import register

if TYPE_CHECKING:
    from .model import FixedPointModel


def _inv_sqrt_table(layer: Layer, table_t: FixedType, size: int, eps_pow10: int, range_pow2: int) -> np.ndarray:
    """init_invert_sqr_table: float arithmetic, ``1.0 / sqrt(float)`` in double, then table_t."""
    min_val = np.float32(10.0**-eps_pow10)  # pow(10.0f, -(int)p): the double power, stored as float
    max_val = np.float32(2.0**-range_pow2)
    step = np.float32(max_val / np.float32(size))
    with np.errstate(over="ignore"):
        in_val = min_val + step * np.arange(size, dtype=np.float32)  # float * float, float + float
    root = np.sqrt(in_val.astype(np.float32))  # sqrt(float) -> float (correctly rounded, as sqrtf)
    val = 1.0 / root.astype(np.float64)
    try:
        return table_t.from_float(val)
    except ValueError as e:
        raise UnsupportedLayerError(f"{layer.describe()}: table_t: {e}") from None


@register("layernormalize")
def build_layernorm(m: FixedPointModel, layer: Layer, in_t: FixedType):
    out_t = m.type_of(layer.template[1], layer)
    acc_t, table_t = m.config_type(layer, "accum_t"), m.config_type(layer, "table_t")
    s_t, b_t = m.config_type(layer, "scale_t"), m.config_type(layer, "bias_t")
    n_in, seq_len = const_int(layer, "n_in"), const_int(layer, "seq_len")
    size = const_int(layer, "table_size")
    eps_pow10, range_pow2 = const_int(layer, "epsilon_power_of_10"), const_int(layer, "table_range_power2")
    if seq_len <= 0 or n_in % seq_len:
        raise UnsupportedLayerError(f"{layer.describe()}: n_in {n_in} is not a multiple of seq_len {seq_len}")
    dim = n_in // seq_len
    scale = m.weight_raws(layer, layer.args[2], s_t)
    bias = m.weight_raws(layer, layer.args[3], b_t)
    if scale.size < dim or bias.size < dim:
        raise UnsupportedLayerError(f"{layer.describe()}: scale/bias shorter than {dim}")
    scale, bias = scale[:dim], bias[:dim]
    table = _inv_sqrt_table(layer, table_t, size, eps_pow10, range_pow2)
    try:
        k_inv = int(acc_t.from_float(np.array([1.0 / dim]))[0])
    except ValueError as e:
        raise UnsupportedLayerError(f"{layer.describe()}: accum_t: {e}") from None
    fa = acc_t.frac
    # widths of the exact intermediates (all int64 maths)
    m.check_width(layer, max(acc_t.width, in_t.width + max(0, fa - in_t.frac)) + 1, "sum + x")
    m.check_width(layer, 2 * acc_t.width, "sum * k_inv, d * d")
    fprod = fa + table_t.frac + s_t.frac
    f = max(fprod, b_t.frac)
    m.check_width(layer, acc_t.width + table_t.width + s_t.width + (f - fprod) + 1, "d * inv * scale + bias")
    m.check_width(layer, b_t.width + (f - b_t.frac) + 1, "d * inv * scale + bias")
    # index = int(var * table_size * 2**range_pow2): truncation toward zero of an exact product
    mul = size << range_pow2
    m.check_width(layer, acc_t.width + mul.bit_length(), "var * table_size")
    scale_up, bias_up = np.int64(f - fprod), bias << np.int64(f - b_t.frac)

    def to_acc(x):
        return acc_t.cast(x, in_t)

    def mean_var_index(total, total2):
        """The per-row steps after each sum (int64 raws of accum_t): mean, var, table index."""
        mean = acc_t.from_raw(total * np.int64(k_inv), 2 * fa)
        if total2 is None:
            return mean
        var = acc_t.from_raw(total2 * np.int64(k_inv), 2 * fa)
        index = wrap32(trunc_div(var * np.int64(mul), 1 << fa) if fa > 0 else var * np.int64(mul << -fa))
        return np.clip(index, 0, size - 1)

    def layernorm(x):
        rows = x.shape[0]
        v = x.reshape(rows * seq_len, dim)
        xa = to_acc(v)
        total = np.zeros(v.shape[0], np.int64)
        for i in range(dim):  # the C loop's order: every partial sum is quantized
            total = acc_t.from_raw(total + xa[:, i], fa)
        mean = mean_var_index(total, None)
        d = acc_t.from_raw(xa - mean[:, None], fa)
        total2 = np.zeros(v.shape[0], np.int64)
        for i in range(dim):
            total2 = acc_t.from_raw(total2 + acc_t.from_raw(d[:, i] * d[:, i], 2 * fa), fa)
        inv = table[mean_var_index(total, total2)]
        res = ((d * inv[:, None] * scale) << scale_up) + bias_up
        return out_t.from_raw(res, f).reshape(rows, n_in)

    # float64 form: every value below is an integer under 2**52 (the checks), so exact
    acc_max = max(-acc_t.raw_min, acc_t.raw_max)
    prod_bound = acc_max * max(int(table.max(initial=0)), 1) * max(int(np.abs(scale).max(initial=0)), 1)
    res_bound = (prod_bound << (f - fprod)) + (int(np.abs(bias).max(initial=0)) << (f - b_t.frac))
    if not (
        all(f64_capable(t) for t in (in_t, out_t, acc_t))
        and 2 * acc_t.width <= 52
        and (res_bound << max(0, out_t.frac - f)) < F64_EXACT
        and (in_t.max_abs_raw() << max(0, fa - in_t.frac)) < F64_EXACT
        and (acc_max * mul) < F64_EXACT
    ):
        return layernorm, out_t
    in_lo, in_hi = float(in_t.raw_min), float(in_t.raw_max)
    # the input's cast into accum_t changes nothing (same grid, range inside): no copy
    same = in_t.frac == fa and acc_t.raw_min <= in_t.raw_min and in_t.raw_max <= acc_t.raw_max
    # same grid, saturating accumulator: the cast is one clip into a new array
    clip_only = in_t.frac == fa and acc_t.overflow == "AP_SAT"
    modular = acc_t.overflow == "AP_WRAP" and acc_t.sat_bits == 0
    sum_max = min(acc_t.raw_max, -acc_t.raw_min)
    # the result's scaling to out_t's grid (a power of two: exact) folded into scale and bias,
    # so the sum is quantized as it stands: value * 2**(out_frac - f), then rounded
    to_out = 2.0 ** (out_t.frac - f)
    table_f = table.astype(np.float64)
    scale_f = scale.astype(np.float64) * (2.0 ** (f - fprod) * to_out)
    bias_f = bias_up.astype(np.float64) * to_out
    k_inv_f, sq_hi = float(k_inv), float(acc_max * acc_max)
    # var * table_size * 2**range_pow2 as an exact float64 product (acc_max * mul < 2**52);
    # its truncation fits a C int (no wrap32 needed) when below 2**31
    index_scale, index_wraps = float(mul) * 2.0**-fa, (acc_max * mul) >> max(fa, 0) >= 1 << 31

    def ordered_sum(terms):
        """``sum = accum_t(sum + terms[:, i])`` for i in order, terms raws of accum_t: one
        pass when the accumulator wraps (the sum is the same modulo 2**W) or no partial sum
        can leave the range, else the overflow step after each addition."""
        if modular or acc_max * dim <= sum_max:
            return overflow_f64(acc_t, terms.sum(axis=1))
        total = terms[:, 0].copy()
        for i in range(1, dim):
            total += terms[:, i]
            total = overflow_f64(acc_t, total)
        return total

    def layernorm_f64(x):
        rows = x.shape[0]
        v = x.reshape(rows * seq_len, dim)
        if same:
            xa = v
        elif clip_only:
            xa = np.clip(v, float(acc_t.raw_min), float(acc_t.raw_max))
        else:
            xa = cast_f64(acc_t, v.copy(), in_t.frac, in_lo, in_hi)
        total = ordered_sum(xa)
        total *= k_inv_f  # sum * k_inv: exact (2 * accum_t width <= 52)
        mean = cast_f64(acc_t, total, 2 * fa)
        d = xa - mean[:, None]
        d = overflow_f64(acc_t, d)
        sq = cast_f64(acc_t, d * d, 2 * fa, 0.0, sq_hi)
        var = ordered_sum(sq)
        var *= k_inv_f
        var = cast_f64(acc_t, var, 2 * fa)
        if index_wraps:
            index = wrap32(np.trunc(var * index_scale).astype(np.int64))
        else:
            index = np.trunc(var * index_scale, out=var).astype(np.int64)
        inv = table_f[np.clip(index, 0, size - 1)]
        res = d * inv[:, None]
        res *= scale_f
        res += bias_f
        if out_t.frac < f:
            res = quantize_f64(out_t, res)
        return overflow_f64(out_t, res).reshape(rows, n_in)

    return layernorm, out_t, layernorm_f64
