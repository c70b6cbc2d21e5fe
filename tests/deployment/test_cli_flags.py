"""The flag declarations (server/flags.py) against what is built from them, in-process and fast.

For every declared flag: the parser accepts it with a value of its type, the value lands in
its ``ServerOptions`` field (or, for an ignored tritonserver flag, in ``ignored_flags_used``
and nowhere else), and the generated reference table has its row. The options object's
defaults are the command line's. Triton's claim of each flag (``triton=True``) is checked
against tritonserver's own option list.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import time

import pytest

from fpgaserve.server import flags
from fpgaserve.server.cli import IGNORED_TRITON_FLAGS, build_parser, ignored_flags_used, options_from_args
from fpgaserve.server.log_settings import make_formatter

BASE = ["--model-repository", "r"]

# tritonserver's long options, from src/command_line_parser.cc of triton-inference-server/server
# at commit e1db8a603d863b1317ee859bdeea2be19959462e (2026-08-19), --help and --version aside.
TRITONSERVER_FLAGS = frozenset(
    """allow-client-shm allow-cpu-metrics allow-gpu-metrics allow-grpc allow-http allow-metrics allow-sagemaker
    allow-vertex-ai backend-config backend-directory buffer-manager-thread-count cache-config cache-directory
    cuda-memory-pool-byte-size cuda-virtual-address-size disable-auto-complete-config enable-peer-access
    exit-on-error exit-timeout-secs grpc-address grpc-header-forward-pattern grpc-http2-max-ping-strikes
    grpc-http2-max-pings-without-data grpc-http2-min-recv-ping-interval-without-data grpc-infer-allocation-pool-size
    grpc-infer-response-compression-level grpc-infer-thread-count grpc-keepalive-permit-without-calls
    grpc-keepalive-time grpc-keepalive-timeout grpc-max-connection-age grpc-max-connection-age-grace
    grpc-max-response-pool-size grpc-port grpc-restricted-protocol grpc-root-cert grpc-server-cert grpc-server-key
    grpc-use-ssl grpc-use-ssl-mutual host-policy http-address http-header-forward-pattern http-max-input-size
    http-port http-restricted-api http-thread-count id load-model log-error log-file log-format log-info
    log-verbose log-warning metrics-address metrics-config metrics-interval-ms metrics-port
    min-supported-compute-capability model-config-name
    model-control-mode model-load-gpu-limit model-load-retry-count model-load-thread-count model-namespacing
    model-repository model-store pinned-memory-pool-byte-size rate-limit rate-limit-resource repoagent-directory
    repository-poll-secs response-cache-byte-size reuse-grpc-port reuse-http-port sagemaker-port
    sagemaker-safe-port-range sagemaker-thread-count strict-model-config strict-readiness trace-config trace-count
    trace-file trace-level trace-log-frequency trace-rate vertex-ai-default-model vertex-ai-port
    vertex-ai-thread-count""".split()  # noqa: SIM905 (a long list of names reads better as text)
)
# tritonserver flags fpgaserve does not accept (an error, as any unknown flag): none
NOT_ACCEPTED: set[str] = set()

# values a flag's type cannot derive a sensible sample from: text the server would refuse later
SAMPLES = {
    "--backend-config": "hls4ml,kernel-timeout-secs=7",
    "--model-repository": "/models",
    "--grpc-restricted-protocol": "health:k=v",
    "--http-restricted-api": "health:k=v",
    "--engine-processes": "2",
}


def _sample(flag: flags.Flag) -> tuple[list[str], object]:
    """(argv giving ``flag`` a value other than its default, the value the option should then have)."""
    if flag.action == "store_true":
        return [flag.name], True
    if flag.choices:
        text = next(c for c in flag.choices if c != flag.default)
    elif flag.name in SAMPLES:
        text = SAMPLES[flag.name]
    elif flag.type is flags.triton_bool:
        text = "false" if flag.default else "true"
    elif flag.type is flags.process_count:
        text = str(flags.auto_frontend_processes() % 256 + 1)  # not what auto means here
    elif flag.type in (int, flags.int_or_bool):
        text = "3"
    elif flag.type is float:
        text = "2.5"
    else:
        text = "x"
    value = flag.type(text) if flag.type is not None else text
    return [f"{flag.name}={text}"], ([value] if flag.action == "append" else value)


def _every_flag() -> list[tuple[str, flags.Flag]]:
    return [(f.name, flag) for f, fs in flags.option_flags() for flag in fs]


def test_defaults_of_the_options_object_are_the_command_lines():
    parsed = options_from_args(build_parser().parse_args(BASE))
    assert parsed == flags.ServerOptions(model_repositories=["r"])
    # and nothing of the ignored flags is set when they are not given
    assert ignored_flags_used(build_parser().parse_args(BASE)) == []


@pytest.mark.parametrize("field,flag", _every_flag(), ids=lambda x: x.name if isinstance(x, flags.Flag) else x)
def test_every_flag_parses_into_its_option(field, flag):
    argv, value = _sample(flag)
    args = build_parser().parse_args([*BASE, *argv] if flag.name != "--model-repository" else argv)
    options = options_from_args(args)
    default = options_from_args(build_parser().parse_args(BASE))
    got = getattr(options, field)
    assert got != getattr(default, field), f"{flag.name} left {field} at its default"
    if flag.name == "--backend-config":
        assert got["hls4ml"]["kernel-timeout-secs"] == "7"
    elif flag.name == "--fpga-mode":
        assert got == {"hls4ml": {"fpga-mode": value}}
    elif flag.name in ("--disable-auto-complete-config", "--strict-model-config"):
        assert got is False  # either one disables auto-completion
    elif flag.dest == "trace_config":  # a deprecated --trace-<x> VALUE: the setting it stands for
        assert got == [flag.type("x")] and got[0].endswith("=x")
    else:
        assert got == value
    # every other field keeps its default: one flag, one option
    for other in dataclasses.fields(options):
        if other.name != field and not (flag.name == "--grpc-use-ssl-mutual" and other.name == "grpc_use_ssl"):
            assert getattr(options, other.name) == getattr(default, other.name), (flag.name, other.name)


@pytest.mark.parametrize("flag", flags.IGNORED, ids=lambda f: f.name)
def test_every_ignored_flag_is_accepted_and_sets_nothing(flag):
    args = build_parser().parse_args([*BASE, flag.name, "1", f"{flag.name}=2"])
    assert ignored_flags_used(args) == [(flag.name, flag.ignored)]
    assert options_from_args(args) == options_from_args(build_parser().parse_args(BASE))
    assert flag.ignored and IGNORED_TRITON_FLAGS[flag.name] == (True, flag.ignored)


def test_declarations_are_complete_and_consistent():
    fields = dataclasses.fields(flags.ServerOptions)
    spellings = [s for flag in flags.all_flags() for s in flag.spellings]
    assert len(spellings) == len(set(spellings)), "a spelling declared twice"
    for f in fields:
        fs = f.metadata["flags"]
        assert fs and all(flag.ignored is None for flag in fs), f.name
        for flag in fs:
            assert flag.section in flags.SECTIONS and flag.help and flag.type_name, flag.name
    # the parser has exactly the declared spellings (and argparse's -h/--help, --version)
    parsed = {s for action in build_parser()._actions for s in action.option_strings}
    assert parsed == set(spellings) | {"-h", "--help", "--version"}


def test_triton_spellings_are_tritonservers():
    ours = {s for flag in flags.all_flags() for s in flag.spellings}
    for flag in flags.all_flags():
        for spelling in flag.spellings:
            assert (spelling[2:] in TRITONSERVER_FLAGS) is flag.triton, spelling
    missing = {"--" + name for name in TRITONSERVER_FLAGS} - ours
    assert missing == NOT_ACCEPTED


def test_reference_table_has_a_row_per_flag():
    page = flags.reference_markdown()
    rows = [line for line in page.splitlines() if line.startswith("| `--")]
    assert len(rows) == len(flags.all_flags())
    for flag, row in zip(flags.all_flags(), rows, strict=True):
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        assert cells[0] == ", ".join(f"`{s}`" for s in flag.spellings)
        if flag.ignored:
            assert cells[1] == flags._cell(flag.ignored)
        else:
            assert len(cells) == 5, row  # a pipe in a help text is escaped, not a new cell
            assert cells[3] == ("yes" if flag.triton else "fpgaserve only")
    # spot checks of the rendering: types, defaults, escaping
    assert "| `--grpc-port` | integer | `8001` | yes |" in page
    assert "| `--allow-client-shm` | bool | `false` | yes |" in page
    assert "| `--model-repository`, `--model-store` | string `PATH` (repeatable) | required | yes |" in page
    assert "| `--frontend-processes` | integer or auto `N\\|auto` | `auto` | fpgaserve only |" in page
    assert "mode=triton\\|opentelemetry" in page and "&lt;key&gt;: &lt;value&gt;" in page
    assert "| `--cuda-memory-pool-byte-size` | no GPU |" in page
    assert "| `--grpc-keepalive-time` | integer `MS` | `7200000` | yes |" in page


@pytest.mark.parametrize("tz", ["Asia/Kolkata", "America/New_York"])
@pytest.mark.parametrize("log_format,expected", [("ISO8601", "2024-03-01T12:34:56Z I"), ("default", "I0301 12:34:56")])
def test_log_timestamps_are_utc_as_tritonservers(monkeypatch, tz, log_format, expected):
    """A ``Z`` time must be UTC whatever the local zone (it was local time with a Z)."""
    monkeypatch.setenv("TZ", tz)
    time.tzset()
    try:
        assert time.localtime(0).tm_hour != 0  # the zone really is not UTC here
        record = logging.LogRecord("fpgaserve", logging.INFO, __file__, 1, "hello", None, None)
        record.created = 1709296496.25  # 2024-03-01 12:34:56.25 UTC
        assert make_formatter(log_format).format(record).startswith(expected)
    finally:
        monkeypatch.undo()
        time.tzset()
    assert os.environ.get("TZ") != tz


def test_options_from_args_names_a_converter_or_copies():
    """An option with several flags computes its value (a converter); one flag is a copy."""
    for f, fs in flags.option_flags():
        convert = f.metadata["convert"]
        shared = {flag.attr for flag in fs}
        if len(shared) > 1:
            assert convert is not None, f"{f.name} is set by {len(fs)} flags and names no converter"
    ns = argparse.Namespace(backend_config=["onnxruntime,x=1"], fpga_mode="csim")
    assert flags._backend_config(ns) == {"onnxruntime": {"x": "1"}, "hls4ml": {"fpga-mode": "csim"}}


def test_mkdocs_hook_generates_the_reference_page(tmp_path):
    """docs/hooks/cli_reference.py puts reference_markdown() in a real (strict) mkdocs build as
    cli.md, replacing a hand-written one."""
    pytest.importorskip("mkdocs")
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    from support.server_process import ROOT

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "cli.md").write_text("# stale\n")
    (tmp_path / "mkdocs.yml").write_text(
        "site_name: t\ntheme: {name: mkdocs}\nmarkdown_extensions: [tables]\n"
        f"hooks: [{ROOT / 'docs' / 'hooks' / 'cli_reference.py'}]\n"
    )
    config = load_config(str(tmp_path / "mkdocs.yml"), strict=True)
    build(config)
    page = (tmp_path / "site" / "cli" / "index.html").read_text()
    assert "stale" not in page and "Command-line reference" in page
    assert "<td><code>--grpc-port</code></td>" in page
    assert page.count("<tr>\n<td><code>--") == len(flags.all_flags())  # a table row per flag
