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
``fpgaserve_instance_restarts_total`` on /metrics. While its child is dead or restarting the
instance is not ready (``instance_ready``, as Triton's Python backend reports a dead stub),
and a hosted object with an ``is_ready`` hook is asked through a channel of its own, answered
by a thread of the child even while it executes a batch (``ask_child_ready``).

The child ignores the signals meant for the server (instance_worker.py); it stops when this
side closes it, and a child this side has to kill takes the compilers it started along
(``helper_groups``). ``abandon_loads`` gives up on every load still in progress (the server
is stopping).
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
import weakref
from typing import Any

import numpy as np

from fpgaserve.server.errors import InferenceError, Status, internal, unavailable

from ..base import Backend, BackendError
from . import custom_metrics
from .helper_groups import ReportedGroups, kill_helper_groups
from .instance_channel import Channel, Segment, SegmentReader
from .instance_worker import stop_signals_blocked

log = logging.getLogger("fpgaserve.instance")

MAX_RESTARTS = 3
RESTART_WINDOW_S = 60.0
#: how long close() waits for finalize() before terminating the child, and then before killing it
CLOSE_GRACE_S = 10.0
KILL_GRACE_S = 3.0
#: how long a load (import + initialize) may take before the child is killed
LOAD_TIMEOUT_S = float(os.environ.get("FPGASERVE_INSTANCE_LOAD_TIMEOUT_S", "300"))

_LOG_LEVELS = {"info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR, "verbose": logging.DEBUG}

# (model, version) -> restarts of its instances' processes, for /metrics
_RESTARTS: dict[tuple[str, str], int] = collections.defaultdict(int)
_RESTARTS_LOCK = threading.Lock()

# instances whose child is loading now (abandon_loads kills them)
_LOADING: weakref.WeakSet[ProcessBackend] = weakref.WeakSet()
_LOADING_LOCK = threading.Lock()
_ABANDONED = threading.Event()  # set by abandon_loads: no load starts any more


def abandon_loads() -> int:
    """Give up on every instance load in progress and refuse new ones (the server is stopping;
    a crashed instance still restarts to serve the requests queued for it):
    each loading child is killed with the compilers it started, so its load fails at once
    instead of holding the shutdown for its whole compile; so are this process's own helper
    programs (a C-simulation compiled in the server's process). The number of loads abandoned."""
    _ABANDONED.set()
    with _LOADING_LOCK:
        loading = list(_LOADING)
    for backend in loading:
        backend.abandon_load()
    kill_helper_groups()
    return len(loading)


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
        self._restarting = False  # a restart (its child's load) is in progress
        self._abandoning = False  # its load was abandoned (abandon_load)
        self._last_exit = ""  # how the last child ended (for instance_ready)
        self._helpers = ReportedGroups()  # the compilers the child started (killed with it)
        # the is_ready channel: one question in flight, waiters share its answer (see ask_child_ready)
        self._ready_channel: Channel | None = None
        self._ready_cond = threading.Condition()
        self._ready_inflight = False
        self._ready_answer: tuple = ("absent",)
        self._ready_seq = 0
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
    def _start(self, restart: bool = False) -> None:
        if _ABANDONED.is_set() and not restart:  # (a restart during the drain still serves its queue)
            raise BackendError(f"{self._what()} was not loaded: the server is stopping")
        parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ready_sock, child_ready_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        life_r, life_w = os.pipe()
        try:
            with stop_signals_blocked():  # until the child ignores them (instance_worker.main)
                proc = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "fpgaserve.backends.hosting",
                        str(child_sock.fileno()),
                        str(life_r),
                        str(child_ready_sock.fileno()),
                    ],
                    pass_fds=(child_sock.fileno(), life_r, child_ready_sock.fileno()),
                    env=self.child_env(),
                    stdin=subprocess.DEVNULL,
                    cwd=self.version_dir,
                )
        except BaseException:
            parent_sock.close()
            ready_sock.close()
            os.close(life_w)
            raise
        finally:
            child_sock.close()
            child_ready_sock.close()
            os.close(life_r)
        self._proc = proc
        self._lifeline = life_w
        self._channel = Channel(parent_sock.detach())
        self._ready_channel = Channel(ready_sock.detach())
        self._ready_inflight, self._ready_answer = False, ("absent",)
        log.debug("%s: started process %d", self._what(), proc.pid)
        with _LOADING_LOCK:
            _LOADING.add(self)
        try:
            self._channel.send(("load", self.child_target, self.load_args(), self.segment.path))
            reply = self.next_message(timeout=LOAD_TIMEOUT_S)
        except ChildDied as e:
            self._reap(kill=True)
            if _ABANDONED.is_set():
                raise BackendError(f"the load of {self._what()} was abandoned: the server is stopping") from None
            raise BackendError(f"the process of {self._what()} {e} while loading") from None
        finally:
            with _LOADING_LOCK:
                _LOADING.discard(self)
        if reply[0] == "load_error":
            self._reap(kill=False)
            if _ABANDONED.is_set() and not restart:
                raise BackendError(f"the load of {self._what()} was abandoned: the server is stopping")
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
            if kind == "helper":  # a compiler the child started, or one that ended
                proc = self._proc
                if proc is not None and len(message) == 3:
                    self._helpers.report(proc.pid, message[1], message[2])
                    if self._abandoning:  # a load given up on: no compile of it runs on
                        self._helpers.kill()
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
            self._last_exit = exit_description(proc.returncode)
        # the compilers it started outlive it otherwise (sessions of their own)
        self._helpers.kill()
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        if self._ready_channel is not None:
            self._ready_channel.close()
            self._ready_channel = None
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
        is down for good. A child found dead before the batch is sent (it died while idle: the
        readiness checks said so meanwhile) is restarted first, so no request fails for it."""
        proc = self._proc
        if proc is not None:
            if proc.poll() is None:
                return
            log.error("%s: its process %s while idle", self._what(), exit_description(proc.returncode))
            self._reap(kill=True)
        if self._failed is not None:
            raise unavailable(f"{self.unhealthy_prefix()}{self._failed}")
        self._restarts.append(time.monotonic())
        with _RESTARTS_LOCK:
            _RESTARTS[(self.model_name, self.model_version)] += 1
        log.warning("%s: restarting its process", self._what())
        self._restarting = True
        try:
            self._start(restart=True)
        except BackendError as e:
            self._failed = f"restarting the process of {self._what()} failed: {e}"
            log.error("%s", self._failed)
            raise unavailable(f"{self.unhealthy_prefix()}{self._failed}") from None
        finally:
            self._restarting = False

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

    def instance_ready(self) -> str | None:
        """None while the child runs, else why the instance cannot serve now: its process is
        restarting, dead (it restarts for the next batch) or down for good. A non-blocking
        look at the child (``poll``, as Triton's Python backend checks its stub with waitpid)."""
        if self._failed is not None:
            return f"{self.unhealthy_prefix()}{self._failed}"
        if self._restarting:
            return f"{self.unhealthy_prefix()}the process of {self._what()} is restarting"
        proc = self._proc
        if proc is None:
            how = f" {self._last_exit}" if self._last_exit else " is not running"
            return f"{self.unhealthy_prefix()}the process of {self._what()}{how}; it restarts for the next request"
        returncode = proc.poll()
        if returncode is not None:
            return (
                f"{self.unhealthy_prefix()}the process of {self._what()} {exit_description(returncode)}; "
                "it restarts for the next request"
            )
        return None

    def ask_child_ready(self, timeout: float) -> tuple:
        """Ask the hosted object's ``is_ready()`` (through the readiness channel, which a thread
        of the child serves even while it executes a batch): ``("answer", ready, error text or
        None)``, ``("timeout",)`` when it did not answer within ``timeout``, ``("busy",)`` when
        another question was in flight and still is after ``timeout``, ``("dead",)`` when the
        child is gone. One question in flight per instance; who asks meanwhile waits for its
        answer and shares it (Triton's Python backend does the same). A question that timed
        out stays in flight until its late answer (read by a thread of its own) arrives."""
        with self._ready_cond:
            if self._ready_inflight:
                if not self._ready_cond.wait_for(lambda: not self._ready_inflight, timeout):
                    return ("busy",)
                return self._ready_answer
            channel = self._ready_channel
            if channel is None:
                return ("dead",)
            self._ready_inflight = True
            self._ready_seq += 1
            seq = self._ready_seq
        try:
            channel.send(("is_ready", seq))
            if channel.poll(timeout):
                answer = self._read_ready(channel, seq)
            else:
                threading.Thread(target=self._late_ready, args=(channel, seq), name="is_ready", daemon=True).start()
                return ("timeout",)
        except (EOFError, OSError):
            answer = ("dead",)
        self._settle_ready(answer)
        return answer

    @staticmethod
    def _read_ready(channel: Channel, seq: int) -> tuple:
        """The answer to question ``seq`` (answers to earlier ones, late, are skipped)."""
        while True:
            message = channel.recv()
            if len(message) == 4 and message[0] == "ready" and message[1] == seq:
                ready, error = message[2], message[3]
                return ("answer", ready is True, error if isinstance(error, str) else None)

    def _late_ready(self, channel: Channel, seq: int) -> None:
        try:
            answer = self._read_ready(channel, seq)
        except (EOFError, OSError):
            answer = ("dead",)
        self._settle_ready(answer)

    def _settle_ready(self, answer: tuple) -> None:
        with self._ready_cond:
            self._ready_inflight = False
            self._ready_answer = answer
            self._ready_cond.notify_all()

    def close(self) -> None:
        """Stop the child: ``close`` (its finalize, up to ``CLOSE_GRACE_S``), then SIGKILL
        (the child ignores SIGTERM, which is the server's to get); no process is left behind,
        its compilers included."""
        proc = self._proc
        if proc is not None and proc.poll() is None and self._channel is not None:
            try:
                self.send(("close",))
                deadline = time.monotonic() + CLOSE_GRACE_S
                while self.next_message(timeout=max(0.01, deadline - time.monotonic()))[0] != "closed":
                    pass
                proc.wait(KILL_GRACE_S)
            except (ChildDied, subprocess.TimeoutExpired):
                pass
        self._reap(kill=True)
        self.segment.close()

    def abandon_load(self) -> None:
        """Make the load in progress fail now (``abandon_loads``): the compilers the child
        started are killed (and any it reports from now on), and it gets ``KILL_GRACE_S`` to
        fail its load by itself, removing its build folder; then it is killed."""
        if self._proc is None:
            return
        self._abandoning = True
        self._helpers.kill()
        timer = threading.Timer(KILL_GRACE_S, self._kill_if_loading)
        timer.daemon = True
        timer.start()

    def _kill_if_loading(self) -> None:
        with _LOADING_LOCK:
            loading = self in _LOADING
        if loading:
            self.kill()

    def kill(self) -> None:
        """Kill the child now (an instance abandoned inside execute at unload, a load the server
        gives up on), with the compilers it started: its batch or load then fails and the
        instance thread gets to close. Safe from any thread."""
        self._unloading = True
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
        self._helpers.kill()

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
