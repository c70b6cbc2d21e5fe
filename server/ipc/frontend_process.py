"""A frontend process: gRPC and HTTP transports, decoding and validation, fed to the engine over IPC.

    python -m fpgaserve.server.ipc.frontend_process CONFIG SOCKET INDEX GRPC_PORT HTTP_PORT [SOCKETS]

Started by the engine's ``FrontendSupervisor`` (never by hand): CONFIG is the server's
options as JSON, SOCKET the engine's Unix socket (with --engine-processes N > 1, engine 0's, and
SOCKETS those of engines 1..N-1, joined by os.pathsep); a port of -1 is not served. It ignores
SIGINT and SIGTERM (a terminal's Ctrl-C and systemd reach every process of the server's group
or unit): the engine tells it to stop (``drain``), and it ends at once when the engine is
gone (SIGHUP, the parent-death signal, or the channel's end). Exit status: 0 after a drain, 1
if the port cannot be bound, 2 if an engine went away.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys

from fpgaserve.backends.hosting import ignore_stop_signals, start_process

from ..app import FLUSH_GRACE_S, ServerOptions, header_forwarding
from ..errors import StartupError
from ..frontends.access import RestrictionError, grpc_restrictions, http_restrictions
from ..frontends.grpc import InferenceServicer
from ..frontends.grpc_listener import GrpcListener
from ..frontends.http import HttpFrontend
from ..frontends.http_listener import http_ssl_context
from ..log_settings import LogSettings
from .remote import RemoteDataPlane

log = logging.getLogger("fpgaserve.frontend")


async def serve(options: ServerOptions, socket_path: str, index: int, engine_sockets: list[str] | None = None) -> int:
    dataplane = RemoteDataPlane(socket_path, options.arena_bytes)
    await dataplane.connect()
    others = [RemoteDataPlane(path, options.arena_bytes) for path in engine_sockets or ()]
    for other in others:  # --engine-processes N > 1: engines 1..N-1
        await other.connect()
    dataplane.attach_engines(others)
    try:
        restrictions = grpc_restrictions(options.grpc_restricted_protocols)
        http_restricted = http_restrictions(options.http_restricted_apis)
        grpc_forwarding, http_forwarding = header_forwarding(options)
    except (RestrictionError, ValueError) as e:  # the engine checked them already
        log.error("%s", e)
        return 1
    listener: GrpcListener | None = None
    http: HttpFrontend | None = None
    grpc_port = http_port = -1
    try:
        if options.grpc_port >= 0:
            listener = GrpcListener(
                options, InferenceServicer(dataplane, grpc_forwarding), restrictions, reuse_port=True
            )
            grpc_port = await listener.start(announce=False)
        if options.http_port >= 0:
            http = HttpFrontend(
                dataplane,
                http_restricted,
                header_timeout_s=options.http_header_timeout_secs,
                idle_timeout_s=options.http_idle_timeout_secs,
                max_body_bytes=options.http_max_input_size,
                shutdown_timeout_s=options.exit_timeout_secs,
                ssl_context=http_ssl_context(options),
                forwarding=http_forwarding,
            )
            http_port = await http.start(options.http_address, options.http_port, reuse_port=True)
    except StartupError as e:  # TLS files the engine checked already, or a port taken
        log.error("error: %s", e)
        return 1
    except OSError as e:
        # asyncio rewords it ("error while attempting to bind ..."): the system's text, as
        # tritonserver logs it (cmsTriton retries on "Address already in use")
        why = os.strerror(e.errno) if e.errno else str(e)
        log.error("cannot bind HTTP to %s:%d: %s", options.http_address, options.http_port, why)
        return 1
    dataplane.send(("bound", grpc_port, http_port))
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for plane in dataplane.engines:
        plane.on_drain = stop.set  # the engine says the server stops

    def engine_gone() -> None:
        # Die at once, as a one-process server killed with its engine would: the kernel then
        # resets every connection, which clients and proxies read as UNAVAILABLE and retry
        # elsewhere (nginx marks the replica failed on the first reset). Called from the
        # channel's end before the calls this frontend holds are failed: answering them with
        # UNAVAILABLE would be a well-formed gRPC answer, which a proxy does not count as the
        # replica failing, so its clients' next calls would still go here. Stopping the
        # listeners instead would answer the calls with CANCELLED and keep taking new ones.
        if stop.is_set():
            return  # draining: the engine ends after us, as expected
        log.error("frontend %d: the engine process is gone; exiting", index)
        logging.shutdown()
        os._exit(2)

    waits = {loop.create_task(stop.wait())}
    for plane in dataplane.engines:  # any engine process gone: the server is
        plane.on_engine_lost = engine_gone
        waits.add(loop.create_task(plane.engine_lost.wait()))
    loop.add_signal_handler(signal.SIGHUP, engine_gone)  # the parent-death signal
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    if not stop.is_set():
        engine_gone()
    for plane in dataplane.engines:
        plane.exiting = True  # new requests: UNAVAILABLE; in-flight ones finish
    if http is not None:
        await http.stop_listening()  # a new connection is refused, as by Triton's HTTP service
    # every call answered (the engine kills this process if that takes past its exit timeout),
    # then a moment to write the last answers out before the open connections close
    await asyncio.gather(*(plane.drained() for plane in dataplane.engines))
    if listener is not None:
        await listener.stop(grace=FLUSH_GRACE_S)
    if http is not None:
        await http.stop()
    for plane in dataplane.engines:
        await plane.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    config_path, socket_path, index, grpc_port, http_port = args[:5]
    engine_sockets = args[5].split(os.pathsep) if len(args) > 5 else []  # --engine-processes N > 1
    ignore_stop_signals()  # the server's to get: the engine says when this process stops
    start_process()  # a fresh interpreter: the main process's settings are not inherited
    with open(config_path) as f:
        options = ServerOptions(**json.load(f))
    options.grpc_port = int(grpc_port)
    options.http_port = int(http_port)
    LogSettings.from_options(options)
    try:
        return asyncio.run(serve(options, socket_path, int(index), engine_sockets))
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
