#!/usr/bin/env python3
"""System shared memory: FACILE inputs read from, and outputs written to, POSIX shm regions.

    python client_examples/shared_memory_infer.py -u localhost:8001 [-n 4096]

The client must run on the server's machine (the regions live in /dev/shm), and the server
must be started with --allow-client-shm=true (off by default, as in tritonserver >= 26.04). Steps:
create two regions (tritonclient.utils.shared_memory), copy the input batch into one,
register both with the server, send a request whose input and output point at the regions
(the request itself carries no tensor bytes; the response carries none either), read the
result back out of shared memory, then unregister and destroy the regions.
Exits 1 on a wrong result or an error, and prints ``PASS: shared_memory_infer`` on success.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

import facile_reference as facile


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-u", "--url", default="localhost:8001", help="server gRPC address (default %(default)s)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print more details")
    parser.add_argument("-n", "--channels", type=int, default=4096, help="FACILE rows (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the input data")
    facile.add_reference_args(parser)
    args = parser.parse_args()
    reference = facile.FacileReference(args.weights, args.rtol, args.atol)

    x = facile.random_channels(args.channels, np.random.default_rng(args.seed))
    in_bytes = x.nbytes
    out_bytes = args.channels * 1 * 4  # [N, 1] FP32
    # Region names are what requests refer to; keys are the /dev/shm file names.
    # Both are made unique per process so concurrent runs do not collide.
    tag = f"{os.getpid()}"
    in_name, in_key = f"facile_input_{tag}", f"/fpgaserve_facile_input_{tag}"
    out_name, out_key = f"facile_output_{tag}", f"/fpgaserve_facile_output_{tag}"

    client = grpcclient.InferenceServerClient(args.url)
    in_handle = out_handle = None
    registered = []
    try:
        if not client.is_model_ready(facile.MODEL):
            print(f"FAILED: model '{facile.MODEL}' is not ready on {args.url}")
            return 1

        # 1. Create the regions and put the input batch into the input region.
        in_handle = shm.create_shared_memory_region(in_name, in_key, in_bytes)
        out_handle = shm.create_shared_memory_region(out_name, out_key, out_bytes)
        shm.set_shared_memory_region(in_handle, [x])

        # 2. Tell the server about them (it maps /dev/shm/<key> itself).
        for name, key, size in ((in_name, in_key, in_bytes), (out_name, out_key, out_bytes)):
            client.register_system_shared_memory(name, key, size)
            registered.append(name)
        status = client.get_system_shared_memory_status()
        listed = set(status.regions.keys())
        if not {in_name, out_name} <= listed:
            print(f"FAILED: registered regions missing from the status: {sorted(listed)}")
            return 1
        if args.verbose:
            print(f"  registered: {sorted(listed)}")

        # 3. Infer: tensors refer to (region, byte size, offset) instead of carrying data.
        inp = grpcclient.InferInput(facile.INPUT, list(x.shape), "FP32")
        inp.set_shared_memory(in_name, in_bytes)
        out = grpcclient.InferRequestedOutput(facile.OUTPUT)
        out.set_shared_memory(out_name, out_bytes)
        result = client.infer(facile.MODEL, [inp], outputs=[out])

        # The response describes the output but its bytes are in the output region.
        tensor = result.get_output(facile.OUTPUT)
        if tensor is None or list(tensor.shape) != [args.channels, 1] or tensor.datatype != "FP32":
            print(f"FAILED: unexpected output description: {tensor}")
            return 1
        y = shm.get_contents_as_numpy(out_handle, np.float32, list(tensor.shape))
        print(f"facile via shared memory: {args.channels} channels -> {facile.summary(y)}")
        problem = reference.check(x, y)
        if problem:
            print(f"FAILED: {problem}")
            return 1

        # 4. Unregister; the server forgets the regions.
        for name in list(registered):
            client.unregister_system_shared_memory(name)
            registered.remove(name)
        left = set(client.get_system_shared_memory_status().regions.keys()) & {in_name, out_name}
        if left:
            print(f"FAILED: still registered after unregister: {sorted(left)}")
            return 1
    except InferenceServerException as e:
        print(f"FAILED: {e}")
        return 1
    finally:
        for name in registered:  # only after an error
            try:
                client.unregister_system_shared_memory(name)
            except InferenceServerException:
                pass
        for handle in (in_handle, out_handle):
            if handle is not None:
                shm.destroy_shared_memory_region(handle)  # unlinks /dev/shm/<key>
        client.close()
    print("PASS: shared_memory_infer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
