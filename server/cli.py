"""``fpgaserve``: command line mirroring tritonserver's flags where they mean the same."""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys

# One BLAS/OpenMP thread per process unless the user says otherwise, set before numpy is
# imported: model instances (one thread each) are the unit of parallelism, and BLAS threads
# on top of them fight the event loop for the cores (measured on FACILE, batch 16000, 2 cores:
# compute 11.6 ms -> 7.1 ms per request, throughput +40 %). The same reason the ONNX Runtime
# backend defaults to one intra-op thread.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")


def _keep_freed_memory() -> None:
    """Stop glibc from handing large freed blocks back to the kernel after every request.

    A 16000-row batch allocates tens of MB (request views, batch arrays, outputs, encoded
    responses); glibc serves blocks above its mmap threshold with fresh mmaps and trims the
    heap on free, so each request faults the same pages in again. Measured with FACILE at
    batch 16000, numpy mode: 41 % of the server's CPU in the kernel, 154k minor faults/s.
    Raising both thresholds keeps the memory mapped and reused (RSS stays at the peak batch
    footprint). Environment variables set by the user (MALLOC_*_) take precedence; other
    C libraries are left alone.
    """
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") or os.environ.get("MALLOC_TRIM_THRESHOLD_"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3  # <malloc.h>
        libc.mallopt(m_mmap_threshold, 256 << 20)
        libc.mallopt(m_trim_threshold, 1 << 30)
    except (OSError, AttributeError):  # not glibc
        pass


def _raise_fd_limit() -> None:
    """Soft RLIMIT_NOFILE up to the hard limit: every client connection, shared-memory region
    (up to --max-shm-regions) and model file costs a descriptor, and a soft limit of 1024 (a
    common default) would be reached by the regions alone."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass


from fpgaserve.backends.hls4ml import FPGA_MODES  # noqa: E402

from . import __version__, eventloop  # noqa: E402
from .app import INT32_MAX, InferenceServer, ServerOptions  # noqa: E402
from .cpus import usable_cpus  # noqa: E402
from .engine.repository import CONTROL_MODES  # noqa: E402
from .errors import StartupError  # noqa: E402
from .frontends.access import CATEGORIES  # noqa: E402


def _bool(text: str) -> bool:
    """tritonserver's boolean option values: true/on/1 and false/off/0, any case."""
    t = text.strip().lower()
    if t in ("1", "true", "on"):
        return True
    if t in ("0", "false", "off"):
        return False
    raise argparse.ArgumentTypeError(f"invalid value for bool option: {text}")


def _setting(name: str, value: str) -> str:
    return f"{name}={value}"


def auto_frontend_processes(cores: int | None = None) -> int:
    """What ``--frontend-processes auto`` means with ``cores`` CPUs (default: the CPUs this
    process may use, its affinity mask and cgroup quota, not the host's count; see README:
    Processes for the measurements behind it)."""
    cores = cores or usable_cpus()
    # Two processes even on 2 cores: with many client connections (SONIC's case) a second
    # one doubled batch-1 throughput here; with a single connection it costs a quarter,
    # which --frontend-processes 1 avoids. Above that, the engine keeps a core of its own.
    return 1 if cores <= 1 else max(2, min(cores - 1, 16))


def _processes(text: str) -> int:
    if text == "auto":
        return auto_frontend_processes()
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of processes or auto, got '{text}'") from None
    if not 1 <= n <= 256:
        raise argparse.ArgumentTypeError(f"expected 1 to 256 frontend processes, got {n}")
    return n


def _int_bool(text: str) -> int:
    """--log-verbose: tritonserver takes a level or true/false (1/0)."""
    t = text.strip().lower()
    if t in ("true", "false"):
        return int(t == "true")
    try:
        return int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid value for int option: {text}") from None


# tritonserver flags that mean nothing here (GPU memory, caches, Python/C++ backend
# directories, SageMaker/Vertex AI, tracing, thread pools of Triton's C++ frontends): a
# deployment written for Triton passes them, so they are accepted, each with one warning
# line saying why it is ignored. Unknown flags stay an error, as in tritonserver.
# flag -> (takes a value, why it has no effect)
IGNORED_TRITON_FLAGS: dict[str, tuple[bool, str]] = {
    "--backend-directory": (True, "backends are Python packages of fpgaserve"),
    "--repoagent-directory": (True, "repository agents are built in (checksum)"),
    "--cache-directory": (True, "there is no response cache"),
    "--cache-config": (True, "there is no response cache"),
    "--response-cache-byte-size": (True, "there is no response cache"),
    "--pinned-memory-pool-byte-size": (True, "no GPU: host buffers are ordinary memory"),
    "--cuda-memory-pool-byte-size": (True, "no GPU"),
    "--cuda-virtual-address-size": (True, "no GPU"),
    "--min-supported-compute-capability": (True, "no GPU"),
    "--enable-peer-access": (True, "no GPU"),
    "--model-load-gpu-limit": (True, "no GPU"),
    "--buffer-manager-thread-count": (True, "no GPU buffer manager"),
    "--host-policy": (True, "no NUMA host policies; pin the process with numactl/taskset instead"),
    "--rate-limit": (True, "no rate limiter: instances take batches as they free up"),
    "--rate-limit-resource": (True, "no rate limiter"),
    "--model-load-thread-count": (True, "models load one after another"),
    "--model-load-retry-count": (True, "a failed load is not retried; RepositoryModelLoad retries it"),
    "--model-namespacing": (True, "model names are unique across repositories"),
    "--metrics-interval-ms": (True, "metrics are read when scraped, not sampled on an interval"),
    "--grpc-infer-allocation-pool-size": (True, "gRPC responses are built per request by grpcio"),
    "--grpc-max-response-pool-size": (True, "gRPC responses are built per request by grpcio"),
    "--grpc-infer-thread-count": (True, "the gRPC frontend runs on one event loop"),
    "--grpc-infer-response-compression-level": (True, "responses follow the client's requested compression"),
    "--grpc-header-forward-pattern": (True, "request headers are not forwarded to models"),
    "--http-header-forward-pattern": (True, "request headers are not forwarded to models"),
    "--http-thread-count": (True, "the HTTP frontend runs on one event loop"),
    "--allow-sagemaker": (True, "no SageMaker endpoint"),
    "--sagemaker-port": (True, "no SageMaker endpoint"),
    "--sagemaker-safe-port-range": (True, "no SageMaker endpoint"),
    "--sagemaker-thread-count": (True, "no SageMaker endpoint"),
    "--allow-vertex-ai": (True, "no Vertex AI endpoint"),
    "--vertex-ai-port": (True, "no Vertex AI endpoint"),
    "--vertex-ai-thread-count": (True, "no Vertex AI endpoint"),
    "--vertex-ai-default-model": (True, "no Vertex AI endpoint"),
}


def ignored_flags_used(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(flag, why) for every ignored tritonserver flag the command line gave."""
    used = []
    for flag, (_, why) in IGNORED_TRITON_FLAGS.items():
        if getattr(args, "ignored_" + flag[2:].replace("-", "_")) is not None:
            used.append((flag, why))
    return used


def build_parser(prog: str = "fpgaserve") -> argparse.ArgumentParser:
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
    p.add_argument(
        "--id",
        default="triton",
        metavar="NAME",
        help="server identifier, the name ServerMetadata returns (tritonserver's default: triton).",
    )
    g = p.add_argument_group("model repository")
    g.add_argument(
        "--model-repository",
        "--model-store",
        dest="model_repository",
        action="append",
        required=True,
        metavar="PATH",
        help="Triton-layout model repository: <repo>/<model>/config.pbtxt and numeric version "
        "folders. Repeat to serve several repositories.",
    )
    g.add_argument(
        "--model-control-mode",
        choices=CONTROL_MODES,
        default="none",
        help="none: load every model at start, no load/unload RPCs; explicit: load only "
        "--load-model models, RepositoryModelLoad/Unload allowed; poll: load every model and "
        "rescan the repository every --repository-poll-secs to load, reload and unload.",
    )
    g.add_argument(
        "--load-model",
        action="append",
        default=[],
        metavar="NAME",
        help="with --model-control-mode=explicit: a model to load at start (repeatable; '*' loads all).",
    )
    g.add_argument("--repository-poll-secs", type=float, default=15.0, help="poll interval in poll mode (seconds).")
    g.add_argument(
        "--disable-auto-complete-config",
        action="store_true",
        help="load configs as written: a config without inputs/outputs fails instead of being "
        "completed from the model file (ONNX).",
    )
    g.add_argument(
        "--strict-model-config",
        type=_bool,
        default=None,
        metavar="BOOL",
        help="tritonserver's deprecated form of --disable-auto-complete-config (true = disable).",
    )
    g.add_argument(
        "--strict-readiness",
        type=_bool,
        default=True,
        metavar="BOOL",
        help="true: ServerReady (and the gRPC health check) is true only while every model is "
        "READY or deliberately unloaded; false: ready as soon as the server is up.",
    )
    g.add_argument(
        "--exit-on-error",
        type=_bool,
        default=False,
        metavar="BOOL",
        help="exit at start if a model fails to load (tritonserver's default is true; ours keeps "
        "serving the other models and shows the failure in RepositoryIndex).",
    )
    g = p.add_argument_group("network")
    g.add_argument("--allow-grpc", type=_bool, default=True, metavar="BOOL", help="serve the gRPC protocol.")
    g.add_argument("--allow-http", type=_bool, default=True, metavar="BOOL", help="serve the HTTP port.")
    g.add_argument("--allow-metrics", type=_bool, default=True, metavar="BOOL", help="serve the metrics port.")
    g.add_argument("--grpc-address", default="0.0.0.0", help="address the gRPC service binds.")
    g.add_argument("--grpc-port", type=int, default=8001, help="gRPC port (KServe v2 + Triton extensions, health).")
    g.add_argument("--http-address", default="0.0.0.0", help="address the HTTP/REST endpoints bind.")
    g.add_argument(
        "--http-port",
        type=int,
        default=8000,
        help="HTTP/REST port (KServe v2 + Triton extensions: health, metadata, inference, ...); -1 disables.",
    )
    g.add_argument(
        "--metrics-port",
        type=int,
        default=8002,
        help="Prometheus metrics port: GET /metrics with Triton's nv_inference_* names; -1 disables.",
    )
    g.add_argument("--metrics-address", default="0.0.0.0", help="address the metrics endpoint binds.")
    g.add_argument(
        "--allow-gpu-metrics",
        type=_bool,
        default=True,
        metavar="BOOL",
        help="export device metrics (FPGA cards and emulated devices, fpga_* and nv_gpu_* families).",
    )
    g.add_argument(
        "--allow-cpu-metrics",
        type=_bool,
        default=True,
        metavar="BOOL",
        help="export host CPU and memory metrics (nv_cpu_*).",
    )
    g.add_argument(
        "--trace-config",
        action="append",
        default=[],
        metavar="[MODE,]SETTING=VALUE",
        help="tritonserver's request tracing (repeatable): mode=triton|opentelemetry, level=OFF|TIMESTAMPS|TENSORS, "
        "rate=N (one request in N), count=N (-1: no limit), triton,file=PATH, triton,log-frequency=N, "
        "opentelemetry,url=http://collector:4318/v1/traces, opentelemetry,resource=KEY=VALUE.",
    )
    for legacy, setting in (
        ("--trace-file", "triton,file"),
        ("--trace-level", "level"),
        ("--trace-rate", "rate"),
        ("--trace-count", "count"),
        ("--trace-log-frequency", "triton,log-frequency"),
    ):
        # tritonserver's deprecated spellings of --trace-config settings, still accepted
        g.add_argument(
            legacy,
            action="append",
            dest="trace_config",
            type=functools.partial(_setting, setting),
            help=f"deprecated form of --trace-config {setting}=VALUE.",
        )
    g.add_argument(
        "--metrics-config",
        action="append",
        default=[],
        metavar="SETTING=VALUE",
        help="tritonserver's latency metric settings (repeatable): summary_latencies=true (nv_inference_*_summary_us "
        "with quantiles over the last 60 s), summary_quantiles=0.5:0.05,0.99:0.001, histogram_latencies=true "
        "(first-response histogram of decoupled models; request and compute histograms), counter_latencies=false.",
    )
    g.add_argument(
        "--reuse-grpc-port",
        type=_bool,
        default=False,
        metavar="BOOL",
        help="bind gRPC with SO_REUSEPORT, so several servers can share the port (off: a taken port is an error).",
    )
    g.add_argument(
        "--reuse-http-port",
        type=_bool,
        default=False,
        metavar="BOOL",
        help="bind the HTTP port with SO_REUSEPORT.",
    )
    g.add_argument(
        "--grpc-max-connection-age",
        type=int,
        default=0,
        metavar="MS",
        help="close a client connection (with GOAWAY) after this age, so clients re-resolve and "
        "spread over replicas behind a load balancer; 0 = never.",
    )
    g.add_argument(
        "--grpc-max-connection-age-grace",
        type=int,
        default=0,
        metavar="MS",
        help="after --grpc-max-connection-age, how long calls in progress may finish; 0 = no limit.",
    )
    g.add_argument(
        "--grpc-max-message-size",
        type=int,
        default=INT32_MAX,
        metavar="BYTES",
        help="largest gRPC message accepted or sent (Triton and its clients use INT32_MAX).",
    )
    g.add_argument(
        "--grpc-keepalive-time", type=int, default=7_200_000, metavar="MS", help="server keepalive ping interval."
    )
    g.add_argument(
        "--grpc-keepalive-timeout", type=int, default=20_000, metavar="MS", help="keepalive ping ack timeout."
    )
    g.add_argument(
        "--grpc-keepalive-permit-without-calls",
        type=_bool,
        default=True,
        metavar="BOOL",
        help="allow client keepalive pings when no call is active.",
    )
    g.add_argument(
        "--grpc-http2-max-pings-without-data",
        type=int,
        default=0,
        help="pings the server may send without data (0 = unlimited).",
    )
    g.add_argument(
        "--grpc-http2-min-recv-ping-interval-without-data",
        type=int,
        default=500,
        metavar="MS",
        help="minimum interval between client pings the server tolerates.",
    )
    g.add_argument(
        "--grpc-http2-max-ping-strikes",
        type=int,
        default=2,
        help="pings without data, sooner than --grpc-http2-min-recv-ping-interval-without-data after the "
        "previous one, tolerated before GOAWAY (0 = unlimited; clients pinging once a second are "
        "never cut).",
    )
    g.add_argument(
        "--grpc-max-concurrent-streams",
        type=int,
        default=1024,
        metavar="N",
        help="concurrent RPCs (HTTP/2 streams) one client connection may have open; more wait in "
        "the client (HTTP/2 flow control), they are never refused.",
    )
    g.add_argument(
        "--http-header-timeout-secs",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="an HTTP client must send a whole request line and headers within this time.",
    )
    g.add_argument(
        "--http-idle-timeout-secs",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="an idle keep-alive HTTP connection is closed after this time.",
    )
    g.add_argument(
        "--http-max-input-size",
        type=int,
        default=64 * 1024 * 1024,
        metavar="BYTES",
        help="largest HTTP request body accepted for inference and model load (after decompression); "
        "larger ones are answered 413. Other HTTP routes take at most 64 KiB.",
    )
    g = p.add_argument_group("security (see README: Security)")
    g.add_argument(
        "--grpc-restricted-protocol",
        action="append",
        default=[],
        metavar="<protocols>:<key>=<value>",
        help="tritonserver's flag: calls of the listed protocols (comma-separated: "
        f"{', '.join(CATEGORIES)}) must carry the gRPC header triton-grpc-protocol-<key>: <value>, "
        "else UNAVAILABLE. Repeatable, one group per protocol.",
    )
    g.add_argument(
        "--http-restricted-api",
        action="append",
        default=[],
        metavar="<apis>:<key>=<value>",
        help="the same for the HTTP port: requests of the listed APIs must carry the header <key>: <value>, else 403.",
    )
    g.add_argument(
        "--grpc-use-ssl",
        type=_bool,
        default=False,
        metavar="BOOL",
        help="serve gRPC over TLS with --grpc-server-cert and --grpc-server-key.",
    )
    g.add_argument(
        "--grpc-use-ssl-mutual",
        type=_bool,
        default=False,
        metavar="BOOL",
        help="mutual TLS: implies --grpc-use-ssl and refuses clients without a certificate signed by --grpc-root-cert.",
    )
    g.add_argument("--grpc-server-cert", default="", metavar="PEM", help="the server's certificate chain (PEM file).")
    g.add_argument("--grpc-server-key", default="", metavar="PEM", help="the server's private key (PEM file).")
    g.add_argument(
        "--http-use-ssl",
        type=_bool,
        default=False,
        metavar="BOOL",
        help="serve HTTP/REST over TLS (HTTPS) with --http-server-cert and --http-server-key "
        "(fpgaserve's; tritonserver has no HTTPS).",
    )
    g.add_argument("--http-server-cert", default="", metavar="PEM", help="HTTPS certificate chain (PEM file).")
    g.add_argument("--http-server-key", default="", metavar="PEM", help="HTTPS private key (PEM file).")
    g.add_argument(
        "--grpc-root-cert",
        default="",
        metavar="PEM",
        help="CA certificates (PEM file) that client certificates must chain to (mutual TLS).",
    )
    g.add_argument(
        "--allow-log-file-update",
        type=_bool,
        default=False,
        metavar="BOOL",
        help="let the LogSettings RPC change log_file (off: a client could otherwise make the server "
        "create and append to any file it can write). --log-file at start is always honoured.",
    )
    g.add_argument(
        "--allow-model-code-upload",
        type=_bool,
        default=False,
        metavar="BOOL",
        help="accept RepositoryModelLoad 'file:' uploads for backends that run code from the model's "
        "files (numpy's model.py, hls4ml's C-simulation and bitstreams). Off: only data (ONNX files) "
        "may be uploaded, so a client cannot make the server run its code.",
    )
    g.add_argument(
        "--allow-client-shm",
        type=_bool,
        default=False,
        metavar="BOOL",
        help="let clients register system shared-memory regions for inputs and outputs. Off by "
        "default, as in tritonserver >= 26.04 (2.68): registration then answers UNIMPLEMENTED with "
        "Triton's text. cmsTriton and SonicTriton's shared-memory mode pass true.",
    )
    g.add_argument(
        "--max-shm-regions",
        type=int,
        default=1024,
        metavar="N",
        help="system shared-memory regions that may be registered at once (each keeps one file "
        "descriptor open); registrations beyond it are refused with UNAVAILABLE.",
    )
    g = p.add_argument_group("processes")
    g.add_argument(
        "--frontend-processes",
        type=_processes,
        default="auto",
        metavar="N|auto",
        help="frontend processes sharing the gRPC and HTTP ports (SO_REUSEPORT), each decoding and "
        "validating requests and feeding the one engine (models, queues, devices) over shared "
        "memory. 1 = gRPC and HTTP in the engine's process, no IPC. auto = " + "see README: Processes.",
    )
    g.add_argument(
        "--frontend-arena-bytes",
        type=int,
        default=256 << 20,
        metavar="BYTES",
        help="per frontend process: shared memory for request tensors in flight to the engine "
        "(larger bursts travel inline, slower).",
    )
    g = p.add_argument_group("backends")
    g.add_argument(
        "--fpga-mode",
        choices=FPGA_MODES,
        default=None,
        help="how hls4ml models run: hardware (an FPGA card, through XRT's pyxrt or PYNQ), csim (hls4ml "
        "C-simulation, bit-exact), numpy "
        "(vectorized fixed-point emulation, bit-exact), onnx (float reference, not bit-exact); auto = "
        "hardware when a card and an xclbin are found, else numpy when every layer of the model is emulated "
        "bit-exactly, else csim (per model; the load log line says which and why). "
        "Same as --backend-config=hls4ml,fpga-mode=MODE.",
    )
    g.add_argument(
        "--backend-config",
        action="append",
        default=[],
        metavar="BACKEND,SETTING=VALUE",
        help="a backend setting, as tritonserver's flag. Repeatable. hls4ml: fpga-mode, kernel-timeout-secs "
        "(default 5), card-api (auto|xrt|pynq: auto takes XRT's pyxrt when it imports, else PYNQ 3.0.1), "
        "card-reset (auto: run `xbutil reset` after a kernel hang; off: log the operator's command), "
        "card-retry-secs (health probes retry a card waiting for a reset at most this often, default 10), "
        "csim-compile-memory-mb (address space of a csim model's g++ build, all processes together; default: "
        "half the memory, at most 8192; env FPGASERVE_CSIM_COMPILE_MEMORY_MB), csim-compile-timeout-secs "
        "(wall clock of that build, default 900; env FPGASERVE_CSIM_COMPILE_TIMEOUT_S).",
    )
    g = p.add_argument_group("logging and shutdown")
    g.add_argument(
        "--log-verbose",
        type=_int_bool,
        default=0,
        metavar="LEVEL",
        help="verbose logging level (>0 enables debug logs; true/false mean 1/0).",
    )
    g.add_argument("--log-info", type=_bool, default=True, metavar="BOOL", help="log info messages.")
    g.add_argument("--log-warning", type=_bool, default=True, metavar="BOOL", help="log warning messages.")
    g.add_argument("--log-error", type=_bool, default=True, metavar="BOOL", help="log error messages.")
    g.add_argument("--log-file", default="", help="write the log to this file instead of stderr.")
    g.add_argument("--log-format", choices=("default", "ISO8601"), default="default", help="log line format.")
    g.add_argument(
        "--exit-timeout-secs",
        type=float,
        default=30.0,
        help="on SIGTERM/SIGINT, how long in-flight requests may take to finish before exit.",
    )
    g.add_argument(
        "--model-unload-timeout-secs",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long an unloaded (or replaced) model version may take to finish the requests it "
        "holds; an instance still inside execute() after that is abandoned (logged, counted in "
        "fpgaserve_abandoned_instances) and its requests fail with UNAVAILABLE.",
    )
    g = p.add_argument_group(
        "tritonserver flags accepted and ignored",
        "Accepted so that command lines written for tritonserver run unchanged; each one given "
        "logs one warning saying why it has no effect here.",
    )
    for flag, (_, why) in IGNORED_TRITON_FLAGS.items():
        g.add_argument(flag, dest="ignored_" + flag[2:].replace("-", "_"), action="append", default=None, help=why)
    return p


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
    for key, choices in (("card-api", ("auto", "xrt", "pynq")), ("card-reset", ("auto", "off"))):
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


def options_from_args(args: argparse.Namespace) -> ServerOptions:
    return ServerOptions(
        backend_config=parse_backend_config(args.backend_config, args.fpga_mode),
        model_repositories=args.model_repository,
        grpc_address=args.grpc_address,
        grpc_port=args.grpc_port,
        http_address=args.http_address,
        http_port=args.http_port,
        metrics_port=args.metrics_port,
        metrics_address=args.metrics_address,
        model_control_mode=args.model_control_mode,
        load_models=args.load_model,
        repository_poll_secs=args.repository_poll_secs,
        strict_readiness=args.strict_readiness,
        exit_on_error=args.exit_on_error,
        exit_timeout_secs=args.exit_timeout_secs,
        grpc_max_message_size=args.grpc_max_message_size,
        log_verbose=args.log_verbose,
        log_file=args.log_file,
        log_format=args.log_format,
        grpc_keepalive_time_ms=args.grpc_keepalive_time,
        grpc_keepalive_timeout_ms=args.grpc_keepalive_timeout,
        grpc_keepalive_permit_without_calls=args.grpc_keepalive_permit_without_calls,
        grpc_http2_max_pings_without_data=args.grpc_http2_max_pings_without_data,
        grpc_http2_min_recv_ping_interval_without_data_ms=args.grpc_http2_min_recv_ping_interval_without_data,
        grpc_http2_max_ping_strikes=args.grpc_http2_max_ping_strikes,
        grpc_max_concurrent_streams=args.grpc_max_concurrent_streams,
        http_header_timeout_secs=args.http_header_timeout_secs,
        http_idle_timeout_secs=args.http_idle_timeout_secs,
        http_max_input_size=args.http_max_input_size,
        grpc_restricted_protocols=args.grpc_restricted_protocol,
        http_restricted_apis=args.http_restricted_api,
        grpc_use_ssl=args.grpc_use_ssl or args.grpc_use_ssl_mutual,
        grpc_use_ssl_mutual=args.grpc_use_ssl_mutual,
        grpc_server_cert=args.grpc_server_cert,
        http_use_ssl=args.http_use_ssl,
        http_server_cert=args.http_server_cert,
        http_server_key=args.http_server_key,
        grpc_server_key=args.grpc_server_key,
        grpc_root_cert=args.grpc_root_cert,
        allow_log_file_update=args.allow_log_file_update,
        allow_model_code_upload=args.allow_model_code_upload,
        max_shm_regions=args.max_shm_regions,
        model_unload_timeout_secs=args.model_unload_timeout_secs,
        server_id=args.id,
        # tritonserver: --disable-auto-complete-config wins over --strict-model-config=false
        auto_complete_config=not (args.disable_auto_complete_config or args.strict_model_config),
        allow_grpc=args.allow_grpc,
        allow_http=args.allow_http,
        allow_metrics=args.allow_metrics,
        allow_gpu_metrics=args.allow_gpu_metrics,
        allow_cpu_metrics=args.allow_cpu_metrics,
        metrics_config=list(args.metrics_config),
        trace_config=list(args.trace_config),
        reuse_grpc_port=args.reuse_grpc_port,
        reuse_http_port=args.reuse_http_port,
        grpc_max_connection_age_ms=args.grpc_max_connection_age,
        grpc_max_connection_age_grace_ms=args.grpc_max_connection_age_grace,
        allow_client_shm=args.allow_client_shm,
        log_info=args.log_info,
        log_warning=args.log_warning,
        log_error=args.log_error,
        frontend_processes=args.frontend_processes,
        arena_bytes=args.frontend_arena_bytes,
    )


def main(argv: list[str] | None = None) -> int:
    """Run the server (or ``pack``, ``doctor``); the process's exit status. The one place a
    failure to start ends the process: a ``StartupError`` from anywhere below becomes its
    ``error: <message>`` line on stderr (logged once logging is set up) and status 1."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["pack"]:
        # `fpgaserve pack ...`: the model packer (hls4ml conversion), not the server
        from fpgaserve.pack.cli import main as pack_main

        return pack_main(argv[1:])
    if argv[:1] == ["doctor"]:
        # `fpgaserve doctor ...`: checks the host's FPGA runtime, cards and a repository's xclbins
        from fpgaserve.backends.hls4ml.card.doctor import main as doctor_main

        return doctor_main(argv[1:])
    # the image installs this program as `tritonserver` too (SuperSONIC, cmsTriton call that)
    prog = "tritonserver" if os.path.basename(sys.argv[0]) == "tritonserver" else "fpgaserve"
    args = build_parser(prog).parse_args(argv)
    _keep_freed_memory()
    _raise_fd_limit()
    try:
        server = InferenceServer(options_from_args(args))
    except StartupError as e:  # a malformed option or TLS file, said before logging is set up
        print(f"error: {e}", file=sys.stderr)
        return 1
    for flag, why in ignored_flags_used(args):
        logging.getLogger("fpgaserve").warning(
            "%s is accepted for tritonserver compatibility and ignored: %s", flag, why
        )
    if args.strict_model_config is not None:
        logging.getLogger("fpgaserve").warning(
            "--strict-model-config is deprecated (as in tritonserver); use --disable-auto-complete-config"
        )
    try:
        # the engine process feeding frontend processes serves no gRPC: it runs on uvloop
        eventloop.run(server.serve_forever(), fast=server.options.frontend_processes > 1)
    except KeyboardInterrupt:
        pass
    except StartupError as e:
        logging.getLogger("fpgaserve").error("error: %s", e)
        return 1
    if server.abandoned:
        # a backend thread is stuck in execute(); interpreter shutdown would wait for it
        logging.shutdown()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
