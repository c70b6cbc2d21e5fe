"""Exact integers wider than int64, vectorised: two int64 limbs per value.

hls4ml sizes accumulators and merge results to hold every possible value ("auto" precision),
so a few layers of an ordinary model (a Multiply of two 39-bit results, the Dense that reads
it) carry ``ap_fixed`` raws of 70-120 bits. The emulator keeps such raws as a :class:`Wide`:
``value = hi * 2**62 + lo`` with ``0 <= lo < 2**62`` and ``hi`` a signed int64, so a value
holds up to 126 bits in two's complement, and every operation below is a handful of int64
array operations (no Python integers per element). Only the layers whose types need it use
this; everything else keeps plain int64 (or float64) arrays.

Every operation is exact as long as the true result fits in 126 bits (``WIDE_BITS``); the
builders check that bound from the types at build time. Shifts left wrap modulo ``2**126``
(the low bits stay exact, which is all a wrapping cast reads).
"""

from __future__ import annotations

import numpy as np

LIMB = 62
MASK = np.int64((1 << LIMB) - 1)
#: the most bits (sign included) a Wide value holds
WIDE_BITS = 126
_L = np.int64(LIMB)


def _const(v: int) -> tuple[np.int64, np.int64]:
    if not -(1 << (WIDE_BITS - 1)) <= v < 1 << (WIDE_BITS - 1):
        raise OverflowError(f"{v} does not fit in {WIDE_BITS} bits")
    return np.int64(v >> LIMB), np.int64(v & ((1 << LIMB) - 1))


class Wide:
    """An array of exact integers ``hi * 2**62 + lo`` (``hi``, ``lo``: int64 arrays, one shape)."""

    __slots__ = ("hi", "lo")

    def __init__(self, hi, lo):
        self.hi, self.lo = hi, lo

    # ------------------------------------------------------------------ construction
    @classmethod
    def of(cls, x: Wide | np.ndarray) -> Wide:
        """``x`` itself, or the int64 array ``x`` as a Wide."""
        if isinstance(x, Wide):
            return x
        x = np.asarray(x, dtype=np.int64)
        return cls(x >> _L, x & MASK)

    @classmethod
    def full(cls, shape, v: int) -> Wide:
        hi, lo = _const(v)
        return cls(np.full(shape, hi, np.int64), np.full(shape, lo, np.int64))

    @classmethod
    def empty(cls, shape) -> Wide:
        return cls(np.empty(shape, np.int64), np.empty(shape, np.int64))

    @classmethod
    def from_ints(cls, values) -> Wide:
        """From Python integers (tests, constants)."""
        pairs = [_const(int(v)) for v in np.ravel(np.asarray(values, dtype=object))]
        shape = np.shape(values)
        return cls(
            np.array([p[0] for p in pairs], np.int64).reshape(shape),
            np.array([p[1] for p in pairs], np.int64).reshape(shape),
        )

    def to_ints(self) -> np.ndarray:
        """The values as an object array of Python integers (tests, debugging)."""
        out = np.empty(self.hi.shape, dtype=object)
        for k, (h, low) in enumerate(zip(self.hi.ravel().tolist(), self.lo.ravel().tolist())):
            out.flat[k] = (h << LIMB) + low
        return out

    # ------------------------------------------------------------------ array protocol
    @property
    def shape(self) -> tuple[int, ...]:
        return self.hi.shape

    def __getitem__(self, key) -> Wide:
        return Wide(self.hi[key], self.lo[key])

    def __setitem__(self, key, value: Wide | np.ndarray) -> None:
        v = Wide.of(value)
        self.hi[key] = v.hi
        self.lo[key] = v.lo

    def copy(self) -> Wide:
        return Wide(self.hi.copy(), self.lo.copy())

    def reshape(self, *shape) -> Wide:
        return Wide(self.hi.reshape(*shape), self.lo.reshape(*shape))

    @staticmethod
    def where(cond: np.ndarray, a: Wide | np.ndarray | int, b: Wide | np.ndarray | int) -> Wide:
        wa, wb = _operand(a), _operand(b)
        return Wide(np.where(cond, wa.hi, wb.hi), np.where(cond, wa.lo, wb.lo))

    # ------------------------------------------------------------------ arithmetic
    def __add__(self, other) -> Wide:
        o = _operand(other)
        lo = self.lo + o.lo  # < 2**63: no int64 overflow
        return Wide(self.hi + o.hi + (lo >> _L), lo & MASK)

    __radd__ = __add__

    def __neg__(self) -> Wide:
        borrow = (self.lo != 0).astype(np.int64)
        return Wide(-self.hi - borrow, (-self.lo) & MASK)

    def __sub__(self, other) -> Wide:
        return self + (-_operand(other))

    def shl(self, k: int) -> Wide:
        """``self * 2**k`` modulo 2**126 (k >= 0)."""
        if k == 0:
            return self
        if k < LIMB:
            kk = np.int64(k)
            return Wide((self.hi << kk) | (self.lo >> np.int64(LIMB - k)), (self.lo << kk) & MASK)
        if k >= WIDE_BITS:
            return Wide(np.zeros_like(self.hi), np.zeros_like(self.lo))
        hi = self.lo << np.int64(k - LIMB)
        if k < 64:  # hi's own bits still reach the kept 126 (modulo 2**64 in int64)
            hi = hi | (self.hi << np.int64(k))
        return Wide(hi, np.zeros_like(self.lo))

    def sar(self, s: int) -> Wide:
        """``floor(self / 2**s)`` (s >= 0), exact."""
        if s == 0:
            return self
        if s < LIMB:
            ss = np.int64(s)
            return Wide(self.hi >> ss, ((self.lo >> ss) | (self.hi << np.int64(LIMB - s))) & MASK)
        # lo / 2**s < 1 contributes nothing to the floor once s >= 62
        return Wide.of(self.hi >> np.int64(min(s - LIMB, 63)))

    def low_bits(self, s: int) -> Wide:
        """``self mod 2**s`` (0 <= s <= 124), non-negative."""
        if s <= LIMB:
            return Wide(np.zeros_like(self.hi), self.lo & np.int64((1 << s) - 1))
        return Wide(self.hi & np.int64((1 << (s - LIMB)) - 1), self.lo)

    def low64(self) -> np.ndarray:
        """The low 64 bits as int64 (two's complement): exact wherever the value fits in int64."""
        return (self.hi << _L) | self.lo

    def neg(self) -> np.ndarray:
        return self.hi < 0

    def abs(self) -> Wide:
        return Wide.where(self.hi < 0, -self, self)

    def wrap(self, width: int, signed: bool) -> Wide:
        """The low ``width`` bits (63 <= width <= 125), sign-extended for signed types."""
        top = width - LIMB  # bits of hi kept
        hi = self.hi & np.int64((1 << top) - 1)
        if signed:
            sign = np.int64(1) << np.int64(top - 1)
            hi = (hi ^ sign) - sign
        return Wide(hi, self.lo)

    def fits(self, bits: int) -> bool:
        """Whether every value fits in ``bits`` bits, two's complement (bits <= 63)."""
        if not self.hi.size:
            return True
        lo_h, hi_h = -(1 << (bits - 1)) >> LIMB, ((1 << (bits - 1)) - 1) >> LIMB
        if int(self.hi.min()) < lo_h or int(self.hi.max()) > hi_h:
            return False
        v = self.low64()
        return bool(np.all(self == v))

    # ------------------------------------------------------------------ comparisons
    def __gt__(self, other) -> np.ndarray:
        o = _operand(other)
        return (self.hi > o.hi) | ((self.hi == o.hi) & (self.lo > o.lo))

    def __lt__(self, other) -> np.ndarray:
        o = _operand(other)
        return (self.hi < o.hi) | ((self.hi == o.hi) & (self.lo < o.lo))

    def __ge__(self, other) -> np.ndarray:
        return ~(self < other)

    def __le__(self, other) -> np.ndarray:
        return ~(self > other)

    def __eq__(self, other) -> np.ndarray:  # type: ignore[override]
        o = _operand(other)
        return (self.hi == o.hi) & (self.lo == o.lo)

    def __ne__(self, other) -> np.ndarray:  # type: ignore[override]
        return ~(self == other)

    __hash__ = None  # type: ignore[assignment]

    # ------------------------------------------------------------------ to floats
    def _kept(self, bits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """|self| as ``kept * 2**shift`` rounded to odd, ``kept < 2**bits`` (bits <= 62), so that
        one further round-to-nearest of ``kept`` (to fewer than bits - 1 bits) is correctly rounded."""
        neg = self.hi < 0
        mag = self.abs()
        # bit length of |self|: frexp's exponent, which may exceed it by one (rounding up)
        e_hi = np.frexp(mag.hi.astype(np.float64))[1].astype(np.int64)
        e_lo = np.frexp(mag.lo.astype(np.float64))[1].astype(np.int64)
        length = np.where(mag.hi > 0, e_hi + LIMB, e_lo)
        shift = np.maximum(length - bits, 0)
        s_lo = np.minimum(shift, LIMB)
        s_hi = np.clip(shift - LIMB, 0, 63)
        below = shift <= LIMB
        kept = np.where(below, (mag.lo >> s_lo) | (mag.hi << (LIMB - s_lo)), mag.hi >> s_hi)
        sticky = np.where(
            below,
            (mag.lo & ((np.int64(1) << s_lo) - 1)) != 0,
            (mag.lo != 0) | ((mag.hi & ((np.int64(1) << s_hi) - 1)) != 0),
        )
        kept = kept | sticky.astype(np.int64)
        return kept, shift, neg

    def to_float(self, frac: int) -> np.ndarray:
        """``(double)`` of ``self * 2**-frac``, round-half-even (ap_fixed::to_double)."""
        kept, shift, neg = self._kept(62)
        val = np.ldexp(kept.astype(np.float64), (shift - frac).astype(np.int32))
        return np.where(neg, -val, val)

    def to_float32(self, frac: int) -> np.ndarray:
        """``(float)`` of ``self * 2**-frac``, one round-half-even step (ap_fixed::to_float)."""
        kept, shift, neg = self._kept(53)  # exact in float64, rounded to odd: float32 rounds once
        val = np.ldexp(kept.astype(np.float64), (shift - frac).astype(np.int32))
        return np.where(neg, -val, val).astype(np.float32)


def _operand(x) -> Wide:
    if isinstance(x, Wide):
        return x
    if isinstance(x, (int, np.integer)):
        hi, lo = _const(int(x))
        return Wide(hi, lo)
    return Wide.of(x)


def mul64(a: np.ndarray, b: np.ndarray | int) -> Wide:
    """Exact products of int64 arrays whose magnitudes are at most 2**62 (broadcasting)."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    h = np.int64(31)
    m31 = np.int64((1 << 31) - 1)
    ah, al, bh, bl = a >> h, a & m31, b >> h, b & m31
    mid = ah * bl + al * bh  # each term below 2**62 in magnitude
    low = (mid & m31) << h
    low = low + al * bl  # < 2**63
    return Wide(ah * bh + (mid >> h) + (low >> _L), low & MASK)


def mul(a: Wide | np.ndarray, b: np.ndarray | int) -> Wide:
    """``a * b`` for a Wide (or int64) ``a`` and an int64 ``b`` (|b| <= 2**62); the caller
    guarantees the product fits in 126 bits, so ``a.hi * b`` cannot overflow int64."""
    if not isinstance(a, Wide):
        return mul64(a, b)
    low = mul64(a.lo, b)
    return Wide(low.hi + a.hi * np.asarray(b, dtype=np.int64), low.lo)


def mul_wide(a: Wide | np.ndarray, b: Wide | np.ndarray) -> Wide:
    """``a * b`` where at most one side is a Wide (whichever); see :func:`mul`."""
    if isinstance(b, Wide) and not isinstance(a, Wide):
        a, b = b, a
    if isinstance(b, Wide):
        raise ValueError("products of two wide arrays are not supported")
    return mul(a, b)


def is_wide(x) -> bool:
    return isinstance(x, Wide)
