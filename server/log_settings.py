"""Triton's LogSettings, applied to Python logging for real.

Keys (as tritonserver has them): log_file, log_info, log_warning, log_error,
log_verbose_level, log_format ("default" or "ISO8601").
"""

from __future__ import annotations

import logging
import sys

from .errors import invalid_argument

_FORMATS = {
    # tritonserver's default: "I1121 09:25:00.123456 1234 file.cc:12] message"
    "default": "%(levelname).1s%(asctime)s %(process)d %(name)s] %(message)s",
    "ISO8601": "%(asctime)s %(levelname).1s %(process)d %(name)s] %(message)s",
}
_DATEFMT = {"default": "%m%d %H:%M:%S", "ISO8601": "%Y-%m-%dT%H:%M:%SZ"}


class LogSettings:
    def __init__(self, verbose: int = 0, log_file: str = "", log_format: str = "default"):
        self.values = {
            "log_file": log_file,
            "log_info": True,
            "log_warning": True,
            "log_error": True,
            "log_verbose_level": verbose,
            "log_format": log_format,
        }
        self._handler: logging.Handler | None = None
        self.apply()

    def as_dict(self) -> dict:
        return dict(self.values)

    def update(self, key: str, value) -> None:
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
        if key == "log_file" and value:
            try:
                open(value, "a").close()
            except OSError as e:
                raise invalid_argument(f"cannot open log file '{value}': {e.strerror}") from None
        self.values[key] = value
        self.apply()

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
        handler.setFormatter(logging.Formatter(_FORMATS[v["log_format"]], _DATEFMT[v["log_format"]]))
        if self._handler is not None:
            root.removeHandler(self._handler)
            self._handler.close()
        root.addHandler(handler)
        root.propagate = False
        self._handler = handler
