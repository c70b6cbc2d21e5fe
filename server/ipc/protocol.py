"""The frontend <-> engine channel: length-prefixed pickled tuples over a Unix socket.

Each end is a ``FrameChannel``, an ``asyncio.BufferedProtocol``: the socket reads straight
into its buffer, every complete frame of a read is decoded at once (``FrameDecoder``) and
handed over as one list, and the frames sent during one event-loop iteration leave in one
write. No stream reader, task or await per message: under load a burst of requests costs one
wake-up, one read and one callback (the StreamReader loop this replaced was ~10 % of the
engine's time per small request, profiled).

Both ends are fpgaserve's own processes, started by the engine, over a socket in a directory
only the server's user can open; nothing a client sends is unpickled (clients' bytes travel
as ``bytes`` and strings inside the tuples). Tensor data mostly does not travel here: numeric inputs
are in the frontend's shared-memory arena and large numeric outputs in its response arena
(``arena.py``); the channel carries their offsets.

Messages (first element is the kind):

frontend -> engine
  ("hello", pid, arena_fd, arena_size, response_arena_fd, response_arena_size)
  ("call", token, method, args)        a DataPlane method (allow-listed in the engine)
  ("infer", token, model, version, uid, id, parameters, priority, timeout_us, batch_size,
   inputs, outputs)                    a normalized request, flat (a tuple pickles fastest):
                                       inputs [(name, shape, (arena offset, nbytes) or an
                                       array inline)], outputs a tuple of names (plain ones)
                                       or [(name, (region, offset, size) or None, top-k)]
  ("cancel", token)                    the client went away: withdraw it if still queued
  ("free", [(offset, nbytes), ...])    response-arena blocks copied out of (arena.py)
  ("ack", token)                       a broadcast was applied
  ("bound", port)                      the frontend's gRPC listener is up
engine -> frontend
  ("welcome", regions)                 the shared-memory registry to mirror
  ("result", token, value)             a call's result / an infer's encoded outputs, as plain
                                       (name, datatype, shape, raw) tuples; raw is bytes, or
                                       (offset, nbytes) in the response arena for large ones
  ("error", token, status, message)    an InferenceError (its Status member name), re-raised as is
  ("emit", token, encoded)             one response of a decoupled model
  ("emit_error", token, status, message)  an error response of a decoupled model; its stream goes on
  ("stale", token)                     the model snapshot used to decode is out of date
  ("shm", token, op, args)             mirror a registry change, then ack
"""

from __future__ import annotations

import asyncio
import pickle
import struct
from collections import namedtuple
from collections.abc import Callable

# values of call results, pickled by reference to this module (which both ends import)
RegionInfo = namedtuple("RegionInfo", "name key offset byte_size")
StatisticsView = namedtuple("StatisticsView", "name version_str stats")


def statistics_views(versions) -> list[StatisticsView]:
    """ModelStatistics's versions (``DataPlane.statistics``) as the values the channel carries."""
    return [StatisticsView(v.name, v.version_str, v.stats) for v in versions]


_LEN = struct.Struct("<I")
MAX_FRAME = 1 << 31  # a header with inline BYTES tensors can be large; INT32_MAX like gRPC
_INITIAL_BUFFER = 1 << 20
#: a receive buffer grown past this is given back once it is empty (see FrameDecoder.decode)
_KEEP_BUFFER = 64 << 20


def frame(message) -> bytes:
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _LEN.pack(len(body)) + body


class FrameDecoder:
    """Bytes in, messages out: a growable receive buffer that ``get_buffer`` exposes for the
    socket to read into, and ``decode`` to turn what arrived into messages (in order)."""

    def __init__(self, initial: int = _INITIAL_BUFFER):
        self._buf = bytearray(initial)
        self._view = memoryview(self._buf)
        self._start = 0  # first byte not decoded yet
        self._end = 0  # end of the bytes received

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """Room for the next read: at least 64 KiB, or the rest of a frame being received."""
        need = 1 << 16
        if self._end - self._start >= 4:
            (n,) = _LEN.unpack_from(self._view, self._start)
            need = max(need, 4 + n - (self._end - self._start))
        if len(self._buf) - self._end < need:
            self._make_room(need)
        return self._view[self._end :]

    def _make_room(self, need: int) -> None:
        pending = self._end - self._start
        size = len(self._buf)
        if pending + need > size:  # a large frame: grow (the view must be released first)
            size = max(size * 2, pending + need)
            self._view.release()
            old, self._buf = self._buf, bytearray(size)
            self._buf[:pending] = old[self._start : self._end]
            self._view = memoryview(self._buf)
        else:  # move what is pending to the front
            self._view[:pending] = self._view[self._start : self._end]
        self._start, self._end = 0, pending

    def feed(self, data: bytes) -> list:
        """Append ``data`` (as a read would) and decode: the complete messages, in order."""
        view = memoryview(data)
        while view.nbytes:
            room = self.get_buffer(view.nbytes)
            n = min(room.nbytes, view.nbytes)
            room[:n] = view[:n]
            self._end += n
            view = view[n:]
        return self.decode(0)

    def decode(self, nbytes: int) -> list:
        """``nbytes`` more were written into the buffer ``get_buffer`` returned: the complete
        messages now available. Raises ValueError for a frame longer than MAX_FRAME."""
        self._end += nbytes
        messages = []
        view, position, end = self._view, self._start, self._end
        loads = pickle.loads
        while end - position >= 4:
            (n,) = _LEN.unpack_from(view, position)
            if n > MAX_FRAME:
                raise ValueError(f"IPC frame of {n} bytes")
            if end - position - 4 < n:
                break
            messages.append(loads(view[position + 4 : position + 4 + n]))
            position += 4 + n
        if position == end:
            position = end = 0
            self._end = 0
            if len(self._buf) > _KEEP_BUFFER:
                # a large frame grew the buffer (to 848 MB for a response of 53 rows of a
                # 512x512 network), which would stay mapped for good: a fresh one instead. The
                # old one goes with the read's view of it (not released here: a read may hold it)
                self._buf = bytearray(_INITIAL_BUFFER)
                self._view = memoryview(self._buf)
        self._start = position
        return messages


class FrameChannel(asyncio.BufferedProtocol):
    """One end of a channel. ``on_messages(list)`` gets every message of each read, in
    order; ``on_closed()`` runs once when the connection ends (or a frame was refused).

    ``send`` only queues; the frames queued during one event-loop iteration are written
    together from ``call_soon``, after the callbacks the loop is running now: under load a
    batch of answers costs one ``send`` syscall and wakes the peer once. Messages keep their
    order. Writes are never paused for: the peer is our own process, reading all the time.
    """

    def __init__(self, on_messages: Callable[[list], object], on_closed: Callable[[], object] | None = None):
        self.on_messages = on_messages
        self.on_closed = on_closed
        self.transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder()
        self._parts: list[bytes] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self.closed = asyncio.Event()

    # ------------------------------------------------------------------ protocol
    def connection_made(self, transport) -> None:
        self.transport = transport
        self._loop = asyncio.get_running_loop()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._decoder.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        try:
            messages = self._decoder.decode(nbytes)
        except ValueError:
            if self.transport is not None:
                self.transport.abort()  # not our peer's framing: the channel is over
            return
        if messages:
            self.on_messages(messages)

    def eof_received(self) -> bool:
        return False  # close the transport

    def connection_lost(self, exc) -> None:
        if not self.closed.is_set():
            self.closed.set()
            if self.on_closed is not None:
                self.on_closed()

    # ------------------------------------------------------------------ sending
    def is_closing(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    def send(self, message) -> None:
        body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        if not self._parts:
            assert self._loop is not None
            self._loop.call_soon(self._flush)
        self._parts.append(_LEN.pack(len(body)))
        self._parts.append(body)

    def _flush(self) -> None:
        parts, self._parts = self._parts, []
        if parts and self.transport is not None and not self.transport.is_closing():
            if len(parts) > 2 and sum(len(p) for p in parts) < _KEEP_BUFFER:
                self.transport.write(b"".join(parts))
            else:  # one frame, or a large burst: no joined copy of it (uvloop writes the list as is)
                self.transport.writelines(parts)

    def close(self) -> None:
        self._flush()
        if self.transport is not None:
            self.transport.close()
