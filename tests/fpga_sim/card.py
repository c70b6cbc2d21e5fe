"""The simulated Alveo card: the part of XRT + xocl + the card that a host program can observe.

One card model, in two halves. Its **per-event rules** -- the DMA channels' timeline, each
compute unit's command queue and ERT states, kernel timing, the checks of every start, completion,
device memory and the kernels' computation -- are C (``xrt_c/card_core.c``, loaded through
``card_core.py``: see both), so no Python runs per sync, start or wait. This module is the
**cold path**: xclbin loads and their refusals, CU contexts and their teardown, device resets,
the persistent state other processes see, hang bookkeeping, statistics files and telemetry. It
imports neither pynq nor pyxrt; the host APIs are thin layers over it and the core: the
test-only ``xrt_python/pyxrt`` (XRT 2.17's binding), ``pynq_device`` (a PYNQ 3.0.1 Device
plug-in) and the C double of ``libxrt_coreutil.so.2`` (``xrt_c``), which calls the core itself and
this module only for its cold path (``xrt_c_bridge``). All three see one card. What it
reproduces, and where the behaviour comes from (Xilinx/XRT at tag 202410.2.17.319, paths under
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

Buffers (the core)
    Separate host and device copies; only DMA (sync) moves bytes between them. Device memory of a
    new buffer is 0xA5 (DDR is not zeroed). Addresses are real offsets inside the bank's range
    (GROUP_TOPOLOGY bank index, as XRT uses); banks not marked used cannot hold buffers (EINVAL).
    DMA runs at ``FPGASERVE_SIM_PCIE_GBPS`` (default 12, GB/s = 1e9 B/s) on one host-to-card and
    one card-to-host channel per card; the caller blocks for the transfer time (holding the GIL
    for pyxrt, whose ``bo.sync`` never releases it; releasing it for PYNQ, whose ctypes calls do,
    and for the C double). A user-pointer buffer (:meth:`SimCard.alloc_userptr`: XRT 2.20's
    ``pyxrt.ext.bo``, the legacy ``xclAllocUserPtrBO``, ``xrtBOAllocUserPtr``) has the caller's
    memory as its host copy: xocl's rules (page-aligned address, pages mapped writable, the
    bank's checks), and its syncs read and write that memory where it is.
    ``bytes_to_device_userptr``/``bytes_from_device_userptr`` count what moved that way.

Where the card's work runs (``FPGASERVE_SIM_DEVICE``, read when a card object is made)
    ``inline`` (default): the core does it on the calling thread (copies of a sync; a call's
    computation with hls4ml's C-simulation, from the device memory it reads, at its start;
    its outputs land in device memory at its modelled completion). ``timing``, for throughput
    runs: a card model that costs the host what the hardware costs it. Device memory aliases
    the buffers' host memory (a user-pointer buffer's: the caller's pages), so a sync moves no
    bytes and only its modelled time passes; kernel calls are timed as in inline mode but
    compute nothing (no C-simulation is built, outputs are not written; ``stats["device_side"]``
    says ``"computed": false`` and counts ``uncomputed_calls``). Every rule applies unchanged,
    except what aliasing cannot show (separate host and device copies, 0xA5 in host-backed
    buffers). Results are checked in inline runs.

Commands (XRT's KDS + ERT, the core)
    A start is queued on one CU (chosen among the allowed ones: the one free soonest) and runs
    after the commands before it on that CU. It starts at a modelled time, reads device memory
    then, and completes ``kernels.Timing`` later, when its outputs land in device memory.
    Completion is a time, not a thread: nothing spends CPU while a kernel "runs". The state is
    NEW until completion and COMPLETED after. A command hangs, forever, when the hardware would
    (bad lengths, a buffer outside the allocations or in a bank the CU's port is not connected
    to: the reason goes to ``faults``) or when asked to (control folder ``hang-card<N>`` /
    ``hang-card<N>-<cu>``, consumed by the next start); commands queued behind it on that CU
    never start.

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
    control folder the state lives in this process. What the core needs of it (loaded, bad_state,
    CUs hung in an earlier process) is handed to it whenever this module reads or writes it; the
    core looks at the file's identity at most every 50 ms at a start or an allocation and asks
    for it again when another process changed it. ``stats-card<N>.json`` mirrors
    :attr:`SimCard.stats` (written within ``STATS_FLUSH_S`` of a change, at once for hangs).

Concurrency proof
    The process counts the commands executing at each modelled instant on all its cards and keeps
    the peak; a *rendezvous* of N (``arm_rendezvous``, ``FPGASERVE_SIM_RENDEZVOUS`` at import, or a
    ``rendezvous`` file holding N in the control folder, consumed by the next start) holds every
    command that starts while it is pending until N execute at once; a host that serializes them
    cannot get there, and after ``FPGASERVE_SIM_RENDEZVOUS_TIMEOUT_S`` (default 20 s) a held
    command records a "rendezvous timeout" fault and completes.

The card model's own CPU (``stand_in_cpu_s``: the core's calls and the stand-ins' Python around
them, metered in the core per thread, of which ``blocked_cpu_s`` blocking for modelled time) is
what a benchmark subtracts to report the server's.

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
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from . import card_core as _core
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
ENV_DEVICE = "FPGASERVE_SIM_DEVICE"
#: "unreadable": the card's sensor sysfs is absent (a container or VM without the xmc/hwmon
#: nodes): XRT 2.17 reports "No sensors present", PYNQ's xclDeviceInfo2 sensor fields read 0
ENV_SENSORS = "FPGASERVE_SIM_SENSORS"
RENDEZVOUS_FILE = "rendezvous"
DEVICE_MODES = ("inline", "timing")

ABORT_WAIT_S = 0.5  # kds_del_cu_context sleeps 500 ms per round while commands are outstanding
STATS_FLUSH_S = 0.05
SNAPSHOT_TTL_S = 0.05
BO_ALIGN = 4096
ACTIVITY_WINDOW_S = 1.0
FIRST_BUS = 0x65
# CTRL register bits (offset 0) of an ap_ctrl_hs kernel: krnl_rtl_control_s_axi.v's
# "Address Info" (tests/cards/test_card_anchors.py reads them from the installed hls4ml)
AP_START, AP_DONE, AP_IDLE, AP_READY, AUTO_RESTART = 0x1, 0x2, 0x4, 0x8, 0x80

INF = float("inf")


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


def device_mode() -> str:
    """``inline`` or ``timing`` (``FPGASERVE_SIM_DEVICE``, read when a card object is made)."""
    text = (os.environ.get(ENV_DEVICE) or "inline").strip().lower()
    if text not in DEVICE_MODES:
        raise SimulationError(f"{ENV_DEVICE} must be one of {', '.join(DEVICE_MODES)}, got {text!r}")
    return text


def pcie_rate() -> float:
    """Bytes per second of each DMA channel (``FPGASERVE_SIM_PCIE_GBPS``, read by the core)."""
    out = ctypes.c_double()
    _core.core().check(_core.core().py.fpgasim_pcie_rate(ctypes.byref(out)), CardError)
    return out.value


def sensors_readable() -> bool:
    return os.environ.get(ENV_SENSORS, "").strip().lower() not in ("unreadable", "absent", "0", "off")


def _checked(rc: int) -> int:
    return _core.core().check(rc, CardError)


# ---------------------------------------------------------------------------------- sleeping
try:
    # ctypes.PyDLL keeps the GIL across the call: usleep through it blocks every Python thread,
    # as pyxrt's calls do (pybind11 bindings without gil_scoped_release)
    _usleep = ctypes.PyDLL(None).usleep
    _usleep.argtypes = [ctypes.c_uint]
    _usleep.restype = ctypes.c_int
except (OSError, AttributeError):  # pragma: no cover - every Linux libc has usleep
    _usleep = None


def sleep_until(deadline: float, hold_gil: bool) -> None:
    """Block until ``time.monotonic() >= deadline``, holding the GIL or not (the cold path's
    waits: the driver's 500 ms at a context teardown)."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        if hold_gil and _usleep is not None:
            _usleep(min(int(left * 1e6) + 1, 1_000_000_000))
        else:
            time.sleep(left)


# ---------------------------------------------------------------------------------- stand-in CPU
def stand_in_cpu_s() -> float:
    """CPU seconds spent so far in the simulated runtime, every thread of this process: the
    core's calls (from the C double too) and the stand-ins' Python around them (``metered``)."""
    return _core.core().cpu()[0]


#: CPU seconds this process spent writing stats files (part of stand_in_cpu_s when the flusher writes them)
_STATS_FILES_CPU_S = [0.0]


def blocked_cpu_s() -> float:
    """Of :func:`stand_in_cpu_s`, the CPU seconds spent blocking for modelled time."""
    return _core.core().cpu()[1]


def metered(fn):
    """Charge ``fn``'s thread CPU time to the stand-in (the core meters the outermost call)."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        lib = _core.core().py
        lib.fpgasim_meter_enter()
        try:
            return fn(*args, **kwargs)
        finally:
            lib.fpgasim_meter_leave()

    return call


def meter_class(cls) -> None:
    """Meter every public method of ``cls`` and its ``__init__`` (see ``metered``)."""
    for name, attr in list(vars(cls).items()):
        if (name == "__init__" or not name.startswith("_")) and inspect.isfunction(attr):
            setattr(cls, name, metered(attr))


#: set by fpga_sim.xrt_c_bridge when the C double of libxrt_coreutil is loaded: its counts of
#: blocking stretches, and of those entered holding the GIL
BLOCKING_COUNTS = None


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

    def __init__(self, index: int, on_state=None):
        self.index = index
        #: called with (state, (inode, mtime ns, size) of the file or None) after every read or
        #: write of the state (the card hands the core what it needs of it)
        self.on_state = on_state
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
            if self.on_state is not None:
                self.on_state(state, None)
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
                if self.on_state is not None:
                    self.on_state(state, _file_key(path))
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def snapshot(self, fresh: bool = False) -> dict:
        """The state for reading (dead holders not pruned): this process's changes at once, other
        processes' within SNAPSHOT_TTL_S (``fresh``: now)."""
        paths = self._paths()
        if paths is None:
            state = _MEMORY_STATE.setdefault(self.index, _fresh_state(self.index))
            if fresh and self.on_state is not None:
                self.on_state(state, None)
            return state
        path = paths[0]
        now = time.monotonic()
        if not fresh and self._cache is not None and now - self._cache_t < SNAPSHOT_TTL_S and self._cache_path is path:
            return self._cache[1]
        self._cache_t, self._cache_path = now, path
        file_key = _file_key(path)
        key: object = (str(path), file_key)
        if not fresh and self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        state = _read_state(path, self.index)
        self._cache = (key, state)
        if self.on_state is not None:
            self.on_state(state, file_key)
        return state


def _file_key(path: Path) -> tuple[int, int, int]:
    """(inode, mtime ns, size) of the state file, zeros when there is none (what the core
    compares to notice another process's change)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return (0, 0, 0)
    return (st.st_ino, st.st_mtime_ns, st.st_size)


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
    """One buffer object: device memory at ``address`` in topology bank ``bank``, held by the
    core as buffer ``bid``; ``host`` is the host copy this process provided (None for device_only
    and for user pointers, whose host memory is the caller's at ``userptr``). Sub-buffers are
    views with ``parent`` and ``offset``."""

    card: SimCard
    bank: int
    address: int
    size: int
    host: mmap.mmap | None
    bid: int
    handle: CardHandle | None = None
    parent: SimBuffer | None = None
    offset: int = 0
    freed: bool = False
    userptr: int = 0

    @property
    def root(self) -> SimBuffer:
        return self.parent.root if self.parent is not None else self


@dataclass(frozen=True)
class BufferInfo:
    """A live buffer of the card in this process, as the core lists it (any API made it)."""

    bid: int
    bank: int
    address: int
    size: int
    userptr: bool


@dataclass(eq=False)
class CuState:
    """One compute unit of the loaded xclbin as this process knows it (its queue and counters
    are the core's: :attr:`SimCard.stats`)."""

    card: SimCard
    index: int
    name: str
    kernel: str
    base: int
    span: int
    arg_banks: dict[int, set[int]]
    arg_ports: dict[int, str]

    @property
    def hung(self) -> str | None:
        return self.card._cu_stats(self.index)[1]


class Command:
    """One start of a kernel on one CU (an ERT command), a handle of the core's command."""

    __slots__ = ("__weakref__", "card", "id")

    def __init__(self, card: SimCard, ident: int):
        self.card = card
        self.id = ident
        weakref.finalize(self, _release_command, ident)

    def _info(self) -> _core.CmdInfo:
        info = _core.CmdInfo()
        _checked(_core.core().py.fpgasim_cmd_info(self.id, ctypes.byref(info)))
        return info

    @property
    def state(self) -> str:
        """queued | running | held | hung | done | aborted"""
        return _core.STATES[self._info().state]

    @property
    def finished(self) -> bool:
        return self.state in ("done", "aborted")

    @property
    def start_t(self) -> float | None:
        t = self._info().start_t
        return None if math.isnan(t) else t  # NaN: not started

    @property
    def end_t(self) -> float:
        return self._info().end_t

    @property
    def cu(self) -> CuState:
        return self.card.cus[self._info().cu]


def _release_command(ident: int) -> None:
    lib = _core._CORE[0] if _core._CORE else None
    if lib is not None:
        lib.py.fpgasim_cmd_release(ident)


_HANDLE_IDS = itertools.count(1)


class CardHandle:
    """One open of the card by this process (an ``xrt::device``, PYNQ's ``xclOpen`` handle).

    The process holds the card open while it has at least one handle; closing the last one
    tears down its contexts and frees its buffers, as closing the device file does. ``id``
    names its buffers in the core."""

    def __init__(self, card: SimCard):
        self.card = card
        self.closed = False
        self.id = next(_HANDLE_IDS)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.card._close_handle(self)


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
            self.card._close_context(self, hold_gil)


def _host_memory(size: int) -> tuple[mmap.mmap, int]:
    """A buffer's host copy (zeroed pages; views of it keep it alive) and its address."""
    mem = mmap.mmap(-1, max(size, 1))
    return mem, ctypes.addressof(ctypes.c_char.from_buffer(mem))


# ---------------------------------------------------------------------------------- the card
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
        #: where the card's work (DMA copies, kernel computation) runs: "inline" (the core, on
        #: the calling thread) or nowhere ("timing": only its modelled time passes)
        self.device_mode = device_mode()
        self._core = _core.core()
        _install_notify()
        _checked(self._core.c.fpgasim_card_init(index, _core.TIMING if self.device_mode == "timing" else _core.INLINE))
        self.handles: set[CardHandle] = set()
        self.xclbin: Xclbin | None = None
        self.cus: list[CuState] = []
        self.store = _Store(index, self._state_read)
        self.models: dict[tuple[str, str], KernelModel | SimulationError] = {}
        self.contexts: list[Context] = []
        self.known_resets = self.store.snapshot().get("resets", 0)
        self.downloads = 0  # load requests (xclbin loads, PYNQ downloads), no-ops included
        self._dirty = False
        if control_dir() is not None:
            _Flusher.start()

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

    def _state_read(self, st: dict, key: tuple[int, int, int] | None) -> None:
        """What the core needs of the persistent state, after every read or write of it."""
        hung = set(st.get("hung_cus") or ())
        mask = sum(1 << cu.index for cu in self.cus if cu.name in hung and cu.index < 64)
        raw = (ctypes.c_uint64 * 3)(*key) if key is not None else None
        loaded = bool(st.get("xclbin_uuid")) and self.xclbin is not None
        self._core.c.fpgasim_card_state(self.index, int(loaded), int(bool(st.get("bad_state"))), mask, raw)

    def refresh_state(self) -> None:
        """The state file changed under this process (the core noticed): read it again."""
        self.store.snapshot(fresh=True)

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
        self._core.c.fpgasim_card_forget_local(self.index)

    def _close_handle(self, handle: CardHandle) -> None:
        with _LOCK:
            self.handles.discard(handle)
            last = not self.handles
            contexts = list(self.contexts) if last else []
        for ctx in contexts:
            ctx.close()
        with _LOCK:
            lib = self._core.c
            lib.fpgasim_bo_free_owned(self.index, handle.id)
            if last:
                lib.fpgasim_bo_free_owned(self.index, -1)
                # commands without a context (PYNQ's register path) die with the process's hold
                hung = ctypes.c_uint64()
                lib.fpgasim_teardown(self.index, 0, 1, ctypes.byref(hung))
                with self.store.edit() as st:
                    rec = st["holders"].pop(str(os.getpid()), None)
                    if rec and rec.get("hung"):
                        self._set_bad_state(st, rec["hung"])
            self._mark_dirty(now=True)

    # ------------------------------------------------------------------ xclbins
    def load(self, xb: Xclbin) -> bool:
        """Load ``xb`` with xocl's rules (module docstring); True if the card was reprogrammed."""
        with _LOCK:
            self.downloads += 1
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
        """This process's view of the loaded xclbin: its CUs with empty queues (in the core)."""
        if len(xb.mems) > _core.MAX_MEMS or len(xb.groups) > _core.MAX_GROUPS or len(xb.cus) > _core.MAX_CUS:
            raise SimulationError(
                f"{xb.path}: more memories ({len(xb.mems)}), groups ({len(xb.groups)}) or compute units "
                f"({len(xb.cus)}) than the simulated card models ({_core.MAX_MEMS}, {_core.MAX_GROUPS}, {_core.MAX_CUS})"
            )
        desc = _core.Adopt()
        desc.ngroups, desc.nmems, desc.ncus = len(xb.groups), len(xb.mems), len(xb.cus)
        desc.data_clock_mhz = int(xb.data_clock_mhz)
        for i, g in enumerate(xb.groups):
            desc.groups[i].base, desc.groups[i].size, desc.groups[i].used = g.base, g.size, int(g.used)
            desc.groups[i].members = sum(1 << m for m in g.members if m < 64)
        for i, m in enumerate(xb.mems):
            desc.mem_tags[i].value = m.tag.encode()[:31]
        cus = []
        for i, cu in enumerate(xb.cus):
            kernel = xb.kernels.get(cu.kernel)
            span = kernel.register_span if kernel else 0x10000
            ports = {a.id: a.port for a in (kernel.args if kernel else []) if a.id is not None}
            banks = dict(cu.arg_banks)
            d = desc.cus[i]
            d.name, d.kernel, d.base, d.span = cu.name.encode()[:63], cu.kernel.encode()[:63], cu.base, span
            for arg_id, mems in banks.items():
                if 0 <= arg_id < _core.MAX_ARGS:
                    d.arg_banks[arg_id] = sum(1 << m for m in mems if m < 64)
            for arg_id, port in ports.items():
                if 0 <= arg_id < _core.MAX_ARGS:
                    d.arg_port[arg_id].value = port.encode()[:31]
            cus.append(CuState(self, i, cu.name, cu.kernel, cu.base, span, banks, ports))
        _checked(self._core.c.fpgasim_card_adopt(self.index, ctypes.byref(desc)))
        self.xclbin = xb
        self.cus = cus
        self._assign_models()

    def _build_models(self, xb: Xclbin) -> None:
        """Each kernel's model: its project read here, its calls planned, timed and computed (with
        the C-simulation, in inline mode) by the core."""
        for name, kernel in xb.kernels.items():
            key = (xb.uuid, name)
            if key in self.models:
                continue
            from .kernels import load_model  # numpy and fpgaserve: only where kernels run

            model: KernelModel | SimulationError
            try:
                model = load_model(kernel, xb.path, compute=self.device_mode == "inline")
                model.register(self._core)
            except SimulationError as e:
                model = e
            except Exception as e:  # a project the C-simulation cannot build, ...
                model = SimulationError(f"simulated card cannot model kernel {name} of {xb.path}: {e}")
            with _LOCK:
                self.models[key] = model
        with _LOCK:
            self._assign_models()

    def _assign_models(self) -> None:
        """Tell the core which model computes each CU (or why none does)."""
        xb = self.xclbin
        for cu in self.cus:
            model = self.models.get((xb.uuid, cu.kernel)) if xb is not None else None
            if model is None:
                ident, why = 0, f"no model of kernel {cu.kernel} was built (xclbin given as bytes?)"
            elif isinstance(model, SimulationError):
                ident, why = 0, str(model)
            else:
                ident, why = model.core_id, None
            self._core.c.fpgasim_cu_model(self.index, cu.index, ident, why.encode() if why else None)

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
            for i in cus:
                self._core.c.fpgasim_cu_contexts(self.index, i, 1)
            return ctx

    def has_context(self, cu: int) -> bool:
        return any(cu in c.cus for c in self.contexts if not c.closed)

    def _close_context(self, ctx: Context, hold_gil: bool) -> None:
        lib = self._core.c
        with _LOCK:
            if ctx not in self.contexts:
                return
            self.contexts.remove(ctx)
            for i in ctx.cus:
                if i < len(self.cus):
                    lib.fpgasim_cu_contexts(self.index, i, -1)
            last = [i for i in ctx.cus if i < len(self.cus) and not self.has_context(i)]
            mask = sum(1 << i for i in last if i < 64)
            counts = (ctypes.c_int32 * _core.MAX_CUS)()
            outstanding = lib.fpgasim_outstanding(self.index, mask, counts) if mask else 0
        if outstanding > 0:
            for i in last:
                if counts[i]:
                    log.warning(
                        "simulated card %d: %d outstanding command(s) on Domain(0) CU(%d)", self.index, counts[i], i
                    )
            sleep_until(time.monotonic() + ABORT_WAIT_S, hold_gil)
        with _LOCK:
            hung_mask = ctypes.c_uint64()
            if outstanding > 0:
                lib.fpgasim_teardown(self.index, mask, 0, ctypes.byref(hung_mask))
            hung = [cu.name for cu in self.cus if cu.index < 64 and hung_mask.value >> cu.index & 1]
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
        self._core.c.fpgasim_add_fault(self.index, f"bad_state: {st['bad_state_reason']}".encode())
        log.warning("simulated card %d: %s", self.index, st["bad_state_reason"])

    def _hung(self, cu_index: int, via_kds: bool) -> None:
        """The first hang on a CU (the core says so): it stays hung for other processes too (until
        the card is reprogrammed or reset), and a command the driver scheduled also makes this
        process's teardown of the CU context fail (bad_state)."""
        if cu_index >= len(self.cus):
            return
        name = self.cus[cu_index].name
        with _LOCK, self.store.edit() as st:
            if name not in st["hung_cus"]:
                st["hung_cus"].append(name)
            if via_kds:
                rec = _holder(st)
                if name not in rec["hung"]:
                    rec["hung"].append(name)
        self._mark_dirty(now=True)

    def _holds_buffers(self, holds: bool) -> None:
        """This process now holds buffers on the card, or none any more (the core says so)."""
        with _LOCK, self.store.edit() as st:
            if holds:
                _holder(st)["buffers"] = 1
            else:
                rec = st["holders"].get(str(os.getpid()))
                if rec is not None:
                    rec["buffers"] = 0

    # ------------------------------------------------------------------ buffers
    def alloc(self, handle: CardHandle, size: int, bank: int, host: bool = True) -> SimBuffer:
        """A buffer of ``size`` bytes in topology bank ``bank`` (EINVAL/ENOMEM as xocl)."""
        mem, address = _host_memory(size) if host else (None, 0)
        flags = _core.BO_HOST_GIVEN if host else _core.BO_DEVICE_ONLY
        out = (ctypes.c_uint64 * 3)()
        rc = self._core.c.fpgasim_bo_alloc(self.index, handle.id, size, bank, flags, address or None, out)
        _checked(rc)
        return SimBuffer(self, bank, out[1], size, mem, out[0], handle)

    def alloc_userptr(self, handle: CardHandle, address: int, size: int, bank: int) -> SimBuffer:
        """A buffer whose host memory is the caller's ``size`` bytes at ``address`` (xocl's
        DRM_IOCTL_XOCL_USERPTR_BO, userpf/xocl_bo.c ``xocl_userptr_bo_ioctl``): EINVAL for an
        address not page-aligned, then the bank checks of ``alloc``, then the pages are pinned
        for writing (``get_user_pages_fast(..., write=1, ...)``): memory that is not mapped, or
        mapped read-only, fails with ENOMEM. Syncs move bytes between that memory and device
        memory; the caller keeps it mapped while the buffer lives."""
        out = (ctypes.c_uint64 * 3)()
        rc = self._core.c.fpgasim_bo_alloc(self.index, handle.id, size, bank, _core.BO_USERPTR, address or None, out)
        _checked(rc)
        return SimBuffer(self, bank, out[1], size, None, out[0], handle, userptr=address)

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
        """``dst`` gets ``src``'s device bytes (XRT's copy of an argument into a bank its CU is
        connected to)."""
        n = min(src.size, dst.size)
        rc = self._core.c.fpgasim_bo_copy(src.root.bid, src.offset, dst.root.bid, dst.offset, n)
        _checked(rc)

    def free(self, buf: SimBuffer) -> None:
        if buf.parent is not None or buf.freed:
            return
        buf.freed = True
        if _core._CORE:
            self._core.py.fpgasim_bo_free(buf.bid)

    @property
    def buffers(self) -> list[BufferInfo]:
        """The card's live buffers in this process, whichever API made them."""
        lib = self._core.py
        n = lib.fpgasim_buffers(self.index, None, 0)
        out = (_core.BufferInfo * max(n, 1))()
        n = min(n, lib.fpgasim_buffers(self.index, out, n))
        return [BufferInfo(b.id, b.bank, b.address, b.size, bool(b.userptr)) for b in out[:n]]

    def read_device(self, buf: SimBuffer, offset: int, nbytes: int) -> bytes:
        """Device memory of ``buf`` as it is now (tests; a host API cannot read it)."""
        out = ctypes.create_string_buffer(max(nbytes, 1))
        _checked(self._core.c.fpgasim_read_device(buf.root.bid, buf.offset + offset, nbytes, out))
        return out.raw[:nbytes]

    def dma(self, buf: SimBuffer, to_device: bool, size: int, offset: int, hold_gil: bool) -> None:
        """Move ``size`` bytes at ``offset`` of ``buf`` between its host and device copies, blocking
        for the modelled transfer on the card's channel for that direction (holding the GIL or not)."""
        if size <= 0:
            return
        lib = self._core.py if hold_gil else self._core.c
        _checked(lib.fpgasim_dma(buf.root.bid, buf.offset + offset, size, int(to_device)))

    @property
    def dma_log(self) -> list[tuple[str, float, float, int]]:
        """(direction "h2c"/"c2h", modelled begin, end, bytes) of the last transfers."""
        out = (_core.DmaEntry * 256)()
        n = self._core.py.fpgasim_dma_log(self.index, out, 256)
        return [("h2c" if e.to_device else "c2h", e.begin, e.end, e.size) for e in out[:n]]

    # ------------------------------------------------------------------ commands
    def bad_state(self) -> bool:
        return bool(self.store.snapshot().get("bad_state"))

    def submit(
        self, candidates: list[int], regs: bytes, *, need_context: bool = True, state_word: int | None = None
    ) -> Command:
        """Queue a start of the CU(s) ``candidates`` with the register image ``regs`` (offset 0 =
        CTRL). Raises CardError(EDEADLK) in bad_state, EINVAL without an open context, and
        SimulationError when the simulator has no model of the kernel. ``state_word``: the
        address of an ERT packet's header, whose state bits the card writes at completion."""
        cus = (ctypes.c_int32 * max(len(candidates), 1))(*candidates)
        raw = bytes(regs)
        rc = self._core.c.fpgasim_submit(
            self.index, cus, len(candidates), raw, len(raw), int(need_context), state_word or None
        )
        return Command(self, _checked(rc))

    def command_done(self, cmd: Command) -> bool:
        return _checked(self._core.py.fpgasim_cmd_state(cmd.id)) != _core.NEW

    def wait(self, cmd: Command, timeout_s: float | None, hold_gil: bool) -> bool:
        """Block until ``cmd`` finished (True) or ``timeout_s`` passed (False; None: no limit)."""
        return self.wait_any([cmd], timeout_s, hold_gil)

    def wait_any(self, cmds: list[Command], timeout_s: float | None, hold_gil: bool) -> bool:
        """Block until one of ``cmds`` finished (True) or ``timeout_s`` passed (False; None: no
        limit), sleeping in the core until the next modelled event of their CUs."""
        if not cmds:
            return True
        ids = (ctypes.c_uint64 * len(cmds))(*(c.id for c in cmds))
        lib = self._core.py if hold_gil else self._core.c
        return bool(_checked(lib.fpgasim_wait(ids, len(cmds), -1.0 if timeout_s is None else float(timeout_s))))

    def next_completion(self, cmds: list[Command]) -> float:
        """Earliest time one of ``cmds`` could finish (inf if none can)."""
        ids = (ctypes.c_uint64 * max(len(cmds), 1))(*(c.id for c in cmds))
        return float(self._core.py.fpgasim_next_completion(ids, len(cmds)))

    # ------------------------------------------------------------------ register path (PYNQ without ERT)
    def read_registers(self, address: int, length: int) -> bytes:
        """AXI-lite read: CTRL reflects the queue (ap_start while busy, ap_done clear-on-read,
        ap_idle when empty; ap_ready is the RTL's one-cycle pulse, never seen by a read)."""
        out = ctypes.create_string_buffer(max(length, 1))
        _checked(self._core.c.fpgasim_read_regs(self.index, address, length, out))
        return out.raw[:length]

    def write_registers(self, address: int, data: bytes) -> None:
        """AXI-lite writes, one 32-bit word after another in address order: a CTRL start in the
        same write as the arguments starts the kernel with the *old* arguments. ap_start while the
        CU is busy is ignored (no queue without ERT)."""
        raw = bytes(data)
        _checked(self._core.c.fpgasim_write_regs(self.index, address, raw, len(raw)))

    # ------------------------------------------------------------------ statistics
    def _cu_stats(self, index: int) -> tuple[_core.CuStats, str | None]:
        out = _core.CuStats()
        reason = ctypes.create_string_buffer(2048)
        _checked(self._core.py.fpgasim_cu_stats(self.index, index, ctypes.byref(out), reason, len(reason)))
        return out, (reason.value.decode(errors="replace") if out.hung else None)

    def _card_stats(self) -> _core.CardStats:
        out = _core.CardStats()
        _checked(self._core.py.fpgasim_card_stats(self.index, ctypes.byref(out)))
        return out

    @property
    def counts(self) -> dict:
        st = self._card_stats()
        return {"downloads": self.downloads, **{k: getattr(st, k) for k in _core.CardStats.COUNTS}}

    @property
    def faults(self) -> list[str]:
        lib = self._core.py
        out, buf = [], ctypes.create_string_buffer(4096)
        for i in range(20):
            if not lib.fpgasim_fault(self.index, i, buf, len(buf)):
                break
            out.append(buf.value.decode(errors="replace"))
        return out

    @property
    def stats(self) -> dict:
        st = self.store.snapshot()
        card = self._card_stats()
        cus = {}
        for cu in self.cus:
            s, hung = self._cu_stats(cu.index)
            cus[cu.name] = {
                "commands": s.commands,
                "completed": s.completed,
                "busy_s": s.busy_s,
                "rows": s.rows,
                "queued": s.queued,
                "hung": hung,
            }
        models = {}
        if self.xclbin is not None:
            clock = self.xclbin.data_clock_mhz
            for (uuid, name), m in list(self.models.items()):
                if uuid == self.xclbin.uuid:
                    models[name] = {"error": str(m)} if isinstance(m, SimulationError) else m.describe(clock)
        side: dict = {"mode": self.device_mode}
        if self.device_mode == "timing":
            side.update(computed=False, uncomputed_calls=card.uncomputed_calls)
        return {
            "card": self.index,
            "bdf": self.bdf,
            "name": self.vbnv,
            "simulated": True,
            **self.counts,
            "programs": st.get("programs", 0),
            "resets": st.get("resets", 0),
            "bad_state": bool(st.get("bad_state")),
            "hung": [n for n, c in cus.items() if c["hung"]],
            "faults": self.faults,
            "xclbin_uuid": st.get("xclbin_uuid", ""),
            "xclbin": st.get("xclbin"),
            "buffers": card.buffers,
            "cus": cus,
            "models": models,
            "pcie_gbps": pcie_rate() / 1e9,
            "device_side": side,
            # the simulated runtime's CPU in the process writing these stats (see metered)
            # (of which blocking for modelled time, and writing these files: a cost per second, not per event)
            "stand_in": {
                "pid": os.getpid(),
                "cpu_s": stand_in_cpu_s(),
                "blocked_s": blocked_cpu_s(),
                "stats_files_s": _STATS_FILES_CPU_S[0],
            },
            # the C double's blocking stretches in this process (all its cards), when it is loaded
            "xrt_c": BLOCKING_COUNTS() if BLOCKING_COUNTS is not None else {},
            **concurrency(),
        }

    def _mark_dirty(self, now: bool = False) -> None:
        """Note a change of this module's state for stats-card<N>.json: written at once for rare
        events (``now``: loads, hangs, closes); the core's own changes are written by the flusher
        within STATS_FLUSH_S."""
        if control_dir() is None:
            return
        if now:
            self.flush_stats()
        else:
            self._dirty = True
            _Flusher.kick()

    def flush_stats(self) -> None:
        folder = control_dir()
        if folder is None:
            return
        t0 = time.thread_time()
        try:
            self._flush_stats(folder)
        finally:
            _STATS_FILES_CPU_S[0] += time.thread_time() - t0

    def _flush_stats(self, folder: Path) -> None:
        with _LOCK:
            self._dirty = False
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
        out = (ctypes.c_double * 2)()
        t = time.monotonic() if now is None else now
        self._core.py.fpgasim_activity(self.index, t, ACTIVITY_WINDOW_S, out)
        return out[0], out[1]

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
    """A daemon thread writing the stats files of changed cards within STATS_FLUSH_S: it blocks
    reading the core's eventfd, which the core kicks when a card turns dirty."""

    _thread: threading.Thread | None = None
    _pid = 0
    _kicked = threading.Event()

    @classmethod
    def start(cls) -> None:
        if cls._thread is None or not cls._thread.is_alive() or cls._pid != os.getpid():
            cls._pid = os.getpid()
            fd = _core.core().py.fpgasim_dirty_fd()
            cls._thread = threading.Thread(target=cls._run, args=(fd,), name="fpga-sim-stats", daemon=True)
            cls._thread.start()
            threading.Thread(target=cls._run_kicks, name="fpga-sim-stats-kicks", daemon=True).start()

    @classmethod
    def kick(cls) -> None:
        cls.start()
        cls._kicked.set()

    @classmethod
    def _flush_all(cls) -> None:
        time.sleep(STATS_FLUSH_S)
        lib = _core.core().py
        for card in list(_CARDS.values()):
            if lib.fpgasim_take_dirty(card.index) or card._dirty:
                try:
                    metered(card.flush_stats)()
                except (CardError, SimulationError):
                    pass  # forgotten meanwhile (forget_cards): its stats file is not written again

    @classmethod
    def _run(cls, fd: int) -> None:
        while True:
            try:
                os.read(fd, 8)
            except OSError:
                return
            cls._flush_all()

    @classmethod
    def _run_kicks(cls) -> None:
        while True:
            cls._kicked.wait()
            cls._kicked.clear()
            cls._flush_all()


# ---------------------------------------------------------------------------------- notifications
def _on_note(kind: int, card: int, cu: int, flag: int, text: bytes | None) -> None:
    """The core's notifications (card_core.h FPGASIM_NOTE_*), on the thread that caused them."""
    try:
        message = (text or b"").decode(errors="replace")
        if kind == _core.NOTE_LOG:
            (log.error if flag else log.warning)("%s", message)
            return
        sim = _CARDS.get(card)
        if sim is None:
            return
        if kind == _core.NOTE_HANG:
            sim._hung(cu, bool(flag))
        elif kind == _core.NOTE_BUFFERS:
            sim._holds_buffers(bool(flag))
        elif kind == _core.NOTE_STATE:
            sim.refresh_state()
    except Exception as e:  # never raise into C
        print(f"fpga_sim: handling the card core's notification {kind}: {e!r}", file=sys.stderr)


_NOTIFY = _core.NOTIFY(_on_note)  # kept alive for the life of the process (the core holds it)
_NOTIFY_SET: list[bool] = []


def _install_notify() -> None:
    if not _NOTIFY_SET:
        _core.core().py.fpgasim_set_notify(_NOTIFY)
        _NOTIFY_SET.append(True)
        _arm_from_environment()


# ---------------------------------------------------------------------------------- module API
#: one lock for this module's state (cards, handles, contexts, state files); never held while a
#: call blocks in the core
_LOCK = threading.RLock()
_CARDS: dict[int, SimCard] = {}


def arm_rendezvous(n: int, timeout_s: float | None = None) -> None:
    """Hold commands that start from now on until ``n`` execute at once (see the module docstring)."""
    _install_notify()
    _checked(_core.core().c.fpgasim_arm(n, float(timeout_s) if timeout_s is not None else 0.0))


def disarm_rendezvous() -> None:
    """Drop a pending rendezvous: commands run freely again (held ones are not released early)."""
    _core.core().c.fpgasim_disarm()


def concurrency() -> dict:
    """{"max_concurrent_kernels": peak since start, "rendezvous": {"wanted", "state", "peak"}}."""
    out = (ctypes.c_int64 * 4)()
    _core.core().py.fpgasim_concurrency(out)
    state = ("off", "waiting", "met", "timed out")[out[2]]
    return {"max_concurrent_kernels": out[0], "rendezvous": {"wanted": out[1], "state": state, "peak": out[3]}}


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
    with _LOCK:
        _CARDS.clear()
        _MEMORY_STATE.clear()
        if _core._CORE:
            _core.core().c.fpgasim_forget()


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
            card.store.snapshot(fresh=True)
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
    for card in list(_CARDS.values()):
        for handle in list(card.handles):
            try:
                handle.close()
            except Exception as e:  # never raise at interpreter exit
                print(f"fpga_sim: closing card {card.index} at exit: {e}", file=sys.stderr)
        card.flush_stats()


def _arm_from_environment() -> None:
    text = os.environ.get(ENV_RENDEZVOUS)
    if not text:
        return
    try:
        n = int(text)
    except ValueError:
        raise SimulationError(f"{ENV_RENDEZVOUS} must be an integer, got {text!r}") from None
    _checked(_core.core().c.fpgasim_arm(n, 0.0))


import atexit  # noqa: E402  (registered after the definitions it uses)

atexit.register(_at_exit)

__all__ = [
    "DEVICE_MODES",
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
    "BufferInfo",
    "CardError",
    "CardHandle",
    "Command",
    "Context",
    "SimBuffer",
    "SimCard",
    "SimulationError",
    "arm_rendezvous",
    "bdf_of",
    "card_count",
    "cards",
    "concurrency",
    "device_mode",
    "disarm_rendezvous",
    "forget_cards",
    "get_card",
    "index_of_bdf",
    "reset_card",
    "sleep_until",
]
