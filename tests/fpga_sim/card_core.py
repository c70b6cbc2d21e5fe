"""The card core (``xrt_c/card_core.c``) through ctypes: the per-event rules of the simulated card.

One copy per process: :func:`core` builds it on first use (``fpga_sim.xrt_c.build_core``, the
machine's ``cc``, cached by source hash) and loads it twice, as ``ctypes.CDLL`` (the GIL
released around each call: PYNQ's ctypes calls into XRT release it) and as ``ctypes.PyDLL`` (the
GIL kept: pyxrt's bindings never release it in ``bo.sync``, ``run.wait``, ``run.state``). Both are
the same library and the same state; the C double of ``libxrt_coreutil.so.2`` reaches that state
through the function table ``fpgasim_core_table`` the bridge hands it. Structures mirror
``card_core.h``.
"""

from __future__ import annotations

import ctypes
import errno
import os
import threading

from .errors import SimulationError

ESIM = 10000
MAX_ARGS = 64
MAX_CUS = 64
MAX_GROUPS = 256
MAX_MEMS = 64
NAME = 64
INLINE, TIMING = 0, 1
BO_DEVICE_ONLY, BO_USERPTR, BO_HOST_GIVEN = 1, 2, 4
NEW, COMPLETED, ABORT = 1, 4, 6
NOTE_LOG, NOTE_HANG, NOTE_BUFFERS, NOTE_STATE = 1, 2, 3, 4
KRNL_RTL, KERNEL_WRAPPER, FAAST = 1, 2, 3
ARG_IN, ARG_OUT, ARG_LEN_IN, ARG_LEN_OUT = 0, 1, 2, 3
ARG_BATCHSIZE = ARG_LEN_IN
#: command states (struct fpgasim_cmd_info.state)
STATES = ("queued", "running", "held", "hung", "done", "aborted")


class Type(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int32) for n in ("kind", "width", "integer", "is_signed", "container")]


class Arg(ctypes.Structure):
    _fields_ = [
        ("id", ctypes.c_int32),
        ("offset", ctypes.c_int32),
        ("size", ctypes.c_int32),
        ("present", ctypes.c_int32),
        ("name", ctypes.c_char * 32),
    ]


class Model(ctypes.Structure):
    _fields_ = [
        ("abi", ctypes.c_int32),
        ("n_in", ctypes.c_int32),
        ("n_out", ctypes.c_int32),
        ("legacy", ctypes.c_int32),
        ("batchsize", ctypes.c_int32),
        ("hw_quant", ctypes.c_int32),
        ("t_in", Type),
        ("t_out", Type),
        ("args", Arg * 4),
        ("latency", ctypes.c_int64),
        ("ii", ctypes.c_int64),
        ("ii_datapath", ctypes.c_int64),
        ("predict_float", ctypes.c_void_p),
        ("predict_double", ctypes.c_void_p),
        ("stack_bytes", ctypes.c_uint64),
        ("float_in", ctypes.c_int32),
        ("float_out", ctypes.c_int32),
        ("serial", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
    ]


class Group(ctypes.Structure):
    _fields_ = [
        ("base", ctypes.c_uint64),
        ("size", ctypes.c_uint64),
        ("members", ctypes.c_uint64),
        ("used", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
    ]


class CuDesc(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char * NAME),
        ("kernel", ctypes.c_char * NAME),
        ("base", ctypes.c_uint64),
        ("span", ctypes.c_uint64),
        ("arg_banks", ctypes.c_uint64 * MAX_ARGS),
        ("arg_port", (ctypes.c_char * 32) * MAX_ARGS),
    ]


class Adopt(ctypes.Structure):
    _fields_ = [
        ("ngroups", ctypes.c_int32),
        ("nmems", ctypes.c_int32),
        ("ncus", ctypes.c_int32),
        ("data_clock_mhz", ctypes.c_int32),
        ("groups", Group * MAX_GROUPS),
        ("mem_tags", (ctypes.c_char * 32) * MAX_MEMS),
        ("cus", CuDesc * MAX_CUS),
    ]


class CardStats(ctypes.Structure):
    _fields_ = [
        *(
            (n, ctypes.c_uint64)
            for n in (
                "downloads_unused",
                "kernel_starts",
                "kernel_completions",
                "hangs",
                "aborted",
                "starts_while_another_card_hung",
                "bytes_to_device",
                "bytes_from_device",
                "bytes_to_device_userptr",
                "bytes_from_device_userptr",
            )
        ),
        ("dma_s_to_device", ctypes.c_double),
        ("dma_s_from_device", ctypes.c_double),
        ("dma_to_device_during_kernel", ctypes.c_uint64),
        ("buffers", ctypes.c_uint64),
        ("uncomputed_calls", ctypes.c_uint64),
        ("nfaults", ctypes.c_uint64),
        ("mode", ctypes.c_int32),
        ("ncus", ctypes.c_int32),
    ]

    COUNTS = (
        "kernel_starts",
        "kernel_completions",
        "hangs",
        "aborted",
        "starts_while_another_card_hung",
        "bytes_to_device",
        "bytes_from_device",
        "bytes_to_device_userptr",
        "bytes_from_device_userptr",
        "dma_s_to_device",
        "dma_s_from_device",
        "dma_to_device_during_kernel",
    )


class CuStats(ctypes.Structure):
    _fields_ = [
        ("commands", ctypes.c_uint64),
        ("completed", ctypes.c_uint64),
        ("rows", ctypes.c_uint64),
        ("queued", ctypes.c_uint64),
        ("busy_s", ctypes.c_double),
        ("hung", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
    ]


class CmdInfo(ctypes.Structure):
    _fields_ = [
        *((n, ctypes.c_double) for n in ("submit_t", "start_t", "end_t", "natural_end", "est")),
        ("state", ctypes.c_int32),
        ("cu", ctypes.c_int32),
        ("rows", ctypes.c_int64),
    ]


class BufferInfo(ctypes.Structure):
    _fields_ = [
        ("id", ctypes.c_uint64),
        ("address", ctypes.c_uint64),
        ("size", ctypes.c_uint64),
        ("bank", ctypes.c_int32),
        ("userptr", ctypes.c_int32),
    ]


class DmaEntry(ctypes.Structure):
    _fields_ = [
        ("begin", ctypes.c_double),
        ("end", ctypes.c_double),
        ("size", ctypes.c_uint64),
        ("to_device", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
    ]


NOTIFY = ctypes.CFUNCTYPE(None, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, ctypes.c_char_p)

_i32, _i64, _u64, _u32, _d, _vp = (
    ctypes.c_int32,
    ctypes.c_int64,
    ctypes.c_uint64,
    ctypes.c_uint32,
    ctypes.c_double,
    ctypes.c_void_p,
)
_PROTOTYPES = {
    "fpgasim_last_error": (ctypes.c_char_p, []),
    "fpgasim_meter_enter": (None, []),
    "fpgasim_meter_leave": (None, []),
    "fpgasim_cpu": (None, [ctypes.POINTER(_u64)]),
    "fpgasim_pcie_rate": (_i32, [ctypes.POINTER(_d)]),
    "fpgasim_set_notify": (None, [NOTIFY]),
    "fpgasim_dirty_fd": (_i32, []),
    "fpgasim_take_dirty": (_i32, [_i32]),
    "fpgasim_arm": (_i32, [_i64, _d]),
    "fpgasim_disarm": (None, []),
    "fpgasim_concurrency": (None, [ctypes.POINTER(_i64)]),
    "fpgasim_bo_alloc": (_i64, [_i32, _i64, _u64, _i32, _i32, _vp, ctypes.POINTER(_u64)]),
    "fpgasim_bo_free": (_i32, [_u64]),
    "fpgasim_bo_free_owned": (_i32, [_i32, _i64]),
    "fpgasim_buffers": (_i32, [_i32, ctypes.POINTER(BufferInfo), _i32]),
    "fpgasim_bo_copy": (_i32, [_u64, _u64, _u64, _u64, _u64]),
    "fpgasim_read_device": (_i32, [_u64, _u64, _u64, _vp]),
    "fpgasim_dma": (_i32, [_u64, _u64, _u64, _i32]),
    "fpgasim_dma_log": (_i32, [_i32, ctypes.POINTER(DmaEntry), _i32]),
    "fpgasim_model_new": (_i32, [ctypes.POINTER(Model)]),
    "fpgasim_model_timing": (_i32, [_i32, _i32, ctypes.POINTER(_d)]),
    "fpgasim_model_memo": (_i32, [_i32, ctypes.POINTER(_u64)]),
    "fpgasim_submit": (_i64, [_i32, ctypes.POINTER(_i32), _i32, _vp, _u32, _i32, _vp]),
    "fpgasim_cmd_release": (_i32, [_u64]),
    "fpgasim_cmd_state": (_i32, [_u64]),
    "fpgasim_cmd_info": (_i32, [_u64, ctypes.POINTER(CmdInfo)]),
    "fpgasim_wait": (_i32, [ctypes.POINTER(_u64), _i32, _d]),
    "fpgasim_next_completion": (_d, [ctypes.POINTER(_u64), _i32]),
    "fpgasim_outstanding": (_i32, [_i32, _u64, ctypes.POINTER(_i32)]),
    "fpgasim_teardown": (_i32, [_i32, _u64, _i32, ctypes.POINTER(_u64)]),
    "fpgasim_read_regs": (_i32, [_i32, _u64, _u32, _vp]),
    "fpgasim_write_regs": (_i32, [_i32, _u64, ctypes.c_char_p, _u32]),
    "fpgasim_card_stats": (_i32, [_i32, ctypes.POINTER(CardStats)]),
    "fpgasim_cu_stats": (_i32, [_i32, _i32, ctypes.POINTER(CuStats), ctypes.c_char_p, _i32]),
    "fpgasim_fault": (_i32, [_i32, _i32, ctypes.c_char_p, _i32]),
    "fpgasim_add_fault": (_i32, [_i32, ctypes.c_char_p]),
    "fpgasim_activity": (_i32, [_i32, _d, _d, ctypes.POINTER(_d)]),
    "fpgasim_card_init": (_i32, [_i32, _i32]),
    "fpgasim_card_adopt": (_i32, [_i32, ctypes.POINTER(Adopt)]),
    "fpgasim_card_forget_local": (_i32, [_i32]),
    "fpgasim_card_state": (_i32, [_i32, _i32, _i32, _u64, ctypes.POINTER(_u64)]),
    "fpgasim_cu_model": (_i32, [_i32, _i32, _i32, ctypes.c_char_p]),
    "fpgasim_cu_contexts": (_i32, [_i32, _i32, _i32]),
    "fpgasim_forget": (None, []),
    "fpgasim_core_table": (_vp, []),
}


class Core:
    """The loaded card core: ``c`` (ctypes.CDLL, GIL released) and ``py`` (ctypes.PyDLL, GIL held)."""

    def __init__(self, path: str):
        self.path = path
        self.c = ctypes.CDLL(path, use_errno=True)
        self.py = ctypes.PyDLL(path, use_errno=True)
        for lib in (self.c, self.py):
            for name, (restype, argtypes) in _PROTOTYPES.items():
                fn = getattr(lib, name)
                fn.restype, fn.argtypes = restype, argtypes

    def error(self) -> str:
        text = self.py.fpgasim_last_error()
        return text.decode(errors="replace") if text else ""

    def check(self, rc: int, card_error):
        """``rc`` as it is when >= 0; else the exception: SimulationError, or ``card_error(errno,
        text)`` (a CardError of card.py)."""
        if rc >= 0:
            return rc
        text = self.error()
        if -rc == ESIM:
            raise SimulationError(text)
        what = text
        suffix = f": {os.strerror(-rc)}"
        if what.endswith(suffix):
            what = what[: -len(suffix)]
        raise card_error(-rc, what or errno.errorcode.get(-rc, str(-rc)))

    def cpu(self) -> tuple[float, float]:
        """(CPU seconds in the card model so far, of which blocking for modelled time)."""
        out = (ctypes.c_uint64 * 3)()
        self.py.fpgasim_cpu(out)
        return out[0] * 1e-9, out[1] * 1e-9


_CORE: list[Core] = []
_LOCK = threading.Lock()


def unavailable() -> str | None:
    """Why the card core cannot be built on this machine (no C compiler), None when it can; a
    source that does not compile raises (a fault of ours, never a reason to skip)."""
    try:
        core()
    except SimulationError as e:
        return str(e)
    return None


def core() -> Core:
    """The process's card core (built on first use; SimulationError when it cannot be built)."""
    if _CORE:
        return _CORE[0]
    with _LOCK:
        if not _CORE:
            from .xrt_c import BuildUnavailable, build_core

            try:
                path = build_core()
            except BuildUnavailable as e:
                raise SimulationError(f"the simulated card's core cannot be built: {e}") from None
            _CORE.append(Core(str(path)))
    return _CORE[0]


__all__ = [
    "ESIM",
    "STATES",
    "Adopt",
    "BufferInfo",
    "CardStats",
    "CmdInfo",
    "Core",
    "CuStats",
    "Model",
    "core",
    "unavailable",
]
