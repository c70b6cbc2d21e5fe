"""Starts, watches and stops the frontend processes (gRPC and HTTP) of one engine.

The frontends are ``python -m fpgaserve.server.ipc.frontend_process`` children, all bound to
the gRPC port and to the HTTP port with SO_REUSEPORT (the kernel spreads new connections over them) and connected
to the engine over a Unix socket in a private directory (mode 0700). A frontend that dies is
started again; the others keep serving meanwhile. Each one ends with the engine (the
kernel's parent-death signal, SIGHUP, and the channel's end of file), logging that the
engine is gone, so an engine that crashes leaves no orphan holding the port and the
orchestrator sees the server exit. They ignore SIGINT and SIGTERM, which reach them too when
the server's process group or systemd unit is signalled: the engine tells them when to stop
(``drain``), once it has stopped taking new work itself.
"""

from __future__ import annotations

import asyncio
import ctypes
import dataclasses
import json
import logging
import os
import shutil
import signal
import sys
import tempfile

from fpgaserve.backends.hosting import stop_signals_blocked

from ..errors import StartupError
from .engine_server import EngineServer

log = logging.getLogger("fpgaserve")

_PR_SET_PDEATHSIG = 1
_RESTART_DELAY_S = 0.5


def _die_with_parent() -> None:  # runs in the child between fork and exec
    # SIGHUP when the engine dies, however it dies (even SIGKILL): the frontend logs it and exits
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGHUP)
    except OSError:
        pass


class FrontendSupervisor:
    def __init__(self, options, dataplane, engines=None):
        self.options = options
        self.count = options.frontend_processes
        self.dir = tempfile.mkdtemp(prefix="fpgaserve-ipc-")  # 0700: only this user connects
        self.config_path = os.path.join(self.dir, "frontend.json")
        self.server = EngineServer(dataplane, os.path.join(self.dir, "engine.sock"))
        self.server.on_bound = self._on_bound
        # --engine-processes N > 1: the frontends also connect to engines 1..N-1, and engine 0
        # answers their calls for the whole server
        self.server.engines = engines
        self.engine_sockets = os.pathsep.join(engines.sockets[1:]) if engines is not None else ""
        self.procs: list[asyncio.subprocess.Process | None] = [None] * self.count
        self._bound: dict[int, asyncio.Future] = {}
        self._watchers: list[asyncio.Task] = []
        self.stopping = False
        self.ports: tuple[int, int] = (-1, -1)
        self.restarts = 0

    def _on_bound(self, pid: int, ports: tuple[int, int]) -> None:
        future = self._bound.get(pid)
        if future is not None and not future.done():
            future.set_result(ports)

    async def _spawn(self, index: int, ports: tuple[int, int]) -> tuple[int, int]:
        """Start frontend ``index`` on ``ports`` (gRPC, HTTP; -1 = not served); the ports it
        bound, or ``StartupError`` if it exited instead."""
        with stop_signals_blocked():  # until it ignores them (frontend_process.main)
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "fpgaserve.server.ipc.frontend_process",
                self.config_path,
                self.server.socket_path,
                str(index),
                str(ports[0]),
                str(ports[1]),
                *([self.engine_sockets] if self.engine_sockets else []),
                preexec_fn=_die_with_parent,
            )
        self.procs[index] = proc
        future = asyncio.get_running_loop().create_future()
        self._bound[proc.pid] = future
        exited = asyncio.ensure_future(proc.wait())
        try:
            done, _ = await asyncio.wait({future, exited}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._bound.pop(proc.pid, None)
        if future in done:
            exited.cancel()
            return future.result()
        raise StartupError(f"frontend process {index} exited with {proc.returncode} while starting")

    async def start(self) -> tuple[int, int]:
        """(gRPC port, HTTP port) the frontends serve; -1 for a protocol not served."""
        o = self.options
        with open(self.config_path, "w") as f:  # noqa: ASYNC230 -- once, a few hundred bytes, at start
            json.dump(dataclasses.asdict(o), f)
        await self.server.start()
        ports = (o.grpc_port if o.allow_grpc else -1, o.http_port if o.allow_http else -1)
        for index in range(self.count):  # the first one fixes the ports (0 = any)
            ports = await self._spawn(index, ports)
        self.ports = ports
        self._watchers = [asyncio.ensure_future(self._watch(i)) for i in range(self.count)]
        if ports[0] >= 0:
            log.info("Started GRPCInferenceService at %s:%d", o.grpc_address, ports[0])
        if ports[1] >= 0:
            log.info("Started HTTPService at %s:%d", o.http_address, ports[1])
        log.info("%d frontend processes share the ports %s", self.count, " and ".join(str(p) for p in ports if p >= 0))
        return ports

    async def _watch(self, index: int) -> None:
        while not self.stopping:
            proc = self.procs[index]
            assert proc is not None  # started before its watcher
            rc = await proc.wait()
            if self.stopping:
                return
            self.restarts += 1
            log.error("frontend process %d (pid %d) exited with %s; starting it again", index, proc.pid, rc)
            await asyncio.sleep(_RESTART_DELAY_S)
            if self.stopping:
                return
            try:
                await self._spawn(index, self.ports)
            except StartupError as e:
                log.error("error: %s", e)

    def drain(self) -> None:
        """The server stops: every frontend refuses new work, answers its calls in flight and
        exits (``exited``); none is started again."""
        self.stopping = True
        for w in self._watchers:
            w.cancel()
        self.server.drain_frontends()

    async def exited(self) -> None:
        """Return once every frontend process has exited (the caller bounds the wait)."""
        live = [p for p in self.procs if p is not None and p.returncode is None]
        await asyncio.gather(*(p.wait() for p in live))

    async def stop(self, timeout: float) -> None:
        """Tell every frontend to stop (``drain``) and wait up to ``timeout`` for it, then kill
        the ones still running; the engine's end of their channels closes last."""
        if not self.stopping:
            self.drain()
        live = [p for p in self.procs if p is not None and p.returncode is None]
        if live:
            try:
                await asyncio.wait_for(self.exited(), timeout)
            except asyncio.TimeoutError:
                for p in live:
                    if p.returncode is None:
                        p.kill()
                await asyncio.gather(*(p.wait() for p in live))
        await self.server.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
