"""What an instance process costs a csim model: FACILE at batch 4000, hosted vs in-process.

Run from the repository root (the project venv is used automatically if it exists)::

    python tests/benchmarks/bench_csim_process.py              # about 2 min
    python tests/benchmarks/bench_csim_process.py --rounds 8 --requests 40

One fpgaserve (``--fpga-mode csim``) serves two copies of the bundled ``bitstreams/facile``:
``facile_process`` (the default for csim: each instance in an instance process, tensors
through its shared-memory segments) and ``facile_inprocess`` (``instance_process: "false"``:
the C-simulation called in the server's process). Both compile from the same project, so
they load the same cached library. The real tritonclient (gRPC) sends batches of 4000
unit-normal FP32 rows (fixed seed) with 2 requests in flight; rounds alternate between the
two models so that a burst of other work on the machine hits both. Reported per model: the
best and median rows/s over the rounds, and the server's compute time per execution (from
the statistics extension); then the ratio hosted/in-process (target >= 0.9). Each model's
answer is checked bit for bit against the other's first.

Benchmarks never assert timings; exit code 0 when every measurement and check succeeded.
This file is named bench_*.py so pytest never collects it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"
if VENV_PYTHON.exists() and Path(sys.prefix).resolve() != (ROOT / ".venv").resolve():
    os.execv(str(VENV_PYTHON), [str(VENV_PYTHON), *sys.argv])

import argparse  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import tritonclient.grpc as grpcclient  # noqa: E402

sys.path.insert(0, str(ROOT / "tests"))
from support.server_process import BUNDLED_REPO, ServerProcess  # noqa: E402

MODELS = ("facile_process", "facile_inprocess")
BATCH = 4000
IN_FLIGHT = 2


def _repository(root: Path) -> Path:
    repo = root / "repo"
    for name in MODELS:
        shutil.copytree(BUNDLED_REPO / "facile", repo / name)
        config = repo / name / "config.pbtxt"
        text = config.read_text().replace('name: "facile"', f'name: "{name}"')
        if name == "facile_inprocess":
            text += 'parameters {\n  key: "instance_process"\n  value: { string_value: "false" }\n}\n'
        config.write_text(text)
    return repo


def _request(x: np.ndarray) -> list:
    t = grpcclient.InferInput("input", list(x.shape), "FP32")
    t.set_data_from_numpy(x)
    return [t]


def _round(url: str, model: str, x: np.ndarray, requests: int) -> float:
    """rows/s of ``requests`` batches, IN_FLIGHT at a time (one client per sender thread)."""
    per_thread = requests // IN_FLIGHT
    errors: list[BaseException] = []

    def send() -> None:
        try:
            with grpcclient.InferenceServerClient(url) as client:
                inputs = _request(x)
                for _ in range(per_thread):
                    client.infer(model, inputs)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=send) for _ in range(IN_FLIGHT)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return per_thread * IN_FLIGHT * len(x) / elapsed


def _compute_per_execution_ms(client, model: str) -> float:
    stats = client.get_inference_statistics(model).model_stats[0]
    executions = max(stats.execution_count, 1)
    return stats.inference_stats.compute_infer.ns / executions / 1e6


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--requests", type=int, default=20, help="requests per round and model")
    args = p.parse_args()
    x = np.random.default_rng(2018).standard_normal((BATCH, 47)).astype(np.float32)
    with tempfile.TemporaryDirectory(prefix="bench-csim-process-") as tmp:
        root = Path(tmp)
        server = ServerProcess([_repository(root)], "--fpga-mode", "csim", log_path=root / "server.log")
        server.start(timeout=600)
        try:
            with grpcclient.InferenceServerClient(server.url) as client:
                answers = [client.infer(m, _request(x)).as_numpy("output/BiasAdd") for m in MODELS]
                if not np.array_equal(answers[0].view(np.uint32), answers[1].view(np.uint32)):
                    print("FAIL: the hosted and the in-process C-simulation answer differently")
                    return 1
                rates: dict[str, list[float]] = {m: [] for m in MODELS}
                for r in range(args.rounds):
                    order = MODELS if r % 2 == 0 else MODELS[::-1]
                    for model in order:
                        rates[model].append(_round(server.url, model, x, args.requests))
                compute = {m: _compute_per_execution_ms(client, m) for m in MODELS}
        finally:
            server.stop()
    print(f"csim FACILE, batch {BATCH}, {IN_FLIGHT} in flight, {args.rounds} rounds x {args.requests} requests")
    print(f"{'model':<18} {'best rows/s':>12} {'median rows/s':>14} {'compute/exec ms':>16}")
    for m in MODELS:
        print(f"{m:<18} {max(rates[m]):>12.0f} {statistics.median(rates[m]):>14.0f} {compute[m]:>16.2f}")
    best = max(rates[MODELS[0]]) / max(rates[MODELS[1]])
    median = statistics.median(rates[MODELS[0]]) / statistics.median(rates[MODELS[1]])
    print(f"instance process / in-process: {best:.3f} (best), {median:.3f} (median); target >= 0.9")
    return 0


if __name__ == "__main__":
    sys.exit(main())
