"""Emulated FPGA devices: the device an hls4ml model runs on when there is no card.

Triton exports one ``nv_gpu_*`` series per GPU, and SuperSONIC's dashboard counts servers
with ``count(nv_gpu_utilization)``. A server whose hls4ml models run in an emulation mode
(``--fpga-mode csim|numpy|onnx``, or ``auto`` without a card) has no card to report, so it
would be missing from that count and from every device panel. It gets one emulated device
per emulation mode in use instead, named like a card (``FPGA-<index>-<shell>``):
``EMU-<index>-<mode>``, e.g. ``EMU-0-csim``. One device per mode and not one per model: all
emulated models of a server share the host's CPU, as all models of a Triton server share its
GPU, so a server with one mode shows exactly one device, whatever it serves.

The device has a single compute unit, ``emulator``, fed by every emulated ``execute()`` of
the server's hls4ml models. Its utilization is the fraction of wall time between two scrapes
during which at least one of them was running (what NVML reports for a GPU: time during which
one or more kernels ran), accounted by the same :class:`~.cards.ComputeUnitAccounting` the
cards use. There is no honest power or memory figure for an emulation (the host's power is
not the firmware's, and host memory is not the design's banks), so those families are not
exported for emulated devices; ``fpga_device_info{emulated="true"}`` says what they are.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

from .accounting import CardSnapshot, ComputeUnitAccounting, CuStats

#: the compute-unit label of an emulated device's one compute unit
EMULATOR_CU = "emulator"


class EmulatedDevice(ComputeUnitAccounting):
    """The device every hls4ml model instance of one emulation mode runs on."""

    def __init__(self, index: int, mode: str):
        super().__init__()
        self.index = index
        self.mode = mode
        self.uid = f"EMU-{index}-{mode}"
        self.name = f"{mode} emulation"
        # the compute unit is reported (utilization 0) before the first call, as a card's idle CUs are
        self._cu_stats[EMULATOR_CU] = CuStats()

    def __str__(self) -> str:
        return f"emulated device {self.uid}"

    @contextmanager
    def executing(self):
        """Account the block as the device being busy (a failed call was busy too)."""
        started = self.kernel_started(EMULATOR_CU)
        try:
            yield
        finally:
            self.kernel_finished(EMULATOR_CU, started)

    def snapshot(self) -> CardSnapshot:
        now = time.perf_counter()
        with self._stats_lock:
            cus = self._cu_busy(now)
            calls = sum(st.calls for st in self._cu_stats.values())
            busy_us = sum(st.busy_s for st in self._cu_stats.values()) * 1e6
        return CardSnapshot(
            uid=self.uid,
            index=self.index,
            name=self.name,
            simulated=False,
            xclbin_path="",
            xclbin_uuid="",
            now=now,
            cus=cus,
            kernel_us=busy_us,
            calls=calls,
            mode=self.mode,
            emulated=True,
        )


class EmulatedDevices:
    """The process's emulated devices, one per emulation mode, indexed in order of first use."""

    def __init__(self):
        self._lock = threading.Lock()
        self._devices: dict[str, EmulatedDevice] = {}

    def device(self, mode: str) -> EmulatedDevice:
        with self._lock:
            dev = self._devices.get(mode)
            if dev is None:
                dev = self._devices[mode] = EmulatedDevice(len(self._devices), mode)
            return dev

    def devices(self) -> list[EmulatedDevice]:
        with self._lock:
            return list(self._devices.values())


_PROCESS_DEVICES = EmulatedDevices()


def emulated_devices() -> EmulatedDevices:
    """The process-wide registry the server's telemetry reads."""
    return _PROCESS_DEVICES
