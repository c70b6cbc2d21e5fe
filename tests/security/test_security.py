"""The server's security features, against real ``fpgaserve`` processes and real clients.

* **Restricted protocols** (``--grpc-restricted-protocol``, Triton's flag): every gRPC method of
  every protocol group (health incl. ``grpc.health.v1`` Check/Watch, metadata, inference incl.
  streaming, shared-memory, model-config, model-repository, statistics, trace, logging) is
  refused with UNAVAILABLE and Triton's exact text without its header, with a wrong value,
  with the value under another key; served with it; and served without any header on a server
  where its group is not restricted. Refused calls have no effect (no inference runs, no
  setting changes, no region is registered, no model unloads). tritonclient's ``headers=`` on
  unary, streaming and asyncio calls. Malformed options make the server exit non-zero at start
  with an error line. ``--http-restricted-api=health:...``: the probes answer 403 with Triton's
  JSON body without the header, 200 with it; the metrics port is not affected.
* **Logging**: LogSettings may change ``log_file`` only with ``--allow-log-file-update=true``
  (PERMISSION_DENIED otherwise, no file created, and nothing else of the request applied);
  the current value is accepted. Client strings with control characters or Unicode line
  breaks (model names, load config overrides, shm region names and keys) never forge a log
  line, in the captured log nor in a log file switched to over LogSettings.
* **TLS / mutual TLS on gRPC** (``--grpc-use-ssl``, ``--grpc-use-ssl-mutual``): a CA, a server
  certificate and client certificates (one from another CA) are made with the ``openssl`` CLI
  in a temporary directory. tritonclient infers and streams over TLS; plaintext clients,
  clients trusting another CA, and under mTLS clients without a certificate, with one from
  another CA or with a server-only certificate are refused. perf_analyzer runs over TLS and
  mTLS (and fails without a client certificate under mTLS). Missing, unreadable or unusable
  certificate files make the server exit non-zero with an error line that says so.
* **Connection hygiene** on the HTTP and metrics ports (raw sockets): 408 and close for a
  stalled or trickled request line, headers or body after ``--http-header-timeout-secs``; idle
  keep-alive connections closed after ``--http-idle-timeout-secs``; 400 (and close) for framing
  the parser refuses (lines over 8 KiB, more than 100 headers, malformed or duplicate
  Content-Length), 413, 505, 405, a chunked body that never arrives 408; pipelining;
  a GET body is consumed, never parsed as the next request; 300 idle connections at once do
  not stop other clients and are all closed. gRPC: ``--grpc-max-concurrent-streams`` is
  advertised and more concurrent calls on one connection than it allows all succeed; a
  client flooding HTTP/2 PINGs gets GOAWAY (``h2``), while tritonclient with keepalive keeps
  working.

Every bound on waiting (socket timeouts, loops) only catches a hang; nothing asserts timing.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aiogrpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from fpgaserve.server.frontends import access
from support.server_process import CONFORMANCE_REPO, ServerProcess, serve

pytestmark = pytest.mark.timeout(120)

RPC_TIMEOUT = 20  # seconds; only catches a hang
HANG = 30.0  # seconds a socket may wait for the server before the test calls it a hang

GRPC_REFUSAL = "This protocol is restricted, expecting header '{}'"
HTTP_REFUSAL = "This API is restricted, expecting header '{}'"

IN0 = np.arange(16, dtype=np.int32).reshape(1, 16)
IN1 = np.full((1, 16), 5, dtype=np.int32)


# ----------------------------------------------------------------------------- helpers


def simple_inputs(mod=grpcclient):
    inputs = [mod.InferInput("INPUT0", [1, 16], "INT32"), mod.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(IN0)
    inputs[1].set_data_from_numpy(IN1)
    return inputs


def check_simple(result) -> None:
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), IN0 + IN1)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), IN0 - IN1)


def stream_once(client, headers=None):
    """One ModelStreamInfer request over tritonclient's stream: (result, error)."""
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)), headers=headers)
    try:
        try:
            client.async_stream_infer("simple", simple_inputs())
        except InferenceServerException:
            pass  # the stream already failed; the callback has the error
        return results.get(timeout=RPC_TIMEOUT)
    finally:
        client.stop_stream()


def exit_output(*args: str, timeout: float = 60.0) -> tuple[int, str]:
    """Run fpgaserve with ``args`` and expect it to exit by itself: (rc, combined output)."""
    proc = ServerProcess([CONFORMANCE_REPO], *args)
    try:
        done = subprocess.run(proc.args, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"fpgaserve {' '.join(args)} did not exit within {timeout}s (it accepted the options)")
    return done.returncode, done.stdout + done.stderr


def error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if "error" in line.lower()]


class ProbeHeaderServer(ServerProcess):
    """A server whose HTTP ``health`` API is restricted: readiness is polled with the header."""

    def __init__(self, *args, probe_headers: dict[str, str], **kwargs):
        super().__init__(*args, **kwargs)
        self.probe_headers = probe_headers

    def http_status(self, path: str) -> int:
        request = urllib.request.Request(f"http://127.0.0.1:{self.http_port}{path}", headers=self.probe_headers)
        try:
            with urllib.request.urlopen(request, timeout=2) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code


def http_get(port: int, path: str, headers: dict[str, str] | None = None, method: str = "GET"):
    """(status, content type, body) of one request with urllib."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=RPC_TIMEOUT) as r:
            return r.status, r.headers.get("Content-Type"), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read()


# ----------------------------------------------------------------------------- gRPC calls, one per method
#
# Each call takes (channel, metadata) and returns the response or raises grpc.RpcError. The
# messages are tritonclient's own generated classes (raw bytes for grpc.health.v1, whose
# HealthCheckRequest{} is empty and whose SERVING response is field 1 = 1).

SERVING = b"\x08\x01"
NO_SUCH_SHM_KEY = "/fpgaserve-test-no-such-region"


def _infer_request():
    request = service_pb2.ModelInferRequest(model_name="simple", id="restricted")
    for name in ("INPUT0", "INPUT1"):
        tensor = request.inputs.add()
        tensor.name, tensor.datatype = name, "INT32"
        tensor.shape.extend([1, 16])
    request.raw_input_contents.extend([IN0.tobytes(), IN1.tobytes()])
    return request


def _check_infer_response(response) -> None:
    out0 = np.frombuffer(response.raw_output_contents[0], dtype=np.int32)
    np.testing.assert_array_equal(out0, (IN0 + IN1).ravel())


def _unary(method: str, make_request):
    def call(channel, metadata):
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        return getattr(stub, method)(make_request(), metadata=metadata, timeout=RPC_TIMEOUT)

    return call


def _model_infer(channel, metadata):
    response = _unary("ModelInfer", _infer_request)(channel, metadata)
    _check_infer_response(response)
    return response


def _model_stream_infer(channel, metadata):
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    responses = list(stub.ModelStreamInfer(iter([_infer_request()]), metadata=metadata, timeout=RPC_TIMEOUT))
    assert len(responses) == 1 and not responses[0].error_message, responses
    _check_infer_response(responses[0].infer_response)
    return responses[0]


def _health_check(channel, metadata):
    response = channel.unary_unary("/grpc.health.v1.Health/Check")(b"", metadata=metadata, timeout=RPC_TIMEOUT)
    assert response == SERVING, response
    return response


def _health_watch(channel, metadata):
    call = channel.unary_stream("/grpc.health.v1.Health/Watch")(b"", metadata=metadata, timeout=RPC_TIMEOUT)
    try:
        first = next(call)
    finally:
        call.cancel()
    assert first == SERVING, first
    return first


OK = grpc.StatusCode.OK

# method -> (protocol group, call, status when the call is let through)
RPCS = {
    "ServerLive": ("health", _unary("ServerLive", service_pb2.ServerLiveRequest), OK),
    "ServerReady": ("health", _unary("ServerReady", service_pb2.ServerReadyRequest), OK),
    "ModelReady": ("health", _unary("ModelReady", lambda: service_pb2.ModelReadyRequest(name="simple")), OK),
    "grpc.health.v1.Health/Check": ("health", _health_check, OK),
    "grpc.health.v1.Health/Watch": ("health", _health_watch, OK),
    "ServerMetadata": ("metadata", _unary("ServerMetadata", service_pb2.ServerMetadataRequest), OK),
    "ModelMetadata": ("metadata", _unary("ModelMetadata", lambda: service_pb2.ModelMetadataRequest(name="simple")), OK),
    "ModelInfer": ("inference", _model_infer, OK),
    "ModelStreamInfer": ("inference", _model_stream_infer, OK),
    "SystemSharedMemoryStatus": (
        "shared-memory",
        _unary("SystemSharedMemoryStatus", service_pb2.SystemSharedMemoryStatusRequest),
        OK,
    ),
    "SystemSharedMemoryRegister": (
        "shared-memory",
        _unary(
            "SystemSharedMemoryRegister",
            lambda: service_pb2.SystemSharedMemoryRegisterRequest(name="r", key=NO_SUCH_SHM_KEY, byte_size=64),
        ),
        grpc.StatusCode.INTERNAL,  # Unable to open shared memory region
    ),
    "SystemSharedMemoryUnregister": (
        "shared-memory",
        _unary("SystemSharedMemoryUnregister", service_pb2.SystemSharedMemoryUnregisterRequest),
        OK,
    ),
    "CudaSharedMemoryStatus": (
        "shared-memory",
        _unary("CudaSharedMemoryStatus", service_pb2.CudaSharedMemoryStatusRequest),
        OK,
    ),
    "CudaSharedMemoryRegister": (
        "shared-memory",
        _unary("CudaSharedMemoryRegister", lambda: service_pb2.CudaSharedMemoryRegisterRequest(name="c", byte_size=8)),
        grpc.StatusCode.UNIMPLEMENTED,  # no GPU
    ),
    "CudaSharedMemoryUnregister": (
        "shared-memory",
        _unary("CudaSharedMemoryUnregister", service_pb2.CudaSharedMemoryUnregisterRequest),
        OK,
    ),
    "ModelConfig": ("model-config", _unary("ModelConfig", lambda: service_pb2.ModelConfigRequest(name="simple")), OK),
    "RepositoryIndex": ("model-repository", _unary("RepositoryIndex", service_pb2.RepositoryIndexRequest), OK),
    "RepositoryModelLoad": (
        "model-repository",
        _unary("RepositoryModelLoad", lambda: service_pb2.RepositoryModelLoadRequest(model_name="simple_identity")),
        OK,
    ),
    "RepositoryModelUnload": (
        "model-repository",
        _unary("RepositoryModelUnload", lambda: service_pb2.RepositoryModelUnloadRequest(model_name="repeat_int32")),
        OK,
    ),
    "ModelStatistics": (
        "statistics",
        _unary("ModelStatistics", lambda: service_pb2.ModelStatisticsRequest(name="simple")),
        OK,
    ),
    "TraceSetting": ("trace", _unary("TraceSetting", service_pb2.TraceSettingRequest), OK),
    "LogSettings": ("logging", _unary("LogSettings", service_pb2.LogSettingsRequest), OK),
}

PROTOCOLS = access.CATEGORIES  # the groups the server knows; HOME and RPCS must cover each

# Two servers split the nine groups between them: each group is restricted on exactly one of
# them (under the key/value below) and unrestricted on the other.
ADMIN = ("admin", "s3cret")  # server "a"
REPO = ("repo", "r3po")  # server "a"
OPS = ("ops", "0ps-v4lue")  # server "b"
SHM = ("shm", "sh-m")  # server "b"
HOME = {
    "inference": ("a", ADMIN),
    "model-config": ("a", ADMIN),
    "statistics": ("a", ADMIN),
    "logging": ("a", ADMIN),
    "model-repository": ("a", REPO),
    "health": ("b", OPS),
    "metadata": ("b", OPS),
    "shared-memory": ("b", SHM),
    "trace": ("b", SHM),
}
PROBE_HEADER, PROBE_VALUE = "X-Probe-Token", "pr0be"


def grpc_header(key: str) -> str:
    return access.GRPC_HEADER_PREFIX + key


def md(key_value) -> list[tuple[str, str]]:
    key, value = key_value
    return [(grpc_header(key), value)]


def call_rpc(server: ServerProcess, method: str, metadata=()):
    """(status code, details) of one call on a fresh channel."""
    _, call, _ = RPCS[method]
    with grpc.insecure_channel(server.url) as channel:
        try:
            call(channel, list(metadata))
        except grpc.RpcError as e:
            return e.code(), e.details()
    return OK, ""


@pytest.fixture(scope="module")
def restricted(tmp_path_factory):
    """{"a": server, "b": server}; both explicit mode with every model loaded, so the
    repository RPCs succeed when let through. Server b also restricts the HTTP probes."""
    log_dir = tmp_path_factory.mktemp("restricted")
    explicit = ["--model-control-mode", "explicit", "--load-model", "*"]
    a = ServerProcess(
        [CONFORMANCE_REPO],
        *explicit,
        "--grpc-restricted-protocol=inference,model-config,statistics,logging:{}={}".format(*ADMIN),
        "--grpc-restricted-protocol=model-repository:{}={}".format(*REPO),
        "--allow-client-shm=true",
        log_path=log_dir / "a.log",
    )
    b = ProbeHeaderServer(
        [CONFORMANCE_REPO],
        *explicit,
        "--grpc-restricted-protocol=health,metadata:{}={}".format(*OPS),
        "--grpc-restricted-protocol=shared-memory,trace:{}={}".format(*SHM),
        "--allow-client-shm=true",
        f"--http-restricted-api=health:{PROBE_HEADER}={PROBE_VALUE}",
        log_path=log_dir / "b.log",
        probe_headers={PROBE_HEADER: PROBE_VALUE},
    )
    servers = {}
    try:
        servers["a"] = a.start()
        servers["b"] = b.start()
        yield servers
    finally:
        rcs = {name: s.stop() for name, s in (("a", a), ("b", b))}
    assert rcs == {"a": 0, "b": 0}, f"{rcs}: {a.log()} {b.log()}"


def test_every_method_and_group_is_covered():
    assert set(HOME) == set(PROTOCOLS)
    assert {protocol for protocol, _, _ in RPCS.values()} == set(PROTOCOLS)
    assert len(RPCS) == 22


def test_grpc_header_is_tritons():
    """The tests build headers from the server's prefix: it must be Triton's (kRestrictedProtocolHeaderTemplate)."""
    assert access.GRPC_HEADER_PREFIX == "triton-grpc-protocol-"


@pytest.mark.parametrize("method", list(RPCS))
def test_restricted_method_needs_its_header(restricted, method):
    protocol, _, allowed = RPCS[method]
    home, key_value = HOME[protocol]
    key, value = key_value
    server = restricted[home]
    refusal = (grpc.StatusCode.UNAVAILABLE, GRPC_REFUSAL.format(grpc_header(key)))
    other_key = ADMIN if key_value != ADMIN else OPS

    assert call_rpc(server, method) == refusal, "no header"
    for wrong in (value.upper(), value[:-1], value + "x", "", " " + value):
        assert call_rpc(server, method, [(grpc_header(key), wrong)]) == refusal, f"wrong value {wrong!r}"
    assert call_rpc(server, method, [(grpc_header(other_key[0]), value)]) == refusal, "right value, other key"
    assert call_rpc(server, method, [(key, value)]) == refusal, "key without the triton-grpc-protocol- prefix"
    assert call_rpc(server, method, [("triton-grpc-protocol", value)]) == refusal

    code, details = call_rpc(server, method, md(key_value))
    assert code == allowed, (code, details)
    assert not details.startswith("This protocol is restricted"), details
    # a header of another group's key alongside does not get in the way
    code, details = call_rpc(server, method, md(other_key) + md(key_value))
    assert code == allowed, (code, details)


@pytest.mark.parametrize("method", list(RPCS))
def test_unrestricted_method_needs_no_header(restricted, method):
    protocol, _, allowed = RPCS[method]
    other = "b" if HOME[protocol][0] == "a" else "a"
    code, details = call_rpc(restricted[other], method)
    assert code == allowed, (code, details)


def test_restriction_is_checked_before_the_message_is_parsed(restricted):
    """Bytes that are not a ModelInferRequest: without the header the refusal, not a parse error."""
    with grpc.insecure_channel(restricted["a"].url) as channel:
        infer = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        with pytest.raises(grpc.RpcError) as e:
            infer(b"\xff\xff\xff\xff not protobuf", timeout=RPC_TIMEOUT)
        assert (e.value.code(), e.value.details()) == (
            grpc.StatusCode.UNAVAILABLE,
            GRPC_REFUSAL.format(grpc_header(ADMIN[0])),
        )
        with pytest.raises(grpc.RpcError) as e:
            infer(b"\xff\xff\xff\xff not protobuf", metadata=md(ADMIN), timeout=RPC_TIMEOUT)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value.details()


def test_tritonclient_headers_on_unary_and_streaming_calls(restricted):
    server = restricted["a"]
    headers = {grpc_header(ADMIN[0]): ADMIN[1]}
    refusal = GRPC_REFUSAL.format(grpc_header(ADMIN[0]))
    client = grpcclient.InferenceServerClient(server.url)
    try:
        with pytest.raises(InferenceServerException) as e:
            client.infer("simple", simple_inputs())
        assert str(e.value.status()) == "StatusCode.UNAVAILABLE" and e.value.message() == refusal
        check_simple(client.infer("simple", simple_inputs(), headers=headers))
        # metadata is not restricted on server a: no header needed
        assert client.get_model_metadata("simple").name == "simple"
        assert client.get_model_config("simple", headers=headers).config.name == "simple"

        result, error = stream_once(client)
        assert result is None and error is not None
        assert str(error.status()) == "StatusCode.UNAVAILABLE" and error.message() == refusal
        result, error = stream_once(client, headers=headers)
        assert error is None, error
        check_simple(result)
        result, error = stream_once(client, headers={grpc_header(ADMIN[0]): "nope"})
        assert error is not None and error.message() == refusal
    finally:
        client.close()


def test_tritonclient_asyncio_headers(restricted):
    server = restricted["b"]
    headers = {grpc_header(OPS[0]): OPS[1]}

    async def run():
        client = aiogrpcclient.InferenceServerClient(server.url)
        try:
            with pytest.raises(InferenceServerException) as e:
                await client.is_server_ready()
            assert e.value.message() == GRPC_REFUSAL.format(grpc_header(OPS[0]))
            assert await client.is_server_ready(headers=headers)
            assert await client.is_model_ready("simple", headers=headers)
            check_simple(await client.infer("simple", simple_inputs(aiogrpcclient)))  # not restricted on b
        finally:
            await client.close()

    asyncio.run(run())


def test_refused_calls_have_no_effect(restricted):
    a, b = restricted["a"], restricted["b"]
    admin = {grpc_header(ADMIN[0]): ADMIN[1]}
    client_a = grpcclient.InferenceServerClient(a.url)
    client_b = grpcclient.InferenceServerClient(b.url)
    region = f"fpgaserve-sec-{uuid.uuid4().hex[:8]}"
    fd = os.open(f"/dev/shm/{region}", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        os.ftruncate(fd, 128)

        def stats():
            s = client_a.get_inference_statistics("simple", headers=admin).model_stats[0]
            return s.inference_count, s.inference_stats.success.count, s.inference_stats.fail.count

        before = stats()
        for _ in range(3):
            with pytest.raises(InferenceServerException):
                client_a.infer("simple", simple_inputs())
        assert stats() == before, "a refused ModelInfer ran or was counted"

        with pytest.raises(InferenceServerException):
            client_a.update_log_settings({"log_verbose_level": 3})
        assert client_a.get_log_settings(headers=admin, as_json=True)["settings"]["log_verbose_level"] == {
            "uint32_param": 0
        }

        with pytest.raises(InferenceServerException):
            client_a.unload_model("simple")
        assert client_a.is_model_ready("simple"), "a refused RepositoryModelUnload unloaded the model"

        with pytest.raises(InferenceServerException):
            client_b.register_system_shared_memory("sneaky", f"/{region}", 128)
        shm = {grpc_header(SHM[0]): SHM[1]}
        assert not client_b.get_system_shared_memory_status(headers=shm, as_json=True).get("regions")
        # and with the header the same registration works
        client_b.register_system_shared_memory("allowed", f"/{region}", 128, headers=shm)
        assert list(client_b.get_system_shared_memory_status(headers=shm, as_json=True)["regions"]) == ["allowed"]
        client_b.unregister_system_shared_memory("allowed", headers=shm)
    finally:
        os.close(fd)
        os.unlink(f"/dev/shm/{region}")
        client_a.close()
        client_b.close()


# ----------------------------------------------------------------------------- HTTP restricted API


PROBES = ["/v2/health/live", "/v2/health/ready", "/v2/models/simple/ready", "/v2/models/simple/versions/1/ready"]


@pytest.mark.parametrize("path", PROBES)
def test_http_probe_restricted(restricted, path):
    port = restricted["b"].http_port
    # compact JSON, as Triton's writer produces it
    body = json.dumps({"error": HTTP_REFUSAL.format(PROBE_HEADER)}, separators=(",", ":")).encode()
    assert body == b'{"error":"This API is restricted, expecting header \'X-Probe-Token\'"}'
    for headers in (
        {},
        {PROBE_HEADER: "wrong"},
        {PROBE_HEADER: PROBE_VALUE.upper()},
        {"Authorization": PROBE_VALUE},
        {grpc_header(PROBE_HEADER.lower()): PROBE_VALUE},
    ):
        status, ctype, got = http_get(port, path, headers)
        assert (status, got) == (403, body), headers
        assert ctype.startswith("application/json")
        assert json.loads(got) == {"error": HTTP_REFUSAL.format(PROBE_HEADER)}
    status, _, got = http_get(port, path, {}, method="HEAD")
    assert (status, got) == (403, b"")
    assert http_get(port, path, {PROBE_HEADER: PROBE_VALUE})[0] == 200
    assert http_get(port, path, {PROBE_HEADER.upper(): PROBE_VALUE})[0] == 200  # header names are case-insensitive
    assert http_get(port, path, {PROBE_HEADER: PROBE_VALUE}, method="HEAD")[:1] == (200,)


def test_http_restriction_leaves_other_answers_and_metrics_alone(restricted):
    b, a = restricted["b"], restricted["a"]
    ok = {PROBE_HEADER: PROBE_VALUE}
    assert http_get(b.http_port, "/v2/models/no_such_model/ready", ok)[0] == 400
    assert http_get(b.http_port, "/v2/models/no_such_model/ready")[0] == 403
    assert http_get(b.metrics_port, "/metrics")[0] == 200  # the metrics endpoint is not an API group
    assert http_get(a.http_port, "/v2/health/ready")[0] == 200  # a restricts no HTTP API


BAD_RESTRICTIONS = [
    (["--grpc-restricted-protocol=health"], "option format"),
    (["--grpc-restricted-protocol=health:key"], "option format"),
    (["--grpc-restricted-protocol=:key=value"], "option format"),
    (["--grpc-restricted-protocol=health:=value"], "option format"),
    (["--grpc-restricted-protocol=health:key="], "option format"),
    (["--grpc-restricted-protocol=bogus:key=value"], "bogus"),
    (["--grpc-restricted-protocol=Health:key=value"], "Health"),
    (["--grpc-restricted-protocol=health,:key=value"], "unknown restricted protocol"),
    (["--grpc-restricted-protocol=health,health:key=value"], "multiple"),
    (["--grpc-restricted-protocol=health:a=b", "--grpc-restricted-protocol=metadata,health:c=d"], "multiple"),
    (["--http-restricted-api=health"], "option format"),
    (["--http-restricted-api=health:key"], "option format"),
    (["--http-restricted-api=nope:key=value"], "nope"),
    (["--http-restricted-api=health:a=b", "--http-restricted-api=health:c=d"], "multiple"),
]


@pytest.mark.parametrize("args,fragment", BAD_RESTRICTIONS, ids=[" ".join(a) for a, _ in BAD_RESTRICTIONS])
def test_malformed_restriction_exits_at_start(args, fragment):
    rc, output = exit_output(*args)
    assert rc != 0, output
    assert any(fragment in line for line in error_lines(output)), output


# ----------------------------------------------------------------------------- log settings and log lines


@pytest.fixture(scope="module")
def default_server(tmp_path_factory):
    """No extra flags at all: what ``fpgaserve --model-repository ...`` gives."""
    yield from serve(ServerProcess([CONFORMANCE_REPO], log_path=tmp_path_factory.mktemp("default") / "fpgaserve.log"))


def log_settings(client) -> dict:
    return {k: next(iter(v.values())) for k, v in client.get_log_settings(as_json=True)["settings"].items()}


def test_log_file_change_refused_without_flag(default_server, tmp_path):
    target = tmp_path / "hijacked.log"
    client = grpcclient.InferenceServerClient(default_server.url)
    try:
        with pytest.raises(InferenceServerException) as e:
            client.update_log_settings({"log_file": str(target)})
        assert str(e.value.status()) == "StatusCode.PERMISSION_DENIED"
        assert "--allow-log-file-update" in e.value.message()
        assert not target.exists()
        assert log_settings(client)["log_file"] == ""
        # the current value is not a change
        assert client.update_log_settings({"log_file": ""}, as_json=True)["settings"]["log_file"]["string_param"] == ""
        assert client.is_server_ready()
    finally:
        client.close()


def test_refused_log_settings_request_changes_nothing(default_server, tmp_path):
    """A refused LogSettings request -- a log_file change without the flag, or an unknown key --
    must not apply the other settings it carries. The server walks the request's settings map
    in hash order (randomized per process), so the refused key comes first in some requests and
    later in others: many different requests, each checked."""
    changes = {
        "log_verbose_level": 3,
        "log_info": False,
        "log_warning": False,
        "log_error": False,
        "log_format": "ISO8601",
    }
    refused = [{"log_file": str(tmp_path / "x.log")}] + [{f"no_such_setting_{i}": True} for i in range(16)]
    client = grpcclient.InferenceServerClient(default_server.url)
    before = log_settings(client)
    applied = []
    try:
        for bad in refused:
            for key, value in changes.items():
                with pytest.raises(InferenceServerException) as e:
                    client.update_log_settings({key: value, **bad})
                expected = "PERMISSION_DENIED" if "log_file" in bad else "INVALID_ARGUMENT"
                assert str(e.value.status()) == f"StatusCode.{expected}", e.value
                if log_settings(client) != before:
                    applied.append({key: value, **bad})
                    client.update_log_settings(before)
        assert not (tmp_path / "x.log").exists()
        assert not applied, f"{len(applied)} refused requests were partly applied, e.g. {applied[0]}"
    finally:
        client.update_log_settings(before)
        client.close()


def test_log_file_given_at_start_can_be_kept_not_changed(tmp_path):
    log_file = tmp_path / "server.log"
    with ServerProcess([CONFORMANCE_REPO], "--log-file", str(log_file), log_path=tmp_path / "stderr.log") as proc:
        client = grpcclient.InferenceServerClient(proc.url)
        try:
            assert client.update_log_settings({"log_file": str(log_file)}, as_json=True)["settings"]["log_file"] == {
                "string_param": str(log_file)
            }
            for other in (str(tmp_path / "other.log"), ""):
                with pytest.raises(InferenceServerException) as e:
                    client.update_log_settings({"log_file": other})
                assert str(e.value.status()) == "StatusCode.PERMISSION_DENIED", other
            assert not (tmp_path / "other.log").exists()
            assert log_settings(client)["log_file"] == str(log_file)
        finally:
            client.close()
        assert proc.stop() == 0
    assert "Started GRPCInferenceService" in log_file.read_text()


FORGED = "E1124 12:00:00 4242 fpgaserve] forged"  # what an injected line would start with

# client strings that try to start a new log line: C0 controls, CR/LF, and the characters
# str.splitlines() (and many log viewers) treat as line breaks
C0_INJECTIONS = ["\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1b[2K\r"]
UNICODE_INJECTIONS = ["\x85", "\u2028", "\u2029"]


def assert_no_forged_line(text: str) -> None:
    forged = [line for line in text.splitlines() if line.lstrip().startswith(FORGED)]
    assert not forged, forged


def make_region(size: int = 64) -> str:
    name = f"fpgaserve-sec-{uuid.uuid4().hex[:8]}"
    fd = os.open(f"/dev/shm/{name}", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    os.ftruncate(fd, size)
    os.close(fd)
    return name


def test_log_file_update_allowed_with_flag_and_escaped_there(tmp_path):
    target = tmp_path / "switched.log"
    region = make_region(64)
    proc = ServerProcess(
        [CONFORMANCE_REPO], "--allow-log-file-update=true", "--allow-client-shm=true", log_path=tmp_path / "stderr.log"
    )
    try:
        with proc:
            client = grpcclient.InferenceServerClient(proc.url)
            try:
                response = client.update_log_settings({"log_file": str(target)}, as_json=True)
                assert response["settings"]["log_file"] == {"string_param": str(target)}
                assert target.exists()
                # a logged refusal quoting a client-chosen region name lands in the new file, escaped
                name = "r\u2028" + FORGED
                with pytest.raises(InferenceServerException):
                    client.register_system_shared_memory(name, f"/{region}", 4096)
                with pytest.raises(InferenceServerException) as e:
                    client.update_log_settings({"log_file": str(tmp_path)})  # a directory
                assert str(e.value.status()) == "StatusCode.INVALID_ARGUMENT"
                assert client.update_log_settings({"log_file": ""}, as_json=True)["settings"]["log_file"] == {
                    "string_param": ""
                }
            finally:
                client.close()
            assert proc.stop() == 0
    finally:
        os.unlink(f"/dev/shm/{region}")
    text = target.read_text()
    assert "\\u2028" + FORGED in text, text
    assert_no_forged_line(text)


def test_client_strings_never_forge_log_lines(tmp_path):
    log = tmp_path / "fpgaserve.log"
    region = make_region(64)
    proc = ServerProcess(
        [CONFORMANCE_REPO],
        "--model-control-mode",
        "explicit",
        "--load-model",
        "simple",
        "--log-verbose",
        "1",
        "--allow-client-shm=true",
        log_path=log,
    )
    try:
        with proc:
            client = grpcclient.InferenceServerClient(proc.url)
            try:
                for sep in C0_INJECTIONS + ["\t", "\x7f"]:
                    for call in (client.load_model, client.unload_model):
                        with pytest.raises(InferenceServerException) as e:
                            call("nope" + sep + FORGED)
                        assert str(e.value.status()) == "StatusCode.INVALID_ARGUMENT", (call, sep)
                        assert e.value.message().startswith("invalid model name"), e.value.message()
                        assert not re.search(r"[\x00-\x1f\x7f]", e.value.message()), e.value.message()
                    for name, key in (("r" + sep + FORGED, f"/{region}"), ("r", f"/{region}" + sep + FORGED)):
                        with pytest.raises(InferenceServerException) as e:
                            client.register_system_shared_memory(name, key, 64)
                        assert str(e.value.status()) == "StatusCode.INVALID_ARGUMENT", (name, key)
                for sep in UNICODE_INJECTIONS:
                    with pytest.raises(InferenceServerException):
                        client.load_model("nope" + sep + FORGED)
                    # logged by the server: a missing key, and a size beyond the region
                    with pytest.raises(InferenceServerException):
                        client.register_system_shared_memory("r", f"/{region}-missing" + sep + FORGED, 64)
                    with pytest.raises(InferenceServerException):
                        client.register_system_shared_memory("r" + sep + FORGED, f"/{region}", 4096)
                for sep in C0_INJECTIONS + UNICODE_INJECTIONS:
                    # config overrides are quoted in the load failure the server logs
                    with pytest.raises(InferenceServerException):
                        client.load_model("simple", config=json.dumps({"backend": "nope" + sep + FORGED}))
                    with pytest.raises(InferenceServerException):
                        client.infer("simple" + sep + FORGED, simple_inputs())
                check_simple(client.infer("simple", simple_inputs()))
            finally:
                client.close()
            assert proc.stop() == 0
    finally:
        os.unlink(f"/dev/shm/{region}")
    text = log.read_text(encoding="utf-8", errors="replace")
    assert_no_forged_line(text)
    # the paths above really logged the strings (escaped), so the check means something
    assert "\\u2028" + FORGED in text and "\\x85" + FORGED in text, text
    assert "\\n" + FORGED in text, text  # the config override's backend


# ----------------------------------------------------------------------------- TLS and mutual TLS


def tls_args(pki: Path, mutual: bool = False) -> list[str]:
    args = ["--grpc-server-cert", str(pki / "server.pem"), "--grpc-server-key", str(pki / "server.key")]
    if mutual:
        return ["--grpc-use-ssl-mutual=true", *args, "--grpc-root-cert", str(pki / "ca.pem")]
    return ["--grpc-use-ssl=true", *args]


@pytest.fixture(scope="module")
def tls_server(pki, tmp_path_factory):
    log = tmp_path_factory.mktemp("tls") / "fpgaserve.log"
    yield from serve(ServerProcess([CONFORMANCE_REPO], *tls_args(pki), log_path=log))


@pytest.fixture(scope="module")
def mtls_server(pki, tmp_path_factory):
    log = tmp_path_factory.mktemp("mtls") / "fpgaserve.log"
    yield from serve(ServerProcess([CONFORMANCE_REPO], *tls_args(pki, mutual=True), log_path=log))


def tls_client(server, pki: Path, root: str = "ca", identity: str | None = None):
    kwargs = {"ssl": True, "root_certificates": str(pki / f"{root}.pem")}
    if identity is not None:
        kwargs.update(private_key=str(pki / f"{identity}.key"), certificate_chain=str(pki / f"{identity}.pem"))
    return grpcclient.InferenceServerClient(server.url, **kwargs)


def assert_refused(client) -> None:
    try:
        with pytest.raises(InferenceServerException) as e:
            client.infer("simple", simple_inputs(), client_timeout=RPC_TIMEOUT)
        assert str(e.value.status()) == "StatusCode.UNAVAILABLE", e.value
    finally:
        client.close()


def assert_serves(client) -> None:
    try:
        check_simple(client.infer("simple", simple_inputs(), client_timeout=RPC_TIMEOUT))
        result, error = stream_once(client)
        assert error is None, error
        check_simple(result)
        assert client.is_server_ready()
    finally:
        client.close()


def test_tls_infer_and_stream(tls_server, pki):
    assert_serves(tls_client(tls_server, pki))
    # a client that presents a certificate is fine too (TLS without client authentication)
    assert_serves(tls_client(tls_server, pki, identity="client"))


def test_tls_refuses_plaintext_and_untrusting_clients(tls_server, pki):
    assert_refused(grpcclient.InferenceServerClient(tls_server.url))
    assert_refused(tls_client(tls_server, pki, root="other-ca"))  # does not trust the server's CA
    assert tls_server.http_up()  # the HTTP probes stay plain HTTP


def test_mtls_serves_a_client_with_a_certificate_of_the_ca(mtls_server, pki):
    assert_serves(tls_client(mtls_server, pki, identity="client"))


@pytest.mark.parametrize("identity", [None, "rogue", "server"])
def test_mtls_refuses_clients_without_a_valid_certificate(mtls_server, pki, identity):
    """None: no client certificate; rogue: signed by another CA; server: the CA's own server
    certificate, which is not for client authentication."""
    assert_refused(tls_client(mtls_server, pki, identity=identity))


def test_mtls_refuses_plaintext(mtls_server):
    assert_refused(grpcclient.InferenceServerClient(mtls_server.url))


def run_pa_tls(pa: str, server, pki: Path, *extra: str):
    cmd = [
        pa,
        "-m",
        "simple",
        "-i",
        "grpc",
        "-u",
        f"localhost:{server.grpc_port}",
        "--ssl-grpc-use-ssl",
        "--ssl-grpc-root-certifications-file",
        str(pki / "ca.pem"),
        *extra,
        "--concurrency-range",
        "1",
        "--request-count",
        "300",  # one window: no stability to wait for
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    return done, f"{' '.join(cmd)}\nrc={done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}"


THROUGHPUT = re.compile(r"Concurrency: 1, throughput: [\d.]+ infer/sec")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_perf_analyzer_over_tls(perf_analyzer, tls_server, pki):
    done, text = run_pa_tls(perf_analyzer, tls_server, pki)
    assert done.returncode == 0 and THROUGHPUT.search(done.stdout), text


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_perf_analyzer_over_mutual_tls(perf_analyzer, mtls_server, pki):
    identity = [
        "--ssl-grpc-private-key-file",
        str(pki / "client.key"),
        "--ssl-grpc-certificate-chain-file",
        str(pki / "client.pem"),
    ]
    done, text = run_pa_tls(perf_analyzer, mtls_server, pki, *identity)
    assert done.returncode == 0 and THROUGHPUT.search(done.stdout), text
    # the same run without a client certificate is refused
    done, text = run_pa_tls(perf_analyzer, mtls_server, pki)
    assert done.returncode != 0 and not THROUGHPUT.search(done.stdout), text


def _bad_tls(pki: Path, tmp: Path, case: str) -> tuple[list[str], str]:
    """(arguments, what the error line must name) for one broken TLS setup."""
    cert, key = str(pki / "server.pem"), str(pki / "server.key")
    garbage = tmp / "garbage.pem"
    garbage.write_text("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n")
    missing = str(tmp / "missing.pem")
    ssl, mutual = "--grpc-use-ssl=true", "--grpc-use-ssl-mutual=true"
    return {
        "missing cert file": ([ssl, "--grpc-server-cert", missing, "--grpc-server-key", key], missing),
        "missing key file": ([ssl, "--grpc-server-cert", cert, "--grpc-server-key", missing], missing),
        "key is a directory": ([ssl, "--grpc-server-cert", cert, "--grpc-server-key", str(tmp)], "--grpc-server-key"),
        "no cert flag": ([ssl, "--grpc-server-key", key], "--grpc-server-cert"),
        "no key flag": ([ssl, "--grpc-server-cert", cert], "--grpc-server-key"),
        "mutual without root": ([mutual, "--grpc-server-cert", cert, "--grpc-server-key", key], "--grpc-root-cert"),
        "missing root file": (
            [mutual, "--grpc-server-cert", cert, "--grpc-server-key", key, "--grpc-root-cert", missing],
            missing,
        ),
        "garbage cert": ([ssl, "--grpc-server-cert", str(garbage), "--grpc-server-key", key], "cert"),
        "garbage key": ([ssl, "--grpc-server-cert", cert, "--grpc-server-key", str(garbage)], "key"),
        "key of another cert": (
            [ssl, "--grpc-server-cert", cert, "--grpc-server-key", str(pki / "client.key")],
            "key",
        ),
        "garbage root": (
            [mutual, "--grpc-server-cert", cert, "--grpc-server-key", key, "--grpc-root-cert", str(garbage)],
            "cert",
        ),
        "root is another CA's key": (
            [mutual, "--grpc-server-cert", cert, "--grpc-server-key", key, "--grpc-root-cert", str(pki / "ca.key")],
            "cert",
        ),
    }[case]


BAD_TLS_CASES = [
    "missing cert file",
    "missing key file",
    "key is a directory",
    "no cert flag",
    "no key flag",
    "mutual without root",
    "missing root file",
    "garbage cert",
    "garbage key",
    "key of another cert",
    "garbage root",
    "root is another CA's key",
]


@pytest.mark.parametrize("case", BAD_TLS_CASES)
def test_bad_tls_files_exit_at_start_with_a_clear_error(pki, tmp_path, case):
    args, named = _bad_tls(pki, tmp_path, case)
    rc, output = exit_output(*args)
    assert rc != 0, output
    ours = [line for line in error_lines(output) if "fpgaserve" in line or line.startswith("error:")]
    assert ours, output
    line = ours[-1]
    assert "address in use" not in line, f"misleading error for a TLS file problem: {line}"
    assert named.lower() in line.lower(), f"the error line does not name {named!r}: {line}"


# ----------------------------------------------------------------------------- HTTP connection hygiene

HEADER_TIMEOUT, IDLE_TIMEOUT = "1", "2"


@pytest.fixture(scope="module")
def hygiene_server(tmp_path_factory):
    log = tmp_path_factory.mktemp("hygiene") / "fpgaserve.log"
    args = ["--http-header-timeout-secs", HEADER_TIMEOUT, "--http-idle-timeout-secs", IDLE_TIMEOUT]
    yield from serve(ServerProcess([CONFORMANCE_REPO], *args, log_path=log))


def port_of(server, which: str) -> int:
    return server.http_port if which == "http" else server.metrics_port


def read_to_eof(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a reset counts as closed)."""
    sock.settimeout(HANG)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except TimeoutError:
        pytest.fail(f"the server kept the connection open for {HANG}s; received {data[:300]!r}")
    except ConnectionResetError:
        pass
    return data


def exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=HANG) as sock:
        sock.sendall(data)
        return read_to_eof(sock)


def parse_responses(data: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """Split a byte stream of HTTP/1.1 responses (with Content-Length) into (status, headers, body)."""
    responses = []
    while data:
        head, sep, rest = data.partition(b"\r\n\r\n")
        assert sep, f"incomplete response head: {data[:300]!r}"
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers.get("content-length", "0"))
        responses.append((status, headers, rest[:length]))
        data = rest[length:]
    return responses


def response_length(data: bytes) -> int:
    """Bytes of the first response in ``data`` (head + Content-Length), once its head arrived."""
    head, _, _ = data.partition(b"\r\n\r\n")
    length = re.search(rb"(?i)content-length: *(\d+)", head)
    return len(head) + 4 + (int(length.group(1)) if length else 0)


def statuses(data: bytes) -> list[int]:
    return [status for status, _, _ in parse_responses(data)]


def request(path: str = "/v2/health/live", *headers: str, method: str = "GET", close: bool = False) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: localhost", *headers]
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


@pytest.mark.parametrize("which", ["http", "metrics"])
@pytest.mark.parametrize(
    "partial",
    [
        b"GET /v2/hea",
        b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n",
        b"GET /metrics HTTP/1.1\r\nX-Half: ab",
        b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789",
    ],
    ids=["request line", "headers", "header line", "body"],
)
def test_stalled_request_gets_408_and_close(hygiene_server, which, partial):
    got = parse_responses(exchange(port_of(hygiene_server, which), partial))
    assert [status for status, _, _ in got] == [408], got
    assert got[0][1]["connection"] == "close"


@pytest.mark.parametrize("which", ["http", "metrics"])
def test_trickled_headers_get_408_and_close(hygiene_server, which):
    """Slowloris: a header byte every 0.2 s keeps the connection busy but never completes the
    request; the header timeout is a deadline for the whole head, not per byte."""
    with socket.create_connection(("127.0.0.1", port_of(hygiene_server, which)), timeout=HANG) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\n")
        sock.settimeout(0.2)
        data = b""
        deadline = time.monotonic() + HANG
        while time.monotonic() < deadline:
            try:
                sock.sendall(b"X-Trickle: a\r\n")
            except OSError:  # the server closed the connection
                break
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            except ConnectionResetError:
                break
            if not chunk:
                break
            data += chunk
        else:
            pytest.fail(f"a trickling client held the connection for {HANG}s")
        data += read_to_eof(sock)  # whatever arrived before a write failed on the closed connection
    assert statuses(data) == [408], data


@pytest.mark.parametrize("which", ["http", "metrics"])
def test_idle_keep_alive_connection_is_closed(hygiene_server, which):
    path = "/v2/health/live" if which == "http" else "/metrics"
    with socket.create_connection(("127.0.0.1", port_of(hygiene_server, which)), timeout=HANG) as sock:
        sock.sendall(request(path))
        data = b""
        while b"\r\n\r\n" not in data or len(data) < response_length(data):
            chunk = sock.recv(65536)
            assert chunk, f"closed before the response was complete: {data[:300]!r}"
            data += chunk
        assert statuses(data) == [200] and b"Connection: close" not in data, data[:300]
        # the response is complete; now nothing more until the server closes the idle connection
        assert read_to_eof(sock) == b"", "the idle connection got more than its one response"


# aiohttp's parser (llhttp) answers what it refuses with 400 and closes (its HTTP/1.0 error
# response carries no Connection header; exchange() reading to EOF is the proof of the close).
FRAMING = [
    ("request line > 8 KiB", b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n", 400),
    ("header line > 8 KiB", b"GET /v2/health/live HTTP/1.1\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n", 400),
    ("101 header lines", b"GET /v2/health/live HTTP/1.1\r\n" + b"X-Many: a\r\n" * 101 + b"\r\n", 400),
    ("no Host header", b"GET /v2/health/live HTTP/1.1\r\n\r\n", 400),
    ("body > 64 KiB", request("/v2/health/live", "Content-Length: 70000"), 413),
    ("chunked body that never comes", request("/v2/health/live", "Transfer-Encoding: chunked"), 408),
    ("HTTP/2.0 request line", b"GET /v2/health/live HTTP/2.0\r\n\r\n", 505),
    ("header without colon", request("/v2/health/live", "NoColonHere"), 400),
    ("space before colon", request("/v2/health/live", "X-Bad : a"), 400),
]


@pytest.mark.parametrize("which", ["http", "metrics"])
@pytest.mark.parametrize("data,status", [(d, s) for _, d, s in FRAMING], ids=[i for i, _, _ in FRAMING])
def test_bad_framing_is_answered_and_closed(hygiene_server, which, data, status):
    got = parse_responses(exchange(port_of(hygiene_server, which), data))
    assert [s for s, _, _ in got] == [status], got
    assert got[0][1].get("connection", "close") == "close"


@pytest.mark.parametrize("which", ["http", "metrics"])
def test_chunked_body_is_read(hygiene_server, which):
    path = "/v2/health/live" if which == "http" else "/metrics"
    data = request(path, "Transfer-Encoding: chunked") + b"4\r\nabcd\r\n0\r\n\r\n" + request(path, close=True)
    assert statuses(exchange(port_of(hygiene_server, which), data)) == [200, 200]


def test_limits_leave_room_for_normal_requests(hygiene_server):
    port = hygiene_server.http_port
    long_path = "/v2/models/" + "m" * 8000 + "/ready"
    assert statuses(exchange(port, request(long_path, close=True))) == [400]  # unknown model, not 414
    hundred = [f"X-Header-{i}: {'v' * 70}" for i in range(98)]  # + Host + Connection = 100 lines
    assert statuses(exchange(port, request("/v2/health/live", *hundred, close=True))) == [200]
    body = b"x" * 65536
    data = request("/v2/health/live", f"Content-Length: {len(body)}", close=True) + body
    assert statuses(exchange(port, data)) == [200]


@pytest.mark.parametrize("value", ["-1", "+5", "1e3", "0x10", "", "1 2", "\xb2", "\xb9\xb2"])
def test_malformed_content_length_is_400(hygiene_server, value):
    """Anything but ASCII digits is a bad request; '\\xb2' (superscript two) passes
    str.isdigit() but not int(), which must not cost the client its answer."""
    data = request("/v2/health/live", f"Content-Length: {value}")
    assert statuses(exchange(hygiene_server.http_port, data)) == [400]
    assert hygiene_server.http_up()


def test_conflicting_content_lengths_are_rejected(hygiene_server):
    """RFC 9112 §6.3: differing Content-Length values are an unrecoverable framing error (400,
    close). Picking one lets a front proxy that picked the other see a smuggled request."""
    smuggled = request("/v2/models/smuggled/ready")
    data = request("/v2/health/live", "Content-Length: 0", f"Content-Length: {len(smuggled)}") + smuggled
    got = statuses(exchange(hygiene_server.http_port, data + request("/v2/health/ready", close=True)))
    assert got == [400], got


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT"])
@pytest.mark.parametrize("which", ["http", "metrics"])
def test_other_methods_are_405(hygiene_server, method, which):
    path = "/v2/health/live" if which == "http" else "/metrics"
    data = request(path, "Content-Length: 4", method=method) + b"abcd" + request(path, close=True)
    got = parse_responses(exchange(port_of(hygiene_server, which), data))
    # CONNECT turns the connection into a tunnel for the parser: answered, then closed
    assert [s for s, _, _ in got] == ([405] if method == "CONNECT" else [405, 200]), got
    assert got[0][1]["content-type"] == "application/json"
    assert got[0][2] == b'{"error":"Method Not Allowed"}'


def test_pipelined_requests_are_all_answered_in_order(hygiene_server):
    paths = [
        "/v2/health/live",
        "/v2/health/ready",
        "/v2/models/simple/ready",
        "/v2/models/simple/versions/1/ready",
        "/v2/models/no_such_model/ready",
        "/v2/nothing/here",
    ]
    data = b"".join(request(p) for p in paths) + request("/v2/health/live", method="HEAD", close=True)
    assert statuses(exchange(hygiene_server.http_port, data)) == [200, 200, 200, 200, 400, 404, 200]
    scrape = request("/metrics") * 3 + request("/metrics", close=True)
    got = parse_responses(exchange(hygiene_server.metrics_port, scrape))
    assert [s for s, _, _ in got] == [200] * 4
    assert all(b"nv_inference_request_success" in body for _, _, body in got)


def test_get_body_is_consumed_not_parsed_as_a_request(hygiene_server):
    body = request("/v2/models/smuggled/ready")  # would answer 400 if it were parsed
    data = request("/v2/health/live", f"Content-Length: {len(body)}") + body + request("/v2/health/ready", close=True)
    assert statuses(exchange(hygiene_server.http_port, data)) == [200, 200]


@pytest.mark.timeout(180)
def test_hundreds_of_idle_connections_do_not_block_clients(hygiene_server):
    idle = []
    try:
        for port in (hygiene_server.http_port, hygiene_server.metrics_port):
            for _ in range(300):
                idle.append(socket.create_connection(("127.0.0.1", port), timeout=HANG))
        assert http_get(hygiene_server.http_port, "/v2/health/ready")[0] == 200
        status, _, body = http_get(hygiene_server.metrics_port, "/metrics")
        assert status == 200 and b"nv_inference_count" in body
        client = grpcclient.InferenceServerClient(hygiene_server.url)
        try:
            check_simple(client.infer("simple", simple_inputs()))
        finally:
            client.close()
        # every idle connection is answered 408 (it never sent a request line) and closed
        for sock in idle:
            assert statuses(read_to_eof(sock)) == [408]
    finally:
        for sock in idle:
            sock.close()
    assert http_get(hygiene_server.metrics_port, "/metrics")[0] == 200


# ----------------------------------------------------------------------------- gRPC streams and keepalive


def h2_session(port: int, pings: int = 0, duration: float = 5.0):
    """A raw HTTP/2 client: preface + SETTINGS, then ``pings`` PINGs without any data, as fast
    as it can. Returns (server SETTINGS, ConnectionTerminated event or None)."""
    import h2.config
    import h2.connection
    import h2.events

    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    settings, goaway = None, None
    with socket.create_connection(("127.0.0.1", port), timeout=HANG) as sock:
        conn.initiate_connection()
        sock.sendall(conn.data_to_send())
        sock.settimeout(0.05)
        sent = 0
        deadline = time.monotonic() + duration
        while time.monotonic() < deadline and goaway is None:
            if sent < pings:
                conn.ping(sent.to_bytes(8, "big"))
                sent += 1
                try:
                    sock.sendall(conn.data_to_send())
                except OSError:
                    break
            elif settings is not None and pings == 0:
                break
            try:
                data = sock.recv(65536)
            except TimeoutError:
                continue
            except ConnectionResetError:
                break
            if not data:
                break
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.RemoteSettingsChanged):
                    settings = {int(k): v.new_value for k, v in event.changed_settings.items()}
                elif isinstance(event, h2.events.ConnectionTerminated):
                    goaway = event
            try:
                sock.sendall(conn.data_to_send())
            except OSError:
                break
    return settings, goaway


@pytest.fixture(scope="module")
def h2_available():
    pytest.importorskip("h2", reason="the h2 package (raw HTTP/2 client) is not installed")


@pytest.fixture(scope="module")
def streams_server(tmp_path_factory):
    """Two concurrent streams per connection and the default ping policy (500 ms, 2 strikes) spelt out."""
    log = tmp_path_factory.mktemp("streams") / "fpgaserve.log"
    args = [
        "--grpc-max-concurrent-streams",
        "2",
        "--grpc-http2-min-recv-ping-interval-without-data",
        "500",
        "--grpc-http2-max-ping-strikes",
        "2",
    ]
    yield from serve(ServerProcess([CONFORMANCE_REPO], *args, log_path=log))


MAX_CONCURRENT_STREAMS = 3  # the HTTP/2 SETTINGS identifier


def test_max_concurrent_streams_is_advertised(h2_available, streams_server, default_server):
    settings, _ = h2_session(streams_server.grpc_port)
    assert settings is not None and settings.get(MAX_CONCURRENT_STREAMS) == 2, settings
    settings, _ = h2_session(default_server.grpc_port)
    assert settings is not None and settings.get(MAX_CONCURRENT_STREAMS) == 1024, settings


def test_calls_beyond_the_stream_limit_wait_instead_of_failing(streams_server):
    """Bursts of 20 concurrent infers on one connection allowing 2 streams: every call
    succeeds (the surplus queues in the client); 50 bursts, so an occasional refusal shows."""

    async def run():
        client = aiogrpcclient.InferenceServerClient(streams_server.url)
        results = []
        try:
            await client.is_server_live()  # the connection knows the limit before the bursts
            for _ in range(50):
                results += await asyncio.gather(
                    *(client.infer("simple", simple_inputs(aiogrpcclient)) for _ in range(20)), return_exceptions=True
                )
        finally:
            await client.close()
        return results

    results = asyncio.run(run())
    failures = [str(r) for r in results if isinstance(r, Exception)]
    assert not failures, f"{len(failures)} of {len(results)} failed, e.g. {failures[0]}"
    for result in results:
        check_simple(result)


def test_calls_beyond_the_stream_limit_from_threads(streams_server):
    """The same with 20 threads sharing one synchronous client (20 calls each)."""
    from concurrent.futures import ThreadPoolExecutor

    client = grpcclient.InferenceServerClient(streams_server.url)

    def calls():
        for _ in range(20):
            check_simple(client.infer("simple", simple_inputs()))

    try:
        assert client.is_server_live()
        with ThreadPoolExecutor(20) as pool:
            futures = [pool.submit(calls) for _ in range(20)]
            failures = [str(f.exception()) for f in futures if f.exception() is not None]
        assert not failures, f"{len(failures)} of 20 threads failed, e.g. {failures[0]}"
    finally:
        client.close()


def assert_ping_flood_gets_goaway(server) -> None:
    _, goaway = h2_session(server.grpc_port, pings=50, duration=10.0)
    assert goaway is not None, "50 PINGs without data in a row never earned a GOAWAY"
    assert goaway.error_code == 11, goaway  # ENHANCE_YOUR_CALM
    assert goaway.additional_data == b"too_many_pings", goaway
    # the server itself is fine: a new connection serves
    client = grpcclient.InferenceServerClient(server.url)
    try:
        check_simple(client.infer("simple", simple_inputs()))
    finally:
        client.close()


def test_ping_flood_gets_goaway(h2_available, streams_server):
    assert_ping_flood_gets_goaway(streams_server)


def test_ping_flood_gets_goaway_with_default_flags(h2_available, default_server):
    """The keepalive enforcement must be on in a server started without keepalive flags
    (min interval 500 ms, 2 strikes)."""
    assert_ping_flood_gets_goaway(default_server)


@pytest.mark.parametrize("keepalive_ms", [2000, 10000])
def test_keepalive_clients_keep_working(streams_server, keepalive_ms):
    """tritonclient with keepalive (pinging every 2 s while idle, or the usual 10 s) against the
    strict ping policy: every call succeeds."""
    server = streams_server
    options = grpcclient.KeepAliveOptions(
        keepalive_time_ms=keepalive_ms,
        keepalive_timeout_ms=20000,
        keepalive_permit_without_calls=True,
        http2_max_pings_without_data=0,
    )
    client = grpcclient.InferenceServerClient(server.url, keepalive_options=options)
    try:
        for _ in range(2):
            check_simple(client.infer("simple", simple_inputs()))
            time.sleep(2.5)  # idle: at 2 s the client pings with no call active
        result, error = stream_once(client)
        assert error is None, error
        check_simple(result)
        assert client.is_server_ready()
    finally:
        client.close()
