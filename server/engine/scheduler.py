"""Scheduling: a model version's queue feeding its instances.

Each ``ModelInstance`` is one backend object with its *own* single-thread executor: blocking
backend work (ONNX Runtime, hls4ml C-simulation, a PYNQ kernel call) runs off the event loop,
one worker per instance, so an instance is never entered concurrently.

``Scheduler`` owns the request queue and one asyncio task per instance; whenever an instance
is free it asks ``next_batch()`` for work. ``DirectScheduler`` (no ``dynamic_batching`` block)
hands out one request at a time, as Triton does; a batching policy only has to override
``next_batch`` (and ``submit`` if it keeps its own queues).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import logging
import math
import queue
import threading
import time
from typing import cast

import numpy as np

from fpgaserve.backends import Backend, BackendRequest, DeviceUnavailableError
from fpgaserve.backends.base import ExecutionFailed

from .. import model_config as mc
from ..errors import InferenceError, internal, unavailable
from .request import EncodedOutput, InferenceRequest, RequestedOutput
from .statistics import BatchTimings

log = logging.getLogger("fpgaserve.scheduler")


def _set_result(fut: asyncio.Future, value) -> None:
    if not fut.done():
        fut.set_result(value)


def _set_exception(fut: asyncio.Future, exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)


class _PreciseTimer:
    """Sub-millisecond timeouts for the event loop.

    asyncio's ``call_later`` sleeps in epoll, whose timeout is rounded *up* to whole
    milliseconds, so a 250 µs ``max_queue_delay`` would last 1-2 ms (measured: batch 1 at
    concurrency 1 fell from ~1400 to ~540 infer/s). Short waits are timed here instead, by
    one daemon thread on a condition variable (µs resolution), which wakes the loop with
    ``call_soon_threadsafe``.
    """

    _instance: _PreciseTimer | None = None

    def __init__(self):
        self._heap: list[tuple[float, int, asyncio.AbstractEventLoop, asyncio.Future]] = []
        self._cond = threading.Condition()
        self._seq = 0
        threading.Thread(target=self._run, name="fpgaserve-timer", daemon=True).start()

    @classmethod
    def get(cls) -> _PreciseTimer:
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    def wake_at(self, deadline: float, loop: asyncio.AbstractEventLoop, fut: asyncio.Future) -> None:
        import heapq

        with self._cond:
            self._seq += 1
            heapq.heappush(self._heap, (deadline, self._seq, loop, fut))
            self._cond.notify()

    def _run(self) -> None:
        import heapq

        while True:
            with self._cond:
                while not self._heap:
                    self._cond.wait()
                deadline, _, loop, fut = self._heap[0]
                delay = deadline - time.monotonic()
                if delay > 0:
                    self._cond.wait(delay)
                    continue
                heapq.heappop(self._heap)
            if not fut.done():
                try:
                    loop.call_soon_threadsafe(_set_result, fut, None)
                except RuntimeError:  # loop closed
                    pass


_PRECISE_BELOW_S = 0.002  # waits shorter than this use _PreciseTimer


def model_failure(model: str, e: BaseException) -> InferenceError:
    """The error a batch fails with when model code raised ``e``.

    ``BaseException`` too: model code may raise SystemExit or KeyboardInterrupt (or call
    sys.exit); that fails its batch like any other exception and never reaches the server's
    own control flow."""
    if isinstance(e, InferenceError):
        return e
    if isinstance(e, DeviceUnavailableError):
        return unavailable(str(e))
    if isinstance(e, Exception):
        return internal(str(e) or type(e).__name__)
    detail = str(e)
    return internal(f"model '{model}' raised {type(e).__name__}" + (f": {detail}" if detail else ""))


# Instances abandoned inside execute() (a model that hung past --model-unload-timeout-secs);
# /metrics reports how many of their threads are still running.
_ABANDONED: list[ModelInstance] = []


def abandoned_instances_running() -> int:
    _ABANDONED[:] = [i for i in _ABANDONED if i.executor.alive]
    return len(_ABANDONED)


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


class Wakeup:
    """Wake whoever waits for new work; cheaper than ``asyncio.Event`` + ``wait_for``.

    ``wait_for`` wraps the wait in a new task with its own timeout handle on every call,
    which on the batch-1 hot path is a measurable share of the loop's time; here a wait is
    one future plus (with a timeout) one timer handle.
    """

    __slots__ = ("_waiters",)

    def __init__(self):
        self._waiters: list[asyncio.Future] = []

    def set(self) -> None:
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for f in waiters:
                if not f.done():
                    f.set_result(None)

    async def wait(self, timeout: float | None = None) -> None:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._waiters.append(fut)
        handle = None
        if timeout is not None:
            if timeout < _PRECISE_BELOW_S:
                _PreciseTimer.get().wake_at(time.monotonic() + timeout, loop, fut)
            else:
                handle = loop.call_later(timeout, _set_result, fut, None)
        try:
            await fut
        finally:
            if handle is not None:
                handle.cancel()
            if fut in self._waiters:
                self._waiters.remove(fut)


class InstanceThread(concurrent.futures.Executor):
    """The one thread an instance's backend lives and runs on.

    An ``Executor`` (so loading and closing go through ``run_in_executor``), plus
    ``run_async``: the per-batch hop from the event loop, which skips the concurrent.futures
    machinery (a queue put there, one ``call_soon_threadsafe`` back: ~30 % cheaper, measured).
    """

    def __init__(self, name: str):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            fn, args, done = item
            try:
                value, exc = fn(*args), None
            except Exception as e:  # delivered to the caller, never kills the thread
                value, exc = None, e
            except BaseException as e:
                # SystemExit/KeyboardInterrupt from model code: delivered as an ordinary
                # error, so it cannot unwind the event loop that receives it
                value, exc = None, internal(f"{type(e).__name__} raised in {self._thread.name}: {e}")
            try:
                done(value, exc)
            except RuntimeError:  # the event loop is already closed (shutdown): nobody waits
                pass
            # not held until the next item: a batch's result (its outputs) would stay mapped as
            # long as the instance idles (see DirectScheduler._serve for what that was)
            del item, fn, args, done, value, exc

    def run_async(self, loop: asyncio.AbstractEventLoop, fn, *args) -> asyncio.Future:
        fut = loop.create_future()

        def done(value, exc):
            if exc is None:
                loop.call_soon_threadsafe(_set_result, fut, value)
            else:
                loop.call_soon_threadsafe(_set_exception, fut, exc)

        self._queue.put((fn, args, done))
        return fut

    def submit(self, fn, /, *args, **kwargs) -> concurrent.futures.Future:
        cf: concurrent.futures.Future = concurrent.futures.Future()

        def done(value, exc):
            if exc is None:
                cf.set_result(value)
            else:
                cf.set_exception(exc)

        self._queue.put((lambda: fn(*args, **kwargs), (), done))
        return cf

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._queue.put(None)
        if wait and threading.current_thread() is not self._thread:
            self._thread.join()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def abandon(self, cleanup) -> None:
        """Stop waiting for this thread: if its stuck call ever returns, it runs ``cleanup``
        and exits (nobody waits for either)."""
        self._queue.put((cleanup, (), lambda value, exc: None))
        self._queue.put(None)


def _batch_input_specs(config) -> list[tuple[str, str, np.dtype, str]]:
    """(target name, kind, dtype, source input) for each ``batch_input`` of the config."""
    from fpgaserve.protos import inference as pb

    from .. import datatypes

    specs = []
    for bi in config.batch_input:
        kind = pb.BatchInput.Kind.Name(bi.kind)
        dtype = datatypes.BY_CONFIG[pb.DataType.Name(bi.data_type or pb.DataType.Value("TYPE_INT32"))].dtype
        for target in bi.target_name:
            specs.append((target, kind, dtype, bi.source_input[0] if bi.source_input else ""))
    return specs


def _batch_input(kind: str, dtype: np.dtype, sources: list[tuple[int, ...]]) -> np.ndarray:
    """Triton's batch_input kinds (ragged_batching.md), one entry per request of the batch,
    from each request's source input shape (as the backend sees it: reshaped)."""
    counts = np.array([math.prod(shape) for shape in sources], dtype=np.int64)
    if kind == "BATCH_ELEMENT_COUNT":
        return counts.astype(dtype)
    if kind == "BATCH_ACCUMULATED_ELEMENT_COUNT":
        return np.cumsum(counts).astype(dtype)
    if kind == "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO":
        return np.concatenate([[0], np.cumsum(counts)]).astype(dtype)
    if kind == "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE":
        return np.zeros(int(counts.max()) if counts.size else 0, dtype=dtype)
    shapes = np.array([shape[1:] for shape in sources], dtype=np.int64)  # BATCH_ITEM_SHAPE(_FLATTEN)
    return (shapes.reshape(-1) if kind.endswith("FLATTEN") else shapes).astype(dtype)


def backend_request(request: InferenceRequest, inputs: dict[str, np.ndarray] | None = None) -> BackendRequest:
    """A request as a request-level backend sees it (no wire, no engine state); ``inputs``:
    the request's inputs as the backend sees them (given the config's reshapes), if not as sent."""
    parameters = request.parameters
    flags = 0
    correlation: int | str = 0
    if parameters:
        flags = (1 if parameters.get("sequence_start") else 0) | (2 if parameters.get("sequence_end") else 0)
        correlation = parameters.get("sequence_id", 0)
    return BackendRequest(
        request.inputs if inputs is None else inputs,
        tuple(o.spec.name for o in request.outputs),
        parameters,
        request.id,
        flags,
        correlation,
        # (read from the instance's thread: a cancelled future never becomes un-cancelled)
        request.future.cancelled if request.future is not None else None,
    )


class ModelInstance:
    def __init__(self, model, backend: Backend | None, index: int):
        self.model = model
        # None until the repository builds the backend on this instance's own thread
        self.backend = cast(Backend, backend)
        self.index = index
        # inputs a batching model receives flattened to 1-D (see run_batch)
        self.ragged_inputs = frozenset(
            s.name for s in model.inputs.values() if s.allow_ragged_batch and model.max_batch_size > 0
        )
        self.batch_inputs = _batch_input_specs(model.config)
        # batch_output targets: output -> the input whose per-request shape it is scattered with
        self.batch_outputs = mc.batch_output_sources(model.config)
        # reshape (model_config.proto): the backend sees reshape.shape where clients see dims.
        # A ragged input reaches the backend flattened, so there is nothing to reshape.
        self._input_reshapes = {
            s.name: (s.dims, s.reshape)
            for s in model.inputs.values()
            if s.reshape is not None and s.name not in self.ragged_inputs
        }
        # every reshaped input, ragged ones too: the shape each request's input has for the
        # backend, which batch_input item shapes and batch_output scatter use (as Triton's do)
        self._request_reshapes = {s.name: (s.dims, s.reshape) for s in model.inputs.values() if s.reshape is not None}
        self._output_reshapes = {
            s.name: (s.reshape, s.dims)
            for s in model.outputs.values()
            if s.reshape is not None and s.name not in self.batch_outputs
        }
        self.executor = InstanceThread(f"{model.name}-{index}")
        self.busy = False  # inside run_batch (set and read on the event loop)
        # what an output must look like to skip the full check (_check_outputs): numeric, the
        # declared dtype, and its shape fixed by the configuration (batch dimension apart),
        # that is the reshape's shape where it has one: the backend produces that
        batched = model.max_batch_size > 0
        self._exact_outputs = {
            s.name: (s.datatype.dtype, s.backend_dims, int(batched), len(s.backend_dims) + int(batched))
            for s in model.outputs.values()
            if s.datatype.wire != "BYTES"
            and not s.is_shape_tensor
            and all(d >= 0 for d in s.backend_dims)
            and s.name not in self.batch_outputs
        }

    def _reshaped(self, arrays: dict[str, np.ndarray], reshapes) -> dict[str, np.ndarray]:
        """``arrays`` with each tensor of ``reshapes`` (name -> (its dims now, the dims wanted))
        given the wanted dims, the batch dimension kept: views on the same elements wherever
        the layout allows (request inputs and joined batches are contiguous: never a copy).
        A new dict: the request's own stays as sent."""
        if not reshapes:
            return arrays
        out = dict(arrays)
        lead = 1 if self.model.max_batch_size > 0 else 0
        for name, (source, target) in reshapes.items():
            array = out.get(name)
            if array is None:
                continue
            shape = array.shape[:lead] + mc.map_variable_dims(array.shape[lead:], source, target)
            out[name] = array.reshape(shape)
        return out

    def _backend_shape(self, name: str, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The shape a request's input ``name`` of ``shape`` has for the backend."""
        reshape = self._request_reshapes.get(name)
        if reshape is None:
            return shape
        lead = 1 if self.model.max_batch_size > 0 else 0
        return shape[:lead] + mc.map_variable_dims(shape[lead:], *reshape)

    def _scatter(self, array: np.ndarray, name: str, batch: list[InferenceRequest]) -> list[np.ndarray]:
        """batch_output BATCH_SCATTER_WITH_INPUT_SHAPE: the backend's one tensor for the whole
        batch, read as the requests' elements one after another, each request's part shaped as
        its source input (batch dimension included), as Triton's backends scatter it."""
        source = self.batch_outputs[name]
        shapes = [self._backend_shape(source, r.inputs[source].shape) if source in r.inputs else (0,) for r in batch]
        counts = [math.prod(shape) for shape in shapes]
        if array.size != sum(counts):
            raise internal(
                f"output '{name}' of model '{self.model.name}' has {array.size} elements, but its batch_output "
                f"scatters {sum(counts)} (the elements of input '{source}' in the batch)"
            )
        flat = array.reshape(-1)
        parts = []
        offset = 0
        for shape, count in zip(shapes, counts):
            parts.append(flat[offset : offset + count].reshape(shape))
            offset += count
        return parts

    # ------------------------------------------------------------------ worker thread
    def run_batch(self, batch: list[InferenceRequest]):
        """Gather inputs, execute, slice and encode outputs. Runs in this instance's thread.

        Returns (per-request list[EncodedOutput] or InferenceError, BatchTimings). A backend
        failure raises and fails the whole batch; an encoding failure (e.g. a too-small
        shared-memory output region) fails only its own request.
        """
        model = self.model
        if model.decoupled:
            return self._run_decoupled(batch[0])
        if self.backend.request_level:
            return self._run_requests(batch)
        t0 = time.monotonic_ns()
        ragged = self.ragged_inputs
        if len(batch) == 1 and not ragged:
            inputs = batch[0].inputs
        else:
            # Ragged batching (allow_ragged_batch; Triton's ragged_batching.md): as Triton's
            # backends do, the model gets a ragged input as ONE 1-D tensor, the concatenation
            # of every request's flattened elements (a lone request's too, so the model sees
            # one layout); the config's batch_input tensors describe how to split it.
            inputs = {
                name: np.concatenate([r.inputs[name].reshape(-1) if name in ragged else r.inputs[name] for r in batch])
                for name in batch[0].inputs
            }
        inputs = self._reshaped(inputs, self._input_reshapes)
        for target, kind, dtype, source in self.batch_inputs:
            shapes = [self._backend_shape(source, r.inputs[source].shape) for r in batch if source in r.inputs]
            inputs[target] = _batch_input(kind, dtype, shapes)
        t1 = time.monotonic_ns()
        scattered: dict[str, list[np.ndarray]] = {}
        try:
            outputs = self.backend.execute(inputs)
            t2 = time.monotonic_ns()
            # (checking may call into objects the model returned, so it is guarded too)
            outputs = self._check_outputs(
                outputs, batch, batch[0].batch_size if len(batch) == 1 else sum(r.batch_size for r in batch)
            )
            for name in self.batch_outputs.keys() & outputs.keys():
                scattered[name] = self._scatter(outputs.pop(name), name, batch)
        except BaseException as e:
            log.debug("model %s execute failed", model.name, exc_info=True)
            raise model_failure(model.name, e) from None
        results: list[list[EncodedOutput] | InferenceError | None] = []  # None: a padding row
        offset = 0
        sliced = model.max_batch_size > 0 and len(batch) > 1  # a lone request gets them all
        for index, r in enumerate(batch):
            if sliced:
                rows = r.batch_size
                mine = {k: v[offset : offset + rows] for k, v in outputs.items()}
                offset += rows
            else:
                mine = outputs
            if scattered:
                mine = dict(mine)
                for name, parts in scattered.items():
                    mine[name] = parts[index]
            if r.padding:
                results.append(None)
                continue
            try:
                results.append(r.encode(r, mine))
            except Exception as e:  # this request's outputs only (e.g. a too-small shm region)
                results.append(e if isinstance(e, InferenceError) else model_failure(model.name, e))
        t3 = time.monotonic_ns()
        return results, BatchTimings(t1 - t0, t2 - t1, t3 - t2)

    def _run_requests(self, batch: list[InferenceRequest]):
        """``run_batch`` for a backend that takes the batch as its requests: each request's
        own inputs in, each request's outputs (or error) out, checked and encoded per request."""
        model = self.model
        t0 = time.monotonic_ns()
        # (the sequence batcher's filler rows are for backends that take merged batches)
        live = [r for r in batch if not r.padding]
        requests = [backend_request(r, self._reshaped(r.inputs, self._input_reshapes)) for r in live]
        t1 = time.monotonic_ns()
        try:
            answers = self.backend.execute_requests(requests)
            if len(answers) != len(live):
                raise internal(f"model '{model.name}' answered {len(answers)} of the {len(live)} requests of a batch")
        except BaseException as e:
            log.debug("model %s execute failed", model.name, exc_info=True)
            raise model_failure(model.name, e) from None
        t2 = time.monotonic_ns()
        answers_left = iter(answers)
        results: list[list[EncodedOutput] | InferenceError | None] = []
        for r in batch:
            if r.padding:
                results.append(None)
                continue
            answer = next(answers_left)
            try:
                results.append(self._encode_answer(r, answer))
            except BaseException as e:  # this request only
                results.append(model_failure(model.name, e))
        t3 = time.monotonic_ns()
        return results, BatchTimings(t1 - t0, t2 - t1, t3 - t2)

    def _encode_answer(self, request: InferenceRequest, answer) -> list[EncodedOutput]:
        """One request's answer from a request-level backend, checked and encoded. Outputs the
        model left out of its response are left out of the answer, as Triton's Python backend
        answers with the outputs the model gave (what it gives is checked like any output)."""
        if isinstance(answer, BaseException):
            raise answer
        if isinstance(answer, dict) and any(o.spec.name not in answer for o in request.outputs):
            given = [o for o in request.outputs if o.spec.name in answer]
            shown = dataclasses.replace(request, outputs=given)
            return shown.encode(shown, self._check_outputs(answer, [shown], request.batch_size))
        return request.encode(request, self._check_outputs(answer, [request], request.batch_size))

    def run_alone(self, batch: list[InferenceRequest]) -> list[tuple]:
        """Requests that each execute alone (no dynamic batcher), handed to a request-level
        backend in one call (``carries_requests``): it runs them one after another, so an
        instance process costs one round trip for all. Runs in this instance's thread.

        Returns per request (request, result, timings, error) as ``DirectScheduler`` posts
        them: ``error`` when its execution failed (or the call did, for all), else ``result``
        (its encoded outputs, or the InferenceError of its response). Each gets an equal share
        of the call's gather and execute time: the backend ran them in one go."""
        model = self.model
        t0 = time.monotonic_ns()
        requests = [backend_request(r, self._reshaped(r.inputs, self._input_reshapes)) for r in batch]
        t1 = time.monotonic_ns()
        try:
            answers = self.backend.execute_requests(requests, alone=True)
            if len(answers) != len(batch):
                raise internal(
                    f"model '{model.name}' answered {len(answers)} of the {len(batch)} requests it was given"
                )
        except BaseException as e:
            log.debug("model %s execute failed", model.name, exc_info=True)
            error = model_failure(model.name, e)
            return [(r, None, None, error) for r in batch]
        t2 = time.monotonic_ns()
        n = len(batch)
        input_ns, infer_ns = (t1 - t0) // n, (t2 - t1) // n
        outcomes: list[tuple] = []
        for r, answer in zip(batch, answers):
            t = time.monotonic_ns()
            if isinstance(answer, ExecutionFailed):
                outcomes.append((r, None, None, model_failure(model.name, answer.error)))
                continue
            try:
                result: object = self._encode_answer(r, answer)
            except BaseException as e:  # this request only
                result = model_failure(model.name, e)
            outcomes.append((r, result, BatchTimings(input_ns, infer_ns, time.monotonic_ns() - t), None))
        return outcomes

    def _run_decoupled(self, request: InferenceRequest):
        """A decoupled model's execute() yields responses; each is encoded and emitted as it
        comes, so the client sees them while the model is still running."""
        infer_ns = output_ns = 0
        t = time.monotonic_ns()
        try:
            inputs = self._reshaped(request.inputs, self._input_reshapes)
            if self.backend.request_level:
                produced = self.backend.execute_requests([backend_request(request, inputs)])[0]
            else:
                produced = self.backend.execute(inputs)
            it = iter([produced] if isinstance(produced, dict) else produced)
            while True:
                try:
                    outputs = next(it)
                except StopIteration:
                    break
                t1 = time.monotonic_ns()
                infer_ns += t1 - t
                emit = request.emit
                assert emit is not None  # decoupled requests always carry one
                if isinstance(outputs, BaseException):  # an error response; the stream goes on
                    emit(model_failure(self.model.name, outputs))
                    t = time.monotonic_ns()
                    continue
                outputs = self._check_outputs(outputs, [request], request.batch_size)
                for name in self.batch_outputs.keys() & outputs.keys():
                    outputs[name] = self._scatter(outputs[name], name, [request])[0]
                if not request.first_response_ns:
                    request.first_response_ns = time.monotonic_ns()
                emit(request.encode(request, outputs))
                t = time.monotonic_ns()
                output_ns += t - t1
        except BaseException as e:
            log.debug("model %s execute failed", self.model.name, exc_info=True)
            raise model_failure(self.model.name, e) from None
        infer_ns += time.monotonic_ns() - t
        return [[]], BatchTimings(0, infer_ns, output_ns)

    def _check_outputs(self, outputs, batch, total_rows) -> dict[str, np.ndarray]:
        model = self.model
        if not isinstance(outputs, dict):
            raise internal(f"model '{model.name}' execute() must return a dict of arrays, got {type(outputs).__name__}")
        needed = {}
        last = None
        for r in batch:  # requests of a channel asking for plain outputs share one list
            if r.outputs is not last and not r.padding:
                last = r.outputs
                for o in last:
                    needed[o.spec.name] = o.spec
        checked = {}
        exact = self._exact_outputs
        for name, spec in needed.items():
            if name not in outputs:
                raise internal(f"model '{model.name}' did not return output '{name}'")
            array = outputs[name]
            expected = exact.get(name)
            if (
                expected is not None
                and type(array) is np.ndarray
                and array.ndim == expected[3]
                and array.dtype == expected[0]
                and array.shape[expected[2] :] == expected[1]
                and (not expected[2] or array.shape[0] == total_rows)
            ):
                checked[name] = array  # what the slow path below would accept unchanged
                continue
            array = np.asarray(array)
            dtype = spec.datatype.dtype
            if spec.datatype.wire == "BYTES":
                if array.dtype != object:
                    array = array.astype(object)
            elif array.dtype != dtype and not np.can_cast(array.dtype, dtype, casting="same_kind"):
                raise internal(
                    f"output '{name}' of model '{model.name}' has data type {array.dtype}, "
                    f"but the model configuration declares {spec.datatype.wire}"
                )
            elif (
                array.dtype.kind in "iu"
                and dtype.kind in "iu"
                and array.size
                and not np.can_cast(array.dtype, dtype, casting="safe")
            ):
                # narrowing integers would wrap silently: only values that fit are passed on
                info = np.iinfo(dtype)
                if array.min() < info.min or array.max() > info.max:
                    raise internal(
                        f"output '{name}' of model '{model.name}' has values outside the range of "
                        f"{spec.datatype.wire}, the data type the model configuration declares"
                    )
            batched = model.max_batch_size > 0
            if name in self.batch_outputs:
                # one tensor for the whole batch, its shape given by the inputs (see _scatter)
                if array.dtype != dtype and spec.datatype.wire != "BYTES":
                    array = array.astype(dtype)
                checked[name] = array
                continue
            if batched and (array.ndim == 0 or array.shape[0] != total_rows):
                raise internal(
                    f"output '{name}' of model '{model.name}' has shape {list(array.shape)}, "
                    f"expected a leading batch dimension of {total_rows}"
                )
            if not spec.is_shape_tensor:
                # the backend produces the reshape's shape where the output has one
                dims = spec.backend_dims
                got = array.shape[1:] if batched else array.shape
                if len(got) != len(dims) or any(d not in (-1, g) for d, g in zip(dims, got)):
                    declared = ([-1] if batched else []) + list(dims)
                    raise internal(
                        f"output '{name}' of model '{model.name}' has shape {list(array.shape)}, but the "
                        f"model configuration declares {declared}"
                        + (" (its reshape: the shape the model produces)" if spec.reshape is not None else "")
                    )
            if array.dtype != dtype and spec.datatype.wire != "BYTES":
                array = array.astype(dtype)
            checked[name] = array
        # clients get the config's dims (the response, shared memory and an ensemble's next step)
        return self._reshaped(checked, self._output_reshapes)

    def warm_up(self, sample) -> list[tuple[int, BatchTimings, int]]:
        """Run one warm-up sample's ``batch_size`` requests (``warmup.WarmupSample``) through
        ``run_batch``, as one batch, as Triton does; on this instance's thread. Goes through
        ``run_batch`` so that any backend an instance hosts is warmed the way it serves.

        Returns (rows, timings, duration ns) of each execution, for the statistics (Triton
        counts warm-up there); raises ``warmup.WarmupError`` with every request's error
        (Triton's text: each one followed by "; ")."""
        from .warmup import WarmupError

        if not sample.batch_size:  # no request to send (Triton then executes nothing)
            return []
        model = self.model
        outputs = [RequestedOutput(spec) for spec in model.outputs.values()]
        requests = [
            InferenceRequest(
                model,
                dict(sample.inputs),
                outputs,
                1,
                encode=_keep_slices,
                emit=_discard_response if model.decoupled else None,
            )
            for _ in range(sample.batch_size)
        ]
        # a decoupled model, or one without batching, gets each request alone (as the
        # schedulers hand them out); a batching model gets them as one batch
        alone = model.decoupled or model.max_batch_size == 0
        batches = [[r] for r in requests] if alone else [requests]
        errors: list[str] = []
        executed = []
        for batch in batches:
            start = time.monotonic_ns()
            try:
                results, timings = self.run_batch(batch)
            except InferenceError as e:
                errors.extend([e.message] * len(batch))
                continue
            failed = [r.message for r in results if isinstance(r, InferenceError)]
            errors.extend(failed)
            if not failed:
                executed.append((len(batch), timings, time.monotonic_ns() - start))
        if errors:
            raise WarmupError(f"failed to run warmup sample '{sample.name}': " + "".join(f"{e}; " for e in errors))
        return executed

    def close(self) -> None:
        try:
            self.executor.submit(self.backend.close).result()
        except Exception:
            log.exception("closing instance %d of model %s", self.index, self.model.name)
        self.executor.shutdown(wait=True)

    def abandon(self) -> None:
        """Leave a thread stuck in execute() behind (it is a daemon); it closes the backend
        and exits if the call ever returns."""
        _ABANDONED.append(self)
        self.executor.abandon(self._close_quietly)
        # a backend running in its own process can be stopped from here: its batch then
        # fails and the thread gets to close it
        kill = getattr(self.backend, "kill", None)
        if kill is not None:
            kill()

    def _close_quietly(self) -> None:
        try:
            self.backend.close()
        except BaseException:
            log.exception("closing abandoned instance %d of model %s", self.index, self.model.name)


def _keep_slices(request: InferenceRequest, slices: dict[str, np.ndarray]):
    """A warm-up request's "encoding": its checked output slices, which nobody reads."""
    return slices


def _discard_response(outputs) -> None:
    """A decoupled warm-up request's responses: taken (all of them, as Triton does), unused."""


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
        for instance in self.instances:
            if instance in stuck:
                instance.abandon()
            else:
                await loop.run_in_executor(None, instance.close)


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
