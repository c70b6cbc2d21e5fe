"""A firmware whose C-simulation crashes fails its batch, not the server.

The bundled FACILE project is copied three times, each copy's ``myproject.cpp`` given one line
that misbehaves when ``input_1[0] > 20``: a NULL dereference (``facile_crash``), ``abort()``
(``facile_abort``) and an endless loop (``facile_loop``). They are served with the untouched
``facile`` by one server in ``--fpga-mode csim``, where every hls4ml instance runs in an
instance process by default. Through the real tritonclient: the crashing request fails with
an error naming the model and the signal, ``facile`` keeps answering bit-identically from the
same server process, the log names the crash, the crashed model answers again once its
instance restarts, and after too many crashes it is UNAVAILABLE in the repository index and in
``fpgaserve doctor --server``. A
looping firmware leaves the client's deadline and the model's unload working.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from fpgaserve.backends.hls4ml.backend import Hls4mlBackend
from fpgaserve.server import model_config as mc
from support.instance_processes import full_log, instance_processes
from support.server_process import BUNDLED_REPO, ServerProcess, serve
from support.waiting import wait_until

# the served tests are slow: four C-simulations compile (once per run: the csim cache)
slow = pytest.mark.slow

FEATURES = 47
MARKER = "    // hls-fpga-machine-learning insert layers\n"
# the misbehaviour, on a value no normal request sends (facile's inputs are unit-scale)
FAULTS = {
    "facile_crash": "    if (input_1[0] > 20) { volatile int *nowhere = nullptr; *nowhere = 1; }\n",
    "facile_abort": "    if (input_1[0] > 20) { std::abort(); }\n",
    "facile_loop": "    if (input_1[0] > 20) { volatile bool spin = true; while (spin) {} }\n",
}


def _faulty_copy(repo: Path, name: str, fault: str) -> None:
    shutil.copytree(BUNDLED_REPO / "facile", repo / name)
    config = repo / name / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "facile"', f'name: "{name}"'))
    source = repo / name / "1" / "firmware" / "myproject.cpp"
    text = source.read_text()
    assert MARKER in text
    source.write_text("#include <cstdlib>\n" + text.replace(MARKER, MARKER + fault))


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("crash_repo")
    shutil.copytree(BUNDLED_REPO / "facile", repo / "facile")
    for name, fault in FAULTS.items():
        _faulty_copy(repo, name, fault)
    return repo


@pytest.fixture(scope="module")
def server(repo, tmp_path_factory, csim_cache):
    log = tmp_path_factory.mktemp("crash_log") / "server.log"
    proc = ServerProcess(
        [repo],
        "--fpga-mode",
        "csim",
        "--model-control-mode",
        "explicit",
        "--load-model",
        "*",
        "--strict-readiness",
        "false",
        "--model-unload-timeout-secs",
        "1",
        log_path=log,
        env=dict(os.environ, FPGASERVE_CACHE_DIR=str(csim_cache)),
    )
    proc.start(timeout=300)
    try:
        yield proc
    finally:
        rc = proc.stop()
    assert rc == 0, f"server exited with {rc}: {proc.log()}"


@pytest.fixture
def client(server):
    return grpcclient.InferenceServerClient(server.url)


def _rows(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, FEATURES)).astype(np.float32)


def _infer(client, model: str, x: np.ndarray, timeout: float | None = None) -> np.ndarray:
    t = grpcclient.InferInput("input", list(x.shape), "FP32")
    t.set_data_from_numpy(x)
    result = client.infer(
        model, [t], outputs=[grpcclient.InferRequestedOutput("output/BiasAdd")], client_timeout=timeout
    )
    return result.as_numpy("output/BiasAdd")


def _poison(rows: np.ndarray) -> np.ndarray:
    bad = rows.copy()
    bad[0, 0] = 25.0
    return bad


@slow
def test_csim_instances_run_in_children(server):
    # one process per instance of each of the four models, children of the server
    assert len(instance_processes(server.proc.pid)) == 4
    log = full_log(server)
    assert "runs in csim mode" in log  # the child's load line reaches the server's log


@slow
def test_a_segfault_fails_its_batch_and_the_instance_restarts(server, client):
    x = _rows(64, 1)
    before = _infer(client, "facile", x)
    good = _infer(client, "facile_crash", x)
    assert np.array_equal(good.view(np.uint32), before.view(np.uint32))  # the fault line changes nothing else
    with pytest.raises(InferenceServerException) as e:
        _infer(client, "facile_crash", _poison(x))
    assert e.value.status() == "StatusCode.INTERNAL"
    message = e.value.message()
    assert "model 'facile_crash' version 1" in message
    assert "killed by signal 11 (SIGSEGV)" in message
    # the server (the same process) and the other model go on serving, bit for bit
    assert server.proc.poll() is None
    after = _infer(client, "facile", x)
    assert np.array_equal(after.view(np.uint32), before.view(np.uint32))
    assert "of model 'facile_crash' version 1 was killed by signal 11 (SIGSEGV)" in full_log(server)
    # the crashed model's instance restarts and answers again
    again = _infer(client, "facile_crash", x)
    assert np.array_equal(again.view(np.uint32), before.view(np.uint32))
    assert client.is_model_ready("facile_crash")


@slow
def test_too_many_aborts_leave_the_model_unavailable(repo, server, client):
    x = _rows(8, 2)
    before = _infer(client, "facile", x)
    for _ in range(4):  # the first process and three restarts
        with pytest.raises(InferenceServerException) as e:
            _infer(client, "facile_abort", _poison(x))
        assert "model 'facile_abort'" in e.value.message()
        assert "killed by signal 6 (SIGABRT)" in e.value.message()
    assert not client.is_model_ready("facile_abort")
    with pytest.raises(InferenceServerException) as e:
        _infer(client, "facile_abort", x)
    assert e.value.status() == "StatusCode.UNAVAILABLE"
    rows = {m.name: m for m in client.get_model_repository_index().models}
    assert rows["facile_abort"].state == "UNAVAILABLE"
    assert "restarted 3 times" in rows["facile_abort"].reason
    assert "SIGABRT" in rows["facile_abort"].reason
    assert rows["facile"].state == "READY"
    assert np.array_equal(_infer(client, "facile", x).view(np.uint32), before.view(np.uint32))
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics") as r:
        metrics = r.read().decode()
    assert 'fpgaserve_instance_restarts_total{model="facile_abort",version="1"} 3.0' in metrics
    # `fpgaserve doctor --server` reports the same from the running server
    doctor = subprocess.run(
        [sys.executable, "-m", "fpgaserve.server.cli", "doctor", "--model-repository", str(repo)]
        + ["--server", f"127.0.0.1:{server.http_port}", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert doctor.returncode != 0, doctor.stdout + doctor.stderr
    served = {r["subject"]: r for r in json.loads(doctor.stdout)["rows"] if r["check"] == "served version 1"}
    assert served["model facile_abort"]["status"] == "fail"
    assert "UNAVAILABLE" in served["model facile_abort"]["detail"]
    assert "restarted 3 times" in served["model facile_abort"]["detail"]
    assert served["model facile"]["status"] == "ok"


@slow
def test_an_endless_loop_leaves_deadlines_and_unload_working(server, client):
    x = _rows(4, 3)
    before = _infer(client, "facile", x)
    (looping,) = [
        pid for pid in instance_processes(server.proc.pid) if "facile_loop" in os.readlink(f"/proc/{pid}/cwd")
    ]
    with pytest.raises(InferenceServerException) as e:
        _infer(client, "facile_loop", _poison(x), timeout=2.0)
    assert e.value.status() == "StatusCode.DEADLINE_EXCEEDED"
    assert np.array_equal(_infer(client, "facile", x).view(np.uint32), before.view(np.uint32))
    # the unload does not wait for the loop: the instance's process is killed
    client.unload_model("facile_loop")
    assert not client.is_model_ready("facile_loop")
    assert looping not in instance_processes(server.proc.pid)
    # the log says the unload stopped it, not that it crashed and restarts
    stopped = (
        "of model 'facile_loop' version 1 was killed by signal 9 (SIGKILL) while executing the batch: it was stopped"
    )
    wait_until(lambda: stopped in full_log(server), "the log to say the unload stopped facile_loop's process")
    assert "instance 'facile_loop_0_0' of model 'facile_loop' version 1: restarting" not in full_log(server)
    assert np.array_equal(_infer(client, "facile", x).view(np.uint32), before.view(np.uint32))


@slow
def test_opting_out_keeps_csim_in_the_servers_process(repo, tmp_path, csim_cache):
    optout = tmp_path / "repo"
    shutil.copytree(BUNDLED_REPO / "facile", optout / "facile")
    config = optout / "facile" / "config.pbtxt"
    config.write_text(
        config.read_text() + 'parameters {\n  key: "instance_process"\n  value: { string_value: "false" }\n}\n'
    )
    proc = ServerProcess(
        [optout],
        "--fpga-mode",
        "csim",
        log_path=tmp_path / "server.log",
        env=dict(os.environ, FPGASERVE_CACHE_DIR=str(csim_cache)),
    )
    for _ in serve(proc):
        assert instance_processes(proc.proc.pid) == []
        with grpcclient.InferenceServerClient(proc.url) as client:
            assert _infer(client, "facile", _rows(4, 4)).shape == (4, 1)


@pytest.mark.parametrize(("mode", "hosted"), [("csim", True), ("numpy", False), ("onnx", False), ("auto", False)])
def test_only_the_c_simulation_is_hosted_by_default(mode, hosted):
    # auto: FACILE has no xclbin and numpy emulates every layer, so it runs fpgaserve's own code
    config = mc.config_dict(mc.read_config_file(BUNDLED_REPO / "facile" / "config.pbtxt"))
    version_dir = str(BUNDLED_REPO / "facile" / "1")
    assert Hls4mlBackend.instance_process_by_default(config, version_dir, {"fpga-mode": mode}) is hosted
