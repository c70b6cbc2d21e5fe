"""One model instance on a card: its compute unit, its buffers, and the calls of a batch.

Placement (``backend.py``) gives the model's instances a list of (card, compute unit) pairs,
interleaved across cards (every card's first CU, then every card's second, ...), and instance
i makes pair ``i mod n`` its home. Each runner owns one input and one output buffer in its
compute unit's bank, allocated once for the largest call (never per batch), so the instances
homed on one compute unit double-buffer it: while one instance's call runs, the next one
encodes and moves its batch over PCIe, and XRT's scheduler starts the queued call the moment
the first ends (``instance_group { count: 2 x CUs }``; ``fpgaserve pack`` writes that). A
batch larger than one call allows (FaaST's fixed 16,384 rows, the buffers' size) runs as
several calls in a row.

A call: encode the rows into the host side of the input buffer (``abi``), sync the bytes
used, start the kernel, wait until done or ``kernel_timeout_secs`` (``RunHandle.wait``: in
XRT's C API without the GIL; polling with sleeps where waiting inside the runtime would hold
it, as ``pyxrt``'s does), sync back the result bytes, decode them into the output. A call
that does not finish, or that the runtime fails, takes the compute unit out of service
(``cards.FpgaCard.compute_unit_failed``) and fails its batch with UNAVAILABLE; the runner
then moves to a healthy compute unit of the model (allocating there once) until its home
serves again.

Where the input comes from. For every fixed-point ABI (krnl_rtl's words, kernel_wrapper's
native ``ap_fixed`` elements, FaaST's beats) the card's element format is not the request's,
so one encoding pass is necessary: it reads the request tensor where the frontend put it (a
view of the shared-memory arena, no copy before) and writes the card's format into the
input buffer's host memory, the DMA buffer; that pass is the only host copy of the input.
When the card's format is the request tensor itself (``abi.raw_input``: kernel_wrapper built
with ``HW_Quant``, float32 elements, a C-contiguous float32 (rows, N_IN) batch) and the runtime
can make a buffer over user memory (``CardDevice.user_memory``: XRT >= 2.20's
``pyxrt.ext.bo``, for an argument in memory group 0; not PYNQ), a batch whose address is
page-aligned (what xocl pins; the frontend processes' arena page-aligns blocks of 64 KiB and
more) is wrapped in place for the call: the card syncs from the request's own pages, the
kernel gets that buffer, and it is freed after the call (``dma_to_device_direct`` counts
those bytes). Anything else (an unaligned or non-float32 array, a fixed-point ABI, XRT <
2.20, the driver refusing the pages) takes the encoding pass. Outputs always go through the output buffer: the result is
decoded from the card's float32 or fixed point once, straight into the array the backend
returns, in the model's output dtype (float32 for FP32: no float64 array to fill and convert).
"""

from __future__ import annotations

import ctypes
import logging
import mmap
from typing import NamedTuple

import numpy as np

from ...base import BackendError, DeviceUnavailableError
from .abi import KernelAbi
from .cards import CardComputeUnit, FpgaCard
from .manifest import CardBinding
from .runtime import DeviceBuffer, DeviceError, RunState

log = logging.getLogger("fpgaserve.hls4ml.card.runner")

#: xocl pins user memory in whole pages and refuses an address that is not page-aligned
_PAGE = mmap.PAGESIZE


_NO_BYTES = ctypes.c_char * 0


def _address(x: np.ndarray) -> int:
    """The address of ``x``'s first byte: ``x.ctypes.data``, which builds numpy's ctypes helper
    object on every read (a few microseconds per call); a zero-length ctypes view of the buffer
    costs a third of it where numpy lets one be made (a writable, contiguous array)."""
    try:
        return ctypes.addressof(_NO_BYTES.from_buffer(x))  # type: ignore[arg-type]  # numpy exports the buffer
    except (TypeError, ValueError, BufferError):
        return x.ctypes.data


class Placement(NamedTuple):
    card: FpgaCard
    cu: str


class _Bound(NamedTuple):
    card: FpgaCard
    cu: CardComputeUnit
    generation: int
    inputs: DeviceBuffer
    outputs: DeviceBuffer
    direct: bool  # the runtime can wrap request memory as this CU's input buffer
    home: bool  # the runner's home compute unit (else a fallback while home does not serve)


class CardRunner:
    """One model instance's path to a compute unit (see the module docstring)."""

    def __init__(
        self,
        binding: CardBinding,
        placements: list[Placement],
        home: int,
        max_batch_size: int,
        timeout_s: float,
        name: str = "",
    ):
        if not placements:
            raise BackendError("no compute unit to run on")
        if max_batch_size < 1:
            raise BackendError(f"max_batch_size must be at least 1 for the card's buffers, got {max_batch_size}")
        if not timeout_s > 0:
            raise BackendError(f"kernel timeout must be positive, got {timeout_s}")
        self.binding = binding
        self.abi: KernelAbi = binding.make_abi()
        self.placements = placements
        self.home = placements[home % len(placements)]
        self.timeout_s = float(timeout_s)
        self.name = name
        self.n_in, self.n_out = self.abi.io.n_in, self.abi.io.n_out
        limit = self.abi.max_call_rows
        self.call_capacity = min(max_batch_size, limit) if limit else max_batch_size
        self._buffer_rows = self.abi.call_rows(self.call_capacity)
        self._bound: _Bound | None = None
        self._closed = False
        self._refused_user_memory = False  # logged once
        self.home.card.register_runner(self)
        self._ensure_bound()  # load-time errors (no such CU, bank too small) surface now

    def __repr__(self) -> str:
        return f"CardRunner({self.name}: {self.home.card.uid}:{self.home.cu}, {self.abi.name})"

    # ------------------------------------------------------------------ binding
    def _target(self) -> Placement:
        """Home while it serves, else the first serving placement (its own card first)."""
        if self.home.card.serves(self.home.cu):
            return self.home
        uuid = self.binding.xclbin.uuid
        ordered = sorted(self.placements, key=lambda p: p.card is not self.home.card)
        for p in ordered:
            loaded = p.card.xclbin is not None and p.card.xclbin.uuid == uuid
            if loaded and p.card.serves(p.cu):
                return p
        reasons = {p.card.health() or f"card {p.card.index}: compute unit {p.cu} is out of service" for p in ordered}
        raise DeviceUnavailableError(f"no compute unit of this model serves now ({'; '.join(sorted(reasons))})")

    def _ensure_bound(self) -> _Bound:
        target = self._target()
        bound = self._bound
        if (
            bound is not None
            and bound.card is target.card
            and bound.cu.name == target.cu
            and bound.generation == target.card.generation
        ):
            return bound
        self.unbind()
        card = target.card
        cu = card.compute_unit(self.binding.kernel, target.cu)
        if cu.handle is None:
            raise DeviceUnavailableError(f"compute unit {target.cu} on card {card.index} is not open: {cu.fault}")
        in_bytes = self.abi.input_bytes(self._buffer_rows)
        out_bytes = self.abi.output_bytes(self._buffer_rows)
        where = f"{card.xclbin_path} on card {card.index} ({card.uid})"
        for arg, nbytes in ((self.abi.input_arg, in_bytes), (self.abi.output_arg, out_bytes)):
            bank = cu.unit.bank_of(arg.id) if arg.id is not None else None
            if bank is not None and bank.size and nbytes > bank.size:
                raise BackendError(
                    f"{where}: {nbytes} bytes for {cu.name}.{arg.name} ({self._buffer_rows} rows per call) exceed "
                    f"bank {bank.tag} ({bank.size} bytes); lower max_batch_size"
                )
        inputs = outputs = None
        try:
            inputs = card.device.allocate(in_bytes, cu.handle, self.abi.input_arg)
            outputs = card.device.allocate(out_bytes, cu.handle, self.abi.output_arg)
        except DeviceError as e:
            if inputs is not None:
                inputs.free()
            raise BackendError(f"{where}: {e}") from None
        card.note_memory(in_bytes + out_bytes)
        if card is not self.home.card:
            card.register_runner(self)
        why = card.device.user_memory(cu.handle, self.abi.input_arg)
        self._bound = _Bound(card, cu, card.generation, inputs, outputs, why is None, target == self.home)
        if why is not None and self.abi.raw_input(np.empty((1, self.n_in), np.float32)):
            log.debug("%r: inputs are copied into the card's buffer: %s", self, why)
        if target != self.home:
            log.warning("%r: home %s does not serve; running on card %d %s", self, self.home.cu, card.index, cu.name)
        log.debug("%r bound to card %d %s: buffers %d + %d bytes", self, card.index, cu.name, in_bytes, out_bytes)
        return self._bound

    def unbind(self, card: FpgaCard | None = None) -> None:
        """Free the buffers (the runner moves or closes; or ``card`` is being reset, and the
        runner's buffers are on it: the card waits for its calls in flight before it asks)."""
        bound = self._bound
        if bound is None or (card is not None and bound.card is not card):
            return
        self._bound = None
        for buf in (bound.inputs, bound.outputs):
            bound.card.note_memory(-buf.nbytes)
            buf.free()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.unbind()
        for p in {id(p.card): p for p in self.placements}.values():
            p.card.unregister_runner(self)
        self.home.card.release()

    # ------------------------------------------------------------------ running
    def predict(self, x: np.ndarray, dtype: np.dtype | type = np.float64) -> np.ndarray:
        """Run ``x`` (rows, N_IN) on the card; returns (rows, N_OUT) in ``dtype`` (float64 by
        default; the backend asks for its output's dtype, so the card's results are decoded once,
        straight into the array it returns, with no float64 array to allocate and convert)."""
        if self._closed:
            raise BackendError(f"{self!r} is closed")
        x = np.asarray(x)
        if x.ndim == 1:
            x = x.reshape(1, -1)
        if x.ndim != 2 or x.shape[1] != self.n_in:
            raise BackendError(f"{self!r}: input shape {x.shape}, expected (batch, {self.n_in})")
        rows = x.shape[0]
        out = np.empty((rows, self.n_out), dtype=dtype)
        for start in range(0, rows, self.call_capacity):
            stop = min(rows, start + self.call_capacity)
            self._call(x[start:stop], out[start:stop])
        return out

    def _call(self, x: np.ndarray, out: np.ndarray) -> None:
        bound = self._bound
        if bound is None or not bound.home or not bound.card.serving(bound.cu, bound.generation):
            bound = self._ensure_bound()  # the per-call check above is that of _target, lock-free
        card, cu = bound.card, bound.cu
        rows = x.shape[0]
        abi = self.abi
        failure = None
        card.begin_call(cu)
        try:
            wrapped = None
            try:
                wrapped = self._wrap(bound, x)
                if wrapped is not None:  # the request's memory is the card's input format
                    source, nbytes = wrapped, x.nbytes
                else:
                    source, nbytes = bound.inputs, abi.encode(x, bound.inputs.host)
                args = abi.arguments(source, bound.outputs, abi.call_rows(rows))
                source.to_device(nbytes)  # only the bytes this call uses
                # (no local for cu.handle: a failed call's traceback keeps this frame, and with
                # pyxrt a kernel object kept alive keeps the card open, so no reset could run)
                assert cu.handle is not None
                # a direct call's run is left holding the runner's own input buffer, not the request's
                rest = abi.arguments(bound.inputs, bound.outputs, abi.call_rows(rows)) if wrapped is not None else None
                if cu.handle.serialized:
                    with cu.lock:
                        state, why = self._run(card, cu, args, nbytes, rest)
                else:
                    state, why = self._run(card, cu, args, nbytes, rest)
                if state is RunState.COMPLETED:
                    result = abi.result_bytes(rows)
                    bound.outputs.from_device(result)
                    card.count_dma("from_device", result)
                    abi.decode(bound.outputs.host, rows, out)
                    return
                if state is RunState.RUNNING:
                    failure = f"did not finish a call of {rows} rows within {self.timeout_s:g} s"
                else:
                    failure = f"ended a call of {rows} rows in an error state" + (f": {why}" if why else "")
            except DeviceError as e:
                failure = f"failed: {e}"
            finally:
                # the driver keeps a wrapped buffer's pages pinned while it lives: release them
                # with the call (the kernel read its input from card memory, synced above)
                if wrapped is not None:
                    wrapped.free()
        finally:
            card.end_call()
        card.compute_unit_failed(cu, bound.generation, failure)
        raise DeviceUnavailableError(f"kernel {cu.name} on card {card.index} ({card.uid}) {failure}")

    def _run(
        self, card: FpgaCard, cu: CardComputeUnit, args: list, nbytes: int, rest: list | None
    ) -> tuple[RunState, str | None]:
        """Start the kernel on the input just synced (``nbytes`` of it, counted now) and wait
        for it until the timeout: its state, and what the runtime said of a failed call. The
        call's run is released before this returns (``rest``: for a call on request memory
        wrapped in place, the arguments the run keeps instead: see ``RunHandle.release``)."""
        started = card.input_sent(cu.name, nbytes, rest is not None)
        state = RunState.RUNNING
        run = None
        why = None
        try:
            assert cu.handle is not None
            run = cu.handle.start(args)
            state = run.wait(started + self.timeout_s)
            why = run.failure
        finally:
            # a hung call's run keeps the card open (pyxrt closes a device with its last
            # object): drop it here, not with the frames of a traceback
            if run is not None:
                run.release(rest)
            run = None
            # a timed-out call kept the CU busy until now: it counts, so utilization shows the hang
            card.kernel_finished(cu.name, started, timed_out=state is RunState.RUNNING)
        return state, why

    def _wrap(self, bound: _Bound, x: np.ndarray) -> DeviceBuffer | None:
        """A buffer over ``x``'s own memory for this call, or None (encode into the buffer)."""
        if not bound.direct:
            return None
        address = _address(x)
        if address % _PAGE or not self.abi.raw_input(x):
            return None
        assert bound.cu.handle is not None
        try:
            return bound.card.device.wrap_user_memory(x, bound.cu.handle, self.abi.input_arg, address)
        except DeviceError as e:
            # the driver refused these pages (read-only, say): copying into the buffer always works
            level = logging.DEBUG if self._refused_user_memory else logging.WARNING
            self._refused_user_memory = True
            log.log(level, "%r: request memory not usable in place, copying it: %s", self, e)
            return None


__all__ = ["CardRunner", "Placement"]
