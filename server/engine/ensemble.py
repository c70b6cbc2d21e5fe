"""Ensembles (``platform: "ensemble"``): a pipeline of steps run on other models, as Triton runs it.

An ensemble has no backend and no instances. Its scheduler takes the ensemble's request and
runs each step as a request *submitted to the composing model's own scheduler*, so that
model's dynamic batcher (or sequence batcher) treats the step like any other request: steps
of concurrent ensemble requests batch together there. Tensors pass between steps as the
numpy arrays the composing model returned (a batched model's slice is a view of its batch
output): nothing is copied or serialized inside the pipeline, only the ensemble's outputs are
encoded for the wire at the end. A step starts as soon as all its inputs exist, so
independent branches run concurrently.

Loading checks the ensemble in Triton's two stages, with its texts: its own config
(``model_config.validate_ensemble``), then, once the composing models are loaded, each step
against their configs (``check_composing``). The repository resolves the dependencies (it
loads composing models, and retires an ensemble whose composing model goes).

Statistics as Triton reports them (core ensemble_scheduler.cc): the ensemble's queue time is
until its first step is submitted, its compute durations are the sums of its steps' (each
step's execution durations), one execution per successful request; each composing model
counts its step requests as ordinary requests.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, NamedTuple

import numpy as np

from fpgaserve.protos import inference as pb

from ..errors import InferenceError, internal, invalid_argument, unavailable
from .request import InferenceRequest, RequestedOutput
from .scheduler import Scheduler, resolve
from .statistics import BatchTimings

# outputs at least this large are encoded off the event loop (a copy into the reply)
_ENCODE_INLINE_BYTES = 1 << 16


class EnsembleError(Exception):
    """An ensemble that cannot load, with Triton's text."""


class Step(NamedTuple):
    position: int  # in the config's step list
    model_name: str
    version: str  # "" = the latest ready version (model_version -1)
    input_map: dict[str, str]  # composing model's input -> ensemble tensor
    output_map: dict[str, str]  # composing model's output -> ensemble tensor


def plan(config) -> list[Step]:
    """The steps of a validated ensemble config."""
    return [
        Step(
            i,
            s.model_name,
            "" if s.model_version < 0 else str(s.model_version),
            dict(s.input_map),
            dict(s.output_map),
        )
        for i, s in enumerate(config.ensemble_scheduling.step)
    ]


def composing_names(config) -> list[str]:
    """The models an ensemble's steps name, each once, in step order."""
    return list(dict.fromkeys(s.model_name for s in config.ensemble_scheduling.step))


# ---------------------------------------------------------------------------- load-time checks


class _Node(NamedTuple):
    """What one model declares an ensemble tensor to be."""

    model: str
    dtype: int
    dims: tuple[int, ...]
    full_dims: tuple[int, ...]  # with the batch dimension (-1) of a batching model


def _node(model: str, batching: bool, tensor) -> _Node:
    # the dims a client of the model sees: a step's tensors pass between models in that shape
    # (the reshape is the backend's own view; Triton 2.51 compares dims too, probed 2026-11-28)
    dims = tuple(tensor.dims)
    return _Node(model, tensor.data_type, dims, ((-1,) if batching else ()) + dims)


def _dims_match(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return len(a) == len(b) and all(-1 in (x, y) or x == y for x, y in zip(a, b))


def _fmt(dims) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def _declare(tensors: dict[str, _Node], tensor: str, node: _Node, ensemble: str) -> None:
    """Record what a step declares ensemble ``tensor`` to be; it must agree with earlier steps."""
    if tensor in tensors:
        _consistent(tensors[tensor], node, f"in ensemble {ensemble}, ensemble tensor {tensor}: ")
    else:
        tensors[tensor] = node


def _consistent(lhs: _Node, rhs: _Node, prefix: str) -> None:
    if lhs.dtype != rhs.dtype:
        raise EnsembleError(
            f"{prefix}inconsistent data type: {pb.DataType.Name(lhs.dtype)} is inferred from model {lhs.model} "
            f"while {pb.DataType.Name(rhs.dtype)} is inferred from model {rhs.model}"
        )
    # a tensor may pass between a non-batching model declaring [-1, d...] and a batching one
    # declaring [d...]: compared with the batch dimension too
    if not _dims_match(lhs.dims, rhs.dims) and not _dims_match(lhs.full_dims, rhs.full_dims):
        raise EnsembleError(
            f"{prefix}inconsistent shape: {_fmt(lhs.full_dims)} is inferred from model {lhs.model} while "
            f"{_fmt(rhs.full_dims)} is inferred from model {rhs.model}"
        )


def check_composing(config, composing: dict[str, Any]) -> None:
    """Triton's checks of each step against its composing model's config (core
    ValidateEnsembleConfig), in its order and with its texts: batch sizes, every mapped name
    exists, every model input is mapped once, and each ensemble tensor has one data type and
    a compatible shape wherever it appears. ``composing``: model name -> its loaded config.
    Raises EnsembleError."""
    ensemble = config.name
    batching = config.max_batch_size > 0
    tensors: dict[str, _Node] = {}
    for t in config.input:
        tensors[t.name] = _node(ensemble, batching, t)
    for t in config.output:
        tensors.setdefault(t.name, _node(ensemble, batching, t))
    for step in config.ensemble_scheduling.step:
        model = composing[step.model_name]
        name = step.model_name
        if model.max_batch_size != 0 and model.max_batch_size < config.max_batch_size:
            raise EnsembleError(
                f"ensemble {ensemble} allows maximum batch size {config.max_batch_size}, but it contains model "
                f"{name} which only allows maximum batch size to be {model.max_batch_size}"
            )
        if model.model_transaction_policy.decoupled:
            raise EnsembleError(
                f"in ensemble {ensemble}, step of model '{name}' is decoupled, and fpgaserve's ensembles do not "
                "support decoupled composing models"
            )
        model_batching = model.max_batch_size > 0
        inputs = {t.name: t for t in model.input}
        for key, tensor in step.input_map.items():
            if key not in inputs:
                raise EnsembleError(
                    f"in ensemble {ensemble}, ensemble tensor {tensor} is mapping to non-existing input {key} "
                    f"in model {name}"
                )
        for key, spec in inputs.items():
            if key not in step.input_map:
                raise EnsembleError(
                    f"in ensemble {ensemble}, input {key} in model {model.name} is not mapped to any ensemble tensors"
                )
            _declare(tensors, step.input_map[key], _node(name, model_batching, spec), ensemble)
        outputs = {t.name: t for t in model.output}
        for key, tensor in step.output_map.items():
            if key not in outputs:
                raise EnsembleError(
                    f"in ensemble {ensemble}, ensemble tensor {tensor} is mapped from non-existing output {key} "
                    f"in model {name}"
                )
        for key, tensor in step.output_map.items():
            _declare(tensors, tensor, _node(name, model_batching, outputs[key]), ensemble)


# ---------------------------------------------------------------------------- running


def _step_outputs(request: InferenceRequest, slices: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A step's ``encode``: its output slices as they are (views), for the next steps."""
    return slices


def _shape_error(key: str, model, shape: tuple[int, ...]) -> InferenceError:
    expected = ([-1] if model.max_batch_size > 0 else []) + list(model.inputs[key].dims)
    return invalid_argument(
        f"unexpected shape for input '{key}' for model '{model.name}'. Expected {_fmt(expected)}, got {_fmt(shape)}. "
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
            if (batching and array.ndim == 0) or not _dims_match(tuple(dims), got) or any(d < 0 for d in got):
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
