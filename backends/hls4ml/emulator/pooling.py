"""``nnet::pooling1d_cl``/``pooling2d_cl`` (max, average, padding, ``count_pad``) and their
global forms."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..firmware_graph import Layer, UnsupportedLayerError, const_int
from ..fixed_point import FixedType, cast_f64, quantize_f64
from .registry import register, register_fusion

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


def _strided_layout(layer: Layer, table: np.ndarray) -> tuple[int, ...] | None:
    """(H, W, F, PH, PW, SH, SW, PT, PL, OH, OW, Hp, Wp) when the window table is exactly a
    strided pooling of the input padded by (PT, PL) at the top/left (1D as H = 1): window
    slot (kk, ll) of output (oh, ow, f) reads input (oh * SH + kk - PT, ow * SW + ll - PL, f);
    None otherwise (the gathers run). Hp/Wp: the padded extent the strided views read."""
    c = layer.config.get("consts", {})
    try:
        if "in_height" in c:
            h, ph, sh, pt, oh = (
                const_int(layer, k) for k in ("in_height", "pool_height", "stride_height", "pad_top", "out_height")
            )
            w, pw, sw, pl, ow = (
                const_int(layer, k) for k in ("in_width", "pool_width", "stride_width", "pad_left", "out_width")
            )
        else:
            h, ph, sh, pt, oh = 1, 1, 1, 0, 1
            w, pw, sw, pl, ow = (
                const_int(layer, k) for k in ("n_in", "pool_width", "stride_width", "pad_left", "n_out")
            )
        f = const_int(layer, "n_filt")
    except UnsupportedLayerError:
        return None
    if min(h, w, f, ph, pw, sh, sw, oh, ow) <= 0 or min(pt, pl) < 0 or table.shape != (oh * ow * f, ph * pw):
        return None
    ih = (np.arange(oh) * sh)[:, None, None, None, None] + np.arange(ph)[None, None, None, :, None] - pt
    iw = (np.arange(ow) * sw)[None, :, None, None, None] + np.arange(pw)[None, None, None, None, :] - pl
    ff = np.arange(f)[None, None, :, None, None]
    inside = (ih >= 0) & (ih < h) & (iw >= 0) & (iw < w)
    expected = np.where(inside, (ih * w + iw) * f + ff, -1).reshape(oh * ow * f, ph * pw)
    if not np.array_equal(expected, table):
        return None
    hp, wp = max(pt + h, (oh - 1) * sh + ph), max(pl + w, (ow - 1) * sw + pw)
    return h, w, f, ph, pw, sh, sw, pt, pl, oh, ow, hp, wp


def _strided_max(m: FixedPointModel, key, layout: tuple[int, ...], x: np.ndarray, pad: float) -> np.ndarray:
    """The max pooling of float64 raws ``x`` (rows, H * W * F) by strided views, separably:
    the maximum over a window's rows first (views of whole input rows, long contiguous inner
    loops), then over its columns. The C++'s ``x > y ? x : y`` over a window is a maximum of
    integers, so its order is free. calo_cnn's 14x14x4 2x2 pool at 64 rows: 70 us gathering
    each window slot with np.take, 66 us with one strided view per slot (numpy's inner loop
    is then the 4 channels), 48 us separably."""
    h, w, f, ph, pw, sh, sw, pt, pl, oh, ow, hp, wp = layout
    rows = x.shape[0]
    if (hp, wp) != (h, w) or pt or pl:
        # pad_val around the input: written when the buffer is made, the inside every call
        xp = m.scratch((key, "pool_pad"), (rows, hp, wp, f), fill=np.array(pad))
        xp[:, pt : pt + h, pl : pl + w, :] = x.reshape(rows, h, w, f)
    else:
        xp = x.reshape(rows, h, w, f)
    row_views = [xp[:, kk : kk + (oh - 1) * sh + 1 : sh] for kk in range(ph)]  # (rows, oh, wp, f)
    if ph == 1:
        t = row_views[0]
    else:
        t = m.scratch((key, "pool_rows"), (rows, oh, wp, f))
        np.maximum(row_views[0], row_views[1], out=t)
        for v in row_views[2:]:
            np.maximum(t, v, out=t)
    col_views = [t[:, :, ll : ll + (ow - 1) * sw + 1 : sw] for ll in range(pw)]  # (rows, oh, ow, f)
    y = m.scratch((key, "pool"), (rows, oh, ow, f))
    if pw == 1:
        np.copyto(y, col_views[0])
    else:
        np.maximum(col_views[0], col_views[1], out=y)
        for v in col_views[2:]:
            np.maximum(y, v, out=y)
    return y.reshape(rows, oh * ow * f)


def _max_finish(acc_t: FixedType, out_t: FixedType, in_t: FixedType, pad: int):
    """A max pooling's casts of its window maxima (float64 raws of ``in_t``, in place):
    ``accum_t`` holds the running maximum, the output is assigned from it."""

    def finish(y: np.ndarray) -> np.ndarray:
        y = cast_f64(acc_t, y, in_t.frac, float(min(pad, in_t.raw_min)), float(in_t.raw_max))
        return cast_f64(out_t, y, acc_t.frac, float(acc_t.raw_min), float(acc_t.raw_max))

    return finish


@register_fusion("relu", "pooling1d_cl", "pooling2d_cl")
def fuse_relu_max_pool(
    m: FixedPointModel, relu: Layer, pool: Layer, in_t: FixedType, mid_t: FixedType, relu_f64, pool_f64
):
    """relu then a max pooling without padding, as the pooling first and the relu on its
    window maxima (a quarter of the values for a 2x2 pool; calo_cnn at 64 rows: relu1 + pool1
    43 + 59 -> 73 us, relu2 + pool2 14 + 16 -> 23 us). ``max(R(x) over a window) == R(max(x)
    over it)`` when R, the relu's ``mid_t(x > 0 ? x : 0)``, is non-decreasing on the window's
    values: its quantization and the maximum with 0 are; its overflow is where no value
    exceeds mid_t's maximum after them, and every value of a window is at most its maximum,
    so checking the maxima checks all the values the pooling reads (values outside every
    window do not matter). A saturating mid_t is non-decreasing everywhere; for a wrapping one
    (the default) a batch where some maximum overflows runs the two ops in the C++ order
    instead (the input is left intact by the strided maximum). Padding would put pad_val among
    the relu's outputs, so padded poolings are not fused."""
    consts = pool.config.get("consts", {})
    if relu.stream or pool.stream or consts.get("pool_op", "nnet::Max").split("::")[-1] != "Max":
        return None
    layout = _strided_layout(pool, _pool_windows(m, pool, False)[0])
    if layout is None:
        return None
    h, w, _f, _ph, _pw, _sh, _sw, pt, pl, _oh, _ow, hp, wp = layout
    s = in_t.frac - mid_t.frac
    scale = 2.0**-s
    if (hp, wp) != (h, w) or pt or pl or (s < 0 and float(max(in_t.raw_max, -in_t.raw_min)) * scale >= 2.0**52):
        return None
    acc_t, out_t = m.config_type(pool, "accum_t"), m.type_of(pool.template[1], pool)
    finish = _max_finish(acc_t, out_t, mid_t, mid_t.raw_min if mid_t.signed else 1 << (mid_t.width - 1))
    key, rmax = m.layer_key, float(mid_t.raw_max)
    saturates = mid_t.overflow in ("AP_SAT", "AP_SAT_SYM") and not mid_t.sat_bits

    def relu_max_pool(x):
        y = _strided_max(m, key, layout, x, 0.0)
        if s:
            y *= scale
        if s > 0:
            y = quantize_f64(mid_t, y)
        np.maximum(y, 0.0, out=y)
        if float(y.max(initial=0.0)) > rmax:
            if not saturates:
                return pool_f64(relu_f64(x))
            np.minimum(y, rmax, out=y)
        return finish(y)

    return relu_max_pool


def build_pool(m: FixedPointModel, layer: Layer, in_t: FixedType, global_pool: bool = False):
    out_t = m.type_of(layer.template[1], layer)
    acc_t = m.config_type(layer, "accum_t")
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

        key = m.layer_key
        columns = [np.ascontiguousarray(index[:, k]) for k in range(index.shape[1])]
        layout = None if global_pool else _strided_layout(layer, table)

        finish = _max_finish(acc_t, out_t, in_t, pad)

        def max_pool_f64(x):
            return finish(_strided_max(m, key, layout, x, float(pad)) if layout is not None else gathered_max(x))

        def gathered_max(x):
            xe = np.concatenate([x, np.full((x.shape[0], 1), float(pad))], axis=1) if padded else x
            shape = (x.shape[0], index.shape[0])
            # one window slot at a time: elementwise maxima of contiguous gathers beat a
            # reduction over a short last axis
            y = np.take(xe, columns[0], axis=1, out=m.scratch((key, "pool"), shape), mode="clip")
            tmp = m.scratch((key, "pool_slot"), shape)
            for col in columns[1:]:
                np.maximum(y, np.take(xe, col, axis=1, out=tmp, mode="clip"), out=y)
            return y

        return max_pool, out_t, max_pool_f64
    if op_name != "Average":
        raise UnsupportedLayerError(f"{layer.describe()}: pool_op {op_name} is not supported")
    f = max(acc_t.frac, in_t.frac)
    m.check_width(layer, max(acc_t.width + f - acc_t.frac, in_t.width + f - in_t.frac) + 1, "y + x")
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
