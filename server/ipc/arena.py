"""A shared-memory arena: where a frontend process puts request tensors for the engine.

Each frontend owns one arena, an anonymous memory file (``memfd_create``: no name in
/dev/shm to leak or to collide, and not bounded by a container's small /dev/shm) that the
engine maps through ``/proc/<frontend pid>/fd/<fd>``. The
frontend copies a request's input bytes into a block of the arena -- the one copy decoding
makes anyway (protobuf's ``bytes`` fields are immutable, so a view on them cannot be handed
to another process) -- and sends the engine the block's offset; the engine reads the tensors
as ``np.frombuffer`` views on its own mapping, with no further copy, and the block is freed
when the response arrives (the engine holds the views until then).

Responses travel the other way through a second arena of the frontend's (``ResponseArena``
on the engine's side): the engine maps it read-write, and an instance's worker thread
encodes a large output straight into a block of it; the frontend copies the block into the
response message (the one copy encoding always made) and tells the engine to free it. Small
outputs stay inline in the frame, where a block and a free message would cost more.

Allocation is first-fit over a sorted free list with coalescing (``FreeList``): blocks live
for one request, so the list stays short. Blocks are 64-byte aligned; blocks of ``PAGE_BLOCK``
bytes or more start on a page boundary, so a card runtime can wrap a large input tensor in
place as a buffer object over user memory (XRT's ``xrt::ext::bo``; xocl refuses an address that
is not page-aligned) and DMA it to the card from the arena (``backends/hls4ml/card/runner.py``).

The engine maps the input arena read-write (shared) although only the frontend writes it: xocl
pins a user-memory buffer's pages with write access (``get_user_pages_fast(..., FOLL_WRITE)``),
which fails on a read-only mapping. Nothing of the engine's writes there: the arrays it makes
over the arena are marked read-only (``ArenaReader.array``), and a card sync to the device only
reads the pages. The frontend stays the only writer by contract. The frontend's input arena is used from its event
loop only; the response arena from the engine's loop and its instance threads, under a lock.
"""

from __future__ import annotations

import bisect
import mmap
import os
import threading

import numpy as np

from fpgaserve.backends.hosting import (
    AddressSpaceReservation,
    describe_address_space,
    register_shared,
    reserve_address_space,
    unregister_shared,
)

ALIGN = 64  # cache-line aligned blocks: numpy views of any dtype are aligned
PAGE = mmap.PAGESIZE
#: blocks this large start on a page: a card can DMA them in place (see the module docstring);
#: smaller ones would waste up to a page each for a transfer a copy makes as cheaply
PAGE_BLOCK = 64 * 1024


def _round_up(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


# The engine maps each frontend's two arenas when the frontend says hello, which is after the
# models have loaded: under an address-space limit the loads must leave that room, or every
# frontend fails to connect once a large model has taken it. ``set_aside_for_frontends``
# reserves it before the loads (backends/hosting/address_space.py); each mapping moves its
# bytes from the reservation to the process's mapped size, and an arena unmapped (its frontend
# gone) moves them back for the frontend that replaces it.
_FRONTEND_ROOM: list[AddressSpaceReservation] = []  # the one reservation, once made


def set_aside_for_frontends(count: int, arena_bytes: int) -> None:
    """Reserve the arenas of ``count`` frontends of ``arena_bytes`` each way (before the loads)."""
    nbytes = count * 2 * _round_up(arena_bytes)
    for room in _FRONTEND_ROOM:
        room.release()
    _FRONTEND_ROOM[:] = [
        reserve_address_space(
            "the frontend processes", f"{count} frontends' request and response arenas", nbytes, check=False
        )
    ]


def _map_arena(pid: int, fd_number: int, size: int, what: str) -> mmap.mmap:
    """Map a frontend's arena read-write (shared), its bytes taken from the frontends' room; an
    ENOMEM names the arena, its size and the process's standing."""
    fd = os.open(f"/proc/{pid}/fd/{fd_number}", os.O_RDWR)
    try:
        if os.fstat(fd).st_size < size:
            raise ValueError(f"the {what} of process {pid} is smaller than announced")
        try:
            mapping = mmap.mmap(fd, size)
        except OSError as e:
            raise OSError(
                e.errno,
                f"cannot map the {size >> 20} MiB {what} of frontend process {pid}: {e.strerror}; this process has "
                + describe_address_space(),
            ) from None
    finally:
        os.close(fd)
    for room in _FRONTEND_ROOM:
        room.shrink(size)
    return mapping


def _unmapped_arena(size: int) -> None:
    for room in _FRONTEND_ROOM:
        room.grow(size)


class ArenaFull(Exception):
    """No free block is large enough right now."""


class FreeList:
    """First-fit allocation of ALIGN-rounded blocks in [0, size), with coalescing frees."""

    def __init__(self, size: int):
        self.size = size
        self._starts: list[int] = [0]  # free blocks, sorted by start
        self._lengths: dict[int, int] = {0: size}
        self.used = 0

    def allocate(self, nbytes: int) -> int:
        need = _round_up(max(nbytes, 1))
        paged = need >= PAGE_BLOCK
        for i, start in enumerate(self._starts):
            length = self._lengths[start]
            # a large block starts at the first page boundary of a free block; the bytes before
            # it stay free (one more entry in the list, coalesced back when the block is freed)
            at = -(-start // PAGE) * PAGE if paged else start
            if start + length - at >= need:
                del self._starts[i]
                del self._lengths[start]
                if at > start:
                    self._starts.insert(i, start)
                    self._lengths[start] = at - start
                    i += 1
                end = at + need
                if start + length > end:
                    self._starts.insert(i, end)
                    self._lengths[end] = start + length - end
                self.used += need
                return at
        raise ArenaFull(nbytes)

    def free(self, start: int, nbytes: int) -> None:
        length = _round_up(max(nbytes, 1))
        self.used -= length
        i = bisect.bisect_left(self._starts, start)
        # coalesce with the following and the preceding free block
        if i < len(self._starts) and start + length == self._starts[i]:
            following = self._starts.pop(i)
            length += self._lengths.pop(following)
        if i > 0:
            before = self._starts[i - 1]
            if before + self._lengths[before] == start:
                self._lengths[before] += length
                return
        self._starts.insert(i, start)
        self._lengths[start] = length


class Arena:
    """The frontend's side: create, allocate, write, free."""

    def __init__(self, size: int):
        self.size = _round_up(size)
        self.fd = os.memfd_create("fpgaserve-arena", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, self.size)  # sparse: pages exist once written
        self.map = mmap.mmap(self.fd, self.size)
        # where the engine opens it
        self.path = f"/proc/{os.getpid()}/fd/{self.fd}"
        self.view = memoryview(self.map)
        self._blocks = FreeList(self.size)
        self.allocate = self._blocks.allocate
        self.free = self._blocks.free

    @property
    def used(self) -> int:
        return self._blocks.used

    def write(self, offset: int, array) -> None:
        """Copy a C-contiguous numpy array into the block at ``offset``."""
        if array.nbytes:
            self.view[offset : offset + array.nbytes] = array.reshape(-1).view(np.uint8)

    def close(self) -> None:
        self.view.release()
        self.map.close()
        os.close(self.fd)


class ArenaReader:
    """The engine's side of a frontend's input arena: a shared read-write mapping (a card pins
    user memory for writing, see the module docstring) that the engine only reads."""

    def __init__(self, pid: int, fd_number: int, size: int):
        self.map = _map_arena(pid, fd_number, size, "request arena")
        self._room_bytes = size  # given back to the frontends' room once, at close
        # read-only for the engine: every numpy view made over it is read-only too, at no
        # cost per request
        self.view = memoryview(self.map).toreadonly()
        # model instance processes read inputs in place here rather than from a copy
        self._shared_token = register_shared(self.map, f"/proc/{pid}/fd/{fd_number}")

    def array(self, dtype: np.dtype, offset: int, nbytes: int, shape) -> np.ndarray:
        """A read-only numpy view of a block (the frontend is its only writer)."""
        out = np.frombuffer(self.view, dtype=dtype, count=nbytes // dtype.itemsize, offset=offset).reshape(shape)
        out.flags.writeable = False
        return out

    def close(self) -> None:
        unregister_shared(self._shared_token)
        try:
            self.view.release()
            self.map.close()
        except BufferError:  # views still held by requests in flight; the mapping goes with them
            pass
        _unmapped_arena(self._room_bytes)
        self._room_bytes = 0


# An encoded output's bytes in the response arena, in place of ``EncodedOutput.raw`` (which is
# ``bytes`` otherwise): a plain ``(offset, nbytes)`` tuple, pickled at a third of a NamedTuple's cost
ArenaSlice = tuple[int, int]


class ResponseArena:
    """The engine's side of a frontend's response arena: mapped read-write, blocks allocated
    by the instance threads as they encode outputs, freed when the frontend has copied them
    (or by the engine itself when the request failed or was cancelled: nobody will read them).
    """

    MIN_BYTES = 16 * 1024  # smaller outputs travel inline in the frame

    def __init__(self, pid: int, fd_number: int, size: int):
        self.map = _map_arena(pid, fd_number, size, "response arena")
        self._room_bytes = size  # given back to the frontends' room once, at close
        self.view = memoryview(self.map)
        self._blocks = FreeList(size)
        self._lock = threading.Lock()
        self._by_token: dict[int, list[ArenaSlice]] = {}
        # requests discarded while they may still be encoding (cancelled mid-execution):
        # their later outputs go inline, into nothing; the oldest are forgotten
        self._discarded: dict[int, None] = {}

    def put(self, token: int, array: np.ndarray) -> ArenaSlice | None:
        """Copy a C-contiguous array into a block held for request ``token``; None if it is
        small, the arena is full or the request was discarded (the bytes then go inline).

        The copy is made under the lock: a ``discard`` on the event loop can then never free
        a block (and let another request reuse it) while this thread still writes into it."""
        n = array.nbytes
        if n < self.MIN_BYTES:
            return None
        with self._lock:
            if token in self._discarded:
                return None
            try:
                offset = self._blocks.allocate(n)
            except ArenaFull:
                return None
            piece = (offset, n)
            self._by_token.setdefault(token, []).append(piece)
            self.view[offset : offset + n] = array.reshape(-1).view(np.uint8).data
        return piece

    def hand_over(self, token: int) -> None:
        """The request's answer went to the frontend, which frees its blocks."""
        if token in self._by_token:  # most answers hold no block: no lock for them
            with self._lock:
                self._by_token.pop(token, None)

    def discard(self, token: int) -> None:
        """The request failed or was cancelled: its blocks are nobody's (it may still be
        encoding, if it was cancelled while executing: whatever it encodes later stays out)."""
        with self._lock:
            for piece in self._by_token.pop(token, ()):
                self._blocks.free(*piece)
            self._discarded[token] = None
            if len(self._discarded) > 4096:
                for old in list(self._discarded)[:2048]:
                    del self._discarded[old]

    def free(self, pieces) -> None:
        with self._lock:
            for offset, nbytes in pieces:
                self._blocks.free(offset, nbytes)

    @property
    def used(self) -> int:
        return self._blocks.used

    def close(self) -> None:
        try:
            self.view.release()
            self.map.close()
        except BufferError:  # the instance threads may still write into it; it goes with them
            pass
        _unmapped_arena(self._room_bytes)
        self._room_bytes = 0
