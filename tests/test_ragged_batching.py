"""Ragged batching with batch_input tensors (Triton's ragged_batching.md).

Requests of different lengths share a batch; the model receives the ragged input as one
1-D tensor plus the batch_input tensors the config asks for, and must be able to split it
back per request. Whatever batches the load produces, every request's answer has to come
from its own elements.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import tritonclient.grpc.aio as aioclient

from server_process import ServerProcess

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


@pytest.fixture(scope="module")
def ragged_server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("ragged")
    (repo / "ragged_sum" / "1").mkdir(parents=True)
    (repo / "ragged_sum" / "config.pbtxt").write_text(CONFIG)
    (repo / "ragged_sum" / "1" / "model.py").write_text(MODEL_PY)
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
