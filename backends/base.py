"""The backend contract.

One ``Backend`` object is one model *instance* (Triton's instance_group count creates that
many). The scheduler calls ``execute`` from the instance's own worker thread, never from
the event loop, and never concurrently on one instance.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, NamedTuple, overload

import numpy as np


class BackendError(Exception):
    """Load-time problem with a model's files or settings (the model becomes UNAVAILABLE)."""


class DeviceUnavailableError(Exception):
    """A batch failed because its device did not answer (kernel timeout, card lost).

    Raised from ``execute``: that batch fails with gRPC UNAVAILABLE (Triton's code for "try
    again"), the instance stays loaded and keeps taking batches once its device is back.
    """


class ExecutionFailed(Exception):
    """An answer of ``execute_requests(..., alone=True)``: that request's own execution failed
    (the model raised), which counts as a failed execution, unlike a response carrying an
    error. ``error`` is what the request fails with."""

    def __init__(self, error: Exception):
        super().__init__(str(error))
        self.error = error


class TensorDescription(NamedTuple):
    """An input/output as a backend knows it, for auto-completing config.pbtxt.

    ``datatype`` is the Triton wire name ("FP32"); ``dims`` exclude the batch dimension
    when ``batched`` is true (the graph's first dimension is dynamic).
    """

    name: str
    datatype: str
    dims: tuple[int, ...]


class BackendRequest(NamedTuple):
    """One request of a batch, for a backend that takes the batch as its list of requests
    (``Backend.request_level``; Triton's Python backend hands ``execute`` the requests, each
    with its own inputs, and answers each on its own). Protocol-free, like the arrays."""

    inputs: dict[str, np.ndarray]
    requested_outputs: tuple[str, ...]
    parameters: dict
    id: str
    flags: int  # Triton's TRITONSERVER_REQUEST_FLAG_SEQUENCE_START (1) / _END (2)
    correlation_id: int | str
    #: whether the client has withdrawn the request (cancelled its RPC or stream, or its
    #: deadline passed): a model may then stop early (Triton's ``is_cancelled()``); its answer
    #: is discarded. None when nobody can withdraw it (warm-up).
    cancelled: Callable[[], bool] | None = None
    #: a request another model's instance made (BLS): the server's handle of that call, which a
    #: backend hosting model code keeps while it serves it (``ProcessBackend.serving_calls``),
    #: so that the server can tell a call that waits on its own chain; None for a client's.
    caller: Any = None


def path_inside(root: str | os.PathLike, base: str | os.PathLike, name: str, what: str) -> str:
    """``name`` -- a path a model config gives, relative to ``base`` -- as a real path that
    stays inside ``root`` (the model's directory), or BackendError.

    Configs may come from clients (RepositoryModelLoad's ``config`` override), so a name is
    a relative path without ``..`` components, and after symlinks are resolved it must still
    be inside the model's directory (a model directory that is itself a symlink is fine)."""
    if not name or "\x00" in name or any(c < " " for c in name):
        shown = name.encode("unicode_escape").decode("ascii")
        raise BackendError(f"{what} '{shown}' is not a valid file name")
    parts = name.replace("\\", "/").split("/")
    if os.path.isabs(name) or ".." in parts:
        raise BackendError(f"{what} '{name}' must be a path inside the model directory (no absolute path, no '..')")
    real_root = os.path.realpath(root)
    real = os.path.realpath(os.path.join(base, name))
    if real != real_root and not real.startswith(real_root + os.sep):
        raise BackendError(f"{what} '{name}' resolves (through a symbolic link) to a file outside the model directory")
    return real


def version_file(version_dir: str, name: str, what: str) -> str:
    """A file a config names in a version folder; it must stay inside the model directory."""
    return path_inside(os.path.dirname(os.path.abspath(version_dir)), version_dir, name, what)


@overload
def config_parameter(config: dict, key: str, default: str) -> str: ...
@overload
def config_parameter(config: dict, key: str, default: None = None) -> str | None: ...
def config_parameter(config: dict, key: str, default: str | None = None) -> str | None:
    """A config.pbtxt ``parameters { key: ... value: { string_value: ... } }`` entry (empty = unset)."""
    value = config.get("parameters", {}).get(key, {}).get("string_value")
    return default if value in (None, "") else value


class Backend(ABC):
    #: file the version folder must contain (used for the error message when it is absent)
    default_filename: str = ""
    #: how a missing model file is reported (``model_file``; ``{path}``: the file looked for)
    missing_model_file: str = "model file not found: {path}"
    #: whether loading a model runs code from its files (a Python module, a compiled
    #: simulation, a bitstream): such files are never accepted from clients unless the server
    #: allows it (RepositoryModelLoad ``file:`` uploads, --allow-model-code-upload)
    executes_model_files: bool = False

    #: the scheduler hands this backend each batch as its list of requests
    #: (``execute_requests``) instead of their merged inputs (``execute``)
    request_level: bool = False
    #: how many requests that each execute alone (no dynamic batcher) the scheduler may hand a
    #: request-level backend in one ``execute_requests(..., alone=True)`` call: a backend in
    #: another process carries them in one round trip and runs them one by one there
    carries_requests: int = 1
    #: what an instance holds besides its batch's arrays, for the load's memory line (None:
    #: nothing it counts); set at load by backends that know (an hls4ml emulation's pieces)
    memory_note: str | None = None

    def __init__(self, config: dict, version_dir: str, instance_index: int, backend_config: dict | None = None):
        self.config = config
        self.version_dir = version_dir
        self.instance_index = instance_index
        # server-wide settings for this backend (tritonserver's --backend-config=<backend>,k=v)
        self.backend_config = backend_config or {}

    @classmethod
    def model_file(cls, config: dict, version_dir: str) -> str:
        """The version's model file: the config's ``default_model_filename``, else the backend's
        ``default_filename``, in the version folder and inside the model directory (a config may
        come from a client); BackendError (``missing_model_file``) when it is not there."""
        filename = config.get("default_model_filename") or cls.default_filename
        path = version_file(version_dir, filename, "default_model_filename")
        if not os.path.isfile(path):
            raise BackendError(cls.missing_model_file.format(path=path))
        return path

    @classmethod
    def describe_io(
        cls, config: dict, version_dir: str
    ) -> tuple[list[TensorDescription], list[TensorDescription], bool] | None:
        """(inputs, outputs, supports_batching) read from the model files, or None.

        Called when config.pbtxt omits inputs or outputs (Triton's auto-complete).
        """
        return None

    @classmethod
    def auto_complete(cls, config: dict, version_dir: str) -> dict | None:
        """The whole config completed by the model itself (Triton's Python backend runs the
        model's ``auto_complete_config``), as the dict ``config`` is, or None to keep
        ``describe_io``'s completion. Called before ``describe_io``."""
        return None

    @classmethod
    def instance_process_by_default(cls, config: dict, version_dir: str, backend_config: dict) -> bool:
        """Whether this version's instances run in instance processes when its config does not
        say (parameter ``instance_process``): true where the backend runs code the operator
        brought and fpgaserve did not write (a compiled C-simulation), so that a crash of it
        fails its batch instead of the server. Our own code (numpy, ONNX Runtime, a card's
        runner) stays in the server's process, one hop less per batch."""
        return False

    #: "module:Class" of the ``ProcessBackend`` subclass that hosts this backend's instances in
    #: processes when its parent side has work of its own (accounting, the child's load
    #: report); "": ``hosting.hosted`` builds a plain one. A name, loaded when needed, as the
    #: registry loads backends: the host's module imports the backend's, not the other way
    instance_process_host: str = ""

    @abstractmethod
    def execute(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run one batch. Arrays carry the leading batch dim when max_batch_size > 0."""

    def execute_requests(self, requests: list[BackendRequest], alone: bool = False) -> list:
        """Run one batch given as its requests (``request_level`` backends): per request its
        outputs (a dict of arrays) or an ``Exception`` that fails only that request. Raising
        fails the whole batch. For a decoupled model the single request's answer is an
        iterator of output dicts, one per response, which the scheduler sends as they come;
        an ``Exception`` in it is an error response that fails neither the request nor the
        responses after it (a decoupled model may answer with errors between results).

        ``alone``: the requests are not a batch but each its own execution (at most
        ``carries_requests`` of them), run one after another; a request whose own execution
        failed is answered ``ExecutionFailed``."""
        raise NotImplementedError

    def health(self) -> str | None:
        """None while this instance can serve, else why not (e.g. its device awaits a reset).

        Called by readiness checks on the event loop: cheap and never blocking (a backend may
        start a recovery attempt from here, on its own thread). A model version is ready while
        any of its instances is healthy."""
        return None

    def instance_ready(self) -> str | None:
        """None while this instance is ready, else why not (e.g. its instance process is dead
        or restarting): Triton's ``TRITONBACKEND_ModelInstanceReady``. Unlike ``health``, where
        one serving instance keeps the version ready, a version is ready only while every one
        of its instances is (Triton's ``TritonModel::IsReady``). Cheap and never blocking: it
        runs on the event loop for each readiness request."""
        return None

    def has_ready_check(self) -> bool:
        """Whether ``check_ready`` asks something (it may then take a while)."""
        return False

    def check_ready(self) -> str | None:
        """The slow part of readiness, after ``instance_ready`` (e.g. a model's own
        ``is_ready()``, which Triton's Python backend asks with a 5 s limit): None while ready,
        else why not. Called on a worker thread for model-ready requests (and server-ready
        ones under --strict-readiness) where ``has_ready_check()``; it bounds its own wait."""
        return None

    def location(self) -> str | None:
        """Where this instance computes, for log lines (e.g. "card 2 cu_1"); None: nowhere
        in particular (the host's CPU)."""
        return None

    def close(self) -> None:  # noqa: B027  (optional hook: a backend without resources keeps this)
        """Release resources; called once when the model version is unloaded."""
