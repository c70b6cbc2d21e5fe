"""``nnet::normalize`` (BatchNormalization): x * scale + bias in the result type."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..firmware_graph import Layer, UnsupportedLayerError, const_int
from ..fixed_point import FixedType
from .registry import register

if TYPE_CHECKING:
    from .model import FixedPointModel


@register("normalize")
def build_normalize(m: FixedPointModel, layer: Layer, in_t: FixedType):
    out_t = m.type_of(layer.template[1], layer)
    s_t, b_t = m.config_type(layer, "scale_t"), m.config_type(layer, "bias_t")
    n_in = const_int(layer, "n_in")
    n_filt_text = layer.config.get("consts", {}).get("n_filt", "-1").strip()
    n_filt = -1 if n_filt_text == "-1" else const_int(layer, "n_filt")
    scale = m.weight_raws(layer, layer.args[2], s_t)
    bias = m.weight_raws(layer, layer.args[3], b_t)
    idx = np.arange(n_in) if n_filt == -1 else np.arange(n_in) % n_filt
    if idx.max(initial=0) >= min(scale.size, bias.size):
        raise UnsupportedLayerError(f"{layer.describe()}: scale/bias arrays shorter than n_in")
    scale, bias = scale[idx], bias[idx]
    fprod = in_t.frac + s_t.frac
    frac = max(fprod, b_t.frac)
    m.check_width(layer, in_t.width + s_t.width + (frac - fprod) + 1, "x * scale + bias")
    m.check_width(layer, b_t.width + (frac - b_t.frac) + 1, "x * scale + bias")
    bias_up = bias << np.int64(frac - b_t.frac)
    sh = np.int64(frac - fprod)
    return (lambda x: out_t.from_raw(((x * scale) << sh) + bias_up, frac)), out_t
