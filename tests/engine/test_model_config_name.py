"""tritonserver's ``--model-config-name``: one repository, a configuration per platform.

With ``--model-config-name=NAME`` each model loads ``<model>/configs/NAME.pbtxt`` where that
file exists, else its ``config.pbtxt`` (for FPGA sites: one repository for U250 and U55C hosts).
Checked here against our server over HTTP (loads, reloads after the file changes or goes, a
broken custom config failing only its model), against the real Triton 2.51 (the same choice for
a model with and one without the custom file), and for names that are not plain file names,
which never select a file outside ``configs/``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from fpgaserve.server import model_config as mc
from support.server_process import CONFORMANCE_REPO, ROOT, ServerProcess, free_port

CUSTOM = "h100"


def _copy_model(repo: Path, source: str, name: str, custom_config: str | None) -> Path:
    """``source`` from the conformance repository as ``name``, with configs/h100.pbtxt = the
    model's own config with ``custom_config``'s text replacing its max_batch_size line."""
    shutil.copytree(CONFORMANCE_REPO / source, repo / name)
    config = (repo / name / "config.pbtxt").read_text().replace(f'name: "{source}"', f'name: "{name}"')
    (repo / name / "config.pbtxt").write_text(config)
    if custom_config is not None:
        (repo / name / "configs").mkdir()
        (repo / name / "configs" / f"{CUSTOM}.pbtxt").write_text(config.replace("max_batch_size: 8", custom_config))
    return repo / name


def _config(port: int, model: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/models/{model}/config", timeout=10) as r:
        return json.load(r)


def _load(port: int, model: str) -> tuple[int, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v2/repository/models/{model}/load", data=b"{}")
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_custom_config_is_chosen_per_load(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    simple = _copy_model(repo, "simple", "simple", "max_batch_size: 4")
    _copy_model(repo, "simple", "without_custom", None)
    _copy_model(repo, "simple", "broken_custom", "max_batch_size: [")
    server = ServerProcess(
        [repo], f"--model-config-name={CUSTOM}", "--model-control-mode=explicit", "--load-model=simple"
    )
    with server:
        port = server.http_port
        assert _config(port, "simple")["max_batch_size"] == 4
        assert _load(port, "without_custom")[0] == 200
        assert _config(port, "without_custom")["max_batch_size"] == 8
        # a broken custom config fails its own model, naming the file; the others keep serving
        status, body = _load(port, "broken_custom")
        assert status == 500, body  # Triton's code for a load failure, as with a broken config.pbtxt
        assert f"broken_custom/configs/{CUSTOM}.pbtxt" in body, body
        assert _config(port, "simple")["max_batch_size"] == 4
        # looked up at every load: an edited custom file is used, a removed one falls back
        custom = simple / "configs" / f"{CUSTOM}.pbtxt"
        custom.write_text(custom.read_text().replace("max_batch_size: 4", "max_batch_size: 2"))
        assert _load(port, "simple")[0] == 200
        assert _config(port, "simple")["max_batch_size"] == 2
        custom.unlink()
        assert _load(port, "simple")[0] == 200
        assert _config(port, "simple")["max_batch_size"] == 8


@pytest.mark.parametrize(
    "name",
    ["", "nope", "../simple/configs/h100", "..", ".h100", "configs/h100", "h100/../h100", "h100\0"],
)
def test_names_that_do_not_name_a_custom_file_select_config_pbtxt(tmp_path, name):
    simple = _copy_model(tmp_path, "simple", "simple", "max_batch_size: 4")
    (simple / "configs" / ".h100.pbtxt").write_text("")  # a hidden file is never a custom config
    assert mc.config_path(simple, name) == simple / "config.pbtxt"
    assert mc.config_path(simple, CUSTOM) == simple / "configs" / f"{CUSTOM}.pbtxt"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_same_choice_as_tritonserver(tmp_path):
    """Triton 2.51 with --model-config-name=h100: `simple` has configs/h100.pbtxt (max batch 4),
    `simple_string` has none (8). Our server, on the same layout, answers the same configs."""
    from support.reference_triton import (
        find_tritonserver,
        start_tritonserver,
        stop_tritonserver,
        write_python_backend_repository,
    )

    if find_tritonserver() is None:
        installer = ROOT.parent / "shared" / "tools" / "get-tritonserver"
        if not installer.exists():
            pytest.skip(f"real Triton not installed and no installer at {installer}")
        r = subprocess.run(
            ["bash", str(installer), str(ROOT / ".tools" / "tritonserver")], capture_output=True, text=True, timeout=900
        )
        if r.returncode != 0 or find_tritonserver() is None:
            pytest.skip(f"could not install the real Triton: {r.stderr.strip()[-500:]}")

    triton_repo = tmp_path / "triton_repo"
    write_python_backend_repository(triton_repo, models=("simple", "simple_string"))
    (triton_repo / "simple" / "configs").mkdir()
    config = (triton_repo / "simple" / "config.pbtxt").read_text()
    assert "max_batch_size: 8" in config
    (triton_repo / "simple" / "configs" / f"{CUSTOM}.pbtxt").write_text(
        config.replace("max_batch_size: 8", "max_batch_size: 4")
    )
    our_repo = tmp_path / "our_repo"
    our_repo.mkdir()
    _copy_model(our_repo, "simple", "simple", "max_batch_size: 4")
    _copy_model(our_repo, "simple_string", "simple_string", None)

    ports = [free_port() for _ in range(3)]
    triton = start_tritonserver(
        triton_repo, *ports, extra_args=[f"--model-config-name={CUSTOM}"], log_path=tmp_path / "triton.log"
    )
    try:
        theirs = {m: _config(ports[1], m)["max_batch_size"] for m in ("simple", "simple_string")}
    finally:
        stop_tritonserver(triton)
    with ServerProcess([our_repo], f"--model-config-name={CUSTOM}") as ours:
        mine = {m: _config(ours.http_port, m)["max_batch_size"] for m in ("simple", "simple_string")}
    assert theirs == {"simple": 4, "simple_string": 8}
    assert mine == theirs
