"""The zero-work ceiling: the most any Python grpc.aio Triton-protocol server can do here.

It speaks just enough of Triton's protocol for perf_analyzer (ServerMetadata, ModelMetadata,
ModelConfig, ModelInfer, ModelStreamInfer) for one model described by a config.pbtxt, and
answers every ModelInfer with zero-filled outputs of the right size: no validation, no
queue, no batching, no backend, no statistics. Same protos, same grpc.aio, same server
options as fpgaserve, so the gap between the two is exactly fpgaserve's own work.

    python tests/benchmarks/ceiling_server.py --config bitstreams/facile/config.pbtxt --port 18401
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path

import grpc

from fpgaserve.protos import SERVICE_NAME, inference as pb, service_methods
from fpgaserve.server.model_config import input_specs, normalize, output_specs, read_config_file

INT32_MAX = 2**31 - 1


class CeilingServicer:
    def __init__(self, config):
        self.config = config
        self.name = config.name
        self.outputs = list(output_specs(config).values())
        self.inputs = list(input_specs(config).values())
        self.batched = config.max_batch_size > 0
        self._zeros: dict[int, list[bytes]] = {}

    def _zero_outputs(self, batch: int) -> list[bytes]:
        if batch not in self._zeros:
            sizes = []
            for spec in self.outputs:
                n = batch if self.batched else 1
                for d in spec.dims:
                    n *= max(d, 1)
                sizes.append(bytes(n * max(spec.datatype.itemsize, 1)))
            self._zeros[batch] = sizes
        return self._zeros[batch]

    def _response(self, request):
        batch = request.inputs[0].shape[0] if (self.batched and request.inputs) else 1
        response = pb.ModelInferResponse(model_name=self.name, model_version="1", id=request.id)
        for spec in self.outputs:
            t = response.outputs.add()
            t.name = spec.name
            t.datatype = spec.datatype.wire
            t.shape.extend(([batch] if self.batched else []) + [max(d, 1) for d in spec.dims])
        response.raw_output_contents.extend(self._zero_outputs(batch))
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
        return pb.ServerMetadataResponse(name="triton", version="ceiling", extensions=[])

    async def ModelMetadata(self, request, context):
        r = pb.ModelMetadataResponse(name=self.name, versions=["1"], platform="ceiling")
        batch = [-1] if self.batched else []
        for specs, dst in ((self.inputs, r.inputs), (self.outputs, r.outputs)):
            for s in specs:
                t = dst.add()
                t.name, t.datatype = s.name, s.datatype.wire
                t.shape.extend(batch + list(s.dims))
        return r

    async def ModelConfig(self, request, context):
        r = pb.ModelConfigResponse()
        r.config.CopyFrom(self.config)
        return r

    async def ServerLive(self, request, context):
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request, context):
        return pb.ServerReadyResponse(ready=True)

    async def ModelReady(self, request, context):
        return pb.ModelReadyResponse(ready=True)

    def generic_handler(self):
        handlers = {}
        for name, req_cls, resp_cls, client_stream, server_stream in service_methods(SERVICE_NAME):
            fn = getattr(self, name, None)
            if fn is None:
                continue
            make = grpc.stream_stream_rpc_method_handler if client_stream else grpc.unary_unary_rpc_method_handler
            handlers[name] = make(fn, request_deserializer=req_cls.FromString, response_serializer=resp_cls.SerializeToString)
        return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)


async def serve(config_path: Path, port: int, address: str) -> None:
    config = read_config_file(config_path)
    normalize(config, config.name)
    server = grpc.aio.server(
        options=[("grpc.max_receive_message_length", INT32_MAX), ("grpc.max_send_message_length", INT32_MAX)]
    )
    server.add_generic_rpc_handlers((CeilingServicer(config).generic_handler(),))
    server.add_insecure_port(f"{address}:{port}")
    await server.start()
    print(f"ceiling server for '{config.name}' on {address}:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(grace=1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path, required=True, help="config.pbtxt of the model to impersonate")
    p.add_argument("--port", type=int, default=18401)
    p.add_argument("--address", default="127.0.0.1")
    args = p.parse_args()
    asyncio.run(serve(args.config, args.port, args.address))


if __name__ == "__main__":
    main()
