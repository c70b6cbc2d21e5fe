"""A taken port fails the start as tritonserver's does, and ``auto`` counts the CPUs a process
may use (affinity mask, cgroup quota), not the host's.

* Two real fpgaserve servers: the second is started on a port the first serves (gRPC, HTTP or
  metrics), in both process models, and must exit non-zero with ``Address already in use``
  in its log and without ever logging ``Started ...`` (cmsTriton watches for the first text to
  retry other ports, and takes the second as "up"). The first keeps serving. With
  ``--frontend-processes N`` the frontends bind with SO_REUSEPORT, which lets them join
  another server's port of the same user silently: that is the case this guards.
* ``server/cpus.py`` against host layouts written into a directory (cgroup v1 and v2, limits
  on the process's own cgroup and on an ancestor, no limit, a namespaced path), and the real
  affinity mask: under ``taskset -c 0`` the CLI's ``auto`` means one process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import tritonclient.grpc as grpcclient

from fpgaserve.server.cpus import cgroup_cpu_quota, usable_cpus
from support.server_process import CONFORMANCE_REPO, ServerProcess

SIMPLE = ["--model-control-mode=explicit", "--load-model=simple"]
IN_USE = "Address already in use"
STARTED = "Started "


@pytest.fixture(scope="module", params=["1", "2"], ids=["one-process", "frontend-processes-2"])
def first(request, tmp_path_factory):
    log = tmp_path_factory.mktemp("first") / "fpgaserve.log"
    with ServerProcess([CONFORMANCE_REPO], *SIMPLE, "--frontend-processes", request.param, log_path=log) as server:
        yield server, request.param


@pytest.mark.parametrize("taken", ["grpc", "http", "metrics"])
def test_a_second_server_on_a_taken_port_fails_before_starting(first, taken, tmp_path):
    server, processes = first
    second = ServerProcess([CONFORMANCE_REPO], *SIMPLE, "--frontend-processes", processes)
    setattr(second, f"{taken}_port", getattr(server, f"{taken}_port"))
    done = subprocess.run(second.args, capture_output=True, text=True, timeout=120, check=False)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert IN_USE in output, output
    what = {"grpc": "gRPC", "http": "HTTP", "metrics": "metrics"}[taken]
    assert f"cannot bind {what} to 127.0.0.1:{getattr(server, f'{taken}_port')}: {IN_USE}" in output, output
    assert STARTED not in output, output  # nothing announced itself before the failure
    # the first server still serves every protocol, and nobody else answers on its port
    with grpcclient.InferenceServerClient(server.url) as client:
        assert client.is_model_ready("simple")
        assert client.get_server_metadata().name
    assert server.http_up()
    assert server.proc is not None and server.proc.poll() is None


def test_sharing_a_port_on_purpose_still_works(tmp_path):
    """--reuse-grpc-port is the user asking for SO_REUSEPORT sharing: not refused."""
    a = ServerProcess([CONFORMANCE_REPO], *SIMPLE, "--frontend-processes", "1", "--reuse-grpc-port=true")
    with a:
        b = ServerProcess([CONFORMANCE_REPO], *SIMPLE, "--frontend-processes", "1", "--reuse-grpc-port=true")
        b.grpc_port = a.grpc_port
        with b, grpcclient.InferenceServerClient(b.url) as client:
            assert client.is_model_ready("simple")


# ----------------------------------------------------------------------------- CPUs
def _host(tmp_path, cgroup: str, files: dict[str, str], mountinfo: str = "") -> str:
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/cgroup").write_text(cgroup)
    (tmp_path / "proc/self/mountinfo").write_text(mountinfo)
    for path, text in files.items():
        f = tmp_path / path
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    return str(tmp_path)


V1_MOUNTS = (
    "25 30 0:22 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
    "31 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct\n"
    "32 25 0:28 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n"
)


def test_cgroup_v2_quota_of_the_process_cgroup(tmp_path):
    # a pod with limits: cpu: 2 on a big node (the kubelet writes 200000 100000)
    pod = "kubepods.slice/kubepods-burstable.slice/pod1.slice/cri-x.scope"
    root = _host(tmp_path, f"0::/{pod}\n", {f"sys/fs/cgroup/{pod}/cpu.max": "200000 100000\n"})
    assert cgroup_cpu_quota(root) == 2.0
    assert usable_cpus(root) == min(2, len(os.sched_getaffinity(0)))


def test_cgroup_v2_an_ancestor_limit_applies_and_the_smallest_wins(tmp_path):
    root = _host(
        tmp_path,
        "0::/a/b/c\n",
        {
            "sys/fs/cgroup/a/cpu.max": "150000 100000\n",  # 1.5 CPUs for everything under a
            "sys/fs/cgroup/a/b/cpu.max": "max 100000\n",
            "sys/fs/cgroup/a/b/c/cpu.max": "400000 100000\n",
        },
    )
    assert cgroup_cpu_quota(root) == 1.5


def test_cgroup_v2_no_limit_and_a_namespaced_path(tmp_path):
    assert cgroup_cpu_quota(_host(tmp_path / "a", "0::/x\n", {"sys/fs/cgroup/x/cpu.max": "max 100000\n"})) is None
    # inside a container (cgroup namespace) the path is "/" and the limit sits at the mount
    root = _host(tmp_path / "b", "0::/\n", {"sys/fs/cgroup/cpu.max": "250000 100000\n"})
    assert cgroup_cpu_quota(root) == 2.5


def test_cgroup_v1_quota_from_the_cpu_hierarchy(tmp_path):
    root = _host(
        tmp_path,
        "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/\n",
        {
            "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "300000\n",
            "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n",
            "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
            "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
        },
        V1_MOUNTS,
    )
    assert cgroup_cpu_quota(root) == 3.0
    unlimited = _host(
        tmp_path / "u",
        "3:cpu,cpuacct:/\n",
        {
            "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
            "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
        },
        V1_MOUNTS,
    )
    assert cgroup_cpu_quota(unlimited) is None


def test_unreadable_cgroup_files_mean_no_quota(tmp_path):
    assert cgroup_cpu_quota(tmp_path) is None  # no /proc at all
    assert cgroup_cpu_quota(_host(tmp_path / "g", "garbage\n0::/x\n", {"sys/fs/cgroup/x/cpu.max": "x y\n"})) is None
    assert usable_cpus(tmp_path) >= 1


def test_this_host_quota_is_read_without_error():
    quota = cgroup_cpu_quota()
    assert quota is None or quota > 0


@pytest.mark.skipif(shutil.which("taskset") is None, reason="taskset (util-linux) is not installed")
def test_auto_follows_the_affinity_mask():
    code = "from fpgaserve.server.cli import auto_frontend_processes as a; print(a())"
    pinned = subprocess.run(["taskset", "-c", "0", sys.executable, "-c", code], capture_output=True, text=True)
    assert pinned.returncode == 0, pinned.stderr
    assert pinned.stdout.strip() == "1"  # one CPU: gRPC and HTTP in the engine's process
