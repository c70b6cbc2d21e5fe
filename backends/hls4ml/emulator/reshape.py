"""Layers that only move values: ``nnet::transpose`` (Flatten/Reshape are aliases in the top
function and need no step)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..firmware_graph import Layer, UnsupportedLayerError, const_int
from ..fixed_point import FixedType
from .padding import gather_op
from .registry import register

if TYPE_CHECKING:
    from .model import FixedPointModel


# reshapes and merges
@register("transpose")
def build_transpose(m: FixedPointModel, layer: Layer, in_t: FixedType):
    out_t = m.type_of(layer.template[1], layer)
    arrays = m.graph.arrays
    to_shape = arrays.get(f"{layer.config_name}_to_shape")
    strides = arrays.get(f"{layer.config_name}_perm_strides")
    n = const_int(layer, "N")
    if to_shape is None or strides is None or len(to_shape) != len(strides):
        raise UnsupportedLayerError(f"{layer.describe()}: transpose shapes not found in parameters.h")
    src = np.zeros(n, dtype=np.int64)
    for i in range(n):  # transfer_idx
        index, idx = i, 0
        for d in range(len(to_shape) - 1, -1, -1):
            idx += (index % to_shape[d]) * strides[d]
            index //= to_shape[d]
        src[i] = idx
    return gather_op(m, layer, in_t, out_t, src, n)  # checks that every index lies inside the input
