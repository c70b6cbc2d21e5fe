"""A shared-memory arena: where a frontend process puts request tensors for the engine.

Each frontend owns one arena, a file in /dev/shm that it creates, maps, and unlinks as soon
as the engine has opened it (so nothing is left behind, whatever way the processes end). The
frontend copies a request's input bytes into a block of the arena -- the one copy decoding
makes anyway (protobuf's ``bytes`` fields are immutable, so a view on them cannot be handed
to another process) -- and sends the engine the block's offset; the engine reads the tensors
as ``np.frombuffer`` views on its own mapping, with no further copy, and the block is freed
when the response arrives (the engine holds the views until then).

Allocation is first-fit over a sorted free list with coalescing, on the frontend's event
loop only (no locks): blocks live for one request, so the list stays short.
"""

from __future__ import annotations

import bisect
import mmap
import os
import uuid

ALIGN = 64  # cache-line aligned blocks: numpy views of any dtype are aligned


def _round_up(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


class ArenaFull(Exception):
    """No free block is large enough right now."""


class Arena:
    """The frontend's side: create, allocate, write, free."""

    def __init__(self, size: int):
        self.size = _round_up(size)
        self.name = f"/fpgaserve-arena-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        path = "/dev/shm" + self.name
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.ftruncate(fd, self.size)
            self.map = mmap.mmap(fd, self.size)
        finally:
            os.close(fd)
        self.path = path
        self.view = memoryview(self.map)
        self._starts: list[int] = [0]  # free blocks, sorted by start
        self._lengths: dict[int, int] = {0: self.size}
        self.used = 0

    def unlink(self) -> None:
        """Remove the name once the engine has mapped it (the memory lives while mapped)."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def allocate(self, nbytes: int) -> int:
        need = _round_up(max(nbytes, 1))
        for i, start in enumerate(self._starts):
            length = self._lengths[start]
            if length >= need:
                del self._starts[i]
                del self._lengths[start]
                if length > need:
                    rest = start + need
                    self._starts.insert(i, rest)
                    self._lengths[rest] = length - need
                self.used += need
                return start
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

    def write(self, offset: int, data) -> None:
        mv = memoryview(data).cast("B")
        self.view[offset : offset + mv.nbytes] = mv

    def close(self) -> None:
        self.view.release()
        self.map.close()
        self.unlink()


class ArenaReader:
    """The engine's side: a read-only mapping of a frontend's arena, opened by name."""

    def __init__(self, name: str, size: int):
        if not name.startswith("/fpgaserve-arena-") or "/" in name[1:]:
            raise ValueError(f"not an arena name: {name!r}")
        fd = os.open("/dev/shm" + name, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            if os.fstat(fd).st_size < size:
                raise ValueError(f"arena {name} is smaller than announced")
            self.map = mmap.mmap(fd, size, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        self.view = memoryview(self.map)

    def close(self) -> None:
        try:
            self.view.release()
            self.map.close()
        except BufferError:  # views still held by requests in flight; the mapping goes with them
            pass
