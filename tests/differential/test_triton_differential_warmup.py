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

from support.differential import ReferenceCrashed, http_request
from support.recording_model import RECORDING_MODEL
from support.reference_triton import start_tritonserver, stop_tritonserver
from support.server_process import ServerProcess, free_port

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


# Triton 2.51 sometimes dies of SIGSEGV in its core after a Python model's warm-up sample
# fails (seen here in 4 of 9 loads, in libtritonserver, after the stub's error): its
# bug, not a behaviour to compare. The failing model therefore loads on a Triton of its own,
# started again when that one crashes.
FAILS_IN_EXECUTE = "failing"
REFERENCE_ATTEMPTS = 8


@pytest.fixture(scope="module")
def observed(tritonserver_path, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("warmup_differential")
    triton_repo, our_repo = tmp / "triton_repo", tmp / "our_repo"
    _write(triton_repo, "python", PYTHON_MODEL)
    _write(our_repo, "numpy", RECORDING_MODEL)
    names = [n for n in MODELS if n != FAILS_IN_EXECUTE]
    with ServerProcess([our_repo], "--model-control-mode=explicit", log_path=tmp / "fpgaserve.log") as ours:
        theirs = _triton_observes(triton_repo, tmp / "triton.log", names)
        failing = None
        for attempt in range(REFERENCE_ATTEMPTS):
            (triton_repo / FAILS_IN_EXECUTE / "record.jsonl").unlink(missing_ok=True)
            try:
                failing = _triton_observes(triton_repo, tmp / f"triton-failing-{attempt}.log", [FAILS_IN_EXECUTE])
                break
            except ReferenceCrashed:
                continue
        if failing is None:
            pytest.fail(f"the reference Triton crashed in all {REFERENCE_ATTEMPTS} loads of '{FAILS_IN_EXECUTE}'")
        index = {**theirs["index"], FAILS_IN_EXECUTE: failing["index"][FAILS_IN_EXECUTE]}
        theirs.update(failing, index=index)
        yield {"triton": theirs, "ours": _observe(ours.http_port, our_repo, False, tmp / "fpgaserve.log", list(MODELS))}


def _triton_observes(repo: Path, log: Path, names: list[str]) -> dict:
    ports = [free_port() for _ in range(3)]
    triton = start_tritonserver(repo, *ports, model_control_mode="explicit", log_path=log)
    try:
        return _observe(ports[1], repo, True, log, names)
    finally:
        stop_tritonserver(triton)


def _observe(http_port: int, repo: Path, per_request: bool, log: Path, names: list[str]) -> dict:
    seen: dict = {}
    for name in names:
        status, body = http_request(http_port, "POST", f"/v2/repository/models/{name}/load", log)
        seen[name] = "loaded" if status == 200 else (str(status), body["error"])
        records = []
        path = repo / name / "record.jsonl"
        for line in path.read_text().splitlines() if path.exists() else []:
            instance, n, shapes, dtype, values = json.loads(line)
            if not per_request:  # fpgaserve's model sees the batch: n one-row requests
                shapes = [[1, *shapes[1:]]] * n
                values = values[: len(values) // n]
            records.append((instance, n, shapes, dtype, values))
        seen[f"{name} executions"] = records
    if "rec" in names:
        stats = http_request(http_port, "GET", "/v2/models/rec/stats", log)[1]["model_stats"][0]
        seen["rec stats"] = (
            stats["inference_count"],
            stats["execution_count"],
            sorted((b["batch_size"], b["compute_infer"]["count"]) for b in stats["batch_stats"]),
        )
    index = http_request(http_port, "POST", "/v2/repository/index", log)[1]
    seen["index"] = {m["name"]: m.get("state") for m in index}
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
