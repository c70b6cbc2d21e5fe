"""Binary and ternary networks end to end, emulated bit for bit against hls4ml's own
C-simulation (``HLSModel.compile`` + ``predict``), on both emulator paths.

* QONNX: ``BipolarQuant`` weights (hls4ml: XNOR ``ap_uint<1>`` weights, products
  ``weight_binary`` and ``both_binary``), ``BipolarQuant`` activations (``binary_tanh``), a
  2-bit narrow ``Quant`` on weights (ternary ``ap_fixed<2,2>`` weights, ``data_binary`` on
  binary data), and ONNX ``BatchNormalization`` followed by ``BipolarQuant``, which hls4ml
  fuses into ``nnet::normalize_binary_tanh`` (its ``merge_batch_norm_quantized_tanh`` pass).
  The model is prepared as ``fpgaserve pack --onnx`` prepares it (qonnx cleanup,
  channels-last). A Dense between two fused layers also goes through hls4ml's
  ``quantize_dense_output`` pass: ``ap_int`` accumulator and result, thresholds floored to
  integers, and its XNOR weights quantized a second time (hls4ml 1.3 maps the already-binary
  0/1 weights through the binary quantizer again, so they all become 1: the firmware, which
  is what is emulated, differs there from the QONNX model).
* Keras 3: ``BatchNormalization`` followed by ``Activation(f)`` for functions named
  ``binary_tanh``/``ternary_tanh`` (the Keras 3 converter names the activation after the
  function): ``normalize_binary_tanh`` and ``normalize_ternary_tanh``, per channel
  (``n_filt``) and per unit, with a negative scale (the firmware's comparison direction is
  kept), thresholds beyond ``ap_fixed<16,6>`` (they wrap where the C++ converts them), and
  inputs exactly on, and one step around, each threshold; its io_stream conversion (the
  stream forms) under FPGASERVE_LONG_TESTS=1.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
hls4ml = pytest.importorskip("hls4ml")

from fpgaserve.backends.hls4ml.emulator import FixedPointModel  # noqa: E402
from fpgaserve.backends.hls4ml.project import Hls4mlProject  # noqa: E402
from support.hls4ml_layers import PRECISION, bit_exact_inputs, keras_on_torch, no_auto_precision  # noqa: E402


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("hls4ml_layers_binary")


def _compare(name: str, hm, model: FixedPointModel, x: np.ndarray) -> np.ndarray:
    """The emulator's chosen, int64 and float64 paths against the C-simulation, bit for bit."""
    ref = np.asarray(hm.predict(np.ascontiguousarray(x))).reshape(len(x), -1)
    paths = {"chosen": model.predict(x), "int64": model._predict_int64(x)}
    if model._f64:
        paths["float64"] = model._predict_f64(x)
    for path, got in paths.items():
        assert got.shape == ref.shape
        bad = np.flatnonzero((got.view(np.uint64) != ref.view(np.uint64)).any(axis=1))
        assert bad.size == 0, f"{name} ({path}): {bad.size} rows differ, first {got[bad[0]]} vs {ref[bad[0]]}"
    return ref


# ---------------------------------------------------------------------------- QONNX
def _qonnx_binary_file(path: Path) -> None:
    """input -> Quant(8 bits) -> fc1 (BipolarQuant weights, no bias: a bias add before a
    BipolarQuant becomes a BatchNormalization, fused) -> BipolarQuant -> fc2 (BipolarQuant
    weights) -> BatchNormalization -> BipolarQuant -> fc3 (BipolarQuant weights) ->
    BatchNormalization -> BipolarQuant -> fc4 (2-bit narrow Quant weights) -> output."""
    pytest.importorskip("qonnx", reason="the qonnx extra is not installed")
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    n0, n1, n2, n3, n4 = 12, 16, 14, 10, 5

    def bn(n, mean_sd):
        gamma = rng.normal(1, 0.6, n)
        gamma[0] = -abs(gamma[0])  # a negative scale: the firmware still compares data >= threshold
        return gamma, rng.normal(0, 0.5, n), rng.normal(0, mean_sd, n), rng.uniform(0.2, 3, n)

    arrays = {
        "W1": rng.normal(0, 1, (n0, n1)),
        "W2": rng.normal(0, 1, (n1, n2)),
        "W3": rng.normal(0, 1, (n2, n3)),
        "W4": rng.normal(0, 1, (n2 + n3, n4)),
        "b4": rng.normal(0, 0.5, n4),
        "s_in": 2.0**-4,
        "one": 1.0,
        "zero": 0.0,
        "bits8": 8.0,
        "bits2": 2.0,
    }
    for k, values in enumerate((bn(n2, 2.0), bn(n3, 1.5)), start=2):
        arrays.update(zip((f"g{k}", f"be{k}", f"m{k}", f"v{k}"), values))
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in arrays.items()]
    g = "qonnx.custom_op.general"
    quant = {"domain": g, "signed": 1, "rounding_mode": "ROUND"}
    nodes = [
        helper.make_node("Quant", ["input", "s_in", "zero", "bits8"], ["xq"], name="q_in", narrow=0, **quant),
        helper.make_node("BipolarQuant", ["W1", "one"], ["W1b"], name="bw1", domain=g),
        helper.make_node("MatMul", ["xq", "W1b"], ["h1"], name="fc1"),
        helper.make_node("BipolarQuant", ["h1", "one"], ["a1"], name="sign1", domain=g),
        helper.make_node("BipolarQuant", ["W2", "one"], ["W2b"], name="bw2", domain=g),
        helper.make_node("MatMul", ["a1", "W2b"], ["h2"], name="fc2"),
        helper.make_node("BatchNormalization", ["h2", "g2", "be2", "m2", "v2"], ["n2"], name="bn2"),
        helper.make_node("BipolarQuant", ["n2", "one"], ["a2"], name="sign2", domain=g),
        helper.make_node("BipolarQuant", ["W3", "one"], ["W3b"], name="bw3", domain=g),
        helper.make_node("MatMul", ["a2", "W3b"], ["h3"], name="fc3"),
        helper.make_node("BatchNormalization", ["h3", "g3", "be3", "m3", "v3"], ["n3"], name="bn3"),
        helper.make_node("BipolarQuant", ["n3", "one"], ["a3"], name="sign3", domain=g),
        helper.make_node("Quant", ["W4", "one", "zero", "bits2"], ["W4t"], name="tw4", narrow=1, **quant),
        # a2 goes on beside a3: after fc3's all-one weights a3 only depends on a2's popcount
        helper.make_node("Concat", ["a2", "a3"], ["cat"], name="cat", axis=-1),
        helper.make_node("MatMul", ["cat", "W4t"], ["h4"], name="fc4"),
        helper.make_node("Add", ["h4", "b4"], ["output"], name="fc4_bias"),
    ]
    graph = helper.make_graph(
        nodes,
        "binary_mlp",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", n0])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", n4])],
        initializer=inits,
    )
    opsets = [helper.make_opsetid("", 13), helper.make_opsetid(g, 1)]
    onnx.save(helper.make_model(graph, opset_imports=opsets), path)


def convert_qonnx_binary(outdir: Path):
    """The QONNX binary MLP converted as ``fpgaserve pack --onnx`` converts it, compiled."""
    from fpgaserve.pack.from_onnx import _qonnx_prepared

    outdir.mkdir(parents=True, exist_ok=True)
    _qonnx_binary_file(outdir / "binary.onnx")
    model = _qonnx_prepared(str(outdir / "binary.onnx"))
    cfg = hls4ml.utils.config_from_onnx_model(model, granularity="name", backend="Vivado", default_precision=PRECISION)
    hm = hls4ml.converters.convert_from_onnx_model(
        model, hls_config=cfg, backend="Vivado", io_type="io_parallel", output_dir=str(outdir / "hls")
    )
    hm.compile()
    return hm, outdir / "hls"


def test_qonnx_binary_network_bit_exact(workdir):
    hm, out = convert_qonnx_binary(workdir / "qonnx_binary")
    top = (out / "firmware" / "myproject.cpp").read_text()
    params = (out / "firmware" / "parameters.h").read_text()
    assert top.count("nnet::normalize_binary_tanh<") == 2, "hls4ml did not fuse BatchNormalization + BipolarQuant"
    assert top.count("nnet::binary_tanh<") == 1 and top.count("nnet::dense<") == 4
    for product in ("weight_binary", "both_binary", "data_binary"):
        assert f"nnet::product::{product}<" in params, product
    model = FixedPointModel(Hls4mlProject.load(out))
    kinds = [layer.kind for layer in model.graph.layers]
    assert kinds.count("normalize_binary_tanh") == 2
    # quantize_dense_output made fc3's result an ap_int and the thresholds after it integers
    fused = [layer for layer in model.graph.layers if layer.kind == "normalize_binary_tanh"]
    assert {model.type_of(layer.template[0], layer).integer_type for layer in fused} == {False, True}

    rng = np.random.default_rng(9)
    lsb = 2.0**-4  # the input Quant's grid: values on it and halfway between
    grid = rng.integers(-128, 128, (300, model.n_in)) * lsb
    x = np.concatenate([bit_exact_inputs(model.n_in), grid, grid + lsb / 2, rng.normal(0, 0.3, (400, model.n_in))])
    ref = _compare("qonnx_binary", hm, model, x)
    assert len(np.unique(ref, axis=0)) > 200, "the binary network's outputs barely vary"


# ---------------------------------------------------------------------------- Keras 3
def _keras_binary(keras):
    """Two fusions straight on a (4, 3) input (per channel: n_filt = 3), two after a Dense (per
    unit), and the binary units into an XNOR-weight Dense (both_binary)."""
    layers = keras.layers

    def binary_tanh(x):  # the converter takes the name: nnet::binary_tanh
        return keras.ops.sign(x)

    def ternary_tanh(x):
        return keras.ops.sign(x)

    i = keras.Input((4, 3))
    a = layers.Activation(binary_tanh, name="bt0")(layers.BatchNormalization(name="bn0")(i))
    t = layers.Activation(ternary_tanh, name="tt0")(layers.BatchNormalization(name="bn1")(i))
    d = layers.Dense(10, name="fc1")(layers.Flatten(name="flat")(i))
    b1 = layers.Activation(binary_tanh, name="bt1")(layers.BatchNormalization(name="bn2")(d))
    t1 = layers.Activation(ternary_tanh, name="tt1")(layers.BatchNormalization(name="bn3")(d))
    parts = [layers.Flatten(name="fa")(a), layers.Flatten(name="ft")(t), b1, t1, layers.Dense(5, name="xnor")(b1)]
    x = parts[0]
    for k, p in enumerate(parts[1:]):  # hls4ml concatenates two inputs at a time
        x = layers.Concatenate(name=f"cat{k}")([x, p])
    model = keras.Model(i, layers.Dense(6, name="out")(x))
    rng = np.random.default_rng(1)
    for name in ("bn0", "bn1", "bn2", "bn3"):
        layer = model.get_layer(name)
        n = layer.get_weights()[0].shape[0]
        gamma, beta = rng.normal(1, 0.7, n), rng.normal(0, 1, n)
        gamma[0] = -abs(gamma[0])  # a negative scale: hi < lo for the ternary thresholds
        gamma[1], beta[1] = 0.02, 1.5  # thresholds near -75: they wrap in ap_fixed<16,6>
        layer.set_weights([gamma, beta, rng.normal(0, 2, n), rng.uniform(0.1, 4, n)])
    return model


def _threshold_inputs(model: FixedPointModel, rows: int) -> np.ndarray:
    """Rows whose values sit exactly on the thresholds of the fusions that read the input (and
    one ap_fixed<16,6> step below and above), column by column, the rest random."""
    lsb = 2.0**-10
    ts = []
    sources = {model.project.input.name}  # the input and its io_stream copies
    for layer in model.graph.layers:
        if layer.kind == "clone_stream" and layer.inputs[0] in sources:
            sources.add(layer.output)
        if layer.inputs[0] in sources and layer.kind.startswith("normalize_"):
            in_t = model.type_of(layer.template[0], layer)
            for arg in layer.args[2:]:
                # the thresholds as the firmware holds them (converted to data_T: some wrap)
                values = in_t.from_float(model.graph.weight_array(layer, arg)) * 2.0**-in_t.frac
                ts.append(np.resize(values, model.n_in))  # per channel: channels-last order
    rng = np.random.default_rng(4)
    x = rng.normal(0, 2, (rows, model.n_in))
    for k in range(rows):
        pick = ts[k % len(ts)] + lsb * ((k // len(ts)) % 3 - 1)
        cols = rng.random(model.n_in) < 0.7
        x[k, cols] = pick[cols]
    return x


_IO_TYPES = [
    "io_parallel",
    pytest.param(
        "io_stream",
        marks=pytest.mark.skipif(
            os.environ.get("FPGASERVE_LONG_TESTS") != "1", reason="FPGASERVE_LONG_TESTS=1: one more conversion"
        ),
    ),
]


@pytest.mark.parametrize("io_type", _IO_TYPES)
def test_keras_binary_ternary_fusions_bit_exact(workdir, io_type):
    """io_stream: the stream forms (nnet_batchnorm_stream.h) index the thresholds within a
    word, the same values when a word holds whole pixels (the input's clones feed the fusions)."""
    from hls4ml.model.types import XnorPrecisionType

    keras = keras_on_torch()
    keras.utils.set_random_seed(5)
    model = _keras_binary(keras)
    cfg = hls4ml.utils.config_from_keras_model(model, granularity="name", backend="Vivado", default_precision=PRECISION)
    cfg["LayerName"]["xnor"]["Precision"].update(weight=XnorPrecisionType(), accum="ap_fixed<12,8>")
    no_auto_precision(cfg["LayerName"])
    out = workdir / f"keras_binary_{io_type}"
    hm = hls4ml.converters.convert_from_keras_model(
        model, hls_config=cfg, backend="Vivado", io_type=io_type, output_dir=str(out)
    )
    hm.compile()
    top = (out / "firmware" / "myproject.cpp").read_text()
    assert top.count("nnet::normalize_binary_tanh<") == 2 and top.count("nnet::normalize_ternary_tanh<") == 2
    # io_stream: the clone_stream copy of the XNOR units takes the default ap_fixed precision
    product = "both_binary" if io_type == "io_parallel" else "weight_binary"
    assert f"nnet::product::{product}<" in (out / "firmware" / "parameters.h").read_text()
    emu = FixedPointModel(Hls4mlProject.load(out))
    assert all(layer.stream == (io_type == "io_stream") for layer in emu.graph.layers)
    x = np.concatenate([bit_exact_inputs(emu.n_in), _threshold_inputs(emu, 600)])
    ref = _compare(f"keras_binary_{io_type}", hm, emu, x)
    assert len(np.unique(ref, axis=0)) > 500
