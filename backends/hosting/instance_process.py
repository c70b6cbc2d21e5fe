"""Model instances in their own processes: a crash of model code fails its batch, not the server.

``ProcessBackend`` is a ``Backend`` the scheduler drives like any other (``execute``,
``execute_requests``, ``health``, ``close``); it runs the real backend -- any backend class,
named by ``child_target`` -- in a child process per instance (``instance_worker``), started
with ``subprocess`` (fork+exec: a fresh interpreter; the engine has threads, so never a bare
fork). Per batch one small message goes each way; tensors travel by descriptor through the
two sides' shared-memory segments (``instance_channel``). The child dies with the server (its
watchdog reads the lifeline pipe, whose write end only this process holds).

A child that dies (``os._exit``, SIGSEGV, abort) fails the batch in flight with INTERNAL
naming the model, the instance and its exit status or signal (UNAVAILABLE when the unload
killed it, ``kill``); the next batch starts a new
child (``MAX_RESTARTS`` within ``RESTART_WINDOW_S``; after that the instance stays down and
``health`` says why, so the version is not ready). Restarts are counted per model version in
``fpgaserve_instance_restarts_total`` on /metrics.
"""

from __future__ import annotations

import asyncio
import collections
import importlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np

from fpgaserve.server.errors import InferenceError, Status, internal, unavailable

from ..base import Backend, BackendError
from . import custom_metrics
from .instance_channel import Channel, Segment, SegmentReader

log = logging.getLogger("fpgaserve.instance")

MAX_RESTARTS = 3
RESTART_WINDOW_S = 60.0
#: how long close() waits for finalize() before terminating the child, and then before killing it
CLOSE_GRACE_S = 10.0
KILL_GRACE_S = 3.0
#: how long a load (import + initialize) may take before the child is killed
LOAD_TIMEOUT_S = float(os.environ.get("FPGASERVE_INSTANCE_LOAD_TIMEOUT_S", "300"))

#: what the child runs: the worker, imported with the working directory (the version folder,
#: which the child runs in) off ``sys.path`` first. ``python -m`` or ``-c`` put it there, ahead of
#: the standard library, so that a model's ``queue.py``, ``numpy.py`` or ``fpgaserve/`` would be
#: imported in place of the worker's own modules (Python 3.11's ``-P`` would leave it out; 3.10 has no -P).
CHILD_PROGRAM = (
    "import sys; sys.path[:1] = [p for p in sys.path[:1] if p not in ('', '.')]; "
    "from fpgaserve.backends.hosting.instance_worker import main; main(sys.argv[1:])"
)

_LOG_LEVELS = {"info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR, "verbose": logging.DEBUG}

# (model, version) -> restarts of its instances' processes, for /metrics
_RESTARTS: dict[tuple[str, str], int] = collections.defaultdict(int)
_RESTARTS_LOCK = threading.Lock()


def instance_restart_counts() -> dict[tuple[str, str], int]:
    with _RESTARTS_LOCK:
        return dict(_RESTARTS)


def restart_families():
    """``fpgaserve_instance_restarts_total{model,version}`` for /metrics."""
    from prometheus_client.core import CounterMetricFamily

    family = CounterMetricFamily(
        "fpgaserve_instance_restarts",
        "Restarts of model instance processes after their process died",
        labels=["model", "version"],
    )
    for (model, version), count in sorted(instance_restart_counts().items()):
        family.add_metric([model, version], count)
    return [family]


class ChildDied(Exception):
    """The instance's process is gone (the text says how)."""


def exit_description(returncode: int | None) -> str:
    if returncode is None:
        return "stopped answering"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by signal {-returncode} ({name})"
    return f"exited with status {returncode}"


class ProcessBackend(Backend):
    """Parent side of an instance whose backend runs in a child process.

    Subclasses name the hosted class (``child_target = "module:Class"``) and may add to the
    child's environment (``child_env``). The hosted class is constructed in the child with the
    backend constructor's arguments; its ``execute`` (and ``execute_requests``) run there.

    What a subclass with a protocol of its own (the Python backend's requests) builds on:
    ``ensure_running`` before a batch, ``send`` and ``next_message`` for the exchange (both
    raise ``ChildDied``, which ``crashed`` turns into the batch's error), ``segment`` (this
    side's tensors: ``segment.put``) and ``peer`` (the child's: ``peer.get``).
    ``unhealthy_prefix`` starts every error about the child's process."""

    child_target: str = ""
    executes_model_files = True

    def __init__(self, config: dict, version_dir: str, instance_index: int, backend_config: dict | None = None):
        super().__init__(config, version_dir, instance_index, backend_config)
        self.model_name = config.get("name", "")
        self.model_version = os.path.basename(os.path.normpath(version_dir))
        self.instance_name = self.describe_instance(config, instance_index)
        self.decoupled = bool(config.get("model_transaction_policy", {}).get("decoupled", False))
        self.segment = Segment()  # the tensors this side sends (reset per batch)
        self._proc: subprocess.Popen | None = None
        self._channel: Channel | None = None
        self._lifeline: int | None = None
        self.peer: SegmentReader | None = None  # the child's segment, mapped while it runs
        self._restarts: collections.deque[float] = collections.deque()
        self._failed: str | None = None  # why the instance is down for good
        # set by kill(): the child's death is the unload's doing, not a crash to restart from
        self._unloading = False
        # services for calls the child makes into the engine (BLS): set by bind_engine
        self._loop: asyncio.AbstractEventLoop | None = None
        self._engine_call = None
        try:
            self._start()
        except BaseException:
            self.segment.close()
            raise

    # ------------------------------------------------------------------ naming
    @staticmethod
    def describe_instance(config: dict, index: int) -> str:
        """Triton's instance name: its group's name (``<model>_<group position>`` unless the
        config names it) and ``_<index within the group>`` (Triton 2.51 names the one instance
        of the default group ``<model>`` ``<model>_0``)."""
        groups = config.get("instance_group") or [{"count": 1}]
        seen = 0
        for position, group in enumerate(groups):
            count = int(group.get("count", 1))
            if index < seen + count:
                name = group.get("name") or f"{config.get('name', '')}_{position}"
                return f"{name}_{index - seen}"
            seen += count
        return f"{config.get('name', '')}_{index}"

    def _what(self) -> str:
        return f"instance '{self.instance_name}' of model '{self.model_name}' version {self.model_version}"

    def unhealthy_prefix(self) -> str:
        """What a failure of the child's process starts with (the Python backend: Triton's text)."""
        return ""

    def child_env(self) -> dict[str, str]:
        return dict(os.environ)

    def load_args(self) -> tuple:
        """What the hosted class is constructed with (config, version dir, index, backend config)."""
        return (self.config, self.version_dir, self.instance_index, self.backend_config)

    # ------------------------------------------------------------------ process
    def _start(self) -> None:
        parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        life_r, life_w = os.pipe()
        try:
            proc = subprocess.Popen(
                [sys.executable, "-c", CHILD_PROGRAM, str(child_sock.fileno()), str(life_r)],
                pass_fds=(child_sock.fileno(), life_r),
                env=self.child_env(),
                stdin=subprocess.DEVNULL,
                cwd=self.version_dir,
            )
        except BaseException:
            parent_sock.close()
            os.close(life_w)
            raise
        finally:
            child_sock.close()
            os.close(life_r)
        self._proc = proc
        self._lifeline = life_w
        self._channel = Channel(parent_sock.detach())
        log.debug("%s: started process %d", self._what(), proc.pid)
        try:
            self._channel.send(("load", self.child_target, self.load_args(), self.segment.path))
            reply = self.next_message(timeout=LOAD_TIMEOUT_S)
        except ChildDied as e:
            self._reap(kill=True)
            raise BackendError(f"the process of {self._what()} {e} while loading") from None
        if reply[0] == "load_error":
            self._reap(kill=False)
            raise BackendError(reply[1])
        self.peer = SegmentReader(reply[1])
        # what the hosted object reported at load (e.g. an auto-completed config)
        self.load_result = reply[2]

    def next_message(self, timeout: float | None = None) -> tuple:
        """The child's next message for the caller, serving logs, metrics and calls into the
        server meanwhile; ChildDied when it is gone (or has not answered within ``timeout``)."""
        channel = self._channel
        assert channel is not None
        while True:
            try:
                if timeout is not None and not channel.poll(timeout):
                    raise ChildDied(f"did not answer within {timeout:g} s")
                message = channel.recv()
            except (EOFError, OSError):
                raise ChildDied(self._death()) from None
            kind = message[0]
            if kind == "log":
                log.log(_LOG_LEVELS.get(message[1], logging.INFO), "%s: %s", self.instance_name, message[2])
                continue
            if kind == "call":
                self._serve_call(message[1], message[2], message[3])
                continue
            if kind == "metric":
                custom_metrics.apply(self.model_name, self.model_version, message[1:])
                continue
            return message

    def send(self, message: tuple) -> None:
        """Send the child a message; ChildDied when it is gone."""
        assert self._channel is not None
        try:
            self._channel.send(message)
        except OSError:
            raise ChildDied(self._death()) from None

    def _death(self) -> str:
        proc = self._proc
        if proc is None:
            return "is not running"
        try:
            proc.wait(KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return exit_description(proc.returncode)

    def _reap(self, kill: bool) -> None:
        """Forget the child: kill it if asked (else wait for it), close our ends."""
        proc = self._proc
        if proc is not None:
            if kill and proc.poll() is None:
                proc.kill()
            try:
                proc.wait(KILL_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        if self._lifeline is not None:
            os.close(self._lifeline)
            self._lifeline = None
        if self.peer is not None:
            self.peer.close()
            self.peer = None
        self._proc = None

    def crashed(self, why: str) -> InferenceError:
        """The child died during a batch: forget it, log, and the error the batch fails with
        (INTERNAL, starting with ``unhealthy_prefix``, then what happened; UNAVAILABLE when
        the unload killed it). The next ``ensure_running`` restarts it, while restarts allow."""
        self._reap(kill=True)
        text = f"{self.unhealthy_prefix()}the process of {self._what()} {why} while executing the batch"
        if self._unloading:
            log.warning("%s: it was stopped because its model version was unloaded", text)
            return unavailable(f"{text}: its model version was unloaded")
        now = time.monotonic()
        while self._restarts and now - self._restarts[0] > RESTART_WINDOW_S:
            self._restarts.popleft()
        if len(self._restarts) >= MAX_RESTARTS:
            self._failed = (
                f"the process of {self._what()} {why}; it was restarted {len(self._restarts)} times in "
                f"{RESTART_WINDOW_S:g} s and stays down"
            )
            log.error("%s", self._failed)
            return internal(f"{self.unhealthy_prefix()}{self._failed}")
        log.error("%s; it restarts for the next batch", text)
        return internal(f"{text}; the instance restarts")

    def ensure_running(self) -> None:
        """Restart a child that died (a counted restart), or raise UNAVAILABLE when the instance
        is down for good."""
        if self._proc is not None:
            return
        if self._failed is not None:
            raise unavailable(f"{self.unhealthy_prefix()}{self._failed}")
        self._restarts.append(time.monotonic())
        with _RESTARTS_LOCK:
            _RESTARTS[(self.model_name, self.model_version)] += 1
        log.warning("%s: restarting its process", self._what())
        try:
            self._start()
        except BackendError as e:
            self._failed = f"restarting the process of {self._what()} failed: {e}"
            log.error("%s", self._failed)
            raise unavailable(f"{self.unhealthy_prefix()}{self._failed}") from None

    # ------------------------------------------------------------------ backend contract
    def execute(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.ensure_running()
        self.segment.reset()
        put = self.segment.put
        try:
            self.send(("exec", [(name, put(array)) for name, array in inputs.items()]))
            reply = self.next_message()
        except ChildDied as e:
            raise self.crashed(str(e)) from None
        if reply[0] == "failed":
            raise InferenceError(Status[reply[1]] if reply[1] in Status.__members__ else Status.INTERNAL, reply[2])
        peer = self.peer
        assert peer is not None
        # copies: the child's segment is reused by its next batch
        return {name: peer.get(ref, copy=True) for name, ref in reply[1]}

    def health(self) -> str | None:
        return self._failed

    def close(self) -> None:
        """Stop the child: ``close`` (its finalize, up to ``CLOSE_GRACE_S``), then SIGTERM,
        then SIGKILL, each after a grace period; no process is left behind."""
        proc = self._proc
        if proc is not None and proc.poll() is None and self._channel is not None:
            try:
                self.send(("close",))
                deadline = time.monotonic() + CLOSE_GRACE_S
                while self.next_message(timeout=max(0.01, deadline - time.monotonic()))[0] != "closed":
                    pass
            except ChildDied:
                pass
            for stop in (None, proc.terminate, proc.kill):
                if stop is not None:
                    stop()
                try:
                    proc.wait(KILL_GRACE_S)
                    break
                except subprocess.TimeoutExpired:
                    continue
        self._reap(kill=True)
        self.segment.close()

    def kill(self) -> None:
        """Kill the child now (an instance abandoned inside execute at unload): its batch then
        fails and the instance thread gets to close. Safe from any thread."""
        self._unloading = True
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()

    # ------------------------------------------------------------------ calls from the child
    def bind_engine(self, loop: asyncio.AbstractEventLoop, engine_call) -> None:
        """Where the child's calls into the engine go: ``engine_call(payload, stream, reply)`` is
        a coroutine function run on ``loop`` that answers through ``reply(item)``."""
        self._loop = loop
        self._engine_call = engine_call

    def request_cancelled(self, exec_id: int, index: int) -> bool:
        """Whether request ``index`` of batch ``exec_id`` (still running in the child) has been
        withdrawn by its client: overridden by backends that hand the child their requests."""
        return False

    def _serve_call(self, call_id: int, payload: Any, stream: bool) -> None:
        channel = self._channel
        assert channel is not None
        if isinstance(payload, tuple) and payload and payload[0] == "is_cancelled":
            # answered here, on the thread reading the child (it runs that very batch): no
            # hop to the event loop for a question the model may ask in a loop
            try:
                channel.send(("reply", call_id, ("ok", self.request_cancelled(payload[1], payload[2]))))
            except OSError:
                pass
            return

        def reply(item: tuple) -> None:
            # from the event loop's thread; the channel's send is locked against the instance thread
            try:
                channel.send(("reply", call_id, item))
            except OSError:
                pass  # the child is gone; its batch fails on the instance thread

        if self._loop is None or self._engine_call is None:
            reply(("error", "UNAVAILABLE", "this model instance cannot call into the server"))
            if stream:
                reply(("end",))
            return
        try:
            asyncio.run_coroutine_threadsafe(self._engine_call(payload, stream, reply, self), self._loop)
        except RuntimeError:  # the loop is closed (shutdown)
            reply(("error", "UNAVAILABLE", "the server is shutting down"))
            if stream:
                reply(("end",))


def hosted(cls: type[Backend]) -> type[ProcessBackend]:
    """``cls`` with each instance in its own process: the parent side of it (config
    ``parameters { key: "instance_process" value: { string_value: "true" } }``, or the
    backend's ``instance_process_by_default``): the backend's own host where it names one."""
    if cls.instance_process_host:
        module_name, class_name = cls.instance_process_host.split(":")
        return getattr(importlib.import_module(module_name), class_name)

    def describe_io(_, config: dict, version_dir: str):
        return cls.describe_io(config, version_dir)

    return type(
        f"Hosted{cls.__name__}",
        (ProcessBackend,),
        {
            "child_target": f"{cls.__module__}:{cls.__qualname__}",
            "default_filename": cls.default_filename,
            "executes_model_files": cls.executes_model_files,
            "describe_io": classmethod(describe_io),
            "__doc__": f"{cls.__name__} in an instance process per instance.",
        },
    )


def failure_from_child(reply: tuple) -> InferenceError:
    status = Status[reply[1]] if reply[1] in Status.__members__ else Status.INTERNAL
    return InferenceError(status, reply[2])
