"""``DataPlaneAPI``: the one seam between the transports and the core.

Both frontends (gRPC, HTTP) call this interface and nothing else of the core; two classes
implement it: ``DataPlane``, in the engine's process, and ``ipc.remote.RemoteDataPlane``, in
a frontend process (``--frontend-processes N``), which serves it from the engine over IPC.
A frontend therefore cannot tell, and need not care, which process executes its requests.

The contract:

* requests cross as ``WireRequest``s (tensors.py): wire-neutral, collected and checked in the
  frontend's order, not yet validated against the model. ``infer`` refuses new work once the
  server is shutting down, then normalizes the request (once: ``tensors.normalize``) and
  executes it; the frontend never normalizes.
* failures are ``InferenceError``s with a wire-neutral ``errors.Status`` and Triton's text;
  each frontend maps the status onto its wire.
* results are plain values (``ServerInfo``, the views below, lists and dicts) that a frontend
  renders in its wire format; a remote data plane gets them from the engine, pickled.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

# the statistics frontends render: the engine's counters, re-exported with the API
from ..engine.statistics import Duration, ModelStatistics

if TYPE_CHECKING:
    from ..engine.model_version import ModelVersion
    from ..engine.request import EncodedOutput
    from ..shared_memory import SystemSharedMemoryManager
    from .tensors import WireRequest


# Triton 2.51's answers to health requests while the server stops (core InferenceServer::IsLive,
# IsReady and ModelIsReady, r24.10: UNAVAILABLE once it is exiting)
SERVER_EXITING = "Server exiting"
SERVER_NOT_READY = "Server not ready"


@dataclass(frozen=True)
class ServerInfo:
    name: str
    version: str
    extensions: tuple[str, ...]


class VersionStatistics(Protocol):
    """One model version's statistics as ``statistics`` reports them (a loaded
    ``ModelVersion`` in the engine's process; a copy of its counters in a frontend process)."""

    @property
    def name(self) -> str: ...

    @property
    def version_str(self) -> str: ...

    @property
    def stats(self) -> ModelStatistics: ...


class RegionStatus(Protocol):
    """One registered shared-memory region as ``shm_status`` reports it."""

    @property
    def name(self) -> str: ...

    @property
    def key(self) -> str: ...

    @property
    def offset(self) -> int: ...

    @property
    def byte_size(self) -> int: ...


class DataPlaneAPI(ABC):
    """Everything a frontend asks of the core: Triton's semantics independent of the wire
    (health, metadata, statistics, inference, repository control, shared memory, log and
    trace settings). Every method raises ``InferenceError`` with Triton's status and text."""

    # The system shared-memory registry (the engine's, or a frontend process's mirror of
    # it): the codecs check a request's regions with it in the frontend's order, before the
    # inputs are normalized.
    shm: SystemSharedMemoryManager
    # True while any request may be traced: the frontends then collect each request's W3C
    # ``traceparent`` into ``WireRequest.traceparent`` (and never otherwise: no cost when off)
    tracing_active: bool = False

    # ------------------------------------------------------------------ health
    @abstractmethod
    async def live(self) -> bool: ...

    @abstractmethod
    async def ready(self) -> bool: ...

    @abstractmethod
    async def model_ready(self, name: str, version: str = "") -> bool:
        """False for an unknown model (as Triton); a malformed version string is an error."""

    @abstractmethod
    async def server_metadata(self) -> ServerInfo: ...

    # ------------------------------------------------------------------ models
    @abstractmethod
    async def model(self, name: str, version: str = "") -> ModelVersion:
        """The model version a request addresses (its metadata and config, what requests are
        collected and normalized against), or Triton's error."""

    @abstractmethod
    async def ready_versions(self, name: str) -> list[int]: ...

    @abstractmethod
    async def statistics(self, name: str = "", version: str = "") -> Sequence[VersionStatistics]:
        """The versions ModelStatistics reports (all loaded ones for no name), with Triton's
        errors and their order."""

    # ------------------------------------------------------------------ inference
    @abstractmethod
    async def infer(self, request: WireRequest) -> list[EncodedOutput]:
        """Refuse it if the server is shutting down (UNAVAILABLE), normalize it against
        ``request.model`` and execute it; its encoded outputs (``[]`` for a decoupled model,
        whose responses go to ``request.emit``). Cancelling the awaiting coroutine withdraws
        the request if it is still queued."""

    # ------------------------------------------------------------------ repository
    @abstractmethod
    async def repository_index(self, ready_only: bool = False) -> list[tuple[str, str, str, str]]:
        """(name, version, state, reason) rows."""

    @abstractmethod
    async def load(self, name: str, config_json: str | None = None, files: dict[str, bytes] | None = None) -> None:
        """Load or reload ``name``, with a config override (JSON) and files to serve it from."""

    @abstractmethod
    async def unload(self, name: str, unload_dependents: bool = False) -> None: ...

    # ------------------------------------------------------------------ shared memory
    @abstractmethod
    async def shm_status(self, name: str = "") -> Sequence[RegionStatus]: ...

    @abstractmethod
    async def shm_register(self, name: str, key: str, offset: int, byte_size: int) -> None: ...

    @abstractmethod
    async def shm_unregister(self, name: str = "") -> None: ...

    @abstractmethod
    async def cuda_shm_status(self, name: str = "") -> Sequence[RegionStatus]: ...

    @abstractmethod
    async def cuda_shm_register(self) -> None: ...

    @abstractmethod
    async def cuda_shm_unregister(self, name: str = "") -> None: ...

    # ------------------------------------------------------------------ settings
    @abstractmethod
    async def update_log_settings(self, settings: dict) -> dict:
        """Apply all of ``settings`` or none; the current settings."""

    @abstractmethod
    async def trace_settings(
        self, model: str = "", settings: dict[str, list[str]] | None = None
    ) -> dict[str, list[str]]:
        """Triton's TraceSetting: apply ``settings`` (all or none) globally or to ``model``;
        the settings in force there (server/engine/tracing.py)."""


__all__ = ["DataPlaneAPI", "Duration", "ModelStatistics", "RegionStatus", "ServerInfo", "VersionStatistics"]
