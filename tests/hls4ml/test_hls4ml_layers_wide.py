"""Wide auto-sized types, multi-dimensional softmax and LayerNormalization, bit for bit.

* ``keras_wide``: a Keras 3 model converted at ap_fixed<16,6> with hls4ml's "auto" result
  types left as hls4ml sizes them: a Multiply of two 36-bit Dense results is 72 bits, a
  Subtract of two of those 73, the Dense that reads them accumulates ~100 bits, and a SELU
  and a ReLU read that accumulator. Those layers run on Wide raws (two int64 limbs), the
  rest of the chain on float64. The same model ends in Softmax(axis=-1) on a (4, 6) tensor
  (``nnet::softmax_multidim``) in the latency, stable, legacy and argmax implementations,
  and a LayerNormalization (``nnet::layernormalize``) of the input.
* ``torch_layernorm``: PyTorch nn.LayerNorm, then Softmax(dim=-1) on its auto-sized output.
"""

from __future__ import annotations

import pytest

from support.hls4ml_layers import PRECISION, assert_bit_exact, keras_on_torch

torch = pytest.importorskip("torch")
hls4ml = pytest.importorskip("hls4ml")


def _keras_wide(keras):
    layers = keras.layers
    i = keras.Input((4, 6))
    a, b = layers.Dense(6)(i), layers.Dense(6)(i)
    p = layers.Multiply()([a, b])
    q = layers.Subtract()([p, layers.Multiply()([a, a])])
    m = layers.Concatenate()([layers.Maximum()([p, q]), layers.Average()([p, q])])
    w = layers.Dense(24, activation="selu")(layers.Flatten()(m))
    r = layers.Dense(6, activation="relu")(layers.Flatten()(layers.Minimum()([p, q])))
    t = layers.Reshape((4, 6))(layers.Add()([w, layers.Dense(24)(r)]))
    soft = [layers.Flatten()(layers.Softmax(axis=-1, name=f"sm_{impl}")(t)) for impl in ("lat", "sta", "leg", "arg")]
    norm = layers.Flatten()(layers.LayerNormalization(axis=[2], name="ln")(i))
    out = layers.Concatenate()(
        [
            layers.Concatenate()([soft[0], soft[1]]),
            layers.Concatenate()([soft[2], layers.Concatenate()([soft[3], norm])]),
        ]
    )
    return keras.Model(i, out)


IMPLEMENTATIONS = {"sm_lat": "latency", "sm_sta": "stable", "sm_leg": "legacy", "sm_arg": "argmax"}


class TorchLayerNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = torch.nn.LayerNorm(6)
        with torch.no_grad():
            self.ln.weight.uniform_(0.5, 1.5)
            self.ln.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return self.ln(x)


def test_keras_wide_softmax_multidim_layernorm_bit_exact(tmp_path):
    keras = keras_on_torch()
    keras.utils.set_random_seed(11)
    model = _keras_wide(keras)
    cfg = hls4ml.utils.config_from_keras_model(model, granularity="name", backend="Vivado", default_precision=PRECISION)
    for name, impl in IMPLEMENTATIONS.items():
        cfg["LayerName"][name]["Implementation"] = impl
    hm = hls4ml.converters.convert_from_keras_model(
        model, hls_config=cfg, backend="Vivado", io_type="io_parallel", output_dir=str(tmp_path / "kw")
    )
    hm.compile()
    kinds = {"multiply", "subtract", "maximum", "average", "minimum", "dense", "selu", "relu"}
    emu = assert_bit_exact("keras_wide", hm, tmp_path / "kw", kinds | {"softmax_multidim", "layernormalize"})
    types = [
        str(emu.type_of(layer.template[-2 if layer.kind in ("multiply", "subtract") else 1], layer))
        for layer in emu.graph.layers
        if layer.kind in ("multiply", "subtract")
    ]
    assert all(int(t.split("<")[1].split(",")[0]) > 63 for t in types), types  # the merges really are wide
    assert emu._f64  # the narrow layers stay on the float64 chain
    impls = {
        layer.name: layer.config["consts"]["implementation"].split("::")[-1]
        for layer in emu.graph.layers
        if layer.kind == "softmax_multidim"
    }
    assert impls == IMPLEMENTATIONS


def test_torch_layernorm_bit_exact(tmp_path):
    torch.manual_seed(5)
    module = TorchLayerNorm().eval()
    cfg = hls4ml.utils.config_from_pytorch_model(
        module, input_shape=(4, 6), granularity="name", backend="Vivado", default_precision=PRECISION
    )
    hm = hls4ml.converters.convert_from_pytorch_model(
        module, hls_config=cfg, backend="Vivado", io_type="io_parallel", output_dir=str(tmp_path / "tl")
    )
    hm.compile()
    assert_bit_exact("torch_layernorm", hm, tmp_path / "tl", {"layernormalize"})
