#!/usr/bin/env python3
"""The frontend <-> engine channel, measured alone: what one small message costs over an
asyncio Unix socket (what fpgaserve uses), an asyncio pipe pair, and a shared-memory ring
signalled by an eventfd, between two processes that each run an asyncio loop.

    python tests/benchmarks/bench_channels.py                # 2 s per channel and mode
    python tests/benchmarks/bench_channels.py --seconds 5

Two modes per channel: ping-pong (one message in flight: the latency and the CPU of a lone
request) and a window of 64 in flight (what a loaded frontend does: several messages per
wake-up). Messages are 120-byte pickled tuples, the size of an infer frame for a batch-1
request. CPU is both processes' utime+stime per round trip.
"""

from __future__ import annotations

import argparse
import asyncio
import mmap
import multiprocessing as mp
import os
import pickle
import resource
import socket
import struct
import sys
import time

_LEN = struct.Struct("<I")
MESSAGE = ("infer", 1, ("simple", 1, 7, "", {}, 0, 0, 1, [("INPUT0", "<i4", (1, 16), "arena", (0, 64))], []))


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# ----------------------------------------------------------------------------- streams (socket, pipe)


async def _stream_echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    buffer = b""
    while True:
        chunk = await reader.read(1 << 16)
        if not chunk:
            return
        buffer += chunk
        out = []
        while len(buffer) >= 4:
            (n,) = _LEN.unpack_from(buffer)
            if len(buffer) < 4 + n:
                break
            message = pickle.loads(buffer[4 : 4 + n])
            buffer = buffer[4 + n :]
            body = pickle.dumps(("result", message[1], b""), protocol=5)
            out.append(_LEN.pack(len(body)) + body)
        if out:
            writer.write(b"".join(out))


async def _stream_drive(reader, writer, window: int, seconds: float) -> int:
    done = 0
    buffer = b""
    end = time.monotonic() + seconds
    in_flight = 0

    def send_one():
        body = pickle.dumps(MESSAGE, protocol=5)
        writer.write(_LEN.pack(len(body)) + body)

    for _ in range(window):
        send_one()
        in_flight += 1
    while in_flight:
        chunk = await reader.read(1 << 16)
        buffer += chunk
        while len(buffer) >= 4:
            (n,) = _LEN.unpack_from(buffer)
            if len(buffer) < 4 + n:
                break
            pickle.loads(buffer[4 : 4 + n])
            buffer = buffer[4 + n :]
            in_flight -= 1
            done += 1
            if time.monotonic() < end:
                send_one()
                in_flight += 1
    return done


def _socket_child(sock: socket.socket, other: socket.socket) -> None:
    other.close()  # the parent's end: else the child never sees end of stream

    async def main():
        reader, writer = await asyncio.open_unix_connection(sock=sock)
        await _stream_echo(reader, writer)

    asyncio.run(main())


def run_socket(window: int, seconds: float) -> tuple[int, float, float]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    child = mp.get_context("fork").Process(target=_socket_child, args=(b, a))
    child.start()
    b.close()

    async def main():
        reader, writer = await asyncio.open_unix_connection(sock=a)
        t0, c0 = time.monotonic(), _cpu()
        n = await _stream_drive(reader, writer, window, seconds)
        wall, cpu = time.monotonic() - t0, _cpu() - c0
        writer.close()
        return n, wall, cpu

    n, wall, cpu = asyncio.run(main())
    child.join()
    return n, wall, cpu + _child_cpu()


def _pipe_child(rfd: int, wfd: int, close: tuple[int, ...]) -> None:
    for fd in close:  # the parent's ends: else the child never sees end of stream
        os.close(fd)

    async def main():
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(rfd, "rb", 0))
        transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, os.fdopen(wfd, "wb", 0))
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        await _stream_echo(reader, writer)

    asyncio.run(main())


def run_pipe(window: int, seconds: float) -> tuple[int, float, float]:
    r1, w1 = os.pipe()  # parent -> child
    r2, w2 = os.pipe()  # child -> parent
    child = mp.get_context("fork").Process(target=_pipe_child, args=(r1, w2, (w1, r2)))
    child.start()
    os.close(r1)
    os.close(w2)

    async def main():
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(r2, "rb", 0))
        transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, os.fdopen(w1, "wb", 0))
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        t0, c0 = time.monotonic(), _cpu()
        n = await _stream_drive(reader, writer, window, seconds)
        wall, cpu = time.monotonic() - t0, _cpu() - c0
        transport.close()
        return n, wall, cpu

    n, wall, cpu = asyncio.run(main())
    child.join()
    return n, wall, cpu + _child_cpu()


# ----------------------------------------------------------------------------- shm ring + eventfd


class Ring:
    """Single-producer single-consumer byte ring in shared memory: [head u64][tail u64][data]."""

    def __init__(self, buf: mmap.mmap, size: int):
        self.buf, self.size = buf, size
        self.data = memoryview(buf)[16:]

    def _get(self, i: int) -> int:
        return struct.unpack_from("<Q", self.buf, 8 * i)[0]

    def _write(self, at: int, data: bytes) -> None:
        i, n = at % self.size, len(data)
        first = min(n, self.size - i)
        self.data[i : i + first] = data[:first]
        if first < n:
            self.data[: n - first] = data[first:]

    def _read(self, at: int, n: int) -> bytes:
        i = at % self.size
        first = min(n, self.size - i)
        return bytes(self.data[i : i + first]) + (bytes(self.data[: n - first]) if first < n else b"")

    def put(self, body: bytes) -> None:
        head = self._get(0)
        self._write(head, _LEN.pack(len(body)) + body)
        struct.pack_into("<Q", self.buf, 0, head + 4 + len(body))  # published after the bytes

    def take(self) -> list:
        head, tail = self._get(0), self._get(1)
        out = []
        while tail < head:
            (n,) = _LEN.unpack(self._read(tail, 4))
            out.append(pickle.loads(self._read(tail + 4, n)))
            tail += 4 + n
        struct.pack_into("<Q", self.buf, 8, tail)
        return out


def _ring_pair():
    size = 1 << 20
    maps = [mmap.mmap(-1, 16 + size) for _ in range(2)]
    return maps, size


def _ring_child(maps, size, to_child: int, to_parent: int) -> None:
    inbox, outbox = Ring(maps[0], size), Ring(maps[1], size)

    async def main():
        loop = asyncio.get_running_loop()
        stop = loop.create_future()

        def ready():
            try:
                os.eventfd_read(to_child)
            except BlockingIOError:
                return
            messages = inbox.take()
            for m in messages:
                if m is None:
                    stop.set_result(None)
                    return
                outbox.put(pickle.dumps(("result", m[1], b""), protocol=5))
            if messages:
                os.eventfd_write(to_parent, 1)

        loop.add_reader(to_child, ready)
        await stop

    asyncio.run(main())


def run_ring(window: int, seconds: float) -> tuple[int, float, float]:
    maps, size = _ring_pair()
    to_child = os.eventfd(0, os.EFD_NONBLOCK)
    to_parent = os.eventfd(0, os.EFD_NONBLOCK)
    child = mp.get_context("fork").Process(target=_ring_child, args=(maps, size, to_child, to_parent))
    child.start()
    outbox, inbox = Ring(maps[0], size), Ring(maps[1], size)

    async def main():
        loop = asyncio.get_running_loop()
        finished = loop.create_future()
        state = {"done": 0, "in_flight": 0}
        end = time.monotonic() + seconds

        def send(k: int) -> None:
            for _ in range(k):
                outbox.put(pickle.dumps(MESSAGE, protocol=5))
            state["in_flight"] += k
            os.eventfd_write(to_child, 1)

        def ready():
            try:
                os.eventfd_read(to_parent)
            except BlockingIOError:
                return
            got = inbox.take()
            state["done"] += len(got)
            state["in_flight"] -= len(got)
            if time.monotonic() < end:
                send(len(got))
            elif state["in_flight"] == 0 and not finished.done():
                finished.set_result(None)

        loop.add_reader(to_parent, ready)
        t0, c0 = time.monotonic(), _cpu()
        send(window)
        await finished
        wall, cpu = time.monotonic() - t0, _cpu() - c0
        outbox.put(pickle.dumps(None))
        os.eventfd_write(to_child, 1)
        return state["done"], wall, cpu

    n, wall, cpu = asyncio.run(main())
    child.join()
    return n, wall, cpu + _child_cpu()


_CHILDREN_SEEN = [0.0]


def _child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = r.ru_utime + r.ru_stime
    delta, _CHILDREN_SEEN[0] = total - _CHILDREN_SEEN[0], total
    return delta


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=2.0)
    opts = ap.parse_args(argv)
    print("| channel | in flight | round trips/s | µs per round trip (wall) | CPU µs per round trip, both sides |")
    print("|---|---:|---:|---:|---:|")
    _child_cpu()
    for name, run in (
        ("asyncio Unix socket (fpgaserve)", run_socket),
        ("asyncio pipes", run_pipe),
        ("shm ring + eventfd", run_ring),
    ):
        for window in (1, 64):
            n, wall, cpu = run(window, opts.seconds)
            print(f"| {name} | {window} | {n / wall:,.0f} | {wall / n * 1e6 * window:,.1f} | {cpu / n * 1e6:,.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
