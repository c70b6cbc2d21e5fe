"""The simulated Alveo card through PYNQ 3.0.1's own API (``fpga_sim.pynq_device``).

PYNQ needs numpy 1.x; where this interpreter has no pynq, the module runs itself in the card
venv (``.tools/venv-card``, see tests/support/tools.py) and passes or fails with it, or is skipped with
the reason when that venv cannot be had. Everything goes through PYNQ: ``Device.devices``
probing, its ``XclBin`` parser on the xclbins ``fpga_sim.xclbin`` writes for all three kernels,
``Overlay``, ``allocate``, ``sync_to_device``/``sync_from_device``, and ``DefaultIP.call``/``start``
on both of PYNQ's start paths (ERT packets, and AXI-lite register writes). Results are compared
bit for bit with the project's C-simulation, on inputs encoded here by hand.
"""

from __future__ import annotations

import ctypes
import gc
import os
import shutil
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from support.tools import NEEDS_CARD_VENV

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent

try:
    import pynq
except ImportError:
    pynq = None

if pynq is None:

    @NEEDS_CARD_VENV
    def test_pynq_plugin_in_the_card_venv(tmp_path):
        """This module again, under the card venv's interpreter (PYNQ 3.0.1, numpy 1.x)."""
        from support.tools import card_venv_python

        python = card_venv_python()  # skips, saying why, when the venv cannot be built
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        out = subprocess.run(
            [python, "-m", "pytest", str(Path(__file__)), "-q", "-p", "no:cacheprovider", "-x"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
        tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-25:])
        assert out.returncode == 0, tail
        assert " passed" in tail and "skipped" not in tail.splitlines()[-1], tail

else:
    from pynq import Device, Overlay, allocate
    from pynq._3rdparty import ert
    from pynq.pl_server.device import DeviceMeta
    from pynq.pl_server.xclbin_parser import XclBin

    from fpga_sim import card as simcard
    from fpga_sim import card_core
    from fpga_sim import kernels as simkernels
    from fpga_sim import pynq_device as simdev
    from fpga_sim.projects import faast_project, kernel_wrapper_project
    from fpga_sim.xclbin import DEFAULT_PLATFORM, write_hls4ml_xclbin, write_xclbin

    SIM_ENV = [
        simcard.ENV_CARDS,
        simcard.ENV_CONTROL_DIR,
        simcard.ENV_PLATFORM,
        simcard.ENV_PCIE_GBPS,
        simcard.ENV_SENSORS,
        simdev.ENV_ERT,
        simkernels.ENV_KERNEL_DELAY_MS,
        simcard.ENV_DEVICE,
    ]

    @pytest.fixture(scope="module")
    def projects(tmp_path_factory):
        root = tmp_path_factory.mktemp("fpga_sim_pynq")
        out = {}
        jet = root / "jet_tagger"
        shutil.copytree(ROOT / "bitstreams" / "jet_tagger" / "1", jet)
        write_hls4ml_xclbin(jet / "model.xclbin", cu=["krnl_rtl_1", "krnl_rtl_2"])
        out["jet"] = jet
        kw = kernel_wrapper_project(ROOT / "bitstreams" / "facile" / "1", root / "kw", num_kernel=2)
        write_xclbin(kw / "model.xclbin", kernel_abi="kernel_wrapper", cus=2, project=kw)
        out["kw"] = kw
        faast = faast_project(root / "faast")
        write_xclbin(faast / "model.xclbin", kernel_abi="faast", project=faast)
        out["faast"] = faast
        return out

    @pytest.fixture
    def cards(tmp_path, monkeypatch):
        """Two fresh simulated cards, their work done by the card core (FPGASERVE_SIM_DEVICE
        inline); PYNQ's device list is probed again around each test."""
        why = card_core.unavailable()
        if why:
            pytest.skip(why)
        for name in SIM_ENV:
            monkeypatch.delenv(name, raising=False)
        control = tmp_path / "control"
        control.mkdir()
        monkeypatch.setenv(simcard.ENV_DEVICE, "inline")
        monkeypatch.setenv(simcard.ENV_CARDS, "2")
        monkeypatch.setenv(simcard.ENV_CONTROL_DIR, str(control))
        simdev.reset_pynq_devices()
        simcard.forget_cards()
        found = simdev.simulated_cards()
        yield found
        simdev.reset_pynq_devices()
        gc.collect()
        simcard.forget_cards()

    def csim(folder: Path):
        from fpgaserve.backends.hls4ml.csim import CsimLibrary
        from fpgaserve.backends.hls4ml.project import Hls4mlProject

        return CsimLibrary.load(Hls4mlProject.load(folder))

    def fixed_raw(x: np.ndarray, width: int, frac: int) -> np.ndarray:
        raw = np.floor(np.asarray(x, dtype=np.float64) * 2.0**frac).astype(np.int64)  # AP_TRN
        return (raw + 2 ** (width - 1)) % 2**width - 2 ** (width - 1)  # AP_WRAP

    def inputs(rows: int, n: int, seed: int = 3, scale: float = 4.0) -> np.ndarray:
        return np.random.default_rng(seed).normal(0, scale, size=(rows, n))

    def krnl_rtl_call(ol, x: np.ndarray, n_out: int, start: str = "call"):
        bank = ol.DDR0
        in_buf = allocate(x.shape, np.float32, target=bank)
        out_buf = allocate((len(x), n_out), np.float32, target=bank)
        in_buf[:] = x
        in_buf.sync_to_device()
        ip = ol.krnl_rtl_1
        if start == "call":
            ip.call(in_buf, out_buf, in_buf.size, out_buf.size)
        else:
            getattr(ip, start)(in_buf, out_buf, in_buf.size, out_buf.size).wait()
        out_buf.sync_from_device()
        return np.asarray(out_buf).astype(np.float64)

    # -------------------------------------------------------------------------- parsing and probing
    def test_pynq_parses_the_xclbins_of_all_three_kernels(projects):
        jet = XclBin(str(projects["jet"] / "model.xclbin"))
        regs = jet.ip_dict["krnl_rtl_1"]["registers"]
        assert {k: (r["address_offset"], r["type"], r.get("memory")) for k, r in regs.items() if k != "CTRL"} == {
            "fifo_in": (0x10, "int*", "DDR[0]"),
            "fifo_out": (0x1C, "int*", "DDR[0]"),
            "length_r_in": (0x28, "uint", None),
            "length_r_out": (0x30, "uint", None),
        }
        assert jet.ip_dict["krnl_rtl_2"]["registers"]["fifo_in"]["memory"] == "DDR[1]"
        assert jet.ip_dict["krnl_rtl_1"]["hw_control_protocol"] == "ap_ctrl_hs"
        assert jet.clock_dict["clock0"] == {"name": "DATA_CLK", "frequency": 300, "type": "DATA"}
        kw = XclBin(str(projects["kw"] / "model.xclbin"))
        regs = kw.ip_dict["kernel_wrapper_2"]["registers"]
        assert {k: (r["address_offset"], r["type"], r.get("memory")) for k, r in regs.items() if k != "CTRL"} == {
            "batchsize": (0x10, "unsigned int", None),
            "in": (0x18, "ap_fixed<16, 6> const *", "DDR[1]"),
            "out": (0x24, "ap_fixed<39, 19>*", "DDR[1]"),
        }
        assert "AP_CONTINUE" in regs["CTRL"]["fields"]  # ap_ctrl_chain
        faast = XclBin(str(projects["faast"] / "model.xclbin"))
        assert sorted(faast.ip_dict) == [f"alveo_hls4ml_{i}" for i in range(4)]
        assert [faast.ip_dict[f"alveo_hls4ml_{i}"]["registers"]["out"]["memory"] for i in range(4)] == [
            f"DDR[{i}]" for i in range(4)
        ]
        assert [faast.ip_dict[f"alveo_hls4ml_{i}"]["cu_index"] for i in range(4)] == [0, 1, 2, 3]
        # PYNQ prefers MEM_TOPOLOGY/CONNECTIVITY; an HBM range appears as its banks (MBG list)
        hbm = projects["kw"] / "hbm.xclbin"
        write_xclbin(
            hbm,
            kernel_abi="kernel_wrapper",
            cus=2,
            platform="xilinx_u55c_gen3x16_xdma_3_202210_1",
            project=projects["kw"],
        )
        reg = XclBin(str(hbm)).ip_dict["kernel_wrapper_1"]["registers"]["in"]
        assert reg["MBG"] == [f"HBM[{i}]" for i in range(8)] and reg["memory"] == "HBM[7]"

    def test_cards_register_with_pynq_and_say_they_are_simulated(cards):
        assert DeviceMeta._subclasses[simdev.PROBE_PRIORITY] is simdev.SimulatedAlveoDevice
        assert len(cards) == 2 and [c.tag for c in cards] == ["sim0", "sim1"]
        for c in cards:
            assert c.simulated is True and c.name == DEFAULT_PLATFORM  # the VBNV, as XrtDevice.name
            assert c.has_capability("ERT") and c.has_capability("CALLABLE")

    def test_ert_can_be_switched_off(cards, monkeypatch):
        monkeypatch.setenv(simdev.ENV_ERT, "0")
        simdev.reset_pynq_devices()
        assert not simdev.simulated_cards()[0].has_capability("ERT")

    def test_zero_cards_disables_the_simulator(monkeypatch):
        monkeypatch.setenv(simcard.ENV_CARDS, "0")
        simdev.reset_pynq_devices()
        try:
            assert not [d for d in Device.devices if isinstance(d, simdev.SimulatedAlveoDevice)]
        finally:
            simdev.reset_pynq_devices()

    # -------------------------------------------------------------------------- results
    @pytest.mark.parametrize("start", ["call", "start_ert", "start_sw"])
    def test_krnl_rtl_is_bit_exact_on_both_start_paths(cards, projects, start):
        ol = Overlay(str(projects["jet"] / "model.xclbin"), device=cards[0])
        x = inputs(40, 16).astype(np.float32)
        got = krnl_rtl_call(ol, x, 5, start)
        assert np.array_equal(got, csim(projects["jet"]).predict(x))
        assert cards[0].stats["kernel_completions"] == 1

    def test_ert_packets_carry_the_register_image_and_get_their_state(cards, projects, monkeypatch):
        monkeypatch.setenv(simkernels.ENV_KERNEL_DELAY_MS, "100")
        ol = Overlay(str(projects["jet"] / "model.xclbin"), device=cards[0])
        in_buf = allocate((4, 16), np.float32, target=ol.DDR0)
        out_buf = allocate((4, 5), np.float32, target=ol.DDR0)
        handle = ol.krnl_rtl_1.start(in_buf, out_buf, 64, 20)  # start = start_ert with ERT
        packet = handle._bo.as_packet(ert.ert_start_kernel_cmd)
        assert packet.m_uert.m_start_cmd_struct.state == ert.ert_cmd_state.ERT_CMD_STATE_NEW
        assert packet.cu_mask == 1 and not handle.done
        words = np.frombuffer(bytes(handle._bo.buffer)[8 : 8 + 0x34], dtype="<u4")
        assert words[0x10 // 4] == in_buf.device_address & 0xFFFFFFFF and words[0x28 // 4] == 64
        bo = handle._bo
        handle.wait()  # ErtWaitHandle.wait loops on the device's _handle_events
        assert handle.done and bo.as_packet(ert.ert_cmd_struct).state == ert.ert_cmd_state.ERT_CMD_STATE_COMPLETED
        assert cards[0].active_bos == []

    def test_register_path_ap_done_is_clear_on_read(cards, projects):
        ol = Overlay(str(projects["jet"] / "model.xclbin"), device=cards[1])
        ip = ol.krnl_rtl_1
        assert ip.mmio.read(0) == 0x4  # idle
        in_buf = allocate((2, 16), np.float32, target=ol.DDR0)
        out_buf = allocate((2, 5), np.float32, target=ol.DDR0)
        in_buf.sync_to_device()
        ip.start_sw(in_buf, out_buf, in_buf.size, out_buf.size)
        deadline = time.monotonic() + 5
        while (ctrl := ip.mmio.read(0)) & 0x6 == 0 and time.monotonic() < deadline:
            pass
        assert ctrl & 0xF == 0x6  # done + idle in the same read; ap_ready is a one-cycle pulse
        assert ip.mmio.read(0) == 0x4  # done cleared by the previous read (so PYNQ's WaitHandle,
        # which polls ap_idle, consumes ap_done as it goes)

    def ert_start(device, ol, cu: str, regs: dict[int, tuple[str, int]]):
        """What DefaultIP._start_ert does, by hand: an ert_start_kernel_cmd whose payload is the CU
        register image from CTRL on ({offset: (struct format, value)})."""
        index = device.open_context(ol.ip_dict[cu])
        payload = bytearray(max(off + struct.calcsize(fmt) for off, (fmt, _) in regs.items()))
        for off, (fmt, value) in regs.items():
            struct.pack_into(fmt, payload, off, value)
        bo = device.get_exec_bo()
        packet = bo.as_packet(ert.ert_start_kernel_cmd)
        header = packet.m_uert.m_start_cmd_struct
        header.state, header.unused, header.extra_cu_masks = ert.ert_cmd_state.ERT_CMD_STATE_NEW, 0, 0
        header.count, header.opcode, header.type = len(payload) // 4 + 1, ert.ert_cmd_opcode.ERT_START_CU, 0
        packet.cu_mask = 1 << index
        ctypes.memmove(ctypes.addressof(packet.data), bytes(payload), len(payload))
        return device.execute_bo(bo)

    def test_pynq_cannot_wrap_kernels_with_an_argument_named_in(cards, projects):
        """PYNQ 3.0.1 builds a Python signature from the argument names: hls4ml's kernel_wrapper
        and FaaST's alveo_hls4ml call theirs ``in``, a Python keyword, so DefaultIP fails."""
        ol = Overlay(str(projects["kw"] / "model.xclbin"), device=cards[0])
        with pytest.raises(ValueError, match="'in' is not a valid parameter name"):
            _ = ol.kernel_wrapper_1

    def test_kernel_wrapper_through_pynq(cards, projects):
        folder = projects["kw"]
        ol = Overlay(str(folder / "model.xclbin"), device=cards[0])
        rows = 64
        raw = fixed_raw(inputs(rows, 47, scale=10.0), 16, 10).astype(np.int16)
        in_buf = allocate((rows, 47), np.int16, target=ol.DDR1)
        out_buf = allocate((rows,), np.int64, target=ol.DDR1)
        in_buf[:] = raw
        in_buf.sync_to_device()
        regs = {0x10: ("<I", rows), 0x18: ("<Q", in_buf.device_address), 0x24: ("<Q", out_buf.device_address)}
        ert_start(cards[0], ol, "kernel_wrapper_2", regs).wait()
        out_buf.sync_from_device()
        ref = csim(folder).predict(raw.astype(np.float64) / 2**10)
        assert np.array_equal(np.asarray(out_buf).astype(np.float64).reshape(rows, 1) / 2**20, ref)
        assert cards[0].stats["cus"]["kernel_wrapper_2"]["completed"] == 1

    def test_faast_through_pynq(cards, projects):
        folder = projects["faast"]
        ol = Overlay(str(folder / "model.xclbin"), device=cards[0])
        rows = 100
        raw = fixed_raw(inputs(rows, 16), 16, 10).astype(np.int16)
        in_buf = allocate((16384, 32), np.uint16, target=ol.DDR3)
        out_buf = allocate((16384,), np.uint16, target=ol.DDR3)
        in_buf[:rows, :16] = raw.view(np.uint16)
        in_buf.sync_to_device()
        regs = {0x10: ("<Q", in_buf.device_address), 0x1C: ("<Q", out_buf.device_address)}
        ert_start(cards[0], ol, "alveo_hls4ml_3", regs).wait()
        out_buf.sync_from_device()
        got = np.asarray(out_buf)[:rows].view(np.int16).astype(np.float64) / 2**10
        assert np.array_equal(got.reshape(rows, 1), csim(folder).predict(raw.astype(np.float64) / 2**10))

    # -------------------------------------------------------------------------- XRT's rules under PYNQ
    def test_downloading_again_after_a_hang_needs_a_reset(cards, projects, capfd):
        """PYNQ's download first closes its own CU contexts; with a command hung on one, the
        driver's teardown fails (bad_state), so the download itself is refused with EDEADLK: a
        download never resets a card. Only xbutil reset does, once nothing holds the card."""
        control = Path(os.environ[simcard.ENV_CONTROL_DIR])
        xclbin = str(projects["jet"] / "model.xclbin")
        ol = Overlay(xclbin, device=cards[0])
        (control / "hang-card0").touch()
        in_buf = allocate((4, 16), np.float32, target=ol.DDR0)
        out_buf = allocate((4, 5), np.float32, target=ol.DDR0)
        handle = ol.krnl_rtl_1.start(in_buf, out_buf, 64, 20)
        bo = handle._bo
        cards[0]._handle_events(50)
        assert not handle.done and cards[0].stats["hung"] == ["krnl_rtl_1"]
        capfd.readouterr()
        with pytest.raises(
            RuntimeError, match=r"^Programming Device failed: EDEADLOCK \(35\) Resource deadlock avoided$"
        ):
            Overlay(xclbin, device=cards[0])
        assert "[XRT] ERROR: Please reset device with 'xbutil reset'" in capfd.readouterr().err
        stats = cards[0].stats
        assert (stats["programs"], stats["downloads"], stats["bad_state"]) == (1, 2, True)
        assert bo.as_packet(ert.ert_cmd_struct).state == ert.ert_cmd_state.ERT_CMD_STATE_ABORT
        handle.wait()  # ErtWaitHandle.wait only loops until done: it does not raise...
        assert str(handle._future.exception()) == "Execution failed: 6"  # ...the failure is in the future
        del in_buf, out_buf
        simdev.reset_pynq_devices()  # closes the devices, as process exit would
        gc.collect()
        simcard.reset_card(0)  # what xbutil reset does
        card = simdev.simulated_cards()[0]
        ol = Overlay(xclbin, device=card)
        x = inputs(3, 16).astype(np.float32)
        assert np.array_equal(krnl_rtl_call(ol, x, 5), csim(projects["jet"]).predict(x))

    def test_a_buffer_outside_the_cus_bank_hangs_the_kernel(cards, projects):
        """PYNQ passes raw addresses (no XRT connectivity check): krnl_rtl_1's m_axi_gmem only
        reaches DDR[0], so buffers in DDR[1] make the kernel hang; the reason is in faults."""
        ol = Overlay(str(projects["jet"] / "model.xclbin"), device=cards[0])
        in_buf = allocate((4, 16), np.float32, target=ol.DDR1)
        out_buf = allocate((4, 5), np.float32, target=ol.DDR1)
        handle = ol.krnl_rtl_1.start(in_buf, out_buf, 64, 20)
        cards[0]._handle_events(50)
        assert not handle.done and cards[0].stats["hung"] == ["krnl_rtl_1"]
        assert "the buffer is in DDR[1], but the CU's m_axi_gmem is connected to DDR[0]" in cards[0].stats["faults"][-1]

    def test_a_different_xclbin_with_buffers_allocated_is_refused(cards, projects):
        ol = Overlay(str(projects["jet"] / "model.xclbin"), device=cards[1])
        buf = allocate((16,), np.float32, target=ol.DDR0)
        with pytest.raises(
            RuntimeError,
            match=r"^Programming Device failed: EPERM \(1\) Operation not permitted/Possibly buffers still allocated$",
        ):
            Overlay(str(projects["faast"] / "model.xclbin"), device=cards[1])
        del buf
        gc.collect()
        Overlay(str(projects["faast"] / "model.xclbin"), device=cards[1])
        assert cards[1].stats["programs"] == 2

    def test_flush_releases_the_gil(cards, projects, monkeypatch):
        """PYNQ calls XRT through ctypes, which releases the GIL: other threads run during a sync."""
        monkeypatch.setenv(simcard.ENV_PCIE_GBPS, "0.02")
        ol = Overlay(str(projects["jet"] / "model.xclbin"), device=cards[0])
        buf = allocate((1 << 20,), np.float32, target=ol.DDR0)  # 4 MiB: ~0.2 s at 20 MB/s
        count = [0]
        stop = threading.Event()

        def spin():
            while not stop.is_set():
                count[0] += 1

        t = threading.Thread(target=spin, daemon=True)
        t.start()
        try:
            time.sleep(0.02)
            c0 = count[0]
            buf.sync_to_device()
            during_sync = count[0] - c0
            c1 = count[0]
            time.sleep(0.2)
            during_sleep = count[0] - c1
        finally:
            stop.set()
            t.join()
        assert during_sync > during_sleep / 3, (during_sync, during_sleep)

    # -------------------------------------------------------------------------- telemetry
    def test_telemetry(cards, projects, monkeypatch):
        card = cards[0]
        Overlay(str(projects["jet"] / "model.xclbin"), device=card)
        rails = card.sensors
        assert 11.5 < rails["12v_pex"].voltage.value < 12.5
        assert rails["vccint"].power is not None and rails["vccint"].power.value == 0  # XRT 2.16 never sets mCurrent
        info = card.device_info
        assert info.mName.decode() == DEFAULT_PLATFORM and 20 < info.mOnChipTemp < 100
        assert card.clocks == {"clock0": {"frequency": 300}, "clock1": {"frequency": 500}}
        usage_before = card.get_usage().ddrBOAllocated[0]
        buf = allocate((1000,), np.float32, target=card.get_memory_by_name("DDR[0]"))
        usage = card.get_usage()
        assert usage.ddrMemUsed[0] == buf.nbytes and usage.ddrBOAllocated[0] == usage_before + 1
        monkeypatch.setenv(simcard.ENV_SENSORS, "unreadable")
        info = card.device_info
        assert (info.m12VPex, info.mOnChipTemp, info.mFanRpm) == (0, 0, 0)
        assert card.sensors["12v_pex"].power.value == 0

    def test_concurrent_waits_are_counted(cards, projects, monkeypatch):
        """Two threads waiting on one device call _handle_events at once; real PYNQ races there."""
        monkeypatch.setenv(simkernels.ENV_KERNEL_DELAY_MS, "100")
        ol = Overlay(str(projects["jet"] / "model.xclbin"), device=cards[0])
        bufs = [(allocate((1, 16), np.float32, target=bank), allocate((1, 5), np.float32, target=bank))
                for bank in (ol.DDR0, ol.DDR1)]  # fmt: skip
        handles = [ip.start(i, o, 16, 5) for ip, (i, o) in zip((ol.krnl_rtl_1, ol.krnl_rtl_2), bufs)]
        threads = [threading.Thread(target=h.wait) for h in handles]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert all(h.done for h in handles)
        assert cards[0].stats["pynq_concurrent_handle_events"] >= 1

    def test_legacy_user_pointer_buffers(cards, projects, capfd):
        """PYNQ's binding of XRT's xclAllocUserPtrBO: a buffer over the caller's memory, synced
        straight from it; a driver error escapes XRT's legacy wrapper (the process would abort)."""
        import mmap

        from pynq._3rdparty import xrt as pynq_xrt
        from pynq.buffer import PynqBuffer

        dev = cards[0]
        ol = Overlay(str(projects["jet"] / "model.xclbin"), device=dev)
        x = inputs(40, 16).astype(np.float32)
        memory = mmap.mmap(-1, 2 * mmap.PAGESIZE)
        view = np.frombuffer(memory, np.float32, count=x.size).reshape(x.shape)
        view[:] = x
        bank = ol.DDR0.idx
        bo = pynq_xrt.xclAllocUserPtrBO(dev.handle, view.ctypes.data, len(memory), bank)
        in_buf = PynqBuffer(
            x.shape, np.float32, bo=bo, device=dev, buffer=memory, device_address=dev.get_device_address(bo),
            coherent=False,
        )  # fmt: skip
        out_buf = allocate((len(x), 5), np.float32, target=ol.DDR0)
        in_buf.sync_to_device()
        ol.krnl_rtl_1.call(in_buf, out_buf, x.size, out_buf.size)
        out_buf.sync_from_device()
        assert np.array_equal(np.asarray(out_buf).astype(np.float64), csim(projects["jet"]).predict(x))
        stats = dev.stats
        assert stats["bytes_to_device_userptr"] == x.nbytes == stats["bytes_to_device"]
        buffers = stats["buffers"]
        pynq_xrt.xclFreeBO(dev.handle, bo)
        assert dev.stats["buffers"] == buffers - 1
        with pytest.raises(simcard.SimulationError, match="abort"):
            pynq_xrt.xclAllocUserPtrBO(dev.handle, view.ctypes.data + 4, 4096, bank)
        assert "terminate called after throwing an instance of 'xrt_core::system_error'" in capfd.readouterr().err

    def test_old_module_name_still_imports():
        from fpga_sim import device

        assert device.SimulatedAlveoDevice is simdev.SimulatedAlveoDevice

    _ = sys  # the delegating branch uses sys only indirectly
