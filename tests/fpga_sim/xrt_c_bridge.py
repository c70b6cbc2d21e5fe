"""The cold path of the simulated ``libxrt_coreutil.so.2`` (``fpga_sim/xrt_c``): the card rules
that are not per event.

The C library (``xrt_c/xrt_coreutil_double.c``) imports this module the first time one of its
XRT C API functions is called, under the GIL, and calls :func:`attach` with its own path; attach
registers :data:`CALLBACKS` (a :class:`Table` of ctypes callbacks, and the card core's function
table) into it with ``fpgasim_register``. Syncs, starts, waits and buffers (over user memory too)
never come here: the C library calls the card core (``card_core.c``) for them, the same copy
:mod:`fpga_sim.card` drives. Each callback does SimCard's rule checks and returns at once (ids
> 0, 0, or ``-errno``):

``dev_open(index, bdf, out[2]) -> dev``, ``dev_close(dev)``, ``dev_load(dev, path)``, ``dev_uuid(dev, out16)``
    ``xrtDeviceOpen``/``OpenByBDF`` (``index`` -1 with a BDF; ``out``: the card and the card
    handle the core files its buffers under), ``xrtDeviceClose`` (the process's exit for this
    card: contexts closed, buffers freed, when it was the last open), loads with SimCard.load's
    rules (also what a kernel's implicit hw_context does), the loaded uuid.
``kernel_open(dev, uuid16, name, exclusive, KernelInfo*) -> kernel``, ``kernel_group(kernel, argno)``
(only out of range: KernelInfo carries each argument's group, which C answers itself),
``kernel_close(kernel)``, ``bo_clone(kernel, argno, bo, size, out[2]) -> bo``
    ``"kernel"`` or ``"kernel:{cu,...}"``: an implicit hw_context (the load rules) and CU contexts
    (EBUSY for another's exclusive use); KernelInfo carries each argument's register offset, size
    and how xrtRunSetArg reads it (``ARG_*``), the memory groups each CU's arguments are
    connected to and each CU's index in the core, so setting arguments and starting stay in C.
    ``bo_clone``: XRT's copy of a buffer into a connected bank when no CU of the run can reach it.

Errors print what XRT prints (``[XRT] ERROR: ...``) and come back as ``-errno``. Every callback's
CPU is the card model's (the C side meters it in the core, and per callback: ``fpgasim_meter``,
:func:`metered_callbacks`).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import itertools
import sys
import threading
import traceback

from . import card as _card
from . import card_core as _card_core
from .xclbin import Xclbin, XclbinError, read_xclbin

MAX_ARGS = 64
MAX_CUS = 64
ARG_INT, ARG_FLOAT, ARG_DOUBLE, ARG_GLOBAL = 0, 1, 2, 3


class KernelInfo(ctypes.Structure):
    _fields_ = [
        ("nargs", ctypes.c_int32),
        ("ncus", ctypes.c_int32),
        ("payload_size", ctypes.c_uint32),
        ("card", ctypes.c_int32),
        ("offset", ctypes.c_int32 * MAX_ARGS),
        ("size", ctypes.c_int32 * MAX_ARGS),
        ("kind", ctypes.c_int32 * MAX_ARGS),
        ("group", ctypes.c_int32 * MAX_ARGS),
        ("cu", ctypes.c_int32 * MAX_CUS),
        ("conn", (ctypes.c_uint64 * MAX_ARGS) * MAX_CUS),
    ]


_i64, _i32, _u64 = ctypes.c_int64, ctypes.c_int32, ctypes.c_uint64
_p64, _pchar = ctypes.POINTER(ctypes.c_uint64), ctypes.c_void_p
_SIGNATURES = {
    "dev_open": (_i64, _i32, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int64)),
    "dev_close": (_i32, _i64),
    "dev_load": (_i32, _i64, ctypes.c_char_p),
    "dev_uuid": (_i32, _i64, _pchar),
    "kernel_open": (_i64, _i64, _pchar, ctypes.c_char_p, _i32, ctypes.POINTER(KernelInfo)),
    "kernel_group": (_i32, _i64, _i32),
    "kernel_close": (_i32, _i64),
    "bo_clone": (_i64, _i64, _i32, _u64, _u64, _p64),
}
_TYPES = {name: ctypes.CFUNCTYPE(*sig) for name, sig in _SIGNATURES.items()}


class Table(ctypes.Structure):
    """``struct bridge`` of the C source, in its order."""

    _fields_ = [*((name, _TYPES[name]) for name in _SIGNATURES), ("core", ctypes.c_void_p)]


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
_KERNELS: dict[int, _Kernel] = {}
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
        for table in (_DEVICES, _KERNELS, _REGISTERED):
            table.clear()


# ---------------------------------------------------------------------------------- callbacks
def _dev_open(index: int, bdf: bytes | None, out) -> int:
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
    out[0], out[1] = device.card.index, device.handle.id
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
    info.nargs, info.ncus, info.card = len(meta.args), len(cus), device.card.index
    info.payload_size = max([0x10] + [a.offset + a.size for a in meta.args])
    for i, arg in enumerate(meta.args):
        info.offset[i], info.size[i], info.kind[i] = arg.offset, arg.size, _arg_kind(arg)
    # xrtKernelArgGroupId's answers: fixed by the xclbin, so the C side answers them itself
    # (-1: out of range, the bridge answers with XRT's error)
    for i in range(MAX_ARGS):
        info.group[i] = _group_of(xb, indices[0], i)
    for c, cu in enumerate(cus):
        info.cu[c] = cu.index
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


def _bo_clone(kernel: int, argno: int, bo: int, size: int, out) -> int:
    k = _get(_KERNELS, kernel, "No kernel handle")
    conns = k.xclbin.cus[k.cus[0]].arg_mems.get(argno, [0])
    target = sorted(conns)[0] if conns else 0
    card = k.device.card
    group = next((b.bank for b in card.buffers if b.bid == bo), -1)
    print(
        f"[XRT] WARNING: Kernel {k.name} has no compute units with connectivity required for global argument at "
        f"index {argno}. The argument is allocated in bank {group}, the compute unit is connected to bank "
        f"{target}. Allocating local copy of argument buffer in connected bank.",
        file=sys.stderr,
    )
    buf = card.alloc(k.device.handle, size, target, host=False)
    card._core.check(card._core.c.fpgasim_bo_copy(bo, 0, buf.bid, 0, size), _card.CardError)
    out[0], out[1] = target, buf.address
    return buf.bid  # the C library's run owns it now (it frees it in the core)


def _guarded(fn):
    """A callback: errors as -errno (with XRT's message), never an exception into C. Its CPU is
    metered by the C side, around the whole callback."""

    @functools.wraps(fn)
    def call(*args):
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

    return call


_FUNCTIONS = {
    "dev_open": _dev_open,
    "dev_close": _dev_close,
    "dev_load": _dev_load,
    "dev_uuid": _dev_uuid,
    "kernel_open": _kernel_open,
    "kernel_group": _kernel_group,
    "kernel_close": _kernel_close,
    "bo_clone": _bo_clone,
}
#: the callbacks, kept alive for the life of the process (C holds their addresses)
CALLBACKS = Table(*(_TYPES[name](_guarded(_FUNCTIONS[name])) for name in _SIGNATURES))
_ATTACHED: dict[str, ctypes.CDLL] = {}


def attach(path: str) -> None:
    """Called by the C library (under the GIL) with its own path: register the callbacks there."""
    if path in _ATTACHED:
        return
    CALLBACKS.core = _card_core.core().py.fpgasim_core_table()
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
