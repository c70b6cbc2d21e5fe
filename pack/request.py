"""What one ``fpgaserve pack`` run is asked to do, and how it fails.

Contract: :class:`PackRequest` holds every choice of a pack run, whether it came from the
command line (``cli.py``) or from a program (``bitstreams/build_bitstreams.py``); the other
modules read it and never change it. :class:`PackError` is the only exception pack raises on
purpose: its message says what is wrong and what to do, and the command line prints it as
``fpgaserve pack: error: ...`` with exit status 2. Importing this module costs nothing (no
hls4ml, no torch).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_PRECISION = "ap_fixed<16,6>"
DEFAULT_BOARD = "alveo-u250"
#: the kernel interface a pack targets unless told otherwise: the one merged hls4ml builds
DEFAULT_KERNEL_ABI = "krnl_rtl"
#: ``--io-precision native``: the firmware's own input_t/result_t cross the kernel boundary
NATIVE = "native"
#: what crosses the kernel boundary when --io-precision is not given, per kernel ABI: krnl_rtl's
#: RTL moves 32-bit words (float is what its Python driver sends), kernel_wrapper's HW_Quant
#: lets clients send floats without knowing the firmware's types, FaaST moves raw 16-bit fields
DEFAULT_IO_PRECISION = {"krnl_rtl": "float", "kernel_wrapper": "float", "faast": NATIVE}
#: VitisAccelerator defaults (hls4ml PR #991 create_initial_config): Num_Kernel and Batchsize
DEFAULT_COMPUTE_UNITS = 1
DEFAULT_BATCHSIZE = 8192
#: hls4ml's io types: arrays (io_parallel) or hls::stream between the layers (io_stream)
IO_TYPES = ("io_parallel", "io_stream")
#: the kernel ABIs whose kernel can carry an io_stream project: hls4ml's VivadoAccelerator
#: wrapper (<name>_axi) takes arrays for both io types, so krnl_rtl is the same kernel; FaaST's
#: alveo_hls4ml calls the top function with arrays (io_parallel only), and kernel_wrapper's
#: stand-in (a plain Vitis project) has no wrapper that turns its streams into the kernel's buffers
IO_STREAM_ABIS = ("krnl_rtl",)
#: seconds the float reference may take before pack gives up on it (see reference.py)
DEFAULT_REFERENCE_TIMEOUT_S = 60.0
#: the most rows pack gives a model when the budget allows more: CMS sends ~16k rows per event,
#: and a larger batch only delays the first answer
DEFAULT_MAX_BATCH_SIZE = 16384
#: what one full batch of a model's inputs and outputs may take (--batch-memory-budget): the
#: server holds a full batch per instance in flight, and a model whose rows are megabytes must
#: not get a max_batch_size whose batch is gigabytes
DEFAULT_BATCH_MEMORY_BUDGET = 1 << 30

_BYTE_UNITS = {
    "": 1,
    "b": 1,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
}
_BYTE_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_byte_size(text: str) -> int:
    """``"512MiB"`` -> 536870912: a number of bytes with an optional unit (B, KiB, MiB, GiB,
    TiB, or the decimal kB, MB, GB, TB; case-insensitive). Raises ValueError saying what is
    accepted for anything else, and for a size below one byte."""
    m = _BYTE_SIZE.match(text)
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in _BYTE_UNITS:
        raise ValueError(f"'{text}' is not a size: give a number with B, KiB, MiB, GiB, TiB (or kB, MB, GB, TB)")
    size = int(float(m.group(1)) * _BYTE_UNITS[unit])
    if size < 1:
        raise ValueError(f"'{text}' is less than one byte")
    return size


def format_bytes(n: int) -> str:
    """``1073741824`` -> ``"1 GiB"``, ``2097160`` -> ``"2.00 MiB"``: for messages."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n // size} {unit}" if n % size == 0 else f"{n / size:.2f} {unit}"
    return f"{n} B"


class PackError(Exception):
    """A pack request that cannot be carried out; the message says why and what to do."""


@dataclass
class PackRequest:
    name: str
    repository: Path
    version: int = 1
    pytorch: str | None = None
    #: an in-memory nn.Module instead of a file (programmatic use: bitstreams/build_bitstreams.py)
    pytorch_module: Any = None
    state_dict: str | None = None
    onnx: str | None = None
    keras: str | None = None
    hls4ml_project: str | None = None
    input_shape: tuple[int, ...] | None = None
    #: hls4ml's IOType for a conversion; None = io_parallel (an --hls4ml-project's config says it)
    io_type: str | None = None
    precision_config: str | None = None
    #: hls4ml config overrides as a dict (programmatic --precision-config), applied after the file
    hls_overrides: dict = field(default_factory=dict)
    default_precision: str = DEFAULT_PRECISION
    granularity: str = "name"
    #: the kernel interface the firmware is packed for (card/abi registry name)
    kernel_abi: str = DEFAULT_KERNEL_ABI
    #: what crosses the kernel boundary: "float", "native" or an ap_fixed type (krnl_rtl);
    #: None = the ABI's default (DEFAULT_IO_PRECISION); a conversion setting only
    io_precision: str | None = None
    #: kernel_wrapper only: Num_Kernel (compute units v++ links) and Batchsize (rows per call of
    #: the legacy two-argument kernel); None = the VitisAccelerator defaults. Conversion settings:
    #: an --hls4ml-project's own AcceleratorConfig says them
    compute_units: int | None = None
    batchsize: int | None = None
    board: str = DEFAULT_BOARD
    #: the Vitis platform; None = the current one for ``board`` (toolchain.default_platform)
    platform: str | None = None
    #: None: the most rows (up to DEFAULT_MAX_BATCH_SIZE) whose full batch fits the budget
    max_batch_size: int | None = None
    #: bytes one full batch of inputs and outputs may take (model_config.batch_size_choice)
    batch_memory_budget: int = DEFAULT_BATCH_MEMORY_BUDGET
    #: None = two per compute unit of the packed xclbin's kernel, 1 without an xclbin
    instance_count: int | None = None
    queue_delay_us: int | None = None
    input_name: str | None = None
    output_name: str | None = None
    float_reference: str | None = None
    #: limit for making the float reference in its child process; past it pack goes on without one
    reference_timeout: float = DEFAULT_REFERENCE_TIMEOUT_S
    vendor_templates: bool = False
    build_xclbin: bool = False
    #: an xclbin/awsxclbin built elsewhere, copied into the version folder as <name>.xclbin
    xclbin: str | None = None
    force: bool = False
    header: str = ""
    extra_parameters: dict = field(default_factory=dict)

    @property
    def effective_io_precision(self) -> str:
        """``io_precision``, or the kernel ABI's default when it is not given."""
        return self.io_precision or DEFAULT_IO_PRECISION.get(self.kernel_abi, "float")

    @property
    def effective_io_type(self) -> str:
        return self.io_type or IO_TYPES[0]

    @property
    def effective_compute_units(self) -> int:
        return self.compute_units if self.compute_units is not None else DEFAULT_COMPUTE_UNITS

    @property
    def effective_batchsize(self) -> int:
        return self.batchsize if self.batchsize is not None else DEFAULT_BATCHSIZE

    def sources(self) -> list[Any]:
        """The model sources given (exactly one is valid)."""
        return [
            s for s in (self.pytorch, self.pytorch_module, self.onnx, self.keras, self.hls4ml_project) if s is not None
        ]

    def source_label(self) -> str:
        """Where the model came from, for the header of config.pbtxt."""
        if self.pytorch_module is not None:
            return f"PyTorch {type(self.pytorch_module).__name__}"
        for flag, value in (
            ("--pytorch", self.pytorch),
            ("--onnx", self.onnx),
            ("--keras", self.keras),
            ("--hls4ml-project", self.hls4ml_project),
        ):
            if value:
                return f"{flag} {Path(value.split(':')[0]).name}"
        return "?"

    def source_description(self) -> str:
        """The source as messages name it: the project folder given, or what was converted."""
        if self.hls4ml_project:
            return f"--hls4ml-project {self.hls4ml_project}"
        return f"the model converted from {self.source_label()}"
