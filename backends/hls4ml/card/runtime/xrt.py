"""Cards through ``pyxrt``, the Python binding XRT ships with every release (the default API).

``pyxrt`` is not on PyPI: it is ``$XILINX_XRT/python/pyxrt*.so``, on ``PYTHONPATH`` once
``/opt/xilinx/xrt/setup.sh`` is sourced. What this module relies on is the 2.14-2.23 surface
(XRT's ``src/python/pybind11/src/pyxrt.cpp``), called with positional arguments only (before
2.23 no argument has a name):

* ``pyxrt.device(i)``, ``get_info(xrt_info_device.bdf|name|interface_uuid|electrical|...)``
  (always a str; sensors as JSON whose leaves are quoted strings), ``get_xclbin_uuid()``;
* ``register_xclbin(xclbin)`` + ``hw_context(device, uuid)`` + ``kernel(ctx, "k:{cu}")`` where
  the binding has them (2.16+; 2.23 deprecates ``load_xclbin``), else ``load_xclbin(xclbin)`` +
  ``kernel(device, uuid, "k:{cu}")``; ``kernel.group_id(arg)`` is the bank of an argument;
* ``bo(device, size, bo.normal, group)``, ``bo.map()`` (a writable memoryview that does NOT keep
  the bo alive: the buffer object holds both), ``bo.sync(direction, size, offset)``;
* ``ext.bo(device, userptr, size)`` (XRT >= 2.20 only, where ``pyxrt.ext`` exists): a buffer over
  the caller's memory, ``userptr`` a PyCapsule holding the address (pybind11's ``void*``
  caster takes nothing else). XRT places it in memory group 0 and xocl pins its pages (a
  page-aligned address, pages mapped writable); a compute unit whose argument is in another
  group would get a device-side copy per call, so it is offered for group-0 arguments only;
* ``run(kernel)``, ``run.set_arg(i, bo|int)`` (scalars are 32-bit C ints: ``kernel(*args)``
  would silently skip anything else), ``run.start()``, ``run.state()``.

``run.wait()`` is not used: it holds the GIL for as long as it waits (every XRT release), so
one waiting instance would stop the event loop and every other instance. ``state()`` reads the
command packet without blocking; it stays ``ERT_CMD_STATE_NEW`` until the scheduler writes the
final state. ``bo.sync`` holds the GIL too, for the duration of the DMA: that is XRT's, and
the reason syncs move only the bytes a batch uses.

There is no reset in ``pyxrt`` (``xrt::device::reset`` only drops a handle): a hung compute
unit needs ``xbutil reset`` (``cards.py``), which refuses while any process still has the
card open, hence :meth:`XrtDevice.close`.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import threading
from collections.abc import Callable

import numpy as np

from ....base import BackendError
from ..axlf import ComputeUnit, Kernel, KernelArg, Xclbin
from .api import (
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
    unopened_device,
)

log = logging.getLogger("fpgaserve.hls4ml.card.xrt")

MAX_PROBE = 64  # XRT < 2.17 has no enumerate_devices(): probe indices until one fails
# ert_cmd_state values (XRT ert.h); compared as ints: pyxrt binds this C enum as convertible
ERT_COMPLETED = 4
ERT_FAILED = {5, 6, 8, 9, 10, 11}  # ERROR, ABORT, TIMEOUT (the scheduler's), NORESPONSE, SKERROR, SKCRASHED
ERT_STATE_NAMES = {5: "ERROR", 6: "ABORT", 8: "TIMEOUT", 9: "NORESPONSE", 10: "SKERROR", 11: "SKCRASHED"}


class XrtApi(CardApi):
    name = "xrt"

    def __init__(self):
        try:
            import pyxrt
        except Exception as e:  # ImportError, or the .so failing to load its XRT libraries
            raise BackendError(
                f"card-api xrt needs XRT's Python binding pyxrt, which cannot be imported ({e}): install XRT and "
                "source /opt/xilinx/xrt/setup.sh (it puts $XILINX_XRT/python on PYTHONPATH)"
            ) from None
        self.pyxrt = pyxrt
        self.simulated = bool(getattr(pyxrt, "SIMULATED", False))
        self._devices: list[CardDevice] | None = None
        self._lock = threading.Lock()

    def devices(self, owned: Callable[[int], bool] | None = None) -> list[CardDevice]:
        with self._lock:
            if self._devices is None:
                self._devices = [
                    XrtDevice(self, i) if owned is None or owned(i) else unopened_device(i)
                    for i in range(self._count())
                ]
            return list(self._devices)

    def _count(self) -> int:
        enumerate_devices = getattr(self.pyxrt, "enumerate_devices", None)
        if enumerate_devices is not None:
            return int(enumerate_devices())
        count = 0
        while count < MAX_PROBE:
            try:
                self.pyxrt.device(count)
            except RuntimeError:
                break
            count += 1
        return count

    def version(self) -> str:
        explicit = getattr(self.pyxrt, "__version__", None)
        if explicit:
            return str(explicit)
        root = os.environ.get("XILINX_XRT")
        if root:
            try:
                with open(os.path.join(root, "version.json")) as f:
                    return str(json.load(f).get("BUILD_VERSION", "unknown"))
            except (OSError, ValueError):
                pass
        return "unknown"


def hex_uuid(text: str) -> str:
    """A UUID as XRT prints it (any case, dashes or not) as bare lower-case hex; "" for none
    (all zeros): the form the runtimes compare xclbin and interface UUIDs in."""
    digits = "".join(c for c in str(text).lower() if c in "0123456789abcdef")
    return "" if not digits.strip("0") else digits


class XrtDevice(CardDevice):
    def __init__(self, api: XrtApi, index: int):
        self._api = api
        self._x = api.pyxrt
        self.index = index
        self.simulated = api.simulated
        self.ert = True  # XRT >= 2.3: KDS/ERT completes every call
        self._dev = None
        self._ctx = None
        self._uuid = None
        self.reopen()

    # ------------------------------------------------------------------ identity
    def _info(self, key: str) -> str:
        return device_info(self._x, self._dev, self.index, key)

    def reopen(self) -> None:
        try:
            self._dev = self._x.device(self.index)
        except RuntimeError as e:
            raise DeviceError(f"cannot open card {self.index}: {e}") from None
        self._ctx = None
        self._uuid = None
        self.bdf = self._info("bdf")
        self.shell = self._info("name")
        self.interface_uuid = hex_uuid(self._info("interface_uuid"))

    def loaded_uuid(self) -> str:
        if self._dev is None:
            return ""
        try:
            return hex_uuid(self._dev.get_xclbin_uuid().to_string())
        except RuntimeError:
            return ""

    # ------------------------------------------------------------------ xclbin
    def load(self, xclbin: Xclbin) -> bool:
        if self._dev is None:
            raise DeviceError(f"card {self.index} is closed")
        mismatch = shell_mismatch(xclbin, self)
        if mismatch is not None:  # XRT would refuse too ("Xclbin does not match shell on card"): say which two
            raise DeviceError(mismatch)
        already = self.loaded_uuid() == xclbin.uuid
        try:
            xb = self._x.xclbin(xclbin.path)
            if hasattr(self._dev, "register_xclbin") and hasattr(self._x, "hw_context"):
                uuid = self._dev.register_xclbin(xb)
                self._ctx = self._x.hw_context(self._dev, uuid)  # programs the card (a same UUID: no-op)
            else:
                uuid = self._dev.load_xclbin(xb)
        except RuntimeError as e:
            raise DeviceError(f"card {self.index} ({self.bdf}): loading {xclbin.path} failed: {e}") from None
        self._uuid = uuid
        return not already

    def open_compute_unit(self, kernel: Kernel, cu: ComputeUnit) -> ComputeUnitHandle:
        if self._dev is None or self._uuid is None:
            raise DeviceError(f"card {self.index}: no xclbin loaded by this process")
        name = f"{kernel.name}:{{{cu.name}}}"
        try:
            if self._ctx is not None:
                handle = self._x.kernel(self._ctx, name)
            else:
                handle = self._x.kernel(self._dev, self._uuid, name)
        except RuntimeError as e:
            raise DeviceError(f"card {self.index}: cannot open compute unit {name}: {e}") from None
        return XrtComputeUnit(self, cu.name, kernel, handle)

    def allocate(self, nbytes: int, cu: ComputeUnitHandle, arg: KernelArg) -> DeviceBuffer:
        assert isinstance(cu, XrtComputeUnit) and arg.id is not None
        try:
            group = cu.handle.group_id(arg.id)
            bo = self._x.bo(self._dev, nbytes, self._x.bo.normal, group)
        except RuntimeError as e:
            raise DeviceError(
                f"card {self.index}: cannot allocate {nbytes} bytes for {cu.name}.{arg.name}: {e}"
            ) from None
        return XrtBuffer(self._x, bo, nbytes)

    def user_memory(self, cu: ComputeUnitHandle, arg: KernelArg) -> str | None:
        assert isinstance(cu, XrtComputeUnit) and arg.id is not None
        ext = getattr(self._x, "ext", None)
        if ext is None or not hasattr(ext, "bo"):
            return "pyxrt binds no buffers over user memory before XRT 2.20 (pyxrt.ext.bo)"
        try:
            group = cu.handle.group_id(arg.id)
        except RuntimeError as e:
            return f"the memory group of {cu.name}.{arg.name} is unknown: {e}"
        if group != 0:
            # XRT puts a user-memory buffer in group 0; a CU not connected there makes XRT
            # allocate a copy in its own bank and copy into it on every start
            return f"{cu.name}.{arg.name} is in memory group {group}; buffers over user memory are in group 0"
        return None

    def wrap_user_memory(
        self, memory: np.ndarray, cu: ComputeUnitHandle, arg: KernelArg, address: int | None = None
    ) -> DeviceBuffer:
        why = self.user_memory(cu, arg)
        if why is not None:
            raise DeviceError(why)
        if not memory.flags.c_contiguous or memory.nbytes == 0:
            raise DeviceError("user memory must be C-contiguous and not empty")
        try:
            bo = self._x.ext.bo(self._dev, _capsule(memory.ctypes.data if address is None else address), memory.nbytes)
        except (RuntimeError, TypeError) as e:
            raise DeviceError(f"card {self.index}: cannot wrap {memory.nbytes} bytes of user memory: {e}") from None
        return XrtBuffer(self._x, bo, memory.nbytes, keep=memory)

    def close(self) -> None:
        # the last references: pyxrt releases the context and the device handle with them
        self._ctx = None
        self._uuid = None
        self._dev = None

    # ------------------------------------------------------------------ sensors
    def read_sensors(self) -> SensorReading:
        return read_info_sensors(self._info)


def device_info(pyxrt, device, index: int, key: str) -> str:
    """``device.get_info(xrt_info_device.<key>)`` as text, "" when the binding, the device or the
    key is missing or the query fails (shared by both XRT APIs: the C API reads it through pyxrt)."""
    enum = getattr(pyxrt.xrt_info_device, key, None) if pyxrt is not None else None
    if enum is None or device is None:
        return ""
    try:
        return str(device.get_info(enum))
    except RuntimeError as e:
        log.debug("card %d: get_info(%s) failed: %s", index, key, e)
        return ""


def read_info_sensors(info) -> SensorReading:
    """A sensor reading from XRT's device queries: ``info(key)`` is ``get_info``'s text for
    ``xrt_info_device.<key>`` ("" when absent); shared by both XRT APIs (the C API has no
    queries of its own and reads them through pyxrt)."""
    reading = SensorReading()
    problems = []
    for key in ("electrical", "thermal", "mechanical"):
        text = info(key)
        try:
            data = json.loads(text) if text else None
        except ValueError:
            data = None
        if not isinstance(data, dict):
            problems.append(f"{key}: {text[:80] or 'nothing'}")
            continue
        if key == "electrical":
            _electrical(data, reading)
        elif key == "thermal":
            _thermal(data, reading)
        else:
            _mechanical(data, reading)
        problems += [f"{key}: {m}" for m in _messages(data)]  # {"msg": "No sensors present"}: no sysfs nodes
    clock = info("max_clock_frequency_mhz")
    if clock and finite_number(clock):
        reading.clocks["kernel"] = float(clock)
    if not (reading.rails or reading.temperatures):
        reading.error = "sensors not readable (" + ("; ".join(dict.fromkeys(problems)) or "nothing reported") + ")"
    return reading


def _messages(data) -> list[str]:
    """The "msg" texts anywhere in an XRT info tree (how XRT says a sensor group is absent)."""
    if isinstance(data, dict):
        found = [str(data["msg"])] if "msg" in data else []
        return found + [m for v in data.values() for m in _messages(v)]
    if isinstance(data, list):
        return [m for v in data for m in _messages(v)]
    return []


def _present(item: dict) -> bool:
    return str(item.get("is_present", "true")).lower() not in ("false", "0")


def _electrical(data: dict, reading: SensorReading) -> None:
    for rail in data.get("power_rails") or []:
        if not isinstance(rail, dict):
            continue
        name = str(rail.get("id") or rail.get("description") or "").strip()
        volts = finite_number((rail.get("voltage") or {}).get("volts")) if _present(rail.get("voltage") or {}) else None
        amps = finite_number((rail.get("current") or {}).get("amps")) if _present(rail.get("current") or {}) else None
        if not name or not volts:
            continue
        values = {"voltage": volts}
        if amps is not None:
            values["current"] = amps
            values["power"] = volts * amps
        reading.rails[name] = values
    watts = finite_number(data.get("power_consumption_watts"))
    if watts:
        reading.power_watts = watts
    # "N/A" when XRT cannot query the card's max power level; 0 would be no limit either
    limit = finite_number(data.get("power_consumption_max_watts"))
    if limit and limit > 0:
        reading.power_limit_watts = limit


def _thermal(data: dict, reading: SensorReading) -> None:
    for item in data.get("thermals") or []:
        if isinstance(item, dict) and _present(item):
            t = finite_number(item.get("temp_C"))
            name = str(item.get("location_id") or item.get("description") or "").strip()
            if name and t:
                reading.temperatures[name] = t


def _mechanical(data: dict, reading: SensorReading) -> None:
    for item in data.get("fans") or []:
        if isinstance(item, dict) and _present(item):
            rpm = finite_number(item.get("speed_rpm"))
            if rpm is not None:
                reading.fan_rpm = rpm
                return


class XrtComputeUnit(ComputeUnitHandle):
    serialized = False  # ERT queues calls per compute unit

    def __init__(self, device: XrtDevice, name: str, kernel: Kernel, handle):
        self.device = device
        self.name = name
        self.kernel = kernel
        self.handle = handle

    def start(self, args: list) -> RunHandle:
        x = self.device._x
        try:
            run = x.run(self.handle)
            for spec, value in zip(self.kernel.args, args):
                run.set_arg(spec.id, value.bo if isinstance(value, XrtBuffer) else int(value))
            run.start()
        except (RuntimeError, IndexError, TypeError) as e:
            raise DeviceError(f"card {self.device.index}: starting {self.name} failed: {e}") from None
        return XrtRun(run)


class XrtRun(RunHandle):
    __slots__ = ("failure", "run")

    def __init__(self, run):
        self.run = run
        self.failure: str | None = None

    def poll(self) -> RunState:
        state = int(self.run.state())
        if state == ERT_COMPLETED:
            return RunState.COMPLETED
        if state in ERT_FAILED:
            self.failure = f"run.state() returned {ERT_STATE_NAMES.get(state, 'state')} ({state})"
            return RunState.FAILED
        return RunState.RUNNING


# a prototype of our own: setting restype/argtypes on ctypes.pythonapi's shared function object
# would change it for every other user in the process
_PyCapsule_New = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi)
)


def _capsule(address: int):
    """An unnamed PyCapsule holding ``address``, with no destructor: what pybind11 casts to
    ``void*`` (it refuses a Python int). The memory stays the caller's."""
    return _PyCapsule_New(address, None, None)


class XrtBuffer(DeviceBuffer):
    def __init__(self, x, bo, nbytes: int, keep: np.ndarray | None = None):
        self._x = x
        self.bo = bo
        self.nbytes = nbytes
        if keep is not None:
            # over user memory: that memory is the host side (and stays referenced while bo lives)
            self.host = keep.reshape(-1).view(np.uint8)
        else:
            # the mapping is only valid while bo lives: this object holds both
            self.host = np.frombuffer(bo.map(), dtype=np.uint8, count=nbytes)

    def to_device(self, nbytes: int, offset: int = 0) -> None:
        try:
            self.bo.sync(self._x.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE, nbytes, offset)
        except RuntimeError as e:
            raise DeviceError(f"sync to the card failed: {e}") from None

    def from_device(self, nbytes: int, offset: int = 0) -> None:
        try:
            self.bo.sync(self._x.xclBOSyncDirection.XCL_BO_SYNC_BO_FROM_DEVICE, nbytes, offset)
        except RuntimeError as e:
            raise DeviceError(f"sync from the card failed: {e}") from None

    def free(self) -> None:
        self.host = np.empty(0, dtype=np.uint8)  # nothing may touch the old mapping
        self.bo = None
