"""System shared memory through a real ``fpgaserve`` process and tritonclient's shm utilities.

Covers the flow of Triton's ``simple_grpc_shm_client.py`` (inputs read from and outputs
written to POSIX shm), the region RPCs (status, register, unregister one/all) and the
errors Triton 2.51 gives (texts from .tools/notes/triton-2.51-behaviour.md §1 rows 60-71),
each followed by a check that the server still serves.

The module starts its own server: the region registry is server-wide, and "unregister all"
here must not disturb other test modules that share the session server.
"""

from __future__ import annotations

import uuid

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException, serialize_byte_tensor

from support.server_process import CONFORMANCE_REPO, ServerProcess, serve
from support.shm_regions import shm_regions

pytestmark = pytest.mark.timeout(60)

TENSOR_BYTES = 64  # simple: INT32 [1,16]


@pytest.fixture(scope="module")
def shm_server(tmp_path_factory):
    log = tmp_path_factory.mktemp("shm") / "fpgaserve.log"
    yield from serve(ServerProcess([CONFORMANCE_REPO], "--allow-client-shm=true", log_path=log))


@pytest.fixture
def client(shm_server):
    with grpcclient.InferenceServerClient(shm_server.url) as c:
        c.unregister_system_shared_memory()
        yield c
        c.unregister_system_shared_memory()


@pytest.fixture
def regions():
    """Create POSIX shm segments with unique keys; destroyed after the test."""
    with shm_regions("r_", "fpgaserve_test_") as make:
        yield make


def error_of(fn, *args, **kwargs) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as e:
        fn(*args, **kwargs)
    return e.value


def assert_serving(client):
    """Plain (non-shm) inference still works."""
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)
    inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"), grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    r = client.infer("simple", inputs)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
    assert client.is_server_ready()


def shm_inputs(region: str, offset0: int = 0, offset1: int = TENSOR_BYTES, size: int = TENSOR_BYTES):
    inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"), grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_shared_memory(region, size, offset0)
    inputs[1].set_shared_memory(region, size, offset1)
    return inputs


def shm_outputs(region: str, size: int = TENSOR_BYTES, offset0: int = 0, offset1: int = TENSOR_BYTES):
    outputs = [grpcclient.InferRequestedOutput("OUTPUT0"), grpcclient.InferRequestedOutput("OUTPUT1")]
    outputs[0].set_shared_memory(region, size, offset0)
    outputs[1].set_shared_memory(region, size, offset1)
    return outputs


# ----------------------------------------------------------------------------- happy path


def test_infer_inputs_and_outputs_in_shared_memory(client, regions):
    in_name, in_key, in_handle = regions(2 * TENSOR_BYTES)
    out_name, out_key, out_handle = regions(2 * TENSOR_BYTES)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 5, dtype=np.int32)
    shm.set_shared_memory_region(in_handle, [a])
    shm.set_shared_memory_region(in_handle, [b], offset=TENSOR_BYTES)
    client.register_system_shared_memory(in_name, in_key, 2 * TENSOR_BYTES)
    client.register_system_shared_memory(out_name, out_key, 2 * TENSOR_BYTES)

    for round_ in range(3):  # the same registered regions serve several requests
        a2 = a * (round_ + 1)
        shm.set_shared_memory_region(in_handle, [a2])
        result = client.infer("simple", shm_inputs(in_name), outputs=shm_outputs(out_name))
        # the response lists the outputs but carries no data for them
        response = result.get_response()
        assert [o.name for o in response.outputs] == ["OUTPUT0", "OUTPUT1"]
        assert [list(o.shape) for o in response.outputs] == [[1, 16], [1, 16]]
        assert [len(raw) for raw in response.raw_output_contents] == [0, 0]
        out0 = result.get_output("OUTPUT0")
        assert out0.datatype == "INT32"
        sum_ = shm.get_contents_as_numpy(out_handle, np.int32, [1, 16])
        diff = shm.get_contents_as_numpy(out_handle, np.int32, [1, 16], offset=TENSOR_BYTES)
        np.testing.assert_array_equal(sum_, a2 + b)
        np.testing.assert_array_equal(diff, a2 - b)


def test_shm_inputs_with_a_regular_output(client, regions):
    """Mixed: inputs from shm, OUTPUT0 to shm, OUTPUT1 returned in the response."""
    name, key, handle = regions(3 * TENSOR_BYTES)
    a = np.arange(16, dtype=np.int32).reshape(1, 16) * 3
    b = np.arange(16, dtype=np.int32).reshape(1, 16)
    shm.set_shared_memory_region(handle, [a, b])
    client.register_system_shared_memory(name, key, 3 * TENSOR_BYTES)
    out0 = grpcclient.InferRequestedOutput("OUTPUT0")
    out0.set_shared_memory(name, TENSOR_BYTES, 2 * TENSOR_BYTES)
    out1 = grpcclient.InferRequestedOutput("OUTPUT1")
    result = client.infer("simple", shm_inputs(name), outputs=[out0, out1])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.int32, [1, 16], offset=2 * TENSOR_BYTES), a + b)


def test_registered_offset_is_applied(client, regions):
    """A region registered at an offset: request offsets are relative to it."""
    name, key, handle = regions(4 * TENSOR_BYTES)
    a = np.arange(16, dtype=np.int32).reshape(1, 16) + 100
    b = np.arange(16, dtype=np.int32).reshape(1, 16)
    shm.set_shared_memory_region(handle, [np.full((1, 16), -7, np.int32), a, b])
    client.register_system_shared_memory(name, key, 3 * TENSOR_BYTES, offset=TENSOR_BYTES)
    result = client.infer("simple", shm_inputs(name, 0, TENSOR_BYTES))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)


def test_bytes_tensors_in_shared_memory(client, regions):
    """simple_grpc_shm_string_client.py: BYTES inputs and outputs through shm."""
    a = np.array([str(i).encode() for i in range(16)], dtype=object).reshape(1, 16)
    b = np.array([b"1"] * 16, dtype=object).reshape(1, 16)
    sa, sb = serialize_byte_tensor(a), serialize_byte_tensor(b)
    na, nb = len(sa.item()), len(sb.item())  # serialized sizes (length-prefixed elements)
    in_name, in_key, in_handle = regions(na + nb)
    shm.set_shared_memory_region(in_handle, [sa, sb])
    client.register_system_shared_memory(in_name, in_key, na + nb)
    out_name, out_key, out_handle = regions(512)
    client.register_system_shared_memory(out_name, out_key, 512)
    inputs = [grpcclient.InferInput("INPUT0", [1, 16], "BYTES"), grpcclient.InferInput("INPUT1", [1, 16], "BYTES")]
    inputs[0].set_shared_memory(in_name, na, 0)
    inputs[1].set_shared_memory(in_name, nb, na)
    outputs = shm_outputs(out_name, size=256, offset0=0, offset1=256)
    client.infer("simple_string", inputs, outputs=outputs)
    sums = shm.get_contents_as_numpy(out_handle, np.object_, [1, 16])
    diffs = shm.get_contents_as_numpy(out_handle, np.object_, [1, 16], offset=256)
    assert [int(x) for x in sums.reshape(-1)] == [i + 1 for i in range(16)]
    assert [int(x) for x in diffs.reshape(-1)] == [i - 1 for i in range(16)]


# ----------------------------------------------------------------------------- status / unregister


def test_status_one_and_all_then_unregister_one_and_all(client, regions):
    names = []
    for size, offset in ((128, 0), (256, 64), (64, 0)):
        name, key, _ = regions(size + offset)
        client.register_system_shared_memory(name, key, size, offset=offset)
        names.append((name, key, offset, size))

    everything = client.get_system_shared_memory_status()
    assert sorted(everything.regions) == sorted(n for n, *_ in names)
    for name, key, offset, size in names:
        status = client.get_system_shared_memory_status(name)
        assert list(status.regions) == [name]
        r = status.regions[name]
        assert (r.name, r.key, r.offset, r.byte_size) == (name, key, offset, size)

    # unregister one
    client.unregister_system_shared_memory(names[0][0])
    assert sorted(client.get_system_shared_memory_status().regions) == sorted(n for n, *_ in names[1:])
    e = error_of(client.get_system_shared_memory_status, names[0][0])
    assert e.status() == "StatusCode.NOT_FOUND"
    assert e.message() == f"Unable to find system shared memory region: '{names[0][0]}'"
    # unregistering an unknown name is not an error (Triton)
    client.unregister_system_shared_memory("never_registered")
    # unregister all
    client.unregister_system_shared_memory()
    assert len(client.get_system_shared_memory_status().regions) == 0
    # a name can be registered again after it was unregistered
    name, key, _, size = names[1]
    client.register_system_shared_memory(name, key, size, offset=names[1][2])
    assert list(client.get_system_shared_memory_status().regions) == [name]
    assert_serving(client)


def test_unregistered_region_cannot_be_used(client, regions):
    name, key, handle = regions(2 * TENSOR_BYTES)
    shm.set_shared_memory_region(handle, [np.zeros((2, 16), np.int32)])
    client.register_system_shared_memory(name, key, 2 * TENSOR_BYTES)
    client.infer("simple", shm_inputs(name))
    client.unregister_system_shared_memory(name)
    e = error_of(client.infer, "simple", shm_inputs(name))
    assert e.status() == "StatusCode.NOT_FOUND"
    assert e.message() == f"Unable to find shared memory region: '{name}'"
    assert_serving(client)


# ----------------------------------------------------------------------------- register errors


def test_register_bad_key(client):
    key = f"/fpgaserve_missing_{uuid.uuid4().hex[:12]}"
    e = error_of(client.register_system_shared_memory, "bad", key, 64)
    assert e.status() == "StatusCode.INTERNAL"
    assert e.message() == f"Unable to open shared memory region: '{key}'"
    assert len(client.get_system_shared_memory_status().regions) == 0
    assert_serving(client)


def test_register_same_name_twice(client, regions):
    name, key, _ = regions(64)
    _, key2, _ = regions(64)
    client.register_system_shared_memory(name, key, 64)
    e = error_of(client.register_system_shared_memory, name, key2, 64)
    assert e.status() == "StatusCode.ALREADY_EXISTS"
    assert e.message() == f"shared memory region '{name}' already in manager"
    # the first registration is untouched
    r = client.get_system_shared_memory_status(name).regions[name]
    assert (r.key, r.byte_size) == (key, 64)
    assert_serving(client)


@pytest.mark.parametrize(
    "offset,byte_size",
    [(0, 128), (100, 16), (32, 64)],
    ids=["size-beyond-end", "offset-beyond-end", "offset+size-beyond-end"],
)
def test_register_beyond_the_segment(client, regions, offset, byte_size):
    name, key, _ = regions(64)
    e = error_of(client.register_system_shared_memory, name, key, byte_size, offset=offset)
    assert e.status() == "StatusCode.INVALID_ARGUMENT"
    # Triton 2.51: "failed to register shared memory region '<name>': invalid args"
    assert e.message().startswith(f"failed to register shared memory region '{name}': invalid args")
    assert len(client.get_system_shared_memory_status().regions) == 0
    assert_serving(client)


def test_register_zero_byte_size(client, regions):
    name, key, _ = regions(64)
    e = error_of(client.register_system_shared_memory, name, key, 0)
    # Triton 2.51: INTERNAL "Invalid shared memory region: '<key>'"
    assert e.status() == "StatusCode.INTERNAL"
    assert e.message() == f"Invalid shared memory region: '{key}'"
    assert_serving(client)


# ----------------------------------------------------------------------------- infer-time errors


def test_infer_offset_and_size_beyond_region(client, regions):
    name, key, handle = regions(TENSOR_BYTES)
    shm.set_shared_memory_region(handle, [np.zeros((1, 16), np.int32)])
    client.register_system_shared_memory(name, key, TENSOR_BYTES)
    # INPUT1 at offset 16 + 64 bytes > the 64-byte region
    e = error_of(client.infer, "simple", shm_inputs(name, 0, 16))
    assert e.status() == "StatusCode.INVALID_ARGUMENT"
    assert e.message() == f"Invalid offset + byte size for shared memory region: '{name}'"
    # an output beyond the region is rejected too
    inputs, _ = plain_inputs()
    e = error_of(client.infer, "simple", inputs, outputs=shm_outputs(name, offset0=0, offset1=32))
    assert e.status() == "StatusCode.INVALID_ARGUMENT"
    assert e.message() == f"Invalid offset + byte size for shared memory region: '{name}'"
    assert_serving(client)


def test_infer_input_byte_size_smaller_than_tensor(client, regions):
    name, key, _handle = regions(2 * TENSOR_BYTES)
    client.register_system_shared_memory(name, key, 2 * TENSOR_BYTES)
    e = error_of(client.infer, "simple", shm_inputs(name, 0, TENSOR_BYTES, size=32))
    assert e.status() == "StatusCode.INVALID_ARGUMENT"
    assert "input byte size mismatch for input 'INPUT" in e.message()
    assert "for model 'simple'. Expected 64, got 32" in e.message()
    assert_serving(client)


def plain_inputs(seed: int = 1):
    a = np.arange(16, dtype=np.int32).reshape(1, 16) + seed
    b = np.full((1, 16), seed, dtype=np.int32)
    inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"), grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs, (a, b)


def test_output_region_too_small(client, regions):
    name, key, _handle = regions(2 * TENSOR_BYTES)
    client.register_system_shared_memory(name, key, 2 * TENSOR_BYTES)
    inputs, _ = plain_inputs()
    outputs = shm_outputs(name, size=32, offset0=0, offset1=TENSOR_BYTES)
    e = error_of(client.infer, "simple", inputs, outputs=outputs)
    # Triton 2.51: INTERNAL, this exact text
    assert e.status() == "StatusCode.INTERNAL"
    assert e.message() == (
        "shared memory size specified with the request for output 'OUTPUT0' (32 bytes) "
        "should be at least 64 bytes to hold the results"
    )
    assert_serving(client)


def test_unknown_region_in_infer_request(client, regions):
    inputs = shm_inputs("nope_region")
    e = error_of(client.infer, "simple", inputs)
    assert e.status() == "StatusCode.NOT_FOUND"
    assert e.message() == "Unable to find shared memory region: 'nope_region'"
    # unknown output region: refused before the model runs
    before = client.get_inference_statistics("simple").model_stats[0].execution_count
    inputs, _ = plain_inputs()
    e = error_of(client.infer, "simple", inputs, outputs=shm_outputs("nope_region"))
    assert e.status() == "StatusCode.NOT_FOUND"
    assert e.message() == "Unable to find shared memory region: 'nope_region'"
    assert client.get_inference_statistics("simple").model_stats[0].execution_count == before
    assert_serving(client)


def test_region_without_byte_size_parameter(client, regions):
    name, key, _ = regions(2 * TENSOR_BYTES)
    client.register_system_shared_memory(name, key, 2 * TENSOR_BYTES)
    inputs = shm_inputs(name)
    # tritonclient always sends the size; drop it to build the malformed request
    del inputs[0]._input.parameters["shared_memory_byte_size"]
    e = error_of(client.infer, "simple", inputs)
    assert e.status() == "StatusCode.INVALID_ARGUMENT"
    assert e.message() == (
        "'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for tensor 'INPUT0'"
    )
    assert_serving(client)
