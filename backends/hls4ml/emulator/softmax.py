"""``nnet::softmax``: the ``latency``, ``stable``, ``legacy`` and ``argmax`` implementations, with
the exp/inverse tables rebuilt as the C++ builds them and indexed from the same input bits;
``nnet::softmax_multidim`` (a softmax along one axis of a 2-D/3-D tensor) runs it per slice."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..firmware_graph import Layer, UnsupportedLayerError, const_int
from ..fixed_point import FixedType, cast_f64, f64_capable
from .maths import ceillog2, f32_map, scaled_trunc, wrap32
from .registry import register

if TYPE_CHECKING:
    from .model import FixedPointModel


# softmax
def _idx_from_raw(raw: np.ndarray, t: FixedType, n_bits: int) -> np.ndarray:
    """softmax_idx_from_real_val: the top n_bits of the W-bit pattern, as unsigned."""
    pattern = raw & np.int64((1 << t.width) - 1)
    return (pattern >> np.int64(t.width - n_bits)) & np.int64((1 << n_bits) - 1)


def _real_from_idx(t: FixedType, size: int) -> np.ndarray:
    """softmax_real_val_from_idx: (float) of the value whose top bits are the index."""
    n_bits = ceillog2(size)
    pattern = np.arange(size, dtype=np.int64) << np.int64(t.width - n_bits)
    raw = t.wrap(pattern)
    return t.to_float32(raw)


@register("softmax", "softmax_multidim")
def build_softmax(m: FixedPointModel, layer: Layer, in_t: FixedType):
    """``softmax`` over the whole array, or ``softmax_multidim`` (Softmax on an axis of a 2-D/3-D
    tensor): the same softmax on every slice of ``n_slice`` values ``data[i * n_slice * n_inner
    + j * n_inner + k]`` (j = 0..n_slice-1) for each outer i and inner k, as the C++ loops."""
    consts = layer.config.get("consts", {})
    n_in = const_int(layer, "n_in")
    n = const_int(layer, "n_slice") if "n_slice" in consts else n_in
    n_outer = const_int(layer, "n_outer") if "n_outer" in consts else 1
    n_inner = const_int(layer, "n_inner") if "n_inner" in consts else 1
    if n_outer * n * n_inner != n_in:
        raise UnsupportedLayerError(f"{layer.describe()}: n_outer * n_slice * n_inner != n_in")
    built = _softmax_1d(m, layer, in_t, n)
    if n == n_in:
        return built
    # positions of each slice, one slice per row: (outer, inner) major, j minor
    order = (
        np.arange(n_outer)[:, None, None] * (n * n_inner)
        + np.arange(n_inner)[None, :, None]
        + np.arange(n)[None, None, :] * n_inner
    ).reshape(-1)
    back = np.argsort(order)
    slices = n_outer * n_inner

    def per_slice(op):
        if op is None:
            return None

        def multidim(x):
            rows = x.shape[0]
            y = op(x[:, order].reshape(rows * slices, n))
            return y.reshape(rows, n_in)[:, back]

        return multidim

    return (per_slice(built[0]), built[1], *(per_slice(f) for f in built[2:]))


def _softmax_1d(m: FixedPointModel, layer: Layer, in_t: FixedType, n: int):
    """nnet::softmax on rows of ``n`` values."""
    out_t = m.type_of(layer.template[1], layer)
    consts = layer.config.get("consts", {})
    impl = consts.get("implementation", "nnet::softmax_implementation::latency").split("::")[-1]
    if impl == "argmax":
        one = int(out_t.from_raw(np.array([1], np.int64), 0)[0])

        def argmax(x):
            res = np.zeros(x.shape, np.int64)
            res[np.arange(x.shape[0]), np.argmax(x, axis=1)] = one  # first maximum wins, as the strict > loop
            return res

        return argmax, out_t
    if impl == "legacy":
        return _softmax_legacy(m, layer, in_t, out_t, n)
    if impl not in ("latency", "stable"):
        raise UnsupportedLayerError(f"{layer.describe()}: softmax implementation '{impl}' is not supported")
    exp_t, inv_t = m.config_type(layer, "exp_table_t"), m.config_type(layer, "inv_table_t")
    acc_t, inv_inp_t = m.config_type(layer, "accum_t"), m.config_type(layer, "inv_inp_t")
    n_exp, n_inv = const_int(layer, "exp_table_size"), const_int(layer, "inv_table_size")
    exp_scale = np.float32(float(consts.get("exp_scale", "1.0").rstrip("fF")))
    norm_t = m.config_type(layer, "inp_norm_t") if impl == "stable" else in_t
    bits_exp, bits_inv = ceillog2(n_exp), ceillog2(n_inv)
    if norm_t.width < bits_exp or inv_inp_t.width < bits_inv:
        raise UnsupportedLayerError(f"{layer.describe()}: softmax table larger than its index type")
    xs = _real_from_idx(norm_t, n_exp) * exp_scale
    if impl == "stable":
        xs = -xs
    exp_table = acc_t.cast(exp_t.from_float(f32_map("expf", xs).astype(np.float64)), exp_t)
    with np.errstate(divide="ignore"):
        inv_vals = (np.float32(1) / _real_from_idx(inv_inp_t, n_inv)).astype(np.float32)
    inv_table = inv_t.from_float(inv_vals.astype(np.float64))
    m.check_width(layer, acc_t.width + inv_t.width, "exp * inverse")
    m.check_width(layer, in_t.width + 1, "x_max - x")
    fres = acc_t.frac + inv_t.frac

    def reduce_add(cols: list[np.ndarray]) -> np.ndarray:
        # nnet::reduce: left part = largest power of two below N, right part = the rest
        if len(cols) == 1:
            return cols[0]
        if len(cols) == 2:
            return acc_t.from_raw(cols[0] + cols[1], acc_t.frac)
        left = 1 << ((len(cols) - 1).bit_length() - 1)
        return acc_t.from_raw(reduce_add(cols[:left]) + reduce_add(cols[left:]), acc_t.frac)

    def softmax(x):
        d = norm_t.cast(x.max(axis=1, keepdims=True) - x, in_t) if impl == "stable" else x
        e = exp_table[_idx_from_raw(d, norm_t, bits_exp)]
        total = inv_inp_t.cast(reduce_add([e[:, j] for j in range(n)]), acc_t)
        inv = inv_table[_idx_from_raw(total, inv_inp_t, bits_inv)]
        return out_t.from_raw(e * inv[:, None], fres)

    if not all(f64_capable(t) for t in (in_t, norm_t, acc_t, inv_inp_t, out_t)) or acc_t.width + inv_t.width > 52:
        return softmax, out_t
    exp_f, inv_f = exp_table.astype(np.float64), inv_table.astype(np.float64)
    span = float(in_t.raw_max) - float(in_t.raw_min)

    def index_f64(v: np.ndarray, t: FixedType, n_bits: int, non_negative: bool = False) -> np.ndarray:
        # the top n_bits of the W-bit two's complement pattern of v (integers in t's range)
        if t.signed and not non_negative:
            v = np.where(v < 0, v + float(1 << t.width), v)
        else:
            v = v * 2.0 ** (n_bits - t.width)  # a new array: v may be the caller's
            return v.astype(np.intp)
        v *= 2.0 ** (n_bits - t.width)
        return v.astype(np.intp)  # exact, non-negative: truncation = floor

    def add_f64(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return cast_f64(acc_t, a + b, acc_t.frac)

    def reduce_f64(cols: list[np.ndarray]) -> np.ndarray:
        if len(cols) == 1:
            return cols[0]
        if len(cols) == 2:
            return add_f64(cols[0], cols[1])
        left = 1 << ((len(cols) - 1).bit_length() - 1)
        return add_f64(reduce_f64(cols[:left]), reduce_f64(cols[left:]))

    # Where no partial sum of n table values can leave accum_t's range, the C++'s saturating
    # tree of additions is an exact sum in any order: one product with a column of ones (the
    # sums are integers below 2**52), instead of n - 1 additions each clipped (calo_cnn's
    # 5-way softmax: 43 -> 19-22 us at 64 rows, 37 -> 12 us at 1 row)
    e_lo, e_hi = float(exp_f.min(initial=0.0)), float(exp_f.max(initial=0.0))
    sum_lo, sum_hi = n * min(e_lo, 0.0), n * max(e_hi, 0.0)
    exact_sum = float(acc_t.raw_min) <= sum_lo and sum_hi <= float(acc_t.raw_max) and sum_hi < 2.0**52
    ones = np.ones(n)
    i_lo, i_hi = float(inv_f.min(initial=0.0)), float(inv_f.max(initial=0.0))
    corners = [a * b for a in (e_lo, e_hi) for b in (i_lo, i_hi)]
    prod_lo, prod_hi = min(corners), max(corners)  # bounds of e * inv, for the final cast

    def softmax_f64(x):
        d = x
        if impl == "stable":
            d = cast_f64(norm_t, x.max(axis=1, keepdims=True) - x, in_t.frac, 0.0, span)
        e = exp_f[index_f64(d, norm_t, bits_exp)]
        if exact_sum:
            total = cast_f64(inv_inp_t, e @ ones, acc_t.frac, sum_lo, sum_hi)
            inv = inv_f[index_f64(total, inv_inp_t, bits_inv, non_negative=sum_lo >= 0.0)]
        else:
            total = cast_f64(inv_inp_t, reduce_f64([e[:, j] for j in range(n)]), acc_t.frac)
            inv = inv_f[index_f64(total, inv_inp_t, bits_inv)]
        e *= inv[:, None]
        return cast_f64(out_t, e, fres, prod_lo, prod_hi)

    return softmax, out_t, softmax_f64


def _softmax_legacy(m: FixedPointModel, layer: Layer, in_t: FixedType, out_t: FixedType, n: int):
    table_t = m.config_type(layer, "table_t")
    n_exp, n_inv = const_int(layer, "exp_table_size"), const_int(layer, "inv_table_size")
    ii = np.arange(n_exp, dtype=np.float64)
    in_val = (2 * 8.0 * (ii - float(n_exp) / 2.0) / float(n_exp)).astype(np.float32)
    exp_table = table_t.from_float(f32_map("expf", in_val).astype(np.float64))
    inv_in = (64.0 * np.arange(n_inv, dtype=np.float64) / float(n_inv)).astype(np.float32).astype(np.float64)
    with np.errstate(divide="ignore"):
        inv_vals = np.where(inv_in > 0, 1.0 / inv_in, 0.0)
    inv_table = out_t.cast(table_t.from_float(inv_vals), table_t)
    one = int(table_t.from_raw(np.array([1], np.int64), 0)[0])
    scale_exp = scaled_trunc(layer, in_t.width + 1, n_exp << max(0, -in_t.frac), 16 << max(0, in_t.frac))
    off = 8 * n_exp // 16
    scale_inv = scaled_trunc(layer, table_t.width, n_inv << max(0, -table_t.frac), 64 << max(0, table_t.frac))

    def legacy(x):
        res = np.empty(x.shape, np.int64)
        for i in range(n):
            acc = np.zeros(x.shape[0], np.int64)
            for j in range(n):
                if i == j:
                    diff = np.int64(one)
                else:
                    r = wrap32(scale_exp(x[:, j] - x[:, i]))
                    diff = exp_table[np.clip(wrap32(r + off), 0, n_exp - 1)]
                acc = table_t.from_raw(acc + diff, table_t.frac)
            k = wrap32(scale_inv(acc))
            res[:, i] = inv_table[np.clip(k, 0, n_inv - 1)]
        return res

    return legacy, out_t
