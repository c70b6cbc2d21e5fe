"""A model version and its repository entry: the objects every layer handles.

``ModelVersion`` is one loaded version of a model: its config (a ``ModelConfig`` message) and
the tensor specs the data plane validates requests against, its statistics and its scheduler.
A frontend process holds a snapshot of it (``ipc.remote``: the same class, no scheduler) to
collect and normalize requests where they arrive. ``ModelEntry`` is what the repository knows
about one model name, loaded or not; the states are Triton's (RepositoryIndex shows them).
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .. import model_config as mc
from ..errors import InferenceError, Status
from .statistics import ModelStatistics

if TYPE_CHECKING:
    from .scheduler import Scheduler

READY, UNAVAILABLE, LOADING, UNLOADING = "READY", "UNAVAILABLE", "LOADING", "UNLOADING"


class VersionLoadError(InferenceError):
    """A version that failed its load after its instances were built (its warm-up), in
    Triton's text: INVALID_ARGUMENT "load failed for model 'm': version 1 is at UNAVAILABLE
    state: <reason>;\n", the index showing the version UNAVAILABLE with ``reason``."""

    __slots__ = ("reason", "version")

    def __init__(self, name: str, version: int, reason: str):
        super().__init__(
            Status.INVALID_ARG,
            f"load failed for model '{name}': version {version} is at UNAVAILABLE state: {reason};\n",
        )
        self.version = version
        self.reason = reason


_VERSION_UIDS = itertools.count(1)


class ModelVersion:
    """One loaded version: what the codec validates against and the scheduler executes."""

    def __init__(
        self,
        name: str,
        version: int,
        config,
        version_dir: str,
        model_dir: str,
        labels: dict[str, list[str]] | None = None,
    ):
        self.name = name
        self.version = version
        self.version_str = str(version)
        self.config = config
        self.version_dir = version_dir
        self.model_dir = model_dir
        self.inputs = mc.input_specs(config)
        self.outputs = mc.output_specs(config)
        self.max_batch_size = config.max_batch_size
        self.required_input_count = sum(1 for s in self.inputs.values() if not s.optional)
        self.platform = config.platform or config.backend
        # decoupled: a request may get any number of responses (ModelStreamInfer only)
        self.decoupled = config.model_transaction_policy.decoupled
        self.stats = ModelStatistics()
        # identifies this load of the version across processes (a frontend decodes against a
        # snapshot; the engine checks the request still addresses the same load)
        self.uid = next(_VERSION_UIDS)
        # --engine-processes N > 1, in a frontend's snapshot: the engine process serving it
        self.engine = 0
        self.scheduler: Scheduler | None = None
        self.load_duration_s = 0.0
        self._labels = labels or {}
        # what the instances' own checks (``check_ready``) said last time they were asked:
        # why not ready, None if ready or never asked
        self.last_not_ready: str | None = None

    def labels(self, filename: str) -> list[str]:
        return self._labels.get(filename, [])

    def snapshot(self) -> tuple:
        """This version as plain values, for a frontend process to decode requests against
        (``from_snapshot``): what the IPC channel carries instead of the object."""
        return (
            self.name,
            self.version,
            self.uid,
            self.config.SerializeToString(),
            self._labels,
            self.version_dir,
            self.model_dir,
        )

    @classmethod
    def from_snapshot(cls, value: tuple) -> ModelVersion:
        """The version a ``snapshot`` describes (no scheduler: it executes nothing); an eighth
        value is the engine process that serves it (``--engine-processes``)."""
        name, number, uid, config_bytes, labels, version_dir, model_dir = value[:7]
        version = cls(name, number, mc.ModelConfig.FromString(config_bytes), version_dir, model_dir, labels)
        version.uid = uid
        if len(value) > 7:
            version.engine = value[7]
        return version

    def not_ready(self) -> str | None:
        """None while this version can serve, else why not, from what is known without asking
        anyone: an instance that is not ready (its process dead or restarting; Triton requires
        every instance ready, ``TritonModel::IsReady``) or no instance healthy (``unhealthy``)."""
        scheduler = self.scheduler
        if scheduler is None:
            return None
        for instance in scheduler.instances:
            backend = instance.backend
            if backend is None:
                continue
            try:
                why = backend.instance_ready()
            except Exception as e:  # a readiness check must not break readiness itself
                why = f"readiness check failed: {e}"
            if why is not None:
                return why
        return self.unhealthy()

    async def check_ready(self) -> str | None:
        """``not_ready``, then each instance's own check where it has one (a Python model's
        ``is_ready()``, on a worker thread: it may take its 5 s), instance by instance as
        Triton asks them; the first reason found. What the instances' checks said is kept for
        the repository index (``last_not_ready``)."""
        why = self.not_ready()
        scheduler = self.scheduler
        if why is not None or scheduler is None:
            return why
        loop = asyncio.get_running_loop()
        for instance in scheduler.instances:
            backend = instance.backend
            if backend is not None and backend.has_ready_check():
                why = await loop.run_in_executor(None, backend.check_ready)
                if why is not None:
                    break
        self.last_not_ready = why
        return why

    def unhealthy(self) -> str | None:
        """None while some instance can serve, else why none can (``Backend.health``): a loaded
        version whose every device is out of service is not ready, so load balancers and
        readiness probes turn away from the replica until it recovers."""
        scheduler = self.scheduler
        if scheduler is None:
            return None
        reasons = []
        for instance in scheduler.instances:
            backend = instance.backend
            try:
                why = backend.health() if backend is not None else None
            except Exception as e:  # a health check must not break readiness itself
                why = f"health check failed: {e}"
            if why is None:
                return None
            reasons.append(why)
        return "; ".join(dict.fromkeys(reasons)) if reasons else None


@dataclass
class ModelEntry:
    """Everything the registry knows about one model name."""

    name: str
    model_dir: str | None = None
    config: object | None = None  # the normalized ModelConfig last loaded
    versions: dict[int, ModelVersion] = field(default_factory=dict)
    # per-version (state, reason) for RepositoryIndex, including failed versions
    version_states: dict[int, tuple[str, str]] = field(default_factory=dict)
    state: str = ""  # "" = known from the repository but never loaded
    reason: str = ""
    signature: str = ""  # content signature for poll mode
    temp_dir: str | None = None  # materialized "file:" overrides
    # bumped by every load and unload: a drain that finishes after a newer load or unload
    # started must not overwrite that one's state
    generation: int = 0
    # an ensemble's composing models (from its last config read), and whether it was
    # unloaded because one of them went (it comes back when that one is loaded again)
    depends_on: tuple[str, ...] = ()
    dependency_unloaded: bool = False
    # loaded by a load request (or at startup) rather than only as an ensemble's composing
    # model: an unload with unload_dependents leaves such a model loaded, as Triton does
    explicit: bool = False

    def ready_versions(self) -> list[int]:
        return sorted(self.versions)
