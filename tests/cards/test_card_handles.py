"""What a model leaves on a card when it unloads, through XRT's C API (the C double of
``libxrt_coreutil.so.2``): nothing.

* With its last model gone, fpgaserve closes every handle it holds on the card (kernels and runs,
  that is its CU contexts, then the device): another process can then load another xclbin and
  ``xbutil reset`` can run, which the simulated card refuses, as XRT does, while they are open.
* A compute unit's entry built from one xclbin is never reused for another xclbin's compute unit
  of the same name (its bank differs here).
* A ``float`` scalar argument reaches ``xrtRunSetArg`` as the C ``double`` its varargs promote
  it to, its value kept (not made an int first).
* A call that fails says which call and what it returned, with the errno that call left:
  never one an earlier call left behind (XRT's ``std::exception`` paths leave errno alone),
  and an ABORT from a wait names the wait and the state.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
SIM = TESTS / "fpga_sim"
JET_TAGGER = ROOT / "bitstreams" / "jet_tagger" / "1"
SIM_ENV = ("FPGASERVE_SIM_CARDS", "FPGASERVE_SIM_CONTROL_DIR", "FPGASERVE_SIM_DEVICE", "PATH", "XILINX_XRT")

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the simulated kernels run the C-simulation (g++)")


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    """One simulated card behind the C double (XILINX_XRT), xbutil's stand-in on PATH."""
    from fpga_sim.xrt_c import BuildUnavailable, build_xrt_root

    saved = {k: os.environ.get(k) for k in SIM_ENV}
    control = tmp_path_factory.mktemp("control")
    try:
        root = build_xrt_root(tmp_path_factory.mktemp("xrt"))
    except BuildUnavailable as e:
        pytest.skip(f"the C double of libxrt_coreutil cannot be built: {e}")
    os.environ.update(
        FPGASERVE_SIM_CARDS="1",
        FPGASERVE_SIM_CONTROL_DIR=str(control),
        FPGASERVE_SIM_DEVICE="inline",
        XILINX_XRT=str(root),
        PATH=f"{SIM / 'bin'}{os.pathsep}{saved['PATH']}",
    )
    sys.path.insert(0, str(SIM / "xrt_python"))
    yield control
    _fresh()
    sys.path.remove(str(SIM / "xrt_python"))
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _fresh() -> None:
    from fpga_sim import card as simcard
    from fpga_sim import xrt_c_bridge
    from fpgaserve.backends.hls4ml.card.cards import CardPool
    from fpgaserve.backends.hls4ml.card.runtime import reset_api

    CardPool.reset_instance()
    reset_api()
    simcard.forget_cards()
    xrt_c_bridge.forget()
    try:
        simcard.reset_card(0)
    except simcard.CardError:
        pass


@pytest.fixture
def pool(sim):
    from fpgaserve.backends.hls4ml.card.cards import CardPool
    from fpgaserve.backends.hls4ml.card.runtime import open_api

    _fresh()
    api = open_api("xrt-c")
    assert api.name == "xrt-c"
    yield CardPool(api)
    _fresh()


@pytest.fixture(scope="module")
def versions(tmp_path_factory):
    """The jet tagger twice: krnl_rtl_1 on DDR[0] in one xclbin, on DDR[1] in the other."""
    from fpga_sim.xclbin import write_xclbin
    from fpgaserve.backends.hls4ml.card.axlf import read_xclbin
    from fpgaserve.backends.hls4ml.card.manifest import CardManifest
    from fpgaserve.backends.hls4ml.project import Hls4mlProject

    out = {}
    for name, banks in (("ddr0", ["DDR[0]", "DDR[1]"]), ("ddr1", ["DDR[1]", "DDR[0]"])):
        folder = tmp_path_factory.mktemp(name) / "1"
        shutil.copytree(JET_TAGGER, folder)
        write_xclbin(folder / "model.xclbin", kernel_abi="krnl_rtl", cus=2, cu_banks=banks)
        CardManifest.for_project(Hls4mlProject.load(folder), "krnl_rtl", read_xclbin(folder / "model.xclbin")).write(
            folder
        )
        out[name] = folder
    return out


def _runner(pool, folder: Path, cu: str = "krnl_rtl_1"):
    from fpgaserve.backends.hls4ml.card.manifest import resolve
    from fpgaserve.backends.hls4ml.card.runner import CardRunner, Placement
    from fpgaserve.backends.hls4ml.project import Hls4mlProject

    binding = resolve(Hls4mlProject.load(folder), folder, folder / "model.xclbin")
    card = pool.card(0)
    card.load(binding.xclbin)
    return CardRunner(binding, [Placement(card, cu)], 0, 64, 5.0, "test/0"), binding


def _reference(folder: Path, x: np.ndarray) -> np.ndarray:
    from fpgaserve.backends.hls4ml.csim import CsimLibrary
    from fpgaserve.backends.hls4ml.project import Hls4mlProject

    return CsimLibrary.load(Hls4mlProject.load(folder)).predict(x)


def _other_process_loads(xclbin: Path) -> subprocess.CompletedProcess:
    """Another process loading ``xclbin`` on the card through XRT's C API (the double)."""
    code = f"""
import ctypes, os, sys
sys.path.insert(0, {str(TESTS)!r})
lib = ctypes.CDLL(os.path.join(os.environ["XILINX_XRT"], "lib", "libxrt_coreutil.so.2"), use_errno=True)
lib.xrtDeviceOpen.restype = ctypes.c_void_p
lib.xrtDeviceOpen.argtypes = [ctypes.c_uint]
lib.xrtDeviceLoadXclbinFile.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
lib.xrtDeviceClose.argtypes = [ctypes.c_void_p]
d = lib.xrtDeviceOpen(0)
rc = lib.xrtDeviceLoadXclbinFile(d, {str(xclbin).encode()!r})
print("LOADED" if rc == 0 else f"REFUSED {{os.strerror(ctypes.get_errno())}}", flush=True)
lib.xrtDeviceClose(d)
"""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def _xbutil_reset() -> str:
    from fpga_sim import card as simcard

    out = subprocess.run(
        [sys.executable, str(SIM / "bin" / "xbutil"), "reset", "--device", simcard.bdf_of(0), "--force"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return out.stdout + out.stderr


def test_unloading_the_last_model_closes_every_handle_on_the_card(pool, versions):
    from fpga_sim import card as simcard

    runner, _binding = _runner(pool, versions["ddr0"])
    x = np.random.default_rng(1).normal(0, 4, (20, 16)).astype(np.float32)
    assert np.array_equal(runner.predict(x), _reference(versions["ddr0"], x))
    holder = simcard.get_card(0).state()["holders"][str(os.getpid())]
    assert holder["contexts"] and holder["buffers"]
    # while the model is loaded the card refuses both, as XRT does: contexts are open, and
    # the card is open
    assert _other_process_loads(versions["ddr1"] / "model.xclbin").stdout.strip() == "REFUSED Device or resource busy"
    assert "failed to reset device: Device or resource busy" in _xbutil_reset()
    runner.close()  # the model unloads: its card has no user left
    assert str(os.getpid()) not in simcard.get_card(0).state()["holders"]
    done = _other_process_loads(versions["ddr1"] / "model.xclbin")
    assert done.stdout.strip() == "LOADED", done.stderr
    assert f"Successfully reset Device[{simcard.bdf_of(0)}]" in _xbutil_reset()
    # and a model loaded afterwards opens the card again
    runner, _binding = _runner(pool, versions["ddr0"])
    assert np.array_equal(runner.predict(x), _reference(versions["ddr0"], x))
    runner.close()


def test_a_compute_unit_of_another_xclbin_is_never_the_old_entry(pool, versions):
    first, _ = _runner(pool, versions["ddr0"])
    card = pool.card(0)
    old = card.compute_unit(first.binding.kernel, "krnl_rtl_1")
    assert old.unit.bank_of(0).tag == "DDR[0]"
    first.close()
    second, binding = _runner(pool, versions["ddr1"])  # krnl_rtl_1 on DDR[1] in this design
    new = card.compute_unit(binding.kernel, "krnl_rtl_1")
    assert new is not old and new.unit.bank_of(0).tag == "DDR[1]" and new.kernel is binding.kernel
    x = np.random.default_rng(2).normal(0, 4, (12, 16)).astype(np.float32)
    assert np.array_equal(second.predict(x), _reference(versions["ddr1"], x))
    second.close()


def test_a_float_scalar_is_passed_as_a_double(pool, tmp_path):
    """A kernel whose scalar is declared ``float`` in the xclbin: XRT's xrtRunSetArg reads a
    double from its varargs and stores the float. kernel_wrapper's batchsize, declared float
    here, then holds the bits of 2.5f: the call reads 0x40200000 rows (and hangs: no buffer is
    that large), where a value made an int first would have stored 2.0f (0x40000000)."""
    from fpga_sim.projects import kernel_wrapper_project
    from fpga_sim.xclbin import write_xclbin
    from fpgaserve.backends.hls4ml.card.axlf import read_xclbin

    folder = kernel_wrapper_project(JET_TAGGER, tmp_path / "kw" / "1", num_kernel=1)
    path = folder / "model.xclbin"
    write_xclbin(path, kernel_abi="kernel_wrapper", cus=1, project=folder)
    blob = path.read_bytes()
    spelled = b'<arg name="batchsize" addressQualifier="0" id="0" port="S_AXI_CONTROL" size="0x4" offset="0x10" '
    spelled += b'hostOffset="0x0" hostSize="0x4" type="unsigned int"/>'
    assert blob.count(spelled) == 1
    path.write_bytes(blob.replace(spelled, spelled.replace(b'"unsigned int"', b'"float"       ')))  # same length
    xclbin = read_xclbin(path)
    kernel = xclbin.kernels["kernel_wrapper"]
    assert kernel.args[0].type.strip() == "float"
    card = pool.card(0)
    card.load(xclbin)
    cu = card.compute_unit(kernel, "kernel_wrapper_1")
    bufs = [card.device.allocate(4096, cu.handle, kernel.args[i]) for i in (1, 2)]
    run = cu.handle.start([2.5, *bufs])
    assert run.wait(time.perf_counter() + 0.2).value == "running"  # hung, as the hardware would
    run.release()
    from fpga_sim import card as simcard

    fault = simcard.get_card(0).stats["faults"][-1]
    rows = int(re.search(r"in: (\d+) bytes", fault).group(1)) // (16 * 2)  # 16 inputs of 2 bytes per row
    assert rows == int.from_bytes(ctypes.c_float(2.5), "little") == 0x40200000, fault
    for b in bufs:
        b.free()


def test_a_failed_call_names_the_call_and_a_fresh_code(pool, versions, sim):
    """xrtRunStart refused the way XRT refuses it with a std::exception (a run whose command is
    still in flight: "bad command state, can't launch", errno untouched) after a stale errno was
    left in the thread, then an ABORT from xrtRunWaitFor when the compute unit closes under a
    hung call (an unload): each error names its call and its own code, never the stale one."""
    import errno
    import threading

    from fpgaserve.backends.hls4ml.card.manifest import resolve
    from fpgaserve.backends.hls4ml.card.runtime import DeviceError, RunState
    from fpgaserve.backends.hls4ml.project import Hls4mlProject

    folder = versions["ddr0"]
    binding = resolve(Hls4mlProject.load(folder), folder, folder / "model.xclbin")
    card = pool.card(0)
    card.load(binding.xclbin)
    kernel = binding.kernel
    cu = card.compute_unit(kernel, "krnl_rtl_1")
    bufs = [card.device.allocate(4096, cu.handle, kernel.args[i]) for i in (0, 1)]
    args = [*bufs, 16, 5]
    run = cu.handle.start(args)
    # a bound against a hang, not a timing check: the modelled run takes microseconds
    assert run.wait(time.perf_counter() + 60) is RunState.COMPLETED
    run.release()  # its run goes back to the compute unit, for the next start
    (sim / "hang-card0").touch()
    hung = cu.handle.start(args)  # that run again, its command hung now
    # fpgaserve never starts a run in flight; handing it back is the one way to reach XRT's refusal
    cu.handle._recycle(hung._run)
    ctypes.set_errno(errno.ENOSPC)  # what an earlier foreign call of this thread may leave
    with pytest.raises(DeviceError) as refused:
        cu.handle.start(args)
    text = str(refused.value)
    assert "xrtRunStart failed: returned -1, errno not set" in text, text
    assert "ENOSPC" not in text and os.strerror(errno.ENOSPC) not in text, text

    outcome = {}

    def wait():
        ctypes.set_errno(errno.ENOSPC)
        outcome["state"] = hung.wait(time.perf_counter() + 30)

    waiter = threading.Thread(target=wait)
    waiter.start()
    cu.handle.close()  # as an unload closes it: the driver aborts the hung command
    waiter.join(60)
    assert outcome["state"] is RunState.FAILED
    assert hung.failure is not None and "xrtRunWaitFor returned ABORT (6)" in hung.failure, hung.failure
    assert "ENOSPC" not in hung.failure, hung.failure
    for b in bufs:
        b.free()
