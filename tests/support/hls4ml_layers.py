"""Helpers of the layer tests (tests/hls4ml/test_hls4ml_layers*.py, test_hls4ml_io_stream.py):
models converted and compiled by hls4ml itself, and the emulator compared with their
C-simulation bit for bit.

torch, keras and hls4ml are imported where they are used: the test modules skip
(``pytest.importorskip``) before any of this runs when they are missing.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from fpgaserve.backends.hls4ml.emulator import FixedPointModel
from fpgaserve.backends.hls4ml.project import Hls4mlProject

PRECISION = "ap_fixed<16,6>"


def convert_torch(model, shape, outdir: Path, tweak=None):
    """A PyTorch module -> hls4ml Vivado io_parallel project in ``outdir``, compiled (its C-simulation)."""
    import hls4ml

    cfg = hls4ml.utils.config_from_pytorch_model(
        model, input_shape=shape, granularity="name", backend="Vivado", default_precision=PRECISION
    )
    if tweak:
        tweak(cfg["LayerName"])
    hm = hls4ml.converters.convert_from_pytorch_model(
        model, hls_config=cfg, backend="Vivado", io_type="io_parallel", output_dir=str(outdir)
    )
    hm.compile()
    return hm


def keras_on_torch():
    """Keras 3 on its torch backend, or skip saying why."""
    os.environ.setdefault("KERAS_BACKEND", "torch")
    keras = pytest.importorskip("keras", reason="the keras extra (pip install -e '.[keras]') is not installed")
    if keras.backend.backend() != "torch":
        pytest.skip(f"keras runs on {keras.backend.backend()}, these tests use its torch backend")
    return keras


def no_auto_precision(layers) -> None:
    """Every 'auto' precision -> PRECISION: hls4ml 1.3 cannot infer a Dot's result and
    accumulator together (``_infer_dot_precision`` asserts), and auto merges grow past 64 bits."""
    for layer in layers.values():
        precision = layer.get("Precision")
        if isinstance(precision, dict):
            for key, value in precision.items():
                if isinstance(value, str) and value == "auto":
                    precision[key] = PRECISION


def bit_exact_inputs(n_in: int) -> np.ndarray:
    """Rows that exercise an ap_fixed<16,6> network: random, saturating, negative, zero, on and between grid points."""
    rng = np.random.default_rng(n_in)
    lsb = 2.0**-10
    grid = rng.integers(-(2**15), 2**15, size=(40, n_in)) * lsb  # ap_fixed<16,6> grid points
    return np.concatenate(
        [
            rng.normal(0, 1, size=(400, n_in)),  # random
            rng.normal(0, 40, size=(150, n_in)),  # saturating / wrapping: beyond [-32, 32)
            -np.abs(rng.normal(0, 4, size=(100, n_in))),  # negative only
            np.zeros((3, n_in)),  # zeros
            grid,
            grid + lsb / 2,  # halfway between grid points
            np.full((1, n_in), 31.999),
            np.full((1, n_in), -32.0),
        ]
    )


def assert_bit_exact(name: str, hm, outdir: Path, kinds: set[str]) -> FixedPointModel:
    """The emulator of ``outdir`` has the layer ``kinds`` and equals ``hm.predict`` (the C-simulation)
    bit for bit on :func:`bit_exact_inputs`, on each of its paths."""
    model = FixedPointModel(Hls4mlProject.load(outdir))
    found = {layer.kind for layer in model.graph.layers}
    assert kinds <= found, f"{name}: expected {kinds - found} among {found}"
    x = bit_exact_inputs(model.n_in)
    ref = np.asarray(hm.predict(np.ascontiguousarray(x))).reshape(len(x), -1)
    assert len(np.unique(ref)) > 50, f"{name}: the firmware's outputs barely vary, the comparison proves little"
    # each path really runs: predict (chunked, whichever chain the types allow), the int64
    # chain, and the float64 chain on its own where the types fit it
    paths = {"predict": model.predict(x), "int64": model._predict_int64(x.reshape(len(x), -1))}
    if model._f64:
        paths["float64"] = model._predict_f64(x.reshape(len(x), -1))
    for path, got in paths.items():
        assert got.shape == ref.shape
        bad = np.flatnonzero((got.view(np.uint64) != ref.view(np.uint64)).any(axis=1))
        assert bad.size == 0, f"{name} ({path}): {bad.size} rows differ, first {got[bad[0]]} vs {ref[bad[0]]}"
    return model
