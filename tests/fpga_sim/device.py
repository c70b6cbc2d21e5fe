"""A simulated Alveo card, registered through PYNQ 3.0.1's own device plug-in mechanism.

Importing this module defines :class:`SimulatedAlveoDevice`, a ``pynq.Device`` subclass with a
``_probe_`` classmethod: PYNQ's ``DeviceMeta`` registers it, and the first read of
``pynq.Device.devices`` lists ``FPGASERVE_SIM_CARDS`` simulated cards (default 1, 0 disables),
running the shell ``FPGASERVE_SIM_PLATFORM`` (default xilinx_u250_gen3x16_xdma_shell_4_1).
From there fpgaserve's hardware code path runs unmodified: ``Overlay(xclbin, device=card)``,
``allocate(..., target=card or bank)``, ``sync_to_device``, ``DefaultIP.start/call`` (PYNQ's
software start: MMIO writes of the packed arguments, then ap_start) and ``sync_from_device``.

What is modelled, and why:

* **Buffers** have separate host and device copies. ``flush`` (``sync_to_device``) copies host
  to device, ``invalidate`` (``sync_from_device``) device to host; the kernel only ever sees
  the device copy. A missing sync therefore gives stale data, as on a real card. Device memory
  of a new buffer is filled with 0xA5 (uninitialised DDR is not zero).
* **Compute units** have a register file (``krnl_rtl_control_s_axi.v``): CTRL at 0x00 with
  ap_start (b0), ap_done (b1, cleared on read), ap_idle (b2), ap_ready (b3) and auto_restart
  (b7); GIE/IER/ISR; ``fifo_in`` 0x10 and ``fifo_out`` 0x1c (64 bits), ``length_r_in`` 0x28,
  ``length_r_out`` 0x30. Writes are applied word by word in address order, like AXI-lite.
* **Writing ap_start** runs the kernel: it reads the addresses and lengths from the
  registers, finds the buffers by device address, checks what the RTL needs
  (``len_in % N_IN == 0``, ``len_out == len_in / N_IN * N_OUT``, both buffers inside
  allocations in the bank the CU's ``m_axi_gmem`` is connected to), decodes the input words
  per ``AcceleratorConfig.Precision``, runs hls4ml's C-simulation of the project
  (``fpgaserve.backends.hls4ml.csim.CsimLibrary``), encodes the outputs into the output
  buffer's device copy and becomes done. A violated condition makes the kernel hang: ap_done
  and ap_idle never come, as the RTL's write master would wait forever. The reason is
  recorded in :attr:`SimulatedAlveoDevice.stats` (``faults``) so tests can tell hangs apart.
  Done becomes visible after a modelled transfer time (one 32-bit word per kernel clock in
  and out, plus ``FPGASERVE_SIM_KERNEL_DELAY_MS``), never before the computation finished.
  ap_ready is the RTL's one-cycle pulse (``assign ap_ready = ap_done``): a register read never
  sees it, so a host that polled ap_ready would hang here as it would on the card.
* **Hangs on demand**: with ``FPGASERVE_SIM_CONTROL_DIR`` set, a file ``hang-card<N>`` in that
  folder makes the next kernel start on card N hang; the file is consumed. Downloading a
  bitstream again resets the card (the only way out, as on hardware without ``xbutil reset``).
* **Concurrency proof** (for tests that must show two kernels ran at the same time without
  timing anything): the process counts the kernels executing at this moment on all its
  simulated cards (from ap_start until the host observes ap_idle) and keeps the peak. A
  *rendezvous* of N (``FPGASERVE_SIM_RENDEZVOUS=N`` at import, ``arm_rendezvous(N)``, or a file
  ``rendezvous`` containing N in the control folder, consumed by the next kernel start) holds
  every kernel that starts while it is pending: it stays busy until N kernels are executing at
  once, which releases all of them; from then on kernels run freely. A host that serializes the
  kernels can never get there: after ``FPGASERVE_SIM_RENDEZVOUS_TIMEOUT_S`` (default 20 s) the
  held kernel records a "rendezvous timeout" fault and completes, and the rendezvous is over
  (state "timed out"), so a failing test costs that timeout once. Every kernel start also notes
  whether another simulated card of the process had a hung kernel at that moment
  (``starts_while_another_card_hung``): a host that stopped all cards during one card's hang
  could not start any.
* **Counters** (downloads, kernel starts/completions, hangs, DMA bytes) are in ``stats`` and,
  with the control folder set, in ``<control dir>/stats-card<N>.json`` after every change,
  for tests that run the server in another process.
* **Telemetry** mirrors pynq 3.0.1's ``XrtDevice``: ``device_info`` is a real
  ``xclDeviceInfo2`` (mV/mA/degC fields), ``sensors`` comes from PYNQ's own
  ``get_xrt_sysfs_rails``, ``clocks`` from the loaded xclbin. The values are simulated: power,
  currents, temperatures and fan speed rise with the fraction of the last second the kernel
  was busy. Every card says so: ``simulated = True`` and "(simulated)" in its name.

Not modelled: ERT (no "ERT" capability, so PYNQ uses the software start), interrupts, real
timing, partial reconfiguration, AXI error responses (bad addresses hang instead).
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import re
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pynq._3rdparty import xrt as _xrt
from pynq.buffer import PynqBuffer
from pynq.pl_server.device import Device

from .xclbin import DEFAULT_PLATFORM

log = logging.getLogger("fpgaserve.fpga_sim")

ENV_CARDS = "FPGASERVE_SIM_CARDS"
ENV_CONTROL_DIR = "FPGASERVE_SIM_CONTROL_DIR"
ENV_KERNEL_DELAY_MS = "FPGASERVE_SIM_KERNEL_DELAY_MS"
ENV_RENDEZVOUS = "FPGASERVE_SIM_RENDEZVOUS"
ENV_RENDEZVOUS_TIMEOUT = "FPGASERVE_SIM_RENDEZVOUS_TIMEOUT_S"
DEFAULT_RENDEZVOUS_TIMEOUT_S = 20.0
RENDEZVOUS_FILE = "rendezvous"  # in the control folder: arms a rendezvous of the N it contains
# shell the cards run (xclbins linked for another platform are refused, as XRT does)
ENV_PLATFORM = "FPGASERVE_SIM_PLATFORM"

# Unique among DeviceMeta priorities (Versal 40, Embedded 50, Remote 100, XRT 200); highest, so
# a real card, if XRT finds one, always comes first in Device.devices.
PROBE_PRIORITY = 900

AP_START = 0x01
AP_DONE = 0x02
AP_IDLE = 0x04
AP_READY = 0x08
AUTO_RESTART = 0x80

REG_CTRL = 0x00
REG_FIFO_IN = 0x10
REG_FIFO_OUT = 0x1C
REG_LEN_IN = 0x28
REG_LEN_OUT = 0x30

KRNL_RTL = "krnl_rtl"
BO_ALIGN = 4096
UNINITIALISED = 0xA5
ACTIVITY_WINDOW_S = 1.0
MAX_FAULTS = 20


class SimulationError(RuntimeError):
    """The simulator cannot do what was asked (a test or setup problem, not a modelled fault)."""


# ---------------------------------------------------------------------------------- words
@dataclass(frozen=True)
class WordType:
    """What the kernel's 32-bit stream word carries (hls4ml's T_in / T_out)."""

    is_float: bool
    width: int = 32  # bits of the word the stream carries
    frac: int = 0
    signed: bool = True


_PRECISION = re.compile(r"^(?:ap_)?(u?)(fixed|int)<(\d+)(?:,(-?\d+))?")


def word_type(precision: str) -> WordType:
    """AcceleratorConfig precision -> word type, with hls4ml's width rounding.

    ``VivadoAcceleratorConfig._next_factor8_type`` rounds W up to a multiple of 8 and keeps I,
    so ``ap_fixed<12,4>`` travels as ``ap_fixed<16,4>`` (F = 12).
    """
    text = "".join(str(precision).split())
    if text == "float":
        return WordType(True)
    if text == "double":
        raise SimulationError("AcceleratorConfig precision 'double' does not fit krnl_rtl's 32-bit datapath")
    m = _PRECISION.match(text)
    if not m or (m.group(2) == "fixed" and m.group(4) is None):
        raise SimulationError(f"AcceleratorConfig precision '{precision}' is not float, ap_fixed<W,I> or ap_int<W>")
    unsigned, kind, w, i = m.groups()
    width = -(-int(w) // 8) * 8
    integer = int(i) if kind == "fixed" else width
    if width > 32:
        raise SimulationError(f"AcceleratorConfig precision '{precision}' needs {width}-bit words; krnl_rtl moves 32")
    return WordType(False, width, width - integer, not unsigned)


def decode_words(words: np.ndarray, wt: WordType) -> np.ndarray:
    """Stream words -> float64 values, as the kernel's input side sees them.

    The AXI-stream TDATA of ``myproject_axi`` is only ``width`` bits wide: the upper bits of
    each 32-bit word are not connected, so only the low bits count (two's complement).
    """
    words = np.asarray(words, dtype=np.uint32)
    if wt.is_float:
        return words.view(np.float32).astype(np.float64)
    raw = words.astype(np.int64) & ((1 << wt.width) - 1)
    if wt.signed:
        raw = np.where(raw >= (1 << (wt.width - 1)), raw - (1 << wt.width), raw)
    return raw.astype(np.float64) * 2.0**-wt.frac


def encode_words(values: np.ndarray, wt: WordType) -> np.ndarray:
    """T_out values (float64) -> the 32-bit words the kernel's write master stores.

    Fixed-point outputs land in the low ``width`` bits with the upper bits zero (the narrower
    TDATA drives only the low bits). The values must be exact T_out values: anything else means
    the C-simulation did not cast to T_out, and is reported instead of silently rounded.
    """
    values = np.asarray(values, dtype=np.float64)
    if wt.is_float:
        f = values.astype(np.float32)
        same = (f.astype(np.float64) == values) | (np.isnan(values) & np.isnan(f))
        if not same.all():
            raise SimulationError("C-simulation output is not a float32 value (expected T_out = float)")
        return f.view(np.uint32)
    scaled = values * 2.0**wt.frac
    raw = np.rint(scaled)
    lo, hi = (-(1 << (wt.width - 1)), 1 << (wt.width - 1)) if wt.signed else (0, 1 << wt.width)
    if not (np.isfinite(scaled).all() and (raw == scaled).all() and (raw >= lo).all() and (raw < hi).all()):
        bad = values[~((raw == scaled) & (raw >= lo) & (raw < hi))][:3]
        raise SimulationError(
            f"C-simulation output {bad.tolist()} is not a value of the {wt.width}-bit T_out with {wt.frac} fractional bits"
        )
    return (raw.astype(np.int64) & ((1 << wt.width) - 1)).astype(np.uint32)


class Hls4mlKernelModel:
    """What ``krnl_rtl`` computes: hls4ml's C-simulation of the project it was built from."""

    def __init__(self, project_dir: Path):
        # imported here: the simulator module must import (and register) without fpgaserve's
        # hls4ml backend, and the C-simulation is only needed once a design is downloaded
        from fpgaserve.backends.hls4ml.csim import CsimLibrary
        from fpgaserve.backends.hls4ml.project import Hls4mlProject

        self.project = Hls4mlProject.load(project_dir)
        if self.project.accelerator is None:
            raise SimulationError(
                f"hls4ml project {self.project.path} has no AcceleratorConfig: krnl_rtl is built by the "
                "VivadoAccelerator backend"
            )
        self.n_in = self.project.input.size
        self.n_out = self.project.output.size
        self.t_in = word_type(self.project.accelerator.input_precision)
        self.t_out = word_type(self.project.accelerator.output_precision)
        self.csim = CsimLibrary.load(self.project)

    def run(self, words_in: np.ndarray) -> np.ndarray:
        x = decode_words(words_in, self.t_in).reshape(-1, self.n_in)
        y = self.csim.predict(x)
        return encode_words(np.asarray(y, dtype=np.float64).reshape(-1), self.t_out)


def find_project_dir(xclbin_path: Path) -> Path | None:
    """The hls4ml project next to the xclbin (its version folder), or in one subfolder of it."""
    folder = xclbin_path.parent
    if (folder / "hls4ml_config.yml").is_file() or any(folder.glob("*/hls4ml_config.yml")):
        return folder
    return None


# ---------------------------------------------------------------------------------- concurrency
class _Concurrency:
    """Kernels executing right now on every simulated card of this process, and the rendezvous.

    A kernel counts from its (successful) start until the host observes it done, or until its
    card is reprogrammed. Lock order: a device's lock, then this one (never the reverse).
    """

    def __init__(self):
        self.lock = threading.Lock()
        self.executing = 0
        self.peak = 0  # since the process started
        self.wanted = 0  # rendezvous size; 0: none armed
        self.state = "off"  # off | waiting | met | timed out
        self.rendezvous_peak = 0  # most kernels at once since the rendezvous was armed
        self.timeout_s = DEFAULT_RENDEZVOUS_TIMEOUT_S

    def arm(self, n: int, timeout_s: float | None = None) -> None:
        if n < 1:
            raise SimulationError(f"a rendezvous needs at least one kernel, got {n}")
        with self.lock:
            self.wanted = n
            self.timeout_s = float(timeout_s if timeout_s is not None else _rendezvous_timeout())
            self.rendezvous_peak = self.executing
            self.state = "met" if self.executing >= n else "waiting"

    def disarm(self) -> None:
        with self.lock:
            self.wanted, self.state, self.rendezvous_peak = 0, "off", 0

    def began(self) -> bool:
        """A kernel started executing; True if it must be held for the rendezvous."""
        with self.lock:
            self.executing += 1
            self.peak = max(self.peak, self.executing)
            if self.state != "waiting":
                return False
            self.rendezvous_peak = max(self.rendezvous_peak, self.executing)
            if self.executing >= self.wanted:
                self.state = "met"  # releases every held kernel, this one included
                return False
            return True

    def ended(self) -> None:
        with self.lock:
            self.executing -= 1

    def release(self, started_at: float, now: float) -> tuple[bool, str | None]:
        """(may a held kernel finish now, fault to record); the fault only on the timeout."""
        with self.lock:
            if self.state != "waiting":
                return True, None
            if now - started_at < self.timeout_s:
                return False, None
            self.state = "timed out"
            return True, (
                f"rendezvous timeout: at most {self.rendezvous_peak} of {self.wanted} kernels were executing "
                f"at once within {self.timeout_s:g} s (did the host serialize them?)"
            )

    def snapshot(self) -> dict:
        with self.lock:
            return {
                "max_concurrent_kernels": self.peak,
                "rendezvous": {"wanted": self.wanted, "state": self.state, "peak": self.rendezvous_peak},
            }


def _rendezvous_timeout() -> float:
    value = _env_float(ENV_RENDEZVOUS_TIMEOUT)
    return value if value > 0 else DEFAULT_RENDEZVOUS_TIMEOUT_S


_CONCURRENCY = _Concurrency()
# every simulated card of the process (for "another card is hung"); weak: tests re-probe
_DEVICES: weakref.WeakSet = weakref.WeakSet()


def arm_rendezvous(n: int, timeout_s: float | None = None) -> None:
    """Hold kernels that start from now on until ``n`` are executing at once (see module docstring)."""
    _CONCURRENCY.arm(n, timeout_s)


def disarm_rendezvous() -> None:
    """Drop a pending rendezvous: kernels run freely again."""
    _CONCURRENCY.disarm()


def concurrency() -> dict:
    """{"max_concurrent_kernels": peak since start, "rendezvous": {"wanted", "state", "peak"}}."""
    return _CONCURRENCY.snapshot()


# ---------------------------------------------------------------------------------- state
@dataclass
class _Bo:
    handle: int
    memidx: int
    address: int
    size: int
    host: bytearray
    device: bytearray


@dataclass
class _ComputeUnit:
    name: str  # instance, e.g. krnl_rtl_1
    kernel: str  # e.g. krnl_rtl
    base: int
    span: int
    index: int
    arg_banks: dict  # arg name -> bank tag from CONNECTIVITY
    regs: bytearray = field(default=None)
    running: bool = False
    hung: bool = False
    done_latched: bool = False
    auto_restart: bool = False
    started_at: float = 0.0
    busy_until: float = 0.0
    starts: int = 0
    counted: bool = False  # counted as executing in _CONCURRENCY
    held: bool = False  # waiting for the rendezvous

    def __post_init__(self):
        self.regs = bytearray(self.span)

    def reg32(self, offset: int) -> int:
        return int.from_bytes(self.regs[offset : offset + 4], "little")

    def reg64(self, offset: int) -> int:
        return int.from_bytes(self.regs[offset : offset + 8], "little")


class _DeviceUsage(ctypes.Structure):
    """XRT's xclDeviceUsage as pynq 3.0.1 reads it (XrtDevice.get_usage)."""

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


class SimulatedMemory:
    """One memory bank of a simulated card (the counterpart of pynq's XrtMemory)."""

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
        return f"SimulatedMemory({self.desc.get('tag')!r} on {self.device.name})"


# ---------------------------------------------------------------------------------- device
class SimulatedAlveoDevice(Device):
    """One simulated Alveo card (see the module docstring for the model)."""

    _probe_priority_ = PROBE_PRIORITY
    simulated = True

    @classmethod
    def _probe_(cls):
        try:
            count = int(os.environ.get(ENV_CARDS, "1"))
        except ValueError:
            raise SimulationError(f"{ENV_CARDS} must be an integer, got {os.environ[ENV_CARDS]!r}") from None
        if count > 0:
            log.warning("fpgaserve test simulator: %d SIMULATED Alveo card(s), no real hardware", count)
        platform = os.environ.get(ENV_PLATFORM) or DEFAULT_PLATFORM
        cards = [cls(i, platform) for i in range(count)]
        for card in cards:
            card._write_stats()  # every card has a stats file from the start (all zeros)
        return cards

    def __init__(self, index: int, platform: str = DEFAULT_PLATFORM):
        super().__init__(f"sim{index}")
        self.index = index
        self.platform = platform
        self.capabilities = {"REGISTER_RW": True, "CALLABLE": True}
        self.timestamp = None
        self.bitfile_name = None
        self.clear_dict()
        self.contexts: dict[str, dict] = {}
        self._lock = threading.RLock()
        self._bos: dict[int, _Bo] = {}
        self._next_bo = 1
        self._cus: list[_ComputeUnit] = []
        self._model: Hls4mlKernelModel | None = None
        self._model_error = "no bitstream downloaded"
        self._clocks_mhz: list[int] = [300, 500]
        self._xclbin_uuid = ""
        # (start, end) of finished kernel runs, for the activity that drives power/temperature
        self._busy = deque(maxlen=4096)
        self._faults: deque[str] = deque(maxlen=MAX_FAULTS)
        _DEVICES.add(self)
        self._counts = {
            "downloads": 0,
            "kernel_starts": 0,
            "kernel_completions": 0,
            "hangs": 0,
            "starts_while_another_card_hung": 0,
            "bytes_to_device": 0,
            "bytes_from_device": 0,
        }

    # ------------------------------------------------------------------ identity
    @property
    def name(self) -> str:
        return f"{self.platform} (simulated)"

    def __repr__(self):
        return f"<SimulatedAlveoDevice {self.index}: {self.name}>"

    # ------------------------------------------------------------------ bitstreams
    def get_bitfile_metadata(self, bitfile_name, partial=False):
        from pynq.pl_server.xclbin_parser import XclBin

        return XclBin(bitfile_name)

    def gen_cache(self, bitstream, parser=None):
        pass

    def download(self, bitstream, parser=None):
        path = Path(bitstream.bitfile_name)
        with open(path, "rb") as f:
            head = f.read(304 + 112)
        if head[:8] != b"xclbin2\0":
            raise RuntimeError(f"Programming Device failed: {path} is not an xclbin (axlf) file")
        vbnv = head[304 + 48 : 304 + 112].split(b"\0", 1)[0].decode(errors="replace")
        if vbnv and vbnv != self.platform:
            # XRT refuses an xclbin linked for another shell (xclLoadXclBin: -95, "Shell does not match")
            raise RuntimeError(
                f"Programming Device failed: EOPNOTSUPP (95) Operation not supported/Shell does not match "
                f"(xclbin for {vbnv}, card runs {self.platform})"
            )
        if parser is None:
            parser = self.get_bitfile_metadata(str(path))
        model, model_error = None, ""
        project_dir = find_project_dir(path)
        if project_dir is None:
            model_error = f"no hls4ml project (hls4ml_config.yml) next to {path}: the simulator cannot compute krnl_rtl"
        else:
            try:
                model = Hls4mlKernelModel(project_dir)
            except Exception as e:
                raise RuntimeError(f"Programming Device failed: simulated card cannot model {path}: {e}") from e
        cus = []
        for name, ip in parser.ip_dict.items():
            if "cu_index" not in ip:
                continue
            banks = {k: r["memory"] for k, r in ip.get("registers", {}).items() if "memory" in r}
            cus.append(
                _ComputeUnit(
                    name=name,
                    kernel=ip["cu_name"].partition(":")[0],
                    base=ip["phys_addr"],
                    span=ip["addr_range"],
                    index=ip["cu_index"],
                    arg_banks=banks,
                )
            )
        now = time.monotonic()
        with self._lock:
            # reprogramming resets every CU: registers cleared, a hung kernel is gone
            for cu in self._cus:
                if cu.running:
                    self._busy.append((cu.started_at, now))
                if cu.counted:
                    cu.counted = False
                    _CONCURRENCY.ended()
            self._cus = cus
            self._model, self._model_error = model, model_error
            self._clocks_mhz = [c["frequency"] for c in parser.clock_dict.values()][:4] or [300, 500]
            self._xclbin_uuid = next((ip["xclbin_uuid"] for ip in parser.ip_dict.values()), "")
            self.contexts = {}
            self._counts["downloads"] += 1
        super().post_download(bitstream, parser)
        self._write_stats()

    def free_bitstream(self):
        with self._lock:
            self.contexts = {}

    def close(self):
        # XrtDevice.close drops the XRT handle and reopens it on the next download; nothing to drop here
        pass

    def open_context(self, description, shared=True):
        with self._lock:
            uuid = description.get("xclbin_uuid")
            if uuid and uuid != self._xclbin_uuid:
                raise RuntimeError(f"Could not open CU context - xclbin {uuid} is not loaded on {self.name}")
            cu = next((c for c in self._cus if c.name == description["fullpath"]), None)
            if cu is None:
                raise RuntimeError(f"Could not open CU context - no compute unit {description['cu_name']}")
            self.contexts[description["cu_name"]] = {"cu": description["cu_name"], "idx": cu.index, "shared": shared}
            return cu.index

    def close_context(self, cu_name):
        with self._lock:
            if self.contexts.pop(cu_name, None) is None:
                raise RuntimeError(f"CU context ({cu_name}) is not open.")

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

    def allocate_in_bank(self, shape, dtype, memidx, cacheable=0, **kwargs):
        """pynq's _xrt_allocate for a simulated bank: a PynqBuffer over the host copy."""
        try:
            elements = int(np.prod(shape))
        except TypeError:
            elements = int(shape)
        dtype = np.dtype(dtype)
        size = elements * dtype.itemsize
        if size <= 0:
            raise RuntimeError("Allocate failed: zero-sized buffer")
        with self._lock:
            desc = next((m for m in self.mem_dict.values() if m["idx"] == memidx), None)
            if desc is None or not desc["used"]:
                # XRT only manages banks the design uses (MEM_TOPOLOGY used=1)
                raise RuntimeError(f"Allocate failed: memory bank {memidx} is not used by the loaded design")
            address = self._find_space(memidx, desc["base_address"], desc["size"], size)
            handle = self._next_bo
            self._next_bo += 1
            bo = _Bo(handle, memidx, address, size, bytearray(size), bytearray([UNINITIALISED]) * size)
            self._bos[handle] = bo
        buf = PynqBuffer(shape, dtype, bo=handle, device=self, buffer=bo.host, device_address=address, coherent=False)
        # never set buf.memory: PynqBuffer.freebuffer would then call XRT's xclFreeBO
        weakref.finalize(buf, self._free_bo, handle)
        return buf

    def _find_space(self, memidx: int, base: int, bank_size: int, size: int) -> int:
        taken = sorted((b.address, b.size) for b in self._bos.values() if b.memidx == memidx)
        need = -(-size // BO_ALIGN) * BO_ALIGN
        cursor = base
        for address, length in taken:
            if address - cursor >= need:
                break
            cursor = max(cursor, address + -(-length // BO_ALIGN) * BO_ALIGN)
        if cursor + need > base + bank_size:
            raise RuntimeError(f"Allocate failed: bank {memidx} has no {size} contiguous bytes left")
        return cursor

    def _free_bo(self, handle: int) -> None:
        with self._lock:
            self._bos.pop(handle, None)

    def flush(self, bo, offset, ptr, size):
        with self._lock:
            b = self._bo(bo, offset, size)
            b.device[offset : offset + size] = b.host[offset : offset + size]
            self._counts["bytes_to_device"] += size
            self._write_stats()

    def invalidate(self, bo, offset, ptr, size):
        with self._lock:
            b = self._bo(bo, offset, size)
            b.host[offset : offset + size] = b.device[offset : offset + size]
            self._counts["bytes_from_device"] += size
            self._write_stats()

    def _bo(self, handle: int, offset: int, size: int) -> _Bo:
        b = self._bos.get(handle)
        if b is None:
            raise RuntimeError(f"Sync failed: buffer object {handle} does not exist on {self.name}")
        if offset < 0 or offset + size > b.size:
            raise RuntimeError(f"Sync failed: {size} bytes at offset {offset} exceed the {b.size}-byte buffer")
        return b

    def _bo_at(self, address: int, nbytes: int) -> _Bo | None:
        for b in self._bos.values():
            if b.address <= address and address + nbytes <= b.address + b.size:
                return b
        return None

    def get_usage(self):
        usage = _DeviceUsage()
        with self._lock:
            for b in self._bos.values():
                if 0 <= b.memidx < 8:
                    usage.ddrMemUsed[b.memidx] += b.size
                    usage.ddrBOAllocated[b.memidx] += 1
            for m in self.mem_dict.values():
                if 0 <= m["idx"] < 8 and not m.get("streaming"):
                    usage.memSize[m["idx"]] = m["size"]
            usage.h2c[0] = self._counts["bytes_to_device"]
            usage.c2h[0] = self._counts["bytes_from_device"]
            usage.dma_channel_cnt = 2
            usage.mm_channel_cnt = len(self.mem_dict)
        return usage

    # ------------------------------------------------------------------ registers
    def _cu_at(self, address: int, length: int) -> tuple[_ComputeUnit, int]:
        for cu in self._cus:
            if cu.base <= address and address + length <= cu.base + cu.span:
                return cu, address - cu.base
        raise SimulationError(f"register access at 0x{address:x} (+{length}) hits no compute unit on {self.name}")

    def read_registers(self, address, length):
        now = time.monotonic()
        with self._lock:
            cu, offset = self._cu_at(address, length)
            self._poll(cu, now)
            out = bytearray(cu.regs[offset : offset + length])
            if offset <= REG_CTRL < offset + length:
                ctrl = (
                    (AP_START if cu.running else 0)
                    | (AP_DONE if cu.done_latched else 0)
                    | (AP_IDLE if not cu.running else 0)
                    | (AUTO_RESTART if cu.auto_restart else 0)
                )
                at = REG_CTRL - offset
                out[at : at + 4] = ctrl.to_bytes(4, "little")[: max(0, min(4, length - at))]
                cu.done_latched = False  # ap_done is clear-on-read
            return bytes(out)

    def write_registers(self, address, data):
        data = bytes(data)
        with self._lock:
            cu, offset = self._cu_at(address, len(data))
            if offset % 4 or len(data) % 4:
                raise SimulationError(f"unaligned register write at 0x{address:x} ({len(data)} bytes)")
            # AXI-lite applies one 32-bit word after another, in address order: a CTRL start in
            # the same write as the arguments starts the kernel on the OLD arguments
            for k in range(0, len(data), 4):
                word_offset = offset + k
                word = int.from_bytes(data[k : k + 4], "little")
                if word_offset == REG_CTRL:
                    cu.auto_restart = bool(word & AUTO_RESTART)
                    if word & AP_START and not cu.running:
                        self._start(cu)
                else:
                    cu.regs[word_offset : word_offset + 4] = data[k : k + 4]

    def _poll(self, cu: _ComputeUnit, now: float) -> None:
        if cu.running and not cu.hung and now >= cu.busy_until:
            if cu.held:
                may_finish, fault = _CONCURRENCY.release(cu.started_at, now)
                if fault is not None:
                    self._faults.append(f"{cu.name}: {fault}")
                    log.warning("simulated card %d: kernel %s: %s", self.index, cu.name, fault)
                if not may_finish:
                    return
                cu.held = False
            cu.running = False
            if cu.counted:
                cu.counted = False
                _CONCURRENCY.ended()
            cu.done_latched = True
            self._busy.append((cu.started_at, now))
            self._counts["kernel_completions"] += 1
            self._write_stats()

    def _start(self, cu: _ComputeUnit) -> None:
        t0 = time.monotonic()
        cu.running = True
        cu.done_latched = False
        cu.started_at = t0
        cu.starts += 1
        self._counts["kernel_starts"] += 1
        if any(d is not self and any(c.hung for c in list(d._cus)) for d in list(_DEVICES)):
            self._counts["starts_while_another_card_hung"] += 1
        try:
            self._consume_rendezvous_request()
            if self._consume_hang_request():
                self._hang(cu, "hang requested through the control folder")
                return
            fault = self._execute(cu)
            if fault is not None:
                self._hang(cu, fault)
                return
            words = cu.reg32(REG_LEN_IN) + cu.reg32(REG_LEN_OUT)
            delay = _env_float(ENV_KERNEL_DELAY_MS) / 1000.0
            modelled = words / (self._clocks_mhz[0] * 1e6) + 2e-6 + delay
            cu.busy_until = max(time.monotonic(), t0 + modelled)
            cu.counted = True
            cu.held = _CONCURRENCY.began()
        except Exception as e:
            # the simulator could not run the kernel at all: leave the CU stuck, as the card
            # would be, and tell the caller loudly
            self._hang(cu, f"simulator error: {e}")
            raise
        finally:
            self._write_stats()

    def _hang(self, cu: _ComputeUnit, reason: str) -> None:
        cu.hung = True
        self._counts["hangs"] += 1
        self._faults.append(f"{cu.name}: {reason}")
        log.warning("simulated card %d: kernel %s hangs: %s", self.index, cu.name, reason)

    def _execute(self, cu: _ComputeUnit) -> str | None:
        """Run the kernel model; a string is the reason the real kernel would hang."""
        if cu.kernel != KRNL_RTL:
            raise SimulationError(f"no model for kernel '{cu.kernel}' (only hls4ml's {KRNL_RTL})")
        model = self._model
        if model is None:
            raise SimulationError(self._model_error)
        addr_in, addr_out = cu.reg64(REG_FIFO_IN), cu.reg64(REG_FIFO_OUT)
        len_in, len_out = cu.reg32(REG_LEN_IN), cu.reg32(REG_LEN_OUT)
        if len_in == 0 or len_in % model.n_in:
            return f"length_r_in={len_in} is not a positive multiple of N_IN={model.n_in}"
        if len_out != len_in // model.n_in * model.n_out:
            return (
                f"length_r_out={len_out} but {len_in // model.n_in} samples produce "
                f"{len_in // model.n_in * model.n_out} words (N_OUT={model.n_out})"
            )
        buffers = []
        for arg, address, nwords in (("fifo_in", addr_in, len_in), ("fifo_out", addr_out, len_out)):
            bo = self._bo_at(address, 4 * nwords)
            if bo is None:
                return f"{arg}: {4 * nwords} bytes at 0x{address:x} are not inside one buffer allocated on this card"
            tag = cu.arg_banks.get(arg)
            bank = next((m for m in self.mem_dict.values() if m["idx"] == bo.memidx), {}).get("tag")
            if tag is not None and bank != tag:
                return f"{arg}: buffer is in {bank}, but the CU's m_axi_gmem is connected to {tag}"
            buffers.append((bo, address - bo.address))
        (bo_in, off_in), (bo_out, off_out) = buffers
        words_in = np.frombuffer(bo_in.device, dtype="<u4", count=len_in, offset=off_in).copy()
        words_out = model.run(words_in)
        if words_out.size != len_out:
            raise SimulationError(f"kernel model produced {words_out.size} words, expected {len_out}")
        bo_out.device[off_out : off_out + 4 * len_out] = words_out.astype("<u4").tobytes()
        return None

    def _consume_rendezvous_request(self) -> None:
        folder = os.environ.get(ENV_CONTROL_DIR)
        if not folder:
            return
        path = Path(folder) / RENDEZVOUS_FILE
        try:
            text = path.read_text()
            os.unlink(path)
        except FileNotFoundError:
            return
        try:
            n = int(text.strip())
        except ValueError:
            raise SimulationError(f"{path} must contain the number of kernels to meet, got {text!r}") from None
        _CONCURRENCY.arm(n)
        log.warning("simulated cards: rendezvous of %d kernels armed through %s", n, path)

    def _consume_hang_request(self) -> bool:
        folder = os.environ.get(ENV_CONTROL_DIR)
        if not folder:
            return False
        try:
            os.unlink(Path(folder) / f"hang-card{self.index}")
            return True
        except FileNotFoundError:
            return False

    # ------------------------------------------------------------------ statistics
    @property
    def stats(self) -> dict:
        with self._lock:
            return {
                "card": self.index,
                "name": self.name,
                "simulated": True,
                **self._counts,
                "hung": [cu.name for cu in self._cus if cu.hung],
                "faults": list(self._faults),
                "xclbin_uuid": self._xclbin_uuid,
                "bitfile": str(self.bitfile_name) if self.bitfile_name else None,
                "buffers": len(self._bos),
                **_CONCURRENCY.snapshot(),
            }

    def _write_stats(self) -> None:
        folder = os.environ.get(ENV_CONTROL_DIR)
        if not folder:
            return
        path = Path(folder) / f"stats-card{self.index}.json"
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
        try:
            tmp.write_text(json.dumps(self.stats))
            os.replace(tmp, path)
        except OSError as e:
            log.warning("simulated card %d: cannot write %s: %s", self.index, path, e)

    # ------------------------------------------------------------------ telemetry
    def activity(self, now: float | None = None) -> float:
        """Fraction of the last second a kernel of this card was busy (a hung kernel is busy)."""
        now = time.monotonic() if now is None else now
        since = now - ACTIVITY_WINDOW_S
        intervals = list(self._busy) + [(cu.started_at, now) for cu in list(self._cus) if cu.running]
        busy = sum(max(0.0, min(end, now) - max(start, since)) for start, end in intervals)
        return min(1.0, busy / ACTIVITY_WINDOW_S)

    @property
    def device_info(self):
        """A filled ``xclDeviceInfo2`` (XRT's units: mV, mA, degC), simulated values."""
        # power follows the load at once (a running or hung kernel draws full dynamic power),
        # temperatures follow the busy fraction of the last second (thermal inertia)
        a = self.activity()
        p = 1.0 if any(cu.running for cu in list(self._cus)) else a
        info = _xrt.xclDeviceInfo2()
        info.mName = self.name.encode()[:255]
        info.mFpga = b"xcu250-figd2104-2L-e"
        info.mVendorId = 0x10EE
        info.mDeviceId = 0x5005
        info.mSubsystemVendorId = 0x10EE
        info.mSubsystemId = 0x000E
        info.mDDRSize = 64 << 30
        info.mDataAlignment = BO_ALIGN
        info.mDDRBankCount = 4
        info.mMinTransferSize = 0
        for i, mhz in enumerate(self._clocks_mhz[:4]):
            info.mOCLFrequency[i] = mhz
        info.mNumClocks = len(self._clocks_mhz)
        info.mPCIeLinkWidth = info.mPCIeLinkWidthMax = 16
        info.mPCIeLinkSpeed = info.mPCIeLinkSpeedMax = 3
        info.mPciSlot = self.index
        info.mTimeStamp = int(time.time())
        # every card a little different, so per-card series are distinguishable
        t = 0.5 * self.index
        info.mOnChipTemp = round(41 + t + 24 * a)
        info.mFanTemp = round(33 + t + 6 * a)
        info.mFanRpm = round(1800 + 1500 * a)
        info.mFanSpeed = round(30 + 40 * a)
        for i in range(4):
            info.mDimmTemp[i] = round(38 + t + i + 4 * a)
            info.mSE98Temp[i] = round(36 + t + i + 3 * a)
        info.m12VPex = round(12070 - 40 * p)
        info.mPexCurr = round(1250 + 1900 * p)
        info.m12VAux = round(12150 - 30 * p)
        info.mAuxCurr = round(1050 + 1600 * p)
        info.mVccIntVol = 850
        info.mVInt = 850
        info.mCurrent = float(9500 + 26000 * p)
        info.mVccIntCurr = round(9500 + 26000 * p) & 0xFFFF
        info.m0v85 = 850
        info.m12vSW = 12100
        info.m1v8Top = 1800
        info.m1v2Top = 1200
        info.m1v2Bottom = 1200
        info.m3v3Aux = 3300
        info.m3v3Pex = 3310
        info.mMgt0v9 = 900
        info.mMgtVtt = 1200
        info.mSys5v5 = 5500
        info.mDDRVppTop = 2500
        info.mDDRVppBottom = 2500
        info.mMigCalib = True
        return info

    @property
    def sensors(self):
        from pynq.pmbus import get_xrt_sysfs_rails

        return get_xrt_sysfs_rails(self)

    @property
    def clocks(self):
        return {f"clock{i}": {"frequency": mhz} for i, mhz in enumerate(m for m in self._clocks_mhz if m)}


def _env_float(name: str) -> float:
    text = os.environ.get(name)
    if not text:
        return 0.0
    try:
        return float(text)
    except ValueError:
        raise SimulationError(f"{name} must be a number, got {text!r}") from None


def _arm_from_environment() -> None:
    text = os.environ.get(ENV_RENDEZVOUS)
    if not text:
        return
    try:
        n = int(text)
    except ValueError:
        raise SimulationError(f"{ENV_RENDEZVOUS} must be an integer, got {text!r}") from None
    _CONCURRENCY.arm(n)


_arm_from_environment()


def simulated_cards() -> list[SimulatedAlveoDevice]:
    """The simulated cards among pynq.Device.devices (probing them if nobody has yet)."""
    return [d for d in Device.devices if isinstance(d, SimulatedAlveoDevice)]


def reset_pynq_devices() -> None:
    """Forget PYNQ's cached device list, so the next Device.devices probes again (tests)."""
    for attr in ("_devices", "_active_device"):
        if attr in Device.__dict__:
            delattr(Device, attr)


__all__ = [
    "ENV_CARDS",
    "ENV_CONTROL_DIR",
    "ENV_KERNEL_DELAY_MS",
    "ENV_PLATFORM",
    "ENV_RENDEZVOUS",
    "ENV_RENDEZVOUS_TIMEOUT",
    "RENDEZVOUS_FILE",
    "Hls4mlKernelModel",
    "SimulatedAlveoDevice",
    "SimulatedMemory",
    "SimulationError",
    "arm_rendezvous",
    "concurrency",
    "decode_words",
    "disarm_rendezvous",
    "encode_words",
    "find_project_dir",
    "reset_pynq_devices",
    "simulated_cards",
    "word_type",
]
