"""A dozen packed hls4ml models served under a 6 GiB address-space limit, in numpy and csim mode.

The repository is what an operator on a shared host brings (shapes of hls4ml's public example
models, packed with ``fpgaserve pack``): the 512x512x3 separable io_stream network (pack bounds
its batch to 53 rows of 19 MB within the default 1 GiB budget; its numpy emulation takes
280 MiB a row, so it works through a batch two rows at a time), the three-layer jet tagger
(the bundled one) and a Conv1D network in io_parallel, each repacked under other names and
batch sizes, and the 512x512x3 network packed with an 8 GiB batch budget: 431 rows, more than
the limit can hold.

The server and every process it starts run under RLIMIT_AS = 6 GiB
(``support/address_limit.py``). In each mode the eleven models that fit load and answer (bit
for bit alike in both modes), the one that does not fails its load alone, naming the bytes it
needed and the limit, and the peak address space and resident memory of every process are
printed. Before, the csim server could load two models (two 1 GiB shared segments per instance
in the engine) and the oversized model loaded as if it fit.

Packs are made once per module (one conversion, the rest repacked from projects), the large
network's once per run (``support.hls4ml_models.sep512_repository``: test_hls4ml_io_stream
serves the same pack); csim builds come from the run's cache.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("hls4ml")

from support.address_limit import GIB, limited_entry, peaks
from support.hls4ml_layers import keras_on_torch
from support.hls4ml_models import sep512_repository
from support.server_process import BUNDLED_REPO, ServerProcess

LIMIT = 6 * GIB
#: rows sent to the large network: three pieces of at most two rows in numpy mode
LARGE_ROWS = 5


def _pack(*args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fpgaserve.server.cli", "pack", *args, "--reference-timeout", "0"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr


def _conv1d_keras(path: Path) -> None:
    """KERAS_conv1d's input and head (100 x 7 -> Conv1D 'same' relu -> Dense 5 softmax), fewer filters."""
    keras = keras_on_torch()
    layers = keras.layers
    keras.utils.set_random_seed(5)
    i = keras.Input((100, 7))
    x = layers.Conv1D(8, 9, padding="same", activation="relu")(i)
    x = layers.Dense(5, activation="softmax")(layers.Flatten()(x))
    keras.Model(i, x).save(path)


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("memory-limits")
    repo = folder / "repo"
    # the 512x512x3 separable network of test_hls4ml_io_stream (depthwise, then pointwise): the
    # run's one pack of it, copied (this repository is the test's own)
    shutil.copytree(sep512_repository(tmp_path_factory) / "sep512", repo / "sep512")
    # hls4ml's three-layer jet tagger (keras_3layer: 16 -> 64 -> 32 -> 32 -> 5) is the bundled
    # one, repacked: no conversion, and its C-simulation build is the one other tests make
    _pack("jet_tagger", "--hls4ml-project", str(BUNDLED_REPO / "jet_tagger" / "1"), "--repository", str(repo))
    _conv1d_keras(folder / "conv1d.keras")
    _pack("conv1d", "--keras", str(folder / "conv1d.keras"), "--repository", str(repo))
    # the same firmware under other names and batch sizes (one csim build each project)
    for name in ("jet_tagger", "conv1d"):
        for k, rows in enumerate((1024, 256, 64, 16), start=2):
            project = str(repo / name / "1")
            _pack(f"{name}_{k}", "--hls4ml-project", project, "--max-batch-size", str(rows), "--repository", str(repo))
    # too big: 431 rows of 19 MB (8 GiB) for one batch, under a 6 GiB limit
    _pack(
        "sep512_8g",
        "--hls4ml-project",
        str(repo / "sep512" / "1"),
        "--batch-memory-budget",
        "8GiB",
        "--repository",
        str(repo),
    )
    assert "max_batch_size: 53" in (repo / "sep512" / "config.pbtxt").read_text()
    assert "max_batch_size: 431" in (repo / "sep512_8g" / "config.pbtxt").read_text()
    assert len([p for p in repo.iterdir() if (p / "config.pbtxt").is_file()]) == 12
    return repo


def _index(proc: ServerProcess) -> list[dict]:
    request = urllib.request.Request(f"http://127.0.0.1:{proc.http_port}/v2/repository/index", data=b"{}")
    with urllib.request.urlopen(request, timeout=10) as r:
        return json.loads(r.read())


def _wait_loaded(proc: ServerProcess, count: int, timeout: float = 400.0) -> list[dict]:
    """The repository index once every model is READY or UNAVAILABLE (the server is not ready
    with a model that failed: it is started without waiting for readiness)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.proc is not None and proc.proc.poll() is None, proc.log()
        try:
            index = _index(proc)
        except OSError:
            index = []
        if len(index) == count and all(e.get("state") in ("READY", "UNAVAILABLE") for e in index):
            return index
        time.sleep(0.5)
    raise AssertionError(f"models still loading after {timeout} s: {proc.log()}")


def _infer(url: str, name: str, x: np.ndarray) -> np.ndarray:
    import tritonclient.grpc as grpcclient

    with grpcclient.InferenceServerClient(url) as client:
        meta = client.get_model_metadata(name)
        [inp], [out] = meta.inputs, meta.outputs
        x = x.reshape(len(x), *[int(d) for d in inp.shape[1:]])
        t = grpcclient.InferInput(inp.name, list(x.shape), "FP32")
        t.set_data_from_numpy(x)
        return client.infer(name, [t], client_timeout=300).as_numpy(out.name)


def _rows(n_in: int, rows: int, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((rows, n_in)) * 4).astype(np.float32)


SERVED: dict[str, dict[str, np.ndarray]] = {}  # mode -> model -> answer, to compare the modes


@pytest.mark.timeout(900)
@pytest.mark.parametrize("mode", ["numpy", "csim"])
def test_a_dozen_models_under_an_address_space_limit(mode, repository, tmp_path_factory, csim_cache):
    log = tmp_path_factory.mktemp(f"limit-{mode}") / "fpgaserve.log"
    env = dict(os.environ, FPGASERVE_CACHE_DIR=str(csim_cache))
    proc = ServerProcess([repository], "--fpga-mode", mode, log_path=log, env=env, entry=limited_entry(LIMIT))
    proc.start(timeout=120, wait_ready=False)
    answers: dict[str, np.ndarray] = {}
    try:
        index = {e["name"]: e for e in _wait_loaded(proc, 12)}
        states = {name: e["state"] for name, e in index.items()}
        assert [n for n, s in states.items() if s != "READY"] == ["sep512_8g"], states
        reason = index["sep512_8g"].get("reason", "")
        # the model, the bytes it needed, the limit: not a bare MemoryError or [Errno 12]
        assert re.search(r"model 'sep512_8g' needs [\d.]+ GiB of address space", reason), reason
        assert "431 rows" in reason and "6.0 GiB address-space limit" in reason, reason
        for name in sorted(index):
            if name == "sep512_8g":
                continue
            rows = LARGE_ROWS if name == "sep512" else 16
            n_in = 786432 if name == "sep512" else (16 if name.startswith("jet") else 700)
            answers[name] = _infer(proc.url, name, _rows(n_in, rows, seed=len(name)))
            assert answers[name].shape[0] == rows
        text = log.read_text(errors="replace")
        processes = peaks(proc.proc.pid)
    finally:
        proc.stop()
    print(f"\n{mode} mode under a {LIMIT / GIB:.0f} GiB address-space limit, peak per process:")
    for peak in processes:
        print(f"  {peak}")
    assert all(p.vm_peak <= LIMIT for p in processes)
    bound = re.search(r"model 'sep512' holds at most .*", text)
    assert bound is not None and "besides its batch" in bound.group(0), text[-3000:]
    print(f"  load log: {bound.group(0)[:600]}")
    print(f"  sep512_8g: {reason}")
    assert "Cannot allocate memory" not in text and "MemoryError" not in text, text[-3000:]
    if mode == "numpy":
        assert "2 row(s) at a time" in bound.group(0)
    SERVED[mode] = answers
    if len(SERVED) == 2:  # both modes answer bit for bit alike
        for name, got in SERVED["csim"].items():
            want = SERVED["numpy"][name]
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), name
        assert len(np.unique(SERVED["csim"]["sep512"])) > 1000
