"""Engine process ``INDEX`` of ``--engine-processes N``: the models (and cards) placed on it.

    python -m fpgaserve.server.ipc.engine_process CONFIG SOCKET INDEX N

Started by engine 0's ``EngineGroup`` (never by hand): CONFIG is the server's options as JSON,
SOCKET the Unix socket it serves the frontends (and engine 0) on, once its models are loaded.
It has no listener of its own. It ignores SIGINT and SIGTERM (a terminal's Ctrl-C and systemd
reach every process of the server's group or unit): engine 0 tells it to stop (its "drain"
call), once the frontends have their answers; then it finalizes its models. When engine 0 dies
(SIGHUP, the parent-death signal) it exits at once: nobody is left to answer. Exit status: 0
after a drain, 1 if a model failed to load under --exit-on-error or engine 0 died.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys

from fpgaserve.backends.hosting import abandon_loads, ignore_stop_signals, kill_helper_groups, start_process

from ..app import ServerOptions, make_repository
from ..dataplane import DataPlane
from ..engine.latency import parse_metrics_config
from ..engine.tracing import Tracer, parse_trace_config
from ..log_settings import LogSettings
from ..metrics import Metrics
from ..shared_memory import SystemSharedMemoryManager
from .arena import set_aside_for_frontends
from .engine_server import EngineServer
from .engines import engine_options

log = logging.getLogger("fpgaserve.engine")


async def serve(options: ServerOptions, socket_path: str, index: int, count: int, log_settings: LogSettings) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def coordinator_gone() -> None:
        log.error("engine process %d: engine 0 is gone; exiting", index)
        abandon_loads()
        kill_helper_groups()
        logging.shutdown()
        os._exit(1)  # its instance processes end with it (their lifelines)

    loop.add_signal_handler(signal.SIGHUP, coordinator_gone)
    options = engine_options(options, index, count)
    latency = parse_metrics_config(options.metrics_config)  # engine 0 checked them
    repository = make_repository(options, latency, engine=index)
    shm = SystemSharedMemoryManager(max_regions=options.max_shm_regions, allow_client_shm=options.allow_client_shm)
    dataplane = DataPlane(
        repository,
        shm,
        log_settings,
        server_id=options.server_id,
        tracer=Tracer(parse_trace_config(options.trace_config)),
    )
    server = EngineServer(dataplane, socket_path)
    server.on_drain = stop.set  # engine 0's "drain" call
    # engine 0 serves /metrics with these families merged in (its host families stand for all)
    server.metrics = Metrics(repository, gpu_metrics=options.allow_gpu_metrics, cpu_metrics=False, latency=latency)
    # every frontend connects to this engine too, after its loads: they leave its arenas room
    set_aside_for_frontends(options.frontend_processes, options.arena_bytes)
    start = loop.create_task(repository.start())
    stopped = loop.create_task(stop.wait())
    await asyncio.wait({start, stopped}, return_when=asyncio.FIRST_COMPLETED)
    rc = 0
    if start.done():
        start.result()
        if options.exit_on_error and not repository.all_ready():
            log.error("engine process %d: some models failed to load and --exit-on-error is set", index)
            rc = 1
        else:
            await server.start()
            log.info("engine process %d (pid %d) serves its models on %s", index, os.getpid(), socket_path)
            await stop.wait()
    else:
        abandon_loads()
        start.cancel()
    dataplane.exiting = True
    deadline = loop.time() + options.exit_timeout_secs
    try:
        # (the frontends have their answers when engine 0 says drain: nothing is left in flight)
        await asyncio.wait_for(dataplane.drained(), timeout=max(0.0, deadline - loop.time()))
        await server.stop()
        await asyncio.wait_for(repository.stop(), timeout=max(0.0, deadline - loop.time()))
    except asyncio.TimeoutError:
        log.error("engine process %d: models did not finish within --exit-timeout-secs", index)
        kill_helper_groups()
        logging.shutdown()
        os._exit(1)
    shm.close()
    return rc


def main(argv: list[str] | None = None) -> int:
    config_path, socket_path, index, count = sys.argv[1:] if argv is None else argv
    ignore_stop_signals()  # the server's to get: engine 0 says when this process stops
    start_process()  # a fresh interpreter: the main process's settings are not inherited
    with open(config_path) as f:
        options = ServerOptions(**json.load(f))
    log_settings = LogSettings.from_options(options)
    try:
        return asyncio.run(serve(options, socket_path, int(index), int(count), log_settings))
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
