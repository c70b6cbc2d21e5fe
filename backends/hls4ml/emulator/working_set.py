"""How much memory the emulation of a batch takes besides its inputs and outputs, and how many
rows it may therefore work through at once.

Every layer's output, and the temporaries its op makes (an im2col gather of the input's
windows, an int64 copy for a layer without a float64 form, a cast's clip), are numpy arrays of
the rows in flight: for a 512x512x3 separable network 280 MiB a row, 14 times the row's FP32
input and output (19 MB), so the 53 rows its pack budget allows would take 14.5 GiB at once.
The emulation therefore works through a batch in pieces whose arrays fit a byte budget
(``FixedPointModel.working_budget``, the serving backend's: see ``backend_budget``).

What one row takes is measured, not estimated: the emulation runs one row with ``tracemalloc``
on (numpy reports every array's allocation to it), from a fresh set of scratch buffers, and the
peak of traced bytes is the row's working set. Scratch buffers (``FixedPointModel._buffer``)
outlive the call: a piece of another size keeps the previous size's until it replaces them, so
their bytes are counted twice in the bound. The row is a fixed, saturating one, so that layers
whose casts wrap only for out-of-range values take their wrap temporaries too.

tracemalloc sees the whole process: another thread allocating while the row runs inflates the
figure (never deflates it), which only makes pieces smaller. It is measured twice and the
smaller figure kept, so that one burst elsewhere does not shrink every piece of the model.
"""

from __future__ import annotations

import threading
import tracemalloc
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..fixed_point import FixedType

#: the budget of a FixedPointModel nobody sized: pack's default batch memory budget
DEFAULT_BUDGET_BYTES = 1 << 30
#: the least budget a serving backend gives: a model whose batches are small (FACILE: 68 bytes a
#: row) still works through thousands of rows at once, as the cache-sized pieces of model.py want
FLOOR_BYTES = 64 << 20
#: measurements of one row (the smallest is kept, see the module docstring)
MEASUREMENTS = 2

#: one measurement at a time: tracemalloc is process-wide
_MEASURING = threading.Lock()


def _format(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


@dataclass(frozen=True)
class WorkingSet:
    """What the emulation of one piece of a batch takes: ``rows`` rows at once, each
    ``row_bytes`` of numpy arrays at most (``scratch_row_bytes`` of them scratch buffers that
    stay allocated between calls), within ``budget`` bytes when one row fits it."""

    row_bytes: int
    scratch_row_bytes: int
    rows: int
    budget: int

    def piece_bytes(self, rows: int) -> int:
        """The most a piece of ``rows`` rows holds: its arrays, and the scratch buffers of
        another piece size."""
        return rows * (self.row_bytes + self.scratch_row_bytes)

    def describe(self, rows: int) -> str:
        """The log's words for pieces of at most ``rows`` rows (``FixedPointModel.piece_rows``)."""
        scratch = (
            f", {_format(self.scratch_row_bytes)} of it scratch kept between calls" if self.scratch_row_bytes else ""
        )
        return (
            f"the numpy emulation's intermediates, at most {_format(self.piece_bytes(rows))}: {rows} row(s) at "
            f"a time at most ({_format(self.row_bytes)} a row, measured at load{scratch})"
        )


def backend_budget(max_batch_size: int, row_io_bytes: int) -> int:
    """The budget a serving backend gives the emulation: what its config lets one batch's inputs
    and outputs take (pack sized max_batch_size to its batch memory budget), at least
    ``FLOOR_BYTES``."""
    return max(FLOOR_BYTES, max(1, max_batch_size) * row_io_bytes)


class RowRunner(Protocol):
    """What ``measure`` needs of a model (``FixedPointModel``): its input and a way to run one
    row from fresh scratch buffers."""

    input_type: FixedType
    n_in: int

    def run_fresh(self, row: np.ndarray) -> int: ...


def measure(model: RowRunner, budget: int) -> WorkingSet:
    """Run one row through ``model`` (see the module docstring) and size its pieces to ``budget``.
    The model records the widest array a row makes meanwhile (``FixedPointModel.run_fresh``)."""
    info = np.finfo(np.float64)
    scale = float(2.0 ** min(60, max(0, model.input_type.integer)))
    row = np.random.default_rng(0).standard_normal((1, model.n_in)) * scale
    row = np.clip(row, info.min, info.max)
    peaks, scratch = [], []
    for _ in range(MEASUREMENTS):
        with _MEASURING:
            started = not tracemalloc.is_tracing()
            if started:
                tracemalloc.start()
            try:
                tracemalloc.reset_peak()
                base = tracemalloc.get_traced_memory()[0]
                scratch.append(model.run_fresh(row))
                peaks.append(max(0, tracemalloc.get_traced_memory()[1] - base))
            finally:
                if started:
                    tracemalloc.stop()
    row_bytes = max(1, min(peaks))
    scratch_bytes = min(scratch)
    rows = max(1, budget // (row_bytes + scratch_bytes))
    return WorkingSet(row_bytes, scratch_bytes, rows, budget)


__all__ = ["DEFAULT_BUDGET_BYTES", "FLOOR_BYTES", "WorkingSet", "backend_budget", "measure"]
