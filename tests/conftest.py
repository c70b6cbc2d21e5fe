"""Fixtures every area shares: one fpgaserve process serving the conformance + bundled
repositories for the whole session, its gRPC client, and one C-simulation build cache.

Tests that need their own repository or flags start a ``ServerProcess`` themselves. The
external tools (perf_analyzer, the real Triton) come from the fixture module support/tools.py,
registered here for every folder; each area's own fixtures are in its folder's conftest.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from support.server_process import BUNDLED_REPO, CONFORMANCE_REPO, ServerProcess, serve
from support.workers import worker

pytest_plugins = ["support.tools", "support.costs"]


# Set by the outermost run to its cache: the pytest runs nested in tests (frontend processes,
# the PYNQ venv) and the parallel workers use the same one.
RUN_CACHE = "FPGASERVE_TEST_CSIM_CACHE"


@pytest.fixture(scope="session", autouse=True)
def csim_cache(tmp_path_factory):
    """One C-simulation build cache per test run, shared by every server the tests start
    (they inherit the environment), by every parallel worker (the cache's own file locks
    serialise two builders of one project) and by the pytest runs nested in tests: each hls4ml
    project compiles once per run, never into ~/.cache."""
    inherited = os.environ.get(RUN_CACHE)
    outermost = not (inherited and Path(inherited).is_dir())
    if not outermost:
        path = Path(str(inherited))
    else:
        # a worker's basetemp is <run's basetemp>/popen-gwN: its parent is the run's, shared by the workers
        base = tmp_path_factory.getbasetemp()
        path = base.parent / "csim-cache" if worker()[1] > 1 else base / "csim-cache"
        path.mkdir(exist_ok=True)
        os.environ[RUN_CACHE] = str(path)
    previous = os.environ.get("FPGASERVE_CACHE_DIR")
    os.environ["FPGASERVE_CACHE_DIR"] = str(path)
    yield path
    if previous is None:
        os.environ.pop("FPGASERVE_CACHE_DIR", None)
    else:
        os.environ["FPGASERVE_CACHE_DIR"] = previous
    if outermost:
        os.environ.pop(RUN_CACHE, None)


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


# The longest modules, longest first (their durations on main, 2026-12-01: docs/testing.md): they
# start first, so that in a parallel run no worker is still in one of them long after the others
# are done, and the shared installs they wait for (the PYNQ venv: test_card_anchors; Model
# Analyzer's venv) are under way early. The rest keep their collection order.
FIRST: tuple[str, ...] = (
    "test_image.py",  # 166 s: the OCI image built with podman
    "test_card_anchors.py",  # 64 s: builds the PYNQ venv that test_card_pynq and test_fpga_sim_pynq use
    "test_model_analyzer.py",  # 64 s: builds Model Analyzer's venv
    "test_transport.py",  # 90 s
    "test_install.py",  # 68 s: fresh venvs on Python 3.12 and 3.13
    "test_hls4ml_serving.py",  # 95 s
    "test_hls4ml_io_stream.py",  # 72 s
    "test_hls4ml_emulator.py",  # 68 s
    "test_security.py",  # 65 s
    "test_csim_stack.py",  # 57 s
    "test_triton_differential_ensemble.py",  # 51 s
    "test_tritonserver_cli.py",  # 49 s
    "test_triton_differential_python.py",  # 47 s
    "test_hls4ml_csim.py",  # 46 s
    "test_ensembles.py",  # 44 s
    "test_prometheus.py",  # 38 s
    "test_triton_differential_unload.py",  # 38 s
    "test_hls4ml_layers.py",  # 36 s
)


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(FIRST)))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Whole modules to each worker, in collection order (support/scheduling.py says why)."""
    from support.scheduling import ModuleScheduling

    return ModuleScheduling(config, log)


# A test marked ``quiet`` runs while no other worker runs a test: what it checks depends on
# threads overlapping on time (the simulated card's DMA during a kernel) and a machine loaded by
# the other workers can make that not happen. Every test holds the run's lock shared, a quiet one
# holds it alone; the turnstile lets a quiet test that waits go before tests that come later.
@pytest.fixture(autouse=True)
def _quiet_or_shared(request, tmp_path_factory):
    if not hasattr(request.config, "workerinput"):  # no workers (a serial run, a run nested in a test)
        yield
        return
    import fcntl

    base = tmp_path_factory.getbasetemp().parent
    quiet = request.node.get_closest_marker("quiet") is not None
    with open(base / "quiet.turnstile", "a") as turnstile, open(base / "quiet.lock", "a") as lock:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if quiet else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
