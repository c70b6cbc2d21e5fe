"""The command line as data: every flag of ``fpgaserve`` declared once, next to the option it sets.

Why: a flag used to touch three places (the options dataclass, a hand-written argparse
parser, and the copy from one to the other), and the README's flag table was a fourth (now
the docs' command-line page, rendered from here). Here
each ``ServerOptions`` field *is* the declaration: its annotation is the option's Python type,
and ``option(Flag(...), ...)`` gives the flag(s) that set it (spelling, parser type, default,
help, section, whether tritonserver has it) and, where setting it is more than a copy, the
converter that computes it from the parsed command line. Everything else is derived:

* ``build_parser()``: the argparse parser (sections in ``SECTIONS`` order, flags in field order);
* ``options_from_args()``: the parsed command line into ``ServerOptions``;
* ``ServerOptions()``'s field defaults: the flag's default, converted as argparse converts it,
  so the options object and the command line cannot disagree;
* ``reference_markdown()``: the CLI reference table of the docs;
* ``IGNORED``: tritonserver flags accepted and ignored, each with the reason (no option).

tests/deployment/test_cli_flags.py walks every declaration: each parses, lands in its option, and has its
row in the reference table.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from fpgaserve.backends.hls4ml import FPGA_MODES

from . import __version__
from .cpus import usable_cpus
from .engine.repository import CONTROL_MODES
from .frontends.access import CATEGORIES
from .frontends.http import DEFAULT_MAX_BODY_BYTES

INT32_MAX = 2**31 - 1

# ----------------------------------------------------------------------------- value types
# argparse ``type=`` functions: text in, value out, ArgumentTypeError (argparse's "invalid
# value" message and exit status 2) for text that is not one.


def triton_bool(text: str) -> bool:
    """tritonserver's boolean option values: true/on/1 and false/off/0, any case."""
    t = text.strip().lower()
    if t in ("1", "true", "on"):
        return True
    if t in ("0", "false", "off"):
        return False
    raise argparse.ArgumentTypeError(f"invalid value for bool option: {text}")


def int_or_bool(text: str) -> int:
    """--log-verbose: tritonserver takes a level or true/false (1/0)."""
    t = text.strip().lower()
    if t in ("true", "false"):
        return int(t == "true")
    try:
        return int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid value for int option: {text}") from None


def auto_frontend_processes(cores: int | None = None) -> int:
    """What ``--frontend-processes auto`` means with ``cores`` CPUs (default: the CPUs this
    process may use, its affinity mask and cgroup quota, not the host's count; see
    docs/performance.md, Processes, for the measurements behind it)."""
    cores = cores or usable_cpus()
    # Two processes even on 2 cores: with many client connections (SONIC's case) a second
    # one doubled batch-1 throughput here; with a single connection it costs a quarter,
    # which --frontend-processes 1 avoids. Above that, the engine keeps a core of its own.
    return 1 if cores <= 1 else max(2, min(cores - 1, 16))


def process_count(text: str) -> int:
    """--frontend-processes: 1 to 256, or ``auto`` (``auto_frontend_processes()``)."""
    if text == "auto":
        return auto_frontend_processes()
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of processes or auto, got '{text}'") from None
    if not 1 <= n <= 256:
        raise argparse.ArgumentTypeError(f"expected 1 to 256 frontend processes, got {n}")
    return n


def engine_count(text: str) -> int:
    """--engine-processes: 1 to 64."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of engine processes, got '{text}'") from None
    if not 1 <= n <= 64:
        raise argparse.ArgumentTypeError(f"expected 1 to 64 engine processes, got {n}")
    return n


def trace_setting(name: str) -> Callable[[str], str]:
    """The type of a deprecated ``--trace-<x> VALUE`` flag: VALUE as the ``--trace-config``
    setting ``name=VALUE`` it stands for (both append to the same list)."""
    return functools.partial(_setting, name)


def _setting(name: str, value: str) -> str:
    return f"{name}={value}"


# How the reference table names each parser type (a type missing here fails the tests).
TYPE_NAMES: dict[Any, str] = {
    None: "string",
    int: "integer",
    float: "number",
    triton_bool: "bool",
    int_or_bool: "integer or bool",
    process_count: "integer or auto",
    engine_count: "integer",
    _setting: "string",
}


# ----------------------------------------------------------------------------- declarations
# Help sections, in the order --help shows them: (title, description).
TOP, REPOSITORY, NETWORK, SECURITY, PROCESSES, BACKENDS, LOGGING, IGNORED_SECTION = (
    "options",
    "model repository",
    "network",
    "security (see docs/security.md)",
    "processes",
    "backends",
    "logging and shutdown",
    "tritonserver flags accepted and ignored",
)
SECTIONS: dict[str, str | None] = {
    TOP: None,  # argparse's own group: --help, --version, --id
    REPOSITORY: None,
    NETWORK: None,
    SECURITY: None,
    PROCESSES: None,
    BACKENDS: None,
    LOGGING: None,
    IGNORED_SECTION: "Accepted so that command lines written for tritonserver run unchanged; each one given "
    "logs one warning saying why it has no effect here.",
}


@dataclass(frozen=True)
class Flag:
    """One command-line flag, as declared data.

    ``name`` (``--x-y``) and ``aliases`` are the spellings; ``triton`` says tritonserver has
    the flag under those same spellings (False: fpgaserve's own). ``type`` converts the text
    (None: kept as text; see ``TYPE_NAMES``); ``default`` is the value when the flag is not
    given (a string default goes through ``type``, as argparse does; ``()`` is an empty list).
    ``action``: ``store`` (the last one given wins), ``append`` (repeatable, a list) or
    ``store_true`` (no value). ``dest`` is the attribute of the parsed namespace, by default
    argparse's (``x_y``); flags sharing one append to one list. ``ignored`` is the reason a
    tritonserver flag is accepted and has no effect (such a flag sets no option).
    """

    name: str
    section: str
    help: str
    type: Callable[[str], Any] | None = None
    default: Any = None
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    action: Literal["store", "append", "store_true"] = "store"
    required: bool = False
    aliases: tuple[str, ...] = ()
    dest: str | None = None
    triton: bool = True
    ignored: str | None = None

    @property
    def attr(self) -> str:
        """The attribute of argparse's namespace this flag fills."""
        if self.dest:
            return self.dest
        return ("ignored_" if self.ignored else "") + self.name[2:].replace("-", "_")

    @property
    def spellings(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    @property
    def type_name(self) -> str:
        if self.action == "store_true":
            return "switch (no value)"
        if self.choices:
            return "one of " + ", ".join(self.choices)
        kind = self.type.func if isinstance(self.type, functools.partial) else self.type
        return TYPE_NAMES[kind]

    def add_to(self, group: argparse._ActionsContainer) -> None:
        """This flag on an argparse parser or group: only what is declared is passed, so the
        parser's help and errors are argparse's own for that declaration."""
        kwargs: dict[str, Any] = {"action": self.action, "help": self.help}
        if self.dest or self.ignored:
            kwargs["dest"] = self.attr
        if self.required:
            kwargs["required"] = True
        if self.action != "store_true":
            kwargs["default"] = list(self.default) if isinstance(self.default, tuple) else self.default
            for key in ("type", "metavar", "choices"):
                if getattr(self, key) is not None:
                    kwargs[key] = getattr(self, key)
        group.add_argument(*self.spellings, **kwargs)


def option(
    *flags: Flag,
    convert: Callable[[argparse.Namespace], Any] | None = None,
    default: Any = dataclasses.MISSING,
    default_factory: Callable[[], Any] | Any = dataclasses.MISSING,
) -> Any:
    """A ``ServerOptions`` field set by ``flags``. Without ``convert`` the option is a copy of
    the first flag's value and its default is that flag's default (converted as argparse
    converts it, at construction: ``auto`` resolves on the machine that runs); with
    ``convert(args)`` the field's default is given here."""
    if not flags:
        raise ValueError("an option needs at least one flag")
    if convert is None and default is dataclasses.MISSING and default_factory is dataclasses.MISSING:
        first = flags[0]
        if isinstance(first.default, tuple):
            default_factory = functools.partial(list, first.default)
        elif isinstance(first.default, str) and first.type is not None:
            default_factory = functools.partial(first.type, first.default)
        elif not first.required:
            default = first.default
    metadata = {"flags": flags, "convert": convert}
    if default_factory is not dataclasses.MISSING:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def parse_backend_config(items: list[str], fpga_mode: str | None) -> dict[str, dict[str, str]]:
    """tritonserver's --backend-config=<backend>,<setting>=<value> into {backend: {setting: value}}."""
    config: dict[str, dict[str, str]] = {}
    for item in items:
        backend, sep, setting = item.partition(",")
        key, eq, value = setting.partition("=")
        if not sep or not eq or not backend or not key:
            raise SystemExit(f"error: --backend-config expects <backend>,<setting>=<value>, got '{item}'")
        config.setdefault(backend, {})[key] = value
    if fpga_mode is not None:
        config.setdefault("hls4ml", {})["fpga-mode"] = fpga_mode
    hls4ml = config.get("hls4ml", {})
    mode = hls4ml.get("fpga-mode", "auto")
    if mode not in FPGA_MODES:
        raise SystemExit(f"error: unknown fpga-mode '{mode}' (choose from {', '.join(FPGA_MODES)})")
    for key, choices in (("card-api", ("auto", "xrt-c", "xrt", "pynq")), ("card-reset", ("auto", "off"))):
        if key in hls4ml and hls4ml[key] not in choices:
            raise SystemExit(f"error: hls4ml {key} '{hls4ml[key]}' (choose from {', '.join(choices)})")
    for key in ("kernel-timeout-secs", "card-retry-secs"):
        if key in hls4ml:
            try:
                ok = float(hls4ml[key]) > 0 or (key == "card-retry-secs" and float(hls4ml[key]) == 0)
            except ValueError:
                ok = False
            if not ok:
                raise SystemExit(f"error: hls4ml {key} must be a positive number of seconds, got '{hls4ml[key]}'")
    # the C-simulation's compile limits (settings, else FPGASERVE_CSIM_COMPILE_*): refused now,
    # not at the first csim model's load
    from fpgaserve.backends.hls4ml.csim import CompileLimits

    try:
        CompileLimits.resolve(hls4ml)
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    return config


# converters: options that are more than a copy of one flag
def _backend_config(args: argparse.Namespace) -> dict[str, dict[str, str]]:
    return parse_backend_config(args.backend_config, args.fpga_mode)


def _auto_complete_config(args: argparse.Namespace) -> bool:
    # tritonserver: --disable-auto-complete-config wins over --strict-model-config=false
    return not (args.disable_auto_complete_config or args.strict_model_config)


def _grpc_use_ssl(args: argparse.Namespace) -> bool:
    return args.grpc_use_ssl or args.grpc_use_ssl_mutual  # mutual TLS is TLS


def _bool_flag(name: str, section: str, default: bool, help: str, **kw: Any) -> Flag:
    """The common shape: a tritonserver boolean flag (``--x=true|false``)."""
    return Flag(name, section, help, type=triton_bool, default=default, metavar="BOOL", **kw)


@dataclass(kw_only=True)
class ServerOptions:
    """What the server runs with, one field per option, each declared with its flag(s).

    The field order within a section is the order of ``--help``. Built by ``options_from_args``
    from a command line, or directly (every field but ``model_repositories`` has the
    command line's default); a frontend process gets it as JSON (``dataclasses.asdict``).
    """

    server_id: str = option(
        Flag(
            "--id",
            TOP,
            "server identifier, the name ServerMetadata returns (tritonserver's default: triton).",
            default="triton",
            metavar="NAME",
        )
    )

    # -- model repository
    model_repositories: list[str] = option(  # noqa: RUF009 (option() is a dataclasses.field)
        Flag(
            "--model-repository",
            REPOSITORY,
            "Triton-layout model repository: <repo>/<model>/config.pbtxt and numeric version "
            "folders. Repeat to serve several repositories.",
            aliases=("--model-store",),
            action="append",
            required=True,
            metavar="PATH",
        )
    )
    model_control_mode: str = option(
        Flag(
            "--model-control-mode",
            REPOSITORY,
            "none: load every model at start, no load/unload RPCs; explicit: load only "
            "--load-model models, RepositoryModelLoad/Unload allowed; poll: load every model and "
            "rescan the repository every --repository-poll-secs to load, reload and unload.",
            choices=CONTROL_MODES,
            default="none",
        )
    )
    load_models: list[str] = option(  # noqa: RUF009 (option() is a dataclasses.field)
        Flag(
            "--load-model",
            REPOSITORY,
            "with --model-control-mode=explicit: a model to load at start (repeatable; '*' loads all).",
            action="append",
            default=(),
            metavar="NAME",
        )
    )
    model_config_name: str = option(
        Flag(
            "--model-config-name",
            REPOSITORY,
            "custom configuration name: each model loads <model>/configs/NAME.pbtxt where that "
            "file exists, else its config.pbtxt (e.g. one repository for several card types: "
            "--model-config-name=u55c). A name that is not a plain file name never matches.",
            default="",
            metavar="NAME",
        )
    )
    repository_poll_secs: float = option(
        Flag("--repository-poll-secs", REPOSITORY, "poll interval in poll mode (seconds).", type=float, default=15.0)
    )
    auto_complete_config: bool = option(
        Flag(
            "--disable-auto-complete-config",
            REPOSITORY,
            "load configs as written: a config without inputs/outputs fails instead of being "
            "completed from the model file (ONNX).",
            action="store_true",
        ),
        Flag(
            "--strict-model-config",
            REPOSITORY,
            "tritonserver's deprecated form of --disable-auto-complete-config (true = disable).",
            type=triton_bool,
            metavar="BOOL",
        ),
        convert=_auto_complete_config,
        default=True,
    )
    strict_readiness: bool = option(
        _bool_flag(
            "--strict-readiness",
            REPOSITORY,
            True,
            "true: ServerReady (and the gRPC health check) is true only while every model is "
            "READY (every instance process running, a Python model's is_ready() saying yes) or "
            "deliberately unloaded; false: ready as soon as the server is up.",
        )
    )
    exit_on_error: bool = option(
        _bool_flag(
            "--exit-on-error",
            REPOSITORY,
            False,
            "exit at start if a model fails to load (tritonserver's default is true; ours keeps "
            "serving the other models and shows the failure in RepositoryIndex).",
        )
    )

    # -- network
    allow_grpc: bool = option(_bool_flag("--allow-grpc", NETWORK, True, "serve the gRPC protocol."))
    allow_http: bool = option(_bool_flag("--allow-http", NETWORK, True, "serve the HTTP port."))
    allow_metrics: bool = option(_bool_flag("--allow-metrics", NETWORK, True, "serve the metrics port."))
    grpc_address: str = option(Flag("--grpc-address", NETWORK, "address the gRPC service binds.", default="0.0.0.0"))
    grpc_port: int = option(
        Flag("--grpc-port", NETWORK, "gRPC port (KServe v2 + Triton extensions, health).", type=int, default=8001)
    )
    http_address: str = option(
        Flag("--http-address", NETWORK, "address the HTTP/REST endpoints bind.", default="0.0.0.0")
    )
    http_port: int = option(
        Flag(
            "--http-port",
            NETWORK,
            "HTTP/REST port (KServe v2 + Triton extensions: health, metadata, inference, ...); -1 disables.",
            type=int,
            default=8000,
        )
    )
    metrics_port: int = option(
        Flag(
            "--metrics-port",
            NETWORK,
            "Prometheus metrics port: GET /metrics with Triton's nv_inference_* names; -1 disables.",
            type=int,
            default=8002,
        )
    )
    metrics_address: str = option(
        Flag("--metrics-address", NETWORK, "address the metrics endpoint binds.", default="0.0.0.0")
    )
    allow_gpu_metrics: bool = option(
        _bool_flag(
            "--allow-gpu-metrics",
            NETWORK,
            True,
            "export device metrics (FPGA cards and emulated devices, fpga_* and nv_gpu_* families).",
        )
    )
    allow_cpu_metrics: bool = option(
        _bool_flag("--allow-cpu-metrics", NETWORK, True, "export host CPU and memory metrics (nv_cpu_*).")
    )
    trace_config: list[str] = option(  # noqa: RUF009 (option() is a dataclasses.field)
        Flag(
            "--trace-config",
            NETWORK,
            "tritonserver's request tracing (repeatable): mode=triton|opentelemetry, level=OFF|TIMESTAMPS|TENSORS, "
            "rate=N (one request in N), count=N (-1: no limit), triton,file=PATH, triton,log-frequency=N, "
            "opentelemetry,url=http://collector:4318/v1/traces, opentelemetry,resource=KEY=VALUE.",
            action="append",
            default=(),
            metavar="[MODE,]SETTING=VALUE",
        ),
        # tritonserver's deprecated spellings of --trace-config settings, still accepted
        *(
            Flag(
                legacy,
                NETWORK,
                f"deprecated form of --trace-config {setting}=VALUE.",
                type=trace_setting(setting),
                action="append",
                dest="trace_config",
                metavar="VALUE",
            )
            for legacy, setting in (
                ("--trace-file", "triton,file"),
                ("--trace-level", "level"),
                ("--trace-rate", "rate"),
                ("--trace-count", "count"),
                ("--trace-log-frequency", "triton,log-frequency"),
            )
        ),
    )
    metrics_config: list[str] = option(  # noqa: RUF009 (option() is a dataclasses.field)
        Flag(
            "--metrics-config",
            NETWORK,
            "tritonserver's latency metric settings (repeatable): summary_latencies=true (nv_inference_*_summary_us "
            "with quantiles over the last 60 s), summary_quantiles=0.5:0.05,0.99:0.001, histogram_latencies=true "
            "(first-response histogram of decoupled models; request and compute histograms), counter_latencies=false.",
            action="append",
            default=(),
            metavar="SETTING=VALUE",
        )
    )
    reuse_grpc_port: bool = option(
        _bool_flag(
            "--reuse-grpc-port",
            NETWORK,
            False,
            "bind gRPC with SO_REUSEPORT, so several servers can share the port (off: a taken port is an error).",
        )
    )
    reuse_http_port: bool = option(
        _bool_flag("--reuse-http-port", NETWORK, False, "bind the HTTP port with SO_REUSEPORT.")
    )
    grpc_max_connection_age_ms: int = option(
        Flag(
            "--grpc-max-connection-age",
            NETWORK,
            "close a client connection (with GOAWAY) after this age, so clients re-resolve and "
            "spread over replicas behind a load balancer; 0 = never.",
            type=int,
            default=0,
            metavar="MS",
        )
    )
    grpc_max_connection_age_grace_ms: int = option(
        Flag(
            "--grpc-max-connection-age-grace",
            NETWORK,
            "after --grpc-max-connection-age, how long calls in progress may finish; 0 = no limit.",
            type=int,
            default=0,
            metavar="MS",
        )
    )
    grpc_max_message_size: int = option(
        Flag(
            "--grpc-max-message-size",
            NETWORK,
            "largest gRPC message accepted or sent (Triton and its clients use INT32_MAX).",
            type=int,
            default=INT32_MAX,
            metavar="BYTES",
            triton=False,
        )
    )
    # keepalive: a ping flood (pings without data, more than two of them sooner than 500 ms
    # after the previous one) gets a GOAWAY; clients pinging every second, with scheduling
    # jitter, are never cut (tritonclient's keepalive test pings at 1 s)
    grpc_keepalive_time_ms: int = option(
        Flag(
            "--grpc-keepalive-time",
            NETWORK,
            "server keepalive ping interval.",
            type=int,
            default=7_200_000,
            metavar="MS",
        )
    )
    grpc_keepalive_timeout_ms: int = option(
        Flag("--grpc-keepalive-timeout", NETWORK, "keepalive ping ack timeout.", type=int, default=20_000, metavar="MS")
    )
    grpc_keepalive_permit_without_calls: bool = option(
        _bool_flag(
            "--grpc-keepalive-permit-without-calls",
            NETWORK,
            True,
            "allow client keepalive pings when no call is active.",
        )
    )
    grpc_http2_max_pings_without_data: int = option(
        Flag(
            "--grpc-http2-max-pings-without-data",
            NETWORK,
            "pings the server may send without data (0 = unlimited).",
            type=int,
            default=0,
        )
    )
    grpc_http2_min_recv_ping_interval_without_data_ms: int = option(
        Flag(
            "--grpc-http2-min-recv-ping-interval-without-data",
            NETWORK,
            "minimum interval between client pings the server tolerates.",
            type=int,
            default=500,
            metavar="MS",
        )
    )
    grpc_http2_max_ping_strikes: int = option(
        Flag(
            "--grpc-http2-max-ping-strikes",
            NETWORK,
            "pings without data, sooner than --grpc-http2-min-recv-ping-interval-without-data after the "
            "previous one, tolerated before GOAWAY (0 = unlimited; clients pinging once a second are "
            "never cut).",
            type=int,
            default=2,
        )
    )
    grpc_max_concurrent_streams: int = option(
        Flag(
            "--grpc-max-concurrent-streams",
            NETWORK,
            "concurrent RPCs (HTTP/2 streams) one client connection may have open; more wait in "
            "the client (HTTP/2 flow control), they are never refused.",
            type=int,
            default=1024,
            metavar="N",
            triton=False,
        )
    )
    http_header_timeout_secs: float = option(
        Flag(
            "--http-header-timeout-secs",
            NETWORK,
            "an HTTP client must send a whole request line and headers within this time.",
            type=float,
            default=10.0,
            metavar="SECONDS",
            triton=False,
        )
    )
    http_idle_timeout_secs: float = option(
        Flag(
            "--http-idle-timeout-secs",
            NETWORK,
            "an idle keep-alive HTTP connection is closed after this time.",
            type=float,
            default=60.0,
            metavar="SECONDS",
            triton=False,
        )
    )
    http_max_input_size: int = option(
        Flag(
            "--http-max-input-size",
            NETWORK,
            "largest HTTP request body accepted for inference and model load (after decompression); "
            "larger ones are answered 413. Other HTTP routes take at most 64 KiB.",
            type=int,
            default=DEFAULT_MAX_BODY_BYTES,
            metavar="BYTES",
        )
    )

    grpc_header_forward_pattern: str = option(
        Flag(
            "--grpc-header-forward-pattern",
            NETWORK,
            "tritonserver's flag: gRPC request metadata whose name this regular expression matches "
            "(anywhere in it) becomes string parameters of the inference request, which a model reads "
            "(Python: request.parameters()). As Triton 26.05, a header named like a reserved parameter "
            "(sequence_id, sequence_start, sequence_end, priority, timeout, headers, binary_data_output, "
            "triton_*) fails the request with INVALID_ARG.",
            default="",
            metavar="REGEX",
        )
    )
    http_header_forward_pattern: str = option(
        Flag(
            "--http-header-forward-pattern",
            NETWORK,
            "the same for HTTP request headers (their names as the client sent them).",
            default="",
            metavar="REGEX",
        )
    )

    # -- security
    grpc_restricted_protocols: list[str] = option(  # noqa: RUF009 (option() is a dataclasses.field)
        Flag(
            "--grpc-restricted-protocol",
            SECURITY,
            "tritonserver's flag: calls of the listed protocols (comma-separated: "
            f"{', '.join(CATEGORIES)}) must carry the gRPC header triton-grpc-protocol-<key>: <value>, "
            "else UNAVAILABLE. Repeatable, one group per protocol.",
            action="append",
            default=(),
            metavar="<protocols>:<key>=<value>",
        )
    )
    http_restricted_apis: list[str] = option(  # noqa: RUF009 (option() is a dataclasses.field)
        Flag(
            "--http-restricted-api",
            SECURITY,
            "the same for the HTTP port: requests of the listed APIs must carry the header <key>: <value>, else 403.",
            action="append",
            default=(),
            metavar="<apis>:<key>=<value>",
        )
    )
    grpc_use_ssl: bool = option(
        _bool_flag(
            "--grpc-use-ssl",
            SECURITY,
            False,
            "serve gRPC over TLS with --grpc-server-cert and --grpc-server-key.",
        ),
        convert=_grpc_use_ssl,
        default=False,
    )
    grpc_use_ssl_mutual: bool = option(
        _bool_flag(
            "--grpc-use-ssl-mutual",
            SECURITY,
            False,
            "mutual TLS: implies --grpc-use-ssl and refuses clients without a certificate signed by --grpc-root-cert.",
        )
    )
    grpc_server_cert: str = option(
        Flag("--grpc-server-cert", SECURITY, "the server's certificate chain (PEM file).", default="", metavar="PEM")
    )
    grpc_server_key: str = option(
        Flag("--grpc-server-key", SECURITY, "the server's private key (PEM file).", default="", metavar="PEM")
    )
    # HTTPS on --http-port (fpgaserve's flags; tritonserver has none)
    http_use_ssl: bool = option(
        _bool_flag(
            "--http-use-ssl",
            SECURITY,
            False,
            "serve HTTP/REST over TLS (HTTPS) with --http-server-cert and --http-server-key "
            "(fpgaserve's; tritonserver has no HTTPS).",
            triton=False,
        )
    )
    http_server_cert: str = option(
        Flag(
            "--http-server-cert",
            SECURITY,
            "HTTPS certificate chain (PEM file).",
            default="",
            metavar="PEM",
            triton=False,
        )
    )
    http_server_key: str = option(
        Flag("--http-server-key", SECURITY, "HTTPS private key (PEM file).", default="", metavar="PEM", triton=False)
    )
    grpc_root_cert: str = option(
        Flag(
            "--grpc-root-cert",
            SECURITY,
            "CA certificates (PEM file) that client certificates must chain to (mutual TLS).",
            default="",
            metavar="PEM",
        )
    )
    allow_log_file_update: bool = option(
        _bool_flag(
            "--allow-log-file-update",
            SECURITY,
            False,
            "let the LogSettings RPC change log_file (off: a client could otherwise make the server "
            "create and append to any file it can write). --log-file at start is always honoured.",
            triton=False,
        )
    )
    allow_model_code_upload: bool = option(
        _bool_flag(
            "--allow-model-code-upload",
            SECURITY,
            False,
            "accept RepositoryModelLoad 'file:' uploads for backends that run code from the model's "
            "files (numpy's model.py, hls4ml's C-simulation and bitstreams). Off: only data (ONNX files) "
            "may be uploaded, so a client cannot make the server run its code.",
            triton=False,
        )
    )
    allow_client_shm: bool = option(
        _bool_flag(
            "--allow-client-shm",
            SECURITY,
            False,
            "let clients register system shared-memory regions for inputs and outputs. Off by "
            "default, as in tritonserver >= 26.04 (2.68): registration then answers UNIMPLEMENTED with "
            "Triton's text. cmsTriton and SonicTriton's shared-memory mode pass true.",
        )
    )
    max_shm_regions: int = option(
        Flag(
            "--max-shm-regions",
            SECURITY,
            "system shared-memory regions that may be registered at once (each keeps one file "
            "descriptor open); registrations beyond it are refused with UNAVAILABLE.",
            type=int,
            default=1024,
            metavar="N",
            triton=False,
        )
    )

    # -- processes
    frontend_processes: int = option(
        Flag(
            "--frontend-processes",
            PROCESSES,
            "frontend processes sharing the gRPC and HTTP ports (SO_REUSEPORT), each decoding and "
            "validating requests and feeding the one engine (models, queues, devices) over shared "
            "memory. 1 = gRPC and HTTP in the engine's process, no IPC. auto = see docs/performance.md, Processes.",
            type=process_count,
            default="auto",
            metavar="N|auto",
            triton=False,
        )
    )
    engine_processes: int = option(
        Flag(
            "--engine-processes",
            PROCESSES,
            "engine processes the models are partitioned over, as one server (repository control, "
            "statistics, /metrics and health cover all of them; the frontends route each request to "
            "its model's engine): card c belongs to engine process c mod N and is opened by it alone; "
            "a model goes to the engine process of the cards its 'cards' parameter lists, a model without "
            "one to engine process 0 (its cards only), and a model whose cards belong to several engine "
            "processes does not load. For hosts with more cards than one engine process feeds at PCIe "
            "rate (docs/performance.md). N > 1 serves gRPC and HTTP from frontend processes (at least "
            "one, --frontend-processes). 1 = one engine process for every model and card.",
            type=engine_count,
            default="1",
            metavar="N",
            triton=False,
        )
    )
    arena_bytes: int = option(
        Flag(
            "--frontend-arena-bytes",
            PROCESSES,
            "per frontend process: shared memory for request tensors in flight to the engine "
            "(larger bursts travel inline, slower).",
            type=int,
            default=256 << 20,
            metavar="BYTES",
            triton=False,
        )
    )

    # -- backends: {backend: {setting: value}}, the hls4ml backend's fpga-mode among them
    backend_config: dict[str, dict[str, str]] = option(  # noqa: RUF009 (option() is a dataclasses.field)
        Flag(
            "--fpga-mode",
            BACKENDS,
            "how hls4ml models run: hardware (an FPGA card, through XRT's pyxrt or PYNQ), csim (hls4ml "
            "C-simulation, bit-exact), numpy "
            "(vectorized fixed-point emulation, bit-exact), onnx (float reference, not bit-exact); auto = "
            "hardware when a card and an xclbin are found, else numpy when every layer of the model is emulated "
            "bit-exactly, else csim (per model; the load log line says which and why). "
            "Same as --backend-config=hls4ml,fpga-mode=MODE.",
            choices=FPGA_MODES,
            triton=False,
        ),
        Flag(
            "--backend-config",
            BACKENDS,
            "a backend setting, as tritonserver's flag. Repeatable. hls4ml: fpga-mode, kernel-timeout-secs "
            "(default 5), card-api (auto|xrt-c|xrt|pynq: auto takes XRT's C API when libxrt_coreutil.so.2 loads, "
            "else XRT's pyxrt, else PYNQ 3.0.1), "
            "card-reset (auto: run `xbutil reset` after a kernel hang; off: log the operator's command), "
            "card-retry-secs (health probes retry a card waiting for a reset at most this often, default 10), "
            "csim-compile-memory-mb (address space of a csim model's g++ build, all processes together; default: "
            "half the memory, at most 8192; env FPGASERVE_CSIM_COMPILE_MEMORY_MB), csim-compile-timeout-secs "
            "(wall clock of that build, default 900; env FPGASERVE_CSIM_COMPILE_TIMEOUT_S).",
            action="append",
            default=(),
            metavar="BACKEND,SETTING=VALUE",
        ),
        convert=_backend_config,
        default_factory=dict,
    )

    # -- logging and shutdown
    log_verbose: int = option(
        Flag(
            "--log-verbose",
            LOGGING,
            "verbose logging level (>0 enables debug logs; true/false mean 1/0).",
            type=int_or_bool,
            default=0,
            metavar="LEVEL",
        )
    )
    log_info: bool = option(_bool_flag("--log-info", LOGGING, True, "log info messages."))
    log_warning: bool = option(_bool_flag("--log-warning", LOGGING, True, "log warning messages."))
    log_error: bool = option(_bool_flag("--log-error", LOGGING, True, "log error messages."))
    log_file: str = option(Flag("--log-file", LOGGING, "write the log to this file instead of stderr.", default=""))
    log_format: str = option(
        Flag("--log-format", LOGGING, "log line format.", choices=("default", "ISO8601"), default="default")
    )
    exit_timeout_secs: float = option(
        Flag(
            "--exit-timeout-secs",
            LOGGING,
            "on SIGTERM/SIGINT, how long the whole stop may take (in-flight requests and loads, "
            "then the models' finalize); past it, or on a second signal, the server exits at once "
            "with status 1.",
            type=float,
            default=30.0,
        )
    )
    model_unload_timeout_secs: float = option(
        Flag(
            "--model-unload-timeout-secs",
            LOGGING,
            "how long an unloaded (or replaced) model version may take to finish the requests it "
            "holds; an instance still inside execute() after that is abandoned (logged, counted in "
            "fpgaserve_abandoned_instances) and its requests fail with UNAVAILABLE.",
            type=float,
            default=30.0,
            metavar="SECONDS",
            triton=False,
        )
    )


def _ignored(name: str, why: str) -> Flag:
    # repeatable, so that giving one twice is as harmless as in tritonserver; None = not given
    return Flag(name, IGNORED_SECTION, why, action="append", metavar="VALUE", ignored=why)


# tritonserver flags that mean nothing here (GPU memory, caches, Python/C++ backend
# directories, SageMaker/Vertex AI, thread pools of Triton's C++ frontends): a deployment
# written for Triton passes them, so they are accepted, each with one warning line saying why
# it is ignored. Unknown flags stay an error, as in tritonserver.
IGNORED: tuple[Flag, ...] = tuple(
    _ignored(name, why)
    for name, why in (
        ("--backend-directory", "backends are Python packages of fpgaserve"),
        ("--repoagent-directory", "repository agents are built in (checksum)"),
        ("--cache-directory", "there is no response cache"),
        ("--cache-config", "there is no response cache"),
        ("--response-cache-byte-size", "there is no response cache"),
        ("--pinned-memory-pool-byte-size", "no GPU: host buffers are ordinary memory"),
        ("--cuda-memory-pool-byte-size", "no GPU"),
        ("--cuda-virtual-address-size", "no GPU"),
        ("--min-supported-compute-capability", "no GPU"),
        ("--enable-peer-access", "no GPU"),
        ("--model-load-gpu-limit", "no GPU"),
        ("--buffer-manager-thread-count", "no GPU buffer manager"),
        ("--host-policy", "no NUMA host policies; pin the process with numactl/taskset instead"),
        ("--rate-limit", "no rate limiter: instances take batches as they free up"),
        ("--rate-limit-resource", "no rate limiter"),
        ("--model-load-thread-count", "models load one after another"),
        ("--model-load-retry-count", "a failed load is not retried; RepositoryModelLoad retries it"),
        ("--model-namespacing", "model names are unique across repositories"),
        ("--metrics-interval-ms", "metrics are read when scraped, not sampled on an interval"),
        ("--grpc-infer-allocation-pool-size", "gRPC responses are built per request by grpcio"),
        ("--grpc-max-response-pool-size", "gRPC responses are built per request by grpcio"),
        ("--grpc-infer-thread-count", "the gRPC frontend runs on one event loop"),
        ("--grpc-infer-response-compression-level", "responses follow the client's requested compression"),
        ("--http-thread-count", "the HTTP frontend runs on one event loop"),
        ("--allow-sagemaker", "no SageMaker endpoint"),
        ("--sagemaker-port", "no SageMaker endpoint"),
        ("--sagemaker-safe-port-range", "no SageMaker endpoint"),
        ("--sagemaker-thread-count", "no SageMaker endpoint"),
        ("--allow-vertex-ai", "no Vertex AI endpoint"),
        ("--vertex-ai-port", "no Vertex AI endpoint"),
        ("--vertex-ai-thread-count", "no Vertex AI endpoint"),
        ("--vertex-ai-default-model", "no Vertex AI endpoint"),
    )
)


# ----------------------------------------------------------------------------- derived
def option_flags() -> list[tuple[dataclasses.Field, tuple[Flag, ...]]]:
    """Each ``ServerOptions`` field with the flags that set it, in declaration order."""
    return [(f, f.metadata["flags"]) for f in dataclasses.fields(ServerOptions)]


def all_flags() -> list[Flag]:
    """Every declared flag, in --help order (sections in ``SECTIONS`` order)."""
    flags = [flag for _, fs in option_flags() for flag in fs] + list(IGNORED)
    order = list(SECTIONS)
    return sorted(flags, key=lambda flag: order.index(flag.section))  # stable: field order within a section


def build_parser(prog: str = "fpgaserve") -> argparse.ArgumentParser:
    """The argparse parser of every declared flag, plus ``--help`` and ``--version``."""
    p = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Triton-compatible gRPC inference server for hls4ml models on FPGAs, with numpy and "
            "ONNX Runtime emulation backends. Unmodified Triton clients (tritonclient, "
            "perf_analyzer, CMSSW SonicTriton) can point at it."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        # tritonserver (getopt_long) reads unambiguous prefixes too; keep argparse's default
    )
    p.add_argument("--version", action="version", version=f"fpgaserve {__version__}")
    groups: dict[str, argparse._ActionsContainer] = {TOP: p}
    for title, description in SECTIONS.items():
        if title != TOP:
            groups[title] = p.add_argument_group(title, description)
    for flag in all_flags():
        flag.add_to(groups[flag.section])
    return p


def options_from_args(args: argparse.Namespace) -> ServerOptions:
    """The parsed command line as ``ServerOptions``: each field its first flag's value, or its
    converter's result. Bad values argparse cannot see (``--backend-config``) end the process
    with their ``error:`` line (SystemExit)."""
    values = {}
    for f, flags in option_flags():
        convert = f.metadata["convert"]
        values[f.name] = convert(args) if convert is not None else getattr(args, flags[0].attr)
    return ServerOptions(**values)


def ignored_flags_used(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(flag, why) for every ignored tritonserver flag the command line gave."""
    return [(flag.name, flag.ignored or "") for flag in IGNORED if getattr(args, flag.attr) is not None]


# ----------------------------------------------------------------------------- reference table
def _cell(text: str) -> str:
    """Text for a Markdown table cell: a pipe would end the cell, <x> would be an HTML tag and
    * an emphasis."""
    return (
        text.replace("\\", "\\\\")
        .replace("|", "\\|")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace("*", "\\*")
        .replace("_", "\\_")
    )


def _code(text: str) -> str:
    return "`" + text.replace("|", "\\|") + "`"


def _default_text(flag: Flag) -> str:
    if flag.required:
        return "required"
    if flag.action == "store_true":
        return "off"
    d = flag.default
    if d is None or d == ():
        return ""
    if isinstance(d, bool):
        return _code(str(d).lower())  # tritonserver's spelling
    if d == "":
        return '`""`'
    return _code(str(d))


def reference_markdown() -> str:
    """The CLI reference page (Markdown): one table per --help section, one row per flag with
    its spellings, type, default, description and whether tritonserver has it; the ignored
    tritonserver flags with the reason each has no effect."""
    lines = [
        "# Command-line reference",
        "",
        "Generated from the flag declarations in `fpgaserve/server/flags.py`, the same ones the "
        "parser is built from (`fpgaserve --help` prints this too). `fpgaserve` is also installed "
        "as `tritonserver`; a flag marked *tritonserver* has the same spelling and meaning there. "
        "Boolean values are tritonserver's: `true`/`on`/`1` and `false`/`off`/`0`, any case. "
        "`--help` and `--version` print and exit.",
    ]
    for section, description in SECTIONS.items():
        flags = [flag for flag in all_flags() if flag.section == section]
        lines += ["", f"## {'general' if section == TOP else section}", ""]
        if description:
            lines += [description, ""]
        if section == IGNORED_SECTION:
            lines += ["| Flag | Why it has no effect |", "| --- | --- |"]
            lines += [f"| {_code(flag.name)} | {_cell(flag.ignored or '')} |" for flag in flags]
            continue
        lines += ["| Flag | Type | Default | tritonserver | Description |", "| --- | --- | --- | --- | --- |"]
        for flag in flags:
            names = ", ".join(_code(s) for s in flag.spellings)
            kind = _cell(flag.type_name)
            if flag.metavar and flag.metavar != "BOOL":  # the value's form or unit (MS, BYTES, PATH)
                kind += " " + _code(flag.metavar)
            if flag.action == "append":
                kind += " (repeatable)"
            triton = "yes" if flag.triton else "fpgaserve only"
            lines.append(f"| {names} | {kind} | {_default_text(flag)} | {triton} | {_cell(flag.help)} |")
    return "\n".join(lines) + "\n"
