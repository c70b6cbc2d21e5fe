"""perf_analyzer (NVIDIA's C++ load generator, release 2.49) against a real fpgaserve.

Short runs in every mode PA has (sync, ``--async``, ``--streaming``, system shared memory)
on ``simple`` (batch 1 and 8) and ``facile`` (16,000 rows, as CMSSW sends), each writing
``-f out.csv``. Besides rc 0 we require what makes PA's numbers trustworthy:

* the "Server:" block and the server-side CSV columns are present (PA prints them only if
  ServerMetadata advertises ``statistics`` and ModelStatistics looks right to it);
* ModelStatistics deltas around the run (read with tritonclient) add up:
  inference_count = batch x success count, execution_count = success count (no dynamic
  batching), queue/compute counts = success count, no failures; with ``--request-count N``
  success = N exactly; PA's own Server blocks agree (inference = batch x success, and
  never more than the server counted over the whole run);
* ``-b 16`` on ``simple`` (max_batch_size 8) fails: PA does not check, the server must
  reject, and PA exits non-zero printing the server's message.

perf_analyzer is installed by ``<repo>/../shared/tools/get-perf-analyzer`` into
``<repo>/.tools/perf-analyzer`` (idempotent); if that is impossible (no network, no
installer) every test here is skipped with the reason.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from support.perf_analyzer_runs import delta, describe, has_dynamic_batching, pa_server_blocks, read_csv, settled_stats
from support.server_process import BUNDLED_REPO, CONFORMANCE_REPO, ServerProcess, serve

# the first test in a session may also pay for installing perf_analyzer (pip/apt downloads)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SERVER_COLUMNS = ("Server Queue", "Server Compute Input", "Server Compute Infer", "Server Compute Output")


@pytest.fixture(scope="module")
def pa_server(tmp_path_factory):
    """Our own server, so the statistics deltas see only perf_analyzer's traffic. FACILE runs
    in the numpy emulation (bit-exact with csim, ~20x faster): these tests are about the
    protocol and the statistics perf_analyzer reads, not about the C-simulation."""
    log = tmp_path_factory.mktemp("pa_server") / "fpgaserve.log"
    yield from serve(
        ServerProcess([CONFORMANCE_REPO, BUNDLED_REPO], "--allow-client-shm=true", "--fpga-mode", "numpy", log_path=log)
    )


@pytest.fixture(scope="module")
def stats_client(pa_server):
    import tritonclient.grpc as grpcclient

    with grpcclient.InferenceServerClient(pa_server.url) as c:
        yield c


# ----------------------------------------------------------------------------- helpers


def run_pa(pa: str, url: str, model: str, *args: str, csv_path: Path | None = None, timeout: float = 120):
    cmd = [pa, "-m", model, "-u", url, "-i", "grpc", *args]
    if csv_path is not None:
        cmd += ["-f", str(csv_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return proc, " ".join(cmd[1:])


# ----------------------------------------------------------------------------- runs

# (id, model, batch, PA args, expected concurrency levels, --request-count or None)
RUNS = [
    # time windows: a short sweep over two concurrency levels (wide stability band: a Python
    # server sharing two cores with PA and the tests is noisy)
    (
        "simple-sync-sweep",
        "simple",
        1,
        ["--concurrency-range", "1:2", "-p", "500", "-s", "100", "-r", "20"],
        [1, 2],
        None,
    ),
    ("simple-sync-b8", "simple", 8, ["-b", "8", "--concurrency-range", "1", "--request-count", "200"], [1], 200),
    (
        "simple-async-b8",
        "simple",
        8,
        ["--async", "-b", "8", "--concurrency-range", "2", "--request-count", "300"],
        [2],
        300,
    ),
    ("simple-streaming", "simple", 1, ["--streaming", "--concurrency-range", "2", "--request-count", "300"], [2], 300),
    (
        "simple-shm-b8",
        "simple",
        8,
        [
            "-b",
            "8",
            "--shared-memory",
            "system",
            "--output-shared-memory-size",
            "512",
            "--concurrency-range",
            "1",
            "--request-count",
            "100",
        ],
        [1],
        100,
    ),
    (
        "facile-sync-b16000",
        "facile",
        16000,
        ["-b", "16000", "--concurrency-range", "1", "--request-count", "20"],
        [1],
        20,
    ),
    (
        "facile-async-b16000",
        "facile",
        16000,
        ["-b", "16000", "--async", "--concurrency-range", "2", "--request-count", "20"],
        [2],
        20,
    ),
    (
        "facile-streaming-b16000",
        "facile",
        16000,
        ["-b", "16000", "--streaming", "--concurrency-range", "2", "--request-count", "20"],
        [2],
        20,
    ),
    (
        "facile-streaming-sweep",
        "facile",
        16000,
        ["-b", "16000", "--streaming", "--concurrency-range", "1:2", "-p", "500", "-s", "100", "-r", "20"],
        [1, 2],
        None,
    ),
]


@pytest.mark.parametrize("name, model, batch, args, levels, request_count", RUNS, ids=[r[0] for r in RUNS])
def test_perf_analyzer_run(
    perf_analyzer, pa_server, stats_client, tmp_path, name, model, batch, args, levels, request_count
):
    before = settled_stats(stats_client, model)
    out_csv = tmp_path / f"{name}.csv"
    proc, cmd = run_pa(perf_analyzer, pa_server.url, model, *args, csv_path=out_csv)
    info = describe(proc, cmd, pa_server)
    after = settled_stats(stats_client, model)
    d = delta(after, before)

    assert proc.returncode == 0, info
    # PA printed a Server block per load level: it trusted our statistics
    blocks = pa_server_blocks(proc.stdout)
    assert len(blocks) == len(levels), info
    for b in blocks:
        assert b["success"] > 0 and b["inference_count"] == batch * b["success"], info
    assert "Unable to unregister" not in proc.stdout + proc.stderr, info  # shm cleanup answered OK

    # CSV: one row per level, server columns present and numeric, throughput > 0
    rows = read_csv(out_csv)
    assert sorted(int(r["Concurrency"]) for r in rows) == levels, rows  # PA sorts rows by throughput
    for r in rows:
        assert float(r["Inferences/Second"]) > 0, r
        for col in SERVER_COLUMNS:
            assert col in r, f"CSV has no '{col}' column (no server-side statistics): {list(r)}"
            assert int(r[col]) >= 0, r
        if model == "facile":  # 16,000 rows take measurable compute
            assert int(r["Server Compute Infer"]) > 0, r

    # ModelStatistics deltas add up
    assert after["version"] == "1"
    assert d["success.count"] > 0, d
    assert d["fail.count"] == 0, d
    assert d["inference_count"] == batch * d["success.count"], d
    if not has_dynamic_batching(stats_client, model):
        assert d["execution_count"] == d["success.count"], d
    for k in ("queue.count", "compute_input.count", "compute_infer.count", "compute_output.count"):
        assert d[k] == d["success.count"], (k, d)
    assert d["success.ns"] >= d["queue.ns"] + d["compute_infer.ns"] > 0, d
    for b in blocks:  # PA's windows are part of the run (PA may start loading before its first snapshot)
        assert b["execution_count"] == b["success"] or has_dynamic_batching(stats_client, model), info
        assert b["success"] <= d["success.count"] and b["inference_count"] <= d["inference_count"], (b, d)
    if request_count is not None:
        # exactly the requests PA sent
        assert d["success.count"] == request_count, d


def test_perf_analyzer_shm_regions_released(perf_analyzer, pa_server, stats_client):
    """After a --shared-memory run PA has unregistered everything it registered."""
    proc, cmd = run_pa(
        perf_analyzer,
        pa_server.url,
        "facile",
        "-b",
        "16000",
        "--shared-memory",
        "system",
        "--output-shared-memory-size",
        str(16000 * 4),
        "--concurrency-range",
        "1",
        "--request-count",
        "5",
    )
    assert proc.returncode == 0, describe(proc, cmd, pa_server)
    assert len(stats_client.get_system_shared_memory_status().regions) == 0


def test_perf_analyzer_batch_above_max_is_rejected(perf_analyzer, pa_server, stats_client):
    """PA does not check -b against max_batch_size; the server must refuse, and PA fail."""
    before = settled_stats(stats_client, "simple")
    proc, cmd = run_pa(perf_analyzer, pa_server.url, "simple", "-b", "16", "--concurrency-range", "1", "-p", "500")
    info = describe(proc, cmd)
    assert proc.returncode != 0, info
    assert "inference request batch-size must be <= 8 for 'simple'" in proc.stdout + proc.stderr, info
    after = settled_stats(stats_client, "simple")
    d = delta(after, before)
    # nothing was executed or counted as inferences
    assert d["inference_count"] == 0 and d["execution_count"] == 0 and d["success.count"] == 0, d


def test_perf_analyzer_unknown_model_fails(perf_analyzer, pa_server):
    proc, cmd = run_pa(perf_analyzer, pa_server.url, "no_such_model", "--concurrency-range", "1", "-p", "500")
    info = describe(proc, cmd)
    assert proc.returncode != 0, info
    assert "Request for unknown model: 'no_such_model' is not found" in proc.stdout + proc.stderr, info
