"""What the gRPC and HTTP frontends share above their wire formats: Triton's statistics and
model metadata as one structure that each renders (gRPC: ``json_format.ParseDict`` into the
response message; HTTP: the JSON body, with the fields only Triton's HTTP adds), the rules
of model-load parameters, and how an exception out of a handler becomes what a client is
told. One implementation each, so the two protocols cannot drift apart.

Everything here is wire-neutral: values are plain dicts and lists named as Triton's proto
fields (which its JSON uses too), errors are ``InferenceError``s with a ``Status``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from ..dataplane.api import DataPlaneAPI, Duration, VersionStatistics
from ..errors import InferenceError, bound_message, internal, invalid_argument, unavailable, unimplemented

_INFER_STATS = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")
_BATCH_STATS = ("compute_input", "compute_infer", "compute_output")


def _duration(d: Duration) -> dict[str, int]:
    return {"count": d.count, "ns": d.ns}


def statistics_rows(versions: Sequence[VersionStatistics]) -> list[dict[str, Any]]:
    """``model_stats``: one row per version, fields as ModelStatistics names them (only those
    fpgaserve measures; a frontend adds what its wire always shows)."""
    rows = []
    for v in versions:
        s = v.stats
        rows.append(
            {
                "name": v.name,
                "version": v.version_str,
                "last_inference": s.last_inference_ms,
                "inference_count": s.inference_count,
                "execution_count": s.execution_count,
                "inference_stats": {field: _duration(getattr(s, field)) for field in _INFER_STATS},
                "batch_stats": [
                    {"batch_size": size} | {f: _duration(getattr(s.batch_stats[size], f)) for f in _BATCH_STATS}
                    for size in sorted(s.batch_stats)
                ],
            }
        )
    return rows


async def model_statistics(dataplane: DataPlaneAPI, name: str, version: str) -> list[dict[str, Any]]:
    """ModelStatistics: the rows for ``name`` (every loaded model if empty) and ``version``."""
    return statistics_rows(await dataplane.statistics(name, version))


async def model_metadata(dataplane: DataPlaneAPI, name: str, version: str) -> dict[str, Any]:
    """ModelMetadata: name, ready versions, platform, and the tensors with the batch
    dimension (-1) in front of each shape when the model batches."""
    model = await dataplane.model(name, version)
    batch = [-1] if model.max_batch_size > 0 else []

    def tensors(specs) -> list[dict[str, Any]]:
        return [{"name": s.name, "datatype": s.datatype.wire, "shape": batch + list(s.dims)} for s in specs.values()]

    return {
        "name": model.name,
        "versions": [str(v) for v in await dataplane.ready_versions(model.name)],
        "platform": model.platform,
        "inputs": tensors(model.inputs),
        "outputs": tensors(model.outputs),
    }


def refuse_repository_name(repository: str) -> None:
    """Repository control addresses the server's repositories as one (as Triton does)."""
    if repository:
        raise unimplemented("'repository_name' specification is not supported")


class HeaderForwarding:
    """Which request headers become request parameters (``--grpc-header-forward-pattern``,
    ``--http-header-forward-pattern``): those whose name the regular expression matches
    anywhere in it (RE2's PartialMatch, as Triton uses it; Python's ``re`` reads the same
    syntax, and more). The frontend selects them (transport); what they become, and which
    names are refused, is the data plane's (``tensors.forward_headers``)."""

    def __init__(self, pattern: str, flag: str):
        try:
            self.regex = re.compile(pattern) if pattern else None
        except re.error as e:
            raise ValueError(f"{flag}: '{pattern}' is not a regular expression: {e}") from None

    def select(self, pairs: Iterable[tuple[str, Any]]) -> list[tuple[str, str]]:
        """The (name, value) pairs to forward, in order; a binary value (gRPC ``-bin``
        metadata) as its UTF-8 text."""
        regex = self.regex
        if regex is None:
            return []
        found = []
        for key, value in pairs:
            if regex.search(key):
                found.append((key, value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)))
        return found


V = TypeVar("V")


def load_parameters(
    parameters: Iterable[tuple[str, V]],
    config_text: Callable[[str, V], str],
    file_bytes: Callable[[str, V], bytes],
) -> tuple[str | None, dict[str, bytes] | None]:
    """RepositoryModelLoad's parameters, in order: ``config`` (a config override, JSON) and
    ``file:<path>`` (the files of the model to load); anything else is refused with Triton's
    text. ``config_text`` and ``file_bytes`` take a value out of the wire's representation
    (each wire refuses a value of the wrong type with its own text). Returns the arguments of
    ``DataPlaneAPI.load``: (config JSON or None, {path: bytes} or None)."""
    config_json = None
    files: dict[str, bytes] = {}
    for key, value in parameters:
        if key == "config":
            config_json = config_text(key, value)
        elif key.startswith("file:"):
            files[key[len("file:") :]] = file_bytes(key, value)
        else:
            raise invalid_argument(f"unrecognized load parameter '{key}'.")
    return config_json, files or None


def failure(where: str, e: BaseException, log: logging.Logger) -> InferenceError:
    """What a client is told when a handler raised ``e``: an ``InferenceError`` as it is;
    running out of memory as UNAVAILABLE (another try may succeed); anything else is a bug
    of ours, logged with its traceback and answered INTERNAL with a plain text, never a
    Python repr (and never gRPC's UNKNOWN). The text is bounded (``errors.bound_message``)."""
    if isinstance(e, InferenceError):
        err = e
    elif isinstance(e, MemoryError):
        log.error("%s: out of memory", where)
        err = unavailable("the server ran out of memory handling the request")
    else:
        log.error("%s failed unexpectedly", where, exc_info=e)
        err = internal(f"internal error in {where} ({type(e).__name__}); the server log has the details")
    text = bound_message(err.message)
    return err if text is err.message else InferenceError(err.status, text)
