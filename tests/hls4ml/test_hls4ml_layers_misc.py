"""Index-map layers, Embedding, Dot, Einsum/EinsumDense and integer/binary Dense weights,
emulated bit for bit against hls4ml's own C-simulation (``HLSModel.compile`` + ``predict``).

Covered: ZeroPadding1D/2D, Cropping1D/2D, UpSampling1D/2D (``resize_nearest``), Keras Dot
(``dot1d``), EinsumDense (2-D and 3-D), Embedding (ap_uint token input), PyTorch
ConstantPad1d/Upsample/``torch.einsum``; Dense with ``ap_int<4>`` weights (product::mult
on integer texts), ``ap_int<2>`` weights (``weight_ternary``), xnor 1-bit weights
(``weight_binary``), xnor data (``data_binary``) and both (``both_binary`` with its
ap_int cast), one of them with a saturating accumulator (the C-order replay).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
hls4ml = pytest.importorskip("hls4ml")

from fpgaserve.backends.hls4ml.emulator import FixedPointModel  # noqa: E402
from fpgaserve.backends.hls4ml.project import Hls4mlProject  # noqa: E402
from support.hls4ml_layers import PRECISION, assert_bit_exact, convert_torch, keras_on_torch, no_auto_precision  # noqa: E402


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("hls4ml_layers_misc")


def _convert(model, outdir, tweak=None):
    """Keras 3 (torch backend) -> hls4ml Vivado io_parallel project, compiled."""
    cfg = hls4ml.utils.config_from_keras_model(model, granularity="name", backend="Vivado", default_precision=PRECISION)
    if tweak is not None:
        tweak(cfg["LayerName"])
    no_auto_precision(cfg["LayerName"])
    hm = hls4ml.converters.convert_from_keras_model(
        model, hls_config=cfg, backend="Vivado", io_type="io_parallel", output_dir=str(outdir)
    )
    hm.compile()
    return hm


def _keras_moves(keras):
    layers = keras.layers
    i = keras.Input((6, 4, 2))
    a = layers.ZeroPadding2D(((1, 0), (2, 1)))(i)
    a = layers.Cropping2D(((0, 2), (1, 1)))(a)
    a = layers.UpSampling2D((2, 3))(a)
    r = layers.Reshape((24, 2))(i)
    b = layers.UpSampling1D(2)(layers.Cropping1D((3, 1))(layers.ZeroPadding1D((1, 2))(r)))
    f = layers.Flatten()(i)
    d = layers.Dot(axes=1)([layers.Dense(8)(f), layers.Dense(8)(f)])
    e1 = layers.EinsumDense("abc,cd->abd", output_shape=(24, 3), bias_axes="d")(r)
    e2 = layers.EinsumDense("ab,bc->ac", output_shape=(5,))(f)
    x = layers.Concatenate()([layers.Flatten()(a), layers.Flatten()(b)])
    x = layers.Concatenate()([layers.Concatenate()([x, d]), layers.Flatten()(e1)])
    return keras.Model(i, layers.Concatenate()([x, e2])), (6, 4, 2)


def test_keras_moves_dot_einsum_dense_bit_exact(workdir):
    keras = keras_on_torch()
    keras.utils.set_random_seed(7)
    hm = _convert(_keras_moves(keras)[0], workdir / "moves")
    kinds = {"zeropad2d_cl", "zeropad1d_cl", "cropping2d_cl", "cropping1d_cl", "resize_nearest", "dot1d"}
    model = assert_bit_exact("moves", hm, workdir / "moves", kinds | {"einsum_dense"})
    assert model._f64


def _quantized_inputs(n_in: int, rows: int = 600) -> np.ndarray:
    rng = np.random.default_rng(n_in)
    return np.concatenate([rng.normal(0, 2, (rows, n_in)), rng.normal(0, 60, (rows // 4, n_in)), np.zeros((2, n_in))])


def _compare(hm, outdir, x, kinds):
    model = FixedPointModel(Hls4mlProject.load(outdir))
    assert kinds <= {layer.kind for layer in model.graph.layers}
    ref = np.asarray(hm.predict(np.ascontiguousarray(x))).reshape(len(x), -1)
    for path, got in (("chosen", model.predict(x)), ("int64", model._predict_int64(x))):
        bad = np.flatnonzero((got.view(np.uint64) != ref.view(np.uint64)).any(axis=1))
        assert bad.size == 0, f"{outdir.name} ({path}): {bad.size} rows differ, first {got[bad[0]]} vs {ref[bad[0]]}"
    return model, ref


def test_keras_embedding_bit_exact(workdir):
    """Tokens as ap_uint<5> (every value a valid row of the 32-word table): fractions,
    negatives and large values exercise the input conversion, then the lookup."""
    keras = keras_on_torch()
    keras.utils.set_random_seed(3)
    i = keras.Input((6,))
    e = keras.layers.Embedding(32, 5, embeddings_initializer=keras.initializers.RandomUniform(-20, 20))(i)
    model = keras.Model(i, keras.layers.Flatten()(e))

    def tweak(layers):
        layers[model.layers[0].name]["Precision"] = {"result": "ap_uint<5>"}
        layers["embedding"]["Precision"] = {"embeddings": "ap_fixed<12,6>", "result": "ap_fixed<10,4,AP_RND,AP_SAT>"}

    hm = _convert(model, workdir / "embed", tweak)
    rng = np.random.default_rng(5)
    x = np.concatenate(
        [rng.integers(0, 32, (500, 6)) + rng.uniform(-0.99, 0.99, (500, 6)), rng.normal(0, 300, (50, 6))]
    )
    _model, ref = _compare(hm, workdir / "embed", x, {"embedding"})
    assert len(np.unique(ref)) > 50


class PadUpEinsum(torch.nn.Module):
    """ConstantPad1d -> Upsample -> torch.einsum with a Linear's output. The einsum's result
    is the model's output: hls4ml 1.3 sizes a concatenation of it wrongly (n_elem2_0 = 12
    for its 6 values, reading beyond the array)."""

    def __init__(self):
        super().__init__()
        self.pad = torch.nn.ConstantPad1d((2, 1), 0.0)
        self.up = torch.nn.Upsample(scale_factor=2)
        self.b = torch.nn.Linear(18, 36)

    def forward(self, x):
        y = self.up(self.pad(x))  # (3, 6) -> (3, 9) -> (3, 18)
        return torch.einsum("bij,bkj->bik", y, self.b(torch.flatten(x, 1)).view(-1, 2, 18))


def test_pytorch_pad_upsample_einsum_bit_exact(workdir):
    torch.manual_seed(4)

    def tweak(layers):
        no_auto_precision(layers)
        einsum = next(name for name in layers if "einsum" in name)
        layers[einsum]["Precision"] = {"accum": "ap_fixed<14,5,AP_RND,AP_SAT>", "result": PRECISION}

    hm = convert_torch(PadUpEinsum().eval(), (3, 6), workdir / "torch_misc", tweak)
    assert_bit_exact("torch_misc", hm, workdir / "torch_misc", {"einsum", "resize_nearest", "zeropad1d_cl"})


def _keras_int_weights(keras):
    layers = keras.layers
    i = keras.Input((10,))
    big = keras.initializers.RandomUniform(-9, 9)  # integer texts beyond ap_int<4> wrap
    x = layers.Dense(12, kernel_initializer=big, bias_initializer=big, name="int4")(i)
    t = layers.Dense(6, kernel_initializer=keras.initializers.RandomUniform(-2.6, 2.6), name="ternary")(x)
    wb = layers.Dense(7, name="wbin")(x)
    return keras.Model(i, layers.Concatenate()([t, wb])), (10,)


def test_keras_integer_and_binary_weights_bit_exact(workdir):
    """ap_int<4> weights and biases (mult), ap_int<2> weights (weight_ternary, saturating
    accumulator), xnor weights (weight_binary), as hls4ml configs set them."""
    from hls4ml.model.types import XnorPrecisionType

    keras = keras_on_torch()
    keras.utils.set_random_seed(11)
    model, _ = _keras_int_weights(keras)

    def tweak(layers):
        layers["int4"]["Precision"].update(weight="ap_int<4>", bias="ap_int<4>", accum="ap_fixed<24,14>")
        layers["ternary"]["Precision"].update(weight="ap_int<2>", accum="ap_fixed<12,5,AP_RND,AP_SAT>")
        layers["wbin"]["Precision"].update(weight=XnorPrecisionType(), accum="ap_fixed<20,10>")

    out = workdir / "intw"
    hm = _convert(model, out, tweak)
    params = (out / "firmware" / "parameters.h").read_text()
    for product in ("weight_ternary", "weight_binary", "product::mult"):
        assert product in params
    _model, ref = _compare(hm, out, _quantized_inputs(10), {"dense"})
    assert len(np.unique(ref)) > 50


def test_keras_binary_data_bit_exact(workdir):
    """xnor (ap_uint<1>) input: data_binary with fixed-point weights, both_binary with xnor
    weights (its result is ap_int<ceillog2(n_in) + 2>(2 * count - n_in))."""
    from hls4ml.model.types import XnorPrecisionType

    keras = keras_on_torch()
    keras.utils.set_random_seed(12)
    layers = keras.layers
    i = keras.Input((16,))
    model = keras.Model(i, layers.Concatenate()([layers.Dense(6, name="dbin")(i), layers.Dense(5, name="bbin")(i)]))

    def tweak(layers):
        layers[model.layers[0].name]["Precision"] = {"result": XnorPrecisionType()}
        layers["dbin"]["Precision"].update(accum="ap_fixed<16,6>")
        layers["bbin"]["Precision"].update(weight=XnorPrecisionType(), accum="ap_fixed<12,8>")

    out = workdir / "bindata"
    hm = _convert(model, out, tweak)
    params = (out / "firmware" / "parameters.h").read_text()
    assert "data_binary" in params and "both_binary" in params
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.integers(0, 2, (400, 16)).astype(float), rng.normal(0, 2, (200, 16))])
    _compare(hm, out, x, {"dense"})
