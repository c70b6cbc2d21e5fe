"""Triton's own Python gRPC example clients, unmodified, against fpgaserve.

The scripts are NVIDIA's (triton-inference-server/client, src/python/examples), never
committed here; see tests/protocol/test_http_triton_examples.py for where the tests look for them
(``FPGASERVE_TRITON_EXAMPLES`` or ``.tools/triton-client-examples/``). Without them the
tests skip and say so. Each script runs as its users run it (``python script.py -u
localhost:<grpc port>``) and must exit 0, printing ``PASS`` where it prints one. The server
runs with one process and with two frontend processes.

Three of Triton's gRPC examples are left out, for models and packages a CPU server does
not have. ``simple_grpc_cudashm_client.py`` needs CUDA and cuda-python.
``grpc_client.py`` and ``grpc_image_client.py`` need the ``densenet_onnx`` image
classifier (and PIL). ``simple_grpc_model_control.py`` runs last, because it ends by
unloading ``simple``, which the others use.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from support.server_process import CONFORMANCE_REPO, ServerProcess
from support.triton_examples import examples_dir

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SCRIPTS = [
    "grpc_explicit_byte_content_client.py",
    "grpc_explicit_int8_content_client.py",
    "grpc_explicit_int_content_client.py",
    "simple_grpc_aio_infer_client.py",
    "simple_grpc_aio_sequence_stream_infer_client.py",
    "simple_grpc_async_infer_client.py",
    "simple_grpc_custom_args_client.py",
    "simple_grpc_custom_repeat.py",
    "simple_grpc_health_metadata.py",
    "simple_grpc_infer_client.py",
    "simple_grpc_keepalive_client.py",
    "simple_grpc_sequence_stream_infer_client.py",
    "simple_grpc_sequence_sync_infer_client.py",
    "simple_grpc_shm_client.py",
    "simple_grpc_shm_string_client.py",
    "simple_grpc_string_infer_client.py",
    "simple_grpc_model_control.py",  # last: it unloads simple
]


@pytest.fixture(scope="module")
def examples():
    path = examples_dir()
    if path is None or not (path / SCRIPTS[0]).is_file():
        pytest.skip(
            "Triton's gRPC example clients are not here: set FPGASERVE_TRITON_EXAMPLES to a directory "
            "holding them (triton-inference-server/client src/python/examples)"
        )
    return path


@pytest.fixture(scope="module", params=[1, 2], ids=["in-process", "2-frontend-processes"])
def server(request, examples, tmp_path_factory):
    log = tmp_path_factory.mktemp("grpc_examples") / "fpgaserve.log"
    args = ["--model-control-mode=explicit", "--load-model=*", f"--frontend-processes={request.param}"]
    with ServerProcess([CONFORMANCE_REPO], "--allow-client-shm=true", *args, log_path=log) as s:
        yield s


@pytest.mark.parametrize("script", SCRIPTS)
def test_triton_grpc_example(server, examples, script):
    r = subprocess.run(
        [sys.executable, str(examples / script), "-u", f"localhost:{server.grpc_port}"],
        cwd=examples,
        capture_output=True,
        text=True,
        timeout=180,
    )
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"{script} exited with {r.returncode}:\n{out[-3000:]}"
    if "PASS" in (examples / script).read_text():
        assert "PASS" in r.stdout, out[-3000:]
