"""Frontends: transport and wire format (gRPC, HTTP). They turn wire messages into data-plane
calls and data-plane results into wire messages; they never read the engine's internals."""
