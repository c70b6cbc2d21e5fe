"""``--grpc-header-forward-pattern`` / ``--http-header-forward-pattern``: request headers whose
name the pattern matches become string parameters a model reads, and since Triton 26.05 a
header named like a reserved key fails the request with INVALID_ARG and Triton's text
("Header '<key>' is reserved for Triton usage and cannot be forwarded.", server r26.05:
src/grpc/infer_handler.h, src/http_server.cc). No Triton newer than 2.51 runs here, so the
texts are checked against that source. One server, a Python model that echoes its request's
parameters; over gRPC (ModelInfer and a stream) and HTTP.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import textwrap
from functools import partial

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from support.server_process import CONFORMANCE_REPO, ServerProcess, serve

ECHO = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "PARAMS", np.array([r.parameters().encode()], dtype=np.object_))]) for r in requests]
"""

ECHO_CONFIG = """
name: "echo"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "PARAMS" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

# what each frontend forwards: the x- headers, and (to show they are refused) names of
# reserved keys and the triton_ prefix
PATTERN = "^x-|^sequence_|^triton_|^priority$|^headers$"
RESERVED = ["sequence_id", "sequence_start", "priority", "headers", "triton_anything"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("forwarding")
    (repo / "echo" / "1").mkdir(parents=True)
    (repo / "echo" / "config.pbtxt").write_text(textwrap.dedent(ECHO_CONFIG))
    (repo / "echo" / "1" / "model.py").write_text(textwrap.dedent(ECHO))
    yield from serve(
        ServerProcess(
            [repo],
            f"--grpc-header-forward-pattern={PATTERN}",
            f"--http-header-forward-pattern={PATTERN}",
            log_path=repo.parent / "server.log",
        )
    )


def _inputs(module):
    inp = module.InferInput("IN", [1], "INT32")
    inp.set_data_from_numpy(np.array([1], dtype=np.int32))
    return [inp]


def _grpc(server, headers: dict, **kwargs) -> dict:
    with grpcclient.InferenceServerClient(server.url) as client:
        result = client.infer("echo", _inputs(grpcclient), headers=headers, client_timeout=60, **kwargs)
    return json.loads(result.as_numpy("PARAMS")[0])


def _http(server, headers: dict, **kwargs) -> dict:
    client = httpclient.InferenceServerClient(f"localhost:{server.http_port}", network_timeout=60)
    try:
        result = client.infer("echo", _inputs(httpclient), headers=headers, **kwargs)
    finally:
        client.close()
    return json.loads(result.as_numpy("PARAMS")[0])


CALLS = {"grpc": _grpc, "http": _http}


@pytest.mark.parametrize("protocol", CALLS)
def test_matching_headers_become_parameters(server, protocol):
    headers = {"x-site": "T2_US_Purdue", "x-run": "386000", "y-other": "not forwarded"}
    params = CALLS[protocol](server, headers, parameters={"own": "parameter"})
    assert params == {"own": "parameter", "x-site": "T2_US_Purdue", "x-run": "386000"}


def test_a_stream_forwards_its_metadata_to_every_request(server):
    results: queue.Queue = queue.Queue()
    with grpcclient.InferenceServerClient(server.url) as client:
        client.start_stream(
            callback=partial(lambda q, result, error: q.put(error or result), results), headers={"x-stream": "on"}
        )
        try:
            for n in range(2):
                client.async_stream_infer("echo", _inputs(grpcclient), request_id=str(n))
            got = [results.get(timeout=60) for _ in range(2)]
        finally:
            client.stop_stream()
    assert [json.loads(r.as_numpy("PARAMS")[0]) for r in got] == [{"x-stream": "on"}] * 2


@pytest.mark.parametrize("protocol", CALLS)
@pytest.mark.parametrize("key", RESERVED)
def test_a_header_named_like_a_reserved_key_fails_the_request(server, protocol, key):
    if protocol == "http" and key == "priority":
        # tritonclient's HTTP client (geventhttpclient) sends a known header's name capitalized:
        # "Priority" matches neither the pattern nor the reserved key (Triton compares names as
        # sent, case and all)
        assert _http(server, {key: "1"}) == {}
        return
    with pytest.raises(InferenceServerException) as failed:
        CALLS[protocol](server, {"x-fine": "1", key: "1"})
    expected_status = "StatusCode.INVALID_ARGUMENT" if protocol == "grpc" else "400"
    assert str(failed.value.status()) == expected_status
    assert failed.value.message() == f"Header '{key}' is reserved for Triton usage and cannot be forwarded."
    # the server goes on: the next request is answered
    assert CALLS[protocol](server, {"x-fine": "1"}) == {"x-fine": "1"}


@pytest.mark.parametrize("protocol", CALLS)
def test_a_reserved_name_the_pattern_does_not_select_is_left_alone(server, protocol):
    assert CALLS[protocol](server, {"timeout": "5", "x-fine": "1"}) == {"x-fine": "1"}


@pytest.mark.parametrize("flag", ["--grpc-header-forward-pattern", "--http-header-forward-pattern"])
def test_a_pattern_that_is_not_a_regular_expression_stops_the_start(flag):
    proc = subprocess.run(
        [sys.executable, "-m", "fpgaserve.server.cli", "--model-repository", str(CONFORMANCE_REPO), f"{flag}=x-("],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode != 0
    assert f"error: {flag}: 'x-(' is not a regular expression: missing ), unterminated subpattern at position 2" in (
        proc.stderr
    )


def test_the_flags_are_no_longer_listed_as_ignored():
    from fpgaserve.server.flags import IGNORED

    assert not {"--grpc-header-forward-pattern", "--http-header-forward-pattern"} & {f.name for f in IGNORED}
