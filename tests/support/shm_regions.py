"""POSIX shared-memory regions for the shared-memory tests, destroyed when the test ends."""

from __future__ import annotations

import contextlib
import os
import uuid

import tritonclient.utils.shared_memory as shm


@contextlib.contextmanager
def shm_regions(name_prefix: str, key_prefix: str):
    """Yields ``make(byte_size, name=None) -> (name, key, handle)``: a new region under a unique
    key (and name, unless given); every region made is destroyed on exit."""
    created = []

    def make(byte_size: int, name: str | None = None):
        name = name or f"{name_prefix}{uuid.uuid4().hex[:8]}"
        key = f"/{key_prefix}{os.getpid()}_{uuid.uuid4().hex[:12]}"
        handle = shm.create_shared_memory_region(name, key, byte_size)
        created.append(handle)
        return name, key, handle

    try:
        yield make
    finally:
        for handle in created:
            shm.destroy_shared_memory_region(handle)
