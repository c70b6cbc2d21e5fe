"""Backends execute one batch of numpy arrays; they never see protobuf or gRPC.

A backend class is registered under the name a config.pbtxt uses (``backend: "numpy"``,
or a platform such as ``onnxruntime_onnx`` resolved to ``onnxruntime``). Imports are lazy so
a missing optional dependency (onnxruntime, pynq) only affects the models that need it.
"""

from __future__ import annotations

import importlib

from .base import Backend, BackendError, TensorDescription

_REGISTRY = {
    "numpy": ("fpgaserve.backends.numpy_backend", "NumpyBackend"),
    "onnxruntime": ("fpgaserve.backends.onnxruntime_backend", "OnnxRuntimeBackend"),
}


def backend_class(name: str) -> type[Backend]:
    try:
        module_name, class_name = _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise BackendError(f"unknown backend '{name}' (available: {known})") from None
    return getattr(importlib.import_module(module_name), class_name)


__all__ = ["Backend", "BackendError", "TensorDescription", "backend_class"]
