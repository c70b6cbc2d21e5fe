"""The frontend <-> engine channel: length-prefixed pickled tuples over a Unix socket.

Both ends are fpgaserve's own processes, started by the engine, over a socket in a directory
only the server's user can open; nothing a client sends is unpickled (clients' bytes travel
as ``bytes`` and strings inside the tuples). Tensor data mostly does not travel here: numeric inputs
are in the frontend's shared-memory arena and large numeric outputs in its response arena
(``arena.py``); the channel carries their offsets.

Messages (first element is the kind):

frontend -> engine
  ("hello", pid, arena_fd, arena_size, response_arena_fd, response_arena_size)
  ("call", token, method, args)        a DataPlane method (allow-listed in the engine)
  ("infer", token, InferHeader)        a normalized request
  ("cancel", token)                    the client went away: withdraw it if still queued
  ("free", [(offset, nbytes), ...])    response-arena blocks copied out of (arena.py)
  ("ack", token)                       a broadcast was applied
  ("bound", port)                      the frontend's gRPC listener is up
engine -> frontend
  ("welcome", regions)                 the shared-memory registry to mirror
  ("result", token, value)             a call's result / an infer's encoded outputs (large
                                       numeric ones as ArenaSlices in the response arena)
  ("error", token, status, message)    an InferenceError (its Status member name), re-raised as is
  ("emit", token, encoded)             one response of a decoupled model
  ("stale", token)                     the model snapshot used to decode is out of date
  ("shm", token, op, args)             mirror a registry change, then ack
"""

from __future__ import annotations

import asyncio
import pickle
import struct
from collections.abc import AsyncIterator

_LEN = struct.Struct("<I")
MAX_FRAME = 1 << 31  # a header with inline BYTES tensors can be large; INT32_MAX like gRPC
_READ_CHUNK = 1 << 20


async def read_frame(reader: asyncio.StreamReader):
    """The next message, or None at end of stream."""
    try:
        head = await reader.readexactly(4)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    (n,) = _LEN.unpack(head)
    if n > MAX_FRAME:
        raise ValueError(f"IPC frame of {n} bytes")
    try:
        body = await reader.readexactly(n)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    return pickle.loads(body)


def frame(message) -> bytes:
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _LEN.pack(len(body)) + body


class FrameWriter:
    """Frames sent during one event-loop iteration leave in one write: under load a batch of
    responses costs one ``send`` syscall and wakes the peer once, instead of once each.

    ``send`` only queues; the flush runs from ``call_soon``, after the callbacks the loop
    is running now. Messages keep their order.
    """

    def __init__(self, writer: asyncio.StreamWriter):
        self.writer = writer
        self._parts: list[bytes] = []
        self._loop = asyncio.get_running_loop()

    def is_closing(self) -> bool:
        return self.writer.is_closing()

    def send(self, message) -> None:
        body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        if not self._parts:
            self._loop.call_soon(self._flush)
        self._parts.append(_LEN.pack(len(body)))
        self._parts.append(body)

    def _flush(self) -> None:
        parts, self._parts = self._parts, []
        if not self.writer.is_closing():
            self.writer.write(b"".join(parts))

    def close(self) -> None:
        self._flush()
        self.writer.close()


async def read_frames(reader: asyncio.StreamReader) -> AsyncIterator[list]:
    """Every complete message that has arrived, a list per read (one await per burst, not
    two per message); ends at end of stream."""
    buffer = bytearray()
    while True:
        try:
            chunk = await reader.read(_READ_CHUNK)
        except ConnectionError:
            return
        if not chunk:
            return
        buffer += chunk
        messages = []
        position, end = 0, len(buffer)
        with memoryview(buffer) as view:
            while end - position >= 4:
                (n,) = _LEN.unpack_from(view, position)
                if n > MAX_FRAME:
                    raise ValueError(f"IPC frame of {n} bytes")
                if end - position - 4 < n:
                    break
                with view[position + 4 : position + 4 + n] as body:
                    messages.append(pickle.loads(body))
                position += 4 + n
        del buffer[:position]
        if messages:
            yield messages
