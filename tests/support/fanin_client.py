"""Fan-in driver: N client connections at once, each its own gRPC channel, K ModelInfer each.

A reusable client for "many SonicTriton jobs hit one server at the same moment": every
connection is its own ``grpc.aio`` channel with its own TCP connection (a local subchannel
pool, so grpc-core cannot quietly multiplex the channels over one socket), all opened at
once, each sending K ``ModelInfer`` requests (one after the other, or all at once with
``parallel=True``). Every answer is checked value by value; every outcome is counted by
status code and message, so an unexplained CANCELLED or UNAVAILABLE shows up with its text.

Models:

* ``simple`` (Triton's example contract, ``tests/models`` or reference_triton.py's Python
  backend): INPUT0/INPUT1 INT32 [1,16] -> OUTPUT0 = IN0+IN1, OUTPUT1 = IN0-IN1, checked exactly;
* ``facile`` (``bitstreams/facile``, any mode): "input" FP32 [1,47] -> "output/BiasAdd" [1,1].
  The expected answer of each of a few distinct inputs is taken from the server itself in a
  calm first pass (one channel, one request at a time), so the check works for any execution
  mode (the numpy ap_fixed emulation is bit exact, not the float network); the fan-in answers
  must then equal those bit for bit.

Used by tests/protocol/test_fanin.py; also a command line::

    python tests/support/fanin_client.py localhost:8001 --connections 1500 --requests 3 --model simple

Timeouts are hang guards only (a generous deadline per RPC, and an overall one).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import resource
import sys
import time
from dataclasses import dataclass, field

import grpc
import numpy as np

SERVICE = "/inference.GRPCInferenceService/ModelInfer"
INT32_MAX = 2**31 - 1


def raise_fd_limit() -> tuple[int, int]:
    """Raise RLIMIT_NOFILE's soft limit to the hard limit (each connection is a socket)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def _pb():
    # tritonclient's generated messages: the wire format is Triton's, whoever serves it
    from tritonclient.grpc import service_pb2

    return service_pb2


@dataclass
class FaninResult:
    connections: int
    requests_per_connection: int
    model: str
    sent: int = 0
    ok: int = 0
    wrong: int = 0  # answered OK with values that are not the expected ones
    statuses: collections.Counter = field(default_factory=collections.Counter)  # "CODE: message" -> count
    first_wrong: str = ""
    seconds: float = 0.0
    calibration_requests: int = 0  # facile: the calm first pass that takes the expected answers
    latencies: list = field(default_factory=list)
    # (connection, request index, seconds since the start, seconds the RPC took, status key)
    failures: list = field(default_factory=list)

    @property
    def failed(self) -> int:
        return self.sent - self.ok - self.wrong

    @property
    def codes(self) -> collections.Counter:
        c = collections.Counter()
        for key, n in self.statuses.items():
            c[key.split(":", 1)[0]] += n
        return c

    def summary(self) -> str:
        lines = [
            f"{self.connections} connections x {self.requests_per_connection} requests on '{self.model}': "
            f"{self.sent} sent, {self.ok} correct, {self.wrong} wrong values, {self.failed} failed "
            f"in {self.seconds:.1f} s"
        ]
        if self.latencies:
            lat = np.array(self.latencies) * 1e3
            lines.append(
                f"  latency ms: p50 {np.percentile(lat, 50):.0f}, p99 {np.percentile(lat, 99):.0f}, max {lat.max():.0f}"
            )
        for key, n in self.statuses.most_common():
            lines.append(f"  {n:6d}  {key}")
        if self.failures:
            by_k = collections.Counter(f[1] for f in self.failures)
            at = np.array([f[2] for f in self.failures])
            took = np.array([f[3] for f in self.failures])
            lines.append(
                f"  failed requests by index within their connection: {dict(sorted(by_k.items()))}; "
                f"failed {at.min():.2f}-{at.max():.2f} s after the start, "
                f"after {took.min():.2f}-{took.max():.2f} s in flight"
            )
        if self.first_wrong:
            lines.append(f"  first wrong answer: {self.first_wrong}")
        return "\n".join(lines)

    def as_dict(self) -> dict:
        return {
            "connections": self.connections,
            "requests_per_connection": self.requests_per_connection,
            "model": self.model,
            "sent": self.sent,
            "ok": self.ok,
            "wrong": self.wrong,
            "failed": self.failed,
            "statuses": dict(self.statuses),
            "seconds": self.seconds,
            "calibration_requests": self.calibration_requests,
            "summary": self.summary(),
        }


class _Model:
    """Builds requests and checks answers of one model contract."""

    n_variants = 16

    def __init__(self, name: str, model_name: str | None = None):
        self.kind = name
        self.name = model_name or name
        self.expected: dict[int, dict[str, bytes]] = {}

    def request(self, variant: int):
        pb = _pb()
        req = pb.ModelInferRequest(model_name=self.name, id=str(variant))
        if self.kind == "simple":
            a = (np.arange(16, dtype=np.int32) + variant)[None, :]
            b = np.full((1, 16), 3 * variant + 1, dtype=np.int32)
            for n, arr in (("INPUT0", a), ("INPUT1", b)):
                req.inputs.add(name=n, datatype="INT32", shape=[1, 16])
                req.raw_input_contents.append(arr.tobytes())
            for n in ("OUTPUT0", "OUTPUT1"):
                req.outputs.add(name=n)
        elif self.kind == "facile":
            x = np.random.default_rng(variant).standard_normal((1, 47)).astype(np.float32)
            req.inputs.add(name="input", datatype="FP32", shape=[1, 47])
            req.raw_input_contents.append(x.tobytes())
            req.outputs.add(name="output/BiasAdd")
        else:
            raise ValueError(f"unknown model kind {self.kind!r} (simple or facile)")
        return req

    def _outputs(self, response) -> dict[str, bytes]:
        names = [o.name for o in response.outputs]
        if len(response.raw_output_contents) != len(names):
            raise ValueError(f"{len(names)} outputs but {len(response.raw_output_contents)} raw contents")
        return dict(zip(names, response.raw_output_contents))

    def expected_for(self, variant: int) -> dict[str, bytes] | None:
        if self.kind == "simple":
            a = np.arange(16, dtype=np.int32) + variant
            b = np.full(16, 3 * variant + 1, dtype=np.int32)
            return {"OUTPUT0": (a + b).tobytes(), "OUTPUT1": (a - b).tobytes()}
        return self.expected.get(variant)

    def check(self, variant: int, response) -> str:
        """'' when the answer is right, else what is wrong."""
        try:
            got = self._outputs(response)
        except ValueError as e:
            return str(e)
        want = self.expected_for(variant)
        if want is None:
            return f"no reference answer for variant {variant}"
        for name, data in want.items():
            if got.get(name) != data:
                return (
                    f"variant {variant}: output {name} is {got.get(name, b'(missing)')[:64]!r}, expected {data[:64]!r}"
                )
        return ""


def _status_key(e: grpc.aio.AioRpcError) -> str:
    details = (e.details() or "").replace("\n", " ")
    return f"{e.code().name}: {details[:200]}"


_CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", INT32_MAX),
    ("grpc.max_receive_message_length", INT32_MAX),
    # one TCP connection per channel: without this grpc-core shares subchannels between
    # channels of equal target and arguments, and 1,500 "connections" would be one socket
    ("grpc.use_local_subchannel_pool", 1),
]


async def _calibrate(url: str, model: _Model, timeout: float) -> None:
    """Take the expected answers of a facile-like model from one calm connection."""
    if model.kind == "simple":
        return
    async with grpc.aio.insecure_channel(url, options=_CHANNEL_OPTIONS) as ch:
        call = ch.unary_unary(
            SERVICE,
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=_pb().ModelInferResponse.FromString,
        )
        for v in range(model.n_variants):
            resp = await call(model.request(v), timeout=timeout)
            model.expected[v] = model._outputs(resp)


async def run_fanin(
    url: str,
    connections: int = 1500,
    requests: int = 3,
    model: str = "simple",
    *,
    model_name: str | None = None,
    parallel: bool = False,
    rpc_timeout: float = 300.0,
    shared_channels: bool = False,
) -> FaninResult:
    """Open ``connections`` channels at once; each sends ``requests`` ModelInfer requests.

    ``parallel``: a connection's requests go out at once instead of one after the other.
    ``shared_channels``: let grpc-core share one TCP connection between the channels (what
    N tritonclient clients with default arguments in one process get); off = N sockets.
    """
    raise_fd_limit()
    m = _Model(model, model_name)
    await _calibrate(url, m, rpc_timeout)
    result = FaninResult(connections, requests, m.name, calibration_requests=len(m.expected))
    pb = _pb()
    options = _CHANNEL_OPTIONS if not shared_channels else _CHANNEL_OPTIONS[:-1]
    channels = [grpc.aio.insecure_channel(url, options=options) for _ in range(connections)]
    start = asyncio.Event()

    async def one(call, conn: int, k: int, variant: int) -> None:
        req = m.request(variant)
        result.sent += 1
        t0 = time.perf_counter()
        try:
            resp = await call(req, timeout=rpc_timeout)
        except grpc.aio.AioRpcError as e:
            key = _status_key(e)
            result.statuses[key] += 1
            now = time.perf_counter()
            result.failures.append((conn, k, now - started, now - t0, key))
            return
        result.latencies.append(time.perf_counter() - t0)
        why = m.check(variant, resp)
        if why:
            result.wrong += 1
            result.statuses["OK (wrong values)"] += 1
            result.first_wrong = result.first_wrong or why
        else:
            result.ok += 1
            result.statuses["OK"] += 1

    async def connection(i: int, ch: grpc.aio.Channel) -> None:
        call = ch.unary_unary(
            SERVICE,
            request_serializer=lambda msg: msg.SerializeToString(),
            response_deserializer=pb.ModelInferResponse.FromString,
        )
        await start.wait()
        variants = [(i * requests + k) % m.n_variants for k in range(requests)]
        if parallel:
            await asyncio.gather(*(one(call, i, k, v) for k, v in enumerate(variants)))
        else:
            for k, v in enumerate(variants):
                await one(call, i, k, v)

    tasks = [asyncio.ensure_future(connection(i, ch)) for i, ch in enumerate(channels)]
    await asyncio.sleep(0)
    started = time.perf_counter()
    start.set()
    try:
        await asyncio.gather(*tasks)
    finally:
        result.seconds = time.perf_counter() - started
        await asyncio.gather(*(ch.close() for ch in channels), return_exceptions=True)
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("url", help="host:port of the gRPC listener")
    ap.add_argument("--connections", "-n", type=int, default=1500)
    ap.add_argument("--requests", "-k", type=int, default=3, help="ModelInfer requests per connection")
    ap.add_argument("--model", choices=("simple", "facile"), default="simple", help="the model contract")
    ap.add_argument("--model-name", help="served name, if not the contract's")
    ap.add_argument("--parallel", action="store_true", help="a connection's requests at once, not in turn")
    ap.add_argument(
        "--shared-channels",
        action="store_true",
        help="let grpc-core put all channels on one TCP connection (tritonclient's default in one process)",
    )
    ap.add_argument("--timeout", type=float, default=300.0, help="deadline per RPC (a hang guard)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args(argv)
    res = asyncio.run(
        run_fanin(
            args.url,
            args.connections,
            args.requests,
            args.model,
            model_name=args.model_name,
            parallel=args.parallel,
            rpc_timeout=args.timeout,
            shared_channels=args.shared_channels,
        )
    )
    print(json.dumps(res.as_dict()) if args.json else res.summary())
    return 0 if res.ok == res.sent else 1


if __name__ == "__main__":
    sys.exit(main())
