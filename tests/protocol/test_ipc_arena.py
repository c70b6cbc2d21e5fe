"""The frontend's arenas and the IPC frames, in one process (the server-level behaviour is in
test_processes.py): blocks are allocated, coalesced and freed exactly; a tensor read from a
client's shared-memory region lands in an arena block that lives as long as its views; large
outputs go through the response arena and every block comes back; the frame reader
reassembles messages split anywhere and refuses an oversized length."""

from __future__ import annotations

import asyncio
import os
import pickle
import random
import struct
from multiprocessing import shared_memory

import numpy as np
import pytest

from fpgaserve.server.errors import InferenceError
from fpgaserve.server.ipc.arena import ALIGN, PAGE, PAGE_BLOCK, Arena, ArenaFull, ArenaReader, ResponseArena
from fpgaserve.server.ipc.protocol import MAX_FRAME, FrameChannel, FrameDecoder
from fpgaserve.server.ipc.remote import ArenaShmMirror


def test_arena_allocations_never_overlap_and_coalesce_back_to_one_block():
    arena = Arena(64 * ALIGN)
    rng = random.Random(7)
    live: list[tuple[int, int]] = []
    for _ in range(2000):
        if live and (rng.random() < 0.5 or arena.used > 48 * ALIGN):
            offset, n = live.pop(rng.randrange(len(live)))
            arena.free(offset, n)
            continue
        n = rng.randrange(1, 4 * ALIGN)
        try:
            offset = arena.allocate(n)
        except ArenaFull:
            continue
        assert offset % ALIGN == 0 and offset + n <= arena.size
        for o, m in live:
            assert offset + n <= o or o + m <= offset
        live.append((offset, n))
    rng.shuffle(live)
    for offset, n in live:
        arena.free(offset, n)
    assert arena.used == 0
    assert arena.allocate(arena.size) == 0  # one free block of the whole arena again
    arena.close()


def test_large_blocks_start_on_a_page_and_the_bytes_before_them_stay_free():
    """A card can wrap a large tensor in place only at a page-aligned address (xocl's rule)."""
    arena = Arena(4 * PAGE_BLOCK)
    small = arena.allocate(100)
    big = arena.allocate(PAGE_BLOCK)
    assert small == 0 and big == PAGE and big % PAGE == 0
    assert arena.allocate(PAGE - 2 * ALIGN) == 2 * ALIGN  # the gap before the large block is used
    rng = random.Random(3)
    live = [(small, 100), (big, PAGE_BLOCK), (2 * ALIGN, PAGE - 2 * ALIGN)]
    for _ in range(500):
        if live and rng.random() < 0.5:
            arena.free(*live.pop(rng.randrange(len(live))))
            continue
        n = rng.choice([rng.randrange(1, 2 * PAGE), rng.randrange(PAGE_BLOCK, PAGE_BLOCK + PAGE)])
        try:
            offset = arena.allocate(n)
        except ArenaFull:
            continue
        assert offset % (PAGE if n >= PAGE_BLOCK else ALIGN) == 0 and offset + n <= arena.size
        assert all(offset + n <= o or o + m <= offset for o, m in live)
        live.append((offset, n))
    for block in live:
        arena.free(*block)
    assert arena.used == 0 and arena.allocate(arena.size) == 0
    arena.close()


def test_the_engine_maps_the_input_arena_writable_but_hands_out_read_only_arrays():
    """xocl pins user memory for writing, so the engine's mapping must allow it; the arrays it
    gives backends stay read-only (the frontend is the arena's only writer)."""
    arena = Arena(2 * PAGE_BLOCK)
    offset = arena.allocate(PAGE_BLOCK)
    data = np.arange(PAGE_BLOCK // 4, dtype=np.float32)
    arena.write(offset, data)
    reader = ArenaReader(os.getpid(), arena.fd, arena.size)
    try:
        got = reader.array(np.dtype(np.float32), offset, data.nbytes, (-1, 16))
        assert np.array_equal(got.ravel(), data) and got.ctypes.data % PAGE == 0
        assert not got.flags.writeable
        with open("/proc/self/maps") as f:
            start = got.ctypes.data
            mapped = [
                line.split()[1]
                for line in f
                if int(line.split("-")[0], 16) <= start < int(line.split()[0].split("-")[1], 16)
            ]
        assert mapped and mapped[0].startswith("rw") and mapped[0].endswith("s")
    finally:
        del got
        reader.close()
        arena.close()


def test_arena_free_restores_full_capacity():
    arena = Arena(8 * ALIGN)
    blocks = [arena.allocate(ALIGN) for _ in range(8)]
    with pytest.raises(ArenaFull):
        arena.allocate(1)
    for offset in blocks[::2] + blocks[1::2]:
        arena.free(offset, ALIGN)
    assert arena.used == 0
    assert arena.allocate(8 * ALIGN) == 0  # coalesced into one block again
    arena.close()


@pytest.fixture
def client_region():
    region = shared_memory.SharedMemory(create=True, size=4096)
    np.frombuffer(region.buf, np.float32)[:] = np.arange(1024, dtype=np.float32)
    yield region
    region.close()
    region.unlink()


def test_shm_input_is_read_into_the_arena_and_freed_with_its_last_view(client_region):
    arena = Arena(1 << 16)
    mirror = ArenaShmMirror(arena)
    mirror.register("in", "/" + client_region.name, 0, 4096)
    data = mirror.read("in", 64, 256)
    tensor = np.frombuffer(data, np.float32).reshape(4, 16)
    np.testing.assert_array_equal(tensor.ravel(), np.arange(16, 80, dtype=np.float32))
    offset = mirror.arena_offset(tensor)
    assert offset is not None
    # the engine's view of the same bytes: the arena's own mapping at that offset
    np.testing.assert_array_equal(np.frombuffer(arena.view, np.float32, count=64, offset=offset), tensor.ravel())
    assert mirror.arena_offset(tensor[1:]) == offset + 64  # a view inside the block
    assert mirror.arena_offset(np.zeros(4, np.float32)) is None  # not read from a region
    assert mirror.arena_offset(tensor[:, ::2]) is None  # not contiguous: sent by copy
    assert arena.used > 0
    rest = tensor[2:]
    del data, tensor
    assert arena.used > 0  # a view still holds the block
    del rest
    assert arena.used == 0
    mirror.unregister("in")
    arena.close()


def test_shm_read_that_fails_frees_its_block(client_region):
    arena = Arena(1 << 16)
    mirror = ArenaShmMirror(arena)
    mirror.register("in", "/" + client_region.name, 0, 4096)
    client_region.close()
    with open(f"/dev/shm/{client_region.name}", "r+b") as f:
        f.truncate(128)  # the client shrinks its object under the registration
    with pytest.raises(InferenceError, match="smaller than it was registered"):
        mirror.read("in", 0, 1024)
    assert arena.used == 0
    mirror.unregister("in")
    arena.close()


def test_arena_full_falls_back_to_a_private_buffer(client_region):
    arena = Arena(ALIGN)
    mirror = ArenaShmMirror(arena)
    mirror.register("in", "/" + client_region.name, 0, 4096)
    tensor = np.frombuffer(mirror.read("in", 0, 1024), np.float32)
    np.testing.assert_array_equal(tensor, np.arange(256, dtype=np.float32))
    assert mirror.arena_offset(tensor) is None and arena.used == 0
    mirror.unregister("in")
    arena.close()


def test_frames_survive_any_split_and_keep_their_order():
    messages = [("infer", i, "x" * (i * 37 % 300), list(range(i % 7))) for i in range(200)]
    wire = b"".join(struct.pack("<I", len(b)) + b for b in (pickle.dumps(m) for m in messages))
    rng = random.Random(3)
    cuts = sorted(rng.sample(range(1, len(wire)), 150))
    decoder = FrameDecoder(initial=256)  # small: the buffer has to grow and compact
    got = []
    last = 0
    for cut in [*cuts, len(wire)]:
        got += decoder.feed(wire[last:cut])
        last = cut
    assert got == messages


def test_a_frame_larger_than_the_buffer_grows_it():
    big = ("infer", 1, b"\x07" * 300_000)
    decoder = FrameDecoder(initial=1024)
    wire = struct.pack("<I", len(pickle.dumps(big))) + pickle.dumps(big)
    assert decoder.feed(wire[:1000]) == []
    assert decoder.feed(wire[1000:]) == [big]


def test_channels_deliver_in_order_in_both_directions():
    """Two FrameChannels over a real socket pair: what one sends the other receives, in order,
    however the loop groups the frames into writes."""

    async def main():
        import socket

        loop = asyncio.get_running_loop()
        received: list = []
        done = loop.create_future()

        def got(messages):
            received.extend(messages)
            if len(received) == 200 and not done.done():
                done.set_result(None)

        a, b = socket.socketpair()
        _, left = await loop.create_connection(lambda: FrameChannel(lambda m: None), sock=a)
        _, right = await loop.create_connection(lambda: FrameChannel(got), sock=b)
        messages = [("infer", i, "x" * (i * 37 % 300)) for i in range(200)]
        for i, m in enumerate(messages):
            left.send(m)
            if i % 17 == 0:
                await asyncio.sleep(0)
        await asyncio.wait_for(done, 10)
        assert received == messages
        left.close()
        await asyncio.wait_for(right.closed.wait(), 10)  # the peer sees the end

    asyncio.run(main())


def test_oversized_frame_length_is_refused():
    with pytest.raises(ValueError, match="IPC frame"):
        FrameDecoder().feed(struct.pack("<I", MAX_FRAME + 1) + b"\0" * 16)


def test_response_arena_blocks_go_to_the_frontend_or_back_to_the_free_list():
    """The engine's side writes large outputs into the frontend's response arena; the
    frontend reads them at the announced offset; blocks of a failed request are discarded."""
    frontend_side = Arena(1 << 20)
    engine_side = ResponseArena(os.getpid(), frontend_side.fd, frontend_side.size)
    small = np.arange(16, dtype=np.float32)
    assert engine_side.put(1, small) is None  # inline: below MIN_BYTES
    big = np.arange(ResponseArena.MIN_BYTES, dtype=np.float32).reshape(-1, 64)
    piece = engine_side.put(1, big)
    assert piece is not None and piece[1] == big.nbytes  # (offset, nbytes)
    seen = np.frombuffer(frontend_side.view, np.float32, count=big.size, offset=piece[0])
    np.testing.assert_array_equal(seen, big.ravel())
    del seen
    # request 1 answered: the frontend owns the block and frees it
    engine_side.hand_over(1)
    engine_side.discard(1)  # nothing left to discard
    assert engine_side.used > 0
    engine_side.free([piece])
    assert engine_side.used == 0
    # request 2 failed after encoding two outputs: both blocks come back
    engine_side.put(2, big)
    engine_side.put(2, big)
    assert engine_side.used >= 2 * big.nbytes
    engine_side.discard(2)
    assert engine_side.used == 0
    # request 2 was cancelled while executing: what it encodes afterwards stays out
    assert engine_side.put(2, big) is None and engine_side.used == 0
    # full: the caller sends the bytes inline
    huge = np.zeros((1 << 20) // 4 + 1, np.float32)
    assert engine_side.put(3, huge) is None and engine_side.used == 0
    engine_side.close()
    frontend_side.close()
