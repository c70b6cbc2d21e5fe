"""The model registry: Triton-layout repositories, version policies, load/unload, control modes.

Layout: ``<repo>/<model>/config.pbtxt`` and numeric version folders ``<repo>/<model>/<n>/``
(names starting with "0" are ignored, like Triton). Control modes as tritonserver has them:

* ``none``     - load everything at start; load/unload RPCs are refused;
* ``explicit`` - load only ``--load-model`` names (``*`` = all) at start; RPCs load/unload;
* ``poll``     - load everything, then rescan every ``poll_secs`` and load new/changed,
                 unload removed models; RPCs are refused.

A model whose config or files are bad is UNAVAILABLE with the reason (RepositoryIndex shows
it); the others serve. Mutations are serialized by one lock; blocking work (reading files,
building backend instances) runs in a thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import itertools
import logging
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from fpgaserve.backends import BackendError, backend_class
from fpgaserve.backends.base import path_inside

from .. import datatypes
from .. import model_config as mc
from ..errors import (
    InferenceError,
    Status,
    escape_control,
    internal,
    invalid_argument,
    not_found,
    permission_denied,
    unavailable,
)
from . import bls, config_support, ensemble, warmup
from .batcher import DynamicBatcher
from .instance_process import ProcessBackend, hosted
from .latency import LatencyConfig, LatencyRecorder
from .memory import batch_memory
from .repoagents import RepositoryAgentError, run_load_agents
from .scheduler import DirectScheduler, ModelInstance, Scheduler
from .sequence import SequenceBatcher
from .statistics import ModelStatistics

log = logging.getLogger("fpgaserve.repository")

READY, UNAVAILABLE, LOADING, UNLOADING = "READY", "UNAVAILABLE", "LOADING", "UNLOADING"
CONTROL_MODES = ("none", "explicit", "poll")
NOT_ALLOWED = "explicit model load / unload is not allowed if polling is enabled"
# a config parameter that runs any backend's instances in their own processes
INSTANCE_PROCESS_PARAMETER = "instance_process"


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


def check_model_name(name: str) -> None:
    """A model name from a client names a directory: no separators, control characters, '..'."""
    if name in (".", "..") or "/" in name or "\\" in name or any(c < " " or c == "\x7f" for c in name):
        raise invalid_argument(f"invalid model name '{escape_control(name)}'")


def _read_labels(model_dir: Path, config) -> dict[str, list[str]]:
    """Each output's label_filename (relative to the model directory, and inside it), read at
    load: a missing or escaping label file is a load error, and requests never touch the disk."""
    labels: dict[str, list[str]] = {}
    for out in config.output:
        name = out.label_filename
        if not name or name in labels:
            continue
        try:
            path = path_inside(model_dir, model_dir, name, f"output '{out.name}' label_filename")
        except BackendError as e:
            raise mc.ConfigError(str(e)) from None
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                labels[name] = [line.rstrip("\n") for line in f]
        except OSError as e:
            raise mc.ConfigError(f"output '{out.name}' label_filename '{name}' cannot be read: {e.strerror}") from None
    return labels


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

    def labels(self, filename: str) -> list[str]:
        return self._labels.get(filename, [])

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


def _shown(text: str, limit: int = 64) -> str:
    """A client string as echoed in an error: the start of it, if it is long."""
    return text if len(text) <= limit else text[:limit] + "..."


def parse_version(version: str) -> int:
    """A request's version string, parsed like Triton's ``std::stol`` (leading blanks and
    sign allowed, trailing characters ignored), then checked to be > 0."""
    # std::stol: C-locale blanks and ASCII digits only (\s and \d would take Unicode ones)
    m = re.match(r"[ \t\n\v\f\r]*([+-]?[0-9]+)", version)
    # more than 19 digits is out of std::stol's range whatever they are (and int() of a
    # client's thousands of digits would raise, or cost quadratic time)
    if m is None or len(m.group(1).lstrip("+-").lstrip("0")) > 19:
        raise invalid_argument(
            f"failed to get model version from specified version string '{_shown(version)}' "
            "(details: stol), version should be an integral value > 0"
        )
    v = int(m.group(1))
    if not -(2**63) <= v < 2**63:  # std::stol's out_of_range
        raise invalid_argument(
            f"failed to get model version from specified version string '{_shown(version)}' "
            "(details: stol), version should be an integral value > 0"
        )
    if v < 0:
        raise invalid_argument(f"invalid model version specified '{version}' , version should be an integral value > 0")
    return v


def _dir_signature(model_dir: Path) -> str:
    """Hash of names, sizes and mtimes of every file under a model folder (poll mode)."""
    h = hashlib.sha256()
    for root, dirs, files in os.walk(model_dir):
        dirs.sort()
        for f in sorted(files):
            p = os.path.join(root, f)
            try:
                st = os.stat(p)
            except OSError:
                continue
            h.update(f"{os.path.relpath(p, model_dir)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _available_versions(model_dir: Path) -> list[int]:
    versions = []
    for child in model_dir.iterdir():
        if child.is_dir() and child.name.isdigit() and not child.name.startswith("0"):
            versions.append(int(child.name))
    return sorted(versions)


def _select_versions(config, available: list[int], source: str) -> list[int]:
    policy = config.version_policy
    kind = policy.WhichOneof("policy_choice")
    if kind == "all":
        chosen = list(available)
    elif kind == "specific":
        missing = [v for v in policy.specific.versions if v not in available]
        if missing:
            raise mc.ConfigError(f"{source}: version_policy requests versions {missing} that do not exist")
        chosen = sorted(set(policy.specific.versions))
    else:
        n = policy.latest.num_versions if kind == "latest" else 1
        chosen = available[-n:] if available else []
    if not chosen:
        raise mc.ConfigError(f"{source}: no version folder to load (expected numeric folders such as 1/)")
    return chosen


# Triton's AutoCompleteBackendFields: a config naming neither platform nor backend (e.g. a
# RepositoryModelLoad override such as {"max_batch_size": 16}) gets them from the model file
# found in the newest version folder.
_DETECTED_BACKENDS = (("model.onnx", "onnxruntime_onnx", "onnxruntime"), ("model.py", "", "numpy"))


def _detect_backend(config, model_dir: Path) -> None:
    for version in reversed(_available_versions(model_dir)):
        for filename, platform, backend in _DETECTED_BACKENDS:
            path = model_dir / str(version) / filename
            if path.is_file():
                if filename == "model.py" and _is_triton_python_model(path):
                    backend = "python"  # Triton's choice for a model.py; ours is numpy's Model
                config.platform, config.backend = platform, backend
                return


def _is_triton_python_model(path: Path) -> bool:
    """Whether a model.py is written for Triton's Python backend (defines TritonPythonModel)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return re.search(r"^class\s+TritonPythonModel\b", f.read(), re.MULTILINE) is not None
    except OSError:
        return False


def _auto_complete(config, backend_cls, version_dir: str) -> None:
    """Triton's auto-complete: fill inputs/outputs (and batching) from the model files."""
    completed = backend_cls.auto_complete(mc.config_dict(config), version_dir)
    if completed is not None:  # the model completed its config itself (Python backend)
        mc.replace_from_dict(config, completed)
        # Triton's normalizations apply to what the model added (a dynamic batcher's default
        # preferred size)
        mc.normalize(config, config.name, backend_cls.default_filename)
        return
    if config.input and config.output:
        return
    described = backend_cls.describe_io(mc.config_dict(config), version_dir)
    if described is None:
        return
    ins, outs, batched = described
    if batched and config.max_batch_size == 0 and not config.input and not config.output:
        # tritonserver's default-max-batch-size backend setting
        config.max_batch_size = 4
    if not batched and config.max_batch_size > 0:
        raise mc.ConfigError(
            f"model '{config.name}' has max_batch_size {config.max_batch_size} but its graph has no "
            "dynamic batch dimension"
        )
    for existing, described_list in ((config.input, ins), (config.output, outs)):
        if existing:
            continue
        for d in described_list:
            t = existing.add()
            t.name = d.name
            t.data_type = mc.pb.DataType.Value(datatypes.BY_WIRE[d.datatype].config)
            t.dims.extend(d.dims if d.dims else [1])


class ModelRepository:
    def __init__(
        self,
        paths: list[str],
        control_mode: str = "none",
        startup_models: list[str] | None = None,
        poll_secs: float = 15.0,
        strict_readiness: bool = True,
        backend_config: dict | None = None,
        unload_timeout_secs: float = 30.0,
        allow_code_upload: bool = False,
        auto_complete_config: bool = True,
        latency: LatencyConfig | None = None,
        model_config_name: str = "",
        owns=None,
    ):
        if control_mode not in CONTROL_MODES:
            raise ValueError(f"unknown model control mode '{control_mode}'")
        self.paths = [Path(p).resolve() for p in paths]
        # tritonserver's --model-config-name: each load reads <model>/configs/<name>.pbtxt when it
        # exists (looked up at every load, so poll and explicit reloads see files added later)
        self.model_config_name = model_config_name
        self.control_mode = control_mode
        self.startup_models = startup_models or []
        self.poll_secs = poll_secs
        self.strict_readiness = strict_readiness
        self.backend_config = backend_config or {}
        self.unload_timeout_secs = unload_timeout_secs
        self.allow_code_upload = allow_code_upload
        # tritonserver's --disable-auto-complete-config: configs load as written
        self.auto_complete_config = auto_complete_config
        # --metrics-config: which latency distributions each version records
        self.latency = latency or LatencyConfig()
        self.models: dict[str, ModelEntry] = {}
        self._lock = asyncio.Lock()
        self._poll_task: asyncio.Task | None = None
        # observers (metrics) called with (event, ModelVersion) on "load" / "unload"
        self.listeners: list = []
        # --engine-processes N > 1: (name, model folder) -> whether this engine process serves
        # the model (server/engine/placement.py); the others' models are not listed here
        self.owns = owns

    # ------------------------------------------------------------------ discovery
    def _scan(self, owned_only: bool = True) -> dict[str, Path]:
        """The model folders of the repositories (with ``owns``, only this engine process's,
        unless ``owned_only`` is False: a load routed here by the coordinator)."""
        found: dict[str, Path] = {}
        for repo in self.paths:
            if not repo.is_dir():
                log.error("model repository %s does not exist", repo)
                continue
            for child in sorted(repo.iterdir()):
                if child.is_dir() and not child.name.startswith("."):
                    if child.name in found:
                        log.error(
                            "model '%s' appears in more than one repository; using %s", child.name, found[child.name]
                        )
                        continue
                    found[child.name] = child
        if owned_only and self.owns is not None:
            found = {name: path for name, path in found.items() if self.owns(name, path)}
        return found

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        found = self._scan()
        for name in found:
            self.models.setdefault(name, ModelEntry(name, str(found[name])))
        if self.control_mode == "explicit":
            names = list(found) if "*" in self.startup_models else self.startup_models
        else:
            names = list(found)
        if self.owns is not None:  # another engine process loads its own models
            every = self._scan(owned_only=False)
            names = [n for n in names if n in found or n not in every]
        for name in names:
            if self.models[name].state:
                continue  # loaded (or tried) already, as a composing model of an ensemble
            try:
                await self.load(name, _startup=True)
            except InferenceError as e:
                log.error("%s", e.message)
        if self.control_mode == "poll":
            self._poll_task = asyncio.get_running_loop().create_task(self._poll_loop())

    async def stop(self) -> None:
        if self._poll_task:
            self._poll_task.cancel()
            try:
                await self._poll_task
            except asyncio.CancelledError:
                pass
        async with self._lock:
            for entry in self.models.values():
                old = list(entry.versions.values())
                entry.versions.clear()
                await self._drain(entry.name, old)
                self._cleanup_temp(entry)

    async def _poll_loop(self) -> None:
        while True:
            await asyncio.sleep(self.poll_secs)
            try:
                await self.poll_once()
            except Exception:
                log.exception("repository poll failed")

    async def poll_once(self) -> None:
        """Load new and changed models, unload removed ones (poll mode)."""
        found = await asyncio.get_running_loop().run_in_executor(None, self._scan)
        for name, path in found.items():
            entry = self.models.get(name)
            sig = await asyncio.get_running_loop().run_in_executor(None, _dir_signature, path)
            if entry is None or entry.signature != sig or entry.model_dir != str(path):
                self.models.setdefault(name, ModelEntry(name, str(path)))
                try:
                    await self.load(name, _startup=True)
                except InferenceError as e:
                    log.error("%s", e.message)
        for name in list(self.models):
            if name not in found and self.models[name].versions:
                await self.unload(name, _internal=True)
                self.models.pop(name, None)

    # ------------------------------------------------------------------ load / unload
    def check_explicit(self) -> None:
        if self.control_mode != "explicit":
            raise unavailable(NOT_ALLOWED)

    async def load(
        self, name: str, config_json: str | None = None, files: dict[str, bytes] | None = None, _startup: bool = False
    ) -> None:
        if not _startup:
            self.check_explicit()
            check_model_name(name)
        async with self._lock:
            old = await self._load_locked(name, config_json, files)
            self.models[name].explicit = True
            old += await self._reload_dependents(name, {name})
        # Versions the load replaced finish their requests outside the lock, so a model stuck
        # in execute() never blocks other loads, unloads or the index.
        await self._drain(name, old)

    async def _load_locked(self, name: str, config_json, files, chain: tuple[str, ...] = ()) -> list:
        """Build and swap in the new versions; returns the replaced ones (still to drain).
        ``chain``: the ensembles whose loading loads this model (to refuse a cycle)."""
        loop = asyncio.get_running_loop()
        found = await loop.run_in_executor(None, self._scan, False)
        entry = self.models.get(name)
        if files:
            if config_json is None:
                raise invalid_argument(
                    f"failed to load '{name}', failed to poll from model repository: 'file:' "
                    "parameters require the 'config' parameter"
                )
        elif name not in found:
            raise internal(f"failed to load '{name}', failed to poll from model repository")
        if entry is None:
            entry = self.models[name] = ModelEntry(name)
        previous_state = entry.state
        entry.state, entry.reason = LOADING, ""
        entry.generation += 1
        start = time.monotonic()
        temp_dir = None
        try:
            if files:
                temp_dir = await loop.run_in_executor(None, _materialize_files, name, files)
                model_dir = Path(temp_dir)
            else:
                model_dir = found[name]
            new_versions, config, signature, composing_old = await self._build_versions(
                name, model_dir, config_json, uploaded=bool(files), chain=chain
            )
        except Exception as e:
            if temp_dir:
                shutil.rmtree(temp_dir, ignore_errors=True)
            reason = e.message if isinstance(e, InferenceError) else str(e)
            reason = reason.rstrip("\n")  # (Triton ends an ensemble's load error with one)
            entry.reason = reason
            entry.state = READY if entry.versions else UNAVAILABLE
            if not entry.versions:
                entry.version_states = dict.fromkeys(entry.version_states, (UNAVAILABLE, reason)) or {}
                if isinstance(e, VersionLoadError):  # the index names the version and its reason
                    entry.version_states = {e.version: (UNAVAILABLE, e.reason)}
            log.error("failed to load '%s': %s", name, reason)
            if isinstance(e, InferenceError):
                raise
            raise internal(f"failed to load '{name}', {reason}") from None
        # Swap in the new versions, then drain and release the old ones.
        old: list = list(entry.versions.values())  # versions, then the reaper of their temp dir
        old += composing_old
        elapsed = time.monotonic() - start
        for v in new_versions:
            v.load_duration_s = elapsed
        entry.versions = {v.version: v for v in new_versions}
        entry.version_states = {v.version: (READY, "") for v in new_versions}
        entry.config = config
        entry.model_dir = str(model_dir)
        entry.signature = signature
        entry.state, entry.reason = READY, ""
        entry.dependency_unloaded = False
        old_temp, entry.temp_dir = entry.temp_dir, temp_dir
        for v in new_versions:
            self._notify("load", v)
        for v in old:
            self._notify("unload", v)
        if old_temp:
            # the replaced versions keep their open files; their folder goes once they drained
            old.append(_TempDirReaper(old_temp))
        log.info(
            "loaded model '%s' version(s) %s (%s) in %.2f s%s",
            name,
            [v.version for v in new_versions],
            mc.backend_name(config),
            elapsed,
            "" if previous_state != READY else " (reload)",
        )
        return old

    async def _build_versions(
        self, name: str, model_dir: Path, config_json, uploaded: bool = False, chain: tuple[str, ...] = ()
    ):
        """(the new versions, their config, the folder's signature, replaced versions of
        composing models an ensemble's load (re)loaded, to drain)."""
        loop = asyncio.get_running_loop()
        unacted: list[str | None] = []

        def prepare():
            path = mc.config_path(model_dir, self.model_config_name)
            source = str(path)
            if config_json is not None:
                config = mc.parse_config_json(config_json)
                source = f"config override of '{name}'"
            else:
                config = mc.read_config_file(path)
            # named from the config as written: normalization sets fields of its own
            unacted.append(config_support.load_warning(name, config))
            try:  # before anything reads the model's files (tritonserver runs them at poll)
                run_load_agents(config, model_dir)
            except RepositoryAgentError as e:
                raise mc.ConfigError(f"{source}: {e}") from None
            if mc.is_ensemble(config):
                return prepare_ensemble(config, source)
            if not mc.backend_name(config):
                _detect_backend(config, model_dir)
            try:
                cls = backend_class(mc.backend_name(config))
            except BackendError as e:
                raise mc.ConfigError(f"{source}: {e}") from None
            hosting = mc.parameter(config, INSTANCE_PROCESS_PARAMETER, "").lower()
            if hosting not in ("", "true", "false"):
                raise mc.ConfigError(
                    f"{source}: parameter {INSTANCE_PROCESS_PARAMETER} is '{hosting}'; it takes true (each "
                    "instance in a process of its own) or false (in the process of the server)"
                )
            if hosting == "true" and not issubclass(cls, ProcessBackend):
                cls = hosted(cls)  # each instance in its own process
            if uploaded and cls.executes_model_files and not self.allow_code_upload:
                raise permission_denied(
                    f"failed to load '{name}': backend '{mc.backend_name(config)}' would run the code in the "
                    "uploaded 'file:' parameters, which this server does not accept (start it with "
                    "--allow-model-code-upload=true to allow it)",
                )
            mc.normalize(config, name, cls.default_filename)
            versions = _select_versions(config, _available_versions(model_dir), source)
            try:
                if self.auto_complete_config:
                    _auto_complete(config, cls, str(model_dir / str(versions[-1])))
            except BackendError as e:
                raise mc.ConfigError(f"{source}: {e}") from None
            return finish(config, cls, versions, source)

        def prepare_ensemble(config, source):
            mc.normalize(config, name)
            versions = _select_versions(config, _available_versions(model_dir), source)
            return finish(config, None, versions, source)

        def finish(config, cls, versions, source):
            # (no input or output is not an error: tritonserver loads such a config, e.g. the
            # override {"max_batch_size": 16} of a Python model that does not auto-complete,
            # and then refuses requests that name inputs the config does not declare)
            mc.validate(config, name, source)
            try:
                mc.validate_ensemble(config)
            except mc.ConfigError as e:
                raise mc.ConfigError(f"{source}: {e}") from None
            try:
                labels = _read_labels(model_dir, config)
            except mc.ConfigError as e:
                raise mc.ConfigError(f"{source}: {e}") from None
            return config, cls, versions, _dir_signature(model_dir), labels

        try:
            config, cls, versions, signature, labels = await loop.run_in_executor(None, prepare)
        except mc.ConfigError as e:
            # Triton's text, then the reason (which names the file and the problem)
            raise internal(f"failed to load '{name}', failed to poll from model repository: {e}") from None
        # once per load, before the versions build (a failing build still had the fields)
        for warning in unacted:
            if warning:
                log.warning("%s", warning)

        if cls is None:  # an ensemble: its composing models first, then its versions
            steps, composing_old = await self._load_composing(name, config, chain)
            pipelines = []
            for version in versions:
                mv = ModelVersion(name, version, config, str(model_dir / str(version)), str(model_dir), labels)
                if self.latency.any_distribution:
                    mv.stats.latencies = LatencyRecorder(self.latency, buckets=mc.histogram_buckets(config))
                mv.scheduler = ensemble.EnsembleScheduler(mv, steps, self.get)
                mv.scheduler.start()
                pipelines.append(mv)
            return pipelines, config, signature, composing_old

        built: list[ModelVersion] = []
        try:
            for version in versions:
                built.append(await self._build_version(name, version, config, cls, model_dir, labels))
        except Exception:
            for v in built:
                if v.scheduler is not None:
                    await v.scheduler.stop()
            raise
        return built, config, signature, []

    async def _load_composing(self, name: str, config, chain: tuple[str, ...]):
        """An ensemble's dependencies, as Triton resolves them at load: composing models not
        loaded yet are loaded (in every control mode, as Triton does), then each step is
        checked against its model's config. Returns (the steps, versions those loads replaced).
        Errors are INVALID_ARGUMENT with Triton's "load failed for model" texts."""
        entry = self.models[name]
        names = ensemble.composing_names(config)
        entry.depends_on = tuple(names)

        def failed(text: str) -> InferenceError:
            # (Triton's text ends with a newline)
            return invalid_argument(f"load failed for model '{name}': {text}\n")

        for dep in names:
            if dep == name or dep in chain:
                circular = f"circular dependency between ensembles: {dep} -> ... -> {name} -> {dep}"
                error = failed(circular)
                error.circular = circular  # type: ignore[attr-defined]
                raise error
        found = await asyncio.get_running_loop().run_in_executor(None, self._scan, False)
        missing = sorted(d for d in names if d not in found and not (d in self.models and self.models[d].versions))
        if missing:
            raise failed(f"ensemble {name} contains models that are not available or ambiguous: {', '.join(missing)}")
        replaced: list = []
        for dep in names:
            dep_entry = self.models.get(dep)
            if dep_entry is not None and dep_entry.versions:
                continue
            try:
                replaced += await self._load_locked(dep, None, None, chain + (name,))
            except InferenceError as e:
                cycle: str | None = getattr(e, "circular", None)
                if cycle is not None:  # every ensemble of the cycle fails with its text
                    error = failed(cycle)
                    error.circular = cycle  # type: ignore[attr-defined]
                    raise error from None
                raise failed(
                    f"ensemble '{name}' depends on '{dep}' which has no loaded version. Model '{dep}' loading "
                    f"failed with error: {e.message.rstrip()}"
                ) from None
        composing = {}
        for step in config.ensemble_scheduling.step:
            dep_entry = self.models[step.model_name]
            if step.model_version >= 0 and step.model_version not in dep_entry.versions:
                raise failed(
                    f"ensemble '{name}' depends on '{step.model_name}' whose required version "
                    f"{step.model_version} is not loaded."
                )
            composing[step.model_name] = dep_entry.config
        try:
            ensemble.check_composing(config, composing)
        except ensemble.EnsembleError as e:
            raise failed(str(e)) from None
        return ensemble.plan(config), replaced

    async def _reload_dependents(self, name: str, seen: set[str]) -> list:
        """After ``name`` loaded: reload the ensembles that use it (checked again against its
        new config), those it retired included, as Triton does; then theirs. Returns the
        versions replaced, to drain."""
        replaced: list = []
        for entry in list(self.models.values()):
            if name not in entry.depends_on or entry.name in seen:
                continue
            if not (entry.versions or entry.dependency_unloaded):
                continue
            seen.add(entry.name)
            try:
                replaced += await self._load_locked(entry.name, None, None)
            except InferenceError as e:
                log.error("%s", e.message.rstrip())
                continue
            replaced += await self._reload_dependents(entry.name, seen)
        return replaced

    def _retire_dependents(self, name: str, retired: list) -> None:
        """``name`` is going: the loaded ensembles that use it (and theirs) go with it, as in
        Triton (UNAVAILABLE, "unloaded"), to come back when it is loaded again. Their versions
        are appended to ``retired`` (to drain)."""
        for entry in list(self.models.values()):
            if name not in entry.depends_on or not entry.versions:
                continue
            old = list(entry.versions.values())
            entry.versions = {}
            entry.generation += 1
            entry.state, entry.reason = UNAVAILABLE, "unloaded"
            entry.version_states = {v.version: (UNAVAILABLE, "unloaded") for v in old}
            entry.dependency_unloaded = True
            for v in old:
                self._notify("unload", v)
            retired += old
            log.info("unloaded ensemble '%s': its composing model '%s' was unloaded", entry.name, name)
            self._retire_dependents(entry.name, retired)

    async def _build_version(self, name, version, config, cls, model_dir: Path, labels=None) -> ModelVersion:
        loop = asyncio.get_running_loop()
        version_dir = str(model_dir / str(version))
        mv = ModelVersion(name, version, config, version_dir, str(model_dir), labels)
        if self.latency.any_distribution:
            mv.stats.latencies = LatencyRecorder(
                self.latency, decoupled=mv.decoupled, buckets=mc.histogram_buckets(config)
            )
        cfg_dict = mc.config_dict(config)
        backend_settings = self.backend_config.get(mc.backend_name(config), {})
        if (
            not issubclass(cls, ProcessBackend)
            and not mc.parameter(config, INSTANCE_PROCESS_PARAMETER, "")
            and await loop.run_in_executor(
                None, cls.instance_process_by_default, cfg_dict, version_dir, backend_settings
            )
        ):
            # per version: what the backend runs (an hls4ml model's fpga-mode) may differ by version
            cls = hosted(cls)
        instances: list[ModelInstance] = []
        index = 0
        try:
            for group in config.instance_group:
                for _ in range(group.count):
                    instance = ModelInstance(mv, None, index)
                    # Build the backend on the instance's own thread: backends that keep
                    # thread-affine state (device handles) are then created where they run.
                    try:
                        instance.backend = await loop.run_in_executor(
                            instance.executor,
                            functools.partial(cls, cfg_dict, version_dir, index, backend_config=backend_settings),
                        )
                    except BaseException:
                        instance.executor.shutdown(wait=False)
                        raise
                    instances.append(instance)
                    # a backend in its own process may call models (BLS): through this repository
                    bind = getattr(instance.backend, "bind_engine", None)
                    if bind is not None:
                        bind(loop, functools.partial(bls.engine_call, self.get))
                    index += 1
            if config.model_warmup:
                await self._warm_up(mv, instances)
        except warmup.WarmupError as e:
            for inst in instances:
                await loop.run_in_executor(None, inst.close)
            raise VersionLoadError(name, version, e.reason) from None
        except BackendError as e:
            for inst in instances:
                await loop.run_in_executor(None, inst.close)
            raise internal(f"failed to load '{name}' version {version}: {e}") from None
        except Exception as e:
            for inst in instances:
                await loop.run_in_executor(None, inst.close)
            detail = e.message if isinstance(e, InferenceError) else f"{type(e).__name__}: {e}"
            raise internal(f"failed to load '{name}' version {version}: {detail}") from None
        mv.scheduler = make_scheduler(mv, instances)
        mv.scheduler.start()
        # what the config lets this version hold, said once per load (see memory.py)
        log.info("%s", batch_memory(config, len(instances), [i.backend for i in instances]).describe())
        return mv

    async def _warm_up(self, mv: ModelVersion, instances: list[ModelInstance]) -> None:
        """Run the config's ``model_warmup`` samples on every instance before the version is
        READY (on a card each instance is a compute unit, so every CU is exercised). Samples
        run in the config's order; the instances run each one side by side. The executions
        are counted in the statistics, as Triton counts them. WarmupError: the first
        instance's (in index order) failure."""
        loop = asyncio.get_running_loop()
        samples = await loop.run_in_executor(None, warmup.build_samples, mv.config, mv.model_dir)
        where = ", ".join(
            f"{i.index}" + (f" ({i.backend.location()})" if i.backend.location() else "") for i in instances
        )
        for sample in samples:
            start = time.monotonic()

            def run(instance: ModelInstance, sample=sample) -> list:
                return [instance.warm_up(sample) for _ in range(sample.count)]

            outcomes = await asyncio.gather(
                *(loop.run_in_executor(i.executor, run, i) for i in instances), return_exceptions=True
            )
            for outcome in outcomes:
                if isinstance(outcome, BaseException):
                    raise outcome
            for outcome in outcomes:
                for executed in outcome:  # type: ignore[union-attr]
                    for rows, timings, duration_ns in executed:
                        mv.stats.record_execution(rows, timings)
                        mv.stats.record_successes(rows, duration_ns * rows, [0] * rows, timings)
            log.info(
                "model %s: warm-up '%s' x %d on %d instances [%s] in %.3f s",
                mv.name,
                sample.name,
                sample.count,
                len(instances),
                where,
                time.monotonic() - start,
            )

    async def _drain(self, name: str, versions: list) -> None:
        """Let retired versions finish what they hold, up to --model-unload-timeout-secs; an
        instance still inside execute() then is abandoned and reported."""
        for v in versions:
            if isinstance(v, _TempDirReaper):
                v.reap()
                continue
            stuck = await v.scheduler.stop(timeout=self.unload_timeout_secs)
            for instance in stuck:
                log.error(
                    "model '%s' version %d: instance %d was still inside execute() %.0f s after the "
                    "version was unloaded; abandoning it (its thread keeps running, its requests failed "
                    "with UNAVAILABLE)",
                    name,
                    v.version,
                    instance.index,
                    self.unload_timeout_secs,
                )

    async def unload(self, name: str, _internal: bool = False, unload_dependents: bool = False) -> None:
        """Unload ``name``; the loaded ensembles that use it are retired with it. With
        ``unload_dependents`` (an ensemble's unload), its composing models go too, and theirs,
        as in Triton: each one no other loaded model still uses and that was loaded only as a
        composing model (one a load request named stays)."""
        if not _internal:
            self.check_explicit()
            check_model_name(name)
        async with self._lock:
            entry = self.models.get(name)
            if entry is None:
                # Triton accepts unloading a model it does not know
                return
            taken = [self._take_down(entry)]
            if unload_dependents:
                taken += [self._take_down(e) for e in self._unused_composing(entry)]
            dependents: list = []
            for down in taken:
                self._retire_dependents(down[0].name, dependents)
        # drained outside the lock: loads, unloads and the index go on meanwhile
        await self._drain(name, dependents)
        for down_entry, old, temp_dir, generation in taken:
            await self._drain(down_entry.name, old)
            if temp_dir:
                shutil.rmtree(temp_dir, ignore_errors=True)
            if down_entry.generation == generation:
                down_entry.state, down_entry.reason = UNAVAILABLE, "unloaded"
                down_entry.version_states = {v.version: (UNAVAILABLE, "unloaded") for v in old}
            log.info("unloaded model '%s'", down_entry.name)

    def _take_down(self, entry: ModelEntry) -> tuple[ModelEntry, list, str | None, int]:
        """Withdraw ``entry``'s versions (under the lock): (entry, its versions to drain, its
        temp dir to remove, the generation the unload set)."""
        old = list(entry.versions.values())
        entry.state = UNLOADING
        entry.versions = {}
        entry.generation += 1
        entry.version_states = {v.version: (UNLOADING, "") for v in old}
        for v in old:
            self._notify("unload", v)
        temp_dir, entry.temp_dir = entry.temp_dir, None
        entry.dependency_unloaded = False
        entry.explicit = False
        return entry, old, temp_dir, entry.generation

    def _unused_composing(self, ensemble_entry: ModelEntry) -> list[ModelEntry]:
        """The composing models an unload_dependents unload of ``ensemble_entry`` takes with
        it, ensembles before their own composing models: loaded, not loaded by a request of
        their own, and used by no loaded model that stays."""
        going = {ensemble_entry.name}
        out: list[ModelEntry] = []
        changed = True
        while changed:  # until stable: a model may be freed only by a later one going
            changed = False
            for entry in list(self.models.values()):
                if entry.name in going or not entry.versions or entry.explicit:
                    continue
                users = [other.name for other in self.models.values() if entry.name in other.depends_on]
                if not any(u in going for u in users):
                    continue  # not a composing model of what goes
                if any(self.models[u].versions and u not in going for u in users):
                    continue  # still used by a model that stays
                going.add(entry.name)
                out.append(entry)
                changed = True
        return out

    def _cleanup_temp(self, entry: ModelEntry) -> None:
        if entry.temp_dir:
            shutil.rmtree(entry.temp_dir, ignore_errors=True)
            entry.temp_dir = None

    def _notify(self, event: str, version: ModelVersion) -> None:
        for listener in self.listeners:
            try:
                listener(event, version)
            except Exception:
                log.exception("repository listener failed")

    # ------------------------------------------------------------------ lookup
    def get(self, name: str, version: str = "") -> ModelVersion:
        """Resolve a request's (model, version) with Triton's errors (the version string is
        checked first, as Triton parses it before looking the model up)."""
        v = parse_version(version) if version else 0
        entry = self.models.get(name)
        if entry is None or (not entry.versions and not entry.version_states):
            raise not_found(f"Request for unknown model: '{name}' is not found")
        if version == "":
            if not entry.versions:
                raise not_found(f"Request for unknown model: '{name}' has no available versions")
            return entry.versions[max(entry.versions)]
        mv = entry.versions.get(v)
        if mv is None:
            if v in entry.version_states:
                raise unavailable(f"Request for unknown model: '{name}' version {v} is not at ready state")
            raise not_found(f"Request for unknown model: '{name}' version {v} is not found")
        return mv

    def is_ready(self, name: str, version: str = "") -> bool:
        try:
            return self.get(name, version).unhealthy() is None
        except InferenceError:
            return False

    def all_ready(self) -> bool:
        """Strict readiness: every model is READY or was deliberately unloaded."""
        if not self.strict_readiness:
            return True
        for entry in self.models.values():
            if entry.state in (LOADING, UNLOADING):
                return False
            if entry.state == UNAVAILABLE and entry.reason != "unloaded":
                return False
            if any(v.unhealthy() is not None for v in entry.versions.values()):
                return False
        return True

    def index(self, ready_only: bool = False) -> list[tuple[str, str, str, str]]:
        """[(name, version, state, reason)] for RepositoryIndex, sorted by name."""
        found = self._scan()
        rows = []
        names = sorted(set(found) | {n for n, e in self.models.items() if e.state})
        for name in names:
            entry = self.models.get(name)
            if entry is None or (not entry.state and not entry.version_states):
                if not ready_only:
                    rows.append((name, "", "", ""))
                continue
            if entry.version_states:
                for v, (state, reason) in sorted(entry.version_states.items()):
                    if state == READY:
                        # a loaded version none of whose instances can serve (a lost device,
                        # an instance process that stays down) is not ready: say why
                        loaded = entry.versions.get(v)
                        why = loaded.unhealthy() if loaded is not None else None
                        if why is not None:
                            state, reason = UNAVAILABLE, why
                    if ready_only and state != READY:
                        continue
                    rows.append((name, str(v), state, reason))
            elif not ready_only:
                rows.append((name, "", entry.state, entry.reason))
        return rows

    def loaded_versions(self) -> list[ModelVersion]:
        return [v for e in self.models.values() for v in e.versions.values()]


def make_scheduler(model, instances: list[ModelInstance]) -> Scheduler:
    """Triton's choice: a ``dynamic_batching`` block (on a batching model, not decoupled)
    gets the dynamic batcher; otherwise every request executes alone."""
    config = model.config
    if config.HasField("sequence_batching"):
        return SequenceBatcher(model, instances)
    if config.HasField("dynamic_batching") and model.max_batch_size > 0 and not model.decoupled:
        return DynamicBatcher(model, instances)
    return DirectScheduler(model, instances)


class _TempDirReaper:
    """Removes a replaced model's uploaded files once its versions have drained."""

    def __init__(self, path: str):
        self.path = path

    def reap(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _materialize_files(name: str, files: dict[str, bytes]) -> str:
    """Write RepositoryModelLoad ``file:<version>/<name>`` contents into a private folder.

    Each path must stay inside it: relative, no '..' or empty components, no control
    characters. Files are created fresh (O_EXCL, no symlink followed)."""
    root = tempfile.mkdtemp(prefix="fpgaserve-load-")
    try:
        for rel, data in files.items():
            parts = rel.split("/")
            if (
                not rel
                or rel.startswith("/")
                or any(p in ("", ".", "..") for p in parts)
                or any(c < " " or c in "\\\x7f" for c in rel)
            ):
                raise invalid_argument(
                    f"failed to load '{name}', invalid file path '{escape_control(rel)}' in load parameters"
                )
            path = os.path.join(root, *parts)
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
            except OSError as e:
                # a name longer than the file system takes (Triton's model_control example sends
                # 256 characters), a full disk: tritonserver's text and status for a load whose
                # files cannot be written, then the system's reason
                raise internal(
                    f"failed to load '{name}', failed to poll from model repository: cannot write file "
                    f"'{escape_control(rel)[:300]}': {e.strerror or 'error'}"
                ) from None
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return root
