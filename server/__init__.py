"""fpgaserve server: Triton-compatible gRPC frontend, model repository and scheduling."""

__version__ = "0.1.0"
