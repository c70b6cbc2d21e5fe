"""Card APIs: what fpgaserve needs from a runtime, and the three that provide it.

=====  ======================================================  ====================================
name   module                                                  for
=====  ======================================================  ====================================
xrt-c  ``runtime/xrt_c.py`` over XRT's C API (ctypes)          every XRT release (the default)
xrt    ``runtime/xrt.py`` over ``pyxrt``, XRT's own binding    every XRT release
pynq   ``runtime/pynq.py`` over PYNQ 3.0.1                     legacy hosts (XRT <= 2.16, extra ``card``)
=====  ======================================================  ====================================

All present the same small surface, so the card logic (``cards.py``), the runner and the
doctor never see which one runs: a :class:`CardDevice` per card loads an xclbin, opens compute
units, allocates buffers in a bank, and releases everything before a reset; a
:class:`ComputeUnitHandle` starts a call; a :class:`RunHandle` is waited on until a deadline.
Over the C API that wait blocks in ``xrtRunWaitFor`` without the GIL. ``pyxrt``'s
``run.wait`` and PYNQ's ``WaitHandle.wait`` hold the thread, and ``run.wait`` even holds the
GIL, so their handles keep the default :meth:`RunHandle.wait`, which polls ``state()`` and
sleeps between polls.

One capability is optional: a buffer object over memory the caller owns
(:meth:`CardDevice.user_memory` says whether and why not, :meth:`CardDevice.wrap_user_memory`
makes one), so a request tensor already in the card's element format is synced to the card
from where it lies. XRT binds it for Python from 2.20 on (``pyxrt.ext.bo``); the PYNQ API
leaves it out (see ``runtime/pynq.py``).

``--backend-config=hls4ml,card-api=auto|xrt-c|xrt|pynq`` chooses; ``auto`` takes the C API
when ``libxrt_coreutil.so.2`` loads (``$XILINX_XRT/lib``, set by ``/opt/xilinx/xrt/setup.sh``,
or the loader's path), else ``pyxrt`` when it imports, else PYNQ.
"""

from __future__ import annotations

import logging
import threading

from ....base import BackendError
from .api import (
    API_NAMES,
    CardApi,
    CardDevice,
    ComputeUnitHandle,
    DeviceBuffer,
    DeviceError,
    RunHandle,
    RunState,
    SensorReading,
    finite_number,
    shell_mismatch,
)

log = logging.getLogger("fpgaserve.hls4ml.card")

_API: CardApi | None = None
_API_LOCK = threading.Lock()
_API_ERRORS: dict[str, str] = {}


def open_api(name: str = "auto") -> CardApi:
    """The process's card API (one per process: a card is opened once)."""
    global _API  # noqa: PLW0603  (process-wide, created under the lock)
    if name not in API_NAMES:
        raise BackendError(f"card-api '{name}' is not one of {', '.join(API_NAMES)}")
    with _API_LOCK:
        if _API is not None and name in ("auto", _API.name):
            return _API
        if _API is not None:
            raise BackendError(f"card-api {name} asked for, but this process already drives its cards with {_API.name}")
        errors = []
        for candidate in ("xrt-c", "xrt", "pynq") if name == "auto" else (name,):
            try:
                _API = _make(candidate)
                return _API
            except BackendError as e:
                errors.append(str(e))
                _API_ERRORS[candidate] = str(e)
        raise BackendError("; ".join(errors))


def skipped_api(name: str) -> str | None:
    """Why ``auto`` passed over the API ``name`` in this process (None: it did not)."""
    return _API_ERRORS.get(name)


def reset_api() -> None:
    """Forget the process's API (tests that re-probe simulated cards)."""
    global _API  # noqa: PLW0603
    with _API_LOCK:
        _API = None
        _API_ERRORS.clear()


def _make(name: str) -> CardApi:
    if name == "xrt-c":
        from .xrt_c import XrtCApi

        return XrtCApi()
    if name == "xrt":
        from .xrt import XrtApi

        return XrtApi()
    from .pynq import PynqApi

    return PynqApi()


def available_devices(name: str = "auto") -> list[CardDevice]:
    """The cards of this host; empty when no runtime imports or none finds a card (logged)."""
    try:
        return open_api(name).devices()
    except Exception as e:  # probing must never stop a server that can fall back to emulation
        log.debug("no FPGA cards: %s", e)
        return []


__all__ = [
    "API_NAMES",
    "CardApi",
    "CardDevice",
    "ComputeUnitHandle",
    "DeviceBuffer",
    "DeviceError",
    "RunHandle",
    "RunState",
    "SensorReading",
    "available_devices",
    "finite_number",
    "open_api",
    "reset_api",
    "shell_mismatch",
    "skipped_api",
]
