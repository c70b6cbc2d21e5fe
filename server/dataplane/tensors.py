"""Protocol-free request handling shared by every frontend: the wire-neutral request
(``WireRequest``) and the request types it carries (``RequestedOutput``, ``ShmTarget``,
``EncodedOutput``: the engine's, which frontends take from here), the core half of
validation (``normalize``), the one place a client's request becomes the engine's
(``engine_request``), BYTES (de)serialization, and output preparation (``encode_outputs``).

A frontend collects a request from its own format (protobuf, JSON, binary extension) into a
``WireRequest``: its inputs as ``WireInput``s (datatype, shape and the data as sent), and the
parts every protocol shares, checked in the frontend's order. The data plane behind the seam
(``DataPlaneAPI.infer``) then calls ``normalize``, which checks the inputs against the model
exactly as Triton's core does (the order in which errors are found and their texts, see
triton-protocol.md) and builds numpy views on the bytes. Frontends never normalize.

Zero-copy: raw inputs become ``np.frombuffer`` views on the request's bytes (read once);
outputs are serialized once with ``tobytes`` (protobuf ``bytes`` fields reject memoryviews).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .. import datatypes
from ..engine.request import EncodedOutput, InferenceRequest, RequestedOutput, ShmTarget
from ..errors import InferenceError, format_shape, invalid_argument, unexpected_shape
from ..model_config import TensorSpec

if TYPE_CHECKING:
    from ..engine.model_version import ModelVersion

_U32 = struct.Struct("<I")

ALLOWED_TRITON_PARAMETERS = ("triton_enable_empty_final_response",)
#: parameter names Triton keeps for its own use, which a forwarded header may not take (and
#: every name that starts with "triton_"): kReservedParameterKeys of Triton 26.05 (server
#: r26.05, src/common.h)
RESERVED_PARAMETER_KEYS = (
    "sequence_id",
    "sequence_start",
    "sequence_end",
    "priority",
    "timeout",
    "headers",
    "binary_data_output",
)
RESERVED_PARAMETER_ERROR = (
    "parameter keys starting with 'triton_' are reserved for Triton usage. Only the "
    "following keys starting with 'triton_' are allowed: " + " ".join(ALLOWED_TRITON_PARAMETERS)
)


class TypedValues(Protocol):
    """An input sent as explicit typed values (gRPC ``contents``, JSON ``data``); converted
    only once the datatype is validated."""

    def as_array(self, dt: datatypes.DataType) -> np.ndarray: ...


@dataclass
class WireInput:
    """One input as the client sent it, not yet checked against the model."""

    datatype: str
    shape: list[int]
    data: Any  # bytes | memoryview (raw), TypedValues, or ShmTarget


@dataclass(slots=True, eq=False)
class WireRequest:
    """An inference request as a frontend collected it: what every wire format carries, with
    the frontend's own checks done (parameter types, duplicate inputs and outputs, data
    presence, shared-memory locations) and the inputs not yet validated against the model.

    It is what crosses the seam (``DataPlaneAPI.infer``), in or out of the engine's process;
    the data plane normalizes it exactly once. The one object a request costs the frontend
    beyond its wire message: the engine's ``InferenceRequest`` is built from it, after
    normalizing, only where the request executes.
    """

    model: ModelVersion  # the snapshot the request was collected (and is normalized) against
    id: str
    inputs: dict[str, WireInput]  # in the order they were sent (Triton's texts depend on it)
    outputs: list[RequestedOutput]  # the model's outputs in its order when none were named
    parameters: dict[str, Any]  # Triton's and custom ones, passed on to the model
    priority: int = 0
    timeout_us: int = 0
    # decoupled models: called from the instance thread with each response as it comes (an
    # InferenceError for an error response the stream goes on after)
    emit: Callable[[list[EncodedOutput] | InferenceError], object] | None = None
    # the client's W3C trace context (gRPC metadata / HTTP header), collected only while
    # tracing is on (``DataPlaneAPI.tracing_active``)
    traceparent: str = ""


def forward_headers(headers, parameters: dict[str, Any]) -> None:
    """The request headers a frontend selected by its ``--grpc-header-forward-pattern`` /
    ``--http-header-forward-pattern`` (name, value; in the order received) become string
    parameters of the request, as in Triton (a model reads them in ``request.parameters()``).
    Since Triton 26.05 a header named like a reserved key fails the request with INVALID_ARG
    and Triton's text (server r26.05: ``ForwardHeadersAsParameters`` in
    src/grpc/infer_handler.h, ``ForEachHeader`` in src/http_server.cc): it would otherwise set
    a sequence flag, a priority or a timeout from a header a proxy added."""
    for key, value in headers:
        if key in RESERVED_PARAMETER_KEYS or key.startswith("triton_"):
            raise invalid_argument(f"Header '{key}' is reserved for Triton usage and cannot be forwarded.")
        parameters[key] = value


def engine_request(
    model,
    inputs: dict[str, np.ndarray],
    outputs: list[RequestedOutput],
    batch_size: int,
    request_id: str,
    parameters: dict[str, Any],
    priority: int,
    timeout_us: int,
    encode: Callable,
    *,
    emit: Callable | None = None,
    tracer=None,
    traceparent: str = "",
    future=None,
    tag=None,
    caller=None,
) -> InferenceRequest:
    """The engine's ``InferenceRequest`` for a client's request, normalized where it arrived:
    the one place a client's request enters the engine (``DataPlane.infer``, a BLS request,
    a frontend process's request at the engine's IPC server). ``encode`` prepares its outputs
    (see ``InferenceRequest.encode``); ``emit`` takes a decoupled model's responses; with an
    active ``tracer`` the request is traced (the client's ``traceparent``); ``future``/``tag``:
    a submitter's own answer object and handle (the IPC server's); ``caller``: the BLS call
    that makes the request (``bls.Call``).

    The arrival time is now: the request enters the server's statistics (success and queue
    time) here, as in Triton, where decoding the wire message is frontend time outside
    ModelStatistics (reading a raw input copies it out of the message, up to ~1 ms for a
    16k-row FACILE batch, which would otherwise be reported as queue time on an idle server)."""
    # Positional, in InferenceRequest's field order: keyword arguments cost ~0.25 µs more per
    # request (measured), as much as the WireRequest itself.
    request = InferenceRequest(
        model, inputs, outputs, batch_size, request_id, parameters, priority, timeout_us, time.monotonic_ns(), future
    )
    request.encode = encode
    if emit is not None:
        request.emit = emit
    if tag is not None:
        request.tag = tag
    if caller is not None:
        request.caller = caller
    if tracer is not None and tracer.active:
        request.trace = tracer.start(model.name, traceparent)
    return request


def all_outputs(model) -> list[RequestedOutput]:
    """What a request that names no outputs gets: every output of the model, in its order."""
    return [RequestedOutput(spec) for spec in model.outputs.values()]


def id_prefix(request_id: str) -> str:
    """Triton core prefixes request-validation errors with the request id."""
    return f"[request id: {request_id or '<id_unknown>'}] "


# ----------------------------------------------------------------------------- BYTES


def deserialize_bytes(buf, count: int, name: str, model: str, prefix: str = "") -> np.ndarray:
    """Length-prefixed BYTES (4-byte little-endian length + data per element) -> object array.

    ``count`` comes from the client's declared shape, so nothing proportional to it is
    allocated before the bytes present are known to hold that many elements (each element
    takes at least its 4-byte length); the parse loop never runs past ``count + 1`` elements.
    """
    mv = memoryview(buf).cast("B")
    n = mv.nbytes
    # Fast path: every element has the same length (fixed-width ids, tokens, identity tests).
    # Then the buffer is a [count, 4+L] matrix and numpy can check and slice it in C.
    if 0 < count <= n // 4:
        first = _U32.unpack_from(mv, 0)[0]
        if count * (4 + first) == n:
            rows = np.frombuffer(mv, dtype=np.uint8).reshape(count, 4 + first)
            lengths = rows[:, :4].copy().view("<u4").ravel()
            # numpy's S dtype drops trailing NULs when converting to bytes, so only take
            # this path when no element ends in NUL.
            if np.all(lengths == first) and (first == 0 or not np.any(rows[:, -1] == 0)):
                out = np.empty(count, dtype=object)
                if first == 0:
                    out[:] = [b""] * count
                else:
                    data = np.ascontiguousarray(rows[:, 4:]).view(f"S{first}").ravel()
                    out[:] = data.astype(object)
                return out
    # General path: the elements are collected in a list (which grows with the bytes present,
    # never with the declared count) and copied into the array once the count is confirmed.
    items: list[bytes] = []
    offset = 0
    parsed = 0
    unpack = _U32.unpack_from
    while offset < n:
        if offset + 4 > n:
            raise invalid_argument(
                f"incomplete string length for inference input '{name}', expecting 4 bytes "
                f"but only {n - offset} bytes available"
            )
        length = unpack(mv, offset)[0]
        offset += 4
        if offset + length > n:
            raise invalid_argument(
                f"incomplete string data for inference input '{name}', expecting string of "
                f"length {length} but only {n - offset} bytes available"
            )
        if parsed >= count:
            raise invalid_argument(
                f"{prefix}unexpected number of string elements {parsed + 1} for inference input "
                f"'{name}' for model '{model}', expecting {count}"
            )
        items.append(mv[offset : offset + length].tobytes())
        offset += length
        parsed += 1
    if parsed != count:
        raise invalid_argument(
            f"{prefix}expected {count} string elements for inference input '{name}' for model '{model}', got {parsed}"
        )
    out = np.empty(count, dtype=object)
    out[:] = items
    return out


def _as_bytes(x) -> bytes:
    if isinstance(x, bytes):
        return x
    if isinstance(x, str):
        return x.encode("utf-8")
    if isinstance(x, (bytearray, memoryview, np.bytes_)):
        return bytes(x)
    return str(x).encode("utf-8")


def serialize_bytes(array: np.ndarray) -> bytes:
    flat = array.reshape(-1)
    if flat.size == 0:
        return b""
    items = [_as_bytes(x) for x in flat.tolist()]
    lengths = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
    first = int(lengths[0])
    if first > 0 and np.all(lengths == first):
        rows = np.empty((len(items), 4 + first), dtype=np.uint8)
        rows[:, :4] = np.array([first], dtype="<u4").view(np.uint8)
        rows[:, 4:] = np.array(items, dtype=f"S{first}").view(np.uint8).reshape(len(items), first)
        return rows.tobytes()
    return b"".join(_U32.pack(len(x)) + x for x in items)


# ----------------------------------------------------------------------------- decode


_INT64_MAX = 2**63 - 1
SPARE_INPUTS = 64  # extra inputs still walked one by one, so small mistakes get Triton's exact texts


def _check_element_count(shape, dt: datatypes.DataType, in_name: str, model: str, prefix: str) -> None:
    """A shape whose element count (times the element size) does not fit in int64 is refused
    by name, before numpy (or a backend) would fail on it with an exception of its own."""
    size = max(dt.itemsize, 8)  # BYTES elements are 8-byte object pointers
    for d in shape:
        if d > 0:
            size *= d
            if size > _INT64_MAX:
                raise invalid_argument(
                    f"{prefix}input '{in_name}' for model '{model}' has shape {format_shape(shape)}, "
                    "whose element count does not fit in 64 bits"
                )


def normalize(request: WireRequest, shm) -> tuple[dict[str, np.ndarray], int]:
    """The core half of request validation, whatever the wire: counts, names, batch size,
    then per input datatype, shape, batch dim and byte size; Triton's order and texts
    (triton-protocol.md). Returns the inputs as numpy views (shared-memory ones read through
    ``shm``), in Triton core's order, and the batch size (1 for a model without batching).

    Called by the data plane that executes or forwards the request, never by a frontend, so
    each request is validated exactly once.
    """
    model = request.model
    received = request.inputs
    name = model.name
    prefix = id_prefix(request.id)
    # --- input count, unknown inputs. Triton's core keeps inputs in a hash map whose
    # iteration order is the reverse of insertion, which shows in its texts; we match it.
    order = list(reversed(received))
    # Triton only compares counts, so a request with an optional input in place of a required
    # one reaches the backend; we reject it here, with the same text
    if (
        len(received) > len(model.inputs)
        or len(received) < model.required_input_count
        or (
            model.required_input_count < len(model.inputs)
            and any(not s.optional and n not in received for n, s in model.inputs.items())
        )
    ):
        got = "[" + ",".join(f"'{n}'" for n in order) + "]"
        missing = [f"'{n}'" for n, s in model.inputs.items() if not s.optional and n not in received]
        # (sic) Triton drops the opening bracket of an empty missing list
        missing_text = "[" + ",".join(missing) + "]" if missing else "]"
        if len(model.inputs) == model.required_input_count:
            expected = f"expected {len(model.inputs)} inputs"
        else:  # the model has optional inputs
            expected = f"expected number of inputs between {model.required_input_count} and {len(model.inputs)}"
        raise invalid_argument(
            f"{prefix}{expected} but got {len(received)} inputs for model "
            f"'{name}'. Got input(s) {got}, but missing required input(s) {missing_text}. "
            f"Please provide all required input(s)."
        )
    # --- unknown inputs and batch size, one pass in core order (core Normalize): the first
    # input with a non-zero dim 0 sets the batch, a later one that differs is named. Dim 0
    # is unsigned in the core, so a -1 there never matches another input.
    max_batch = model.max_batch_size
    batch = 0
    for in_name in order:
        if in_name not in model.inputs:
            raise invalid_argument(f"unexpected inference input '{in_name}' for model '{name}'")
        if max_batch <= 0 or model.inputs[in_name].is_shape_tensor:
            continue
        shape = received[in_name].shape
        if not shape:
            raise invalid_argument(
                f"{prefix}input '{in_name}' has no shape but model requires batch dimension for '{name}'"
            )
        if batch == 0:
            batch = shape[0]
        elif shape[0] != batch or batch < 0:
            raise invalid_argument(f"{prefix}input '{in_name}' batch size does not match other inputs for '{name}'")
    batch_size = 1
    if max_batch > 0:
        if not received:
            # a batching model that declares no inputs (tritonserver loads such a config) and a
            # request with none: core finds no input to read the batch size from
            raise invalid_argument(f"{prefix}out of bounds index 0: request has 0 inputs")
        if batch > max_batch:
            raise invalid_argument(f"{prefix}inference request batch-size must be <= {max_batch} for '{name}'")
        batch_size = batch

    # --- per input, in core order: datatype, shape, batch dim, size; then the numpy view
    arrays: dict[str, np.ndarray] = {}
    for in_name in order:
        wire = received[in_name]
        datatype, shape, data = wire.datatype, wire.shape, wire.data
        spec: TensorSpec = model.inputs[in_name]
        dt = spec.datatype
        if datatype != dt.wire:
            shown = datatype if datatype in datatypes.BY_WIRE else "<invalid>"
            raise invalid_argument(
                f"{prefix}inference input '{in_name}' data-type is '{shown}', but model '{name}' expects '{dt.wire}'"
            )
        dims = shape[1:] if max_batch > 0 else shape
        matches = len(dims) == len(spec.dims)
        if matches:
            for c, d in zip(spec.dims, dims):
                if d < 0:
                    raise invalid_argument(
                        f"{prefix}All input dimensions should be specified for input '{in_name}' for "
                        f"model '{name}', got {format_shape(shape)}"
                    )
                if c not in (-1, d):
                    matches = False
                    break
        if not matches:
            expected_shape = ([-1] if max_batch > 0 else []) + list(spec.dims)
            raise unexpected_shape(prefix, in_name, name, expected_shape, shape, max_batch > 0)
        if max_batch > 0 and batch_size < 0:
            # a single input with dim 0 = -1 (Triton overflows here; we name the problem)
            raise invalid_argument(
                f"{prefix}All input dimensions should be specified for input '{in_name}' for model "
                f"'{name}', got {format_shape(shape)}"
            )
        _check_element_count(shape, dt, in_name, name, prefix)
        # Triton sizes a batch-0 request as if it had no batch dimension
        count = 1
        for d in dims if max_batch > 0 and batch_size == 0 else shape:
            count *= d
        if isinstance(data, ShmTarget):
            if dt.wire != "BYTES" and data.byte_size != count * dt.itemsize:
                raise invalid_argument(
                    f"{prefix}input byte size mismatch for input '{in_name}' for model '{name}'. "
                    f"Expected {count * dt.itemsize}, got {data.byte_size}"
                )
            data = shm.read(*data)
        if dt.wire == "BYTES":
            if isinstance(data, (bytes, memoryview)):
                array = deserialize_bytes(data, count, in_name, name, prefix)
            else:
                array = data.as_array(dt)
                if array.size < count:
                    raise invalid_argument(
                        f"{prefix}expected {count} string elements for inference input '{in_name}' "
                        f"for model '{name}', got {array.size}"
                    )
                if array.size > count:
                    raise invalid_argument(
                        f"{prefix}unexpected number of string elements {array.size} for inference "
                        f"input '{in_name}' for model '{name}', expecting {count}"
                    )
        else:
            expected_bytes = count * dt.itemsize
            if isinstance(data, (bytes, memoryview)):
                got_bytes = len(data) if isinstance(data, bytes) else data.nbytes
                if got_bytes != expected_bytes:
                    raise invalid_argument(
                        f"{prefix}input byte size mismatch for input '{in_name}' for model '{name}'. "
                        f"Expected {expected_bytes}, got {got_bytes}"
                    )
                array = np.frombuffer(data, dtype=dt.dtype)
            else:
                array = data.as_array(dt)
                if array.size != count:
                    raise invalid_argument(
                        f"{prefix}input byte size mismatch for input '{in_name}' for model '{name}'. "
                        f"Expected {expected_bytes}, got {array.size * dt.itemsize}"
                    )
        if max_batch > 0 and batch_size == 0 and array.size:
            # batch 0 with one row's worth of data: passes Triton's size check, but there is no
            # batch to run (what Triton would do next is backend-specific)
            raise invalid_argument(f"{prefix}inference request batch-size must be >= 1 for '{name}'")
        arrays[in_name] = array.reshape(shape)
    return arrays, batch_size


# ----------------------------------------------------------------------------- encode


def _labels(model, spec: TensorSpec) -> list[str]:
    return model.labels(spec.label_filename) if spec.label_filename else []


def _classify(array: np.ndarray, k: int, labels: list[str], batched: bool) -> np.ndarray:
    """Triton's classification extension: top-k per batch item as b"value:index[:label]"."""
    rows = array.reshape(array.shape[0], -1) if batched else array.reshape(1, -1)
    k = min(k, rows.shape[1])
    idx = np.argsort(-rows.astype(np.float64), axis=1, kind="stable")[:, :k]
    vals = np.take_along_axis(rows, idx, axis=1)
    out = np.empty(idx.shape, dtype=object)
    is_float = rows.dtype.kind == "f"
    for r in range(idx.shape[0]):
        for c in range(k):
            i = int(idx[r, c])
            v = f"{float(vals[r, c]):f}" if is_float else str(vals[r, c])
            s = f"{v}:{i}:{labels[i]}" if i < len(labels) else f"{v}:{i}"
            out[r, c] = s.encode()
    return out if batched else out.reshape(k)


def encode_outputs(
    ireq: InferenceRequest,
    outputs: dict[str, np.ndarray],
    shm,
    sink=None,
    sink_min_bytes: int = 0,
    as_tuples: bool = False,
) -> list[EncodedOutput]:
    """Serialize one request's output slices (runs in the instance's worker thread).

    ``sink(request, array)``, when given, may take a numeric output of at least
    ``sink_min_bytes`` somewhere else and return what stands for its bytes in ``raw`` (the
    engine's response arena; None: it did not). ``as_tuples``: plain tuples instead of
    EncodedOutputs, for a trip through pickle (a third of a NamedTuple's cost each way)."""
    encoded: list = []
    for req_out in ireq.outputs:
        spec = req_out.spec
        array = outputs[spec.name]
        datatype = spec.datatype.wire
        if req_out.classification > 0:
            batched = ireq.model.max_batch_size > 0
            array = _classify(array, req_out.classification, _labels(ireq.model, spec), batched)
            datatype = "BYTES"
        if req_out.shm is not None:
            # written from the array itself: one copy, straight into the client's region
            data = serialize_bytes(array) if datatype == "BYTES" else np.ascontiguousarray(array)
            shm.write(*req_out.shm, data, spec.name)
            raw = b""
        elif datatype == "BYTES":
            raw = serialize_bytes(array)
        elif sink is not None and array.nbytes >= sink_min_bytes:
            contiguous = np.ascontiguousarray(array)
            raw = sink(ireq, contiguous) or contiguous.tobytes()
        else:
            raw = array.tobytes()  # C order whatever the layout
        if as_tuples:
            encoded.append((spec.name, datatype, array.shape, raw))
        else:
            encoded.append(EncodedOutput(spec.name, datatype, array.shape, raw))
    return encoded
