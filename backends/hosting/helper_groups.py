"""Helper programs a process starts in sessions of their own (a C-simulation's ``g++``), and
how they end with it.

A compiler runs in a session of its own so that killing its process group also ends the
``cc1plus``, ``as`` and ``ld`` it started; for the same reason neither a signal to the
server's process group nor the death of the process that started it reaches it, and it would
run on for minutes after a load was abandoned or the server stopped. So whoever starts one
registers its group here for as long as it runs (``helper_group``), and the process that
started it kills every group it still has when it ends or gives up its loads
(``kill_helper_groups``): an instance process when its server tells it to stop or goes away,
the server's own processes (a C-simulation compiled in the engine's process) when they stop
or abandon a load. A process the server kills cannot do this itself: the server then kills
what it started, found in /proc (``instance_process.kill_tree``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator

_GROUPS: set[int] = set()
_KILLED: set[int] = set()  # groups kill_helper_groups signalled, while they are registered
_LOCK = threading.Lock()


@contextlib.contextmanager
def helper_group(pgid: int) -> Iterator[None]:
    """The process group ``pgid`` (a helper started with ``start_new_session``: its pid) is
    this process's while the block runs; the block itself kills and reaps it as it ends."""
    with _LOCK:
        _GROUPS.add(pgid)
    try:
        yield
    finally:
        with _LOCK:
            _GROUPS.discard(pgid)
            _KILLED.discard(pgid)


def stopped_by_us(pgid: int) -> bool:
    """Whether ``kill_helper_groups`` ended group ``pgid`` (asked inside its ``helper_group``
    block): its program failed because its process gave it up, not by itself."""
    with _LOCK:
        return pgid in _KILLED


def kill_helper_groups() -> int:
    """SIGKILL every helper group this process still has (it is ending, or giving up on the
    loads that started them); the number of groups signalled. Their programs are reaped by
    whoever waits for them (the compile that started them), or by init once this process is
    gone."""
    with _LOCK:
        groups = list(_GROUPS)
        _KILLED.update(groups)
    killed = 0
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
            killed += 1
        except (ProcessLookupError, PermissionError):
            pass
    return killed
