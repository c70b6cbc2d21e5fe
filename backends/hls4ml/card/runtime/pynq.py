"""Cards through PYNQ 3.0.1, the last PYNQ that drives Alveo (legacy; ``pip install 'fpgaserve[card]'``).

PYNQ 3.1 and later dropped Alveo; 3.0.1 calls XRT's legacy ``xcl*`` C API in ``libxrt_core``,
which XRT 2.17 hid, so it needs XRT <= 2.16, ``numpy<2``, ``setuptools<=80`` and
``pycparser<3`` (the ``card`` extra pins them). New hosts use ``runtime/xrt.py``.

PYNQ keeps per-device state (``bitfile_name``, ``ip_dict``) on the ``pynq.Device``: a second
``Overlay`` on a device makes the first raise "Overlay not currently loaded", so a device has
one Overlay, owned here. ``Device.active_device`` is process-global and PYNQ never checks that
a kernel and its buffers are on the same card: overlays get ``device=``, allocations
``target=``.

Real XRT >= 2.3 reports the ERT capability, so calls complete through exec buffers
(``get_exec_bo``/``execute_bo``, the packet ``DefaultIP._start_ert`` builds; see
:class:`PynqComputeUnit` for why not through ``DefaultIP``). PYNQ's own wait
(``ErtWaitHandle.wait``) loops on ``device._handle_events``, a private method, with no
deadline, and the exec-buffer list (``active_bos``) is shared by every compute unit of the
device and not thread-safe. So the runner polls: one ``_handle_events(1)`` (an
``xclExecWait`` of at most 1 ms) under the device's lock, then the handle's ``done``. Without
ERT the arguments and ap_start are written to the CU's registers and the call is done when
CTRL.ap_idle is set; two such calls must not overlap on a CU.

Buffers over user memory are left out (:meth:`PynqDevice.user_memory` says so): PYNQ reaches
them only through XRT's legacy ``xclAllocUserPtrBO``, and in XRT <= 2.17's legacy wrapper a
driver refusal (an unaligned address, read-only pages, a full bank) escapes the C function as
a C++ exception and aborts the process. Checking every condition first would be guessing at
the driver's; this API copies the request into PYNQ's buffer instead.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import re
import struct
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ....base import BackendError
from ..axlf import ComputeUnit, Kernel, KernelArg, Xclbin, read_uuid
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
)

log = logging.getLogger("fpgaserve.hls4ml.card.pynq")

AP_START = 0x1
AP_IDLE = 0x4
_SIM_WORD = re.compile(r"(?<![a-z])sim(?:ulat\w*)?(?![a-z])", re.IGNORECASE)
# (rail, voltage field mV, current field mA or None), xclDeviceInfo2 names as pynq's XrtInfoDump
RAILS = (
    ("12v_aux", "m12VAux", "mAuxCurr"),
    ("12v_pex", "m12VPex", "mPexCurr"),
    ("vccint", "mVccIntVol", "mCurrent"),
    ("0v85", "m0v85", None),
    ("12v_sw", "m12vSW", None),
    ("1v8", "m1v8Top", None),
    ("3v3_aux", "m3v3Aux", None),
    ("3v3_pex", "m3v3Pex", None),
    ("mgt0v9avcc", "mMgt0v9", None),
    ("mgtavtt", "mMgtVtt", None),
    ("sys_5v5", "mSys5v5", None),
)
# (sensor label, xclDeviceInfo2 field); arrays give label0..labelN
TEMPERATURES = (("fpga", "mOnChipTemp"), ("fan", "mFanTemp"), ("dimm", "mDimmTemp"), ("se98", "mSE98Temp"))


def _import_pynq():
    try:
        import pynq  # heavy: only the PYNQ API pays for it
    except Exception as e:  # ImportError, or pynq failing on a host without XRT pieces
        raise BackendError(
            f"card-api pynq needs pynq 3.0.1 (pip install 'fpgaserve[card]'), which cannot be imported: {e}"
        ) from None
    return pynq


def _ensure_event_loop() -> None:
    """pynq 3.0.1's XrtDevice() calls asyncio.get_event_loop() (for its ERT futures), which
    raises in a thread without a loop: models load on worker threads, so give this one a loop
    rather than losing every card to a RuntimeError during the probe."""
    try:
        asyncio.get_event_loop()
    except RuntimeError:
        asyncio.set_event_loop(asyncio.new_event_loop())


class PynqApi(CardApi):
    name = "pynq"

    def __init__(self):
        self.pynq = _import_pynq()
        self._devices: list[CardDevice] | None = None
        self._lock = threading.Lock()

    def devices(self, owned: Callable[[int], bool] | None = None) -> list[CardDevice]:
        with self._lock:
            if self._devices is None:
                _ensure_event_loop()
                self._devices = [PynqDevice(self, i, d) for i, d in enumerate(self.pynq.Device.devices)]
                self.simulated = any(d.simulated for d in self._devices)
            return list(self._devices)

    def version(self) -> str:
        xrt = ""
        try:
            from pynq.pl_server import xrt_device

            xrt = ", XRT " + ".".join(str(v) for v in xrt_device._xrt_version)
        except Exception:  # no XRT under PYNQ (simulated cards only)
            pass
        return f"pynq {getattr(self.pynq, '__version__', '?')}{xrt}"


class PynqDevice(CardDevice):
    def __init__(self, api: PynqApi, index: int, device):
        self._api = api
        self._pynq = api.pynq
        self._device = device
        self.index = index
        self.ert = bool(device.has_capability("ERT"))
        name = self._device_name()
        self.simulated = self._is_simulated(name)
        self.shell = _SIM_WORD.sub("", name).replace("()", "").strip() if self.simulated else name
        self.bdf = self._bdf()
        self.interface_uuid = ""  # PYNQ does not report it
        self.overlay: Any = None  # pynq.Overlay, untyped
        self._uuid = ""
        self.ert_lock = threading.Lock()  # the device's exec-buffer list is shared by its compute units

    def _device_name(self) -> str:
        try:
            name = self._device.name
        except Exception:  # XRT answers from the device; a sick card must still be listed
            name = ""
        return str(name or getattr(self._device, "tag", "") or f"device{self.index}")

    def _is_simulated(self, name: str) -> bool:
        flag = getattr(self._device, "simulated", None)
        if flag is not None and not callable(flag):
            return bool(flag)
        words = [name, str(getattr(self._device, "tag", "")), type(self._device).__name__]
        return any(_SIM_WORD.search(w) for w in words)

    def _bdf(self) -> str:
        explicit = getattr(self._device, "bdf", None)
        if isinstance(explicit, str):
            return explicit
        sysfs = getattr(self._device, "sysfs_path", None)  # the management function, e.g. .../0000:65:00.0
        if isinstance(sysfs, str) and re.search(r"\d{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d$", sysfs):
            return sysfs[-12:-1] + "1"  # the user function is .1
        return ""

    def loaded_uuid(self) -> str:
        return self._uuid

    def load(self, xclbin: Xclbin) -> bool:
        already = self._uuid == xclbin.uuid and self.overlay is not None
        try:
            # always device=: Overlay(device=None) would program Device.active_device, card 0
            self.overlay = self._pynq.Overlay(xclbin.path, device=self._device, download=True)
        except Exception as e:
            self.overlay = None
            raise DeviceError(f"card {self.index}: loading {xclbin.path} failed: {e}") from None
        self._uuid = read_uuid(xclbin.path)
        return not already

    def open_compute_unit(self, kernel: Kernel, cu: ComputeUnit) -> ComputeUnitHandle:
        overlay = self.overlay
        if overlay is None:
            raise DeviceError(f"card {self.index}: no xclbin loaded")
        desc = overlay.ip_dict.get(cu.name)
        if desc is None or "phys_addr" not in desc:
            raise DeviceError(f"card {self.index}: PYNQ lists no compute unit {cu.name}")
        try:
            return PynqComputeUnit(self, cu.name, desc, kernel)
        except DeviceError:
            raise
        except Exception as e:
            raise DeviceError(f"card {self.index}: cannot open compute unit {cu.name}: {e}") from None

    def allocate(self, nbytes: int, cu: ComputeUnitHandle, arg: KernelArg) -> DeviceBuffer:
        assert isinstance(cu, PynqComputeUnit)
        overlay = self.overlay
        if overlay is None:
            raise DeviceError(f"card {self.index}: no xclbin loaded")
        tag = (cu.desc["registers"].get(arg.name) or {}).get("memory")
        try:
            if tag:
                mem = overlay.mem_dict.get(tag)
                if mem is None:
                    raise DeviceError(f"card {self.index}: {cu.name}.{arg.name} is connected to unknown memory '{tag}'")
                target = self._device.get_memory(mem)
            else:
                target = self._device  # no connectivity section: the device's only used bank
            buf = self._pynq.allocate((nbytes,), dtype=np.uint8, target=target)
        except DeviceError:
            raise
        except Exception as e:
            raise DeviceError(
                f"card {self.index}: cannot allocate {nbytes} bytes in {tag or 'the default bank'}: {e}"
            ) from None
        return PynqBuffer(buf)

    def user_memory(self, cu: ComputeUnitHandle, arg: KernelArg) -> str | None:
        return "PYNQ's only way to it, XRT's legacy xclAllocUserPtrBO, aborts the process on a driver error"

    def close(self) -> None:
        self.overlay = None
        self._uuid = ""
        try:
            self._device.free_bitstream()  # closes the CU contexts the overlay opened
            self._device.close()  # XrtDevice drops its handle and reopens it on the next download
        except Exception as e:
            log.debug("card %d: close: %s", self.index, e)

    def reopen(self) -> None:
        """PYNQ's XrtDevice reopens its handle on the next download."""

    # ------------------------------------------------------------------ sensors
    def read_sensors(self) -> SensorReading:
        reading = SensorReading()
        info = None
        try:
            info = self._device.device_info
        except Exception as e:
            reading.error = f"device_info unavailable: {e}"
        if info is not None:
            _device_info(info, reading)
        if not reading.rails:
            _rail_sensors(self._device, reading)
        try:
            for name, clk in (self._device.clocks or {}).items():
                mhz = clk.get("frequency") if isinstance(clk, dict) else clk
                if mhz:
                    reading.clocks[str(name)] = float(mhz)
        except Exception as e:
            log.debug("card %d: clocks unavailable: %s", self.index, e)
        if reading.rails or reading.temperatures:
            reading.error = None
        elif reading.error is None:
            # xclDeviceInfo2 fields are 0 when the card's sensors are not readable (no xmc sysfs)
            reading.error = "device_info reports no sensor values (is the card's xmc sysfs readable here?)"
        return reading


def _device_info(info, reading: SensorReading) -> None:
    for rail, v_field, i_field in RAILS:
        mv = finite_number(getattr(info, v_field, None))
        if not mv:  # 0 mV: the card has no such rail
            continue
        values = {"voltage": mv / 1000.0}
        ma = finite_number(getattr(info, i_field, None)) if i_field else None
        if ma is not None:
            values["current"] = ma / 1000.0
            values["power"] = values["voltage"] * values["current"]
        reading.rails[rail] = values
    for label, name in TEMPERATURES:
        raw = getattr(info, name, None)
        try:
            labelled = [(f"{label}{i}", t) for i, t in enumerate(list(raw))]  # type: ignore[arg-type]
        except TypeError:
            labelled = [(label, raw)]
        for sensor, t in labelled:
            value = finite_number(t)
            if value:  # XRT reports 0 for a sensor the card does not have
                reading.temperatures[sensor] = value
    reading.fan_rpm = finite_number(getattr(info, "mFanRpm", None)) or None  # 0: no fan sensor


def _rail_sensors(device, reading: SensorReading) -> None:
    """``device.sensors`` (pynq Rail objects) for devices without ``device_info``."""
    try:
        items = list(device.sensors.items())
    except Exception as e:
        reading.error = reading.error or f"sensors unavailable: {e}"
        return
    for name, rail in items:
        values = {}
        for quantity in ("voltage", "current", "power"):
            sensor = getattr(rail, quantity, None)
            if sensor is None:
                continue
            try:
                v = finite_number(sensor.value)
            except Exception:
                continue
            if v is not None:
                values[quantity] = v
        if values.get("voltage") or values.get("power"):
            reading.rails[str(name)] = values


class PynqComputeUnit(ComputeUnitHandle):
    """Starts calls from the kernel's register map, as PYNQ's ``DefaultIP`` would, but without it:
    PYNQ 3.0.1 turns argument names into a Python signature, and hls4ml's ``kernel_wrapper`` and
    FaaST's ``alveo_hls4ml`` name an argument ``in`` (``ValueError: 'in' is not a valid
    parameter name``). The register image (CTRL at 0, arguments at their offsets, buffers as
    64-bit device addresses) goes into an ``ert_start_kernel_cmd`` with ERT, as
    ``DefaultIP._start_ert`` builds it, or into the CU's registers before ap_start without."""

    def __init__(self, device: PynqDevice, name: str, desc: dict, kernel: Kernel):
        self.device = device
        self.name = name
        self.desc = desc
        self.kernel = kernel
        self.base = int(desc["phys_addr"])
        self.serialized = not device.ert  # a register start overwrites the previous call's arguments
        end = max((a.offset + a.size for a in kernel.args), default=0x10)
        self._size = -(-max(end, 0x10) // 4) * 4
        self.cu_mask = 0
        if device.ert:
            self.cu_mask = 1 << int(device._device.open_context(desc))

    def _image(self, args: list) -> bytearray:
        image = bytearray(self._size)
        for spec, value in zip(self.kernel.args, args):
            number = int(value.buffer.device_address) if isinstance(value, PynqBuffer) else int(value)
            struct.pack_into("<Q" if spec.size == 8 else "<I", image, spec.offset, number)
        return image

    def start(self, args: list) -> RunHandle:
        from pynq._3rdparty import ert

        image = self._image(args)
        dev = self.device._device
        try:
            if self.device.ert:
                with self.device.ert_lock:
                    bo = dev.get_exec_bo()
                    packet = bo.as_packet(ert.ert_start_kernel_cmd)
                    header = packet.m_uert.m_start_cmd_struct
                    header.state = ert.ert_cmd_state.ERT_CMD_STATE_NEW
                    header.unused = 0
                    header.extra_cu_masks = 0
                    header.count = len(image) // 4 + 1  # the payload words and the CU mask
                    header.opcode = ert.ert_cmd_opcode.ERT_START_CU
                    header.type = ert.ert_cmd_type.ERT_DEFAULT
                    packet.cu_mask = self.cu_mask
                    ctypes.memmove(ctypes.addressof(packet.data), bytes(image), len(image))
                    handle = dev.execute_bo(bo)
                return PynqErtRun(self.device, handle)
            # the arguments first, then ap_start alone: AXI-lite applies one word after another
            dev.write_registers(self.base + 0x10, bytes(image[0x10:]))
            dev.write_registers(self.base, AP_START.to_bytes(4, "little"))
        except Exception as e:
            raise DeviceError(f"card {self.device.index}: starting {self.name} failed: {e}") from None
        return PynqRegisterRun(dev, self.base)


class PynqErtRun(RunHandle):
    def __init__(self, device: PynqDevice, handle):
        self.device = device
        self.handle = handle

    def poll(self) -> RunState:
        if not self.handle.done:
            with self.device.ert_lock:
                # xclExecWait returns when any command of the device completes, or after 1 ms
                self.device._device._handle_events(1)
        if not self.handle.done:
            return RunState.RUNNING
        # an aborted or failed command does not raise from PYNQ's wait: only its future says so
        return RunState.FAILED if self.handle._future.exception() is not None else RunState.COMPLETED


class PynqRegisterRun(RunHandle):
    def __init__(self, device, base: int):
        self.device = device
        self.base = base

    def poll(self) -> RunState:
        ctrl = int.from_bytes(self.device.read_registers(self.base, 4), "little")
        return RunState.COMPLETED if ctrl & AP_IDLE else RunState.RUNNING


class PynqBuffer(DeviceBuffer):
    def __init__(self, buffer):
        self.buffer = buffer
        self.nbytes = int(buffer.nbytes)
        # a plain ndarray view for numpy work (PynqBuffer's __array_finalize__ costs per slice)
        self.host = buffer.view(np.ndarray)

    def to_device(self, nbytes: int, offset: int = 0) -> None:
        try:
            self.buffer[offset : offset + nbytes].sync_to_device()
        except Exception as e:
            raise DeviceError(f"sync to the card failed: {e}") from None

    def from_device(self, nbytes: int, offset: int = 0) -> None:
        try:
            self.buffer[offset : offset + nbytes].sync_from_device()
        except Exception as e:
            raise DeviceError(f"sync from the card failed: {e}") from None

    def free(self) -> None:
        self.host = np.empty(0, dtype=np.uint8)
        free = getattr(self.buffer, "freebuffer", None)
        if free is not None:
            try:
                free()
            except Exception as e:  # freeing after a hang may fail on the old context; nothing to save
                log.debug("freeing a buffer failed: %s", e)
