"""Backends execute one batch of numpy arrays; they never see protobuf or gRPC.

A backend class is registered under the name a config.pbtxt uses (``backend: "numpy"``,
or a platform such as ``onnxruntime_onnx`` resolved to ``onnxruntime``). Imports are lazy so
a missing optional dependency (onnxruntime, pynq) only affects the models that need it.
"""

from __future__ import annotations

import importlib

from .base import Backend, BackendError, BackendRequest, DeviceUnavailableError, TensorDescription

_REGISTRY = {
    "numpy": ("fpgaserve.backends.numpy_backend", "NumpyBackend"),
    "onnxruntime": ("fpgaserve.backends.onnxruntime_backend", "OnnxRuntimeBackend"),
    "hls4ml": ("fpgaserve.backends.hls4ml.backend", "Hls4mlBackend"),
    "python": ("fpgaserve.backends.python.backend", "PythonBackend"),
}


# Device telemetry collectors (prometheus_client-style objects with collect()) that backends
# register when they open a device; the server's /metrics renders them with every scrape.
_TELEMETRY: list = []


def register_telemetry(collector) -> None:
    if collector not in _TELEMETRY:
        _TELEMETRY.append(collector)


def telemetry_collectors() -> list:
    return list(_TELEMETRY)


def backend_class(name: str) -> type[Backend]:
    try:
        module_name, class_name = _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise BackendError(f"unknown backend '{name}' (available: {known})") from None
    return getattr(importlib.import_module(module_name), class_name)


__all__ = [
    "Backend",
    "BackendError",
    "BackendRequest",
    "DeviceUnavailableError",
    "TensorDescription",
    "backend_class",
    "register_telemetry",
    "telemetry_collectors",
]
