"""Layers that only move values, as index maps built once: ``nnet::zeropad1d_cl``/``2d_cl``
(and the ``_cf`` forms), ``nnet::cropping1d_cl``/``2d_cl``/``2d_cf`` (nnet_padding.h,
nnet_cropping.h). No arithmetic happens: each output element is one input element cast to
the result type (``(res_T) *data``) or a padding zero. ``gather_op`` serves the other
index-map layers (upsampling.py)."""

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

    The table is checked here (never in predict): every index must lie inside the input."""
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


def _consts(layer: Layer, *keys: str) -> list[int]:
    return [const_int(layer, k) for k in keys]


def _check_out(layer: Layer, name: str, actual: int, declared: int) -> None:
    if actual != declared:
        raise UnsupportedLayerError(
            f"{layer.describe()}: {name} {declared} in parameters.h, the index map gives {actual}"
        )


@register("zeropad1d_cl", "zeropad1d_cf", "zeropad2d_cl", "zeropad2d_cf")
def build_zeropad(m: FixedPointModel, layer: Layer, in_t: FixedType):
    """Zero padding: ``np.pad`` of the index grid (channels last or first, as the loops write)."""
    out_t = m._type(layer.template[1], layer)
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
    if layer.kind.endswith("_cl"):
        idx = np.arange(h * w * c).reshape(h, w, c)
        src = np.pad(idx, ((top, bottom), (left, right), (0, 0)), constant_values=-1)
    else:
        idx = np.arange(c * h * w).reshape(c, h, w)
        src = np.pad(idx, ((0, 0), (top, bottom), (left, right)), constant_values=-1)
    return gather_op(m, layer, in_t, out_t, src.reshape(-1), h * w * c)


@register("cropping1d_cl", "cropping2d_cl", "cropping2d_cf")
def build_cropping(m: FixedPointModel, layer: Layer, in_t: FixedType):
    """Cropping: a slice of the index grid. The C++ starts at crop_top/crop_left and copies
    out_height x out_width (the bottom/right crops are implicit), so those are what count."""
    out_t = m._type(layer.template[1], layer)
    if layer.kind == "cropping1d_cl":
        w, c, left, ow = _consts(layer, "in_width", "n_chan", "crop_left", "out_width")
        h, top, oh = 1, 0, 1
    else:
        h, w, c, top, left, oh, ow = _consts(
            layer, "in_height", "in_width", "n_chan", "crop_top", "crop_left", "out_height", "out_width"
        )
    if top + oh > h or left + ow > w:
        raise UnsupportedLayerError(f"{layer.describe()}: the crop window leaves the {h}x{w} input")
    if layer.kind.endswith("_cl"):
        src = np.arange(h * w * c).reshape(h, w, c)[top : top + oh, left : left + ow, :]
    else:
        src = np.arange(c * h * w).reshape(c, h, w)[:, top : top + oh, left : left + ow]
    return gather_op(m, layer, in_t, out_t, src.reshape(-1), h * w * c)
