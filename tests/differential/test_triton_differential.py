"""Differential test: the same bad requests, byte for byte, to the real Triton and to fpgaserve.

Both servers get identical serialized requests over raw gRPC; the status code and message
text must be equal. Triton serves the same contracts through its Python backend
(tests/support/reference_triton.py); fpgaserve serves tests/models.

Deliberate deviations (not compared here, tested in test_errors.py):
* duplicate requested outputs: Triton 2.51 accepts them; newer Triton and its qa/L0_grpc
  test reject them with "output 'X' already exists in request", which the issue asks for.
* load failures in explicit mode append the reason after Triton's text.
"""

from __future__ import annotations

import grpc
import pytest

from fpgaserve.protos import inference as pb
from support.differential import SERVICE, raw_call
from support.reference_triton import (
    start_tritonserver,
    stop_tritonserver,
    write_python_backend_repository,
)
from support.server_process import CONFORMANCE_REPO, ServerProcess, free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def servers(tritonserver_path, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("differential")
    repo = tmp / "triton_repo"
    write_python_backend_repository(repo, models=("simple", "simple_string"))
    ports = [free_port() for _ in range(3)]
    triton = start_tritonserver(repo, *ports, log_path=tmp / "triton.log")
    ours = ServerProcess([CONFORMANCE_REPO], "--allow-client-shm=true", log_path=tmp / "fpgaserve.log").start()
    try:
        yield f"localhost:{ports[0]}", ours.url
    finally:
        ours.stop()
        stop_tritonserver(triton)


def _tensor(req, name, datatype, shape, raw=None):
    t = req.inputs.add()
    t.name, t.datatype = name, datatype
    t.shape.extend(shape)
    if raw is not None:
        req.raw_input_contents.append(raw)
    return t


def _t(name, datatype="INT32", shape=(1, 16), raw=bytes(64), **contents):
    """One input of a case: ``raw`` bytes (None: no raw entry) and typed ``contents`` (field=values)."""
    return name, datatype, list(shape), raw, contents


def _request(*inputs, model="simple", version="", request_id="", outputs=()):
    """A request with these inputs (made by ``_t``) and requested outputs."""
    req = pb.ModelInferRequest(model_name=model, model_version=version, id=request_id)
    for name, datatype, shape, raw, contents in inputs:
        t = _tensor(req, name, datatype, shape, raw)
        for field, values in contents.items():
            getattr(t.contents, field).extend(values)
    for name in outputs:
        req.outputs.add().name = name
    return req


def _simple(version=""):
    """A valid `simple` request."""
    return _request(_t("INPUT0"), _t("INPUT1"), version=version)


def _with_param(key, kind, value):
    def build():
        req = _simple()
        setattr(req.parameters[key], kind, value)
        return req

    return build


def _string_request(payload0: bytes):
    import struct

    good = b"".join(struct.pack("<I", 1) + b"1" for _ in range(16))
    return _request(_t("INPUT0", "BYTES", raw=payload0), _t("INPUT1", "BYTES", raw=good), model="simple_string")


def _bytes_elements(n):
    import struct

    return b"".join(struct.pack("<I", 2) + b"12" for _ in range(n))


INFER_CASES = {
    "unknown model": lambda: pb.ModelInferRequest(model_name="nonexistent"),
    "unknown version": lambda: _simple(version="3"),
    "version zero": lambda: _simple(version="0"),
    "non-integer version": lambda: _simple(version="abc"),
    "negative version": lambda: _simple(version="-1"),
    "unknown input": lambda: _request(_t("INPUT0"), _t("INPUTX")),
    "extra input": lambda: _request(_t("INPUT0"), _t("INPUT1"), _t("INPUT2")),
    "missing input": lambda: _request(_t("INPUT0"), request_id="abc"),
    "unknown output": lambda: _request(_t("INPUT0"), _t("INPUT1"), outputs=["OUTPUTX"]),
    "duplicate input": lambda: _request(_t("INPUT0"), _t("INPUT1"), _t("INPUT0")),
    "batch too large": lambda: _request(
        _t("INPUT0", shape=(9, 16), raw=bytes(9 * 64)), _t("INPUT1", shape=(9, 16), raw=bytes(9 * 64))
    ),
    "batch mismatch": lambda: _request(_t("INPUT0", shape=(2, 16), raw=bytes(128)), _t("INPUT1"), request_id="7"),
    "wrong dtype": lambda: _request(_t("INPUT0"), _t("INPUT1", "FP32")),
    "unknown dtype": lambda: _request(_t("INPUT0"), _t("INPUT1", "FLOAT")),
    "wrong shape": lambda: _request(_t("INPUT0"), _t("INPUT1", shape=(1, 15), raw=bytes(60))),
    "-1 in shape": lambda: _request(_t("INPUT0"), _t("INPUT1", shape=(1, -1))),
    "raw byte size": lambda: _request(_t("INPUT0", raw=bytes(60)), _t("INPUT1")),
    "fewer raw entries": lambda: _request(_t("INPUT0"), _t("INPUT1", raw=None)),
    "raw and typed": lambda: _request(_t("INPUT0", int_contents=range(16)), _t("INPUT1")),
    "typed wrong field": lambda: _request(
        _t("INPUT0", raw=None, fp32_contents=[1.0] * 16), _t("INPUT1", raw=None, int_contents=range(16))
    ),
    "typed wrong count": lambda: _request(
        _t("INPUT0", raw=None, int_contents=range(15)), _t("INPUT1", raw=None, int_contents=range(16))
    ),
    "reserved parameter": _with_param("triton_foo", "bool_param", True),
    "sequence_id bool": _with_param("sequence_id", "bool_param", True),
    "sequence_start int": _with_param("sequence_start", "int64_param", 1),
    "priority string": _with_param("priority", "string_param", "high"),
    "priority negative": _with_param("priority", "int64_param", -1),
    "timeout string": _with_param("timeout", "string_param", "1"),
    "custom uint64": _with_param("my_custom_u", "uint64_param", 5),
    "allowed triton parameter": _with_param("triton_enable_empty_final_response", "bool_param", True),
    "custom double": _with_param("my_custom_d", "double_param", 0.5),
    "BYTES too few": lambda: _string_request(_bytes_elements(15)),
    "BYTES too many": lambda: _string_request(_bytes_elements(17)),
    "BYTES truncated": lambda: _string_request(_bytes_elements(15) + b"\x02\x00\x00\x001"),
}


@pytest.mark.parametrize("case", list(INFER_CASES))
def test_infer_errors_match_triton(servers, case):
    triton, ours = servers
    request = INFER_CASES[case]()
    expected = raw_call(triton, "ModelInfer", request, pb.ModelInferResponse)
    got = raw_call(ours, "ModelInfer", request, pb.ModelInferResponse)
    assert got == expected


# case -> (method, its request's fields); the request and response types are <method>Request/Response
OTHER_CASES = {
    "metadata unknown model": ("ModelMetadata", {"name": "nonexistent"}),
    "metadata unknown version": ("ModelMetadata", {"name": "simple", "version": "3"}),
    "config unknown model": ("ModelConfig", {"name": "nonexistent"}),
    "config bad version": ("ModelConfig", {"name": "simple", "version": "abc"}),
    "statistics unknown model": ("ModelStatistics", {"name": "nonexistent"}),
    "statistics unknown version": ("ModelStatistics", {"name": "simple", "version": "3"}),
    "ready unknown model": ("ModelReady", {"name": "nonexistent"}),
    "load in none mode": ("RepositoryModelLoad", {"model_name": "simple"}),
    "unload in none mode": ("RepositoryModelUnload", {"model_name": "simple"}),
    "index with repository name": ("RepositoryIndex", {"repository_name": "x"}),
    "shm register bad key": (
        "SystemSharedMemoryRegister",
        {"name": "r", "key": "/fpgaserve_no_such_key", "byte_size": 64},
    ),
    "shm status unknown": ("SystemSharedMemoryStatus", {"name": "nope"}),
    "shm unregister unknown": ("SystemSharedMemoryUnregister", {"name": "nope"}),
}


@pytest.mark.parametrize("case", list(OTHER_CASES))
def test_other_errors_match_triton(servers, case):
    triton, ours = servers
    method, fields = OTHER_CASES[case]
    request, response_cls = getattr(pb, f"{method}Request")(**fields), getattr(pb, f"{method}Response")
    assert raw_call(ours, method, request, response_cls) == raw_call(triton, method, request, response_cls)


def test_unregistered_shm_region_in_infer_matches_triton(servers):
    triton, ours = servers
    req = _simple()
    req.raw_input_contents.pop()
    t = req.inputs[1]
    t.parameters["shared_memory_region"].string_param = "nope_region"
    t.parameters["shared_memory_byte_size"].int64_param = 64
    assert raw_call(ours, "ModelInfer", req, pb.ModelInferResponse) == raw_call(
        triton, "ModelInfer", req, pb.ModelInferResponse
    )


def _infer_outputs(url: str, request):
    with grpc.insecure_channel(url) as channel:
        rpc = channel.unary_unary(
            SERVICE + "ModelInfer", request_serializer=None, response_deserializer=pb.ModelInferResponse.FromString
        )
        response = rpc(request.SerializeToString(), timeout=30)
    return [(o.name, o.datatype, list(o.shape)) for o in response.outputs], list(response.raw_output_contents)


def test_classification_output_matches_triton(servers):
    """The classification extension: top-k as BYTES "value:index", same bytes as Triton."""
    import numpy as np

    triton, ours = servers
    req = pb.ModelInferRequest(model_name="simple")
    in0 = np.array([[3, 9, -2, 7, 0, 11, 5, 5, 1, 8, -6, 4, 2, 10, 6, -1]], dtype=np.int32)
    _tensor(req, "INPUT0", "INT32", [1, 16], in0.tobytes())
    _tensor(req, "INPUT1", "INT32", [1, 16], np.ones((1, 16), np.int32).tobytes())
    out = req.outputs.add()
    out.name = "OUTPUT0"
    out.parameters["classification"].int64_param = 3
    assert _infer_outputs(ours, req) == _infer_outputs(triton, req)
