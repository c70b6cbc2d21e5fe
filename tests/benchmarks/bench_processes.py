#!/usr/bin/env python3
"""Frontend processes: fpgaserve with 1..N gRPC frontend processes vs the zero-work ceiling
(1 and N processes on one port) vs the real Triton, with the CPU each server process spends
per request. Issue 11's table, measured in one run.

    python tests/benchmarks/bench_processes.py --quick                    # ~3 min
    python tests/benchmarks/bench_processes.py --processes 2 --rounds 1 \
        --loads b1c64 b16000c4 b16000c8 b16000c4-shm b16000c8-shm --servers fpgaserve ceiling triton
    python tests/benchmarks/bench_processes.py --out report.md            # every load, 2 rounds
    python tests/benchmarks/bench_processes.py --processes 1,2,4 --fpgaserve-args "--log-verbose 0"
    python tests/benchmarks/bench_processes.py --loads b1c64 b16000c4-shm --servers fpgaserve ceiling

Servers (one at a time; each is started, measured on every load, and stopped):

* ``fpgaserve N=n`` for each n of ``--processes``: FACILE from ``bitstreams/facile`` in
  ``--fpga-mode`` (onnx: the float network, the same arithmetic as Triton's Python backend,
  default; or numpy: the bit-exact ap_fixed emulation, ~20x the CPU per row) and ``simple`` from ``tests/models`` (ONNX), plus ``--fpgaserve-args``. n > 1 adds
  ``--frontend-processes n``; while fpgaserve has no such flag (``fpgaserve --help`` is
  asked), those rows are skipped with a note. n = 1 passes ``--frontend-processes 1`` where the
  flag exists (``auto`` may mean more), and no flag before it did.
* ``ceiling N=n``: ``ceiling_server.py`` impersonating both models, answering zeros (no
  work at all), as 1 process and as n processes sharing the port with SO_REUSEPORT;
* ``Triton``: the real tritonserver 2.51 (``.tools/tritonserver``), both models in its Python
  backend (reference_triton.py), FACILE with the same weights and ``dynamic_batching {}`` as
  the bundled config, one instance each.
* ``fpgaserve-card N=n`` for each n of ``--processes``: fpgaserve over the simulated card
  (``tests/fpga_sim/serve.py``, the test-only pyxrt with the card's timing model: DMA at
  ``--pcie-gbps``, kernel calls from the project) serving FACILE in ``--fpga-mode hardware``
  from a copy of ``bitstreams/facile`` with an xclbin of ``--card-cus`` krnl_rtl compute units
  on DDR[0] (two instances each), on the FACILE loads only. The card model only keeps time
  (``FPGASERVE_SIM_DEVICE=timing``: no copies, no C-simulation), and its own CPU inside the
  server is listed as ``card (simulated)``, apart from the server's total and the projection. A section
  gives each load's events/s against the card's PCIe limit (bytes in and out per event at the
  PCIe rate).

Loads (perf_analyzer ``-i grpc`` over loopback; key in brackets, ``-shm`` = the same load
with ``--shared-memory system``): ``simple`` (``--batch1-model``) batch 1 at concurrency 1
[b1c1], 64 [b1c64] and 256 [b1c256] (``--async`` from 64 on), FACILE batch 16000 at
concurrency 1 [b16000c1], 4 [b16000c4] and 8 [b16000c8]; each over plain gRPC and system
shared memory. ``--quick``: b1c1, b1c64, b16000c4 and b16000c4-shm, shorter windows, 1 round.

CPU per request: the utime+stime (/proc/<pid>/stat, every thread) of the server process and
every descendant (Triton's Python-backend stubs, fpgaserve's frontend processes, the ceiling's
N processes) is read before and after each perf_analyzer run and divided by the requests the
server answered in between (its ModelStatistics success counts; the ceiling counts in shared
files, see ceiling_server.py ``--count-dir``). Reported per process and summed, in µs (the
simulated card's process is shown, not summed: it stands for the card).

One perf_analyzer sends its requests over one or two TCP connections, and SO_REUSEPORT hands
out connections, not requests: ``--pa-processes K`` splits each load's concurrency over K
perf_analyzer processes run together, so N frontend processes get connections to share (the
report's ``conns`` column shows how many were open). Not for the ``-shm`` loads: perf_analyzer
names its regions the same in every instance and unregisters all regions when it starts, so
those always run as one perf_analyzer.

Targets (issue 19), in their own section and on the line ``bench_processes: ...``: fpgaserve in
the default process model (``auto``'s N on this host) at batch 1 c64 against one zero-work
process, FACILE events (best of c4, c8) against Triton and against one zero-work process, and
the shared-memory FACILE loads against FACILE's backend alone in the benchmark's process (its
best ``execute`` of one event, measured at the start of the run).

Measurement as in the other benchmarks: windows of ``--window-ms`` that must agree within
25 %, else the mean of 3 windows; best round per (load, server); before each run a bounded
wait for other processes to go quiet; the CPU other processes used is reported. Benchmarks
are scripts, not tests (``bench_*.py``: pytest never collects them). Exit code 0 when every
server that could start measured every load; speed is never asserted.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_facile_vs_triton as common  # noqa: E402  (re-execs under the project venv if needed)

# isort: split
import numpy as np  # noqa: E402

from support.server_process import BUNDLED_REPO, CONFORMANCE_REPO, ServerProcess, free_port  # noqa: E402

rt = common.rt
log = common.log
TICK = os.sysconf("SC_CLK_TCK")
SERVE = common.ROOT / "tests" / "fpga_sim" / "serve.py"
CARD_LABEL = "card (simulated)"
#: the simulated card's runtime (pyxrt stand-in) inside the server process: not the server's
STAND_IN_LABEL = f"{CARD_LABEL}: its runtime's calls in the server"
#: the XRT release the simulated pyxrt presents to the card server (2.20: pyxrt.ext.bo exists)
SIM_XRT_VERSION = "2.20.197"
FACILE_IO_BYTES = (47 + 1) * 4  # one FACILE row in and its result out, float32


# ----------------------------------------------------------------------------- loads


@dataclass(frozen=True)
class Load:
    model: str
    batch: int
    concurrency: int
    shm: bool = False

    @property
    def key(self) -> str:
        return f"b{self.batch}c{self.concurrency}" + ("-shm" if self.shm else "")

    @property
    def asynchronous(self) -> bool:
        return self.batch == 1 and self.concurrency >= 64

    @property
    def label(self) -> str:
        mode = " async" if self.asynchronous else ""
        return f"{self.model} b{self.batch} c{self.concurrency}{mode} {'shm' if self.shm else 'gRPC'}"

    def flags(self) -> list[str]:
        return (["--async"] if self.asynchronous else []) + (["--shared-memory", "system"] if self.shm else [])


def all_loads(batch1_model: str) -> list[Load]:
    base = [Load(batch1_model, 1, c) for c in (1, 64, 256)] + [Load("facile", 16000, c) for c in (1, 4, 8)]
    return base + [Load(ld.model, ld.batch, ld.concurrency, True) for ld in base]


QUICK_KEYS = ("b1c1", "b1c64", "b16000c4", "b16000c4-shm")


@dataclass
class Settings:
    window_ms: int
    max_trials: int
    rounds: int
    quiet_wait_s: float


FULL = Settings(window_ms=3000, max_trials=10, rounds=2, quiet_wait_s=10)
QUICK = Settings(window_ms=1500, max_trials=5, rounds=1, quiet_wait_s=3)
STABILITY = 25
FALLBACK_WINDOWS = 3


# ----------------------------------------------------------------------------- processes and CPU


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def _label(pid: int) -> str:
    """A process's name: a Python program's module or script (fpgaserve, ceiling_server), else comm."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return "?"
    if argv and Path(argv[0]).name.startswith("python"):
        if "-m" in argv[:-1]:
            parts = argv[argv.index("-m") + 1].split(".")
            # fpgaserve.server.cli -> fpgaserve; fpgaserve.server.<...>.frontend_process -> frontend_process
            return parts[0] if parts[-1] in ("cli", "__main__") else parts[-1]
        scripts = [a for a in argv[1:] if a.endswith(".py")]
        if scripts:
            return Path(scripts[0]).stem
    return _comm(pid)


def tree_sample(root: int) -> dict[int, tuple[str, float]]:
    """pid -> (name, utime+stime seconds) for ``root`` and every live descendant."""
    out = {}
    for pid in common._descendants(root):
        f = common._stat_fields(pid)
        if f:
            out[pid] = (_label(pid), (int(f[11]) + int(f[12])) / TICK)
    return out


def established_connections(port: int) -> int:
    """TCP connections in ESTABLISHED state whose local port is ``port`` (the server's side)."""
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) > 3 and parts[3] == "01" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                n += 1
    return n


def cpu_delta(before: dict, after: dict) -> dict[int, tuple[str, float]]:
    """CPU seconds each process spent between the samples (a process born in between: all of it)."""
    return {pid: (name, cpu - before.get(pid, (name, 0.0))[1]) for pid, (name, cpu) in after.items()}


# ----------------------------------------------------------------------------- servers


@dataclass
class Server:
    name: str  # "fpgaserve N=2", "ceiling N=1", "Triton", "fpgaserve-card N=2"
    kind: str  # fpgaserve | ceiling | triton | card
    processes: int
    url: str
    root_pid: int
    stop: object  # callable: stop the server
    count: object  # callable: requests answered so far (all models)
    alive: object  # callable: True while the server runs
    notes: list[str] = field(default_factory=list)
    # callable: (pid, CPU seconds) the simulated card's runtime spent in the server so far
    stand_in: object = None

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])


def _stats_count(url: str, models: list[str]) -> int:
    import tritonclient.grpc as grpcclient

    total = 0
    with grpcclient.InferenceServerClient(url) as c:
        for m in models:
            stats = c.get_inference_statistics(m, as_json=True)
            for s in stats.get("model_stats", []):
                total += int(s.get("inference_stats", {}).get("success", {}).get("count", 0))
    return total


def write_fpgaserve_repo(workdir: Path, batch1_model: str) -> Path:
    repo = workdir / "fpgaserve-repo"
    if repo.exists():
        shutil.rmtree(repo)
    repo.mkdir(parents=True)
    shutil.copytree(BUNDLED_REPO / "facile", repo / "facile")
    if batch1_model != "facile":
        shutil.copytree(CONFORMANCE_REPO / batch1_model, repo / batch1_model)
    return repo


def backend_in_process(repo: Path, fpga_mode: str, rounds: int = 20) -> float:
    """FACILE's backend alone, in this process: rows/s of its best ``execute`` of one
    16,000-row event (the served model's config and ``--fpga-mode``; the input is what
    perf_analyzer sends, random floats). The reference for the shared-memory loads: a server
    that adds nothing per request reaches it."""
    import asyncio

    from fpgaserve.server.engine.repository import ModelRepository

    async def measure() -> float:
        only = repo.parent / "in-process-repo"
        shutil.rmtree(only, ignore_errors=True)
        only.mkdir()
        shutil.copytree(repo / "facile", only / "facile")
        repository = ModelRepository([str(only)], backend_config={"hls4ml": {"fpga-mode": fpga_mode}})
        await repository.start()
        try:
            mv = repository.get("facile")
            backend = mv.scheduler.instances[0].backend
            ((name, spec),) = mv.inputs.items()
            x = np.random.default_rng(0).random((16000, *spec.dims)).astype(spec.datatype.dtype)
            best = float("inf")
            for _ in range(rounds):
                t = time.perf_counter()
                backend.execute({name: x})
                best = min(best, time.perf_counter() - t)
            return 16000 / best
        finally:
            await repository.stop()

    return asyncio.run(measure())


def fpgaserve_has_flag(flag: str) -> bool:
    p = subprocess.run(
        [sys.executable, "-m", "fpgaserve.server.cli", "--help"], capture_output=True, text=True, timeout=120
    )
    return flag in p.stdout


def start_fpgaserve(workdir: Path, repo: Path, n: int, args, models: list[str]) -> Server:
    extra = ["--fpga-mode", args.fpga_mode, "--allow-client-shm=true"]  # the -shm loads
    if n > 1 or args.has_frontend_flag:  # N=1 explicitly: auto may mean more
        extra += ["--frontend-processes", str(n)]
    extra += shlex.split(args.fpgaserve_args or "")
    sp = ServerProcess([repo], *extra, log_path=workdir / f"fpgaserve-n{n}.log")
    sp.start(timeout=180)
    url = f"127.0.0.1:{sp.grpc_port}"
    return Server(
        f"fpgaserve N={n}",
        "fpgaserve",
        n,
        url,
        sp.proc.pid,
        sp.stop,
        lambda: _stats_count(url, models),
        lambda: sp.proc.poll() is None,
        notes=[f"command: {shlex.join(sp.args)}"],
    )


def write_card_repo(workdir: Path, cus: int) -> Path:
    """FACILE with an xclbin of ``cus`` kernel_wrapper compute units on DDR[0] (the simulator's
    writer, as bench_engine.py uses it): the project as hls4ml's VitisAccelerator writes it with
    ``HW_Quant``, so on XRT 2.20's binding the card reads a request's float32 rows where the
    frontend put them; card.json as `fpgaserve pack --xclbin` writes it, and two instances per
    compute unit."""
    sys.path.insert(0, str(common.ROOT / "tests"))
    from fpga_sim.projects import kernel_wrapper_project
    from fpga_sim.xclbin import write_xclbin
    from fpgaserve.backends.hls4ml.card.axlf import read_xclbin
    from fpgaserve.backends.hls4ml.card.manifest import CardManifest
    from fpgaserve.backends.hls4ml.project import Hls4mlProject

    repo = workdir / "card-repo"
    if repo.exists():
        shutil.rmtree(repo)
    version = repo / "facile" / "1"
    kernel_wrapper_project(BUNDLED_REPO / "facile" / "1", version, num_kernel=cus, batchsize=16000, hw_quant=True)
    abi = "kernel_wrapper"
    write_xclbin(version / "model.xclbin", kernel_abi=abi, cus=cus, cu_banks=["DDR[0]"] * cus, project=version)
    xclbin = read_xclbin(version / "model.xclbin")
    CardManifest.for_project(Hls4mlProject.load(version), abi, xclbin).write(version)
    config = (BUNDLED_REPO / "facile" / "config.pbtxt").read_text().replace("count: 1\n", f"count: {2 * cus}\n", 1)
    (repo / "facile" / "config.pbtxt").write_text(config)
    return repo


def start_card_server(workdir: Path, repo: Path, n: int, args) -> Server:
    """fpgaserve over the simulated card (tests/fpga_sim/serve.py), a card model that keeps time."""
    control = workdir / f"card-n{n}-control"
    shutil.rmtree(control, ignore_errors=True)
    control.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("FPGASERVE_SIM_")},
        "FPGASERVE_SIM_CARDS": "1",
        "FPGASERVE_SIM_CONTROL_DIR": str(control),
        "FPGASERVE_SIM_DEVICE": "timing",
        "FPGASERVE_SIM_PCIE_GBPS": str(args.pcie_gbps),
        "FPGASERVE_SIM_XRT_VERSION": SIM_XRT_VERSION,
    }
    extra = ["--fpga-mode", "hardware", "--allow-client-shm=true"]
    if n > 1 or args.has_frontend_flag:
        extra += ["--frontend-processes", str(n)]
    extra += shlex.split(args.fpgaserve_args or "")
    sp = ServerProcess([repo], *extra, log_path=workdir / f"card-n{n}.log", env=env, entry=[SERVE])
    sp.start(timeout=300)
    url = f"127.0.0.1:{sp.grpc_port}"
    return Server(
        f"fpgaserve-card N={n}",
        "card",
        n,
        url,
        sp.proc.pid,
        sp.stop,
        lambda: _stats_count(url, ["facile"]),
        lambda: sp.proc.poll() is None,
        notes=[
            f"command: FPGASERVE_SIM_DEVICE=timing FPGASERVE_SIM_PCIE_GBPS={args.pcie_gbps:g} "
            f"FPGASERVE_SIM_XRT_VERSION={SIM_XRT_VERSION} {shlex.join(sp.args)}"
        ],
        stand_in=lambda: _stand_in(control),
    )


def _stand_in(control: Path) -> tuple[int, float] | None:
    """(pid, CPU s) of the simulated runtime in the server, from the card's stats file (written
    within a second of a change)."""
    try:
        st = json.loads((control / "stats-card0.json").read_text()).get("stand_in") or {}
        return int(st["pid"]), float(st["cpu_s"])
    except (OSError, ValueError, KeyError):
        return None


def start_ceiling(workdir: Path, repo: Path, n: int, models: list[str]) -> Server:
    port = free_port()
    count_dir = workdir / f"ceiling-n{n}-counts"
    shutil.rmtree(count_dir, ignore_errors=True)
    cmd = [
        sys.executable,
        str(HERE / "ceiling_server.py"),
        "--port",
        str(port),
        "--processes",
        str(n),
        "--count-dir",
        str(count_dir),
    ]
    for m in models:
        cmd += ["--config", str(repo / m / "config.pbtxt")]
    logf = open(workdir / f"ceiling-n{n}.log", "wb")  # noqa: SIM115  (closed in stop())
    proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while len(list(count_dir.glob("*.count"))) < n or not _live(f"127.0.0.1:{port}"):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"ceiling N={n} did not start: {(workdir / f'ceiling-n{n}.log').read_text()[-2000:]}")
        time.sleep(0.2)
    time.sleep(0.5)  # the last process to create its counter binds right after

    def stop() -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                for pid in common._descendants(proc.pid)[::-1]:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                proc.wait()
        logf.close()

    def count() -> int:
        return sum(int.from_bytes(f.read_bytes()[:8], "little", signed=True) for f in count_dir.glob("*.count"))

    return Server(
        f"ceiling N={n}",
        "ceiling",
        n,
        f"127.0.0.1:{port}",
        proc.pid,
        stop,
        count,
        lambda: proc.poll() is None,
        notes=[f"command: {shlex.join(cmd)}"],
    )


def _live(url: str) -> bool:
    import tritonclient.grpc as grpcclient

    try:
        with grpcclient.InferenceServerClient(url) as c:
            return bool(c.is_server_live(client_timeout=2))
    except Exception:
        return False


def start_triton(workdir: Path, models: list[str]) -> Server:
    weights = workdir / "triton_facile_weights.npz"
    common.convert_weights(common.FACILE_DIR / "1" / "weights.npz", weights)
    repo = rt.write_python_backend_repository(
        workdir / "triton-repo", models, facile_weights=weights, facile_dynamic_batching=True
    )
    for m in models:
        cfg = repo / m / "config.pbtxt"
        if "instance_group" not in cfg.read_text():
            cfg.write_text(cfg.read_text() + "instance_group [ { count: 1 kind: KIND_CPU } ]\n")
    ports = [free_port() for _ in range(3)]
    proc = rt.start_tritonserver(repo, *ports, log_path=workdir / "triton.log", executable=common.TS_EXE, timeout=180)
    url = f"127.0.0.1:{ports[0]}"
    return Server(
        "Triton",
        "triton",
        1,
        url,
        proc.pid,
        lambda: rt.stop_tritonserver(proc),
        lambda: _stats_count(url, models),
        lambda: proc.poll() is None,
    )


def check_answers(server: Server, batch1_model: str, card_repo: Path | None = None) -> str:
    """One request per model; '' when the answers have the right shape (and values, for simple;
    on the simulated card, FACILE bit for bit against the numpy ap_fixed emulation)."""
    import tritonclient.grpc as grpcclient

    with grpcclient.InferenceServerClient(server.url) as c:
        x = np.random.default_rng(0).standard_normal((4, 47)).astype(np.float32)
        inp = grpcclient.InferInput("input", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        out = c.infer("facile", [inp], client_timeout=120).as_numpy("output/BiasAdd")
        if out is None or out.shape != (4, 1) or not np.all(np.isfinite(out)):
            return f"facile answered {None if out is None else out.shape}"
        if server.kind == "card" and card_repo is not None:
            from fpgaserve.backends.hls4ml.emulator import FixedPointModel
            from fpgaserve.backends.hls4ml.project import Hls4mlProject

            want = FixedPointModel(Hls4mlProject.load(card_repo / "facile" / "1")).predict(x).astype(np.float32)
            if want.tobytes() != out.tobytes():
                return "facile on the simulated card differs from the numpy emulation"
            return ""
        if batch1_model == "simple" and server.kind != "ceiling":
            a = np.arange(16, dtype=np.int32)[None, :]
            ins = [grpcclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
            ins[0].set_data_from_numpy(a)
            ins[1].set_data_from_numpy(a * 2)
            r = c.infer("simple", ins, client_timeout=60)
            if not (np.array_equal(r.as_numpy("OUTPUT0"), a * 3) and np.array_equal(r.as_numpy("OUTPUT1"), -a)):
                return "simple answered wrong values"
    return ""


# ----------------------------------------------------------------------------- measurement


@dataclass
class Run:
    server: str
    kind: str
    processes: int
    load: Load
    round: int
    root_pid: int = 0
    connections: int = 0  # most client connections seen open at once during the run
    row: dict | None = None
    method: str = ""
    requests: int = 0
    cpu: dict = field(default_factory=dict)  # pid -> (name, seconds)
    wall_s: float = 0.0
    pa_cpu_s: float = 0.0
    other_cpu_s: float = 0.0
    cmds: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def col(self, name: str) -> float | None:
        try:
            return float(self.row[name]) if self.row and self.row.get(name) not in (None, "") else None
        except ValueError:
            return None

    @property
    def infer_s(self) -> float | None:
        return self.col("Inferences/Second")

    def cpu_us_per_request(self, card: bool = True) -> list[tuple[str, float]]:
        """(process label, µs per request), the root first, then the others by CPU (``card``:
        with the simulated card's process, which is not the server's)."""
        if not self.requests:
            return []
        items = sorted(self.cpu.items(), key=lambda kv: (kv[0] != self.root_pid, -kv[1][1]))
        names: dict[str, int] = {}
        out = []
        for pid, (name, secs) in items:
            if name.startswith(CARD_LABEL) and not card:
                continue
            if pid == self.root_pid:
                label = f"{name} (main)"
            else:
                names[name] = names.get(name, 0) + 1
                label = f"{name} #{names[name]}"
            out.append((label, secs / self.requests * 1e6))
        return out


def _split(concurrency: int, clients: int) -> list[int]:
    """Concurrency per perf_analyzer instance: ``clients`` shares (fewer when concurrency is lower)."""
    k = max(1, min(clients, concurrency))
    return [concurrency // k + (1 if i < concurrency % k else 0) for i in range(k)]


def _combine(rows: list[dict]) -> dict:
    """K perf_analyzer CSV rows -> one: throughputs add up, p50 is their mean, p99 their max."""
    if len(rows) == 1:
        return rows[0]

    def vals(key: str) -> list[float]:
        return [float(r[key]) for r in rows if r.get(key) not in (None, "")]

    return {
        "Inferences/Second": str(sum(vals("Inferences/Second"))),
        "p50 latency": str(sum(vals("p50 latency")) / max(len(vals("p50 latency")), 1)),
        "p99 latency": str(max(vals("p99 latency"), default=0)),
    }


def run_pa(server: Server, load: Load, s: Settings, workdir: Path, round_: int, clients: int = 1) -> Run:
    """perf_analyzer on ``load`` against ``server``; ``clients`` > 1 splits the concurrency over that
    many perf_analyzer processes started together (each opens its own connections)."""
    run = Run(server.name, server.kind, server.processes, load, round_, server.root_pid)
    stem = f"pa-{server.name.replace(' ', '').replace('=', '')}-{load.key}-r{round_}"
    # shared memory: one perf_analyzer only. Its region names are fixed ('input_0_0',
    # 'outputBiasAdd', ...) and it unregisters every region at start, so several against one
    # server undo each other ("shared memory region ... already in manager", "Unable to find ...")
    shares = _split(load.concurrency, 1 if load.shm else clients)
    base = [str(common.PA_EXE), "-m", load.model, "-u", server.url, "-i", "grpc", "-b", str(load.batch)]
    tries = (
        (["-p", str(s.window_ms), "-s", str(STABILITY), "-r", str(s.max_trials)], f"stable within {STABILITY} %"),
        (["-p", str(s.window_ms), "-s", "1000", "-r", str(FALLBACK_WINDOWS)], f"unstable: mean of {FALLBACK_WINDOWS}"),
    )
    for i, (extra, method) in enumerate(tries):
        csvs = [workdir / f"{stem}-pa{k}.csv" for k in range(len(shares))]
        cmds = []
        for c, csv_path in zip(shares, csvs):
            csv_path.unlink(missing_ok=True)
            cmds.append([*base, "--concurrency-range", str(c), *load.flags(), *extra, "-f", str(csv_path)])
        run.cmds += [shlex.join(cmd) for cmd in cmds]
        how = f" ({len(shares)} perf_analyzer processes)" if len(shares) > 1 else ""
        log(f"{server.name} {load.label}{how}{' (fallback)' if i else ''}")
        cpu0, n0 = tree_sample(server.root_pid), server.count()
        stand_in0 = server.stand_in() if server.stand_in else None
        busy0, ru0, t0 = common.system_busy_seconds(), resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
        procs = [
            subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
            for cmd in cmds
        ]
        done = threading.Event()
        peak = [0]

        def watch(done=done, peak=peak) -> None:
            while not done.wait(0.5):
                peak[0] = max(peak[0], established_connections(server.port))

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        outs = []
        deadline = time.monotonic() + (s.max_trials if i == 0 else FALLBACK_WINDOWS) * s.window_ms / 500 + 120
        for p in procs:
            try:
                out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)  # our own perf_analyzer only
                out, _ = p.communicate()
                out += "\n[benchmark] perf_analyzer killed after its timeout\n"
            outs.append(out)
        wall = time.monotonic() - t0
        done.set()
        watcher.join()
        run.connections = peak[0]
        cpu1, n1 = tree_sample(server.root_pid), server.count()
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        for k, out in enumerate(outs):
            (workdir / f"{stem}-{i + 1}-pa{k}.txt").write_text(out)
        run.wall_s, run.requests, run.cpu = wall, n1 - n0, cpu_delta(cpu0, cpu1)
        stand_in1 = server.stand_in() if server.stand_in else None
        if stand_in0 and stand_in1 and stand_in0[0] == stand_in1[0] and stand_in1[0] in run.cpu:
            # the simulated runtime's calls in the server: the simulator's CPU, shown apart
            pid, spent = stand_in1[0], stand_in1[1] - stand_in0[1]
            name, secs = run.cpu[pid]
            run.cpu[pid] = (name, max(0.0, secs - spent))
            run.cpu[-pid] = (STAND_IN_LABEL, spent)
        run.pa_cpu_s = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
        srv = sum(v for _, v in run.cpu.values())
        run.other_cpu_s = max(0.0, common.system_busy_seconds() - busy0 - srv - run.pa_cpu_s)
        rows = [common._read_csv(c) if p.returncode == 0 else None for p, c in zip(procs, csvs)]
        if all(r is not None for r in rows):
            run.row = _combine(rows)
            run.method = method + (f", {len(shares)} perf_analyzers" if len(shares) > 1 else "")
            break
        for p, out in zip(procs, outs):
            if p.returncode != 0:
                tail = " | ".join(out.strip().splitlines()[-2:])
                run.notes.append(f"perf_analyzer rc {p.returncode} ({method}): {tail[:300]}")
    else:
        run.method = "FAILED"
    if run.other_cpu_s / max(run.wall_s, 1e-9) > common.BUSY_THRESHOLD:
        run.notes.append(f"other processes used {run.other_cpu_s / run.wall_s:.2f} cores (machine not idle)")
    return run


# ----------------------------------------------------------------------------- report


def _ratio(a: float | None, b: float | None) -> str:
    return "n/a" if not a or not b else f"{a / b:.2f}x"


def best_runs(runs: list[Run]) -> dict[tuple[str, str], Run]:
    best: dict[tuple[str, str], Run] = {}
    for r in runs:
        k = (r.load.key, r.server)
        if k not in best or (r.infer_s or -1) > (best[k].infer_s or -1):
            best[k] = r
    return best


def report(ctx: dict, runs: list[Run]) -> str:
    best = best_runs(runs)
    servers = ctx["server_order"]
    L = ["# Frontend processes: fpgaserve vs the zero-work ceiling vs Triton", ""]
    L += [
        f"- date: {ctx['date']}; {'--quick' if ctx['quick'] else 'full'} run, {ctx['rounds']} round(s), "
        f"windows of {ctx['settings'].window_ms} ms; benchmark wall time {ctx['wall']:.0f} s",
        f"- fpgaserve: `--fpga-mode {ctx['fpga_mode']}`"
        + (f", extra args `{ctx['fpgaserve_args']}`" if ctx["fpgaserve_args"] else "")
        + f"; batch-1 model `{ctx['batch1_model']}`, batch-16000 model `facile`",
        f"- load generator: perf_analyzer -i grpc over loopback, each load's concurrency split over "
        f"{ctx['pa_processes']} perf_analyzer process(es) run together (throughputs added, p50 averaged, p99 the max)",
    ]
    L += [f"- {k}: {v}" for k, v in ctx["machine"]]
    L += [
        "",
        "## Throughput and CPU per request",
        "",
        "| load | server | infer/s | p50 µs | p99 µs | conns | CPU µs/request, all processes | "
        "per process (µs/request) | vs ceiling | vs Triton | note |",
        "|---|---|---:|---:|---:|---:|---:|---|---:|---:|---|",
    ]
    for load in ctx["loads"]:
        triton = best.get((load.key, "Triton"))
        for name in servers:
            r = best.get((load.key, name))
            if r is None:
                continue
            ceil = best.get((load.key, "ceiling N=1"))
            if r.kind != "ceiling":
                ceil = best.get((load.key, f"ceiling N={r.processes}")) or ceil
            per = r.cpu_us_per_request()
            shown = [
                f"{lbl} {us:,.0f}" + (" (not summed)" if lbl.startswith(CARD_LABEL) else "")
                for lbl, us in per
                if us >= 0.5
            ]
            hidden = len(per) - len(shown)
            per_s = ", ".join(shown) + (f" (+{hidden} idle)" if hidden else "")
            total = sum(us for lbl, us in per if not lbl.startswith(CARD_LABEL)) if per else None
            vs_ceiling = (
                "" if r.kind == "ceiling" and r.processes == 1 else _ratio(r.infer_s, ceil.infer_s if ceil else None)
            )
            if r.kind == "ceiling" and r.processes > 1:
                vs_ceiling += " (vs N=1)"
            note = [r.method] if r.method and not r.method.startswith("stable") else []
            if r.other_cpu_s / max(r.wall_s, 1e-9) > common.BUSY_THRESHOLD:
                note.append(f"other processes: {r.other_cpu_s / r.wall_s:.2f} cores")
            L.append(
                f"| {load.label} | {name} | {common.fmt(r.infer_s)} | {common.fmt(r.col('p50 latency'))} | "
                f"{common.fmt(r.col('p99 latency'))} | {r.connections} | {common.fmt(total)} | {per_s or 'n/a'} | {vs_ceiling} | "
                f"{'' if r.kind == 'triton' else _ratio(r.infer_s, triton.infer_s if triton else None)} | "
                f"{'; '.join(note)} |"
            )
    L += [
        "",
        "infer/s counts rows (batch 16000: rows/s). CPU µs/request: utime+stime of each server process "
        "(all its threads) over one perf_analyzer run, divided by the requests the server answered in that "
        "run (warm-up included on both sides). vs ceiling: throughput / the ceiling with the same number of "
        "processes (N=1 when there is none); the ceiling's own N>1 rows compare with its N=1. vs Triton: "
        "throughput / Triton's. conns: the most client TCP connections open to the server port during the run "
        "(/proc/net/tcp): SO_REUSEPORT spreads connections, not requests, over processes. `(main)`: the process "
        "started; `#k`: its descendants (Triton's Python-backend stubs are `triton_python_b`). With "
        "`--shared-memory system` the ceiling neither reads the input regions nor writes the output ones: its "
        "shm rows are the protocol's cost alone, not a bound for a server that computes.",
        "",
    ]
    L += _targets(ctx, best, servers)
    L += _projection(ctx, best, servers)
    L += _card_limits(ctx, best, servers)
    L += [
        "## Every run",
        "",
        "| load | server | round | method | infer/s | requests | connections | wall s | server cores | "
        "perf_analyzer cores | other cores |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        w = max(r.wall_s, 1e-9)
        srv = sum(v for _, v in r.cpu.values())
        L.append(
            f"| {r.load.label} | {r.server} | {r.round} | {r.method} | {common.fmt(r.infer_s)} | {r.requests:,} | "
            f"{r.connections} | "
            f"{r.wall_s:.1f} | {srv / w:.2f} | {r.pa_cpu_s / w:.2f} | {r.other_cpu_s / w:.2f} |"
        )
    L += ["", "## Notes", ""]
    notes = list(ctx["notes"]) + [f"{r.load.label} {r.server} round {r.round}: {n}" for r in runs for n in r.notes]
    L += [f"- {n}" for n in notes] or ["- none"]
    L += ["", "## perf_analyzer commands (first round)", "", "```"]
    L += [c for r in runs if r.round == 1 for c in r.cmds]
    L += ["```", ""]
    return "\n".join(L)


PROJECTED_CORES = (8, 16, 64)


def _default_processes() -> int:
    """What ``--frontend-processes auto`` means on this host (server/cli.py)."""
    cores = os.cpu_count() or 1
    return 2 if cores <= 2 else min(cores - 1, 16)


def _targets(ctx: dict, best: dict, servers: list[str]) -> list[str]:
    """Issue 19's perf_analyzer targets, as ratios of this run's own figures: fpgaserve in the
    default process model (``auto``'s N here, else the largest N measured) against one
    zero-work process, the real Triton, and FACILE's backend in this process."""
    auto = _default_processes()
    ours = [n for n in servers if n.startswith("fpgaserve N=")]
    if not ours:
        return []
    name = f"fpgaserve N={auto}" if f"fpgaserve N={auto}" in ours else max(ours, key=lambda n: int(n.split("=")[1]))

    def rate(server: str, *keys: str) -> float | None:
        found = [best[(k, server)].infer_s for k in keys if (k, server) in best and best[(k, server)].infer_s]
        return max(found) if found else None

    events, shm = ("b16000c4", "b16000c8"), ("b16000c4-shm", "b16000c8-shm")
    rows = [
        ("batch 1, c64: fpgaserve / one zero-work process", rate(name, "b1c64"), rate("ceiling N=1", "b1c64"), 0.85),
        ("FACILE events (best of c4, c8): fpgaserve / Triton", rate(name, *events), rate("Triton", *events), 2.0),
        (
            "FACILE events (best of c4, c8): fpgaserve / one zero-work process",
            rate(name, *events),
            rate("ceiling N=1", *events),
            0.85,
        ),
        (
            "FACILE events, system shm (best of c4, c8): fpgaserve / the backend in-process",
            rate(name, *shm),
            ctx.get("in_process_rows_s"),
            0.85,
        ),
    ]
    L = [
        "## Targets (issue 19)",
        "",
        f"`{name}` is the default process model here (`--frontend-processes auto` = {auto} on "
        f"{os.cpu_count()} cores). The backend in-process: FACILE's backend's best `execute` of one "
        f"16,000-row event in the benchmark's own process ({common.fmt(ctx.get('in_process_rows_s'))} rows/s).",
        "",
        "| target | fpgaserve | reference | ratio | wanted | holds |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for label, a, b, want in rows:
        ratio = a / b if a and b else None
        holds = "n/a" if ratio is None else ("yes" if ratio >= want else "no")
        L.append(
            f"| {label} | {common.fmt(a)} | {common.fmt(b)} | {'n/a' if ratio is None else f'{ratio:.2f}x'} | "
            f">= {want:.2f}x | {holds} |"
        )
    summary = " ".join(
        f"{key}={(a / b):.2f}" if a and b else f"{key}=n/a"
        for key, (_, a, b, _w) in zip(
            ("b1c64_vs_ceiling", "events_vs_triton", "events_vs_ceiling", "shm_vs_backend"), rows
        )
    )
    return [*L, "", f"bench_processes: {summary}", ""]


def _projection(ctx: dict, best: dict, servers: list[str]) -> list[str]:
    """What the measured per-request CPU means on a bigger host: the engine is one process
    (one core at most), the frontends share the other cores, the clients run elsewhere.
    requests/s <= min(1e6 / engine µs, (cores - 1) x 1e6 / frontend µs). A projection from
    costs measured here, not a measurement: cache, memory bandwidth and the card's own rate
    are not in it."""
    L = [
        "## Projection to bigger hosts (from the CPU per request above)",
        "",
        "Engine on one core, N = cores - 1 frontends, clients elsewhere: requests/s = min(1e6 / engine µs, "
        "(cores - 1) x 1e6 / frontend µs); rows/s = requests/s x batch. The bound that binds is named.",
        "",
        "| load | from | engine µs/req | frontend µs/req | " + " | ".join(f"{c} cores" for c in PROJECTED_CORES) + " |",
        "|---|---|---:|---:|" + "---:|" * len(PROJECTED_CORES),
    ]
    rows = 0
    for load in ctx["loads"]:
        for name in servers:
            r = best.get((load.key, name))
            if r is None or r.kind not in ("fpgaserve", "card") or r.processes < 2 or not r.requests:
                continue
            per = r.cpu_us_per_request(card=False)
            engine = per[0][1] if per else 0.0
            frontends = sum(us for _, us in per[1:])
            if engine <= 0 or frontends <= 0:
                continue
            cells = []
            for cores in PROJECTED_CORES:
                by_engine, by_frontends = 1e6 / engine, (cores - 1) * 1e6 / frontends
                rate = min(by_engine, by_frontends) * load.batch
                unit = "rows/s" if load.batch > 1 else "req/s"
                cells.append(f"{common.fmt(rate)} {unit} ({'engine' if by_engine <= by_frontends else 'frontends'})")
            L.append(f"| {load.label} | {name} | {engine:,.0f} | {frontends:,.0f} | " + " | ".join(cells) + " |")
            rows += 1
    if not rows:
        L.append("| (no fpgaserve run with N > 1) | | | |" + " |" * len(PROJECTED_CORES))
    return [*L, ""]


def _card_limits(ctx: dict, best: dict, servers: list[str]) -> list[str]:
    """Events/s on the simulated card against what its PCIe link can carry: the reference for
    "the server must not be the bottleneck" (issue 19)."""
    gbps = ctx.get("pcie_gbps")
    L = []
    for load in ctx["loads"]:
        for name in servers:
            r = best.get((load.key, name))
            if r is None or r.kind != "card" or not r.infer_s:
                continue
            limit = gbps * 1e9 / (load.batch * FACILE_IO_BYTES)
            events = r.infer_s / load.batch
            per = r.cpu_us_per_request()
            card = [us for lbl, us in per if lbl.startswith(CARD_LABEL) and not lbl.startswith(STAND_IN_LABEL)]
            stand_in = [us for lbl, us in per if lbl.startswith(STAND_IN_LABEL)]
            server = sum(us for _, us in r.cpu_us_per_request(card=False))
            engine = per[0][1] if per else 0.0
            # one engine is one process on one core: the cards it can keep at PCIe rate
            feeds = (1e6 / engine) / limit if engine > 0 else None
            L.append(
                f"| {load.label} | {name} | {events:,.1f} | {limit:,.0f} | {events / limit:.3f} | {server:,.0f} | "
                f"{common.fmt(stand_in[0] if stand_in else None)} | {common.fmt(card[0] if card else None)} | "
                f"{common.fmt(engine)} | {common.fmt(feeds, 2)} |"
            )
    if not L:
        return []
    head = [
        "## The simulated card: events/s against its PCIe limit",
        "",
        f"PCIe limit = {gbps:g} GB/s / (rows x {FACILE_IO_BYTES} bytes in and out per row), the most events/s the "
        "card's link carries; ratio = measured / limit. The card's own CPU (its process: DMA copies and the "
        "kernel's C-simulation) is what a real card does in hardware. Cards one engine feeds = (1e6 / engine µs "
        "per event) / PCIe limit: the engine is one process, so a host with more cards than that needs more "
        "engine processes (FaaST's U250 host has 4).",
        "",
        "| load | server | events/s | PCIe limit events/s | ratio | server CPU µs/event | its runtime's calls µs/event "
        "(simulator, not counted) | card process µs/event | engine µs/event | cards one engine feeds at PCIe rate |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    return [*head, *L, ""]


# ----------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help=f"loads {', '.join(QUICK_KEYS)}; 1.5 s windows, 1 round")
    ap.add_argument(
        "--processes",
        default="1,2",
        help="comma-separated N: fpgaserve --frontend-processes N and the ceiling as N processes "
        "(default 1,2; N=1 passes no flag)",
    )
    ap.add_argument("--fpgaserve-args", default="", help="extra fpgaserve arguments, one shell-quoted string")
    ap.add_argument(
        "--fpga-mode",
        choices=("onnx", "numpy"),
        default="onnx",
        help="how fpgaserve runs FACILE: onnx (the float network, as Triton's Python backend computes it; "
        "default) or numpy (the bit-exact ap_fixed emulation, ~20x more CPU per row)",
    )
    ap.add_argument("--batch1-model", choices=("simple", "facile"), default="simple", help="model of the batch-1 loads")
    ap.add_argument("--loads", nargs="*", help="load keys, e.g. b1c64 b16000c4-shm (default: all, or --quick's)")
    ap.add_argument(
        "--servers",
        nargs="*",
        choices=("fpgaserve", "ceiling", "triton", "card"),
        default=["fpgaserve", "ceiling", "triton", "card"],
        help="card: fpgaserve over the simulated card (FACILE loads only)",
    )
    ap.add_argument("--card-cus", type=int, default=4, help="krnl_rtl compute units of the simulated card (default 4)")
    ap.add_argument("--pcie-gbps", type=float, default=12.0, help="the simulated card's PCIe rate, GB/s (default 12)")
    ap.add_argument("--rounds", type=int, help="rounds (default 2, --quick 1); the tables show the best per load")
    ap.add_argument("--window-ms", type=int, help="perf_analyzer window (default 3000, --quick 1500)")
    ap.add_argument(
        "--pa-processes",
        type=int,
        default=1,
        help="split each load's concurrency over this many perf_analyzer processes run together (default 1). "
        "One perf_analyzer sends everything over 1-2 TCP connections, and SO_REUSEPORT spreads connections, not "
        "requests: N frontend processes can only share a load that arrives over several connections",
    )
    ap.add_argument("--out", type=Path, help="also write the markdown report here")
    ap.add_argument("--workdir", type=Path, help="keep repositories, logs and perf_analyzer output here")
    args = ap.parse_args(argv)

    t_start = time.monotonic()
    s = QUICK if args.quick else FULL
    s = Settings(args.window_ms or s.window_ms, s.max_trials, args.rounds or s.rounds, s.quiet_wait_s)
    loads = all_loads(args.batch1_model)
    keys = args.loads or (QUICK_KEYS if args.quick else None)
    if keys:
        unknown = set(keys) - {ld.key for ld in loads}
        if unknown:
            ap.error(f"unknown load(s) {sorted(unknown)}; choose from {[ld.key for ld in loads]}")
        loads = [ld for ld in loads if ld.key in keys]
    ns = sorted({int(x) for x in args.processes.split(",") if x.strip()})
    models = sorted({ld.model for ld in loads} | {"facile"})
    ctx: dict = {
        "quick": args.quick,
        "rounds": s.rounds,
        "settings": s,
        "loads": loads,
        "notes": [],
        "fpga_mode": args.fpga_mode,
        "fpgaserve_args": args.fpgaserve_args,
        "batch1_model": args.batch1_model,
        "pa_processes": args.pa_processes,
        "pcie_gbps": args.pcie_gbps,
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
    }
    ctx["notes"] += common.install_tools()
    ctx["machine"] = common.machine_info()
    workdir = (args.workdir or Path(tempfile.mkdtemp(prefix="bench-processes-"))).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    repo = write_fpgaserve_repo(workdir, args.batch1_model)
    if "fpgaserve" in args.servers and any(ld.shm and ld.model == "facile" for ld in loads):
        log("measuring FACILE's backend in-process (the shared-memory loads' reference)")
        ctx["in_process_rows_s"] = backend_in_process(repo, args.fpga_mode)

    plan: list[tuple[str, int]] = []
    args.has_frontend_flag = False
    if "fpgaserve" in args.servers or "card" in args.servers:
        args.has_frontend_flag = fpgaserve_has_flag("--frontend-processes")
    if "fpgaserve" in args.servers:
        has_flag = args.has_frontend_flag
        for n in ns:
            if n > 1 and not has_flag:
                ctx["notes"].append(f"fpgaserve N={n} skipped: `fpgaserve --help` has no --frontend-processes yet")
                continue
            plan.append(("fpgaserve", n))
    if "ceiling" in args.servers:
        plan += [("ceiling", n) for n in sorted(set(ns) | {1})]
    if "triton" in args.servers:
        plan.append(("triton", 1))
    card_repo = None
    if "card" in args.servers:
        if not any(ld.model == "facile" for ld in loads):
            ctx["notes"].append("fpgaserve-card skipped: it serves FACILE, and no FACILE load was chosen")
        else:
            card_repo = write_card_repo(workdir, args.card_cus)
            plan += [("card", n) for n in ns if n == 1 or args.has_frontend_flag]
    names = {"triton": lambda n: "Triton", "card": lambda n: f"fpgaserve-card N={n}"}
    ctx["server_order"] = [names.get(k, lambda n, k=k: f"{k} N={n}")(n) for k, n in plan]

    runs: list[Run] = []
    failed_servers = 0
    for round_ in range(1, s.rounds + 1):
        for kind, n in plan:
            log(f"round {round_}: starting {kind} N={n}")
            try:
                if kind == "fpgaserve":
                    server = start_fpgaserve(workdir, repo, n, args, models)
                elif kind == "ceiling":
                    server = start_ceiling(workdir, repo, n, models)
                elif kind == "card":
                    assert card_repo is not None
                    server = start_card_server(workdir, card_repo, n, args)
                else:
                    server = start_triton(workdir, models)
            except Exception as e:  # a server that cannot start is reported, the others still run
                failed_servers += 1
                ctx["notes"].append(f"round {round_}: {kind} N={n} did not start: {str(e)[-500:]}")
                continue
            try:
                why = check_answers(server, args.batch1_model, card_repo)
                if why:
                    ctx["notes"].append(f"round {round_}: {server.name}: {why}")
                if round_ == 1:
                    ctx["notes"] += [f"{server.name}: {n}" for n in server.notes]
                for load in loads:
                    if server.kind == "card" and load.model != "facile":
                        continue  # the simulated card serves FACILE only
                    common.quiet_wait([server.root_pid], s.quiet_wait_s)
                    runs.append(run_pa(server, load, s, workdir, round_, args.pa_processes))
                    if not server.alive():
                        ctx["notes"].append(f"round {round_}: {server.name} exited during {load.label}")
                        break
            finally:
                server.stop()
    ctx["wall"] = time.monotonic() - t_start
    text = report(ctx, runs)
    print(text)
    if args.out:
        args.out.write_text(text)
    log(f"raw output in {workdir}")
    return 0 if not failed_servers and all(r.row is not None for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
