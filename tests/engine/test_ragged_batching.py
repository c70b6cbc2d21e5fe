"""Ragged batching with batch_input and batch_output tensors (Triton's ragged_batching.md).

Requests of different lengths share a batch; the model receives the ragged input as one
1-D tensor plus the batch_input tensors the config asks for, and must be able to split it
back per request, or returns one tensor for the whole batch that the server scatters back
(batch_output). Whatever batches the load produces, every request's answer has to come
from its own elements.
"""

from __future__ import annotations

import asyncio
import queue

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from tritonclient.utils import InferenceServerException

from support.server_process import ServerProcess

CONFIG = """
name: "ragged_sum"
backend: "numpy"
max_batch_size: 64
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
batch_input [
  { kind: BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO target_name: "OFFSETS" data_type: TYPE_INT32 source_input: "X" },
  { kind: BATCH_ELEMENT_COUNT target_name: "COUNTS" data_type: TYPE_INT64 source_input: "X" },
  { kind: BATCH_ITEM_SHAPE target_name: "SHAPES" data_type: TYPE_INT32 source_input: "X" },
  { kind: BATCH_MAX_ELEMENT_COUNT_AS_SHAPE target_name: "MAXSHAPE" data_type: TYPE_INT32 source_input: "X" }
]
output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 1 ] }, { name: "N" data_type: TYPE_INT64 dims: [ 1 ] } ]
dynamic_batching { max_queue_delay_microseconds: 2000 }
"""

MODEL_PY = """
import numpy as np

class Model:
    def execute(self, inputs):
        x, offsets, counts = inputs["X"], inputs["OFFSETS"], inputs["COUNTS"]
        shapes, maxshape = inputs["SHAPES"], inputs["MAXSHAPE"]
        assert x.ndim == 1 and offsets[0] == 0 and offsets[-1] == x.size
        assert np.array_equal(np.diff(offsets), counts)
        assert np.array_equal(shapes[:, 0], counts)
        assert maxshape.shape == (counts.max(),)
        sums = np.add.reduceat(x, offsets[:-1]) if x.size else np.zeros(len(counts), np.float32)
        return {"SUM": sums.reshape(-1, 1).astype(np.float32), "N": counts.reshape(-1, 1)}
"""


# batch_output: the model answers the whole ragged batch with one tensor, element for element
# (Y = 2 X + the request's index in the batch, so a request given another's elements, or the
# right elements in the wrong order, gets wrong values); the server scatters Y to each request
# shaped as that request's X
SCATTER_CONFIG = """
name: "ragged_scatter"
backend: "numpy"
max_batch_size: 64
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
batch_input [
  { kind: BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO target_name: "OFFSETS" data_type: TYPE_INT32 source_input: "X" }
]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]
batch_output [ { target_name: "Y" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "X" } ]
dynamic_batching { max_queue_delay_microseconds: 2000 }
"""

SCATTER_PY = """
import numpy as np

class Model:
    def execute(self, inputs):
        x, offsets = inputs["X"], inputs["OFFSETS"]
        assert x.ndim == 1 and offsets[-1] == x.size
        index = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets)).astype(np.float32)
        return {"Y": 2 * x + index}
"""


@pytest.fixture(scope="module")
def ragged_server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("ragged")
    (repo / "ragged_sum" / "1").mkdir(parents=True)
    (repo / "ragged_sum" / "config.pbtxt").write_text(CONFIG)
    (repo / "ragged_sum" / "1" / "model.py").write_text(MODEL_PY)
    (repo / "ragged_scatter" / "1").mkdir(parents=True)
    (repo / "ragged_scatter" / "config.pbtxt").write_text(SCATTER_CONFIG)
    (repo / "ragged_scatter" / "1" / "model.py").write_text(SCATTER_PY)
    with ServerProcess([repo], log_path=repo / "server.log") as proc:
        yield proc


@pytest.mark.timeout(60)
def test_each_request_gets_its_own_slice(ragged_server):
    rng = np.random.default_rng(7)
    lengths = rng.integers(1, 40, size=120)

    async def run():
        client = aioclient.InferenceServerClient(ragged_server.url)

        async def one(n):
            x = rng.random((1, n), dtype=np.float32)
            inp = aioclient.InferInput("X", [1, n], "FP32")
            inp.set_data_from_numpy(x)
            r = await client.infer("ragged_sum", [inp])
            return x, r.as_numpy("SUM"), r.as_numpy("N")

        try:
            results = await asyncio.gather(*[one(int(n)) for n in lengths])
            stats = await client.get_inference_statistics("ragged_sum", as_json=True)
        finally:
            await client.close()
        return results, stats

    results, stats = asyncio.run(run())
    for x, total, n in results:
        assert n.tolist() == [[x.size]]
        np.testing.assert_allclose(total, [[x.sum()]], rtol=1e-5)
    s = stats["model_stats"][0]
    assert int(s["inference_count"]) == len(lengths)
    print("executions:", s["execution_count"], "for", len(lengths), "requests")


@pytest.mark.timeout(60)
def test_batch_output_scatters_with_each_request_shape(ragged_server):
    """Requests of 1 or 2 rows and different lengths: each gets Y shaped as its own X, made
    from its own elements (2 X + its place in the batch, so the place must be consistent)."""
    rng = np.random.default_rng(11)
    shapes = [(int(r), int(n)) for r, n in zip(rng.integers(1, 3, size=80), rng.integers(1, 30, size=80))]

    async def run():
        client = aioclient.InferenceServerClient(ragged_server.url)

        async def one(shape):
            x = rng.integers(0, 1000, size=shape).astype(np.float32)
            inp = aioclient.InferInput("X", list(shape), "FP32")
            inp.set_data_from_numpy(x)
            r = await client.infer("ragged_scatter", [inp])
            return x, r.get_output("Y").shape, r.as_numpy("Y")

        try:
            return await asyncio.gather(*[one(s) for s in shapes])
        finally:
            await client.close()

    for x, shape, y in asyncio.run(run()):
        assert shape == list(x.shape)
        place = y - 2 * x
        # the same whole number everywhere: the request's index within its batch
        assert np.all(place == place.flat[0]) and place.flat[0] == int(place.flat[0]) >= 0


BAD_BATCH_OUTPUTS = {
    "unknown_target": (
        'batch_output [ { target_name: "NOPE" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "X" } ]',
        "batch_output 0 target_name 'NOPE' is not an output of the model",
    ),
    "unknown_source": (
        'batch_output [ { target_name: "Y" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "Z" } ]',
        "batch_output 0 source_input 'Z' is not an input of the model",
    ),
    "two_sources": (
        'batch_output [ { target_name: "Y" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: [ "X", "X" ] } ]',
        "batch_output 0 must name exactly one 'source_input', got 2",
    ),
    "unknown_kind": (
        'batch_output [ { target_name: "Y" kind: 7 source_input: "X" } ]',
        "batch_output 0 has unsupported kind 7; the only kind is BATCH_SCATTER_WITH_INPUT_SHAPE",
    ),
    "no_target": (
        'batch_output [ { kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "X" } ]',
        "batch_output 0 must specify 'target_name'",
    ),
}


@pytest.fixture(scope="module")
def explicit_server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("ragged_bad")
    for name, (block, _) in BAD_BATCH_OUTPUTS.items():
        config = SCATTER_CONFIG.replace("ragged_scatter", name)
        config = config[: config.index("batch_output")] + block + "\n"
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(config)
        (repo / name / "1" / "model.py").write_text(SCATTER_PY)
    (repo / "scatter_short" / "1").mkdir(parents=True)
    (repo / "scatter_short" / "config.pbtxt").write_text(SCATTER_CONFIG.replace("ragged_scatter", "scatter_short"))
    (repo / "scatter_short" / "1" / "model.py").write_text(SHORT_PY)
    with ServerProcess([repo], "--model-control-mode=explicit", log_path=repo / "server.log") as proc:
        yield proc


# one element short of what the batch's X hold: nothing to scatter from
SHORT_PY = """
class Model:
    def execute(self, inputs):
        return {"Y": inputs["X"][:-1]}
"""


@pytest.mark.timeout(60)
def test_batch_output_of_the_wrong_size_fails_the_request(explicit_server):
    with grpcclient.InferenceServerClient(explicit_server.url) as client:
        client.load_model("scatter_short")
        inp = grpcclient.InferInput("X", [1, 5], "FP32")
        inp.set_data_from_numpy(np.ones((1, 5), dtype=np.float32))
        with pytest.raises(InferenceServerException) as e:
            client.infer("scatter_short", [inp])
        assert e.value.status() == "StatusCode.INTERNAL"
        assert (
            "output 'Y' of model 'scatter_short' has 4 elements, but its batch_output scatters 5 "
            "(the elements of input 'X' in the batch)" in e.value.message()
        )
        assert client.is_model_ready("scatter_short")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", list(BAD_BATCH_OUTPUTS))
def test_bad_batch_output_fails_the_load(explicit_server, name):
    with grpcclient.InferenceServerClient(explicit_server.url) as client:
        with pytest.raises(InferenceServerException) as e:
            client.load_model(name)
        assert BAD_BATCH_OUTPUTS[name][1] in e.value.message()
        assert client.is_server_live()


# a ragged input with a reshape: its BATCH_ITEM_SHAPE is each request's shape as the backend
# sees it, reshaped ([n, 4] -> [n, 2, 2]), as Triton's batch inputs read the normalized shape
ITEMS_CONFIG = """
name: "ragged_items"
backend: "numpy"
max_batch_size: 64
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1, 4 ] reshape: { shape: [ -1, 2, 2 ] } allow_ragged_batch: true } ]
batch_input [ { kind: BATCH_ITEM_SHAPE target_name: "SHAPES" data_type: TYPE_INT32 source_input: "X" } ]
output [ { name: "ITEMS" data_type: TYPE_INT32 dims: [ 3 ] } ]
dynamic_batching { max_queue_delay_microseconds: 2000 }
"""

ITEMS_PY = """
class Model:
    def execute(self, inputs):
        assert inputs["X"].ndim == 1
        return {"ITEMS": inputs["SHAPES"]}
"""


@pytest.mark.timeout(60)
def test_item_shape_of_a_reshaped_ragged_input(tmp_path):
    (tmp_path / "ragged_items" / "1").mkdir(parents=True)
    (tmp_path / "ragged_items" / "config.pbtxt").write_text(ITEMS_CONFIG)
    (tmp_path / "ragged_items" / "1" / "model.py").write_text(ITEMS_PY)
    lengths = [1, 3, 7, 2, 5, 9, 4, 6]

    async def run(url):
        client = aioclient.InferenceServerClient(url)

        async def one(n):
            inp = aioclient.InferInput("X", [1, n, 4], "FP32")
            inp.set_data_from_numpy(np.zeros((1, n, 4), dtype=np.float32))
            return (await client.infer("ragged_items", [inp])).as_numpy("ITEMS")

        try:
            return await asyncio.gather(*[one(n) for n in lengths])
        finally:
            await client.close()

    with ServerProcess([tmp_path], log_path=tmp_path / "server.log") as proc:
        items = asyncio.run(run(proc.url))
    assert [i.tolist() for i in items] == [[[n, 2, 2]] for n in lengths]


DECOUPLED_SCATTER_CONFIG = """
name: "decoupled_scatter"
backend: "numpy"
max_batch_size: 8
model_transaction_policy { decoupled: true }
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]
batch_output [ { target_name: "Y" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "X" } ]
"""

# two responses, each one flat tensor for the request's elements
DECOUPLED_SCATTER_PY = """
class Model:
    def execute(self, inputs):
        x = inputs["X"].reshape(-1)
        yield {"Y": x + 1}
        yield {"Y": x + 2}
"""


@pytest.mark.timeout(60)
def test_batch_output_of_a_decoupled_model(tmp_path):
    """Each response a decoupled model yields is scattered with the request's X shape."""
    (tmp_path / "decoupled_scatter" / "1").mkdir(parents=True)
    (tmp_path / "decoupled_scatter" / "config.pbtxt").write_text(DECOUPLED_SCATTER_CONFIG)
    (tmp_path / "decoupled_scatter" / "1" / "model.py").write_text(DECOUPLED_SCATTER_PY)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    responses: queue.Queue = queue.Queue()
    with ServerProcess([tmp_path], log_path=tmp_path / "server.log") as proc:
        client = grpcclient.InferenceServerClient(proc.url)
        client.start_stream(callback=lambda result, error: responses.put(error or result))
        try:
            inp = grpcclient.InferInput("X", [2, 3], "FP32")
            inp.set_data_from_numpy(x)
            client.async_stream_infer("decoupled_scatter", [inp])
            got = [responses.get(timeout=30) for _ in range(2)]
        finally:
            client.stop_stream()
            client.close()
    for step, result in enumerate(got, start=1):
        assert not isinstance(result, Exception), result
        np.testing.assert_array_equal(result.as_numpy("Y"), x + step)
