#!/usr/bin/env python3
"""Synchronous inference with tritonclient.grpc: one batch of FACILE channels per request.

    python client_examples/sync_infer.py -u localhost:8001 [-n 4096] [--model simple]

Sends a random FP32 [N, 47] batch to ``facile`` with the blocking client, checks the
[N, 1] result against a numpy re-computation of the network (see facile_reference.py) and
prints a summary. With the Triton example model ``simple`` served as well (tests/models),
also checks its OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1.

Models: ``--model`` (repeatable, facile and/or simple) picks what to run and then every
named model is required; without it, facile is run and simple is tried only if the server
has it. Exits 1 on a wrong result or an error, and prints ``PASS: sync_infer`` on success.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

import facile_reference as facile


def infer_facile(client, args, reference) -> bool:
    rng = np.random.default_rng(args.seed)
    x = facile.random_channels(args.channels, rng)

    # One input tensor, [N, 47]: N is the batch dimension (max_batch_size 16384).
    inp = grpcclient.InferInput(facile.INPUT, list(x.shape), "FP32")
    inp.set_data_from_numpy(x)  # sent as raw_input_contents (little-endian bytes)
    out = grpcclient.InferRequestedOutput(facile.OUTPUT)

    result = client.infer(facile.MODEL, [inp], outputs=[out], request_id="sync-facile-1")
    y = result.as_numpy(facile.OUTPUT)
    response = result.get_response()
    print(f"facile: {args.channels} channels -> {facile.summary(y)}")
    if args.verbose:
        print(f"  model_version={response.model_version!r} id={response.id!r}")
        print(f"  first outputs: {y[:5, 0].tolist()}")

    if response.id != "sync-facile-1":
        print(f"FAILED: facile: response id {response.id!r}, expected the request's 'sync-facile-1'")
        return False
    problem = reference.check(x, y)
    if problem:
        print(f"FAILED: facile: {problem}")
        return False
    print("facile: outputs match the reference" if reference.exact else "facile: shapes and values look sane")
    return True


def infer_simple(client, args) -> bool:
    # simple: INT32 [16] inputs, max_batch_size 8, so send a [batch, 16] batch.
    batch = 4
    in0 = np.arange(batch * 16, dtype=np.int32).reshape(batch, 16)
    in1 = np.full((batch, 16), 7, dtype=np.int32)
    inputs = [
        grpcclient.InferInput("INPUT0", [batch, 16], "INT32"),
        grpcclient.InferInput("INPUT1", [batch, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(in0)
    inputs[1].set_data_from_numpy(in1)
    outputs = [grpcclient.InferRequestedOutput("OUTPUT0"), grpcclient.InferRequestedOutput("OUTPUT1")]

    result = client.infer("simple", inputs, outputs=outputs)
    out0, out1 = result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")
    if args.verbose:
        print(f"  simple row 0: {in0[0].tolist()} + 7 = {out0[0].tolist()}")
    if out0 is None or out1 is None or not np.array_equal(out0, in0 + in1) or not np.array_equal(out1, in0 - in1):
        print("FAILED: simple: OUTPUT0/OUTPUT1 are not INPUT0+INPUT1 / INPUT0-INPUT1")
        return False
    print(f"simple: batch of {batch}, add/sub correct")
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-u", "--url", default="localhost:8001", help="server gRPC address (default %(default)s)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print more details")
    parser.add_argument(
        "-n", "--channels", type=int, default=4096, help="FACILE rows per request (default %(default)s)"
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed of the input data")
    parser.add_argument(
        "--model",
        action="append",
        choices=("facile", "simple"),
        help="model(s) to run (repeatable); default: facile, plus simple if the server has it",
    )
    facile.add_reference_args(parser)
    args = parser.parse_args()
    reference = facile.FacileReference(args.weights, args.rtol, args.atol)

    client = grpcclient.InferenceServerClient(args.url)
    try:
        if not client.is_server_live():
            print(f"FAILED: server at {args.url} is not live")
            return 1
        # (model, required): facile always unless --model says otherwise; simple if present
        plan = [(m, True) for m in args.model] if args.model else [("facile", True), ("simple", False)]
        ok = True
        for model, required in plan:
            if not client.is_model_ready(model):
                if required:
                    print(f"FAILED: model '{model}' is not ready on {args.url}")
                    return 1
                print(f"{model}: not served here, skipped (serve tests/models to include it)")
                continue
            ok &= infer_facile(client, args, reference) if model == "facile" else infer_simple(client, args)
    except InferenceServerException as e:
        print(f"FAILED: {e}")
        return 1
    finally:
        client.close()
    if not ok:
        return 1
    print("PASS: sync_infer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
