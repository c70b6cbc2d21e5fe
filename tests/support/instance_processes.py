"""A server's instance processes seen from outside (/proc) and its whole log
(tests/backends/test_python_backend.py, tests/hls4ml/test_hls4ml_crash.py)."""

from __future__ import annotations

import os


def full_log(server) -> str:
    return server.log_path.read_text(errors="replace")  # (ServerProcess.log keeps only the end)


def instance_processes(server_pid: int) -> list[int]:
    """The server's instance processes, from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmdline = f.read()
            except OSError:
                continue
            if int(stat.rsplit(") ", 1)[1].split()[1]) == server_pid and b"fpgaserve.backends.hosting" in cmdline:
                found.append(int(entry))
    return found
