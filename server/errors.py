"""The one exception type that crosses module boundaries on the request path.

Triton maps its internal error codes one-to-one onto gRPC status codes (INVALID_ARG ->
INVALID_ARGUMENT, UNSUPPORTED -> UNIMPLEMENTED), so we carry the gRPC code directly and
the transport only has to copy it onto the wire.
"""

from __future__ import annotations

from grpc import StatusCode


class InferenceError(Exception):
    """An error with the gRPC status code and the exact message Triton would send."""

    __slots__ = ("code", "message")

    def __init__(self, code: StatusCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"InferenceError({self.code.name}, {self.message!r})"


def invalid_argument(message: str) -> InferenceError:
    return InferenceError(StatusCode.INVALID_ARGUMENT, message)


def not_found(message: str) -> InferenceError:
    return InferenceError(StatusCode.NOT_FOUND, message)


def unavailable(message: str) -> InferenceError:
    return InferenceError(StatusCode.UNAVAILABLE, message)


def internal(message: str) -> InferenceError:
    return InferenceError(StatusCode.INTERNAL, message)


def unimplemented(message: str) -> InferenceError:
    return InferenceError(StatusCode.UNIMPLEMENTED, message)


def already_exists(message: str) -> InferenceError:
    return InferenceError(StatusCode.ALREADY_EXISTS, message)


# Error texts that reach a client are bounded: gRPC carries the status message in a trailer
# (percent-encoded: up to 3 bytes per byte), and clients refuse trailers above their
# max_metadata_size (8 KiB by default) -- a 100 KB exception text would otherwise surface as
# RESOURCE_EXHAUSTED about metadata size instead of the error. 2 KiB encodes to at most 6 KiB.
MAX_CLIENT_MESSAGE_BYTES = 2048


def bound_message(message: str, limit: int = MAX_CLIENT_MESSAGE_BYTES) -> str:
    """Keep the start of ``message`` within ``limit`` UTF-8 bytes, saying how much was cut."""
    data = message.encode("utf-8", "replace")
    if len(data) <= limit:
        return message
    head = data[: limit - 64].decode("utf-8", "ignore")
    return f"{head} ... [error text truncated: {len(data)} bytes in all]"


_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F]}
_CONTROL.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"})
for _c in range(0x80, 0xA0):  # C1 controls (e.g. NEL, which some terminals treat as a newline)
    _CONTROL[_c] = f"\\x{_c:02x}"
_CONTROL[0x2028] = "\\u2028"  # line and paragraph separators
_CONTROL[0x2029] = "\\u2029"


def escape_control(text: str) -> str:
    """Control characters as visible escapes, so a client string can never start a log line."""
    return text.translate(_CONTROL)
