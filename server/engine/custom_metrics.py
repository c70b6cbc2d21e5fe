"""Metrics that model code defines (Triton's Python backend ``pb_utils.MetricFamily``), as
the server's /metrics shows them.

The model's process keeps its own values (``Metric.value()`` answers there) and sends each
change over its channel; the instance's parent applies it here. Families are process-wide,
as in Triton, where a family name belongs to the server; samples carry the labels the model
gave them (Triton adds none).
"""

from __future__ import annotations

import threading

_LOCK = threading.Lock()
# family name -> [kind, description, {labels (sorted tuple of pairs): value}]
_FAMILIES: dict[str, list] = {}


def apply(model: str, version: str, change: tuple) -> None:
    """One change from a model's process: ("family", name, kind, description) or
    (op, name, labels, value) with op "increment" or "set"."""
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
        elif op == "remove":
            samples.pop(key, None)


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
        family = Metric(name, description, "counter" if kind == "counter" else "gauge")
        for sample, value in samples.items():
            family.add_sample(name, dict(sample), value)
        out.append(family)
    return out
