"""DepthwiseConv1D/2D and SeparableConv1D/2D, emulated bit for bit (emulator/depthwise.py).

hls4ml 1.3.0 writes a separable convolution as ``depthwise_conv_*_cl`` followed by a
pointwise ``conv`` (its ``separable_to_depthwise_and_conv`` pass), so the Keras model below
chains depthwise layers with a 1x1 Conv2D, the separable's second half. Its Keras 3
converter cannot read SeparableConv layers themselves (it loads ``layer.kernel``, which they
do not have: AttributeError), and its PyTorch converter refuses ``Conv2d(groups=...)``
("Non-default options for groups not implemented yet"); ONNX ``Conv`` with ``group`` equal to
the channels is converted (QONNX flow, ``conv_to_depthwise_conv_x_d``), tested here from a
PyTorch export.

The Keras models also hold a strided, padded Conv (conv.py's band products). They cover 'same' padding (zeros from the buffer filler), strides, 1D and 2D,
and accumulators of each kind: auto-sized (exact sums, float64 path), a narrow saturating
``AP_RND`` accumulator (each product rounded, each addition saturated: the C++ order is
replayed) and a narrow wrapping ``AP_TRN`` one. hls4ml's C-simulation (``HLSModel.predict``)
is the reference; both emulator paths are compared.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
hls4ml = pytest.importorskip("hls4ml")

from fpgaserve.backends.hls4ml.emulator import FixedPointModel, UnsupportedLayerError  # noqa: E402
from fpgaserve.backends.hls4ml.emulator.conv import band_layout  # noqa: E402
from fpgaserve.backends.hls4ml.project import Hls4mlProject  # noqa: E402
from support.hls4ml_layers import PRECISION, assert_bit_exact, bit_exact_inputs, keras_on_torch  # noqa: E402

# accumulators that make the order of the C++ additions matter (see the module docstring)
ACCUM = {
    "dw2": "ap_fixed<12,3,AP_RND,AP_SAT>",  # products rounded into 9 fractional bits, sums saturate (+-4)
    "dw3": "ap_fixed<18,6>",  # AP_TRN, AP_WRAP: products truncated, sums wrap
}
BIAS = "random_normal"  # Keras' default zero biases would leave the bias path untested


def _keras_depthwise_2d(keras):
    layers = keras.layers
    i = keras.Input((16, 16, 3))
    x = layers.DepthwiseConv2D(bias_initializer=BIAS, kernel_size=3, padding="same", name="dw1")(i)
    x = layers.Conv2D(3, 3, strides=2, padding="same", name="cs")(x)  # conv.py's bands: stride, padding
    x = layers.DepthwiseConv2D(bias_initializer=BIAS, kernel_size=2, strides=2, name="dw2")(x)
    x = layers.Conv2D(4, 1, name="pw")(x)  # the pointwise half of a SeparableConv2D
    x = layers.DepthwiseConv2D(bias_initializer=BIAS, kernel_size=3, padding="same", name="dw3")(x)
    x = layers.DepthwiseConv2D(bias_initializer=BIAS, kernel_size=3, strides=(1, 2), name="dw4")(x)
    return keras.Model(i, layers.Flatten()(x))


def _keras_depthwise_1d(keras):
    layers = keras.layers
    i = keras.Input((16, 3))
    x = layers.DepthwiseConv1D(bias_initializer=BIAS, kernel_size=3, padding="same", name="dw1")(i)
    x = layers.Conv1D(3, 3, strides=2, padding="same", name="cs")(x)  # conv.py's bands: stride, padding
    x = layers.DepthwiseConv1D(bias_initializer=BIAS, kernel_size=2, strides=2, name="dw2")(x)
    x = layers.Conv1D(4, 1, name="pw")(x)  # the pointwise half of a SeparableConv1D
    x = layers.DepthwiseConv1D(bias_initializer=BIAS, kernel_size=3, padding="same", name="dw3")(x)
    x = layers.DepthwiseConv1D(bias_initializer=BIAS, kernel_size=3, strides=2, name="dw4")(x)
    return keras.Model(i, layers.Flatten()(x))


# one project per dimension: hls4ml 1.3.0's nnet_sepconv1d_latency.h and nnet_sepconv2d_latency.h
# share one include guard, so a project with both fails to compile ("depthwise_conv_2d_latency_cl
# was not declared")
KERAS_MODELS = {
    "2d": (_keras_depthwise_2d, {"depthwise_conv_2d_cl", "pointwise_conv_2d_cl"}),
    "1d": (_keras_depthwise_1d, {"depthwise_conv_1d_cl", "pointwise_conv_1d_cl"}),
}


@pytest.mark.parametrize("dim", list(KERAS_MODELS))
def test_keras_depthwise_bit_exact_with_csim(dim, tmp_path):
    keras = keras_on_torch()
    keras.utils.set_random_seed(11)
    factory, kinds = KERAS_MODELS[dim]
    model = factory(keras)
    cfg = hls4ml.utils.config_from_keras_model(model, granularity="name", backend="Vivado", default_precision=PRECISION)
    layers = cfg["LayerName"]
    for name, accum in ACCUM.items():
        layers[name].setdefault("Precision", {})["accum"] = accum
    for name in ("dw1", "cs", "dw2", "pw", "dw3"):
        layers[name].setdefault("Precision", {})["result"] = PRECISION  # auto would grow past 64 bits
    layers["dw4"].setdefault("Precision", {})["result"] = "ap_fixed<10,4,AP_RND_CONV,AP_SAT>"
    hm = hls4ml.converters.convert_from_keras_model(
        model, hls_config=cfg, backend="Vivado", io_type="io_parallel", output_dir=str(tmp_path)
    )
    hm.compile()
    emu = assert_bit_exact(f"keras_depthwise_{dim}", hm, tmp_path, kinds)
    assert emu._f64
    # the narrow accumulators took the ordered replay (no float64 form), the others the exact sum
    fops = {layer.name: step[3] is not None for layer, step in zip(emu.graph.layers, emu._steps)}
    assert fops["dw1"] and fops["dw4"] and not fops["dw2"] and not fops["dw3"]
    for name in ("cs", "pw"):  # the float64 path took the bands, not the gathered windows
        layer = next(layer for layer in emu.graph.layers if layer.name == name)
        assert band_layout(layer, emu.graph.fill_buffer(layer)) is not None
    # batches below conv.BAND_MIN_ROWS gather windows instead of bands: the same bits
    x = bit_exact_inputs(emu.n_in)[:700:100]
    ref = np.asarray(hm.predict(np.ascontiguousarray(x))).reshape(len(x), -1)
    np.testing.assert_array_equal(emu.predict(x), ref)

    # a configuration the C++ cannot run is refused naming the layer: the resource strategy
    # (hls4ml's io_parallel depthwise asserts on it), here written into dw1's config struct
    config = next(layer.config_name for layer in emu.graph.layers if layer.name == "dw1")
    params = tmp_path / "firmware" / "parameters.h"
    text = params.read_text()
    start = text.index(f"struct {config} ")
    end = text.index("};", start)
    assert "strategy = nnet::latency" in text[start:end]
    params.write_text(text[:start] + text[start:end].replace("nnet::latency", "nnet::resource") + text[end:])
    with pytest.raises(UnsupportedLayerError, match=r"'dw1'.*strategy 'resource'"):
        FixedPointModel(Hls4mlProject.load(tmp_path))
    # and a depth multiplier of 2 (the C++ asserts n_filt == n_chan)
    body = text[start:end].replace("n_filt = 3;", "n_filt = 6;")
    assert body != text[start:end]
    params.write_text(text[:start] + body + text[end:])
    with pytest.raises(UnsupportedLayerError, match=r"'dw1'.*depth multiplier 2"):
        FixedPointModel(Hls4mlProject.load(tmp_path))


def test_onnx_grouped_conv_bit_exact_with_csim(tmp_path):
    """ONNX Conv with group = channels (a PyTorch depthwise + pointwise pair) becomes
    depthwise_conv_2d_cl + pointwise_conv_2d_cl through hls4ml's QONNX flow."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("qonnx", reason="the qonnx extra is not installed")
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.transformation.channels_last import ConvertToChannelsLastAndClean
    from qonnx.util.cleanup import cleanup_model

    class Separable(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.dw = torch.nn.Conv2d(3, 3, 3, groups=3, padding=1)
            self.pw = torch.nn.Conv2d(3, 4, 1)

        def forward(self, x):
            return torch.flatten(self.pw(self.dw(x)), 1)

    torch.manual_seed(5)
    path = tmp_path / "separable.onnx"
    torch.onnx.export(Separable().eval(), torch.zeros(1, 3, 6, 6), str(path), opset_version=13, dynamo=False)
    wrapped = cleanup_model(cleanup_model(ModelWrapper(str(path))).transform(ConvertToChannelsLastAndClean()))
    cfg = hls4ml.utils.config.config_from_onnx_model(
        wrapped, granularity="name", backend="Vivado", default_precision=PRECISION
    )
    for name in ("Conv_0", "Conv_1"):  # auto results: 56 bits, the float64 path would not run
        cfg["LayerName"][name]["Precision"]["result"] = PRECISION
    outdir = tmp_path / "prj"
    hm = hls4ml.converters.convert_from_onnx_model(
        wrapped, hls_config=cfg, backend="Vivado", io_type="io_parallel", output_dir=str(outdir)
    )
    hm.compile()
    emu = assert_bit_exact("onnx_depthwise", hm, outdir, {"depthwise_conv_2d_cl", "pointwise_conv_2d_cl"})
    assert emu._f64
