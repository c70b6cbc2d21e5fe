"""Log records of a hosted child's ``fpgaserve`` loggers, sent to the server's log.

A backend that logs through ``logging`` (the hls4ml backend says which mode it runs in, a
C-simulation's build and its warnings) would write to the instance process's stderr, where
nobody reads it; ``forward_logs`` sends each record over the instance's channel instead, and
the server's side logs it under the instance's name, in the server's own format and file.
"""

from __future__ import annotations

import logging

from . import instance_worker

_LEVELS = ((logging.ERROR, "error"), (logging.WARNING, "warn"), (logging.INFO, "info"))


class _ToServerLog(logging.Handler):
    """Log records of the child's ``fpgaserve`` loggers, as ``log`` messages to the server."""

    def emit(self, record: logging.LogRecord) -> None:
        level = next((name for number, name in _LEVELS if record.levelno >= number), "verbose")
        try:
            instance_worker.current().log(level, self.format(record))
        except (RuntimeError, OSError):
            pass  # not in a worker, or the server is gone: nowhere to log to


def forward_logs() -> None:
    """Send this process's ``fpgaserve`` log records (INFO and above) to the server's log.
    Called by a hosted backend as it is built in its instance process; idempotent."""
    logger = logging.getLogger("fpgaserve")
    if not any(isinstance(h, _ToServerLog) for h in logger.handlers):
        logger.addHandler(_ToServerLog())
        logger.setLevel(logging.INFO)
        logger.propagate = False  # not also to stderr by logging's last-resort handler
