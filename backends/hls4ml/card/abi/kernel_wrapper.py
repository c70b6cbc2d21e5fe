"""hls4ml's VitisAccelerator kernel, ``kernel_wrapper`` (hls4ml PR #991, Vitis >= 2022.1).

An HLS C++ kernel around the firmware's top function, linked ``nk=kernel_wrapper:N`` with
compute units ``kernel_wrapper_1..N``, each on its own DDR bank (``sp=kernel_wrapper_<i>.in:
DDR[i-1]``) or HBM pseudo-channels. Two generations of its signature exist:

* ``kernel_wrapper(const unsigned int batchsize, const T_in *in, T_out *out)`` (since
  2025-07): ``batchsize`` rows per call, any number;
* ``kernel_wrapper(const T_in *in, T_out *out)`` (before): a fixed ``BATCHSIZE`` rows per call
  (the project's ``AcceleratorConfig.Batchsize``, recorded as ``rows_per_call``); shorter
  batches are padded and the padded rows' outputs dropped, as the PR's host code does.

Rows are dense and row-major (``in[i*N_IN + j]``). The elements are the firmware's own
``input_t``/``result_t`` in HLS's native layout (``codecs.NativeCodec``: power-of-two byte
containers), or IEEE float32 when the project was built with ``HW_Quant`` (the kernel casts
to ``input_t`` on chip).
"""

from __future__ import annotations

import numpy as np

from ...fixed_point import FixedType
from ..axlf import Kernel, KernelArg
from ..codecs import CodecError, Float32Codec, NativeCodec
from . import AbiError, KernelAbi, KernelIo, named_arg, register

MAX_ROWS = (1 << 31) - 1  # batchsize is an unsigned int; XRT passes scalars as C int
DEFAULT_BATCHSIZE = 8192  # VitisAcceleratorConfig's default Batchsize


def element_codec(precision: str, what: str) -> NativeCodec | Float32Codec:
    if "".join(precision.split()) == "float":
        return Float32Codec()
    return NativeCodec.for_type(precision, what)


def _element_mismatch(arg: KernelArg | None, precision: str) -> str | None:
    """Why the pointer type v++ recorded for ``arg`` contradicts ``precision``, or None.

    The HLS front end writes the element type as it knew it: ``float const *`` for a HW_Quant
    kernel, ``ap_fixed<16, 6> const *`` (or with its modes) for a native one; a typedef name
    (``in_buffer_t``) says nothing and is not checked. A HW_Quant project beside a native xclbin
    (or the reverse) would otherwise decode garbage."""
    if arg is None:
        return None
    recorded = arg.element_type
    want_float = "".join(precision.split()) == "float"
    if recorded == "float":
        if not want_float:
            return (
                f"kernel_wrapper's {arg.name} is '{arg.type}' (HW_Quant: float elements), "
                f"but the project's are {precision}"
            )
        return None
    try:
        kernel_type = FixedType.parse(recorded)
    except ValueError:
        return None  # a typedef name or an unfamiliar spelling: nothing to compare
    if want_float:
        return f"kernel_wrapper's {arg.name} is '{arg.type}' (native elements), but the project sends floats (HW_Quant)"
    try:
        project_type = FixedType.parse("".join(precision.split()))
    except ValueError:
        return None
    if kernel_type != project_type:
        return f"kernel_wrapper's {arg.name} is '{arg.type}', but the project's element type is {precision}"
    return None


@register
class KernelWrapper(KernelAbi):
    name = "kernel_wrapper"
    title = "hls4ml VitisAccelerator (PR #991)"
    kernel_names = ("kernel_wrapper",)

    def __init__(self, io: KernelIo, kernel: Kernel):
        super().__init__(io, kernel)
        self.legacy = kernel.arg("batchsize") is None
        if self.legacy and not io.rows_per_call:
            raise AbiError(
                "kernel_wrapper(in, out) (the signature before 2025-07) processes a fixed BATCHSIZE rows per call: "
                "card.json must record rows_per_call (the project's AcceleratorConfig.Batchsize)"
            )
        if not self.legacy and io.rows_per_call:
            raise AbiError(
                "kernel_wrapper(batchsize, in, out) takes the rows per call as an argument; drop rows_per_call"
            )
        self.in_codec, self.out_codec = self.codecs(io)
        for arg_name, precision in (("in", io.input), ("out", io.output)):
            why = _element_mismatch(kernel.arg(arg_name), precision)
            if why is not None:
                raise AbiError(why)

    @classmethod
    def codecs(cls, io: KernelIo) -> tuple[NativeCodec | Float32Codec, NativeCodec | Float32Codec]:
        try:
            return element_codec(io.input, "input"), element_codec(io.output, "output")
        except CodecError as e:
            raise AbiError(f"kernel_wrapper: {e}") from None

    @classmethod
    def check_signature(cls, kernel: Kernel) -> str | None:
        if kernel.name not in cls.kernel_names:
            return f"kernel '{kernel.name}' is not kernel_wrapper"
        names = [a.name for a in kernel.args]
        if names not in (["batchsize", "in", "out"], ["in", "out"]):
            return f"arguments ({', '.join(names)}), expected (batchsize, in, out) or (in, out)"
        if named_arg(kernel, "in", buffer=True) is None or named_arg(kernel, "out", buffer=True) is None:
            return "in and out should be buffers"
        if names[0] == "batchsize" and named_arg(kernel, "batchsize", buffer=False) is None:
            return "batchsize should be a scalar"
        return None

    @classmethod
    def io_for(cls, project, kernel: Kernel | None = None) -> KernelIo:
        if project.accelerator is not None:
            raise AbiError(
                f"hls4ml project {project.path} is a VivadoAccelerator project (its firmware runs behind "
                "<name>_axi); kernel_wrapper is built from VitisAccelerator (or plain Vitis) projects"
            )
        io = project.host_io
        rows = None
        if kernel is not None and kernel.arg("batchsize") is None:
            # the legacy kernel loops over a compile-time BATCHSIZE: the project's Batchsize
            rows = int(project.accelerator_config.get("Batchsize") or DEFAULT_BATCHSIZE)
        return KernelIo(
            project.input.size, project.output.size, io.input or io.input_type, io.output or io.output_type, rows
        )

    @property
    def max_call_rows(self) -> int | None:
        return self.io.rows_per_call or MAX_ROWS

    def raw_input(self, x: np.ndarray) -> bool:
        # HW_Quant float32 elements, rows dense and row-major: a C-contiguous (rows, N_IN)
        # little-endian float32 array is its own encoding. The legacy kernel reads a fixed
        # BATCHSIZE rows, more than a shorter batch holds, so it always goes through its buffer.
        return (
            not self.legacy
            and isinstance(self.in_codec, Float32Codec)
            and x.dtype == self.in_codec.dtype
            and x.ndim == 2
            and x.shape[1] == self.io.n_in
            and x.shape[0] > 0
            and x.flags.c_contiguous
        )

    def arguments(self, input_buffer, output_buffer, rows: int) -> list:
        if self.legacy:
            return [input_buffer, output_buffer]
        if not 0 < rows <= MAX_ROWS:
            raise AbiError(f"kernel_wrapper: batchsize {rows} out of range")
        return [rows, input_buffer, output_buffer]
