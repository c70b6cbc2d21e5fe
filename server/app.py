"""The running server: wires the engine (repository), the data plane and the frontends together.

A server that cannot start (a malformed option, an unusable TLS file, a port it cannot bind,
a model that failed with --exit-on-error) raises ``StartupError``; the command line turns it
into its ``error:`` line and exit status.

Shutdown (SIGTERM/SIGINT): ServerReady turns false, the gRPC server stops accepting new
RPCs and lets in-flight ones finish for up to ``exit_timeout_secs``, then the repository
drains its schedulers and releases the models; the process exits 0.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .dataplane import DataPlane
from .engine.latency import MetricsConfigError, parse_metrics_config
from .engine.repository import ModelRepository
from .engine.tracing import TraceConfigError, Tracer, parse_trace_config
from .errors import StartupError
from .frontends.access import RestrictionError, grpc_restrictions, http_restrictions
from .frontends.grpc import InferenceServicer
from .frontends.grpc_listener import GrpcListener, grpc_credentials, port_refusal
from .frontends.http import DEFAULT_MAX_BODY_BYTES, HttpFrontend, MetricsFrontend, http_ssl_context
from .log_settings import LogSettings
from .metrics import Metrics
from .shared_memory import SystemSharedMemoryManager

if TYPE_CHECKING:
    from .ipc.supervisor import FrontendSupervisor

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
    # request body limit (inference, model load), tritonserver's --http-max-input-size
    http_max_input_size: int = DEFAULT_MAX_BODY_BYTES
    # tritonserver's --grpc-restricted-protocol / --http-restricted-api option strings
    grpc_restricted_protocols: list[str] = field(default_factory=list)
    http_restricted_apis: list[str] = field(default_factory=list)
    grpc_use_ssl: bool = False
    grpc_use_ssl_mutual: bool = False
    grpc_server_cert: str = ""
    grpc_server_key: str = ""
    grpc_root_cert: str = ""
    # HTTPS on --http-port (fpgaserve's flags; tritonserver has none)
    http_use_ssl: bool = False
    http_server_cert: str = ""
    http_server_key: str = ""
    allow_log_file_update: bool = False
    allow_model_code_upload: bool = False
    max_shm_regions: int = 1024
    model_unload_timeout_secs: float = 30.0
    # tritonserver's flags of the same names (see docs/deployment.md and the command-line page of the docs)
    server_id: str = "triton"
    auto_complete_config: bool = True
    allow_grpc: bool = True
    allow_http: bool = True
    allow_metrics: bool = True
    allow_gpu_metrics: bool = True
    allow_cpu_metrics: bool = True
    reuse_grpc_port: bool = False
    reuse_http_port: bool = False
    grpc_max_connection_age_ms: int = 0  # 0 = unlimited
    grpc_max_connection_age_grace_ms: int = 0
    allow_client_shm: bool = False  # tritonserver >= 26.04's default
    metrics_config: list[str] = field(default_factory=list)  # --metrics-config key=value settings
    trace_config: list[str] = field(default_factory=list)  # --trace-config [mode,]key=value settings
    log_info: bool = True
    log_warning: bool = True
    log_error: bool = True
    # gRPC frontend processes sharing the port (1 = gRPC in the engine's process, no IPC)
    frontend_processes: int = 1
    arena_bytes: int = 1 << 30


class InferenceServer:
    def __init__(self, options: ServerOptions):
        self.options = options
        try:
            self.grpc_restrictions = grpc_restrictions(options.grpc_restricted_protocols)
            self.http_restrictions = http_restrictions(options.http_restricted_apis)
        except RestrictionError as e:
            raise StartupError(str(e)) from None
        self.log_settings = LogSettings(
            options.log_verbose,
            options.log_file,
            options.log_format,
            allow_log_file_update=options.allow_log_file_update,
            log_info=options.log_info,
            log_warning=options.log_warning,
            log_error=options.log_error,
        )
        self.shm = SystemSharedMemoryManager(
            max_regions=options.max_shm_regions, allow_client_shm=options.allow_client_shm
        )
        try:
            latency = parse_metrics_config(options.metrics_config)
            tracer = Tracer(parse_trace_config(options.trace_config))
        except (MetricsConfigError, TraceConfigError) as e:
            raise StartupError(str(e)) from None
        self.repository = ModelRepository(
            options.model_repositories,
            control_mode=options.model_control_mode,
            startup_models=options.load_models,
            poll_secs=options.repository_poll_secs,
            strict_readiness=options.strict_readiness,
            backend_config=options.backend_config,
            unload_timeout_secs=options.model_unload_timeout_secs,
            allow_code_upload=options.allow_model_code_upload,
            auto_complete_config=options.auto_complete_config,
            latency=latency,
        )
        self.dataplane = DataPlane(
            self.repository, self.shm, self.log_settings, server_id=options.server_id, tracer=tracer
        )
        self.servicer = InferenceServicer(self.dataplane)
        header_s, idle_s = options.http_header_timeout_secs, options.http_idle_timeout_secs
        # HTTP/REST in this process (with --frontend-processes N > 1 each frontend process
        # serves it instead, sharing the port)
        self.http = HttpFrontend(
            self.dataplane,
            self.http_restrictions,
            header_timeout_s=header_s,
            idle_timeout_s=idle_s,
            max_body_bytes=options.http_max_input_size,
            shutdown_timeout_s=options.exit_timeout_secs,
            ssl_context=http_ssl_context(options) if options.allow_http and options.http_port >= 0 else None,
        )
        self.metrics = Metrics(
            self.repository,
            gpu_metrics=options.allow_gpu_metrics,
            cpu_metrics=options.allow_cpu_metrics,
            latency=latency,
        )
        self.metrics_http = MetricsFrontend(self.metrics.render, header_timeout_s=header_s, idle_timeout_s=idle_s)
        self._grpc: GrpcListener | None = None
        # --frontend-processes N > 1: gRPC is served by N frontend processes fed over IPC
        self.frontends: FrontendSupervisor | None = None
        self._stopped = asyncio.Event()
        self.grpc_port: int | None = None
        self.http_port: int | None = None
        self.metrics_port: int | None = None
        self.abandoned = False  # set when shutdown gave up on a stuck backend

    async def start(self) -> None:
        o = self.options
        self.dataplane.started = False  # not ready until every listener is up
        await self.repository.start()
        try:
            if o.exit_on_error and not self.repository.all_ready():
                raise StartupError("some models failed to load and --exit-on-error is set")
            serve_http = o.allow_http and o.http_port >= 0
            self._check_ports(serve_http)
            if o.frontend_processes > 1 and (o.allow_grpc or serve_http):
                from .ipc.supervisor import FrontendSupervisor

                if o.allow_grpc:
                    # unusable TLS files are named here, once, as the single-process server
                    # names them, rather than by every frontend process that then fails to start
                    grpc_credentials(o)

                # the frontend processes serve gRPC and HTTP, each sharing its port
                self.frontends = FrontendSupervisor(o, self.dataplane)
                grpc_port, http_port = await self.frontends.start()
                self.grpc_port = grpc_port if grpc_port >= 0 else None
                self.http_port = http_port if http_port >= 0 else None
            elif o.allow_grpc:
                self._grpc = GrpcListener(o, self.servicer, self.grpc_restrictions)
                self.grpc_port = await self._grpc.start()
            if serve_http and self.frontends is None:
                self.http_port = await self._start_listener(
                    self.http, "HTTP", o.http_address, o.http_port, o.reuse_http_port
                )
                log.info("Started HTTPService at %s:%d", o.http_address, self.http_port)
            if o.allow_metrics and o.metrics_port >= 0:
                self.metrics_port = await self._start_listener(
                    self.metrics_http, "metrics", o.metrics_address, o.metrics_port, False
                )
                log.info("Started Metrics Service at %s:%d", o.metrics_address, self.metrics_port)
            self.dataplane.started = True
        except BaseException:
            if self._grpc is not None:
                await self._grpc.stop(grace=0)
            if self.frontends is not None:
                await self.frontends.stop(0.0)
            await self.http.stop()
            await self.metrics_http.stop()
            await self.repository.stop()
            raise

    def _check_ports(self, serve_http: bool) -> None:
        """Every port this server will bind is free, or ``StartupError`` before any listener
        starts (so nothing logs ``Started ...`` first). Frontend processes share their ports
        with SO_REUSEPORT, which would let them co-bind next to another server of this user;
        ports the user asked to share (--reuse-grpc-port, --reuse-http-port) are not checked."""
        o = self.options
        wanted = [
            ("gRPC", o.grpc_address, o.grpc_port, o.allow_grpc and not o.reuse_grpc_port),
            ("HTTP", o.http_address, o.http_port, serve_http and not o.reuse_http_port),
            ("metrics", o.metrics_address, o.metrics_port, o.allow_metrics and o.metrics_port >= 0),
        ]
        for what, address, port, check in wanted:
            # (in one process gRPC and HTTP bind without SO_REUSEPORT and would fail by
            # themselves; checking every port first still fails before the first "Started")
            if check:
                why = port_refusal(address, port)
                if why is not None:
                    raise StartupError(f"cannot bind {what} to {address}:{port}: {why}")

    @staticmethod
    async def _start_listener(
        server: HttpFrontend | MetricsFrontend, what: str, address: str, port: int, reuse: bool
    ) -> int:
        try:
            return await server.start(address, port, reuse_port=reuse)
        except OSError as e:
            # asyncio rewords the error ("error while attempting to bind on address ...: address
            # already in use"); log the system's text, as tritonserver does
            why = os.strerror(e.errno) if e.errno else str(e)
            raise StartupError(f"cannot bind {what} to {address}:{port}: {why}") from None

    async def stop(self) -> None:
        """Drain, then release. Everything shares one --exit-timeout-secs budget: a backend
        stuck inside execute() must not keep the process alive past it (``abandoned`` tells
        the caller to exit without waiting for that thread)."""
        self.dataplane.exiting = True
        timeout = self.options.exit_timeout_secs
        deadline = asyncio.get_running_loop().time() + timeout
        log.info("shutting down: draining in-flight requests (up to %.0f s)", timeout)
        if self._grpc is not None:
            await self._grpc.stop(grace=timeout)
        if self.frontends is not None:
            await self.frontends.stop(timeout)
        await self.http.stop()
        await self.metrics_http.stop()
        remaining = max(0.1, deadline - asyncio.get_running_loop().time())
        try:
            await asyncio.wait_for(self.repository.stop(), timeout=remaining)
        except asyncio.TimeoutError:
            self.abandoned = True
            log.error("models did not finish within --exit-timeout-secs; exiting without them")
        self.shm.close()
        # the trace file's closing bracket, the last spans to the collector
        await asyncio.get_running_loop().run_in_executor(None, self.dataplane.tracer.close)
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
