"""Ensembles (``platform: "ensemble"``): a pipeline of steps run on other models, as Triton runs it.

An ensemble has no backend and no instances. Its scheduler takes the ensemble's request and
runs each step as a request *submitted to the composing model's own scheduler*, so that
model's dynamic batcher (or sequence batcher) treats the step like any other request: steps
of concurrent ensemble requests batch together there. Tensors pass between steps as the
numpy arrays the composing model returned (a batched model's slice is a view of its batch
output): nothing is copied or serialized inside the pipeline, only the ensemble's outputs are
encoded for the wire at the end. A step starts as soon as all its inputs exist, so
independent branches run concurrently.

Its steps (``Step``) and their load-time checks are ensemble_plan.py's; the repository
resolves the dependencies (it loads composing models, and retires an ensemble whose composing
model goes).

Statistics as Triton reports them (core ensemble_scheduler.cc): the ensemble's queue time is
until its first step is submitted, its compute durations are the sums of its steps' (each
step's execution durations), one execution per successful request; each composing model
counts its step requests as ordinary requests.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np

from ..errors import InferenceError, format_shape, internal, invalid_argument, unavailable
from .ensemble_plan import Step, dims_match
from .request import InferenceRequest, RequestedOutput
from .scheduler import Scheduler, resolve
from .statistics import BatchTimings

# outputs at least this large are encoded off the event loop (a copy into the reply)
_ENCODE_INLINE_BYTES = 1 << 16


# ---------------------------------------------------------------------------- running


def _step_outputs(request: InferenceRequest, slices: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A step's ``encode``: its output slices as they are (views), for the next steps."""
    return slices


def _shape_error(key: str, model, shape: tuple[int, ...]) -> InferenceError:
    expected = ([-1] if model.max_batch_size > 0 else []) + list(model.inputs[key].dims)
    return invalid_argument(
        f"unexpected shape for input '{key}' for model '{model.name}'. Expected {format_shape(expected)}, "
        f"got {format_shape(shape)}. "
    )


class EnsembleScheduler(Scheduler):
    """Runs an ensemble's requests step by step on the composing models' schedulers.

    A ``Scheduler`` to the rest of the engine, with no instance and nothing in its own queue
    (``pending`` is 0: the steps wait in their models' queues): each request is one task on
    the event loop that submits its steps and waits for them. ``lookup(name,
    version)`` resolves a composing model per request (the repository's ``get``), so a
    composing model reloaded meanwhile serves the next request, as in Triton.
    """

    def __init__(self, model, steps: list[Step], lookup):
        super().__init__(model, [])
        self.steps = steps
        self._lookup = lookup
        self._requests: set[asyncio.Task] = set()
        # which steps read each ensemble tensor, and how many distinct tensors each step reads
        self._readers: dict[str, list[Step]] = {}
        self._needs: list[int] = []
        for step in steps:
            needed = set(step.input_map.values())
            self._needs.append(len(needed))
            for tensor in needed:
                self._readers.setdefault(tensor, []).append(step)
        # per composing version (its uid): the RequestedOutputs a step asks it for
        self._outputs: dict[tuple[int, int], list[RequestedOutput]] = {}

    def start(self) -> None:
        pass  # no instance to run

    def submit(self, request: InferenceRequest) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        if request.future is None:
            request.future = loop.create_future()
        if self._stopping:
            resolve(
                request,
                None,
                unavailable(f"model '{self.model.name}' version {self.model.version} was unloaded"),
            )
            return request.future
        task = loop.create_task(self._run(request))
        self._requests.add(task)
        task.add_done_callback(self._requests.discard)
        future = request.future
        if isinstance(future, asyncio.Future):
            # the caller cancelled (client cancel, deadline): withdraw the steps
            future.add_done_callback(lambda f: task.cancel() if f.cancelled() else None)
        return future

    async def stop(self, timeout: float | None = None) -> list:
        """Let the requests in flight finish (up to ``timeout``); those still running then
        fail with UNAVAILABLE. An ensemble has no instance to abandon."""
        self._stopping = True
        if self._requests:
            _, pending = await asyncio.wait(set(self._requests), timeout=timeout)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
        return []

    # ------------------------------------------------------------------ one request
    def _launch(self, step: Step, request: InferenceRequest, tensors: dict[str, np.ndarray]):
        """Submit one step to its composing model's scheduler: (the step request, its future)."""
        model = self._lookup(step.model_name, step.version)
        inputs = {key: tensors[tensor] for key, tensor in step.input_map.items()}
        batching = model.max_batch_size > 0
        batch_size = 1
        for key, array in inputs.items():
            # shapes the configs leave open (-1) are checked here, as Triton checks each
            # request a composing model gets
            dims = model.inputs[key].dims
            got = array.shape[1:] if batching else array.shape
            if (batching and array.ndim == 0) or not dims_match(tuple(dims), got) or any(d < 0 for d in got):
                raise _shape_error(key, model, array.shape)
            if batching:
                batch_size = array.shape[0]
        if batching and batch_size > model.max_batch_size:
            raise invalid_argument(f"inference request batch-size must be <= {model.max_batch_size} for '{model.name}'")
        outputs = self._outputs.get((step.position, model.uid))
        if outputs is None:
            if len(self._outputs) >= 1024:  # composing versions come and go: keep it bounded
                self._outputs.clear()
            outputs = self._outputs[(step.position, model.uid)] = [
                RequestedOutput(model.outputs[key]) for key in step.output_map
            ]
        sreq = InferenceRequest(
            model,
            inputs,
            outputs,
            batch_size,
            request.id,
            request.parameters,
            request.priority,
            request.timeout_us,
            time.monotonic_ns(),
        )
        sreq.encode = _step_outputs
        return sreq, model.scheduler.submit(sreq)

    async def _run(self, request: InferenceRequest) -> None:
        model = self.model
        stats = model.stats
        tensors: dict[str, np.ndarray] = dict(request.inputs)
        waiting = list(self._needs)
        running: dict = {}  # step future -> (step, step request)
        compute = [0, 0, 0]  # the steps' input, infer, output durations summed
        start = time.monotonic_ns()
        error: InferenceError | None = None
        self.executing += 1
        try:
            ready = []
            for tensor in request.inputs:
                for step in self._readers.get(tensor, ()):
                    waiting[step.position] -= 1
                    if waiting[step.position] == 0:
                        ready.append(step)
            for step in ready:
                sreq, fut = self._launch(step, request, tensors)
                running[fut] = (step, sreq)
            while running:
                if len(running) == 1:  # a chain of steps: no asyncio.wait machinery per step
                    only = next(iter(running))
                    try:
                        await only
                    except Exception:
                        pass  # raised again by result() below
                    done = {only}
                else:
                    done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for fut in done:
                    step, sreq = running.pop(fut)
                    result = fut.result()  # a failed step fails the ensemble's request
                    t = sreq.timings
                    if t is not None:
                        compute[0] += t.compute_input_ns
                        compute[1] += t.compute_infer_ns
                        compute[2] += t.compute_output_ns
                    for key, tensor in step.output_map.items():
                        tensors[tensor] = result[key]
                        for reader in self._readers.get(tensor, ()):
                            waiting[reader.position] -= 1
                            if waiting[reader.position] == 0:
                                rreq, rfut = self._launch(reader, request, tensors)
                                running[rfut] = (reader, rreq)
                if request.future.done():  # withdrawn by its caller meanwhile
                    return
            if any(o.spec.name not in tensors for o in request.outputs):
                # an optional input left out: the steps that need it never ran (Triton's text)
                raise invalid_argument(
                    "unexpected deadlock, at least one output is not set while no more ensemble steps can be made"
                )
            outputs = {o.spec.name: tensors[o.spec.name] for o in request.outputs}
            if sum(a.nbytes for a in outputs.values()) < _ENCODE_INLINE_BYTES:
                encoded = request.encode(request, outputs)
            else:
                loop = asyncio.get_running_loop()
                encoded = await loop.run_in_executor(None, request.encode, request, outputs)
        except asyncio.CancelledError:
            for fut in running:
                fut.cancel()
            if not request.future.done():
                # stop() gave up on it (the ensemble was unloaded)
                error = unavailable(f"model '{model.name}' version {model.version} was unloaded")
                stats.record_failure(time.monotonic_ns() - request.arrival_ns, "OTHER")
                resolve(request, None, self._in_ensemble(error))
            else:
                stats.record_failure(time.monotonic_ns() - request.arrival_ns, "CANCELED")
            raise
        except Exception as e:
            error = e if isinstance(e, InferenceError) else internal(str(e) or type(e).__name__)
        finally:
            self.executing -= 1
        end = time.monotonic_ns()
        if error is not None:
            for fut in running:
                fut.cancel()  # steps still queued are withdrawn; running ones finish unseen
            # Triton 2.51 counts a failed ensemble request twice (its FinishEnsemble reports
            # the failure, then RespondIfError again): measured against it, kept so that
            # the statistics and failure metrics read the same
            stats.record_failure(end - request.arrival_ns, "OTHER")
            stats.record_failure(end - request.arrival_ns, "OTHER")
            resolve(request, None, self._in_ensemble(error))
            return
        timings = BatchTimings(*compute)
        stats.record_execution(max(1, request.batch_size), timings)
        stats.record_successes(request.batch_size, end - request.arrival_ns, [start - request.arrival_ns], timings)
        if stats.latencies is not None:  # --metrics-config summaries and histograms
            stats.latencies.observe([end - request.arrival_ns], [start - request.arrival_ns], *([n] for n in compute))
        request.timings = timings
        if request.trace is not None:  # traced: the ensemble's compute span is its steps'
            request.exec_start_ns = start
            request.trace.compute = (compute[0], compute[1], compute[2])
        resolve(request, encoded, None)

    def _in_ensemble(self, error: InferenceError) -> InferenceError:
        """Triton names the ensemble in a failed step's error, keeping the step's status."""
        return InferenceError(error.status, f"in ensemble '{self.model.name}', {error.message}")
