"""Reading what perf_analyzer did (tests/protocol/test_*perf_analyzer.py): the server's
statistics before and after a run, PA's CSV and its printed 'Server:' blocks."""

from __future__ import annotations

import csv
import re
from pathlib import Path

from support.waiting import settled


def model_stats(client, model: str) -> dict:
    s = client.get_inference_statistics(model).model_stats
    assert len(s) == 1, s
    s = s[0]
    st = s.inference_stats
    return {
        "version": s.version,
        "inference_count": s.inference_count,
        "execution_count": s.execution_count,
        **{
            f"{k}.count": getattr(st, k).count
            for k in ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")
        },
        **{
            f"{k}.ns": getattr(st, k).ns
            for k in ("success", "queue", "compute_input", "compute_infer", "compute_output")
        },
    }


def settled_stats(client, model: str) -> dict:
    """Statistics once nothing is in flight any more (PA may exit before the server finishes)."""
    return settled(lambda: model_stats(client, model))


def delta(after: dict, before: dict) -> dict:
    return {k: after[k] - before[k] for k in after if k != "version"}


def describe(proc, cmd: str, server=None) -> str:
    text = f"perf_analyzer {cmd}\nrc={proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-2000:]}"
    if server is not None:
        text += f"\n--- server log\n{server.log()[-2000:]}"
    return text


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def pa_server_blocks(stdout: str) -> list[dict]:
    """PA's 'Server:' blocks: inference/execution/success counts per load level."""
    pattern = re.compile(
        r"Server:\s*\n\s*Inference count: (\d+)\s*\n\s*Execution count: (\d+)\s*\n\s*Successful request count: (\d+)"
    )
    return [
        {"inference_count": int(a), "execution_count": int(b), "success": int(c)} for a, b, c in pattern.findall(stdout)
    ]


def has_dynamic_batching(client, model: str) -> bool:
    return client.get_model_config(model).config.HasField("dynamic_batching")
