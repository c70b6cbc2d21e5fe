"""What a process may still map under an address-space limit, and what its loads set aside.

An address-space limit (``RLIMIT_AS``: ``prlimit --as``, ``ulimit -v``, a batch system's or a
shared host's share) caps each process's virtual memory, every mapping counted whether its
pages are touched or not: the heap, thread stacks, malloc's per-thread arenas, shared-memory
segments and arenas mapped from other processes, a C-simulation's stack. A process that runs
into it fails whatever maps next, which may be another model's load or a frontend's arena,
with a bare ``ENOMEM``. So each load checks, before it allocates, that what it will take fits
what the process can still map, and fails alone, naming what it needed, where it does not.

What a load maps while it loads (weights, tables, libraries, segments) is in the process's
mapped size (``VmSize``) once it is done; what its batches allocate later is not, so the load
sets that aside: an ``AddressSpaceReservation``, held until the model instance closes. What is
left for the next load is the limit, less what is mapped, less what is set aside. The engine also sets
aside its frontends' arenas before the models load (``server/ipc/arena.py``: the frontends
connect once the models are loaded).

Without a limit nothing is refused (reservations are still kept: the numbers are the same).
A figure set aside for batches is the bound the load logs: it counts no copy the load does not
name, so the check is as good as that bound (``server/engine/memory.py``).
"""

from __future__ import annotations

import resource
import threading
from dataclasses import dataclass, field

from ..base import BackendError

_LOCK = threading.Lock()
_HELD: dict[int, AddressSpaceReservation] = {}


def format_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def address_space_limit() -> int | None:
    """This process's address-space limit in bytes (the soft RLIMIT_AS), None when unlimited."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def mapped_bytes() -> int:
    """What this process has mapped, in bytes (``VmSize``: what RLIMIT_AS is compared with)."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def set_aside_bytes() -> int:
    """Bytes reserved by loads and not released."""
    with _LOCK:
        return sum(r.nbytes for r in _HELD.values())


def describe_address_space() -> str:
    """The process's standing, for an error text: the limit, what is mapped and set aside."""
    lim = address_space_limit()
    held = set_aside_bytes()
    if lim is None:
        return (
            f"no address-space limit; {format_bytes(mapped_bytes())} mapped, {format_bytes(held)} set aside for batches"
        )
    used = mapped_bytes()
    return (
        f"{format_bytes(max(0, lim - used - held))} left under its {format_bytes(lim)} address-space limit "
        f"(RLIMIT_AS): {format_bytes(used)} mapped, {format_bytes(held)} set aside for the batches of loaded "
        "models and the frontends' arenas"
    )


@dataclass(eq=False)
class AddressSpaceReservation:
    """Address space set aside for ``what`` (of ``who``); ``release`` gives it back, and
    ``shrink``/``grow`` move bytes between the reservation and real mappings."""

    who: str
    what: str
    nbytes: int
    _released: bool = field(default=False, repr=False)

    def release(self) -> None:
        with _LOCK:
            _HELD.pop(id(self), None)
            self._released = True

    def shrink(self, nbytes: int) -> None:
        """``nbytes`` of it are mapped now (and counted as such)."""
        with _LOCK:
            self.nbytes = max(0, self.nbytes - nbytes)

    def grow(self, nbytes: int) -> None:
        """``nbytes`` it had handed to a mapping are set aside again (that mapping is gone)."""
        with _LOCK:
            if not self._released:
                self.nbytes += nbytes


def reserve_address_space(
    who: str, what: str, nbytes: int, hint: str = "", check: bool = True
) -> AddressSpaceReservation:
    """Set ``nbytes`` aside for ``what`` (``who``: the model, as errors name it); raises
    BackendError naming both, the bytes and the process's standing when they do not fit what
    the process can still map (``hint``: what the operator can change, appended), unless
    ``check`` is false (room the process needs whatever it costs)."""
    lim = address_space_limit()
    with _LOCK:
        if lim is not None and check:
            used = mapped_bytes()
            held = sum(r.nbytes for r in _HELD.values())
            left = lim - used - held
            if nbytes > left:
                raise BackendError(
                    f"{who} needs {format_bytes(nbytes)} of address space for {what}, more than the "
                    f"{format_bytes(max(0, left))} its process can still map under its {format_bytes(lim)} "
                    f"address-space limit (RLIMIT_AS: {format_bytes(used)} mapped, {format_bytes(held)} set aside "
                    "for the batches of loaded models and the frontends' arenas)" + (f"; {hint}" if hint else "")
                )
        reservation = AddressSpaceReservation(who, what, nbytes)
        _HELD[id(reservation)] = reservation
    return reservation


def out_of_memory(who: str, what: str, nbytes: int | None, error: BaseException) -> str:
    """The text of an allocation that failed: who, what it allocated and how much, and the
    process's standing (never a bare ``MemoryError`` or ``[Errno 12]``)."""
    size = f" ({format_bytes(nbytes)})" if nbytes else ""
    detail = str(error).strip()
    cause = f": {detail}" if detail and not detail.startswith("[Errno 12]") else ""
    return f"{who} could not allocate {what}{size}{cause}; its process has {describe_address_space()}"


__all__ = [
    "AddressSpaceReservation",
    "address_space_limit",
    "describe_address_space",
    "format_bytes",
    "mapped_bytes",
    "out_of_memory",
    "reserve_address_space",
    "set_aside_bytes",
]
