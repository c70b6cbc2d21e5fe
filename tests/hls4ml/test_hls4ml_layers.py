"""The layers real hls4ml CNNs and branching models use, emulated bit for bit.

Each model is converted by hls4ml itself (PyTorch, or Keras 3 on its torch backend), compiled
by hls4ml (``HLSModel.compile``: the C-simulation, g++ against hls4ml's nnet_utils), and the
emulator must equal ``HLSModel.predict`` bit for bit on random, saturating (far outside the
ap_fixed range), negative-only, zero and on-grid inputs. Both emulator paths are compared:
the float64 chain ``predict`` takes when every type fits in 52 bits, and the int64 chain it
falls back to otherwise.

Covered: Conv1D and Conv2D (latency and resource strategies, valid and same padding, and
pointwise 1x1), Max/AveragePooling 1D and 2D (with padding) and their global forms, Flatten/Reshape (aliases in the top function),
Concatenate (1D, 2D, 3D), Add, Subtract, Multiply, Average, Maximum, Minimum, Dropout (which
hls4ml removes), the channels-last transpose of PyTorch inputs, ELU (with alpha),
SELU, softplus, hard_sigmoid, and hard_tanh (whose Keras 3 conversion hls4ml 1.3 writes
without slope/shift, so its C-simulation is a hard_sigmoid firmware with the call changed).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
hls4ml = pytest.importorskip("hls4ml")

from fpgaserve.backends.hls4ml.emulator import FixedPointModel, UnsupportedLayerError  # noqa: E402
from fpgaserve.backends.hls4ml.project import Hls4mlProject  # noqa: E402
from support.hls4ml_layers import PRECISION, assert_bit_exact, bit_exact_inputs, convert_torch, keras_on_torch  # noqa: E402


# ---------------------------------------------------------------------------- PyTorch models
class Conv2dNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.r1, self.p1 = torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2)
        self.c2, self.p2 = torch.nn.Conv2d(4, 3, 2), torch.nn.AvgPool2d(2, padding=1)
        self.fc = torch.nn.Linear(3 * 2 * 2, 5)

    def forward(self, x):
        y = self.p2(self.c2(self.p1(self.r1(self.c1(x)))))
        return self.fc(torch.flatten(y, 1))


class Conv1dNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.r1, self.p1 = torch.nn.Conv1d(3, 4, 3), torch.nn.ReLU(), torch.nn.AvgPool1d(2)
        self.c2, self.p2 = torch.nn.Conv1d(4, 4, 3, padding=1), torch.nn.MaxPool1d(2)
        self.fc = torch.nn.Linear(4 * 3, 3)

    def forward(self, x):
        y = self.p2(self.c2(self.p1(self.r1(self.c1(x)))))
        return self.fc(torch.flatten(y, 1))


class MergeNet(torch.nn.Module):
    """Branches: the input feeds four Dense layers; +, *, - and a concatenation merge them."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = torch.nn.Linear(10, 8), torch.nn.Linear(10, 8), torch.nn.Linear(10, 6)
        self.drop, self.elu, self.out = torch.nn.Dropout(0.2), torch.nn.ELU(alpha=1.3), torch.nn.Linear(14, 4)

    def forward(self, x):
        s = self.a(x) + self.b(x)
        p = self.a(x) * self.drop(self.b(x))
        return self.out(self.elu(torch.cat([s - p, self.c(x)], dim=1)))


def _resource_on(*names, rf=2):
    def tweak(layers):
        for name in names:
            layers[name].update(Strategy="Resource", ReuseFactor=rf)

    return tweak


def _merge_precision(layers):
    # the merges' auto types would be 74 bits wide (beyond the emulator's int64 raws)
    for name in ("a", "b", "a_1", "b_1", "add", "mul", "sub", "c", "cat"):
        layers[name].setdefault("Precision", {})["result"] = PRECISION


def _seeded(cls, seed: int):
    torch.manual_seed(seed)
    return cls().eval()


TORCH_MODELS = {
    # name: (module factory, input shape, tweak, layer kinds that must be present)
    "conv2d": (lambda: _seeded(Conv2dNet, 1), (2, 8, 8), _resource_on("c2"), {"conv_2d_cl", "pooling2d_cl"}),
    "conv1d": (lambda: _seeded(Conv1dNet, 2), (3, 16), _resource_on("c1", rf=3), {"conv_1d_cl", "pooling1d_cl"}),
    "merge": (
        lambda: _seeded(MergeNet, 3),
        (10,),
        _merge_precision,
        {"add", "multiply", "subtract", "concatenate1d", "elu"},
    ),
}


# ---------------------------------------------------------------------------- Keras 3 models
def _keras_acts(keras):
    layers = keras.layers
    i = keras.Input((8,))
    x = layers.Activation("hard_sigmoid")(layers.Dense(12)(i))
    x = layers.Activation("selu")(layers.Dense(10)(x))
    x = layers.Activation("softplus")(layers.Dense(10)(x))
    x = layers.Dropout(0.3)(layers.Dense(10)(x))
    return keras.Model(i, layers.Dense(4)(x)), (8,)


def _keras_cnn(keras):
    layers = keras.layers
    i = keras.Input((10, 10, 2))
    x = layers.Conv2D(4, 3, padding="same", activation="relu")(i)
    x = layers.MaxPooling2D(2)(x)
    a, b = layers.Conv2D(4, 3)(x), layers.Conv2D(4, 3)(x)
    x = layers.Concatenate()([layers.Add()([a, b]), layers.Multiply()([a, b])])
    x = layers.AveragePooling2D(2, padding="same")(x)
    g = layers.GlobalMaxPooling2D()(layers.Conv2D(3, 1)(a))  # a pointwise convolution, pooled globally
    x = layers.Dense(5, activation="softmax")(layers.Concatenate()([layers.Flatten()(x), g]))
    return keras.Model(i, x), (10, 10, 2)


def _keras_branches(keras):
    layers = keras.layers
    i = keras.Input((16, 3))
    x = layers.Conv1D(4, 3, activation="relu")(i)
    x = layers.AveragePooling1D(2)(x)
    a, b = layers.Conv1D(4, 3, padding="same")(x), layers.Conv1D(4, 3, padding="same")(x)
    # hls4ml merges two inputs at a time
    m1 = layers.Concatenate(axis=1)([layers.Maximum()([a, b]), layers.Minimum()([a, b])])
    m2 = layers.Concatenate(axis=1)([layers.Average()([a, b]), layers.Subtract()([a, b])])
    m = layers.Concatenate(axis=2)([m1, m2])
    x = layers.MaxPooling1D(2, padding="same")(m)
    x = layers.Reshape((x.shape[1] * x.shape[2],))(x)
    g = layers.GlobalAveragePooling1D()(layers.Conv1D(4, 1)(i))  # pointwise, then a global average
    return keras.Model(i, layers.Dense(3)(layers.Concatenate()([x, g]))), (16, 3)


KERAS_MODELS = {
    "keras_acts": (_keras_acts, {"hard_sigmoid", "selu", "softplus"}),
    "keras_cnn": (
        _keras_cnn,
        {"conv_2d_cl", "pooling2d_cl", "add", "multiply", "concatenate3d", "softmax"}
        | {"pointwise_conv_2d_cl", "global_pooling2d_cl"},
    ),
    "keras_branches": (
        _keras_branches,
        {"conv_1d_cl", "pooling1d_cl", "maximum", "minimum", "average", "subtract", "concatenate2d"}
        | {"pointwise_conv_1d_cl", "global_pooling1d_cl"},
    ),
}


def _convert_keras(keras, factory, outdir: Path):
    keras.utils.set_random_seed(7)
    model, shape = factory(keras)
    cfg = hls4ml.utils.config_from_keras_model(model, granularity="name", backend="Vivado", default_precision=PRECISION)
    for layer in cfg["LayerName"].values():
        precision = layer.get("Precision")
        if isinstance(precision, dict) and precision.get("result") == "auto":
            precision["result"] = PRECISION  # merges of auto-sized results grow past 64 bits
    hm = hls4ml.converters.convert_from_keras_model(
        model, hls_config=cfg, backend="Vivado", io_type="io_parallel", output_dir=str(outdir)
    )
    hm.compile()
    return hm, shape


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("hls4ml_layers")


@pytest.mark.parametrize("name", list(TORCH_MODELS))
def test_pytorch_layers_bit_exact_with_csim(name, workdir):
    factory, shape, tweak, kinds = TORCH_MODELS[name]
    hm = convert_torch(factory(), shape, workdir / name, tweak)
    model = assert_bit_exact(name, hm, workdir / name, kinds)
    if name == "conv2d":
        strategies = [layer.config["consts"]["strategy"] for layer in model.graph.layers if layer.kind == "conv_2d_cl"]
        assert strategies == ["nnet::latency", "nnet::resource"]
        # the auto-sized Dense accumulator is 58 bits: that layer runs its int64 op inside the float64 chain
        assert model._f64 and not all(model._step_f64)


@pytest.mark.parametrize("name", list(KERAS_MODELS))
def test_keras_layers_bit_exact_with_csim(name, workdir):
    keras = keras_on_torch()
    factory, kinds = KERAS_MODELS[name]
    hm, _shape = _convert_keras(keras, factory, workdir / name)
    model = assert_bit_exact(name, hm, workdir / name, kinds)
    assert model._f64


def test_hard_tanh_bit_exact_with_csim(workdir):
    """hard_tanh = 2 * hard_sigmoid - 1 on the same slope/shift: the keras_acts firmware with
    its hard_sigmoid call changed, compiled by fpgaserve's C-simulation."""
    from fpgaserve.backends.hls4ml.csim import CsimLibrary

    keras = keras_on_torch()
    src = workdir / "keras_acts"  # converted by test_keras_layers_bit_exact_with_csim when it ran first
    if not src.is_dir():
        _convert_keras(keras, _keras_acts, src)
    dst = workdir / "hard_tanh"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.so", "ap_types"))
    top = dst / "firmware" / "myproject.cpp"
    text = top.read_text()
    assert "nnet::hard_sigmoid<" in text
    top.write_text(text.replace("nnet::hard_sigmoid<", "nnet::hard_tanh<"))
    project = Hls4mlProject.load(dst)
    model = FixedPointModel(project)
    assert "hard_tanh" in {layer.kind for layer in model.graph.layers}
    x = bit_exact_inputs(model.n_in)
    ref = CsimLibrary.load(project, cache_dir=workdir / "csim-cache").predict(x)
    got = model.predict(x)
    assert np.array_equal(got.view(np.uint64), ref.view(np.uint64))
    assert np.array_equal(model._predict_int64(x).view(np.uint64), ref.view(np.uint64))


def test_unemulated_layer_is_refused_with_its_name(workdir, tmp_path):
    """A function the emulator does not know (here a hand-written one in an edited firmware)
    stays in csim: refused at build time, naming the layer."""
    src = workdir / "conv2d"
    if not src.is_dir():
        factory, shape, tweak, _ = TORCH_MODELS["conv2d"]
        convert_torch(factory(), shape, src, tweak)
    dst = tmp_path / "custom"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.so", "ap_types"))
    top = dst / "firmware" / "myproject.cpp"
    text = top.read_text()
    top.write_text(text.replace("nnet::relu<", "nnet::my_custom_activation<", 1))
    with pytest.raises(
        UnsupportedLayerError, match=r"layer 'r1' \(nnet::my_custom_activation, relu_config3\).*not supported"
    ):
        FixedPointModel(Hls4mlProject.load(dst))
