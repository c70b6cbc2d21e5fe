"""The protocol tests: gRPC and HTTP/REST against real fpgaserve processes with the real tritonclient, every RPC and
endpoint, datatypes, errors, shared memory, transport, frontend processes and their IPC, and the clients
that speak Triton's protocol unmodified (Triton's example clients, client_examples/, perf_analyzer, Model
Analyzer).
"""
