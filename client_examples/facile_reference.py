"""Helpers shared by the client examples: FACILE's names, random "channels", and a numpy
re-computation of the served network so every example can check the server's answer.

FACILE (the CMS HCAL energy regression) takes one FP32 row of 47 features per HCAL channel
and returns one FP32 value per channel. The bundled ``bitstreams/facile`` model has
synthetic weights, stored next to the served model in ``1/weights.npz`` as
``W1, b1, W2, b2, W3, b3`` (layer k computes ``x @ Wk + bk``, ReLU between layers), so the
expected output of any request can be computed here, row by row.

This module only uses numpy; it is imported by the example scripts in this folder.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

MODEL = "facile"
INPUT = "input"
OUTPUT = "output/BiasAdd"
FEATURES = 47

# The weights of the bundled model, relative to this file (client_examples/ sits beside bitstreams/).
DEFAULT_WEIGHTS = Path(__file__).resolve().parent.parent / "bitstreams" / "facile" / "1" / "weights.npz"

# The served FACILE is hls4ml firmware: ap_fixed<16,6> weights and activations, on a card or
# in its bit-exact emulation (--fpga-mode csim/numpy). Its outputs differ from this float
# re-computation by the quantization: at most 0.051 on 16000 unit-scale rows, outputs
# spanning -2.6..4.4 (tests/benchmarks/bench_fpga_modes.py --part 1; see docs/hls4ml.md). A wrong
# row, a wrong weight or a shifted batch is off by O(1). Against --fpga-mode onnx (the float
# reference) --atol 1e-4 holds.
RTOL = 0.0
ATOL = 0.1


def add_reference_args(parser) -> None:
    """The options every FACILE example shares for its correctness check."""
    parser.add_argument(
        "--weights",
        default=str(DEFAULT_WEIGHTS),
        help="weights.npz of the served FACILE model, used to compute the expected outputs "
        "(default: the bundled bitstreams/facile/1/weights.npz). Pass '' to only check "
        "shapes and finiteness, e.g. against a server with other weights.",
    )
    parser.add_argument("--rtol", type=float, default=RTOL, help="relative tolerance of the check")
    parser.add_argument("--atol", type=float, default=ATOL, help="absolute tolerance of the check")


def random_channels(rows: int, rng: np.random.Generator) -> np.ndarray:
    """``rows`` HCAL channels: FP32 [rows, 47] with values of order one."""
    return rng.standard_normal((rows, FEATURES), dtype=np.float32)


class FacileReference:
    """Expected FACILE outputs, or (without a weights file) shape/finiteness checks only."""

    def __init__(self, weights: str | None, rtol: float = RTOL, atol: float = ATOL):
        self.rtol = rtol
        self.atol = atol
        self.layers = None
        if weights:
            path = Path(weights)
            if not path.is_file():
                raise SystemExit(f"error: weights file not found: {path} (pass --weights '' to skip the value check)")
            with np.load(path) as w:
                self.layers = [(w[f"W{k}"], w[f"b{k}"]) for k in (1, 2, 3)]

    @property
    def exact(self) -> bool:
        return self.layers is not None

    def expected(self, x: np.ndarray) -> np.ndarray:
        h = x.astype(np.float64)
        for i, (w, b) in enumerate(self.layers):
            h = h @ w.astype(np.float64) + b.astype(np.float64)
            if i < len(self.layers) - 1:
                h = np.maximum(h, 0.0)
        return h.astype(np.float32)

    def check(self, x: np.ndarray, y: np.ndarray | None) -> str | None:
        """None if ``y`` is the right answer for ``x``, else a one-line description of what is wrong."""
        if y is None:
            return f"no '{OUTPUT}' in the response"
        if y.dtype != np.float32:
            return f"output dtype is {y.dtype}, expected float32"
        if y.shape != (x.shape[0], 1):
            return f"output shape is {list(y.shape)}, expected [{x.shape[0]}, 1]"
        if not np.all(np.isfinite(y)):
            return "output has non-finite values"
        if self.layers is None:
            return None
        want = self.expected(x)
        bad = ~np.isclose(y, want, rtol=self.rtol, atol=self.atol)
        if bad.any():
            row = int(np.argwhere(bad)[0][0])
            return (
                f"{int(bad.sum())} of {y.size} outputs differ from the reference, first at row {row}: "
                f"got {float(y[row, 0])!r}, expected {float(want[row, 0])!r}"
            )
        return None


def summary(y: np.ndarray) -> str:
    return (
        f"shape {list(y.shape)} {y.dtype}, mean {float(y.mean()):+.4f}, std {float(y.std()):.4f}, "
        f"min {float(y.min()):+.4f}, max {float(y.max()):+.4f}"
    )
