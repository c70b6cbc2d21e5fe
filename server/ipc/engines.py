"""``--engine-processes N > 1``: models partitioned over N engine processes, served as one server.

The server's own process is engine process 0 and the coordinator: it starts engine processes
1..N-1 (``python -m fpgaserve.server.ipc.engine_process``), each with its own model
repository (only the models placed on it: server/engine/placement.py), schedulers, instances
and cards (the hls4ml backend opens only the cards of its process), its own ``EngineServer``
socket, and the same shared-memory registry. The frontend processes connect to every engine:
a request goes straight to the engine that holds its model (the model snapshot says which),
so each engine spends its CPU only on its own models' requests. Everything else a frontend
asks goes to engine 0, which answers for the whole server by asking the others
(``EngineGroup``): the repository index lists every engine's models, load and unload go to the
model's engine (decided from its configuration before it loads), statistics and readiness
cover every engine, shared-memory registrations reach every engine before they are
acknowledged, and ``/metrics`` merges every engine's families (model counters, card
telemetry). An engine process that exits takes the server down, as the engine's own exit
always did.
"""

from __future__ import annotations

import asyncio
import ctypes
import dataclasses
import json
import logging
import os
import signal
import sys
from pathlib import Path

from fpgaserve.backends.hosting import stop_signals_blocked

from ..engine.placement import PlacementError, engine_of_model
from ..errors import InferenceError, StartupError, invalid_argument
from .protocol import statistics_views
from .remote import RemoteDataPlane

log = logging.getLogger("fpgaserve")

_PR_SET_PDEATHSIG = 1
# the coordinator's channel to another engine carries calls only (no tensors): small arenas
_CONTROL_ARENA_BYTES = 1 << 20


def _die_with_parent() -> None:  # runs in the child between fork and exec
    # SIGHUP when the coordinator dies, however it dies: the engine exits at once (its cards are
    # released with its process; nobody is left to answer its requests)
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGHUP)
    except OSError:
        pass


def engine_options(options, index: int, count: int):
    """The options of engine process ``index``: the server's, with its cards (hls4ml
    ``engine-cards``) and no listeners of its own."""
    from ..engine.placement import engine_cards_setting

    backend_config = {k: dict(v) for k, v in options.backend_config.items()}
    backend_config.setdefault("hls4ml", {})["engine-cards"] = engine_cards_setting(index, count)
    return dataclasses.replace(options, backend_config=backend_config)


class EngineGroup:
    """Engine 0's view of engines 1..N-1: starts them, watches them, routes and merges calls."""

    def __init__(self, options, dataplane, directory: str):
        self.options = options
        self.count = options.engine_processes
        self.dataplane = dataplane  # engine 0's own
        self.directory = directory
        self.sockets = [os.path.join(directory, f"engine{i}.sock") for i in range(self.count)]
        self.procs: dict[int, asyncio.subprocess.Process] = {}
        self.remotes: dict[int, RemoteDataPlane] = {}
        self.placed: dict[str, int] = {}  # models loaded through a call: the engine they went to
        self.stopping = False
        self.on_engine_lost = lambda index, rc: None
        self._watchers: list[asyncio.Task] = []

    # ------------------------------------------------------------------ processes
    async def start(self) -> None:
        """Start engine processes 1..N-1 (their models load meanwhile, as engine 0's do);
        ``connect`` waits for them."""
        config_path = os.path.join(self.directory, "engines.json")
        with open(config_path, "w") as f:  # noqa: ASYNC230 -- once, a few hundred bytes, at start
            json.dump(dataclasses.asdict(self.options), f)
        for index in range(1, self.count):
            with stop_signals_blocked():  # until it ignores them (engine_process.main)
                self.procs[index] = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "fpgaserve.server.ipc.engine_process",
                    config_path,
                    self.sockets[index],
                    str(index),
                    str(self.count),
                    preexec_fn=_die_with_parent,
                )

    async def connect(self) -> None:
        """Wait until every engine process serves its socket (its models loaded), then
        connect to it; ``StartupError`` if one exited instead."""
        for index, proc in self.procs.items():
            remote = RemoteDataPlane(self.sockets[index], _CONTROL_ARENA_BYTES)
            while True:
                if proc.returncode is not None:
                    raise StartupError(f"engine process {index} exited with {proc.returncode} while starting")
                try:  # (the socket appears once its models are loaded)
                    await remote.connect()
                    break
                except (ConnectionRefusedError, FileNotFoundError):
                    pass
                try:
                    await asyncio.wait_for(asyncio.shield(proc.wait()), 0.1)
                except asyncio.TimeoutError:
                    pass
            self.remotes[index] = remote
        self._watchers = [asyncio.ensure_future(self._watch(i)) for i in self.procs]
        log.info("%d engine processes (cards: card c on engine process c mod %d)", self.count, self.count)

    async def _watch(self, index: int) -> None:
        rc = await self.procs[index].wait()
        if not self.stopping:
            log.error("engine process %d (pid %d) exited with %s; the server stops", index, self.procs[index].pid, rc)
            self.on_engine_lost(index, rc)

    async def stop(self) -> None:
        """Tell every engine process to stop (its "drain" call: it finalizes its models and
        exits; they ignore the signals meant for the server), then wait for them; the ones
        still running when the caller gives up on this wait (cancels it) are killed."""
        self.stopping = True
        for w in self._watchers:
            w.cancel()
        for remote in self.remotes.values():
            try:
                await remote.call("drain")
            except InferenceError:
                pass  # gone already
            await remote.close()
        for index, p in self.procs.items():
            if index not in self.remotes:
                p.kill()  # never connected (the server failed to start): still loading
        live = [p for p in self.procs.values() if p.returncode is None]
        try:
            await asyncio.wait_for(asyncio.gather(*(p.wait() for p in live)), self.options.exit_timeout_secs)
        except asyncio.TimeoutError:
            pass
        finally:
            self.kill()

    def kill(self) -> None:
        """Kill the engine processes still running (the server exits at once)."""
        for p in self.procs.values():
            if p.returncode is None:
                try:
                    p.kill()
                except ProcessLookupError:
                    pass

    # ------------------------------------------------------------------ placement
    def engine_of(self, name: str, config_json: str | None = None) -> int:
        """The engine of model ``name`` (its configuration on disk, or ``config_json``)."""
        if config_json is None and name in self.placed:
            return self.placed[name]
        repository = self.dataplane.repository
        found = repository.scan(owned_only=False)
        path = found.get(name)
        if path is None and config_json is None:
            return 0  # unknown: engine 0 answers with Triton's error
        try:
            return engine_of_model(path or Path("."), self.count, repository.model_config_name, config_json=config_json)
        except PlacementError as e:
            raise invalid_argument(f"failed to load '{name}', {e}") from None

    def _owner(self, name: str) -> int:
        try:
            return self.engine_of(name)
        except InferenceError:
            return 0

    # ------------------------------------------------------------------ calls
    async def call(self, method: str, args: tuple):
        """A frontend's data-plane call answered for the whole server (engine 0 included)."""
        dp = self.dataplane
        if method == "live":
            return await dp.live() and all([await r.live() for r in self.remotes.values()])
        if method == "ready":
            return await dp.ready() and all([await r.ready() for r in self.remotes.values()])
        if method in ("model_ready", "ready_versions"):
            return await self._routed(args[0], method, args)
        if method == "repository_index":
            rows = list(await dp.repository_index(*args))
            for r in self.remotes.values():
                rows += await r.repository_index(*args)
            return sorted(rows, key=lambda row: row[0])
        if method == "statistics":
            name = args[0] if args else ""
            if name:
                return await self._routed(name, "statistics", args)
            views = list(await self._local("statistics", args))
            for r in self.remotes.values():
                views += await r.call("statistics", *args)
            return sorted(views, key=lambda v: (v.name, int(v.version_str)))
        if method in ("load", "unload"):
            name = args[0]
            index = self.engine_of(name, args[1] if method == "load" else None)
            if method == "load":
                self.placed[name] = index
            if index == 0:
                return await getattr(dp, method)(*args)
            return await self.remotes[index].call(method, *args)
        if method == "shm_register":
            await dp.shm_register(*args)
            done = []
            try:
                for r in self.remotes.values():
                    await r.call("shm_register", *args)
                    done.append(r)
            except BaseException:
                for r in done:
                    await r.call("shm_unregister", args[0])
                await dp.shm_unregister(args[0])
                raise
            return None
        if method == "shm_unregister":
            await dp.shm_unregister(*args)
            for r in self.remotes.values():
                await r.call("shm_unregister", *args)
            return None
        if method in ("update_log_settings", "trace_settings") and not (method == "trace_settings" and args[0]):
            value = await getattr(dp, method)(*args)
            for r in self.remotes.values():
                await r.call(method, *args)
            return value
        if method == "trace_settings":
            return await self._routed(args[0], method, args)
        raise KeyError(method)

    async def _local(self, method: str, args: tuple):
        """Engine 0's own answer, in the form the EngineServer sends it."""
        if method == "statistics":
            return statistics_views(await self.dataplane.statistics(*args))
        if method == "model_snapshot":
            return (await self.dataplane.model(*args)).snapshot()
        return await getattr(self.dataplane, method)(*args)

    async def _routed(self, name: str, method: str, args: tuple):
        index = self._owner(name)
        if index == 0:
            return await self._local(method, args)
        return await self.remotes[index].call(method, *args)

    async def snapshot(self, name: str, version: str) -> tuple:
        """The model snapshot a frontend decodes against, and the engine that serves it."""
        index = self._owner(name)
        value = await self._routed(name, "model_snapshot", (name, version))
        return (*value, index)

    # ------------------------------------------------------------------ metrics
    async def remote_families(self) -> list:
        """Every other engine's metric families (model counters, card telemetry)."""
        families = []
        for remote in self.remotes.values():
            try:
                families += await remote.call("metric_families")
            except InferenceError as e:
                log.warning("metrics of an engine process are missing from this scrape: %s", e.message)
        return families
