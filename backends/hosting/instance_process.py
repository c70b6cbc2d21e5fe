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
side closes it, and a child this side has to kill takes what it started along, compilers in
sessions of their own included (``kill_tree``). ``abandon_loads`` gives up on every load still in progress (the server
is stopping).
"""

from __future__ import annotations

import asyncio
import collections
import importlib
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from typing import Any

import numpy as np

from fpgaserve.server import datatypes
from fpgaserve.server.errors import InferenceError, Status, internal, unavailable

from ..base import Backend, BackendError
from . import custom_metrics
from .helper_groups import kill_helper_groups
from .instance_channel import Channel, Segment, SegmentReader, off_release, on_release, segment_bytes
from .instance_messages import bounded, check_ready_answer
from .instance_messages import check as check_message
from .instance_worker import stop_signals_blocked
from .plain_values import MalformedMessage

log = logging.getLogger("fpgaserve.instance")

MAX_RESTARTS = 3
RESTART_WINDOW_S = 60.0
#: how long close() waits for finalize() before terminating the child, and then before killing it
CLOSE_GRACE_S = 10.0
KILL_GRACE_S = 3.0
#: how long a load (import + initialize) may take before the child is killed (and what it
#: started: ``kill_tree``), beyond the limits of bounded steps inside it (``load_timeout_s``)
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
        self.segment_size, self.child_segment_size = self.segment_sizes(config)
        try:
            self.segment = Segment(self.segment_size)  # the tensors this side sends (reset per batch)
        except OSError as e:  # ENOMEM under an address-space limit: say what could not be mapped
            raise BackendError(
                f"cannot map the {self.segment_size >> 20} MiB shared segment of {self._what()} (a batch's "
                f"inputs): {e.strerror or e}"
            ) from None
        self._proc: subprocess.Popen | None = None
        self._channel: Channel | None = None
        self._lifeline: int | None = None
        self.peer: SegmentReader | None = None  # the child's segment, mapped while it runs
        self._restarts: collections.deque[float] = collections.deque()
        self._failed: str | None = None  # why the instance is down for good
        self._restarting = False  # a restart (its child's load) is in progress
        self._last_exit = ""  # how the last child ended (for instance_ready)
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
        # the child's calls in flight, by call id: the engine's handles of them (the BLS data
        # plane registers and removes its own), and the requests of the running batch that
        # other instances' calls made (their handles: BackendRequest.caller); both read on the
        # event loop to tell a call that could only be served by the instances up its own chain
        self.outgoing_calls: dict[int, Any] = {}
        self.serving_calls: tuple = ()
        self._early_cancels: set[int] = set()  # cancels that came before their call was registered
        try:
            self._start()
        except BaseException:
            self.segment.close()
            raise
        on_release(self._release_shared)

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

    @classmethod
    def segment_sizes(cls, config: dict) -> tuple[int, int]:
        """(this process's segment, the child's): one batch of the config's inputs, and of its
        outputs (``instance_channel.segment_bytes``); the default size where the config leaves
        a tensor's size open or batches are not bounded (decoupled, ragged, batch inputs)."""
        rows = int(config.get("max_batch_size", 0))
        bounded = not (
            config.get("model_transaction_policy", {}).get("decoupled", False)
            or config.get("batch_input")
            or config.get("batch_output")
        )
        sizes = []
        for key in ("input", "output"):
            tensors = config.get(key) or []
            per_row: list[int | None] = [_tensor_bytes(spec) for spec in tensors] or [None]
            sizes.append(segment_bytes(per_row, rows, bounded))
        return sizes[0], sizes[1]

    def child_env(self) -> dict[str, str]:
        return dict(os.environ)

    @classmethod
    def load_timeout_s(cls, backend_config: dict) -> float:
        """How long the child's load (import, construction) may take before it is killed:
        ``LOAD_TIMEOUT_S``; a backend whose load runs a bounded step of its own (the hls4ml
        C-simulation's compile) adds that step's limit, so that the step's own limit, with its
        own error, is the one that stops it."""
        return LOAD_TIMEOUT_S

    def load_args(self) -> tuple:
        """What the hosted class is constructed with (config, version dir, index, backend config)."""
        return (self.config, self.version_dir, self.instance_index, self.backend_config)

    # ------------------------------------------------------------------ process
    def _start(self, restart: bool = False) -> None:
        """Start the child and load the hosted class there. On any failure the child is
        killed and reaped and every descriptor of ours closed before the error goes up."""
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
                        "-c",
                        CHILD_PROGRAM,
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
        self._channel = Channel(parent_sock.detach(), server_side=True)
        self._ready_channel = Channel(ready_sock.detach(), server_side=True)
        self._ready_inflight, self._ready_answer = False, ("absent",)
        log.debug("%s: started process %d", self._what(), proc.pid)
        with _LOADING_LOCK:
            _LOADING.add(self)
        try:
            self.send(("load", self.child_target, self.load_args(), self.segment.path, self.child_segment_size))
            reply = self.next_message(timeout=self.load_timeout_s(self.backend_config or {}))
            if reply[0] == "load_error":
                self._reap(kill=False)
                if _ABANDONED.is_set() and not restart:
                    raise BackendError(f"the load of {self._what()} was abandoned: the server is stopping")
                raise BackendError(bounded(reply[1]))
            if reply[0] != "loaded":
                raise ChildDied(self._malformed(f"answered its load with a '{reply[0]}' message"))
            try:
                self.peer = SegmentReader(reply[1], trusted=False, pid=proc.pid)
            except MalformedMessage as e:
                raise ChildDied(self._malformed(str(e))) from None
            except OSError as e:  # ENOMEM under an address-space limit
                self._reap(kill=True)
                raise BackendError(
                    f"cannot map the {self.child_segment_size >> 20} MiB shared segment of the process of "
                    f"{self._what()} (a batch's outputs): {e.strerror or e}"
                ) from None
        except ChildDied as e:
            self._reap(kill=True)
            if _ABANDONED.is_set():
                raise BackendError(f"the load of {self._what()} was abandoned: the server is stopping") from None
            raise BackendError(f"the process of {self._what()} {e} while loading") from None
        except OSError as e:  # the load message could not be sent: the child is of no use
            self._reap(kill=True)
            raise BackendError(f"cannot send the load to the process of {self._what()}: {e}") from None
        except BackendError:
            raise
        except BaseException:
            self._reap(kill=True)
            raise
        finally:
            with _LOADING_LOCK:
                _LOADING.discard(self)
        # what the hosted object reported at load (e.g. an auto-completed config)
        self.load_result = reply[2]

    def next_message(self, timeout: float | None = None) -> tuple:
        """The child's next message for the caller, serving logs, metrics and calls into the
        server meanwhile; ChildDied when it is gone (or has not answered within ``timeout``,
        or sent something that is not a message of the protocol: it is killed then)."""
        channel = self._channel
        assert channel is not None
        while True:
            try:
                if timeout is not None and not channel.poll(timeout):
                    raise ChildDied(f"did not answer within {timeout:g} s")
                message = check_message(channel.recv())
            except (EOFError, OSError):
                raise ChildDied(self._death()) from None
            except MalformedMessage as e:
                raise ChildDied(self._malformed(str(e))) from None
            kind = message[0]
            if kind == "log":
                level = _LOG_LEVELS.get(message[1], logging.INFO)
                log.log(level, "%s: %s", self.instance_name, bounded(message[2]))
                continue
            if kind == "call":
                self._serve_call(message[1], message[2], message[3])
                continue
            if kind == "cancel_call":
                self._cancel_call(message[1])
                continue
            if kind == "metric":
                custom_metrics.apply(self.model_name, self.model_version, message[1:])
                continue
            return message

    def _malformed(self, why: str) -> str:
        """Kill a child that broke the protocol (it cannot be trusted to be in step any more):
        what its failure says."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            kill_tree(proc.pid)
        log.error("%s: its process sent a malformed message (%s); it is stopped", self._what(), why)
        return f"sent a malformed message ({why})"

    def read_tensors(self, pairs: list) -> dict[str, np.ndarray]:
        """The tensors of a message the child sent (its (name, reference) pairs), copied out of
        its segment (which its next batch reuses); ChildDied, the child killed, when a
        reference is not one (``SegmentReader.get``)."""
        peer = self.peer
        assert peer is not None
        try:
            return {name: peer.get(ref, copy=True) for name, ref in pairs}
        except MalformedMessage as e:
            raise ChildDied(self._malformed(str(e))) from None

    def send(self, message: tuple) -> None:
        """Send the child a message; ChildDied when it is gone."""
        assert self._channel is not None
        try:
            self._channel.send(message)
        except OSError:
            raise ChildDied(self._death()) from None

    def _release_shared(self, token: int) -> None:
        """A shared mapping our references named is gone (its frontend process went): the
        child unmaps it too. Sent from the thread that unregistered it (the channel's send is
        locked); a child that is gone has nothing to unmap."""
        if token not in self.segment.shared_tokens:
            return
        self.segment.shared_tokens.discard(token)
        channel = self._channel
        if channel is not None:
            try:
                channel.send(("release", token))
            except OSError:
                pass

    def _death(self) -> str:
        proc = self._proc
        if proc is None:
            return "is not running"
        try:
            proc.wait(KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
            proc.wait()
        return exit_description(proc.returncode)

    def _reap(self, kill: bool) -> None:
        """Forget the child: kill it if asked (else wait for it), close our ends, and withdraw
        the calls it had in flight (nobody waits for their answers any more)."""
        self._withdraw_calls()
        proc = self._proc
        if proc is not None:
            if kill and proc.poll() is None:
                kill_tree(proc.pid)
            try:
                proc.wait(KILL_GRACE_S)
            except subprocess.TimeoutExpired:
                kill_tree(proc.pid)
                proc.wait()
            self._last_exit = exit_description(proc.returncode)
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
            if reply[0] == "failed":
                raise failure_from_child(reply)
            if reply[0] != "done":
                raise ChildDied(self._malformed(f"answered a batch with a '{reply[0]}' message"))
            # copies: the child's segment is reused by its next batch
            return self.read_tensors(reply[1])
        except ChildDied as e:
            raise self.crashed(str(e)) from None

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

    def _read_ready(self, channel: Channel, seq: int) -> tuple:
        """The answer to question ``seq`` (answers to earlier ones, late, are skipped). A child
        that answers out of the protocol is killed (``_malformed``), and so is dead."""
        while True:
            try:
                message = check_ready_answer(channel.recv())
            except MalformedMessage as e:
                self._malformed(f"on its readiness channel: {e}")
                return ("dead",)
            if message[1] == seq:
                error = message[3]
                return ("answer", message[2], bounded(error) if error is not None else None)

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
            started = descendants(proc.pid)  # what it started: gone with it (found while it lives)
            try:
                self.send(("close",))
                deadline = time.monotonic() + CLOSE_GRACE_S
                while self.next_message(timeout=max(0.01, deadline - time.monotonic()))[0] != "closed":
                    pass
                proc.wait(KILL_GRACE_S)
            except (ChildDied, subprocess.TimeoutExpired):
                pass
            for pid in started:  # what it started in sessions of its own (a compile's g++)
                _kill_group_or_process(pid)
        self._reap(kill=True)
        off_release(self._release_shared)
        self.segment.close()

    def abandon_load(self) -> None:
        """Make the load in progress fail now (``abandon_loads``): what the child started (a
        compile's g++) is killed, and it gets ``KILL_GRACE_S`` to fail its load by itself,
        removing its build folder; then it is killed with whatever it started meanwhile."""
        proc = self._proc
        if proc is None:
            return
        kill_descendants(proc.pid)
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
            kill_tree(proc.pid, wait=False)

    # ------------------------------------------------------------------ calls from the child
    def bind_engine(self, loop: asyncio.AbstractEventLoop, engine_call) -> None:
        """Where the child's calls into the engine go: ``engine_call(payload, stream, reply,
        backend, call id)`` is a coroutine function run on ``loop`` that answers through
        ``reply(item)`` and keeps its handle of the call in ``outgoing_calls`` while it runs
        (a handle with ``cancel(by_model)``)."""
        self._loop = loop
        self._engine_call = engine_call

    def request_cancelled(self, exec_id: int, index: int) -> bool:
        """Whether request ``index`` of batch ``exec_id`` (still running in the child) has been
        withdrawn by its client: overridden by backends that hand the child their requests."""
        return False

    def abandoned(self) -> bool:
        """Whether every request of the batch the child is executing has been withdrawn by its
        client (its calls into the server can then be withdrawn too, which frees the instance):
        overridden by backends that hand the child their requests."""
        return False

    def claim_early_cancel(self, call_id: int) -> bool:
        """Whether the child cancelled call ``call_id`` before the engine registered it."""
        if call_id in self._early_cancels:
            self._early_cancels.discard(call_id)
            return True
        return False

    def _cancel_call(self, call_id: int) -> None:
        """The child cancels one of its calls (BLS ``ResponseIterator.cancel()``): withdrawn on
        the event loop, where its handle lives."""
        loop = self._loop
        if loop is None:
            return

        def cancel() -> None:
            call = self.outgoing_calls.get(call_id)
            if call is not None:
                call.cancel(by_model=True)
            elif len(self._early_cancels) < 1024:  # (a cancel of a finished call is never claimed)
                self._early_cancels.add(call_id)

        try:
            loop.call_soon_threadsafe(cancel)
        except RuntimeError:  # the loop is closed (shutdown)
            pass

    def _withdraw_calls(self) -> None:
        """The child is gone: its calls in flight are withdrawn (on the event loop)."""
        calls = list(self.outgoing_calls.values())
        self._early_cancels.clear()
        loop = self._loop
        if not calls or loop is None:
            return
        try:
            loop.call_soon_threadsafe(lambda: [call.cancel(by_model=False) for call in calls])
        except RuntimeError:
            pass

    def _serve_call(self, call_id: int, payload: Any, stream: bool) -> None:
        channel = self._channel
        assert channel is not None
        if type(payload) is tuple and payload and payload[0] == "is_cancelled":
            # answered here, on the thread reading the child (it runs that very batch): no
            # hop to the event loop for a question the model may ask in a loop
            ok = len(payload) == 3 and type(payload[1]) is int and type(payload[2]) is int
            answer = ("ok", self.request_cancelled(payload[1], payload[2])) if ok else ("error", "INVALID_ARG", "")
            try:
                channel.send(("reply", call_id, answer))
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
            asyncio.run_coroutine_threadsafe(self._engine_call(payload, stream, reply, self, call_id), self._loop)
        except RuntimeError:  # the loop is closed (shutdown)
            reply(("error", "UNAVAILABLE", "the server is shutting down"))
            if stream:
                reply(("end",))


def _tensor_bytes(spec: dict) -> int | None:
    """Bytes of one row of a config tensor (its dims), None where its size is open."""
    dtype = datatypes.BY_CONFIG.get(spec.get("data_type", ""))
    dims = [int(d) for d in spec.get("dims", [])]
    if dtype is None or dtype.itemsize == 0 or any(d < 0 for d in dims) or spec.get("allow_ragged_batch"):
        return None
    return dtype.itemsize * int(np.prod(dims, dtype=np.int64))


def descendants(pid: int) -> list[int]:
    """The processes ``pid`` started, and theirs, from /proc (children of every thread)."""
    found: list[int] = []
    pending = [pid]
    while pending:
        parent = pending.pop()
        try:
            threads = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in threads:
            try:
                with open(f"/proc/{parent}/task/{tid}/children") as f:
                    children = [int(child) for child in f.read().split()]
            except (OSError, ValueError):
                continue
            for child in children:
                if child not in found:
                    found.append(child)
                    pending.append(child)
    return found


def _kill_group_or_process(pid: int) -> None:
    """SIGKILL ``pid``, and its whole process group where it leads one of its own."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_tree(pid: int, wait: bool = True) -> None:
    """SIGKILL an instance's process and everything it started. Killing the process alone
    would leave its children running: a C-simulation compile's g++ (with its cc1plus, as and
    ld) runs in a session of its own, so that the compile's own limit can kill it as a group;
    an instance killed inside its load (``LOAD_TIMEOUT_S``) or at unload would leave it
    compiling for up to its whole time limit. Found before the process dies (afterwards its
    children belong to init); with ``wait``, returns once they are gone (``KILL_GRACE_S`` at
    most), as a load error must not return while a compiler it started still holds memory."""
    started = descendants(pid)
    watches = [fd for fd in map(_pidfd, started) if fd is not None] if wait else []
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for child in started:
        _kill_group_or_process(child)
    _wait_exits(watches, KILL_GRACE_S)


def kill_descendants(pid: int) -> None:
    """SIGKILL everything ``pid`` started (their groups too), leaving ``pid`` itself: a load
    given up on fails by itself once its compile is gone, and cleans up after it."""
    for child in descendants(pid):
        _kill_group_or_process(child)


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (OSError, AttributeError):  # gone already, or a kernel or Python without pidfds
        return None


def _wait_exits(fds: list[int], timeout: float) -> None:
    """Wait until the processes of ``fds`` (pidfds) have ended, at most ``timeout`` seconds: a
    kill returns before the process is gone, and what it holds (memory, CPU) goes with it."""
    deadline = time.monotonic() + timeout
    try:
        pending = list(fds)
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            ready, _, _ = select.select(pending, [], [], left)
            pending = [fd for fd in pending if fd not in ready]
    finally:
        for fd in fds:
            os.close(fd)


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
    """A child's ("failed" | "error", status name, text) as the error it reports: its status
    (INTERNAL for a name the server does not know), its text cut to ``instance_messages.MAX_TEXT``."""
    status = Status[reply[1]] if reply[1] in Status.__members__ else Status.INTERNAL
    return InferenceError(status, bounded(reply[2]))
