"""Run batches on hls4ml's VivadoAccelerator Alveo kernel through PYNQ 3.0.1.

The kernel (``krnl_rtl``, one CU ``krnl_rtl_1`` by default) has the PYNQ signature
``(fifo_in: int*, fifo_out: int*, length_r_in: uint, length_r_out: uint)``: it streams
``length_r_in`` 32-bit words from ``fifo_in`` through the free-running ``myproject_axi``
(``N_IN`` words in, ``N_OUT`` out per sample) and writes ``length_r_out`` words to
``fifo_out``, then raises ap_done/ap_idle. The lengths count words of the whole batch.
Wrong lengths hang the CU or leave stale words in its FIFOs that corrupt the next call, so
they are checked before every start.

Compared with hls4ml's stock driver (``NeuralNetworkOverlay.predict``), a runner allocates
its buffers once, for ``max_batch_size`` rows, in the CU's memory bank *on its own card*
(``target=``), syncs only the bytes a batch uses, encodes/decodes with numpy
(``kernel_io.py``), serializes calls per CU, and never waits unboundedly: PYNQ 3.0.1's
``WaitHandle.wait()`` spins on ap_idle forever, so the runner polls the same bit itself with
a deadline. A timed-out call raises :class:`DeviceUnavailableError` and reprograms the card,
after which every runner on it re-resolves its IP and buffers on its next batch.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from ..base import BackendError, DeviceUnavailableError
from .cards import FpgaCard
from .kernel_io import KernelIoError, WordCodec
from .project import Hls4mlProject, ProjectError

log = logging.getLogger("fpgaserve.hls4ml.hardware")

# krnl_rtl's arguments, in register order (krnl_rtl_control_s_axi.v)
KERNEL_ARGS = ("fifo_in", "fifo_out", "length_r_in", "length_r_out")
AP_IDLE = 0x4
# first polls spin (a small batch finishes in microseconds), then sleep with backoff so a long
# batch does not burn a core; the worker thread releases the GIL while sleeping
_SPIN_S = 200e-6
_SLEEP_MIN_S = 20e-6
_SLEEP_MAX_S = 1e-3


class HardwareRunner:
    """One model instance's path to one compute unit on one card."""

    # Set by _bind(), None again after _unbind(); batches only run while bound (checked under the
    # CU lock). PYNQ's IP driver and buffers are untyped, hence Any.
    _ip: Any
    _in_buf: Any
    _out_buf: Any
    _in_host: Any  # plain ndarray views of the buffers
    _out_host: Any
    _use_ert: bool

    def __init__(self, project: Hls4mlProject, card: FpgaCard, cu_name: str, max_batch_size: int, timeout_s: float):
        if project.accelerator is None:
            raise ProjectError(
                f"hls4ml project {project.path} is a {project.backend} project; the card runs VivadoAccelerator "
                "projects (the krnl_rtl kernel)"
            )
        if max_batch_size < 1:
            raise BackendError(f"max_batch_size must be at least 1 for the card's buffers, got {max_batch_size}")
        if not timeout_s > 0:
            raise BackendError(f"kernel timeout must be positive, got {timeout_s}")
        self.project = project
        self.card = card
        self.cu_name = cu_name
        self.max_batch_size = int(max_batch_size)
        self.timeout_s = float(timeout_s)
        self.n_in = project.input.size
        self.n_out = project.output.size
        try:
            self.in_codec = WordCodec.for_precision(project.accelerator.input_precision, "AcceleratorConfig input")
            self.out_codec = WordCodec.for_precision(project.accelerator.output_precision, "AcceleratorConfig output")
        except KernelIoError as e:
            raise ProjectError(f"hls4ml project {project.path}: {e}") from None
        self._lock = card.cu_lock(cu_name)
        self._generation = -1
        self._ip = None
        self._in_buf = self._out_buf = None
        self._closed = False
        card.register_runner(self)
        with self._lock:
            self._bind()  # load-time errors (no such CU, bank too small) surface now, not on the first batch

    def __repr__(self) -> str:
        return f"HardwareRunner({self.card.uid}:{self.cu_name}, max_batch={self.max_batch_size})"

    # ------------------------------------------------------------------ binding
    def _bind(self) -> None:
        """Resolve the CU driver and allocate buffers on the card's current overlay (CU lock held)."""
        card = self.card
        overlay = card.overlay
        if overlay is None:
            raise DeviceUnavailableError(f"card {card.index} ({card.uid}) has no bitstream loaded ({card.broken})")
        where = f"{card.xclbin_path} on card {card.index} ({card.uid})"
        desc = overlay.ip_dict.get(self.cu_name)
        if desc is None or "CTRL" not in (desc.get("registers") or {}):
            have = ", ".join(card.compute_units()) or "none"
            raise BackendError(
                f"compute unit '{self.cu_name}' is not in {where} (compute units: {have}); set parameter compute_unit"
            )
        regs = desc["registers"]
        missing = [a for a in KERNEL_ARGS if a not in regs]
        if missing or "*" not in str(regs["fifo_in"].get("type")) or "*" not in str(regs["fifo_out"].get("type")):
            sig = ", ".join(f"{k}: {v.get('type')}" for k, v in regs.items() if k != "CTRL")
            raise BackendError(
                f"compute unit '{self.cu_name}' in {where} has arguments ({sig}); expected hls4ml's krnl_rtl "
                "(fifo_in: int*, fifo_out: int*, length_r_in: uint, length_r_out: uint)"
            )
        ip = getattr(overlay, self.cu_name)
        if not hasattr(ip, "start_sw"):
            raise BackendError(f"PYNQ cannot call '{self.cu_name}' in {where} (device lacks the CALLABLE capability)")
        n_in_words = self.max_batch_size * self.n_in
        n_out_words = self.max_batch_size * self.n_out
        in_bytes = n_in_words * self.in_codec.dtype.itemsize
        out_bytes = n_out_words * self.out_codec.dtype.itemsize
        targets = {}
        for arg, nbytes in (("fifo_in", in_bytes), ("fifo_out", out_bytes)):
            tag = regs[arg].get("memory")
            if tag:
                mem = overlay.mem_dict.get(tag)
                if mem is None:
                    raise BackendError(f"{where}: argument {arg} is connected to unknown memory '{tag}'")
                if mem.get("size") and nbytes > int(mem["size"]):
                    raise BackendError(
                        f"{where}: {nbytes} bytes for {arg} (max_batch_size {self.max_batch_size}) exceed bank {tag} "
                        f"({mem['size']} bytes)"
                    )
                targets[arg] = (card.device.get_memory(mem), tag)
            else:
                # no connectivity section: the device's only used bank (default_memory)
                targets[arg] = (card.device, "default memory")
        from pynq import allocate

        in_buf = out_buf = None
        try:
            in_buf = allocate((n_in_words,), dtype=self.in_codec.dtype, target=targets["fifo_in"][0])
            out_buf = allocate((n_out_words,), dtype=self.out_codec.dtype, target=targets["fifo_out"][0])
        except Exception as e:
            self._free(in_buf)
            raise BackendError(
                f"{where}: cannot allocate {in_bytes} + {out_bytes} bytes for {self.cu_name} "
                f"(max_batch_size {self.max_batch_size}) in {targets['fifo_in'][1]}: {e}"
            ) from e
        card.note_memory(in_buf.nbytes + out_buf.nbytes)
        self._ip = ip
        self._in_buf, self._out_buf = in_buf, out_buf
        # plain ndarray views for numpy work (PynqBuffer's __array_finalize__ costs per slice)
        self._in_host = in_buf.view(np.ndarray)
        self._out_host = out_buf.view(np.ndarray)
        self._use_ert = bool(card.device.has_capability("ERT"))
        self._generation = card.generation
        log.debug(
            "%r bound: %s, buffers %d+%d bytes in %s/%s",
            self,
            where,
            in_bytes,
            out_bytes,
            targets["fifo_in"][1],
            targets["fifo_out"][1],
        )

    def _free(self, buf) -> None:
        if buf is None:
            return
        free = getattr(buf, "freebuffer", None)
        if free is not None:
            try:
                free()
            except Exception as e:  # freeing after a hang may fail on the old context; nothing to save
                log.debug("%r: freeing a buffer failed: %s", self, e)

    def _unbind(self) -> None:
        """Drop IP handle and buffers (card reload in progress, or close)."""
        for buf in (self._in_buf, self._out_buf):
            if buf is not None:
                self.card.note_memory(-buf.nbytes)
                self._free(buf)
        self._ip = None
        self._in_buf = self._out_buf = self._in_host = self._out_host = None
        self._generation = -1

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._lock:
            self._unbind()
        self.card.unregister_runner(self)
        self.card.release()

    # ------------------------------------------------------------------ running
    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.run(x)

    def run(self, x: np.ndarray) -> np.ndarray:
        """Run one batch ``x`` (B, N_IN) on the card; returns float64 (B, N_OUT)."""
        if self._closed:
            raise BackendError(f"{self!r} is closed")
        x = np.asarray(x)
        if x.ndim == 1:
            x = x.reshape(1, -1)
        if x.ndim != 2 or x.shape[1] != self.n_in:
            raise BackendError(f"{self!r}: input shape {x.shape}, expected (batch, {self.n_in})")
        batch = x.shape[0]
        if batch > self.max_batch_size:
            raise BackendError(f"{self!r}: batch of {batch} exceeds max_batch_size {self.max_batch_size}")
        result = np.empty((batch, self.n_out), dtype=np.float64)
        if batch == 0:
            return result
        self.card.ensure_usable()
        with self._lock:
            if self._generation != self.card.generation or self._ip is None:
                self._bind()
            generation = self._generation
            failure = self._run_locked(x, batch, result)
        if failure is not None:
            message = (
                f"kernel {self.cu_name} on card {self.card.index} ({self.card.uid}) {failure}; "
                "the card is being reprogrammed"
            )
            log.error(message)
            try:
                self.card.reload(generation, f"{self.cu_name} {failure}")
            except DeviceUnavailableError as e:
                raise DeviceUnavailableError(f"{message}; {e}") from e
            raise DeviceUnavailableError(message)
        return result

    def _run_locked(self, x: np.ndarray, batch: int, result: np.ndarray) -> str | None:
        """Encode, sync, start, wait, sync back, decode; returns why the device failed, or None."""
        card, n_in, n_out = self.card, self.n_in, self.n_out
        len_in = batch * n_in
        len_out = batch * n_out
        # the kernel computes len_in / N_IN samples and writes N_OUT words for each: anything
        # else hangs it or leaves stale FIFO words for the next call
        if not (
            len_in % n_in == 0
            and len_out == len_in // n_in * n_out
            and len_in <= self._in_host.size
            and len_out <= self._out_host.size
        ):
            raise AssertionError(
                f"{self!r}: kernel lengths in={len_in} out={len_out} violate N_IN={n_in} N_OUT={n_out}"
            )
        self.in_codec.encode(x, self._in_host[:len_in].reshape(batch, n_in))
        try:
            in_part = self._in_buf[:len_in]
            in_part.sync_to_device()  # only the words this batch uses
            card.count_dma("to_device", in_part.nbytes)
            started = card.kernel_started(self.cu_name)
            finished = False
            try:
                finished = self._start_and_wait(len_in, len_out, started + self.timeout_s)
            finally:
                # a timed-out call kept the CU busy until now: it counts, so utilization shows the hang
                card.kernel_finished(self.cu_name, started, timed_out=not finished)
            if not finished:
                return f"did not finish a batch of {batch} within {self.timeout_s:g} s"
            out_part = self._out_buf[:len_out]
            out_part.sync_from_device()
            card.count_dma("from_device", out_part.nbytes)
        except Exception as e:  # XRT/PYNQ errors on sync, start or wait: the device is at fault
            log.exception("%r: kernel call failed", self)
            return f"failed a batch of {batch}: {type(e).__name__}: {e}"
        self.out_codec.decode(self._out_host[:len_out].reshape(batch, n_out), result)
        return None

    def _start_and_wait(self, len_in: int, len_out: int, deadline: float) -> bool:
        ip = self._ip
        if self._use_ert:
            # XRT's embedded scheduler: the completion arrives through the device's exec-buffer
            # list, which every CU of the card shares, so submit and poll under the card's lock
            with self.card.ert_lock:
                handle = ip.start_ert(self._in_buf, self._out_buf, len_in, len_out)
            return self._wait_ert(handle, deadline)
        ip.start_sw(self._in_buf, self._out_buf, len_in, len_out)
        return self._wait_idle(ip, deadline)

    def _wait_idle(self, ip, deadline: float) -> bool:
        """Poll CTRL.ap_idle (what PYNQ's WaitHandle.wait polls) until ``deadline``."""
        mmio = ip.mmio
        spin_until = time.perf_counter() + _SPIN_S
        sleep = _SLEEP_MIN_S
        while True:
            if mmio.read(0) & AP_IDLE:
                return True
            now = time.perf_counter()
            if now >= deadline:
                return bool(mmio.read(0) & AP_IDLE)
            if now >= spin_until:
                time.sleep(min(sleep, max(deadline - now, 0.0)))
                sleep = min(sleep * 2, _SLEEP_MAX_S)

    def _wait_ert(self, handle, deadline: float) -> bool:
        device = self.card.device
        while not handle.done:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                return False
            with self.card.ert_lock:
                # xclExecWait returns as soon as any command completes, else after the timeout (ms)
                device._handle_events(max(1, min(10, int(remaining * 1000))))
        handle._future.result()  # raises RuntimeError("Execution failed: ...") on an ERT error state
        return True
