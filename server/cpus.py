"""How many CPUs this process may use: its affinity mask and its cgroup's CPU quota.

``os.cpu_count()`` counts the host's CPUs. A Kubernetes pod with ``limits: cpu: 2`` on a
64-core node sees 64 there, but its cgroup lets it run 2 CPUs' worth of time per period
(CFS quota), and ``taskset``/``cpuset`` pins restrict it further through the affinity mask.
Sizing worker processes from the host count starts 16 frontends, each with its arena, that
then share 2 CPUs. So this module takes the smaller of the affinity mask and the quota, rounded
up (a quota of 2.5 CPUs can keep 3 processes busy part of the time), as the JVM, Go's
GOMAXPROCS tooling and .NET do.

cgroup v2 (unified): ``/proc/self/cgroup`` has ``0::<path>``, the quota is ``cpu.max``
(``<quota> <period>`` or ``max <period>``) in ``/sys/fs/cgroup/<path>``; every ancestor's limit
applies too, so the directories from there up to the root are read and the smallest wins.
cgroup v1: the ``cpu`` controller's line ``<n>:...cpu...:<path>`` names the path under the
``cpu`` hierarchy's mount point (from ``/proc/self/mountinfo``), with ``cpu.cfs_quota_us``
(-1 = none) and ``cpu.cfs_period_us``. Inside a container the cgroup namespace makes the path
``/`` and the container's own limits sit at the mount point; outside, the path is relative to
the mount's root as mountinfo gives it. Anything unreadable means no quota (the affinity
alone), never an error: this only sizes a default.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

__all__ = ["cgroup_cpu_quota", "usable_cpus"]


def usable_cpus(root: str | os.PathLike = "/") -> int:
    """CPUs this process can use: min(affinity mask, cgroup quota rounded up), at least 1.

    ``root`` is where ``/proc`` and ``/sys`` are looked up (tests give a directory laid out
    like a host's)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    quota = cgroup_cpu_quota(root)
    if quota is not None:
        cpus = min(cpus, max(1, math.ceil(quota)))
    return max(1, cpus)


def cgroup_cpu_quota(root: str | os.PathLike = "/") -> float | None:
    """The CPU quota of this process's cgroup in CPUs (2.5 = 250 ms per 100 ms), or None
    when there is none or it cannot be read."""
    base = Path(root)
    try:
        lines = (base / "proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    v1_path = v2_path = None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            v2_path = path
        elif "cpu" in controllers.split(","):
            v1_path = path
    if v1_path is not None:
        quota = _v1_quota(base, v1_path)
        if quota is not None:
            return quota
    if v2_path is not None:
        return _v2_quota(base, v2_path)
    return None


def _limits_upwards(top: Path, relative: str):
    """``top/relative`` and each of its parents up to ``top``, innermost first (a path that
    is not there, e.g. the host's path seen from inside a container, starts at ``top``)."""
    here = top / relative.strip("/")
    if not here.is_dir():
        here = top
    while True:
        yield here
        if here == top or top not in here.parents:
            return
        here = here.parent


def _v2_quota(base: Path, path: str) -> float | None:
    best = None
    for directory in _limits_upwards(base / "sys/fs/cgroup", path):
        try:
            fields = (directory / "cpu.max").read_text().split()
        except OSError:
            continue
        if len(fields) == 2 and fields[0] != "max":
            try:
                quota, period = int(fields[0]), int(fields[1])
            except ValueError:
                continue
            if quota > 0 and period > 0:
                best = min(best, quota / period) if best is not None else quota / period
    return best


def _v1_mount(base: Path) -> tuple[Path, str] | None:
    """(mount point, the mount's root within the hierarchy) of the v1 ``cpu`` controller."""
    try:
        lines = (base / "proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] != "cgroup":
            continue
        if "cpu" in tail[2].split(","):
            return base / fields[4].lstrip("/"), fields[3]
    return None


def _v1_quota(base: Path, path: str) -> float | None:
    mount = _v1_mount(base)
    if mount is None:
        return None
    mount_point, mount_root = mount
    relative = path
    if mount_root != "/" and (path == mount_root or path.startswith(mount_root.rstrip("/") + "/")):
        relative = path[len(mount_root) :]
    best = None
    for directory in _limits_upwards(mount_point, relative):
        try:
            quota = int((directory / "cpu.cfs_quota_us").read_text())
            period = int((directory / "cpu.cfs_period_us").read_text())
        except (OSError, ValueError):
            continue
        if quota > 0 and period > 0:
            best = min(best, quota / period) if best is not None else quota / period
    return best
