"""What Triton's Python backend costs in fpgaserve: the same models as Python-backend models and
as numpy-backend models, side by side in one server, under the same perf_analyzer loads.

    python tests/benchmarks/bench_python_backend.py                 # 3 rounds, about 2-3 min
    python tests/benchmarks/bench_python_backend.py --rounds 5 --window-ms 3000
    python tests/benchmarks/bench_python_backend.py --workdir /tmp/b  # keep CSVs and the server log

One fpgaserve serves four models: ``simple`` and ``facile`` written by
tests/support/reference_triton.py in Triton's Python-backend shape (``backend: "python"``, each instance
in its own child process), and ``simple_numpy`` / ``facile_numpy``: the same configs and the
same arithmetic on fpgaserve's in-process numpy backend. Each model has one instance and no
dynamic batching. Before measuring, both variants of each model get the same request and must
return the same outputs.

Loads (perf_analyzer -i grpc): ``simple`` batch 1 at concurrency 64, and a FACILE event (batch
16000 rows of 47 FP32) at concurrency 4, as bench_facile_vs_triton.py measures it. The two
variants run alternately (ABAB; which goes first flips each round) for ``--rounds`` rounds, each
run the mean of ``--windows`` windows of ``--window-ms`` (no stability requirement: the rounds
give the spread). Reported per load and variant: the median infer/s and min..max over rounds,
and per round the ratio python/numpy of the adjacent pair, with the 1-minute load average and the
CPU other processes used during each run. The last line is
``simple_ratio=... facile_ratio=...`` (the ratio of the medians).
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_facile_vs_triton as common  # noqa: E402  (re-execs under the project venv if needed)

# isort: split
import numpy as np  # noqa: E402

from support.server_process import ServerProcess  # noqa: E402

rt = common.rt
FACILE_WEIGHTS = common.FACILE_DIR / "1" / "weights.npz"
ONE_INSTANCE = "instance_group [ { count: 1 kind: KIND_CPU } ]\n"

# The numpy twins do exactly what reference_triton's Python models do, array for array, so
# the difference measured is the backend's path, not the arithmetic.
SIMPLE_NUMPY_PY = '''
import numpy as np


class Model:
    """OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 (int32)."""

    def execute(self, inputs):
        in0 = inputs["INPUT0"].astype(np.int32)
        in1 = inputs["INPUT1"].astype(np.int32)
        return {"OUTPUT0": in0 + in1, "OUTPUT1": in0 - in1}
'''

FACILE_NUMPY_PY = '''
import os

import numpy as np


class Model:
    """FACILE: dense 47 -> 36 -> ReLU -> 36 -> ReLU -> 1, float32 (reference_triton's weights file)."""

    def initialize(self, config, model_dir):
        with np.load(os.path.join(model_dir, "facile_weights.npz")) as data:
            n = len([k for k in data.files if k.startswith("w")])
            self.w = [np.asarray(data["w%d" % i], dtype=np.float32) for i in range(n)]
            self.b = [np.asarray(data["b%d" % i], dtype=np.float32) for i in range(n)]

    def execute(self, inputs):
        h = inputs["input"].astype(np.float32, copy=False)
        for i in range(len(self.w)):
            h = h @ self.w[i] + self.b[i]
            if i < len(self.w) - 1:
                h = np.maximum(h, np.float32(0))
        return {"output/BiasAdd": np.ascontiguousarray(h, dtype=np.float32)}
'''


def write_repo(root: Path) -> Path:
    """The Python-backend models from reference_triton plus their numpy twins (same config but the backend)."""
    weights = root / "facile_triton_weights.npz"
    common.convert_weights(FACILE_WEIGHTS, weights)
    repo = rt.write_python_backend_repository(root / "repo", ["simple", "facile"], facile_weights=weights)
    for name, py in (("simple", SIMPLE_NUMPY_PY), ("facile", FACILE_NUMPY_PY)):
        cfg = repo / name / "config.pbtxt"
        cfg.write_text(cfg.read_text() + ONE_INSTANCE)
        twin = repo / f"{name}_numpy"
        (twin / "1").mkdir(parents=True, exist_ok=True)
        text = cfg.read_text().replace(f'name: "{name}"', f'name: "{name}_numpy"', 1)
        (twin / "config.pbtxt").write_text(text.replace('backend: "python"', 'backend: "numpy"', 1))
        (twin / "1" / "model.py").write_text(py)
        for extra in (repo / name / "1").glob("*.npz"):
            (twin / "1" / extra.name).write_bytes(extra.read_bytes())
    return repo


def check_same_outputs(url: str) -> None:
    """Each Python-backend model and its numpy twin answer one request alike (else the run is meaningless)."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    rng = np.random.default_rng(0)
    cases = {
        "simple": (
            [("INPUT0", rng.integers(-1000, 1000, (1, 16), dtype=np.int32), "INT32"),
             ("INPUT1", rng.integers(-1000, 1000, (1, 16), dtype=np.int32), "INT32")],
            ["OUTPUT0", "OUTPUT1"],
        ),
        "facile": ([("input", rng.standard_normal((16000, 47), dtype=np.float32), "FP32")], ["output/BiasAdd"]),
    }  # fmt: skip
    for model, (tensors, outputs) in cases.items():
        answers = []
        for name in (model, f"{model}_numpy"):
            inputs = []
            for tname, array, dtype in tensors:
                t = grpcclient.InferInput(tname, list(array.shape), dtype)
                t.set_data_from_numpy(array)
                inputs.append(t)
            result = client.infer(name, inputs)
            answers.append([result.as_numpy(o) for o in outputs])
        for out, a, b in zip(outputs, *answers, strict=True):
            if a.shape != b.shape or not np.allclose(a, b, rtol=0, atol=1e-5):
                sys.exit(f"{model} and {model}_numpy disagree on {out}: the comparison would be meaningless")
    client.close()


@dataclass(frozen=True)
class Load:
    key: str  # the name in the final line
    model: str
    batch: int
    concurrency: int


LOADS = (Load("simple", "simple", 1, 64), Load("facile", "facile", 16000, 4))


@dataclass
class Run:
    load: Load
    variant: str  # "python" or "numpy"
    round: int
    infer_s: float | None
    loadavg_1m: float
    other_cores: float
    cmd: str
    cpu_us_per_request: float | None = None  # the server's processes (all of them), per request served
    note: str = ""


def requests_served(http_port: int, model: str) -> int:
    """The model's successful requests so far (its statistics, over HTTP)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/models/{model}/stats", timeout=10) as r:
        stats = json.load(r)["model_stats"]
    return sum(int(s["inference_stats"]["success"]["count"]) for s in stats)


def measure(server: ServerProcess, load: Load, variant: str, rnd: int, args, workdir: Path) -> Run:
    assert server.proc is not None
    url = server.url
    model = load.model if variant == "python" else f"{load.model}_numpy"
    csv_path = workdir / f"{model}-r{rnd}.csv"
    csv_path.unlink(missing_ok=True)
    cmd = [
        *common.pa_command(model, url, load.batch, load.concurrency),
        *common.pa_windows(args.window_ms, common.FALLBACK_STABILITY, args.windows),
        "-f",
        str(csv_path),
    ]
    loadavg = float(Path("/proc/loadavg").read_text().split()[0])
    common.log(f"round {rnd} {variant:6} {load.key} b{load.batch} c{load.concurrency} (load average {loadavg:.2f})")
    served = requests_served(server.http_port, model)
    attempt, _ = common.run_pa(cmd, timeout=60 + 4 * args.windows * args.window_ms / 1000, pids=[server.proc.pid])
    served = requests_served(server.http_port, model) - served
    row = common._read_csv(csv_path) if attempt.rc == 0 else None
    other = attempt.other_cpu_s / attempt.wall_s if attempt.wall_s else 0.0
    run = Run(load, variant, rnd, common.col(row, "Inferences/Second"), loadavg, other, shlex.join(cmd))
    if served > 0:
        run.cpu_us_per_request = 1e6 * attempt.server_cpu_s / served
    if run.infer_s is None:
        tail = attempt.output.strip().splitlines()[-1:] if attempt.output else []
        run.note = f"FAILED rc {attempt.rc}: {tail}"
        common.log(run.note)
    return run


def spread(values: list[float]) -> str:
    return f"{min(values):,.0f}..{max(values):,.0f}" if values else "n/a"


def median_ratio(runs: list[Run], load: Load) -> float | None:
    py = [r.infer_s for r in runs if r.load == load and r.variant == "python" and r.infer_s]
    npy = [r.infer_s for r in runs if r.load == load and r.variant == "numpy" and r.infer_s]
    if not py or not npy:
        return None
    return statistics.median(py) / statistics.median(npy)


def report(runs: list[Run], wall_s: float) -> str:
    out = ["# Python backend against the numpy backend, same server, same run", ""]
    out += [f"- {k}: {v}" for k, v in common.machine_info()]
    out += [f"- benchmark wall time: {wall_s:.0f} s", ""]
    out += [
        "| load | variant | median infer/s | min..max | runs | median server CPU µs/request |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for load in LOADS:
        for variant in ("python", "numpy"):
            values = [r.infer_s for r in runs if r.load == load and r.variant == variant and r.infer_s]
            med = f"{statistics.median(values):,.0f}" if values else "n/a"
            cpu = [
                r.cpu_us_per_request for r in runs if r.load == load and r.variant == variant and r.cpu_us_per_request
            ]
            cpu_med = f"{statistics.median(cpu):,.0f}" if cpu else "n/a"
            label = f"{load.key} b{load.batch} c{load.concurrency}"
            out.append(f"| {label} | {variant} | {med} | {spread(values)} | {len(values)} | {cpu_med} |")
    out += [
        "",
        "Server CPU per request is every server process's CPU time (engine, frontends, instance processes) "
        "during the run over the requests the model's statistics counted: less disturbed by other work on "
        "the machine than throughput.",
    ]
    out += [
        "",
        "Per round (python/numpy of the adjacent pair; load average and other processes' cores at each run):",
        "",
        "| load | round | python infer/s | numpy infer/s | ratio | load avg py/np | other cores py/np |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for load in LOADS:
        for rnd in sorted({r.round for r in runs}):
            pair = {r.variant: r for r in runs if r.load == load and r.round == rnd}
            py, npy = pair.get("python"), pair.get("numpy")
            if py is None or npy is None:
                continue
            ratio = f"{py.infer_s / npy.infer_s:.2f}" if py.infer_s and npy.infer_s else "n/a"
            out.append(
                f"| {load.key} | {rnd} | {common.fmt(py.infer_s)} | {common.fmt(npy.infer_s)} | {ratio} | "
                f"{py.loadavg_1m:.2f}/{npy.loadavg_1m:.2f} | {py.other_cores:.2f}/{npy.other_cores:.2f} |"
            )
    failed = [r for r in runs if r.infer_s is None]
    if failed:
        out += ["", "Failed runs:", ""] + [f"- {r.load.key} {r.variant} round {r.round}: {r.note}" for r in failed]
    out += ["", "perf_analyzer commands (the CSV path differs per run):", "", "```"]
    out += sorted({r.cmd.rsplit(" -f ", 1)[0] for r in runs})
    out += ["```", ""]
    cpu_ratios = []
    for load in LOADS:
        med = {}
        for variant in ("python", "numpy"):
            cpu = [
                r.cpu_us_per_request for r in runs if r.load == load and r.variant == variant and r.cpu_us_per_request
            ]
            med[variant] = statistics.median(cpu) if cpu else None
        value = f"{med['numpy'] / med['python']:.2f}" if med["numpy"] and med["python"] else "n/a"
        cpu_ratios.append(f"{load.key}={value}")
    out.append("server CPU per request, numpy/python (1 = the Python backend costs no more): " + " ".join(cpu_ratios))
    ratios = {load.key: median_ratio(runs, load) for load in LOADS}
    out.append(" ".join(f"{k}_ratio={'n/a' if v is None else f'{v:.2f}'}" for k, v in ratios.items()))
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="ABAB rounds per load (default 3)")
    ap.add_argument("--window-ms", type=int, default=2000, help="perf_analyzer measurement window (default 2000)")
    ap.add_argument("--windows", type=int, default=3, help="windows averaged per run (default 3)")
    ap.add_argument("--loads", nargs="+", choices=[load.key for load in LOADS], help="measure only these loads")
    ap.add_argument("--out", type=Path, help="also write the markdown report here")
    ap.add_argument("--workdir", type=Path, help="keep CSVs and the server log here (default: a temp dir)")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.windows < 1 or args.window_ms < 100:
        ap.error("--rounds and --windows must be >= 1, --window-ms >= 100")
    t0 = time.monotonic()
    common.install_tools()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="fpgaserve-bench-pyback-"))
    workdir.mkdir(parents=True, exist_ok=True)
    repo = write_repo(workdir)
    loads = [load for load in LOADS if not args.loads or load.key in args.loads]
    runs: list[Run] = []
    with ServerProcess([repo], log_path=workdir / "fpgaserve.log") as server:
        assert server.proc is not None
        check_same_outputs(server.url)
        for rnd in range(1, args.rounds + 1):
            order = ("python", "numpy") if rnd % 2 else ("numpy", "python")
            for load in loads:
                for variant in order:
                    runs.append(measure(server, load, variant, rnd, args, workdir))
    text = report(runs, time.monotonic() - t0)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0 if all(r.infer_s for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
