"""The simulated Alveo card (tests/fpga_sim) driven through PYNQ 3.0.1's real API.

Everything here goes through pynq itself: ``Device.devices`` probing, ``Overlay`` on an xclbin
written by ``fpga_sim.xclbin`` and parsed by pynq's ``XclBin``, ``allocate(target=...)``,
``sync_to_device``/``sync_from_device``, ``DefaultIP.call``/``start_sw`` and ``register_map``.
The kernel results are compared bit for bit with the project's C-simulation (CsimLibrary), fed
with inputs encoded here by hand, independently of fpgaserve's own kernel_io codec.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pynq")

from pynq import Device, Overlay, allocate
from pynq.pl_server.device import DeviceMeta
from pynq.pl_server.xclbin_parser import XclBin

from fpga_sim import device as simdev  # registers the simulated cards with PYNQ
from fpga_sim.xclbin import DEFAULT_PLATFORM, write_hls4ml_xclbin

N_IN, N_OUT = 10, 3
TESTS = Path(__file__).resolve().parent


# ------------------------------------------------------------------------------ projects
def _convert(outdir: Path, io_precision: str) -> Path:
    """A small PyTorch MLP converted by hls4ml (VivadoAccelerator, alveo-u250, io_parallel)."""
    import hls4ml
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(N_IN, 8), torch.nn.ReLU(), torch.nn.Linear(8, N_OUT)).eval()
    g = np.random.default_rng(1234)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.from_numpy(g.normal(0, 0.5, size=tuple(p.shape)).astype(np.float32)))
    cfg = hls4ml.utils.config_from_pytorch_model(
        model, input_shape=(N_IN,), granularity="name", backend="VivadoAccelerator", default_precision="ap_fixed<16,6>"
    )
    hm = hls4ml.converters.convert_from_pytorch_model(
        model,
        hls_config=cfg,
        backend="VivadoAccelerator",
        io_type="io_parallel",
        output_dir=str(outdir),
        board="alveo-u250",
        input_type=io_precision,
        output_type=io_precision,
    )
    hm.write()
    return outdir


@pytest.fixture(scope="module")
def projects(tmp_path_factory):
    """{kind: version folder holding the hls4ml project and its model.xclbin}."""
    root = tmp_path_factory.mktemp("fpga_sim_projects")
    out = {}
    for kind, precision in (("float", "float"), ("fixed", "ap_fixed<16,6>")):
        folder = _convert(root / kind, precision)
        write_hls4ml_xclbin(folder / "model.xclbin")
        out[kind] = folder
    return out


@pytest.fixture(scope="module", autouse=True)
def csim_cache(tmp_path_factory):
    """Keep the C-simulation builds of this module out of the user's cache."""
    old = os.environ.get("FPGASERVE_CACHE_DIR")
    os.environ["FPGASERVE_CACHE_DIR"] = str(tmp_path_factory.mktemp("csim_cache"))
    yield
    if old is None:
        os.environ.pop("FPGASERVE_CACHE_DIR", None)
    else:
        os.environ["FPGASERVE_CACHE_DIR"] = old


@pytest.fixture
def control(tmp_path, monkeypatch):
    folder = tmp_path / "control"
    folder.mkdir()
    monkeypatch.setenv(simdev.ENV_CONTROL_DIR, str(folder))
    return folder


@pytest.fixture
def cards(monkeypatch, control):
    """Two fresh simulated cards: PYNQ's cached device list is reset around each test."""
    monkeypatch.setenv(simdev.ENV_CARDS, "2")
    monkeypatch.delenv(simdev.ENV_KERNEL_DELAY_MS, raising=False)
    simdev.reset_pynq_devices()
    found = simdev.simulated_cards()
    yield found
    simdev.reset_pynq_devices()


def csim(folder: Path):
    from fpgaserve.backends.hls4ml.csim import CsimLibrary
    from fpgaserve.backends.hls4ml.project import Hls4mlProject

    return CsimLibrary.load(Hls4mlProject.load(folder))


# Host-side word encoding written out here on purpose (not fpgaserve's kernel_io), so a bug in
# either side shows up as a mismatch.
def encode(kind: str, x: np.ndarray) -> np.ndarray:
    if kind == "float":
        return x.astype(np.float32)
    raw = np.floor(x * 2.0**10).astype(np.int64)  # ap_fixed<16,6>: F = 10, AP_TRN
    raw = (raw + 2**15) % 2**16 - 2**15  # AP_WRAP
    return raw.astype(np.int32)


def decode(kind: str, words: np.ndarray) -> np.ndarray:
    if kind == "float":
        return np.asarray(words, dtype=np.float32).astype(np.float64)
    raw = np.asarray(words).view(np.uint32).astype(np.int64) & 0xFFFF
    raw = np.where(raw >= 2**15, raw - 2**16, raw)
    return raw * 2.0**-10


def dtype_of(kind: str):
    return np.float32 if kind == "float" else np.int32


def inputs(batch: int, seed: int = 5, scale: float = 6.0) -> np.ndarray:
    # scale 6: values past ap_fixed<16,6>'s +-32 range exercise the input wrap
    return np.random.default_rng(seed).normal(0, scale, size=(batch, N_IN))


def run_call(ol, kind, x, sync_in=True, sync_out=True):
    """PYNQ's documented flow: allocate on the CU's bank, sync, call, sync back."""
    card = ol.device
    bank = ol.DDR0
    in_buf = allocate((len(x), N_IN), dtype_of(kind), target=bank)
    out_buf = allocate((len(x), N_OUT), dtype_of(kind), target=bank)
    in_buf[:] = encode(kind, x)
    if sync_in:
        in_buf.sync_to_device()
    ol.krnl_rtl_1.call(in_buf, out_buf, in_buf.size, out_buf.size)
    if sync_out:
        out_buf.sync_from_device()
    assert out_buf.device is card
    return in_buf, out_buf


def wait_ctrl(ip, mask, timeout=0.5) -> int:
    """Poll CTRL until any bit of ``mask`` is set or ``timeout``; returns the last value read."""
    deadline = time.monotonic() + timeout
    while True:
        ctrl = ip.mmio.read(0)
        if ctrl & mask or time.monotonic() > deadline:
            return ctrl
        time.sleep(0.005)


# ------------------------------------------------------------------------------ xclbin
def test_written_xclbin_parses_with_pynq(tmp_path):
    path = tmp_path / "a.xclbin"
    uid = write_hls4ml_xclbin(path, clock_mhz=250)
    blob = bytearray(path.read_bytes())
    from pynq._3rdparty import xclbin as axlf

    header = axlf.axlf.from_buffer(blob)
    assert header.m_magic == b"xclbin2"
    assert header.m_header.m_length == len(blob)
    assert bytes(header.m_header.m_platformVBNV).rstrip(b"\0").decode() == DEFAULT_PLATFORM
    parsed = XclBin(str(path))
    ip = parsed.ip_dict["krnl_rtl_1"]
    assert ip["xclbin_uuid"] == uid and len(uid) == 32
    assert ip["type"] == "fastmachinelearning.org:hls4ml:krnl_rtl:1.0"
    assert ip["cu_name"] == "krnl_rtl:krnl_rtl_1" and ip["index"] == 0 and ip["cu_index"] == 0
    regs = ip["registers"]
    assert {k: (r["address_offset"], r["type"]) for k, r in regs.items() if k != "CTRL"} == {
        "fifo_in": (0x10, "int*"),
        "fifo_out": (0x1C, "int*"),
        "length_r_in": (0x28, "uint"),
        "length_r_out": (0x30, "uint"),
    }
    assert regs["fifo_in"]["memory"] == regs["fifo_out"]["memory"] == "DDR[0]"
    assert "memory" not in regs["length_r_in"]
    assert [(t, m["used"], m["size"]) for t, m in parsed.mem_dict.items()] == [
        ("DDR[0]", 1, 16 << 30),
        ("DDR[1]", 0, 16 << 30),
        ("DDR[2]", 0, 16 << 30),
        ("DDR[3]", 0, 16 << 30),
    ]
    assert parsed.clock_dict["clock0"] == {"name": "DATA_CLK", "frequency": 250, "type": "DATA"}
    # a second file gets a new uuid
    assert write_hls4ml_xclbin(tmp_path / "b.xclbin") != uid


def test_multi_cu_xclbin_connects_each_cu_to_its_bank(tmp_path):
    path = tmp_path / "two.xclbin"
    write_hls4ml_xclbin(path, cu=["krnl_rtl_1", "krnl_rtl_2"], cu_banks=("DDR[0]", "DDR[2]"))
    parsed = XclBin(str(path))
    got = {k: (v["index"], v["registers"]["fifo_out"]["memory"]) for k, v in parsed.ip_dict.items()}
    assert got == {"krnl_rtl_1": (0, "DDR[0]"), "krnl_rtl_2": (1, "DDR[2]")}
    assert parsed.ip_dict["krnl_rtl_2"]["phys_addr"] > parsed.ip_dict["krnl_rtl_1"]["phys_addr"]
    assert [t for t, m in parsed.mem_dict.items() if m["used"]] == ["DDR[0]", "DDR[2]"]


# ------------------------------------------------------------------------------ registration
def test_cards_are_registered_and_marked_simulated(cards, control):
    assert DeviceMeta._subclasses[simdev.PROBE_PRIORITY] is simdev.SimulatedAlveoDevice
    assert list(DeviceMeta._subclasses).count(simdev.PROBE_PRIORITY) == 1
    assert len(cards) == 2 and [c.index for c in cards] == [0, 1]
    for i in range(2):  # stats files exist from the probe on
        assert json.loads((control / f"stats-card{i}.json").read_text())["downloads"] == 0
    for c in cards:
        assert c.simulated is True
        assert c.name == f"{DEFAULT_PLATFORM} (simulated)"
        assert c.has_capability("REGISTER_RW") and c.has_capability("CALLABLE")
        assert not c.has_capability("ERT")  # PYNQ must use the software start path


def test_zero_cards_disables_the_simulator(monkeypatch):
    monkeypatch.setenv(simdev.ENV_CARDS, "0")
    simdev.reset_pynq_devices()
    try:
        with pytest.warns(UserWarning) if "XILINX_XRT" not in os.environ else _nullcontext():
            devices = Device.devices
        assert not [d for d in devices if isinstance(d, simdev.SimulatedAlveoDevice)]
    finally:
        simdev.reset_pynq_devices()


class _nullcontext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# ------------------------------------------------------------------------------ results
@pytest.mark.parametrize("kind", ["float", "fixed"])
def test_kernel_matches_csim_bit_for_bit(cards, projects, kind):
    ol = Overlay(str(projects[kind] / "model.xclbin"), device=cards[0])
    x = inputs(64)
    in_buf, out_buf = run_call(ol, kind, x)
    got = decode(kind, np.asarray(out_buf))
    # the reference sees exactly the values the card received (float32 / ap_fixed<16,6> words)
    ref = csim(projects[kind]).predict(decode(kind, np.asarray(in_buf)))
    assert got.shape == (64, N_OUT)
    assert np.array_equal(got, ref)
    assert np.abs(ref).max() > 0  # not a trivially-zero network
    rm = ol.krnl_rtl_1.register_map
    assert int(rm.fifo_in) == in_buf.device_address and int(rm.fifo_out) == out_buf.device_address
    assert (int(rm.length_r_in), int(rm.length_r_out)) == (64 * N_IN, 64 * N_OUT)
    assert int(rm.CTRL.AP_IDLE) == 1 and int(rm.CTRL.AP_START) == 0
    assert cards[0].stats["kernel_starts"] == 1 and cards[0].stats["kernel_completions"] == 1


def test_fixed_outputs_are_low_bits_zero_extended(cards, projects):
    """On the card the upper 16 bits of an ap_fixed<16,6> output word are zero: a host must mask
    and sign-extend, reading the word as int32 would turn negative results positive."""
    ol = Overlay(str(projects["fixed"] / "model.xclbin"), device=cards[0])
    _, out_buf = run_call(ol, "fixed", inputs(64))
    words = np.asarray(out_buf).view(np.uint32)
    assert (words >> 16 == 0).all()
    assert (decode("fixed", words) < 0).any()


def test_input_upper_bits_are_ignored(cards, projects):
    ol = Overlay(str(projects["fixed"] / "model.xclbin"), device=cards[0])
    x = inputs(16)
    _, clean = run_call(ol, "fixed", x)
    in_buf = allocate((16, N_IN), np.int32, target=ol.DDR0)
    out_buf = allocate((16, N_OUT), np.int32, target=ol.DDR0)
    in_buf[:] = (encode("fixed", x).view(np.uint32) | np.uint32(0xABCD0000)).view(np.int32)
    in_buf.sync_to_device()
    ol.krnl_rtl_1.call(in_buf, out_buf, in_buf.size, out_buf.size)
    out_buf.sync_from_device()
    assert np.array_equal(np.asarray(out_buf), np.asarray(clean))


def test_missing_sync_to_device_computes_on_stale_device_memory(cards, projects):
    ol = Overlay(str(projects["float"] / "model.xclbin"), device=cards[0])
    x = inputs(8)
    ref = csim(projects["float"]).predict(decode("float", encode("float", x)))
    in_buf, out_buf = run_call(ol, "float", x, sync_in=False)
    assert not np.array_equal(decode("float", np.asarray(out_buf)), ref)
    # the same buffers, now synced, give the right answer
    in_buf.sync_to_device()
    ol.krnl_rtl_1.call(in_buf, out_buf, in_buf.size, out_buf.size)
    out_buf.sync_from_device()
    assert np.array_equal(decode("float", np.asarray(out_buf)), ref)


def test_missing_sync_from_device_leaves_host_copy_stale(cards, projects):
    ol = Overlay(str(projects["float"] / "model.xclbin"), device=cards[0])
    _, out_buf = run_call(ol, "float", inputs(8), sync_out=False)
    assert not np.asarray(out_buf).any()  # host copy untouched (zeros)
    out_buf.sync_from_device()
    assert np.asarray(out_buf).any()


def test_partial_sync_of_a_slice(cards, projects):
    """Syncing only the words a batch uses (a slice of a bigger buffer) is enough."""
    ol = Overlay(str(projects["float"] / "model.xclbin"), device=cards[0])
    in_buf = allocate((100 * N_IN,), np.float32, target=ol.DDR0)
    out_buf = allocate((100 * N_OUT,), np.float32, target=ol.DDR0)
    x = inputs(7)
    in_buf[: 7 * N_IN] = encode("float", x).reshape(-1)
    in_buf[: 7 * N_IN].sync_to_device()
    ol.krnl_rtl_1.call(in_buf, out_buf, 7 * N_IN, 7 * N_OUT)
    out_buf[: 7 * N_OUT].sync_from_device()
    ref = csim(projects["float"]).predict(decode("float", encode("float", x)))
    assert np.array_equal(decode("float", out_buf[: 7 * N_OUT]).reshape(7, N_OUT), ref)
    assert not out_buf[7 * N_OUT :].any()


# ------------------------------------------------------------------------------ hangs
@pytest.mark.parametrize(
    "len_in,len_out,reason",
    [
        (4 * N_IN + 1, 4 * N_OUT, "not a positive multiple of N_IN"),
        (4 * N_IN, 5 * N_OUT, "length_r_out"),
        (4 * N_IN, 3 * N_OUT, "length_r_out"),
        (0, 0, "not a positive multiple"),
    ],
)
def test_bad_lengths_hang_until_reprogrammed(cards, projects, len_in, len_out, reason):
    xclbin = str(projects["float"] / "model.xclbin")
    ol = Overlay(xclbin, device=cards[0])
    in_buf = allocate((8, N_IN), np.float32, target=ol.DDR0)
    out_buf = allocate((8, N_OUT), np.float32, target=ol.DDR0)
    in_buf.sync_to_device()
    ip = ol.krnl_rtl_1
    ip.start_sw(in_buf, out_buf, len_in, len_out)
    ctrl = wait_ctrl(ip, 0x6, timeout=0.3)
    assert ctrl & 0x7 == 0x1  # still started: never done, never idle
    stats = cards[0].stats
    assert stats["hangs"] == 1 and stats["hung"] == ["krnl_rtl_1"]
    assert reason in stats["faults"][-1]
    # starting again does not help: the CU is stuck
    ip.start_sw(in_buf, out_buf, 8 * N_IN, 8 * N_OUT)
    assert wait_ctrl(ip, 0x6, timeout=0.1) & 0x6 == 0
    assert cards[0].stats["kernel_starts"] == 1
    # downloading the bitstream again resets the card
    ol2 = Overlay(xclbin, device=cards[0])
    assert cards[0].stats["downloads"] == 2 and cards[0].stats["hung"] == []
    x = inputs(8)
    _, out2 = run_call(ol2, "float", x)
    assert np.array_equal(
        decode("float", np.asarray(out2)), csim(projects["float"]).predict(decode("float", encode("float", x)))
    )


def test_hang_file_hangs_one_kernel_on_one_card(cards, projects, control):
    xclbin = str(projects["float"] / "model.xclbin")
    ols = [Overlay(xclbin, device=c) for c in cards]
    (control / "hang-card1").touch()
    x = inputs(4)
    run_call(ols[0], "float", x)  # card 0 is not affected
    assert (control / "hang-card1").exists()
    in_buf = allocate((4, N_IN), np.float32, target=ols[1].DDR0)
    out_buf = allocate((4, N_OUT), np.float32, target=ols[1].DDR0)
    in_buf.sync_to_device()
    ols[1].krnl_rtl_1.start_sw(in_buf, out_buf, in_buf.size, out_buf.size)
    assert not (control / "hang-card1").exists()  # consumed
    assert wait_ctrl(ols[1].krnl_rtl_1, 0x6, timeout=0.3) & 0x6 == 0
    stats1 = json.loads((control / "stats-card1.json").read_text())
    assert stats1["hangs"] == 1 and "hang requested" in stats1["faults"][0] and stats1["simulated"] is True
    # reprogramming card 1 clears the hang; the next kernel runs normally (file was consumed)
    ol = Overlay(xclbin, device=cards[1])
    _, out = run_call(ol, "float", x)
    assert np.asarray(out).any()
    stats1 = json.loads((control / "stats-card1.json").read_text())
    assert (stats1["downloads"], stats1["kernel_starts"], stats1["kernel_completions"]) == (2, 2, 1)
    stats0 = json.loads((control / "stats-card0.json").read_text())
    assert (stats0["downloads"], stats0["kernel_starts"], stats0["hangs"]) == (1, 1, 0)
    # DMA counters are current too (written at every sync)
    assert (stats0["bytes_to_device"], stats0["bytes_from_device"]) == (4 * N_IN * 4, 4 * N_OUT * 4)


# ------------------------------------------------------------------------------ two cards
def test_two_cards_compute_independently(cards, projects, control):
    ols = [Overlay(str(projects[k] / "model.xclbin"), device=c) for k, c in zip(("float", "fixed"), cards)]
    assert ols[0].is_loaded() and ols[1].is_loaded()
    for kind, ol in zip(("float", "fixed"), ols):
        for seed in range(3):
            x = inputs(5, seed=seed)
            in_buf, out_buf = run_call(ol, kind, x)
            ref = csim(projects[kind]).predict(decode(kind, np.asarray(in_buf)))
            assert np.array_equal(decode(kind, np.asarray(out_buf)), ref)
    for i in range(2):
        stats = json.loads((control / f"stats-card{i}.json").read_text())
        assert (stats["downloads"], stats["kernel_starts"], stats["kernel_completions"]) == (1, 3, 3)
    # a second Overlay on card 0 replaces the first, as on hardware
    Overlay(str(projects["float"] / "model.xclbin"), device=cards[0])
    with pytest.raises(RuntimeError, match="not currently loaded"):
        _ = ols[0].krnl_rtl_1


def test_buffers_of_another_card_are_not_reachable(cards, projects):
    """PYNQ never checks that buffer and kernel share a card; the kernel then reads its own
    card's memory, where nothing is allocated at that address: it hangs."""
    xclbin = str(projects["float"] / "model.xclbin")
    ol0, ol1 = Overlay(xclbin, device=cards[0]), Overlay(xclbin, device=cards[1])
    in_buf = allocate((4, N_IN), np.float32, target=ol0.DDR0)
    out_buf = allocate((4, N_OUT), np.float32, target=ol0.DDR0)
    in_buf.sync_to_device()
    ol1.krnl_rtl_1.start_sw(in_buf, out_buf, in_buf.size, out_buf.size)
    assert wait_ctrl(ol1.krnl_rtl_1, 0x6, timeout=0.3) & 0x6 == 0
    assert "not inside one buffer allocated on this card" in cards[1].stats["faults"][-1]


def test_banks_routing_and_unconnected_bank(cards, projects, tmp_path):
    folder = projects["float"]
    path = folder / "two_cu.xclbin"
    write_hls4ml_xclbin(path, cu=["krnl_rtl_1", "krnl_rtl_2"], cu_banks=("DDR[0]", "DDR[1]"))
    try:
        ol = Overlay(str(path), device=cards[0])
        with pytest.raises(RuntimeError, match="Multiple memories active"):
            allocate((4,), np.float32, target=cards[0])
        with pytest.raises(RuntimeError, match="not used"):
            cards[0].get_memory_by_name("DDR[3]").allocate((4,), np.float32)
        x = inputs(4)
        ref = csim(folder).predict(decode("float", encode("float", x)))
        for cu, bank in (("krnl_rtl_1", ol.DDR0), ("krnl_rtl_2", ol.DDR1)):
            ip = getattr(ol, cu)
            in_buf = allocate((4, N_IN), np.float32, target=bank)
            out_buf = allocate((4, N_OUT), np.float32, target=bank)
            assert in_buf.device_address >= bank.base_address
            in_buf[:] = encode("float", x)
            in_buf.sync_to_device()
            ip.call(in_buf, out_buf, in_buf.size, out_buf.size)
            out_buf.sync_from_device()
            assert np.array_equal(decode("float", np.asarray(out_buf)), ref)
        # CU 2's master reaches DDR[1] only
        in_buf = allocate((4, N_IN), np.float32, target=ol.DDR0)
        out_buf = allocate((4, N_OUT), np.float32, target=ol.DDR0)
        ol.krnl_rtl_2.start_sw(in_buf, out_buf, in_buf.size, out_buf.size)
        assert wait_ctrl(ol.krnl_rtl_2, 0x6, timeout=0.3) & 0x6 == 0
        assert "connected to DDR[1]" in cards[0].stats["faults"][-1]
        assert cards[0].stats["hung"] == ["krnl_rtl_2"]
    finally:
        path.unlink()


# ------------------------------------------------------------------------------ registers
def test_ap_done_is_clear_on_read_and_ap_ready_is_a_pulse(cards, projects):
    ol = Overlay(str(projects["float"] / "model.xclbin"), device=cards[0])
    ip = ol.krnl_rtl_1
    assert ip.mmio.read(0) == 0x4  # idle after reset
    in_buf = allocate((2, N_IN), np.float32, target=ol.DDR0)
    out_buf = allocate((2, N_OUT), np.float32, target=ol.DDR0)
    in_buf.sync_to_device()
    ip.start_sw(in_buf, out_buf, in_buf.size, out_buf.size)
    ctrl = wait_ctrl(ip, 0x2)
    assert ctrl & 0xF == 0x6  # done + idle; ap_ready never visible (one-cycle pulse in the RTL)
    assert ip.mmio.read(0) == 0x4  # done cleared by the previous read


def test_kernel_stays_busy_for_the_modelled_time(cards, projects, monkeypatch):
    monkeypatch.setenv(simdev.ENV_KERNEL_DELAY_MS, "300")
    ol = Overlay(str(projects["float"] / "model.xclbin"), device=cards[0])
    ip = ol.krnl_rtl_1
    in_buf = allocate((4, N_IN), np.float32, target=ol.DDR0)
    out_buf = allocate((4, N_OUT), np.float32, target=ol.DDR0)
    idle_power = _card_power(cards[0])
    started = time.monotonic()
    handle = ip.start_sw(in_buf, out_buf, in_buf.size, out_buf.size)
    assert ip.mmio.read(0) & 0x7 == 0x1  # running
    busy_power = _card_power(cards[0])
    handle.wait()  # pynq's WaitHandle polls ap_idle
    assert time.monotonic() - started >= 0.29
    assert ip.mmio.read(0) & 0x7 == 0x4
    assert busy_power > idle_power + 5  # telemetry sees the kernel working
    assert cards[0].device_info.mOnChipTemp > 41


def _card_power(card) -> float:
    rails = card.sensors
    return rails["12v_aux"].power.value + rails["12v_pex"].power.value


# ------------------------------------------------------------------------------ telemetry
def test_telemetry_mirrors_xrt_device(cards, projects):
    card = cards[1]
    Overlay(str(projects["float"] / "model.xclbin"), device=card)
    rails = card.sensors
    assert set(rails) == {
        "0v85",
        "12v_aux",
        "12v_pex",
        "12v_sw",
        "1v8",
        "3v3_aux",
        "3v3_pex",
        "mgt0v9avcc",
        "mgtavtt",
        "sys_5v5",
        "vccint",
    }
    assert 11.5 < rails["12v_pex"].voltage.value < 12.5
    assert 5 < _card_power(card) < 100
    assert rails["vccint"].power.value > 0 and rails["1v8"].power is None
    info = card.device_info
    assert info.mName.decode().endswith("(simulated)")
    assert 20 < info.mOnChipTemp < 100 and info.mFanRpm > 0 and len(info.mDimmTemp) == 4
    assert card.clocks == {"clock0": {"frequency": 300}, "clock1": {"frequency": 500}}
    buf = allocate((1000,), np.float32, target=card.get_memory_by_name("DDR[0]"))
    usage = card.get_usage()
    assert usage.ddrMemUsed[0] == buf.nbytes and usage.ddrBOAllocated[0] == 1
    buf.sync_to_device()
    assert card.get_usage().h2c[0] == buf.nbytes
    del buf  # the buffer object is freed with its array, as XRT's are
    assert card.get_usage().ddrBOAllocated[0] == 0


# ------------------------------------------------------------------------------ loading
def test_xclbin_without_a_project_loads_but_cannot_compute(cards, tmp_path):
    path = tmp_path / "bare.xclbin"
    write_hls4ml_xclbin(path)
    ol = Overlay(str(path), device=cards[0])
    in_buf = allocate((1, N_IN), np.float32, target=ol.DDR0)
    out_buf = allocate((1, N_OUT), np.float32, target=ol.DDR0)
    with pytest.raises(simdev.SimulationError, match="no hls4ml project"):
        ol.krnl_rtl_1.start_sw(in_buf, out_buf, N_IN, N_OUT)


def test_xclbin_for_another_shell_is_refused(cards, projects, monkeypatch):
    path = projects["float"] / "other_shell.xclbin"
    write_hls4ml_xclbin(path, platform="xilinx_u250_xdma_201830_2")
    try:
        with pytest.raises(RuntimeError, match="Shell does not match"):
            Overlay(str(path), device=cards[0])
        # cards configured for that shell accept it
        monkeypatch.setenv(simdev.ENV_PLATFORM, "xilinx_u250_xdma_201830_2")
        simdev.reset_pynq_devices()
        other = simdev.simulated_cards()[0]
        assert other.name == "xilinx_u250_xdma_201830_2 (simulated)"
        assert Overlay(str(path), device=other).is_loaded()
    finally:
        path.unlink()


@pytest.mark.parametrize(
    "precision",
    ["float", "ap_fixed<16,6>", "ap_fixed<12,4>", "ap_fixed<8,8>", "ap_ufixed<10,2>", "ap_int<10>", "ap_uint<12>"],
)
def test_word_type_follows_hls4ml_rounding(precision):
    """The sim's reading of AcceleratorConfig.Precision agrees with hls4ml's own _next_factor8_type."""
    from hls4ml.backends import get_backend
    from hls4ml.backends.vivado_accelerator.vivado_accelerator_config import (
        VivadoAcceleratorConfig,
    )

    wt = simdev.word_type(precision)
    if precision == "float":
        assert wt.is_float
        return
    p = VivadoAcceleratorConfig._next_factor8_type(
        None, get_backend("VivadoAccelerator").convert_precision_string(precision)
    )
    assert (wt.width, wt.width - wt.frac, wt.signed) == (p.width, p.integer, p.signed)


def test_word_round_trip_and_rejections():
    wt = simdev.word_type("ap_fixed<16,6>")
    values = np.array([0.0, 1.0, -1.0, 31.9990234375, -32.0, 2.0**-10])
    words = simdev.encode_words(values, wt)
    assert words.tolist() == [0, 1024, 0xFC00, 32767, 0x8000, 1]
    assert np.array_equal(simdev.decode_words(words, wt), values)
    with pytest.raises(simdev.SimulationError, match="not a value"):
        simdev.encode_words(np.array([2.0**-11]), wt)  # not on the ap_fixed<16,6> grid
    with pytest.raises(simdev.SimulationError, match="32-bit"):
        simdev.word_type("double")
    with pytest.raises(simdev.SimulationError, match="40-bit"):
        simdev.word_type("ap_fixed<40,8>")


# ------------------------------------------------------------------------------ entry point
def test_serve_entry_point_runs_fpgaserve_with_the_simulator():
    env = dict(os.environ, FPGASERVE_SIM_CARDS="2")
    out = subprocess.run(
        [sys.executable, str(TESTS / "fpga_sim" / "serve.py"), "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "--model-repository" in out.stdout
    assert "2 SIMULATED Alveo card(s)" in out.stderr
    # the bootstrap registers the device class before anything probes, from the tests folder
    code = (
        "import runpy, sys; sys.argv = ['serve.py']; "
        f"ns = runpy.run_path({str(TESTS / 'fpga_sim' / 'serve.py')!r}, run_name='not_main'); ns['_bootstrap'](); "
        "import pynq; print([type(d).__module__ + ':' + d.name for d in pynq.Device.devices])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("fpga_sim.device:") == 2 and "(simulated)" in out.stdout


def test_simulator_is_not_part_of_the_installed_package():
    import fpgaserve.backends.hls4ml as hls

    installed = Path(hls.__file__).resolve().parents[1]
    assert not (installed / "fpga_sim").exists()
    with pytest.raises(ModuleNotFoundError):
        __import__("fpgaserve.fpga_sim")
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            (
                "import fpgaserve.server.cli, pynq; from pynq.pl_server.device import DeviceMeta; "
                "print(sorted(DeviceMeta._subclasses))"
            ),
        ],
        capture_output=True,
        text=True,
        cwd="/",
        timeout=120,
        check=False,
    )
    assert probe.returncode == 0, probe.stderr
    assert str(simdev.PROBE_PRIORITY) not in probe.stdout
