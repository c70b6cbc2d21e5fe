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
