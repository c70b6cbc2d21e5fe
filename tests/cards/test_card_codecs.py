"""Element codecs of the card path (``backends/hls4ml/card/codecs.py``).

Pure numpy against hand-computed ``ap_fixed`` values and against the ``ap_fixed`` constructor
itself (a small program compiled from hls4ml's ap_types with g++): the 32-bit words of
hls4ml's ``krnl_rtl`` and the native elements (power-of-two byte containers, the type's own
quantization and overflow modes) of the VitisAccelerator ``kernel_wrapper`` and FaaST.
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from fpgaserve.backends.hls4ml.card.codecs import (
    CodecError,
    Float32Codec,
    NativeCodec,
    Word32Codec,
    native_bytes,
    word_format,
)

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the oracle is compiled with g++")


# ---------------------------------------------------------------------------------------------
# 32-bit words (krnl_rtl): hand-computed values


def _codec(precision):
    return Word32Codec.for_precision(precision)


def test_word_format_rules():
    f = word_format("ap_fixed<16,6>")
    assert (f.is_float, f.width, f.frac, f.signed, f.dtype) == (False, 16, 10, True, np.int32)
    # W rounded up to a multiple of 8, I kept: ap_fixed<12,4> travels as ap_fixed<16,4>
    f = word_format("ap_fixed<12,4>")
    assert (f.width, f.frac) == (16, 12)
    f = word_format("ap_fixed<18,8,AP_TRN,AP_WRAP,0>")
    assert (f.width, f.frac) == (24, 16)
    f = word_format("ap_ufixed<8,3>")
    assert (f.width, f.frac, f.signed, f.dtype) == (8, 5, False, np.uint32)
    # integer types stay integers: ap_int<10> travels as ap_int<16>, no fractional bits
    f = word_format("ap_int<10>")
    assert (f.width, f.frac, f.signed) == (16, 0, True)
    f = word_format("ap_uint<12>")
    assert (f.width, f.frac, f.signed, f.dtype) == (16, 0, False, np.uint32)
    assert (word_format("ap_int<32>").width, word_format("ap_int<32>").frac) == (32, 0)
    assert word_format("float").dtype == np.float32
    assert word_format("fixed<16,6>").frac == 10  # hls4ml's own spelling


@pytest.mark.parametrize(
    "precision",
    [
        "ap_fixed<16,6>",
        "ap_fixed<12,4>",
        "ap_fixed<18,8>",
        "ap_fixed<8,8>",
        "ap_fixed<10,-2>",
        "ap_ufixed<8,3>",
        "ap_ufixed<13,1>",
        "ap_int<10>",
        "ap_int<8>",
        "ap_int<17>",
        "ap_uint<12>",
        "ap_uint<1>",
    ],
)
def test_word_format_agrees_with_hls4ml_widening(precision):
    """The word layout is what hls4ml's VivadoAcceleratorConfig makes of the precision."""
    from hls4ml.backends.fpga.fpga_backend import FPGABackend
    from hls4ml.backends.vivado_accelerator.vivado_accelerator_config import (
        VivadoAcceleratorConfig,
    )
    from hls4ml.model.types import FixedPrecisionType

    # _next_factor8_type does not use its instance
    widened = VivadoAcceleratorConfig._next_factor8_type(None, FPGABackend.convert_precision_string(precision))
    f = word_format(precision)
    frac = widened.width - widened.integer if isinstance(widened, FixedPrecisionType) else 0
    assert (f.width, f.frac, f.signed) == (widened.width, frac, widened.signed)


@pytest.mark.parametrize(
    "precision,message",
    [
        ("double", "32-bit words"),
        ("ap_fixed<40,8>", "40-bit words"),
        ("ap_fixed<16,6,AP_RND>", "AP_TRN"),
        ("ap_fixed<16,6,AP_TRN,AP_SAT>", "AP_WRAP"),
        ("int32", "is not float"),
    ],
)
def test_word_format_rejects(precision, message):
    with pytest.raises(CodecError, match=message):
        word_format(precision)


def test_encode_ap_fixed_16_6_by_hand():
    c = _codec("ap_fixed<16,6>")
    # value -> floor(value * 2**10), wrapped into [-32768, 32768)
    x = np.array(
        [[0.0, 1.0, -1.0, 2.0**-10, -0.0001, 31.999, 32.0, -32.0, -32.001, 100.0, -0.5, 0.0019, -0.0019]],
        dtype=np.float32,
    )
    expect = [0, 1024, -1024, 1, -1, 32766, -32768, -32768, 32766, 102400 - 131072, -512, 1, -2]
    out = np.full(x.shape, 12345, dtype=np.int32)
    assert c.encode(x, out) is out
    assert out.tolist() == [expect]


def test_encode_non_finite_and_huge_wrap_to_zero():
    c = _codec("ap_fixed<16,6>")
    x = np.array([np.inf, -np.inf, np.nan, 1e30, -3e38], dtype=np.float32)
    out = np.empty(5, dtype=np.int32)
    c.encode(x, out)
    # ap_fixed keeps the low bits of floor(x * 2**F): multiples of 2**16 wrap to 0
    assert out.tolist() == [0, 0, 0, 0, 0]


def test_encode_float64_input_is_not_rounded_to_float32_first():
    c = _codec("ap_fixed<32,2>")  # 30 fractional bits, finer than a float32 mantissa near 1
    x = np.array([1.0 + 2.0**-29], dtype=np.float64)
    out = np.empty(1, dtype=np.int32)
    c.encode(x, out)
    assert out[0] == 2**30 + 2


def test_decode_takes_low_bits_and_sign_extends():
    c = _codec("ap_fixed<16,6>")
    # the stream's TDATA is 16 bits wide: the kernel writes the raw value zero-extended
    words = np.array([0x0000, 0x0400, 0xFC00, 0x8000, 0x7FFF, 0xFFFF, 0x12340400 & 0x7FFFFFFF], dtype=np.int32)
    out = np.empty(words.shape, dtype=np.float64)
    assert c.decode(words, out) is out
    assert out.tolist() == [0.0, 1.0, -1.0, -32.0, 32767 / 1024, -1 / 1024, 1.0]
    # sign-extended containers decode the same
    assert c.decode(np.array([-1024, -32768], dtype=np.int32), np.empty(2)).tolist() == [-1.0, -32.0]


def test_decode_unsigned_and_float():
    u = _codec("ap_ufixed<8,3>")
    assert u.decode(np.array([0xFF, 0x20, 0x1FF], dtype=np.uint32), np.empty(3)).tolist() == [255 / 32, 1.0, 255 / 32]
    f = _codec("float")
    w = np.array([1.5, -2.25, np.float32(0.1)], dtype=np.float32)
    out = np.empty(3)
    f.decode(w, out)
    assert out.tolist() == [1.5, -2.25, float(np.float32(0.1))]
    enc = np.empty(3, dtype=np.float32)
    f.encode(np.array([1.5, -2.25, 0.1]), enc)
    assert enc.tolist() == w.tolist()


def test_round_trip_random_is_exact_on_representable_values():
    rng = np.random.default_rng(1)
    c = _codec("ap_fixed<24,9>")
    raw = rng.integers(-(2**23), 2**23, size=(64, 37))
    x = raw * 2.0**-15
    words = np.empty(raw.shape, dtype=np.int32)
    c.encode(x, words)
    assert np.array_equal(words, raw)
    back = np.empty(raw.shape)
    c.decode(words & 0xFFFFFF, back)
    assert np.array_equal(back, x)


def test_encode_rejects_wrong_output():
    c = _codec("ap_fixed<16,6>")
    with pytest.raises(ValueError, match="dtype"):
        c.encode(np.zeros(3, np.float32), np.empty(3, np.int16))
    with pytest.raises(ValueError, match="shape"):
        c.encode(np.zeros(3, np.float32), np.empty(4, np.int32))


# ---------------------------------------------------------------------------------------------
# 32-bit words against the ap_fixed constructor (hls4ml's ap_types, compiled with g++)

_ORACLE = r"""
#include <cstdio>
#include <cstdlib>
#include "ap_fixed.h"
typedef %(T)s T;
int main() {
    float x;
    while (fread(&x, sizeof x, 1, stdin) == 1) {
        T v = x;  // what in_struct(float) does with the host's value
        long long raw = v.range(%(W)d - 1, 0).to_int64();
        printf("%%lld\n", raw);
    }
    return 0;
}
"""


@pytest.mark.parametrize(
    "precision,ctype,width",
    [
        ("ap_fixed<16,6>", "ap_fixed<16,6>", 16),
        ("ap_fixed<12,4>", "ap_fixed<16,4>", 16),  # what hls4ml's T_in becomes
        ("ap_fixed<32,12>", "ap_fixed<32,12>", 32),
        ("ap_ufixed<8,3>", "ap_ufixed<8,3>", 8),
    ],
)
def test_encode_matches_ap_fixed_constructor(tmp_path, precision, ctype, width):
    from fpgaserve.backends.hls4ml.project import installed_templates_dir

    ap_types = installed_templates_dir() / "ap_types"
    src = tmp_path / "oracle.cpp"
    src.write_text(_ORACLE % {"T": ctype, "W": width})
    exe = tmp_path / "oracle"
    subprocess.run(["g++", "-O1", "-std=c++11", f"-I{ap_types}", str(src), "-o", str(exe)], check=True)
    rng = np.random.default_rng(7)
    x = np.concatenate(
        [
            rng.normal(0, 4, 4000),
            rng.normal(0, 300, 2000),
            rng.uniform(-1, 1, 2000) * 2.0**-12,
            [0.0, -0.0, 1e-30, -1e-30, 1e9, -1e9, 2.0**31, -(2.0**31)],
        ]
    ).astype(np.float32)
    proc = subprocess.run([str(exe)], input=x.tobytes(), capture_output=True, check=True)
    raw = np.array([int(v) for v in proc.stdout.split()], dtype=np.int64)
    c = _codec(precision)
    words = np.empty(x.shape, dtype=c.dtype)
    c.encode(x, words)
    mask = (1 << width) - 1
    assert np.array_equal(words.astype(np.int64) & mask, raw & mask)


# ---------------------------------------------------------------------------------------------
# native elements (kernel_wrapper, FaaST)

_NATIVE_ORACLE = r"""
#include <cstdio>
#include "ap_fixed.h"
typedef %(T)s T;
int main() {
    double x;
    printf("%%d\n", (int)sizeof(T));
    while (fread(&x, sizeof x, 1, stdin) == 1) {
        T v = x;  // in_buffer_t(double): the host's conversion in PR #991's DataBatcher
        long long raw = v.range(%(W)d - 1, 0).to_int64();  // low W bits
        printf("%%lld %%.17g\n", raw, v.to_double());
    }
    return 0;
}
"""

NATIVE_TYPES = [
    ("ap_fixed<16,6>", 16, True),
    ("ap_fixed<12,4>", 12, True),
    ("ap_fixed<18,8>", 18, True),
    ("ap_fixed<8,3,AP_RND,AP_SAT>", 8, True),
    ("ap_fixed<24,10,AP_RND_CONV,AP_SAT_SYM>", 24, True),
    ("ap_ufixed<10,4,AP_RND_ZERO,AP_SAT>", 10, False),
    ("ap_fixed<33,16>", 33, True),
    ("ap_int<7>", 7, True),
]


@needs_gxx
@pytest.mark.parametrize("ctype,width,signed", NATIVE_TYPES)
def test_native_codec_matches_ap_fixed_constructor(tmp_path, ctype, width, signed):
    """Container size is sizeof(T) and the raw bits are those of T(double), every mode."""
    from fpgaserve.backends.hls4ml.project import installed_templates_dir

    ap_types = installed_templates_dir() / "ap_types"
    src = tmp_path / "oracle.cpp"
    src.write_text(_NATIVE_ORACLE % {"T": ctype, "W": width})
    exe = tmp_path / "oracle"
    subprocess.run(["g++", "-O1", "-std=c++11", f"-I{ap_types}", str(src), "-o", str(exe)], check=True)
    rng = np.random.default_rng(11)
    x = np.concatenate(
        [
            rng.normal(0, 3, 3000),
            rng.normal(0, 1000, 1000),
            np.round(rng.normal(0, 20, 1000) * 64) / 128,  # exact halves: the rounding modes differ there
            [0.0, -0.0, 0.5, -0.5, 1e-30, -1e-30, 1e9, -1e9, 2.0**40, -(2.0**40)],
        ]
    )
    proc = subprocess.run([str(exe)], input=x.tobytes(), capture_output=True, check=True)
    lines = proc.stdout.split(b"\n")
    codec = NativeCodec.for_type(ctype)
    assert codec.itemsize == int(lines[0]) == native_bytes(width)
    raw = np.array([int(line.split()[0]) for line in lines[1:] if line], dtype=np.int64)
    value = np.array([float(line.split()[1]) for line in lines[1:] if line])
    out = np.empty(x.shape, dtype=codec.dtype)
    codec.encode(x, out)
    mask = (1 << width) - 1
    assert np.array_equal(out.astype(np.int64) & mask, raw & mask)
    # the container is sign-extended (zero-extended when unsigned), as ap_int stores it
    assert np.array_equal(out.astype(np.int64), value * 2.0 ** (width - codec.type.integer))
    back = np.empty(x.shape)
    codec.decode(out, back)
    assert np.array_equal(back, value)


def test_native_codec_decodes_low_bits_only():
    codec = NativeCodec.for_type("ap_fixed<12,4>")  # 2-byte container, 4 padding bits
    assert codec.dtype == np.dtype("<i2")
    padded = np.array([0x0FFF, 0x7000, 0x0800, 0x0100], dtype=np.uint16).view(np.int16)
    out = np.empty(4)
    codec.decode(padded, out)
    assert out.tolist() == [-1 / 256, 0.0, -8.0, 1.0]


def test_native_codec_refuses_wide_types():
    with pytest.raises(CodecError, match="53-bit"):
        NativeCodec.for_type("ap_fixed<60,30>")
    with pytest.raises(CodecError, match="is not an ap_fixed"):
        NativeCodec.for_type("float")


def test_float32_codec_rounds_to_nearest():
    c = Float32Codec()
    out = np.empty(3, np.float32)
    c.encode(np.array([0.1, 1 + 2.0**-30, -3.5]), out)
    assert out.tolist() == [float(np.float32(0.1)), 1.0, -3.5]
    back = np.empty(3)
    c.decode(out, back)
    assert back.tolist() == [float(np.float32(0.1)), 1.0, -3.5]


@pytest.mark.parametrize(
    "codec",
    [
        Word32Codec.for_precision("ap_fixed<30,6>"),  # more bits than float32's mantissa: rounds
        Word32Codec.for_precision("ap_ufixed<24,2>"),
        NativeCodec.for_type("ap_fixed<40,12>"),
        NativeCodec.for_type("ap_fixed<16,6>"),
        Float32Codec(),
    ],
    ids=lambda c: c.describe(),
)
def test_decode_into_float32_rounds_once(codec):
    """The card runner decodes straight into a float32 output (FP32 models): each value is
    exact in float64, so that is bit for bit the float64 decode converted with astype."""
    rng = np.random.default_rng(7)
    if isinstance(codec, Float32Codec):
        elements = rng.standard_normal((257, 3)).astype(np.float32)
    else:
        dtype = codec.dtype if isinstance(codec, NativeCodec) else np.dtype(np.int32)
        info = np.iinfo(dtype)
        elements = rng.integers(info.min, info.max, size=(257, 3), endpoint=True, dtype=dtype)
    wide = codec.decode(elements, np.empty(elements.shape, np.float64))
    narrow = codec.decode(elements, np.empty(elements.shape, np.float32))
    assert narrow.dtype == np.float32
    assert np.array_equal(narrow.view(np.uint32), wide.astype(np.float32).view(np.uint32))
