"""``--frontend-processes N``: gRPC frontends in N processes feeding one engine.

Against real servers with two frontend processes sharing the gRPC port:

* the protocol suites run unchanged in both process models: the whole suite runs with the
  default ``auto`` (two frontend processes on a 2-core host), and a nested pytest reruns the
  protocol modules with the other one (FPGASERVE_TEST_FRONTEND_PROCESSES=1 there): errors,
  shared memory, sequences, decoupled streams, batching, deadlines and cancellation (a queued
  request cancelled by its client never executes), SIGTERM drains, datatypes;
* one truth for state: what a client does on one connection (register shared memory, unload
  a model, run requests) is what clients on other connections see, whichever frontend they
  landed on (connections are spread over both, checked by the frontends' own PIDs);
* faults: a frontend killed with SIGKILL is started again while the other keeps serving; an
  engine killed with SIGKILL takes its frontends with it (no orphan holds the port); a port
  that is taken logs "Address already in use" and the server exits non-zero.

Nothing here measures time; waits only guard against hangs.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from fpgaserve.server.cli import auto_frontend_processes
from support.server_process import CONFORMANCE_REPO, ROOT, ServerProcess, free_port

N = "2"
SIMPLE = ["--model-control-mode=explicit", "--load-model=simple", "--load-model=simple_identity"]
PROTOCOL_MODULES = [
    "tests/protocol/test_rpcs.py",
    "tests/protocol/test_errors.py",
    "tests/protocol/test_shared_memory.py",
    "tests/engine/test_decoupled.py",
    "tests/engine/test_sequence.py",
    "tests/engine/test_dynamic_batcher.py",
    "tests/protocol/test_datatypes.py",
    "tests/protocol/test_transport.py",
    "tests/engine/test_ragged_batching.py",
]


def _children(pid: int) -> set[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return {int(p) for p in f.read().split()}
    except OSError:
        return set()


def _frontends(server: ServerProcess) -> set[int]:
    out = set()
    for child in _children(server.proc.pid):
        try:
            with open(f"/proc/{child}/cmdline", "rb") as f:
                if b"frontend_process" in f.read():
                    out.add(child)
        except OSError:
            pass
    return out


def _wait(predicate, what: str, attempts: int = 600):
    for _ in range(attempts):  # a hang guard (60 s), not a timing assertion
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"never happened: {what}")


def _infer(client, value: int = 1):
    a = np.full((1, 16), value, dtype=np.int32)
    inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"), grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(np.ones_like(a))
    result = client.infer("simple", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + 1)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - 1)


def _connections(pid: int, port: int) -> int:
    """Established TCP connections to ``port`` whose socket belongs to process ``pid``."""
    try:
        inodes = set()
        for fd in os.listdir(f"/proc/{pid}/fd"):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
        rows = []
        for table in ("tcp", "tcp6"):
            with open(f"/proc/{pid}/net/{table}") as f:
                rows += [line.split() for line in f.readlines()[1:]]
    except OSError:
        return 0
    established = "01"
    return sum(1 for r in rows if r[3] == established and int(r[1].rsplit(":", 1)[1], 16) == port and r[9] in inodes)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("processes") / "server.log"
    with ServerProcess(
        [CONFORMANCE_REPO], "--allow-client-shm=true", "--frontend-processes", N, *SIMPLE, log_path=log
    ) as s:
        _wait(lambda: len(_frontends(s)) == 2, "two frontend processes")
        yield s


def test_connections_spread_over_both_frontends_and_state_is_shared(server):
    frontends = _frontends(server)
    clients = []
    for _ in range(16):  # new connections are spread by the kernel (SO_REUSEPORT hash)
        # a connection of its own each (grpcio otherwise shares one per target in a process)
        c = grpcclient.InferenceServerClient(server.url, channel_args=[("grpc.use_local_subchannel_pool", 1)])
        _infer(c)
        clients.append(c)
    per_frontend = {pid: _connections(pid, server.grpc_port) for pid in frontends}
    assert all(n > 0 for n in per_frontend.values()), per_frontend
    # statistics: every request counted once, whichever frontend carried it
    stats = clients[0].get_inference_statistics("simple").model_stats[0]
    assert all(
        c.get_inference_statistics("simple").model_stats[0].inference_count == stats.inference_count for c in clients
    )
    # shared memory registered on one connection is usable and visible on all
    region = shm.create_shared_memory_region("procs_in", "/fpgaserve_procs_in", 128)
    try:
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        shm.set_shared_memory_region(region, [a, np.ones_like(a)])
        clients[0].register_system_shared_memory("procs_in", "/fpgaserve_procs_in", 128)
        for c in clients:
            assert "procs_in" in c.get_system_shared_memory_status(as_json=True)["regions"]
            inputs = [
                grpcclient.InferInput("INPUT0", [1, 16], "INT32"),
                grpcclient.InferInput("INPUT1", [1, 16], "INT32"),
            ]
            inputs[0].set_shared_memory("procs_in", 64, 0)
            inputs[1].set_shared_memory("procs_in", 64, 64)
            r = c.infer("simple", inputs)
            np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + 1)
        clients[-1].unregister_system_shared_memory("procs_in")
        for c in clients:
            assert not c.get_system_shared_memory_status(as_json=True).get("regions")
    finally:
        shm.destroy_shared_memory_region(region)
    # repository control on one connection, seen on all
    clients[0].unload_model("simple_identity")
    assert not any(c.is_model_ready("simple_identity") for c in clients)
    clients[-1].load_model("simple_identity")
    assert all(c.is_model_ready("simple_identity") for c in clients)
    for c in clients:
        c.close()


def test_killed_frontend_is_started_again(server):
    before = _frontends(server)
    victim = min(before)
    os.kill(victim, signal.SIGKILL)
    # the other frontend serves throughout (a client whose connection died reconnects)
    client = grpcclient.InferenceServerClient(server.url)
    for i in range(10):
        for _attempt in range(50):
            try:
                _infer(client, i)
                break
            except InferenceServerException:
                client.close()
                client = grpcclient.InferenceServerClient(server.url)
                time.sleep(0.1)
        else:
            raise AssertionError("no frontend answered after one was killed")
    after = _wait(
        lambda: f if len(f := _frontends(server)) == 2 and victim not in f else None, "a replacement frontend"
    )
    assert victim not in after and len(after & before) == 1
    assert "exited with -9; starting it again" in server.log()
    client.close()


def test_engine_killed_takes_its_frontends_along(tmp_path):
    server = ServerProcess([CONFORMANCE_REPO], "--frontend-processes", N, *SIMPLE, log_path=tmp_path / "s.log")
    server.start()
    try:
        frontends = _wait(lambda: f if len(f := _frontends(server)) == 2 else None, "frontends")
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait(timeout=30)
        _wait(lambda: not any(Path(f"/proc/{p}").exists() for p in frontends), "frontends to exit")
        assert server.proc.returncode != 0
        _wait(lambda: server.log().count("the engine process is gone; exiting") == 2, "each frontend to say why")
        with socket.socket() as s:  # nobody holds the gRPC port any more
            s.bind(("127.0.0.1", server.grpc_port))
    finally:
        server.stop()


def test_sigterm_stops_every_process(tmp_path):
    server = ServerProcess([CONFORMANCE_REPO], "--frontend-processes", N, *SIMPLE, log_path=tmp_path / "s.log")
    server.start()
    frontends = _wait(lambda: f if len(f := _frontends(server)) == 2 else None, "frontends")
    _infer(grpcclient.InferenceServerClient(server.url))
    assert server.stop(timeout=60) == 0, server.log()
    _wait(lambda: not any(Path(f"/proc/{p}").exists() for p in frontends), "frontends to exit")
    assert "server stopped" in server.log()


def test_taken_port_says_address_already_in_use():
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        port = holder.getsockname()[1]
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "fpgaserve.server.cli",
                f"--model-repository={CONFORMANCE_REPO}",
                *SIMPLE,
                "--frontend-processes",
                N,
                f"--grpc-port={port}",
                f"--http-port={free_port()}",
                f"--metrics-port={free_port()}",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode != 0
    assert "Address already in use" in proc.stderr


@pytest.mark.timeout(900)
@pytest.mark.parametrize("module", PROTOCOL_MODULES)
def test_protocol_suites_with_the_other_process_model(module):
    """The protocol modules, unchanged, against servers in the process model the rest of the
    suite does not use: the suite's servers run with the default (``auto``), so on a host
    where auto means frontend processes this reruns them in one process, and vice versa.
    One nested run per module, so that parallel workers share them out."""
    other = "1" if auto_frontend_processes() > 1 else N
    env = dict(os.environ, FPGASERVE_TEST_FRONTEND_PROCESSES=other)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", module],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=880,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert re.search(r"\b\d+ passed\b", proc.stdout), proc.stdout[-2000:]


def test_large_outputs_come_back_through_the_response_arena(tmp_path):
    """FACILE at 16000 rows answers with 64 KB outputs (one float per row), which the engine writes into the
    frontends' response arenas (below 16 KB they travel inline): every answer, from several
    connections at once and many times over (blocks are reused), equals ONNX Runtime's own."""
    import concurrent.futures

    import onnxruntime as ort

    from support.server_process import BUNDLED_REPO

    session = ort.InferenceSession(str(BUNDLED_REPO / "facile" / "1" / "model.onnx"))
    feed = session.get_inputs()[0].name
    rng = np.random.default_rng(11)
    with ServerProcess(
        [BUNDLED_REPO],
        "--frontend-processes",
        N,
        "--fpga-mode=onnx",
        "--model-control-mode=explicit",
        "--load-model=facile",
        log_path=tmp_path / "s.log",
    ) as server:
        _wait(lambda: len(_frontends(server)) == 2, "two frontend processes")
        metadata = grpcclient.InferenceServerClient(server.url).get_model_metadata("facile", as_json=True)
        in_name, out_name = metadata["inputs"][0]["name"], metadata["outputs"][0]["name"]
        features = int(metadata["inputs"][0]["shape"][1])

        def one(k: int) -> None:
            c = grpcclient.InferenceServerClient(server.url, channel_args=[("grpc.use_local_subchannel_pool", 1)])
            for i in range(6):
                rows = 16000 if (k + i) % 3 else 100  # 100 rows: inline
                x = rng.standard_normal((rows, features)).astype(np.float32)
                inp = grpcclient.InferInput(in_name, list(x.shape), "FP32")
                inp.set_data_from_numpy(x)
                got = c.infer("facile", [inp]).as_numpy(out_name)
                want = session.run(None, {feed: x})[0]
                np.testing.assert_allclose(got, want.reshape(got.shape), rtol=1e-5, atol=1e-6)
            c.close()

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            for f in [pool.submit(one, k) for k in range(8)]:
                f.result()
