"""The Python half of the simulated ``libxrt_coreutil.so.2`` (``fpga_sim/xrt_c``): the card rules.

The C library (``xrt_c/xrt_coreutil_double.c``) imports this module the first time one of its
XRT C API functions is called, under the GIL, and calls :func:`attach` with its own path; attach
registers :data:`CALLBACKS` (a :class:`Table` of ctypes callbacks) into it with
``fpgasim_register``. Each callback does SimCard's rule checks and accounting and returns at once
(ids > 0, 0, or ``-errno``); the C side blocks, without the GIL, until the times they return:

``dev_open(index, bdf) -> dev``, ``dev_close(dev)``, ``dev_load(dev, path)``, ``dev_uuid(dev, out16)``
    ``xrtDeviceOpen``/``OpenByBDF`` (``index`` -1 with a BDF), ``xrtDeviceClose`` (the process's
    exit for this card: contexts closed, buffers freed, when it was the last open), loads with
    SimCard.load's rules (also what a kernel's implicit hw_context does), the loaded uuid.
``bo_alloc(dev, size, flags, grp, userptr, out[2]) -> bo``, ``bo_free(bo)``
    ``out`` = (host address or 0 for device-only, device address); ``userptr`` != 0: a buffer over
    the caller's memory (SimCard.alloc_userptr: page-aligned, pages mapped writable).
``sync_begin(bo, dir, size, offset, *end) -> transfer``, ``sync_finish(transfer) -> 0 | 1``
    SimCard.dma_begin: ``*end`` is the modelled end (time.monotonic() seconds) the C side sleeps
    until; 0: nothing to move, or (``*end`` set) a card side that did the copy at once (inline,
    timing): then dma_finish ran here too and the transfer is counted when it begins, one
    callback per sync. ``sync_finish`` (process mode) returns 1 while the card process has not
    answered yet (C polls in short sleeps), 0 once the transfer is counted.
``kernel_open(dev, uuid16, name, exclusive, KernelInfo*) -> kernel``, ``kernel_group(kernel, argno)``
(only out of range: KernelInfo carries each argument's group, which C answers itself),
``kernel_close(kernel)``, ``bo_clone(kernel, argno, bo, out[2]) -> bo``
    ``"kernel"`` or ``"kernel:{cu,...}"``: an implicit hw_context (the load rules) and CU contexts
    (EBUSY for another's exclusive use); KernelInfo carries each argument's register offset, size
    and how xrtRunSetArg reads it (``ARG_*``), and the memory groups each CU's arguments are
    connected to, so setting arguments stays in C. ``bo_clone``: XRT's copy of a buffer into a
    connected bank when no CU of the run can reach it.
``run_start(kernel, previous, payload, size, cu_mask, *wake, *generation) -> cmd``,
``run_poll(cmd, *wake) -> state``, ``run_forget(cmds, n)``
    SimCard.submit of the register image C built, with what a poll would answer at once (the
    wake time) and the timeline generation it holds for (``card.timeline_generation``): a wait
    sleeps until then without polling while the generation stays; the state (NEW until
    completion, COMPLETED, ABORT) and the next modelled event of its CU, when C polls again;
    the commands of closed runs, in batches of 64 (and at xrtDeviceClose).

Errors print what XRT prints (``[XRT] ERROR: ...``) and come back as ``-errno``. Every callback's
CPU is charged to the stand-in: the C side meters it (CLOCK_THREAD_CPUTIME_ID around the call,
the ctypes trampoline and taking the GIL included; ``fpgasim_meter``, per callback:
:func:`metered_callbacks`), and :func:`fpga_sim.card.stand_in_cpu_s` adds it.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import itertools
import math
import sys
import threading
import time
import traceback

from . import card as _card
from .xclbin import Xclbin, XclbinError, read_xclbin

MAX_ARGS = 64
MAX_CUS = 64
ARG_INT, ARG_FLOAT, ARG_DOUBLE, ARG_GLOBAL = 0, 1, 2, 3
XRT_BO_FLAGS_DEV_ONLY = 1 << 28
#: buffer kinds whose memory the driver provides elsewhere: not modelled (EINVAL, as pyxrt's stand-in)
UNMODELLED_FLAGS = (1 << 27) | (1 << 29) | (1 << 30)  # SVM, HOST_ONLY, P2P
STATE_NEW, STATE_COMPLETED, STATE_ABORT = 1, 4, 6
LATE_POLL_S = 0.001


class KernelInfo(ctypes.Structure):
    _fields_ = [
        ("nargs", ctypes.c_int32),
        ("ncus", ctypes.c_int32),
        ("payload_size", ctypes.c_uint32),
        ("reserved", ctypes.c_int32),
        ("offset", ctypes.c_int32 * MAX_ARGS),
        ("size", ctypes.c_int32 * MAX_ARGS),
        ("kind", ctypes.c_int32 * MAX_ARGS),
        ("group", ctypes.c_int32 * MAX_ARGS),
        ("conn", (ctypes.c_uint64 * MAX_ARGS) * MAX_CUS),
    ]


_i64, _i32, _u64, _u32 = ctypes.c_int64, ctypes.c_int32, ctypes.c_uint64, ctypes.c_uint32
_p64, _pdouble, _pchar = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_double), ctypes.c_void_p
_SIGNATURES = {
    "dev_open": (_i64, _i32, ctypes.c_char_p),
    "dev_close": (_i32, _i64),
    "dev_load": (_i32, _i64, ctypes.c_char_p),
    "dev_uuid": (_i32, _i64, _pchar),
    "bo_alloc": (_i64, _i64, _u64, _u64, _u32, _u64, _p64),
    "bo_free": (_i32, _i64),
    "sync_begin": (_i64, _i64, _i32, _u64, _u64, _pdouble),
    "sync_finish": (_i32, _i64),
    "kernel_open": (_i64, _i64, _pchar, ctypes.c_char_p, _i32, ctypes.POINTER(KernelInfo)),
    "kernel_group": (_i32, _i64, _i32),
    "kernel_close": (_i32, _i64),
    "bo_clone": (_i64, _i64, _i32, _i64, _p64),
    "run_start": (_i64, _i64, _i64, _pchar, _u32, _u64, _pdouble, _p64),
    "run_poll": (_i32, _i64, _pdouble),
    "run_forget": (_i32, _p64, _i32),
}
_TYPES = {name: ctypes.CFUNCTYPE(*sig) for name, sig in _SIGNATURES.items()}


class Table(ctypes.Structure):
    """``struct bridge`` of the C source, in its order."""

    _fields_ = [*((name, _TYPES[name]) for name in _SIGNATURES), ("generation", ctypes.c_void_p)]


class _Refused(Exception):
    def __init__(self, err: int, what: str):
        super().__init__(f"{what}: {errno.errorcode.get(err, err)}")
        self.errno = err
        self.what = what


# ---------------------------------------------------------------------------------- records
class _Device:
    def __init__(self, card: _card.SimCard):
        self.card = card
        self.handle = card.open()


class _Bo:
    def __init__(self, device: _Device, buf: _card.SimBuffer, group: int, pin):
        self.device = device
        self.buf = buf
        self.group = group
        self.pin = pin  # the ctypes view that keeps the host copy's address valid for C


class _Kernel:
    def __init__(self, device: _Device, xb: Xclbin, name: str, cus: list[int], ctx: _card.Context):
        self.device = device
        self.xclbin = xb
        self.name = name
        self.cus = cus
        self.ctx = ctx


_LOCK = threading.Lock()
_IDS = itertools.count(1)
_DEVICES: dict[int, _Device] = {}
_BOS: dict[int, _Bo] = {}
_KERNELS: dict[int, _Kernel] = {}
_TRANSFERS: dict[int, tuple[_card.SimCard, _card.Transfer]] = {}
_COMMANDS: dict[int, _card.Command] = {}
#: xclbins loaded through this library, per card: XRT keeps them in its one core device per card
_REGISTERED: dict[int, dict[str, Xclbin]] = {}


def _new_id() -> int:
    with _LOCK:
        return next(_IDS)


def _get(table: dict, key: int, what: str):
    found = table.get(key)
    if found is None:
        raise _Refused(errno.EINVAL, what)
    return found


def forget() -> None:
    """Drop every record (tests, with fpga_sim.card.forget_cards): handles the C library still
    holds fail with EINVAL from now on."""
    with _LOCK:
        for table in (_DEVICES, _BOS, _KERNELS, _TRANSFERS, _COMMANDS, _REGISTERED):
            table.clear()
    _card._changed()  # a wake time run_start gave is for a command the bridge no longer knows


# ---------------------------------------------------------------------------------- callbacks
def _dev_open(index: int, bdf: bytes | None) -> int:
    if bdf is not None:
        text = bdf.decode(errors="replace")
        found = _card.index_of_bdf(text)
        if found is None:
            raise _Refused(errno.EINVAL, f"No such device '{text}'")
        index = found
    if not 0 <= index < _card.card_count():
        raise _Refused(errno.ENODEV, f"No such device with index '{index}'")
    device = _Device(_card.get_card(index))
    key = _new_id()
    _DEVICES[key] = device
    return key


def _dev_close(dev: int) -> int:
    device = _DEVICES.pop(dev, None)
    if device is None:
        raise _Refused(errno.EINVAL, "No device handle")
    # as the process's exit would: this device's CU contexts close (the driver's teardown), then
    # the card handle, which frees its buffers (and closes every context if it was the last)
    for k in [k for k in _KERNELS.values() if k.device is device]:
        k.ctx.close(hold_gil=False)
    device.handle.close()
    return 0


def _read(path: str) -> Xclbin:
    try:
        return read_xclbin(path)
    except (XclbinError, OSError) as e:
        raise _Refused(errno.EINVAL, str(e)) from None


def _dev_load(dev: int, path: bytes) -> int:
    device = _get(_DEVICES, dev, "No device handle")
    xb = _read(path.decode())
    device.card.load(xb)
    _REGISTERED.setdefault(device.card.index, {})[xb.uuid] = xb
    return 0


def _dev_uuid(dev: int, out: int) -> int:
    device = _get(_DEVICES, dev, "No device handle")
    loaded = device.card.loaded_uuid() or "0" * 32
    ctypes.memmove(out, bytes.fromhex(loaded), 16)
    return 0


def _pin(host) -> tuple[object, int]:
    """A ctypes view of a buffer's host copy (bytearray or mmap) and its address."""
    view = (ctypes.c_char * len(host)).from_buffer(host)
    return view, ctypes.addressof(view)


def _bo_alloc(dev: int, size: int, flags: int, grp: int, userptr: int, out) -> int:
    device = _get(_DEVICES, dev, "No device handle")
    group = grp & 0xFFFF
    if userptr:
        # xrt::bo's userptr constructor checks the alignment first ("userptr is not aligned"),
        # then xocl's ioctl (SimCard.alloc_userptr) its own rules
        if userptr % _card.BO_ALIGN:
            raise _Refused(errno.EINVAL, "userptr is not aligned")
        buf = device.card.alloc_userptr(device.handle, userptr, size, group)
        pin, host = None, userptr
    else:
        if flags & UNMODELLED_FLAGS:
            raise _card.CardError(errno.EINVAL, "failed to allocate bo")
        buf = device.card.alloc(device.handle, size, group, host=not flags & XRT_BO_FLAGS_DEV_ONLY)
        pin, host = _pin(buf.host) if buf.host is not None else (None, 0)
    key = _new_id()
    _BOS[key] = _Bo(device, buf, group, pin)
    out[0], out[1] = host, buf.address
    return key


def _bo_free(bo: int) -> int:
    rec = _BOS.pop(bo, None)
    if rec is None:
        raise _Refused(errno.EINVAL, "No buffer handle")
    rec.pin = None
    card = rec.device.card
    _card._run_or_defer(card._free_locked, rec.buf)  # SimCard.free, metered here by the C side
    return 0


def _sync_begin(bo: int, direction: int, size: int, offset: int, end) -> int:
    rec = _get(_BOS, bo, "No buffer handle")
    if direction in (2, 3):
        return 0  # AIE GMIO directions: nothing on an Alveo PL design
    if direction not in (0, 1):
        raise _Refused(errno.EINVAL, "invalid sync direction")
    if offset + size > rec.buf.size:
        return 0  # xclSyncBO returns -EINVAL, which XRT 2.17's buffer_object::sync ignores
    card = rec.device.card
    xfer = card.dma_begin(rec.buf, direction == 0, size, offset, hold_gil=False)
    if xfer is None:
        return 0
    end[0] = xfer.end
    if card.dma_ready(xfer):
        # the card side did the copy at once (inline, timing): counted now, and the C side only
        # sleeps until the modelled end (one callback per sync instead of two)
        card.dma_finish(xfer, hold_gil=False)
        return 0
    key = _new_id()
    _TRANSFERS[key] = (card, xfer)
    return key


def _sync_finish(key: int) -> int:
    card, xfer = _get(_TRANSFERS, key, "no such transfer")
    if not card.dma_ready(xfer):
        return 1
    del _TRANSFERS[key]
    card.dma_finish(xfer, hold_gil=False)
    return 0


def _arg_kind(arg) -> int:
    if arg.address_qualifier == 1:
        return ARG_GLOBAL
    text = arg.type.strip()
    if text == "float":
        return ARG_FLOAT
    if text == "double":
        return ARG_DOUBLE
    return ARG_INT


def _kernel_open(dev: int, uuid: int, name: bytes, exclusive: int, info) -> int:
    device = _get(_DEVICES, dev, "No device handle")
    uid = ctypes.string_at(uuid, 16).hex()
    text = name.decode(errors="replace")
    kname, _, inst = text.partition(":")
    xb = _REGISTERED.get(device.card.index, {}).get(uid)
    if xb is None or kname not in xb.kernels:
        raise _Refused(errno.EINVAL, f"No such kernel '{kname}'")
    # the implicit hw_context (Runtime.hw_context, default true): loads a registered xclbin that is
    # not on the card, with the load rules; a no-op when it is
    try:
        device.card.load(xb)
    except _card.CardError as e:
        for line in e.logs:
            print(f"[XRT] ERROR: {line}", file=sys.stderr)
        raise _Refused(e.errno, "Failed to create hardware context") from None
    meta = xb.kernels[kname]
    cus = [cu for cu in xb.cus if cu.kernel == kname]
    if inst:
        wanted = {x.strip() for x in inst.strip("{}").split(",") if x.strip()}
        cus = [cu for cu in cus if cu.name in wanted]
    if not cus:
        raise _Refused(errno.EINVAL, f"No compute units matching '{text}'")
    if len(meta.args) > MAX_ARGS or len(cus) > MAX_CUS:
        raise _Refused(errno.EINVAL, f"simulated libxrt_coreutil: kernel {kname} has more than {MAX_ARGS} "
                                     f"arguments or {MAX_CUS} compute units")  # fmt: skip
    indices = [cu.index for cu in cus]
    try:
        ctx = device.card.open_context(xb.uuid, indices, bool(exclusive))
    except _card.CardError as e:
        raise _Refused(e.errno, f"failed to open cu context: {e.what}") from None
    info = info.contents
    info.nargs, info.ncus = len(meta.args), len(cus)
    info.payload_size = max([0x10] + [a.offset + a.size for a in meta.args])
    for i, arg in enumerate(meta.args):
        info.offset[i], info.size[i], info.kind[i] = arg.offset, arg.size, _arg_kind(arg)
    # xrtKernelArgGroupId's answers: fixed by the xclbin, so the C side answers them itself
    # (-1: out of range, the bridge answers with XRT's error)
    for i in range(MAX_ARGS):
        info.group[i] = _group_of(xb, indices[0], i)
    for c, cu in enumerate(cus):
        for i in range(len(meta.args)):
            info.conn[c][i] = sum(1 << g for g in cu.arg_mems.get(i, ()) if g < 64)
    key = _new_id()
    _KERNELS[key] = _Kernel(device, xb, kname, indices, ctx)
    return key


def _group_of(xb: Xclbin, cu: int, argno: int) -> int:
    """As pyxrt's kernel.group_id: the largest group connected to ``argno`` on CU ``cu``; -1
    out of range."""
    conns = {arg: set(m) for arg, m in xb.cus[cu].arg_mems.items()}
    if argno < 0 or argno >= max(conns, default=-1) + 1:
        return -1
    return max(conns[argno]) & 0xFFFF if conns.get(argno) else 0xFFFF


def _kernel_group(kernel: int, argno: int) -> int:
    """The group of ``argno`` on the kernel's first CU (the C side asks only for arguments out of
    range, or past MAX_ARGS)."""
    k = _get(_KERNELS, kernel, "No kernel handle")
    group = _group_of(k.xclbin, k.cus[0], argno)
    if group < 0:
        raise _Refused(errno.EINVAL, f"vector::_M_range_check: __n (which is {argno % 2**64})")
    return group


def _kernel_close(kernel: int) -> int:
    k = _KERNELS.pop(kernel, None)
    if k is None:
        raise _Refused(errno.EINVAL, "No kernel handle")
    k.ctx.close(hold_gil=False)  # the driver's teardown (its 500 ms stall sleeps without the GIL)
    return 0


def _bo_clone(kernel: int, argno: int, bo: int, out) -> int:
    k = _get(_KERNELS, kernel, "No kernel handle")
    rec = _get(_BOS, bo, "No buffer handle")
    conns = k.xclbin.cus[k.cus[0]].arg_mems.get(argno, [0])
    target = sorted(conns)[0] if conns else 0
    print(
        f"[XRT] WARNING: Kernel {k.name} has no compute units with connectivity required for global argument at "
        f"index {argno}. The argument is allocated in bank {rec.group}, the compute unit is connected to bank "
        f"{target}. Allocating local copy of argument buffer in connected bank.",
        file=sys.stderr,
    )
    card = rec.device.card
    buf = card.alloc(rec.device.handle, rec.buf.size, target)
    card.copy_device(rec.buf, buf)
    key = _new_id()
    _BOS[key] = _Bo(rec.device, buf, target, None)
    out[0], out[1] = target, buf.address
    return key


def _run_start(kernel: int, previous: int, payload: int, size: int, mask: int, wake, generation) -> int:
    k = _get(_KERNELS, kernel, "No kernel handle")
    card = k.device.card
    before = _COMMANDS.get(previous) if previous else None
    if before is not None and not card.command_done(before):
        raise _Refused(errno.EINVAL, "bad command state, can't launch")
    cus = k.cus if mask == (1 << len(k.cus)) - 1 else [cu for i, cu in enumerate(k.cus) if mask >> i & 1]
    with _card._LOCK:
        cmd = card.submit(cus, ctypes.string_at(payload, size))
        # what a poll right now would answer: the C side's wait sleeps until then without asking,
        # while the timeline stays at this generation
        if not cmd.finished:
            wake[0] = _wake(cmd, time.monotonic())
            generation[0] = _card.timeline_generation()
    _COMMANDS.pop(previous, None)
    key = _new_id()
    _COMMANDS[key] = cmd
    return key


def _wake(cmd: _card.Command, now: float) -> float:
    """When the C side polls ``cmd`` (not finished) again: its CU's next modelled event (under _LOCK)."""
    target = _card._next_wake(cmd.cu)
    if _card.any_held():  # a rendezvous holds commands: another thread may meet it (as SimCard.wait_any)
        target = min(target, now + 0.002)
    return target if math.isfinite(target) else now + 1.0


def _run_poll(key: int, wake) -> int:
    cmd = _get(_COMMANDS, key, "No run handle")
    card = cmd.card
    now = time.monotonic()
    # a card process that has not computed a call due now: ask again shortly (never block here)
    if cmd.dev_pending and cmd.dev_key and cmd.end_t <= now and not card.dev.ready(cmd.dev_key):
        wake[0] = now + LATE_POLL_S
        return STATE_NEW
    with _card._LOCK:
        if card.command_done(cmd):
            return STATE_ABORT if cmd.state == "aborted" else STATE_COMPLETED
        wake[0] = _wake(cmd, now)
    return STATE_NEW


def _run_forget(keys, n: int) -> int:
    """Commands of closed runs (the C side hands them over in batches): their records go."""
    for i in range(n):
        _COMMANDS.pop(keys[i], None)
    return 0


def _guarded(fn):
    """A callback: errors as -errno (with XRT's message), never an exception into C; waits inside
    the card model release the GIL (C holds none). Its CPU is metered by the C side, around the
    whole callback (fpgasim_meter): ``metered`` functions it calls do not meter again."""
    caller, meter = _card._CALLER, _card._METER

    @functools.wraps(fn)
    def call(*args):
        # _card._holding_gil(False), and the metering depth of _card.metered, set inline
        hold, depth = getattr(caller, "hold_gil", True), getattr(meter, "depth", 0)
        caller.hold_gil, meter.depth = False, 1
        try:
            return fn(*args)
        except _card.CardError as e:
            for line in e.logs:
                print(f"[XRT] ERROR: {line}", file=sys.stderr)
            print(f"[XRT] ERROR: {e}", file=sys.stderr)
            return -e.errno
        except _Refused as e:
            print(f"[XRT] ERROR: {e.what}: {errno.errorcode.get(e.errno, e.errno)}", file=sys.stderr)
            return -e.errno
        except Exception:
            print("[XRT] ERROR: simulated libxrt_coreutil: the card model failed:", file=sys.stderr)
            traceback.print_exc()
            return -errno.EIO
        finally:
            caller.hold_gil, meter.depth = hold, depth

    return call


_FUNCTIONS = {
    "dev_open": _dev_open,
    "dev_close": _dev_close,
    "dev_load": _dev_load,
    "dev_uuid": _dev_uuid,
    "bo_alloc": _bo_alloc,
    "bo_free": _bo_free,
    "sync_begin": _sync_begin,
    "sync_finish": _sync_finish,
    "kernel_open": _kernel_open,
    "kernel_group": _kernel_group,
    "kernel_close": _kernel_close,
    "bo_clone": _bo_clone,
    "run_start": _run_start,
    "run_poll": _run_poll,
    "run_forget": _run_forget,
}
#: the callbacks, kept alive for the life of the process (C holds their addresses)
CALLBACKS = Table(
    *(_TYPES[name](_guarded(_FUNCTIONS[name])) for name in _SIGNATURES),
    _card.timeline_generation_address(),
)
_ATTACHED: dict[str, ctypes.CDLL] = {}


def attach(path: str) -> None:
    """Called by the C library (under the GIL) with its own path: register the callbacks there."""
    if path in _ATTACHED:
        return
    # the same, already loaded library (dlopen counts a reference); PyDLL keeps the GIL meanwhile
    lib = ctypes.PyDLL(path)
    lib.fpgasim_register.argtypes = [ctypes.POINTER(Table), ctypes.c_size_t]
    lib.fpgasim_register.restype = ctypes.c_int
    rc = lib.fpgasim_register(ctypes.byref(CALLBACKS), ctypes.sizeof(Table))
    if rc != 0:
        raise RuntimeError(f"{path}: fpgasim_register refused the callback table ({rc})")
    _ATTACHED[path] = lib
    lib.fpgasim_blocking_counts.argtypes = [ctypes.POINTER(ctypes.c_uint64)]
    lib.fpgasim_blocking_counts.restype = None
    _card.BLOCKING_COUNTS = functools.partial(_blocking_counts, lib)
    lib.fpgasim_meter.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_int]
    lib.fpgasim_meter.restype = ctypes.c_int
    _card.add_stand_in_meter(lambda: sum(ns for ns, _calls in _metered(lib).values()) * 1e-9)


def _metered(lib) -> dict[str, tuple[int, int]]:
    """{callback: (CPU ns spent in it, calls)} so far, as the library metered them."""
    out = (ctypes.c_uint64 * (2 * len(_SIGNATURES)))()
    lib.fpgasim_meter(out, len(_SIGNATURES))
    return {name: (out[2 * i], out[2 * i + 1]) for i, name in enumerate(_SIGNATURES)}


def metered_callbacks() -> dict[str, tuple[int, int]]:
    """{callback: (CPU ns, calls)} so far, every loaded copy of the library together (what the
    card model's own CPU is made of, and how many callbacks a call of the API costs)."""
    total: dict[str, tuple[int, int]] = {}
    for lib in _ATTACHED.values():
        for name, (ns, calls) in _metered(lib).items():
            before = total.get(name, (0, 0))
            total[name] = (before[0] + ns, before[1] + calls)
    return total


def _blocking_counts(lib) -> dict:
    """The library's calls that can block so far (syncs, waits), and those entered holding the GIL."""
    out = (ctypes.c_uint64 * 2)()
    lib.fpgasim_blocking_counts(out)
    return {"blocking_calls": int(out[0]), "blocking_calls_holding_gil": int(out[1])}
