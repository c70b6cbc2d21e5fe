"""Serving benchmark: fpgaserve vs the zero-work ceiling vs the real Triton, same run.

    python tests/benchmarks/bench_serving.py [--quick] [--out report.md] [--workdir DIR]

Servers (one at a time under load, perf_analyzer -i grpc as the load generator):
* ceiling   - tests/benchmarks/ceiling_server.py: a Triton-protocol grpc.aio server that answers
              ModelInfer with zeros (no validation, no scheduling): the most a Python gRPC
              server does on this machine;
* fpgaserve - FACILE on the numpy backend (same weights as bitstreams/facile), without and
              with `dynamic_batching {}`;
* Triton    - the real tritonserver 2.51, FACILE through its Python backend, dynamic batching.
Loads: batch 1 at concurrency 1/16/64/256, sync and --async; --streaming at 16; batch 16000
(one FACILE event) at concurrency 1 and 4. Plus the batching gain with a backend whose fixed
cost per execution is 1 ms (a model that sleeps 1 ms per call), batch 1, concurrency 64.
Prints infer/s, p50, p99, and the ratios fpgaserve/ceiling, fpgaserve/Triton, batching on/off.
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_facile_vs_triton as common  # noqa: E402  (re-execs under the project venv if needed)

# isort: split
from support.server_process import ServerProcess, free_port  # noqa: E402

rt = common.rt
fmt = common.fmt
FACILE_WEIGHTS = common.FACILE_DIR / "1" / "weights.npz"

FACILE_IO = """max_batch_size: 16384
input [ { name: "input" data_type: TYPE_FP32 dims: [ 47 ] } ]
output [ { name: "output/BiasAdd" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

FACILE_NUMPY_PY = '''
import os
import numpy as np


class Model:
    """FACILE (47 -> 36 -> 36 -> 1, ReLU) in numpy, weights from bitstreams/facile."""

    def initialize(self, config, model_dir):
        w = np.load(os.path.join(model_dir, "weights.npz"))
        self.layers = [(w["W1"], w["b1"]), (w["W2"], w["b2"]), (w["W3"], w["b3"])]

    def execute(self, inputs):
        x = inputs["input"]
        for i, (W, b) in enumerate(self.layers):
            x = x @ W
            x += b
            if i < 2:
                np.maximum(x, 0, out=x)
        return {"output/BiasAdd": x}
'''

SLEEP_PY = '''
import time


class Model:
    """A fixed cost of 1 ms per execution, whatever the batch (an FPGA transfer's shape)."""

    def execute(self, inputs):
        time.sleep(0.001)
        return {"output/BiasAdd": inputs["input"][:, :1].copy()}
'''


def write_repo(root: Path) -> Path:
    repo = root / "fpgaserve-repo"
    for name, py, batching in (
        ("facile", FACILE_NUMPY_PY, ""),
        ("facile_db", FACILE_NUMPY_PY, "dynamic_batching { }\n"),
        ("sleep1ms", SLEEP_PY, ""),
        ("sleep1ms_db", SLEEP_PY, "dynamic_batching { }\n"),
    ):
        (repo / name / "1").mkdir(parents=True, exist_ok=True)
        (repo / name / "config.pbtxt").write_text(f'name: "{name}"\nbackend: "numpy"\n{FACILE_IO}{batching}')
        (repo / name / "1" / "model.py").write_text(py)
        shutil.copy(FACILE_WEIGHTS, repo / name / "1" / "weights.npz")
    return repo


@dataclass(frozen=True)
class Load:
    batch: int
    concurrency: int
    mode: str  # "sync", "async", "stream"

    @property
    def label(self) -> str:
        return f"b{self.batch} c{self.concurrency} {self.mode}"

    def flags(self) -> list[str]:
        return {"sync": [], "async": ["--async"], "stream": ["--streaming"]}[self.mode]


LOADS = [Load(1, c, m) for c in (1, 16, 64, 256) for m in ("sync", "async")]
LOADS += [Load(1, 16, "stream"), Load(16000, 1, "sync"), Load(16000, 4, "sync")]
QUICK_LOADS = [Load(1, 1, "sync"), Load(1, 64, "async"), Load(16000, 4, "sync")]


@dataclass
class Run:
    server: str
    model: str
    load: Load
    infer_s: float | None = None
    p50: float | None = None
    p99: float | None = None
    queue: float | None = None
    compute: float | None = None
    server_request_us: float | None = None
    rows_per_exec: float | None = None
    note: str = ""
    cmd: str = ""


_SERVER_BLOCK = re.compile(
    r"Avg request latency: (\d+) usec \(overhead (\d+) usec \+ queue (\d+) usec \+ compute input (\d+) usec "
    r"\+ compute infer (\d+) usec \+ compute output (\d+) usec\)"
)


def perf(url: str, server: str, model: str, load: Load, workdir: Path, window_ms: int) -> Run:
    csv_path = workdir / f"{server}-{model}-{load.label.replace(' ', '_')}.csv"
    csv_path.unlink(missing_ok=True)
    base = [*common.pa_command(model, url, load.batch, load.concurrency), *load.flags(), "-f", str(csv_path)]
    run = Run(server, model, load)
    for extra, note in common.pa_tries(window_ms):
        cmd = base + extra
        run.cmd = shlex.join(cmd)
        common.log(f"{server} {model} {load.label}")
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        row = common._read_csv(csv_path) if p.returncode == 0 else None
        if row is not None:
            run.note = note
            break
    else:
        run.note = f"FAILED rc {p.returncode}: {p.stdout.strip().splitlines()[-1:] if p.stdout else p.stderr[-200:]}"
        return run
    run.infer_s = common.col(row, "Inferences/Second")
    run.p50, run.p99 = common.col(row, "p50 latency"), common.col(row, "p99 latency")
    run.queue = common.col(row, "Server Queue")
    parts = [common.col(row, k) for k in ("Server Compute Input", "Server Compute Infer", "Server Compute Output")]
    run.compute = sum(parts) if all(v is not None for v in parts) else None
    m = _SERVER_BLOCK.search(p.stdout)
    if m:
        run.server_request_us = float(m.group(1))
    inf = re.search(r"Inference count: (\d+)", p.stdout)
    exe = re.search(r"Execution count: (\d+)", p.stdout)
    if inf and exe and int(exe.group(1)):
        run.rows_per_exec = int(inf.group(1)) / int(exe.group(1))
    return run


def ratio(a, b):
    return "n/a" if not a or not b else f"{a / b:.2f}x"


def report(runs: list[Run], loads: list[Load], sleep_runs: list[Run], wall_s: float) -> str:
    by = {(r.server, r.model, r.load): r for r in runs}
    out = ["# fpgaserve serving benchmark", ""]
    out += [f"- {k}: {v}" for k, v in common.machine_info()]
    out += [f"- benchmark wall time: {wall_s:.0f} s", ""]
    out += [
        "| load | server | infer/s | p50 µs | p99 µs | queue µs | compute µs | rows/exec | note |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    servers = [("ceiling", "facile"), ("fpgaserve", "facile"), ("fpgaserve", "facile_db"), ("triton", "facile")]
    for load in loads:
        for server, model in servers:
            r = by.get((server, model, load))
            if r is None:
                continue
            name = f"{server} ({'batching' if model.endswith('_db') or server == 'triton' else 'no batching'})"
            if server == "ceiling":
                name = "ceiling (zero work)"
            out.append(
                f"| {load.label} | {name} | {fmt(r.infer_s)} | {fmt(r.p50)} | {fmt(r.p99)} | {fmt(r.queue)} | "
                f"{fmt(r.compute)} | {fmt(r.rows_per_exec, 2)} | {r.note} |"
            )
    out += [
        "",
        "Ratios (throughput): fpgaserve with batching / ceiling, / Triton; batching on / off.",
        "",
        "| load | fpgaserve/ceiling | fpgaserve/Triton | batching on/off |",
        "|---|---:|---:|---:|",
    ]
    for load in loads:
        g = lambda s, m: by.get((s, m, load)).infer_s if by.get((s, m, load)) else None  # noqa: E731, B023  (called in this iteration)
        out.append(
            f"| {load.label} | {ratio(g('fpgaserve', 'facile_db'), g('ceiling', 'facile'))} | "
            f"{ratio(g('fpgaserve', 'facile_db'), g('triton', 'facile'))} | "
            f"{ratio(g('fpgaserve', 'facile_db'), g('fpgaserve', 'facile'))} |"
        )
    c1 = by.get(("fpgaserve", "facile_db", Load(1, 1, "sync")))
    if c1 and c1.server_request_us is not None and c1.compute is not None:
        out += [
            "",
            f"Server-side overhead at concurrency 1 (fpgaserve, batching, perf_analyzer's server block): "
            f"request latency {c1.server_request_us:.0f} µs - compute {c1.compute:.0f} µs = "
            f"{c1.server_request_us - c1.compute:.0f} µs (includes queue {fmt(c1.queue)} µs).",
        ]
    if len(sleep_runs) == 2:
        off, on = sleep_runs
        out += [
            "",
            "Backend with a fixed 1 ms per execution, batch 1, concurrency 64 (async):",
            "",
            "| dynamic batching | infer/s | p99 µs | rows/exec |",
            "|---|---:|---:|---:|",
            f"| off | {fmt(off.infer_s)} | {fmt(off.p99)} | {fmt(off.rows_per_exec, 2)} |",
            f"| on | {fmt(on.infer_s)} | {fmt(on.p99)} | {fmt(on.rows_per_exec, 2)} |",
            f"| gain | {ratio(on.infer_s, off.infer_s)} | | |",
        ]
    out += ["", "## perf_analyzer commands", "", "```"]
    out += sorted({r.cmd for r in runs + sleep_runs})
    out += ["```"]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="three loads, shorter windows (a smoke run)")
    ap.add_argument("--out", type=Path, help="also write the markdown report here")
    ap.add_argument("--workdir", type=Path, help="keep CSVs and logs here (default: a temp dir)")
    ap.add_argument("--no-triton", action="store_true", help="skip the real Triton")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    common.install_tools()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="fpgaserve-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    loads = QUICK_LOADS if args.quick else LOADS
    window = 2000 if args.quick else 3000
    repo = write_repo(workdir)
    runs: list[Run] = []

    port = free_port()
    ceiling = subprocess.Popen(
        [
            sys.executable,
            str(HERE / "ceiling_server.py"),
            "--config",
            str(repo / "facile" / "config.pbtxt"),
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(2)
        for load in loads:
            runs.append(perf(f"127.0.0.1:{port}", "ceiling", "facile", load, workdir, window))
    finally:
        ceiling.terminate()
        ceiling.wait()

    sleep_runs: list[Run] = []
    with ServerProcess([repo], log_path=workdir / "fpgaserve.log") as fs:
        for model in ("facile", "facile_db"):
            for load in loads:
                runs.append(perf(fs.url, "fpgaserve", model, load, workdir, window))
        for model in ("sleep1ms", "sleep1ms_db"):
            sleep_runs.append(perf(fs.url, "fpgaserve", model, Load(1, 64, "async"), workdir, window))

    if not args.no_triton:
        weights = workdir / "triton_weights.npz"
        common.convert_weights(FACILE_WEIGHTS, weights)
        trepo = rt.write_python_backend_repository(
            workdir / "triton-repo", ["facile"], facile_weights=weights, facile_dynamic_batching=True
        )
        cfg = trepo / "facile" / "config.pbtxt"
        if "instance_group" not in cfg.read_text():
            cfg.write_text(cfg.read_text() + "instance_group [ { count: 1 kind: KIND_CPU } ]\n")
        ports = [free_port() for _ in range(3)]
        proc = rt.start_tritonserver(trepo, *ports, log_path=workdir / "triton.log", executable=common.TS_EXE)
        try:
            for load in loads:
                runs.append(perf(f"127.0.0.1:{ports[0]}", "triton", "facile", load, workdir, window))
        finally:
            rt.stop_tritonserver(proc)

    text = report(runs, loads, sleep_runs, time.monotonic() - t0)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0 if all(r.infer_s for r in runs + sleep_runs) else 1


if __name__ == "__main__":
    sys.exit(main())
