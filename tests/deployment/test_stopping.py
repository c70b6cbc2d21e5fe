"""The server stops as Triton stops, whichever way the signal comes, and leaves nothing behind.

One server per way a stop arrives: SIGTERM to the server's PID (Kubernetes, ``podman stop``;
served by the server's own process, ``--frontend-processes 1``), SIGTERM to its whole process
group (systemd's ``KillMode=control-group``) and SIGINT to the group (Ctrl-C in a terminal),
both with two frontend processes. Each serves, in ``--fpga-mode auto`` on a simulated card:

=============  ======================================================================
``gate``       a Python model (instance processes) that answers once ``release`` exists
``stream``     a decoupled Python model: one response, then one more and the final
               flag once ``release`` exists
``card``       FACILE with an xclbin: the simulated card (hardware mode)
``csim``       FACILE with a layer the numpy emulator refuses: C-simulation in an
               instance process
``ens_card``   ensemble ``gate`` -> ``card``
``ens_csim``   ensemble ``gate`` -> ``csim``
=============  ======================================================================

With requests in flight in every one of them (gRPC and HTTP), the signal is sent; while the
server drains, it answers as Triton does (a new HTTP connection is refused, health answers
UNAVAILABLE "Server exiting" / "Server not ready", a new request UNAVAILABLE); then the
requests are let go: each gets its right answer (the card and the C-simulation steps run
after the signal, in processes that got it too), the server exits 0, and no process that
carries the server's environment (instances, frontends, compilers) and no shared-memory
segment or temporary folder of it is left. A second signal stops the server at once (status
1), and a stop during a C-simulation compile kills the compiler.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import socket
import tempfile
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from support.server_process import BUNDLED_REPO, ROOT, ServerProcess
from support.waiting import wait_until

pytestmark = [
    pytest.mark.skipif(shutil.which("g++") is None, reason="the C-simulation and the simulated card need g++"),
    pytest.mark.timeout(600),
]

SERVE = ROOT / "tests" / "fpga_sim" / "serve.py"
TAG_VAR = "FPGASERVE_STOP_TEST"  # marks every process the server starts (they inherit it)
CONTROL_VAR = "FPGASERVE_STOP_CONTROL"  # where the Python models find "release"
EXIT_TIMEOUT_S = 120  # never reached by a correct server: the drain answers, then exits 0
SHUTTING_DOWN = "GRPC server is shutting down and has stopped accepting new requests."
FOREIGN_SHM = ("triton_python_backend_shm_region_", "sem.mp-")
FEATURES = 47
MODES = {
    # mode: (how the signal is sent, frontend processes)
    "pid": (lambda pid: os.kill(pid, signal.SIGTERM), 1),
    "group": (lambda pid: os.killpg(pid, signal.SIGTERM), 2),
    "ctrl_c": (lambda pid: os.killpg(pid, signal.SIGINT), 2),
}

GATE = """\
import os
import time

import triton_python_backend_utils as pb_utils


def wait_for_release():
    control = os.environ["FPGASERVE_STOP_CONTROL"]
    while not os.path.exists(os.path.join(control, "release")):
        time.sleep(0.005)


class TritonPythonModel:
    def execute(self, requests):
        control = os.environ["FPGASERVE_STOP_CONTROL"]
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "input").as_numpy()
            open(os.path.join(control, f"started-{int(x[0, 0])}"), "w").close()
            wait_for_release()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("output", x)]))
        return responses
"""
GATE_CONFIG = """name: "gate"
backend: "python"
max_batch_size: 8
input [ { name: "input" data_type: TYPE_FP32 dims: [ 47 ] } ]
output [ { name: "output" data_type: TYPE_FP32 dims: [ 47 ] } ]
instance_group [ { count: 4 kind: KIND_CPU } ]
"""
STREAM = """\
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        control = os.environ["FPGASERVE_STOP_CONTROL"]
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            sender = request.get_response_sender()
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]))
            while not os.path.exists(os.path.join(control, "release")):
                time.sleep(0.005)
            sender.send(
                pb_utils.InferenceResponse([pb_utils.Tensor("Y", x + np.int32(1))]),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )
        return None
"""
STREAM_CONFIG = """name: "stream"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""
ENSEMBLE = """name: "{name}"
platform: "ensemble"
max_batch_size: 8
input [ {{ name: "input" data_type: TYPE_FP32 dims: [ 47 ] }} ]
output [ {{ name: "output" data_type: TYPE_FP32 dims: [ 1 ] }} ]
ensemble_scheduling {{ step [
  {{ model_name: "gate" model_version: -1
     input_map {{ key: "input" value: "input" }} output_map {{ key: "output" value: "gated" }} }},
  {{ model_name: "{target}" model_version: -1
     input_map {{ key: "input" value: "gated" }} output_map {{ key: "output/BiasAdd" value: "output" }} }}
] }}
"""


# ------------------------------------------------------------------------------ repository
def _facile(repo: Path, name: str) -> Path:
    folder = repo / name
    shutil.copytree(BUNDLED_REPO / "facile", folder)
    config = folder / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "facile"', f'name: "{name}"'))
    return folder / "1"


def _card_model(repo: Path) -> None:
    from fpga_sim.xclbin import write_xclbin
    from fpgaserve.backends.hls4ml.card.axlf import read_xclbin
    from fpgaserve.backends.hls4ml.card.manifest import CardManifest
    from fpgaserve.backends.hls4ml.project import Hls4mlProject

    version = _facile(repo, "card")
    write_xclbin(version / "model.xclbin", kernel_abi="krnl_rtl", project=version)
    manifest = CardManifest.for_project(Hls4mlProject.load(version), "krnl_rtl", read_xclbin(version / "model.xclbin"))
    manifest.write(version)


def _csim_model(repo: Path, name: str = "csim", note: str = "") -> None:
    """FACILE with nnet::relu1 (which the numpy emulator refuses): auto serves it by csim.
    ``note`` goes into the source as a comment: a project no cache has built yet."""
    source = _facile(repo, name) / "firmware" / "myproject.cpp"
    text = source.read_text()
    assert "nnet::relu<fc1_result_t" in text
    source.write_text(f"// {note}\n" + text.replace("nnet::relu<fc1_result_t", "nnet::relu1<fc1_result_t"))


def _python_model(repo: Path, name: str, code: str, config: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(code)
    (repo / name / "config.pbtxt").write_text(config)


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("stop_repo")
    _python_model(repo, "gate", GATE, GATE_CONFIG)
    _python_model(repo, "stream", STREAM, STREAM_CONFIG)
    _card_model(repo)
    _csim_model(repo)
    for target in ("card", "csim"):
        (repo / f"ens_{target}" / "1").mkdir(parents=True)
        (repo / f"ens_{target}" / "config.pbtxt").write_text(ENSEMBLE.format(name=f"ens_{target}", target=target))
    return repo


# ------------------------------------------------------------------------------ what is left
def _tagged(tag: str) -> list[str]:
    """The live processes whose environment carries ``tag`` (the server and all it started)."""
    found = []
    needle = f"{TAG_VAR}={tag}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
            found.append(f"{entry} {stat[stat.index('(') : stat.rindex(')') + 1]}")
    return found


class _Server:
    """A server in a session of its own (so that its group can be signalled), with its own
    temporary folder and a tag in its environment, and what /dev/shm held before it."""

    def __init__(self, repo: Path, tmp_path: Path, csim_cache: Path, *args: str, frontends: int = 1):
        self.tag = uuid.uuid4().hex
        self.control = tmp_path / "control"
        self.control.mkdir()
        # short: the server's Unix sockets live in it (108 bytes at most, and a worker's tmp_path
        # is longer than that allows)
        self.tmp = Path(tempfile.mkdtemp(prefix="stop-"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("FPGASERVE_SIM_")}
        env.update(
            {TAG_VAR: self.tag, CONTROL_VAR: str(self.control), "TMPDIR": str(self.tmp)},
            # the card stand-in's own builds (its C core) go where every run shares them, not
            # into the temporary folder whose emptiness tells that the server left nothing
            XDG_CACHE_HOME=os.environ.get("XDG_CACHE_HOME") or str(Path(tempfile.gettempdir()) / "fpgaserve-test-xdg"),
            FPGASERVE_CACHE_DIR=str(csim_cache),
            FPGASERVE_SIM_CARDS="1",
            FPGASERVE_SIM_CONTROL_DIR=str(tmp_path / "card"),
        )
        self.shm_before = set(os.listdir("/dev/shm"))
        options = ["--exit-timeout-secs", str(EXIT_TIMEOUT_S), "--frontend-processes", str(frontends), *args]
        self.proc = ServerProcess(
            [repo], *options, log_path=tmp_path / "server.log", env=env, entry=[SERVE], new_session=True
        )

    def release(self) -> None:
        (self.control / "release").touch()

    def started(self, *tags: int) -> bool:
        return all((self.control / f"started-{t}").exists() for t in tags)

    def http_refused(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.proc.http_port), timeout=5).close()
        except ConnectionRefusedError:
            return True
        return False

    def assert_nothing_left(self) -> None:
        assert _tagged(self.tag) == [], self.proc.log()
        # fpgaserve's segments are memfds (no name): a name in /dev/shm would be a leak. Other
        # programs of the machine name theirs meanwhile: the real Triton's Python stubs (other
        # tests run it) and Python's multiprocessing semaphores, neither of which fpgaserve uses
        new = {n for n in set(os.listdir("/dev/shm")) - self.shm_before if not n.startswith(FOREIGN_SHM)}
        assert new == set()
        assert [p.name for p in self.tmp.iterdir()] == []

    def stop(self) -> None:
        self.release()
        if self.proc.proc is not None and self.proc.proc.poll() is None:
            os.killpg(self.proc.proc.pid, signal.SIGKILL)
        self.proc.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


def _rows(*tags: int) -> np.ndarray:
    """One row per tag, the tag its first value (the gate's marker file is named by it)."""
    x = np.random.default_rng(sum(tags)).standard_normal((len(tags), FEATURES)).astype(np.float32)
    x[:, 0] = tags
    return x


def _grpc(client, model: str, x: np.ndarray, output: str):
    t = grpcclient.InferInput("input", list(x.shape), "FP32")
    t.set_data_from_numpy(x)
    return client.infer(model, [t], outputs=[grpcclient.InferRequestedOutput(output)], client_timeout=300).as_numpy(
        output
    )


def _http(url: str, model: str, x: np.ndarray, output: str):
    with httpclient.InferenceServerClient(url, network_timeout=300, connection_timeout=300) as client:
        t = httpclient.InferInput("input", list(x.shape), "FP32")
        t.set_data_from_numpy(x, binary_data=True)
        return client.infer(model, [t], outputs=[httpclient.InferRequestedOutput(output)]).as_numpy(output)


def _status(e: InferenceServerException) -> tuple[str, str]:
    return str(e.status()), e.message()


def _health_check(url: str) -> int:
    """grpc.health.v1.Health/Check (what grpc-health-probe and Kubernetes' gRPC probe call)."""
    from fpgaserve.protos import health

    with grpc.insecure_channel(url) as channel:
        check = channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=health.HealthCheckRequest.SerializeToString,
            response_deserializer=health.HealthCheckResponse.FromString,
        )
        return check(health.HealthCheckRequest(), timeout=30).status


# ------------------------------------------------------------------------------ the three ways
@pytest.mark.parametrize("mode", list(MODES))
def test_signal_drains_every_backend_then_exits_zero(mode, repo, tmp_path, csim_cache):
    send, frontends = MODES[mode]
    server = _Server(repo, tmp_path, csim_cache, frontends=frontends)
    server.proc.start(timeout=300)
    http_url = f"127.0.0.1:{server.proc.http_port}"
    try:
        with grpcclient.InferenceServerClient(server.proc.url) as client, ThreadPoolExecutor(6) as pool:
            # what the card and the C-simulation answer for the rows the ensembles will carry
            x_card, x_csim = _rows(11), _rows(12)
            want_card = _grpc(client, "card", x_card, "output/BiasAdd")
            want_csim = _grpc(client, "csim", x_csim, "output/BiasAdd")
            x1, x2 = _rows(1), _rows(2)
            in_flight = {
                "gate over gRPC": (pool.submit(_grpc, client, "gate", x1, "output"), x1),
                "gate over HTTP": (pool.submit(_http, http_url, "gate", x2, "output"), x2),
                "ensemble to the card": (pool.submit(_grpc, client, "ens_card", x_card, "output"), want_card),
                "ensemble to the C-simulation": (pool.submit(_grpc, client, "ens_csim", x_csim, "output"), want_csim),
            }
            responses: queue.Queue = queue.Queue()
            stream = grpcclient.InferenceServerClient(server.proc.url)
            stream.start_stream(callback=lambda result, error: responses.put((result, error)))
            t = grpcclient.InferInput("X", [1], "INT32")
            t.set_data_from_numpy(np.array([21], dtype=np.int32))
            stream.async_stream_infer("stream", [t])
            first, error = responses.get(timeout=120)
            assert error is None, error
            assert first.as_numpy("Y").tolist() == [21]
            wait_until(lambda: server.started(1, 2, 11, 12), "every gate request to execute", timeout=120)
            # a second connection, opened before the stop: new requests on it are refused
            later = grpcclient.InferenceServerClient(server.proc.url)
            assert later.is_server_live()

            send(server.proc.proc.pid)

            # draining: a new HTTP connection is refused (Triton's HTTP service stops first) ...
            wait_until(server.http_refused, "the HTTP port to refuse new connections", timeout=60)
            # ... health answers as Triton 2.51's core does once it is exiting ...
            with pytest.raises(InferenceServerException) as e:
                later.is_server_live()
            assert _status(e.value) == ("StatusCode.UNAVAILABLE", "Server exiting")
            with pytest.raises(InferenceServerException) as e:
                later.is_server_ready()
            assert _status(e.value) == ("StatusCode.UNAVAILABLE", "Server exiting")
            with pytest.raises(InferenceServerException) as e:
                later.is_model_ready("gate")
            assert _status(e.value) == ("StatusCode.UNAVAILABLE", "Server not ready")
            with pytest.raises(grpc.RpcError) as rpc:
                _health_check(server.proc.url)
            assert (rpc.value.code(), rpc.value.details()) == (grpc.StatusCode.UNAVAILABLE, "Server exiting")
            # ... and a new request is refused as Triton's gRPC frontend refuses it
            with pytest.raises(InferenceServerException) as e:
                _grpc(later, "card", x_card, "output/BiasAdd")
            assert _status(e.value) == ("StatusCode.UNAVAILABLE", SHUTTING_DOWN)
            later.close()

            server.release()
            for what, (future, want) in in_flight.items():
                got = future.result(timeout=300)
                assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), what
            final, error = responses.get(timeout=120)
            assert error is None, error
            assert final.as_numpy("Y").tolist() == [22]
            stream.stop_stream(cancel_requests=True)
            stream.close()

        # the wait's bound only catches a hang; past the exit timeout the status would be 1
        assert server.proc.wait(timeout=EXIT_TIMEOUT_S + 60) == 0, server.proc.log()
        log = server.proc.log()
        assert f"Signal ({signal.SIGINT if mode == 'ctrl_c' else signal.SIGTERM:d}) received." in log
        # no instance process died of the signal meant for the server
        assert "restarting its process" not in log, log
        server.assert_nothing_left()
    finally:
        server.stop()


# ------------------------------------------------------------------------------ the edges
def test_second_signal_stops_at_once(repo, tmp_path, csim_cache):
    """Triton 2.51 ignores a second signal and drains on; here it means "now": the server exits
    at once with status 1, the request in flight fails, the instance processes end with it."""
    only_python = tmp_path / "repo"
    shutil.copytree(repo / "gate", only_python / "gate")
    server = _Server(only_python, tmp_path, csim_cache, frontends=2)
    server.proc.start(timeout=120)
    try:
        with grpcclient.InferenceServerClient(server.proc.url) as client, ThreadPoolExecutor(1) as pool:
            future = pool.submit(_grpc, client, "gate", _rows(5), "output")
            wait_until(lambda: server.started(5), "the gate request to execute", timeout=60)
            pid = server.proc.proc.pid
            os.kill(pid, signal.SIGTERM)
            wait_until(server.http_refused, "the drain to begin", timeout=60)
            os.killpg(pid, signal.SIGINT)
            assert server.proc.wait(timeout=60) == 1, server.proc.log()
            with pytest.raises(InferenceServerException):
                future.result(timeout=60)
        assert "a second signal was received. Exiting immediately." in server.proc.log()
        # its instance and frontend processes end with it (their lifelines, the parent-death signal)
        wait_until(lambda: not _tagged(server.tag), "the server's processes to end", timeout=60)
        server.assert_nothing_left()
    finally:
        server.stop()


def test_stop_during_a_compile_kills_the_compiler(tmp_path, csim_cache):
    """A load compiling a C-simulation when the server is told to stop is abandoned: its g++ is
    killed (it runs in a session of its own, which no signal to the server reaches), the load
    fails saying why, the server exits 0 and no compiler is left."""
    repo = tmp_path / "repo"
    _csim_model(repo, "fresh", note=uuid.uuid4().hex)  # in no cache: it compiles
    server = _Server(repo, tmp_path, csim_cache, "--model-control-mode", "explicit")
    server.proc.start(timeout=120)
    try:
        with ThreadPoolExecutor(1) as pool:
            load = pool.submit(_load, server.proc.url, "fresh")

            def compiling() -> bool:
                return any("(cc1plus)" in p or "(g++)" in p for p in _tagged(server.tag))

            wait_until(compiling, "the compile to start", timeout=120)
            os.killpg(server.proc.proc.pid, signal.SIGTERM)
            with pytest.raises(InferenceServerException) as e:
                load.result(timeout=120)
        assert "was abandoned: the server is stopping" in e.value.message()
        assert server.proc.wait(timeout=EXIT_TIMEOUT_S + 60) == 0, server.proc.log()
        server.assert_nothing_left()
        assert [p.name for p in csim_cache.rglob("build-*")] == []  # the build folder went too
    finally:
        server.stop()


def _load(url: str, model: str) -> None:
    with grpcclient.InferenceServerClient(url) as client:
        client.load_model(model, client_timeout=300)
