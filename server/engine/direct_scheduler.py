"""The direct scheduler: no dynamic batching, each request executes alone, in arrival order
(Triton without a ``dynamic_batching`` block)."""

from __future__ import annotations

import asyncio
import threading
import time

from ..errors import InferenceError, unavailable
from .instance import ModelInstance
from .request import InferenceRequest
from .scheduler import Scheduler, as_inference_error


class DirectScheduler(Scheduler):
    """No dynamic batching: each request executes alone, in arrival order.

    The instances' threads take requests from the queue themselves, one after another, as
    Triton's backends drain their request queues, and hand the outcomes back to the event
    loop in bursts (``_post``): under load a request costs no thread wake-up in either
    direction. With one hop each way per request (the base class's loop task), two thread
    wake-ups per request cost ~150 µs of CPU on a 2-core machine (bench_engine.py, ``simple``
    batch 1, 2 frontends x 32: 188 µs of engine CPU per request).

    Locking: ``_lock`` guards the queue, the idle count and the outcomes not yet handed back;
    the event loop only appends and swaps lists under it. A request withdrawn while queued
    (its future cancelled) is seen by the thread that pops it and never executes.
    """

    def __init__(self, model, instances: list[ModelInstance]):
        super().__init__(model, instances)
        self._lock = threading.Condition()
        self._idle = 0  # instance threads waiting for work
        self._outcomes: list[tuple] = []  # (request, result, timings, error, end_ns)
        self._running: dict[int, list[InferenceRequest]] = {}  # instance index -> its requests
        self._loop: asyncio.AbstractEventLoop | None = None
        self._workers: list[asyncio.Future] = []

    def start(self) -> None:
        self._loop = loop = asyncio.get_running_loop()
        # each instance thread runs _serve until stop(): one long call on its executor
        self._workers = [i.executor.run_async(loop, self._serve, i) for i in self.instances]

    def submit(self, request: InferenceRequest) -> asyncio.Future:
        loop = self._loop
        assert loop is not None  # started before any request reaches it
        if request.future is None:  # else the submitter brought its own (see InferenceRequest.future)
            request.future = loop.create_future()
        with self._lock:
            self._queue.append(request)
            if self._idle:
                self._lock.notify()
        return request.future

    # ------------------------------------------------------------------ instance threads
    def _serve(self, instance: ModelInstance) -> None:
        lock = self._lock
        queue = self._queue
        # requests this instance takes in one go (a backend in its own process: one round
        # trip for several; each still executes alone)
        carry = 1 if self.model.decoupled else max(1, getattr(instance.backend, "carries_requests", 1))
        while True:
            with lock:
                while not queue:
                    if self._stopping:
                        return
                    self._idle += 1
                    lock.wait()
                    self._idle -= 1
                request = queue.popleft()
                if request.future.done():  # withdrawn while queued (read-only across threads)
                    self._post_locked((request, _WITHDRAWN, None, None, 0))
                    continue
                batch = [request]
                # (a share of the queue only, when other instances wait for work too)
                limit = min(carry, 1 + len(queue) // (self._idle + 1)) if carry > 1 else 1
                while queue and len(batch) < limit:
                    more = queue.popleft()
                    if more.future.done():
                        self._post_locked((more, _WITHDRAWN, None, None, 0))
                    else:
                        batch.append(more)
                    del more
                self.executing += len(batch)
                instance.busy = True
                self._running[instance.index] = batch
            outcomes = self._run_taken(instance, batch)
            with lock:
                self.executing -= len(batch)
                instance.busy = False
                self._running.pop(instance.index, None)
                end = time.monotonic_ns()
                for i in range(len(outcomes)):  # (no loop variable left holding a request)
                    self._post_locked((*outcomes[i], end))
            # not held while this thread waits for the next request: an answered batch (its
            # inputs, outputs and encoded response: 1 GiB for 53 rows of a 512x512 network)
            # stayed mapped as long as its instance idled
            del request, batch, outcomes

    @staticmethod
    def _run_taken(instance: ModelInstance, batch: list[InferenceRequest]) -> list[tuple]:
        """Run the requests an instance took: (request, result, timings, error) for each."""
        if len(batch) == 1:
            request = batch[0]
            request.exec_start_ns = time.monotonic_ns()
            try:
                results, timings = instance.run_batch(batch)
                return [(request, results[0], timings, None)]
            except Exception as e:
                return [(request, None, None, as_inference_error(e))]
        start = time.monotonic_ns()
        for r in batch:
            r.exec_start_ns = start
        return instance.run_alone(batch)

    def _post_locked(self, outcome: tuple) -> None:
        """Queue an outcome for the event loop; wake it only for the first of a burst."""
        self._outcomes.append(outcome)
        if len(self._outcomes) == 1:
            assert self._loop is not None
            try:
                self._loop.call_soon_threadsafe(self._settle_outcomes)
            except RuntimeError:  # the loop is closed (shutdown): nobody waits
                pass

    def _settle_outcomes(self) -> None:
        with self._lock:
            outcomes, self._outcomes = self._outcomes, []
        # _settle for the whole burst: the statistics updated once per batch size rather than
        # twice per request, then every answer (2-3 µs less engine CPU per `simple` request).
        stats = self.model.stats
        executions: dict[int, list[int]] = {}  # batch size -> [count, input, infer, output ns]
        succeeded = []
        queue_ns = []
        rows = total_ns = input_ns = infer_ns = output_ns = 0
        for request, result, timings, error, end in outcomes:
            if result is _WITHDRAWN:
                self._withdrawn(request)
                continue
            if error is not None:
                self._fail_batch([request], error, end)
                continue
            size = request.batch_size
            if request.trace is not None:
                request.trace.compute = (timings.compute_input_ns, timings.compute_infer_ns, timings.compute_output_ns)
            sums = executions.get(size)
            if sums is None:
                sums = executions[size] = [0, 0, 0, 0]
            sums[0] += 1
            sums[1] += timings.compute_input_ns
            sums[2] += timings.compute_infer_ns
            sums[3] += timings.compute_output_ns
            if isinstance(result, InferenceError):  # its outputs could not be encoded
                stats.record_failure(end - request.arrival_ns, "OTHER")
                self._complete(request, None, result)
                continue
            rows += size
            total_ns += end - request.arrival_ns
            queue_ns.append(request.exec_start_ns - request.arrival_ns)
            request.timings = timings
            input_ns += timings.compute_input_ns
            infer_ns += timings.compute_infer_ns
            output_ns += timings.compute_output_ns
            succeeded.append((request, result))
        for size, (count, i_ns, c_ns, o_ns) in executions.items():
            stats.record_executions(size, count, i_ns, c_ns, o_ns)
        if succeeded:
            stats.record_successes_summed(rows, total_ns, queue_ns, input_ns, infer_ns, output_ns)
            if stats.latencies is not None:
                self._observe_latencies(stats.latencies, outcomes)
        complete = self._complete
        for request, result in succeeded:  # answered once the statistics count them
            complete(request, result, None)

    @staticmethod
    def _observe_latencies(latencies, outcomes) -> None:
        """--metrics-config distributions of a burst's successful requests (off: not called)."""
        done = [
            (request, timings, end)
            for request, result, timings, error, end in outcomes
            if error is None and result is not _WITHDRAWN and not isinstance(result, InferenceError)
        ]
        latencies.observe(
            [end - r.arrival_ns for r, _, end in done],
            [r.exec_start_ns - r.arrival_ns for r, _, _ in done],
            [t.compute_input_ns for _, t, _ in done],
            [t.compute_infer_ns for _, t, _ in done],
            [t.compute_output_ns for _, t, _ in done],
        )
        for r, _, _ in done:
            if r.first_response_ns:
                latencies.observe_first_response(r.first_response_ns - r.arrival_ns)

    # ------------------------------------------------------------------ stop
    async def stop(self, timeout: float | None = None) -> list[ModelInstance]:
        self._stopping = True
        self._stop_timeout = timeout or 0.0
        with self._lock:
            self._lock.notify_all()
        stuck: list[ModelInstance] = []
        if self._workers:
            _, pending = await asyncio.wait(self._workers, timeout=timeout)
            if pending:
                self._settle_outcomes()  # what finished before the timeout
                with self._lock:
                    running = dict(self._running)
                    queued = list(self._queue)
                    self._queue.clear()
                end = time.monotonic_ns()
                for instance in self.instances:
                    requests = running.get(instance.index)
                    if requests:
                        stuck.append(instance)
                        self._fail_batch(requests, unavailable(self._abandon_text(instance)), end)
                self._fail_unloaded(queued, end)
        await self._release_instances(stuck)
        return stuck


_WITHDRAWN = object()  # an outcome: the request was cancelled while it waited in the queue
