"""Fan-in: 1,500 client connections at once, 3 ModelInfer requests each, every one answered.

Issue 11: with 1,500 concurrent connections (one channel each) fpgaserve answered 3-10 % of
the requests with a CANCELLED no client had asked for, where the real Triton answers
4,500/4,500. The cause was grpc-core's pending-request backlog protector: grpc.aio accepts
calls from grpc-core one at a time on the event loop, so a burst waits in core's queue of
unaccepted calls, and past 1,000 of them (``grpc.server.max_pending_requests``; hard limit
3,000) core rejects new calls at random, as CANCELLED.

The driver is ``tests/support/fanin_client.py`` (one ``grpc.aio`` channel and TCP connection per
client connection, all opened at once), run as its own process. Each connection sends its 3
requests in turn, or (``at once``) all together. Every answer's values are
checked, and the server's ModelStatistics must count every request as a success. Nothing is
timed: the timeouts are hang guards.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from support.server_process import BUNDLED_REPO, CONFORMANCE_REPO, ServerProcess

SUPPORT = Path(__file__).resolve().parents[1] / "support"
CONNECTIONS = 1500
REQUESTS = 3

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _raise_fd_limit() -> int:
    """Soft RLIMIT_NOFILE -> hard limit, in this process (the server and the client inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


@pytest.fixture(scope="module")
def fanin_server(tmp_path_factory):
    previous = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = _raise_fd_limit()
    if limit != resource.RLIM_INFINITY and limit < CONNECTIONS + 512:
        pytest.skip(f"RLIMIT_NOFILE hard limit {limit} is too low for {CONNECTIONS} connections")
    log = tmp_path_factory.mktemp("fanin") / "fpgaserve.log"
    # FACILE in numpy mode: the bit-exact ap_fixed emulation, no C-simulation build at start
    proc = ServerProcess([CONFORMANCE_REPO, BUNDLED_REPO], "--fpga-mode", "numpy", log_path=log)
    proc.start(timeout=120)
    try:
        yield proc
    finally:
        rc = proc.stop()
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, previous)
        except (ValueError, OSError):
            pass
        assert rc == 0, f"server exited with {rc}: {proc.log()}"


def _success_count(url: str, model: str) -> int:
    import tritonclient.grpc as grpcclient

    with grpcclient.InferenceServerClient(url) as c:
        stats = c.get_inference_statistics(model, as_json=True)
    return sum(int(s.get("inference_stats", {}).get("success", {}).get("count", 0)) for s in stats["model_stats"])


def _run_fanin(url: str, model: str, *extra: str) -> dict:
    cmd = [
        sys.executable,
        str(SUPPORT / "fanin_client.py"),
        url,
        "--connections",
        str(CONNECTIONS),
        "--requests",
        str(REQUESTS),
        "--model",
        model,
        "--timeout",
        "240",
        "--json",
        *extra,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    lines = proc.stdout.strip().splitlines()
    assert lines, f"fanin_client printed nothing (rc {proc.returncode}): {proc.stderr[-3000:]}"
    return json.loads(lines[-1])


@pytest.mark.parametrize(
    ("model", "how"),
    [
        ("simple", "in turn"),
        ("facile", "in turn"),
        # all 4,500 at once: past grpc-core's default hard limit of 3,000 waiting calls, and more
        # than one frontend process gets from its share of the connections
        ("simple", "at once"),
    ],
)
def test_fanin_every_request_answered(fanin_server, model, how):
    before = _success_count(fanin_server.url, model)
    result = _run_fanin(fanin_server.url, model, *(["--parallel"] if how == "at once" else []))
    total = CONNECTIONS * REQUESTS
    assert result["sent"] == total
    assert result["statuses"] == {"OK": total}, (
        f"{result['failed']} failed and {result['wrong']} wrong of {total}: {result['statuses']}\n"
        f"{result.get('summary', '')}\nserver log: {fanin_server.log()}"
    )
    assert result["ok"] == total
    # the server counts each of them once, as a success (the calibration requests of the
    # facile run, one per input variant, come on top)
    calibration = result.get("calibration_requests", 0)
    assert _success_count(fanin_server.url, model) - before == total + calibration
    # and it still serves
    assert fanin_server.http_status("/v2/health/ready") == 200
