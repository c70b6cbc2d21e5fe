"""Running client_examples/*.py as their users run them (tests/protocol/test_client_examples.py,
tests/deployment/test_image.py): a subprocess with ``-u <server>`` that prints ``PASS: <name>``."""

from __future__ import annotations

import subprocess
import sys

from support.server_process import ROOT

EXAMPLES = ROOT / "client_examples"


def run_example(script: str, url: str, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / script), "-u", url, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_pass(proc: subprocess.CompletedProcess, name: str) -> str:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{name} exited with {proc.returncode}:\n{out}"
    assert f"PASS: {name}" in proc.stdout.splitlines(), out
    assert "FAILED" not in out, out
    return proc.stdout
