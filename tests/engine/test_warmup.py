"""``model_warmup``: run on every instance before the model is READY, as Triton 2.51 runs it.

Real fpgaserve servers on loopback, in explicit mode, loaded over RepositoryModelLoad with
the real tritonclient (gRPC and HTTP). The numpy models record every execute() they receive
(the instance, the rows, the values) in a file of the test's temporary folder, so the tests
see what warm-up sent without reading the server's internals.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from support.recording_model import RECORDING_MODEL
from support.server_process import ServerProcess


def _model(repo: Path, name: str, dtype: str, dims: str, warmup: str, mbs: int = 8, count: int = 1, extra: str = ""):
    d = repo / name
    (d / "1").mkdir(parents=True)
    (d / "1" / "model.py").write_text(RECORDING_MODEL)
    (d / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "numpy"\nmax_batch_size: {mbs}\n'
        f'input [{{ name: "INPUT0" data_type: {dtype} dims: {dims} }}]\n'
        f'output [{{ name: "OUTPUT0" data_type: {dtype} dims: {dims} }}]\n'
        f"instance_group [{{ kind: KIND_CPU count: {count} }}]\n{extra}\n{warmup}\n"
    )
    return d


def _records(model_dir: Path) -> list:
    path = model_dir / "record.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


ZERO_AND_RANDOM = """model_warmup [
  { name: "zeros" batch_size: 3 count: 2
    inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [4] zero_data: true } } },
  { name: "random" batch_size: 1
    inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [4] random_data: true } } }
]"""


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("warmup_repo")
    _model(repo, "rec", "TYPE_FP32", "[4]", ZERO_AND_RANDOM, count=2)
    _model(
        repo,
        "nobatch",
        "TYPE_INT32",
        "[2]",
        'model_warmup [{ name: "w" batch_size: 2 inputs { key: "INPUT0" value '
        "{ data_type: TYPE_INT32 dims: [2] zero_data: true } } }]",
        mbs=0,
    )
    strings = _model(
        repo,
        "strings",
        "TYPE_STRING",
        "[2]",
        'model_warmup [{ name: "file" batch_size: 1 inputs { key: "INPUT0" value '
        '{ data_type: TYPE_STRING dims: [2] input_data_file: "two.bin" } } },'
        '{ name: "random" batch_size: 1 inputs { key: "INPUT0" value '
        "{ data_type: TYPE_STRING dims: [2] random_data: true } } }]",
    )
    (strings / "warmup").mkdir()
    (strings / "warmup" / "two.bin").write_bytes(struct.pack("<I", 2) + b"ab" + struct.pack("<I", 0))
    floats = _model(
        repo,
        "floats",
        "TYPE_FP32",
        "[2]",
        'model_warmup [{ name: "file" batch_size: 2 inputs { key: "INPUT0" value '
        '{ data_type: TYPE_FP32 dims: [2] input_data_file: "f.bin" } } }]',
    )
    (floats / "warmup").mkdir()
    (floats / "warmup" / "f.bin").write_bytes(struct.pack("<2f", 1.5, -2.0))
    _model(
        repo,
        "escape",
        "TYPE_FP32",
        "[4]",
        'model_warmup [{ name: "w" batch_size: 1 inputs { key: "INPUT0" value '
        '{ data_type: TYPE_FP32 dims: [4] input_data_file: "../config.pbtxt" } } }]',
    )
    _model(
        repo,
        "failing",
        "TYPE_FP32",
        "[4]",
        'model_warmup [{ name: "w" batch_size: 2 inputs { key: "INPUT0" value '
        "{ data_type: TYPE_FP32 dims: [4] zero_data: true } } }]",
        count=2,
        extra='parameters { key: "fail" value { string_value: "warm-up broke it" } }',
    )
    _model(
        repo,
        "variable",
        "TYPE_FP32",
        "[-1]",
        'model_warmup [{ name: "w" batch_size: 1 inputs { key: "INPUT0" value '
        "{ data_type: TYPE_FP32 dims: [-1] zero_data: true } } }]",
    )
    _model(repo, "plain", "TYPE_FP32", "[-1]", "")
    _model(
        repo,
        "batch_zero",
        "TYPE_FP32",
        "[4]",
        'model_warmup [{ name: "w" batch_size: 0 count: 5 inputs { key: "INPUT0" value '
        "{ data_type: TYPE_FP32 dims: [4] zero_data: true } } }]",
    )
    for name, last_rows in (("stream", 1), ("stream_bad", 2)):
        d = repo / name
        (d / "1").mkdir(parents=True)
        (d / "1" / "model.py").write_text(STREAMING_MODEL.format(last_rows=last_rows))
        (d / "config.pbtxt").write_text(
            f'name: "{name}"\nbackend: "numpy"\nmax_batch_size: 0\n'
            "model_transaction_policy { decoupled: true }\n"
            'input [{ name: "IN" data_type: TYPE_INT32 dims: [3] }]\n'
            'output [{ name: "OUT" data_type: TYPE_INT32 dims: [1] }]\n'
            'model_warmup [{ name: "stream" batch_size: 1 inputs { key: "IN" value '
            "{ data_type: TYPE_INT32 dims: [3] zero_data: true } } }]\n"
        )
    return repo


# A decoupled model: three responses per request, the last one with ``last_rows`` rows (2: not
# the declared shape); it notes each response the server took from it.
STREAMING_MODEL = """
import os
import numpy as np

class Model:
    def initialize(self, config, version_dir):
        self.path = os.path.join(os.path.dirname(version_dir), "record.jsonl")

    def execute(self, inputs):
        for i in range(3):
            rows = {last_rows} if i == 2 else 1
            yield {{"OUT": np.zeros(rows, dtype=np.int32)}}
            with open(self.path, "a") as f:
                f.write(f"[{{i}}]\\n")
"""


@pytest.fixture(scope="module")
def server(repo, tmp_path_factory):
    log = tmp_path_factory.mktemp("warmup_log") / "fpgaserve.log"
    proc = ServerProcess([repo], "--model-control-mode", "explicit", log_path=log)
    proc.start()
    yield proc
    assert proc.stop() == 0, proc.log()


@pytest.fixture
def grpc(server):
    client = grpcclient.InferenceServerClient(server.url)
    yield client
    client.close()


def test_batch_size_count_and_instances(server, grpc, repo):
    """batch_size requests of one row each, run as one batch, count times (0 -> 1), on every
    instance, in the config's order; zero data is zeros of the declared type, random is not."""
    grpc.load_model("rec")
    assert grpc.is_model_ready("rec")
    records = _records(repo / "rec")
    instances = {r[0] for r in records}
    assert len(instances) == 2
    for instance in instances:
        mine = [r for r in records if r[0] == instance]
        assert [r[1] for r in mine] == [3, 3, 1]
        assert all(r[2] == [3, 4] and r[3] == "float32" and r[4] == [0.0] * 12 for r in mine[:2])
        assert mine[2][2] == [1, 4]
    randoms = [r[4] for r in records if r[1] == 1]
    assert randoms[0] != [0.0] * 4 or randoms[1] != [0.0] * 4
    assert "model rec: warm-up 'zeros' x 2 on 2 instances [0, 1]" in server.log()


def test_statistics_count_warmup(grpc):
    """Triton 2.51 counts warm-up executions in the model's statistics (observed: 14
    inferences, 6 executions for this config on two instances), so does fpgaserve."""
    grpc.load_model("rec")
    stats = grpc.get_inference_statistics("rec", as_json=True)["model_stats"][0]
    assert int(stats["inference_count"]) == 14
    assert int(stats["execution_count"]) == 6
    sizes = {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in stats["batch_stats"]}
    assert sizes == {3: 4, 1: 2}


def test_batch_size_zero_runs_nothing(grpc, repo):
    grpc.load_model("batch_zero")  # Triton 2.51 loads it and executes nothing
    assert grpc.is_model_ready("batch_zero")
    assert _records(repo / "batch_zero") == []


def test_model_without_batching_gets_requests_alone(grpc, repo):
    grpc.load_model("nobatch")
    records = _records(repo / "nobatch")
    assert [(r[2], r[3]) for r in records] == [([2], "int32"), ([2], "int32")]


def test_input_data_file(grpc, repo):
    grpc.load_model("strings")
    grpc.load_model("floats")
    strings = _records(repo / "strings")
    assert strings[0][2:] == [[1, 2], "object", ["ab", ""]]
    assert strings[1][2:] == [[1, 2], "object", ["", ""]]  # random BYTES: empty, as Triton
    floats = _records(repo / "floats")
    assert floats == [[floats[0][0], 2, [2, 2], "float32", [1.5, -2.0, 1.5, -2.0]]]


def _index_reason(grpc, name: str) -> tuple[str, str, str]:
    for m in grpc.get_model_repository_index(as_json=True)["models"]:
        if m["name"] == name:
            return m.get("version", ""), m.get("state", ""), m.get("reason", "")
    raise AssertionError(f"{name} not in the index")


def test_input_file_outside_warmup_folder_refused(grpc):
    with pytest.raises(InferenceServerException) as e:
        grpc.load_model("escape")
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "input_data_file '../config.pbtxt' must be a path inside the model directory" in e.value.message()
    assert _index_reason(grpc, "escape")[:2] == ("1", "UNAVAILABLE")


def test_failing_warmup_fails_the_load_grpc_and_http(server, grpc, repo):
    expected = (
        "load failed for model 'failing': version 1 is at UNAVAILABLE state: Invalid argument: "
        "failed to run warmup sample 'w': warm-up broke it; warm-up broke it; ;\n"
    )
    with pytest.raises(InferenceServerException) as e:
        grpc.load_model("failing")
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert e.value.message() == expected
    assert _index_reason(grpc, "failing") == (
        "1",
        "UNAVAILABLE",
        "Invalid argument: failed to run warmup sample 'w': warm-up broke it; warm-up broke it; ",
    )
    assert not grpc.is_model_ready("failing")
    http = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    try:
        with pytest.raises(InferenceServerException) as h:
            http.load_model("failing")
        assert h.value.status() == "400"
        assert h.value.message() == expected
    finally:
        http.close()
    # two loads of two instances: each instance ran the sample once (count 2, but warm-up
    # stops at the first failure, as Triton's does)
    records = _records(repo / "failing")
    assert len(records) == len({r[0] for r in records}) == 4
    grpc.load_model("plain")  # the server keeps serving
    assert grpc.is_model_ready("plain")


def test_variable_dim_without_size_refused(grpc):
    with pytest.raises(InferenceServerException) as e:
        grpc.load_model("variable")
    assert e.value.message() == (
        "load failed for model 'variable': version 1 is at UNAVAILABLE state: Invalid argument: warmup "
        "setting expects all variable-size dimensions are specified for input 'INPUT0';\n"
    )


def _override(dims: str, batch_size: int = 1) -> str:
    variable = [-1] * len(json.loads(dims))  # the config's dims leave every size to the sample
    return json.dumps(
        {
            "name": "plain",
            "backend": "numpy",
            "max_batch_size": 8,
            "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": variable}],
            "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": variable}],
            "model_warmup": [
                {
                    "name": "hostile",
                    "batch_size": batch_size,
                    "inputs": {"INPUT0": {"data_type": "TYPE_FP32", "dims": json.loads(dims), "zero_data": True}},
                }
            ],
        }
    )


@pytest.mark.parametrize(
    ("dims", "batch_size", "text"),
    [
        ("[100000000000000]", 1, "bring the sample to 400000000000000 bytes, more than the 67108864 a warm-up sample"),
        ("[4294967296, 4294967296]", 1, "more than the 67108864 a warm-up sample may have"),
        # each row is within the bound, the batch of 8 rows is not
        ("[4194304]", 8, "with batch_size 8 bring the sample to 134217728 bytes, more than the 67108864"),
        ("[4]", 9, "batch_size 9 exceeds the model's max_batch_size 8"),
    ],
)
def test_hostile_override_refused_without_allocating(server, grpc, dims, batch_size, text):
    """Triton 2.51 crashes (SIGSEGV) on both; a client's config override must not take the
    server down or make it allocate what the dims say."""
    with pytest.raises(InferenceServerException) as e:
        grpc.load_model("plain", config=_override(dims, batch_size))
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert text in e.value.message()
    assert e.value.message().startswith("load failed for model 'plain': version 1 is at UNAVAILABLE state: ")
    assert server.http_status("/v2/health/live") == 200


def test_card_model_is_warmed_on_every_compute_unit(tmp_path_factory, csim_cache):
    """hls4ml in hardware mode on a simulated card with four compute units and four instances:
    warm-up alone (no client request) runs a kernel on every CU before the model is READY,
    and the log line names the instances and their CUs."""
    import shutil

    from support.card_serving import abi_model, card_stats_after, serve_cards, write_card_xclbin
    from support.server_process import BUNDLED_REPO

    if shutil.which("g++") is None:
        pytest.skip("the simulated kernels run hls4ml's C-simulation (g++)")
    repo = tmp_path_factory.mktemp("warmup_card_repo")
    version = repo / "jets" / "1"
    shutil.copytree(BUNDLED_REPO / "jet_tagger" / "1", version)
    write_card_xclbin(version, "krnl_rtl", cus=4)
    abi_model(repo, "jets", version, 16, 5, 4, 64)
    with (repo / "jets" / "config.pbtxt").open("a") as f:
        f.write(
            'model_warmup [{ name: "cus" batch_size: 2 count: 3 inputs { key: "x" value '
            "{ data_type: TYPE_FP32 dims: [16] random_data: true } } }]\n"
        )
    server = serve_cards(repo, tmp_path_factory, "warmup-card", "hardware", 1)
    try:
        with grpcclient.InferenceServerClient(server.url) as client:
            client.load_model("jets")
            assert client.is_model_ready("jets")
        # 4 instances x 3 runs, one kernel call each (the simulator writes its stats shortly
        # after a change: waited for, not read at once)
        cus = card_stats_after(server, 0, {"kernel_completions": 0}, 12)["cus"]
        assert sorted(cus) == [f"krnl_rtl_{i}" for i in range(1, 5)]
        assert all(c["completed"] >= 3 for c in cus.values()), cus
        log = server.log_path.read_text()
        assert "model jets: warm-up 'cus' x 3 on 4 instances [0 (card 0 krnl_rtl_1), 1 (card 0 " in log
    finally:
        assert server.stop() == 0, server.log()


def test_decoupled_warmup_takes_every_response(grpc, repo):
    grpc.load_model("stream")
    assert _records(repo / "stream") == [[0], [1], [2]]
    with pytest.raises(InferenceServerException) as e:
        grpc.load_model("stream_bad")
    assert e.value.message() == (
        "load failed for model 'stream_bad': version 1 is at UNAVAILABLE state: Invalid argument: failed to run "
        "warmup sample 'stream': output 'OUT' of model 'stream_bad' has shape [2], but the model configuration "
        "declares [1]; ;\n"
    )


@pytest.mark.parametrize("mode", ["numpy", "csim", "onnx"])
def test_hls4ml_model_is_warmed_in_every_emulated_mode(tmp_path, csim_cache, mode):
    """The bundled jet tagger (hls4ml) in each --fpga-mode without a card: warm-up runs through
    the same instance path, and its executions are in the statistics before any request."""
    import shutil

    from support.server_process import BUNDLED_REPO

    if mode == "csim" and shutil.which("g++") is None:
        pytest.skip("hls4ml's C-simulation needs g++")
    repo = tmp_path / "repo"
    shutil.copytree(BUNDLED_REPO / "jet_tagger", repo / "jet_tagger")
    with (repo / "jet_tagger" / "config.pbtxt").open("a") as f:
        f.write(
            'model_warmup [{ name: "events" batch_size: 4 count: 2 inputs { key: "input" value '
            "{ data_type: TYPE_FP32 dims: [16] random_data: true } } }]\n"
        )
    server = ServerProcess(
        [repo], "--fpga-mode", mode, "--model-control-mode", "explicit", log_path=tmp_path / "fpgaserve.log"
    ).start(timeout=240)
    try:
        with grpcclient.InferenceServerClient(server.url) as client:
            client.load_model("jet_tagger")
            stats = client.get_inference_statistics("jet_tagger", as_json=True)["model_stats"][0]
        assert (int(stats["inference_count"]), int(stats["execution_count"])) == (8, 2)
        assert "model jet_tagger: warm-up 'events' x 2 on 1 instances [0] in " in server.log()
    finally:
        assert server.stop() == 0, server.log()
