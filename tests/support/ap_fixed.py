"""Inputs that probe ap_fixed<16,6>, the input type of the bundled hls4ml models (FACILE, the jet
tagger): range [-32, 32), step 2^-10."""

from __future__ import annotations

import numpy as np

LSB = 2.0**-10
STEPS = (0.0, -0.0, LSB, -LSB, LSB / 2, -LSB / 2)  # zero of both signs, one step, half a step
# the ends of the range and just past them, then magnitudes that saturate or wrap
BEYOND = (31.999, 32.0, -32.0, -32.001, 40.0, -40.0, 100.0, -100.0, 1e4, -1e4)


def grid_rows(rng: np.random.Generator, features: int, n: int = 40) -> list[np.ndarray]:
    """``n`` random FP32 rows exactly on the grid, then the same rows a quarter step above and below."""
    grid = (rng.integers(-(2**15), 2**15, (n, features)) * LSB).astype(np.float32)
    return [grid, grid + np.float32(LSB / 4), grid - np.float32(LSB / 4)]
