"""SuperSONIC's queries, evaluated by a real Prometheus scraping two real fpgaserve servers.

The setup mirrors one SuperSONIC release with two Triton replicas: two servers serving the
bundled repository (``bitstreams/``) in numpy emulation (identical replicas, as SuperSONIC
requires), scraped every second by a Prometheus of our own (Debian's ``prometheus``, on a free
loopback port, config and TSDB in a temp dir). Its static targets get the labels SuperSONIC's
Prometheus adds through relabelling: ``release`` (one release, ``sonic``, for both servers,
so the load metric's ``sum by (release)`` has to add two replicas up, which is what the
autoscaler and Envoy act on), ``app``, ``namespace`` and ``pod`` (one per server, which
the per-server checks group by).

Load: several concurrent tritonclient clients per server, so requests queue behind the one
model instance. Then, through Prometheus's HTTP API:

* the load metric exactly as chart 0.3.1 writes it (``templates/_helpers/_scaling-metric.tpl``)
  returns one finite, non-negative number for the release, and it agrees in order of magnitude
  (a factor 3: rate() extrapolates to the window's edges, a little differently per target)
  with what the servers' own ModelStatistics say: queue time per execution, in ms, over the
  load. The same expression grouped by pod agrees with each server. The response has the
  shape Envoy's Lua admission filter parses;
* ``count(nv_gpu_utilization)`` is 2, one series per server (the dashboard's "Number of
  Triton Servers"), and each server's utilization was above 0 during the load and never
  outside [0, 1];
* no series carries ``exported_pod``/``exported_release``/...: the servers emit none of the
  labels Prometheus adds.

Everything waits on conditions (Prometheus has the samples, the counters reached their final
values); nothing asserts on time. rate() over [30s] needs two samples in the window: the load
runs a few seconds at a 1 s scrape interval, and the query is evaluated right after
Prometheus has the final counters, so the window holds samples from before and after the load.
"""

from __future__ import annotations

import functools
import json
import math
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from support import waiting
from support.debian import require_packages
from support.server_process import BUNDLED_REPO, ServerProcess, free_port

RELEASE = "sonic"
PODS = ("sonic-triton-0", "sonic-triton-1")
MODELS = {"facile": ("input", 47), "jet_tagger": ("input", 16)}
# The load metric as the chart renders it for release RELEASE (serverLoadMetric left empty)
LOAD_METRIC = f'''sum by (release) (
    rate(nv_inference_queue_duration_us{{release=~"{RELEASE}"}}[30s])
)
  /
sum by (release) (
    (rate(nv_inference_exec_count{{release=~"{RELEASE}"}}[30s]) * 1000) + 0.001
)'''
# the dashboard's "Number of Triton Servers" panel
SERVER_COUNT = f'count by(release)(nv_gpu_utilization{{app=~"supersonic", release=~"{RELEASE}", namespace=~"default"}})'
# what Envoy's Lua filter (cfg/envoy-filter.lua) extracts from the /api/v1/query response
ENVOY_LUA_VALUE = re.compile(r'"value":\[\d+\.\d+,"([\d.]+)"\]')
LOAD_SECONDS = 5.0  # how long load runs, at least: several 1 s scrapes during it
CLIENTS_PER_SERVER = 6


class Prometheus:
    def __init__(self, tmp, targets: dict[str, int]):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        static = "\n".join(
            f"""      - targets: ["127.0.0.1:{port}"]
        labels: {{release: "{RELEASE}", app: "supersonic", namespace: "default", pod: "{pod}"}}"""
            for pod, port in targets.items()
        )
        config = tmp / "prometheus.yml"
        config.write_text(f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: fpgaserve
    metrics_path: /metrics
    static_configs:
{static}
""")
        self.log_path = tmp / "prometheus.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115  (closed in stop())
        self.proc = subprocess.Popen(
            [
                shutil.which("prometheus") or "/usr/bin/prometheus",
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"prometheus exited with {self.proc.returncode}: {self.log()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        pytest.fail(f"prometheus not ready within {timeout} s: {self.log()}")

    def query_raw(self, expr: str, at: float | None = None) -> str:
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}", timeout=10) as r:
            return r.read().decode()

    def query(self, expr: str, at: float | None = None) -> list[tuple[dict, float]]:
        body = json.loads(self.query_raw(expr, at))
        assert body["status"] == "success", body
        assert body["data"]["resultType"] == "vector", body
        return [(item["metric"], float(item["value"][1])) for item in body["data"]["result"]]

    def by(self, expr: str, label: str) -> dict[str, float]:
        return {m.get(label, ""): v for m, v in self.query(expr)}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


wait_for = functools.partial(waiting.wait_for, interval=0.2)  # one Prometheus query per 0.2 s


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    started = {}
    try:
        for pod in PODS:
            log = tmp_path_factory.mktemp(pod) / "fpgaserve.log"
            started[pod] = ServerProcess(
                [BUNDLED_REPO],
                "--fpga-mode",
                "numpy",
                *(f"--load-model={m}" for m in MODELS),
                "--model-control-mode=explicit",
                log_path=log,
            ).start(timeout=120)
        yield started
    finally:
        for srv in started.values():
            srv.stop()


@pytest.fixture(scope="module")
def prometheus(servers, tmp_path_factory):
    require_packages("prometheus")
    prom = Prometheus(tmp_path_factory.mktemp("prometheus"), {pod: srv.metrics_port for pod, srv in servers.items()})
    try:
        prom.wait_ready()
        yield prom
    finally:
        prom.stop()


def statistics(srv: ServerProcess) -> tuple[int, int]:
    """(executions, queue µs summed per request) of the server's models, from ModelStatistics."""
    import tritonclient.grpc as grpcclient

    executions = queue_ns = 0
    with grpcclient.InferenceServerClient(srv.url) as c:
        for model in MODELS:
            st = c.get_inference_statistics(model).model_stats[0]
            executions += st.execution_count
            queue_ns += st.inference_stats.queue.ns
    return executions, queue_ns // 1000


def client_loop(srv: ServerProcess, seed: int, stop: threading.Event) -> int:
    import tritonclient.grpc as grpcclient

    rng = np.random.default_rng(seed)
    # most clients on FACILE (queueing behind its one instance), some on the jet tagger
    model = "jet_tagger" if seed % 3 == 2 else "facile"
    name, features = MODELS[model]
    x = grpcclient.InferInput(name, [1024, features], "FP32")
    x.set_data_from_numpy(rng.random((1024, features), dtype=np.float32))
    sent = 0
    with grpcclient.InferenceServerClient(srv.url) as c:
        while not stop.is_set():
            c.infer(model, [x])
            sent += 1
    return sent


@pytest.mark.timeout(300)
def test_supersonic_queries(servers, prometheus):
    prom = prometheus
    # both targets scraped, every model's counters stored, before any load
    wait_for(
        lambda: (prom.by('up{job="fpgaserve"}', "pod") == dict.fromkeys(PODS, 1.0), prom.by("up", "pod")),
        60,
        "both servers scraped",
    )
    wait_for(
        lambda: (
            len(prom.query(f'nv_inference_exec_count{{release="{RELEASE}"}}')) == 2 * len(MODELS),
            prom.query("nv_inference_exec_count"),
        ),
        60,
        "the counters of both servers in Prometheus",
    )

    before = {pod: statistics(srv) for pod, srv in servers.items()}
    exec_sum = f'sum by (pod) (nv_inference_exec_count{{release="{RELEASE}"}})'
    stop = threading.Event()
    started = time.monotonic()
    with ThreadPoolExecutor(CLIENTS_PER_SERVER * len(PODS)) as pool:
        futures = [
            pool.submit(client_loop, srv, i, stop) for srv in servers.values() for i in range(CLIENTS_PER_SERVER)
        ]
        try:
            # load until it has run a few scrape intervals and Prometheus has scraped progress
            # on both servers (so a utilization sample covers busy time)
            wait_for(
                lambda: (
                    time.monotonic() - started >= LOAD_SECONDS
                    and all(prom.by(exec_sum, "pod").get(p, 0) > before[p][0] for p in PODS),
                    prom.by(exec_sum, "pod"),
                ),
                120,
                "Prometheus scraping progress on both servers under load",
            )
        finally:
            stop.set()
        sent = sum(f.result(timeout=120) for f in futures)
    assert sent > 0
    after = {pod: statistics(srv) for pod, srv in servers.items()}

    # Prometheus has the final counters of both servers (no traffic since)
    wait_for(
        lambda: (prom.by(exec_sum, "pod") == {p: float(after[p][0]) for p in PODS}, prom.by(exec_sum, "pod")),
        60,
        "final counters scraped",
    )
    at = time.time()
    if round(at * 1000) % 1000 == 0:  # Envoy's Lua pattern wants a fraction in the timestamp
        at += 0.001

    # -- the load metric, as KEDA and Envoy evaluate it
    raw = prom.query_raw(LOAD_METRIC, at)
    result = prom.query(LOAD_METRIC, at)
    assert [m for m, _ in result] == [{"release": RELEASE}], raw
    load = result[0][1]
    assert math.isfinite(load) and load >= 0, raw
    d_exec = sum(after[p][0] - before[p][0] for p in PODS)
    d_queue_us = sum(after[p][1] - before[p][1] for p in PODS)
    expected = d_queue_us / (d_exec * 1000)  # ms of queueing per execution over the load
    assert d_exec > 0 and expected > 0, (before, after)
    assert expected / 3 <= load <= expected * 3, (load, expected, before, after)
    found = ENVOY_LUA_VALUE.search(raw)
    assert found and float(found.group(1)) == pytest.approx(load), raw

    # the same expression per server agrees with that server's statistics
    per_pod = LOAD_METRIC.replace("by (release)", "by (pod)")
    for pod, value in prom.by(per_pod, "pod").items():
        d_e = after[pod][0] - before[pod][0]
        exp = (after[pod][1] - before[pod][1]) / (d_e * 1000)
        assert math.isfinite(value) and exp / 3 <= value <= exp * 3, (pod, value, exp)
    assert set(prom.by(per_pod, "pod")) == set(PODS)

    # -- one device per server, busy during the load, always a fraction
    assert prom.query("count(nv_gpu_utilization)", at) == [({}, 2.0)]
    assert prom.query(SERVER_COUNT, at) == [({"release": RELEASE}, 2.0)]
    devices = prom.query('nv_gpu_utilization{release="sonic"}', at)
    assert sorted((m["pod"], m["gpu_uuid"]) for m, _ in devices) == [(p, "EMU-0-numpy") for p in PODS]
    busiest = prom.by("max by (pod) (max_over_time(nv_gpu_utilization[2m]))", "pod")
    idlest = prom.by("min by (pod) (min_over_time(nv_gpu_utilization[2m]))", "pod")
    assert set(busiest) == set(PODS) and all(0 < busiest[p] <= 1 and idlest[p] >= 0 for p in PODS), (busiest, idlest)

    # -- Prometheus added pod/release/app/namespace; the servers emitted none of them
    for label in ("pod", "release", "app", "namespace"):
        assert prom.query(f'count({{exported_{label}=~".+"}})', at) == [], label
