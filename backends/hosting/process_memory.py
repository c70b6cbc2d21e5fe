"""How each of the server's processes asks glibc to keep freed memory (``startup.start_process``
applies it first thing in every process; imports nothing of the server, so that a model
instance process starts fast)."""

from __future__ import annotations

import os

#: blocks up to this size come from the heap, not from a fresh mmap each (glibc's M_MMAP_THRESHOLD)
MMAP_THRESHOLD_BYTES = 256 << 20
#: free memory at the top of the heap kept before it is given back (glibc's M_TRIM_THRESHOLD)
TRIM_THRESHOLD_BYTES = 1 << 30


#: under an address-space limit: blocks above this size are mapped per use and unmapped on
#: free (glibc's own dynamic threshold stops growing at this size, DEFAULT_MMAP_THRESHOLD_MAX)
LIMITED_MMAP_THRESHOLD_BYTES = 32 << 20
#: under an address-space limit: free memory kept at the top of the heap (twice the mmap
#: threshold, as glibc's dynamic rule keeps it)
LIMITED_TRIM_THRESHOLD_BYTES = 64 << 20


def _address_space_limited() -> bool:
    try:
        import resource

        return resource.getrlimit(resource.RLIMIT_AS)[0] != resource.RLIM_INFINITY
    except (ImportError, OSError, ValueError):
        return False


def keep_freed_memory() -> None:
    """Stop glibc from handing large freed blocks back to the kernel after every request.

    A 16000-row batch allocates tens of MB (request views, batch arrays, outputs, encoded
    responses); glibc serves blocks above its mmap threshold with fresh mmaps and trims the
    heap on free, so each request faults the same pages in again. Measured with FACILE at
    batch 16000, numpy mode: 41 % of the server's CPU in the kernel, 154k minor faults/s; in a
    Python-backend instance process, whose model allocates each layer's activations afresh:
    99k minor faults/s, 31 % of a core in the kernel. Raising both thresholds keeps the memory
    mapped and reused (RSS stays at the peak batch footprint). Environment variables set by
    the user (MALLOC_*_) take precedence; other C libraries are left alone.

    Under an address-space limit (RLIMIT_AS) what the heap keeps counts against the limit for
    good: a freed block below the mmap threshold stays mapped while anything lives above it
    in the heap, so one large batch or failed load (a model's intermediates, hundreds of MB)
    leaves the process unable to map the next model's segments or a frontend's arena.
    Measured under a 6 GiB limit: 20 freed 200 MiB arrays below a 1 MiB live one kept 4.0 GiB
    mapped with the thresholds above (0 without), and a 2 GiB mapping then failed with ENOMEM.
    There the thresholds are glibc's own dynamic maximum (32 MiB blocks, 64 MiB kept at the
    top): a batch's small arrays are still reused, large ones are unmapped when freed. Each
    thread's malloc arena also maps 64 MiB of address space (8 per CPU by default, 447 MiB in
    a frontend process of 8 threads): the arenas are limited to one per usable CPU.
    """
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") or os.environ.get("MALLOC_TRIM_THRESHOLD_"):
        return
    limited = _address_space_limited()
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold, m_arena_max = -1, -3, -8  # <malloc.h>
        if limited:
            libc.mallopt(m_mmap_threshold, LIMITED_MMAP_THRESHOLD_BYTES)
            libc.mallopt(m_trim_threshold, LIMITED_TRIM_THRESHOLD_BYTES)
            if not os.environ.get("MALLOC_ARENA_MAX"):
                libc.mallopt(m_arena_max, max(1, len(os.sched_getaffinity(0))))
        else:
            libc.mallopt(m_mmap_threshold, MMAP_THRESHOLD_BYTES)
            libc.mallopt(m_trim_threshold, TRIM_THRESHOLD_BYTES)
    except (OSError, AttributeError):  # not glibc
        pass
