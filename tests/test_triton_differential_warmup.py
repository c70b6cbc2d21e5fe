"""``model_warmup`` side by side with the real Triton 2.51.

The same warm-up configs on both servers: a Triton Python-backend model and an fpgaserve
numpy model that each record what every execute() received. Compared: the requests each
instance got (how many per execute, their shapes, types and zero values, in order), the
statistics after warm-up, and the status and text of the loads that fail (the model's own
error text apart: Triton's Python backend wraps it in a traceback).
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from reference_triton import start_tritonserver, stop_tritonserver
from server_process import ServerProcess, free_port
from test_triton_differential import tritonserver_path  # noqa: F401  (fixture: locate/install, else skip)
from test_warmup import RECORDING_MODEL

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# Records each execute() as [instance, requests, each request's shape, dtype, values of the
# first request]; fails when the model's folder name starts with "failing".
PYTHON_MODEL = """
import json, os
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.path = os.path.join(args["model_repository"], "record.jsonl")
        self.instance = args["model_instance_name"]
        self.fail = os.path.basename(args["model_repository"]).startswith("failing")

    def execute(self, requests):
        arrays = [pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() for r in requests]
        values = [v.decode("latin-1") if isinstance(v, bytes) else float(v) for v in arrays[0].reshape(-1)]
        with open(self.path, "a") as f:
            f.write(json.dumps([self.instance, len(arrays), [list(a.shape) for a in arrays],
                                str(arrays[0].dtype), values]) + "\\n")
        if self.fail:
            raise ValueError("warm-up broke it")
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", a)]) for a in arrays]
"""

ZERO = "{{ data_type: {t} dims: {d} zero_data: true }}"
MODELS = {
    # name: (data type, dims, instances, warm-up entries)
    "rec": (
        "TYPE_FP32",
        "[4]",
        2,
        '{ name: "zeros" batch_size: 3 count: 2 inputs { key: "INPUT0" value '
        + ZERO.format(t="TYPE_FP32", d="[4]")
        + ' } }, { name: "random" batch_size: 1 inputs { key: "INPUT0" value '
        "{ data_type: TYPE_FP32 dims: [4] random_data: true } } }",
    ),
    "strings": (
        "TYPE_STRING",
        "[2]",
        1,
        '{ name: "file" batch_size: 1 inputs { key: "INPUT0" value { data_type: TYPE_STRING dims: [2] '
        'input_data_file: "two.bin" } } }, { name: "random" batch_size: 2 inputs { key: "INPUT0" value '
        "{ data_type: TYPE_STRING dims: [2] random_data: true } } }",
    ),
    "failing": (
        "TYPE_FP32",
        "[4]",
        1,
        '{ name: "w" batch_size: 2 count: 3 inputs { key: "INPUT0" value '
        + ZERO.format(t="TYPE_FP32", d="[4]")
        + " } }",
    ),
    "batch_zero": (
        "TYPE_FP32",
        "[4]",
        1,
        '{ name: "w" batch_size: 0 count: 2 inputs { key: "INPUT0" value '
        + ZERO.format(t="TYPE_FP32", d="[4]")
        + " } }",
    ),
    "variable": (
        "TYPE_FP32",
        "[-1]",
        1,
        '{ name: "w" batch_size: 1 inputs { key: "INPUT0" value ' + ZERO.format(t="TYPE_FP32", d="[-1]") + " } }",
    ),
    "wrong_type": (
        "TYPE_FP32",
        "[4]",
        1,
        '{ name: "w" batch_size: 1 inputs { key: "INPUT0" value ' + ZERO.format(t="TYPE_INT32", d="[4]") + " } }",
    ),
    "wrong_shape": (
        "TYPE_FP32",
        "[4]",
        1,
        '{ name: "w" batch_size: 1 inputs { key: "INPUT0" value ' + ZERO.format(t="TYPE_FP32", d="[5]") + " } }",
    ),
    "short_file": (
        "TYPE_FP32",
        "[4]",
        1,
        '{ name: "w" batch_size: 1 inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [4] '
        'input_data_file: "eight.bin" } } }',
    ),
    "no_input": (
        "TYPE_FP32",
        "[4]",
        1,
        '{ name: "w" batch_size: 1 inputs { key: "OTHER" value ' + ZERO.format(t="TYPE_FP32", d="[4]") + " } }",
    ),
}


def _write(repo: Path, backend: str, model_code: str) -> None:
    for name, (dtype, dims, count, warmup) in MODELS.items():
        folder = repo / name
        (folder / "1").mkdir(parents=True)
        (folder / "1" / "model.py").write_text(model_code)
        extra = 'parameters { key: "fail" value { string_value: "warm-up broke it" } }' if name == "failing" else ""
        (folder / "config.pbtxt").write_text(
            f'name: "{name}"\nbackend: "{backend}"\nmax_batch_size: 8\n'
            f'input [{{ name: "INPUT0" data_type: {dtype} dims: {dims} }}]\n'
            f'output [{{ name: "OUTPUT0" data_type: {dtype} dims: {dims} }}]\n'
            f"instance_group [{{ kind: KIND_CPU count: {count} }}]\n{extra}\nmodel_warmup [{warmup}]\n"
        )
        (folder / "warmup").mkdir()
    (repo / "strings" / "warmup" / "two.bin").write_bytes(struct.pack("<I", 2) + b"ab" + struct.pack("<I", 0))
    (repo / "short_file" / "warmup" / "eight.bin").write_bytes(bytes(8))


@pytest.fixture(scope="module")
def observed(tritonserver_path, tmp_path_factory):  # noqa: F811
    tmp = tmp_path_factory.mktemp("warmup_differential")
    triton_repo, our_repo = tmp / "triton_repo", tmp / "our_repo"
    _write(triton_repo, "python", PYTHON_MODEL)
    _write(our_repo, "numpy", RECORDING_MODEL)
    ports = [free_port() for _ in range(3)]
    triton = start_tritonserver(triton_repo, *ports, model_control_mode="explicit", log_path=tmp / "triton.log")
    ours = ServerProcess([our_repo], "--model-control-mode=explicit", log_path=tmp / "fpgaserve.log").start()
    try:
        yield {
            "triton": _observe(ports[1], triton_repo, per_request=True),
            "ours": _observe(ours.http_port, our_repo, per_request=False),
        }
    finally:
        ours.stop()
        stop_tritonserver(triton)


def _observe(http_port: int, repo: Path, per_request: bool) -> dict:
    # (a load starts one Python stub per instance in Triton: on two busy cores that can take
    # longer than the client's default 60 s)
    client = httpclient.InferenceServerClient(f"localhost:{http_port}", connection_timeout=300, network_timeout=300)
    seen: dict = {}
    try:
        for name in MODELS:
            try:
                client.load_model(name)
                seen[name] = "loaded"
            except InferenceServerException as e:
                seen[name] = (e.status(), e.message())
            records = []
            path = repo / name / "record.jsonl"
            for line in path.read_text().splitlines() if path.exists() else []:
                instance, n, shapes, dtype, values = json.loads(line)
                if not per_request:  # fpgaserve's model sees the batch: n one-row requests
                    shapes = [[1, *shapes[1:]]] * n
                    values = values[: len(values) // n]
                records.append((instance, n, shapes, dtype, values))
            seen[f"{name} executions"] = records
        stats = client.get_inference_statistics("rec")["model_stats"][0]
        seen["rec stats"] = (
            stats["inference_count"],
            stats["execution_count"],
            sorted((b["batch_size"], b["compute_infer"]["count"]) for b in stats["batch_stats"]),
        )
        seen["index"] = {m["name"]: m.get("state") for m in client.get_model_repository_index()}
    finally:
        client.close()
    return seen


def _by_instance(records) -> list:
    """Each instance's executions (requests, shapes, dtype; values unless random), in order."""
    instances: dict = {}
    for instance, n, shapes, dtype, values in records:
        shown = values if all(v in (0, "") for v in values) else "random"
        instances.setdefault(instance, []).append((n, shapes, dtype, shown))
    return sorted(instances.values())


@pytest.mark.parametrize("name", ["rec", "strings", "failing", "batch_zero"])
def test_requests_each_instance_receives(observed, name):
    triton, ours = observed["triton"], observed["ours"]
    if name != "failing":  # (its load error: test_failing_sample_load_error)
        assert ours[name] == triton[name] == "loaded"
    assert _by_instance(ours[f"{name} executions"]) == _by_instance(triton[f"{name} executions"])


def test_statistics_after_warmup(observed):
    assert observed["ours"]["rec stats"] == observed["triton"]["rec stats"]


@pytest.mark.parametrize("name", ["variable", "wrong_type", "wrong_shape", "short_file", "no_input"])
def test_invalid_sample_load_error(observed, name):
    assert observed["ours"][name] == observed["triton"][name]
    assert observed["ours"]["index"][name] == observed["triton"]["index"][name] == "UNAVAILABLE"


def test_failing_sample_load_error(observed):
    """Same status and text around the model's error, which is repeated once per request."""
    triton_status, triton_text = observed["triton"]["failing"]
    status, text = observed["ours"]["failing"]
    assert status == triton_status == "400"
    # Triton's Python backend wraps the exception: "Failed to process the request(s) for model
    # 'failing_0_0', message: ValueError: warm-up broke it\n\nAt:\n  <traceback>\n"
    model_error = re.compile(r"Failed to process the request\(s\) for model 'failing_0_0', message: [^;]*", re.S)
    assert model_error.sub("warm-up broke it", triton_text) == text
    assert text.endswith("failed to run warmup sample 'w': warm-up broke it; warm-up broke it; ;\n")
    assert observed["ours"]["index"]["failing"] == observed["triton"]["index"]["failing"] == "UNAVAILABLE"
