"""System (POSIX) shared-memory regions registered by clients.

A client creates ``/dev/shm/<key>`` (shm_open), registers ``name -> (key, offset, byte_size)``,
then sends requests whose inputs/outputs carry ``shared_memory_region/offset/byte_size``
parameters. Inputs are read straight from the mapping (``np.frombuffer`` on it, no copy);
outputs are written into it. Every access is bounds-checked against the registration.

We map with ``os.open`` + ``mmap`` rather than ``multiprocessing.shared_memory``: the latter
registers the segment with Python's resource tracker, which would *unlink the client's
segment* when the server exits.
"""

from __future__ import annotations

import logging
import mmap
import os
import threading
from dataclasses import dataclass

from grpc import StatusCode

from .errors import InferenceError, already_exists, internal, invalid_argument, not_found

log = logging.getLogger("fpgaserve.shm")

SHM_DIR = "/dev/shm"


@dataclass
class Region:
    name: str
    key: str
    offset: int
    byte_size: int
    mapping: mmap.mmap


class SystemSharedMemoryManager:
    def __init__(self):
        self._regions: dict[str, Region] = {}
        # Register/unregister come from the event loop, reads/writes from instance threads.
        self._lock = threading.Lock()

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        with self._lock:
            if name in self._regions:
                raise already_exists(f"shared memory region '{name}' already in manager")
        path = os.path.join(SHM_DIR, key.lstrip("/"))
        if not key or "/" in key.lstrip("/"):
            raise internal(f"Unable to open shared memory region: '{key}'")
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError:
            raise internal(f"Unable to open shared memory region: '{key}'") from None
        try:
            size = os.fstat(fd).st_size
            if byte_size <= 0:
                raise internal(f"Invalid shared memory region: '{key}'")
            if offset < 0 or offset + byte_size > size:
                # Triton's text; the log says why
                log.info(
                    "register '%s': offset %d + byte_size %d exceeds the %d bytes of '%s'",
                    name, offset, byte_size, size, key,
                )
                raise invalid_argument(f"failed to register shared memory region '{name}': invalid args")
            try:
                mapping = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            except (OSError, ValueError) as e:
                raise internal(f"Unable to mmap shared memory region: '{key}': {e}") from None
        finally:
            os.close(fd)
        with self._lock:
            if name in self._regions:
                mapping.close()
                raise already_exists(f"shared memory region '{name}' already in manager")
            self._regions[name] = Region(name, key, offset, byte_size, mapping)

    def unregister(self, name: str) -> None:
        """Empty name removes every region (Triton's semantics); unknown names are a no-op."""
        with self._lock:
            if name:
                regions = [self._regions.pop(name)] if name in self._regions else []
            else:
                regions = list(self._regions.values())
                self._regions.clear()
        for r in regions:
            try:
                r.mapping.close()
            except BufferError:
                # A request still holds a view of it; the mapping closes when that view dies.
                pass

    def status(self, name: str) -> list[Region]:
        with self._lock:
            if not name:
                return list(self._regions.values())
            if name not in self._regions:
                raise not_found(f"Unable to find system shared memory region: '{name}'")
            return [self._regions[name]]

    def _slice(self, region: str, offset: int, byte_size: int) -> memoryview:
        with self._lock:
            r = self._regions.get(region)
        if r is None:
            raise not_found(f"Unable to find shared memory region: '{region}'")
        if offset < 0 or byte_size < 0 or offset + byte_size > r.byte_size:
            raise invalid_argument(
                f"Invalid offset + byte size for shared memory region: '{region}'"
            )
        start = r.offset + offset
        try:
            return memoryview(r.mapping)[start : start + byte_size]
        except ValueError:  # mapping closed by a concurrent unregister
            raise not_found(f"Unable to find shared memory region: '{region}'") from None

    def read(self, region: str, offset: int, byte_size: int) -> memoryview:
        return self._slice(region, offset, byte_size)

    def check(self, region: str, offset: int, byte_size: int) -> None:
        """Validate an output target when the request arrives (Triton's frontend does)."""
        self._slice(region, offset, byte_size).release()

    def write(self, region: str, offset: int, byte_size: int, data: bytes | memoryview, output: str) -> None:
        n = len(data) if isinstance(data, bytes) else data.nbytes
        if n > byte_size:
            raise InferenceError(
                StatusCode.INTERNAL,
                f"shared memory size specified with the request for output '{output}' "
                f"({byte_size} bytes) should be at least {n} bytes to hold the results",
            )
        view = self._slice(region, offset, byte_size)
        view[:n] = data

    def close(self) -> None:
        self.unregister("")
