"""The memory a model's config lets the engine hold for it, for the load log.

The engine allocates per model what its batches need: each instance runs one batch at a time,
whose inputs the scheduler gathers into one array per tensor, whose outputs the backend
returns whole, and whose requests' outputs the instance then encodes for the wire, a copy of
each (``tensors.encode_outputs``: into the frontend's response arena where there is one and it
has room, else bytes of the engine's) that lives until the response is sent, beside the
outputs. So ``instances x max_batch_size rows x (input + 2 x output bytes per row)`` bounds the
batches in flight. Requests waiting in the dynamic batcher's queue hold their own inputs:
``max_queue_size`` (default_queue_policy) bounds how many, and each carries at most
``max_batch_size`` rows; without it the queue is bounded only by what the frontends accept
(their request size limits and arenas), which are server-wide, not the model's.

A tensor whose size the config leaves open (a -1 dimension, a BYTES element) is named instead
of counted: its bound is the request size limit. Nothing here refuses a model: it says what
follows from the config so that an operator sees a model whose full batch is gigabytes before
its first request does.

A backend adds what it holds besides the batch's arrays (``Backend.memory_note``: an hls4ml
model's emulation intermediates, worked through in pieces within a budget, or its instance
process and shared segments; see ``backends/hls4ml/memory.py``), and under an address-space
limit its load sets batches and that aside, failing alone where they do not fit
(``backends/hosting/address_space.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fpgaserve.protos import inference as pb

from .. import datatypes
from ..model_config import ModelConfig


def _format_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


@dataclass(frozen=True)
class BatchMemory:
    """What a model's config bounds: ``instances`` batches of ``rows`` rows in flight, each row
    ``input_bytes`` + ``output_bytes`` in its fixed-size tensors (and the outputs' encoded
    copy), and at most ``queued`` requests of ``rows`` rows waiting (None: the config sets no
    max_queue_size)."""

    model: str
    instances: int
    rows: int
    input_bytes: int
    output_bytes: int
    queued: int | None
    #: tensors whose size the config leaves open (not counted)
    variable: tuple[str, ...]
    #: what the backend's instances hold besides their batch's arrays, in its words
    backend: tuple[str, ...] = ()

    @property
    def row_bytes(self) -> int:
        """A row's inputs, outputs and the outputs' encoded copy."""
        return self.input_bytes + 2 * self.output_bytes

    @property
    def in_flight_bytes(self) -> int:
        return self.instances * self.rows * self.row_bytes

    def describe(self) -> str:
        """One log line: the bound and the numbers it follows from."""
        text = (
            f"model '{self.model}' holds at most {_format_bytes(self.in_flight_bytes)} in batches in flight: "
            f"{self.instances} instance(s) x {self.rows} rows x {self.row_bytes:,} bytes per row "
            f"({self.input_bytes:,} input + {self.output_bytes:,} output + {self.output_bytes:,} output "
            "encoded for the wire)"
        )
        if self.queued is None:
            text += "; its queue has no max_queue_size (bounded by the frontends' request limits)"
        else:
            queued = self.queued * self.rows * self.input_bytes
            text += f"; queued inputs at most {_format_bytes(queued)} ({self.queued} requests, max_queue_size)"
        if self.backend:
            text += f"; per instance besides its batch: {'; '.join(self.backend)}"
        if self.variable:
            text += f"; not counted, sized per request: {', '.join(self.variable)}"
        return text


def _row_bytes(tensors, variable: list[str]) -> int:
    total = 0
    for tensor in tensors:
        itemsize = datatypes.BY_CONFIG[pb.DataType.Name(tensor.data_type)].itemsize
        dims = list(tensor.dims)
        if itemsize == 0 or any(d < 0 for d in dims):
            variable.append(tensor.name)
            continue
        total += itemsize * math.prod(dims)
    return total


def batch_memory(config: ModelConfig, instances: int, backends=()) -> BatchMemory:
    """The bound for ``config`` served with ``instances`` instances (see the module docstring),
    with the ``memory_note`` of each of ``backends`` (the instances' backends; the same note
    once). A model without batching (max_batch_size 0) runs one request of its dims per batch."""
    variable: list[str] = []
    input_bytes = _row_bytes(config.input, variable)
    output_bytes = _row_bytes(config.output, variable)
    queued: int | None = None
    if config.HasField("dynamic_batching"):
        limit = config.dynamic_batching.default_queue_policy.max_queue_size
        queued = limit if limit > 0 else None
    return BatchMemory(
        model=config.name,
        instances=instances,
        rows=max(1, config.max_batch_size),
        input_bytes=input_bytes,
        output_bytes=output_bytes,
        queued=queued,
        variable=tuple(variable),
        backend=tuple(dict.fromkeys(n for n in (getattr(b, "memory_note", None) for b in backends) if n)),
    )


__all__ = ["BatchMemory", "batch_memory"]
