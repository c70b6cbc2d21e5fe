"""The simulated cards as a PYNQ 3.0.1 Device plug-in (test-only; imported only where pynq exists).

Importing this module defines :class:`SimulatedAlveoDevice`, a ``pynq.Device`` subclass with a
``_probe_`` classmethod: PYNQ's ``DeviceMeta`` registers it, and the first read of
``pynq.Device.devices`` lists ``FPGASERVE_SIM_CARDS`` simulated cards (default 1, 0 disables).
Each is one :class:`fpga_sim.card.SimCard`, the same core the test-only ``pyxrt`` drives, so both
APIs see one card with XRT's rules (see card.py). The plug-in implements what PYNQ's own
``XrtDevice`` does on top of XRT's C API (``pynq/pl_server/xrt_device.py``), over the core:

* **ERT** (capability "ERT", on by default: PYNQ enables it for XRT >= 2.3; off with
  ``FPGASERVE_SIM_ERT=0``): ``DefaultIP.start`` is PYNQ's ``_start_ert``, which fills an
  ``ert_start_kernel_cmd`` packet in an exec buffer from :meth:`get_exec_bo` (host memory here
  too) and hands it to :meth:`execute_bo`; the card writes the command's state into that packet
  when it completes (COMPLETED, or ABORT when the command was aborted at context teardown), and
  :meth:`_handle_events` (what ``ErtWaitHandle.wait`` loops on, ``xclExecWait`` + a scan of the
  packets) completes PYNQ's futures. ``execute_bo_with_waitlist`` fails as it does on XRT >= 2.11.
* **register path** (``start_sw``, and ``start`` without ERT): AXI-lite reads and writes of the
  CU (see ``SimCard.read_registers``/``write_registers``).
* **downloads** follow XRT: PYNQ closes its own CU contexts, then the card loads with the
  same-uuid rule (a download of the loaded xclbin changes nothing, a hung CU stays hung); a
  refused load raises PYNQ's "Programming Device failed: <ERRNO> (<n>) <text>/<PYNQ hint>".
* **buffers** are PynqBuffers over the host copy; ``flush``/``invalidate`` are DMA syncs that
  block for the modelled time *without* the GIL (PYNQ calls XRT through ctypes).
* **user-pointer buffers**: PYNQ's binding module ``pynq._3rdparty.xrt`` exposes XRT's legacy
  ``xclAllocUserPtrBO(handle, userptr, size, flags)`` (no ``XrtDevice`` method uses it). Its
  stand-in here (installed over that function, for simulated devices' handles only; real ones go
  to XRT) makes a buffer over the caller's memory in bank ``flags & 0xFFFF`` (xocl's checks: a
  page-aligned address, the bank's, pages mapped writable) and returns its handle, which
  ``flush``/``invalidate``/``get_device_address`` and ``xclFreeBO`` take like any other. On a
  driver error, XRT <= 2.17's legacy wrapper (shim.cpp) catches ``xrt_core::error`` only, so the
  ``xrt_core::system_error`` the shim throws escapes the C function: the process aborts
  (std::terminate). The stand-in prints what libstdc++ prints and raises SimulationError.
* ``device_info``/``sensors`` come from an ``xclDeviceInfo2`` filled as XRT 2.16's shim does
  (``mCurrent`` is never set there, so PYNQ's vccint power reads 0 on real cards too); with
  ``FPGASERVE_SIM_SENSORS=unreadable`` the sensor fields are 0, as when the xmc sysfs is missing.

Real ``XrtDevice._handle_events`` rebuilds ``active_bos`` without a lock, so two threads waiting on
one device can deliver a completion twice or lose one; here it is serialized, and concurrent
calls are counted in ``stats["pynq_concurrent_handle_events"]`` so a host that relies on it shows.
Every card says it is simulated: ``simulated = True``, tag ``sim<N>`` (XRT's are ``xrt<N>``).
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import sys
import threading
import time
import weakref

import numpy as np
from pynq._3rdparty import ert as _ert
from pynq._3rdparty import xrt as _xrt
from pynq.buffer import PynqBuffer
from pynq.pl_server.device import Device
from pynq.pl_server.xrt_device import ErtWaitHandle, _format_xrt_error

from . import card as _card
from .errors import SimulationError
from .xclbin import XclbinError, read_xclbin

ENV_ERT = "FPGASERVE_SIM_ERT"
# Unique among DeviceMeta priorities (Versal 40, Embedded 50, Remote 100, XRT 200); highest, so a
# real card, if XRT finds one, comes first in Device.devices.
PROBE_PRIORITY = 900
EXEC_BO_SIZE = 1024


def ert_enabled() -> bool:
    return os.environ.get(ENV_ERT, "1").strip().lower() not in ("0", "false", "no", "off")


class _DeviceUsage(ctypes.Structure):
    """XRT's xclDeviceUsage as PYNQ 3.0.1 reads it (XrtDevice.get_usage)."""

    _fields_ = [
        ("h2c", ctypes.c_size_t * 8),
        ("c2h", ctypes.c_size_t * 8),
        ("ddrMemUsed", ctypes.c_size_t * 8),
        ("ddrBOAllocated", ctypes.c_uint * 8),
        ("totalContents", ctypes.c_uint),
        ("xclbinId", ctypes.c_ulonglong * 4),
        ("dma_channel_cnt", ctypes.c_uint),
        ("mm_channel_cnt", ctypes.c_uint),
        ("memSize", ctypes.c_ulonglong * 8),
    ]


class SimExecBo:
    """An exec buffer (``DRM_XOCL_BO_EXECBUF``) in host memory: PYNQ casts it to packet structs."""

    def __init__(self, size: int = EXEC_BO_SIZE):
        self.buffer = (ctypes.c_char * size)()
        self.length = size
        self.command: _card.Command | None = None

    def as_packet(self, ptype):
        return ptype.from_buffer(self.buffer)

    @property
    def header_address(self) -> int:
        """Where the packet's header is: the card writes its state bits there at completion."""
        return ctypes.addressof(self.buffer)


class SimulatedMemory:
    """One memory bank of a simulated card (the counterpart of PYNQ's XrtMemory)."""

    def __init__(self, device: SimulatedAlveoDevice, desc: dict):
        self.device = device
        self.desc = desc
        self.idx = desc["idx"]
        self.size = desc["size"]
        self.base_address = desc["base_address"]

    def allocate(self, shape, dtype, **kwargs):
        return self.device.allocate_in_bank(shape, dtype, self.idx, **kwargs)

    @property
    def mem_used(self) -> int:
        return self.device.get_usage().ddrMemUsed[self.idx]

    @property
    def num_buffers(self) -> int:
        return self.device.get_usage().ddrBOAllocated[self.idx]

    def __hash__(self):
        return hash((self.device, self.idx))

    def __eq__(self, other):
        return type(other) is SimulatedMemory and other.device is self.device and other.idx == self.idx

    def __repr__(self):
        return f"SimulatedMemory({self.desc.get('tag')!r} on {self.device.tag})"


class SimulatedAlveoDevice(Device):
    """One simulated Alveo card behind PYNQ's Device API (see the module docstring)."""

    _probe_priority_ = PROBE_PRIORITY
    simulated = True

    @classmethod
    def _probe_(cls):
        count = _card.card_count()
        if count > 0:
            print(f"fpgaserve test simulator: {count} SIMULATED Alveo card(s), no real hardware", file=sys.stderr)
        return [cls(i) for i in range(count)]

    def __init__(self, index: int):
        super().__init__(f"sim{index}")
        self.index = index
        self.card = _card.get_card(index)
        # XrtDevice._find_sysfs: the management function's sysfs folder (the user function is .1)
        self.sysfs_path = f"/sys/devices/pci0000:00/{self.card.bdf[:-1]}0"
        self._handle: _card.CardHandle | None = self.card.open()
        _HANDLES[self._handle] = self
        self.capabilities = {"REGISTER_RW": True, "CALLABLE": True}
        if ert_enabled():
            self.capabilities["ERT"] = True
        self.timestamp = None
        self.bitfile_name = None
        self.clear_dict()
        self.mem_dict = {}
        self.contexts: dict[str, dict] = {}
        self.active_bos: list = []
        self._bo_cache: list[SimExecBo] = []
        self._bos: dict[int, _card.SimBuffer] = {}
        self._next_bo = 1
        self._events_lock = threading.Lock()
        self._in_events = 0
        self.concurrent_handle_events = 0
        # XrtDevice.__init__ takes asyncio.get_event_loop() (a loop of the calling thread)
        self._loop = asyncio.get_event_loop()
        self.card.flush_stats()

    # ------------------------------------------------------------------ identity
    @property
    def name(self) -> str:
        return self.card.vbnv

    @property
    def handle(self):
        return self._handle

    def __repr__(self):
        return f"<SimulatedAlveoDevice {self.index}: {self.name} (simulated)>"

    @property
    def stats(self) -> dict:
        return {**self.card.stats, "pynq_concurrent_handle_events": self.concurrent_handle_events}

    def _open(self) -> _card.CardHandle:
        if self._handle is None or self._handle.closed:
            self._handle = self.card.open()
        _HANDLES[self._handle] = self
        return self._handle

    # ------------------------------------------------------------------ bitstreams
    def get_bitfile_metadata(self, bitfile_name, partial=False):
        from pynq.pl_server.xclbin_parser import XclBin

        return XclBin(bitfile_name)

    def gen_cache(self, bitstream, parser=None):
        pass

    def download(self, bitstream, parser=None):
        # XrtDevice._xrt_download: close our contexts, (re)open the device, xclLoadXclBin
        self.free_bitstream()
        self._open()
        try:
            xb = read_xclbin(bitstream.bitfile_name)
        except XclbinError as e:
            raise RuntimeError(f"Programming Device failed: {_format_xrt_error(-22)} ({e})") from None
        try:
            self.card.load(xb)
        except _card.CardError as e:
            for line in e.logs:
                print(f"[XRT] ERROR: {line}", file=sys.stderr)
            raise RuntimeError("Programming Device failed: " + _format_xrt_error(-e.errno)) from None
        super().post_download(bitstream, parser)

    def free_bitstream(self):
        for ctx in self.contexts.values():
            ctx["ctx"].close()
        self.contexts = {}

    def close(self):
        """xclClose: the process's hold on the card ends with its last handle (contexts torn down,
        buffers freed); the next download reopens it."""
        self.free_bitstream()
        if self._handle is not None:
            self._handle.close()
        self._handle = None

    def open_context(self, description, shared=True):
        cu_name = description["cu_name"]
        context = self.contexts.get(cu_name)
        if context:
            return context["idx"]
        cu = self.card.cu_by_name(cu_name.partition(":")[2])
        index = cu.index if cu is not None else -1
        description["cu_index"] = index
        try:
            if cu is None:
                raise _card.CardError(22, "xclOpenContext")
            ctx = self.card.open_context(description["xclbin_uuid"], [index], exclusive=not shared)
        except _card.CardError as e:
            raise RuntimeError(f"Could not open CU context - {-e.errno}, {index}") from None
        self.contexts[cu_name] = {"cu": cu_name, "idx": index, "ctx": ctx, "shared": shared}
        return index

    def close_context(self, cu_name):
        context = self.contexts.get(cu_name)
        if context is None:
            raise RuntimeError(f"CU context ({cu_name}) is not open.")
        context["ctx"].close()
        self.contexts.pop(cu_name)

    # ------------------------------------------------------------------ memory
    @property
    def default_memory(self):
        active = [m for m in self.mem_dict.values() if m["used"] and not m["streaming"]]
        if not active:
            raise RuntimeError("No active memories in design")
        if len(active) > 1:
            raise RuntimeError("Multiple memories active in design: specify the memory using the `target` parameters")
        return self.get_memory(active[0])

    def get_memory(self, desc):
        if desc.get("streaming"):
            raise SimulationError("streaming memories are not simulated")
        return SimulatedMemory(self, desc)

    def get_memory_by_idx(self, idx):
        for m in self.mem_dict.values():
            if m["idx"] == idx:
                return self.get_memory(m)
        raise RuntimeError("Could not find memory")

    def get_memory_by_name(self, name):
        for m in self.mem_dict.values():
            if m["tag"] == name:
                return self.get_memory(m)
        raise RuntimeError("Could not find memory")

    def allocate_bo(self, size, idx, cacheable):
        try:
            buf = self.card.alloc(self._open(), size, idx)
        except _card.CardError as e:
            raise RuntimeError(f"Allocate failed: {-e.errno}") from None
        handle = self._next_bo
        self._next_bo += 1
        self._bos[handle] = buf
        return handle

    def allocate_in_bank(self, shape, dtype, memidx, cacheable=0, **kwargs):
        """PYNQ's ``_xrt_allocate`` for a simulated bank: a PynqBuffer over the host copy."""
        try:
            elements = int(np.prod(shape))
        except TypeError:
            elements = int(shape)
        dtype = np.dtype(dtype)
        bo = self.allocate_bo(elements * dtype.itemsize, memidx, cacheable)
        buf = self._bos[bo]
        out = PynqBuffer(shape, dtype, bo=bo, device=self, buffer=buf.host, device_address=buf.address, coherent=False)
        # never set out.memory: PynqBuffer.freebuffer would then call XRT's xclFreeBO
        weakref.finalize(out, self._free_bo, bo)
        return out

    def allocate_userptr_bo(self, userptr: int, size: int, flags: int) -> int:
        """``xclAllocUserPtrBO`` on this card (see the module docstring): a buffer handle."""
        try:
            buf = self.card.alloc_userptr(self._open(), int(userptr or 0), int(size), int(flags) & 0xFFFF)
        except _card.CardError as e:
            what = f"{e.what}: {os.strerror(e.errno)}"
            print(
                f"terminate called after throwing an instance of 'xrt_core::system_error'\n  what():  {what}",
                file=sys.stderr,
            )
            raise SimulationError(
                f"xclAllocUserPtrBO failed ({what}); XRT <= 2.17's legacy wrapper does not catch the "
                "xrt_core::system_error the shim throws: a real host process aborts here (std::terminate)"
            ) from None
        handle = self._next_bo
        self._next_bo += 1
        self._bos[handle] = buf
        return handle

    def _free_bo(self, bo: int) -> None:
        buf = self._bos.pop(bo, None)
        if buf is not None:
            self.card.free(buf)

    def map_bo(self, bo):
        return self._bos[bo].host

    def get_device_address(self, bo):
        return self._bos[bo].address

    def _sync(self, what: str, bo, offset, size, to_device: bool) -> None:
        buf = self._bos.get(bo)
        if buf is None or buf.freed or offset < 0 or offset + size > buf.size:
            raise RuntimeError(f"{what} Failed: {2**32 - 22}")
        try:
            self.card.dma(buf, to_device, size, offset, hold_gil=False)
        except _card.CardError as e:
            raise RuntimeError(f"{what} Failed: {2**32 - e.errno}") from None

    def flush(self, bo, offset, ptr, size):
        self._sync("Flush", bo, offset, size, True)

    def invalidate(self, bo, offset, ptr, size):
        self._sync("Invalidate", bo, offset, size, False)

    def get_usage(self):
        usage = _DeviceUsage()
        c = self.card
        for b in c.buffers:
            if 0 <= b.bank < 8:
                usage.ddrMemUsed[b.bank] += b.size
                usage.ddrBOAllocated[b.bank] += 1
        for m in self.mem_dict.values():
            if 0 <= m["idx"] < 8 and not m.get("streaming"):
                usage.memSize[m["idx"]] = m["size"]
        usage.h2c[0] = c.counts["bytes_to_device"]
        usage.c2h[0] = c.counts["bytes_from_device"]
        usage.dma_channel_cnt = 2
        usage.mm_channel_cnt = len(self.mem_dict)
        return usage

    # ------------------------------------------------------------------ registers
    def read_registers(self, address, length):
        return self.card.read_registers(address, length)

    def write_registers(self, address, data):
        self.card.write_registers(address, bytes(data))

    # ------------------------------------------------------------------ ERT
    def get_exec_bo(self, size=EXEC_BO_SIZE):
        if self._bo_cache:
            return self._bo_cache.pop()
        return SimExecBo(size)

    def return_exec_bo(self, bo):
        self._bo_cache.append(bo)

    def execute_bo(self, bo):
        """xclExecBuf: submit the ``ert_start_kernel_cmd`` in ``bo`` (the CU register image after
        the CU masks); the card writes the packet's state at completion."""
        packet = bo.as_packet(_ert.ert_start_kernel_cmd)
        header = packet.m_uert.m_start_cmd_struct
        if header.opcode != _ert.ert_cmd_opcode.ERT_START_CU:
            raise RuntimeError("Buffer submit failed: -22")
        extra = header.extra_cu_masks
        count = header.count  # payload words: the CU masks, then the register image from CTRL on
        words = (ctypes.c_uint32 * max(count, 1)).from_buffer(bo.buffer, 4)
        masks = [packet.cu_mask] + [words[1 + i] for i in range(extra)]
        cus = [w * 32 + b for w, m in enumerate(masks) for b in range(32) if m >> b & 1]
        regs = ctypes.string_at(ctypes.addressof(bo.buffer) + 4 * (2 + extra), 4 * max(count - 1 - extra, 0))
        n_cus = len(self.card.cus)
        cus = [i for i in cus if i < n_cus]

        try:
            # the card writes COMPLETED (or ABORT, for a command aborted at context teardown)
            # into the packet's state bits when the command ends
            bo.command = self.card.submit(cus, regs, state_word=bo.header_address)
        except _card.CardError as e:
            raise RuntimeError(f"Buffer submit failed: {-e.errno}") from None
        wh = ErtWaitHandle(bo, self._loop.create_future(), self)
        self.active_bos.append((bo, wh))
        self._schedule_loop_wakeup()
        return wh

    def execute_bo_with_waitlist(self, bo, waitlist):
        raise RuntimeError("waitfor list to schedule dependent executions is not supported by XRT anymore.")

    def set_event_loop(self, loop):
        """PYNQ adds a reader on the DRM render fd; the simulated card has none, so the loop is
        woken at the modelled completion time of each command instead."""
        self._loop = loop

    def _schedule_loop_wakeup(self) -> None:
        loop = self._loop
        if loop is None or not loop.is_running():
            return
        cmds = [bo.command for bo, _ in self.active_bos if bo.command is not None]
        wake = self.card.next_completion(cmds)
        if wake != float("inf"):
            delay = max(0.0, wake - time.monotonic())
            loop.call_soon_threadsafe(loop.call_later, delay, self._handle_events)

    def _handle_events(self, timeout=0):
        """xclExecWait(timeout ms) - block until one of our commands completes or the timeout -
        then complete the wait handles whose packet state is final (XrtDevice._handle_events)."""
        self._in_events += 1
        if self._in_events > 1:
            self.concurrent_handle_events += 1
        try:
            cmds = [bo.command for bo, _ in list(self.active_bos) if bo.command is not None]
            self.card.wait_any(cmds, timeout / 1000.0, hold_gil=False)
            with self._events_lock:
                pending = []
                for bo, completion in self.active_bos:
                    state = bo.as_packet(_ert.ert_cmd_struct).state & 0xF
                    if state >= _ert.ert_cmd_state.ERT_CMD_STATE_COMPLETED:
                        if completion:
                            completion._complete(state)
                        self.return_exec_bo(bo)
                    else:
                        pending.append((bo, completion))
                self.active_bos = pending
            self._schedule_loop_wakeup()
        finally:
            self._in_events -= 1

    # ------------------------------------------------------------------ telemetry
    @property
    def device_info(self):
        """An ``xclDeviceInfo2`` filled as XRT 2.16's shim does (mV, mA, degC)."""
        info = _xrt.xclDeviceInfo2()
        info.mName = self.card.vbnv.encode()[:255]
        info.mFpga = self.card.shell.fpga_part.encode()
        info.mVendorId = 0x10EE
        info.mDeviceId = 0x5005
        info.mSubsystemVendorId = 0x10EE
        info.mSubsystemId = 0x000E
        ddr = [b for b in self.card.shell.banks if b.tag.startswith(("DDR", "bank"))]
        info.mDDRBankCount = len(ddr)
        info.mDDRSize = sum(b.size for b in ddr)
        info.mDataAlignment = _card.BO_ALIGN
        info.mMinTransferSize = 4096
        for i, mhz in enumerate(list(self._clock_mhz())[:4]):
            info.mOCLFrequency[i] = mhz
        info.mNumClocks = len(self._clock_mhz())
        info.mPCIeLinkWidth = info.mPCIeLinkWidthMax = 16
        info.mPCIeLinkSpeed = info.mPCIeLinkSpeedMax = 3
        info.mPciSlot = (int(self.card.bdf[5:7], 16) << 8) | 1
        info.mTimeStamp = self.card.shell.rom_timestamp
        if _card.sensors_readable():
            s = self.card.sensor_values()
            info.m12VPex, info.mPexCurr = s["12v_pex_mv"], s["12v_pex_ma"]
            info.m12VAux, info.mAuxCurr = s["12v_aux_mv"], s["12v_aux_ma"]
            info.m3v3Pex, info.m3v3Aux = s["3v3_pex_mv"], s["3v3_aux_mv"]
            info.mDDRVppBottom, info.mDDRVppTop = s["ddr_vpp_btm_mv"], s["ddr_vpp_top_mv"]
            info.mSys5v5, info.m1v2Top, info.m1v8Top = s["5v5_mv"], s["1v2_top_mv"], s["1v8_mv"]
            info.m0v85, info.mMgt0v9, info.m12vSW = s["0v85_mv"], s["mgt0v9_mv"], s["12v_sw_mv"]
            info.mMgtVtt, info.m1v2Bottom, info.mVccIntVol = s["mgtvtt_mv"], s["1v2_btm_mv"], s["vccint_mv"]
            info.mOnChipTemp, info.mFanTemp, info.mFanRpm = s["fpga_c"], s["fan_c"], s["fan_rpm"]
            for i in range(4):
                info.mDimmTemp[i] = s[f"dimm{i}_c"]
            info.mSE98Temp[0], info.mSE98Temp[1], info.mSE98Temp[2] = (
                s["pcb_top_front_c"], s["pcb_top_rear_c"], s["pcb_bottom_front_c"]
            )  # fmt: skip
        info.mMigCalib = True
        return info

    def _clock_mhz(self) -> list[int]:
        xb = self.card.xclbin if self.card.loaded_uuid() else None
        return [mhz for _, _, mhz in xb.clocks] if xb else [300, 500]

    @property
    def sensors(self):
        from pynq.pmbus import get_xrt_sysfs_rails

        return get_xrt_sysfs_rails(self)

    @property
    def clocks(self):
        return {f"clock{i}": {"frequency": mhz} for i, mhz in enumerate(m for m in self._clock_mhz() if m)}


#: the plug-in device of each simulated card handle (the ``handle`` PYNQ passes to XRT's C API)
_HANDLES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_XRT_ALLOC_USERPTR = _xrt.xclAllocUserPtrBO
_XRT_FREE_BO = _xrt.xclFreeBO


def _alloc_userptr_bo(handle, userptr, size, flags):
    """pynq._3rdparty.xrt.xclAllocUserPtrBO: simulated devices here, real ones to XRT."""
    device = _HANDLES.get(handle) if isinstance(handle, _card.CardHandle) else None
    if device is None:
        return _XRT_ALLOC_USERPTR(handle, userptr, size, flags)
    if isinstance(userptr, ctypes.c_void_p):
        userptr = userptr.value
    return device.allocate_userptr_bo(userptr, size, flags)


def _free_bo(handle, bo):
    """pynq._3rdparty.xrt.xclFreeBO: simulated devices here, real ones to XRT."""
    device = _HANDLES.get(handle) if isinstance(handle, _card.CardHandle) else None
    if device is None:
        return _XRT_FREE_BO(handle, bo)
    device._free_bo(bo)
    return None


_xrt.xclAllocUserPtrBO = _alloc_userptr_bo
_xrt.xclFreeBO = _free_bo


def simulated_cards() -> list[SimulatedAlveoDevice]:
    """The simulated cards among pynq.Device.devices (probing them if nobody has yet)."""
    return [d for d in Device.devices if isinstance(d, SimulatedAlveoDevice)]


def reset_pynq_devices() -> None:
    """Forget PYNQ's cached device list, so the next Device.devices probes again (tests); the
    simulated cards' handles of this process are closed as if the process had exited."""
    for d in list(Device.__dict__.get("_devices", [])):
        if isinstance(d, SimulatedAlveoDevice):
            d.close()
    for attr in ("_devices", "_active_device"):
        if attr in Device.__dict__:
            delattr(Device, attr)


# the rendezvous API of the core, for tests that import the plug-in module only
arm_rendezvous = _card.arm_rendezvous
disarm_rendezvous = _card.disarm_rendezvous
concurrency = _card.concurrency

__all__ = [
    "ENV_ERT",
    "PROBE_PRIORITY",
    "SimExecBo",
    "SimulatedAlveoDevice",
    "SimulatedMemory",
    "arm_rendezvous",
    "concurrency",
    "disarm_rendezvous",
    "reset_pynq_devices",
    "simulated_cards",
]
