"""PyTorch sources: ``--pytorch FILE.pt``, ``--pytorch file.py:Factory``, or an in-memory module.

Contract: :func:`load` returns the ``nn.Module`` (in eval mode) a spec names; :func:`to_hls`
converts one with hls4ml's PyTorch converter (it traces the module, so ``--input-shape`` is
required) and returns the unwritten ModelGraph; :func:`export_reference` writes the float
reference ``model.onnx`` with a dynamic batch axis. Errors a user can fix are PackError.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

from .hls_config import hls_config
from .request import PackError, PackRequest


def load(spec: str, state_dict: str | None = None):
    import torch

    if ":" in spec and spec.split(":", 1)[0].endswith(".py"):
        # path/to/file.py:Factory -- a module class or function building the network
        path, attr = spec.split(":", 1)
        module_spec = importlib.util.spec_from_file_location(Path(path).stem, path)
        if module_spec is None or module_spec.loader is None:
            raise PackError(f"cannot import {path}")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_spec.name] = module
        module_spec.loader.exec_module(module)
        try:
            model = getattr(module, attr)()
        except AttributeError:
            raise PackError(f"{path} has no '{attr}'") from None
    else:
        # a whole module saved with torch.save(model): unpickling runs code, so only pack
        # files you trust (weights_only=False is required for a full module)
        try:
            model = torch.load(spec, weights_only=False, map_location="cpu")
        except Exception as e:
            raise PackError(f"cannot load the PyTorch model {spec}: {type(e).__name__}: {e}") from None
    if state_dict:
        model.load_state_dict(torch.load(state_dict, map_location="cpu"))
    if not isinstance(model, torch.nn.Module):
        raise PackError(f"{spec} is a {type(model).__name__}, not a torch.nn.Module")
    return model.eval()


def module_of(req: PackRequest):
    """The request's module: the in-memory one, else loaded from --pytorch."""
    if req.pytorch_module is not None:
        return req.pytorch_module.eval()
    assert req.pytorch is not None  # the caller dispatched on one of the two
    return load(req.pytorch, req.state_dict)


def to_hls(hls4ml: Any, model, req: PackRequest, kwargs: dict):
    if not req.input_shape:
        raise PackError("--pytorch needs --input-shape (the shape of one sample, e.g. 47 or 16)")
    generated = hls4ml.utils.config_from_pytorch_model(
        model,
        input_shape=tuple(req.input_shape),
        granularity=req.granularity,
        backend=kwargs["backend"],  # the layer defaults of the backend that converts
        default_precision=req.default_precision,
    )
    return hls4ml.converters.convert_from_pytorch_model(model, hls_config=hls_config(req, generated), **kwargs)


def export_reference(model, input_shape: tuple[int, ...], out: Path) -> None:
    import warnings

    import torch

    with warnings.catch_warnings():
        # the TorchScript exporter warns about its own deprecation on every call
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (torch.zeros(1, *input_shape),),
            str(out),
            dynamo=False,
            input_names=["input"],
            output_names=["output"],
            dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
            opset_version=17,
        )
