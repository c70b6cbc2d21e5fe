"""fpgaserve's card path in-process, on the simulated cards through XRT's C API.

The runner (``backends/hls4ml/card/runner.py``), the cards and their recovery (``cards.py``)
and the default API (``runtime/xrt_c.py``) run unmodified over the C double of
``libxrt_coreutil.so.2`` (``tests/fpga_sim/xrt_c``, compiled with ``cc``, found through
``XILINX_XRT``); ``import pyxrt`` finds the test-only module of ``tests/fpga_sim/xrt_python``,
which gives the card's identity and sensors as on an XRT host. ``FPGASERVE_TEST_CARD_API``
chooses another API for the same tests: ``xrt`` (``runtime/xrt.py`` over that ``pyxrt``;
``tests/cards/test_card_pyxrt.py`` runs them so) or ``pynq``, the legacy PYNQ 3.0.1 API
(``runtime/pynq.py``) over the simulator's PYNQ device plug-in (``tests/cards/test_card_pynq.py``
runs them so, in the card venv). The simulated
card behaves as XRT 2.17 does on an Alveo card
(``tests/fpga_sim/card.py``: ERT completion, same-UUID loads skipped, hung compute units stay
hung until ``xbutil reset``, which refuses while the card is open). Every result is compared
bit for bit with hls4ml's C-simulation of the project (what ``--fpga-mode csim`` serves); the
simulated kernels compute with the same C-simulation from the bytes in card memory, at each
ABI's boundary, so any difference is a fault of the host side (encoding, layout, lengths,
syncs, batch splitting).
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from fpgaserve.backends import BackendError, DeviceUnavailableError

ROOT = Path(__file__).resolve().parents[2]
SIM = ROOT / "tests" / "fpga_sim"
JET_TAGGER = ROOT / "bitstreams" / "jet_tagger" / "1"  # VivadoAccelerator, 16 -> 5, float I/O
SIM_ENV = (
    "FPGASERVE_SIM_CARDS",
    "FPGASERVE_SIM_CONTROL_DIR",
    "FPGASERVE_SIM_KERNEL_DELAY_MS",
    "FPGASERVE_SIM_PLATFORM",
    "PATH",
    "XILINX_XRT",
)

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the simulated kernels run the C-simulation (g++)")
#: the card API under test: xrt-c (XRT's C API, the default), xrt (pyxrt) or pynq (legacy; needs pynq 3.0.1)
API = os.environ.get("FPGASERVE_TEST_CARD_API", "xrt-c")
#: tests that also use pyxrt directly (it is importable with either XRT API)
xrt_only = pytest.mark.skipif(API == "pynq", reason="drives pyxrt directly")


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    """Two simulated cards behind the simulated pyxrt; xbutil's stand-in on PATH."""
    from fpga_sim import card_core

    why = card_core.unavailable()
    if why:
        pytest.skip(why)
    saved = {k: os.environ.get(k) for k in SIM_ENV}
    control = tmp_path_factory.mktemp("sim-control")
    os.environ["FPGASERVE_SIM_CARDS"] = "2"
    os.environ["FPGASERVE_SIM_CONTROL_DIR"] = str(control)
    os.environ.pop("FPGASERVE_SIM_KERNEL_DELAY_MS", None)
    os.environ.pop("FPGASERVE_SIM_PLATFORM", None)
    os.environ["PATH"] = f"{SIM / 'bin'}{os.pathsep}{saved['PATH']}"
    if API == "xrt-c":
        from fpga_sim.xrt_c import BuildUnavailable, build_xrt_root

        try:
            os.environ["XILINX_XRT"] = str(build_xrt_root(tmp_path_factory.mktemp("xrt")))
        except BuildUnavailable as e:
            pytest.skip(f"the C double of libxrt_coreutil cannot be built: {e}")
    sys.path.insert(0, str(SIM / "xrt_python"))
    if API in ("xrt", "xrt-c"):
        import pyxrt

        assert getattr(pyxrt, "SIMULATED", False)
    else:
        import fpga_sim.pynq_device  # noqa: F401  (registers the simulated cards with PYNQ)
    from fpga_sim import card as simcard

    yield type("Sim", (), {"control": control, "card": simcard})
    _fresh(simcard)
    sys.path.remove(str(SIM / "xrt_python"))
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _fresh(simcard) -> None:
    from fpgaserve.backends.hls4ml.card.cards import CardPool
    from fpgaserve.backends.hls4ml.card.runtime import reset_api

    # a recovery a test started (a reset, then a reload of its xclbin) must not land in the next test
    for t in threading.enumerate():
        if t.name.startswith("fpgaserve-card") and t.name.endswith("-recovery"):
            t.join(timeout=60)
    CardPool.reset_instance()
    reset_api()
    if API == "pynq":
        from fpga_sim.pynq_device import reset_pynq_devices

        reset_pynq_devices()
    simcard.forget_cards()
    for i in range(2):
        try:
            simcard.reset_card(i)
        except Exception:
            pass


@pytest.fixture
def pool(sim):
    """A fresh API and pool over freshly reset simulated cards."""
    from fpgaserve.backends.hls4ml.card.cards import CardPool
    from fpgaserve.backends.hls4ml.card.runtime import open_api

    _fresh(sim.card)
    for f in sim.control.glob("hang-*"):
        f.unlink()
    yield CardPool(open_api(API))
    _fresh(sim.card)


@pytest.fixture(scope="module")
def versions(tmp_path_factory):
    """Model version folders for every ABI, each with an xclbin from the simulator's writer."""
    from fpga_sim.projects import faast_project, kernel_wrapper_project
    from fpga_sim.xclbin import write_xclbin

    root = tmp_path_factory.mktemp("versions")

    def krnl_rtl(name, precision=None, cus=2):
        folder = root / name
        shutil.copytree(JET_TAGGER, folder)
        if precision is not None:
            _fixed_io(folder, precision)
        write_xclbin(folder / "model.xclbin", kernel_abi="krnl_rtl", cus=cus, cu_banks=["DDR[0]", "DDR[1]"][:cus])
        return folder

    def kernel_wrapper(name, **kw):
        folder = kernel_wrapper_project(
            JET_TAGGER, root / name, num_kernel=2, **{k: v for k, v in kw.items() if k != "legacy"}
        )
        write_xclbin(
            folder / "model.xclbin", kernel_abi="kernel_wrapper", cus=2, project=folder, legacy=kw.get("legacy", False)
        )
        return folder

    faast = faast_project(root / "faast")
    write_xclbin(faast / "model.xclbin", kernel_abi="faast", cus=4, project=faast)
    folders = {
        "krnl_rtl": krnl_rtl("krnl_rtl"),
        "krnl_rtl_fixed": krnl_rtl("krnl_rtl_fixed", "ap_fixed<12,4>"),
        "krnl_rtl_one_cu": krnl_rtl("krnl_rtl_one_cu", cus=1),
        "kernel_wrapper": kernel_wrapper("kernel_wrapper"),
        "kernel_wrapper_hw_quant": kernel_wrapper("kernel_wrapper_hw_quant", hw_quant=True),
        "kernel_wrapper_legacy": kernel_wrapper("kernel_wrapper_legacy", legacy=True, batchsize=100),
        "faast": faast,
    }
    for name, folder in folders.items():
        _record(folder, next(abi for abi in ("krnl_rtl", "kernel_wrapper", "faast") if name.startswith(abi)))
    return folders


def _record(folder: Path, abi: str) -> None:
    """card.json as `fpgaserve pack --xclbin` writes it (a copied bundled one describes the
    unmodified project and the krnl_rtl ABI)."""
    from fpgaserve.backends.hls4ml.card.axlf import read_xclbin
    from fpgaserve.backends.hls4ml.card.manifest import CardManifest
    from fpgaserve.backends.hls4ml.project import Hls4mlProject

    CardManifest.for_project(Hls4mlProject.load(folder), abi, read_xclbin(folder / "model.xclbin")).write(folder)


def _fixed_io(folder: Path, precision: str) -> None:
    """I/O precision changed the way hls4ml 1.3.0 writes it (its invalid fixed<...> spelling)."""
    import re

    cfg = folder / "hls4ml_config.yml"
    text = cfg.read_text().replace(
        "    Input: float\n    Output: float", f"    Input: {precision}\n    Output: {precision}"
    )
    cfg.write_text(text)
    w, i = (int(v) for v in re.match(r"ap_fixed<(\d+),(\d+)>", precision).groups())
    w8 = -(-w // 8) * 8
    axi = folder / "firmware" / "myproject_axi.h"
    text = axi.read_text().replace("typedef float T_in;", f"typedef fixed<{w8},{i},TRN,WRAP,0> T_in;")
    axi.write_text(text.replace("typedef float T_out;", f"typedef fixed<{w8},{i},TRN,WRAP,0> T_out;"))


def _binding(folder: Path):
    from fpgaserve.backends.hls4ml.card.manifest import resolve
    from fpgaserve.backends.hls4ml.project import Hls4mlProject

    return resolve(Hls4mlProject.load(folder), folder, folder / "model.xclbin")


def _runners(pool, folder: Path, count: int, max_batch: int = 300, timeout: float = 5.0, cards=(0,)):
    """``count`` runners of one model spread over the compute units of ``cards``, as the backend places them."""
    from fpgaserve.backends.hls4ml.card.runner import CardRunner, Placement

    binding = _binding(folder)
    placements = [Placement(pool.card(c), name) for name in _cu_names(binding) for c in cards]
    runners = []
    for i in range(count):
        home = placements[i % len(placements)]
        home.card.load(binding.xclbin)
        runners.append(CardRunner(binding, placements, i, max_batch, timeout, f"test/{i}"))
    return runners


def _cu_names(binding) -> list[str]:
    return [cu.name for cu in binding.xclbin.compute_units_of(binding.kernel.name)]


def _reference(folder: Path, x: np.ndarray) -> np.ndarray:
    from fpgaserve.backends.hls4ml.csim import CsimLibrary
    from fpgaserve.backends.hls4ml.project import Hls4mlProject

    return CsimLibrary.load(Hls4mlProject.load(folder)).predict(x)


def _inputs(rows: int, n_in: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 4, (rows, n_in)).astype(np.float32)
    x[: min(rows, 3)] = 0
    if rows > 10:
        x[5:10] *= 50  # beyond every input type's range: wraps and saturations
        x[3] = np.float32(2.0**-10)  # one grid step
    return x


def _stats(sim, card: int) -> dict:
    return sim.card.get_card(card).stats


def _close(runners) -> None:
    for r in runners:
        r.close()


# ------------------------------------------------------------------------------ bit-exactness
@pytest.mark.parametrize(
    "version,rows",
    [
        ("krnl_rtl", 257),
        ("krnl_rtl_fixed", 257),
        ("kernel_wrapper", 257),
        ("kernel_wrapper_hw_quant", 257),
        ("kernel_wrapper_legacy", 257),  # fixed 100 rows per call: 3 calls, the last padded
        ("faast", 20000),  # fixed 16,384 rows per call: 2 calls
        ("krnl_rtl", 1),
    ],
)
def test_every_abi_matches_the_c_simulation(sim, pool, versions, version, rows):
    folder = versions[version]
    (runner,) = _runners(pool, folder, 1, max_batch=rows if version != "kernel_wrapper_legacy" else 300)
    try:
        x = _inputs(rows, runner.n_in, seed=rows)
        got = runner.predict(x)
        want = _reference(folder, x)
        assert got.dtype == np.float64 and got.shape == want.shape
        bad = np.flatnonzero(np.any(got.view(np.uint64) != want.view(np.uint64), axis=1))
        assert bad.size == 0, f"{bad.size} rows differ, first {bad[0]}: {got[bad[0]]} vs {want[bad[0]]}"
    finally:
        runner.close()


def test_a_batch_beyond_the_buffers_runs_as_several_calls(sim, pool, versions):
    folder = versions["krnl_rtl"]
    (runner,) = _runners(pool, folder, 1, max_batch=64)
    try:
        before = _stats(sim, 0)["kernel_starts"]
        x = _inputs(150, 16, seed=3)
        assert np.array_equal(runner.predict(x), _reference(folder, x))
        assert _stats(sim, 0)["kernel_starts"] - before == 3  # 64 + 64 + 22 rows
    finally:
        runner.close()


def test_only_the_bytes_of_a_batch_cross_pcie(sim, pool, versions):
    """Buffers hold max_batch_size rows; a call of 10 rows moves 10 rows each way, not the buffer."""
    folder = versions["krnl_rtl"]
    (runner,) = _runners(pool, folder, 1, max_batch=4096)
    try:
        s0 = _stats(sim, 0)
        runner.predict(_inputs(10, 16))
        s1 = _stats(sim, 0)
        assert s1["bytes_to_device"] - s0["bytes_to_device"] == 10 * 16 * 4
        assert s1["bytes_from_device"] - s0["bytes_from_device"] == 10 * 5 * 4
    finally:
        runner.close()


def test_faast_moves_beats_of_real_rows_only(sim, pool, versions):
    folder = versions["faast"]
    (runner,) = _runners(pool, folder, 1, max_batch=16384)
    try:
        s0 = _stats(sim, 0)
        runner.predict(_inputs(100, 16))
        s1 = _stats(sim, 0)
        assert s1["bytes_to_device"] - s0["bytes_to_device"] == 100 * 64  # one 512-bit beat per row
        assert s1["bytes_from_device"] - s0["bytes_from_device"] == 4 * 64  # 32 rows per beat
        assert s1["cus"]["alveo_hls4ml_0"]["rows"] - s0["cus"]["alveo_hls4ml_0"]["rows"] == 16384
    finally:
        runner.close()


# ------------------------------------------------------------------------------ request memory in place
@pytest.fixture
def pool_xrt_2_20(sim):
    """A pool over XRT 2.20's simulated binding (``pyxrt.ext.bo``: buffers over user memory)
    in place of 2.17's, for one test; 2.17's module is back afterwards."""
    from fpgaserve.backends.hls4ml.card.cards import CardPool
    from fpgaserve.backends.hls4ml.card.runtime import open_api

    if API == "pynq":
        pytest.skip("drives pyxrt directly")
    saved = sys.modules.pop("pyxrt")
    os.environ["FPGASERVE_SIM_XRT_VERSION"] = "2.20.197"
    try:
        import pyxrt
    finally:
        del os.environ["FPGASERVE_SIM_XRT_VERSION"]
    assert pyxrt.SIMULATED and hasattr(pyxrt, "ext")
    _fresh(sim.card)
    try:
        yield CardPool(open_api("xrt"))
    finally:
        _fresh(sim.card)
        sys.modules["pyxrt"] = saved


def _in_arena(x: np.ndarray, offset_rows: int = 0):
    """``x`` as the engine hands it to a backend: a read-only view of a frontend's arena block
    (a block of 64 KiB or more starts on a page), through the engine's own mapping; with
    ``offset_rows``, a view that starts that many rows into the block. Returns (view, closer)."""
    from fpgaserve.server.ipc.arena import Arena, ArenaReader

    arena = Arena(8 << 20)
    nbytes = x.nbytes + offset_rows * x.shape[1] * 4
    offset = arena.allocate(max(nbytes, 64 * 1024))
    arena.write(offset + offset_rows * x.shape[1] * 4, np.ascontiguousarray(x, np.float32))
    reader = ArenaReader(os.getpid(), arena.fd, arena.size)
    view = reader.array(np.dtype(np.float32), offset + offset_rows * x.shape[1] * 4, x.nbytes, x.shape)

    def close():
        reader.close()
        arena.close()

    return view, close


def _user_bytes(sim, card: int = 0) -> int:
    return _stats(sim, card)["bytes_to_device_userptr"]


def test_a_float32_batch_is_synced_from_the_request_memory(sim, pool_xrt_2_20, versions):
    """kernel_wrapper with HW_Quant reads float32 rows: on XRT 2.20 a page-aligned request
    tensor is the card's input buffer itself (xrt::ext::bo over the arena), bit for bit what
    the encoding path and the C-simulation give; the CU in memory group 1 copies as before."""
    folder = versions["kernel_wrapper_hw_quant"]
    runners = _runners(pool_xrt_2_20, folder, 2, max_batch=4096)
    x = _inputs(2000, 16, seed=11)  # 125 KiB: a page-aligned arena block
    view, close = _in_arena(x)
    try:
        assert view.ctypes.data % 4096 == 0 and not view.flags.writeable
        want = _reference(folder, x)
        first, second = runners
        assert first.home.cu == "kernel_wrapper_1" and second.home.cu == "kernel_wrapper_2"
        card = pool_xrt_2_20.card(0)
        u0, d0 = _user_bytes(sim), card.snapshot().dma_to_device_direct
        got = first.predict(view)
        assert np.array_equal(got, want)
        assert _user_bytes(sim) - u0 == x.nbytes  # from the request's pages, no buffer of ours
        assert card.snapshot().dma_to_device_direct - d0 == x.nbytes
        assert _stats(sim, 0)["buffers"] == 4  # the wrapped buffer was freed with its call
        # the same rows through the encoding path (a copy of the view is not page-aligned)
        copied = np.array(view)[1:]
        assert np.array_equal(first.predict(copied), want[1:])
        assert _user_bytes(sim) - u0 == x.nbytes
        # kernel_wrapper_2.in is in DDR[1] (group 1): XRT would copy a group-0 buffer per call
        assert "group 1" in (
            card.device.user_memory(
                card.compute_unit("kernel_wrapper", "kernel_wrapper_2").handle, second.abi.input_arg
            )
            or ""
        )
        assert np.array_equal(second.predict(view), want)
        assert _user_bytes(sim) - u0 == x.nbytes
    finally:
        _close(runners)
        close()


def test_what_is_not_the_cards_format_or_not_on_a_page_is_encoded(sim, pool_xrt_2_20, versions, caplog):
    """An unaligned view, a fixed-point ABI, a legacy fixed-size kernel and pages the driver
    refuses (read-only) take the encoding pass, with the same results."""
    import mmap

    x = _inputs(2000, 16, seed=12)
    for version in ("kernel_wrapper_hw_quant", "kernel_wrapper", "kernel_wrapper_legacy"):
        folder = versions[version]
        (runner,) = _runners(pool_xrt_2_20, folder, 1, max_batch=4096 if version != "kernel_wrapper_legacy" else 100)
        offsets = (1,) if version == "kernel_wrapper_hw_quant" else (0, 1)
        try:
            for offset_rows in offsets:
                view, close = _in_arena(x, offset_rows)
                try:
                    u0 = _user_bytes(sim)
                    assert np.array_equal(runner.predict(view), _reference(folder, x)), (version, offset_rows)
                    assert _user_bytes(sim) == u0, (version, offset_rows)
                finally:
                    close()
        finally:
            runner.close()
    # read-only pages: xocl pins for writing and refuses them (ENOMEM); the runner copies instead
    folder = versions["kernel_wrapper_hw_quant"]
    (runner,) = _runners(pool_xrt_2_20, folder, 1, max_batch=4096)
    fd = os.memfd_create("ro")
    try:
        os.write(fd, np.ascontiguousarray(x, np.float32).tobytes())
        ro = mmap.mmap(fd, x.nbytes, prot=mmap.PROT_READ)
        view = np.frombuffer(ro, np.float32).reshape(x.shape)
        u0 = _user_bytes(sim)
        with caplog.at_level(logging.WARNING, logger="fpgaserve.hls4ml.card.runner"):
            assert np.array_equal(runner.predict(view), _reference(folder, x))
        assert _user_bytes(sim) == u0
        assert "not usable in place" in caplog.text and "Cannot allocate memory" in caplog.text
        del view
    finally:
        runner.close()
        os.close(fd)


@pytest.mark.skipif(API != "xrt", reason="pyxrt 2.17's binding, not the C API's xrtBOAllocUserPtr")
def test_xrt_2_17_has_no_buffers_over_user_memory(sim, pool, versions):
    folder = versions["kernel_wrapper_hw_quant"]
    (runner,) = _runners(pool, folder, 1, max_batch=4096)
    x = _inputs(2000, 16, seed=13)
    view, close = _in_arena(x)
    try:
        card = pool.card(0)
        cu = card.compute_unit("kernel_wrapper", "kernel_wrapper_1")
        assert "before XRT 2.20" in card.device.user_memory(cu.handle, runner.abi.input_arg)
        u0 = _user_bytes(sim)
        assert np.array_equal(runner.predict(view), _reference(folder, x))
        assert _user_bytes(sim) == u0 and card.snapshot().dma_to_device_direct == 0
    finally:
        runner.close()
        close()


@pytest.mark.skipif(API != "xrt-c", reason="XRT's C API: xrtBOAllocUserPtr")
def test_the_c_api_syncs_request_memory_in_place_in_any_bank(sim, pool, versions):
    """xrtBOAllocUserPtr takes a memory group, so unlike pyxrt.ext.bo (group 0 only) a CU whose
    input is in DDR[1] also reads a page-aligned request tensor where it lies; bit for bit what
    the C-simulation gives, and the wrapped buffer is freed with its call."""
    folder = versions["kernel_wrapper_hw_quant"]
    runners = _runners(pool, folder, 2, max_batch=4096)
    x = _inputs(2000, 16, seed=11)
    view, close = _in_arena(x)
    try:
        want = _reference(folder, x)
        card = pool.card(0)
        u0, d0 = _user_bytes(sim), card.snapshot().dma_to_device_direct
        for i, runner in enumerate(runners):
            cu = card.compute_unit("kernel_wrapper", runner.home.cu)
            assert card.device.user_memory(cu.handle, runner.abi.input_arg) is None
            assert np.array_equal(runner.predict(view), want)
            assert _user_bytes(sim) - u0 == (i + 1) * x.nbytes
        assert card.snapshot().dma_to_device_direct - d0 == 2 * x.nbytes
        assert _stats(sim, 0)["buffers"] == 4  # each runner's two; the wrapped ones are gone
        # not on a page: the encoding path, the same bits
        assert np.array_equal(runners[0].predict(np.array(view)[1:]), want[1:])
        assert _user_bytes(sim) - u0 == 2 * x.nbytes
    finally:
        _close(runners)
        close()


def test_an_io_stream_project_runs_on_krnl_rtl(sim, pool, tmp_path):
    """hls4ml's Alveo wrapper gives io_stream projects the same krnl_rtl interface (arrays at
    <name>_axi, N_IN/N_OUT in <name>_axi.h): the card, the C-simulation through that wrapper,
    hls4ml's own HLSModel.predict and the numpy emulator agree bit for bit."""
    import torch

    import hls4ml
    from fpga_sim.xclbin import write_xclbin

    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 12), torch.nn.ReLU(), torch.nn.Linear(12, 3)).eval()
    cfg = hls4ml.utils.config_from_pytorch_model(
        model, input_shape=(16,), granularity="name", backend="VivadoAccelerator", default_precision="ap_fixed<16,6>"
    )
    hls_model = hls4ml.converters.convert_from_pytorch_model(
        model,
        hls_config=cfg,
        output_dir=str(tmp_path / "stream"),
        backend="VivadoAccelerator",
        board="alveo-u250",
        io_type="io_stream",
        interface="axi_stream",
        driver="python",
        input_type="float",
        output_type="float",
    )
    hls_model.compile()
    folder = tmp_path / "stream"
    write_xclbin(folder / "model.xclbin", kernel_abi="krnl_rtl", cus=1, project=folder)
    _record(folder, "krnl_rtl")
    (runner,) = _runners(pool, folder, 1)
    try:
        x = _inputs(200, 16, seed=5)
        got = runner.predict(x)
        want = _reference(folder, x)
        assert np.array_equal(got, want)
        hls = np.asarray(hls_model.predict(np.ascontiguousarray(x)), np.float64).reshape(want.shape)
        assert np.array_equal(want.astype(np.float32), hls.astype(np.float32))
        # the numpy emulator of the io_stream firmware, behind the same T_in/T_out conversions
        from fpgaserve.backends.hls4ml.emulator import FixedPointModel
        from fpgaserve.backends.hls4ml.project import Hls4mlProject

        emulated = FixedPointModel(Hls4mlProject.load(folder)).predict(x)
        assert np.array_equal(emulated.astype(np.float32).view(np.uint32), np.asarray(got, np.float32).view(np.uint32))
    finally:
        runner.close()


# ------------------------------------------------------------------------------ placement
def test_instances_spread_over_every_compute_unit_of_every_card(sim, pool, versions):
    folder = versions["krnl_rtl"]
    runners = _runners(pool, folder, 4, cards=(0, 1))
    try:
        homes = [(r.home.card.index, r.home.cu) for r in runners]
        # interleaved: consecutive instances on different cards first
        assert homes == [(0, "krnl_rtl_1"), (1, "krnl_rtl_1"), (0, "krnl_rtl_2"), (1, "krnl_rtl_2")]
        for r in runners:
            r.predict(_inputs(20, 16))
        for card in (0, 1):
            cus = _stats(sim, card)["cus"]
            assert cus["krnl_rtl_1"]["completed"] == cus["krnl_rtl_2"]["completed"] == 1
    finally:
        _close(runners)


@pytest.mark.quiet  # the runner tests check DMA overlapping a kernel in time
def test_two_instances_on_a_compute_unit_overlap_dma_with_the_kernel(sim, pool, versions, monkeypatch):
    """Double buffering: while one instance's call runs, the other moves its batch to the card.

    The simulator counts transfers to the card that begin while one of its kernels executes; a
    host that serialized DMA and compute per compute unit would count none."""
    monkeypatch.setenv("FPGASERVE_SIM_KERNEL_DELAY_MS", "40")
    folder = versions["krnl_rtl_one_cu"]
    runners = _runners(pool, folder, 2)
    try:
        assert runners[0].home == runners[1].home
        before = _stats(sim, 0)["dma_to_device_during_kernel"]
        errors = []

        def work(r, seed):
            try:
                for k in range(3):
                    x = _inputs(50, 16, seed=seed + k)
                    assert np.array_equal(r.predict(x), _reference(folder, x))
            except BaseException as e:  # reported below, from the test's thread
                errors.append(e)

        threads = [threading.Thread(target=work, args=(r, 10 * i)) for i, r in enumerate(runners)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert _stats(sim, 0)["dma_to_device_during_kernel"] - before >= 2
        assert _stats(sim, 0)["cus"]["krnl_rtl_1"]["completed"] >= 6
    finally:
        _close(runners)


def test_another_xclbin_on_a_card_in_use_is_refused(sim, pool, versions):
    runners = _runners(pool, versions["krnl_rtl"], 1)
    try:
        with pytest.raises(BackendError, match="a card holds one xclbin"):
            pool.card(0).load(_binding(versions["kernel_wrapper"]).xclbin)
    finally:
        _close(runners)


def test_a_bank_too_small_for_max_batch_size_is_a_load_error(sim, pool, tmp_path):
    from fpga_sim.xclbin import write_xclbin

    folder = tmp_path / "plram"
    shutil.copytree(JET_TAGGER, folder)
    write_xclbin(folder / "model.xclbin", kernel_abi="krnl_rtl", cus=1, cu_banks=["PLRAM[0]"])
    _record(folder, "krnl_rtl")
    with pytest.raises(BackendError, match=r"exceed bank PLRAM\[0\]"):
        _runners(pool, folder, 1, max_batch=16384)


# ------------------------------------------------------------------------------ hangs and recovery
def _hang(sim, card: int, cu: str) -> None:
    (sim.control / f"hang-card{card}-{cu}").write_text("")


def _wait_for(what, predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_a_hung_compute_unit_fails_its_batch_and_the_others_keep_serving(sim, pool, versions, caplog):
    """card-reset=off: the hung CU leaves service, its instance moves to the healthy one, the card
    stays open (a reset would stop the healthy CU) and the operator's command is logged."""
    folder = versions["krnl_rtl"]
    pool.reset_policy = "off"
    runners = _runners(pool, folder, 2, timeout=0.5)
    card = pool.card(0)
    card.reset_policy = "off"
    try:
        _hang(sim, 0, "krnl_rtl_1")
        x = _inputs(30, 16)
        with caplog.at_level(logging.ERROR, logger="fpgaserve.hls4ml.cards"):
            with pytest.raises(
                DeviceUnavailableError, match=r"krnl_rtl_1 .* did not finish a call of 30 rows within 0\.5 s"
            ):
                runners[0].predict(x)
            _wait_for("the operator's command", lambda: "xbutil reset --device 0000:65:00.1 --force" in caplog.text)
        assert card.health_state.value == "degraded"
        assert card.health() is None  # krnl_rtl_2 serves: the model is ready
        # instance 0 moved to krnl_rtl_2; instance 1 lives there anyway
        for r in runners:
            assert np.array_equal(r.predict(x), _reference(folder, x))
        assert runners[0]._bound.cu.name == "krnl_rtl_2"
        snap = card.snapshot()
        assert snap.health == "degraded" and snap.cu_healthy == {"krnl_rtl_1": False, "krnl_rtl_2": True}
        assert _stats(sim, 0)["hung"] == ["krnl_rtl_1"]
    finally:
        _close(runners)


def test_xbutil_reset_recovers_a_hung_card(sim, pool, versions):
    """card-reset=auto: calls drain, every handle is released, `xbutil reset` runs (it refuses
    while the card is open), the card is programmed again and every compute unit serves."""
    folder = versions["krnl_rtl"]
    runners = _runners(pool, folder, 2, timeout=0.5)
    card = pool.card(0)
    try:
        _hang(sim, 0, "krnl_rtl_2")
        x = _inputs(30, 16)
        with pytest.raises(DeviceUnavailableError):
            runners[1].predict(x)
        _wait_for("the reset", lambda: card.health_state.value == "ok" and card.reloads == 1)
        assert card.resets == 1 and _stats(sim, 0)["resets"] >= 1
        assert _stats(sim, 0)["hung"] == [] and not _stats(sim, 0)["bad_state"]
        for r in runners:
            assert np.array_equal(r.predict(x), _reference(folder, x))
        assert runners[1]._bound.cu.name == "krnl_rtl_2"  # back home
    finally:
        _close(runners)


def test_a_card_with_every_compute_unit_hung_is_not_ready_until_reset(sim, pool, versions, caplog):
    """card-reset=off and nothing left serving: the card is closed (so that the operator's reset
    can run), the model is not ready, and a health probe after the reset brings it back."""
    folder = versions["krnl_rtl_one_cu"]
    (runner,) = _runners(pool, folder, 1, timeout=0.5)
    card = pool.card(0)
    card.reset_policy = "off"
    card.retry_s = 0.0
    try:
        _hang(sim, 0, "krnl_rtl_1")
        with caplog.at_level(logging.ERROR, logger="fpgaserve.hls4ml.cards"):
            with pytest.raises(DeviceUnavailableError):
                runner.predict(_inputs(8, 16))
            _wait_for("the card to be closed", lambda: card._closed and not card._recovering)
        assert "needs a reset" in caplog.text
        assert card.health() is not None
        with pytest.raises(DeviceUnavailableError, match="no compute unit of this model serves"):
            runner.predict(_inputs(8, 16))
        assert _stats(sim, 0)["bad_state"]  # closed with a hung command: XRT wants a reset
        # a probe before the reset finds the card still needing it
        card.health()
        _wait_for("a retry", lambda: not card._recovering)
        assert card.health_state.value == "needs_reset"
        # the operator resets the card (the server holds it closed, so xbutil may)
        import subprocess

        out = subprocess.run(["xbutil", "reset", "--device", "0000:65:00.1", "--force"], capture_output=True, text=True)
        assert "Successfully reset" in out.stdout, out.stdout + out.stderr
        card.health()  # the next probe retries
        _wait_for("the recovery", lambda: card.health() is None and card.health_state.value == "ok")
        x = _inputs(8, 16)
        assert np.array_equal(runner.predict(x), _reference(folder, x))
    finally:
        runner.close()


@xrt_only
def test_reloading_the_same_xclbin_does_not_reset_a_hung_compute_unit(sim, pool, versions):
    """XRT skips a load whose UUID is on the card (Xilinx/XRT#5858): what the old recovery relied on."""
    import pyxrt

    folder = versions["krnl_rtl_one_cu"]
    (runner,) = _runners(pool, folder, 1, timeout=0.3)
    try:
        _hang(sim, 0, "krnl_rtl_1")
        with pytest.raises(DeviceUnavailableError):
            runner.predict(_inputs(8, 16))
        dev = pyxrt.device(0)
        dev.load_xclbin(str(folder / "model.xclbin"))
        assert _stats(sim, 0)["hung"] == ["krnl_rtl_1"]
    finally:
        runner.close()


# ------------------------------------------------------------------------------ telemetry
# perf_analyzer's metrics parser (client_backend/triton/triton_client_backend.cc)
PA_REGEX = r'\n{name}\{{gpu_uuid="([^"]+)"\}} (\d+\.?\d*)'


def _samples(collector):
    out = {}
    for family in collector.collect():
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def _one(samples, name, **labels):
    found = [v for lab, v in samples.get(name, []) if all(lab.get(k) == val for k, val in labels.items())]
    assert len(found) == 1, (name, labels, samples.get(name))
    return found[0]


def test_telemetry_families_and_values(sim, pool, versions, monkeypatch):
    import re

    from prometheus_client import CollectorRegistry, generate_latest

    from fpgaserve.backends.hls4ml.card.telemetry import FpgaTelemetryCollector
    from fpgaserve.server.metrics import plain_gpu_values

    folder = versions["krnl_rtl_fixed"]
    runners = _runners(pool, folder, 2, max_batch=64)
    card = pool.card(0)
    collector = FpgaTelemetryCollector(pool)
    try:
        first = _samples(collector)
        dev = card.uid
        assert _one(first, "fpga_utilization", device=dev, cu="krnl_rtl_1") == 0.0
        monkeypatch.setenv("FPGASERVE_SIM_KERNEL_DELAY_MS", "60")
        dma_before = _stats(sim, 0)["bytes_to_device"]
        calls_before = _one(first, "fpga_kernel_calls_total", device=dev, cu="krnl_rtl_1")
        for i in range(5):
            runners[0].predict(_inputs(64, 16, i))
        second = _samples(collector)

        util = _one(second, "fpga_utilization", device=dev, cu="krnl_rtl_1")
        assert 0 < util <= 1.0, util  # busy for part of the time between the scrapes (how much: host load)
        assert _one(second, "fpga_utilization", device=dev, cu="krnl_rtl_2") == 0.0
        assert _one(second, "nv_gpu_utilization", gpu_uuid=dev) == pytest.approx(util / 2, abs=1e-4)  # mean of 2 CUs
        assert _one(second, "fpga_kernel_calls_total", device=dev, cu="krnl_rtl_1") == calls_before + 5
        assert _one(second, "fpga_kernel_duration_us_total", device=dev, cu="krnl_rtl_1") >= 5 * 60_000
        to_dev = _one(second, "fpga_dma_bytes_total", device=dev, direction="to_device")
        assert to_dev - _one(first, "fpga_dma_bytes_total", device=dev, direction="to_device") == 5 * 64 * 16 * 4
        assert _stats(sim, 0)["bytes_to_device"] - dma_before == 5 * 64 * 16 * 4  # what the card saw
        used = 2 * (64 * 16 * 4 + 64 * 5 * 4)  # two runners' buffers: 64 rows of 32-bit words each way
        assert _one(second, "fpga_memory_used_bytes", device=dev) == used
        assert _one(second, "nv_gpu_memory_used_bytes", gpu_uuid=dev) == used
        assert _one(second, "nv_gpu_memory_total_bytes", gpu_uuid=dev) == 2 * (16 << 30)  # the two used DDR banks
        assert _one(second, "fpga_healthy", device=dev) == 1
        assert _one(second, "fpga_compute_unit_healthy", device=dev, cu="krnl_rtl_2") == 1

        power = _one(second, "fpga_power_usage_watts", device=dev)
        assert 10 < power < 225  # an Alveo U250's range
        assert _one(second, "nv_gpu_power_usage", gpu_uuid=dev) == pytest.approx(power, abs=1e-3)
        if API == "pynq":  # xclDeviceInfo2 carries no power limit: none is made up
            assert not second.get("nv_gpu_power_limit"), second.get("nv_gpu_power_limit")
        else:  # XRT's electrical report: power_consumption_max_watts of the simulated U250
            assert _one(second, "nv_gpu_power_limit", gpu_uuid=dev) == 225
        energy = _one(second, "fpga_energy_consumption_joules_total", device=dev)
        assert energy > 0 and _one(second, "nv_energy_consumption", gpu_uuid=dev) == energy
        assert second["fpga_temperature_celsius"] and all(20 < v < 110 for _, v in second["fpga_temperature_celsius"])
        assert _one(second, "fpga_fan_rpm", device=dev) > 0
        assert _one(second, "fpga_bitstream_info", device=dev, xclbin_uuid=card.xclbin.uuid, simulated="true") == 1

        # what perf_analyzer --collect-metrics reads from the rendered text
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)
        text = "\n" + plain_gpu_values(generate_latest(registry)).decode()
        for name in (
            "nv_gpu_utilization",
            "nv_gpu_power_usage",
            "nv_gpu_memory_used_bytes",
            "nv_gpu_memory_total_bytes",
        ):
            assert dev in dict(re.findall(PA_REGEX.format(name=name), text)), name
        assert dict(re.findall(PA_REGEX.format(name="nv_gpu_memory_total_bytes"), text))[dev] == str(2 * (16 << 30))
    finally:
        _close(runners)


def test_failing_sensors_do_not_break_the_scrape(sim, pool, versions, monkeypatch):
    from fpgaserve.backends.hls4ml.card.telemetry import FpgaTelemetryCollector

    runners = _runners(pool, versions["krnl_rtl"], 1)
    try:
        device = pool.card(0).device

        def broken():
            raise RuntimeError("the sensor read failed")

        monkeypatch.setattr(device, "read_sensors", broken)
        samples = _samples(FpgaTelemetryCollector(pool))
        dev = pool.card(0).uid
        assert not [1 for lab, _ in samples.get("fpga_temperature_celsius", []) if lab["device"] == dev]
        assert not [1 for lab, _ in samples.get("fpga_power_usage_watts", []) if lab["device"] == dev]
        assert _one(samples, "nv_gpu_utilization", gpu_uuid=dev) == 0.0
        assert _one(samples, "fpga_bitstream_info", device=dev, simulated="true") == 1
        assert _one(samples, "fpga_clock_mhz", device=dev, clock="DATA_CLK") == 300  # the xclbin's clock table
    finally:
        _close(runners)


def test_unreadable_sensors_are_left_out_not_zero(sim, pool, versions, monkeypatch):
    from fpgaserve.backends.hls4ml.card.telemetry import FpgaTelemetryCollector

    monkeypatch.setenv("FPGASERVE_SIM_SENSORS", "unreadable")
    reading = pool.card(0).device.read_sensors()
    assert reading.error and not reading.rails and not reading.temperatures and reading.fan_rpm is None
    names = {s.name for m in FpgaTelemetryCollector(pool).collect() for s in m.samples}
    assert "fpga_power_usage_watts" not in names and "fpga_temperature_celsius" not in names
    assert reading.power_limit_watts is None and "nv_gpu_power_limit" not in names  # no sensors: no limit either
    assert "fpga_healthy" in names


def test_plain_gpu_values_rewrites_exponents_only_for_gpu_aliases():
    from fpgaserve.server.metrics import plain_gpu_values

    text = (
        b"# TYPE nv_gpu_memory_total_bytes gauge\n"
        b'nv_gpu_memory_total_bytes{gpu_uuid="FPGA-0-x"} 1.7179869184e+10\n'
        b'nv_gpu_memory_used_bytes{gpu_uuid="FPGA-0-x"} 4.194304e+06\n'
        b'nv_gpu_utilization{gpu_uuid="FPGA-0-x"} 0.25\n'
        b'fpga_memory_total_bytes{device="FPGA-0-x"} 1.7179869184e+10\n'
    )
    out = plain_gpu_values(text)
    assert b'nv_gpu_memory_total_bytes{gpu_uuid="FPGA-0-x"} 17179869184\n' in out
    assert b'nv_gpu_memory_used_bytes{gpu_uuid="FPGA-0-x"} 4194304\n' in out
    assert b'nv_gpu_utilization{gpu_uuid="FPGA-0-x"} 0.25\n' in out
    assert b'fpga_memory_total_bytes{device="FPGA-0-x"} 1.7179869184e+10\n' in out
