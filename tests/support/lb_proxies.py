"""nginx and HAProxy in front of fpgaserve replicas, rendered from the deploy/ configs.

The production configs in ``deploy/`` are the single source of truth: the tests and the
replica benchmark render them with their own loopback ports by substituting the few
placeholder shapes each file documents in its header (the replica ``server`` lines, the
listen/bind ports, nginx's log directory). A substitution that does not match exactly as
expected raises, so a config edit that breaks the rendering fails loudly instead of
testing something else.

The proxies run in the foreground as children of the test (nginx ``-g 'daemon off;'``,
haproxy ``-db``) with every file (pid, logs, temp dirs) in their own work directory.
"""

from __future__ import annotations

import csv
import io
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from support.server_process import ROOT, free_port

DEPLOY = ROOT / "deploy"
NGINX_CONF = DEPLOY / "nginx" / "fpgaserve-grpc.conf"
HAPROXY_CFG = DEPLOY / "haproxy" / "fpgaserve-grpc.cfg"
ENVOY_YAML = DEPLOY / "envoy" / "fpgaserve-grpc.yaml"

PROXIES = ("nginx", "haproxy")


@dataclass(frozen=True)
class Upstream:
    """One replica as the proxy sees it: gRPC port, and the HTTP port of its health probes."""

    host: str
    grpc_port: int
    http_port: int


def upstream_of(server) -> Upstream:
    """The :class:`Upstream` of a running ``ServerProcess``."""
    return Upstream("127.0.0.1", server.grpc_port, server.http_port)


def _sub_once(pattern: str, repl, text: str, what: str, flags: int = re.M) -> str:
    new, n = re.subn(pattern, repl, text, flags=flags)
    if n != 1:
        raise ValueError(f"rendering {what}: expected exactly one match of {pattern!r}, found {n}")
    return new


def _replace_server_lines(text: str, pattern: str, make_lines, what: str) -> str:
    """Replace the replica lines (every line matching ``pattern``) by one line per replica,
    built by ``make_lines(match of the first line)``, at the place of the first one."""
    rx = re.compile(pattern)
    lines = text.split("\n")
    hits = [i for i, line in enumerate(lines) if rx.fullmatch(line)]
    if not hits:
        raise ValueError(f"rendering {what}: no replica line matches {pattern!r}")
    if hits != list(range(hits[0], hits[0] + len(hits))):
        raise ValueError(f"rendering {what}: the replica lines must be consecutive (lines {[h + 1 for h in hits]})")
    new = make_lines(rx.fullmatch(lines[hits[0]]))
    return "\n".join(lines[: hits[0]] + new + lines[hits[-1] + 1 :])


def render_nginx(text: str, listen_port: int, upstreams: list[Upstream], log_dir: Path) -> str:
    """deploy/nginx/fpgaserve-grpc.conf with our ports and log directory."""
    pattern = r"([ \t]*)server[ \t]+([^\s:;{]+):(\d+)([^;]*);[ \t]*"

    def lines(m):
        indent, params = m.group(1), m.group(4)
        return [f"{indent}server {u.host}:{u.grpc_port}{params};" for u in upstreams]

    text = _replace_server_lines(text, pattern, lines, "nginx upstream servers")
    text = _sub_once(
        r"^([ \t]*)listen[ \t]+8001[ \t]+http2;", rf"\g<1>listen 127.0.0.1:{listen_port} http2;", text, "nginx listen"
    )
    if "/var/log/nginx/" not in text:
        raise ValueError("rendering nginx: no /var/log/nginx/ path to redirect")
    return text.replace("/var/log/nginx/", f"{log_dir}/")


def render_haproxy(text: str, listen_port: int, stats_port: int, upstreams: list[Upstream]) -> str:
    """deploy/haproxy/fpgaserve-grpc.cfg with our ports; replicas are named replica-0, ..."""
    pattern = r"([ \t]*)server[ \t]+(\S+)[ \t]+([^\s:]+):(\d+)([ \t].*)"

    def lines(m):
        indent, params = m.group(1), m.group(5)
        if len(re.findall(r"\bport 8000\b", params)) != 1:
            raise ValueError("rendering haproxy: the template server line has no single 'port 8000' (health port)")
        return [
            f"{indent}server replica-{i} {u.host}:{u.grpc_port}"
            + re.sub(r"\bport 8000\b", f"port {u.http_port}", params)
            for i, u in enumerate(upstreams)
        ]

    text = _replace_server_lines(text, pattern, lines, "haproxy backend servers")
    text = _sub_once(r"^([ \t]*)bind[ \t]+:8001\b", rf"\g<1>bind 127.0.0.1:{listen_port}", text, "haproxy bind 8001")
    text = _sub_once(r"^([ \t]*)bind[ \t]+:8404\b", rf"\g<1>bind 127.0.0.1:{stats_port}", text, "haproxy bind 8404")
    return text


def _nginx_main_conf(workdir: Path, snippet: Path) -> str:
    """The nginx.conf around the http-level snippet, as Debian's includes conf.d/*.conf; only
    the process files live here (pid, error log, temp dirs: all inside the work dir)."""
    temp = workdir / "temp"
    return f"""# written by tests/support/lb_proxies.py: the test's own nginx main config
worker_processes 1;
pid {workdir}/nginx.pid;
error_log {workdir}/error.log info;
events {{
    worker_connections 4096;
}}
http {{
    client_body_temp_path {temp}/client_body;
    proxy_temp_path {temp}/proxy;
    fastcgi_temp_path {temp}/fastcgi;
    uwsgi_temp_path {temp}/uwsgi;
    scgi_temp_path {temp}/scgi;
    include {snippet};
}}
"""


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


class ProxyProcess:
    """nginx or HAProxy on a free loopback port, in front of ``upstreams``."""

    def __init__(self, kind: str, upstreams: list[Upstream], workdir: Path):
        if kind not in PROXIES:
            raise ValueError(f"unknown proxy {kind!r}")
        self.kind = kind
        self.upstreams = list(upstreams)
        self.workdir = Path(workdir)
        self.port = free_port()
        self.stats_port = free_port()  # haproxy only
        self.proc: subprocess.Popen | None = None
        self._out = None
        self.config_path: Path | None = None

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _exe(self) -> str:
        name = self.kind
        return shutil.which(name) or f"/usr/sbin/{name}"

    def write_config(self) -> list[str]:
        """Render the config into the work dir; returns the command line that runs it."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.kind == "nginx":
            for sub in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
                (self.workdir / "temp" / sub).mkdir(parents=True, exist_ok=True)
            snippet = self.workdir / "fpgaserve-grpc.conf"
            snippet.write_text(render_nginx(NGINX_CONF.read_text(), self.port, self.upstreams, self.workdir))
            self.config_path = self.workdir / "nginx.conf"
            self.config_path.write_text(_nginx_main_conf(self.workdir, snippet))
            base = [
                self._exe(),
                "-p",
                str(self.workdir),
                "-e",
                str(self.workdir / "error.log"),
                "-c",
                str(self.config_path),
            ]
            check = subprocess.run([*base, "-t"], capture_output=True, text=True)
            if check.returncode != 0:
                raise RuntimeError(f"nginx -t rejected the rendered config:\n{check.stderr}")
            return [*base, "-g", "daemon off;"]
        self.config_path = self.workdir / "haproxy.cfg"
        self.config_path.write_text(render_haproxy(HAPROXY_CFG.read_text(), self.port, self.stats_port, self.upstreams))
        check = subprocess.run([self._exe(), "-c", "-f", str(self.config_path)], capture_output=True, text=True)
        if check.returncode != 0:
            raise RuntimeError(f"haproxy -c rejected the rendered config:\n{check.stdout}{check.stderr}")
        return [self._exe(), "-f", str(self.config_path), "-db"]

    def start(self, timeout: float = 30.0) -> ProxyProcess:
        cmd = self.write_config()
        self._out = open(self.workdir / f"{self.kind}.out", "wb")  # noqa: SIM115  (closed in stop())
        self.proc = subprocess.Popen(cmd, stdout=self._out, stderr=subprocess.STDOUT, cwd=self.workdir)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited with {self.proc.returncode}: {self.log()}")
            if _port_open(self.port) and (self.kind != "haproxy" or _port_open(self.stats_port)):
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{self.kind} did not listen on {self.port} within {timeout}s: {self.log()}")

    def log(self) -> str:
        parts = []
        for name in (f"{self.kind}.out", "error.log", "fpgaserve-grpc.error.log", "fpgaserve-grpc.access.log"):
            p = self.workdir / name
            if p.exists():
                parts.append(f"--- {name}\n{p.read_text(errors='replace')[-3000:]}")
        return "\n".join(parts) or "(no log)"

    def server_states(self) -> dict[str, str]:
        """HAProxy only: replica name -> status from the stats CSV (UP, DOWN, ...)."""
        if self.kind != "haproxy":
            raise RuntimeError("only HAProxy has a status page here")
        with urllib.request.urlopen(f"http://127.0.0.1:{self.stats_port}/stats;csv", timeout=5) as r:
            text = r.read().decode()
        rows = csv.DictReader(io.StringIO(text.lstrip("# ")))
        return {
            row["svname"]: row["status"]
            for row in rows
            if row["pxname"] == "fpgaserve_replicas" and row["svname"] not in ("BACKEND",)
        }

    def stop(self, timeout: float = 15.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            # graceful stops, both exit 0: nginx SIGQUIT (its SIGTERM is a fast stop),
            # HAProxy SIGUSR1 (soft stop; its SIGTERM kills the process by the signal)
            self.proc.send_signal(signal.SIGQUIT if self.kind == "nginx" else signal.SIGUSR1)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._out is not None:
            self._out.close()
            self._out = None
        return self.proc.returncode

    def __enter__(self) -> ProxyProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
