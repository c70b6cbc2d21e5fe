"""``grpc_codec.split_raw_inputs``: a large ModelInferRequest's raw inputs stay views of the
received bytes, and the rest parses as it would have -- never a different request, for any
bytes (the fuzzer compares with protobuf's own parse of the whole message)."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest

from fpgaserve.protos import inference as pb
from fpgaserve.server.frontends import grpc_codec as codec

FUZZ_CASES = int(os.environ.get("FPGASERVE_FUZZ_CASES", "5000"))


def _request(rows: int = 16000) -> pb.ModelInferRequest:
    r = pb.ModelInferRequest(model_name="facile", model_version="1", id="event-7")
    r.parameters["sequence_id"].int64_param = 5
    t = r.inputs.add(name="x", datatype="FP32", shape=[rows, 47])
    t.parameters["binary_data_size"].int64_param = rows * 47 * 4
    r.outputs.add(name="y")
    r.raw_input_contents.append(np.random.default_rng(0).random((rows, 47)).astype(np.float32).tobytes())
    r.raw_input_contents.append(b"")
    r.raw_input_contents.append(b"second")
    return r


def _rebuilt(split) -> pb.ModelInferRequest:
    stripped, raws = split
    message = pb.ModelInferRequest.FromString(stripped)
    message.raw_input_contents.extend(bytes(v) for v in raws)
    return message


def test_raw_inputs_are_views_of_the_message_and_the_rest_parses_the_same():
    request = _request()
    data = request.SerializeToString()
    split = codec.split_raw_inputs(data)
    assert split is not None
    stripped, raws = split
    assert len(stripped) < 200
    assert [v.nbytes for v in raws] == [16000 * 47 * 4, 0, 6]
    assert all(v.obj is data for v in raws)  # views, not copies
    assert _rebuilt(split) == request


def test_the_served_request_view_reads_like_the_message():
    request = _request()
    split = codec.split_raw_inputs(request.SerializeToString())
    assert split is not None
    view = codec.InferRequestView(pb.ModelInferRequest.FromString(split[0]), split[1])
    assert view.model_name == "facile" and view.id == "event-7" and view.inputs[0].shape == [16000, 47]
    assert bytes(view.raw_input_contents[2]) == b"second"


@pytest.mark.parametrize(
    "data",
    [
        b"",
        pb.ModelInferRequest(model_name="m").SerializeToString(),  # no raw inputs: nothing to split
        b"\x3a\x05ab",  # raw contents cut short
        b"\x38\x01",  # raw contents as a varint
        b"\x0b\x0c",  # a group
        b"\x00\x01",  # field 0
        b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  # a varint longer than 64 bits
    ],
)
def test_nothing_to_split_or_not_well_formed_is_left_to_the_parser(data):
    assert codec.split_raw_inputs(data) is None


def test_fuzz_split_never_disagrees_with_protobuf():
    base = _request(rows=4).SerializeToString()
    rng = random.Random(19)
    for _ in range(FUZZ_CASES):
        b = bytearray(base)
        for _ in range(rng.randint(1, 4)):
            op = rng.random()
            if op < 0.5 and b:
                b[rng.randrange(len(b))] = rng.randrange(256)
            elif op < 0.75 and b:
                del b[rng.randrange(len(b))]
            else:
                b.insert(rng.randrange(len(b) + 1), rng.randrange(256))
        data = bytes(b)
        try:
            whole = pb.ModelInferRequest.FromString(data)
        except Exception:
            whole = None
        split = codec.split_raw_inputs(data)
        if split is None:
            continue
        try:
            parts = _rebuilt(split)
        except Exception:
            parts = None
        assert (whole is None) == (parts is None), data
        assert whole is None or whole == parts, data
