#!/usr/bin/env python3
"""Concurrent inference with tritonclient.grpc.aio: many FACILE requests in flight at once.

    python client_examples/async_infer.py -u localhost:8001 [--requests 64] [--max-channels 2048]

Builds ``--requests`` requests of random size (1 .. --max-channels rows each, so the server
sees batches of many shapes), fires them all together with ``asyncio.gather`` on one aio
client (one HTTP/2 channel, one gRPC call per request), then checks that every response
carries its own request id and exactly the rows of its own request.
Exits 1 on a wrong result or an error, and prints ``PASS: async_infer`` on success.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

import numpy as np
import tritonclient.grpc.aio as aioclient
from tritonclient.utils import InferenceServerException

import facile_reference as facile


async def one_request(client, request_id: str, x: np.ndarray):
    inp = aioclient.InferInput(facile.INPUT, list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    result = await client.infer(
        facile.MODEL, [inp], outputs=[aioclient.InferRequestedOutput(facile.OUTPUT)], request_id=request_id
    )
    return result.get_response().id, result.as_numpy(facile.OUTPUT)


async def run(args, reference) -> bool:
    rng = np.random.default_rng(args.seed)
    sizes = rng.integers(1, args.max_channels + 1, size=args.requests)
    batches = {f"req-{i}": facile.random_channels(int(n), rng) for i, n in enumerate(sizes)}

    async with aioclient.InferenceServerClient(args.url) as client:
        if not await client.is_model_ready(facile.MODEL):
            print(f"FAILED: model '{facile.MODEL}' is not ready on {args.url}")
            return False
        start = time.perf_counter()
        # All requests start before any finishes: the server queues and executes them while
        # this coroutine waits. gather returns the results in submission order.
        results = await asyncio.gather(*(one_request(client, rid, x) for rid, x in batches.items()))
        elapsed = time.perf_counter() - start

    ok = True
    for (rid, x), (echoed, y) in zip(batches.items(), results):
        if echoed != rid:
            print(f"FAILED: {rid}: response id {echoed!r}")
            ok = False
            continue
        problem = reference.check(x, y)
        if problem:
            print(f"FAILED: {rid} ({x.shape[0]} rows): {problem}")
            ok = False
        elif args.verbose:
            print(f"  {rid}: {x.shape[0]} rows -> {facile.summary(y)}")
    rows = int(sizes.sum())
    print(f"{args.requests} concurrent requests, {rows} channels in {elapsed:.3f} s ({rows / elapsed:,.0f} channels/s)")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-u", "--url", default="localhost:8001", help="server gRPC address (default %(default)s)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every request's result")
    parser.add_argument("--requests", type=int, default=64, help="concurrent requests (default %(default)s)")
    parser.add_argument("--max-channels", type=int, default=2048, help="largest request, in rows (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the sizes and data")
    facile.add_reference_args(parser)
    args = parser.parse_args()
    reference = facile.FacileReference(args.weights, args.rtol, args.atol)
    try:
        ok = asyncio.run(run(args, reference))
    except InferenceServerException as e:
        print(f"FAILED: {e}")
        return 1
    if not ok:
        return 1
    print("PASS: async_infer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
