"""``nnet::embedding`` (nnet_embed.h): a table lookup, ``res[j * n_out + i] =
embeddings[data[j] * n_out + i]``, built as one gather from a zero-extended table."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..firmware_graph import Layer, UnsupportedLayerError, const_int
from ..fixed_point import FixedType
from .registry import register

if TYPE_CHECKING:
    from .model import FixedPointModel


@register("embedding")
def build_embedding(m: FixedPointModel, layer: Layer, in_t: FixedType):
    """Token j's row of the table, cast from embeddings_t to res_T. The tokens are the input
    type's integers (hls4ml's Keras Embedding takes an ap_uint/ap_int input precision; a
    fixed-point one would index the C array with a fraction, refused here).

    A token outside ``[0, vocab_size)`` makes the C++ read outside its table (undefined,
    whatever lies beside it in memory): the emulator writes zeros there, so only in-range
    tokens are bit exact, and a firmware fed such tokens has no defined answer to match."""
    if not in_t.integer_type:
        raise UnsupportedLayerError(f"{layer.describe()}: embedding indices of fixed-point type {in_t}")
    n_in, n_out, vocab = (const_int(layer, k) for k in ("n_in", "n_out", "vocab_size"))
    out_t = m.type_of(layer.template[1], layer)
    e_t = m.config_type(layer, "embeddings_t")
    table = m.weight_raws(layer, layer.args[2], e_t)
    if table.size != vocab * n_out:
        raise UnsupportedLayerError(f"{layer.describe()}: {table.size} embeddings, expected {vocab}x{n_out}")
    rows = out_t.cast(table, e_t).reshape(vocab, n_out)
    # row `vocab` is the zero row every out-of-range token reads
    rows = np.concatenate([rows, np.zeros((1, n_out), np.int64)])
    rows_f = rows.astype(np.float64)  # the table is cast to res_T once, at build time

    def tokens(x):
        t = x.astype(np.int64)
        return np.where((t < 0) | (t >= vocab), vocab, t)

    def embed(x):
        return rows[tokens(x)].reshape(x.shape[0], n_in * n_out)

    def embed_f64(x):
        return rows_f[tokens(x)].reshape(x.shape[0], n_in * n_out)

    return embed, out_t, embed_f64
