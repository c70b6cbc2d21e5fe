"""hls4ml's VivadoAccelerator Alveo kernel, ``krnl_rtl`` (the merged flow, hls4ml <= 1.3).

An RTL kernel hls4ml packages with ``package_xo`` around the HLS IP ``<name>_axi``:
``krnl_rtl(fifo_in, fifo_out, length_r_in, length_r_out)`` (registers 0x10, 0x1C, 0x28, 0x30 of
``krnl_rtl_control_s_axi.v``). Its read master streams ``length_r_in`` 32-bit words from
``fifo_in`` through the free-running ``<name>_axi`` (``N_IN`` words in, ``N_OUT`` out per
sample) and its write master writes ``length_r_out`` words to ``fifo_out``; the call ends
when the writer is done. The lengths count words of the whole batch, rows are dense, one word
per element (``codecs.Word32Codec``). Wrong lengths hang the kernel or leave stale words in
its FIFOs for the next call, so they are checked before every call. One ``m_axi_gmem``
master carries both buffers: they share the CU's bank. io_stream projects get the same kernel
(their ``<name>_axi`` wrapper takes arrays too).
"""

from __future__ import annotations

from ..axlf import Kernel
from ..codecs import CodecError, Word32Codec
from . import AbiError, KernelAbi, KernelIo, named_arg, register

ARGS = ("fifo_in", "fifo_out", "length_r_in", "length_r_out")
MAX_WORDS = (1 << 31) - 1  # lengths are 32-bit registers; XRT passes scalars as C int


@register
class KrnlRtl(KernelAbi):
    name = "krnl_rtl"
    title = "hls4ml VivadoAccelerator"
    kernel_names = ("krnl_rtl",)
    input_name, output_name = "fifo_in", "fifo_out"

    def __init__(self, io: KernelIo, kernel: Kernel):
        super().__init__(io, kernel)
        self.in_codec, self.out_codec = self.codecs(io)

    @classmethod
    def codecs(cls, io: KernelIo) -> tuple[Word32Codec, Word32Codec]:
        if io.rows_per_call:
            raise AbiError("krnl_rtl takes any number of rows per call (its lengths are arguments)")
        try:
            return Word32Codec.for_precision(io.input, "input"), Word32Codec.for_precision(io.output, "output")
        except CodecError as e:
            raise AbiError(f"krnl_rtl: {e}") from None

    @classmethod
    def check_signature(cls, kernel: Kernel) -> str | None:
        if kernel.name not in cls.kernel_names:
            return f"kernel '{kernel.name}' is not krnl_rtl"
        names = [a.name for a in kernel.args]
        if names != list(ARGS):
            return f"arguments ({', '.join(names)}), expected ({', '.join(ARGS)})"
        for name, buffer in zip(ARGS, (True, True, False, False)):
            if named_arg(kernel, name, buffer=buffer) is None:
                return f"argument {name} should be {'a buffer' if buffer else 'a scalar'}"
        return None

    @classmethod
    def io_for(cls, project, kernel: Kernel | None = None) -> KernelIo:
        if project.accelerator is None:
            raise AbiError(
                f"hls4ml project {project.path} is a {project.backend} project without the <name>_axi wrapper; "
                "krnl_rtl is built from VivadoAccelerator projects"
            )
        io = project.host_io
        return KernelIo(project.input.size, project.output.size, io.input, io.output)

    @property
    def max_call_rows(self) -> int | None:
        return MAX_WORDS // max(self.io.n_in, self.io.n_out)

    def arguments(self, input_buffer, output_buffer, rows: int) -> list:
        len_in, len_out = rows * self.io.n_in, rows * self.io.n_out
        # what the RTL needs, or it hangs: whole samples in, N_OUT words for each out
        if not (rows > 0 and len_in % self.io.n_in == 0 and len_out == len_in // self.io.n_in * self.io.n_out):
            raise AssertionError(f"krnl_rtl lengths in={len_in} out={len_out} for N_IN={self.io.n_in}")
        if len_in > MAX_WORDS or len_out > MAX_WORDS:
            raise AbiError(f"krnl_rtl: a call of {rows} rows exceeds the 32-bit length registers")
        return [input_buffer, output_buffer, len_in, len_out]
