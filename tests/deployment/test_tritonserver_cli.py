"""``fpgaserve`` accepts the command lines that deployments write for ``tritonserver``.

SuperSONIC's values files, CMSSW's cmsTriton (docker/podman and apptainer forms) and Triton's
own documentation pass tritonserver flags; the image installs fpgaserve as ``tritonserver``.
Checked against real server processes on loopback:

* those exact command lines start a server that serves (``--x=v`` and ``--x v`` forms,
  repeatable ``--model-repository``, ``--disable-auto-complete-config`` without a value,
  ``127.0.01`` as cmsTriton has passed it);
* Triton's boolean spellings (true/on/1/false/off/0, any case); anything else is an error;
* each accepted-but-ignored Triton flag logs exactly one warning line naming it; an unknown
  flag is an error (non-zero exit, the flag named), as in tritonserver;
* a taken port logs ``Address already in use`` and exits non-zero (cmsTriton retries on
  other ports when it sees that text), for the gRPC and the HTTP port;
* the honoured switches do what Triton's do: ``--allow-client-shm=false`` (Triton's
  UNIMPLEMENTED text), ``--disable-auto-complete-config`` / ``--strict-model-config=true``,
  ``--allow-http/--allow-metrics=false``, ``--log-info=false``, ``--id``,
  ``--reuse-grpc-port=true`` (two servers on one port).
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from fpgaserve.server.cli import IGNORED_TRITON_FLAGS, build_parser, options_from_args
from support.server_process import CONFORMANCE_REPO, ServerProcess, free_port

SIMPLE = ["--model-control-mode=explicit", "--load-model=simple"]


def _simple_infer(url: str) -> None:
    client = grpcclient.InferenceServerClient(url)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"), grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(np.ones_like(a))
    result = client.infer("simple", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + 1)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - 1)
    client.close()


def _run_to_exit(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fpgaserve.server.cli", *args], capture_output=True, text=True, timeout=timeout
    )


# ----------------------------------------------------------------------------- parsing
def test_triton_booleans():
    parser = build_parser()
    base = ["--model-repository", "r"]
    for text, value in [("true", True), ("ON", True), ("1", True), ("False", False), ("off", False), ("0", False)]:
        assert parser.parse_args([*base, f"--allow-grpc={text}"]).allow_grpc is value
        assert parser.parse_args([*base, "--exit-on-error", text]).exit_on_error is value
    # --log-verbose is tritonserver's int-or-bool option
    assert parser.parse_args([*base, "--log-verbose=true"]).log_verbose == 1
    assert parser.parse_args([*base, "--log-verbose", "2"]).log_verbose == 2


@pytest.mark.parametrize("bad", ["--exit-on-error=yes", "--allow-http=2", "--log-info=", "--log-verbose=loud"])
def test_bad_values_are_errors(bad):
    proc = _run_to_exit(["--model-repository", str(CONFORMANCE_REPO), bad], timeout=60)
    assert proc.returncode != 0
    assert bad.split("=")[0] in proc.stderr


@pytest.mark.parametrize(
    "setting,message",
    [
        ("card-api=opencl", "hls4ml card-api 'opencl' (choose from auto, xrt-c, xrt, pynq)"),
        ("card-reset=maybe", "hls4ml card-reset 'maybe' (choose from auto, off)"),
        ("kernel-timeout-secs=0", "hls4ml kernel-timeout-secs must be a positive number of seconds, got '0'"),
        ("card-retry-secs=soon", "hls4ml card-retry-secs must be a positive number of seconds, got 'soon'"),
    ],
)
def test_bad_hls4ml_card_settings_are_errors(setting, message):
    from fpgaserve.server.cli import parse_backend_config

    with pytest.raises(SystemExit, match=re.escape(message)):
        parse_backend_config([f"hls4ml,{setting}"], None)
    assert parse_backend_config(["hls4ml,card-retry-secs=0", "hls4ml,card-api=xrt"], None)["hls4ml"] == {
        "card-retry-secs": "0",
        "card-api": "xrt",
    }


def test_unknown_flag_is_an_error():
    proc = _run_to_exit(["--model-repository", str(CONFORMANCE_REPO), "--no-such-triton-flag=1"], timeout=60)
    assert proc.returncode != 0
    assert "--no-such-triton-flag" in proc.stderr


def test_auto_complete_switches():
    parser = build_parser()
    base = ["--model-repository", "r"]
    assert options_from_args(parser.parse_args(base)).auto_complete_config is True
    assert options_from_args(parser.parse_args([*base, "--strict-model-config=false"])).auto_complete_config is True
    assert options_from_args(parser.parse_args([*base, "--strict-model-config", "true"])).auto_complete_config is False
    # tritonserver: --disable-auto-complete-config overrides --strict-model-config=false
    args = parser.parse_args([*base, "--strict-model-config=false", "--disable-auto-complete-config"])
    assert options_from_args(args).auto_complete_config is False


# ----------------------------------------------------------------------------- real command lines
def test_supersonic_command_line(tmp_path):
    """The args SuperSONIC's values files give tritonserver, both option forms."""
    second = tmp_path / "empty_repo"
    second.mkdir()
    log = tmp_path / "server.log"
    server = ServerProcess(
        [CONFORMANCE_REPO, second],
        "--log-verbose=0",
        "--log-error=true",
        "--exit-timeout-secs=60",
        "--exit-on-error=true",
        "--strict-model-config=false",
        "--allow-gpu-metrics=true",
        "--backend-config=onnxruntime,enable-global-threadpool=1",
        "--trace-config",
        "mode=opentelemetry",
        "--trace-config=opentelemetry,url=localhost:4318",
        *SIMPLE,
        log_path=log,
    )
    with server:
        _simple_infer(server.url)
    text = log.read_text()
    assert "Started GRPCInferenceService at 127.0.0.1:" in text
    # --trace-config is honoured now (tests/engine/test_tracing.py), not warned about as ignored
    assert "--trace-config is accepted" not in text


def test_cmstriton_command_line(tmp_path):
    """cmsTriton's container command (ports B, B+1, B+2, one --model-repository per model
    folder's parent, all four log switches), with the apptainer addresses as one fork wrote them."""
    base = free_port()
    while any(_port_taken(base + i) for i in range(3)):
        base = free_port()
    log = tmp_path / "server.log"
    args = [
        sys.executable,
        "-m",
        "fpgaserve.server.cli",
        f"--http-port={base}",
        f"--grpc-port={base + 1}",
        f"--metrics-port={base + 2}",
        "--http-address=127.0.01",
        "--grpc-address=127.0.01",
        "--metrics-address=127.0.01",
        f"--model-repository={CONFORMANCE_REPO}",
        "--allow-client-shm=true",
        "--log-verbose=1",
        "--log-error=1",
        "--log-warning=1",
        "--log-info=1",
        *SIMPLE,
    ]
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    try:
        # cmsTriton's readiness test: the log line, not a probe
        _wait_for(lambda: "Started GRPCInferenceService" in log.read_text(), proc, log)
        assert f"Started GRPCInferenceService at 127.0.01:{base + 1}" in log.read_text()
        _wait_for(lambda: _http_ok(f"http://127.0.0.1:{base}/v2/health/ready"), proc, log)
        _simple_infer(f"127.0.0.1:{base + 1}")
        assert _http_ok(f"http://127.0.0.1:{base + 2}/metrics")
    finally:
        proc.terminate()
        assert proc.wait(timeout=60) == 0


def _port_taken(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


def _wait_for(condition, proc, log, attempts: int = 1200) -> None:
    import time

    for _ in range(attempts):  # a hang guard, not a timing assertion
        if condition():
            return
        if proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode}: {log.read_text()[-3000:]}")
        time.sleep(0.1)
    raise AssertionError(f"condition never held: {log.read_text()[-3000:]}")


@pytest.mark.parametrize("which", ["grpc", "http"])
def test_taken_port_says_address_already_in_use(which):
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        ports = {"grpc": free_port(), "http": free_port(), "metrics": free_port()}
        ports[which] = taken
        proc = _run_to_exit(
            [
                f"--model-repository={CONFORMANCE_REPO}",
                *SIMPLE,
                f"--grpc-port={ports['grpc']}",
                f"--http-port={ports['http']}",
                f"--metrics-port={ports['metrics']}",
            ]
        )
    assert proc.returncode != 0
    assert "Address already in use" in proc.stderr
    assert f":{taken}" in proc.stderr


def test_each_ignored_flag_warns_once(tmp_path):
    log = tmp_path / "server.log"
    given = [
        "--cuda-memory-pool-byte-size=0:67108864",
        "--pinned-memory-pool-byte-size",
        "0",
        "--backend-directory=/opt/tritonserver/backends",
        "--model-load-thread-count=4",
        "--allow-sagemaker=false",
        "--cache-config",
        "local,size=1048576",
    ]
    with ServerProcess([CONFORMANCE_REPO], *SIMPLE, *given, log_path=log) as server:
        _simple_infer(server.url)
    text = log.read_text()
    for flag in (
        "--cuda-memory-pool-byte-size",
        "--pinned-memory-pool-byte-size",
        "--backend-directory",
        "--model-load-thread-count",
        "--allow-sagemaker",
        "--cache-config",
    ):
        assert flag in IGNORED_TRITON_FLAGS
        assert text.count(f"{flag} is accepted for tritonserver compatibility and ignored") == 1, flag
    assert "--trace-config is accepted" not in text


# ----------------------------------------------------------------------------- honoured switches
@pytest.mark.parametrize("flags", [(), ("--allow-client-shm=false",)], ids=["default", "false"])
def test_client_shm_is_refused_by_default_and_when_false(flags):
    """tritonserver >= 26.04 (2.68) refuses client shared memory unless started with
    --allow-client-shm=true; so does fpgaserve, with Triton's status and text."""
    server = ServerProcess([CONFORMANCE_REPO], *SIMPLE, *flags).start()
    try:
        client = grpcclient.InferenceServerClient(server.url)
        with pytest.raises(InferenceServerException) as e:
            client.register_system_shared_memory("r", "/fpgaserve_cli_test", 64)
        assert e.value.status() == "StatusCode.UNIMPLEMENTED"
        assert e.value.message() == (
            "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
        )
        with pytest.raises(InferenceServerException) as e:
            client.unregister_system_shared_memory()
        assert e.value.status() == "StatusCode.UNIMPLEMENTED"
        _simple_infer(server.url)  # everything else still serves
    finally:
        assert server.stop() == 0  # and it shuts down cleanly


@pytest.mark.parametrize("flag", ["--disable-auto-complete-config", "--strict-model-config=true"])
def test_disable_auto_complete_config(tmp_path, flag):
    repo = tmp_path / "repo"
    (repo / "auto_simple" / "1").mkdir(parents=True)
    shutil.copy(CONFORMANCE_REPO / "simple" / "1" / "model.onnx", repo / "auto_simple" / "1" / "model.onnx")
    (repo / "auto_simple" / "config.pbtxt").write_text(
        'name: "auto_simple"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
    )
    with ServerProcess([repo]) as server:  # completed from the ONNX graph by default
        client = grpcclient.InferenceServerClient(server.url)
        assert client.is_model_ready("auto_simple")
        assert [i.name for i in client.get_model_metadata("auto_simple").inputs] == ["INPUT0", "INPUT1"]
    with ServerProcess([repo], flag, "--strict-readiness=false") as server:
        client = grpcclient.InferenceServerClient(server.url)
        assert not client.is_model_ready("auto_simple")
        (entry,) = client.get_model_repository_index().models
        assert entry.state == "UNAVAILABLE"
        # loaded as written (no inputs), the ONNX Runtime backend refuses it as Triton's does
        assert "unable to load model 'auto_simple', configuration expects 0 inputs, model provides 2" in entry.reason


def test_allow_http_and_metrics_false(tmp_path):
    log = tmp_path / "server.log"
    server = ServerProcess([CONFORMANCE_REPO], *SIMPLE, "--allow-http=false", "--allow-metrics=false", log_path=log)
    with open(log, "wb") as out:  # the child keeps its own copy of the descriptor
        server.proc = subprocess.Popen(server.args, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_for(lambda: "Started GRPCInferenceService" in log.read_text(), server.proc, log)
        client = grpcclient.InferenceServerClient(server.url)
        _wait_for(client.is_server_ready, server.proc, log)
        _simple_infer(server.url)
        for port in (server.http_port, server.metrics_port):
            with pytest.raises(OSError):
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/live", timeout=5)
        text = log.read_text()
        assert "Started HTTPService" not in text and "Started Metrics Service" not in text
    finally:
        server.stop()


def test_log_info_false_keeps_warnings(tmp_path):
    log = tmp_path / "server.log"
    with ServerProcess([CONFORMANCE_REPO], *SIMPLE, "--log-info=false", "--cache-directory=/x", log_path=log) as server:
        _simple_infer(server.url)
    text = log.read_text()
    assert "Started GRPCInferenceService" not in text  # an info line, as in tritonserver
    assert "--cache-directory is accepted for tritonserver compatibility" in text


def test_server_id():
    with ServerProcess([CONFORMANCE_REPO], *SIMPLE, "--id=fpga-host-7") as server:
        assert grpcclient.InferenceServerClient(server.url).get_server_metadata().name == "fpga-host-7"
    with ServerProcess([CONFORMANCE_REPO], *SIMPLE) as server:
        assert grpcclient.InferenceServerClient(server.url).get_server_metadata().name == "triton"


def test_reuse_grpc_port_lets_two_servers_share_it(tmp_path):
    first = ServerProcess([CONFORMANCE_REPO], *SIMPLE, "--reuse-grpc-port=true", log_path=tmp_path / "a.log")
    second = ServerProcess([CONFORMANCE_REPO], *SIMPLE, "--reuse-grpc-port=true", log_path=tmp_path / "b.log")
    second.grpc_port = first.grpc_port
    with first, second:
        for _ in range(4):  # new connections land on either; both answer correctly
            _simple_infer(first.url)


def test_docs_list_every_ignored_flag():
    """The documented flags are the user's contract: the command-line page the docs site
    generates (docs/hooks/cli_reference.py) lists every accepted-and-ignored flag, with its reason."""
    import importlib.util

    from support.server_process import ROOT

    spec = importlib.util.spec_from_file_location("cli_reference", ROOT / "docs" / "hooks" / "cli_reference.py")
    assert spec is not None and spec.loader is not None
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    rows = {line.split("`")[1].split(" ")[0]: line for line in hook.render().splitlines() if line.startswith("| `")}
    for flag, (_, why) in IGNORED_TRITON_FLAGS.items():
        assert flag in rows, flag
        assert why in rows[flag], (flag, rows[flag])


@pytest.mark.parametrize("gpu,cpu", [("true", "true"), ("false", "true"), ("true", "off"), ("0", "0")])
def test_allow_gpu_and_cpu_metrics(gpu, cpu):
    """The bundled hls4ml models in numpy mode run on an emulated device (EMU-0-numpy): its
    fpga_*/nv_gpu_* families follow --allow-gpu-metrics, the host's nv_cpu_* --allow-cpu-metrics;
    the inference families are always there."""
    from support.server_process import BUNDLED_REPO

    with ServerProcess(
        [BUNDLED_REPO], "--fpga-mode=numpy", f"--allow-gpu-metrics={gpu}", f"--allow-cpu-metrics={cpu}"
    ) as server:
        client = grpcclient.InferenceServerClient(server.url)
        model = client.get_model_repository_index().models[0].name
        meta = client.get_model_metadata(model)
        x = grpcclient.InferInput(meta.inputs[0].name, [4, *[int(d) for d in meta.inputs[0].shape[1:]]], "FP32")
        x.set_data_from_numpy(np.zeros(x.shape(), dtype=np.float32))
        client.infer(model, [x])
        with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10) as r:
            text = r.read().decode()
    samples = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}
    assert "nv_inference_count" in samples
    assert ("nv_gpu_utilization" in samples) is (gpu == "true")
    assert ("fpga_device_info" in samples) is (gpu == "true")
    assert ("nv_cpu_utilization" in samples) is (cpu == "true")
