"""Decoupled models (model_transaction_policy.decoupled): several responses per request,
streamed over ModelStreamInfer as the model yields them (Triton's repeat_int32 contract)."""

from __future__ import annotations

import queue
from functools import partial

import pytest
from tritonclient.utils import InferenceServerException

from support.repeat_int32 import repeat_inputs


def _collect(client, n_expected, **kwargs):
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=partial(lambda q, result, error: q.put(error or result), results))
    try:
        client.async_stream_infer("repeat_int32", **kwargs)
        got = [results.get(timeout=30) for _ in range(n_expected)]
    finally:
        client.stop_stream()
    return got


@pytest.mark.timeout(60)
def test_each_yield_is_one_response_in_order(client):
    values = [100 + i for i in range(10)]
    got = _collect(client, 10, inputs=repeat_inputs(values), request_id="rep-1")
    for i, r in enumerate(got):
        assert not isinstance(r, InferenceServerException), r
        assert r.as_numpy("OUT").tolist() == [values[i]]
        assert r.as_numpy("IDX").tolist() == [i]
        resp = r.get_response()
        assert resp.id == "rep-1"
        assert resp.parameters["triton_final_response"].bool_param is False


@pytest.mark.timeout(60)
def test_empty_final_response_only_when_asked(client):
    got = _collect(client, 4, inputs=repeat_inputs([7, 8, 9]), request_id="rep-2", enable_empty_final_response=True)
    assert [r.as_numpy("OUT").tolist() for r in got[:3]] == [[7], [8], [9]]
    final = got[3].get_response()
    assert final.id == "rep-2"
    assert final.parameters["triton_final_response"].bool_param is True
    assert len(final.outputs) == 0


@pytest.mark.timeout(60)
def test_zero_responses_then_final(client):
    got = _collect(client, 1, inputs=repeat_inputs([]), enable_empty_final_response=True)
    assert got[0].get_response().parameters["triton_final_response"].bool_param is True


def test_unary_infer_on_decoupled_model_is_refused(client):
    with pytest.raises(InferenceServerException) as e:
        client.infer("repeat_int32", repeat_inputs([1, 2]))
    assert e.value.status() == "StatusCode.UNIMPLEMENTED"
    assert "doesn't support models with decoupled transaction policy" in e.value.message()
    assert client.is_server_live()
