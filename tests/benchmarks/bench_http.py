#!/usr/bin/env python3
"""HTTP/REST throughput: fpgaserve's HTTP vs fpgaserve's gRPC vs the real Triton 2.51's HTTP.

Run from the repository root (the project venv is used automatically if it exists)::

    python tests/benchmarks/bench_http.py                 # full run, ~10 min
    python tests/benchmarks/bench_http.py --quick         # shorter windows, one round
    python tests/benchmarks/bench_http.py --frontend-processes 2 --out http.md

The same setup as bench_facile_vs_triton.py (whose helpers it uses): fpgaserve serves
``bitstreams/facile`` with the float ONNX network (``--fpga-mode onnx``), Triton the same
weights through its Python backend, each with one instance; a batch-1 and a batch-16000
request must agree to 1e-5 first. The bundled FACILE config has ``dynamic_batching`` (Triton's
has not): it cannot merge 16000-row requests (max_batch_size 16384), and the batch-1 target
compares fpgaserve's two protocols on the same server, so both comparisons are like for like
(perf_analyzer's execution counts then differ from its request counts at batch 1, noted). Then ``perf_analyzer`` runs
against one server and protocol at a time (binary tensors, synchronous API) for:

* batch 1 @ concurrency 64 -- target: fpgaserve HTTP >= 0.8 x fpgaserve gRPC;
* batch 16000 @ concurrency 4 -- target: fpgaserve HTTP >= 1.5 x Triton HTTP.

Time windows, the unstable-measurement fallback, the wait for a quiet machine and the best
of ``--repeat`` rounds are bench_facile_vs_triton.py's. The report is a markdown table with
both ratios, measured in the same run, and the exact perf_analyzer command lines.

This file is named bench_*.py so pytest never collects it.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_facile_vs_triton as bf  # (re-execs under the project venv if needed; puts tests/ on the path)

LOADS = (bf.Load("b1c64", 1, 64), bf.Load("b16000c4", 16000, 4), bf.Load("b1c1", 1, 1))
DEFAULT_LOADS = ("b1c64", "b16000c4")
# (label, protocol, server key)
SERIES = (("fpgaserve HTTP", "http", "fs"), ("fpgaserve gRPC", "grpc", "fs"), ("Triton HTTP", "http", "tr"))


def start_fpgaserve(workdir: Path, frontend_processes: int):
    args = ["--fpga-mode", "onnx", f"--frontend-processes={frontend_processes}"]
    server = bf.ServerProcess([bf.BUNDLED_REPO], *args, log_path=workdir / "fpgaserve.log")
    for attr in ("grpc_port", "http_port", "metrics_port"):
        if getattr(server, attr) in bf.FORBIDDEN_PORTS:
            setattr(server, attr, bf._unforbidden_port())
    server.start(timeout=120)
    return server


def _ratio(a, b) -> str:
    return f"{a / b:.2f}x" if a and b else "n/a"


def report(ctx: dict, best: dict) -> str:
    lines = [
        "# HTTP benchmark: fpgaserve HTTP vs fpgaserve gRPC vs Triton HTTP (FACILE)",
        "",
        f"{ctx['date']}; fpgaserve with {ctx['frontend_processes']} frontend process(es); "
        f"{'quick' if ctx['quick'] else 'full'} settings, best of {ctx['repeats']} round(s); "
        f"measurement {ctx['measure_time']:.0f} s.",
        "",
        "| load | fpgaserve HTTP | fpgaserve gRPC | Triton HTTP | HTTP / Triton HTTP | HTTP / fpgaserve gRPC | target |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    targets = {"b1c64": ("HTTP / gRPC", 0.8), "b16000c4": ("HTTP / Triton HTTP", 1.5)}
    for load in ctx["loads"]:
        thr = {label: (best.get((load.key, label)) or None) for label, _, _ in SERIES}
        v = {k: (r.col("Inferences/Second") if r else None) for k, r in thr.items()}
        vs_triton = _ratio(v["fpgaserve HTTP"], v["Triton HTTP"])
        vs_grpc = _ratio(v["fpgaserve HTTP"], v["fpgaserve gRPC"])
        target = ""
        if load.key in targets:
            name, want = targets[load.key]
            got = (
                v["fpgaserve HTTP"] / v["fpgaserve gRPC"]
                if name == "HTTP / gRPC" and v["fpgaserve HTTP"] and v["fpgaserve gRPC"]
                else v["fpgaserve HTTP"] / v["Triton HTTP"]
                if v["fpgaserve HTTP"] and v["Triton HTTP"]
                else None
            )
            target = f"{name} >= {want}: " + ("n/a" if got is None else ("met" if got >= want else "NOT met"))
        cells = [bf.fmt(v[label]) for label, _, _ in SERIES]
        lines.append(f"| {load.label} | " + " | ".join(cells) + f" | {vs_triton} | {vs_grpc} | {target} |")
    lines += ["", "Throughput in inferences/s (rows/s); p50 latency (µs):", ""]
    for load in ctx["loads"]:
        parts = []
        for label, _, _ in SERIES:
            r = best.get((load.key, label))
            parts.append(f"{label} {bf.fmt(r.col('p50 latency')) if r else 'n/a'}")
        lines.append(f"* {load.label}: " + ", ".join(parts))
    lines += ["", "perf_analyzer commands (last attempt of each best run):", ""]
    for (key, label), r in sorted(best.items()):
        if r.final:
            lines.append(f"* {key} {label}: `{shlex.join(r.final.cmd[1:])}`")
    notes = [f"{k} {label}: {n}" for (k, label), r in sorted(best.items()) for n in r.notes] + ctx["notes"]
    notes.append(
        "fpgaserve's bundled facile has dynamic_batching (Triton's has not): batch-1 requests may be "
        "batched together, so 'inference count != execution count' notes are expected there"
    )
    if notes:
        lines += ["", "Notes:", ""] + [f"* {n}" for n in notes]
    lines += ["", "Machine:", ""] + [f"* {k}: {v}" for k, v in ctx["machine"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="shorter windows, one round")
    ap.add_argument("--out", type=Path, help="also write the markdown report here")
    ap.add_argument("--workdir", type=Path, help="keep logs and raw perf_analyzer output here")
    ap.add_argument("--loads", nargs="*", choices=[ld.key for ld in LOADS], help="default: b1c64 b16000c4")
    ap.add_argument("--repeat", type=int, help="rounds (default 2 full, 1 quick); the best round is reported")
    ap.add_argument("--frontend-processes", type=int, default=1, help="fpgaserve's --frontend-processes")
    ap.add_argument("--window-ms", type=int, help="override perf_analyzer's -p (measurement window)")
    args = ap.parse_args(argv)

    settings = bf.QUICK if args.quick else bf.FULL
    if args.window_ms:
        settings = bf.Settings(**{**settings.__dict__, "window_ms": args.window_ms})
    loads = [ld for ld in LOADS if ld.key in (args.loads or DEFAULT_LOADS)]
    repeats = args.repeat or settings.repeats
    ctx: dict = {
        "quick": args.quick,
        "notes": bf.install_tools(),
        "loads": loads,
        "repeats": repeats,
        "frontend_processes": args.frontend_processes,
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": bf.machine_info(),
    }
    tmp = None
    if args.workdir:
        workdir = args.workdir.resolve()
        workdir.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.mkdtemp(prefix="bench-http-")
        workdir = Path(tmp)
    weights = bf.convert_weights(bf.FACILE_DIR / "1" / "weights.npz", workdir / "facile_weights.npz")
    fs = tr = None
    results = []
    t0 = time.monotonic()
    try:
        bf.log("starting fpgaserve")
        fs = start_fpgaserve(workdir, args.frontend_processes)
        bf.log("starting tritonserver (Python backend)")
        tr = bf.start_triton(workdir, workdir / "facile_weights.npz")
        for line in bf.check_agreement(f"127.0.0.1:{fs.grpc_port}", tr.url, weights):
            bf.log("  " + line)
        urls = {
            ("fs", "http"): f"127.0.0.1:{fs.http_port}",
            ("fs", "grpc"): f"127.0.0.1:{fs.grpc_port}",
            ("tr", "http"): f"127.0.0.1:{tr.http_port}",
        }
        pids = {"fs": fs.proc.pid, "tr": tr.proc.pid}
        for round_ in range(1, repeats + 1):
            for load in loads:
                for label, protocol, key in SERIES:
                    quiet = bf.quiet_wait(list(pids.values()), max(settings.quiet_wait_s, 1.0))
                    r = bf.measure(
                        load, label, urls[(key, protocol)], pids[key], settings, workdir, round_, quiet, protocol
                    )
                    results.append(r)
                    bf.log(f"  -> {label} {load.label}: {bf.fmt(r.col('Inferences/Second'))} infer/s ({r.method})")
    finally:
        if fs is not None:
            fs.stop()
        if tr is not None:
            bf.rt.stop_tritonserver(tr.proc)
    ctx["measure_time"] = time.monotonic() - t0
    best: dict = {}
    for r in results:
        k = (r.load.key, r.server)
        old = best.get(k)
        if (
            r.row is not None
            and (old is None or (r.col("Inferences/Second") or 0) > (old.col("Inferences/Second") or 0))
        ) or old is None:
            best[k] = r
    text = report(ctx, best)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if all(r.row is not None for r in best.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
