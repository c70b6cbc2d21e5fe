#!/usr/bin/env python3
"""The engine's CPU per request, without gRPC: the real engine end of the IPC channel
(``EngineServer`` over ``DataPlane`` and ``ModelRepository``) fed by K frontend processes
that use the real ``RemoteDataPlane`` (normalizing, arena, frames) and skip only the gRPC
transport and codec: each request is the ``WireRequest`` a codec would collect, raw inputs.

    python tests/benchmarks/bench_engine.py                           # the three measurements below
    python tests/benchmarks/bench_engine.py --model simple            # one: simple, batch 1, 2 frontends x c32
    python tests/benchmarks/bench_engine.py --model facile --batch 16000 --concurrency 4
    python tests/benchmarks/bench_engine.py --card                    # FACILE events on the simulated card
    python tests/benchmarks/bench_engine.py --card --sim-device timing  # ... on a card model that only keeps time
    python tests/benchmarks/bench_engine.py --profile /tmp/engine.txt  # + py-spy (GIL samples) of the engine

Without ``--model``/``--card`` it measures, one after another in this process: ``simple``
batch 1, FACILE batch 1 in ``--fpga-mode onnx``, and FACILE events (batch 16,000) on the timed
simulated card, prints each block, and ends with the line
``bench_engine: simple_b1_us=<µs> facile_b1_us=<µs> facile_event_us=<µs> event_vs_b1=<R>``
(engine CPU per request, one decimal; R = a card event's engine CPU / ``simple`` batch 1's, the
same run, the ratio the target is set on: a card event should cost the engine a few small
requests, not tens).

What the engine pays per request is what caps fpgaserve with many frontends (issue 11: one
engine feeds every frontend, so 1e6 / its µs per request bounds requests/s on any host).
Here the engine's CPU (utime+stime of this process, every thread: event loop and instance
workers) and the frontends' CPU (their own rusage) over the measured window are divided by the
requests answered, and printed with the throughput and the CPU other processes used meanwhile
(a busy machine inflates every number). Each frontend sends one checked request first, then
all start together. Every answer is checked: ``simple`` against numpy (INPUT0+INPUT1,
INPUT0-INPUT1), FACILE in onnx mode for its shape and finiteness, FACILE on the card bit for
bit against the numpy ap_fixed emulation of the same inputs. The engine runs in the main
process; the frontends are ``multiprocessing`` spawns.

The card (``--card``): ``tests/fpga_sim`` behind the C double of XRT's ``libxrt_coreutil.so.2``
(``--card-api xrt-c``, the default, as ``card-api auto`` drives a real host; ``--card-api xrt``:
its test-only ``pyxrt``), as ``tests/fpga_sim/serve.py`` runs it, in this process: an xclbin written like
``bench_card.py`` writes it (a temporary copy of ``bitstreams/facile/1``, ``--card-cus``
krnl_rtl compute units, all on DDR[0]; the model gets two instances per compute unit) and the
simulator's timing model (DMA at ``--pcie-gbps``, FPGASERVE_SIM_PCIE_GBPS; kernel calls from the
project, ``--kernel-ii`` to override the cycles per row). By default the card model only
keeps time (``--sim-device timing``, FPGASERVE_SIM_DEVICE=timing: device memory aliases host
memory, syncs move no bytes, kernel calls compute nothing), so the simulator costs the host
about what a card does and the server can be fed at PCIe rate; answers are then checked for
shape only. ``--sim-device inline`` has the card core copy and compute every call with the
C-simulation (answers checked bit for bit against the numpy emulation), on the engine's
threads. Either way the card model's own CPU (the card core's calls, metered in C) is printed
apart and is not counted as the engine's. The block adds events/s against the card's PCIe limit
(the busier direction's bytes per event at the PCIe rate) and its compute limit, the card's own
accounting, and the card model's own CPU per event (of which the part spent blocking for
modelled DMA and kernel time) against the event's PCIe time.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
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

from support.server_process import BUNDLED_REPO, CONFORMANCE_REPO  # noqa: E402

SIM = ROOT / "tests" / "fpga_sim"
FACILE_VERSION = BUNDLED_REPO / "facile" / "1"
EVENT_ROWS = 16000
TICK = os.sysconf("SC_CLK_TCK")


def _cpu_self() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _system_busy() -> float:
    vals = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    return (sum(vals) - vals[3] - vals[4]) / TICK  # all but idle and iowait


# ----------------------------------------------------------------------------- frontend side


def _expected(project_dir: str | None, inputs: dict) -> bytes | None:
    """FACILE on the card: the numpy ap_fixed emulation of the request, as float32 bytes."""
    if project_dir is None:
        return None
    from fpgaserve.backends.hls4ml.emulator import FixedPointModel
    from fpgaserve.backends.hls4ml.project import Hls4mlProject

    (x,) = inputs.values()
    y = FixedPointModel(Hls4mlProject.load(project_dir)).predict(x.reshape(x.shape[0], -1))
    return np.ascontiguousarray(y, dtype=np.float32).tobytes()


async def _frontend(socket_path: str, model: str, batch: int, concurrency: int, seconds: float, exact, ready, go):
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
    expected = _expected(exact, inputs)
    outputs = [RequestedOutput(spec) for spec in mv.outputs.values()]

    def check(encoded) -> bool:
        got = {e.name: e for e in encoded}
        if model == "simple":
            a, b = inputs["INPUT0"], inputs["INPUT1"]
            return bool(
                (np.frombuffer(got["OUTPUT0"].raw, a.dtype).reshape(a.shape) == a + b).all()
                and (np.frombuffer(got["OUTPUT1"].raw, a.dtype).reshape(a.shape) == a - b).all()
            )
        e = next(iter(got.values()))
        if expected is not None:
            return e.shape[0] == batch and bytes(e.raw) == expected
        return e.shape[0] == batch and bool(np.isfinite(np.frombuffer(e.raw, np.float32)).all())

    def request() -> WireRequest:
        # what a codec collects from one message: the raw bytes of each input, not yet normalized
        wire_inputs = {n: WireInput(datatype, shape, data) for n, (datatype, shape, data) in raw.items()}
        return WireRequest(mv, "", wire_inputs, outputs, {})

    warm_ok = check(await dp.infer(request()))  # the card's first C-simulation of these rows, outside the window
    loop = asyncio.get_running_loop()
    ready.put(warm_ok)
    await loop.run_in_executor(None, go.wait)
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    end = time.monotonic() + seconds
    done = 0
    bad = 0 if warm_ok else 1

    async def worker():
        nonlocal done, bad
        while time.monotonic() < end:
            encoded = await dp.infer(request())
            done += 1
            bad += not check(encoded)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    await dp.close()
    return done, bad, (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)


def _frontend_main(args, ready, go, queue) -> None:
    queue.put(asyncio.run(_frontend(*args, ready, go)))


# ----------------------------------------------------------------------------- the simulated card


def _card_environment(work: Path, opts) -> None:
    """This process drives the simulated card as tests/fpga_sim/serve.py would: the test-only
    pyxrt first on sys.path, xbutil's stand-in on PATH, the card's settings in the environment."""
    xrt_python = str(SIM / "xrt_python")
    if xrt_python not in sys.path:
        sys.path.insert(0, xrt_python)
    os.environ["PATH"] = f"{SIM / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    if opts.card_api == "xrt-c":
        # XRT's C API: the double of libxrt_coreutil.so.2 found through XILINX_XRT, as on a host
        from fpga_sim.xrt_c import build_xrt_root, default_xrt_root

        os.environ["XILINX_XRT"] = str(build_xrt_root(default_xrt_root()))
    else:
        os.environ.pop("XILINX_XRT", None)
    control = work / "card-control"
    control.mkdir(exist_ok=True)
    os.environ.update(
        {
            "FPGASERVE_SIM_CARDS": "1",
            "FPGASERVE_SIM_CONTROL_DIR": str(control),
            "FPGASERVE_SIM_DEVICE": opts.sim_device,
            "FPGASERVE_SIM_PCIE_GBPS": str(opts.pcie_gbps),
            "FPGASERVE_SIM_XRT_VERSION": opts.xrt_version,
        }
    )
    if opts.kernel_ii:
        os.environ["FPGASERVE_SIM_KERNEL_II"] = str(opts.kernel_ii)


def _card_repository(repo: Path, cus: int, abi: str) -> Path:
    """FACILE with an xclbin of ``cus`` compute units of kernel ``abi`` on DDR[0], card.json as
    `fpgaserve pack --xclbin` writes it, and two instances per compute unit (what pack gives
    them). ``kernel_wrapper``: the project as hls4ml's VitisAccelerator writes it with
    ``HW_Quant`` (float32 rows in card memory, quantized by the kernel), so the card reads a
    request's rows where the frontend wrote them (XRT >= 2.20, see runner.py); ``krnl_rtl``:
    the VivadoAccelerator kernel, whose 32-bit words the host encodes first."""
    from fpga_sim.projects import kernel_wrapper_project
    from fpga_sim.xclbin import write_xclbin
    from fpgaserve.backends.hls4ml.card.axlf import read_xclbin
    from fpgaserve.backends.hls4ml.card.manifest import CardManifest
    from fpgaserve.backends.hls4ml.project import Hls4mlProject

    version = repo / "facile" / "1"
    if abi == "kernel_wrapper":
        kernel_wrapper_project(FACILE_VERSION, version, num_kernel=cus, batchsize=EVENT_ROWS, hw_quant=True)
    else:
        shutil.copytree(FACILE_VERSION, version)
    write_xclbin(version / "model.xclbin", kernel_abi=abi, cus=cus, cu_banks=["DDR[0]"] * cus, project=version)
    CardManifest.for_project(Hls4mlProject.load(version), abi, read_xclbin(version / "model.xclbin")).write(version)
    config = (BUNDLED_REPO / "facile" / "config.pbtxt").read_text()
    config = config.replace("count: 1\n", f"count: {2 * cus}\n", 1)
    assert f"count: {2 * cus}" in config, "the bundled FACILE config has no instance count to change"
    (repo / "facile" / "config.pbtxt").write_text(config)
    return version


def _card_report(
    opts, requests: int, wall: float, stand_in: tuple[float, float], before: dict, after: dict
) -> list[str]:
    rows = opts.batch
    event_bytes = rows * 47 * 4  # the busier direction: in (the output is 1 float per row)
    pcie_limit = opts.pcie_gbps * 1e9 / event_bytes
    events_s = requests / wall
    model = after["models"].get(opts.card_abi, {})
    kernel_s = None
    if model.get("clock_mhz"):
        cycles = model["latency"] + model["ii_eff"] * (rows - 1)
        kernel_s = cycles / (model["clock_mhz"] * 1e6) + model.get("delay_ms", 0) / 1e3
    cus = len(after["cus"])
    lines = [
        f"card: {after['name']} (simulated, work in a {after['device_side']['mode']} card side), {cus} krnl_rtl CUs "
        f"on DDR[0], PCIe {opts.pcie_gbps:g} GB/s, kernel {kernel_s * 1e3 if kernel_s else float('nan'):.2f} ms "
        f"per event (II {model.get('ii_eff')}, {model.get('clock_mhz')} MHz)",
        f"events/s: {events_s:,.1f}; PCIe limit {pcie_limit:,.0f} events/s ({event_bytes:,} bytes in per event): "
        f"ratio {events_s / pcie_limit:.3f}"
        + (
            f"; the CUs' compute limit {cus / kernel_s:,.0f} events/s: ratio {events_s * kernel_s / cus:.3f}"
            if kernel_s
            else ""
        ),
    ]
    busy = sum(after["cus"][c]["busy_s"] - before["cus"][c]["busy_s"] for c in after["cus"])
    moved = (after["bytes_to_device"] - before["bytes_to_device"]) / max(requests, 1)
    direct = (after.get("bytes_to_device_userptr", 0) - before.get("bytes_to_device_userptr", 0)) / max(requests, 1)
    lines.append(
        f"card's accounting: {after['kernel_completions'] - before['kernel_completions']:,} kernel calls, "
        f"CU busy {busy / (wall * cus):.3f}, {moved:,.0f} bytes to the card per event, "
        f"{direct:,.0f} of them from the request's memory in place"
    )
    side = after["device_side"]
    if side.get("mode") == "timing":
        calls = side.get("uncomputed_calls", 0) - before["device_side"].get("uncomputed_calls", 0)
        lines.append(
            f"card side: timing only (computed {str(side.get('computed')).lower()}): {calls:,} kernel calls timed and not "
            "computed, no bytes copied (device memory is host memory)"
        )
    # the card model's own CPU per event, in the engine (blocking included: a sleep costs the
    # system a context switch each way, as a real runtime's blocking waits do)
    n = max(requests, 1)
    cpu, blocked = stand_in
    pcie_us = event_bytes / (opts.pcie_gbps * 1e9) * 1e6
    work = (cpu - blocked) / n * 1e6
    lines.append(
        f"card model's own CPU per event: {work:,.1f} µs of work and {blocked / n * 1e6:,.1f} µs blocking for modelled "
        f"time; the event's PCIe time {pcie_us:,.1f} µs: work / PCIe time {work / pcie_us:.3f}"
    )
    return lines


# ----------------------------------------------------------------------------- engine side


@functools.cache
def _log_settings():
    """One per process: each LogSettings installs its own log handler, and a second would
    print every log line twice."""
    from fpgaserve.server.log_settings import LogSettings

    return LogSettings(0, "", "default")


async def _engine(opts) -> tuple[float, bool]:
    """One measurement; prints its block and returns (engine µs per request, every answer right)."""
    from fpgaserve.server.dataplane import DataPlane
    from fpgaserve.server.engine.repository import ModelRepository
    from fpgaserve.server.ipc.engine_server import EngineServer
    from fpgaserve.server.shared_memory import SystemSharedMemoryManager

    work = Path(tempfile.mkdtemp(prefix="bench-engine-"))
    repo = work / "repo"
    repo.mkdir()
    exact = None
    if opts.card:
        _card_environment(work, opts)
        exact = str(_card_repository(repo, opts.card_cus, opts.card_abi))
        if opts.sim_device == "timing":
            exact = None  # the card computes nothing: answers are checked for their shape only
    else:
        source = BUNDLED_REPO if opts.model == "facile" else CONFORMANCE_REPO
        shutil.copytree(source / opts.model, repo / opts.model)
    repository = ModelRepository(
        [str(repo)],
        backend_config={"hls4ml": {"fpga-mode": opts.fpga_mode, **({"card-api": opts.card_api} if opts.card else {})}},
    )
    shm = SystemSharedMemoryManager()
    dataplane = DataPlane(repository, shm, _log_settings())
    await repository.start()
    if opts.model not in repository.models or not repository.models[opts.model].versions:
        raise SystemExit(f"bench_engine: model {opts.model} did not load (fpga-mode {opts.fpga_mode})")
    socket_path = str(work / "engine.sock")
    server = EngineServer(dataplane, socket_path)
    await server.start()
    ctx = mp.get_context("spawn")
    queue, ready, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [
        ctx.Process(
            target=_frontend_main,
            args=((socket_path, opts.model, opts.batch, opts.concurrency, opts.seconds, exact), ready, go, queue),
        )
        for _ in range(opts.frontends)
    ]
    for p in procs:
        p.start()
    loop = asyncio.get_running_loop()
    warm = [await loop.run_in_executor(None, ready.get) for _ in procs]  # each checked its first answer
    card = None
    if opts.card:
        from fpga_sim import card as simcard

        card = simcard.get_card(0)
    card0 = card.stats if card is not None else None
    stand_in0 = simcard.stand_in_cpu_s() if opts.card else 0.0
    blocked0 = simcard.blocked_cpu_s() if opts.card else 0.0
    busy0, cpu0, t0 = _system_busy(), _cpu_self(), time.monotonic()
    go.set()
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
    results = [await loop.run_in_executor(None, queue.get) for _ in procs]
    wall, engine_cpu = time.monotonic() - t0, _cpu_self() - cpu0
    # the simulated runtime's own CPU in this process (its pyxrt calls, finalizers, stats
    # thread): the simulator's, not the server's, and printed apart
    stand_in_cpu = simcard.stand_in_cpu_s() - stand_in0 if opts.card else 0.0
    blocked_cpu = simcard.blocked_cpu_s() - blocked0 if opts.card else 0.0
    engine_cpu -= stand_in_cpu
    busy = _system_busy() - busy0
    card1 = card.stats if card is not None else None
    for p in procs:
        p.join()
    if profiler is not None:
        profiler.wait()
    await server.stop()
    await repository.stop()
    requests = sum(r[0] for r in results)
    bad = sum(r[1] for r in results)
    frontend_cpu = sum(r[2] for r in results)
    other = max(0.0, busy - engine_cpu - stand_in_cpu - frontend_cpu)
    rows = requests * opts.batch
    us = engine_cpu / max(requests, 1) * 1e6
    what = "FACILE events on the simulated card" if opts.card else f"model {opts.model}"
    print(
        f"{what}: model {opts.model} batch {opts.batch}, {opts.frontends} frontends x concurrency {opts.concurrency}, "
        f"{opts.seconds:g} s, fpga-mode {opts.fpga_mode}"
    )
    checked = "" if not opts.card or opts.sim_device != "timing" else "; shape only: a timing card computes no values"
    print(f"requests answered: {requests:,} ({bad} wrong{', warm-up included' if not all(warm) else ''}{checked})")
    print(f"throughput: {requests / wall:,.0f} requests/s" + (f", {rows / wall:,.0f} rows/s" if opts.batch > 1 else ""))
    print(
        f"engine CPU per request: {us:,.1f} µs ({engine_cpu / wall:.2f} cores; includes the model's execution"
        + (", not the card's own work" if opts.card else "")
        + ")"
    )
    if opts.card:
        print(
            f"the simulated card model's calls in the engine ({opts.card_api}, not counted above): "
            f"{stand_in_cpu / max(requests, 1) * 1e6:,.1f} µs per request"
        )
    print(f"frontend CPU per request (RemoteDataPlane only, no gRPC): {frontend_cpu / max(requests, 1) * 1e6:,.1f} µs")
    print(f"other processes meanwhile: {other / wall:.2f} cores (of {os.cpu_count()})")
    if card0 is not None and card1 is not None:
        for line in _card_report(opts, requests, wall, (stand_in_cpu, blocked_cpu), card0, card1):
            print(line)
        telemetry = _card_telemetry()
        if telemetry:
            print(f"card path: {telemetry}")
    if opts.profile:
        print(f"py-spy GIL samples of the engine: {opts.profile}")
    print()
    if card is not None:
        _release_card()
    shutil.rmtree(work, ignore_errors=True)
    return us, bool(requests) and not bad


def _card_telemetry() -> str:
    """What the model's card path counted (copies into buffers, zero-copy calls), if it counts."""
    try:
        from fpgaserve.backends.hls4ml.card.cards import CardPool

        pool = CardPool._instance
        if pool is None:
            return ""
        counts = getattr(pool.card(0), "transfer_counts", None)
        return json.dumps(counts()) if callable(counts) else ""
    except Exception:
        return ""


def _release_card() -> None:
    """Forget the card API and the simulated card (a later measurement starts afresh)."""
    from fpga_sim import card as simcard
    from fpgaserve.backends.hls4ml.card.cards import CardPool
    from fpgaserve.backends.hls4ml.card.runtime import reset_api

    CardPool.reset_instance()
    reset_api()
    simcard.forget_cards()


# ----------------------------------------------------------------------------- main

#: the default run: (name, --model, --batch, --fpga-mode, --card, --concurrency)
DEFAULT_RUNS = (
    ("simple_b1", "simple", 1, "onnx", False, 32),
    ("facile_b1", "facile", 1, "onnx", False, 32),
    ("facile_event", "facile", EVENT_ROWS, "hardware", True, 4),
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=("simple", "facile"), help="one measurement of this model (default: all three)")
    ap.add_argument("--card", action="store_true", help="FACILE on the simulated card (--fpga-mode hardware)")
    ap.add_argument("--batch", type=int, help="rows per request (default 1; 16000 with --card)")
    ap.add_argument("--frontends", type=int, default=2)
    ap.add_argument("--concurrency", type=int, help="requests in flight per frontend (default 32; 4 with --card)")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--fpga-mode", help="how FACILE runs (default onnx; hardware with --card)")
    ap.add_argument("--card-cus", type=int, default=4, help="compute units of the simulated card (default 4)")
    ap.add_argument(
        "--card-abi",
        choices=("kernel_wrapper", "krnl_rtl"),
        default="kernel_wrapper",
        help="the card's kernel: kernel_wrapper with HW_Quant on XRT 2.20's binding (float32 rows DMAed from the "
        "request's memory; default) or krnl_rtl (32-bit words the host encodes)",
    )
    ap.add_argument(
        "--card-api",
        choices=("xrt-c", "xrt"),
        default="xrt-c",
        help="how the engine drives the card: XRT's C API (its test double of libxrt_coreutil.so.2, compiled with "
        "cc; default) or XRT's pyxrt (the test-only module)",
    )
    ap.add_argument(
        "--xrt-version",
        default="2.20.197",
        help="the XRT release the simulated pyxrt presents (default 2.20.197: pyxrt.ext.bo exists)",
    )
    ap.add_argument("--pcie-gbps", type=float, default=12.0, help="the simulated card's PCIe rate, GB/s (default 12)")
    ap.add_argument(
        "--kernel-ii", type=int, help="kernel cycles per row (FPGASERVE_SIM_KERNEL_II; default the model's)"
    )
    ap.add_argument(
        "--sim-device",
        choices=("timing", "inline"),
        default="timing",
        help="the simulated card's work: nowhere (timing, the default: DMA and kernel time modelled, nothing copied or "
        "computed; answers checked for shape only) or in the card core on the engine's threads (inline: answers "
        "checked bit for bit; the card model's CPU is printed apart)",
    )
    ap.add_argument("--profile", help="write py-spy raw GIL samples of the engine here")
    opts = ap.parse_args(argv)
    if opts.model is None and not opts.card:
        if any(v is not None for v in (opts.batch, opts.concurrency, opts.fpga_mode)) or opts.profile:
            ap.error("--batch, --concurrency, --fpga-mode and --profile go with --model or --card")
        figures, ok, measured = [], True, {}
        for name, model, batch, mode, card, concurrency in DEFAULT_RUNS:
            run = argparse.Namespace(**{**vars(opts), "model": model, "batch": batch, "fpga_mode": mode, "card": card,
                                        "concurrency": concurrency})  # fmt: skip
            us, right = _run_engine(run)
            figures.append(f"{name}_us={us:.1f}")
            measured[name] = us
            ok = ok and right
        ratio = measured["facile_event"] / measured["simple_b1"] if measured["simple_b1"] else float("nan")
        print("bench_engine: " + " ".join(figures) + f" event_vs_b1={ratio:.1f}")
        return 0 if ok else 1
    if opts.card:
        if opts.model not in (None, "facile"):
            ap.error("--card serves FACILE")
        opts.model, opts.fpga_mode = "facile", opts.fpga_mode or "hardware"
        if opts.fpga_mode != "hardware":
            ap.error("--card runs --fpga-mode hardware")
    opts.batch = opts.batch or (EVENT_ROWS if opts.card else 1)
    opts.concurrency = opts.concurrency or (4 if opts.card else 32)
    opts.fpga_mode = opts.fpga_mode or "onnx"
    if opts.model == "simple" and opts.batch > 8:
        ap.error("simple takes batch <= 8")
    us, right = _run_engine(opts)
    key = "facile_event" if opts.card else f"{opts.model}_b{opts.batch}"
    print(f"bench_engine: {key}_us={us:.1f}")
    return 0 if right else 1


def _run_engine(opts) -> tuple[float, bool]:
    from fpgaserve.server import eventloop

    return eventloop.run(_engine(opts), fast=True)  # the engine's loop, as the server runs it


if __name__ == "__main__":
    sys.exit(main())
