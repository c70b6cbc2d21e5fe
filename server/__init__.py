"""fpgaserve's server: Triton's gRPC and HTTP/REST protocols (frontends/) over one data plane
(dataplane/), the engine that loads and schedules models (engine/), the server's processes
(ipc/), and the wiring and command line (app.py, cli.py, flags.py). docs/architecture.md
draws the layers and what each may import."""

__version__ = "0.1.0"
