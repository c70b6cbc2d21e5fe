"""Dense products each rounded into accum_t (accum_t with fewer fractional bits than the
product): the vectorised int32/float64 paths of ``dense._rounded_products`` and EinsumDense's
grouped slices (n_inplace > 1), against hls4ml's csim, and against the int64 loops they
replace on random types, weights and saturating inputs (no compile)."""

from __future__ import annotations

import random

import numpy as np
import pytest

import hls4ml
from fpgaserve.backends.hls4ml.emulator import FixedPointModel, dense
from fpgaserve.backends.hls4ml.firmware_graph import Layer, UnsupportedLayerError
from fpgaserve.backends.hls4ml.fixed_point import FixedType
from fpgaserve.backends.hls4ml.project import Hls4mlProject
from support.hls4ml_layers import PRECISION, assert_bit_exact, keras_on_torch

#: accum_t per layer: each picks one of the rounded-product paths
ACCUM = {
    "einsum_wrap": "ap_fixed<14,5>",  # modular, int32 (W + s = 14 + 10 <= 32)
    "einsum_sat": "ap_fixed<16,6,AP_RND_CONV,AP_SAT>",  # saturating, float64 rint
    "dense_sat": "ap_fixed<12,4,AP_RND,AP_SAT>",  # saturating, int32
    "dense_conv": "ap_fixed<18,8,AP_RND_CONV>",  # modular, float64 rint
}


def _model(keras):
    layers = keras.layers
    i = keras.Input((4, 6))
    # b is an inplace index (data and kernel share it): one kernel slice per b, n_inplace 4
    e1 = layers.EinsumDense("abc,bcd->abd", output_shape=(4, 3), bias_axes="bd", name="einsum_wrap")(i)
    r = layers.Reshape((4, 2, 3))(i)
    e2 = layers.EinsumDense("abcd,bde->abce", output_shape=(4, 2, 5), bias_axes="be", name="einsum_sat")(r)
    f = layers.Flatten()(i)
    d1 = layers.Dense(6, name="dense_sat")(f)
    d2 = layers.Dense(5, name="dense_conv")(f)
    cat = layers.Concatenate  # hls4ml's takes two inputs
    out = cat()([cat()([layers.Flatten()(e1), layers.Flatten()(e2)]), cat()([d1, d2])])
    return keras.Model(i, out)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    keras = keras_on_torch()
    keras.utils.set_random_seed(3)
    model = _model(keras)
    cfg = hls4ml.utils.config_from_keras_model(model, granularity="name", backend="Vivado", default_precision=PRECISION)
    for name, layer in cfg["LayerName"].items():
        precision = layer.get("Precision")
        if isinstance(precision, dict):
            for key, value in precision.items():
                if value == "auto":
                    precision[key] = PRECISION
            if name in ACCUM:
                precision["accum"] = ACCUM[name]
    outdir = tmp_path_factory.mktemp("hls4ml_rounded") / "m"
    hm = hls4ml.converters.convert_from_keras_model(
        model, hls_config=cfg, backend="Vivado", io_type="io_parallel", output_dir=str(outdir)
    )
    hm.compile()
    return hm, outdir


def test_keras_rounded_products_and_inplace_einsum_bit_exact(project):
    hm, outdir = project
    model = assert_bit_exact("rounded", hm, outdir, {"einsum_dense", "dense"})
    inplace = [layer.config["consts"]["n_inplace"] for layer in model.graph.layers if layer.kind == "einsum_dense"]
    assert inplace == ["4", "4"]
    accums = {name: FixedType.parse(t) for name, t in model.graph.typedefs.items() if name.endswith("accum_t")}
    for name, accum in ACCUM.items():  # the configuration reached the firmware
        assert accums[f"{name}_accum_t"] == FixedType.parse(accum)


def _random_dense(m: FixedPointModel, rng: random.Random, it: int):
    """A dense layer config of random types (accumulators in the fast paths' modes)."""
    n_in, n_out = rng.randint(1, 30), rng.randint(1, 7)

    def typ(width, quant="AP_TRN", overflow="AP_WRAP", signed=True):
        integer = rng.randint(-2, width + 2)
        return f"ap_{'' if signed else 'u'}fixed<{width},{integer},{quant},{overflow}>"

    quant = rng.choice(["AP_TRN", "AP_RND", "AP_RND_CONV"])
    acc = typ(rng.randint(4, 34), quant, rng.choice(["AP_WRAP", "AP_SAT"]), rng.random() < 0.9)
    tin, tw, tout = typ(rng.randint(2, 20), signed=rng.random() < 0.8), typ(rng.randint(2, 18)), typ(16)
    kernel = rng.choice(["nnet::DenseLatency"] * 3 + ["nnet::DenseResource_rf_leq_nin"])
    rf = 1 if kernel.endswith("Latency") else rng.choice([d for d in range(1, n_in + 1) if n_in * n_out % d == 0])
    cfg = {
        "consts": {"n_in": str(n_in), "n_out": str(n_out), "reuse_factor": str(rf)},
        "types": {"accum_t": acc, "weight_t": tw, "bias_t": tw},
        "using": {"kernel": kernel, "product": "nnet::product::mult"},
    }
    m.layer_key = ("random", it)
    return Layer("dense", f"random{it}", [tin, tout, "cfg"], ["x", "y", "w", "b"], "cfg", cfg), n_in, n_out


def test_rounded_products_match_the_int64_loops(project, monkeypatch):
    """The int32/float64 rounded products give the int64 per-input (modular) and
    sequential (saturating) loops' results bit for bit, groups included."""
    m = FixedPointModel(Hls4mlProject.load(project[1]))
    rng = random.Random(11)
    fast_paths = 0
    for it in range(150):
        layer, n_in, n_out = _random_dense(m, rng, it)
        in_t, out_t = FixedType.parse(layer.template[0]), FixedType.parse(layer.template[1])
        w_t = FixedType.parse(layer.config["types"]["weight_t"])
        groups = rng.choice([1, 1, 3])
        r = np.random.default_rng(it)
        w = r.integers(w_t.raw_min, w_t.raw_max + 1, n_in * n_out)
        b = r.integers(w_t.raw_min, w_t.raw_max + 1, n_out * groups)
        cols = n_in * groups
        x = np.concatenate(
            [
                r.integers(in_t.raw_min, in_t.raw_max + 1, (200, cols)),
                np.full((1, cols), in_t.raw_min),
                np.full((1, cols), in_t.raw_max),
                np.zeros((1, cols), np.int64),
            ]
        )
        try:
            trip = dense._dense_triplets(m, layer, n_in, n_out)
            got = dense.dense_from_arrays(m, layer, in_t, out_t, w, b, n_in, n_out, trip, groups=groups)
        except UnsupportedLayerError:
            continue
        with monkeypatch.context() as patch:
            patch.setattr(dense, "_rounded_products", lambda *a, **k: None)
            ref = dense.dense_from_arrays(m, layer, in_t, out_t, w, b, n_in, n_out, trip, groups=groups)
        fast_paths += got[0].__name__ == "dense_rounded"
        assert np.array_equal(got[0](x), ref[0](x)), f"case {it}: {layer.config['types']}, groups {groups}"
    assert fast_paths > 50
