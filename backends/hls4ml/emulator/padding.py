"""Layers that only move values, as windows of the input copied into the output: ``nnet::zeropad1d_cl``/``2d_cl``
(and the ``_cf`` forms), ``nnet::cropping1d_cl``/``2d_cl``/``2d_cf`` (nnet_padding.h,
nnet_cropping.h). No arithmetic happens: each output element is one input element cast to
the result type (``(res_T) *data``) or a padding zero. ``gather_op`` serves index maps that are
no window or repetition (upsampling.py's irregular ratios)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..firmware_graph import Layer, UnsupportedLayerError, const_int
from ..fixed_point import FixedType, cast_f64
from .registry import register

if TYPE_CHECKING:
    from .model import FixedPointModel


def gather_op(m: FixedPointModel, layer: Layer, in_t: FixedType, out_t: FixedType, src: np.ndarray, n_in: int):
    """The builder's triple for ``res[j] = (res_T) data[src[j]]``, ``src[j] = -1`` writing 0.

    The general index map (a fancy-index gather per call); the layers of this module and
    upsampling.py use :func:`window_op` or broadcast views where their map is a window or a
    repetition, which copy with strided block moves instead. The table is checked here
    (never in predict): every index must lie inside the input."""
    src = np.asarray(src, dtype=np.int64)
    if src.size and (src.max() >= n_in or src.min() < -1):
        raise UnsupportedLayerError(f"{layer.describe()}: index map reads outside its {n_in} inputs")
    pad = src < 0
    if not pad.any():
        lo, hi = float(in_t.raw_min), float(in_t.raw_max)
        if out_t == in_t:  # the cast changes nothing: a bare gather
            return (lambda x: x[:, src]), out_t, (lambda x: x[:, src])
        return (
            (lambda x: out_t.cast(x[:, src], in_t)),
            out_t,
            (lambda x: cast_f64(out_t, x[:, src], in_t.frac, lo, hi)),
        )
    # a zero column appended to the input serves every padding position (0 is 0 in any type)
    table = np.where(pad, n_in, src)
    lo, hi = float(min(in_t.raw_min, 0)), float(max(in_t.raw_max, 0))

    def padded(x, zero):
        return np.concatenate([x, np.full((x.shape[0], 1), zero, dtype=x.dtype)], axis=1)[:, table]

    if out_t == in_t:
        return (lambda x: padded(x, 0)), out_t, (lambda x: padded(x, 0.0))
    return (
        (lambda x: out_t.cast(padded(x, 0), in_t)),
        out_t,
        (lambda x: cast_f64(out_t, padded(x, 0.0), in_t.frac, lo, hi)),
    )


def cast_ops(in_t: FixedType, out_t: FixedType):
    """``(res_T) data`` on a fresh array the caller owns (int64 and float64 forms): the float64
    cast works in place, so it is only ever given such a copy, never a layer's input."""
    if out_t == in_t:
        return (lambda v: v), (lambda v: v)
    # every array cast here holds input values and possibly padding zeros
    lo, hi = float(min(in_t.raw_min, 0)), float(max(in_t.raw_max, 0))
    return (lambda v: out_t.cast(v, in_t)), (lambda v: cast_f64(out_t, v, in_t.frac, lo, hi))


def window_op(
    in_t: FixedType,
    out_t: FixedType,
    in_shape: tuple[int, ...],
    out_shape: tuple[int, ...],
    src: tuple[slice, ...],
    dst: tuple[slice, ...],
):
    """The builder's triple for ``res[dst] = (res_T) data[src]``, every other output 0: the
    C array ``data`` read as ``in_shape`` and ``res`` as ``out_shape`` (per row), ``src`` and
    ``dst`` windows of the same shape. One strided block copy into a zeroed buffer (or, with
    no padding, a contiguous copy of the window), then the cast in place on that new array;
    the cast of a padding zero is 0 in any type, so casting after the copy is the C's result."""
    n_out = int(np.prod(out_shape))
    padded = int(np.prod(np.zeros(out_shape, np.int8)[dst].shape)) != n_out
    cast_i, cast_f = cast_ops(in_t, out_t)
    src_rows, dst_rows = (slice(None),) + tuple(src), (slice(None),) + tuple(dst)  # every row

    def move(x):
        rows = x.shape[0]
        window = x.reshape(rows, *in_shape)[src_rows]
        if not padded:
            return window.copy().reshape(rows, n_out)  # a copy even for a full window: the cast is in place
        res = np.zeros((rows, *out_shape), x.dtype)
        res[dst_rows] = window
        return res.reshape(rows, n_out)

    return (lambda x: cast_i(move(x))), out_t, (lambda x: cast_f(move(x)))


def _consts(layer: Layer, *keys: str) -> list[int]:
    return [const_int(layer, k) for k in keys]


def _check_out(layer: Layer, name: str, actual: int, declared: int) -> None:
    if actual != declared:
        raise UnsupportedLayerError(
            f"{layer.describe()}: {name} {declared} in parameters.h, the index map gives {actual}"
        )


@register("zeropad1d_cl", "zeropad1d_cf", "zeropad2d_cl", "zeropad2d_cf")
def build_zeropad(m: FixedPointModel, layer: Layer, in_t: FixedType):
    """Zero padding: the input as the window of a zeroed output (channels last or first, as
    the loops write)."""
    out_t = m.type_of(layer.template[1], layer)
    if layer.kind.endswith("_cf") and out_t != in_t:
        # the _cf forms declare res as data_T: hls4ml's call only compiles with equal types
        raise UnsupportedLayerError(f"{layer.describe()}: channels-first padding from {in_t} to {out_t}")
    two_d = layer.kind.startswith("zeropad2d")
    if two_d:
        h, w, c, top, bottom, left, right = _consts(
            layer, "in_height", "in_width", "n_chan", "pad_top", "pad_bottom", "pad_left", "pad_right"
        )
        _check_out(layer, "out_height", h + top + bottom, const_int(layer, "out_height"))
    else:
        w, c, left, right = _consts(layer, "in_width", "n_chan", "pad_left", "pad_right")
        h, top, bottom = 1, 0, 0
    _check_out(layer, "out_width", w + left + right, const_int(layer, "out_width"))
    if min(top, bottom, left, right) < 0:
        raise UnsupportedLayerError(f"{layer.describe()}: negative padding")
    oh, ow, full = h + top + bottom, w + left + right, slice(None)
    if layer.kind.endswith("_cl"):
        return window_op(
            in_t, out_t, (h, w, c), (oh, ow, c), (full,) * 3, (slice(top, top + h), slice(left, left + w), full)
        )
    return window_op(
        in_t, out_t, (c, h, w), (c, oh, ow), (full,) * 3, (full, slice(top, top + h), slice(left, left + w))
    )


@register("cropping1d_cl", "cropping2d_cl", "cropping2d_cf")
def build_cropping(m: FixedPointModel, layer: Layer, in_t: FixedType):
    """Cropping: a window of the input. The C++ starts at crop_top/crop_left and copies
    out_height x out_width (the bottom/right crops are implicit), so those are what count."""
    out_t = m.type_of(layer.template[1], layer)
    if layer.kind == "cropping1d_cl":
        w, c, left, ow = _consts(layer, "in_width", "n_chan", "crop_left", "out_width")
        h, top, oh = 1, 0, 1
    else:
        h, w, c, top, left, oh, ow = _consts(
            layer, "in_height", "in_width", "n_chan", "crop_top", "crop_left", "out_height", "out_width"
        )
    if min(top, left, oh, ow) < 0 or top + oh > h or left + ow > w:
        raise UnsupportedLayerError(f"{layer.describe()}: the crop window leaves the {h}x{w} input")
    rows_win, cols_win, full = slice(top, top + oh), slice(left, left + ow), slice(None)
    if layer.kind.endswith("_cl"):
        return window_op(in_t, out_t, (h, w, c), (oh, ow, c), (rows_win, cols_win, full), (full,) * 3)
    return window_op(in_t, out_t, (c, h, w), (c, oh, ow), (full, rows_win, cols_win), (full,) * 3)
