"""``reshape`` in config.pbtxt (model_config.proto ModelTensorReshape), as Triton applies it.

Clients send and receive each tensor with the config's ``dims``; the backend receives inputs
and produces outputs with ``reshape.shape`` (the batch dimension kept). The models here report
the shapes they were given as outputs, so every test sees what the backend saw. Real servers
on loopback, real tritonclient; the last test compares with the real Triton 2.51, whose Python
backend also sees the reshaped shapes.
"""

from __future__ import annotations

import asyncio
import shutil

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from fpgaserve.protos import inference as pb
from support.reference_triton import start_tritonserver, stop_tritonserver
from support.server_process import ServerProcess, free_port
from support.shm_regions import shm_regions

# X [4] -> [2, 2] and S [1] -> [] (a scalar per row) in; Y produced as [4], served as [2, 2];
# T produced as [] per row, served as [1]. SHAPES reports what the backend got, per row:
# X's item shape, X's rank and S's rank (batch dimension included).
RESHAPER_IO = """
max_batch_size: 8
input [
  { name: "X" data_type: TYPE_FP32 dims: [ 4 ] reshape: { shape: [ 2, 2 ] } },
  { name: "S" data_type: TYPE_FP32 dims: [ 1 ] reshape: { shape: [ ] } }
]
output [
  { name: "Y" data_type: TYPE_FP32 dims: [ 2, 2 ] reshape: { shape: [ 4 ] } },
  { name: "T" data_type: TYPE_FP32 dims: [ 1 ] reshape: { shape: [ ] } },
  { name: "SHAPES" data_type: TYPE_INT64 dims: [ 4 ] }
]
"""

RESHAPER_NUMPY = """
import numpy as np


class Model:
    def execute(self, inputs):
        x, s = inputs["X"], inputs["S"]
        rows = x.shape[0]
        shapes = np.array([*x.shape[1:], x.ndim, s.ndim], dtype=np.int64)
        return {
            "Y": x.reshape(rows, -1) + s[:, None],
            "T": x.reshape(rows, -1).sum(axis=1) * s,
            "SHAPES": np.tile(shapes, (rows, 1)),
        }
"""

RESHAPER_PYTHON = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            s = pb_utils.get_input_tensor_by_name(request, "S").as_numpy()
            rows = x.shape[0]
            shapes = np.array([*x.shape[1:], x.ndim, s.ndim], dtype=np.int64)
            outputs = [
                pb_utils.Tensor("Y", (x.reshape(rows, -1) + s[:, None]).astype(np.float32)),
                pb_utils.Tensor("T", (x.reshape(rows, -1).sum(axis=1) * s).astype(np.float32)),
                pb_utils.Tensor("SHAPES", np.tile(shapes, (rows, 1))),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
"""

# no batching; variable dims: V [2, 3, -1] -> [6, -1] in, W produced as [2, 3, -1] and
# served as [6, -1]; VSHAPE is V's shape as the backend got it
VARIABLE_IO = """
max_batch_size: 0
input [ { name: "V" data_type: TYPE_INT32 dims: [ 2, 3, -1 ] reshape: { shape: [ 6, -1 ] } } ]
output [
  { name: "W" data_type: TYPE_INT32 dims: [ 6, -1 ] reshape: { shape: [ 2, 3, -1 ] } },
  { name: "VSHAPE" data_type: TYPE_INT64 dims: [ 2 ] }
]
"""

VARIABLE_NUMPY = """
import numpy as np


class Model:
    def execute(self, inputs):
        v = inputs["V"]
        return {"W": v.reshape(2, 3, -1) * 10, "VSHAPE": np.array(v.shape, dtype=np.int64)}
"""

VARIABLE_PYTHON = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            v = pb_utils.get_input_tensor_by_name(request, "V").as_numpy()
            outputs = [
                pb_utils.Tensor("W", (v.reshape(2, 3, -1) * 10).astype(np.int32)),
                pb_utils.Tensor("VSHAPE", np.array(v.shape, dtype=np.int64)),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
"""

# an ensemble over the reshaping model declares its tensors with the model's client dims
ENSEMBLE = """
name: "reshape_pipeline"
platform: "ensemble"
max_batch_size: 8
input [
  { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "SCALE" data_type: TYPE_FP32 dims: [ 1 ] }
]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2, 2 ] }, { name: "TOTAL" data_type: TYPE_FP32 dims: [ 1 ] } ]
ensemble_scheduling {
  step [
    {
      model_name: "reshaper"
      model_version: -1
      input_map { key: "X" value: "IN" }
      input_map { key: "S" value: "SCALE" }
      output_map { key: "Y" value: "OUT" }
      output_map { key: "T" value: "TOTAL" }
    }
  ]
}
"""


def _write(repo, name, config, code=None):
    (repo / name / "1").mkdir(parents=True, exist_ok=True)
    (repo / name / "config.pbtxt").write_text(config)
    if code is not None:
        (repo / name / "1" / "model.py").write_text(code)


# reports whether the backend's X owns its memory: a reshape made as a view never does (a
# lone request's X is a view on the request bytes, a batch's on the joined batch)
VIEWER_CONFIG = """
name: "viewer"
backend: "numpy"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_INT32 dims: [ 6 ] reshape: { shape: [ 3, 2 ] } } ]
output [ { name: "OWNS" data_type: TYPE_BOOL dims: [ 1 ] }, { name: "Y" data_type: TYPE_INT32 dims: [ 6 ] } ]
dynamic_batching { max_queue_delay_microseconds: 20000 }
"""

VIEWER_NUMPY = """
import numpy as np


class Model:
    def execute(self, inputs):
        x = inputs["X"]
        assert x.shape[1:] == (3, 2)
        return {"OWNS": np.full((len(x), 1), x.flags.owndata), "Y": x.reshape(len(x), 6)}
"""


def write_numpy_repo(repo):
    batcher = "dynamic_batching { max_queue_delay_microseconds: 20000 }\n"
    _write(repo, "reshaper", f'name: "reshaper"\nbackend: "numpy"\n{RESHAPER_IO}{batcher}', RESHAPER_NUMPY)
    _write(repo, "variable", f'name: "variable"\nbackend: "numpy"\n{VARIABLE_IO}', VARIABLE_NUMPY)
    _write(repo, "reshape_pipeline", ENSEMBLE)
    (repo / "reshape_pipeline" / "1").mkdir(exist_ok=True)
    _write(repo, "viewer", VIEWER_CONFIG, VIEWER_NUMPY)


def write_triton_repo(repo):
    _write(repo, "reshaper", f'name: "reshaper"\nbackend: "python"\n{RESHAPER_IO}', RESHAPER_PYTHON)
    _write(repo, "variable", f'name: "variable"\nbackend: "python"\n{VARIABLE_IO}', VARIABLE_PYTHON)
    _write(repo, "reshape_pipeline", ENSEMBLE)
    (repo / "reshape_pipeline" / "1").mkdir(exist_ok=True)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("reshape")
    write_numpy_repo(repo)
    with ServerProcess([repo], "--allow-client-shm=true", log_path=repo / "server.log") as proc:
        yield proc


def expected_reshaper(x: np.ndarray, s: np.ndarray):
    """What a client of ``reshaper`` gets for X [rows, 4] and S [rows, 1]."""
    rows = x.shape[0]
    y = (x + s).reshape(rows, 2, 2)
    t = (x.sum(axis=1) * s[:, 0]).reshape(rows, 1)
    return y, t, np.tile([2, 2, 3, 1], (rows, 1))


def _reshaper_inputs(module, x, s):
    inputs = [module.InferInput("X", list(x.shape), "FP32"), module.InferInput("S", list(s.shape), "FP32")]
    inputs[0].set_data_from_numpy(x)
    inputs[1].set_data_from_numpy(s)
    return inputs


@pytest.mark.timeout(60)
def test_grpc_batched_requests_see_reshaped_tensors(server):
    """Concurrent requests of different batch sizes (the dynamic batcher joins them): the
    backend gets [rows, 2, 2] and [rows], each client gets Y as [rows, 2, 2] and T as [rows, 1]."""
    rng = np.random.default_rng(3)
    sizes = [int(n) for n in rng.integers(1, 4, size=24)]

    async def run():
        client = aioclient.InferenceServerClient(server.url)

        async def one(rows):
            x = rng.random((rows, 4), dtype=np.float32)
            s = rng.random((rows, 1), dtype=np.float32)
            r = await client.infer("reshaper", _reshaper_inputs(aioclient, x, s))
            return x, s, r

        try:
            return await asyncio.gather(*[one(n) for n in sizes])
        finally:
            await client.close()

    for x, s, r in asyncio.run(run()):
        y, t, shapes = expected_reshaper(x, s)
        assert r.get_output("Y").shape == list(y.shape)
        assert r.get_output("T").shape == list(t.shape)
        np.testing.assert_allclose(r.as_numpy("Y"), y, rtol=1e-6)
        np.testing.assert_allclose(r.as_numpy("T"), t, rtol=1e-5)
        assert r.as_numpy("SHAPES").tolist() == shapes.tolist()


@pytest.mark.timeout(60)
def test_inputs_are_reshaped_as_views(server):
    """Alone or batched with others, the backend's reshaped X is a view, not a copy."""

    async def run():
        client = aioclient.InferenceServerClient(server.url)

        async def one(i):
            x = np.arange(6 * i, 6 * i + 12, dtype=np.int32).reshape(2, 6)
            inp = aioclient.InferInput("X", [2, 6], "INT32")
            inp.set_data_from_numpy(x)
            r = await client.infer("viewer", [inp])
            return x, r.as_numpy("OWNS"), r.as_numpy("Y")

        try:
            return await asyncio.gather(*[one(i) for i in range(8)])
        finally:
            await client.close()

    for x, owns, y in asyncio.run(run()):
        assert not owns.any()
        np.testing.assert_array_equal(y, x)


@pytest.mark.timeout(60)
def test_http_reshape_binary_and_json(server):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    s = np.array([[1.0], [2.0], [-1.0]], dtype=np.float32)
    y, t, shapes = expected_reshaper(x, s)
    with httpclient.InferenceServerClient(f"localhost:{server.http_port}") as client:
        for binary in (True, False):
            outputs = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("Y", "T", "SHAPES")]
            r = client.infer("reshaper", _reshaper_inputs(httpclient, x, s), outputs=outputs)
            assert r.get_output("Y")["shape"] == [3, 2, 2]
            assert r.get_output("T")["shape"] == [3, 1]
            np.testing.assert_array_equal(r.as_numpy("Y"), y)
            np.testing.assert_allclose(r.as_numpy("T"), t, rtol=1e-6)
            assert r.as_numpy("SHAPES").tolist() == shapes.tolist()


@pytest.mark.timeout(60)
def test_variable_dims_map_in_order(server):
    """V [2, 3, n] reaches the backend as [6, n]; W made as [2, 3, n] is served as [6, n]."""
    with grpcclient.InferenceServerClient(server.url) as client:
        for n in (1, 5):
            v = np.arange(6 * n, dtype=np.int32).reshape(2, 3, n)
            inp = grpcclient.InferInput("V", [2, 3, n], "INT32")
            inp.set_data_from_numpy(v)
            r = client.infer("variable", [inp])
            assert r.as_numpy("VSHAPE").tolist() == [6, n]
            assert r.get_output("W").shape == [6, n]
            np.testing.assert_array_equal(r.as_numpy("W"), v.reshape(6, n) * 10)


@pytest.mark.timeout(60)
def test_client_shapes_are_still_checked_against_dims(server):
    """A request shaped like the reshape (not like dims) is refused, as Triton does."""
    with grpcclient.InferenceServerClient(server.url) as client:
        x = np.zeros((1, 2, 2), dtype=np.float32)
        s = np.zeros((1, 1), dtype=np.float32)
        with pytest.raises(InferenceServerException) as e:
            client.infer("reshaper", _reshaper_inputs(grpcclient, x, s))
        assert e.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert "unexpected shape for input 'X'" in e.value.message()


@pytest.mark.timeout(60)
def test_metadata_and_config_show_dims(server):
    with grpcclient.InferenceServerClient(server.url) as client:
        meta = client.get_model_metadata("reshaper", as_json=True)
        assert {t["name"]: t["shape"] for t in meta["inputs"]} == {"X": ["-1", "4"], "S": ["-1", "1"]}
        assert {t["name"]: t["shape"] for t in meta["outputs"]} == {
            "Y": ["-1", "2", "2"],
            "T": ["-1", "1"],
            "SHAPES": ["-1", "4"],
        }
        config = client.get_model_config("reshaper", as_json=True)["config"]
        x = next(t for t in config["input"] if t["name"] == "X")
        assert x["dims"] == ["4"] and x["reshape"]["shape"] == ["2", "2"]
        s = next(t for t in config["input"] if t["name"] == "S")
        assert s["reshape"] == {}  # the scalar reshape, kept as written


@pytest.mark.timeout(60)
def test_shared_memory_outputs_get_client_dims(server):
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    s = np.array([[2.0], [3.0]], dtype=np.float32)
    y, t, _ = expected_reshaper(x, s)
    with shm_regions("reshape_", "fpgaserve_reshape_") as make, grpcclient.InferenceServerClient(server.url) as client:
        name, key, handle = make(y.nbytes + t.nbytes)
        client.register_system_shared_memory(name, key, y.nbytes + t.nbytes)
        try:
            outputs = [grpcclient.InferRequestedOutput("Y"), grpcclient.InferRequestedOutput("T")]
            outputs[0].set_shared_memory(name, y.nbytes)
            outputs[1].set_shared_memory(name, t.nbytes, offset=y.nbytes)
            r = client.infer("reshaper", _reshaper_inputs(grpcclient, x, s), outputs=outputs)
            assert r.get_output("Y").shape == [2, 2, 2]
            assert r.get_output("T").shape == [2, 1]
            np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.float32, [2, 2, 2]), y)
            got_t = shm.get_contents_as_numpy(handle, np.float32, [2, 1], offset=y.nbytes)
            np.testing.assert_allclose(got_t, t, rtol=1e-6)
        finally:
            client.unregister_system_shared_memory(name)


@pytest.mark.timeout(60)
def test_ensemble_over_a_reshaping_model(server):
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    s = np.array([[1.0], [0.5]], dtype=np.float32)
    y, t, _ = expected_reshaper(x, s)
    with grpcclient.InferenceServerClient(server.url) as client:
        inputs = [grpcclient.InferInput("IN", [2, 4], "FP32"), grpcclient.InferInput("SCALE", [2, 1], "FP32")]
        inputs[0].set_data_from_numpy(x)
        inputs[1].set_data_from_numpy(s)
        r = client.infer("reshape_pipeline", inputs)
        np.testing.assert_array_equal(r.as_numpy("OUT"), y)
        np.testing.assert_allclose(r.as_numpy("TOTAL"), t, rtol=1e-6)


WRONG_OUTPUT = """
import numpy as np


class Model:
    def execute(self, inputs):
        return {"Y": inputs["X"].reshape(-1, 2, 2)}  # the client's dims, not the reshape
"""

BAD_CONFIGS = {
    "element count": (
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] reshape: { shape: [ 3 ] } } ]',
        "input 'X' has a different element count in dims [4] and reshape [3]",
    ),
    "variable dims": (
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ -1, 2 ] reshape: { shape: [ 2, 2 ] } } ]',
        "input 'X' has a different number of variable-size dimensions in dims [-1, 2] and reshape [2, 2]",
    ),
    "variable chunks": (
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 2, -1, 3 ] reshape: { shape: [ 3, -1, 2 ] } } ]',
        "input 'X' has a different element count in dims [2, -1, 3] and reshape [3, -1, 2]",
    ),
    "scalar of two": (
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 2 ] reshape: { shape: [ ] } } ]',
        "input 'X' has a different element count in dims [2] and reshape []",
    ),
    "zero": (
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] reshape: { shape: [ 0 ] } } ]',
        "input 'X' reshape dimensions must be positive or -1, got [0]",
    ),
}


@pytest.fixture(scope="module")
def explicit_server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("reshape_bad")
    for case, (io, _) in BAD_CONFIGS.items():
        name = "bad_" + case.replace(" ", "_")
        config = f'name: "{name}"\nbackend: "numpy"\nmax_batch_size: 4\n{io}\n'
        config += 'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        _write(repo, name, config, RESHAPER_NUMPY)
    _write(
        repo,
        "bad_empty_unbatched",
        'name: "bad_empty_unbatched"\nbackend: "numpy"\nmax_batch_size: 0\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] reshape: { shape: [ ] } } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n',
        RESHAPER_NUMPY,
    )
    _write(
        repo,
        "wrong_output",
        'name: "wrong_output"\nbackend: "numpy"\nmax_batch_size: 4\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2, 2 ] reshape: { shape: [ 4 ] } } ]\n',
        WRONG_OUTPUT,
    )
    args = ("--model-control-mode", "explicit")
    with ServerProcess([repo], *args, log_path=repo / "server.log") as proc:
        yield proc


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", list(BAD_CONFIGS) + ["empty unbatched"])
def test_bad_reshape_fails_the_load(explicit_server, case):
    name = "bad_" + case.replace(" ", "_")
    expected = (
        "input 'X' cannot have an empty reshape in a model without batching (max_batch_size 0)"
        if case == "empty unbatched"
        else BAD_CONFIGS[case][1]
    )
    with grpcclient.InferenceServerClient(explicit_server.url) as client:
        with pytest.raises(InferenceServerException) as e:
            client.load_model(name)
        assert expected in e.value.message()
        assert client.is_server_live()


@pytest.mark.timeout(60)
def test_output_in_client_dims_instead_of_reshape_is_an_error(explicit_server):
    with grpcclient.InferenceServerClient(explicit_server.url) as client:
        client.load_model("wrong_output")
        inp = grpcclient.InferInput("X", [1, 4], "FP32")
        inp.set_data_from_numpy(np.zeros((1, 4), dtype=np.float32))
        with pytest.raises(InferenceServerException) as e:
            client.infer("wrong_output", [inp])
        assert e.value.status() == "StatusCode.INTERNAL"
        assert "has shape [1, 2, 2], but the model configuration declares [-1, 4]" in e.value.message()


# ----------------------------------------------------------------------------- the real Triton


def _raw_infer(url: str, request) -> tuple:
    """(OK, outputs as (name, datatype, shape), their raw bytes), or (code, message, []), of one
    ModelInfer."""
    with grpc.insecure_channel(url) as channel:
        stub = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer",
            request_serializer=None,
            response_deserializer=pb.ModelInferResponse.FromString,
        )
        try:
            response = stub(request.SerializeToString(), timeout=30)
        except grpc.RpcError as e:
            return e.code(), e.details(), []
    outputs = sorted((o.name, o.datatype, list(o.shape)) for o in response.outputs)
    raw = dict(zip([o.name for o in response.outputs], response.raw_output_contents))
    return grpc.StatusCode.OK, outputs, [raw[name] for name, _, _ in outputs]


def _request(model: str, tensors: dict[str, np.ndarray], datatypes: dict[str, str]):
    request = pb.ModelInferRequest(model_name=model)
    for name, array in tensors.items():
        t = request.inputs.add()
        t.name, t.datatype = name, datatypes[name]
        t.shape.extend(array.shape)
        request.raw_input_contents.append(array.tobytes())
    return request


DIFFERENTIAL_REQUESTS = [
    (
        "reshaper",
        {"X": np.arange(4, dtype=np.float32).reshape(1, 4), "S": np.ones((1, 1), dtype=np.float32)},
        {"X": "FP32", "S": "FP32"},
    ),
    (
        "reshaper",
        {"X": np.arange(12, dtype=np.float32).reshape(3, 4), "S": np.full((3, 1), 2, dtype=np.float32)},
        {"X": "FP32", "S": "FP32"},
    ),
    ("variable", {"V": np.arange(6, dtype=np.int32).reshape(2, 3, 1)}, {"V": "INT32"}),
    ("variable", {"V": np.arange(24, dtype=np.int32).reshape(2, 3, 4)}, {"V": "INT32"}),
    (
        "reshape_pipeline",
        {"IN": np.arange(8, dtype=np.float32).reshape(2, 4), "SCALE": np.ones((2, 1), dtype=np.float32)},
        {"IN": "FP32", "SCALE": "FP32"},
    ),
    # shaped like the reshape rather than dims: refused by both
    (
        "reshaper",
        {"X": np.zeros((1, 2, 2), dtype=np.float32), "S": np.ones((1, 1), dtype=np.float32)},
        {"X": "FP32", "S": "FP32"},
    ),
]


# an ensemble declaring the composing model's reshape shapes instead of its dims: both refuse it
RESHAPE_SHAPED_ENSEMBLE = "reshape_shaped_pipeline"


def _load(url: str, name: str) -> tuple[str, str]:
    with grpcclient.InferenceServerClient(url) as client:
        try:
            client.load_model(name)
        except InferenceServerException as e:
            return str(e.status()), e.message()
    return "OK", ""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_reshape_matches_triton(tmp_path):
    """The same requests to Triton 2.51 (Python-backend models) and to fpgaserve (numpy-backend
    models): identical output names, datatypes, shapes and bytes (the models return the shapes
    they were given), identical errors, and the same load error for an ensemble that declares
    a composing model's reshape shape."""
    from support.reference_triton import find_tritonserver

    if find_tritonserver() is None:
        pytest.skip("the real Triton 2.51 is not installed (.tools/tritonserver)")
    triton_repo, our_repo = tmp_path / "triton", tmp_path / "ours"
    write_triton_repo(triton_repo)
    write_numpy_repo(our_repo)
    shaped = ENSEMBLE.replace("reshape_pipeline", RESHAPE_SHAPED_ENSEMBLE).replace(
        'name: "IN" data_type: TYPE_FP32 dims: [ 4 ]', 'name: "IN" data_type: TYPE_FP32 dims: [ 2, 2 ]'
    )
    for repo in (triton_repo, our_repo):
        _write(repo, RESHAPE_SHAPED_ENSEMBLE, shaped)
    startup = [f"--load-model={m}" for m in ("reshaper", "variable", "reshape_pipeline")]
    ports = [free_port() for _ in range(3)]
    triton = start_tritonserver(
        triton_repo, *ports, model_control_mode="explicit", extra_args=startup, log_path=tmp_path / "triton.log"
    )
    try:
        args = ("--model-control-mode=explicit", *startup)
        with ServerProcess([our_repo], *args, log_path=tmp_path / "ours.log") as ours:
            for model, tensors, datatypes in DIFFERENTIAL_REQUESTS:
                request = _request(model, tensors, datatypes)
                expected = _raw_infer(f"localhost:{ports[0]}", request)
                got = _raw_infer(ours.url, request)
                assert got == expected, (model, {k: v.shape for k, v in tensors.items()})
            expected_load = _load(f"localhost:{ports[0]}", RESHAPE_SHAPED_ENSEMBLE)
            assert expected_load[0] == "StatusCode.INVALID_ARGUMENT"
            assert _load(ours.url, RESHAPE_SHAPED_ENSEMBLE) == expected_load
    finally:
        stop_tritonserver(triton)
    shutil.rmtree(triton_repo, ignore_errors=True)


@pytest.mark.timeout(240)
def test_hls4ml_output_reshape(tmp_path):
    """The hls4ml backend makes an output with its reshape shape: FACILE with its [1] output
    reshaped to a scalar per row answers exactly as FACILE does (numpy emulation)."""
    from support.server_process import BUNDLED_REPO

    shutil.copytree(BUNDLED_REPO / "facile", tmp_path / "facile")
    shutil.copytree(BUNDLED_REPO / "facile", tmp_path / "facile_scalar")
    config = (tmp_path / "facile" / "config.pbtxt").read_text()
    config = config.replace('name: "facile"', 'name: "facile_scalar"')
    config = config.replace("dims: [ 1 ]", "dims: [ 1 ]\n    reshape: { shape: [ ] }")
    assert "reshape" in config
    (tmp_path / "facile_scalar" / "config.pbtxt").write_text(config)
    x = np.random.default_rng(5).standard_normal((5, 47)).astype(np.float32)
    results = {}
    with ServerProcess([tmp_path], "--fpga-mode", "numpy", log_path=tmp_path / "server.log") as proc:
        for model in ("facile", "facile_scalar"):
            inp = grpcclient.InferInput("input", [5, 47], "FP32")
            inp.set_data_from_numpy(x)
            with grpcclient.InferenceServerClient(proc.url) as client:
                results[model] = client.infer(model, [inp]).as_numpy("output/BiasAdd")
    assert results["facile_scalar"].shape == (5, 1)
    np.testing.assert_array_equal(results["facile_scalar"], results["facile"])
