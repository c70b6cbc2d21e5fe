"""Prometheus /metrics on --metrics-port: Triton's names, labels and semantics (core metrics.cc,
infer_stats.cc; server docs/user_guide/metrics.md).

A server of our own (so deltas see only this file's traffic) serves tests/models plus two
models made here: ``failing`` (execute raises: nv_inference_request_failure{reason="BACKEND"})
and ``gate`` (execute blocks until the test opens a gate file, to hold requests pending).

Checked: the text format (HTTP 200, every sample under a HELP/TYPE'd family); exact family
names and types, counters without a ``_total`` suffix; labels exactly {model, version}
(+reason, +le) and none of the labels Prometheus adds itself (pod, namespace, release, app);
exact counter deltas after known traffic and agreement with ModelStatistics (µs = ns/1000);
the pending gauge; the load-duration gauge; the queue histogram; SuperSONIC's autoscaling
expression; perf_analyzer ``--collect-metrics``; ``--metrics-port -1``.
"""

from __future__ import annotations

import csv
import math
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from support.server_process import CONFORMANCE_REPO, ServerProcess
from support.waiting import wait_for

COUNTERS = (
    "nv_inference_request_success",
    "nv_inference_request_failure",
    "nv_inference_count",
    "nv_inference_exec_count",
    "nv_inference_request_duration_us",
    "nv_inference_queue_duration_us",
    "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
)
GAUGES = ("nv_inference_pending_request_count", "nv_model_load_duration_secs")
HISTOGRAM = "nv_inference_queue_duration_histogram_us"
DURATIONS = {  # metric -> ModelStatistics inference_stats field
    "nv_inference_request_duration_us": "success",
    "nv_inference_queue_duration_us": "queue",
    "nv_inference_compute_input_duration_us": "compute_input",
    "nv_inference_compute_infer_duration_us": "compute_infer",
    "nv_inference_compute_output_duration_us": "compute_output",
}
FORBIDDEN_LABELS = {"pod", "namespace", "release", "app"}
FAIL_REASONS = {"REJECTED", "CANCELED", "BACKEND", "OTHER"}

FAILING_CONFIG = """
name: "failing"
backend: "numpy"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] } ]
"""
FAILING_MODEL = """
class Model:
    def execute(self, inputs):
        raise RuntimeError("failing on purpose")
"""
GATE_CONFIG = FAILING_CONFIG.replace('"failing"', '"gate"')
GATE_MODEL = """
import os
import time

GATE_DIR = {gate_dir!r}


class Model:
    def execute(self, inputs):
        with open(os.path.join(GATE_DIR, "started"), "a") as f:
            f.write("x")
        deadline = time.monotonic() + 30  # bounded: never hang the server
        while not os.path.exists(os.path.join(GATE_DIR, "open")) and time.monotonic() < deadline:
            time.sleep(0.01)
        return {{"OUTPUT0": inputs["INPUT0"]}}
"""


@pytest.fixture(scope="module")
def gate_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("gate")


@pytest.fixture(scope="module")
def metrics_server(tmp_path_factory, gate_dir):
    repo = tmp_path_factory.mktemp("metrics_repo")
    for name, config, model in (
        ("failing", FAILING_CONFIG, FAILING_MODEL),
        ("gate", GATE_CONFIG, GATE_MODEL.format(gate_dir=str(gate_dir))),
    ):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(config)
        (repo / name / "1" / "model.py").write_text(model)
    log = tmp_path_factory.mktemp("metrics_server") / "fpgaserve.log"
    with ServerProcess([CONFORMANCE_REPO, repo], log_path=log) as srv:
        yield srv
        (gate_dir / "open").touch()  # never leave a request blocked at shutdown
        rc = srv.stop()
        assert rc == 0, f"server exited with {rc}: {srv.log()}"


@pytest.fixture
def client(metrics_server):
    import tritonclient.grpc as grpcclient

    with grpcclient.InferenceServerClient(metrics_server.url) as c:
        yield c


# ----------------------------------------------------------------------------- scraping

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


class Scrape:
    """One /metrics page, parsed strictly (any line that is not a comment must be a sample)."""

    def __init__(self, text: str):
        self.text = text
        self.types: dict[str, str] = {}
        self.helps: dict[str, str] = {}
        self.samples: list[tuple[str, dict, float]] = []
        for line in text.splitlines():
            if not line:
                continue
            if line.startswith("# TYPE "):
                name, kind = line[7:].split(" ", 1)
                self.types[name] = kind
            elif line.startswith("# HELP "):
                name, doc = line[7:].split(" ", 1)
                self.helps[name] = doc
            elif line.startswith("#"):
                continue
            else:
                m = _SAMPLE.match(line)
                assert m, f"not a Prometheus sample line: {line!r}"
                labels = dict(_LABEL.findall(m.group(2) or ""))
                self.samples.append((m.group(1), labels, float(m.group(3))))

    def series(self, name: str, **match) -> list[tuple[dict, float]]:
        return [
            (labels, v)
            for n, labels, v in self.samples
            if n == name and all(labels.get(k) == w for k, w in match.items())
        ]

    def value(self, name: str, **match) -> float:
        found = self.series(name, **match)
        assert len(found) == 1, f"{name}{match}: {len(found)} series: {found}"
        return found[0][1]

    def total(self, name: str) -> float:
        return sum(v for _, v in self.series(name))


def fetch(port: int, path: str = "/metrics") -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), ""


def scrape(server) -> Scrape:
    status, _, text = fetch(server.metrics_port)
    assert status == 200, status
    return Scrape(text)


def model_values(s: Scrape, model: str) -> dict[str, float]:
    out = {name: s.value(name, model=model, version="1") for name in COUNTERS if name != "nv_inference_request_failure"}
    for reason in FAIL_REASONS:
        out[f"failure.{reason}"] = s.value("nv_inference_request_failure", model=model, version="1", reason=reason)
    out["pending"] = s.value("nv_inference_pending_request_count", model=model, version="1")
    return out


def simple_inputs(batch: int):
    import tritonclient.grpc as grpcclient

    a = np.arange(16 * batch, dtype=np.int32).reshape(batch, 16)
    inputs = [
        grpcclient.InferInput("INPUT0", [batch, 16], "INT32"),
        grpcclient.InferInput("INPUT1", [batch, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(np.ones_like(a))
    return inputs


def int4_input(value: int = 1):
    import tritonclient.grpc as grpcclient

    i = grpcclient.InferInput("INPUT0", [1, 4], "INT32")
    i.set_data_from_numpy(np.full((1, 4), value, dtype=np.int32))
    return i


# ----------------------------------------------------------------------------- format and names


@pytest.mark.timeout(60)
def test_endpoint_serves_prometheus_text(metrics_server):
    status, ctype, text = fetch(metrics_server.metrics_port)
    assert status == 200
    assert ctype.startswith("text/plain"), ctype
    s = Scrape(text)
    assert s.samples, text[:500]
    # every sample belongs to a family with HELP and TYPE lines of the same name
    for name, _, _ in s.samples:
        family = name
        if s.types.get(re.sub(r"_(bucket|count|sum)$", "", name)) == "histogram":
            family = re.sub(r"_(bucket|count|sum)$", "", name)
        assert family in s.types and family in s.helps, f"sample {name} has no HELP/TYPE for {family}"
    # the endpoint answers only /metrics
    assert fetch(metrics_server.metrics_port, "/nothing")[0] == 404


@pytest.mark.timeout(60)
def test_family_names_and_types_are_tritons(metrics_server, client):
    s = scrape(metrics_server)
    for name in COUNTERS:
        assert s.types.get(name) == "counter", (name, s.types.get(name))
    for name in GAUGES:
        assert s.types.get(name) == "gauge", (name, s.types.get(name))
    assert s.types.get(HISTOGRAM) == "histogram"
    # no _total suffix anywhere on Triton's families (prometheus_client would add one)
    assert not [n for n in list(s.types) + [x for x, _, _ in s.samples] if n.startswith("nv_") and n.endswith("_total")]
    # every loaded model has every per-model family, version "1"
    models = {m.name for m in client.get_model_repository_index().models if m.state == "READY"}
    assert {"simple", "simple_sequence", "failing", "gate"} <= models
    for name in COUNTERS + GAUGES:
        assert {labels["model"] for labels, _ in s.series(name)} == models, name
        assert {labels["version"] for labels, _ in s.series(name)} == {"1"}, name


@pytest.mark.timeout(60)
def test_labels_are_exactly_model_and_version(metrics_server):
    s = scrape(metrics_server)
    for name, labels, _ in s.samples:
        assert not FORBIDDEN_LABELS & set(labels), f"{name} carries {labels}: Prometheus adds these itself"
        if name == "nv_inference_request_failure":
            assert set(labels) == {"model", "version", "reason"}, (name, labels)
            assert labels["reason"] in FAIL_REASONS
        elif name == f"{HISTOGRAM}_bucket":
            assert set(labels) == {"model", "version", "le"}, (name, labels)
        elif name.startswith(("nv_inference_", "nv_model_")):
            assert set(labels) == {"model", "version"}, (name, labels)
    for model in ("simple", "failing"):
        reasons = {labels["reason"] for labels, _ in s.series("nv_inference_request_failure", model=model)}
        assert reasons == FAIL_REASONS, reasons


@pytest.mark.timeout(60)
def test_model_load_duration_is_present(metrics_server, client):
    s = scrape(metrics_server)
    for model in ("simple", "simple_sequence", "failing"):
        v = s.value("nv_model_load_duration_secs", model=model, version="1")
        assert math.isfinite(v) and v >= 0, (model, v)


# ----------------------------------------------------------------------------- values


@pytest.mark.timeout(60)
def test_counters_after_known_traffic(metrics_server, client):
    """5 requests of batch 1 and 3 of batch 4 to simple (no dynamic batching: one execution
    each), and 3 to a model that raises: exact deltas."""
    before = scrape(metrics_server)
    for _ in range(5):
        client.infer("simple", simple_inputs(1))
    for _ in range(3):
        client.infer("simple", simple_inputs(4))
    from tritonclient.utils import InferenceServerException

    for _ in range(3):
        with pytest.raises(InferenceServerException, match="failing on purpose"):
            client.infer("failing", [int4_input()])
    after = scrape(metrics_server)

    b, a = model_values(before, "simple"), model_values(after, "simple")
    d = {k: a[k] - b[k] for k in a}
    assert d["nv_inference_request_success"] == 8, d
    assert d["nv_inference_count"] == 5 + 3 * 4, d
    assert d["nv_inference_exec_count"] == 8, d
    assert all(d[f"failure.{r}"] == 0 for r in FAIL_REASONS), d
    for name in (
        "nv_inference_request_duration_us",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_compute_output_duration_us",
    ):
        assert d[name] > 0, (name, d)
    assert d["nv_inference_compute_input_duration_us"] >= 0, d
    assert a["pending"] == 0, a

    bf, af = model_values(before, "failing"), model_values(after, "failing")
    df = {k: af[k] - bf[k] for k in af}
    assert df["failure.BACKEND"] == 3, df
    assert df["failure.REJECTED"] == df["failure.CANCELED"] == df["failure.OTHER"] == 0, df
    assert df["nv_inference_request_success"] == df["nv_inference_count"] == 0, df
    # Triton adds request durations for successes only
    assert df["nv_inference_request_duration_us"] == 0, df


@pytest.mark.timeout(60)
def test_metrics_agree_with_model_statistics(metrics_server, client):
    """Same numbers as ModelStatistics: counts equal, durations in µs = ns/1000 (Triton
    truncates per request, so up to one µs per request below ns//1000)."""
    for batch in (1, 2, 8):
        client.infer("simple", simple_inputs(batch))
    st = client.get_inference_statistics("simple").model_stats[0]
    s = scrape(metrics_server)
    v = model_values(s, "simple")
    assert v["nv_inference_request_success"] == st.inference_stats.success.count
    assert v["nv_inference_count"] == st.inference_count
    assert v["nv_inference_exec_count"] == st.execution_count
    assert sum(v[f"failure.{r}"] for r in FAIL_REASONS) == st.inference_stats.fail.count
    n = st.inference_stats.success.count
    for name, field in DURATIONS.items():
        ns = getattr(st.inference_stats, field).ns
        assert getattr(st.inference_stats, field).count == n, field
        assert ns // 1000 - n <= v[name] <= ns // 1000, (name, v[name], ns)


@pytest.mark.timeout(60)
def test_queue_histogram_is_cumulative(metrics_server, client):
    for _ in range(4):
        client.infer("simple", simple_inputs(1))
    s = scrape(metrics_server)
    for model in ("simple", "failing"):
        buckets = s.series(f"{HISTOGRAM}_bucket", model=model, version="1")
        assert buckets and buckets[-1][0]["le"] == "+Inf", buckets
        bounds = [float(labels["le"]) for labels, _ in buckets]
        assert bounds == sorted(bounds) and len(set(bounds)) == len(bounds), bounds
        counts = [c for _, c in buckets]
        assert counts == sorted(counts), f"buckets of {model} are not cumulative: {counts}"
        count = s.value(f"{HISTOGRAM}_count", model=model, version="1")
        assert counts[-1] == count == s.value("nv_inference_request_success", model=model, version="1")
        queue_us = s.value("nv_inference_queue_duration_us", model=model, version="1")
        assert 0 <= s.value(f"{HISTOGRAM}_sum", model=model, version="1") - queue_us <= max(1, count)
    assert s.value(f"{HISTOGRAM}_count", model="simple", version="1") >= 4
    assert s.value(f"{HISTOGRAM}_count", model="failing", version="1") == 0  # successes only


@pytest.mark.timeout(90)
def test_pending_request_count(metrics_server, client, gate_dir):
    """While 'gate' executes one request, two more wait in its queue: pending == 2; once the
    gate opens everything completes and pending returns to 0."""
    results, errors = [], []

    def done(result, error):
        (errors if error is not None else results).append(error or result)

    client.async_infer("gate", [int4_input(1)], callback=done, client_timeout=60)
    wait_for(lambda: ((gate_dir / "started").exists(), "not started"), 20, "first gate request executing")
    for v in (2, 3):
        client.async_infer("gate", [int4_input(v)], callback=done, client_timeout=60)

    def pending_is(n):
        got = scrape(metrics_server).value("nv_inference_pending_request_count", model="gate", version="1")
        return got == n, got

    wait_for(lambda: pending_is(2), 20, "nv_inference_pending_request_count == 2")
    (gate_dir / "open").touch()
    wait_for(lambda: (len(results) + len(errors) == 3, (results, errors)), 30, "all gate requests answered")
    assert not errors, errors
    wait_for(lambda: pending_is(0), 10, "nv_inference_pending_request_count == 0")
    s = scrape(metrics_server)
    assert s.value("nv_inference_request_success", model="gate", version="1") == 3
    assert s.value("nv_inference_exec_count", model="gate", version="1") == 3


# ----------------------------------------------------------------------------- SuperSONIC


@pytest.mark.timeout(60)
def test_supersonic_load_metric(metrics_server, client):
    """SuperSONIC's KEDA/Envoy load metric from two scrapes around traffic:
    sum(rate(nv_inference_queue_duration_us)) / (sum(rate(nv_inference_exec_count)) * 1000 + 0.001)."""
    s1, t1 = scrape(metrics_server), time.monotonic()

    def worker(_):
        import tritonclient.grpc as grpcclient

        c = grpcclient.InferenceServerClient(metrics_server.url)
        try:
            for _ in range(25):
                c.infer("simple", simple_inputs(2))
        finally:
            c.close()

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(worker, range(4), timeout=50))
    s2, t2 = scrape(metrics_server), time.monotonic()
    dt = t2 - t1
    for name in ("nv_inference_queue_duration_us", "nv_inference_exec_count"):
        assert s1.series(name) and s2.series(name), name
        # counters never go down
        old = {tuple(sorted(labels.items())): v for labels, v in s1.series(name)}
        for labels, v in s2.series(name):
            assert v >= old.get(tuple(sorted(labels.items())), 0), (name, labels)
    d_queue = s2.total("nv_inference_queue_duration_us") - s1.total("nv_inference_queue_duration_us")
    d_exec = s2.total("nv_inference_exec_count") - s1.total("nv_inference_exec_count")
    assert d_exec == 100, d_exec  # 4 x 25 executions of simple, nothing else
    queue_rate, exec_rate = d_queue / dt, d_exec / dt
    load = queue_rate / (exec_rate * 1000 + 0.001)
    assert math.isfinite(load) and load >= 0, load
    # it is the average queue time per execution, in ms
    per_exec_ms = (
        (
            s2.value("nv_inference_queue_duration_us", model="simple", version="1")
            - s1.value("nv_inference_queue_duration_us", model="simple", version="1")
        )
        / 100
        / 1000
    )
    assert load == pytest.approx(per_exec_ms, rel=1e-3, abs=1e-6)


# ----------------------------------------------------------------------------- perf_analyzer


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_perf_analyzer_collect_metrics(perf_analyzer, metrics_server, tmp_path):
    out_csv = tmp_path / "m.csv"
    cmd = [
        perf_analyzer,
        "-m",
        "simple",
        "-u",
        metrics_server.url,
        "-i",
        "grpc",
        "--collect-metrics",
        "--metrics-url",
        f"localhost:{metrics_server.metrics_port}/metrics",
        "--metrics-interval",
        "100",
        "--verbose-csv",
        "-f",
        str(out_csv),
        "--concurrency-range",
        "1",
        "--measurement-mode",
        "count_windows",
        "--measurement-request-count",
        "200",
        "-s",
        "50",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=100, cwd=tmp_path)
    output = proc.stdout + proc.stderr
    info = f"{' '.join(cmd)}\nrc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}"
    assert proc.returncode == 0, info
    assert "Metrics endpoint curling did not succeed" not in output, info
    assert "Server Prometheus Metrics" in proc.stdout, info
    with open(out_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 1 and float(rows[0]["Inferences/Second"]) > 0, rows
    assert "Avg GPU Utilization" in rows[0], list(rows[0])  # --verbose-csv with metrics columns


# ----------------------------------------------------------------------------- disabled


def _refuses(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(2)
        try:
            s.connect(("127.0.0.1", port))
        except OSError:
            return True
    return False


@pytest.mark.timeout(60)
def test_metrics_port_minus_one_disables_the_endpoint(tmp_path):
    import tritonclient.grpc as grpcclient

    log = tmp_path / "fpgaserve.log"
    with ServerProcess([CONFORMANCE_REPO], "--metrics-port", "-1", log_path=log) as srv:
        c = grpcclient.InferenceServerClient(srv.url)
        try:
            assert c.is_server_ready()
            c.infer("simple", simple_inputs(1))
        finally:
            c.close()
        assert _refuses(srv.metrics_port), "something answers on the metrics port"
        assert "Started Metrics Service" not in log.read_text()
        assert srv.http_status("/v2/health/ready") == 200
        rc = srv.stop()
    assert rc == 0, log.read_text()[-2000:]
