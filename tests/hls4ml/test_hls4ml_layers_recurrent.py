"""Recurrent layers (``nnet::lstm_stack``, ``nnet::gru_stack``) emulated bit for bit.

Models converted by hls4ml 1.3.0 from PyTorch (``batch_first`` LSTM and GRU; hls4ml's PyTorch
RNNs return the last hidden state) and Keras 3 (torch backend: LSTM and GRU with
return_sequences true and false, stacked, with relu/sigmoid/tanh as activation and recurrent
activation), compiled by hls4ml, and compared with ``HLSModel.predict`` on both emulator paths
over 5 time steps of 4 features and 8 units. The variants: static and non-static state,
latency and resource dense kernels, PyTorch's gate order, and a result type narrower than the
accumulator with rounding and saturation (so every cast of the state shows).

hls4ml's Vivado backend writes no call for SimpleRNN (an empty top function): such a project
is refused by the emulator, checked here on the firmware hls4ml writes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
hls4ml = pytest.importorskip("hls4ml")

from fpgaserve.backends.hls4ml.emulator import FixedPointModel, UnsupportedLayerError  # noqa: E402
from fpgaserve.backends.hls4ml.project import Hls4mlProject, ProjectError  # noqa: E402
from support.hls4ml_layers import PRECISION, assert_bit_exact, keras_on_torch  # noqa: E402

STEPS, FEATURES, UNITS = 5, 4, 8


class TorchRecurrent(torch.nn.Module):
    """An LSTM and a GRU reading the same sequence; hls4ml keeps their last hidden states."""

    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(FEATURES, UNITS, batch_first=True)
        self.gru = torch.nn.GRU(FEATURES, UNITS, batch_first=True)
        self.fa, self.fb = torch.nn.Linear(UNITS, 3), torch.nn.Linear(UNITS, 3)

    def forward(self, x):
        a, _ = self.lstm(x)
        b, _ = self.gru(x)
        return self.fa(a[:, -1, :]) + self.fb(b[:, -1, :])


def _convert_torch_rnn(model, outdir: Path, tweak=None):
    # batch_first input is already (time, features): hls4ml's default channels-last
    # conversion would transpose it for the first RNN only (a firmware whose weights do not fit)
    cfg = hls4ml.utils.config_from_pytorch_model(
        model,
        input_shape=(STEPS, FEATURES),
        granularity="name",
        backend="Vivado",
        default_precision=PRECISION,
        channels_last_conversion="off",
    )
    if tweak:
        tweak(cfg["LayerName"])
    hm = hls4ml.converters.convert_from_pytorch_model(
        model, hls_config=cfg, backend="Vivado", io_type="io_parallel", output_dir=str(outdir)
    )
    hm.compile()
    return hm


def _torch_tweak(layers):
    layers["lstm"]["Static"] = False  # nnet::lstm (state passed in) rather than nnet::lstm_static
    for name in ("lstm", "gru"):
        layers[name]["Precision"].update(result=PRECISION, accum=PRECISION)


def _keras_recurrent(keras):
    layers = keras.layers
    i = keras.Input((STEPS, FEATURES))
    # named: Keras numbers unnamed layers per process, and the tweaks below pick layers by name
    x = layers.LSTM(UNITS, return_sequences=True, name="lstm")(i)
    x = layers.GRU(UNITS, return_sequences=True, activation="relu", name="gru")(x)
    a = layers.LSTM(UNITS, recurrent_activation="relu", activation="sigmoid", name="lstm_1")(x)
    b = layers.GRU(UNITS, recurrent_activation="tanh", name="gru_1")(x)
    return keras.Model(i, layers.Dense(3)(layers.Concatenate()([a, b])))


def _keras_tweak(layers):
    for layer in layers.values():
        precision = layer.get("Precision")
        if isinstance(precision, dict):
            for key, value in precision.items():
                if value == "auto":
                    precision[key] = PRECISION
    # rounding and saturating states; hls4ml compiles an LSTM only when its input, result and
    # accumulator types are one, a GRU with any: there a state narrower than a wider accumulator
    rounded = "ap_fixed<14,5,AP_RND_CONV,AP_SAT>"
    layers["gru"]["Precision"]["result"] = rounded
    layers["gru"].update(Strategy="Resource", ReuseFactor=2)  # resource dense kernels inside the GRU
    layers["lstm_1"]["Precision"].update(result=rounded, accum=rounded)
    layers["gru_1"]["Precision"].update(result="ap_fixed<12,4,AP_RND,AP_SAT>", accum="ap_fixed<20,8>")


def _convert_keras_rnn(keras, outdir: Path):
    keras.utils.set_random_seed(11)
    model = _keras_recurrent(keras)
    cfg = hls4ml.utils.config_from_keras_model(model, granularity="name", backend="Vivado", default_precision=PRECISION)
    _keras_tweak(cfg["LayerName"])
    hm = hls4ml.converters.convert_from_keras_model(
        model, hls_config=cfg, backend="Vivado", io_type="io_parallel", output_dir=str(outdir)
    )
    hm.compile()
    return hm


def _configs(model: FixedPointModel, kind: str) -> list[dict]:
    return [layer.config["consts"] for layer in model.graph.layers if layer.kind == kind]


def test_pytorch_lstm_gru_bit_exact_with_csim(tmp_path):
    torch.manual_seed(5)
    hm = _convert_torch_rnn(TorchRecurrent().eval(), tmp_path / "torch", _torch_tweak)
    model = assert_bit_exact("torch_rnn", hm, tmp_path / "torch", {"lstm_stack", "gru_stack"})
    (lstm,), (gru,) = _configs(model, "lstm_stack"), _configs(model, "gru_stack")
    assert (lstm["use_static"], gru["use_static"]) == ("false", "true")
    assert lstm["pytorch_order"] == gru["pytorch_order"] == "true"
    assert lstm["n_sequence_out"] == gru["n_sequence_out"] == "1"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("hls4ml_recurrent")


def test_keras_lstm_gru_bit_exact_with_csim(workdir):
    keras = keras_on_torch()
    hm = _convert_keras_rnn(keras, workdir / "keras")
    model = assert_bit_exact("keras_rnn", hm, workdir / "keras", {"lstm_stack", "gru_stack"})
    assert [c["n_sequence_out"] for c in _configs(model, "lstm_stack")] == ["5", "1"]
    assert [c["n_sequence_out"] for c in _configs(model, "gru_stack")] == ["5", "1"]
    assert {c["pytorch_order"] for c in _configs(model, "gru_stack")} == {"false"}
    usings = {u for layer in model.graph.layers for u in layer.config.get("using", {}).values()}
    assert {"nnet::activation::relu", "nnet::activation::sigmoid", "nnet::activation::tanh"} <= usings
    kernels = {c.get("using", {}).get("kernel") for c in model.graph.configs.values()}
    assert {"nnet::DenseLatency", "nnet::DenseResource_rf_leq_nin"} <= kernels
    assert model._f64


def _edited(src: Path, dst: Path, edits: dict[str, tuple[str, str]]) -> Path:
    """A copy of the firmware of ``src`` with one replacement per file (must match once)."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.so", "ap_types"))
    for name, (old, new) in edits.items():
        path = dst / "firmware" / name
        text = path.read_text()
        assert text.count(old) == 1, f"{name}: '{old}' found {text.count(old)} times"
        path.write_text(text.replace(old, new))
    return dst


def test_what_hls4ml_cannot_compile_is_refused(workdir, tmp_path):
    """A recurrent activation nnet_recr_activations.h lacks (Keras hard_sigmoid, linear: g++
    fails on parameters.h) and an LSTM whose accumulator differs from its state type (nnet::lstm
    is instantiated whatever use_static says, and does not compile): refused at load."""
    src = workdir / "keras"
    if not src.is_dir():
        _convert_keras_rnn(keras_on_torch(), src)
    act = _edited(
        src,
        tmp_path / "hard_sigmoid",
        {
            "parameters.h": (
                "recr = nnet::activation::sigmoid<x_T, y_T, config_T>;\n    typedef tanh_config2 ",
                "recr = nnet::activation::hard_sigmoid<x_T, y_T, config_T>;\n    typedef tanh_config2 ",
            )
        },
    )
    with pytest.raises(UnsupportedLayerError, match=r"layer 'lstm' .*nnet::activation::hard_sigmoid.*defines only"):
        FixedPointModel(Hls4mlProject.load(act))
    types = _edited(
        src, tmp_path / "types", {"defines.h": ("ap_fixed<16,6> lstm_accum_t;", "ap_fixed<18,6> lstm_accum_t;")}
    )
    with pytest.raises(UnsupportedLayerError, match=r"layer 'lstm' .*compiles lstm_stack only when"):
        FixedPointModel(Hls4mlProject.load(types))


def test_gru_reset_before_is_refused(tmp_path):
    """Keras GRU(reset_after=False): hls4ml 1.3.0 writes one-value bias arrays that the gate
    products read 3 x units values from (undefined behaviour in the C-simulation): refused."""
    keras = keras_on_torch()
    keras.utils.set_random_seed(2)
    i = keras.Input((STEPS, FEATURES))
    model = keras.Model(i, keras.layers.GRU(UNITS, reset_after=False, name="gru_before")(i))
    cfg = hls4ml.utils.config_from_keras_model(model, granularity="name", backend="Vivado", default_precision=PRECISION)
    hm = hls4ml.converters.convert_from_keras_model(
        model, hls_config=cfg, backend="Vivado", io_type="io_parallel", output_dir=str(tmp_path / "gru")
    )
    hm.write()
    with pytest.raises(UnsupportedLayerError, match=r"layer 'gru_before' .*weight sizes 96/1 do not match 4x24"):
        FixedPointModel(Hls4mlProject.load(tmp_path / "gru"))


def test_simple_rnn_is_refused(tmp_path):
    """hls4ml 1.3.0's Vivado backend has no SimpleRNN template: the top function it writes is
    empty, and the emulator refuses the project rather than invent an output."""

    class Rnn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = torch.nn.RNN(FEATURES, UNITS, batch_first=True)

        def forward(self, x):
            return self.rnn(x)[0]

    cfg = hls4ml.utils.config_from_pytorch_model(
        Rnn(), input_shape=(STEPS, FEATURES), granularity="name", backend="Vivado", channels_last_conversion="off"
    )
    hm = hls4ml.converters.convert_from_pytorch_model(
        Rnn(), hls_config=cfg, backend="Vivado", io_type="io_parallel", output_dir=str(tmp_path / "rnn")
    )
    hm.write()
    assert "nnet::" not in (tmp_path / "rnn" / "firmware" / "myproject.cpp").read_text().split("insert layers")[-1]
    with pytest.raises(ProjectError, match="no nnet:: layer calls"):
        FixedPointModel(Hls4mlProject.load(tmp_path / "rnn"))
