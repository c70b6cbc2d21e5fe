"""What a model instance's process and the engine share: the channel and the tensor segments.

Both sides import this module (the instance process imports nothing else of the server, so
it starts fast and holds no server state). Messages are small tuples over a Unix stream
socket (``multiprocessing.connection.Connection`` frames them): the server's are pickled (the
instance trusts the server), the instance's are plain values (``plain_values``: no pickle,
every frame bounded and checked; the server trusts nothing an instance sends). Tensor data
does not travel in them unless it is small: each side owns one ``Segment``, an anonymous memory
file (``memfd_create``, sparse: pages exist once written, sealed so that it cannot shrink
under the other side's mapping) that it writes and the other side maps through
``/proc/<pid>/fd/<fd>`` and reads as numpy views. A message names a tensor by ``TensorRef``
(dtype, shape, and either its bytes inline or its place in the sender's segment), so a 3 MB
batch costs one copy into the segment and a few hundred bytes of message. ``SegmentReader.get``
checks every reference against the segment before it makes an array of it.

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

import fcntl
import itertools
import mmap
import os
import pickle
import re
import struct
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, TypeAlias

import numpy as np

from . import plain_values
from .plain_values import MalformedMessage

#: tensors smaller than this travel inline in the message: a block in the segment would cost
#: more bookkeeping than pickling a few hundred bytes (the batch-1 case)
INLINE_BYTES = 16 * 1024
#: each side's segment where the model's config does not bound its batches (sizes left open,
#: decoupled responses), and the most a bounded one gets; sparse, so only what a batch writes
#: becomes memory, but mapped whole in both processes: address space (see segment_bytes)
SEGMENT_BYTES = int(os.environ.get("FPGASERVE_INSTANCE_SEGMENT_BYTES", str(1 << 30)))
#: the least a bounded segment gets: room for what a model sends besides its outputs (BLS
#: requests' inputs, logs' tensors) before tensors go inline
SEGMENT_MIN_BYTES = 16 << 20
ALIGN = 64
#: what a segment keeps allocated between batches (see ``Segment.reset``); a page multiple
KEEP_BYTES = 64 * 1024 * 1024
#: the largest message the server reads from an instance: a segment's worth of tensors that
#: travel inline when the segment is full, and room for the rest. A larger frame is refused
#: before anything is allocated for it (``Channel.recv``), a larger message is never sent.
MAX_FRAME_BYTES = SEGMENT_BYTES + (64 << 20)
#: the element types a tensor reference may name: Triton's numeric types (and complex, which
#: the engine's output check refuses by name); never an object or structured dtype, whose
#: bytes numpy would read as pointers
_NUMERIC_DTYPES = {
    np.dtype(t).str: np.dtype(t)
    for t in ("?", "u1", "u2", "u4", "u8", "i1", "i2", "i4", "i8", "f2", "f4", "f8", "c8", "c16")
}
_MAX_DIMS = 32

_U32 = struct.Struct("<I")
_FRAME = struct.Struct("!i")
_FRAME_LONG = struct.Struct("!Q")


# mappings other processes can open by path: token -> (start address, size, path)
_SHARED: dict[int, tuple[int, int, str]] = {}
_SHARED_TOKENS = itertools.count(1)
_SHARED_LOCK = threading.Lock()
# called with a token when its mapping is unregistered (instance processes that mapped it
# unmap it: ProcessBackend tells its child)
_RELEASE_LISTENERS: list[Callable[[int], None]] = []


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
    """The mapping is going (its frontend process is gone): no new reference names it, and
    every instance process that mapped it is told to unmap it (it would otherwise keep the
    dead frontend's arena, up to its whole size, for as long as it lives)."""
    with _SHARED_LOCK:
        _SHARED.pop(token, None)
        listeners = list(_RELEASE_LISTENERS)
    for listener in listeners:
        listener(token)


def on_release(listener: Callable[[int], None]) -> None:
    """Call ``listener(token)`` whenever a shared mapping is unregistered (until ``off_release``)."""
    with _SHARED_LOCK:
        _RELEASE_LISTENERS.append(listener)


def off_release(listener: Callable[[int], None]) -> None:
    with _SHARED_LOCK:
        if listener in _RELEASE_LISTENERS:
            _RELEASE_LISTENERS.remove(listener)


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
    """Triton's BYTES serialization -> object array of ``count`` bytes, or MalformedMessage
    when ``buf`` does not hold exactly ``count`` elements (checked before the array is made:
    each element takes at least its 4-byte length)."""
    mv = memoryview(buf).cast("B")
    end = len(mv)
    if count * 4 > end:
        raise MalformedMessage(f"a BYTES tensor of {count} elements in {end} bytes")
    out = np.empty(count, dtype=object)
    offset = 0
    for i in range(count):
        if offset + 4 > end:
            raise MalformedMessage(f"a BYTES tensor ends at element {i} of {count}")
        (length,) = _U32.unpack_from(mv, offset)
        offset += 4
        if length > end - offset:
            raise MalformedMessage(f"element {i} of a BYTES tensor runs past its end")
        out[i] = mv[offset : offset + length].tobytes()
        offset += length
    if offset != end:
        raise MalformedMessage(f"{end - offset} bytes after the last element of a BYTES tensor")
    return out


def segment_bytes(tensor_bytes: list[int | None], rows: int, bounded: bool = True) -> int:
    """The size of a segment that carries one batch of ``rows`` rows of tensors of
    ``tensor_bytes`` bytes a row each (None: a size the config leaves open), each aligned:
    ``SEGMENT_BYTES`` where any size is open or the batch is not ``bounded`` (a decoupled
    model's responses of one request all live in it until the next exchange), else the batch,
    between ``SEGMENT_MIN_BYTES`` and ``SEGMENT_BYTES``. Both processes map both segments of
    an instance: under an address-space limit, two 1 GiB segments per instance left a 6 GiB
    engine room for two csim models."""
    if not bounded or any(b is None for b in tensor_bytes):
        return SEGMENT_BYTES
    need = sum(max(1, rows) * b + ALIGN for b in tensor_bytes if b is not None)
    need = -(-need // mmap.PAGESIZE) * mmap.PAGESIZE
    return min(SEGMENT_BYTES, max(SEGMENT_MIN_BYTES, need))


class Segment:
    """The owner's side of its segment: allocate, write, reset."""

    def __init__(self, size: int = SEGMENT_BYTES):
        self.size = size
        self.fd = os.memfd_create("fpgaserve-instance", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(self.fd, size)
            # the reader maps it whole: a file that shrank under its mapping would kill the reader
            # with SIGBUS on its next read (SegmentReader refuses a segment without this seal)
            fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL)
            self.map = mmap.mmap(self.fd, size)
        except OSError:
            os.close(self.fd)
            raise
        self.view = memoryview(self.map)
        self.path = f"/proc/{os.getpid()}/fd/{self.fd}"
        self._top = 0
        self._lock = threading.Lock()  # several threads of a model may send responses
        # the shared mappings (register_shared) a reference of this segment's has named: the
        # ones the reading side may have mapped
        self.shared_tokens: set[int] = set()

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
                return ("|O", array.shape, _inline(data, self.size))
            self.view[at : at + nbytes] = data
            return ("|O", array.shape, (at, nbytes))
        nbytes = array.nbytes
        if nbytes < INLINE_BYTES:
            return (array.dtype.str, array.shape, np.ascontiguousarray(array).tobytes())
        shared = _shared_ref(array)
        if shared is not None:
            self.shared_tokens.add(shared[1])
            return (array.dtype.str, array.shape, shared)
        at = self._allocate(nbytes)
        if at is None:
            return (array.dtype.str, array.shape, _inline(np.ascontiguousarray(array).tobytes(), self.size))
        target = np.ndarray(array.shape, dtype=array.dtype, buffer=self.map, offset=at)
        np.copyto(target, array, casting="no")
        return (array.dtype.str, array.shape, (at, nbytes))

    def close(self) -> None:
        self.view.release()
        self.map.close()
        os.close(self.fd)


def _inline(data: bytes, segment_size: int) -> bytes:
    """A tensor that did not fit the segment travels in the message, up to a frame's limit."""
    if len(data) > MAX_FRAME_BYTES - (1 << 20):
        raise ValueError(
            f"a tensor of {len(data)} bytes fits neither the instance's shared segment ({segment_size} bytes, "
            f"FPGASERVE_INSTANCE_SEGMENT_BYTES) nor a message to the server"
        )
    return data


_SEGMENT_PATH = re.compile(r"/proc/(\d+)/fd/(\d+)")


class SegmentReader:
    """The other side's segment, mapped read-only (and the shared mappings it refers to).

    ``get`` checks each reference before it makes an array of it (a known numeric dtype or
    BYTES, a shape of at most 32 non-negative dimensions, data whose size is the shape's and
    lies inside the segment), so that what the other side wrote can at worst be wrong data,
    never an array over memory outside the segment. The server's reader (``trusted=False``)
    maps only a segment at a path of the instance's own process that is a memory file sealed
    against shrinking, and refuses references to shared mappings: those are the server's to
    name, never an instance's."""

    def __init__(self, path: str, trusted: bool = True, pid: int | None = None):
        self.trusted = trusted
        self.map = self._open(path) if trusted else self._open_untrusted(path, pid)
        self.size = len(self.map)
        self._shared: dict[int, mmap.mmap] = {}

    @staticmethod
    def _open(path: str) -> mmap.mmap:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return mmap.mmap(fd, os.fstat(fd).st_size, prot=mmap.PROT_READ)
        finally:
            os.close(fd)

    @staticmethod
    def _open_untrusted(path: str, pid: int | None) -> mmap.mmap:
        match = _SEGMENT_PATH.fullmatch(path) if isinstance(path, str) else None
        if match is None or int(match.group(1)) != pid:
            raise MalformedMessage(f"its segment's path '{str(path)[:200]}' is not a descriptor of its own process")
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            try:
                seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
            except OSError:
                seals = 0  # not a memory file
            if not seals & fcntl.F_SEAL_SHRINK:
                raise MalformedMessage("its segment is not a memory file sealed against shrinking")
            size = os.fstat(fd).st_size
            if size <= 0:
                raise MalformedMessage("its segment is empty")
            return mmap.mmap(fd, size, prot=mmap.PROT_READ)
        finally:
            os.close(fd)

    def _mapping(self, token: int, path: str) -> mmap.mmap:
        mapping = self._shared.get(token)
        if mapping is None:
            mapping = self._shared[token] = self._open(path)
        return mapping

    def release(self, token: int) -> None:
        """Forget the shared mapping ``token``: it is unmapped now, or once the last view a
        batch still holds on it goes."""
        mapping = self._shared.pop(token, None)
        if mapping is not None:
            try:
                mapping.close()
            except BufferError:  # views still held: the mapping goes with the last of them
                pass

    def get(self, ref: TensorRef, copy: bool = False) -> np.ndarray:
        """The tensor as a numpy array: a read-only view on the segment, or (``copy``) its own
        memory, for whatever outlives the exchange. Inline tensors are always their own.
        MalformedMessage when the reference is not one (see the class docstring)."""
        if type(ref) is not tuple or len(ref) != 3:
            raise MalformedMessage("a tensor reference is not (dtype, shape, data)")
        dtype_str, shape, data = ref
        if type(shape) is not tuple or len(shape) > _MAX_DIMS or any(type(d) is not int or d < 0 for d in shape):
            raise MalformedMessage(f"a tensor's shape {str(shape)[:100]} is not a tuple of sizes")
        count = 1
        for d in shape:
            count *= d
        if dtype_str == "|O":
            if type(data) is bytes:
                buf: Any = data
            else:
                at, nbytes = self._place(data)
                buf = memoryview(self.map)[at : at + nbytes]
            return deserialize_bytes(buf, count).reshape(shape)
        dtype = _NUMERIC_DTYPES.get(dtype_str) if type(dtype_str) is str else None
        if dtype is None:
            raise MalformedMessage(f"a tensor of data type '{str(dtype_str)[:40]}'")
        nbytes = count * dtype.itemsize
        if type(data) is bytes:
            if len(data) != nbytes:
                raise MalformedMessage(f"a tensor of shape {shape} and data type {dtype} in {len(data)} bytes")
            return np.frombuffer(data, dtype=dtype).reshape(shape)
        if type(data) is tuple and len(data) == 4 and data[0] == "shared":
            if not self.trusted:
                raise MalformedMessage("a tensor reference names a shared mapping (only the server names those)")
            _, token, path, offset = data
            array = np.ndarray(shape, dtype=dtype, buffer=self._mapping(token, path), offset=offset)
            return array.copy() if copy else array
        at, size = self._place(data)
        if size != nbytes:
            raise MalformedMessage(f"a tensor of shape {shape} and data type {dtype} in {size} bytes")
        array = np.ndarray(shape, dtype=dtype, buffer=self.map, offset=at)
        return array.copy() if copy else array

    def _place(self, data) -> tuple[int, int]:
        """(offset, size) of a block of the segment, checked to lie inside it."""
        if type(data) is not tuple or len(data) != 2 or type(data[0]) is not int or type(data[1]) is not int:
            raise MalformedMessage("a tensor's data is neither bytes nor a block of the segment")
        at, nbytes = data
        if at < 0 or nbytes < 0 or at + nbytes > self.size:
            raise MalformedMessage(f"a block of {nbytes} bytes at {at} lies outside the {self.size}-byte segment")
        return at, nbytes

    def close(self) -> None:
        try:
            self.map.close()
        except BufferError:  # a view is still held somewhere: the mapping goes with it
            pass


class Channel:
    """One end of the socket: ``send`` from any thread (a lock keeps frames whole), ``recv``
    from one thread at a time.

    The two directions differ in trust. The server's end (``server_side``) pickles what it
    sends (protocol 5, over the connection's framing: the cheapest, and the instance trusts the
    server) and reads the instance's messages as plain values (``plain_values``), each frame's
    size checked against ``MAX_FRAME_BYTES`` before it is read; the instance's end does the
    reverse. A frame or message that breaks the rules is MalformedMessage."""

    def __init__(self, fd: int, server_side: bool = False):
        self.conn = Connection(fd)
        self.server_side = server_side
        self._send_lock = threading.Lock()

    def send(self, message: tuple) -> None:
        if self.server_side:
            data = pickle.dumps(message, protocol=5)
        else:
            data = plain_values.encode(message)
            if len(data) > MAX_FRAME_BYTES:
                raise ValueError(f"a message of {len(data)} bytes is over the channel's limit of {MAX_FRAME_BYTES}")
        with self._send_lock:
            self.conn.send_bytes(data)

    def recv(self) -> tuple:
        if not self.server_side:
            return pickle.loads(self.conn.recv_bytes())
        message = plain_values.decode(self._read_frame())
        if type(message) is not tuple or not message or type(message[0]) is not str:
            raise MalformedMessage("a message is not a tuple that starts with its kind")
        return message

    def _read_frame(self) -> bytes:
        """The next frame of the connection's framing (a 4-byte big-endian length, -1 and an
        8-byte one beyond 2 GiB), its length checked before any of it is read."""
        (size,) = _FRAME.unpack(self._read_exact(4))
        if size == -1:
            (size,) = _FRAME_LONG.unpack(self._read_exact(8))
        if not 0 <= size <= MAX_FRAME_BYTES:
            raise MalformedMessage(f"a frame of {size} bytes (at most {MAX_FRAME_BYTES})")
        return self._read_exact(size)

    def _read_exact(self, size: int) -> bytes:
        fd = self.conn.fileno()
        chunks = []
        while size:
            chunk = os.read(fd, min(size, 1 << 24))
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    def poll(self, timeout: float) -> bool:
        return self.conn.poll(timeout)

    def close(self) -> None:
        self.conn.close()
