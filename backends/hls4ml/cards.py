"""FPGA cards as fpgaserve owns them: one ``pynq.Overlay`` per physical card, shared by models.

PYNQ 3.0.1 keeps per-device state (``bitfile_name``, ``ip_dict``, timestamps) on the
``pynq.Device``; a second ``Overlay`` on the same device replaces that state and the first one
raises "Overlay not currently loaded" from then on. So the process holds exactly one
:class:`FpgaCard` per device, which holds exactly one Overlay; every model instance that runs
the same xclbin on that card shares it, and a different xclbin is refused while the card is
in use.

``pynq.Device.active_device`` is process-global and PYNQ never checks that a kernel and its
buffers are on the same card, so nothing here relies on it: overlays get ``device=``,
allocations get ``target=``.

Each card also keeps the accounting the telemetry exports (``telemetry.py``): per compute
unit the time between ap_start and the observed ap_idle, the number of kernel calls, the
bytes synced to and from the card, and the bytes of our buffers on it.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from ..base import BackendError, DeviceUnavailableError

log = logging.getLogger("fpgaserve.hls4ml.cards")

_SIM_WORD = re.compile(r"(?<![a-z])sim(?:ulat\w*)?(?![a-z])", re.IGNORECASE)
_UNSAFE_ID = re.compile(r"[^A-Za-z0-9_.:-]+")


def _import_pynq():
    try:
        import pynq  # heavy: only the hardware mode pays for it
    except Exception as e:  # ImportError, or pynq failing on a host without XRT pieces
        raise BackendError(f"fpga-mode hardware needs pynq 3.0.1, which cannot be imported: {e}") from None
    return pynq


def _ensure_event_loop() -> None:
    """pynq 3.0.1's XrtDevice() calls asyncio.get_event_loop() (for its ERT futures), which
    raises in a thread without a loop: models load on worker threads, so give this one a loop
    rather than losing every card to a RuntimeError during the probe."""
    import asyncio

    try:
        asyncio.get_event_loop()
    except RuntimeError:
        asyncio.set_event_loop(asyncio.new_event_loop())


def available_cards() -> list:
    """The ``pynq.Device`` objects of this host; empty when pynq is missing or finds none."""
    try:
        pynq = _import_pynq()
        _ensure_event_loop()
        return list(pynq.Device.devices)
    except Exception as e:  # probing must never stop a server that can fall back to csim
        log.debug("no FPGA cards: %s", e)
        return []


def read_xclbin_uuid(path: str) -> str:
    """The xclbin's uuid (axlf_header.uuid, byte 112 of the header at 304), lower-case hex."""
    with open(path, "rb") as f:
        head = f.read(304 + 152)
    if len(head) < 304 + 128 or not head.startswith(b"xclbin2\0"):
        raise BackendError(f"{path} is not an xclbin (no 'xclbin2' magic)")
    return head[304 + 112 : 304 + 128].hex()


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
            st = self._cu_stats.setdefault(cu, CuStats())
            if st.running == 0:
                st.running_since = now
            st.running += 1
        return now

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
    memory_used: int = 0
    memory_total: int = 0
    reloads: int = 0
    mode: str = "hardware"  # how the device runs firmware: hardware, or an emulation mode (csim, numpy, onnx)
    emulated: bool = False  # no card at all: the firmware is computed on the host (emulated.py)


class FpgaCard(ComputeUnitAccounting):
    """One physical card (one ``pynq.Device``) and the one Overlay loaded on it."""

    def __init__(self, index: int, device):
        super().__init__()
        self.index = index
        self.device = device
        self.name = self._device_name()
        # e.g. "FPGA-0-xilinx_u250_gen3x16_xdma_shell_4_1": the gpu_uuid/device label of telemetry
        self.uid = _UNSAFE_ID.sub("_", f"FPGA-{index}-{self.name}").strip("_")
        self.simulated = self._is_simulated()
        self.overlay = None
        self.xclbin_path = ""
        self.xclbin_uuid = ""
        self.generation = 0  # bumped by every (re)load: runners re-resolve IP and buffers
        self.broken: str | None = None  # why the last reload failed
        self.reloads = 0
        self._users = 0
        self._lock = threading.RLock()  # overlay identity, users, CU lock table
        self._reload_lock = threading.Lock()
        self._cu_locks: dict[str, threading.Lock] = {}
        self._ert_lock = threading.Lock()  # XRT's exec-buffer list is shared by all CUs of a card
        self._runners: weakref.WeakSet = weakref.WeakSet()
        self._dma = {"to_device": 0, "from_device": 0}
        self._memory_used = 0
        if self.simulated:
            log.warning("FPGA card %d (%s) is a SIMULATED device, not hardware", index, self.name)

    # ------------------------------------------------------------------ identity
    def _device_name(self) -> str:
        try:
            name = self.device.name
        except Exception:  # XRT answers from the device; a sick card must still be listed
            name = ""
        return str(name or getattr(self.device, "tag", "") or f"device{self.index}")

    def _is_simulated(self) -> bool:
        flag = getattr(self.device, "simulated", None)
        if flag is not None and not callable(flag):
            return bool(flag)
        words = [self.name, str(getattr(self.device, "tag", "")), type(self.device).__name__]
        return any(_SIM_WORD.search(w) for w in words)

    def __str__(self) -> str:
        kind = " (simulated)" if self.simulated else ""
        loaded = f" running {Path(self.xclbin_path).name}" if self.xclbin_path else ""
        return f"card {self.index} {self.uid}{kind}{loaded}"

    # ------------------------------------------------------------------ overlay
    def _download(self, path: str) -> None:
        """Program the card with ``path``; caller holds ``_lock``."""
        pynq = _import_pynq()
        uuid = read_xclbin_uuid(path)
        started = time.perf_counter()
        # always device=: Overlay(device=None) would program Device.active_device, card 0
        overlay = pynq.Overlay(path, device=self.device, download=True)
        self.overlay = overlay
        self.xclbin_path = path
        self.xclbin_uuid = uuid
        self.generation += 1
        self.broken = None
        log.info(
            "card %d (%s%s): loaded %s (xclbin uuid %s) in %.2f s",
            self.index,
            self.name,
            ", simulated" if self.simulated else "",
            path,
            uuid,
            time.perf_counter() - started,
        )

    def load(self, xclbin_path: str) -> None:
        """Make ``xclbin_path`` the card's bitstream and take one user reference on it."""
        path = os.path.realpath(xclbin_path)
        if not os.path.isfile(path):
            raise BackendError(f"bitstream {xclbin_path} does not exist")
        with self._lock:
            if self.overlay is not None and not self._same_bitstream(path):
                if self._users > 0:
                    raise BackendError(
                        f"card {self.index} ({self.uid}) already runs {self.xclbin_path} (xclbin uuid "
                        f"{self.xclbin_uuid}) for {self._users} model instance(s); cannot also load {path} "
                        f"(xclbin uuid {read_xclbin_uuid(path)}): a card holds one bitstream. Link both "
                        "kernels into one xclbin, or give the models different cards (parameter cards)"
                    )
                self.overlay = None  # idle card: replace its bitstream
            if self.overlay is None:
                try:
                    self._download(path)
                except BackendError:
                    raise
                except Exception as e:
                    raise BackendError(f"card {self.index} ({self.uid}): loading {path} failed: {e}") from e
            self._users += 1

    def _same_bitstream(self, path: str) -> bool:
        if path == self.xclbin_path:
            return True
        try:
            uuid = read_xclbin_uuid(path)
        except (OSError, BackendError):
            return False
        # hand-written xclbins may carry a zero uuid: then only the path identifies them
        return uuid == self.xclbin_uuid and uuid.strip("0") != ""

    def release(self) -> None:
        """Drop one user reference; the bitstream stays loaded (reloading costs seconds)."""
        with self._lock:
            self._users = max(0, self._users - 1)

    @property
    def users(self) -> int:
        return self._users

    def reload(self, seen_generation: int, reason: str) -> None:
        """Program the card again after a hang, resetting everything in flight.

        Several runners can time out on one hang; only the first reload for a generation
        does the work (the others see a newer generation and return). All compute-unit locks
        are taken first, so no kernel call is in flight on this card while its buffers are
        freed and the bitstream is downloaded; callers must not hold a CU lock.
        """
        with self._reload_lock:
            if self.generation != seen_generation and self.broken is None:
                return
            with self._lock:
                locks = [self._cu_locks[k] for k in sorted(self._cu_locks)]
            for lk in locks:
                lk.acquire()
            try:
                log.warning("card %d (%s): reloading %s (%s)", self.index, self.uid, self.xclbin_path, reason)
                for runner in list(self._runners):
                    runner._unbind()
                self._forget_running_calls()
                # XRT keeps submitted exec buffers in a per-device list that every later wait
                # polls; a command abandoned on the hung CU would stay there forever
                if isinstance(getattr(self.device, "active_bos", None), list):
                    self.device.active_bos = []
                with self._lock:
                    path = self.xclbin_path
                    self.overlay = None
                    try:
                        free = getattr(self.device, "free_bitstream", None)
                        if free is not None:
                            free()  # closes the CU contexts the old overlay opened
                        self._download(path)
                    except Exception as e:
                        self.broken = f"{type(e).__name__}: {e}"
                        self.generation += 1  # runners must not reuse IP handles of the dead overlay
                        raise DeviceUnavailableError(
                            f"card {self.index} ({self.uid}): reloading {path} failed ({self.broken}); "
                            "the card may need a reset (xbutil reset)"
                        ) from e
                    self.reloads += 1
            finally:
                for lk in reversed(locks):
                    lk.release()

    def ensure_usable(self) -> None:
        """Retry a failed reload before a batch; raises DeviceUnavailableError while it keeps failing."""
        if self.broken is not None:
            self.reload(self.generation, f"retrying after failed reload: {self.broken}")

    # ------------------------------------------------------------------ compute units
    def cu_lock(self, cu_name: str) -> threading.Lock:
        """The lock serializing kernel calls on one compute unit (PYNQ's start/wait are not thread-safe)."""
        with self._lock:
            lk = self._cu_locks.get(cu_name)
            if lk is None:
                lk = self._cu_locks[cu_name] = threading.Lock()
                with self._stats_lock:
                    self._cu_stats.setdefault(cu_name, CuStats())
            return lk

    @property
    def ert_lock(self) -> threading.Lock:
        return self._ert_lock

    def compute_units(self) -> list[str]:
        """Names of the overlay's kernel instances with a control register (callable CUs)."""
        overlay = self.overlay
        if overlay is None:
            return []
        return sorted(k for k, v in overlay.ip_dict.items() if "CTRL" in (v.get("registers") or {}))

    def register_runner(self, runner) -> None:
        self._runners.add(runner)

    def unregister_runner(self, runner) -> None:
        self._runners.discard(runner)

    # ------------------------------------------------------------------ accounting
    def count_dma(self, direction: str, nbytes: int) -> None:
        with self._stats_lock:
            self._dma[direction] += int(nbytes)

    def note_memory(self, nbytes: int) -> None:
        """Our buffers on the card: +bytes on allocation, -bytes on free."""
        with self._stats_lock:
            self._memory_used += int(nbytes)

    def memory_total(self) -> int:
        """Bytes of the memory banks the loaded design uses (0 when nothing is loaded)."""
        overlay = self.overlay
        if overlay is None:
            return 0
        total = 0
        for m in overlay.mem_dict.values():
            if m.get("used") and not m.get("streaming"):
                total += int(m.get("size", 0))
        return total

    def snapshot(self) -> CardSnapshot:
        now = time.perf_counter()
        total = self.memory_total()
        with self._stats_lock:
            cus = self._cu_busy(now)
            snap = CardSnapshot(
                uid=self.uid,
                index=self.index,
                name=self.name,
                simulated=self.simulated,
                xclbin_path=self.xclbin_path,
                xclbin_uuid=self.xclbin_uuid,
                now=now,
                cus=cus,
                kernel_us=sum(st.busy_s for st in self._cu_stats.values()) * 1e6,
                calls=sum(st.calls for st in self._cu_stats.values()),
                dma_to_device=self._dma["to_device"],
                dma_from_device=self._dma["from_device"],
                memory_used=self._memory_used,
                memory_total=total,
                reloads=self.reloads,
            )
        for cu in self.compute_units():  # idle CUs of the design count for utilization too
            snap.cus.setdefault(cu, (0, 0.0))
        return snap


class CardPool:
    """The process's cards, one :class:`FpgaCard` per ``pynq.Device``, created on first use."""

    _instance: CardPool | None = None
    _instance_lock = threading.Lock()

    def __init__(self, devices=None):
        self._devices = list(devices) if devices is not None else available_cards()
        self._cards: dict[int, FpgaCard] = {}
        self._lock = threading.Lock()

    @classmethod
    def instance(cls) -> CardPool:
        with cls._instance_lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    @classmethod
    def reset_instance(cls) -> None:
        """Forget the process-wide pool (tests re-probing simulated devices)."""
        with cls._instance_lock:
            cls._instance = None

    def count(self) -> int:
        return len(self._devices)

    def card(self, index: int) -> FpgaCard:
        if not 0 <= index < len(self._devices):
            raise BackendError(f"FPGA card {index} does not exist; this host has {len(self._devices)} card(s)")
        with self._lock:
            card = self._cards.get(index)
            if card is None:
                card = self._cards[index] = FpgaCard(index, self._devices[index])
            return card

    def cards(self) -> list[FpgaCard]:
        """Every card of the host (telemetry reports idle cards too)."""
        return [self.card(i) for i in range(len(self._devices))]

    def acquire(self, card_index: int, xclbin_path: str) -> FpgaCard:
        """The card with ``xclbin_path`` loaded (shared when it already runs that bitstream)."""
        card = self.card(card_index)
        card.load(xclbin_path)
        return card
