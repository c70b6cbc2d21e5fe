"""The zero-work ceiling: the most any Python grpc.aio Triton-protocol server can do here.

It speaks just enough of Triton's protocol for perf_analyzer (ServerMetadata, ModelMetadata,
ModelConfig, ModelInfer, ModelStreamInfer, and the system shared-memory calls) for the models
described by one or more config.pbtxt files, and answers every ModelInfer with zero-filled
outputs of the right size: no validation, no queue, no batching, no backend, no statistics.
Same protos and same grpc.aio as fpgaserve, so the gap between the two is fpgaserve's own work.

With ``--shared-memory`` clients (perf_analyzer ``--shared-memory system``) the regions are
accepted and never opened: inputs in shared memory are not read, and outputs requested into a
region come back as tensor metadata without contents (zero work, as everywhere here).

``--processes N`` runs N such servers on one port (SO_REUSEPORT, each its own process and
event loop; the kernel spreads the connections): the ceiling of N gRPC frontend processes.
``--count-dir DIR``: each server process counts the inference requests it answered in
``DIR/<pid>.count`` (8 bytes, little-endian int64, a shared mapping updated per request), so a
benchmark can count requests across processes without asking any of them.

    python tests/benchmarks/ceiling_server.py --config bitstreams/facile/config.pbtxt --port 18401
    python tests/benchmarks/ceiling_server.py --config a/config.pbtxt --config b/config.pbtxt \\
        --port 18401 --processes 2
"""

from __future__ import annotations

import argparse
import asyncio
import mmap
import os
import signal
import subprocess
import sys
from pathlib import Path

import grpc

from fpgaserve.protos import SERVICE_NAME, service_methods
from fpgaserve.protos import inference as pb
from fpgaserve.server.model_config import input_specs, normalize, output_specs, read_config_file

INT32_MAX = 2**31 - 1


class _Model:
    def __init__(self, config):
        self.config = config
        self.name = config.name
        self.outputs = list(output_specs(config).values())
        self.inputs = list(input_specs(config).values())
        self.batched = config.max_batch_size > 0
        self._zeros: dict[int, list[bytes]] = {}

    def zero_outputs(self, batch: int) -> list[bytes]:
        if batch not in self._zeros:
            sizes = []
            for spec in self.outputs:
                n = batch if self.batched else 1
                for d in spec.dims:
                    n *= max(d, 1)
                sizes.append(bytes(n * max(spec.datatype.itemsize, 1)))
            self._zeros[batch] = sizes
        return self._zeros[batch]


class CeilingServicer:
    def __init__(self, configs, counter=None):
        self.models = {c.name: _Model(c) for c in configs}
        self.default = next(iter(self.models.values()))
        self._count = counter  # memoryview of one int64, or None

    def _model(self, name: str) -> _Model:
        return self.models.get(name, self.default)

    def _response(self, request):
        if self._count is not None:
            self._count[0] += 1
        m = self._model(request.model_name)
        batch = request.inputs[0].shape[0] if (m.batched and request.inputs and request.inputs[0].shape) else 1
        response = pb.ModelInferResponse(model_name=m.name, model_version="1", id=request.id)
        in_shm = {o.name for o in request.outputs if "shared_memory_region" in o.parameters}
        zeros = m.zero_outputs(batch)
        for spec, data in zip(m.outputs, zeros):
            t = response.outputs.add()
            t.name = spec.name
            t.datatype = spec.datatype.wire
            t.shape.extend(([batch] if m.batched else []) + [max(d, 1) for d in spec.dims])
            # one raw entry per output, empty when it went to shared memory (as fpgaserve and
            # Triton answer; clients index raw_output_contents by output position)
            response.raw_output_contents.append(b"" if spec.name in in_shm else data)
        return response

    async def ModelInfer(self, request, context):
        return self._response(request)

    async def ModelStreamInfer(self, request_iterator, context):
        async for request in request_iterator:
            msg = pb.ModelStreamInferResponse()
            msg.infer_response.CopyFrom(self._response(request))
            msg.infer_response.parameters["triton_final_response"].bool_param = True
            yield msg

    async def ServerMetadata(self, request, context):
        return pb.ServerMetadataResponse(name="triton", version="ceiling", extensions=["system_shared_memory"])

    async def ModelMetadata(self, request, context):
        m = self._model(request.name)
        r = pb.ModelMetadataResponse(name=m.name, versions=["1"], platform="ceiling")
        batch = [-1] if m.batched else []
        for specs, dst in ((m.inputs, r.inputs), (m.outputs, r.outputs)):
            for s in specs:
                t = dst.add()
                t.name, t.datatype = s.name, s.datatype.wire
                t.shape.extend(batch + list(s.dims))
        return r

    async def ModelConfig(self, request, context):
        r = pb.ModelConfigResponse()
        r.config.CopyFrom(self._model(request.name).config)
        return r

    async def ServerLive(self, request, context):
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request, context):
        return pb.ServerReadyResponse(ready=True)

    async def ModelReady(self, request, context):
        return pb.ModelReadyResponse(ready=True)

    # system shared memory: accepted, never opened (see the module docstring)
    async def SystemSharedMemoryRegister(self, request, context):
        return pb.SystemSharedMemoryRegisterResponse()

    async def SystemSharedMemoryUnregister(self, request, context):
        return pb.SystemSharedMemoryUnregisterResponse()

    async def SystemSharedMemoryStatus(self, request, context):
        return pb.SystemSharedMemoryStatusResponse()

    def generic_handler(self):
        handlers = {}
        for name, req_cls, resp_cls, client_stream, _server_stream in service_methods(SERVICE_NAME):
            fn = getattr(self, name, None)
            if fn is None:
                continue
            make = grpc.stream_stream_rpc_method_handler if client_stream else grpc.unary_unary_rpc_method_handler
            handlers[name] = make(
                fn, request_deserializer=req_cls.FromString, response_serializer=resp_cls.SerializeToString
            )
        return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)


def _counter(count_dir: Path | None):
    """A memoryview of one int64 in ``count_dir/<pid>.count`` (a shared file mapping), or None."""
    if count_dir is None:
        return None
    count_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(count_dir / f"{os.getpid()}.count", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, 8)
        mapping = mmap.mmap(fd, 8)
    finally:
        os.close(fd)
    return memoryview(mapping).cast("q")


async def serve(config_paths: list[Path], port: int, address: str, reuse_port: bool, count_dir: Path | None) -> None:
    configs = []
    for path in config_paths:
        config = read_config_file(path)
        normalize(config, config.name or path.parent.name)
        configs.append(config)
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", INT32_MAX),
            ("grpc.max_send_message_length", INT32_MAX),
            ("grpc.so_reuseport", int(reuse_port)),
        ]
    )
    server.add_generic_rpc_handlers((CeilingServicer(configs, _counter(count_dir)).generic_handler(),))
    if server.add_insecure_port(f"{address}:{port}") == 0:
        raise SystemExit(f"cannot bind {address}:{port}")
    await server.start()
    names = ", ".join(f"'{c.name}'" for c in configs)
    print(f"ceiling server for {names} on {address}:{port} (pid {os.getpid()})", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(grace=1)


def _run_processes(args) -> int:
    """N single-process ceilings on one port (SO_REUSEPORT); SIGTERM/SIGINT stop them all."""
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--port",
        str(args.port),
        "--address",
        args.address,
        "--processes",
        "1",
        "--reuse-port",
    ]
    for c in args.config:
        cmd += ["--config", str(c)]
    if args.count_dir is not None:
        cmd += ["--count-dir", str(args.count_dir)]
    children = [subprocess.Popen(cmd) for _ in range(args.processes)]

    def forward(signum, _frame):
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    rc = 0
    for child in children:
        rc = rc or child.wait()
    return rc


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--config",
        type=Path,
        action="append",
        required=True,
        help="config.pbtxt of a model to impersonate (repeatable; the first answers unknown names)",
    )
    p.add_argument("--port", type=int, default=18401)
    p.add_argument("--address", default="127.0.0.1")
    p.add_argument("--processes", type=int, default=1, help="server processes sharing the port (SO_REUSEPORT)")
    p.add_argument(
        "--reuse-port",
        action="store_true",
        help="bind with SO_REUSEPORT (implied by --processes > 1; off: a taken port is an error)",
    )
    p.add_argument("--count-dir", type=Path, help="count answered inference requests in DIR/<pid>.count")
    args = p.parse_args()
    if args.processes > 1:
        sys.exit(_run_processes(args))
    asyncio.run(serve(args.config, args.port, args.address, args.reuse_port, args.count_dir))


if __name__ == "__main__":
    main()
