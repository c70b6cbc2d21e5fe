"""FaaST's Alveo kernel, ``alveo_hls4ml`` (fastmachinelearning/FaaST, ``hls4ml_c/``).

``alveo_hls4ml(const ap_uint<512> *in, ap_uint<512> *out)``, one ``m_axi_gmem`` bundle,
built by FaaST's own Makefile around an hls4ml io_parallel project and linked with four
compute units ``alveo_hls4ml_0..3`` on ``bank0..3`` (``config.ini``). Every call processes
``STREAMSIZE`` = 16,384 rows (``kernel_params.h``), whatever the request:

* input: one row per 512-bit beat; element k is the 16-bit field k of the beat (bits
  16k..16k+15, so bytes 2k..2k+1 little endian), the raw bits of the firmware's ``input_t``
  (``in_buf[i][k].range(15,0) = beat.range(16k+15, 16k)``). Fields from N_IN on are ignored,
  so N_IN <= 32 and ``input_t`` must be 16 bits wide.
* output: 32 rows per beat (``COMPRESSION``); row r is field r % 32 of beat r // 32, the raw
  16-bit ``result_t``. The kernel writes the same field for every output of a row, so only
  N_OUT = 1 is meaningful.

Shorter batches are padded (the rows after the batch hold whatever the buffer held; the kernel
computes them and their results are dropped), as FaaST's server does; only the bytes of real
rows are moved over PCIe.
"""

from __future__ import annotations

import numpy as np

from ..axlf import Kernel
from ..codecs import CodecError, NativeCodec
from . import AbiError, KernelAbi, KernelIo, named_arg, register

STREAMSIZE = 16384  # rows per call
BEAT_BYTES = 64  # ap_uint<512>
FIELDS = 32  # 16-bit fields per beat
FIELD_BITS = 16


@register
class Faast(KernelAbi):
    name = "faast"
    title = "FaaST alveo_hls4ml"
    kernel_names = ("alveo_hls4ml",)

    def __init__(self, io: KernelIo, kernel: Kernel):
        super().__init__(io, kernel)
        self.in_codec, self.out_codec = self.codecs(io)

    @classmethod
    def codecs(cls, io: KernelIo) -> tuple[NativeCodec, NativeCodec]:
        if io.rows_per_call not in (None, STREAMSIZE):
            raise AbiError(f"FaaST's alveo_hls4ml processes {STREAMSIZE} rows per call, not {io.rows_per_call}")
        if io.n_in > FIELDS:
            raise AbiError(
                f"FaaST's kernel carries at most {FIELDS} inputs per row (one 512-bit beat); the model has {io.n_in}"
            )
        if io.n_out != 1:
            raise AbiError(
                "FaaST's kernel returns one 16-bit output per row (it packs 32 rows per beat); "
                f"the model has {io.n_out}"
            )
        try:
            in_codec = NativeCodec.for_type(io.input, "input")
            out_codec = NativeCodec.for_type(io.output, "output")
        except CodecError as e:
            raise AbiError(f"FaaST: {e}") from None
        for codec, what in ((in_codec, "input_t"), (out_codec, "result_t")):
            if codec.type.width != FIELD_BITS:
                raise AbiError(
                    f"FaaST's kernel moves 16-bit fields; the firmware's {what} is {codec.type} "
                    f"({codec.type.width} bits)"
                )
        return in_codec, out_codec

    @classmethod
    def check_signature(cls, kernel: Kernel) -> str | None:
        if kernel.name not in cls.kernel_names:
            return f"kernel '{kernel.name}' is not alveo_hls4ml"
        names = [a.name for a in kernel.args]
        if names != ["in", "out"]:
            return f"arguments ({', '.join(names)}), expected (in, out)"
        for name in names:
            arg = named_arg(kernel, name, buffer=True)
            if arg is None:
                return f"{name} should be a buffer"
            port = kernel.port(arg.port)
            wide = "ap_uint<512>" in arg.element_type or (port is not None and port.data_width == 512)
            if not wide:
                return f"{name} is '{arg.type}', expected ap_uint<512>*"
        return None

    @classmethod
    def io_for(cls, project, kernel: Kernel | None = None) -> KernelIo:
        io = project.host_io
        if project.accelerator is not None or io.input is not None:
            raise AbiError(
                f"hls4ml project {project.path} is a {project.backend} project with an accelerator wrapper; FaaST "
                "wraps a plain hls4ml io_parallel project (its kernel moves the raw input_t/result_t bits)"
            )
        if project.io_type != "io_parallel":
            raise AbiError(
                f"hls4ml project {project.path} is an {project.io_type} project; FaaST's kernel calls the top "
                "function with arrays (io_parallel)"
            )
        return KernelIo(project.input.size, project.output.size, io.input_type, io.output_type, STREAMSIZE)

    @property
    def max_call_rows(self) -> int | None:
        return STREAMSIZE

    def call_rows(self, rows: int) -> int:
        return STREAMSIZE

    def input_bytes(self, rows: int) -> int:
        return rows * BEAT_BYTES

    def output_bytes(self, rows: int) -> int:
        return -(-rows // FIELDS) * BEAT_BYTES

    def encode(self, x: np.ndarray, buffer: np.ndarray) -> int:
        rows = x.shape[0]
        beats = buffer[: self.input_bytes(rows)].view(self.in_codec.dtype).reshape(rows, FIELDS)
        self.in_codec.encode(x, beats[:, : self.io.n_in])
        return beats.nbytes

    def decode(self, buffer: np.ndarray, rows: int, out: np.ndarray) -> None:
        fields = buffer[: rows * 2].view(self.out_codec.dtype).reshape(rows, 1)
        self.out_codec.decode(fields, out)

    def arguments(self, input_buffer, output_buffer, rows: int) -> list:
        if rows != STREAMSIZE:
            raise AssertionError(f"alveo_hls4ml always processes {STREAMSIZE} rows, not {rows}")
        return [input_buffer, output_buffer]
