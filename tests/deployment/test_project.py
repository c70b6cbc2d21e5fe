"""Project-level promises: CI runs the README's test command; the CLI documents its flags;
installed import names are namespaced."""

from __future__ import annotations

import re
import subprocess
import sys

from support.server_process import ROOT

FLAGS = [
    "--model-repository",
    "--grpc-port",
    "--http-port",
    "--metrics-port",
    "--model-control-mode",
    "--load-model",
    "--log-verbose",
    "--exit-timeout-secs",
    "--grpc-max-message-size",
    "--repository-poll-secs",
    "--strict-readiness",
]


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Fresh machine", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)\n```", section, re.S)


def test_readme_has_exactly_two_setup_commands():
    commands = _readme_commands()
    assert len(commands) == 2, commands
    serve, test = commands
    assert "fpgaserve --model-repository bitstreams" in serve
    assert "pytest" in test


def test_ci_runs_the_readme_test_command():
    test_command = _readme_commands()[1].strip()
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_command in [line.strip() for line in ci]


def test_help_explains_every_flag():
    out = subprocess.run(
        [sys.executable, "-m", "fpgaserve.server.cli", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for flag in FLAGS:
        assert flag in out, flag


def test_import_names_are_namespaced():
    import fpgaserve.backends
    import fpgaserve.protos
    import fpgaserve.server  # noqa: F401

    code = "import importlib.util as u; print(u.find_spec('server'), u.find_spec('backends'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", check=True).stdout
    assert out.strip() == "None None"


def test_taken_port_is_a_clear_error_not_a_traceback(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "fpgaserve.server.cli",
                "--model-repository",
                str(tmp_path),
                "--grpc-address",
                "127.0.0.1",
                "--grpc-port",
                str(port),
                "--http-port",
                "-1",
                "--metrics-port",
                "-1",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert r.returncode == 1
    assert f"cannot bind gRPC to 127.0.0.1:{port}" in r.stderr
    assert "Traceback" not in r.stderr
