"""The bundled model repositories: generated, not hand-made, and correct.

* ``bitstreams/`` (product default repository, built by ``bitstreams/build_bitstreams.py``)
* ``tests/models/`` (Triton's "simple" family, built by ``tests/models/build_models.py``)

The committed files must be byte-identical to a fresh build, so they cannot drift from
their generators. The model contracts are checked directly with onnxruntime and the
numpy-backend ``Model`` classes, without a server, so a failure here points at the
model files rather than at the serving path.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

ROOT = Path(__file__).resolve().parents[2]
BITSTREAMS = ROOT / "bitstreams"
TEST_MODELS = ROOT / "tests" / "models"

# (generator script, committed repository it writes by default)
GENERATORS = {
    "bitstreams": (BITSTREAMS / "build_bitstreams.py", BITSTREAMS),
    "test_models": (TEST_MODELS / "build_models.py", TEST_MODELS),
}

# Produced at run time next to model.py files (the server imports them too); not data.
IGNORED_PARTS = {"__pycache__"}


def _files(root: Path) -> dict[str, bytes]:
    """Relative path -> content of every data file under ``root``."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not IGNORED_PARTS.intersection(p.parts) and p.suffix != ".pyc"
    }


def _build(script: Path, out: Path) -> None:
    subprocess.run([sys.executable, str(script), "--out", str(out)], check=True, capture_output=True, cwd=ROOT)


@pytest.fixture(scope="module", params=sorted(GENERATORS))
def fresh_build(request, tmp_path_factory):
    """(generator script, committed repository, fresh build of it in a tmp dir)."""
    script, committed = GENERATORS[request.param]
    out = tmp_path_factory.mktemp(request.param)
    _build(script, out)
    return script, committed, out


# ---------------------------------------------------------------------------------------
# Generated == committed, and the generators are deterministic
# ---------------------------------------------------------------------------------------
def test_committed_files_equal_fresh_build(fresh_build):
    _, committed, out = fresh_build
    generated = _files(out)
    assert generated, "generator wrote nothing"
    # Compare whole model directories, so stale extra files are caught as well.
    model_dirs = {rel.split("/")[0] for rel in generated}
    on_disk = {rel: data for rel, data in _files(committed).items() if rel.split("/")[0] in model_dirs}
    assert sorted(on_disk) == sorted(generated), (
        f"committed files differ from a fresh build of {committed}; rerun its generator"
    )
    drifted = [rel for rel in generated if on_disk[rel] != generated[rel]]
    assert not drifted, f"committed files drifted from their generator: {drifted}"


def test_generator_is_idempotent(fresh_build):
    script, _, out = fresh_build
    before = _files(out)
    mtimes = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    _build(script, out)
    assert _files(out) == before
    # Unchanged files are not rewritten (keeps mtime-based tooling quiet).
    assert {p: p.stat().st_mtime_ns for p in mtimes} == mtimes


# ---------------------------------------------------------------------------------------
# Configs
# ---------------------------------------------------------------------------------------
def _config(model_dir: Path) -> model_config_pb2.ModelConfig:
    return text_format.Parse((model_dir / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())


ALL_MODEL_DIRS = sorted(p.parent for repo in (BITSTREAMS, TEST_MODELS) for p in repo.glob("*/config.pbtxt"))


@pytest.mark.parametrize("model_dir", ALL_MODEL_DIRS, ids=lambda p: p.name)
def test_config_parses_and_names_its_directory(model_dir):
    config = _config(model_dir)
    assert config.name == model_dir.name  # Triton requires it
    assert (model_dir / "1").is_dir()
    assert not config.HasField("version_policy")  # default: latest 1


def test_expected_models_present():
    assert {p.name for p in ALL_MODEL_DIRS} == {
        "facile",
        "jet_tagger",
        "calo_cnn",
        "facile_pipeline",
        "facile_scale",
        "facile_energy",
        "simple",
        "simple_int8",
        "simple_string",
        "simple_identity",
        "repeat_int32",
        "simple_sequence",
        "simple_dyna_sequence",
        "simple_string_dyna_sequence",
    }


def _dt(name: str) -> int:
    return model_config_pb2.DataType.Value(name)


@pytest.mark.parametrize(
    "name, dtype, engine",
    [
        ("simple", "TYPE_INT32", ("platform", "onnxruntime_onnx")),
        ("simple_int8", "TYPE_INT8", ("platform", "onnxruntime_onnx")),
        ("simple_string", "TYPE_STRING", ("backend", "numpy")),
    ],
)
def test_simple_family_config(name, dtype, engine):
    config = _config(TEST_MODELS / name)
    assert getattr(config, engine[0]) == engine[1]
    assert config.max_batch_size == 8
    assert [(t.name, t.data_type, list(t.dims)) for t in config.input] == [
        ("INPUT0", _dt(dtype), [16]),
        ("INPUT1", _dt(dtype), [16]),
    ]
    assert [(t.name, t.data_type, list(t.dims)) for t in config.output] == [
        ("OUTPUT0", _dt(dtype), [16]),
        ("OUTPUT1", _dt(dtype), [16]),
    ]


def test_simple_identity_config():
    config = _config(TEST_MODELS / "simple_identity")
    assert config.backend == "numpy" and config.max_batch_size == 8
    assert [(t.name, t.data_type, list(t.dims)) for t in config.input] == [("INPUT0", _dt("TYPE_STRING"), [-1])]
    assert [(t.name, t.data_type, list(t.dims)) for t in config.output] == [("OUTPUT0", _dt("TYPE_STRING"), [-1])]


@pytest.mark.parametrize(
    "name, dims_in, output, n_out",
    [
        ("facile", [47], "output/BiasAdd", 1),
        ("jet_tagger", [16], "output", 5),
        ("calo_cnn", [1, 16, 16], "output", 5),
    ],
)
def test_hls4ml_model_config(name, dims_in, output, n_out):
    config = _config(BITSTREAMS / name)
    assert config.backend == "hls4ml" and not config.platform
    assert config.max_batch_size == 16384
    assert [(t.name, t.data_type, list(t.dims)) for t in config.input] == [("input", _dt("TYPE_FP32"), dims_in)]
    assert [(t.name, t.data_type, list(t.dims)) for t in config.output] == [(output, _dt("TYPE_FP32"), [n_out])]
    [group] = config.instance_group
    assert group.count == 1 and group.kind == model_config_pb2.ModelInstanceGroup.KIND_MODEL
    # the version folder holds the model's hls4ml project and nothing of hls4ml's own library but
    # the file hls4ml generates into it for convolutions (their im2col buffer fillers)
    version = BITSTREAMS / name / "1"
    assert (version / "hls4ml_config.yml").is_file() and (version / "firmware" / "myproject.cpp").is_file()
    assert not (version / "firmware" / "ap_types").exists()
    own = sorted(p.name for p in (version / "firmware" / "nnet_utils").glob("*"))
    assert own == (["nnet_code_gen.h"] if name == "calo_cnn" else [])
    text = (version / "hls4ml_config.yml").read_text()
    assert "!!python/object" not in text and "OutputDir: ." in text
    assert "typedef ap_fixed<16,6> input_t;" in (version / "firmware" / "defines.h").read_text()


# ---------------------------------------------------------------------------------------
# ONNX models, run with onnxruntime
# ---------------------------------------------------------------------------------------
def _session(model_dir: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(model_dir / "1" / "model.onnx"), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize(
    "model_dir", [p for p in ALL_MODEL_DIRS if (p / "1/model.onnx").exists()], ids=lambda p: p.name
)
def test_onnx_matches_config(model_dir):
    """ONNX I/O names, element types and shapes agree with config.pbtxt, batch dynamic."""
    config = _config(model_dir)
    model = onnx.load(model_dir / "1" / "model.onnx")
    onnx.checker.check_model(model, full_check=True)
    assert model.ir_version == 8 and model.opset_import[0].version == 13

    def io(values):
        out = []
        for v in values:
            t = v.type.tensor_type
            dims = [d.dim_param or d.dim_value for d in t.shape.dim]
            out.append((v.name, onnx.helper.tensor_dtype_to_np_dtype(t.elem_type), dims))
        return out

    np_of = {"TYPE_INT32": np.int32, "TYPE_INT8": np.int8, "TYPE_FP32": np.float32}
    expect = lambda tensors: [  # noqa: E731
        (t.name, np.dtype(np_of[model_config_pb2.DataType.Name(t.data_type)]), ["batch", *t.dims]) for t in tensors
    ]
    assert io(model.graph.input) == expect(config.input)
    assert io(model.graph.output) == expect(config.output)


def test_simple_add_sub():
    sess = _session(TEST_MODELS / "simple")
    rng = np.random.default_rng(0)
    info = np.iinfo(np.int32)
    for batch in (1, 3, 8):
        a = rng.integers(info.min, info.max, (batch, 16), dtype=np.int32, endpoint=True)
        b = rng.integers(info.min, info.max, (batch, 16), dtype=np.int32, endpoint=True)
        out0, out1 = sess.run(["OUTPUT0", "OUTPUT1"], {"INPUT0": a, "INPUT1": b})
        assert out0.dtype == out1.dtype == np.int32 and out0.shape == (batch, 16)
        # numpy int32 arithmetic wraps like C; so must the model (random full-range
        # values overflow on about half the elements).
        np.testing.assert_array_equal(out0, a + b)
        np.testing.assert_array_equal(out1, a - b)
    # The values simple_grpc_infer_client.py sends.
    a = np.arange(16, dtype=np.int32)[None]
    b = np.ones((1, 16), dtype=np.int32)
    out0, out1 = sess.run(["OUTPUT0", "OUTPUT1"], {"INPUT0": a, "INPUT1": b})
    assert out0.tolist() == [list(range(1, 17))] and out1.tolist() == [list(range(-1, 15))]


def test_simple_int8_wraps_exhaustively():
    """Every int8 pair: computed in int32 and cast back, i.e. wrapping (127+1 -> -128)."""
    sess = _session(TEST_MODELS / "simple_int8")
    values = np.arange(-128, 128, dtype=np.int8)
    a, b = (m.reshape(-1, 16) for m in np.meshgrid(values, values))  # 4096 x 16
    out0, out1 = sess.run(["OUTPUT0", "OUTPUT1"], {"INPUT0": a, "INPUT1": b})
    assert out0.dtype == out1.dtype == np.int8
    wide_a, wide_b = a.astype(np.int32), b.astype(np.int32)
    np.testing.assert_array_equal(out0, (wide_a + wide_b).astype(np.int8))
    np.testing.assert_array_equal(out1, (wide_a - wide_b).astype(np.int8))
    one = np.ones((1, 16), np.int8)
    assert sess.run(["OUTPUT0"], {"INPUT0": one * 127, "INPUT1": one})[0][0, 0] == -128
    assert sess.run(["OUTPUT1"], {"INPUT0": one * -128, "INPUT1": one})[0][0, 0] == 127


def _facile_reference(x: np.ndarray) -> np.ndarray:
    w = np.load(BITSTREAMS / "facile" / "1" / "weights.npz")
    h = np.maximum(x @ w["W1"] + w["b1"], 0)
    h = np.maximum(h @ w["W2"] + w["b2"], 0)
    return h @ w["W3"] + w["b3"]


def test_facile_weights():
    with np.load(BITSTREAMS / "facile" / "1" / "weights.npz") as w:
        assert sorted(w.files) == ["W1", "W2", "W3", "b1", "b2", "b3"]
        shapes = {k: w[k].shape for k in w.files}
        assert all(w[k].dtype == np.float32 for k in w.files)
        assert sum(w[k].size for k in w.files) == 3097
    assert shapes == {"W1": (47, 36), "b1": (36,), "W2": (36, 36), "b2": (36,), "W3": (36, 1), "b3": (1,)}


def test_jet_tagger_reference_is_a_softmax():
    sess = _session(BITSTREAMS / "jet_tagger")
    x = np.random.default_rng(3).standard_normal((64, 16), dtype=np.float32)
    [y] = sess.run(["output"], {"input": x})
    w = np.load(BITSTREAMS / "jet_tagger" / "1" / "weights.npz")
    h = x
    for k in (1, 2, 3):
        h = np.maximum(h @ w[f"W{k}"] + w[f"b{k}"], 0)
    z = h @ w["W4"] + w["b4"]
    want = np.exp(z - z.max(1, keepdims=True))
    want /= want.sum(1, keepdims=True)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(y.sum(1), 1, rtol=1e-5)


@pytest.mark.parametrize("batch", [1, 7, 16384])
def test_facile_runs_and_matches_weights(batch):
    """model.onnx and weights.npz describe the same network (other backends rely on it)."""
    sess = _session(BITSTREAMS / "facile")
    x = np.random.default_rng(batch).standard_normal((batch, 47), dtype=np.float32)
    [y] = sess.run(["output/BiasAdd"], {"input": x})
    assert y.shape == (batch, 1) and y.dtype == np.float32
    assert np.isfinite(y).all()
    np.testing.assert_allclose(y, _facile_reference(x), rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------
# numpy-backend models, called directly
# ---------------------------------------------------------------------------------------
def _numpy_model(name: str):
    """Instantiate ``tests/models/<name>/1/model.py``'s Model as the backend would."""
    model_dir = TEST_MODELS / name / "1"
    spec = importlib.util.spec_from_file_location(f"_bundled_{name}", model_dir / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.Model()
    if hasattr(model, "initialize"):
        from google.protobuf.json_format import MessageToDict

        model.initialize(MessageToDict(_config(model_dir.parent), preserving_proto_field_name=True), str(model_dir))
    return model


def _bytes_array(values, shape) -> np.ndarray:
    return np.array([v if isinstance(v, bytes) else str(v).encode() for v in values], dtype=object).reshape(shape)


def _assert_bytes_output(out: np.ndarray, expected: list, shape) -> None:
    assert out.shape == shape and out.dtype == object
    assert all(type(v) is bytes for v in out.flat)
    assert out.reshape(-1).tolist() == expected


def test_simple_string_add_sub():
    model = _numpy_model("simple_string")
    # What simple_grpc_string_infer_client.py sends: arange(16) and ones, batch 1.
    a = _bytes_array(range(16), (1, 16))
    b = _bytes_array([1] * 16, (1, 16))
    out = model.execute({"INPUT0": a, "INPUT1": b})
    assert set(out) == {"OUTPUT0", "OUTPUT1"}
    _assert_bytes_output(out["OUTPUT0"], [str(i + 1).encode() for i in range(16)], (1, 16))
    _assert_bytes_output(out["OUTPUT1"], [str(i - 1).encode() for i in range(16)], (1, 16))
    assert out["OUTPUT0"][0, 15] == b"16" and out["OUTPUT1"][0, 0] == b"-1"

    # A full batch with negatives and large values: plain integers, no float formatting.
    rng = np.random.default_rng(1)
    ia = rng.integers(-(10**12), 10**12, (8, 16))
    ib = rng.integers(-(10**12), 10**12, (8, 16))
    out = model.execute({"INPUT0": _bytes_array(ia.flat, (8, 16)), "INPUT1": _bytes_array(ib.flat, (8, 16))})
    _assert_bytes_output(out["OUTPUT0"], [str(v).encode() for v in (ia + ib).flat], (8, 16))
    _assert_bytes_output(out["OUTPUT1"], [str(v).encode() for v in (ia - ib).flat], (8, 16))


def test_simple_string_rejects_non_integers():
    model = _numpy_model("simple_string")
    bad = _bytes_array([b"1.5"] + [b"0"] * 15, (1, 16))
    with pytest.raises(ValueError):  # the backend turns this into INTERNAL
        model.execute({"INPUT0": bad, "INPUT1": _bytes_array([0] * 16, (1, 16))})


def test_simple_identity_is_byte_exact():
    model = _numpy_model("simple_identity")
    values = [
        b"he\x00llo",
        b"",
        b"\x00",
        b"\x00\x00end\x00",
        b"\xff\xfe not utf-8",
        "ünïcödé".encode(),
        b"x" * 100_000,
        b"plain",
    ]
    for shape in [(1, 8), (2, 4), (8, 1)]:
        x = np.array(values, dtype=object).reshape(shape)
        [y] = model.execute({"INPUT0": x}).values()
        _assert_bytes_output(y, values, shape)
    # simple_grpc_string_infer_client.py's round trip
    x = np.array([b"he\x00llo"] * 16, dtype=object).reshape(1, 16)
    assert np.array_equal(model.execute({"INPUT0": x})["OUTPUT0"], x)
