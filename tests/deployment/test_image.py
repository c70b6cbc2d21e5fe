"""The OCI image (deploy/Containerfile, built by deploy/build-image.sh) run with real podman.

One image build per session: ``deploy/build-image.sh`` runs ``podman build -f
deploy/Containerfile`` with a stock Debian base (``debootstrap --variant=minbase bookworm``,
what debian:bookworm-slim holds, made once and reused) as BASE_IMAGE; the Containerfile's apt
and hash-locked pip steps install the rest, and podman's layer cache makes an unchanged
rebuild take seconds. Every podman command uses the environment of ``deploy/podman-env.sh``,
as the build does. The module skips, saying why, where podman cannot be installed or cannot
run a container.

What is checked, each against containers of the image, from outside (host ports, tritonclient):

* it serves the bundled repository (bitstreams/) at /models by default: results bit for bit
  equal to the ap_fixed emulation of the firmware, metrics reachable;
* `tritonserver` on PATH and /opt/tritonserver/bin/tritonserver are fpgaserve, and
  SuperSONIC's readiness probe (`/bin/sh -c "curl -sf http://localhost:8000/v2/health/ready"`)
  passes inside;
* `podman stop` (SIGTERM through tini) drains the server, which exits 0;
* CMSSW's fallback launcher, cmsTriton: its podman command line as it is, a repository edited
  as its ``-I N`` edits one, readiness found the way it looks for it (the log line
  ``Started GRPCInferenceService``), then a SonicTriton-like client through system shared
  memory (``--ipc=host``), as SonicTriton's local fallback uses it;
* a port already taken: the log says ``Address already in use`` (cmsTriton's cue to retry
  with other ports) and the container exits non-zero;
* the venv holds exactly deploy/requirements.lock's pins (and fpgaserve);
* a read-only container (``--read-only``, as a SIF is) uses the bundled models' compiled
  C-simulations and compiles a model that needs one into a writable per-user directory;
* deploy/fpgaserve.def's runscript and startscript (apptainer itself is not installable here:
  they run in the image under /bin/sh, as apptainer runs them): the server under tini, with
  the host's PYTHONPATH/LD_LIBRARY_PATH (cmsenv's) and everything else not allowed dropped.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from support.client_examples import assert_pass, run_example
from support.debian import require_packages
from support.server_process import BUNDLED_REPO, CONFORMANCE_REPO, ROOT, free_port

# Building the image from scratch (debootstrap, apt, pip) takes minutes; it happens in the first
# test's setup.
pytestmark = pytest.mark.timeout(1800)

DEPLOY = ROOT / "deploy"
IMAGE = "localhost/fpgaserve:latest"
BASE_IMAGE = "localhost/debian-minbase:bookworm"  # build-image.sh's default base
DEF_FILE = DEPLOY / "fpgaserve.def"
STARTED = "Started GRPCInferenceService"  # what tritonserver prints and cmsTriton waits for
IN_USE = "Address already in use"  # what makes cmsTriton retry with other ports
# name -> (input, output, features, outputs) of the bundled models
MODELS = {"facile": ("input", "output/BiasAdd", 47, 1), "jet_tagger": ("input", "output", 16, 5)}


# ------------------------------------------------------------------------------- podman
class Podman:
    """podman with the project's configuration (deploy/podman-env.sh), and the containers
    this session started, removed at the end whatever happened."""

    def __init__(self, env: dict[str, str], image: str):
        self.env = env
        self.image = image
        self.containers: list[str] = []

    def __call__(self, *args: str, timeout: float = 120, check: bool = False) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            ["podman", *args], env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"podman {shlex.join(args)} failed ({proc.returncode}): {proc.stderr}{proc.stdout}")
        return proc

    def name(self, what: str) -> str:
        name = f"fpgaserve-test-{what}-{uuid.uuid4().hex[:8]}"
        self.containers.append(name)  # removed by remove_all even if `run` fails half-way
        return name

    def run_detached(self, name: str, *args: str) -> subprocess.CompletedProcess:
        return self("run", "-d", "--name", name, *args)

    def logs(self, name: str) -> str:
        proc = self("logs", name)
        return proc.stdout + proc.stderr  # the server logs to stderr, as tritonserver does

    def state(self, name: str) -> tuple[str, int]:
        proc = self("inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", name, check=True)
        status, code = proc.stdout.split()
        return status, int(code)

    def wait_exit(self, name: str, timeout: float = 120) -> int:
        proc = self("wait", name, timeout=timeout, check=True)
        return int(proc.stdout.strip().splitlines()[-1])

    def wait_log(self, name: str, text: str, timeout: float = 300) -> str:
        """Poll `podman logs` for ``text``, as cmsTriton does (it waits up to 300 s)."""
        deadline = time.monotonic() + timeout
        while True:
            log = self.logs(name)
            if text in log:
                return log
            status, code = self.state(name)
            if status not in ("running", "created", "configured"):
                raise AssertionError(f"container {name} is {status} (exit {code}) before logging {text!r}:\n{log}")
            if time.monotonic() > deadline:
                raise AssertionError(f"container {name} did not log {text!r} within {timeout} s:\n{log}")
            time.sleep(0.5)

    def remove(self, name: str) -> None:
        self("rm", "-f", "-t", "0", name, timeout=60)

    def remove_all(self) -> None:
        for name in self.containers:
            self.remove(name)
        self.containers = []


def _podman_env() -> dict[str, str]:
    """The environment deploy/podman-env.sh prints (`export NAME='value'` lines)."""
    proc = subprocess.run([str(DEPLOY / "podman-env.sh")], capture_output=True, text=True, check=True)
    env = dict(os.environ)
    for line in proc.stdout.splitlines():
        words = shlex.split(line)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            key, value = words[1].split("=", 1)
            env[key] = value
    assert "CONTAINERS_CONF" in env and "CONTAINERS_STORAGE_CONF" in env, proc.stdout
    return env


@pytest.fixture(scope="session")
def podman():
    """The image, built once per session by deploy/build-image.sh (skips if podman cannot
    run a container here), and a podman that removes this session's containers at the end."""
    if os.geteuid() != 0:
        pytest.skip("deploy/build-image.sh needs root (apt-get, debootstrap, rootful podman)")
    require_packages("podman", "buildah", "debootstrap", "runc")
    build = subprocess.run(
        [str(DEPLOY / "build-image.sh"), IMAGE], capture_output=True, text=True, timeout=1700, check=False
    )
    lines = build.stdout.strip().splitlines()
    assert build.returncode == 0 and lines and lines[-1] == IMAGE, (
        f"deploy/build-image.sh failed ({build.returncode}):\n{build.stderr[-6000:]}\n{build.stdout[-2000:]}"
    )
    # the size, as the build measured it (podman image inspect), in the test's output
    size = re.search(rf"image {re.escape(IMAGE)} size: (\d+) bytes", build.stderr)
    assert size, build.stderr[-3000:]
    print(f"deploy/build-image.sh: {IMAGE} is {int(size.group(1)) / 1e6:.0f} MB")
    tool = Podman(_podman_env(), IMAGE)
    # built on the stock minbase (no packages of ours in the base: the Containerfile installs them)
    base = tool("image", "inspect", "--format", '{{index .Labels "org.fpgaserve.base"}}', BASE_IMAGE, check=True)
    assert base.stdout.strip() == "debootstrap --variant=minbase bookworm", base.stdout
    probe = tool("run", "--rm", IMAGE, "true")
    if probe.returncode != 0:
        pytest.skip(f"podman cannot run a container here: {probe.stderr.strip() or probe.stdout.strip()}")
    yield tool
    tool.remove_all()


# ------------------------------------------------------------------------------- helpers
def _http_status(port: int, path: str) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def _wait_ready(podman: Podman, name: str, http_port: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while _http_status(http_port, "/v2/health/ready") != 200:
        status, code = podman.state(name)
        if status != "running":
            raise AssertionError(f"container {name} is {status} (exit {code}):\n{podman.logs(name)}")
        if time.monotonic() > deadline:
            raise AssertionError(f"container {name} not ready within {timeout} s:\n{podman.logs(name)}")
        time.sleep(0.3)


def _free_port_block(count: int) -> int:
    """A base port B with B..B+count-1 all free on 127.0.0.1 (cmsTriton's B, B+1, B+2)."""
    for _ in range(200):
        base = free_port()
        if base + count > 65535:
            continue
        socks = []
        try:
            for p in range(base, base + count):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no {count} consecutive free ports")


def _reference(model: str, x: np.ndarray) -> np.ndarray:
    """The firmware's answer: fpgaserve's ap_fixed emulation of the bundled hls4ml project,
    in this process (bit-exact with the C-simulation the container runs; see
    test_hls4ml_serving)."""
    from fpgaserve.backends.hls4ml.emulator import FixedPointModel
    from fpgaserve.backends.hls4ml.project import Hls4mlProject

    return FixedPointModel(Hls4mlProject.load(BUNDLED_REPO / model / "1")).predict(x).astype(np.float32)


def _infer(url: str, model: str, x: np.ndarray) -> np.ndarray:
    inp, out, _, _ = MODELS[model]
    with grpcclient.InferenceServerClient(url) as client:
        t = grpcclient.InferInput(inp, list(x.shape), "FP32")
        t.set_data_from_numpy(x)
        return client.infer(model, [t], outputs=[grpcclient.InferRequestedOutput(out)]).as_numpy(out)


# ------------------------------------------------------------------------------- the default command
@pytest.fixture(scope="module")
def served(podman):
    """The image run with its default command (serve /models), ports published on loopback."""
    name = podman.name("default")
    ports = {"http": free_port(), "grpc": free_port(), "metrics": free_port()}
    proc = podman.run_detached(
        name,
        "-p",
        f"127.0.0.1:{ports['http']}:8000",
        "-p",
        f"127.0.0.1:{ports['grpc']}:8001",
        "-p",
        f"127.0.0.1:{ports['metrics']}:8002",
        podman.image,
    )
    assert proc.returncode == 0, proc.stderr
    _wait_ready(podman, name, ports["http"])
    yield name, ports
    podman.remove(name)


@pytest.mark.parametrize("model", sorted(MODELS))
def test_serves_bundled_models_from_outside(served, model):
    """No card in the container: --fpga-mode auto runs the numpy emulation (every layer of the
    bundled models is emulated), bit for bit the C-simulation's arithmetic, which is the reference."""
    _, ports = served
    _, _, features, outputs = MODELS[model]
    x = np.random.default_rng(features).standard_normal((3000, features), dtype=np.float32) * 3
    y = _infer(f"127.0.0.1:{ports['grpc']}", model, x)
    assert y.shape == (len(x), outputs) and y.dtype == np.float32
    want = _reference(model, x)
    differ = np.flatnonzero((y.view(np.uint32) != want.view(np.uint32)).any(axis=1))
    assert differ.size == 0, f"{model}: {differ.size} rows differ from the firmware, first {differ[0]}"


def test_metrics_published(served):
    _, ports = served
    with urllib.request.urlopen(f"http://127.0.0.1:{ports['metrics']}/metrics", timeout=5) as r:
        assert r.status == 200
        text = r.read().decode()
    assert 'nv_inference_count{model="facile",version="1"}' in text, text[:2000]


def test_tritonserver_is_fpgaserve(podman, served):
    name, _ = served
    proc = podman(
        "exec",
        name,
        "/bin/sh",
        "-c",
        'readlink -f /opt/tritonserver/bin/tritonserver; readlink -f "$(command -v tritonserver)"; command -v fpgaserve',
        check=True,
    )
    assert proc.stdout.split() == ["/opt/fpgaserve/bin/fpgaserve"] * 2 + ["/opt/fpgaserve/bin/fpgaserve"], proc.stdout
    help_text = podman("exec", name, "/opt/tritonserver/bin/tritonserver", "--help", check=True).stdout
    assert "--model-repository" in help_text and "--grpc-port" in help_text


def test_supersonic_readiness_probe(podman, served):
    name, _ = served
    # SuperSONIC's readinessProbe, as it runs it
    probe = "curl -sf http://localhost:8000/v2/health/ready && [ ! -f /tmp/shutdown ]"
    proc = podman("exec", name, "/bin/sh", "-c", probe)
    assert proc.returncode == 0, proc.stderr
    # and a probe that must fail does (curl -f on the 400 of an unknown model)
    proc = podman("exec", name, "curl", "-sf", "http://localhost:8000/v2/models/no_such_model/ready")
    assert proc.returncode != 0


def test_podman_stop_drains_and_exits_zero(podman):
    name = podman.name("stop")
    http = free_port()
    assert podman.run_detached(name, "-p", f"127.0.0.1:{http}:8000", podman.image).returncode == 0
    _wait_ready(podman, name, http)
    # a generous kill timeout: exit code 137 would mean SIGTERM did not reach the server
    podman("stop", "-t", "60", name, timeout=120, check=True)
    status, code = podman.state(name)
    log = podman.logs(name)
    assert (status, code) == ("exited", 0), log
    assert "Signal (15) received." in log and "Waiting for in-flight requests to complete" in log, log
    assert "server stopped" in log, log


# ------------------------------------------------------------------------------- cmsTriton
def cmstriton_edit_model(model_dir: Path, instances: int) -> None:
    """What cmsTriton's ``edit_model`` appends to a copied config.pbtxt for ``-I N``
    (HeterogeneousCore/SonicTriton/scripts/cmsTriton): an instance group of N CPU
    instances, and for ONNX (TensorFlow) models one intra/inter-op thread each. The
    platform is the first line starting with ``platform:``; a config without one (a
    ``backend:`` config, as hls4ml's) gets the instance group only (cmsTriton warns
    "thread (instance) control not implemented")."""
    config = model_dir / "config.pbtxt"
    text = config.read_text()
    platform = next((line for line in text.splitlines() if line.startswith("platform:")), "")
    text += f"instance_group [\n  {{\n    count: {instances}\n    kind: KIND_CPU\n  }}\n]\n\n"
    if "onnx" in platform:
        text += (
            'parameters { key: "intra_op_thread_count" value: { string_value: "1" } }\n'
            'parameters { key: "inter_op_thread_count" value: { string_value: "1" } }\n'
        )
    elif "tensorflow" in platform:
        text += (
            'parameters { key: "TF_NUM_INTRA_THREADS" value: { string_value: "1" } }\n'
            'parameters { key: "TF_NUM_INTER_THREADS" value: { string_value: "1" } }\n'
            'parameters { key: "TF_USE_PER_SESSION_THREADS" value: { string_value: "1" } }\n'
        )
    config.write_text(text)


INSTANCES = 2  # cmsTriton -I 2


@pytest.fixture(scope="module")
def cmstriton_repo(tmp_path_factory):
    """cmsTriton's local_model_repo: the bundled models (and Triton's ONNX `simple`, whose
    config gets the thread parameters too) copied and edited for ``-I 2``."""
    repo = tmp_path_factory.mktemp("triton_server_instance") / "local_model_repo"
    for src in [BUNDLED_REPO / "facile", BUNDLED_REPO / "jet_tagger", CONFORMANCE_REPO / "simple"]:
        shutil.copytree(src, repo / src.name)
        cmstriton_edit_model(repo / src.name, INSTANCES)
    return repo


# Where this host refuses cmsTriton's podman options, the closest accepted ones, found by
# trying the exact command first (each adjustment is printed and asserted to be one of these):
#  * podman refuses --shm-size with --ipc=host ("cannot set shmsize when running in the
#    {host } IPC Namespace"; docker ignores it): the option is dropped -- with the host's IPC
#    namespace the container uses the host's /dev/shm, whatever the size option says;
#  * any --ulimit replaces containers.conf's default_ulimits, and podman then sets nofile and
#    nproc to 1048576, above this host's hard limits (runc: "error setting rlimit type 7/6"):
#    the values podman-env.sh configures as default_ulimits are added;
#  * memlock=-1 (unlimited) is above this host's hard RLIMIT_MEMLOCK (8 MiB; "rlimit type 8"):
#    the hard limit instead. stack=67108864 is within the hard limit (unlimited) and stays.
_RLIMIT_NAMES = {"3": "stack", "6": "nproc", "7": "nofile", "8": "memlock"}


def _default_ulimits(env: dict[str, str]) -> dict[str, str]:
    """containers.conf's default_ulimits (podman-env.sh's): {"nofile": "20000:20000", ...}."""
    text = Path(env["CONTAINERS_CONF"]).read_text()
    found = re.search(r"^default_ulimits\s*=\s*\[(.*)\]", text, re.MULTILINE)
    items = re.findall(r'"(\w+)=([^"]+)"', found.group(1)) if found else []
    return dict(items)


def _hard_limit(kind: str) -> str:
    import resource

    which = {"stack": resource.RLIMIT_STACK, "memlock": resource.RLIMIT_MEMLOCK}[kind]
    hard = resource.getrlimit(which)[1]
    return "-1" if hard == resource.RLIM_INFINITY else f"{hard}:{hard}"


def _adjust(options: list[str], error: str, defaults: dict[str, str]) -> tuple[list[str], str] | None:
    """The options with the one thing podman refused replaced, or None if not recognised."""
    if "cannot set shmsize" in error and "--shm-size=1g" in options:
        return [o for o in options if o != "--shm-size=1g"], "dropped --shm-size=1g (refused with --ipc=host)"
    for number, kind in _RLIMIT_NAMES.items():
        if f"error setting rlimit type {number}:" not in error:
            continue
        if kind in ("nofile", "nproc"):
            if kind not in defaults or any(o.startswith(f"{kind}=") for o in options):
                return None
            value = defaults[kind]
            return [*options, "--ulimit", f"{kind}={value}"], f"added --ulimit {kind}={value} (podman-env.sh's default)"
        value = _hard_limit(kind)
        for i in range(len(options) - 1):
            if (
                options[i] == "--ulimit"
                and options[i + 1].startswith(f"{kind}=")
                and options[i + 1] != f"{kind}={value}"
            ):
                old = options[i + 1]
                new = [*options[: i + 1], f"{kind}={value}", *options[i + 2 :]]
                return new, f"--ulimit {old} -> {kind}={value} (the host's hard limit)"
    return None


@pytest.fixture(scope="module")
def cmstriton(podman, cmstriton_repo):
    """The container as ``cmsTriton -d -I 2 -m ... start`` starts it with DOCKER=podman:

        podman run -d --name N --shm-size=1g --ulimit memlock=-1 --ulimit stack=67108864
            --ipc=host --cap-add=IPC_OWNER -pB:B -pB+1:B+1 -pB+2:B+2 -vREPO:REPO
            IMAGE tritonserver --allow-client-shm=true --http-port=B --grpc-port=B+1 --metrics-port=B+2 --model-repository=REPO

    (ports published on 127.0.0.1 here), ready when `podman logs` shows the started line."""
    base = _free_port_block(3)
    repo = str(cmstriton_repo)
    options = [
        "--shm-size=1g",
        "--ulimit",
        "memlock=-1",
        "--ulimit",
        "stack=67108864",
        "--ipc=host",
        "--cap-add=IPC_OWNER",
        "-p",
        f"127.0.0.1:{base}:{base}",
        "-p",
        f"127.0.0.1:{base + 1}:{base + 1}",
        "-p",
        f"127.0.0.1:{base + 2}:{base + 2}",
        f"-v{repo}:{repo}",
    ]
    command = [
        podman.image,
        "tritonserver",
        "--allow-client-shm=true",
        f"--http-port={base}",
        f"--grpc-port={base + 1}",
        f"--metrics-port={base + 2}",
        f"--model-repository={repo}",
    ]
    adjustments = []
    for _ in range(6):
        name = podman.name("cmstriton")
        proc = podman.run_detached(name, *options, *command)
        if proc.returncode == 0:
            break
        podman.remove(name)  # created but not started (runc refused), or not created
        adjusted = _adjust(options, proc.stderr, _default_ulimits(podman.env))
        assert adjusted is not None, f"podman refused cmsTriton's command ({proc.returncode}): {proc.stderr}"
        options, what = adjusted
        adjustments.append(what)
    else:
        raise AssertionError(f"podman still refuses after {adjustments}: {proc.stderr}")
    print("cmsTriton's podman options adjusted for this host:", adjustments or "none")
    log = podman.wait_log(name, STARTED)
    assert IN_USE not in log, log
    yield name, base, adjustments
    podman.remove(name)


def test_cmstriton_exact_options_or_documented_adjustments(cmstriton):
    """The exact command was tried first; anything changed is one of the documented refusals."""
    _, _, adjustments = cmstriton
    allowed = ("dropped --shm-size=1g", "--ulimit memlock=-1 ->", "added --ulimit nofile=", "added --ulimit nproc=")
    assert all(a.startswith(allowed) for a in adjustments), adjustments


def test_cmstriton_sonic_like_client_with_system_shared_memory(cmstriton):
    _, base, _ = cmstriton
    # SonicTriton connects to 0.0.0.0:<port> (cmsTriton's CMS_TRITON_GRPC_PORT)
    proc = run_example("sonic_like.py", f"0.0.0.0:{base + 1}", "--shm", "--events", "3")
    stdout = assert_pass(proc, "sonic_like")
    assert "3 events" in stdout and "through system shared memory" in stdout, stdout
    assert "SystemSharedMemoryUnregister: 2 region(s)" in stdout, stdout
    # the objects the client created in the (shared) /dev/shm are gone
    objects = re.findall(r"\b\d+_(?:input|output)\d+\b", stdout)
    assert len(objects) >= 2, stdout
    assert not [o for o in objects if os.path.exists(f"/dev/shm/{o}")], objects
    # and nothing is left registered in the server
    with grpcclient.InferenceServerClient(f"127.0.0.1:{base + 1}") as client:
        assert not client.get_system_shared_memory_status().regions


def test_cmstriton_instance_edit_loads(cmstriton):
    """Configs edited as ``-I 2`` does load, with the instance group as written (after the
    model's own group, if it had one: protobuf text format appends repeated fields)."""
    from tritonclient.grpc import model_config_pb2 as mc

    _, base, _ = cmstriton
    cpu, model_kind = mc.ModelInstanceGroup.KIND_CPU, mc.ModelInstanceGroup.KIND_MODEL
    with grpcclient.InferenceServerClient(f"127.0.0.1:{base + 1}") as client:
        index = {m.name: m.state for m in client.get_model_repository_index().models}
        assert index == {"facile": "READY", "jet_tagger": "READY", "simple": "READY"}, index
        for model in ("facile", "jet_tagger"):
            config = client.get_model_config(model).config
            groups = [(g.count, g.kind) for g in config.instance_group]
            assert groups == [(1, model_kind), (INSTANCES, cpu)], (model, groups)
        simple = client.get_model_config("simple").config
        assert [(g.count, g.kind) for g in simple.instance_group] == [(INSTANCES, cpu)]
        params = {k: v.string_value for k, v in simple.parameters.items()}
        assert params == {"intra_op_thread_count": "1", "inter_op_thread_count": "1"}, params
        # and they serve
        x = np.arange(16, dtype=np.int32).reshape(1, 16)
        inputs = []
        for n in ("INPUT0", "INPUT1"):
            t = grpcclient.InferInput(n, [1, 16], "INT32")
            t.set_data_from_numpy(x)
            inputs.append(t)
        result = client.infer("simple", inputs)
        assert np.array_equal(result.as_numpy("OUTPUT0"), x + x)
        assert np.array_equal(result.as_numpy("OUTPUT1"), x - x)
    xj = np.random.default_rng(1).standard_normal((500, 16), dtype=np.float32)
    assert np.array_equal(_infer(f"127.0.0.1:{base + 1}", "jet_tagger", xj), _reference("jet_tagger", xj))


# ------------------------------------------------------------------------------- a taken port
@pytest.mark.parametrize("taken", ["grpc", "http", "metrics"])
def test_taken_port_says_address_already_in_use(podman, taken):
    """cmsTriton retries on other ports when the log says ``Address already in use``; the
    container must say it and exit non-zero (and, for the gRPC port, never claim it started)."""
    ports = {"http": free_port(), "grpc": free_port(), "metrics": free_port()}
    blocker = socket.socket()
    try:
        blocker.bind(("127.0.0.1", ports[taken]))  # no SO_REUSEPORT: nobody else may bind it
        blocker.listen()
        name = podman.name(f"taken-{taken}")
        proc = podman.run_detached(
            name,
            "--network",
            "host",
            podman.image,
            "tritonserver",
            f"--http-port={ports['http']}",
            f"--grpc-port={ports['grpc']}",
            f"--metrics-port={ports['metrics']}",
            "--http-address=127.0.0.1",
            "--grpc-address=127.0.0.1",
            "--metrics-address=127.0.0.1",
            "--model-repository=/models",
        )
        assert proc.returncode == 0, proc.stderr
        code = podman.wait_exit(name)
        log = podman.logs(name)
    finally:
        blocker.close()
    assert code != 0, log
    assert IN_USE in log, log
    if taken == "grpc":
        assert STARTED not in log, log
    podman.remove(name)


# ------------------------------------------------------------------------------- the venv is the lock
def test_venv_holds_the_locked_packages(podman):
    """What pip installed under --require-hashes is the lock, nothing more or less."""
    pins = dict(
        re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", (DEPLOY / "requirements.lock").read_text(), re.MULTILINE)
    )
    script = "import importlib.metadata as m, json; print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
    proc = podman("run", "--rm", podman.image, "python", "-c", script, check=True)
    installed = json.loads(proc.stdout.strip().splitlines()[-1])

    def norm(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    assert "fpgaserve" in installed, installed  # the wheel built from this tree, beside the lock
    del installed["fpgaserve"]
    assert {norm(k): v for k, v in installed.items()} == {norm(k): v for k, v in pins.items()}


# ------------------------------------------------------------------------------- read-only
READ_ONLY_CSIM = """
import json, logging, shutil, sys
from pathlib import Path
import numpy as np
from fpgaserve.backends.hls4ml.csim import CsimLibrary
from fpgaserve.backends.hls4ml.project import Hls4mlProject
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
src, dst = Path("/models/facile/1"), Path("/tmp/facile_copy/1")
shutil.copytree(src, dst)
# another content hash (so no build in the image's cache), the same firmware
with open(dst / "firmware" / "myproject.cpp", "a") as f:
    f.write("\\n// a copy\\n")
x = np.random.default_rng(47).standard_normal((200, 47)).astype(np.float32) * 3
out = {}
for what, path in (("bundled", src), ("copy", dst)):
    lib = CsimLibrary.load(Hls4mlProject.load(path))
    out[what] = {"path": str(lib.path), "built": lib.built, "y": lib.predict(x).tolist()}
print(json.dumps(out))
"""


def test_read_only_container_compiles_into_a_writable_cache(podman):
    """A read-only image (as a SIF is): the bundled build is used from the image's cache, a
    model that needs a build compiles into the per-user temp dir, and both compute the
    firmware's arithmetic bit for bit."""
    proc = podman("run", "--rm", "--read-only", podman.image, "python", "-c", READ_ONLY_CSIM, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["bundled"]["path"].startswith("/var/cache/fpgaserve/csim/") and not out["bundled"]["built"]
    assert out["copy"]["path"].startswith("/tmp/fpgaserve-csim-0/") and out["copy"]["built"], out["copy"]["path"]
    assert proc.stderr.count("C-simulation build cache /var/cache/fpgaserve/csim is on a read-only file system") == 1
    x = np.random.default_rng(47).standard_normal((200, 47)).astype(np.float32) * 3
    from fpgaserve.backends.hls4ml.emulator import FixedPointModel
    from fpgaserve.backends.hls4ml.project import Hls4mlProject

    want = FixedPointModel(Hls4mlProject.load(BUNDLED_REPO / "facile" / "1")).predict(x)
    for what in ("bundled", "copy"):
        assert np.array_equal(np.asarray(out[what]["y"]), want), what


# ------------------------------------------------------------------------------- apptainer's scripts
def _def_section(name: str) -> str:
    """The body of one %section of deploy/fpgaserve.def (what apptainer writes as the script)."""
    found = re.search(rf"^%{name}\n(.*?)(?=^%\w+|\Z)", DEF_FILE.read_text(), re.MULTILINE | re.DOTALL)
    assert found, f"no %{name} in {DEF_FILE}"
    return found.group(1)


# what the server process sees: its environment, sys.path and its parent
PROBE = (
    "import json, os, sys; print(json.dumps({'env': dict(os.environ), 'path': sys.path, "
    "'parent': open(f'/proc/{os.getppid()}/comm').read().strip()}))"
)
# a host after cmsenv (CMSSW's Python and libraries), plus what the server may read
HOST_ENV = {
    "PYTHONPATH": "/cvmfs/cms.cern.ch/el9_amd64_gcc12/cms/cmssw/CMSSW_14_0_0/python",
    "LD_LIBRARY_PATH": "/cvmfs/cms.cern.ch/el9_amd64_gcc12/external/gcc/12/lib64",
    "PYTHONHOME": "/cvmfs/cms.cern.ch/el9_amd64_gcc12/external/python3/3.9.14",
    "CMSSW_BASE": "/home/user/CMSSW_14_0_0",
    "SRT_CMSSW_SEARCH_PATH_SCRAMRTDEL": "/x",
    "LANG": "C.UTF-8",
    "FPGASERVE_CSIM_COMPILE_TIMEOUT_S": "77",
    "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
    "FPGASERVE_PYTHONPATH": "/opt/xilinx/xrt/python",
    "TRICKY": "line one\nHOME=/not/a/variable",
}


def _apptainer_script(podman: Podman, script: str, *args: str) -> subprocess.CompletedProcess:
    """``script`` run by /bin/sh in the image with HOST_ENV set, as apptainer runs a .def's
    scripts (the runscript also at /.singularity.d/runscript, where the startscript finds it)."""
    setup = (
        'mkdir -p /.singularity.d && printf "%s\\n" "$RUNSCRIPT" >/.singularity.d/runscript'
        ' && chmod +x /.singularity.d/runscript && unset RUNSCRIPT && exec /bin/sh -c "$SCRIPT" apptainer "$@"'
    )
    env = [
        x
        for k, v in {**HOST_ENV, "RUNSCRIPT": "#!/bin/sh\n" + _def_section("runscript")}.items()
        for x in ("-e", f"{k}={v}")
    ]
    return podman(
        "run", "--rm", *env, "-e", f"SCRIPT={script}", "--entrypoint", "/bin/sh", podman.image, "-c", setup, "sh", *args
    )


def _probe(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("section", ["runscript", "startscript"])
def test_apptainer_scripts_run_the_server_under_tini_without_the_host_environment(podman, section):
    seen = _probe(_apptainer_script(podman, _def_section(section), "python", "-c", PROBE))
    env = seen["env"]
    assert seen["parent"] == "tini", seen["parent"]
    # the leakers gone (PYTHONPATH is the one asked for through FPGASERVE_PYTHONPATH)
    assert "LD_LIBRARY_PATH" not in env and "PYTHONHOME" not in env, env
    assert env["PYTHONPATH"] == "/opt/xilinx/xrt/python"
    assert not [p for p in seen["path"] if p.startswith("/cvmfs")], seen["path"]
    assert not [k for k in env if k.startswith(("CMSSW", "SRT_", "TRICKY", "SCRIPT", "RUNSCRIPT"))], env
    # what the server reads from the host kept, the image's PATH set
    assert env["FPGASERVE_CSIM_COMPILE_TIMEOUT_S"] == "77" and env["LANG"] == "C.UTF-8"
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://collector:4318"
    assert env["PATH"].startswith("/opt/fpgaserve/bin:") and env["PYTHONUNBUFFERED"] == "1"
    assert env["HOME"] != "/not/a/variable"


def test_apptainer_startscript_without_a_command_serves_nothing(podman):
    """cmsTriton starts the instance bare and runs the server with `apptainer run instance://`."""
    proc = _apptainer_script(podman, _def_section("startscript") + "\necho started-nothing\n")
    assert proc.returncode == 0 and proc.stdout.strip() == "started-nothing", proc.stdout + proc.stderr
