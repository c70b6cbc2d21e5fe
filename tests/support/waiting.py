"""Polling helpers for tests that wait on a server, a process or Prometheus.

The bound only turns a hang into a failure: a correct server never reaches it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

T = TypeVar("T")


def wait_for(predicate: Callable[[], tuple[bool, Any]], timeout: float, what: str, interval: float = 0.05) -> Any:
    """Poll ``predicate() -> (ok, detail)`` until ok and return that detail; fail the test after
    ``timeout`` seconds, naming the last detail."""
    deadline = time.monotonic() + timeout
    while True:
        ok, detail = predicate()
        if ok:
            return detail
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not reached within {timeout} s; last: {detail}")
        time.sleep(interval)


def wait_until(predicate: Callable[[], T], what: str, timeout: float = 60.0, interval: float = 0.02) -> T:
    """Poll until ``predicate()`` is truthy and return its value; AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def settled(read: Callable[[], T], timeout: float = 15.0, interval: float = 0.1) -> T:
    """``read()`` once it returned the same value 3 times in a row (or at ``timeout``: the last value).

    For counters that still move briefly after a client is done (requests in flight)."""
    last, same = read(), 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and same < 3:
        time.sleep(interval)
        now = read()
        same = same + 1 if now == last else 0
        last = now
    return last
