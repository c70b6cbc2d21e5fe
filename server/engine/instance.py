"""A model instance: one backend object and the thread it runs on, and what a batch becomes
for it (Triton core's model instance and its backend's batch handling).

``ModelInstance.run_batch`` runs on the instance's own thread (``InstanceThread``): blocking
backend work (ONNX Runtime, hls4ml's C-simulation, a card's kernel call) runs off the event
loop, one thread per instance, so an instance is never entered concurrently. It gathers the
batch's inputs (reshapes, ragged inputs, ``batch_input`` tensors), calls the backend, checks
its outputs against the config and slices and encodes them per request; a request-level
backend (Triton's Python backend) gets the batch as its requests instead. The schedulers
(scheduler.py and its subclasses) decide which requests make a batch.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from typing import cast

import numpy as np

from fpgaserve.backends import Backend, BackendRequest, DeviceUnavailableError
from fpgaserve.backends.base import ExecutionFailed

from .. import model_config as mc
from ..errors import InferenceError, internal, unavailable
from .instance_thread import InstanceThread
from .request import EncodedOutput, InferenceRequest, RequestedOutput
from .statistics import BatchTimings
from .warmup import WarmupError

# (the scheduler's logger: an instance's failures are logged as they were before it had a module)
log = logging.getLogger("fpgaserve.scheduler")


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
        request.caller,
    )


class ModelInstance:
    """Instance ``index`` of a model version: its backend object (built by the version loader
    on ``executor``, the instance's own thread) and what a batch becomes for it. Everything
    that touches the backend runs on that thread; ``busy`` is read and set on the event loop."""

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
