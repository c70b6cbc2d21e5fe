"""``nnet::depthwise_conv_1d_cl``/``depthwise_conv_2d_cl`` (io_parallel; the io_stream form,
streams.py, computes the same products and sums on its windows), and with them
SeparableConv1D/2D: hls4ml's ``separable_to_depthwise_and_conv`` pass (part of every
conversion flow) splits a separable convolution into a DepthwiseConv and a Conv before the
firmware is written, so the top function calls ``depthwise_conv_*_cl`` then
``pointwise_conv_*_cl``/``conv_*_cl`` (conv.py), never ``separable_conv_*_cl``.

The C++ (nnet_sepconv{1,2}d_latency.h, ``depthwise_conv_*_latency_cl``), per output pixel:
the buffer filler writes the pixel's window ``data_buf[i_pxl][k * n_chan + c]`` (kernel
position k, channel c; zeros for padding), then

    mult[i] = product::mult(data_buf[i], weights[i])        // accum_t: quantized, overflowed
    acc[c]  = (accum_t) biases[c]
    for k: for c: acc[c] += mult[k * n_chan + c]            // accum_t after every addition
    res[pixel * n_chan + c] = (res_T) acc[c]

so each channel is a dot product over the kernel positions, accumulated in k order. That
order can matter only when accum_t saturates and a partial sum can leave its range, or when a
product is rounded into accum_t; then the emulation replays the K additions in that order
(vectorised over rows, pixels and channels). Otherwise the sum is exact whatever the order
(int64, or float64 below 2**52 with the bounds dense.py uses; on float64 and with few
channels, as conv.py's band products with a block-diagonal weight matrix).

Refused at load, naming the layer: the resource strategy (``depthwise_conv_*_cl`` asserts
"Resource strategy for DepthwiseConv2D is not supported." in io_parallel; hls4ml 1.3.0's
C-simulation aborts on it), any strategy but latency, a depth multiplier other than 1 (the
C++ asserts ``n_filt == n_chan``), a product other than ``product::mult``, and a mult_config
whose types differ from the layer's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..firmware_graph import Layer, UnsupportedLayerError, const_int
from ..fixed_point import F64_EXACT, FixedType, cast_f64, f64_capable, overflow_f64
from .conv import BAND_MIN_ROWS, band_layout, band_product
from .registry import register

#: up to this many channels the float64 path multiplies conv.py's bands with a block-diagonal
#: weight matrix (n_chan times the products needed, but in one BLAS call); beyond, the
#: per-position multiply-adds cost less
BAND_MAX_CHANNELS = 16

if TYPE_CHECKING:
    from .model import FixedPointModel


@register("depthwise_conv_1d_cl", "depthwise_conv_2d_cl")
def build_depthwise(m: FixedPointModel, layer: Layer, in_t: FixedType):
    consts = layer.config.get("consts", {})
    strategy = consts.get("strategy", "nnet::latency").split("::")[-1]
    if strategy != "latency":
        raise UnsupportedLayerError(
            f"{layer.describe()}: depthwise strategy '{strategy}' (io_parallel: hls4ml's C++ implements only "
            "latency; its resource branch asserts)"
        )
    check_depthwise(m, layer, in_t)
    table = m.graph.fill_buffer(layer)  # (pixels, K * n_chan) input indices, -1 = padding zero
    return depthwise_from_table(m, layer, in_t, table)


def check_depthwise(m: FixedPointModel, layer: Layer, in_t: FixedType) -> None:
    """What both io forms share: a depth multiplier of 1 (the C++ asserts it), product::mult,
    the mult_config's types equal to the layer's, no binary input."""
    n_chan, n_filt = const_int(layer, "n_chan"), const_int(layer, "n_filt")
    if n_filt != n_chan:
        raise UnsupportedLayerError(
            f"{layer.describe()}: depth multiplier {n_filt // max(n_chan, 1)} (n_filt {n_filt} != n_chan {n_chan}); "
            "hls4ml's depthwise C++ asserts a multiplier of 1"
        )
    _, mult = m.sub_config(layer, "mult_config")
    product = mult.get("using", {}).get("product", "nnet::product::mult")
    if not product.endswith("product::mult"):
        raise UnsupportedLayerError(f"{layer.describe()}: product {product} is not supported (only product::mult)")
    for type_key in ("accum_t", "weight_t"):
        if m.config_type(layer, type_key) != m.type_of(mult["types"].get(type_key, type_key), layer):
            raise UnsupportedLayerError(f"{layer.describe()}: {type_key} differs between the layer and its mult_config")
    if in_t.integer_type and in_t.width == 1 and not in_t.signed:
        raise UnsupportedLayerError(f"{layer.describe()}: binary (ap_uint<1>) input is not supported")


def depthwise_from_table(m: FixedPointModel, layer: Layer, in_t: FixedType, table: np.ndarray):
    """The depthwise products and sums of ``depthwise_conv_*_latency_cl`` (io_parallel) and of
    ``DepthwiseDenseLatency`` on each window (io_stream: the same loops), on the windows
    ``table`` lists: row p (output pixel) holds the input index of each slot ``k * n_chan + c``,
    -1 for a padding zero."""
    consts = layer.config.get("consts", {})
    n_chan = const_int(layer, "n_chan")
    pixels, window = table.shape
    n_k = window // n_chan
    dims = ("filt_height", "filt_width") if "filt_height" in consts else ("filt_width",)
    if window != n_k * n_chan or n_k != int(np.prod([const_int(layer, d) for d in dims])):
        raise UnsupportedLayerError(f"{layer.describe()}: buffer filler window {window} does not match the kernel")
    in_dims = ("in_height", "in_width", "n_chan") if "in_height" in consts else ("in_width", "n_chan")
    n_in_total = int(np.prod([const_int(layer, d) for d in in_dims]))
    if table.max(initial=-1) >= n_in_total:
        raise UnsupportedLayerError(f"{layer.describe()}: buffer filler reads beyond the input")

    out_t = m.type_of(layer.template[1], layer)
    acc_t, w_t, b_t = (m.config_type(layer, k) for k in ("accum_t", "weight_t", "bias_t"))
    w = m.weight_raws(layer, layer.args[2], w_t)
    b = m.weight_raws(layer, layer.args[3], b_t)
    if w.size != window or b.size != n_chan:
        raise UnsupportedLayerError(
            f"{layer.describe()}: weight sizes {w.size}/{b.size} do not match {n_k}x{n_chan}/{n_chan}"
        )
    m.check_width(layer, in_t.width + w_t.width, "the product")
    m.check_width(layer, acc_t.width + 1, "the accumulator")
    wk = w.reshape(n_k, n_chan)  # weights[k * n_chan + c]
    bias_acc = acc_t.cast(b, b_t)  # (accum_t) biases[c]
    fp, fa = in_t.frac + w_t.frac, acc_t.frac
    modular = acc_t.overflow == "AP_WRAP" and acc_t.sat_bits == 0
    xmax = in_t.max_abs_raw()

    # the gather, per kernel position: index (k, pixel * n_chan + c), so each position's
    # slice is a contiguous (rows, pixels * n_chan) block laid out as the result is
    index = table.reshape(pixels, n_k, n_chan).transpose(1, 0, 2).reshape(n_k, pixels * n_chan)
    padded = bool((index < 0).any())
    flat_index = np.where(index < 0, n_in_total, index).reshape(-1)
    n_res = pixels * n_chan
    w_rows = np.tile(wk, (1, pixels))  # (K, pixels * n_chan): weights broadcast over the pixels
    key = m.layer_key

    def gather(x, zero):
        rows = x.shape[0]
        if padded:
            x = np.concatenate([x, np.full((rows, 1), zero, dtype=x.dtype)], axis=1)
        out = m.scratch((key, "window"), (rows, flat_index.size)) if x.dtype == np.float64 else None
        # mode="clip" skips the bounds checks: the table was checked at build
        return np.take(x, flat_index, axis=1, out=out, mode="clip").reshape(rows, n_k, n_res)

    # exact, order-free sum: every product lands on accum_t's grid unrounded (fa >= fp), and
    # either accum_t wraps (modular sums) or no partial sum can reach its range
    colsum = np.abs(wk).sum(axis=0)
    linear = fa >= fp
    if linear and not modular:
        bound = int(np.abs(bias_acc).max(initial=0)) + (int(colsum.max(initial=0)) * xmax << (fa - fp))
        linear = bound <= min(acc_t.raw_max, -acc_t.raw_min)
    # int64 products and their K-term sum must not overflow int64 (modular shifts may: they
    # wrap mod 2**64, a multiple of accum_t's 2**W)
    linear = linear and (int(colsum.max(initial=0)) * xmax).bit_length() <= 62
    bias_res = np.tile(bias_acc, pixels)
    shift = np.int64(fa - fp)

    if linear:

        def depthwise_linear(x):
            g = gather(x, 0)
            acc = g[:, 0] * w_rows[0]
            for k in range(1, n_k):
                acc += g[:, k] * w_rows[k]
            acc <<= shift
            acc += bias_res
            if modular:
                acc = acc_t.wrap(acc)
            return out_t.cast(acc, acc_t)

        op = depthwise_linear
    else:

        def depthwise_ordered(x):
            # the C++ order: bias, then kernel position 0, 1, ...; each product cast into
            # accum_t (rounding, overflow), each addition stored back into accum_t
            g = gather(x, 0)
            acc = np.broadcast_to(bias_res, (x.shape[0], n_res)).copy()
            for k in range(n_k):
                prod = acc_t.from_raw(g[:, k] * w_rows[k], fp)
                acc = acc_t.from_raw(acc + prod, fa)
            return out_t.cast(acc, acc_t)

        op = depthwise_ordered

    fop = None
    if linear and f64_capable(in_t) and f64_capable(acc_t) and f64_capable(out_t):
        wf = w_rows.astype(np.float64) * 2.0 ** int(shift)
        bf = bias_res.astype(np.float64)
        peak = float(colsum.max(initial=0)) * 2.0 ** int(shift) * xmax + float(np.abs(bias_acc).max(initial=0))
        if peak * (1 + 1e-9) + 2 < F64_EXACT:  # every partial sum is an exact float64 integer
            lo, hi = -peak - 2, peak + 2
            if modular and not (acc_t.raw_min <= lo and hi <= acc_t.raw_max):
                acc_lo, acc_hi, wrap = float(acc_t.raw_min), float(acc_t.raw_max), True
            else:
                acc_lo, acc_hi, wrap = lo, hi, False

            layout = band_layout(layer, table) if n_chan <= BAND_MAX_CHANNELS else None
            bands = None
            if layout is not None:
                # the depthwise layer as a convolution whose filter c reads channel c only
                block = np.zeros((n_k, n_chan, n_chan))
                block[:, np.arange(n_chan), np.arange(n_chan)] = wk * 2.0 ** int(shift)
                bands = band_product(m, key, layout, None)(block.reshape(window, n_chan))

            def depthwise_f64(x):
                rows = x.shape[0]
                if bands is not None and rows >= BAND_MIN_ROWS:
                    acc = bands(x).reshape(rows, n_res)  # exact sums: the order is free
                else:
                    g = gather(x, 0.0)
                    acc = np.multiply(g[:, 0], wf[0], out=m.scratch(key, (rows, n_res)))
                    tmp = m.scratch((key, "term"), acc.shape)
                    for k in range(1, n_k):
                        acc += np.multiply(g[:, k], wf[k], out=tmp)
                acc += bf
                if wrap:
                    acc = overflow_f64(acc_t, acc)
                return cast_f64(out_t, acc, fa, acc_lo, acc_hi)

            fop = depthwise_f64
    return op, out_t, fop
