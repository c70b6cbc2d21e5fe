"""Latency distributions per model version, for ``--metrics-config`` (Triton's settings).

tritonserver reports cumulative latency counters by default. ``--metrics-config`` adds:

* ``summary_latencies=true``: Prometheus summaries ``nv_inference_{request,queue,
  compute_input,compute_infer,compute_output}_summary_us``. Their ``_count`` and ``_sum``
  cover every successful request since the load. Their quantiles cover a sliding window of
  the last 60 s (prometheus-cpp's defaults, which Triton uses: ``max_age`` 60 s, 5 age
  buckets). ``summary_quantiles=<q>:<error>,...`` chooses the quantiles; the default is
  Triton's 0.5, 0.9, 0.95, 0.99 and 0.999.
* ``histogram_latencies=true``: ``nv_inference_first_response_histogram_ms`` for decoupled
  models, Triton's buckets 100, 500, 2000 and 5000 ms. Beyond Triton, also histograms of
  request and compute duration per model (µs), so a Grafana panel can show p50/p99 with
  ``histogram_quantile`` across replicas. Summaries cannot be aggregated across replicas.
  A model's ``model_metrics { metric_control { metric_identifier { family } histogram_options
  { buckets } } }`` replaces the buckets of that family for that model (Triton 2.51 honours it
  for the first-response histogram; here for all three).
* ``counter_latencies=false`` drops the cumulative duration counters.

**How the quantiles are computed.** prometheus-cpp keeps a CKMS sketch per age bucket. Here
each age bucket keeps a uniform random sample (reservoir) of at most ``SAMPLE`` observations
together with its count; a quantile is read from the union of the live buckets, each sample
weighted by the observations it stands for. With 4,096 per bucket the rank error of p99 is
about 0.0007 at any rate, within Triton's 0.001 target, and the memory is bounded
(5 buckets x 4,096 floats per summary) however many requests arrive.

Nothing here runs when the settings are off: the schedulers check ``stats.latencies`` once
per burst.
"""

from __future__ import annotations

import bisect
import math
import random
import time
from dataclasses import dataclass, field

from ..model_config import HISTOGRAM_FAMILIES

DEFAULT_QUANTILES = ((0.5, 0.05), (0.9, 0.01), (0.95, 0.001), (0.99, 0.001), (0.999, 0.001))
MAX_AGE_S = 60.0
AGE_BUCKETS = 5
SAMPLE = 4096
SUMMARIES = ("request", "queue", "compute_input", "compute_infer", "compute_output")


class MetricsConfigError(ValueError):
    pass


@dataclass(frozen=True)
class LatencyConfig:
    counters: bool = True
    summaries: bool = False
    histograms: bool = False
    quantiles: tuple[tuple[float, float], ...] = DEFAULT_QUANTILES

    @property
    def any_distribution(self) -> bool:
        return self.summaries or self.histograms


def parse_metrics_config(settings: list[str]) -> LatencyConfig:
    """``--metrics-config`` values (``key=value``, repeatable) as tritonserver reads them:
    the known keys, booleans ``true``/``false``, quantiles ``q:error`` separated by commas.
    ``MetricsConfigError`` for a setting that is not ``key=value``, a boolean that is
    neither, or quantiles that do not parse (tritonserver logs and drops a bad pair; a
    server whose dashboards then miss a quantile is worse than one that does not start)."""
    values: dict[str, str] = {}
    for setting in settings:
        key, sep, value = setting.partition("=")
        if not sep or not key:
            raise MetricsConfigError(f"--metrics-config expects <setting>=<value>, got '{setting}'")
        values[key.strip()] = value.strip()

    def flag(name: str, default: bool) -> bool:
        if name not in values:
            return default
        v = values[name].lower()
        if v not in ("true", "false"):
            raise MetricsConfigError(f"--metrics-config {name}={values[name]}: expected true or false")
        return v == "true"

    quantiles: tuple[tuple[float, float], ...] = DEFAULT_QUANTILES
    if "summary_quantiles" in values:
        pairs = []
        for pair in values["summary_quantiles"].split(","):
            q, sep, err = pair.partition(":")
            try:
                qv, ev = float(q), float(err)
            except ValueError:
                qv = ev = math.nan
            if not sep or not 0.0 <= qv <= 1.0 or not 0.0 <= ev < 1.0:
                raise MetricsConfigError(
                    f"--metrics-config summary_quantiles: invalid option [{pair}]; expected <quantile>:<error>"
                )
            pairs.append((qv, ev))
        quantiles = tuple(pairs)
    return LatencyConfig(
        counters=flag("counter_latencies", True),
        summaries=flag("summary_latencies", False),
        histograms=flag("histogram_latencies", False),
        quantiles=quantiles,
    )


class WindowedSummary:
    """Count and sum since creation, quantiles over the last ``MAX_AGE_S`` (see module)."""

    def __init__(self, clock=time.monotonic, rng: random.Random | None = None):
        self.count = 0
        self.sum = 0.0
        self._clock = clock
        self._rng = rng or random.Random()
        self._width = MAX_AGE_S / AGE_BUCKETS
        # per age bucket: [slot number, observations, sample]
        self._buckets: list[list] = [[-1, 0, []] for _ in range(AGE_BUCKETS)]

    def observe_many(self, values) -> None:
        slot = int(self._clock() / self._width)
        bucket = self._buckets[slot % AGE_BUCKETS]
        if bucket[0] != slot:
            bucket[0], bucket[1], bucket[2] = slot, 0, []
        seen, sample = bucket[1], bucket[2]
        randrange = self._rng.randrange
        for v in values:
            self.count += 1
            self.sum += v
            seen += 1
            if len(sample) < SAMPLE:
                sample.append(v)
            else:
                j = randrange(seen)
                if j < SAMPLE:
                    sample[j] = v
        bucket[1] = seen

    def quantiles(self, qs) -> list[float]:
        """The value at each quantile of the live window; NaN with no observation in it."""
        slot = int(self._clock() / self._width)
        weighted: list[tuple[float, float]] = []
        total = 0.0
        for b_slot, seen, sample in self._buckets:
            if sample and slot - AGE_BUCKETS < b_slot <= slot:
                w = seen / len(sample)
                weighted.extend((v, w) for v in sample)
                total += seen
        if not weighted:
            return [math.nan for _ in qs]
        weighted.sort()
        cumulative = []
        acc = 0.0
        for _, w in weighted:
            acc += w
            cumulative.append(acc)
        out = []
        for q in qs:
            i = bisect.bisect_left(cumulative, q * total)
            out.append(weighted[min(i, len(weighted) - 1)][0])
        return out


class Histogram:
    def __init__(self, bounds):
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe_many(self, values) -> None:
        bounds, counts = self.bounds, self.counts
        for v in values:
            counts[bisect.bisect_left(bounds, v)] += 1
            self.sum += v


@dataclass
class LatencyRecorder:
    """One model version's distributions, fed once per settled burst on the event loop."""

    config: LatencyConfig
    decoupled: bool = False
    summaries: dict[str, WindowedSummary] = field(default_factory=dict)
    request_hist: Histogram | None = None
    compute_hist: Histogram | None = None
    first_response_hist: Histogram | None = None
    # the model's model_metrics buckets: family -> bounds (the others keep the defaults)
    buckets: dict[str, tuple[float, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.config.summaries:
            self.summaries = {name: WindowedSummary() for name in SUMMARIES}
        if self.config.histograms:

            def bounds(family: str) -> tuple[float, ...]:
                return self.buckets.get(family, HISTOGRAM_FAMILIES[family])

            self.request_hist = Histogram(bounds("nv_inference_request_duration_histogram_us"))
            self.compute_hist = Histogram(bounds("nv_inference_compute_duration_histogram_us"))
            if self.decoupled:
                self.first_response_hist = Histogram(bounds("nv_inference_first_response_histogram_ms"))

    def observe(self, request_ns, queue_ns, input_ns, infer_ns, output_ns) -> None:
        """Successful requests: five parallel sequences of nanoseconds, one entry each."""
        s = self.summaries
        if s:
            s["request"].observe_many([v / 1000 for v in request_ns])
            s["queue"].observe_many([v / 1000 for v in queue_ns])
            s["compute_input"].observe_many([v / 1000 for v in input_ns])
            s["compute_infer"].observe_many([v / 1000 for v in infer_ns])
            s["compute_output"].observe_many([v / 1000 for v in output_ns])
        if self.request_hist is not None:
            self.request_hist.observe_many([v / 1000 for v in request_ns])
        if self.compute_hist is not None:
            self.compute_hist.observe_many([(a + b + c) / 1000 for a, b, c in zip(input_ns, infer_ns, output_ns)])

    def observe_first_response(self, ns: int) -> None:
        if self.first_response_hist is not None:
            self.first_response_hist.observe_many((ns / 1e6,))
