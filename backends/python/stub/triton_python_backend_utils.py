"""``triton_python_backend_utils`` for models served by fpgaserve's Python backend.

The API of Triton's module (python_backend r24.10) that models use: tensors, requests and
responses, errors, BLS (``InferenceRequest(...).exec()``), decoupled response senders, the
logger, custom metrics and the auto-complete config object. Importable only inside a model
instance's process (this folder is on that process's ``sys.path``, never the server's).
"""

from __future__ import annotations

import asyncio
import json
import struct

import numpy as np

from fpgaserve.backends.python.response_flags import RESPONSE_COMPLETE_FINAL as TRITONSERVER_RESPONSE_COMPLETE_FINAL

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2


def _worker():
    from fpgaserve.backends.hosting import current

    return current()


# ----------------------------------------------------------------------------- datatypes

TRITON_STRING_TO_NUMPY = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}
# the config's DataType enum numbers (model_config.proto), TYPE_BOOL = 1 ... TYPE_STRING = 13
_ENUM_TO_NUMPY = {
    1: np.bool_,
    2: np.uint8,
    3: np.uint16,
    4: np.uint32,
    5: np.uint64,
    6: np.int8,
    7: np.int16,
    8: np.int32,
    9: np.int64,
    10: np.float16,
    11: np.float32,
    12: np.float64,
    13: np.object_,
}
_NUMPY_TO_WIRE = {
    np.dtype(np.bool_): "BOOL",
    np.dtype(np.uint8): "UINT8",
    np.dtype(np.uint16): "UINT16",
    np.dtype(np.uint32): "UINT32",
    np.dtype(np.uint64): "UINT64",
    np.dtype(np.int8): "INT8",
    np.dtype(np.int16): "INT16",
    np.dtype(np.int32): "INT32",
    np.dtype(np.int64): "INT64",
    np.dtype(np.float16): "FP16",
    np.dtype(np.float32): "FP32",
    np.dtype(np.float64): "FP64",
    np.dtype(np.object_): "BYTES",
}


def triton_string_to_numpy(triton_type_string: str):
    """A config data type ("TYPE_FP32") as the numpy type (KeyError for an unknown one)."""
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def triton_to_numpy_type(data_type: int):
    """A config DataType enum number as the numpy type (None for an unknown one)."""
    return _ENUM_TO_NUMPY.get(data_type)


def numpy_to_triton_type(data_type):
    """A numpy type as the config DataType enum number (None for one Triton has not)."""
    if data_type in (np.object_, np.bytes_):
        return 13
    for number, numpy_type in _ENUM_TO_NUMPY.items():
        if data_type == numpy_type:
            return number
    return None


def numpy_to_triton_string(numpy_type) -> str | None:
    """A numpy type as the config data type ("TYPE_FP32")."""
    dtype = np.dtype(numpy_type)
    if dtype.kind in "SU":
        return "TYPE_STRING"
    wire = _NUMPY_TO_WIRE.get(dtype)
    if wire is None:
        return None
    return "TYPE_STRING" if wire == "BYTES" else f"TYPE_{wire}"


def using_decoupled_model_transaction_policy(model_config: dict) -> bool:
    """Whether the config (a dict) makes the model decoupled."""
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


def serialize_byte_tensor(input_tensor: np.ndarray):
    """A BYTES tensor (object or bytes_ array) as Triton serializes it: each element's 4-byte
    little-endian length, then its bytes, in C order; () for an empty tensor, None for a
    tensor of another type. Elements that are not bytes are written as their str in UTF-8."""
    if input_tensor.size == 0:
        return ()
    if input_tensor.dtype != np.object_ and input_tensor.dtype.type != np.bytes_:
        return None
    parts = []
    for item in input_tensor.reshape(-1, order="C").tolist():
        data = item if isinstance(item, bytes) else str(item).encode("utf-8")
        parts.append(struct.pack("<I", len(data)))
        parts.append(data)
    return b"".join(parts)


def deserialize_bytes_tensor(encoded_tensor) -> np.ndarray:
    """Triton's BYTES serialization as a 1-D object array of bytes."""
    items = []
    view = memoryview(encoded_tensor).cast("B")
    offset = 0
    while offset < len(view):
        (length,) = struct.unpack_from("<I", view, offset)
        offset += 4
        items.append(view[offset : offset + length].tobytes())
        offset += length
    out = np.empty(len(items), dtype=np.object_)
    out[:] = items
    return out


def _wire_datatype(array: np.ndarray) -> str:
    if array.dtype.kind in "SUO":
        return "BYTES"
    wire = _NUMPY_TO_WIRE.get(array.dtype)
    if wire is None:
        raise TritonModelException(f"unsupported data type {array.dtype} for a tensor")
    return wire


# ----------------------------------------------------------------------------- errors


class TritonError:
    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message: str, code: int = INTERNAL):
        self._message = str(message)
        self._code = int(code)

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    def status_name(self) -> str:
        """The server's status for this error's code (not Triton's API: how the host reports a
        response's error)."""
        return _STATUS_OF_CODE.get(self._code, "INTERNAL")

    def __repr__(self) -> str:
        return f"TritonError({self._message!r})"


# a TritonError's code as the server's status (it has no UNKNOWN: a model's UNKNOWN is internal)
_STATUS_OF_CODE = {
    TritonError.UNKNOWN: "INTERNAL",
    TritonError.INTERNAL: "INTERNAL",
    TritonError.NOT_FOUND: "NOT_FOUND",
    TritonError.INVALID_ARG: "INVALID_ARG",
    TritonError.UNAVAILABLE: "UNAVAILABLE",
    TritonError.UNSUPPORTED: "UNSUPPORTED",
    TritonError.ALREADY_EXISTS: "ALREADY_EXISTS",
    TritonError.CANCELLED: "CANCELLED",
}
_CODE_OF_STATUS = {name: code for code, name in _STATUS_OF_CODE.items() if code != TritonError.UNKNOWN}


class TritonModelException(Exception):
    def __init__(self, msg: str):
        super().__init__(msg)
        self._msg = msg

    def message(self) -> str:
        return self._msg


# ----------------------------------------------------------------------------- tensors


class Tensor:
    def __init__(self, name: str, data):
        if not isinstance(data, np.ndarray):
            raise TritonModelException("Tensor data must be a numpy array")
        if data.dtype.kind in "SU":
            data = data.astype(np.object_)
        self._name = name
        self._array = data

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def triton_dtype(self) -> str:
        return _wire_datatype(self._array)

    def is_cpu(self) -> bool:
        return True

    def to_dlpack(self):
        if self._array.dtype == np.object_:
            raise TritonModelException("DLPack does not support BYTES tensors")
        return self._array.__dlpack__()

    @staticmethod
    def from_dlpack(name: str, capsule) -> Tensor:
        if hasattr(capsule, "__dlpack__"):
            return Tensor(name, np.from_dlpack(capsule))
        raise TritonModelException("from_dlpack expects an object with __dlpack__ (a PyCapsule alone is not supported)")

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, shape={self.shape()}, dtype={self._array.dtype})"


def get_input_tensor_by_name(inference_request, name: str) -> Tensor | None:
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response, name: str) -> Tensor | None:
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def get_input_config_by_name(model_config: dict, name: str) -> dict | None:
    for entry in model_config.get("input", []):
        if entry.get("name") == name:
            return entry
    return None


def get_output_config_by_name(model_config: dict, name: str) -> dict | None:
    for entry in model_config.get("output", []):
        if entry.get("name") == name:
            return entry
    return None


# ----------------------------------------------------------------------------- responses


class InferenceResponse:
    def __init__(self, output_tensors=None, error: TritonError | None = None, parameters=None):
        self._outputs = list(output_tensors or [])
        if error is not None and not isinstance(error, TritonError):
            raise TritonModelException("error must be a TritonError")
        self._error = error
        self._parameters = parameters

    def output_tensors(self) -> list[Tensor]:
        return self._outputs

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        params = self._parameters
        return params if isinstance(params, str) else json.dumps(params or {}, separators=(",", ":"))


class ResponseSender:
    def __init__(self, request: InferenceRequest):
        self._request = request
        self._closed = False

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        if self._closed:
            raise TritonModelException("Unable to send response. Response sender has been closed.")
        if response is not None and not isinstance(response, InferenceResponse):
            raise TritonModelException("response must be an InferenceResponse or None")
        if response is None and not flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL:
            raise TritonModelException("a response of None needs the TRITONSERVER_RESPONSE_COMPLETE_FINAL flag")
        # (the hosted object of this process is the model's host: host.PythonModelHost)
        _worker().host.send_response(self._request._index, response, flags, self._request)
        if flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL:
            self._closed = True

    def is_cancelled(self) -> bool:
        return self._request.is_cancelled()


# ----------------------------------------------------------------------------- requests


class InferenceRequest:
    """A request the model received (``execute``'s argument), or one it builds to call
    another model (BLS: ``exec``, ``async_exec``, ``exec(decoupled=True)``)."""

    def __init__(
        self,
        model_name: str = "",
        inputs=None,
        requested_output_names=None,
        request_id: str = "",
        correlation_id: int | str = 0,
        flags: int = 0,
        model_version: int = -1,
        timeout: int = 0,
        preferred_memory=None,
        trace=None,
        parameters=None,
    ):
        self.model_name = model_name
        self._inputs = list(inputs or [])
        self._requested = tuple(requested_output_names or ())
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._flags = flags
        self._model_version = model_version
        self._timeout = timeout
        if isinstance(parameters, str):
            parameters = json.loads(parameters)
        self._parameters = dict(parameters or {})
        self._index = -1
        self._decoupled = False
        self._sender: ResponseSender | None = None

    @classmethod
    def from_server(cls, tensors, request_id, flags, parameters, requested, correlation_id, index, decoupled, host):
        """A request the server sent to this model (not Triton's API: how the host builds the
        requests of a batch); ``index`` is how the server names it when the model asks about it."""
        request = cls(
            model_name=host.model_name,
            inputs=tensors,
            requested_output_names=requested,
            request_id=request_id,
            correlation_id=correlation_id,
            flags=flags,
            parameters=parameters,
        )
        request._index = index
        request._decoupled = decoupled
        return request

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def requested_output_names(self) -> list[str]:
        return list(self._requested)

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self):
        return self._correlation_id

    def flags(self) -> int:
        return self._flags

    def timeout(self) -> int:
        return self._timeout

    def parameters(self) -> str:
        # compact, as Triton writes it ({"site":"T2_US"})
        return json.dumps(self._parameters, separators=(",", ":"))

    def is_cancelled(self) -> bool:
        """Whether the client has withdrawn this request (cancelled the call or stream, or its
        deadline passed): asked of the server each time, as Triton's stub asks its core."""
        if not isinstance(self._index, tuple):
            return False  # a request the model built (BLS), not one it received
        return bool(_worker().call(("is_cancelled", *self._index)))

    def get_response_sender(self) -> ResponseSender:
        if not self._decoupled:
            raise TritonModelException(
                "Unable to get response sender: the model is not using the decoupled transaction policy"
            )
        if self._sender is None:
            self._sender = ResponseSender(self)
        return self._sender

    # ------------------------------------------------------------------ BLS
    def _payload(self) -> tuple:
        put = _worker().put
        inputs = []
        for tensor in self._inputs:
            array = tensor.as_numpy()
            inputs.append((tensor.name(), _wire_datatype(array), tuple(array.shape), put(array)))
        return (
            self.model_name,
            self._model_version,
            inputs,
            self._requested,
            self._request_id,
            self._parameters,
            self._timeout,
        )

    @staticmethod
    def _response(item) -> InferenceResponse:
        get = _worker().get
        return InferenceResponse([Tensor(name, get(ref, copy=True)) for name, ref in item])

    def exec(self, decoupled: bool = False):
        """Run this request on ``model_name``: its InferenceResponse (an error, if it failed,
        in ``error()``), or with ``decoupled`` a ``ResponseIterator`` of its responses."""
        from fpgaserve.backends.hosting import CallFailed

        if decoupled:
            return ResponseIterator(self)
        try:
            return self._response(_worker().call(self._payload()))
        except CallFailed as e:
            return InferenceResponse(error=TritonError(e.text, _CODE_OF_STATUS.get(e.status, TritonError.INTERNAL)))

    async def async_exec(self, decoupled: bool = False):
        loop = asyncio.get_running_loop()
        if decoupled:
            # (as Triton's: the iterator, whose responses arrive as the model sends them)
            return await loop.run_in_executor(None, ResponseIterator, self)
        return await loop.run_in_executor(None, self.exec)


class ResponseIterator:
    """The responses of a decoupled BLS request (``exec(decoupled=True)``), as Triton's
    python_backend hands them: iterate to get each as it comes, the last one empty; iterating
    again once finished starts over. ``cancel()`` (python_backend r25.04) asks the server to
    withdraw the request: one still queued never runs (its iteration ends with a CANCELLED
    error response), a running one sees ``is_cancelled()`` and its responses go on until its
    final one."""

    def __init__(self, request: InferenceRequest):
        self._stream = _worker().call(request._payload(), stream=True)
        self._responses: list[InferenceResponse] = []
        self._index = 0
        self._finished = False

    def __iter__(self) -> ResponseIterator:
        if self._finished and self._index >= len(self._responses):
            self._index = 0
        return self

    def __next__(self) -> InferenceResponse:
        if self._index < len(self._responses):
            self._index += 1
            return self._responses[self._index - 1]
        if self._finished:
            raise StopIteration
        response = self._receive()
        self._responses.append(response)
        self._index += 1
        return response

    def _receive(self) -> InferenceResponse:
        from fpgaserve.backends.hosting import CallFailed

        try:
            item = next(self._stream)
        except CallFailed as e:
            # (the error response is the last: Triton 2.51 sends no empty one after it)
            self._finished = True
            return InferenceResponse(error=TritonError(e.text, _CODE_OF_STATUS.get(e.status, TritonError.INTERNAL)))
        except StopIteration:
            self._finished = True
            return InferenceResponse()  # the final, empty response, as Triton ends a decoupled stream
        return InferenceRequest._response(item)

    def cancel(self) -> None:
        if not self._finished:
            self._stream.cancel()


# ----------------------------------------------------------------------------- logging


class Logger:
    """Lines in the server's log, prefixed with the model instance's name."""

    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3

    @staticmethod
    def log(message: str, level: int = 0) -> None:
        _worker().log(_LOG_LEVELS.get(level, "info"), str(message))

    @staticmethod
    def log_info(message: str) -> None:
        _worker().log("info", str(message))

    @staticmethod
    def log_warn(message: str) -> None:
        _worker().log("warn", str(message))

    @staticmethod
    def log_error(message: str) -> None:
        _worker().log("error", str(message))

    @staticmethod
    def log_verbose(message: str) -> None:
        _worker().log("verbose", str(message))


_LOG_LEVELS = {Logger.INFO: "info", Logger.WARNING: "warn", Logger.ERROR: "error", Logger.VERBOSE: "verbose"}


# ----------------------------------------------------------------------------- metrics


class MetricFamily:
    """A metric family on the server's /metrics (Triton's custom metrics). Keep the family
    alive as long as its metrics, as Triton requires."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2

    def __init__(self, name: str, description: str, kind: int):
        kinds = {self.COUNTER: "counter", self.GAUGE: "gauge", self.HISTOGRAM: "histogram"}
        if kind not in kinds:
            raise TritonModelException(f"unknown metric family kind {kind}")
        self.name = name
        self.description = description
        self.kind = kind
        _worker().send(("metric", "family", name, kinds[kind], description))

    def Metric(self, labels: dict | None = None, buckets=None) -> Metric:
        if self.kind == self.HISTOGRAM:
            if not buckets:
                raise TritonModelException("a histogram metric needs its buckets")
            bounds = [float(b) for b in buckets]
            if bounds != sorted(set(bounds)):
                raise TritonModelException("histogram buckets must be increasing")
            return Metric(self, labels or {}, bounds)
        if buckets is not None:
            raise TritonModelException("buckets are for histogram metrics only")
        return Metric(self, labels or {})


class Metric:
    def __init__(self, family: MetricFamily, labels: dict, buckets: list[float] | None = None):
        self._family = family
        self._labels = tuple(sorted((str(k), str(v)) for k, v in labels.items()))
        self._value = 0.0
        if buckets is not None:
            _worker().send(("metric", "buckets", family.name, self._labels, buckets))

    def increment(self, value: float) -> None:
        if self._family.kind == MetricFamily.HISTOGRAM:
            raise TritonModelException("a histogram is not incremented: observe its values")
        if self._family.kind == MetricFamily.COUNTER and value < 0:
            raise TritonModelException("a counter cannot be incremented by a negative value")
        self._value += value
        _worker().send(("metric", "increment", self._family.name, self._labels, value))

    def set(self, value: float) -> None:
        if self._family.kind != MetricFamily.GAUGE:
            raise TritonModelException("only a gauge can be set")
        self._value = float(value)
        _worker().send(("metric", "set", self._family.name, self._labels, value))

    def value(self) -> float:
        if self._family.kind == MetricFamily.HISTOGRAM:
            raise TritonModelException("a histogram has no single value")
        return self._value

    def observe(self, value: float) -> None:
        if self._family.kind != MetricFamily.HISTOGRAM:
            raise TritonModelException("only a histogram observes values")
        _worker().send(("metric", "observe", self._family.name, self._labels, float(value)))


# ----------------------------------------------------------------------------- auto-complete


class ModelConfig:
    """What ``auto_complete_config`` gets: the config so far (Triton's JSON), to read and
    complete. Only max_batch_size, the batcher, inputs, outputs and the transaction policy
    can be set; conflicts with what the config states fail the load with Triton's texts."""

    def __init__(self, model_config):
        self._config = json.loads(model_config) if isinstance(model_config, (str, bytes)) else model_config
        self._config.setdefault("input", [])
        self._config.setdefault("output", [])

    def _name(self) -> str:
        return str(self._config.get("name", ""))

    def as_dict(self) -> dict:
        return self._config

    def set_max_batch_size(self, max_batch_size: int) -> None:
        current = int(self._config.get("max_batch_size", 0) or 0)
        if current > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {current}, but in auto-complete-config function "
                f"for model '{self._name()}' specified max_batch_size {max_batch_size}"
            )
        self._config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        for other in ("sequence_batching", "ensemble_scheduling"):
            if other in self._config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{other}', but auto-complete-config "
                    f"function for model '{self._name()}' tries to set scheduling_choice as 'dynamic_batching'"
                )
        self._config.setdefault("dynamic_batching", {})

    def set_model_transaction_policy(self, transaction_policy_dict: dict) -> None:
        if any(key != "decoupled" for key in transaction_policy_dict):
            raise ValueError(
                "model transaction property in auto-complete-config function for model "
                f"'{self._name()}' contains property other than 'decoupled'."
            )
        policy = self._config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            wanted = transaction_policy_dict["decoupled"]
            if "decoupled" in policy and policy["decoupled"] != wanted:
                raise ValueError(
                    "trying to change decoupled property in auto-complete-config for model "
                    f"'{self._name()}', which is already set to '{policy['decoupled']}'."
                )
            policy["decoupled"] = wanted

    def _add(self, kind: str, tensor: dict, properties: tuple[str, ...]) -> None:
        for key in tensor:
            if key not in properties:
                listed = ", ".join(f"'{p}'" for p in properties[:-1]) + f" and '{properties[-1]}'"
                raise ValueError(
                    f"{kind} '{tensor.get('name', '')}' in auto-complete-config function for model "
                    f"'{self._name()}' contains property other than {listed}."
                )
        if "name" not in tensor:
            raise ValueError(
                f"{kind} in auto-complete-config function for model '{self._name()}' is missing 'name' property."
            )
        for key in ("data_type", "dims"):
            if key not in tensor:
                raise ValueError(
                    f"{kind} '{tensor['name']}' in auto-complete-config function for model '{self._name()}' "
                    f"is missing '{key}' property."
                )
        for existing in self._config[kind]:
            if existing.get("name") != tensor["name"]:
                continue
            declared = existing.get("data_type", "TYPE_INVALID")
            if declared != "TYPE_INVALID" and declared != tensor["data_type"]:
                raise ValueError(
                    f"unable to load model '{self._name()}', configuration expects datatype {declared} for "
                    f"{kind} '{tensor['name']}', model provides {tensor['data_type']}"
                )
            if existing.get("dims") and existing["dims"] != tensor["dims"]:
                raise ValueError(
                    f"model '{self._name()}', tensor '{tensor['name']}': the model expects dims "
                    f"{tensor['dims']} but the model configuration specifies dims {existing['dims']}"
                )
            if "optional" in existing and "optional" in tensor and existing["optional"] != tensor["optional"]:
                raise ValueError(
                    f"model '{self._name()}', tensor '{tensor['name']}': the model expects optional "
                    f"{tensor['optional']} but the model configuration specifies optional {existing['optional']}"
                )
            existing.update(tensor)
            return
        self._config[kind].append(tensor)

    def add_input(self, input: dict) -> None:
        self._add("input", input, ("name", "data_type", "dims", "optional"))

    def add_output(self, output: dict) -> None:
        self._add("output", output, ("name", "data_type", "dims"))
