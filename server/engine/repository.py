"""The model registry: Triton-layout repositories, load/unload, ensembles' dependencies,
readiness, control modes.

What a load reads is model_reader.py's (config, backend, versions; the folders themselves:
model_files.py), what it builds version_loader.py's (instances, warm-up, scheduler); the
registry decides what loads when and swaps versions in and out. Control modes as tritonserver
has them:

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
import logging
import re
import shutil
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from .. import model_config as mc
from ..errors import InferenceError, escape_control, internal, invalid_argument, not_found, unavailable
from . import ensemble_plan
from .latency import LatencyConfig
from .model_files import TempDirReaper, dir_signature, materialize_files, scan
from .model_reader import read_model
from .model_version import LOADING, READY, UNAVAILABLE, UNLOADING, ModelEntry, ModelVersion, VersionLoadError
from .version_loader import ensemble_version, load_version

log = logging.getLogger("fpgaserve.repository")

CONTROL_MODES = ("none", "explicit", "poll")
NOT_ALLOWED = "explicit model load / unload is not allowed if polling is enabled"


def check_model_name(name: str) -> None:
    """A model name from a client names a directory: no separators, control characters, '..'."""
    if name in (".", "..") or "/" in name or "\\" in name or any(c < " " or c == "\x7f" for c in name):
        raise invalid_argument(f"invalid model name '{escape_control(name)}'")


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


class ModelRepository:
    """The models of the repository folders ``paths``: loads and unloads them as the control
    mode allows, and answers which version a request addresses (``get``)."""

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
        # where a backend in an instance process sends its calls into the server (BLS
        # requests): set by the data plane at wiring (they are its clients), None: refused
        self.instance_calls: Callable[..., Awaitable[None]] | None = None

    # ------------------------------------------------------------------ discovery
    def scan(self, owned_only: bool = True) -> dict[str, Path]:
        """The model folders of the repositories (with ``owns``, only this engine process's,
        unless ``owned_only`` is False: a load routed here by the coordinator)."""
        return scan(self.paths, self.owns if owned_only else None)

    # ------------------------------------------------------------------ discovery
    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        found = self.scan()
        for name in found:
            self.models.setdefault(name, ModelEntry(name, str(found[name])))
        if self.control_mode == "explicit":
            names = list(found) if "*" in self.startup_models else self.startup_models
        else:
            names = list(found)
        if self.owns is not None:  # another engine process loads its own models
            every = self.scan(owned_only=False)
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
            # every model at once, as Triton unloads them all at shutdown: the finalizes of a
            # repository's instances overlap instead of adding up against --exit-timeout-secs
            retired = []
            for entry in self.models.values():
                retired.append((entry, list(entry.versions.values())))
                entry.versions.clear()
            await asyncio.gather(*(self._drain(entry.name, old) for entry, old in retired))
            for entry, _ in retired:
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
        found = await asyncio.get_running_loop().run_in_executor(None, self.scan)
        for name, path in found.items():
            entry = self.models.get(name)
            sig = await asyncio.get_running_loop().run_in_executor(None, dir_signature, path)
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
        found = await loop.run_in_executor(None, self.scan, False)
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
                temp_dir = await loop.run_in_executor(None, materialize_files, name, files)
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
            old.append(TempDirReaper(old_temp))
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
        read = functools.partial(
            read_model,
            name,
            model_dir,
            config_json,
            model_config_name=self.model_config_name,
            uploaded=uploaded,
            allow_code_upload=self.allow_code_upload,
            auto_complete_config=self.auto_complete_config,
        )
        try:
            model = await loop.run_in_executor(None, read)
        except mc.ConfigError as e:
            # Triton's text, then the reason (which names the file and the problem)
            raise internal(f"failed to load '{name}', failed to poll from model repository: {e}") from None
        # once per load, before the versions build (a failing build still had the fields)
        if model.warning:
            log.warning("%s", model.warning)
        config, labels = model.config, model.labels

        if model.backend is None:  # an ensemble: its composing models first, then its versions
            steps, composing_old = await self._load_composing(name, config, chain)
            pipelines = [
                ensemble_version(name, version, config, model_dir, labels, steps, self.get, self.latency)
                for version in model.versions
            ]
            return pipelines, config, model.signature, composing_old

        built: list[ModelVersion] = []
        try:
            for version in model.versions:
                built.append(
                    await load_version(
                        name,
                        version,
                        config,
                        model.backend,
                        model_dir,
                        labels,
                        latency=self.latency,
                        backend_config=self.backend_config,
                        instance_calls=self.instance_calls,
                    )
                )
        except Exception:
            for v in built:
                if v.scheduler is not None:
                    await v.scheduler.stop()
            raise
        return built, config, model.signature, []

    async def _load_composing(self, name: str, config, chain: tuple[str, ...]):
        """An ensemble's dependencies, as Triton resolves them at load: composing models not
        loaded yet are loaded (in every control mode, as Triton does), then each step is
        checked against its model's config. Returns (the steps, versions those loads replaced).
        Errors are INVALID_ARGUMENT with Triton's "load failed for model" texts."""
        entry = self.models[name]
        names = ensemble_plan.composing_names(config)
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
        found = await asyncio.get_running_loop().run_in_executor(None, self.scan, False)
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
            ensemble_plan.check_composing(config, composing)
        except ensemble_plan.EnsembleError as e:
            raise failed(str(e)) from None
        return ensemble_plan.plan(config), replaced

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

    async def _drain(self, name: str, versions: list) -> None:
        """Let retired versions finish what they hold, up to --model-unload-timeout-secs; an
        instance still inside execute() then is abandoned and reported."""
        for v in versions:
            if isinstance(v, TempDirReaper):
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
        """Loaded and able to serve, by what is known without asking the instances (``not_ready``)."""
        try:
            return self.get(name, version).not_ready() is None
        except InferenceError:
            return False

    async def model_ready(self, name: str, version: str = "") -> bool:
        """Model readiness as Triton answers it since 25.12 (core ``ModelIsReady``): READY,
        and every instance ready, its own check asked (``ModelVersion.check_ready``). Why not
        is logged (verbose, as Triton does) and shown by the repository index."""
        try:
            mv = self.get(name, version)
        except InferenceError:
            return False
        why = await mv.check_ready()
        if why is not None:
            log.debug("Model '%s' version %d is not ready: %s", mv.name, mv.version, why)
        return why is None

    def _lifecycle_ready(self) -> bool:
        for entry in self.models.values():
            if entry.state in (LOADING, UNLOADING):
                return False
            if entry.state == UNAVAILABLE and entry.reason != "unloaded":
                return False
        return True

    def all_ready(self) -> bool:
        """Strict readiness by what is known without asking the instances: every model READY
        (or deliberately unloaded) and able to serve (``not_ready``)."""
        if not self.strict_readiness:
            return True
        return self._lifecycle_ready() and not any(
            v.not_ready() is not None for e in self.models.values() for v in e.versions.values()
        )

    async def server_ready(self) -> bool:
        """Server readiness under --strict-readiness as Triton 26.04 answers it (core
        ``InferenceServer::IsReady``): every model READY or deliberately unloaded, and
        every READY version's instances ready (a dead or restarting instance process, a
        Python model's ``is_ready()`` saying no). Without --strict-readiness: True."""
        if not self.strict_readiness:
            return True
        if not self._lifecycle_ready():
            return False
        for entry in list(self.models.values()):
            for v in list(entry.versions.values()):
                if await v.check_ready() is not None:
                    return False
        return True

    def index(self, ready_only: bool = False) -> list[tuple[str, str, str, str]]:
        """[(name, version, state, reason)] for RepositoryIndex, sorted by name."""
        found = self.scan()
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
                        # a loaded version that cannot serve now (an instance process dead or
                        # restarting, no device left) or whose last readiness check said no
                        # (a Python model's is_ready()) is not ready: say why
                        loaded = entry.versions.get(v)
                        why = (loaded.not_ready() or loaded.last_not_ready) if loaded is not None else None
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
