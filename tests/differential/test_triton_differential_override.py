"""A RepositoryModelLoad config override, side by side with the real Triton.

Triton's ``simple_http_model_control.py`` loads a model with the JSON config
``{"max_batch_size":"16"}``. The override replaces config.pbtxt. Triton then auto-completes
what the backend can describe: an ONNX graph's inputs and outputs, for example. A Python
model (fpgaserve: a numpy model) that describes nothing loads with no inputs and no outputs.
It is refused neither at load nor later: it answers requests with Triton's own errors.

fpgaserve used to refuse that load ("model must declare at least one input and one output").
Here both servers load the same override of ``simple_identity``. The test compares the
configuration, the metadata, and the status and text of two requests; it then reloads without
the override, which brings the declared inputs and outputs back.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from support.reference_triton import start_tritonserver, stop_tritonserver, write_python_backend_repository
from support.server_process import CONFORMANCE_REPO, ServerProcess, free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

OVERRIDE = '{"max_batch_size":"16"}'


@pytest.fixture(scope="module", params=["1", "2"], ids=["one-process", "frontend-processes-2"])
def servers(request, tritonserver_path, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("override")
    repo = tmp / "triton_repo"
    write_python_backend_repository(repo, models=("simple_identity",))
    triton_ports = [free_port() for _ in range(3)]
    triton = start_tritonserver(repo, *triton_ports, model_control_mode="explicit", log_path=tmp / "triton.log")
    ours = ServerProcess(
        [CONFORMANCE_REPO],
        "--model-control-mode=explicit",
        "--frontend-processes",
        request.param,
        log_path=tmp / "fpgaserve.log",
    ).start()
    try:
        yield {"triton": triton_ports, "ours": [ours.grpc_port, ours.http_port]}
    finally:
        ours.stop()
        stop_tritonserver(triton)


def _observe(grpc_port: int, http_port: int) -> dict:
    http = httpclient.InferenceServerClient(f"localhost:{http_port}")
    grpc = grpcclient.InferenceServerClient(f"localhost:{grpc_port}")
    seen: dict = {}
    http.load_model("simple_identity", config=OVERRIDE)
    config = http.get_model_config("simple_identity")
    seen["config"] = {k: config.get(k) for k in ("max_batch_size", "input", "output")}
    metadata = http.get_model_metadata("simple_identity")
    seen["metadata"] = (metadata["inputs"], metadata["outputs"])
    seen["ready"] = grpc.is_model_ready("simple_identity")
    x = grpcclient.InferInput("INPUT0", [1, 1], "BYTES")
    x.set_data_from_numpy(np.array([[b"a"]], dtype=object))
    for case, inputs in (("declared nowhere", [x]), ("no inputs", [])):
        try:
            grpc.infer("simple_identity", inputs)
            seen[case] = "answered"
        except InferenceServerException as e:
            seen[case] = (e.status(), e.message())
    # the server still serves, and a load without the override restores config.pbtxt's I/O
    http.load_model("simple_identity")
    seen["reloaded"] = [i["name"] for i in http.get_model_metadata("simple_identity")["inputs"]]
    grpc.close()
    http.close()
    return seen


def test_an_override_without_io_loads_and_answers_as_tritons_does(servers):
    triton = _observe(*servers["triton"][:2])
    ours = _observe(*servers["ours"])
    assert triton["config"] == {"max_batch_size": 16, "input": [], "output": []}, triton
    assert triton["reloaded"] == ["INPUT0"], triton
    assert json.dumps(ours, sort_keys=True) == json.dumps(triton, sort_keys=True)
