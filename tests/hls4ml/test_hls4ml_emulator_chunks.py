"""The float64 chain runs large batches in chunks of rows (``model.CHUNK_BYTES``) with scratch
buffers kept for two chunk sizes: the results must not depend on how a batch is cut."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fpgaserve.backends.hls4ml.emulator import FixedPointModel
from fpgaserve.backends.hls4ml.emulator import model as emulator_model
from fpgaserve.backends.hls4ml.project import Hls4mlProject

CALO = Path(__file__).resolve().parents[2] / "bitstreams" / "calo_cnn" / "1"


def test_chunked_batches_equal_whole_and_single_rows(monkeypatch):
    emu = FixedPointModel(Hls4mlProject.load(str(CALO)))
    rng = np.random.default_rng(3)
    # random, saturating (x 8) and zero rows, 1000 rows: 4 chunks of 250 rows (calo_cnn's widest
    # array is 784 values a row: 1.5 MiB / 6272 bytes = 250 rows a chunk)
    x = (rng.standard_normal((1000, emu.n_in)) * np.where(rng.random((1000, 1)) < 0.3, 8.0, 1.0)).astype(np.float32)
    x[::50] = 0.0
    chunked = emu.predict(x)
    assert emu._chunk_rows(x) == 250
    assert emu.predict(x[:3]).shape == (3, emu.n_out)  # a third batch size between two chunked calls
    assert np.array_equal(emu.predict(x), chunked)  # the reused buffers give the same answer
    rows = [emu.predict(x[i : i + 1])[0] for i in range(0, 1000, 37)]
    assert np.array_equal(np.array(rows), chunked[::37])
    monkeypatch.setattr(emulator_model, "CHUNK_BYTES", 1 << 40)  # one chunk
    assert np.array_equal(emu.predict(x), chunked)
    assert emu.predict(x.astype(np.float64)).shape == (1000, emu.n_out)
