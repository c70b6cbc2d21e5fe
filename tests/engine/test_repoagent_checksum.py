"""The ``checksum`` repository agent (CMS's Triton build ships it; SonicTriton configs carry
its block): a real server loads models whose ``model_repository_agents`` block lists MD5
digests. The model serves when every digest matches. Otherwise the load fails with the
agent's text and the other models keep serving:

* a file changed after the digest was taken;
* a wrong algorithm, or a key with no ``:``;
* a path outside the model directory or a FIFO (which must not hang the load);
* an unknown agent.

Loads go through both the startup scan and RepositoryModelLoad.
"""

from __future__ import annotations

import hashlib
import os
import shutil

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from support.server_process import CONFORMANCE_REPO, ServerProcess

SOURCE = CONFORMANCE_REPO / "simple"


def _md5(path) -> str:
    return hashlib.md5(path.read_bytes(), usedforsecurity=False).hexdigest()


def _model(repo, name: str, parameters: dict[str, str], agent: str = "checksum"):
    d = repo / name
    (d / "1").mkdir(parents=True)
    shutil.copy(SOURCE / "1" / "model.onnx", d / "1" / "model.onnx")
    config = (SOURCE / "config.pbtxt").read_text().replace('name: "simple"', f'name: "{name}"')
    params = "\n".join(f'      {{ key: "{k}" value: "{v}" }}' for k, v in parameters.items())
    config += f'model_repository_agents {{\n  agents [ {{\n    name: "{agent}"\n    parameters [\n{params}\n    ]\n  }} ]\n}}\n'
    (d / "config.pbtxt").write_text(config)
    return d


def _infer(client, name: str) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"), grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a)
    out = client.infer(name, inputs).as_numpy("OUTPUT0")
    assert (out == 2 * a).all()


@pytest.fixture()
def repo(tmp_path):
    repo = tmp_path / "repo"
    good = _md5(SOURCE / "1" / "model.onnx")
    _model(repo, "intact", {"MD5:1/model.onnx": good})
    tampered = _model(repo, "tampered", {"MD5:1/model.onnx": good})
    with open(tampered / "1" / "model.onnx", "ab") as f:
        f.write(b"\0")  # one byte more than what was signed
    _model(repo, "sha", {"SHA256:1/model.onnx": good})
    _model(repo, "nocolon", {"1/model.onnx": good})
    _model(repo, "escape", {"MD5:../intact/1/model.onnx": good})
    fifo = _model(repo, "fifo", {"MD5:1/pipe": good})
    os.mkfifo(fifo / "1" / "pipe")
    _model(repo, "missing", {"MD5:1/absent.onnx": good})
    _model(repo, "other_agent", {"k": "v"}, agent="relocation")
    return repo


EXPECTED = {
    "tampered": "Mismatched MD5 hash for file 1/model.onnx, expect: {good}, got: {bad}",
    "sha": "Unsupported checksum algorithm: SHA256",
    "nocolon": "failed to parse key: 1/model.onnx",
    "escape": "failed to open text file for read ../intact/1/model.onnx: the path leaves the model directory",
    "fifo": "failed to open text file for read 1/pipe: not a regular file",
    "missing": "failed to open text file for read 1/absent.onnx: No such file or directory",
    "other_agent": "unknown repository agent 'relocation' (this server has: checksum)",
}


def _expected(repo, name: str) -> str:
    good = _md5(SOURCE / "1" / "model.onnx")
    bad = _md5(repo / "tampered" / "1" / "model.onnx")
    return EXPECTED[name].format(good=good, bad=bad)


def test_startup_loads_only_the_models_whose_digests_match(repo, tmp_path):
    server = ServerProcess([repo], log_path=tmp_path / "s.log").start(wait_ready=False)  # not all models load
    try:
        client = grpcclient.InferenceServerClient(server.url)
        index = {m.name: m for m in client.get_model_repository_index().models}
        assert index["intact"].state == "READY"
        _infer(client, "intact")
        for name in EXPECTED:
            assert index[name].state == "UNAVAILABLE", name
            assert _expected(repo, name) in index[name].reason, (name, index[name].reason)
            assert not client.is_model_ready(name)
        _infer(client, "intact")  # still serving
    finally:
        assert server.stop() == 0


def test_explicit_loads_fail_with_the_agents_text_and_a_repaired_model_loads(repo, tmp_path):
    with ServerProcess([repo], "--model-control-mode=explicit", log_path=tmp_path / "s.log") as server:
        client = grpcclient.InferenceServerClient(server.url)
        client.load_model("intact")
        for name in EXPECTED:
            with pytest.raises(InferenceServerException) as e:
                client.load_model(name)
            assert e.value.status() == "StatusCode.INTERNAL", name
            assert e.value.message().startswith(f"failed to load '{name}'"), e.value.message()
            assert _expected(repo, name) in e.value.message(), (name, e.value.message())
        # the operator restores the file: the same block now loads it
        shutil.copy(SOURCE / "1" / "model.onnx", repo / "tampered" / "1" / "model.onnx")
        client.load_model("tampered")
        _infer(client, "tampered")
        _infer(client, "intact")
