"""fpgaserve's wire schema, loaded into a *private* descriptor pool.

Why not generated ``_pb2`` modules:
  * generated modules check the protobuf/grpcio versions they were generated with, so
    committed stubs break on other runtimes;
  * our messages must keep the proto package ``inference`` (it is part of the RPC path),
    which collides with tritonclient's generated modules in the default pool when both
    are imported into one process (tests do exactly that).

So at import we compile ``*.proto`` beside this file into a FileDescriptorSet with
grpc_tools' bundled protoc, add it to our own ``DescriptorPool`` and build message classes
from it. Only field numbers reach the wire, so a private pool is invisible to peers.

Usage::

    from fpgaserve.protos import inference, health
    req = inference.ModelInferRequest(model_name="simple")
    health.HealthCheckResponse.SERVING
"""

from __future__ import annotations

import os
import tempfile
import types
from pathlib import Path

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper

PROTO_DIR = Path(__file__).resolve().parent
PROTO_FILES = ("model_config.proto", "grpc_service.proto", "health.proto")


def _compile_descriptor_set() -> descriptor_pb2.FileDescriptorSet:
    # imported lazily: only needed once per process
    import grpc_tools
    from grpc_tools import protoc

    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "fds.pb")
        args = [
            "protoc",
            f"-I{PROTO_DIR}",
            f"-I{well_known}",
            f"--descriptor_set_out={out}",
            "--include_imports",
            *PROTO_FILES,
        ]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed to compile {PROTO_FILES} in {PROTO_DIR}")
        fds = descriptor_pb2.FileDescriptorSet()
        with open(out, "rb") as f:
            fds.ParseFromString(f.read())
    return fds


POOL = descriptor_pool.DescriptorPool()
DESCRIPTOR_SET = _compile_descriptor_set()
for _file in DESCRIPTOR_SET.file:
    POOL.Add(_file)


def message_class(full_name: str):
    """The message class for a fully-qualified name in our private pool."""
    return message_factory.GetMessageClass(POOL.FindMessageTypeByName(full_name))


def _namespace(package: str) -> types.SimpleNamespace:
    ns = types.SimpleNamespace()
    for fdp in DESCRIPTOR_SET.file:
        if fdp.package != package:
            continue
        fd = POOL.FindFileByName(fdp.name)
        for name, desc in fd.message_types_by_name.items():
            setattr(ns, name, message_factory.GetMessageClass(desc))
        for name, desc in fd.enum_types_by_name.items():
            setattr(ns, name, EnumTypeWrapper(desc))
    return ns


#: messages of package ``inference`` (grpc_service.proto and model_config.proto)
inference = _namespace("inference")
#: messages of package ``grpc.health.v1``
health = _namespace("grpc.health.v1")

SERVICE_NAME = "inference.GRPCInferenceService"
HEALTH_SERVICE_NAME = "grpc.health.v1.Health"


def service_methods(service_full_name: str):
    """[(method name, request class, response class, client_streaming, server_streaming)]."""
    sd = POOL.FindServiceByName(service_full_name)
    return [
        (
            m.name,
            message_factory.GetMessageClass(m.input_type),
            message_factory.GetMessageClass(m.output_type),
            *_streaming_flags(m),
        )
        for m in sd.methods
    ]


def _streaming_flags(method) -> tuple[bool, bool]:
    """(client_streaming, server_streaming) of a MethodDescriptor.

    upb and current pure-Python descriptors expose both as attributes; older runtimes do
    not, so fall back to the MethodDescriptorProto rather than silently reporting unary
    (which would turn the bidi ModelStreamInfer into a unary RPC).
    """
    try:
        return bool(method.client_streaming), bool(method.server_streaming)
    except AttributeError:
        mdp = descriptor_pb2.MethodDescriptorProto()
        method.CopyToProto(mdp)
        return mdp.client_streaming, mdp.server_streaming
