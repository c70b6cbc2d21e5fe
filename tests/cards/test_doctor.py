"""``fpgaserve doctor`` on simulated cards: every check it makes, passing and failing.

The doctor runs as a user runs it, ``fpgaserve doctor --model-repository R [--json]``, started
through ``tests/fpga_sim/serve.py`` (the simulated ``pyxrt`` first on the import path, as XRT's
``setup.sh`` puts the real one). Each failure it must report is made real on the simulated
host: no card, an xclbin linked for another shell, an xclbin swapped after packing, banks too
small for ``max_batch_size``, a kernel that hangs, sensors a container cannot read.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVE = ROOT / "tests" / "fpga_sim" / "serve.py"
BUNDLED = ROOT / "bitstreams"

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the simulated kernels run the C-simulation (g++)")


def _record(version: Path, **kw) -> str:
    from fpga_sim.xclbin import write_xclbin
    from fpgaserve.backends.hls4ml.card.axlf import read_xclbin
    from fpgaserve.backends.hls4ml.card.manifest import CardManifest
    from fpgaserve.backends.hls4ml.project import Hls4mlProject

    uuid = write_xclbin(version / "model.xclbin", kernel_abi="krnl_rtl", project=version, **kw)
    CardManifest.for_project(Hls4mlProject.load(version), "krnl_rtl", read_xclbin(version / "model.xclbin")).write(
        version
    )
    return uuid


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """facile with a 2-CU xclbin recorded in card.json; jet_tagger without an xclbin."""
    root = tmp_path_factory.mktemp("doctor_repo")
    for model in ("facile", "jet_tagger"):
        shutil.copytree(BUNDLED / model, root / model)
    _record(root / "facile" / "1", cus=2)
    return root


def _doctor(repo: Path, tmp_path: Path, *args: str, cards: int = 1, **env: str) -> tuple[int, dict, str]:
    control = tmp_path / "control"
    control.mkdir(exist_ok=True)
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("FPGASERVE_SIM_")}
    full_env.update(FPGASERVE_SIM_CARDS=str(cards), FPGASERVE_SIM_CONTROL_DIR=str(control), **env)
    cmd = [sys.executable, str(SERVE), "doctor", "--model-repository", str(repo), *args]
    out = subprocess.run([*cmd, "--json"], capture_output=True, text=True, env=full_env, timeout=300)
    table = subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=300)
    assert out.returncode == table.returncode, (out.stdout, table.stdout)
    return out.returncode, json.loads(out.stdout), table.stdout


def _row(report: dict, subject: str, check: str) -> dict:
    found = [r for r in report["rows"] if r["subject"] == subject and r["check"] == check]
    assert len(found) == 1, (subject, check, report["rows"])
    return found[0]


def test_a_healthy_host_passes_every_check(repo, tmp_path):
    rc, report, table = _doctor(repo, tmp_path)
    assert rc == 0 and report["ok"], table
    assert "SIMULATED" in _row(report, "runtime", "card API")["detail"]
    assert _row(report, "card 0", "identity")["detail"].startswith(
        "0000:65:00.1 shell xilinx_u250_gen3x16_xdma_shell_4_1"
    )
    assert _row(report, "card 0", "completion")["status"] == "ok"
    assert _row(report, "card 0", "sensors")["status"] == "ok"
    assert _row(report, "model facile", "kernel")["detail"].startswith("hls4ml VivadoAccelerator: krnl_rtl(")
    for cu in ("krnl_rtl_1", "krnl_rtl_2"):
        row = _row(report, "model facile", f"one batch on {cu}")
        assert row["status"] == "ok" and "64 rows equal the numpy emulation" in row["detail"], row
    assert _row(report, "model jet_tagger", "xclbin")["status"] == "skip"
    # the table for people says the same
    assert "fpgaserve doctor: all checks passed" in table.splitlines()[-1]
    assert "one batch on krnl_rtl_2" in table


def test_a_host_without_a_card_fails_and_names_each_model(repo, tmp_path):
    rc, report, table = _doctor(repo, tmp_path, cards=0)
    assert rc != 0 and not report["ok"]
    assert _row(report, "cards", "probe")["status"] == "fail"
    row = _row(report, "model facile", "card")
    assert row["status"] == "fail" and "no card to run model.xclbin on" in row["detail"], row
    assert "FAILED" in table.splitlines()[-1]


def test_an_xclbin_for_another_shell_fails(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(BUNDLED / "facile", repo / "facile")
    _record(repo / "facile" / "1", platform="xilinx_u55c_gen3x16_xdma_3_202210_1")
    rc, report, _ = _doctor(repo, tmp_path)
    row = _row(report, "model facile", "platform")
    assert rc != 0 and row["status"] == "fail", row
    assert (
        "xilinx_u55c_gen3x16_xdma_3_202210_1" in row["detail"] and "xilinx_u250_gen3x16_xdma_shell_4_1" in row["detail"]
    )


def test_an_xclbin_swapped_after_packing_fails(tmp_path):
    from fpga_sim.xclbin import write_xclbin

    repo = tmp_path / "repo"
    shutil.copytree(BUNDLED / "facile", repo / "facile")
    version = repo / "facile" / "1"
    recorded = _record(version)
    swapped = write_xclbin(version / "model.xclbin", kernel_abi="krnl_rtl", project=version)
    rc, report, _ = _doctor(repo, tmp_path)
    row = _row(report, "model facile", "xclbin and project")
    assert rc != 0 and row["status"] == "fail"
    assert recorded in row["detail"] and swapped in row["detail"], row


def test_banks_too_small_for_max_batch_size_fail(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(BUNDLED / "facile", repo / "facile")
    _record(repo / "facile" / "1", cu_banks=["PLRAM[0]"])
    rc, report, _ = _doctor(repo, tmp_path)
    row = _row(report, "model facile", "banks")
    assert rc != 0 and row["status"] == "fail" and "PLRAM[0]" in row["detail"], row


def test_a_hanging_kernel_fails_its_batch(repo, tmp_path):
    control = tmp_path / "control"
    control.mkdir()
    (control / "hang-card0-krnl_rtl_2").write_text("")
    config = repo / "facile" / "config.pbtxt"
    text = config.read_text()
    config.write_text(text + 'parameters { key: "kernel_timeout_secs" value: { string_value: "1" } }\n')
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FPGASERVE_SIM_")}
        env.update(FPGASERVE_SIM_CARDS="1", FPGASERVE_SIM_CONTROL_DIR=str(control))
        out = subprocess.run(
            [sys.executable, str(SERVE), "doctor", "--model-repository", str(repo), "--json"],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
    finally:
        config.write_text(text)
    report = json.loads(out.stdout)
    assert out.returncode != 0
    assert _row(report, "model facile", "one batch on krnl_rtl_1")["status"] == "ok"
    row = _row(report, "model facile", "one batch on krnl_rtl_2")
    assert row["status"] == "fail" and "did not finish a call of 64 rows within 1 s" in row["detail"], row


def test_unreadable_sensors_are_a_warning(repo, tmp_path):
    rc, report, _ = _doctor(repo, tmp_path, FPGASERVE_SIM_SENSORS="unreadable")
    row = _row(report, "card 0", "sensors")
    assert rc == 0 and row["status"] == "warn", row
    assert "left out" in row["detail"]


def test_a_host_without_pyxrt_says_how_to_get_it(repo, tmp_path):
    """Without the simulator's pyxrt on the path (plain `fpgaserve doctor`): no XRT binding."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FPGASERVE_SIM_")}
    out = subprocess.run(
        [sys.executable, "-m", "fpgaserve.server.cli", "doctor", "--card-api", "xrt", "--model-repository", str(repo)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode != 0
    assert "pyxrt" in out.stdout and "source /opt/xilinx/xrt/setup.sh" in out.stdout, out.stdout


def test_a_healthy_host_passes_through_xrts_c_api(repo, tmp_path):
    """With XRT's C API loadable (the C double of libxrt_coreutil under XILINX_XRT) doctor names
    it, drives every compute unit through it, and has no GIL warning; through pyxrt alone it warns."""
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    rc, report, table = _doctor(repo, tmp_path, FPGASERVE_SIM_API="xrt-c", **env)
    assert rc == 0 and report["ok"], table
    assert _row(report, "runtime", "card API")["detail"].startswith("xrt-c: 2.17.319 ("), table
    assert not [r for r in report["rows"] if r["check"] == "GIL"], table
    assert _row(report, "card 0", "identity")["detail"].startswith(
        "0000:65:00.1 shell xilinx_u250_gen3x16_xdma_shell_4_1"
    )
    for cu in ("krnl_rtl_1", "krnl_rtl_2"):
        assert _row(report, "model facile", f"one batch on {cu}")["status"] == "ok", table
    rc, report, table = _doctor(repo, tmp_path, FPGASERVE_SIM_API="xrt", **env)
    assert rc == 0 and _row(report, "runtime", "card API")["detail"].startswith("xrt: "), table
    gil = _row(report, "runtime", "GIL")
    assert gil["status"] == "warn" and "libxrt_coreutil.so.2" in gil["detail"], gil


def test_a_host_without_xrts_c_library_says_how_to_get_it(repo, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FPGASERVE_SIM_") and k != "XILINX_XRT"}
    env["XILINX_XRT"] = str(tmp_path / "no-xrt")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "fpgaserve.server.cli",
            "doctor",
            "--card-api",
            "xrt-c",
            "--model-repository",
            str(repo),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode != 0
    assert "libxrt_coreutil.so.2" in out.stdout and "source /opt/xilinx/xrt/setup.sh" in out.stdout, out.stdout
