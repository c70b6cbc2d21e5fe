"""NVIDIA's Model Analyzer (``model-analyzer``, release 1.58.0) in remote mode against a real fpgaserve.

Model Analyzer cannot start fpgaserve, so it profiles it as a Triton that someone else started
(``--triton-launch-mode remote``). On the way it uses most of what a Triton client can: readiness,
the repository index, the model's config (ModelConfig), a reload of the model with the config
variant it profiles (RepositoryModelLoad with a ``config`` override, which needs
``--model-control-mode explicit``), perf_analyzer's load with ``--collect-metrics`` and the
server-side statistics, and ``/metrics`` (its remote monitor reads the ``nv_gpu_*`` gauges:
here the emulated device's). It then writes a checkpoint, CSV results and HTML reports.

Remote mode needs no GPU where Model Analyzer runs: it neither starts a server nor asks
DCGM/CUDA (``--gpus`` only matters when it launches Triton itself); what it reports about the
server's devices comes from ``/metrics``. We profile the bundled ``jet_tagger`` in the numpy
emulation at batch 1, concurrency 1 and 2, with the run-config search off, twice:

* over gRPC with ``cpu_only: true``, as one profiles a CPU model on a Triton without GPUs;
* over HTTP without it, so Model Analyzer also reports the server's devices: fpgaserve's
  ``nv_gpu_utilization{gpu_uuid}`` makes the emulated FPGA (``EMU-0-numpy``) a device row of
  its GPU CSV, with the utilization the load caused.

Each run must exit 0; give a results CSV row per concurrency with a non-zero throughput; leave
the model's measurements in the checkpoint; have been counted by the server; and
``model-analyzer report`` must build the detailed report from the checkpoint. A cut-down
automatic search then checks that the server applies the config variants it is reloaded with.

Model Analyzer lives in its own venv, ``<repo>/.tools/venv-model-analyzer`` (tests/support/tools.py builds
it on first use, ~600 MB installed); perf_analyzer comes from ``<repo>/.tools/perf-analyzer``. If
either cannot be installed (no network, pip failing) every test here is skipped with the reason.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
from pathlib import Path

import pytest

from support.server_process import BUNDLED_REPO, ServerProcess, serve
from support.tools import model_analyzer_executable

# the first test in a session may also pay for building the venv (pip downloads)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

MODEL = "jet_tagger"
CONCURRENCIES = (1, 2)
# perf_analyzer's count window (measurement-request-count below): each concurrency needs at
# least one full window, so the server must have answered at least this many per concurrency
WINDOW_REQUESTS = 100
# Model Analyzer names the variant it profiles when it does not change the config
DEFAULT_VARIANT = f"{MODEL}_config_default"


@pytest.fixture(scope="module")
def model_analyzer() -> str:
    return model_analyzer_executable()


@pytest.fixture
def ma_server(tmp_path, model_analyzer):
    """A fresh server per test, so its statistics count only that run's traffic, in explicit
    model control: in remote mode Model Analyzer reloads each config variant it profiles, and
    Triton refuses repository loads unless the server runs in explicit mode."""
    yield from serve(
        ServerProcess(
            [BUNDLED_REPO],
            "--fpga-mode",
            "numpy",
            "--model-control-mode",
            "explicit",
            "--load-model",
            MODEL,
            log_path=tmp_path / "fpgaserve.log",
        )
    )


def profile_config(path: Path, cpu_only: bool, manual_concurrencies: tuple[int, ...] = ()) -> Path:
    """The profile config: what the command line cannot say (``cpu_only`` and a manual
    search's values are per-model keys). ``cpu_only`` leaves GPU metrics out of the results
    (and makes the automatic search's instance groups KIND_CPU); the perf_analyzer flags widen
    the stability band, so a loaded test machine's jitter does not make perf_analyzer give up
    on a concurrency."""
    lines = ["profile_models:", f"  {MODEL}:", f"    cpu_only: {str(cpu_only).lower()}"]
    if manual_concurrencies:
        concurrencies = ", ".join(str(c) for c in manual_concurrencies)
        lines += ["    parameters:", f"      concurrency: [{concurrencies}]", "      batch_sizes: [1]"]
    lines += [
        "    perf_analyzer_flags:",
        "      measurement-mode: count_windows",
        f"      measurement-request-count: {WINDOW_REQUESTS}",
        "      stability-percentage: 50",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def remote_profile(
    model_analyzer: str, server: ServerProcess, perf_analyzer: str, tmp_path: Path, protocol: str, config: Path
) -> list[str]:
    """``model-analyzer profile`` against ``server`` in remote mode, its outputs under tmp_path."""
    return [
        model_analyzer,
        "profile",
        "--config-file",
        str(config),
        "--triton-launch-mode",
        "remote",
        "--triton-grpc-endpoint",
        f"127.0.0.1:{server.grpc_port}",
        "--triton-http-endpoint",
        f"127.0.0.1:{server.http_port}",
        "--triton-metrics-url",
        f"http://127.0.0.1:{server.metrics_port}/metrics",
        "--client-protocol",
        protocol,
        "--perf-analyzer-path",
        perf_analyzer,
        # Model Analyzer kills perf_analyzer above 80 % of the host's cores by default, a guard
        # for its measurements' host; on 2 cores shared with the server that trips on load, not
        # on anything the server does: allow all of them (psutil's figure cannot exceed it)
        "--perf-analyzer-cpu-util",
        str(100 * (os.cpu_count() or 1)),
        # remote mode reads the model's config from the server, yet wants a repository and an
        # output folder for the config variants it writes (a config.pbtxt each)
        "--model-repository",
        str(BUNDLED_REPO),
        "--output-model-repository-path",
        str(tmp_path / "variants"),
        "--checkpoint-directory",
        str(tmp_path / "checkpoints"),
        "--export-path",
        str(tmp_path / "export"),
        "--perf-output",
        "--perf-output-path",
        str(tmp_path / "perf_analyzer.log"),
    ]


def inference_rows(export: Path) -> list[dict[str, str]]:
    with open(export / "results" / "metrics-model-inference.csv", newline="") as fh:
        return [r for r in csv.DictReader(fh) if r["Model"] == MODEL]


def run(cmd: list[str], cwd: Path, what: str, server: ServerProcess) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=cwd)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, (
        f"{what} exited with {proc.returncode}:\n{out[-6000:]}\n--- fpgaserve log ---\n{server.log()}"
    )
    return out


def success_count(server: ServerProcess) -> int:
    import tritonclient.grpc as grpcclient

    with grpcclient.InferenceServerClient(server.url) as client:
        stats = client.get_inference_statistics(MODEL).model_stats
    return sum(s.inference_stats.success.count for s in stats)


def checkpoint_throughputs(checkpoint_dir: Path) -> list[float]:
    """Every ``perf_throughput`` the checkpoint recorded for MODEL's default variant (one per
    measurement), found by walking the JSON: its nesting is Model Analyzer's internals."""
    checkpoints = sorted(checkpoint_dir.glob("*.ckpt"))
    assert checkpoints, f"no checkpoint in {checkpoint_dir}: {list(checkpoint_dir.iterdir())}"
    state = json.loads(checkpoints[-1].read_text())
    results = state["ResultManager.results"]["_results"]
    assert MODEL in results, f"the checkpoint has results for {list(results)} only"
    found: list[float] = []

    def walk(node) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "perf_throughput" and isinstance(value, list):
                    found.extend(v["_value"] for v in value if isinstance(v, dict) and "_value" in v)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(results[MODEL].get(DEFAULT_VARIANT))
    return found


# The HTTP run with device metrics repeats the gRPC run's profile (a minute on two cores):
# it runs with FPGASERVE_LONG_TESTS=1, reported as a skip otherwise.
_LONG = pytest.mark.skipif(
    os.environ.get("FPGASERVE_LONG_TESTS") != "1", reason="FPGASERVE_LONG_TESTS=1: the HTTP profile with device metrics"
)


@pytest.mark.parametrize(
    ("protocol", "cpu_only"),
    [
        pytest.param("grpc", True, id="grpc-cpu_only"),
        pytest.param("http", False, id="http-device_metrics", marks=_LONG),
    ],
)
def test_profile_remote(model_analyzer, ma_server, perf_analyzer, tmp_path, protocol, cpu_only):
    assert success_count(ma_server) == 0
    checkpoints = tmp_path / "checkpoints"
    export = tmp_path / "export"
    config = profile_config(tmp_path / "profile.yaml", cpu_only, CONCURRENCIES)
    profile = remote_profile(model_analyzer, ma_server, perf_analyzer, tmp_path, protocol, config)
    profile.append("--run-config-search-disable")
    out = run(profile, tmp_path, "model-analyzer profile", ma_server)
    assert f"Profiled 1 configurations for models: ['{MODEL}']" in out, out[-4000:]

    rows = inference_rows(export)
    assert sorted(int(r["Concurrency"]) for r in rows) == list(CONCURRENCIES), rows
    for row in rows:
        assert row["Batch"] == "1", row
        assert float(row["Throughput (infer/sec)"]) > 0, row
        assert float(row["p99 Latency (ms)"]) > 0, row

    if not cpu_only:
        # the emulated FPGA is the one device the server reports; Model Analyzer shows
        # nv_gpu_utilization's fraction as a percentage, non-zero while the load ran
        with open(export / "results" / "metrics-model-gpu.csv", newline="") as fh:
            devices = [r for r in csv.DictReader(fh) if r["Model"] == MODEL]
        assert sorted(int(r["Concurrency"]) for r in devices) == list(CONCURRENCIES), devices
        for row in devices:
            assert row["GPU UUID"] == "EMU-0-numpy", row
            assert 0 < float(row["GPU Utilization (%)"]) <= 100, row

    throughputs = checkpoint_throughputs(checkpoints)
    assert len(throughputs) >= len(CONCURRENCIES), throughputs
    assert all(t > 0 for t in throughputs), throughputs

    # the load reached the model: the server saw no other traffic, and whether or not the
    # reload at the start of the run reset the statistics, every measured request came after it
    served = success_count(ma_server)
    assert served >= WINDOW_REQUESTS * len(CONCURRENCIES), served

    report = [
        model_analyzer,
        "report",
        "--report-model-configs",
        DEFAULT_VARIANT,
        "--checkpoint-directory",
        str(checkpoints),
        "--export-path",
        str(export),
    ]
    run(report, tmp_path, "model-analyzer report", ma_server)
    detailed = export / "reports" / "detailed" / DEFAULT_VARIANT / "detailed_report.html"
    assert detailed.is_file(), list((export / "reports").rglob("*"))
    assert MODEL in detailed.read_text(errors="replace")


def test_automatic_search_reloads_variants(model_analyzer, ma_server, perf_analyzer, tmp_path):
    """The automatic search, cut to one variant beside the default (one KIND_CPU instance,
    max_batch_size 2, dynamic batching) at concurrency 1: Model Analyzer reloads the model
    with each variant's config as a RepositoryModelLoad override, so the server must apply
    it, not just accept it. It leaves the last variant loaded; the server's config then shows
    that variant, and the results show both configs measured."""
    export = tmp_path / "export"
    config = profile_config(tmp_path / "profile.yaml", cpu_only=True)
    profile = remote_profile(model_analyzer, ma_server, perf_analyzer, tmp_path, "grpc", config)
    profile += [
        "--run-config-search-mode",
        "brute",
        "--run-config-search-max-instance-count",
        "1",
        "--run-config-search-min-model-batch-size",
        "2",
        "--run-config-search-max-model-batch-size",
        "2",
        "--run-config-search-max-concurrency",
        "1",
    ]
    out = run(profile, tmp_path, "model-analyzer profile", ma_server)
    assert f"Profiled 2 configurations for models: ['{MODEL}']" in out, out[-4000:]

    rows = {r["Model Config Path"]: r for r in inference_rows(export)}
    variant = f"{MODEL}_config_0"
    assert sorted(rows) == [variant, DEFAULT_VARIANT], rows
    for row in rows.values():
        assert row["Concurrency"] == "1", row
        assert float(row["Throughput (infer/sec)"]) > 0, row
    # as bundled: one KIND_MODEL instance (Model Analyzer writes the kind without "KIND_")
    assert (rows[DEFAULT_VARIANT]["Instance Group"], rows[DEFAULT_VARIANT]["Max Batch Size"]) == ("1:MODEL", "16384")
    assert (rows[variant]["Instance Group"], rows[variant]["Max Batch Size"]) == ("1:CPU", "2")

    import tritonclient.grpc as grpcclient

    with grpcclient.InferenceServerClient(ma_server.url) as client:
        served = client.get_model_config(MODEL, as_json=True)["config"]
    assert served["max_batch_size"] == 2, served
    assert [(g["kind"], g["count"]) for g in served["instance_group"]] == [("KIND_CPU", 1)], served
    assert "dynamic_batching" in served, served
