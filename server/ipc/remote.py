"""``RemoteDataPlane``: the data-plane API (``DataPlaneAPI``) in a frontend process, served
by the engine.

The frontends call it exactly as they call the in-process ``DataPlane``. A request is
normalized here, in the process that holds its bytes (``infer``); the engine trusts its own
frontend processes and only checks that the model snapshot is still the loaded version.
What it keeps locally, so the request path costs one message each way:

* model snapshots (a ``ModelVersion`` rebuilt from the engine's config, without a scheduler)
  to decode and validate requests against; the engine says when the repository changed
  (before a load/unload call returns), and the cache is dropped;
* a mirror of the system shared-memory registry (the engine broadcasts every register and
  unregister and waits for the mirrors before it answers), so decoding reads shm inputs here,
  with the same checks, straight into the arena (``ArenaShmMirror``: one copy, the preadv);
* the arena: numeric inputs are copied into it once and the engine reads them in place.

Everything else (statistics, readiness, repository control, settings) is a call to the
engine, the one place that state lives.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np

from ..dataplane.api import SERVER_EXITING, SERVER_NOT_READY, DataPlaneAPI, RegionStatus, ServerInfo, VersionStatistics
from ..dataplane.tensors import WireRequest, normalize
from ..engine.model_version import ModelVersion
from ..engine.request import EncodedOutput
from ..errors import InferenceError, Status, unavailable
from ..shared_memory import SystemSharedMemoryManager
from .arena import Arena, ArenaFull
from .protocol import FrameChannel

log = logging.getLogger("fpgaserve.frontend")

SHUTTING_DOWN = "GRPC server is shutting down and has stopped accepting new requests."  # Triton's text
ENGINE_GONE = "the server's engine process is not running"


class _Pending:
    __slots__ = ("blocks", "emit", "future", "infer", "keep")

    def __init__(self, future, blocks, emit, keep=(), infer=False):
        self.future = future
        self.blocks = blocks
        self.emit = emit
        self.keep = keep  # arrays in arena blocks owned by their views (ArenaShmMirror)
        self.infer = infer  # its result is a list of EncodedOutput (maybe in the response arena)


class ArenaShmMirror(SystemSharedMemoryManager):
    """The frontend's mirror of the engine's shared-memory registry. A tensor read from a
    client's region lands directly in an arena block, which the engine then reads in place:
    one copy (the preadv) instead of a read into a buffer and a second copy into the arena.

    Such a block belongs to the array that views it: it is freed when the last view goes
    (a request that fails validation after the read frees it as it is dropped; one sent to
    the engine is held by its pending entry until the engine's answer).
    """

    def __init__(self, arena: Arena):
        super().__init__(max_regions=1 << 30)  # limits and permissions are the engine's
        self.arena = arena
        self._owners: dict[int, tuple[weakref.ref, int]] = {}  # id(owner) -> (owner, offset)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0

    def _buffer(self, byte_size: int) -> memoryview:
        try:
            offset = self.arena.allocate(byte_size)
        except ArenaFull:
            return super()._buffer(byte_size)
        if not self._loop_thread:  # the thread (and loop, if any) that owns the arena
            self._loop_thread = threading.get_ident()
            try:
                self._loop = asyncio.get_running_loop()
            except RuntimeError:
                self._loop = None
        owner = np.frombuffer(self.arena.view, dtype=np.uint8, count=byte_size, offset=offset)
        key = id(owner)
        self._owners[key] = (weakref.ref(owner), offset)
        weakref.finalize(owner, self._free_block, key, offset, byte_size)
        return owner.data

    def _free_block(self, key: int, offset: int, byte_size: int) -> None:
        # the last view may die anywhere the garbage collector runs (a traceback cycle, say,
        # collected on grpc's poller thread); the arena is the event loop's alone
        if threading.get_ident() != self._loop_thread and self._loop is not None:
            try:
                self._loop.call_soon_threadsafe(self._free_block, key, offset, byte_size)
            except RuntimeError:  # the loop is closed: the process is ending
                pass
            return
        entry = self._owners.get(key)
        if entry is not None and entry[0]() is None:  # not a newer array at the same id
            del self._owners[key]
        self.arena.free(offset, byte_size)

    def arena_offset(self, array: np.ndarray) -> int | None:
        """The arena offset of a contiguous array read by ``_buffer``, or None."""
        if not self._owners or not array.flags.c_contiguous:
            return None
        x: Any = array
        while x is not None:
            if isinstance(x, np.ndarray):
                entry = self._owners.get(id(x))
                if entry is not None and entry[0]() is x:
                    owner = cast(np.ndarray, x)
                    return entry[1] + (array.ctypes.data - owner.ctypes.data)
                x = x.base
            elif isinstance(x, memoryview):
                x = x.obj
            else:
                return None
        return None


class RemoteDataPlane(DataPlaneAPI):
    shm: ArenaShmMirror  # reads shared-memory inputs straight into the arena

    def __init__(self, socket_path: str, arena_bytes: int):
        self.socket_path = socket_path
        self.arena = Arena(arena_bytes)
        self.responses = Arena(arena_bytes)  # the engine allocates in it (ResponseArena)
        self.shm = ArenaShmMirror(self.arena)
        self.exiting = False
        self.tracing_active = False  # the engine says when it changes ("tracing")
        self.on_engine_lost: Callable[[], None] | None = None  # called first when the channel ends
        self.engine_lost = asyncio.Event()
        self._tokens = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._snapshots: dict[tuple[str, str], ModelVersion] = {}
        self._fetching: dict[tuple[str, str], asyncio.Task] = {}
        self._generation = 0  # bumped when the engine says the repository changed
        self._channel: FrameChannel | None = None
        self._welcomed: asyncio.Future | None = None
        # --engine-processes N > 1: the channels to every engine (this one is engine 0's, which
        # answers the calls); requests go to their model's engine (``attach_engines``)
        self.engines: list[RemoteDataPlane] = [self]
        self.on_models_changed: Callable[[], None] | None = None
        # the engine says the server stops ("drain"): the frontend process stops taking work
        self.on_drain: Callable[[], None] | None = None
        # calls sent and not yet answered (``_pending``), and who waits for there to be none
        self.in_flight = 0
        self._drained: asyncio.Event | None = None

    def attach_engines(self, others: list[RemoteDataPlane]) -> None:
        """Engines 1..N-1's channels: their repository changes drop this plane's snapshots too."""
        self.engines = [self, *others]
        for other in others:
            other.on_models_changed = self._models_changed

    def _models_changed(self) -> None:
        self._snapshots.clear()
        self._generation += 1

    # ------------------------------------------------------------------ channel
    async def connect(self) -> None:
        loop = asyncio.get_running_loop()
        self._welcomed = loop.create_future()
        _, channel = await loop.create_unix_connection(
            lambda: FrameChannel(self._on_messages, self._on_closed), self.socket_path
        )
        self._channel = channel
        self._channel.send(
            ("hello", os.getpid(), self.arena.fd, self.arena.size, self.responses.fd, self.responses.size)
        )
        await self._welcomed

    def send(self, message) -> None:
        if self._channel is None or self._channel.is_closing():
            raise unavailable(ENGINE_GONE)
        self._channel.send(message)

    def _on_messages(self, messages: list) -> None:
        welcomed = self._welcomed
        if welcomed is not None and not welcomed.done():  # the engine's first message
            welcome, messages = messages[0], messages[1:]
            if welcome[0] != "welcome":
                welcomed.set_exception(RuntimeError("the engine did not answer the frontend's hello"))
                return
            for name, key, offset, byte_size in welcome[1]:  # before any later registry change
                self._mirror("register", (name, key, offset, byte_size))
            self.tracing_active = welcome[2]
            welcomed.set_result(None)
        dispatch = self._dispatch
        for message in messages:
            dispatch(message)

    def _on_closed(self) -> None:
        if self.on_engine_lost is not None:
            # a frontend process dies here, before any call it holds is answered (see
            # frontend_process.serve): answering them first would tell a proxy "this replica
            # works, it said UNAVAILABLE", and its clients' next calls would go to it again
            self.on_engine_lost()
        self.engine_lost.set()
        if self._welcomed is not None and not self._welcomed.done():
            self._welcomed.set_exception(RuntimeError("the engine closed the channel before its welcome"))
        for token, p in list(self._pending.items()):
            if not p.future.done():
                p.future.set_exception(unavailable(ENGINE_GONE))
            self._finish(token)

    def _finish(self, token: int) -> None:
        p = self._pending.pop(token, None)
        if p is not None:
            for offset, nbytes in p.blocks:  # the engine is done with the inputs only now
                self.arena.free(offset, nbytes)
            self.in_flight -= 1
            if not self.in_flight and self._drained is not None:
                self._drained.set()

    async def drained(self) -> None:
        """Return once no call of this plane (an inference, a load, ...) awaits the engine's answer."""
        if self._drained is None:
            self._drained = asyncio.Event()
        if self.in_flight:
            self._drained.clear()
            await self._drained.wait()

    def _dispatch(self, message) -> None:
        kind = message[0]
        if kind == "result":
            p = self._pending.get(message[1])
            value = message[2]
            if p is not None and p.infer:
                value = self._take_outputs(value)
            if p is not None and not p.future.done():
                p.future.set_result(value)
            self._finish(message[1])
        elif kind == "error":
            p = self._pending.get(message[1])
            if p is not None and not p.future.done():
                p.future.set_exception(InferenceError(Status[message[2]], message[3]))
            self._finish(message[1])
        elif kind == "emit":
            p = self._pending.get(message[1])
            if p is not None and p.emit is not None:
                p.emit(message[2])
        elif kind == "emit_error":
            p = self._pending.get(message[1])
            if p is not None and p.emit is not None:
                p.emit(InferenceError(Status[message[2]], message[3]))
        elif kind == "shm":
            _, token, op, args = message
            self._mirror(op, args)
            self.send(("ack", token))
        elif kind == "tracing":
            self.tracing_active = message[1]
        elif kind == "drain":
            if self.on_drain is not None:
                self.on_drain()
        elif kind == "models_changed":
            self._models_changed()
            if self.on_models_changed is not None:
                self.on_models_changed()
            self.send(("ack", message[1]))
        else:
            log.error("unknown message from the engine: %s", kind)

    def _take_outputs(self, encoded: list[tuple]) -> list[EncodedOutput]:
        """The engine's encoded outputs (plain tuples on the wire) as EncodedOutputs; bytes
        the engine left in the response arena (``raw`` an ``(offset, nbytes)`` tuple) are
        copied out of it (the one copy into the response) and their blocks given back."""
        outputs = [EncodedOutput(*out) for out in encoded]
        pieces = [out.raw for out in outputs if type(out.raw) is tuple]
        if not pieces:
            return outputs
        view = self.responses.view
        taken = [
            out._replace(raw=bytes(view[out.raw[0] : out.raw[0] + out.raw[1]])) if type(out.raw) is tuple else out
            for out in outputs
        ]
        self.send(("free", pieces))
        return taken

    def _mirror(self, op: str, args) -> None:
        try:
            if op == "register":
                self.shm.register(*args)
            else:
                self.shm.unregister(*args)
        except InferenceError as e:
            # the engine accepted it, so the object changed between the two opens
            log.warning("shared memory %s %s not mirrored: %s", op, args[0], e.message)

    async def call(self, method: str, *args) -> Any:
        """Call a data-plane method in the engine (one the engine's server allows): its result,
        or its InferenceError. Engine 0 also calls the other engines' methods through this."""
        token = next(self._tokens)
        future = asyncio.get_running_loop().create_future()
        self._pending[token] = _Pending(future, (), None)
        self.in_flight += 1
        try:
            self.send(("call", token, method, args))
        except InferenceError:
            self._finish(token)
            raise
        return await future

    async def close(self) -> None:
        if self._channel is not None:
            self._channel.close()

    # ------------------------------------------------------------------ the DataPlane API
    async def live(self) -> bool:
        if self.exiting:
            raise unavailable(SERVER_EXITING)
        return await self.call("live")

    async def ready(self) -> bool:
        if self.exiting:
            raise unavailable(SERVER_EXITING)
        return await self.call("ready")

    async def model_ready(self, name: str, version: str = "") -> bool:
        if self.exiting:
            raise unavailable(SERVER_NOT_READY)
        return await self.call("model_ready", name, version)

    async def server_metadata(self) -> ServerInfo:
        return await self.call("server_metadata")

    async def model(self, name: str, version: str = "") -> ModelVersion:
        key = (name, version)
        snapshot = self._snapshots.get(key)
        if snapshot is not None:
            return snapshot
        # One fetch per key, awaited by every request that needs it meanwhile: they resume in
        # the order they asked, so a stream's requests still reach the engine in order (a
        # sequence's START before its continuations)
        pending = self._fetching.get(key)
        if pending is None:
            pending = asyncio.get_running_loop().create_task(self._fetch_snapshot(name, version))
            self._fetching[key] = pending
            pending.add_done_callback(lambda _t: self._fetching.pop(key, None))
        return await asyncio.shield(pending)

    async def _fetch_snapshot(self, name: str, version: str) -> ModelVersion:
        generation = self._generation
        value = await self.call("model_snapshot", name, version)
        snapshot = ModelVersion.from_snapshot(value)
        if generation == self._generation:  # not if the repository changed meanwhile
            self._snapshots[(name, version)] = snapshot
        return snapshot

    async def ready_versions(self, name: str) -> list[int]:
        return await self.call("ready_versions", name)

    async def statistics(self, name: str = "", version: str = "") -> Sequence[VersionStatistics]:
        return await self.call("statistics", name, version)

    def check_accepting(self) -> None:
        if self.exiting:
            raise unavailable(SHUTTING_DOWN)

    async def infer(self, request: WireRequest) -> list[EncodedOutput]:
        """See ``DataPlaneAPI.infer``: checked and normalized here, executed by the engine."""
        self.check_accepting()
        if request.model.engine and len(self.engines) > 1:  # another engine process's model
            return await self.engines[request.model.engine].infer(request)
        arrays, batch_size = normalize(request, self.shm)
        loop = asyncio.get_running_loop()
        token = next(self._tokens)
        blocks: list[tuple[int, int]] = []
        inputs: list[tuple] = []
        keep: list[np.ndarray] = []
        try:
            for name, array in arrays.items():
                if array.dtype == object:  # BYTES: Python objects travel pickled
                    inputs.append((name, array.shape, array))
                    continue
                offset = self.shm.arena_offset(array)
                if offset is not None:  # read from a client's region into the arena already
                    keep.append(array)
                    inputs.append((name, array.shape, (offset, array.nbytes)))
                    continue
                try:
                    offset = self.arena.allocate(array.nbytes)
                except ArenaFull:  # a burst larger than the arena: this one goes inline
                    inputs.append((name, array.shape, np.ascontiguousarray(array)))
                    continue
                blocks.append((offset, array.nbytes))
                self.arena.write(offset, np.ascontiguousarray(array))
                inputs.append((name, array.shape, (offset, array.nbytes)))
        except BaseException:
            for offset, nbytes in blocks:
                self.arena.free(offset, nbytes)
            raise
        model = request.model
        requested = request.outputs
        outputs: tuple | list
        if all(o.shm is None and not o.classification for o in requested):
            outputs = tuple(o.spec.name for o in requested)  # the engine caches these
        else:
            outputs = [(o.spec.name, tuple(o.shm) if o.shm is not None else None, o.classification) for o in requested]
        message = (
            "infer",
            token,
            model.name,
            model.version,
            model.uid,
            request.id,
            request.parameters,
            request.priority,
            request.timeout_us,
            batch_size,
            inputs,
            outputs,
        )
        if request.traceparent:
            message = (*message, request.traceparent)  # type: ignore[assignment]  # one element more
        future = loop.create_future()
        self._pending[token] = _Pending(future, blocks, request.emit, keep, infer=True)
        self.in_flight += 1
        try:
            self.send(message)
        except InferenceError:
            self._finish(token)
            raise
        try:
            return await future
        except asyncio.CancelledError:
            # the engine withdraws it (or lets it finish); the arena blocks are freed when
            # its final answer arrives, never while it may still read them
            if not self.engine_lost.is_set():
                self.send(("cancel", token))
            raise

    # ------------------------------------------------------------------ repository
    async def repository_index(self, ready_only: bool = False) -> list[tuple[str, str, str, str]]:
        return await self.call("repository_index", ready_only)

    async def load(self, name: str, config_json: str | None = None, files: dict[str, bytes] | None = None) -> None:
        await self.call("load", name, config_json, files)

    async def unload(self, name: str, unload_dependents: bool = False) -> None:
        await self.call("unload", name, unload_dependents)

    # ------------------------------------------------------------------ shared memory
    async def shm_status(self, name: str = "") -> Sequence[RegionStatus]:
        return await self.call("shm_status", name)

    async def shm_register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        await self.call("shm_register", name, key, offset, byte_size)

    async def shm_unregister(self, name: str = "") -> None:
        await self.call("shm_unregister", name)

    async def cuda_shm_status(self, name: str = "") -> Sequence[RegionStatus]:
        return await self.call("cuda_shm_status", name)

    async def cuda_shm_register(self) -> None:
        await self.call("cuda_shm_register")

    async def cuda_shm_unregister(self, name: str = "") -> None:
        await self.call("cuda_shm_unregister", name)

    # ------------------------------------------------------------------ settings
    async def update_log_settings(self, settings: dict) -> dict:
        return await self.call("update_log_settings", settings)

    async def trace_settings(
        self, model: str = "", settings: dict[str, list[str]] | None = None
    ) -> dict[str, list[str]]:
        return await self.call("trace_settings", model, settings)
