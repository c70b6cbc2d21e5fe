"""Differential test of ``unload_dependents``: the same repository, loads and unloads on the
real Triton 2.51 and on fpgaserve (explicit model control), over gRPC and over HTTP; the
repository index is compared after each unload.

What Triton does (and so fpgaserve): an ensemble unloaded with ``unload_dependents`` takes its
composing models with it, recursively through nested ensembles, except a composing model
another loaded ensemble still uses and one a load request named (at startup or later).
Triton's side runs Python-backend models, fpgaserve's numpy ones computing the same.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from support.ensemble_repos import _BATCHING, _IO, _NUMPY, _TRITON, _write, ensemble_config, step
from support.reference_triton import start_tritonserver, stop_tritonserver
from support.server_process import ServerProcess, free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

COMPOSING = ("solo_a", "solo_b", "shared", "shared_b", "named")
ENSEMBLES = {
    # its composing models are its alone: they go with it
    "solo": [step("solo_a", "IN", "m"), step("solo_b", "m", "OUT")],
    # "shared" is also share2's: it stays while share2 is loaded
    "share1": [step("shared", "IN", "m"), step("shared_b", "m", "OUT")],
    "share2": [step("shared", "IN", "OUT")],
    # "named" is loaded by a request of its own: it stays
    "with_named": [step("named", "IN", "OUT")],
    # an ensemble of an ensemble: both levels go
    "outer": [("solo", -1, {"IN": "IN"}, {"OUT": "OUT"})],
}
STARTUP = ["named", "with_named", "solo", "share1", "share2"]


def _write_repo(repo: Path, triton: bool) -> None:
    backend = "python" if triton else "numpy"
    code = (_TRITON if triton else _NUMPY).format(expr="X + 1")
    for name in COMPOSING:
        _write(repo, name, f'name: "{name}"\nbackend: "{backend}"\n{_BATCHING}{_IO}', {"model.py": code})
    for name, steps in ENSEMBLES.items():
        _write(repo, name, ensemble_config(name, steps), {})


@pytest.fixture
def servers(tritonserver_path, tmp_path):
    triton_repo, our_repo = tmp_path / "triton_repo", tmp_path / "fpgaserve_repo"
    _write_repo(triton_repo, triton=True)
    _write_repo(our_repo, triton=False)
    ports = [free_port() for _ in range(3)]
    startup = [f"--load-model={m}" for m in STARTUP]
    triton = start_tritonserver(
        triton_repo, *ports, model_control_mode="explicit", extra_args=startup, log_path=tmp_path / "triton.log"
    )
    try:
        ours = ServerProcess(
            [our_repo], "--model-control-mode=explicit", *startup, log_path=tmp_path / "fpgaserve.log"
        ).start()
    except BaseException:
        stop_tritonserver(triton)
        raise
    try:
        yield (
            {"grpc": f"localhost:{ports[0]}", "http": f"localhost:{ports[1]}"},
            {"grpc": ours.url, "http": f"localhost:{ours.http_port}"},
        )
    finally:
        ours.stop()
        stop_tritonserver(triton)


def _client(server, protocol):
    if protocol == "grpc":
        return grpcclient.InferenceServerClient(server["grpc"])
    return httpclient.InferenceServerClient(server["http"])


def _index(server) -> dict[str, tuple[str, str]]:
    rows = grpcclient.InferenceServerClient(server["grpc"]).get_model_repository_index(as_json=True)["models"]
    return {m["name"]: (m.get("state", ""), m.get("reason", "")) for m in rows}


def _same_index_after(servers, protocol, action, *args, **kwargs) -> dict[str, tuple[str, str]]:
    triton, ours = servers
    for server in servers:
        getattr(_client(server, protocol), action)(*args, **kwargs)
    # Triton unloads in the background: wait until its index settles on ours (or give up and
    # let the comparison show the difference)
    deadline = time.monotonic() + 30
    while _index(triton) != _index(ours) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _index(ours) == _index(triton)
    return _index(ours)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_unload_dependents_matches_triton(servers, protocol):
    triton, ours = servers
    assert _index(ours) == _index(triton)

    index = _same_index_after(servers, protocol, "unload_model", "solo", unload_dependents=True)
    assert index["solo_a"] == ("UNAVAILABLE", "unloaded") and index["solo_b"] == ("UNAVAILABLE", "unloaded")

    index = _same_index_after(servers, protocol, "unload_model", "share1", unload_dependents=True)
    assert index["shared"] == ("READY", "") and index["shared_b"] == ("UNAVAILABLE", "unloaded")

    index = _same_index_after(servers, protocol, "unload_model", "with_named", unload_dependents=True)
    assert index["named"] == ("READY", "")

    # the nested ensemble loads solo and its models again, implicitly: all of them go with it
    _same_index_after(servers, protocol, "load_model", "outer")
    index = _same_index_after(servers, protocol, "unload_model", "outer", unload_dependents=True)
    assert index["solo"] == ("UNAVAILABLE", "unloaded") and index["solo_a"] == ("UNAVAILABLE", "unloaded")

    # without the flag a composing model stays, as before
    _same_index_after(servers, protocol, "load_model", "share1")
    index = _same_index_after(servers, protocol, "unload_model", "share1")
    assert index["shared_b"] == ("READY", "")

    # a composing model unloaded with the flag: its ensembles are retired, nothing else goes
    index = _same_index_after(servers, protocol, "unload_model", "shared", unload_dependents=True)
    assert index["share2"] == ("UNAVAILABLE", "unloaded") and index["shared_b"] == ("READY", "")


def test_unload_dependents_of_the_wrong_type_is_refused_like_triton(servers):
    """gRPC: a non-bool ``unload_dependents`` is refused with Triton's status and text; the
    model stays loaded on both. (Over HTTP Triton 2.51 answers 200 to a non-bool value, where
    fpgaserve keeps refusing it with 400: not compared here.)"""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    results = []
    for server in servers:
        with grpc.insecure_channel(server["grpc"]) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            request = service_pb2.RepositoryModelUnloadRequest(model_name="solo")
            request.parameters["unload_dependents"].string_param = "true"
            try:
                stub.RepositoryModelUnload(request)
                results.append("ok")
            except grpc.RpcError as e:
                results.append((e.code(), e.details()))
    assert results[0] == results[1]
    assert results[0][0] == grpc.StatusCode.INVALID_ARGUMENT, results
    assert _index(servers[0])["solo"] == _index(servers[1])["solo"] == ("READY", "")
