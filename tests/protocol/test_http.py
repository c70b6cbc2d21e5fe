"""HTTP/REST against a real fpgaserve: tritonclient.http and hand-built requests over sockets.

Every test runs against the server with HTTP in the engine's process and with two frontend
processes sharing the HTTP port (``RemoteDataPlane``). Covered: every route Triton's HTTP
frontend has, JSON tensors (flat and nested, every numeric datatype, BYTES as strings, the
FP16 refusal), the binary tensor extension (mixed with JSON, ``binary_data_output``, a raw
body with a header length of 0), classification, shared memory for inputs and outputs,
request and response compression, errors (status and ``{"error": text}``, the same texts as
over gRPC), model load with config and file overrides, restricted APIs and the body limit.
"""

from __future__ import annotations

import base64
import gzip
import http.client
import json
import zlib

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from support.server_process import BUNDLED_REPO, CONFORMANCE_REPO, ServerProcess

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module", params=[1, 2], ids=["in-process", "2-frontend-processes"])
def server(request, tmp_path_factory):
    log = tmp_path_factory.mktemp("http") / "fpgaserve.log"
    args = ["--fpga-mode", "numpy", f"--frontend-processes={request.param}", "--model-control-mode=explicit"]
    args += ["--load-model=*"]
    with ServerProcess([CONFORMANCE_REPO, BUNDLED_REPO], "--allow-client-shm=true", *args, log_path=log) as s:
        yield s
        assert s.stop() == 0, s.log()
        assert "failed unexpectedly" not in s.log()


@pytest.fixture
def client(server):
    c = httpclient.InferenceServerClient(f"localhost:{server.http_port}")
    yield c
    c.close()


def send(server, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
    """(status, headers, body) of one request on its own connection."""
    conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def send_json(server, method: str, path: str, obj=None, headers: dict | None = None):
    status, h, body = send(server, method, path, None if obj is None else json.dumps(obj).encode(), headers)
    return status, (json.loads(body) if body and h.get("content-type", "").startswith("application/json") else body)


def simple_inputs(binary: bool, a=None, b=None):
    a = np.arange(16, dtype=np.int32).reshape(1, 16) if a is None else a
    b = np.ones((1, 16), dtype=np.int32) if b is None else b
    i0 = httpclient.InferInput("INPUT0", list(a.shape), "INT32")
    i0.set_data_from_numpy(a, binary_data=binary)
    i1 = httpclient.InferInput("INPUT1", list(b.shape), "INT32")
    i1.set_data_from_numpy(b, binary_data=binary)
    return [i0, i1], a, b


# ----------------------------------------------------------------------------- metadata


def test_server_metadata_and_health(server, client):
    assert client.is_server_live() and client.is_server_ready()
    meta = client.get_server_metadata()
    assert meta["name"] == "triton"
    assert "binary_tensor_data" in meta["extensions"] and "statistics" in meta["extensions"]
    assert client.is_model_ready("simple") and client.is_model_ready("simple", "1")
    assert not client.is_model_ready("no_such_model")
    assert send_json(server, "GET", "/v2/models/no_such_model/ready") == (400, {"error": "Model version not ready"})
    assert send(server, "GET", "/v2/health/ready")[::2] == (200, b"")


def test_model_metadata_and_config(server, client):
    meta = client.get_model_metadata("simple")
    assert meta["versions"] == ["1"]
    assert meta["inputs"][0] == {"name": "INPUT0", "datatype": "INT32", "shape": [-1, 16]}
    assert client.get_model_metadata("simple", "1") == meta
    config = client.get_model_config("simple")
    assert config["max_batch_size"] == 8 and config["input"][0]["dims"] == [16]
    assert config["input"][0]["data_type"] == "TYPE_INT32"
    status, body = send_json(server, "GET", "/v2/models/no_such_model")
    assert (status, body) == (404, {"error": "Request for unknown model: 'no_such_model' is not found"})
    status, body = send_json(server, "GET", "/v2/models/simple/versions/7/config")
    assert status == 404 and "version 7 is not found" in body["error"]


# ----------------------------------------------------------------------------- inference


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_infer_simple(server, client, binary):
    inputs, a, b = simple_inputs(binary)
    outputs = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("OUTPUT0", "OUTPUT1")]
    r = client.infer("simple", inputs, outputs=outputs, request_id="req-7")
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
    response = r.get_response()
    assert response["id"] == "req-7" and response["model_name"] == "simple" and response["model_version"] == "1"


def test_infer_mixed_binary_and_json_and_default_outputs(server, client):
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.full((2, 16), 5, dtype=np.int32)
    i0 = httpclient.InferInput("INPUT0", [2, 16], "INT32")
    i0.set_data_from_numpy(a, binary_data=True)
    i1 = httpclient.InferInput("INPUT1", [2, 16], "INT32")
    i1.set_data_from_numpy(b, binary_data=False)
    r = client.infer("simple", [i0, i1], model_version="1")  # no outputs: all (tritonclient asks binary)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
    assert [o["parameters"]["binary_data_size"] for o in r.get_response()["outputs"]] == [128, 128]


def test_json_nested_and_flat_data(server):
    a = np.arange(16).reshape(1, 16)
    for data in (a.tolist(), a.ravel().tolist()):
        body = {
            "inputs": [
                {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": data},
                {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": data},
            ],
            "outputs": [{"name": "OUTPUT0"}],
        }
        status, r = send_json(server, "POST", "/v2/models/simple/infer", body)
        assert status == 200, r
        assert r["outputs"] == [
            {"name": "OUTPUT0", "datatype": "INT32", "shape": [1, 16], "data": (2 * a).ravel().tolist()}
        ]


def test_binary_data_output_request_parameter(server):
    a = list(range(16))
    body = {
        "parameters": {"binary_data_output": True},
        "inputs": [{"name": n, "datatype": "INT32", "shape": [1, 16], "data": a} for n in ("INPUT0", "INPUT1")],
    }
    status, headers, raw = send(server, "POST", "/v2/models/simple/infer", json.dumps(body).encode())
    assert status == 200
    n = int(headers["inference-header-content-length"])
    head = json.loads(raw[:n])
    assert [o["parameters"]["binary_data_size"] for o in head["outputs"]] == [64, 64]
    np.testing.assert_array_equal(np.frombuffer(raw[n : n + 64], dtype=np.int32), 2 * np.arange(16))


def test_raw_binary_body_for_a_single_input_model(server):
    """Inference-Header-Content-Length: 0 -- the body is the one input; outputs come back binary."""
    rng = np.random.default_rng(3)
    x = rng.random((1, 47), dtype=np.float32)
    status, headers, raw = send(
        server, "POST", "/v2/models/facile/infer", x.tobytes(), {"Inference-Header-Content-Length": "0"}
    )
    assert status == 200, raw
    n = int(headers["inference-header-content-length"])
    head = json.loads(raw[:n])
    assert head["outputs"][0]["shape"] == [1, 1] and head["outputs"][0]["parameters"]["binary_data_size"] == 4
    # the same input through tritonclient gives the same value
    c = httpclient.InferenceServerClient(f"localhost:{server.http_port}")
    i = httpclient.InferInput("input", [1, 47], "FP32")
    i.set_data_from_numpy(x)
    expected = c.infer("facile", [i]).as_numpy("output/BiasAdd")
    np.testing.assert_array_equal(np.frombuffer(raw[n:], dtype=np.float32).reshape(1, 1), expected)


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_bytes_tensors(server, client, binary):
    values = np.array([[str(i).encode() for i in range(16)]], dtype=object)
    ones = np.array([[b"1"] * 16], dtype=object)
    i0 = httpclient.InferInput("INPUT0", [1, 16], "BYTES")
    i0.set_data_from_numpy(values, binary_data=binary)
    i1 = httpclient.InferInput("INPUT1", [1, 16], "BYTES")
    i1.set_data_from_numpy(ones, binary_data=binary)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)]
    r = client.infer("simple_string", [i0, i1], outputs=outputs)
    got = [int(x) for x in r.as_numpy("OUTPUT0").ravel()]
    assert got == [i + 1 for i in range(16)]
    # an identity model keeps arbitrary bytes (embedded NULs) in binary form
    blob = np.array([[b"he\x00llo", b"", b"\xff\xfe"]], dtype=object)
    i = httpclient.InferInput("INPUT0", [1, 3], "BYTES")
    i.set_data_from_numpy(blob, binary_data=True)
    r = client.infer("simple_identity", [i], outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)])
    assert r.as_numpy("OUTPUT0").tolist() == blob.tolist()


def test_int8_and_classification(server, client):
    a = np.arange(16, dtype=np.int8).reshape(1, 16)
    i0 = httpclient.InferInput("INPUT0", [1, 16], "INT8")
    i0.set_data_from_numpy(a, binary_data=False)
    i1 = httpclient.InferInput("INPUT1", [1, 16], "INT8")
    i1.set_data_from_numpy(np.ones_like(a), binary_data=False)
    r = client.infer("simple_int8", [i0, i1], outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)])
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + 1)
    inputs, _, _ = simple_inputs(True)
    out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=False, class_count=3)
    r = client.infer("simple", inputs, outputs=[out])
    top = [x.decode() if isinstance(x, bytes) else x for x in r.as_numpy("OUTPUT0").ravel()]
    assert top == ["16:15", "15:14", "14:13"]


def test_json_fp16_is_refused_as_triton_does(server):
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP16", "shape": [1, 16], "data": [0.5] * 16}]}
    status, r = send_json(server, "POST", "/v2/models/simple/infer", body)
    assert (
        (status, r["error"])
        == (
            400,
            "receiving FP16 data via JSON is not supported. Please use the binary data format for input INPUT0",  # (sic) Triton's, unquoted
        )
    )


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_request_and_response(server, client, algorithm):
    inputs, a, b = simple_inputs(True)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)]
    r = client.infer(
        "simple",
        inputs,
        outputs=outputs,
        request_compression_algorithm=algorithm,
        response_compression_algorithm=algorithm,
    )
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
    # raw: a gzip body and a weighted Accept-Encoding preferring deflate
    body = json.dumps(
        {
            "inputs": [
                {"name": n, "datatype": "INT32", "shape": [1, 16], "data": list(range(16))}
                for n in ("INPUT0", "INPUT1")
            ]
        }
    ).encode()
    status, headers, raw = send(
        server,
        "POST",
        "/v2/models/simple/infer",
        gzip.compress(body),
        {"Content-Encoding": "gzip", "Accept-Encoding": "gzip;q=0.5, deflate;q=0.9, br"},
    )
    assert status == 200 and headers["content-encoding"] == "deflate"
    assert json.loads(zlib.decompress(raw))["outputs"][0]["data"] == [2 * i for i in range(16)]


def test_compression_bomb_is_bounded(tmp_path):
    log = tmp_path / "fpgaserve.log"
    with ServerProcess([CONFORMANCE_REPO], "--http-max-input-size", "100000", log_path=log) as s:
        bomb = gzip.compress(b"[" * 10_000_000)
        status, _, raw = send(s, "POST", "/v2/models/simple/infer", bomb, {"Content-Encoding": "gzip"})
        assert status == 413, raw
        status, _, raw = send(s, "POST", "/v2/models/simple/infer", b"x" * 200_000)
        assert status == 413, raw
        assert s.http_up()


def test_system_shared_memory_inputs_and_outputs(server, client):
    client.unregister_system_shared_memory()
    client.unregister_cuda_shared_memory()  # a no-op, as clients expect
    a = np.arange(16, dtype=np.int32)
    b = np.ones(16, dtype=np.int32)
    handle_in = shm.create_shared_memory_region("in_data", "/fpgaserve_http_in", 128)
    handle_out = shm.create_shared_memory_region("out_data", "/fpgaserve_http_out", 128)
    try:
        shm.set_shared_memory_region(handle_in, [a, b])
        client.register_system_shared_memory("in_data", "/fpgaserve_http_in", 128)
        client.register_system_shared_memory("out_data", "/fpgaserve_http_out", 128)
        status = client.get_system_shared_memory_status()
        assert {r["name"] for r in status} == {"in_data", "out_data"}
        i0 = httpclient.InferInput("INPUT0", [1, 16], "INT32")
        i0.set_shared_memory("in_data", 64)
        i1 = httpclient.InferInput("INPUT1", [1, 16], "INT32")
        i1.set_shared_memory("in_data", 64, offset=64)
        o0 = httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)
        o0.set_shared_memory("out_data", 64)
        o1 = httpclient.InferRequestedOutput("OUTPUT1", binary_data=True)
        o1.set_shared_memory("out_data", 64, offset=64)
        client.infer("simple", [i0, i1], outputs=[o0, o1])
        out0 = shm.get_contents_as_numpy(handle_out, np.int32, [1, 16])
        out1 = shm.get_contents_as_numpy(handle_out, np.int32, [1, 16], offset=64)
        np.testing.assert_array_equal(out0.ravel(), a + b)
        np.testing.assert_array_equal(out1.ravel(), a - b)
        assert client.get_system_shared_memory_status("in_data")[0]["byte_size"] == 128
        client.unregister_system_shared_memory("in_data")
        with pytest.raises(InferenceServerException, match="Unable to find system shared memory region: 'in_data'"):
            client.get_system_shared_memory_status("in_data")
        assert client.get_cuda_shared_memory_status() == []
        status, body = send_json(server, "POST", "/v2/cudasharedmemory/region/x/register", {"raw_handle": {"b64": ""}})
        assert status == 501 and "CUDA shared memory is not supported" in body["error"]
    finally:
        client.unregister_system_shared_memory()
        shm.destroy_shared_memory_region(handle_in)
        shm.destroy_shared_memory_region(handle_out)


def test_statistics_count_http_requests(server, client):
    before = client.get_inference_statistics("simple")["model_stats"][0]
    inputs, _, _ = simple_inputs(True)
    client.infer("simple", inputs)
    after = client.get_inference_statistics("simple", "1")["model_stats"][0]
    assert after["inference_stats"]["success"]["count"] >= before["inference_stats"]["success"]["count"] + 1
    every = client.get_inference_statistics()["model_stats"]
    assert {"simple", "simple_string"} <= {m["name"] for m in every}


# ----------------------------------------------------------------------------- errors


def grpc_error(server, request_builder) -> str:
    c = grpcclient.InferenceServerClient(server.url)
    try:
        with pytest.raises(InferenceServerException) as e:
            request_builder(c)
        return e.value.message()
    finally:
        c.close()


def test_errors_have_the_grpc_texts(server, client):
    """The same bad request over both protocols: the same text (HTTP 400, {"error": text})."""
    a = np.zeros((1, 16), dtype=np.float32)

    def bad_http(c):
        i0 = httpclient.InferInput("INPUT0", [1, 16], "FP32")
        i0.set_data_from_numpy(a)
        i1 = httpclient.InferInput("INPUT1", [1, 16], "FP32")
        i1.set_data_from_numpy(a)
        c.infer("simple", [i0, i1])

    def bad_grpc(c):
        i0 = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
        i0.set_data_from_numpy(a)
        i1 = grpcclient.InferInput("INPUT1", [1, 16], "FP32")
        i1.set_data_from_numpy(a)
        c.infer("simple", [i0, i1])

    with pytest.raises(InferenceServerException) as e:
        bad_http(client)
    assert e.value.status() == "400"
    assert e.value.message() == grpc_error(server, bad_grpc)
    # batch too large, unknown model: same texts
    inputs, _, _ = simple_inputs(True, np.zeros((9, 16), np.int32), np.zeros((9, 16), np.int32))
    with pytest.raises(InferenceServerException) as e:
        client.infer("simple", inputs)
    assert "inference request batch-size must be <= 8 for 'simple'" in e.value.message()
    with pytest.raises(InferenceServerException) as e:
        client.infer("no_such_model", simple_inputs(True)[0])
    assert e.value.status() == "404"
    assert e.value.message() == "Request for unknown model: 'no_such_model' is not found"


SHORT_BINARY_HEADER = json.dumps(
    {"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "parameters": {"binary_data_size": 64}}]}
).encode()


@pytest.mark.parametrize(
    "headers, body, text",
    [
        ({}, b"{", "failed to parse the request JSON buffer"),
        ({}, b"[]", "Unable to parse 'inputs'"),
        (
            {"Inference-Header-Content-Length": "abc"},
            b"{}",
            "Unable to parse Inference-Header-Content-Length, got: abc",
        ),
        (
            {"Inference-Header-Content-Length": "+-5"},
            b"{}",
            "Unable to parse Inference-Header-Content-Length, got: +-5",
        ),
        ({"Inference-Header-Content-Length": "9" * 40}, b"{}", "value is out of range [ -2147483648, 2147483647 ]"),
        ({"Inference-Header-Content-Length": "99"}, b"{}", "inference header size should be in range (0, 2), got: 99"),
        ({}, b'{"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 16]}]}', "But no field is set"),
        (
            {"Inference-Header-Content-Length": str(len(SHORT_BINARY_HEADER))},
            SHORT_BINARY_HEADER + b"x" * 8,
            "unexpected size for input 'INPUT0', expecting 56 additional bytes for model 'simple'",
        ),
        ({}, b'{"inputs": [], "parameters": {"triton_x": 1}}', "reserved for Triton usage"),
        ({"Content-Encoding": "br"}, b"{}", "Unsupported compression type"),
    ],
    ids=[
        "bad-json",
        "not-object",
        "header-length-nan",
        "header-length-signs",
        "header-length-huge",
        "header-length-large",
        "no-data",
        "short-binary",
        "triton-param",
        "br",
    ],
)
def test_malformed_inference_bodies(server, headers, body, text):
    status, h, raw = send(server, "POST", "/v2/models/simple/infer", body, headers)
    assert status in (400, 501), raw
    assert h["content-type"] == "application/json"
    assert text in json.loads(raw)["error"]


def test_expect_100_continue(server):
    """curl sends Expect: 100-continue before a body over 1 KiB: the server invites the body."""
    import socket

    body = json.dumps(
        {
            "inputs": [
                {"name": n, "datatype": "INT32", "shape": [1, 16], "data": list(range(16))}
                for n in ("INPUT0", "INPUT1")
            ]
        }
    ).encode()
    head = (
        f"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
        "Expect: 100-continue\r\nConnection: close\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=30) as sock:
        sock.sendall(head)
        interim = b""
        while b"\r\n\r\n" not in interim:
            chunk = sock.recv(4096)
            assert chunk, interim
            interim += chunk
        assert interim.startswith(b"HTTP/1.1 100 Continue\r\n"), interim
        sock.sendall(body)
        rest = interim.split(b"\r\n\r\n", 1)[1]
        while chunk := sock.recv(65536):
            rest += chunk
    assert rest.startswith(b"HTTP/1.1 200 OK"), rest[:200]
    assert b'"data":[0,2,4,6,8,10,12,14,16,18,20,22,24,26,28,30]' in rest


def test_routes_and_methods(server):
    assert send_json(server, "GET", "/v2/nothing") == (404, {"error": "Not Found"})
    assert send_json(server, "GET", "/v2/models/simple/infer") == (405, {"error": "Method Not Allowed"})
    assert send_json(server, "POST", "/v2/models/simple/config") == (405, {"error": "Method Not Allowed"})
    assert send_json(server, "GET", "/v2/models/simple/versions/1/trace/setting")[0] == 404
    assert send_json(server, "POST", "/v2/repository/other/models/simple/load")[0] == 501


def test_decoupled_model_is_refused_over_http(server):
    body = {"inputs": [{"name": "IN", "datatype": "INT32", "shape": [1], "data": [1]}]}
    status, r = send_json(server, "POST", "/v2/models/repeat_int32/infer", body)
    assert status == 501 and r["error"] == "HTTP end point doesn't support models with decoupled transaction policy"


# ----------------------------------------------------------------------------- repository, settings


def test_repository_index_load_unload_with_overrides(server, client):
    index = client.get_model_repository_index()
    assert {"name": "simple", "version": "1", "state": "READY"} in index
    client.load_model("simple", config=json.dumps({"max_batch_size": 4}))
    assert client.get_model_config("simple")["max_batch_size"] == 4
    # file: overrides are base64 in the JSON body (tritonclient encodes them)
    model_py = (CONFORMANCE_REPO / "simple_identity" / "1" / "model.py").read_bytes()
    config = (CONFORMANCE_REPO / "simple_identity" / "config.pbtxt").read_text()
    status, body = send_json(
        server,
        "POST",
        "/v2/repository/models/simple_identity/load",
        {
            "parameters": {
                "config": json.dumps({"backend": "numpy", "max_batch_size": 2}),
                "file:1/model.py": base64.b64encode(model_py).decode(),
            }
        },
    )
    assert status in (200, 400), body  # code uploads may be disabled; the answer is JSON either way
    assert config
    client.unload_model("simple")
    assert not client.is_model_ready("simple")
    with pytest.raises(InferenceServerException, match="failed to load 'no_such_model'"):
        client.load_model("no_such_model")
    client.load_model("simple")
    assert client.is_model_ready("simple")
    assert client.get_model_config("simple")["max_batch_size"] == 8


def test_logging_and_trace_settings(server, client):
    settings = client.get_log_settings()
    assert "log_verbose_level" in settings
    assert client.update_log_settings({"log_verbose_level": 0})["log_verbose_level"] == 0
    status, body = send_json(server, "POST", "/v2/logging", {"log_verbose_level": "x"})
    assert status == 400 and "uint32" in body["error"]
    trace = client.get_trace_settings()
    assert trace["trace_level"] == ["OFF"]
    assert client.get_trace_settings(model_name="simple")["trace_level"] == ["OFF"]
    with pytest.raises(InferenceServerException) as e:  # Triton's check: the level with no rate
        client.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "0"})
    assert e.value.message() == "Attempting to set invalid trace setting :sample rate must be non-zero"
    assert client.get_trace_settings()["trace_level"] == ["OFF"]  # nothing applied


# ----------------------------------------------------------------------------- restricted APIs


def test_restricted_apis(tmp_path):
    log = tmp_path / "fpgaserve.log"
    args = ["--http-restricted-api=inference,model-repository:X-Api-Key=s3cret"]
    with ServerProcess([CONFORMANCE_REPO], *args, log_path=log) as s:
        c = httpclient.InferenceServerClient(f"localhost:{s.http_port}")
        with pytest.raises(InferenceServerException) as e:
            c.infer("simple", simple_inputs(True)[0])
        assert e.value.status() == "403"
        assert e.value.message() == "This API is restricted, expecting header 'X-Api-Key'"
        with pytest.raises(InferenceServerException, match="restricted"):
            c.get_model_repository_index()
        r = c.infer("simple", simple_inputs(True)[0], headers={"X-Api-Key": "s3cret"})
        assert r.as_numpy("OUTPUT0") is not None
        assert c.get_model_metadata("simple")["name"] == "simple"  # metadata is not restricted
        c.close()
