"""The simulated Alveo card (tests/fpga_sim) through its test-only ``pyxrt`` (no PYNQ needed).

These tests hold the simulator to XRT's real behaviour (Xilinx/XRT 202410.2.17.319 sources):
the pyxrt binding surface, the driver's load/teardown/reset rules, ERT completion, DMA holding
the GIL, the v++ xclbin layout, and the three kernel ABIs computed bit for bit as the project's
C-simulation computes them. Host-side encodings are written out here by hand (not fpgaserve's
codecs), so a bug on either side shows up as a mismatch. No wall-clock duration is asserted: the
timing model is checked through the simulator's own modelled timeline.
"""

from __future__ import annotations

import gc
import importlib
import json
import math
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

from fpga_sim import card as simcard
from fpga_sim import card_core
from fpga_sim import kernels as simkernels
from fpga_sim.projects import faast_project, kernel_wrapper_project
from fpga_sim.xclbin import (
    BITSTREAM_PLACEHOLDER,
    DEFAULT_PLATFORM,
    read_xclbin,
    shell_info,
    write_hls4ml_xclbin,
    write_xclbin,
)

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
SIM = TESTS / "fpga_sim"
XRT_PYTHON = SIM / "xrt_python"
XBUTIL = SIM / "bin" / "xbutil"


def _import_simulated_pyxrt(version: str | None = None):
    """The test-only pyxrt, imported without leaving it importable for other test modules (a
    module that probes ``import pyxrt`` must keep seeing the host as it is); ``version``: the
    XRT release it presents (FPGASERVE_SIM_XRT_VERSION)."""
    sys.path.insert(0, str(XRT_PYTHON))
    saved = os.environ.pop("FPGASERVE_SIM_XRT_VERSION", None)
    if version:
        os.environ["FPGASERVE_SIM_XRT_VERSION"] = version
    try:
        module = importlib.import_module("pyxrt")
    finally:
        sys.path.remove(str(XRT_PYTHON))
        sys.modules.pop("pyxrt", None)
        os.environ.pop("FPGASERVE_SIM_XRT_VERSION", None)
        if saved is not None:
            os.environ["FPGASERVE_SIM_XRT_VERSION"] = saved
    assert module.SIMULATED is True, "a real pyxrt shadows the simulator"
    return module


pyxrt = _import_simulated_pyxrt()
pyxrt220 = _import_simulated_pyxrt("2.20.197")  # XRT 2.20's binding: pyxrt.ext, buffers over user memory
TO_DEVICE = pyxrt.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE
FROM_DEVICE = pyxrt.xclBOSyncDirection.XCL_BO_SYNC_BO_FROM_DEVICE
COMPLETED = pyxrt.ert_cmd_state.ERT_CMD_STATE_COMPLETED
TIMEOUT = pyxrt.ert_cmd_state.ERT_CMD_STATE_TIMEOUT
NEW = pyxrt.ert_cmd_state.ERT_CMD_STATE_NEW
NULL_UUID = "00000000-0000-0000-0000-000000000000"
SIM_ENV = [
    simcard.ENV_CARDS,
    simcard.ENV_CONTROL_DIR,
    simcard.ENV_PLATFORM,
    simcard.ENV_INTERFACE_UUID,
    simcard.ENV_PCIE_GBPS,
    simcard.ENV_RENDEZVOUS,
    simcard.ENV_RENDEZVOUS_TIMEOUT,
    simcard.ENV_SENSORS,
    simkernels.ENV_KERNEL_II,
    simkernels.ENV_KERNEL_LATENCY,
    simkernels.ENV_KERNEL_CLOCK_MHZ,
    simkernels.ENV_KERNEL_DELAY_MS,
    simcard.ENV_DEVICE,
]


# ------------------------------------------------------------------------------ projects
@pytest.fixture(scope="module")
def projects(tmp_path_factory):
    """Version folders (project + xclbin) for every ABI; the C-simulations compile once each."""
    root = tmp_path_factory.mktemp("fpga_sim")
    out = {}
    # hls4ml VivadoAccelerator krnl_rtl: the bundled projects, two CUs on DDR[0] / DDR[1]
    for name in ("jet_tagger", "facile"):
        folder = root / name
        shutil.copytree(ROOT / "bitstreams" / name / "1", folder)
        write_hls4ml_xclbin(folder / "model.xclbin", cu=["krnl_rtl_1", "krnl_rtl_2"])
        out[name] = folder
    # hls4ml VitisAccelerator kernel_wrapper (PR #991) from FACILE's firmware: native elements
    # (input ap_fixed<16,6> in 2 bytes, result ap_fixed<39,19> in 8), HW_Quant, and the legacy
    # 2-argument kernel with a compile-time Batchsize
    for key, kw, legacy in (
        ("kw", {"num_kernel": 2}, False),
        ("kwq", {"num_kernel": 1, "hw_quant": True}, False),
        ("kwl", {"num_kernel": 1, "batchsize": 64}, True),
    ):
        folder = kernel_wrapper_project(ROOT / "bitstreams" / "facile" / "1", root / key, **kw)
        write_xclbin(
            folder / "model.xclbin", kernel_abi="kernel_wrapper", cus=kw["num_kernel"], project=folder, legacy=legacy
        )
        out[key] = folder
    # FaaST alveo_hls4ml: 4 CUs, each on its own bank
    folder = faast_project(root / "faast")
    write_xclbin(folder / "model.xclbin", kernel_abi="faast", project=folder)
    out["faast"] = folder
    return out


def _simulated_cards(tmp_path, monkeypatch, mode: str):
    why = card_core.unavailable()
    if why:
        pytest.skip(why)
    for name in SIM_ENV:
        monkeypatch.delenv(name, raising=False)
    control = tmp_path / "control"
    control.mkdir()
    monkeypatch.setenv(simcard.ENV_DEVICE, mode)
    monkeypatch.setenv(simcard.ENV_CARDS, "2")
    monkeypatch.setenv(simcard.ENV_CONTROL_DIR, str(control))
    simcard.forget_cards()
    pyxrt._REGISTERED.clear()
    pyxrt220._REGISTERED.clear()
    yield control
    gc.collect()
    simcard.forget_cards()
    pyxrt._REGISTERED.clear()
    pyxrt220._REGISTERED.clear()
    simcard.disarm_rendezvous()


@pytest.fixture
def sim(tmp_path, monkeypatch):
    """Two fresh simulated cards with a control folder, their work done by the card core
    (FPGASERVE_SIM_DEVICE=inline); every simulator object of the test is closed afterwards (as
    at process exit)."""
    yield from _simulated_cards(tmp_path, monkeypatch, "inline")


@pytest.fixture
def sim_timing(tmp_path, monkeypatch):
    """``sim`` with FPGASERVE_SIM_DEVICE=timing: the card's time without its work."""
    yield from _simulated_cards(tmp_path, monkeypatch, "timing")


def csim(folder: Path):
    from fpgaserve.backends.hls4ml.csim import CsimLibrary
    from fpgaserve.backends.hls4ml.project import Hls4mlProject

    return CsimLibrary.load(Hls4mlProject.load(folder))


def open_kernel(folder: Path, name: str = "krnl_rtl", index: int = 0, xclbin: str = "model.xclbin"):
    d = pyxrt.device(index)
    uid = d.load_xclbin(str(folder / xclbin))
    return d, uid, pyxrt.kernel(d, uid, name)


def fixed_raw(x: np.ndarray, width: int, frac: int) -> np.ndarray:
    """double -> ap_fixed<width, width-frac> raw bits with hls4ml's default AP_TRN, AP_WRAP."""
    raw = np.floor(np.asarray(x, dtype=np.float64) * 2.0**frac).astype(np.int64)
    return (raw + 2 ** (width - 1)) % 2**width - 2 ** (width - 1)


def inputs(rows: int, n: int, seed: int = 5, scale: float = 4.0) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, scale, size=(rows, n))


def run_krnl_rtl(d, k, x: np.ndarray, n_out: int, group: int | None = None) -> np.ndarray:
    """hls4ml's Alveo driver flow for float T_in/T_out: one float32 word per element."""
    rows, n_in = x.shape
    g = k.group_id(0) if group is None else group
    bi = pyxrt.bo(d, rows * n_in * 4, pyxrt.bo.normal, g)
    bo = pyxrt.bo(d, rows * n_out * 4, pyxrt.bo.normal, g)
    bi.write(np.ascontiguousarray(x, dtype="<f4"), 0)
    bi.sync(TO_DEVICE)
    r = k(bi, bo, rows * n_in, rows * n_out)
    assert r.wait(5000) == COMPLETED
    bo.sync(FROM_DEVICE)
    return np.frombuffer(bo.map(), dtype="<f4").reshape(rows, n_out).copy()


def close(a: float, b: float) -> bool:
    """Equal up to float rounding of times measured on the monotonic clock (~1e-11 s)."""
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def stats_file(control: Path, index: int, ready) -> dict:
    """stats-card<N>.json once ``ready(stats)`` holds (the card writes it within 50 ms of a change)."""
    deadline = time.monotonic() + 5
    while True:
        stats = json.loads((control / f"stats-card{index}.json").read_text())
        if ready(stats) or time.monotonic() > deadline:
            return stats
        time.sleep(0.01)


# ------------------------------------------------------------------------------ xclbin layout
def _sections(blob: bytes) -> list[tuple[int, str, int, int]]:
    (n,) = struct.unpack_from("<I", blob, 304 + 144)
    out = []
    for i in range(n):
        kind, name, off, size = struct.unpack_from("<I16s4xQQ", blob, 456 + 40 * i)
        out.append((kind, name.rstrip(b"\0").decode(), off, size))
    return out


def test_xclbin_header_and_sections_are_laid_out_as_v_plus_plus_writes_them(tmp_path):
    path = tmp_path / "k.xclbin"
    uid = write_xclbin(path, kernel_abi="krnl_rtl", cus=2, cu_banks=["DDR[0]", "DDR[1]"], clock_mhz=250)
    blob = path.read_bytes()
    assert blob[:8] == b"xclbin2\0" and struct.unpack_from("<i", blob, 8)[0] == -1
    assert blob[12:40] == b"\xff" * 28 and blob[40:296] == b"\xff" * 256
    length, _ts, rom_ts, _patch, major, minor, mode, _mask = struct.unpack_from("<QQQHBBHH", blob, 304)
    assert length == len(blob)  # m_length: the exact file size, mirror data included
    assert (major, minor, mode) == (2, 14, 1)  # XCLBIN_PR on Alveo's partial-reconfiguration shells
    shell = shell_info(DEFAULT_PLATFORM)
    assert blob[304 + 32 : 304 + 48].hex() == shell.interface_uuid != ""  # m_interface_uuid at header+32
    assert rom_ts == 0  # 2RP shells match by interface uuid, not feature-ROM timestamp
    assert blob[304 + 48 : 304 + 112].rstrip(b"\0").decode() == DEFAULT_PLATFORM
    assert blob[304 + 112 : 304 + 128].hex() == uid
    sections = _sections(blob)
    assert [s[0] for s in sections] == [0, 6, 8, 7, 11, 14, 2, 26, 27]  # BITSTREAM ... GROUP_*
    for _kind, _name, off, size in sections:
        assert off % 8 == 0 and off + size <= len(blob)
    by_kind = {k: blob[o : o + s] for k, _n, o, s in sections}
    assert by_kind[0] == BITSTREAM_PLACEHOLDER and b"not a bitstream" in by_kind[0]
    assert blob.rstrip(b"\0").endswith(b"XCLBIN_MIRROR_DATA_END")
    # array sections: [count][pad to the element alignment][elements], sizes exact
    mem, ips, conn, clk = by_kind[6], by_kind[8], by_kind[7], by_kind[11]
    assert len(mem) == 8 + 40 * struct.unpack_from("<i", mem)[0] and mem[4:8] == b"\0" * 4
    assert len(ips) == 8 + 80 * 2 and len(conn) == 4 + 12 * struct.unpack_from("<i", conn)[0]
    assert len(clk) == 2 + 136 * 2
    names = [ips[8 + 80 * i + 16 : 8 + 80 * i + 80].rstrip(b"\0").decode() for i in range(2)]
    assert names == ["krnl_rtl:krnl_rtl_1", "krnl_rtl:krnl_rtl_2"]  # "kernel:cu"
    props = [struct.unpack_from("<I", ips, 8 + 80 * i + 4)[0] for i in range(2)]
    assert props == [0x0001, 0x0003]  # ap_ctrl_hs, interrupt enabled, interrupt ids 0 and 1
    links = [struct.unpack_from("<iii", conn, 4 + 12 * i) for i in range(4)]
    assert links == [(0, 0, 0), (1, 0, 0), (0, 1, 1), (1, 1, 1)]  # arg_index = XML arg id, m_axi_gmem's bank
    clocks = [struct.unpack_from("<HB5x128s", clk, 2 + 136 * i) for i in range(2)]
    assert [(f, t, n.rstrip(b"\0")) for f, t, n in clocks] == [(250, 1, b"DATA_CLK"), (500, 2, b"KERNEL_CLK")]
    meta = json.loads(by_kind[14])["build_metadata"]["xclbin"]
    assert meta["generated_by"]["name"] == "v++" and "SIMULATED" in meta["generated_by"]["options"]
    xml = by_kind[2].decode()
    assert '<kernel name="krnl_rtl" language="ip_c" vlnv="fastmachinelearning.org:hls4ml:krnl_rtl:1.0"' in xml
    assert 'hwControlProtocol="ap_ctrl_hs"' in xml
    for line in (
        '<arg name="fifo_in" addressQualifier="1" id="0" port="m_axi_gmem" size="0x8" offset="0x10"',
        '<arg name="fifo_out" addressQualifier="1" id="1" port="m_axi_gmem" size="0x8" offset="0x1C"',
        '<arg name="length_r_in" addressQualifier="0" id="2" port="s_axi_control" size="0x4" offset="0x28"',
        '<arg name="length_r_out" addressQualifier="0" id="3" port="s_axi_control" size="0x4" offset="0x30"',
        '<port name="m_axi_gmem" mode="master" range="0xFFFFFFFFFFFFFFFF" dataWidth="32"',
    ):
        assert line in xml
    assert write_xclbin(tmp_path / "k2.xclbin") != uid  # every file its own uuid


def test_kernel_xml_of_each_flow(tmp_path, projects):
    kw = tmp_path / "kw.xclbin"
    write_xclbin(kw, kernel_abi="kernel_wrapper", cus=3, project=projects["kw"])
    xb = read_xclbin(kw)
    args = [(a.id, a.name, a.address_qualifier, a.port, a.offset, a.type) for a in xb.kernels["kernel_wrapper"].args]
    assert args == [
        (0, "batchsize", 0, "S_AXI_CONTROL", 0x10, "unsigned int"),
        (1, "in", 1, "M_AXI_GMEM0", 0x18, "ap_fixed<16, 6> const *"),
        (2, "out", 1, "M_AXI_GMEM1", 0x24, "ap_fixed<39, 19>*"),
    ]
    assert 'type="ap_fixed&lt;16, 6> const *"' in xb.section(2).decode()  # XML-escaped as v++ does
    assert [cu.name for cu in xb.cus] == ["kernel_wrapper_1", "kernel_wrapper_2", "kernel_wrapper_3"]
    assert [sorted(cu.arg_banks[1]) for cu in xb.cus] == [[0], [1], [2]]  # each CU on its own DDR
    legacy = tmp_path / "legacy.xclbin"
    write_xclbin(legacy, kernel_abi="kernel_wrapper", project=projects["kwq"], legacy=True)
    args = [(a.id, a.name, a.offset, a.type) for a in read_xclbin(legacy).kernels["kernel_wrapper"].args]
    assert args == [(0, "in", 0x10, "float const *"), (1, "out", 0x1C, "float*")]  # HW_Quant: float
    faast = tmp_path / "faast.xclbin"
    write_xclbin(faast, kernel_abi="faast", platform="xilinx_u250_xdma_201830_2")
    xb = read_xclbin(faast)
    k = xb.kernels["alveo_hls4ml"]
    assert [(a.name, a.port, a.offset, a.type) for a in k.args] == [
        ("in", "M_AXI_GMEM", 0x10, "ap_uint<512> const *"),
        ("out", "M_AXI_GMEM", 0x1C, "ap_uint<512>*"),
    ]
    assert k.ports["M_AXI_GMEM"][2] == 512
    assert [cu.name for cu in xb.cus] == [f"alveo_hls4ml_{i}" for i in range(4)]
    # the U250 201830 shell's SP tags, and its feature-ROM timestamp in the header (flat shell)
    assert [xb.mems[next(iter(cu.arg_banks[0]))].tag for cu in xb.cus] == ["bank0", "bank1", "bank2", "bank3"]
    assert xb.interface_uuid == "" and xb.feature_rom_timestamp == shell_info("xilinx_u250_xdma_201830_2").rom_timestamp


def test_hbm_ranges_get_memory_bank_groups(tmp_path):
    path = tmp_path / "hbm.xclbin"
    write_xclbin(path, kernel_abi="kernel_wrapper", cus=4, platform="xilinx_u55c_gen3x16_xdma_3_202210_1")
    xb = read_xclbin(path)
    assert len(xb.mems) == 35 and len(xb.groups) == 43  # 32 HBM + 3 PLRAM, then 8 MBG groups
    first = xb.cus[0]
    assert sorted(first.arg_banks[1]) == [0, 1, 2, 3] and sorted(first.arg_banks[2]) == [4, 5, 6, 7]
    g_in, g_out = xb.groups[first.arg_mems[1][0]], xb.groups[first.arg_mems[2][0]]
    assert (g_in.tag, g_in.members, g_in.size) == ("MBG[0:3]", (0, 1, 2, 3), 4 * (512 << 20))
    assert g_out.tag == "MBG[4:7]"


def test_write_hls4ml_xclbin_keeps_its_signature(tmp_path):
    uid = write_hls4ml_xclbin(
        tmp_path / "a.xclbin", cu=["krnl_rtl_1", "krnl_rtl_2"], platform="xilinx_u250_xdma_201830_2",
        banks=("bank0", "bank1", "bank2", "bank3"), cu_banks=("bank2", "bank0"), xclbin_uuid="12345678-1234-5678-1234-567812345678",
    )  # fmt: skip
    assert uid == "12345678123456781234567812345678"
    xb = read_xclbin(tmp_path / "a.xclbin")
    assert [sorted(cu.arg_banks[0]) for cu in xb.cus] == [[2], [0]]
    assert [m.used for m in xb.mems] == [True, False, True, False]  # only connected banks used


# ------------------------------------------------------------------------------ pyxrt surface
def test_pyxrt_enums_behave_like_pybind11():
    s = pyxrt.ert_cmd_state
    assert int(s.ERT_CMD_STATE_COMPLETED) == 4 and s.ERT_CMD_STATE_COMPLETED == 4  # plain C enum
    assert not hasattr(s, "ERT_CMD_STATE_RUNNING") and not hasattr(s, "ERT_CMD_STATE_MAX")
    assert str(s(3)) == "ert_cmd_state.???" and repr(s.ERT_CMD_STATE_NEW) == "<ert_cmd_state.ERT_CMD_STATE_NEW: 1>"
    assert s.ERT_CMD_STATE_TIMEOUT.name == "ERT_CMD_STATE_TIMEOUT" and s(4) == s.ERT_CMD_STATE_COMPLETED
    assert sorted(s.__members__)[0] == "ERT_CMD_STATE_ABORT" and len(s.__members__) == 10
    assert pyxrt.xrt_info_device.bdf != 0  # enum class: strict
    assert pyxrt.bo.flags.normal != 0 and pyxrt.bo.normal == pyxrt.bo.flags.normal  # exported to bo
    assert pyxrt.kernel.shared == pyxrt.kernel.cu_access_mode.shared and pyxrt.error == pyxrt.xrt_msg_level.error
    assert not hasattr(pyxrt, "XCL_BO_SYNC_BO_TO_DEVICE") and not hasattr(pyxrt, "ERT_CMD_STATE_NEW")
    with pytest.raises(TypeError):
        _ = s.ERT_CMD_STATE_NEW < s.ERT_CMD_STATE_COMPLETED
    assert pyxrt.SIMULATED is True and pyxrt.XCL_BO_FLAGS_NONE == 0


def test_device_identity_and_get_info(sim):
    assert pyxrt.enumerate_devices() == 2
    d = pyxrt.device(1)
    info = pyxrt.xrt_info_device
    assert d.get_info(info.bdf) == "0000:66:00.1"
    assert d.get_info(info.name) == DEFAULT_PLATFORM  # the shell VBNV, unmarked (shell matching)
    assert (
        d.get_info(info.interface_uuid) == pyxrt.uuid._from_hex(shell_info(DEFAULT_PLATFORM).interface_uuid).to_string()
    )
    assert pyxrt.device("66:00.1").get_info(info.bdf) == "0000:66:00.1"
    assert d.get_xclbin_uuid().to_string() == NULL_UUID
    for key in info.__members__.values():
        value = d.get_info(key)
        assert isinstance(value, str)
        if value.startswith("{"):
            _assert_string_leaves(json.loads(value))
    assert json.loads(d.get_info(info.host))["simulated"] == "true"
    platform = json.loads(d.get_info(info.platform))["platforms"][0]
    assert platform["simulated"] == "true" and platform["static_region"]["vbnv"] == DEFAULT_PLATFORM
    assert "\\/" in d.get_info(info.host)  # boost's write_json escapes '/'
    assert d.get_info(info.vmr) == "{\n}\n"
    with pytest.raises(RuntimeError, match=r"^ No such device with index '2'$"):
        pyxrt.device(2)
    with pytest.raises(RuntimeError, match=r"^No such device '0000:99:00.1': Invalid argument$"):
        pyxrt.device("0000:99:00.1")
    with pytest.raises(TypeError):
        pyxrt.device(-1)
    with pytest.raises(TypeError):
        d.get_info(5)  # an int is not an xrt_info_device
    with pytest.raises(TypeError):
        pyxrt.device(index=0)  # no keyword arguments before XRT 2.23


def _assert_string_leaves(tree) -> None:
    if isinstance(tree, dict):
        for v in tree.values():
            _assert_string_leaves(v)
    elif isinstance(tree, list):
        for v in tree:
            _assert_string_leaves(v)
    else:
        assert isinstance(tree, str), tree


def test_xclbin_metadata_and_uuid(sim, projects):
    xb = pyxrt.xclbin(str(projects["kw"] / "model.xclbin"))
    assert [k.get_name() for k in xb.get_kernels()] == ["kernel_wrapper"] and xb.get_kernels()[0].get_num_args() == 3
    assert xb.get_xsa_name() == DEFAULT_PLATFORM
    used = [(m.get_index(), m.get_tag(), m.get_size_kb()) for m in xb.get_mems() if m.get_used()]
    assert used == [(0, "DDR[0]", 16 << 20), (1, "DDR[1]", 16 << 20)]
    u = xb.get_uuid().to_string()
    assert u == u.lower() and len(u) == 36 and pyxrt.uuid(u.upper()).to_string() == u
    with pytest.raises(RuntimeError, match=r"^Failed to open file '/nonexistent.xclbin' for reading$"):
        pyxrt.xclbin("/nonexistent.xclbin")
    bogus = projects["kw"] / "not.xclbin"
    bogus.write_bytes(b"\0" * 1024)
    with pytest.raises(RuntimeError, match=r"^Invalid xclbin$"):
        pyxrt.xclbin(str(bogus))


# ------------------------------------------------------------------------------ results
@pytest.mark.parametrize("name,n_in,n_out", [("jet_tagger", 16, 5), ("facile", 47, 1)])
def test_krnl_rtl_is_bit_exact(sim, projects, name, n_in, n_out):
    d, _uid, k = open_kernel(projects[name], "krnl_rtl:{krnl_rtl_1}")
    x = inputs(100, n_in).astype(np.float32)
    got = run_krnl_rtl(d, k, x, n_out)
    ref = csim(projects[name]).predict(x)
    assert np.array_equal(got.astype(np.float64), ref) and np.abs(ref).max() > 0


def test_kernel_wrapper_native_elements_are_bit_exact(sim, projects):
    """FACILE's input_t ap_fixed<16,6> travels in 2 bytes, result_t ap_fixed<39,19> in 8 bytes,
    sign-extended; row-major in[i*N_IN+j]; batchsize = rows."""
    folder = projects["kw"]
    d, _uid, k = open_kernel(folder, "kernel_wrapper")
    rows, n_in = 300, 47
    x = inputs(rows, n_in, scale=20.0)  # past +-32: the host's conversion wraps (AP_WRAP)
    raw_in = fixed_raw(x, 16, 10).astype("<i2")
    bi = pyxrt.bo(d, raw_in.nbytes, pyxrt.bo.normal, k.group_id(1))
    bo = pyxrt.bo(d, rows * 8, pyxrt.bo.normal, k.group_id(2))
    bi.write(raw_in, 0)
    bi.sync(TO_DEVICE)
    r = k(rows, bi, bo)
    assert r.wait(5000) == COMPLETED
    bo.sync(FROM_DEVICE)
    raw_out = np.frombuffer(bo.map(), dtype="<i8")
    assert ((raw_out >= -(2**38)) & (raw_out < 2**38)).all()  # sign-extended 39-bit values
    assert (raw_out < 0).any() or (raw_out > 0).all()
    ref = csim(folder).predict(raw_in.astype(np.float64) / 2**10)
    assert np.array_equal(raw_out.astype(np.float64).reshape(rows, 1) / 2**20, ref)
    assert k.group_id(0) == 0xFFFF  # batchsize: no memory connection (XRT's -1 in 16 bits)
    stats = d._simcard.stats
    assert stats["cus"]["kernel_wrapper_1"]["rows"] == rows and stats["cus"]["kernel_wrapper_2"]["commands"] == 0


def test_kernel_wrapper_ignores_bits_above_the_element_width(sim, projects):
    """The kernel reads only input_t's 16 bits of each 2-byte container... and with batchsize 0
    does nothing and completes."""
    folder = projects["kw"]
    d, _uid, k = open_kernel(folder, "kernel_wrapper:{kernel_wrapper_2}")
    rows = 4
    raw = fixed_raw(inputs(rows, 47), 16, 10).astype("<i2")
    bi = pyxrt.bo(d, raw.nbytes, pyxrt.bo.normal, k.group_id(1))
    bo = pyxrt.bo(d, rows * 8, pyxrt.bo.normal, k.group_id(2))
    bi.write(raw, 0)
    bi.sync(TO_DEVICE)
    assert k(0, bi, bo).wait(1000) == COMPLETED
    bo.sync(FROM_DEVICE)
    assert bytes(bo.map()) == b"\xa5" * (rows * 8)  # nothing written: uninitialised DDR
    assert k(rows, bi, bo).wait(1000) == COMPLETED
    bo.sync(FROM_DEVICE)
    ref = csim(folder).predict(raw.astype(np.float64) / 2**10)
    assert np.array_equal(np.frombuffer(bo.map(), dtype="<i8").reshape(rows, 1) / 2**20, ref)


def test_kernel_wrapper_on_hbm_uses_memory_bank_groups(sim, projects, monkeypatch):
    """A U55C: each CU's ``in`` and ``out`` on their own range of HBM pseudo-channels (PR #991's
    ``sp=kernel_wrapper_1.in:HBM[0:3]``); XRT's group_id is the MBG group, and the xclbin's VBNV
    is the platform name while the card reports its shell's (2RP: matched by interface uuid)."""
    monkeypatch.setenv(simcard.ENV_PLATFORM, "xilinx_u55c_gen3x16_xdma_base_3")
    simcard.forget_cards()
    folder = projects["kw"]
    path = folder / "u55c.xclbin"
    write_xclbin(
        path, kernel_abi="kernel_wrapper", cus=2, platform="xilinx_u55c_gen3x16_xdma_3_202210_1", project=folder
    )
    d, _uid, k = open_kernel(folder, "kernel_wrapper:{kernel_wrapper_2}", xclbin="u55c.xclbin")
    assert d.get_info(pyxrt.xrt_info_device.name) != pyxrt.xclbin(str(path)).get_xsa_name()
    groups = d._simcard.xclbin.groups
    # channels // (2 * Num_Kernel) = 8 pseudo-channels per argument: CU 2 gets HBM[16:23] and [24:31]
    assert (groups[k.group_id(1)].tag, groups[k.group_id(2)].tag) == ("MBG[16:23]", "MBG[24:31]")
    rows = 20
    raw = fixed_raw(inputs(rows, 47), 16, 10).astype("<i2")
    bi = pyxrt.bo(d, raw.nbytes, pyxrt.bo.normal, k.group_id(1))
    bo = pyxrt.bo(d, rows * 8, pyxrt.bo.normal, k.group_id(2))
    assert 16 * (512 << 20) <= bi.address() < 24 * (512 << 20)
    bi.write(raw, 0)
    bi.sync(TO_DEVICE)
    assert k(rows, bi, bo).wait(1000) == COMPLETED
    bo.sync(FROM_DEVICE)
    ref = csim(folder).predict(raw.astype(np.float64) / 2**10)
    assert np.array_equal(np.frombuffer(bo.map(), dtype="<i8").reshape(rows, 1) / 2**20, ref)


def test_kernel_wrapper_hw_quant_takes_float32(sim, projects):
    folder = projects["kwq"]
    d, _uid, k = open_kernel(folder, "kernel_wrapper")
    x = inputs(50, 47).astype("<f4")
    bi = pyxrt.bo(d, x.nbytes, pyxrt.bo.normal, k.group_id(1))
    bo = pyxrt.bo(d, 50 * 4, pyxrt.bo.normal, k.group_id(2))
    bi.write(x, 0)
    bi.sync(TO_DEVICE)
    assert k(50, bi, bo).wait(1000) == COMPLETED
    bo.sync(FROM_DEVICE)
    # the kernel converts float -> input_t and (float) result_t: one rounding to float32
    ref = csim(folder).predict(x).astype(np.float32)
    assert np.array_equal(np.frombuffer(bo.map(), dtype="<f4").reshape(50, 1), ref)


def test_legacy_kernel_wrapper_always_runs_batchsize_rows(sim, projects):
    folder = projects["kwl"]  # AcceleratorConfig.Batchsize: 64
    d, _uid, k = open_kernel(folder, "kernel_wrapper")
    x = np.zeros((64, 47))
    x[:10] = inputs(10, 47)
    raw = fixed_raw(x, 16, 10).astype("<i2")
    bi = pyxrt.bo(d, raw.nbytes, pyxrt.bo.normal, k.group_id(0))
    bo = pyxrt.bo(d, 64 * 8, pyxrt.bo.normal, k.group_id(1))
    bi.write(raw, 0)
    bi.sync(TO_DEVICE)
    assert k(bi, bo).wait(1000) == COMPLETED
    bo.sync(FROM_DEVICE)
    ref = csim(folder).predict(raw.astype(np.float64) / 2**10)
    assert np.array_equal(np.frombuffer(bo.map(), dtype="<i8").reshape(64, 1) / 2**20, ref)
    # a buffer for fewer rows than BATCHSIZE: the kernel reads past it -> the simulator hangs it
    small = pyxrt.bo(d, 10 * 47 * 2, pyxrt.bo.normal, k.group_id(0))
    assert k(small, bo).wait(50) == TIMEOUT
    assert "not inside one buffer allocated on this card" in d._simcard.stats["faults"][-1]


def test_faast_packs_16_bit_fields_and_runs_16384_rows(sim, projects):
    folder = projects["faast"]
    d, _uid, k = open_kernel(folder, "alveo_hls4ml:{alveo_hls4ml_2}")
    rows = 1000
    x = inputs(rows, 16, scale=3.0)
    beats = np.zeros((16384, 32), dtype="<u2")  # one 512-bit beat per row; fields 16..31 unused
    beats[:rows, :16] = fixed_raw(x, 16, 10).astype(np.int16).view(np.uint16)
    beats[:rows, 16:] = 0xBEEF  # fields >= N_IN are ignored by the kernel
    bi = pyxrt.bo(d, beats.nbytes, pyxrt.bo.normal, k.group_id(0))
    bo = pyxrt.bo(d, 512 * 64, pyxrt.bo.normal, k.group_id(1))
    bi.write(beats, 0)
    bi.sync(TO_DEVICE)
    assert k(bi, bo).wait(5000) == COMPLETED
    bo.sync(FROM_DEVICE)
    out = np.frombuffer(bo.map(), dtype="<u2")  # 32 rows per beat: row r is field r
    values = out[:rows].astype(np.uint16).view(np.int16).astype(np.float64) / 2**10
    ref = csim(folder).predict(fixed_raw(x, 16, 10).astype(np.float64) / 2**10)
    assert np.array_equal(values.reshape(rows, 1), ref)
    stats = d._simcard.stats
    assert stats["cus"]["alveo_hls4ml_2"]["rows"] == 16384  # padding rows are computed too
    assert [stats["cus"][f"alveo_hls4ml_{i}"]["commands"] for i in range(4)] == [0, 0, 1, 0]


# ------------------------------------------------------------------------------ buffers and DMA
def test_host_and_device_copies_are_separate(sim, projects):
    folder = projects["jet_tagger"]
    d, _uid, k = open_kernel(folder, "krnl_rtl:{krnl_rtl_1}")
    x = inputs(8, 16).astype("<f4")
    bi = pyxrt.bo(d, x.nbytes, pyxrt.bo.normal, k.group_id(0))
    bo = pyxrt.bo(d, 8 * 5 * 4, pyxrt.bo.normal, k.group_id(1))
    view = bi.map()
    assert isinstance(view, memoryview) and view.format == "B" and not view.readonly and len(view) == x.nbytes
    view[:] = x.tobytes()  # the host copy only
    r = k(bi, bo, 8 * 16, 8 * 5)
    assert r.wait(1000) == COMPLETED
    bo.sync(FROM_DEVICE)
    stale = np.frombuffer(bo.map(), dtype="<f4").reshape(8, 5)
    ref = csim(folder).predict(x)
    assert not np.array_equal(stale.astype(np.float64), ref)  # the kernel saw 0xA5 bytes
    back = bo.read(8, 0)
    assert back.dtype == np.int8 and back.tolist() == list(np.frombuffer(bytes(bo.map())[:8], dtype=np.int8))
    bi.sync(TO_DEVICE)
    assert k(bi, bo, 8 * 16, 8 * 5).wait(1000) == COMPLETED
    assert not np.array_equal(np.frombuffer(bo.map(), dtype="<f4").reshape(8, 5).astype(np.float64), ref)  # no sync yet
    bo.sync(FROM_DEVICE)
    assert np.array_equal(np.frombuffer(bo.map(), dtype="<f4").reshape(8, 5).astype(np.float64), ref)
    with pytest.raises(RuntimeError, match=r"^attempting to write past buffer size: Invalid argument$"):
        bi.write(b"\0" * 8, x.nbytes - 4)
    with pytest.raises(RuntimeError, match=r"^attempting to read past buffer size: Invalid argument$"):
        bi.read(8, x.nbytes - 4)
    sub = pyxrt.bo(bi, 64, 64)
    assert sub.address() == bi.address() + 64 and sub.size() == 64
    with pytest.raises(RuntimeError, match="Invalid offset and size when syncing sub buffer"):
        sub.sync(TO_DEVICE, 64, 32)
    before = d._simcard.stats["bytes_to_device"]
    bi.sync(TO_DEVICE, x.nbytes, 64)  # past the end: XRT 2.17 ignores the driver's EINVAL
    assert d._simcard.stats["bytes_to_device"] == before
    with pytest.raises(RuntimeError, match=r"^failed to allocate bo: Invalid argument$"):
        pyxrt.bo(d, 64, pyxrt.bo.normal, 2)  # DDR[2] is not used by this xclbin
    with pytest.raises(TypeError):
        pyxrt.bo(d, 64, 0, k.group_id(0))  # flags must be a bo.flags
    dev_only = pyxrt.bo(d, 64, pyxrt.bo.device_only, k.group_id(0))
    with pytest.raises(RuntimeError, match="device only buffer has no host buffer"):
        dev_only.map()


def test_sync_blocks_holding_the_gil(sim, projects, monkeypatch):
    """pyxrt's bo.sync never releases the GIL: another Python thread makes (almost) no progress
    while a transfer is modelled, while it runs freely during a plain sleep of that length."""
    monkeypatch.setenv(simcard.ENV_PCIE_GBPS, "0.02")  # 20 MB/s: 4 MiB take ~0.2 s
    d, _uid, k = open_kernel(projects["jet_tagger"], "krnl_rtl:{krnl_rtl_1}")
    b = pyxrt.bo(d, 4 << 20, pyxrt.bo.normal, k.group_id(0))
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
        b.sync(TO_DEVICE)
        during_sync = count[0] - c0
        c1 = count[0]
        time.sleep(0.2)
        during_sleep = count[0] - c1
    finally:
        stop.set()
        t.join()
    assert during_sync < during_sleep / 3, (during_sync, during_sleep)
    chan, begin, end, size = d._simcard.dma_log[-1]
    assert (chan, size) == ("h2c", 4 << 20) and close(end - begin, (4 << 20) / 0.02e9)


def test_dma_channels_serialize_per_direction(sim, projects, monkeypatch):
    monkeypatch.setenv(simcard.ENV_PCIE_GBPS, "1")
    d, _uid, k = open_kernel(projects["jet_tagger"], "krnl_rtl:{krnl_rtl_1}")
    a = pyxrt.bo(d, 1 << 20, pyxrt.bo.normal, k.group_id(0))
    b = pyxrt.bo(d, 1 << 20, pyxrt.bo.normal, k.group_id(0))
    a.sync(TO_DEVICE)
    b.sync(TO_DEVICE)
    a.sync(FROM_DEVICE)
    log = list(d._simcard.dma_log)[-3:]
    assert [x[0] for x in log] == ["h2c", "h2c", "c2h"]
    assert all(close(end - begin, (1 << 20) / 1e9) for _c, begin, end, _s in log)
    assert log[1][1] >= log[0][2]  # one host-to-card channel
    stats = d._simcard.stats
    assert close(stats["dma_s_to_device"], 2 * (1 << 20) / 1e9) and stats["bytes_from_device"] == 1 << 20


# ------------------------------------------------------------------------------ commands, CUs, args
def test_kernel_call_skips_arguments_that_are_neither_bo_nor_int(sim, projects):
    d, _uid, k = open_kernel(projects["jet_tagger"], "krnl_rtl:{krnl_rtl_1}")
    bi = pyxrt.bo(d, 4 * 16 * 4, pyxrt.bo.normal, k.group_id(0))
    bo = pyxrt.bo(d, 4 * 5 * 4, pyxrt.bo.normal, k.group_id(0))
    bi.sync(TO_DEVICE)
    r = k(bi, bo, 4 * 16.0, 4 * 5)  # a float length is silently not set: length_r_in stays 0
    assert r.wait(50) == TIMEOUT and r.state() == NEW
    assert "length_r_in=0 is not a positive multiple of N_IN=16" in d._simcard.stats["faults"][-1]
    with pytest.raises(TypeError):
        pyxrt.run(k).set_arg(2, 2**31)  # not a 32-bit C int
    with pytest.raises(IndexError):
        pyxrt.run(k).set_arg(4, 1)
    with pytest.raises(IndexError):
        k.group_id(2)  # a scalar after the last memory argument: out of XRT's connection vector


def test_runs_queue_on_their_cu_and_complete_in_order(sim, projects, monkeypatch):
    monkeypatch.setenv(simkernels.ENV_KERNEL_DELAY_MS, "40")
    folder = projects["jet_tagger"]
    d, _uid, k = open_kernel(folder, "krnl_rtl:{krnl_rtl_1}")
    x = inputs(4, 16).astype("<f4")
    bi = pyxrt.bo(d, x.nbytes, pyxrt.bo.normal, k.group_id(0))
    outs = [pyxrt.bo(d, 4 * 5 * 4, pyxrt.bo.normal, k.group_id(0)) for _ in range(3)]
    bi.write(x, 0)
    bi.sync(TO_DEVICE)
    runs = [k(bi, o, 64, 20) for o in outs]
    assert [r.state() for r in runs] == [NEW, NEW, NEW]  # NEW until completion (no RUNNING state)
    with pytest.raises(RuntimeError, match=r"^bad command state, can't launch$"):
        runs[0].start()
    assert runs[2].wait(2000) == COMPLETED
    assert [r.state() for r in runs] == [COMPLETED] * 3
    cmds = [r._cmd for r in runs]
    assert cmds[1].start_t == cmds[0].end_t and cmds[2].start_t == cmds[1].end_t  # one after another
    runs[0].start()  # completed: may be started again
    assert runs[0].wait(2000) == COMPLETED


def test_xrt_routes_runs_to_the_cu_connected_to_the_buffers(sim, projects, capfd):
    folder = projects["jet_tagger"]  # krnl_rtl_1 on DDR[0], krnl_rtl_2 on DDR[1]
    d, uid, k = open_kernel(folder, "krnl_rtl")
    k2 = pyxrt.kernel(d, uid, "krnl_rtl:{krnl_rtl_2}")
    x = inputs(6, 16).astype(np.float32)
    got = run_krnl_rtl(d, k, x, 5, group=k2.group_id(0))  # buffers in DDR[1]: XRT keeps CU 2 only
    assert np.array_equal(got.astype(np.float64), csim(folder).predict(x))
    cus = d._simcard.stats["cus"]
    assert (cus["krnl_rtl_1"]["commands"], cus["krnl_rtl_2"]["commands"]) == (0, 1)
    # a kernel of CU 1 only, buffers in DDR[1]: XRT warns and runs on a copy in DDR[0]; what the
    # kernel writes lands in that copy, never in the caller's buffer
    k1 = pyxrt.kernel(d, uid, "krnl_rtl:{krnl_rtl_1}")
    bi = pyxrt.bo(d, x.nbytes, pyxrt.bo.normal, k2.group_id(0))
    bo = pyxrt.bo(d, 6 * 5 * 4, pyxrt.bo.normal, k2.group_id(0))
    bi.write(np.ascontiguousarray(x), 0)
    bi.sync(TO_DEVICE)
    capfd.readouterr()
    assert k1(bi, bo, 6 * 16, 6 * 5).wait(1000) == COMPLETED
    assert "has no compute units with connectivity required for global argument at index 0" in capfd.readouterr().err
    bo.sync(FROM_DEVICE)
    assert bytes(bo.map()) == b"\xa5" * (6 * 5 * 4)


def test_register_xclbin_and_hw_context(sim, projects):
    """The 2.16+ flow: register, create a hw_context (which programs the card), kernel(ctx, name)."""
    d = pyxrt.device(0)
    xb = pyxrt.xclbin(str(projects["jet_tagger"] / "model.xclbin"))
    uid = d.register_xclbin(xb)
    assert d.get_xclbin_uuid().to_string() == NULL_UUID  # registering programs nothing
    ctx = pyxrt.hw_context(d, uid)
    assert d.get_xclbin_uuid().to_string() == uid.to_string()
    k = pyxrt.kernel(ctx, "krnl_rtl:{krnl_rtl_2}")
    x = inputs(5, 16).astype(np.float32)
    assert np.array_equal(run_krnl_rtl(d, k, x, 5).astype(np.float64), csim(projects["jet_tagger"]).predict(x))
    other = d.register_xclbin(pyxrt.xclbin(str(projects["facile"] / "model.xclbin")))
    with pytest.raises(RuntimeError, match=r"^Failed to create hardware context$"):
        pyxrt.hw_context(d, other)  # the card is in use by k
    del k, ctx
    gc.collect()
    pyxrt.kernel(d, other, "krnl_rtl")  # kernel(device, uuid) makes a hw_context: it loads the xclbin
    assert d.get_xclbin_uuid().to_string() == other.to_string()


def test_exclusive_contexts(sim, projects):
    d, uid, _shared = open_kernel(projects["jet_tagger"], "krnl_rtl:{krnl_rtl_1}")
    with pytest.raises(RuntimeError, match=r"^failed to open cu context: Device or resource busy$"):
        pyxrt.kernel(d, uid, "krnl_rtl:{krnl_rtl_1}", pyxrt.kernel.exclusive)
    ex = pyxrt.kernel(d, uid, "krnl_rtl:{krnl_rtl_2}", pyxrt.kernel.exclusive)
    with pytest.raises(RuntimeError, match="failed to open cu context"):
        pyxrt.kernel(d, uid, "krnl_rtl")
    del ex
    pyxrt.kernel(d, uid, "krnl_rtl")
    with pytest.raises(RuntimeError, match=r"^No compute units matching 'krnl_rtl:\{krnl_rtl_9\}'$"):
        pyxrt.kernel(d, uid, "krnl_rtl:{krnl_rtl_9}")
    with pytest.raises(RuntimeError, match=r"^No such kernel 'vadd': Invalid argument$"):
        pyxrt.kernel(d, uid, "vadd")


# ------------------------------------------------------------------------------ loads, hangs, reset
def test_same_uuid_load_is_a_no_op_and_does_not_clear_a_hang(sim, projects):
    path = str(projects["jet_tagger"] / "model.xclbin")
    d, uid, k = open_kernel(projects["jet_tagger"], "krnl_rtl:{krnl_rtl_1}")
    card = d._simcard
    assert card.stats["programs"] == 1
    (sim / "hang-card0-krnl_rtl_1").touch()  # the next start on that CU hangs
    bi = pyxrt.bo(d, 4 * 16 * 4, pyxrt.bo.normal, k.group_id(0))
    bo = pyxrt.bo(d, 4 * 5 * 4, pyxrt.bo.normal, k.group_id(0))
    r = k(bi, bo, 64, 20)
    assert not (sim / "hang-card0-krnl_rtl_1").exists()  # consumed
    assert r.wait(50) == TIMEOUT and r.wait(10) == TIMEOUT and r.state() == NEW
    assert card.stats["hung"] == ["krnl_rtl_1"] and "hang requested" in card.stats["faults"][-1]
    requests = card.stats["downloads"]
    assert d.load_xclbin(path).to_string() == uid.to_string()  # XRT: already loaded, nothing done
    assert card.stats["programs"] == 1 and card.stats["downloads"] == requests + 1
    r2 = k(bi, bo, 64, 20)  # queued behind the hung command: never starts
    assert r2.wait(50) == TIMEOUT
    # the other CU works
    k2 = pyxrt.kernel(d, uid, "krnl_rtl:{krnl_rtl_2}")
    x = inputs(3, 16).astype(np.float32)
    assert np.array_equal(run_krnl_rtl(d, k2, x, 5).astype(np.float64), csim(projects["jet_tagger"]).predict(x))
    stats = stats_file(sim, 0, lambda s: s["cus"]["krnl_rtl_2"]["completed"] == 1)
    assert stats["simulated"] is True and stats["hung"] == ["krnl_rtl_1"] and stats["hangs"] == 1
    assert stats["cus"]["krnl_rtl_1"]["queued"] == 2 and stats["cus"]["krnl_rtl_2"]["completed"] == 1


def test_a_different_xclbin_is_refused_while_kernels_or_buffers_exist(sim, projects, capfd):
    d, _uid, k = open_kernel(projects["jet_tagger"], "krnl_rtl:{krnl_rtl_1}")
    other = str(projects["facile"] / "model.xclbin")
    capfd.readouterr()
    with pytest.raises(RuntimeError, match=r"^failed to load xclbin: Device or resource busy$"):
        d.load_xclbin(other)
    err = capfd.readouterr().err
    assert "[XRT] ERROR: Xclbin on card is in use, can't change." in err and "err = -16" in err
    b = pyxrt.bo(d, 4096, pyxrt.bo.normal, k.group_id(0))
    del k
    gc.collect()
    with pytest.raises(RuntimeError, match=r"^failed to load xclbin: Operation not permitted$"):
        d.load_xclbin(other)
    del b
    gc.collect()
    d.load_xclbin(other)
    assert d._simcard.stats["programs"] == 2


def test_shell_checks(sim, projects, monkeypatch, capfd):
    folder = projects["faast"]
    flat = folder / "flat.xclbin"
    write_xclbin(flat, kernel_abi="faast", platform="xilinx_u250_xdma_201830_2")
    d = pyxrt.device(0)  # the gen3x16 (2RP) shell: matched by interface uuid
    capfd.readouterr()
    bad_iface = folder / "iface.xclbin"
    write_xclbin(bad_iface, kernel_abi="faast", interface_uuid="11" * 16)
    with pytest.raises(RuntimeError, match=r"^failed to load xclbin: Invalid argument$"):
        d.load_xclbin(str(bad_iface))
    del d
    gc.collect()
    monkeypatch.setenv(simcard.ENV_PLATFORM, "xilinx_u250_xdma_201830_2")  # flat shell: ROM timestamp
    simcard.forget_cards()
    d = pyxrt.device(0)
    assert d.get_info(pyxrt.xrt_info_device.interface_uuid) == NULL_UUID
    with pytest.raises(RuntimeError, match=r"^failed to load xclbin: Operation not supported$"):
        d.load_xclbin(str(folder / "model.xclbin"))
    err = capfd.readouterr().err.splitlines()
    assert err[-5:] == [
        "[XRT] ERROR: Xclbin does not match shell on card.",
        "[XRT] ERROR: Shell VBNV is 'xilinx_u250_xdma_201830_2'",
        f"[XRT] ERROR: Xclbin VBNV is '{DEFAULT_PLATFORM}'",
        "[XRT] ERROR: Use 'xbmgmt flash' to update shell.",
        "[XRT] ERROR: See dmesg log for details. err = -95",
    ]
    uid = d.load_xclbin(str(flat))
    k = pyxrt.kernel(d, uid, "alveo_hls4ml")
    assert [d._simcard.xclbin.groups[k.group_id(0)].tag] == ["bank0"]


def xbutil(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(XBUTIL), *args], capture_output=True, text=True, input=stdin, timeout=60)


def test_closing_with_a_hung_command_needs_a_device_reset(sim, projects, capfd):
    path = str(projects["jet_tagger"] / "model.xclbin")
    d, uid, k = open_kernel(projects["jet_tagger"], "krnl_rtl:{krnl_rtl_1}")
    k2 = pyxrt.kernel(d, uid, "krnl_rtl:{krnl_rtl_2}")
    card = d._simcard
    (sim / "hang-card0").touch()
    bi = pyxrt.bo(d, 64 * 4, pyxrt.bo.normal, k.group_id(0))
    bo = pyxrt.bo(d, 20 * 4, pyxrt.bo.normal, k.group_id(0))
    r = k(bi, bo, 64, 20)
    assert r.wait(20) == TIMEOUT
    assert not card.state()["bad_state"]
    del r, k  # the kernel's CU context closes with the hung command outstanding
    gc.collect()
    state = card.state()
    assert state["bad_state"] and "krnl_rtl_1" in state["bad_state_reason"]
    capfd.readouterr()
    with pytest.raises(RuntimeError, match=r"^failed to load xclbin: Resource deadlock avoided$"):
        d.load_xclbin(path)  # even the loaded xclbin
    err = capfd.readouterr().err
    assert "[XRT] ERROR: CU was deadlocked? Hardware is not stable" in err
    assert "[XRT] ERROR: Please reset device with 'xbutil reset'" in err and "err = -35" in err
    with pytest.raises(RuntimeError, match=r"^Failed to create hardware context$"):
        pyxrt.kernel(d, uid, "krnl_rtl:{krnl_rtl_2}")  # its hw_context loads: refused too
    assert "[XRT] ERROR: Please reset device with 'xbutil reset'" in capfd.readouterr().err
    b2 = pyxrt.bo(d, 64 * 4, pyxrt.bo.normal, k2.group_id(0))
    with pytest.raises(RuntimeError, match=r"^failed to launch execution buffer: Resource deadlock avoided$"):
        pyxrt.run(k2).start()  # a kernel made before: the scheduler refuses its starts
    with pytest.raises(RuntimeError, match="Resource deadlock avoided"):
        k2(b2, b2, 16, 5)
    # xbutil refuses while this process holds the card open; it still exits 0 (as real xbutil)
    out = xbutil("reset", "--device", card.bdf, "--force")
    assert out.returncode == 0
    assert out.stdout.splitlines() == [
        f"Performing 'HOT Reset' on '{card.bdf}'",
        "Are you sure you wish to proceed? [Y/n]: Y (Force override)",
        f"Reset failed on Device[{card.bdf}]",
    ]
    assert out.stderr.strip() == "ERROR: failed to reset device: Device or resource busy"
    del k2, b2, bi, bo, d
    gc.collect()
    out = xbutil("reset", "-d", card.bdf)  # no --force: an empty answer (EOF) means yes
    assert out.returncode == 0
    assert out.stdout.endswith(f"[Y/n]: Successfully reset Device[{card.bdf}]\n")
    d = pyxrt.device(0)
    assert d.get_xclbin_uuid().to_string() == NULL_UUID  # a reset leaves no xclbin loaded
    state = card.state()
    assert not state["bad_state"] and state["resets"] == 1 and state["hung_cus"] == []
    x = inputs(2, 16).astype(np.float32)
    uid = d.load_xclbin(path)
    got = run_krnl_rtl(d, pyxrt.kernel(d, uid, "krnl_rtl:{krnl_rtl_1}"), x, 5)
    assert np.array_equal(got.astype(np.float64), csim(projects["jet_tagger"]).predict(x))


def test_a_process_that_dies_with_a_hung_command_leaves_bad_state(sim, projects):
    code = f"""
import os, sys
sys.path.insert(0, {str(XRT_PYTHON)!r}); sys.path.insert(0, {str(TESTS)!r})
import pyxrt
d = pyxrt.device(0)
uid = d.load_xclbin({str(projects["jet_tagger"] / "model.xclbin")!r})
k = pyxrt.kernel(d, uid, "krnl_rtl:{{krnl_rtl_1}}")
b = pyxrt.bo(d, 256, pyxrt.bo.normal, k.group_id(0))
open(os.path.join(os.environ["FPGASERVE_SIM_CONTROL_DIR"], "hang-card0"), "w").close()
r = k(b, b, 16, 5)
print("HUNG" if r.wait(20) == pyxrt.ert_cmd_state.ERT_CMD_STATE_TIMEOUT else "DONE", flush=True)
os._exit(0)  # killed: no teardown runs in this process
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "HUNG", out.stderr
    card = simcard.get_card(0)
    state = card.state()  # the dead holder is pruned: the driver's teardown would have failed
    assert (
        state["bad_state"]
        and state["holders"] == {}
        and "exited with commands outstanding" in state["bad_state_reason"]
    )
    assert (
        xbutil("reset", "--device", "0000:65:00.1", "--force")
        .stdout.strip()
        .endswith("Successfully reset Device[0000:65:00.1]")
    )
    assert not card.state()["bad_state"]


def test_xbutil_examine_and_errors(sim):
    out = xbutil("examine")
    assert out.returncode == 0
    assert "XRT\n  Version              : 2.17.319" in out.stdout and "simulated" in out.stdout
    assert "[0000:65:00.1]  :  xilinx_u250_gen3x16_xdma_shell_4_1" in out.stdout
    assert "[0000:66:00.1]" in out.stdout
    out = xbutil("examine", "-d", "0000:66:00.1", "-r", "platform")
    assert out.returncode == 0
    assert "[0000:66:00.1] : xilinx_u250_gen3x16_xdma_shell_4_1" in out.stdout
    assert (
        f"  XSA Name               : {DEFAULT_PLATFORM} " in out.stdout
        and "DATA_CLK (Data)        : 300 MHz" in out.stdout
    )
    out = xbutil("reset", "--device", "0000:99:00.1", "--force")
    assert out.returncode == 1 and out.stderr.startswith("ERROR: Specified device BDF '0000:99:00.1' not found")
    out = xbutil("reset", "-d", "0000:65:00.1", stdin="n\n")
    assert out.returncode == 1 and out.stdout.splitlines()[-1].endswith("Action canceled.")


# ------------------------------------------------------------------------------ timing model
def test_kernel_time_follows_latency_and_initiation_interval(sim, projects, monkeypatch):
    folder = projects["jet_tagger"]
    d, _uid, k = open_kernel(folder, "krnl_rtl:{krnl_rtl_1}")
    x = inputs(100, 16).astype(np.float32)
    monkeypatch.setenv(simkernels.ENV_KERNEL_LATENCY, "100")
    monkeypatch.setenv(simkernels.ENV_KERNEL_II, "4")
    monkeypatch.setenv(simkernels.ENV_KERNEL_CLOCK_MHZ, "100")
    run_krnl_rtl(d, k, x, 5)
    busy = d._simcard.stats["cus"]["krnl_rtl_1"]["busy_s"]
    # II 4 < the data path's 16 words per row: krnl_rtl moves one 32-bit word per clock
    assert close(busy, (100 + 16 * 99) / 100e6)
    monkeypatch.setenv(simkernels.ENV_KERNEL_II, "40")
    run_krnl_rtl(d, k, x, 5)
    assert close(d._simcard.stats["cus"]["krnl_rtl_1"]["busy_s"] - busy, (100 + 40 * 99) / 100e6)
    model = d._simcard.stats["models"]["krnl_rtl"]
    assert (model["ii"], model["ii_eff"], model["clock_mhz"]) == (40, 40, 100)
    monkeypatch.delenv(simkernels.ENV_KERNEL_CLOCK_MHZ)
    monkeypatch.delenv(simkernels.ENV_KERNEL_II)
    monkeypatch.delenv(simkernels.ENV_KERNEL_LATENCY)
    model = d._simcard.stats["models"]["krnl_rtl"]
    assert model["clock_mhz"] == 300 and model["ii"] == 1 and "estimated" in model["source"]


def test_csynth_report_gives_latency_and_interval(sim, projects, tmp_path):
    folder = tmp_path / "reported"
    shutil.copytree(projects["jet_tagger"], folder)
    (folder / "reports").mkdir()
    (folder / "reports" / "myproject_axi_csynth.xml").write_text(
        "<profile><PerformanceEstimates><SummaryOfOverallLatency><Best-caseLatency>123</Best-caseLatency>"
        "<Worst-caseLatency>130</Worst-caseLatency><Interval-min>20</Interval-min><Interval-max>20</Interval-max>"
        "</SummaryOfOverallLatency></PerformanceEstimates></profile>"
    )
    write_hls4ml_xclbin(folder / "model.xclbin", clock_mhz=200)
    d, _uid, k = open_kernel(folder)
    run_krnl_rtl(d, k, inputs(10, 16).astype(np.float32), 5)
    model = d._simcard.stats["models"]["krnl_rtl"]
    assert (model["latency"], model["ii"], model["ii_eff"], model["clock_mhz"]) == (123, 20, 20, 200)
    assert "csynth report myproject_axi_csynth.xml" in model["source"]
    assert close(d._simcard.stats["cus"]["krnl_rtl_1"]["busy_s"], (123 + 20 * 9) / 200e6)


def test_identical_inputs_are_memoized(sim, projects):
    folder = projects["facile"]
    d, _uid, k = open_kernel(folder, "krnl_rtl:{krnl_rtl_1}")
    x = inputs(20, 47).astype(np.float32)
    first = run_krnl_rtl(d, k, x, 1)
    second = run_krnl_rtl(d, k, x, 1)
    model = d._simcard.stats["models"]["krnl_rtl"]
    assert np.array_equal(first, second) and (model["memo_hits"], model["memo_misses"]) == (1, 1)
    x[3, 7] += 1.0
    third = run_krnl_rtl(d, k, x, 1)
    assert d._simcard.stats["models"]["krnl_rtl"]["memo_misses"] == 2
    assert np.array_equal(third.astype(np.float64), csim(folder).predict(x))


def test_rendezvous_proves_two_kernels_ran_at_once(sim, projects, monkeypatch):
    monkeypatch.setenv(simkernels.ENV_KERNEL_DELAY_MS, "5")
    folder = projects["jet_tagger"]
    d, uid, _any_cu = open_kernel(folder)
    ks = [pyxrt.kernel(d, uid, f"krnl_rtl:{{krnl_rtl_{i}}}") for i in (1, 2)]
    bufs = [
        (pyxrt.bo(d, 64, pyxrt.bo.normal, k.group_id(0)), pyxrt.bo(d, 20, pyxrt.bo.normal, k.group_id(0))) for k in ks
    ]
    simcard.arm_rendezvous(2, timeout_s=10.0)
    runs = [k(bi, bo, 16, 5) for k, (bi, bo) in zip(ks, bufs)]  # both CUs started before any wait
    assert all(r.wait(10000) == COMPLETED for r in runs)
    assert simcard.concurrency()["rendezvous"]["state"] == "met"
    # a host that waits for each kernel before starting the next can never meet it
    simcard.arm_rendezvous(2, timeout_s=0.2)
    for k, (bi, bo) in zip(ks, bufs):
        assert k(bi, bo, 16, 5).wait(10000) == COMPLETED
    state = simcard.concurrency()["rendezvous"]
    assert state["state"] == "timed out" and state["peak"] == 1
    assert "rendezvous timeout: at most 1 of 2 kernels" in d._simcard.stats["faults"][-1]


# ------------------------------------------------------------------------------ where the card's work runs
def test_device_memory_is_uninitialised_until_written(sim, projects):
    d, _uid, k = open_kernel(projects["jet_tagger"], "krnl_rtl:{krnl_rtl_1}")
    b = pyxrt.bo(d, 3 * 4096 + 10, pyxrt.bo.normal, k.group_id(0))
    card = d._simcard
    assert card.read_device(b._buf, 0, 3 * 4096 + 10) == b"\xa5" * (3 * 4096 + 10)
    b.map()[4090:4100] = bytes(range(1, 11))
    b.sync(TO_DEVICE, 10, 4090)  # part of two pages: the rest of both stays 0xA5
    got = card.read_device(b._buf, 0, 3 * 4096 + 10)
    assert got[4090:4100] == bytes(range(1, 11)) and got[:4090] + got[4100:] == b"\xa5" * (3 * 4096)
    sub = pyxrt.bo(b, 8, 4092)
    assert card.read_device(sub._buf, 0, 8) == bytes(range(3, 11))


def test_process_mode_is_refused_saying_why(sim, monkeypatch):
    """The card's work is the core's, in the calling process: there is no card process."""
    monkeypatch.setenv(simcard.ENV_DEVICE, "process")
    simcard.forget_cards()
    with pytest.raises(simcard.SimulationError, match="must be one of inline, timing"):
        simcard.get_card(0)


# ------------------------------------------------------------------------------ buffers over user memory
def _capsule(address: int):
    """What pybind11 casts to ``void*``: a PyCapsule holding the address."""
    import ctypes

    new = ctypes.pythonapi.PyCapsule_New
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(address, None, None)


def test_xrt_2_17_binds_no_user_pointer_buffers():
    assert not hasattr(pyxrt, "ext") and pyxrt.XRT_VERSION == "2.17.319"
    assert pyxrt220.XRT_VERSION == "2.20.197" and pyxrt220.XRT_BRANCH == "2025.2"
    ext = pyxrt220.ext
    mode = ext.bo  # the access_mode enum is nested in ext.bo, its values exported there
    assert str(mode.read) == "access_mode.read" and int(mode.read | mode.shared) == 5
    assert (
        mode.none == mode.local and str(mode.local) == "access_mode.none"
    )  # pybind11 names a value by its first member
    assert mode.access_mode.read == mode.read and not hasattr(ext, "read")
    assert ext.bo.__module__ == "pyxrt.ext" and issubclass(ext.bo, pyxrt220.bo)


def test_ext_bo_syncs_straight_from_user_memory(sim, projects, capfd):
    """XRT 2.20's pyxrt.ext.bo(device, userptr, size): a host-only buffer in group 0 over the
    caller's pages (xocl pins them), synced with no copy into a buffer of XRT's."""
    import mmap

    x = pyxrt220
    to_device, from_device = (
        x.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE,
        x.xclBOSyncDirection.XCL_BO_SYNC_BO_FROM_DEVICE,
    )
    completed = x.ert_cmd_state.ERT_CMD_STATE_COMPLETED
    folder = projects["jet_tagger"]
    d = x.device(0)
    uid = d.load_xclbin(str(folder / "model.xclbin"))
    k1, k2 = x.kernel(d, uid, "krnl_rtl:{krnl_rtl_1}"), x.kernel(d, uid, "krnl_rtl:{krnl_rtl_2}")
    rows = 24
    data = inputs(rows, 16).astype("<f4")
    memory = mmap.mmap(-1, 4 * 4096)
    user = np.frombuffer(memory, dtype="<f4")
    user[: data.size] = data.ravel()
    address = user.ctypes.data
    ub = x.ext.bo(d, _capsule(address), len(memory))
    assert type(ub).__name__ == "bo" and ub.size() == len(memory) and k1.group_id(0) == 0
    assert bytes(ub.map()[:16]) == data.tobytes()[:16]  # a view of the caller's memory
    arg = x.bo(ub, data.nbytes, 0)
    arg.sync(to_device, data.nbytes, 0)
    out = x.bo(d, rows * 5 * 4, x.bo.normal, k1.group_id(1))
    assert k1(arg, out, rows * 16, rows * 5).wait(5000) == completed
    out.sync(from_device)
    ref = csim(folder).predict(data)
    assert np.array_equal(np.frombuffer(out.map(), "<f4").reshape(rows, 5).astype(np.float64), ref)
    stats = d._simcard.stats
    assert stats["bytes_to_device_userptr"] == data.nbytes == stats["bytes_to_device"]
    # krnl_rtl_2 is connected to DDR[1], not group 0: XRT copies the argument into its bank
    out2 = x.bo(d, rows * 5 * 4, x.bo.normal, k2.group_id(1))
    assert k2(arg, out2, rows * 16, rows * 5).wait(5000) == completed
    assert "Allocating local copy of argument buffer in connected bank" in capfd.readouterr().err
    out2.sync(from_device)
    assert np.array_equal(np.frombuffer(out2.map(), "<f4").reshape(rows, 5).astype(np.float64), ref)
    # what XRT and xocl refuse
    with pytest.raises(TypeError, match="incompatible function arguments"):
        x.ext.bo(d, address, 4096)  # an int is not a void* for pybind11
    with pytest.raises(RuntimeError, match=r"^failed to allocate userptr bo: Invalid argument$"):
        x.ext.bo(d, _capsule(address + 64), 4096)  # not page-aligned
    readonly = mmap.mmap(-1, 4096, prot=mmap.PROT_READ)
    with pytest.raises(RuntimeError, match=r"^failed to allocate userptr bo: Cannot allocate memory$"):
        x.ext.bo(d, _capsule(np.frombuffer(readonly, np.uint8).ctypes.data), 4096)  # pinned for writing
    with pytest.raises(RuntimeError, match=r"^xrt::ext::bo: invalid access mode$"):
        x.ext.bo(d, _capsule(address), 4096, x.ext.bo.shared | x.ext.bo.process)
    with pytest.raises(RuntimeError, match=r"^failed to allocate bo: Invalid argument$"):
        x.ext.bo(d, None, 4096)  # driver-provided host memory: no host-memory bank enabled
    with pytest.raises(RuntimeError, match=r"^failed to allocate bo: Invalid argument$"):
        x.ext.bo(d, 4096, x.ext.bo.read)
    del arg, ub
    gc.collect()


# ------------------------------------------------------------------------------ timing only
def test_timing_mode_passes_modelled_time_and_moves_no_bytes(sim_timing, projects, monkeypatch):
    """FPGASERVE_SIM_DEVICE=timing: device memory is the host memory (a user-pointer buffer's:
    the caller's pages), a sync blocks for its modelled time and copies nothing, a kernel call
    takes its modelled time, computes nothing and writes nothing, and the stats say so."""
    import mmap

    monkeypatch.setenv(simcard.ENV_PCIE_GBPS, "0.05")  # 50 MB/s: 1 MiB takes ~21 ms
    x = pyxrt220
    to_device = x.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE
    d = x.device(0)
    uid = d.load_xclbin(str(projects["jet_tagger"] / "model.xclbin"))
    k = x.kernel(d, uid, "krnl_rtl:{krnl_rtl_1}")
    card = d._simcard
    assert card.device_mode == "timing" and card.stats["models"]["krnl_rtl"]["n_in"] == 16
    big = x.bo(d, 1 << 20, x.bo.normal, k.group_id(0))
    big.map()[:4] = b"abcd"
    assert card.read_device(big._buf, 0, 4) == b"abcd"  # no sync yet: device memory is the host's
    t0 = time.monotonic()
    big.sync(to_device)
    waited = time.monotonic() - t0
    chan, begin, end, size = card.dma_log[-1]
    assert (chan, size) == ("h2c", 1 << 20) and close(end - begin, (1 << 20) / 0.05e9) and waited >= end - begin - 1e-3
    # a user-pointer buffer aliases the caller's pages: what the host writes, the card reads
    memory = mmap.mmap(-1, 4096)
    user = np.frombuffer(memory, dtype="<f4")
    ub = x.ext.bo(d, _capsule(user.ctypes.data), 4096)
    user[:16] = np.arange(16, dtype="<f4")
    assert card.read_device(ub._buf, 0, 64) == user[:16].tobytes()
    ub.sync(to_device, 64, 0)
    out = x.bo(d, 5 * 4, x.bo.normal, k.group_id(1))
    out.map()[:] = b"\x11" * 20
    out.sync(to_device)
    r = k(ub, out, 16, 5)
    assert r.wait(5000) == x.ert_cmd_state.ERT_CMD_STATE_COMPLETED
    out.sync(x.xclBOSyncDirection.XCL_BO_SYNC_BO_FROM_DEVICE)
    assert bytes(out.map()) == b"\x11" * 20  # computed nothing, wrote nothing
    cmd = r._cmd
    timing = card.stats["models"]["krnl_rtl"]  # the core's effective timing, one row
    assert close(cmd.end_t - cmd.start_t, timing["latency"] / (timing["clock_mhz"] * 1e6))
    dev_only = x.bo(d, 64, x.bo.device_only, k.group_id(0))
    assert card.read_device(dev_only._buf, 0, 64) == b"\xa5" * 64  # memory of its own: not written yet
    stats = card.stats
    assert stats["device_side"] == {"mode": "timing", "computed": False, "uncomputed_calls": 1}
    assert stats["kernel_completions"] == 1 and stats["bytes_to_device_userptr"] == 64
    assert stats["bytes_to_device"] == (1 << 20) + 64 + 20 and stats["bytes_from_device"] == 20
    del r, ub
    gc.collect()


def test_timing_mode_keeps_the_card_s_rules(sim_timing, projects, capfd):
    """Hang requests, bank checks, loads and bad_state are card.py's, whatever the card side."""
    path = str(projects["jet_tagger"] / "model.xclbin")
    d, uid, k = open_kernel(projects["jet_tagger"], "krnl_rtl:{krnl_rtl_1}")
    k2 = pyxrt.kernel(d, uid, "krnl_rtl:{krnl_rtl_2}")
    card = d._simcard
    bi = pyxrt.bo(d, 64 * 4, pyxrt.bo.normal, k.group_id(0))
    bo = pyxrt.bo(d, 20 * 4, pyxrt.bo.normal, k.group_id(0))
    assert k(bi, bo, 64, 20).wait(1000) == COMPLETED
    # a hang request: the next start on that CU hangs
    (sim_timing / "hang-card0-krnl_rtl_2").touch()
    b2 = pyxrt.bo(d, 64 * 4, pyxrt.bo.normal, k2.group_id(0))
    r = k2(b2, b2, 64, 20)
    assert r.wait(20) == TIMEOUT and not (sim_timing / "hang-card0-krnl_rtl_2").exists()
    assert card.stats["hung"] == ["krnl_rtl_2"] and "hang requested" in card.stats["faults"][-1]
    # a buffer in a bank the CU's port is not connected to (register writes: no XRT to copy it)
    far = pyxrt.bo(d, 64 * 4, pyxrt.bo.normal, k2.group_id(0))  # DDR[1]
    model = card.model_for(card.cus[0])
    regs = bytearray(0x40)
    for name, value in (("fifo_in", far.address()), ("fifo_out", bo.address()), ("length_r_in", 64),
                        ("length_r_out", 20)):  # fmt: skip
        a = model._args[name]
        regs[a.offset : a.offset + a.size] = value.to_bytes(a.size, "little")
    cmd = card.submit([0], bytes(regs))
    assert not card.wait(cmd, 0.02, hold_gil=True) and cmd.state == "hung"
    assert "but the CU's" in card.stats["faults"][-1] and "is connected to" in card.stats["faults"][-1]
    del cmd
    # a different xclbin is refused while kernels exist; closing with hung commands: bad_state
    capfd.readouterr()
    with pytest.raises(RuntimeError, match=r"^failed to load xclbin: Device or resource busy$"):
        d.load_xclbin(str(projects["facile"] / "model.xclbin"))
    assert sorted(card.stats["hung"]) == ["krnl_rtl_1", "krnl_rtl_2"] and not card.state()["bad_state"]
    del r, k, k2
    gc.collect()
    assert card.state()["bad_state"]
    with pytest.raises(RuntimeError, match=r"^failed to load xclbin: Resource deadlock avoided$"):
        d.load_xclbin(path)
    assert card.stats["device_side"]["uncomputed_calls"] == 1  # hung calls were never started on the card


# ------------------------------------------------------------------------------ telemetry
def test_telemetry_rises_with_activity_and_can_be_unreadable(sim, projects, monkeypatch):
    monkeypatch.setenv(simkernels.ENV_KERNEL_DELAY_MS, "300")
    d, _uid, k = open_kernel(projects["jet_tagger"], "krnl_rtl:{krnl_rtl_1}")
    info = pyxrt.xrt_info_device

    def watts() -> float:
        return float(json.loads(d.get_info(info.electrical))["power_consumption_watts"])

    idle = watts()
    b = pyxrt.bo(d, 64, pyxrt.bo.normal, k.group_id(0))
    r = k(b, b, 16, 5)
    busy = watts()
    assert r.wait(5000) == COMPLETED
    assert busy > idle + 5
    thermals = json.loads(d.get_info(info.thermal))["thermals"]
    assert {t["location_id"] for t in thermals} >= {"fpga0", "pcb_top_front"}
    monkeypatch.setenv(simcard.ENV_SENSORS, "unreadable")  # no hwmon/xmc sysfs (container, VM)
    assert json.loads(d.get_info(info.electrical)) == {"msg": "No sensors present"}
    assert json.loads(d.get_info(info.thermal)) == {"thermals": {"msg": "No sensors present"}}
    assert json.loads(d.get_info(info.mechanical)) == {"fans": {"msg": "No sensors present"}}
    memory = json.loads(d.get_info(info.memory))["board"]["memory"]["memories"]
    assert [m["tag"] for m in memory if m["enabled"] == "true"] == ["DDR[0]", "DDR[1]"]


# ------------------------------------------------------------------------------ entry point
def test_serve_entry_point_puts_the_simulator_first(tmp_path):
    env = dict(os.environ, FPGASERVE_SIM_CARDS="2")
    out = subprocess.run(
        [sys.executable, str(SIM / "serve.py"), "--help"], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "--model-repository" in out.stdout
    assert "2 SIMULATED Alveo card(s) (tests/fpga_sim) through pyxrt" in out.stderr
    probe = (
        "import runpy, shutil, sys; sys.argv = ['serve.py']; "
        f"ns = runpy.run_path({str(SIM / 'serve.py')!r}, run_name='not_main'); ns['_bootstrap'](); "
        "import pyxrt; print(pyxrt.SIMULATED, pyxrt.enumerate_devices(), shutil.which('xbutil'))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "2", str(XBUTIL)]
    probe = probe.replace("import pyxrt; print(pyxrt.SIMULATED, pyxrt.enumerate_devices(), shutil.which('xbutil'))",
                          "import importlib.util; print(importlib.util.find_spec('pyxrt'))")  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env=dict(env, FPGASERVE_SIM_API="pynq"),
        timeout=120,
    )
    if "No module named 'pynq'" not in out.stderr:
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "None"  # the PYNQ host has no pyxrt


def test_simulator_is_not_part_of_the_installed_package():
    import fpgaserve.backends.hls4ml as hls

    installed = Path(hls.__file__).resolve().parents[1]
    assert not (installed / "fpga_sim").exists()
    probe = subprocess.run(
        [sys.executable, "-c", "import importlib.util as u; print(u.find_spec('pyxrt'), u.find_spec('fpga_sim'))"],
        capture_output=True,
        text=True,
        cwd="/",
        timeout=120,
    )
    assert probe.returncode == 0 and probe.stdout.strip() == "None None", probe.stdout + probe.stderr
