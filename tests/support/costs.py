"""An opt-in report of what the suite's time goes to (CPU seconds, not only wall seconds).

Off unless ``FPGASERVE_TEST_COSTS`` names a folder. Then every pytest process of the run
(the workers, the pytest runs nested in tests: they inherit the variable) appends JSON lines
to ``<folder>/<pid>.jsonl``:

* ``phase``: each test's setup, call and teardown: wall seconds, this process's CPU seconds
  and the CPU seconds of the children it reaped in that phase (``resource.getrusage``);
* ``proc``: each subprocess reaped through ``subprocess.Popen`` (``os.wait4``, so its CPU
  includes every descendant it reaped: a server's frontend and instance processes, g++ under
  the C-simulation cache): what it ran (``kind``, ``argv``), its wall and CPU seconds, and the
  test phase it was reaped in;
* ``ready``: each ``ServerProcess`` start, wall seconds to ready and the CPU seconds its
  whole process tree had spent by then (from /proc).

``python tests/support/costs.py <folder>`` sums them up by kind and by module. Used to find
where the suite's CPU goes (docs/testing.md quotes it); no test depends on it.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

ENV = "FPGASERVE_TEST_COSTS"
_OUT: Path | None = Path(os.environ[ENV]) if os.environ.get(ENV) else None
_current = {"nodeid": "", "when": ""}
# the outermost pytest (a serial run, or xdist's controller, whose workers are its children)
# names itself; any other pytest process is nested in a test
_ROOT = int(os.environ.setdefault("FPGASERVE_TEST_COSTS_ROOT", str(os.getpid())))
_NESTED = not (os.getpid() == _ROOT or (os.getppid() == _ROOT and "PYTEST_XDIST_WORKER" in os.environ))
_TICKS = os.sysconf("SC_CLK_TCK")


def enabled() -> bool:
    return _OUT is not None


def record(type_: str, **fields) -> None:
    if _OUT is None:
        return
    fields.update(type=type_, nodeid=_current["nodeid"], when=_current["when"], pid=os.getpid())
    fields["nested"] = _NESTED
    with open(_OUT / f"{os.getpid()}.jsonl", "a") as f:
        f.write(json.dumps(fields) + "\n")


def kind_of(argv: list[str]) -> str:
    text = " ".join(argv)
    base = os.path.basename(argv[0]) if argv else ""
    if "fpgaserve.server.cli" in text or "fpga_sim/serve.py" in text:
        return "fpgaserve"
    if "tritonserver" in text:
        return "tritonserver"
    if "-m pytest" in text or base == "pytest":
        return "pytest"
    if "-m pip" in text or base.startswith("pip") or "-m venv" in text or base == "virtualenv":
        return "pip/venv"
    if argv[1:2] == ["-c"]:
        return "python -c"  # xdist's workers among them
    if base in ("g++", "c++", "gcc", "cc"):
        return "g++"
    if base in ("podman", "docker", "buildah"):
        return "image"
    if "perf_analyzer" in text:
        return "perf_analyzer"
    if "model-analyzer" in text or "model_analyzer" in text:
        return "model-analyzer"
    if "fpgaserve" in text and "pack" in text:
        return "pack"
    return base or "?"


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + sys) of a process and its live descendants, from /proc."""
    total = 0.0
    stack = [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / _TICKS
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    stack.extend(int(c) for c in f.read().split())
        except (OSError, ValueError, IndexError):
            continue
    return total


def _install() -> None:
    original_init = subprocess.Popen.__init__
    original_try_wait = subprocess.Popen._try_wait  # type: ignore[attr-defined]

    def init(self, args, *a, **k):
        self._cost_start = time.monotonic()
        self._cost_argv = [str(x) for x in args] if isinstance(args, (list, tuple)) else [str(args)]
        original_init(self, args, *a, **k)

    def try_wait(self, wait_flags):
        try:
            pid, status, usage = os.wait4(self.pid, wait_flags)
        except ChildProcessError:
            return original_try_wait(self, wait_flags)
        if pid == self.pid:
            argv = getattr(self, "_cost_argv", [])
            record(
                "proc",
                kind=kind_of(argv),
                argv=" ".join(argv)[:300],
                wall=time.monotonic() - getattr(self, "_cost_start", time.monotonic()),
                cpu=usage.ru_utime + usage.ru_stime,
            )
        return pid, status

    subprocess.Popen.__init__ = init  # type: ignore[method-assign]
    subprocess.Popen._try_wait = try_wait  # type: ignore[attr-defined]


if _OUT is not None:
    _OUT.mkdir(parents=True, exist_ok=True)
    _install()


def _cpu(who: int) -> float:
    u = resource.getrusage(who)
    return u.ru_utime + u.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    yield from _phase(item, "setup")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    yield from _phase(item, "call")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    yield from _phase(item, "teardown")


def _phase(item, when: str):
    if _OUT is None:
        yield
        return
    _current.update(nodeid=item.nodeid, when=when)
    t, s, c = time.monotonic(), _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
    yield
    record(
        "phase",
        wall=time.monotonic() - t,
        cpu_self=_cpu(resource.RUSAGE_SELF) - s,
        cpu_children=_cpu(resource.RUSAGE_CHILDREN) - c,
    )
    _current.update(nodeid="", when="")


def pytest_sessionstart(session):
    if _OUT is not None:
        record("session", cpu_self=_cpu(resource.RUSAGE_SELF))


def pytest_sessionfinish(session):
    if _OUT is not None:
        record("session_end", cpu_self=_cpu(resource.RUSAGE_SELF), cpu_children=_cpu(resource.RUSAGE_CHILDREN))


def summarize(folder: Path) -> None:
    rows = [json.loads(line) for f in sorted(folder.glob("*.jsonl")) for line in f.read_text().splitlines()]
    outer = [r for r in rows if not r["nested"]]
    by_kind: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for r in outer:
        if r["type"] == "proc":
            k = by_kind[r["kind"]]
            k[0] += 1
            k[1] += r["cpu"]
            k[2] += r["wall"]
    print("subprocesses of the outer run, by kind: count, CPU s, wall s (CPU includes what they reaped)")
    for kind, (n, cpu, wall) in sorted(by_kind.items(), key=lambda kv: -kv[1][1]):
        print(f"  {kind:16} {n:6d} {cpu:10.1f} {wall:10.1f}")
    ready = [r for r in rows if r["type"] == "ready"]
    if ready:
        print(
            f"ServerProcess starts (all runs, nested too): {len(ready)}, "
            f"{sum(r['cpu'] for r in ready):.1f} CPU s to ready, {sum(r['wall'] for r in ready):.1f} wall s"
        )
        for r in sorted(ready, key=lambda r: -r["cpu"])[:15]:
            print(f"  {r['cpu']:6.1f} CPU s {r['wall']:6.1f} s  {r['nodeid'] or '(nested)'}  {r.get('argv', '')[:160]}")
    by_module: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0])
    for r in outer:
        if r["type"] == "phase":
            m = by_module[r["nodeid"].split("::")[0]]
            m[0] += r["wall"]
            m[1] += r["cpu_self"]
            m[2] += r["cpu_children"]
        elif r["type"] == "ready":
            by_module[r["nodeid"].split("::")[0]][3] += 1
    total = [sum(m[i] for m in by_module.values()) for i in range(4)]
    print(f"modules: wall s, own CPU s, children's CPU s, server starts (total {total})")
    for name, (wall, cs, cc, n) in sorted(by_module.items(), key=lambda kv: -(kv[1][1] + kv[1][2]))[:60]:
        print(f"  {cs + cc:8.1f} {wall:8.1f} {cs:8.1f} {cc:8.1f} {int(n):4d}  {name}")


if __name__ == "__main__":
    summarize(Path(sys.argv[1]))
