"""The exceptions that cross module boundaries: ``InferenceError`` on the request path,
``StartupError`` when the server cannot start.

``InferenceError`` carries a ``Status`` named after Triton core's error codes
(``TRITONSERVER_Error_Code``), not a wire's: the engine, the data planes and the IPC channel
know nothing of gRPC or HTTP, and each frontend maps the status onto its own wire at the edge
(grpc.py: gRPC status codes, one to one except INVALID_ARG -> INVALID_ARGUMENT and
UNSUPPORTED -> UNIMPLEMENTED, as Triton's grpc_utils.cc does; http.py: HTTP statuses, as
Triton's HttpCodeFromError does). Between processes a status travels as its member name.
"""

from __future__ import annotations

import enum


class Status(enum.Enum):
    """What kind of failure an ``InferenceError`` is, in Triton core's terms.

    Triton's own codes, plus PERMISSION_DENIED: a request this server refuses by policy
    (``--allow-log-file-update``, ``--allow-model-code-upload``), which a client must be able
    to tell from a malformed one."""

    INVALID_ARG = enum.auto()
    NOT_FOUND = enum.auto()
    UNAVAILABLE = enum.auto()
    INTERNAL = enum.auto()
    UNSUPPORTED = enum.auto()
    ALREADY_EXISTS = enum.auto()
    CANCELLED = enum.auto()
    PERMISSION_DENIED = enum.auto()


class InferenceError(Exception):
    """A failure a client is told about: its status and the exact text Triton would send."""

    __slots__ = ("message", "status")

    def __init__(self, status: Status, message: str):
        super().__init__(message)
        self.status = status
        self.message = message

    def __repr__(self) -> str:
        return f"InferenceError({self.status.name}, {self.message!r})"


def invalid_argument(message: str) -> InferenceError:
    return InferenceError(Status.INVALID_ARG, message)


def not_found(message: str) -> InferenceError:
    return InferenceError(Status.NOT_FOUND, message)


def unavailable(message: str) -> InferenceError:
    return InferenceError(Status.UNAVAILABLE, message)


def internal(message: str) -> InferenceError:
    return InferenceError(Status.INTERNAL, message)


def unimplemented(message: str) -> InferenceError:
    """Triton's UNSUPPORTED (gRPC's UNIMPLEMENTED, HTTP 501)."""
    return InferenceError(Status.UNSUPPORTED, message)


def already_exists(message: str) -> InferenceError:
    return InferenceError(Status.ALREADY_EXISTS, message)


def permission_denied(message: str) -> InferenceError:
    return InferenceError(Status.PERMISSION_DENIED, message)


def format_shape(shape) -> str:
    """A shape as Triton's texts write it: ``[-1,16]``."""
    return "[" + ",".join(str(d) for d in shape) + "]"


# what Triton adds to a shape error of a batching model (its text, verbatim)
BATCH_DIM_NOTE = (
    " NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension "
    "to be prepended to each input shape. If you want to specify the full shape including the "
    "batch dim in your input dims config, try setting max_batch_size to zero. See the model "
    "configuration docs for more info on max_batch_size."
)


def unexpected_shape(prefix: str, input_name: str, model: str, expected, got, batched: bool) -> InferenceError:
    """Triton's error for an input whose shape does not match the config (INVALID_ARG): a
    request's (the data plane) and a warm-up sample's (the engine) read the same."""
    # (Triton ends the text with ". " when there is no NOTE)
    return invalid_argument(
        f"{prefix}unexpected shape for input '{input_name}' for model '{model}'. Expected "
        f"{format_shape(expected)}, got {format_shape(got)}." + (BATCH_DIM_NOTE if batched else " ")
    )


class StartupError(Exception):
    """The server cannot start (an unusable option, TLS file or address; a model that failed
    with --exit-on-error). Library code raises it; only the command line (``cli.main``) turns
    it into the ``error: <message>`` line and exit status 1, so the server can also be
    started, and its failures caught, from Python."""


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
