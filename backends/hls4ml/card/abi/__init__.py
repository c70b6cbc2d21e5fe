"""Kernel ABIs: how a batch becomes bytes in card memory and arguments of one kernel call.

Three kernel interfaces wrap hls4ml firmware on Alveo cards, each built by another flow:

===============  ==============================================  ==========================================
ABI              built by                                        kernel call
===============  ==============================================  ==========================================
krnl_rtl         hls4ml VivadoAccelerator (merged, Vivado HLS)   ``krnl_rtl(in, out, len_in, len_out)``,
                                                                 32-bit words
kernel_wrapper   hls4ml VitisAccelerator (PR #991, Vitis)        ``kernel_wrapper(batchsize, in, out)``,
                                                                 native ap_fixed or float elements
faast            FaaST (``alveo_hls4ml``, its own Makefile)      ``alveo_hls4ml(in, out)``, 512-bit beats,
                                                                 16,384 rows per call
===============  ==============================================  ==========================================

Each is a :class:`KernelAbi` subclass in its own module, registered with :func:`register`
(as hls4ml registers its layer templates): adding an ABI is one module and one line in
``_MODULES``. The ABI of an xclbin is chosen from its kernel's name and argument signature
(:func:`detect`), never guessed from the project; the project (through :class:`KernelIo`)
says what the elements are.

An ABI object is stateless after construction apart from codec scratch space, so one runner
owns one; runners on different threads never share it.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ....base import BackendError
from ..axlf import Kernel, KernelArg, Xclbin
from ..codecs import CodecError


class AbiError(BackendError):
    """The kernel, the xclbin or the project does not fit the ABI; the message says which and why."""


@dataclass(frozen=True)
class KernelIo:
    """What the firmware exchanges with the host through its kernel: the project's side.

    ``input``/``output`` are ``"float"`` or an ``ap_fixed``-family type as written by hls4ml:
    for ``krnl_rtl`` the stream word precision (``T_in``/``T_out`` of ``<name>_axi.h``), for the
    others the element type in card memory (the firmware's ``input_t``/``result_t``, or float
    when the kernel quantizes). ``rows_per_call`` is set when the kernel processes a fixed
    number of rows per call (FaaST, the legacy ``kernel_wrapper``).
    """

    n_in: int
    n_out: int
    input: str
    output: str
    rows_per_call: int | None = None

    def same_as(self, other: KernelIo) -> bool:
        return (
            self.n_in == other.n_in
            and self.n_out == other.n_out
            and _same_type(self.input, other.input)
            and _same_type(self.output, other.output)
        )


def _same_type(a: str, b: str) -> bool:
    from ...fixed_point import FixedType

    a, b = "".join(a.split()), "".join(b.split())
    if a == b:
        return True
    try:
        return FixedType.parse(a) == FixedType.parse(b)
    except ValueError:
        return False


class KernelAbi(ABC):
    """One kernel interface. Subclasses set the class attributes and implement the layout."""

    #: registry key, recorded in card.json and accepted by ``fpgaserve pack --kernel-abi``
    name: ClassVar[str]
    #: who builds it, for messages and ``--help``
    title: ClassVar[str]
    #: kernel name(s) the flow gives the kernel
    kernel_names: ClassVar[tuple[str, ...]]
    #: the arguments the input and output buffers are passed as (their banks are where the
    #: buffers go)
    input_name: ClassVar[str] = "in"
    output_name: ClassVar[str] = "out"

    def __init__(self, io: KernelIo, kernel: Kernel):
        self.io = io
        self.kernel = kernel
        why = self.check_signature(kernel)
        if why is not None:
            raise AbiError(why)
        input_arg, output_arg = kernel.arg(self.input_name), kernel.arg(self.output_name)
        if input_arg is None or output_arg is None:  # check_signature named them: cannot happen
            raise AbiError(f"{kernel.signature()} lacks {self.input_name} or {self.output_name}")
        self.input_arg: KernelArg = input_arg
        self.output_arg: KernelArg = output_arg

    # ------------------------------------------------------------------ identification
    @classmethod
    @abstractmethod
    def check_signature(cls, kernel: Kernel) -> str | None:
        """None when ``kernel`` has this ABI's name and arguments, else why it does not."""

    @classmethod
    @abstractmethod
    def codecs(cls, io: KernelIo) -> tuple:
        """The (input, output) element codecs for ``io``, or AbiError when the kernel cannot
        carry it (element widths, row sizes, rows per call): checked when pack records a
        project for the ABI, before any xclbin exists."""

    @classmethod
    def matches(cls, kernel: Kernel) -> bool:
        return cls.check_signature(kernel) is None

    @classmethod
    @abstractmethod
    def io_for(cls, project, kernel: Kernel | None = None) -> KernelIo:
        """The :class:`KernelIo` of an hls4ml project built for this kernel (``kernel``: the one
        in the xclbin, when there is one), or AbiError when the project cannot have been: each
        flow wraps a particular kind of project, and the emulation modes reproduce the
        project's boundary (``Hls4mlProject.host_io``), which must be the kernel's."""

    # ------------------------------------------------------------------ layout
    @property
    def max_call_rows(self) -> int | None:
        """Most rows one call may carry (None: any); fixed-size kernels carry exactly this."""
        return self.io.rows_per_call

    def call_rows(self, rows: int) -> int:
        """Rows the kernel processes for a call carrying ``rows`` (padded for fixed-size kernels)."""
        return self.io.rows_per_call or rows

    # The layout of krnl_rtl and kernel_wrapper, and the default: rows dense and row-major
    # (element (i, j) at i * N_IN + j), one codec element per value. FaaST overrides it.
    in_codec: Any
    out_codec: Any

    def input_bytes(self, rows: int) -> int:
        """Bytes of the input buffer a call of ``rows`` rows (after :meth:`call_rows`) reads."""
        return rows * self.io.n_in * self.in_codec.itemsize

    def output_bytes(self, rows: int) -> int:
        """Bytes of the output buffer a call of ``rows`` rows writes."""
        return rows * self.io.n_out * self.out_codec.itemsize

    def encode(self, x: np.ndarray, buffer: np.ndarray) -> int:
        """Write batch ``x`` (rows, n_in) into the input ``buffer`` (uint8 host view); returns the
        number of bytes from the start that must reach the card. Rows beyond the batch (fixed-size
        calls) keep what the buffer held: the kernel computes them and their results are dropped,
        so they need neither zeroing nor a DMA."""
        rows = x.shape[0]
        elements = buffer[: self.input_bytes(rows)].view(self.in_codec.dtype).reshape(rows, self.io.n_in)
        self.in_codec.encode(x, elements)
        return elements.nbytes

    def raw_input(self, x: np.ndarray) -> bool:
        """True when :meth:`encode` of ``x`` would write exactly ``x``'s bytes, in order, and the
        kernel reads no more than those: the card can then take the call's input straight from
        ``x``'s memory. False by default: the element formats of the card (fixed point,
        32-bit words, 512-bit beats) are not a request tensor's, so the encoding is a real
        format change, made in the one pass from the request into the card's buffer."""
        return False

    def decode(self, buffer: np.ndarray, rows: int, out: np.ndarray) -> None:
        """Read ``rows`` results from the output ``buffer`` (uint8 host view) into ``out`` (rows, n_out), float64 or
        float32 (the values are exact in float64, so a float32 ``out`` rounds each once)."""
        elements = buffer[: self.output_bytes(rows)].view(self.out_codec.dtype).reshape(rows, self.io.n_out)
        self.out_codec.decode(elements, out)

    def result_bytes(self, rows: int) -> int:
        """Bytes at the start of the output buffer that hold the results of ``rows`` rows."""
        return self.output_bytes(rows)

    @abstractmethod
    def arguments(self, input_buffer, output_buffer, rows: int) -> list:
        """The kernel's arguments in argument order for a call of ``rows`` rows (after
        :meth:`call_rows`): buffer objects as given, scalars as Python ints."""

    def describe(self) -> str:
        return f"{self.name} ({self.title}): {self.kernel.signature()}"


# ------------------------------------------------------------------------------- registry
_REGISTRY: dict[str, type[KernelAbi]] = {}
_MODULES = ("krnl_rtl", "kernel_wrapper", "faast")


def register(cls: type[KernelAbi]) -> type[KernelAbi]:
    """Class decorator: make an ABI known by its ``name``."""
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"kernel ABI '{cls.name}' registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def _load() -> dict[str, type[KernelAbi]]:
    for module in _MODULES:
        importlib.import_module(f"{__name__}.{module}")
    return _REGISTRY


def abi_names() -> list[str]:
    return list(_load())


def get(name: str) -> type[KernelAbi]:
    abis = _load()
    if name not in abis:
        raise AbiError(f"unknown kernel ABI '{name}' (known: {', '.join(abis)})")
    return abis[name]


def detect(xclbin: Xclbin) -> list[tuple[type[KernelAbi], Kernel]]:
    """Every (ABI, kernel) pair of the xclbin whose kernel has a known ABI's signature."""
    found = []
    for kernel in xclbin.kernels.values():
        for cls in _load().values():
            if cls.matches(kernel):
                found.append((cls, kernel))
    return found


def choose(
    xclbin: Xclbin, abi_name: str | None = None, kernel_name: str | None = None
) -> tuple[type[KernelAbi], Kernel]:
    """The one (ABI, kernel) a model runs on this xclbin, or AbiError saying what is there.

    ``abi_name``/``kernel_name`` (from card.json) narrow the choice and must then match.
    """
    where = xclbin.describe()
    if kernel_name is not None:
        kernel = xclbin.kernels.get(kernel_name)
        if kernel is None:
            raise AbiError(f"{where} has no kernel '{kernel_name}' (kernels: {', '.join(xclbin.kernels) or 'none'})")
        candidates = [(cls, kernel) for cls in _load().values() if cls.matches(kernel)]
    else:
        candidates = detect(xclbin)
    if abi_name is not None:
        cls = get(abi_name)
        mine = [(c, k) for c, k in candidates if c is cls]
        if not mine:
            kernels = [xclbin.kernels[kernel_name]] if kernel_name else list(xclbin.kernels.values())
            why = "; ".join(f"{k.signature()}: {cls.check_signature(k)}" for k in kernels) or "no kernels"
            raise AbiError(f"{where} has no {cls.name} kernel ({cls.title}): {why}")
        candidates = mine
    if not candidates:
        sigs = "; ".join(k.signature() for k in xclbin.kernels.values()) or "no kernels in its metadata"
        known = ", ".join(f"{c.name} ({c.title})" for c in _load().values())
        raise AbiError(f"{where}: no kernel has a known interface ({sigs}); fpgaserve runs {known}")
    if len(candidates) > 1:
        names = ", ".join(f"{k.name} ({c.name})" for c, k in candidates)
        raise AbiError(f"{where} holds several hls4ml kernels ({names}); record the model's one in card.json")
    return candidates[0]


def buffer_args(kernel: Kernel) -> list[KernelArg]:
    return [a for a in kernel.args if a.is_buffer]


def named_arg(kernel: Kernel, name: str, *, buffer: bool) -> KernelArg | None:
    arg = kernel.arg(name)
    if arg is None or arg.is_buffer != buffer:
        return None
    return arg


__all__ = [
    "AbiError",
    "CodecError",
    "KernelAbi",
    "KernelIo",
    "abi_names",
    "choose",
    "detect",
    "get",
    "register",
]
