"""Metrics that model code defines (Triton's Python backend ``pb_utils.MetricFamily``), as
the server's /metrics shows them.

The model's process keeps its own values (``Metric.value()`` answers there) and sends each
change over its channel; the instance's parent applies it here. Families are process-wide,
as in Triton, where a family name belongs to the server; samples carry the labels the model
gave them (Triton adds none).
"""

from __future__ import annotations

import bisect
import threading

_LOCK = threading.Lock()
# family name -> [kind, description, {labels (sorted tuple of pairs): value}]
_FAMILIES: dict[str, list] = {}


def apply(model: str, version: str, change: tuple) -> None:
    """One change from a model's process: ("family", name, kind, description) or
    (op, name, labels, value) with op "increment", "set", "buckets" (a histogram metric's
    bucket bounds) or "observe"."""
    op = change[0]
    with _LOCK:
        if op == "family":
            _, name, kind, description = change
            _FAMILIES.setdefault(name, [kind, description, {}])
            return
        _, name, labels, value = change
        family = _FAMILIES.get(name)
        if family is None:
            return
        samples = family[2]
        key = tuple(labels)
        if op == "increment":
            samples[key] = samples.get(key, 0.0) + float(value)
        elif op == "set":
            samples[key] = float(value)
        elif op == "buckets":
            # [bounds, counts per bound (+Inf last), sum, count]; kept if it exists already
            bounds = [float(b) for b in value]
            samples.setdefault(key, [bounds, [0] * (len(bounds) + 1), 0.0, 0])
        elif op == "observe":
            histogram = samples.get(key)
            if histogram is None:
                return
            bounds, counts = histogram[0], histogram[1]
            counts[bisect.bisect_left(bounds, float(value))] += 1
            histogram[2] += float(value)
            histogram[3] += 1


def families():
    """The families for /metrics, in prometheus_client's form."""
    from prometheus_client.core import Metric

    with _LOCK:
        snapshot = [
            (name, kind, description, dict(samples)) for name, (kind, description, samples) in _FAMILIES.items()
        ]
    out = []
    for name, kind, description, samples in sorted(snapshot):
        # samples under the family's own name, as Triton exposes a model's metrics (a counter
        # family of prometheus_client's would add "_total" to them)
        family = Metric(name, description, kind)
        for sample, value in samples.items():
            labels = dict(sample)
            if kind != "histogram":
                family.add_sample(name, labels, value)
                continue
            bounds, counts, total, count = value
            cumulative = 0
            for bound, n in zip([*bounds, float("inf")], counts):
                cumulative += n
                le = "+Inf" if bound == float("inf") else _bound(bound)
                family.add_sample(f"{name}_bucket", {**labels, "le": le}, cumulative)
            family.add_sample(f"{name}_sum", labels, total)
            family.add_sample(f"{name}_count", labels, count)
        out.append(family)
    return out


def _bound(bound: float) -> str:
    return repr(bound)
