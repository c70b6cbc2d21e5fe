"""Protocol-free request/response objects that travel from the data plane through the engine.

The data plane builds an ``InferenceRequest`` from a normalized ``WireRequest`` where the
request executes (``DataPlane.infer``, or the engine's IPC server for a frontend process):
numpy inputs, requested outputs, and ``encode``, how this request's outputs are prepared.
The scheduler executes it (possibly batched with others) and resolves ``future`` with the
list of ``EncodedOutput``s that ``encode(request, slices)`` made from its output slices, in the
instance's worker thread, so the event loop only copies references into the response message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..model_config import TensorSpec

if TYPE_CHECKING:
    from ..errors import InferenceError


class ShmTarget(NamedTuple):
    """Where a tensor lives in a registered system shared-memory region."""

    region: str
    offset: int
    byte_size: int


class RequestedOutput(NamedTuple):
    spec: TensorSpec
    shm: ShmTarget | None = None
    classification: int = 0  # top-k classes as BYTES "value:index[:label]"; 0 = off


class EncodedOutput(NamedTuple):
    name: str
    datatype: str
    shape: tuple[int, ...]
    raw: Any  # bytes; b"" when the output went to shared memory; (offset, nbytes) in a response arena


@dataclass(eq=False, slots=True)  # slots: ~15 % cheaper to build and read, on every request
class InferenceRequest:
    model: Any  # model_version.ModelVersion (untyped: importing it would close a circle through the scheduler)
    inputs: dict[str, np.ndarray]
    outputs: list[RequestedOutput]
    batch_size: int  # rows along dim 0; 1 for models without batching
    id: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
    priority: int = 0
    timeout_us: int = 0
    arrival_ns: int = 0
    # how the request is answered: an asyncio.Future the scheduler creates at submit, unless
    # the submitter brings an object with the same methods (done, set_result, set_exception,
    # cancel), resolved on the event loop thread; the engine's IPC server brings one that
    # sends the answer to the frontend at once (no callback to schedule per request)
    future: asyncio.Future = None  # type: ignore[assignment]
    # decoupled models: called from the instance thread with each response's
    # list[EncodedOutput] as the model yields it, or the InferenceError of an error response
    # the stream goes on after (the future then resolves to [])
    emit: Callable[[list[EncodedOutput] | InferenceError], object] | None = None
    # a filler row the sequence batcher adds to keep batch slots in place (never answered)
    padding: bool = False
    # set by a batcher at enqueue: queue deadline (0 = none) and arrival sequence number
    deadline_ns: int = 0
    seq: int = 0
    # filled by the scheduler when the request starts executing
    exec_start_ns: int = 0
    # decoupled models: when the first response was emitted (0 = none yet), for
    # --metrics-config histogram_latencies' first-response histogram
    first_response_ns: int = 0
    # a sampled request's tracing.Trace (None: not traced; resolve() records it)
    trace: Any = None
    # (request, its output slices) -> its encoded outputs (bytes, shared-memory writes,
    # classification); set by the data plane, called in the instance's worker thread. It takes
    # the request so that one callable serves every request of a channel (no object each).
    # A step of an ensemble gets the slices themselves back (ensemble_scheduler.py), hence Any.
    encode: Callable[[InferenceRequest, dict[str, np.ndarray]], Any] = None  # type: ignore[assignment]
    # set by the scheduler when the request succeeded: its execution's compute durations
    # (statistics.BatchTimings), which an ensemble charges to itself, as Triton does
    timings: Any = None
    # the submitter's own handle for the request (the engine's IPC server: the frontend's token)
    tag: Any = None
    # a BLS request: the data plane's handle of the call that made it, handed to request-level
    # backends (BackendRequest.caller) so that an instance knows whose calls it serves
    caller: Any = None
