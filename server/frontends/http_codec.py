"""HTTP/REST wire format (KServe v2 + Triton's binary tensor data extension).

``collect`` is the frontend half of decoding an inference body -- the JSON header, binary
tensors after it (``Inference-Header-Content-Length``), shared-memory locations -- into the
same ``WireRequest`` the gRPC codec builds; the data plane then validates it against the
model (``tensors.normalize``, behind ``DataPlaneAPI.infer``) with the texts every frontend
shares. ``build_response`` turns encoded outputs
back into a JSON header plus the binary outputs that follow it.

Every value comes from a client: sizes are checked against the bytes present before
anything is sliced or allocated, JSON values are type-checked (Triton's texts), and binary
inputs are ``memoryview`` slices of the body, which ``normalize`` turns into numpy views.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from .. import datatypes
from ..dataplane.tensors import (
    ALLOWED_TRITON_PARAMETERS,
    SPARE_INPUTS,
    EncodedOutput,
    RequestedOutput,
    ShmTarget,
    WireInput,
    WireRequest,
    all_outputs,
    deserialize_bytes,
    id_prefix,
)
from ..errors import InferenceError, invalid_argument

HEADER_LENGTH = "Inference-Header-Content-Length"

# TritonJson's texts for a value of the wrong JSON type (common/triton_json.h)
NOT_BOOL = "attempt to access JSON non-boolean as boolean"
_NOT_UINT = "attempt to access JSON non-unsigned-integer as unsigned-integer"
_NOT_INT = "attempt to access JSON non-signed-integer as signed-integer"
_NOT_STRING = "attempt to access JSON non-string as string"
_NOT_ARRAY = "attempt to access JSON non-array as array"
NOT_OBJECT = "attempt to access JSON non-object as object"

_UINT64_MAX = 2**64 - 1


def _unable(what: str, why: str) -> InferenceError:
    return invalid_argument(f"Unable to parse '{what}': {why}")


def as_bool(value, what: str) -> bool:
    if not isinstance(value, bool):
        raise _unable(what, NOT_BOOL)
    return value


def as_uint(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _UINT64_MAX:
        raise _unable(what, _NOT_UINT)
    return value


def as_string(value, what: str) -> str:
    if not isinstance(value, str):
        raise _unable(what, _NOT_STRING)
    return value


def _member(obj: dict, key: str, what: str | None = None):
    if key not in obj:
        raise _unable(what or key, f"attempt to access non-existing object member '{key}'")
    return obj[key]


_SHAPE_MISMATCH = "Unable to parse 'data': Shape does not match true shape of 'data' field"


def _count(data) -> int:
    """Elements in (nested) JSON ``data``: the lengths of the innermost lists, summed (work
    proportional to the number of lists, not of elements; no recursion, whatever the depth)."""
    if not isinstance(data, list):
        return 1
    total = 0
    stack = [data]
    while stack:
        x = stack.pop()
        if not isinstance(x, list):
            total += 1
        elif x and isinstance(x[0], list):
            stack.extend(x)
        else:
            total += len(x)
    return total


def parse_json(data, what: str = "request") -> Any:
    """A JSON document from the client (bytes or memoryview); the text Triton gives a bad one."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise invalid_argument(f"failed to parse the {what} JSON buffer: {e.msg} at {e.pos}") from None


# ----------------------------------------------------------------------------- typed JSON data


class JsonTypedValues:
    """An input's JSON ``data`` (flat or nested), converted once its datatype is validated."""

    __slots__ = ("data", "name")

    def __init__(self, data, name: str):
        self.data = data
        self.name = name

    def as_array(self, dt: datatypes.DataType) -> np.ndarray:
        data = self.data
        if dt.wire in ("FP16", "BF16"):
            raise invalid_argument(
                f"receiving {dt.wire} data via JSON is not supported. Please use the binary data format for input "
                f"{self.name}"
            )
        if dt.wire == "BYTES":
            flat = _flatten(data, self.name)
            out = np.empty(len(flat), dtype=object)
            try:
                out[:] = [s.encode("utf-8", "surrogatepass") for s in flat]
            except AttributeError:  # a non-string element
                raise _unable("data", _NOT_STRING) from None
            return out
        # numpy converts (nested) lists in C; the inferred kind tells whether every element was
        # of an acceptable JSON type before the cast to the model's dtype
        try:
            inferred = np.asarray(data)
        except (ValueError, TypeError):  # ragged nesting
            raise invalid_argument(_SHAPE_MISMATCH) from None
        kind = inferred.dtype.kind
        if inferred.size == 0:
            return np.empty(0, dtype=dt.dtype)
        if dt.wire == "BOOL":
            if kind != "b":
                raise _unable("data", NOT_BOOL)
        elif dt.dtype.kind == "u":
            if kind not in "iu" or (kind == "i" and inferred.min() < 0):
                raise _unable("data", _NOT_UINT)
        elif dt.dtype.kind == "i":
            if kind not in "iu" or (kind == "u" and inferred.max() > np.iinfo(np.int64).max):
                raise _unable("data", _NOT_INT)
        elif kind not in "iuf":  # FP32 / FP64: any JSON number
            raise _unable("data", "attempt to access JSON non-number as double")
        return inferred.astype(dt.dtype, copy=False).reshape(-1)


def _flatten(data, name: str) -> list:
    """Nested lists -> a flat list (BYTES elements are Python objects either way)."""
    if not isinstance(data, list):
        return [data]
    if not data or not isinstance(data[0], list):
        return data
    arr = np.array(data, dtype=object)
    if arr.ndim and any(isinstance(x, list) for x in arr.reshape(-1)[:1]):
        raise invalid_argument(_SHAPE_MISMATCH)
    return arr.reshape(-1).tolist()


# ----------------------------------------------------------------------------- requests


@dataclass
class OutputPlan:
    """How each output travels back: binary after the JSON header, or as JSON ``data``."""

    default_binary: bool = False
    binary: dict[str, bool] = field(default_factory=dict)

    def is_binary(self, name: str) -> bool:
        return self.binary.get(name, self.default_binary)


def _request_parameters(params, wire: WireRequest, plan: OutputPlan) -> None:
    if not isinstance(params, dict):
        raise invalid_argument(f"failed to get request params.: {NOT_OBJECT}")
    for key, value in params.items():
        if key == "sequence_id":
            if isinstance(value, bool) or not isinstance(value, (int, str)):
                raise _unable("sequence_id", _NOT_STRING)
            if isinstance(value, int):
                value = as_uint(value, "sequence_id")
        elif key in ("sequence_start", "sequence_end"):
            value = as_bool(value, key)
        elif key == "priority":
            wire.priority = as_uint(value, "priority")
        elif key == "timeout":
            wire.timeout_us = as_uint(value, "timeout")
        elif key == "binary_data_output":
            plan.default_binary = as_bool(value, "binary_data_output")
            continue
        elif key.startswith("triton_"):
            if key not in ALLOWED_TRITON_PARAMETERS:
                raise invalid_argument(
                    "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified."
                )
            value = as_bool(value, key)
        elif isinstance(value, float):
            pass  # a double parameter
        elif not isinstance(value, (bool, int, str)):
            raise invalid_argument(
                f"parameter '{key}' has invalid type. It should be either 'int', 'bool', or 'string'."
            )
        wire.parameters[key] = value


def _shm_location(params: dict, tensor: str) -> ShmTarget | None:
    if "shared_memory_region" not in params:
        return None
    region = as_string(params["shared_memory_region"], "shared_memory_region")
    offset = as_uint(params["shared_memory_offset"], "shared_memory_offset") if "shared_memory_offset" in params else 0
    size = 0
    if "shared_memory_byte_size" in params:
        size = as_uint(params["shared_memory_byte_size"], "shared_memory_byte_size")
    return ShmTarget(region, offset, size)


def _input_content_check(tensor: dict, params: dict) -> None:
    has_data = "data" in tensor
    has_binary = "binary_data_size" in params
    has_shm = "shared_memory_region" in params
    if has_data + has_binary + has_shm != 1:
        text = (
            "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', "
            "'shared_memory_region' in 'parameters'. But"
        )
        if not (has_data or has_binary or has_shm):
            text += " no field is set"
        else:
            text += " set" + "".join(
                f" '{n}'"
                for n, present in (
                    ("data", has_data),
                    ("binary_data_size", has_binary),
                    ("shared_memory_region", has_shm),
                )
                if present
            )
        raise invalid_argument(text)


def _shape(value) -> list[int]:
    if not isinstance(value, list):
        raise _unable("shape", _NOT_ARRAY)
    for d in value:
        if isinstance(d, bool) or not isinstance(d, int) or not 0 <= d <= _UINT64_MAX:
            raise _unable("shape", _NOT_UINT)
    return value


def collect(header, binary: memoryview, model, shm) -> tuple[WireRequest, OutputPlan]:
    """The frontend half of decoding a JSON inference header (and the binary data after it)
    against ``model`` (a snapshot), in Triton's HTTP order: id, parameters, inputs in order,
    leftover binary data, outputs."""
    name = model.name
    if not isinstance(header, dict):
        raise invalid_argument(f"Unable to parse 'inputs': {NOT_OBJECT}")
    request_id = ""
    if "id" in header:
        request_id = as_string(header["id"], "id")
    received: dict[str, WireInput] = {}
    wire = WireRequest(model, request_id, received, [], {})
    plan = OutputPlan()
    prefix = id_prefix(request_id)
    if "parameters" in header:
        _request_parameters(header["parameters"], wire, plan)

    inputs = _member(header, "inputs")
    if not isinstance(inputs, list):
        raise _unable("inputs", _NOT_ARRAY)
    if len(inputs) > len(model.inputs) + SPARE_INPUTS:
        raise invalid_argument(
            f"{prefix}expected {len(model.inputs)} inputs but got {len(inputs)} inputs for model '{name}'"
        )
    offset, available = 0, binary.nbytes
    data: Any
    for tensor in inputs:
        if not isinstance(tensor, dict):
            raise invalid_argument(f"Unable to parse 'inputs': {NOT_OBJECT}")
        params = tensor.get("parameters") or {}
        if not isinstance(params, dict):
            raise invalid_argument(f"Unable to parse 'parameters': {NOT_OBJECT}")
        _input_content_check(tensor, params)
        in_name = as_string(_member(tensor, "name"), "name")
        datatype = as_string(_member(tensor, "datatype"), "datatype")
        shape = _shape(_member(tensor, "shape"))
        if in_name in received:
            raise invalid_argument(f"{prefix}input '{in_name}' already exists in request")
        if "binary_data_size" in params:
            size = as_uint(params["binary_data_size"], "binary_data_size")
            if size > available - offset:
                raise invalid_argument(
                    f"unexpected size for input '{in_name}', expecting {size - (available - offset)} "
                    f"additional bytes for model '{name}'"
                )
            data = binary[offset : offset + size]
            offset += size
        elif "shared_memory_region" in params:
            target = _shm_location(params, in_name)
            assert target is not None
            shm.check(*target)
            data = target
        else:
            if datatype in ("FP16", "BF16"):  # refused by the frontend, before the core's checks
                raise invalid_argument(
                    f"receiving {datatype} data via JSON is not supported. Please use the binary data format "
                    f"for input {in_name}"
                )
            data = JsonTypedValues(tensor["data"], in_name)
            # the element count the shape declares must be what 'data' holds (Triton checks it
            # here, in the frontend, before the core's checks; BYTES are counted by the core)
            if datatype != "BYTES":
                declared = 1
                for d in shape:
                    declared *= d
                if _count(tensor["data"]) != declared:
                    raise invalid_argument(_SHAPE_MISMATCH)
        received[in_name] = WireInput(datatype, list(shape), data)
    if offset != available:
        raise invalid_argument(f"unexpected additional input data for model '{name}'")

    requested: list[RequestedOutput] = []
    if "outputs" in header:
        outputs = header["outputs"]
        if not isinstance(outputs, list):
            raise _unable("outputs", _NOT_ARRAY)
        seen: set[str] = set()
        for out in outputs:
            if not isinstance(out, dict):
                raise invalid_argument(f"Unable to parse 'outputs': {NOT_OBJECT}")
            params = out.get("parameters") or {}
            if not isinstance(params, dict):
                raise invalid_argument(f"Unable to parse 'parameters': {NOT_OBJECT}")
            if "shared_memory_region" in params:
                if "classification" in params:
                    raise invalid_argument("Output can't set both 'shared_memory_region' and 'classification'")
                if "binary_data" in params and as_bool(params["binary_data"], "binary_data"):
                    raise invalid_argument("Output can't set both 'shared_memory_region' and 'binary_data'")
            out_name = as_string(_member(out, "name"), "name")
            spec = model.outputs.get(out_name)
            if spec is None:
                raise invalid_argument(f"unexpected inference output '{out_name}' for model '{name}'")
            if out_name in seen:
                raise invalid_argument(f"{prefix}output '{out_name}' already exists in request")
            seen.add(out_name)
            k = 0
            if "classification" in params:
                value = params["classification"]
                if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _UINT64_MAX:
                    raise invalid_argument(f"Unable to set 'classification': {_NOT_UINT}")
                k = value
                if k > 0 and spec.datatype.wire in ("BYTES", "BOOL"):
                    raise invalid_argument(
                        f"class result not available for output '{out_name}' due to unsupported type "
                        f"'{spec.datatype.wire}'"
                    )
            target = _shm_location(params, out_name)
            if target is not None:
                shm.check(*target)
            elif "binary_data" in params:
                plan.binary[out_name] = as_bool(params["binary_data"], "binary_data")
            requested.append(RequestedOutput(spec, target, k))
    wire.outputs = requested or all_outputs(model)
    return wire, plan


def collect_raw(body: memoryview, model) -> tuple[WireRequest, OutputPlan]:
    """``Inference-Header-Content-Length: 0``: the whole body is the single input of the model,
    outputs come back binary (Triton's raw binary request)."""
    if len(model.inputs) != 1:
        raise invalid_argument(
            f"{id_prefix('')}Raw request must only have 1 input (found 1) to be deduced but got "
            f"{len(model.inputs)} inputs in '{model.name}' model configuration"
        )
    spec = next(iter(model.inputs.values()))
    dims = list(spec.dims)
    batched = model.max_batch_size > 0
    if spec.datatype.itemsize and dims.count(-1) == 1:
        # the one variable dimension follows from the body's size
        fixed = spec.datatype.itemsize
        for d in dims:
            if d > 0:
                fixed *= d
        dims[dims.index(-1)] = body.nbytes // fixed if fixed else 0
    shape = ([1] if batched else []) + dims
    inputs = {spec.name: WireInput(spec.datatype.wire, shape, body)}
    return WireRequest(model, "", inputs, all_outputs(model), {}), OutputPlan(default_binary=True)


# ----------------------------------------------------------------------------- responses


def _json_data(out: EncodedOutput) -> Any:
    """An output's values for a JSON response: a numpy array (orjson writes it in C) or, for
    BYTES, a list of strings."""
    if out.datatype in ("FP16", "BF16"):
        raise invalid_argument(
            f"sending {out.datatype} data via JSON is not supported. Please use the binary data format for output"
        )
    count = 1
    for d in out.shape:
        count *= d
    if out.datatype == "BYTES":
        values = deserialize_bytes(out.raw, count, out.name, "")
        return [v.decode("utf-8", "replace") for v in values.tolist()]
    return np.frombuffer(out.raw, dtype=datatypes.BY_WIRE[out.datatype].dtype)


def build_response(
    model, request_id: str, encoded: list[EncodedOutput], plan: OutputPlan, shm_outputs: set[str]
) -> tuple[bytes, list[bytes]]:
    """(JSON header, binary outputs in order); the header's length is what
    ``Inference-Header-Content-Length`` announces when there are binary outputs."""
    outputs = []
    binaries: list[bytes] = []
    for out in encoded:
        entry: dict[str, Any] = {"name": out.name, "datatype": out.datatype, "shape": list(out.shape)}
        if out.name in shm_outputs:
            pass  # written to the client's region; nothing in the body
        elif plan.is_binary(out.name):
            entry["parameters"] = {"binary_data_size": len(out.raw)}
            binaries.append(out.raw)
        else:
            entry["data"] = _json_data(out)
        outputs.append(entry)
    response: dict[str, Any] = {}
    if request_id:
        response["id"] = request_id
    response["model_name"] = model.name
    response["model_version"] = model.version_str
    response["outputs"] = outputs
    return orjson.dumps(response, option=orjson.OPT_SERIALIZE_NUMPY), binaries
