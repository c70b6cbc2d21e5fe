"""The running server: wires repository, shared memory, servicers and listeners together.

Shutdown (SIGTERM/SIGINT): ServerReady turns false, the gRPC server stops accepting new
RPCs and lets in-flight ones finish for up to ``exit_timeout_secs``, then the repository
drains its schedulers and releases the models; the process exits 0.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import ssl
from dataclasses import dataclass, field

import grpc

from .access import RestrictionError, grpc_restrictions, http_restrictions
from .grpc_service import HealthServicer, InferenceServicer
from .http_server import HealthRoutes, TinyHttpServer, metrics_route
from .log_settings import LogSettings
from .metrics import Metrics
from .repository import ModelRepository
from .shared_memory import SystemSharedMemoryManager

log = logging.getLogger("fpgaserve")

INT32_MAX = 2**31 - 1


@dataclass
class ServerOptions:
    model_repositories: list[str]
    grpc_address: str = "0.0.0.0"
    grpc_port: int = 8001
    http_address: str = "0.0.0.0"
    http_port: int = 8000  # -1 disables
    metrics_address: str = "0.0.0.0"
    metrics_port: int = 8002  # -1 disables
    model_control_mode: str = "none"
    load_models: list[str] = field(default_factory=list)
    repository_poll_secs: float = 15.0
    strict_readiness: bool = True
    exit_on_error: bool = False
    exit_timeout_secs: float = 30.0
    grpc_max_message_size: int = INT32_MAX
    log_verbose: int = 0
    log_file: str = ""
    log_format: str = "default"
    # keepalive: a ping flood (pings without data, more than two of them sooner than 500 ms
    # after the previous one) gets a GOAWAY; clients pinging every second, with scheduling
    # jitter, are never cut (tritonclient's keepalive test pings at 1 s)
    grpc_keepalive_time_ms: int = 7_200_000
    grpc_keepalive_timeout_ms: int = 20_000
    grpc_keepalive_permit_without_calls: bool = True
    grpc_http2_max_pings_without_data: int = 0
    grpc_http2_min_recv_ping_interval_without_data_ms: int = 500
    grpc_http2_max_ping_strikes: int = 2
    # {backend: {setting: value}}, tritonserver's --backend-config (the hls4ml backend's
    # fpga-mode lives here)
    backend_config: dict = field(default_factory=dict)
    grpc_max_concurrent_streams: int = 1024
    http_header_timeout_secs: float = 10.0
    http_idle_timeout_secs: float = 60.0
    # tritonserver's --grpc-restricted-protocol / --http-restricted-api option strings
    grpc_restricted_protocols: list[str] = field(default_factory=list)
    http_restricted_apis: list[str] = field(default_factory=list)
    grpc_use_ssl: bool = False
    grpc_use_ssl_mutual: bool = False
    grpc_server_cert: str = ""
    grpc_server_key: str = ""
    grpc_root_cert: str = ""
    allow_log_file_update: bool = False
    allow_model_code_upload: bool = False
    max_shm_regions: int = 1024
    model_unload_timeout_secs: float = 30.0


class InferenceServer:
    def __init__(self, options: ServerOptions):
        self.options = options
        try:
            self.grpc_restrictions = grpc_restrictions(options.grpc_restricted_protocols)
            self.http_restrictions = http_restrictions(options.http_restricted_apis)
        except RestrictionError as e:
            raise SystemExit(f"error: {e}") from None
        self.log_settings = LogSettings(
            options.log_verbose, options.log_file, options.log_format,
            allow_log_file_update=options.allow_log_file_update,
        )
        self.shm = SystemSharedMemoryManager(max_regions=options.max_shm_regions)
        self.repository = ModelRepository(
            options.model_repositories,
            control_mode=options.model_control_mode,
            startup_models=options.load_models,
            poll_secs=options.repository_poll_secs,
            shm=self.shm,
            strict_readiness=options.strict_readiness,
            backend_config=options.backend_config,
            unload_timeout_secs=options.model_unload_timeout_secs,
            allow_code_upload=options.allow_model_code_upload,
        )
        self.servicer = InferenceServicer(self.repository, self.shm, self.log_settings)
        timeouts = dict(
            header_timeout_s=options.http_header_timeout_secs, idle_timeout_s=options.http_idle_timeout_secs
        )
        self.http = TinyHttpServer(HealthRoutes(self.servicer, self.http_restrictions), **timeouts)
        self.metrics = Metrics(self.repository)
        self.metrics_http = TinyHttpServer(metrics_route(self.metrics.render), **timeouts)
        self._grpc: grpc.aio.Server | None = None
        self._stopped = asyncio.Event()
        self.grpc_port = None
        self.http_port = None
        self.metrics_port = None
        self.abandoned = False  # set when shutdown gave up on a stuck backend

    def _grpc_options(self):
        o = self.options
        size = o.grpc_max_message_size
        return [
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
            ("grpc.so_reuseport", 0),
        ]

    def _grpc_credentials(self) -> grpc.ServerCredentials | None:
        """TLS as tritonserver configures it (--grpc-use-ssl[-mutual], PEM files); None = plaintext."""
        o = self.options
        if not o.grpc_use_ssl:
            return None

        def read(flag: str, path: str) -> bytes:
            if not path:
                raise SystemExit(f"error: --grpc-use-ssl needs {flag}")
            try:
                with open(path, "rb") as f:
                    return f.read()
            except OSError as e:
                raise SystemExit(f"error: cannot read {flag} {path}: {e.strerror}") from None

        cert = read("--grpc-server-cert", o.grpc_server_cert)
        key = read("--grpc-server-key", o.grpc_server_key)
        root = read("--grpc-root-cert", o.grpc_root_cert) if (o.grpc_root_cert or o.grpc_use_ssl_mutual) else None
        # gRPC only finds out at bind time, as an anonymous RuntimeError; check them here so
        # the error names the file and the problem
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_cert_chain(o.grpc_server_cert, o.grpc_server_key)
        except (ssl.SSLError, OSError) as e:
            raise SystemExit(
                f"error: --grpc-server-cert {o.grpc_server_cert} and --grpc-server-key {o.grpc_server_key} "
                f"are not a PEM certificate chain and its private key ({e.reason if isinstance(e, ssl.SSLError) else e})"
            ) from None
        if root is not None:
            try:
                context.load_verify_locations(cadata=root.decode("ascii", "replace"))
            except (ssl.SSLError, ValueError) as e:
                raise SystemExit(f"error: --grpc-root-cert {o.grpc_root_cert} holds no PEM CA certificate ({e})") from None
        return grpc.ssl_server_credentials(
            [(key, cert)], root_certificates=root, require_client_auth=o.grpc_use_ssl_mutual
        )

    async def start(self) -> None:
        o = self.options
        await self.repository.start()
        if o.exit_on_error and not self.repository.all_ready():
            raise SystemExit("error: some models failed to load and --exit-on-error is set")
        try:
            credentials = self._grpc_credentials()
        except SystemExit:
            await self.repository.stop()
            raise
        self._grpc = grpc.aio.server(options=self._grpc_options())
        restrictions = self.grpc_restrictions
        self._grpc.add_generic_rpc_handlers(
            (
                self.servicer.generic_handler(restrictions),
                HealthServicer(self.servicer).generic_handler(restrictions),
            )
        )
        address = f"{o.grpc_address}:{o.grpc_port}"
        try:
            if credentials is None:
                self.grpc_port = self._grpc.add_insecure_port(address)
            else:
                self.grpc_port = self._grpc.add_secure_port(address, credentials)
        except RuntimeError:  # grpcio raises instead of returning 0 on a taken port (or bad key)
            self.grpc_port = 0
        if self.grpc_port == 0:
            await self.repository.stop()
            raise SystemExit(f"error: cannot bind gRPC to {o.grpc_address}:{o.grpc_port} (address in use?)")
        await self._grpc.start()
        # tritonserver prints exactly this; launchers (cmsTriton) wait for it
        log.info("Started GRPCInferenceService at %s:%d", o.grpc_address, self.grpc_port)
        if o.http_port >= 0:
            try:
                self.http_port = await self.http.start(o.http_address, o.http_port)
            except OSError as e:
                await self._grpc.stop(grace=0)
                await self.repository.stop()
                raise SystemExit(f"error: cannot bind HTTP to {o.http_address}:{o.http_port}: {e.strerror}")
            log.info("Started HTTPService at %s:%d (health endpoints)", o.http_address, self.http_port)
        if o.metrics_port >= 0:
            try:
                self.metrics_port = await self.metrics_http.start(o.metrics_address, o.metrics_port)
            except OSError as e:
                await self._grpc.stop(grace=0)
                await self.http.stop()
                await self.repository.stop()
                raise SystemExit(f"error: cannot bind metrics to {o.metrics_address}:{o.metrics_port}: {e.strerror}")
            log.info("Started Metrics Service at %s:%d", o.metrics_address, self.metrics_port)

    async def stop(self) -> None:
        """Drain, then release. Everything shares one --exit-timeout-secs budget: a backend
        stuck inside execute() must not keep the process alive past it (``abandoned`` tells
        the caller to exit without waiting for that thread)."""
        self.servicer.exiting = True
        timeout = self.options.exit_timeout_secs
        deadline = asyncio.get_running_loop().time() + timeout
        log.info("shutting down: draining in-flight requests (up to %.0f s)", timeout)
        if self._grpc is not None:
            await self._grpc.stop(grace=timeout)
        await self.http.stop()
        await self.metrics_http.stop()
        remaining = max(0.1, deadline - asyncio.get_running_loop().time())
        try:
            await asyncio.wait_for(self.repository.stop(), timeout=remaining)
        except asyncio.TimeoutError:
            self.abandoned = True
            log.error("models did not finish within --exit-timeout-secs; exiting without them")
        self.shm.close()
        log.info("server stopped")
        self._stopped.set()

    async def serve_forever(self) -> None:
        await self.start()
        loop = asyncio.get_running_loop()
        stop_requested = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop_requested.set)
        await stop_requested.wait()
        await self.stop()
