"""``nnet::conv_1d_cl``/``conv_2d_cl`` and their pointwise forms (io_parallel): a window of
the input times the weights is the dense layer the C++ loops form.

Two formulations of the same integers:

* windows (im2col): the buffer filler's table gathers every output pixel's window, and the
  dense layer runs on the (rows * pixels, window) matrix. It replays the C++ order of
  additions, so it serves every accumulator (saturating ones included) and the int64 path;
* bands (float64 path, when the dense layer's sum is exact whatever the order: its linear
  path, every partial sum an exact float64 integer): for output row ``oh`` the kernel reads
  input rows ``oh * stride .. oh * stride + filt_height - 1``, one contiguous slice of the
  (zero-padded) input, so a tile of output columns of that row is the slice over the tile's
  input columns times one banded weight matrix, the same for every row and tile: one batched
  BLAS product over strided views, no window copied (2D inputs cut into several tiles are
  copied once, tile by tile). Used when the buffer filler's table is exactly the strided,
  padded layout this assumes (checked at build), and for batches large enough that its fixed
  cost pays; 1D convolutions are the same with one input row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..firmware_graph import Layer, UnsupportedLayerError, const_int
from ..fixed_point import FixedType
from .dense import ProductFactory, build_dense
from .registry import register

#: below this many rows the windows (one gather, one small product) cost less than the bands
BAND_MIN_ROWS = 8

if TYPE_CHECKING:
    from .model import FixedPointModel


# convolutions
@register("conv_1d_cl", "conv_2d_cl", "pointwise_conv_1d_cl", "pointwise_conv_2d_cl")
def build_conv(m: FixedPointModel, layer: Layer, in_t: FixedType):
    """conv_1d_cl / conv_2d_cl (io_parallel, latency or resource): the buffer filler's
    im2col table gathers each output pixel's window, and the window times the weights is
    the dense layer the C++ loops form (the same products in accum_t, the same order)."""
    table = m.graph.fill_buffer(layer)  # (pixels, window) of input indices, -1 = zero
    n_filt = const_int(layer, "n_filt")
    consts = layer.config.get("consts", {})
    strategy = consts.get("strategy", "nnet::latency").split("::")[-1]
    _, mult = m.sub_config(layer, "mult_config")
    for type_key in ("accum_t", "weight_t", "bias_t"):
        if m.config_type(layer, type_key) != m.type_of(mult["types"].get(type_key, type_key), layer):
            raise UnsupportedLayerError(f"{layer.describe()}: {type_key} differs between the layer and its mult_config")
    pixels, window = table.shape
    n_in_total = int(np.prod([const_int(layer, k) for k in _conv_in_dims(layer)]))
    if table.max(initial=-1) >= n_in_total:
        raise UnsupportedLayerError(f"{layer.describe()}: buffer filler reads beyond the input")
    rf = const_int(layer, "reuse_factor")
    if strategy == "latency":
        kernel = "nnet::DenseLatency"
    elif strategy == "resource":
        if rf > window:
            raise UnsupportedLayerError(f"{layer.describe()}: resource conv with reuse factor {rf} > window {window}")
        kernel = "nnet::DenseResource_rf_leq_nin"
    else:
        raise UnsupportedLayerError(f"{layer.describe()}: conv strategy '{strategy}' is not supported")
    dense_cfg = {
        "base": "dense_config",
        "consts": {"n_in": str(window), "n_out": str(n_filt), "reuse_factor": str(rf)},
        "types": {
            **mult.get("types", {}),
            **{k: layer.config["types"][k] for k in ("accum_t", "weight_t", "bias_t")},
        },
        "using": {**mult.get("using", {}), "kernel": kernel},
    }
    dense_layer = Layer(
        "dense", layer.name, layer.template, layer.args, layer.config_name, dense_cfg, weights=layer.weights
    )
    padded = bool((table < 0).any())
    flat_index = np.where(table < 0, n_in_total, table).reshape(-1)
    key = m.layer_key
    layout = band_layout(layer, table)
    bands = band_product(m, key, layout, lambda x: gather(x, 0.0)) if layout is not None else None
    built = build_dense(m, dense_layer, in_t, bands)
    op, out_t = built[0], built[1]
    fop = built[2] if len(built) > 2 else None

    def gather(x, zero):
        rows = x.shape[0]
        if padded:
            x = np.concatenate([x, np.full((rows, 1), zero, dtype=x.dtype)], axis=1)
        # np.take along axis 1 writes a C-contiguous (rows, pixels * window) array, so the
        # reshape is free; the float64 chain reuses one buffer (no page faults per call);
        # mode="clip" skips numpy's bounds checks (3x faster): the table was checked at build
        out = m.scratch((key, "im2col"), (rows, flat_index.size)) if x.dtype == np.float64 else None
        return np.take(x, flat_index, axis=1, out=out, mode="clip").reshape(rows * pixels, window)

    def conv(x):
        return op(gather(x, 0)).reshape(x.shape[0], pixels * n_filt)

    def conv_f64(x):
        return fop(gather(x, 0.0)).reshape(x.shape[0], pixels * n_filt)

    def conv_f64_bands(x):  # the product gathers windows itself for small batches
        return fop(x).reshape(x.shape[0], pixels * n_filt)

    if bands is not None:
        conv_f64 = conv_f64_bands

    return conv, out_t, (conv_f64 if fop is not None else None)


def _conv_in_dims(layer: Layer) -> tuple[str, ...]:
    if "in_height" in layer.config.get("consts", {}):
        return ("in_height", "in_width", "n_chan")
    return ("in_width", "n_chan")


def band_layout(layer: Layer, table: np.ndarray) -> tuple[int, ...] | None:
    """(H, W, C, KH, KW, sh, sw, pt, pl, OH, OW, Hp, Wp) when the buffer filler's table is
    exactly a strided convolution of the input zero-padded by (pt, pl) at the top/left (a 1D
    convolution as H = 1), windows ordered (kh, kw, c) and pixels (oh, ow); None otherwise
    (dilation, other fillers: the windows path runs)."""
    try:
        if "in_height" in layer.config.get("consts", {}):
            h, kh, sh, pt, oh = (
                const_int(layer, k) for k in ("in_height", "filt_height", "stride_height", "pad_top", "out_height")
            )
        else:
            h, kh, sh, pt, oh = 1, 1, 1, 0, 1
        w, kw, sw, pl, ow, c = (
            const_int(layer, k) for k in ("in_width", "filt_width", "stride_width", "pad_left", "out_width", "n_chan")
        )
    except UnsupportedLayerError:
        return None
    if min(h, w, c, kh, kw, sh, sw, oh, ow) <= 0 or min(pt, pl) < 0 or table.shape != (oh * ow, kh * kw * c):
        return None
    ih = (np.arange(oh) * sh)[:, None, None, None, None] + np.arange(kh)[None, None, :, None, None] - pt
    iw = (np.arange(ow) * sw)[None, :, None, None, None] + np.arange(kw)[None, None, None, :, None] - pl
    ch = np.arange(c)[None, None, None, None, :]
    inside = (ih >= 0) & (ih < h) & (iw >= 0) & (iw < w)
    expected = np.where(inside, (ih * w + iw) * c + ch, -1).reshape(oh * ow, kh * kw * c)
    if not np.array_equal(expected, table):
        return None
    hp, wp = max(pt + h, (oh - 1) * sh + kh), max(pl + w, (ow - 1) * sw + kw)
    return h, w, c, kh, kw, sh, sw, pt, pl, oh, ow, hp, wp


def band_product(m: FixedPointModel, key, layout: tuple[int, ...], windows) -> ProductFactory:
    """The convolution's float64 sums by bands (module docstring). The output width is cut
    into tiles of ``tw`` columns, so a band spans the tile's input columns only (a full-width
    band multiplies mostly zeros): the smallest tile whose product has at least 8 columns
    (narrower BLAS products run slowly). Each output (row, tile) is then the input's rows
    ``oh * sh ...`` over the tile's columns, a contiguous slice of the padded input (with one
    tile or one input row) or of a copy cut into tiles, times the same band. ``windows(x)``
    gathers the im2col matrix, used instead below BAND_MIN_ROWS rows. A 1x1 convolution of
    stride 1 without padding needs neither: its input is its im2col matrix."""
    h, w, c, kh, kw, sh, sw, pt, pl, oh, ow, hp, wp = layout
    pad = (hp, wp) != (h, w)
    pointwise = kh == kw == sh == sw == 1 and not pad and (oh, ow) == (h, w)
    item = np.dtype(np.float64).itemsize

    def factory(wf: np.ndarray):
        n_filt = wf.shape[1]
        tw = next((d for d in range(1, ow + 1) if ow % d == 0 and d * n_filt >= 8), ow)
        tiles = ow // tw
        one_row = kh == 1 and hp == 1  # a 1D convolution: a tile's columns are contiguous
        copy = tiles > 1 and not one_row
        twin = (tw - 1) * sw + kw if tiles > 1 else wp  # input columns a band spans
        w4 = wf.reshape(kh, kw, c, n_filt)
        band5 = np.zeros((kh, twin, c, tw, n_filt))
        for o in range(tw):
            for k in range(kw):
                band5[:, o * sw + k, :, o, :] = w4[:, k]
        band = band5.reshape(kh * twin * c, tw * n_filt)

        def product(x):
            rows = x.shape[0]
            if pointwise:  # each pixel's window is the pixel: the input is the im2col matrix
                return np.matmul(
                    x.reshape(rows * h * w, c), wf, out=m.scratch((key, "windows"), (rows * h * w, n_filt))
                )
            if rows < BAND_MIN_ROWS:
                g = windows(x)
                return np.matmul(g, wf, out=m.scratch((key, "windows"), (g.shape[0], n_filt)))
            if pad:
                # zeros around the input: written when the buffer is made, the inside every call
                xp = m.scratch((key, "padded"), (rows, hp, wp, c), fill=np.zeros(1))
                xp[:, pt : pt + h, pl : pl + w, :] = x.reshape(rows, h, w, c)
            else:
                xp = np.ascontiguousarray(x)
            row = hp * wp * c * item  # one sample
            if copy:  # (rows, tiles, hp, twin * c): tile t is input columns t * tw * sw ...
                # (a tile row's columns and channels as one contiguous axis: numpy copies
                # along the last axis, which a one-channel input would make one element long)
                src = np.ndarray(
                    (rows, tiles, hp, twin * c), np.float64, xp, 0, (row, tw * sw * c * item, wp * c * item, item)
                )
                xt = m.scratch((key, "tiles"), src.shape)
                np.copyto(xt, src)
                strides = (hp * twin * c * item, sh * twin * c * item, tiles * hp * twin * c * item, item)
                view = np.ndarray((tiles, oh, rows, kh * twin * c), np.float64, xt, 0, strides)
            else:
                strides = (tw * sw * c * item, sh * wp * c * item, row, item)
                view = np.ndarray((tiles, oh, rows, kh * twin * c), np.float64, xp, 0, strides)
            out = m.scratch((key, "bands"), (rows, oh, tiles, tw * n_filt))
            np.matmul(view, band, out=out.transpose(2, 1, 0, 3))
            return out.reshape(rows * oh * ow, n_filt)

        return product

    return factory
