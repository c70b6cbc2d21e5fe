"""``deploy/supersonic/values.yaml``: the values file that plugs fpgaserve into SuperSONIC's chart.

No Kubernetes here, so what can be checked without one is checked for real:

* the file parses, uses the chart's (0.3.1) key names and types (the chart's schema wants
  ``resources.limits.cpu`` as an integer), requests the FPGA card under a name of the device
  plugin's scheme, as much in requests as in limits, and mounts the repository where the
  server reads it;
* ``triton.command`` + ``triton.args`` are run as the pod runs them (``tini -- /bin/sh -c <script>``,
  Debian's tini installed for the test as the image has it),
  with ``/opt/tritonserver/bin/tritonserver`` being fpgaserve installed under that name (as
  in the image). Changed for this machine only: the ports (free loopback ports instead of
  8000-8002), the repository (bitstreams/ for /models) and ``fpga-mode=hardware`` ->
  ``numpy`` (no card here). The server must accept every flag, become ready, serve, and
  export the emulated device the dashboard counts;
* the chart's readiness probe command passes against it, and fails once the shutdown file
  exists;
* tini is PID 1 and the script ``exec``s the server as tini's child, so the pod's SIGTERM
  reaches the server, which drains and exits 0 (tini exits with its status);
* the values the chart's templates check against the release name carry the one in the
  header's ``helm install`` line, and the startup probe outlasts a bounded csim compile.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import yaml

from support.debian import require_packages
from support.server_process import BUNDLED_REPO, ROOT, free_port

VALUES = ROOT / "deploy" / "supersonic" / "values.yaml"
TRITONSERVER = "/opt/tritonserver/bin/tritonserver"
# triton.service.ports of the chart (its defaults, which the values keep): the probes, Envoy
# and the chart's Prometheus job (container port 8002) use these numbers
CHART_PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002}
# the Xilinx/AMD FPGA device plugin's resource names: amd.com/<VBNV>-<timestamp>, or before
# 2022 xilinx.com/fpga-<VBNV>-<timestamp>
FPGA_RESOURCE = re.compile(r"^(amd\.com/|xilinx\.com/fpga-)[a-z0-9_]+-[0-9]+$")


@pytest.fixture(scope="module")
def values() -> dict:
    return yaml.safe_load(VALUES.read_text())


def server_argv(script: str) -> list[str]:
    """The command the script execs (line continuations joined), as the shell would split it."""
    joined = script.replace("\\\n", " ")
    execs = [line.strip()[len("exec ") :] for line in joined.splitlines() if line.strip().startswith("exec ")]
    assert len(execs) == 1, f"the script must exec the server exactly once:\n{script}"
    return shlex.split(execs[0])


def test_values_fit_the_chart(values):
    triton = values["triton"]
    assert triton["image"] == "localhost/fpgaserve:latest"
    # tini as PID 1 (reaps csim's g++ orphans, forwards SIGTERM), then the shell that execs the server
    assert triton["command"] == ["/usr/bin/tini", "--", "/bin/sh", "-c"]
    assert isinstance(triton["args"], list) and len(triton["args"]) == 1 and isinstance(triton["args"][0], str)
    argv = server_argv(triton["args"][0])
    assert argv[0] == TRITONSERVER

    from fpgaserve.server.cli import build_parser

    args = build_parser("tritonserver").parse_args(argv[1:])  # every flag is one tritonserver has
    assert (args.http_port, args.grpc_port, args.metrics_port) == (8000, 8001, 8002)
    assert args.model_repository == [triton["modelRepository"]["mountPath"]]
    assert args.exit_on_error and args.exit_timeout_secs < 60  # drained within the pod's 60 s grace period

    resources = triton["resources"]
    for kind in ("limits", "requests"):
        assert isinstance(resources[kind]["cpu"], int), "the chart's schema wants an integer cpu"
        assert isinstance(resources[kind]["memory"], str)
    fpga = [k for k in resources["limits"] if "/" in k]
    assert len(fpga) == 1 and FPGA_RESOURCE.match(fpga[0]), fpga
    assert (
        resources["limits"][fpga[0]] == resources["requests"][fpga[0]] == 1
    )  # extended resources are not overcommitted

    repo = triton["modelRepository"]
    assert repo["enabled"] is True and repo["storageType"] in ("pvc", "cvmfs-pvc", "nfs")
    assert values["envoy"]["loadBalancerPolicy"] == "LEAST_REQUEST"
    assert values["envoy"]["rate_limiter"]["prometheus_based"]["enabled"] is True
    assert values["keda"]["enabled"] is True and values["prometheus"]["enabled"] is True
    # the chart's default load metric (serverLoadMetric "" selects it) and a numeric threshold
    assert values["serverLoadMetric"] == "" and isinstance(values["serverLoadThreshold"], int)


def test_values_carry_the_release_name_the_chart_checks(values):
    """Chart 0.3.1 ``fail``s at render time unless these four names carry the release's name."""
    release = re.search(r"^#\s+helm install (\S+) ", VALUES.read_text(), re.MULTILINE).group(1)
    prometheus = values["prometheus"]
    assert prometheus["server"]["useExistingClusterRoleName"] == f"{release}-prometheus-role"
    assert prometheus["serviceAccounts"]["server"]["name"] == f"{release}-prometheus-sa"
    # left to the chart's defaults, which hold the release name "supersonic": not overridden here
    grafana = values["grafana"]
    assert "dashboardsConfigMaps" not in grafana and "datasources" not in grafana
    assert release == "supersonic"


def test_startup_probe_outlasts_a_bounded_csim_compile(values):
    from fpgaserve.backends.hls4ml.csim import DEFAULT_COMPILE_TIMEOUT_S

    probe = values["triton"]["startupProbe"]
    window = probe.get("periodSeconds", 10) * probe["failureThreshold"]  # the chart's period: 10 s
    assert window > DEFAULT_COMPILE_TIMEOUT_S, (window, DEFAULT_COMPILE_TIMEOUT_S)


class PodServer:
    """triton.command + triton.args run by tini and /bin/sh, as the pod runs them."""

    def __init__(self, values: dict, tmp: Path):
        self.ports = {name: free_port() for name in CHART_PORTS}
        self.shutdown_file = tmp / "shutdown"
        bindir = tmp / "bin"
        bindir.mkdir()
        # the image's /opt/tritonserver/bin/tritonserver is fpgaserve under that name
        fpgaserve = Path(sys.executable).with_name("fpgaserve")
        assert fpgaserve.exists(), f"{fpgaserve}: install the project (pip install -e .)"
        (bindir / "tritonserver").symlink_to(fpgaserve)
        script = values["triton"]["args"][0]
        mount = values["triton"]["modelRepository"]["mountPath"]
        swaps = [
            (TRITONSERVER, str(bindir / "tritonserver")),
            (f"--model-repository={mount}", f"--model-repository={BUNDLED_REPO}"),
            ("fpga-mode=hardware", "fpga-mode=numpy"),
        ] + [(f"--{name}-port={port}", f"--{name}-port={self.ports[name]}") for name, port in CHART_PORTS.items()]
        for old, new in swaps:
            assert script.count(old) == 1, f"{old!r} not in the script once:\n{script}"
            script = script.replace(old, new)
        # loopback only, on a test machine (appended to the exec'd command line)
        self.script = (
            script.rstrip() + " --grpc-address=127.0.0.1 --http-address=127.0.0.1 --metrics-address=127.0.0.1\n"
        )
        self.log_path = tmp / "pod.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115  (closed in stop())
        self.proc = subprocess.Popen(
            values["triton"]["command"] + [self.script],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=dict(os.environ),
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def http(self, path: str, port: str = "http") -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ports[port]}{path}", timeout=5) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    def wait_ready(self, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"the server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if self.http("/v2/health/ready") == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        pytest.fail(f"not ready within {timeout} s:\n{self.log()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


@pytest.fixture(scope="module")
def pod(values, tmp_path_factory):
    require_packages("tini")
    server = PodServer(values, tmp_path_factory.mktemp("supersonic-pod"))
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@pytest.mark.timeout(300)
def test_args_start_a_server_that_serves(pod):
    import tritonclient.grpc as grpcclient

    assert pod.http("/v2/health/live") == 200
    with grpcclient.InferenceServerClient(f"127.0.0.1:{pod.ports['grpc']}") as client:
        assert client.get_server_metadata().name == "triton"
        x = grpcclient.InferInput("input", [8, 47], "FP32")
        x.set_data_from_numpy(np.ones((8, 47), dtype=np.float32))
        assert client.infer("facile", [x]).as_numpy("output/BiasAdd").shape == (8, 1)
    with urllib.request.urlopen(f"http://127.0.0.1:{pod.ports['metrics']}/metrics", timeout=10) as r:
        text = r.read().decode()
    # what the dashboard's "Number of Triton Servers" panel counts, and the load metric's inputs
    assert re.search(r'^nv_gpu_utilization\{gpu_uuid="EMU-0-numpy"\} [0-9.]+$', text, re.MULTILINE), text[-2000:]
    for name in ("nv_inference_queue_duration_us", "nv_inference_exec_count"):
        assert re.search(rf'^{name}\{{model="facile",version="1"\}} ', text, re.MULTILINE), name
    assert "is accepted for tritonserver compatibility and ignored" not in pod.log()  # every flag has its effect


@pytest.mark.timeout(60)
def test_chart_readiness_probe_passes(pod, values):
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed here (the image has it)")
    command = list(values["triton"].get("readinessProbe", {}).get("command") or [])
    if not command:  # the values keep the chart's probe: its command, chart 0.3.1
        command = [
            "/bin/sh",
            "-c",
            "curl -sf http://localhost:8000/v2/health/ready > /dev/null && [ ! -f /tmp/shutdown ]",
        ]
    script = command[-1].replace("localhost:8000", f"127.0.0.1:{pod.ports['http']}")
    script = script.replace("/tmp/shutdown", str(pod.shutdown_file))
    probe = command[:-1] + [script]
    assert subprocess.run(probe, check=False, timeout=30).returncode == 0
    pod.shutdown_file.touch()  # what the chart's preStop hook means to do before SIGTERM
    assert subprocess.run(probe, check=False, timeout=30).returncode != 0


@pytest.mark.timeout(120)
def test_sigterm_reaches_the_server(pod):
    """tini (the pod's PID 1) runs the server as its child (the shell ``exec``ed it) and passes
    Kubernetes' SIGTERM on: the server drains and tini exits with its status."""
    cmdline = Path(f"/proc/{pod.proc.pid}/cmdline").read_bytes().split(b"\0")
    assert cmdline[0] == b"/usr/bin/tini", cmdline
    children = Path(f"/proc/{pod.proc.pid}/task/{pod.proc.pid}/children").read_text().split()
    assert len(children) == 1, children
    child = Path(f"/proc/{children[0]}/cmdline").read_bytes().split(b"\0")
    assert any(part.endswith(b"tritonserver") for part in child), child  # not /bin/sh
    pod.proc.send_signal(signal.SIGTERM)
    assert pod.proc.wait(timeout=90) == 0, pod.log()
