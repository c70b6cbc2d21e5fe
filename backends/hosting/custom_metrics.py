"""Metrics that model code defines (Triton's Python backend ``pb_utils.MetricFamily``), as
the server's /metrics shows them.

The model's process keeps its own values (``Metric.value()`` answers there) and sends each
change over its channel; the instance's parent applies it here. Families are process-wide,
as in Triton, where a family name belongs to the server; samples carry the labels the model
gave them (Triton adds none).
"""

from __future__ import annotations

import bisect
import logging
import math
import re
import threading

log = logging.getLogger("fpgaserve.instance")

_LOCK = threading.Lock()
# family name -> [kind, description, {labels (sorted tuple of pairs): value}]
_FAMILIES: dict[str, list] = {}
# what a model's process may make the server keep (it sends changes; the server holds them):
# beyond these, changes are dropped (logged once), so that no model can grow /metrics without end
MAX_FAMILIES = 1024
MAX_SAMPLES = 10000  # label sets per family
MAX_BUCKETS = 256
MAX_DESCRIPTION = 1024
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,199}")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]{0,199}")
_KINDS = ("counter", "gauge", "histogram")
_warned: set[str] = set()


def valid_name(name) -> bool:
    """Whether ``name`` is a Prometheus metric name (what /metrics can show)."""
    return type(name) is str and _NAME.fullmatch(name) is not None


def valid_labels(labels) -> bool:
    """Whether ``labels`` are (name, value) string pairs with Prometheus label names."""
    return type(labels) in (tuple, list) and all(
        type(pair) in (tuple, list)
        and len(pair) == 2
        and type(pair[0]) is str
        and _LABEL.fullmatch(pair[0]) is not None
        and not pair[0].startswith("__")
        and type(pair[1]) is str
        and len(pair[1]) <= 1024
        for pair in labels
    )


def _drop(model: str, why: str) -> None:
    if why not in _warned and len(_warned) < 100:
        _warned.add(why)
        log.warning("model '%s': a custom metric change was dropped: %s", model, why)


def _number(value) -> float | None:
    if type(value) not in (int, float):
        return None
    number = float(value)
    return number if not math.isnan(number) else None


def apply(model: str, version: str, change: tuple) -> None:
    """One change from a model's process: ("family", name, kind, description) or
    (op, name, labels, value) with op "increment", "set", "buckets" (a histogram metric's
    bucket bounds) or "observe". The process runs the model's code: a change that is not
    one of these, names what /metrics cannot show, or goes beyond the bounds above is dropped."""
    op = change[0]
    with _LOCK:
        if op == "family":
            if len(change) != 4 or not valid_name(change[1]) or change[2] not in _KINDS or type(change[3]) is not str:
                _drop(model, f"a malformed metric family {str(change[1:2])[:100]}")
                return
            _, name, kind, description = change
            if name not in _FAMILIES and len(_FAMILIES) >= MAX_FAMILIES:
                _drop(model, f"more than {MAX_FAMILIES} metric families")
                return
            _FAMILIES.setdefault(name, [kind, description[:MAX_DESCRIPTION], {}])
            return
        if len(change) != 4 or not valid_labels(change[2]):
            _drop(model, f"a malformed metric change {str(change[:2])[:100]}")
            return
        _, name, labels, value = change
        family = _FAMILIES.get(name) if type(name) is str else None
        if family is None:
            return
        samples = family[2]
        key = tuple(sorted((k, v) for k, v in labels))
        if key not in samples and len(samples) >= MAX_SAMPLES:
            _drop(model, f"more than {MAX_SAMPLES} label sets in metric family '{name}'")
            return
        if op == "buckets":
            # [bounds, counts per bound (+Inf last), sum, count]; kept if it exists already
            if family[0] != "histogram" or type(value) not in (tuple, list) or len(value) > MAX_BUCKETS:
                _drop(model, f"malformed buckets for metric family '{name}'")
                return
            bounds = [_number(b) for b in value]
            if any(b is None for b in bounds) or bounds != sorted(set(bounds)):  # type: ignore[type-var]
                _drop(model, f"malformed buckets for metric family '{name}'")
                return
            samples.setdefault(key, [bounds, [0] * (len(bounds) + 1), 0.0, 0])
            return
        number = _number(value)
        if number is None:
            _drop(model, f"a value that is not a number for metric family '{name}'")
            return
        if op == "increment" and family[0] != "histogram":
            samples[key] = samples.get(key, 0.0) + number
        elif op == "set" and family[0] == "gauge":
            samples[key] = number
        elif op == "observe" and family[0] == "histogram":
            histogram = samples.get(key)
            if histogram is None:
                return
            bounds, counts = histogram[0], histogram[1]
            counts[bisect.bisect_left(bounds, number)] += 1
            histogram[2] += number
            histogram[3] += 1
        else:
            _drop(model, f"operation '{str(op)[:40]}' on metric family '{name}'")


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
