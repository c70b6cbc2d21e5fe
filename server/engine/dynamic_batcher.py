"""Triton's dynamic batcher (core dynamic_batch_scheduler.cc, scheduler_utils.cc), in asyncio.

Batch size counts *rows* (the sum of each request's dim 0), never above ``max_batch_size``;
a request is never split or reordered past another. A batch is formed whenever an instance
is free:

* walk the queues (highest priority first, FIFO within a level) and add requests while they
  fit in ``max_batch_size`` and their variable-dim input shapes agree with the first
  request's (unless the input allows ragged batching);
* if a prefix of that walk hits a preferred size, send the largest such prefix now; if the
  walk grows past the largest preferred size without hitting one, send the prefix before
  that point now (core GetDynamicBatch's ``best_preferred_batch_size``) -- unless the
  oldest request has waited ``max_queue_delay``: then the whole walk goes, up to
  ``max_batch_size`` ("the largest batch possible", batcher.md);
* if the walk cannot grow (the next request does not fit, or its shape differs), or the
  queue delay is 0, or the *oldest* pending request has waited ``max_queue_delay``, send
  what is pending;
* otherwise sleep until the delay of the oldest request runs out, the nearest queue timeout
  expires, or a new request arrives.

Queue policies per priority level: ``max_queue_size`` rejects at enqueue with UNAVAILABLE
"Exceeds maximum queue size"; a request whose queue timeout expires is rejected with
UNAVAILABLE "Request timeout expired" (REJECT) or moved behind the live requests of its
level (DELAY) -- also while every instance is busy, as Triton's batcher does while it waits
for a free slot. ``preserve_ordering`` releases responses in arrival order.
"""

from __future__ import annotations

import asyncio
import collections
import time
from dataclasses import dataclass

from ..errors import InferenceError, unavailable
from .instance import ModelInstance
from .request import InferenceRequest
from .scheduler import Scheduler, resolve


@dataclass
class QueuePolicy:
    reject_on_timeout: bool = True
    default_timeout_us: int = 0
    allow_timeout_override: bool = False
    max_queue_size: int = 0

    @classmethod
    def from_config(cls, policy) -> QueuePolicy:
        return cls(
            reject_on_timeout=policy.timeout_action == 0,  # REJECT=0, DELAY=1
            default_timeout_us=policy.default_timeout_microseconds,
            allow_timeout_override=policy.allow_timeout_override,
            max_queue_size=policy.max_queue_size,
        )

    def timeout_us(self, requested_us: int) -> int:
        """The request's queue timeout: the policy default, lowered by the request's own
        ``timeout`` parameter when the policy allows overrides. A default of 0 means no
        timeout, which a request cannot lower (core PolicyQueue::Enqueue: override only if
        ``0 < requested < default``)."""
        t = self.default_timeout_us
        if self.allow_timeout_override and 0 < requested_us < t:
            t = requested_us
        return t


class _Level:
    """One priority level: live requests, then requests whose timeout passed with DELAY."""

    def __init__(self, policy: QueuePolicy):
        self.policy = policy
        self.live: collections.deque[InferenceRequest] = collections.deque()
        self.delayed: collections.deque[InferenceRequest] = collections.deque()
        # live requests with a queue deadline (0: _expire has nothing to look at here)
        self.timed = 0

    def __len__(self) -> int:
        return len(self.live) + len(self.delayed)

    def __iter__(self):
        yield from self.live
        yield from self.delayed


class DynamicBatcher(Scheduler):
    def __init__(self, model, instances: list[ModelInstance]):
        super().__init__(model, instances)
        db = model.config.dynamic_batching
        self.max_batch_size = max(1, model.max_batch_size)
        preferred = sorted({p for p in db.preferred_batch_size if p > 0}) or [self.max_batch_size]
        self.preferred = set(preferred)
        # a batch grows past the largest preferred size only once the queue delay is exceeded
        self.max_preferred = min(max(preferred), self.max_batch_size)
        self.delay_ns = db.max_queue_delay_microseconds * 1000
        self.preserve_ordering = db.preserve_ordering
        self.priority_levels = db.priority_levels
        self.default_priority = db.default_priority_level if db.priority_levels else 0
        default_policy = QueuePolicy.from_config(db.default_queue_policy)
        if self.priority_levels:
            self.levels = {
                p: _Level(
                    QueuePolicy.from_config(db.priority_queue_policy[p])
                    if p in db.priority_queue_policy
                    else default_policy
                )
                for p in range(1, self.priority_levels + 1)
            }
        else:
            self.levels = {0: _Level(default_policy)}
        self._order = sorted(self.levels)  # 1 is the highest priority
        # inputs whose shapes must agree within a batch (variable dims, not ragged)
        self._equal_shape_inputs = [
            s.name for s in model.inputs.values() if s.has_variable_dims and not s.allow_ragged_batch
        ]
        # requests may differ in which inputs they carry only when some are optional
        self._optional_inputs = model.required_input_count < len(model.inputs)
        self._form_lock = asyncio.Lock()
        # preserve_ordering: responses released strictly in arrival order
        self._next_seq = 0
        self._next_release = 0
        self._held: dict[int, tuple | None] = {}

    # ------------------------------------------------------------------ enqueue
    @property
    def pending(self) -> int:
        return sum(len(level) for level in self.levels.values())

    def submit(self, request: InferenceRequest) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        if request.future is None:  # else the submitter brought its own (see InferenceRequest.future)
            request.future = loop.create_future()
        p = request.priority
        if self.priority_levels == 0:
            p = 0
        elif p == 0 or p > self.priority_levels:
            p = self.default_priority
        level = self.levels[p]
        if level.policy.max_queue_size and len(level) >= level.policy.max_queue_size:
            self.model.stats.record_failure(time.monotonic_ns() - request.arrival_ns, "REJECTED")
            request.future.set_exception(
                unavailable(f"[request id: {request.id or '<id_unknown>'}] Exceeds maximum queue size")
            )
            return request.future
        timeout_us = level.policy.timeout_us(request.timeout_us)
        request.deadline_ns = request.arrival_ns + timeout_us * 1000 if timeout_us else 0
        request.seq = self._next_seq
        self._next_seq += 1
        level.live.append(request)
        if request.deadline_ns:
            level.timed += 1
            # expire it on time even if no instance is free to run next_batch (Triton's
            # batcher rejects timed-out requests while it waits for a payload slot)
            delay_s = (request.deadline_ns - time.monotonic_ns()) / 1e9 + 0.001
            loop.call_later(max(0.0, delay_s), self._expire_now)
        self._wakeup.set()
        return request.future

    def _expire_now(self) -> None:
        self._expire(time.monotonic_ns())

    # ------------------------------------------------------------------ batch formation
    def _expire(self, now: int) -> int:
        """Apply queue timeouts; return the nearest future deadline (0 = none)."""
        nearest = 0
        for level in self.levels.values():
            if not level.timed:
                continue
            keep: collections.deque[InferenceRequest] = collections.deque()
            for r in level.live:
                if r.deadline_ns and r.deadline_ns <= now:
                    if level.policy.reject_on_timeout:
                        self._fail(r, unavailable("Request timeout expired"), "REJECTED")
                    else:
                        level.delayed.append(r)  # DELAY: behind the live ones, may starve
                    continue
                if r.deadline_ns and (nearest == 0 or r.deadline_ns < nearest):
                    nearest = r.deadline_ns
                keep.append(r)
            level.live = keep
            level.timed = sum(1 for r in keep if r.deadline_ns)
        return nearest

    def _drop_withdrawn(self) -> None:
        for level in self.levels.values():
            for q in (level.live, level.delayed):
                if any(r.future.done() for r in q):
                    live = [r for r in q if not r.future.done()]
                    for r in q:
                        if r.future.done():
                            self._withdrawn(r)
                    q.clear()
                    q.extend(live)
            level.timed = sum(1 for r in level.live if r.deadline_ns)

    def _shapes(self, r: InferenceRequest):
        return tuple(r.inputs[n].shape[1:] for n in self._equal_shape_inputs if n in r.inputs)

    def _walk(self):
        """The pending prefix Triton's batcher would consider, and whether it must send now.

        Returns (requests in order, rows, best prefix length (0 = none): the largest prefix
        at a preferred size, or the prefix before the walk passed the largest preferred size,
        send_now, the oldest arrival among them, whether it met a withdrawn request). A walk
        that met a withdrawn request is to be repeated once they are dropped.
        """
        picked: list[InferenceRequest] = []
        rows = 0
        best = 0
        send_now = False
        oldest = 0
        first = None
        equal_shapes = self._equal_shape_inputs
        optional = self._optional_inputs
        for p in self._order:
            for r in self.levels[p]:
                if r.future.done():
                    return picked, rows, best, send_now, oldest, True
                size = r.batch_size or 1
                if first is not None:
                    if rows + size > self.max_preferred and best == 0:
                        best = len(picked)  # past every preferred size: this prefix is "best"
                    if rows + size > self.max_batch_size:
                        send_now = True
                        break
                    if (equal_shapes and self._shapes(r) != self._shapes(first)) or (
                        optional and r.inputs.keys() != first.inputs.keys()
                    ):
                        send_now = True
                        break
                else:
                    first = r
                    oldest = r.arrival_ns
                picked.append(r)
                rows += size
                oldest = min(oldest, r.arrival_ns)
                if rows in self.preferred:
                    best = len(picked)
            else:
                continue
            break
        return picked, rows, best, send_now, oldest, False

    def _take(self, batch: list[InferenceRequest]) -> list[InferenceRequest]:
        for p in self._order:  # the common case: the head of the first non-empty level
            level = self.levels[p]
            if not level:
                continue
            live = level.live
            n = len(batch)
            if len(live) >= n and live[0] is batch[0] and live[n - 1] is batch[-1]:
                for _ in range(n):
                    live.popleft()
                if level.timed:
                    level.timed -= sum(1 for r in batch if r.deadline_ns)
                return batch
            break
        ids = {id(r) for r in batch}
        for level in self.levels.values():
            if not any(id(r) in ids for r in level):
                continue
            level.live = collections.deque(r for r in level.live if id(r) not in ids)
            level.delayed = collections.deque(r for r in level.delayed if id(r) not in ids)
            level.timed = sum(1 for r in level.live if r.deadline_ns)
        return batch

    async def next_batch(self, instance: ModelInstance) -> list[InferenceRequest]:
        # One instance forms a batch at a time; the others wait their turn, so a batch is
        # formed exactly when an instance is free (Triton's "instance available" trigger).
        async with self._form_lock:
            while True:
                now = time.monotonic_ns()
                nearest_deadline = self._expire(now)
                picked, rows, best, send_now, oldest, withdrawn = self._walk()
                if withdrawn:  # cancelled while queued: answered now, and the walk redone
                    self._drop_withdrawn()
                    continue
                if not picked:
                    if self._stopping:
                        return []
                    # nothing queued: a request or stop() sets the wakeup, and queue timeouts
                    # expire by their own timer (enqueue's call_later), so there is nothing to
                    # wake for; an idle wake every 0.5 s (as Triton's batcher thread does) cost
                    # an idle server with 8 batching models 1.5-2.7 % of a core (measured)
                    await self._sleep(None)
                    continue
                waited = now - oldest
                delay_exceeded = self.delay_ns != 0 and waited >= self.delay_ns
                if best and not delay_exceeded:
                    return self._take(picked[:best])
                if send_now or rows >= self.max_preferred or delay_exceeded or self.delay_ns == 0 or self._stopping:
                    return self._take(picked)
                wait_ns = self.delay_ns - waited
                if nearest_deadline:
                    wait_ns = min(wait_ns, max(1000, nearest_deadline - now))
                await self._sleep(wait_ns / 1e9)

    async def _sleep(self, seconds: float | None) -> None:
        """Sleep until a new request arrives or ``seconds`` pass (None: until a request or stop)."""
        await self._wakeup.wait(seconds)

    # ------------------------------------------------------------------ completion
    def _fail(self, request: InferenceRequest, error: InferenceError, reason: str) -> None:
        self.model.stats.record_failure(time.monotonic_ns() - request.arrival_ns, reason)
        self._complete(request, None, error, immediate=True)

    def _withdrawn(self, request: InferenceRequest) -> None:
        super()._withdrawn(request)
        self._complete(request, None, None, immediate=True)

    def _complete(self, request: InferenceRequest, result, error, immediate: bool = False) -> None:
        """Resolve, or with preserve_ordering hold until every earlier request is resolved.

        Requests that never executed (rejected, expired, withdrawn) are answered at once,
        as Triton does; they only stop holding up the ones behind them.
        """
        if not self.preserve_ordering:
            resolve(request, result, error)
            return
        if immediate:
            resolve(request, result, error)
            self._held[request.seq] = None  # resolved: a hole the in-order release skips
        else:
            self._held[request.seq] = (request, result, error)
        while self._next_release in self._held:
            entry = self._held.pop(self._next_release)
            if entry is not None:
                resolve(*entry)
            self._next_release += 1

    def queued(self) -> list[InferenceRequest]:
        return [r for level in self.levels.values() for r in level]

    async def stop(self, timeout: float | None = None) -> list[ModelInstance]:
        stuck = await super().stop(timeout)
        # anything still held (preserve_ordering) is released
        for seq in sorted(self._held):
            entry = self._held.pop(seq)
            if entry is not None:
                resolve(*entry)
        return stuck
