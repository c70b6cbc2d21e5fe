"""The engine's end of the frontend channels: calls the DataPlane on the frontends' behalf.

One asyncio task per frontend connection reads its messages; each infer and each call runs
as its own task, so a slow load or a queued request never holds up the channel. Per request
the engine does only what must happen in one place: find the model version the frontend
decoded against, wrap the arena bytes as numpy views (no copy), submit to the scheduler,
send back the encoded outputs (or each response of a decoupled model as it comes).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import os
import time
from collections import namedtuple

import numpy as np
from grpc import StatusCode

from ..dataplane import DataPlane
from ..dataplane.tensors import encode_outputs
from ..engine.repository import ModelVersion
from ..engine.request import InferenceRequest, RequestedOutput, ShmTarget
from ..errors import InferenceError, internal, unavailable
from .arena import ArenaReader, ResponseArena
from .protocol import FrameWriter, read_frame, read_frames
from .remote import InferHeader

log = logging.getLogger("fpgaserve.engine")

RegionInfo = namedtuple("RegionInfo", "name key offset byte_size")
StatisticsView = namedtuple("StatisticsView", "name version_str stats")

# DataPlane methods a frontend may call (anything else is refused)
_PLAIN_CALLS = frozenset(
    {
        "live",
        "ready",
        "model_ready",
        "server_metadata",
        "ready_versions",
        "repository_index",
        "cuda_shm_register",
        "cuda_shm_unregister",
        "update_log_settings",
        "trace_settings",
    }
)
_BROADCAST_TIMEOUT_S = 30.0


class _Frontend:
    def __init__(self, writer: asyncio.StreamWriter):
        self.writer = FrameWriter(writer)
        self.arena: ArenaReader | None = None
        self.responses: ResponseArena | None = None
        self.pid = 0
        self.tasks: dict[int, asyncio.Future] = {}  # calls' tasks and requests' futures

    def send(self, message) -> None:
        if not self.writer.is_closing():
            self.writer.send(message)


class EngineServer:
    def __init__(self, dataplane: DataPlane, socket_path: str):
        self.dataplane = dataplane
        self.socket_path = socket_path
        self.frontends: set[_Frontend] = set()
        self._server: asyncio.AbstractServer | None = None
        self._acks: dict[int, asyncio.Future] = {}
        self._tokens = itertools.count(1)
        self.on_bound = lambda pid, ports: None  # set by the supervisor: (gRPC port, HTTP port)
        # repository changes so far, and load/unload calls in progress: a call broadcasts the
        # change itself (awaited, before its client hears back); changes with no call in
        # progress (poll mode) are broadcast from the listener
        self._generation = 0
        self._control_calls = 0
        self._background: set[asyncio.Task] = set()
        dataplane.repository.listeners.append(self._on_repository_change)

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(self._serve, path=self.socket_path, limit=1 << 20)
        os.chmod(self.socket_path, 0o600)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for fe in list(self.frontends):
            for task in list(fe.tasks.values()):
                task.cancel()
            fe.writer.close()

    # ------------------------------------------------------------------ connections
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        fe = _Frontend(writer)
        try:
            hello = await read_frame(reader)
            if not hello or hello[0] != "hello":
                return
            _, fe.pid, fd_number, size, response_fd, response_size = hello
            fe.arena = ArenaReader(fe.pid, fd_number, size)
            fe.responses = ResponseArena(fe.pid, response_fd, response_size)
            regions = [(r.name, r.key, r.offset, r.byte_size) for r in self.dataplane.shm.status("")]
            fe.send(("welcome", regions))
            self.frontends.add(fe)
            async for messages in read_frames(reader):
                for message in messages:
                    self._dispatch(fe, message)
        except Exception:
            log.exception("frontend channel failed")
        finally:
            self.frontends.discard(fe)
            for task in list(fe.tasks.values()):
                task.cancel()  # its client connections are gone with it
            fe.writer.close()
            if fe.arena is not None:
                fe.arena.close()
            if fe.responses is not None:
                fe.responses.close()

    def _dispatch(self, fe: _Frontend, message) -> None:
        kind = message[0]
        if kind == "infer":
            self._infer(fe, message[1], message[2])
        elif kind == "call":
            self._spawn(fe, message[1], self._call(fe, message[1], message[2], message[3]))
        elif kind == "free":
            assert fe.responses is not None
            fe.responses.free(message[1])
        elif kind == "cancel":
            task = fe.tasks.get(message[1])
            if task is not None:
                task.cancel()
        elif kind == "ack":
            future = self._acks.get(message[1])
            if future is not None and not future.done():
                future.set_result(None)
        elif kind == "bound":
            self.on_bound(fe.pid, tuple(message[1:]))
        else:
            log.error("unknown message from frontend %d: %s", fe.pid, kind)

    def _spawn(self, fe: _Frontend, token: int, coroutine) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        fe.tasks[token] = task
        task.add_done_callback(lambda _t: fe.tasks.pop(token, None))

    # ------------------------------------------------------------------ calls
    async def _call(self, fe: _Frontend, token: int, method: str, args) -> None:
        dp = self.dataplane
        try:
            if method in _PLAIN_CALLS:
                value = await getattr(dp, method)(*args)
            elif method == "model_snapshot":
                mv = await dp.model(*args)
                value = (
                    mv.name,
                    mv.version,
                    mv.uid,
                    mv.config.SerializeToString(),
                    mv._labels,
                    mv.version_dir,
                    mv.model_dir,
                )
            elif method == "statistics":
                value = [StatisticsView(mv.name, mv.version_str, mv.stats) for mv in await dp.statistics(*args)]
            elif method in ("shm_status", "cuda_shm_status"):
                regions = await getattr(dp, method)(*args)
                value = [RegionInfo(r.name, r.key, r.offset, r.byte_size) for r in regions]
            elif method == "shm_register":
                await dp.shm_register(*args)
                await self._broadcast("shm", "register", tuple(args))
                value = None
            elif method == "shm_unregister":
                await dp.shm_unregister(*args)
                await self._broadcast("shm", "unregister", tuple(args))
                value = None
            elif method in ("load", "unload"):
                before = self._generation
                self._control_calls += 1
                try:
                    await getattr(dp, method)(*args)
                finally:
                    self._control_calls -= 1
                    if self._generation != before:
                        # every frontend drops its snapshots before the client hears back
                        await self._broadcast("models_changed")
                value = None
            else:
                raise internal(f"unknown data-plane call '{method}'")
            fe.send(("result", token, value))
        except InferenceError as e:
            fe.send(("error", token, e.code.name, e.message))
        except asyncio.CancelledError:
            fe.send(("error", token, "CANCELLED", "the call was cancelled"))
            raise
        except Exception as e:
            log.exception("data-plane call %s failed", method)
            fe.send(("error", token, "INTERNAL", f"internal error in {method} ({type(e).__name__})"))

    def _on_repository_change(self, event: str, version) -> None:
        self._generation += 1
        if self._control_calls == 0:
            # poll mode changes the repository without a call: tell the frontends too
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return
            task = loop.create_task(self._broadcast("models_changed"))
            self._background.add(task)  # referenced until done (the loop keeps weak ones only)
            task.add_done_callback(self._background.discard)

    async def _broadcast(self, kind: str, *args) -> None:
        """Send to every frontend and wait until each applied it (or left)."""
        waits = []
        for fe in list(self.frontends):
            token = next(self._tokens)
            future = asyncio.get_running_loop().create_future()
            self._acks[token] = future
            fe.send((kind, token, *args))
            waits.append((token, future))
        for token, future in waits:
            try:
                await asyncio.wait_for(future, _BROADCAST_TIMEOUT_S)
            except asyncio.TimeoutError:
                log.warning("a frontend did not acknowledge %s", kind)
            finally:
                self._acks.pop(token, None)

    # ------------------------------------------------------------------ inference
    def _resolve(self, h: InferHeader) -> ModelVersion:
        entry = self.dataplane.repository.models.get(h.model)
        mv = entry.versions.get(h.version) if entry is not None else None
        if mv is None or mv.uid != h.uid:
            # the version the frontend decoded against was unloaded (or replaced) meanwhile,
            # as an in-process request submitted to a stopped scheduler
            raise unavailable(f"Request for unknown model: '{h.model}' version {h.version} is not at ready state")
        return mv

    def _infer(self, fe: _Frontend, token: int, h: InferHeader) -> None:
        """Submit to the scheduler; the answer is sent from the future's callback (no task
        per request: the task and its coroutine were ~8 % of the engine's time, profiled)."""
        try:
            self.dataplane.check_accepting()
            mv = self._resolve(h)
            arena = fe.arena
            assert arena is not None  # set at hello, before any request
            inputs = {}
            for name, dtype, shape, kind, payload in h.inputs:
                if kind == "arena":
                    offset, nbytes = payload
                    inputs[name] = arena.array(np.dtype(dtype), offset, nbytes, shape)
                else:
                    inputs[name] = payload
            ireq = InferenceRequest(
                model=mv,
                inputs=inputs,
                outputs=[
                    RequestedOutput(mv.outputs[name], ShmTarget(*shm) if shm else None, k) for name, shm, k in h.outputs
                ],
                batch_size=h.batch_size,
                id=h.id,
                parameters=h.parameters,
                priority=h.priority,
                timeout_us=h.timeout_us,
                arrival_ns=time.monotonic_ns(),
            )
            responses = fe.responses
            assert responses is not None
            sink = None if mv.decoupled else functools.partial(responses.put, token)
            ireq.encode = functools.partial(encode_outputs, ireq, shm=self.dataplane.shm, sink=sink)
            if mv.decoupled:
                loop = asyncio.get_running_loop()
                ireq.emit = lambda encoded: loop.call_soon_threadsafe(fe.send, ("emit", token, encoded))
            future = self.dataplane.submit(ireq)
        except InferenceError as e:
            fe.send(("error", token, e.code.name, e.message))
            return
        except Exception as e:
            log.exception("request from frontend %d failed", fe.pid)
            fe.send(("error", token, "INTERNAL", f"internal error in ModelInfer ({type(e).__name__})"))
            return
        fe.tasks[token] = future  # a "cancel" from the frontend withdraws it
        future.add_done_callback(functools.partial(self._infer_done, fe, token))

    @staticmethod
    def _infer_done(fe: _Frontend, token: int, future: asyncio.Future) -> None:
        fe.tasks.pop(token, None)
        responses = fe.responses
        assert responses is not None
        if future.cancelled():
            responses.discard(token)
            fe.send(("error", token, StatusCode.CANCELLED.name, "the request was cancelled"))
            return
        e = future.exception()
        if e is None:
            responses.hand_over(token)
            fe.send(("result", token, future.result()))
            return
        responses.discard(token)
        if isinstance(e, InferenceError):
            fe.send(("error", token, e.code.name, e.message))
        else:
            log.error("request from frontend %d failed: %s", fe.pid, type(e).__name__, exc_info=e)
            fe.send(("error", token, "INTERNAL", f"internal error in ModelInfer ({type(e).__name__})"))
