"""Every Triton datatype round-trips through fpgaserve, raw and typed.

A test-only repository (written to a tmp dir) holds one identity model per datatype on the
numpy backend. Each model.py also checks the backend contract: the array it receives has
the documented numpy dtype (BF16 as uint16 raw bits, BYTES as an object array of ``bytes``);
a violation raises, which the server turns into an error. A dedicated ServerProcess serves
the repository.

tritonclient 2.73 represents BF16 as ``ml_dtypes.bfloat16`` (float32 arrays are refused
since r26.06); both directions are checked bit for bit.
"""

from __future__ import annotations

import grpc
import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException, deserialize_bytes_tensor

from fpgaserve.protos import inference as pb
from support.server_process import ServerProcess, serve

pytestmark = pytest.mark.timeout(120)

SERVICE = "/inference.GRPCInferenceService/"

# wire name -> (config enum, numpy dtype the backend must see, typed contents field)
DATATYPES = {
    "BOOL": ("TYPE_BOOL", "bool", "bool_contents"),
    "UINT8": ("TYPE_UINT8", "uint8", "uint_contents"),
    "UINT16": ("TYPE_UINT16", "uint16", "uint_contents"),
    "UINT32": ("TYPE_UINT32", "uint32", "uint_contents"),
    "UINT64": ("TYPE_UINT64", "uint64", "uint64_contents"),
    "INT8": ("TYPE_INT8", "int8", "int_contents"),
    "INT16": ("TYPE_INT16", "int16", "int_contents"),
    "INT32": ("TYPE_INT32", "int32", "int_contents"),
    "INT64": ("TYPE_INT64", "int64", "int64_contents"),
    "FP16": ("TYPE_FP16", "float16", None),
    "FP32": ("TYPE_FP32", "float32", "fp32_contents"),
    "FP64": ("TYPE_FP64", "float64", "fp64_contents"),
    "BF16": ("TYPE_BF16", "uint16", None),
    "BYTES": ("TYPE_STRING", "object", "bytes_contents"),
}
CLIENT_DTYPE = {  # what tritonclient 2.73 maps each datatype to
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BF16": ml_dtypes.bfloat16,
    "BYTES": np.object_,
}

MODEL_PY = '''\
"""Identity with a contract check: every input must arrive with the expected numpy dtype."""
import numpy as np

EXPECTED = {expected!r}


class Model:
    def execute(self, inputs):
        outputs = {{}}
        for name, x in inputs.items():
            if not isinstance(x, np.ndarray) or x.dtype != np.dtype(EXPECTED[name]):
                raise TypeError(f"{{name}} arrived as {{type(x).__name__}} {{getattr(x, 'dtype', None)}}, "
                                f"expected {{EXPECTED[name]}}")
            if x.dtype == object and not all(type(e) is bytes for e in x.ravel()):
                raise TypeError(f"{{name}}: BYTES elements must be bytes")
            outputs[name.replace("INPUT", "OUTPUT")] = x
        return outputs
'''

BF16_BITS_PY = '''\
"""BF16 in; out: the raw uint16 bits the backend saw, and those bits decoded as float32."""
import numpy as np


class Model:
    def execute(self, inputs):
        bits = inputs["INPUT0"]
        assert bits.dtype == np.uint16, bits.dtype
        return {"BITS": bits, "AS_FP32": (bits.astype(np.uint32) << 16).view(np.float32)}
'''


OPTIONAL_PY = """\
import numpy as np


class Model:
    def execute(self, inputs):
        extra = inputs["INPUT1"] if "INPUT1" in inputs else np.int32(100)
        return {"OUTPUT0": inputs["INPUT0"] + extra}
"""


def model_name(wire: str) -> str:
    return f"id_{wire.lower()}"


def _tensor(kind: str, name: str, enum: str, dims) -> str:
    return f'{kind} {{ name: "{name}" data_type: {enum} dims: [ {", ".join(str(d) for d in dims)} ] }}'


def _write_model(repo, name: str, max_batch: int, ios, code: str, extra: str = "") -> None:
    """ios: [(input name, output name, config enum, dims)]"""
    lines = [f'name: "{name}"', 'backend: "numpy"', f"max_batch_size: {max_batch}"]
    for in_name, _out_name, enum, dims in ios:
        lines.append(_tensor("input", in_name, enum, dims))
    for _in_name, out_name, enum, dims in ios:
        lines.append(_tensor("output", out_name, enum, dims))
    lines.append(extra)
    d = repo / name
    (d / "1").mkdir(parents=True)
    (d / "config.pbtxt").write_text("\n".join(lines) + "\n")
    (d / "1" / "model.py").write_text(code)


def write_repository(repo) -> None:
    for wire, (enum, np_name, _) in DATATYPES.items():
        # batched, both non-batch dims variable: shapes [b, -1, -1]
        _write_model(
            repo,
            model_name(wire),
            8,
            [("INPUT0", "OUTPUT0", enum, [-1, -1])],
            MODEL_PY.format(expected={"INPUT0": np_name}),
        )
    # max_batch_size 0: the request shape must equal dims exactly
    _write_model(
        repo,
        "fixed_nobatch",
        0,
        [("INPUT0", "OUTPUT0", "TYPE_FP32", [2, 3]), ("INPUT1", "OUTPUT1", "TYPE_STRING", [2])],
        MODEL_PY.format(expected={"INPUT0": "float32", "INPUT1": "object"}),
    )
    # max_batch_size 0 with variable dims [-1, -1]
    _write_model(
        repo,
        "var_nobatch",
        0,
        [("INPUT0", "OUTPUT0", "TYPE_INT16", [-1, -1])],
        MODEL_PY.format(expected={"INPUT0": "int16"}),
    )
    # a dynamic batcher block, to see its normalization
    _write_model(
        repo,
        "dyn_fp32",
        4,
        [("INPUT0", "OUTPUT0", "TYPE_FP32", [3])],
        MODEL_PY.format(expected={"INPUT0": "float32"}),
        extra="dynamic_batching { }",
    )
    d = repo / "optional_in"
    (d / "1").mkdir(parents=True)
    (d / "config.pbtxt").write_text(
        'name: "optional_in"\nbackend: "numpy"\nmax_batch_size: 8\n'
        'input { name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] }\n'
        'input { name: "INPUT1" data_type: TYPE_INT32 dims: [ 4 ] optional: true }\n'
        'output { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] }\n'
    )
    (d / "1" / "model.py").write_text(OPTIONAL_PY)
    d = repo / "bf16_bits"
    (d / "1").mkdir(parents=True)
    (d / "config.pbtxt").write_text(
        'name: "bf16_bits"\nbackend: "numpy"\nmax_batch_size: 8\n'
        + _tensor("input", "INPUT0", "TYPE_BF16", [-1])
        + "\n"
        + _tensor("output", "BITS", "TYPE_UINT16", [-1])
        + "\n"
        + _tensor("output", "AS_FP32", "TYPE_FP32", [-1])
        + "\n"
    )
    (d / "1" / "model.py").write_text(BF16_BITS_PY)


@pytest.fixture(scope="module")
def dt_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("datatypes")
    repo = tmp / "repo"
    repo.mkdir()
    write_repository(repo)
    yield from serve(ServerProcess([repo], log_path=tmp / "fpgaserve.log"))


@pytest.fixture(scope="module")
def dt_client(dt_server):
    with grpcclient.InferenceServerClient(dt_server.url) as c:
        yield c


@pytest.fixture(scope="module")
def channel(dt_server):
    ch = grpc.insecure_channel(dt_server.url)
    yield ch
    ch.close()


def infer_raw(channel, request) -> pb.ModelInferResponse:
    fn = channel.unary_unary(
        SERVICE + "ModelInfer",
        request_serializer=pb.ModelInferRequest.SerializeToString,
        response_deserializer=pb.ModelInferResponse.FromString,
    )
    return fn(request, timeout=30)


def roundtrip(client, model: str, wire: str, data: np.ndarray, name: str = "INPUT0"):
    inp = grpcclient.InferInput(name, list(data.shape), wire)
    inp.set_data_from_numpy(data)
    result = client.infer(model, [inp])
    out_name = name.replace("INPUT", "OUTPUT")
    (out,) = [o for o in result.get_response().outputs if o.name == out_name]
    assert out.datatype == wire
    return result.as_numpy(out_name)


def assert_same_bits(got: np.ndarray, sent: np.ndarray) -> None:
    assert got.shape == sent.shape
    assert got.dtype == sent.dtype
    if sent.dtype == np.object_:
        assert got.tolist() == sent.tolist()
    else:
        assert got.tobytes() == sent.tobytes()  # bitwise: NaN payloads, -0.0, subnormals


# ----------------------------------------------------------------------------- values


def values(wire: str) -> np.ndarray:
    """Interesting values of each type, as the client-side numpy array (1-D)."""
    if wire == "BOOL":
        return np.array([True, False, False, True, True, False, True, False], dtype=np.bool_)
    if wire == "BYTES":
        return np.array([b"", b"\x00", b"a\x00b", b"\xff\xfe", b"hello", b"\xc3\x28", b"x" * 300, b"z"], dtype=object)
    if wire == "BF16":
        f = np.array(
            [0.0, -0.0, 1.0, -2.5, 3.140625, 3.0e38, -3.0e38, np.inf, -np.inf, np.nan, 1e-40, 2.0**-126],
            dtype=np.float32,
        )
        return f.astype(ml_dtypes.bfloat16)
    dt = np.dtype(CLIENT_DTYPE[wire])
    if dt.kind in "iu":
        info = np.iinfo(dt)
        base = [info.min, info.max, 0, 1, info.max // 3, info.min // 7 if dt.kind == "i" else 7, 42, info.max - 1]
        return np.array(base, dtype=dt)
    info = np.finfo(dt)
    return np.array(
        [
            0.0,
            -0.0,
            1.0,
            -1.5,
            info.max,
            info.min,
            info.tiny,
            info.smallest_subnormal,
            np.inf,
            -np.inf,
            np.nan,
            info.eps,
        ],
        dtype=dt,
    )


@pytest.mark.parametrize("wire", list(DATATYPES))
def test_metadata_lists_the_datatype(dt_client, wire):
    md = dt_client.get_model_metadata(model_name(wire))
    assert [(t.name, t.datatype, list(t.shape)) for t in md.inputs] == [("INPUT0", wire, [-1, -1, -1])]
    assert [(t.name, t.datatype, list(t.shape)) for t in md.outputs] == [("OUTPUT0", wire, [-1, -1, -1])]
    assert md.platform == "numpy"


@pytest.mark.parametrize("wire", list(DATATYPES))
@pytest.mark.parametrize("batch", [1, 3, 8])
def test_roundtrip_tritonclient(dt_client, wire, batch):
    v = values(wire)
    data = np.stack([np.roll(v, i) for i in range(batch)]).reshape(batch, 2, -1)
    assert_same_bits(roundtrip(dt_client, model_name(wire), wire, data), data)


@pytest.mark.parametrize("wire", list(DATATYPES))
def test_roundtrip_zero_elements(dt_client, channel, wire):
    data = np.empty((2, 0, 5), dtype=CLIENT_DTYPE[wire])
    out = roundtrip(dt_client, model_name(wire), wire, data)
    assert out.shape == (2, 0, 5)
    # the 0-byte output still has its raw_output_contents entry
    r = pb.ModelInferRequest(model_name=model_name(wire))
    t = r.inputs.add(name="INPUT0", datatype=wire)
    t.shape.extend([2, 0, 5])
    r.raw_input_contents.append(b"")
    response = infer_raw(channel, r)
    assert list(response.raw_output_contents) == [b""]
    assert list(response.outputs[0].shape) == [2, 0, 5]


def test_bf16_is_raw_bits_on_the_server(dt_client):
    sent = values("BF16")
    inp = grpcclient.InferInput("INPUT0", [1, sent.size], "BF16")
    inp.set_data_from_numpy(sent.reshape(1, -1))
    result = dt_client.infer("bf16_bits", [inp])
    bits = result.as_numpy("BITS")
    assert bits.dtype == np.uint16
    assert bits.tobytes() == sent.view(np.uint16).tobytes()
    as_fp32 = result.as_numpy("AS_FP32")
    np.testing.assert_array_equal(as_fp32, sent.astype(np.float32).reshape(1, -1))  # NaN == NaN here


def test_bf16_float32_arrays_are_refused_by_tritonclient():
    inp = grpcclient.InferInput("INPUT0", [1, 2], "BF16")
    with pytest.raises(InferenceServerException, match=r"ml_dtypes.bfloat16"):
        inp.set_data_from_numpy(np.zeros((1, 2), dtype=np.float32))


# ----------------------------------------------------------------------------- BYTES


BYTES_CASES = {
    "nuls": [b"\x00", b"a\x00b", b"\x00\x00\x00", b"he\x00llo"],
    "all empty": [b"", b"", b"", b""],
    "some empty": [b"", b"abc", b"", b"d"],
    "0xff": [b"\xff" * 5, b"\xfe\xff", b"\xff", b"\x80\xff\x00"],
    "non-utf8": [b"\xc3\x28", b"\xa0\xa1", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"],
    "utf8": ["héllo".encode(), "日本".encode(), b"plain", "\u2603".encode()],
    "long": [b"x" * 100_000, b"", b"y" * 70_001, b"\x00" * 65_537],
    "uniform length": [bytes([i]) * 8 for i in range(1, 9)],
    "uniform length ending in NUL": [b"ab\x00", b"cd\x00", b"e\x00\x00", b"\x00\x00\x00"],
    "uniform length, one ends in NUL": [b"abcd", b"efgh", b"ijk\x00", b"mnop"],
    "mixed length": [b"a", b"bb", b"ccc", b"dddd", b"", b"ffffff", b"g", b"hh"],
}


@pytest.mark.parametrize("case", list(BYTES_CASES))
def test_bytes_binary_safe_tritonclient(dt_client, case):
    items = BYTES_CASES[case]
    data = np.array(items, dtype=object).reshape(2, 1, -1)
    out = roundtrip(dt_client, "id_bytes", "BYTES", data)
    assert out.shape == data.shape
    assert [bytes(x) for x in out.ravel()] == items


@pytest.mark.parametrize("case", list(BYTES_CASES))
def test_bytes_raw_wire_is_identical(channel, case):
    """The length-prefixed raw output is byte for byte the raw input."""
    items = BYTES_CASES[case]
    raw = b"".join(len(x).to_bytes(4, "little") + x for x in items)
    r = pb.ModelInferRequest(model_name="id_bytes")
    t = r.inputs.add(name="INPUT0", datatype="BYTES")
    t.shape.extend([1, len(items), 1])
    r.raw_input_contents.append(raw)
    response = infer_raw(channel, r)
    assert response.raw_output_contents[0] == raw
    assert list(response.outputs[0].shape) == [1, len(items), 1]


# ----------------------------------------------------------------------------- typed contents

# (typed values to send, expected values on the wire when they come back)
TYPED = {
    "BOOL": ([True, False, True, True], np.array([1, 0, 1, 1], dtype=np.bool_)),
    # 8/16-bit types travel in 32-bit fields; the server keeps the low bytes, like Triton
    "UINT8": ([0, 255, 256 + 7, 4294967295], np.array([0, 255, 7, 255], dtype=np.uint8)),
    "UINT16": ([0, 65535, 65536 + 9, 1234], np.array([0, 65535, 9, 1234], dtype=np.uint16)),
    "UINT32": ([0, 4294967295, 1, 123456789], np.array([0, 4294967295, 1, 123456789], dtype=np.uint32)),
    "UINT64": ([0, 2**64 - 1, 2**40, 5], np.array([0, 2**64 - 1, 2**40, 5], dtype=np.uint64)),
    "INT8": ([-128, 127, 200, -1], np.array([-128, 127, -56, -1], dtype=np.int8)),
    "INT16": ([-32768, 32767, 40000, -2], np.array([-32768, 32767, -25536, -2], dtype=np.int16)),
    "INT32": ([-(2**31), 2**31 - 1, 0, -7], np.array([-(2**31), 2**31 - 1, 0, -7], dtype=np.int32)),
    "INT64": ([-(2**63), 2**63 - 1, 0, 3], np.array([-(2**63), 2**63 - 1, 0, 3], dtype=np.int64)),
    "FP32": (
        [0.0, -1.5, float("inf"), 3.4028234663852886e38],
        np.array([0.0, -1.5, np.inf, 3.4028234663852886e38], np.float32),
    ),
    "FP64": ([0.0, -1e308, float("-inf"), 5e-324], np.array([0.0, -1e308, -np.inf, 5e-324], dtype=np.float64)),
    "BYTES": (
        [b"", b"\x00\xff", "é".encode(), b"x" * 1000],
        np.array([b"", b"\x00\xff", "é".encode(), b"x" * 1000], object),
    ),
}


def typed_request(wire: str, field: str, vals, shape) -> pb.ModelInferRequest:
    r = pb.ModelInferRequest(model_name=model_name(wire), id=f"typed-{wire}")
    t = r.inputs.add(name="INPUT0", datatype=wire)
    t.shape.extend(shape)
    getattr(t.contents, field).extend(vals)
    return r


def decode(wire: str, shape, raw: bytes) -> np.ndarray:
    if wire == "BYTES":
        return deserialize_bytes_tensor(raw).reshape(shape)
    return np.frombuffer(raw, dtype=CLIENT_DTYPE[wire]).reshape(shape)


@pytest.mark.parametrize("wire", list(TYPED))
def test_typed_contents_roundtrip_as_raw(channel, wire):
    vals, expected = TYPED[wire]
    field = DATATYPES[wire][2]
    response = infer_raw(channel, typed_request(wire, field, vals, [1, 2, 2]))
    assert response.id == f"typed-{wire}"
    (out,) = response.outputs
    assert out.datatype == wire and list(out.shape) == [1, 2, 2]
    assert out.contents.ListFields() == []  # outputs are always raw
    assert len(response.raw_output_contents) == 1
    got = decode(wire, out.shape, response.raw_output_contents[0])
    assert_same_bits(got, expected.reshape(1, 2, 2))


@pytest.mark.parametrize(
    "wire, field, field_type",
    [
        ("FP16", "fp32_contents", "FP32"),  # FP16 and BF16 have no typed field
        ("BF16", "fp32_contents", "FP32"),
        ("BF16", "uint_contents", "UINT32"),
        ("INT64", "int_contents", "INT32"),
        ("UINT64", "uint_contents", "UINT32"),
        ("BOOL", "int_contents", "INT32"),
        ("BYTES", "int_contents", "INT32"),
        ("FP64", "fp32_contents", "FP32"),
    ],
)
def test_typed_contents_wrong_field(channel, wire, field, field_type):
    with pytest.raises(grpc.RpcError) as info:
        infer_raw(channel, typed_request(wire, field, [1, 2, 3, 4], [1, 2, 2]))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details() == (
        f"unexpected explicit tensor data for input tensor 'INPUT0' for model '{model_name(wire)}' "
        f"of type '{field_type}', expected datatype '{wire}'"
    )


def test_typed_bytes_count_mismatch(channel):
    with pytest.raises(grpc.RpcError) as info:
        infer_raw(channel, typed_request("BYTES", "bytes_contents", [b"a", b"b", b"c"], [1, 2, 2]))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details() == (
        "[request id: typed-BYTES] expected 4 string elements for inference input 'INPUT0' for model 'id_bytes', got 3"
    )


# ----------------------------------------------------------------------------- max_batch_size 0


def test_nobatch_exact_shape(dt_client):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    s = np.array([b"a\x00", b""], dtype=object)
    inputs = [grpcclient.InferInput("INPUT0", [2, 3], "FP32"), grpcclient.InferInput("INPUT1", [2], "BYTES")]
    inputs[0].set_data_from_numpy(x)
    inputs[1].set_data_from_numpy(s)
    result = dt_client.infer("fixed_nobatch", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)
    assert result.as_numpy("OUTPUT1").tolist() == [b"a\x00", b""]
    md = dt_client.get_model_metadata("fixed_nobatch")
    assert [list(t.shape) for t in md.inputs] == [[2, 3], [2]]  # no leading -1 without batching


@pytest.mark.parametrize("shape", [[1, 2, 3], [3, 2], [6]])
def test_nobatch_other_shapes_rejected_without_note(channel, shape):
    r = pb.ModelInferRequest(model_name="fixed_nobatch")
    t = r.inputs.add(name="INPUT0", datatype="FP32")
    t.shape.extend(shape)
    t = r.inputs.add(name="INPUT1", datatype="BYTES")
    t.shape.extend([2])
    r.raw_input_contents.extend([bytes(4 * int(np.prod(shape))), b"\0\0\0\0" * 2])
    with pytest.raises(grpc.RpcError) as info:
        infer_raw(channel, r)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    got = "[" + ",".join(map(str, shape)) + "]"
    # no NOTE without batching; Triton's text then ends in ". "
    assert info.value.details() == (
        f"[request id: <id_unknown>] unexpected shape for input 'INPUT0' for model 'fixed_nobatch'. "
        f"Expected [2,3], got {got}. "
    )


def test_nobatch_wildcard_in_request_rejected(channel):
    r = pb.ModelInferRequest(model_name="var_nobatch", id="w")
    t = r.inputs.add(name="INPUT0", datatype="INT16")
    t.shape.extend([2, -1])
    r.raw_input_contents.append(bytes(4))
    with pytest.raises(grpc.RpcError) as info:
        infer_raw(channel, r)
    assert info.value.details() == (
        "[request id: w] All input dimensions should be specified for input 'INPUT0' for model 'var_nobatch', got [2,-1]"
    )


@pytest.mark.parametrize("shape", [(1, 1), (4, 7), (7, 4), (0, 3), (1, 1000)])
def test_nobatch_variable_dims(dt_client, shape):
    x = (np.arange(int(np.prod(shape)), dtype=np.int16) - 500).reshape(shape)
    out = roundtrip(dt_client, "var_nobatch", "INT16", x)
    assert_same_bits(out, x)


def test_nobatch_variable_dims_rank_checked(channel):
    r = pb.ModelInferRequest(model_name="var_nobatch")
    t = r.inputs.add(name="INPUT0", datatype="INT16")
    t.shape.extend([6])
    r.raw_input_contents.append(bytes(12))
    with pytest.raises(grpc.RpcError) as info:
        infer_raw(channel, r)
    assert info.value.details() == (
        "[request id: <id_unknown>] unexpected shape for input 'INPUT0' for model 'var_nobatch'. "
        "Expected [-1,-1], got [6]. "
    )


# ----------------------------------------------------------------------------- config normalization


def test_dynamic_batching_normalized(dt_client):
    cfg = dt_client.get_model_config("dyn_fp32").config
    assert cfg.HasField("dynamic_batching")
    assert list(cfg.dynamic_batching.preferred_batch_size) == [4]  # [] becomes [max_batch_size]
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    assert_same_bits(roundtrip(dt_client, "dyn_fp32", "FP32", x), x)


def test_config_datatype_enums(dt_client):
    for wire, (enum, _, _) in DATATYPES.items():
        cfg = dt_client.get_model_config(model_name(wire), as_json=True)["config"]
        assert cfg["input"][0]["data_type"] == enum
        assert cfg["output"][0]["data_type"] == enum


# ----------------------------------------------------------------------------- optional inputs


def test_optional_input_may_be_omitted(dt_client):
    x = np.arange(8, dtype=np.int32).reshape(2, 4)
    inp = grpcclient.InferInput("INPUT0", [2, 4], "INT32")
    inp.set_data_from_numpy(x)
    np.testing.assert_array_equal(dt_client.infer("optional_in", [inp]).as_numpy("OUTPUT0"), x + 100)
    both = [inp, grpcclient.InferInput("INPUT1", [2, 4], "INT32")]
    both[1].set_data_from_numpy(x)
    np.testing.assert_array_equal(dt_client.infer("optional_in", both).as_numpy("OUTPUT0"), 2 * x)


def test_optional_input_count_text(channel):
    r = pb.ModelInferRequest(model_name="optional_in")
    t = r.inputs.add(name="INPUT1", datatype="INT32")
    t.shape.extend([1, 4])
    r.raw_input_contents.append(bytes(16))
    with pytest.raises(grpc.RpcError) as info:
        infer_raw(channel, r)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details() == (
        "[request id: <id_unknown>] expected number of inputs between 1 and 2 but got 1 inputs for model "
        "'optional_in'. Got input(s) ['INPUT1'], but missing required input(s) ['INPUT0']. "
        "Please provide all required input(s)."
    )
