"""Scheduling: a model version's queue feeding its instances.

``Scheduler`` owns the request queue and one asyncio task per instance; whenever an instance
is free it asks ``next_batch()`` for work and runs it on the instance's thread
(``ModelInstance.run_batch``, instance.py). The base class hands out one request at a time,
as Triton does without dynamic batching; a batching policy only has to override
``next_batch`` (and ``submit`` if it keeps its own queues). The policies are the direct
scheduler (direct_scheduler.py: the default, its instance threads drain the queue
themselves), the dynamic batcher (dynamic_batcher.py), the sequence batcher
(sequence_batcher.py) and the ensemble scheduler (ensemble_scheduler.py), each in its module.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time

from ..errors import InferenceError, internal, unavailable
from .instance import ModelInstance
from .request import InferenceRequest
from .wakeup import Wakeup

log = logging.getLogger("fpgaserve.scheduler")


def as_inference_error(e: BaseException) -> InferenceError:
    """What a failed ``run_batch`` hands its requests (it raises InferenceError itself; anything
    else is a bug of ours, reported as INTERNAL with a plain text)."""
    return e if isinstance(e, InferenceError) else internal(str(e) or type(e).__name__)


def resolve(request: InferenceRequest, result, error) -> None:
    """Hand a request its result or error, unless it already has one (e.g. it was cancelled)."""
    if request.future.done():
        return
    if request.trace is not None:
        request.trace.tracer.finish(request, error)
    if error is not None:
        request.future.set_exception(error)
    else:
        request.future.set_result(result)


class Scheduler:
    """Queue + one task per instance. Subclasses choose how batches are formed."""

    def __init__(self, model, instances: list[ModelInstance]):
        self.model = model
        self.instances = instances
        self._queue: collections.deque[InferenceRequest] = collections.deque()
        self._wakeup = Wakeup()
        self._tasks: list[asyncio.Task] = []
        self._stopping = False
        self._stop_timeout = 0.0
        self.executing = 0  # requests currently inside an instance

    @property
    def pending(self) -> int:
        return len(self._queue)

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._instance_loop(i)) for i in self.instances]

    def submit(self, request: InferenceRequest) -> asyncio.Future:
        """Enqueue; the future resolves to list[EncodedOutput] or raises InferenceError.

        Cancelling the future (the RPC was cancelled or its deadline passed) withdraws the
        request: a cancelled request still in the queue never executes.
        """
        if request.future is None:  # else the submitter brought its own (see InferenceRequest.future)
            request.future = asyncio.get_running_loop().create_future()
        self._queue.append(request)
        self._wakeup.set()
        return request.future

    async def next_batch(self, instance: ModelInstance) -> list[InferenceRequest]:
        """One live request (Triton without dynamic_batching: each request runs alone)."""
        while True:
            while self._queue:
                request = self._queue.popleft()
                if not request.future.done():
                    return [request]
                self._withdrawn(request)
            if self._stopping:
                return []
            await self._wakeup.wait()

    def _withdrawn(self, request: InferenceRequest) -> None:
        """A request cancelled while queued: never executed, counted as a cancellation."""
        self.model.stats.record_failure(time.monotonic_ns() - request.arrival_ns, "CANCELED")

    async def _instance_loop(self, instance: ModelInstance) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self.next_batch(instance)
            if not batch:
                return
            try:
                await self._execute(loop, instance, batch)
            except Exception:  # never let one batch kill the instance
                log.exception("unexpected error executing a batch of %s", self.model.name)

    async def _execute(self, loop, instance: ModelInstance, batch: list[InferenceRequest]) -> None:
        start = time.monotonic_ns()
        for r in batch:
            r.exec_start_ns = start
        self.executing += len(batch)
        instance.busy = True
        try:
            results, timings = await instance.executor.run_async(loop, instance.run_batch, batch)
        except asyncio.CancelledError:
            # stop() gave up on this instance (execute() hung past the unload timeout)
            self._fail_batch(batch, unavailable(self._abandon_text(instance)), time.monotonic_ns())
            raise
        except Exception as e:
            self._fail_batch(batch, as_inference_error(e), time.monotonic_ns())
            return
        finally:
            self.executing -= len(batch)
            instance.busy = False
        self._settle(batch, results, timings, time.monotonic_ns())

    def _settle(self, batch: list[InferenceRequest], results, timings, end: int) -> None:
        """Statistics and answers for an executed batch (``run_batch``'s results)."""
        stats = self.model.stats
        rows = total_ns = 0
        queue_ns = []
        succeeded = []
        for r, result in zip(batch, results):
            if r.padding:
                continue
            if isinstance(result, InferenceError):
                stats.record_failure(end - r.arrival_ns, "OTHER")
                self._complete(r, None, result)
            else:
                rows += r.batch_size
                total_ns += end - r.arrival_ns
                queue_ns.append(r.exec_start_ns - r.arrival_ns)
                r.timings = timings
                succeeded.append((r, result))
            if r.trace is not None:
                r.trace.compute = (timings.compute_input_ns, timings.compute_infer_ns, timings.compute_output_ns)
        stats.record_execution(sum(r.batch_size for r in batch), timings)
        stats.record_successes(rows, total_ns, queue_ns, timings)
        if stats.latencies is not None and succeeded:
            n = len(succeeded)
            stats.latencies.observe(
                [end - r.arrival_ns for r, _ in succeeded],
                queue_ns,
                [timings.compute_input_ns] * n,
                [timings.compute_infer_ns] * n,
                [timings.compute_output_ns] * n,
            )
            for r, _ in succeeded:
                if r.first_response_ns:
                    stats.latencies.observe_first_response(r.first_response_ns - r.arrival_ns)
        complete = self._complete
        for r, result in succeeded:  # answered once the statistics count them
            complete(r, result, None)

    def _fail_batch(self, batch: list[InferenceRequest], error: InferenceError, end: int) -> None:
        """A batch whose execution failed as a whole (the backend raised, or was abandoned)."""
        stats = self.model.stats
        for r in batch:
            if not r.padding:
                stats.record_failure(end - r.arrival_ns, "BACKEND")
                self._complete(r, None, error)

    def _complete(self, request: InferenceRequest, result, error) -> None:
        """Release a request's outcome to its caller (a batcher may hold it for ordering)."""
        resolve(request, result, error)

    def queued(self) -> list[InferenceRequest]:
        """Requests waiting in this scheduler's queues (batching policies keep their own)."""
        return list(self._queue)

    def _unloaded_text(self) -> str:
        return (
            f"model '{self.model.name}' version {self.model.version} was unloaded before "
            "the request could execute (its instances were stuck in execute())"
        )

    def _abandon_text(self, instance: ModelInstance) -> str:
        return (
            f"model '{self.model.name}' version {self.model.version} was unloaded while instance "
            f"{instance.index} was still inside execute() after {self._stop_timeout:g} s; the request "
            "did not complete"
        )

    async def stop(self, timeout: float | None = None) -> list[ModelInstance]:
        """Finish queued and executing work, then release the instances.

        With a ``timeout``, instances still inside execute() after it are abandoned: their
        batch and everything still queued fail with UNAVAILABLE, their threads are left to
        finish (or not) on their own, and they are returned for the caller to report.
        """
        self._stopping = True
        self._stop_timeout = timeout or 0.0
        self._wakeup.set()
        stuck: list[ModelInstance] = []
        if self._tasks:
            _, pending = await asyncio.wait(self._tasks, timeout=timeout)
            if pending:
                stuck = [i for i, t in zip(self.instances, self._tasks) if t in pending and i.busy]
                for t in pending:
                    t.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
                self._fail_unloaded(self.queued(), time.monotonic_ns())
        await self._release_instances(stuck)
        return stuck

    def _fail_unloaded(self, queued: list[InferenceRequest], end: int) -> None:
        """Requests still queued when ``stop`` gave up on stuck instances: UNAVAILABLE."""
        for r in queued:
            if not r.future.done():
                self.model.stats.record_failure(end - r.arrival_ns, "OTHER")
                resolve(r, None, unavailable(self._unloaded_text()))

    async def _release_instances(self, stuck: list[ModelInstance]) -> None:
        """Close every instance, leaving the ``stuck`` ones (inside execute()) behind."""
        loop = asyncio.get_running_loop()
        closing = []
        for instance in self.instances:
            if instance in stuck:
                instance.abandon()
            else:  # all at once: each may wait for its process's finalize
                closing.append(loop.run_in_executor(None, instance.close))
        await asyncio.gather(*closing)
