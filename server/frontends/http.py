"""The HTTP side: KServe v2 health probes on --http-port and Prometheus /metrics on --metrics-port.

Probe routes: ``GET /v2/health/live``, ``/v2/health/ready``,
``/v2/models/<name>[/versions/<v>]/ready`` -> 200, or 400 like Triton. A small asyncio
HTTP/1.1 responder serves probes and scrapes (the HTTP inference frontend will replace it
with a library); running on the event loop means /metrics reads the statistics on the
thread that writes them.

It faces any client that can reach the port, so every connection is bounded:

* a request line and headers must arrive within ``header_timeout_s`` and fit in
  ``MAX_LINE_BYTES`` per line and ``MAX_HEADERS`` lines (else 408/414/431, then close);
* an idle keep-alive connection is closed after ``idle_timeout_s``;
* at most ``max_connections`` connections are open at once (more are closed at accept);
* a body is read and discarded only up to ``MAX_BODY_BYTES`` (these routes take none);
  chunked bodies are refused, so a body can never be mistaken for the next request.
"""

from __future__ import annotations

import asyncio
import json
import logging
from urllib.parse import unquote

from ..errors import InferenceError
from .access import Restriction

log = logging.getLogger("fpgaserve.http")

MAX_LINE_BYTES = 8192
MAX_HEADERS = 100
MAX_BODY_BYTES = 64 * 1024
DEFAULT_MAX_CONNECTIONS = 1024
_SINGLE_HEADERS = ("content-length", "transfer-encoding", "host")

_REASONS = {
    200: "OK",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    413: "Payload Too Large",
    414: "URI Too Long",
    431: "Request Header Fields Too Large",
    501: "Not Implemented",
    505: "HTTP Version Not Supported",
}


class _Reject(Exception):
    """A request the responder answers with ``status`` and then closes the connection."""

    def __init__(self, status: int):
        super().__init__(status)
        self.status = status


class TinyHttpServer:
    """GET/HEAD only; ``route(method, path, headers) -> (status, content type, body)``
    (``headers``: lower-cased names)."""

    def __init__(
        self,
        route,
        *,
        header_timeout_s: float = 10.0,
        idle_timeout_s: float = 60.0,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ):
        self.route = route
        self.header_timeout_s = header_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.max_connections = max_connections
        self._connections: set[asyncio.StreamWriter] = set()
        self._server: asyncio.AbstractServer | None = None

    async def _read_line(self, reader: asyncio.StreamReader, deadline: float, status: int) -> bytes:
        loop = asyncio.get_running_loop()
        try:
            return await asyncio.wait_for(reader.readline(), max(0.0, deadline - loop.time()))
        except asyncio.TimeoutError:
            raise _Reject(408) from None
        except ValueError:  # the line exceeds the reader's limit (LimitOverrunError)
            raise _Reject(status) from None

    async def _read_request(self, reader: asyncio.StreamReader, first: bool):
        """(method, path, headers), or None when the client closed or idled out between requests."""
        loop = asyncio.get_running_loop()
        try:
            line = await asyncio.wait_for(reader.readline(), self.header_timeout_s if first else self.idle_timeout_s)
        except asyncio.TimeoutError:
            if first:
                raise _Reject(408) from None
            return None  # idle keep-alive connection: close quietly
        except ValueError:
            raise _Reject(414) from None
        if not line:
            return None
        deadline = loop.time() + self.header_timeout_s
        try:
            method, target, version = line.decode("latin-1").rstrip("\r\n").split(" ")
        except ValueError:
            raise _Reject(400) from None
        if not version.startswith("HTTP/1."):
            raise _Reject(505 if version.startswith("HTTP/") else 400)
        headers: dict[str, str] = {}
        for _ in range(MAX_HEADERS + 1):
            h = await self._read_line(reader, deadline, 431)
            if h in (b"\r\n", b"\n"):
                break
            if not h:
                return None
            name, colon, value = h.decode("latin-1").partition(":")
            if not colon or not name or name != name.strip():
                raise _Reject(400)
            name = name.lower()
            if name in headers and name in _SINGLE_HEADERS:
                # two framings of one message: a proxy in front may have used the other one
                raise _Reject(400)
            headers[name] = value.strip()
        else:
            raise _Reject(431)
        if "transfer-encoding" in headers:
            raise _Reject(501)
        length = headers.get("content-length", "0")
        if not (length.isascii() and length.isdigit()):
            raise _Reject(400)
        if int(length) > MAX_BODY_BYTES:
            raise _Reject(413)
        if int(length):
            try:
                await asyncio.wait_for(reader.readexactly(int(length)), max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                raise _Reject(408) from None
        return method, target, headers

    def _respond(self, writer, method: str, code: int, ctype: str, body: bytes, keep_alive: bool) -> None:
        writer.write(
            f"HTTP/1.1 {code} {_REASONS.get(code, '')}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
            f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n".encode()
            + (body if method != "HEAD" else b"")
        )

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._connections) >= self.max_connections:
            writer.close()
            return
        self._connections.add(writer)
        try:
            first = True
            while True:
                try:
                    request = await self._read_request(reader, first)
                except _Reject as r:
                    self._respond(writer, "GET", r.status, "text/plain", b"", keep_alive=False)
                    await writer.drain()
                    break
                if request is None:
                    break
                first = False
                method, path, headers = request
                keep_alive = "close" not in headers.get("connection", "").lower()
                if method not in ("GET", "HEAD"):
                    code, ctype, body = 405, "application/json", b'{"error":"Method Not Allowed"}'
                else:
                    code, ctype, body = self.route(method, path, headers)
                self._respond(writer, method, code, ctype, body, keep_alive)
                await writer.drain()
                if not keep_alive:
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._connections.discard(writer)
            writer.close()

    async def start(self, address: str, port: int, reuse_port: bool = False) -> int:
        self._server = await asyncio.start_server(
            self._handle, address, port, limit=MAX_LINE_BYTES, reuse_port=reuse_port or None
        )
        return self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for writer in list(self._connections):
                writer.close()
            await self._server.wait_closed()


class HealthRoutes:
    def __init__(self, dataplane, restrictions: dict[str, Restriction] | None = None):
        self.dataplane = dataplane
        # probes are Triton's "health" API group (--http-restricted-api=health:<key>=<value>)
        self.restriction = (restrictions or {}).get("health")

    def status_for(self, method: str, path: str) -> int:
        if method not in ("GET", "HEAD"):
            return 405
        parts = [unquote(p) for p in path.split("?", 1)[0].strip("/").split("/")]
        if parts == ["v2", "health", "live"]:
            return 200
        if parts == ["v2", "health", "ready"]:
            return 200 if self.dataplane.ready_now() else 400
        if len(parts) >= 4 and parts[:2] == ["v2", "models"] and parts[-1] == "ready":
            name = parts[2]
            version = ""
            if len(parts) == 6 and parts[3] == "versions":
                version = parts[4]
            elif len(parts) != 4:
                return 404
            try:
                ready = self.dataplane.model_ready_now(name, version)
            except InferenceError:  # a malformed version: not ready, as any unknown one
                ready = False
            return 200 if ready else 400
        return 404

    def __call__(self, method: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, str, bytes]:
        code = self.status_for(method, path)
        restriction = self.restriction
        if (
            code != 404
            and restriction is not None
            and not restriction.allows((headers or {}).get(restriction.header.lower()))
        ):
            body = json.dumps({"error": restriction.http_refusal()}).encode()
            return 403, "application/json", body
        if code == 400 and "/v2/models/" in path:
            return code, "application/json", b'{"error":"Model version not ready"}'  # Triton's body
        return code, "text/plain", b""


def metrics_route(render):
    """``render() -> bytes`` in Prometheus text format, served on /metrics."""

    def route(method: str, path: str, headers: dict[str, str] | None = None):
        if path.split("?", 1)[0].rstrip("/") != "/metrics":
            return 404, "text/plain", b""
        return 200, "text/plain; version=0.0.4; charset=utf-8", render()

    return route
