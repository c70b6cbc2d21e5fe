"""``fpgaserve``: command line mirroring tritonserver's flags where they mean the same."""

from __future__ import annotations

import argparse
import asyncio
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


from . import __version__  # noqa: E402
from .app import INT32_MAX, InferenceServer, ServerOptions  # noqa: E402
from .access import CATEGORIES  # noqa: E402
from .repository import CONTROL_MODES  # noqa: E402
from fpgaserve.backends.hls4ml import FPGA_MODES  # noqa: E402


def _bool(text: str) -> bool:
    t = text.strip().lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got '{text}'")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fpgaserve",
        description=(
            "Triton-compatible gRPC inference server for hls4ml models on FPGAs, with numpy and "
            "ONNX Runtime emulation backends. Unmodified Triton clients (tritonclient, "
            "perf_analyzer, CMSSW SonicTriton) can point at it."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"fpgaserve {__version__}")
    g = p.add_argument_group("model repository")
    g.add_argument(
        "--model-repository", "--model-store", dest="model_repository", action="append", required=True,
        metavar="PATH",
        help="Triton-layout model repository: <repo>/<model>/config.pbtxt and numeric version "
        "folders. Repeat to serve several repositories.",
    )
    g.add_argument(
        "--model-control-mode", choices=CONTROL_MODES, default="none",
        help="none: load every model at start, no load/unload RPCs; explicit: load only "
        "--load-model models, RepositoryModelLoad/Unload allowed; poll: load every model and "
        "rescan the repository every --repository-poll-secs to load, reload and unload.",
    )
    g.add_argument(
        "--load-model", action="append", default=[], metavar="NAME",
        help="with --model-control-mode=explicit: a model to load at start (repeatable; '*' loads all).",
    )
    g.add_argument("--repository-poll-secs", type=float, default=15.0, help="poll interval in poll mode (seconds).")
    g.add_argument(
        "--strict-readiness", type=_bool, default=True, metavar="BOOL",
        help="true: ServerReady (and the gRPC health check) is true only while every model is "
        "READY or deliberately unloaded; false: ready as soon as the server is up.",
    )
    g.add_argument(
        "--exit-on-error", type=_bool, default=False, metavar="BOOL",
        help="exit at start if a model fails to load (tritonserver's default is true; ours keeps "
        "serving the other models and shows the failure in RepositoryIndex).",
    )
    g = p.add_argument_group("network")
    g.add_argument("--grpc-address", default="0.0.0.0", help="address the gRPC service binds.")
    g.add_argument("--grpc-port", type=int, default=8001, help="gRPC port (KServe v2 + Triton extensions, health).")
    g.add_argument("--http-address", default="0.0.0.0", help="address the HTTP health endpoints bind.")
    g.add_argument(
        "--http-port", type=int, default=8000,
        help="HTTP port for /v2/health/live, /v2/health/ready and /v2/models/<m>/ready; -1 disables.",
    )
    g.add_argument(
        "--metrics-port", type=int, default=8002,
        help="Prometheus metrics port: GET /metrics with Triton's nv_inference_* names; -1 disables.",
    )
    g.add_argument("--metrics-address", default="0.0.0.0", help="address the metrics endpoint binds.")
    g.add_argument(
        "--grpc-max-message-size", type=int, default=INT32_MAX, metavar="BYTES",
        help="largest gRPC message accepted or sent (Triton and its clients use INT32_MAX).",
    )
    g.add_argument("--grpc-keepalive-time", type=int, default=7_200_000, metavar="MS", help="server keepalive ping interval.")
    g.add_argument("--grpc-keepalive-timeout", type=int, default=20_000, metavar="MS", help="keepalive ping ack timeout.")
    g.add_argument(
        "--grpc-keepalive-permit-without-calls", type=_bool, default=True, metavar="BOOL",
        help="allow client keepalive pings when no call is active.",
    )
    g.add_argument(
        "--grpc-http2-max-pings-without-data", type=int, default=0,
        help="pings the server may send without data (0 = unlimited).",
    )
    g.add_argument(
        "--grpc-http2-min-recv-ping-interval-without-data", type=int, default=500, metavar="MS",
        help="minimum interval between client pings the server tolerates.",
    )
    g.add_argument(
        "--grpc-http2-max-ping-strikes", type=int, default=2,
        help="pings without data, sooner than --grpc-http2-min-recv-ping-interval-without-data after the "
        "previous one, tolerated before GOAWAY (0 = unlimited; clients pinging once a second are "
        "never cut).",
    )
    g.add_argument(
        "--grpc-max-concurrent-streams", type=int, default=1024, metavar="N",
        help="concurrent RPCs (HTTP/2 streams) one client connection may have open; more wait in "
        "the client (HTTP/2 flow control), they are never refused.",
    )
    g.add_argument(
        "--http-header-timeout-secs", type=float, default=10.0, metavar="SECONDS",
        help="an HTTP client must send a whole request line and headers within this time.",
    )
    g.add_argument(
        "--http-idle-timeout-secs", type=float, default=60.0, metavar="SECONDS",
        help="an idle keep-alive HTTP connection is closed after this time.",
    )
    g = p.add_argument_group("security (see README: Security)")
    g.add_argument(
        "--grpc-restricted-protocol", action="append", default=[], metavar="<protocols>:<key>=<value>",
        help="tritonserver's flag: calls of the listed protocols (comma-separated: "
        f"{', '.join(CATEGORIES)}) must carry the gRPC header triton-grpc-protocol-<key>: <value>, "
        "else UNAVAILABLE. Repeatable, one group per protocol.",
    )
    g.add_argument(
        "--http-restricted-api", action="append", default=[], metavar="<apis>:<key>=<value>",
        help="the same for the HTTP port: requests of the listed APIs must carry the header <key>: <value>, "
        "else 403.",
    )
    g.add_argument(
        "--grpc-use-ssl", type=_bool, default=False, metavar="BOOL",
        help="serve gRPC over TLS with --grpc-server-cert and --grpc-server-key.",
    )
    g.add_argument(
        "--grpc-use-ssl-mutual", type=_bool, default=False, metavar="BOOL",
        help="mutual TLS: implies --grpc-use-ssl and refuses clients without a certificate signed by "
        "--grpc-root-cert.",
    )
    g.add_argument("--grpc-server-cert", default="", metavar="PEM", help="the server's certificate chain (PEM file).")
    g.add_argument("--grpc-server-key", default="", metavar="PEM", help="the server's private key (PEM file).")
    g.add_argument(
        "--grpc-root-cert", default="", metavar="PEM",
        help="CA certificates (PEM file) that client certificates must chain to (mutual TLS).",
    )
    g.add_argument(
        "--allow-log-file-update", type=_bool, default=False, metavar="BOOL",
        help="let the LogSettings RPC change log_file (off: a client could otherwise make the server "
        "create and append to any file it can write). --log-file at start is always honoured.",
    )
    g.add_argument(
        "--allow-model-code-upload", type=_bool, default=False, metavar="BOOL",
        help="accept RepositoryModelLoad 'file:' uploads for backends that run code from the model's "
        "files (numpy's model.py, hls4ml's C-simulation and bitstreams). Off: only data (ONNX files) "
        "may be uploaded, so a client cannot make the server run its code.",
    )
    g.add_argument(
        "--max-shm-regions", type=int, default=1024, metavar="N",
        help="system shared-memory regions that may be registered at once (each keeps one file "
        "descriptor open); registrations beyond it are refused with UNAVAILABLE.",
    )
    g = p.add_argument_group("backends")
    g.add_argument(
        "--fpga-mode", choices=FPGA_MODES, default=None,
        help="how hls4ml models run: hardware (PYNQ card), csim (hls4ml C-simulation, bit-exact), numpy "
        "(vectorized fixed-point emulation, bit-exact), onnx (float reference, not bit-exact); auto = "
        "hardware when a card and an xclbin are found, else csim. Same as --backend-config=hls4ml,fpga-mode=MODE.",
    )
    g.add_argument(
        "--backend-config", action="append", default=[], metavar="BACKEND,SETTING=VALUE",
        help="a backend setting, as tritonserver's flag (e.g. hls4ml,kernel-timeout-secs=2). Repeatable.",
    )
    g = p.add_argument_group("logging and shutdown")
    g.add_argument("--log-verbose", type=int, default=0, metavar="LEVEL", help="verbose logging level (>0 enables debug logs).")
    g.add_argument("--log-file", default="", help="write the log to this file instead of stderr.")
    g.add_argument("--log-format", choices=("default", "ISO8601"), default="default", help="log line format.")
    g.add_argument(
        "--exit-timeout-secs", type=float, default=30.0,
        help="on SIGTERM/SIGINT, how long in-flight requests may take to finish before exit.",
    )
    g.add_argument(
        "--model-unload-timeout-secs", type=float, default=30.0, metavar="SECONDS",
        help="how long an unloaded (or replaced) model version may take to finish the requests it "
        "holds; an instance still inside execute() after that is abandoned (logged, counted in "
        "fpgaserve_abandoned_instances) and its requests fail with UNAVAILABLE.",
    )
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
    mode = config.get("hls4ml", {}).get("fpga-mode", "auto")
    if mode not in FPGA_MODES:
        raise SystemExit(f"error: unknown fpga-mode '{mode}' (choose from {', '.join(FPGA_MODES)})")
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
        grpc_restricted_protocols=args.grpc_restricted_protocol,
        http_restricted_apis=args.http_restricted_api,
        grpc_use_ssl=args.grpc_use_ssl or args.grpc_use_ssl_mutual,
        grpc_use_ssl_mutual=args.grpc_use_ssl_mutual,
        grpc_server_cert=args.grpc_server_cert,
        grpc_server_key=args.grpc_server_key,
        grpc_root_cert=args.grpc_root_cert,
        allow_log_file_update=args.allow_log_file_update,
        allow_model_code_upload=args.allow_model_code_upload,
        max_shm_regions=args.max_shm_regions,
        model_unload_timeout_secs=args.model_unload_timeout_secs,
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["pack"]:
        # `fpgaserve pack ...`: the model packer (hls4ml conversion), not the server
        from fpgaserve.backends.hls4ml.pack import main as pack_main

        return pack_main(argv[1:])
    args = build_parser().parse_args(argv)
    _keep_freed_memory()
    _raise_fd_limit()
    server = InferenceServer(options_from_args(args))
    try:
        asyncio.run(server.serve_forever())
    except KeyboardInterrupt:
        pass
    except SystemExit as e:
        if e.code not in (None, 0):
            logging.getLogger("fpgaserve").error("%s", e.code)
            return 1
    if server.abandoned:
        # a backend thread is stuck in execute(); interpreter shutdown would wait for it
        logging.shutdown()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
