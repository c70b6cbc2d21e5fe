"""The words hls4ml's VivadoAccelerator Alveo kernel (``krnl_rtl``) reads and writes.

The kernel moves 32-bit words: its AXI master is 32 bits wide and feeds ``myproject_axi``
one word per element (``N_IN`` words in, ``N_OUT`` out per sample). What a word means is set
by ``AcceleratorConfig.Precision`` (hls4ml's ``T_in``/``T_out``):

* ``float``: an IEEE float32; the firmware casts it to ``input_t`` on chip.
* ``ap_fixed<W,I>``: hls4ml rounds W up to a multiple of 8 and keeps I
  (``VivadoAcceleratorConfig._next_factor8_type``), so the word holds the two's-complement raw
  value of ``ap_fixed<ceil8(W), I>`` in its low ``ceil8(W)`` bits, ``F = ceil8(W) - I``
  fractional bits. ``ap_int<W>``/``ap_uint<W>`` become ``ap_int<ceil8(W)>`` (``F = 0``). The
  stream's TDATA is only ``ceil8(W)`` wide: on the way in the upper bits of the word are
  dropped, on the way out they arrive as zeros, so decoding takes the low bits and
  sign-extends. (The driver's docstring suggests ``np.int16`` and ``round()``: the first
  would make the kernel read two elements per word, the second differs from ``ap_fixed``'s
  default AP_TRN, which truncates toward minus infinity.)

Encoding reproduces the ``ap_fixed`` constructor from a double with the default modes
(AP_TRN, AP_WRAP): ``raw = wrap(floor(x * 2**F))``. It is computed in float64, where every
step is exact: ``x * 2**F`` only shifts the exponent, ``floor`` and ``fmod`` by a power of two
are exact for any double, and after the first ``fmod`` every value is below 2**33. Infinities
and NaN, which ``ap_fixed`` turns into a multiple of 2**972 and therefore into 0 after the
wrap, become 0.

Everything is vectorised and writes into caller-owned arrays (``out=``): the hardware runner
encodes straight into its preallocated device buffers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .fixed_point import FixedType

WORD_BITS = 32  # krnl_rtl's C_M_AXI_GMEM_DATA_WIDTH


class KernelIoError(ValueError):
    """A precision the kernel's 32-bit words cannot carry, or that this encoder does not reproduce."""


@dataclass(frozen=True)
class WordFormat:
    """How one direction of the kernel encodes an element in a 32-bit word."""

    precision: str  # as written in hls4ml_config.yml
    is_float: bool
    width: int = 32  # bits of the word that carry the value (ceil8(W) for fixed point)
    frac: int = 0  # fractional bits F
    signed: bool = True

    @property
    def dtype(self) -> np.dtype:
        """Element type of the device buffer (int32/uint32 containers for fixed point)."""
        if self.is_float:
            return np.dtype(np.float32)
        return np.dtype(np.int32 if self.signed else np.uint32)

    def describe(self) -> str:
        if self.is_float:
            return "float32 words"
        kind = "ap_fixed" if self.signed else "ap_ufixed"
        return f"{kind}<{self.width},{self.width - self.frac}> in {self.dtype.name} words"


def word_format(precision: str, what: str = "port") -> WordFormat:
    """Parse an AcceleratorConfig precision ("float", "ap_fixed<16,6>", "ap_int<8>", ...)."""
    text = "".join(str(precision).split())
    if text == "float":
        return WordFormat(precision, True)
    if text == "double":
        raise KernelIoError(
            f"{what} precision 'double': the krnl_rtl datapath moves 32-bit words, so a double would "
            "be split across two words; use float or ap_fixed"
        )
    try:
        t = FixedType.parse(text)
    except ValueError as e:
        raise KernelIoError(
            f"{what} precision '{precision}' is not float, ap_fixed<W,I>, ap_ufixed<W,I> or ap_int<W>: {e}"
        ) from None
    if not t.integer_type and t.quant != "AP_TRN":  # ap_int<W> has no mode parameters
        raise KernelIoError(f"{what} precision '{precision}': only AP_TRN quantization is supported on the host side")
    if t.overflow != "AP_WRAP":
        raise KernelIoError(f"{what} precision '{precision}': only AP_WRAP overflow is supported on the host side")
    if t.sat_bits:
        raise KernelIoError(f"{what} precision '{precision}': saturation bits are not supported")
    width, signed = t.width, t.signed
    integer = None if t.integer_type else t.integer  # an integer type stays one after widening
    if width <= 0:
        raise KernelIoError(f"{what} precision '{precision}': width must be positive")
    # hls4ml's _next_factor8_type rounds W up to a multiple of 8: ap_fixed keeps I (so it gains
    # fractional bits), ap_int<W> becomes IntegerPrecisionType(ceil8(W)), still 0 fractional bits
    container = -(-width // 8) * 8
    if integer is None:
        integer = container
    if container > WORD_BITS:
        raise KernelIoError(
            f"{what} precision '{precision}' needs {container}-bit words; "
            f"the krnl_rtl datapath is {WORD_BITS} bits wide"
        )
    return WordFormat(precision, False, container, container - integer, signed)


class WordCodec:
    """Encode floats into kernel words and decode words into float64, into preallocated arrays.

    Holds a float64/int scratch area sized to the largest batch seen, so steady-state calls
    allocate nothing. Not thread-safe: one codec per hardware runner (calls are serialized).
    """

    def __init__(self, fmt: WordFormat):
        self.fmt = fmt
        self._scratch = np.empty(0, dtype=np.float64)
        self._iscratch = np.empty(0, dtype=np.int64)

    @classmethod
    def for_precision(cls, precision: str, what: str = "port") -> WordCodec:
        return cls(word_format(precision, what))

    @property
    def dtype(self) -> np.dtype:
        return self.fmt.dtype

    def _float_scratch(self, shape) -> np.ndarray:
        n = int(np.prod(shape))
        if self._scratch.size < n:
            self._scratch = np.empty(n, dtype=np.float64)
        return self._scratch[:n].reshape(shape)

    def _int_scratch(self, shape) -> np.ndarray:
        n = int(np.prod(shape))
        if self._iscratch.size < n:
            self._iscratch = np.empty(n, dtype=np.int64)
        return self._iscratch[:n].reshape(shape)

    def encode(self, x: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Write the words for ``x`` (any float array) into ``out`` (same shape, ``self.dtype``)."""
        if out.shape != x.shape:
            raise ValueError(f"encode: output shape {out.shape} differs from input shape {x.shape}")
        if out.dtype != self.fmt.dtype:
            raise ValueError(f"encode: output dtype {out.dtype} is not {self.fmt.dtype}")
        if self.fmt.is_float:
            # float64 input is rounded to nearest float32, as the float C entry point does
            np.copyto(out, x, casting="unsafe")
            return out
        fmt = self.fmt
        modulus = float(2**fmt.width)
        s = self._float_scratch(x.shape)
        np.multiply(x, 2.0**fmt.frac, out=s, dtype=np.float64)  # in float64: exact, no overflow
        np.floor(s, out=s)  # AP_TRN: toward minus infinity, negatives included
        with np.errstate(invalid="ignore"):  # fmod(inf) is nan, handled on the next line
            np.fmod(s, modulus, out=s)  # exact; now |s| < 2**W
        np.nan_to_num(s, copy=False, nan=0.0)
        if fmt.signed:
            half = float(2 ** (fmt.width - 1))
            s += half  # exact: |s| < 2**33
            np.mod(s, modulus, out=s)  # into [0, 2**W)
            s -= half  # AP_WRAP: two's complement range [-2**(W-1), 2**(W-1))
        else:
            np.mod(s, modulus, out=s)
        np.copyto(out, s, casting="unsafe")  # integral values that fit the container
        return out

    def decode(self, words: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Write the float64 values of kernel ``words`` into ``out`` (same shape)."""
        if out.shape != words.shape:
            raise ValueError(f"decode: output shape {out.shape} differs from word shape {words.shape}")
        if self.fmt.is_float:
            np.copyto(out, words.view(np.float32) if words.dtype != np.float32 else words)
            return out
        fmt = self.fmt
        # only the low W bits came out of the stream: mask them, then sign-extend
        v = self._int_scratch(words.shape)
        np.copyto(v, words.view(np.uint32) if words.dtype.itemsize == 4 else words, casting="unsafe")
        np.bitwise_and(v, (1 << fmt.width) - 1, out=v)
        if fmt.signed:
            half = 1 << (fmt.width - 1)
            np.bitwise_xor(v, half, out=v)
            v -= half
        np.multiply(v, 2.0**-fmt.frac, out=out)  # exact: |v| < 2**32 and a power-of-two scale
        return out


def encode(x: np.ndarray, fmt: WordFormat, out: np.ndarray) -> np.ndarray:
    """One-off encode (allocates its scratch); hot paths keep a :class:`WordCodec`."""
    return WordCodec(fmt).encode(x, out)


def decode(words: np.ndarray, fmt: WordFormat, out: np.ndarray) -> np.ndarray:
    """One-off decode (allocates its scratch); hot paths keep a :class:`WordCodec`."""
    return WordCodec(fmt).decode(words, out)
