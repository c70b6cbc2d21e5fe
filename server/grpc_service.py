"""Transport: Triton's ``inference.GRPCInferenceService`` and ``grpc.health.v1.Health`` on grpc.aio.

Handlers are registered with ``grpc.method_handlers_generic_handler`` on message classes from
our private descriptor pool (fpgaserve.protos), so nothing collides with tritonclient's
generated modules. This module turns ``InferenceError`` into gRPC status codes and messages;
tensor work is the codec's, model lifecycle the repository's, execution the scheduler's.
"""

from __future__ import annotations

import asyncio
import logging

import grpc

from fpgaserve.protos import (
    HEALTH_SERVICE_NAME,
    SERVICE_NAME,
    health as health_pb,
    inference as pb,
    service_methods,
)

from . import __version__, codec
from .errors import InferenceError, invalid_argument
from .log_settings import LogSettings
from .repository import parse_version

log = logging.getLogger("fpgaserve.grpc")

# Only what really works (ServerMetadata is how clients discover features).
EXTENSIONS = [
    "classification",
    "sequence",  # sequence batching + ModelStreamInfer
    "model_repository",
    "schedule_policy",  # priorities, queue policies, request timeouts
    "model_configuration",
    "system_shared_memory",
    "parameters",
    "statistics",
    "logging",
]

SHUTTING_DOWN = "GRPC server is shutting down and has stopped accepting new requests."  # Triton's text

_SERVING = health_pb.HealthCheckResponse.SERVING
_NOT_SERVING = health_pb.HealthCheckResponse.NOT_SERVING
_UNKNOWN = health_pb.HealthCheckResponse.UNKNOWN


def _fill_stat(dst, src) -> None:
    dst.count = src.count
    dst.ns = src.ns


class InferenceServicer:
    def __init__(self, repository, shm, log_settings: LogSettings):
        self.repository = repository
        self.shm = shm
        self.log_settings = log_settings
        self.exiting = False
        self._trace = {
            "trace_file": [""],
            "trace_level": ["OFF"],
            "trace_rate": ["1000"],
            "trace_count": ["-1"],
            "log_frequency": ["0"],
            "trace_mode": ["triton"],
        }

    # ------------------------------------------------------------------ health
    async def ServerLive(self, request, context):
        return pb.ServerLiveResponse(live=True)

    def server_ready(self) -> bool:
        return not self.exiting and self.repository.all_ready()

    async def ServerReady(self, request, context):
        return pb.ServerReadyResponse(ready=self.server_ready())

    async def ModelReady(self, request, context):
        # Triton answers OK/ready=false for unknown models (clients call it after unloads),
        # but rejects a malformed version string first.
        if request.version:
            try:
                parse_version(request.version)
            except InferenceError as e:
                await context.abort(e.code, e.message)
        ready = not self.exiting and self.repository.is_ready(request.name, request.version)
        return pb.ModelReadyResponse(ready=ready)

    async def ServerMetadata(self, request, context):
        return pb.ServerMetadataResponse(name="triton", version=__version__, extensions=EXTENSIONS)

    # ------------------------------------------------------------------ model info
    async def ModelMetadata(self, request, context):
        try:
            model = self.repository.get(request.name, request.version)
        except InferenceError as e:
            await context.abort(e.code, e.message)
        entry = self.repository.models[model.name]
        response = pb.ModelMetadataResponse(
            name=model.name,
            versions=[str(v) for v in entry.ready_versions()],
            platform=model.platform,
        )
        batch = [-1] if model.max_batch_size > 0 else []
        for specs, dst in ((model.inputs, response.inputs), (model.outputs, response.outputs)):
            for spec in specs.values():
                t = dst.add()
                t.name = spec.name
                t.datatype = spec.datatype.wire
                t.shape.extend(batch + list(spec.dims))
        return response

    async def ModelConfig(self, request, context):
        try:
            model = self.repository.get(request.name, request.version)
        except InferenceError as e:
            await context.abort(e.code, e.message)
        response = pb.ModelConfigResponse()
        response.config.CopyFrom(model.config)
        return response

    async def ModelStatistics(self, request, context):
        response = pb.ModelStatisticsResponse()
        if request.name:
            entry = self.repository.models.get(request.name)
            if entry is None or not entry.versions:
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT, f"requested model '{request.name}' is not available"
                )
            if request.version:
                try:
                    versions = [self.repository.get(request.name, request.version)]
                except InferenceError as e:
                    if e.code == grpc.StatusCode.INVALID_ARGUMENT:
                        await context.abort(e.code, e.message)
                    await context.abort(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"requested model version is not available for model '{request.name}'",
                    )
            else:
                versions = [entry.versions[v] for v in entry.ready_versions()]
        else:
            versions = sorted(self.repository.loaded_versions(), key=lambda v: (v.name, v.version))
        for mv in versions:
            s = mv.stats
            ms = response.model_stats.add()
            ms.name = mv.name
            ms.version = mv.version_str
            ms.last_inference = s.last_inference_ms
            ms.inference_count = s.inference_count
            ms.execution_count = s.execution_count
            st = ms.inference_stats
            for field in ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output"):
                _fill_stat(getattr(st, field), getattr(s, field))
            for size in sorted(s.batch_stats):
                b = s.batch_stats[size]
                bs = ms.batch_stats.add()
                bs.batch_size = size
                _fill_stat(bs.compute_input, b.compute_input)
                _fill_stat(bs.compute_infer, b.compute_infer)
                _fill_stat(bs.compute_output, b.compute_output)
        return response

    # ------------------------------------------------------------------ inference
    async def _infer(self, request, model=None):
        """Decode, schedule, await, encode. Raises InferenceError."""
        if self.exiting:
            # a call gRPC dispatched while shutdown was starting; in-flight ones are past this
            raise InferenceError(grpc.StatusCode.UNAVAILABLE, SHUTTING_DOWN)
        if model is None:
            model = self.repository.get(request.model_name, request.model_version)
        ireq = codec.decode_request(request, model, self.shm)
        # If this coroutine is cancelled (client cancel / deadline), awaiting cancels the
        # future too, which withdraws the request if it is still queued.
        encoded = await model.scheduler.submit(ireq)
        return model, encoded

    async def ModelInfer(self, request, context):
        try:
            if self.exiting:
                raise InferenceError(grpc.StatusCode.UNAVAILABLE, SHUTTING_DOWN)
            model = self.repository.get(request.model_name, request.model_version)
            if model.decoupled:
                raise InferenceError(
                    grpc.StatusCode.UNIMPLEMENTED,
                    "ModelInfer RPC doesn't support models with decoupled transaction policy",
                )
            model, encoded = await self._infer(request, model)
        except InferenceError as e:
            await context.abort(e.code, e.message)
        return codec.build_response(model, request.id, encoded)

    async def _stream_decoupled(self, request, model, responses: asyncio.Queue) -> None:
        """Stream each response of a decoupled model as the model yields it; then an empty
        final response if the client asked for one (triton_enable_empty_final_response)."""
        loop = asyncio.get_running_loop()
        ireq = codec.decode_request(request, model, self.shm)

        def put(encoded):
            msg = pb.ModelStreamInferResponse()
            msg.infer_response.CopyFrom(codec.build_response(model, request.id, encoded, final_flag=False))
            responses.put_nowait((msg, None))

        # called from the instance thread; call_soon_threadsafe keeps the order
        ireq.emit = lambda encoded: loop.call_soon_threadsafe(put, encoded)
        await model.scheduler.submit(ireq)
        if ireq.parameters.get("triton_enable_empty_final_response"):
            msg = pb.ModelStreamInferResponse()
            msg.infer_response.CopyFrom(codec.build_response(model, request.id, [], final_flag=True))
            responses.put_nowait((msg, None))

    async def ModelStreamInfer(self, request_iterator, context):
        """Bidirectional stream: every request gets exactly one response, errors in-stream.

        Requests are processed concurrently (a client may pipeline them); a failed request
        gets ``error_message`` plus its id/model echoed, and the stream stays open unless
        the client asked for ``triton_grpc_error: true`` at stream start.
        """
        close_on_error = any(
            k == "triton_grpc_error" and v.lower() == "true" for k, v in context.invocation_metadata()
        )
        responses: asyncio.Queue = asyncio.Queue()
        tasks: set[asyncio.Task] = set()
        loop = asyncio.get_running_loop()

        async def one(request):
            try:
                model = self.repository.get(request.model_name, request.model_version)
                if model.decoupled:
                    await self._stream_decoupled(request, model, responses)
                    return
                model, encoded = await self._infer(request, model)
                msg = pb.ModelStreamInferResponse()
                msg.infer_response.CopyFrom(codec.build_response(model, request.id, encoded, final_flag=True))
                responses.put_nowait((msg, None))
            except InferenceError as e:
                # Triton 2.51 echoes only the id with an in-stream error
                msg = pb.ModelStreamInferResponse(error_message=e.message)
                msg.infer_response.id = request.id
                responses.put_nowait((msg, e))

        async def reader():
            try:
                async for request in request_iterator:
                    t = loop.create_task(one(request))
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
                msg, err = item
                if err is not None and close_on_error:
                    await context.abort(err.code, err.message)
                yield msg
            await reader_task
        finally:
            reader_task.cancel()
            for t in list(tasks):
                t.cancel()

    # ------------------------------------------------------------------ repository
    async def RepositoryIndex(self, request, context):
        if request.repository_name:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "'repository_name' specification is not supported")
        response = pb.RepositoryIndexResponse()
        for name, version, state, reason in self.repository.index(ready_only=request.ready):
            m = response.models.add()
            m.name, m.version, m.state, m.reason = name, version, state, reason
        return response

    async def RepositoryModelLoad(self, request, context):
        if request.repository_name:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "'repository_name' specification is not supported")
        config_json = None
        files: dict[str, bytes] = {}
        for key, p in request.parameters.items():
            kind = p.WhichOneof("parameter_choice")
            if key == "config":
                if kind != "string_param":
                    await context.abort(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        "invalid value type for load parameter 'config', expected string_param.",
                    )
                config_json = p.string_param
            elif key.startswith("file:"):
                if kind != "bytes_param":
                    await context.abort(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"invalid value type for load parameter '{key}', expected bytes_param.",
                    )
                files[key[len("file:"):]] = p.bytes_param
            else:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unrecognized load parameter '{key}'.")
        try:
            await self.repository.load(request.model_name, config_json, files or None)
        except InferenceError as e:
            await context.abort(e.code, e.message)
        return pb.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(self, request, context):
        if request.repository_name:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "'repository_name' specification is not supported")
        try:
            await self.repository.unload(request.model_name)
        except InferenceError as e:
            await context.abort(e.code, e.message)
        return pb.RepositoryModelUnloadResponse()

    # ------------------------------------------------------------------ shared memory
    async def SystemSharedMemoryStatus(self, request, context):
        try:
            regions = self.shm.status(request.name)
        except InferenceError as e:
            await context.abort(e.code, e.message)
        response = pb.SystemSharedMemoryStatusResponse()
        for r in regions:
            s = response.regions[r.name]
            s.name, s.key, s.offset, s.byte_size = r.name, r.key, r.offset, r.byte_size
        return response

    async def SystemSharedMemoryRegister(self, request, context):
        try:
            await asyncio.get_running_loop().run_in_executor(
                None, self.shm.register, request.name, request.key, request.offset, request.byte_size
            )
        except InferenceError as e:
            await context.abort(e.code, e.message)
        return pb.SystemSharedMemoryRegisterResponse()

    async def SystemSharedMemoryUnregister(self, request, context):
        self.shm.unregister(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    # CUDA shared memory: there is no GPU, so no region can ever be registered. Status and
    # Unregister still answer exactly as Triton does with none registered, because clients
    # (Triton's shm examples, perf_analyzer --shared-memory) unregister all CUDA regions
    # before they start; only Register is refused. Not advertised in ServerMetadata.
    async def CudaSharedMemoryStatus(self, request, context):
        if request.name:
            await context.abort(
                grpc.StatusCode.NOT_FOUND, f"Unable to find cuda shared memory region: '{request.name}'"
            )
        return pb.CudaSharedMemoryStatusResponse()

    async def CudaSharedMemoryRegister(self, request, context):
        await context.abort(
            grpc.StatusCode.UNIMPLEMENTED, "CUDA shared memory is not supported by this server (no GPU)"
        )

    async def CudaSharedMemoryUnregister(self, request, context):
        return pb.CudaSharedMemoryUnregisterResponse()

    # ------------------------------------------------------------------ settings
    async def LogSettings(self, request, context):
        try:
            for key, value in request.settings.items():
                self.log_settings.update(key, _setting(value))
        except InferenceError as e:
            await context.abort(e.code, e.message)
        response = pb.LogSettingsResponse()
        for key, value in self.log_settings.as_dict().items():
            v = response.settings[key]
            if isinstance(value, bool):
                v.bool_param = value
            elif isinstance(value, int):
                v.uint32_param = value
            else:
                v.string_param = value
        return response

    async def TraceSetting(self, request, context):
        # Request tracing is not implemented: we report it OFF (honestly) and refuse to turn
        # it on rather than pretend. Other trace settings are stored and echoed.
        if request.model_name and not self.repository.is_ready(request.model_name):
            # (sic) Triton's text, with the space before the colon
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"Request for unknown model : {request.model_name}"
            )
        for key, value in request.settings.items():
            values = list(value.value)
            if key not in self._trace:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown trace setting '{key}'")
            if key == "trace_level" and any(v.upper() != "OFF" for v in values):
                await context.abort(grpc.StatusCode.UNIMPLEMENTED, "request tracing is not supported by fpgaserve; trace_level can only be OFF")
            if values:
                self._trace[key] = values
        response = pb.TraceSettingResponse()
        for key, values in self._trace.items():
            response.settings[key].value.extend(values)
        return response

    # ------------------------------------------------------------------ registration
    def generic_handler(self):
        handlers = {}
        for name, req_cls, resp_cls, client_stream, server_stream in service_methods(SERVICE_NAME):
            fn = getattr(self, name)
            if client_stream and server_stream:
                make = grpc.stream_stream_rpc_method_handler
            elif server_stream:
                make = grpc.unary_stream_rpc_method_handler
            else:
                make = grpc.unary_unary_rpc_method_handler
            handlers[name] = make(
                fn, request_deserializer=req_cls.FromString, response_serializer=resp_cls.SerializeToString
            )
        return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)


def _setting(value):
    kind = value.WhichOneof("parameter_choice")
    if kind is None:
        raise invalid_argument("log setting has no value")
    return getattr(value, kind)


class HealthServicer:
    """grpc.health.v1.Health: SERVING iff ServerReady (what grpc-health-probe and k8s check)."""

    def __init__(self, inference: InferenceServicer):
        self.inference = inference

    def _status(self):
        try:
            return _SERVING if self.inference.server_ready() else _NOT_SERVING
        except Exception:
            return _UNKNOWN

    async def Check(self, request, context):
        return health_pb.HealthCheckResponse(status=self._status())

    async def Watch(self, request, context):
        last = None
        while True:
            status = self._status()
            if status != last:
                yield health_pb.HealthCheckResponse(status=status)
                last = status
            await asyncio.sleep(1.0)

    def generic_handler(self):
        handlers = {}
        for name, req_cls, resp_cls, _client_stream, server_stream in service_methods(HEALTH_SERVICE_NAME):
            make = grpc.unary_stream_rpc_method_handler if server_stream else grpc.unary_unary_rpc_method_handler
            handlers[name] = make(
                getattr(self, name), request_deserializer=req_cls.FromString, response_serializer=resp_cls.SerializeToString
            )
        return grpc.method_handlers_generic_handler(HEALTH_SERVICE_NAME, handlers)
