#!/usr/bin/env python3
"""Concurrent HTTP requests with tritonclient.http.aio (aiohttp underneath).

    python client_examples/http_async_infer.py -u localhost:8000 [--requests 64]

Sends ``--requests`` FACILE batches of random sizes at once with ``asyncio.gather``, each with
its own id, and checks every response: the id echoed, the shape [rows, 1], the values against
the numpy re-computation. Exits 1 on a wrong result; prints ``PASS: http_async_infer``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

import numpy as np
import tritonclient.http.aio as aioclient

import facile_reference as facile


async def one(client, i: int, rows: int, rng, reference) -> str | None:
    x = facile.random_channels(rows, rng)
    inp = aioclient.InferInput(facile.INPUT, list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    out = aioclient.InferRequestedOutput(facile.OUTPUT)
    result = await client.infer(facile.MODEL, [inp], outputs=[out], request_id=f"req-{i}")
    if result.get_response().get("id") != f"req-{i}":
        return f"request {i}: id {result.get_response().get('id')!r}"
    y = result.as_numpy(facile.OUTPUT)
    problem = reference.check(x, y)
    return f"request {i}: {problem}" if problem else None


async def run(args) -> int:
    reference = facile.FacileReference(args.weights, args.rtol, args.atol)
    rng = np.random.default_rng(args.seed)
    sizes = rng.integers(1, args.max_rows + 1, size=args.requests)
    async with aioclient.InferenceServerClient(args.url) as client:
        if not await client.is_model_ready(facile.MODEL):
            print(f"FAILED: model '{facile.MODEL}' is not ready on {args.url}")
            return 1
        problems = await asyncio.gather(*(one(client, i, int(n), rng, reference) for i, n in enumerate(sizes)))
    bad = [p for p in problems if p]
    for p in bad:
        print(f"FAILED: {p}")
    if bad:
        return 1
    print(f"{args.requests} concurrent HTTP requests ({int(sizes.sum())} rows) answered and matched by id")
    print("PASS: http_async_infer")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-u", "--url", default="localhost:8000", help="server HTTP address (default %(default)s)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print more details")
    parser.add_argument("--requests", type=int, default=64, help="requests in flight together")
    parser.add_argument("--max-rows", type=int, default=2000, help="largest batch of a request")
    parser.add_argument("--seed", type=int, default=1, help="random seed")
    facile.add_reference_args(parser)
    return asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
