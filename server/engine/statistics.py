"""Per model-version counters with Triton's semantics (core src/infer_stats.cc).

Per *request*: success/fail count and total ns, queue ns (its own wait), and compute
input/infer/output ns (the whole batch's durations, charged to every request in it);
``inference_count`` += the request's batch size (rows).
Per *execution*: ``execution_count`` += 1 and ``batch_stats[batch size]`` += 1.

All updates happen on the event loop thread, so no locking is needed.
"""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass, field

from .latency import LatencyRecorder

# queue-time histogram bucket upper bounds, in microseconds (Prometheus "le")
QUEUE_BUCKETS_US = (100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 1_000_000, 5_000_000)


@dataclass
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns


@dataclass
class BatchTimings:
    """Wall-clock durations of one execution, measured in the instance worker thread."""

    compute_input_ns: int
    compute_infer_ns: int
    compute_output_ns: int


@dataclass
class BatchStat:
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


@dataclass
class ModelStatistics:
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    inference_count: int = 0
    execution_count: int = 0
    last_inference_ms: int = 0
    batch_stats: dict[int, BatchStat] = field(default_factory=dict)
    # failures by Triton's metric reason: REJECTED, CANCELED, BACKEND, OTHER
    fail_reasons: dict[str, int] = field(default_factory=dict)
    # queue time histogram of successful requests: counts per QUEUE_BUCKETS_US bucket (+Inf last)
    queue_hist: list[int] = field(default_factory=lambda: [0] * (len(QUEUE_BUCKETS_US) + 1))
    # --metrics-config summaries and histograms (latency.py); None when they are off, so the
    # schedulers skip them with one check per burst
    latencies: LatencyRecorder | None = None

    def record_execution(self, batch_size: int, t: BatchTimings) -> None:
        self.record_executions(batch_size, 1, t.compute_input_ns, t.compute_infer_ns, t.compute_output_ns)

    def record_executions(self, batch_size: int, count: int, input_ns: int, infer_ns: int, output_ns: int) -> None:
        """``count`` executions of ``batch_size`` rows each, their durations summed."""
        self.execution_count += count
        stat = self.batch_stats.get(batch_size)
        if stat is None:
            stat = self.batch_stats[batch_size] = BatchStat()
        stat.compute_input.add(input_ns, count)
        stat.compute_infer.add(infer_ns, count)
        stat.compute_output.add(output_ns, count)
        self.last_inference_ms = time.time_ns() // 1_000_000

    def record_successes(self, rows: int, total_ns: int, queue_ns: list[int], t: BatchTimings) -> None:
        """The ``len(queue_ns)`` requests of one execution that succeeded (``rows``: their
        batch sizes summed, ``total_ns``: their durations summed, ``queue_ns``: each one's
        queue time): the batch's compute durations are charged to every one of them, as
        Triton does. One update per execution, not per request."""
        count = len(queue_ns)
        self.record_successes_summed(
            rows,
            total_ns,
            queue_ns,
            t.compute_input_ns * count,
            t.compute_infer_ns * count,
            t.compute_output_ns * count,
        )

    def record_successes_summed(
        self, rows: int, total_ns: int, queue_ns: list[int], input_ns: int, infer_ns: int, output_ns: int
    ) -> None:
        """``record_successes`` for requests of several executions at once: each request's
        compute durations (its execution's) summed over them, in ``input_ns``/``infer_ns``/
        ``output_ns``."""
        count = len(queue_ns)
        self.success.count += count
        self.success.ns += total_ns
        self.queue.count += count
        self.queue.ns += sum(queue_ns)
        hist = self.queue_hist
        for q in queue_ns:
            hist[bisect.bisect_left(QUEUE_BUCKETS_US, q / 1000)] += 1
        self.compute_input.add(input_ns, count)
        self.compute_infer.add(infer_ns, count)
        self.compute_output.add(output_ns, count)
        self.inference_count += rows

    def record_failure(self, total_ns: int, reason: str = "OTHER") -> None:
        self.fail.add(total_ns)
        self.fail_reasons[reason] = self.fail_reasons.get(reason, 0) + 1
