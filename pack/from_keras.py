"""Keras 3 sources: ``--keras MODEL.keras``.

Contract: :func:`load` reads the saved model (choosing Keras' backend first: torch when
TensorFlow is absent); :func:`to_hls` converts it with hls4ml's Keras converter;
:func:`export_reference` writes the float reference ``model.onnx`` with Keras' own exporter.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from .hls_config import hls_config
from .request import PackError, PackRequest


def choose_backend() -> None:
    """Keras 3 picks its backend when imported (KERAS_BACKEND, default tensorflow). Without
    tensorflow installed, use torch (which fpgaserve's pack extra installs); a user's choice wins."""
    if "KERAS_BACKEND" not in os.environ and importlib.util.find_spec("tensorflow") is None:
        os.environ["KERAS_BACKEND"] = "torch"


def load(path: str):
    if importlib.util.find_spec("keras") is None:
        raise PackError("--keras needs Keras 3 installed (pip install 'fpgaserve[keras]')")
    choose_backend()
    import keras

    return keras.models.load_model(path)


def to_hls(hls4ml: Any, model, req: PackRequest, kwargs: dict):
    generated = hls4ml.utils.config_from_keras_model(
        model,
        granularity=req.granularity,
        backend=kwargs["backend"],  # the layer defaults of the backend that converts
        default_precision=req.default_precision,
    )
    return hls4ml.converters.convert_from_keras_model(model, hls_config=hls_config(req, generated), **kwargs)


def export_reference(model, out: Path) -> None:
    import warnings

    import numpy as np

    shape = [1 if d is None else int(d) for d in model.inputs[0].shape]
    with warnings.catch_warnings():
        # the exporter warns about tracing details that do not change the graph
        warnings.simplefilter("ignore")
        model(np.zeros(shape, np.float32))  # Keras exports only models that have been called
        model.export(str(out), format="onnx", verbose=False)
