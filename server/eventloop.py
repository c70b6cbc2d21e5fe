"""Which asyncio event loop a server process runs on.

The engine process, when frontend processes carry the clients (``--frontend-processes`` > 1),
runs on uvloop: its event loop does little but move IPC frames, wake-ups from the instance
threads and timers, and uvloop's C implementation of that machinery (transports, handles,
``call_soon_threadsafe``, epoll) costs a fraction of asyncio's pure-Python selector loop:
engine CPU per ``simple`` batch-1 request 44 -> 37 µs measured with
``tests/benchmarks/bench_engine.py`` on the 2-core development machine.

Processes that serve gRPC keep asyncio's own loop: grpc.aio drives its completion queue through
asyncio internals and documents no support for third-party loops, and a frontend's time goes
to gRPC itself, not to the loop. ``FPGASERVE_EVENT_LOOP=asyncio`` keeps asyncio's loop in the
engine too (to compare, or on a platform without uvloop, where it is also the fallback).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

ENV = "FPGASERVE_EVENT_LOOP"


def fast_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop constructor, or None (not installed, or asyncio asked for)."""
    if os.environ.get(ENV, "").strip().lower() == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T], fast: bool = False) -> T:
    """``asyncio.run(main)``, on uvloop when ``fast`` and available."""
    factory = fast_loop_factory() if fast else None
    if factory is None:
        return asyncio.run(main)
    if not hasattr(asyncio, "Runner"):  # Python 3.10: the policy makes asyncio.run's loop
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
