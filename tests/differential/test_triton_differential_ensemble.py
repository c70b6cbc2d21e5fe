"""Differential test of ensembles: the same repositories and requests to the real Triton 2.51
and to fpgaserve, in explicit model control on both.

Triton's side runs Python-backend models (it has no ONNX Runtime), fpgaserve's the numpy and
ONNX models computing the same (tests/support/ensemble_repos.py). Compared: outputs (both protocols),
the load error of each bad ensemble (status and text), a failing step's error, the statistics
of an ensemble and of its composing models after the same requests, and what unloading and
reloading a composing model does to the ensemble.
"""

from __future__ import annotations

import re
from pathlib import Path

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
    _write,
    ensemble_config,
    step,
    write_composing,
    write_ensembles,
)
from support.reference_triton import start_tritonserver, stop_tritonserver
from support.server_process import ServerProcess, free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# ensembles only this module uses, so their statistics and states start from nothing
COUNTED = "counted"
RETIRED = "retired"
_EXTRA = {
    COUNTED: [step("scale", "IN", "mid"), step("addone", "mid", "OUT")],
    RETIRED: [step("adder_in", "IN", "mid"), step("scale", "mid", "OUT")],
}


def _write_repo(repo: Path, triton: bool) -> None:
    write_composing(repo, triton)
    write_ensembles(repo, triton)
    for name, steps in _EXTRA.items():
        _write(repo, name, ensemble_config(name, steps), {})
    # a composing model of its own for RETIRED (unloaded and reloaded below): addone's copy
    src = repo / "addone"
    (repo / "adder_in" / "1").mkdir(parents=True)
    (repo / "adder_in" / "config.pbtxt").write_text((src / "config.pbtxt").read_text().replace("addone", "adder_in"))
    (repo / "adder_in" / "1" / "model.py").write_text((src / "1" / "model.py").read_text())


@pytest.fixture(scope="module")
def servers(tritonserver_path, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("differential_ensemble")
    triton_repo, our_repo = tmp / "triton_repo", tmp / "fpgaserve_repo"
    _write_repo(triton_repo, triton=True)
    _write_repo(our_repo, triton=False)
    startup = [*GOOD, COUNTED, RETIRED]
    ports = [free_port() for _ in range(3)]
    triton = start_tritonserver(
        triton_repo,
        *ports,
        model_control_mode="explicit",
        extra_args=[f"--load-model={m}" for m in startup],
        log_path=tmp / "triton.log",
    )
    try:
        ours = ServerProcess(
            [our_repo],
            "--model-control-mode=explicit",
            *[f"--load-model={m}" for m in startup],
            log_path=tmp / "fpgaserve.log",
        ).start()
    except BaseException:
        stop_tritonserver(triton)
        raise
    try:
        yield (
            {"grpc": f"localhost:{ports[0]}", "http": f"localhost:{ports[1]}", "log": Path(triton.log_path)},
            {"grpc": ours.url, "http": f"localhost:{ours.http_port}"},
        )
    finally:
        ours.stop()
        stop_tritonserver(triton)


def _client(server, protocol):
    return (
        grpcclient.InferenceServerClient(server["grpc"])
        if protocol == "grpc"
        else httpclient.InferenceServerClient(server["http"])
    )


def _infer(server, protocol, model, x):
    module = grpcclient if protocol == "grpc" else httpclient
    inp = module.InferInput("IN", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    try:
        result = _client(server, protocol).infer(model, [inp])
    except InferenceServerException as e:
        return "error", str(e.status()), e.message()
    out = result.as_numpy("OUT")
    return "ok", out.dtype.str, out.shape, out.tobytes()


X = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize("model", list(GOOD))
def test_outputs_match_triton(servers, model, protocol):
    triton, ours = servers
    for x in (X, X[:1]):
        expected = _infer(triton, protocol, model, x)
        assert expected[0] == "ok", expected
        assert _infer(ours, protocol, model, x) == expected


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize("model", ["pipe", "diamond", "nested"])
def test_step_error_matches_triton(servers, model, protocol):
    triton, ours = servers
    bad = np.full((1, 4), BAD_VALUE, dtype=np.float32)
    expected = _infer(triton, protocol, model, bad)
    assert expected[0] == "error"
    assert _infer(ours, protocol, model, bad) == expected


def _load(server, name):
    try:
        grpcclient.InferenceServerClient(server["grpc"]).load_model(name)
    except InferenceServerException as e:
        return str(e.status()), e.message()
    return "OK", ""


@pytest.mark.parametrize("name", list(BAD))
def test_load_errors_match_triton(servers, name):
    triton, ours = servers
    expected = _load(triton, name)
    got = _load(ours, name)
    if name in CONFIG_STAGE:
        # Triton answers without the reason, which it logs; fpgaserve adds it to the answer
        assert got[0] == expected[0]
        assert got[1].startswith(expected[1] + ": ")
        logged = re.findall(
            rf"Poll failed for model directory '{name}': (.*)\"$", triton["log"].read_text(), re.MULTILINE
        )
        assert logged, "Triton logged no reason"
        assert got[1].endswith(": " + logged[-1])
    else:
        assert got == expected


def test_load_error_of_a_broken_composing_model_matches_triton(servers):
    triton, ours = servers
    expected, got = _load(triton, BROKEN_DEP), _load(ours, BROKEN_DEP)
    assert expected[0] == got[0] == "StatusCode.INVALID_ARGUMENT"
    assert expected[1].startswith(BROKEN_DEP_TEXT)
    assert got[1].startswith(BROKEN_DEP_TEXT)
    assert "dims" in got[1]


def _stats(server, model):
    s = grpcclient.InferenceServerClient(server["grpc"]).get_inference_statistics(model, as_json=True)
    s = s["model_stats"][0]
    stats = s["inference_stats"]
    return {
        "inference_count": s.get("inference_count", "0"),
        "execution_count": s.get("execution_count", "0"),
        **{k: stats[k].get("count", "0") for k in ("success", "fail", "queue", "compute_input", "compute_infer")},
        "batch_stats": sorted((b["batch_size"], b["compute_infer"]["count"]) for b in s.get("batch_stats", [])),
    }


def test_statistics_match_triton(servers):
    """The ensemble's counts after the same requests (one at a time, so that batching in the
    composing models is the same), then its composing models'."""
    triton, ours = servers
    before = {name: (_stats(triton, name), _stats(ours, name)) for name in ("scale", "addone")}
    for server in servers:
        for x in (X, X, X[:1], X[:2]):
            assert _infer(server, "grpc", COUNTED, x)[0] == "ok"
        assert _infer(server, "http", COUNTED, X[:1])[0] == "ok"
    counted = _stats(ours, COUNTED)
    assert (counted["success"], counted["inference_count"], counted["execution_count"]) == ("5", "10", "5")
    assert counted == _stats(triton, COUNTED)
    for name, (t0, o0) in before.items():
        t1, o1 = _stats(triton, name), _stats(ours, name)
        delta_t = {k: int(t1[k]) - int(t0[k]) for k in t1 if k != "batch_stats"}
        delta_o = {k: int(o1[k]) - int(o0[k]) for k in o1 if k != "batch_stats"}
        assert delta_o == delta_t, name
    # a failing step: Triton counts the failed ensemble request twice (fpgaserve does too)
    for server in servers:
        assert _infer(server, "grpc", COUNTED, np.full((1, 4), BAD_VALUE, np.float32))[0] == "error"
    counted = _stats(ours, COUNTED)
    assert counted["fail"] == "2"
    assert counted == _stats(triton, COUNTED)


def _index(server, names):
    rows = grpcclient.InferenceServerClient(server["grpc"]).get_model_repository_index(as_json=True)["models"]
    return {m["name"]: (m.get("state", ""), m.get("reason", "")) for m in rows if m["name"] in names}


def test_unloading_a_composing_model_matches_triton(servers):
    triton, ours = servers
    names = {RETIRED, "adder_in", "scale"}
    assert _index(ours, names) == _index(triton, names)
    for server in servers:
        grpcclient.InferenceServerClient(server["grpc"]).unload_model("adder_in")
    # Triton unloads in the background: wait until it is done
    import time

    deadline = time.monotonic() + 30
    while _index(triton, {"adder_in"})["adder_in"][0] == "UNLOADING" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _index(ours, names) == _index(triton, names)
    assert _infer(ours, "grpc", RETIRED, X) == _infer(triton, "grpc", RETIRED, X)
    assert _infer(ours, "http", RETIRED, X) == _infer(triton, "http", RETIRED, X)
    for server in servers:
        grpcclient.InferenceServerClient(server["grpc"]).load_model("adder_in")
    assert _index(ours, names) == _index(triton, names)
    assert _infer(ours, "grpc", RETIRED, X) == _infer(triton, "grpc", RETIRED, X)
