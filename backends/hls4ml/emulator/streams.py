"""io_stream layers: what hls4ml's ``hls::stream`` forms compute, on the same flattened arrays.

A stream carries one sample's values in the channels-last order of the io_parallel array, a
word (``nnet::array<T, N>``) at a time, so every layer here is an op on that flattened array:

* ``clone_stream`` (one layer per copy, see firmware_graph.py) and ``repack_stream``: each
  value assigned to the output's value type, order unchanged (nnet_stream.h);
* ``zeropad1d_cl``/``zeropad2d_cl``: hls4ml's io_stream 'same' padding, an index map with
  zeros (nnet_padding_stream.h);
* ``conv_1d_cl``/``conv_2d_cl``, line buffer: the window of the output pixel whose bottom-right
  input pixel was just read, laid out ``[filt_height][filt_width][n_chan]`` as
  ``kernel_shift_2d`` builds it, times the weights by the ``mult_config``'s dense kernel, i.e.
  ``dense.build_dense`` on that config; the pixels the counters (``pX``/``sX``...) emit are
  the strided valid positions (nnet_conv_stream.h). The encoded form is replayed on indices
  from its ``pixels`` table at build time (which window FIFO each pixel enters, when a
  window is read out), then computed the same way;
* ``depthwise_conv_1d_cl``/``2d_cl`` and ``pointwise_conv_1d_cl``/``2d_cl`` (a SeparableConv as
  hls4ml writes it): the depthwise windows come as the convolution's (line buffer or encoded)
  and go through ``DepthwiseDenseLatency``, the io_parallel depthwise products and sums
  (depthwise.py); a pointwise convolution is the dense kernel on each input pixel whose row
  and column are multiples of the strides (nnet_sepconv*_stream.h). The windows follow from
  the layer's parameters: the stream forms never call the ``fill_buffer_N`` fillers of
  nnet_code_gen.h, which ``pack`` leaves out when hls4ml generated none;
* ``pooling1d_cl``/``pooling2d_cl`` (line buffer and encoded: the same windows, pool ==
  stride): each window value assigned to ``accum_t`` first, then ``nnet::reduce`` (a binary
  tree) of ``Op_max`` or ``Op_add`` in ``accum_t``, an average divided by the window size
  (ap_fixed / int: C division toward zero, accum_t's fractional bits) (nnet_pooling_stream.h);
  the io_parallel pooling instead compares/adds in its own order, so it is not reused;
* ``global_pooling1d_cl``/``2d_cl``: a running max/sum in ``accum_t`` over the pixels;
* ``normalize``: the io_parallel BatchNormalization when a word holds whole pixels;
* ``transpose``: the io_parallel index map (its 2-D form where a word is a row of the result);
* ``broadcast_stream``: its two forms (1x1xC and HxWx1) as index maps;
* ``softmax`` (latency, stable, argmax): the io_parallel softmax applied to each stream word
  on its own (the stream softmax normalises ``data_T::size`` values at a time).

What the C++ asserts or cannot stream sample after sample (padding inside a stream
convolution, pool != stride, several pixels per word, the legacy softmax) is refused naming
the layer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..firmware_graph import Layer, UnsupportedLayerError, const_int
from ..fixed_point import FixedType, cast_f64
from .dense import build_dense
from .depthwise import check_depthwise, depthwise_from_table
from .padding import gather_op
from .registry import register_stream
from .softmax import build_softmax

if TYPE_CHECKING:
    from .model import FixedPointModel


def stream_pack(m: FixedPointModel, layer: Layer, k: int) -> int:
    """Values per stream word of template argument ``k`` (an io_stream array type)."""
    name = layer.template[k].strip()
    if name not in m.graph.packs:
        raise UnsupportedLayerError(f"{layer.describe()}: '{name}' is not an nnet::array stream type in defines.h")
    return m.graph.packs[name]


def _cast(in_t: FixedType, out_t: FixedType):
    lo, hi = float(in_t.raw_min), float(in_t.raw_max)
    return (lambda x: out_t.cast(x, in_t)), out_t, (lambda x: cast_f64(out_t, x, in_t.frac, lo, hi))


@register_stream("clone_stream", "repack_stream")
def build_copy(m: FixedPointModel, layer: Layer, in_t: FixedType):
    """out[j] = in[j] in the output's value type; a repack only regroups the words."""
    return _cast(in_t, m.type_of(layer.template[1], layer))


@register_stream("zeropad1d_cl", "zeropad2d_cl")
def build_zeropad(m: FixedPointModel, layer: Layer, in_t: FixedType):
    out_t = m.type_of(layer.template[1], layer)
    n_chan = const_int(layer, "n_chan")
    iw, pl, pr = const_int(layer, "in_width"), const_int(layer, "pad_left"), const_int(layer, "pad_right")
    if layer.kind == "zeropad2d_cl":
        ih, pt, pb = const_int(layer, "in_height"), const_int(layer, "pad_top"), const_int(layer, "pad_bottom")
    else:
        ih, pt, pb = 1, 0, 0
    oh, ow = ih + pt + pb, iw + pl + pr
    declared = (const_int(layer, "out_height") if layer.kind == "zeropad2d_cl" else 1, const_int(layer, "out_width"))
    if declared != (oh, ow):
        raise UnsupportedLayerError(f"{layer.describe()}: output {declared} is not the padded input {(oh, ow)}")
    for k in (0, 1):
        if stream_pack(m, layer, k) != n_chan:
            raise UnsupportedLayerError(f"{layer.describe()}: stream words of other than n_chan values")
    n_in = ih * iw * n_chan
    # output position -> input index, n_in = a zero (fill_zero writes 0 in the result type)
    grid = np.full((oh, ow, n_chan), n_in, dtype=np.int64)
    grid[pt : pt + ih, pl : pl + iw, :] = np.arange(n_in).reshape(ih, iw, n_chan)
    src = grid.reshape(-1)
    lo, hi = float(min(in_t.raw_min, 0)), float(max(in_t.raw_max, 0))

    def pad(x):
        xe = np.concatenate([x, np.zeros((x.shape[0], 1), x.dtype)], axis=1)
        return np.take(xe, src, axis=1)

    return (lambda x: out_t.cast(pad(x), in_t)), out_t, (lambda x: cast_f64(out_t, pad(x), in_t.frac, lo, hi))


def _window_table(ih: int, iw: int, n_chan: int, fh: int, fw: int, sh: int, sw: int) -> np.ndarray:
    """(output pixels, window) input indices: pixels row-major, window [fh][fw][n_chan]."""
    oh, ow = (ih - fh) // sh + 1, (iw - fw) // sw + 1
    y = (np.arange(oh) * sh)[:, None, None, None, None] + np.arange(fh)[None, None, :, None, None]
    x = (np.arange(ow) * sw)[None, :, None, None, None] + np.arange(fw)[None, None, None, :, None]
    c = np.arange(n_chan)[None, None, None, None, :]
    return ((y * iw + x) * n_chan + c).reshape(oh * ow, fh * fw * n_chan)


def _geometry(layer: Layer, filt: str) -> tuple[int, int, int, int, int, int, int, int, int]:
    """(in_h, in_w, n_chan, f_h, f_w, s_h, s_w, out_h, out_w); 1-D layers have height 1."""
    c = layer.config.get("consts", {})
    two_d = "in_height" in c
    n_chan = const_int(layer, "n_chan" if filt == "filt" else "n_filt")
    if two_d:
        ih, iw = const_int(layer, "in_height"), const_int(layer, "in_width")
        fh, fw = const_int(layer, f"{filt}_height"), const_int(layer, f"{filt}_width")
        sh, sw = const_int(layer, "stride_height"), const_int(layer, "stride_width")
        oh, ow = const_int(layer, "out_height"), const_int(layer, "out_width")
    else:
        ih, fh, sh, oh = 1, 1, 1, 1
        iw = const_int(layer, "in_width" if filt == "filt" else "n_in")
        fw, sw = const_int(layer, f"{filt}_width"), const_int(layer, "stride_width")
        ow = const_int(layer, "out_width" if filt == "filt" else "n_out")
    pads = [k for k in ("pad_top", "pad_bottom", "pad_left", "pad_right") if k in c and const_int(layer, k) != 0]
    if pads:
        raise UnsupportedLayerError(
            f"{layer.describe()}: {', '.join(pads)} != 0 in a stream layer (the C++ asserts it; hls4ml pads "
            "with a zeropad layer)"
        )
    if (oh, ow) != ((ih - fh) // sh + 1, (iw - fw) // sw + 1):
        raise UnsupportedLayerError(f"{layer.describe()}: output {oh}x{ow} is not the strided valid window count")
    return ih, iw, n_chan, fh, fw, sh, sw, oh, ow


def _scale_index(kind: str, k: int, s: int, w: int, idx: int) -> int:
    """nnet::scale_index_regular / scale_index_unscaled (nnet_conv_stream.h), unsigned maths."""
    if kind.endswith("scale_index_unscaled"):
        return idx
    if not kind.endswith("scale_index_regular"):
        raise ValueError(kind)
    a, b = (k, s) if k >= s else (s, k)
    if idx < a - b:
        return idx
    n_w = ((w - k) // s) * s + k  # nearest W without unused pixels on the right
    s_w = (-(-a // b) - 1) * s + k  # scaled W that behaves like the original (DIV_ROUNDUP(K,S) or (S,K))
    if idx >= n_w:
        return s_w
    r = n_w - idx
    if r <= a - b:
        return s_w - r
    return a - b + (idx - (a - b)) % s


def _encoded_table(m: FixedPointModel, layer: Layer, ih, iw, n_chan, fh, fw, sh, sw) -> np.ndarray:
    """The encoded convolution replayed on indices: each input pixel goes into the window FIFOs
    its ``pixels`` mask names (``compute_output_encoded``), and a window is read out when the
    mask's last bit is set; the rows are the input indices of each emitted window."""
    import re
    from collections import deque

    text = m.graph.project.read_firmware("parameters.h")
    found = re.search(rf"\b{re.escape(layer.config_name)}::pixels\[\]\s*=\s*\{{([^}}]*)\}}", text)
    if found is None:
        raise UnsupportedLayerError(f"{layer.describe()}: no {layer.config_name}::pixels table in parameters.h")
    pixels = [int(v) for v in found.group(1).split(",") if v.strip()]
    using = layer.config.get("using", {})
    kernel = fh * fw
    two_d = layer.kind.endswith("_2d_cl")
    min_w = const_int(layer, "min_width")
    fifos: list[deque] = [deque() for _ in range(kernel * n_chan)]
    windows = []
    try:
        for h in range(ih):
            for w in range(iw):
                if two_d:
                    y = _scale_index(using.get("scale_index_height", ""), fh, sh, ih, h)
                    x = _scale_index(using.get("scale_index_width", ""), fw, sw, iw, w)
                    mask = pixels[y * min_w + x]
                else:
                    mask = pixels[_scale_index(using.get("scale_index", ""), fw, sw, iw, w)]
                for f in range(kernel):
                    if mask >> f & 1:
                        for c in range(n_chan):
                            fifos[f * n_chan + c].append((h * iw + w) * n_chan + c)
                if mask >> (kernel - 1) & 1:
                    windows.append([q.popleft() for q in fifos])
    except (ValueError, IndexError):
        raise UnsupportedLayerError(
            f"{layer.describe()}: its pixels table or scale_index reads outside what the C++ would "
            "(an empty window FIFO or an unknown index scaler)"
        ) from None
    return np.array(windows, dtype=np.int64).reshape(len(windows), kernel * n_chan)


def _gather(m: FixedPointModel, table: np.ndarray, tag: str):
    """x (rows, n_in) -> (rows * pixels, window): the windows, one row per output pixel."""
    pixels, window = table.shape
    flat = np.ascontiguousarray(table.reshape(-1))
    key = m.layer_key

    def gather(x):
        rows = x.shape[0]
        out = m.scratch((key, tag), (rows, flat.size)) if x.dtype == np.float64 else None
        return np.take(x, flat, axis=1, out=out, mode="clip").reshape(rows * pixels, window)

    return gather


def _stream_windows(m: FixedPointModel, layer: Layer, n_out_chan: int) -> np.ndarray:
    """The windows a stream convolution emits, in its output order: (output pixels, window)
    input indices, window laid out ``[filt_height][filt_width][n_chan]``.

    Computed from the layer's parameters, not read from nnet_code_gen.h: the stream forms
    never call the generated ``fill_buffer_N`` fillers (those are io_parallel's im2col), so
    a project packed without that file is emulated as the C++ runs. The line buffer's
    counters emit the strided valid windows; the encoded form is replayed from its
    ``pixels`` table; a pointwise convolution multiplies the input pixels whose row and
    column are multiples of the strides (``pointwise_conv_*_cl`` reads and drops the rest)."""
    ih, iw, n_chan, fh, fw, sh, sw, oh, ow = _geometry(layer, "filt")
    if stream_pack(m, layer, 0) != n_chan or stream_pack(m, layer, 1) != n_out_chan:
        raise UnsupportedLayerError(f"{layer.describe()}: stream words of other than one pixel")
    if layer.kind.startswith("pointwise_"):
        if (fh, fw) != (1, 1):
            raise UnsupportedLayerError(f"{layer.describe()}: a pointwise kernel of {fh}x{fw} (the C++ asserts 1x1)")
        return _window_table(ih, iw, n_chan, 1, 1, sh, sw)
    impl = layer.config.get("consts", {}).get("implementation", "").split("::")[-1]
    if impl not in ("linebuffer", "encoded"):
        raise UnsupportedLayerError(f"{layer.describe()}: stream convolution implementation '{impl}' is not emulated")
    if layer.kind.endswith("_2d_cl") and fh == 1 and sh != 1:
        # compute_output_buffer_1d runs for filt_height 1 and ignores stride_height: it would emit
        # every row, more pixels than out_height * out_width, and the stream would not line up
        raise UnsupportedLayerError(f"{layer.describe()}: a 1-row kernel with stride_height {sh}")
    if impl == "linebuffer":
        return _window_table(ih, iw, n_chan, fh, fw, sh, sw)
    if layer.kind == "depthwise_conv_2d_cl" and fh != fw:
        raise UnsupportedLayerError(f"{layer.describe()}: an encoded {fh}x{fw} kernel (the C++ asserts a square one)")
    table = _encoded_table(m, layer, ih, iw, n_chan, fh, fw, sh, sw)
    if table.shape[0] != oh * ow:
        raise UnsupportedLayerError(f"{layer.describe()}: its pixels table emits {table.shape[0]} of {oh * ow} pixels")
    return table


@register_stream("depthwise_conv_1d_cl", "depthwise_conv_2d_cl")
def build_depthwise_stream(m: FixedPointModel, layer: Layer, in_t: FixedType):
    """Each emitted window through ``DepthwiseDenseLatency``: the products and per-channel sums
    of the io_parallel depthwise convolution, so depthwise.py computes them."""
    check_depthwise(m, layer, in_t)
    _, mult = m.sub_config(layer, "mult_config")
    kernel = mult.get("using", {}).get("kernel", "")
    if not kernel.startswith("nnet::DepthwiseDenseLatency"):
        # the resource kernels add the products in another order, which a saturating or
        # rounding accumulator can tell apart
        raise UnsupportedLayerError(f"{layer.describe()}: depthwise kernel '{kernel}' is not emulated (latency only)")
    return depthwise_from_table(m, layer, in_t, _stream_windows(m, layer, const_int(layer, "n_chan")))


@register_stream("conv_1d_cl", "conv_2d_cl", "pointwise_conv_1d_cl", "pointwise_conv_2d_cl")
def build_conv_stream(m: FixedPointModel, layer: Layer, in_t: FixedType):
    """The line-buffer, encoded and pointwise convolutions: each emitted window through the
    mult_config's dense kernel."""
    n_filt = const_int(layer, "n_filt")
    table = _stream_windows(m, layer, n_filt)
    mult_name, mult = m.sub_config(layer, "mult_config")
    window = table.shape[1]
    dense_layer = Layer(
        "dense",
        layer.name,
        layer.template,
        layer.args,
        mult_name,
        {**mult, "types": {**mult.get("types", {})}},
        weights=layer.weights,
    )
    if const_int(dense_layer, "n_in") != window or const_int(dense_layer, "n_out") != n_filt:
        raise UnsupportedLayerError(f"{layer.describe()}: {mult_name} is not a {window}x{n_filt} dense")
    built = build_dense(m, dense_layer, in_t)
    op, out_t = built[0], built[1]
    fop = built[2] if len(built) > 2 else None
    gather = _gather(m, table, "window")
    n_out = table.shape[0] * n_filt

    def conv(x):
        return op(gather(x)).reshape(x.shape[0], n_out)

    def conv_f64(x):
        return fop(gather(x)).reshape(x.shape[0], n_out)

    return conv, out_t, (conv_f64 if fop is not None else None)


def _tree(cols: list, op):
    """nnet::reduce: the largest power of two below N on the left, the rest on the right."""
    if len(cols) == 1:
        return cols[0]
    if len(cols) == 2:
        return op(cols[0], cols[1])
    left = 1 << ((len(cols) - 1).bit_length() - 1)
    return op(_tree(cols[:left], op), _tree(cols[left:], op))


@register_stream("pooling1d_cl", "pooling2d_cl")
def build_pool_stream(m: FixedPointModel, layer: Layer, in_t: FixedType):
    out_t = m.type_of(layer.template[1], layer)
    acc_t = m.config_type(layer, "accum_t")
    impl = layer.config.get("consts", {}).get("implementation", "nnet::conv_implementation::linebuffer")
    if impl.split("::")[-1] not in ("linebuffer", "encoded"):
        raise UnsupportedLayerError(f"{layer.describe()}: pooling implementation '{impl}' is not supported")
    ih, iw, n_filt, ph, pw, sh, sw, oh, ow = _geometry(layer, "pool")
    if (ph, pw) != (sh, sw):
        raise UnsupportedLayerError(f"{layer.describe()}: pool {ph}x{pw} != stride {sh}x{sw} (the C++ asserts it)")
    if stream_pack(m, layer, 0) != n_filt or stream_pack(m, layer, 1) != n_filt:
        raise UnsupportedLayerError(f"{layer.describe()}: stream words of other than one pixel")
    op_name = layer.config.get("consts", {}).get("pool_op", "nnet::Max").split("::")[-1]
    if op_name not in ("Max", "Average"):
        raise UnsupportedLayerError(f"{layer.describe()}: pool_op {op_name} is not supported")
    # pool_window[i_ihw] = kernel_data[i_ihw * n_filt + c]: per output (pixel, channel) the
    # window slots in [ph][pw] order
    table = _window_table(ih, iw, n_filt, ph, pw, sh, sw)  # (pixels, ph*pw*n_filt)
    n = ph * pw
    idx = table.reshape(oh * ow, n, n_filt).transpose(0, 2, 1).reshape(oh * ow * n_filt, n)
    cols = [np.ascontiguousarray(idx[:, k]) for k in range(n)]
    m.check_width(layer, max(acc_t.width, in_t.width) + 2, "the pooled values")
    fa = acc_t.frac

    if op_name == "Max":
        if _monotone_cast(acc_t, in_t):
            # assigning to accum_t keeps the order of values (no wrap can happen): the maximum of
            # the assigned values is the assigned maximum, one cast instead of one per slot
            return _max_pool_cast_last(m, cols, in_t, acc_t, out_t)

        def max_pool(x):
            vals = [acc_t.cast(x[:, c], in_t) for c in cols]
            return out_t.cast(_tree(vals, np.maximum), acc_t)

        lo, hi = float(in_t.raw_min), float(in_t.raw_max)
        alo, ahi = float(acc_t.raw_min), float(acc_t.raw_max)

        def max_pool_f64(x):
            vals = [cast_f64(acc_t, x[:, c], in_t.frac, lo, hi) for c in cols]
            return cast_f64(out_t, _tree(vals, np.maximum), fa, alo, ahi)

        return max_pool, out_t, max_pool_f64

    def add(a, b):
        return acc_t.from_raw(a + b, fa)  # Op_add<accum_t>: the exact sum assigned to accum_t

    def avg_pool(x):
        total = _tree([acc_t.cast(x[:, c], in_t) for c in cols], add)
        q = np.abs(total) // n  # sum / N: ap_fixed / int, C division toward zero, accum_t's bits
        q = acc_t.from_raw(np.where(total < 0, -q, q), fa)
        return out_t.cast(q, acc_t)

    return avg_pool, out_t


def _monotone_cast(acc_t: FixedType, in_t: FixedType) -> bool:
    """Whether assigning in_t to acc_t never reorders two values: rounding and saturation keep
    the order, only a wrap breaks it, and none happens where acc_t holds in_t's range plus one
    of its own steps where it has fewer fractional bits (a rounding up at the top)."""
    if acc_t.overflow != "AP_WRAP" or acc_t.sat_bits:
        return acc_t.overflow in ("AP_SAT", "AP_SAT_SYM") and not acc_t.sat_bits
    lo = in_t.raw_min * 2.0**-in_t.frac
    hi = in_t.raw_max * 2.0**-in_t.frac + (2.0**-acc_t.frac if acc_t.frac < in_t.frac else 0.0)
    return acc_t.raw_min * 2.0**-acc_t.frac <= lo and hi <= acc_t.raw_max * 2.0**-acc_t.frac


def _max_pool_cast_last(m: FixedPointModel, cols: list[np.ndarray], in_t: FixedType, acc_t, out_t):
    key = m.layer_key

    def max_pool(x):
        y = x[:, cols[0]]
        for c in cols[1:]:
            y = np.maximum(y, x[:, c])
        return out_t.cast(acc_t.cast(y, in_t), acc_t)

    lo, hi = float(in_t.raw_min), float(in_t.raw_max)
    alo, ahi = float(acc_t.raw_min), float(acc_t.raw_max)

    def max_pool_f64(x):
        shape = (x.shape[0], cols[0].size)
        y = np.take(x, cols[0], axis=1, out=m.scratch((key, "pool"), shape), mode="clip")
        tmp = m.scratch((key, "slot"), shape)
        for c in cols[1:]:
            np.maximum(y, np.take(x, c, axis=1, out=tmp, mode="clip"), out=y)
        y = cast_f64(acc_t, y, in_t.frac, lo, hi)
        return cast_f64(out_t, y, acc_t.frac, alo, ahi)

    return max_pool, out_t, max_pool_f64


@register_stream("global_pooling1d_cl", "global_pooling2d_cl")
def build_global_pool_stream(m: FixedPointModel, layer: Layer, in_t: FixedType):
    """A running maximum (from accum_t's most negative value, ``hls::numeric_limits::min``) or
    a running sum in accum_t over the pixels in stream order, each value assigned to accum_t
    first; an average divides the sum by in_height * in_width (C division toward zero)."""
    out_t = m.type_of(layer.template[1], layer)
    acc_t = m.config_type(layer, "accum_t")
    n_filt = const_int(layer, "n_filt")
    if layer.kind == "global_pooling2d_cl":
        n = const_int(layer, "in_height") * const_int(layer, "in_width")
    else:
        n = const_int(layer, "n_in")
    if stream_pack(m, layer, 0) != n_filt or stream_pack(m, layer, 1) != n_filt:
        raise UnsupportedLayerError(f"{layer.describe()}: stream words of other than one pixel")
    op_name = layer.config.get("consts", {}).get("pool_op", "nnet::Max").split("::")[-1]
    fa = acc_t.frac
    m.check_width(layer, max(acc_t.width, in_t.width) + 2, "the pooled values")
    cols = [np.arange(n_filt) + p * n_filt for p in range(n)]
    if op_name == "Max":
        init = np.int64(acc_t.raw_min)

        def max_pool(x):
            y = np.full((x.shape[0], n_filt), init, np.int64)
            for c in cols:
                y = np.maximum(y, acc_t.cast(x[:, c], in_t))
            return out_t.cast(y, acc_t)

        return max_pool, out_t
    if op_name != "Average":
        raise UnsupportedLayerError(f"{layer.describe()}: pool_op {op_name} is not supported")

    def avg_pool(x):
        y = np.zeros((x.shape[0], n_filt), np.int64)
        for c in cols:  # data_window[c] = data_window[c] + value: exact sum assigned to accum_t
            y = acc_t.from_raw(y + acc_t.cast(x[:, c], in_t), fa)
        q = np.abs(y) // n
        return out_t.cast(np.where(y < 0, -q, q), acc_t)

    return avg_pool, out_t


@register_stream("normalize")
def build_normalize_stream(m: FixedPointModel, layer: Layer, in_t: FixedType):
    """The stream BatchNormalization indexes scale/bias by the position in the word (j %
    n_filt), the io_parallel one by the position in the array (i % n_filt): the same values
    when a word holds whole pixels, which is what hls4ml writes; the io_parallel builder."""
    from .normalization import build_normalize

    text = layer.config.get("consts", {}).get("n_filt", "-1").strip()
    if text != "-1" and stream_pack(m, layer, 0) % const_int(layer, "n_filt"):
        raise UnsupportedLayerError(f"{layer.describe()}: stream words that split a pixel's channels")
    return build_normalize(m, layer, in_t)


@register_stream("transpose")
def build_transpose_stream(m: FixedPointModel, layer: Layer, in_t: FixedType):
    """The stream transpose reads the whole array and writes out[i] = in[transfer_idx(i)], the
    io_parallel mapping; its 2-D form writes word i as in[j * from_shape[1] + i], the same
    mapping only when a word is one row of the result (res_T::size == to_shape[1])."""
    from .reshape import build_transpose

    if const_int(layer, "dims") == 2:
        to_shape = m.graph.arrays.get(f"{layer.config_name}_to_shape") or []
        if len(to_shape) != 2 or stream_pack(m, layer, 1) != to_shape[1]:
            raise UnsupportedLayerError(f"{layer.describe()}: 2-D stream transpose with words of other than a row")
    return build_transpose(m, layer, in_t)


@register_stream("broadcast_stream")
def build_broadcast(m: FixedPointModel, layer: Layer, in_t: FixedType):
    """broadcast_stream_1x1xC: each input word written n_dupl times (its first res_T::size
    values); broadcast_stream_HxWx1: each input word's first value filling a whole word."""
    out_t = m.type_of(layer.template[1], layer)
    ih, iw, ic = (const_int(layer, k) for k in ("in_height", "in_width", "in_chan"))
    oh, ow, oc = (const_int(layer, k) for k in ("out_height", "out_width", "out_chan"))
    d, r = stream_pack(m, layer, 0), stream_pack(m, layer, 1)
    words = ih * iw * ic // d
    if ih == 1 and iw == 1 and ic == oc:
        n_dupl = oh * ow * oc // (ih * iw * ic)
        src = np.array([w * d + k for w in range(words) for _ in range(n_dupl) for k in range(r)], dtype=np.int64)
    elif ic == 1 and ih == oh and iw == ow:
        src = np.array([w * d for w in range(words) for _ in range(r)], dtype=np.int64)
    else:
        raise UnsupportedLayerError(f"{layer.describe()}: broadcast of {ih}x{iw}x{ic} to {oh}x{ow}x{oc} writes nothing")
    if src.size != oh * ow * oc or (r > d and ih == 1 and iw == 1 and ic == oc):
        raise UnsupportedLayerError(f"{layer.describe()}: the broadcast does not fill {oh}x{ow}x{oc}")
    return gather_op(m, layer, in_t, out_t, src, ih * iw * ic)


@register_stream("softmax")
def build_softmax_stream(m: FixedPointModel, layer: Layer, in_t: FixedType):
    """The stream softmax normalises each word of data_T::size values on its own (the
    channels of a pixel; the whole vector after a Dense): the io_parallel softmax on a word."""
    consts = layer.config.get("consts", {})
    impl = consts.get("implementation", "nnet::softmax_implementation::latency").split("::")[-1]
    if impl not in ("latency", "stable", "argmax"):
        raise UnsupportedLayerError(
            f"{layer.describe()}: stream softmax implementation '{impl}' is not emulated (its tables differ)"
        )
    pack, n = stream_pack(m, layer, 0), const_int(layer, "n_in")
    if stream_pack(m, layer, 1) != pack or n % pack:
        raise UnsupportedLayerError(f"{layer.describe()}: input and output words of different sizes")
    word = Layer(
        layer.kind,
        layer.name,
        layer.template,
        layer.args,
        layer.config_name,
        {**layer.config, "consts": {**consts, "n_in": str(pack), "n_slice": str(pack)}},
    )
    built = build_softmax(m, word, in_t)
    op, out_t = built[0], built[1]
    fop = built[2] if len(built) > 2 else None

    def per_word(f):
        return lambda x: f(x.reshape(-1, pack)).reshape(x.shape[0], n)

    return per_word(op), out_t, (per_word(fop) if fop is not None else None)
