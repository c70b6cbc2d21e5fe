"""``nnet::resize_nearest`` (nnet_image.h): UpSampling1D/2D, an index map built once."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..firmware_graph import Layer, UnsupportedLayerError, const_int
from ..fixed_point import FixedType
from .padding import gather_op
from .registry import register

if TYPE_CHECKING:
    from .model import FixedPointModel


@register("resize_nearest")
def build_resize_nearest(m: FixedPointModel, layer: Layer, in_t: FixedType):
    """UpSampling1D/2D (``nnet::resize_nearest``, nnet_image.h): the source pixel of output
    (i, j) is ``((j * x_ratio) >> 16, (i * y_ratio) >> 16)`` with ``ratio = (in << 16) / new
    + 1`` in C ints, reproduced as such (it is not exact nearest-neighbour for every size).
    The function has a single type parameter: the output array is data_T too."""
    h, w, c, nh, nw = (const_int(layer, k) for k in ("height", "width", "n_chan", "new_height", "new_width"))
    if nh <= 0 or nw <= 0 or max(h, w) >= 1 << 15:
        raise UnsupportedLayerError(f"{layer.describe()}: resize from {h}x{w} to {nh}x{nw}")
    y_ratio = ((h << 16) // nh) + 1
    x_ratio = ((w << 16) // nw) + 1
    ys = (np.arange(nh) * y_ratio) >> 16
    xs = (np.arange(nw) * x_ratio) >> 16
    if (nh - 1) * y_ratio >= 2**31 or (nw - 1) * x_ratio >= 2**31:
        raise UnsupportedLayerError(f"{layer.describe()}: resize indices overflow the C int")
    src = (ys[:, None, None] * w * c + xs[None, :, None] * c + np.arange(c)[None, None, :]).reshape(-1)
    return gather_op(m, layer, in_t, in_t, src, h * w * c)
