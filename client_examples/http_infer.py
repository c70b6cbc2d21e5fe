#!/usr/bin/env python3
"""Inference over HTTP/REST with tritonclient.http: FACILE and simple, binary or JSON tensors.

    python client_examples/http_infer.py -u localhost:8000 [-n 4096] [--json] [--compression gzip]

Sends a random FP32 [N, 47] batch to ``facile`` with the blocking HTTP client (binary tensor
data by default: the JSON header, then the raw bytes; ``--json`` sends and receives the values
as JSON ``data`` arrays instead), checks the [N, 1] result against the numpy re-computation of
the network (facile_reference.py), then, if the server has Triton's ``simple`` model, checks
OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1 with one input binary and one JSON.
``--compression gzip|deflate`` compresses the request body and asks for a compressed response.
Also reads server metadata, model metadata and the model's statistics, as an HTTP client of
Triton would. Exits 1 on a wrong result or an error; prints ``PASS: http_infer`` on success.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import facile_reference as facile


def infer_facile(client, args, reference) -> bool:
    rng = np.random.default_rng(args.seed)
    x = facile.random_channels(args.channels, rng)
    binary = not args.json
    inp = httpclient.InferInput(facile.INPUT, list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=binary)
    out = httpclient.InferRequestedOutput(facile.OUTPUT, binary_data=binary)
    before = client.get_inference_statistics(facile.MODEL)["model_stats"][0]["inference_count"]
    result = client.infer(
        facile.MODEL,
        [inp],
        outputs=[out],
        request_id="http-facile-1",
        request_compression_algorithm=args.compression,
        response_compression_algorithm=args.compression,
    )
    y = result.as_numpy(facile.OUTPUT)
    response = result.get_response()
    print(f"facile: {args.channels} channels ({'binary' if binary else 'JSON'} tensors) -> {facile.summary(y)}")
    if args.verbose:
        print(f"  response header: { {k: v for k, v in response.items() if k != 'outputs'} }")
    if response.get("id") != "http-facile-1":
        print(f"FAILED: facile: response id {response.get('id')!r}, expected 'http-facile-1'")
        return False
    problem = reference.check(x, y.astype(np.float32))
    if problem:
        print(f"FAILED: facile: {problem}")
        return False
    after = client.get_inference_statistics(facile.MODEL)["model_stats"][0]["inference_count"]
    print(f"facile: statistics count {after - before} more inferences")
    print("facile: outputs match the reference" if reference.exact else "facile: shapes and values look sane")
    return True


def infer_simple(client, args) -> bool:
    batch = 4
    in0 = np.arange(batch * 16, dtype=np.int32).reshape(batch, 16)
    in1 = np.full((batch, 16), 7, dtype=np.int32)
    inputs = [
        httpclient.InferInput("INPUT0", [batch, 16], "INT32"),
        httpclient.InferInput("INPUT1", [batch, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(in0, binary_data=True)  # raw bytes after the JSON header
    inputs[1].set_data_from_numpy(in1, binary_data=False)  # a JSON "data" array
    outputs = [
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
        httpclient.InferRequestedOutput("OUTPUT1", binary_data=False),
    ]
    result = client.infer("simple", inputs, outputs=outputs, request_compression_algorithm=args.compression)
    out0, out1 = result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")
    if out0 is None or out1 is None or not np.array_equal(out0, in0 + in1) or not np.array_equal(out1, in0 - in1):
        print("FAILED: simple: OUTPUT0/OUTPUT1 are not INPUT0+INPUT1 / INPUT0-INPUT1")
        return False
    print(f"simple: batch of {batch}, one input binary and one JSON, add/sub correct")
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-u", "--url", default="localhost:8000", help="server HTTP address (default %(default)s)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print more details")
    parser.add_argument("-n", "--channels", type=int, default=4096, help="FACILE rows per request")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the input data")
    parser.add_argument("--json", action="store_true", help="send and receive FACILE's tensors as JSON")
    parser.add_argument("--compression", choices=("gzip", "deflate"), default=None, help="compress bodies")
    facile.add_reference_args(parser)
    args = parser.parse_args()
    reference = facile.FacileReference(args.weights, args.rtol, args.atol)

    client = httpclient.InferenceServerClient(args.url)
    try:
        if not client.is_server_live():
            print(f"FAILED: server at {args.url} is not live")
            return 1
        meta = client.get_server_metadata()
        print(f"server: {meta['name']} {meta['version']}, extensions: {', '.join(meta['extensions'])}")
        model = client.get_model_metadata(facile.MODEL)
        shapes = ", ".join(f"{t['name']} {t['datatype']} {t['shape']}" for t in model["inputs"])
        print(f"facile metadata: inputs {shapes}")
        ok = infer_facile(client, args, reference)
        if client.is_model_ready("simple"):
            ok &= infer_simple(client, args)
        else:
            print("simple: not served here, skipped (serve tests/models to include it)")
    except InferenceServerException as e:
        print(f"FAILED: {e}")
        return 1
    finally:
        client.close()
    if not ok:
        return 1
    print("PASS: http_infer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
