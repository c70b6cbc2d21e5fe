"""Ensembles (``platform: "ensemble"``) served end to end: real fpgaserve processes, both
protocols (tritonclient gRPC and HTTP), both process modes (``--frontend-processes 1``: one
process; 2: frontend processes feeding the engine over IPC).

Repositories from tests/support/ensemble_repos.py (numpy and ONNX composing models); what Triton
itself answers for the same repositories is checked in test_triton_differential_ensemble.py.
"""

from __future__ import annotations

import json
import os
import threading

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from support.ensemble_repos import (
    BAD,
    BAD_VALUE,
    BROKEN_DEP,
    BROKEN_DEP_TEXT,
    CONFIG_STAGE,
    GOOD,
    ensemble_config,
    step,
    write_composing,
    write_ensembles,
)
from support.server_process import ServerProcess, serve
from support.waiting import wait_until

pytestmark = pytest.mark.timeout(300)

X = np.arange(8, dtype=np.float32).reshape(2, 4)
EXPECTED = {
    "pipe": 2 * X + 1,
    "diamond": 2 * X + (X + 1),
    "nested": 2 * (2 * X + 1),
    "onnx_pipe": 2 * X + 1,
}


@pytest.fixture(scope="module", params=[1, 2], ids=["one-process", "frontend-processes"])
def ens_server(request, tmp_path_factory):
    repo = tmp_path_factory.mktemp("ensembles")
    write_composing(repo, triton=False)
    write_ensembles(repo)
    proc = ServerProcess(
        [repo],
        f"--frontend-processes={request.param}",
        "--strict-readiness=false",
        log_path=repo.parent / f"server-{request.param}.log",
    )
    yield from serve(proc)


def _infer(client, module, model, x, output="OUT"):
    inp = module.InferInput("IN", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return client.infer(model, [inp], outputs=[module.InferRequestedOutput(output)]).as_numpy(output)


def _grpc(server):
    return grpcclient.InferenceServerClient(server.url)


def _http(server):
    return httpclient.InferenceServerClient(f"localhost:{server.http_port}")


@pytest.mark.parametrize("model", list(GOOD))
def test_ensemble_outputs_both_protocols(ens_server, model):
    for client, module in ((_grpc(ens_server), grpcclient), (_http(ens_server), httpclient)):
        np.testing.assert_array_equal(_infer(client, module, model, X), EXPECTED[model])
        np.testing.assert_array_equal(_infer(client, module, model, X[:1]), EXPECTED[model][:1])


def test_metadata_and_config(ens_server):
    client = _grpc(ens_server)
    meta = client.get_model_metadata("pipe", as_json=True)
    assert meta["platform"] == "ensemble"
    assert meta["inputs"] == [{"name": "IN", "datatype": "FP32", "shape": ["-1", "4"]}]
    assert meta["outputs"] == [{"name": "OUT", "datatype": "FP32", "shape": ["-1", "4"]}]
    config = client.get_model_config("pipe", as_json=True)["config"]
    assert "instance_group" not in config  # Triton gives an ensemble none
    assert [s["model_name"] for s in config["ensemble_scheduling"]["step"]] == ["scale", "addone"]
    assert client.is_model_ready("pipe")


def test_bad_ensembles_unavailable_with_triton_reason(ens_server):
    index = {m["name"]: m for m in _grpc(ens_server).get_model_repository_index(as_json=True)["models"]}
    for name, (_, text) in BAD.items():
        assert index[name]["state"] == "UNAVAILABLE", name
        assert text in index[name]["reason"], (name, index[name]["reason"])
    for name in GOOD:
        assert index[name]["state"] == "READY"
    for name in ("scale", "addone", "adder", "onnx_addone"):
        assert index[name]["state"] == "READY"


def test_step_error_fails_the_request_and_the_server_keeps_serving(ens_server):
    bad = np.full((1, 4), BAD_VALUE, dtype=np.float32)
    before = _grpc(ens_server).get_inference_statistics("pipe", as_json=True)["model_stats"][0]
    for client, module, status in (
        (_grpc(ens_server), grpcclient, "StatusCode.INTERNAL"),
        (_http(ens_server), httpclient, "500"),
    ):
        with pytest.raises(InferenceServerException) as e:
            _infer(client, module, "pipe", bad)
        assert e.value.message() == "in ensemble 'pipe', negative input"
        assert str(e.value.status()) == status
        np.testing.assert_array_equal(_infer(client, module, "pipe", X), EXPECTED["pipe"])
    after = _grpc(ens_server).get_inference_statistics("pipe", as_json=True)["model_stats"][0]
    # Triton 2.51 counts each failed ensemble request twice (see engine/ensemble_scheduler.py)
    fails = int(after["inference_stats"]["fail"].get("count", 0)) - int(
        before["inference_stats"]["fail"].get("count", 0)
    )
    assert fails == 4
    successes = int(after["inference_stats"]["success"]["count"]) - int(before["inference_stats"]["success"]["count"])
    assert successes == 2


def test_concurrent_requests_batch_in_the_composing_model(ens_server):
    client = _grpc(ens_server)

    def stats(name):
        s = client.get_inference_statistics(name, as_json=True)["model_stats"][0]
        return int(s.get("inference_count", 0)), int(s.get("execution_count", 0)), s

    scale0, addone0 = stats("scale"), stats("addone")
    pipe0 = stats("pipe")
    n = 8
    results = [None] * n
    errors = []

    def run(i):
        try:
            c = grpcclient.InferenceServerClient(ens_server.url)
            results[i] = _infer(c, grpcclient, "pipe", X[:1] + i)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    for i in range(n):
        np.testing.assert_array_equal(results[i], 2 * (X[:1] + i) + 1)
    scale1, addone1, pipe1 = stats("scale"), stats("addone"), stats("pipe")
    for before, after in ((scale0, scale1), (addone0, addone1)):
        inferences = after[0] - before[0]
        executions = after[1] - before[1]
        assert inferences == n
        assert executions < inferences, "the steps of concurrent requests did not batch"
    # the ensemble itself: one execution per request, its rows as inference count
    assert pipe1[0] - pipe0[0] == n
    assert pipe1[1] - pipe0[1] == n
    batch1 = {b["batch_size"]: b for b in pipe1[2]["batch_stats"]}
    assert "1" in batch1
    # the ensemble's compute time is its steps': at least its composing models' infer time
    s = pipe1[2]["inference_stats"]
    assert int(s["compute_infer"]["ns"]) > 0
    assert int(s["queue"]["count"]) == int(s["success"]["count"])


def test_ensemble_wrong_input_is_refused_like_any_model(ens_server):
    client = _grpc(ens_server)
    with pytest.raises(InferenceServerException) as e:
        _infer(client, grpcclient, "pipe", np.zeros((2, 5), np.float32))
    assert "unexpected shape for input 'IN' for model 'pipe'" in e.value.message()


# ------------------------------------------------------------------------------ no copies

_PRODUCER = """\
import builtins

import numpy as np


class Model:
    def execute(self, inputs):
        out = inputs["X"] * 2
        builtins.fpgaserve_test_produced = out  # what the next step should get, not a copy of
        return {"Y": out}
"""

_CONSUMER = """\
import builtins

import numpy as np


class Model:
    def execute(self, inputs):
        shared = np.shares_memory(inputs["X"], builtins.fpgaserve_test_produced)
        return {"Y": np.full_like(inputs["X"], 1.0 if shared else 0.0)}
"""


@pytest.mark.parametrize("processes", [1, 2])
def test_steps_get_the_previous_steps_arrays_not_copies(tmp_path, processes):
    """The array a step's model returned is what the next step's model receives (the same
    memory), in both process modes: the ensemble passes it on without a copy."""
    repo = tmp_path / "repo"
    io = (
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    )
    for name, code in (("producer", _PRODUCER), ("consumer", _CONSUMER)):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(f'name: "{name}"\nbackend: "numpy"\nmax_batch_size: 8\n{io}')
        (repo / name / "1" / "model.py").write_text(code)
    (repo / "chain" / "1").mkdir(parents=True)
    (repo / "chain" / "config.pbtxt").write_text(
        ensemble_config("chain", [step("producer", "IN", "mid"), step("consumer", "mid", "OUT")])
    )
    with ServerProcess([repo], f"--frontend-processes={processes}", log_path=tmp_path / "server.log") as proc:
        for client, module in ((_grpc(proc), grpcclient), (_http(proc), httpclient)):
            np.testing.assert_array_equal(_infer(client, module, "chain", X), np.ones_like(X))


def test_config_override_of_an_ensemble_is_checked_too(tmp_path):
    """RepositoryModelLoad with a client's config: the same checks, the same texts."""
    repo = tmp_path / "repo"
    write_composing(repo, triton=False)
    write_ensembles(repo)
    with ServerProcess(
        [repo], "--model-control-mode=explicit", "--load-model=pipe", log_path=tmp_path / "server.log"
    ) as proc:
        client = _grpc(proc)
        config = client.get_model_config("pipe", as_json=True)["config"]
        config["ensemble_scheduling"]["step"][1]["model_name"] = "pipe"
        with pytest.raises(InferenceServerException) as e:
            client.load_model("pipe", config=json.dumps(config))
        assert e.value.message() == (
            "load failed for model 'pipe': circular dependency between ensembles: pipe -> ... -> pipe -> pipe\n"
        )
        # the loaded version keeps serving, as after any failed reload
        np.testing.assert_array_equal(_infer(client, grpcclient, "pipe", X), EXPECTED["pipe"])
        config["ensemble_scheduling"]["step"][1]["model_name"] = "adder"
        with pytest.raises(InferenceServerException) as e:
            client.load_model("pipe", config=json.dumps(config))
        assert e.value.message() == (
            "load failed for model 'pipe': in ensemble pipe, ensemble tensor mid is mapping to non-existing "
            "input X in model adder\n"
        )


# ------------------------------------------------------------------------------ explicit mode


@pytest.fixture
def explicit(tmp_path):
    repo = tmp_path / "repo"
    write_composing(repo, triton=False)
    write_ensembles(repo)
    proc = ServerProcess(
        [repo], "--model-control-mode=explicit", "--frontend-processes=2", log_path=tmp_path / "server.log"
    )
    yield from serve(proc)


def _states(client):
    return {
        m["name"]: (m.get("state", ""), m.get("reason", ""))
        for m in client.get_model_repository_index(as_json=True)["models"]
    }


def test_explicit_load_brings_composing_models_and_unload_retires_the_ensemble(explicit):
    client = _grpc(explicit)
    assert _states(client)["scale"] == ("", "")
    client.load_model("nested")  # nested -> pipe -> scale, addone
    states = _states(client)
    for name in ("nested", "pipe", "scale", "addone"):
        assert states[name][0] == "READY", (name, states)
    assert states["adder"][0] == ""
    np.testing.assert_array_equal(_infer(client, grpcclient, "nested", X), EXPECTED["nested"])

    client.unload_model("addone")
    states = _states(client)
    assert states["pipe"] == ("UNAVAILABLE", "unloaded")
    assert states["nested"] == ("UNAVAILABLE", "unloaded")
    assert states["scale"][0] == "READY"
    assert not client.is_model_ready("pipe")
    with pytest.raises(InferenceServerException) as e:
        _infer(client, grpcclient, "pipe", X)
    assert e.value.message() == "Request for unknown model: 'pipe' has no available versions"
    assert str(e.value.status()) == "StatusCode.NOT_FOUND"

    client.load_model("addone")  # the ensembles it retired come back, as in Triton
    states = _states(client)
    assert states["pipe"][0] == "READY" and states["nested"][0] == "READY", states
    np.testing.assert_array_equal(_infer(client, grpcclient, "nested", X), EXPECTED["nested"])

    client.unload_model("pipe")  # composing models stay
    states = _states(client)
    assert states["pipe"] == ("UNAVAILABLE", "unloaded")
    assert states["scale"][0] == "READY"


@pytest.mark.parametrize("name", list(BAD))
def test_explicit_load_of_a_bad_ensemble_fails_with_triton_text(explicit, name):
    client = _grpc(explicit)
    with pytest.raises(InferenceServerException) as e:
        client.load_model(name)
    text = BAD[name][1]
    if name in CONFIG_STAGE:
        assert str(e.value.status()) == "StatusCode.INTERNAL"
        assert e.value.message().startswith(f"failed to load '{name}', failed to poll from model repository")
        assert e.value.message().endswith(text)
    else:
        assert str(e.value.status()) == "StatusCode.INVALID_ARGUMENT"
        assert e.value.message() == f"load failed for model '{name}': {text}\n"
    assert _states(client)[name][0] == "UNAVAILABLE"


def test_explicit_load_of_an_ensemble_whose_composing_model_fails(explicit):
    client = _grpc(explicit)
    with pytest.raises(InferenceServerException) as e:
        client.load_model(BROKEN_DEP)
    assert str(e.value.status()) == "StatusCode.INVALID_ARGUMENT"
    assert e.value.message().startswith(BROKEN_DEP_TEXT)
    states = _states(client)
    assert states["broken"][0] == "UNAVAILABLE"
    assert states[BROKEN_DEP][0] == "UNAVAILABLE"


# ------------------------------------------------------------------------------ bundled example


def test_bundled_facile_pipeline(server):
    """bitstreams/facile_pipeline (the conftest server: conformance + bundled repositories):
    the same rows through the ensemble and through its three models one by one."""
    rng = np.random.default_rng(7)
    raw = rng.uniform(0, 8, size=(64, 47)).astype(np.float32)
    client = _grpc(server)

    def call(model, name, x, out):
        inp = grpcclient.InferInput(name, list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        return client.infer(model, [inp]).as_numpy(out)

    scaled = call("facile_scale", "raw", raw, "scaled")
    mean = np.linspace(0.0, 4.6, 47, dtype=np.float32)
    std = np.linspace(1.0, 3.3, 47, dtype=np.float32)
    np.testing.assert_array_equal(scaled, (raw - mean) / std)
    regressed = call("facile", "input", scaled, "output/BiasAdd")
    energy = call("facile_energy", "regressed", regressed, "energy")
    np.testing.assert_array_equal(energy, np.maximum(regressed * np.float32(10), 0))
    assert (energy > 0).any() and (energy == 0).any()  # both sides of the clip are exercised
    np.testing.assert_array_equal(call("facile_pipeline", "raw", raw, "energy"), energy)
    meta = client.get_model_metadata("facile_pipeline", as_json=True)
    assert meta["platform"] == "ensemble"
    assert [i["name"] for i in meta["inputs"]] == ["raw"] and [o["name"] for o in meta["outputs"]] == ["energy"]


def test_poll_mode_removing_and_restoring_a_composing_model(tmp_path):
    repo, staging = tmp_path / "repo", tmp_path / "staging"
    write_composing(repo, triton=False)
    (repo / "pipe" / "1").mkdir(parents=True)
    (repo / "pipe" / "config.pbtxt").write_text(ensemble_config("pipe", **GOOD["pipe"]))  # type: ignore[arg-type]
    with ServerProcess(
        [repo],
        "--model-control-mode=poll",
        "--repository-poll-secs=0.5",
        "--strict-readiness=false",
        log_path=tmp_path / "server.log",
    ) as proc:
        client = _grpc(proc)
        np.testing.assert_array_equal(_infer(client, grpcclient, "pipe", X), EXPECTED["pipe"])
        os.rename(repo / "addone", staging)
        wait_until(lambda: not client.is_model_ready("pipe"), what="the ensemble to go with its composing model")
        assert _states(client)["pipe"] == ("UNAVAILABLE", "unloaded")
        os.rename(staging, repo / "addone")
        wait_until(lambda: client.is_model_ready("pipe"), what="the ensemble to come back")
        np.testing.assert_array_equal(_infer(client, grpcclient, "pipe", X), EXPECTED["pipe"])


def test_latency_summaries_of_an_ensemble(tmp_path):
    """--metrics-config summaries and histograms count an ensemble's requests like any model's."""
    from support.metrics_text import metric_families, model_samples

    repo = tmp_path / "repo"
    write_composing(repo, triton=False)
    (repo / "pipe" / "1").mkdir(parents=True)
    (repo / "pipe" / "config.pbtxt").write_text(ensemble_config("pipe", **GOOD["pipe"]))  # type: ignore[arg-type]
    args = ["--metrics-config=summary_latencies=true", "--metrics-config=histogram_latencies=true"]
    with ServerProcess([repo], *args, log_path=tmp_path / "server.log") as proc:
        client = _grpc(proc)
        for _ in range(3):
            _infer(client, grpcclient, "pipe", X)
        fams = metric_families(proc.metrics_port)
        for name in ("nv_inference_request_summary_us", "nv_inference_compute_infer_summary_us"):
            assert model_samples(fams, name, "pipe")[(f"{name}_count", None, None)] == 3
        hist = "nv_inference_request_duration_histogram_us"
        assert model_samples(fams, hist, "pipe")[(f"{hist}_count", None, None)] == 3
        assert model_samples(fams, hist, "scale")[(f"{hist}_count", None, None)] == 3


def test_traced_ensemble_request(tmp_path):
    """--trace-config: a traced ensemble request gets Triton's timestamps, its compute span
    covering its steps (the steps themselves are not traced: see docs/models.md, Ensembles)."""
    from support.traces import TIMESTAMPS, traces_by_id

    repo, path = tmp_path / "repo", tmp_path / "trace.json"
    write_composing(repo, triton=False)
    (repo / "pipe" / "1").mkdir(parents=True)
    (repo / "pipe" / "config.pbtxt").write_text(ensemble_config("pipe", **GOOD["pipe"]))  # type: ignore[arg-type]
    args = [f"--trace-config=triton,file={path}", "--trace-config=level=TIMESTAMPS", "--trace-config=rate=1"]
    proc = ServerProcess([repo], *args, log_path=tmp_path / "server.log").start()
    try:
        np.testing.assert_array_equal(_infer(_grpc(proc), grpcclient, "pipe", X), EXPECTED["pipe"])
    finally:
        assert proc.stop() == 0
    (trace,) = traces_by_id(json.loads(path.read_text())).values()
    assert trace["head"]["model_name"] == "pipe"
    assert [x["name"] for x in trace["timestamps"]] == TIMESTAMPS
    ns = [x["ns"] for x in trace["timestamps"]]
    assert ns == sorted(ns)
