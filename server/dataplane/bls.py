"""Requests a model makes from inside its instance process (Triton's business logic scripting).

A Python model's ``InferenceRequest(...).exec()`` arrives here over its instance's channel
(``ProcessBackend.bind_engine`` injects ``serve_call``: the repository hands it to every
instance process, the data plane sets it at wiring) and runs as any client request does: a
client of the data plane, it addresses its model through ``DataPlane.model``, is validated
by ``normalize`` (Triton's checks and texts), becomes the engine's request where every client
request does (``tensors.engine_request``) and is submitted to the target model's scheduler,
so it batches with the other traffic of that model, FPGA models included. Outputs go back
through the calling instance's segment; a failure goes back as the response's error, as
Triton's BLS reports it.

What a model does through BLS stays contained (``Call``):

* **A call that could only be served by the instances up its own chain fails at once.** A
  model that calls itself with its one instance busy running the caller, or a cycle A -> B -> A
  with every instance of A waiting on B, would wait forever (Triton 2.51 wedges so: the
  client's deadline answers the client, but the instances stay blocked and every later
  request to those models times out too). Before a call is queued, ``waits_on_itself`` follows
  what waits on what -- an instance waits on its calls in flight, a call on the instance that
  runs it or, while queued, on any instance of its model -- and a call that can make no
  progress is answered UNAVAILABLE, naming the models.
* **An instance whose client has gone is freed.** While a call is in flight, every
  ``WATCH_S`` it checks whether every request of the caller's batch has been withdrawn (the
  client cancelled, its deadline passed): the call is then withdrawn and answered CANCELLED,
  so the model's ``exec()`` returns and its instance takes the next request. The instance
  that serves a withdrawn call sees ``is_cancelled()``, and its own calls follow.
* **A model can cancel its call** (``ResponseIterator.cancel()``, python_backend r25.04, as
  in Triton 26.x): a queued request is withdrawn and answered CANCELLED with Triton core's
  empty text (r26.05 ``dynamic_batch_scheduler.cc``), a running one sees ``is_cancelled()``
  and its responses keep coming until its final one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

from ..engine.request import InferenceRequest, RequestedOutput
from ..errors import InferenceError, Status
from .tensors import WireInput, WireRequest, all_outputs, engine_request, normalize, serialize_bytes

log = logging.getLogger("fpgaserve.bls")

#: how often a call in flight checks that the requests of the batch that made it still have
#: their clients (a withdrawn batch frees its instance within this)
WATCH_S = 0.5

ABANDONED = (
    "the BLS request was withdrawn: every request of the batch that made it has been withdrawn "
    "by its client (cancelled, or its deadline passed)"
)


def _slices(request: InferenceRequest, slices: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A BLS request's ``encode``: the output arrays themselves."""
    return slices


def _outputs(instance, outputs: Any) -> list:
    """A response's output arrays (a dict, what ``_slices`` made) in the instance's segment."""
    put = instance.segment.put
    return [(name, put(np.asarray(array))) for name, array in outputs.items()]


class _CallFuture(asyncio.Future):
    """A BLS request's answer. ``withdrawn`` makes the request look cancelled to the model that
    runs it (``is_cancelled()`` reads ``cancelled()``) without ending it: a running request's
    responses still come, as Triton's do after a cancel."""

    withdrawn = False

    def cancelled(self) -> bool:
        return self.withdrawn or super().cancelled()

    def ended_cancelled(self) -> bool:
        """Whether the future itself was cancelled (the request never ran)."""
        return super().cancelled()


class Call:
    """One BLS request in flight: made by ``caller`` (a ``ProcessBackend``) as its call
    ``call_id``, to ``target`` (a model version) as the engine's ``request``. It answers the
    caller's process through ``reply`` until it is ``finished``; ``cancel`` withdraws it."""

    __slots__ = ("_reply", "call_id", "caller", "finished", "request", "stream", "target", "withdrawn_by")

    def __init__(self, caller, call_id: int, stream: bool, reply: Callable[[tuple], None]):
        self.caller = caller
        self.call_id = call_id
        self.stream = stream
        self._reply = reply
        self.target: Any = None
        self.request: InferenceRequest | None = None
        self.finished = False
        self.withdrawn_by = ""  # "model" (its own cancel), "server" (its batch withdrawn, its process gone)

    def answer(self, item: tuple) -> None:
        """A response (("ok", outputs) or ("error", status, text)), unless the call is over."""
        if not self.finished:
            self._reply(item)

    def finish(self, error: InferenceError | None = None) -> None:
        """The call's last answer: its error if any, then the end of a stream."""
        if self.finished:
            return
        if error is not None:
            self._reply(("error", error.status.name, error.message))
        if self.stream:
            self._reply(("end",))
        self.finished = True

    def cancel(self, by_model: bool) -> None:
        """Withdraw the call (on the event loop): a queued request never runs, a running one
        sees ``is_cancelled()``. Cancelled by the model, the call goes on until the request's
        own end (a queued one ends with Triton's CANCELLED response); withdrawn by the server
        (its batch has no client left, or its process is gone), it is answered CANCELLED now,
        so that the model's ``exec()`` returns."""
        if self.withdrawn_by or self.finished:
            return
        self.withdrawn_by = "model" if by_model else "server"
        request = self.request
        if request is not None and request.future is not None:
            future = request.future
            if isinstance(future, _CallFuture):
                future.withdrawn = True
            if not request.exec_start_ns:
                future.cancel()  # still queued: it never runs
        if not by_model:
            self.finish(InferenceError(Status.CANCELLED, ABANDONED))


def _backends(model) -> list | None:
    """The backends of ``model``'s instances, None for a model without (an ensemble)."""
    scheduler = getattr(model, "scheduler", None)
    instances = getattr(scheduler, "instances", None)
    if not instances:
        return None
    return [instance.backend for instance in instances]


def waits_on_itself(call: Call) -> list[str]:
    """The models whose instances ``call`` would wait on forever, or [] when it can be served.

    What waits on what: an instance hosting model code waits on every call it has in flight
    (``outgoing_calls``); a call on the instance that runs it (the one whose ``serving_calls``
    hold it) or, while it is queued, on any instance of its model; an instance of a backend
    that makes no calls (numpy, hls4ml, ONNX) always finishes, and so does a call to a model
    without instances of its own (an ensemble: its steps are not followed). Whatever can
    finish is found by the least fixed point (everything starts stuck; a node is freed when
    what it waits on is); a call still stuck then is in a cycle of waits with no way out."""
    nodes: list = []
    seen: set[int] = set()
    pending: list = [call]
    while pending:
        node = pending.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        nodes.append(node)
        if isinstance(node, Call):
            if node.finished:
                continue
            for backend in _backends(node.target) or ():
                if hasattr(backend, "outgoing_calls"):
                    pending.append(backend)
        else:
            pending.extend(node.outgoing_calls.values())
    free: dict[int, bool] = {id(node): False for node in nodes}

    def freed(node) -> bool:
        if not isinstance(node, Call):
            return all(free.get(id(c), True) for c in list(node.outgoing_calls.values()))
        backends = _backends(node.target)
        if node.finished or backends is None:
            return True
        runner = next((b for b in backends if node in getattr(b, "serving_calls", ())), None)
        if runner is not None:
            return free.get(id(runner), True)
        return any(free.get(id(b), True) if hasattr(b, "outgoing_calls") else True for b in backends)

    changed = True
    while changed:
        changed = False
        for node in nodes:
            if not free[id(node)] and freed(node):
                free[id(node)] = changed = True
    if free[id(call)]:
        return []
    names = {getattr(getattr(n, "target", None), "name", "") for n in nodes if isinstance(n, Call) and not free[id(n)]}
    return sorted(name for name in names if name)


def _malformed(why: str) -> InferenceError:
    return InferenceError(Status.INVALID_ARG, f"malformed BLS request from the model's process: {why}")


def _checked(payload) -> tuple:
    """A BLS payload from an instance process (which runs code the server did not write) held
    to its shape: (model, version, inputs [(name, datatype, shape, TensorRef)], requested
    output names, request id, parameters {name: str | int | float | bool}, timeout µs)."""
    if type(payload) is not tuple or len(payload) != 7:
        raise _malformed("not a request")
    name, version, inputs, requested, request_id, parameters, timeout_us = payload
    if type(name) is not str or type(version) not in (int, str) or type(request_id) is not str:
        raise _malformed("its model, version or request id")
    if type(inputs) not in (list, tuple) or any(
        type(i) is not tuple or len(i) != 4 or type(i[0]) is not str or type(i[1]) is not str for i in inputs
    ):
        raise _malformed("its inputs")
    if type(requested) not in (list, tuple) or any(type(o) is not str for o in requested):
        raise _malformed("its requested outputs")
    if type(parameters) is not dict or any(
        type(k) is not str or type(v) not in (str, int, float, bool) for k, v in parameters.items()
    ):
        raise _malformed("its parameters")
    if type(timeout_us) is not int or timeout_us < 0:
        raise _malformed("its timeout")
    return payload


async def serve_call(
    model_of: Callable[[str, str], Awaitable[Any]],
    submit: Callable[[InferenceRequest], Awaitable[Any]],
    payload: tuple,
    stream: bool,
    reply,
    instance,
    call_id: int = 0,
) -> None:
    """Run one BLS request of ``instance`` (a ``ProcessBackend``) through the data plane's
    ``model_of`` (``DataPlane.model``) and ``submit`` (``DataPlane.submit``): ``payload`` is (model,
    version, inputs [(name, datatype, shape, TensorRef)], requested output names, request id,
    parameters, timeout µs); answers through ``reply`` with ("ok", outputs) or ("error",
    status, text), then ("end",) when ``stream``. Not refused at shutdown: the request of the
    model that makes it is still in flight. The call is in ``instance.outgoing_calls`` while it
    runs (see the module docstring for what it is refused or withdrawn for)."""
    call = Call(instance, call_id, stream, reply)
    calls = getattr(instance, "outgoing_calls", None)
    if calls is not None:
        calls[call_id] = call
    name = payload[0] if type(payload) is tuple and payload else ""
    try:
        name, version, inputs, requested, request_id, parameters, timeout_us = _checked(payload)
        try:
            model = await model_of(name, "" if version in ("", -1, "-1") else str(version))
        except InferenceError:
            raise InferenceError(
                Status.INTERNAL,
                f"Model {name} - Error when running inference: Failed for execute the inference request. "
                f"Model '{name}' is not ready.",
            ) from None
        if model.decoupled and not stream:
            raise InferenceError(
                Status.INVALID_ARG,
                f"Model '{name}' is using the decoupled transaction policy: call exec(decoupled=True) "
                "for its responses",
            )
        peer = instance.peer
        wire_inputs: dict[str, WireInput] = {}
        for input_name, datatype, shape, ref in inputs:
            try:
                array = peer.get(ref, copy=True)
            except ValueError as e:  # (MalformedMessage) a reference that is not one
                raise _malformed(f"input '{input_name}': {e}") from None
            # BYTES arrive from the child's segment as bytes elements: the wire's serialization
            data: Any = serialize_bytes(array) if datatype == "BYTES" else np.ascontiguousarray(array).data
            wire_inputs[input_name] = WireInput(datatype, list(shape), data)
        if requested:
            outputs = []
            for output_name in requested:
                spec = model.outputs.get(output_name)
                if spec is None:
                    raise InferenceError(
                        Status.INVALID_ARG,
                        f"[request id: {request_id or '<id_unknown>'}] unexpected inference output "
                        f"'{output_name}' for model '{name}'",
                    )
                outputs.append(RequestedOutput(spec))
        else:
            outputs = all_outputs(model)
        wire = WireRequest(model, request_id, wire_inputs, outputs, dict(parameters), 0, timeout_us)
        arrays, batch_size = normalize(wire, None)
        emit = None
        if stream:

            def emit(produced) -> None:
                call.answer(
                    ("error", produced.status.name, produced.message)
                    if isinstance(produced, InferenceError)
                    else ("ok", _outputs(instance, produced))
                )

        # (with ``_slices`` as its encode, the request resolves to its output arrays)
        future = _CallFuture()
        request = engine_request(
            model,
            arrays,
            outputs,
            batch_size,
            request_id,
            wire.parameters,
            0,
            timeout_us,
            _slices,
            emit=emit,
            future=future,
            caller=call,
        )
        call.target, call.request = model, request
        if call.withdrawn_by or instance.claim_early_cancel(call_id):
            raise InferenceError(Status.CANCELLED, "")
        cycle = waits_on_itself(call)
        if cycle:
            raise InferenceError(
                Status.UNAVAILABLE,
                f"the BLS request to model '{name}' cannot be served: every instance that could serve it "
                f"waits, directly or through BLS requests of its own, for this one (models {', '.join(cycle)}); "
                "it is refused rather than left waiting forever",
            )
        submit(request)
        while not future.done():
            await asyncio.wait([future], timeout=WATCH_S)
            if not future.done() and not call.finished and instance.abandoned():
                log.info("BLS request to model '%s': the batch that made it has no client left; withdrawn", name)
                call.cancel(by_model=False)
        if future.ended_cancelled():  # withdrawn while queued (by the model: Triton's empty text)
            text = {"model": "", "server": ABANDONED}.get(call.withdrawn_by, "the request was cancelled")
            raise InferenceError(Status.CANCELLED, text)
        produced: Any = future.result()
        if not stream:
            call.answer(("ok", _outputs(instance, produced)))
        call.finish()
    except InferenceError as e:
        call.finish(e)
    except asyncio.CancelledError:  # the server's loop is stopping
        call.finish(InferenceError(Status.UNAVAILABLE, "the server is shutting down"))
        raise
    except Exception as e:  # a bug of ours: the model still gets an answer
        log.exception("BLS request to model '%s' failed", name)
        call.finish(InferenceError(Status.INTERNAL, f"internal error in a BLS request ({type(e).__name__})"))
    finally:
        if calls is not None and calls.get(call_id) is call:
            del calls[call_id]
