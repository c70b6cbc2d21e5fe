"""The Python backend inside an instance's process: hosts one ``TritonPythonModel``.

Runs only in the process ``instance_worker`` starts (never in the server's): it puts the
``triton_python_backend_utils`` module (``stub/``) first and the model's version folder last on
``sys.path``, imports ``model.py``, and turns the engine's messages into Triton's calls:
``initialize(args)``, ``execute(requests)`` -> one ``InferenceResponse`` per request (or
None for a decoupled model, which answers through each request's response sender),
``finalize()``; ``AutoCompleter`` runs the static ``auto_complete_config``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import json
import os
import sys
import traceback
from typing import Any

from fpgaserve.backends.hosting import current


def _load_module(host: dict):
    stub_dir = host["stub_dir"]
    if stub_dir not in sys.path:
        sys.path.insert(0, stub_dir)
    path = host["model_path"]
    # as Triton's stub does (pb_stub.cc, r24.10): the version folder and the model's folder are
    # appended, so modules next to model.py are importable by the model without shadowing the
    # standard library or installed packages (a model's queue.py is not the worker's queue)
    version_dir = os.path.dirname(path)
    for folder in (version_dir, os.path.dirname(version_dir)):
        if folder not in sys.path:
            sys.path.append(folder)
    spec = importlib.util.spec_from_file_location("model", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"'{path}' is not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules["model"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as e:  # model code may raise anything, SystemExit included
        raise ModelRaised(python_error_text(e)) from None
    model_cls = getattr(module, "TritonPythonModel", None)
    if model_cls is None:
        # Triton's text (it imports the file as module "<version>.model")
        version = os.path.basename(version_dir)
        raise ModelRaised(f"AttributeError: module '{version}.model' has no attribute 'TritonPythonModel'")
    return model_cls


def _pb_utils():
    """The model's ``triton_python_backend_utils`` (on sys.path in the instance process
    only, where ``_load_module`` put it)."""
    import triton_python_backend_utils  # type: ignore[import-not-found]

    return triton_python_backend_utils


def python_error_text(e: BaseException) -> str:
    """An exception as Triton's stub reports it (pybind11's ``error_already_set::what()``):
    ``Type: message``, then the model's frames, innermost first (the host's own frames and
    the import machinery's left out, as Triton's C++ callers show none)."""
    lines = [f"{type(e).__name__}: {e}", "", "At:"]
    for frame in reversed(traceback.extract_tb(e.__traceback__)):
        if frame.filename == __file__ or frame.filename.startswith("<frozen"):
            continue
        lines.append(f"  {frame.filename}({frame.lineno}): {frame.name}")
    return "\n".join(lines) + "\n"


class ModelRaised(Exception):
    """Model code raised (importing model.py, in initialize or execute): ``triton_text`` is
    how Triton reports it; from execute, every request of the batch fails with it."""

    def __init__(self, text: str):
        super().__init__(text)
        self.triton_text = text


class PythonModelHost:
    def __init__(self, args: dict, version_dir: str, instance_index: int, backend_config: dict | None = None):
        host = backend_config or {}
        self.args = args
        self.instance_name = args["model_instance_name"]
        self.model_name = args["model_name"]
        self.decoupled = bool(host.get("decoupled"))
        self.model_config = json.loads(args["model_config"])
        self._loop: asyncio.AbstractEventLoop | None = None
        model_cls = _load_module(host)
        pb_utils = _pb_utils()

        self.pb = pb_utils
        try:
            self.model = model_cls()
            init = getattr(self.model, "initialize", None)
            if init is not None:
                init(dict(args))
        except BaseException as e:
            raise ModelRaised(python_error_text(e)) from None
        # whether the server asks is_ready() at all (Triton's stub notes it after initialize:
        # a model without one costs a readiness check no round trip)
        self.load_result = {"is_ready": callable(getattr(self.model, "is_ready", None))}
        self._ready_loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------------ readiness
    def is_ready(self) -> bool:
        """The model's ``is_ready()`` (sync or ``async def``), on the worker's readiness thread
        (the model may be inside execute meanwhile, as under Triton's stub). Anything but a
        ``bool`` is an error, in Triton's text; so is what it raises, as Triton's stub reports
        an exception (``python_error_text``)."""
        check = getattr(self.model, "is_ready", None)
        if check is None:
            return True
        try:
            result = check()
            if inspect.iscoroutine(result):
                # its own loop, on this thread: execute's loop may be running on the main one
                if self._ready_loop is None:
                    self._ready_loop = asyncio.new_event_loop()
                result = self._ready_loop.run_until_complete(result)
        except BaseException as e:
            raise ModelRaised(python_error_text(e)) from None
        if not isinstance(result, bool):
            raise ModelRaised("is_ready() must return a boolean value")
        return result

    # ------------------------------------------------------------------ execute
    def execute_requests(self, messages: list, decoupled: bool, exec_id: int = 0, first: int = 0) -> list | None:
        """``messages``: the requests at positions ``first``, ``first + 1``, ... of batch
        ``exec_id`` (how the engine names a request when the model asks about it)."""
        pb = self.pb
        worker = current()
        get = worker.get
        requests = []
        for index, (request_id, flags, parameters, inputs, requested, correlation_id) in enumerate(messages, first):
            # a decoupled model may read its inputs after execute returns (from its own
            # threads): those get their own copy; others are views on the engine's segment
            tensors = [pb.Tensor(name, get(ref, copy=decoupled)) for name, ref in inputs]
            requests.append(
                pb.InferenceRequest.from_server(
                    tensors, request_id, flags, parameters, requested, correlation_id, (exec_id, index), decoupled, self
                )
            )
        try:
            responses = self.model.execute(requests)
            if inspect.iscoroutine(responses):
                # ``async def execute`` (for awaiting BLS ``async_exec``): run on this
                # process's own loop, kept for the next batches
                if self._loop is None:
                    self._loop = asyncio.new_event_loop()
                responses = self._loop.run_until_complete(responses)
        except BaseException as e:
            raise ModelRaised(
                f"Failed to process the request(s) for model '{self.instance_name}', message: " + python_error_text(e)
            ) from None
        if decoupled:
            if responses is not None:
                raise ModelRaised(
                    f"Python model '{self.instance_name}' is using the decoupled mode and the execute "
                    "function must return None."
                )
            return None
        if not isinstance(responses, (list, tuple)) or len(responses) != len(requests):
            got = len(responses) if isinstance(responses, (list, tuple)) else type(responses).__name__
            raise ModelRaised(
                f"Failed to process the request(s) for model '{self.instance_name}', message: "
                f"Number of InferenceResponse objects do not match the number of InferenceRequest objects. "
                f"InferenceRequest(s) size is:{len(requests)}, and InferenceResponse(s) size is:{got}\n"
            )
        for response in responses:
            if not isinstance(response, pb.InferenceResponse):
                raise ModelRaised(
                    f"Failed to process the request(s) for model '{self.instance_name}', message: Expected an "
                    f"'InferenceResponse' object in the execute function return list, found type "
                    f"'{type(response)}'."
                )
        return [self.encode_response(response, request) for response, request in zip(responses, requests)]

    def encode_response(self, response: Any, request) -> tuple:
        """("ok", [(name, TensorRef)]) with the outputs the request asked for, or ("error", status, text)."""
        pb = self.pb
        if not isinstance(response, pb.InferenceResponse):
            return ("error", "INTERNAL", f"Expected an InferenceResponse object, got {type(response).__name__}")
        if response.has_error():
            error = response.error()
            return ("error", error.status_name(), error.message())
        wanted = request.requested_output_names()
        put = current().put
        outputs = []
        for tensor in response.output_tensors():
            if wanted and tensor.name() not in wanted:
                continue
            outputs.append((tensor.name(), put(tensor.as_numpy())))
        return ("ok", outputs)

    def send_response(self, index: tuple[int, int], response, flags: int, request) -> None:
        """A decoupled request's response (from any thread of the model); ``index`` is
        (its batch's exec id, its place in the batch)."""
        if response is None:
            current().send(("response", index, None, None, flags))
            return
        encoded = self.encode_response(response, request)
        if encoded[0] == "error":
            current().send(("response", index, None, encoded[1:], flags))
        else:
            current().send(("response", index, encoded[1], None, flags))

    def close(self) -> None:
        finalize = getattr(self.model, "finalize", None)
        if finalize is not None:
            finalize()


class AutoCompleter:
    """Runs the model's ``auto_complete_config`` at load; its result is the completed config."""

    def __init__(self, args: dict, version_dir: str, instance_index: int, backend_config: dict | None = None):
        model_cls = _load_module(backend_config or {})
        pb_utils = _pb_utils()

        complete = getattr(model_cls, "auto_complete_config", None)
        self.load_result = None
        if complete is not None:
            config = pb_utils.ModelConfig(args["model_config"])
            result = complete(config)
            self.load_result = (result if result is not None else config).as_dict()

    def close(self) -> None:
        return None
