"""The simulated Alveo card: the part of XRT + xocl + the card that a host program can observe.

This module imports neither pynq nor pyxrt; the two host APIs (``xrt_python/pyxrt``, a test-only
``pyxrt`` module, and ``pynq_device``, a PYNQ 3.0.1 Device plug-in) are thin layers over it. What
it reproduces, and where the behaviour comes from (Xilinx/XRT at tag 202410.2.17.319, paths under
src/runtime_src/core/):

Cards
    ``FPGASERVE_SIM_CARDS`` cards (default 1), each running the shell ``FPGASERVE_SIM_PLATFORM``
    (default xilinx_u250_gen3x16_xdma_shell_4_1; interface uuid ``FPGASERVE_SIM_INTERFACE_UUID``
    or the one :func:`fpga_sim.xclbin.shell_info` derives), user-PF BDF ``0000:<0x65+N>:00.1``.

Loading an xclbin (xocl_ioctl.c ``xocl_read_axlf_helper`` order)
    1. ``bad_state`` -> EDEADLK (even for the xclbin already loaded);
    2. flat shells: feature-ROM timestamp mismatch -> EOPNOTSUPP ("Xclbin does not match shell");
    3. the same uuid as loaded -> nothing happens (no reprogramming, no CU reset: a hung CU stays
       hung; Xilinx/XRT#5858, #5833);
    4. a CU context open anywhere (any process) -> EBUSY; 5. buffers anywhere -> EPERM;
    6. 2RP shells: interface uuid mismatch -> EINVAL; then the card is programmed.
    Failures raise :class:`CardError` (errno + the ``[XRT] ERROR`` lines shim.cpp logs).

Buffers
    Separate host and device copies; only DMA (sync) moves bytes between them. Device memory of a
    new buffer is 0xA5 (DDR is not zeroed). Addresses are real offsets inside the bank's range
    (GROUP_TOPOLOGY bank index, as XRT uses); banks not marked used cannot hold buffers (EINVAL).
    DMA runs at ``FPGASERVE_SIM_PCIE_GBPS`` (default 12, GB/s = 1e9 B/s) on one host-to-card and
    one card-to-host channel per card; the caller blocks for the transfer time (holding the GIL
    for pyxrt, whose ``bo.sync`` never releases it; releasing it for PYNQ, whose ctypes calls do;
    the C double of libxrt_coreutil, ``fpga_sim/xrt_c``, takes ``dma_begin``'s end time and
    sleeps in C, then calls ``dma_finish``).
    The bytes move while the transfer is modelled (they are in place when the sync returns).
    A user-pointer buffer (:meth:`SimCard.alloc_userptr`: XRT 2.20's ``pyxrt.ext.bo``, the legacy
    ``xclAllocUserPtrBO``) has the caller's memory as its host copy: xocl's rules (page-aligned
    address, pages mapped writable, the bank's checks), and its syncs read and write that memory
    where it is. ``bytes_to_device_userptr``/``bytes_from_device_userptr`` count what moved that
    way; the rest of ``bytes_to_device`` came from buffers' own host memory, where the host had
    copied it first.

Where the card's work runs (``FPGASERVE_SIM_DEVICE``, read when a card object is made)
    This module keeps the rules and the timeline; the card's own work -- device memory, the
    copies of a sync, a kernel call's computation from the device memory it reads and the write
    of its outputs at completion -- is ``device_side.CardSide``. ``inline`` (default) runs it in
    this process, on the calling thread: its CPU is charged to the host program. ``process`` runs
    it in a card process of its own (one per card and host process, started on first use, ended
    by ``forget_cards`` or process exit): buffers' host memory is a memfd both processes map,
    device memory lives there only, and the host sends requests over a socket and blocks, in
    ``poll`` and without spinning, for exactly the modelled DMA and kernel time (holding the GIL
    or not as above); should the card process be slower than the model (a first C-simulation),
    the host waits for it, and that wait is ``stats["device_side"]["late_s"]``. Both run the same
    code, so results are bit-identical, and every rule here (ERT states, loads, resets, hangs,
    bad_state, bank checks, 0xA5 memory, state files) applies unchanged: the card process never
    decides anything, it only moves and computes bytes. A computation that fails there makes the
    command hang at its modelled completion (inline: at its start), with the same fault text.
    ``timing`` is for throughput runs: a card model that costs the host what the hardware costs
    it. Device memory aliases the buffers' host memory (a user-pointer buffer's: the caller's
    pages), so a sync moves no bytes and only its modelled time passes; kernel calls are timed
    as in the other modes but compute nothing (no C-simulation is built, outputs are not
    written; ``stats["device_side"]`` says ``"computed": false`` and counts
    ``uncomputed_calls``). Every rule here applies unchanged, except what aliasing cannot show
    (separate host and device copies, 0xA5 in host-backed buffers). Results are checked in
    exactness runs, with ``inline`` or ``process``.

Commands (XRT's KDS + ERT)
    A start is queued on one CU (chosen among the allowed ones: the one free soonest) and runs
    after the commands before it on that CU. It starts at a modelled time, reads device memory
    then, and completes ``kernels.Timing`` seconds later, when its outputs land in device memory.
    Completion is a time, not a thread: nothing spends CPU while a kernel "runs" (the C-simulation
    that computes the result is real CPU, memoized). The state is NEW until completion and
    COMPLETED after (the xocl KDS writes the packet state only at completion). A command hangs,
    forever, when the hardware would (bad lengths, a buffer outside the allocations or in a bank
    the CU's port is not connected to: the reason goes to ``faults``) or when asked to (control
    folder ``hang-card<N>`` / ``hang-card<N>-<cu>``, consumed by the next start); commands queued
    behind it on that CU never start.

Closing (kds_core.c ``kds_del_cu_context``)
    Closing a CU context (kernel object gone, process exit) with commands of this process still
    outstanding on it stalls ``ABORT_WAIT_S`` (the driver's 500 ms wait), aborts what was queued,
    and when the CU is hung sets the card's ``bad_state``: every later load fails with EDEADLK and
    every later start with EDEADLK, until a device reset (``xbutil reset``, :func:`reset_card`),
    which works only while no other process has the card open and leaves no xclbin loaded.
    Closing the device with open contexts closes them first (process exit included).

State that outlives a process
    ``FPGASERVE_SIM_CONTROL_DIR/state-card<N>.json`` (loaded uuid, bad_state, hung CUs, which
    processes hold the card open with how many contexts/buffers, resets, programs), updated
    under an flock; a holder whose process died no longer counts, and if it died with a hung
    command the card gets ``bad_state`` (what the driver's teardown would have done). Without a
    control folder the state lives in this process. ``stats-card<N>.json`` mirrors
    :attr:`SimCard.stats` (written within ``STATS_FLUSH_S`` of a change, at once for hangs).

Concurrency proof
    The process counts the commands executing at each modelled instant on all its cards and keeps
    the peak; a *rendezvous* of N (``arm_rendezvous``, ``FPGASERVE_SIM_RENDEZVOUS`` at import, or a
    ``rendezvous`` file holding N in the control folder, consumed by the next start) holds every
    command that starts while it is pending until N execute at once; a host that serializes them
    cannot get there, and after ``FPGASERVE_SIM_RENDEZVOUS_TIMEOUT_S`` (default 20 s) a held
    command records a "rendezvous timeout" fault and completes.

Not modelled: several xclbin slots, PCIe P2P/host-memory banks, AIE, interrupts vs polling,
ERT firmware limits (slots per CU), DMA of several processes sharing a channel, the CU register
values XRT reads back, AXI error responses (a bad address hangs instead).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import functools
import inspect
import itertools
import json
import logging
import math
import mmap
import os
import struct
import sys
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .device_side import ENV_DEVICE, device_mode, make_device
from .environ import getenv, getenv_raw
from .errors import SimulationError
from .xclbin import DEFAULT_PLATFORM, ShellInfo, Xclbin, shell_info

if TYPE_CHECKING:
    from .kernels import KernelModel

log = logging.getLogger("fpgaserve.fpga_sim")

ENV_CARDS = "FPGASERVE_SIM_CARDS"
ENV_CONTROL_DIR = "FPGASERVE_SIM_CONTROL_DIR"
ENV_PLATFORM = "FPGASERVE_SIM_PLATFORM"
ENV_INTERFACE_UUID = "FPGASERVE_SIM_INTERFACE_UUID"
ENV_PCIE_GBPS = "FPGASERVE_SIM_PCIE_GBPS"
ENV_RENDEZVOUS = "FPGASERVE_SIM_RENDEZVOUS"
ENV_RENDEZVOUS_TIMEOUT = "FPGASERVE_SIM_RENDEZVOUS_TIMEOUT_S"
#: "unreadable": the card's sensor sysfs is absent (a container or VM without the xmc/hwmon
#: nodes): XRT 2.17 reports "No sensors present", PYNQ's xclDeviceInfo2 sensor fields read 0
ENV_SENSORS = "FPGASERVE_SIM_SENSORS"
RENDEZVOUS_FILE = "rendezvous"

DEFAULT_PCIE_GBPS = 12.0  # PCIe Gen3 x16, what the xdma shells reach in practice
DEFAULT_RENDEZVOUS_TIMEOUT_S = 20.0
ABORT_WAIT_S = 0.5  # kds_del_cu_context sleeps 500 ms per round while commands are outstanding
STATS_FLUSH_S = 0.05
SNAPSHOT_TTL_S = 0.05
BO_ALIGN = 4096
ACTIVITY_WINDOW_S = 1.0
MAX_FAULTS = 20
FIRST_BUS = 0x65
# CTRL register bits (offset 0) of an ap_ctrl_hs kernel: krnl_rtl_control_s_axi.v's
# "Address Info" (tests/cards/test_card_anchors.py reads them from the installed hls4ml)
AP_START, AP_DONE, AP_IDLE, AP_READY, AUTO_RESTART = 0x1, 0x2, 0x4, 0x8, 0x80

INF = math.inf


class CardError(RuntimeError):
    """An error the XRT stack returns: ``errno`` (positive), XRT's ``what`` and the log lines
    (``[XRT] ERROR: ...`` text without the prefix) it prints before throwing."""

    def __init__(self, err: int, what: str, logs: list[str] | None = None):
        super().__init__(f"{what}: {os.strerror(err)}")
        self.errno = err
        self.what = what
        self.logs = logs or []


#: [(the variable's raw value, its Path)]: hot calls ask often, the variable seldom changes
_CONTROL_PATH: list[tuple[object, Path | None]] = [(None, None)]


def control_dir() -> Path | None:
    raw = getenv_raw(ENV_CONTROL_DIR)
    if not raw:
        return None
    cached = _CONTROL_PATH[0]
    if cached[0] != raw:
        cached = _CONTROL_PATH[0] = (raw, Path(getenv(ENV_CONTROL_DIR) or "."))
    return cached[1]


def card_count() -> int:
    text = os.environ.get(ENV_CARDS, "1")
    try:
        return max(0, int(text))
    except ValueError:
        raise SimulationError(f"{ENV_CARDS} must be an integer, got {text!r}") from None


_PCIE_RATE: list[tuple[str | None, float]] = [(None, DEFAULT_PCIE_GBPS * 1e9)]  # [(the variable, its rate)]


def pcie_rate() -> float:
    text = getenv(ENV_PCIE_GBPS)
    if not text:
        return DEFAULT_PCIE_GBPS * 1e9
    cached = _PCIE_RATE[0]
    if cached[0] == text:
        return cached[1]
    try:
        value = float(text)
    except ValueError:
        raise SimulationError(f"{ENV_PCIE_GBPS} must be a number (GB/s), got {text!r}") from None
    if value <= 0:
        raise SimulationError(f"{ENV_PCIE_GBPS} must be positive, got {text!r}")
    _PCIE_RATE[0] = (text, value * 1e9)
    return value * 1e9


def sensors_readable() -> bool:
    return os.environ.get(ENV_SENSORS, "").strip().lower() not in ("unreadable", "absent", "0", "off")


# ---------------------------------------------------------------------------------- sleeping
_METER_LOCK = threading.Lock()
try:
    # ctypes.PyDLL keeps the GIL across the call: usleep through it blocks every Python thread,
    # as pyxrt's bo.sync and run.wait do (pybind11 bindings without gil_scoped_release)
    _usleep = ctypes.PyDLL(None).usleep
    _usleep.argtypes = [ctypes.c_uint]
    _usleep.restype = ctypes.c_int
except (OSError, AttributeError):  # pragma: no cover - every Linux libc has usleep
    _usleep = None


#: waits shorter than this spin instead of sleeping: a sleep and its wake-up cost a context switch
#: each way (tens of microseconds of CPU in a VM) and wake up 50+ µs late (timer slack)
SPIN_BELOW_S = 30e-6
#: CPU seconds this process spent in ``sleep_until`` (the system's cost of blocking for modelled
#: time, which a blocking sync or wait on a real card pays too; part of the stand-in CPU)
_WAIT_CPU_S = [0.0]


def blocked_cpu_s() -> float:
    """CPU seconds spent so far blocking (or spinning) for modelled time, every thread."""
    return _WAIT_CPU_S[0]


def sleep_until(deadline: float, hold_gil: bool) -> None:
    """Block until ``time.monotonic() >= deadline``, holding the GIL or not (the last
    ``SPIN_BELOW_S`` spin: holding the GIL, or yielding it between looks at the clock).

    With the GIL held each stretch is one C call; between stretches the interpreter could switch
    threads (a real pyxrt call holds the GIL throughout), which only matters for waits that loop.
    """
    t0 = time.thread_time()
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if left < SPIN_BELOW_S:
                if hold_gil:
                    while time.monotonic() < deadline:
                        pass
                else:
                    while time.monotonic() < deadline:
                        time.sleep(0)  # lets other threads take the GIL
                return
            if hold_gil and _usleep is not None:
                _usleep(min(int(left * 1e6) + 1, 1_000_000_000))
            else:
                time.sleep(left)
    finally:
        spent = time.thread_time() - t0
        with _METER_LOCK:
            _WAIT_CPU_S[0] += spent


# ---------------------------------------------------------------------------------- stand-in CPU
_METER = threading.local()
#: CPU seconds this process spent inside the simulated card's host APIs (pyxrt's and PYNQ's
#: stand-ins, buffer finalizers, the stats thread): the simulator's own cost, which a
#: benchmark subtracts to report the server's (a real runtime's calls cost CPU too, but not
#: these: parsing /proc/self/maps, writing stats files, talking to the card process)
_STAND_IN_CPU_S = [0.0]


#: more of the stand-in's CPU, metered elsewhere: callables giving seconds so far (the C double
#: of libxrt_coreutil meters its callbacks into the card model itself, fpga_sim.xrt_c_bridge)
_STAND_IN_METERS: list = []


def add_stand_in_meter(seconds_so_far) -> None:
    """Count ``seconds_so_far()`` (CPU seconds) as the stand-in's too."""
    _STAND_IN_METERS.append(seconds_so_far)


def stand_in_cpu_s() -> float:
    """CPU seconds spent so far in the simulated runtime, every thread of this process."""
    return _STAND_IN_CPU_S[0] + sum(meter() for meter in _STAND_IN_METERS)


def metered(fn):
    """Charge ``fn``'s thread CPU time to the stand-in (outermost metered call only)."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        depth = getattr(_METER, "depth", 0)
        if depth:
            return fn(*args, **kwargs)
        _METER.depth = 1
        t0 = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            spent = time.thread_time() - t0
            _METER.depth = 0
            with _METER_LOCK:
                _STAND_IN_CPU_S[0] += spent

    return call


def meter_class(cls) -> None:
    """Meter every public method of ``cls`` and its ``__init__`` (see ``metered``)."""
    for name, attr in list(vars(cls).items()):
        if (name == "__init__" or not name.startswith("_")) and inspect.isfunction(attr):
            setattr(cls, name, metered(attr))


#: set by fpga_sim.xrt_c_bridge when the C double of libxrt_coreutil is loaded: its counts of
#: blocking stretches, and of those entered holding the GIL
BLOCKING_COUNTS = None

_CALLER = threading.local()


class _holding_gil:  # a class: less per use than a contextlib generator
    """Within a host API call: whether its waits for the card side hold the GIL (pyxrt) or
    not (PYNQ); waits outside any call hold it, as most of pyxrt's calls do."""

    __slots__ = ("before", "hold")

    def __init__(self, hold: bool):
        self.hold = hold

    def __enter__(self) -> None:
        self.before = getattr(_CALLER, "hold_gil", True)
        _CALLER.hold_gil = self.hold

    def __exit__(self, *exc) -> None:
        _CALLER.hold_gil = self.before


def _holds_gil() -> bool:
    return getattr(_CALLER, "hold_gil", True)


# ---------------------------------------------------------------------------------- concurrency
class _Concurrency:
    """Commands executing at once on every simulated card of this process, and the rendezvous.

    Counted in the modelled timeline: a command executes from its start to its completion (a
    hung one is not counted). Events are processed in time order, so the count is exact.
    """

    def __init__(self):
        self.executing = 0
        self.peak = 0
        self.wanted = 0
        self.state = "off"  # off | waiting | met | timed out
        self.rendezvous_peak = 0
        self.timeout_s = DEFAULT_RENDEZVOUS_TIMEOUT_S

    def arm(self, n: int, timeout_s: float | None = None) -> None:
        if n < 1:
            raise SimulationError(f"a rendezvous needs at least one kernel, got {n}")
        self.wanted = n
        self.timeout_s = float(timeout_s if timeout_s is not None else _rendezvous_timeout())
        self.rendezvous_peak = self.executing
        self.state = "met" if self.executing >= n else "waiting"

    def disarm(self) -> None:
        self.wanted, self.state, self.rendezvous_peak = 0, "off", 0

    def began(self) -> bool:
        """A command started executing; True if it must be held for the rendezvous."""
        self.executing += 1
        self.peak = max(self.peak, self.executing)
        if self.state != "waiting":
            return False
        self.rendezvous_peak = max(self.rendezvous_peak, self.executing)
        if self.executing >= self.wanted:
            self.state = "met"
            return False
        return True

    def snapshot(self) -> dict:
        return {
            "max_concurrent_kernels": self.peak,
            "rendezvous": {"wanted": self.wanted, "state": self.state, "peak": self.rendezvous_peak},
        }


def _rendezvous_timeout() -> float:
    text = os.environ.get(ENV_RENDEZVOUS_TIMEOUT)
    try:
        value = float(text) if text else 0.0
    except ValueError:
        raise SimulationError(f"{ENV_RENDEZVOUS_TIMEOUT} must be a number, got {text!r}") from None
    return value if value > 0 else DEFAULT_RENDEZVOUS_TIMEOUT_S


#: one lock for every simulated card of the process (state, timeline, buffers); never held
#: while sleeping for DMA or a wait
_LOCK = threading.RLock()
_CONCURRENCY = _Concurrency()
_CARDS: dict[int, SimCard] = {}


def arm_rendezvous(n: int, timeout_s: float | None = None) -> None:
    """Hold commands that start from now on until ``n`` execute at once (see the module docstring)."""
    with _LOCK:
        _advance(time.monotonic())
        _CONCURRENCY.arm(n, timeout_s)


def disarm_rendezvous() -> None:
    """Drop a pending rendezvous: commands run freely again (held ones are not released early)."""
    with _LOCK:
        _CONCURRENCY.disarm()


def concurrency() -> dict:
    """{"max_concurrent_kernels": peak since start, "rendezvous": {"wanted", "state", "peak"}}."""
    with _LOCK:
        _advance(time.monotonic())
        return _CONCURRENCY.snapshot()


# ---------------------------------------------------------------------------------- process liveness
def _proc_start(pid: int) -> str | None:
    """Start time of process ``pid`` (field 22 of /proc/<pid>/stat), None if it is gone or a zombie."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = text.rsplit(")", 1)[-1].split()
    if not rest or rest[0] in ("Z", "X"):
        return None
    return rest[19] if len(rest) > 19 else "?"


_SELF_START = _proc_start(os.getpid()) or "?"


def _alive(pid: int, start: str) -> bool:
    now = _proc_start(pid)
    return now is not None and start in ("?", now)


class _ProcmapQuery(ctypes.Structure):
    """``struct procmap_query`` (linux/fs.h, Linux >= 6.11): one VMA of /proc/<pid>/maps by ioctl."""

    _fields_ = [
        ("size", ctypes.c_uint64),
        ("query_flags", ctypes.c_uint64),
        ("query_addr", ctypes.c_uint64),
        ("vma_start", ctypes.c_uint64),
        ("vma_end", ctypes.c_uint64),
        ("vma_flags", ctypes.c_uint64),
        ("vma_page_size", ctypes.c_uint64),
        ("vma_offset", ctypes.c_uint64),
        ("inode", ctypes.c_uint64),
        ("dev_major", ctypes.c_uint32),
        ("dev_minor", ctypes.c_uint32),
        ("vma_name_size", ctypes.c_uint32),
        ("build_id_size", ctypes.c_uint32),
        ("vma_name_addr", ctypes.c_uint64),
        ("build_id_addr", ctypes.c_uint64),
    ]


_PROCMAP_QUERY = 0xC0000000 | (ctypes.sizeof(_ProcmapQuery) << 16) | (ord("f") << 8) | 17  # _IOWR('f', 17, ...)
_VMA_WRITABLE = 0x2
_MAPS = threading.local()  # per thread: (fork generation, /proc/self/maps fd, query, its pointer) or False
_FORKS = [0]
_PID = [os.getpid()]  # os.getpid() for the hot calls (a system call each time), kept across forks


def _forked() -> None:
    _FORKS[0] += 1  # /proc/self was the parent's
    _PID[0] = os.getpid()


os.register_at_fork(after_in_child=_forked)
try:
    _ioctl = ctypes.PyDLL(None, use_errno=True).ioctl  # PyDLL: the GIL stays held, as in the driver call
    _ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
    _ioctl.restype = ctypes.c_int
except (OSError, AttributeError):  # pragma: no cover
    _ioctl = None


def _maps_query():
    """This thread's PROCMAP_QUERY state for this process, or None where the kernel has no such
    ioctl (then /proc/self/maps is parsed)."""
    q = getattr(_MAPS, "q", None)
    if q is not None and (q is False or q[0] == _FORKS[0]):
        return q or None
    if q:
        os.close(q[1])  # opened before a fork
    q = False
    if _ioctl is not None:
        try:
            fd = os.open("/proc/self/maps", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            fd = -1
        if fd >= 0:
            query = _ProcmapQuery(size=ctypes.sizeof(_ProcmapQuery))  # query_flags 0: the covering VMA, or ENOENT
            q = (_FORKS[0], fd, query, ctypes.byref(query))
            if _vma(q, id(q)) is None and ctypes.get_errno() in (errno.ENOTTY, errno.EINVAL, errno.EOPNOTSUPP):
                os.close(fd)
                q = False
    _MAPS.q = q
    return q or None


def _vma(q, address: int) -> tuple[int, int, int] | None:
    """(start, end, flags) of the VMA covering ``address``, None if none does (errno says why)."""
    _gen, fd, query, ref = q
    query.query_addr = address
    if _ioctl(fd, _PROCMAP_QUERY, ref) != 0:
        return None
    return query.vma_start, query.vma_end, query.vma_flags


def _user_pages_writable(address: int, size: int) -> bool:
    """Whether every page of [address, address + size) is mapped writable in this process
    (what pinning them for the device's writes needs): PROCMAP_QUERY on /proc/self/maps, one
    ioctl per VMA (a few microseconds, where parsing the text of every mapping takes
    milliseconds in a large process), or the text where the kernel lacks that ioctl."""
    start = address - address % BO_ALIGN
    end = address + max(size, 1)
    covered = start
    q = _maps_query()
    if q is not None:
        while covered < end:
            vma = _vma(q, covered)
            if vma is None or not vma[2] & _VMA_WRITABLE:  # a hole, or read-only
                return False
            covered = vma[1]
        return True
    try:
        lines = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return False
    for line in lines:
        fields = line.split(maxsplit=2)
        lo, hi = (int(v, 16) for v in fields[0].split("-"))
        if hi <= covered:
            continue
        if lo > covered or "w" not in fields[1]:  # a hole, or read-only
            return False
        covered = hi
        if covered >= end:
            return True
    return False


# ---------------------------------------------------------------------------------- control requests
_IN_NONBLOCK_CLOEXEC = 0o4000 | 0o2000000
# IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR
_IN_MASK = 0x40 | 0x80 | 0x100 | 0x200 | 0x400 | 0x800 | 0x01000000
_IN_SELF = 0x400 | 0x800 | 0x4000 | 0x8000  # the folder itself went, the queue overflowed, the watch ended
_IN_EVENT = struct.Struct("iIII")
try:
    _INOTIFY = ctypes.PyDLL(None, use_errno=True)  # PyDLL: the GIL stays held (a start never releases it)
    _INOTIFY.inotify_init1.argtypes = [ctypes.c_int]
    _INOTIFY.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    _INOTIFY.read.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
    _INOTIFY.read.restype = ctypes.c_ssize_t
except (OSError, AttributeError):  # pragma: no cover
    _INOTIFY = None


class _RequestWatch:
    """The request files of the control folder (``hang-card*``, ``rendezvous``), listed again
    only after inotify reported one of them created, removed or renamed there (by any process),
    instead of a directory read at every start: the event is queued by the system call that
    made the file, before it returns, so a start after a request sees it as before. Without
    inotify (or a watch on the folder) every call lists the folder. Used under _LOCK."""

    def __init__(self):
        self.folder: Path | None = None
        self.fd = -1
        self.generation = -1
        self.names: set[str] = set()
        self.stale = True
        self.buf = ctypes.create_string_buffer(64 * 1024)

    def requests(self, folder: Path) -> set[str]:
        if folder is not self.folder or self.generation != _FORKS[0]:  # control_dir(): one Path per value
            self._watch(folder)
        elif self.fd >= 0:
            self._drain()
        if self.stale or self.fd < 0:
            try:
                self.names = {n for n in os.listdir(folder) if n.startswith(("hang-card", RENDEZVOUS_FILE))}
            except FileNotFoundError:
                self.names = set()
                self._close()  # the folder is not there (yet): no watch, list it next time
                self.folder = None
                return set()
            self.stale = False
        return self.names  # the callers only read it

    def _watch(self, folder: Path) -> None:
        self._close()  # another folder, or a fork (an inherited inotify instance is the parent's too)
        self.folder, self.generation, self.stale, self.fd = folder, _FORKS[0], True, -1
        if _INOTIFY is None:
            return
        fd = _INOTIFY.inotify_init1(_IN_NONBLOCK_CLOEXEC)
        if fd < 0:
            return
        if _INOTIFY.inotify_add_watch(fd, os.fsencode(folder), _IN_MASK) < 0:
            os.close(fd)
            return
        self.fd = fd  # watching from before the listing that follows: nothing falls between

    def _drain(self) -> None:
        while True:
            n = _INOTIFY.read(self.fd, self.buf, len(self.buf))
            if n <= 0:
                if n < 0 and ctypes.get_errno() == errno.EINTR:
                    continue
                if n < 0 and ctypes.get_errno() != errno.EAGAIN:
                    self._close()
                return
            raw, at = self.buf.raw[:n], 0
            while at < n:
                _wd, mask, _cookie, length = _IN_EVENT.unpack_from(raw, at)
                name = raw[at + 16 : at + 16 + length].rstrip(b"\0")
                at += 16 + length
                if mask & _IN_SELF or name.startswith((b"hang-card", RENDEZVOUS_FILE.encode())):
                    self.stale = True
                if mask & (0x400 | 0x800 | 0x8000):  # the folder is gone or moved: watch it afresh
                    self._close()
                    self.folder = None
                    return

    def _close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
        self.fd = -1
        self.stale = True


_REQUESTS = _RequestWatch()


# ---------------------------------------------------------------------------------- persistent state
def _fresh_state(index: int) -> dict:
    return {
        "card": index,
        "xclbin_uuid": "",
        "xclbin": None,
        "bad_state": False,
        "bad_state_reason": "",
        "hung_cus": [],
        "holders": {},
        "programs": 0,
        "resets": 0,
    }


_MEMORY_STATE: dict[int, dict] = {}


class _Store:
    """state-card<N>.json under an flock (or a dict of this process without a control folder)."""

    def __init__(self, index: int):
        self.index = index
        self._cache: tuple[object, dict] | None = None
        self._cache_t = 0.0
        self._cache_path: Path | None = None
        self._paths_of: tuple[Path, Path, Path] | None = None

    def _paths(self) -> tuple[Path, Path] | None:
        folder = control_dir()
        if folder is None:
            return None
        paths = self._paths_of
        if paths is None or paths[0] is not folder:  # control_dir() gives the same Path while the folder stays
            paths = self._paths_of = (
                folder,
                folder / f"state-card{self.index}.json",
                folder / f"state-card{self.index}.lock",
            )
        return paths[1], paths[2]

    @contextlib.contextmanager
    def edit(self):
        """The state, locked, pruned of dead holders; written back if changed."""
        paths = self._paths()
        if paths is None:
            state = _MEMORY_STATE.setdefault(self.index, _fresh_state(self.index))
            _prune(state)
            yield state
            return
        path, lock_path = paths
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                state = _read_state(path, self.index)
                before = json.dumps(state, sort_keys=True)
                _prune(state)
                yield state
                if json.dumps(state, sort_keys=True) != before:
                    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
                    tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
                    os.replace(tmp, path)
                    self._cache = None
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def snapshot(self) -> dict:
        """The state for reading (dead holders not pruned): this process's changes at once, other
        processes' within SNAPSHOT_TTL_S (a stat per call would release the GIL in hot calls)."""
        paths = self._paths()
        if paths is None:
            return _MEMORY_STATE.setdefault(self.index, _fresh_state(self.index))
        path = paths[0]
        now = time.monotonic()
        if self._cache is not None and now - self._cache_t < SNAPSHOT_TTL_S and self._cache_path is path:
            return self._cache[1]
        self._cache_t, self._cache_path = now, path
        try:
            st = path.stat()
            key: object = (str(path), st.st_mtime_ns, st.st_size, st.st_ino)
        except FileNotFoundError:
            key = (str(path), None)
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        state = _read_state(path, self.index)
        self._cache = (key, state)
        return state


def _read_state(path: Path, index: int) -> dict:
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        return _fresh_state(index)
    except (OSError, ValueError) as e:
        raise SimulationError(f"simulated card state {path} is unreadable: {e}") from None
    fresh = _fresh_state(index)
    fresh.update(state)
    return fresh


def _prune(state: dict) -> None:
    """Forget holders whose process died; one that died with a hung command leaves the card in
    bad_state, as the driver's teardown of its contexts would have."""
    for pid, rec in list(state["holders"].items()):
        if int(pid) == os.getpid() or _alive(int(pid), rec.get("start", "?")):
            continue
        if rec.get("hung"):
            state["bad_state"] = True
            state["bad_state_reason"] = (
                f"process {pid} exited with commands outstanding on hung CU(s) {', '.join(rec['hung'])}: "
                "CU hangs, please reset device"
            )
        del state["holders"][pid]


def _holder(state: dict) -> dict:
    return state["holders"].setdefault(
        str(os.getpid()), {"start": _SELF_START, "contexts": {}, "buffers": 0, "hung": []}
    )


# ---------------------------------------------------------------------------------- objects
@dataclass(eq=False)
class SimBuffer:
    """One buffer object: device memory at ``address`` in topology bank ``bank`` (held by the
    card side as buffer ``bid``); ``host`` is the host copy (None for device_only and for user
    pointers, whose host memory is the caller's at ``userptr``). Sub-buffers are views with
    ``parent`` and ``offset``."""

    card: SimCard
    bank: int
    address: int
    size: int
    host: bytearray | mmap.mmap | None
    bid: int
    handle: CardHandle | None = None
    parent: SimBuffer | None = None
    offset: int = 0
    freed: bool = False
    userptr: int = 0

    @property
    def root(self) -> SimBuffer:
        return self.parent.root if self.parent is not None else self


@dataclass(eq=False)
class Transfer:
    """One DMA between :meth:`SimCard.dma_begin` and :meth:`SimCard.dma_finish`: the card side's
    request ``key`` and the modelled channel interval [begin, end] (time.monotonic() seconds)."""

    root: SimBuffer
    dev: object
    key: int
    chan: str
    to_device: bool
    begin: float
    end: float
    size: int


@dataclass(eq=False)
class Command:
    """One start of a kernel on one CU (an ERT command)."""

    card: SimCard
    cu: CuState
    regs: bytes
    submit_t: float
    handle_pid: int
    est: float  # modelled duration assumed at submit (for choosing CUs)
    via_kds: bool = True  # False: started by register writes (PYNQ without ERT), unknown to the driver
    hang_reason: str | None = None  # hang requested at submit
    start_t: float | None = None
    end_t: float = INF
    natural_end: float = INF
    hold_deadline: float = INF
    state: str = "queued"  # queued | running | held | hung | done | aborted
    call: object = None
    dev_key: int = 0  # the card side's computation of this call (its outputs wait there)
    dev_pending: bool = False  # its result (error or not) not taken yet
    callbacks: list = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.state in ("done", "aborted")


@dataclass(eq=False)
class CuState:
    index: int
    name: str
    kernel: str
    base: int
    span: int
    arg_banks: dict[int, set[int]]
    arg_ports: dict[int, str]
    regs: bytearray
    queue: deque = field(default_factory=deque)
    last_end: float = 0.0
    commands: int = 0
    completed: int = 0
    busy_s: float = 0.0
    rows: int = 0
    hung: str | None = None  # why, once a command hung on it
    done_latched: bool = False
    auto_restart: bool = False


class CardHandle:
    """One open of the card by this process (an ``xrt::device``, PYNQ's ``xclOpen`` handle).

    The process holds the card open while it has at least one handle; closing the last one
    tears down its contexts and frees its buffers, as closing the device file does.
    """

    def __init__(self, card: SimCard):
        self.card = card
        self.closed = False
        self.buffers: weakref.WeakSet[SimBuffer] = weakref.WeakSet()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            _run_or_defer(self.card._close_handle, self)


class Context:
    """An open CU context (what a kernel object holds); ``close`` runs the driver's teardown."""

    def __init__(self, card: SimCard, cus: list[int], exclusive: bool):
        self.card = card
        self.cus = cus
        self.exclusive = exclusive
        self.closed = False

    def close(self, hold_gil: bool = False) -> None:
        if not self.closed:
            self.closed = True
            _run_or_defer(self.card._close_context, self, hold_gil)


# ---------------------------------------------------------------------------------- the card
#: SimCard.counts keys a sync adds to, by direction (to_device)
_DMA_COUNTS = {
    True: ("bytes_to_device", "bytes_to_device_userptr", "dma_s_to_device"),
    False: ("bytes_from_device", "bytes_from_device_userptr", "dma_s_from_device"),
}


class SimCard:
    """One simulated card as seen from this process (see the module docstring)."""

    def __init__(self, index: int):
        self.index = index
        self.bdf = f"0000:{FIRST_BUS + index:02x}:00.1"
        vbnv = os.environ.get(ENV_PLATFORM) or DEFAULT_PLATFORM
        shell = shell_info(vbnv)
        iface = os.environ.get(ENV_INTERFACE_UUID)
        if iface is not None:
            shell = ShellInfo(
                shell.vbnv,
                iface.replace("-", "").lower(),
                shell.rom_timestamp,
                shell.logic_uuid,
                shell.fpga_part,
                shell.banks,
            )
        self.shell = shell
        self.store = _Store(index)
        #: where the card's work (device memory, DMA copies, kernel computation) runs: this
        #: process ("inline"), a card process of its own ("process"), or nowhere ("timing":
        #: only its modelled time passes); see device_side.py
        self.device_mode = device_mode()
        self._dev = None
        self._bids = itertools.count(1)
        self.handles: set[CardHandle] = set()
        self.xclbin: Xclbin | None = None
        self.cus: list[CuState] = []
        self.models: dict[tuple[str, str], KernelModel | SimulationError] = {}
        self.buffers: list[SimBuffer] = []
        self.contexts: list[Context] = []
        self.channel_free = {"h2c": 0.0, "c2h": 0.0}
        self.known_resets = self.store.snapshot().get("resets", 0)
        self.faults: deque[str] = deque(maxlen=MAX_FAULTS)
        self.busy: deque[tuple[float, float]] = deque(maxlen=4096)
        #: (direction "h2c"/"c2h", modelled begin, end, bytes) of the last transfers
        self.dma_log: deque[tuple[str, float, float, int]] = deque(maxlen=256)
        self.counts = {
            "downloads": 0,  # load requests (xclbin loads, PYNQ downloads), no-ops included
            "kernel_starts": 0,
            "kernel_completions": 0,
            "hangs": 0,
            "aborted": 0,
            "starts_while_another_card_hung": 0,
            "bytes_to_device": 0,
            "bytes_from_device": 0,
            # of those, moved straight from/to a host program's own memory (user-pointer buffers);
            # the rest went through a buffer's host memory, where the host had to copy them
            "bytes_to_device_userptr": 0,
            "bytes_from_device_userptr": 0,
            "dma_s_to_device": 0.0,
            "dma_s_from_device": 0.0,
            # transfers to the card that began while a kernel of the card was executing: the
            # evidence that a host overlaps DMA with compute (double buffering), without a clock
            "dma_to_device_during_kernel": 0,
        }
        self._dirty = False
        self._last_flush = 0.0
        self._submitting: Command | None = None

    # ------------------------------------------------------------------ the card side
    @property
    def dev(self):
        """The card side (device_side.py), started on first use (a card process in process mode)."""
        dev = self._dev
        if dev is None or (dev.mode == "process" and dev.owner != os.getpid()):  # first use, or a fork
            dev = self._dev = make_device(self.index)
        return dev

    def close_device(self) -> None:
        """End the card side (process exit, forget_cards): device memory is gone with it."""
        dev, self._dev = self._dev, None
        if dev is not None:
            dev.close()

    def read_device(self, buf: SimBuffer, offset: int, nbytes: int) -> bytes:
        """Device memory of ``buf`` as it is now (tests; a host API cannot read it)."""
        with _LOCK:
            _advance(time.monotonic())
            return self.dev.call("read_device", buf.bid, buf.offset + offset, nbytes)

    # ------------------------------------------------------------------ identity
    @property
    def vbnv(self) -> str:
        return self.shell.vbnv

    def __repr__(self) -> str:
        return f"<SimCard {self.index} {self.bdf} {self.vbnv} (simulated)>"

    def state(self) -> dict:
        """The card's persistent state (a copy, dead holders pruned)."""
        with _LOCK, self.store.edit() as st:
            return json.loads(json.dumps(st))

    def loaded_uuid(self) -> str:
        return self.store.snapshot().get("xclbin_uuid", "")

    # ------------------------------------------------------------------ opening
    def open(self) -> CardHandle:
        with _LOCK:
            if not self.handles:
                with self.store.edit() as st:
                    if st["resets"] != self.known_resets:
                        self._forget_local()
                        self.known_resets = st["resets"]
                    _holder(st)
            handle = CardHandle(self)
            self.handles.add(handle)
            self._mark_dirty()
            return handle

    def _forget_local(self) -> None:
        """After a device reset: nothing of the old xclbin is left on the card."""
        self.xclbin = None
        self.cus = []
        _changed()

    def _close_handle(self, handle: CardHandle) -> None:
        with _LOCK:
            self.handles.discard(handle)
            last = not self.handles
            contexts = list(self.contexts) if last else []
        for ctx in contexts:
            ctx.close()
        with _LOCK:
            for buf in list(handle.buffers):
                self._free(buf)
            if last:
                for buf in list(self.buffers):
                    self._free(buf)
                # commands without a context (PYNQ's register path) die with the process's hold
                for cu in self.cus:
                    for cmd in list(cu.queue):
                        if cmd.handle_pid == os.getpid() and cmd.state == "queued":
                            self._abort(cu, cmd)
                with self.store.edit() as st:
                    rec = st["holders"].pop(str(os.getpid()), None)
                    if rec and rec.get("hung"):
                        self._set_bad_state(st, rec["hung"])
            self._mark_dirty(now=True)

    # ------------------------------------------------------------------ xclbins
    def load(self, xb: Xclbin) -> bool:
        """Load ``xb`` with xocl's rules (module docstring); True if the card was reprogrammed."""
        with _LOCK:
            self.counts["downloads"] += 1
            programmed = False
            with self.store.edit() as st:
                if xb.uuid == "0" * 32:
                    raise CardError(errno.EINVAL, "failed to load xclbin", self._load_logs(errno.EINVAL, xb))
                if st["bad_state"]:
                    raise CardError(errno.EDEADLK, "failed to load xclbin", self._load_logs(errno.EDEADLK, xb))
                if not self.shell.interface_uuid and xb.feature_rom_timestamp != self.shell.rom_timestamp:
                    raise CardError(errno.EOPNOTSUPP, "failed to load xclbin", self._load_logs(errno.EOPNOTSUPP, xb))
                if st["xclbin_uuid"] != xb.uuid:
                    if any(rec.get("contexts") for rec in st["holders"].values()):
                        raise CardError(errno.EBUSY, "failed to load xclbin", self._load_logs(errno.EBUSY, xb))
                    if any(rec.get("buffers") for rec in st["holders"].values()):
                        raise CardError(errno.EPERM, "failed to load xclbin", self._load_logs(errno.EPERM, xb))
                    if (
                        self.shell.interface_uuid
                        and xb.interface_uuid
                        and xb.interface_uuid != self.shell.interface_uuid
                    ):
                        raise CardError(errno.EINVAL, "failed to load xclbin", self._load_logs(errno.EINVAL, xb))
                    st["xclbin_uuid"] = xb.uuid
                    st["xclbin"] = xb.path
                    st["programs"] += 1
                    st["hung_cus"] = []
                    programmed = True
            if programmed or self.xclbin is None or self.xclbin.uuid != xb.uuid:
                self._adopt(xb)
            self._mark_dirty(now=True)
        self._build_models(xb)
        return programmed

    def _load_logs(self, err: int, xb: Xclbin) -> list[str]:
        """The lines shim.cpp's xclLoadXclBin logs for ``-err``."""
        logs: list[str] = []
        if err == errno.EOPNOTSUPP:
            logs.append("Xclbin does not match shell on card.")
            if xb.vbnv != self.vbnv:
                logs += [f"Shell VBNV is '{self.vbnv}'", f"Xclbin VBNV is '{xb.vbnv}'"]
            logs.append("Use 'xbmgmt flash' to update shell.")
        elif err == errno.EBUSY:
            logs.append("Xclbin on card is in use, can't change.")
        elif err == errno.EDEADLK:
            logs += ["CU was deadlocked? Hardware is not stable", "Please reset device with 'xbutil reset'"]
        logs.append(f"See dmesg log for details. err = {-err}")
        return logs

    def _adopt(self, xb: Xclbin) -> None:
        """This process's view of the loaded xclbin: its CUs with empty queues."""
        self.xclbin = xb
        self.cus = []
        _changed()
        for cu in xb.cus:
            kernel = xb.kernels.get(cu.kernel)
            span = kernel.register_span if kernel else 0x10000
            ports = {a.id: a.port for a in (kernel.args if kernel else []) if a.id is not None}
            self.cus.append(
                CuState(cu.index, cu.name, cu.kernel, cu.base, span, dict(cu.arg_banks), ports, bytearray(span))
            )

    def _build_models(self, xb: Xclbin) -> None:
        """The card side builds each kernel's model (its C-simulation; timing mode: none); this
        side keeps that one (inline, timing) or one that only plans and times calls (process mode)."""
        for name, kernel in xb.kernels.items():
            key = (xb.uuid, name)
            if key in self.models:
                continue
            dev = self.dev
            why = dev.call("load_model", key, kernel, xb.path)
            model: KernelModel | SimulationError
            if why is not None:
                model = SimulationError(why)
            elif dev.local_models:
                model = dev.side.models[key]
            else:
                from .kernels import load_model  # numpy and fpgaserve: only where kernels run

                try:
                    model = load_model(kernel, xb.path, compute=False)
                except Exception as e:  # the card process built it: cannot happen
                    model = SimulationError(f"simulated card cannot model kernel {name} of {xb.path}: {e}")
            with _LOCK:
                self.models[key] = model

    def model_for(self, cu: CuState) -> KernelModel:
        assert self.xclbin is not None
        model = self.models.get((self.xclbin.uuid, cu.kernel))
        if model is None:
            raise SimulationError(f"no model of kernel {cu.kernel} was built (xclbin given as bytes?)")
        if isinstance(model, SimulationError):
            raise model
        return model

    def cu_by_name(self, name: str) -> CuState | None:
        return next((cu for cu in self.cus if cu.name == name), None)

    # ------------------------------------------------------------------ contexts
    def open_context(self, uuid: str, cus: list[int], exclusive: bool) -> Context:
        """Open CU contexts (shared or exclusive) on the loaded xclbin ``uuid``; EBUSY otherwise."""
        with _LOCK:
            with self.store.edit() as st:
                if st["xclbin_uuid"] != uuid or self.xclbin is None or self.xclbin.uuid != uuid:
                    raise CardError(errno.EBUSY, "failed to open ip context")
                names = [self.cus[i].name for i in cus]
                for rec in st["holders"].values():
                    for name in names:
                        mode = rec.get("contexts", {}).get(name)
                        if mode and (exclusive or mode.startswith("exclusive")):
                            raise CardError(errno.EBUSY, "failed to open ip context")
                rec = _holder(st)
                for name in names:
                    current = rec["contexts"].get(name)
                    count = int(current.split(":")[1]) if current else 0
                    rec["contexts"][name] = f"{'exclusive' if exclusive else 'shared'}:{count + 1}"
            ctx = Context(self, list(cus), exclusive)
            self.contexts.append(ctx)
            return ctx

    def has_context(self, cu: int) -> bool:
        return any(cu in c.cus for c in self.contexts if not c.closed)

    def _close_context(self, ctx: Context, hold_gil: bool) -> None:
        with _holding_gil(hold_gil):
            self._close_context_holding(ctx, hold_gil)

    def _close_context_holding(self, ctx: Context, hold_gil: bool) -> None:
        with _LOCK:
            if ctx in self.contexts:
                self.contexts.remove(ctx)
            _advance(time.monotonic())
            last = [i for i in ctx.cus if not self.has_context(i)]
            outstanding = [
                (self.cus[i], cmd)
                for i in last
                if i < len(self.cus)
                for cmd in self.cus[i].queue
                if cmd.handle_pid == os.getpid() and cmd.via_kds and not cmd.finished
            ]
        if outstanding:
            for cu in {cu.index: cu for cu, _ in outstanding}.values():
                n = sum(1 for c, _ in outstanding if c is cu)
                log.warning("simulated card %d: %d outstanding command(s) on Domain(0) CU(%d)", self.index, n, cu.index)
            sleep_until(time.monotonic() + ABORT_WAIT_S, hold_gil)
        with _LOCK:
            _advance(time.monotonic())
            hung = []
            for cu, cmd in outstanding:
                if cmd.finished:
                    continue
                if cmd.state in ("running", "held"):
                    self._complete(cu, cmd, max(cmd.start_t or 0.0, time.monotonic()))
                elif cmd.state == "hung":
                    hung.append(cu.name)
                    self._abort(cu, cmd)
                else:
                    self._abort(cu, cmd)
            with self.store.edit() as st:
                rec = _holder(st)
                for i in ctx.cus:
                    if i >= len(self.cus):
                        continue
                    name = self.cus[i].name
                    current = rec["contexts"].get(name)
                    if current:
                        mode, count = current.split(":")
                        if int(count) > 1:
                            rec["contexts"][name] = f"{mode}:{int(count) - 1}"
                        else:
                            del rec["contexts"][name]
                if hung:
                    self._set_bad_state(st, sorted(set(hung)))
                    rec["hung"] = [h for h in rec["hung"] if h not in hung]
            self._mark_dirty(now=True)

    def _set_bad_state(self, st: dict, hung: list[str]) -> None:
        st["bad_state"] = True
        st["bad_state_reason"] = f"Domain(0) CU(s) {', '.join(hung)} hang, please reset device"
        for name in hung:
            if name not in st["hung_cus"]:
                st["hung_cus"].append(name)
        self.faults.append(f"bad_state: {st['bad_state_reason']}")
        log.warning("simulated card %d: %s", self.index, st["bad_state_reason"])

    # ------------------------------------------------------------------ buffers
    def alloc(self, handle: CardHandle, size: int, bank: int, host: bool = True) -> SimBuffer:
        """A buffer of ``size`` bytes in topology bank ``bank`` (EINVAL/ENOMEM as xocl)."""
        with _LOCK:
            cursor = self._place(size, bank, "failed to allocate bo")
            bid = next(self._bids)
            mine, theirs = self.dev.host_memory(size) if host else (None, None)
            self._dev_alloc(bid, size, theirs)
            return self._adopt_buffer(SimBuffer(self, bank, cursor, size, mine, bid, handle))

    def alloc_userptr(self, handle: CardHandle, address: int, size: int, bank: int) -> SimBuffer:
        """A buffer whose host memory is the caller's ``size`` bytes at ``address`` (xocl's
        DRM_IOCTL_XOCL_USERPTR_BO, userpf/xocl_bo.c ``xocl_userptr_bo_ioctl``): EINVAL for an
        address not page-aligned, then the bank checks and device memory of ``alloc``, then the
        pages are pinned for writing (``get_user_pages_fast(..., write=1, ...)``): memory that is
        not mapped, or mapped read-only, fails with ENOMEM. Syncs move bytes between that memory
        and device memory; the caller keeps it mapped while the buffer lives (its pages are
        pinned on a real card; here they are read where they are)."""
        what = "failed to allocate userptr bo"
        with _LOCK:
            if address % BO_ALIGN:
                raise CardError(errno.EINVAL, what)
            cursor = self._place(size, bank, what)
            if not _user_pages_writable(address, size):
                raise CardError(errno.ENOMEM, what)
            bid = next(self._bids)
            self.dev.post("alloc", bid, size, ("userptr", _PID[0], address))
            return self._adopt_buffer(SimBuffer(self, bank, cursor, size, None, bid, handle, userptr=address))

    def _place(self, size: int, bank: int, what: str) -> int:
        """Where ``size`` bytes go in topology bank ``bank`` (xocl's bank checks and drm_mm)."""
        xb = self.xclbin
        if size <= 0 or xb is None or not self.loaded_uuid() or bank < 0 or bank >= len(xb.groups):
            raise CardError(errno.EINVAL, what)
        mem = xb.groups[bank]
        if not mem.used:
            raise CardError(errno.EINVAL, what)
        need = -(-size // BO_ALIGN) * BO_ALIGN
        taken = sorted((b.address, b.address + -(-b.size // BO_ALIGN) * BO_ALIGN) for b in self.buffers)
        cursor = mem.base
        for start, end in taken:
            if end <= cursor or start >= mem.base + mem.size:
                continue
            if start - cursor >= need:
                break
            cursor = max(cursor, end)
        if cursor + need > mem.base + mem.size:
            raise CardError(errno.ENOMEM, what)
        return cursor

    def _adopt_buffer(self, buf: SimBuffer) -> SimBuffer:
        first = not self.buffers
        self.buffers.append(buf)
        if buf.handle is not None:
            buf.handle.buffers.add(buf)
        if first:
            with self.store.edit() as st:
                _holder(st)["buffers"] = 1
        self._mark_dirty()
        return buf

    def _dev_alloc(self, bid: int, size: int, host) -> None:
        """Give the card side buffer ``bid``: its device memory (0xA5) and its host memory
        (a memfd number is passed over the card process's socket, then closed here)."""
        dev = self.dev
        if isinstance(host, int) and dev.mode == "process":
            try:
                dev.post("alloc", bid, size, "fd", fds=(host,))
            finally:
                os.close(host)
        else:
            dev.post("alloc", bid, size, host)

    def sub_buffer(self, parent: SimBuffer, size: int, offset: int) -> SimBuffer:
        if offset + size > parent.size:
            raise CardError(errno.EINVAL, "sub buffer size and offset")
        return SimBuffer(
            self,
            parent.bank,
            parent.address + offset,
            size,
            parent.host,
            parent.bid,
            parent.handle,
            parent,
            offset,
            userptr=parent.userptr,
        )

    def copy_device(self, src: SimBuffer, dst: SimBuffer) -> None:
        """``dst`` (a root buffer) gets ``src``'s device bytes (XRT's copy of an argument into a
        bank its CU is connected to)."""
        with _LOCK:
            self.dev.post("copy", src.bid, src.offset, dst.bid, dst.offset, min(src.size, dst.size))

    def free(self, buf: SimBuffer) -> None:
        _metered_run_or_defer(self._free_locked, buf)

    def _free_locked(self, buf: SimBuffer) -> None:
        with _LOCK:
            self._free(buf)

    def _free(self, buf: SimBuffer) -> None:
        if buf.parent is not None or buf.freed:
            return
        buf.freed = True
        if self._dev is not None:
            self._dev.post("free", buf.bid)
        if buf in self.buffers:
            self.buffers.remove(buf)
            if not self.buffers:
                with self.store.edit() as st:
                    rec = st["holders"].get(str(os.getpid()))
                    if rec is not None:
                        rec["buffers"] = 0
            self._mark_dirty()

    def buffer_at(self, address: int, nbytes: int) -> SimBuffer | None:
        for b in self.buffers:
            if b.address <= address and address + nbytes <= b.address + b.size:
                return b
        return None

    def dma(self, buf: SimBuffer, to_device: bool, size: int, offset: int, hold_gil: bool) -> None:
        """Move ``size`` bytes at ``offset`` of ``buf`` between its host and device copies, blocking
        for the modelled transfer on the card's channel for that direction."""
        xfer = self.dma_begin(buf, to_device, size, offset, hold_gil)
        if xfer is None:
            return
        if xfer.end - time.monotonic() > 5e-6:  # below that a sleep call costs more than the transfer
            sleep_until(xfer.end, hold_gil)
        self.dma_finish(xfer, hold_gil)

    def dma_begin(self, buf: SimBuffer, to_device: bool, size: int, offset: int, hold_gil: bool) -> Transfer | None:
        """The non-blocking first half of :meth:`dma`: the rule checks, the channel's timeline and
        the card side's copy started; the caller waits until ``Transfer.end`` (time.monotonic()
        seconds) however it blocks, then calls :meth:`dma_finish`. None: nothing to move."""
        if size <= 0:
            return None
        root = buf.root
        start_off = buf.offset + offset
        with _holding_gil(hold_gil), _LOCK:
            if root.freed:
                raise CardError(errno.ENOENT, "failed to sync bo")
            now = time.monotonic()
            _advance(now)
            chan = "h2c" if to_device else "c2h"
            begin = max(now, self.channel_free[chan])
            if to_device and any(c.state == "running" for cu in self.cus for c in cu.queue):
                self.counts["dma_to_device_during_kernel"] += 1
            end = begin + size / pcie_rate()
            self.channel_free[chan] = end
            # the card side moves the bytes while the transfer is modelled (inline: now)
            dev = self.dev
            key = dev.key()
            dev.start(key, "dma", root.bid, to_device, start_off, size)
        return Transfer(root, dev, key, chan, to_device, begin, end, size)

    def dma_ready(self, xfer: Transfer) -> bool:
        """Whether the card side has done ``xfer``'s copy (so :meth:`dma_finish` will not block)."""
        return xfer.dev.ready(xfer.key)

    def dma_finish(self, xfer: Transfer, hold_gil: bool) -> None:
        """The second half of :meth:`dma`, once ``xfer.end`` has passed: take the card side's
        answer (blocking while it is late) and count the transfer."""
        with _holding_gil(hold_gil):
            xfer.dev.result(xfer.key, hold_gil)
        with _LOCK:
            _advance(time.monotonic())
            self.dma_log.append((xfer.chan, xfer.begin, xfer.end, xfer.size))
            moved, moved_userptr, seconds = _DMA_COUNTS[xfer.to_device]
            counts = self.counts
            counts[moved] += xfer.size
            if xfer.root.userptr:
                counts[moved_userptr] += xfer.size
            counts[seconds] += xfer.end - xfer.begin
            self._mark_dirty()

    # ------------------------------------------------------------------ commands
    def bad_state(self) -> bool:
        return bool(self.store.snapshot().get("bad_state"))

    def submit(self, candidates: list[int], regs: bytes, *, need_context: bool = True, callback=None) -> Command:
        """Queue a start of the CU(s) ``candidates`` with the register image ``regs`` (offset 0 =
        CTRL). Raises CardError(EDEADLK) in bad_state, EINVAL without an open context, and
        SimulationError when the simulator has no model of the kernel."""
        with _LOCK:
            now = time.monotonic()
            _advance(now)
            if need_context and self.bad_state():  # KDS refuses; register writes bypass it
                raise CardError(errno.EDEADLK, "failed to launch execution buffer")
            if not candidates or self.xclbin is None:
                raise CardError(errno.EINVAL, "failed to launch execution buffer")
            if need_context and not any(self.has_context(i) for i in candidates):
                raise CardError(errno.EINVAL, "failed to launch execution buffer")
            cus = [self.cus[i] for i in candidates]
            model = self.model_for(cus[0])
            call = model.plan(regs)
            clock = self.xclbin.data_clock_mhz
            est = model.timing.seconds(call.rows, clock)
            cu = cus[0] if len(cus) == 1 else min(cus, key=lambda c: (self._free_at(c, now), c.index))
            cmd = Command(self, cu, bytes(regs), now, _PID[0], est, via_kds=need_context)
            cmd.call = call  # what _start would plan from the same registers
            if callback is not None:
                cmd.callbacks.append(callback)
            requests = self._control_requests()
            if requests:
                cmd.hang_reason = self._consume_hang_request(cu, requests)
                self._consume_rendezvous_request(requests)
            if any(c is not self and any(x.hung for x in c.cus) for c in list(_CARDS.values())):
                self.counts["starts_while_another_card_hung"] += 1
            cu.queue.append(cmd)
            _changed()
            cu.commands += 1
            self.counts["kernel_starts"] += 1
            self._submitting = cmd  # a start within this call times it with est (the same reading)
            try:
                _advance(now)
            finally:
                self._submitting = None
            self._mark_dirty()
            return cmd

    def _free_at(self, cu: CuState, now: float) -> float:
        """When ``cu`` could start a new command, assuming no hangs appear."""
        t = max(now, cu.last_end)
        for cmd in cu.queue:
            if cmd.state in ("hung", "held") or cu.hung:
                return INF
            t = cmd.end_t if cmd.state == "running" else max(t, cmd.submit_t) + cmd.est
        return t

    def command_done(self, cmd: Command) -> bool:
        with _LOCK:
            _advance(time.monotonic())
            return cmd.finished

    def wait(self, cmd: Command, timeout_s: float | None, hold_gil: bool) -> bool:
        """Block until ``cmd`` finished (True) or ``timeout_s`` passed (False; None: no limit)."""
        return self.wait_any([cmd], timeout_s, hold_gil)

    def wait_any(self, cmds: list[Command], timeout_s: float | None, hold_gil: bool) -> bool:
        """Block until one of ``cmds`` finished (True) or ``timeout_s`` passed (False; None: no
        limit), sleeping until the next modelled event of their CUs (polling every 2 ms while a
        rendezvous holds commands and the GIL is free: another thread may meet it)."""
        with _holding_gil(hold_gil):
            return self._wait_any(cmds, timeout_s, hold_gil)

    def _wait_any(self, cmds: list[Command], timeout_s: float | None, hold_gil: bool) -> bool:
        deadline = INF if timeout_s is None else time.monotonic() + timeout_s
        while True:
            with _LOCK:
                now = time.monotonic()
                _advance(now)
                if not cmds or any(c.finished for c in cmds):
                    return True
                wake = min(_next_wake(c.cu) for c in cmds)
                held = any(c.state == "held" for card in _CARDS.values() for cu in card.cus for c in cu.queue)
            now = time.monotonic()
            if now >= deadline:
                return False
            target = min(deadline, wake)
            if held and not hold_gil:
                target = min(target, now + 0.002)
            if not math.isfinite(target):
                target = now + 1.0
            sleep_until(target, hold_gil)

    def next_completion(self, cmds: list[Command]) -> float:
        """Earliest time one of ``cmds`` could finish (inf if none can)."""
        with _LOCK:
            return min((_next_wake(c.cu) for c in cmds if not c.finished), default=INF)

    @staticmethod
    def _control_requests() -> set[str]:
        """Request files in the control folder (one directory read, and only when one may have
        come or gone, see _RequestWatch: each file system call lets other threads take the GIL,
        which a real start never does)."""
        folder = control_dir()
        if folder is None:
            return set()
        return _REQUESTS.requests(folder)

    def _consume_hang_request(self, cu: CuState, requests: set[str]) -> str | None:
        folder = control_dir()
        assert folder is not None
        for name in (f"hang-card{self.index}-{cu.name}", f"hang-card{self.index}"):
            if name not in requests:
                continue
            try:
                os.unlink(folder / name)
                return f"hang requested through the control folder ({name})"
            except FileNotFoundError:
                continue
        return None

    def _consume_rendezvous_request(self, requests: set[str]) -> None:
        folder = control_dir()
        if folder is None or RENDEZVOUS_FILE not in requests:
            return
        path = folder / RENDEZVOUS_FILE
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

    # ------------------------------------------------------------------ timeline events
    def _start(self, cu: CuState, cmd: Command, t: float) -> None:
        cmd.start_t = t
        cu.regs[: len(cmd.regs)] = cmd.regs[: len(cu.regs)]
        hung_elsewhere = cu.name in self.store.snapshot().get("hung_cus", [])
        if cmd.hang_reason or cu.hung or hung_elsewhere:
            reason = cmd.hang_reason or (
                f"queued behind a hung command ({cu.hung})" if cu.hung else "the CU is hung (since an earlier process)"
            )
            self._hang(cu, cmd, reason)
            return
        model = self.model_for(cu)
        call = cmd.call if cmd.call is not None else model.plan(cmd.regs)
        cmd.call = call
        fault = call.fault or self._check(cu, call)
        if fault:
            self._hang(cu, cmd, fault)
            return
        # the card side reads device memory now and computes; the outputs wait there until the
        # call completes (inline: done by now; process mode: while the call is modelled)
        assert self.xclbin is not None
        dev = self.dev
        cmd.dev_key, cmd.dev_pending = dev.key(), True
        reads = [self._locate(a.address, a.nbytes) for a in call.reads]
        dev.start(cmd.dev_key, "compute", cmd.dev_key, (self.xclbin.uuid, cu.kernel), call, reads)
        if dev.immediate:
            error = self._computed(cmd)
            if error is not None:
                self._hang(cu, cmd, f"simulator error: {error}")
                log.error("simulated card %d: kernel %s: simulator error: %s", self.index, cu.name, error)
                return
        seconds = cmd.est if cmd is self._submitting else model.timing.seconds(call.rows, self.xclbin.data_clock_mhz)
        cmd.natural_end = t + seconds
        cmd.end_t = cmd.natural_end
        cu.rows += call.rows
        if _CONCURRENCY.began():
            _GENERATION.value += 1  # a wake time computed before may not poll soon enough now
            cmd.state = "held"
            cmd.hold_deadline = t + _CONCURRENCY.timeout_s
            cmd.end_t = INF
        else:
            cmd.state = "running"
            if _CONCURRENCY.state == "met":
                _release_held(t)

    def _check(self, cu: CuState, call) -> str | None:
        assert self.xclbin is not None
        for a in call.reads + call.writes:
            if a.nbytes == 0:
                continue
            buf = self.buffer_at(a.address, a.nbytes)
            if buf is None:
                return f"{a.arg}: {a.nbytes} bytes at 0x{a.address:x} are not inside one buffer allocated on this card"
            members = set(self.xclbin.groups[buf.bank].members)
            connected = cu.arg_banks.get(a.arg_id, set())
            if not members <= connected:
                have = ", ".join(self.xclbin.mems[m].tag for m in sorted(members))
                want = ", ".join(self.xclbin.mems[m].tag for m in sorted(connected)) or "no bank"
                port = cu.arg_ports.get(a.arg_id, "its port")
                return f"{a.arg}: the buffer is in {have}, but the CU's {port} is connected to {want}"
        return None

    def _locate(self, address: int, nbytes: int) -> tuple[int, int, int]:
        """(buffer, offset, bytes) of device memory the kernel reads."""
        buf = self.buffer_at(address, nbytes)
        assert buf is not None
        return buf.bid, address - buf.address, nbytes

    def _computed(self, cmd: Command) -> str | None:
        """Take the card side's result of ``cmd``'s computation (blocking until it is in, as the
        call cannot complete before): None, or why the simulator could not compute it."""
        key = cmd.dev_key
        cmd.dev_pending = False
        error, hits, misses = self.dev.result(key, _holds_gil())
        model = self.models.get((self.xclbin.uuid, cmd.cu.kernel)) if self.xclbin is not None else None
        if model is not None and not isinstance(model, SimulationError):
            model.memo.hits, model.memo.misses = hits, misses
        return error

    def _forget_computation(self, cmd: Command) -> None:
        """``cmd`` never completes: its outputs are dropped, its result ignored."""
        if cmd.dev_key:
            key, cmd.dev_key = cmd.dev_key, 0
            if cmd.dev_pending:
                self.dev.discard(key)
            cmd.dev_pending = False
            self.dev.post("drop", key)

    def _hang(self, cu: CuState, cmd: Command, reason: str) -> None:
        _changed()
        self._forget_computation(cmd)
        cmd.state = "hung"
        cmd.end_t = INF
        first = cu.hung is None
        cu.hung = cu.hung or reason
        self.counts["hangs"] += 1
        self.faults.append(f"{cu.name}: {reason}")
        log.warning("simulated card %d: kernel %s hangs: %s", self.index, cu.name, reason)
        if first:
            # the CU is stuck in hardware (other processes' commands on it hang too, until the
            # card is reprogrammed or reset); a command the driver scheduled also makes this
            # process's teardown of the CU context fail (bad_state)
            with self.store.edit() as st:
                if cu.name not in st["hung_cus"]:
                    st["hung_cus"].append(cu.name)
                if cmd.via_kds:
                    rec = _holder(st)
                    if cu.name not in rec["hung"]:
                        rec["hung"].append(cu.name)
        self._mark_dirty(now=True)

    def _complete(self, cu: CuState, cmd: Command, t: float) -> None:
        _changed()
        if cmd.dev_key:
            key = cmd.dev_key
            error = self._computed(cmd) if cmd.dev_pending else None
            if error is not None:  # the card process could not compute it: it hangs now
                if cmd.state in ("running", "held"):
                    _CONCURRENCY.executing -= 1
                self._hang(cu, cmd, f"simulator error: {error}")
                log.error("simulated card %d: kernel %s: simulator error: %s", self.index, cu.name, error)
                return
            targets = []
            for access in cmd.call.writes:  # type: ignore[attr-defined]
                buf = self.buffer_at(access.address, max(access.nbytes, 1)) if access.nbytes else None
                targets.append((buf.bid, access.address - buf.address) if buf is not None else None)
            cmd.dev_key = 0
            self.dev.post("commit", key, targets)
        cmd.state = "done"
        cmd.end_t = t
        if cu.queue and cu.queue[0] is cmd:
            cu.queue.popleft()
        elif cmd in cu.queue:
            cu.queue.remove(cmd)
        cu.last_end = t
        cu.completed += 1
        start = cmd.start_t if cmd.start_t is not None else t
        cu.busy_s += t - start
        self.busy.append((start, t))
        cu.done_latched = True
        self.counts["kernel_completions"] += 1
        _CONCURRENCY.executing -= 1
        for cb in cmd.callbacks:
            cb(cmd)
        self._mark_dirty()

    def _abort(self, cu: CuState, cmd: Command) -> None:
        _changed()
        self._forget_computation(cmd)
        if cmd.state in ("running", "held"):
            _CONCURRENCY.executing -= 1
        cmd.state = "aborted"
        if cmd in cu.queue:
            cu.queue.remove(cmd)
        self.counts["aborted"] += 1
        for cb in cmd.callbacks:
            cb(cmd)

    # ------------------------------------------------------------------ register path (PYNQ without ERT)
    def cu_at(self, address: int, length: int) -> tuple[CuState, int]:
        for cu in self.cus:
            if cu.base <= address and address + length <= cu.base + cu.span:
                return cu, address - cu.base
        raise SimulationError(f"register access at 0x{address:x} (+{length}) hits no compute unit of card {self.index}")

    def read_registers(self, address: int, length: int) -> bytes:
        """AXI-lite read: CTRL reflects the queue (ap_start while busy, ap_done clear-on-read,
        ap_idle when empty; ap_ready is the RTL's one-cycle pulse, never seen by a read)."""
        with _LOCK:
            _advance(time.monotonic())
            cu, offset = self.cu_at(address, length)
            out = bytearray(cu.regs[offset : offset + length])
            if offset <= 0 < offset + length:
                busy = bool(cu.queue)
                ctrl = (AP_START if busy else 0) | (AP_DONE if cu.done_latched else 0) | (0 if busy else AP_IDLE)
                ctrl |= AUTO_RESTART if cu.auto_restart else 0
                at = -offset
                out[at : at + 4] = ctrl.to_bytes(4, "little")[: max(0, min(4, length - at))]
                cu.done_latched = False
            return bytes(out)

    def write_registers(self, address: int, data: bytes) -> None:
        """AXI-lite writes, one 32-bit word after another in address order: a CTRL start in the
        same write as the arguments starts the kernel with the *old* arguments. ap_start while the
        CU is busy is ignored (no queue without ERT)."""
        with _LOCK:
            cu, offset = self.cu_at(address, len(data))
            if offset % 4 or len(data) % 4:
                raise SimulationError(f"unaligned register write at 0x{address:x} ({len(data)} bytes)")
            for k in range(0, len(data), 4):
                word_offset = offset + k
                word = int.from_bytes(data[k : k + 4], "little")
                if word_offset == 0:
                    cu.auto_restart = bool(word & AUTO_RESTART)
                    _advance(time.monotonic())
                    if word & AP_START and not cu.queue:
                        cu.done_latched = False
                        self.submit([cu.index], bytes(cu.regs), need_context=False)
                else:
                    cu.regs[word_offset : word_offset + 4] = data[k : k + 4]

    # ------------------------------------------------------------------ statistics
    @property
    def stats(self) -> dict:
        with _LOCK:
            now = time.monotonic()
            _advance(now)
            st = self.store.snapshot()
            cus = {}
            for cu in self.cus:
                busy = cu.busy_s + sum(now - c.start_t for c in cu.queue if c.start_t is not None and c.state != "done")
                cus[cu.name] = {
                    "commands": cu.commands,
                    "completed": cu.completed,
                    "busy_s": busy,
                    "rows": cu.rows,
                    "queued": len(cu.queue),
                    "hung": cu.hung,
                }
            models = {}
            if self.xclbin is not None:
                for (uuid, name), m in self.models.items():
                    if uuid == self.xclbin.uuid:
                        models[name] = (
                            {"error": str(m)}
                            if isinstance(m, SimulationError)
                            else {
                                **m.describe(self.xclbin.data_clock_mhz),
                                "memo_hits": m.memo.hits,
                                "memo_misses": m.memo.misses,
                            }
                        )
            return {
                "card": self.index,
                "bdf": self.bdf,
                "name": self.vbnv,
                "simulated": True,
                **self.counts,
                "programs": st.get("programs", 0),
                "resets": st.get("resets", 0),
                "bad_state": bool(st.get("bad_state")),
                "hung": [cu.name for cu in self.cus if cu.hung],
                "faults": list(self.faults),
                "xclbin_uuid": st.get("xclbin_uuid", ""),
                "xclbin": st.get("xclbin"),
                "buffers": len(self.buffers),
                "cus": cus,
                "models": models,
                "pcie_gbps": pcie_rate() / 1e9,
                "device_side": self._dev.describe() if self._dev is not None else {"mode": self.device_mode},
                # the simulated runtime's CPU in the process writing these stats (see metered)
                "stand_in": {"pid": os.getpid(), "cpu_s": stand_in_cpu_s()},
                # the C double's blocking stretches in this process (all its cards), when it is loaded
                "xrt_c": BLOCKING_COUNTS() if BLOCKING_COUNTS is not None else {},
                **_CONCURRENCY.snapshot(),
            }

    def _mark_dirty(self, now: bool = False) -> None:
        """Note a change for stats-card<N>.json: written at once for rare events (``now``: loads,
        hangs, closes), else by a background thread within STATS_FLUSH_S. File I/O releases the
        GIL, which real pyxrt calls never do, so it stays out of the hot calls (sync, start, wait)."""
        if control_dir() is None:
            return
        if now:
            self._dirty = True
            self.flush_stats()
        elif not self._dirty:  # already dirty: the flusher was kicked then, and has not written it yet
            self._dirty = True
            _Flusher.kick()

    def flush_stats(self) -> None:
        folder = control_dir()
        if folder is None:
            return
        with _LOCK:
            self._dirty = False
            self._last_flush = time.monotonic()
            text = json.dumps(self.stats)
        path = folder / f"stats-card{self.index}.json"
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
        try:
            tmp.write_text(text)
            os.replace(tmp, path)
        except OSError as e:
            log.warning("simulated card %d: cannot write %s: %s", self.index, path, e)

    # ------------------------------------------------------------------ telemetry
    def activity(self, now: float | None = None) -> tuple[float, float]:
        """(fraction of CUs executing now, CU-busy fraction of the last second)."""
        with _LOCK:
            now = time.monotonic() if now is None else now
            _advance(now)
            n = max(len(self.cus), 1)
            since = now - ACTIVITY_WINDOW_S
            running = [
                c
                for cu in self.cus
                for c in cu.queue
                if c.start_t is not None and c.state in ("running", "held", "hung")
            ]
            intervals = list(self.busy) + [(c.start_t, now) for c in running]
            busy = sum(max(0.0, min(end, now) - max(start, since)) for start, end in intervals)
            instant = len({c.cu.index for c in running}) / n
            return instant, min(1.0, busy / (ACTIVITY_WINDOW_S * n))

    def sensor_values(self) -> dict[str, float]:
        """Simulated sensor readings in XRT's units (mV, mA, degC, rpm, W); power follows the CUs
        executing now or, if more, the busy fraction of the last second (a card serving short
        calls draws more than an idle one, whenever it is sampled), temperatures that busy
        fraction. Every card differs a little so per-card series are distinguishable."""
        instant, avg = self.activity()
        instant = max(instant, avg)
        t = 0.5 * self.index
        return {
            "12v_pex_mv": round(12070 - 40 * instant),
            "12v_pex_ma": round(1250 + 1900 * instant),
            "12v_aux_mv": round(12150 - 30 * instant),
            "12v_aux_ma": round(1050 + 1600 * instant),
            "3v3_pex_mv": 3310,
            "3v3_pex_ma": 900,
            "3v3_aux_mv": 3300,
            "vccint_mv": 850,
            "vccint_ma": round(9500 + 26000 * instant),
            "0v85_mv": 850,
            "12v_sw_mv": 12100,
            "1v8_mv": 1800,
            "1v2_top_mv": 1200,
            "1v2_btm_mv": 1200,
            "mgt0v9_mv": 900,
            "mgtvtt_mv": 1200,
            "5v5_mv": 5500,
            "ddr_vpp_top_mv": 2500,
            "ddr_vpp_btm_mv": 2500,
            "fpga_c": round(41 + t + 24 * avg),
            "pcb_top_front_c": round(36 + t + 3 * avg),
            "pcb_top_rear_c": round(35 + t + 3 * avg),
            "pcb_bottom_front_c": round(34 + t + 3 * avg),
            "int_vcc_c": round(40 + t + 20 * avg),
            "fan_c": round(33 + t + 6 * avg),
            "fan_rpm": round(1800 + 1500 * avg),
            "fan_pct": round(30 + 40 * avg),
            "dimm0_c": round(38 + t + 4 * avg),
            "dimm1_c": round(39 + t + 4 * avg),
            "dimm2_c": round(40 + t + 4 * avg),
            "dimm3_c": round(41 + t + 4 * avg),
        }


class _Flusher:
    """A daemon thread writing stats files of dirty cards within STATS_FLUSH_S."""

    _event = threading.Event()
    _thread: threading.Thread | None = None

    @classmethod
    def kick(cls) -> None:
        if cls._thread is None or not cls._thread.is_alive():
            cls._thread = threading.Thread(target=cls._run, name="fpga-sim-stats", daemon=True)
            cls._thread.start()
        cls._event.set()

    @classmethod
    def _run(cls) -> None:
        while True:
            cls._event.wait()
            cls._event.clear()
            time.sleep(STATS_FLUSH_S)
            for card in list(_CARDS.values()):
                if card._dirty:
                    metered(card.flush_stats)()


# ---------------------------------------------------------------------------------- timeline
def _next_event(cu: CuState, cmd: Command) -> float:
    if cmd.start_t is None:
        return max(cmd.submit_t, cu.last_end)
    if cmd.state == "hung":
        return INF
    if cmd.state == "held":
        return cmd.hold_deadline
    return cmd.end_t


def _next_wake(cu: CuState) -> float:
    return _next_event(cu, cu.queue[0]) if cu.queue else INF


_ADVANCING = threading.local()
_DEFERRED: list[tuple] = []


def _run_or_defer(fn, *args) -> None:
    """Run a teardown now, or after the event being processed when it comes from a finalizer
    (garbage collection can run one in the middle of ``_advance``, on the same thread)."""
    if getattr(_ADVANCING, "active", False):
        _DEFERRED.append((fn, args))
    else:
        fn(*args)


#: no start, completion or rendezvous timeout of any card is due before this time (monotonic):
#: set by each full scan, -inf (unknown) after any change that could bring one earlier (a command
#: queued, completed, aborted or hung; CUs replaced), so most calls skip the scan
_DUE = [-INF]


#: bumped by every change of the timeline that could bring an event earlier than a wake time
#: computed before it (``_changed``, a command held for a rendezvous): the C double's waits
#: trust a wake time while the generation it was computed at stays (fpga_sim/xrt_c)
_GENERATION = ctypes.c_uint64(0)


def timeline_generation() -> int:
    return _GENERATION.value


def timeline_generation_address() -> int:
    return ctypes.addressof(_GENERATION)


def _changed() -> None:
    """The timeline changed: the next ``_advance`` scans every CU."""
    _DUE[0] = -INF
    _GENERATION.value += 1


def any_held() -> bool:
    """Whether a rendezvous holds a command anywhere (under _LOCK)."""
    return any(c.state == "held" for card in _CARDS.values() for cu in card.cus for c in cu.queue)


_metered_run_or_defer = metered(_run_or_defer)  # buffer finalizers: the stand-in's CPU


def _advance(now: float) -> None:
    """Process every start/completion up to ``now`` on all cards, in time order (under _LOCK;
    a call made while an event is being processed, e.g. by a stats write, does nothing)."""
    if now < _DUE[0] or getattr(_ADVANCING, "active", False):
        return
    _ADVANCING.active = True
    try:
        _advance_events(now)
    finally:
        _ADVANCING.active = False
    while _DEFERRED:
        fn, args = _DEFERRED.pop(0)
        fn(*args)


def _advance_events(now: float) -> None:
    while True:
        best = None
        soonest = INF
        for card in list(_CARDS.values()):
            for cu in card.cus:
                if not cu.queue:
                    continue
                cmd = cu.queue[0]
                t = _next_event(cu, cmd)
                if t <= now:
                    if best is None or t < best[0]:
                        best = (t, card, cu, cmd)
                elif t < soonest:
                    soonest = t
        if best is None:
            _DUE[0] = soonest  # a scan that found nothing to do: nothing is due before the next event
            return
        t, card, cu, cmd = best
        if cmd.start_t is None:
            card._start(cu, cmd, t)
        elif cmd.state == "held":
            # the rendezvous timed out for this command: it completes, with a fault
            if _CONCURRENCY.state == "waiting":
                _CONCURRENCY.state = "timed out"
                fault = (
                    f"rendezvous timeout: at most {_CONCURRENCY.rendezvous_peak} of {_CONCURRENCY.wanted} kernels were "
                    f"executing at once within {_CONCURRENCY.timeout_s:g} s (did the host serialize them?)"
                )
                card.faults.append(f"{cu.name}: {fault}")
                log.warning("simulated card %d: kernel %s: %s", card.index, cu.name, fault)
            _release_held(t)
        else:
            card._complete(cu, cmd, t)


def _release_held(t: float) -> None:
    _changed()
    for card in _CARDS.values():
        for cu in card.cus:
            for cmd in cu.queue:
                if cmd.state == "held":
                    cmd.state = "running"
                    cmd.end_t = max(cmd.natural_end, t)


# ---------------------------------------------------------------------------------- module API
def get_card(index: int) -> SimCard:
    """The simulated card ``index`` of this process (created on first use)."""
    with _LOCK:
        count = card_count()
        if not 0 <= index < count:
            raise IndexError(f"no simulated card {index} ({ENV_CARDS}={count})")
        card = _CARDS.get(index)
        if card is None:
            card = _CARDS[index] = SimCard(index)
        return card


def cards() -> list[SimCard]:
    return [get_card(i) for i in range(card_count())]


def forget_cards() -> None:
    """Drop this process's card objects (tests: start afresh after changing the environment).
    Open handles are closed first, as at process exit."""
    with _LOCK:
        existing = list(_CARDS.values())
    for card in existing:
        for handle in list(card.handles):
            handle.close()
        card.close_device()
    with _LOCK:
        _CARDS.clear()
        _MEMORY_STATE.clear()
        _CONCURRENCY.__init__()
        _changed()


def reset_card(index: int, caller_pid: int | None = None) -> None:
    """``xbutil reset``: the HOT_RESET ioctl. EBUSY while any process other than ``caller_pid``
    (the xbutil process itself) holds the card open; afterwards no xclbin is loaded, bad_state
    and hung CUs are gone."""
    store = _Store(index)
    with _LOCK, store.edit() as st:
        others = [pid for pid in st["holders"] if caller_pid is None or int(pid) != caller_pid]
        if others:
            raise CardError(errno.EBUSY, "failed to reset device")
        resets = st["resets"] + 1
        st.clear()
        st.update(_fresh_state(index))
        st["resets"] = resets
    card = _CARDS.get(index)
    if card is not None:
        with _LOCK:
            card._forget_local()
            card.known_resets = resets
            card._mark_dirty(now=True)


def bdf_of(index: int) -> str:
    return f"0000:{FIRST_BUS + index:02x}:00.1"


def index_of_bdf(bdf: str) -> int | None:
    """The card index of a user-PF BDF (``dddd:bb:dd.f`` or ``bb:dd.f``), None if no card has it."""
    text = bdf.strip().lower()
    if text.count(":") == 1:
        text = "0000:" + text
    for i in range(card_count()):
        if bdf_of(i) == text:
            return i
    return None


def _at_exit() -> None:
    forget_at_exit = list(_CARDS.values())
    for card in forget_at_exit:
        for handle in list(card.handles):
            try:
                handle.close()
            except Exception as e:  # never raise at interpreter exit
                print(f"fpga_sim: closing card {card.index} at exit: {e}", file=sys.stderr)
        card.flush_stats()
        card.close_device()


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
import atexit  # noqa: E402  (registered after the definitions it uses)

atexit.register(_at_exit)

__all__ = [
    "ENV_CARDS",
    "ENV_CONTROL_DIR",
    "ENV_DEVICE",
    "ENV_INTERFACE_UUID",
    "ENV_PCIE_GBPS",
    "ENV_PLATFORM",
    "ENV_RENDEZVOUS",
    "ENV_RENDEZVOUS_TIMEOUT",
    "ENV_SENSORS",
    "RENDEZVOUS_FILE",
    "CardError",
    "CardHandle",
    "Command",
    "Context",
    "SimBuffer",
    "SimCard",
    "SimulationError",
    "Transfer",
    "arm_rendezvous",
    "bdf_of",
    "card_count",
    "cards",
    "concurrency",
    "disarm_rendezvous",
    "forget_cards",
    "get_card",
    "index_of_bdf",
    "reset_card",
    "sleep_until",
]
