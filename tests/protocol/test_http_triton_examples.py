"""Triton's own Python HTTP example clients, unmodified, against fpgaserve.

The scripts are NVIDIA's (triton-inference-server/client, src/python/examples) and are never
committed here: point ``FPGASERVE_TRITON_EXAMPLES`` at a directory holding them (or populate
``.tools/triton-client-examples/``), e.g. from a clone of the client repository::

    git --git-dir=<client>.git show HEAD:src/python/examples/simple_http_infer_client.py > DIR/...

Without them the tests skip and say so. Each script runs as its users run it
(``python script.py -u localhost:<http port>``) and must exit 0; the ones that print
``PASS`` must print it. The server runs in-process (one process) and with two frontend
processes sharing the HTTP port.

The repository is the conformance repository without ``repeat_int32`` (a decoupled model,
which HTTP cannot serve anyway): ``simple_http_model_control.py`` counts the models of the
repository it is pointed at and expects Triton's seven.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from support.server_process import CONFORMANCE_REPO, ServerProcess
from support.triton_examples import examples_dir

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SCRIPTS = [
    "simple_http_infer_client.py",
    "simple_http_async_infer_client.py",
    "simple_http_aio_infer_client.py",
    "simple_http_health_metadata.py",
    "simple_http_string_infer_client.py",
    "simple_http_shm_client.py",
    "simple_http_shm_string_client.py",
    "simple_http_sequence_sync_infer_client.py",
    "simple_http_model_control.py",
]
PRINTS_PASS = {
    "simple_http_aio_infer_client.py",
    "simple_http_string_infer_client.py",
    "simple_http_shm_client.py",
    "simple_http_shm_string_client.py",
    "simple_http_sequence_sync_infer_client.py",
    "simple_http_model_control.py",
}


@pytest.fixture(scope="module")
def examples():
    path = examples_dir()
    if path is None:
        pytest.skip(
            "Triton's HTTP example clients are not here: set FPGASERVE_TRITON_EXAMPLES to a directory "
            "holding them (triton-inference-server/client src/python/examples)"
        )
    return path


@pytest.fixture(scope="module")
def seven_model_repository(tmp_path_factory):
    repo = tmp_path_factory.mktemp("examples_repo")
    for model in sorted(CONFORMANCE_REPO.iterdir()):
        if model.is_dir() and (model / "config.pbtxt").exists() and model.name != "repeat_int32":
            (repo / model.name).symlink_to(model)
    assert len(list(repo.iterdir())) == 7
    return repo


@pytest.fixture(scope="module", params=[1, 2], ids=["in-process", "2-frontend-processes"])
def server(request, examples, seven_model_repository, tmp_path_factory):
    log = tmp_path_factory.mktemp("examples") / "fpgaserve.log"
    args = ["--model-control-mode=explicit", "--load-model=*", f"--frontend-processes={request.param}"]
    with ServerProcess([seven_model_repository], "--allow-client-shm=true", *args, log_path=log) as s:
        yield s


@pytest.mark.parametrize("script", SCRIPTS)
def test_triton_http_example(server, examples, script):
    r = subprocess.run(
        [sys.executable, str(examples / script), "-u", f"localhost:{server.http_port}"],
        cwd=examples,
        capture_output=True,
        text=True,
        timeout=180,
    )
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"{script} exited with {r.returncode}:\n{out[-3000:]}"
    if script in PRINTS_PASS:
        assert "PASS" in r.stdout, out[-3000:]
