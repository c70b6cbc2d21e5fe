"""Backends execute one batch of numpy arrays; they never see the wire (no request message,
no gRPC or HTTP), only their model's configuration (as a dict) and its files.

This package is the registry: a backend class is registered under the name a config.pbtxt
uses (``backend: "numpy"``, or a platform such as ``onnxruntime_onnx`` resolved to
``onnxruntime``), by module and class name, and loaded by name (``backend_class``): the engine
finds backends only here, and a missing optional dependency (onnxruntime, pynq) only affects
the models that need it. The contract is base.py; code fpgaserve hosts in instance processes
goes through hosting/. A backend imports the contract, the registry, hosting and the
server's configuration and error types, never another backend's module nor the engine.
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
