"""Models the hls4ml tests pack and serve (tests/hls4ml/): a server per ``--fpga-mode``, the
source files ``fpgaserve pack`` converts (a PyTorch tagger, a Keras 3 CNN, a QONNX MLP), and
packs several tests serve, made once per run (``sep512_repository``)."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from support.hls4ml_layers import keras_on_torch
from support.server_process import ServerProcess
from support.workers import worker


def serve_mode(mode, repos, tmp_path_factory, cache_dir, *extra):
    log = tmp_path_factory.mktemp(f"srv-{mode}") / "fpgaserve.log"
    env = dict(os.environ, FPGASERVE_CACHE_DIR=str(cache_dir))
    return ServerProcess(repos, "--fpga-mode", mode, *extra, log_path=log, env=env).start(timeout=240)


# ---------------------------------------------------------------------- fpgaserve pack
PACK_MODEL = textwrap.dedent("""
    import numpy as np
    import torch

    class Tagger(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(10, 24)
            self.bn1 = torch.nn.BatchNorm1d(24)
            self.act1 = torch.nn.ReLU()
            self.fc2 = torch.nn.Linear(24, 3)

        def forward(self, x):
            return self.fc2(self.act1(self.bn1(self.fc1(x))))

    def build():
        torch.manual_seed(5)
        m = Tagger()
        with torch.no_grad():
            m.bn1.running_mean.uniform_(-0.5, 0.5)
            m.bn1.running_var.uniform_(0.5, 2.0)
        return m.eval()
""")


# ---------------------------------------------------------------------- pack from Keras 3 and QONNX
def keras_cnn_file(path: Path) -> None:
    """A small Keras 3 CNN (channels-last image, conv, pooling, dense), saved as .keras."""
    import os

    os.environ.setdefault("KERAS_BACKEND", "torch")
    keras = pytest.importorskip("keras", reason="the keras extra is not installed")
    layers = keras.layers
    keras.utils.set_random_seed(11)
    i = keras.Input((8, 8, 1))
    x = layers.MaxPooling2D(2)(layers.Conv2D(4, 3, activation="relu")(i))
    x = layers.Dense(6, activation="relu")(layers.Flatten()(x))
    keras.Model(i, layers.Dense(3)(x)).save(path)


def qonnx_mlp_file(path: Path) -> None:
    """A QONNX MLP: Quant nodes (qonnx.custom_op.general) on the input, weights and activations."""
    pytest.importorskip("qonnx", reason="the qonnx extra is not installed")
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    arrays = {
        "W1": rng.normal(0, 0.4, (10, 12)),
        "b1": rng.normal(0, 0.1, 12),
        "W2": rng.normal(0, 0.4, (12, 3)),
        "b2": rng.normal(0, 0.1, 3),
        "s_in": 2.0**-4,
        "s_w": 2.0**-5,
        "s_act": 2.0**-3,
        "zero": 0.0,
        "bits8": 8.0,
        "bits6": 6.0,
    }
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in arrays.items()]
    quant = {"domain": "qonnx.custom_op.general", "narrow": 0, "rounding_mode": "ROUND"}
    nodes = [
        helper.make_node("Quant", ["input", "s_in", "zero", "bits8"], ["xq"], name="q_in", signed=1, **quant),
        helper.make_node("Quant", ["W1", "s_w", "zero", "bits6"], ["W1q"], name="q_w1", signed=1, **quant),
        helper.make_node("MatMul", ["xq", "W1q"], ["h"], name="fc1"),
        helper.make_node("Add", ["h", "b1"], ["hb"], name="fc1_bias"),
        helper.make_node("Relu", ["hb"], ["r"], name="relu1"),
        helper.make_node("Quant", ["r", "s_act", "zero", "bits8"], ["rq"], name="q_act", signed=0, **quant),
        helper.make_node("Quant", ["W2", "s_w", "zero", "bits6"], ["W2q"], name="q_w2", signed=1, **quant),
        helper.make_node("MatMul", ["rq", "W2q"], ["o"], name="fc2"),
        helper.make_node("Add", ["o", "b2"], ["output"], name="fc2_bias"),
    ]
    graph = helper.make_graph(
        nodes,
        "qmlp",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 10])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 3])],
        initializer=inits,
    )
    opsets = [helper.make_opsetid("", 13), helper.make_opsetid("qonnx.custom_op.general", 1)]
    onnx.save(helper.make_model(graph, opset_imports=opsets), path)


# ---------------------------------------------------------------------- packs made once per run
def run_root(tmp_path_factory) -> Path:
    """The temporary folder this run's processes share (as the csim cache, tests/conftest.py):
    the base folder, or in parallel workers the run's, above theirs (never the one above a
    plain run's, which holds earlier runs too)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if worker()[1] > 1 else base


def _sep512_keras(path: Path) -> None:
    keras = keras_on_torch()
    layers = keras.layers
    keras.utils.set_random_seed(5)
    i = keras.Input((512, 512, 3))
    x = layers.DepthwiseConv2D(3, padding="same", bias_initializer="random_normal")(i)
    x = layers.Conv2D(16, 1, activation="relu", bias_initializer="random_normal")(x)
    keras.Model(i, layers.Flatten()(x)).save(path)


def sep512_repository(tmp_path_factory) -> Path:
    """A model repository holding ``sep512``: the 512x512x3 separable io_stream network (a
    depthwise 3x3 convolution, then a pointwise one to 16 channels: a 4,194,304-element
    output), packed from Keras 3 by ``fpgaserve pack`` (its batch bounded to 53 rows by pack's
    1 GiB budget; no float reference: no test of it serves ``onnx``). test_hls4ml_io_stream
    serves it in auto mode, test_memory_limits under an address-space limit beside other
    models: one conversion (~12 s of CPU) and one project, so one C-simulation build in the
    run's csim cache (~8 s), instead of two of each.

    The pack lives in the run's temporary root under a file lock: the first test to ask packs
    it, every later one, in this worker or another of the same run, reads it. Tests only read
    it; one that changes a model copies it first."""
    keras_on_torch()  # skipped (saying why) before the lock where Keras is not there
    root = run_root(tmp_path_factory)
    work = root / "shared-sep512"
    repo = work / "repo"
    with open(root / "shared-sep512.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not (repo / "sep512" / "config.pbtxt").is_file():
            shutil.rmtree(work, ignore_errors=True)  # what a caller that failed half-way left
            work.mkdir()
            _sep512_keras(work / "sep512.keras")
            staging = work / "staging"
            cmd = [
                sys.executable,
                "-m",
                "fpgaserve.server.cli",
                "pack",
                "sep512",
                "--keras",
                str(work / "sep512.keras"),
            ]
            cmd += ["--io-type", "io_stream", "--repository", str(staging), "--reference-timeout", "0"]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr
            staging.rename(repo)  # whole or not at all
    return repo
