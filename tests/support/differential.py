"""What the differential tests (tests/differential/) send to both servers: serialized gRPC
requests over raw channels (the same bytes to the real Triton and to fpgaserve), and HTTP
requests that notice when the reference server dies of a signal while it answers."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
from pathlib import Path
from typing import Any

import grpc
import pytest

SERVICE = "/inference.GRPCInferenceService/"


def raw_call(url: str, method: str, request, response_cls):
    with grpc.insecure_channel(url) as channel:
        rpc = channel.unary_unary(
            SERVICE + method, request_serializer=None, response_deserializer=response_cls.FromString
        )
        try:
            rpc(request.SerializeToString(), timeout=30)
            return grpc.StatusCode.OK, ""
        except grpc.RpcError as e:
            return e.code(), e.details()


class ReferenceCrashed(Exception):
    """The reference server died of a signal while it answered (its log says so)."""


def http_request(port: int, method: str, path: str, log: Path) -> tuple[int, Any]:
    """One request with the standard library, in a thread while the server's log is watched:
    ReferenceCrashed when the server dies of a signal meanwhile (Triton then hangs instead of
    closing its connections), a failure with the end of its log when it does not answer.

    (A load starts one Python stub per instance in Triton: on two busy cores that can take
    more than a minute, hence the long wait.)
    """
    data = b"" if method == "POST" else None
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method, data=data)

    def send() -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(request, timeout=300) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    pool = ThreadPoolExecutor(1)
    answer = pool.submit(send)
    pool.shutdown(wait=False)
    deadline = time.monotonic() + 300
    while True:
        try:
            status, raw = answer.result(timeout=0.5)
            break
        except FuturesTimeout:
            if "Signal (" in log.read_text(errors="replace"):
                raise ReferenceCrashed(log.name) from None
            if time.monotonic() > deadline:
                break
        except OSError:
            break
    if not answer.done() or answer.exception() is not None:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:]) if log.exists() else "(no log)"
        pytest.fail(f"{method} {path} on port {port}: no answer; the server's log ends with:\n{tail}")
    return status, json.loads(raw) if raw else None
