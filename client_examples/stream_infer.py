#!/usr/bin/env python3
"""Streaming inference (ModelStreamInfer): many FACILE requests on one bidirectional stream.

    python client_examples/stream_infer.py -u localhost:8001 [--requests 32] [--channels 512]

``start_stream`` opens the stream and registers a callback; ``async_stream_infer`` writes
one request after another without waiting. The server answers each request once, in
whatever order they finish, so responses are matched to requests by the echoed request
``id``. One deliberately malformed request (46 features instead of 47) is sent in the
middle: the server reports it in-stream (``error_message``) and keeps the stream open, so
every valid request still gets its result.
Exits 1 on a wrong result or an error, and prints ``PASS: stream_infer`` on success.
"""

from __future__ import annotations

import argparse
import queue
import sys
from functools import partial

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

import facile_reference as facile


def on_response(responses: queue.Queue, result, error) -> None:
    """Runs on the client's stream thread: hand each (result, error) to the main thread."""
    responses.put((result, error))


def make_input(x: np.ndarray):
    inp = grpcclient.InferInput(facile.INPUT, list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return inp


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-u", "--url", default="localhost:8001", help="server gRPC address (default %(default)s)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every response")
    parser.add_argument("--requests", type=int, default=32, help="valid requests to stream (default %(default)s)")
    parser.add_argument("--channels", type=int, default=512, help="rows per request (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the input data")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for all responses")
    facile.add_reference_args(parser)
    args = parser.parse_args()
    reference = facile.FacileReference(args.weights, args.rtol, args.atol)

    rng = np.random.default_rng(args.seed)
    sent = {f"stream-{i}": facile.random_channels(args.channels, rng) for i in range(args.requests)}
    bad_id = "stream-bad"  # [N, 46]: wrong shape, must fail alone
    bad = rng.standard_normal((4, facile.FEATURES - 1), dtype=np.float32)

    responses: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(args.url)
    received: dict[str, np.ndarray] = {}
    errors: list[str] = []
    try:
        if not client.is_model_ready(facile.MODEL):
            print(f"FAILED: model '{facile.MODEL}' is not ready on {args.url}")
            return 1
        client.start_stream(callback=partial(on_response, responses))
        output = [grpcclient.InferRequestedOutput(facile.OUTPUT)]
        for i, (rid, x) in enumerate(sent.items()):
            client.async_stream_infer(facile.MODEL, [make_input(x)], outputs=output, request_id=rid)
            if i == len(sent) // 2:
                client.async_stream_infer(facile.MODEL, [make_input(bad)], outputs=output, request_id=bad_id)
        # Exactly one response per request: len(sent) results plus one error.
        for _ in range(len(sent) + 1):
            try:
                result, error = responses.get(timeout=args.timeout)
            except queue.Empty:
                print(
                    f"FAILED: only {len(received) + len(errors)} of {len(sent) + 1} responses within {args.timeout} s"
                )
                return 1
            if error is not None:
                errors.append(str(error))
                if args.verbose:
                    print(f"  error response: {error}")
                continue
            rid = result.get_response().id
            if rid in received or rid not in sent:
                print(f"FAILED: unexpected or duplicate response id {rid!r}")
                return 1
            received[rid] = result.as_numpy(facile.OUTPUT)
            if args.verbose:
                print(f"  {rid}: {facile.summary(received[rid])}")
    except InferenceServerException as e:
        print(f"FAILED: {e}")
        return 1
    finally:
        client.stop_stream()  # closes our side; waits for the stream thread to finish
        client.close()

    ok = True
    for rid, x in sent.items():
        problem = reference.check(x, received.get(rid))
        if problem:
            print(f"FAILED: {rid}: {problem}")
            ok = False
    if len(errors) != 1 or "unexpected shape" not in errors[0]:
        print(f"FAILED: expected one 'unexpected shape' error for {bad_id!r}, got {errors}")
        ok = False
    print(f"{len(received)} streamed responses matched by id; malformed request rejected in-stream: {errors[:1]}")
    if not ok:
        return 1
    print("PASS: stream_infer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
