"""``fpgaserve``: the server's entry point (and ``pack``, ``doctor``). Its flags, which mirror
tritonserver's where they mean the same, are declared in ``flags.py``."""

from __future__ import annotations

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


from fpgaserve.backends.hosting import kill_helper_groups, start_process  # noqa: E402

from . import eventloop  # noqa: E402
from .app import InferenceServer  # noqa: E402
from .errors import StartupError  # noqa: E402

# The flags are declared once, in flags.py; these names stay importable from here.
from .flags import (  # noqa: E402, F401
    IGNORED,
    ServerOptions,
    auto_frontend_processes,
    build_parser,
    ignored_flags_used,
    options_from_args,
    parse_backend_config,
)

# flag -> (takes a value, why it has no effect): the ignored tritonserver flags (flags.IGNORED)
IGNORED_TRITON_FLAGS: dict[str, tuple[bool, str]] = {flag.name: (True, flag.ignored or "") for flag in IGNORED}


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
    start_process()
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
        # the exit timeout expired, or a second signal came: exit now (a backend thread may be
        # stuck in execute(), and interpreter shutdown would wait for it); the compilers this
        # process started go with it, instance processes end by their lifelines
        kill_helper_groups()
        logging.shutdown()
        os._exit(server.exit_status)
    return server.exit_status  # 1 when an engine process (--engine-processes) died or the stop was cut


if __name__ == "__main__":
    sys.exit(main())
