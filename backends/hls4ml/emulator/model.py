"""The emulated firmware: the chain of layer steps and the two number representations.

``FixedPointModel(project).predict(x)`` computes what the firmware's top function computes
(for a VivadoAccelerator project: the ``myproject_axi`` wrapper, i.e. T_in -> input_t ->
layers -> result_t -> T_out), every cast done with the type's quantization and overflow
modes (see ``fixed_point.py``). The layers run in the order of the top function's calls; an
array may feed several layers (branches, merges), and Reshape/Flatten are aliases.

Two representations of the same integers (the ``ap_fixed`` raws):

* float64 (``_predict_f64``, used whenever every type of the model is at most 52 bits wide):
  exact integers below 2**52, so BLAS products are exact; Dense and convolution windows are
  one matrix product with the weights pre-scaled to ``accum_t``'s grid, casts are a few
  in-place vector operations (floor/rint, clip, and a wrap only where min/max show a value
  left the range), scratch arrays are reused per model and thread;
* int64 (``_predict_int64``): the reference formulation, used for wider types; layers
  without a float64 form run it inside the float64 chain. Types wider than 63 bits (auto-sized
  merges and accumulators) hold their raws as ``Wide`` pairs of int64 limbs (``wide.py``),
  only in the layers that declare they handle them (``_wide_layer``).

A batch is worked through in pieces: of about ``CHUNK_BYTES`` in the widest array (the
caches), and of at most ``working_budget`` bytes of intermediates (``working_set.py``: a large
network's rows take hundreds of MB each).

A layer kind the registry does not know raises ``UnsupportedLayerError`` when the model is
built (never in ``predict``), naming the layer.
"""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Callable
from typing import ClassVar

import numpy as np

from ..firmware_graph import FirmwareGraph, Layer, UnsupportedLayerError, read_firmware_graph
from ..fixed_point import INT64_WIDTH, MAX_WIDTH, FixedType, cast_f64, f64_capable, from_float_f64
from ..project import Hls4mlProject, ProjectError
from .registry import FUSIONS, builder_for
from .working_set import DEFAULT_BUDGET_BYTES, WorkingSet, measure

Op = Callable[[np.ndarray], np.ndarray]

#: the float64 chain runs a large batch in chunks whose widest array holds about this many
#: bytes, so that each layer's arrays stay in the caches between layers: calo_cnn (widest
#: array 784 values, 6 KiB a row) at 1024 rows, whole batch / chunks of 512 / 256 / 128 / 64
#: rows: 6.5 / 5.5 / 4.5 / 4.7 / 5.4 ms. A narrow model (FACILE, 47 values a row) gets
#: chunks of thousands of rows, where the per-layer call overhead of a chunk stays small.
CHUNK_BYTES = 1536 << 10
CHUNK_MIN_ROWS = 64


class FixedPointModel:
    """The firmware of an hls4ml project (io_parallel or io_stream) as a chain of vectorised ops, one per
    ``nnet::`` call, each made by the builder its layer family registered (``registry.py``)."""

    def __init__(self, project: Hls4mlProject, working_budget: int = DEFAULT_BUDGET_BYTES):
        self.project = project
        self.graph: FirmwareGraph = read_firmware_graph(project)
        # one step per nnet:: call: (arrays read, array written, int64 op, float64 op)
        self._steps: list[tuple[list[str], str, Op, Op | None]] = []
        self._ws = threading.local()  # per-thread preallocated buffers, see _buffer
        self._widest: int | None = None  # values in the widest array one row makes, see _chunk_rows
        self._scratch_bytes = 0  # bytes _buffer allocated (run_fresh reports them)
        #: bytes of intermediates a piece of a batch may take (see working_set.py)
        self.working_budget = working_budget
        self._working: WorkingSet | None = None
        self._working_lock = threading.Lock()
        in_type = self.type_of(project.input.ctype, None)
        if in_type.width > 53:
            raise UnsupportedLayerError(f"input type {in_type}: conversion from double beyond 53 bits is not emulated")
        self.input_type = in_type
        types: dict[str, FixedType] = {project.input.name: in_type}
        self._step_f64: list[bool] = []
        self._out_f64: list[bool] = []
        step_types: list[tuple[FixedType, FixedType]] = []
        for index, layer in enumerate(self.graph.layers):
            builder = builder_for(layer.kind, layer.stream)
            if builder is None:
                raise UnsupportedLayerError(
                    f"{layer.describe()}: nnet::{layer.kind} is not supported by the numpy emulator"
                )
            in_types = [types[name] for name in layer.inputs]
            for k, actual in enumerate(in_types):
                declared = self.type_of(layer.template[k], layer)
                if declared != actual:
                    raise UnsupportedLayerError(
                        f"{layer.describe()}: input type {declared} differs from the type of "
                        f"'{layer.inputs[k]}' ({actual})"
                    )
            self.layer_key = index
            self.in_types = in_types
            self._wide_ok = False
            built = builder(self, layer, in_types[0])
            op, out_t = built[0], built[1]
            fop = built[2] if len(built) > 2 else None
            if not self._wide_ok and any(t.wide for t in (*in_types, out_t)):
                raise UnsupportedLayerError(
                    f"{layer.describe()}: types wider than {INT64_WIDTH} bits "
                    f"({', '.join(str(t) for t in (*in_types, out_t) if t.wide)}) are not emulated "
                    f"for nnet::{layer.kind}"
                )
            types[layer.output] = out_t
            self._steps.append((layer.inputs, layer.output, op, fop))
            # the float64 op runs where every type of the layer fits; elsewhere the int64 op
            self._step_f64.append(all(f64_capable(t) for t in (*in_types, out_t)))
            self._out_f64.append(f64_capable(out_t))
            step_types.append((in_types[0], out_t))
        self._fuse(step_types)
        self.output_type = types[self.graph.layers[-1].output]
        self.n_in = project.input.size
        self.n_out = project.output.size
        self._io_in, self._io_out = self._accelerator_io()
        # the float64 chain serves any model whose input fits: arrays of wider types stay int64
        # (or Wide) inside it, read and written by their layers' int64 ops
        f64 = f64_capable(in_type) and all(
            f64_capable(t) for t in (self._io_in, self._io_out) if isinstance(t, FixedType)
        )
        self._f64 = f64
        # an array read again later is handed to other layers as a copy (float64 ops work in place)
        self._keep: list[list[bool]] = []
        for i, (ins, _out, _op, _fop) in enumerate(self._steps):
            later = {name for step in self._steps[i + 1 :] for name in step[0]}
            self._keep.append([name in later or ins.count(name) > 1 for name in ins])

    def _fuse(self, step_types: list[tuple[FixedType, FixedType]]) -> None:
        """The registered fusions (``registry.register_fusion``) of the float64 chain: where
        step i's output is read by step i + 1 alone, and both run their float64 ops, the
        fusion's op (if it returns one) replaces step i + 1's, reading step i's input, and
        step i passes its input through. The int64 ops stay as they are."""
        layers = self.graph.layers
        for i in range(len(self._steps) - 1):
            fusion = FUSIONS.get((layers[i].kind, layers[i + 1].kind))
            a, b = self._steps[i], self._steps[i + 1]
            if fusion is None or a[3] is None or b[3] is None or not (self._step_f64[i] and self._step_f64[i + 1]):
                continue
            readers = [k for k, step in enumerate(self._steps) if a[1] in step[0]]
            if len(a[0]) != 1 or b[0] != [a[1]] or readers != [i + 1]:
                continue
            self.layer_key = i + 1  # the fused op's scratch buffers are the second layer's
            fused = fusion(self, layers[i], layers[i + 1], step_types[i][0], step_types[i][1], a[3], b[3])
            if fused is not None:
                self._steps[i] = (a[0], a[1], a[2], _pass_through)
                self._steps[i + 1] = (b[0], b[1], b[2], fused)

    def _chunk_rows(self, x: np.ndarray) -> int:
        """Rows per chunk of the float64 chain (``CHUNK_BYTES``), from the widest array one
        row makes (measured with the working set, ``working_set()``)."""
        self.working_set()
        assert self._widest is not None
        return max(CHUNK_MIN_ROWS, CHUNK_BYTES // (8 * self._widest))

    def piece_rows(self, max_rows: int) -> int:
        """The most rows ``predict`` works through at once in batches of up to ``max_rows``."""
        rows = min(max(1, max_rows), self.working_set().rows)
        if self._f64 and rows > CHUNK_MIN_ROWS * 3 // 2:
            assert self._widest is not None
            chunk = max(CHUNK_MIN_ROWS, CHUNK_BYTES // (8 * self._widest))
            rows = min(rows, max(CHUNK_MIN_ROWS * 3 // 2, chunk * 3 // 2))
        return rows

    def working_set(self) -> WorkingSet:
        """What one piece of a batch takes and how many rows it has (``working_set.py``),
        measured once (the serving backend asks at load; else the first ``predict`` does)."""
        with self._working_lock:
            working = self._working
            if working is None or working.budget != self.working_budget:
                if working is None:
                    working = measure(self, self.working_budget)
                else:  # the budget changed: the same row, other pieces
                    per_row = working.row_bytes + working.scratch_row_bytes
                    working = WorkingSet(
                        working.row_bytes,
                        working.scratch_row_bytes,
                        max(1, self.working_budget // per_row),
                        self.working_budget,
                    )
                self._working = working
            return working

    def run_fresh(self, row: np.ndarray) -> int:
        """Run ``row`` (float64) from a fresh set of scratch buffers, dropped after (their
        allocation is part of what a row takes): the bytes of scratch it allocated. Records the
        widest array it made, for the cache-sized pieces. ``working_set.measure`` runs it under
        ``tracemalloc``."""
        kept, self._ws = self._ws, threading.local()
        self._scratch_bytes = 0
        widest: list[int] = [self.n_in]
        try:
            self._predict_piece(row, np.float64, widest)
        finally:
            self._ws = kept
        self._widest = max(widest)
        return self._scratch_bytes

    def _run(self, v: np.ndarray, use_f64: bool, widest: list[int] | None = None) -> np.ndarray:
        env = {self.project.input.name: v}
        for (ins, out, op, fop), keep, step_f64, out_f64 in zip(self._steps, self._keep, self._step_f64, self._out_f64):
            args = [env[name].copy() if k else env[name] for name, k in zip(ins, keep)]
            if not use_f64:
                env[out] = op(*args)
            elif fop is not None and step_f64:
                env[out] = fop(*args)
            else:  # the int64 op on the same integers; arrays of wider types are int64/Wide already
                res = op(
                    *(a.astype(np.int64) if isinstance(a, np.ndarray) and a.dtype == np.float64 else a for a in args)
                )
                env[out] = res.astype(np.float64) if out_f64 else res
            if widest is not None:
                widest.append(int(np.prod(env[out].shape[1:])))
            for name, k in zip(ins, keep):
                if not k:
                    env.pop(name, None)
        return env[self._steps[-1][1]]

    def scratch(self, key, shape: tuple[int, ...], fill: np.ndarray | None = None) -> np.ndarray:
        """A float64 array owned by this model and thread, reused across calls of the same
        batch size: scratch space, or (``fill``) a constant broadcast to ``shape`` once."""
        bufs = getattr(self._ws, "bufs", None)
        if bufs is None:
            bufs = self._ws.bufs = {}
        # two shapes per key: a batch cut into chunks (``predict``) has two chunk sizes
        shapes: dict[tuple[int, ...], np.ndarray] | None = bufs.get(key)
        if shapes is None:
            shapes = bufs[key] = {}
        buf = shapes.get(shape)
        if buf is None:
            if len(shapes) >= 2:
                del shapes[next(iter(shapes))]  # the oldest
            buf = shapes[shape] = np.empty(shape, np.float64)
            self._scratch_bytes += buf.nbytes
            if fill is not None:
                buf[...] = fill
        return buf

    # ------------------------------------------------------------------ types
    def type_of(self, name: str, layer: Layer | None) -> FixedType:
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

    def config_type(self, layer: Layer, key: str) -> FixedType:
        inherited = self._BASE_TYPES.get((layer.config.get("base", ""), key))
        if key not in layer.config.get("types", {}) and inherited is not None:
            return FixedType.parse(inherited)
        if key not in layer.config.get("types", {}):
            raise UnsupportedLayerError(f"{layer.describe()}: {layer.config_name} defines no {key}")
        return self.type_of(key, layer)

    def sub_config(self, layer: Layer, key: str) -> tuple[str, dict]:
        """The config struct a layer's config names as ``typedef <struct> <key>;`` (a conv's
        mult_config, an einsum's dense_conf, a recurrent layer's gate configs): its name and
        parsed contents; refused when parameters.h has no such struct."""
        name = layer.config.get("types", {}).get(key, "")
        config = self.graph.configs.get(name)
        if config is None:
            raise UnsupportedLayerError(
                f"{layer.describe()}: {layer.config_name}::{key} '{name}' names no struct of parameters.h"
            )
        return name, config

    @staticmethod
    def literal_arg(layer: Layer, index: int, what: str) -> float:
        """A float literal the top function passes to the layer (leaky_relu's alpha,
        thresholded_relu's theta, ...), its C suffix dropped; refused when it is not one."""
        try:
            return float(layer.args[index].rstrip("fF"))
        except (IndexError, ValueError):
            text = layer.args[index] if index < len(layer.args) else ""
            raise UnsupportedLayerError(f"{layer.describe()}: cannot read {what} '{text}'") from None

    def weight_raws(self, layer: Layer, arg: str, t: FixedType) -> np.ndarray:
        """The raws of a weight array as ``load_weights_from_txt`` fills it: ap_fixed reads
        each text as a double and converts it; ap_int reads it as an integer text."""
        if t.integer_type:
            return _int_weights(layer, self.graph.weight_tokens(layer, arg), t)
        values = self.graph.weight_array(layer, arg)
        try:
            return t.from_float(values)
        except ValueError as e:
            raise UnsupportedLayerError(f"{layer.describe()}: weights '{arg}': {e}") from None

    @staticmethod
    def check_width(layer: Layer, bits: int, what: str, wide: bool = False) -> None:
        """Refuse an intermediate of ``bits`` bits: beyond 62 for int64 maths, beyond
        ``MAX_WIDTH`` for the Wide maths of builders that have them (``wide``)."""
        limit = MAX_WIDTH if wide else 62
        if bits > limit:
            raise UnsupportedLayerError(
                f"{layer.describe()}: {what} needs {bits} bits, beyond the emulator's "
                + (f"{limit}-bit wide raws" if wide else "int64 raws")
            )

    def allow_wide(self) -> None:
        """Called by a builder whose ops take and give Wide raws (``wide.py``) wherever its
        input or output types are wider than 63 bits; any other builder meeting such a type
        is refused when the model is built."""
        self._wide_ok = True

    # ------------------------------------------------------------------ I/O
    def _accelerator_io(self):
        """The conversions at the firmware's boundary (``Hls4mlProject.host_io``): for a
        VivadoAccelerator project the ``<name>_axi`` wrapper's T_in -> input_t and result_t -> T_out,
        "float" where a float32 crosses (the kernel casts), None where input_t/result_t cross."""
        io = self.project.host_io
        out = []
        for key, text in (("input", io.input), ("output", io.output)):
            if text is None or text.strip() == "float":
                out.append(text)
                continue
            try:
                out.append(FixedType.parse(text.strip()))
            except ValueError as e:
                raise ProjectError(f"accelerator {key} precision '{text}': {e}") from None
        return out[0], out[1]

    def predict(self, x: np.ndarray, dtype: type = np.float64) -> np.ndarray:
        """The firmware's output values for the rows of ``x``, a new array of ``dtype``.

        float64 (the default) holds every output exactly (a float output, the ``float`` the
        accelerator wrapper returns, as its float64 value); float32 rounds each value once to
        nearest, as ``predict(x).astype(np.float32)`` does, but writes the float32 array
        directly (the serving backend's FP32 tensor) instead of converting a float64 result."""
        x = np.asarray(x)
        if x.ndim == 1:
            x = x[None, :]
        per_row = int(np.prod(x.shape[1:], dtype=np.int64))
        if per_row != self.n_in:
            raise ValueError(f"expected {self.n_in} input values per sample, got {per_row}")
        x = x.reshape(x.shape[0], self.n_in)  # -1 would not do for 0 rows
        if x.shape[0] == 0:
            return np.zeros((0, self.n_out), dtype)
        rows = x.shape[0]
        # pieces: at most working_set().rows rows (memory), and for the float64 chain near
        # CHUNK_BYTES in the widest array (caches): near-equal, so at most two sizes (the
        # scratch buffers are reused)
        n_pieces = -(-rows // self.working_set().rows)
        if self._f64 and rows > CHUNK_MIN_ROWS * 3 // 2:
            chunk = self._chunk_rows(x)
            if rows > chunk * 3 // 2:
                n_pieces = max(n_pieces, -(-rows // chunk))
        if n_pieces == 1:
            return self._predict_piece(x, dtype)
        bounds = np.linspace(0, rows, n_pieces + 1).round().astype(np.int64)
        out: np.ndarray = np.empty((rows, self.n_out), dtype)
        for a, b in itertools.pairwise(bounds):
            out[a:b] = self._predict_piece(x[a:b], dtype)
        return out

    def _predict_piece(self, x: np.ndarray, dtype: type, widest: list[int] | None = None) -> np.ndarray:
        """Rows of ``x`` in one go, on the float64 chain where the model has it; ``widest``
        collects the size of every array the float64 chain makes (working_set.measure)."""
        if not self._f64:
            return self._predict_int64(x).astype(dtype, copy=False)
        return self._predict_f64(x, dtype, widest)

    def _predict_f64(self, x: np.ndarray, dtype: type = np.float64, widest: list[int] | None = None) -> np.ndarray:
        if self._io_in is None:
            v = from_float_f64(self.input_type, x)
        elif self._io_in == "float":
            v = from_float_f64(self.input_type, x.astype(np.float32, copy=False))
        else:
            io_in = self._io_in
            v = from_float_f64(io_in, x)
            v = cast_f64(self.input_type, v, io_in.frac, float(io_in.raw_min), float(io_in.raw_max))
        v = self._run(v, True, widest)
        out_t = self.output_type
        if not f64_capable(out_t):
            return self._output_int64(v).astype(dtype, copy=False)
        if isinstance(self._io_out, FixedType):
            io_out = self._io_out
            v = cast_f64(io_out, v, out_t.frac, float(out_t.raw_min), float(out_t.raw_max))
            out_t = io_out
        # a new array (the chain's buffers are reused by the next call), written in the
        # caller's dtype: v * 2**-frac is exact in float64 and numpy rounds it once on the way
        # into a float32 array, the rounding of the firmware's float output and of astype
        y = np.multiply(v, 2.0**-out_t.frac, out=np.empty(v.shape, dtype))
        if self._io_out == "float" and y.dtype != np.float32:
            y = y.astype(np.float32).astype(y.dtype)
        y += 0.0  # -0.0 (floor of a negative fraction) reads as +0.0, as the firmware's zero does
        return y

    def _predict_int64(self, x: np.ndarray) -> np.ndarray:
        if self._io_in is None:
            raw = self.input_type.from_float(x.astype(np.float64))
        elif self._io_in == "float":
            raw = self.input_type.from_float(x.astype(np.float32).astype(np.float64))
        else:
            raw = self.input_type.cast(self._io_in.from_float(x.astype(np.float64)), self._io_in)
        return self._output_int64(self._run(raw, False))

    def _output_int64(self, raw) -> np.ndarray:
        """result_t raws (int64 or Wide) -> the firmware's output values."""
        if self._io_out is None:
            return self.output_type.to_float(raw)
        if self._io_out == "float":
            return self.output_type.to_float32(raw).astype(np.float64)
        return self._io_out.to_float(self._io_out.cast(raw, self.output_type))


def _pass_through(x: np.ndarray) -> np.ndarray:
    """The float64 op of a step whose work a fusion moved into the next step."""
    return x


_INT_TEXT = re.compile(r"(-?)(\d+)")


def _int_weights(layer: Layer, tokens: list[str], t: FixedType) -> np.ndarray:
    """``std::istringstream(token) >> w`` for an ap_int/ap_uint ``w``: its ``operator>>`` reads
    a string and builds ``ap_int_base(str, radix 0)``, i.e. ``fromString``: a leading '-' is
    taken off, the decimal digits are read by ``sscanf("%lu")``, the 64-bit value negated for
    '-', and the low W bits kept (sign-extended for ap_int). So "-1" in an ap_uint<1> is 1 and
    300 in an ap_int<8> is 44: hls4ml writes integer types' weights as ``{:.0f}`` (Python's
    round-half-even) without checking their range, and the firmware wraps them."""
    raws = []
    for token in tokens:
        m = _INT_TEXT.fullmatch(token)
        if m is None or int(m.group(2)) >= 2**63:
            raise UnsupportedLayerError(
                f"{layer.describe()}: weight text '{token}' for {t} is not a decimal integer the emulator reads"
            )
        value = int(m.group(2))
        raws.append(-value if m.group(1) else value)
    return t.wrap(np.array(raws, dtype=np.int64))
