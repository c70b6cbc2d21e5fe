"""The program a model instance's process runs: ``main(<channel fd>, <lifeline fd>, <readiness
fd>)``, started by ``instance_process.ProcessBackend`` (``CHILD_PROGRAM``: ``python -c``, the
model's folder off ``sys.path``; ``python -m fpgaserve.backends.hosting`` runs the same by hand).

It hosts one backend object (any ``Backend`` class, named in the ``load`` message) and serves
the engine's messages on the channel: ``exec`` (a batch as a dict of tensors, the backend
contract), ``exec_requests`` (a batch as its list of requests, for a host with
``execute_requests``), ``close``. Whichever thread waits for a message reads the socket itself
(leader/follower): the idle main thread reads the next batch with no hand-over between threads
(one thread wake-up less per batch: measured, a third of a batch-1 round trip), and a thread
waiting for the reply to a call into the engine (``call``: BLS requests, possibly several at
once from the model's threads) reads while the main thread is inside ``execute``; what a
reader takes that is not its own goes to its owner's queue. A thread of its own answers the
server's readiness questions on the readiness channel (the hosted object's ``is_ready``), so
that a model busy with a batch still answers them. The process dies with the server:
a watchdog thread blocks on the lifeline pipe, whose write end only the server holds, and
exits when it reads end-of-file.

It does not die of a signal meant for the server: SIGINT and SIGTERM reach every process of a
terminal's foreground group (Ctrl-C) and of a systemd unit (``KillMode=control-group``), and
the server, not the signal, decides when an instance stops: after its in-flight requests,
with ``close`` (the model's finalize). When it ends by itself (its server gone, or closed),
the compilers it started in sessions of their own end with it (``helper_groups``); when the
server kills it, the server kills them too (``instance_process.kill_tree``).

The ``load`` message names the hosted class, its constructor's arguments, the engine's segment
and the size of this process's own (``instance_channel.segment_bytes``).

Messages from here: ``("loaded", segment path, load result)``, ``("load_error", text)``,
``("done", outputs)``, ``("done_requests", results, exec id)``, ``("failed", status, text[,
exec id])``, ``("response", (exec id, index), outputs, error, flags)`` (decoupled), ``("log",
level, text)``, ``("metric", ...)``, ``("call", id, payload, stream)``, ``("cancel_call", id)``,
``("closed",)``; on the readiness channel ``("ready", seq, ready, error)``: plain values
(``plain_values``), which the server checks before it acts on them (``instance_messages``).
Messages to here (pickled: this process trusts the server): ``load``, ``exec``,
``exec_requests``, ``close``, ``("reply", call id, item)``, ``("release", token)`` (unmap a
frontend's arena); on the readiness channel ``("is_ready", seq)``.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import os
import queue
import signal
import sys
import threading
import traceback
from collections.abc import Iterator
from typing import Any

from . import helper_groups
from .instance_channel import Channel, Segment, SegmentReader, TensorRef
from .startup import start_process

_CURRENT: list[Worker] = []  # the worker of this process, once it runs


def current() -> Worker:
    """The worker of this process (for hosted code: calls into the engine, logging)."""
    if not _CURRENT:
        raise RuntimeError("not running in a model instance process")
    return _CURRENT[0]


class CallFailed(Exception):
    """The engine answered a ``call`` with an error: (status name, text)."""

    def __init__(self, status: str, text: str):
        super().__init__(text)
        self.status = status
        self.text = text


class _PendingCall:
    __slots__ = ("items", "stream")

    def __init__(self, stream: bool):
        self.items: queue.SimpleQueue = queue.SimpleQueue()
        self.stream = stream


class CallStream:
    """The replies of a streamed call, in order, until the engine's last: an iterator whose
    ``cancel`` asks the engine to withdraw the call (its replies then go on until the last)."""

    def __init__(self, worker: Worker, call_id: int, pending: _PendingCall):
        self._worker = worker
        self._call_id = call_id
        self._pending = pending
        self.finished = False

    def __iter__(self) -> CallStream:
        return self

    def __next__(self):
        if self.finished:
            raise StopIteration
        try:
            item = self._worker._wait(self._pending.items)
        except BaseException:
            self._end()
            raise
        if item[0] == "end":
            self._end()
            raise StopIteration
        if item[0] == "error":  # the stream's last for the caller (later replies are dropped)
            self._end()
            return self._worker._take(item)
        return item[1]

    def cancel(self) -> None:
        if not self.finished:
            self._worker.send(("cancel_call", self._call_id))

    def _end(self) -> None:
        self.finished = True
        self._worker._forget(self._call_id)

    def __del__(self) -> None:  # dropped before its end: its later replies go nowhere
        if not self.finished:
            self._worker._forget(self._call_id)


class Worker:
    def __init__(self, channel: Channel):
        self.channel = channel
        self.segment: Segment  # made at load, of the size the engine names
        self.parent_segment: SegmentReader | None = None
        self.host: Any = None
        self._work: queue.SimpleQueue = queue.SimpleQueue()
        self._calls: dict[int, _PendingCall] = {}
        self._call_ids = itertools.count(1)
        self._calls_lock = threading.Lock()
        self._read_lock = threading.Lock()  # held by the thread reading the socket

    # ------------------------------------------------------------------ for hosted code
    def send(self, message: tuple) -> None:
        self.channel.send(message)

    def put(self, array) -> TensorRef:
        return self.segment.put(array)

    def get(self, ref: TensorRef, copy: bool = False):
        assert self.parent_segment is not None
        return self.parent_segment.get(ref, copy)

    def log(self, level: str, text: str) -> None:
        self.channel.send(("log", level, text))

    def call(self, payload: Any, stream: bool = False):
        """Ask the engine for something (a BLS request) and wait: its reply, or with ``stream``
        an iterator of its replies until the last (a ``CallStream``, which can cancel the call).
        Raises CallFailed with the engine's error."""
        pending = _PendingCall(stream)
        call_id = next(self._call_ids)
        with self._calls_lock:
            self._calls[call_id] = pending
        self.channel.send(("call", call_id, payload, stream))
        if not stream:
            try:
                return self._take(self._wait(pending.items))
            finally:
                with self._calls_lock:
                    self._calls.pop(call_id, None)
        return CallStream(self, call_id, pending)

    def _forget(self, call_id: int) -> None:
        with self._calls_lock:
            self._calls.pop(call_id, None)

    @staticmethod
    def _take(item):
        if item[0] == "error":
            raise CallFailed(item[1], item[2])
        return item[1]

    # ------------------------------------------------------------------ loop
    def _wait(self, items: queue.SimpleQueue):
        """The next item of ``items``, reading the socket while no other thread does."""
        while True:
            try:
                return items.get_nowait()
            except queue.Empty:
                pass
            if self._read_lock.acquire(blocking=False):
                try:
                    while items.empty():
                        self._dispatch(self.channel.recv())
                except (EOFError, OSError):
                    _exit()  # the server went away
                finally:
                    self._read_lock.release()
                continue
            try:
                # another thread reads; it hands this one its item, or stops reading once it
                # has its own (then this one takes over within the timeout)
                return items.get(timeout=0.005)
            except queue.Empty:
                continue

    def _dispatch(self, message: tuple) -> None:
        """A message off the socket to whom it is for: a reply to its call, the rest to the main loop."""
        if message[0] == "reply":
            with self._calls_lock:
                pending = self._calls.get(message[1])
            if pending is not None:
                pending.items.put(message[2])
            return
        if message[0] == "release":  # a frontend's arena is gone: unmap it (at once, even mid-batch)
            if self.parent_segment is not None:
                self.parent_segment.release(message[1])
            return
        self._work.put(message)

    def serve(self) -> None:
        message = self.channel.recv()
        _, target, args, parent_segment, segment_size = message
        try:
            self.segment = Segment(segment_size)
            self.parent_segment = SegmentReader(parent_segment)
        except OSError as e:  # ENOMEM under an address-space limit: say what could not be mapped
            name = args[0].get("name", "") if args and isinstance(args[0], dict) else ""
            self.channel.send(
                (
                    "load_error",
                    f"the instance process of model '{name}' cannot map its shared segments (its own of "
                    f"{segment_size >> 20} MiB for outputs, the engine's at {parent_segment}): {e.strerror or e}",
                )
            )
            return
        try:
            module_name, class_name = target.split(":")
            cls = getattr(importlib.import_module(module_name), class_name)
            self.host = cls(*args[:3], backend_config=args[3])
        except BaseException as e:  # model code may raise anything at import and initialize
            self.channel.send(("load_error", getattr(e, "triton_text", None) or _describe(e)))
            return
        self._answer(
            ("loaded", self.segment.path, getattr(self.host, "load_result", None)), ("load_error",), "the load's result"
        )
        while True:
            message = self._wait(self._work)
            kind = message[0]
            if kind == "exec":
                self._exec(message[1])
            elif kind == "exec_requests":
                self._exec_requests(*message[1:])
            elif kind == "close":
                try:
                    self.host.close()
                except BaseException as e:
                    self.log("error", f"closing the instance failed: {_describe(e)}")
                helper_groups.kill_helper_groups()
                self.channel.send(("closed",))
                return

    def _exec(self, inputs: list[tuple[str, TensorRef]]) -> None:
        self.segment.reset()
        get = self.get
        try:
            outputs = self.host.execute({name: get(ref) for name, ref in inputs})
            if not isinstance(outputs, dict):
                raise TypeError(f"execute() must return a dict of arrays, got {type(outputs).__name__}")
            put = self.segment.put
            import numpy as np

            reply = [(name, put(np.asarray(array))) for name, array in outputs.items()]
        except BaseException as e:
            self.channel.send(("failed", _status_of(e), _describe(e)))
            return
        self._answer(("done", reply), ("failed", "INTERNAL"), "the outputs")

    def _exec_requests(self, requests: list, decoupled: bool, alone: bool, exec_id: int) -> None:
        """Replies carry ``exec_id`` last: the engine tells them from late messages of an
        earlier batch it stopped listening to (a decoupled stream it failed part way)."""
        self.segment.reset()
        if alone:  # each request its own execution: a failure is that request's alone
            results: list = []
            for position, request in enumerate(requests):
                try:
                    results += self.host.execute_requests([request], decoupled, exec_id, position)
                except BaseException as e:
                    results.append(("failed", _status_of(e), getattr(e, "triton_text", None) or _describe(e)))
            self._answer(("done_requests", results, exec_id), ("failed", "INTERNAL"), "the responses", exec_id)
            return
        try:
            results = self.host.execute_requests(requests, decoupled, exec_id)
        except BaseException as e:
            text = getattr(e, "triton_text", None) or _describe(e)
            self.channel.send(("failed", _status_of(e), text, exec_id))
            return
        self._answer(("done_requests", results, exec_id), ("failed", "INTERNAL"), "the responses", exec_id)

    def _answer(self, message: tuple, instead: tuple, what: str, *last) -> None:
        """Send ``message``, or, when it cannot travel (a value that is not plain, more than a
        frame holds), ``instead`` with the reason as its text (and ``last``, an exec id)."""
        try:
            self.channel.send(message)
        except (TypeError, ValueError) as e:
            self.channel.send((*instead, f"{what} cannot be sent to the server: {e}", *last))


def _status_of(e: BaseException) -> str:
    status = getattr(e, "status", None)
    return getattr(status, "name", None) or (status if isinstance(status, str) else "INTERNAL")


def _describe(e: BaseException) -> str:
    text = str(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _exit() -> None:
    """End this process now (no interpreter teardown: threads the model started must not keep
    it alive), and the helper programs it started with it."""
    helper_groups.kill_helper_groups()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _watch_lifeline(fd: int) -> None:
    """Exit when the server is gone: its end of the lifeline pipe closes with its process."""
    while True:
        try:
            if not os.read(fd, 1):
                break
        except InterruptedError:
            continue
        except OSError:
            break
    _exit()


def _skip_signal(signum, frame) -> None:
    """SIGINT and SIGTERM: meant for the server, which stops this process itself."""


_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


@contextlib.contextmanager
def stop_signals_blocked() -> Iterator[None]:
    """Block SIGINT and SIGTERM in the calling thread while it starts a process that will
    ``ignore_stop_signals``: the child inherits the mask through exec, so a signal meant for
    the server that arrives while the child is still importing waits, pending, for its
    handler instead of killing it."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def ignore_stop_signals() -> None:
    """SIGINT and SIGTERM no longer end this process (the server stops it when its requests are
    answered), then unblocked (``stop_signals_blocked``). A handler that does nothing rather
    than SIG_IGN: a program the model starts gets the default disposition back at exec (as
    under Triton's stub, whose handlers skip both signals); restarted system calls, so that a
    model blocked in one does not see EINTR."""
    for signum in _STOP_SIGNALS:
        signal.signal(signum, _skip_signal)
        signal.siginterrupt(signum, False)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)


def _serve_readiness(worker: Worker, fd: int) -> None:
    """Answer the server's ``("is_ready", seq)`` questions with ``("ready", seq, ready, error)``
    from the hosted object's ``is_ready()`` (``True`` where it has none), on this thread of
    their own: the main thread may be inside a batch meanwhile. ``error``: the text of what
    ``is_ready`` raised (``triton_text`` where it has one), with ``ready`` False."""
    channel = Channel(fd)
    while True:
        try:
            message = channel.recv()
        except (EOFError, OSError):
            return
        if not (isinstance(message, tuple) and len(message) == 2 and message[0] == "is_ready"):
            continue
        check = getattr(worker.host, "is_ready", None)
        ready, error = True, None
        if check is not None:
            try:
                ready = check() is True
            except BaseException as e:  # model code may raise anything
                ready, error = False, getattr(e, "triton_text", None) or _describe(e)
        try:
            channel.send(("ready", message[1], ready, error))
        except OSError:
            return


def main(argv: list[str]) -> None:
    channel_fd, lifeline_fd = int(argv[0]), int(argv[1])
    ignore_stop_signals()
    # a fresh interpreter: the server's malloc settings are not inherited, and a model that
    # allocates its activations per batch would fault them in anew each time without them
    start_process()
    threading.Thread(target=_watch_lifeline, args=(lifeline_fd,), name="lifeline", daemon=True).start()
    worker = Worker(Channel(channel_fd))
    _CURRENT.append(worker)
    if len(argv) > 2:  # the readiness channel
        threading.Thread(target=_serve_readiness, args=(worker, int(argv[2])), name="is_ready", daemon=True).start()
    try:
        worker.serve()
    except (EOFError, OSError):
        pass
    except BaseException:
        traceback.print_exc()
    _exit()
