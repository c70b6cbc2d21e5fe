"""The running server: wires the engine (repository), the data plane and the frontends together.

A server that cannot start (a malformed option, an unusable TLS file, a port it cannot bind,
a model that failed with --exit-on-error) raises ``StartupError``; the command line turns it
into its ``error:`` line and exit status.

Shutdown, as Triton stops, on SIGTERM or SIGINT however it arrives (to the server's PID, to its
process group from systemd or a terminal's Ctrl-C: the server's own processes ignore both and
follow the server): health answers UNAVAILABLE "Server exiting", new requests are refused
(gRPC UNAVAILABLE "GRPC server is shutting down ...", a new HTTP connection is refused), loads
in progress are abandoned, the requests in flight finish in every backend and process, then
the listeners close and the models are finalized; the process exits 0. All of it within
``--exit-timeout-secs``: past it, or on a second signal, the server exits at once with status 1
(Triton's "Exit timeout expired. Exiting immediately."), its processes ending with it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
from typing import TYPE_CHECKING

from fpgaserve.backends.hosting import abandon_loads

from .dataplane import DataPlane
from .engine.latency import MetricsConfigError, parse_metrics_config
from .engine.repository import ModelRepository
from .engine.tracing import TraceConfigError, Tracer, parse_trace_config
from .errors import StartupError
from .flags import ServerOptions  # declared with its command-line flags
from .frontends.access import RestrictionError, grpc_restrictions, http_restrictions
from .frontends.common import HeaderForwarding
from .frontends.grpc import InferenceServicer
from .frontends.grpc_listener import GrpcListener, grpc_credentials, port_refusal
from .frontends.http import HttpFrontend, MetricsFrontend
from .frontends.http_listener import http_ssl_context
from .log_settings import LogSettings
from .metrics import Metrics
from .shared_memory import SystemSharedMemoryManager

if TYPE_CHECKING:
    from .ipc.engines import EngineGroup
    from .ipc.supervisor import FrontendSupervisor

log = logging.getLogger("fpgaserve")

#: once every request in flight has its answer, how long the listeners have to write the last
#: ones out before the connections still open (an idle gRPC stream, an HTTP keep-alive) close
FLUSH_GRACE_S = 1.0
#: Triton's log line when its drain runs past --exit-timeout-secs (main.cc, r24.10), then exit 1
EXIT_TIMEOUT_EXPIRED = "failed to stop server: Internal - Exit timeout expired. Exiting immediately."
#: a second SIGTERM/SIGINT: Triton 2.51 ignores it (triton_signal.cc: "Do nothing if already
#: exiting") and drains on to the exit timeout; here it cuts the drain short, as the exit timeout does
SECOND_SIGNAL = "failed to stop server: a second signal was received. Exiting immediately."


class _StopCut(Exception):
    """The shutdown ran past --exit-timeout-secs, or a second signal said to stop now."""


def make_repository(options: ServerOptions, latency, engine: int = 0) -> ModelRepository:
    """The model repository of engine process ``engine`` (of ``--engine-processes``)."""
    owns = None
    if options.engine_processes > 1:
        from .engine.placement import PlacementError, engine_of_model

        count, config_name = options.engine_processes, options.model_config_name

        def owns(name: str, path) -> bool:
            try:
                return engine_of_model(path, count, config_name) == engine
            except PlacementError:  # listed by engine 0, whose load of it fails saying why
                return engine == 0

    return ModelRepository(
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
        model_config_name=options.model_config_name,
        owns=owns,
    )


def header_forwarding(options: ServerOptions) -> tuple[HeaderForwarding, HeaderForwarding]:
    """The gRPC and HTTP frontends' header forwarding; ValueError for a pattern that is not a
    regular expression."""
    return (
        HeaderForwarding(options.grpc_header_forward_pattern, "--grpc-header-forward-pattern"),
        HeaderForwarding(options.http_header_forward_pattern, "--http-header-forward-pattern"),
    )


class InferenceServer:
    def __init__(self, options: ServerOptions):
        self.options = options
        try:
            self.grpc_restrictions = grpc_restrictions(options.grpc_restricted_protocols)
            self.http_restrictions = http_restrictions(options.http_restricted_apis)
            self.grpc_forwarding, self.http_forwarding = header_forwarding(options)
        except (RestrictionError, ValueError) as e:
            raise StartupError(str(e)) from None
        self.log_settings = LogSettings.from_options(options, allow_log_file_update=options.allow_log_file_update)
        self.shm = SystemSharedMemoryManager(
            max_regions=options.max_shm_regions, allow_client_shm=options.allow_client_shm
        )
        try:
            latency = parse_metrics_config(options.metrics_config)
            tracer = Tracer(parse_trace_config(options.trace_config))
        except (MetricsConfigError, TraceConfigError) as e:
            raise StartupError(str(e)) from None
        # --engine-processes N > 1: this process is engine 0, serving the models placed on it
        # and coordinating the others (server/ipc/engines.py)
        self.engine_options = options
        if options.engine_processes > 1:
            from .ipc.engines import engine_options

            self.engine_options = engine_options(options, 0, options.engine_processes)
        self.repository = make_repository(self.engine_options, latency, engine=0)
        self.dataplane = DataPlane(
            self.repository, self.shm, self.log_settings, server_id=options.server_id, tracer=tracer
        )
        self.servicer = InferenceServicer(self.dataplane, self.grpc_forwarding)
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
            forwarding=self.http_forwarding,
        )
        self.metrics = Metrics(
            self.repository,
            gpu_metrics=options.allow_gpu_metrics,
            cpu_metrics=options.allow_cpu_metrics,
            latency=latency,
        )
        self.metrics_http = MetricsFrontend(
            self.metrics.render if options.engine_processes <= 1 else self._render_all_metrics,
            header_timeout_s=header_s,
            idle_timeout_s=idle_s,
        )
        # --engine-processes N > 1: engines 1..N-1, and their sockets' folder
        self.engines: EngineGroup | None = None
        self._engines_dir: str | None = None
        self.exit_status = 0  # 1 when an engine process died under the server
        self._stop_requested: asyncio.Event | None = None
        self._grpc: GrpcListener | None = None
        # --frontend-processes N > 1: gRPC is served by N frontend processes fed over IPC
        self.frontends: FrontendSupervisor | None = None
        self._stopped = asyncio.Event()
        self.grpc_port: int | None = None
        self.http_port: int | None = None
        self.metrics_port: int | None = None
        self.abandoned = False  # set when shutdown gave up on a stuck backend
        self._signals = 0  # SIGTERM/SIGINT received
        self._stop_now = asyncio.Event()  # a second one: stop without waiting any more

    async def start(self) -> None:
        o = self.options
        self.dataplane.started = False  # not ready until every listener is up
        try:
            if o.engine_processes > 1:
                await self._start_engines()  # they load their models while engine 0 loads its own
            if (o.frontend_processes > 1 or o.engine_processes > 1) and (o.allow_grpc or o.allow_http):
                from .ipc.arena import set_aside_for_frontends

                # the frontends connect after the loads: the loads leave their arenas room
                set_aside_for_frontends(o.frontend_processes, o.arena_bytes)
            await self.repository.start()
            if self.engines is not None:
                await self.engines.connect()

            if o.exit_on_error and not self.repository.all_ready():
                raise StartupError("some models failed to load and --exit-on-error is set")
            serve_http = o.allow_http and o.http_port >= 0
            self._check_ports(serve_http)
            if (o.frontend_processes > 1 or self.engines is not None) and (o.allow_grpc or serve_http):
                from .ipc.supervisor import FrontendSupervisor

                if o.allow_grpc:
                    # unusable TLS files are named here, once, as the single-process server
                    # names them, rather than by every frontend process that then fails to start
                    grpc_credentials(o)

                # the frontend processes serve gRPC and HTTP, each sharing its port
                self.frontends = FrontendSupervisor(o, self.dataplane, self.engines)
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
            await self._stop_engines()
            raise

    async def _start_engines(self) -> None:
        import tempfile

        from .ipc.engines import EngineGroup

        self._engines_dir = tempfile.mkdtemp(prefix="fpgaserve-engines-")  # 0700: only this user connects
        self.engines = EngineGroup(self.engine_options, self.dataplane, self._engines_dir)
        self.engines.on_engine_lost = self._engine_lost
        await self.engines.start()

    def _engine_lost(self, index: int, rc) -> None:
        """An engine process died: the server stops (exit status 1), as when engine 0 dies."""
        self.exit_status = 1
        if self._stop_requested is not None:
            self._stop_requested.set()

    async def _stop_engines(self) -> None:
        if self.engines is not None:
            await self.engines.stop()
        if self._engines_dir is not None:
            shutil.rmtree(self._engines_dir, ignore_errors=True)

    async def _render_all_metrics(self) -> bytes:
        """/metrics of every engine process (--engine-processes N > 1)."""
        remote = await self.engines.remote_families() if self.engines is not None else []
        return self.metrics.render(remote)

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
        """Stop as Triton stops: refuse new work, let the requests in flight finish, close the
        listeners, finalize the models (see the module's docstring). Everything shares one
        --exit-timeout-secs budget: past it (a backend stuck inside execute(), a client that
        keeps its stream busy) or on a second signal, ``abandoned`` tells the caller to exit
        at once with status 1, without waiting for what is still running."""
        loop = asyncio.get_running_loop()
        timeout = self.options.exit_timeout_secs
        deadline = loop.time() + timeout
        self.dataplane.exiting = True
        log.info("Waiting for in-flight requests to complete (up to %g s).", timeout)
        abandoned = await loop.run_in_executor(None, abandon_loads)  # kills loading children, compilers
        if abandoned:
            log.warning("abandoned %d instance load(s) in progress: the server is stopping", abandoned)
        try:
            # no new connection: HTTP refuses them as Triton's does (the gRPC listener stays up
            # and answers new requests with UNAVAILABLE, as Triton's does while it drains)
            await self.http.stop_listening()
            if self.frontends is not None:
                self.frontends.drain()  # each refuses new work and exits once its calls are answered
            await self._within(deadline, self.dataplane.drained())
            if self.frontends is not None:
                await self._within(deadline, self.frontends.exited())
            log.info("All in-flight requests are complete; closing the listeners and unloading the models.")
            grace = min(FLUSH_GRACE_S, max(0.0, deadline - loop.time()))
            if self._grpc is not None:
                await self._within(deadline, self._grpc.stop(grace=grace))
            await self._within(deadline, self.http.stop())
            await self._within(deadline, self.metrics_http.stop())
            await self._within(deadline, asyncio.gather(self.repository.stop(), self._stop_engines()))
        except _StopCut:
            self.abandoned = True
            self.exit_status = 1
            log.error("%s", EXIT_TIMEOUT_EXPIRED if not self._stop_now.is_set() else SECOND_SIGNAL)
            # what is still running ends with this process: instance processes by their
            # lifelines (taking their compilers), frontend and engine processes killed here
            if self.engines is not None:
                self.engines.kill()
            if self._engines_dir is not None:
                shutil.rmtree(self._engines_dir, ignore_errors=True)
            self._stopped.set()
            return
        finally:
            if self.frontends is not None:
                await self.frontends.stop(0.0)  # the ones still running are killed
        self.shm.close()
        # the trace file's closing bracket, the last spans to the collector
        await loop.run_in_executor(None, self.dataplane.tracer.close)
        log.info("server stopped")
        self._stopped.set()

    async def _within(self, deadline: float, awaitable) -> None:
        """Await ``awaitable`` until ``deadline`` or a second signal, whichever comes first;
        ``_StopCut`` (and the awaitable cancelled) for those two."""
        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(awaitable)
        now = asyncio.ensure_future(self._stop_now.wait())
        try:
            done, _ = await asyncio.wait(
                {task, now}, timeout=max(0.0, deadline - loop.time()), return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            now.cancel()
        if task in done:
            task.result()
            return
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise _StopCut

    def _on_signal(self, stop_requested: asyncio.Event, signum: int) -> None:
        """SIGTERM or SIGINT: the first stops the server (``stop``), a second stops it now."""
        self._signals += 1
        if self._signals == 1:
            log.info("Signal (%d) received.", signum)  # Triton's line
            stop_requested.set()
            if not self.dataplane.started:
                abandon_loads()  # still starting: its loads in progress would hold the stop
        else:
            log.warning("Signal (%d) received again: stopping now, without waiting for the requests in flight", signum)
            self._stop_now.set()

    async def serve_forever(self) -> None:
        loop = asyncio.get_running_loop()
        stop_requested = self._stop_requested = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, stop_requested, sig)
        await self.start()
        if self.exit_status:  # an engine process died while the server started
            stop_requested.set()
        await stop_requested.wait()
        await self.stop()
