"""Every RPC of inference.GRPCInferenceService against a real fpgaserve process.

Clients: tritonclient.grpc (sync), a few through tritonclient.grpc.aio, and raw ``grpc`` with
fpgaserve's own message classes where tritonclient cannot express a case (typed
``contents``, exact response fields, the stream's per-response fields). Expected values come
from triton-protocol.md and the observed Triton 2.51 behaviour
(.tools/notes/triton-2.51-behaviour.md).
"""

from __future__ import annotations

import asyncio
import queue
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from tritonclient.utils import InferenceServerException, deserialize_bytes_tensor

from fpgaserve.protos import inference as pb
from support.server_process import BUNDLED_REPO

pytestmark = pytest.mark.timeout(120)

SERVICE = "/inference.GRPCInferenceService/"
# the models this file relies on (other engineers may add more to the shared repositories)
KNOWN_MODELS = ["facile", "simple", "simple_identity", "simple_int8", "simple_string"]


# ----------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def channel(server):
    ch = grpc.insecure_channel(server.url)
    yield ch
    ch.close()


def call(channel, method: str, request, response_cls):
    """One unary RPC with our own message classes; returns the response or raises RpcError."""
    fn = channel.unary_unary(
        SERVICE + method,
        request_serializer=type(request).SerializeToString,
        response_deserializer=response_cls.FromString,
    )
    return fn(request, timeout=30)


def rpc_error(channel, method: str, request, response_cls) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call(channel, method, request, response_cls)
    return info.value


def infer_raw(channel, request):
    return call(channel, "ModelInfer", request, pb.ModelInferResponse)


def decode(datatype: str, shape, raw: bytes) -> np.ndarray:
    if datatype == "BYTES":
        return deserialize_bytes_tensor(raw).reshape(shape)
    np_dtype = {"INT32": np.int32, "INT8": np.int8, "FP32": np.float32}[datatype]
    return np.frombuffer(raw, dtype=np_dtype).reshape(shape)


def simple_inputs(a: np.ndarray, b: np.ndarray, datatype: str = "INT32"):
    inputs = [
        grpcclient.InferInput("INPUT0", list(a.shape), datatype),
        grpcclient.InferInput("INPUT1", list(b.shape), datatype),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


def simple_request(batch: int = 1, rid: str = "", outputs=(), version: str = "") -> pb.ModelInferRequest:
    r = pb.ModelInferRequest(model_name="simple", model_version=version, id=rid)
    a = np.arange(16 * batch, dtype=np.int32).reshape(batch, 16)
    b = np.full((batch, 16), 3, dtype=np.int32)
    for name, arr in (("INPUT0", a), ("INPUT1", b)):
        t = r.inputs.add(name=name, datatype="INT32")
        t.shape.extend([batch, 16])
        r.raw_input_contents.append(arr.tobytes())
    for o in outputs:
        r.outputs.add(name=o)
    return r


def facile_reference(x: np.ndarray) -> np.ndarray:
    """What the served FACILE must return, bit for bit: the session server runs
    --fpga-mode auto, which is the numpy emulation when no card is there, bit-exact with hls4ml's
    C-simulation of the firmware: the expectation is the C-simulation itself."""
    from fpgaserve.backends.hls4ml.csim import CsimLibrary
    from fpgaserve.backends.hls4ml.project import Hls4mlProject

    lib = CsimLibrary.load(Hls4mlProject.load(Path(BUNDLED_REPO) / "facile" / "1"))
    return lib.predict(x).astype(np.float32)


def stats_of(client, model: str, version: str = ""):
    stats = client.get_inference_statistics(model, version).model_stats
    assert len(stats) == 1
    return stats[0]


# ----------------------------------------------------------------------------- health


def test_server_live_and_ready(client, channel):
    assert client.is_server_live() is True
    assert client.is_server_ready() is True
    assert call(channel, "ServerLive", pb.ServerLiveRequest(), pb.ServerLiveResponse).live is True
    assert call(channel, "ServerReady", pb.ServerReadyRequest(), pb.ServerReadyResponse).ready is True


@pytest.mark.parametrize(
    "name, version, ready",
    [
        ("simple", "", True),
        ("simple", "1", True),
        ("facile", "1", True),
        ("nonexistent", "", False),  # unknown model: OK with ready=false, not an error
        ("nonexistent", "1", False),
        ("simple", "3", False),  # unknown version: OK with ready=false
        ("", "", False),
    ],
)
def test_model_ready(client, channel, name, version, ready):
    assert client.is_model_ready(name, version) is ready
    response = call(channel, "ModelReady", pb.ModelReadyRequest(name=name, version=version), pb.ModelReadyResponse)
    assert response.ready is ready


@pytest.mark.parametrize("version", ["abc", "-1"])
def test_model_ready_bad_version_string_is_an_error(client, version):
    with pytest.raises(InferenceServerException) as info:
        client.is_model_ready("simple", version)
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    if version == "abc":
        assert info.value.message() == (
            "failed to get model version from specified version string 'abc' (details: stol), "
            "version should be an integral value > 0"
        )
    else:
        assert info.value.message() == "invalid model version specified '-1' , version should be an integral value > 0"


# ----------------------------------------------------------------------------- metadata


def test_server_metadata(client, channel):
    md = client.get_server_metadata()
    assert md.name == "triton"
    assert md.version
    extensions = list(md.extensions)
    for ext in ("model_configuration", "model_repository", "statistics", "system_shared_memory"):
        assert ext in extensions
    assert "cuda_shared_memory" not in extensions
    assert len(set(extensions)) == len(extensions)
    raw = call(channel, "ServerMetadata", pb.ServerMetadataRequest(), pb.ServerMetadataResponse)
    assert raw.name == "triton" and list(raw.extensions) == extensions


@pytest.mark.parametrize(
    "model, platform, inputs, outputs",
    [
        (
            "simple",
            "onnxruntime_onnx",
            [("INPUT0", "INT32", [-1, 16]), ("INPUT1", "INT32", [-1, 16])],
            [("OUTPUT0", "INT32", [-1, 16]), ("OUTPUT1", "INT32", [-1, 16])],
        ),
        (
            "simple_int8",
            "onnxruntime_onnx",
            [("INPUT0", "INT8", [-1, 16]), ("INPUT1", "INT8", [-1, 16])],
            [("OUTPUT0", "INT8", [-1, 16]), ("OUTPUT1", "INT8", [-1, 16])],
        ),
        (
            "simple_string",
            "numpy",
            [("INPUT0", "BYTES", [-1, 16]), ("INPUT1", "BYTES", [-1, 16])],
            [("OUTPUT0", "BYTES", [-1, 16]), ("OUTPUT1", "BYTES", [-1, 16])],
        ),
        ("simple_identity", "numpy", [("INPUT0", "BYTES", [-1, -1])], [("OUTPUT0", "BYTES", [-1, -1])]),
        ("facile", "hls4ml", [("input", "FP32", [-1, 47])], [("output/BiasAdd", "FP32", [-1, 1])]),
    ],
)
@pytest.mark.parametrize("version", ["", "1"])
def test_model_metadata(client, model, platform, inputs, outputs, version):
    md = client.get_model_metadata(model, version)
    assert md.name == model
    assert list(md.versions) == ["1"]
    assert md.platform == platform
    assert [(t.name, t.datatype, list(t.shape)) for t in md.inputs] == inputs
    assert [(t.name, t.datatype, list(t.shape)) for t in md.outputs] == outputs


def test_model_metadata_as_json(client):
    md = client.get_model_metadata("simple", as_json=True)
    assert md["name"] == "simple" and md["versions"] == ["1"]
    # int64 shapes come back as strings in protobuf JSON
    assert md["inputs"][0] == {"name": "INPUT0", "datatype": "INT32", "shape": ["-1", "16"]}


# ----------------------------------------------------------------------------- config


def test_model_config_as_written_plus_normalizations(client):
    cfg = client.get_model_config("simple").config
    # as written in tests/models/simple/config.pbtxt
    assert cfg.name == "simple"
    assert cfg.platform == "onnxruntime_onnx"
    assert cfg.max_batch_size == 8
    assert [(t.name, t.data_type, list(t.dims)) for t in cfg.input] == [
        ("INPUT0", 8, [16]),  # TYPE_INT32 = 8
        ("INPUT1", 8, [16]),
    ]
    assert [(t.name, t.data_type, list(t.dims)) for t in cfg.output] == [("OUTPUT0", 8, [16]), ("OUTPUT1", 8, [16])]
    # Triton's normalizations
    assert cfg.version_policy.WhichOneof("policy_choice") == "latest"
    assert cfg.version_policy.latest.num_versions == 1
    assert len(cfg.instance_group) == 1
    group = cfg.instance_group[0]
    assert (group.name, group.count, group.kind) == ("simple", 1, 2)  # KIND_CPU = 2
    assert cfg.default_model_filename == "model.onnx"
    # nothing invented: no dynamic batcher when the config has none
    assert not cfg.HasField("dynamic_batching")


def test_model_config_keeps_written_instance_group(client):
    cfg = client.get_model_config("facile", "1").config
    assert cfg.name == "facile" and cfg.max_batch_size == 16384
    # written: instance_group [{count: 1, kind: KIND_MODEL}] without a name -> "<model>_<index>"
    assert [(g.name, g.count, g.kind) for g in cfg.instance_group] == [("facile_0", 1, 3)]


def test_model_config_numpy_backend(client):
    cfg = client.get_model_config("simple_identity").config
    assert cfg.backend == "numpy" and cfg.platform == ""
    assert cfg.default_model_filename == "model.py"
    assert [(t.name, t.data_type, list(t.dims)) for t in cfg.input] == [("INPUT0", 13, [-1])]  # TYPE_STRING


def test_model_config_raw_equals_tritonclient(client, channel):
    raw = call(channel, "ModelConfig", pb.ModelConfigRequest(name="simple", version="1"), pb.ModelConfigResponse)
    via_client = client.get_model_config("simple").config
    assert raw.config.SerializeToString(deterministic=True) == via_client.SerializeToString(deterministic=True)


# ----------------------------------------------------------------------------- infer


def test_infer_simple(client):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)
    result = client.infer("simple", simple_inputs(a, b), request_id="req-1")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    response = result.get_response()
    assert response.id == "req-1"
    assert response.model_name == "simple"
    assert response.model_version == "1"
    # unary responses carry no triton_final_response (only stream responses do)
    assert "triton_final_response" not in response.parameters


def test_infer_simple_batch(client):
    rng = np.random.default_rng(1)
    a = rng.integers(-1000, 1000, size=(5, 16), dtype=np.int32)
    b = rng.integers(-1000, 1000, size=(5, 16), dtype=np.int32)
    result = client.infer("simple", simple_inputs(a, b), model_version="1")
    out0 = result.as_numpy("OUTPUT0")
    assert out0.shape == (5, 16)
    np.testing.assert_array_equal(out0, a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert [list(o.shape) for o in result.get_response().outputs] == [[5, 16], [5, 16]]


def test_infer_empty_id(channel):
    response = infer_raw(channel, simple_request(rid=""))
    assert response.id == ""
    assert response.model_version == "1"


@pytest.mark.parametrize(
    "requested",
    [
        ["OUTPUT1"],
        ["OUTPUT0"],
        ["OUTPUT1", "OUTPUT0"],
        ["OUTPUT0", "OUTPUT1"],
    ],
)
def test_infer_requested_outputs_subset_and_order(client, channel, requested):
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.full((2, 16), 3, dtype=np.int32)
    expected = {"OUTPUT0": a + b, "OUTPUT1": a - b}
    outs = [grpcclient.InferRequestedOutput(n) for n in requested]
    result = client.infer("simple", simple_inputs(a, b), outputs=outs)
    for n in requested:
        np.testing.assert_array_equal(result.as_numpy(n), expected[n])
    for n in set(expected) - set(requested):
        assert result.as_numpy(n) is None

    # The wire layout: one raw_output_contents entry per output, paired by position with
    # response.outputs, in request order; never typed contents.
    response = infer_raw(channel, simple_request(batch=2, outputs=requested))
    assert [o.name for o in response.outputs] == requested
    assert len(response.raw_output_contents) == len(requested)
    for out, raw in zip(response.outputs, response.raw_output_contents):
        assert out.datatype == "INT32" and list(out.shape) == [2, 16]
        assert out.contents.ListFields() == []
        np.testing.assert_array_equal(decode(out.datatype, out.shape, raw), expected[out.name])


def test_infer_all_outputs_when_none_requested(channel):
    response = infer_raw(channel, simple_request())
    assert [o.name for o in response.outputs] == ["OUTPUT0", "OUTPUT1"]
    assert len(response.raw_output_contents) == 2


def test_infer_simple_int8_wraps(client):
    a = np.array([[100, -100, 127, -128] + [1] * 12], dtype=np.int8)
    b = np.array([[100, 100, 1, 1] + [2] * 12], dtype=np.int8)
    result = client.infer("simple_int8", simple_inputs(a, b, "INT8"))
    out0 = result.as_numpy("OUTPUT0")
    out1 = result.as_numpy("OUTPUT1")
    assert out0.dtype == np.int8
    # add/sub in int32, cast back: wraps around
    assert out0[0, :4].tolist() == [-56, 0, -128, -127]
    assert out1[0, :4].tolist() == [0, 56, 126, 127]
    assert out0[0, 4:].tolist() == [3] * 12 and out1[0, 4:].tolist() == [-1] * 12


def test_infer_simple_string(client):
    a = np.array([[str(i).encode() for i in range(16)]], dtype=object)
    b = np.array([[b"1"] * 16], dtype=object)
    inputs = simple_inputs(a, b, "BYTES")
    result = client.infer("simple_string", inputs, request_id="s")
    out0 = result.as_numpy("OUTPUT0")
    out1 = result.as_numpy("OUTPUT1")
    assert out0.shape == (1, 16)
    assert out0[0].tolist() == [str(i + 1).encode() for i in range(16)]
    assert out1[0].tolist() == [str(i - 1).encode() for i in range(16)]  # "-1", never "-1.0"


def test_infer_simple_identity_binary_safe(client):
    data = np.array([[b"he\x00llo", b"", b"x", b"\xff\xfe\x00"]], dtype=object)
    inp = grpcclient.InferInput("INPUT0", [1, 4], "BYTES")
    inp.set_data_from_numpy(data)
    result = client.infer("simple_identity", [inp])
    out = result.as_numpy("OUTPUT0")
    assert out.shape == (1, 4)
    assert out.tolist() == data.tolist()


def test_infer_simple_identity_zero_elements(channel):
    r = pb.ModelInferRequest(model_name="simple_identity")
    t = r.inputs.add(name="INPUT0", datatype="BYTES")
    t.shape.extend([1, 0])
    r.raw_input_contents.append(b"")
    response = infer_raw(channel, r)
    assert list(response.outputs[0].shape) == [1, 0]
    # a 0-byte output still gets its raw_output_contents entry
    assert list(response.raw_output_contents) == [b""]


def test_infer_facile(client):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((6, 47)).astype(np.float32)
    inp = grpcclient.InferInput("input", [6, 47], "FP32")
    inp.set_data_from_numpy(x)
    result = client.infer("facile", [inp], outputs=[grpcclient.InferRequestedOutput("output/BiasAdd")])
    y = result.as_numpy("output/BiasAdd")
    assert y.shape == (6, 1) and y.dtype == np.float32
    np.testing.assert_array_equal(y, facile_reference(x))


def test_infer_typed_contents_get_raw_outputs(channel):
    """Typed int_contents in, raw_output_contents out (Triton never writes typed outputs)."""
    r = pb.ModelInferRequest(model_name="simple", id="typed")
    for name, values in (("INPUT0", list(range(16))), ("INPUT1", [2] * 16)):
        t = r.inputs.add(name=name, datatype="INT32")
        t.shape.extend([1, 16])
        t.contents.int_contents.extend(values)
    response = infer_raw(channel, r)
    assert response.id == "typed"
    assert len(response.raw_output_contents) == 2
    for out in response.outputs:
        assert out.contents.ListFields() == []
    out0, out1 = (decode("INT32", o.shape, raw) for o, raw in zip(response.outputs, response.raw_output_contents))
    assert out0[0].tolist() == [i + 2 for i in range(16)]
    assert out1[0].tolist() == [i - 2 for i in range(16)]


def test_infer_typed_fp32_contents(channel):
    x = np.linspace(-2, 2, 2 * 47, dtype=np.float32).reshape(2, 47)
    r = pb.ModelInferRequest(model_name="facile")
    t = r.inputs.add(name="input", datatype="FP32")
    t.shape.extend([2, 47])
    t.contents.fp32_contents.extend(x.ravel().tolist())
    response = infer_raw(channel, r)
    (out,) = response.outputs
    y = decode("FP32", out.shape, response.raw_output_contents[0])
    np.testing.assert_array_equal(y, facile_reference(x))


def test_infer_typed_bytes_contents(channel):
    r = pb.ModelInferRequest(model_name="simple_string")
    for name, values in (("INPUT0", [str(i).encode() for i in range(16)]), ("INPUT1", [b"10"] * 16)):
        t = r.inputs.add(name=name, datatype="BYTES")
        t.shape.extend([1, 16])
        t.contents.bytes_contents.extend(values)
    response = infer_raw(channel, r)
    assert len(response.raw_output_contents) == 2
    out0 = decode("BYTES", response.outputs[0].shape, response.raw_output_contents[0])
    assert out0[0].tolist() == [str(i + 10).encode() for i in range(16)]
    assert response.outputs[0].contents.ListFields() == []


def test_infer_accepts_allowed_parameters(channel):
    r = simple_request(rid="p")
    r.parameters["triton_enable_empty_final_response"].bool_param = True
    r.parameters["my_flag"].bool_param = True
    r.parameters["my_int"].int64_param = 5
    r.parameters["my_str"].string_param = "x"
    r.parameters["my_double"].double_param = 0.5
    r.parameters["sequence_id"].int64_param = 5  # ignored on a model without sequence batching
    r.parameters["priority"].int64_param = 0
    response = infer_raw(channel, r)
    assert response.id == "p" and len(response.raw_output_contents) == 2


def test_async_infer(client):
    done: queue.Queue = queue.Queue()
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    client.async_infer(
        "simple", simple_inputs(a, a), lambda result, error: done.put((result, error)), request_id="async-1"
    )
    result, error = done.get(timeout=30)
    assert error is None
    assert result.get_response().id == "async-1"
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * a)


# ----------------------------------------------------------------------------- streaming


def _stream_requests():
    bad_shape = simple_request(rid="s2")
    bad_shape.inputs[0].shape[:] = [1, 15]
    bad_shape.inputs[1].shape[:] = [1, 15]
    bad_shape.raw_input_contents[0] = bad_shape.raw_input_contents[0][:60]
    bad_shape.raw_input_contents[1] = bad_shape.raw_input_contents[1][:60]
    unknown = simple_request(rid="s3")
    unknown.model_name = "nonexistent"
    bad_version = simple_request(rid="s4", version="abc")
    return [simple_request(rid="s1"), bad_shape, unknown, bad_version, simple_request(batch=2, rid="s5", version="1")]


STREAM_ERRORS = {
    "s2": "[request id: s2] unexpected shape for input 'INPUT1' for model 'simple'. Expected [-1,16], got [1,15]. "
    "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be prepended "
    "to each input shape. If you want to specify the full shape including the batch dim in your input dims "
    "config, try setting max_batch_size to zero. See the model configuration docs for more info on max_batch_size.",
    "s3": "Request for unknown model: 'nonexistent' is not found",
    "s4": "failed to get model version from specified version string 'abc' (details: stol), version should be an "
    "integral value > 0",
}


def _is_final(response) -> bool:
    p = response.parameters.get("triton_final_response")
    return p is None or (p.WhichOneof("parameter_choice") == "bool_param" and p.bool_param)


@pytest.mark.timeout(60)
def test_stream_errors_in_stream_raw(channel):
    """Raw stream: every request gets exactly one response; errors don't close the stream."""
    stream = channel.stream_stream(
        SERVICE + "ModelStreamInfer",
        request_serializer=pb.ModelInferRequest.SerializeToString,
        response_deserializer=pb.ModelStreamInferResponse.FromString,
    )
    responses = list(stream(iter(_stream_requests()), timeout=30))
    assert len(responses) == 5
    by_id = {r.infer_response.id: r for r in responses}
    assert set(by_id) == {"s1", "s2", "s3", "s4", "s5"}
    for rid, text in STREAM_ERRORS.items():
        r = by_id[rid]
        assert r.error_message == text
        assert r.infer_response.id == rid
        assert len(r.infer_response.raw_output_contents) == 0
        assert _is_final(r.infer_response)  # a missing flag means final to every client
    for rid, batch in (("s1", 1), ("s5", 2)):
        r = by_id[rid]
        assert r.error_message == ""
        ir = r.infer_response
        assert (ir.model_name, ir.model_version) == ("simple", "1")
        assert ir.parameters["triton_final_response"].bool_param is True
        out0 = decode("INT32", ir.outputs[0].shape, ir.raw_output_contents[0])
        np.testing.assert_array_equal(out0, np.arange(16 * batch, dtype=np.int32).reshape(batch, 16) + 3)


@pytest.mark.timeout(60)
def test_stream_tritonclient_survives_errors(server):
    results: queue.Queue = queue.Queue()
    c = grpcclient.InferenceServerClient(server.url)
    try:
        c.start_stream(callback=lambda result, error: results.put((result, error)))
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        c.async_stream_infer("simple", simple_inputs(a, a), request_id="t1")
        c.async_stream_infer("simple", simple_inputs(a[:, :15].copy(), a[:, :15].copy()), request_id="t2")
        c.async_stream_infer("nonexistent", simple_inputs(a, a), request_id="t3")
        c.async_stream_infer("simple", simple_inputs(a, 2 * a), request_id="t4", enable_empty_final_response=True)
        got = [results.get(timeout=30) for _ in range(4)]
    finally:
        c.stop_stream()
        c.close()
    ok = {r.get_response().id: r for r, e in got if e is None}
    errors = sorted(e.message() for r, e in got if e is not None)
    assert set(ok) == {"t1", "t4"}
    np.testing.assert_array_equal(ok["t1"].as_numpy("OUTPUT0"), 2 * a)
    np.testing.assert_array_equal(ok["t4"].as_numpy("OUTPUT1"), -a)
    for r in ok.values():
        assert r.get_response().parameters["triton_final_response"].bool_param is True
    assert errors[0] == "Request for unknown model: 'nonexistent' is not found"
    assert errors[1].startswith(
        "[request id: t2] unexpected shape for input 'INPUT1' for model 'simple'. Expected [-1,16], got [1,15]."
    )


# ----------------------------------------------------------------------------- statistics


def test_statistics_counts_are_honest(client):
    before = stats_of(client, "simple", "1")
    batch, n = 3, 4
    a = np.ones((batch, 16), dtype=np.int32)
    for _ in range(n):
        client.infer("simple", simple_inputs(a, a))
    after = stats_of(client, "simple", "1")
    assert (after.name, after.version) == ("simple", "1")
    assert after.inference_count - before.inference_count == n * batch
    assert after.execution_count - before.execution_count == n
    s0, s1 = before.inference_stats, after.inference_stats
    for field in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
        assert getattr(s1, field).count - getattr(s0, field).count == n, field
        assert getattr(s1, field).ns >= getattr(s0, field).ns, field
    assert s1.success.ns > s0.success.ns
    assert s1.fail.count == s0.fail.count
    b0 = {b.batch_size: b for b in before.batch_stats}
    b1 = {b.batch_size: b for b in after.batch_stats}
    assert [b.batch_size for b in after.batch_stats] == sorted(b1)
    prev = b0[batch].compute_infer.count if batch in b0 else 0
    assert b1[batch].compute_infer.count - prev == n
    assert b1[batch].compute_input.count - (b0[batch].compute_input.count if batch in b0 else 0) == n
    assert after.last_inference >= before.last_inference and after.last_inference > 0


def test_statistics_do_not_count_rejected_requests(client, channel):
    before = stats_of(client, "simple_int8")
    bad = simple_request(batch=9)
    bad.model_name = "simple_int8"
    with pytest.raises(grpc.RpcError):
        infer_raw(channel, bad)
    after = stats_of(client, "simple_int8")
    assert after.inference_stats.fail.count == before.inference_stats.fail.count
    assert after.inference_stats.success.count == before.inference_stats.success.count
    assert after.execution_count == before.execution_count


def test_statistics_all_models(client, channel):
    stats = client.get_inference_statistics().model_stats
    names = [s.name for s in stats]
    assert set(KNOWN_MODELS) <= set(names)
    assert names == sorted(names) and len(set(names)) == len(names)
    for s in stats:
        assert s.version.isdigit()  # numeric: an empty version crashes perf_analyzer
    raw = call(channel, "ModelStatistics", pb.ModelStatisticsRequest(name=""), pb.ModelStatisticsResponse)
    assert [s.name for s in raw.model_stats] == names


def test_statistics_as_json(client):
    stats = client.get_inference_statistics("simple", as_json=True)
    (entry,) = stats["model_stats"]
    assert entry["name"] == "simple" and entry["version"] == "1"
    assert "inference_stats" in entry


# ----------------------------------------------------------------------------- repository


def test_repository_index(client, channel):
    index = client.get_model_repository_index().models
    rows = {m.name: (m.version, m.state, m.reason) for m in index}
    names = [m.name for m in index]
    assert names == sorted(names)
    for n in KNOWN_MODELS:
        assert rows[n] == ("1", "READY", "")
    ready = call(channel, "RepositoryIndex", pb.RepositoryIndexRequest(ready=True), pb.RepositoryIndexResponse)
    assert set(KNOWN_MODELS) <= {m.name for m in ready.models}
    assert all(m.state == "READY" for m in ready.models)


def test_repository_index_rejects_repository_name(channel):
    err = rpc_error(
        channel, "RepositoryIndex", pb.RepositoryIndexRequest(repository_name="nope"), pb.RepositoryIndexResponse
    )
    assert err.code() == grpc.StatusCode.UNIMPLEMENTED
    assert err.details() == "'repository_name' specification is not supported"


# ----------------------------------------------------------------------------- log / trace


def test_log_settings_get(client):
    settings = client.get_log_settings(as_json=True)["settings"]
    assert set(settings) == {"log_file", "log_info", "log_warning", "log_error", "log_verbose_level", "log_format"}
    assert settings["log_info"] == {"bool_param": True}
    assert settings["log_format"] == {"string_param": "default"}


def test_log_settings_set_and_read_back(client, channel):
    try:
        updated = client.update_log_settings({"log_verbose_level": 2})
        assert updated.settings["log_verbose_level"].uint32_param == 2
        assert client.get_log_settings().settings["log_verbose_level"].uint32_param == 2
    finally:
        restored = client.update_log_settings({"log_verbose_level": 0})
    assert restored.settings["log_verbose_level"].uint32_param == 0
    # raw: an empty request is a read
    raw = call(channel, "LogSettings", pb.LogSettingsRequest(), pb.LogSettingsResponse)
    assert raw.settings["log_verbose_level"].uint32_param == 0


def test_log_settings_bad_key(client):
    with pytest.raises(InferenceServerException) as info:
        client.update_log_settings({"no_such_setting": True})
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "no_such_setting" in info.value.message()
    assert "no_such_setting" not in client.get_log_settings(as_json=True)["settings"]


@pytest.mark.parametrize("model", [None, "simple"])
def test_trace_settings_off(client, model):
    settings = client.get_trace_settings(model_name=model).settings
    assert list(settings["trace_level"].value) == ["OFF"]
    assert list(settings["trace_rate"].value) == ["1000"]
    assert list(settings["trace_count"].value) == ["-1"]


def test_trace_settings_unknown_model(client):
    with pytest.raises(InferenceServerException) as info:
        client.get_trace_settings(model_name="nonexistent")
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert info.value.message() == "Request for unknown model : nonexistent"


def test_trace_settings_of_one_model_and_back(client):
    # (tests/engine/test_tracing.py traces requests; here the shared server's settings round-trip)
    try:
        got = client.update_trace_settings(
            model_name="simple", settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "5"}
        ).settings
        assert list(got["trace_level"].value) == ["TIMESTAMPS"] and list(got["trace_rate"].value) == ["5"]
        assert list(client.get_trace_settings().settings["trace_level"].value) == ["OFF"]
    finally:  # null: the model follows the global settings again
        client.update_trace_settings(model_name="simple", settings={"trace_level": None, "trace_rate": None})
    back = client.get_trace_settings(model_name="simple").settings
    assert list(back["trace_level"].value) == ["OFF"] and list(back["trace_rate"].value) == ["1000"]


# ----------------------------------------------------------------------------- CUDA shm


def test_cuda_shared_memory(client, channel):
    # There is no GPU: nothing is ever registered. Status/unregister answer like Triton with
    # no regions (clients unregister everything first); registering is refused.
    assert list(client.get_cuda_shared_memory_status().regions) == []
    client.unregister_cuda_shared_memory()
    err = rpc_error(
        channel, "CudaSharedMemoryStatus", pb.CudaSharedMemoryStatusRequest(name="x"), pb.CudaSharedMemoryStatusResponse
    )
    assert err.code() == grpc.StatusCode.NOT_FOUND
    assert err.details() == "Unable to find cuda shared memory region: 'x'"
    err = rpc_error(
        channel,
        "CudaSharedMemoryRegister",
        pb.CudaSharedMemoryRegisterRequest(name="r", raw_handle=b"\0" * 64, device_id=0, byte_size=64),
        pb.CudaSharedMemoryRegisterResponse,
    )
    assert err.code() == grpc.StatusCode.UNIMPLEMENTED


# ----------------------------------------------------------------------------- aio client


@pytest.mark.timeout(60)
def test_aio_client(server):
    async def main():
        c = aioclient.InferenceServerClient(server.url)
        try:
            assert await c.is_server_live()
            assert await c.is_server_ready()
            assert await c.is_model_ready("simple")
            assert not await c.is_model_ready("nonexistent")
            md = await c.get_model_metadata("simple")
            assert [list(t.shape) for t in md.inputs] == [[-1, 16], [-1, 16]]
            cfg = await c.get_model_config("simple")
            assert cfg.config.max_batch_size == 8

            a = np.arange(32, dtype=np.int32).reshape(2, 16)
            inputs = [
                aioclient.InferInput("INPUT0", [2, 16], "INT32"),
                aioclient.InferInput("INPUT1", [2, 16], "INT32"),
            ]
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(a)
            results = await asyncio.gather(*(c.infer("simple", inputs, request_id=f"aio-{i}") for i in range(8)))
            assert sorted(r.get_response().id for r in results) == sorted(f"aio-{i}" for i in range(8))
            for r in results:
                np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), 2 * a)

            with pytest.raises(InferenceServerException) as info:
                await c.get_model_metadata("nonexistent")
            assert info.value.message() == "Request for unknown model: 'nonexistent' is not found"

            async def requests():
                for i, mdl in enumerate(["simple", "nonexistent", "simple"]):
                    yield {"model_name": mdl, "inputs": inputs, "request_id": f"st{i}"}

            seen = []
            async for result, error in c.stream_infer(requests()):
                if error is None:
                    seen.append(result.get_response().id)
                else:
                    seen.append(error.message())
                if len(seen) == 3:
                    break
            assert sorted(seen) == sorted(["st0", "st2", "Request for unknown model: 'nonexistent' is not found"])
        finally:
            await c.close()

    asyncio.run(main())


def test_classification_extension_top_k(client):
    """OUTPUT0 = IN0 + IN1 classified top-3: b"value:index", highest first, per batch item."""
    in0 = np.array([[3, 9, -2, 7, 0, 11, 5, 5, 1, 8, -6, 4, 2, 10, 6, -1]] * 2, dtype=np.int32)
    in0[1] = in0[1][::-1]
    in1 = np.ones((2, 16), dtype=np.int32)
    inputs = [grpcclient.InferInput("INPUT0", [2, 16], "INT32"), grpcclient.InferInput("INPUT1", [2, 16], "INT32")]
    inputs[0].set_data_from_numpy(in0)
    inputs[1].set_data_from_numpy(in1)
    result = client.infer("simple", inputs, outputs=[grpcclient.InferRequestedOutput("OUTPUT0", class_count=3)])
    got = result.as_numpy("OUTPUT0")
    assert got.shape == (2, 3)
    assert got[0].tolist() == [b"12:5", b"11:13", b"10:1"]
    assert got[1].tolist() == [b"12:10", b"11:2", b"10:14"]
