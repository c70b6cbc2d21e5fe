#!/usr/bin/env python3
"""What CMSSW's SonicTriton client does with a server, replayed with tritonclient.grpc.

    python client_examples/sonic_like.py -u localhost:8001 [--events 3] [--channels 16000] [--shm]

The RPC sequence of SonicTriton (HeterogeneousCore/SonicTriton, release line of CMSSW 13-15):

1. RepositoryIndex: TritonService lists each server's models and routes a model to a
   server that has it (``models[].name``).
2. ModelConfig: TritonClient reads the ``model_repository_agents`` block (checksum agent
   parameters, compared with the local config.pbtxt); the config must be served verbatim.
3. ModelMetadata: input/output names, datatypes and shapes; with max_batch_size > 0 the
   leading dim is -1, and a request's shape is ``[rows] + shape[1:]``.
4. One unary ModelInfer per event in "rectangular" mode: FACILE sends one row per HCAL
   channel, about 16,000 rows (~3 MB) per request, raw FP32, no request id.
5. ModelStatistics around the events (client ``verbose``): ``model_stats[0]`` must exist.

With ``--shm``, tensors travel as SonicTriton's local fallback server (cmsTriton) sends them:
through system shared memory. Each input and output gets its own POSIX shared-memory object,
created exclusively (O_EXCL) under a name unique to the process (``<pid>_input<n>``,
``<pid>_output<n>``, no leading '/'), sized for the largest event, registered with the
server under that same name as region name and key, and reused for every event; requests
and responses then carry no tensor bytes. At the end the regions are unregistered and the
objects unlinked. Client and server must share /dev/shm (the same host, or a container run
with ``--ipc=host`` as cmsTriton does).

Checks every event's outputs (exact byte count per output, values against the numpy
reference), and that the server's ``inference_count`` grew by exactly the rows sent and
``execution_count``/success count by the number of events (so run it against a server
nobody else is using at the same time, or pass --no-stats-check).
Exits 1 on a wrong result or an error, and prints ``PASS: sonic_like`` on success.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException, triton_to_np_dtype

import facile_reference as facile


def model_stats(client, model: str):
    stats = client.get_inference_statistics(model)
    if not stats.model_stats:  # SonicTriton indexes model_stats[0] unconditionally
        raise SystemExit(f"FAILED: ModelStatistics for '{model}' returned no model_stats")
    return stats.model_stats[0]


def print_stats(label: str, s) -> None:
    st = s.inference_stats
    print(
        f"{label}: version {s.version}, inference_count {s.inference_count}, execution_count {s.execution_count}, "
        f"success {st.success.count} req / {st.success.ns} ns, queue {st.queue.ns} ns, "
        f"compute input/infer/output {st.compute_input.ns}/{st.compute_infer.ns}/{st.compute_output.ns} ns"
    )


class ShmTensors:
    """SonicTriton's system shared memory (TritonCpuShmResource): one region per tensor,
    region name = key = ``<pid>_<input|output><n>``, registered once and reused per event."""

    def __init__(self, client):
        self.client = client
        self.handles: dict[str, tuple[str, object, int]] = {}  # tensor -> (region, handle, bytes)
        self.registered: list[str] = []
        self.counts = {"input": 0, "output": 0}

    def add(self, tensor: str, kind: str, byte_size: int) -> None:
        region = f"{os.getpid()}_{kind}{self.counts[kind]}"
        self.counts[kind] += 1
        handle = shm.create_shared_memory_region(region, region, byte_size, create_only=True)
        self.handles[tensor] = (region, handle, byte_size)
        self.client.register_system_shared_memory(region, region, byte_size)
        self.registered.append(region)

    def region(self, tensor: str) -> tuple[str, object, int]:
        return self.handles[tensor]

    def close(self) -> None:
        """Unregister what is still registered (also after an error), then unlink the objects."""
        for region in self.registered:
            try:
                self.client.unregister_system_shared_memory(region)
            except InferenceServerException as e:
                print(f"FAILED: unregistering shared memory region '{region}': {e}")
        self.registered = []
        for _, handle, _ in self.handles.values():
            shm.destroy_shared_memory_region(handle)
        self.handles = {}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-u", "--url", default="localhost:8001", help="server gRPC address (default %(default)s)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print the config and per-event details")
    parser.add_argument("-m", "--model", default=facile.MODEL, help="model to run (default %(default)s)")
    parser.add_argument("--events", type=int, default=3, help="events, i.e. requests (default %(default)s)")
    parser.add_argument("--channels", type=int, default=16000, help="typical rows per event (default %(default)s)")
    parser.add_argument(
        "--compression",
        choices=("none", "gzip", "deflate"),
        default="none",
        help="per-call gRPC compression, as SonicTriton's 'compression' parameter",
    )
    parser.add_argument(
        "--timeout", type=float, default=None, help="per-request deadline in seconds (SonicTriton 'timeout')"
    )
    parser.add_argument("--no-stats-check", action="store_true", help="do not require exact statistics deltas")
    parser.add_argument(
        "--shm",
        action="store_true",
        help="inputs and outputs through system shared memory, as SonicTriton with its local fallback "
        "server (client and server must share /dev/shm)",
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed of the input data")
    facile.add_reference_args(parser)
    args = parser.parse_args()
    reference = facile.FacileReference(args.weights, args.rtol, args.atol) if args.model == facile.MODEL else None

    client = grpcclient.InferenceServerClient(args.url)
    regions = ShmTensors(client) if args.shm else None
    try:
        # 1. RepositoryIndex: is the model served here?
        index = client.get_model_repository_index()
        served = {m.name: m.state for m in index.models}
        print(f"RepositoryIndex: {len(served)} model(s): {', '.join(f'{n} ({s})' for n, s in sorted(served.items()))}")
        if served.get(args.model) != "READY":
            print(f"FAILED: '{args.model}' is not READY on {args.url} (SonicTriton would fall back to another server)")
            return 1

        # 2. ModelConfig: the checksum agent parameters, if the config has them.
        config = client.get_model_config(args.model).config
        agents = config.model_repository_agents.agents
        if agents:
            print("ModelConfig: model_repository_agents {")
            for agent in agents:
                params = ", ".join(f"{k}: {v}" for k, v in sorted(agent.parameters.items()))
                print(f"  agent {agent.name!r}: {params}")
            print("}")
        else:
            print("ModelConfig: no model_repository_agents block")
        max_batch = config.max_batch_size
        if args.verbose:
            print(f"  max_batch_size {max_batch}, platform {config.platform or config.backend!r}")

        # 3. ModelMetadata: tensor names, types and shapes; the leading -1 is the batch dim.
        metadata = client.get_model_metadata(args.model)
        if not metadata.inputs or not metadata.outputs:
            print("FAILED: metadata has no inputs or outputs (SonicTriton: ModelErrors)")
            return 1
        batched = max_batch > 0
        for t in list(metadata.inputs) + list(metadata.outputs):
            if batched and (not t.shape or t.shape[0] != -1):
                print(f"FAILED: metadata shape of '{t.name}' is {list(t.shape)}: no leading -1 batch dimension")
                return 1
            if any(d < 0 for d in t.shape[1 if batched else 0 :]):
                print(f"FAILED: '{t.name}' has variable dims {list(t.shape)}; this example only handles fixed ones")
                return 1
        print(
            "ModelMetadata: inputs "
            + ", ".join(f"{t.name} {t.datatype} {list(t.shape)}" for t in metadata.inputs)
            + "; outputs "
            + ", ".join(f"{t.name} {t.datatype} {list(t.shape)}" for t in metadata.outputs)
        )

        def row_bytes(t) -> int:
            return int(np.prod(t.shape[1 if batched else 0 :])) * np.dtype(triton_to_np_dtype(t.datatype)).itemsize

        if regions is not None:
            # sized for the largest event; SonicTriton grows a region when an event needs more
            most_rows = min(args.channels, max_batch) if batched else 1
            for kind, tensors in (("input", metadata.inputs), ("output", metadata.outputs)):
                for t in tensors:
                    regions.add(t.name, kind, most_rows * row_bytes(t))
            status = client.get_system_shared_memory_status()
            listed = set(status.regions.keys())
            names = [r for r, _, _ in regions.handles.values()]
            if not set(names) <= listed:
                print(f"FAILED: registered regions missing from the status: {sorted(listed)}")
                return 1
            print(f"SystemSharedMemoryRegister: {len(names)} region(s): {', '.join(names)}")

        before = model_stats(client, args.model)
        print_stats("ModelStatistics before", before)

        # 4. Events: one request each, outer dim = channels in the event (rectangular mode).
        rng = np.random.default_rng(args.seed)
        compression = None if args.compression == "none" else args.compression
        rows_sent = 0
        start = time.perf_counter()
        for event in range(args.events):
            rows = int(rng.integers(args.channels * 15 // 16, args.channels + 1))  # ~16k, varies per event
            if batched:
                rows = min(rows, max_batch)
            data = {}
            inputs = []
            for t in metadata.inputs:
                shape = ([rows] if batched else []) + list(t.shape[1 if batched else 0 :])
                dtype = triton_to_np_dtype(t.datatype)
                x = (
                    rng.standard_normal(shape).astype(dtype)
                    if np.issubdtype(dtype, np.floating)
                    else np.zeros(shape, dtype)
                )
                inp = grpcclient.InferInput(t.name, shape, t.datatype)
                if regions is None:
                    inp.set_data_from_numpy(x)
                else:
                    region, handle, _ = regions.region(t.name)
                    shm.set_shared_memory_region(handle, [np.ascontiguousarray(x)])
                    inp.set_shared_memory(region, x.nbytes)
                inputs.append(inp)
                data[t.name] = x
            outputs = []
            for t in metadata.outputs:
                out = grpcclient.InferRequestedOutput(t.name)
                if regions is not None:
                    region, _, _ = regions.region(t.name)
                    out.set_shared_memory(region, rows * row_bytes(t) if batched else row_bytes(t))
                outputs.append(out)
            result = client.infer(
                args.model, inputs, outputs=outputs, compression_algorithm=compression, client_timeout=args.timeout
            )
            response = result.get_response()
            values = {}
            for i, t in enumerate(metadata.outputs):
                shape = ([rows] if batched else []) + list(t.shape[1 if batched else 0 :])
                want = int(np.prod(shape)) * np.dtype(triton_to_np_dtype(t.datatype)).itemsize
                if regions is None:
                    # SonicTriton's TritonDataError: per output, bytes == rows x prod(shape) x size
                    got = len(response.raw_output_contents[i]) if i < len(response.raw_output_contents) else -1
                    if got != want:
                        print(f"FAILED: event {event}: output '{t.name}' has {got} bytes, expected {want}")
                        return 1
                    values[t.name] = result.as_numpy(t.name)
                else:
                    # the bytes are in the output region; the response only describes them
                    described = result.get_output(t.name)
                    if described is None or list(described.shape) != shape or described.datatype != t.datatype:
                        print(
                            f"FAILED: event {event}: output '{t.name}' described as {described}, expected "
                            f"{t.datatype} {shape} in shared memory"
                        )
                        return 1
                    _, handle, _ = regions.region(t.name)
                    # a copy: no array may point into a region when it is closed
                    values[t.name] = shm.get_contents_as_numpy(handle, triton_to_np_dtype(t.datatype), shape).copy()
            if reference is not None:
                problem = reference.check(data[facile.INPUT], values.get(facile.OUTPUT))
                if problem:
                    print(f"FAILED: event {event}: {problem}")
                    return 1
            rows_sent += rows
            if args.verbose:
                first = metadata.outputs[0].name
                print(f"  event {event}: {rows} channels -> {first} {facile.summary(values[first])}")
        elapsed = time.perf_counter() - start
        via = " through system shared memory" if regions is not None else ""
        print(f"{args.events} events, {rows_sent} channels in {elapsed:.3f} s{via}")

        # 5. ModelStatistics after: the counters grew by what we sent.
        after = model_stats(client, args.model)
        print_stats("ModelStatistics after ", after)
        if regions is not None:
            names = [r for r, _, _ in regions.handles.values()]
            regions.close()
            left = set(client.get_system_shared_memory_status().regions.keys()) & set(names)
            if left:
                print(f"FAILED: still registered after unregister: {sorted(left)}")
                return 1
            print(f"SystemSharedMemoryUnregister: {len(names)} region(s)")
    except (InferenceServerException, shm.SharedMemoryException) as e:
        print(f"FAILED: {e}")
        return 1
    finally:
        if regions is not None:
            regions.close()  # after an error: unregister and unlink what is left
        client.close()

    d_inf = after.inference_count - before.inference_count
    d_exec = after.execution_count - before.execution_count
    d_ok = after.inference_stats.success.count - before.inference_stats.success.count
    print(f"deltas: inference_count +{d_inf}, execution_count +{d_exec}, success count +{d_ok}")
    if not args.no_stats_check:
        # Without dynamic batching every request is one execution.
        dynamic = config.HasField("dynamic_batching")
        if d_inf != rows_sent or d_ok != args.events or (not dynamic and d_exec != args.events):
            print(
                f"FAILED: statistics do not add up: expected inference_count +{rows_sent}, success +{args.events}"
                + ("" if dynamic else f", execution_count +{args.events}")
            )
            return 1
    print("PASS: sonic_like")
    return 0


if __name__ == "__main__":
    sys.exit(main())
