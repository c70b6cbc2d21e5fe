"""What one hls4ml model instance holds for its batches: the bound its load logs and sets aside.

An instance runs one batch at a time: ``max_batch_size`` rows of the config's input and output
tensors (the scheduler gathers the inputs into one array, the runner writes the output array,
and in the engine's process the instance encodes a copy of the outputs for the wire:
``server/engine/memory.py``, whose load line this bound follows), and, while it works, what
its runner takes besides them:

* numpy: the emulation's intermediates, in pieces of rows within the budget
  (``emulator/working_set.py``, measured at load);
* csim: the float64 rows the C-simulation writes (and the converted input rows where the
  firmware takes another type) before they become the output's type, in pieces within the
  same budget; its stack is mapped at load, in the process's mapped size already (csim/stack.py);
* onnx, hardware: nothing counted here (ONNX Runtime's arenas and a card's buffer objects are
  theirs to size).

The budget is ``working_set.backend_budget``: what one full batch's inputs and outputs take,
at least ``working_set.FLOOR_BYTES``. The load sets the total aside
(``backends/hosting/address_space.py``) and fails, naming it, when the process cannot map that
much more; an allocation that still fails in a batch names the model, the mode, the batch and
the bytes (``batch_memory_error``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..base import BackendError
from ..hosting import AddressSpaceReservation, format_bytes, out_of_memory, reserve_address_space
from .emulator.working_set import backend_budget

#: bytes of one element of the config's FP32 / FP64 tensors
_ITEMSIZE = {"TYPE_FP32": 4, "TYPE_FP64": 8}


@dataclass(frozen=True)
class InstanceMemory:
    """``rows`` rows of ``row_bytes`` (input + output, and the output's encoded copy where
    ``encoded``: in the engine's process) in flight, and ``working_bytes`` the runner takes
    besides them (``working``: how, for the log; empty where nothing is counted)."""

    model: str
    mode: str
    rows: int
    input_bytes: int
    output_bytes: int
    working_bytes: int
    working: str
    encoded: bool = True

    @property
    def row_bytes(self) -> int:
        return self.input_bytes + self.output_bytes * (2 if self.encoded else 1)

    @property
    def batch_bytes(self) -> int:
        return self.rows * self.row_bytes

    @property
    def total(self) -> int:
        return self.batch_bytes + self.working_bytes

    def note(self) -> str:
        """The backend's part of the load's memory line (besides the batches in flight)."""
        return self.working


def row_bytes(config: dict) -> tuple[int, int]:
    """(input, output) bytes of one row as the config declares them (one FP32 or FP64 tensor
    each, fixed dims: ``Hls4mlBackend._check_io``)."""
    sizes = []
    for key in ("input", "output"):
        spec = (config.get(key) or [{}])[0]
        dims = [int(d) for d in spec.get("dims", [])]
        sizes.append(_ITEMSIZE.get(spec.get("data_type", ""), 4) * max(1, int(np.prod(dims, dtype=np.int64))))
    return sizes[0], sizes[1]


def plan(
    model: str, mode: str, config: dict, project, runner, encoded: bool = True
) -> tuple[InstanceMemory, int | None]:
    """The instance's bound in ``mode``, and the rows the csim runner works through at once
    (None: another mode); ``encoded``: the instance runs in the engine's process, which encodes
    its outputs. Sets the numpy emulator's budget and measures its working set."""
    rows = max(1, int(config.get("max_batch_size", 0)))
    in_bytes, out_bytes = row_bytes(config)
    budget = backend_budget(rows, in_bytes + out_bytes)
    working, words, piece = 0, "", None
    if mode == "numpy":
        runner.working_budget = budget
        try:
            ws = runner.working_set()
        except MemoryError as e:
            raise BackendError(
                out_of_memory(f"model '{model}'", "one row of its numpy emulation (measured at load)", None, e)
            ) from None
        piece_rows = runner.piece_rows(rows)
        working, words = ws.piece_bytes(piece_rows), ws.describe(piece_rows)
    elif mode == "csim":
        # float64 output rows, and the input rows converted (float_in) or made contiguous
        per_row = 8 * project.output.size + 8 * project.input.size
        piece = max(1, min(rows, budget // per_row))
        working = piece * per_row
        words = (
            f"the C-simulation's float64 rows, at most {format_bytes(working)}: {piece} row(s) at a time at most "
            f"({format_bytes(per_row)} a row)"
        )
    return InstanceMemory(model, mode, rows, in_bytes, out_bytes, working, words, encoded), piece


def reserve(memory: InstanceMemory, instance: int) -> AddressSpaceReservation:
    """Set the instance's bound aside (hosting's ``reserve_address_space``: BackendError naming
    the model and the bytes where the process cannot map them)."""
    what = (
        f"instance {instance}'s batches: {memory.rows} rows x {memory.row_bytes:,} bytes "
        f"({format_bytes(memory.batch_bytes)})" + (f" and {memory.working}" if memory.working else "")
    )
    return reserve_address_space(
        f"model '{memory.model}'",
        what,
        memory.total,
        "lower its max_batch_size (fpgaserve pack --batch-memory-budget), or give the server more address space",
    )


def batch_memory_error(model: str, mode: str, rows: int, e: MemoryError) -> MemoryError:
    """An allocation that failed in a batch, as a MemoryError that names the model, the mode,
    the batch, and the array and its bytes where numpy says (``Unable to allocate 1.66 GiB for
    an array with shape (13893632, 16) and data type float64``)."""
    nbytes = getattr(e, "_total_size", None)
    shape = getattr(e, "shape", None)
    dtype = getattr(e, "dtype", None)
    what = (
        f"an array of shape {tuple(shape)} ({np.dtype(dtype).name})"
        if shape is not None and dtype is not None
        else "memory"
    )
    text = out_of_memory(
        f"model '{model}' ({mode} mode, a batch of {rows} rows)", what, nbytes, e if nbytes is None else MemoryError()
    )
    return MemoryError(text)


__all__ = ["InstanceMemory", "batch_memory_error", "plan", "reserve", "row_bytes"]
