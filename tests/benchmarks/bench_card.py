#!/usr/bin/env python3
"""FACILE events on a simulated 4-CU U250-class card: every compute unit busy, DMA hidden.

Run from the repository root (the project venv is used automatically)::

    python tests/benchmarks/bench_card.py            # about 4 min
    python tests/benchmarks/bench_card.py --quick    # about 2 min
    python tests/benchmarks/bench_card.py --quick --pcie-only   # part 3 alone, about 30 s

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
3. **At PCIe rate.** FACILE as VitisAccelerator builds it with ``HW_Quant`` (float32 rows:
   the request's shared-memory pages are synced in place), four ``kernel_wrapper`` CUs whose
   kernel is faster than PCIe, the card's work timed but not computed
   (``FPGASERVE_SIM_DEVICE=timing``: what the card model costs the host is then what a card
   would; parts 1 and 2 check results), perf_analyzer as in part 2 at concurrency 8 (and 16).
   The PCIe limit: 12 GB/s / (16,000 x 48 x 4 bytes in and out) events/s.

The last line is ``bench_card: abis_exact=<n>/3 speedup=<4 CUs / 1 CU events/s> busy=<4-CU busy>
api=<card API> gil=<released|held> pcie_fraction=<part 3's best events/s ÷ the PCIe limit>``;
``gil`` is the C double's own count of blocking calls entered holding the GIL.
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
from dataclasses import dataclass
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


def measure(server: ServerProcess, model: str, concurrency: int, window_ms: int, workdir: Path, cus: list[str]) -> Run:
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
    samples: list[tuple[float, dict]] = []
    stop = threading.Event()

    def sampler():
        # two snapshots of the card's own accounting inside perf_analyzer's steady phase
        if stop.wait(window_ms / 1000 * 1.5):
            return
        samples.append((time.monotonic(), stats(server)))
        if stop.wait(window_ms / 1000 * 2):
            return
        samples.append((time.monotonic(), stats(server)))

    thread = threading.Thread(target=sampler)
    thread.start()
    assert server.proc is not None
    attempt = common.run_pa(cmd, 600, [server.proc.pid])[0]
    stop.set()
    thread.join()
    row = common._read_csv(csv_path)
    infer_s = common.col(row, "Inferences/Second")
    note = "" if attempt.rc == 0 else f"perf_analyzer exit {attempt.rc}: {attempt.output[-300:]}"
    busy = card_rate = None
    window = 0.0
    if len(samples) == 2:
        (t0, s0), (t1, s1) = samples
        window = t1 - t0
        busy_s = sum(s1["cus"][c]["busy_s"] - s0["cus"][c]["busy_s"] for c in cus)
        busy = busy_s / (window * len(cus))
        card_rate = (s1["kernel_completions"] - s0["kernel_completions"]) / window
    else:
        note += " perf_analyzer ended before the second card snapshot"
    return Run(model, concurrency, infer_s / EVENT_ROWS if infer_s else None, busy, window, card_rate, cmd, note)


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


def part_pcie(workdir: Path, gbps: float, quick: bool) -> tuple[list[Run], dict]:
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
        runs = [measure(server, "facile_pcie", c, window, workdir, cus) for c in ((8,) if quick else (8, 16))]
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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="shorter windows and fewer exactness rows")
    p.add_argument("--ii", type=int, default=750, help="kernel cycles per row (FPGASERVE_SIM_KERNEL_II), default 750")
    p.add_argument("--pcie-gbps", type=float, default=12.0, help="simulated PCIe rate, GB/s (default 12)")
    p.add_argument("--out", help="also write the report to this file")
    p.add_argument("--pcie-only", action="store_true", help="part 3 alone (no exactness, no 1-CU/4-CU comparison)")
    args = p.parse_args()
    install_perf_analyzer()
    if shutil.which("g++") is None:
        sys.exit("the simulated kernels run the C-simulation: g++ is needed")
    workdir = Path(tempfile.mkdtemp(prefix="bench-card-"))
    os.environ.setdefault("FPGASERVE_CACHE_DIR", str(workdir / "csim-cache"))
    sys.path.insert(0, str(ROOT / "tests"))
    if args.pcie_only:
        log(f"part 3 only: FACILE events at PCIe rate through the whole server, card API {API}")
        pcie_runs, pcie_info = part_pcie(workdir, args.pcie_gbps, args.quick)
        limit = args.pcie_gbps * 1e9 / (EVENT_ROWS * (N_IN + N_OUT) * 4)
        for r in pcie_runs:
            print(
                f"{r.model} c{r.concurrency}: {common.fmt(r.events_s, 1)} events/s, card busy {common.fmt(r.busy, 3)}"
            )
            print(f"    {' '.join(str(c) for c in r.cmd)}" + (f"\n    note: {r.note}" if r.note else ""))
        best = max((r.events_s or 0.0 for r in pcie_runs), default=0.0)
        print(
            f"bench_card: api={pcie_info['api']} gil={gil_verdict(pcie_info['stats'])} pcie_fraction={best / limit:.3f}"
        )
        shutil.rmtree(workdir, ignore_errors=True)
        return 0
    log(f"part 1: the three kernel ABIs bit for bit (work folder {workdir})")
    exact, abi_lines = part_abis(workdir, args.quick)
    log(f"part 2: FACILE events, II {args.ii}, PCIe {args.pcie_gbps:g} GB/s")
    runs, model_info = part_throughput(workdir, args.ii, args.pcie_gbps, args.quick)
    log(f"part 3: FACILE events at PCIe rate through the whole server, card API {API}")
    pcie_runs, pcie_info = part_pcie(workdir, args.pcie_gbps, args.quick)

    kernel_s = (EVENT_ROWS - 1) * args.ii / (CLOCK_MHZ * 1e6)
    event_bytes = EVENT_ROWS * (N_IN + N_OUT) * 4
    pcie_limit = args.pcie_gbps * 1e9 / event_bytes
    one, four = runs
    speedup = four.events_s / one.events_s if one.events_s and four.events_s else None
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
        f"one kernel call: {kernel_s * 1e3:.1f} ms; one event over PCIe: {event_bytes / (args.pcie_gbps * 1e9) * 1e3:.2f} ms "
        f"in + out; PCIe limit {pcie_limit:,.0f} events/s; 4 CUs' compute limit {CUS / kernel_s:,.1f} events/s",
        "",
        "| model | concurrency | events/s (perf_analyzer) | events/s (card) | card busy | ÷ PCIe limit |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        report.append(
            f"| {r.model} | {r.concurrency} | {common.fmt(r.events_s, 1)} | {common.fmt(r.card_events_s, 1)} | "
            f"{common.fmt(r.busy, 3)} | {common.fmt(r.events_s / pcie_limit if r.events_s else None, 4)} |"
        )
    best_pcie = max((r.events_s or 0.0 for r in pcie_runs), default=0.0)
    gil = gil_verdict(pcie_info["stats"])
    side = pcie_info["stats"].get("device_side", {})
    report += [
        "",
        "## FACILE events at PCIe rate through the whole server",
        "",
        f"card API {pcie_info['api']} (GIL {gil} in its blocking calls); `kernel_wrapper` with HW_Quant, {CUS} CUs, "
        f"the project's kernel timing (faster than PCIe); the card side is `{side.get('mode')}` (timed, not computed: "
        "parts 1 and 2 check results)",
        "",
        "| model | concurrency | events/s (perf_analyzer) | events/s (card) | card busy | ÷ PCIe limit |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in pcie_runs:
        report.append(
            f"| {r.model} | {r.concurrency} | {common.fmt(r.events_s, 1)} | {common.fmt(r.card_events_s, 1)} | "
            f"{common.fmt(r.busy, 3)} | {common.fmt(r.events_s / pcie_limit if r.events_s else None, 4)} |"
        )
    report += ["", "perf_analyzer commands:", ""]
    report += [f"    {' '.join(str(c) for c in r.cmd)}" for r in [*runs, *pcie_runs]]
    report += [f"note: {r.model} c{r.concurrency}: {r.note}" for r in [*runs, *pcie_runs] if r.note]
    last = (
        f"bench_card: abis_exact={exact}/3 speedup={common.fmt(speedup, 2)} "
        f"busy={common.fmt(four.busy, 3) if four.busy is not None else 'n/a'} "
        f"api={pcie_info['api']} gil={gil} pcie_fraction={best_pcie / pcie_limit:.3f}"
    )
    report += ["", last]
    text = "\n".join(report)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    shutil.rmtree(workdir, ignore_errors=True)
    return 0 if exact == 3 else 1


if __name__ == "__main__":
    sys.exit(main())
