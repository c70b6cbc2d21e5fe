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
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ..dataplane import DataPlane
from ..dataplane.tensors import encode_outputs, engine_request
from ..engine.model_version import ModelVersion
from ..engine.request import EncodedOutput, InferenceRequest, RequestedOutput, ShmTarget
from ..errors import InferenceError, Status, internal, unavailable
from .arena import ArenaReader, ResponseArena
from .protocol import FrameChannel, RegionInfo, statistics_views

if TYPE_CHECKING:
    from ..metrics import Metrics
    from .engines import EngineGroup

log = logging.getLogger("fpgaserve.engine")


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
# --engine-processes N > 1: the calls engine 0 answers for every engine (EngineGroup.call)
_GROUP_CALLS = frozenset(
    {
        "live",
        "ready",
        "model_ready",
        "ready_versions",
        "repository_index",
        "statistics",
        "load",
        "unload",
        "shm_register",
        "shm_unregister",
        "update_log_settings",
        "trace_settings",
    }
)


class _Frontend:
    """One frontend process's channel, its arenas and its requests in flight."""

    def __init__(self, server: EngineServer):
        self.server = server
        self.channel = FrameChannel(self._on_messages, self._on_closed)
        self.arena: ArenaReader | None = None
        self.responses: ResponseArena | None = None
        self.pid = 0
        self.tasks: dict[int, asyncio.Future | _Reply] = {}  # calls' tasks and requests' replies
        # one encoder for every request of this channel (outputs of 16 KiB and more go to the
        # response arena, tagged with the request's token), set at hello
        self.encode: Callable[..., list[EncodedOutput]] | None = None
        # (model version uid, requested output names) -> the RequestedOutputs, so a request
        # asking for plain outputs builds none (they are the same for every such request)
        self.plain_outputs: dict[tuple, list[RequestedOutput]] = {}

    def put_response(self, request: InferenceRequest, array: np.ndarray):
        """``encode_outputs``' sink: an output's bytes into the response arena (or None)."""
        assert self.responses is not None
        return self.responses.put(request.tag, array)

    def send(self, message) -> None:
        if not self.channel.is_closing():
            self.channel.send(message)

    def _on_messages(self, messages: list) -> None:
        try:
            if self.arena is None:  # the first message of a channel is the hello
                if not self._hello(messages[0]):
                    return
                messages = messages[1:]
            dispatch = self.server._dispatch
            for message in messages:
                dispatch(self, message)
        except Exception:
            log.exception("frontend channel failed")
            self.channel.close()

    def _hello(self, hello) -> bool:
        if not isinstance(hello, tuple) or not hello or hello[0] != "hello":
            self.channel.close()
            return False
        _, self.pid, fd_number, size, response_fd, response_size = hello
        self.arena = ArenaReader(self.pid, fd_number, size)
        self.responses = ResponseArena(self.pid, response_fd, response_size)
        dp = self.server.dataplane
        self.encode = functools.partial(
            encode_outputs,
            shm=dp.shm,
            sink=self.put_response,
            sink_min_bytes=ResponseArena.MIN_BYTES,
            as_tuples=True,  # pickled straight into the result frame
        )
        regions = [(r.name, r.key, r.offset, r.byte_size) for r in dp.shm.status("")]
        self.send(("welcome", regions, dp.tracer.active))
        self.server.frontends.add(self)
        return True

    def _on_closed(self) -> None:
        self.server.frontends.discard(self)
        for task in list(self.tasks.values()):
            task.cancel()  # its client connections are gone with it
        if self.arena is not None:
            self.arena.close()
        if self.responses is not None:
            self.responses.close()


class EngineServer:
    def __init__(self, dataplane: DataPlane, socket_path: str):
        self.dataplane = dataplane
        self.socket_path = socket_path
        self.frontends: set[_Frontend] = set()
        self._server: asyncio.AbstractServer | None = None
        self._acks: dict[int, asyncio.Future] = {}
        self._tokens = itertools.count(1)
        self.on_bound = lambda pid, ports: None  # set by the supervisor: (gRPC port, HTTP port)
        # --engine-processes N > 1: in engine 0, the other engines (EngineGroup); in every
        # engine, the Metrics whose families engine 0 merges into /metrics
        self.engines: EngineGroup | None = None
        self.metrics: Metrics | None = None
        # in an engine process of --engine-processes N > 1: what engine 0's "drain" call does
        # (that process stops: it ignores the signals meant for the server)
        self.on_drain: Callable[[], None] | None = None
        # repository changes so far, and load/unload calls in progress: a call broadcasts the
        # change itself (awaited, before its client hears back); changes with no call in
        # progress (poll mode) are broadcast from the listener
        self._generation = 0
        self._control_calls = 0
        self._background: set[asyncio.Task] = set()
        dataplane.repository.listeners.append(self._on_repository_change)
        dataplane.tracer.on_change.append(self._on_tracing_change)

    def _on_tracing_change(self, active: bool) -> None:
        """Tracing went on or off: the frontends start or stop collecting ``traceparent``
        (one-way; a request sent meanwhile is sampled here all the same, only without its
        client's trace context)."""
        for fe in list(self.frontends):
            fe.send(("tracing", active))

    def drain_frontends(self) -> None:
        """Tell every frontend process to stop (they ignore the signals meant for the server):
        each refuses new work, answers the calls it has in flight and exits (one-way)."""
        for fe in list(self.frontends):
            fe.send(("drain",))

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_unix_server(lambda: _Frontend(self).channel, path=self.socket_path)
        os.chmod(self.socket_path, 0o600)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for fe in list(self.frontends):
            for task in list(fe.tasks.values()):
                task.cancel()
            fe.channel.close()

    def _dispatch(self, fe: _Frontend, message) -> None:
        kind = message[0]
        if kind == "infer":
            self._infer(fe, message)
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
            if self.engines is not None and method in _GROUP_CALLS:
                self._control_calls += 1  # (a load of engine 0's broadcasts once, below)
                try:
                    value = await self.engines.call(method, tuple(args))
                finally:
                    self._control_calls -= 1
                    if method in ("load", "unload"):
                        # the model may be another engine's: every frontend drops its snapshots
                        await self._broadcast("models_changed")
                if method in ("shm_register", "shm_unregister"):
                    await self._broadcast("shm", method[4:], tuple(args))
            elif method == "drain" and self.on_drain is not None:
                self.on_drain()
                value = None
            elif self.engines is not None and method == "model_snapshot":
                value = await self.engines.snapshot(*args)
            elif method == "metric_families" and self.metrics is not None:
                value = list(self.metrics.collector.collect())
            elif method in _PLAIN_CALLS:
                value = await getattr(dp, method)(*args)
            elif method == "model_snapshot":
                value = (await dp.model(*args)).snapshot()
            elif method == "statistics":
                value = statistics_views(await dp.statistics(*args))
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
            fe.send(("error", token, e.status.name, e.message))
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
    def _resolve(self, name: str, version: int, uid: int) -> ModelVersion:
        entry = self.dataplane.repository.models.get(name)
        mv = entry.versions.get(version) if entry is not None else None
        if mv is None or mv.uid != uid:
            # the version the frontend decoded against was unloaded (or replaced) meanwhile,
            # as an in-process request submitted to a stopped scheduler
            raise unavailable(f"Request for unknown model: '{name}' version {version} is not at ready state")
        return mv

    def _outputs(self, fe: _Frontend, mv: ModelVersion, outputs) -> list[RequestedOutput]:
        if isinstance(outputs, tuple):  # names of plain outputs (no shm, no classification)
            key = (mv.uid, outputs)
            requested = fe.plain_outputs.get(key)
            if requested is None:
                if len(fe.plain_outputs) >= 1024:  # versions come and go: keep it bounded
                    fe.plain_outputs.clear()
                requested = fe.plain_outputs[key] = [RequestedOutput(mv.outputs[name]) for name in outputs]
            return requested
        return [RequestedOutput(mv.outputs[name], ShmTarget(*shm) if shm else None, k) for name, shm, k in outputs]

    def _infer(self, fe: _Frontend, message: tuple) -> None:
        """Submit to the scheduler, which answers through the request's ``_Reply``. The
        frontend validated the request against this model version (``uid``): nothing is
        checked again, the inputs become numpy views on its arena in the model's dtypes."""
        if len(message) == 12:
            _, token, name, version, uid, request_id, parameters, priority, timeout_us, batch_size, inputs, outputs = (
                message
            )
            traceparent = ""
        else:  # tracing is on in the frontend: the client's trace context comes last
            _, token, name, version, uid, request_id, parameters, priority, timeout_us, batch_size, inputs, outputs = (
                message[:12]
            )
            traceparent = message[12]
        reply = _Reply(fe, token)
        fe.tasks[token] = reply  # a "cancel" from the frontend withdraws it
        try:
            self.dataplane.check_accepting()
            mv = self._resolve(name, version, uid)
            assert fe.arena is not None  # set at hello, before any request
            view = fe.arena.view
            arrays = {}
            specs = mv.inputs
            for in_name, shape, payload in inputs:
                if type(payload) is tuple:  # (offset, nbytes) in the arena: a view, no copy
                    # (np.ndarray over the buffer: a quarter of frombuffer + reshape's cost;
                    # it refuses a block that does not lie inside the arena)
                    arrays[in_name] = np.ndarray(shape, specs[in_name].datatype.dtype, view, payload[0])
                else:  # travelled in the frame (BYTES, or the arena was full)
                    arrays[in_name] = payload
            ireq = engine_request(
                mv,
                arrays,
                self._outputs(fe, mv, outputs),
                batch_size,
                request_id,
                parameters,
                priority,
                timeout_us,
                fe.encode,  # type: ignore[arg-type]  # (set at hello, before any request)
                tracer=self.dataplane.tracer,
                traceparent=traceparent,
                future=reply,  # a stand-in for the scheduler's future: see InferenceRequest.future
                tag=token,
            )
            if mv.decoupled:
                loop = asyncio.get_running_loop()
                ireq.emit = lambda encoded: loop.call_soon_threadsafe(fe.send, _emitted(token, encoded))
                ireq.encode = functools.partial(encode_outputs, shm=self.dataplane.shm)
            self.dataplane.submit(ireq)
        except InferenceError as e:
            reply.set_exception(e)
        except Exception as e:
            log.exception("request from frontend %d failed", fe.pid)
            reply.set_exception(e)


def _emitted(token, encoded) -> tuple:
    """The message that carries a decoupled response to its frontend: its encoded outputs, or
    the status and text of an error response (sent as plain values, never a pickled exception)."""
    if isinstance(encoded, InferenceError):
        return ("emit_error", token, encoded.status.name, encoded.message)
    return ("emit", token, encoded)


class _Reply:
    """What answers a frontend's request, in place of an asyncio.Future (the schedulers call
    ``done``, ``set_result``, ``set_exception``; a "cancel" from the frontend or the end of
    its channel calls ``cancel``): resolving it sends the answer at once, on the event loop
    thread, with no done-callback to schedule. The first outcome wins; later ones (a request
    cancelled while it executed, then finished) are dropped, as a done future drops them.
    The engine's CPU per small request went down ~2 µs with it (bench_engine.py)."""

    __slots__ = ("_cancelled", "_done", "fe", "token")

    def __init__(self, fe: _Frontend, token: int):
        self.fe = fe
        self.token = token
        self._done = False
        self._cancelled = False

    def done(self) -> bool:
        return self._done  # read by instance threads too: one attribute

    def _finish(self) -> ResponseArena:
        self._done = True
        self.fe.tasks.pop(self.token, None)
        responses = self.fe.responses
        assert responses is not None  # set at hello, before any request
        return responses

    def set_result(self, value) -> None:
        if self._done:
            return
        self._finish().hand_over(self.token)
        self.fe.send(("result", self.token, value))

    def set_exception(self, e: BaseException) -> None:
        if self._done:
            return
        self._finish().discard(self.token)
        if isinstance(e, InferenceError):
            self.fe.send(("error", self.token, e.status.name, e.message))
        else:
            log.error("request from frontend %d failed: %s", self.fe.pid, type(e).__name__, exc_info=e)
            self.fe.send(("error", self.token, "INTERNAL", f"internal error in ModelInfer ({type(e).__name__})"))

    def cancelled(self) -> bool:
        return self._cancelled  # read by instance threads too (a model's is_cancelled())

    def cancel(self) -> bool:
        if self._done:
            return False
        self._cancelled = True
        self._finish().discard(self.token)
        self.fe.send(("error", self.token, Status.CANCELLED.name, "the request was cancelled"))
        return True
