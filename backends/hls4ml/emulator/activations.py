"""Element-wise activations: ``relu``, ``linear``, ``leaky_relu``, the table-based ``sigmoid``,
``tanh``, ``softplus``, ``elu``, ``selu``, and ``hard_sigmoid``/``hard_tanh``. Tables are rebuilt
as the C++ builds them (glibc single-precision maths). relu, linear and selu also take
auto-sized inputs wider than 62 bits (Wide raws, ``wide.py``)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..firmware_graph import Layer, UnsupportedLayerError, const_int
from ..fixed_point import FixedType, _quantize_f64, cast_f64, overflow_f64
from ..wide import Wide, mul
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
    out_t = m._type(layer.template[1], layer)
    if in_t.wide or out_t.wide:
        m._wide_layer()
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
        x = _quantize_f64(out_t, x)
        np.maximum(x, 0.0, out=x)
        if wrap_only and hi > out_t.raw_max and float(x.max(initial=0.0)) <= out_t.raw_max:
            return x
        return overflow_f64(out_t, x, 0.0, hi)

    return (lambda x: out_t.cast(np.where(x > 0, x, 0), in_t)), out_t, relu_f64


@register("linear")
def build_linear(m: FixedPointModel, layer: Layer, in_t: FixedType):
    out_t = m._type(layer.template[1], layer)
    lo, hi = float(in_t.raw_min), float(in_t.raw_max)
    if in_t.wide or out_t.wide:
        m._wide_layer()  # the cast takes and gives Wide raws
        return (lambda x: out_t.cast(x, in_t)), out_t
    return (lambda x: out_t.cast(x, in_t)), out_t, (lambda x: cast_f64(out_t, x, in_t.frac, lo, hi))


@register("leaky_relu")
def build_leaky_relu(m: FixedPointModel, layer: Layer, in_t: FixedType):
    param_t = m._type(layer.template[1], layer)
    out_t = m._type(layer.template[2], layer)
    try:
        alpha_value = float(layer.args[1].rstrip("fF"))
    except ValueError:
        raise UnsupportedLayerError(f"{layer.describe()}: cannot read alpha '{layer.args[1]}'") from None
    alpha = int(param_t.from_float(np.array([alpha_value]))[0])
    m._check_width(layer, in_t.width + param_t.width, "alpha * x")
    frac = in_t.frac + param_t.frac

    def leaky(x):
        neg = out_t.from_raw(x * np.int64(alpha), frac)
        return np.where(x > 0, out_t.cast(x, in_t), neg)

    return leaky, out_t


def _lut_activation(
    m: FixedPointModel, layer: Layer, in_t: FixedType, table: np.ndarray, table_t: FixedType, span: int
):
    """hls4ml's sigmoid/tanh indexing: index = int(x * N / span) + (span/2) * N / span, clamped."""
    out_t = m._type(layer.template[1], layer)
    n = const_int(layer, "table_size")
    scaled = scaled_trunc(layer, in_t.width, n << max(0, -in_t.frac), span << max(0, in_t.frac))
    offset = (span // 2) * n // span
    values = out_t.cast(table, table_t)

    def lut(x):
        r = wrap32(scaled(x))
        index = np.clip(wrap32(r + offset), 0, n - 1)
        return values[index]

    return lut, out_t


@register("sigmoid")
def build_sigmoid(m: FixedPointModel, layer: Layer, in_t: FixedType):
    table_t = m._cfg_type(layer, "table_t")
    n = const_int(layer, "table_size")
    ii = np.arange(n, dtype=np.float64)
    in_val = (2 * 8.0 * (ii - float(n) / 2.0) / float(n)).astype(np.float32)
    e = f32_map("expf", -in_val)
    val = (1.0 / (np.float32(1) + e).astype(np.float64)).astype(np.float32)  # 1.0 / float: double division
    table = table_t.from_float(val.astype(np.float64))
    return _lut_activation(m, layer, in_t, table, table_t, 16)


@register("tanh")
def build_tanh(m: FixedPointModel, layer: Layer, in_t: FixedType):
    table_t = m._cfg_type(layer, "table_t")
    n = const_int(layer, "table_size")
    ii = np.arange(n, dtype=np.float64)
    in_val = (2 * 4.0 * (ii - float(n) / 2.0) / float(n)).astype(np.float32)
    table = table_t.from_float(f32_map("tanhf", in_val).astype(np.float64))
    return _lut_activation(m, layer, in_t, table, table_t, 8)


@register("softplus")
def build_softplus(m: FixedPointModel, layer: Layer, in_t: FixedType):
    table_t = m._cfg_type(layer, "table_t")
    n = const_int(layer, "table_size")
    ii = np.arange(n, dtype=np.float64)
    in_val = (2 * 8.0 * (ii - float(n) / 2.0) / float(n)).astype(np.float32)
    # softplus_fcn_float: std::log(std::exp(float) + 1.) -> expf, then double log, returned as float
    e = f32_map("expf", in_val).astype(np.float64) + 1.0
    val = f64_map("log", e).astype(np.float32)
    return _lut_activation(m, layer, in_t, table_t.from_float(val.astype(np.float64)), table_t, 16)


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


@register("elu")
def build_elu(m: FixedPointModel, layer: Layer, in_t: FixedType):
    table_t = m._cfg_type(layer, "table_t")
    n = const_int(layer, "table_size")
    if len(layer.template) == 4:
        param_t, out_t = m._type(layer.template[1], layer), m._type(layer.template[2], layer)
        try:
            alpha_value = float(layer.args[1].rstrip("fF"))
        except ValueError:
            raise UnsupportedLayerError(f"{layer.describe()}: cannot read alpha '{layer.args[1]}'") from None
        if param_t.integer_type:
            alpha = int(param_t._int_from_float(np.array([alpha_value]))[0])
            fa = 0
        else:
            alpha, fa = int(param_t.from_float(np.array([alpha_value]))[0]), param_t.frac
    else:
        out_t, alpha, fa = m._type(layer.template[1], layer), 1, 0  # elu(data, res): alpha = 1.0
    table = table_t.from_float(_table_neg8(n, lambda v: v).astype(np.float64))
    m._check_width(layer, table_t.width + max(1, abs(alpha).bit_length() + 1), "alpha * table")
    index = _negative_lut(m, layer, in_t)
    neg_vals = out_t.from_raw(table * np.int64(alpha), table_t.frac + fa)

    def elu(x):
        return np.where(x >= 0, out_t.cast(x, in_t), neg_vals[index(x)])

    return elu, out_t


@register("selu")
def build_selu(m: FixedPointModel, layer: Layer, in_t: FixedType):
    table_t = m._cfg_type(layer, "table_t")
    out_t = m._type(layer.template[1], layer)
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
        m._wide_layer()
        m._check_width(layer, in_t.width + lam_t.width, "lambda * x", wide=True)

        def selu_wide(x):
            pos = out_t.from_raw(mul(x, lam), frac)
            neg = neg_vals[index(Wide.of(x))]
            return _select(x >= 0, pos, neg, out_t)

        return selu_wide, out_t

    def selu(x):
        return np.where(x >= 0, out_t.from_raw(x * lam, frac), neg_vals[index(x)])

    return selu, out_t


def _hard_params(m: FixedPointModel, layer: Layer) -> tuple[int, int, int, int]:
    statics = layer.config.get("statics", {})
    out = []
    for key in ("slope", "shift"):
        if key not in statics:
            raise UnsupportedLayerError(f"{layer.describe()}: parameters.h defines no {layer.config_name}::{key}")
        ctype, value = statics[key]
        t = m._type(ctype, layer)
        try:
            v = float(value.rstrip("fF"))
        except ValueError:
            raise UnsupportedLayerError(f"{layer.describe()}: cannot read {key} = '{value}'") from None
        out += [int(t.from_float(np.array([v]))[0]), t.frac]
    return out[0], out[1], out[2], out[3]


@register("hard_sigmoid")
def build_hard_sigmoid(m: FixedPointModel, layer: Layer, in_t: FixedType, tanh: bool = False):
    out_t = m._type(layer.template[1], layer)
    slope, f_slope, shift, f_shift = _hard_params(m, layer)
    fp = f_slope + in_t.frac
    f = max(fp, f_shift)
    m._check_width(layer, in_t.width + 17 + abs(f - fp) + abs(f - f_shift), "slope * x + shift")
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
