"""The C-simulation runtime (backends/hls4ml/csim/: library.py + batch_shim.cpp).

Projects are converted from small PyTorch models with hls4ml and compiled by hls4ml itself;
its ``HLSModel.predict`` (one sample per ctypes call through hls4ml's own bridge) is the
reference our batched library must reproduce bit for bit.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import threading
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

hls4ml = pytest.importorskip("hls4ml")
torch = pytest.importorskip("torch")

from fpgaserve.backends.hls4ml.csim import CsimLibrary, fix_axi_typedefs  # noqa: E402
from fpgaserve.backends.hls4ml.csim import library as csim  # noqa: E402
from fpgaserve.backends.hls4ml.project import Hls4mlProject, ProjectError, installed_templates_dir  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the C-simulation needs g++")


# ---------------------------------------------------------------------------- project factory
def _mlp(sizes, seed, last_activation=None):
    layers = []
    for i, (a, b) in enumerate(pairwise(sizes)):
        layers.append(torch.nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(torch.nn.ReLU())
    if last_activation is not None:
        layers.append(last_activation)
    model = torch.nn.Sequential(*layers).eval()
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for p in model.parameters():
            # wide enough that accumulators and relu outputs exercise ap_fixed wrap-around
            p.copy_(torch.from_numpy(rng.normal(0, 0.6, size=tuple(p.shape)).astype(np.float32)))
    return model


def _convert(model, n_in, outdir, backend="VivadoAccelerator", io_precision=None, layer_config=None):
    """Write and compile an hls4ml project; returns the HLSModel (the reference)."""
    cfg = hls4ml.utils.config_from_pytorch_model(
        model, input_shape=(n_in,), granularity="name", backend=backend, default_precision="ap_fixed<16,6>"
    )
    for layer, settings in (layer_config or {}).items():
        cfg["LayerName"][layer].update(settings)
    kwargs = {}
    if backend == "VivadoAccelerator":
        kwargs["board"] = "alveo-u250"
        if io_precision is not None:
            kwargs["input_type"] = kwargs["output_type"] = io_precision
    hm = hls4ml.converters.convert_from_pytorch_model(
        model, hls_config=cfg, backend=backend, io_type="io_parallel", output_dir=str(outdir), **kwargs
    )
    hm.write()
    axi = Path(outdir) / "firmware" / "myproject_axi.h"
    if axi.is_file():
        # hls4ml 1.3.0 writes "typedef fixed<16,6,TRN,WRAP,0> T_in;" for ap_fixed I/O, which its
        # own build cannot compile: fix it for hls4ml's build, then put hls4ml's text back so the
        # project on disk is what hls4ml writes (our build must cope with it by itself).
        written = axi.read_text()
        axi.write_text(fix_axi_typedefs(written))
        hm._compile()
        axi.write_text(written)
    else:
        hm._compile()
    return hm


def _inputs(n_in, seed=3):
    rng = np.random.default_rng(seed)
    edges = [
        0.0,
        -0.0,
        1e-9,
        -1e-9,
        2**-10,
        -(2**-10),
        2**-11,
        -(2**-11),
        0.1,
        -0.1,
        31.99,
        32.0,
        -32.0,
        -32.01,
        511.5,
        -511.5,
        1e4,
        -1e4,
        3e9,
        -3e9,
        np.inf,
        -np.inf,
    ]
    rows = [np.full(n_in, v) for v in edges]
    rows += [np.resize(np.array(edges), n_in), np.resize(np.array(edges[::-1]), n_in)]
    # values that float32 rounds (the float-I/O accelerator rounds double to float first)
    rows.append(np.full(n_in, 0.1 + 2**-40))
    rows.append(np.linspace(-40, 40, n_in) + 1e-12)
    return np.concatenate(
        [
            np.asarray(rows),
            rng.normal(0, 1, size=(300, n_in)),
            rng.normal(0, 12, size=(300, n_in)),  # saturating / wrapping inputs and accumulators
            -np.abs(rng.normal(0, 4, size=(100, n_in))),
            rng.integers(-(2**15), 2**15, size=(100, n_in)) * 2.0**-10,  # exactly representable words
        ]
    )


@pytest.fixture(scope="module")
def projects(tmp_path_factory):
    root = tmp_path_factory.mktemp("hls4ml_projects")
    built = {}
    built["float_io"] = (root / "float_io", _convert(_mlp([12, 16, 8, 3], seed=1), 12, root / "float_io"))
    built["fixed_io"] = (
        root / "fixed_io",
        _convert(_mlp([12, 16, 8, 3], seed=2), 12, root / "fixed_io", io_precision="ap_fixed<16,6>"),
    )
    # plain Vivado project, ending in a sigmoid (a lookup table in a template-static array)
    built["vivado"] = (
        root / "vivado",
        _convert(_mlp([9, 10, 4], seed=4, last_activation=torch.nn.Sigmoid()), 9, root / "vivado", backend="Vivado"),
    )
    return built


@pytest.fixture
def cache(tmp_path):
    return tmp_path / "cache"


def _reference(hm, x):
    return np.asarray(hm.predict(np.ascontiguousarray(x.astype(np.float64)))).reshape(len(x), -1)


def _copy_project(src: Path, dst: Path) -> Path:
    # hls4ml's own build outputs are not part of the project
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.so", "*.o"))
    return dst


def _run_python(code: str, **env) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **env},
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


LOAD_IN_SUBPROCESS = """
import json, os, sys, numpy as np
from fpgaserve.backends.hls4ml.project import Hls4mlProject
from fpgaserve.backends.hls4ml.csim import CsimLibrary
lib = CsimLibrary.load(Hls4mlProject.load(sys.argv[1] if len(sys.argv) > 1 else os.environ["PRJ"]), os.environ["CACHE"])
x = np.linspace(-20, 20, 5 * lib.n_in).reshape(5, lib.n_in)
print(json.dumps({"path": str(lib.path), "built": lib.built, "mtime": os.stat(lib.path).st_mtime_ns,
                  "y": lib.predict(x).tolist()}))
"""


# ---------------------------------------------------------------------------- bit-exactness
@pytest.mark.parametrize("kind", ["float_io", "fixed_io", "vivado"])
def test_bit_identical_to_hls4ml_predict(projects, cache, kind):
    path, hm = projects[kind]
    lib = CsimLibrary.load(Hls4mlProject.load(path), cache)
    assert (lib.n_in, lib.n_out) == (hm.get_input_variables()[0].size(), hm.get_output_variables()[0].size())
    x = _inputs(lib.n_in)
    for dtype in (np.float64, np.float32):
        xi = x.astype(dtype)
        ours = lib.predict(xi)
        ref = _reference(hm, xi)
        assert ours.dtype == np.float64 and ours.shape == ref.shape
        # bit-identical: compare the float64 bit patterns, not values within a tolerance
        mismatch = np.flatnonzero((ours.view(np.uint64) != ref.view(np.uint64)).any(axis=1))
        assert mismatch.size == 0, (kind, dtype, mismatch[:10], ours[mismatch[:3]], ref[mismatch[:3]])
    # the edge rows really reach the ends of the output range (the comparison covers wrap/saturation)
    assert len(np.unique(lib.predict(x))) > 50


def test_accelerator_word_types_come_from_the_axi_header(projects, cache):
    fixed = CsimLibrary.load(Hls4mlProject.load(projects["fixed_io"][0]), cache)
    assert fixed.word_types == ("ap_fixed<16,6,AP_TRN,AP_WRAP,0>", "ap_fixed<16,6,AP_TRN,AP_WRAP,0>")
    # the project itself still holds hls4ml's uncompilable text; only the build copy is fixed
    written = (projects["fixed_io"][0] / "firmware" / "myproject_axi.h").read_text()
    assert "typedef fixed<16,6,TRN,WRAP,0> T_in;" in written
    assert CsimLibrary.load(Hls4mlProject.load(projects["float_io"][0]), cache).word_types == ("float", "float")
    assert CsimLibrary.load(Hls4mlProject.load(projects["vivado"][0]), cache).word_types is None


def test_fix_axi_typedefs():
    text = "typedef fixed<16,6,TRN,WRAP,0> T_in;\ntypedef ufixed<8,2,RND_CONV,SAT> T_out;\n  typedef int<8> x_t;\n"
    assert fix_axi_typedefs(text) == (
        "typedef ap_fixed<16,6,AP_TRN,AP_WRAP,0> T_in;\ntypedef ap_ufixed<8,2,AP_RND_CONV,AP_SAT> T_out;\n"
        "  typedef ap_int<8> x_t;\n"
    )
    untouched = "typedef ap_fixed<16,6> T_in;\ntypedef float T_out;\n"
    assert fix_axi_typedefs(untouched) == untouched


def test_installed_templates_are_used_when_the_project_has_none(projects, tmp_path, monkeypatch):
    path, hm = projects["float_io"]
    bare = _copy_project(path, tmp_path / "bare")
    for lib in ("nnet_utils", "ap_types"):
        shutil.rmtree(bare / "firmware" / lib)
    project = Hls4mlProject.load(bare)
    monkeypatch.setattr(CsimLibrary, "_loaded", {})  # same content hash as the original: load afresh
    assert all(Path(p).is_relative_to(installed_templates_dir()) for p in project.template_dirs().values())
    lib = CsimLibrary.load(project, tmp_path / "fresh-cache")
    assert lib.built
    assert (lib.path.parent / "firmware" / "nnet_utils" / "nnet_dense.h").is_file()
    x = _inputs(lib.n_in)
    assert np.array_equal(lib.predict(x).view(np.uint64), _reference(hm, x).view(np.uint64))


def test_several_projects_in_one_process_keep_their_own_tables(projects, tmp_path, cache):
    """Same layer names, different sigmoid table sizes: template-static tables must not be shared
    between the libraries (what -fno-gnu-unique / hidden visibility prevent)."""
    model = _mlp([9, 10, 4], seed=4, last_activation=torch.nn.Sigmoid())
    # hls4ml names the layers of a Sequential "_<index>": _3 is the sigmoid
    small = _convert(model, 9, tmp_path / "small_table", backend="Vivado", layer_config={"_3": {"TableSize": 64}})
    assert "table_size = 64" in (tmp_path / "small_table" / "firmware" / "parameters.h").read_text()
    # the first library (1024-entry table) is loaded before the second
    big_lib = CsimLibrary.load(Hls4mlProject.load(projects["vivado"][0]), cache)
    small_lib = CsimLibrary.load(Hls4mlProject.load(tmp_path / "small_table"), cache)
    assert small_lib.path != big_lib.path
    x = _inputs(9)
    small_ref = _reference(small, x)
    assert not np.array_equal(small_ref, _reference(projects["vivado"][1], x)), "table sizes did not change"
    assert np.array_equal(small_lib.predict(x), small_ref)
    assert np.array_equal(big_lib.predict(x), _reference(projects["vivado"][1], x))


# ---------------------------------------------------------------------------- build cache
def test_cache_hit_reuses_the_library(projects, cache, monkeypatch):
    path = projects["float_io"][0]
    monkeypatch.setattr(CsimLibrary, "_loaded", {})  # build into this test's cache
    first = CsimLibrary.load(Hls4mlProject.load(path), cache)
    assert first.built and first.path.is_relative_to(cache)
    assert CsimLibrary.load(Hls4mlProject.load(path), cache) is first  # one library per process
    mtime = first.path.stat().st_mtime_ns
    # a new process finds it on disk: no rebuild, same file
    out = _run_python(LOAD_IN_SUBPROCESS, PRJ=str(path), CACHE=str(cache))
    assert out["built"] is False
    assert out["path"] == str(first.path) and out["mtime"] == mtime
    x = np.linspace(-20, 20, 5 * first.n_in).reshape(5, first.n_in)
    assert np.array_equal(np.array(out["y"]), first.predict(x))
    assert first.path.parent.name == Hls4mlProject.load(path).content_hash()


def test_weight_change_rebuilds(projects, tmp_path, cache):
    prj = _copy_project(projects["float_io"][0], tmp_path / "prj")
    before = CsimLibrary.load(Hls4mlProject.load(prj), cache)
    x = _inputs(before.n_in)
    y_before = before.predict(x)
    weights = prj / "firmware" / "weights" / "b2.txt"
    values = weights.read_text().strip().split(",")
    values[0] = str(float(values[0]) + 3.0)
    weights.write_text(",".join(values) + "\n")
    after = CsimLibrary.load(Hls4mlProject.load(prj), cache)
    assert after.built and after is not before and after.path != before.path
    assert not np.array_equal(after.predict(x), y_before)
    # the old library keeps serving what it was built from (its own copy of the weights)
    assert np.array_equal(before.predict(x), y_before)


def test_damaged_cache_copy_is_rebuilt_not_fatal(projects, tmp_path):
    """A weights file deleted from the cache copy would make hls4ml's loader exit(1): the
    loader must notice and rebuild instead (checked in a fresh process)."""
    cache = tmp_path / "cache"
    path = projects["fixed_io"][0]
    first = _run_python(LOAD_IN_SUBPROCESS, PRJ=str(path), CACHE=str(cache))
    assert first["built"] is True
    copy_weights = Path(first["path"]).parent / "firmware" / "weights"
    (copy_weights / "w2.txt").unlink()
    second = _run_python(LOAD_IN_SUBPROCESS, PRJ=str(path), CACHE=str(cache))
    assert second["built"] is True and second["y"] == first["y"]
    assert (copy_weights / "w2.txt").is_file()


def test_concurrent_builders_in_several_processes(projects, tmp_path):
    cache = tmp_path / "cache"
    path = projects["vivado"][0]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", LOAD_IN_SUBPROCESS],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PRJ": str(path), "CACHE": str(cache)},
        )
        for _ in range(3)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert sum(r["built"] for r in results) == 1  # the others waited on the lock and found it
    assert len({r["path"] for r in results}) == 1
    assert all(r["y"] == results[0]["y"] for r in results)
    leftovers = [p.name for p in Path(results[0]["path"]).parent.iterdir() if p.name.startswith("build-")]
    assert leftovers == []


# ---------------------------------------------------------------------------- load errors
def test_missing_weights_file_is_a_project_error(projects, tmp_path, cache):
    prj = _copy_project(projects["float_io"][0], tmp_path / "prj")
    (prj / "firmware" / "weights" / "w4.txt").unlink()
    with pytest.raises(ProjectError, match=r"w4.txt"):
        CsimLibrary.load(Hls4mlProject.load(prj), cache)
    assert not cache.exists() or not any(cache.glob("*/*.so"))  # refused before compiling
    # still alive (hls4ml's loader would have called exit(1)) and other projects still load
    other = CsimLibrary.load(Hls4mlProject.load(projects["float_io"][0]), cache)
    assert other.predict(np.zeros((1, 12))).shape == (1, 3)


def test_compiler_error_is_a_project_error_with_gcc_text(projects, tmp_path, cache):
    prj = _copy_project(projects["float_io"][0], tmp_path / "prj")
    top = prj / "firmware" / "myproject.cpp"
    top.write_text(top.read_text().replace("nnet::relu<", "nnet::relu<<", 1))
    with pytest.raises(ProjectError) as err:
        CsimLibrary.load(Hls4mlProject.load(prj), cache)
    text = str(err.value)
    assert "does not compile" in text and "myproject.cpp" in text and "error" in text
    assert len(text.splitlines()) <= csim.ERROR_LINES + 3
    assert not any(cache.glob("*/*.so")) or all("prj" not in str(p) for p in cache.glob("*/*.so"))


def test_missing_compiler_is_a_clear_project_error(projects, cache, monkeypatch):
    monkeypatch.setattr(csim, "COMPILER", "fpgaserve-no-such-g++")
    prj = Hls4mlProject.load(projects["fixed_io"][0])
    monkeypatch.setattr(CsimLibrary, "_loaded", {})  # not served from this process's registry
    with pytest.raises(ProjectError, match=r"fpgaserve-no-such-g\+\+.*not on PATH"):
        CsimLibrary.load(prj, cache)


# ---------------------------------------------------------------------------- calling
def test_input_validation(projects, cache):
    lib = CsimLibrary.load(Hls4mlProject.load(projects["float_io"][0]), cache)
    assert lib.predict(np.zeros((0, 12), np.float32)).shape == (0, 3)
    with pytest.raises(ValueError):
        lib.predict(np.zeros((2, 11)))
    with pytest.raises(ValueError):
        lib.predict(np.zeros(12))
    with pytest.raises(TypeError):
        lib.predict(np.zeros((2, 12), np.int32))
    x = _inputs(12)
    wide = np.zeros((len(x), 24))
    wide[:, ::2] = x
    assert np.array_equal(lib.predict(wide[:, ::2]), lib.predict(x))  # strided input is copied


def _partial_output_seen(fn, x: np.ndarray, n_out: int, stack_bytes: int) -> bool:
    """Call ``fn(x, y, rows, stack_bytes)`` (a C batch loop writing y row by row) on a worker thread while
    this thread watches y: True when this thread saw the first row written and the last not yet.

    Seeing that state means Python code ran while the C loop was in the middle of its work,
    which only happens if the call released the GIL. No clock is involved: a GIL-holding call
    can never be observed half done, however slow or loaded the machine is.
    """
    y = np.full((len(x), n_out), np.nan)
    worker = threading.Thread(target=fn, args=(x.ctypes.data, y.ctypes.data, len(x), stack_bytes))
    worker.start()
    try:
        while worker.is_alive():
            if not np.isnan(y[0, 0]):
                return bool(np.isnan(y[-1, 0]))
        return False
    finally:
        worker.join()


def test_predict_releases_the_gil(projects, cache):
    lib = CsimLibrary.load(Hls4mlProject.load(projects["float_io"][0]), cache)
    released_fn = lib._fn[np.dtype(np.float64)]  # what predict() calls for float64 input
    rng = np.random.default_rng(0)
    # a batch long enough that this thread is scheduled before it ends; retried larger in the
    # (unlikely) case it was not, so a loaded machine makes the test slower, never wrong
    rows = 20000
    for _ in range(4):
        x = rng.normal(0, 2, size=(rows, 12))
        if _partial_output_seen(released_fn, x, lib.n_out, lib.stack_bytes):
            break
        rows *= 4
    else:
        raise AssertionError(f"never saw a C-simulation call half done, up to {rows // 4} rows")
    y = np.empty((len(x), lib.n_out))
    assert released_fn(x.ctypes.data, y.ctypes.data, len(x), lib.stack_bytes) == 0
    assert np.array_equal(y, lib.predict(x))  # and it is the function predict() uses
    # control: the same entry point through PyDLL holds the GIL, so it is never seen half done
    held_fn = ctypes.PyDLL(str(lib.path)).fpgaserve_predict_double
    held_fn.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long, ctypes.c_size_t)
    held_fn.restype = ctypes.c_int
    assert not _partial_output_seen(held_fn, x, lib.n_out, lib.stack_bytes)


def test_concurrent_calls_from_several_threads(projects, cache):
    lib = CsimLibrary.load(Hls4mlProject.load(projects["vivado"][0]), cache)
    x = _inputs(lib.n_in)
    expected = lib.predict(x)
    results = [None] * 4
    barrier = threading.Barrier(4)

    def work(i):
        barrier.wait()
        results[i] = [lib.predict(x.astype(np.float32 if i % 2 else np.float64)) for _ in range(5)]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, runs in enumerate(results):
        want = expected if i % 2 == 0 else lib.predict(x.astype(np.float32))
        assert all(np.array_equal(r, want) for r in runs)


def test_concurrent_first_loads_in_one_process_share_one_library(projects, tmp_path):
    project = Hls4mlProject.load(projects["fixed_io"][0])
    libs = [None] * 3

    def load(i):
        libs[i] = CsimLibrary.load(project, tmp_path / "cache")

    threads = [threading.Thread(target=load, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert libs[0] is libs[1] is libs[2]
