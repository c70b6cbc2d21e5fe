"""The gRPC listener: grpcio server options, TLS credentials and binding, as tritonserver does.

Used by the engine's process when it serves gRPC itself (``--frontend-processes 1``) and by
each frontend process otherwise (all of them bound to one port with SO_REUSEPORT).
"""

from __future__ import annotations

import logging
import socket
import ssl

import grpc

from ..errors import StartupError
from .access import Restriction
from .grpc import HealthServicer, InferenceServicer

log = logging.getLogger("fpgaserve")


def resolve_bind_address(host: str) -> list[str]:
    """The numeric addresses ``host`` names, as the C library resolves it.

    grpc-core resolves bind addresses with its own resolver, which refuses spellings
    getaddrinfo accepts and tritonserver therefore binds: cmsTriton has passed ``127.0.01``
    (inet_aton reads it as 127.0.0.1). Resolving here keeps tritonserver's behaviour; a
    name that resolves to several addresses (``localhost``: ::1 and 127.0.0.1) binds them all.
    """
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    infos = socket.getaddrinfo(bare or None, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    seen: list[str] = []
    for family, _, _, _, sockaddr in infos:
        ip = str(sockaddr[0])
        text = f"[{ip}]" if family == socket.AF_INET6 else ip
        if text not in seen:
            seen.append(text)
    return seen


def _bind_refusal(address: str, port: int) -> str | None:
    """Why ``address:port`` (numeric) cannot be bound now, in the system's words (strerror);
    None if it can. The probe sets SO_REUSEADDR (as grpc-core and aiohttp bind, so a port with
    only TIME_WAIT connections left counts as free) and never SO_REUSEPORT, so a port that any
    listener holds, one that shares it with SO_REUSEPORT included, counts as taken."""
    bare = address[1:-1] if address.startswith("[") else address
    family = socket.AF_INET6 if ":" in bare else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((bare, port))
        except OSError as e:
            return e.strerror or str(e)
    return None


def _bind_error(address: str, port: int) -> str:
    """Why ``address:port`` (numeric) could not be bound, in the system's words (strerror)."""
    return _bind_refusal(address, port) or "grpcio refused it"


def port_refusal(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be bound now (strerror, e.g. ``Address already in use``), or
    None. Checked before listeners that share their port with SO_REUSEPORT bind (the frontend
    processes): such a bind succeeds next to another server of the same user that did the same,
    so without this check a second server would co-bind silently instead of failing as
    tritonserver does (cmsTriton retries other ports when it reads "Address already in use")."""
    if port <= 0:  # any free port
        return None
    try:
        addresses = resolve_bind_address(host)
    except socket.gaierror as e:
        return e.strerror
    for address in addresses:
        why = _bind_refusal(address, port)
        if why is not None:
            return why
    return None


def grpc_credentials(o) -> grpc.ServerCredentials | None:
    """TLS as tritonserver configures it (--grpc-use-ssl[-mutual], PEM files); None = plaintext.
    A missing or unusable file is a ``StartupError`` that names it."""
    if not o.grpc_use_ssl:
        return None

    def read(flag: str, path: str) -> bytes:
        if not path:
            raise StartupError(f"--grpc-use-ssl needs {flag}")
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as e:
            raise StartupError(f"cannot read {flag} {path}: {e.strerror}") from None

    cert = read("--grpc-server-cert", o.grpc_server_cert)
    key = read("--grpc-server-key", o.grpc_server_key)
    root = read("--grpc-root-cert", o.grpc_root_cert) if (o.grpc_root_cert or o.grpc_use_ssl_mutual) else None
    # gRPC only finds out at bind time, as an anonymous RuntimeError; check them here so
    # the error names the file and the problem
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(o.grpc_server_cert, o.grpc_server_key)
    except (ssl.SSLError, OSError) as e:
        why = e.reason if isinstance(e, ssl.SSLError) else e
        raise StartupError(
            f"--grpc-server-cert {o.grpc_server_cert} and --grpc-server-key {o.grpc_server_key} "
            f"are not a PEM certificate chain and its private key ({why})"
        ) from None
    if root is not None:
        try:
            context.load_verify_locations(cadata=root.decode("ascii", "replace"))
        except (ssl.SSLError, ValueError) as e:
            raise StartupError(f"--grpc-root-cert {o.grpc_root_cert} holds no PEM CA certificate ({e})") from None
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=root, require_client_auth=o.grpc_use_ssl_mutual)


class GrpcListener:
    """One grpc.aio server for ``servicer``, configured from the server options."""

    def __init__(
        self, options, servicer: InferenceServicer, restrictions: dict[str, Restriction], reuse_port: bool | None = None
    ):
        self.options = options
        self.servicer = servicer
        self.restrictions = restrictions
        self.reuse_port = options.reuse_grpc_port if reuse_port is None else reuse_port
        self._grpc: grpc.aio.Server | None = None
        self.port: int | None = None

    def _grpc_options(self):
        o = self.options
        size = o.grpc_max_message_size
        return (
            [
                ("grpc.max_receive_message_length", size),
                ("grpc.max_send_message_length", size),
                ("grpc.keepalive_time_ms", o.grpc_keepalive_time_ms),
                ("grpc.keepalive_timeout_ms", o.grpc_keepalive_timeout_ms),
                ("grpc.keepalive_permit_without_calls", int(o.grpc_keepalive_permit_without_calls)),
                ("grpc.http2.max_pings_without_data", o.grpc_http2_max_pings_without_data),
                # (grpc-core's name for the minimum interval between received pings; the
                # "min_recv_..." spelling is silently ignored and leaves the 5-minute default)
                ("grpc.http2.min_ping_interval_without_data_ms", o.grpc_http2_min_recv_ping_interval_without_data_ms),
                ("grpc.http2.max_ping_strikes", o.grpc_http2_max_ping_strikes),
                ("grpc.max_concurrent_streams", o.grpc_max_concurrent_streams),
                # grpc-core otherwise refuses (RST_STREAM REFUSED_STREAM) a stream that arrives
                # while the previous one still counts against the limit; clients must queue, not fail
                ("grpc.http.overload_protection", 0),
                # off by default: a second server on a taken port must fail ("Address already in
                # use", which cmsTriton watches for to pick other ports), not silently share it
                ("grpc.so_reuseport", int(self.reuse_port)),
                # grpc.aio takes RPCs from grpc-core one at a time, on the event loop; a burst waits
                # in core's queue of not-yet-requested calls, and past 1,000 of them (the default
                # soft limit; hard limit 3,000) core refuses new calls at random, which clients see
                # as CANCELLED. A fan-in of thousands of connections must queue, not fail: no
                # random refusals below 65,536 waiting calls, a refusal for each one above (and a
                # call still waiting after grpc.server_max_unrequested_time_in_server, 30 s, is
                # dropped, as before).
                ("grpc.server.max_pending_requests", 65536),
                ("grpc.server.max_pending_requests_hard_limit", 65536),
            ]
            + (
                [
                    ("grpc.max_connection_age_ms", o.grpc_max_connection_age_ms),
                ]
                if o.grpc_max_connection_age_ms > 0
                else []
            )
            + (
                [
                    ("grpc.max_connection_age_grace_ms", o.grpc_max_connection_age_grace_ms),
                ]
                if o.grpc_max_connection_age_grace_ms > 0
                else []
            )
        )

    async def start(self, announce: bool = True) -> int:
        """Bind and start serving; the port bound. ``StartupError`` (naming the address and the
        system's reason) when TLS is unusable or the address cannot be bound."""
        o = self.options
        credentials = grpc_credentials(o)
        self._grpc = grpc.aio.server(options=self._grpc_options())
        restrictions = self.restrictions
        self._grpc.add_generic_rpc_handlers(
            (
                self.servicer.generic_handler(restrictions),
                HealthServicer(self.servicer).generic_handler(restrictions),
            )
        )
        try:
            addresses = resolve_bind_address(o.grpc_address)
        except socket.gaierror as e:
            raise StartupError(f"cannot bind gRPC to {o.grpc_address}:{o.grpc_port}: {e.strerror}") from None
        port = o.grpc_port
        for address in addresses:
            try:
                if credentials is None:
                    bound = self._grpc.add_insecure_port(f"{address}:{port}")
                else:
                    bound = self._grpc.add_secure_port(f"{address}:{port}", credentials)
            except RuntimeError:  # grpcio raises instead of returning 0 on a taken port
                bound = 0
            if bound == 0:
                # grpcio says only "Failed to bind"; a plain socket tells why in the system's
                # words ("Address already in use", which cmsTriton watches for to retry on
                # other ports)
                raise StartupError(f"cannot bind gRPC to {o.grpc_address}:{port}: {_bind_error(address, port)}")
            port = bound  # port 0: the other addresses of the name take the same port
        self.port = port
        await self._grpc.start()
        if announce:
            # tritonserver prints exactly this; launchers (cmsTriton) wait for it
            log.info("Started GRPCInferenceService at %s:%d", o.grpc_address, port)
        return port

    async def stop(self, grace: float | None) -> None:
        if self._grpc is not None:
            await self._grpc.stop(grace=grace)
