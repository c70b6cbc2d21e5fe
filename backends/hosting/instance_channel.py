"""What a model instance's process and the engine share: the channel and the tensor segments.

Both sides import this module (the instance process imports nothing else of the server, so
it starts fast and holds no server state). Messages are small tuples pickled over a Unix
stream socket (``multiprocessing.connection.Connection`` frames them); tensor data does not
travel in them unless it is small: each side owns one ``Segment``, an anonymous memory file
(``memfd_create``, sparse: pages exist once written) that it writes and the other side maps
through ``/proc/<pid>/fd/<fd>`` and reads as numpy views. A message names a tensor by
``TensorRef`` (dtype, shape, and either its bytes inline or its place in the sender's
segment), so a 3 MB batch costs one copy into the segment and a few hundred bytes of pickle.

Allocation is a bump pointer reset when the owner starts a new exchange (a batch): what the
other side reads from a segment is only read during the exchange that wrote it, and the reader
copies what it keeps (``Segment.reset`` is the owner's promise that nobody reads the old data).
A tensor that does not fit travels inline.

An input that already lies in shared memory the server mapped from a file (a frontend
process's request arena, ``register_shared``) is not copied at all: its ``TensorRef`` names
that mapping and the offset, and the instance process maps the same file (once) and reads it
in place. The block stays the request's until its response is sent, after the batch.
"""

from __future__ import annotations

import itertools
import mmap
import os
import pickle
import struct
import threading
from multiprocessing.connection import Connection
from typing import Any, TypeAlias

import numpy as np

#: tensors smaller than this travel inline in the message: a block in the segment would cost
#: more bookkeeping than pickling a few hundred bytes (the batch-1 case)
INLINE_BYTES = 16 * 1024
#: each side's segment; sparse, so only what a batch writes becomes memory
SEGMENT_BYTES = int(os.environ.get("FPGASERVE_INSTANCE_SEGMENT_BYTES", str(1 << 30)))
ALIGN = 64
#: what a segment keeps allocated between batches (see ``Segment.reset``); a page multiple
KEEP_BYTES = 64 * 1024 * 1024

_U32 = struct.Struct("<I")


# mappings other processes can open by path: token -> (start address, size, path)
_SHARED: dict[int, tuple[int, int, str]] = {}
_SHARED_TOKENS = itertools.count(1)
_SHARED_LOCK = threading.Lock()


def register_shared(mapping: mmap.mmap, path: str) -> int:
    """Announce a shared mapping of the file at ``path`` (which other processes of this user
    can open): arrays inside it travel to instance processes by reference. Returns a token for
    ``unregister_shared``."""
    probe = np.frombuffer(mapping, dtype=np.uint8, count=1)
    start = probe.__array_interface__["data"][0]
    del probe
    with _SHARED_LOCK:
        token = next(_SHARED_TOKENS)
        _SHARED[token] = (start, len(mapping), path)
    return token


def unregister_shared(token: int) -> None:
    with _SHARED_LOCK:
        _SHARED.pop(token, None)


def _shared_ref(array: np.ndarray) -> tuple | None:
    """("shared", token, path, offset) when ``array`` lies, contiguous, in a registered mapping."""
    if not _SHARED or not array.flags.c_contiguous:
        return None
    address = array.__array_interface__["data"][0]
    end = address + array.nbytes
    for token, (start, size, path) in list(_SHARED.items()):
        if start <= address and end <= start + size:
            return ("shared", token, path, address - start)
    return None


# A tensor in a message: (dtype, shape, data). ``dtype`` is numpy's ``dtype.str`` (``'<f4'``),
# ``'|O'`` meaning BYTES, whose data is Triton's serialization (a 4-byte little-endian length
# before each element); ``data`` is the bytes themselves, (offset, nbytes) in the sender's
# segment, or ("shared", token, path, offset) in a registered shared mapping. A plain tuple:
# pickled at a third of a NamedTuple's cost, and a batch-1 round trip carries four.
TensorRef: TypeAlias = tuple[str, tuple[int, ...], Any]


def serialize_bytes(array: np.ndarray) -> bytes:
    """A BYTES tensor (an object array, or numpy bytes/str) as Triton serializes it: each
    element's length and bytes; an element that is not ``bytes`` is its ``str`` in UTF-8, as
    Triton's ``serialize_byte_tensor`` writes it (an int 7 is ``b"7"``, a float 3.5 ``b"3.5"``)."""
    parts = []
    for item in array.reshape(-1).tolist():
        if not isinstance(item, bytes):
            item = str(item).encode("utf-8")
        parts.append(_U32.pack(len(item)))
        parts.append(item)
    return b"".join(parts)


def deserialize_bytes(buf, count: int) -> np.ndarray:
    """Triton's BYTES serialization -> object array of ``count`` bytes (trusted input: the
    other side of the channel wrote it with ``serialize_bytes``)."""
    mv = memoryview(buf).cast("B")
    out = np.empty(count, dtype=object)
    offset = 0
    for i in range(count):
        (length,) = _U32.unpack_from(mv, offset)
        offset += 4
        out[i] = mv[offset : offset + length].tobytes()
        offset += length
    return out


class Segment:
    """The owner's side of its segment: allocate, write, reset."""

    def __init__(self, size: int = SEGMENT_BYTES):
        self.size = size
        self.fd = os.memfd_create("fpgaserve-instance", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, size)
        self.map = mmap.mmap(self.fd, size)
        self.view = memoryview(self.map)
        self.path = f"/proc/{os.getpid()}/fd/{self.fd}"
        self._top = 0
        self._lock = threading.Lock()  # several threads of a model may send responses

    def reset(self) -> None:
        """Start over: the other side no longer reads what was written before.

        Pages of a memory file stay allocated once written, so after a batch larger than
        ``KEEP_BYTES`` the part above it is given back to the system (the next large batch
        faults it in again)."""
        top, self._top = self._top, 0
        if top > KEEP_BYTES:
            self.map.madvise(mmap.MADV_REMOVE, KEEP_BYTES, top - KEEP_BYTES)

    def _allocate(self, nbytes: int) -> int | None:
        with self._lock:
            at = self._top
            if at + nbytes > self.size:
                return None
            self._top = (at + nbytes + ALIGN - 1) // ALIGN * ALIGN
            return at

    def put(self, array: np.ndarray) -> TensorRef:
        """``array`` as a TensorRef: small or unplaceable ones inline, others copied into the segment."""
        if array.dtype == object or array.dtype.kind in "SU":
            data = serialize_bytes(array)
            nbytes = len(data)
            if nbytes < INLINE_BYTES:
                return ("|O", array.shape, data)
            at = self._allocate(nbytes)
            if at is None:
                return ("|O", array.shape, data)
            self.view[at : at + nbytes] = data
            return ("|O", array.shape, (at, nbytes))
        nbytes = array.nbytes
        if nbytes < INLINE_BYTES:
            return (array.dtype.str, array.shape, np.ascontiguousarray(array).tobytes())
        shared = _shared_ref(array)
        if shared is not None:
            return (array.dtype.str, array.shape, shared)
        at = self._allocate(nbytes)
        if at is None:
            return (array.dtype.str, array.shape, np.ascontiguousarray(array).tobytes())
        target = np.ndarray(array.shape, dtype=array.dtype, buffer=self.map, offset=at)
        np.copyto(target, array, casting="no")
        return (array.dtype.str, array.shape, (at, nbytes))

    def close(self) -> None:
        self.view.release()
        self.map.close()
        os.close(self.fd)


class SegmentReader:
    """The other side's segment, mapped read-only (and the shared mappings it refers to)."""

    def __init__(self, path: str):
        self.map = self._open(path)
        self._shared: dict[int, mmap.mmap] = {}

    @staticmethod
    def _open(path: str) -> mmap.mmap:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return mmap.mmap(fd, os.fstat(fd).st_size, prot=mmap.PROT_READ)
        finally:
            os.close(fd)

    def _mapping(self, token: int, path: str) -> mmap.mmap:
        mapping = self._shared.get(token)
        if mapping is None:
            mapping = self._shared[token] = self._open(path)
        return mapping

    def get(self, ref: TensorRef, copy: bool = False) -> np.ndarray:
        """The tensor as a numpy array: a read-only view on the segment, or (``copy``) its own
        memory, for whatever outlives the exchange. Inline tensors are always their own."""
        dtype_str, shape, data = ref
        if dtype_str == "|O":
            count = int(np.prod(shape, dtype=np.int64))
            buf = data if isinstance(data, bytes) else memoryview(self.map)[data[0] : data[0] + data[1]]
            return deserialize_bytes(buf, count).reshape(shape)
        dtype = np.dtype(dtype_str)
        if isinstance(data, bytes):
            return np.frombuffer(data, dtype=dtype).reshape(shape)
        if data[0] == "shared":
            array = np.ndarray(shape, dtype=dtype, buffer=self._mapping(data[1], data[2]), offset=data[3])
            return array.copy() if copy else array
        array = np.ndarray(shape, dtype=dtype, buffer=self.map, offset=data[0])
        return array.copy() if copy else array

    def close(self) -> None:
        try:
            self.map.close()
        except BufferError:  # a view is still held somewhere: the mapping goes with it
            pass


class Channel:
    """One end of the socket: ``send`` from any thread (a lock keeps frames whole), ``recv``
    from one thread at a time. Plain pickle (protocol 5) over the connection's framing:
    cheaper than ``Connection.send``'s pickler with its reducers, which nothing here needs."""

    def __init__(self, fd: int):
        self.conn = Connection(fd)
        self._send_lock = threading.Lock()

    def send(self, message: tuple) -> None:
        data = pickle.dumps(message, protocol=5)
        with self._send_lock:
            self.conn.send_bytes(data)

    def recv(self) -> tuple:
        return pickle.loads(self.conn.recv_bytes())

    def poll(self, timeout: float) -> bool:
        return self.conn.poll(timeout)

    def close(self) -> None:
        self.conn.close()
