"""Triton's LogSettings, applied to Python logging for real.

Keys (as tritonserver has them): log_file, log_info, log_warning, log_error,
log_verbose_level, log_format ("default" or "ISO8601").

Two guards for a server that may run as root and log what clients send:

* ``log_file`` can only be changed over the wire when the server was started with
  ``--allow-log-file-update=true``; otherwise any client could make the server create and
  append to a file anywhere it can write. ``--log-file`` at start is always honoured.
* every log line escapes control characters in its message (``EscapingFormatter``), so a
  client string with a newline (a model or shm region name) cannot forge a log line.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from .errors import escape_control, invalid_argument, permission_denied

LOG_FILE_UPDATE_REFUSED = (
    "changing log_file through LogSettings is disabled on this server "
    "(start it with --allow-log-file-update=true to allow it)"
)


MAX_MESSAGE_CHARS = 8192


class EscapingFormatter(logging.Formatter):
    """One record, one line: the message's control characters are escaped, and a traceback
    (which may quote client strings too) is indented, so no line of it can pass for a record."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        message = record.message
        if len(message) > MAX_MESSAGE_CHARS:  # a client string cannot fill the disk either
            message = f"{message[:MAX_MESSAGE_CHARS]} ... [{len(message) - MAX_MESSAGE_CHARS} more characters]"
        record.message = escape_control(message)
        return super().formatMessage(record)

    def formatException(self, ei) -> str:
        text = super().formatException(ei)
        return "\n".join("    | " + escape_control(line) for line in text.splitlines())

    def formatStack(self, stack_info: str) -> str:
        return "\n".join("    | " + escape_control(line) for line in stack_info.splitlines())


_FORMATS = {
    # tritonserver's default: "I1121 09:25:00.123456 1234 file.cc:12] message"
    "default": "%(levelname).1s%(asctime)s %(process)d %(name)s] %(message)s",
    "ISO8601": "%(asctime)s %(levelname).1s %(process)d %(name)s] %(message)s",
}
_DATEFMT = {"default": "%m%d %H:%M:%S", "ISO8601": "%Y-%m-%dT%H:%M:%SZ"}


def make_formatter(log_format: str) -> EscapingFormatter:
    """The formatter of ``log_format`` ("default" or "ISO8601"). Timestamps are UTC, as
    tritonserver's (its logger formats both with gmtime_r): the ISO 8601 form ends in ``Z``,
    which claims UTC, and a log read next to Triton's or another host's lines in another
    time zone must not be hours off."""
    formatter = EscapingFormatter(_FORMATS[log_format], _DATEFMT[log_format])
    formatter.converter = time.gmtime
    return formatter


class LogSettings:
    def __init__(
        self,
        verbose: int = 0,
        log_file: str = "",
        log_format: str = "default",
        allow_log_file_update: bool = False,
        *,
        log_info: bool = True,
        log_warning: bool = True,
        log_error: bool = True,
    ):
        self.allow_log_file_update = allow_log_file_update
        self.values: dict[str, Any] = {
            "log_file": log_file,
            "log_info": log_info,
            "log_warning": log_warning,
            "log_error": log_error,
            "log_verbose_level": verbose,
            "log_format": log_format,
        }
        self._handler: logging.Handler | None = None
        self.apply()

    @classmethod
    def from_options(cls, options, allow_log_file_update: bool = False) -> LogSettings:
        """The settings of the server's ``--log-*`` options (``flags.ServerOptions``), applied:
        the one place they are read, for each of the server's processes. Only the process
        that answers LogSettings RPCs passes ``allow_log_file_update``."""
        return cls(
            options.log_verbose,
            options.log_file,
            options.log_format,
            allow_log_file_update=allow_log_file_update,
            log_info=options.log_info,
            log_warning=options.log_warning,
            log_error=options.log_error,
        )

    def as_dict(self) -> dict:
        return dict(self.values)

    def update(self, key: str, value) -> None:
        self.update_many({key: value})

    def update_many(self, settings: dict) -> None:
        """All of a request's settings, or none: every one is checked before any applies."""
        for key, value in settings.items():
            self._check(key, value)
        new_file = settings.get("log_file")
        if new_file and new_file != self.values["log_file"]:
            try:
                open(new_file, "a").close()
            except OSError as e:
                raise invalid_argument(f"cannot open log file '{new_file}': {e.strerror}") from None
        if settings:
            self.values.update(settings)
            self.apply()

    def _check(self, key: str, value) -> None:
        if key not in self.values:
            raise invalid_argument(f"unknown log setting '{key}'")
        current = self.values[key]
        if isinstance(current, bool):
            if not isinstance(value, bool):
                raise invalid_argument(f"log setting '{key}' expects a bool value")
        elif isinstance(current, int):
            if isinstance(value, bool) or not isinstance(value, int):
                raise invalid_argument(f"log setting '{key}' expects a uint32 value")
        elif not isinstance(value, str):
            raise invalid_argument(f"log setting '{key}' expects a string value")
        if key == "log_format" and value not in _FORMATS:
            raise invalid_argument(f"invalid log format '{value}', expected one of {sorted(_FORMATS)}")
        if key == "log_file" and value != current and not self.allow_log_file_update:
            # PERMISSION_DENIED: the request is well formed, this server does not allow it
            raise permission_denied(LOG_FILE_UPDATE_REFUSED)

    def apply(self) -> None:
        v = self.values
        root = logging.getLogger("fpgaserve")
        if v["log_verbose_level"] > 0:
            level = logging.DEBUG
        elif v["log_info"]:
            level = logging.INFO
        elif v["log_warning"]:
            level = logging.WARNING
        elif v["log_error"]:
            level = logging.ERROR
        else:
            level = logging.CRITICAL + 1
        root.setLevel(level)
        handler = logging.FileHandler(v["log_file"]) if v["log_file"] else logging.StreamHandler(sys.stderr)
        handler.setFormatter(make_formatter(v["log_format"]))
        if self._handler is not None:
            root.removeHandler(self._handler)
            self._handler.close()
        root.addHandler(handler)
        root.propagate = False
        self._handler = handler
