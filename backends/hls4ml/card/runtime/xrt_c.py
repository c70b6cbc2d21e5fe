"""Cards through XRT's C API (``libxrt_coreutil.so.2``), called with ``ctypes``: no GIL held.

Why not ``pyxrt`` on the hot path: its binding (``src/python/pybind11/src/pyxrt.cpp``, every
tag from 2.17 to 2.25) holds the GIL in ``bo.sync``, ``bo.read``/``write``, ``run.start``,
``run.wait`` and ``run.state``, so while one instance's 3 MB DMA runs (0.25 ms at 12 GB/s) no
other thread of the process runs Python: one engine can never overlap one compute unit's
transfer with the work of another. ``ctypes.CDLL`` releases the GIL around every foreign call
(``PyDLL`` would not), and the C API needs nothing compiled at install time.

The surface used, exported by ``libxrt_coreutil.so.2`` with the same prototypes from XRT 2.8 to
master (headers ``xrt/xrt_device.h``, ``xrt_bo.h``, ``xrt_kernel.h``), none deprecated::

    xrtDeviceOpen(unsigned) / xrtDeviceClose / xrtDeviceLoadXclbinFile / xrtDeviceGetXclbinUUID
    xrtBOAlloc(dev, size, flags u64, group u32) / xrtBOAllocUserPtr(dev, ptr, size, flags, group)
    xrtBOFree / xrtBOMap / xrtBOSync(bo, dir, size, offset) / xrtBOSize / xrtBOAddress
    xrtPLKernelOpen(dev, uuid[16], "kernel:{cu}") / xrtKernelArgGroupId / xrtKernelClose
    xrtRunOpen / xrtRunSetArg(run, index, ...) / xrtRunStart / xrtRunWaitFor / xrtRunState / xrtRunClose

Rules this module keeps:

* every handle is ``c_void_p`` (``restype`` set: a default ``int`` restype truncates pointers),
  every call has ``argtypes``;
* ``xrtRunSetArg`` reads its vararg by the kernel argument's type in the xclbin: a buffer as
  its handle, a ``float`` scalar promoted to ``double``, other scalars by size; a bare Python int
  through ctypes is a 32-bit C int, so each scalar is passed as a typed ctypes value;
  ``xrtRunSetArgV`` (raw bytes) is in no public header and is not used;
* waits block in C: ``xrtRunWaitFor`` in slices of at most :data:`WAIT_SLICE_MS` until the
  caller's deadline (0 ms would mean forever; TIMEOUT (8) means the slice ran out);
* errors come back as NULL handles, non-zero ints, ABORT from waits, ``SIZE_MAX``/``UINT64_MAX``;
  ``errno`` is set only for XRT's own errors (sometimes negated; its ``std::exception`` paths
  return -1 or ABORT and leave errno as it was) and XRT prints its message to its log, so an
  error here names the call and its code, and errno only as that call left it: errno is
  cleared before every call whose failure is reported (ctypes keeps one errno per thread for
  every library loaded with ``use_errno``, so a value left by any earlier call would otherwise
  be reported as this one's);
* ``xrtPLKernelOpen`` creates the hardware context itself; ``xrtDeviceLoadXclbinFile`` is the
  user-partition loader on 2RP shells, and loads an F1 ``.awsxclbin`` through the same call;
* buffers over the caller's memory (``xrtBOAllocUserPtr``) take a memory group, so unlike
  ``pyxrt.ext.bo`` (group 0 only) every bank can have them; xocl still wants page-aligned
  addresses and writable pages.

The C API has no device queries (BDF, shell, sensors). Those are cold-path reads: they come
from ``pyxrt``'s ``get_info`` when the binding imports (an XRT host has both), else they stay
empty and doctor says why. The card is reset by ``xbutil reset`` as for ``pyxrt``
(:meth:`XrtCDevice.close` closes every handle first: xocl refuses a reset while any is open).
"""

from __future__ import annotations

import ctypes
import errno as errno_module
import json
import logging
import os
import threading
import time
from collections.abc import Callable

import numpy as np

from ....base import BackendError
from ..axlf import ComputeUnit, Kernel, KernelArg, Xclbin
from .api import (
    CardApi,
    CardDevice,
    ComputeUnitHandle,
    DeviceBuffer,
    DeviceError,
    RunHandle,
    RunState,
    SensorReading,
    shell_mismatch,
    unopened_device,
)

log = logging.getLogger("fpgaserve.hls4ml.card.xrt_c")

LIBRARY = "libxrt_coreutil.so.2"
MAX_PROBE = 64  # without pyxrt's count: open indices until one fails
#: the longest single blocking wait; a deadline further away is waited for in several slices
WAIT_SLICE_MS = 1000

# ert_cmd_state (XRT's ert.h)
ERT_NEW, ERT_QUEUED, ERT_RUNNING, ERT_COMPLETED = 1, 2, 3, 4
ERT_ERROR, ERT_ABORT, ERT_SUBMITTED, ERT_TIMEOUT = 5, 6, 7, 8
ERT_FAILED = frozenset({ERT_ERROR, ERT_ABORT, 9, 10, 11})  # + NORESPONSE, SKERROR, SKCRASHED
STATE_NAMES = {
    1: "NEW",
    2: "QUEUED",
    3: "RUNNING",
    4: "COMPLETED",
    5: "ERROR",
    6: "ABORT",
    7: "SUBMITTED",
    8: "TIMEOUT",
    9: "NORESPONSE",
    10: "SKERROR",
    11: "SKCRASHED",
}
SYNC_TO_DEVICE, SYNC_FROM_DEVICE = 0, 1
BO_FLAGS_NORMAL = 0
SIZE_MAX = 2**64 - 1

_vp = ctypes.c_void_p
_PROTOTYPES: dict[str, tuple] = {
    # name: (restype, argtypes)
    "xrtDeviceOpen": (_vp, [ctypes.c_uint]),
    "xrtDeviceOpenByBDF": (_vp, [ctypes.c_char_p]),
    "xrtDeviceClose": (ctypes.c_int, [_vp]),
    "xrtDeviceLoadXclbinFile": (ctypes.c_int, [_vp, ctypes.c_char_p]),
    "xrtDeviceGetXclbinUUID": (ctypes.c_int, [_vp, ctypes.c_char_p]),
    "xrtBOAlloc": (_vp, [_vp, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_uint32]),
    "xrtBOAllocUserPtr": (_vp, [_vp, _vp, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_uint32]),
    "xrtBOFree": (ctypes.c_int, [_vp]),
    "xrtBOMap": (_vp, [_vp]),
    "xrtBOSync": (ctypes.c_int, [_vp, ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t]),
    "xrtBOSize": (ctypes.c_size_t, [_vp]),
    "xrtBOAddress": (ctypes.c_uint64, [_vp]),
    "xrtPLKernelOpen": (_vp, [_vp, ctypes.c_char_p, ctypes.c_char_p]),
    "xrtKernelArgGroupId": (ctypes.c_int, [_vp, ctypes.c_int]),
    "xrtKernelClose": (ctypes.c_int, [_vp]),
    "xrtRunOpen": (_vp, [_vp]),
    # variadic: only the fixed arguments are declared; the value is passed as a typed ctypes object
    "xrtRunSetArg": (ctypes.c_int, [_vp, ctypes.c_int]),
    "xrtRunStart": (ctypes.c_int, [_vp]),
    "xrtRunWaitFor": (ctypes.c_int, [_vp, ctypes.c_uint]),
    "xrtRunState": (ctypes.c_int, [_vp]),
    "xrtRunClose": (ctypes.c_int, [_vp]),
}


def library_path() -> str:
    """``$XILINX_XRT/lib/libxrt_coreutil.so.2`` when it exists, else the bare name (the loader's
    path: ``LD_LIBRARY_PATH``, ``ld.so.cache``)."""
    root = os.environ.get("XILINX_XRT")
    if root:
        candidate = os.path.join(root, "lib", LIBRARY)
        if os.path.exists(candidate):
            return candidate
    return LIBRARY


def load_library(path: str | None = None) -> ctypes.CDLL:
    """The C API with every prototype declared; BackendError naming what is missing."""
    path = path or library_path()
    try:
        lib = ctypes.CDLL(path, use_errno=True)
    except OSError as e:
        raise BackendError(
            f"card-api xrt-c needs XRT's {LIBRARY}, which cannot be loaded ({e}): install XRT and source "
            "/opt/xilinx/xrt/setup.sh (it sets XILINX_XRT)"
        ) from None
    missing = []
    for name, (restype, argtypes) in _PROTOTYPES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            missing.append(name)
            continue
        fn.restype = restype
        fn.argtypes = argtypes
    if missing:
        raise BackendError(f"{path} does not export {', '.join(missing)}: not XRT's {LIBRARY} (XRT >= 2.8 has them)")
    return lib


#: calls that never block in XRT (xrtRunSetArg writes the argument into the run's command
#: packet; xrtRunState reads the command's state word; xrtRunStart hands the command to ERT's
#: queue, one ioctl that returns at once: pyxrt's binding holds the GIL in it too): called
#: holding the GIL, through the same library loaded as ``ctypes.PyDLL``. Releasing and taking
#: back the GIL around each of them is what they cost an engine whose instance threads share
#: it: a waiting thread is woken for every release (a futex wake, on a VM an inter-processor
#: interrupt). Every call that can block (syncs, allocations that pin pages, waits, frees)
#: still releases it.
QUICK_CALLS = ("xrtRunSetArg", "xrtRunState", "xrtRunStart")


def load_quick_calls(path: str) -> dict[str, Callable]:
    """:data:`QUICK_CALLS` from ``path`` (already loaded: the same handle) as PyDLL functions."""
    lib = ctypes.PyDLL(path, use_errno=True)
    calls = {}
    for name in QUICK_CALLS:
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = _PROTOTYPES[name]
        calls[name] = fn
    return calls


def _errno_text(err: int) -> str:
    e = abs(err)
    name = errno_module.errorcode.get(e)
    return f"errno {err} ({name}: {os.strerror(e)})" if name else f"errno {err}"


def _code_text(code: int) -> str:
    """A return code; XRT's older releases return an ``xrt_core::error``'s negated errno."""
    name = errno_module.errorcode.get(-code) if code < -1 else None
    return f"returned {code}" + (f" ({name}: {os.strerror(-code)})" if name else "")


def _failure(call: str, code: int | None = None) -> str:
    """What a failed call said: its return code (when it returns one) and the errno it left
    (the caller cleared errno just before the call: see the module docstring)."""
    err = ctypes.get_errno()
    parts = [] if code is None else [_code_text(code)]
    parts.append(_errno_text(err) if err else "errno not set")
    return f"{call} failed: {', '.join(parts)} (XRT's log has its message)"


def _state_failure(call: str, state: int) -> str:
    """What a wait or a state query that reported a failed call said: the state, and the errno
    the call left (cleared before it)."""
    err = ctypes.get_errno()
    text = f"{call} returned {STATE_NAMES.get(state, 'state')} ({state})"
    return text + (f", {_errno_text(err)}" if err else "") + " (XRT's log has its message)"


class XrtCApi(CardApi):
    name = "xrt-c"

    def __init__(self, path: str | None = None):
        self.path = path or library_path()
        self.lib = load_library(self.path)
        self.quick = load_quick_calls(self.path)
        self.pyxrt = _import_pyxrt()
        # a simulated card says so through its pyxrt stand-in, as it does on the pyxrt path
        self.simulated = bool(getattr(self.pyxrt, "SIMULATED", False))
        self._devices: list[CardDevice] | None = None
        self._lock = threading.Lock()

    def devices(self, owned: Callable[[int], bool] | None = None) -> list[CardDevice]:
        with self._lock:
            if self._devices is None:
                found: list[CardDevice] = []
                for index in range(self._count()):
                    handle = self.lib.xrtDeviceOpen(index)
                    if not handle:
                        break
                    if owned is not None and not owned(index):  # another engine process's card
                        self.lib.xrtDeviceClose(handle)
                        found.append(unopened_device(index))
                        continue
                    found.append(XrtCDevice(self, index, handle))
                self._devices = found
            return list(self._devices)

    def _count(self) -> int:
        """How many cards to open: pyxrt's count where it has one (the C API has none, and
        XRT logs an error for each index it cannot open), else open indices until one fails."""
        enumerate_devices = getattr(self.pyxrt, "enumerate_devices", None)
        if enumerate_devices is not None:
            try:
                return int(enumerate_devices())
            except RuntimeError as e:
                log.debug("pyxrt.enumerate_devices failed: %s", e)
        return MAX_PROBE

    def version(self) -> str:
        root = os.environ.get("XILINX_XRT")
        if root:
            try:
                with open(os.path.join(root, "version.json")) as f:
                    return f"{json.load(f).get('BUILD_VERSION', 'unknown')} ({self.path})"
            except (OSError, ValueError):
                pass
        return f"unknown ({self.path})"


def _import_pyxrt():
    try:
        import pyxrt
    except Exception:  # absent, or its .so cannot load: the C API alone still drives the card
        return None
    return pyxrt


class XrtCDevice(CardDevice):
    def __init__(self, api: XrtCApi, index: int, handle: int | None = None):
        self._api = api
        self._lib = api.lib
        self._quick = api.quick
        self.index = index
        self.simulated = api.simulated
        self.ert = True
        self._dev: int | None = None
        self._uuid: bytes | None = None
        self._info_dev = None  # pyxrt's device, for identity and sensors only
        self._kernels: set[XrtCComputeUnit] = set()
        self._lock = threading.Lock()
        self.bdf = self.shell = self.interface_uuid = ""
        self.reopen(handle)

    # ------------------------------------------------------------------ identity
    def reopen(self, handle: int | None = None) -> None:
        if self._dev is None:
            self._dev = handle or self._lib.xrtDeviceOpen(self.index)
            if not self._dev:
                raise DeviceError(_failure(f"xrtDeviceOpen({self.index})"))
        self._uuid = None
        if self._api.pyxrt is not None and self._info_dev is None:
            try:
                self._info_dev = self._api.pyxrt.device(self.index)
            except RuntimeError as e:
                log.debug("card %d: pyxrt cannot open it for queries: %s", self.index, e)
        self.bdf = self._info("bdf")
        self.shell = self._info("name")
        from .xrt import hex_uuid

        self.interface_uuid = hex_uuid(self._info("interface_uuid"))

    def _info(self, key: str) -> str:
        from .xrt import device_info

        return device_info(self._api.pyxrt, self._info_dev, self.index, key)

    def loaded_uuid(self) -> str:
        if self._dev is None:
            return ""
        raw = ctypes.create_string_buffer(16)
        if self._lib.xrtDeviceGetXclbinUUID(self._dev, raw) != 0:
            return ""
        text = raw.raw.hex()
        return "" if not text.strip("0") else text

    # ------------------------------------------------------------------ xclbin
    def load(self, xclbin: Xclbin) -> bool:
        if self._dev is None:
            raise DeviceError(f"card {self.index} is closed")
        mismatch = shell_mismatch(xclbin, self)
        if mismatch is not None:
            raise DeviceError(mismatch)
        already = self.loaded_uuid() == xclbin.uuid
        ctypes.set_errno(0)
        code = self._lib.xrtDeviceLoadXclbinFile(self._dev, os.fsencode(xclbin.path))
        if code != 0:
            raise DeviceError(
                f"card {self.index} ({self.bdf or 'no BDF'}): loading {xclbin.path}: "
                + _failure("xrtDeviceLoadXclbinFile", code)
            )
        self._uuid = bytes.fromhex(xclbin.uuid)
        return not already

    def open_compute_unit(self, kernel: Kernel, cu: ComputeUnit) -> ComputeUnitHandle:
        if self._dev is None or self._uuid is None:
            raise DeviceError(f"card {self.index}: no xclbin loaded by this process")
        name = f"{kernel.name}:{{{cu.name}}}"
        ctypes.set_errno(0)
        handle = self._lib.xrtPLKernelOpen(self._dev, self._uuid, name.encode())
        if not handle:
            raise DeviceError(f"card {self.index}: cannot open compute unit {name}: " + _failure("xrtPLKernelOpen"))
        unit = XrtCComputeUnit(self, cu.name, kernel, handle)
        with self._lock:
            self._kernels.add(unit)
        return unit

    def _group(self, cu: ComputeUnitHandle, arg: KernelArg) -> int:
        """The memory group of ``arg`` of ``cu``: asked once per opened compute unit (a
        reload opens new ones), since every call that wraps request memory needs it."""
        assert isinstance(cu, XrtCComputeUnit) and arg.id is not None
        group = cu.groups.get(arg.id)
        if group is not None:
            return group
        ctypes.set_errno(0)
        group = self._lib.xrtKernelArgGroupId(cu.require(), arg.id)
        if group < 0:
            raise DeviceError(f"the memory group of {cu.name}.{arg.name}: " + _failure("xrtKernelArgGroupId", group))
        cu.groups[arg.id] = group
        return group

    def allocate(self, nbytes: int, cu: ComputeUnitHandle, arg: KernelArg) -> DeviceBuffer:
        if self._dev is None:
            raise DeviceError(f"card {self.index} is closed")
        group = self._group(cu, arg)
        ctypes.set_errno(0)
        bo = self._lib.xrtBOAlloc(self._dev, nbytes, BO_FLAGS_NORMAL, group)
        if not bo:
            raise DeviceError(
                f"card {self.index}: cannot allocate {nbytes} bytes for {cu.name}.{arg.name} in memory group "
                f"{group}: " + _failure("xrtBOAlloc")
            )
        return XrtCBuffer(self._lib, bo, nbytes)

    def user_memory(self, cu: ComputeUnitHandle, arg: KernelArg) -> str | None:
        try:
            self._group(cu, arg)
        except DeviceError as e:
            return str(e)
        return None

    def wrap_user_memory(
        self, memory: np.ndarray, cu: ComputeUnitHandle, arg: KernelArg, address: int | None = None
    ) -> DeviceBuffer:
        dev = self._dev
        if dev is None:
            raise DeviceError(f"card {self.index} is closed")
        nbytes = memory.nbytes
        if not memory.flags.c_contiguous or nbytes == 0:
            raise DeviceError("user memory must be C-contiguous and not empty")
        group = self._group(cu, arg)
        ctypes.set_errno(0)
        bo = self._lib.xrtBOAllocUserPtr(
            dev, memory.ctypes.data if address is None else address, nbytes, BO_FLAGS_NORMAL, group
        )
        if not bo:
            raise DeviceError(
                f"card {self.index}: cannot wrap {nbytes} bytes of user memory: " + _failure("xrtBOAllocUserPtr")
            )
        return XrtCUserBuffer(self._lib, bo, nbytes, memory)

    def close(self) -> None:
        with self._lock:
            kernels, self._kernels = self._kernels, set()
        for unit in kernels:
            unit.close()
        dev, self._dev = self._dev, None
        self._uuid = None
        self._info_dev = None  # pyxrt's handle counts as an open one too
        if dev:
            self._lib.xrtDeviceClose(dev)

    # ------------------------------------------------------------------ sensors
    def read_sensors(self) -> SensorReading:
        if self._info_dev is None:
            return SensorReading(
                error="XRT's C API has no sensor queries and pyxrt does not import (source /opt/xilinx/xrt/setup.sh "
                "to put it on PYTHONPATH)"
            )
        from .xrt import read_info_sensors

        return read_info_sensors(self._info)


def _scalar_type(arg: KernelArg) -> type:
    """The C type ``xrtRunSetArg`` reads for scalar ``arg``: varargs promote float to double;
    other scalars are read by their register size."""
    kind = arg.type.replace("const", "").strip()
    if kind in {"float", "double"}:
        return ctypes.c_double
    signed = not kind.startswith("unsigned") and not kind.startswith("uint")
    if arg.size > 4:
        return ctypes.c_int64 if signed else ctypes.c_uint64
    return ctypes.c_int if signed else ctypes.c_uint


class XrtCComputeUnit(ComputeUnitHandle):
    """One compute unit's kernel handle and its runs.

    Runs are reused: a call's run goes back to the idle list when it ends, and keeps what was
    set as its arguments, so the next start on it sets only the arguments that differ (a
    buffer other than the one bound, a scalar of another value): for a runner's own buffers
    and a steady batch size, nothing but a wrapped request's input (measured: the run open,
    three xrtRunSetArg and the run close of every call were ~18 µs of the engine's CPU per
    event, single-threaded, and a GIL hand-over each under load). A run keeps the last
    buffers bound as XRT's run does (it holds them): a buffer over request memory stays pinned
    until that run's next start replaces it, or the compute unit closes (at most one request
    per idle run: two per compute unit as ``fpgaserve pack`` places instances)."""

    serialized = False  # ERT queues calls per compute unit

    def __init__(self, device: XrtCDevice, name: str, kernel: Kernel, handle: int):
        self.device = device
        self.name = name
        self.kernel = kernel
        self._lib = device._lib
        self._set_arg = device._quick["xrtRunSetArg"]
        self._run_state = device._quick["xrtRunState"]
        self._run_start = device._quick["xrtRunStart"]
        self._handle: int | None = handle
        #: runs whose call ended, reused by the next start, each with what it has bound
        self._idle_runs: list[tuple[int, list]] = []
        self._runs: set[int] = set()
        self._lock = threading.Lock()
        #: argument id -> memory group (xrtKernelArgGroupId), asked once
        self.groups: dict[int, int] = {}
        # resolved once, as set_arg is on every call: (spec, index, the C type of a scalar)
        self._arg_plan = [(a, a.id if a.id is not None else i, _scalar_type(a)) for i, a in enumerate(kernel.args)]

    def require(self) -> int:
        if self._handle is None:
            raise DeviceError(f"card {self.device.index}: compute unit {self.name} is closed")
        return self._handle

    def start(self, args: list) -> RunHandle:
        lib = self._lib
        handle = self._handle
        if handle is None:
            raise DeviceError(f"card {self.device.index}: compute unit {self.name} is closed")
        with self._lock:
            idle = self._idle_runs.pop() if self._idle_runs else None
        if idle is None:
            ctypes.set_errno(0)
            run = lib.xrtRunOpen(handle)
            if not run:
                raise DeviceError(f"card {self.device.index}: starting {self.name}: " + _failure("xrtRunOpen"))
            with self._lock:
                self._runs.add(run)
            bound: list = [None] * len(self._arg_plan)
        else:
            run, bound = idle
        set_arg = self._set_arg
        set_errno = ctypes.set_errno
        slot = 0
        user: tuple[int, ...] = ()
        try:
            for (spec, index, ctype), value in zip(self._arg_plan, args):
                if type(value) in _BUFFER_TYPES:  # not isinstance: through ABCMeta for every int
                    if value.user:
                        user += (slot,)
                    argument = value.argument
                    if argument is None:
                        raise DeviceError("the buffer was freed")
                    if argument is not bound[slot]:  # the same ctypes handle object: the same buffer
                        set_errno(0)
                        code = set_arg(run, index, argument)
                    else:
                        code = 0
                    bound[slot] = argument
                elif value == bound[slot] and type(value) is type(bound[slot]):
                    code = 0
                else:
                    set_errno(0)
                    if ctype is ctypes.c_double:  # a float scalar: its value, not an int of it
                        code = set_arg(run, index, ctype(float(value)))
                    else:
                        code = set_arg(run, index, ctype(int(value)))
                    bound[slot] = value
                if code != 0:
                    bound[slot] = None
                    raise DeviceError(
                        f"card {self.device.index}: argument {spec.name} of {self.name}: "
                        + _failure("xrtRunSetArg", code)
                    )
                slot += 1
            set_errno(0)
            code = self._run_start(run)
            if code != 0:
                raise DeviceError(f"card {self.device.index}: starting {self.name}: " + _failure("xrtRunStart", code))
        except DeviceError:
            self._close_run(run)
            raise
        return XrtCRun(self, run, bound, user)

    def _recycle(self, run: int, bound: list | None = None) -> None:
        """Back to the idle runs (``bound``: what it has as arguments; None: unknown, every
        argument is set again at its next start)."""
        if bound is None:
            bound = [None] * len(self._arg_plan)
        with self._lock:
            if self._handle is not None and run in self._runs:
                self._idle_runs.append((run, bound))
                return
        self._close_run(run)

    def _close_run(self, run: int) -> None:
        with self._lock:
            if run not in self._runs:
                return
            self._runs.discard(run)
            self._idle_runs = [idle for idle in self._idle_runs if idle[0] != run]
        self._lib.xrtRunClose(run)

    def close(self) -> None:
        with self._lock:
            handle, self._handle = self._handle, None
            runs, self._runs, self._idle_runs = self._runs, set(), []
        for run in runs:
            self._lib.xrtRunClose(run)
        if handle:
            self._lib.xrtKernelClose(handle)


class XrtCRun(RunHandle):
    __slots__ = ("_bound", "_cu", "_run", "_state", "_user", "failure")

    def __init__(self, cu: XrtCComputeUnit, run: int, bound: list, user: tuple[int, ...] = ()):
        self._cu = cu
        self._run: int | None = run
        self._bound = bound  # what the run has as its arguments (ctypes handles, scalars)
        self._user = user  # the argument slots that hold a buffer over request memory
        self._state = RunState.RUNNING
        self.failure: str | None = None

    def poll(self) -> RunState:
        if self._run is None or self._state is not RunState.RUNNING:
            return self._state
        ctypes.set_errno(0)
        return self._settle(self._cu._run_state(self._run), "xrtRunState")

    def _settle(self, state: int, call: str) -> RunState:
        if state == ERT_COMPLETED:
            self._state = RunState.COMPLETED
        elif state in ERT_FAILED:
            self._state = RunState.FAILED
            self.failure = _state_failure(call, state)
        return self._state

    def wait(self, deadline: float) -> RunState:
        """Block in ``xrtRunWaitFor`` (the GIL released) until the call ends or ``deadline``
        (perf_counter) passes, in slices of at most WAIT_SLICE_MS."""
        lib = self._cu._lib
        while self._run is not None and self._state is RunState.RUNNING:
            left_ms = int((deadline - time.perf_counter()) * 1000.0 + 0.999)
            if left_ms <= 0:
                return self.poll()
            ctypes.set_errno(0)
            state = lib.xrtRunWaitFor(self._run, min(left_ms, WAIT_SLICE_MS))  # 0 would mean forever
            if state != ERT_TIMEOUT:
                self._settle(state, "xrtRunWaitFor")
        return self._state

    def release(self, rest: list | None = None) -> None:
        """Hand the run back for the next start; a run holding a buffer over request memory
        first has those arguments set to ``rest``'s (the runner's own buffers: the request's
        pages are then not held), or is closed when there is no ``rest`` to set."""
        run, self._run = self._run, None
        if run is None:
            return
        cu = self._cu
        if self._state is RunState.RUNNING:
            cu._close_run(run)  # a hung call's run is never reused
            return
        bound = self._bound
        for slot in self._user:
            value = rest[slot] if rest is not None and slot < len(rest) else None
            # an allocated buffer, not one over request memory
            argument = value.argument if isinstance(value, XrtCBuffer) and not value.user else None
            if argument is None or cu._set_arg(run, cu._arg_plan[slot][1], argument) != 0:
                cu._close_run(run)
                return
            bound[slot] = argument
        cu._recycle(run, bound)


class XrtCBuffer(DeviceBuffer):
    """A buffer XRT allocated (``xrtBOAlloc``), mapped into this process once."""

    user = False  # over the caller's memory (xrtBOAllocUserPtr): XrtCUserBuffer

    def __init__(self, lib: ctypes.CDLL, bo: int, nbytes: int):
        self._lib = lib
        self._bo: int | None = bo
        #: the handle as a ctypes value, built once: every sync and xrtRunSetArg passes it
        self.argument: ctypes.c_void_p | None = _vp(bo)
        self.nbytes = nbytes
        self._map()

    def _map(self) -> None:
        bo = self.require()
        address = self._lib.xrtBOMap(bo)
        if not address:
            self._lib.xrtBOFree(bo)
            self._bo = self.argument = None
            raise DeviceError(_failure("xrtBOMap"))
        self.host = np.ctypeslib.as_array((ctypes.c_ubyte * self.nbytes).from_address(address))

    def require(self) -> int:
        if self._bo is None:
            raise DeviceError("the buffer was freed")
        return self._bo

    def _sync(self, direction: int, nbytes: int, offset: int) -> None:
        argument = self.argument
        if argument is None:
            raise DeviceError("the buffer was freed")
        ctypes.set_errno(0)
        code = self._lib.xrtBOSync(argument, direction, nbytes, offset)
        if code != 0:
            where = "to" if direction == SYNC_TO_DEVICE else "from"
            raise DeviceError(f"sync {where} the card: " + _failure("xrtBOSync", code))

    def to_device(self, nbytes: int, offset: int = 0) -> None:
        self._sync(SYNC_TO_DEVICE, nbytes, offset)

    def from_device(self, nbytes: int, offset: int = 0) -> None:
        self._sync(SYNC_FROM_DEVICE, nbytes, offset)

    def free(self) -> None:
        bo, self._bo, self.argument = self._bo, None, None
        self.host = _EMPTY  # nothing may touch the old mapping
        if bo:
            self._lib.xrtBOFree(bo)


class XrtCUserBuffer(XrtCBuffer):
    """A buffer over the caller's memory (``xrtBOAllocUserPtr``), made for one call: its host
    side is that memory, viewed as bytes only if someone asks (the runner never does)."""

    user = True

    def __init__(self, lib: ctypes.CDLL, bo: int, nbytes: int, keep: np.ndarray):
        self._lib = lib
        self._bo = bo
        self.argument = _vp(bo)
        self.nbytes = nbytes
        self._keep: np.ndarray | None = keep  # the pages stay alive while the buffer does

    @property
    def host(self) -> np.ndarray:  # type: ignore[override]
        keep = self._keep
        return _EMPTY if keep is None else keep.reshape(-1).view(np.uint8)

    def free(self) -> None:
        bo, self._bo, self.argument, self._keep = self._bo, None, None, None
        if bo:
            self._lib.xrtBOFree(bo)


_EMPTY = np.empty(0, dtype=np.uint8)  # a freed buffer's host side: no bytes to touch
_BUFFER_TYPES = frozenset({XrtCBuffer, XrtCUserBuffer})
