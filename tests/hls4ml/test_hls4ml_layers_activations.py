"""Activation layers of hls4ml 1.3's nnet_activation.h, emulated bit for bit: softsign (table),
prelu, thresholded_relu, binary_tanh, ternary_tanh, unary_lut, and the table activations
(sigmoid, tanh, softplus, elu, selu, softsign) at non-default ``TableSize``/``table_t``.

Each firmware is written by hls4ml itself and compiled by it (``HLSModel.compile``); the
emulator must equal ``HLSModel.predict`` bit for bit on both its paths (see
test_hls4ml_layers.py), on the usual inputs and on every value of the ap_fixed<16,6> grid.
Where each layer comes from in hls4ml 1.3:

* Keras 3: ``Activation("softsign")``, ``PReLU``, ``ReLU(threshold=...)`` (-> thresholded_relu),
  and ``Activation(f)`` for a function named ``binary_tanh``/``ternary_tanh``: the Keras 3
  converter names the activation after the function (QKeras, the other source of these two,
  needs Keras 2);
* PyTorch: ``PReLU(n)``, ``Threshold`` (-> thresholded_relu), Sigmoid/Tanh/ELU;
* QONNX: ``Softsign``, ``ThresholdedRelu`` and ``BipolarQuant`` (-> binary_tanh with an
  ``ap_uint<1>`` result, the XNOR type); ONNX ``PRelu`` does not convert in hls4ml 1.3;
* ``unary_lut`` only comes from HGQ models (not installed), so its projects are built from a
  layer list through hls4ml's Python API (``ModelGraph.from_layer_list``), the same
  ``UnaryLUT`` layer the HGQ converter emits, its table in the HGQ order (indexed by the
  input's two's complement bits).

Table settings are set as hls4ml reads them: ``TableSize`` and ``table_t`` keys of an
activation's config (the ``table`` entry under ``Precision`` that config_from_*_model shows is
ignored by hls4ml 1.3 for these, the table stays ap_fixed<18,8>; a UnaryLUT's table type is that
entry, as its table is a weight).
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
hls4ml = pytest.importorskip("hls4ml")

from fpgaserve.backends.hls4ml.emulator import FixedPointModel, UnsupportedLayerError  # noqa: E402
from fpgaserve.backends.hls4ml.fixed_point import FixedType  # noqa: E402
from fpgaserve.backends.hls4ml.project import Hls4mlProject  # noqa: E402
from support.hls4ml_layers import PRECISION, assert_bit_exact, keras_on_torch  # noqa: E402

# non-default tables: TableSize, table_t and, where the table is wide, a result type that keeps
# its bits (so a table entry off by one float32 ulp shows); odd sizes, rounding and saturation
TABLES = {
    "sig": (200, "ap_ufixed<30,0,AP_RND,AP_SAT>", "ap_ufixed<30,0>"),
    "tnh": (4096, "ap_fixed<12,2,AP_RND_CONV,AP_SAT>", None),
    "splus": (1000, "ap_ufixed<34,6,AP_RND>", "ap_fixed<36,7>"),
    "elu": (333, "ap_fixed<10,2,AP_RND,AP_SAT>", None),
    "selu": (64, "ap_fixed<30,3>", "ap_fixed<30,3>"),
    "ssign2": (100, "ap_fixed<32,2,AP_RND_ZERO,AP_SAT_SYM>", "ap_fixed<32,2>"),
}


def _set_tables(layers: dict, tables: dict) -> None:
    for name, (size, table_t, result) in tables.items():
        layers[name]["TableSize"] = size
        layers[name]["table_t"] = table_t
        if result:
            layers[name].setdefault("Precision", {})["result"] = result


# ---------------------------------------------------------------------------- Keras 3
def _keras_acts(keras):
    """Every activation reads the input itself (the full ap_fixed<16,6> range, wraps included);
    a chain of two-input concatenations gathers them."""
    layers = keras.layers

    def binary_tanh(x):  # the converter takes the name: nnet::binary_tanh
        return keras.ops.sign(x)

    def ternary_tanh(x):
        return keras.ops.sign(x)

    i = keras.Input((6,))
    outs = [
        layers.Activation("softsign", name="ssign")(i),
        layers.Activation("softsign", name="ssign2")(i),
        layers.PReLU(name="prelu")(i),
        layers.ReLU(threshold=0.75, name="thr")(i),
        layers.Activation(ternary_tanh, name="tern")(i),
        layers.Activation(ternary_tanh, name="tern2")(i),
        layers.Activation(binary_tanh, name="bin")(i),
        layers.Activation(binary_tanh, name="bin2")(i),
        layers.Activation("sigmoid", name="sig")(i),
        layers.Activation("tanh", name="tnh")(i),
        layers.Activation("softplus", name="splus")(i),
        layers.Activation("elu", name="elu")(i),
        layers.Activation("selu", name="selu")(i),
    ]
    # inputs wider than 20 bits: softsign and ternary_tanh computed per value, not tabulated
    wide = layers.Dense(6, name="fcw")(i)
    outs += [layers.Activation("softsign", name="ssign3")(wide), layers.Activation(ternary_tanh, name="tern3")(wide)]
    x = outs[0]
    for k, o in enumerate(outs[1:]):
        x = layers.Concatenate(name=f"cat{k}")([x, o])
    model = keras.Model(i, x)
    rng = np.random.default_rng(11)
    model.get_layer("prelu").set_weights([rng.normal(0, 0.8, (6,)).astype("float32")])
    return model


def _convert_keras_acts(keras, outdir):
    keras.utils.set_random_seed(7)
    model = _keras_acts(keras)
    cfg = hls4ml.utils.config_from_keras_model(model, granularity="name", backend="Vivado", default_precision=PRECISION)
    layers = cfg["LayerName"]
    for name, layer in layers.items():
        if isinstance(layer.get("Precision"), dict) and layer["Precision"].get("result") == "auto":
            # the concatenations keep the wide tables' bits
            layer["Precision"]["result"] = "ap_fixed<40,8>" if name.startswith("cat") else PRECISION
    _set_tables(layers, TABLES)
    layers["tern2"]["Precision"]["result"] = "ap_fixed<2,1,AP_TRN,AP_SAT>"  # +1 saturates to 0.5
    layers["fcw"]["Precision"]["result"] = "ap_fixed<24,6>"  # 2 * x wraps from 16 up
    layers["bin"]["Precision"]["result"] = "ap_uint<1>"  # binary_cast's 1/0 overload
    layers["bin2"]["Precision"]["result"] = "ap_ufixed<4,2>"  # -1 wraps to 3
    layers["thr"]["Precision"]["param"] = "ap_fixed<6,2,AP_RND>"  # theta on a coarser grid
    layers["prelu"]["Precision"]["param"] = "ap_fixed<10,2,AP_RND,AP_SAT>"
    hm = hls4ml.converters.convert_from_keras_model(
        model, hls_config=cfg, backend="Vivado", io_type="io_parallel", output_dir=str(outdir)
    )
    hm.compile()
    return hm


# ---------------------------------------------------------------------------- PyTorch
class TorchActs(torch.nn.Module):
    """PReLU per feature after a Dense (its slopes get the Dense's 36-bit auto type), Threshold,
    and table activations with non-default tables."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 8)
        self.p8 = torch.nn.PReLU(8)
        self.th = torch.nn.Threshold(0.4, 0.0)
        self.sig, self.tanh, self.elu = torch.nn.Sigmoid(), torch.nn.Tanh(), torch.nn.ELU(0.7)

    def forward(self, x):
        y = self.fc(x)
        a = torch.cat([self.p8(y), self.th(x)], dim=1)  # hls4ml merges two tensors at a time
        b = torch.cat([a, self.sig(y)], dim=1)
        c = torch.cat([b, self.tanh(y)], dim=1)
        return torch.cat([c, self.elu(y)], dim=1)


def _torch_acts():
    torch.manual_seed(3)
    model = TorchActs().eval()
    with torch.no_grad():
        model.p8.weight.normal_(0, 0.5)
        model.fc.weight.mul_(4.0)  # spread the Dense outputs over the tables' range
    return model


def _convert_torch_acts(model, outdir, tables, compile=True):
    cfg = hls4ml.utils.config_from_pytorch_model(
        model, input_shape=(6,), granularity="name", backend="Vivado", default_precision=PRECISION
    )
    _set_tables(cfg["LayerName"], tables)
    for name, layer in cfg["LayerName"].items():
        if name.startswith("cat"):
            layer["Precision"]["result"] = "ap_fixed<40,8>"  # keeps the wide tanh table's bits
    hm = hls4ml.converters.convert_from_pytorch_model(
        model, hls_config=cfg, backend="Vivado", io_type="io_parallel", output_dir=str(outdir)
    )
    if compile:
        hm.compile()
    else:
        hm.write()
    return hm


# ---------------------------------------------------------------------------- QONNX
def _qonnx_acts(n: int = 6):
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("qonnx")
    from onnx import TensorProto, helper, numpy_helper
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.transformation.channels_last import ConvertToChannelsLastAndClean
    from qonnx.util.cleanup import cleanup_model

    nodes = [
        helper.make_node("Softsign", ["x"], ["s"], name="ssign"),
        helper.make_node("ThresholdedRelu", ["x"], ["t"], name="thr", alpha=-0.6),
        helper.make_node("BipolarQuant", ["x", "scale"], ["b"], name="bq", domain="qonnx.custom_op.general"),
        helper.make_node("Concat", ["s", "t"], ["c1"], name="cat1", axis=-1),
        helper.make_node("Concat", ["c1", "b"], ["y"], name="cat2", axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "acts",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3 * n])],
        initializer=[numpy_helper.from_array(np.array(1.0, np.float32), "scale")],
    )
    opsets = [helper.make_opsetid("", 13), helper.make_opsetid("qonnx.custom_op.general", 1)]
    model = ModelWrapper(helper.make_model(graph, opset_imports=opsets))
    onnx.checker.check_model(model.model)
    return cleanup_model(model).transform(ConvertToChannelsLastAndClean())


# ---------------------------------------------------------------------------- unary_lut
def _hgq_table(fn, width: int, integer: int, signed: bool) -> np.ndarray:
    """The table HGQ's converter writes: entry r is f(the input whose raw bits are r)."""
    raw = np.arange(2**width)
    if signed:
        raw = np.where(raw >= 2 ** (width - 1), raw - 2**width, raw)
    return fn(raw * 2.0 ** (integer - width)).astype(np.float32)


def _unary_lut_model(outdir):
    from hls4ml.model import ModelGraph

    config = hls4ml.utils.config.create_config(output_dir=str(outdir), project_name="myproject", backend="Vivado")
    config["IOType"] = "io_parallel"
    config["HLSConfig"] = {
        "Model": {"Precision": PRECISION, "ReuseFactor": 1, "Strategy": "Latency"},
        "LayerName": {
            "x": {"Precision": {"result": "ap_fixed<9,4,AP_RND,AP_SAT>"}},
            # a UnaryLUT's table type is its weight's precision ("table"), which sets table_t
            "lut1": {"Precision": {"result": "ap_ufixed<8,2,AP_RND,AP_SAT>", "table": "ap_fixed<14,4,AP_RND>"}},
            "lut2": {"Precision": {"result": "ap_fixed<10,3>"}},
        },
    }
    layer_list = [
        {"class_name": "InputLayer", "name": "x", "input_shape": [6]},
        {
            "class_name": "UnaryLUT",
            "name": "lut1",
            "inputs": ["x"],
            "activation": "unary_lut",
            "table_data": _hgq_table(lambda v: np.log1p(np.abs(v)) + 0.01 * v, 9, 4, True),
        },
        {
            "class_name": "UnaryLUT",
            "name": "lut2",
            "inputs": ["lut1"],
            "activation": "unary_lut",
            "table_data": _hgq_table(lambda v: 3.0 * np.sin(3 * v), 8, 2, False),
        },
    ]
    hm = ModelGraph.from_layer_list(config, layer_list)
    hm.compile()
    return hm


# ---------------------------------------------------------------------------- tests
def _assert_grid_bit_exact(name: str, hm, model: FixedPointModel) -> None:
    """Every value of the ap_fixed<16,6> input grid once (row-major over the columns, so each
    column-independent activation meets every value): each table index boundary, threshold
    and wrap point is crossed."""
    grid = (np.arange(2**16) - 2**15) * 2.0**-10
    rows = -(-grid.size // model.n_in)
    x = np.resize(grid, rows * model.n_in).reshape(rows, model.n_in)
    ref = np.asarray(hm.predict(np.ascontiguousarray(x))).reshape(rows, -1)
    paths = {"chosen": model.predict(x), "int64": model._predict_int64(x)}
    # an ap_uint<1> result (binary_tanh's XNOR type) keeps predict on the int64 chain (ap_int's
    # constructor from double differs); the float64 ops are exact all the same, so run them too
    paths["float64"] = model._predict_f64(x)
    for path, got in paths.items():
        bad = np.flatnonzero((got.view(np.uint64) != ref.view(np.uint64)).any(axis=1))
        assert bad.size == 0, (
            f"{name} grid ({path}): {bad.size} rows differ, first x={x[bad[0]]}: {got[bad[0]]} vs {ref[bad[0]]}"
        )


def test_keras_activations_bit_exact_with_csim(tmp_path):
    keras = keras_on_torch()
    hm = _convert_keras_acts(keras, tmp_path / "keras")
    kinds = {"softsign", "prelu", "thresholded_relu", "ternary_tanh", "binary_tanh"}
    kinds |= {"sigmoid", "tanh", "softplus", "elu", "selu"}
    model = assert_bit_exact("keras_acts", hm, tmp_path / "keras", kinds)
    wide = [x for x in model.graph.layers if x.name in ("ssign3", "tern3")]
    assert [model.type_of(x.template[0], x).width for x in wide] == [24, 24]
    _assert_grid_bit_exact("keras_acts", hm, model)
    for name, (size, table_t, _result) in TABLES.items():  # the settings reached the firmware
        layer = next(x for x in model.graph.layers if x.name == name)
        assert layer.config["consts"]["table_size"] == str(size), name
        assert model.config_type(layer, "table_t") == FixedType.parse(table_t), name


def test_pytorch_activations_bit_exact_with_csim(tmp_path):
    tables = {
        "sig": (512, "ap_fixed<12,1,AP_RND,AP_SAT>", None),
        "tanh": (777, "ap_fixed<24,1>", "ap_fixed<24,1>"),
        "elu": (128, "ap_fixed<12,3>", None),
    }
    hm = _convert_torch_acts(_torch_acts(), tmp_path / "torch", tables)
    model = assert_bit_exact("torch_acts", hm, tmp_path / "torch", {"prelu", "thresholded_relu", "sigmoid", "elu"})
    _assert_grid_bit_exact("torch_acts", hm, model)
    prelu = next(x for x in model.graph.layers if x.kind == "prelu")
    assert model.type_of(prelu.template[1], prelu).width == 36  # the slopes' auto type: the Dense's


def test_pytorch_shared_prelu_is_refused(tmp_path):
    """PReLU() has one slope; hls4ml 1.3 writes it as a 1-value array which nnet::prelu reads
    at every index up to n_in - 1 (past its end): the emulator refuses it, naming the layer."""

    class Shared(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.p1 = torch.nn.PReLU()

        def forward(self, x):
            return self.p1(x)

    _convert_torch_acts(Shared().eval(), tmp_path / "shared", {}, compile=False)
    assert "load_weights_from_txt<p1_param_t, 1>" in (tmp_path / "shared/firmware/myproject.cpp").read_text()
    with pytest.raises(UnsupportedLayerError, match=r"layer 'p1' \(nnet::prelu, .*has 1 values but the layer reads 6"):
        FixedPointModel(Hls4mlProject.load(tmp_path / "shared"))


def test_qonnx_activations_bit_exact_with_csim(tmp_path):
    model = _qonnx_acts()
    cfg = hls4ml.utils.config_from_onnx_model(model, granularity="name", backend="Vivado", default_precision=PRECISION)
    cfg["LayerName"]["Softsign_0"].update(TableSize=2048, table_t="ap_fixed<12,1,AP_RND_CONV,AP_SAT>")
    hm = hls4ml.converters.convert_from_onnx_model(
        model, hls_config=cfg, backend="Vivado", io_type="io_parallel", output_dir=str(tmp_path / "qonnx")
    )
    hm.compile()
    fpm = assert_bit_exact("qonnx_acts", hm, tmp_path / "qonnx", {"softsign", "thresholded_relu", "binary_tanh"})
    _assert_grid_bit_exact("qonnx_acts", hm, fpm)
    binary = next(x for x in fpm.graph.layers if x.kind == "binary_tanh")
    assert str(fpm.type_of(binary.template[1], binary)) == "ap_uint<1>"


def test_unary_lut_bit_exact_with_csim(tmp_path):
    hm = _unary_lut_model(tmp_path / "lut")
    model = assert_bit_exact("unary_lut", hm, tmp_path / "lut", {"unary_lut"})
    _assert_grid_bit_exact("unary_lut", hm, model)
    assert [x.kind for x in model.graph.layers] == ["unary_lut", "unary_lut"]
    assert str(model.config_type(model.graph.layers[0], "table_t")) == "ap_fixed<14,4,AP_RND,AP_WRAP,0>"
    # an input wider than the table can index is refused (the firmware would read past it)
    dst = tmp_path / "lut_wide"
    shutil.copytree(tmp_path / "lut", dst, ignore=shutil.ignore_patterns("*.so", "ap_types"))
    defines = dst / "firmware" / "defines.h"
    defines.write_text(
        defines.read_text().replace("ap_fixed<9,4,AP_RND,AP_SAT,0> input_t", "ap_fixed<10,4,AP_RND,AP_SAT,0> input_t")
    )
    with pytest.raises(UnsupportedLayerError, match=r"layer 'lut1' \(nnet::unary_lut.*1024 entries, the table has 512"):
        FixedPointModel(Hls4mlProject.load(dst))


def test_table_activation_gathers_match_the_index_formula(monkeypatch):
    """sigmoid/tanh/softplus/softsign/elu/selu read a table over the input's raws (whole domain,
    the unsaturated range) or shift the index where N / span is a power of two; each must equal
    the element-by-element C index formula it replaces, on both paths, for narrow, wide and
    negative-fraction inputs (the unsaturated range's ends and the wrap-free bound included)."""
    from fpgaserve.backends.hls4ml.emulator import activations as acts
    from fpgaserve.backends.hls4ml.emulator.registry import BUILDERS
    from fpgaserve.backends.hls4ml.firmware_graph import Layer
    from fpgaserve.backends.hls4ml.fixed_point import FixedType

    class _M:
        def type_of(self, name, layer):
            return FixedType.parse(layer.config["types"].get(name, name))

        def config_type(self, layer, key):
            return self.type_of(key, layer)

        def check_width(self, *a, **k):
            pass

    rng = np.random.default_rng(5)
    cases = []
    for kind in ("sigmoid", "tanh", "softplus", "softsign", "elu", "selu"):
        for spec in (
            "ap_fixed<12,4>",
            "ap_fixed<16,6>",
            "ap_fixed<24,8,AP_RND,AP_SAT>",
            "ap_fixed<38,18>",
            "ap_fixed<30,34>",
            "ap_ufixed<22,3>",
        ):
            for n in (1024, 1000):
                cases.append((kind, FixedType.parse(spec), n))
    m = _M()

    def build(kind, in_t, n):
        cfg = {
            "consts": {"table_size": str(n)},
            "types": {"table_t": "ap_fixed<18,8>", "out_t": "ap_fixed<14,4,AP_RND,AP_SAT>"},
        }
        return BUILDERS[kind](m, Layer(kind, "x", [str(in_t), "out_t", "c"], ["d", "r"], "c", cfg), in_t)

    for kind, in_t, n in cases:
        x = rng.integers(in_t.raw_min, in_t.raw_max + 1, 3000, dtype=np.int64)
        for real in (-8, -4, 0, 4, 8):  # the ends of the unsaturated ranges
            c = int(real * 2.0**in_t.frac)
            x = np.concatenate([x, np.arange(c - 40, c + 40)])
        x = np.clip(x, in_t.raw_min, in_t.raw_max).reshape(2, -1)
        fast = build(kind, in_t, n)
        with monkeypatch.context() as mp:  # no tables, no shifts: the element formula
            mp.setattr(acts, "_TABLE_BITS", 0)
            mp.setattr(acts, "_pow2_shift", lambda mul, den: None)
            want = build(kind, in_t, n)[0](x.copy())
        np.testing.assert_array_equal(fast[0](x.copy()), want, err_msg=f"{kind} {in_t} {n}")
        if len(fast) > 2 and fast[2] is not None:
            got = fast[2](x.astype(np.float64))
            np.testing.assert_array_equal(got.astype(np.int64), want, err_msg=f"{kind} {in_t} {n} f64")
