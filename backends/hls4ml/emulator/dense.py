"""``nnet::dense``: latency and resource strategies, replayed in the C++ loop order where the
order of additions can matter (saturating accumulators that may overflow). Products and
accumulators beyond 62 bits (hls4ml's auto-sized accumulators) run on Wide raws."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ..firmware_graph import Layer, UnsupportedLayerError, const_int
from ..fixed_point import F64_EXACT, FixedType, cast_f64, f64_capable, overflow_f64
from ..wide import LIMB, MASK, Wide
from .maths import blas_single_threaded
from .registry import register

if TYPE_CHECKING:
    from .model import FixedPointModel

#: float64 weights (n_in, n_out) -> function of the float64 op's input giving (rows, n_out) sums
ProductFactory = Callable[[np.ndarray], Callable[[np.ndarray], np.ndarray]]


# dense
def _dense_triplets(m: FixedPointModel, layer: Layer, n_in: int, n_out: int) -> list[tuple[int, int, int]]:
    """(input index, weight index, output index) of every product, in the C loop order."""
    kernel = layer.config.get("using", {}).get("kernel", "nnet::DenseLatency")
    rf = const_int(layer, "reuse_factor")
    total = n_in * n_out
    trip: list[tuple[int, int, int]] = []
    if kernel.endswith("DenseLatency"):
        return [(i, i * n_out + j, j) for i in range(n_in) for j in range(n_out)]
    multfactor = min(n_in, rf)
    multiplier_limit = -(-total // multfactor)
    if kernel.endswith("DenseResource_rf_leq_nin"):
        block = -(-total // rf)
        multscale = multiplier_limit // n_out
        if not ((multiplier_limit % n_out == 0 or rf >= n_in) and multiplier_limit == block):
            raise UnsupportedLayerError(f"{layer.describe()}: reuse factor {rf} violates the kernel's assertions")
        for ir in range(rf):
            w, i, o, step = ir, ir, 0, 0
            for _ in range(block):
                trip.append((i, w, o))
                w += rf
                i += rf
                if i >= n_in:
                    i = ir
                if step + 1 >= multscale:
                    step, o = 0, o + 1
                else:
                    step += 1
    elif kernel.endswith("DenseResource_rf_gt_nin_rem0"):
        ru = min(rf, total)
        block = -(-total // rf)
        if not ((multiplier_limit % n_out == 0 or ru >= n_in) and ru > n_in and ru % n_in == 0):
            raise UnsupportedLayerError(f"{layer.describe()}: reuse factor {rf} violates the kernel's assertions")
        outscale = ru // n_in
        outidx, outstep = [], 0
        for ir in range(ru):
            outidx.append(outstep)
            if (ir + 1) % n_in == 0:
                outstep += 1
        i = 0
        for ir in range(ru):
            w, o = ir, outidx[ir]
            for _ in range(block):
                trip.append((i, w, o))
                w += ru
                if w >= total:
                    break
                o += outscale
            i += 1
            if i >= n_in:
                i = 0
    else:
        raise UnsupportedLayerError(f"{layer.describe()}: dense kernel {kernel} is not supported")
    for i, w, o in trip:
        if not (0 <= i < n_in and 0 <= w < total and 0 <= o < n_out):
            raise UnsupportedLayerError(f"{layer.describe()}: kernel {kernel} indexes outside its arrays")
    return trip


@register("dense")
def build_dense(m: FixedPointModel, layer: Layer, in_t: FixedType, product_f64: ProductFactory | None = None):
    """``product_f64`` (convolutions): given the float64 weight matrix (n_in, n_out) on
    accum_t's grid, returns the function that computes the layer's (rows, n_out) products
    from the float64 op's input in another order (e.g. without gathering windows). Used only
    where the sum is exact in float64 whatever the order (the linear path below)."""
    n_in, n_out = const_int(layer, "n_in"), const_int(layer, "n_out")
    out_t = m.type_of(layer.template[1], layer)
    w_t, b_t = m.config_type(layer, "weight_t"), m.config_type(layer, "bias_t")
    w = m.weight_raws(layer, layer.args[2], w_t)
    b = m.weight_raws(layer, layer.args[3], b_t)
    if w.size != n_in * n_out or b.size != n_out:
        raise UnsupportedLayerError(f"{layer.describe()}: weight sizes {w.size}/{b.size} do not match {n_in}x{n_out}")
    trip = _dense_triplets(m, layer, n_in, n_out)
    return dense_from_arrays(m, layer, in_t, out_t, w, b, n_in, n_out, trip, product_f64=product_f64)


def product_terms(layer: Layer, in_t: FixedType, w_t: FixedType, w: np.ndarray):
    """What ``CONFIG_T::product<data_T, weight_t>::product(a, w)`` (nnet_mult.h) computes, as
    ``x * W + K`` on the data raws x, exact at ``frac`` fractional bits: ``(W, K, frac)``
    (every product is affine in its data raw, so the dense stays one matrix product). hls4ml
    picks the product from the precisions (``FPGABackend.product_type``): ``mult`` (a * w), ``weight_binary``
    (ap_uint<1> weights: w == 0 ? -a : a), ``weight_ternary`` (ap_int<2> weights: 0 if w == 0,
    -a if w == -1, else a, so a weight of -2 multiplies by +1), ``data_binary`` (ap_uint<1>
    data: a == 0 ? -w : w) and ``both_binary`` (ap_uint<1> both: the 0/1 value a == w).
    Every product is exact in its C++ return type (``decltype(-a)``, ``x_T``)."""
    product = layer.config.get("using", {}).get("product", "nnet::product::mult").split("::")[-1]
    zero = np.zeros(w.shape, np.int64)
    if product == "mult":
        return w, zero, in_t.frac + w_t.frac
    if product in ("weight_binary", "weight_ternary"):
        if product == "weight_binary":
            eff = np.where(w == 0, -1, 1)
        else:
            minus_one = w_t.frac >= 0 and w_t.raw_min <= -(1 << w_t.frac)
            eff = np.where(w == 0, 0, np.where(minus_one & (w == -(1 << max(w_t.frac, 0))), -1, 1))
        return eff.astype(np.int64), zero, in_t.frac
    if product in ("data_binary", "both_binary"):
        if not (in_t.integer_type and in_t.width == 1 and not in_t.signed):
            raise UnsupportedLayerError(f"{layer.describe()}: product {product} on {in_t} data (ap_uint<1> expected)")
        if product == "data_binary":
            # a == 0 ? -w : w  =  a * 2w - w, a in {0, 1}: affine in the raw a, no map needed
            return 2 * w, -w, w_t.frac
        if not (w_t.integer_type and w_t.width == 1 and not w_t.signed):
            raise UnsupportedLayerError(f"{layer.describe()}: product both_binary with {w_t} weights")
        # a, w in {0, 1}: (a == w) = a * (2w - 1) + (1 - w)
        return 2 * w - 1, 1 - w, 0
    raise UnsupportedLayerError(f"{layer.describe()}: product {product} is not supported")


def _is_bit(t: FixedType) -> bool:
    return t.integer_type and t.width == 1 and not t.signed


def _ceillog2(x: int) -> int:
    return 1 if x <= 2 else 1 + _ceillog2((x + 1) // 2)


def dense_from_arrays(
    m: FixedPointModel,
    layer: Layer,
    in_t: FixedType,
    out_t: FixedType,
    w: np.ndarray,
    b: np.ndarray,
    n_in: int,
    n_out: int,
    trip: list[tuple[int, int, int]],
    cast_n_in: int | None = None,
    product_f64: ProductFactory | None = None,
    groups: int = 1,
    buffer_key: object = None,
):
    """The dense layer of ``layer``'s config (accum_t, weight_t, bias_t, product) on weight
    raws ``w`` (flat, indexed as the kernel does) and bias raws ``b``, the products in the
    order of ``trip``. The result goes through ``nnet::cast`` (nnet_mult.h): ``res_T(acc)``,
    or, when data_T and weight_t are both exactly ap_uint<1>, ``res_T(ap_int<ceillog2(n_in)
    + 2>(acc * 2 - n_in))`` (the +-1 count of a binary net); ``cast_n_in`` is that n_in when
    the kernel's config differs from the matrix (EinsumDense's per-slice dense).

    ``groups`` > 1: the same weights applied to ``groups`` consecutive slices of ``n_in``
    inputs (EinsumDense's free data index), ``b`` holding ``groups * n_out`` biases, one
    slice after the other, and the result ``groups * n_out`` values in the same layout: one
    product per real multiplication instead of a block-diagonal matrix ``groups`` times
    larger (whose per-input loops touch every zero block). ``buffer_key``: the key of the
    float64 path's scratch buffers (default: the layer's), for layers built of several denses."""
    acc_t, w_t, b_t = (m.config_type(layer, k) for k in ("accum_t", "weight_t", "bias_t"))
    w_raw = w

    def block_diagonal():
        # the groups as one dense of a block-diagonal matrix (the same products, more zeros)
        big, big_trip = _block_diagonal(w_raw, trip, n_in, n_out, groups)
        n_cast = cast_n_in or n_in
        args = (big, b, n_in * groups, n_out * groups, big_trip, n_cast, product_f64)
        return dense_from_arrays(m, layer, in_t, out_t, *args, buffer_key=buffer_key)

    w, k, fp = product_terms(layer, in_t, w_t, w)
    wide = in_t.width + w_t.width + 1 > 62 or any(t.wide for t in (in_t, acc_t, out_t))
    if groups > 1 and wide:
        return block_diagonal()  # Wide raws have no grouped layout
    G = groups
    if not wide:
        m.check_width(layer, in_t.width + w_t.width + 1, "the product")
    wmat = np.zeros((n_in, n_out), np.int64)
    kmat = np.zeros((n_in, n_out), np.int64)
    used = np.zeros((n_in, n_out), np.int64)
    for i, wi, o in trip:
        wmat[i, o] += w[wi]
        kmat[i, o] += k[wi]
        used[i, o] += 1
    bias_acc = acc_t.cast(b, b_t)
    fa = acc_t.frac
    modular = acc_t.overflow == "AP_WRAP" and acc_t.sat_bits == 0
    xmax = in_t.max_abs_raw()
    linear = fa >= fp and used.max(initial=0) <= 1
    bounds = _partial_sum_bounds(wmat, kmat, bias_acc, in_t, fa - fp) if linear else None
    in_range = bounds is not None and acc_t.raw_min <= bounds[0] and bounds[1] <= acc_t.raw_max
    if linear and not modular:
        # saturating accumulators: the order of additions cannot matter if no partial sum can leave the range
        linear = in_range
    if modular and in_range:
        modular = False  # no sum leaves accum_t's range: its wrap would change nothing
    # an accumulator of whole numbers (integer products, an integer bias) converts to ap_int<K> exactly
    whole = in_range and fp == 0 and fa >= 0 and all(v % (1 << fa) == 0 for v in Wide.of(bias_acc).to_ints().ravel())
    binary_cast = _dense_cast(
        layer, in_t, w_t, acc_t, out_t, n_in if cast_n_in is None else cast_n_in, bounds if whole else None
    )
    if binary_cast is not None:
        finish = binary_cast
    elif out_t == acc_t:
        finish = _same  # every path below leaves acc inside accum_t's range: res_T(acc) is acc
    else:
        finish = lambda acc: out_t.cast(acc, acc_t)  # noqa: E731
    if wide:
        if kmat.any() or binary_cast is not None:
            raise UnsupportedLayerError(
                f"{layer.describe()}: binary or ternary products beyond 62 bits are not emulated"
            )
        return _dense_wide(m, layer, wmat, bias_acc, in_t, acc_t, out_t, fp, linear, modular)
    if linear:
        matmul = _exact_matmul(wmat, xmax)
        shift = np.int64(fa - fp)
        bias_lin = bias_acc + np.tile(kmat.sum(axis=0) << shift, G)  # the constant parts of the products

        def dense_linear(x):
            acc = matmul(x.reshape(-1, n_in)).reshape(x.shape[0], G * n_out)
            if shift:
                acc <<= shift
            acc += bias_lin
            if modular:
                acc = acc_t.wrap(acc)
            return finish(acc)

        fop = None
        if binary_cast is None:
            fop = _dense_f64(m, wmat, bias_lin, in_t, acc_t, out_t, fa - fp, modular, product_f64, G, buffer_key)
        return dense_linear, out_t, fop
    same = binary_cast is None and out_t == acc_t  # res_T(acc) changes nothing
    if used.max(initial=0) <= 1:  # one product per (input, output): each is rounded on its own
        fast = _rounded_products(layer, acc_t, fp, xmax, wmat, kmat, bias_acc, G, modular, None if same else finish)
        if fast is not None:
            return fast, out_t
    if G > 1:
        return block_diagonal()
    if modular:
        # each product is quantized into accum_t on its own, the sum is modular: group by input
        rows = [(i, wmat[i], kmat[i], None if (used[i] > 0).all() else used[i] > 0) for i in range(n_in)]
        quantize = fast_from_raw(acc_t, fp, overflow=False)  # the wrap of the sum covers the products'

        def dense_per_input(x):
            acc = np.broadcast_to(bias_acc, (x.shape[0], n_out)).copy()
            for i, wrow, krow, mask in rows:
                prod = quantize(x[:, i : i + 1] * wrow + krow)
                acc += prod if mask is None else np.where(mask, prod, 0)
            acc = acc_t.wrap(acc)
            return acc if (binary_cast is None and out_t == acc_t) else finish(acc)

        return dense_per_input, out_t

    # saturating accumulator that may overflow: replay every addition in the C loop order. Only
    # the order of the additions into each accumulator matters, so the k-th addition of every
    # output is one vector operation (a round; the latency kernel's rounds are its inputs)
    per_out: list[list[tuple[int, int]]] = [[] for _ in range(n_out)]
    for i, wi, o in trip:
        per_out[o].append((i, wi))
    rounds = []
    for r in range(max((len(seq) for seq in per_out), default=0)):
        picked = [(seq[r][0], seq[r][1], o) for o, seq in enumerate(per_out) if r < len(seq)]
        ins = np.array([i for i, _, _ in picked], np.intp)
        outs = np.array([o for _, _, o in picked], np.intp)
        src = slice(int(ins[0]), int(ins[0]) + 1) if (ins == ins[0]).all() else ins  # one input: broadcast
        dst = slice(None) if np.array_equal(outs, np.arange(n_out)) else outs
        wis = [wi for _, wi, _ in picked]
        rounds.append((src, w[wis], k[wis], dst))
    quantize, accumulate = fast_from_raw(acc_t, fp), fast_from_raw(acc_t, fa)

    def dense_sequential(x):
        acc = np.broadcast_to(bias_acc, (x.shape[0], n_out)).copy()
        for src, wv, kv, dst in rounds:
            acc[:, dst] = accumulate(acc[:, dst] + quantize(x[:, src] * wv + kv))
        return finish(acc)

    return dense_sequential, out_t


def _same(acc: np.ndarray) -> np.ndarray:
    return acc


def _partial_sum_bounds(wmat: np.ndarray, kmat: np.ndarray, bias_acc, in_t: FixedType, shift: int) -> tuple[int, int]:
    """(lowest, highest) raw any accumulator of a linear dense can hold at any point of its
    sum, whatever the order of additions: the bias plus every negative (positive) extreme of
    the products ``x * w + k`` over x in in_t's raw range, on accum_t's grid (``shift``).
    Python integers, so exact at any width."""
    x_lo, x_hi = int(in_t.raw_min), int(in_t.raw_max)
    peak = max(-x_lo, x_hi) * int(np.abs(wmat).max(initial=0)) + int(np.abs(kmat).max(initial=0))
    # int64 sums where they cannot overflow (a large layer's bound at build time), else Python ints
    dtype = np.int64 if peak * max(wmat.shape[0], 1) < 2**62 else object
    w, k = wmat.astype(dtype), kmat.astype(dtype)
    p_lo = np.minimum(w * x_lo, w * x_hi) + k
    p_hi = np.maximum(w * x_lo, w * x_hi) + k
    neg = [int(v) for v in np.where(p_lo < 0, p_lo, 0).sum(axis=0)]
    pos = [int(v) for v in np.where(p_hi > 0, p_hi, 0).sum(axis=0)]
    bias = [int(v) for v in Wide.of(bias_acc).to_ints().ravel()]
    # a grouped dense (EinsumDense) holds one bias per group and output: output o of every group
    n_out = max(len(neg), 1)
    lo = min((b + (neg[j % n_out] << shift) for j, b in enumerate(bias)), default=0)
    hi = max((b + (pos[j % n_out] << shift) for j, b in enumerate(bias)), default=0)
    return min(lo, 0, *bias), max(hi, 0, *bias)


def _block_diagonal(w: np.ndarray, trip: list[tuple[int, int, int]], n_in: int, n_out: int, groups: int):
    """``groups`` copies of the (flat ``n_in * n_out``) weights along the diagonal of one
    matrix, and each copy's products in ``trip``'s order: group g reads inputs g * n_in + i
    and writes outputs g * n_out + o."""
    big_out = n_out * groups
    big = np.zeros(n_in * groups * big_out, np.int64)
    big_trip = []
    for g in range(groups):
        for i, wi, o in trip:
            row, col = g * n_in + i, g * n_out + o
            big[row * big_out + col] = w[wi]
            big_trip.append((row, row * big_out + col, col))
    return big, big_trip


def _rounded_products(
    layer: Layer,
    acc_t: FixedType,
    fp: int,
    xmax: int,
    wmat: np.ndarray,
    kmat: np.ndarray,
    bias_acc: np.ndarray,
    groups: int,
    modular: bool,
    finish: Callable[[np.ndarray], np.ndarray] | None,
) -> Callable[[np.ndarray], np.ndarray] | None:
    """The dense whose products are each quantized into accum_t (fewer fractional bits than
    the product's ``fp``) before they are added, on the narrowest exact arithmetic: one
    vector operation per input (the latency kernel's order: input i's products go into every
    output at round i), the product's rounding done in place on ``(rows, groups, n_out)``.

    * int32: for a modular (AP_WRAP) accumulator of W bits, the rounded product modulo 2**W
      depends only on the product modulo 2**(W + s) (s the bits dropped, the rounding reads
      bit s and below), so int32's wrapping products and sums are exact when W + s <= 32;
      for a saturating one, when every product and partial sum stays below 2**31.
    * float64: the product times 2**-s is exact below 2**53, and floor (AP_TRN), floor of
      + 0.5 (AP_RND: half up) and rint (AP_RND_CONV: half to even) are its roundings; used
      for AP_RND_CONV (one pass instead of five) or where int32 is not exact.

    Only AP_TRN/AP_RND/AP_RND_CONV with AP_WRAP (modular) or AP_SAT accumulators; None for
    anything else (the int64 forms below run). The saturating accumulator's order of
    additions is the latency kernel's (each output gets its inputs in order), so it is used
    for DenseLatency only; the caller checks that no (input, output) pair has two products."""
    s = fp - acc_t.frac
    quant = acc_t.quant
    if quant not in ("AP_TRN", "AP_RND", "AP_RND_CONV") or acc_t.sat_bits or not 0 < s < 31:
        return None
    if not modular:
        kernel = layer.config.get("using", {}).get("kernel", "nnet::DenseLatency")
        if acc_t.overflow != "AP_SAT" or not kernel.endswith("DenseLatency"):
            return None
    n_in, n_out = wmat.shape
    wmax, kmax = int(np.abs(wmat).max(initial=0)), int(np.abs(kmat).max(initial=0))
    pmax = xmax * wmax + kmax + (1 << s)  # |product| plus the rounding offset
    qmax = (pmax >> s) + 1
    width = acc_t.width
    if modular:
        int32_ok = width + s <= 32
        f64_ok = pmax < 2**52 and (int(np.abs(bias_acc).max(initial=0)) + n_in * qmax) < 2**52
    else:
        int32_ok = pmax < 2**31 and width <= 30
        f64_ok = pmax < 2**52 and width <= 52
    use_f64 = f64_ok and (quant == "AP_RND_CONV" or not int32_ok)
    if not (use_f64 or int32_ok):
        return None
    dt = np.float64 if use_f64 else np.int32
    # inputs whose weights and constants are all zero add nothing (rounded zero is zero)
    live = [i for i in range(n_in) if wmat[i].any() or kmat[i].any()]
    if use_f64:
        scale = 2.0**-s
        wrows = [wmat[i].astype(np.float64) * scale for i in live]
        krows = [kmat[i].astype(np.float64) * scale if kmat[i].any() else None for i in live]
    else:
        # modular: weights and constants wrap modulo 2**32 with everything else (exact, above)
        wrows = [wmat[i].astype(np.int32) for i in live]
        krows = [kmat[i].astype(np.int32) if kmat[i].any() else None for i in live]
    bias_g = bias_acc.reshape(groups, n_out).astype(dt)
    shift, one = np.int32(s), np.int32(1)
    half = np.int32(1 << (s - 1))
    lo, hi = dt(acc_t.raw_min), dt(acc_t.raw_max)
    # a product's own saturation into accum_t, needed only if a rounded product can leave it
    limit, cap = min(acc_t.raw_max, -acc_t.raw_min), max(acc_t.raw_max, -acc_t.raw_min)
    clip_products = not modular and qmax > limit
    # saturation of the sum only from the first input after which some partial sum (bias plus
    # rounded products, per output) can leave accum_t's range; exact Python ints
    clip_sums = [False] * len(live)
    if not modular:
        bound = [abs(int(v)) for v in bias_acc.ravel()]
        for r, i in enumerate(live):
            for o in range(n_out):
                q = ((xmax * abs(int(wmat[i, o])) + abs(int(kmat[i, o])) + (1 << s)) >> s) + 1
                for g in range(groups):
                    bound[g * n_out + o] += min(q, cap)  # a saturated product is at most cap
            clip_sums[r] = max(bound, default=0) > limit
            if clip_sums[r]:
                clip_sums[r:] = [True] * (len(live) - r)
                break
    wrap_shift, wrap_mask = np.int32(32 - width), np.int32((1 << width) - 1 if width < 32 else -1)

    def rounding(t: np.ndarray) -> None:
        if use_f64:
            if quant == "AP_RND_CONV":
                np.rint(t, out=t)
            else:
                if quant == "AP_RND":
                    t += 0.5
                np.floor(t, out=t)
        elif quant == "AP_RND_CONV":
            t += (t >> shift) & one  # + 1 where the kept part is odd: the tie goes to even
            t += half - one
            t >>= shift
        else:
            if quant == "AP_RND":
                t += half
            t >>= shift

    def dense_rounded(x):
        rows = x.shape[0]
        xs = x.reshape(rows, groups, n_in).astype(dt)
        acc = np.empty((rows, groups, n_out), dt)
        acc[...] = bias_g
        t = np.empty_like(acc)
        for i, wrow, krow, clip_sum in zip(live, wrows, krows, clip_sums):
            np.multiply(xs[:, :, i : i + 1], wrow, out=t)
            if krow is not None:
                t += krow
            rounding(t)
            if clip_products:
                np.clip(t, lo, hi, out=t)
            acc += t
            if clip_sum:
                np.clip(acc, lo, hi, out=acc)
        if modular and not use_f64:
            # accum_t's wrap in place on the int32 sums (exact modulo 2**32, W < 32 bits)
            if acc_t.signed:
                acc <<= wrap_shift
                acc >>= wrap_shift
            else:
                acc &= wrap_mask
        out = acc.reshape(rows, groups * n_out).astype(np.int64)
        if modular and use_f64:
            out = acc_t.wrap(out)
        return out if finish is None else finish(out)

    return dense_rounded


def _dense_cast(
    layer: Layer,
    in_t: FixedType,
    w_t: FixedType,
    acc_t: FixedType,
    out_t: FixedType,
    n_in: int,
    acc_bounds: tuple[int, int] | None = None,
) -> Callable[[np.ndarray], np.ndarray] | None:
    """``nnet::cast<data_T, res_T, CONFIG_T>(acc)`` (nnet_mult.h), chosen by the types alone
    (std::is_same with ap_uint<1>), whatever the product; None for the plain ``res_T(acc)``.
    ``acc_bounds`` (the lowest and highest acc raw, given only when every acc value is a whole
    number) let the casts that cannot change a value be skipped: ``2 * acc - n_in`` that fits
    ap_int<K>, into a res_T that holds every ap_int<K> value exactly, is a shift of the raws."""
    if not (_is_bit(in_t) and _is_bit(w_t)):
        return None
    # x * 2 - n_in is exact (ap_fixed arithmetic), then static_cast to ap_int<K>: C truncation
    # toward zero of any fraction, K low bits kept
    k_t = FixedType.parse(f"ap_int<{_ceillog2(n_in) + 2}>")
    offset = np.int64(n_in) << np.int64(acc_t.frac) if acc_t.frac >= 0 else None
    if offset is None:
        raise UnsupportedLayerError(f"{layer.describe()}: binary dense with accum_t {acc_t} (negative fraction)")
    m_width = acc_t.width + 2 + max(n_in.bit_length(), 1)
    if m_width > 62:
        raise UnsupportedLayerError(f"{layer.describe()}: binary cast needs {m_width} bits")

    def binary_cast(acc):
        return out_t.cast(k_t.from_raw(acc * 2 - offset, acc_t.frac), k_t)

    if acc_bounds is None or out_t.frac < 0:
        return binary_cast
    fa = acc_t.frac
    k_lo, k_hi = (2 * v - int(offset) >> fa for v in acc_bounds)  # whole numbers: exact shifts
    exact_k = k_t.raw_min <= k_lo and k_hi <= k_t.raw_max
    # every ap_int<K> value is on res_T's grid (frac >= 0) and inside its range
    exact_out = k_t.raw_min << out_t.frac >= out_t.raw_min and k_t.raw_max << out_t.frac <= out_t.raw_max
    if not (exact_k and exact_out):
        return binary_cast
    up, down = np.int64(max(out_t.frac - fa, 0)), np.int64(max(fa - out_t.frac, 0))

    def binary_cast_exact(acc):
        acc *= 2
        acc -= offset
        if up:
            acc <<= up
        elif down:
            acc >>= down  # 2 * acc - offset is a multiple of 2**fa: exact
        return acc

    return binary_cast_exact


def _dense_wide(m: FixedPointModel, layer: Layer, wmat, bias_acc, in_t, acc_t, out_t, fp: int, linear, modular):
    """Dense whose products, accumulator or types need more than 62 bits (hls4ml's auto-sized
    accumulators): the linear form on Wide raws. x is cut into slices small enough that each
    slice's product with the weights is exact in float64 BLAS; the partial products are
    shifted into place and summed in two int64 limbs (``wide.py``)."""
    m.allow_wide()
    colsum = int(np.abs(wmat).sum(axis=0).max(initial=0))
    bits = in_t.width + max(1, colsum.bit_length()) + max(0, acc_t.frac - fp)
    m.check_width(layer, bits, "the accumulated products", wide=True)
    m.check_width(layer, acc_t.width + 1, "the accumulator plus bias", wide=True)
    if not linear:
        raise UnsupportedLayerError(
            f"{layer.describe()}: {acc_t} accumulating products of {fp} fractional bits in this "
            "order is not emulated beyond 62 bits"
        )
    slice_bits = min(31, (2**53 // max(colsum, 1)).bit_length() - 1)  # 2**slice_bits * colsum <= 2**53
    if slice_bits < 4:
        raise UnsupportedLayerError(f"{layer.describe()}: weights too large for exact sliced products")
    wf = wmat.astype(np.float64)
    mask = np.int64((1 << slice_bits) - 1)

    def chunks(v: np.ndarray, bits: int, base: int, signed_top: bool):
        # v's value as sum(chunk * 2**offset): unsigned slices, the top one keeps v's sign
        n = max(1, -(-bits // slice_bits))
        out = []
        for k in range(n):
            part = v >> np.int64(k * slice_bits)
            if k < n - 1 or not signed_top:
                part = part & mask
            out.append((part, base + k * slice_bits))
        return out

    shift = acc_t.frac - fp
    bias = Wide.of(bias_acc)
    n_in, n_out = wf.shape
    wf_t = np.ascontiguousarray(wf.T)

    def dense_wide(x):
        if isinstance(x, Wide):
            parts = chunks(x.lo, 62, 0, False) + chunks(x.hi, max(1, in_t.width - 62), 62, True)
        else:
            parts = chunks(x, in_t.width, 0, True)
        rows = x.shape[0]
        stacked = np.empty((len(parts) * rows, n_in))
        for k, (part, _) in enumerate(parts):
            stacked[k * rows : (k + 1) * rows] = part  # below 2**31: exact in float64
        if stacked.shape[0] >= 64 * n_out:
            # one BLAS call, exact in any orientation; OpenBLAS is slow at tall, narrow products
            prods = np.matmul(wf_t, stacked.T).T.astype(np.int64)
        else:
            prods = (stacked @ wf).astype(np.int64)
        # sum(prods_k * 2**(offset_k + shift)) + bias straight into the two limbs: each slice's
        # part below bit 62 goes into lo (then carried), the rest into hi (modulo 2**126, as shl)
        hi = np.broadcast_to(bias.hi, (rows, n_out)).copy()
        lo = np.broadcast_to(bias.lo, (rows, n_out)).copy()
        for k, (_, offset) in enumerate(parts):
            p = prods[k * rows : (k + 1) * rows]
            o = offset + shift
            if o >= LIMB:
                if o - LIMB < 64:
                    hi += p << np.int64(o - LIMB)
                continue
            hi += p >> np.int64(LIMB - o)
            lo += (p & np.int64((1 << (LIMB - o)) - 1)) << np.int64(o)  # < 2**62: lo + it < 2**63
            hi += lo >> np.int64(LIMB)
            lo &= MASK
        acc = Wide(hi, lo)
        if modular:
            acc = acc_t.from_raw(acc, acc_t.frac)  # accum_t's wrap
        return acc if out_t == acc_t else out_t.cast(acc, acc_t)

    return dense_wide, out_t


def fast_from_raw(t: FixedType, frac: int, overflow: bool = True) -> Callable[[np.ndarray], np.ndarray]:
    """``raw -> t.from_raw(raw, frac)`` in a few passes for the modes accumulators and states
    use (AP_TRN, AP_RND or AP_RND_CONV; AP_WRAP or AP_SAT): an offset and a shift, then the
    wrap or a clip; ``from_raw`` itself for every other case. ``overflow=False`` leaves out an
    AP_WRAP type's wrap, for terms of a sum that is wrapped once at the end."""
    s = frac - t.frac
    modes = ("AP_TRN", "AP_RND", "AP_RND_CONV")
    if t.quant not in modes or t.overflow not in ("AP_WRAP", "AP_SAT") or t.sat_bits or not 0 <= s < 62:
        return lambda raw: t.from_raw(raw, frac)
    shift, lo, hi = np.int64(s), np.int64(t.raw_min), np.int64(t.raw_max)
    # floor((raw + half) / 2**s) rounds half up; half - 1 plus the floor's lowest bit rounds half to even
    half = np.int64(1 << (s - 1) if s and t.quant != "AP_TRN" else 0)
    even = s > 0 and t.quant == "AP_RND_CONV"
    one = np.int64(1)
    wrap = t.overflow == "AP_WRAP"

    def cast(raw):
        if even:
            q = (raw + (half - one) + ((raw >> shift) & one)) >> shift
        elif shift:
            q = (raw + half if half else raw) >> shift
        else:
            q = raw
        if wrap:
            return t.wrap(q) if overflow else q
        return np.clip(q, lo, hi)

    return cast


def _dense_f64(
    m: FixedPointModel,
    wmat,
    bias_acc,
    in_t: FixedType,
    acc_t: FixedType,
    out_t: FixedType,
    shift: int,
    modular,
    product_f64: ProductFactory | None = None,
    groups: int = 1,
    buffer_key: object = None,
):
    """The linear dense on float64 raws: one BLAS product with the weights pre-scaled to
    accum_t's grid (or ``product_f64``'s product: the bounds below make every partial sum an
    exact float64 integer, so any order of additions gives the same sums), the bias added in
    place, then accum_t's wrap and the cast to the result type, skipped where the bounds of
    the sums show they cannot change anything. ``groups``: as ``dense_from_arrays``'s (one
    product of the inputs reshaped to ``groups`` times the rows, ``bias_acc`` per group)."""
    if not (f64_capable(in_t) and f64_capable(acc_t) and f64_capable(out_t)):
        return None
    wf = wmat.astype(np.float64) * 2.0**shift
    bf = bias_acc.astype(np.float64)
    # bounds of every partial sum (products of in_t's extreme raws), per output
    lo_x, hi_x = float(in_t.raw_min), float(in_t.raw_max)
    hi_p = np.maximum(wf * lo_x, wf * hi_x).sum(axis=0)
    lo_p = np.minimum(wf * lo_x, wf * hi_x).sum(axis=0)
    hi_p, lo_p = np.tile(hi_p, groups), np.tile(lo_p, groups)
    peak = float(np.abs(wf).sum(axis=0).max(initial=0.0)) * max(-lo_x, hi_x) + float(np.abs(bf).max(initial=0.0))
    if peak * (1 + 1e-9) + 2 >= F64_EXACT:
        return None  # partial sums would not be exact in float64: the int64 path runs
    margin = 1e-9 * peak + 2
    lo, hi = float((lo_p + bf).min(initial=0.0)) - margin, float((hi_p + bf).max(initial=0.0)) + margin
    if modular and not (acc_t.raw_min <= lo and hi <= acc_t.raw_max):
        acc_lo, acc_hi = float(acc_t.raw_min), float(acc_t.raw_max)
    else:
        modular, acc_lo, acc_hi = False, lo, hi
    key = m.layer_key if buffer_key is None else buffer_key
    n_in, n_out = wf.shape
    product = product_f64(wf) if product_f64 is not None else None

    wf_t = np.ascontiguousarray(wf.T)
    single_blas = blas_single_threaded()

    def dense_f64(x):
        if product is not None:
            acc = product(x)
            rows = acc.shape[0]
        else:
            rows = x.shape[0]
            if groups > 1:
                x = x.reshape(rows * groups, n_in)
                rows = x.shape[0]
            acc = m.scratch(key, (rows, n_out))
            if rows >= 64 * n_out and not single_blas:
                # multithreaded OpenBLAS is slow at tall, narrow products (a convolution's windows:
                # a million rows times 18x4 weights, 10x slower than the same product transposed);
                # every sum is an exact integer below 2**53 (checked above), so the orientation
                # changes no bit. With one BLAS thread (the server's default, cli.py) the plain
                # product is the faster one and needs no transposing copy back into acc: measured
                # on 2 busy cores, 16000 x 47 @ 47 x 36 1.9 ms vs 6.0 ms + 0.4 ms copy, and a
                # million rows times 18x4 22 ms vs 54 ms (2 BLAS threads: 56 vs 80 ms, 9x4 454 vs 51)
                acc[...] = np.matmul(wf_t, x.T, out=m.scratch((key, "t"), (n_out, rows))).T
            else:
                np.matmul(x, wf, out=acc)
            if groups > 1:
                rows //= groups
                acc = acc.reshape(rows, groups * n_out)
        # a bias row broadcast over a short inner axis is slow in numpy: add a full-size copy
        acc += m.scratch((key, "bias"), (rows, groups * n_out), fill=bf)
        if modular:
            acc = overflow_f64(acc_t, acc)
        return cast_f64(out_t, acc, acc_t.frac, acc_lo, acc_hi)

    return dense_f64


def _exact_matmul(wmat: np.ndarray, xmax: int) -> Callable[[np.ndarray], np.ndarray]:
    """x_raw @ wmat exactly: float64 BLAS while every partial sum stays below 2**53,
    splitting x into bit slices when it would not; int64 maths as the last resort."""
    colsum = int(np.abs(wmat).sum(axis=0).max(initial=0))
    wf = wmat.astype(np.float64)
    if colsum == 0 or xmax * colsum < 2**53:
        return lambda x: (x.astype(np.float64) @ wf).astype(np.int64)
    slice_bits = (2**53 // colsum).bit_length() - 1  # 2**slice_bits * colsum < 2**53
    if slice_bits >= 8 and int(np.abs(wmat).max(initial=0)) * 4096 < 2**62:
        nslices = -(-(xmax.bit_length() + 1) // slice_bits)
        mask = np.int64((1 << slice_bits) - 1)

        def sliced(x):
            acc = np.zeros((x.shape[0], wmat.shape[1]), np.int64)
            rest = x
            for k in range(nslices):
                low = rest & mask  # non-negative slice; the last slice carries the sign
                rest = rest >> np.int64(slice_bits)
                part = (low.astype(np.float64) @ wf).astype(np.int64)
                acc += part << np.int64(k * slice_bits)
            acc += (rest.astype(np.float64) @ wf).astype(np.int64) << np.int64(nslices * slice_bits)
            return acc

        return sliced
    return lambda x: x @ wmat
