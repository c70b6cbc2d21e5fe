"""Lookup-table activations outside activations.py: the table-based ``softsign`` and hls4ml's
``unary_lut`` (HGQ's UnaryLUT: a table indexed by the input's bits).

softsign follows sigmoid exactly (nnet_activation.h): a ``table_size`` table of
``softsign_fcn_float`` over [-8, 8), index ``int(x * N / 16) + 8 * N / 16`` clamped; the table
is rebuilt as the C++ builds it (float argument, double division, float result, then table_t).

unary_lut::

    nnet::unary_lut<data_T, res_T, CONFIG_T>(data, res, table2);   // table_t table2[table_size]
    index = (unsigned) data(data.width - 1, 0);   // all the input's bits, two's complement
    res = (res_T) table[index];
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..firmware_graph import Layer, UnsupportedLayerError, const_int
from ..fixed_point import FixedType
from .activations import domain_lookup, lut_activation
from .registry import register

if TYPE_CHECKING:
    from .model import FixedPointModel


def softsign_table(n: int) -> np.ndarray:
    """``init_softsign_table``: ``in_val`` (float) = 2 * 8.0 * (ii - N / 2.0) / N computed in
    double; ``input / (std::abs(input) + 1.)`` is float / double, so a double, returned as float."""
    ii = np.arange(n, dtype=np.float64)
    in_val = (2 * 8.0 * (ii - float(np.float32(n)) / 2.0) / float(np.float32(n))).astype(np.float32)
    v = in_val.astype(np.float64)
    return (v / (np.abs(v) + 1.0)).astype(np.float32)


def tabulate_domain(op, in_t: FixedType):
    """For an element-wise op that treats every column alike and a narrow input: ``(op,
    op_f64)`` that look the result up in ``op`` evaluated once per possible input raw at build
    time, so predict is one gather; None for wider inputs (``activations.domain_lookup``)."""
    return domain_lookup(op, in_t)


@register("softsign")
def build_softsign(m: FixedPointModel, layer: Layer, in_t: FixedType):
    """The sigmoid-style lookup (``lut_activation``: a gather over the input's raws where the
    index cannot wrap, so the index arithmetic runs once per raw at build time)."""
    table_t = m.config_type(layer, "table_t")
    n = const_int(layer, "table_size")
    table = table_t.from_float(softsign_table(n).astype(np.float64))
    return lut_activation(m, layer, in_t, table, table_t, 16)


@register("unary_lut")
def build_unary_lut(m: FixedPointModel, layer: Layer, in_t: FixedType):
    """``res = table[raw & (2**W - 1)]`` cast to res_T. The table is the weight array of the
    call (loaded as table_t, the type the function's signature requires). An input wider than
    the table's index range would read past the table, so it is refused."""
    out_t = m.type_of(layer.template[1], layer)
    table_t = m.config_type(layer, "table_t")
    n = const_int(layer, "table_size")
    arg = layer.args[2] if len(layer.args) > 2 else ""
    if arg not in layer.weights:
        raise UnsupportedLayerError(f"{layer.describe()}: no load_weights_from_txt call fills the table '{arg}'")
    _file, load_type, n_values = layer.weights[arg]
    if m.type_of(load_type, layer) != table_t:
        raise UnsupportedLayerError(
            f"{layer.describe()}: the table '{arg}' is loaded as {load_type}, not {layer.config_name}::table_t"
        )
    if n_values != n:
        raise UnsupportedLayerError(f"{layer.describe()}: the table '{arg}' has {n_values} values, table_size is {n}")
    if in_t.width > 32 or (1 << in_t.width) > n:
        raise UnsupportedLayerError(
            f"{layer.describe()}: a {in_t.width}-bit input indexes up to {2**in_t.width} entries, "
            f"the table has {n} (the firmware would read past it)"
        )
    values = out_t.cast(m.weight_raws(layer, arg, table_t), table_t)
    values_f = values.astype(np.float64)
    mask = np.int64((1 << in_t.width) - 1)

    def lut(x):
        return values[x & mask]

    def lut_f64(x):
        return values_f[x.astype(np.int64) & mask]

    return lut, out_t, lut_f64
