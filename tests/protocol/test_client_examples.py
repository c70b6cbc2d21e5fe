"""client_examples/*.py run as users run them: a subprocess with ``-u <server>``.

Each example checks the server's answers itself (FACILE against a numpy re-computation,
simple's add/sub, ids, statistics deltas) and prints ``PASS: <name>``; here we require
rc 0 and that line, plus a few example-specific lines. The negative tests make sure the
examples really do fail on a wrong answer or an unreachable server.
"""

from __future__ import annotations

import shutil
import subprocess
import time

import numpy as np
import pytest

from support.client_examples import assert_pass, run_example
from support.server_process import BUNDLED_REPO, ROOT, ServerProcess, free_port

EXAMPLES = ROOT / "client_examples"


def wait_idle(client, model: str, timeout: float = 15.0) -> None:
    """Until the model's success+fail counts stop changing (three reads 0.1 s apart)."""

    def counts():
        st = client.get_inference_statistics(model).model_stats[0].inference_stats
        return st.success.count, st.fail.count

    last, same, deadline = counts(), 0, time.monotonic() + timeout
    while same < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
        now = counts()
        same, last = (same + 1 if now == last else 0), now


@pytest.mark.parametrize(
    "script, args, expected",
    [
        # session server serves tests/models too, so the optional simple check runs
        ("sync_infer.py", ["-v"], ["facile: outputs match the reference", "simple: batch of 4, add/sub correct"]),
        ("sync_infer.py", ["--model", "simple"], ["simple: batch of 4, add/sub correct"]),
        ("sync_infer.py", ["--model", "facile", "-n", "16384"], ["facile: 16384 channels"]),
        ("async_infer.py", ["--requests", "48"], ["48 concurrent requests"]),
        ("stream_infer.py", ["--requests", "24"], ["24 streamed responses matched by id"]),
        ("shared_memory_infer.py", ["-n", "5000"], ["facile via shared memory: 5000 channels"]),
        ("sonic_like.py", ["--events", "3"], ["ModelMetadata: inputs input FP32 [-1, 47]", "3 events"]),
        ("sonic_like.py", ["--events", "2", "--compression", "gzip"], ["2 events"]),
        (
            "sonic_like.py",
            ["--events", "2", "--shm"],
            [
                "SystemSharedMemoryRegister: 2 region(s)",
                "2 events",
                "through system shared memory",
                "SystemSharedMemoryUnregister: 2 region(s)",
            ],
        ),
    ],
    ids=["sync", "sync-simple", "sync-facile-max-batch", "async", "stream", "shm", "sonic", "sonic-gzip", "sonic-shm"],
)
def test_example_passes(server, client, script, args, expected):
    name = script.removesuffix(".py")
    if script == "sonic_like.py":
        # it requires exact statistics deltas: let anything an earlier test left in flight finish
        wait_idle(client, "facile")
    stdout = assert_pass(run_example(script, server.url, *args), name)
    for line in expected:
        assert line in stdout, stdout


def test_shared_memory_example_cleans_up(server, client):
    """The example unregisters its regions and unlinks its /dev/shm files."""
    import glob

    before = set(glob.glob("/dev/shm/fpgaserve_facile_*"))
    assert_pass(run_example("shared_memory_infer.py", server.url), "shared_memory_infer")
    assert set(glob.glob("/dev/shm/fpgaserve_facile_*")) == before
    regions = client.get_system_shared_memory_status().regions
    assert not [r for r in regions if r.startswith("facile_")], regions


def test_sonic_like_prints_repository_agents(tmp_path):
    """A config with SonicTriton's checksum agent block (the model file's real digest: the
    agent checks it at load) is served verbatim and printed."""
    import hashlib

    repo = tmp_path / "repo"
    shutil.copytree(BUNDLED_REPO / "facile", repo / "facile")
    config = repo / "facile" / "config.pbtxt"
    digest = hashlib.md5((repo / "facile" / "1" / "model.onnx").read_bytes(), usedforsecurity=False).hexdigest()
    config.write_text(
        config.read_text()
        + 'model_repository_agents {\n  agents [\n    {\n      name: "checksum"\n'
        + f'      parameters {{ key: "MD5:1/model.onnx" value: "{digest}" }}\n'
        + "    }\n  ]\n}\n"
    )
    with ServerProcess([repo], "--allow-client-shm=true", log_path=tmp_path / "server.log") as srv:
        stdout = assert_pass(run_example("sonic_like.py", srv.url, "--events", "2"), "sonic_like")
    assert "ModelConfig: model_repository_agents {" in stdout, stdout
    assert f"agent 'checksum': MD5:1/model.onnx: {digest}" in stdout, stdout


def test_sonic_like_shm_cleans_up_after_a_failure(server, client, tmp_path):
    """--shm with a wrong answer: rc 1, and still no region left registered or in /dev/shm."""
    import os
    import re

    proc = run_example("sonic_like.py", server.url, "--shm", "--events", "1", "--weights", _perturbed_weights(tmp_path))
    assert proc.returncode != 0 and "differ from the reference" in proc.stdout, proc.stdout + proc.stderr
    names = re.findall(r"\b\d+_(?:input|output)\d+\b", proc.stdout)
    assert len(names) == 2, proc.stdout
    assert not set(names) & set(client.get_system_shared_memory_status().regions.keys())
    assert not [n for n in names if os.path.exists(f"/dev/shm/{n}")]


def _perturbed_weights(tmp_path) -> str:
    src = BUNDLED_REPO / "facile" / "1" / "weights.npz"
    with np.load(src) as w:
        arrays = {k: w[k].copy() for k in w.files}
    arrays["b3"] = arrays["b3"] + np.float32(0.5)  # shifts every output by 0.5
    dst = tmp_path / "wrong_weights.npz"
    np.savez(dst, **arrays)
    return str(dst)


FACILE_EXAMPLES = ["sync_infer.py", "async_infer.py", "stream_infer.py", "shared_memory_infer.py", "sonic_like.py"]


@pytest.mark.parametrize("script", FACILE_EXAMPLES)
def test_example_detects_wrong_outputs(server, tmp_path, script):
    """With other weights than the served ones, every FACILE check must fail (rc 1, no PASS)."""
    proc = run_example(script, server.url, "--weights", _perturbed_weights(tmp_path))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "PASS:" not in out, out
    assert "differ from the reference" in out, out


@pytest.mark.parametrize("script", FACILE_EXAMPLES)
def test_example_fails_without_server(script):
    proc = run_example(script, f"localhost:{free_port()}", timeout=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "PASS:" not in out, out


def test_sync_example_requires_named_model(server):
    proc = run_example("sync_infer.py", server.url, "--model", "simple", "--model", "facile", "-n", "3")
    assert_pass(proc, "sync_infer")
    # a model the server does not have is an error when asked for explicitly
    proc = run_example("sonic_like.py", server.url, "-m", "no_such_model")
    assert proc.returncode != 0 and "is not READY" in proc.stdout, proc.stdout + proc.stderr


def test_perf_analyzer_script_syntax():
    proc = subprocess.run(["bash", "-n", str(EXAMPLES / "perf_analyzer.sh")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


# ----------------------------------------------------------------------------- HTTP variants


@pytest.mark.parametrize(
    "script, args, expected",
    [
        ("http_infer.py", ["-v"], ["facile: outputs match the reference", "one input binary and one JSON"]),
        ("http_infer.py", ["--json", "-n", "512"], ["512 channels (JSON tensors)", "facile: outputs match"]),
        ("http_infer.py", ["--compression", "gzip", "-n", "16000"], ["16000 channels (binary tensors)"]),
        ("http_infer.py", ["--compression", "deflate"], ["facile: outputs match the reference"]),
        ("http_async_infer.py", ["--requests", "48"], ["48 concurrent HTTP requests"]),
    ],
    ids=["http-sync", "http-json", "http-gzip-16000", "http-deflate", "http-async"],
)
def test_http_example_passes(server, script, args, expected):
    stdout = assert_pass(run_example(script, f"localhost:{server.http_port}", *args), script.removesuffix(".py"))
    for line in expected:
        assert line in stdout, stdout


def test_http_curl_example(server):
    if shutil.which("curl") is None or shutil.which("gzip") is None:
        pytest.skip("curl or gzip is not installed")
    proc = subprocess.run(
        ["bash", str(EXAMPLES / "http_curl.sh"), "-u", f"localhost:{server.http_port}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASS: http_curl" in proc.stdout, proc.stdout
    assert "\"error\":\"[request id: <id_unknown>] inference input 'INPUT0' data-type is 'FP32'" in proc.stdout
