"""Helper programs a process starts in sessions of their own (a C-simulation's ``g++``), and
how they end with it.

A compiler runs in a session of its own so that killing its process group also ends the
``cc1plus``, ``as`` and ``ld`` it started; for the same reason neither a signal to the
server's process group nor the death of the process that started it reaches it, and it would
run on for minutes after a load was abandoned or the server stopped. So whoever starts one
registers its group here for as long as it runs (``helper_group``), and:

* the process that started it kills every group it still has when it ends: an instance
  process when its server tells it to stop or goes away, the server's own processes when they
  stop or abandon a load (``kill_helper_groups``);
* an instance process also tells its server about each group (``report_to``), so that a
  server that has to kill the instance process itself (a load past its limit, an unload that
  gives up on a stuck instance, a shutdown) ends its compilers too: the server checks that
  what the child names is a session the child started before it ever signals it
  (``ReportedGroups``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator

log = logging.getLogger("fpgaserve.instance")

_GROUPS: set[int] = set()
_KILLED: set[int] = set()  # groups kill_helper_groups signalled, while they are registered
_LOCK = threading.Lock()
# set in an instance process: tells the server of each group as it starts and ends
_REPORT: list[Callable[[int, bool], None]] = []


def report_to(report: Callable[[int, bool], None] | None) -> None:
    """Where this process tells of its helper groups (``report(pgid, running)``): an instance
    process's worker sends them to the server."""
    _REPORT[:] = [report] if report is not None else []


@contextlib.contextmanager
def helper_group(pgid: int) -> Iterator[None]:
    """The process group ``pgid`` (a helper started with ``start_new_session``: its pid) is
    this process's while the block runs; the block itself kills and reaps it as it ends."""
    with _LOCK:
        _GROUPS.add(pgid)
    _tell(pgid, True)
    try:
        yield
    finally:
        with _LOCK:
            _GROUPS.discard(pgid)
            _KILLED.discard(pgid)
        _tell(pgid, False)


def stopped_by_us(pgid: int) -> bool:
    """Whether ``kill_helper_groups`` ended group ``pgid`` (asked inside its ``helper_group``
    block): its program failed because its process gave it up, not by itself."""
    with _LOCK:
        return pgid in _KILLED


def _tell(pgid: int, running: bool) -> None:
    for report in list(_REPORT):
        try:
            report(pgid, running)
        except OSError:
            pass  # the server is gone: this process ends, and kills the group, next


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


def _stat_fields(pid: int) -> list[bytes] | None:
    """/proc/<pid>/stat after the command name: state, ppid, pgrp, session, ... (None if gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2 :].split()


def _session_alive(sid: int) -> bool:
    """Whether a live (not zombie) process of session ``sid`` exists."""
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None and len(fields) > 3 and int(fields[3]) == sid and fields[0] not in (b"Z", b"X"):
                return True
    return False


class ReportedGroups:
    """The server's record of one instance process's helper groups, from its reports. A report
    is believed only for a session leader whose parent is that child (what a child's
    ``start_new_session`` makes): a child cannot have the server signal anyone else."""

    def __init__(self) -> None:
        self._groups: set[int] = set()
        self._lock = threading.Lock()  # reports come on the instance's thread, kills from any

    def report(self, child_pid: int, pgid: object, running: object) -> None:
        if not isinstance(pgid, int) or isinstance(pgid, bool) or pgid <= 1 or not isinstance(running, bool):
            return
        if not running:
            with self._lock:
                self._groups.discard(pgid)
            return
        fields = _stat_fields(pgid)
        if fields is None or len(fields) < 4:
            return  # already gone
        ppid, pgrp, session = int(fields[1]), int(fields[2]), int(fields[3])
        if ppid != child_pid or pgrp != pgid or session != pgid:
            log.warning(
                "instance process %d named process group %d, which is not a session it started", child_pid, pgid
            )
            return
        with self._lock:
            self._groups.add(pgid)

    def kill(self) -> int:
        """SIGKILL the groups still recorded (their child is being killed, gone, or giving up its
        load): each only while its session still runs, so a number the kernel has since handed
        out again is left alone. The number of groups signalled."""
        with self._lock:
            groups, self._groups = self._groups, set()
        killed = 0
        for pgid in groups:
            if _session_alive(pgid):
                try:
                    os.killpg(pgid, signal.SIGKILL)
                    killed += 1
                except (ProcessLookupError, PermissionError):
                    pass
        return killed
