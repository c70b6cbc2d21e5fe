"""Firmware-sized stacks: a C-simulation whose rows are megabytes is served, and one that would
not fit its stack cap is refused at load, never a signal.

hls4ml's C-simulation keeps every layer output (and a dense layer's products) as local arrays:
the ``wide`` model here (Linear(2, 524288) + ReLU, io_parallel, packed by ``fpgaserve pack``)
needs tens of MB of stack for one row, which overflows a thread's default 8 MB. The batch shim
runs it on a thread whose stack is sized from the project (backends/hls4ml/csim/stack.py); the
server serves it bit-exactly (csim equals numpy), beside the bundled ``facile``, which keeps
answering bit-exactly. With the same library called on an 8 MB stack, the row dies of SIGSEGV
(in a child process): the sizing is what makes it work. Pack chooses the model's
max_batch_size from its 2 MiB rows and the 1 GiB budget, and the server logs the memory the
config lets the model hold.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("hls4ml")

import tritonclient.grpc as grpcclient

from fpgaserve.backends.hls4ml.csim.stack import CAP_ENV, estimate_stack_bytes
from fpgaserve.backends.hls4ml.project import Hls4mlProject
from support.server_process import BUNDLED_REPO, ServerProcess

WIDTH = 1 << 19
WIDE_MODEL = textwrap.dedent(f"""
    import torch

    class Wide(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.relu = torch.nn.Linear(2, {WIDTH}), torch.nn.ReLU()

        def forward(self, x):
            return self.relu(self.fc(x))

    def build():
        torch.manual_seed(3)
        return Wide().eval()
""")
#: FP32 bytes of one row of the packed config: 2 inputs and WIDTH outputs
ROW_BYTES = 4 * (2 + WIDTH)
DEFAULT_THREAD_STACK = 8 << 20


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """``wide`` packed by ``fpgaserve pack`` (its max_batch_size chosen from the budget) beside
    a copy of the bundled ``facile``."""
    root = tmp_path_factory.mktemp("stack")
    (root / "wide.py").write_text(WIDE_MODEL)
    repo = root / "repo"
    cmd = [sys.executable, "-m", "fpgaserve.server.cli", "pack", "wide", "--pytorch", f"{root / 'wide.py'}:build"]
    cmd += ["--input-shape", "2", "--repository", str(repo)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    rows = (1 << 30) // ROW_BYTES
    assert rows == 511
    assert (
        f"max_batch_size {rows}: the most rows that fit the 1 GiB batch memory budget (--batch-memory-budget); a "
        f"full batch is {rows} rows x {ROW_BYTES:,} bytes per row (FP32: 2 input + {WIDTH:,} output elements)"
    ) in done.stderr
    assert f"max_batch_size: {rows}\n" in (repo / "wide" / "config.pbtxt").read_text()
    shutil.copytree(BUNDLED_REPO / "facile", repo / "facile")
    return repo


def _serve(mode: str, repo: Path, log: Path, cache: Path, *args: str, **env: str) -> ServerProcess:
    environ = dict(os.environ, FPGASERVE_CACHE_DIR=str(cache), **env)
    return ServerProcess([repo], "--fpga-mode", mode, *args, log_path=log, env=environ).start(timeout=300)


def _infer(client, model: str, x: np.ndarray) -> np.ndarray:
    meta = client.get_model_metadata(model)
    [inp], [out] = meta.inputs, meta.outputs
    t = grpcclient.InferInput(inp.name, list(x.shape), "FP32")
    t.set_data_from_numpy(x)
    return client.infer(model, [t]).as_numpy(out.name)


def test_megabyte_rows_are_served_bit_exactly_in_csim(repo, tmp_path, csim_cache):
    project = Hls4mlProject.load(repo / "wide" / "1")
    assert estimate_stack_bytes(project) > DEFAULT_THREAD_STACK
    rng = np.random.default_rng(7)
    wide_x = (rng.standard_normal((3, 2)) * 4).astype(np.float32)
    facile_x = (rng.standard_normal((64, 47)) * 3).astype(np.float32)
    outputs = {}
    for mode in ("csim", "numpy"):
        log = tmp_path / f"{mode}.log"
        proc = _serve(mode, repo, log, csim_cache)
        try:
            with grpcclient.InferenceServerClient(proc.url) as client:
                outputs[mode, "wide"] = _infer(client, "wide", wide_x)
                outputs[mode, "facile"] = _infer(client, "facile", facile_x)
        finally:
            assert proc.stop() == 0, proc.log()
        text = log.read_text()
        assert (
            f"model 'wide' holds at most 2.0 GiB in batches in flight: 1 instance(s) x 511 rows x "
            f"{8 + 8 * WIDTH:,} bytes per row (8 input + {4 * WIDTH:,} output + {4 * WIDTH:,} output encoded for "
            "the wire)"
        ) in text
        if mode == "csim":
            assert "its C-simulation runs each batch on a thread with a" in text
    wide = outputs["csim", "wide"]
    assert wide.shape == (3, WIDTH) and len(np.unique(wide)) > 1000
    for model in ("wide", "facile"):
        assert np.array_equal(outputs["csim", model].view(np.uint32), outputs["numpy", model].view(np.uint32)), model


OVERFLOW = textwrap.dedent("""
    import sys
    import numpy as np
    from fpgaserve.backends.hls4ml.csim import CsimLibrary
    from fpgaserve.backends.hls4ml.project import Hls4mlProject

    lib = CsimLibrary.load(Hls4mlProject.load(sys.argv[1]))
    print("loaded", lib.stack_bytes, flush=True)
    lib.stack_bytes = int(sys.argv[2])
    lib.predict(np.ones((1, 2), dtype=np.float32))
    print("ran", flush=True)
""")


def test_the_default_thread_stack_would_overflow(repo, csim_cache, tmp_path):
    """The same library, its rows run on a stack of a Python thread's default 8 MB: SIGSEGV at
    the guard page below it (in a child process), where its own stack runs them."""
    script = tmp_path / "overflow.py"
    script.write_text(OVERFLOW)
    env = dict(os.environ, FPGASERVE_CACHE_DIR=str(csim_cache))
    version = str(repo / "wide" / "1")
    small = subprocess.run(
        [sys.executable, str(script), version, str(DEFAULT_THREAD_STACK)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert small.returncode == -signal.SIGSEGV, small.stderr
    assert small.stdout.startswith("loaded") and "ran" not in small.stdout
    sized = int(small.stdout.split()[1])
    assert sized > DEFAULT_THREAD_STACK
    own = subprocess.run(
        [sys.executable, str(script), version, str(sized)], capture_output=True, text=True, timeout=600, env=env
    )
    assert own.returncode == 0 and own.stdout.splitlines()[-1] == "ran", own.stderr


def test_firmware_above_the_stack_cap_fails_its_load_by_name(repo, tmp_path, csim_cache):
    """With the cap lowered below the wide model's estimate, that model is UNAVAILABLE with a
    message naming it and the size; the server and facile go on serving."""
    needed = -(-estimate_stack_bytes(Hls4mlProject.load(repo / "wide" / "1")) // (1 << 20))
    cap_mb = 16
    assert needed > cap_mb
    # not strictly ready: a model that failed to load keeps /v2/health/ready from answering 200
    proc = _serve(
        "csim", repo, tmp_path / "capped.log", csim_cache, "--strict-readiness=false", **{CAP_ENV: str(cap_mb)}
    )
    try:
        with grpcclient.InferenceServerClient(proc.url) as client:
            deadline = time.monotonic() + 120
            while True:  # the startup loads are over once both models have a final state
                index = {m.name: m for m in client.get_model_repository_index().models}
                if len(index) == 2 and {m.state for m in index.values()} <= {"READY", "UNAVAILABLE"}:
                    break
                assert time.monotonic() < deadline, index
                time.sleep(0.2)
            assert index["wide"].state == "UNAVAILABLE", index
            assert index["facile"].state == "READY", index
            assert f"model 'wide' (hls4ml project {repo / 'wide' / '1'}): its C-simulation needs an estimated " in (
                index["wide"].reason
            )
            assert (
                f"{needed} MiB of stack for one row (its layer outputs and temporaries are local arrays), more than "
                f"the {cap_mb} MiB cap ({CAP_ENV}); serve it with --fpga-mode numpy"
            ) in index["wide"].reason
            x = np.zeros((4, 47), dtype=np.float32)
            assert _infer(client, "facile", x).shape == (4, 1)
    finally:
        assert proc.stop() == 0, proc.log()


def test_a_whole_row_stream_word_counts_by_its_elements():
    """An io_stream project's flattened output is one nnet::array word of the whole row
    (4,194,304 elements for a 512x512x16 output): the widest element is its ap_fixed, not
    the word (which made the estimate 208 TiB), and the word's bytes still count in full."""
    from fpgaserve.backends.hls4ml.csim.stack import _Sizes

    sizes = _Sizes(
        {
            "result_t": "nnet::array<ap_fixed<16,6>, 4194304*1>",
            "conv2d_result_t": "nnet::array<ap_fixed<56,26>, 16*1>",
            "accum_t": "ap_fixed<37,17>",
        },
        {},
    )
    assert [sizes.element_bytes(t) for t in ("result_t", "conv2d_result_t", "accum_t")] == [2, 8, 8]
    assert sizes.bytes_of("result_t") == 2 * 4194304
