"""HTTP/REST: the KServe v2 protocol with Triton's extensions, on aiohttp's HTTP server.

``HttpFrontend`` is the gRPC frontend's sibling over the same ``DataPlaneAPI`` (``DataPlane`` in
the engine's process, ``RemoteDataPlane`` in a frontend process): validation, scheduling and
shared memory are the data plane's; statistics, model metadata, load parameters and failure
mapping are ``common``'s, shared with gRPC; this module only speaks the wire
(routes as Triton's ``http_server.cc`` matches them, JSON and binary bodies, compression,
status codes: ``HTTP_STATUS`` is the only place statuses meet HTTP's). ``MetricsFrontend``
serves Prometheus ``/metrics`` on the same server machinery.

aiohttp's low-level server (``web.Server``) parses HTTP/1.1 (llhttp, in C), keeps connections
alive, reads chunked bodies; routing is a handful of string comparisons here, not a router.
The listener (http_listener.py, as grpc_listener.py is gRPC's) binds it and bounds every
connection, for the port faces any client that can reach it:

* a request's head must arrive within ``header_timeout_s`` (the connection is answered 408
  and closed otherwise, however slowly its bytes trickle in); its body must keep arriving
  (no ``header_timeout_s`` without progress);
* lines over 8 KiB or more than 100 header lines are refused by the parser (400, close);
* an idle keep-alive connection is closed after ``idle_timeout_s``;
* at most ``max_connections`` connections are open at once (more are closed at accept);
* a body is limited to ``max_body_bytes`` (inference and model load, ``--http-max-input-size``)
  or 64 KiB (every other route); a compressed body is inflated only up to that limit.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import inspect
import logging
import re
import ssl
import zlib
from urllib.parse import unquote

import orjson
from aiohttp import web

from .. import model_config as mc
from ..dataplane.api import DataPlaneAPI
from ..dataplane.tensors import forward_headers
from ..errors import (
    InferenceError,
    Status,
    bound_message,
    escape_control,
    invalid_argument,
    unimplemented,
)
from . import common
from . import http_codec as codec
from .access import Restriction
from .http_listener import DEFAULT_MAX_CONNECTIONS, HttpListener, HttpReject, read_body

log = logging.getLogger("fpgaserve.http")

SMALL_BODY_BYTES = 64 * 1024  # routes other than inference and model load
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024  # tritonserver's --http-max-input-size default
_OFFLOAD_BYTES = 256 * 1024  # (de)compressing more than this runs off the event loop

# Status -> HTTP status, as Triton's HttpCodeFromError maps its core codes (400 for the rest)
HTTP_STATUS = {
    Status.INVALID_ARG: 400,
    Status.NOT_FOUND: 404,
    Status.UNAVAILABLE: 503,
    Status.INTERNAL: 500,
    Status.UNSUPPORTED: 501,
    Status.ALREADY_EXISTS: 400,
    Status.CANCELLED: 400,
    Status.PERMISSION_DENIED: 400,
}

_JSON = "application/json"
_NOT_ALLOWED = b'{"error":"Method Not Allowed"}'
_NOT_FOUND = b'{"error":"Not Found"}'


def json_response(obj, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(obj), content_type=_JSON)


def error_response(status: int, text: str) -> web.Response:
    return web.Response(status=status, body=orjson.dumps({"error": bound_message(text)}), content_type=_JSON)


def inference_error_response(e: InferenceError) -> web.Response:
    return error_response(HTTP_STATUS[e.status], e.message)


def inflate(data: bytes, encoding: str, limit: int) -> bytes:
    """A gzip or deflate (zlib) body, inflated to at most ``limit`` bytes."""
    wbits = 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS
    d = zlib.decompressobj(wbits)
    try:
        out = d.decompress(data, limit + 1)
    except zlib.error as e:
        raise invalid_argument(f"failed to decompress the request body ({encoding}): {e}") from None
    if len(out) > limit:
        raise HttpReject(413, f"decompressed request body exceeds the limit of {limit} bytes")
    if not d.eof:
        raise invalid_argument(f"failed to decompress the request body ({encoding}): truncated data")
    return out


def accepted_encoding(header: str | None) -> str:
    """The response coding a weighted ``Accept-Encoding`` prefers among gzip and deflate
    ("identity" when neither is acceptable); the first listed wins a tie, as in Triton."""
    if not header:
        return "identity"
    best, best_q = "identity", 0.0
    for item in header.split(","):
        coding, _, params = item.strip().partition(";")
        coding = coding.strip().lower()
        q = 1.0
        params = params.strip()
        if params.startswith("q="):
            try:
                q = float(params[2:])
            except ValueError:
                q = 0.0
        if coding in ("gzip", "deflate") and q > best_q:
            best, best_q = coding, q
    return best


def compress(data: bytes, encoding: str) -> bytes:
    if encoding == "gzip":
        c = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    else:
        c = zlib.compressobj(6, zlib.DEFLATED, zlib.MAX_WBITS)
    return c.compress(data) + c.flush()


# ----------------------------------------------------------------------------- JSON of messages


# ----------------------------------------------------------------------------- the API


# what Triton's HTTP statistics always show and fpgaserve does not measure (no response cache)
_UNMEASURED_INFER_STATS = {"cache_hit": {"count": 0, "ns": 0}, "cache_miss": {"count": 0, "ns": 0}}


class HttpFrontend:
    """Routes, as tritonserver's HTTPAPIServer::Handle matches them, onto the data plane."""

    def __init__(
        self,
        dataplane: DataPlaneAPI,
        restrictions: dict[str, Restriction] | None = None,
        *,
        header_timeout_s: float = 10.0,
        idle_timeout_s: float = 60.0,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        shutdown_timeout_s: float = 30.0,
        ssl_context: ssl.SSLContext | None = None,
        forwarding: common.HeaderForwarding | None = None,
    ):
        self.dataplane = dataplane
        self.restrictions = restrictions or {}
        # --http-header-forward-pattern: the request headers that become request parameters
        self.forwarding = forwarding if forwarding is not None and forwarding.regex is not None else None
        self.header_timeout_s = header_timeout_s
        self.max_body_bytes = max_body_bytes
        self.listener = HttpListener(
            self.handle,
            header_timeout_s=header_timeout_s,
            idle_timeout_s=idle_timeout_s,
            max_connections=max_connections,
            shutdown_timeout_s=shutdown_timeout_s,
            ssl_context=ssl_context,
        )

    async def start(self, address: str, port: int, reuse_port: bool = False) -> int:
        return await self.listener.start(address, port, reuse_port)

    async def stop_listening(self) -> None:
        """Refuse new connections; requests on open ones are still answered."""
        await self.listener.stop_listening()

    async def stop(self) -> None:
        """Stop accepting; in-flight requests finish (up to ``shutdown_timeout_s``)."""
        await self.listener.stop()

    # ------------------------------------------------------------------ dispatch
    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        try:
            if request.version.major != 1:
                raise HttpReject(505)
            response = await self._route(request)
        except HttpReject as r:
            if r.text:
                response = error_response(r.status, r.text)
            else:
                response = web.Response(status=r.status, content_type="text/plain")
            response.force_close()
            return response
        except Exception as e:
            return inference_error_response(
                common.failure(f"{request.method} {escape_control(request.path[:200])}", e, log)
            )
        if request.method == "CONNECT":  # the parser now treats the connection as a tunnel
            response.force_close()
        return response

    async def _body(self, request: web.BaseRequest, limit: int = SMALL_BODY_BYTES) -> bytes:
        if not request.body_exists:
            return b""
        return await read_body(request, limit, self.header_timeout_s)

    def _refused(self, request: web.BaseRequest, category: str) -> web.Response | None:
        restriction = self.restrictions.get(category)
        if restriction is None or restriction.allows(request.headers.get(restriction.header)):
            return None
        return error_response(403, restriction.http_refusal())

    async def _route(self, request: web.BaseRequest) -> web.StreamResponse:
        path = request.raw_path.split("?", 1)[0]
        parts = [unquote(p) for p in path.split("/")]
        n = len(parts)
        if n < 2 or parts[0] != "" or parts[1] != "v2":
            return self._not_found()
        if n >= 4 and parts[2] == "models" and path not in ("/v2/models/stats",):
            response = await self._model_route(request, parts[3], parts[4:])
            if response is not None:
                return response
        if path == "/v2/models/stats":
            return await self._guarded(request, "statistics", ("GET",), self._stats, "", "")
        if path == "/v2/logging":
            return await self._guarded(request, "logging", ("GET", "POST"), self._logging)
        if n == 2:
            return await self._guarded(request, "metadata", ("GET",), self._server_metadata)
        if n == 4 and parts[2] == "health" and parts[3] in ("live", "ready"):
            return await self._health(request, parts[3])
        if parts[2] in ("systemsharedmemory", "cudasharedmemory"):
            region = ""
            rest = parts[3:]
            if len(rest) == 3 and rest[0] == "region" and rest[1]:
                region, rest = rest[1], rest[2:]
            if len(rest) == 1 and rest[0] in ("status", "register", "unregister"):
                cuda = parts[2] == "cudasharedmemory"
                return await self._guarded(request, "shared-memory", ("GET", "POST"), self._shm, cuda, region, rest[0])
        if parts[2] == "repository":
            rest = parts[3:]
            repo = ""
            if rest and rest[0] not in ("index", "models"):
                repo, rest = rest[0], rest[1:]
            if rest == ["index"]:
                return await self._guarded(request, "model-repository", ("POST",), self._index, repo)
            if len(rest) == 3 and rest[0] == "models" and rest[1] and rest[2] in ("load", "unload"):
                return await self._guarded(
                    request,
                    "model-repository",
                    ("POST",),
                    self._control,
                    repo,
                    rest[1],
                    rest[2],
                    limit=self.max_body_bytes if rest[2] == "load" else SMALL_BODY_BYTES,
                )
        if path == "/v2/trace/setting":
            return await self._guarded(request, "trace", ("GET", "POST"), self._trace, "")
        return self._not_found()

    async def _model_route(self, request, name: str, rest: list[str]) -> web.StreamResponse | None:
        if not name:
            return None
        version = ""
        if len(rest) >= 2 and rest[0] == "versions":
            if not rest[1].isascii() or not rest[1].isdigit():
                return None
            version, rest = rest[1], rest[2:]
        kind = "/".join(rest)
        if kind == "":
            return await self._guarded(request, "metadata", ("GET",), self._model_metadata, name, version)
        if kind == "infer":
            refused = self._refused(request, "inference")
            if refused is not None:
                return refused
            if request.method != "POST":
                return self._not_allowed()
            return await self._infer(request, name, version)
        if kind == "ready":
            return await self._model_ready(request, name, version)
        if kind == "config":
            return await self._guarded(request, "model-config", ("GET",), self._model_config, name, version)
        if kind == "stats":
            return await self._guarded(request, "statistics", ("GET",), self._stats, name, version)
        if kind == "trace/setting" and not version:
            return await self._guarded(request, "trace", ("GET", "POST"), self._trace, name)
        return None

    @staticmethod
    def _not_found() -> web.Response:
        return web.Response(status=404, body=_NOT_FOUND, content_type=_JSON)

    @staticmethod
    def _not_allowed() -> web.Response:
        return web.Response(status=405, body=_NOT_ALLOWED, content_type=_JSON)

    async def _guarded(
        self, request, category: str, methods: tuple[str, ...], fn, *args, limit: int = SMALL_BODY_BYTES
    ) -> web.StreamResponse:
        """Triton's prologue for every API: the restriction, then the method; then the
        handler, whose InferenceError becomes its status and ``{"error": text}``."""
        refused = self._refused(request, category)
        if refused is not None:
            return refused
        if request.method not in methods:
            return self._not_allowed()
        body = await self._body(request, limit)
        try:
            return await fn(request, body, *args)
        except InferenceError as e:
            return inference_error_response(e)

    # ------------------------------------------------------------------ health
    async def _health(self, request, kind: str) -> web.StreamResponse:
        refused = self._refused(request, "health")
        if refused is not None:
            return refused
        if request.method not in ("GET", "HEAD"):
            return self._not_allowed()
        await self._body(request)
        dp = self.dataplane
        try:
            ok = await (dp.live() if kind == "live" else dp.ready())
        except InferenceError as e:  # the server is exiting: Triton's status and text
            return inference_error_response(e)
        return web.Response(status=200 if ok else 400, content_type="text/plain")

    async def _model_ready(self, request, name: str, version: str) -> web.StreamResponse:
        refused = self._refused(request, "health")
        if refused is not None:
            return refused
        if request.method not in ("GET", "HEAD"):
            return self._not_allowed()
        await self._body(request)
        try:
            ready = await self.dataplane.model_ready(name, version)
        except InferenceError as e:
            return inference_error_response(e)
        if not ready:
            return error_response(400, "Model version not ready")
        return web.Response(status=200, content_type="text/plain")

    # ------------------------------------------------------------------ metadata, config, stats
    async def _server_metadata(self, request, body) -> web.Response:
        info = await self.dataplane.server_metadata()
        extensions = [*info.extensions, "binary_tensor_data"]
        return json_response({"name": info.name, "version": info.version, "extensions": extensions})

    async def _model_metadata(self, request, body, name: str, version: str) -> web.Response:
        return json_response(await common.model_metadata(self.dataplane, name, version))

    async def _model_config(self, request, body, name: str, version: str) -> web.Response:
        model = await self.dataplane.model(name, version)
        return json_response(mc.triton_json(model.config))

    async def _stats(self, request, body, name: str, version: str) -> web.Response:
        rows = await common.model_statistics(self.dataplane, name, version)
        for row in rows:
            row["inference_stats"] |= _UNMEASURED_INFER_STATS
            row["memory_usage"] = []
        return json_response({"model_stats": rows})

    # ------------------------------------------------------------------ repository
    @staticmethod
    def _json_body(body: bytes, what: str) -> dict:
        if not body:
            return {}
        value = codec.parse_json(body, what)
        if not isinstance(value, dict):
            raise invalid_argument(f"failed to parse the {what} JSON buffer: the document is not an object")
        return value

    async def _index(self, request, body, repo: str) -> web.Response:
        # (a repository name in the path is ignored by the index, as in Triton 2.51)
        req = self._json_body(body, "registry index")
        ready = False
        if "ready" in req:
            if not isinstance(req["ready"], bool):
                raise invalid_argument(codec.NOT_BOOL)
            ready = req["ready"]
        rows = []
        for name, version, state, reason in await self.dataplane.repository_index(ready):
            row = {"name": name}
            if version:
                row["version"] = version
            if state:
                row["state"] = state
            if reason:
                row["reason"] = reason
            rows.append(row)
        return json_response(rows)

    async def _control(self, request, body, repo: str, name: str, action: str) -> web.Response:
        common.refuse_repository_name(repo)
        if action == "unload":
            req = self._json_body(body, "unload model")
            params = req.get("parameters") or {}
            unload_dependents = False
            if isinstance(params, dict) and "unload_dependents" in params:
                unload_dependents = codec.as_bool(params["unload_dependents"], "unload_dependents")
            await self.dataplane.unload(name, unload_dependents)
            return web.Response(status=200, content_type=_JSON)
        req = self._json_body(body, "load model")
        params = req.get("parameters", {})
        if not isinstance(params, dict):
            raise invalid_argument(f"Unable to parse 'parameters': {codec.NOT_OBJECT}")
        # every value is a JSON string, checked as it is reached (before its key's meaning)
        strings = ((key, codec.as_string(value, key)) for key, value in params.items())
        config_json, files = common.load_parameters(strings, _config_text, _file_bytes)
        await self.dataplane.load(name, config_json, files)
        return web.Response(status=200, content_type=_JSON)

    # ------------------------------------------------------------------ shared memory
    async def _shm(self, request, body, cuda: bool, region: str, action: str) -> web.Response:
        dp = self.dataplane
        if action == "status":
            if request.method != "GET":
                return self._not_allowed()
            if cuda:
                await dp.cuda_shm_status(region)
                return json_response([])
            regions = await dp.shm_status(region)
            return json_response(
                [{"name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size} for r in regions]
            )
        if request.method != "POST":
            return self._not_allowed()
        if action == "unregister":
            await (dp.cuda_shm_unregister(region) if cuda else dp.shm_unregister(region))
            return web.Response(status=200, content_type=_JSON)
        if cuda:
            await dp.cuda_shm_register()
            return web.Response(status=200, content_type=_JSON)
        req = self._json_body(body, "shared memory register")
        if "key" not in req:
            raise invalid_argument("Shared memory register request has no 'key' field")
        key = codec.as_string(req["key"], "key")
        offset = codec.as_uint(req.get("offset", 0), "offset")
        if "byte_size" not in req:
            raise invalid_argument("Shared memory register request has no 'byte_size' field")
        size = codec.as_uint(req["byte_size"], "byte_size")
        await dp.shm_register(region, key, offset, size)
        return web.Response(status=200, content_type=_JSON)

    # ------------------------------------------------------------------ settings
    async def _logging(self, request, body) -> web.Response:
        settings = self._json_body(body, "log settings") if request.method == "POST" else {}
        return json_response(await self.dataplane.update_log_settings(settings))

    async def _trace(self, request, body, model: str) -> web.Response:
        settings: dict[str, list[str]] = {}
        if request.method == "POST":
            for key, value in self._json_body(body, "trace setting").items():
                if value is None:
                    settings[key] = []
                elif isinstance(value, list) and all(isinstance(v, str) for v in value):
                    settings[key] = value
                elif isinstance(value, str):
                    settings[key] = [value]
                else:
                    raise invalid_argument(f"expect an array or a string for trace setting '{key}'")
        current = await self.dataplane.trace_settings(model, settings)
        return json_response({k: (v if k == "trace_level" else (v[0] if v else "")) for k, v in current.items()})

    # ------------------------------------------------------------------ inference
    async def _infer(self, request: web.BaseRequest, name: str, version: str) -> web.StreamResponse:
        dp = self.dataplane
        try:
            model = await dp.model(name, version)
            if model.decoupled:
                raise unimplemented("HTTP end point doesn't support models with decoupled transaction policy")
            body = await read_body(request, self.max_body_bytes, self.header_timeout_s)
            encoding = request.headers.get("Content-Encoding", "identity")
            if encoding in ("gzip", "deflate"):
                if len(body) > _OFFLOAD_BYTES:
                    loop = asyncio.get_running_loop()
                    body = await loop.run_in_executor(None, inflate, body, encoding, self.max_body_bytes)
                else:
                    body = inflate(body, encoding, self.max_body_bytes)
            elif encoding not in ("identity", ""):
                raise unimplemented("Unsupported compression type")
            mv = memoryview(body)
            header_length = _header_length(request.headers.get(codec.HEADER_LENGTH), len(body))
            if header_length == 0:
                wire, plan = codec.collect_raw(mv, model)
            else:
                header = codec.parse_json(mv[:header_length])
                wire, plan = codec.collect(header, mv[header_length:], model, dp.shm)
            if self.forwarding is not None:  # (Triton 26.05's place: once the request is parsed)
                forward_headers(self.forwarding.select(request.headers.items()), wire.parameters)
            if dp.tracing_active:  # the client's W3C trace context, only while tracing
                wire.traceparent = request.headers.get("traceparent", "")
            encoded = await dp.infer(wire)
            shm_outputs = {o.spec.name for o in wire.outputs if o.shm is not None}
            head, binaries = codec.build_response(model, wire.id, encoded, plan, shm_outputs)
        except InferenceError as e:
            return inference_error_response(e)
        headers = {}
        if binaries:
            headers[codec.HEADER_LENGTH] = str(len(head))
            body_out = head + b"".join(binaries) if len(binaries) > 1 or len(binaries[0]) < 65536 else None
        else:
            body_out = head
        coding = accepted_encoding(request.headers.get("Accept-Encoding"))
        if coding != "identity":
            whole = body_out if body_out is not None else head + b"".join(binaries)
            if len(whole) > _OFFLOAD_BYTES:
                whole = await asyncio.get_running_loop().run_in_executor(None, compress, whole, coding)
            else:
                whole = compress(whole, coding)
            headers["Content-Encoding"] = coding
            return web.Response(body=whole, headers=headers, content_type=_JSON if not binaries else None)
        if body_out is not None:
            return web.Response(body=body_out, headers=headers, content_type=_JSON if not binaries else None)
        # one large binary output: written after the header without joining them (one copy out)
        response = web.StreamResponse(headers=headers)
        response.content_length = len(head) + len(binaries[0])
        response.content_type = "application/octet-stream"
        await response.prepare(request)
        await response.write(head)
        await response.write(binaries[0])
        await response.write_eof()
        return response


def _config_text(key: str, value: str) -> str:
    return value


def _file_bytes(key: str, value: str) -> bytes:
    """A ``file:`` load parameter: its content, base64."""
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise invalid_argument(f"unable to decode base64 content of '{key}'") from None


_INTEGER = re.compile(r"[+-]?[0-9]+")


def _header_length(value: str | None, content_length: int) -> int | None:
    """``Inference-Header-Content-Length`` (None: the whole body is JSON), checked as Triton does."""
    if value is None:
        return content_length
    text = value.strip()
    if _INTEGER.fullmatch(text) is None:
        raise invalid_argument(f"Unable to parse {codec.HEADER_LENGTH}, got: {value}")
    # more than 10 significant digits is out of int32's range whatever they are (and int() of
    # a client's thousands of digits would cost quadratic time)
    parsed = int(text) if len(text.lstrip("+-").lstrip("0")) <= 10 else 2**31
    if not -(2**31) <= parsed < 2**31:
        raise invalid_argument(
            f"Unable to parse {codec.HEADER_LENGTH}, value is out of range [ {-(2**31)}, {2**31 - 1} ], got: {value}"
        )
    if parsed < 0 or parsed > content_length:
        raise invalid_argument(f"inference header size should be in range (0, {content_length}), got: {value}")
    return parsed


# ----------------------------------------------------------------------------- /metrics


class MetricsFrontend:
    """Prometheus text on ``GET /metrics`` (``render() -> bytes``), in the engine's process:
    it reads the statistics on the event loop thread that writes them."""

    def __init__(self, render, *, header_timeout_s: float = 10.0, idle_timeout_s: float = 60.0):
        self.render = render
        self.header_timeout_s = header_timeout_s
        self.listener = HttpListener(
            self.handle,
            header_timeout_s=header_timeout_s,
            idle_timeout_s=idle_timeout_s,
            max_connections=DEFAULT_MAX_CONNECTIONS,
        )

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        try:
            if request.version.major != 1:
                raise HttpReject(505)
            if request.method not in ("GET", "HEAD"):
                response = web.Response(status=405, body=_NOT_ALLOWED, content_type=_JSON)
                if request.method == "CONNECT":
                    response.force_close()
                return response
            if request.body_exists:
                await read_body(request, SMALL_BODY_BYTES, self.header_timeout_s)
        except HttpReject as r:
            response = web.Response(status=r.status, content_type="text/plain")
            response.force_close()
            return response
        if request.raw_path.split("?", 1)[0].rstrip("/") != "/metrics":
            return web.Response(status=404, content_type="text/plain")
        body = self.render()
        if inspect.isawaitable(body):  # --engine-processes N > 1: the other engines are asked
            body = await body
        return web.Response(body=body, headers={"Content-Type": _METRICS_TYPE})

    async def start(self, address: str, port: int, reuse_port: bool = False) -> int:
        return await self.listener.start(address, port, reuse_port)

    async def stop(self) -> None:
        await self.listener.stop()


_METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
