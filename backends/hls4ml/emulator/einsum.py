"""``nnet::einsum`` (nnet_einsum.h, PyTorch ``torch.einsum`` of two tensors) and
``nnet::einsum_dense`` (nnet_einsum_dense.h, Keras ``EinsumDense``), io_parallel, latency.

Both transpose their inputs into (inplace, free, contract) order, contract, and transpose
the result back; hls4ml writes each transpose as a ``transpose_config`` struct with its
``to_shape``/``perm_strides`` arrays in parameters.h, read here into gather tables."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..firmware_graph import Layer, UnsupportedLayerError, const_int
from ..fixed_point import FixedType
from .dense import dense_from_arrays
from .dot import accumulate
from .registry import register

if TYPE_CHECKING:
    from .model import FixedPointModel


def _transpose_table(m: FixedPointModel, layer: Layer, conf: str, n: int) -> np.ndarray:
    """``nnet::transpose`` with config ``conf``: ``res[i] = data[transfer_idx(i)]``."""
    to_shape = m.graph.arrays.get(f"{conf}_to_shape")
    strides = m.graph.arrays.get(f"{conf}_perm_strides")
    cfg = m.graph.configs.get(conf)
    if to_shape is None or strides is None or cfg is None or len(to_shape) != len(strides):
        raise UnsupportedLayerError(f"{layer.describe()}: transpose config {conf} not found in parameters.h")
    if int(np.prod(to_shape)) != n:
        raise UnsupportedLayerError(f"{layer.describe()}: transpose {conf} moves {np.prod(to_shape)} values, not {n}")
    index = np.arange(n)
    src = np.zeros(n, np.int64)
    for d in range(len(to_shape) - 1, -1, -1):  # transfer_idx, vectorised over the outputs
        src += (index % to_shape[d]) * strides[d]
        index //= to_shape[d]
    if n and (src.max() >= n or src.min() < 0):
        raise UnsupportedLayerError(f"{layer.describe()}: transpose {conf} reads outside its input")
    return src


def _typedef_conf(layer: Layer, key: str) -> str:
    conf = layer.config.get("types", {}).get(key)
    if conf is None:
        raise UnsupportedLayerError(f"{layer.describe()}: {layer.config_name} names no {key}")
    return conf


@register("einsum_dense")
def build_einsum_dense(m: FixedPointModel, layer: Layer, in_t: FixedType):
    """For every inplace index i and free data index l0, ``nnet::dense`` (its dense_conf:
    DenseLatency, its product, accum_t, weight_t, bias_t) of the C contracted inputs with
    kernel slice i and the bias slice (i, l0), into res_T; then the output transpose.

    Emulated per inplace index i as one dense of kernel slice i applied to the L0 slices of
    C inputs (``dense_from_arrays``' groups): each output's additions are the kernel's, in its
    order, and only the real products are computed (a block-diagonal matrix would make the
    per-product paths touch L0 times more zeros). Only the latency strategy (hls4ml 1.3's
    only non-DA one)."""
    if len(layer.args) != 4:
        raise UnsupportedLayerError(f"{layer.describe()}: einsum_dense without weights (distributed arithmetic)")
    L0, L1, C, n_inp = (const_int(layer, k) for k in ("n_free_data", "n_free_kernel", "n_contract", "n_inplace"))
    dense_name, dense_cfg = m.sub_config(layer, "dense_conf")
    kernel = dense_cfg.get("using", {}).get("kernel", "")
    if not kernel.endswith("DenseLatency"):
        raise UnsupportedLayerError(f"{layer.describe()}: einsum_dense with dense kernel {kernel or '?'}")
    dense = Layer("dense", layer.name, layer.template, layer.args, dense_name, dense_cfg, weights=layer.weights)
    if const_int(dense, "n_in") != C or const_int(dense, "n_out") != L1:
        raise UnsupportedLayerError(f"{layer.describe()}: {dense_name} sizes differ from the einsum's")
    out_t = m.type_of(layer.template[1], layer)
    w_t, b_t = m.config_type(dense, "weight_t"), m.config_type(dense, "bias_t")
    w = m.weight_raws(layer, layer.args[2], w_t)
    b = m.weight_raws(layer, layer.args[3], b_t)
    if w.size != n_inp * L1 * C or b.size != n_inp * L0 * L1:
        raise UnsupportedLayerError(f"{layer.describe()}: weight sizes {w.size}/{b.size} do not match the einsum")
    n_in, n_out = n_inp * L0 * C, n_inp * L0 * L1
    src_in = _transpose_table(m, layer, _typedef_conf(layer, "tpose_inp_conf"), n_in)
    src_out = _transpose_table(m, layer, _typedef_conf(layer, "tpose_out_conf"), n_out)
    # slice i: inputs (i*L0+l0)*C + c, outputs (i*L0+l0)*L1 + j, weight i*L1*C + c*L1 + j, in
    # DenseLatency's order (c outer, j inner); its L0 groups are consecutive in and out
    trip = [(c, c * L1 + j, j) for c in range(C) for j in range(L1)]
    ops, fops = [], []
    for i in range(n_inp):
        wi, bi = w[i * L1 * C : (i + 1) * L1 * C], b[i * L0 * L1 : (i + 1) * L0 * L1]
        key = (m.layer_key, "inplace", i)  # each slice's own float64 buffers (its bias)
        built = dense_from_arrays(m, dense, in_t, out_t, wi, bi, C, L1, trip, cast_n_in=C, groups=L0, buffer_key=key)
        ops.append(built[0])
        fops.append(built[2] if len(built) > 2 else None)
    width = L0 * C

    def run(slices, x):
        x = x[:, src_in]
        if len(slices) == 1:
            return slices[0](x)[:, src_out]
        return np.concatenate([op(x[:, i * width : (i + 1) * width]) for i, op in enumerate(slices)], axis=1)[
            :, src_out
        ]

    def einsum_dense(x):
        return run(ops, x)

    def einsum_dense_f64(x):
        return run(fops, x)

    return einsum_dense, out_t, (einsum_dense_f64 if all(f is not None for f in fops) else None)


@register("einsum")
def build_einsum(m: FixedPointModel, layer: Layer, in_t: FixedType):
    """``accum_buf = 0; accum_buf += product(a, b)`` over the contracted index (each ``+=``
    quantizes the exact sum into accum_t), ``res_T(accum_buf)``, then the output transpose.
    Only ``product::mult`` (hls4ml picks another one for 1-bit xnor inputs only)."""
    t0, t1 = m.in_types
    product = layer.config.get("using", {}).get("product", "nnet::product::mult").split("::")[-1]
    if product != "mult":
        raise UnsupportedLayerError(f"{layer.describe()}: einsum with product {product} is not supported")
    L0, L1, C, n_inp = (const_int(layer, k) for k in ("n_free0", "n_free1", "n_contract", "n_inplace"))
    out_t = m.type_of(layer.template[2], layer)
    acc_t = m.config_type(layer, "accum_t")
    m.check_width(layer, t0.width + t1.width, "data0 * data1")
    src0 = _transpose_table(m, layer, _typedef_conf(layer, "tpose_inp0_config"), n_inp * L0 * C)
    src1 = _transpose_table(m, layer, _typedef_conf(layer, "tpose_inp1_config"), n_inp * L1 * C)
    src_out = _transpose_table(m, layer, _typedef_conf(layer, "tpose_out_conf"), n_inp * L0 * L1)
    frac = t0.frac + t1.frac
    bound = t0.max_abs_raw() * t1.max_abs_raw()
    acc = accumulate(layer, acc_t, frac, C, bound, each_quantized=False)

    def einsum(a, b):
        rows = a.shape[0]
        x0 = a[:, src0].reshape(rows, n_inp, L0, 1, C)
        x1 = b[:, src1].reshape(rows, n_inp, 1, L1, C)
        terms = x0 * x1  # (rows, n_inp, L0, L1, C), exact products
        res = out_t.cast(acc(terms), acc_t).reshape(rows, n_inp * L0 * L1)
        return res[:, src_out]

    return einsum, out_t
