"""A gRPC frontend process: transport, decoding and validation, fed to the engine over IPC.

    python -m fpgaserve.server.ipc.frontend_process CONFIG SOCKET INDEX PORT

Started by the engine's ``FrontendSupervisor`` (never by hand): CONFIG is the server's
options as JSON, SOCKET the engine's Unix socket. Exit status: 0 after a SIGTERM drain, 1 if
the port cannot be bound, 2 if the engine went away.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys

from ..app import ServerOptions
from ..frontends.access import RestrictionError, grpc_restrictions
from ..frontends.grpc import InferenceServicer
from ..frontends.grpc_listener import GrpcListener
from ..log_settings import LogSettings
from .remote import RemoteDataPlane

log = logging.getLogger("fpgaserve.frontend")


async def serve(options: ServerOptions, socket_path: str, index: int) -> int:
    dataplane = RemoteDataPlane(socket_path, options.arena_bytes)
    await dataplane.connect()
    try:
        restrictions = grpc_restrictions(options.grpc_restricted_protocols)
    except RestrictionError as e:  # the engine checked them already
        log.error("%s", e)
        return 1
    listener = GrpcListener(options, InferenceServicer(dataplane), restrictions, reuse_port=True)
    try:
        port = await listener.start(announce=False)
    except SystemExit as e:
        log.error("%s", e.code)
        return 1
    dataplane.send(("bound", port))
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, dataplane.engine_lost.set)  # the parent-death signal
    stop_wait = loop.create_task(stop.wait())
    lost_wait = loop.create_task(dataplane.engine_lost.wait())
    await asyncio.wait({stop_wait, lost_wait}, return_when=asyncio.FIRST_COMPLETED)
    if not stop.is_set():
        log.error("gRPC frontend %d: the engine process is gone; exiting", index)
        await listener.stop(grace=0)
        return 2
    dataplane.exiting = True  # new requests: UNAVAILABLE; in-flight ones finish
    await listener.stop(grace=options.exit_timeout_secs)
    await dataplane.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    config_path, socket_path, index, port = sys.argv[1:] if argv is None else argv
    with open(config_path) as f:
        options = ServerOptions(**json.load(f))
    options.grpc_port = int(port)
    LogSettings(
        options.log_verbose,
        options.log_file,
        options.log_format,
        log_info=options.log_info,
        log_warning=options.log_warning,
        log_error=options.log_error,
    )
    try:
        return asyncio.run(serve(options, socket_path, int(index)))
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
