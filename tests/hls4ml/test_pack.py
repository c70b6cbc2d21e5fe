"""fpgaserve pack's steps that need neither Vivado nor a card: the order of the xclbin build
(typedef fix before synthesis), the tool check, platforms per board, what --hls4ml-project
copies and which xclbin it packs, the float reference's child process and time limit, and the
kernel ABIs: what each converts with, the card.json that ties xclbin and project, and every
mismatch refused.

The Xilinx tools are stood in for where pack would run them: hls4ml's backend ``build`` and
``make_xclbin`` are replaced by functions that look at the project on disk and leave the files
the real tools leave (an IP folder, a csynth report, an xclbin written as v++ lays one out by the
simulated card's writer, ``tests/fpga_sim/xclbin.py``), and ``vivado_hls``/``vivado``/``v++``/
``make`` on PATH are scripts that fail if anything runs them. hls4ml's VitisAccelerator backend
(PR #991, not in the installed hls4ml) is stood in for by a Vitis backend under its name with
its ``create_initial_config`` and ``build(target=...)`` signatures.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from fpga_sim.xclbin import DEFAULT_PLATFORM, write_xclbin
from fpgaserve.backends.hls4ml.card.manifest import resolve
from fpgaserve.backends.hls4ml.project import Hls4mlProject, installed_templates_dir
from fpgaserve.pack import PackError, PackRequest, hls_config, pack, reference, toolchain
from fpgaserve.pack.hls_config import accelerator_kwargs
from support.server_process import BUNDLED_REPO

CSYNTH_XML = """<?xml version="1.0" encoding="UTF-8"?>
<profile>
  <UserAssignments><TopModelName>myproject_axi</TopModelName><TargetClockPeriod>5.00</TargetClockPeriod></UserAssignments>
  <PerformanceEstimates>
    <SummaryOfTimingAnalysis><EstimatedClockPeriod>4.20</EstimatedClockPeriod></SummaryOfTimingAnalysis>
    <SummaryOfOverallLatency>
      <Best-caseLatency>12</Best-caseLatency><Worst-caseLatency>12</Worst-caseLatency>
      <Interval-min>1</Interval-min><Interval-max>1</Interval-max>
    </SummaryOfOverallLatency>
  </PerformanceEstimates>
</profile>
"""


def _tools_on_path(monkeypatch, folder: Path, tools=("vivado_hls", "vivado", "v++")) -> None:
    """Stand-ins for the Xilinx tools: found on PATH, failing loudly if anything runs them."""
    folder.mkdir(parents=True, exist_ok=True)
    for tool in tools:
        script = folder / tool
        script.write_text(f"#!/bin/sh\necho '{tool} must not run in tests' >&2\nexit 99\n")
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")


def _card(version: Path) -> dict:
    return json.loads((version / "card.json").read_text())


def _instance_count(version: Path) -> int:
    config = (version.parent / "config.pbtxt").read_text()
    [count] = [line.split()[1] for line in config.splitlines() if line.strip().startswith("count:")]
    assert 'key: "compute_unit"\n  value: { string_value: "*" }' in config  # every CU of the kernel
    return int(count)


def _header(version: Path) -> str:
    """The comment at the top of config.pbtxt, its lines joined."""
    lines = (version.parent / "config.pbtxt").read_text().splitlines()
    return " ".join(line[2:] for line in lines if line.startswith("# "))


def _tiny_module():
    torch = pytest.importorskip("torch")
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2)).eval()


def _axi_header_compiles(project: Path) -> subprocess.CompletedProcess:
    """g++ parses firmware/<name>_axi.h (and the firmware it includes) against hls4ml's ap_types."""
    [header] = (project / "firmware").glob("*_axi.h")
    return subprocess.run(
        [
            "g++",
            "-std=c++14",
            "-fsyntax-only",
            f"-I{project / 'firmware'}",
            f"-I{installed_templates_dir() / 'ap_types'}",
        ]
        + ["-x", "c++", "-"],
        input=f'#include "{header.name}"\n',
        capture_output=True,
        text=True,
    )


# ---------------------------------------------------------------------- --build-xclbin
def test_xclbin_build_synthesizes_the_fixed_project(tmp_path, monkeypatch):
    """With ap_fixed I/O hls4ml 1.3.0 writes `typedef fixed<16,6,TRN,WRAP,0> T_in;`; the build
    (which reads the project on disk) must see the fixed header, and the version folder gets
    the xclbin and the synthesis report the build left."""
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed")
    from hls4ml.backends import VivadoAcceleratorBackend

    _tools_on_path(monkeypatch, tmp_path / "bin")
    seen: dict = {}

    def fake_build(self, model, **kwargs):
        out = Path(model.config.get_output_dir())
        seen["header"] = _axi_header_compiles(out)
        seen["build_kwargs"] = kwargs
        report = out / "myproject_prj" / "solution1" / "syn" / "report"
        report.mkdir(parents=True)
        (report / "myproject_axi_csynth.xml").write_text(CSYNTH_XML)
        (out / "myproject_prj" / "solution1" / "impl" / "ip").mkdir(parents=True)
        (out / "myproject_prj" / "solution1" / ".autopilot").mkdir()
        (out / "myproject_prj" / "solution1" / ".autopilot" / "db.bin").write_bytes(b"\0" * 4096)
        (out / "vivado_hls.log").write_text("synthesis log\n")

    def fake_make_xclbin(self, model, platform):
        seen["platform"] = platform
        out = Path(model.config.get_output_dir()) / "xclbin_files"
        out.mkdir()
        seen["uuid"] = write_xclbin(out / "myproject_kernel.xclbin", kernel_abi="krnl_rtl", platform=platform)
        seen["xclbin"] = (out / "myproject_kernel.xclbin").read_bytes()

    monkeypatch.setattr(VivadoAcceleratorBackend, "build", fake_build)
    monkeypatch.setattr(VivadoAcceleratorBackend, "make_xclbin", fake_make_xclbin)
    version = pack(
        PackRequest(
            name="tiny",
            repository=tmp_path / "repo",
            pytorch_module=_tiny_module(),
            input_shape=(6,),
            io_precision="ap_fixed<16,6>",
            board="alveo-u200",
            build_xclbin=True,
            float_reference=None,
        )
    )
    assert seen["header"].returncode == 0, seen["header"].stderr  # the build saw valid C++
    assert seen["build_kwargs"]["synth"] and seen["build_kwargs"]["export"]
    assert seen["platform"] == "xilinx_u200_gen3x16_xdma_2_202110_1"  # the board's current platform
    assert (version / "tiny.xclbin").read_bytes() == seen["xclbin"]
    assert (version / "reports" / "myproject_axi_csynth.xml").read_text() == CSYNTH_XML
    assert "Platform: xilinx_u200_gen3x16_xdma_2_202110_1" in (version / "hls4ml_config.yml").read_text()
    assert "typedef ap_fixed<16,6,AP_TRN,AP_WRAP,0> T_in;" in (version / "firmware" / "myproject_axi.h").read_text()
    # nothing of the tool runs, only the files the version folder is made of
    assert sorted(p.name for p in version.iterdir()) == [
        "card.json",
        "firmware",
        "hls4ml_config.yml",
        "model.onnx",
        "reports",
        "tiny.xclbin",
    ]
    # card.json ties the built xclbin to the project: the words are the fixed header's T_in/T_out
    card = _card(version)
    word = "ap_fixed<16,6,AP_TRN,AP_WRAP,0>"
    assert (card["kernel_abi"], card["input"], card["output"]) == ("krnl_rtl", word, word)
    assert card["xclbin"]["uuid"] == seen["uuid"] and card["xclbin"]["compute_units"] == ["krnl_rtl_1"]
    assert _instance_count(version) == 2


def test_xclbin_build_checks_the_tools_before_converting(tmp_path, monkeypatch):
    """Every missing tool is named with the release that provides it; the model is never read."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    req = PackRequest(
        name="m", repository=tmp_path / "r", pytorch=str(tmp_path / "absent.pt"), input_shape=(3,), build_xclbin=True
    )
    with pytest.raises(PackError) as err:
        pack(req)
    text = str(err.value)
    assert text.startswith("--build-xclbin needs vivado_hls, vivado and v++ on PATH")
    assert "vivado_hls: HLS synthesis and IP export; Vivado HLS, part of Vivado <= 2020.1" in text
    assert "v++: linking the xclbin for xilinx_u250_gen3x16_xdma_4_1_202210_1; Vitis >= 2022.1" in text
    assert "two Xilinx releases side by side" in text and "xbutil examine" in text

    _tools_on_path(monkeypatch, tmp_path / "bin", tools=("vivado", "v++"))
    with pytest.raises(PackError) as err:
        pack(req)
    assert str(err.value).startswith("--build-xclbin needs vivado_hls on PATH")
    assert "v++:" not in str(err.value)

    # a 2018.3 platform needs no second release
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    req.platform = "xilinx_u250_xdma_201830_2"
    with pytest.raises(PackError) as err:
        pack(req)
    assert "Vitis >= 2018.3" in str(err.value) and "side by side" not in str(err.value)


# ---------------------------------------------------------------------- platforms
@pytest.mark.parametrize(
    ("board", "platform", "release"),
    [
        ("alveo-u250", "xilinx_u250_gen3x16_xdma_4_1_202210_1", "2022.1"),
        ("alveo-u200", "xilinx_u200_gen3x16_xdma_2_202110_1", "2021.1"),
        ("alveo-u280", "xilinx_u280_gen3x16_xdma_1_202211_1", "2022.1"),
        ("alveo-u50", "xilinx_u50_gen3x16_xdma_5_202210_1", "2022.1"),
        ("alveo-u55c", "xilinx_u55c_gen3x16_xdma_3_202210_1", "2022.1"),
    ],
)
def test_platform_follows_the_board(tmp_path, board, platform, release):
    req = PackRequest(name="m", repository=tmp_path, board=board)
    assert toolchain.resolve_platform(req.board, req.platform) == platform
    assert accelerator_kwargs(req, tmp_path, toolchain.resolve_platform(board, None))["platform"] == platform
    assert toolchain.vitis_release(platform) == release
    assert toolchain.resolve_platform(board, "xilinx_u250_xdma_201830_2") == "xilinx_u250_xdma_201830_2"


def test_platform_of_other_boards(tmp_path):
    # SoC boards have no Vitis platform: hls4ml gets none (it writes Platform for Alveo only)
    assert toolchain.resolve_platform("pynq-z2", None) is None
    assert "platform" not in accelerator_kwargs(PackRequest(name="m", repository=tmp_path), tmp_path, None)
    with pytest.raises(PackError, match=r"no default Vitis platform is known for board 'alveo-u9'.*--platform"):
        toolchain.resolve_platform("alveo-u9", None)
    assert toolchain.vitis_release("my_custom_shell") is None


# ---------------------------------------------------------------------- --hls4ml-project
def _built_project(root: Path, xclbins_at: tuple[str, ...]) -> Path:
    """The bundled FACILE project as a user's folder looks after hls4ml's build: the writer's
    files, plus run folders with big (sparse) files, logs and the given xclbins."""
    shutil.copytree(BUNDLED_REPO / "facile" / "1", root)
    (root / "model.onnx").unlink()
    (root / "project.tcl").write_text('set project_name "myproject"\nset backend "vivadoaccelerator"\n')
    (root / "src").mkdir()
    (root / "src" / "myproject_kernel.v").write_text("module krnl_rtl(); endmodule\n")
    report = root / "myproject_prj" / "solution1" / "syn" / "report"
    report.mkdir(parents=True)
    (report / "myproject_axi_csynth.xml").write_text(CSYNTH_XML)
    (root / "myproject_prj" / "vivado_hls.app").write_text(
        '<project><solutions><solution name="solution1"/></solutions></project>'
    )
    big = {
        "myproject_prj/solution1/.autopilot/db/a.bc": 1 << 30,
        "myproject_prj/solution1/impl/ip/hdl/verilog/myproject_axi.v": 1 << 20,
        "myproject_vivado_accelerator/project_1.runs/impl_1/design.dcp": 1 << 30,
        "hls4ml_IP/fastmachinelearning.org_hls4ml_krnl_rtl_1.0.zip": 1 << 20,
        "xo_files/myproject_kernel.xo": 1 << 20,
        "_x/link/vivado/vpl/prj/prj.runs/impl_1/routed.dcp": 1 << 30,
        ".Xil/Vivado-1-host/dbg.log": 1 << 10,
        "build_hw_rel/link/int/system.bit": 1 << 28,
    }
    for rel, size in big.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            f.truncate(size)  # sparse: looks big, costs nothing, and would take long to copy
    (root / "vivado_hls.log").write_text("INFO: [HLS 200-10] Running 'vivado_hls'\n")
    (root / "vivado.jou").write_text("# Vivado journal\n")
    for rel in xclbins_at:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        write_xclbin(root / rel, kernel_abi="krnl_rtl")  # each with its own uuid
    return root


def _files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def test_project_pack_copies_no_run_folders_and_several_xclbins_are_not_guessed(tmp_path, caplog):
    several = ("xclbin_files/myproject_kernel.xclbin", "build_hw_rel/kernel_wrapper.xclbin", "f1/model.awsxclbin")
    project = _built_project(tmp_path / "prj", several)
    req = PackRequest(name="facile", repository=tmp_path / "repo", hls4ml_project=str(project))
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="fpgaserve.pack"):
        version = pack(req)
    assert time.monotonic() - started < 30  # three 1 GiB files were not copied
    firmware = _files(BUNDLED_REPO / "facile" / "1" / "firmware")
    assert _files(version) == sorted(
        ["card.json", "hls4ml_config.yml", "reports/myproject_axi_csynth.xml"] + [f"firmware/{f}" for f in firmware]
    )
    assert _card(version)["xclbin"] is None
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "holds 3 xclbins; none is packed (choose one with --xclbin FILE)" in warning
    for rel in several:
        assert f"  {rel}" in warning

    # --xclbin picks one: packed under the model's name, with its own suffix
    req.force = True
    req.xclbin = str(project / "f1" / "model.awsxclbin")
    version = pack(req)
    assert (version / "facile.awsxclbin").read_bytes() == (project / "f1" / "model.awsxclbin").read_bytes()
    assert not (version / "facile.xclbin").exists()

    # --vendor-templates keeps hls4ml's whole output, still without a run folder
    req.xclbin, req.vendor_templates = None, True
    version = pack(req)
    kept = {p.split("/")[0] for p in _files(version)}
    assert kept == {"card.json", "firmware", "hls4ml_config.yml", "project.tcl", "reports", "src"}


def test_project_pack_takes_its_only_xclbin(tmp_path, caplog):
    project = _built_project(tmp_path / "prj", ("xclbin_files/myproject_kernel.xclbin",))
    with caplog.at_level(logging.WARNING, logger="fpgaserve.pack"):
        version = pack(PackRequest(name="facile", repository=tmp_path / "repo", hls4ml_project=str(project)))
    assert (version / "facile.xclbin").read_bytes() == (
        project / "xclbin_files" / "myproject_kernel.xclbin"
    ).read_bytes()
    assert _card(version)["xclbin"]["file"] == "facile.xclbin"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_xclbin_file_is_checked_before_anything_is_done(tmp_path):
    project = _built_project(tmp_path / "prj", ())
    not_xclbin = tmp_path / "notes.xclbin"
    not_xclbin.write_text("not a bitstream")
    for given, message in (
        (not_xclbin, r"is not an xclbin: it does not start with the axlf magic"),
        (tmp_path / "absent.xclbin", r"--xclbin .*absent\.xclbin: no such file"),
        (tmp_path / "prj" / "hls4ml_config.yml", r"expected a \.xclbin or \.awsxclbin file"),
    ):
        req = PackRequest(name="m", repository=tmp_path / "repo", hls4ml_project=str(project), xclbin=str(given))
        with pytest.raises(PackError, match=message):
            pack(req)
        assert not (tmp_path / "repo").exists()
    with pytest.raises(PackError, match="not both"):
        pack(PackRequest(name="m", repository=tmp_path, pytorch="x.pt", build_xclbin=True, xclbin=str(not_xclbin)))


# ---------------------------------------------------------------------- the float reference's child process
class SleepingJob:
    """A reference job that never finishes; it notes its process id first."""

    def __init__(self, pid_file: Path):
        self.pid_file = pid_file

    def make(self, out: Path) -> None:
        self.pid_file.write_text(str(os.getpid()))
        time.sleep(600)


class IdentityJob:
    """A reference job that writes a one-node ONNX model (Identity on [batch, 4])."""

    def make(self, out: Path) -> None:
        import onnx
        from onnx import TensorProto, helper

        graph = helper.make_graph(
            [helper.make_node("Identity", ["x"], ["y"])],
            "identity",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        )
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), out)


class UnknownOperatorJob:
    """A reference job whose model ONNX Runtime cannot run (an operator of no known domain)."""

    def make(self, out: Path) -> None:
        import onnx
        from onnx import TensorProto, helper

        graph = helper.make_graph(
            [helper.make_node("Frobnicate", ["x"], ["y"], domain="example.custom")],
            "custom",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        )
        opsets = [helper.make_opsetid("", 13), helper.make_opsetid("example.custom", 1)]
        onnx.save(helper.make_model(graph, opset_imports=opsets), out)


class CrashingJob:
    def make(self, out: Path) -> None:
        os._exit(3)  # as a segfault in native code would: no exception, no message


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_reference_past_its_time_limit_is_killed(tmp_path, caplog):
    pid_file = tmp_path / "pid"
    out = tmp_path / "model.onnx"
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="fpgaserve.pack"):
        assert reference.make_reference(SleepingJob(pid_file), out, timeout=8) is False
    took = time.monotonic() - started
    assert 8 <= took < 30
    pid = int(pid_file.read_text())  # the job did start, in another process
    assert pid != os.getpid() and not _pid_alive(pid)
    assert not out.exists()
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "no float reference (model.onnx) is packed: making it took longer than 8 s" in warning
    assert "--fpga-mode onnx will be unavailable for this model" in warning


def test_reference_child_reports_success_and_each_failure(tmp_path, caplog):
    out = tmp_path / "model.onnx"
    assert reference.make_reference(IdentityJob(), out, timeout=120) is True
    assert out.is_file()
    with caplog.at_level(logging.WARNING, logger="fpgaserve.pack"):
        assert reference.make_reference(UnknownOperatorJob(), out, timeout=120) is False
        assert not out.exists()
        assert reference.make_reference(CrashingJob(), out, timeout=120) is False
    first, second = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "Frobnicate" in first
    assert "the child process making it died (exit status 3)" in second


def test_reference_job_that_cannot_be_pickled_runs_here(tmp_path, caplog):
    class LocalJob(IdentityJob):  # a class defined in a function cannot be pickled
        pass

    with caplog.at_level(logging.WARNING, logger="fpgaserve.pack"):
        assert reference.make_reference(LocalJob(), tmp_path / "model.onnx", timeout=5) is True
    assert "cannot be sent to a child process" in caplog.records[0].getMessage()


def test_pack_goes_on_without_a_reference_that_hangs(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(reference, "job_for", lambda req: SleepingJob(tmp_path / "pid"))
    req = PackRequest(
        name="tiny", repository=tmp_path / "repo", pytorch_module=_tiny_module(), input_shape=(6,), reference_timeout=5
    )
    with caplog.at_level(logging.WARNING, logger="fpgaserve.pack"):
        version = pack(req)
    assert (version / "firmware" / "myproject.cpp").is_file() and not (version / "model.onnx").exists()
    assert any("took longer than 5 s" in r.getMessage() for r in caplog.records)
    assert not _pid_alive(int((tmp_path / "pid").read_text()))


# ---------------------------------------------------------------------- kernel ABIs and card.json
def _mlp(n_in: int, n_out: int, seed: int = 3):
    torch = pytest.importorskip("torch")
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(n_in, 8), torch.nn.ReLU(), torch.nn.Linear(8, n_out)).eval()


def _no_reference(monkeypatch) -> None:
    """Packs here need no float reference (its child process is tested above and costs seconds)."""
    monkeypatch.setattr(reference, "job_for", lambda req: None)


# what each ABI's module-scoped pack converts, and what card.json must then say
ABI_PACKS = {
    "krnl_rtl": {
        "request": {"kernel_abi": "krnl_rtl", "n_in": 6, "n_out": 2},
        "card": {"kernel": "krnl_rtl", "input": "float", "output": "float", "rows_per_call": None},
    },
    "kernel_wrapper": {  # float elements: HW_Quant, the kernel quantizes
        "request": {"kernel_abi": "kernel_wrapper", "n_in": 6, "n_out": 2},
        "card": {"kernel": "kernel_wrapper", "input": "float", "output": "float", "rows_per_call": None},
    },
    "kernel_wrapper_native": {  # the firmware's own input_t/result_t, 2 CUs, legacy rows per call
        "request": {
            "kernel_abi": "kernel_wrapper",
            "n_in": 6,
            "n_out": 2,
            "io_precision": "native",
            "compute_units": 2,
            "batchsize": 512,
        },
        "card": {
            "kernel": "kernel_wrapper",
            "input": "ap_fixed<16,6>",
            "output": "ap_fixed<16,6>",
            "rows_per_call": None,
        },
    },
    "faast": {
        "request": {"kernel_abi": "faast", "n_in": 16, "n_out": 1},
        "card": {
            "kernel": "alveo_hls4ml",
            "input": "ap_fixed<16,6>",
            "output": "ap_fixed<16,6>",
            "rows_per_call": 16384,
        },
    },
}


@pytest.fixture(scope="module")
def abi_versions(tmp_path_factory) -> dict[str, Path]:
    """Each entry of ABI_PACKS packed once from a PyTorch MLP (kernel_wrapper through hls4ml's
    Vitis backend, as without PR #991); name -> version folder."""
    repo = tmp_path_factory.mktemp("abi-repo")
    versions = {}
    with pytest.MonkeyPatch.context() as mp:
        _no_reference(mp)
        mp.setattr(hls_config, "vitis_accelerator_available", lambda: False)
        for name, spec in ABI_PACKS.items():
            options = dict(spec["request"])
            module = _mlp(options.pop("n_in"), options.pop("n_out"))
            # every type ap_fixed<16,6>: the kernel_wrapper's native elements and FaaST's fields
            if name != "krnl_rtl":
                options["granularity"] = "model"
            req = PackRequest(name=name, repository=repo, pytorch_module=module, input_shape=(module[0].in_features,))
            for key, value in options.items():
                setattr(req, key, value)
            versions[name] = pack(req)
    return versions


@pytest.mark.parametrize("name", sorted(ABI_PACKS))
def test_each_kernel_abi_packs_and_records_card_json(abi_versions, name):
    version = abi_versions[name]
    spec = ABI_PACKS[name]
    card = _card(version)
    project = Hls4mlProject.load(version)
    assert card["kernel_abi"] == spec["request"]["kernel_abi"]
    assert {k: card[k] for k in spec["card"]} == spec["card"]
    assert (card["n_in"], card["n_out"]) == (spec["request"]["n_in"], spec["request"]["n_out"])
    # the hash of the files as packed (template library left out), what a load compares
    assert card["firmware_sha256"] == project.firmware_hash()
    assert card["xclbin"] is None and card["written_by"] == "fpgaserve pack"
    assert _instance_count(version) == 1
    header = _header(version)
    assert f"kernel ABI {card['kernel_abi']}, elements {card['input']} in and {card['output']} out" in header
    assert "Instances: no xclbin is packed" in header


def test_kernel_wrapper_without_pr_991_is_a_vitis_project_that_says_its_kernel(abi_versions):
    """hls4ml's Vitis backend writes the firmware; the config gets PR #991's AcceleratorConfig,
    which is what tells the emulation modes that floats cross (HW_Quant) or the native types."""
    for name, hw_quant, units, batchsize in (
        ("kernel_wrapper", True, 1, 8192),
        ("kernel_wrapper_native", False, 2, 512),
    ):
        version = abi_versions[name]
        config = yaml.safe_load((version / "hls4ml_config.yml").read_text().replace("!!python/tuple", ""))
        assert config["Backend"] == "Vitis" and config["Part"] == toolchain.board_part("alveo-u250")
        assert config["AcceleratorConfig"] == {
            "Board": "alveo-u250",
            "Platform": toolchain.default_platform("alveo-u250"),
            "Num_Kernel": units,
            "Num_Worker": 1,
            "Batchsize": batchsize,
            "HW_Quant": hw_quant,
        }
        io = Hls4mlProject.load(version).host_io
        assert (io.input, io.output) == (("float", "float") if hw_quant else (None, None))
    assert not list(abi_versions["faast"].glob("firmware/*_axi.*"))  # FaaST wraps a plain project


@pytest.mark.parametrize(
    ("name", "cus", "legacy", "rows"),
    [
        ("krnl_rtl", 3, False, None),
        ("kernel_wrapper", 2, False, None),
        ("kernel_wrapper_native", 2, True, 512),  # PR #991 before 2025-07: Batchsize rows per call
        ("faast", 4, False, 16384),
    ],
)
def test_xclbin_of_the_abi_is_recorded_and_sizes_the_instances(
    abi_versions, tmp_path, monkeypatch, name, cus, legacy, rows
):
    """--xclbin with a matching kernel: card.json records its identity and compute units, the
    instance group gets two per CU, and a load binds the version folder as packed."""
    _no_reference(monkeypatch)
    abi_name = ABI_PACKS[name]["request"]["kernel_abi"]
    built = tmp_path / "built.xclbin"
    uuid = write_xclbin(built, kernel_abi=abi_name, cus=cus, project=abi_versions[name], legacy=legacy)
    version = pack(
        PackRequest(
            name="m",
            repository=tmp_path / "repo",
            hls4ml_project=str(abi_versions[name]),
            kernel_abi=abi_name,
            xclbin=str(built),
        )
    )
    card = _card(version)
    kernel = ABI_PACKS[name]["card"]["kernel"]
    first = 0 if abi_name == "faast" else 1
    assert card["xclbin"]["file"] == "m.xclbin" and card["xclbin"]["uuid"] == uuid
    assert card["xclbin"]["platform"] == DEFAULT_PLATFORM and card["xclbin"]["interface_uuid"]
    assert card["xclbin"]["compute_units"] == [f"{kernel}_{first + i}" for i in range(cus)]
    assert card["rows_per_call"] == rows
    # repacking a version folder keeps its firmware, so the hash stays the one the xclbin was built from
    assert card["firmware_sha256"] == _card(abi_versions[name])["firmware_sha256"]
    assert _instance_count(version) == 2 * cus
    assert f"Instances: 2 per compute unit of {kernel} in m.xclbin ({cus}): one instance's DMA" in _header(version)
    binding = resolve(Hls4mlProject.load(version), version, version / "m.xclbin")
    assert binding.abi_class.name == abi_name and binding.io.rows_per_call == rows


def test_instance_count_given_wins(abi_versions, tmp_path, monkeypatch):
    _no_reference(monkeypatch)
    write_xclbin(tmp_path / "k.xclbin", kernel_abi="krnl_rtl", cus=2)
    req = PackRequest(name="m", repository=tmp_path / "repo", hls4ml_project=str(abi_versions["krnl_rtl"]))
    req.xclbin, req.instance_count = str(tmp_path / "k.xclbin"), 3
    version = pack(req)
    assert _instance_count(version) == 3
    assert "Instances: set by --instance-count." in _header(version)


def test_xclbin_of_another_kernel_abi_is_refused_before_converting(tmp_path):
    """An alveo_hls4ml (FaaST) xclbin packed with --kernel-abi krnl_rtl: refused naming both and
    the ABI that would fit, before the model (which does not exist) is read."""
    faast = tmp_path / "alveo_hls4ml.xclbin"
    write_xclbin(faast, kernel_abi="faast")
    req = PackRequest(name="m", repository=tmp_path / "r", pytorch=str(tmp_path / "absent.pt"), input_shape=(3,))
    req.xclbin = str(faast)
    with pytest.raises(PackError) as err:
        pack(req)
    text = str(err.value)
    assert text.startswith(f"the xclbin {faast} does not fit --kernel-abi krnl_rtl: ")
    assert "has no krnl_rtl kernel" in text
    assert "it holds alveo_hls4ml, a faast kernel (FaaST alveo_hls4ml): pack it with --kernel-abi faast" in text
    assert not (tmp_path / "r").exists()


def test_xclbin_and_project_of_different_flows_are_refused(abi_versions, tmp_path, monkeypatch):
    """A krnl_rtl xclbin next to a Vitis (kernel_wrapper) project, given or found: refused whichever
    ABI is asked for, each message naming the xclbin's kernel or the project's kind."""
    _no_reference(monkeypatch)
    project = tmp_path / "prj"
    shutil.copytree(abi_versions["kernel_wrapper"], project)
    (project / "build_hw_rel").mkdir()
    write_xclbin(project / "build_hw_rel" / "kernel_wrapper.xclbin", kernel_abi="krnl_rtl")
    req = PackRequest(name="m", repository=tmp_path / "r", hls4ml_project=str(project), kernel_abi="kernel_wrapper")
    with pytest.raises(PackError) as err:  # the one xclbin found in the project
        pack(req)
    assert str(err.value).startswith(f"the xclbin {project / 'build_hw_rel' / 'kernel_wrapper.xclbin'} does not fit")
    assert "pack it with --kernel-abi krnl_rtl" in str(err.value)

    req.kernel_abi, req.xclbin = "krnl_rtl", str(project / "build_hw_rel" / "kernel_wrapper.xclbin")
    with pytest.raises(PackError) as err:
        pack(req)
    text = str(err.value)
    assert text.startswith(
        f"--hls4ml-project {project} does not fit --kernel-abi krnl_rtl (hls4ml VivadoAccelerator): "
    )
    assert "the project is a Vitis project without the <name>_axi wrapper" in text
    assert text.endswith("It fits --kernel-abi kernel_wrapper")  # HW_Quant floats: not FaaST's raw fields
    assert str(tmp_path) not in text.replace(str(project), "")  # no temporary folder in the message
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("abi_name", ["kernel_wrapper", "faast"])
def test_bundled_project_does_not_fit_the_other_abis(tmp_path, abi_name):
    """The bundled projects are VivadoAccelerator ones (their firmware runs behind <name>_axi)."""
    req = PackRequest(
        name="m", repository=tmp_path, hls4ml_project=str(BUNDLED_REPO / "facile" / "1"), kernel_abi=abi_name
    )
    with pytest.raises(PackError) as err:
        pack(req)
    text = str(err.value)
    assert text.startswith(f"--hls4ml-project {BUNDLED_REPO / 'facile' / '1'} does not fit --kernel-abi {abi_name}")
    assert "VivadoAccelerator project" in text and "It fits --kernel-abi krnl_rtl" in text
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize(
    ("n_in", "precision", "why"),
    [
        (47, "ap_fixed<16,6>", "FaaST's kernel carries at most 32 inputs per row (one 512-bit beat); the model has 47"),
        (16, "ap_fixed<18,8>", "the firmware's input_t is ap_fixed<18,8"),
    ],
)
def test_faast_refuses_what_its_packing_cannot_carry(tmp_path, monkeypatch, n_in, precision, why):
    _no_reference(monkeypatch)
    req = PackRequest(
        name="m",
        repository=tmp_path,
        pytorch_module=_mlp(n_in, 1),
        input_shape=(n_in,),
        kernel_abi="faast",
        granularity="model",
        default_precision=precision,
    )
    with pytest.raises(PackError) as err:
        pack(req)
    text = str(err.value)
    assert text.startswith("the model converted from PyTorch Sequential does not fit --kernel-abi faast")
    assert why in text
    assert "--granularity model --default-precision 'ap_fixed<16,6>'" in text  # how to get there
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"io_precision": "native"}, "--io-precision native: krnl_rtl's RTL moves one 32-bit word per element"),
        ({"io_precision": "ap_fixed<40,10>"}, r"--io-precision ap_fixed<40,10>: krnl_rtl: "),
        ({"kernel_abi": "kernel_wrapper", "io_precision": "ap_fixed<16,6>"}, "kernel_wrapper's elements are float"),
        ({"kernel_abi": "faast", "io_precision": "float"}, r"FaaST's alveo_hls4ml moves the firmware's own 16-bit"),
        ({"compute_units": 4}, "--compute-units set(s) hls4ml VitisAccelerator's Num_Kernel/Batchsize"),
        ({"kernel_abi": "faast", "batchsize": 16}, "--batchsize set(s) hls4ml VitisAccelerator's"),
        ({"kernel_abi": "kernel_wrapper", "compute_units": 0}, "--compute-units must be at least 1"),
        ({"kernel_abi": "nope"}, "--kernel-abi: unknown kernel ABI 'nope' (known: krnl_rtl, kernel_wrapper, faast)"),
    ],
)
def test_settings_that_do_not_fit_the_abi_are_refused_before_converting(tmp_path, options, message):
    req = PackRequest(name="m", repository=tmp_path / "r", pytorch=str(tmp_path / "absent.pt"), input_shape=(3,))
    for key, value in options.items():
        setattr(req, key, value)
    with pytest.raises(PackError) as err:
        pack(req)
    assert message in str(err.value)


def test_conversion_settings_are_refused_for_a_project(tmp_path):
    req = PackRequest(name="m", repository=tmp_path, hls4ml_project=str(BUNDLED_REPO / "facile" / "1"))
    req.io_precision, req.compute_units = "float", 2
    with pytest.raises(PackError, match=r"^--io-precision, --compute-units set\(s\) how a model is converted"):
        pack(req)


# ---------------------------------------------------------------------- --build-xclbin per kernel ABI
def test_build_xclbin_refusals_per_abi(tmp_path, monkeypatch, vitis_accelerator):
    """Each is refused before the model (which does not exist) is read."""
    req = PackRequest(
        name="m", repository=tmp_path / "r", pytorch=str(tmp_path / "absent.pt"), input_shape=(3,), build_xclbin=True
    )
    req.kernel_abi = "faast"
    with pytest.raises(PackError) as err:
        pack(req)
    assert str(err.value).startswith("--build-xclbin does not build faast kernels: FaaST's own Makefile")
    assert "--hls4ml-project DIR --kernel-abi faast --xclbin alveo_hls4ml.xclbin" in str(err.value)

    req.kernel_abi = "kernel_wrapper"
    monkeypatch.setattr(hls_config, "vitis_accelerator_available", lambda: False)
    with pytest.raises(PackError) as err:
        pack(req)
    text = str(err.value)
    assert "builds with hls4ml's VitisAccelerator backend, which the installed hls4ml" in text
    assert "PR #991" in text and "--xclbin FILE" in text

    # with the backend, the Makefile's tools and environment are checked, every one missing named
    monkeypatch.setattr(hls_config, "vitis_accelerator_available", lambda: True)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    for name in toolchain.VITIS_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(PackError) as err:
        pack(req)
    text = str(err.value)
    assert text.startswith(
        "--build-xclbin needs make and v++ on PATH and XILINX_VITIS, XILINX_XRT and XILINX_VIVADO set"
    )
    assert "v++: compiling kernel_wrapper and linking the xclbin for xilinx_u250_gen3x16_xdma_4_1_202210_1" in text
    assert "XILINX_XRT: set by XRT's setup.sh" in text

    _tools_on_path(monkeypatch, tmp_path / "bin", tools=("make", "v++"))
    monkeypatch.setenv("XILINX_VITIS", "/opt/Xilinx/Vitis/2022.2")
    monkeypatch.setenv("XILINX_VIVADO", "/opt/Xilinx/Vivado/2022.2")
    with pytest.raises(PackError) as err:
        pack(req)
    assert str(err.value).startswith("--build-xclbin needs XILINX_XRT set, which this host lacks")


_STAND_IN: dict = {}


def _vitis_accelerator_stand_in():
    """One instance per process (hls4ml registers a backend's flows once): hls4ml's Vitis backend
    under PR #991's name, with its create_initial_config keywords and AcceleratorConfig, and a
    build(target=...) that leaves what `make all` leaves: build_hw_rel/kernel_wrapper.xclbin."""
    if "backend" in _STAND_IN:
        return _STAND_IN["backend"]
    from hls4ml.backends import VitisBackend, VivadoBackend

    class VitisAcceleratorStandIn(VitisBackend):
        def __init__(self):
            super(VivadoBackend, self).__init__(name="VitisAccelerator")
            self._register_layer_attributes()
            self._register_flows()
            self.seen: dict = {}

        def create_initial_config(
            self,
            board="alveo-u55c",
            platform=None,
            part=None,
            clock_period=5,
            clock_uncertainty="27%",
            io_type="io_parallel",
            num_kernel=1,
            num_worker=1,
            batchsize=8192,
            hw_quant=False,
            vivado_directives=None,
            **_,
        ):
            self.seen["config"] = {"board": board, "platform": platform, "num_kernel": num_kernel, "hw_quant": hw_quant}
            config = super().create_initial_config(
                part=toolchain.board_part(board), clock_period=clock_period, io_type=io_type
            )
            config["AcceleratorConfig"] = {
                "Board": board,
                "Platform": platform,
                "Num_Kernel": num_kernel,
                "Num_Worker": num_worker,
                "Batchsize": batchsize,
                "HW_Quant": hw_quant,
                "Vivado_Directives": vivado_directives,
            }
            return config

        def build(self, model, reset=False, target="hw", debug=False, **kwargs):
            out = Path(model.config.get_output_dir())
            self.seen["target"] = target
            acc = Hls4mlProject.load(out).accelerator_config  # the files on disk, as make reads them
            (out / "build_hw_rel").mkdir()
            self.seen["uuid"] = write_xclbin(
                out / "build_hw_rel" / "kernel_wrapper.xclbin",
                kernel_abi="kernel_wrapper",
                cus=acc["Num_Kernel"],
                platform=acc["Platform"],
                project=out,
            )

    _STAND_IN["backend"] = VitisAcceleratorStandIn()
    return _STAND_IN["backend"]


@pytest.fixture
def vitis_accelerator(monkeypatch):
    """The stand-in registered with hls4ml for one test, as PR #991 registers its backend."""
    from hls4ml.backends import backend as backends
    from hls4ml.writer import VitisWriter
    from hls4ml.writer.writers import writer_map

    monkeypatch.setitem(writer_map, "VitisAccelerator", VitisWriter)  # the backend finds its writer by name
    stand_in = _vitis_accelerator_stand_in()
    stand_in.seen.clear()
    monkeypatch.setitem(backends.backend_map, "vitisaccelerator", stand_in)
    return stand_in


def test_kernel_wrapper_build_with_the_vitis_accelerator_backend(tmp_path, monkeypatch, vitis_accelerator):
    _no_reference(monkeypatch)
    _tools_on_path(monkeypatch, tmp_path / "bin", tools=("make", "v++"))
    for name in toolchain.VITIS_ENVIRONMENT:
        monkeypatch.setenv(name, f"/opt/{name.lower()}")
    req = PackRequest(
        name="kw",
        repository=tmp_path / "repo",
        pytorch_module=_mlp(6, 2),
        input_shape=(6,),
        kernel_abi="kernel_wrapper",
        compute_units=3,
        build_xclbin=True,
    )
    version = pack(req)
    platform = toolchain.default_platform("alveo-u250")
    assert vitis_accelerator.seen["config"] == {
        "board": "alveo-u250",
        "platform": platform,
        "num_kernel": 3,
        "hw_quant": True,
    }
    assert vitis_accelerator.seen["target"] == "hw"
    config = yaml.safe_load((version / "hls4ml_config.yml").read_text().replace("!!python/tuple", ""))
    assert config["Backend"] == "VitisAccelerator" and config["AcceleratorConfig"]["Num_Kernel"] == 3
    card = _card(version)
    assert (card["kernel_abi"], card["input"], card["output"]) == ("kernel_wrapper", "float", "float")
    assert card["xclbin"]["uuid"] == vitis_accelerator.seen["uuid"]
    assert card["xclbin"]["compute_units"] == ["kernel_wrapper_1", "kernel_wrapper_2", "kernel_wrapper_3"]
    assert _instance_count(version) == 6
    assert (version / "kw.xclbin").is_file()


def test_vitis_accelerator_options_follow_the_installed_signature(tmp_path, monkeypatch):
    """PR #991's first versions took num_thread and no platform/hw_quant, and no other keyword,
    and built with synth/vsynth flags: pack passes only what the backend names, and refuses a
    setting it cannot pass or a build it cannot ask for."""
    import hls4ml.backends

    class EarlyVitisAccelerator:
        def create_initial_config(
            self, board="alveo-u55c", part=None, clock_period=5, io_type="io_parallel", num_kernel=1, num_thread=1,
            batchsize=8192,
        ):  # fmt: skip
            raise AssertionError("not called here")

        def build(self, model, reset=False, synth=True, vsynth=True):
            raise AssertionError("not called here")

    monkeypatch.setattr(hls_config, "vitis_accelerator_available", lambda: True)
    monkeypatch.setattr(hls4ml.backends, "get_backend", lambda name: EarlyVitisAccelerator())
    req = PackRequest(name="m", repository=tmp_path, kernel_abi="kernel_wrapper", io_precision="native")
    req.compute_units = 2
    kwargs = accelerator_kwargs(req, tmp_path, "xilinx_u250_gen3x16_xdma_4_1_202210_1")
    assert kwargs == {
        "backend": "VitisAccelerator",
        "board": "alveo-u250",
        "io_type": "io_parallel",
        "num_kernel": 2,
        "batchsize": 8192,
        "output_dir": str(tmp_path),
        "project_name": "myproject",
    }
    req.io_precision = "float"  # HW_Quant, which that backend cannot be told
    with pytest.raises(PackError, match=r"takes no hw_quant .*\(--io-precision native\)"):
        accelerator_kwargs(req, tmp_path, None)
    req.io_precision, req.platform = "native", "xilinx_u250_xdma_201830_2"  # a platform chosen by the user
    with pytest.raises(PackError, match="takes no platform"):
        accelerator_kwargs(req, tmp_path, req.platform)

    # its build() took synth/vsynth flags, not a target: refused before the model is read
    req = PackRequest(name="m", repository=tmp_path / "r", pytorch=str(tmp_path / "absent.pt"), input_shape=(3,))
    req.kernel_abi, req.build_xclbin = "kernel_wrapper", True
    with pytest.raises(PackError, match=r"VitisAccelerator backend has no build\(target=\.\.\.\)"):
        pack(req)


# ---------------------------------------------------------------------- max_batch_size from the memory budget
FACILE = BUNDLED_REPO / "facile" / "1"
#: facile's row in the config's FP32 tensors: 47 inputs and 1 output
FACILE_ROW_BYTES = 4 * (47 + 1)


def _max_batch_size(version: Path) -> int:
    config = (version.parent / "config.pbtxt").read_text()
    return int(next(line.split(":")[1] for line in config.splitlines() if line.startswith("max_batch_size:")))


def test_max_batch_size_is_chosen_to_fit_the_batch_memory_budget(tmp_path, caplog):
    """Without --max-batch-size, pack gives the model as many rows as fit the budget (at most
    16384) and says so: in its log and in the config's header, with rows, bytes per row and budget."""
    caplog.set_level(logging.INFO, logger="fpgaserve.pack")
    roomy = pack(PackRequest(name="roomy", repository=tmp_path, hls4ml_project=str(FACILE)))
    assert _max_batch_size(roomy) == 16384
    assert "Batch: max_batch_size 16384: pack's largest batch (16384), well within the 1 GiB batch memory" in _header(
        roomy
    )

    budget = 64 * 1024
    tight = pack(PackRequest(name="tight", repository=tmp_path, hls4ml_project=str(FACILE), batch_memory_budget=budget))
    rows = budget // FACILE_ROW_BYTES
    assert rows == 341 and _max_batch_size(tight) == rows
    said = (
        f"max_batch_size {rows}: the most rows that fit the 64 KiB batch memory budget (--batch-memory-budget); "
        f"a full batch is {rows} rows x {FACILE_ROW_BYTES} bytes per row (FP32: 47 input + 1 output elements) = "
        f"{rows * FACILE_ROW_BYTES / 1024:.2f} KiB"
    )
    assert said in [r.getMessage() for r in caplog.records]
    assert f"Batch: {said}." in _header(tight)


def test_batch_memory_budget_refusals(tmp_path):
    """A row larger than the budget, or a --max-batch-size whose full batch exceeds it, is an
    error naming the sizes and the flags, and the repository is left untouched."""
    small = PackRequest(name="m", repository=tmp_path, hls4ml_project=str(FACILE), batch_memory_budget=100)
    with pytest.raises(PackError) as err:
        pack(small)
    assert str(err.value) == (
        "one row of 'm' takes 192 B: 192 bytes per row (FP32: 47 input + 1 output elements), more than the 100 B "
        "batch memory budget (--batch-memory-budget); raise the budget if the server can hold it"
    )
    given = PackRequest(
        name="m", repository=tmp_path, hls4ml_project=str(FACILE), batch_memory_budget=1 << 20, max_batch_size=8192
    )
    with pytest.raises(PackError) as err:
        pack(given)
    assert str(err.value) == (
        "--max-batch-size 8192: a full batch of 'm' would take 1.50 MiB (8,192 rows x 192 bytes per row (FP32: 47 "
        "input + 1 output elements)), more than the 1 MiB batch memory budget (--batch-memory-budget), which holds "
        "5,461 rows; lower --max-batch-size or raise the budget"
    )
    assert not (tmp_path / "m").exists()
    given.max_batch_size = 5461  # exactly the rows that fit
    assert _max_batch_size(pack(given)) == 5461


def test_batch_memory_budget_flag(tmp_path):
    """The command line takes the budget with units and says the choice; a size it cannot read
    is a usage error."""
    cli = [sys.executable, "-m", "fpgaserve.server.cli", "pack", "m", "--hls4ml-project", str(FACILE)]
    done = subprocess.run(
        [*cli, "--repository", str(tmp_path), "--batch-memory-budget", "0.5MiB"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    rows = (1 << 19) // FACILE_ROW_BYTES
    assert f"max_batch_size {rows}: the most rows that fit the 512 KiB batch memory budget" in done.stderr
    assert _max_batch_size(tmp_path / "m" / "1") == rows
    bad = subprocess.run([*cli, "--batch-memory-budget", "lots"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2
    assert "argument --batch-memory-budget: 'lots' is not a size: give a number with B, KiB, MiB" in bad.stderr
