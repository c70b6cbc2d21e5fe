"""The HTTP side: KServe v2 health probes on --http-port and Prometheus /metrics on --metrics-port.

Probe routes: ``GET /v2/health/live``, ``/v2/health/ready``,
``/v2/models/<name>[/versions/<v>]/ready`` -> 200, or 400 like Triton. A tiny asyncio
HTTP/1.1 responder is enough for probes and scrapes and keeps a web framework out of the
dependencies; running on the event loop also means /metrics reads the statistics on the
thread that writes them.
"""

from __future__ import annotations

import asyncio
import logging
from urllib.parse import unquote

log = logging.getLogger("fpgaserve.http")


class TinyHttpServer:
    """GET/HEAD only; ``route(method, path) -> (status, content type, body)``."""

    def __init__(self, route):
        self.route = route
        self._server: asyncio.AbstractServer | None = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                try:
                    method, path, _ = line.decode("latin-1").split(" ", 2)
                except ValueError:
                    break
                keep_alive = True
                while True:  # headers
                    h = await reader.readline()
                    if h in (b"\r\n", b"\n", b""):
                        break
                    if h.lower().startswith(b"connection:") and b"close" in h.lower():
                        keep_alive = False
                if method not in ("GET", "HEAD"):
                    code, ctype, body = 405, "text/plain", b""
                else:
                    code, ctype, body = self.route(method, path)
                reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}.get(code, "")
                writer.write(
                    f"HTTP/1.1 {code} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                    f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n".encode()
                    + (body if method != "HEAD" else b"")
                )
                await writer.drain()
                if not keep_alive:
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def start(self, address: str, port: int) -> int:
        self._server = await asyncio.start_server(self._handle, address, port)
        return self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


class HealthRoutes:
    def __init__(self, servicer):
        self.servicer = servicer

    def status_for(self, method: str, path: str) -> int:
        if method not in ("GET", "HEAD"):
            return 405
        parts = [unquote(p) for p in path.split("?", 1)[0].strip("/").split("/")]
        if parts == ["v2", "health", "live"]:
            return 200
        if parts == ["v2", "health", "ready"]:
            return 200 if self.servicer.server_ready() else 400
        if len(parts) >= 4 and parts[:2] == ["v2", "models"] and parts[-1] == "ready":
            name = parts[2]
            version = ""
            if len(parts) == 6 and parts[3] == "versions":
                version = parts[4]
            elif len(parts) != 4:
                return 404
            ready = not self.servicer.exiting and self.servicer.repository.is_ready(name, version)
            return 200 if ready else 400
        return 404

    def __call__(self, method: str, path: str) -> tuple[int, str, bytes]:
        code = self.status_for(method, path)
        if code == 400 and "/v2/models/" in path:
            return code, "application/json", b'{"error":"Model version not ready"}'  # Triton's body
        return code, "text/plain", b""


def metrics_route(render):
    """``render() -> bytes`` in Prometheus text format, served on /metrics."""

    def route(method: str, path: str):
        if path.split("?", 1)[0].rstrip("/") != "/metrics":
            return 404, "text/plain", b""
        return 200, "text/plain; version=0.0.4; charset=utf-8", render()

    return route
