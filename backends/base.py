"""The backend contract.

One ``Backend`` object is one model *instance* (Triton's instance_group count creates that
many). The scheduler calls ``execute`` from the instance's own worker thread, never from
the event loop, and never concurrently on one instance.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import NamedTuple, overload

import numpy as np


class BackendError(Exception):
    """Load-time problem with a model's files or settings (the model becomes UNAVAILABLE)."""


class DeviceUnavailableError(Exception):
    """A batch failed because its device did not answer (kernel timeout, card lost).

    Raised from ``execute``: that batch fails with gRPC UNAVAILABLE (Triton's code for "try
    again"), the instance stays loaded and keeps taking batches once its device is back.
    """


class TensorDescription(NamedTuple):
    """An input/output as a backend knows it, for auto-completing config.pbtxt.

    ``datatype`` is the Triton wire name ("FP32"); ``dims`` exclude the batch dimension
    when ``batched`` is true (the graph's first dimension is dynamic).
    """

    name: str
    datatype: str
    dims: tuple[int, ...]


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
    #: whether loading a model runs code from its files (a Python module, a compiled
    #: simulation, a bitstream): such files are never accepted from clients unless the server
    #: allows it (RepositoryModelLoad ``file:`` uploads, --allow-model-code-upload)
    executes_model_files: bool = False

    def __init__(self, config: dict, version_dir: str, instance_index: int, backend_config: dict | None = None):
        self.config = config
        self.version_dir = version_dir
        self.instance_index = instance_index
        # server-wide settings for this backend (tritonserver's --backend-config=<backend>,k=v)
        self.backend_config = backend_config or {}

    @classmethod
    def describe_io(
        cls, config: dict, version_dir: str
    ) -> tuple[list[TensorDescription], list[TensorDescription], bool] | None:
        """(inputs, outputs, supports_batching) read from the model files, or None.

        Called when config.pbtxt omits inputs or outputs (Triton's auto-complete).
        """
        return None

    @abstractmethod
    def execute(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run one batch. Arrays carry the leading batch dim when max_batch_size > 0."""

    def health(self) -> str | None:
        """None while this instance can serve, else why not (e.g. its device awaits a reset).

        Called by readiness checks on the event loop: cheap and never blocking (a backend may
        start a recovery attempt from here, on its own thread). A model version is ready while
        any of its instances is healthy."""
        return None

    def location(self) -> str | None:
        """Where this instance computes, for log lines (e.g. "card 2 cu_1"); None: nowhere
        in particular (the host's CPU)."""
        return None

    def close(self) -> None:  # noqa: B027  (optional hook: a backend without resources keeps this)
        """Release resources; called once when the model version is unloaded."""
