"""Triton's sequence batcher (core sequence_batch_scheduler.cc): stateful models.

Requests carry ``sequence_id`` (int64 or string correlation id), ``sequence_start`` and
``sequence_end``. The server synthesizes the control inputs the config declares
(``CONTROL_SEQUENCE_START / END / READY / CORRID``) and feeds each sequence's requests to
the model strictly in order, one at a time.

* **Direct**: each sequence is pinned to a batch *slot* (instance, row) for its lifetime, so
  a model can keep per-slot state. A batch holds the head request of every busy slot of one
  instance, in slot order; idle slots below the highest busy one are padded with READY=0
  rows (their outputs are discarded). Sequences beyond the free slots wait in a backlog.
* **Oldest**: up to ``max_candidate_sequences`` sequences are candidates; a batch takes the
  head request of the candidates with the oldest requests (one per sequence), dispatched
  with the preferred sizes and queue delay like the dynamic batcher. The model keys state
  by the CORRID control.

A sequence ends with its END request (its ID is forgotten as soon as the END is enqueued),
or when it has been idle for ``max_sequence_idle_microseconds``; a later request without
START is then rejected. Requests must have batch size 1.
"""

from __future__ import annotations

import asyncio
import collections
import time
from dataclasses import dataclass, field

import numpy as np

from fpgaserve.protos import inference as pb

from .. import datatypes
from ..errors import invalid_argument
from .instance import ModelInstance
from .request import InferenceRequest
from .scheduler import Scheduler
from .wakeup import Wakeup

_IDLE_WAKEUP_S = 0.5
_Kind = pb.ModelSequenceBatching.Control.Kind


@dataclass
class _Control:
    name: str
    kind: str  # START, END, READY, CORRID
    dtype: np.dtype
    false_true: tuple = (0, 1)


@dataclass(eq=False)
class _Sequence:
    key: tuple
    corrid: int | str
    queue: collections.deque = field(default_factory=collections.deque)
    in_flight: bool = False
    slot: tuple[int, int] | None = None  # Direct: (instance index, row)
    candidate: bool = False  # Oldest
    last_ns: int = 0
    ended: bool = False


def _controls(config) -> list[_Control]:
    out = []
    for ci in config.sequence_batching.control_input:
        for c in ci.control:
            kind = _Kind.Name(c.kind).replace("CONTROL_SEQUENCE_", "")
            if kind == "CORRID":
                dt = datatypes.BY_CONFIG[pb.DataType.Name(c.data_type or pb.DataType.Value("TYPE_UINT64"))]
                out.append(_Control(ci.name, kind, dt.dtype))
            elif c.int32_false_true:
                out.append(_Control(ci.name, kind, np.dtype(np.int32), tuple(c.int32_false_true)))
            elif c.fp32_false_true:
                out.append(_Control(ci.name, kind, np.dtype(np.float32), tuple(c.fp32_false_true)))
            elif c.bool_false_true:
                out.append(_Control(ci.name, kind, np.dtype(np.bool_), tuple(c.bool_false_true)))
    return out


class SequenceBatcher(Scheduler):
    def __init__(self, model, instances: list[ModelInstance]):
        super().__init__(model, instances)
        sb = model.config.sequence_batching
        self.controls = _controls(model.config)
        self.idle_ns = (sb.max_sequence_idle_microseconds or 1_000_000) * 1000
        self.oldest = sb.WhichOneof("strategy_choice") == "oldest"
        self.slots_per_instance = max(1, model.max_batch_size)
        self.sequences: dict[tuple, _Sequence] = {}
        self.backlog: collections.deque[_Sequence] = collections.deque()
        if self.oldest:
            o = sb.oldest
            self.max_candidates = o.max_candidate_sequences or 1024
            preferred = sorted(p for p in o.preferred_batch_size if p > 0)
            self.max_rows = min(max(preferred), self.slots_per_instance) if preferred else self.slots_per_instance
            self.preferred = set(preferred)
            self.delay_ns = o.max_queue_delay_microseconds * 1000
            self._form_lock = asyncio.Lock()
        else:
            self.delay_ns = sb.direct.max_queue_delay_microseconds * 1000
            # owners[i][j]: the sequence pinned to row j of instance i
            self.owners: list[list[_Sequence | None]] = [[None] * self.slots_per_instance for _ in instances]
            self._instance_wakeups = [Wakeup() for _ in instances]

    @property
    def pending(self) -> int:
        return sum(len(s.queue) for s in self.sequences.values())

    # ------------------------------------------------------------------ enqueue
    def submit(self, request: InferenceRequest) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        if request.future is None:  # else the submitter brought its own (see InferenceRequest.future)
            request.future = loop.create_future()
        if self.model.max_batch_size > 0 and request.batch_size > 1:
            request.future.set_exception(
                invalid_argument(
                    f"inference request to model '{self.model.name}' must specify batch-size 1 due to "
                    "requirements of sequence batcher"
                )
            )
            return request.future
        corrid = request.parameters.get("sequence_id")
        if corrid is None or corrid in (0, ""):
            request.future.set_exception(
                invalid_argument(
                    f"inference request to model '{self.model.name}' must specify a non-zero or "
                    "non-empty correlation ID"
                )
            )
            return request.future
        key = (type(corrid).__name__, corrid)
        start = bool(request.parameters.get("sequence_start"))
        seq = self.sequences.get(key)
        # Triton forgets a correlation ID as soon as its END request is *enqueued*: from then
        # on only a START may use the ID again (it queues behind the old END, in the same slot).
        if seq is None or seq.ended:
            if not start:
                request.future.set_exception(
                    invalid_argument(
                        f"inference request for sequence {corrid} to model '{self.model.name}' must "
                        "specify the START flag on the first request of the sequence"
                    )
                )
                return request.future
            if seq is None:
                seq = _Sequence(key, corrid)
                self.sequences[key] = seq
                self._admit(seq)
        seq.ended = bool(request.parameters.get("sequence_end"))
        seq.queue.append(request)
        seq.last_ns = request.arrival_ns
        self._wake(seq)
        return request.future

    def _admit(self, seq: _Sequence) -> None:
        """Give a new sequence a slot (Direct) or candidacy (Oldest), or put it in the backlog."""
        if self.oldest:
            if sum(1 for s in self.sequences.values() if s.candidate) < self.max_candidates:
                seq.candidate = True
                return
        else:
            for i, rows in enumerate(self.owners):
                for j, owner in enumerate(rows):
                    if owner is None:
                        rows[j] = seq
                        seq.slot = (i, j)
                        return
        self.backlog.append(seq)

    def _release(self, seq: _Sequence) -> None:
        self.sequences.pop(seq.key, None)
        if seq.slot is not None:
            i, j = seq.slot
            self.owners[i][j] = None
            seq.slot = None
        seq.candidate = False
        while self.backlog:
            nxt = self.backlog.popleft()
            if nxt.key not in self.sequences:
                continue
            self._admit(nxt)
            self._wake(nxt)
            break

    def _wake(self, seq: _Sequence) -> None:
        self._wakeup.set()
        if not self.oldest and seq.slot is not None:
            self._instance_wakeups[seq.slot[0]].set()

    def _reap_idle(self, now: int) -> float | None:
        """End sequences idle for longer than max_sequence_idle; return seconds to the next
        expiry (at most ``_IDLE_WAKEUP_S``), or None without sequences: then nothing can expire
        and a new sequence's arrival wakes the loops (an idle wake every 0.5 s per instance
        cost an idle server 1.5-2.7 % of a core with the dynamic batchers' wakes, measured)."""
        if not self.sequences:
            return None
        nearest = _IDLE_WAKEUP_S
        for seq in list(self.sequences.values()):
            if seq.queue or seq.in_flight:
                continue
            idle = now - seq.last_ns
            if seq.ended or idle >= self.idle_ns:
                self._release(seq)
            else:
                nearest = min(nearest, (self.idle_ns - idle) / 1e9)
        return nearest

    # ------------------------------------------------------------------ control tensors
    def _with_controls(self, request: InferenceRequest, seq: _Sequence | None, ready: bool) -> None:
        rows = max(1, request.batch_size)
        shape = (rows, 1) if self.model.max_batch_size > 0 else (1,)
        start = bool(request.parameters.get("sequence_start")) and ready
        end = bool(request.parameters.get("sequence_end")) and ready
        for c in self.controls:
            if c.kind == "CORRID":
                value = seq.corrid if (seq is not None and ready) else (b"" if c.dtype == object else 0)
                if c.dtype == object:
                    arr = np.empty(shape, dtype=object)
                    arr[...] = value if isinstance(value, bytes) else str(value).encode()
                else:
                    arr = np.full(shape, int(value) if not isinstance(value, str) else 0, dtype=c.dtype)
            else:
                flag = {"START": start, "END": end, "READY": ready}[c.kind]
                arr = np.full(shape, c.false_true[1] if flag else c.false_true[0], dtype=c.dtype)
            request.inputs[c.name] = arr

    def _padding_like(self, real: InferenceRequest) -> InferenceRequest:
        inputs = {}
        for name, arr in real.inputs.items():
            shape = (1,) + arr.shape[1:] if self.model.max_batch_size > 0 else arr.shape
            inputs[name] = np.full(shape, b"", dtype=object) if arr.dtype == object else np.zeros(shape, arr.dtype)
        pad = InferenceRequest(model=self.model, inputs=inputs, outputs=[], batch_size=1, padding=True)
        self._with_controls(pad, None, ready=False)
        return pad

    def _dispatch(self, seq: _Sequence) -> InferenceRequest | None:
        """Pop the sequence's next live request and mark the sequence in flight."""
        while seq.queue:
            r = seq.queue.popleft()
            if r.future.done():
                self._withdrawn(r)
                continue
            seq.in_flight = True
            self._with_controls(r, seq, ready=True)
            return r
        return None

    # ------------------------------------------------------------------ batch formation
    async def next_batch(self, instance: ModelInstance) -> list[InferenceRequest]:
        if self.oldest:
            async with self._form_lock:
                return await self._next_oldest()
        return await self._next_direct(instance.index)

    async def _next_direct(self, i: int) -> list[InferenceRequest]:
        wake = self._instance_wakeups[i]
        while True:
            timeout = self._reap_idle(time.monotonic_ns())
            rows: dict[int, InferenceRequest] = {}
            for j, seq in enumerate(self.owners[i]):
                if seq is not None and seq.queue and not seq.in_flight:
                    r = self._dispatch(seq)
                    if r is not None:
                        rows[j] = r
            if rows:
                first = next(iter(rows.values()))
                return [rows[j] if j in rows else self._padding_like(first) for j in range(max(rows) + 1)]
            if self._stopping and not any(s.queue for s in self.sequences.values()):
                return []
            await wake.wait(timeout)

    async def _next_oldest(self) -> list[InferenceRequest]:
        while True:
            now = time.monotonic_ns()
            timeout = self._reap_idle(now)
            ready = [
                s
                for s in self.sequences.values()
                if s.candidate and s.queue and not s.in_flight and not s.queue[0].future.done()
            ]
            for s in self.sequences.values():  # drop withdrawn heads
                while s.queue and s.queue[0].future.done():
                    self._withdrawn(s.queue.popleft())
            if ready:
                ready.sort(key=lambda s: s.queue[0].arrival_ns)
                picked: list[_Sequence] = []
                rows, best = 0, 0
                for s in ready:
                    size = max(1, s.queue[0].batch_size)
                    if picked and rows + size > self.max_rows:
                        break
                    picked.append(s)
                    rows += size
                    if rows in self.preferred:
                        best = len(picked)
                waited = now - ready[0].queue[0].arrival_ns
                full = rows >= self.max_rows or len(picked) < len(ready)
                if best or full or self.delay_ns == 0 or waited >= self.delay_ns or self._stopping:
                    chosen = picked[:best] if best and not (self.delay_ns and waited >= self.delay_ns) else picked
                    batch = [r for r in (self._dispatch(s) for s in chosen) if r is not None]
                    if batch:
                        return batch
                    continue
                delay_s = (self.delay_ns - waited) / 1e9
                timeout = delay_s if timeout is None else min(timeout, delay_s)
            elif self._stopping and not any(s.queue for s in self.sequences.values()):
                return []
            await self._wakeup.wait(timeout)

    # ------------------------------------------------------------------ completion
    def _complete(self, request: InferenceRequest, result, error) -> None:
        super()._complete(request, result, error)
        corrid = request.parameters.get("sequence_id")
        seq = self.sequences.get((type(corrid).__name__, corrid))
        if seq is None:
            return
        seq.in_flight = False
        seq.last_ns = time.monotonic_ns()
        if request.parameters.get("sequence_end") and not seq.queue:
            self._release(seq)  # else a new sequence with this ID (START) is queued behind it
        self._wake(seq)

    def queued(self) -> list[InferenceRequest]:
        return [r for seq in self.sequences.values() for r in seq.queue]

    async def stop(self, timeout: float | None = None) -> list[ModelInstance]:
        self._stopping = True
        if not self.oldest:
            for w in self._instance_wakeups:
                w.set()
        return await super().stop(timeout)
