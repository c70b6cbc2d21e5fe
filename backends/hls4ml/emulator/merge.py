"""Two-input merges: ``add``, ``subtract``, ``multiply``, ``average``, ``maximum``, ``minimum``
and ``concatenate1d``/``2d``/``3d``. Types or intermediates beyond 62 bits (hls4ml's
auto-sized merge results) run on Wide raws (``wide.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..firmware_graph import Layer, UnsupportedLayerError, const_int
from ..fixed_point import FixedType, cast_f64
from ..wide import Wide, mul_wide
from .registry import register

if TYPE_CHECKING:
    from .model import FixedPointModel


def _merge_sizes(m: FixedPointModel, layer: Layer) -> tuple[int, int, int]:
    n1, n2 = const_int(layer, "n_elem1"), const_int(layer, "n_elem2")
    n = const_int(layer, "n_elem")
    return n1, n2, n


@register("add", "subtract", "multiply", "average", "maximum", "minimum")
def build_merge(m: FixedPointModel, layer: Layer, in_t: FixedType):
    t1, t2 = m.in_types
    out_t = m.type_of(layer.template[2], layer)
    n1, n2, n = _merge_sizes(m, layer)
    i1, i2 = np.arange(n) % n1, np.arange(n) % n2
    kind = layer.kind
    f = max(t1.frac, t2.frac)
    s1, s2 = np.int64(f - t1.frac), np.int64(f - t2.frac)
    bits = max(t1.width + f - t1.frac, t2.width + f - t2.frac) + 2
    if bits > 62 or any(t.wide for t in (t1, t2, out_t)) or (kind == "multiply" and t1.width + t2.width > 62):
        return _merge_wide(m, layer, t1, t2, out_t, i1, i2, bits)
    if kind == "multiply":
        m.check_width(layer, t1.width + t2.width, "data1 * data2")
        return (lambda a, b: out_t.from_raw(a[:, i1] * b[:, i2], t1.frac + t2.frac)), out_t
    if kind in ("add", "subtract", "average"):
        sign = np.int64(-1 if kind == "subtract" else 1)
        extra = 1 if kind == "average" else 0  # (a + b) * ap_ufixed<1,0>(0.5): one more fractional bit

        def addsub(a, b):
            return out_t.from_raw((a[:, i1] << s1) + sign * (b[:, i2] << s2), f + extra)

        return addsub, out_t
    if kind in ("maximum", "minimum"):

        def pick(a, b):
            x, y = a[:, i1], b[:, i2]
            first = (x << s1) > (y << s2) if kind == "maximum" else (x << s1) < (y << s2)
            return np.where(first, out_t.cast(x, t1), out_t.cast(y, t2))

        return pick, out_t
    raise UnsupportedLayerError(f"{layer.describe()}: merge nnet::{kind} is not supported")


def _merge_wide(m: FixedPointModel, layer: Layer, t1, t2, out_t: FixedType, i1, i2, bits: int):
    """The merges whose values or products need more than 62 bits (hls4ml's auto-sized
    results): the same formulas on Wide raws (two int64 limbs, ``wide.py``)."""
    m.allow_wide()
    kind = layer.kind
    f = max(t1.frac, t2.frac)
    s1, s2 = f - t1.frac, f - t2.frac
    m.check_width(layer, bits, "the merged values", wide=True)
    if kind == "multiply":
        m.check_width(layer, t1.width + t2.width, "data1 * data2", wide=True)
        if t1.wide and t2.wide:
            raise UnsupportedLayerError(f"{layer.describe()}: products of two types wider than 63 bits")
        return (lambda a, b: out_t.from_raw(mul_wide(a[:, i1], b[:, i2]), t1.frac + t2.frac)), out_t
    if kind in ("add", "subtract", "average"):
        extra = 1 if kind == "average" else 0  # (a + b) * ap_ufixed<1,0>(0.5): one more fractional bit

        def addsub(a, b):
            x, y = Wide.of(a[:, i1]).shl(s1), Wide.of(b[:, i2]).shl(s2)
            return out_t.from_raw(x - y if kind == "subtract" else x + y, f + extra)

        return addsub, out_t
    if kind in ("maximum", "minimum"):

        def pick(a, b):
            x, y = a[:, i1], b[:, i2]
            xs, ys = Wide.of(x).shl(s1), Wide.of(y).shl(s2)
            first = xs > ys if kind == "maximum" else xs < ys
            cx, cy = out_t.cast(x, t1), out_t.cast(y, t2)
            return Wide.where(first, cx, cy) if out_t.wide else np.where(first, cx, cy)

        return pick, out_t
    raise UnsupportedLayerError(f"{layer.describe()}: merge nnet::{kind} is not supported")


@register(
    "concatenate1d",
    "concatenate2d",
    "concatenate2d_0",
    "concatenate2d_1",
    "concatenate3d",
    "concatenate3d_0",
    "concatenate3d_1",
    "concatenate3d_2",
)
def build_concatenate(m: FixedPointModel, layer: Layer, in_t: FixedType):
    t1, t2 = m.in_types
    out_t = m.type_of(layer.template[2], layer)
    kind = layer.kind
    dims = 1 if kind.startswith("concatenate1d") else 2 if kind.startswith("concatenate2d") else 3
    c = layer.config.get("consts", {})
    shape1 = [const_int(layer, f"n_elem1_{d}") for d in range(dims)]
    shape2 = [const_int(layer, f"n_elem2_{d}") for d in range(dims)]
    if kind[-2] == "_":
        axis = int(kind[-1])
    else:
        a = int(c.get("axis", "-1"))
        axis = {1: 0, 2: {2: 1, -1: 1}.get(a, 0), 3: {3: 2, -1: 2, 2: 1, -2: 1}.get(a, 0)}[dims]
    n1, n2 = int(np.prod(shape1)), int(np.prod(shape2))
    # which source element lands at each output position
    tag = np.concatenate([np.arange(n1).reshape(shape1), (n1 + np.arange(n2)).reshape(shape2)], axis=axis).reshape(-1)
    from1 = tag < n1
    idx1, idx2 = tag[from1], tag[~from1] - n1
    lo1, hi1, lo2, hi2 = float(t1.raw_min), float(t1.raw_max), float(t2.raw_min), float(t2.raw_max)

    if any(t.wide for t in (t1, t2, out_t)):
        m.allow_wide()  # the casts below take and give Wide raws; the result array follows out_t

    def concat(a, b):
        if not out_t.wide:
            return place(out_t.cast(a, t1), out_t.cast(b, t2))
        res = Wide.empty((a.shape[0], tag.size)) if out_t.wide else np.empty((a.shape[0], tag.size), dtype=np.int64)
        res[:, from1] = out_t.cast(a[:, idx1], t1)
        res[:, ~from1] = out_t.cast(b[:, idx2], t2)
        return res

    # the casts are element-wise, so they run on the inputs as they are and one np.concatenate
    # along the axis places them (x8 faster at 10k rows x 392 values than scattering through
    # the index masks)
    axis1 = axis + 1

    def place(a, b):
        rows = a.shape[0]
        return np.concatenate([a.reshape(rows, *shape1), b.reshape(rows, *shape2)], axis=axis1).reshape(rows, -1)

    def concat_f64(a, b):
        a = a if t1 == out_t else cast_f64(out_t, a, t1.frac, lo1, hi1)
        b = b if t2 == out_t else cast_f64(out_t, b, t2.frac, lo2, hi2)
        return place(a, b)

    if any(t.wide for t in (t1, t2, out_t)):
        return concat, out_t
    return concat, out_t, concat_f64
