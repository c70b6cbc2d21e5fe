"""config.pbtxt fields fpgaserve does not act on are named in the model's load warning.

A real server loads real configs; the test reads its log. The table itself
(server/engine/config_support.py) is checked against the ModelConfig descriptor so a field
added to the proto fails here until it is classified.
"""

from __future__ import annotations

import re
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from fpgaserve.protos import inference as pb
from fpgaserve.server.engine import config_support
from support.server_process import ServerProcess

pytestmark = pytest.mark.timeout(90)

MODEL_PY = """
class Model:
    def execute(self, inputs):
        return {"OUT": inputs["IN"] + 1}
"""

# every field here that is not acted on must be named once; the acted-on ones never
LOADED_WITH_IGNORED = """
name: "ignored_fields"
backend: "numpy"
runtime: "model.py"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 4 ] format: FORMAT_NHWC is_non_linear_format_io: true },
        { name: "IN2" data_type: TYPE_INT32 dims: [ 4 ] optional: true is_non_linear_format_io: true } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 4 ] } ]
dynamic_batching { max_queue_delay_microseconds: 100 preserve_ordering: true }
instance_group [ { name: "group0" count: 2 kind: KIND_GPU gpus: [ 0 ] passive: true host_policy: "numa0"
                   rate_limiter { resources [ { name: "R1" count: 2 } ] priority: 1 } } ]
optimization { graph { level: 1 } input_pinned_memory { enable: false } }
response_cache { enable: true }
model_operations { op_library_filename: [ "libops.so" ] }
cc_model_filenames { key: "7.5" value: "model_75.py" }
metric_tags { key: "team" value: "l1t" }
parameters { key: "anything" value: { string_value: "x" } }
"""

EXPECTED_UNACTED = {
    "runtime",
    "input.format",
    "input.is_non_linear_format_io",
    "instance_group.name",
    "instance_group.kind: KIND_GPU",
    "instance_group.rate_limiter",
    "instance_group.gpus",
    "instance_group.passive",
    "instance_group.host_policy",
    "optimization",
    "response_cache",
    "model_operations",
    "cc_model_filenames",
    "metric_tags",
}

CLEAN = """
name: "clean"
backend: "numpy"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 4 ] } ]
dynamic_batching { max_queue_delay_microseconds: 100 }
instance_group [ { count: 1 kind: KIND_CPU } ]
"""


def _model(repo: Path, name: str, config: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(config)
    (repo / name / "1" / "model.py").write_text(MODEL_PY)


def _warnings_of(log: str, model: str) -> list[str]:
    return [line for line in log.splitlines() if f"model '{model}': config fields not acted on:" in line]


def _named(line: str) -> list[str]:
    """The field paths a warning line names (each "path: what happens instead" part)."""
    body = line.split("config fields not acted on: ", 1)[1]
    paths = []
    for part in body.split(" | "):
        m = re.match(r"([a-z_.]+(?:: KIND_[A-Z]+)?): ", part)
        assert m, part
        paths.append(m.group(1))
    return paths


def test_load_warning_names_each_unacted_field_once(tmp_path):
    repo = tmp_path / "repo"
    _model(repo, "ignored_fields", LOADED_WITH_IGNORED)
    _model(repo, "clean", CLEAN)
    log_path = tmp_path / "server.log"
    server = ServerProcess([repo], "--model-control-mode=explicit", "--load-model=*", log_path=log_path)
    server.start()
    try:
        with grpcclient.InferenceServerClient(server.url) as client:
            assert client.is_model_ready("ignored_fields")
            assert client.is_model_ready("clean")
            # a reload is another load: one more line, not one per version or instance
            client.load_model("ignored_fields")
            deadline = time.monotonic() + 20
            while len(_warnings_of(log_path.read_text(), "ignored_fields")) < 2 and time.monotonic() < deadline:
                time.sleep(0.1)
    finally:
        assert server.stop() == 0
    log = log_path.read_text()
    lines = _warnings_of(log, "ignored_fields")
    assert len(lines) == 2, log[-3000:]
    assert lines[0].startswith("W")  # (Triton's glog-style severity letter: a warning)
    named = _named(lines[0])
    assert sorted(named) == sorted(EXPECTED_UNACTED)  # each once, nothing acted on
    assert "response_cache: no response cache in fpgaserve; every request runs" in lines[0]
    assert _warnings_of(log, "clean") == []


def test_override_config_is_checked_too(tmp_path):
    """A load with a config override warns about the override's fields (what is served)."""
    repo = tmp_path / "repo"
    _model(repo, "clean", CLEAN)
    log_path = tmp_path / "server.log"
    server = ServerProcess([repo], "--model-control-mode=explicit", log_path=log_path)
    server.start()
    try:
        with grpcclient.InferenceServerClient(server.url) as client:
            override = (
                '{"backend": "numpy", "max_batch_size": 8, "response_cache": {"enable": true},'
                '"input": [{"name": "IN", "data_type": "TYPE_INT32", "dims": [4]}],'
                '"output": [{"name": "OUT", "data_type": "TYPE_INT32", "dims": [4]}]}'
            )
            client.load_model("clean", config=override)
            assert client.is_model_ready("clean")
    finally:
        assert server.stop() == 0
    lines = _warnings_of(log_path.read_text(), "clean")
    assert len(lines) == 1
    assert _named(lines[0]) == ["response_cache"]


def _descriptor_paths(descriptor, prefix: str = ""):
    """(path, is a message with sub-fields) of every ModelConfig field, recursively."""
    for field in descriptor.fields:
        path = prefix + field.name
        message = field.message_type
        has_children = message is not None and not message.GetOptions().map_entry and bool(message.fields)
        yield path, has_children
        if has_children:
            yield from _descriptor_paths(message, path + ".")


def test_table_classifies_every_model_config_field():
    """Each ModelConfig field is in the table, or under an entry that covers it, or a message
    whose fields all are: a field added to the proto fails here until classified."""
    table = config_support.BY_PATH
    for path in table:
        parts = path.split(".")
        assert not any(".".join(parts[:i]) in table for i in range(1, len(parts))), (
            f"{path} is under an entry that already covers it"
        )
    paths = dict(_descriptor_paths(pb.ModelConfig.DESCRIPTOR))
    for entry in table:
        assert entry in paths, f"table entry {entry} is not a ModelConfig field"

    def covered(path: str) -> bool:
        parts = path.split(".")
        return any(".".join(parts[:i]) in table for i in range(1, len(parts) + 1))

    unclassified = []
    for path, has_children in paths.items():
        if covered(path):
            continue
        if has_children and all(covered(p) or paths[p] for p in paths if p.startswith(path + ".")):
            continue
        unclassified.append(path)
    assert unclassified == []


def test_docs_table_lists_every_entry():
    text = config_support.reference_markdown()
    for entry in config_support.FIELDS:
        assert f"| `{entry.path}` |" in text
        assert "|" not in entry.note  # (it would split the table's row and the warning's fields)


# ----------------------------------------------------------------------------- model_metrics

REQUEST_HIST = "nv_inference_request_duration_histogram_us"
COMPUTE_HIST = "nv_inference_compute_duration_histogram_us"


def _with_metrics(name: str, controls: str) -> str:
    return CLEAN.replace('name: "clean"', f'name: "{name}"') + f"model_metrics {{ metric_control [ {controls} ] }}\n"


def _control(family: str, buckets: str) -> str:
    return f'{{ metric_identifier {{ family: "{family}" }} histogram_options {{ buckets: [ {buckets} ] }} }}'


def _infer(client, model: str, n: int) -> None:
    for _ in range(n):
        inp = grpcclient.InferInput("IN", [1, 4], "INT32")
        inp.set_data_from_numpy(np.arange(4, dtype=np.int32).reshape(1, 4))
        client.infer(model, [inp])


def _bucket_bounds(port: int, family: str, model: str) -> list[str]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    bounds = []
    for labels in re.findall(rf"^{family}_bucket\{{([^}}]*)\}}", text, re.MULTILINE):
        pairs = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if pairs.get("model") == model:
            bounds.append(pairs["le"])
    return bounds


def test_model_metrics_buckets_on_metrics(tmp_path):
    repo = tmp_path / "repo"
    _model(repo, "custom", _with_metrics("custom", _control(REQUEST_HIST, "2, 20.5, 1000")))
    _model(repo, "clean", CLEAN)
    log_path = tmp_path / "server.log"
    server = ServerProcess([repo], "--metrics-config=histogram_latencies=true", log_path=log_path)
    server.start()
    try:
        with grpcclient.InferenceServerClient(server.url) as client:
            _infer(client, "custom", 3)
            _infer(client, "clean", 3)
        port = server.metrics_port
        assert _bucket_bounds(port, REQUEST_HIST, "custom") == ["2", "20.5", "1000", "+Inf"]
        # the family the config does not name keeps the defaults, which resolve microseconds
        default = _bucket_bounds(port, COMPUTE_HIST, "custom")
        assert default[:4] == ["5", "10", "25", "50"] and default[-1] == "+Inf"
        assert _bucket_bounds(port, REQUEST_HIST, "clean") == default
    finally:
        assert server.stop() == 0
    assert _warnings_of(log_path.read_text(), "custom") == []  # model_metrics is acted on


BAD_BUCKETS = {
    "unsorted": (_control(REQUEST_HIST, "10, 5"), "strictly increasing"),
    "repeated": (_control(REQUEST_HIST, "5, 5"), "strictly increasing"),
    "infinite": (_control(REQUEST_HIST, "1, inf"), "finite"),
    "empty": (_control(REQUEST_HIST, ""), "1 to 64 buckets, got 0"),
    "too_many": (_control(REQUEST_HIST, ", ".join(str(i) for i in range(1, 66))), "1 to 64 buckets, got 65"),
    "unknown_family": (_control("nv_inference_queue_summary_us", "1"), "not a histogram family"),
    "twice": (_control(REQUEST_HIST, "1") + ", " + _control(REQUEST_HIST, "2"), "more than once"),
}


def test_bad_model_metrics_buckets_refused_at_load(tmp_path):
    repo = tmp_path / "repo"
    for name, (controls, _) in BAD_BUCKETS.items():
        _model(repo, name, _with_metrics(name, controls))
    _model(repo, "clean", CLEAN)
    server = ServerProcess([repo], "--strict-readiness=false", log_path=tmp_path / "server.log")
    server.start()
    try:
        with grpcclient.InferenceServerClient(server.url) as client:
            index = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
            for name, (_, text) in BAD_BUCKETS.items():
                assert index[name]["state"] == "UNAVAILABLE", index[name]
                assert text in index[name]["reason"] and "model_metrics" in index[name]["reason"], index[name]
            assert client.is_model_ready("clean")  # the server keeps serving
    finally:
        assert server.stop() == 0
