"""What bounds the memory of an hls4ml model's batches, piece by piece, without a server.

* The numpy emulation works through a batch in pieces whose intermediates fit its budget
  (measured on one row): the answers do not depend on the pieces, bit for bit.
* The C-simulation fills a float32 output from float64 pieces: the same bits as converting
  the whole float64 result.
* An instance process's shared segments hold one batch of the config's tensors.
* Under an address-space limit (a child process with RLIMIT_AS) a reservation that does not
  fit is refused naming the model and the bytes, freed memory is not kept mapped, and a load
  that does not fit fails alone (``test_memory_limits.py`` serves a dozen models that way).
* The IPC channel gives back the receive buffer a large frame grew.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from fpgaserve.backends.hls4ml.csim import CsimLibrary
from fpgaserve.backends.hls4ml.emulator import FixedPointModel
from fpgaserve.backends.hls4ml.emulator.working_set import FLOOR_BYTES, backend_budget
from fpgaserve.backends.hls4ml.memory import batch_memory_error
from fpgaserve.backends.hls4ml.project import Hls4mlProject
from fpgaserve.backends.hosting import ProcessBackend
from fpgaserve.backends.hosting.instance_channel import SEGMENT_BYTES, SEGMENT_MIN_BYTES, segment_bytes
from fpgaserve.server.ipc.protocol import FrameDecoder

ROOT = Path(__file__).resolve().parents[2]
CALO = ROOT / "bitstreams" / "calo_cnn" / "1"
FACILE = ROOT / "bitstreams" / "facile" / "1"


def test_emulation_pieces_fit_the_budget_and_give_the_same_bits():
    emu = FixedPointModel(Hls4mlProject.load(str(CALO)))
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((300, emu.n_in)) * np.where(rng.random((300, 1)) < 0.3, 8.0, 1.0)).astype(np.float32)
    whole = emu.predict(x)
    ws = emu.working_set()
    assert ws.rows * (ws.row_bytes + ws.scratch_row_bytes) <= ws.budget
    assert ws.row_bytes > 8 * emu.n_in  # at least the row's float64 input and its layer outputs
    per_row = ws.row_bytes + ws.scratch_row_bytes
    emu.working_budget = 7 * per_row  # pieces of 7 rows: 43 of them
    assert emu.working_set().rows == 7 and emu.piece_rows(300) == 7
    assert np.array_equal(emu.predict(x).view(np.uint64), whole.view(np.uint64))
    emu.working_budget = 1  # one row at a time, however small the budget
    assert emu.working_set().rows == 1
    assert np.array_equal(emu.predict(x[:5], np.float32), whole[:5].astype(np.float32))
    assert "1 row(s) at a time" in emu.working_set().describe(1)


def test_backend_budget_is_the_batch_at_least_the_floor():
    assert backend_budget(53, 19_922_944) == 53 * 19_922_944
    assert backend_budget(16000, 68) == FLOOR_BYTES
    assert backend_budget(0, 1 << 30) == 1 << 30  # no batching: one request


def test_csim_pieces_fill_a_float32_output_with_the_same_bits(csim_cache):
    lib = CsimLibrary.load(Hls4mlProject.load(str(FACILE)), cache_dir=csim_cache)
    x = (np.random.default_rng(3).standard_normal((37, lib.n_in)) * 6).astype(np.float32)
    whole = lib.predict(x)
    assert whole.dtype == np.float64
    pieces = lib.predict(x, np.float32, piece_rows=5)
    assert pieces.dtype == np.float32
    assert np.array_equal(pieces.view(np.uint32), whole.astype(np.float32).view(np.uint32))
    assert np.array_equal(lib.predict(x, piece_rows=4), whole)
    assert lib.predict(np.zeros((0, lib.n_in), np.float32), np.float32, piece_rows=2).shape == (0, lib.n_out)


def test_segments_hold_one_batch_of_the_configs_tensors():
    config = {
        "max_batch_size": 53,
        "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [512, 512, 3]}],
        "output": [{"name": "y", "data_type": "TYPE_FP32", "dims": [4194304]}],
    }
    parent, child = ProcessBackend.segment_sizes(config)
    assert parent == 53 * 3 * 512 * 512 * 4 + 4096  # the rows, aligned, rounded to a page
    assert child == 53 * 4194304 * 4 + 4096
    small = dict(config, max_batch_size=4, input=[{"name": "x", "data_type": "TYPE_FP32", "dims": [16]}])
    assert ProcessBackend.segment_sizes(small)[0] == SEGMENT_MIN_BYTES
    open_dims = dict(small, input=[{"name": "x", "data_type": "TYPE_FP32", "dims": [-1]}])
    assert ProcessBackend.segment_sizes(open_dims)[0] == SEGMENT_BYTES
    strings = dict(small, output=[{"name": "y", "data_type": "TYPE_STRING", "dims": [1]}])
    assert ProcessBackend.segment_sizes(strings)[1] == SEGMENT_BYTES
    decoupled = dict(small, model_transaction_policy={"decoupled": True})
    assert ProcessBackend.segment_sizes(decoupled) == (SEGMENT_BYTES, SEGMENT_BYTES)
    assert segment_bytes([1 << 40], 1) == SEGMENT_BYTES  # at most the default: larger goes inline


def test_a_failed_allocation_names_the_model_the_batch_and_the_bytes():
    try:
        np.empty((1 << 55,), np.float64)  # 256 PiB
    except MemoryError as e:
        error = batch_memory_error("sep512", "numpy", 53, e)
    text = str(error)
    assert text.startswith("model 'sep512' (numpy mode, a batch of 53 rows) could not allocate an array of shape")
    assert "(36028797018963968,) (float64) (268435456.0 GiB)" in text, text
    assert "; its process has " in text and "address-space limit" in text, text


#: a child process under a 6 GiB address-space limit (RLIMIT_AS), as `prlimit --as` starts one
_LIMITED = "import mmap, resource\nresource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))\n"


def _limited(body: str) -> subprocess.CompletedProcess:
    code = _LIMITED + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_under_an_address_space_limit_freed_memory_is_not_kept_mapped():
    """20 freed 200 MiB blocks below a live one: with the thresholds kept without a limit
    they stay mapped and a 2 GiB mapping fails; under the limit it succeeds (np.empty: no page
    is touched, address space only)."""
    done = _limited(
        """
        from fpgaserve.backends.hosting import start_process
        start_process()
        import numpy as np
        blocks = [np.empty(200 << 17) for _ in range(20)]
        live = np.empty(1 << 17)
        del blocks
        m = mmap.mmap(-1, 2 << 30)
        print("mapped")
        """
    )
    assert done.returncode == 0 and "mapped" in done.stdout, done.stderr


def test_under_an_address_space_limit_a_reservation_that_does_not_fit_is_refused():
    done = _limited(
        """
        from fpgaserve.backends.base import BackendError
        from fpgaserve.backends.hosting import reserve_address_space
        first = reserve_address_space("model 'a'", "its batches", 3 << 30)
        try:
            reserve_address_space("model 'b'", "instance 0's batches", 3 << 30, "lower its max_batch_size")
        except BackendError as e:
            print(e)
        first.release()
        reserve_address_space("model 'b'", "instance 0's batches", 3 << 30)
        print("then it fits")
        """
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("model 'b' needs 3.0 GiB of address space for instance 0's batches, more than the ")
    assert "under its 6.0 GiB address-space limit (RLIMIT_AS: " in lines[0] and "3.0 GiB set aside" in lines[0]
    assert lines[0].endswith("; lower its max_batch_size")
    assert lines[1] == "then it fits"


def test_a_large_frame_does_not_keep_its_receive_buffer():
    decoder = FrameDecoder()
    body = pickle.dumps(("result", b"x" * (80 << 20)), protocol=pickle.HIGHEST_PROTOCOL)
    frame = len(body).to_bytes(4, "little") + body
    [message] = decoder.feed(frame)
    assert message[1] == b"x" * (80 << 20)
    room = decoder.get_buffer(-1)
    assert room.nbytes <= 1 << 20  # the 80 MB buffer went with the frame
    small = pickle.dumps(("ok",))
    assert decoder.feed(len(small).to_bytes(4, "little") + small) == [("ok",)]
