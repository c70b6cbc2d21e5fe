"""Access control as tritonserver has it: restricted protocol groups behind a shared header.

``--grpc-restricted-protocol=<protocols>:<key>=<value>`` (and ``--http-restricted-api``, same
syntax) restricts each listed protocol group: a call must carry the header (gRPC metadata
``triton-grpc-protocol-<key>``; HTTP header ``<key>``) with exactly ``<value>``, otherwise it is
refused before it does anything -- gRPC ``UNAVAILABLE`` "This protocol is restricted, expecting
header '<header>'", HTTP 403 with ``{"error": "This API is restricted, expecting header
'<header>'"}`` (Triton's texts, src/grpc/grpc_server.cc and src/http_server.cc).

The parsing follows tritonserver's command line parser: ``<protocols>`` is a comma-separated
list of the names below, each protocol may be restricted by only one option, and an empty
protocol list, key or value is an error.
"""

from __future__ import annotations

import hmac
from typing import NamedTuple

# tritonserver's RESTRICTED_CATEGORY_NAMES, in its order
CATEGORIES = (
    "health",
    "metadata",
    "inference",
    "shared-memory",
    "model-config",
    "model-repository",
    "statistics",
    "trace",
    "logging",
)

GRPC_HEADER_PREFIX = "triton-grpc-protocol-"  # tritonserver's kRestrictedProtocolHeaderTemplate

# gRPC method -> the protocol group tritonserver files it under (grpc_server.cc); the
# grpc.health.v1 service is part of "health", as in Triton.
GRPC_METHOD_CATEGORIES = {
    "ServerLive": "health",
    "ServerReady": "health",
    "ModelReady": "health",
    "Check": "health",
    "Watch": "health",
    "ServerMetadata": "metadata",
    "ModelMetadata": "metadata",
    "ModelInfer": "inference",
    "ModelStreamInfer": "inference",
    "ModelConfig": "model-config",
    "ModelStatistics": "statistics",
    "RepositoryIndex": "model-repository",
    "RepositoryModelLoad": "model-repository",
    "RepositoryModelUnload": "model-repository",
    "SystemSharedMemoryStatus": "shared-memory",
    "SystemSharedMemoryRegister": "shared-memory",
    "SystemSharedMemoryUnregister": "shared-memory",
    "CudaSharedMemoryStatus": "shared-memory",
    "CudaSharedMemoryRegister": "shared-memory",
    "CudaSharedMemoryUnregister": "shared-memory",
    "TraceSetting": "trace",
    "LogSettings": "logging",
}


class Restriction(NamedTuple):
    header: str  # the full header name a client must send
    value: str

    def allows(self, sent: str | bytes | None) -> bool:
        """Whether a header value a client sent grants access (constant-time comparison)."""
        if sent is None:
            return False
        if isinstance(sent, str):
            sent = sent.encode("utf-8", "surrogateescape")
        return hmac.compare_digest(sent, self.value.encode("utf-8", "surrogateescape"))

    def grpc_refusal(self) -> str:
        return f"This protocol is restricted, expecting header '{self.header}'"

    def http_refusal(self) -> str:
        return f"This API is restricted, expecting header '{self.header}'"


class RestrictionError(ValueError):
    """A malformed restriction option (the message is what the command line prints)."""


def parse_restrictions(options: list[str], flag: str, header_prefix: str, kind: str) -> dict[str, Restriction]:
    """``["<p1>,<p2>:<key>=<value>", ...]`` -> {protocol: Restriction}.

    ``kind`` is "protocol" (gRPC) or "api" (HTTP), as tritonserver words its errors.
    """
    restrictions: dict[str, Restriction] = {}
    for arg in options:
        names, colon, setting = arg.partition(":")
        key, eq, value = setting.partition("=")
        if not colon or not eq or not names or not key or not value:
            raise RestrictionError(f"--{flag} option format is '<{kind}s>:<key>=<value>'. Got {arg}")
        header = header_prefix + key
        if header_prefix:
            # gRPC metadata keys are lower case on the wire
            header = header.lower()
        for name in names.split(","):
            name = name.strip()
            if name not in CATEGORIES:
                raise RestrictionError(f"unknown restricted {kind} '{name}' (choose from {', '.join(CATEGORIES)})")
            if name in restrictions:
                raise RestrictionError(f"restricted {kind} '{name}' can not be specified in multiple config groups")
            restrictions[name] = Restriction(header, value)
    return restrictions


def grpc_restrictions(options: list[str]) -> dict[str, Restriction]:
    return parse_restrictions(options, "grpc-restricted-protocol", GRPC_HEADER_PREFIX, "protocol")


def http_restrictions(options: list[str]) -> dict[str, Restriction]:
    return parse_restrictions(options, "http-restricted-api", "", "api")
