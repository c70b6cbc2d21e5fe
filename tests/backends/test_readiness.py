"""Readiness that tells the truth, as Triton 26.x answers it.

* Triton's core (r26.04 ``InferenceServer::IsReady``, r25.12 ``ModelIsReady``): a READY
  model whose instance process is dead is not ready, and under --strict-readiness neither is
  the server; the repository index and ``fpgaserve doctor --server`` say why. The next
  request restarts the process and everything is ready again.
* The Python model's optional ``is_ready()`` (python_backend r26.04, src/python_be.cc): asked on model
  (and strict server) readiness checks, answered even while the model executes, with a 5 s
  limit; a False, an exception, a result that is not a bool, a timeout each make the model not
  ready, with python_backend's texts in the index and the verbose log.

One server (``--log-verbose 1``: Triton logs why a model is not ready at verbose level). The
models find ``state`` (what ``is_ready`` answers), ``release`` and ``unhang`` in the folder
``FPGASERVE_READY_CONTROL`` names, and write their pid there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from support.instance_processes import full_log
from support.server_process import ServerProcess
from support.waiting import wait_until

CONTROL_VAR = "FPGASERVE_READY_CONTROL"

COMMON = """\
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils

CONTROL = os.environ["FPGASERVE_READY_CONTROL"]


def control(name):
    return os.path.join(CONTROL, name)


class Base:
    def initialize(self, args):
        with open(control(f"pid-{args['model_name']}"), "w") as f:
            f.write(str(os.getpid()))

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if int(x[0]) == 1:  # a long execute: it waits for "release"
                open(control("executing"), "w").close()
                while not os.path.exists(control("release")):
                    time.sleep(0.005)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]))
        return responses
"""
HOOKED = (
    COMMON
    + """

class TritonPythonModel(Base):
    def is_ready(self):
        state = open(control("state")).read().strip()
        if state == "raise":
            raise RuntimeError("the feature store is unreachable")
        if state == "number":
            return 1
        if state == "hang":
            open(control("asked"), "w").close()
            while not os.path.exists(control("unhang")):
                time.sleep(0.005)
        return state != "no"
"""
)
HOOKED_ASYNC = (
    COMMON
    + """

class TritonPythonModel(Base):
    async def is_ready(self):
        import asyncio

        await asyncio.sleep(0)
        return open(control("state")).read().strip() != "no"
"""
)
PLAIN = COMMON + "\n\nclass TritonPythonModel(Base):\n    pass\n"
CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "X" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "Y" data_type: TYPE_INT32 dims: [ 1 ] }} ]
"""
NOT_READY = "Model 'hooked_0' is not ready (user-defined check failed)."
TIMED_OUT = "Timed out waiting for user-defined is_ready() response"
IN_FLIGHT_TIMED_OUT = "Timed out waiting for in-flight is_ready() response"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("ready_repo")
    for name, code in (("hooked", HOOKED), ("hooked_async", HOOKED_ASYNC), ("plain", PLAIN)):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text(code)
        (repo / name / "config.pbtxt").write_text(CONFIG.format(name=name))
    control = tmp_path_factory.mktemp("ready_control")
    (control / "state").write_text("ready")
    log = tmp_path_factory.mktemp("ready_log") / "server.log"
    env = dict(os.environ, **{CONTROL_VAR: str(control)})
    proc = ServerProcess([repo], "--log-verbose", "1", "--frontend-processes", "1", log_path=log, env=env)
    proc.control = control
    proc.start(timeout=120)
    try:
        yield proc
    finally:
        (control / "release").touch()
        (control / "unhang").touch()
        rc = proc.stop()
    assert rc == 0, f"server exited with {rc}: {proc.log()}"


@pytest.fixture
def client(server):
    (server.control / "state").write_text("ready")
    with grpcclient.InferenceServerClient(server.url) as c:
        yield c


def _index(server) -> dict[str, tuple[str, str]]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.http_port}/v2/repository/index",
        data=b"{}",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as r:
        return {row["name"]: (row.get("state", ""), row.get("reason", "")) for row in json.loads(r.read())}


def _infer(client, model: str, value: int) -> list[int]:
    t = grpcclient.InferInput("X", [1], "INT32")
    t.set_data_from_numpy(np.array([value], dtype=np.int32))
    return client.infer(model, [t], client_timeout=120).as_numpy("Y").tolist()


def _state(server, value: str) -> None:
    (server.control / "state").write_text(value)


# ------------------------------------------------------------------------------ is_ready()
def test_is_ready_false_exception_and_non_bool_make_the_model_not_ready(server, client):
    assert client.is_model_ready("hooked")
    assert client.is_server_ready()
    assert _index(server)["hooked"] == ("READY", "")

    _state(server, "no")
    assert not client.is_model_ready("hooked")
    assert server.http_status("/v2/models/hooked/ready") == 400
    # under --strict-readiness the server asks every model's instances too (core r26.04)
    assert not client.is_server_ready()
    assert server.http_status("/v2/health/ready") == 400
    assert _index(server)["hooked"] == ("UNAVAILABLE", NOT_READY)
    # the model still serves: readiness is what it says, not a gate on its requests
    assert _infer(client, "hooked", 7) == [7]

    _state(server, "raise")
    assert not client.is_model_ready("hooked")
    state, reason = _index(server)["hooked"]
    assert state == "UNAVAILABLE"
    assert reason.startswith("RuntimeError: the feature store is unreachable\n\nAt:\n"), reason
    assert "model.py" in reason and "is_ready" in reason

    _state(server, "number")
    assert not client.is_model_ready("hooked")
    assert _index(server)["hooked"] == ("UNAVAILABLE", "is_ready() must return a boolean value")

    # an async def is_ready() is awaited
    _state(server, "no")
    assert not client.is_model_ready("hooked_async")
    _state(server, "ready")
    assert client.is_model_ready("hooked_async")
    assert client.is_model_ready("hooked")
    assert client.is_server_ready()
    assert _index(server)["hooked"] == ("READY", "")
    # Triton logs why at verbose level
    assert f"Model 'hooked' version 1 is not ready: {NOT_READY}" in full_log(server)


def test_is_ready_is_answered_while_the_model_executes(server, client):
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(_infer, client, "hooked", 1)
        wait_until((server.control / "executing").exists, "the long execute to start")
        assert client.is_model_ready("hooked")
        _state(server, "no")
        assert not client.is_model_ready("hooked")
        (server.control / "release").touch()
        assert running.result(timeout=120) == [1]


def test_is_ready_that_does_not_answer_times_out(server, client):
    _state(server, "hang")
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(client.is_model_ready, "hooked")
        wait_until((server.control / "asked").exists, "is_ready() to be called")
        # asked meanwhile: it waits for the question in flight (one per instance), then gives up
        second = pool.submit(client.is_model_ready, "hooked")
        assert first.result(timeout=60) is False
        assert second.result(timeout=60) is False
    log = full_log(server)
    assert f"Model 'hooked' version 1 is not ready: {TIMED_OUT}" in log
    assert f"Model 'hooked' version 1 is not ready: {IN_FLIGHT_TIMED_OUT}" in log
    # the late answer still arrives and the next check asks again
    _state(server, "ready")
    (server.control / "unhang").touch()
    wait_until(lambda: client.is_model_ready("hooked"), "the model to be ready again", timeout=60)


# ------------------------------------------------------------------------------ a dead instance
def test_a_dead_instance_process_makes_model_and_server_not_ready(server, client):
    assert client.is_model_ready("plain") and client.is_server_ready()
    pid = int((server.control / "pid-plain").read_text())
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not client.is_model_ready("plain"), "the model to report its dead instance")
    assert not client.is_server_ready()
    assert server.http_status("/v2/health/ready") == 400
    assert client.is_server_live()
    state, reason = _index(server)["plain"]
    assert state == "UNAVAILABLE"
    assert reason.startswith("Stub process 'plain_0' is not healthy. (the process of instance 'plain_0'"), reason
    assert "was killed by signal 9 (SIGKILL)" in reason
    # `fpgaserve doctor --server` says the same
    doctor = subprocess.run(
        [sys.executable, "-m", "fpgaserve.server.cli", "doctor", "--server", f"127.0.0.1:{server.http_port}", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    rows = {r["subject"]: r for r in json.loads(doctor.stdout)["rows"] if r["check"] == "served version 1"}
    assert rows["model plain"]["status"] == "fail", doctor.stdout
    assert "Stub process 'plain_0' is not healthy." in rows["model plain"]["detail"]
    assert rows["model hooked"]["status"] == "ok"
    # the next request restarts it first (it is not failed for a process known dead)
    assert _infer(client, "plain", 3) == [3]
    assert Path(f"/proc/{int((server.control / 'pid-plain').read_text())}").exists()
    assert client.is_model_ready("plain") and client.is_server_ready()
    assert _index(server)["plain"] == ("READY", "")
