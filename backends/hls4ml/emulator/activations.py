"""Element-wise activations: ``relu``, ``linear``, ``leaky_relu``, the table-based ``sigmoid``,
``tanh``, ``softplus``, ``elu``, ``selu``, and ``hard_sigmoid``/``hard_tanh``. Tables are rebuilt
as the C++ builds them (glibc single-precision maths). relu, linear and selu also take
auto-sized inputs wider than 62 bits (Wide raws, ``wide.py``)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..firmware_graph import Layer, UnsupportedLayerError, const_int
from ..fixed_point import FixedType, cast_f64, f64_capable, overflow_f64, quantize_f64
from ..wide import Wide, mul
from .dense import fast_from_raw
from .maths import f32_map, f64_map, scaled_trunc, wrap32
from .registry import register

if TYPE_CHECKING:
    from .model import FixedPointModel


# activations
def _select(cond: np.ndarray, a, b, out_t: FixedType):
    """np.where for raws of out_t (Wide when out_t is wider than 63 bits)."""
    return Wide.where(cond, a, b) if out_t.wide else np.where(cond, a, b)


@register("relu")
def build_relu(m: FixedPointModel, layer: Layer, in_t: FixedType):
    out_t = m.type_of(layer.template[1], layer)
    if in_t.wide or out_t.wide:
        m.allow_wide()
        return (lambda x: out_t.cast(Wide.where(x > 0, x, 0), in_t)), out_t

    s = in_t.frac - out_t.frac
    scale = 2.0**-s
    hi = math.ceil(float(in_t.raw_max) * scale) + 1.0
    wrap_only = out_t.overflow == "AP_WRAP" and not out_t.sat_bits

    def relu_f64(x):
        if s <= 0:
            np.maximum(x, 0.0, out=x)
            return cast_f64(out_t, x, in_t.frac, 0.0, float(in_t.raw_max))
        # out_t(x > 0 ? x : 0) = max(q(x), 0) for every quantization q (monotone, q(0) = 0):
        # the maximum after the rounding leaves the result non-negative, so only the top of the
        # range needs checking (one reduction, not cast_f64's two; calo_cnn's relu1 at 64 rows:
        # 51 -> 47 us)
        x *= scale
        x = quantize_f64(out_t, x)
        np.maximum(x, 0.0, out=x)
        if wrap_only and hi > out_t.raw_max and float(x.max(initial=0.0)) <= out_t.raw_max:
            return x
        return overflow_f64(out_t, x, 0.0, hi)

    return (lambda x: out_t.cast(np.where(x > 0, x, 0), in_t)), out_t, relu_f64


@register("linear")
def build_linear(m: FixedPointModel, layer: Layer, in_t: FixedType):
    out_t = m.type_of(layer.template[1], layer)
    lo, hi = float(in_t.raw_min), float(in_t.raw_max)
    if in_t.wide or out_t.wide:
        m.allow_wide()  # the cast takes and gives Wide raws
        return (lambda x: out_t.cast(x, in_t)), out_t
    return (lambda x: out_t.cast(x, in_t)), out_t, (lambda x: cast_f64(out_t, x, in_t.frac, lo, hi))


@register("leaky_relu")
def build_leaky_relu(m: FixedPointModel, layer: Layer, in_t: FixedType):
    param_t = m.type_of(layer.template[1], layer)
    out_t = m.type_of(layer.template[2], layer)
    alpha_value = m.literal_arg(layer, 1, "alpha")
    alpha = int(param_t.from_float(np.array([alpha_value]))[0])
    m.check_width(layer, in_t.width + param_t.width, "alpha * x")
    frac = in_t.frac + param_t.frac

    def leaky(x):
        neg = out_t.from_raw(x * np.int64(alpha), frac)
        return np.where(x > 0, out_t.cast(x, in_t), neg)

    return leaky, out_t


#: a lookup over input raws holds at most this many entries (2**20 int64s: 8 MiB)
_TABLE_BITS = 20


def domain_lookup(op, in_t: FixedType):
    """For an element-wise int64 ``op`` that treats every column alike and an input of at most
    ``_TABLE_BITS`` bits: ``(op, op_f64)`` that read the result from ``op`` evaluated once per
    ``in_t.width``-bit raw at build time, so predict is one gather; None for wider inputs.
    The table is stored rolled, indexed by ``raw mod 2**W``: ``take``'s wrap mode then maps a
    negative raw to its entry with no subtraction pass."""
    w = in_t.width
    if w > _TABLE_BITS:
        return None
    j = np.arange(1 << w, dtype=np.int64)
    raws = np.where(j >= 1 << (w - 1), j - (1 << w), j) if in_t.signed else j
    full = np.ascontiguousarray(op(raws), dtype=np.int64)
    full_f = full.astype(np.float64)

    def lookup(x):
        return full.take(x, mode="wrap")

    def lookup_f64(x):
        return full_f.take(x.astype(np.intp), mode="wrap")

    return lookup, lookup_f64


def clipped_lookup(op, in_t: FixedType, lo: int, hi: int):
    """``(op, op_f64)`` as a gather for an element-wise int64 ``op`` that is constant on raws
    <= ``lo`` and on raws >= ``hi`` (a saturated table index): ``op`` is tabulated on
    [lo, hi] only and a raw outside reads the nearer end (``take``'s clip mode); None when
    that range has more than 2**``_TABLE_BITS`` raws."""
    lo, hi = max(lo, in_t.raw_min), min(hi, in_t.raw_max)
    if hi - lo >= 1 << _TABLE_BITS:
        return None
    full = np.ascontiguousarray(op(np.arange(lo, hi + 1, dtype=np.int64)), dtype=np.int64)
    full_f = full.astype(np.float64)
    lo64, lo_f = np.int64(lo), float(lo)

    def lookup(x):
        return full.take(x - lo64, mode="clip")

    def lookup_f64(x):
        x -= lo_f  # float64 steps own their input
        return full_f.take(x.astype(np.intp), mode="clip")

    return lookup, lookup_f64


def _reduced(mul: int, den: int) -> tuple[int, int]:
    g = math.gcd(mul, den)
    return mul // g, den // g


def _no_wrap32(in_t: FixedType, mul: int, den: int, offset: int) -> bool:
    """Whether |trunc(x * mul / den)| + offset stays below 2**31 for every raw x of in_t, so
    the C ``int`` conversions of the index never wrap (the index is then monotone in x)."""
    return in_t.max_abs_raw() * mul // den + 1 + offset < 1 << 31


def _pow2_shift(mul: int, den: int) -> int | None:
    """e with mul / den = 2**e, or None."""
    if mul & (mul - 1) or den & (den - 1):
        return None
    return (mul.bit_length() - 1) - (den.bit_length() - 1)


def _shift_index(e: int, offset: int, sign: int):
    """``(index, index_f64)``: ``offset + sign * trunc(x * 2**e)`` in C semantics (no wrap) by
    shifts, for ``index_f64`` on float64 raws (which it may change). The caller clips the index
    to the table (``take``'s clip mode), so with ``sign`` -1 only a negative x's index must be
    exact: -trunc(x / 2**k) = (-x) >> k there, and (-x) >> k <= 0 for a positive x."""
    k, up = max(0, -e), np.int64(max(0, e))
    off, scale = np.int64(offset), 2.0**e
    low = np.int64((1 << k) - 1)

    def index(x):
        if sign < 0:
            t = np.negative(x)
            if k:
                t >>= np.int64(k)
            elif up:
                t <<= up
        elif k:
            # trunc(x / 2**k) = (x + (x < 0 ? 2**k - 1 : 0)) >> k
            t = x >> np.int64(63)
            t &= low
            t += x
            t >>= np.int64(k)
        else:
            t = x << up
        if offset:
            t += off
        return t

    def index_f64(x):
        x *= scale  # exact: a power of two
        np.trunc(x, out=x)
        if sign < 0:
            np.negative(x, out=x)
        if offset:
            x += float(offset)
        return x.astype(np.intp)

    return index, index_f64


def lut_activation(m: FixedPointModel, layer: Layer, in_t: FixedType, table: np.ndarray, table_t: FixedType, span: int):
    """hls4ml's sigmoid/tanh indexing: index = int(x * N / span) + (span/2) * N / span, clamped.

    Returns ``(op, out_t, op_f64)``. The index saturates outside x in [-span/2, span/2), so
    where the C ``int`` arithmetic cannot wrap the whole activation is a lookup over the input
    raws: over every raw of a narrow input (one gather), else over the unsaturated range
    (a subtraction and a gather), else, for a power-of-two N / span, the index by shifts. The
    element-by-element formula (``lut``) is kept for the rest and builds the tables."""
    out_t = m.type_of(layer.template[1], layer)
    n = const_int(layer, "table_size")
    mul, den = _reduced(n << max(0, -in_t.frac), span << max(0, in_t.frac))
    scaled = scaled_trunc(layer, in_t.width, mul, den)
    offset = (span // 2) * n // span
    values = out_t.cast(table, table_t)

    def lut(x):
        r = wrap32(scaled(x))
        index = np.clip(wrap32(r + offset), 0, n - 1)
        return values[index]

    if not _no_wrap32(in_t, mul, den, offset) or offset > n - 1:
        return lut, out_t, None
    # index 0 for x * mul / den <= -offset, n - 1 for x * mul / den >= n - 1 - offset
    lo, hi = (-offset * den) // mul - 1, -((-(n - 1 - offset) * den) // mul) + 1
    clipped = clipped_lookup(lut, in_t, lo, hi)
    full = domain_lookup(lut, in_t)
    if full is not None:  # the wrap-mode gather: no subtraction
        return full[0], out_t, (clipped or full)[1]
    if clipped is not None:
        return clipped[0], out_t, clipped[1]
    e = _pow2_shift(mul, den)
    if e is None:
        return lut, out_t, None
    index, index_f64 = _shift_index(e, offset, 1)
    values_f = values.astype(np.float64)
    return (lambda x: values.take(index(x), mode="clip")), out_t, (lambda x: values_f.take(index_f64(x), mode="clip"))


def _table_inputs(n: int, span: float) -> np.ndarray:
    """The float inputs the C++ table initialisers evaluate: ``2 * span * (ii - N / 2.0) / N``
    for ii in [0, N), in double, stored as float."""
    ii = np.arange(n, dtype=np.float64)
    return (2 * span * (ii - float(n) / 2.0) / float(n)).astype(np.float32)


@register("sigmoid")
def build_sigmoid(m: FixedPointModel, layer: Layer, in_t: FixedType):
    table_t = m.config_type(layer, "table_t")
    n = const_int(layer, "table_size")
    in_val = _table_inputs(n, 8.0)
    e = f32_map("expf", -in_val)
    val = (1.0 / (np.float32(1) + e).astype(np.float64)).astype(np.float32)  # 1.0 / float: double division
    table = table_t.from_float(val.astype(np.float64))
    return lut_activation(m, layer, in_t, table, table_t, 16)


@register("tanh")
def build_tanh(m: FixedPointModel, layer: Layer, in_t: FixedType):
    table_t = m.config_type(layer, "table_t")
    n = const_int(layer, "table_size")
    in_val = _table_inputs(n, 4.0)
    table = table_t.from_float(f32_map("tanhf", in_val).astype(np.float64))
    return lut_activation(m, layer, in_t, table, table_t, 8)


@register("softplus")
def build_softplus(m: FixedPointModel, layer: Layer, in_t: FixedType):
    table_t = m.config_type(layer, "table_t")
    n = const_int(layer, "table_size")
    in_val = _table_inputs(n, 8.0)
    # softplus_fcn_float: std::log(std::exp(float) + 1.) -> expf, then double log, returned as float
    e = f32_map("expf", in_val).astype(np.float64) + 1.0
    val = f64_map("log", e).astype(np.float32)
    return lut_activation(m, layer, in_t, table_t.from_float(val.astype(np.float64)), table_t, 16)


def _negative_lut(m: FixedPointModel, layer: Layer, in_t: FixedType):
    """elu/selu negative branch: index = (int)(x * N / -8), clamped to [0, N-1]."""
    n = const_int(layer, "table_size")
    mul, den = n << max(0, -in_t.frac), 8 << max(0, in_t.frac)
    g = math.gcd(mul, den)
    if in_t.width + (mul // g).bit_length() > 62:
        wide = _wide_scaled_trunc(layer, mul, den)

        def scaled(x):
            return wide(Wide.of(x))
    else:
        scaled = scaled_trunc(layer, in_t.width, mul, den)

    def index(x):
        return np.clip(wrap32(-scaled(x)), 0, n - 1)

    return index


def _wide_scaled_trunc(layer: Layer, mul: int, den: int):
    """x -> trunc(x * mul / den) modulo 2**64 for Wide x (only the low 32 bits reach the C
    ``int``), where mul/den reduces to a power of two (hls4ml's power-of-two table sizes)."""
    g = math.gcd(mul, den)
    mul, den = mul // g, den // g
    if mul & (mul - 1) or den & (den - 1):
        raise UnsupportedLayerError(f"{layer.describe()}: x * table_size / range beyond 62 bits needs a power of two")
    up, down = mul.bit_length() - 1, den.bit_length() - 1

    def scaled(x):
        if down == 0:
            return x.shl(up).low64()
        q = x.abs().sar(down).low64()  # truncation toward zero: shift the magnitude
        return np.where(x.neg(), -q, q)

    return scaled


def _table_neg8(n: int, fn) -> np.ndarray:
    ii = np.arange(n, dtype=np.float64)
    in_val = (-8.0 * ii / float(np.float32(n))).astype(np.float32)
    return fn(f32_map("expf", in_val).astype(np.float64) - 1.0).astype(np.float32)


def _negative_branch(m: FixedPointModel, layer: Layer, in_t: FixedType, neg_vals: np.ndarray):
    """``(op, op_f64 | None)``: ``neg_vals[clip(int(x * N / -8), 0, N - 1)]`` for int64 raws
    (``op_f64`` may change its argument). The index is 0 for x >= 0 and N - 1 below -8, so
    where the C ``int`` cannot wrap it is a lookup over the raws of [-8, 0] (a subtraction and
    a gather), or, when that range is too long, the index by shifts (power-of-two N)."""
    n = len(neg_vals)
    index = _negative_lut(m, layer, in_t)

    def ref(x):
        return neg_vals[index(x)]

    mul, den = _reduced(n << max(0, -in_t.frac), 8 << max(0, in_t.frac))
    if in_t.width + mul.bit_length() > 62 or not _no_wrap32(in_t, mul, den, 0):
        return ref, None
    lo = (-(n - 1) * den) // mul - 1  # -ceil((n - 1) * den / mul) - 1: index N - 1 at and below
    clipped = clipped_lookup(ref, in_t, lo, 0)
    if clipped is not None:
        return clipped
    e = _pow2_shift(mul, den)
    if e is None:
        return ref, None
    index_i, index_f = _shift_index(e, 0, -1)
    neg_f = neg_vals.astype(np.float64)
    return (lambda x: neg_vals.take(index_i(x), mode="clip")), (lambda x: neg_f.take(index_f(x), mode="clip"))


def _with_branches(ref, in_t: FixedType, out_t: FixedType, pos, pos_f64, neg, neg_f64):
    """``x >= 0 ? pos(x) : neg(x)`` as ``(op, out_t, op_f64)``: one gather over every raw of a
    narrow input (``ref`` evaluated once per raw at build time), else both branches and a
    select; ``op_f64`` is None when either branch has no float64 form."""
    full = domain_lookup(ref, in_t)
    if full is not None:
        return full[0], out_t, full[1]

    def op(x):
        return np.where(x >= 0, pos(x), neg(x))

    if pos_f64 is None or neg_f64 is None:
        return op, out_t, None

    def op_f64(x):
        keep = x >= 0
        n = neg_f64(x.copy())
        return np.where(keep, pos_f64(x), n)

    return op, out_t, op_f64


@register("elu")
def build_elu(m: FixedPointModel, layer: Layer, in_t: FixedType):
    table_t = m.config_type(layer, "table_t")
    n = const_int(layer, "table_size")
    if len(layer.template) == 4:
        param_t, out_t = m.type_of(layer.template[1], layer), m.type_of(layer.template[2], layer)
        alpha_value = m.literal_arg(layer, 1, "alpha")
        if param_t.integer_type:
            alpha = int(param_t.int_from_float(np.array([alpha_value]))[0])
            fa = 0
        else:
            alpha, fa = int(param_t.from_float(np.array([alpha_value]))[0]), param_t.frac
    else:
        out_t, alpha, fa = m.type_of(layer.template[1], layer), 1, 0  # elu(data, res): alpha = 1.0
    table = table_t.from_float(_table_neg8(n, lambda v: v).astype(np.float64))
    m.check_width(layer, table_t.width + max(1, abs(alpha).bit_length() + 1), "alpha * table")
    index = _negative_lut(m, layer, in_t)
    neg_vals = out_t.from_raw(table * np.int64(alpha), table_t.frac + fa)

    def elu(x):
        return np.where(x >= 0, out_t.cast(x, in_t), neg_vals[index(x)])

    neg, neg_f64 = _negative_branch(m, layer, in_t, neg_vals)
    lo, hi = float(in_t.raw_min), float(in_t.raw_max)
    return _with_branches(
        elu,
        in_t,
        out_t,
        fast_from_raw(out_t, in_t.frac),
        (lambda x: cast_f64(out_t, x, in_t.frac, lo, hi)) if f64_capable(in_t) else None,
        neg,
        neg_f64,
    )


@register("selu")
def build_selu(m: FixedPointModel, layer: Layer, in_t: FixedType):
    table_t = m.config_type(layer, "table_t")
    out_t = m.type_of(layer.template[1], layer)
    n = const_int(layer, "table_size")
    lam_d, alpha_d = float("1.0507009873554804934193349852946"), float("1.6732632423543772848170429916717")
    table = table_t.from_float(_table_neg8(n, lambda v: lam_d * (alpha_d * v)).astype(np.float64))
    lam_t = FixedType(16, 1, signed=False)  # typedef ap_ufixed<16, 1> selu_const_t
    lam = np.int64(lam_t.from_float(np.array([1.0507009873554805]))[0])
    index = _negative_lut(m, layer, in_t)
    neg_vals = out_t.cast(table, table_t)
    frac = in_t.frac + lam_t.frac
    if in_t.width + lam_t.width > 62 or out_t.wide:
        # auto-sized inputs (a Dense's accumulator): lambda * x on Wide raws
        m.allow_wide()
        m.check_width(layer, in_t.width + lam_t.width, "lambda * x", wide=True)

        def selu_wide(x):
            pos = out_t.from_raw(mul(x, lam), frac)
            neg = neg_vals[index(x)]  # the index takes int64 or Wide raws (_negative_lut)
            return _select(x >= 0, pos, neg, out_t)

        return selu_wide, out_t

    def selu(x):
        return np.where(x >= 0, out_t.from_raw(x * lam, frac), neg_vals[index(x)])

    neg, neg_f64 = _negative_branch(m, layer, in_t, neg_vals)
    pos_cast = fast_from_raw(out_t, frac)
    lo, hi = float(in_t.raw_min * int(lam)), float(in_t.raw_max * int(lam))
    lam_f = float(lam)

    def pos_f64(x):
        x *= lam_f  # exact: at most 52 bits
        return cast_f64(out_t, x, frac, lo, hi)

    return _with_branches(
        selu,
        in_t,
        out_t,
        lambda x: pos_cast(x * lam),
        pos_f64 if in_t.width + lam_t.width <= 52 and f64_capable(out_t) else None,
        neg,
        neg_f64,
    )


def _hard_params(m: FixedPointModel, layer: Layer) -> tuple[int, int, int, int]:
    statics = layer.config.get("statics", {})
    out = []
    for key in ("slope", "shift"):
        if key not in statics:
            raise UnsupportedLayerError(f"{layer.describe()}: parameters.h defines no {layer.config_name}::{key}")
        ctype, value = statics[key]
        t = m.type_of(ctype, layer)
        try:
            v = float(value.rstrip("fF"))
        except ValueError:
            raise UnsupportedLayerError(f"{layer.describe()}: cannot read {key} = '{value}'") from None
        out += [int(t.from_float(np.array([v]))[0]), t.frac]
    return out[0], out[1], out[2], out[3]


@register("hard_sigmoid")
def build_hard_sigmoid(m: FixedPointModel, layer: Layer, in_t: FixedType, tanh: bool = False):
    out_t = m.type_of(layer.template[1], layer)
    slope, f_slope, shift, f_shift = _hard_params(m, layer)
    fp = f_slope + in_t.frac
    f = max(fp, f_shift)
    m.check_width(layer, in_t.width + 17 + abs(f - fp) + abs(f - f_shift), "slope * x + shift")
    up_p, up_s = np.int64(f - fp), np.int64(f - f_shift)
    shift_raw, one = np.int64(shift) << up_s, np.int64(1) << np.int64(f)

    def hard(x):
        v = ((x * np.int64(slope)) << up_p) + shift_raw  # auto datareg: the exact value
        v = np.clip(v, 0, one)  # > 1 -> 1, < 0 -> 0
        if tanh:
            v = 2 * v - one  # 2 * sigmoid - 1, exact
        return out_t.from_raw(v, f)

    return hard, out_t


@register("hard_tanh")
def build_hard_tanh(m: FixedPointModel, layer: Layer, in_t: FixedType):
    return build_hard_sigmoid(m, layer, in_t, tanh=True)
