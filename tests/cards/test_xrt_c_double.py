"""The simulated ``libxrt_coreutil.so.2`` (tests/fpga_sim/xrt_c): XRT's C API over the simulated
cards, called here through ctypes exactly as a runtime over the real library would call it.

It must compute what the test-only pyxrt computes (bit for bit, one card model under both),
refuse handles it did not make without crashing, time out on a hung CU, and block without the
GIL: through ``ctypes.CDLL`` other Python threads run while a sync or wait sleeps, through
``ctypes.PyDLL`` they do not (the proof that the blocking is in C, not in a Python callback).
"""

from __future__ import annotations

import ctypes
import errno
import gc
import importlib
import itertools
import json
import mmap
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from fpga_sim import card as simcard
from fpga_sim import kernels as simkernels
from fpga_sim import xrt_c_bridge
from fpga_sim.xclbin import write_hls4ml_xclbin
from fpga_sim.xrt_c import LIBRARY, BuildUnavailable, build_xrt_root

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
SIM = TESTS / "fpga_sim"
XRT_PYTHON = SIM / "xrt_python"

V = ctypes.c_void_p
NEW, COMPLETED, ABORT, TIMEOUT = 1, 4, 6, 8
TO_DEVICE, FROM_DEVICE = 0, 1
XRT_API = [
    "xrtDeviceOpen", "xrtDeviceOpenByBDF", "xrtDeviceClose", "xrtDeviceLoadXclbinFile", "xrtDeviceGetXclbinUUID",
    "xrtBOAlloc", "xrtBOAllocUserPtr", "xrtBOFree", "xrtBOMap", "xrtBOSync", "xrtBOWrite", "xrtBORead", "xrtBOSize",
    "xrtBOAddress", "xrtPLKernelOpen", "xrtPLKernelOpenExclusive", "xrtKernelArgGroupId", "xrtKernelClose",
    "xrtRunOpen", "xrtRunSetArg", "xrtRunStart", "xrtRunWait", "xrtRunWaitFor", "xrtRunState", "xrtRunClose",
]  # fmt: skip
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


def _import_simulated_pyxrt():
    """The test-only pyxrt, without leaving it importable for other test modules."""
    sys.path.insert(0, str(XRT_PYTHON))
    try:
        module = importlib.import_module("pyxrt")
    finally:
        sys.path.remove(str(XRT_PYTHON))
        sys.modules.pop("pyxrt", None)
    assert module.SIMULATED is True, "a real pyxrt shadows the simulator"
    return module


pyxrt = _import_simulated_pyxrt()


def _bind(lib):
    """XRT's prototypes (xrt_device.h, xrt_bo.h, xrt_kernel.h) on a ctypes library object."""
    i, u, sz, u64, u32 = ctypes.c_int, ctypes.c_uint, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_uint32
    protos = {
        "xrtDeviceOpen": (V, [u]),
        "xrtDeviceOpenByBDF": (V, [ctypes.c_char_p]),
        "xrtDeviceClose": (i, [V]),
        "xrtDeviceLoadXclbinFile": (i, [V, ctypes.c_char_p]),
        "xrtDeviceGetXclbinUUID": (i, [V, ctypes.c_char_p]),
        "xrtBOAlloc": (V, [V, sz, u64, u32]),
        "xrtBOAllocUserPtr": (V, [V, V, sz, u64, u32]),
        "xrtBOFree": (i, [V]),
        "xrtBOMap": (V, [V]),
        "xrtBOSync": (i, [V, i, sz, sz]),
        "xrtBOWrite": (i, [V, V, sz, sz]),
        "xrtBORead": (i, [V, V, sz, sz]),
        "xrtBOSize": (sz, [V]),
        "xrtBOAddress": (u64, [V]),
        "xrtPLKernelOpen": (V, [V, ctypes.c_char_p, ctypes.c_char_p]),
        "xrtPLKernelOpenExclusive": (V, [V, ctypes.c_char_p, ctypes.c_char_p]),
        "xrtKernelArgGroupId": (i, [V, i]),
        "xrtKernelClose": (i, [V]),
        "xrtRunOpen": (V, [V]),
        "xrtRunSetArg": (i, [V, i]),  # then the value, typed by the caller (varargs)
        "xrtRunStart": (i, [V]),
        "xrtRunWait": (i, [V]),
        "xrtRunWaitFor": (i, [V, u]),
        "xrtRunState": (i, [V]),
        "xrtRunClose": (i, [V]),
    }
    for name, (restype, argtypes) in protos.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


@pytest.fixture(scope="module")
def xrt_root(tmp_path_factory):
    try:
        return build_xrt_root(tmp_path_factory.mktemp("xrt") / "xrt")
    except BuildUnavailable as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def lib(xrt_root):
    return _bind(ctypes.CDLL(str(xrt_root / "lib" / LIBRARY), use_errno=True))


@pytest.fixture(scope="module")
def gil_lib(xrt_root, lib):
    """The same library, called through ctypes.PyDLL (the GIL held across each call)."""
    return _bind(ctypes.PyDLL(str(xrt_root / "lib" / LIBRARY), use_errno=True))


@pytest.fixture(scope="module")
def projects(tmp_path_factory):
    root = tmp_path_factory.mktemp("xrt_c_projects")
    jet = root / "jet_tagger"
    shutil.copytree(ROOT / "bitstreams" / "jet_tagger" / "1", jet)
    write_hls4ml_xclbin(jet / "model.xclbin", cu=["krnl_rtl_1", "krnl_rtl_2"])
    write_hls4ml_xclbin(jet / "other.xclbin", cu=["krnl_rtl_1", "krnl_rtl_2"])  # another uuid
    return {"jet": jet}


def _reset():
    simcard.forget_cards()
    xrt_c_bridge.forget()
    pyxrt._REGISTERED.clear()


def _cards(tmp_path, monkeypatch, mode: str):
    for name in SIM_ENV:
        monkeypatch.delenv(name, raising=False)
    control = tmp_path / "control"
    control.mkdir()
    monkeypatch.setenv(simcard.ENV_DEVICE, mode)
    monkeypatch.setenv(simcard.ENV_CARDS, "2")
    monkeypatch.setenv(simcard.ENV_CONTROL_DIR, str(control))
    _reset()
    yield control
    gc.collect()
    _reset()
    simcard.disarm_rendezvous()


@pytest.fixture
def sim(tmp_path, monkeypatch):
    """Two fresh simulated cards (work inline), a control folder; everything closed afterwards."""
    yield from _cards(tmp_path, monkeypatch, "inline")


@pytest.fixture(params=["inline", "timing"])
def sim_modes(request, tmp_path, monkeypatch):
    """``sim``, the card's work done by the core (inline) or only timed (timing)."""
    yield from _cards(tmp_path, monkeypatch, request.param)


def _errno_of(call):
    ctypes.set_errno(0)
    result = call()
    return result, ctypes.get_errno()


def _open(lib, folder: Path, name: str, index: int = 0, xclbin: str = "model.xclbin"):
    d = lib.xrtDeviceOpen(index)
    assert d, os.strerror(ctypes.get_errno())
    assert lib.xrtDeviceLoadXclbinFile(d, str(folder / xclbin).encode()) == 0
    uid = ctypes.create_string_buffer(16)
    assert lib.xrtDeviceGetXclbinUUID(d, uid) == 0
    k = lib.xrtPLKernelOpen(d, uid.raw, name.encode())
    assert k, os.strerror(ctypes.get_errno())
    return d, uid.raw, k


def _krnl_rtl_c(lib, d, k, x: np.ndarray, n_out: int) -> np.ndarray:
    rows, n_in = x.shape
    data = np.ascontiguousarray(x, dtype="<f4")
    g = lib.xrtKernelArgGroupId(k, 0)
    bi = lib.xrtBOAlloc(d, data.nbytes, 0, g)
    bo = lib.xrtBOAlloc(d, rows * n_out * 4, 0, g)
    assert bi and bo
    assert lib.xrtBOWrite(bi, data.ctypes.data, data.nbytes, 0) == 0
    assert lib.xrtBOSync(bi, TO_DEVICE, data.nbytes, 0) == 0
    r = lib.xrtRunOpen(k)
    assert lib.xrtRunSetArg(r, 0, V(bi)) == 0 and lib.xrtRunSetArg(r, 1, V(bo)) == 0
    assert lib.xrtRunSetArg(r, 2, ctypes.c_int(rows * n_in)) == 0
    assert lib.xrtRunSetArg(r, 3, ctypes.c_int(rows * n_out)) == 0
    assert lib.xrtRunState(r) == NEW  # not started
    assert lib.xrtRunStart(r) == 0
    assert lib.xrtRunWaitFor(r, 0) == COMPLETED  # 0 ms: no limit
    assert lib.xrtRunState(r) == COMPLETED
    assert lib.xrtBOSync(bo, FROM_DEVICE, rows * n_out * 4, 0) == 0
    out = np.empty((rows, n_out), dtype="<f4")
    assert lib.xrtBORead(bo, out.ctypes.data, out.nbytes, 0) == 0
    mapped = np.ctypeslib.as_array(ctypes.cast(lib.xrtBOMap(bo), ctypes.POINTER(ctypes.c_uint8)), (out.nbytes,))
    assert mapped.tobytes() == out.tobytes()
    for h in (bi, bo):
        assert lib.xrtBOFree(h) == 0
    assert lib.xrtRunClose(r) == 0
    return out


def _krnl_rtl_pyxrt(x: np.ndarray, n_out: int, index: int) -> np.ndarray:
    d = pyxrt.device(index)
    uid = d.load_xclbin(str(_PROJECTS["jet"] / "model.xclbin"))
    k = pyxrt.kernel(d, uid, "krnl_rtl")
    rows, n_in = x.shape
    bi = pyxrt.bo(d, rows * n_in * 4, pyxrt.bo.normal, k.group_id(0))
    bo = pyxrt.bo(d, rows * n_out * 4, pyxrt.bo.normal, k.group_id(0))
    bi.write(np.ascontiguousarray(x, dtype="<f4"), 0)
    bi.sync(pyxrt.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE)
    r = k(bi, bo, rows * n_in, rows * n_out)
    assert r.wait(5000) == pyxrt.ert_cmd_state.ERT_CMD_STATE_COMPLETED
    bo.sync(pyxrt.xclBOSyncDirection.XCL_BO_SYNC_BO_FROM_DEVICE)
    return np.frombuffer(bo.map(), dtype="<f4").reshape(rows, n_out).copy()


_PROJECTS: dict[str, Path] = {}


@pytest.fixture(autouse=True)
def _remember_projects(request):
    if "projects" in request.fixturenames:
        _PROJECTS.update(request.getfixturevalue("projects"))


# ------------------------------------------------------------------------------ surface
def test_the_library_exports_xrts_c_api_and_an_xrt_install_layout(xrt_root, lib):
    for name in XRT_API:
        assert hasattr(lib, name), name
    info = json.loads((xrt_root / "version.json").read_text())
    assert info["BUILD_VERSION"] == "2.17.319"
    nm = shutil.which("nm")
    if nm:
        text = subprocess.run([nm, "-D", "--defined-only", str(xrt_root / "lib" / LIBRARY)], capture_output=True,
                              text=True, check=True).stdout  # fmt: skip
        exported = {line.split()[-1] for line in text.splitlines() if " T " in line}
        assert exported == {*XRT_API, "fpgasim_register", "fpgasim_blocking_counts", "fpgasim_meter"}
    # cached by source hash: a second build does not recompile
    before = (xrt_root / "lib" / LIBRARY).stat().st_mtime_ns
    assert build_xrt_root(xrt_root) == xrt_root
    assert (xrt_root / "lib" / LIBRARY).stat().st_mtime_ns == before


# ------------------------------------------------------------------------------ computing
def test_krnl_rtl_output_is_bit_for_bit_pyxrts(lib, sim_modes, projects):
    x = np.random.default_rng(7).normal(0, 4, size=(40, 16))
    d, _uid, k = _open(lib, projects["jet"], "krnl_rtl")
    cpu = simcard.stand_in_cpu_s()
    got = _krnl_rtl_c(lib, d, k, x, 5)
    assert simcard.stand_in_cpu_s() > cpu  # the card core's calls are the stand-in's CPU (metered)
    want = _krnl_rtl_pyxrt(x, 5, index=1)
    card = simcard.get_card(0)
    if card.device_mode == "inline":
        assert got.tobytes() == want.tobytes()
    else:  # timing: nothing computed, nothing written; the two APIs' buffers start out alike
        assert got.tobytes() == want.tobytes() == bytes(40 * 5 * 4)
    stats = card.stats
    assert stats["kernel_completions"] == 1 and stats["bytes_to_device"] == x.size * 4
    assert stats["bytes_from_device"] == 40 * 5 * 4
    assert lib.xrtKernelClose(k) == 0 and lib.xrtDeviceClose(d) == 0
    assert card.state()["holders"] == {}  # closed: this process holds the card no more


def test_no_python_runs_per_event(lib, sim, projects):
    """A call's hot path is the card core's, in C: a sync, a start, a wait, a buffer over user
    memory and its free call no Python (no bridge callback); a group id none either (fixed by the
    xclbin, answered in C). The core meters its own CPU (stand_in_cpu_s)."""
    d, _uid, k = _open(lib, projects["jet"], "krnl_rtl")
    rows, n_in, n_out = 8, 16, 5
    data = np.ascontiguousarray(np.ones((rows, n_in)), dtype="<f4")
    g = lib.xrtKernelArgGroupId(k, 0)
    bi, bo = lib.xrtBOAlloc(d, data.nbytes, 0, g), lib.xrtBOAlloc(d, rows * n_out * 4, 0, g)
    assert lib.xrtBOWrite(bi, data.ctypes.data, data.nbytes, 0) == 0
    card = simcard.get_card(0)

    def callbacks(call) -> dict[str, int]:
        before = xrt_c_bridge.metered_callbacks()
        call()
        after = xrt_c_bridge.metered_callbacks()
        return {name: n - before[name][1] for name, (_ns, n) in after.items() if n != before[name][1]}

    assert callbacks(lambda: lib.xrtKernelArgGroupId(k, 0)) == {}
    assert callbacks(lambda: lib.xrtKernelArgGroupId(k, 9)) == {"kernel_group": 1}  # XRT's range error
    sent = card.stats["bytes_to_device"]
    assert callbacks(lambda: lib.xrtBOSync(bi, TO_DEVICE, data.nbytes, 0)) == {}
    assert card.stats["bytes_to_device"] == sent + data.nbytes and card.dma_log[-1][2] <= time.monotonic()
    r = lib.xrtRunOpen(k)
    for i, v in enumerate((V(bi), V(bo), ctypes.c_int(rows * n_in), ctypes.c_int(rows * n_out))):
        assert lib.xrtRunSetArg(r, i, v) == 0
    cpu = simcard.stand_in_cpu_s()
    assert callbacks(lambda: lib.xrtRunStart(r)) == {}
    assert callbacks(lambda: lib.xrtRunWaitFor(r, 0)) == {}
    assert simcard.stand_in_cpu_s() > cpu
    assert card.stats["kernel_completions"] == 1
    page = mmap.mmap(-1, mmap.PAGESIZE)
    address = ctypes.addressof(ctypes.c_char.from_buffer(page))

    def wrapped():
        ub = lib.xrtBOAllocUserPtr(d, address, mmap.PAGESIZE, 0, g)
        assert ub and lib.xrtBOSync(ub, TO_DEVICE, mmap.PAGESIZE, 0) == 0 and lib.xrtBOFree(ub) == 0

    assert callbacks(wrapped) == {}
    assert callbacks(lambda: lib.xrtRunClose(r)) == {}
    for h in (bi, bo):
        assert lib.xrtBOFree(h) == 0
    assert lib.xrtKernelClose(k) == 0
    assert callbacks(lambda: lib.xrtDeviceClose(d)) == {"dev_close": 1}


def test_a_chosen_cu_its_banks_and_xrts_copy_into_a_connected_bank(lib, sim, projects, capsys):
    """ "krnl_rtl:{krnl_rtl_2}" (on DDR[1]): group ids as pyxrt's, unsigned scalars from the
    varargs, a run started twice; a bo in a bank the CU cannot reach runs on XRT's copy in a
    connected bank (so the output never reaches the caller's buffer), as under pyxrt."""
    folder, name = projects["jet"], "krnl_rtl:{krnl_rtl_2}"
    d, _uid, k = _open(lib, folder, name)
    pd = pyxrt.device(1)
    pk = pyxrt.kernel(pd, pd.load_xclbin(str(folder / "model.xclbin")), name)
    assert [lib.xrtKernelArgGroupId(k, i) for i in range(2)] == [pk.group_id(i) for i in range(2)] == [1, 1]
    for i in (2, 3):  # past the last memory argument: std::out_of_range in XRT
        assert _errno_of(lambda i=i: lib.xrtKernelArgGroupId(k, i)) == (-1, errno.EINVAL)
        with pytest.raises(IndexError):
            pk.group_id(i)
    rows, n_in, n_out = 24, 16, 5
    x = np.random.default_rng(3).normal(0, 4, size=(rows, n_in)).astype("<f4")
    outputs = []
    for out_group in (1, 0):
        bi = lib.xrtBOAlloc(d, x.nbytes, 0, 1)
        bo = lib.xrtBOAlloc(d, rows * n_out * 4, 0, out_group)
        assert lib.xrtBOWrite(bi, x.ctypes.data, x.nbytes, 0) == 0
        assert lib.xrtBOSync(bi, TO_DEVICE, x.nbytes, 0) == 0
        r = lib.xrtRunOpen(k)
        assert lib.xrtRunSetArg(r, 0, V(bi)) == 0 and lib.xrtRunSetArg(r, 1, V(bo)) == 0
        assert lib.xrtRunSetArg(r, 2, ctypes.c_uint(rows * n_in)) == 0
        assert lib.xrtRunSetArg(r, 3, ctypes.c_uint(rows * n_out)) == 0
        assert lib.xrtRunStart(r) == 0 and lib.xrtRunWait(r) == COMPLETED
        assert lib.xrtRunStart(r) == 0 and lib.xrtRunWait(r) == COMPLETED  # a run starts again
        assert lib.xrtBOSync(bo, FROM_DEVICE, rows * n_out * 4, 0) == 0
        got = ctypes.string_at(lib.xrtBOMap(bo), rows * n_out * 4)
        pbi = pyxrt.bo(pd, x.nbytes, pyxrt.bo.normal, 1)
        pbo = pyxrt.bo(pd, rows * n_out * 4, pyxrt.bo.normal, out_group)
        pbi.write(x, 0)
        pbi.sync(pyxrt.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE)
        assert pk(pbi, pbo, rows * n_in, rows * n_out).wait(5000) == pyxrt.ert_cmd_state.ERT_CMD_STATE_COMPLETED
        pbo.sync(pyxrt.xclBOSyncDirection.XCL_BO_SYNC_BO_FROM_DEVICE)
        assert got == bytes(pbo.map())
        outputs.append(got)
        assert lib.xrtRunClose(r) == 0 and lib.xrtBOFree(bi) == 0 and lib.xrtBOFree(bo) == 0
    assert outputs[0] != outputs[1] == b"\xa5" * (rows * n_out * 4)  # the copy got the output
    assert capsys.readouterr().err.count("Allocating local copy of argument buffer in connected bank") == 2
    stats = simcard.get_card(0).stats["cus"]
    assert stats["krnl_rtl_2"]["commands"] == 4 and stats["krnl_rtl_1"]["commands"] == 0
    assert lib.xrtKernelClose(k) == 0 and lib.xrtDeviceClose(d) == 0
    assert not simcard.get_card(0).buffers  # the copy went with its run


# ------------------------------------------------------------------------------ user pointers
def test_user_pointer_buffers_follow_xocls_rules(lib, sim, projects):
    d, _uid, k = _open(lib, projects["jet"], "krnl_rtl")
    rows, n_in, n_out = 16, 16, 5
    x = np.random.default_rng(11).normal(0, 4, size=(rows, n_in))
    page = mmap.PAGESIZE
    mem_in, mem_out = mmap.mmap(-1, 2 * page), mmap.mmap(-1, page)
    addr_in = ctypes.addressof(ctypes.c_char.from_buffer(mem_in))
    addr_out = ctypes.addressof(ctypes.c_char.from_buffer(mem_out))
    np.frombuffer(mem_in, dtype="<f4", count=rows * n_in)[:] = x.astype("<f4").ravel()
    g = lib.xrtKernelArgGroupId(k, 0)
    bi = lib.xrtBOAllocUserPtr(d, addr_in, rows * n_in * 4, 0, g)
    bo = lib.xrtBOAllocUserPtr(d, addr_out, rows * n_out * 4, 0, g)
    assert bi and bo and lib.xrtBOMap(bi) == addr_in
    assert lib.xrtBOSync(bi, TO_DEVICE, rows * n_in * 4, 0) == 0
    r = lib.xrtRunOpen(k)
    for i, value in enumerate((V(bi), V(bo), ctypes.c_int(rows * n_in), ctypes.c_int(rows * n_out))):
        assert lib.xrtRunSetArg(r, i, value) == 0
    assert lib.xrtRunStart(r) == 0 and lib.xrtRunWaitFor(r, 5000) == COMPLETED
    assert lib.xrtBOSync(bo, FROM_DEVICE, rows * n_out * 4, 0) == 0
    got = np.frombuffer(mem_out, dtype="<f4", count=rows * n_out).reshape(rows, n_out)
    assert got.tobytes() == _krnl_rtl_pyxrt(x, n_out, index=1).tobytes()
    stats = simcard.get_card(0).stats
    assert stats["bytes_to_device_userptr"] == rows * n_in * 4
    assert stats["bytes_from_device_userptr"] == rows * n_out * 4
    # not page-aligned: EINVAL; pages not writable: ENOMEM (xocl pins them for writing)
    assert _errno_of(lambda: lib.xrtBOAllocUserPtr(d, addr_in + 64, 256, 0, g)) == (None, errno.EINVAL)
    libc = ctypes.CDLL(None)
    libc.mmap.restype = V
    libc.mmap.argtypes = [V, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [V, ctypes.c_size_t]
    addr_ro = libc.mmap(None, page, 1, 0x22, -1, 0)  # PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS
    try:
        assert _errno_of(lambda: lib.xrtBOAllocUserPtr(d, addr_ro, page, 0, g)) == (None, errno.ENOMEM)
    finally:
        libc.munmap(addr_ro, page)
    for h in (bi, bo):
        assert lib.xrtBOFree(h) == 0
    lib.xrtRunClose(r)
    lib.xrtKernelClose(k)
    lib.xrtDeviceClose(d)


# ------------------------------------------------------------------------------ refusals
def test_handles_it_did_not_make_are_refused_never_followed(lib, sim, projects):
    d, _uid, k = _open(lib, projects["jet"], "krnl_rtl")
    bo = lib.xrtBOAlloc(d, 4096, 0, 0)
    r = lib.xrtRunOpen(k)
    junk = ctypes.create_string_buffer(256)  # readable memory that is no handle
    foreign = [ctypes.addressof(junk), 0x12345678, bo, k, d]
    for h in foreign:
        assert _errno_of(lambda h=h: lib.xrtRunStart(h)) == (-1, errno.EINVAL)
        assert _errno_of(lambda h=h: lib.xrtRunWait(h)) == (ABORT, errno.EINVAL)
        assert lib.xrtRunState(h) == ABORT and lib.xrtRunClose(h) == -1
    for h in (ctypes.addressof(junk), r, k, d):
        assert _errno_of(lambda h=h: lib.xrtBOSize(h)) == (2**64 - 1, errno.EINVAL)
        assert _errno_of(lambda h=h: lib.xrtBOAddress(h)) == (2**64 - 1, errno.EINVAL)
        assert _errno_of(lambda h=h: lib.xrtBOSync(h, 0, 16, 0)) == (-1, errno.EINVAL)
        assert lib.xrtBOMap(h) is None and lib.xrtBOFree(h) == -1
    for h in (ctypes.addressof(junk), bo, r, d):
        assert lib.xrtRunOpen(h) is None and lib.xrtKernelClose(h) == -1
    for h in (ctypes.addressof(junk), bo, r, k):
        assert _errno_of(lambda h=h: lib.xrtDeviceClose(h)) == (-1, errno.EINVAL)
        assert lib.xrtBOAlloc(h, 4096, 0, 0) is None
    assert lib.xrtRunSetArg(r, 0, V(ctypes.addressof(junk))) == -1  # not a bo
    assert lib.xrtBOSize(bo) == 4096
    # a closed handle is refused too
    assert lib.xrtBOFree(bo) == 0
    assert _errno_of(lambda: lib.xrtBOSize(bo)) == (2**64 - 1, errno.EINVAL)
    assert lib.xrtBOFree(bo) == -1
    assert lib.xrtRunClose(r) == 0 and lib.xrtRunClose(r) == -1
    # write/read past the end, device errors
    b2 = lib.xrtBOAlloc(d, 64, 0, 0)
    data = ctypes.create_string_buffer(128)
    assert _errno_of(lambda: lib.xrtBOWrite(b2, data, 65, 0)) == (-1, errno.EINVAL)
    assert _errno_of(lambda: lib.xrtBORead(b2, data, 8, 60)) == (-1, errno.EINVAL)
    assert _errno_of(lambda: lib.xrtBOAlloc(d, 64, 0, 9)) == (None, errno.EINVAL)  # no such bank
    assert _errno_of(lambda: lib.xrtDeviceOpen(5)) == (None, errno.ENODEV)
    assert _errno_of(lambda: lib.xrtDeviceOpenByBDF(b"nonsense")) == (None, errno.EINVAL)
    d1 = lib.xrtDeviceOpenByBDF(simcard.bdf_of(1).encode())
    assert d1 and lib.xrtDeviceClose(d1) == 0
    lib.xrtBOFree(b2)
    assert lib.xrtKernelClose(k) == 0 and lib.xrtKernelClose(k) == -1
    assert lib.xrtDeviceClose(d) == 0 and lib.xrtDeviceClose(d) == -1


def test_contexts_and_loads_follow_the_card_rules(lib, sim, projects):
    folder = projects["jet"]
    d, uid, k = _open(lib, folder, "krnl_rtl:{krnl_rtl_1}")
    # exclusive use of a CU someone shares: EBUSY; of the other CU: fine
    assert _errno_of(lambda: lib.xrtPLKernelOpenExclusive(d, uid, b"krnl_rtl:{krnl_rtl_1}")) == (None, errno.EBUSY)
    k2 = lib.xrtPLKernelOpenExclusive(d, uid, b"krnl_rtl:{krnl_rtl_2}")
    assert k2
    assert _errno_of(lambda: lib.xrtPLKernelOpen(d, uid, b"krnl_rtl:{krnl_rtl_2}")) == (None, errno.EBUSY)
    assert _errno_of(lambda: lib.xrtPLKernelOpen(d, uid, b"no_such_kernel")) == (None, errno.EINVAL)
    assert _errno_of(lambda: lib.xrtPLKernelOpen(d, b"\x01" * 16, b"krnl_rtl")) == (None, errno.EINVAL)
    # another xclbin while contexts are open: EBUSY (the same one again: a no-op)
    assert lib.xrtDeviceLoadXclbinFile(d, str(folder / "model.xclbin").encode()) == 0
    other = str(folder / "other.xclbin").encode()
    assert _errno_of(lambda: lib.xrtDeviceLoadXclbinFile(d, other)) == (-1, errno.EBUSY)
    assert lib.xrtKernelClose(k) == 0 and lib.xrtKernelClose(k2) == 0
    b = lib.xrtBOAlloc(d, 4096, 0, 0)
    assert _errno_of(lambda: lib.xrtDeviceLoadXclbinFile(d, other)) == (-1, errno.EPERM)  # buffers
    assert lib.xrtBOFree(b) == 0
    assert lib.xrtDeviceLoadXclbinFile(d, other) == 0
    got = ctypes.create_string_buffer(16)
    assert lib.xrtDeviceGetXclbinUUID(d, got) == 0 and got.raw != uid
    assert lib.xrtDeviceLoadXclbinFile(d, b"/nonexistent.xclbin") == -1
    assert lib.xrtDeviceClose(d) == 0


def test_a_hung_cu_times_out_and_closing_it_leaves_bad_state(lib, sim, projects):
    d, _uid, k = _open(lib, projects["jet"], "krnl_rtl")
    g = lib.xrtKernelArgGroupId(k, 0)
    bi, bo = lib.xrtBOAlloc(d, 4096, 0, g), lib.xrtBOAlloc(d, 4096, 0, g)
    r = lib.xrtRunOpen(k)
    for i, value in enumerate((V(bi), V(bo), ctypes.c_int(16), ctypes.c_int(5))):
        assert lib.xrtRunSetArg(r, i, value) == 0
    (sim / "hang-card0").touch()
    assert lib.xrtRunStart(r) == 0
    t0 = time.monotonic()
    assert lib.xrtRunWaitFor(r, 150) == TIMEOUT
    assert 0.14 < time.monotonic() - t0 < 2.0
    assert lib.xrtRunState(r) == NEW
    # still outstanding: XRT's std::runtime_error, its errno left as it was (here cleared)
    assert _errno_of(lambda: lib.xrtRunStart(r)) == (-1, 0)
    assert simcard.get_card(0).stats["hung"] == ["krnl_rtl_1"]
    # closing the context with the command outstanding: the driver's abort, bad_state
    assert lib.xrtRunClose(r) == 0 and lib.xrtKernelClose(k) == 0
    assert simcard.get_card(0).state()["bad_state"]
    other = str(projects["jet"] / "other.xclbin").encode()
    for h in (bi, bo):
        lib.xrtBOFree(h)
    assert _errno_of(lambda: lib.xrtDeviceLoadXclbinFile(d, other)) == (-1, errno.EDEADLK)
    assert lib.xrtDeviceClose(d) == 0


def test_a_run_keeps_its_kernels_context_and_device_close_tears_down(lib, sim, projects):
    d, _uid, k = _open(lib, projects["jet"], "krnl_rtl")
    bi = lib.xrtBOAlloc(d, 4096, 0, 0)
    r = lib.xrtRunOpen(k)
    assert lib.xrtRunSetArg(r, 0, V(bi)) == 0
    assert lib.xrtKernelClose(k) == 0
    assert lib.xrtBOFree(bi) == 0
    card = simcard.get_card(0)
    assert card.state()["holders"][str(os.getpid())]["contexts"]  # the run holds the kernel
    assert len(card.buffers) == 1  # and its argument
    assert lib.xrtRunClose(r) == 0
    assert not card.state()["holders"][str(os.getpid())]["contexts"] and not card.buffers
    # xrtDeviceClose as the process's exit: contexts closed, buffers freed, card released
    k = lib.xrtPLKernelOpen(d, _uid, b"krnl_rtl")
    b = lib.xrtBOAlloc(d, 4096, 0, 0)
    other = pyxrt.device(0)  # another open of the card in this process: it stays open
    assert lib.xrtDeviceClose(d) == 0
    assert card.state()["holders"][str(os.getpid())]["contexts"] == {} and not card.buffers
    del other
    gc.collect()
    assert card.state()["holders"] == {}
    assert _errno_of(lambda: lib.xrtBOSync(b, TO_DEVICE, 4096, 0)) == (-1, errno.ENOENT)
    assert lib.xrtBOFree(b) == 0 and lib.xrtKernelClose(k) == 0


# ------------------------------------------------------------------------------ the GIL
def _progress_while(call) -> tuple[float, float, list[float]]:
    """Run ``call`` while a thread counts; (start, end, monotonic times of the thread's progress)."""
    ticks: list[float] = []
    stop = threading.Event()
    started = threading.Event()

    def count():
        n = 0
        started.set()
        while not stop.is_set():
            n += 1
            if n % 200 == 0:
                ticks.append(time.monotonic())

    thread = threading.Thread(target=count, daemon=True)
    thread.start()
    started.wait()
    time.sleep(0.02)
    t0 = time.monotonic()
    call()
    t1 = time.monotonic()
    stop.set()
    thread.join()
    return t0, t1, ticks


def _ran_in_the_middle(t0: float, t1: float, ticks: list[float]) -> bool:
    """The thread progressed all along the call (its middle half included): the GIL was free."""
    quarter = (t1 - t0) / 4
    return len([t for t in ticks if t0 + quarter < t < t1 - quarter]) > 10


def _longest_pause(t0: float, t1: float, ticks: list[float]) -> float:
    """The longest stretch of the call in which the thread made no progress (the GIL held: the
    callbacks' few bytecodes may let it run briefly at the start and the end, never in between)."""
    points = [t0, *(t for t in ticks if t0 < t < t1), t1]
    return max(b - a for a, b in itertools.pairwise(points))


def test_blocking_calls_release_the_gil_through_cdll_and_not_through_pydll(lib, gil_lib, sim, projects, monkeypatch):
    monkeypatch.setenv(simcard.ENV_PCIE_GBPS, "0.001")  # 1 MB/s: 200 kB take 200 ms
    d, _uid, k = _open(lib, projects["jet"], "krnl_rtl")
    size = 200_000
    b = lib.xrtBOAlloc(d, size, 0, 0)
    counts = (ctypes.c_uint64 * 2)()
    for api, progresses in ((lib, True), (gil_lib, False)):
        lib.fpgasim_blocking_counts(counts)
        calls0, held0 = counts[0], counts[1]
        t0, t1, ticks = _progress_while(lambda api=api: api.xrtBOSync(b, TO_DEVICE, size, 0))
        assert t1 - t0 >= 0.19
        # the library's own count of blocking stretches entered holding the GIL agrees
        lib.fpgasim_blocking_counts(counts)
        assert counts[0] > calls0 and (counts[1] > held0) == (not progresses)
        if progresses:
            assert _ran_in_the_middle(t0, t1, ticks), "the thread did not run while xrtBOSync slept (CDLL)"
        else:
            assert _longest_pause(t0, t1, ticks) > 0.15, "a thread ran while xrtBOSync slept through PyDLL"
    # a wait on a slow kernel, the same way
    monkeypatch.setenv(simkernels.ENV_KERNEL_DELAY_MS, "200")  # read at every call
    bo = lib.xrtBOAlloc(d, 4096, 0, 0)
    r = lib.xrtRunOpen(k)
    for i, value in enumerate((V(b), V(bo), ctypes.c_int(16), ctypes.c_int(5))):
        assert lib.xrtRunSetArg(r, i, value) == 0
    for api, progresses in ((lib, True), (gil_lib, False)):
        states = []
        t0, t1, ticks = _progress_while(
            lambda api=api, states=states: states.extend((api.xrtRunStart(r), api.xrtRunWait(r)))
        )
        assert states == [0, COMPLETED] and t1 - t0 >= 0.19
        if progresses:
            assert _ran_in_the_middle(t0, t1, ticks), "the thread did not run while xrtRunWait slept (CDLL)"
        else:
            assert _longest_pause(t0, t1, ticks) > 0.15, "a thread ran while xrtRunWait slept through PyDLL"
        assert api.xrtRunState(r) == COMPLETED
    for h in (b, bo):
        lib.xrtBOFree(h)
    lib.xrtRunClose(r)
    lib.xrtKernelClose(k)
    lib.xrtDeviceClose(d)


# ------------------------------------------------------------------------------ serve.py
def test_serve_bootstrap_builds_the_double_and_keeps_pyxrt(tmp_path, xrt_root):
    code = (
        "import os, sys; sys.path.insert(0, sys.argv[1]); import serve; "
        "print(serve._bootstrap()); print(os.environ['XILINX_XRT']); import pyxrt; print(pyxrt.SIMULATED)"
    )
    env = {**os.environ, "FPGASERVE_SIM_API": "xrt-c", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", code, str(SIM)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    api, root, simulated = done.stdout.split()
    assert api == "xrt-c" and simulated == "True"
    assert Path(root, "lib", LIBRARY).is_file() and Path(root).is_relative_to(tmp_path / "cache")
