"""``--metrics-config``: Triton's latency summaries and histograms, and counters off.

* The windowed summary's quantiles are checked against numpy on more observations than it
  samples. The tolerance is in rank (Triton's error bounds), and the window forgets what is
  older than 60 s (an injected clock).
* On a real server, every family parses as Prometheus text, counts equal the requests sent,
  and quantiles are ordered. The first-response histogram exists for the decoupled model
  only, as in Triton; ``counter_latencies=false`` removes the duration counters.
* Side by side with the real Triton 2.51: the same summary families, labels and quantiles
  (default and ``summary_quantiles``), for the same model.
* A malformed setting fails the start with a clear message.
"""

from __future__ import annotations

import math
import queue
import random
import subprocess
import time
from functools import partial

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from fpgaserve.server.engine.latency import (
    MAX_AGE_S,
    SAMPLE,
    MetricsConfigError,
    WindowedSummary,
    parse_metrics_config,
)
from support.metrics_text import metric_families, model_samples
from support.repeat_int32 import repeat_inputs
from support.server_process import CONFORMANCE_REPO, ServerProcess, free_port

SUMMARIES = [
    "nv_inference_request_summary_us",
    "nv_inference_queue_summary_us",
    "nv_inference_compute_input_summary_us",
    "nv_inference_compute_infer_summary_us",
    "nv_inference_compute_output_summary_us",
]
COUNTERS = [
    "nv_inference_request_duration_us",
    "nv_inference_queue_duration_us",
    "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
]


# ----------------------------------------------------------------------------- the estimator
class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def test_quantiles_within_rank_error_beyond_the_sample_size():
    clock = Clock()
    s = WindowedSummary(clock=clock, rng=random.Random(7))
    values = np.random.default_rng(3).lognormal(5, 1, 60 * SAMPLE)
    for chunk in np.array_split(values, 50):
        s.observe_many(chunk.tolist())
        clock.t += 0.2  # everything stays inside one 60 s window
    qs = [0.5, 0.9, 0.99, 0.999]
    got = s.quantiles(qs)
    ordered = np.sort(values)
    for q, g in zip(qs, got):
        rank = np.searchsorted(ordered, g) / len(ordered)
        assert abs(rank - q) < max(0.01, 4 * math.sqrt(q * (1 - q) / SAMPLE)), (q, rank)
    assert s.count == len(values)
    assert s.sum == pytest.approx(values.sum())


def test_the_window_forgets_old_observations_but_count_and_sum_do_not():
    clock = Clock()
    s = WindowedSummary(clock=clock)
    s.observe_many([1000.0] * 100)
    clock.t += MAX_AGE_S + 1
    assert all(math.isnan(v) for v in s.quantiles([0.5, 0.99]))
    s.observe_many([5.0] * 10)
    assert s.quantiles([0.5]) == [5.0]
    assert s.count == 110 and s.sum == 100_050.0


def test_settings_parse_as_tritons_and_bad_ones_are_refused():
    c = parse_metrics_config(["summary_latencies=true", "summary_quantiles=0.5:0.05,0.99:0.001"])
    assert c.summaries and not c.histograms and c.counters
    assert c.quantiles == ((0.5, 0.05), (0.99, 0.001))
    assert not parse_metrics_config(["counter_latencies=false"]).counters
    for bad in ["summary_latencies", "summary_latencies=yes", "summary_quantiles=0.5", "summary_quantiles=2:0.1"]:
        with pytest.raises(MetricsConfigError):
            parse_metrics_config([bad])


# ----------------------------------------------------------------------------- served
def _simple(client, n: int) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    for _ in range(n):
        ins = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"), grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
        ins[0].set_data_from_numpy(a)
        ins[1].set_data_from_numpy(a)
        client.infer("simple", ins)


def _repeat(client, values) -> None:
    ins = repeat_inputs(values)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=partial(lambda q, result, error: q.put(error or result), results))
    try:
        client.async_stream_infer("repeat_int32", inputs=ins)
        for _ in values:
            results.get(timeout=30)
    finally:
        client.stop_stream()


def _settled_families(port: int, model: str, count: int) -> dict:
    """The families once every summary of ``model`` counts ``count`` observations.

    Triton records a request's compute times after its response has left (the Python
    backend reports them from the stub's release path), so a scrape right after the last
    response can still miss them; wait up to 10 s for the counts to settle.
    """
    deadline = time.monotonic() + 10
    while True:
        fams = metric_families(port)
        counts = [model_samples(fams, n, model).get((f"{n}_count", None, None)) for n in SUMMARIES if n in fams]
        if counts.count(count) == len(SUMMARIES) or time.monotonic() > deadline:
            return fams
        time.sleep(0.1)


@pytest.mark.parametrize("processes", ["1", "2"])
def test_summaries_and_histograms_served(tmp_path, processes):
    args = ["--metrics-config=summary_latencies=true", "--metrics-config", "histogram_latencies=true"]
    with ServerProcess([CONFORMANCE_REPO], *args, "--frontend-processes", processes, log_path=tmp_path / "s.log") as s:
        client = grpcclient.InferenceServerClient(s.url)
        _simple(client, 12)
        _repeat(client, [1, 2, 3])
        fams = metric_families(s.metrics_port)
        for name in SUMMARIES:
            assert fams[name].type == "summary"
            got = model_samples(fams, name, "simple")
            assert got[(f"{name}_count", None, None)] == 12
            quantiles = [got[(name, q, None)] for q in ("0.5", "0.9", "0.95", "0.99", "0.999")]
            assert all(v >= 0 for v in quantiles) and quantiles == sorted(quantiles), (name, quantiles)
        request = model_samples(fams, "nv_inference_request_summary_us", "simple")
        assert request[("nv_inference_request_summary_us", "0.5", None)] > 0
        for name in ("nv_inference_request_duration_histogram_us", "nv_inference_compute_duration_histogram_us"):
            got = model_samples(fams, name, "simple")
            assert got[(f"{name}_count", None, None)] == 12
            assert got[(f"{name}_bucket", None, "+Inf")] == 12
        first = "nv_inference_first_response_histogram_ms"
        assert model_samples(fams, first, "simple") == {}  # decoupled models only, as in Triton
        decoupled = model_samples(fams, first, "repeat_int32")
        assert decoupled[(f"{first}_count", None, None)] == 1
        assert [k[2] for k in decoupled if k[0] == f"{first}_bucket"] == ["100", "500", "2000", "5000", "+Inf"]
        for name in COUNTERS:  # counters stay on by default
            assert name in fams


def test_counter_latencies_false_removes_the_duration_counters(tmp_path):
    with ServerProcess(
        [CONFORMANCE_REPO], "--metrics-config=counter_latencies=false", log_path=tmp_path / "s.log"
    ) as s:
        _simple(grpcclient.InferenceServerClient(s.url), 2)
        fams = metric_families(s.metrics_port)
        assert not [n for n in COUNTERS if n in fams]
        assert (
            model_samples(fams, "nv_inference_request_success", "simple")[
                ("nv_inference_request_success_total", None, None)
            ]
            == 2
        )
        assert not [n for n in SUMMARIES if n in fams]  # summaries stay off by default


def test_a_malformed_setting_fails_the_start():
    server = ServerProcess([CONFORMANCE_REPO], "--metrics-config=summary_quantiles=0.9")
    done = subprocess.run(server.args, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0
    assert "--metrics-config summary_quantiles: invalid option [0.9]; expected <quantile>:<error>" in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("extra", [[], ["--metrics-config=summary_quantiles=0.5:0.05,0.99:0.001"]])
def test_summary_families_match_tritons(tritonserver_path, tmp_path, extra):
    from support.reference_triton import start_tritonserver, stop_tritonserver, write_python_backend_repository

    args = ["--metrics-config=summary_latencies=true", *extra]
    repo = tmp_path / "triton_repo"
    write_python_backend_repository(repo, models=("simple",))
    ports = [free_port() for _ in range(3)]
    triton = start_tritonserver(repo, *ports, extra_args=args, log_path=tmp_path / "triton.log")
    try:
        _simple(grpcclient.InferenceServerClient(f"127.0.0.1:{ports[0]}"), 3)
        theirs = _settled_families(ports[2], "simple", 3)
    finally:
        stop_tritonserver(triton)
    with ServerProcess([CONFORMANCE_REPO], *args, log_path=tmp_path / "s.log") as s:
        _simple(grpcclient.InferenceServerClient(s.url), 3)
        ours = _settled_families(s.metrics_port, "simple", 3)

    def shape(fams):
        return {
            name: (
                fams[name].type,
                fams[name].documentation,
                sorted(
                    (smp.name, tuple(sorted(smp.labels.items())))
                    for smp in fams[name].samples
                    if smp.labels.get("model") == "simple"
                ),
            )
            for name in SUMMARIES
        }

    def counts(fams):
        return {name: model_samples(fams, name, "simple")[(f"{name}_count", None, None)] for name in SUMMARIES}

    assert shape(ours) == shape(theirs)
    assert counts(ours) == counts(theirs) == dict.fromkeys(SUMMARIES, 3)
