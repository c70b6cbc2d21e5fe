"""Waking the event loop from work that finishes elsewhere: ``Wakeup`` (a scheduler's wait for
new requests, with sub-millisecond timeouts) and the future helpers threads resolve with.

A thread must not resolve an asyncio future itself: it schedules ``set_result_if_pending``
(or ``set_exception_if_pending``) on the future's loop with ``call_soon_threadsafe``, and the
future may have been cancelled meanwhile (a withdrawn request), hence "if pending".
"""

from __future__ import annotations

import asyncio
import threading
import time


def set_result_if_pending(fut: asyncio.Future, value) -> None:
    if not fut.done():
        fut.set_result(value)


def set_exception_if_pending(fut: asyncio.Future, exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)


class _PreciseTimer:
    """Sub-millisecond timeouts for the event loop.

    asyncio's ``call_later`` sleeps in epoll, whose timeout is rounded *up* to whole
    milliseconds, so a 250 µs ``max_queue_delay`` would last 1-2 ms (measured: batch 1 at
    concurrency 1 fell from ~1400 to ~540 infer/s). Short waits are timed here instead, by
    one daemon thread on a condition variable (µs resolution), which wakes the loop with
    ``call_soon_threadsafe``.
    """

    _instance: _PreciseTimer | None = None

    def __init__(self):
        self._heap: list[tuple[float, int, asyncio.AbstractEventLoop, asyncio.Future]] = []
        self._cond = threading.Condition()
        self._seq = 0
        threading.Thread(target=self._run, name="fpgaserve-timer", daemon=True).start()

    @classmethod
    def get(cls) -> _PreciseTimer:
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    def wake_at(self, deadline: float, loop: asyncio.AbstractEventLoop, fut: asyncio.Future) -> None:
        import heapq

        with self._cond:
            self._seq += 1
            heapq.heappush(self._heap, (deadline, self._seq, loop, fut))
            self._cond.notify()

    def _run(self) -> None:
        import heapq

        while True:
            with self._cond:
                while not self._heap:
                    self._cond.wait()
                deadline, _, loop, fut = self._heap[0]
                delay = deadline - time.monotonic()
                if delay > 0:
                    self._cond.wait(delay)
                    continue
                heapq.heappop(self._heap)
            if not fut.done():
                try:
                    loop.call_soon_threadsafe(set_result_if_pending, fut, None)
                except RuntimeError:  # loop closed
                    pass


_PRECISE_BELOW_S = 0.002  # waits shorter than this use _PreciseTimer


class Wakeup:
    """Wake whoever waits for new work; cheaper than ``asyncio.Event`` + ``wait_for``.

    ``wait_for`` wraps the wait in a new task with its own timeout handle on every call,
    which on the batch-1 hot path is a measurable share of the loop's time; here a wait is
    one future plus (with a timeout) one timer handle.
    """

    __slots__ = ("_waiters",)

    def __init__(self):
        self._waiters: list[asyncio.Future] = []

    def set(self) -> None:
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for f in waiters:
                if not f.done():
                    f.set_result(None)

    async def wait(self, timeout: float | None = None) -> None:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._waiters.append(fut)
        handle = None
        if timeout is not None:
            if timeout < _PRECISE_BELOW_S:
                _PreciseTimer.get().wake_at(time.monotonic() + timeout, loop, fut)
            else:
                handle = loop.call_later(timeout, set_result_if_pending, fut, None)
        try:
            await fut
        finally:
            if handle is not None:
                handle.cancel()
            if fut in self._waiters:
                self._waiters.remove(fut)
