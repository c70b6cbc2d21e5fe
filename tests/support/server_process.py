"""Start the real ``fpgaserve`` command on free loopback ports, for tests and examples.

Tests talk to it only over sockets (gRPC, HTTP), exactly as a deployment would be used.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from support import costs
from support.workers import worker

ROOT = Path(__file__).resolve().parents[2]
CONFORMANCE_REPO = ROOT / "tests" / "models"
BUNDLED_REPO = ROOT / "bitstreams"


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A loopback port nobody listens on, never one this process handed out before.

    The kernel may give the same ephemeral port to two ``bind(0)`` calls once the first socket is closed;
    a server whose HTTP and metrics ports came out equal failed to start in CI (2026-11-26), so the ports
    already given to a test are skipped. Parallel workers take disjoint ports: worker i of n only ports
    with ``(port // 2) % n == i``, so two workers never hand out the same one (not ``port % n``: Linux
    gives bind(0) odd ports, so with n = 2 or 4 some workers would never get one).
    """
    index, count = worker()
    # a port that will not do stays bound until one does: the kernel may hand the same few ports
    # to bind(0) again and again once they are closed, so a closed one could come back forever
    held: list[socket.socket] = []
    try:
        while True:
            s = socket.socket()
            held.append(s)
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            if (port // 2) % count == index and port not in _HANDED_OUT:
                _HANDED_OUT.add(port)
                return port
    finally:
        for s in held:
            s.close()


class ServerProcess:
    def __init__(
        self, repositories, *extra_args: str, log_path: Path | None = None, env=None, entry=None, new_session=False
    ):
        self.repositories = [str(r) for r in repositories]
        # a session (and process group) of its own: a test may signal the server's whole group
        self.new_session = new_session
        # the program to run instead of ``-m fpgaserve.server.cli`` (e.g. tests/fpga_sim/serve.py,
        # which registers the simulated PYNQ card first and then runs the same CLI)
        self.entry = [str(e) for e in entry] if entry else ["-m", "fpgaserve.server.cli"]
        self.grpc_port = free_port()
        self.http_port = free_port()
        self.metrics_port = free_port()
        self.extra_args = list(extra_args)
        self.log_path = log_path
        self.env = env
        self.proc: subprocess.Popen | None = None
        self._log_file = None

    @property
    def url(self) -> str:
        return f"localhost:{self.grpc_port}"

    @property
    def args(self) -> list[str]:
        args = [sys.executable, *self.entry]
        for r in self.repositories:
            args += ["--model-repository", r]
        args += [
            "--grpc-address",
            "127.0.0.1",
            "--http-address",
            "127.0.0.1",
            "--grpc-port",
            str(self.grpc_port),
            "--http-port",
            str(self.http_port),
            "--metrics-address",
            "127.0.0.1",
            "--metrics-port",
            str(self.metrics_port),
        ]
        extra = list(self.extra_args)
        # FPGASERVE_TEST_FRONTEND_PROCESSES=N runs every test server with N gRPC frontend
        # processes (the suite runs its protocol modules that way too: tests/protocol/test_processes.py)
        n = os.environ.get("FPGASERVE_TEST_FRONTEND_PROCESSES")
        if n and not any(a.startswith("--frontend-processes") for a in extra):
            extra += ["--frontend-processes", n]
        return args + extra

    def start(self, timeout: float = 60.0, wait_ready: bool = True) -> ServerProcess:
        if self.log_path is not None:
            self._log_file = open(self.log_path, "wb")  # noqa: SIM115  (closed in stop())
            out = self._log_file
        else:
            out = subprocess.DEVNULL
        env = dict(os.environ if self.env is None else self.env)
        self.proc = subprocess.Popen(
            self.args, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=self.new_session
        )
        started = time.monotonic()
        deadline = started + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"fpgaserve exited with {self.proc.returncode}: {self.log()}")
            if self.http_up(ready=wait_ready):
                if costs.enabled():
                    cpu = costs.tree_cpu(self.proc.pid)
                    costs.record("ready", wall=time.monotonic() - started, cpu=cpu, argv=" ".join(self.args[1:]))
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"fpgaserve did not become ready in {timeout}s: {self.log()}")

    def http_status(self, path: str) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}{path}", timeout=2) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    def http_up(self, ready: bool = True) -> bool:
        try:
            return self.http_status("/v2/health/ready" if ready else "/v2/health/live") == 200
        except OSError:
            return False

    def log(self) -> str:
        if self.log_path is not None and self.log_path.exists():
            return self.log_path.read_text(errors="replace")[-4000:]
        return "(no log captured)"

    def terminate(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout: float = 30.0) -> int:
        return self.proc.wait(timeout=timeout)

    def stop(self, timeout: float = 30.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log_file:
            self._log_file.close()
        return self.proc.returncode

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def serve(proc: ServerProcess):
    """Fixture body (``yield from serve(...)``): start, yield, and require a clean exit."""
    proc.start()
    try:
        yield proc
    finally:
        rc = proc.stop()
    assert rc == 0, f"server exited with {rc}: {proc.log()}"
