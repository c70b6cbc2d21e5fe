"""The HTTP listener: aiohttp's low-level server bound to an address, with TLS, and bounded as a
port any client can reach must be (the gRPC listener's sibling, grpc_listener.py).

* a request's head must arrive within ``header_timeout_s`` (the connection is answered 408
  and closed otherwise, however slowly its bytes trickle in); a body must keep arriving
  (``read_body``);
* lines over 8 KiB or more than 100 header lines are refused by the parser (400, close);
* an idle keep-alive connection is closed after ``idle_timeout_s``;
* at most ``max_connections`` connections are open at once (more are closed at accept);
* the parser's refusals are logged only with verbose logging (any client could fill the log).

The routes and what they answer are http.py's; nothing here reads a request's meaning.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import HttpVersion11, web
from aiohttp.web_protocol import RequestHandler

from ..errors import StartupError

log = logging.getLogger("fpgaserve.http")

MAX_LINE_BYTES = 8192
MAX_HEADERS = 100
DEFAULT_MAX_CONNECTIONS = 1024


def http_ssl_context(o) -> ssl.SSLContext | None:
    """HTTPS from --http-use-ssl, --http-server-cert, --http-server-key; None = plain HTTP.
    Unusable files are a ``StartupError`` that names them."""
    if not o.http_use_ssl:
        return None
    for flag, path in (("--http-server-cert", o.http_server_cert), ("--http-server-key", o.http_server_key)):
        if not path:
            raise StartupError(f"--http-use-ssl needs {flag}")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(o.http_server_cert, o.http_server_key)
    except (ssl.SSLError, OSError) as e:
        why = e.reason if isinstance(e, ssl.SSLError) else (e.strerror or e)
        raise StartupError(
            f"--http-server-cert {o.http_server_cert} and --http-server-key {o.http_server_key} "
            f"are not a usable PEM certificate chain and private key ({why})"
        ) from None
    return context


class HttpReject(Exception):
    """Answer ``status`` (with an optional JSON error text) and close the connection."""

    def __init__(self, status: int, text: str = ""):
        super().__init__(status)
        self.status = status
        self.text = text


# ----------------------------------------------------------------------------- connections


_TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\nContent-Type: text/plain\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
)


class _Connection(RequestHandler):
    """aiohttp's per-connection protocol plus a deadline for each request's head (aiohttp
    itself only times out idle keep-alive connections) and a cap on connections.

    aiohttp has no public API for either, so this reads RequestHandler's private state
    (``_manager``, ``_loop``, ``_request_in_progress``, ``_messages``, ``_request_count``) and
    :class:`_Server` web.Server's (``_loop``, ``_kwargs``): pyproject.toml pins aiohttp to the
    minor release these were tested on; tests/deployment/test_packaging.py checks that they exist and
    tests/security/test_security.py's stalled/trickled-head and idle-connection tests exercise them."""

    header_timeout_s = 10.0
    max_connections = DEFAULT_MAX_CONNECTIONS
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:
        manager = self._manager
        if manager is not None and len(manager.connections) >= self.max_connections:
            transport.abort()
            return
        super().connection_made(transport)
        self._head_timer = self._loop.call_later(self.header_timeout_s, self._head_expired)

    def data_received(self, data: bytes) -> None:
        if self._head_timer is None and not self._request_in_progress and not self._messages and data:
            # the first bytes of the next request's head on a kept-alive connection
            self._head_timer = self._loop.call_later(self.header_timeout_s, self._head_expired)
        parsed = self._request_count
        super().data_received(data)
        if self._request_count != parsed and self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def connection_lost(self, exc) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)

    def _head_expired(self) -> None:
        self._head_timer = None
        transport = self.transport
        if transport is None or transport.is_closing() or self._request_in_progress or self._messages:
            return
        transport.write(_TIMEOUT_RESPONSE)
        self.force_close()


class _Server(web.Server):
    def __init__(self, handler, *, header_timeout_s: float, max_connections: int, **kwargs):
        super().__init__(handler, **kwargs)
        self._header_timeout_s = header_timeout_s
        self._max_connections = max_connections

    def __call__(self) -> RequestHandler:
        conn = _Connection(self, loop=self._loop, **self._kwargs)
        conn.header_timeout_s = self._header_timeout_s
        conn.max_connections = self._max_connections
        return conn


class _ParserLog(logging.Filter):
    """aiohttp logs every request its parser refuses at ERROR with a traceback: any client could
    fill the log. Kept only with verbose logging, as one line without the traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info = None
        record.exc_text = None
        return log.isEnabledFor(logging.DEBUG)


_quiet = logging.getLogger("fpgaserve.http.parser")
_quiet.addFilter(_ParserLog())


class HttpListener:
    """One aiohttp low-level server bound to one address and port, with the bounds above
    (``HttpFrontend`` and ``MetricsFrontend`` each run one)."""

    def __init__(
        self,
        handler: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]],
        *,
        header_timeout_s: float,
        idle_timeout_s: float,
        max_connections: int,
        shutdown_timeout_s: float = 30.0,
        ssl_context: ssl.SSLContext | None = None,
    ):
        self.shutdown_timeout_s = shutdown_timeout_s
        self.ssl_context = ssl_context
        self.handler = handler
        self.settings: dict[str, Any] = {
            "header_timeout_s": header_timeout_s,
            "max_connections": max_connections,
            "keepalive_timeout": idle_timeout_s,
            "max_line_size": MAX_LINE_BYTES,
            "max_field_size": MAX_LINE_BYTES,
            "max_headers": MAX_HEADERS,
            "auto_decompress": False,  # inflated here, within the body limit
            "logger": _quiet,
            "access_log": None,
            "lingering_time": header_timeout_s,
            # flow control: reading pauses when this much of a body is buffered and unread
            # (aiohttp's 64 KiB default pauses and resumes the socket ~50 times per 3 MB body)
            "read_bufsize": 1 << 21,
        }
        self.runner: web.ServerRunner | None = None

    async def start(self, address: str, port: int, reuse_port: bool) -> int:
        # at stop: no new connections, in-flight requests get up to shutdown_timeout_s
        server = _Server(self.handler, **self.settings)  # needs the running loop
        self.runner = web.ServerRunner(
            server, handle_signals=False, access_log=None, shutdown_timeout=self.shutdown_timeout_s
        )
        await self.runner.setup()
        site = web.TCPSite(
            self.runner, address, port, reuse_port=reuse_port or None, backlog=1024, ssl_context=self.ssl_context
        )
        try:
            await site.start()
        except BaseException:
            await self.runner.cleanup()
            self.runner = None
            raise
        # the bound port (port 0 picks one): the runner's public list of its sites' socket names,
        # (host, port, ...) for this one site, on asyncio's and uvloop's servers alike
        addresses = self.runner.addresses
        assert addresses, "aiohttp's runner has no bound address after site.start()"
        return addresses[0][1]

    async def stop_listening(self) -> None:
        """Take no new connection (the port is closed, a client's connect is refused, as
        Triton's HTTP service does first when it stops); the open ones are still served."""
        if self.runner is not None:
            for site in list(self.runner.sites):
                await site.stop()

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None


async def read_body(request: web.BaseRequest, limit: int, timeout_s: float) -> bytes:
    """The whole body (one buffer: binary inputs become views of it), refused with 413 past
    ``limit``. It must arrive within ``timeout_s`` plus a second per MiB (a client that stalls
    is answered 408); a chunked body must keep arriving, ``timeout_s`` at most between chunks."""
    length = request.content_length
    if length is not None and length > limit:
        raise HttpReject(413, f"request body of {length} bytes exceeds the limit of {limit} bytes")
    content = request.content
    if content.is_eof():  # all of it arrived with the head (the usual small request)
        return await content.read()
    if request.headers.get("Expect", "").lower() == "100-continue" and request.version == HttpVersion11:
        # curl asks before sending a body over 1 KiB (and otherwise waits a second)
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0  # the real response is still to be sent
    if length is not None:
        # one deadline for the whole body: no per-chunk timer (a 3 MB body comes in ~50 reads)
        try:
            return await asyncio.wait_for(content.readexactly(length), timeout_s + length / (1 << 20))
        except asyncio.TimeoutError:
            raise HttpReject(408) from None
        except asyncio.IncompleteReadError:
            raise HttpReject(400, "the request body ended before its Content-Length") from None
    chunks: list[bytes] = []
    total = 0
    while True:
        try:
            chunk = await asyncio.wait_for(content.readany(), timeout_s)
        except asyncio.TimeoutError:
            raise HttpReject(408) from None
        if not chunk:
            break
        total += len(chunk)
        if total > limit:
            raise HttpReject(413, f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
