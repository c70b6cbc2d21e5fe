"""The error table of triton-protocol.md §5, row by row: exact gRPC status code and text.

Texts are Triton 2.51's as observed (.tools/notes/triton-2.51-behaviour.md), which refines
§5 in a few places (ModelStatistics uses its own texts, an extra input gives the input-count
text, ``-1`` as the batch dim is a batch mismatch). Rows marked ‡ in the notes carry the
core's ``[request id: <id>] `` prefix (``<id_unknown>`` for an empty id); every ModelInfer
row runs with and without an id, so the prefix must appear exactly where Triton puts it.

Deliberate deviation: duplicate requested outputs are rejected (newer Triton and
qa/L0_grpc's python_unit_test require it; 2.51 silently deduplicated them).

Requests are built with fpgaserve's own message classes and sent over raw gRPC, because
tritonclient cannot express most of these malformed requests.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from fpgaserve.protos import inference as pb

pytestmark = pytest.mark.timeout(120)

SERVICE = "/inference.GRPCInferenceService/"
INVALID = grpc.StatusCode.INVALID_ARGUMENT
NOT_FOUND = grpc.StatusCode.NOT_FOUND
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE
INTERNAL = grpc.StatusCode.INTERNAL
UNIMPLEMENTED = grpc.StatusCode.UNIMPLEMENTED

RESPONSES = {
    "ModelInfer": pb.ModelInferResponse,
    "ModelMetadata": pb.ModelMetadataResponse,
    "ModelConfig": pb.ModelConfigResponse,
    "ModelStatistics": pb.ModelStatisticsResponse,
    "ModelReady": pb.ModelReadyResponse,
    "RepositoryIndex": pb.RepositoryIndexResponse,
    "RepositoryModelLoad": pb.RepositoryModelLoadResponse,
    "RepositoryModelUnload": pb.RepositoryModelUnloadResponse,
    "SystemSharedMemoryRegister": pb.SystemSharedMemoryRegisterResponse,
}

STOL = "failed to get model version from specified version string 'abc' (details: stol), version should be an integral value > 0"
NEGATIVE = "invalid model version specified '-1' , version should be an integral value > 0"
SHAPE_NOTE = (
    " NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be "
    "prepended to each input shape. If you want to specify the full shape including the batch dim in "
    "your input dims config, try setting max_batch_size to zero. See the model configuration docs for "
    "more info on max_batch_size."
)
RESERVED = (
    "parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys "
    "starting with 'triton_' are allowed: triton_enable_empty_final_response"
)
NOT_EXPLICIT = "explicit model load / unload is not allowed if polling is enabled"
MISSING_SHM_KEY = f"/fpgaserve_test_missing_{uuid.uuid4().hex[:12]}"


# ----------------------------------------------------------------------------- request builders


def infer_req(
    rid: str = "",
    model: str = "simple",
    version: str = "",
    names=("INPUT0", "INPUT1"),
    shapes=None,
    dtypes=None,
    raws=None,
    outputs=(),
) -> pb.ModelInferRequest:
    """A simple-style request; raw contents sized to each shape unless ``raws`` is given."""
    r = pb.ModelInferRequest(model_name=model, model_version=version, id=rid)
    shapes = shapes or [[1, 16]] * len(names)
    dtypes = dtypes or ["INT32"] * len(names)
    for name, shape, dt in zip(names, shapes, dtypes):
        t = r.inputs.add(name=name, datatype=dt)
        t.shape.extend(shape)
    if raws is None:
        raws = []
        for shape in shapes:
            count = int(np.prod(shape)) if all(d >= 0 for d in shape) else 16
            raws.append(np.arange(count, dtype=np.int32).tobytes())
    r.raw_input_contents.extend(raws)
    for o in outputs:
        r.outputs.add(name=o)
    return r


def with_params(r: pb.ModelInferRequest, **params) -> pb.ModelInferRequest:
    for key, (kind, value) in params.items():
        setattr(r.parameters[key], kind, value)
    return r


def typed(rid: str, raw_also: bool = False) -> pb.ModelInferRequest:
    r = pb.ModelInferRequest(model_name="simple", id=rid)
    for name in ("INPUT0", "INPUT1"):
        t = r.inputs.add(name=name, datatype="INT32")
        t.shape.extend([1, 16])
        t.contents.int_contents.extend(range(16))
    if raw_also:
        r.raw_input_contents.append(np.zeros(16, np.int32).tobytes())
    return r


def raw_and_input1_typed(rid: str) -> pb.ModelInferRequest:
    r = infer_req(rid)
    r.inputs[1].contents.int_contents.extend(range(16))
    return r


def typed_wrong_field(rid: str) -> pb.ModelInferRequest:
    r = typed(rid)
    r.inputs[0].contents.ClearField("int_contents")
    r.inputs[0].contents.fp32_contents.extend([1.0] * 16)
    return r


def typed_count(rid: str, n: int) -> pb.ModelInferRequest:
    r = typed(rid)
    del r.inputs[0].contents.int_contents[:]
    r.inputs[0].contents.int_contents.extend(range(n))
    return r


def bytes_raw(items) -> bytes:
    return b"".join(len(x).to_bytes(4, "little") + x for x in items)


def string_req(rid: str, input0: bytes) -> pb.ModelInferRequest:
    good = bytes_raw([b"1"] * 16)
    return infer_req(rid, model="simple_string", dtypes=["BYTES", "BYTES"], raws=[input0, good])


def output_param(rid: str, key: str, kind: str, value) -> pb.ModelInferRequest:
    r = infer_req(rid, outputs=["OUTPUT0"])
    setattr(r.outputs[0].parameters[key], kind, value)
    return r


# ----------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class Row:
    situation: str
    method: str
    build: Callable[[str], object]  # request id -> request (ignored by non-infer RPCs)
    code: grpc.StatusCode
    message: str  # "{p}" stands for the "[request id: ...] " prefix (‡ rows)


I = "ModelInfer"  # noqa: E741  (short: the table below names it in almost every row)
R = [
    # --- model and version resolution
    Row(
        "unknown model: ModelInfer",
        I,
        lambda rid: infer_req(rid, model="nonexistent"),
        NOT_FOUND,
        "Request for unknown model: 'nonexistent' is not found",
    ),
    Row(
        "unknown model: ModelMetadata",
        "ModelMetadata",
        lambda _: pb.ModelMetadataRequest(name="nonexistent"),
        NOT_FOUND,
        "Request for unknown model: 'nonexistent' is not found",
    ),
    Row(
        "unknown model: ModelConfig",
        "ModelConfig",
        lambda _: pb.ModelConfigRequest(name="nonexistent", version="1"),
        NOT_FOUND,
        "Request for unknown model: 'nonexistent' is not found",
    ),
    Row(
        "unknown model: ModelStatistics (2.51 text)",
        "ModelStatistics",
        lambda _: pb.ModelStatisticsRequest(name="nonexistent"),
        INVALID,
        "requested model 'nonexistent' is not available",
    ),
    Row(
        "empty model name: ModelInfer",
        I,
        lambda rid: infer_req(rid, model=""),
        NOT_FOUND,
        "Request for unknown model: '' is not found",
    ),
    Row(
        "unknown model wins over triton_ parameter",
        I,
        lambda rid: with_params(infer_req(rid, model="nonexistent"), triton_foo=("bool_param", True)),
        NOT_FOUND,
        "Request for unknown model: 'nonexistent' is not found",
    ),
    Row(
        "unknown version: ModelInfer",
        I,
        lambda rid: infer_req(rid, version="3"),
        NOT_FOUND,
        "Request for unknown model: 'simple' version 3 is not found",
    ),
    Row(
        "unknown version 0: ModelInfer",
        I,
        lambda rid: infer_req(rid, version="0"),
        NOT_FOUND,
        "Request for unknown model: 'simple' version 0 is not found",
    ),
    Row(
        "unknown version: ModelMetadata",
        "ModelMetadata",
        lambda _: pb.ModelMetadataRequest(name="simple", version="3"),
        NOT_FOUND,
        "Request for unknown model: 'simple' version 3 is not found",
    ),
    Row(
        "unknown version: ModelConfig",
        "ModelConfig",
        lambda _: pb.ModelConfigRequest(name="simple", version="3"),
        NOT_FOUND,
        "Request for unknown model: 'simple' version 3 is not found",
    ),
    Row(
        "unknown version: ModelStatistics (2.51 text)",
        "ModelStatistics",
        lambda _: pb.ModelStatisticsRequest(name="simple", version="3"),
        INVALID,
        "requested model version is not available for model 'simple'",
    ),
    Row("non-integer version: ModelInfer", I, lambda rid: infer_req(rid, version="abc"), INVALID, STOL),
    Row(
        "non-integer version: ModelMetadata",
        "ModelMetadata",
        lambda _: pb.ModelMetadataRequest(name="simple", version="abc"),
        INVALID,
        STOL,
    ),
    Row(
        "non-integer version: ModelConfig",
        "ModelConfig",
        lambda _: pb.ModelConfigRequest(name="simple", version="abc"),
        INVALID,
        STOL,
    ),
    Row(
        "non-integer version: ModelStatistics",
        "ModelStatistics",
        lambda _: pb.ModelStatisticsRequest(name="simple", version="abc"),
        INVALID,
        STOL,
    ),
    Row(
        "non-integer version: ModelReady",
        "ModelReady",
        lambda _: pb.ModelReadyRequest(name="simple", version="abc"),
        INVALID,
        STOL,
    ),
    Row("negative version: ModelInfer", I, lambda rid: infer_req(rid, version="-1"), INVALID, NEGATIVE),
    Row(
        "negative version: ModelMetadata",
        "ModelMetadata",
        lambda _: pb.ModelMetadataRequest(name="simple", version="-1"),
        INVALID,
        NEGATIVE,
    ),
    # --- inputs and outputs by name
    Row(
        "unknown input (count matches)",
        I,
        lambda rid: infer_req(rid, names=("INPUT0", "INPUTX")),
        INVALID,
        "unexpected inference input 'INPUTX' for model 'simple'",
    ),
    Row(
        "unknown extra input ‡",
        I,
        lambda rid: infer_req(rid, names=("INPUT0", "INPUT1", "INPUT2")),
        INVALID,
        "{p}expected 2 inputs but got 3 inputs for model 'simple'. Got input(s) ['INPUT2','INPUT1','INPUT0'], "
        "but missing required input(s) ]. Please provide all required input(s).",
    ),
    Row(
        "unknown input only ‡",
        I,
        lambda rid: infer_req(rid, names=("INPUTX",)),
        INVALID,
        "{p}expected 2 inputs but got 1 inputs for model 'simple'. Got input(s) ['INPUTX'], "
        "but missing required input(s) ['INPUT0','INPUT1']. Please provide all required input(s).",
    ),
    Row(
        "unknown output",
        I,
        lambda rid: infer_req(rid, outputs=["OUTPUTX"]),
        INVALID,
        "unexpected inference output 'OUTPUTX' for model 'simple'",
    ),
    Row(
        "unknown output wins over missing input",
        I,
        lambda rid: infer_req(rid, names=("INPUT0",), outputs=["OUTPUTX"]),
        INVALID,
        "unexpected inference output 'OUTPUTX' for model 'simple'",
    ),
    Row(
        "duplicate input ‡",
        I,
        lambda rid: infer_req(rid, names=("INPUT0", "INPUT0", "INPUT1")),
        INVALID,
        "{p}input 'INPUT0' already exists in request",
    ),
    Row(
        "duplicate input without the other ‡",
        I,
        lambda rid: infer_req(rid, names=("INPUT0", "INPUT0")),
        INVALID,
        "{p}input 'INPUT0' already exists in request",
    ),
    Row(
        "duplicate output ‡ (deliberate: newer Triton)",
        I,
        lambda rid: infer_req(rid, outputs=["OUTPUT0", "OUTPUT0"]),
        INVALID,
        "{p}output 'OUTPUT0' already exists in request",
    ),
    Row(
        "missing input ‡",
        I,
        lambda rid: infer_req(rid, names=("INPUT0",)),
        INVALID,
        "{p}expected 2 inputs but got 1 inputs for model 'simple'. Got input(s) ['INPUT0'], "
        "but missing required input(s) ['INPUT1']. Please provide all required input(s).",
    ),
    Row(
        "no inputs ‡",
        I,
        lambda rid: infer_req(rid, names=()),
        INVALID,
        "{p}expected 2 inputs but got 0 inputs for model 'simple'. Got input(s) [], "
        "but missing required input(s) ['INPUT0','INPUT1']. Please provide all required input(s).",
    ),
    # --- batch
    Row(
        "batch > max_batch_size ‡",
        I,
        lambda rid: infer_req(rid, shapes=[[9, 16], [9, 16]]),
        INVALID,
        "{p}inference request batch-size must be <= 8 for 'simple'",
    ),
    Row(
        "batch > max_batch_size, facile ‡",
        I,
        lambda rid: infer_req(
            rid, model="facile", names=("input",), shapes=[[16385, 47]], dtypes=["FP32"], raws=[bytes(16385 * 47 * 4)]
        ),
        INVALID,
        "{p}inference request batch-size must be <= 16384 for 'facile'",
    ),
    Row(
        "batch dim omitted ([16]) ‡",
        I,
        lambda rid: infer_req(rid, shapes=[[16], [16]]),
        INVALID,
        "{p}inference request batch-size must be <= 8 for 'simple'",
    ),
    Row(
        "batch > max wins over wrong shape ‡",
        I,
        lambda rid: infer_req(rid, shapes=[[9, 15], [9, 15]]),
        INVALID,
        "{p}inference request batch-size must be <= 8 for 'simple'",
    ),
    Row(
        "dim-0 mismatch ‡",
        I,
        lambda rid: infer_req(rid, shapes=[[1, 16], [2, 16]]),
        INVALID,
        "{p}input 'INPUT0' batch size does not match other inputs for 'simple'",
    ),
    Row(
        "dim-0 mismatch, other way round ‡",
        I,
        lambda rid: infer_req(rid, shapes=[[2, 16], [1, 16]]),
        INVALID,
        "{p}input 'INPUT0' batch size does not match other inputs for 'simple'",
    ),
    Row(
        "no shape at all ‡",
        I,
        lambda rid: infer_req(rid, shapes=[[], []], raws=[b"", b""]),
        INVALID,
        "{p}input 'INPUT1' has no shape but model requires batch dimension for 'simple'",
    ),
    Row(
        "batch 0 ‡ (sized as one row)",
        I,
        lambda rid: infer_req(rid, shapes=[[0, 16], [0, 16]], raws=[b"", b""]),
        INVALID,
        "{p}input byte size mismatch for input 'INPUT1' for model 'simple'. Expected 64, got 0",
    ),
    # --- datatype and shape
    Row(
        "wrong dtype ‡",
        I,
        lambda rid: infer_req(rid, dtypes=["INT32", "FP32"]),
        INVALID,
        "{p}inference input 'INPUT1' data-type is 'FP32', but model 'simple' expects 'INT32'",
    ),
    Row(
        "wrong dtype on both: core order names INPUT1 ‡",
        I,
        lambda rid: infer_req(rid, dtypes=["FP32", "FP32"]),
        INVALID,
        "{p}inference input 'INPUT1' data-type is 'FP32', but model 'simple' expects 'INT32'",
    ),
    Row(
        "unknown dtype string ‡",
        I,
        lambda rid: infer_req(rid, dtypes=["FOO", "INT32"]),
        INVALID,
        "{p}inference input 'INPUT0' data-type is '<invalid>', but model 'simple' expects 'INT32'",
    ),
    Row(
        "wrong dtype wins over wrong shape ‡",
        I,
        lambda rid: infer_req(rid, shapes=[[1, 15], [1, 16]], dtypes=["FP32", "INT32"]),
        INVALID,
        "{p}inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'",
    ),
    Row(
        "wrong shape, with the NOTE ‡",
        I,
        lambda rid: infer_req(rid, shapes=[[1, 15], [1, 15]]),
        INVALID,
        "{p}unexpected shape for input 'INPUT1' for model 'simple'. Expected [-1,16], got [1,15]." + SHAPE_NOTE,
    ),
    Row(
        "wrong rank ‡",
        I,
        lambda rid: infer_req(rid, shapes=[[1, 1, 16], [1, 1, 16]]),
        INVALID,
        "{p}unexpected shape for input 'INPUT1' for model 'simple'. Expected [-1,16], got [1,1,16]." + SHAPE_NOTE,
    ),
    Row(
        "wrong shape, facile ‡",
        I,
        lambda rid: infer_req(
            rid, model="facile", names=("input",), shapes=[[3, 46]], dtypes=["FP32"], raws=[bytes(3 * 46 * 4)]
        ),
        INVALID,
        "{p}unexpected shape for input 'input' for model 'facile'. Expected [-1,47], got [3,46]." + SHAPE_NOTE,
    ),
    Row(
        "-1 in a shape ‡",
        I,
        lambda rid: infer_req(rid, shapes=[[1, -1], [1, -1]]),
        INVALID,
        "{p}All input dimensions should be specified for input 'INPUT1' for model 'simple', got [1,-1]",
    ),
    Row(
        "-1 as the batch dim ‡",
        I,
        lambda rid: infer_req(rid, shapes=[[-1, 16], [-1, 16]]),
        INVALID,
        "{p}input 'INPUT0' batch size does not match other inputs for 'simple'",
    ),
    Row(
        "-1 as one input's batch dim ‡",
        I,
        lambda rid: infer_req(rid, shapes=[[1, 16], [-1, 16]]),
        INVALID,
        "{p}input 'INPUT0' batch size does not match other inputs for 'simple'",
    ),
    # --- data
    Row(
        "raw byte size too small ‡",
        I,
        lambda rid: infer_req(rid, raws=[bytes(60), bytes(64)]),
        INVALID,
        "{p}input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 60",
    ),
    Row(
        "raw byte size too large ‡",
        I,
        lambda rid: infer_req(rid, raws=[bytes(68), bytes(64)]),
        INVALID,
        "{p}input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 68",
    ),
    Row(
        "fewer raw entries than inputs",
        I,
        lambda rid: infer_req(rid, raws=[bytes(64)]),
        INVALID,
        "unable to find data for input tensor 'INPUT1' for model 'simple' in request.",
    ),
    Row(
        "raw and typed mixed (typed inputs + a raw entry)",
        I,
        lambda rid: typed(rid, raw_also=True),
        INVALID,
        "contents field must not be specified when using raw_input_contents for 'INPUT0' for model 'simple'",
    ),
    Row(
        "raw and typed mixed (raw inputs, INPUT1 also typed)",
        I,
        raw_and_input1_typed,
        INVALID,
        "contents field must not be specified when using raw_input_contents for 'INPUT1' for model 'simple'",
    ),
    Row(
        "typed contents in the wrong field",
        I,
        typed_wrong_field,
        INVALID,
        "unexpected explicit tensor data for input tensor 'INPUT0' for model 'simple' of type 'FP32', expected datatype 'INT32'",
    ),
    Row(
        "typed contents, too few elements ‡",
        I,
        lambda rid: typed_count(rid, 15),
        INVALID,
        "{p}input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 60",
    ),
    Row(
        "typed contents, too many elements ‡",
        I,
        lambda rid: typed_count(rid, 17),
        INVALID,
        "{p}input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 68",
    ),
    Row(
        "BYTES raw, too few elements ‡",
        I,
        lambda rid: string_req(rid, bytes_raw([b"1"] * 15)),
        INVALID,
        "{p}expected 16 string elements for inference input 'INPUT0' for model 'simple_string', got 15",
    ),
    Row(
        "BYTES raw, too many elements ‡",
        I,
        lambda rid: string_req(rid, bytes_raw([b"1"] * 17)),
        INVALID,
        "{p}unexpected number of string elements 17 for inference input 'INPUT0' for model 'simple_string', expecting 16",
    ),
    Row(
        "BYTES raw, last element truncated",
        I,
        lambda rid: string_req(rid, bytes_raw([b"1"] * 15 + [b"12"])[:-1]),
        INVALID,
        "incomplete string data for inference input 'INPUT0', expecting string of length 2 but only 1 bytes available",
    ),
    # --- request parameters
    Row(
        "reserved triton_ parameter",
        I,
        lambda rid: with_params(infer_req(rid), triton_foo=("bool_param", True)),
        INVALID,
        RESERVED,
    ),
    Row(
        "sequence_id of type bool",
        I,
        lambda rid: with_params(infer_req(rid), sequence_id=("bool_param", True)),
        INVALID,
        "invalid value type for 'sequence_id' parameter, expected int64_param or string_param.",
    ),
    Row(
        "sequence_id of type double",
        I,
        lambda rid: with_params(infer_req(rid), sequence_id=("double_param", 1.0)),
        INVALID,
        "invalid value type for 'sequence_id' parameter, expected int64_param or string_param.",
    ),
    Row(
        "sequence_start of type int64",
        I,
        lambda rid: with_params(infer_req(rid), sequence_start=("int64_param", 1)),
        INVALID,
        "invalid value type for 'sequence_start' parameter, expected bool_param.",
    ),
    Row(
        "priority of type string",
        I,
        lambda rid: with_params(infer_req(rid), priority=("string_param", "1")),
        INVALID,
        "invalid value type for 'priority' parameter, expected int64_param or uint64_param.",
    ),
    Row(
        "negative priority",
        I,
        lambda rid: with_params(infer_req(rid), priority=("int64_param", -1)),
        INVALID,
        "invalid value for 'priority', expected value >= 0.",
    ),
    Row(
        "timeout of type string",
        I,
        lambda rid: with_params(infer_req(rid), timeout=("string_param", "1")),
        INVALID,
        "invalid value type for 'timeout' parameter, expected int64_param.",
    ),
    Row(
        "custom parameter of type uint64",
        I,
        lambda rid: with_params(infer_req(rid), my_custom_u=("uint64_param", 1)),
        INVALID,
        "invalid value type for 'my_custom_u' parameter, expected int64_param, bool_param, or string_param.",
    ),
    Row(
        "classification of type string",
        I,
        lambda rid: output_param(rid, "classification", "string_param", "2"),
        INVALID,
        "invalid value type for 'classification' parameter, expected int64_param",
    ),
    # --- repository control and shared memory
    Row(
        "load in NONE mode",
        "RepositoryModelLoad",
        lambda _: pb.RepositoryModelLoadRequest(model_name="simple"),
        UNAVAILABLE,
        NOT_EXPLICIT,
    ),
    Row(
        "load of an unknown model in NONE mode",
        "RepositoryModelLoad",
        lambda _: pb.RepositoryModelLoadRequest(model_name="nonexistent"),
        UNAVAILABLE,
        NOT_EXPLICIT,
    ),
    Row(
        "unload in NONE mode",
        "RepositoryModelUnload",
        lambda _: pb.RepositoryModelUnloadRequest(model_name="simple"),
        UNAVAILABLE,
        NOT_EXPLICIT,
    ),
    Row(
        "register a shm key that does not exist",
        "SystemSharedMemoryRegister",
        lambda _: pb.SystemSharedMemoryRegisterRequest(name="bad_region", key=MISSING_SHM_KEY, offset=0, byte_size=64),
        INTERNAL,
        f"Unable to open shared memory region: '{MISSING_SHM_KEY}'",
    ),
    Row(
        "repository_name on RepositoryIndex",
        "RepositoryIndex",
        lambda _: pb.RepositoryIndexRequest(repository_name="nope"),
        UNIMPLEMENTED,
        "'repository_name' specification is not supported",
    ),
]

# every ModelInfer row runs with an empty id and with an id: the prefix must follow Triton
CASES = [
    pytest.param(row, rid, id=f"{row.situation}{' [id]' if rid else ''}")
    for row in R
    for rid in (("", "my-id-7") if row.method == I else ("",))
]


@pytest.fixture(scope="module")
def channel(server):
    ch = grpc.insecure_channel(
        server.url, options=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    )
    yield ch
    ch.close()


def call(channel, method: str, request):
    fn = channel.unary_unary(
        SERVICE + method,
        request_serializer=type(request).SerializeToString,
        response_deserializer=RESPONSES[method].FromString,
    )
    return fn(request, timeout=30)


def expect_error(channel, row: Row, rid: str) -> None:
    with pytest.raises(grpc.RpcError) as info:
        call(channel, row.method, row.build(rid))
    prefix = f"[request id: {rid or '<id_unknown>'}] "
    assert (info.value.code(), info.value.details()) == (row.code, row.message.replace("{p}", prefix))


@pytest.mark.parametrize("row, rid", CASES)
def test_error_row(channel, row, rid):
    expect_error(channel, row, rid)


# ----------------------------------------------------------------------------- accepted on purpose


def simple_outputs(response) -> dict[str, np.ndarray]:
    return {
        o.name: np.frombuffer(raw, dtype=np.int32).reshape(list(o.shape))
        for o, raw in zip(response.outputs, response.raw_output_contents)
    }


@pytest.mark.parametrize(
    "key, kind, value",
    [
        ("triton_enable_empty_final_response", "bool_param", True),  # the one allowed triton_ key
        ("my_int", "int64_param", 3),
        ("my_bool", "bool_param", False),
        ("my_string", "string_param", "x"),
        ("my_double", "double_param", 1.5),
        ("sequence_id", "int64_param", 5),  # ignored: simple has no sequence batcher
        ("sequence_id", "string_param", "abc"),
        ("sequence_start", "bool_param", True),
        ("priority", "int64_param", 3),
        ("priority", "uint64_param", 1),
        ("timeout", "int64_param", 1000),
        ("binary_data_output", "bool_param", True),  # an HTTP-only key
    ],
)
def test_accepted_parameters(channel, key, kind, value):
    r = with_params(infer_req("acc"), **{key: (kind, value)})
    response = call(channel, I, r)
    assert response.id == "acc"
    outs = simple_outputs(response)
    np.testing.assert_array_equal(outs["OUTPUT0"], 2 * np.arange(16, dtype=np.int32).reshape(1, 16))


def test_extra_raw_entries_are_ignored(channel):
    r = infer_req(raws=[np.arange(16, dtype=np.int32).tobytes(), np.ones(16, np.int32).tobytes(), b"junk"])
    outs = simple_outputs(call(channel, I, r))
    np.testing.assert_array_equal(outs["OUTPUT1"][0], np.arange(16) - 1)


@pytest.mark.parametrize("version", [" 1", "01", "1"])
def test_version_strings_parsed_like_stol(channel, version):
    response = call(channel, I, infer_req(version=version))
    assert response.model_version == "1"


def test_batch_zero_with_one_rows_data_is_rejected(channel):
    # passes Triton's size check (batch 0 is sized as one row), but there is nothing to run;
    # Triton's behaviour past this point is backend-specific, ours is a clear refusal
    r = infer_req("b0", shapes=[[0, 16], [0, 16]], raws=[bytes(64), bytes(64)])
    with pytest.raises(grpc.RpcError) as info:
        call(channel, I, r)
    assert info.value.code() == INVALID
    assert info.value.details() == "[request id: b0] inference request batch-size must be >= 1 for 'simple'"


def test_single_input_wildcard_batch_dim(channel):
    # Triton 2.51 overflows here ("expected 12884901885 string elements"); we name the problem
    r = infer_req(
        "w",
        model="simple_identity",
        names=("INPUT0",),
        shapes=[[-1, 3]],
        dtypes=["BYTES"],
        raws=[bytes_raw([b"a", b"b", b"c"])],
    )
    with pytest.raises(grpc.RpcError) as info:
        call(channel, I, r)
    assert info.value.code() == INVALID
    assert info.value.details() == (
        "[request id: w] All input dimensions should be specified for input 'INPUT0' for model "
        "'simple_identity', got [-1,3]"
    )


# ----------------------------------------------------------------------------- through tritonclient


def test_errors_surface_in_tritonclient(client):
    a = np.zeros((9, 16), dtype=np.int32)
    inputs = [grpcclient.InferInput("INPUT0", [9, 16], "INT32"), grpcclient.InferInput("INPUT1", [9, 16], "INT32")]
    for inp in inputs:
        inp.set_data_from_numpy(a)
    with pytest.raises(InferenceServerException) as info:
        client.infer("simple", inputs, request_id="tc")
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert info.value.message() == "[request id: tc] inference request batch-size must be <= 8 for 'simple'"
    with pytest.raises(InferenceServerException) as info:
        client.infer("nonexistent", inputs)
    assert info.value.status() == "StatusCode.NOT_FOUND"
    for fn in (client.load_model, client.unload_model):
        with pytest.raises(InferenceServerException) as info:
            fn("simple")
        assert info.value.status() == "StatusCode.UNAVAILABLE"
        assert info.value.message() == NOT_EXPLICIT
    with pytest.raises(InferenceServerException) as info:
        client.register_system_shared_memory("bad_region", MISSING_SHM_KEY, 64)
    assert info.value.status() == "StatusCode.INTERNAL"
    assert info.value.message() == f"Unable to open shared memory region: '{MISSING_SHM_KEY}'"
    assert "bad_region" not in client.get_system_shared_memory_status().regions


# ----------------------------------------------------------------------------- still serving


@pytest.mark.timeout(180)
def test_server_survives_the_error_table(client, channel):
    for row in R:
        for rid in ("", "after"):
            expect_error(channel, row, rid)
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("simple") and client.is_model_ready("simple_string")
    outs = simple_outputs(call(channel, I, infer_req("good")))
    np.testing.assert_array_equal(outs["OUTPUT0"], 2 * np.arange(16, dtype=np.int32).reshape(1, 16))
    # and the repository was not touched by the refused load/unload requests
    assert {m.name: m.state for m in client.get_model_repository_index().models}["simple"] == "READY"
