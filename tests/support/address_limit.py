"""fpgaserve under an address-space limit, and what its processes mapped at their peak.

``python tests/address_limit.py BYTES ARGS...`` sets this process's RLIMIT_AS (soft and hard)
to BYTES and runs ``fpgaserve ARGS...``: every process the server starts (frontends, engine
processes, instance processes, g++) inherits the limit, as under ``prlimit --as`` or a batch
system's ``ulimit -v``. ``ServerProcess(..., entry=limited_entry(BYTES))`` starts a test server
that way. ``peaks(pid)`` reads VmPeak (the most address space a process had mapped: what the
limit caps) and VmHWM (its peak resident memory) of the server and every process under it.
"""

from __future__ import annotations

import os
import resource
import runpy
import sys
from dataclasses import dataclass
from pathlib import Path

GIB = 1 << 30


def limited_entry(limit_bytes: int) -> list[str]:
    """The ``entry`` of a ServerProcess whose processes run under ``limit_bytes`` of address space."""
    return [str(Path(__file__).resolve()), str(limit_bytes)]


def _children(pid: int) -> list[int]:
    """The processes under ``pid`` (children first, then theirs), from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()  # comm may hold spaces and parentheses
        parents.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        kids = parents.get(todo.pop(0), [])
        found += kids
        todo += kids
    return found


@dataclass(frozen=True)
class Peak:
    pid: int
    what: str
    vm_peak: int  # bytes
    vm_hwm: int  # bytes

    def __str__(self) -> str:
        return f"{self.what} (pid {self.pid}): peak {self.vm_peak / GIB:.2f} GiB mapped, {self.vm_hwm / GIB:.2f} GiB resident"


def _what(cmdline: list[str]) -> str:
    for arg in cmdline:
        if arg == "fpgaserve.backends.hosting":  # python -m: the instance processes' program
            return "instance process"
        for name in ("frontend_process", "engine_process"):
            if arg.endswith(name):
                return name.replace("_", " ")
    return "server" if any("address_limit" in a or "fpgaserve" in a for a in cmdline) else (cmdline or ["?"])[0]


def peaks(pid: int) -> list[Peak]:
    """The peak address space and resident memory of ``pid`` and every process under it."""
    out = []
    for p in [pid, *_children(pid)]:
        try:
            status = Path(f"/proc/{p}/status").read_text()
            cmdline = Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        values = {}
        for line in status.splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmPeak", "VmHWM"):
                values[key] = int(rest.split()[0]) * 1024
        if values:
            out.append(Peak(p, _what(cmdline), values.get("VmPeak", 0), values.get("VmHWM", 0)))
    return out


if __name__ == "__main__":
    limit = int(sys.argv[1])
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        del sys.path[0]  # the server imports nothing from tests/
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    sys.argv = ["fpgaserve", *sys.argv[2:]]
    runpy.run_module("fpgaserve.server.cli", run_name="__main__", alter_sys=True)
