#!/usr/bin/env python3
"""FACILE events on a simulated 4-CU U250-class card: every compute unit busy, DMA hidden.

Run from the repository root (the project venv is used automatically)::

    python tests/benchmarks/bench_card.py            # about 4 min
    python tests/benchmarks/bench_card.py --quick    # about 2 min
    python tests/benchmarks/bench_card.py --quick --pcie-only   # part 3 alone, about 1 min

The card is ``tests/fpga_sim`` behind the C double of XRT's ``libxrt_coreutil.so.2``
(``FPGASERVE_SIM_API=xrt-c``: the server runs ``card-api xrt-c``, as on a real host), with
its timing model: DMA at ``--pcie-gbps`` (default 12 GB/s, PCIe Gen3 x16) on one host-to-card
and one card-to-host channel, a kernel call taking ``(latency + II * (rows - 1)) / f_clk``.
``--ii`` (cycles per row, default 750) makes a 16,000-row event take 40 ms on a CU at 300 MHz,
so that the card, not this host, is the bottleneck: FACILE through ``krnl_rtl`` moves one
32-bit word per clock, II 47, 2.5 ms per event, which four CUs would turn into 1,600 events/s,
more than a 2-core host serves (the timing model spends no CPU while a kernel "runs"; the
simulator memoizes results of repeated inputs, so perf_analyzer's repeated tensor costs a byte
compare, not a C-simulation).

What it does:

1. **ABI codecs.** One server, one card per kernel ABI: hls4ml's VivadoAccelerator ``krnl_rtl``
   (the jet tagger), VitisAccelerator ``kernel_wrapper`` (the jet tagger as PR #991 builds it,
   native ``ap_fixed`` elements) and FaaST's ``alveo_hls4ml`` (a 16 -> 8 -> 1 MLP, 16-bit
   fields). Random, saturating, negative, zero and on-grid rows over gRPC, compared bit for bit
   with the numpy emulation (``--fpga-mode numpy``). ``abis_exact`` counts the ABIs with no
   differing row.
2. **Throughput.** FACILE (bundled project, float I/O) and one xclbin with four ``krnl_rtl``
   compute units on DDR[0..3]: ``facile_1cu`` (``compute_unit: krnl_rtl_1``, one instance: each
   event encodes, syncs, runs, syncs back and decodes before the next starts) and
   ``facile_4cu`` (``compute_unit: "*"``, eight instances: two per CU, one's DMA overlapping the
   other's kernel, XRT's queue starting the next call as the previous ends). perf_analyzer
   sends 16,000-row events over gRPC with system shared memory (``-b 16000 --shared-memory
   system``), at concurrency 2 and 16. events/s = perf_analyzer's infer/s / 16,000; the card's
   busy fraction = the simulator's own per-CU busy time over a steady window in the middle of
   the run / (window x CUs).
3. **At PCIe rate, against a native host program.** FACILE as VitisAccelerator builds it with
   ``HW_Quant`` (float32 rows: the request's shared-memory pages are synced in place), four
   ``kernel_wrapper`` CUs whose kernel is faster than PCIe, the card's work timed but not
   computed (``FPGASERVE_SIM_DEVICE=timing``: what the card model costs the host is then what a
   card would; parts 1 and 2 check results). First the reference: ``native_host.c`` (compiled
   here with ``cc`` against the same ``libxrt_coreutil.so.2``), a C host program driving the
   card as fastmachinelearning/nrp_u55c_benchmark's host does -- 4 CUs, B buffer slots per CU
   (B = 1, 2, 4), each slot one event in flight (sync in, start, wait, sync out), the same
   16,000-row events and kernel ABI, no server and no Python of its own (the simulated card's
   cold path runs in an interpreter the C double embeds; no event touches it). Then fpgaserve,
   same card settings, perf_analyzer as in part 2 at concurrency 8 (and 16). The PCIe limit is
   the busier DMA direction's: 12 GB/s / (16,000 x 47 x 4 bytes in) events/s.

The block gives each process's CPU per event in fpgaserve's run (engine, frontends,
perf_analyzer) and the card model's own CPU per event (the card core's work, and apart the CPU
of blocking for modelled time that a real runtime's waits cost too) against the event's PCIe time;
in the server that leaves out the simulator's stats files this benchmark reads (about 20 writes
a second whatever the event rate), in the native program it does not.

The last line is ``bench_card: abis_exact=<n>/3 speedup=<4 CUs / 1 CU events/s> busy=<4-CU busy>
api=<card API> gil=<released|held> native_pcie=<the native program's best events/s ÷ the PCIe
limit> native_fraction=<fpgaserve's best events/s ÷ the native program's>``; ``gil`` is the C
double's own count of blocking calls entered holding the GIL.
This file is named bench_*.py so pytest never collects it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_facile_vs_triton as common  # re-execs under the project venv when needed

ROOT = common.ROOT

import numpy as np  # noqa: E402

from support.server_process import ServerProcess  # noqa: E402

SERVE = ROOT / "tests" / "fpga_sim" / "serve.py"
#: the card API every part uses: XRT's C API through its test double (tests/fpga_sim/xrt_c)
API = "xrt-c"
FACILE = ROOT / "bitstreams" / "facile" / "1"
JET = ROOT / "bitstreams" / "jet_tagger" / "1"
EVENT_ROWS = 16000
N_IN, N_OUT = 47, 1
CUS = 4
CLOCK_MHZ = 300
TICK = os.sysconf("SC_CLK_TCK")
NATIVE = ROOT / "tests" / "benchmarks" / "native_host.c"


def log(msg: str) -> None:
    common.log(msg)


# ------------------------------------------------------------------------------ repository
def record(version: Path, abi: str, **kw) -> str:
    """The simulator's xclbin next to the project, and card.json as `fpgaserve pack --xclbin` writes it."""
    from fpga_sim.xclbin import write_xclbin
    from fpgaserve.backends.hls4ml.card.axlf import read_xclbin
    from fpgaserve.backends.hls4ml.card.manifest import CardManifest
    from fpgaserve.backends.hls4ml.project import Hls4mlProject

    uuid = write_xclbin(version / "model.xclbin", kernel_abi=abi, project=version, **kw)
    CardManifest.for_project(Hls4mlProject.load(version), abi, read_xclbin(version / "model.xclbin")).write(version)
    return uuid


def config(repo: Path, name: str, n_in: int, n_out: int, count: int, params: dict[str, str], max_batch: int) -> None:
    lines = [
        f'name: "{name}"',
        'backend: "hls4ml"',
        f"max_batch_size: {max_batch}",
        f'input [ {{ name: "x" data_type: TYPE_FP32 dims: [ {n_in} ] }} ]',
        f'output [ {{ name: "y" data_type: TYPE_FP32 dims: [ {n_out} ] }} ]',
        f"instance_group [ {{ count: {count} kind: KIND_MODEL }} ]",
    ]
    lines += [f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}' for k, v in params.items()]
    (repo / name).mkdir(parents=True, exist_ok=True)
    (repo / name / "config.pbtxt").write_text("\n".join(lines) + "\n")


def abi_repository(root: Path) -> dict[str, tuple[Path, int, int]]:
    from fpga_sim.projects import faast_project, kernel_wrapper_project

    repo = root / "abis"
    out = {}
    v = repo / "krnl_rtl" / "1"
    shutil.copytree(JET, v)
    record(v, "krnl_rtl", cus=1)
    out["krnl_rtl"] = (v, 16, 5)
    v = kernel_wrapper_project(JET, repo / "kernel_wrapper" / "1", num_kernel=1)
    record(v, "kernel_wrapper", cus=1)
    out["kernel_wrapper"] = (v, 16, 5)
    v = faast_project(repo / "faast" / "1")
    record(v, "faast", cus=1)
    out["faast"] = (v, 16, 1)
    for card, (name, (_version, n_in, n_out)) in enumerate(out.items()):
        config(repo, name, n_in, n_out, 1, {"cards": str(card)}, 16384)
    return out


def facile_repository(root: Path) -> Path:
    repo = root / "facile"
    version = repo / "facile_4cu" / "1"
    shutil.copytree(FACILE, version)
    banks = [f"DDR[{i}]" for i in range(CUS)]
    record(version, "krnl_rtl", cus=CUS, cu_banks=banks)
    config(repo, "facile_4cu", N_IN, N_OUT, 2 * CUS, {"compute_unit": "*"}, 16384)
    # the 1-CU model runs on the same xclbin's first compute unit
    (repo / "facile_1cu").mkdir()
    os.symlink(version, repo / "facile_1cu" / "1")
    config(repo, "facile_1cu", N_IN, N_OUT, 1, {"compute_unit": "krnl_rtl_1"}, 16384)
    return repo


def serve(repo: Path, workdir: Path, label: str, cards: int, env: dict[str, str], *models: str) -> ServerProcess:
    control = workdir / f"{label}-control"
    control.mkdir()
    args = ["--fpga-mode", "hardware", "--model-control-mode", "explicit", "--allow-client-shm=true"]
    for m in models:
        args += ["--load-model", m]
    full_env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("FPGASERVE_SIM_")},
        "FPGASERVE_SIM_CARDS": str(cards),
        "FPGASERVE_SIM_CONTROL_DIR": str(control),
        "FPGASERVE_SIM_API": API,
        **env,
    }
    proc = ServerProcess([repo], *args, log_path=workdir / f"{label}.log", env=full_env, entry=[SERVE])
    proc.control = control  # type: ignore[attr-defined]
    return proc.start(timeout=300)


def stats(server: ServerProcess, card: int = 0) -> dict:
    return json.loads((server.control / f"stats-card{card}.json").read_text())  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------ part 1
def exact_inputs(n_in: int, rows: int, seed: int) -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    grid = np.round(rng.normal(0, 8, (rows, n_in)) * 1024) / 1024  # ap_fixed<16,6>'s grid
    return [
        ("random", rng.standard_normal((rows, n_in)).astype(np.float32)),
        ("saturating", (rng.standard_normal((rows, n_in)) * 60).astype(np.float32)),
        ("negative", -np.abs(rng.standard_normal((rows, n_in)) * 4).astype(np.float32)),
        ("zeros", np.zeros((rows, n_in), np.float32)),
        ("on-grid", grid.astype(np.float32)),
        ("one row", rng.standard_normal((1, n_in)).astype(np.float32)),
    ]


def part_abis(workdir: Path, quick: bool) -> tuple[int, list[str]]:
    import tritonclient.grpc as grpcclient

    from fpgaserve.backends.hls4ml.emulator import FixedPointModel
    from fpgaserve.backends.hls4ml.project import Hls4mlProject

    models = abi_repository(workdir)
    server = serve(workdir / "abis", workdir, "abis", len(models), {}, *models)
    lines, exact = [], 0
    try:
        with grpcclient.InferenceServerClient(server.url) as client:
            for card, (name, (version, n_in, _)) in enumerate(models.items()):
                emulator = FixedPointModel(Hls4mlProject.load(version))
                before = stats(server, card)["kernel_starts"]
                bad, total = 0, 0
                for what, x in exact_inputs(n_in, 500 if quick else 3000, seed=card):
                    t = grpcclient.InferInput("x", list(x.shape), "FP32")
                    t.set_data_from_numpy(x)
                    got = client.infer(name, [t]).as_numpy("y")
                    want = emulator.predict(x).astype(np.float32)
                    differ = int(np.count_nonzero((got.view(np.uint32) != want.view(np.uint32)).any(axis=1)))
                    bad += differ
                    total += len(x)
                    if differ:
                        lines.append(f"  {name} {what}: {differ} of {len(x)} rows differ")
                time.sleep(0.2)  # the simulator writes its stats within 50 ms
                calls = stats(server, card)["kernel_starts"] - before
                exact += int(bad == 0 and calls > 0)
                lines.append(f"| {name} | {total} | {bad} | {calls} kernel calls on card {card} |")
    finally:
        server.stop()
    return exact, lines


# ------------------------------------------------------------------------------ part 2
@dataclass
class Run:
    model: str
    concurrency: int
    events_s: float | None
    busy: float | None
    window_s: float
    card_events_s: float | None
    cmd: list[str]
    note: str = ""
    #: CPU µs per event of each process (engine, frontends, perf_analyzer) over the window
    cpu_us: dict[str, float] = field(default_factory=dict)
    #: the card model's CPU µs per event in the server: (all of it, of which blocking)
    card_model_us: tuple[float, float] | None = None


def _label(pid: int) -> str:
    """What a process of the run is: the server's engine or a frontend, perf_analyzer, ..."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"
    if any(a.endswith(("frontend_process", "frontend_process.py")) for a in argv):
        return "frontend"
    if any(a.endswith("serve.py") for a in argv):
        return "engine"
    return "perf_analyzer" if comm.startswith("perf_analyzer") else comm


def _cpu_by_process(root: int) -> dict[int, tuple[str, float]]:
    """pid -> (label, utime+stime seconds) of ``root`` and its live descendants."""
    out = {}
    for pid in common._descendants(root):
        f = common._stat_fields(pid)
        if f:
            out[pid] = (_label(pid), (int(f[11]) + int(f[12])) / TICK)
    return out


def _spy(server: ServerProcess, seconds: float, profile: Path, tag: str) -> list[subprocess.Popen]:
    """py-spy, recording the engine and each frontend process for ``seconds`` (collapsed stacks,
    one file per process under ``profile``): where each spends its CPU per event."""
    spy = Path(sys.executable).with_name("py-spy")
    procs = []
    for pid, (label, _cpu) in _cpu_by_process(server.proc.pid).items():  # type: ignore[union-attr]
        if label in ("engine", "frontend"):
            out = profile / f"{tag}-{label}-{pid}.txt"
            cmd = [str(spy), "record", "--pid", str(pid), "--duration", str(max(1, round(seconds))), "--rate", "250"]
            # Python frames only: native ones need py-spy to pause the process per sample, and
            # then every thread blocked in a wait counts as busy (py-spy's idle test fails there)
            cmd += ["--format", "raw", "--nonblocking", "--output", str(out)]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return procs


def measure(
    server: ServerProcess,
    model: str,
    concurrency: int,
    window_ms: int,
    workdir: Path,
    cus: list[str],
    profile: Path | None = None,
) -> Run:
    pa = common.PA_EXE
    csv_path = workdir / f"{model}-c{concurrency}.csv"
    cmd = [
        *common.pa_command(model, server.url, EVENT_ROWS, concurrency, exe=pa),
        "--shared-memory",
        "system",
        "--output-shared-memory-size",
        str(EVENT_ROWS * N_OUT * 4),
        *common.pa_windows(window_ms, 25, 8),
        "-f",
        str(csv_path),
    ]
    samples: list[tuple[float, dict, dict]] = []
    stop = threading.Event()
    spies: list[subprocess.Popen] = []

    def snapshot():
        cpu = {**_cpu_by_process(server.proc.pid), **_cpu_by_process(os.getpid())}  # type: ignore[union-attr]
        samples.append((time.monotonic(), stats(server), cpu))

    def sampler():
        # two snapshots of the card's own accounting and every process's CPU inside
        # perf_analyzer's steady phase
        if stop.wait(window_ms / 1000 * 1.5):
            return
        snapshot()
        if profile is not None:  # sampling costs CPU: a profiled run's figures are not the benchmark's
            spies.extend(_spy(server, window_ms / 1000 * 2, profile, f"{model}-c{concurrency}"))
        if stop.wait(window_ms / 1000 * 2):
            return
        snapshot()

    thread = threading.Thread(target=sampler)
    thread.start()
    assert server.proc is not None
    attempt = common.run_pa(cmd, 600, [server.proc.pid])[0]
    stop.set()
    thread.join()
    for spy in spies:
        spy.wait(timeout=60)
    row = common._read_csv(csv_path)
    infer_s = common.col(row, "Inferences/Second")
    note = "" if attempt.rc == 0 else f"perf_analyzer exit {attempt.rc}: {attempt.output[-300:]}"
    busy = card_rate = None
    window = 0.0
    cpu_us: dict[str, float] = {}
    card_model = None
    if len(samples) == 2:
        (t0, s0, c0), (t1, s1, c1) = samples
        window = t1 - t0
        busy_s = sum(s1["cus"][c]["busy_s"] - s0["cus"][c]["busy_s"] for c in cus)
        busy = busy_s / (window * len(cus))
        events = s1["kernel_completions"] - s0["kernel_completions"]
        card_rate = events / window
        n = max(events, 1)
        for pid, (label, cpu) in c1.items():
            if pid in c0 and label in ("engine", "frontend", "perf_analyzer"):
                key = "frontends" if label == "frontend" else label
                cpu_us[key] = cpu_us.get(key, 0.0) + (cpu - c0[pid][1]) / n * 1e6
        # the card model's own CPU, metered in the engine (its calls, blocking included)
        used = s1["stand_in"]["cpu_s"] - s0["stand_in"]["cpu_s"]
        blocked = s1["stand_in"].get("blocked_s", 0.0) - s0["stand_in"].get("blocked_s", 0.0)
        # the stats files the benchmark reads cost the server's process per second, not per event
        files = s1["stand_in"].get("stats_files_s", 0.0) - s0["stand_in"].get("stats_files_s", 0.0)
        card_model = ((used - files) / n * 1e6, blocked / n * 1e6)
        if "engine" in cpu_us:
            cpu_us["engine"] -= used / n * 1e6  # printed apart: the simulator's, not the server's
    else:
        note += " perf_analyzer ended before the second card snapshot"
    events_s = infer_s / EVENT_ROWS if infer_s else None
    return Run(model, concurrency, events_s, busy, window, card_rate, cmd, note, cpu_us, card_model)


def part_throughput(workdir: Path, ii: int, gbps: float, quick: bool) -> tuple[list[Run], str]:
    repo = facile_repository(workdir)
    env = {"FPGASERVE_SIM_KERNEL_II": str(ii), "FPGASERVE_SIM_PCIE_GBPS": str(gbps)}
    server = serve(repo, workdir, "facile", 1, env, "facile_1cu", "facile_4cu")
    window = 3000 if quick else 6000
    try:
        model_info = stats(server)["models"]
        runs = [
            measure(server, "facile_1cu", 2, window, workdir, ["krnl_rtl_1"]),
            measure(server, "facile_4cu", 4 * CUS, window, workdir, [f"krnl_rtl_{i + 1}" for i in range(CUS)]),
        ]
    finally:
        server.stop()
    return runs, json.dumps(model_info)


# ------------------------------------------------------------------------------ part 3
def pcie_repository(root: Path) -> Path:
    """FACILE as hls4ml's VitisAccelerator builds it with ``HW_Quant`` (float32 rows in card
    memory, so a request's rows are the kernel's input, synced from where they lie), four
    ``kernel_wrapper`` CUs on DDR[0], the project's own II: a call takes less than its PCIe time."""
    from fpga_sim.projects import kernel_wrapper_project

    repo = root / "pcie"
    version = repo / "facile_pcie" / "1"
    kernel_wrapper_project(FACILE, version, num_kernel=CUS, batchsize=EVENT_ROWS, hw_quant=True)
    record(version, "kernel_wrapper", cus=CUS, cu_banks=["DDR[0]"] * CUS)
    config(repo, "facile_pcie", N_IN, N_OUT, 2 * CUS, {"compute_unit": "*"}, EVENT_ROWS)
    return repo


def card_api_in_use(server: ServerProcess) -> str:
    """The card API the server reports at start ("FPGA cards: N through card-api NAME")."""
    match = re.search(r"through card-api (\S+)", server.log())
    return match.group(1) if match else "unknown"


def gil_verdict(card_stats: dict) -> str:
    """``released`` when every blocking call of XRT's C API double ran without the GIL, ``held``
    when any held it, ``n/a`` when no such call was made (another API)."""
    calls = card_stats.get("xrt_c", {})
    if not calls.get("blocking_calls"):
        return "n/a"
    return "held" if calls.get("blocking_calls_holding_gil") else "released"


@dataclass
class Native:
    buffers: int
    events_s: float | None
    cpu_us: float | None
    card_model_us: float | None
    blocked_us: float | None
    cmd: list[str]
    note: str = ""


_NATIVE_LINE = re.compile(r"native_host: events=(\d+) .*events_per_s=([\d.]+) cpu_us_per_event=([\d.]+)")


def part_native(workdir: Path, gbps: float, quick: bool) -> list[Native]:
    """The native host program on the card of part 3: 4 CUs, 1, 2 and 4 buffers in flight per CU."""
    from fpga_sim import native
    from fpga_sim.xrt_c import default_xrt_root

    repo = pcie_repository(workdir / "native")
    xclbin = repo / "facile_pcie" / "1" / "model.xclbin"
    control = workdir / "native-control"
    control.mkdir()
    settings = {
        "FPGASERVE_SIM_CARDS": "1",
        "FPGASERVE_SIM_CONTROL_DIR": str(control),
        "FPGASERVE_SIM_DEVICE": "timing",
        "FPGASERVE_SIM_PCIE_GBPS": str(gbps),
    }
    env = native.environment(settings)
    exe = native.compile_host(NATIVE, workdir / "native_host", default_xrt_root())
    out = []
    for buffers in (1, 2, 4):
        cmd = [str(exe), str(xclbin), "kernel_wrapper", str(CUS), str(buffers), str(EVENT_ROWS), str(N_IN), str(N_OUT)]
        cmd.append("3" if quick else "6")
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
        m = _NATIVE_LINE.search(done.stdout)
        extra = dict(re.findall(r"(card_model_us_per_event|blocked_us_per_event)=([\d.]+)", done.stdout))
        if m is None:
            out.append(Native(buffers, None, None, None, None, cmd, f"exit {done.returncode}: {done.stderr[-400:]}"))
            continue
        out.append(
            Native(
                buffers,
                float(m.group(2)),
                float(m.group(3)),
                float(extra["card_model_us_per_event"]) if "card_model_us_per_event" in extra else None,
                float(extra["blocked_us_per_event"]) if "blocked_us_per_event" in extra else None,
                cmd,
            )
        )
    return out


def part_pcie(workdir: Path, gbps: float, quick: bool, profile: Path | None = None) -> tuple[list[Run], dict]:
    """FACILE events through the whole server at PCIe rate: perf_analyzer over gRPC with system
    shared memory, the card's work timed, not computed (``FPGASERVE_SIM_DEVICE=timing``: the
    card model costs the host what a card would; parts 1 and 2 compute every result)."""
    repo = pcie_repository(workdir)
    env = {"FPGASERVE_SIM_PCIE_GBPS": str(gbps), "FPGASERVE_SIM_DEVICE": "timing", "FPGASERVE_SIM_API": API}
    server = serve(repo, workdir, "pcie", 1, env, "facile_pcie")
    window = 3000 if quick else 6000
    cus = [f"kernel_wrapper_{i + 1}" for i in range(CUS)]
    try:
        info = {"api": card_api_in_use(server)}
        runs = [measure(server, "facile_pcie", c, window, workdir, cus, profile) for c in ((8,) if quick else (8, 16))]
        info["stats"] = stats(server)
    finally:
        server.stop()
    return runs, info


# ------------------------------------------------------------------------------ main
def install_perf_analyzer() -> None:
    """perf_analyzer through the shared installer when .tools lacks it (Triton is not needed here)."""
    exe = common.PA_EXE
    if exe.is_file() and os.access(exe, os.X_OK):
        return
    installer = common.SHARED / "tools" / "get-perf-analyzer"
    log(f"installing perf_analyzer with {installer}")
    subprocess.run(["bash", str(installer), str(common.PA_DEST)], check=True, cwd=ROOT)


def pcie_report(native: list[Native], runs: list[Run], info: dict, gbps: float) -> tuple[list[str], float, float]:
    """Part 3's block: the native program, fpgaserve, each process's CPU per event, the card
    model's; and (native_pcie, native_fraction)."""
    event_in = EVENT_ROWS * N_IN * 4  # the busier direction: 3,008,000 bytes in, 64,000 out
    pcie_s = event_in / (gbps * 1e9)
    limit = 1 / pcie_s
    best_native = max(native, key=lambda n: n.events_s or 0.0)
    native_rate = best_native.events_s or 0.0
    best = max(runs, key=lambda r: r.events_s or 0.0) if runs else None
    served = (best.events_s or 0.0) if best else 0.0
    side = info["stats"].get("device_side", {})
    lines = [
        f"card API {info['api']} (GIL {gil_verdict(info['stats'])} in its blocking calls); `kernel_wrapper` with "
        f"HW_Quant, {CUS} CUs on DDR[0], the project's kernel timing (faster than PCIe); the card side is "
        f"`{side.get('mode')}` (timed, not computed: parts 1 and 2 check results); PCIe {gbps:g} GB/s: "
        f"{pcie_s * 1e6:.1f} µs per event in ({event_in:,} bytes), limit {limit:,.0f} events/s",
        "",
        "| host | setting | events/s | ÷ PCIe limit | ÷ native | CPU µs per event |",
        "|---|---|---:|---:|---:|---|",
    ]
    for n in native:
        cpu = (
            f"the program {common.fmt(n.cpu_us, 1)} (of which the card model {common.fmt(n.card_model_us, 1)}, "
            f"blocking {common.fmt(n.blocked_us, 1)})"
        )
        lines.append(
            f"| native_host.c | {CUS} CUs x {n.buffers} buffers | {common.fmt(n.events_s, 1)} | "
            f"{common.fmt((n.events_s or 0) / limit, 3)} | | {cpu} |"
        )
    for r in runs:
        cpu = ", ".join(f"{k} {v:,.1f}" for k, v in sorted(r.cpu_us.items()))
        lines.append(
            f"| fpgaserve (gRPC, system shm) | concurrency {r.concurrency} | {common.fmt(r.events_s, 1)} | "
            f"{common.fmt((r.events_s or 0) / limit, 3)} | {common.fmt((r.events_s or 0) / native_rate, 3)} | {cpu} |"
        )
    lines.append("")
    for who, model in [
        *((f"native_host.c, {n.buffers} buffers per CU", (n.card_model_us, n.blocked_us)) for n in native),
        *((f"fpgaserve c{r.concurrency}", r.card_model_us or (None, None)) for r in runs),
    ]:
        total, blocked = model
        if total is None:
            continue
        work = total - (blocked or 0.0)
        lines.append(
            f"card model's own CPU per event ({who}): {work:,.1f} µs of work ({work / (pcie_s * 1e6):.1%} of the "
            f"event's PCIe time) and {blocked or 0.0:,.1f} µs blocking for modelled time (a real runtime's waits cost "
            "that too)"
        )
    lines += ["", "commands:", ""]
    lines += [f"    {' '.join(n.cmd)}" + (f"  # {n.note}" if n.note else "") for n in native]
    lines += [f"    {' '.join(str(c) for c in r.cmd)}" + (f"  # {r.note}" if r.note else "") for r in runs]
    return lines, native_rate / limit, served / native_rate if native_rate else 0.0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="shorter windows and fewer exactness rows")
    p.add_argument("--ii", type=int, default=750, help="kernel cycles per row (FPGASERVE_SIM_KERNEL_II), default 750")
    p.add_argument("--pcie-gbps", type=float, default=12.0, help="simulated PCIe rate, GB/s (default 12)")
    p.add_argument("--out", help="also write the report to this file")
    p.add_argument("--pcie-only", action="store_true", help="part 3 alone (no exactness, no 1-CU/4-CU comparison)")
    p.add_argument(
        "--profile",
        metavar="DIR",
        help="py-spy records part 3's engine and frontends into DIR (collapsed stacks; the sampling costs CPU)",
    )
    args = p.parse_args()
    install_perf_analyzer()
    if shutil.which("g++") is None:
        sys.exit("the simulated kernels run the C-simulation: g++ is needed")
    workdir = Path(tempfile.mkdtemp(prefix="bench-card-"))
    os.environ.setdefault("FPGASERVE_CACHE_DIR", str(workdir / "csim-cache"))
    sys.path.insert(0, str(ROOT / "tests"))
    report: list[str] = []
    exact, speedup, four_busy = None, None, None
    if not args.pcie_only:
        log(f"part 1: the three kernel ABIs bit for bit (work folder {workdir})")
        exact, abi_lines = part_abis(workdir, args.quick)
        log(f"part 2: FACILE events, II {args.ii}, PCIe {args.pcie_gbps:g} GB/s")
        runs, model_info = part_throughput(workdir, args.ii, args.pcie_gbps, args.quick)
        kernel_s = (EVENT_ROWS - 1) * args.ii / (CLOCK_MHZ * 1e6)
        event_bytes = EVENT_ROWS * (N_IN + N_OUT) * 4
        pcie_limit = args.pcie_gbps * 1e9 / (EVENT_ROWS * N_IN * 4)
        one, four = runs
        speedup = four.events_s / one.events_s if one.events_s and four.events_s else None
        four_busy = four.busy
        report = [
            "# bench_card: FACILE on a simulated 4-CU card",
            "",
            f"`python tests/benchmarks/bench_card.py{' --quick' if args.quick else ''}` (II {args.ii}, PCIe "
            f"{args.pcie_gbps:g} GB/s); simulator's timing of the kernel: {model_info}",
            "",
            "## ABI codecs over gRPC vs the numpy emulation",
            "",
            "| ABI | rows | rows differing | |",
            "|---|---:|---:|---|",
            *abi_lines,
            "",
            "## FACILE events (16,000 rows) over gRPC with system shared memory",
            "",
            f"one kernel call: {kernel_s * 1e3:.1f} ms; one event over PCIe: {event_bytes / (args.pcie_gbps * 1e9) * 1e3:.2f} "
            f"ms in + out; 4 CUs' compute limit {CUS / kernel_s:,.1f} events/s",
            "",
            "| model | concurrency | events/s (perf_analyzer) | events/s (card) | card busy | ÷ PCIe limit |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for r in runs:
            report.append(
                f"| {r.model} | {r.concurrency} | {common.fmt(r.events_s, 1)} | {common.fmt(r.card_events_s, 1)} | "
                f"{common.fmt(r.busy, 3)} | {common.fmt(r.events_s / pcie_limit if r.events_s else None, 4)} |"
            )
        report += ["", "perf_analyzer commands:", ""]
        report += [f"    {' '.join(str(c) for c in r.cmd)}" for r in runs]
        report += [f"note: {r.model} c{r.concurrency}: {r.note}" for r in runs if r.note]
        report.append("")
    log("part 3: the native host program at PCIe rate (4 CUs x 1, 2, 4 buffers)")
    native = part_native(workdir, args.pcie_gbps, args.quick)
    log(f"part 3: FACILE events at PCIe rate through the whole server, card API {API}")
    profile = Path(args.profile).resolve() if args.profile else None
    if profile is not None:
        profile.mkdir(parents=True, exist_ok=True)
    pcie_runs, pcie_info = part_pcie(workdir, args.pcie_gbps, args.quick, profile)
    lines, native_pcie, native_fraction = pcie_report(native, pcie_runs, pcie_info, args.pcie_gbps)
    report += ["## FACILE events at PCIe rate: the native host program and fpgaserve, same card", "", *lines]
    head = (
        ""
        if args.pcie_only
        else f"abis_exact={exact}/3 speedup={common.fmt(speedup, 2)} busy={common.fmt(four_busy, 3) if four_busy is not None else 'n/a'} "
    )
    last = (
        f"bench_card: {head}api={pcie_info['api']} gil={gil_verdict(pcie_info['stats'])} "
        f"native_pcie={native_pcie:.3f} native_fraction={native_fraction:.3f}"
    )
    report += ["", last]
    text = "\n".join(report)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    shutil.rmtree(workdir, ignore_errors=True)
    return 0 if exact in (None, 3) else 1


if __name__ == "__main__":
    sys.exit(main())
