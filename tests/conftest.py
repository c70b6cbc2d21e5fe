"""Fixtures every area shares: one fpgaserve process serving the conformance + bundled
repositories for the whole session, its gRPC client, and one C-simulation build cache.

Tests that need their own repository or flags start a ``ServerProcess`` themselves. The
external tools (perf_analyzer, the real Triton) come from the fixture module support/tools.py,
registered here for every folder; each area's own fixtures are in its folder's conftest.py.
"""

from __future__ import annotations

import os

import pytest

from support.server_process import BUNDLED_REPO, CONFORMANCE_REPO, ServerProcess, serve

pytest_plugins = ["support.tools"]


@pytest.fixture(scope="session", autouse=True)
def csim_cache(tmp_path_factory):
    """One C-simulation build cache per test run, shared by every server the tests start
    (they inherit the environment): each hls4ml project compiles once, never into ~/.cache."""
    path = tmp_path_factory.mktemp("csim-cache")
    previous = os.environ.get("FPGASERVE_CACHE_DIR")
    os.environ["FPGASERVE_CACHE_DIR"] = str(path)
    yield path
    if previous is None:
        os.environ.pop("FPGASERVE_CACHE_DIR", None)
    else:
        os.environ["FPGASERVE_CACHE_DIR"] = previous


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("server") / "fpgaserve.log"
    # client shared memory on, as cmsTriton starts its local server (tritonserver >= 26.04 and
    # fpgaserve default to off: tests/deployment/test_tritonserver_cli.py checks that)
    yield from serve(ServerProcess([CONFORMANCE_REPO, BUNDLED_REPO], "--allow-client-shm=true", log_path=log))


@pytest.fixture
def client(server):
    import tritonclient.grpc as grpcclient

    with grpcclient.InferenceServerClient(server.url) as c:
        yield c
