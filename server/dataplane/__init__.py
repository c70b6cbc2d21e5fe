"""The data plane: ``DataPlaneAPI`` (api.py), the one interface both frontends call, and
``DataPlane``, its implementation in the engine's process.

Frontends own the wire (transport, message formats, mapping statuses onto it); the data
plane owns the semantics Triton defines independently of the wire: health, metadata,
statistics, repository control, shared-memory registration, log and trace settings, and
inference (accepting a request, normalizing it, preparing its outputs, submitting it to the
engine). It raises ``InferenceError`` with Triton's status and text, which each frontend
renders its way. In the spirit of MLServer's DataPlane and of Triton's split between its
frontends and core.
"""

from __future__ import annotations

import asyncio
import functools

from .. import __version__
from ..engine.model_version import ModelVersion
from ..engine.repository import ModelRepository, parse_version
from ..engine.request import EncodedOutput, InferenceRequest
from ..engine.tracing import Tracer
from ..errors import InferenceError, Status, invalid_argument, not_found, unavailable, unimplemented
from ..log_settings import LogSettings
from ..shared_memory import Region, SystemSharedMemoryManager
from . import bls
from .api import SERVER_EXITING, SERVER_NOT_READY, DataPlaneAPI, ServerInfo
from .tensors import WireRequest, encode_outputs, engine_request, normalize

__all__ = [
    "EXTENSIONS",
    "SERVER_EXITING",
    "SERVER_NOT_READY",
    "SHUTTING_DOWN",
    "DataPlane",
    "DataPlaneAPI",
    "ServerInfo",
    "WireRequest",
]

# Only what really works (ServerMetadata is how clients discover features); Triton's names.
EXTENSIONS = (
    "classification",
    "sequence",  # sequence batching + ModelStreamInfer
    "model_repository",
    "schedule_policy",  # priorities, queue policies, request timeouts
    "model_configuration",
    "system_shared_memory",
    "parameters",
    "statistics",
    "trace",  # TraceSetting, --trace-config (server/engine/tracing.py)
    "logging",
)
SHUTTING_DOWN = "GRPC server is shutting down and has stopped accepting new requests."  # Triton's text


class DataPlane(DataPlaneAPI):
    """The data plane in the engine's process: frontends in this process call it directly,
    and the engine's IPC server calls it for the frontend processes (``submit`` for their
    requests, normalized where they were received)."""

    def __init__(
        self,
        repository: ModelRepository,
        shm: SystemSharedMemoryManager,
        log_settings: LogSettings,
        server_id: str = "triton",
        tracer: Tracer | None = None,
    ):
        self.repository = repository
        if repository is not None:  # (a data plane for a test may have none)
            # BLS requests from instance processes are clients of the data plane
            repository.instance_calls = functools.partial(bls.serve_call, self.model, self.submit)
        self.shm = shm
        # how every request's outputs are prepared: one partial for all, not one per request
        self._encode = functools.partial(encode_outputs, shm=shm)
        self.log_settings = log_settings
        self.server_id = server_id
        self.exiting = False  # set at shutdown: not ready, new inference refused
        # False while the server is still starting its listeners: a frontend process already
        # serving HTTP must not report the server ready before the others are up
        self.started = True
        self.tracer = tracer or Tracer()
        # ``infer``, ``load`` and ``unload`` calls not yet answered, and who waits for there to
        # be none (the shutdown: ``drained``)
        self.in_flight = 0
        self._drained: asyncio.Event | None = None

    # ------------------------------------------------------------------ health
    async def live(self) -> bool:
        if self.exiting:
            raise unavailable(SERVER_EXITING)
        # live once every listener is up (before, with frontend processes, one process may
        # already answer while the others are starting)
        return self.started

    async def ready(self) -> bool:
        if self.exiting:
            raise unavailable(SERVER_EXITING)
        return self.started and await self.repository.server_ready()

    async def model_ready(self, name: str, version: str = "") -> bool:
        # Triton answers not-ready for unknown models (clients call it after unloads), but
        # rejects a malformed version string first
        if version:
            parse_version(version)
        if self.exiting:
            raise unavailable(SERVER_NOT_READY)
        return await self.repository.model_ready(name, version)

    async def server_metadata(self) -> ServerInfo:
        return ServerInfo(self.server_id, __version__, EXTENSIONS)

    # ------------------------------------------------------------------ models
    async def model(self, name: str, version: str = "") -> ModelVersion:
        """The model version a request addresses (metadata, config, decoding), or Triton's error."""
        return self.repository.get(name, version)

    async def ready_versions(self, name: str) -> list[int]:
        entry = self.repository.models.get(name)
        return entry.ready_versions() if entry is not None else []

    async def statistics(self, name: str = "", version: str = "") -> list[ModelVersion]:
        """The versions ModelStatistics reports, with Triton's errors and their order."""
        if version:
            parse_version(version)  # Triton rejects a bad version string first
        if not name:
            return sorted(self.repository.loaded_versions(), key=lambda v: (v.name, v.version))
        entry = self.repository.models.get(name)
        if entry is None or not entry.versions:
            raise invalid_argument(f"requested model '{name}' is not available")
        if not version:
            return [entry.versions[v] for v in entry.ready_versions()]
        try:
            return [self.repository.get(name, version)]
        except InferenceError as e:
            if e.status is Status.INVALID_ARG:
                raise
            raise invalid_argument(f"requested model version is not available for model '{name}'") from None

    # ------------------------------------------------------------------ inference
    def check_accepting(self) -> None:
        """UNAVAILABLE once shutdown has begun: checked once per request in each process it
        crosses (here by ``infer``, or by the IPC server before ``submit``)."""
        if self.exiting:
            # a call dispatched while shutdown was starting; in-flight ones are past this
            raise unavailable(SHUTTING_DOWN)

    async def infer(self, request: WireRequest) -> list[EncodedOutput]:
        """See ``DataPlaneAPI.infer``. If the awaiting coroutine is cancelled (client cancel,
        deadline), the scheduler's future is cancelled too, which withdraws the request if it
        is still queued."""
        self.check_accepting()
        self.in_flight += 1
        try:
            inputs, batch_size = normalize(request, self.shm)
            # the outputs are prepared (bytes, shared memory, classification) in the instance's thread
            ireq = engine_request(
                request.model,
                inputs,
                request.outputs,
                batch_size,
                request.id,
                request.parameters,
                request.priority,
                request.timeout_us,
                self._encode,
                emit=request.emit,
                tracer=self.tracer,
                traceparent=request.traceparent,
            )
            return await self.submit(ireq)
        finally:
            self._done()

    def _done(self) -> None:
        self.in_flight -= 1
        if not self.in_flight and self._drained is not None:
            self._drained.set()

    def submit(self, request: InferenceRequest) -> asyncio.Future:
        """Hand a normalized request to its model's scheduler: the scheduler's future (cancel
        it to withdraw the request). The caller has checked ``check_accepting``: ``infer``, or
        the engine's IPC server for a request a frontend process normalized (it calls this
        rather than ``infer`` to avoid a task per request)."""
        return request.model.scheduler.submit(request)

    async def drained(self) -> None:
        """Return once no ``infer``, ``load`` or ``unload`` call is in flight (the shutdown waits
        for this before it closes the listeners of this process and finalizes the models; its
        caller bounds the wait). Frontend processes wait for their own calls the same way (``RemoteDataPlane``);
        BLS requests are parts of requests in flight."""
        if self._drained is None:
            self._drained = asyncio.Event()
        if self.in_flight:
            self._drained.clear()
            await self._drained.wait()

    # ------------------------------------------------------------------ repository
    async def repository_index(self, ready_only: bool = False) -> list[tuple[str, str, str, str]]:
        # reads the model directories: off the event loop
        return await asyncio.get_running_loop().run_in_executor(None, self.repository.index, ready_only)

    async def load(self, name: str, config_json: str | None = None, files: dict[str, bytes] | None = None) -> None:
        # counted in flight as Triton counts its non-inference requests: the shutdown answers it
        self.in_flight += 1
        try:
            await self.repository.load(name, config_json, files or None)
        finally:
            self._done()

    async def unload(self, name: str, unload_dependents: bool = False) -> None:
        self.in_flight += 1
        try:
            await self.repository.unload(name, unload_dependents=unload_dependents)
        finally:
            self._done()

    # ------------------------------------------------------------------ shared memory
    async def shm_status(self, name: str = "") -> list[Region]:
        return self.shm.status(name)

    async def shm_register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        # opens and stats the client's object: off the event loop
        await asyncio.get_running_loop().run_in_executor(None, self.shm.register, name, key, offset, byte_size)

    async def shm_unregister(self, name: str = "") -> None:
        self.shm.unregister(name)

    # CUDA shared memory: there is no GPU, so no region can ever be registered. Status and
    # Unregister still answer exactly as Triton does with none registered, because clients
    # (Triton's shm examples, perf_analyzer --shared-memory) unregister all CUDA regions
    # before they start; only Register is refused. Not advertised in ServerMetadata.
    async def cuda_shm_status(self, name: str = "") -> list[Region]:
        if name:
            raise not_found(f"Unable to find cuda shared memory region: '{name}'")
        return []

    async def cuda_shm_register(self) -> None:
        raise unimplemented("CUDA shared memory is not supported by this server (no GPU)")

    async def cuda_shm_unregister(self, name: str = "") -> None:
        return None

    # ------------------------------------------------------------------ settings
    async def update_log_settings(self, settings: dict) -> dict:
        """Apply all of ``settings`` or none; the current settings."""
        self.log_settings.update_many(settings)
        return self.log_settings.as_dict()

    async def trace_settings(
        self, model: str = "", settings: dict[str, list[str]] | None = None
    ) -> dict[str, list[str]]:
        if model and not self.repository.is_ready(model):
            # (sic) Triton's text, with the space before the colon
            raise invalid_argument(f"Request for unknown model : {model}")
        if settings:
            return self.tracer.update(model, settings)
        return self.tracer.settings(model)

    @property
    def tracing_active(self) -> bool:  # type: ignore[override]
        return self.tracer.active
