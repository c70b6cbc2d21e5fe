"""Request tracing: Triton's settings, its trace file, and OpenTelemetry spans that reach a
real OTLP/HTTP receiver with the client's trace id.

* TraceSetting updates, global and per model, side by side with the real Triton 2.51 over
  gRPC: the same settings back, or the same status and text (the file path apart: each server
  writes its own).
* ``mode=triton``: the file is Triton's JSON array, with these timestamps in order:
  REQUEST_START, QUEUE_START, COMPUTE_START, COMPUTE_INPUT_END, COMPUTE_OUTPUT_START,
  COMPUTE_END, REQUEST_END. ``rate`` and ``count`` sample as Triton's do, the count runs down,
  ``TENSORS`` adds the inputs, and ``log_frequency`` splits the file. Both process models.
* ``mode=opentelemetry``: an OTLP/HTTP receiver on loopback decodes the protobuf export
  (opentelemetry-proto's own messages). The client sends a W3C ``traceparent`` in gRPC
  metadata and as an HTTP header; the server's spans carry the client's trace id, the root's
  parent is the client's span, and the resource attributes are the configured ones. A request
  refused before it reaches the engine is not traced, as in Triton. Both process models.
"""

from __future__ import annotations

import http.server
import json
import threading

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from support.server_process import CONFORMANCE_REPO, ServerProcess, free_port
from support.traces import TIMESTAMPS, traces_by_id

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_SPAN}-01"


def _grpc_inputs(value: int = 1):
    a = np.full((1, 16), value, dtype=np.int32)
    ins = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"), grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
    ins[0].set_data_from_numpy(a)
    ins[1].set_data_from_numpy(a)
    return ins


def _http_inputs():
    a = np.ones((1, 16), dtype=np.int32)
    ins = [httpclient.InferInput("INPUT0", [1, 16], "INT32"), httpclient.InferInput("INPUT1", [1, 16], "INT32")]
    ins[0].set_data_from_numpy(a)
    ins[1].set_data_from_numpy(a)
    return ins


# ----------------------------------------------------------------------------- settings
UPDATES = [
    ("", {"trace_rate": "abc"}),
    ("", {"trace_rate": "0"}),  # kept while the level is OFF
    ("", {"trace_level": ["TIMESTAMPS"]}),  # refused with a rate of 0
    ("", {"trace_count": "-2"}),
    ("", {"log_frequency": "x"}),
    ("", {"trace_level": ["OFF", "TIMESTAMPS"]}),
    ("", {"trace_level": ["BOGUS"]}),
    ("", {"unknown_key": "1"}),
    ("", {"trace_mode": "opentelemetry"}),
    ("", {"trace_file": "/tmp/elsewhere.json"}),
    ("", {"trace_rate": "7", "trace_level": ["TIMESTAMPS"]}),
    ("simple", {"trace_rate": "3"}),
    ("simple", {}),
    ("", {"trace_count": "5"}),
    ("simple", {"trace_rate": None}),
    ("no_such_model", {"trace_rate": "5"}),
    ("", {"trace_level": ["OFF"]}),
]


def _apply(client, updates) -> list:
    seen = []
    for model, settings in updates:
        try:
            r = client.update_trace_settings(model_name=model or None, settings=settings, as_json=True)
            values = {k: v.get("value", []) for k, v in r["settings"].items() if k != "trace_file"}
            seen.append(("ok", sorted(values.items())))
        except InferenceServerException as e:
            seen.append((e.status(), e.message()))
    return seen


@pytest.mark.slow
def test_trace_settings_answer_as_tritons(tritonserver_path, tmp_path):
    from support.reference_triton import start_tritonserver, stop_tritonserver, write_python_backend_repository

    repo = tmp_path / "triton_repo"
    write_python_backend_repository(repo, models=("simple",))
    ports = [free_port() for _ in range(3)]
    args = ["--trace-config=triton,file=" + str(tmp_path / "triton.json"), "--trace-config=level=OFF"]
    triton = start_tritonserver(repo, *ports, extra_args=args, log_path=tmp_path / "triton.log")
    try:
        theirs = _apply(grpcclient.InferenceServerClient(f"127.0.0.1:{ports[0]}"), UPDATES)
    finally:
        stop_tritonserver(triton)
    ours_args = ["--trace-config=triton,file=" + str(tmp_path / "ours.json"), "--trace-config=level=OFF"]
    with ServerProcess([CONFORMANCE_REPO], *ours_args, log_path=tmp_path / "s.log") as s:
        ours = _apply(grpcclient.InferenceServerClient(s.url), UPDATES)
    for (model, settings), t, o in zip(UPDATES, theirs, ours):
        assert o == t, (model, settings)


def test_http_trace_setting_refusals(tmp_path):
    with ServerProcess([CONFORMANCE_REPO], log_path=tmp_path / "s.log") as s:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{s.http_port}")
        assert client.get_trace_settings()["trace_level"] == ["OFF"]
        with pytest.raises(InferenceServerException) as e:
            client.update_trace_settings(settings={"trace_rate": "0", "trace_level": ["TIMESTAMPS"]})
        assert e.value.status() == "400"
        with pytest.raises(InferenceServerException) as e:
            client.update_trace_settings(settings={"trace_file": "/tmp/x"})
        assert e.value.status() == "501"
        with pytest.raises(InferenceServerException) as e:
            client.update_trace_settings(model_name="no_such_model", settings={"trace_rate": "2"})
        assert e.value.message() == "Request for unknown model : no_such_model"
        got = client.update_trace_settings(model_name="simple", settings={"trace_level": ["TIMESTAMPS"]})
        assert got["trace_level"] == ["TIMESTAMPS"]
        assert client.get_trace_settings()["trace_level"] == ["OFF"]  # the global one is untouched


# ----------------------------------------------------------------------------- triton mode
@pytest.mark.parametrize("processes", ["1", "2"])
def test_triton_trace_file(tmp_path, processes):
    path = tmp_path / "trace.json"
    args = [f"--trace-config=triton,file={path}", "--trace-config=level=TIMESTAMPS", "--trace-config=rate=2"]
    s = ServerProcess([CONFORMANCE_REPO], *args, "--frontend-processes", processes, log_path=tmp_path / "s.log")
    s.start()
    try:
        client = grpcclient.InferenceServerClient(s.url)
        for i in range(6):
            client.infer("simple", _grpc_inputs(i), request_id=f"req-{i}")
        # count: 1 more trace, then none (and the count runs down to 0)
        client.update_trace_settings(settings={"trace_count": "1", "trace_rate": "1"})
        for i in range(6, 9):
            client.infer("simple", _grpc_inputs(i), request_id=f"req-{i}")
        left = client.get_trace_settings(as_json=True)["settings"]["trace_count"]["value"]
        assert left == ["0"]
        # TENSORS for one model of its own, rate 1, then off again
        client.update_trace_settings(model_name="simple", settings={"trace_level": ["TENSORS"], "trace_count": "1"})
        client.infer("simple", _grpc_inputs(42), request_id="req-tensors")
    finally:
        assert s.stop() == 0
    traces = traces_by_id(json.loads(path.read_text()))
    ids = [t["head"]["request_id"] for t in traces.values()]
    # rate 2: the 2nd, 4th, 6th request; then the one count allowed; then the TENSORS one
    assert ids == ["req-1", "req-3", "req-5", "req-6", "req-tensors"], ids
    for t in traces.values():
        assert [x["name"] for x in t["timestamps"]] == TIMESTAMPS
        ns = [x["ns"] for x in t["timestamps"]]
        assert ns == sorted(ns) and ns[0] > 0
        assert t["head"]["model_name"] == "simple" and t["head"]["model_version"] == 1
    tensors = traces[max(traces)]["tensors"]
    assert {x["tensor"]["name"] for x in tensors} == {"INPUT0", "INPUT1"}
    assert tensors[0]["activity"] == "TENSOR_QUEUE_INPUT"
    assert tensors[0]["tensor"]["data"] == ",".join(["42"] * 16)
    assert tensors[0]["tensor"]["shape"] == "1,16" and tensors[0]["tensor"]["dtype"] == "INT32"


def test_log_frequency_closes_a_file_every_n_traces(tmp_path):
    path = tmp_path / "trace.json"
    args = [f"--trace-config=triton,file={path}", "--trace-config=triton,log-frequency=2"]
    s = ServerProcess(
        [CONFORMANCE_REPO], *args, "--trace-level=TIMESTAMPS", "--trace-rate=1", log_path=tmp_path / "s.log"
    )
    s.start()
    try:
        client = grpcclient.InferenceServerClient(s.url)
        for i in range(5):
            client.infer("simple", _grpc_inputs(i))
    finally:
        assert s.stop() == 0
    files = sorted(p.name for p in tmp_path.glob("trace.json.*"))
    assert files == ["trace.json.0", "trace.json.1", "trace.json.2"]
    counts = [len(traces_by_id(json.loads((tmp_path / f).read_text()))) for f in files]
    assert counts == [2, 2, 1]


# ----------------------------------------------------------------------------- OpenTelemetry
class Receiver:
    """An OTLP/HTTP trace receiver: POST /v1/traces, protobuf body, decoded with
    opentelemetry-proto's ExportTraceServiceRequest."""

    def __init__(self):
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

        self.requests: list = []
        received = self.requests

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                message = trace_service_pb2.ExportTraceServiceRequest()
                message.ParseFromString(body)
                received.append((self.path, self.headers.get("Content-Type"), message))
                reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def spans(self) -> list:
        out = []
        for _, _, message in self.requests:
            for rs in message.resource_spans:
                attrs = {a.key: a.value.string_value for a in rs.resource.attributes}
                for ss in rs.scope_spans:
                    out.extend((attrs, span) for span in ss.spans)
        return out

    def close(self):
        self.server.shutdown()


@pytest.mark.parametrize("processes", ["1", "2"])
def test_opentelemetry_spans_reach_the_collector_with_the_clients_trace(tmp_path, processes):
    receiver = Receiver()
    args = [
        "--trace-config=mode=opentelemetry",
        f"--trace-config=opentelemetry,url={receiver.url}",
        "--trace-config=opentelemetry,resource=service.name=fpgaserve-test",
        "--trace-config=opentelemetry,resource=site=T2_US_Test",
        "--trace-config=level=TIMESTAMPS",
        "--trace-config=rate=1",
    ]
    s = ServerProcess([CONFORMANCE_REPO], *args, "--frontend-processes", processes, log_path=tmp_path / "s.log")
    s.start()
    try:
        grpc = grpcclient.InferenceServerClient(s.url)
        grpc.infer("simple", _grpc_inputs(), request_id="grpc-1", headers={"traceparent": TRACEPARENT})
        http_client = httpclient.InferenceServerClient(f"127.0.0.1:{s.http_port}")
        other = f"00-{'1' * 32}-{'2' * 16}-01"
        http_client.infer("simple", _http_inputs(), request_id="http-1", headers={"traceparent": other})
        grpc.infer("simple", _grpc_inputs(), request_id="no-parent")
        bad = grpcclient.InferInput("INPUT0", [1, 16], "INT32")
        bad.set_data_from_numpy(np.ones((1, 16), dtype=np.int32))
        with pytest.raises(InferenceServerException):
            grpc.infer("simple", [bad, bad])  # refused before it reaches the engine: no trace
    finally:
        assert s.stop() == 0  # the SDK flushes at shutdown
        receiver.close()
    assert receiver.requests, "no OTLP export arrived"
    assert all(path == "/v1/traces" and ctype == "application/x-protobuf" for path, ctype, _ in receiver.requests)
    spans = receiver.spans()
    assert {a["service.name"] for a, _ in spans} == {"fpgaserve-test"}
    assert {a["site"] for a, _ in spans} == {"T2_US_Test"}
    roots = [sp for _, sp in spans if sp.name == "InferRequest"]
    assert len(roots) == 3
    by_trace = {sp.trace_id.hex(): sp for sp in roots}
    assert by_trace[TRACE_ID].parent_span_id.hex() == PARENT_SPAN  # the client's span is the parent
    assert by_trace["1" * 32].parent_span_id.hex() == "2" * 16
    orphan = [sp for sp in roots if sp.trace_id.hex() not in (TRACE_ID, "1" * 32)]
    assert len(orphan) == 1 and not orphan[0].parent_span_id  # a new trace when none was sent
    for root in roots:
        model = [sp for _, sp in spans if sp.parent_span_id == root.span_id]
        assert [sp.name for sp in model] == ["simple"]
        attrs = {a.key: a.value for a in model[0].attributes}
        assert attrs["triton.model_name"].string_value == "simple"
        assert attrs["triton.model_version"].int_value == 1
        assert [e.name for e in model[0].events] == ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
        compute = [sp for _, sp in spans if sp.parent_span_id == model[0].span_id]
        assert [sp.name for sp in compute] == ["compute"]
        assert [e.name for e in compute[0].events] == TIMESTAMPS[2:6]
        assert root.start_time_unix_nano <= compute[0].start_time_unix_nano <= compute[0].end_time_unix_nano
        assert compute[0].end_time_unix_nano <= root.end_time_unix_nano
        assert model[0].trace_id == root.trace_id == compute[0].trace_id


def test_trace_config_parsing():
    from fpgaserve.server.engine.tracing import TraceConfigError, parse_trace_config

    c = parse_trace_config(
        ["mode=opentelemetry", "opentelemetry,url=localhost:4318", "rate=100", "level=TIMESTAMPS", "count=7"]
    )
    assert (c.mode, c.url, c.rate, c.level, c.count) == (
        "opentelemetry",
        "http://localhost:4318/v1/traces",  # SuperSONIC's spelling: the collector's HTTP port
        100,
        ("TIMESTAMPS",),
        7,
    )
    assert (
        parse_trace_config(["opentelemetry,url=https://c.example:4318/custom"]).url == "https://c.example:4318/custom"
    )
    assert parse_trace_config(["level=TIMESTAMPS", "level=TENSORS"]).level == ("TIMESTAMPS", "TENSORS")
    for bad in ["mode=zipkin", "rate=0", "count=-2", "level=LOUD", "triton,nope=1", "jaeger,url=x", "rate"]:
        with pytest.raises(TraceConfigError):
            parse_trace_config([bad])
