"""Which pytest-xdist worker this process is, for what parallel workers must not share.

The suite runs in parallel workers (pytest-xdist, tests/README.md says why and how many). Two
workers must never hand out the same loopback port (:func:`support.server_process.free_port`
takes only its own share of the ports), and they share what is worth building once
(the C-simulation cache, the tools under .tools/, behind file locks).
"""

from __future__ import annotations

import os


def worker() -> tuple[int, int]:
    """(index, count) of this xdist worker; (0, 1) in a run without workers."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if name.startswith("gw") and name[2:].isdigit() and count > 1:
        return int(name[2:]), count
    return 0, 1
