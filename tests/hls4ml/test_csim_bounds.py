"""Bounded C-simulation compiles (backends/hls4ml/csim/library.py: CompileLimits).

g++ compiling a large io_parallel project once grew past 20 GiB on a 24 GiB host. Each test
compiles a bundled hls4ml project (bitstreams/: real hls4ml output, ~4 s to build) into a fresh
cache, under a memory limit its cc1plus really exceeds (it needs ~270 MiB resident) or a
time limit shorter than its compile, and checks the load error, the cache and the processes
left behind; then that a server keeps serving its other models.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from fpgaserve.backends.hls4ml.csim import CompileLimitError, CompileLimits, CsimLibrary
from fpgaserve.backends.hls4ml.csim import library as csim
from fpgaserve.backends.hls4ml.project import Hls4mlProject
from support.server_process import BUNDLED_REPO, CONFORMANCE_REPO, ServerProcess

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the C-simulation needs g++")

#: an address-space limit cc1plus cannot compile the bundled firmware in (it fails within a second)
TINY_MB = 128
MEMORY_ERROR = (
    r"compiling the C-simulation of hls4ml project 'facile' \(.*facile/1\) ran out of its 128 MiB memory limit "
    r"\(csim-compile-memory-mb\): g\+\+ said \"virtual memory exhausted: Cannot allocate memory\"; "
    r"raise it with --backend-config=hls4ml,csim-compile-memory-mb=N"
)


@pytest.fixture
def fresh(monkeypatch):
    """Nothing this process loaded before is served from its registry: every load builds."""
    monkeypatch.setattr(CsimLibrary, "_loaded", {})


def _processes_using(path: Path) -> list[str]:
    """Command lines of live processes that name ``path`` (the compilers of a build there)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(path) in cmdline:
            found.append(f"{proc.name}: {cmdline[:200]}")
    return found


def _assert_clean(cache: Path) -> None:
    """No library, half or whole, and no build folder left in the cache."""
    assert not list(cache.glob("*/*.so")), list(cache.rglob("*"))
    assert not list(cache.glob("*/build-*")), list(cache.glob("*/build-*"))


# ---------------------------------------------------------------------------- CsimLibrary.load
def test_memory_limit_fails_the_load_with_the_setting_named(tmp_path, fresh):
    project = Hls4mlProject.load(BUNDLED_REPO / "facile" / "1")
    cache = tmp_path / "cache"
    with pytest.raises(CompileLimitError, match=MEMORY_ERROR):
        CsimLibrary.load(project, cache, CompileLimits(TINY_MB, 600), name="facile")
    _assert_clean(cache)
    # the limit, not the project, failed it: the same cache builds it within a sufficient one
    lib = CsimLibrary.load(project, cache, CompileLimits(2048, 600), name="facile")
    assert lib.built and lib.predict(np.zeros((2, 47))).shape == (2, 1)


def test_time_limit_kills_every_compiler_process(tmp_path, fresh):
    project = Hls4mlProject.load(BUNDLED_REPO / "facile" / "1")
    cache = tmp_path / "cache"
    start = time.monotonic()
    with pytest.raises(CompileLimitError) as err:
        CsimLibrary.load(project, cache, CompileLimits(4096, 0.5), name="facile")
    took = time.monotonic() - start
    assert str(err.value) == (
        f"compiling the C-simulation of hls4ml project 'facile' ({project.path}) did not finish within its 0.5 s "
        "time limit (csim-compile-timeout-secs); raise it with --backend-config=hls4ml,csim-compile-timeout-secs=N "
        "(or FPGASERVE_CSIM_COMPILE_TIMEOUT_S for fpgaserve doctor and the image build)"
    )
    assert took < 3, f"the load returned {took:.1f} s after its start, not at the limit"
    # g++'s children (cc1plus, as) die with it: killing g++ alone would leave cc1plus compiling
    assert _processes_using(cache) == []
    _assert_clean(cache)


def test_compiles_in_one_process_run_one_at_a_time(tmp_path, fresh, monkeypatch):
    """Two models loading at once (two threads of the server) do not run g++ side by side:
    each would take a whole memory budget."""
    compiling: list[str] = []
    overlaps: list[list[str]] = []
    run = csim._Builder._run

    def observed(builder, step, deadline, tmp):
        compiling.append(builder.label)
        if len(set(compiling)) > 1:
            overlaps.append(list(compiling))
        try:
            run(builder, step, deadline, tmp)
        finally:
            compiling.remove(builder.label)

    monkeypatch.setattr(csim._Builder, "_run", observed)
    limits = CompileLimits(4096, 600)
    with ThreadPoolExecutor(2) as pool:
        loads = [
            pool.submit(CsimLibrary.load, Hls4mlProject.load(BUNDLED_REPO / model / "1"), tmp_path, limits)
            for model in ("facile", "jet_tagger")
        ]
        assert all(f.result().built for f in loads)
    assert overlaps == []


# ---------------------------------------------------------------------------- settings
@pytest.mark.parametrize(
    "settings,environ,message",
    [
        ({"csim-compile-memory-mb": "lots"}, {}, "hls4ml csim-compile-memory-mb must be a positive whole number"),
        ({"csim-compile-memory-mb": "0"}, {}, "hls4ml csim-compile-memory-mb must be a positive whole number"),
        ({"csim-compile-timeout-secs": "-1"}, {}, "hls4ml csim-compile-timeout-secs must be a positive number"),
        ({"csim-compile-timeout-secs": "inf"}, {}, "hls4ml csim-compile-timeout-secs must be a positive number"),
        ({}, {"FPGASERVE_CSIM_COMPILE_MEMORY_MB": "1.5"}, "FPGASERVE_CSIM_COMPILE_MEMORY_MB must be a positive whole"),
        ({}, {"FPGASERVE_CSIM_COMPILE_TIMEOUT_S": "soon"}, "FPGASERVE_CSIM_COMPILE_TIMEOUT_S must be a positive"),
    ],
)
def test_bad_limits_are_refused(settings, environ, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        CompileLimits.resolve(settings, environ)


def test_limits_come_from_settings_then_environment_then_defaults():
    env = {"FPGASERVE_CSIM_COMPILE_MEMORY_MB": "1024", "FPGASERVE_CSIM_COMPILE_TIMEOUT_S": "60"}
    assert CompileLimits.resolve({}, env) == CompileLimits(1024, 60.0)
    assert CompileLimits.resolve({"csim-compile-memory-mb": "300"}, env) == CompileLimits(300, 60.0)
    default = CompileLimits.resolve({}, {"FPGASERVE_CSIM_COMPILE_MEMORY_MB": ""})
    physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // (1 << 20)
    assert default.timeout_s == 900 and 0 < default.memory_mb <= min(8192, physical // 2)


@pytest.mark.parametrize(
    "args,env,message",
    [
        (
            ["--backend-config=hls4ml,csim-compile-memory-mb=8G"],
            {},
            "error: hls4ml csim-compile-memory-mb must be a positive whole number of MiB, got '8G'",
        ),
        (
            [],
            {"FPGASERVE_CSIM_COMPILE_TIMEOUT_S": "0"},
            "error: FPGASERVE_CSIM_COMPILE_TIMEOUT_S must be a positive number of seconds, got '0'",
        ),
    ],
)
def test_server_refuses_bad_limits_at_startup(args, env, message):
    proc = subprocess.run(
        [sys.executable, "-m", "fpgaserve.server.cli", "--model-repository", str(CONFORMANCE_REPO), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
        check=False,
    )
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr[-2000:]


# ---------------------------------------------------------------------------- served
def test_served_model_over_its_memory_limit_fails_and_the_others_serve(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(BUNDLED_REPO / "facile", repo / "facile")
    shutil.copytree(CONFORMANCE_REPO / "simple", repo / "simple")
    cache = tmp_path / "cache"
    server = ServerProcess(
        [repo],
        "--fpga-mode=csim",
        f"--backend-config=hls4ml,csim-compile-memory-mb={TINY_MB}",
        "--strict-readiness=false",
        log_path=tmp_path / "server.log",
        env=dict(os.environ, FPGASERVE_CACHE_DIR=str(cache)),
    )
    server.start(timeout=120)
    try:
        with grpcclient.InferenceServerClient(server.url) as client:
            deadline = time.monotonic() + 60
            while True:
                index = {m.name: m for m in client.get_model_repository_index().models}
                if {m.state for m in index.values()} <= {"READY", "UNAVAILABLE"} and len(index) == 2:
                    break
                assert time.monotonic() < deadline, index
                time.sleep(0.2)
            assert index["facile"].state == "UNAVAILABLE", index
            assert re.search(MEMORY_ERROR, index["facile"].reason), index["facile"].reason
            assert not client.is_model_ready("facile")
            assert client.is_model_ready("simple")
            a = grpcclient.InferInput("INPUT0", [1, 16], "INT32")
            a.set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16))
            b = grpcclient.InferInput("INPUT1", [1, 16], "INT32")
            b.set_data_from_numpy(np.ones((1, 16), np.int32))
            out = client.infer("simple", [a, b]).as_numpy("OUTPUT0")
            assert out.tolist() == [list(range(1, 17))]
    finally:
        assert server.stop() == 0, server.log()
    _assert_clean(cache)
    assert re.search(r"failed to load 'facile'.*ran out of its 128 MiB memory limit", server.log())
