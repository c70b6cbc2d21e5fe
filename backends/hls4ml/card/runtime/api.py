"""The card API protocol: what fpgaserve needs from a runtime (``CardApi``, ``CardDevice``,
``ComputeUnitHandle``, ``RunHandle``, ``DeviceBuffer``), which each runtime module implements
and the card logic uses; the package (``__init__.py``) says which runtimes there are and opens
the process's one API."""

from __future__ import annotations

import enum
import logging
import math
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from ..axlf import ComputeUnit, Kernel, KernelArg, Xclbin

log = logging.getLogger("fpgaserve.hls4ml.card")

API_NAMES = ("auto", "xrt-c", "xrt", "pynq")


class DeviceError(Exception):
    """A runtime call on a card failed; the message is the runtime's (XRT's) own."""


class RunState(enum.Enum):
    RUNNING = "running"  # submitted, not finished (queued behind another call counts too)
    COMPLETED = "completed"
    FAILED = "failed"  # the scheduler reports an error state for the call


@dataclass
class SensorReading:
    """One read of a card's sensors; absent values are simply not there (reading nothing is not
    reading zero: containers often lack the xclmgmt sysfs the sensors come from)."""

    rails: dict[str, dict[str, float]] = field(default_factory=dict)  # rail -> {"voltage", "current", "power"}
    temperatures: dict[str, float] = field(default_factory=dict)  # sensor -> degrees C
    fan_rpm: float | None = None
    clocks: dict[str, float] = field(default_factory=dict)  # name -> MHz
    power_watts: float | None = None  # the card's draw, when the runtime reports it directly
    # the board's power limit (XRT's electrical ``power_consumption_max_watts``); None when the
    # runtime gives none (PYNQ's xclDeviceInfo2 has no such field, XRT says "N/A")
    power_limit_watts: float | None = None
    error: str | None = None  # why nothing could be read, for doctor

    @property
    def power(self) -> float | None:
        if self.power_watts is not None:
            return self.power_watts
        powers = [self.rails[r]["power"] for r in ("12v_aux", "12v_pex") if "power" in self.rails.get(r, {})]
        return sum(powers) if powers else None


def finite_number(value) -> float | None:
    """``value`` as a finite float, None for anything else (a sensor that says nothing)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


class DeviceBuffer(ABC):
    """A buffer object in one bank of a card: a host mapping plus syncs of byte ranges."""

    #: the host side, a 1-D uint8 array the codecs write into and read from
    host: np.ndarray
    nbytes: int

    @abstractmethod
    def to_device(self, nbytes: int, offset: int = 0) -> None: ...

    @abstractmethod
    def from_device(self, nbytes: int, offset: int = 0) -> None: ...

    @abstractmethod
    def free(self) -> None:
        """Release the buffer (idempotent); the host view must not be used afterwards."""


# polling waits: first polls spin (a small call finishes in microseconds), then sleep with
# backoff so a long call does not burn a core; the thread releases the GIL while sleeping
_SPIN_S = 200e-6
_SLEEP_MIN_S = 20e-6
_SLEEP_MAX_S = 1e-3


class RunHandle(ABC):
    #: once a call ended FAILED: what the runtime said, naming its call and code (for the error
    #: the batch fails with and the log), when it said more than the state
    failure: str | None = None

    @abstractmethod
    def poll(self) -> RunState:
        """The call's state now; never blocks."""

    def wait(self, deadline: float) -> RunState:
        """Block until the call leaves RUNNING or ``deadline`` (perf_counter) passes; the state
        then. This default polls (for runtimes whose blocking wait holds the GIL)."""
        spin_until = time.perf_counter() + _SPIN_S
        sleep = _SLEEP_MIN_S
        while True:
            state = self.poll()
            if state is not RunState.RUNNING:
                return state
            now = time.perf_counter()
            if now >= deadline:
                return self.poll()
            if now >= spin_until:
                time.sleep(min(sleep, max(deadline - now, 0.0)))
                sleep = min(sleep * 2, _SLEEP_MAX_S)

    def release(self, rest: list | None = None) -> None:  # noqa: B027  (nothing to give back for most runtimes)
        """The caller is done with the call (ended, or given up on after its deadline).
        ``rest``: arguments (as for ``start``) a runtime that reuses its runs may leave bound
        in place of this call's buffers over request memory, so that none stays held."""


class ComputeUnitHandle(ABC):
    name: str
    #: True when two calls must not be in flight on the CU at once (a register start: the second
    #: would overwrite the first one's arguments). ERT queues calls per CU, so there it is False.
    serialized: bool = False

    @abstractmethod
    def start(self, args: list) -> RunHandle:
        """Start one call; ``args`` in argument order (``DeviceBuffer`` or int)."""

    def close(self) -> None:  # noqa: B027  (most runtimes close with the last reference)
        """Release the compute unit's context now (before a reset)."""


def unopened_device(index: int) -> CardDevice:
    """A card that another engine process owns: counted here, never opened."""
    return cast(CardDevice, UnopenedDevice(index))


class UnopenedDevice:
    """See ``unopened_device``."""

    def __init__(self, index: int):
        self.index = index
        self.bdf = ""
        self.shell = ""
        self.simulated = False


class CardDevice(ABC):
    """One physical card, as a runtime presents it."""

    index: int
    bdf: str  # the user function, e.g. 0000:65:00.1 ("" when the runtime does not say)
    shell: str  # the shell (platform VBNV) the card runs, what an xclbin must be linked for
    interface_uuid: str  # 2RP shells: the interface an xclbin must match ("" when not reported)
    simulated: bool = False
    ert: bool = True  # calls complete through XRT's embedded scheduler

    @abstractmethod
    def loaded_uuid(self) -> str:
        """UUID (32 hex digits) of the xclbin the card runs now, "" for none."""

    @abstractmethod
    def load(self, xclbin: Xclbin) -> bool:
        """Program ``xclbin``: True when the card was programmed, False when XRT skipped it because
        that UUID is loaded already (XRT does, and a hung compute unit stays hung)."""

    @abstractmethod
    def open_compute_unit(self, kernel: Kernel, cu: ComputeUnit) -> ComputeUnitHandle: ...

    @abstractmethod
    def allocate(self, nbytes: int, cu: ComputeUnitHandle, arg: KernelArg) -> DeviceBuffer:
        """A buffer in the bank ``arg`` of ``cu`` is connected to."""

    def user_memory(self, cu: ComputeUnitHandle, arg: KernelArg) -> str | None:
        """None when :meth:`wrap_user_memory` can give ``arg`` of ``cu`` a buffer over the
        caller's memory that the kernel reads with no further copy; else why not (the runtime
        does not bind it, or the argument's bank is not where such buffers go)."""
        return f"the {type(self).__name__} runtime has no buffers over user memory"

    def wrap_user_memory(
        self, memory: np.ndarray, cu: ComputeUnitHandle, arg: KernelArg, address: int | None = None
    ) -> DeviceBuffer:
        """A buffer for ``arg`` of ``cu`` whose host side is ``memory`` itself (C-contiguous, its
        address page-aligned; the caller keeps it alive and unchanged until the buffer is freed;
        ``address``: ``memory``'s, when the caller has it already).
        DeviceError when the runtime or the driver refuses (free the buffer after the call:
        the driver keeps the pages pinned while it lives)."""
        raise DeviceError(self.user_memory(cu, arg) or "no buffers over user memory")

    @abstractmethod
    def close(self) -> None:
        """Release every handle the process holds on the card (kernels, contexts, the device):
        ``xbutil reset`` refuses while any process has the card open. Buffers must be freed first."""

    @abstractmethod
    def reopen(self) -> None:
        """Open the card again after :meth:`close` (after a reset nothing is loaded)."""

    @abstractmethod
    def read_sensors(self) -> SensorReading: ...

    def describe(self) -> str:
        sim = " (simulated)" if self.simulated else ""
        return f"card {self.index} {self.bdf or '?'} {self.shell}{sim}"


def shell_mismatch(xclbin: Xclbin, device: CardDevice) -> str | None:
    """Why ``device`` cannot run ``xclbin``, or None: as XRT's driver decides it.

    2RP (DFX) shells match an xclbin by the shell's interface UUID (the xclbin header's
    ``m_interface_uuid``; the xclbin's platform name, e.g. ``xilinx_u250_gen3x16_xdma_4_1_202210_1``,
    is not the card's shell VBNV ``xilinx_u250_gen3x16_xdma_shell_4_1``); flat shells such as
    ``xilinx_u250_xdma_201830_2`` carry no interface UUID and the xclbin names the shell itself.
    """
    name = os.path.basename(xclbin.path)
    if xclbin.interface_uuid and device.interface_uuid:
        if xclbin.interface_uuid != device.interface_uuid:
            return (
                f"{name} was linked for a shell with interface {xclbin.interface_uuid} ({xclbin.platform}), but card "
                f"{device.index} ({device.bdf}) runs {device.shell} with interface {device.interface_uuid} "
                "(`xbutil examine` shows the shell): link the kernel for that platform"
            )
        return None
    flat = not xclbin.interface_uuid and not device.interface_uuid
    if flat and xclbin.platform and device.shell and xclbin.platform != device.shell:
        return (
            f"{name} was linked for the shell {xclbin.platform}, but card {device.index} ({device.bdf}) runs "
            f"{device.shell} (`xbutil examine` shows it): link the kernel for that platform"
        )
    return None


class CardApi(ABC):
    name: str
    simulated: bool = False

    @abstractmethod
    def devices(self, owned: Callable[[int], bool] | None = None) -> list[CardDevice]:
        """The host's cards, by index. ``owned``: the cards this process may open
        (--engine-processes); the others are listed as ``UnopenedDevice`` and never opened
        (PYNQ opens every card when it lists them: there, ``owned`` cannot prevent it)."""

    @abstractmethod
    def version(self) -> str:
        """The runtime's version as it reports it (XRT's, or PYNQ's and the XRT under it)."""

    def reset_command(self, device: CardDevice) -> list[str]:
        """The command an operator runs to reset ``device`` (no root needed for a user reset)."""
        return ["xbutil", "reset", "--device", device.bdf or str(device.index), "--force"]
