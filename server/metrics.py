"""Prometheus metrics with Triton's names, so dashboards and autoscalers work unchanged.

Rendered at scrape time from the per-version ``ModelStatistics`` (the same numbers
ModelStatistics reports), on the event loop thread that writes them. Counters keep Triton's
exact names: Triton exposes ``nv_inference_count`` (no ``_total`` suffix) and SuperSONIC's
autoscaling query uses those names, so samples are added under the family name itself.

* per model (labels ``model``, ``version``): ``nv_inference_request_success``,
  ``nv_inference_request_failure{reason}``, ``nv_inference_count``, ``nv_inference_exec_count``,
  ``nv_inference_request_duration_us``, ``nv_inference_queue_duration_us``,
  ``nv_inference_compute_{input,infer,output}_duration_us`` (cumulative µs, summed per
  request), ``nv_inference_pending_request_count``, ``nv_model_load_duration_secs``, and
  the histogram ``nv_inference_queue_duration_histogram_us``;
* host: ``nv_cpu_utilization``, ``nv_cpu_memory_{total,used}_bytes`` (as Triton), plus the
  standard ``process_*`` CPU and memory metrics of this process;
* model instance processes: ``fpgaserve_instance_restarts_total{model,version}``, and the
  families model code defines (Triton's Python-backend ``pb_utils.MetricFamily``,
  backends/hosting/custom_metrics.py);
* devices (``BackendTelemetry``): the ``fpga_*`` families and ``nv_gpu_*`` aliases of every
  FPGA card and emulated device (``EMU-<index>-<mode>``) the hls4ml models run on
  (backends/hls4ml/card/telemetry.py).
"""

from __future__ import annotations

import logging
import re

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import Metric

from fpgaserve.backends import telemetry_collectors
from fpgaserve.backends.hosting import custom_metric_families, restart_families

from .engine.instance import abandoned_instances_running
from .engine.latency import LatencyConfig
from .engine.statistics import QUEUE_BUCKETS_US

log = logging.getLogger("fpgaserve.metrics")

FAIL_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")
_NV_COUNTER_META = re.compile(rb"^# (HELP|TYPE) (nv_\w+?)_total ", re.MULTILINE)


def _family(name: str, doc: str, kind: str) -> Metric:
    return Metric(name, doc, kind)


class _HostCpu:
    """System CPU utilization between scrapes from /proc/stat, as Triton's nv_cpu_utilization."""

    def __init__(self):
        self._last = self._read()

    @staticmethod
    def _read():
        try:
            with open("/proc/stat") as f:
                fields = [int(x) for x in f.readline().split()[1:]]
            idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
            return sum(fields), idle
        except OSError:
            return None

    def utilization(self) -> float:
        now = self._read()
        if now is None or self._last is None:
            return 0.0
        total, idle = now[0] - self._last[0], now[1] - self._last[1]
        self._last = now
        return 0.0 if total <= 0 else max(0.0, min(1.0, 1.0 - idle / total))


def _meminfo() -> tuple[int, int]:
    try:
        values = {}
        with open("/proc/meminfo") as f:
            for line in f:
                key, rest = line.split(":", 1)
                values[key] = int(rest.split()[0]) * 1024
        total = values["MemTotal"]
        return total, total - values.get("MemAvailable", values.get("MemFree", 0))
    except (OSError, KeyError, ValueError):
        return 0, 0


class InferenceCollector:
    def __init__(self, repository, extra_collectors=(), cpu_metrics: bool = True, latency: LatencyConfig | None = None):
        self.repository = repository
        self.extra = list(extra_collectors)
        self.cpu_metrics = cpu_metrics
        self.latency = latency or LatencyConfig()
        self._cpu = _HostCpu()

    def collect(self):
        versions = sorted(self.repository.loaded_versions(), key=lambda v: (v.name, v.version))
        counters = {
            "nv_inference_request_success": "Number of successful inference requests, all batch sizes",
            "nv_inference_count": "Number of inferences performed (does not include cached requests)",
            "nv_inference_exec_count": "Number of model executions performed (does not include cached requests)",
            "nv_inference_request_duration_us": "Cumulative inference request duration in microseconds (includes cached requests)",
            "nv_inference_queue_duration_us": "Cumulative inference queuing duration in microseconds (includes cached requests)",
            "nv_inference_compute_input_duration_us": "Cumulative compute input duration in microseconds (does not include cached requests)",
            "nv_inference_compute_infer_duration_us": "Cumulative compute inference duration in microseconds (does not include cached requests)",
            "nv_inference_compute_output_duration_us": "Cumulative inference compute output duration in microseconds (does not include cached requests)",
        }
        if not self.latency.counters:  # --metrics-config counter_latencies=false
            counters = {n: d for n, d in counters.items() if not n.endswith("_duration_us")}
        fams = {n: _family(n, d, "counter") for n, d in counters.items()}
        failure = _family(
            "nv_inference_request_failure", "Number of failed inference requests, all batch sizes", "counter"
        )
        pending = _family(
            "nv_inference_pending_request_count",
            "Instantaneous number of pending requests awaiting execution per-model.",
            "gauge",
        )
        load = _family("nv_model_load_duration_secs", "Model load time in seconds", "gauge")
        hist = _family(
            "nv_inference_queue_duration_histogram_us",
            "Queue duration of successful requests in microseconds",
            "histogram",
        )
        for v in versions:
            s = v.stats
            labels = {"model": v.name, "version": v.version_str}
            fams["nv_inference_request_success"].add_sample("nv_inference_request_success", labels, s.success.count)
            fams["nv_inference_count"].add_sample("nv_inference_count", labels, s.inference_count)
            fams["nv_inference_exec_count"].add_sample("nv_inference_exec_count", labels, s.execution_count)
            for name, ns in (
                ("nv_inference_request_duration_us", s.success.ns),  # as Triton: successes only
                ("nv_inference_queue_duration_us", s.queue.ns),
                ("nv_inference_compute_input_duration_us", s.compute_input.ns),
                ("nv_inference_compute_infer_duration_us", s.compute_infer.ns),
                ("nv_inference_compute_output_duration_us", s.compute_output.ns),
            ):
                if name in fams:
                    fams[name].add_sample(name, labels, ns // 1000)
            for reason in FAIL_REASONS:
                failure.add_sample(
                    "nv_inference_request_failure", {**labels, "reason": reason}, s.fail_reasons.get(reason, 0)
                )
            pending.add_sample("nv_inference_pending_request_count", labels, v.scheduler.pending if v.scheduler else 0)
            load.add_sample("nv_model_load_duration_secs", labels, v.load_duration_s)
            cumulative = 0
            for bound, count in zip(QUEUE_BUCKETS_US + (float("inf"),), s.queue_hist):
                cumulative += count
                le = "+Inf" if bound == float("inf") else str(bound)
                hist.add_sample("nv_inference_queue_duration_histogram_us_bucket", {**labels, "le": le}, cumulative)
            hist.add_sample("nv_inference_queue_duration_histogram_us_count", labels, cumulative)
            hist.add_sample("nv_inference_queue_duration_histogram_us_sum", labels, s.queue.ns / 1000)
        yield from fams.values()
        yield failure
        yield pending
        yield load
        yield hist
        if self.latency.any_distribution:
            yield from _distributions(self.latency, versions)
        if self.cpu_metrics:
            yield from self._host()
        abandoned = _family(
            "fpgaserve_abandoned_instances",
            "Model instance threads still inside execute() after their version was unloaded and they were "
            "abandoned (--model-unload-timeout-secs)",
            "gauge",
        )
        abandoned.add_sample("fpgaserve_abandoned_instances", {}, abandoned_instances_running())
        yield abandoned
        yield from restart_families()
        yield from custom_metric_families()
        for extra in self.extra:
            yield from extra.collect()

    def _host(self):
        """Triton's host families (tritonserver --allow-cpu-metrics)."""
        cpu = _family("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", "gauge")
        cpu.add_sample("nv_cpu_utilization", {}, self._cpu.utilization())
        total, used = _meminfo()
        mem_total = _family("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", "gauge")
        mem_total.add_sample("nv_cpu_memory_total_bytes", {}, total)
        mem_used = _family("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", "gauge")
        mem_used.add_sample("nv_cpu_memory_used_bytes", {}, used)
        yield cpu
        yield mem_total
        yield mem_used


_GPU_EXPONENT = re.compile(
    rb"^(nv_(?:gpu|cpu_memory)_\w+(?:\{[^}]*\})?) ([0-9]+)(?:\.([0-9]+))?e\+([0-9]+)$", re.MULTILINE
)


def plain_gpu_values(text: bytes) -> bytes:
    """Rewrite ``nv_gpu_*`` (and ``nv_cpu_memory_*``) sample values from exponent notation to plain decimals.

    prometheus_client prints 16 GiB as ``1.7179869184e+10``; perf_analyzer's
    ``(\\d+\\.?\\d*)`` would read that as 1.7 bytes. Call on the rendered exposition text.
    """

    def plain(m: re.Match) -> bytes:
        digits = m.group(2) + (m.group(3) or b"")
        shift = int(m.group(4)) - len(m.group(3) or b"")
        if shift >= 0:
            return m.group(1) + b" " + digits + b"0" * shift
        return m.group(1) + b" " + digits[:shift] + b"." + digits[shift:]

    return _GPU_EXPONENT.sub(plain, text)


class BackendTelemetry:
    """Device families (FPGA cards) that backends registered, rendered with every scrape."""

    def collect(self):
        for collector in telemetry_collectors():
            try:
                yield from collector.collect()
            except Exception:  # a broken sensor must not take /metrics down
                log.debug("device telemetry collector failed", exc_info=True)


def _distributions(latency: LatencyConfig, versions):
    """--metrics-config summaries and histograms (server/engine/latency.py)."""
    quantiles = [q for q, _ in latency.quantiles]
    if latency.summaries:
        for key, (name, doc) in _SUMMARIES.items():
            fam = _family(name, doc, "summary")
            for v in versions:
                rec = v.stats.latencies
                if rec is None or key not in rec.summaries:
                    continue
                summary = rec.summaries[key]
                labels = {"model": v.name, "version": v.version_str}
                fam.add_sample(f"{name}_count", labels, summary.count)
                fam.add_sample(f"{name}_sum", labels, summary.sum)
                for q, value in zip(quantiles, summary.quantiles(quantiles)):
                    fam.add_sample(name, {**labels, "quantile": _number(q)}, value)
            yield fam
    if latency.histograms:
        for attr, (name, doc) in _HISTOGRAMS.items():
            fam = _family(name, doc, "histogram")
            for v in versions:
                rec = v.stats.latencies
                h = getattr(rec, attr, None) if rec is not None else None
                if h is None:
                    continue
                labels = {"model": v.name, "version": v.version_str}
                cumulative = 0
                for bound, count in zip((*h.bounds, float("inf")), h.counts):
                    cumulative += count
                    le = "+Inf" if bound == float("inf") else _number(bound)
                    fam.add_sample(f"{name}_bucket", {**labels, "le": le}, cumulative)
                fam.add_sample(f"{name}_count", labels, cumulative)
                fam.add_sample(f"{name}_sum", labels, h.sum)
            yield fam


def _number(x: float) -> str:
    """A bound or quantile as Prometheus clients print it (100, 0.5, 2500)."""
    return str(int(x)) if float(x).is_integer() and x >= 1 else repr(float(x))


# Triton's summary families (core metrics.cc), keyed by LatencyRecorder.summaries
_SUMMARIES = {
    "request": (
        "nv_inference_request_summary_us",
        "Summary of inference request duration in microseconds (includes cached requests)",
    ),
    "queue": (
        "nv_inference_queue_summary_us",
        "Summary of inference queuing duration in microseconds (includes cached requests)",
    ),
    "compute_input": (
        "nv_inference_compute_input_summary_us",
        "Cumulative compute input duration in microseconds (does not include cached requests)",
    ),
    "compute_infer": (
        "nv_inference_compute_infer_summary_us",
        "Cumulative compute inference duration in microseconds (does not include cached requests)",
    ),
    "compute_output": (
        "nv_inference_compute_output_summary_us",
        "Cumulative inference compute output duration in microseconds (does not include cached requests)",
    ),
}
# histogram_latencies=true: Triton's first-response histogram (decoupled models), and ours
_HISTOGRAMS = {
    "first_response_hist": (
        "nv_inference_first_response_histogram_ms",
        "Duration from request to first response in milliseconds",
    ),
    "request_hist": (
        "nv_inference_request_duration_histogram_us",
        "Request duration of successful requests in microseconds (fpgaserve; histogram_latencies=true)",
    ),
    "compute_hist": (
        "nv_inference_compute_duration_histogram_us",
        "Compute (input, infer and output) duration of successful requests in microseconds "
        "(fpgaserve; histogram_latencies=true)",
    ),
}


# --engine-processes N > 1: families of the host, engine 0's alone (every engine would repeat
# them), and counts of the whole server, summed over the engines
_HOST_FAMILIES = ("nv_cpu_utilization", "nv_cpu_memory_total_bytes", "nv_cpu_memory_used_bytes")
_SUMMED_FAMILIES = ("fpgaserve_abandoned_instances",)


def merge_families(local: list, remote: list) -> list:
    """This engine's families with other engine processes' samples added: a family they
    share gets their samples (other models, other cards), one only they have is added."""
    by_name = {f.name: f for f in local}
    merged = list(local)
    for family in remote:
        if family.name in _HOST_FAMILIES:
            continue
        mine = by_name.get(family.name)
        if mine is None:
            by_name[family.name] = family
            merged.append(family)
        elif family.name in _SUMMED_FAMILIES:
            totals = {s.name: s.value for s in family.samples}
            mine.samples = [s._replace(value=s.value + totals.get(s.name, 0)) for s in mine.samples]
        else:
            mine.samples = list(mine.samples) + list(family.samples)
    return merged


class _Merged:
    """The registry's collector: this process's families, plus the other engine processes'
    that ``Metrics.render`` was given."""

    def __init__(self, collector: InferenceCollector):
        self.collector = collector
        self.remote: list = []

    def collect(self):
        if not self.remote:
            yield from self.collector.collect()
        else:
            yield from merge_families(list(self.collector.collect()), self.remote)


class Metrics:
    """The registry served on --metrics-port.

    ``gpu_metrics`` / ``cpu_metrics`` are tritonserver's ``--allow-gpu-metrics`` and
    ``--allow-cpu-metrics``: the device families (FPGA cards and emulated devices, ``fpga_*``
    and ``nv_gpu_*``) and the host families (``nv_cpu_*``).
    """

    def __init__(
        self, repository, gpu_metrics: bool = True, cpu_metrics: bool = True, latency: LatencyConfig | None = None
    ):
        self.registry = CollectorRegistry(auto_describe=False)
        self.collector = InferenceCollector(repository, cpu_metrics=cpu_metrics, latency=latency)
        self._merged = _Merged(self.collector)
        self.registry.register(self._merged)
        ProcessCollector(registry=self.registry)
        if gpu_metrics:
            self.add_collector(BackendTelemetry())

    def add_collector(self, collector) -> None:
        """Further families (device telemetry) rendered with the same scrape."""
        self.collector.extra.append(collector)

    def render(self, remote: list | tuple = ()) -> bytes:
        """The exposition text; ``remote``: other engine processes' families to merge in."""
        self._merged.remote = list(remote)
        try:
            text = generate_latest(self.registry)
        finally:
            self._merged.remote = []
        # prometheus_client names a counter family "<name>_total" in its HELP/TYPE lines; Triton's
        # nv_* counters have no such suffix (the samples already carry the bare name)
        return plain_gpu_values(_NV_COUNTER_META.sub(rb"# \1 \2 ", text))
