#!/usr/bin/env python3
"""fpgaserve replicas behind nginx and HAProxy: throughput for 1 vs 2 replicas, same run.

    python tests/benchmarks/bench_replicas.py [--quick] [--out report.md] [--workdir DIR]
                                              [--proxies nginx,haproxy] [--rounds N]

Configurations, each measured with perf_analyzer -i grpc (one at a time, never two under load):
* direct      - perf_analyzer straight to replica 0: the zero-proxy reference;
* <proxy>-1   - through the proxy, one replica behind it (the proxy's own cost);
* <proxy>-2   - through the proxy, two replicas behind it (does a second replica help?).
The proxies run the production configs from deploy/ (rendered by tests/support/lb_proxies.py, as in
tests/deployment/test_load_balancer.py). The replicas serve tests/models and bitstreams/ with FACILE in
the numpy emulation of its firmware (--fpga-mode numpy).

Loads: ``simple`` batch 1 at concurrency 16 (per-request cost: gRPC, proxy hops), and
``facile`` batch 16000 at concurrency 4 (SonicTriton-sized events, ~3 MB each, compute-heavy).
Windows of --window-ms (default 3000, --quick 2000) that must agree within 25 %, else the
mean of 3 windows; --rounds rounds (default 2, --quick 1) visiting every configuration in
turn, best round reported. Before each run it waits (bounded) for other processes to go quiet.

Reports infer/s (rows/s for batch 16000), p50/p99, the ratios to direct and 2 vs 1 replica,
how the requests split over the replicas (their ModelStatistics, read directly), and the CPU
used by the replicas, the proxy, perf_analyzer and other processes. The machine these
scripts usually run on has 2 cores: perf_analyzer, the proxy and the replicas share them, so
a second replica can only help where one replica leaves a core idle.
Exit code 0 when every configuration was measured, 1 otherwise; nothing is asserted about speed.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_facile_vs_triton as common  # noqa: E402  (re-execs under the project venv if needed)

# isort: split
import numpy as np  # noqa: E402
import tritonclient.grpc as grpcclient  # noqa: E402

from support.lb_proxies import PROXIES, ProxyProcess, upstream_of  # noqa: E402
from support.server_process import BUNDLED_REPO, CONFORMANCE_REPO, ServerProcess  # noqa: E402
from support.tools import _locate_perf_analyzer  # noqa: E402

log = common.log
fmt = common.fmt


@dataclass(frozen=True)
class Load:
    model: str
    batch: int
    concurrency: int

    @property
    def label(self) -> str:
        return f"{self.model} b{self.batch} c{self.concurrency}"


LOADS = (Load("simple", 1, 16), Load("facile", 16000, 4))


@dataclass
class Target:
    name: str  # direct, nginx-1, nginx-2, haproxy-1, haproxy-2
    url: str
    replicas: list[ServerProcess]  # the replicas behind it
    proxy: ProxyProcess | None = None

    @property
    def pids(self) -> list[int]:
        return [r.proc.pid for r in self.replicas] + ([self.proxy.proc.pid] if self.proxy else [])


@dataclass
class Run:
    target: str
    load: Load
    round: int
    infer_s: float | None = None
    p50_us: float | None = None
    p99_us: float | None = None
    split: list[int] = field(default_factory=list)  # successes per replica (all replicas)
    cpu: dict = field(default_factory=dict)  # cores used: replicas, proxy, pa, other
    note: str = ""
    cmd: str = ""


def check_results(url: str) -> None:
    """Before measuring: the target answers correctly (simple's add/sub, FACILE's shape)."""
    c = grpcclient.InferenceServerClient(url)
    try:
        rng = np.random.default_rng(0)
        a = rng.integers(-100, 100, (8, 16), dtype=np.int32)
        b = rng.integers(-100, 100, (8, 16), dtype=np.int32)
        inputs = []
        for name, arr in (("INPUT0", a), ("INPUT1", b)):
            t = grpcclient.InferInput(name, [8, 16], "INT32")
            t.set_data_from_numpy(arr)
            inputs.append(t)
        r = c.infer("simple", inputs)
        if not (np.array_equal(r.as_numpy("OUTPUT0"), a + b) and np.array_equal(r.as_numpy("OUTPUT1"), a - b)):
            raise SystemExit(f"{url}: wrong answer from simple")
        x = rng.standard_normal((16000, 47), dtype=np.float32)
        t = grpcclient.InferInput("input", [16000, 47], "FP32")
        t.set_data_from_numpy(x)
        y = c.infer("facile", [t]).as_numpy("output/BiasAdd")
        if y.shape != (16000, 1) or not np.all(np.isfinite(y)):
            raise SystemExit(f"{url}: wrong answer from facile: shape {y.shape}")
    finally:
        c.close()


def successes(server: ServerProcess, model: str) -> int:
    c = grpcclient.InferenceServerClient(server.url)
    try:
        return c.get_inference_statistics(model).model_stats[0].inference_stats.success.count
    finally:
        c.close()


def settled_successes(servers: list[ServerProcess], model: str) -> list[int]:
    last, same = [successes(s, model) for s in servers], 0
    deadline = time.monotonic() + 15
    while same < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
        now = [successes(s, model) for s in servers]
        same, last = (same + 1 if now == last else 0), now
    return last


def measure(
    pa: str,
    target: Target,
    load: Load,
    all_replicas: list[ServerProcess],
    workdir: Path,
    window_ms: int,
    round_: int,
    quiet_s: float,
) -> Run:
    run = Run(target.name, load, round_)
    waited, other = common.quiet_wait(target.pids, quiet_s)
    if other >= common.BUSY_THRESHOLD:
        run.note = f"machine busy before the run ({other:.2f} other cores after {waited:.0f} s); "
    before = settled_successes(all_replicas, load.model)
    stem = f"{target.name}-{load.model}-b{load.batch}-c{load.concurrency}-r{round_}"
    csv_path = workdir / f"{stem}.csv"
    # -x 1: behind a balancer PA's statistics snapshots come from either replica, and without
    # an explicit version it may exit 99 ("failed to find the requested model version").
    base = common.pa_command(load.model, target.url, load.batch, load.concurrency, exe=pa, version="1")
    base += ["-f", str(csv_path)]
    row = None
    for extra, note in common.pa_tries(window_ms):
        cmd = base + extra
        run.cmd = shlex.join(cmd)
        csv_path.unlink(missing_ok=True)
        log(f"round {round_}: {load.label} via {target.name}")
        att, used = common.run_pa(cmd, 10 * window_ms / 1000 * 2 + 120, target.pids)
        wall = att.wall_s
        (workdir / f"{stem}.txt").write_text(att.output)
        replicas_cpu = sum(used[r.proc.pid] for r in target.replicas)
        proxy_cpu = used[target.proxy.proc.pid] if target.proxy else 0.0
        run.cpu = {
            "replicas": replicas_cpu / wall,
            "proxy": proxy_cpu / wall,
            "pa": att.pa_cpu_s / wall,
            "other": att.other_cpu_s / wall,
        }
        row = common._read_csv(csv_path) if att.rc == 0 else None
        if row is not None:
            run.note += note
            break
    if row is None:
        tail = " | ".join(att.output.strip().splitlines()[-3:])
        run.note += f"FAILED (rc {att.rc}): {tail}"
        return run
    run.infer_s = common.col(row, "Inferences/Second")
    run.p50_us, run.p99_us = common.col(row, "p50 latency"), common.col(row, "p99 latency")
    after = settled_successes(all_replicas, load.model)
    run.split = [a - b for a, b in zip(after, before)]
    return run


def ratio(a, b) -> str:
    return "n/a" if a is None or not b else f"{a / b:.2f}x"


def report(best: dict, loads, targets: list[str], runs: list[Run], wall_s: float, rounds: int, window_ms: int) -> str:
    out = ["# fpgaserve replicas behind a load balancer", ""]
    out += [f"- {k}: {v}" for k, v in common.machine_info() if k != "tritonserver"]
    out += [
        f"- proxies: {proxy_versions()}",
        f"- {rounds} round(s) over every configuration, perf_analyzer windows of {window_ms} ms; best round shown",
        f"- benchmark wall time: {wall_s:.0f} s",
        "",
    ]
    out += [
        "| load | via | replicas | infer/s | p50 ms | p99 ms | vs direct | 2 vs 1 replica | requests per replica | "
        "cores: replicas / proxy / PA / other | note |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---|---|",
    ]
    for load in loads:
        direct = best.get(("direct", load))
        for t in targets:
            r = best.get((t, load))
            if r is None:
                continue
            n = 1 if t == "direct" or t.endswith("-1") else 2
            one = best.get((t[:-2] + "-1", load)) if t.endswith("-2") else None
            total = sum(r.split) or 0
            split = " / ".join(f"{100 * k / total:.0f} %" for k in r.split[:n]) if total else "n/a"
            cores = " / ".join(f"{r.cpu.get(k, 0):.2f}" for k in ("replicas", "proxy", "pa", "other"))
            out.append(
                f"| {load.label} | {t.split('-')[0]} | {n} | {fmt(r.infer_s)} | {fmt(r.p50_us and r.p50_us / 1000, 2)} | "
                f"{fmt(r.p99_us and r.p99_us / 1000, 2)} | {ratio(r.infer_s, direct.infer_s if direct else None)} | "
                f"{ratio(r.infer_s, one.infer_s) if one else ''} | {split} | {cores} | {r.note} |"
            )
    if rounds > 1:
        out += [
            "",
            "Every round (infer/s):",
            "",
            "| load | via | " + " | ".join(f"round {i + 1}" for i in range(rounds)) + " |",
            "|---|---|" + "---:|" * rounds,
        ]
        for load in loads:
            for t in targets:
                vals = [
                    next((fmt(r.infer_s) for r in runs if r.target == t and r.load == load and r.round == i + 1), "")
                    for i in range(rounds)
                ]
                out.append(f"| {load.label} | {t} | " + " | ".join(vals) + " |")
    out += ["", "## perf_analyzer commands", "", "```"]
    out += sorted({r.cmd for r in runs})
    out += ["```"]
    return "\n".join(out) + "\n"


def proxy_versions() -> str:
    parts = []
    for exe, flag in (("nginx", "-v"), ("haproxy", "-v")):
        try:
            p = subprocess.run([exe, flag], capture_output=True, text=True, timeout=10)
            parts.append((p.stdout + p.stderr).strip().splitlines()[0])
        except (OSError, IndexError, subprocess.SubprocessError):
            parts.append(f"{exe}: not installed")
    return "; ".join(parts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="shorter windows, one round")
    ap.add_argument("--out", type=Path, help="also write the markdown report here")
    ap.add_argument("--workdir", type=Path, help="keep logs, configs, perf_analyzer output here (default: a temp dir)")
    ap.add_argument("--proxies", default=",".join(PROXIES), help="comma-separated subset of %(default)s")
    ap.add_argument("--rounds", type=int, help="rounds over every configuration (default 2, --quick 1)")
    ap.add_argument("--window-ms", type=int, help="perf_analyzer measurement window (default 3000, --quick 2000)")
    args = ap.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 2)
    window = args.window_ms or (2000 if args.quick else 3000)
    quiet_s = 5 if args.quick else 20
    pa, why = _locate_perf_analyzer()
    if pa is None:
        sys.exit(f"perf_analyzer unavailable: {why}")
    kinds = [k for k in args.proxies.split(",") if k]
    for k in kinds:
        if k not in PROXIES:
            sys.exit(f"unknown proxy {k!r} (known: {', '.join(PROXIES)})")
        if shutil.which(k) is None and not Path(f"/usr/sbin/{k}").exists():
            sys.exit(f"{k} is not installed (apt-get install {k})")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="fpgaserve-bench-replicas-"))
    workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    replicas: list[ServerProcess] = []
    proxies: list[ProxyProcess] = []
    runs: list[Run] = []
    try:
        for i in range(2):
            replicas.append(
                ServerProcess(
                    [CONFORMANCE_REPO, BUNDLED_REPO], "--fpga-mode", "numpy", log_path=workdir / f"replica-{i}.log"
                ).start()
            )
        targets = [Target("direct", replicas[0].url.replace("localhost", "127.0.0.1"), replicas[:1])]
        for kind in kinds:
            for n in (1, 2):
                p = ProxyProcess(kind, [upstream_of(r) for r in replicas[:n]], workdir / f"{kind}-{n}").start()
                proxies.append(p)
                targets.append(Target(f"{kind}-{n}", p.url, replicas[:n], p))
        for t in targets:
            check_results(t.url)
        log(f"targets: {', '.join(f'{t.name} {t.url}' for t in targets)}; work dir {workdir}")
        for rnd in range(1, rounds + 1):
            for load in LOADS:
                for t in targets:
                    runs.append(measure(pa, t, load, replicas, workdir, window, rnd, quiet_s))
    finally:
        for p in proxies:
            p.stop()
        for r in replicas:
            r.stop()
    best: dict = {}
    for r in runs:
        k = (r.target, r.load)
        if k not in best or (r.infer_s or -1) > (best[k].infer_s or -1):
            best[k] = r
    text = report(best, LOADS, [t.name for t in targets], runs, time.monotonic() - t0, rounds, window)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0 if all(r.infer_s for r in best.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
