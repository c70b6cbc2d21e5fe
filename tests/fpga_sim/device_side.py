"""The card's side of a simulated card: device memory, DMA copies, kernel computation.

``card.py`` decides *what* happens and *when* (XRT's rules, the modelled timeline, state files);
this module does the work a real card does with its own hardware: it holds device memory (a
buffer's DDR contents, 0xA5 where nothing was written yet), copies bytes between host memory and
device memory when a sync is modelled, computes a kernel call from the device memory it reads
(``kernels.py``, memoized) and writes the results into device memory when the call completes.

``FPGASERVE_SIM_DEVICE`` chooses where that work runs:

``inline`` (default)
    :class:`InlineDevice`: in the calling process, on the calling thread, as a call of the host
    API (the CPU it takes is charged to the process driving the card).
``process``
    :class:`ProcessDevice`: in a separate *card process* (``python -m fpga_sim.device_side``),
    one per simulated card and host process, started on the card's first use and gone when the
    host process closes it or exits. A buffer's host memory is a memfd both processes map (the
    host creates it and passes the descriptor over the card's socket); device memory exists in
    the card process only; user-pointer buffers (``pyxrt.ext.bo``, PYNQ's xclAllocUserPtrBO)
    are read and written by the card process with ``process_vm_readv``/``process_vm_writev``,
    at the address the host gave, as a DMA engine reads pinned pages. The host sends requests
    over a SOCK_SEQPACKET socket and waits for the answers it needs (a sync's copy, a call's
    result at its modelled completion) blocking in ``poll`` -- holding the GIL where the API
    being simulated holds it (``pyxrt``), releasing it where it does not (PYNQ) -- so it spends
    no CPU on the card's work and still blocks for exactly the modelled time, unless the card
    process is slower than the model (that extra wait is counted in the card's statistics,
    ``device_process.late_s``).

``timing``
    :class:`TimingDevice`: in the calling process, and it does *none* of the card's work -- a
    card model that costs the host what the hardware costs it, for throughput runs. Device
    memory *is* the buffer's host memory (a buffer's own host copy, or, for a user-pointer
    buffer, the caller's pages, as a DMA engine reads pinned pages): a sync moves no bytes, only
    its modelled time passes; a kernel call is timed by ``kernels.Timing`` exactly as in the
    other modes but computes nothing and writes no outputs (the output buffers keep what they
    held), and no C-simulation is built. The card's statistics say so
    (``device_side: {"mode": "timing", "computed": false, "uncomputed_calls": N}``). What
    aliasing cannot show is not modelled: host and device copies are one (a sync is needed on
    hardware and a missing one goes unnoticed here), and a new host-backed buffer's device
    memory reads as its host memory, not 0xA5 (device-only buffers still read 0xA5). Every rule
    of ``card.py`` (ERT states, loads, resets, hangs, bad_state, bank checks, rendezvous, state
    files) applies unchanged. Results are checked in exactness runs, with ``inline`` or
    ``process``.

``inline`` and ``process`` run the same :class:`CardSide`, so results are bit-identical whichever
is chosen.
"""

from __future__ import annotations

import ctypes
import errno
import itertools
import mmap
import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from .errors import SimulationError

ENV_DEVICE = "FPGASERVE_SIM_DEVICE"
MODES = ("inline", "process", "timing")
PAGE = mmap.PAGESIZE
UNINITIALISED = 0xA5
MAX_MESSAGE = 1 << 20
START_TIMEOUT_S = 120.0


def device_mode() -> str:
    """``inline``, ``process`` or ``timing`` (``FPGASERVE_SIM_DEVICE``, read when a card object is made)."""
    text = (os.environ.get(ENV_DEVICE) or "inline").strip().lower()
    if text not in MODES:
        raise SimulationError(f"{ENV_DEVICE} must be one of {', '.join(MODES)}, got {text!r}")
    return text


# ---------------------------------------------------------------------------------- user memory
_LIBC = ctypes.CDLL(None, use_errno=True)


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def _vm_copy(pid: int, remote: int, local: int, nbytes: int, read: bool) -> None:
    """Copy between this process's ``local`` address and ``remote`` in process ``pid``
    (``process_vm_readv`` when ``read``, else ``process_vm_writev``): an unmapped address is an
    error (EFAULT), never a crash."""
    fn = _LIBC.process_vm_readv if read else _LIBC.process_vm_writev
    done = 0
    while done < nbytes:
        n = nbytes - done
        lv, rv = _IoVec(local + done, n), _IoVec(remote + done, n)
        got = fn(ctypes.c_int(pid), ctypes.byref(lv), ctypes.c_ulong(1), ctypes.byref(rv), ctypes.c_ulong(1), 0)
        if got <= 0:
            err = ctypes.get_errno() if got < 0 else errno.EFAULT
            raise OSError(err, f"{'reading' if read else 'writing'} {n} bytes at 0x{remote + done:x} of process {pid}")
        done += got


_LIBC.process_vm_readv.restype = _LIBC.process_vm_writev.restype = ctypes.c_ssize_t


# ---------------------------------------------------------------------------------- memory
class DeviceMemory:
    """One buffer's device memory: an anonymous mapping whose pages read as 0xA5 until written
    (DDR is not zeroed; pages are filled on first touch, so a large buffer costs no memory
    until it is used)."""

    def __init__(self, size: int):
        self.size = size
        self.map = mmap.mmap(-1, max(size, 1))
        self._anchor = ctypes.c_char.from_buffer(self.map)
        self.address = ctypes.addressof(self._anchor)
        self.view = memoryview(self.map)[:size]
        self.touched = bytearray(-(-size // PAGE))

    def _fill(self, start: int, stop: int) -> None:
        """0xA5 into the untouched pages of [start, stop)."""
        t = self.touched
        p1 = -(-stop // PAGE)
        i = t.find(0, start // PAGE, p1)
        while i != -1:
            j = t.find(1, i, p1)
            j = p1 if j == -1 else j
            ctypes.memset(self.address + i * PAGE, UNINITIALISED, min(j * PAGE, self.size) - i * PAGE)
            t[i:j] = b"\x01" * (j - i)
            i = t.find(0, j, p1)

    def read(self, start: int, nbytes: int) -> memoryview:
        self._fill(start, start + nbytes)
        return self.view[start : start + nbytes]

    def prepare_write(self, start: int, nbytes: int) -> None:
        """Before ``nbytes`` at ``start`` are overwritten: only partly covered pages need their
        0xA5 first, whole pages are simply marked written."""
        if nbytes <= 0:
            return
        stop = start + nbytes
        first, last = start // PAGE, (stop - 1) // PAGE
        if start % PAGE:
            self._fill(first * PAGE, (first + 1) * PAGE)
        if stop % PAGE and stop != self.size:
            self._fill(last * PAGE, (last + 1) * PAGE)
        self.touched[first : last + 1] = b"\x01" * (last + 1 - first)

    def write(self, start: int, data) -> None:
        n = len(data) if not isinstance(data, memoryview) else data.nbytes
        self.prepare_write(start, n)
        self.view[start : start + n] = data

    def close(self) -> None:
        try:
            self.view.release()
            del self._anchor
            self.map.close()
        except BufferError:  # a view is still out (a computation in progress); it goes with it
            pass


class _Buffer:
    """What the card side knows of a buffer object: its device memory and where its host
    memory is (a mapping both sides share, a user pointer in the host process, or none)."""

    __slots__ = ("dev", "host", "host_map", "userptr")

    def __init__(self, size: int, host, userptr: tuple[int, int] | None, dev=None):
        self.dev = DeviceMemory(size) if dev is None else dev
        self.host_map = host if isinstance(host, mmap.mmap) else None
        self.host = memoryview(host)[:size] if host is not None else None
        self.userptr = userptr  # (pid, address)


# ---------------------------------------------------------------------------------- the card side
class CardSide:
    """The card's work for one simulated card (see the module docstring). Every method takes
    and returns picklable values, so the same object serves in-process or behind the socket."""

    def __init__(self):
        self.buffers: dict[int, _Buffer] = {}
        self.models: dict[tuple[str, str], object] = {}
        self.staged: dict[int, list[bytes]] = {}

    # ------------------------------------------------------------------ buffers
    def alloc(self, bid: int, size: int, host) -> None:
        """``host``: None (device-only), a mapping/bytearray of the host copy, a memfd number
        (process mode: mapped here), or ``("userptr", pid, address)``."""
        userptr = None
        if isinstance(host, int):
            fd = host
            try:
                host = mmap.mmap(fd, size)
            finally:
                os.close(fd)
        elif isinstance(host, tuple):
            userptr = (int(host[1]), int(host[2]))
            host = None
        self.buffers[bid] = _Buffer(size, host, userptr)

    def free(self, bid: int) -> None:
        buf = self.buffers.pop(bid, None)
        if buf is None:
            return
        buf.dev.close()
        if buf.host is not None:
            buf.host.release()
        if buf.host_map is not None:
            try:
                buf.host_map.close()
            except BufferError:
                pass

    def dma(self, bid: int, to_device: bool, start: int, nbytes: int) -> None:
        buf = self.buffers.get(bid)
        if buf is None or nbytes <= 0:
            return  # freed meanwhile: nothing to move
        if buf.userptr is not None:
            pid, address = buf.userptr
            try:
                if to_device:
                    buf.dev.prepare_write(start, nbytes)
                    _vm_copy(pid, address + start, buf.dev.address + start, nbytes, read=True)
                else:
                    buf.dev.read(start, nbytes)
                    _vm_copy(pid, address + start, buf.dev.address + start, nbytes, read=False)
            except OSError as e:
                raise SimulationError(
                    f"user memory of buffer {bid} ({e.strerror}: {e.filename or e}): the host must keep a "
                    "user pointer's memory mapped while its buffer object lives (XRT pins those pages)"
                ) from None
        elif buf.host is not None:
            if to_device:
                buf.dev.write(start, buf.host[start : start + nbytes])
            else:
                buf.host[start : start + nbytes] = buf.dev.read(start, nbytes)

    def copy(self, src: int, src_off: int, dst: int, dst_off: int, nbytes: int) -> None:
        """Device to device (XRT's copy of an argument into a connected bank)."""
        a, b = self.buffers.get(src), self.buffers.get(dst)
        if a is None or b is None:
            return
        b.dev.write(dst_off, bytes(a.dev.read(src_off, nbytes)))

    def read_device(self, bid: int, start: int, nbytes: int) -> bytes:
        """Device memory as it is (tests look at it; the card's hosts cannot)."""
        buf = self.buffers.get(bid)
        return b"" if buf is None else bytes(buf.dev.read(start, nbytes))

    # ------------------------------------------------------------------ kernels
    def load_model(self, key: tuple[str, str], kernel, path: str | None) -> str | None:
        """Build the model of ``kernel`` (None) or say why it cannot be built."""
        if key in self.models:
            return None
        from .kernels import load_model  # numpy and fpgaserve: only where kernels run

        try:
            self.models[key] = load_model(kernel, path)
        except SimulationError as e:
            return str(e)
        except Exception as e:  # a project the C-simulation cannot build, ...
            return f"simulated card cannot model kernel {kernel.name} of {path}: {e}"
        return None

    def compute(self, key: int, model_key: tuple[str, str], call, reads: list[tuple[int, int, int]]):
        """Compute a call from the device memory it reads (``reads``: buffer, offset, bytes per
        read access); the outputs wait in ``staged`` for :meth:`commit`. Returns (error or
        None, memo hits, memo misses)."""
        model = self.models.get(model_key)
        if model is None:
            return f"no model of kernel {model_key[1]} was built", 0, 0
        try:
            inputs = [self.buffers[bid].dev.read(off, n) for bid, off, n in reads]
            self.staged[key] = model.compute(call, inputs)
        except Exception as e:
            return str(e) or type(e).__name__, model.memo.hits, model.memo.misses
        return None, model.memo.hits, model.memo.misses

    def commit(self, key: int, targets: list[tuple[int, int] | None]) -> None:
        """The call completed: its outputs land in device memory (``targets``: buffer, offset per
        write access, None where nothing is written)."""
        outputs = self.staged.pop(key, None) or []
        for data, target in zip(outputs, targets):
            if target is None:
                continue
            buf = self.buffers.get(target[0])
            if buf is not None:
                buf.dev.write(target[1], data)

    def drop(self, key: int) -> None:
        """The call never completes (hung, aborted): its outputs are nobody's."""
        self.staged.pop(key, None)


# ---------------------------------------------------------------------------------- host clients
class InlineDevice:
    """The card side in this process: every request is done when it is made."""

    mode = "inline"
    pid = 0
    #: a request's answer is in when ``start`` returns (card.py takes a computation's result at
    #: the call's start, not at its modelled completion)
    immediate = True
    #: the kernel models the card side built are this process's (``side.models``)
    local_models = True

    def __init__(self, index: int):
        self.index = index
        self.side = CardSide()
        self._keys = itertools.count(1)
        self._results: dict[int, tuple[bool, object]] = {}
        self.late_s = 0.0

    def key(self) -> int:
        return next(self._keys)

    def host_memory(self, size: int):
        """(the host copy this process uses, what ``alloc`` takes for it)."""
        host = bytearray(size)
        return host, host

    def post(self, method: str, *args, fds: tuple[int, ...] = ()) -> None:
        getattr(self.side, method)(*args)

    def start(self, key: int, method: str, *args, fds: tuple[int, ...] = ()) -> None:
        try:
            self._results[key] = (True, getattr(self.side, method)(*args))
        except Exception as e:
            self._results[key] = (False, e)

    def ready(self, key: int) -> bool:
        return key in self._results

    def peek(self, key: int):
        ok, value = self._results[key]
        return value if ok else None

    def result(self, key: int, hold_gil: bool = True, deadline: float | None = None):
        ok, value = self._results.pop(key)
        if not ok:
            raise value  # type: ignore[misc]
        return value

    def discard(self, key: int) -> None:
        self._results.pop(key, None)

    def call(self, method: str, *args, hold_gil: bool = True):
        return getattr(self.side, method)(*args)

    def describe(self) -> dict:
        return {"mode": "inline"}

    def close(self) -> None:
        for bid in list(self.side.buffers):
            self.side.free(bid)


# ---------------------------------------------------------------------------------- timing only
class _AliasedMemory:
    """Device memory that is host memory (``timing``): a buffer's own host copy, or the caller's
    pages of a user-pointer buffer (a memoryview at their address, no copy)."""

    __slots__ = ("size", "view")

    def __init__(self, size: int, view: memoryview):
        self.size = size
        self.view = view

    def read(self, start: int, nbytes: int) -> memoryview:
        return self.view[start : start + nbytes]

    def prepare_write(self, start: int, nbytes: int) -> None:
        pass

    def write(self, start: int, data) -> None:
        n = len(data) if not isinstance(data, memoryview) else data.nbytes
        self.view[start : start + n] = data

    def close(self) -> None:
        self.view.release()


class TimingSide(CardSide):
    """The card side of ``timing`` (module docstring): device memory aliases host memory, a
    sync moves nothing, a kernel call computes nothing and writes nothing; the calls it was
    asked to compute are counted in ``uncomputed``."""

    def __init__(self):
        super().__init__()
        self.uncomputed = 0

    def alloc(self, bid: int, size: int, host) -> None:
        if isinstance(host, tuple):  # ("userptr", pid, address): the caller's pages, where they are
            pages = (ctypes.c_char * size).from_address(int(host[2]))
            view = memoryview(pages).cast("B")
            self.buffers[bid] = _Buffer(size, None, (int(host[1]), int(host[2])), _AliasedMemory(size, view))
        elif host is not None:
            self.buffers[bid] = _Buffer(size, host, None, _AliasedMemory(size, memoryview(host)[:size]))
        else:  # device-only: memory of its own, 0xA5 until written (a device-to-device copy)
            self.buffers[bid] = _Buffer(size, None, None)

    def dma(self, bid: int, to_device: bool, start: int, nbytes: int) -> None:
        """Nothing to move: device memory is the host memory."""

    def load_model(self, key: tuple[str, str], kernel, path: str | None) -> str | None:
        """A model that plans and times calls, without the C-simulation."""
        if key in self.models:
            return None
        from .kernels import load_model

        try:
            self.models[key] = load_model(kernel, path, compute=False)
        except SimulationError as e:
            return str(e)
        except Exception as e:
            return f"simulated card cannot model kernel {kernel.name} of {path}: {e}"
        return None

    def compute(self, key: int, model_key: tuple[str, str], call, reads: list[tuple[int, int, int]]):
        if model_key not in self.models:
            return f"no model of kernel {model_key[1]} was built", 0, 0
        self.uncomputed += 1
        return None, 0, 0

    def commit(self, key: int, targets: list[tuple[int, int] | None]) -> None:
        """The call completed: it computed nothing, so nothing lands in device memory."""


class TimingDevice(InlineDevice):
    """``timing``: the card side in this process, doing none of the card's work (module docstring)."""

    mode = "timing"

    def __init__(self, index: int):
        super().__init__(index)
        self.side = TimingSide()

    def describe(self) -> dict:
        return {"mode": "timing", "computed": False, "uncomputed_calls": self.side.uncomputed}


# poll(2) through PyDLL keeps the GIL while it blocks (pyxrt's sync and wait never release it)
class _PollFd(ctypes.Structure):
    _fields_ = [("fd", ctypes.c_int), ("events", ctypes.c_short), ("revents", ctypes.c_short)]


_GIL_LIBC = ctypes.PyDLL(None, use_errno=True)
_GIL_LIBC.poll.argtypes = [ctypes.POINTER(_PollFd), ctypes.c_ulong, ctypes.c_int]
_GIL_LIBC.poll.restype = ctypes.c_int
_GIL_LIBC.recv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_GIL_LIBC.recv.restype = ctypes.c_ssize_t
_GIL_LIBC.send.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int]
_GIL_LIBC.send.restype = ctypes.c_ssize_t
_POLLIN = 0x1
_MSG_DONTWAIT = 0x40


def _tests_dir() -> str:
    return str(Path(__file__).resolve().parents[1])


class ProcessDevice:
    """The card side in a card process of its own (see the module docstring)."""

    mode = "process"
    immediate = False
    local_models = False

    def __init__(self, index: int):
        self.index = index
        self.owner = os.getpid()
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        for s in (parent, child):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [_tests_dir(), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
        )
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "fpga_sim.device_side", str(child.fileno()), str(os.getpid()), str(index)],
                pass_fds=[child.fileno()],
                env=env,
                stdin=subprocess.DEVNULL,
                cwd=_tests_dir(),
            )
        finally:
            child.close()
        self.pid = self.proc.pid
        self.sock = parent
        self.fd = parent.fileno()
        _allow_ptrace(self.pid)
        self._keys = itertools.count(1)
        self._lock = threading.RLock()
        self._replies: dict[int, tuple] = {}
        self._discarded: set[int] = set()
        self._buf = ctypes.create_string_buffer(MAX_MESSAGE)
        self.late_s = 0.0
        self.requests = 0
        self.closed = False
        # the first answer proves the card process is up (its imports take a moment)
        self.call("read_device", -1, 0, 0, deadline=time.monotonic() + START_TIMEOUT_S)

    def key(self) -> int:
        return next(self._keys)

    def host_memory(self, size: int):
        fd = os.memfd_create(f"fpga-sim-card{self.index}-host", os.MFD_CLOEXEC)
        os.ftruncate(fd, size)
        host = mmap.mmap(fd, size)
        return host, fd

    # ------------------------------------------------------------------ sending
    def _send(self, message: tuple, fds: tuple[int, ...] = ()) -> None:
        if self.closed:
            raise SimulationError(f"simulated card {self.index}: its card process (pid {self.pid}) is gone")
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        self.requests += 1
        if fds:
            try:
                socket.send_fds(self.sock, [data], list(fds))
            except OSError as e:
                self._died(f"is gone ({e.strerror})")
            return
        sent = _GIL_LIBC.send(self.fd, data, len(data), 0)
        if sent != len(data):
            self._died(f"is gone ({os.strerror(ctypes.get_errno())})")

    def post(self, method: str, *args, fds: tuple[int, ...] = ()) -> None:
        """A request nobody waits for (the card does requests in order)."""
        if method in ("free", "drop"):
            if self.closed:
                return  # the card process is gone, and its memory with it
            try:
                self._send((0, method, args), fds)
            except SimulationError:
                pass  # it went while this buffer was being freed (a finalizer after the card was forgotten)
            return
        self._send((0, method, args), fds)

    def start(self, key: int, method: str, *args, fds: tuple[int, ...] = ()) -> None:
        self._send((key, method, args), fds)

    # ------------------------------------------------------------------ receiving
    def _receive(self, wait_s: float, hold_gil: bool) -> None:
        """Read one answer if one comes within ``wait_s`` (the caller holds ``_lock``)."""
        if hold_gil:
            pfd = _PollFd(self.fd, _POLLIN, 0)
            ready = _GIL_LIBC.poll(ctypes.byref(pfd), 1, int(wait_s * 1000)) > 0
        else:
            ready = bool(select.select([self.fd], [], [], wait_s)[0])
        if not ready:
            return
        n = _GIL_LIBC.recv(self.fd, self._buf, MAX_MESSAGE, _MSG_DONTWAIT)
        if n == 0:
            self._died("closed its socket")
        if n < 0:
            err = ctypes.get_errno()
            if err in (errno.EAGAIN, errno.EINTR):
                return
            self._died(os.strerror(err))
        key, ok, value = pickle.loads(self._buf.raw[:n])
        if key in self._discarded:
            self._discarded.discard(key)
        else:
            self._replies[key] = (ok, value)

    def _died(self, why: str):
        code = self.proc.poll()
        self.closed = True
        raise SimulationError(
            f"simulated card {self.index}: its card process (pid {self.pid}) {why}"
            + (f", exit status {code}" if code is not None else "")
        )

    def ready(self, key: int) -> bool:
        with self._lock:
            if key not in self._replies:
                self._receive(0.0, True)
            return key in self._replies

    def peek(self, key: int):
        ok, value = self._replies[key]
        return value if ok else None

    def result(self, key: int, hold_gil: bool = True, deadline: float | None = None):
        """Block until the answer to ``key`` is in (polling, holding the GIL or not)."""
        t0 = time.monotonic()
        while True:
            with self._lock:
                if key in self._replies:
                    ok, value = self._replies.pop(key)
                    break
                self._receive(0.2, hold_gil)
            if key not in self._replies and self.proc.poll() is not None:
                self._died("exited")
            if deadline is not None and time.monotonic() > deadline:
                raise SimulationError(f"simulated card {self.index}: its card process did not answer in time")
        self.late_s += time.monotonic() - t0
        if not ok:
            raise SimulationError(f"simulated card {self.index}: {value}")
        return value

    def discard(self, key: int) -> None:
        with self._lock:
            if self._replies.pop(key, None) is None:
                self._discarded.add(key)

    def call(self, method: str, *args, hold_gil: bool = True, deadline: float | None = None, fds=()):
        key = self.key()
        self.start(key, method, *args, fds=fds)
        return self.result(key, hold_gil, deadline)

    def describe(self) -> dict:
        return {"mode": "process", "pid": self.pid, "requests": self.requests, "late_s": self.late_s}

    def close(self) -> None:
        """End the card process (its memory goes with it)."""
        if self.closed or os.getpid() != self.owner:
            return
        self.closed = True
        try:
            self.sock.close()
        finally:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _allow_ptrace(pid: int) -> None:
    """Yama's ptrace_scope 1 lets only ancestors read a process's memory: name the card process
    as this one's tracer, so its process_vm_readv of user pointers is allowed (no-op elsewhere)."""
    try:
        PR_SET_PTRACER = 0x59616D61
        _LIBC.prctl(PR_SET_PTRACER, ctypes.c_ulong(pid), 0, 0, 0)
    except Exception:
        pass


def make_device(index: int):
    mode = device_mode()
    if mode == "process":
        return ProcessDevice(index)
    return TimingDevice(index) if mode == "timing" else InlineDevice(index)


# ---------------------------------------------------------------------------------- card process
def _serve(fd: int, host_pid: int, index: int) -> int:
    sock = socket.socket(fileno=fd)
    side = CardSide()
    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, 4)
        except ConnectionResetError:
            return 0
        if not data:
            return 0  # the host process closed the card (or exited)
        key, method, args = pickle.loads(data)
        if method == "alloc" and fds:
            args = (*args[:2], fds[0])
        try:
            if method not in _METHODS:
                raise SimulationError(f"unknown card request {method!r}")
            reply = (key, True, getattr(side, method)(*args))
        except Exception as e:
            if key == 0:
                print(f"fpga_sim card process {index} (host {host_pid}): {method}: {e}", file=sys.stderr, flush=True)
                continue
            reply = (key, False, str(e) or type(e).__name__)
        if key:
            try:
                sock.send(pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL))
            except OSError:
                return 0


_METHODS = frozenset({"alloc", "free", "dma", "copy", "read_device", "load_model", "compute", "commit", "drop"})


def main(argv: list[str]) -> int:
    fd, host_pid, index = (int(a) for a in argv[1:4])
    try:  # die with the host process (PR_SET_PDEATHSIG), whatever kills it
        _LIBC.prctl(1, signal.SIGKILL, 0, 0, 0)
    except Exception:
        pass
    if os.getppid() != host_pid:  # the host died before the line above ran
        return 0
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C to the host's group is the host's to handle
    return _serve(fd, host_pid, index)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
