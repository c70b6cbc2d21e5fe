#!/usr/bin/env python3
"""The engine's CPU per request, without gRPC: the real engine end of the IPC channel
(``EngineServer`` over ``DataPlane`` and ``ModelRepository``) fed by K frontend processes
that use the real ``RemoteDataPlane`` (normalizing, arena, frames) and skip only the gRPC
transport and codec: each request is the ``WireRequest`` a codec would collect, raw inputs.

    python tests/benchmarks/bench_engine.py                           # simple, batch 1, 2 frontends x c32
    python tests/benchmarks/bench_engine.py --model facile --batch 16000 --concurrency 4
    python tests/benchmarks/bench_engine.py --profile /tmp/engine.txt  # + py-spy (GIL samples) of the engine

What the engine pays per request is what caps fpgaserve with many frontends (issue 11: one
engine feeds every frontend, so 1e6 / its µs per request bounds requests/s on any host).
Here the engine's CPU (utime+stime of this process, every thread: event loop and instance
workers) and the frontends' CPU (their own rusage) are divided by the requests answered, and
printed with the throughput. Every answer is checked against a numpy re-computation of the
model (``simple``: INPUT0+INPUT1 and INPUT0-INPUT1) or its shape and finiteness
(``facile``). The engine runs in the main process; the frontends are ``multiprocessing``
spawns. FACILE runs in ``--fpga-mode`` (default onnx). Numbers are for comparing changes on
one machine; a busy machine inflates them.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

import numpy as np  # noqa: E402

from server_process import BUNDLED_REPO, CONFORMANCE_REPO  # noqa: E402


def _cpu_self() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# ----------------------------------------------------------------------------- frontend side


async def _frontend(socket_path: str, model: str, batch: int, concurrency: int, seconds: float, start_at: float):
    from fpgaserve.server.dataplane.tensors import WireInput, WireRequest
    from fpgaserve.server.engine.request import RequestedOutput
    from fpgaserve.server.ipc.remote import RemoteDataPlane

    dp = RemoteDataPlane(socket_path, 256 << 20)
    await dp.connect()
    mv = await dp.model(model)
    rng = np.random.default_rng(os.getpid())
    shapes = {
        n: [batch if d == -1 else d for d in ([-1] if mv.max_batch_size > 0 else []) + list(s.dims)]
        for n, s in mv.inputs.items()
    }
    dtypes = {n: s.datatype.dtype for n, s in mv.inputs.items()}
    inputs = {
        n: (rng.integers(-50, 50, size=shapes[n]) if dtypes[n].kind == "i" else rng.random(shapes[n])).astype(dtypes[n])
        for n in mv.inputs
    }
    raw = {n: (s.datatype.wire, shapes[n], inputs[n].tobytes()) for n, s in mv.inputs.items()}
    outputs = [RequestedOutput(spec) for spec in mv.outputs.values()]
    await asyncio.sleep(max(0.0, start_at - time.time()))
    end = time.monotonic() + seconds
    done = 0
    bad = 0

    async def worker():
        nonlocal done, bad
        while time.monotonic() < end:
            wire_inputs = {n: WireInput(datatype, shape, data) for n, (datatype, shape, data) in raw.items()}
            encoded = await dp.infer(WireRequest(mv, "", wire_inputs, outputs, {}))
            got = {e.name: e for e in encoded}
            if model == "simple":
                a, b = inputs["INPUT0"], inputs["INPUT1"]
                ok = (np.frombuffer(got["OUTPUT0"].raw, a.dtype).reshape(a.shape) == a + b).all() and (
                    np.frombuffer(got["OUTPUT1"].raw, a.dtype).reshape(a.shape) == a - b
                ).all()
            else:
                e = next(iter(got.values()))
                ok = e.shape[0] == batch and np.isfinite(np.frombuffer(e.raw, np.float32)).all()
            done += 1
            bad += not ok

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    await dp.close()
    return done, bad


def _frontend_main(args, queue) -> None:
    done, bad = asyncio.run(_frontend(*args))
    r = resource.getrusage(resource.RUSAGE_SELF)
    queue.put((done, bad, r.ru_utime + r.ru_stime))


# ----------------------------------------------------------------------------- engine side


async def _engine(opts) -> int:
    from fpgaserve.server.dataplane import DataPlane
    from fpgaserve.server.engine.repository import ModelRepository
    from fpgaserve.server.ipc.engine_server import EngineServer
    from fpgaserve.server.log_settings import LogSettings
    from fpgaserve.server.shared_memory import SystemSharedMemoryManager

    work = Path(tempfile.mkdtemp(prefix="bench-engine-"))
    repo = work / "repo"
    repo.mkdir()
    source = BUNDLED_REPO if opts.model == "facile" else CONFORMANCE_REPO
    shutil.copytree(source / opts.model, repo / opts.model)
    repository = ModelRepository([str(repo)], backend_config={"hls4ml": {"fpga-mode": opts.fpga_mode}})
    shm = SystemSharedMemoryManager()
    dataplane = DataPlane(repository, shm, LogSettings(0, "", "default"))
    await repository.start()
    socket_path = str(work / "engine.sock")
    server = EngineServer(dataplane, socket_path)
    await server.start()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    start_at = time.time() + 4.0  # every frontend connected and warm
    procs = [
        ctx.Process(
            target=_frontend_main,
            args=((socket_path, opts.model, opts.batch, opts.concurrency, opts.seconds, start_at), queue),
        )
        for _ in range(opts.frontends)
    ]
    for p in procs:
        p.start()
    await asyncio.sleep(max(0.0, start_at - time.time()))
    cpu0, t0 = _cpu_self(), time.monotonic()
    profiler = None
    if opts.profile:
        profiler = subprocess.Popen(  # noqa: ASYNC220  (a benchmark: starting it may block)
            [
                shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy"),
                "record",
                "-p",
                str(os.getpid()),
                "--gil",
                "-r",
                "250",
                "-d",
                str(max(1, int(opts.seconds) - 1)),
                "-f",
                "raw",
                "-o",
                opts.profile,
                "--nonblocking",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    loop = asyncio.get_running_loop()
    results = [await loop.run_in_executor(None, queue.get) for _ in procs]
    wall, engine_cpu = time.monotonic() - t0, _cpu_self() - cpu0
    for p in procs:
        p.join()
    if profiler is not None:
        profiler.wait()
    await server.stop()
    await repository.stop()
    shutil.rmtree(work, ignore_errors=True)
    requests = sum(r[0] for r in results)
    bad = sum(r[1] for r in results)
    frontend_cpu = sum(r[2] for r in results)
    rows = requests * opts.batch
    print(
        f"model {opts.model} batch {opts.batch}, {opts.frontends} frontends x concurrency {opts.concurrency}, "
        f"{opts.seconds:g} s, fpga-mode {opts.fpga_mode}"
    )
    print(f"requests answered: {requests:,} ({bad} wrong)")
    print(f"throughput: {requests / wall:,.0f} requests/s" + (f", {rows / wall:,.0f} rows/s" if opts.batch > 1 else ""))
    print(
        f"engine CPU per request: {engine_cpu / max(requests, 1) * 1e6:,.1f} µs "
        f"({engine_cpu / wall:.2f} cores; includes the model's execution)"
    )
    print(f"frontend CPU per request (RemoteDataPlane only, no gRPC): {frontend_cpu / max(requests, 1) * 1e6:,.1f} µs")
    if opts.profile:
        print(f"py-spy GIL samples of the engine: {opts.profile}")
    return 0 if requests and not bad else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=("simple", "facile"), default="simple")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--frontends", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=32, help="requests in flight per frontend")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--fpga-mode", default="onnx")
    ap.add_argument("--profile", help="write py-spy raw GIL samples of the engine here")
    opts = ap.parse_args(argv)
    if opts.model == "simple" and opts.batch > 8:
        ap.error("simple takes batch <= 8")
    from fpgaserve.server import eventloop

    return eventloop.run(_engine(opts), fast=True)  # the engine's loop, as the server runs it


if __name__ == "__main__":
    sys.exit(main())
