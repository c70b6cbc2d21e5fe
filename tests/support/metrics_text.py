"""/metrics scraped and parsed with prometheus_client's own parser (tests/engine/)."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def metric_families(port: int) -> dict:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def model_samples(fams, name: str, model: str) -> dict:
    return {
        (s.name, s.labels.get("quantile"), s.labels.get("le")): s.value
        for s in fams[name].samples
        if s.labels.get("model") == model
    }
