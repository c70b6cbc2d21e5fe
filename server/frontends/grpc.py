"""Transport: Triton's ``inference.GRPCInferenceService`` and ``grpc.health.v1.Health`` on grpc.aio.

Handlers are registered with ``grpc.method_handlers_generic_handler`` on message classes from
our private descriptor pool (fpgaserve.protos), so nothing collides with tritonclient's
generated modules. This module and its codec only speak the wire: everything else is behind
``DataPlaneAPI``, the same for both protocols and in or out of the engine's process.

Every RPC goes through one wrapper (``_guard_*``), which is where a hostile or broken client
meets the server:

* a restricted protocol group (``--grpc-restricted-protocol``) without its header is refused
  before the handler runs;
* bytes that do not parse as the RPC's message become INVALID_ARGUMENT (gRPC's own
  deserializer failure would be UNKNOWN with a Python exception text); over ModelStreamInfer
  they get an in-stream error response, with the request id when it can be read;
* an exception becomes what ``common.failure`` says, as over HTTP: an ``InferenceError`` its
  own status and text, anything else (a bug of ours) INTERNAL with a plain text, logged with
  its traceback, never UNKNOWN or a repr; every text bounded. The status's gRPC code is
  ``GRPC_STATUS``'s, the only place statuses meet gRPC codes.

Statistics, model metadata and load parameters are ``common``'s too, shared with HTTP; this
module only renders them as messages.
"""

from __future__ import annotations

import asyncio
import logging

import grpc
from google.protobuf import json_format

from fpgaserve.protos import (
    HEALTH_SERVICE_NAME,
    SERVICE_NAME,
    service_methods,
)
from fpgaserve.protos import (
    health as health_pb,
)
from fpgaserve.protos import (
    inference as pb,
)

from ..dataplane.api import DataPlaneAPI
from ..errors import InferenceError, Status, invalid_argument, unimplemented
from . import common
from . import grpc_codec as codec
from .access import GRPC_METHOD_CATEGORIES, Restriction

log = logging.getLogger("fpgaserve.grpc")

_SERVING = health_pb.HealthCheckResponse.SERVING
_NOT_SERVING = health_pb.HealthCheckResponse.NOT_SERVING
_UNKNOWN = health_pb.HealthCheckResponse.UNKNOWN


# Status -> gRPC code: one to one, but INVALID_ARG -> INVALID_ARGUMENT and UNSUPPORTED ->
# UNIMPLEMENTED, as Triton's grpc_utils.cc maps its core codes
GRPC_STATUS = {
    Status.INVALID_ARG: grpc.StatusCode.INVALID_ARGUMENT,
    Status.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    Status.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    Status.INTERNAL: grpc.StatusCode.INTERNAL,
    Status.UNSUPPORTED: grpc.StatusCode.UNIMPLEMENTED,
    Status.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    Status.CANCELLED: grpc.StatusCode.CANCELLED,
    Status.PERMISSION_DENIED: grpc.StatusCode.PERMISSION_DENIED,
}

_MALFORMED_ID_LIMIT = 256  # characters of a salvaged request id echoed in an error
MAX_STREAM_IN_FLIGHT = 1024  # requests per ModelStreamInfer stream not yet answered on the wire
_ANSWERED = object()  # queued after a stream request's last response


def traceparent_from(pairs) -> str:
    """The W3C ``traceparent`` among gRPC metadata pairs (keys are lower case), or ''."""
    for key, value in pairs or ():
        if key == "traceparent":
            return value if isinstance(value, str) else value.decode("latin-1")
    return ""


def _salvage_request_id(data: bytes) -> str:
    """The ``id`` (field 3) of a serialized ModelInferRequest that does not parse as a whole.

    Walks the top-level fields only as far as they are well formed, so a stream client whose
    message is corrupt after its id still gets an error response it can match.
    """
    try:
        for field, wire_type, _, value_start, end in codec.top_level_fields(data):
            if field == 3 and wire_type == 2:
                return data[value_start:end].decode("utf-8", "replace")[:_MALFORMED_ID_LIMIT]
    except ValueError:
        pass
    return ""


class _Malformed:
    """Stands in for a request message that did not parse (see ``_deserializer``)."""

    __slots__ = ("id", "type_name")

    def __init__(self, type_name: str, request_id: str = ""):
        self.type_name = type_name
        self.id = request_id

    def error(self) -> InferenceError:
        return invalid_argument(f"failed to parse the request: it is not a valid {self.type_name} message")


def _deserializer(cls):
    type_name = cls.DESCRIPTOR.full_name
    salvage = type_name == "inference.ModelInferRequest"
    from_string = cls.FromString

    def deserialize(data: bytes):
        try:
            if salvage and len(data) >= codec.SPLIT_MIN_BYTES:
                split = codec.split_raw_inputs(data)
                if split is not None:  # large raw inputs stay where they arrived
                    return codec.InferRequestView(from_string(split[0]), split[1])
            return from_string(data)
        except Exception:  # DecodeError, or upb's RuntimeError on too deep nesting
            return _Malformed(type_name, _salvage_request_id(data) if salvage else "")

    return deserialize


def _granted(context, restriction: Restriction) -> bool:
    for key, value in context.invocation_metadata() or ():
        if key == restriction.header:
            return restriction.allows(value)
    return False


async def _admit(context, restriction: Restriction | None, request) -> None:
    """Every RPC's prologue: the protocol restriction first (Triton checks it before it
    reads the request), then the request must have parsed (a stream's iterator always has)."""
    if restriction is not None and not _granted(context, restriction):
        await context.abort(grpc.StatusCode.UNAVAILABLE, restriction.grpc_refusal())
    if isinstance(request, _Malformed):
        raise request.error()


def _guard_unary(method: str, fn, restriction: Restriction | None):
    async def handler(request, context):
        try:
            await _admit(context, restriction, request)
            return await fn(request, context)
        except grpc.aio.AbortError:
            raise
        except Exception as e:
            err = common.failure(method, e, log)
        await context.abort(GRPC_STATUS[err.status], err.message)

    return handler


def _guard_stream(method: str, fn, restriction: Restriction | None):
    """Server-streaming and bidirectional RPCs: ``request`` is a message or an iterator."""

    async def handler(request, context):
        try:
            await _admit(context, restriction, request)
            async for response in fn(request, context):
                yield response
            return
        except grpc.aio.AbortError:
            raise
        except Exception as e:
            err = common.failure(method, e, log)
        await context.abort(GRPC_STATUS[err.status], err.message)

    return handler


def _generic_handler(service: str, target, restrictions: dict[str, Restriction]):
    handlers = {}
    for name, req_cls, resp_cls, client_stream, server_stream in service_methods(service):
        fn = getattr(target, name)
        restriction = restrictions.get(GRPC_METHOD_CATEGORIES[name])
        if client_stream and server_stream:
            make, guarded = grpc.stream_stream_rpc_method_handler, _guard_stream(name, fn, restriction)
        elif server_stream:
            make, guarded = grpc.unary_stream_rpc_method_handler, _guard_stream(name, fn, restriction)
        else:
            make, guarded = grpc.unary_unary_rpc_method_handler, _guard_unary(name, fn, restriction)
        handlers[name] = make(
            guarded, request_deserializer=_deserializer(req_cls), response_serializer=resp_cls.SerializeToString
        )
    return grpc.method_handlers_generic_handler(service, handlers)


class InferenceServicer:
    """The RPCs. Handlers return the response or raise ``InferenceError``; the guards above
    turn errors into statuses (or in-stream error responses)."""

    def __init__(self, dataplane: DataPlaneAPI, forwarding: common.HeaderForwarding | None = None):
        self.dataplane = dataplane
        # --grpc-header-forward-pattern: the metadata that becomes request parameters
        self.forwarding = forwarding if forwarding is not None and forwarding.regex is not None else None

    # ------------------------------------------------------------------ health
    async def ServerLive(self, request, context):
        return pb.ServerLiveResponse(live=await self.dataplane.live())

    async def server_ready(self) -> bool:
        return await self.dataplane.ready()

    async def ServerReady(self, request, context):
        return pb.ServerReadyResponse(ready=await self.dataplane.ready())

    async def ModelReady(self, request, context):
        return pb.ModelReadyResponse(ready=await self.dataplane.model_ready(request.name, request.version))

    async def ServerMetadata(self, request, context):
        info = await self.dataplane.server_metadata()
        return pb.ServerMetadataResponse(name=info.name, version=info.version, extensions=info.extensions)

    # ------------------------------------------------------------------ model info
    async def ModelMetadata(self, request, context):
        metadata = await common.model_metadata(self.dataplane, request.name, request.version)
        return json_format.ParseDict(metadata, pb.ModelMetadataResponse())

    async def ModelConfig(self, request, context):
        model = await self.dataplane.model(request.name, request.version)
        response = pb.ModelConfigResponse()
        response.config.CopyFrom(model.config)
        return response

    async def ModelStatistics(self, request, context):
        rows = await common.model_statistics(self.dataplane, request.name, request.version)
        return json_format.ParseDict({"model_stats": rows}, pb.ModelStatisticsResponse())

    # ------------------------------------------------------------------ inference
    def _collect(self, request, model, context):
        forwarded = self.forwarding.select(context.invocation_metadata() or ()) if self.forwarding else None
        wire = codec.collect(request, model, self.dataplane.shm, forwarded)
        if self.dataplane.tracing_active:  # the client's W3C trace context, only while tracing
            wire.traceparent = traceparent_from(context.invocation_metadata())
        return wire

    async def _infer(self, request, model, context):
        """Collect against the model, execute, await the encoded outputs. Raises InferenceError."""
        return await self.dataplane.infer(self._collect(request, model, context))

    async def ModelInfer(self, request, context):
        model = await self.dataplane.model(request.model_name, request.model_version)
        if model.decoupled:
            raise unimplemented("ModelInfer RPC doesn't support models with decoupled transaction policy")
        encoded = await self._infer(request, model, context)
        return codec.build_response(model, request.id, encoded)

    async def _stream_decoupled(self, request, model, responses: asyncio.Queue, context) -> None:
        """Stream each response of a decoupled model as the model yields it; then an empty
        final response if the client asked for one (triton_enable_empty_final_response)."""
        loop = asyncio.get_running_loop()
        wire = self._collect(request, model, context)

        def put(encoded):
            if isinstance(encoded, InferenceError):
                # an error response between results: in-stream, as a failed request's (Triton
                # 2.51 echoes only the id), and the request's later responses still follow
                msg = pb.ModelStreamInferResponse(error_message=encoded.message)
                msg.infer_response.id = request.id
                responses.put_nowait((msg, encoded))
                return
            msg = pb.ModelStreamInferResponse()
            msg.infer_response.CopyFrom(codec.build_response(model, request.id, encoded, final_flag=False))
            responses.put_nowait((msg, None))

        # called from the instance thread; call_soon_threadsafe keeps the order
        wire.emit = lambda encoded: loop.call_soon_threadsafe(put, encoded)
        await self.dataplane.infer(wire)
        if wire.parameters.get("triton_enable_empty_final_response"):
            msg = pb.ModelStreamInferResponse()
            msg.infer_response.CopyFrom(codec.build_response(model, request.id, [], final_flag=True))
            responses.put_nowait((msg, None))

    async def ModelStreamInfer(self, request_iterator, context):
        """Bidirectional stream: every request gets a response (errors in-stream), always.

        Requests are processed concurrently (a client may pipeline them); a failed request --
        including one whose bytes do not parse -- gets ``error_message`` plus its id echoed,
        and the stream stays open unless the client asked for ``triton_grpc_error: true`` at
        stream start.
        """
        close_on_error = any(
            k == "triton_grpc_error" and v.lower() == "true" for k, v in context.invocation_metadata() or ()
        )
        responses: asyncio.Queue = asyncio.Queue()
        tasks: set[asyncio.Task] = set()
        loop = asyncio.get_running_loop()
        # Requests whose answers are not yet written: a client that sends without reading
        # stops being read at this bound (HTTP/2 flow control then holds it back) instead of
        # growing the server's response queue without end.
        in_flight = asyncio.Semaphore(MAX_STREAM_IN_FLIGHT)

        async def one(request, model, lookup_error):
            try:
                await answer(request, model, lookup_error)
            finally:
                responses.put_nowait(_ANSWERED)  # after all of this request's responses

        async def answer(request, model, lookup_error):
            try:
                if isinstance(request, _Malformed):
                    raise request.error()
                if lookup_error is not None:
                    raise lookup_error
                if model.decoupled:
                    await self._stream_decoupled(request, model, responses, context)
                    return
                encoded = await self._infer(request, model, context)
                msg = pb.ModelStreamInferResponse()
                msg.infer_response.CopyFrom(codec.build_response(model, request.id, encoded, final_flag=True))
                responses.put_nowait((msg, None))
            except asyncio.CancelledError:
                raise
            except Exception as e:
                err = common.failure("ModelStreamInfer", e, log)
                # Triton 2.51 echoes only the id with an in-stream error
                msg = pb.ModelStreamInferResponse(error_message=err.message)
                msg.infer_response.id = request.id
                responses.put_nowait((msg, err))

        async def reader():
            try:
                async for request in request_iterator:
                    await in_flight.acquire()
                    # The model is resolved here, in arrival order, and each task's first step
                    # (decode and submit) then runs in creation order: a stream's requests reach
                    # the scheduler in the order they were sent (a sequence's START first) even
                    # when resolving waits on the engine process (--frontend-processes > 1)
                    model, lookup_error = None, None
                    if not isinstance(request, _Malformed):
                        try:
                            model = await self.dataplane.model(request.model_name, request.model_version)
                        except InferenceError as e:
                            lookup_error = e
                    t = loop.create_task(one(request, model, lookup_error))
                    tasks.add(t)
                    t.add_done_callback(tasks.discard)
                while tasks:
                    await asyncio.gather(*list(tasks), return_exceptions=True)
            finally:
                responses.put_nowait(None)

        reader_task = loop.create_task(reader())
        try:
            while True:
                item = await responses.get()
                if item is None:
                    break
                if item is _ANSWERED:
                    in_flight.release()
                    continue
                msg, err = item
                if err is not None and close_on_error:
                    raise err
                yield msg
            await reader_task
        finally:
            reader_task.cancel()
            for t in list(tasks):
                t.cancel()

    # ------------------------------------------------------------------ repository
    async def RepositoryIndex(self, request, context):
        common.refuse_repository_name(request.repository_name)
        response = pb.RepositoryIndexResponse()
        rows = await self.dataplane.repository_index(request.ready)
        for name, version, state, reason in rows:
            m = response.models.add()
            m.name, m.version, m.state, m.reason = name, version, state, reason
        return response

    async def RepositoryModelLoad(self, request, context):
        common.refuse_repository_name(request.repository_name)
        config_json, files = common.load_parameters(request.parameters.items(), _config_param, _file_param)
        await self.dataplane.load(request.model_name, config_json, files)
        return pb.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(self, request, context):
        common.refuse_repository_name(request.repository_name)
        unload_dependents = False
        if "unload_dependents" in request.parameters:
            param = request.parameters["unload_dependents"]
            if param.WhichOneof("parameter_choice") != "bool_param":
                raise invalid_argument("invalid value type for 'unload_dependents' parameter, expected bool_param.")
            unload_dependents = param.bool_param
        await self.dataplane.unload(request.model_name, unload_dependents)
        return pb.RepositoryModelUnloadResponse()

    # ------------------------------------------------------------------ shared memory
    async def SystemSharedMemoryStatus(self, request, context):
        response = pb.SystemSharedMemoryStatusResponse()
        for r in await self.dataplane.shm_status(request.name):
            s = response.regions[r.name]
            s.name, s.key, s.offset, s.byte_size = r.name, r.key, r.offset, r.byte_size
        return response

    async def SystemSharedMemoryRegister(self, request, context):
        await self.dataplane.shm_register(request.name, request.key, request.offset, request.byte_size)
        return pb.SystemSharedMemoryRegisterResponse()

    async def SystemSharedMemoryUnregister(self, request, context):
        await self.dataplane.shm_unregister(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    async def CudaSharedMemoryStatus(self, request, context):
        await self.dataplane.cuda_shm_status(request.name)
        return pb.CudaSharedMemoryStatusResponse()

    async def CudaSharedMemoryRegister(self, request, context):
        await self.dataplane.cuda_shm_register()
        return pb.CudaSharedMemoryRegisterResponse()

    async def CudaSharedMemoryUnregister(self, request, context):
        await self.dataplane.cuda_shm_unregister(request.name)
        return pb.CudaSharedMemoryUnregisterResponse()

    # ------------------------------------------------------------------ settings
    async def LogSettings(self, request, context):
        current = await self.dataplane.update_log_settings(
            {key: _setting(value) for key, value in request.settings.items()}
        )
        response = pb.LogSettingsResponse()
        for key, value in current.items():
            v = response.settings[key]
            if isinstance(value, bool):
                v.bool_param = value
            elif isinstance(value, int):
                v.uint32_param = value
            else:
                v.string_param = value
        return response

    async def TraceSetting(self, request, context):
        current = await self.dataplane.trace_settings(
            request.model_name, {key: list(value.value) for key, value in request.settings.items()}
        )
        response = pb.TraceSettingResponse()
        for key, values in current.items():
            response.settings[key].value.extend(values)
        return response

    # ------------------------------------------------------------------ registration
    def generic_handler(self, restrictions: dict[str, Restriction] | None = None):
        return _generic_handler(SERVICE_NAME, self, restrictions or {})


def _config_param(key: str, p) -> str:
    if p.WhichOneof("parameter_choice") != "string_param":
        raise invalid_argument(f"invalid value type for load parameter '{key}', expected string_param.")
    return p.string_param


def _file_param(key: str, p) -> bytes:
    if p.WhichOneof("parameter_choice") != "bytes_param":
        raise invalid_argument(f"invalid value type for load parameter '{key}', expected bytes_param.")
    return p.bytes_param


def _setting(value):
    kind = value.WhichOneof("parameter_choice")
    if kind is None:
        raise invalid_argument("log setting has no value")
    return getattr(value, kind)


class HealthServicer:
    """grpc.health.v1.Health: SERVING iff ServerReady (what grpc-health-probe and k8s check)."""

    def __init__(self, inference: InferenceServicer):
        self.inference = inference

    async def _status(self):
        try:
            return _SERVING if await self.inference.server_ready() else _NOT_SERVING
        except Exception:
            return _UNKNOWN

    async def Check(self, request, context):
        # as Triton's: a readiness error is the call's status (UNAVAILABLE "Server exiting"
        # while the server stops), not a SERVING/NOT_SERVING answer
        ready = await self.inference.server_ready()
        return health_pb.HealthCheckResponse(status=_SERVING if ready else _NOT_SERVING)

    async def Watch(self, request, context):
        last = None
        while True:
            status = await self._status()
            if status != last:
                yield health_pb.HealthCheckResponse(status=status)
                last = status
            await asyncio.sleep(1.0)

    def generic_handler(self, restrictions: dict[str, Restriction] | None = None):
        return _generic_handler(HEALTH_SERVICE_NAME, self, restrictions or {})
