"""Fusions of the float64 chain (``registry.register_fusion``): calo_cnn's relu -> max pooling
pairs run as pooling first, relu on the window maxima. The fused chain must give the integers of
the unfused ops (the int64 chain, and the float64 chain with no fusion) on batches whose window
maxima fit the relu's type (the fused path) and on batches where some wrap (the fallback)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fpgaserve.backends.hls4ml.emulator import FixedPointModel, registry
from fpgaserve.backends.hls4ml.project import Hls4mlProject

CALO = Path(__file__).resolve().parents[2] / "bitstreams" / "calo_cnn" / "1"


@pytest.fixture(scope="module")
def models():
    fused = FixedPointModel(Hls4mlProject.load(str(CALO)))
    saved = dict(registry.FUSIONS)
    registry.FUSIONS.clear()
    try:
        plain = FixedPointModel(Hls4mlProject.load(str(CALO)))
    finally:
        registry.FUSIONS.update(saved)
    return fused, plain


def test_relu_max_pool_fused_equals_unfused(models):
    fused, plain = models
    # relu1 and relu2 pass through, their pools read the convolutions' outputs
    assert [fused._steps[k][3].__name__ for k in (1, 2, 4, 5)] == ["_pass_through", "relu_max_pool"] * 2
    assert plain._steps[2][3].__name__ == "max_pool_f64"
    rng = np.random.default_rng(7)
    for scale in (0.5, 2.0, 8.0, 300.0):  # 8 and above: some conv outputs wrap in relu's ap_fixed<16,6>
        for rows in (1, 9, 64):
            x = (rng.standard_normal((rows, fused.n_in)) * scale).astype(np.float32)
            x[0, :40] = 0.0
            want = plain.predict(x)
            assert np.array_equal(fused.predict(x), want), (scale, rows)
            assert np.array_equal(fused._predict_int64(x), want), (scale, rows)
