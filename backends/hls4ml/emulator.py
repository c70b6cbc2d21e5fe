"""Bit-exact numpy emulation of hls4ml io_parallel firmware (the C-simulation, vectorised).

``FixedPointModel(project).predict(x)`` computes what the firmware's top function computes
(for a VivadoAccelerator project: the ``myproject_axi`` wrapper, i.e. T_in -> input_t ->
layers -> result_t -> T_out), with every value held as an int64 ``ap_fixed`` raw and every
cast done with the type's quantization and overflow modes (see ``fixed_point.py``).

Layers supported, each checked bit for bit against hls4ml's own C-simulation
(``HLSModel.predict``) in ``tests/test_hls4ml_emulator.py``:

* ``nnet::dense``: latency strategy and resource strategy (``DenseResource_rf_leq_nin`` and
  ``DenseResource_rf_gt_nin_rem0``, their loop order replayed), ``product::mult`` only;
  every product cast to ``accum_t``; float64 BLAS on the raws where that is exact;
* ``nnet::relu``, ``nnet::linear``, ``nnet::leaky_relu``;
* ``nnet::normalize`` (BatchNormalization);
* ``nnet::softmax`` with the ``latency``, ``stable``, ``legacy`` and ``argmax``
  implementations: the exp/inverse tables are rebuilt as the C++ builds them (float maths,
  glibc ``expf``) and indexed from the same input bits;
* ``nnet::sigmoid`` and ``nnet::tanh`` lookup tables.

Everything else raises ``UnsupportedLayerError`` when the model is built (never in
``predict``), naming the layer and what is unsupported; io_stream projects are refused.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import re
import threading
from collections.abc import Callable
from typing import ClassVar

import numpy as np

from .firmware_graph import FirmwareGraph, Layer, UnsupportedLayerError, const_int, read_firmware_graph
from .fixed_point import F64_EXACT, FixedType, cast_f64, f64_capable, from_float_f64, overflow_f64
from .project import Hls4mlProject, ProjectError

__all__ = ["FixedPointModel", "UnsupportedLayerError"]

_LIBM = None


def _libm():
    """glibc's single-precision maths, the functions the C-sim's table initialisers call."""
    global _LIBM  # noqa: PLW0603  (loaded once per process, on first use)
    if _LIBM is None:
        lib = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
        for fn in ("expf", "tanhf"):
            getattr(lib, fn).restype = ctypes.c_float
            getattr(lib, fn).argtypes = [ctypes.c_float]
        _LIBM = lib
    return _LIBM


def _f32_map(fn: str, values: np.ndarray) -> np.ndarray:
    f = getattr(_libm(), fn)
    return np.array([f(float(v)) for v in np.asarray(values, np.float32)], dtype=np.float32)


def _ceillog2(n: int) -> int:
    return max(0, (n - 1).bit_length())


def _trunc_div(num: np.ndarray, den: int) -> np.ndarray:
    """C integer division (toward zero) of an int64 array by a positive integer."""
    q = np.abs(num) // np.int64(den)
    return np.where(num < 0, -q, q)


def _scaled_trunc(layer: Layer, bits: int, mul: int, den: int):
    """x -> trunc(x * mul / den) in C semantics, for int64 x of ``bits`` bits; the common
    factor is cancelled first so wide inputs with power-of-two table sizes never overflow."""
    g = math.gcd(mul, den)
    mul, den = mul // g, den // g
    if bits + mul.bit_length() > 62:
        raise UnsupportedLayerError(f"{layer.describe()}: x * table_size needs more than 62 bits (int64 raws)")
    m = np.int64(mul)
    if den == 1:
        return lambda x: x * m
    return lambda x: _trunc_div(x * m, den)


def _wrap32(v: np.ndarray) -> np.ndarray:
    return ((v + np.int64(1 << 31)) & np.int64((1 << 32) - 1)) - np.int64(1 << 31)


Op = Callable[[np.ndarray], np.ndarray]


def _int64_adapter(op: Op) -> Op:
    """Run an int64-raw op inside the float64 chain (layers without a float64 form)."""
    return lambda v: op(v.astype(np.int64)).astype(np.float64)


class FixedPointModel:
    """The firmware of an hls4ml io_parallel project as a chain of vectorised int64 ops."""

    def __init__(self, project: Hls4mlProject):
        self.project = project
        self.graph: FirmwareGraph = read_firmware_graph(project)
        self._ops: list[Op] = []
        # the same chain on float64 raws (exact integers below 2**52): BLAS products and
        # in-place quantization; None when some type of the model is too wide for it
        fops: list[Op] | None = []
        self._ws = threading.local()  # per-thread preallocated buffers, see _buffer
        in_type = self._type(project.input.ctype, None)
        self.input_type = in_type
        current = in_type
        types = [in_type]
        for index, layer in enumerate(self.graph.layers):
            builder = getattr(self, f"_build_{layer.kind}", None)
            if builder is None:
                raise UnsupportedLayerError(
                    f"{layer.describe()}: nnet::{layer.kind} is not supported by the numpy emulator"
                )
            declared_in = self._type(layer.template[0], layer)
            if declared_in != current:
                raise UnsupportedLayerError(
                    f"{layer.describe()}: input type {declared_in} differs from the previous output {current}"
                )
            self._layer_key = index
            built = builder(layer, current)
            op, current = built[0], built[1]
            self._ops.append(op)
            types.append(current)
            if fops is not None:
                fop = built[2] if len(built) > 2 else None
                fops.append(fop if fop is not None else _int64_adapter(op))
        self.output_type = current
        self.n_in = project.input.size
        self.n_out = project.output.size
        self._io_in, self._io_out = self._accelerator_io()
        types += [t for t in (self._io_in, self._io_out) if isinstance(t, FixedType)]
        if not all(f64_capable(t) for t in types):
            fops = None
        self._fops = fops

    def _buffer(self, key, shape: tuple[int, ...], fill: np.ndarray | None = None) -> np.ndarray:
        """A float64 array owned by this model and thread, reused across calls of the same
        batch size: scratch space, or (``fill``) a constant broadcast to ``shape`` once."""
        bufs = getattr(self._ws, "bufs", None)
        if bufs is None:
            bufs = self._ws.bufs = {}
        buf = bufs.get(key)
        if buf is None or buf.shape != shape:
            buf = bufs[key] = np.empty(shape, np.float64)
            if fill is not None:
                buf[...] = fill
        return buf

    # ------------------------------------------------------------------ types
    def _type(self, name: str, layer: Layer | None) -> FixedType:
        seen = set()
        text = name.strip()
        local = layer.config.get("types", {}) if layer is not None else {}
        while text in local or text in self.graph.typedefs:
            if text in seen:
                break
            seen.add(text)
            text = local[text] if text in local else self.graph.typedefs[text]
        try:
            return FixedType.parse(text)
        except ValueError as e:
            where = layer.describe() if layer is not None else f"firmware type {name}"
            raise UnsupportedLayerError(f"{where}: type '{name}' = '{text}': {e}") from None

    # typedefs a config struct inherits from its nnet:: base when it does not override them
    _BASE_TYPES: ClassVar[dict[tuple[str, str], str]] = {("activ_config", "table_t"): "ap_fixed<18,8>"}

    def _cfg_type(self, layer: Layer, key: str) -> FixedType:
        inherited = self._BASE_TYPES.get((layer.config.get("base", ""), key))
        if key not in layer.config.get("types", {}) and inherited is not None:
            return FixedType.parse(inherited)
        if key not in layer.config.get("types", {}):
            raise UnsupportedLayerError(f"{layer.describe()}: {layer.config_name} defines no {key}")
        return self._type(key, layer)

    def _weights(self, layer: Layer, arg: str, t: FixedType) -> np.ndarray:
        values = self.graph.weight_array(layer, arg)
        if t.integer_type:
            raise UnsupportedLayerError(
                f"{layer.describe()}: integer weight type {t} (parsed as text by ap_int) is not emulated"
            )
        try:
            return t.from_float(values)
        except ValueError as e:
            raise UnsupportedLayerError(f"{layer.describe()}: weights '{arg}': {e}") from None

    @staticmethod
    def _check_width(layer: Layer, bits: int, what: str) -> None:
        if bits > 62:
            raise UnsupportedLayerError(
                f"{layer.describe()}: {what} needs {bits} bits, beyond the emulator's int64 raws"
            )

    # ------------------------------------------------------------------ dense
    def _dense_triplets(self, layer: Layer, n_in: int, n_out: int) -> list[tuple[int, int, int]]:
        """(input index, weight index, output index) of every product, in the C loop order."""
        kernel = layer.config.get("using", {}).get("kernel", "nnet::DenseLatency")
        rf = const_int(layer, "reuse_factor")
        total = n_in * n_out
        trip: list[tuple[int, int, int]] = []
        if kernel.endswith("DenseLatency"):
            return [(i, i * n_out + j, j) for i in range(n_in) for j in range(n_out)]
        multfactor = min(n_in, rf)
        multiplier_limit = -(-total // multfactor)
        if kernel.endswith("DenseResource_rf_leq_nin"):
            block = -(-total // rf)
            multscale = multiplier_limit // n_out
            if not ((multiplier_limit % n_out == 0 or rf >= n_in) and multiplier_limit == block):
                raise UnsupportedLayerError(f"{layer.describe()}: reuse factor {rf} violates the kernel's assertions")
            for ir in range(rf):
                w, i, o, step = ir, ir, 0, 0
                for _ in range(block):
                    trip.append((i, w, o))
                    w += rf
                    i += rf
                    if i >= n_in:
                        i = ir
                    if step + 1 >= multscale:
                        step, o = 0, o + 1
                    else:
                        step += 1
        elif kernel.endswith("DenseResource_rf_gt_nin_rem0"):
            ru = min(rf, total)
            block = -(-total // rf)
            if not ((multiplier_limit % n_out == 0 or ru >= n_in) and ru > n_in and ru % n_in == 0):
                raise UnsupportedLayerError(f"{layer.describe()}: reuse factor {rf} violates the kernel's assertions")
            outscale = ru // n_in
            outidx, outstep = [], 0
            for ir in range(ru):
                outidx.append(outstep)
                if (ir + 1) % n_in == 0:
                    outstep += 1
            i = 0
            for ir in range(ru):
                w, o = ir, outidx[ir]
                for _ in range(block):
                    trip.append((i, w, o))
                    w += ru
                    if w >= total:
                        break
                    o += outscale
                i += 1
                if i >= n_in:
                    i = 0
        else:
            raise UnsupportedLayerError(f"{layer.describe()}: dense kernel {kernel} is not supported")
        for i, w, o in trip:
            if not (0 <= i < n_in and 0 <= w < total and 0 <= o < n_out):
                raise UnsupportedLayerError(f"{layer.describe()}: kernel {kernel} indexes outside its arrays")
        return trip

    def _build_dense(self, layer: Layer, in_t: FixedType):
        product = layer.config.get("using", {}).get("product", "nnet::product::mult")
        if not product.endswith("product::mult"):
            raise UnsupportedLayerError(f"{layer.describe()}: product {product} is not supported (only product::mult)")
        if in_t.integer_type and in_t.width == 1 and not in_t.signed:
            raise UnsupportedLayerError(f"{layer.describe()}: binary (ap_uint<1>) dense input is not supported")
        n_in, n_out = const_int(layer, "n_in"), const_int(layer, "n_out")
        out_t = self._type(layer.template[1], layer)
        acc_t, w_t, b_t = (self._cfg_type(layer, k) for k in ("accum_t", "weight_t", "bias_t"))
        w = self._weights(layer, layer.args[2], w_t)
        b = self._weights(layer, layer.args[3], b_t)
        if w.size != n_in * n_out or b.size != n_out:
            raise UnsupportedLayerError(
                f"{layer.describe()}: weight sizes {w.size}/{b.size} do not match {n_in}x{n_out}"
            )
        self._check_width(layer, in_t.width + w_t.width, "the product")
        trip = self._dense_triplets(layer, n_in, n_out)
        wmat = np.zeros((n_in, n_out), np.int64)
        used = np.zeros((n_in, n_out), np.int64)
        for i, wi, o in trip:
            wmat[i, o] += w[wi]
            used[i, o] += 1
        bias_acc = acc_t.cast(b, b_t)
        fp = in_t.frac + w_t.frac  # fractional bits of each exact product
        fa = acc_t.frac
        modular = acc_t.overflow == "AP_WRAP" and acc_t.sat_bits == 0
        xmax = in_t.max_abs_raw()
        colsum = np.abs(wmat).sum(axis=0)  # |w| per output (object maths below stays exact)
        linear = fa >= fp and used.max(initial=0) <= 1
        if linear and not modular:
            # saturating accumulators: the order of additions cannot matter if no partial sum can leave the range
            bound = int(np.abs(bias_acc).max(initial=0)) + (int(colsum.max(initial=0)) * xmax << (fa - fp))
            linear = bound <= min(acc_t.raw_max, -acc_t.raw_min)
        if linear:
            matmul = self._exact_matmul(wmat, xmax)
            shift = np.int64(fa - fp)

            def dense_linear(x, matmul=matmul, shift=shift):
                acc = (matmul(x) << shift) + bias_acc
                if modular:
                    acc = acc_t._wrap(acc)
                return out_t.cast(acc, acc_t)

            return dense_linear, out_t, self._dense_f64(wmat, bias_acc, in_t, acc_t, out_t, fa - fp, modular)
        if modular:
            # each product is quantized into accum_t on its own, the sum is modular: group by input
            rows = [(i, wmat[i], used[i] > 0) for i in range(n_in)]

            def dense_per_input(x):
                acc = np.broadcast_to(bias_acc, (x.shape[0], n_out)).copy()
                for i, wrow, mask in rows:
                    prod = acc_t.from_raw(x[:, i : i + 1] * wrow, fp)
                    acc += np.where(mask, prod, 0)
                return out_t.cast(acc_t._wrap(acc), acc_t)

            return dense_per_input, out_t

        # saturating accumulator that may overflow: replay every addition in the C loop order
        wflat = w

        def dense_sequential(x):
            acc = np.broadcast_to(bias_acc, (x.shape[0], n_out)).copy()
            for i, wi, o in trip:
                prod = acc_t.from_raw(x[:, i] * wflat[wi], fp)
                acc[:, o] = acc_t.from_raw(acc[:, o] + prod, fa)
            return out_t.cast(acc, acc_t)

        return dense_sequential, out_t

    def _dense_f64(self, wmat, bias_acc, in_t: FixedType, acc_t: FixedType, out_t: FixedType, shift: int, modular):
        """The linear dense on float64 raws: one BLAS product with the weights pre-scaled to
        accum_t's grid, the bias added in place, then accum_t's wrap and the cast to the
        result type, skipped where the bounds of the sums show they cannot change anything."""
        if not (f64_capable(in_t) and f64_capable(acc_t) and f64_capable(out_t)):
            return None
        wf = wmat.astype(np.float64) * 2.0**shift
        bf = bias_acc.astype(np.float64)
        # bounds of every partial sum (products of in_t's extreme raws), per output
        lo_x, hi_x = float(in_t.raw_min), float(in_t.raw_max)
        hi_p = np.maximum(wf * lo_x, wf * hi_x).sum(axis=0)
        lo_p = np.minimum(wf * lo_x, wf * hi_x).sum(axis=0)
        peak = float(np.abs(wf).sum(axis=0).max(initial=0.0)) * max(-lo_x, hi_x) + float(np.abs(bf).max(initial=0.0))
        if peak * (1 + 1e-9) + 2 >= F64_EXACT:
            return None  # partial sums would not be exact in float64: the int64 path runs
        margin = 1e-9 * peak + 2
        lo, hi = float((lo_p + bf).min(initial=0.0)) - margin, float((hi_p + bf).max(initial=0.0)) + margin
        if modular and not (acc_t.raw_min <= lo and hi <= acc_t.raw_max):
            acc_lo, acc_hi = float(acc_t.raw_min), float(acc_t.raw_max)
        else:
            modular, acc_lo, acc_hi = False, lo, hi
        key = self._layer_key
        n_out = wf.shape[1]

        def dense_f64(x):
            rows = x.shape[0]
            acc = np.matmul(x, wf, out=self._buffer(key, (rows, n_out)))
            # a bias row broadcast over a short inner axis is slow in numpy: add a full-size copy
            acc += self._buffer((key, "bias"), (rows, n_out), fill=bf)
            if modular:
                acc = overflow_f64(acc_t, acc)
            return cast_f64(out_t, acc, acc_t.frac, acc_lo, acc_hi)

        return dense_f64

    @staticmethod
    def _exact_matmul(wmat: np.ndarray, xmax: int) -> Callable[[np.ndarray], np.ndarray]:
        """x_raw @ wmat exactly: float64 BLAS while every partial sum stays below 2**53,
        splitting x into bit slices when it would not; int64 maths as the last resort."""
        colsum = int(np.abs(wmat).sum(axis=0).max(initial=0))
        wf = wmat.astype(np.float64)
        if colsum == 0 or xmax * colsum < 2**53:
            return lambda x: (x.astype(np.float64) @ wf).astype(np.int64)
        slice_bits = (2**53 // colsum).bit_length() - 1  # 2**slice_bits * colsum < 2**53
        if slice_bits >= 8 and int(np.abs(wmat).max(initial=0)) * 4096 < 2**62:
            nslices = -(-(xmax.bit_length() + 1) // slice_bits)
            mask = np.int64((1 << slice_bits) - 1)

            def sliced(x):
                acc = np.zeros((x.shape[0], wmat.shape[1]), np.int64)
                rest = x
                for k in range(nslices):
                    low = rest & mask  # non-negative slice; the last slice carries the sign
                    rest = rest >> np.int64(slice_bits)
                    part = (low.astype(np.float64) @ wf).astype(np.int64)
                    acc += part << np.int64(k * slice_bits)
                acc += (rest.astype(np.float64) @ wf).astype(np.int64) << np.int64(nslices * slice_bits)
                return acc

            return sliced
        return lambda x: x @ wmat

    # ------------------------------------------------------------------ activations
    def _build_relu(self, layer: Layer, in_t: FixedType):
        out_t = self._type(layer.template[1], layer)

        def relu_f64(x):
            np.maximum(x, 0.0, out=x)
            return cast_f64(out_t, x, in_t.frac, 0.0, float(in_t.raw_max))

        return (lambda x: out_t.cast(np.where(x > 0, x, 0), in_t)), out_t, relu_f64

    def _build_linear(self, layer: Layer, in_t: FixedType):
        out_t = self._type(layer.template[1], layer)
        lo, hi = float(in_t.raw_min), float(in_t.raw_max)
        return (lambda x: out_t.cast(x, in_t)), out_t, (lambda x: cast_f64(out_t, x, in_t.frac, lo, hi))

    def _build_leaky_relu(self, layer: Layer, in_t: FixedType):
        param_t = self._type(layer.template[1], layer)
        out_t = self._type(layer.template[2], layer)
        try:
            alpha_value = float(layer.args[1].rstrip("fF"))
        except ValueError:
            raise UnsupportedLayerError(f"{layer.describe()}: cannot read alpha '{layer.args[1]}'") from None
        alpha = int(param_t.from_float(np.array([alpha_value]))[0])
        self._check_width(layer, in_t.width + param_t.width, "alpha * x")
        frac = in_t.frac + param_t.frac

        def leaky(x):
            neg = out_t.from_raw(x * np.int64(alpha), frac)
            return np.where(x > 0, out_t.cast(x, in_t), neg)

        return leaky, out_t

    def _build_normalize(self, layer: Layer, in_t: FixedType):
        out_t = self._type(layer.template[1], layer)
        s_t, b_t = self._cfg_type(layer, "scale_t"), self._cfg_type(layer, "bias_t")
        n_in = const_int(layer, "n_in")
        n_filt_text = layer.config.get("consts", {}).get("n_filt", "-1").strip()
        n_filt = -1 if n_filt_text == "-1" else const_int(layer, "n_filt")
        scale = self._weights(layer, layer.args[2], s_t)
        bias = self._weights(layer, layer.args[3], b_t)
        idx = np.arange(n_in) if n_filt == -1 else np.arange(n_in) % n_filt
        if idx.max(initial=0) >= min(scale.size, bias.size):
            raise UnsupportedLayerError(f"{layer.describe()}: scale/bias arrays shorter than n_in")
        scale, bias = scale[idx], bias[idx]
        fprod = in_t.frac + s_t.frac
        frac = max(fprod, b_t.frac)
        self._check_width(layer, in_t.width + s_t.width + (frac - fprod) + 1, "x * scale + bias")
        self._check_width(layer, b_t.width + (frac - b_t.frac) + 1, "x * scale + bias")
        bias_up = bias << np.int64(frac - b_t.frac)
        sh = np.int64(frac - fprod)
        return (lambda x: out_t.from_raw(((x * scale) << sh) + bias_up, frac)), out_t

    def _lut_activation(self, layer: Layer, in_t: FixedType, table: np.ndarray, table_t: FixedType, span: int):
        """hls4ml's sigmoid/tanh indexing: index = int(x * N / span) + (span/2) * N / span, clamped."""
        out_t = self._type(layer.template[1], layer)
        n = const_int(layer, "table_size")
        scaled = _scaled_trunc(layer, in_t.width, n << max(0, -in_t.frac), span << max(0, in_t.frac))
        offset = (span // 2) * n // span
        values = out_t.cast(table, table_t)

        def lut(x):
            r = _wrap32(scaled(x))
            index = np.clip(_wrap32(r + offset), 0, n - 1)
            return values[index]

        return lut, out_t

    def _build_sigmoid(self, layer: Layer, in_t: FixedType):
        table_t = self._cfg_type(layer, "table_t")
        n = const_int(layer, "table_size")
        ii = np.arange(n, dtype=np.float64)
        in_val = (2 * 8.0 * (ii - float(n) / 2.0) / float(n)).astype(np.float32)
        e = _f32_map("expf", -in_val)
        val = (1.0 / (np.float32(1) + e).astype(np.float64)).astype(np.float32)  # 1.0 / float: double division
        table = table_t.from_float(val.astype(np.float64))
        return self._lut_activation(layer, in_t, table, table_t, 16)

    def _build_tanh(self, layer: Layer, in_t: FixedType):
        table_t = self._cfg_type(layer, "table_t")
        n = const_int(layer, "table_size")
        ii = np.arange(n, dtype=np.float64)
        in_val = (2 * 4.0 * (ii - float(n) / 2.0) / float(n)).astype(np.float32)
        table = table_t.from_float(_f32_map("tanhf", in_val).astype(np.float64))
        return self._lut_activation(layer, in_t, table, table_t, 8)

    # ------------------------------------------------------------------ softmax
    @staticmethod
    def _idx_from_raw(raw: np.ndarray, t: FixedType, n_bits: int) -> np.ndarray:
        """softmax_idx_from_real_val: the top n_bits of the W-bit pattern, as unsigned."""
        pattern = raw & np.int64((1 << t.width) - 1)
        return (pattern >> np.int64(t.width - n_bits)) & np.int64((1 << n_bits) - 1)

    @staticmethod
    def _real_from_idx(t: FixedType, size: int) -> np.ndarray:
        """softmax_real_val_from_idx: (float) of the value whose top bits are the index."""
        n_bits = _ceillog2(size)
        pattern = np.arange(size, dtype=np.int64) << np.int64(t.width - n_bits)
        raw = t._wrap(pattern)
        return t.to_float32(raw)

    def _build_softmax(self, layer: Layer, in_t: FixedType):
        out_t = self._type(layer.template[1], layer)
        consts = layer.config.get("consts", {})
        n = const_int(layer, "n_in")
        if "n_slice" in consts and const_int(layer, "n_slice") != n:
            raise UnsupportedLayerError(f"{layer.describe()}: multi-dimensional softmax is not supported")
        impl = consts.get("implementation", "nnet::softmax_implementation::latency").split("::")[-1]
        if impl == "argmax":
            one = int(out_t.from_raw(np.array([1], np.int64), 0)[0])

            def argmax(x):
                res = np.zeros(x.shape, np.int64)
                res[np.arange(x.shape[0]), np.argmax(x, axis=1)] = one  # first maximum wins, as the strict > loop
                return res

            return argmax, out_t
        if impl == "legacy":
            return self._softmax_legacy(layer, in_t, out_t, n)
        if impl not in ("latency", "stable"):
            raise UnsupportedLayerError(f"{layer.describe()}: softmax implementation '{impl}' is not supported")
        exp_t, inv_t = self._cfg_type(layer, "exp_table_t"), self._cfg_type(layer, "inv_table_t")
        acc_t, inv_inp_t = self._cfg_type(layer, "accum_t"), self._cfg_type(layer, "inv_inp_t")
        n_exp, n_inv = const_int(layer, "exp_table_size"), const_int(layer, "inv_table_size")
        exp_scale = np.float32(float(consts.get("exp_scale", "1.0").rstrip("fF")))
        norm_t = self._cfg_type(layer, "inp_norm_t") if impl == "stable" else in_t
        bits_exp, bits_inv = _ceillog2(n_exp), _ceillog2(n_inv)
        if norm_t.width < bits_exp or inv_inp_t.width < bits_inv:
            raise UnsupportedLayerError(f"{layer.describe()}: softmax table larger than its index type")
        xs = self._real_from_idx(norm_t, n_exp) * exp_scale
        if impl == "stable":
            xs = -xs
        exp_table = acc_t.cast(exp_t.from_float(_f32_map("expf", xs).astype(np.float64)), exp_t)
        with np.errstate(divide="ignore"):
            inv_vals = (np.float32(1) / self._real_from_idx(inv_inp_t, n_inv)).astype(np.float32)
        inv_table = inv_t.from_float(inv_vals.astype(np.float64))
        self._check_width(layer, acc_t.width + inv_t.width, "exp * inverse")
        self._check_width(layer, in_t.width + 1, "x_max - x")
        fres = acc_t.frac + inv_t.frac

        def reduce_add(cols: list[np.ndarray]) -> np.ndarray:
            # nnet::reduce: left part = largest power of two below N, right part = the rest
            if len(cols) == 1:
                return cols[0]
            if len(cols) == 2:
                return acc_t.from_raw(cols[0] + cols[1], acc_t.frac)
            left = 1 << ((len(cols) - 1).bit_length() - 1)
            return acc_t.from_raw(reduce_add(cols[:left]) + reduce_add(cols[left:]), acc_t.frac)

        def softmax(x):
            d = norm_t.cast(x.max(axis=1, keepdims=True) - x, in_t) if impl == "stable" else x
            e = exp_table[self._idx_from_raw(d, norm_t, bits_exp)]
            total = inv_inp_t.cast(reduce_add([e[:, j] for j in range(n)]), acc_t)
            inv = inv_table[self._idx_from_raw(total, inv_inp_t, bits_inv)]
            return out_t.from_raw(e * inv[:, None], fres)

        if not all(f64_capable(t) for t in (in_t, norm_t, acc_t, inv_inp_t, out_t)) or acc_t.width + inv_t.width > 52:
            return softmax, out_t
        exp_f, inv_f = exp_table.astype(np.float64), inv_table.astype(np.float64)
        span = float(in_t.raw_max) - float(in_t.raw_min)

        def index_f64(v: np.ndarray, t: FixedType, n_bits: int) -> np.ndarray:
            # the top n_bits of the W-bit two's complement pattern of v (integers in t's range)
            if t.signed:
                v = np.where(v < 0, v + float(1 << t.width), v)
            return (v * 2.0 ** (n_bits - t.width)).astype(np.intp)  # exact, non-negative: truncation = floor

        def add_f64(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            return cast_f64(acc_t, a + b, acc_t.frac)

        def reduce_f64(cols: list[np.ndarray]) -> np.ndarray:
            if len(cols) == 1:
                return cols[0]
            if len(cols) == 2:
                return add_f64(cols[0], cols[1])
            left = 1 << ((len(cols) - 1).bit_length() - 1)
            return add_f64(reduce_f64(cols[:left]), reduce_f64(cols[left:]))

        def softmax_f64(x):
            d = x
            if impl == "stable":
                d = cast_f64(norm_t, x.max(axis=1, keepdims=True) - x, in_t.frac, 0.0, span)
            e = exp_f[index_f64(d, norm_t, bits_exp)]
            total = cast_f64(inv_inp_t, reduce_f64([e[:, j] for j in range(n)]), acc_t.frac)
            inv = inv_f[index_f64(total, inv_inp_t, bits_inv)]
            e *= inv[:, None]
            return cast_f64(out_t, e, fres)

        return softmax, out_t, softmax_f64

    def _softmax_legacy(self, layer: Layer, in_t: FixedType, out_t: FixedType, n: int):
        table_t = self._cfg_type(layer, "table_t")
        n_exp, n_inv = const_int(layer, "exp_table_size"), const_int(layer, "inv_table_size")
        ii = np.arange(n_exp, dtype=np.float64)
        in_val = (2 * 8.0 * (ii - float(n_exp) / 2.0) / float(n_exp)).astype(np.float32)
        exp_table = table_t.from_float(_f32_map("expf", in_val).astype(np.float64))
        inv_in = (64.0 * np.arange(n_inv, dtype=np.float64) / float(n_inv)).astype(np.float32).astype(np.float64)
        with np.errstate(divide="ignore"):
            inv_vals = np.where(inv_in > 0, 1.0 / inv_in, 0.0)
        inv_table = out_t.cast(table_t.from_float(inv_vals), table_t)
        one = int(table_t.from_raw(np.array([1], np.int64), 0)[0])
        scale_exp = _scaled_trunc(layer, in_t.width + 1, n_exp << max(0, -in_t.frac), 16 << max(0, in_t.frac))
        off = 8 * n_exp // 16
        scale_inv = _scaled_trunc(layer, table_t.width, n_inv << max(0, -table_t.frac), 64 << max(0, table_t.frac))

        def legacy(x):
            res = np.empty(x.shape, np.int64)
            for i in range(n):
                acc = np.zeros(x.shape[0], np.int64)
                for j in range(n):
                    if i == j:
                        diff = np.int64(one)
                    else:
                        r = _wrap32(scale_exp(x[:, j] - x[:, i]))
                        diff = exp_table[np.clip(_wrap32(r + off), 0, n_exp - 1)]
                    acc = table_t.from_raw(acc + diff, table_t.frac)
                k = _wrap32(scale_inv(acc))
                res[:, i] = inv_table[np.clip(k, 0, n_inv - 1)]
            return res

        return legacy, out_t

    # ------------------------------------------------------------------ I/O
    def _accelerator_io(self):
        """Casts of the VivadoAccelerator wrapper: T_in -> input_t and result_t -> T_out."""
        acc = self.project.accelerator
        if acc is None:
            return None, None
        names = {"T_in": acc.input_precision, "T_out": acc.output_precision}
        axi = self.project.firmware_dir / f"{self.project.name}_axi.h"
        if axi.is_file():
            # the wrapper header is what was compiled: its typedefs win over the yaml
            found = {name: t for t, name in re.findall(r"typedef\s+([^;{}]+?)\s+(T_in|T_out)\s*;", axi.read_text())}
            names.update({k: " ".join(v.split()) for k, v in found.items()})
        out = []
        for key in ("T_in", "T_out"):
            text = names[key].strip()
            if text == "float":
                out.append("float")
                continue
            try:
                out.append(FixedType.parse(text))
            except ValueError as e:
                raise ProjectError(f"accelerator {key} precision '{text}': {e}") from None
        return out[0], out[1]

    def predict(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        if x.ndim == 1:
            x = x[None, :]
        x = x.reshape(x.shape[0], -1)
        if x.shape[1] != self.n_in:
            raise ValueError(f"expected {self.n_in} input values per sample, got {x.shape[1]}")
        if self._fops is not None:
            return self._predict_f64(x)
        return self._predict_int64(x)

    def _predict_f64(self, x: np.ndarray) -> np.ndarray:
        if self._io_in is None:
            v = from_float_f64(self.input_type, x)
        elif self._io_in == "float":
            v = from_float_f64(self.input_type, x.astype(np.float32, copy=False))
        else:
            io_in = self._io_in
            v = from_float_f64(io_in, x)
            v = cast_f64(self.input_type, v, io_in.frac, float(io_in.raw_min), float(io_in.raw_max))
        for fop in self._fops or ():
            v = fop(v)
        out_t = self.output_type
        if isinstance(self._io_out, FixedType):
            io_out = self._io_out
            v = cast_f64(io_out, v, out_t.frac, float(out_t.raw_min), float(out_t.raw_max))
            out_t = io_out
        y = v * 2.0**-out_t.frac  # a new array: the chain's buffers are reused by the next call
        if self._io_out == "float":
            y = y.astype(np.float32).astype(np.float64)
        y += 0.0  # -0.0 (floor of a negative fraction) reads as +0.0, as the firmware's zero does
        return y

    def _predict_int64(self, x: np.ndarray) -> np.ndarray:
        if self._io_in is None:
            raw = self.input_type.from_float(x.astype(np.float64))
        elif self._io_in == "float":
            raw = self.input_type.from_float(x.astype(np.float32).astype(np.float64))
        else:
            raw = self.input_type.cast(self._io_in.from_float(x.astype(np.float64)), self._io_in)
        for op in self._ops:
            raw = op(raw)
        if self._io_out is None:
            return self.output_type.to_float(raw)
        if self._io_out == "float":
            return self.output_type.to_float32(raw).astype(np.float64)
        return self._io_out.to_float(self._io_out.cast(raw, self.output_type))
