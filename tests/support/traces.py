"""Triton's trace file read back (tests/engine/test_tracing.py, test_ensembles.py): the
timestamps a trace carries and its entries grouped by trace id."""

from __future__ import annotations

TIMESTAMPS = [
    "REQUEST_START",
    "QUEUE_START",
    "COMPUTE_START",
    "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START",
    "COMPUTE_END",
    "REQUEST_END",
]


def traces_by_id(entries: list[dict]) -> dict[int, dict]:
    traces: dict[int, dict] = {}
    for e in entries:
        t = traces.setdefault(e["id"], {"timestamps": [], "tensors": []})
        if "model_name" in e:
            t["head"] = e
        elif "timestamps" in e:
            t["timestamps"].extend(e["timestamps"])
        elif "tensor" in e:
            t["tensors"].append(e)
    return traces
