"""``nnet::pooling1d_cl``/``pooling2d_cl`` (max, average, padding, ``count_pad``) and their
global forms."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..firmware_graph import Layer, UnsupportedLayerError, const_int
from ..fixed_point import FixedType, cast_f64
from .registry import register

if TYPE_CHECKING:
    from .model import FixedPointModel


# pooling
def _pool_windows(m: FixedPointModel, layer: Layer, global_pool: bool) -> tuple[np.ndarray, np.ndarray]:
    """(table, lengths): for each output index the input indices of its window (-1 =
    padding) in the C loop order, and the divisor an average uses."""
    c = layer.config.get("consts", {})
    two_d = "in_height" in c
    n_filt = const_int(layer, "n_filt")
    if global_pool:
        n = const_int(layer, "in_height") * const_int(layer, "in_width") if two_d else const_int(layer, "n_in")
        table = np.array([[i * n_filt + f for i in range(n)] for f in range(n_filt)], dtype=np.int64)
        return table, np.full(n_filt, n, dtype=np.int64)
    count_pad = c.get("count_pad", "false").strip() == "true"
    if two_d:
        ih, iw = const_int(layer, "in_height"), const_int(layer, "in_width")
        ph, pw = const_int(layer, "pool_height"), const_int(layer, "pool_width")
        sh, sw = const_int(layer, "stride_height"), const_int(layer, "stride_width")
        pt, pb = const_int(layer, "pad_top"), const_int(layer, "pad_bottom")
        pl, pr = const_int(layer, "pad_left"), const_int(layer, "pad_right")
        ow = const_int(layer, "out_width")
        n_out = const_int(layer, "out_height") * ow * n_filt
    else:
        ih, iw = 1, const_int(layer, "n_in")
        ph, pw, sh, sw, pt, pb = 1, const_int(layer, "pool_width"), 1, const_int(layer, "stride_width"), 0, 0
        pl, pr = const_int(layer, "pad_left"), const_int(layer, "pad_right")
        ow = const_int(layer, "n_out")
        n_out = ow * n_filt
    table = np.full((n_out, ph * pw), -2, dtype=np.int64)
    lengths = np.zeros(n_out, dtype=np.int64)
    full_h, full_w = ih + pt + pb, iw + pl + pr
    lim_h = (full_h - ph) // sh * sh + 1
    lim_w = (full_w - pw) // sw * sw + 1
    for ff in range(n_filt):
        for ii in range(0, lim_h, sh):
            for jj in range(0, lim_w, sw):
                slots, overlap = [], 0
                for kk in range(ph):
                    for ll in range(pw):
                        if pt <= ii + kk < ih + pt and pl <= jj + ll < iw + pl:
                            slots.append(((ii + kk - pt) * iw + (jj + ll - pl)) * n_filt + ff)
                            overlap += 1
                        else:
                            slots.append(-1)
                o = (ii // sh) * ow * n_filt + (jj // sw) * n_filt + ff
                if not 0 <= o < n_out:
                    raise UnsupportedLayerError(f"{layer.describe()}: pooling writes outside its output")
                table[o] = slots
                lengths[o] = ph * pw if count_pad else overlap
    if (table == -2).any():
        raise UnsupportedLayerError(f"{layer.describe()}: pooling leaves outputs unwritten")
    return table, lengths


def build_pool(m: FixedPointModel, layer: Layer, in_t: FixedType, global_pool: bool = False):
    out_t = m._type(layer.template[1], layer)
    acc_t = m._cfg_type(layer, "accum_t")
    op_name = layer.config.get("consts", {}).get("pool_op", "nnet::Max").split("::")[-1]
    table, lengths = _pool_windows(m, layer, global_pool)
    padded = bool((table < 0).any())
    n_in_total = int(table.max(initial=0)) + 1
    index = np.where(table < 0, n_in_total, table)
    if op_name == "Max":
        # pad_val: a T whose top bit alone is set (the most negative value of a signed type)
        pad = in_t.raw_min if in_t.signed else 1 << (in_t.width - 1)

        def max_pool(x):
            xe = np.concatenate([x, np.full((x.shape[0], 1), pad, np.int64)], axis=1) if padded else x
            y = np.take(xe, index, axis=1, mode="clip").max(axis=2)  # y = x[i] > y ? x[i] : y
            return out_t.cast(acc_t.cast(y, in_t), acc_t)

        key = m._layer_key
        columns = [np.ascontiguousarray(index[:, k]) for k in range(index.shape[1])]

        def max_pool_f64(x):
            xe = np.concatenate([x, np.full((x.shape[0], 1), float(pad))], axis=1) if padded else x
            shape = (x.shape[0], index.shape[0])
            # one window slot at a time: elementwise maxima of contiguous gathers beat a
            # reduction over a short last axis
            y = np.take(xe, columns[0], axis=1, out=m._buffer((key, "pool"), shape), mode="clip")
            tmp = m._buffer((key, "pool_slot"), shape)
            for col in columns[1:]:
                np.maximum(y, np.take(xe, col, axis=1, out=tmp, mode="clip"), out=y)
            y = cast_f64(acc_t, y, in_t.frac, float(min(pad, in_t.raw_min)), float(in_t.raw_max))
            return cast_f64(out_t, y, acc_t.frac, float(acc_t.raw_min), float(acc_t.raw_max))

        return max_pool, out_t, max_pool_f64
    if op_name != "Average":
        raise UnsupportedLayerError(f"{layer.describe()}: pool_op {op_name} is not supported")
    f = max(acc_t.frac, in_t.frac)
    m._check_width(layer, max(acc_t.width + f - acc_t.frac, in_t.width + f - in_t.frac) + 1, "y + x")
    sh_acc, sh_in = np.int64(f - acc_t.frac), np.int64(f - in_t.frac)
    den = lengths.astype(np.int64)

    def avg_pool(x):
        xe = np.concatenate([x, np.zeros((x.shape[0], 1), np.int64)], axis=1) if padded else x
        win = np.take(xe, index, axis=1, mode="clip")  # (rows, outputs, window)
        y = np.zeros(win.shape[:2], np.int64)  # accum_t y = 0
        for k in range(win.shape[2]):  # y += x[k]: exact sum, assigned to accum_t
            y = acc_t.from_raw((y << sh_acc) + (win[:, :, k] << sh_in), f)
        q = np.abs(y) // den  # y /= length: C division, toward zero, same fractional bits
        q = acc_t.from_raw(np.where(y < 0, -q, q), acc_t.frac)
        return out_t.cast(q, acc_t)

    return avg_pool, out_t


@register("pooling1d_cl")
def build_pooling1d_cl(m: FixedPointModel, layer: Layer, in_t: FixedType):
    return build_pool(m, layer, in_t)


@register("pooling2d_cl")
def build_pooling2d_cl(m: FixedPointModel, layer: Layer, in_t: FixedType):
    return build_pool(m, layer, in_t)


@register("global_pooling1d_cl")
def build_global_pooling1d_cl(m: FixedPointModel, layer: Layer, in_t: FixedType):
    return build_pool(m, layer, in_t, global_pool=True)


@register("global_pooling2d_cl")
def build_global_pooling2d_cl(m: FixedPointModel, layer: Layer, in_t: FixedType):
    return build_pool(m, layer, in_t, global_pool=True)
