"""Model repository behaviour of a real ``fpgaserve`` process, with tmp repositories.

Bad configurations, strict readiness, the three control modes (none, explicit, poll),
version policies, ONNX auto-complete and numpy-backend failures. Models come from
``tests/models`` (copied with shutil.copytree) or are written here as small numpy models.
Expected texts follow triton-protocol.md §5/§8 and .tools/notes/triton-2.51-behaviour.md.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from support.server_process import CONFORMANCE_REPO, ServerProcess

pytestmark = pytest.mark.timeout(90)

# ----------------------------------------------------------------------------- helpers

NUMPY_IDENTITY_CONFIG = """
name: "{name}"
backend: "numpy"
max_batch_size: 8
{extra}
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 4 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 4 ] }} ]
"""

# OUT = IN + 1000 * version: a response tells which version folder ran
VERSIONED_MODEL_PY = """
class Model:
    def execute(self, inputs):
        return {{"OUT": inputs["IN"] + {offset}}}
"""

RAISING_MODEL_PY = """
class Model:
    def execute(self, inputs):
        x = inputs["IN"]
        if (x < 0).any():
            raise ValueError(f"negative input not allowed: {int(x.min())}")
        return {"OUT": x * 2}
"""

IMPORT_ERROR_MODEL_PY = """
import fpgaserve_no_such_module_xyz


class Model:
    def execute(self, inputs):
        return {"OUT": inputs["IN"]}
"""


def numpy_model(repo: Path, name: str, versions=(1,), model_py: str | None = None, extra: str = "") -> Path:
    d = repo / name
    d.mkdir(parents=True)
    (d / "config.pbtxt").write_text(NUMPY_IDENTITY_CONFIG.format(name=name, extra=extra))
    for v in versions:
        (d / str(v)).mkdir()
        (d / str(v) / "model.py").write_text(model_py or VERSIONED_MODEL_PY.format(offset=1000 * v))
    return d


def copy_models(repo: Path, *names: str) -> None:
    for n in names:
        shutil.copytree(CONFORMANCE_REPO / n, repo / n)


def index_of(client) -> dict[str, list[tuple[str, str, str]]]:
    """name -> [(version, state, reason), ...] from RepositoryIndex."""
    rows: dict[str, list] = {}
    for m in client.get_model_repository_index().models:
        rows.setdefault(m.name, []).append((m.version, m.state, m.reason))
    return rows


def ready_index(url: str) -> list[str]:
    """RepositoryIndex {ready: true} (tritonclient has no argument for it): the names listed."""
    with grpc.insecure_channel(url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        response = stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(ready=True), timeout=10)
    return [m.name for m in response.models]


def int_input(values, name="IN"):
    arr = np.asarray(values, dtype=np.int32)
    x = grpcclient.InferInput(name, list(arr.shape), "INT32")
    x.set_data_from_numpy(arr)
    return [x]


def simple_inputs(batch: int = 1, seed: int = 0):
    a = (np.arange(16, dtype=np.int32) + seed).reshape(1, 16).repeat(batch, axis=0)
    b = np.full((batch, 16), 2, dtype=np.int32)
    inputs = [
        grpcclient.InferInput("INPUT0", [batch, 16], "INT32"),
        grpcclient.InferInput("INPUT1", [batch, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs, a + b, a - b


def check_simple(client, name: str = "simple", batch: int = 1) -> None:
    inputs, s, d = simple_inputs(batch)
    r = client.infer(name, inputs)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), s)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), d)


def error_of(fn, *args, **kwargs) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as e:
        fn(*args, **kwargs)
    return e.value


def wait_for(predicate, timeout: float = 20.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except InferenceServerException as e:
            last = e
        if last is True or (last and not isinstance(last, Exception)):
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


class Server:
    """ServerProcess + client; stops the process and checks its exit status."""

    def __init__(self, tmp_path: Path, repo: Path, *args: str, wait_ready: bool = True):
        self.proc = ServerProcess([repo], *args, log_path=tmp_path / f"fpgaserve-{time.monotonic_ns()}.log")
        self.proc.start(wait_ready=wait_ready)
        self.client = grpcclient.InferenceServerClient(self.proc.url)

    def close(self):
        self.client.close()
        rc = self.proc.stop()
        assert rc == 0, f"server exited with {rc}: {self.proc.log()}"


@pytest.fixture
def start(tmp_path):
    servers: list[Server] = []

    def _start(repo: Path, *args: str, wait_ready: bool = True) -> Server:
        s = Server(tmp_path, repo, *args, wait_ready=wait_ready)
        servers.append(s)
        return s

    yield _start
    for s in servers:
        s.close()


# ----------------------------------------------------------------------------- bad configurations

BAD_MODELS = {
    # name: (what to write, substring the reason must contain besides the file)
    "bad_syntax": "failed to parse",
    "bad_backend": "unknown backend 'no_such_backend'",
    "no_version": "no version folder",
    "name_mismatch": "does not match its directory name 'name_mismatch'",
    "import_error": "fpgaserve_no_such_module_xyz",
    "bad_instance_process": "parameter instance_process is 'maybe'; it takes true",
}


@pytest.fixture
def bad_repo(tmp_path) -> Path:
    repo = tmp_path / "bad_repo"
    repo.mkdir()
    copy_models(repo, "simple", "simple_identity")
    d = numpy_model(repo, "bad_syntax")
    (d / "config.pbtxt").write_text('name: "bad_syntax"\nbackend: "numpy"\nmax_batch_size: 8\ninput [ { name: "IN" ')
    d = numpy_model(repo, "bad_backend")
    (d / "config.pbtxt").write_text(
        (d / "config.pbtxt").read_text().replace('backend: "numpy"', 'backend: "no_such_backend"')
    )
    d = numpy_model(repo, "no_version")
    shutil.rmtree(d / "1")
    d = numpy_model(repo, "name_mismatch")
    (d / "config.pbtxt").write_text(
        (d / "config.pbtxt").read_text().replace('name: "name_mismatch"', 'name: "another_name"')
    )
    numpy_model(repo, "import_error", model_py=IMPORT_ERROR_MODEL_PY)
    numpy_model(
        repo, "bad_instance_process", extra='parameters { key: "instance_process" value: { string_value: "maybe" } }'
    )
    return repo


def _check_bad_repo(server: Server, repo: Path) -> None:
    client = server.client
    index = index_of(client)
    for name in ("simple", "simple_identity"):
        assert index[name] == [("1", "READY", "")], index[name]
        assert client.is_model_ready(name)
    for name, problem in BAD_MODELS.items():
        rows = index[name]
        assert len(rows) == 1, rows
        _version, state, reason = rows[0]
        assert state == "UNAVAILABLE", rows
        assert f"failed to load '{name}'" in reason, reason
        if name == "import_error":
            assert str(repo / name / "1" / "model.py") in reason, reason
            assert "ModuleNotFoundError" in reason, reason
        else:
            assert str(repo / name / "config.pbtxt") in reason, reason
        assert problem in reason, reason
        assert not client.is_model_ready(name)
        e = error_of(client.infer, name, int_input([[1, 2, 3, 4]]))
        assert e.status() == "StatusCode.NOT_FOUND"
        assert e.message().startswith(f"Request for unknown model: '{name}'"), e.message()
    # the good models serve
    check_simple(client)
    assert sorted(ready_index(server.proc.url)) == ["simple", "simple_identity"]


def test_bad_configs_unavailable_with_reason_strict_readiness(start, bad_repo):
    server = start(bad_repo, wait_ready=False)
    client = server.client
    assert client.is_server_live()
    _check_bad_repo(server, bad_repo)
    assert client.is_server_ready() is False
    assert server.proc.http_status("/v2/health/ready") == 400
    # NONE mode: load / unload RPCs are refused
    for fn in (client.load_model, client.unload_model):
        e = error_of(fn, "simple")
        assert e.status() == "StatusCode.UNAVAILABLE"
        assert e.message() == "explicit model load / unload is not allowed if polling is enabled"
    assert client.is_model_ready("simple")


def test_bad_configs_with_strict_readiness_false(start, bad_repo):
    server = start(bad_repo, "--strict-readiness=false")
    _check_bad_repo(server, bad_repo)
    assert server.client.is_server_ready() is True
    assert server.proc.http_status("/v2/health/ready") == 200


# ----------------------------------------------------------------------------- explicit mode


@pytest.fixture
def full_repo(tmp_path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    copy_models(repo, "simple", "simple_int8", "simple_string", "simple_identity")
    return repo


def test_explicit_mode_load_unload(start, full_repo):
    server = start(full_repo, "--model-control-mode", "explicit", "--load-model", "simple")
    client = server.client
    index = index_of(client)
    assert index["simple"] == [("1", "READY", "")]
    # models present but never loaded are listed by name only (Triton 2.51)
    for name in ("simple_int8", "simple_string", "simple_identity"):
        assert index[name] == [("", "", "")], index[name]
        assert not client.is_model_ready(name)
    assert ready_index(server.proc.url) == ["simple"]
    e = error_of(client.infer, "simple_int8", simple_inputs()[0])
    assert e.status() == "StatusCode.NOT_FOUND"
    assert e.message() == "Request for unknown model: 'simple_int8' is not found"
    assert client.is_server_ready()
    check_simple(client)

    # load another model
    client.load_model("simple_identity")
    assert client.is_model_ready("simple_identity")
    x = grpcclient.InferInput("INPUT0", [1, 2], "BYTES")
    x.set_data_from_numpy(np.array([[b"a\x00b", b""]], dtype=object))
    out = client.infer("simple_identity", [x]).as_numpy("OUTPUT0")
    assert out.tolist() == [[b"a\x00b", b""]]
    # loading an already-loaded model is OK
    client.load_model("simple_identity")
    assert client.is_model_ready("simple_identity")

    # unload
    client.unload_model("simple_identity")
    assert not client.is_model_ready("simple_identity")
    assert not client.is_model_ready("simple_identity", "1")
    rows = wait_for(
        lambda: index_of(client)["simple_identity"] == [("1", "UNAVAILABLE", "unloaded")],
        what="simple_identity UNAVAILABLE/unloaded",
    )
    assert rows
    e = error_of(client.infer, "simple_identity", [x])
    assert e.status() == "StatusCode.NOT_FOUND"
    assert e.message() == "Request for unknown model: 'simple_identity' has no available versions"
    e = error_of(client.infer, "simple_identity", [x], model_version="1")
    assert e.status() == "StatusCode.UNAVAILABLE"
    assert e.message() == "Request for unknown model: 'simple_identity' version 1 is not at ready state"
    # a deliberately unloaded model keeps the server ready; unloading again / unknown is OK
    assert client.is_server_ready()
    client.unload_model("simple_identity")
    client.unload_model("nonexistent")
    # and it can be loaded again
    client.load_model("simple_identity")
    assert client.is_model_ready("simple_identity")
    check_simple(client)


def test_explicit_mode_config_override(start, full_repo):
    server = start(full_repo, "--model-control-mode", "explicit", "--load-model", "simple")
    client = server.client
    assert client.get_model_config("simple").config.max_batch_size == 8

    # simple_grpc_model_control.py: an override with only max_batch_size (as a string);
    # the rest (platform, inputs, outputs) is auto-completed from model.onnx, as Triton does
    client.load_model("simple", config=json.dumps({"max_batch_size": "16"}))
    config = client.get_model_config("simple").config
    assert config.max_batch_size == 16
    assert [i.name for i in config.input] == ["INPUT0", "INPUT1"]
    assert [list(i.dims) for i in config.input] == [[16], [16]]
    check_simple(client, batch=12)

    # a full override of a numpy model: the new batch limit is enforced
    override = {
        "name": "simple_identity",
        "backend": "numpy",
        "max_batch_size": 2,
        "input": [{"name": "INPUT0", "data_type": "TYPE_STRING", "dims": [-1]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_STRING", "dims": [-1]}],
    }
    client.load_model("simple_identity", config=json.dumps(override))
    assert client.get_model_config("simple_identity").config.max_batch_size == 2
    x = grpcclient.InferInput("INPUT0", [3, 1], "BYTES")
    x.set_data_from_numpy(np.array([[b"a"], [b"b"], [b"c"]], dtype=object))
    e = error_of(client.infer, "simple_identity", [x])
    assert e.status() == "StatusCode.INVALID_ARGUMENT"
    assert "inference request batch-size must be <= 2 for 'simple_identity'" in e.message()

    # a malformed override fails the load and names the model; the loaded one keeps serving
    e = error_of(client.load_model, "simple", config='"parameters": {"config": {{"max_batch_size": "16"}}}')
    assert e.status() == "StatusCode.INTERNAL"
    assert "failed to load 'simple'" in e.message()
    assert client.is_model_ready("simple")
    assert client.get_model_config("simple").config.max_batch_size == 16
    check_simple(client)


def test_explicit_mode_load_missing_model(start, full_repo):
    server = start(full_repo, "--model-control-mode", "explicit", "--load-model", "simple")
    client = server.client
    for name in ("nonexistent", ""):
        e = error_of(client.load_model, name)
        assert e.status() == "StatusCode.INTERNAL"
        assert e.message() == f"failed to load '{name}', failed to poll from model repository"
    assert client.is_server_ready()
    check_simple(client)


def test_explicit_mode_load_broken_model(start, full_repo):
    d = numpy_model(full_repo, "broken")
    (d / "config.pbtxt").write_text("name: 'broken' max_batch_size: ][")
    server = start(full_repo, "--model-control-mode", "explicit", "--load-model", "simple")
    client = server.client
    e = error_of(client.load_model, "broken")
    assert e.status() == "StatusCode.INTERNAL"
    assert "failed to load 'broken'" in e.message()
    assert not client.is_model_ready("broken")
    check_simple(client)


def test_explicit_mode_star_loads_all(start, full_repo):
    server = start(full_repo, "--model-control-mode", "explicit", "--load-model", "*")
    client = server.client
    index = index_of(client)
    assert sorted(index) == ["simple", "simple_identity", "simple_int8", "simple_string"]
    for name, rows in index.items():
        assert rows == [("1", "READY", "")], (name, rows)
        assert client.is_model_ready(name)
    check_simple(client)


# ----------------------------------------------------------------------------- poll mode


def test_poll_mode_add_remove_change(start, tmp_path, full_repo):
    shutil.rmtree(full_repo / "simple_identity")
    staging = tmp_path / "staging"
    staging.mkdir()
    server = start(full_repo, "--model-control-mode", "poll", "--repository-poll-secs", "1")
    client = server.client
    assert not client.is_model_ready("simple_identity")
    e = error_of(client.load_model, "simple")
    assert e.status() == "StatusCode.UNAVAILABLE"
    assert e.message() == "explicit model load / unload is not allowed if polling is enabled"

    # add: build the folder elsewhere, then move it in at once
    shutil.copytree(CONFORMANCE_REPO / "simple_identity", staging / "simple_identity")
    os.rename(staging / "simple_identity", full_repo / "simple_identity")
    wait_for(lambda: client.is_model_ready("simple_identity"), what="the added model to load")
    x = grpcclient.InferInput("INPUT0", [1, 1], "BYTES")
    x.set_data_from_numpy(np.array([[b"polled"]], dtype=object))
    assert client.infer("simple_identity", [x]).as_numpy("OUTPUT0").tolist() == [[b"polled"]]

    # remove
    shutil.rmtree(full_repo / "simple_int8")
    wait_for(lambda: not client.is_model_ready("simple_int8"), what="the removed model to unload")
    e = error_of(client.infer, "simple_int8", simple_inputs()[0])
    assert e.status() in ("StatusCode.NOT_FOUND", "StatusCode.UNAVAILABLE")
    assert e.message().startswith("Request for unknown model: 'simple_int8'")

    # change config.pbtxt: max_batch_size 8 -> 4
    config = full_repo / "simple" / "config.pbtxt"
    text = config.read_text()
    assert "max_batch_size: 8" in text
    tmp = full_repo / "simple" / "config.pbtxt.tmp"
    tmp.write_text(text.replace("max_batch_size: 8", "max_batch_size: 4"))
    os.replace(tmp, config)
    wait_for(lambda: client.get_model_config("simple").config.max_batch_size == 4, what="the reload")
    check_simple(client, batch=4)
    e = error_of(client.infer, "simple", simple_inputs(batch=5)[0])
    assert e.status() == "StatusCode.INVALID_ARGUMENT"
    assert "inference request batch-size must be <= 4 for 'simple'" in e.message()
    assert client.is_server_ready()


# ----------------------------------------------------------------------------- version policy, ONNX, numpy


@pytest.fixture
def misc_server(start, tmp_path):
    repo = tmp_path / "misc_repo"
    repo.mkdir()
    numpy_model(repo, "latest2", versions=(1, 2, 3), extra="version_policy: { latest: { num_versions: 2 } }")
    numpy_model(repo, "default_policy", versions=(1, 2, 3))
    numpy_model(repo, "all_versions", versions=(1, 2, 3), extra="version_policy: { all: {} }")
    numpy_model(repo, "specific13", versions=(1, 2, 3), extra="version_policy: { specific: { versions: [1, 3] } }")
    # ignored folders: non-numeric, and names starting with "0"
    (repo / "default_policy" / "07").mkdir()
    (repo / "default_policy" / "notes").mkdir()
    numpy_model(repo, "raising", model_py=RAISING_MODEL_PY)
    # ONNX model whose config omits inputs and outputs
    (repo / "auto_simple" / "1").mkdir(parents=True)
    shutil.copy(CONFORMANCE_REPO / "simple" / "1" / "model.onnx", repo / "auto_simple" / "1" / "model.onnx")
    (repo / "auto_simple" / "config.pbtxt").write_text(
        'name: "auto_simple"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
    )
    return start(repo)


def _run_version(client, model: str, version: str):
    r = client.infer(model, int_input([[1, 2, 3, 4]]), model_version=version)
    out = r.as_numpy("OUT")
    return r.get_response().model_version, int(out[0, 0]) // 1000


@pytest.mark.parametrize(
    "model,ready,absent",
    [
        ("latest2", [2, 3], [1]),
        ("default_policy", [3], [1, 2]),
        ("all_versions", [1, 2, 3], []),
        ("specific13", [1, 3], [2]),
    ],
)
def test_version_policy(misc_server, model, ready, absent):
    client = misc_server.client
    for v in ready:
        assert client.is_model_ready(model, str(v))
        assert _run_version(client, model, str(v)) == (str(v), v)
    for v in absent:
        assert not client.is_model_ready(model, str(v))
        e = error_of(client.infer, model, int_input([[1, 2, 3, 4]]), model_version=str(v))
        assert e.status() == "StatusCode.NOT_FOUND"
        assert e.message() == f"Request for unknown model: '{model}' version {v} is not found"
    # version "" picks the highest ready version
    assert _run_version(client, model, "") == (str(max(ready)), max(ready))
    assert list(client.get_model_metadata(model).versions) == [str(v) for v in ready]
    rows = index_of(client)[model]
    assert [(v, s) for v, s, _ in rows] == [(str(v), "READY") for v in ready]
    stats = client.get_inference_statistics(model)
    assert sorted(s.version for s in stats.model_stats) == sorted(str(v) for v in ready)


def test_ignored_version_folders(misc_server):
    client = misc_server.client
    assert not client.is_model_ready("default_policy", "7")
    assert client.is_model_ready("default_policy", "3")


def test_onnx_auto_complete(misc_server):
    client = misc_server.client
    assert client.is_model_ready("auto_simple")
    config = client.get_model_config("auto_simple").config
    assert config.max_batch_size == 8
    assert [(i.name, i.data_type, list(i.dims)) for i in config.input] == [
        ("INPUT0", 8, [16]),  # TYPE_INT32 = 8
        ("INPUT1", 8, [16]),
    ]
    assert [(o.name, o.data_type, list(o.dims)) for o in config.output] == [
        ("OUTPUT0", 8, [16]),
        ("OUTPUT1", 8, [16]),
    ]
    meta = client.get_model_metadata("auto_simple")
    assert meta.platform == "onnxruntime_onnx"
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.inputs] == [
        ("INPUT0", "INT32", [-1, 16]),
        ("INPUT1", "INT32", [-1, 16]),
    ]
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.outputs] == [
        ("OUTPUT0", "INT32", [-1, 16]),
        ("OUTPUT1", "INT32", [-1, 16]),
    ]
    check_simple(client, "auto_simple", batch=3)


def test_numpy_execute_raises(misc_server):
    client = misc_server.client
    r = client.infer("raising", int_input([[1, 2, 3, 4]]))
    np.testing.assert_array_equal(r.as_numpy("OUT"), [[2, 4, 6, 8]])
    e = error_of(client.infer, "raising", int_input([[1, -5, 3, 4]]))
    assert e.status() == "StatusCode.INTERNAL"
    assert "negative input not allowed: -5" in e.message()
    # the model stays loaded and the next request succeeds
    assert client.is_model_ready("raising")
    assert index_of(client)["raising"] == [("1", "READY", "")]
    r = client.infer("raising", int_input([[5, 6, 7, 8], [0, 0, 0, 1]]))
    np.testing.assert_array_equal(r.as_numpy("OUT"), [[10, 12, 14, 16], [0, 0, 0, 2]])
    stats = client.get_inference_statistics("raising").model_stats[0]
    assert stats.inference_stats.success.count == 2
    assert stats.inference_stats.fail.count == 1
    assert client.is_server_ready()
