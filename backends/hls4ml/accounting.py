"""Busy-time accounting of compute units, shared by cards (``card/cards.py``) and emulated devices.

No hardware utilization counter exists on an FPGA card, and an emulation has none either, so
``fpga_utilization``/``nv_gpu_utilization`` (``card/telemetry.py``) are computed from this
accounting: per compute unit the union of the intervals during which a call was in flight.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field


@dataclass
class CuStats:
    """Accounting for one compute unit; guarded by its owner's stats lock.

    Busy time is the union of the calls' start->done intervals: time during which at least one
    call was running. A card's CU runs one call at a time (its lock serializes them), so that is
    the sum of the call durations; an emulated device runs several model instances at once, and
    counting their overlap twice would report more busy time than wall time.
    """

    calls: int = 0
    busy_s: float = 0.0  # completed busy periods
    timeouts: int = 0
    running: int = 0  # calls in flight
    running_since: float | None = None  # perf_counter when `running` went from 0 to 1

    def busy_until(self, now: float) -> float:
        """Busy time including the running period, so a scrape mid-call sees a continuous counter."""
        return self.busy_s + (now - self.running_since if self.running_since is not None else 0.0)


class ComputeUnitAccounting:
    """Busy time and call counts per compute unit: the numbers ``fpga_utilization`` and
    ``nv_gpu_utilization`` are computed from (telemetry.py), for cards and emulated devices alike."""

    def __init__(self):
        self._stats_lock = threading.Lock()
        self._cu_stats: dict[str, CuStats] = {}

    def kernel_started(self, cu: str) -> float:
        now = time.perf_counter()
        with self._stats_lock:
            self._started_locked(cu, now)
        return now

    def _started_locked(self, cu: str, now: float) -> None:
        """Open a start->done interval at ``now``; caller holds ``_stats_lock``."""
        st = self._cu_stats.get(cu)
        if st is None:
            st = self._cu_stats[cu] = CuStats()
        if st.running == 0:
            st.running_since = now
        st.running += 1

    def kernel_finished(self, cu: str, started: float, timed_out: bool = False) -> float:
        """Close the start->done interval (a timed-out call counts as busy until the timeout)."""
        now = time.perf_counter()
        with self._stats_lock:
            st = self._cu_stats.setdefault(cu, CuStats())
            st.running = max(0, st.running - 1)
            if st.running == 0 and st.running_since is not None:
                st.busy_s += now - st.running_since
                st.running_since = None
            st.calls += 1
            st.timeouts += int(timed_out)
        return now - started

    def _forget_running_calls(self) -> None:
        """After a card reset nothing is in flight any more, whatever the counters say."""
        with self._stats_lock:
            for st in self._cu_stats.values():
                st.running = 0
                st.running_since = None

    def _cu_busy(self, now: float) -> dict[str, tuple[int, float]]:
        """cu -> (calls, busy seconds up to ``now``); caller holds ``_stats_lock``."""
        return {cu: (st.calls, st.busy_until(now)) for cu, st in self._cu_stats.items()}


@dataclass
class CardSnapshot:
    """What telemetry reads from a card in one go (a consistent copy, no locks held after)."""

    uid: str
    index: int
    name: str
    simulated: bool
    xclbin_path: str
    xclbin_uuid: str
    now: float
    cus: dict[str, tuple[int, float]] = field(default_factory=dict)  # cu -> (calls, busy seconds)
    kernel_us: float = 0.0
    calls: int = 0
    dma_to_device: int = 0
    dma_from_device: int = 0
    # of dma_to_device, synced straight from request memory (no encoding pass into a buffer)
    dma_to_device_direct: int = 0
    memory_used: int = 0
    memory_total: int = 0
    reloads: int = 0
    mode: str = "hardware"  # how the device runs firmware: hardware, or an emulation mode (csim, numpy, onnx)
    emulated: bool = False  # no card at all: the firmware is computed on the host (emulated.py)
    health: str = "ok"  # ok | degraded (a compute unit hung) | resetting | needs_reset
    cu_healthy: dict[str, bool] = field(default_factory=dict)  # cu -> serving
    bdf: str = ""
    api: str = ""  # card API: xrt or pynq
