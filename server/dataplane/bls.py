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
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

from ..engine.request import InferenceRequest, RequestedOutput
from ..errors import InferenceError, Status
from .tensors import WireInput, WireRequest, all_outputs, engine_request, normalize, serialize_bytes

log = logging.getLogger("fpgaserve.bls")


def _slices(request: InferenceRequest, slices: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A BLS request's ``encode``: the output arrays themselves."""
    return slices


def _outputs(instance, outputs: Any) -> list:
    """A response's output arrays (a dict, what ``_slices`` made) in the instance's segment."""
    put = instance.segment.put
    return [(name, put(np.asarray(array))) for name, array in outputs.items()]


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
    model that makes it is still in flight."""
    name, version, inputs, requested, request_id, parameters, timeout_us = payload
    try:
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
            array = peer.get(ref, copy=True)
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
        wire = WireRequest(model, request_id, wire_inputs, outputs, dict(parameters or {}), 0, timeout_us)
        arrays, batch_size = normalize(wire, None)
        emit = None
        if stream:

            def emit(produced) -> None:
                reply(
                    ("error", produced.status.name, produced.message)
                    if isinstance(produced, InferenceError)
                    else ("ok", _outputs(instance, produced))
                )

        # (with ``_slices`` as its encode, the request resolves to its output arrays)
        request = engine_request(
            model, arrays, outputs, batch_size, request_id, wire.parameters, 0, timeout_us, _slices, emit=emit
        )
        produced: Any = await submit(request)
        if not stream:
            reply(("ok", _outputs(instance, produced)))
    except InferenceError as e:
        reply(("error", e.status.name, e.message))
    except Exception as e:  # a bug of ours: the model still gets an answer
        log.exception("BLS request to model '%s' failed", name)
        reply(("error", "INTERNAL", str(e) or type(e).__name__))
    if stream:
        reply(("end",))
