"""Faulty models and configs that point outside their model directory, against a real server.

* Model code that raises ``SystemExit``/``KeyboardInterrupt`` (in execute, at import, in
  initialize), returns outputs of the wrong shape, rows, data type or range, or raises a
  100 KB error text: that batch (or that load) fails with a clear status; the server keeps
  serving everything else.
* A model whose ``execute`` hangs: unloading it does not block the repository (another model
  loads, the index answers, while the unload is still waiting), and after
  ``--model-unload-timeout-secs`` the stuck instance is abandoned and reported, its requests
  fail with UNAVAILABLE, and the server is ready again.
* Paths a config names (``default_model_filename``, ``label_filename``, the hls4ml ``xclbin``
  parameter, ``file:`` upload paths), symlinks out of the model directory, ONNX external data
  outside the model, model names with separators: every one is refused at load with a clear
  error, and the file outside is neither imported nor read (a marker file proves it).
* ``file:`` uploads that the server would run as code (a numpy ``model.py``) are refused
  unless the server was started with ``--allow-model-code-upload=true``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from support.server_process import CONFORMANCE_REPO, ServerProcess

pytestmark = pytest.mark.timeout(180)

CONFIG = """
name: "{name}"
backend: "numpy"
max_batch_size: 8
input [ {{ name: "IN" data_type: {dtype} dims: [ 4 ] }} ]
output [ {{ name: "OUT" data_type: {dtype} dims: [ 4 ] {extra} }} ]
"""

MODELS = {
    "raise_systemexit": "raise SystemExit(3)",
    "raise_keyboardinterrupt": 'raise KeyboardInterrupt("stop")',
    "call_sys_exit": "import sys; sys.exit()",
    "huge_error": 'raise ValueError("E" * 100_000)',
    "wrong_dims": 'return {"OUT": np.zeros((len(inputs["IN"]), 3), np.int32)}',
    "wrong_rank": 'return {"OUT": np.zeros((len(inputs["IN"]), 4, 1), np.int32)}',
    "wrong_rows": 'return {"OUT": np.zeros((len(inputs["IN"]) + 1, 4), np.int32)}',
    "wrong_dtype": 'return {"OUT": np.array([["a"] * 4] * len(inputs["IN"]))}',
    "not_a_dict": 'return [inputs["IN"]]',
    "good": 'return {"OUT": inputs["IN"] * 2}',
}

MODEL_PY = """
import numpy as np


class Model:
    def execute(self, inputs):
        {body}
"""


def write_model(
    repo: Path, name: str, body: str, dtype: str = "TYPE_INT32", extra: str = "", model_py: str | None = None
):
    d = repo / name
    (d / "1").mkdir(parents=True)
    (d / "config.pbtxt").write_text(CONFIG.format(name=name, dtype=dtype, extra=extra))
    (d / "1" / "model.py").write_text(model_py if model_py is not None else MODEL_PY.format(body=body))
    return d


def infer(client, model: str, x: np.ndarray, dtype: str = "INT32"):
    inp = grpcclient.InferInput("IN", list(x.shape), dtype)
    inp.set_data_from_numpy(x)
    return client.infer(model, [inp])


def status_of(fn) -> tuple[str, str]:
    try:
        fn()
    except InferenceServerException as e:
        return e.status(), e.message()
    return "StatusCode.OK", ""


X = np.arange(8, dtype=np.int32).reshape(2, 4)


# ----------------------------------------------------------------------------- faulty execute


@pytest.fixture(scope="module")
def faulty_server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("faulty")
    for name, body in MODELS.items():
        write_model(repo, name, body)
    write_model(
        repo, "int_overflow", 'return {"OUT": np.full((len(inputs["IN"]), 4), 300, np.int64)}', dtype="TYPE_INT8"
    )
    write_model(
        repo, "int_narrow_ok", 'return {"OUT": np.full((len(inputs["IN"]), 4), 7, np.int64)}', dtype="TYPE_INT8"
    )
    log = tmp_path_factory.mktemp("faulty-log") / "fpgaserve.log"
    with ServerProcess([repo], log_path=log) as server:
        yield server


@pytest.fixture
def faulty(faulty_server):
    c = grpcclient.InferenceServerClient(faulty_server.url)
    yield c
    c.close()


@pytest.mark.parametrize(
    "model, text",
    [
        ("raise_systemexit", "model 'raise_systemexit' raised SystemExit: 3"),
        ("raise_keyboardinterrupt", "model 'raise_keyboardinterrupt' raised KeyboardInterrupt: stop"),
        ("call_sys_exit", "model 'call_sys_exit' raised SystemExit"),
        (
            "wrong_dims",
            "output 'OUT' of model 'wrong_dims' has shape [2, 3], but the model configuration declares [-1, 4]",
        ),
        (
            "wrong_rank",
            "output 'OUT' of model 'wrong_rank' has shape [2, 4, 1], but the model configuration declares [-1, 4]",
        ),
        ("wrong_rows", "output 'OUT' of model 'wrong_rows' has shape [3, 4], expected a leading batch dimension of 2"),
        (
            "wrong_dtype",
            "output 'OUT' of model 'wrong_dtype' has data type <U1, but the model configuration declares INT32",
        ),
        ("not_a_dict", "model 'not_a_dict' execute() must return a dict of arrays, got list"),
        (
            "int_overflow",
            "output 'OUT' of model 'int_overflow' has values outside the range of INT8, the data type the model configuration declares",
        ),
    ],
)
def test_a_faulty_model_fails_its_request_and_the_server_serves_on(faulty, faulty_server, model, text):
    dtype = "INT8" if model == "int_overflow" else "INT32"
    x = X.astype(np.int8) if dtype == "INT8" else X
    for _ in range(3):  # repeatedly: the instance survives its own failure
        status, message = status_of(lambda: infer(faulty, model, x, dtype))
        assert status == "StatusCode.INTERNAL"
        assert message == text
    assert faulty_server.proc.poll() is None
    assert faulty.is_server_live() and faulty.is_server_ready()
    out = infer(faulty, "good", X).as_numpy("OUT")
    assert np.array_equal(out, X * 2)


def test_integer_outputs_that_fit_are_narrowed(faulty):
    x = X.astype(np.int8)
    out = infer(faulty, "int_narrow_ok", x, "INT8").as_numpy("OUT")
    assert out.dtype == np.int8 and (out == 7).all()


def test_a_100kb_error_text_is_truncated_not_turned_into_a_transport_error(faulty):
    status, message = status_of(lambda: infer(faulty, "huge_error", X))
    assert status == "StatusCode.INTERNAL"
    assert message.startswith("E" * 1000)
    assert len(message.encode()) <= 2048
    assert "truncated: 100000 bytes" in message


def test_the_stream_answers_faulty_and_good_requests_alike(faulty):
    results = []
    done = threading.Event()
    names = ["raise_systemexit", "good", "wrong_dims", "good", "call_sys_exit", "good"]

    def callback(result, error):
        results.append((result, error))
        if len(results) == len(names):
            done.set()

    faulty.start_stream(callback)
    try:
        for i, name in enumerate(names):
            inp = grpcclient.InferInput("IN", [2, 4], "INT32")
            inp.set_data_from_numpy(X)
            faulty.async_stream_infer(name, [inp], request_id=str(i))
        assert done.wait(60), f"only {len(results)} of {len(names)} responses"
    finally:
        faulty.stop_stream()
    by_id = {}
    for result, error in results:
        if error is None:
            by_id[result.get_response().id] = ("ok", result.as_numpy("OUT"))
        else:
            by_id[error.message()] = ("error", None)
    assert sum(1 for kind, _ in by_id.values() if kind == "ok") == 3
    assert all(np.array_equal(out, X * 2) for kind, out in by_id.values() if kind == "ok")


# ----------------------------------------------------------------------------- faulty load


def test_system_exit_at_import_or_initialize_fails_only_that_load(tmp_path):
    repo = tmp_path / "repo"
    write_model(repo, "exit_at_import", "", model_py="import sys\nsys.exit(4)\n")
    write_model(
        repo,
        "exit_in_initialize",
        "",
        model_py="class Model:\n    def initialize(self, config, model_dir):\n        raise SystemExit(5)\n"
        "    def execute(self, inputs):\n        return inputs\n",
    )
    write_model(repo, "good", MODELS["good"])
    with ServerProcess([repo], "--strict-readiness", "false", log_path=tmp_path / "log") as server:
        c = grpcclient.InferenceServerClient(server.url)
        index = {m.name: m for m in c.get_model_repository_index().models}
        assert index["exit_at_import"].state == "UNAVAILABLE"
        assert "SystemExit: 4" in index["exit_at_import"].reason
        assert index["exit_in_initialize"].state == "UNAVAILABLE"
        assert "SystemExit: 5" in index["exit_in_initialize"].reason
        assert np.array_equal(infer(c, "good", X).as_numpy("OUT"), X * 2)
        c.close()
        assert server.proc.poll() is None


# ----------------------------------------------------------------------------- hung execute

HANG_PY = """
import os
import time

import numpy as np


class Model:
    def execute(self, inputs):
        # stuck until the test creates the release file (a model waiting on a dead device)
        open({started!r}, "a").close()
        while not os.path.exists({release!r}):
            time.sleep(0.02)
        return {{"OUT": inputs["IN"]}}
"""


def _hang_repo(tmp_path: Path) -> tuple[Path, Path, Path]:
    repo = tmp_path / "repo"
    started, release = tmp_path / "started", tmp_path / "release"
    write_model(repo, "hang", "", model_py=HANG_PY.format(started=str(started), release=str(release)))
    write_model(repo, "good", MODELS["good"])
    shutil.copytree(CONFORMANCE_REPO / "simple", repo / "simple")
    return repo, started, release


def _wait_for(predicate, what: str, bound: float = 60.0):
    import time

    deadline = time.monotonic() + bound
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _start_async_infer(client, model: str, results: list):
    inp = grpcclient.InferInput("IN", [2, 4], "INT32")
    inp.set_data_from_numpy(X)
    client.async_infer(model, [inp], callback=lambda result, error: results.append((result, error)))


def test_unloading_a_hung_model_does_not_block_the_repository(tmp_path):
    repo, started, release = _hang_repo(tmp_path)
    # a long unload timeout: the unload cannot finish during the test unless the hang ends,
    # so everything below that completes did so *while* the unload was waiting
    args = ("--model-control-mode", "explicit", "--load-model", "*", "--model-unload-timeout-secs", "600")
    with ServerProcess([repo], *args, log_path=tmp_path / "log") as server:
        c = grpcclient.InferenceServerClient(server.url)
        results: list = []
        _start_async_infer(c, "hang", results)
        _wait_for(started.exists, "the model to enter execute()")
        unload_done = threading.Event()
        unloader = threading.Thread(
            target=lambda: (grpcclient.InferenceServerClient(server.url).unload_model("hang"), unload_done.set())
        )
        unloader.start()
        _wait_for(
            lambda: {m.name: m.state for m in c.get_model_repository_index().models}.get("hang") == "UNLOADING",
            "the hung model to be UNLOADING",
        )
        # other loads, unloads, the index and inference go on
        c.unload_model("good")
        c.load_model("good")
        assert np.array_equal(infer(c, "good", X).as_numpy("OUT"), X * 2)
        c.unload_model("simple")
        assert {m.name: m.state for m in c.get_model_repository_index().models}["simple"] == "UNAVAILABLE"
        c.load_model("simple")
        assert c.is_model_ready("simple")
        assert not unload_done.is_set()
        # the hang ends: the held request completes, then the unload
        release.touch()
        unloader.join(60)
        assert unload_done.is_set()
        _wait_for(lambda: results, "the held request's answer")
        result, error = results[0]
        assert error is None and np.array_equal(result.as_numpy("OUT"), X)
        index = {m.name: (m.state, m.reason) for m in c.get_model_repository_index().models}
        assert index["hang"] == ("UNAVAILABLE", "unloaded")
        assert c.is_server_ready()
        c.close()


def test_a_hung_instance_is_abandoned_after_the_unload_timeout(tmp_path):
    repo, started, release = _hang_repo(tmp_path)
    log = tmp_path / "log"
    args = ("--model-control-mode", "explicit", "--load-model", "*", "--model-unload-timeout-secs", "1")
    with ServerProcess([repo], *args, log_path=log) as server:
        c = grpcclient.InferenceServerClient(server.url)
        results: list = []
        _start_async_infer(c, "hang", results)  # executing, stuck
        _wait_for(started.exists, "the model to enter execute()")
        _start_async_infer(c, "hang", results)  # queued behind it
        _wait_for(
            lambda: _metric(server, "nv_inference_pending_request_count", 'model="hang"') == 1.0,
            "the second request to be queued",
        )
        c.unload_model("hang")  # returns once the stuck instance was abandoned
        _wait_for(lambda: len(results) == 2, "both requests to be answered")
        for result, error in results:
            assert result is None
            assert error.status() == "StatusCode.UNAVAILABLE"
            assert "model 'hang' version 1 was unloaded" in error.message()
        assert _metric(server, "fpgaserve_abandoned_instances") == 1.0
        text = log.read_text()
        assert "instance 0 was still inside execute()" in text and "abandoning it" in text
        assert c.is_server_ready()
        assert np.array_equal(infer(c, "good", X).as_numpy("OUT"), X * 2)
        # the abandoned thread finishes once the device "comes back"; it is no longer counted
        release.touch()
        _wait_for(lambda: _metric(server, "fpgaserve_abandoned_instances") == 0.0, "the abandoned thread to end")
        c.load_model("hang")
        c.close()


def _metric(server: ServerProcess, name: str, label: str = "") -> float | None:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    for line in text.splitlines():
        if line.startswith(name) and (not label or label in line) and not line.startswith("#"):
            return float(line.rsplit(" ", 1)[1])
    return None


# ----------------------------------------------------------------------------- paths

EVIL_PY = """
open({marker!r}, "w").write("imported")


class Model:
    def execute(self, inputs):
        return {{"OUT": inputs["IN"]}}
"""


@pytest.fixture
def outside(tmp_path):
    """A directory outside every model directory, with a Python file that leaves a marker
    when imported and a secret text file."""
    d = tmp_path / "outside"
    d.mkdir()
    marker = d / "IMPORTED"
    (d / "evil.py").write_text(EVIL_PY.format(marker=str(marker)))
    (d / "secret.txt").write_text("top-secret-label\n")
    return d


def _index(client) -> dict[str, tuple[str, str]]:
    return {m.name: (m.state, m.reason) for m in client.get_model_repository_index().models}


def test_config_paths_outside_the_model_directory_are_refused(tmp_path, outside):
    repo = tmp_path / "repo"
    write_model(repo, "absolute_model_file", "", model_py=MODELS["good"])
    with open(repo / "absolute_model_file" / "config.pbtxt", "a") as f:
        f.write(f'default_model_filename: "{outside / "evil.py"}"\n')
    write_model(repo, "dotdot_model_file", "", model_py=MODELS["good"])
    with open(repo / "dotdot_model_file" / "config.pbtxt", "a") as f:
        f.write('default_model_filename: "../../../outside/evil.py"\n')
    d = write_model(repo, "symlinked_model_file", "", model_py="")
    (d / "1" / "model.py").unlink()
    (d / "1" / "model.py").symlink_to(outside / "evil.py")
    write_model(repo, "dotdot_labels", MODELS["good"], extra='label_filename: "../../outside/secret.txt"')
    d = write_model(repo, "symlinked_labels", MODELS["good"], extra='label_filename: "labels.txt"')
    (d / "labels.txt").symlink_to(outside / "secret.txt")
    d = write_model(
        repo,
        "labels_ok",
        "return {'OUT': inputs['IN'].astype(np.float32)}",
        dtype="TYPE_FP32",
        extra='label_filename: "labels.txt"',
    )
    (d / "labels.txt").write_text("a\nb\nc\nd\n")
    (d / "config.pbtxt").write_text((d / "config.pbtxt").read_text().replace("TYPE_INT32", "TYPE_FP32"))
    # a model directory that is itself a symlink is fine: its files are inside it
    real = tmp_path / "elsewhere" / "linked_model_dir"
    write_model(tmp_path / "elsewhere", "linked_model_dir", MODELS["good"])
    (repo / "linked_model_dir").symlink_to(real)

    with ServerProcess([repo], "--strict-readiness", "false", log_path=tmp_path / "log") as server:
        c = grpcclient.InferenceServerClient(server.url)
        index = _index(c)
        for name, words in (
            ("absolute_model_file", "default_model_filename '/"),
            ("dotdot_model_file", "default_model_filename '../../../outside/evil.py' must be a path inside the model"),
            (
                "symlinked_model_file",
                "default_model_filename 'model.py' resolves (through a symbolic link) to a file outside",
            ),
            ("dotdot_labels", "label_filename '../../outside/secret.txt' must be a path inside the model directory"),
            ("symlinked_labels", "label_filename 'labels.txt' resolves (through a symbolic link) to a file outside"),
        ):
            state, reason = index[name]
            assert state == "UNAVAILABLE", (name, index[name])
            assert words in reason, (name, reason)
        assert index["linked_model_dir"][0] == "READY"
        assert index["labels_ok"][0] == "READY"
        # classification reads the labels loaded with the model
        inp = grpcclient.InferInput("IN", [1, 4], "FP32")
        inp.set_data_from_numpy(np.array([[1, 9, 3, 2]], np.float32))
        out = c.infer("labels_ok", [inp], outputs=[grpcclient.InferRequestedOutput("OUT", class_count=2)])
        assert out.as_numpy("OUT").tolist() == [[b"9.000000:1:b", b"3.000000:2:c"]]
        c.close()
    assert not (outside / "IMPORTED").exists()


NUMPY_OVERRIDE = {
    "backend": "numpy",
    "max_batch_size": 8,
    "input": [{"name": "IN", "data_type": "TYPE_INT32", "dims": [4]}],
    "output": [{"name": "OUT", "data_type": "TYPE_INT32", "dims": [4]}],
}


@pytest.fixture
def explicit_server(tmp_path):
    repo = tmp_path / "repo"
    write_model(repo, "good", MODELS["good"])
    with ServerProcess(
        [repo], "--model-control-mode", "explicit", "--load-model", "*", log_path=tmp_path / "log"
    ) as server:
        yield server


def test_config_overrides_cannot_name_files_outside_the_model(explicit_server, outside):
    c = grpcclient.InferenceServerClient(explicit_server.url)
    for filename in (
        str(outside / "evil.py"),
        "../../outside/evil.py",
        "../../../../../../" + str(outside / "evil.py"),
    ):
        config = dict(NUMPY_OVERRIDE, default_model_filename=filename)
        status, message = status_of(lambda config=config: c.load_model("good", config=json.dumps(config)))
        assert status == "StatusCode.INTERNAL", message
        assert "must be a path inside the model directory" in message
    config = dict(NUMPY_OVERRIDE)
    config["output"] = [dict(config["output"][0], label_filename=str(outside / "secret.txt"))]
    status, message = status_of(lambda: c.load_model("good", config=json.dumps(config)))
    assert "label_filename" in message and "must be a path inside the model directory" in message
    # the model kept serving its previous version throughout
    assert np.array_equal(infer(c, "good", X).as_numpy("OUT"), X * 2)
    c.close()
    assert not (outside / "IMPORTED").exists()


def test_file_uploads_stay_inside_their_folder(explicit_server, tmp_path):
    c = grpcclient.InferenceServerClient(explicit_server.url)
    onnx = (CONFORMANCE_REPO / "simple" / "1" / "model.onnx").read_bytes()
    config = json.dumps({"backend": "onnxruntime"})
    target = tmp_path / "escaped.onnx"
    for path in ("../escaped.onnx", "1/../../escaped.onnx", str(target), "1//model.onnx", "1/./model.onnx", "1\\..\\x"):
        status, message = status_of(
            lambda path=path: c.load_model("uploaded", config=config, files={f"file:{path}": onnx})
        )
        assert status == "StatusCode.INVALID_ARGUMENT", (path, status, message)
        assert "invalid file path" in message
    assert not target.exists()
    # model names are directory names
    for name in ("../../etc/x", "a/b", "..", "new\nline"):
        status, message = status_of(
            lambda name=name: c.load_model(name, config=config, files={"file:1/model.onnx": onnx})
        )
        assert status == "StatusCode.INVALID_ARGUMENT", (name, status, message)
        assert "invalid model name" in message
    # and a proper upload of data (an ONNX model) works
    c.load_model("uploaded", config=config, files={"file:1/model.onnx": onnx})
    assert c.is_model_ready("uploaded")
    c.close()


def test_code_uploads_are_refused_unless_allowed(tmp_path, outside):
    model_py = EVIL_PY.format(marker=str(outside / "IMPORTED")).encode()
    config = json.dumps(NUMPY_OVERRIDE)
    repo = tmp_path / "repo"
    repo.mkdir()
    with ServerProcess([repo], "--model-control-mode", "explicit", log_path=tmp_path / "log1") as server:
        c = grpcclient.InferenceServerClient(server.url)
        status, message = status_of(lambda: c.load_model("upload", config=config, files={"file:1/model.py": model_py}))
        assert status == "StatusCode.PERMISSION_DENIED"
        assert "--allow-model-code-upload" in message
        c.close()
    assert not (outside / "IMPORTED").exists()
    with ServerProcess(
        [repo], "--model-control-mode", "explicit", "--allow-model-code-upload", "true", log_path=tmp_path / "log2"
    ) as server:
        c = grpcclient.InferenceServerClient(server.url)
        c.load_model("upload", config=config, files={"file:1/model.py": model_py})
        assert np.array_equal(infer(c, "upload", X).as_numpy("OUT"), X)
        c.close()
    assert (outside / "IMPORTED").exists()


def test_onnx_external_data_outside_the_model_is_refused(explicit_server, tmp_path):
    from onnx import TensorProto, helper, numpy_helper

    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"0123456789abcdef")
    w = numpy_helper.from_array(np.zeros(4, np.float32), "W")
    w.data_location = TensorProto.EXTERNAL
    w.ClearField("raw_data")
    for key, value in (("location", "../../../../../../../../" + str(secret)), ("offset", "0"), ("length", "16")):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph(
        [helper.make_node("Add", ["IN", "W"], ["OUT"])],
        "g",
        [helper.make_tensor_value_info("IN", TensorProto.FLOAT, [-1, 4])],
        [helper.make_tensor_value_info("OUT", TensorProto.FLOAT, [-1, 4])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    c = grpcclient.InferenceServerClient(explicit_server.url)
    status, message = status_of(
        lambda: c.load_model(
            "exfil",
            config=json.dumps({"backend": "onnxruntime", "max_batch_size": 8}),
            files={"file:1/model.onnx": model},
        )
    )
    assert status == "StatusCode.INTERNAL"
    assert re.search(r"outside|escapes", message), message
    assert not c.is_model_ready("exfil")
    c.close()


def test_hls4ml_xclbin_parameter_must_stay_in_the_model(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(Path(__file__).resolve().parents[2] / "bitstreams" / "facile", repo / "facile")
    config = repo / "facile" / "config.pbtxt"
    config.write_text(
        config.read_text() + '\nparameters { key: "xclbin" value: { string_value: "../../../../../../etc/passwd" } }\n'
    )
    with ServerProcess(
        [repo], "--strict-readiness", "false", "--fpga-mode", "numpy", log_path=tmp_path / "log"
    ) as server:
        # (checked in every mode, also where no bitstream is used)
        c = grpcclient.InferenceServerClient(server.url)
        state, reason = _index(c)["facile"]
        assert state == "UNAVAILABLE"
        assert "parameter xclbin '../../../../../../etc/passwd' must be a path inside the model directory" in reason
        c.close()


def test_no_file_outside_is_created_by_model_names(explicit_server, tmp_path):
    before = set(os.listdir(tmp_path))
    c = grpcclient.InferenceServerClient(explicit_server.url)
    name = "../" * 12 + str(tmp_path / "created-by-server")
    status, _ = status_of(
        lambda: c.load_model(
            name, config=json.dumps({"backend": "onnxruntime"}), files={"file:1/model.onnx": b"not onnx"}
        )
    )
    assert status == "StatusCode.INVALID_ARGUMENT"
    c.close()
    assert set(os.listdir(tmp_path)) == before
