"""perf_analyzer ``-i http`` against a real fpgaserve: sync and ``--async``, binary and JSON
tensors (``--input-tensor-format`` / ``--output-tensor-format``), system shared memory, and
FACILE at 16,000 rows; with HTTP in the engine's process and in two frontend processes.

As in tests/protocol/test_perf_analyzer.py (whose helpers this uses), besides rc 0 we require that PA
printed its "Server:" block for every load level (it read our statistics and trusted them)
and that the ModelStatistics deltas around the run add up: inference_count = batch x success,
one execution per request, exactly ``--request-count`` requests, no failures.
"""

from __future__ import annotations

import pytest

from support.perf_analyzer_runs import delta, describe, has_dynamic_batching, pa_server_blocks, read_csv, settled_stats
from support.server_process import BUNDLED_REPO, CONFORMANCE_REPO, ServerProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module", params=[1, 2], ids=["in-process", "2-frontend-processes"])
def http_pa_server(request, tmp_path_factory):
    log = tmp_path_factory.mktemp("pa_http") / "fpgaserve.log"
    args = ["--fpga-mode", "numpy", f"--frontend-processes={request.param}"]
    with ServerProcess([CONFORMANCE_REPO, BUNDLED_REPO], "--allow-client-shm=true", *args, log_path=log) as srv:
        yield srv
        rc = srv.stop()
        assert rc == 0, f"server exited with {rc}: {srv.log()}"


@pytest.fixture(scope="module")
def stats_client(http_pa_server):
    import tritonclient.grpc as grpcclient

    c = grpcclient.InferenceServerClient(http_pa_server.url)
    yield c
    c.close()


JSON = ["--input-tensor-format", "json", "--output-tensor-format", "json"]

# (id, model, batch, PA args, request count)
RUNS = [
    ("simple-sync-binary", "simple", 1, ["--concurrency-range", "1"], 200),
    ("simple-async-binary-b8", "simple", 8, ["--async", "-b", "8", "--concurrency-range", "2"], 200),
    ("simple-sync-json", "simple", 1, [*JSON, "--concurrency-range", "1"], 200),
    ("simple-async-json-b8", "simple", 8, [*JSON, "--async", "-b", "8", "--concurrency-range", "2"], 200),
    (
        "simple-shm-b8",
        "simple",
        8,
        ["-b", "8", "--shared-memory", "system", "--output-shared-memory-size", "512", "--concurrency-range", "1"],
        100,
    ),
    ("facile-sync-b16000", "facile", 16000, ["-b", "16000", "--concurrency-range", "1"], 20),
    ("facile-async-b16000", "facile", 16000, ["-b", "16000", "--async", "--concurrency-range", "2"], 20),
]


@pytest.mark.parametrize("name, model, batch, args, request_count", RUNS, ids=[r[0] for r in RUNS])
def test_perf_analyzer_http(
    perf_analyzer, http_pa_server, stats_client, tmp_path, name, model, batch, args, request_count
):
    import subprocess

    before = settled_stats(stats_client, model)
    out_csv = tmp_path / f"{name}.csv"
    url = f"localhost:{http_pa_server.http_port}"
    cmd = [perf_analyzer, "-m", model, "-u", url, "-i", "http", *args, "--request-count", str(request_count)]
    cmd += ["-f", str(out_csv)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    info = describe(proc, " ".join(cmd[1:]), http_pa_server)
    after = settled_stats(stats_client, model)
    d = delta(after, before)

    assert proc.returncode == 0, info
    blocks = pa_server_blocks(proc.stdout)
    assert len(blocks) == 1, info
    assert blocks[0]["success"] > 0 and blocks[0]["inference_count"] == batch * blocks[0]["success"], info
    assert "Unable to unregister" not in proc.stdout + proc.stderr, info
    rows = read_csv(out_csv)
    assert len(rows) == 1 and float(rows[0]["Inferences/Second"]) > 0, rows
    assert "Server Compute Infer" in rows[0], list(rows[0])

    assert d["fail.count"] == 0, d
    assert d["success.count"] == request_count, d
    assert d["inference_count"] == batch * request_count, d
    if not has_dynamic_batching(stats_client, model):
        assert d["execution_count"] == d["success.count"], d
    assert blocks[0]["success"] <= d["success.count"], (blocks, d)


def test_perf_analyzer_http_batch_above_max_is_rejected(perf_analyzer, http_pa_server):
    import subprocess

    url = f"localhost:{http_pa_server.http_port}"
    cmd = [perf_analyzer, "-m", "simple", "-u", url, "-i", "http", "-b", "16", "--concurrency-range", "1", "-p", "500"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "inference request batch-size must be <= 8 for 'simple'" in proc.stdout + proc.stderr
