"""System (POSIX) shared-memory regions registered by clients.

A client creates ``/dev/shm/<key>`` (shm_open), registers ``name -> (key, offset, byte_size)``,
then sends requests whose inputs/outputs carry ``shared_memory_region/offset/byte_size``
parameters. Every access is bounds-checked against the registration.

The object belongs to a client the server does not trust, and the server often runs as root:

* **Opening.** The key is one path component under /dev/shm (no NUL, control characters or
  ``/`` past the leading one). It is opened like ``shm_open`` does, with ``O_NOFOLLOW`` -- a
  symlink planted in /dev/shm would otherwise let a client read and overwrite any file through
  an identity model -- and first as ``O_PATH``, so a FIFO or device node is never opened for
  real; only a regular file is then reopened read-write (through /proc/self/fd, which names
  exactly the inode already checked).
* **No SIGBUS.** A client can shrink the object (``ftruncate``) at any moment; touching a
  mapping past the new end kills the whole server with SIGBUS, and no check before the access
  closes that race. So the server does not map client objects: tensors are read with
  ``preadv`` into the request's own buffer and written with ``pwritev`` from the output, which
  the kernel bounds by the object's current size -- a shrunk region fails that request with a
  clear error, and nothing else. Measured on this machine for a 16000x47 FP32 tensor (3 MB):
  preadv 205 us, pwritev 230 us, against 68 us for a memcpy from a mapping; inputs pay one copy
  (a request's bytes are read once, as a gRPC payload would be), outputs pay the one copy they
  always did.
* **Bounded.** Each region keeps one file descriptor (its only resource; no mapping), and at
  most ``max_regions`` are registered at once (``--max-shm-regions``); more are refused with
  UNAVAILABLE, so registrations cannot exhaust the server's descriptors.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from dataclasses import dataclass

import numpy as np

from .errors import (
    InferenceError,
    already_exists,
    escape_control,
    internal,
    invalid_argument,
    not_found,
    unavailable,
    unimplemented,
)

log = logging.getLogger("fpgaserve.shm")

SHM_DIR = "/dev/shm"
DEFAULT_MAX_REGIONS = 1024
# tritonserver's text (common.h) when --allow-client-shm=false; its status is UNSUPPORTED,
# which Triton's gRPC frontend sends as UNIMPLEMENTED
CLIENT_SHM_DISABLED = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
_MAX_NAME_BYTES = 255  # NAME_MAX: a key is one directory entry


@dataclass(eq=False)
class Region:
    name: str
    key: str
    offset: int
    byte_size: int
    fd: int
    closed: bool = False
    users: int = 0  # reads/writes in progress (the fd is closed when the last one ends)


def _bad_text(text: str) -> bool:
    return any(c < " " or c == "\x7f" for c in text)


def check_region_name(name: str) -> None:
    """A region name travels in URLs and logs: no NUL, control characters or path separators."""
    if not name or _bad_text(name) or "/" in name or "\\" in name:
        raise invalid_argument(
            f"invalid shared memory region name '{escape_control(name)}': it must be non-empty and "
            "free of control characters and path separators"
        )


def _check_key(key: str) -> str:
    """The object's name under /dev/shm (shm_open's rule: one leading '/' allowed).

    A key shm_open itself would refuse (empty, a '/' inside, '.', '..', too long) gets Triton's
    INTERNAL "Unable to open" text; control characters are refused as invalid arguments."""
    if _bad_text(key):
        raise invalid_argument(
            f"invalid shared memory key '{escape_control(key)}': it must not contain control characters"
        )
    component = key[1:] if key.startswith("/") else key
    if (
        not component
        or "/" in component
        or component in (".", "..")
        or len(component.encode("utf-8", "surrogateescape")) > _MAX_NAME_BYTES
    ):
        raise internal(f"Unable to open shared memory region: '{key}'")
    return component


def _open_region(component: str, key: str) -> tuple[int, int]:
    """(read-write fd, size) of /dev/shm/<component>, refusing anything but a regular file."""
    path = os.path.join(SHM_DIR, component)
    try:
        probe = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        log.info("register: cannot open %s: %s", path, e.strerror)
        raise internal(f"Unable to open shared memory region: '{key}'") from None
    try:
        st = os.fstat(probe)
        if not stat.S_ISREG(st.st_mode):
            # a symlink (O_PATH|O_NOFOLLOW opens the link itself), FIFO, device, directory
            log.warning("register: refused %s, which is not a regular shared-memory object", path)
            raise internal(f"Unable to open shared memory region: '{key}'")
        try:
            fd = os.open(f"/proc/self/fd/{probe}", os.O_RDWR | os.O_CLOEXEC)
        except OSError as e:
            log.info("register: cannot open %s read-write: %s", path, e.strerror)
            raise internal(f"Unable to open shared memory region: '{key}'") from None
    finally:
        os.close(probe)
    return fd, os.fstat(fd).st_size


class SystemSharedMemoryManager:
    def __init__(self, max_regions: int = DEFAULT_MAX_REGIONS, allow_client_shm: bool = True):
        self.max_regions = max_regions
        self.allow_client_shm = allow_client_shm
        self._regions: dict[str, Region] = {}
        # Register/unregister come from the event loop, reads/writes from instance threads.
        self._lock = threading.Lock()

    def _check_allowed(self) -> None:
        if not self.allow_client_shm:
            raise unimplemented(CLIENT_SHM_DISABLED)

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self._check_allowed()
        check_region_name(name)
        component = _check_key(key)
        with self._lock:
            if name in self._regions:
                raise already_exists(f"shared memory region '{name}' already in manager")
            if len(self._regions) >= self.max_regions:
                raise unavailable(
                    f"failed to register shared memory region '{name}': {self.max_regions} regions are "
                    "registered, the most this server allows (--max-shm-regions); unregister some first"
                )
        fd, size = _open_region(component, key)
        if byte_size <= 0:
            os.close(fd)
            raise internal(f"Invalid shared memory region: '{key}'")
        if offset < 0 or offset + byte_size > size:
            os.close(fd)
            # Triton's text; the log says why
            log.info(
                "register '%s': offset %d + byte_size %d exceeds the %d bytes of '%s'",
                name,
                offset,
                byte_size,
                size,
                key,
            )
            raise invalid_argument(f"failed to register shared memory region '{name}': invalid args")
        with self._lock:
            if name in self._regions or len(self._regions) >= self.max_regions:
                os.close(fd)
                if name in self._regions:
                    raise already_exists(f"shared memory region '{name}' already in manager")
                raise unavailable(
                    f"failed to register shared memory region '{name}': {self.max_regions} regions are "
                    "registered, the most this server allows (--max-shm-regions); unregister some first"
                )
            self._regions[name] = Region(name, key, offset, byte_size, fd)

    def unregister(self, name: str) -> None:
        """Empty name removes every region (Triton's semantics); unknown names are a no-op.

        A region still being read or written keeps its descriptor until that access ends."""
        self._check_allowed()
        self._unregister(name)

    def _unregister(self, name: str) -> None:
        with self._lock:
            if name:
                regions = [self._regions.pop(name)] if name in self._regions else []
            else:
                regions = list(self._regions.values())
                self._regions.clear()
            to_close = []
            for r in regions:
                r.closed = True
                if r.users == 0:
                    to_close.append(r.fd)
        for fd in to_close:
            os.close(fd)

    def status(self, name: str) -> list[Region]:
        with self._lock:
            if not name:
                return list(self._regions.values())
            if name not in self._regions:
                raise not_found(f"Unable to find system shared memory region: '{name}'")
            return [self._regions[name]]

    def __len__(self) -> int:
        return len(self._regions)

    # ------------------------------------------------------------------ access
    def _acquire(self, region: str, offset: int, byte_size: int) -> Region:
        with self._lock:
            r = self._regions.get(region)
            if r is None:
                raise not_found(f"Unable to find shared memory region: '{region}'")
            # Triton's checks and texts (its offset is unsigned: a negative one is out of range)
            if offset < 0 or offset >= r.byte_size:
                raise invalid_argument(f"Invalid offset for shared memory region: '{region}'")
            if byte_size <= 0 or offset + byte_size > r.byte_size:
                raise invalid_argument(f"Invalid offset + byte size for shared memory region: '{region}'")
            r.users += 1
            return r

    def _release(self, r: Region) -> None:
        with self._lock:
            r.users -= 1
            close = r.closed and r.users == 0
        if close:
            os.close(r.fd)

    def _shrunk(self, r: Region, needed: int) -> InferenceError:
        try:
            size = os.fstat(r.fd).st_size
        except OSError:
            size = -1
        log.warning(
            "shared memory region '%s' (key '%s') shrank to %d bytes under the server; a request needed bytes up to %d",
            r.name,
            r.key,
            size,
            needed,
        )
        return invalid_argument(
            f"shared memory region '{r.name}' is smaller than it was registered: its object '{r.key}' no "
            "longer holds the requested bytes"
        )

    def _transfer(self, r: Region, syscall, view: memoryview, start: int) -> None:
        """All of ``view`` through preadv/pwritev at ``start``: they may move fewer bytes than
        asked, and move none once the object ends (a client truncated it)."""
        done, total = 0, view.nbytes
        while done < total:
            n = syscall(r.fd, [view[done:]], start + done)
            if n <= 0:
                raise self._shrunk(r, start + total)
            done += n

    def check(self, region: str, offset: int, byte_size: int) -> None:
        """Validate a tensor's location when the request arrives (Triton's frontend does)."""
        self._release(self._acquire(region, offset, byte_size))

    def read(self, region: str, offset: int, byte_size: int) -> memoryview:
        """A copy of the bytes (the request owns it; see the module docstring for why)."""
        r = self._acquire(region, offset, byte_size)
        try:
            view = self._buffer(byte_size)
            self._transfer(r, os.preadv, view, r.offset + offset)
            return view
        finally:
            self._release(r)

    def _buffer(self, byte_size: int) -> memoryview:
        """Where ``read`` puts a tensor's bytes (a frontend process reads into its arena)."""
        return np.empty(byte_size, dtype=np.uint8).data

    def write(self, region: str, offset: int, byte_size: int, data, output: str) -> None:
        """Write ``data`` (bytes or a C-contiguous array) into the region."""
        view = data.reshape(-1).view(np.uint8).data if isinstance(data, np.ndarray) else memoryview(data).cast("B")
        n = view.nbytes
        if n > byte_size:
            raise internal(
                f"shared memory size specified with the request for output '{output}' "
                f"({byte_size} bytes) should be at least {n} bytes to hold the results",
            )
        r = self._acquire(region, offset, byte_size)
        try:
            start = r.offset + offset
            # pwritev past the end would grow the object the client shrank; refuse instead
            if os.fstat(r.fd).st_size < start + n:
                raise self._shrunk(r, start + n)
            self._transfer(r, os.pwritev, view, start)
        finally:
            self._release(r)

    def close(self) -> None:
        self._unregister("")  # at shutdown, whether clients may register or not
