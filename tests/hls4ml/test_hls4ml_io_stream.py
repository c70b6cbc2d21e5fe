"""io_stream hls4ml projects, emulated bit for bit and served.

hls4ml converts the models with ``io_type="io_stream"`` (Vivado backend), compiles them
(``HLSModel.compile``: its bridge feeds hls::stream words through the top function) and the
numpy emulator must equal ``HLSModel.predict`` bit for bit on random, saturating, negative,
zero and on-grid inputs, on both of its paths (float64 and int64). The Keras CNN has what
io_stream adds or changes: the zeropad layer hls4ml inserts for a 'same' convolution, the
line-buffer convolution, max and average pooling in accum_t, clone_stream (a branch), an add
and a concatenation of the branches, repack_stream (Flatten), tanh, and the stream softmax; the
PyTorch MLP is dense layers and activations on streams. fpgaserve's own C-simulation (its
batch shim calls the stream top function through hls4ml's stream convert_data) is checked
against the same reference, and one model is packed with ``--io-type io_stream`` and served in
numpy and csim modes over the real server. A separable network (depthwise and pointwise
stream convolutions) is packed without hls4ml's generic nnet_code_gen.h and served in auto
mode: numpy is chosen and equals csim bit for bit. Every case runs by default; the two
more pack conversions run under ``FPGASERVE_LONG_TESTS=1`` and are a reported skip otherwise.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
hls4ml = pytest.importorskip("hls4ml")

from fpgaserve.backends.hls4ml.csim import CsimLibrary  # noqa: E402
from fpgaserve.backends.hls4ml.emulator import FixedPointModel  # noqa: E402
from fpgaserve.backends.hls4ml.project import Hls4mlProject  # noqa: E402
from support.hls4ml_layers import PRECISION, bit_exact_inputs, keras_on_torch  # noqa: E402


class StreamMlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = torch.nn.Linear(12, 16), torch.nn.Linear(16, 8), torch.nn.Linear(8, 4)
        self.relu, self.sig = torch.nn.ReLU(), torch.nn.Sigmoid()

    def forward(self, x):
        return self.fc3(self.sig(self.fc2(self.relu(self.fc1(x)))))


def _keras_stream_cnn(keras):
    layers = keras.layers
    i = keras.Input((12, 12, 2))
    x = layers.Conv2D(4, 3, padding="same", activation="relu")(i)  # hls4ml inserts zeropad2d_cl
    x = layers.MaxPooling2D(2)(x)
    a, b = layers.Conv2D(4, 3)(x), layers.Conv2D(4, 3)(x)  # x is cloned for the two branches
    x = layers.Concatenate()([layers.Add()([a, b]), layers.Activation("tanh")(b)])
    x = layers.AveragePooling2D(2)(x)
    x = layers.Reshape((8, 4))(x)  # words of 8 channels regrouped by 4: repack_stream
    x = layers.Dense(5, activation="softmax")(layers.Flatten()(x))
    return keras.Model(i, x)


class StreamConv(torch.nn.Module):
    """Channels-first input (hls4ml inserts stream transposes), a strided convolution."""

    def __init__(self):
        super().__init__()
        self.c1, self.relu = torch.nn.Conv2d(2, 3, 3), torch.nn.ReLU()
        self.c2, self.fc = torch.nn.Conv2d(3, 4, 3, stride=2), torch.nn.Linear(4 * 2 * 2, 3)

    def forward(self, x):
        return self.fc(torch.flatten(self.c2(self.relu(self.c1(x))), 1))


def _keras_stream_1d(keras):
    """Conv1D 'same' (zeropad1d_cl), BatchNormalization, pooling and both global poolings."""
    layers = keras.layers
    i = keras.Input((16, 3))
    x = layers.Conv1D(4, 3, padding="same")(i)
    x = layers.Activation("relu")(layers.BatchNormalization()(x))
    x = layers.MaxPooling1D(2)(x)
    x = layers.Concatenate()([layers.GlobalAveragePooling1D()(x), layers.GlobalMaxPooling1D()(x)])
    return keras.Model(i, layers.Dense(3)(x))


def _fix_auto(cfg):
    for layer in cfg["LayerName"].values():
        precision = layer.get("Precision")
        if isinstance(precision, dict) and precision.get("result") == "auto":
            precision["result"] = PRECISION  # merges of auto-sized results grow past 64 bits


def _convert_keras_stream(outdir: Path, factory=_keras_stream_cnn):
    keras = keras_on_torch()
    keras.utils.set_random_seed(11)
    model = factory(keras)
    if factory is _keras_stream_1d:  # trained-looking BatchNormalization statistics
        bn = next(layer for layer in model.layers if isinstance(layer, keras.layers.BatchNormalization))
        rng = np.random.default_rng(2)
        bn.set_weights([rng.uniform(0.5, 2, 4), rng.uniform(-1, 1, 4), rng.uniform(-1, 1, 4), rng.uniform(0.5, 2, 4)])
    cfg = hls4ml.utils.config_from_keras_model(model, granularity="name", backend="Vivado", default_precision=PRECISION)
    _fix_auto(cfg)
    hm = hls4ml.converters.convert_from_keras_model(
        model, hls_config=cfg, backend="Vivado", io_type="io_stream", output_dir=str(outdir)
    )
    hm.compile()
    return hm


def _convert_torch_stream(outdir: Path, cls=StreamMlp, shape=(12,), tweak=None):
    torch.manual_seed(5)
    model = cls().eval()
    cfg = hls4ml.utils.config_from_pytorch_model(
        model, input_shape=shape, granularity="name", backend="Vivado", default_precision=PRECISION
    )
    if tweak is not None:
        tweak(cfg["LayerName"])
    hm = hls4ml.converters.convert_from_pytorch_model(
        model, hls_config=cfg, backend="Vivado", io_type="io_stream", output_dir=str(outdir)
    )
    hm.compile()
    return hm


MODELS = {
    # name: (converter, nnet:: kinds that must be present)
    "keras_cnn": (
        _convert_keras_stream,
        {"zeropad2d_cl", "conv_2d_cl", "pooling2d_cl", "clone_stream", "add", "concatenate3d", "tanh"}
        | {"repack_stream", "dense", "softmax", "relu"},
    ),
    "torch_mlp": (_convert_torch_stream, {"dense", "relu", "sigmoid"}),
    # the only csim checks of these stream layers; each is one small conversion and compile,
    # as the two above (about as long to build), so they run by default
    "keras_1d": (
        lambda outdir: _convert_keras_stream(outdir, _keras_stream_1d),
        {"zeropad1d_cl", "conv_1d_cl", "normalize", "pooling1d_cl", "global_pooling1d_cl", "concatenate1d"},
    ),
    # the strided convolution in hls4ml's encoded implementation (its pixels table replayed)
    "torch_conv_encoded": (
        lambda outdir: _convert_torch_stream(
            outdir, StreamConv, (2, 8, 8), lambda layers: layers["c2"].update(ConvImplementation="Encoded")
        ),
        {"transpose", "conv_2d_cl"},
    ),
}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("hls4ml_io_stream")


@pytest.mark.parametrize("name", list(MODELS))
def test_io_stream_bit_exact_with_hls4ml_csim(name, workdir):
    convert, kinds = MODELS[name]
    outdir = workdir / name
    hm = convert(outdir)
    project = Hls4mlProject.load(outdir)
    assert project.io_type == "io_stream"
    model = FixedPointModel(project)
    found = {layer.kind for layer in model.graph.layers}
    assert kinds <= found, f"{name}: expected {kinds - found} among {found}"
    assert all(layer.stream for layer in model.graph.layers)
    x = bit_exact_inputs(model.n_in)
    ref = np.asarray(hm.predict(np.ascontiguousarray(x))).reshape(len(x), -1)
    assert len(np.unique(ref)) > 50, f"{name}: the firmware's outputs barely vary, the comparison proves little"
    assert model._f64
    if name == "torch_conv_encoded":
        # the auto-sized Dense accumulator after the strided convolution is too wide for float64:
        # that layer runs its int64 op inside the float64 chain
        assert not all(model._step_f64)
    # each path really runs: predict (chunked), the float64 chain on its own and the int64 chain
    paths = {"predict": model.predict(x), "float64": model._predict_f64(x), "int64": model._predict_int64(x)}
    if name == "torch_mlp":
        # fpgaserve's C-simulation of a plain io_stream project (its batch shim feeds the stream top
        # function through hls4ml's convert_data); once, as each build is a second compile
        paths["fpgaserve csim"] = CsimLibrary.load(project, cache_dir=workdir / "csim-cache").predict(x)
    for path, got in paths.items():
        assert got.shape == ref.shape
        bad = np.flatnonzero((got.view(np.uint64) != ref.view(np.uint64)).any(axis=1))
        assert bad.size == 0, f"{name} ({path}): {bad.size} rows differ, first {got[bad[0]]} vs {ref[bad[0]]}"


def test_stream_conv_with_padding_is_refused(workdir, tmp_path):
    """A stream convolution with its own padding (the C++ asserts none) is refused by name."""
    import shutil

    from fpgaserve.backends.hls4ml.emulator import UnsupportedLayerError

    src = workdir / "keras_cnn"
    if not src.is_dir():
        _convert_keras_stream(src)
    dst = tmp_path / "padded"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.so", "ap_types", "nnet_utils"))
    params = dst / "firmware" / "parameters.h"
    text = params.read_text()
    conv = text.index("struct config5 : nnet::conv2d_config")
    params.write_text(text[:conv] + text[conv:].replace("pad_top = 0", "pad_top = 1", 1))
    with pytest.raises(UnsupportedLayerError, match=r"nnet::conv_2d_cl, config5\).*pad_top"):
        FixedPointModel(Hls4mlProject.load(dst))


def _pack(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "fpgaserve.server.cli", "pack", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_pack_io_stream_and_serve(tmp_path, tmp_path_factory, csim_cache):
    """``fpgaserve pack --io-type io_stream`` (krnl_rtl: hls4ml's VivadoAccelerator io_stream
    project, float words through <name>_axi), then the packed project again through
    --hls4ml-project: both serve bit-exactly alike in numpy and csim modes over the server."""
    import tritonclient.grpc as grpcclient

    from support.hls4ml_models import PACK_MODEL, serve_mode

    (tmp_path / "tagger.py").write_text(PACK_MODEL)
    repo = tmp_path / "repo"
    common = ["--repository", str(repo), "--max-batch-size", "256"]
    done = _pack(
        "tagger",
        "--pytorch",
        f"{tmp_path / 'tagger.py'}:build",
        "--input-shape",
        "10",
        "--io-type",
        "io_stream",
        *common,
    )
    assert done.returncode == 0, done.stderr
    version = repo / "tagger" / "1"
    project = Hls4mlProject.load(version)
    assert project.io_type == "io_stream" and project.accelerator is not None
    assert "hls::stream" in (version / "firmware" / "myproject.cpp").read_text()
    again = _pack("again", "--hls4ml-project", str(version), *common)
    assert again.returncode == 0, again.stderr
    refused = _pack("given", "--hls4ml-project", str(version), "--io-type", "io_stream", *common)
    assert refused.returncode == 2 and "--io-type" in refused.stderr

    x = np.random.default_rng(3).standard_normal((200, 10)).astype(np.float32) * 6
    outputs = {}
    for mode in ("csim", "numpy"):
        proc = serve_mode(mode, [repo], tmp_path_factory, csim_cache)
        try:
            with grpcclient.InferenceServerClient(proc.url) as client:
                for model in ("tagger", "again"):
                    meta = client.get_model_metadata(model)
                    [inp], [out] = meta.inputs, meta.outputs
                    t = grpcclient.InferInput(inp.name, [200, 10], "FP32")
                    t.set_data_from_numpy(x)
                    outputs[mode, model] = client.infer(model, [t]).as_numpy(out.name)
        finally:
            proc.stop()
    ref = outputs["csim", "tagger"]
    assert ref.shape == (200, 3) and len(np.unique(ref)) > 50
    for key, got in outputs.items():
        assert np.array_equal(got.view(np.uint32), ref.view(np.uint32)), key
    # and the emulator in process equals what the server sent
    emulated = FixedPointModel(project).predict(x.astype(np.float64)).astype(np.float32)
    assert np.array_equal(emulated.view(np.uint32), ref.view(np.uint32))


def _keras_separable_file(path: Path) -> None:
    """A small io_stream separable network saved as .keras: a SeparableConv2D written as hls4ml
    writes one (a DepthwiseConv2D, then the pointwise 1x1 Conv2D; hls4ml 1.3.0's Keras 3
    converter cannot read SeparableConv2D itself), then a strided Conv2D."""
    keras = keras_on_torch()
    layers = keras.layers
    keras.utils.set_random_seed(11)
    i = keras.Input((16, 16, 3))
    x = layers.DepthwiseConv2D(3, bias_initializer="random_normal")(i)
    x = layers.Conv2D(4, 1, activation="relu", bias_initializer="random_normal")(x)
    x = layers.Conv2D(4, 3, strides=2)(x)
    keras.Model(i, layers.Flatten()(x)).save(path)


def test_pack_separable_io_stream_serves_in_numpy(tmp_path, tmp_path_factory, csim_cache):
    """pack leaves hls4ml's generic nnet_code_gen.h out of an io_stream separable network (the
    stream convolutions never use its fillers): the emulator computes the windows from the
    layers' parameters, auto mode serves it in numpy, and the answers are csim's bit for bit."""
    import re

    import tritonclient.grpc as grpcclient

    from support.hls4ml_models import serve_mode

    _keras_separable_file(tmp_path / "sep.keras")
    repo = tmp_path / "repo"
    done = _pack(
        "sep", "--keras", str(tmp_path / "sep.keras"), "--io-type", "io_stream", "--max-batch-size", "64",
        "--repository", str(repo),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    version = repo / "sep" / "1"
    assert not (version / "firmware" / "nnet_utils").exists(), "pack kept a library file: nothing left out to test"
    project = Hls4mlProject.load(version)
    model = FixedPointModel(project)
    found = {layer.kind for layer in model.graph.layers}
    assert {"depthwise_conv_2d_cl", "pointwise_conv_2d_cl", "conv_2d_cl"} <= found, found
    assert all(layer.stream for layer in model.graph.layers)
    lib = CsimLibrary.load(project, cache_dir=csim_cache)
    # both emulator paths on the saturating, zero and on-grid rows
    x = bit_exact_inputs(model.n_in)
    ref = lib.predict(x)
    assert len(np.unique(ref)) > 50
    assert model._f64
    for path, got in (("float64", model.predict(x)), ("int64", model._predict_int64(x))):
        assert np.array_equal(got.view(np.uint64), ref.view(np.uint64)), path

    proc = serve_mode("auto", [repo], tmp_path_factory, csim_cache)
    try:
        with grpcclient.InferenceServerClient(proc.url) as client:
            meta = client.get_model_metadata("sep")
            [inp], [out] = meta.inputs, meta.outputs
            shape = [int(d) for d in inp.shape[1:]]
            rows = np.random.default_rng(4).standard_normal((40, *shape)).astype(np.float32) * 4
            t = grpcclient.InferInput(inp.name, [40, *shape], "FP32")
            t.set_data_from_numpy(rows)
            served = client.infer("sep", [t]).as_numpy(out.name)
        log = proc.log()
    finally:
        proc.stop()
    assert re.search(r"model sep: .* runs in numpy mode \(auto: ", log), log
    want = lib.predict(rows.reshape(40, -1).astype(np.float64)).astype(np.float32)
    assert np.array_equal(served.reshape(40, -1).view(np.uint32), want.view(np.uint32))


def test_pack_io_stream_is_refused_for_array_kernels(tmp_path):
    """FaaST's kernel and kernel_wrapper's stand-in move arrays: --io-type io_stream is refused
    before anything is converted, naming the ABIs that carry it."""
    for abi in ("faast", "kernel_wrapper"):
        done = _pack(
            "m", "--pytorch", "x.py:build", "--io-type", "io_stream", "--kernel-abi", abi, "--repository", str(tmp_path)
        )
        assert done.returncode == 2, done.stderr
        assert f"--io-type io_stream: the {abi} kernel" in done.stderr and "--kernel-abi krnl_rtl" in done.stderr


@pytest.mark.skipif(
    os.environ.get("FPGASERVE_LONG_TESTS") != "1", reason="FPGASERVE_LONG_TESTS=1: two more conversions"
)
def test_pack_keras_and_qonnx_io_stream(tmp_path):
    """--io-type io_stream from Keras 3 and QONNX: the packed projects emulate bit for bit."""
    keras_on_torch()
    from support.hls4ml_models import keras_cnn_file, qonnx_mlp_file

    keras_cnn_file(tmp_path / "cnn.keras")
    qonnx_mlp_file(tmp_path / "mlp.onnx")
    for name, source in (
        ("cnn", ["--keras", str(tmp_path / "cnn.keras")]),
        ("mlp", ["--onnx", str(tmp_path / "mlp.onnx")]),
    ):
        done = _pack(name, *source, "--io-type", "io_stream", "--repository", str(tmp_path / "repo"))
        assert done.returncode == 0, done.stderr
        project = Hls4mlProject.load(tmp_path / "repo" / name / "1")
        assert project.io_type == "io_stream"
        model = FixedPointModel(project)
        x = bit_exact_inputs(model.n_in)
        ref = CsimLibrary.load(project, cache_dir=tmp_path / "csim-cache").predict(x)
        assert len(np.unique(ref)) > 50
        for got in (model.predict(x), model._predict_int64(x)):
            assert np.array_equal(got.view(np.uint64), ref.view(np.uint64)), name


def test_large_separable_io_stream_network_serves_bit_exactly(tmp_path_factory, csim_cache):
    """A 512x512x3 separable io_stream network with a 4,194,304-element output (the size that
    once overflowed a thread's stack in csim and was refused by the emulator): pack bounds its
    batch, both emulator and csim run it (csim on a stack sized from the project) bit for bit
    alike, and auto serves it in numpy beside the bundled models, answering csim's bits. The
    pack is the run's one (support.hls4ml_models.sep512_repository: test_memory_limits serves
    it too)."""
    import re

    import tritonclient.grpc as grpcclient

    from support.hls4ml_models import sep512_repository, serve_mode
    from support.server_process import BUNDLED_REPO

    repo = sep512_repository(tmp_path_factory)
    config = (repo / "sep512" / "config.pbtxt").read_text()
    assert "max_batch_size: 53" in config, config  # 53 rows of 19 MB fit the 1 GiB budget
    project = Hls4mlProject.load(repo / "sep512" / "1")
    model = FixedPointModel(project)
    rows = (np.random.default_rng(2).standard_normal((2, model.n_in)) * 4).astype(np.float32)
    ref = CsimLibrary.load(project, cache_dir=csim_cache).predict(rows.astype(np.float64))
    assert ref.shape == (2, 4194304) and len(np.unique(ref)) > 1000
    assert np.array_equal(model.predict(rows.astype(np.float64)).view(np.uint64), ref.view(np.uint64))

    proc = serve_mode("auto", [repo, BUNDLED_REPO], tmp_path_factory, csim_cache)
    try:
        with grpcclient.InferenceServerClient(proc.url) as client:
            meta = client.get_model_metadata("sep512")  # (Keras numbers its layer names per process)
            [inp], [out] = meta.inputs, meta.outputs
            t = grpcclient.InferInput(inp.name, [2, model.n_in], "FP32")
            t.set_data_from_numpy(rows)
            served = client.infer("sep512", [t], client_timeout=300).as_numpy(out.name)
        log = proc.log_path.read_text(errors="replace")
    finally:
        proc.stop()
    assert re.search(r"model sep512: .* runs in numpy mode \(auto: ", log), log[-3000:]
    assert np.array_equal(served.view(np.uint32), ref.astype(np.float32).view(np.uint32))
