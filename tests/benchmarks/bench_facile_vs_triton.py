#!/usr/bin/env python3
"""FACILE throughput/latency: fpgaserve (ONNX Runtime backend) vs the real NVIDIA Triton 2.51.

Run from the repository root (the project venv is used automatically if it exists)::

    python tests/benchmarks/bench_facile_vs_triton.py            # full run, < 15 min
    python tests/benchmarks/bench_facile_vs_triton.py --quick    # < 5 min
    python tests/benchmarks/bench_facile_vs_triton.py --out results.md

What it does:

1. Installs perf_analyzer and tritonserver into ``.tools/`` with the shared installers
   (``<repo root>/../shared/tools/get-*``) if they are missing.
2. Starts fpgaserve on ``bitstreams/`` and Triton on a Python-backend repository written by
   ``tests/support/reference_triton.py`` whose ``facile`` uses the *same* weights
   (``bitstreams/facile/1/weights.npz``, keys W1,b1,... renamed to w0,b0,...). Both run
   without dynamic batching and with one model instance. One batch-1 and one batch-16000
   request go to both servers; their outputs must agree to 1e-5.
3. Runs ``perf_analyzer -i grpc`` against one server at a time (never both under load) for
   three loads: batch 1 @ concurrency 1, batch 1 @ concurrency 64, batch 16000 @ concurrency 4.
   Measurement: time windows (``-p 3000 -s 25``, ``--quick``: ``-p 2000``); when perf_analyzer
   cannot stabilize (exit code 2) the load is re-measured once as the mean of 3 windows of the
   same length without a stability requirement (``-s 1000 -r 3``). Before each run it waits
   (bounded) for other processes on the machine to go quiet, and it records how much CPU they
   used during the run.
   The full run does 2 rounds (``--repeat``) and reports the best round per load and server,
   because other processes on a shared 2-core machine disturb single runs; every round is listed.
4. Prints a markdown report (table, fpgaserve/Triton ratios, the exact perf_analyzer command
   lines, machine info, stats sanity checks) and writes it to ``--out`` if given.

This file is named bench_*.py so pytest never collects it.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import os
import platform
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
SHARED = ROOT.parent / "shared"
PA_DEST = ROOT / ".tools" / "perf-analyzer"
TS_DEST = ROOT / ".tools" / "tritonserver"
PA_EXE = PA_DEST / "perf_analyzer"
TS_EXE = TS_DEST / "tritonserver"
FACILE_DIR = ROOT / "bitstreams" / "facile"
FORBIDDEN_PORTS = {8000, 8001, 8002}
MODEL = "facile"
OUTPUT = "output/BiasAdd"
MAX_ABS_DIFF = 1e-5
BUSY_THRESHOLD = 0.3  # cores used by foreign processes during a run before the report flags it


def _ensure_project_python() -> None:
    """Re-exec under the project venv when fpgaserve/tritonclient are not importable here."""
    try:
        import tritonclient.grpc  # noqa: F401

        import fpgaserve.server  # noqa: F401

        return
    except ImportError:
        pass
    venv_py = ROOT / ".venv" / "bin" / "python"
    if venv_py.exists() and not os.environ.get("_FACILE_BENCH_REEXEC"):
        os.environ["_FACILE_BENCH_REEXEC"] = "1"
        os.execv(str(venv_py), [str(venv_py), str(Path(__file__).resolve()), *sys.argv[1:]])
    sys.exit("fpgaserve and tritonclient must be importable (activate the project venv)")


_ensure_project_python()

import numpy as np  # noqa: E402

sys.path.insert(0, str(TESTS))
import support.reference_triton as rt  # noqa: E402
from support.server_process import BUNDLED_REPO, ServerProcess, free_port  # noqa: E402


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- tools


def install_tools() -> list[str]:
    """Run the shared installers for whatever is missing; return notes for the report."""
    notes = []
    env = dict(os.environ)
    env["PYTHON"] = sys.executable  # pip for the downloads; its X.Y picks the Python-backend stub
    for exe, installer, dest in (
        (PA_EXE, SHARED / "tools" / "get-perf-analyzer", PA_DEST),
        (TS_EXE, SHARED / "tools" / "get-tritonserver", TS_DEST),
    ):
        if exe.is_file() and os.access(exe, os.X_OK):
            continue
        if not installer.is_file():
            sys.exit(f"{exe} is missing and the installer {installer} does not exist")
        log(f"installing {exe.name} with {installer}")
        t0 = time.monotonic()
        subprocess.run(["bash", str(installer), str(dest)], check=True, env=env, cwd=ROOT)
        notes.append(f"installed {exe.name} with {installer} in {time.monotonic() - t0:.0f} s")
        if not (exe.is_file() and os.access(exe, os.X_OK)):
            sys.exit(f"{installer} ran but {exe} is still missing")
    return notes


# ----------------------------------------------------------------------------- weights


def convert_weights(src: Path, dest: Path) -> dict[str, np.ndarray]:
    """bitstreams' weights.npz (W1,b1,W2,b2,W3,b3; kernels (in,out)) -> reference_triton keys."""
    with np.load(src) as data:
        keys = set(data.files)
        if set(rt.FACILE_WEIGHT_KEYS) <= keys:
            weights = {k: np.asarray(data[k], np.float32) for k in rt.FACILE_WEIGHT_KEYS}
        else:
            weights = {}
            for i in range(len(rt.FACILE_LAYERS)):
                for ours, theirs in ((f"w{i}", f"W{i + 1}"), (f"b{i}", f"b{i + 1}")):
                    if theirs not in keys:
                        raise ValueError(f"{src}: neither w0,b0,... nor W1,b1,... keys ({sorted(keys)})")
                    weights[ours] = np.asarray(data[theirs], np.float32)
    for i, (n_in, n_out) in enumerate(rt.FACILE_LAYERS):
        w = weights[f"w{i}"]
        if w.shape == (n_out, n_in) and n_in != n_out:
            weights[f"w{i}"] = np.ascontiguousarray(w.T)  # (out,in) layout -> (in,out)
    np.savez(dest, **weights)
    return rt.load_facile_weights(dest)  # validates shapes


# ----------------------------------------------------------------------------- process CPU


_TICK = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int):
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()  # fields from "state" (field 3) on


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            f = _stat_fields(int(d))
            if f:
                children.setdefault(int(f[1]), []).append(int(d))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def tree_cpu_seconds(root: int) -> float:
    """utime+stime of a process and its live descendants (all threads), in seconds."""
    total = 0
    for pid in _descendants(root):
        f = _stat_fields(pid)
        if f:
            total += int(f[11]) + int(f[12])
    return total / _TICK


def system_busy_seconds() -> float:
    parts = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    vals = [int(v) for v in parts[:8]]  # user nice system idle iowait irq softirq steal
    return (sum(vals) - vals[3] - vals[4]) / _TICK


# ----------------------------------------------------------------------------- servers


def _unforbidden_port() -> int:
    while True:
        p = free_port()
        if p not in FORBIDDEN_PORTS:
            return p


def start_fpgaserve(workdir: Path) -> ServerProcess:
    # the float reference (--fpga-mode onnx): Triton serves the same float network
    server = ServerProcess([BUNDLED_REPO], "--fpga-mode", "onnx", log_path=workdir / "fpgaserve.log")
    for attr in ("grpc_port", "http_port", "metrics_port"):
        if getattr(server, attr) in FORBIDDEN_PORTS:
            setattr(server, attr, _unforbidden_port())
    server.start(timeout=120)
    return server


@dataclass
class Triton:
    proc: subprocess.Popen
    grpc_port: int
    http_port: int
    metrics_port: int
    repo: Path

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"


def start_triton(workdir: Path, weights_npz: Path) -> Triton:
    repo = rt.write_python_backend_repository(
        workdir / "triton-repo", ["facile"], facile_weights=weights_npz, facile_dynamic_batching=False
    )
    cfg = repo / MODEL / "config.pbtxt"
    text = cfg.read_text()
    if "instance_group" not in text:
        # explicit, so the comparison does not depend on Triton's defaults
        cfg.write_text(text + "instance_group [\n  {\n    count: 1\n    kind: KIND_CPU\n  }\n]\n")
    ports = []
    while len(ports) < 3:
        p = _unforbidden_port()
        if p not in ports:
            ports.append(p)
    grpc_port, http_port, metrics_port = ports
    proc = rt.start_tritonserver(
        repo,
        grpc_port=grpc_port,
        http_port=http_port,
        metrics_port=metrics_port,
        log_path=workdir / "tritonserver.log",
        executable=TS_EXE,
        timeout=180,
    )
    return Triton(proc, grpc_port, http_port, metrics_port, repo)


# ----------------------------------------------------------------------------- checks


def _client(url: str):
    import tritonclient.grpc as grpcclient

    return grpcclient.InferenceServerClient(url)


def infer(url: str, x: np.ndarray) -> np.ndarray:
    import tritonclient.grpc as grpcclient

    c = _client(url)
    try:
        inp = grpcclient.InferInput("input", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        r = c.infer(MODEL, [inp], outputs=[grpcclient.InferRequestedOutput(OUTPUT)], client_timeout=120)
        return r.as_numpy(OUTPUT)
    finally:
        c.close()


def model_setup(url: str) -> dict:
    c = _client(url)
    try:
        cfg = c.get_model_config(MODEL, as_json=True)["config"]
        meta = c.get_server_metadata(as_json=True)
    finally:
        c.close()
    groups = cfg.get("instance_group", [])
    return {
        "server": f"{meta.get('name')} {meta.get('version')}",
        "backend": cfg.get("platform") or cfg.get("backend"),
        "max_batch_size": cfg.get("max_batch_size"),
        "dynamic_batching": "dynamic_batching" in cfg,
        "instances": sum(int(g.get("count", 1)) for g in groups) if groups else "default",
        "statistics": "statistics" in meta.get("extensions", []),
    }


def check_agreement(fs_url: str, tr_url: str, weights: dict) -> list[str]:
    """Same inputs to both servers (batch 1 and 16000, which also warms both up)."""
    rng = np.random.default_rng(12345)
    lines = []
    ok = True
    for batch in (1, 16000):
        x = rng.standard_normal((batch, 47)).astype(np.float32)
        a = infer(fs_url, x)
        b = infer(tr_url, x)
        ref = rt.facile_reference(x, weights)
        if a.shape != (batch, 1) or b.shape != (batch, 1):
            ok = False
            lines.append(f"batch {batch}: output shapes fpgaserve {a.shape}, Triton {b.shape}, expected {(batch, 1)}")
            continue
        d = float(np.max(np.abs(a - b)))
        d_ref = float(np.max(np.abs(a - ref)))
        ok &= d <= MAX_ABS_DIFF
        lines.append(
            f"batch {batch}: max |fpgaserve - Triton| = {d:.3g} (limit {MAX_ABS_DIFF:g}), "
            f"max |fpgaserve - numpy| = {d_ref:.3g}, output range [{float(a.min()):.3g}, {float(a.max()):.3g}]"
        )
    if not ok:
        raise RuntimeError("the two servers do not run the same network:\n  " + "\n  ".join(lines))
    return lines


# ----------------------------------------------------------------------------- perf_analyzer


@dataclass(frozen=True)
class Load:
    key: str
    batch: int
    concurrency: int

    @property
    def label(self) -> str:
        return f"b{self.batch} c{self.concurrency}"


LOADS = (Load("b1c1", 1, 1), Load("b1c64", 1, 64), Load("b16000c4", 16000, 4))


@dataclass
class Settings:
    window_ms: int  # perf_analyzer -p
    stability_pct: int  # -s
    max_trials: int  # -r
    repeats: int  # rounds over all loads
    quiet_wait_s: float  # before each run, wait up to this long for other processes to go quiet ...
    quiet_budget_s: float  # ... but no more than this in total


FULL = Settings(window_ms=3000, stability_pct=25, max_trials=10, repeats=2, quiet_wait_s=20, quiet_budget_s=150)
QUICK = Settings(window_ms=2000, stability_pct=25, max_trials=5, repeats=1, quiet_wait_s=5, quiet_budget_s=30)
# When perf_analyzer cannot stabilize, the load is re-measured as FALLBACK_WINDOWS windows of the same
# length whose average is reported whatever their spread (-s 1000). Not --request-count: perf_analyzer
# 2.49 sometimes hangs after the last request of a --request-count run (seen at concurrency 64).
FALLBACK_WINDOWS = 3
FALLBACK_STABILITY = 1000


def quiet_wait(server_pids: list[int], max_wait: float) -> tuple[float, float]:
    """Wait (up to max_wait s) until processes other than ours use < BUSY_THRESHOLD cores.

    Returns (seconds waited, other cores in the last 1 s sample). Our servers are idle here.
    """
    t0 = time.monotonic()
    while True:
        b0, s0 = system_busy_seconds(), sum(tree_cpu_seconds(p) for p in server_pids)
        time.sleep(1.0)
        other = max(0.0, (system_busy_seconds() - b0) - (sum(tree_cpu_seconds(p) for p in server_pids) - s0))
        waited = time.monotonic() - t0
        if other < BUSY_THRESHOLD or waited >= max_wait:
            return waited, other


@dataclass
class Attempt:
    cmd: list[str]
    rc: int | None
    wall_s: float
    output: str
    pa_cpu_s: float
    server_cpu_s: float
    other_cpu_s: float


@dataclass
class Result:
    load: Load
    server: str
    round: int = 1
    attempts: list[Attempt] = field(default_factory=list)
    quiet: tuple[float, float] = (0.0, 0.0)  # seconds waited for a quiet machine, other cores then
    row: dict | None = None
    method: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def final(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    def window_spread(self) -> str:
        """Throughput of the windows perf_analyzer averaged (its last 3): min..max, spread in %."""
        passes = [float(v) for v in _PASS_RE.findall(self.final.output if self.final else "")][-3:]
        if not passes:
            return "n/a"
        mean = sum(passes) / len(passes)
        return f"{min(passes):,.4g}..{max(passes):,.4g} (±{50 * (max(passes) - min(passes)) / mean:.0f} %)"

    def server_latency(self) -> tuple[int, int] | None:
        """perf_analyzer's server 'Avg request latency' and its unattributed 'overhead' (µs)."""
        m = re.search(r"Avg request latency: (\d+) usec \(overhead (\d+) usec", self.final.output if self.final else "")
        return (int(m.group(1)), int(m.group(2))) if m else None

    def col(self, name: str) -> float | None:
        return col(self.row, name)


def pa_command(
    model: str,
    url: str,
    batch: int,
    concurrency: int,
    *,
    exe: str | Path = PA_EXE,
    version: str | None = None,
    protocol: str = "grpc",
) -> list[str]:
    """The start every benchmark's perf_analyzer command shares: one model over ``protocol``
    (grpc or http), one batch size and concurrency (``version``: ``-x``, right after the model)."""
    pinned = ["-x", version] if version else []
    return [
        str(exe),
        "-m",
        model,
        *pinned,
        "-u",
        url,
        "-i",
        protocol,
        "-b",
        str(batch),
        "--concurrency-range",
        str(concurrency),
    ]


def pa_windows(window_ms: int, stability_pct: int = 25, max_trials: int = 10) -> list[str]:
    """Time windows of ``window_ms`` until the last 3 agree within ``stability_pct`` (at most ``max_trials``)."""
    return ["-p", str(window_ms), "-s", str(stability_pct), "-r", str(max_trials)]


def pa_tries(window_ms: int) -> tuple[tuple[list[str], str], ...]:
    """(arguments, note) to try in turn: stable windows, else the mean of FALLBACK_WINDOWS whatever their spread."""
    return (
        (pa_windows(window_ms), ""),
        (
            pa_windows(window_ms, FALLBACK_STABILITY, FALLBACK_WINDOWS),
            f"unstable: mean of {FALLBACK_WINDOWS} windows",
        ),
    )


def col(row: dict | None, name: str) -> float | None:
    """A perf_analyzer CSV column as a number (None when absent, empty or not a number)."""
    if not row or name not in row:
        return None
    try:
        return float(row[name])
    except ValueError:
        return None


def _run_pa(cmd: list[str], timeout: float, server_pid: int) -> Attempt:
    """run_pa with one server process tree."""
    return run_pa(cmd, timeout, [server_pid])[0]


def run_pa(cmd: list[str], timeout: float, pids: list[int]) -> tuple[Attempt, dict[int, float]]:
    """Run one perf_analyzer (killed after ``timeout`` s). The attempt counts the CPU of the process
    trees ``pids`` as the server's; also returns each tree's CPU seconds."""
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu0, sys0, t0 = {p: tree_cpu_seconds(p) for p in pids}, system_busy_seconds(), time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        rc: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # our own perf_analyzer only
        out, _ = proc.communicate()
        out += f"\n[benchmark] perf_analyzer killed after {timeout:.0f} s timeout\n"
        rc = None
    wall = time.monotonic() - t0
    used = {p: tree_cpu_seconds(p) - cpu0[p] for p in pids}
    srv = sum(used.values())
    busy = system_busy_seconds() - sys0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    pa_cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    return Attempt(cmd, rc, wall, out, pa_cpu, srv, max(0.0, busy - srv - pa_cpu)), used


def _read_csv(path: Path) -> dict | None:
    if not path.is_file():
        return None
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    return rows[-1] if rows else None


_PASS_RE = re.compile(r"Pass \[\d+\] throughput: ([0-9.eE+]+) infer/sec")


def _int_after(label: str, text: str) -> int | None:
    m = re.search(rf"{re.escape(label)}:\s*(\d+)", text)
    return int(m.group(1)) if m else None


def sanity_check(res: Result) -> None:
    """Client vs server counts under no dynamic batching: each request is one execution."""
    out = res.final.output if res.final else ""
    client = out.split("Server:")[0]
    server = out.split("Server:")[1] if "Server:" in out else ""
    req = _int_after("Request count", client)
    inf = _int_after("Inference count", server)
    exe = _int_after("Execution count", server)
    ok = _int_after("Successful request count", server)
    if not server:
        res.notes.append("perf_analyzer printed no Server block (no server-side statistics)")
        return
    b, c = res.load.batch, res.load.concurrency
    if None in (req, inf, exe, ok):
        res.notes.append(
            f"could not parse the statistics counts (request {req}, inference {inf}, execution {exe}, success {ok})"
        )
        return
    if inf != exe * b:
        res.notes.append(
            f"server inference count {inf} != execution count {exe} x batch {b} (unexpected without dynamic batching)"
        )
    if ok != exe:
        res.notes.append(f"server successful request count {ok} != execution count {exe}")
    if abs(req - ok) > 2 * c + 0.02 * req:
        res.notes.append(f"client request count {req} vs server successful count {ok}: differ by more than 2 %")
    if res.row is not None:
        parts = [
            res.col(k) or 0.0
            for k in ("Server Queue", "Server Compute Input", "Server Compute Infer", "Server Compute Output")
        ]
        if sum(parts) <= 0:
            res.notes.append("server queue/compute columns are all 0")
    if "error" in out.lower() and res.final.rc == 0:
        lines = [ln.strip() for ln in out.splitlines() if "error" in ln.lower()]
        res.notes.append("perf_analyzer printed: " + " | ".join(lines[:3]))


def measure(
    load: Load,
    server_name: str,
    url: str,
    server_pid: int,
    s: Settings,
    workdir: Path,
    round_: int = 1,
    quiet: tuple[float, float] = (0.0, 0.0),
    protocol: str = "grpc",
) -> Result:
    res = Result(load, server_name, round_, quiet=quiet)
    stem = f"pa-{load.key}-{server_name.lower().replace(' ', '-')}-r{round_}"
    csv_path = workdir / f"{stem}.csv"
    base = pa_command(MODEL, url, load.batch, load.concurrency, protocol=protocol)
    cmd = base + pa_windows(s.window_ms, s.stability_pct, s.max_trials) + ["-v", "-f", str(csv_path)]
    csv_path.unlink(missing_ok=True)
    log(f"{load.label} {server_name}: {shlex.join(cmd)}")
    att = _run_pa(cmd, s.max_trials * s.window_ms / 1000 * 2 + 60, server_pid)
    res.attempts.append(att)
    (workdir / f"{stem}-1.txt").write_text(att.output)
    res.row = _read_csv(csv_path) if att.rc == 0 else None
    res.method = f"stable, -s {s.stability_pct}"
    if att.rc == 2 or (att.rc == 0 and res.row is None):
        passes = [float(v) for v in _PASS_RE.findall(att.output)]
        spread = (
            f"{min(passes):,.4g}..{max(passes):,.4g} infer/s over {len(passes)} windows" if passes else "no windows"
        )
        res.notes.append(
            f"not stable within {s.stability_pct} % (rc {att.rc}; {spread}); re-measured as the "
            f"average of {FALLBACK_WINDOWS} windows without a stability requirement"
        )
        csv_path.unlink(missing_ok=True)
        cmd = base + pa_windows(s.window_ms, FALLBACK_STABILITY, FALLBACK_WINDOWS) + ["-v", "-f", str(csv_path)]
        log(f"{load.label} {server_name}: unstable, fallback {shlex.join(cmd)}")
        att = _run_pa(cmd, FALLBACK_WINDOWS * s.window_ms / 1000 * 2 + 60, server_pid)
        res.attempts.append(att)
        (workdir / f"{stem}-2.txt").write_text(att.output)
        res.row = _read_csv(csv_path) if att.rc == 0 else None
        res.method = f"unstable → mean of {FALLBACK_WINDOWS} windows"
    if res.row is None:
        tail = "\n".join(att.output.strip().splitlines()[-6:])
        res.method += " (FAILED)"
        res.notes.append(f"perf_analyzer rc {att.rc}: {tail}")
    else:
        sanity_check(res)
    other = att.other_cpu_s / max(att.wall_s, 1e-9)
    if other > BUSY_THRESHOLD:
        res.notes.append(f"other processes used {other:.2f} cores during this run (machine not idle: expect noise)")
    return res


# ----------------------------------------------------------------------------- report


def machine_info() -> list[tuple[str, str]]:
    model = "unknown"
    mhz = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and model == "unknown":
                model = line.split(":", 1)[1].strip()
            if line.startswith("cpu MHz") and mhz is None:
                mhz = line.split(":", 1)[1].strip()
    except OSError:
        pass
    nproc = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip() or str(os.cpu_count())
    mem = "?"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass

    def ver(mod: str) -> str:
        try:
            from importlib.metadata import version

            return version(mod)
        except Exception:
            return "?"

    try:
        sha = (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
            ).stdout.strip()
            or "?"
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "server", "backends", "protos", "bitstreams"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.splitlines()
        source = f"git {sha}" + (
            f", with uncommitted changes to {len(dirty)} file(s) under server/ backends/ protos/ bitstreams/"
            if dirty
            else ", clean"
        )
    except (OSError, subprocess.SubprocessError):
        source = "?"
    return [
        ("fpgaserve source", source),
        ("nproc", nproc),
        ("CPU model (/proc/cpuinfo)", model + (f", {mhz} MHz" if mhz else "")),
        ("memory", mem),
        ("kernel", platform.release()),
        ("load average at start (1/5/15 min)", " ".join(Path("/proc/loadavg").read_text().split()[:3])),
        ("python", platform.python_version()),
        (
            "fpgaserve / onnxruntime / numpy / grpcio",
            f"{ver('fpgaserve')} / {ver('onnxruntime')} / {ver('numpy')} / {ver('grpcio')}",
        ),
        ("perf_analyzer", f"{PA_EXE} (tritonclient 2.49.0 wheel, per get-perf-analyzer)"),
        ("tritonserver", f"{TS_EXE}"),
    ]


def fmt(v: float | None, digits: int = 0) -> str:
    return "n/a" if v is None else f"{v:,.{digits}f}"


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "n/a"
    return f"{a / b:.2f}x"


def _compute(r: Result) -> float | None:
    parts = [r.col(k) for k in ("Server Compute Input", "Server Compute Infer", "Server Compute Output")]
    return None if any(p is None for p in parts) else sum(parts)


def best_of(results: list[Result]) -> dict[tuple[str, str], Result]:
    """Per (load, server): the repeat with the highest throughput (least disturbed by other load)."""
    best: dict[tuple[str, str], Result] = {}
    for r in results:
        k = (r.load.key, r.server)
        cur = best.get(k)
        if cur is None or (r.col("Inferences/Second") or -1) > (cur.col("Inferences/Second") or -1):
            best[k] = r
    return best


def build_report(ctx: dict, results: list[Result]) -> str:
    best = best_of(results)
    chosen = [best[(ld.key, srv)] for ld in ctx["loads"] for srv in ("fpgaserve", "Triton") if (ld.key, srv) in best]
    repeats = ctx["repeats"]
    L = []
    L.append("# FACILE benchmark: fpgaserve vs NVIDIA Triton 2.51 (Python backend)")
    L.append("")
    L.append(
        f"- date: {ctx['date']}; mode: {'--quick' if ctx['quick'] else 'full'}; "
        f"benchmark runtime: {ctx['runtime']:.0f} s (perf_analyzer phase {ctx['measure_time']:.0f} s)"
    )
    L.append(f"- measurement: {ctx['settings']}")
    L.append(
        f"- {repeats} round(s); each round runs every load against fpgaserve, then Triton, one perf_analyzer "
        "at a time (sync gRPC, random input data). Both servers stay up; the idle one uses no CPU."
        + (
            " The tables show, per load and server, the round with the higher throughput; all rounds are under Details."
            if repeats > 1
            else ""
        )
    )
    L.append("")
    L.append("## Machine")
    L.append("")
    L.append("| | |")
    L.append("|---|---|")
    for k, v in ctx["machine"]:
        L.append(f"| {k} | {v} |")
    L.append("")
    L.append("## Setup")
    L.append("")
    L.append("| server | reported | model backend | max_batch_size | dynamic_batching | instances | statistics ext. |")
    L.append("|---|---|---|---|---|---|---|")
    for name, info in ctx["setup"].items():
        L.append(
            f"| {name} | {info['server']} | {info['backend']} | {info['max_batch_size']} | "
            f"{'yes' if info['dynamic_batching'] else 'no'} | {info['instances']} | {'yes' if info['statistics'] else 'no'} |"
        )
    L.append("")
    L.append(
        f"Weights: `{ctx['weights_src']}` (keys {ctx['weights_keys']}, kernels (in,out)) renamed to "
        "reference_triton's w0,b0,w1,b1,w2,b2 for the Triton repository. Output agreement (same random input to both):"
    )
    L.append("")
    for line in ctx["agreement"]:
        L.append(f"- {line}")
    L.append("")
    L.append("## Results")
    L.append("")
    L.append("| load | server | infer/s | p50 µs | p99 µs | server queue µs | server compute µs |")
    L.append("|---|---|---:|---:|---:|---:|---:|")
    for r in chosen:
        L.append(
            f"| {r.load.label} | {r.server} | {fmt(r.col('Inferences/Second'))} | {fmt(r.col('p50 latency'))} | "
            f"{fmt(r.col('p99 latency'))} | {fmt(r.col('Server Queue'))} | {fmt(_compute(r))} |"
        )
    L.append("")
    L.append(
        "Load `bB cC` = batch B rows per request, C concurrent synchronous requests. infer/s counts rows "
        "(batch 16000 at 100 requests/s = 1,600,000 infer/s). p50/p99 are client-side request latencies; "
        "server queue/compute are perf_analyzer's per-request averages from ModelStatistics; "
        "server compute = compute input + infer + output (split under Details)."
    )
    L.append("")
    L.append("### fpgaserve / Triton")
    L.append("")
    L.append("| load | throughput ratio | p50 latency ratio | p99 latency ratio |")
    L.append("|---|---:|---:|---:|")
    for load in ctx["loads"]:
        a, b = best.get((load.key, "fpgaserve")), best.get((load.key, "Triton"))
        if a is None or b is None:
            continue
        L.append(
            f"| {load.label} | {_ratio(a.col('Inferences/Second'), b.col('Inferences/Second'))} | "
            f"{_ratio(a.col('p50 latency'), b.col('p50 latency'))} | {_ratio(a.col('p99 latency'), b.col('p99 latency'))} |"
        )
    L.append("")
    L.append("Throughput ratio > 1: fpgaserve faster; latency ratio > 1: fpgaserve slower.")
    L.append("")
    L.append("### Details (every run)")
    L.append("")
    L.append(
        "| load | server | round | method | infer/s | windows averaged: infer/s | network+server send/recv µs | "
        "server avg request µs (unattributed overhead) | compute input / infer / output µs | server CPU (cores) | "
        "perf_analyzer CPU (cores) | other CPU (cores) | quiet wait s (other cores then) | run s |"
    )
    L.append("|---|---|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    order = {
        (ld.key, srv): i
        for i, (ld, srv) in enumerate((ld, srv) for ld in ctx["loads"] for srv in ("fpgaserve", "Triton"))
    }
    for r in sorted(results, key=lambda r: (order.get((r.load.key, r.server), 99), r.round)):
        a = r.final
        if a is None:
            continue
        w = max(a.wall_s, 1e-9)
        ci = " / ".join(
            fmt(r.col(k)) for k in ("Server Compute Input", "Server Compute Infer", "Server Compute Output")
        )
        sl = r.server_latency()
        sl_s = f"{sl[0]:,} ({sl[1]:,})" if sl else "n/a"
        mark = " *" if repeats > 1 and best.get((r.load.key, r.server)) is r else ""
        L.append(
            f"| {r.load.label} | {r.server} | {r.round}{mark} | {r.method} | {fmt(r.col('Inferences/Second'))} | "
            f"{r.window_spread()} | {fmt(r.col('Network+Server Send/Recv'))} | {sl_s} | {ci} | "
            f"{a.server_cpu_s / w:.2f} | {a.pa_cpu_s / w:.2f} | {a.other_cpu_s / w:.2f} | "
            f"{r.quiet[0]:.0f} ({r.quiet[1]:.2f}) | {sum(x.wall_s for x in r.attempts):.0f} |"
        )
    L.append("")
    if repeats > 1:
        L.append("`*` = the round shown in the tables above. ")
    L.append(
        "network+server send/recv: perf_analyzer's client latency minus client send/recv and the server's "
        "queue+compute, i.e. gRPC transport plus server time outside the model statistics. Unattributed "
        "overhead: the server's request time (ModelStatistics success) minus queue and compute. CPU columns: "
        "CPU-seconds / wall-seconds of the final perf_analyzer run of that row (2 cores = 2.00); server CPU "
        'includes Triton\'s Python-backend stub; "other" is every other process on the machine (noise). '
        "Quiet wait: time spent before the run waiting for other processes to drop below "
        f"{BUSY_THRESHOLD} cores (includes a 1 s sample)."
    )
    L.append("")
    L.append("## perf_analyzer command lines")
    L.append("")
    L.append("```bash")
    for r in results:
        for i, a in enumerate(r.attempts):
            tag = "" if i == len(r.attempts) - 1 else "   # unstable, re-measured below"
            L.append(f"# {r.load.label} {r.server}, round {r.round} (rc {a.rc}, {a.wall_s:.0f} s)")
            L.append(shlex.join(a.cmd) + tag)
    L.append("```")
    L.append("")
    L.append(
        f"Ports: fpgaserve gRPC {ctx['ports']['fpgaserve']}, Triton gRPC {ctx['ports']['Triton']} (random free ports)."
    )
    L.append("")
    L.append("## Problems and notes")
    L.append("")
    notes = list(ctx["notes"])
    for r in results:
        notes += [f"{r.load.label} {r.server} round {r.round}: {n}" for n in r.notes]
    if not notes:
        notes = ["none"]
    for n in notes:
        L.append(f"- {n}")
    L.append("")
    return "\n".join(L)


# ----------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="shorter windows and fewer trials (< 5 min)")
    ap.add_argument("--out", type=Path, help="also write the markdown report to this file")
    ap.add_argument(
        "--workdir",
        type=Path,
        help="keep repositories, logs and raw perf_analyzer output here "
        "(default: a temporary directory, deleted at the end)",
    )
    ap.add_argument("--loads", nargs="*", choices=[ld.key for ld in LOADS], help="subset of loads (default: all)")
    ap.add_argument(
        "--repeat",
        type=int,
        help="rounds over all loads (default: 2 full, 1 with --quick); "
        "the tables report the best round per load and server",
    )
    args = ap.parse_args(argv)

    t_start = time.monotonic()
    settings = QUICK if args.quick else FULL
    loads = [ld for ld in LOADS if not args.loads or ld.key in args.loads]
    repeats = args.repeat or settings.repeats
    ctx: dict = {
        "quick": args.quick,
        "notes": [],
        "loads": loads,
        "repeats": repeats,
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
    }
    ctx["notes"] += install_tools()
    ctx["machine"] = machine_info()

    tmp = None
    if args.workdir:
        workdir = args.workdir.resolve()
        workdir.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.mkdtemp(prefix="bench-facile-")
        workdir = Path(tmp)

    weights_src = FACILE_DIR / "1" / "weights.npz"
    with np.load(weights_src) as d:
        ctx["weights_keys"] = ",".join(d.files)
    ctx["weights_src"] = weights_src.relative_to(ROOT)
    weights = convert_weights(weights_src, workdir / "facile_weights.npz")

    fs = tr = None
    results: list[Result] = []
    try:
        log("starting fpgaserve")
        fs = start_fpgaserve(workdir)
        fs_url = f"127.0.0.1:{fs.grpc_port}"
        log("starting tritonserver (Python backend)")
        tr = start_triton(workdir, workdir / "facile_weights.npz")
        ctx["ports"] = {"fpgaserve": fs.grpc_port, "Triton": tr.grpc_port}
        ctx["setup"] = {"fpgaserve": model_setup(fs_url), "Triton": model_setup(tr.url)}
        for name, info in ctx["setup"].items():
            if info["dynamic_batching"]:
                ctx["notes"].append(f"{name}'s facile config HAS dynamic_batching: comparison not like for like")
            if info["instances"] != 1:
                ctx["notes"].append(f"{name}'s facile has {info['instances']} instances, expected 1")
        log("checking that both servers compute the same outputs")
        ctx["agreement"] = check_agreement(fs_url, tr.url, weights)
        for line in ctx["agreement"]:
            log("  " + line)

        t_meas = time.monotonic()
        servers = (("fpgaserve", fs_url, fs.proc.pid), ("Triton", tr.url, tr.proc.pid))
        quiet_used = 0.0
        plan = [(round_, load, srv) for round_ in range(1, repeats + 1) for load in loads for srv in servers]
        for round_, load, (name, url, pid) in plan:
            for srv_name, srv in (("fpgaserve", fs.proc), ("Triton", tr.proc)):
                if srv.poll() is not None:
                    raise RuntimeError(f"{srv_name} exited with code {srv.returncode} during the benchmark")
            max_wait = max(0.0, min(settings.quiet_wait_s, settings.quiet_budget_s - quiet_used))
            quiet = quiet_wait([fs.proc.pid, tr.proc.pid], max(max_wait, 1.0))  # >= 1 s: previous run drains
            quiet_used += max(0.0, quiet[0] - 1.0)
            r = measure(load, name, url, pid, settings, workdir, round_, quiet)
            results.append(r)
            log(
                f"  -> {r.method}: {fmt(r.col('Inferences/Second'))} infer/s, p50 {fmt(r.col('p50 latency'))} µs, "
                f"p99 {fmt(r.col('p99 latency'))} µs" + (f"; notes: {r.notes}" if r.notes else "")
            )
        ctx["measure_time"] = time.monotonic() - t_meas
    finally:
        if fs is not None:
            rc = fs.stop()
            if rc not in (0, None):
                ctx["notes"].append(f"fpgaserve exited with code {rc} on SIGTERM; log tail: {fs.log()[-800:]}")
        if tr is not None:
            rt.stop_tritonserver(tr.proc)

    ctx.setdefault("measure_time", 0.0)
    if tmp is None:
        ctx["notes"].append(f"raw perf_analyzer output, CSVs and server logs: {workdir}")
    ctx["settings"] = (
        f"time windows `-p {settings.window_ms} -s {settings.stability_pct} -r {settings.max_trials}` "
        f"(perf_analyzer reports the mean of the last 3 windows once they agree within "
        f"{settings.stability_pct} %); if that fails (rc 2), re-measured with "
        f"`-p {settings.window_ms} -s {FALLBACK_STABILITY} -r {FALLBACK_WINDOWS}`, i.e. the mean of "
        f"{FALLBACK_WINDOWS} windows whatever their spread. Before each run the benchmark waits up to "
        f"{settings.quiet_wait_s:.0f} s (at most {settings.quiet_budget_s:.0f} s in total) for other "
        f"processes to use < {BUSY_THRESHOLD} cores"
    )
    ctx["runtime"] = time.monotonic() - t_start
    report = build_report(ctx, results)
    print(report)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report + "\n")
        log(f"wrote {args.out}")
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if all(r.row is not None for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
