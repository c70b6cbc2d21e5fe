"""hls4ml models served through gRPC in the emulation modes, with the real tritonclient.

One server per ``--fpga-mode`` (csim, numpy, onnx) serves the bundled repository
(``bitstreams/``: FACILE and the jet tagger). The bit-exactness claims are checked on the
wire: the FP32 bytes a client receives from the numpy emulation equal those from hls4ml's
C-simulation, for random rows and for edge rows (saturating/wrapping magnitudes, negatives,
zeros, values on and next to the ap_fixed<16,6> grid). The float reference (onnx) must stay
within the deviation docs/hls4ml.md documents. Bad projects give load errors that name the
problem while the server keeps serving the other models.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from support import ap_fixed
from support.hls4ml_models import PACK_MODEL, keras_cnn_file, qonnx_mlp_file, serve_mode
from support.server_process import BUNDLED_REPO

# name, input, output, features, outputs
MODELS = {
    "facile": ("input", "output/BiasAdd", 47, 1),
    "jet_tagger": ("input", "output", 16, 5),
    "calo_cnn": ("input", "output", 256, 5),  # a 1x16x16 image, sent as [batch, 1, 16, 16]
}
ITEM_SHAPES = {"calo_cnn": (1, 16, 16)}
# |onnx - csim| bounds on unit-scale inputs, as documented in docs/hls4ml.md (the onnx mode):
# quantization of ap_fixed<16,6> firmware vs the float network (measured 0.054 and 0.024; the
# jet tagger's softmax adds hls4ml's lookup-table error on top).
ONNX_TOLERANCE = {"facile": 0.08, "jet_tagger": 0.04, "calo_cnn": 0.04}  # calo_cnn: measured 0.018


@pytest.fixture(scope="module")
def cache_dir(csim_cache):
    return csim_cache


@pytest.fixture(scope="module")
def servers(tmp_path_factory, cache_dir):
    started = {}
    try:
        for mode in ("csim", "numpy", "onnx"):
            started[mode] = serve_mode(mode, [BUNDLED_REPO], tmp_path_factory, cache_dir)
        yield started
    finally:
        for proc in started.values():
            proc.stop()


def _infer(url: str, model: str, x: np.ndarray) -> np.ndarray:
    inp, out, _, _ = MODELS[model]
    if model in ITEM_SHAPES:
        x = x.reshape(len(x), *ITEM_SHAPES[model])
    with grpcclient.InferenceServerClient(url) as client:
        t = grpcclient.InferInput(inp, list(x.shape), "FP32")
        t.set_data_from_numpy(x)
        result = client.infer(model, [t], outputs=[grpcclient.InferRequestedOutput(out)])
        return result.as_numpy(out)


def _edge_rows(features: int) -> np.ndarray:
    """Rows that probe the fixed-point corners of ap_fixed<16,6> (range [-32, 32), step 2^-10)."""
    lsb = ap_fixed.LSB
    rng = np.random.default_rng(99)
    values = np.array(
        [*ap_fixed.STEPS, 1 - lsb / 3, -1 + lsb / 3, 0.5, -0.5, *ap_fixed.BEYOND, 3.14159, -2.71828], dtype=np.float32
    )
    rows = [np.full(features, v, np.float32) for v in values]  # constant rows
    rows += [rng.choice(values, features).astype(np.float32) for _ in range(40)]  # mixed
    return np.concatenate([np.stack(rows), *ap_fixed.grid_rows(rng, features)])


def _inputs(features: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(features)
    return {
        "unit": rng.standard_normal((3000, features), dtype=np.float32),
        "scale8": rng.standard_normal((1000, features), dtype=np.float32) * 8,  # saturates / wraps
        "scale40": rng.standard_normal((1000, features), dtype=np.float32) * 40,  # beyond the input range
        "negative": -np.abs(rng.standard_normal((500, features), dtype=np.float32)) * 4,
        "zeros": np.zeros((7, features), np.float32),
        "edges": _edge_rows(features),
    }


@pytest.mark.parametrize("model", sorted(MODELS))
def test_numpy_equals_csim_bit_for_bit(servers, model):
    features = MODELS[model][2]
    for name, x in _inputs(features).items():
        csim = _infer(servers["csim"].url, model, x)
        emulated = _infer(servers["numpy"].url, model, x)
        assert csim.dtype == emulated.dtype == np.float32 and csim.shape == (len(x), MODELS[model][3])
        mismatched = np.flatnonzero((csim.view(np.uint32) != emulated.view(np.uint32)).any(axis=1))
        assert mismatched.size == 0, (
            f"{model} {name}: {mismatched.size} rows differ, first row {mismatched[0]}: "
            f"csim {csim[mismatched[0]]} numpy {emulated[mismatched[0]]}"
        )


@pytest.mark.parametrize("model", sorted(MODELS))
def test_csim_is_fixed_point_not_float(servers, model):
    """The emulations are the firmware's arithmetic, so they differ from the float reference
    (if they did not, the bit-exactness test above would prove nothing about ap_fixed)."""
    x = _inputs(MODELS[model][2])["unit"]
    csim = _infer(servers["csim"].url, model, x)
    ref = _infer(servers["onnx"].url, model, x)
    assert np.count_nonzero(csim != ref) > len(x) // 2


@pytest.mark.parametrize("model", sorted(MODELS))
def test_onnx_within_documented_tolerance(servers, model):
    x = _inputs(MODELS[model][2])["unit"]
    csim = _infer(servers["csim"].url, model, x).astype(np.float64)
    ref = _infer(servers["onnx"].url, model, x).astype(np.float64)
    deviation = np.abs(csim - ref).max()
    assert deviation <= ONNX_TOLERANCE[model], f"{model}: max |onnx - csim| = {deviation}"


def test_jet_tagger_outputs_are_probabilities(servers):
    x = _inputs(16)["unit"]
    for mode in ("csim", "numpy"):
        y = _infer(servers[mode].url, "jet_tagger", x)
        assert (y >= 0).all() and (y <= 1).all()
        # hls4ml's softmax normalizes through a 1024-entry lookup table of 1/sum indexed by
        # the top bits of its ap_fixed<18,4> input: close to 1, not exactly 1 (measured 0.011)
        assert np.abs(y.sum(axis=1) - 1).max() < 0.02
        assert len(np.unique(y)) > 50  # not a constant (see build_bitstreams: fc4's precision)


def test_batches_are_sliced_per_request(servers):
    """Concurrent requests, batched together by the dynamic batcher, each get their own rows."""
    import queue

    x = _inputs(47)["unit"][:64]
    whole = _infer(servers["csim"].url, "facile", x)
    done: queue.Queue = queue.Queue()
    with grpcclient.InferenceServerClient(servers["numpy"].url) as client:
        for i in range(16):
            t = grpcclient.InferInput("input", [4, 47], "FP32")
            t.set_data_from_numpy(x[4 * i : 4 * i + 4])
            client.async_infer("facile", [t], callback=lambda result, error, i=i: done.put((i, result, error)))
        for _ in range(16):
            i, result, error = done.get(timeout=60)
            assert error is None, error
            piece = result.as_numpy("output/BiasAdd")
            assert np.array_equal(piece.view(np.uint32), whole[4 * i : 4 * i + 4].view(np.uint32)), i


def test_log_names_the_mode(servers):
    for mode, proc in servers.items():
        assert re.search(rf"model facile: hls4ml project .* runs in {mode} mode \(--fpga-mode {mode}\)", proc.log())


def test_auto_mode_without_card_runs_numpy(tmp_path_factory, cache_dir):
    """Every layer of the bundled models is emulated bit-exactly, so auto serves them in numpy
    mode, and the answers are csim's bit for bit."""
    proc = serve_mode("auto", [BUNDLED_REPO], tmp_path_factory, cache_dir)
    try:
        x = _inputs(47)["edges"]
        auto = _infer(proc.url, "facile", x)
        for model in ("facile", "jet_tagger"):
            assert re.search(
                rf"model {model}: .* runs in numpy mode \(auto: no xclbin in the version folder; every layer is "
                r"emulated bit-exactly by numpy\)",
                proc.log(),
            )
    finally:
        proc.stop()
    from fpgaserve.backends.hls4ml.csim import CsimLibrary
    from fpgaserve.backends.hls4ml.project import Hls4mlProject

    lib = CsimLibrary.load(Hls4mlProject.load(BUNDLED_REPO / "facile" / "1"), cache_dir=cache_dir)
    assert np.array_equal(auto.view(np.uint32), lib.predict(x).astype(np.float32).view(np.uint32))


def test_auto_mode_builds_the_emulator_once_at_load():
    """Auto decides on numpy in the engine's process (does the version need an instance
    process?) by building the emulator; the version's first instance serves with that one
    instead of building it again, and nothing is kept once it is taken."""
    import os

    from fpgaserve.backends.hls4ml import backend as hls4ml_backend
    from fpgaserve.server import model_config as mc

    config = mc.config_dict(mc.read_config_file(BUNDLED_REPO / "jet_tagger" / "config.pbtxt"))
    version_dir = str(BUNDLED_REPO / "jet_tagger" / "1")
    assert not hls4ml_backend.Hls4mlBackend.instance_process_by_default(config, version_dir, {})
    decided = hls4ml_backend._DECIDED[os.path.realpath(version_dir)]
    first = hls4ml_backend.Hls4mlBackend(config, version_dir, 0)
    second = hls4ml_backend.Hls4mlBackend(config, version_dir, 1)
    try:
        assert first.mode == second.mode == "numpy"
        assert first._runner is decided and second._runner is not decided
        assert os.path.realpath(version_dir) not in hls4ml_backend._DECIDED
    finally:
        first.close()
        second.close()


def test_auto_mode_runs_csim_when_a_layer_is_not_emulated(tmp_path, tmp_path_factory, cache_dir):
    """A firmware with a layer the emulator refuses (nnet::relu1, a clip to [0, 1]) is served by csim in auto
    mode, and the log line names the layer; the other model of the repository stays numpy."""
    repo = _broken_repo(
        tmp_path,
        "facile_relu1",
        lambda d: _edit(d / "1/firmware/myproject.cpp", "nnet::relu<fc1_result_t", "nnet::relu1<fc1_result_t"),
    )
    shutil.copytree(BUNDLED_REPO / "jet_tagger", repo / "jet_tagger")
    proc = serve_mode("auto", [repo], tmp_path_factory, cache_dir)
    try:
        x = _inputs(47)["edges"]
        with grpcclient.InferenceServerClient(proc.url) as client:
            t = grpcclient.InferInput("input", list(x.shape), "FP32")
            t.set_data_from_numpy(x)
            got = client.infer("facile_relu1", [t]).as_numpy("output/BiasAdd")
        log = proc.log()
        assert re.search(
            r"model facile_relu1: .* runs in csim mode \(auto: no xclbin in the version folder; not every layer "
            r"is emulated by numpy: layer 'relu1' \(nnet::relu1, relu_config3\): nnet::relu1 is not supported",
            log,
        ), log
        assert re.search(r"model jet_tagger: .* runs in numpy mode \(auto: ", log)
    finally:
        proc.stop()
    from fpgaserve.backends.hls4ml.csim import CsimLibrary
    from fpgaserve.backends.hls4ml.project import Hls4mlProject

    lib = CsimLibrary.load(Hls4mlProject.load(repo / "facile_relu1" / "1"), cache_dir=cache_dir)
    want = lib.predict(x).astype(np.float32)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    # relu1, not relu: the csim really ran the edited firmware
    relu = CsimLibrary.load(Hls4mlProject.load(BUNDLED_REPO / "facile" / "1"), cache_dir=cache_dir)
    assert not np.array_equal(want, relu.predict(x).astype(np.float32))


# ---------------------------------------------------------------------- bad projects
def _broken_repo(tmp_path: Path, name: str, change) -> Path:
    repo = tmp_path / "repo"
    shutil.copytree(BUNDLED_REPO / "facile", repo / name)
    text = (repo / name / "config.pbtxt").read_text().replace('name: "facile"', f'name: "{name}"')
    (repo / name / "config.pbtxt").write_text(text)
    change(repo / name)
    return repo


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new))


BROKEN = {
    "missing_weights": (
        lambda d: (d / "1/firmware/weights/w4.txt").unlink(),
        ("csim", "numpy"),
        r"missing weight file\(s\) firmware/weights/w4\.txt",
    ),
    "bad_precision": (
        lambda d: _edit(
            d / "1/firmware/defines.h", "typedef ap_fixed<16,6> layer3_t;", "typedef ap_fixed<16,6,AP_FOO> layer3_t;"
        ),
        ("csim", "numpy"),
        r"AP_FOO",
    ),
    "not_a_project": (
        lambda d: (d / "1/hls4ml_config.yml").unlink(),
        ("csim", "numpy", "onnx"),
        r"no hls4ml project in .*: expected hls4ml_config\.yml",
    ),
    "wrong_dims": (
        lambda d: _edit(d / "config.pbtxt", "dims: [ 47 ]", "dims: [ 46 ]"),
        ("csim", "numpy", "onnx"),
        r"input 'input' has dims \[46\] \(46 elements\) but the firmware's input_1\[\] has 47",
    ),
    "unsupported_layer": (
        lambda d: _edit(d / "1/firmware/myproject.cpp", "nnet::relu<", "nnet::elu<"),
        ("numpy",),
        r"relu1.*elu|elu.*relu1",
    ),
    "missing_reference": (
        lambda d: (d / "1/model.onnx").unlink(),
        ("onnx",),
        r"no float reference \(model\.onnx\) was packed for this model: fpga-mode onnx needs .*model\.onnx",
    ),
}


@pytest.mark.parametrize("mode", ["csim", "numpy", "onnx"])
def test_bad_projects_fail_to_load_with_clear_errors(tmp_path, tmp_path_factory, cache_dir, mode):
    repo = tmp_path / "repo"
    shutil.copytree(BUNDLED_REPO / "facile", repo / "facile")
    cases = {name: case for name, case in BROKEN.items() if mode in case[1]}
    for name, (change, _, _) in cases.items():
        _broken_repo(tmp_path, name, change)
    proc = serve_mode(
        mode, [repo], tmp_path_factory, cache_dir, "--model-control-mode", "explicit", "--load-model", "facile"
    )
    try:
        with grpcclient.InferenceServerClient(proc.url) as client:
            for name, (_, _, pattern) in cases.items():
                with pytest.raises(InferenceServerException) as err:
                    client.load_model(name)
                assert re.search(pattern, err.value.message()), f"{mode}/{name}: {err.value.message()}"
                assert not client.is_model_ready(name)
            # the good model still serves
            y = _infer(proc.url, "facile", np.ones((3, 47), np.float32))
            assert y.shape == (3, 1) and np.isfinite(y).all()
    finally:
        proc.stop()


def test_pack_pytorch_model_and_serve(tmp_path, tmp_path_factory, cache_dir):
    """One command from a PyTorch model to a served model; the packed firmware serves
    bit-exactly in csim and numpy mode and agrees with the float network."""
    (tmp_path / "tagger.py").write_text(PACK_MODEL)
    precision = tmp_path / "precision.yml"
    precision.write_text("LayerName:\n  fc2:\n    Precision:\n      result: ap_fixed<18,8>\n")
    repo = tmp_path / "repo"
    cmd = [
        sys.executable,
        "-m",
        "fpgaserve.server.cli",
        "pack",
        "tagger",
        "--pytorch",
        f"{tmp_path / 'tagger.py'}:build",
        "--input-shape",
        "10",
        "--repository",
        str(repo),
        "--precision-config",
        str(precision),
        "--max-batch-size",
        "256",
        "--max-queue-delay-us",
        "100",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "packed tagger into" in done.stdout
    version = repo / "tagger" / "1"
    assert (version / "model.onnx").is_file() and (version / "firmware" / "myproject.cpp").is_file()
    assert "ap_fixed<18,8>" in (version / "firmware" / "defines.h").read_text()
    config = (repo / "tagger" / "config.pbtxt").read_text()
    assert 'backend: "hls4ml"' in config and "max_batch_size: 256" in config

    # packing again without --force refuses to overwrite
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and "exists; pass --force" in again.stderr

    x = np.random.default_rng(1).standard_normal((200, 10)).astype(np.float32)
    outputs = {}
    for mode in ("csim", "numpy", "onnx"):
        proc = serve_mode(mode, [repo], tmp_path_factory, cache_dir)
        try:
            with grpcclient.InferenceServerClient(proc.url) as client:
                meta = client.get_model_metadata("tagger")
                [inp], [out] = meta.inputs, meta.outputs
                t = grpcclient.InferInput(inp.name, [200, 10], "FP32")
                t.set_data_from_numpy(x)
                outputs[mode] = client.infer("tagger", [t]).as_numpy(out.name)
        finally:
            proc.stop()
    assert outputs["csim"].shape == (200, 3)
    assert np.array_equal(outputs["csim"].view(np.uint32), outputs["numpy"].view(np.uint32))
    assert np.abs(outputs["csim"] - outputs["onnx"]).max() < 0.1


def test_pack_errors_are_clear(tmp_path):
    def pack(*args):
        return subprocess.run(
            [sys.executable, "-m", "fpgaserve.server.cli", "pack", *args], capture_output=True, text=True, timeout=300
        )

    done = pack("m", "--repository", str(tmp_path))
    assert done.returncode == 2 and "give exactly one of --pytorch" in done.stderr
    done = pack("m", "--hls4ml-project", str(tmp_path), "--repository", str(tmp_path / "r"))
    assert done.returncode == 2 and "is not an hls4ml project" in done.stderr
    done = pack("m", "--pytorch", str(tmp_path / "nope.pt"), "--input-shape", "3", "--repository", str(tmp_path / "r"))
    assert done.returncode == 2 and "cannot load the PyTorch model" in done.stderr
    done = pack(
        "m",
        "--hls4ml-project",
        str(BUNDLED_REPO / "facile" / "1"),
        "--build-xclbin",
        "--repository",
        str(tmp_path / "r"),
    )
    assert done.returncode == 2 and "pass it with --xclbin FILE" in done.stderr
    # the tools are checked before the model is even read (nope.pt does not exist)
    done = subprocess.run(
        [sys.executable, "-m", "fpgaserve.server.cli", "pack", "m", "--pytorch", str(tmp_path / "nope.pt")]
        + ["--input-shape", "3", "--build-xclbin", "--repository", str(tmp_path / "r")],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PATH": str(tmp_path / "no-tools")},
    )
    assert done.returncode == 2 and "--build-xclbin needs vivado_hls, vivado and v++ on PATH" in done.stderr
    assert "Vivado <= 2020.1" in done.stderr and "Vitis >= 2022.1" in done.stderr


def test_pack_existing_hls4ml_project(tmp_path, tmp_path_factory, cache_dir):
    """--hls4ml-project re-packs a project (here the bundled FACILE) under a new name."""
    repo = tmp_path / "repo"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "fpgaserve.server.cli",
            "pack",
            "facile_copy",
            "--hls4ml-project",
            str(BUNDLED_REPO / "facile" / "1"),
            "--float-reference",
            str(BUNDLED_REPO / "facile" / "1" / "model.onnx"),
            "--repository",
            str(repo),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    proc = serve_mode("numpy", [repo], tmp_path_factory, cache_dir)
    try:
        with grpcclient.InferenceServerClient(proc.url) as client:
            meta = client.get_model_metadata("facile_copy")
            x = _inputs(47)["edges"]
            t = grpcclient.InferInput(meta.inputs[0].name, list(x.shape), "FP32")
            t.set_data_from_numpy(x)
            y = client.infer("facile_copy", [t]).as_numpy(meta.outputs[0].name)
    finally:
        proc.stop()
    from fpgaserve.backends.hls4ml.csim import CsimLibrary
    from fpgaserve.backends.hls4ml.project import Hls4mlProject

    lib = CsimLibrary.load(Hls4mlProject.load(BUNDLED_REPO / "facile" / "1"), cache_dir=cache_dir)
    assert np.array_equal(y, lib.predict(x).astype(np.float32))


def test_inputs_and_outputs_come_from_the_firmware(tmp_path, tmp_path_factory, cache_dir):
    """A config.pbtxt without input/output gets them from the firmware's top function."""
    repo = tmp_path / "repo"
    shutil.copytree(BUNDLED_REPO / "jet_tagger", repo / "jet_tagger")
    (repo / "jet_tagger" / "config.pbtxt").write_text('backend: "hls4ml"\nmax_batch_size: 64\n')
    proc = serve_mode("numpy", [repo], tmp_path_factory, cache_dir)
    try:
        with grpcclient.InferenceServerClient(proc.url) as client:
            meta = client.get_model_metadata("jet_tagger")
            assert [(t.name, t.datatype, list(t.shape)) for t in meta.inputs] == [("input_1", "FP32", [-1, 16])]
            assert [(t.name, t.datatype, list(t.shape)) for t in meta.outputs] == [("layer9_out", "FP32", [-1, 5])]
            x = _inputs(16)["edges"][:64]
            t = grpcclient.InferInput("input_1", list(x.shape), "FP32")
            t.set_data_from_numpy(x)
            y = client.infer("jet_tagger", [t]).as_numpy("layer9_out")
    finally:
        proc.stop()
    from fpgaserve.backends.hls4ml.emulator import FixedPointModel
    from fpgaserve.backends.hls4ml.project import Hls4mlProject

    want = FixedPointModel(Hls4mlProject.load(BUNDLED_REPO / "jet_tagger" / "1")).predict(x).astype(np.float32)
    assert np.array_equal(y, want)


def test_pack_keras_and_qonnx_models_and_serve(tmp_path, tmp_path_factory, cache_dir):
    """fpgaserve pack from a Keras 3 model (torch backend) and from a QONNX model, each
    converted by hls4ml and served: numpy == csim bit for bit over gRPC, and the float
    reference (Keras' ONNX export; the QONNX file itself) close to the firmware."""
    keras_cnn_file(tmp_path / "cnn.keras")
    qonnx_mlp_file(tmp_path / "mlp.onnx")
    repo = tmp_path / "repo"
    for name, source in (
        ("keras_cnn", ["--keras", str(tmp_path / "cnn.keras")]),
        ("qonnx_mlp", ["--onnx", str(tmp_path / "mlp.onnx")]),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "fpgaserve.server.cli", "pack", name, *source, "--repository", str(repo)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        assert (repo / name / "1" / "model.onnx").is_file()
    qtypes = (repo / "qonnx_mlp" / "1" / "firmware" / "defines.h").read_text()
    assert "AP_RND_CONV,AP_SAT" in qtypes  # the Quant nodes became ap_fixed types, not the default
    kinds = (repo / "keras_cnn" / "1" / "firmware" / "myproject.cpp").read_text()
    assert "nnet::conv_2d_cl<" in kinds and "nnet::pooling2d_cl<" in kinds

    rng = np.random.default_rng(5)
    inputs = {
        "keras_cnn": np.concatenate([rng.standard_normal((300, 64)), rng.normal(0, 40, (100, 64)), np.zeros((2, 64))]),
        "qonnx_mlp": np.concatenate(
            [rng.standard_normal((300, 10)) * 3, rng.normal(0, 40, (100, 10)), np.zeros((2, 10))]
        ),
    }
    outputs: dict[str, dict[str, np.ndarray]] = {}
    for mode in ("csim", "numpy", "onnx"):
        proc = serve_mode(mode, [repo], tmp_path_factory, cache_dir)
        try:
            with grpcclient.InferenceServerClient(proc.url) as client:
                for name, x in inputs.items():
                    meta = client.get_model_metadata(name)
                    [inp], [out] = meta.inputs, meta.outputs
                    t = grpcclient.InferInput(inp.name, [len(x), *[int(d) for d in inp.shape[1:]]], "FP32")
                    t.set_data_from_numpy(x.astype(np.float32).reshape(len(x), *[int(d) for d in inp.shape[1:]]))
                    outputs.setdefault(name, {})[mode] = client.infer(name, [t]).as_numpy(out.name)
        finally:
            proc.stop()
    for name, by_mode in outputs.items():
        csim, emulated = by_mode["csim"], by_mode["numpy"]
        assert csim.shape == (len(inputs[name]), 3)
        assert len(np.unique(csim)) > 50, f"{name}: the firmware's outputs barely vary"
        assert np.array_equal(csim.view(np.uint32), emulated.view(np.uint32)), name
        unit = slice(0, 300)  # in-range rows: the float network and the firmware agree closely
        assert np.abs(csim[unit] - by_mode["onnx"][unit]).max() < 0.25, name


def _qonnx_bipolar_file(path: Path) -> None:
    """A QONNX MLP with a BipolarQuant activation: hls4ml converts it (binary_tanh), but qonnx's
    QCDQ conversion covers Quant only, so no ONNX Runtime float reference can be made from it."""
    pytest.importorskip("qonnx", reason="the qonnx extra is not installed")
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(2)
    arrays = {
        "W1": rng.normal(0, 0.4, (10, 12)),
        "b1": rng.normal(0, 0.1, 12),
        "W2": rng.normal(0, 0.4, (12, 3)),
        "b2": rng.normal(0, 0.1, 3),
        "s_in": 2.0**-4,
        "one": 1.0,
        "zero": 0.0,
        "bits8": 8.0,
    }
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in arrays.items()]
    general = "qonnx.custom_op.general"
    nodes = [
        helper.make_node(
            "Quant",
            ["input", "s_in", "zero", "bits8"],
            ["xq"],
            name="q_in",
            domain=general,
            signed=1,
            narrow=0,
            rounding_mode="ROUND",
        ),
        helper.make_node("MatMul", ["xq", "W1"], ["h"], name="fc1"),
        helper.make_node("Add", ["h", "b1"], ["hb"], name="fc1_bias"),
        helper.make_node("BipolarQuant", ["hb", "one"], ["hq"], name="sign", domain=general),
        helper.make_node("MatMul", ["hq", "W2"], ["o"], name="fc2"),
        helper.make_node("Add", ["o", "b2"], ["output"], name="fc2_bias"),
    ]
    graph = helper.make_graph(
        nodes,
        "bipolar",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 10])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 3])],
        initializer=inits,
    )
    opsets = [helper.make_opsetid("", 13), helper.make_opsetid(general, 1)]
    onnx.save(helper.make_model(graph, opset_imports=opsets), path)


def test_pack_qonnx_model_without_a_runnable_float_reference(tmp_path, tmp_path_factory, cache_dir):
    """A QONNX model ONNX Runtime cannot run (BipolarQuant) is packed without model.onnx, with a
    warning; its firmware serves, and --fpga-mode onnx says at load that no reference was packed."""
    _qonnx_bipolar_file(tmp_path / "bipolar.onnx")
    repo = tmp_path / "repo"
    done = subprocess.run(
        [sys.executable, "-m", "fpgaserve.server.cli", "pack", "bipolar", "--onnx", str(tmp_path / "bipolar.onnx")]
        + ["--repository", str(repo)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "warning: no float reference (model.onnx) is packed" in done.stderr
    assert "BipolarQuant" in done.stderr and "--fpga-mode onnx will be unavailable for this model" in done.stderr
    version = repo / "bipolar" / "1"
    assert (version / "firmware" / "myproject.cpp").is_file() and not (version / "model.onnx").exists()
    assert "nnet::binary_tanh<" in (version / "firmware" / "myproject.cpp").read_text()

    x = np.random.default_rng(4).standard_normal((64, 10)).astype(np.float32) * 2
    proc = serve_mode("csim", [repo], tmp_path_factory, cache_dir)
    try:
        with grpcclient.InferenceServerClient(proc.url) as client:
            meta = client.get_model_metadata("bipolar")
            t = grpcclient.InferInput(meta.inputs[0].name, list(x.shape), "FP32")
            t.set_data_from_numpy(x)
            y = client.infer("bipolar", [t]).as_numpy(meta.outputs[0].name)
    finally:
        proc.stop()
    from fpgaserve.backends.hls4ml.csim import CsimLibrary
    from fpgaserve.backends.hls4ml.project import Hls4mlProject

    lib = CsimLibrary.load(Hls4mlProject.load(version), cache_dir=cache_dir)
    assert np.array_equal(y, lib.predict(x).astype(np.float32))

    proc = serve_mode("onnx", [repo], tmp_path_factory, cache_dir, "--model-control-mode", "explicit")
    try:
        with grpcclient.InferenceServerClient(proc.url) as client:
            with pytest.raises(InferenceServerException) as err:
                client.load_model("bipolar")
            assert "no float reference (model.onnx) was packed for this model" in err.value.message()
    finally:
        proc.stop()
