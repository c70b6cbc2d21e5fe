"""What every process of the server does first: ``start_process``.

The server's main process (``fpgaserve``), its frontend and engine processes
(``--frontend-processes``, ``--engine-processes``) and every model instance process are fresh
interpreters (started with exec, never forked): nothing of the parent's process settings
carries over, so each entry point calls this before it allocates. Imports nothing of the
server, so an instance process still starts fast.
"""

from __future__ import annotations

from .process_memory import keep_freed_memory


def start_process() -> None:
    """Apply the process-wide settings every fpgaserve process runs with: glibc keeps freed
    memory for the next batch (``process_memory.keep_freed_memory``, with its measurements)."""
    keep_freed_memory()
