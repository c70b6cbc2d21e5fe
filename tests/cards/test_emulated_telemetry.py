"""Device telemetry of a server without an FPGA card: the emulated device (``EMU-<index>-<mode>``).

SuperSONIC's dashboard counts servers with ``count(nv_gpu_utilization)`` and plots the
``nv_gpu_*`` gauges; a server whose hls4ml models run in an emulation mode must show up there
as one device. Checked against real servers serving the bundled repository (``bitstreams/``)
in csim and numpy mode, driven by the real tritonclient, on their ``/metrics`` page:

* exactly one ``nv_gpu_utilization`` series, ``gpu_uuid="EMU-0-<mode>"``, in perf_analyzer's
  format (the one label, a plain decimal), the same value as the device's
  ``fpga_utilization{cu="emulator"}``, and ``fpga_device_info{mode, emulated="true"}``;
* after concurrent load on both models: utilization in (0, 1]; ``fpga_kernel_calls_total``
  grew by exactly the executions ModelStatistics counted; the busy time grew by no more than
  the wall time between the two scrapes (the two models run at the same time on two threads,
  and overlapping calls count once) and no more than the backend time of those executions;
* an interval without traffic reads 0;
* no power or memory figure is invented for an emulation, and no label Prometheus adds
  (pod, release, app, namespace) is emitted.

The accounting itself (overlapping calls counted once, a call in flight counted up to the
scrape) is checked in-process against a fake clock, so no assertion depends on timing.
"""

from __future__ import annotations

import math
import os
import re
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.server_process import BUNDLED_REPO, ServerProcess

FORBIDDEN_LABELS = {"pod", "namespace", "release", "app"}
# what perf_analyzer --collect-metrics reads (client_backend/triton/triton_client_backend.cc)
PA_REGEX = r'\n{name}\{{gpu_uuid="([^"]+)"\}} (\d+\.?\d*)'
MODELS = {"facile": ("input", 47), "jet_tagger": ("input", 16)}


def _serve(mode: str, tmp_path_factory) -> ServerProcess:
    log = tmp_path_factory.mktemp(f"emulated-{mode}") / "fpgaserve.log"
    # FPGASERVE_CACHE_DIR (conftest's csim_cache) is inherited: each project compiles once per run
    return ServerProcess([BUNDLED_REPO], "--fpga-mode", mode, log_path=log, env=dict(os.environ)).start(timeout=240)


@pytest.fixture(scope="module")
def csim_server(tmp_path_factory):
    srv = _serve("csim", tmp_path_factory)
    yield srv
    rc = srv.stop()
    assert rc == 0, f"server exited with {rc}: {srv.log()}"


class Page:
    """One /metrics page, parsed by prometheus_client's own text parser."""

    def __init__(self, text: str):
        self.text = text
        self.samples = [s for fam in text_string_to_metric_families(text) for s in fam.samples]

    def series(self, name: str, **match) -> list[tuple[dict, float]]:
        return [
            (s.labels, s.value)
            for s in self.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in match.items())
        ]

    def value(self, name: str, **match) -> float:
        found = self.series(name, **match)
        assert len(found) == 1, f"{name}{match}: {found}"
        return found[0][1]


def scrape(srv: ServerProcess) -> Page:
    with urllib.request.urlopen(f"http://127.0.0.1:{srv.metrics_port}/metrics", timeout=10) as r:
        assert r.status == 200
        return Page(r.read().decode())


def _load(srv: ServerProcess, clients: int = 6, requests: int = 8) -> None:
    """Each client sends to both models in turn, so both models' instances (two threads)
    execute at the same time and requests queue behind them."""
    import tritonclient.grpc as grpcclient

    def client(seed: int) -> None:
        rng = np.random.default_rng(seed)
        with grpcclient.InferenceServerClient(srv.url) as c:
            for _ in range(requests):
                for model, (name, features) in MODELS.items():
                    x = grpcclient.InferInput(name, [512, features], "FP32")
                    x.set_data_from_numpy(rng.random((512, features), dtype=np.float32))
                    c.infer(model, [x])

    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients), timeout=200))


def _executions(srv: ServerProcess) -> tuple[int, float]:
    """(executions, backend seconds of those executions) of both models, from ModelStatistics."""
    import tritonclient.grpc as grpcclient

    executions, infer_ns = 0, 0
    with grpcclient.InferenceServerClient(srv.url) as c:
        for model in MODELS:
            st = c.get_inference_statistics(model).model_stats[0]
            executions += st.execution_count
            infer_ns += sum(b.compute_infer.ns for b in st.batch_stats)  # per execution, not per request
    return executions, infer_ns / 1e9


@pytest.mark.timeout(300)
def test_emulated_device_after_load(csim_server):
    dev = "EMU-0-csim"
    exec_before, infer_before = _executions(csim_server)
    t0 = time.monotonic()
    first = scrape(csim_server)
    _load(csim_server)
    second = scrape(csim_server)
    wall = time.monotonic() - t0  # encloses the server's interval between the two scrapes
    exec_after, infer_after = _executions(csim_server)

    # one device, in Triton's and perf_analyzer's form
    assert [lab for lab, _ in second.series("nv_gpu_utilization")] == [{"gpu_uuid": dev}]
    util = second.value("nv_gpu_utilization", gpu_uuid=dev)
    assert 0 < util <= 1, util
    assert second.value("fpga_utilization", device=dev, cu="emulator") == pytest.approx(util, abs=1e-4)
    assert second.value("fpga_device_info", device=dev, mode="csim", emulated="true") == 1
    found = dict(re.findall(PA_REGEX.format(name="nv_gpu_utilization"), "\n" + second.text))
    assert found == {dev: found[dev]} and float(found[dev]) == util, found

    # every emulated execute() is one call of the device; the busy time is real busy time
    calls = second.value("fpga_kernel_calls_total", device=dev, cu="emulator")
    assert calls - first.value("fpga_kernel_calls_total", device=dev, cu="emulator") == exec_after - exec_before > 0
    busy_s = (
        second.value("fpga_kernel_duration_us_total", device=dev, cu="emulator")
        - first.value("fpga_kernel_duration_us_total", device=dev, cu="emulator")
    ) / 1e6
    assert 0 < busy_s <= wall, (busy_s, wall)
    assert busy_s <= (infer_after - infer_before) + 1e-6, (busy_s, infer_after - infer_before)

    # nothing measured, nothing exported: no power, energy or memory for an emulation
    for name in (
        "nv_gpu_power_usage",
        "nv_gpu_power_limit",
        "nv_gpu_memory_used_bytes",
        "nv_gpu_memory_total_bytes",
        "nv_energy_consumption",
        "fpga_power_usage_watts",
        "fpga_memory_used_bytes",
        "fpga_bitstream_info",
    ):
        assert not second.series(name), (name, second.series(name))
    for s in second.samples:
        assert not FORBIDDEN_LABELS & set(s.labels), f"{s.name} carries {s.labels}: Prometheus adds these itself"
        if s.name.startswith("nv_gpu_"):
            assert set(s.labels) == {"gpu_uuid"}, s

    # an interval without traffic: nothing ran
    third = scrape(csim_server)
    assert third.value("nv_gpu_utilization", gpu_uuid=dev) == 0.0
    assert third.value("fpga_kernel_calls_total", device=dev, cu="emulator") == calls


@pytest.mark.timeout(120)
def test_numpy_mode_is_its_own_emulated_device(tmp_path_factory):
    srv = _serve("numpy", tmp_path_factory)
    try:
        page = scrape(srv)  # the device is there from the start, as a GPU is: idle, not absent
        assert [lab for lab, _ in page.series("nv_gpu_utilization")] == [{"gpu_uuid": "EMU-0-numpy"}]
        assert page.value("nv_gpu_utilization", gpu_uuid="EMU-0-numpy") == 0.0
        assert page.value("fpga_device_info", device="EMU-0-numpy", mode="numpy", emulated="true") == 1
        _load(srv, clients=3, requests=4)
        util = scrape(srv).value("nv_gpu_utilization", gpu_uuid="EMU-0-numpy")
        assert 0 < util <= 1, util
    finally:
        rc = srv.stop()
    assert rc == 0, srv.log()


# ----------------------------------------------------------------------------- accounting


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _collected(collector) -> dict[str, list[tuple[dict, float]]]:
    out: dict[str, list] = {}
    for fam in collector.collect():
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def test_overlapping_calls_count_once(monkeypatch):
    """Two model instances executing at once keep the device busy once, not twice; a call in
    flight at a scrape counts up to the scrape."""
    from fpgaserve.backends.hls4ml import accounting
    from fpgaserve.backends.hls4ml.card.telemetry import FpgaTelemetryCollector
    from fpgaserve.backends.hls4ml.emulated import EmulatedDevices

    clock = FakeClock()
    monkeypatch.setattr(accounting.time, "perf_counter", clock)
    devices = EmulatedDevices()
    dev = devices.device("csim")
    assert devices.device("csim") is dev and dev.uid == "EMU-0-csim"
    assert devices.device("numpy").uid == "EMU-1-numpy"
    collector = FpgaTelemetryCollector(emulated=devices)

    def util(samples, uid="EMU-0-csim"):
        [(_, value)] = [(lab, v) for lab, v in samples["nv_gpu_utilization"] if lab["gpu_uuid"] == uid]
        return value

    assert util(_collected(collector)) == 0.0  # t=0: first scrape, nothing to compare with
    clock.now = 1.0
    a = dev.kernel_started("emulator")
    clock.now = 2.0
    b = dev.kernel_started("emulator")  # overlaps a
    clock.now = 3.0
    dev.kernel_finished("emulator", a)
    clock.now = 4.0
    samples = _collected(collector)  # b still running: busy 1..4 of 0..4
    assert util(samples) == 0.75
    assert util(samples, "EMU-1-numpy") == 0.0
    clock.now = 5.0
    dev.kernel_finished("emulator", b)
    clock.now = 8.0
    samples = _collected(collector)  # busy 4..5 of 4..8
    assert util(samples) == 0.25
    calls = [v for lab, v in samples["fpga_kernel_calls_total"] if lab["device"] == "EMU-0-csim"]
    busy = [v for lab, v in samples["fpga_kernel_duration_us_total"] if lab["device"] == "EMU-0-csim"]
    assert calls == [2] and busy == [4e6]  # 1..5, not 2 + 3 s
    info = {lab["device"]: lab for lab, _ in samples["fpga_device_info"]}
    assert info["EMU-0-csim"] == {"device": "EMU-0-csim", "mode": "csim", "emulated": "true"}
    assert info["EMU-1-numpy"]["mode"] == "numpy"


def test_failed_execute_is_busy_and_counted(monkeypatch):
    from fpgaserve.backends.hls4ml import accounting
    from fpgaserve.backends.hls4ml.emulated import EmulatedDevice

    clock = FakeClock()
    monkeypatch.setattr(accounting.time, "perf_counter", clock)
    dev = EmulatedDevice(0, "numpy")
    with pytest.raises(RuntimeError), dev.executing():
        clock.now = 2.0
        raise RuntimeError("the emulation failed")
    snap = dev.snapshot()
    assert snap.cus == {"emulator": (1, 2.0)} and snap.emulated and snap.mode == "numpy"
    assert math.isclose(snap.kernel_us, 2e6)


def test_allow_gpu_and_cpu_metrics_switches():
    """``Metrics(gpu_metrics=False)`` drops every device family, ``cpu_metrics=False`` the host
    ones: tritonserver's --allow-gpu-metrics / --allow-cpu-metrics."""
    from fpgaserve.backends.hls4ml.card.telemetry import device_telemetry
    from fpgaserve.backends.hls4ml.emulated import emulated_devices
    from fpgaserve.server.metrics import Metrics

    class NoModels:
        @staticmethod
        def loaded_versions():
            return []

    device_telemetry().watch_emulated(emulated_devices())  # what loading an emulated model does
    uid = emulated_devices().device("numpy").uid
    on = Metrics(NoModels()).render().decode()
    assert f'nv_gpu_utilization{{gpu_uuid="{uid}"}}' in on and "\nnv_cpu_utilization " in on
    off = Metrics(NoModels(), gpu_metrics=False, cpu_metrics=False).render().decode()
    assert "nv_gpu_" not in off and "fpga_" not in off and "nv_cpu_" not in off, off
