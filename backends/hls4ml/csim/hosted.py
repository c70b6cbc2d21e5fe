"""An hls4ml model's instances in instance processes (``fpgaserve.backends.hosting``).

In csim mode an instance runs the C-simulation: the operator's firmware C++, compiled at load
and called in-process through ctypes. A bug in it (a NULL dereference, an ``abort()``, an
``exit()``) would take the whole server with it, so by default each such instance runs in a
process of its own (``Hls4mlBackend.instance_process_by_default``): a crash fails the batch in
flight with an error naming the model and the signal, the instance restarts (bounded), and
every other model goes on serving. The compiled library comes from the on-disk build cache
(``library.CsimLibrary.load``): the first instance's process compiles it under the cache's lock,
every later instance and every restart loads the same ``.so``.

Any mode can run so (config parameter ``instance_process: true``); csim is the mode that does
by default, hence this module's place. ``Hls4mlBackend.instance_process_host`` names the
parent side (``HostedHls4mlBackend``): hosting's ``ProcessBackend`` with what only the
server's process can do: accounting the emulated device's busy time (its telemetry and
``/metrics`` live there) around each batch. The child side (``Hls4mlInstanceChild``) is the
ordinary backend, reporting its resolved mode at load and sending its log lines to the server's
log instead of the child's stderr.
"""

from __future__ import annotations

import numpy as np

from ...hosting import ProcessBackend, format_bytes, forward_logs
from .. import FPGA_MODES, memory
from ..backend import Hls4mlBackend, emulated_device
from .library import CompileLimits


class Hls4mlInstanceChild(Hls4mlBackend):
    """The backend as it runs inside an instance process."""

    # the server's process accounts the emulated device (HostedHls4mlBackend.execute) and
    # encodes the outputs (its side of the batch sets that aside)
    accounts_device = False
    encodes_outputs = False

    def __init__(self, config: dict, version_dir: str, instance_index: int, backend_config: dict | None = None):
        forward_logs()
        super().__init__(config, version_dir, instance_index, backend_config)
        self.load_result = {"mode": self.mode, "memory": self.memory_note}


class HostedHls4mlBackend(ProcessBackend):
    """Parent side of an hls4ml instance in its own process."""

    child_target = f"{Hls4mlInstanceChild.__module__}:{Hls4mlInstanceChild.__qualname__}"
    default_filename = Hls4mlBackend.default_filename
    executes_model_files = Hls4mlBackend.executes_model_files

    @classmethod
    def describe_io(cls, config: dict, version_dir: str):
        return Hls4mlBackend.describe_io(config, version_dir)

    def __init__(self, config: dict, version_dir: str, instance_index: int, backend_config: dict | None = None):
        # the engine's side of a batch (its inputs gathered, its outputs copied from the child
        # and encoded for the wire), set aside before the child starts: a model that cannot fit
        # is not compiled
        in_bytes, out_bytes = memory.row_bytes(config)
        rows = max(1, int(config.get("max_batch_size", 0)))
        bound = memory.InstanceMemory(config.get("name", ""), "csim", rows, in_bytes, out_bytes, 0, "")
        self._reservation = memory.reserve(bound, instance_index)
        try:
            super().__init__(config, version_dir, instance_index, backend_config)
        except BaseException:
            self._reservation.release()
            raise
        result = self.load_result if isinstance(self.load_result, dict) else {}
        mode = result.get("mode")
        # (the child runs the operator's firmware: a mode that is not one of ours is none)
        self.mode: str = mode if mode in FPGA_MODES else ""
        segments = f"shared segments of {format_bytes(self.segment_size)} + {format_bytes(self.child_segment_size)}"
        child = result.get("memory")
        # (what the child says of its memory is shown as text, never trusted as anything else)
        self.memory_note = f"its instance process's {self.mode} runner" + (
            f" ({child})" if isinstance(child, str) else ""
        )
        self.memory_note += f"; {segments}, mapped in both processes"
        # a card's runner accounts its own calls (where a config asks for hardware in a process)
        self.emulated_device = emulated_device(self.mode) if self.mode not in ("", "hardware") else None

    @classmethod
    def load_timeout_s(cls, backend_config: dict) -> float:
        """The load compiles the C-simulation (or waits for another process's compile of the
        same project, under the build cache's lock) within the compile's own time limit
        (``csim-compile-timeout-secs``, 900 s by default): the instance's load may take that
        beyond the ordinary load time, and a compile that runs too long fails with its own
        error naming its setting, not with the instance's load timeout (300 s, which used to
        cut a 900 s compile short)."""
        try:
            compile_s = CompileLimits.resolve(backend_config).timeout_s
        except ValueError:  # a bad setting: the child's load reports it
            compile_s = 0.0
        return super().load_timeout_s(backend_config) + compile_s

    def execute(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            if self.emulated_device is None:
                return super().execute(inputs)
            with self.emulated_device.executing():
                return super().execute(inputs)
        except MemoryError as e:  # the engine's copy of the outputs, named
            rows = next(iter(inputs.values())).shape[0] if inputs else 0
            raise memory.batch_memory_error(self.model_name, f"{self.mode}, engine side", rows, e) from None

    def close(self) -> None:
        self._reservation.release()
        super().close()
