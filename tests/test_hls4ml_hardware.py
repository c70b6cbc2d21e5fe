"""fpgaserve's hardware path: kernel word encoding, cards, the runner, FPGA telemetry.

The encoding tests are pure numpy against hand-computed ``ap_fixed`` values and against the
``ap_fixed`` constructor itself (compiled from hls4ml's ap_types). The card tests run the
unmodified PYNQ 3.0.1 path (Overlay, allocate, sync, start/poll) on the simulated Alveo
cards of ``tests/fpga_sim``, whose kernel model runs the project's hls4ml C-simulation.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from fpgaserve.backends import BackendError, DeviceUnavailableError
from fpgaserve.backends.hls4ml.kernel_io import KernelIoError, WordCodec, word_format
from fpgaserve.server.metrics import plain_gpu_values

# ---------------------------------------------------------------------------------------------
# kernel_io: hand-computed values


def _codec(precision):
    return WordCodec.for_precision(precision)


def test_word_format_rules():
    f = word_format("ap_fixed<16,6>")
    assert (f.is_float, f.width, f.frac, f.signed, f.dtype) == (False, 16, 10, True, np.int32)
    # W rounded up to a multiple of 8, I kept: ap_fixed<12,4> travels as ap_fixed<16,4>
    f = word_format("ap_fixed<12,4>")
    assert (f.width, f.frac) == (16, 12)
    f = word_format("ap_fixed<18,8,AP_TRN,AP_WRAP,0>")
    assert (f.width, f.frac) == (24, 16)
    f = word_format("ap_ufixed<8,3>")
    assert (f.width, f.frac, f.signed, f.dtype) == (8, 5, False, np.uint32)
    # integer types stay integers: ap_int<10> travels as ap_int<16>, no fractional bits
    f = word_format("ap_int<10>")
    assert (f.width, f.frac, f.signed) == (16, 0, True)
    f = word_format("ap_uint<12>")
    assert (f.width, f.frac, f.signed, f.dtype) == (16, 0, False, np.uint32)
    assert (word_format("ap_int<32>").width, word_format("ap_int<32>").frac) == (32, 0)
    assert word_format("float").dtype == np.float32
    assert word_format("fixed<16,6>").frac == 10  # hls4ml's own spelling


@pytest.mark.parametrize(
    "precision",
    [
        "ap_fixed<16,6>",
        "ap_fixed<12,4>",
        "ap_fixed<18,8>",
        "ap_fixed<8,8>",
        "ap_fixed<10,-2>",
        "ap_ufixed<8,3>",
        "ap_ufixed<13,1>",
        "ap_int<10>",
        "ap_int<8>",
        "ap_int<17>",
        "ap_uint<12>",
        "ap_uint<1>",
    ],
)
def test_word_format_agrees_with_hls4ml_widening(precision):
    """The word layout is what hls4ml's VivadoAcceleratorConfig makes of the precision."""
    from hls4ml.backends.fpga.fpga_backend import FPGABackend
    from hls4ml.backends.vivado_accelerator.vivado_accelerator_config import (
        VivadoAcceleratorConfig,
    )
    from hls4ml.model.types import FixedPrecisionType

    # _next_factor8_type does not use its instance
    widened = VivadoAcceleratorConfig._next_factor8_type(None, FPGABackend.convert_precision_string(precision))
    f = word_format(precision)
    frac = widened.width - widened.integer if isinstance(widened, FixedPrecisionType) else 0
    assert (f.width, f.frac, f.signed) == (widened.width, frac, widened.signed)


@pytest.mark.parametrize(
    "precision,message",
    [
        ("double", "32-bit words"),
        ("ap_fixed<40,8>", "40-bit words"),
        ("ap_fixed<16,6,AP_RND>", "AP_TRN"),
        ("ap_fixed<16,6,AP_TRN,AP_SAT>", "AP_WRAP"),
        ("int32", "is not float"),
    ],
)
def test_word_format_rejects(precision, message):
    with pytest.raises(KernelIoError, match=message):
        word_format(precision)


def test_encode_ap_fixed_16_6_by_hand():
    c = _codec("ap_fixed<16,6>")
    # value -> floor(value * 2**10), wrapped into [-32768, 32768)
    x = np.array(
        [[0.0, 1.0, -1.0, 2.0**-10, -0.0001, 31.999, 32.0, -32.0, -32.001, 100.0, -0.5, 0.0019, -0.0019]],
        dtype=np.float32,
    )
    expect = [0, 1024, -1024, 1, -1, 32766, -32768, -32768, 32766, 102400 - 131072, -512, 1, -2]
    out = np.full(x.shape, 12345, dtype=np.int32)
    assert c.encode(x, out) is out
    assert out.tolist() == [expect]


def test_encode_non_finite_and_huge_wrap_to_zero():
    c = _codec("ap_fixed<16,6>")
    x = np.array([np.inf, -np.inf, np.nan, 1e30, -3e38], dtype=np.float32)
    out = np.empty(5, dtype=np.int32)
    c.encode(x, out)
    # ap_fixed keeps the low bits of floor(x * 2**F): multiples of 2**16 wrap to 0
    assert out.tolist() == [0, 0, 0, 0, 0]


def test_encode_float64_input_is_not_rounded_to_float32_first():
    c = _codec("ap_fixed<32,2>")  # 30 fractional bits, finer than a float32 mantissa near 1
    x = np.array([1.0 + 2.0**-29], dtype=np.float64)
    out = np.empty(1, dtype=np.int32)
    c.encode(x, out)
    assert out[0] == 2**30 + 2


def test_decode_takes_low_bits_and_sign_extends():
    c = _codec("ap_fixed<16,6>")
    # the stream's TDATA is 16 bits wide: the kernel writes the raw value zero-extended
    words = np.array([0x0000, 0x0400, 0xFC00, 0x8000, 0x7FFF, 0xFFFF, 0x12340400 & 0x7FFFFFFF], dtype=np.int32)
    out = np.empty(words.shape, dtype=np.float64)
    assert c.decode(words, out) is out
    assert out.tolist() == [0.0, 1.0, -1.0, -32.0, 32767 / 1024, -1 / 1024, 1.0]
    # sign-extended containers decode the same
    assert c.decode(np.array([-1024, -32768], dtype=np.int32), np.empty(2)).tolist() == [-1.0, -32.0]


def test_decode_unsigned_and_float():
    u = _codec("ap_ufixed<8,3>")
    assert u.decode(np.array([0xFF, 0x20, 0x1FF], dtype=np.uint32), np.empty(3)).tolist() == [255 / 32, 1.0, 255 / 32]
    f = _codec("float")
    w = np.array([1.5, -2.25, np.float32(0.1)], dtype=np.float32)
    out = np.empty(3)
    f.decode(w, out)
    assert out.tolist() == [1.5, -2.25, float(np.float32(0.1))]
    enc = np.empty(3, dtype=np.float32)
    f.encode(np.array([1.5, -2.25, 0.1]), enc)
    assert enc.tolist() == w.tolist()


def test_round_trip_random_is_exact_on_representable_values():
    rng = np.random.default_rng(1)
    c = _codec("ap_fixed<24,9>")
    raw = rng.integers(-(2**23), 2**23, size=(64, 37))
    x = raw * 2.0**-15
    words = np.empty(raw.shape, dtype=np.int32)
    c.encode(x, words)
    assert np.array_equal(words, raw)
    back = np.empty(raw.shape)
    c.decode(words & 0xFFFFFF, back)
    assert np.array_equal(back, x)


def test_encode_rejects_wrong_output():
    c = _codec("ap_fixed<16,6>")
    with pytest.raises(ValueError, match="dtype"):
        c.encode(np.zeros(3, np.float32), np.empty(3, np.int16))
    with pytest.raises(ValueError, match="shape"):
        c.encode(np.zeros(3, np.float32), np.empty(4, np.int32))


# ---------------------------------------------------------------------------------------------
# kernel_io against the ap_fixed constructor (hls4ml's ap_types, compiled with g++)

_ORACLE = r"""
#include <cstdio>
#include <cstdlib>
#include "ap_fixed.h"
typedef %(T)s T;
int main() {
    float x;
    while (fread(&x, sizeof x, 1, stdin) == 1) {
        T v = x;  // what in_struct(float) does with the host's value
        long long raw = v.range(%(W)d - 1, 0).to_int64();
        printf("%%lld\n", raw);
    }
    return 0;
}
"""


@pytest.mark.parametrize(
    "precision,ctype,width",
    [
        ("ap_fixed<16,6>", "ap_fixed<16,6>", 16),
        ("ap_fixed<12,4>", "ap_fixed<16,4>", 16),  # what hls4ml's T_in becomes
        ("ap_fixed<32,12>", "ap_fixed<32,12>", 32),
        ("ap_ufixed<8,3>", "ap_ufixed<8,3>", 8),
    ],
)
def test_encode_matches_ap_fixed_constructor(tmp_path, precision, ctype, width):
    from fpgaserve.backends.hls4ml.project import installed_templates_dir

    ap_types = installed_templates_dir() / "ap_types"
    src = tmp_path / "oracle.cpp"
    src.write_text(_ORACLE % {"T": ctype, "W": width})
    exe = tmp_path / "oracle"
    subprocess.run(["g++", "-O1", "-std=c++11", f"-I{ap_types}", str(src), "-o", str(exe)], check=True)
    rng = np.random.default_rng(7)
    x = np.concatenate(
        [
            rng.normal(0, 4, 4000),
            rng.normal(0, 300, 2000),
            rng.uniform(-1, 1, 2000) * 2.0**-12,
            [0.0, -0.0, 1e-30, -1e-30, 1e9, -1e9, 2.0**31, -(2.0**31)],
        ]
    ).astype(np.float32)
    proc = subprocess.run([str(exe)], input=x.tobytes(), capture_output=True, check=True)
    raw = np.array([int(v) for v in proc.stdout.split()], dtype=np.int64)
    c = _codec(precision)
    words = np.empty(x.shape, dtype=c.dtype)
    c.encode(x, words)
    mask = (1 << width) - 1
    assert np.array_equal(words.astype(np.int64) & mask, raw & mask)


# ---------------------------------------------------------------------------------------------
# telemetry text for perf_analyzer


def test_plain_gpu_values_rewrites_exponents_only_for_gpu_aliases():
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


# ---------------------------------------------------------------------------------------------
# the hardware path on simulated cards (tests/fpga_sim)

ROOT = Path(__file__).resolve().parents[1]
JET_TAGGER = ROOT / "bitstreams" / "jet_tagger" / "1"  # VivadoAccelerator, io_parallel, 16 -> 5
SIM_ENV = ("FPGASERVE_SIM_CARDS", "FPGASERVE_SIM_CONTROL_DIR", "FPGASERVE_SIM_KERNEL_DELAY_MS")
# perf_analyzer's metrics parser (client_backend/triton/triton_client_backend.cc)
PA_REGEX = r'\n{name}\{{gpu_uuid="([^"]+)"\}} (\d+\.?\d*)'

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the simulated kernel runs the C-simulation (g++)")


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    """Two simulated cards registered with PYNQ, probed afresh for this module."""
    saved = {k: os.environ.get(k) for k in SIM_ENV}
    control = tmp_path_factory.mktemp("sim-control")
    os.environ["FPGASERVE_SIM_CARDS"] = "2"
    os.environ["FPGASERVE_SIM_CONTROL_DIR"] = str(control)
    os.environ.pop("FPGASERVE_SIM_KERNEL_DELAY_MS", None)
    from fpga_sim import device as simdev

    simdev.reset_pynq_devices()
    from fpgaserve.backends.hls4ml.cards import CardPool

    CardPool.reset_instance()
    devices = simdev.simulated_cards()
    assert len(devices) == 2
    yield type("Sim", (), {"devices": devices, "control": control, "module": simdev})
    CardPool.reset_instance()
    simdev.reset_pynq_devices()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _version(root: Path, name: str, precision: str | None, cus=("krnl_rtl_1",)) -> tuple[Path, str]:
    """A model version folder: the jet tagger project (I/O precision changed the way hls4ml
    writes it) next to an xclbin; returns (xclbin path, uuid)."""
    from fpga_sim.xclbin import write_hls4ml_xclbin

    folder = root / name / "1"
    shutil.copytree(JET_TAGGER, folder)
    if precision is not None:
        cfg = folder / "hls4ml_config.yml"
        text = cfg.read_text()
        text = text.replace("    Input: float\n    Output: float", f"    Input: {precision}\n    Output: {precision}")
        assert f"Input: {precision}" in text
        cfg.write_text(text)
        axi = folder / "firmware" / "myproject_axi.h"
        # hls4ml 1.3.0's writer emits this (uncompilable) spelling for ap_fixed I/O
        w, i = re.match(r"ap_fixed<(\d+),(\d+)>", precision).groups()
        text = axi.read_text().replace("typedef float T_in;", f"typedef fixed<{w},{i},TRN,WRAP,0> T_in;")
        text = text.replace("typedef float T_out;", f"typedef fixed<{w},{i},TRN,WRAP,0> T_out;")
        axi.write_text(text)
    path = folder / "model.xclbin"
    uuid = write_hls4ml_xclbin(path, cu=list(cus))
    return path, uuid


@pytest.fixture(scope="module")
def versions(tmp_path_factory):
    root = tmp_path_factory.mktemp("versions")
    return {
        "float": _version(root, "float", None),
        "fixed": _version(root, "fixed", "ap_fixed<16,6>"),
        "float_b": _version(root, "float_b", None),
        "two_cu": _version(root, "two_cu", None, cus=("krnl_rtl_1", "krnl_rtl_2")),
    }


@pytest.fixture
def pool(sim):
    """A fresh pool over the simulated cards (one FpgaCard, hence one Overlay, per card)."""
    from fpgaserve.backends.hls4ml.cards import CardPool

    return CardPool(sim.devices)


def _project(xclbin: Path):
    from fpgaserve.backends.hls4ml.project import Hls4mlProject

    return Hls4mlProject.load(xclbin.parent)


def _reference(project, x):
    from fpgaserve.backends.hls4ml.csim import CsimLibrary

    return CsimLibrary.load(project).predict(x)


def _runner(pool, card_index, xclbin, cu="krnl_rtl_1", max_batch=64, timeout=5.0):
    from fpgaserve.backends.hls4ml.hardware import HardwareRunner

    card = pool.acquire(card_index, str(xclbin))
    return HardwareRunner(_project(xclbin), card, cu, max_batch, timeout)


def _inputs(n, scale, seed, n_in=16):
    return np.random.default_rng(seed).normal(0, scale, size=(n, n_in)).astype(np.float32)


@needs_gxx
@pytest.mark.parametrize("io", ["float", "fixed"])
def test_results_match_csim_bit_for_bit(pool, versions, io):
    xclbin, _ = versions[io]
    runner = _runner(pool, 0, xclbin, max_batch=300)
    project = runner.project
    try:
        # batch sizes up and down: a stale word left from a larger batch would show up
        for batch, scale, seed in ((300, 1.0, 1), (1, 3.0, 2), (77, 40.0, 3), (300, 8.0, 4), (5, 0.01, 5)):
            x = _inputs(batch, scale, seed)
            y = runner.run(x)
            assert y.dtype == np.float64 and y.shape == (batch, project.output.size)
            ref = _reference(project, x)
            assert np.array_equal(y, ref), f"batch {batch} scale {scale}: {np.abs(y - ref).max()}"
        # float64 requests reach the card the same way
        x = _inputs(9, 2.0, 6).astype(np.float64)
        assert np.array_equal(runner.predict(x), _reference(project, x))
    finally:
        runner.close()


@needs_gxx
def test_fixed_io_uses_int32_words_and_syncs_only_used_bytes(sim, pool, versions):
    xclbin, _ = versions["fixed"]
    runner = _runner(pool, 1, xclbin, max_batch=128)
    try:
        assert runner._in_buf.dtype == np.int32 and runner._out_buf.dtype == np.int32
        assert runner._in_buf.device is sim.devices[1]  # buffers on the runner's own card
        before = dict(sim.devices[1].stats)
        runner.run(_inputs(3, 1.0, 7))
        after = sim.devices[1].stats
        assert after["bytes_to_device"] - before["bytes_to_device"] == 3 * 16 * 4
        assert after["bytes_from_device"] - before["bytes_from_device"] == 3 * 5 * 4
        assert after["kernel_completions"] - before["kernel_completions"] == 1
    finally:
        runner.close()


@needs_gxx
def test_batch_limits_and_bad_names(pool, versions):
    xclbin, _ = versions["float"]
    runner = _runner(pool, 0, xclbin, max_batch=8)
    try:
        with pytest.raises(BackendError, match="exceeds max_batch_size 8"):
            runner.run(_inputs(9, 1.0, 1))
        with pytest.raises(BackendError, match=r"expected \(batch, 16\)"):
            runner.run(np.zeros((2, 15), np.float32))
        assert runner.run(np.zeros((0, 16), np.float32)).shape == (0, 5)
        assert np.array_equal(runner.run(_inputs(8, 1.0, 2)), _reference(runner.project, _inputs(8, 1.0, 2)))
    finally:
        runner.close()
    with pytest.raises(BackendError, match=r"'krnl_rtl_9' is not in .*compute units: krnl_rtl_1"):
        _runner(pool, 0, xclbin, cu="krnl_rtl_9")


@needs_gxx
def test_timeout_raises_device_unavailable_then_card_recovers(sim, pool, versions):
    xclbin, _ = versions["float"]
    runner = _runner(pool, 0, xclbin, max_batch=32, timeout=0.5)
    card = runner.card
    try:
        x = _inputs(20, 1.0, 3)
        assert np.array_equal(runner.run(x), _reference(runner.project, x))
        downloads = sim.devices[0].stats["downloads"]
        (sim.control / "hang-card0").touch()
        started = time.perf_counter()
        with pytest.raises(DeviceUnavailableError) as err:
            runner.run(x)
        waited = time.perf_counter() - started
        message = str(err.value)
        assert "krnl_rtl_1" in message and "card 0" in message and card.uid in message and "0.5 s" in message
        assert 0.5 <= waited < 60.0  # never before the timeout; the upper bound only catches a wait forever
        assert sim.devices[0].stats["downloads"] == downloads + 1  # reprogrammed
        assert card.reloads == 1 and card.broken is None
        # the next batch works on the fresh overlay, with re-resolved IP and buffers
        x2 = _inputs(32, 2.0, 4)
        assert np.array_equal(runner.run(x2), _reference(runner.project, x2))
        assert sim.devices[0].stats["hung"] == []
        snap = card.snapshot()
        assert snap.cus["krnl_rtl_1"][0] == 3  # the hung call counts as a call, busy until the timeout
        assert snap.memory_used == runner._in_buf.nbytes + runner._out_buf.nbytes  # old buffers not double counted
    finally:
        runner.close()


@needs_gxx
def test_instances_share_a_card_and_serialize_on_the_cu(sim, pool, versions):
    xclbin, _ = versions["float"]
    a = _runner(pool, 0, xclbin, max_batch=64)
    b = _runner(pool, 0, xclbin, max_batch=16)
    assert a.card is b.card and a.card.users == 2
    errors, results = [], {}

    def work(runner, seed):
        try:
            for i in range(15):
                x = _inputs(1 + (seed * 7 + i * 5) % runner.max_batch_size, 1.5, seed * 100 + i)
                results[(seed, i)] = np.array_equal(runner.run(x), _reference(runner.project, x))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(r, s)) for s, r in enumerate((a, b, a, b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    a.close()
    b.close()
    assert not errors, errors
    assert len(results) == 60 and all(results.values())
    assert a.card.users == 0


@needs_gxx
def test_other_bitstream_on_a_busy_card_is_refused(pool, versions):
    path_a, uuid_a = versions["float"]
    path_b, uuid_b = versions["float_b"]
    runner = _runner(pool, 1, path_a)
    with pytest.raises(BackendError) as err:
        pool.acquire(1, str(path_b))
    message = str(err.value)
    assert str(path_a) in message and str(path_b) in message and uuid_a in message and uuid_b in message
    runner.close()
    # an idle card takes the new bitstream
    card = pool.acquire(1, str(path_b))
    assert card.xclbin_uuid == uuid_b
    card.release()


@pytest.fixture
def rendezvous(sim):
    """Arm the simulator's rendezvous of two kernels (fpga_sim/device.py): a kernel that starts
    is held until two kernels execute at the same moment. If fpgaserve serialized the calls,
    the second could never start while the first is held; after 20 s the held kernel gives up
    with a "rendezvous timeout" fault. No clock is read by the test itself."""
    sim.module.arm_rendezvous(2, timeout_s=20.0)
    yield sim.module
    sim.module.disarm_rendezvous()


def _assert_rendezvous_met(sim, devices):
    state = sim.module.concurrency()
    faults = [f for d in devices for f in d.stats["faults"] if "rendezvous" in f]
    assert not faults, faults
    assert state["rendezvous"]["state"] == "met" and state["rendezvous"]["peak"] >= 2, state
    assert state["max_concurrent_kernels"] >= 2, state


# the runners' kernel timeout must outlast the rendezvous timeout, so a serialized host fails on
# the rendezvous fault, not on a kernel timeout
RENDEZVOUS_KERNEL_TIMEOUT = 60.0


@needs_gxx
def test_two_cards_run_in_parallel(sim, pool, versions, rendezvous):
    xclbin, _ = versions["float"]
    runners = [_runner(pool, i, xclbin, max_batch=32, timeout=RENDEZVOUS_KERNEL_TIMEOUT) for i in (0, 1)]
    assert runners[0].card is not runners[1].card
    assert runners[0]._in_buf.device is sim.devices[0] and runners[1]._in_buf.device is sim.devices[1]
    starts = [d.stats["kernel_starts"] for d in sim.devices]
    ok, errors = [], []

    def work(runner, seed):
        try:
            for i in range(4):
                x = _inputs(32, 1.0, seed + i)
                ok.append(np.array_equal(runner.run(x), _reference(runner.project, x)))
        except Exception as e:  # broad on purpose: reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(r, 10 * i)) for i, r in enumerate(runners)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in runners:
        r.close()
    assert not errors, errors
    assert ok == [True] * 8
    assert [d.stats["kernel_starts"] - n for d, n in zip(sim.devices, starts)] == [4, 4]
    _assert_rendezvous_met(sim, sim.devices)


@needs_gxx
def test_rendezvous_fails_a_serialized_host(sim, pool, versions):
    """The proof above can fail: one kernel alone never meets a rendezvous of two. It gives up
    after the rendezvous timeout with a fault (and still delivers its exact result)."""
    xclbin, _ = versions["float"]
    runner = _runner(pool, 1, xclbin, max_batch=8, timeout=RENDEZVOUS_KERNEL_TIMEOUT)
    try:
        sim.module.arm_rendezvous(2, timeout_s=0.3)
        x = _inputs(8, 1.0, 11)
        assert np.array_equal(runner.run(x), _reference(runner.project, x))
        state = sim.module.concurrency()["rendezvous"]
        assert state == {"wanted": 2, "state": "timed out", "peak": 1}, state
        assert "rendezvous timeout: at most 1 of 2 kernels" in sim.devices[1].stats["faults"][-1]
        # the rendezvous is over: the next kernel is not held
        assert np.array_equal(runner.run(x), _reference(runner.project, x))
    finally:
        sim.module.disarm_rendezvous()
        runner.close()


@needs_gxx
def test_compute_units_of_one_card_use_their_own_banks(sim, pool, versions):
    xclbin, _ = versions["two_cu"]
    r1 = _runner(pool, 0, xclbin, cu="krnl_rtl_1", timeout=RENDEZVOUS_KERNEL_TIMEOUT)
    r2 = _runner(pool, 0, xclbin, cu="krnl_rtl_2", timeout=RENDEZVOUS_KERNEL_TIMEOUT)
    try:
        assert r1.card is r2.card and r1._lock is not r2._lock
        # the sim hangs a CU whose buffers are not in the bank its m_axi_gmem is connected to
        for r, seed in ((r1, 1), (r2, 2)):
            x = _inputs(16, 1.0, seed)
            assert np.array_equal(r.run(x), _reference(r.project, x))
        # the two CUs of one card execute at the same time (nothing card-wide serializes them)
        sim.module.arm_rendezvous(2, timeout_s=20.0)
        results, errors = {}, []

        def work(r, seed):
            try:
                x = _inputs(8, 1.0, seed)
                results[seed] = np.array_equal(r.run(x), _reference(r.project, x))
            except Exception as e:  # broad on purpose: reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(r, seed)) for seed, r in enumerate((r1, r2, r1, r2))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert results == {0: True, 1: True, 2: True, 3: True}
        _assert_rendezvous_met(sim, sim.devices[:1])
        assert sim.devices[0].stats["hung"] == []
    finally:
        sim.module.disarm_rendezvous()
        r1.close()
        r2.close()


def test_simulated_card_is_logged_as_such(sim, caplog):
    from fpgaserve.backends.hls4ml.cards import FpgaCard

    with caplog.at_level("WARNING", logger="fpgaserve.hls4ml.cards"):
        card = FpgaCard(0, sim.devices[0])
    assert card.simulated
    assert any("SIMULATED" in r.getMessage() for r in caplog.records)


# ---------------------------------------------------------------------------------------------
# telemetry


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


@needs_gxx
def test_telemetry_families_and_values(sim, pool, versions, monkeypatch):
    from prometheus_client import CollectorRegistry, generate_latest

    from fpgaserve.backends.hls4ml.telemetry import FpgaTelemetryCollector

    xclbin, uuid = versions["fixed"]
    runner = _runner(pool, 0, xclbin, max_batch=64)
    card = runner.card
    collector = FpgaTelemetryCollector(pool)
    try:
        first = _samples(collector)
        dev = card.uid
        assert _one(first, "fpga_utilization", device=dev, cu="krnl_rtl_1") == 0.0
        monkeypatch.setenv("FPGASERVE_SIM_KERNEL_DELAY_MS", "60")
        dma_before = sim.devices[0].stats["bytes_to_device"]
        calls_before = _one(first, "fpga_kernel_calls_total", device=dev, cu="krnl_rtl_1")
        for i in range(5):
            runner.run(_inputs(64, 1.0, i))
        second = _samples(collector)

        util = _one(second, "fpga_utilization", device=dev, cu="krnl_rtl_1")
        assert 0.3 < util <= 1.0, util
        assert _one(second, "nv_gpu_utilization", gpu_uuid=dev) == pytest.approx(util, abs=1e-4)
        assert _one(second, "fpga_kernel_calls_total", device=dev, cu="krnl_rtl_1") == calls_before + 5
        kernel_us = _one(second, "fpga_kernel_duration_us_total", device=dev, cu="krnl_rtl_1")
        assert kernel_us >= 5 * 60_000
        to_dev = _one(second, "fpga_dma_bytes_total", device=dev, direction="to_device")
        assert to_dev - _one(first, "fpga_dma_bytes_total", device=dev, direction="to_device") == 5 * 64 * 16 * 4
        assert sim.devices[0].stats["bytes_to_device"] - dma_before == 5 * 64 * 16 * 4  # what the card saw
        used = runner._in_buf.nbytes + runner._out_buf.nbytes
        assert _one(second, "fpga_memory_used_bytes", device=dev) == used == 64 * 16 * 4 + 64 * 5 * 4
        assert _one(second, "nv_gpu_memory_used_bytes", gpu_uuid=dev) == used
        assert _one(second, "nv_gpu_memory_total_bytes", gpu_uuid=dev) == 16 << 30  # the one used DDR bank

        power = _one(second, "fpga_power_usage_watts", device=dev)
        rails = {lab["rail"]: v for lab, v in second["fpga_rail_power_watts"] if lab["device"] == dev}
        assert power == pytest.approx(rails["12v_aux"] + rails["12v_pex"]) and 10 < power < 200
        assert _one(second, "nv_gpu_power_usage", gpu_uuid=dev) == pytest.approx(power, abs=1e-3)
        energy = _one(second, "fpga_energy_consumption_joules_total", device=dev)
        assert energy > 0 and _one(second, "nv_energy_consumption", gpu_uuid=dev) == energy
        temps = {lab["sensor"]: v for lab, v in second["fpga_temperature_celsius"] if lab["device"] == dev}
        assert 20 < temps["fpga"] < 110 and "dimm0" in temps
        assert _one(second, "fpga_fan_rpm", device=dev) > 0
        assert _one(second, "fpga_clock_mhz", device=dev, clock="clock0") == 300
        assert _one(second, "fpga_bitstream_info", device=dev, xclbin_uuid=uuid, simulated="true") == 1
        assert _one(second, "fpga_bitstream_info", device=pool.card(1).uid, simulated="true") == 1

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
            found = dict(re.findall(PA_REGEX.format(name=name), text))
            assert dev in found, name
        assert dict(re.findall(PA_REGEX.format(name="nv_gpu_memory_total_bytes"), text))[dev] == str(16 << 30)
    finally:
        runner.close()


def test_failing_sensors_do_not_break_the_scrape(sim, pool, monkeypatch):
    from fpgaserve.backends.hls4ml.telemetry import FpgaTelemetryCollector

    def broken(self):
        raise RuntimeError("xclGetDeviceInfo2 failed")

    monkeypatch.setattr(type(sim.devices[0]), "device_info", property(broken))
    samples = _samples(FpgaTelemetryCollector(pool))
    dev = pool.card(0).uid
    assert not [1 for lab, _ in samples.get("fpga_temperature_celsius", []) if lab["device"] == dev]
    assert not [1 for lab, _ in samples.get("fpga_power_usage_watts", []) if lab["device"] == dev]
    assert _one(samples, "nv_gpu_utilization", gpu_uuid=dev) == 0.0
    assert _one(samples, "fpga_bitstream_info", device=dev, simulated="true") == 1
    assert _one(samples, "fpga_clock_mhz", device=dev, clock="clock0") == 300
