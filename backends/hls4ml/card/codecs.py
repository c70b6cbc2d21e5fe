"""How one tensor element is laid out in card memory, and the vectorised codecs for each layout.

A kernel ABI (``abi/``) composes these: which codec each direction uses, and how the elements
of a batch are placed in the buffer (dense rows, padded beats, ...). Three element layouts
occur in the kernels hls4ml and FaaST generate:

* :class:`Word32Codec`: one 32-bit word per element (hls4ml's VivadoAccelerator ``krnl_rtl``,
  whose AXI master is 32 bits wide). ``AcceleratorConfig.Precision`` ``float`` is an IEEE
  float32 the firmware casts on chip; ``ap_fixed<W,I>`` travels as ``ap_fixed<ceil8(W),I>``
  (hls4ml's ``_next_factor8_type`` rounds W up to a multiple of 8 and keeps I, so F grows),
  raw two's complement in the word's low ``ceil8(W)`` bits. The stream's TDATA is only that
  wide: on the way in the upper bits are dropped, on the way out they arrive as zeros, so
  decoding takes the low bits and sign-extends.
* :class:`NativeCodec`: the firmware's own ``ap_fixed`` in the layout Vitis HLS gives an
  ``m_axi`` pointer to it (hls4ml's VitisAccelerator ``kernel_wrapper``, FaaST's 16-bit
  fields): the raw value sign-extended (zero-extended for ``ap_ufixed``) into the next
  power-of-two number of bytes at least ``ceil(W/8)`` (1, 2, 4 or 8; the host side
  ``sizeof(ap_fixed<W,I>)`` agrees), little endian. The host converts with the type's own
  quantization and overflow modes, as ``in_buffer_t(double)`` does in hls4ml's host code.
* :class:`Float32Codec`: IEEE float32 (VitisAccelerator with ``HW_Quant``: the kernel casts).

Encoding reproduces the ``ap_fixed`` constructor from a double bit for bit (``fixed_point.py``
for the native types; the 32-bit word codec keeps its own float64 formulation, exact for the
AP_TRN/AP_WRAP types hls4ml writes there). Everything writes into caller-owned arrays
(``out=``): the runner encodes straight into its card buffers, decodes straight into the result.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..fixed_point import FixedType

WORD_BITS = 32  # krnl_rtl's C_M_AXI_GMEM_DATA_WIDTH


class CodecError(ValueError):
    """A type a kernel cannot carry, or that these codecs do not reproduce."""


def parse_fixed(text: str, what: str) -> FixedType:
    try:
        return FixedType.parse("".join(str(text).split()))
    except ValueError as e:
        raise CodecError(f"{what} '{text}' is not an ap_fixed/ap_ufixed/ap_int type: {e}") from None


# ------------------------------------------------------------------------------- 32-bit words
@dataclass(frozen=True)
class WordFormat:
    """How one direction of ``krnl_rtl`` encodes an element in a 32-bit word."""

    precision: str  # as written in hls4ml_config.yml / <name>_axi.h
    is_float: bool
    width: int = 32  # bits of the word that carry the value (ceil8(W) for fixed point)
    frac: int = 0  # fractional bits F
    signed: bool = True

    @property
    def dtype(self) -> np.dtype:
        """Element type of the card buffer (int32/uint32 containers for fixed point)."""
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
        raise CodecError(
            f"{what} precision 'double': the krnl_rtl datapath moves 32-bit words, so a double would "
            "be split across two words; use float or ap_fixed"
        )
    try:
        t = FixedType.parse(text)
    except ValueError as e:
        raise CodecError(
            f"{what} precision '{precision}' is not float, ap_fixed<W,I>, ap_ufixed<W,I> or ap_int<W>: {e}"
        ) from None
    if not t.integer_type and t.quant != "AP_TRN":  # ap_int<W> has no mode parameters
        raise CodecError(f"{what} precision '{precision}': only AP_TRN quantization is supported on the host side")
    if t.overflow != "AP_WRAP":
        raise CodecError(f"{what} precision '{precision}': only AP_WRAP overflow is supported on the host side")
    if t.sat_bits:
        raise CodecError(f"{what} precision '{precision}': saturation bits are not supported")
    width, signed = t.width, t.signed
    integer = None if t.integer_type else t.integer  # an integer type stays one after widening
    # hls4ml's _next_factor8_type rounds W up to a multiple of 8: ap_fixed keeps I (so it gains
    # fractional bits), ap_int<W> becomes IntegerPrecisionType(ceil8(W)), still 0 fractional bits
    container = -(-width // 8) * 8
    if integer is None:
        integer = container
    if container > WORD_BITS:
        raise CodecError(
            f"{what} precision '{precision}' needs {container}-bit words; "
            f"the krnl_rtl datapath is {WORD_BITS} bits wide"
        )
    return WordFormat(precision, False, container, container - integer, signed)


class _Scratch:
    """float64/int64 scratch sized to the largest batch seen: steady-state calls allocate nothing.
    Not thread-safe: one codec per runner (its calls are serialized)."""

    def __init__(self):
        self._f = np.empty(0, dtype=np.float64)
        self._i = np.empty(0, dtype=np.int64)

    def floats(self, shape) -> np.ndarray:
        n = int(np.prod(shape))
        if self._f.size < n:
            self._f = np.empty(n, dtype=np.float64)
        return self._f[:n].reshape(shape)

    def ints(self, shape) -> np.ndarray:
        n = int(np.prod(shape))
        if self._i.size < n:
            self._i = np.empty(n, dtype=np.int64)
        return self._i[:n].reshape(shape)


class Word32Codec:
    """Floats <-> ``krnl_rtl`` words.

    Fixed point: ``raw = wrap(floor(x * 2**F))`` computed in float64, where every step is exact:
    ``x * 2**F`` only shifts the exponent, ``floor`` and ``fmod`` by a power of two are exact
    for any double, and after the first ``fmod`` every value is below 2**33. Infinities and
    NaN, which ``ap_fixed`` turns into a multiple of 2**972 and so into 0 after the wrap,
    become 0.
    """

    def __init__(self, fmt: WordFormat):
        self.fmt = fmt
        self._scratch = _Scratch()

    @classmethod
    def for_precision(cls, precision: str, what: str = "port") -> Word32Codec:
        return cls(word_format(precision, what))

    itemsize = 4  # every element is one 32-bit word

    @property
    def dtype(self) -> np.dtype:
        return self.fmt.dtype

    def describe(self) -> str:
        return self.fmt.describe()

    def encode(self, x: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Write the words for ``x`` (any float array) into ``out`` (same shape, ``self.dtype``)."""
        _check(out, x, self.fmt.dtype, "encode")
        if self.fmt.is_float:
            # float64 input is rounded to nearest float32, as the float C entry point does
            np.copyto(out, x, casting="unsafe")
            return out
        fmt = self.fmt
        modulus = float(2**fmt.width)
        s = self._scratch.floats(x.shape)
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
        v = self._scratch.ints(words.shape)
        np.copyto(v, words.view(np.uint32) if words.dtype.itemsize == 4 else words, casting="unsafe")
        np.bitwise_and(v, (1 << fmt.width) - 1, out=v)
        if fmt.signed:
            half = 1 << (fmt.width - 1)
            np.bitwise_xor(v, half, out=v)
            v -= half
        np.multiply(v, 2.0**-fmt.frac, out=out)  # exact: |v| < 2**32 and a power-of-two scale
        return out


# ------------------------------------------------------------------------------- native types
_CONTAINERS = {1: (np.int8, np.uint8), 2: (np.int16, np.uint16), 4: (np.int32, np.uint32), 8: (np.int64, np.uint64)}


def native_bytes(width: int) -> int:
    """Bytes an ``ap_fixed<W,...>`` takes in card memory: the next power of two >= ceil(W/8)."""
    need = -(-width // 8)
    size = 1
    while size < need:
        size *= 2
    return size


class NativeCodec:
    """Floats <-> the raw ``ap_fixed``/``ap_int`` values of a firmware type in its HLS container."""

    def __init__(self, ftype: FixedType, what: str = "port"):
        if ftype.width > 53:
            raise CodecError(
                f"{what} type {ftype} is {ftype.width} bits wide; the host converts doubles to at most 53-bit types"
            )
        self.type = ftype
        self.itemsize = native_bytes(ftype.width)
        if self.itemsize not in _CONTAINERS:
            raise CodecError(f"{what} type {ftype} needs {self.itemsize}-byte elements")
        self.dtype = np.dtype(_CONTAINERS[self.itemsize][0 if ftype.signed else 1]).newbyteorder("<")

    @classmethod
    def for_type(cls, text: str, what: str = "port") -> NativeCodec:
        return cls(parse_fixed(text, what), what)

    def describe(self) -> str:
        return f"{self.type} in {self.itemsize}-byte elements"

    def encode(self, x: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``out[...] = raw(type(x))``: the C++ conversion double -> type, with its Q/O modes."""
        _check(out, x, self.dtype, "encode")
        raw = self.type.from_float(x)  # int64 raws, sign-extended; in range for the container
        np.copyto(out, raw, casting="unsafe")
        return out

    def decode(self, elements: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Low W bits of each element, sign-extended, as float64 values (exact: W <= 53)."""
        if out.shape != elements.shape:
            raise ValueError(f"decode: output shape {out.shape} differs from element shape {elements.shape}")
        t = self.type
        raw = elements.astype(np.int64)
        if t.width < 64:
            raw &= (1 << t.width) - 1
            if t.signed:
                half = 1 << (t.width - 1)
                raw ^= half
                raw -= half
        np.ldexp(raw, -t.frac, out=out, casting="unsafe")
        return out


class Float32Codec:
    """IEEE float32 elements (the kernel quantizes on chip: VitisAccelerator ``HW_Quant``)."""

    dtype = np.dtype("<f4")
    itemsize = 4

    def describe(self) -> str:
        return "float32 elements"

    def encode(self, x: np.ndarray, out: np.ndarray) -> np.ndarray:
        _check(out, x, self.dtype, "encode")
        np.copyto(out, x, casting="unsafe")  # float64 -> float32: round to nearest, as (float)x
        return out

    def decode(self, elements: np.ndarray, out: np.ndarray) -> np.ndarray:
        np.copyto(out, elements)
        return out


def _check(out: np.ndarray, x: np.ndarray, dtype: np.dtype, what: str) -> None:
    if out.shape != x.shape:
        raise ValueError(f"{what}: output shape {out.shape} differs from input shape {x.shape}")
    if out.dtype != dtype:
        raise ValueError(f"{what}: output dtype {out.dtype} is not {dtype}")


__all__ = [
    "CodecError",
    "Float32Codec",
    "NativeCodec",
    "Word32Codec",
    "WordFormat",
    "native_bytes",
    "parse_fixed",
    "word_format",
]
