"""FPGA cards as fpgaserve owns them: one :class:`FpgaCard` per physical card, shared by models.

A card runs one xclbin at a time. Every model instance whose xclbin is that one shares the
card; a different xclbin is refused while the card has users (link both kernels into one
xclbin, or give the models different cards). Instances are spread over the card's compute
units (``runner.py``); each compute unit is opened once and its calls counted here, as the
telemetry (``telemetry.py``) exports: per CU the time a call was in flight, the calls, the
bytes moved to and from the card and the bytes of our buffers on it.

**A compute unit that hangs** (a call not done within ``kernel_timeout_secs``) fails its batch
with UNAVAILABLE and is taken out of service at once: instances homed on it move to the
card's (or the model's other cards') healthy compute units, so the others keep serving. The
card is then recovered the way XRT allows (Xilinx/XRT#5858, #5833: reloading the same xclbin
is skipped and does not reset anything; only a device reset does, and ``xbutil reset``
refuses while any process holds the card open):

1. with ``card-reset=auto`` (the default) and ``xbutil`` found: new calls on the card fail
   with UNAVAILABLE, calls in flight finish, every buffer and handle is released, ``xbutil
   reset --device <bdf> --force`` runs (no root needed for the user function's hot reset),
   the card is opened and programmed again and serves;
2. otherwise, or when the reset fails: the card keeps serving on its healthy compute units,
   the operator's command is logged, and each health probe (readiness) retries no more often
   than ``card-retry-secs``; once no compute unit of the card serves, the card is closed so
   that the operator's reset can run, and the probes reopen and reprogram it when it has.

A card whose compute units are all out of service makes the models on it not ready
(``health()``), so Kubernetes stops routing to the replica until it recovers.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import re
import shutil
import subprocess
import threading
import time
import weakref
from dataclasses import dataclass

from ...base import BackendError, DeviceUnavailableError
from ..accounting import CardSnapshot, ComputeUnitAccounting, CuStats
from .axlf import ComputeUnit, Kernel, Xclbin
from .runtime import CardApi, CardDevice, ComputeUnitHandle, DeviceError

log = logging.getLogger("fpgaserve.hls4ml.cards")

_UNSAFE_ID = re.compile(r"[^A-Za-z0-9_.:-]+")
RESET_POLICIES = ("auto", "off")
DEFAULT_RETRY_S = 10.0
RESET_TIMEOUT_S = 400.0  # xbutil waits up to Runtime.dev_offline_timer (320 s) for the card to return
DRAIN_TIMEOUT_S = 120.0


class CardHealth(str, enum.Enum):
    OK = "ok"
    DEGRADED = "degraded"  # a compute unit hung; the others serve
    RESETTING = "resetting"  # recovery in progress: no calls
    NEEDS_RESET = "needs_reset"  # waiting for a reset (ours failed or is not allowed)


@dataclass
class CardComputeUnit:
    """One compute unit of the loaded xclbin, opened once per card."""

    name: str
    kernel: Kernel
    unit: ComputeUnit
    handle: ComputeUnitHandle | None = None
    fault: str | None = None  # why it is out of service
    lock: threading.Lock = None  # type: ignore[assignment]  # serializes register starts

    def __post_init__(self):
        self.lock = threading.Lock()

    @property
    def healthy(self) -> bool:
        return self.fault is None


class FpgaCard(ComputeUnitAccounting):
    """One physical card and the xclbin loaded on it."""

    def __init__(self, index: int, device: CardDevice, api: CardApi, reset_policy: str = "auto"):
        super().__init__()
        self.index = index
        self.device = device
        self.api = api
        self.name = device.shell or f"device{index}"
        # e.g. "FPGA-0-xilinx_u250_gen3x16_xdma_shell_4_1": the gpu_uuid/device label of telemetry
        self.uid = _UNSAFE_ID.sub("_", f"FPGA-{index}-{self.name}").strip("_")
        self.simulated = device.simulated
        self.reset_policy = reset_policy
        self.retry_s = DEFAULT_RETRY_S
        self.xclbin: Xclbin | None = None
        self.generation = 0  # bumped by every (re)load: runners re-open buffers
        self.health_state = CardHealth.OK
        self.broken: str | None = None  # why the card does not serve (NEEDS_RESET)
        self.reloads = 0
        self.resets = 0
        self._users = 0
        self._lock = threading.RLock()  # xclbin identity, users, compute units, state
        self._idle = threading.Condition(self._lock)
        self._inflight = 0
        self._closed = False
        self._recovering = False
        self._last_attempt = 0.0
        self._told: tuple | None = None
        self._cus: dict[str, CardComputeUnit] = {}
        self._runners: weakref.WeakSet = weakref.WeakSet()
        # to_device_direct: the part of to_device synced from request memory wrapped in place
        self._dma = {"to_device": 0, "from_device": 0, "to_device_direct": 0}
        self._memory_used = 0
        if self.simulated:
            log.warning("FPGA card %d (%s) is a SIMULATED device, not hardware", index, self.name)

    def __str__(self) -> str:
        kind = " (simulated)" if self.simulated else ""
        loaded = f" running {os.path.basename(self.xclbin.path)}" if self.xclbin else ""
        return f"card {self.index} {self.uid}{kind}{loaded}"

    @property
    def xclbin_path(self) -> str:
        return self.xclbin.path if self.xclbin else ""

    @property
    def users(self) -> int:
        return self._users

    # ------------------------------------------------------------------ xclbin
    def load(self, xclbin: Xclbin) -> None:
        """Make ``xclbin`` the card's and take one user reference on it."""
        with self._lock:
            if self.xclbin is not None and self.xclbin.uuid != xclbin.uuid:
                if self._users > 0:
                    raise BackendError(
                        f"card {self.index} ({self.uid}) already runs {self.xclbin.path} "
                        f"(xclbin uuid {self.xclbin.uuid}) "
                        f"for {self._users} model instance(s); cannot also load {xclbin.path} (xclbin uuid "
                        f"{xclbin.uuid}): a card holds one xclbin. Link both kernels into one xclbin, or give the "
                        "models different cards (parameter cards)"
                    )
                self._drop_handles()
            if self.xclbin is not None and self.xclbin.uuid != xclbin.uuid:
                # another xclbin's compute unit of the same name may sit in another bank: its
                # entries (and their handles) are of the old design, never reused
                self._cus.clear()
            if self.xclbin is None or self.xclbin.uuid != xclbin.uuid or self._closed:
                self._program(xclbin)
            self._users += 1

    def _program(self, xclbin: Xclbin) -> None:
        """Open (if closed) and program; caller holds ``_lock``."""
        started = time.perf_counter()
        try:
            if self._closed:
                self.device.reopen()
                self._closed = False
            programmed = self.device.load(xclbin)
        except DeviceError as e:
            raise BackendError(str(e)) from None
        self.xclbin = xclbin
        self.generation += 1
        self.health_state = CardHealth.OK
        self.broken = None
        log.info(
            "card %d (%s%s, %s): %s %s (xclbin uuid %s) in %.2f s",
            self.index,
            self.name,
            ", simulated" if self.simulated else "",
            self.device.bdf or "no BDF",
            "loaded" if programmed else "already runs",
            xclbin.path,
            xclbin.uuid,
            time.perf_counter() - started,
        )

    def release(self) -> None:
        """Drop one user reference. With the last one (the card's models unloaded) every handle
        this process holds on the card is closed -- kernels and their runs (CU contexts), then the
        device -- so that another process can load another xclbin and ``xbutil reset`` can run:
        XRT refuses both while a process holds the card's contexts or has it open. The xclbin
        stays on the card (programming costs seconds): a model that loads it again finds it there."""
        with self._lock:
            self._users = max(0, self._users - 1)
            if self._users or self._recovering or self._closed:
                return
            if self._inflight:  # a call still in flight (its runner is closing): it ends first
                deadline = time.monotonic() + DRAIN_TIMEOUT_S
                while self._inflight and time.monotonic() < deadline:
                    self._idle.wait(0.5)
            for runner in list(self._runners):
                runner.unbind(self)
            self._forget_running_calls()
            self._drop_handles()
            self._cus.clear()
            try:
                self.device.close()
            except DeviceError as e:
                log.warning("card %d (%s): closing it after its last model: %s", self.index, self.uid, e)
            self._closed = True
            log.info("card %d (%s): no model uses it: its handles are closed", self.index, self.uid)

    # ------------------------------------------------------------------ compute units
    def compute_unit_names(self, kernel: str) -> list[str]:
        xclbin = self.xclbin
        return [cu.name for cu in xclbin.compute_units_of(kernel)] if xclbin else []

    def compute_unit(self, kernel: Kernel, name: str) -> CardComputeUnit:
        """The opened compute unit ``name`` of ``kernel`` (opened on first use)."""
        with self._lock:
            cu = self._cus.get(name)
            if cu is None:
                xclbin = self.xclbin
                unit = (
                    next((u for u in xclbin.compute_units_of(kernel.name) if u.name == name), None) if xclbin else None
                )
                if unit is None:
                    have = ", ".join(self.compute_unit_names(kernel.name)) or "none"
                    raise BackendError(
                        f"compute unit '{name}' is not in {self.xclbin_path} on card {self.index} "
                        f"(compute units of {kernel.name}: {have}); set parameter compute_unit"
                    )
                cu = self._cus[name] = CardComputeUnit(name, kernel, unit)
                with self._stats_lock:
                    self._cu_stats.setdefault(name, CuStats())
            if cu.handle is None and cu.healthy:
                if self._closed:
                    raise DeviceUnavailableError(f"card {self.index} ({self.uid}) is closed: {self.broken}")
                try:
                    cu.handle = self.device.open_compute_unit(kernel, cu.unit)
                except DeviceError as e:
                    raise BackendError(str(e)) from None
            return cu

    def healthy_compute_units(self) -> list[str]:
        with self._lock:
            if self._closed or self.health_state == CardHealth.RESETTING:
                return []
            return [n for n, cu in self._cus.items() if cu.healthy]

    def serves(self, cu_name: str) -> bool:
        """Whether calls may go to ``cu_name`` now."""
        with self._lock:
            cu = self._cus.get(cu_name)
            return (
                not self._closed
                and self.health_state != CardHealth.RESETTING
                and (cu is None or cu.healthy)
                and self.xclbin is not None
            )

    def register_runner(self, runner) -> None:
        self._runners.add(runner)

    def unregister_runner(self, runner) -> None:
        self._runners.discard(runner)

    # ------------------------------------------------------------------ calls
    @contextlib.contextmanager
    def call(self, cu: CardComputeUnit):
        """Account one call on ``cu``; refuses (UNAVAILABLE) while the card cannot take calls."""
        self.begin_call(cu)
        try:
            yield
        finally:
            self.end_call()

    def begin_call(self, cu: CardComputeUnit) -> None:
        """A call on ``cu`` starts (a recovery waits for it to end: :meth:`end_call`, always);
        refuses (UNAVAILABLE) while the card cannot take calls. :meth:`call` as two methods,
        for the runner's per-call path, where a generator context manager costs more."""
        with self._lock:
            if self._closed or self.health_state == CardHealth.RESETTING or cu.fault is not None or cu.handle is None:
                why = cu.fault if cu.fault is not None else (self.broken or self.health_state.value)
                raise DeviceUnavailableError(
                    f"compute unit {cu.name} on card {self.index} ({self.uid}) does not serve: {why}"
                )
            self._inflight += 1

    def end_call(self) -> None:
        with self._lock:
            self._inflight -= 1
            if self._inflight == 0:
                self._idle.notify_all()

    def serving(self, cu: CardComputeUnit, generation: int) -> bool:
        """Whether ``cu``, opened in ``generation``, still takes calls: :meth:`serves` read
        without the lock (each field is read once; :meth:`begin_call` checks again under it),
        for the runner's per-call check that its buffers are still the right ones."""
        return (
            generation == self.generation
            and cu.fault is None
            and not self._closed
            and self.health_state is not CardHealth.RESETTING
            and self.xclbin is not None
        )

    def input_sent(self, cu: str, nbytes: int, direct: bool) -> float:
        """A call's input (``nbytes``, ``direct``: synced from request memory wrapped in place)
        reached the card and its kernel starts now: the DMA counted and the compute unit's busy
        interval opened under one lock; returns the start time (:meth:`kernel_finished` takes it)."""
        now = time.perf_counter()
        with self._stats_lock:
            dma = self._dma
            dma["to_device"] += nbytes
            if direct:
                dma["to_device_direct"] += nbytes
            self._started_locked(cu, now)
        return now

    def compute_unit_failed(self, cu: CardComputeUnit, generation: int, reason: str) -> None:
        """Take ``cu`` out of service after a hang or an error state, and start recovering the card."""
        with self._lock:
            if generation != self.generation or not cu.healthy:
                return  # already handled (several calls may fail on one hang)
            cu.fault = reason
            healthy = [n for n, c in self._cus.items() if c.healthy]
            self.health_state = CardHealth.DEGRADED if healthy else CardHealth.NEEDS_RESET
            self.broken = f"compute unit {cu.name} {reason}"
        log.error(
            "card %d (%s): compute unit %s %s; it is out of service%s",
            self.index,
            self.uid,
            cu.name,
            reason,
            f" ({', '.join(healthy)} keep serving)" if healthy else "",
        )
        self._start_recovery(f"compute unit {cu.name} {reason}")

    # ------------------------------------------------------------------ health and recovery
    def health(self) -> str | None:
        """None while the card serves (on at least one compute unit), else why not. Also the
        health probe's hook: a card waiting for a reset retries then (at most every retry_s).

        Called on the event loop (readiness), so it never takes the card's lock, which a
        recovery may hold while it waits for calls to drain: it reads the state as it is."""
        state, broken = self.health_state, self.broken
        cus = list(self._cus.values())
        if (
            state in (CardHealth.DEGRADED, CardHealth.NEEDS_RESET)
            and not self._recovering
            and time.monotonic() - self._last_attempt >= self.retry_s
        ):
            self._start_recovery(f"retry after {broken}")
        if not self._closed and state != CardHealth.RESETTING and (not cus or any(c.healthy for c in cus)):
            return None
        return f"card {self.index} ({self.uid}) {state.value}: {broken or 'recovering'}"

    def _reset_allowed(self) -> tuple[bool, str]:
        if self.reset_policy == "off":
            return False, "card-reset=off"
        if shutil.which("xbutil") is None:
            return False, "xbutil is not on PATH"
        return True, ""

    def _start_recovery(self, reason: str) -> None:
        with self._lock:
            if self._recovering:
                return
            self._recovering = True
            self._last_attempt = time.monotonic()
        threading.Thread(
            target=self._recover, args=(reason,), name=f"fpgaserve-card{self.index}-recovery", daemon=True
        ).start()

    def _recover(self, reason: str) -> None:
        """Runs on its own thread; device calls (reset, programming) happen outside the lock,
        while the card is RESETTING so that no call starts."""
        try:
            allowed, why_not = self._reset_allowed()
            with self._lock:
                xclbin = self.xclbin
                if xclbin is None:  # nothing was ever loaded: nothing to recover
                    return
                lost = not any(c.healthy for c in self._cus.values())
                if not allowed and not lost and not self._closed:
                    # degraded but serving: a reset needs the card closed, which would stop the rest
                    self._log_operator(why_not, serving=True)
                    return
                self.health_state = CardHealth.RESETTING
                self._close_locked()
            if allowed:
                ok, text = self._run_reset()
                if not ok:
                    why_not = text
            try:
                self.device.reopen()
                self.device.load(xclbin)
            except DeviceError as e:
                with self._lock:
                    self.health_state = CardHealth.NEEDS_RESET
                    self.broken = f"{reason}; reprogramming failed: {e}"
                    with contextlib.suppress(Exception):
                        self.device.close()
                self._log_operator(why_not or "the reset did not help", serving=False)
                return
            with self._lock:
                self._closed = False
                self.generation += 1
                self.health_state = CardHealth.OK
                self.broken = None
                for cu in self._cus.values():
                    cu.fault = None
                self.reloads += 1
            log.warning("card %d (%s): serving again after %s", self.index, self.uid, reason)
        except Exception:
            log.exception("card %d: recovery failed", self.index)
            with self._lock:
                self.health_state = CardHealth.NEEDS_RESET
        finally:
            with self._lock:
                self._recovering = False
                self._last_attempt = time.monotonic()

    def _close_locked(self) -> None:
        """Wait for calls in flight, free every buffer, close every handle; caller holds ``_lock``."""
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while self._inflight and time.monotonic() < deadline:
            self._idle.wait(0.5)
        for runner in list(self._runners):
            runner.unbind(self)
        self._forget_running_calls()
        self._drop_handles()
        if not self._closed:
            self.device.close()
            self._closed = True

    def _drop_handles(self) -> None:
        for cu in self._cus.values():
            handle, cu.handle = cu.handle, None
            if handle is not None:
                handle.close()

    def _run_reset(self) -> tuple[bool, str]:
        command = self.api.reset_command(self.device)
        log.warning("card %d (%s): %s", self.index, self.uid, " ".join(command))
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=RESET_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            return False, f"{' '.join(command)} failed: {e}"
        output = (done.stdout + done.stderr).strip()
        # xbutil exits 0 even when the reset failed (SubCmdReset): its words are the result
        if "Successfully reset" in output:
            self.resets += 1
            return True, output
        return False, f"{' '.join(command)} did not reset the card: {output[-400:] or f'exit status {done.returncode}'}"

    def _log_operator(self, why: str, serving: bool) -> None:
        key = (self.broken, why, serving)
        if key == self._told:  # once per situation, not at every health probe
            return
        self._told = key
        command = " ".join(self.api.reset_command(self.device))
        if serving:
            log.error(
                "card %d (%s): %s; fpgaserve does not reset it (%s) while other compute units serve. To recover "
                "it: unload the models on card %d (or stop fpgaserve), run `%s`, then load them again",
                self.index,
                self.uid,
                self.broken,
                why,
                self.index,
                command,
            )
        else:
            log.error(
                "card %d (%s) needs a reset (%s): run `%s`; fpgaserve has closed the card and reprograms it at the "
                "next health probe once the reset is done",
                self.index,
                self.uid,
                why,
                command,
            )

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
        xclbin = self.xclbin
        if xclbin is None:
            return 0
        return sum(b.size for b in xclbin.banks if b.used and b.type not in ("STREAMING", "STREAMING_CONNECTION"))

    def snapshot(self) -> CardSnapshot:
        now = time.perf_counter()
        total = self.memory_total()
        with self._lock:
            cu_healthy = {n: c.healthy for n, c in self._cus.items()}
            health = self.health_state.value
        with self._stats_lock:
            cus = self._cu_busy(now)
            snap = CardSnapshot(
                uid=self.uid,
                index=self.index,
                name=self.name,
                simulated=self.simulated,
                xclbin_path=self.xclbin_path,
                xclbin_uuid=self.xclbin.uuid if self.xclbin else "",
                now=now,
                cus=cus,
                kernel_us=sum(st.busy_s for st in self._cu_stats.values()) * 1e6,
                calls=sum(st.calls for st in self._cu_stats.values()),
                dma_to_device=self._dma["to_device"],
                dma_from_device=self._dma["from_device"],
                dma_to_device_direct=self._dma["to_device_direct"],
                memory_used=self._memory_used,
                memory_total=total,
                reloads=self.reloads,
                health=health,
                cu_healthy=cu_healthy,
                bdf=self.device.bdf,
                api=self.api.name,
            )
        xclbin = self.xclbin
        for cu in xclbin.compute_units if xclbin else ():  # idle CUs of the design count for utilization too
            snap.cus.setdefault(cu.name, (0, 0.0))
        return snap


class CardPool:
    """The process's cards, one :class:`FpgaCard` per device of the card API, created on first use."""

    _instance: CardPool | None = None
    _instance_lock = threading.Lock()

    def __init__(self, api: CardApi, reset_policy: str = "auto", engine_cards: str = ""):
        if reset_policy not in RESET_POLICIES:
            raise BackendError(f"card-reset '{reset_policy}' is not one of {', '.join(RESET_POLICIES)}")
        self.api = api
        self.reset_policy = reset_policy
        # --engine-processes N > 1: "<engine>/<N>", this process opens only cards c with
        # c mod N == engine (server/engine/placement.py); "" = every card
        self.engine_cards = engine_cards
        self._engine, self._engines = _engine_cards(engine_cards)
        self._devices = api.devices(self.owns if engine_cards else None)
        self._cards: dict[int, FpgaCard] = {}
        self._lock = threading.Lock()
        log.info(
            "FPGA cards: %d through card-api %s (%s%s)",
            len(self._devices),
            api.name,
            api.version(),
            ", simulated" if api.simulated else "",
        )

    @classmethod
    def instance(cls, api: CardApi, reset_policy: str = "auto", engine_cards: str = "") -> CardPool:
        with cls._instance_lock:
            if cls._instance is None or cls._instance.api is not api or cls._instance.engine_cards != engine_cards:
                cls._instance = cls(api, reset_policy, engine_cards)
            return cls._instance

    @classmethod
    def reset_instance(cls) -> None:
        """Forget the process-wide pool (tests re-probing simulated cards)."""
        with cls._instance_lock:
            cls._instance = None

    def count(self) -> int:
        return len(self._devices)

    def owns(self, index: int) -> bool:
        """Whether this process may open card ``index`` (all of them but with --engine-processes)."""
        return index % self._engines == self._engine

    def card(self, index: int) -> FpgaCard:
        if not 0 <= index < len(self._devices):
            raise BackendError(f"FPGA card {index} does not exist; this host has {len(self._devices)} card(s)")
        if not self.owns(index):
            raise BackendError(
                f"FPGA card {index} belongs to engine process {index % self._engines} "
                f"(--engine-processes {self._engines}: card c to engine process c mod {self._engines}); "
                f"this is engine process {self._engine}"
            )
        with self._lock:
            card = self._cards.get(index)
            if card is None:
                card = self._cards[index] = FpgaCard(index, self._devices[index], self.api, self.reset_policy)
            return card

    def cards(self) -> list[FpgaCard]:
        """Every card of the host this process owns (telemetry reports idle cards too)."""
        return [self.card(i) for i in range(len(self._devices)) if self.owns(i)]


def _engine_cards(setting: str) -> tuple[int, int]:
    """hls4ml's ``engine-cards`` setting ``<engine>/<N>`` as (engine, N); "" = (0, 1)."""
    if not setting:
        return 0, 1
    engine, _, engines = setting.partition("/")
    try:
        e, n = int(engine), int(engines)
    except ValueError:
        e, n = -1, 0
    if not 0 <= e < n:
        raise BackendError(f"hls4ml engine-cards '{setting}' must be <engine>/<engine processes>, e.g. 1/2")
    return e, n


__all__ = ["RESET_POLICIES", "CardComputeUnit", "CardHealth", "CardPool", "FpgaCard"]
