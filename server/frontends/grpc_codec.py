"""gRPC wire format: ModelInferRequest -> WireRequest, encoded outputs -> ModelInferResponse.

``collect`` is the frontend half of decoding (protobuf parameters, raw vs typed vs shared
memory, requested outputs); the data plane does the protocol-free core half
(``tensors.normalize``) behind ``DataPlaneAPI.infer``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fpgaserve.protos import inference as pb

from .. import datatypes
from ..dataplane.tensors import (
    ALLOWED_TRITON_PARAMETERS,
    RESERVED_PARAMETER_ERROR,
    SPARE_INPUTS,
    EncodedOutput,
    RequestedOutput,
    ShmTarget,
    WireInput,
    WireRequest,
    all_outputs,
    forward_headers,
    id_prefix,
)
from ..errors import invalid_argument

#: a serialized ModelInferRequest this large has its raw inputs split off before parsing (see
#: ``split_raw_inputs``); below it the full parse costs less than the walk
SPLIT_MIN_BYTES = 64 * 1024
_RAW_INPUT_CONTENTS = 7  # ModelInferRequest.raw_input_contents, repeated bytes


def top_level_fields(data: bytes):
    """The top-level fields of a serialized protobuf message as far as they are well formed:
    ``(field, wire_type, start, value_start, end)`` each, ``data[value_start:end]`` being a
    length-delimited field's bytes. Raises ValueError where the bytes stop being fields (a
    truncated varint, a field past the end, a group or an unknown wire type)."""
    n = len(data)
    pos = 0

    def varint() -> int:
        nonlocal pos
        value = shift = 0
        while pos < n and shift < 64:
            b = data[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
        raise ValueError("truncated varint")

    while pos < n:
        start = pos
        tag = varint()
        field, wire_type = tag >> 3, tag & 7
        value_start = pos
        if wire_type == 0:
            varint()
        elif wire_type == 1:
            pos += 8
        elif wire_type == 5:
            pos += 4
        elif wire_type == 2:
            length = varint()
            value_start = pos
            pos += length
        else:
            raise ValueError(f"wire type {wire_type}")
        if pos > n:
            raise ValueError("a field past the end")
        yield field, wire_type, start, value_start, pos


def split_raw_inputs(data: bytes) -> tuple[bytes, list[memoryview]] | None:
    """A serialized ModelInferRequest's ``raw_input_contents`` as views of ``data``, and the
    rest of the message (its other top-level fields, in order) to parse; None when there is
    nothing to split, or when ``data`` is not a well-formed sequence of top-level fields (the
    full parser then decides what it is).

    Why: parsing copies every raw input into protobuf's memory, and reading the repeated field
    copies it again into a new ``bytes`` -- two copies of a 3 MB FACILE event, into freshly
    allocated pages, ~30 % of a frontend's CPU per event (py-spy, perf_analyzer b16000 c4).
    The views cost nothing; the tensor is then copied once, where it goes (the engine's arena,
    or nowhere in one process: numpy reads it in place)."""
    kept: list[tuple[int, int]] = []
    raws: list[memoryview] = []
    view = memoryview(data)
    try:
        for field, wire_type, start, value_start, end in top_level_fields(data):
            if field == 0:
                return None
            if field == _RAW_INPUT_CONTENTS:
                if wire_type != 2:  # raw contents that are not bytes: the parser reports it
                    return None
                raws.append(view[value_start:end])
            elif kept and kept[-1][1] == start:
                kept[-1] = (kept[-1][0], end)
            else:
                kept.append((start, end))
    except ValueError:
        return None
    if not raws:
        return None
    return b"".join(data[a:b] for a, b in kept), raws


class InferRequestView:
    """A ModelInferRequest parsed without its raw inputs, which ``raw_input_contents`` holds
    as views of the received message (``split_raw_inputs``); every other attribute is the
    parsed message's."""

    __slots__ = ("_message", "raw_input_contents")

    def __init__(self, message, raw_input_contents: list[memoryview]):
        self._message = message
        self.raw_input_contents = raw_input_contents

    def __getattr__(self, name: str):
        return getattr(self._message, name)


def parameter_value(p) -> Any:
    kind = p.WhichOneof("parameter_choice")
    return None if kind is None else getattr(p, kind)


def _request_parameters(request, wire: WireRequest) -> None:
    for key, p in request.parameters.items():
        kind = p.WhichOneof("parameter_choice")
        value: Any = None if kind is None else getattr(p, kind)
        if key == "sequence_id":
            if kind not in ("int64_param", "string_param"):
                raise invalid_argument(
                    "invalid value type for 'sequence_id' parameter, expected int64_param or string_param."
                )
        elif key in ("sequence_start", "sequence_end"):
            if kind != "bool_param":
                raise invalid_argument(f"invalid value type for '{key}' parameter, expected bool_param.")
        elif key == "priority":
            if kind not in ("int64_param", "uint64_param"):
                raise invalid_argument(
                    "invalid value type for 'priority' parameter, expected int64_param or uint64_param."
                )
            if value < 0:
                raise invalid_argument("invalid value for 'priority', expected value >= 0.")
            wire.priority = int(value)
        elif key == "timeout":
            if kind != "int64_param":
                raise invalid_argument("invalid value type for 'timeout' parameter, expected int64_param.")
            wire.timeout_us = max(0, int(value))
        elif key.startswith("triton_"):
            if key not in ALLOWED_TRITON_PARAMETERS:
                raise invalid_argument(RESERVED_PARAMETER_ERROR)
            if kind != "bool_param":
                raise invalid_argument(f"invalid value type for '{key}' parameter, expected bool_param.")
        elif kind not in ("int64_param", "bool_param", "string_param", "double_param"):
            # Triton passes custom parameters to the model; uint64 has no core setter.
            raise invalid_argument(
                f"invalid value type for '{key}' parameter, expected int64_param, bool_param, or string_param."
            )
        wire.parameters[key] = value


def _tensor_shm(params, tensor: str) -> ShmTarget | None:
    """A tensor's shared-memory location, checked as Triton's ParseSharedMemoryParams does."""
    region = None
    if "shared_memory_region" in params:
        p = params["shared_memory_region"]
        if p.WhichOneof("parameter_choice") != "string_param":
            raise invalid_argument(
                f"invalid value type for 'shared_memory_region' parameter for tensor '{tensor}', expected string_param."
            )
        region = p.string_param
    values = {}
    for key in ("shared_memory_offset", "shared_memory_byte_size"):
        if key not in params:
            continue
        if region is None:
            raise invalid_argument(
                f"'{key}' can not be specified without 'shared_memory_region' parameter for tensor '{tensor}'"
            )
        p = params[key]
        if p.WhichOneof("parameter_choice") != "int64_param":
            raise invalid_argument(
                f"invalid value type for '{key}' parameter for tensor '{tensor}', expected int64_param."
            )
        values[key] = p.int64_param
    if region is None:
        return None
    if "shared_memory_byte_size" not in values:
        raise invalid_argument(
            f"'shared_memory_byte_size' must be specified along with 'shared_memory_region' "
            f"parameter for tensor '{tensor}'"
        )
    return ShmTarget(region, values.get("shared_memory_offset", 0), values["shared_memory_byte_size"])


def _typed_contents(contents, dt: datatypes.DataType) -> np.ndarray:
    if dt.contents_field is None:
        return np.empty(0, dtype=dt.dtype)
    values = getattr(contents, dt.contents_field)
    if dt.wire == "BYTES":
        out = np.empty(len(values), dtype=object)
        out[:] = list(values)
        return out
    if dt.contents_field in ("int_contents", "uint_contents"):
        # 8/16-bit types travel in 32-bit fields; Triton keeps the low bytes (wraps)
        wide = np.int32 if dt.contents_field == "int_contents" else np.uint32
        return np.array(values, dtype=wide).astype(dt.dtype)
    return np.array(values, dtype=dt.dtype)


# typed contents field -> the datatype Triton names in "unexpected explicit tensor data"
_FIELD_TYPES = {
    "bool_contents": "BOOL",
    "int_contents": "INT32",
    "int64_contents": "INT64",
    "uint_contents": "UINT32",
    "uint64_contents": "UINT64",
    "fp32_contents": "FP32",
    "fp64_contents": "FP64",
    "bytes_contents": "BYTES",
}
_FIELD_FOR_WIRE = {dt.wire: dt.contents_field for dt in datatypes.BY_WIRE.values()}


def _check_typed_field(contents, tensor, model_name: str) -> None:
    expected_field = _FIELD_FOR_WIRE.get(tensor.datatype)
    for fd, _ in contents.ListFields():
        if fd.name != expected_field:
            raise invalid_argument(
                f"unexpected explicit tensor data for input tensor '{tensor.name}' for model "
                f"'{model_name}' of type '{_FIELD_TYPES[fd.name]}', expected datatype '{tensor.datatype}'"
            )


class _PbTypedValues:
    """Typed ``contents`` of a ModelInferRequest input (tensors.TypedValues)."""

    __slots__ = ("contents",)

    def __init__(self, contents):
        self.contents = contents

    def as_array(self, dt: datatypes.DataType) -> np.ndarray:
        return _typed_contents(self.contents, dt)


def collect(request, model, shm, forwarded: list[tuple[str, str]] | None = None) -> WireRequest:
    """The frontend half of decoding a ModelInferRequest against ``model`` (a snapshot), in
    Triton 2.51's order: parameters; the ``forwarded`` headers (``--grpc-header-forward-pattern``,
    Triton 26.05's place: after the parameters, before the inputs); per input in send order:
    duplicates, raw/typed mixing, data presence, shared-memory location; then the requested
    outputs. The core half is the data plane's (``tensors.normalize``, in ``DataPlaneAPI.infer``)."""
    name = model.name
    received: dict[str, WireInput] = {}
    wire = WireRequest(model, request.id, received, [], {})
    prefix = id_prefix(request.id)
    if request.parameters:
        _request_parameters(request, wire)
    if forwarded:
        forward_headers(forwarded, wire.parameters)

    if len(request.inputs) > len(model.inputs) + SPARE_INPUTS:
        # far more inputs than the model has: answered before a per-input walk (Python work
        # per input) over what may be millions of them; the text is Triton's count error
        raise invalid_argument(
            f"{prefix}expected {len(model.inputs)} inputs but got {len(request.inputs)} inputs for model '{name}'"
        )

    # --- frontend: every input is added to the request before any data is looked at, so a
    # duplicate is reported before the data problems of any input (Triton's order)
    names: set[str] = set()
    for tensor in request.inputs:
        if tensor.name in names:
            raise invalid_argument(f"{prefix}input '{tensor.name}' already exists in request")
        names.add(tensor.name)

    # --- frontend: collect inputs (raw vs typed vs shm)
    raw_contents = request.raw_input_contents  # read the repeated field once
    has_raw = len(raw_contents) > 0
    data: Any  # raw bytes, typed values or a shared-memory location
    raw_index = 0
    for tensor in request.inputs:
        target = _tensor_shm(tensor.parameters, tensor.name) if tensor.parameters else None
        if target is not None:
            if tensor.HasField("contents"):
                raise invalid_argument(
                    f"unexpected 'content' provided when using shared memory for input tensor "
                    f"'{tensor.name}' for model '{name}'"
                )
            # validated now (Triton's frontend order); read once the declared size is checked
            shm.check(*target)
            data = target
        elif has_raw:
            if tensor.HasField("contents"):
                raise invalid_argument(
                    f"contents field must not be specified when using raw_input_contents for "
                    f"'{tensor.name}' for model '{name}'"
                )
            if raw_index >= len(raw_contents):
                raise invalid_argument(
                    f"unable to find data for input tensor '{tensor.name}' for model '{name}' in request."
                )
            data = raw_contents[raw_index]
            raw_index += 1
        else:
            if not tensor.HasField("contents"):
                raise invalid_argument(
                    f"unable to find data for input tensor '{tensor.name}' for model '{name}' in request."
                )
            _check_typed_field(tensor.contents, tensor, name)
            data = _PbTypedValues(tensor.contents)  # converted after dtype validation
        received[tensor.name] = WireInput(tensor.datatype, list(tensor.shape), data)

    # --- requested outputs (duplicates rejected, as newer Triton and qa/L0_grpc expect)
    requested: list[RequestedOutput] = []
    seen: set[str] = set()
    for out in request.outputs:
        spec = model.outputs.get(out.name)
        if spec is None:
            raise invalid_argument(f"unexpected inference output '{out.name}' for model '{name}'")
        if out.name in seen:
            raise invalid_argument(f"{prefix}output '{out.name}' already exists in request")
        seen.add(out.name)
        params = out.parameters
        target = _tensor_shm(params, out.name) if params else None
        if target is not None:
            shm.check(*target)
        k = 0
        if params and "classification" in params:
            p = params["classification"]
            if p.WhichOneof("parameter_choice") != "int64_param":
                raise invalid_argument("invalid value type for 'classification' parameter, expected int64_param")
            k = int(p.int64_param)
            if k <= 0:
                raise invalid_argument("invalid value for 'classification' parameter, expected >= 0")
            if target is not None:
                raise invalid_argument("output can't set both 'shared_memory_region' and 'classification'")
            if spec.datatype.wire in ("BYTES", "BOOL"):
                # Triton's text (classification.cc); a top-k of strings has no meaning
                raise invalid_argument(
                    f"class result not available for output '{out.name}' due to unsupported type '{spec.datatype.wire}'"
                )
        requested.append(RequestedOutput(spec, target, k))
    wire.outputs = requested or all_outputs(model)
    return wire


def build_response(model, request_id: str, encoded: list[EncodedOutput], final_flag: bool | None = None):
    """ModelInferResponse; ``final_flag`` sets ``triton_final_response`` (streams only)."""
    response = pb.ModelInferResponse(model_name=model.name, model_version=model.version_str, id=request_id)
    for out in encoded:
        tensor = response.outputs.add()
        tensor.name = out.name
        tensor.datatype = out.datatype
        tensor.shape.extend(out.shape)
    response.raw_output_contents.extend([out.raw for out in encoded])
    if final_flag is not None:
        response.parameters["triton_final_response"].bool_param = final_flag
    return response
