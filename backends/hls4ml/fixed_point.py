"""Vectorised numpy model of Xilinx ``ap_fixed``/``ap_int`` arithmetic on int64 "raw" arrays.

A value of ``ap_fixed<W,I>`` is ``raw * 2**-F`` with ``F = W - I`` and ``raw`` a W-bit two's
complement integer (unsigned for ``ap_ufixed``). Every operation here works on exact int64
raws, so the results are bit-identical to the C++ headers hls4ml ships (``ap_types``), which
the C-simulation compiles. The rules follow ``ap_fixed_base.h``:

* conversion (``ap_fixed(double)`` and assignment between types) first quantizes the exact
  source value to F fractional bits by the quantization mode, then applies the overflow mode
  to the W-bit result;
* products and sums are exact (``RType``), quantization happens only on assignment.

Raws of types up to 63 bits are int64 arrays. Wider types (hls4ml's auto-sized merges and
accumulators reach 70-120 bits) hold their raws as :class:`~.wide.Wide` (two int64 limbs):
``from_raw``/``cast`` and ``to_float``/``to_float32`` take and give them, with the same
quantization and overflow rules; up to ``MAX_WIDTH`` bits.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from .wide import WIDE_BITS, Wide

QUANT_MODES = ("AP_TRN", "AP_TRN_ZERO", "AP_RND", "AP_RND_ZERO", "AP_RND_INF", "AP_RND_MIN_INF", "AP_RND_CONV")
OVERFLOW_MODES = ("AP_WRAP", "AP_SAT", "AP_SAT_ZERO", "AP_SAT_SYM")
#: widest type whose raws are int64 arrays; wider ones are Wide
INT64_WIDTH = 63
#: widest type emulated (Wide values hold 126 bits; two more leave room for the carry of a sum)
MAX_WIDTH = WIDE_BITS - 2

_TYPE = re.compile(r"^\s*(ap_)?(u)?(fixed|int)\s*<([^<>]*)>\s*$")


def _mode(token: str, allowed: tuple[str, ...], text: str) -> str:
    name = token.strip().upper()
    if not name.startswith("AP_"):
        name = "AP_" + name  # hls4ml's yaml spelling: fixed<16,6,RND,SAT,0>
    if name not in allowed:
        raise ValueError(f"unsupported mode '{token.strip()}' in type '{text}' (supported: {', '.join(allowed)})")
    return name


@dataclass(frozen=True)
class FixedType:
    width: int
    integer: int
    signed: bool = True
    quant: str = "AP_TRN"
    overflow: str = "AP_WRAP"
    sat_bits: int = 0
    #: ap_int/ap_uint: same arithmetic as ap_fixed<W,W>, but its double constructor differs
    integer_type: bool = False

    def __post_init__(self):
        if not 1 <= self.width <= MAX_WIDTH:
            raise ValueError(f"{self}: width {self.width} is not supported by the numpy emulator (1..{MAX_WIDTH} bits)")
        if self.width > INT64_WIDTH and self.overflow == "AP_WRAP" and self.sat_bits:
            raise ValueError(f"{self}: saturation bits on types wider than {INT64_WIDTH} bits are not emulated")
        if self.quant not in QUANT_MODES:
            raise ValueError(f"{self}: unsupported quantization mode {self.quant}")
        if self.overflow not in OVERFLOW_MODES:
            raise ValueError(f"{self}: unsupported overflow mode {self.overflow}")
        if not 0 <= self.sat_bits <= self.width:
            raise ValueError(f"{self}: saturation bits {self.sat_bits} outside 0..{self.width}")
        # C++ default arguments ignore sat bits for non-wrap modes (overflow_adjust never reads them)

    # ------------------------------------------------------------------ parsing
    @classmethod
    def parse(cls, text: str) -> FixedType:
        """``ap_fixed<16,6>``, ``ap_ufixed<8,0,AP_RND,AP_SAT>``, ``ap_int<8>``, ``fixed<16,6,TRN,WRAP,0>``..."""
        m = _TYPE.match(text)
        if m is None:
            raise ValueError(f"cannot read the fixed-point type '{text}'")
        _, u, kind, args = m.groups()
        parts = [a.strip() for a in args.split(",")]
        signed = u is None
        try:
            if kind == "int":
                if len(parts) != 1:
                    raise ValueError
                w = int(parts[0])
                # ap_int converts like C integers: doubles and fixed-point values truncate toward zero
                return cls(w, w, signed, "AP_TRN_ZERO", integer_type=True)
            if not 2 <= len(parts) <= 5:
                raise ValueError
            w, i = int(parts[0]), int(parts[1])
        except ValueError:
            raise ValueError(f"cannot read the fixed-point type '{text}'") from None
        q = _mode(parts[2], QUANT_MODES, text) if len(parts) > 2 else "AP_TRN"
        o = _mode(parts[3], OVERFLOW_MODES, text) if len(parts) > 3 else "AP_WRAP"
        try:
            n = int(parts[4]) if len(parts) > 4 else 0
        except ValueError:
            raise ValueError(f"cannot read the saturation bits of '{text}'") from None
        return cls(w, i, signed, q, o, n)

    def __str__(self) -> str:
        if self.integer_type:
            return f"{'ap_int' if self.signed else 'ap_uint'}<{self.width}>"
        base = "ap_fixed" if self.signed else "ap_ufixed"
        return f"{base}<{self.width},{self.integer},{self.quant},{self.overflow},{self.sat_bits}>"

    # ------------------------------------------------------------------ properties
    @property
    def frac(self) -> int:
        return self.width - self.integer

    @property
    def raw_min(self) -> int:
        return -(1 << (self.width - 1)) if self.signed else 0

    @property
    def raw_max(self) -> int:
        return (1 << (self.width - 1)) - 1 if self.signed else (1 << self.width) - 1

    def max_abs_raw(self) -> int:
        return max(-self.raw_min, self.raw_max)

    @property
    def wide(self) -> bool:
        """Whether raws of this type are :class:`Wide` rather than int64."""
        return self.width > INT64_WIDTH

    # ------------------------------------------------------------------ overflow
    def wrap(self, q: np.ndarray) -> np.ndarray:
        """Low W bits of the (mod 2**64 exact) int64 q, sign-extended for signed types."""
        mask = np.int64((1 << self.width) - 1) if self.width < 64 else np.int64(-1)
        low = q & mask
        if self.signed:
            sign = np.int64(1) << np.int64(self.width - 1)
            low = (low ^ sign) - sign
        return low

    def _overflow(self, wrapped: np.ndarray, over: np.ndarray, under: np.ndarray) -> np.ndarray:
        """Apply the overflow mode given the wrapped result and where the exact value was too
        large (over) or too small (under); mirrors ap_fixed_base::overflow_adjust."""
        if over is None:
            return wrapped
        out = wrapped
        if self.overflow == "AP_WRAP":
            n = self.sat_bits
            if n == 0:
                return wrapped
            w = self.width
            # the N most significant bits are forced: signed -> sign bit = source sign and the
            # next N-1 bits = its complement; unsigned -> all N bits set (overflow and underflow)
            if self.signed:
                top = np.int64(1) << np.int64(w - 1)
                mid = np.int64(((1 << (n - 1)) - 1) << (w - n)) if n > 1 else np.int64(0)
                keep = ~(top | mid)
                pos = (wrapped & keep) | mid  # sign 0, middle bits 1
                neg = (wrapped & keep) | top  # sign 1, middle bits 0 (top is negative in int64)
                # re-interpret the W-bit pattern as signed
                out = np.where(over, self.wrap(pos), np.where(under, self.wrap(neg), wrapped))
            else:
                ones = np.int64(((1 << n) - 1) << (w - n))
                out = np.where(over | under, wrapped | ones, wrapped)
            return out
        if self.overflow == "AP_SAT_ZERO":
            return np.where(over | under, np.int64(0), wrapped)
        lo = self.raw_min
        if self.overflow == "AP_SAT_SYM" and self.signed:
            lo = -self.raw_max
        out = np.where(over, np.int64(self.raw_max), wrapped)
        out = np.where(under, np.int64(lo), out)
        if self.overflow == "AP_SAT_SYM" and self.signed:
            # the most negative code is never produced in symmetric saturation
            out = np.where(out == self.raw_min, np.int64(lo), out)
        return out

    def _finish_int(self, q: np.ndarray) -> np.ndarray:
        """Overflow step for an exact int64 value q already on this type's grid."""
        wrapped = self.wrap(q)
        if self.overflow == "AP_WRAP" and self.sat_bits == 0:
            return wrapped
        return self._overflow(wrapped, q > self.raw_max, q < self.raw_min)

    # ------------------------------------------------------------------ quantization
    def _round_increment(self, q, rem_is_half, rem_gt_half, rem_nonzero, neg):
        """0/1 increment on the floored q for the quantization mode (ap_fixed_base::quantization_adjust)."""
        mode = self.quant
        if mode == "AP_TRN":
            return None
        if mode == "AP_TRN_ZERO":
            return neg & rem_nonzero
        if mode == "AP_RND":
            return rem_is_half | rem_gt_half
        if mode == "AP_RND_ZERO":
            return rem_gt_half | (rem_is_half & neg)
        if mode == "AP_RND_MIN_INF":
            return rem_gt_half
        if mode == "AP_RND_INF":
            return rem_gt_half | (rem_is_half & ~neg)
        if mode == "AP_RND_CONV":
            return rem_gt_half | (rem_is_half & ((q & 1) == 1))
        raise ValueError(mode)

    def from_raw(self, raw, frac: int):
        """Assign the exact value ``raw * 2**-frac`` (int64 or Wide raw, exact) to this type;
        int64 raws for types up to 63 bits, Wide ones beyond."""
        if isinstance(raw, Wide) or self.wide:
            return self._from_wide(Wide.of(raw), frac)
        raw = np.asarray(raw, dtype=np.int64)
        s = frac - self.frac
        if s > 0:
            neg = raw < 0
            if s >= 64:
                # |raw| < 2**63 <= half: the value is less than half an lsb from floor
                q = np.where(neg, np.int64(-1), np.int64(0))
                rem_is_half = np.zeros(raw.shape, bool)
                rem_gt_half = neg.copy()  # remainder 2**s + raw > 2**(s-1)
            elif s == 63:
                q = np.where(neg, np.int64(-1), np.int64(0))
                h = np.int64(1) << np.int64(62)
                rem_is_half = np.where(neg, raw == -h, raw == h)
                rem_gt_half = np.where(neg, raw > -h, raw > h)
            else:
                q = raw >> np.int64(s)
                rem = raw & np.int64((1 << s) - 1)
                half = np.int64(1 << (s - 1))
                rem_is_half = rem == half
                rem_gt_half = rem > half
            rem_nonzero = raw != 0 if s >= 63 else (raw & np.int64((1 << s) - 1)) != 0
            inc = self._round_increment(q, rem_is_half, rem_gt_half, rem_nonzero, neg)
            if inc is not None:
                q = q + inc.astype(np.int64)
            return self._finish_int(q)
        k = -s
        if k == 0:
            return self._finish_int(raw)
        wrapped = self.wrap(raw << np.int64(k)) if k < 64 else np.zeros(raw.shape, np.int64)
        if self.overflow == "AP_WRAP" and self.sat_bits == 0:
            return wrapped  # int64 shifts are exact modulo 2**64, so the low W bits are right
        # overflow verdict without shifting: raw * 2**k > max  <=>  raw > floor(max / 2**k)
        over = raw > (self.raw_max >> k)
        under = raw < -((-self.raw_min) >> k)
        return self._overflow(wrapped, over, under)

    def _from_wide(self, v: Wide, frac: int):
        """:meth:`from_raw` for a Wide source or destination: the same rules, on two limbs."""
        s = frac - self.frac
        over = under = None
        if s > 0:
            neg = v.neg()
            if s <= MAX_WIDTH:
                q = v.sar(s)
                rem = v.low_bits(s)
                half = 1 << (s - 1)
                rem_is_half, rem_gt_half, rem_nonzero = rem == half, rem > half, rem != 0
            else:
                # |v| < 2**125: q is 0 or -1; the remainder is v or 2**s + v, compared with 2**(s-1)
                q = Wide.where(neg, -1, 0)
                h = 1 << (s - 1)
                edge = -(1 << (WIDE_BITS - 1))
                pos_half = v == h if h < -edge else np.zeros(neg.shape, bool)
                pos_gt = v > h if h < -edge else np.zeros(neg.shape, bool)
                neg_half = v == -h if -h >= edge else np.zeros(neg.shape, bool)
                neg_gt = v > -h if -h >= edge else np.ones(neg.shape, bool)
                rem_is_half = np.where(neg, neg_half, pos_half)
                rem_gt_half = np.where(neg, neg_gt, pos_gt)
                rem_nonzero = v != 0
            inc = self._round_increment(q.lo, rem_is_half, rem_gt_half, rem_nonzero, neg)
            if inc is not None:
                q = q + inc.astype(np.int64)
        else:
            k = -s
            q = v.shl(k)  # modulo 2**126: the low W bits are exact
            if k:
                over = v > (self.raw_max >> k)
                under = v < -((-self.raw_min) >> k)
        saturating = not (self.overflow == "AP_WRAP" and self.sat_bits == 0)
        if over is None or under is None:
            over, under = q > self.raw_max, q < self.raw_min
        if not self.wide:
            wrapped = self.wrap(q.low64())
            return self._overflow(wrapped, over, under) if saturating else wrapped
        out = q.wrap(self.width, self.signed)
        if not saturating:
            return out
        if self.overflow == "AP_SAT_ZERO":
            return Wide.where(over | under, 0, out)
        lo = -self.raw_max if (self.overflow == "AP_SAT_SYM" and self.signed) else self.raw_min
        out = Wide.where(over, self.raw_max, Wide.where(under, lo, out))
        if lo != self.raw_min:
            out = Wide.where(out == self.raw_min, lo, out)
        return out

    def cast(self, raw, src: FixedType):
        """``dst = src_value`` (ap_fixed assignment / C-style cast)."""
        return self.from_raw(raw, src.frac)

    def from_float(self, x) -> np.ndarray:
        """``ap_fixed<...>(double x)``: quantize the exact double to F bits, then overflow.

        float32 inputs are widened to double first, as ``ap_fixed_base(float)`` does. NaN and
        infinities behave as the C++ constructor reads their bits: a magnitude beyond 2**1023
        with the sign of the input (wraps to 0, saturates by sign)."""
        if self.width > 53:
            raise ValueError(
                f"{self}: conversion from double to types wider than 53 bits is not emulated "
                "(ap_types' double constructor is inexact for negative values at those widths)"
            )
        x = np.asarray(x, dtype=np.float64)
        if self.integer_type:
            return self.int_from_float(x)
        with np.errstate(over="ignore", invalid="ignore"):
            m = np.ldexp(x, self.frac)
            if self.frac >= 0 and m.size and bool(np.all(np.abs(m) < 2.0**62)):
                # common case (finite, in int64 range, no underflow): quantize in integers
                q = np.floor(m)
                if self.quant != "AP_TRN":
                    q = q + self._float_increment(m, q, x)
                return self._finish_int(q.astype(np.int64))
            huge = ~np.isfinite(m)
            neg = np.signbit(x) & (x != 0)
            # scaling a nonzero subnormal may underflow to 0: keep a sign for the rounding rules
            m = np.where((m == 0) & (x != 0) & ~np.isnan(x), np.copysign(2.0**-100, x), m)
            m = np.where(huge, 0.0, m)
            q = np.floor(m)
            if self.quant != "AP_TRN":
                q = q + self._float_increment(m, q, x)
            # wrapped value: exact remainder modulo 2**W, computed in double (exact for integers)
            modulus = 2.0**self.width
            low = np.fmod(q, modulus)
            low = np.where(low < 0, low + modulus, low)
            wrapped = self.wrap(low.astype(np.int64))
            wrapped = np.where(huge, np.int64(0), wrapped)
            if self.overflow == "AP_WRAP" and self.sat_bits == 0:
                return wrapped
            over = (q > self.raw_max) | (huge & ~neg)
            under = (q < self.raw_min) | (huge & neg)
            return self._overflow(wrapped, over, under)

    def _float_increment(self, m: np.ndarray, q: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Rounding increment (0/1) on q = floor(m) for the quantization mode."""
        # m - floor(m) is inexact for small negative m; the distance to trunc(m) is exact
        a = np.abs(m - np.trunc(m))
        below = m < 0
        neg = np.signbit(x) & (x != 0)
        inc = self._round_increment(
            None if self.quant != "AP_RND_CONV" else np.fmod(q, 2.0).astype(np.int64),
            a == 0.5,
            np.where(below, (a != 0) & (a < 0.5), a > 0.5),
            a != 0,
            neg,
        )
        return inc.astype(np.float64)

    def int_from_float(self, x: np.ndarray) -> np.ndarray:
        """``ap_int<W>(double)``: the magnitude is truncated, wrapped, then negated. Its shift
        logic turns every negative input above -0.5 into +1 (ap_int_base.h), kept here."""
        with np.errstate(invalid="ignore"):
            finite = np.isfinite(x)
            mag = np.where(finite, np.trunc(np.abs(x)), 0.0)
            low = np.fmod(mag, 2.0**self.width).astype(np.int64)
            low = np.where((x < 0) & (x > -0.5), np.int64(-1), low)
            val = np.where(np.signbit(x) & (x != 0), -low, low)
        return self.wrap(val)

    # ------------------------------------------------------------------ back to floats
    def to_float(self, raw) -> np.ndarray:
        """``(double)value``: exact for W <= 53, round-half-even beyond (ap_fixed::to_double)."""
        if isinstance(raw, Wide):
            return raw.to_float(self.frac)
        return np.ldexp(np.asarray(raw, dtype=np.int64).astype(np.float64), -self.frac)

    def to_float32(self, raw) -> np.ndarray:
        """``(float)value`` as ap_fixed::to_float: one round-half-even step from the exact value."""
        if isinstance(raw, Wide):
            return raw.to_float32(self.frac)
        raw = np.asarray(raw, dtype=np.int64)
        if self.width > 53:
            # go through double with round-to-odd so the second rounding (to float) is the only one
            mag = np.abs(raw)
            shift = np.maximum(0, np.floor(np.log2(np.maximum(mag, 1).astype(np.float64))).astype(np.int64) - 52)
            # log2 of a float64 may be off by one near powers of two: correct the shift exactly
            shift = np.where((shift > 0) & ((mag >> shift) >= (np.int64(1) << np.int64(53))), shift + 1, shift)
            kept = mag >> shift
            sticky = (mag & ((np.int64(1) << shift) - 1)) != 0
            kept = kept | sticky.astype(np.int64)
            val = np.ldexp(kept.astype(np.float64), shift.astype(np.int32) - self.frac)
            return np.where(raw < 0, -val, val).astype(np.float32)
        return self.to_float(raw).astype(np.float32)


def parse_type(text: str) -> FixedType:
    return FixedType.parse(text)


# ---------------------------------------------------------------------- float64 raws
#: every raw and every exact intermediate of the float64 path stays below this magnitude, so
#: adding 0.5 or multiplying by a power of two never rounds
F64_EXACT = 2.0**52


def f64_capable(t: FixedType) -> bool:
    """Whether raws of ``t`` can be held exactly as float64 (the fast path)."""
    return t.width <= 52 and not t.integer_type


def quantize_f64(t: FixedType, v: np.ndarray) -> np.ndarray:
    """In place: v (exact multiples of 2**-s, |v| < 2**52) -> integers by t's quantization mode."""
    mode = t.quant
    if mode == "AP_TRN":
        return np.floor(v, out=v)
    if mode == "AP_TRN_ZERO":
        return np.trunc(v, out=v)
    if mode == "AP_RND":  # half up: floor(v + 1/2), exact for these magnitudes
        v += 0.5
        return np.floor(v, out=v)
    if mode == "AP_RND_CONV":  # half to even
        return np.rint(v, out=v)
    if mode == "AP_RND_MIN_INF":  # half down
        v -= 0.5
        return np.ceil(v, out=v)
    mag = np.abs(v)
    if mode == "AP_RND_INF":  # half away from zero
        mag += 0.5
        np.floor(mag, out=mag)
    elif mode == "AP_RND_ZERO":  # half toward zero
        mag -= 0.5
        np.ceil(mag, out=mag)
        np.maximum(mag, 0.0, out=mag)
    else:
        raise ValueError(mode)
    return np.copysign(mag, v, out=v)


def overflow_f64(t: FixedType, q: np.ndarray, lo: float | None = None, hi: float | None = None) -> np.ndarray:
    """In place: integers q (|q| < 2**52) -> t's W-bit range by its overflow mode. ``lo``/``hi``
    bound q when known; if they lie inside the range nothing is done."""
    rmin, rmax = float(t.raw_min), float(t.raw_max)
    if lo is not None and hi is not None and rmin <= lo and hi <= rmax:
        return q
    if t.overflow == "AP_WRAP":
        if t.sat_bits:
            return t._finish_int(q.astype(np.int64)).astype(np.float64)
        # two reductions are cheaper than the wrap's five passes, and real data rarely wraps
        if q.size == 0 or (rmin <= float(q.min()) and float(q.max()) <= rmax):
            return q
        modulus = float(1 << t.width)
        k = q - rmin
        k *= 1.0 / modulus
        np.floor(k, out=k)
        k *= modulus
        q -= k
        return q
    if t.overflow == "AP_SAT":
        return np.clip(q, rmin, rmax, out=q)
    if t.overflow == "AP_SAT_SYM":
        return np.clip(q, -rmax if t.signed else 0.0, rmax, out=q)
    # AP_SAT_ZERO
    q[(q > rmax) | (q < rmin)] = 0.0
    return q


def cast_f64(
    t: FixedType, v: np.ndarray, src_frac: int, lo: float | None = None, hi: float | None = None
) -> np.ndarray:
    """In place when possible: ``t = value`` for float64 raws ``v`` with ``src_frac`` fractional
    bits (the float64 twin of :meth:`FixedType.from_raw`). ``lo``/``hi`` bound ``v`` (raws)."""
    s = src_frac - t.frac
    if s > 0:
        scale = 2.0**-s
        v *= scale
        v = quantize_f64(t, v)
        if lo is not None and hi is not None:
            lo, hi = math.floor(lo * scale) - 1, math.ceil(hi * scale) + 1
    elif s < 0:
        if lo is None or hi is None:
            peak = float(np.abs(v).max(initial=0.0))
            lo, hi = -peak, peak
        scale = 2.0**-s
        lo, hi = lo * scale, hi * scale
        if max(abs(lo), abs(hi)) >= F64_EXACT:
            # the shifted value may be too large for a float64 integer: use the exact int64 rules
            return t.from_raw(v.astype(np.int64), src_frac).astype(np.float64)
        v *= scale
    return overflow_f64(t, v, lo, hi)


def from_float_f64(t: FixedType, x: np.ndarray) -> np.ndarray:
    """``t(double x)`` as float64 raws; a new array. Magnitudes beyond 2**52 lsb, infinities
    and NaN (random request bytes hold many) stay on the float64 path: such a double is an
    integer, so its wrap is an exact ``fmod``; NaN and infinities read as a magnitude beyond
    2**1023 with their sign, as :meth:`from_float` documents. ap_int's constructor, types with
    a negative fractional width and saturation bits take the int64 route.

    The one full-size copy is the conversion to float64, scaled in place after it (numpy's
    fused ``multiply(x, s, dtype=float64)`` measured 2.5x slower than astype + ``*=`` for
    float32). The sign of ``x`` is read from ``x`` itself (a float32 request reads as its
    float64 value does), and the wrap works in place: no second float64 copy of the input."""
    x = np.asarray(x)
    if t.frac < 0 or t.integer_type or not x.size:
        return t.from_float(x.astype(np.float64)).astype(np.float64)
    m = x.astype(np.float64)  # always a copy, so the caller's array is never written
    m *= 2.0**t.frac
    # the sign and zero-ness of x as double(x) has them: a float array reads directly
    xs = x if x.dtype.kind == "f" else x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        peak = max(-float(m.min()), float(m.max()))  # NaN makes the comparison false
    if peak < F64_EXACT:
        if t.quant == "AP_TRN":
            np.floor(m, out=m)
        else:
            q = np.floor(m)
            q += t._float_increment(m, q, xs)
            m = q
        return overflow_f64(t, m, -peak - 1, peak + 1)
    if t.overflow == "AP_WRAP" and t.sat_bits:
        return t.from_float(x.astype(np.float64)).astype(np.float64)
    special = np.isfinite(m)  # NaN, +-inf (also finite inputs whose scaling overflowed)
    np.logical_not(special, out=special)
    np.copyto(m, 0.0, where=special)
    if t.quant == "AP_TRN":
        q = np.floor(m, out=m)  # beyond 2**52 a double is an integer: floor changes nothing there
    else:
        q = np.floor(m)
        q += t._float_increment(m, q, xs)
    rmin, rmax = float(t.raw_min), float(t.raw_max)
    if t.overflow == "AP_WRAP":
        # q mod 2**W for any integer-valued double, exactly (np.fmod is exact too, but slow for
        # huge magnitudes): k * 2**W is exact, and q - k * 2**W is a multiple of q's ulp below
        # 2**W, so representable; if q's ulp exceeds 2**W, q * 2**-W is an integer and r = 0
        modulus = float(1 << t.width)
        k = q * (1.0 / modulus)
        np.floor(k, out=k)
        k *= modulus
        q -= k  # now in [0, 2**W)
        if t.signed:
            # q - 2**W where q > rmax, as the same exact floor arithmetic (q + 2**(W-1) < 2**53):
            # a masked subtract (``where=``) measured 10 ms and ``modulus * (q > rmax)`` 3.7 ms
            # on 16000 x 47 random request bytes, these four passes about 1.5 ms
            np.add(q, float(1 << (t.width - 1)), out=k)
            k *= 1.0 / modulus
            np.floor(k, out=k)
            k *= modulus
            q -= k
        np.copyto(q, 0.0, where=special)  # 2**1024 and beyond wrap to 0
        return q
    neg = np.signbit(xs) & (xs != 0)
    over = (q > rmax) | (special & ~neg)
    under = (q < rmin) | (special & neg)
    if t.overflow == "AP_SAT_ZERO":
        q[over | under] = 0.0
        return q
    lo = -rmax if (t.overflow == "AP_SAT_SYM" and t.signed) else rmin
    q[over] = rmax
    q[under] = lo
    return np.clip(q, lo, rmax, out=q)
