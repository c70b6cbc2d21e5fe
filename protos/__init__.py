"""fpgaserve's wire schema, loaded into a *private* descriptor pool.

Why not generated ``_pb2`` modules:
  * generated modules check the protobuf/grpcio versions they were generated with, so
    committed stubs break on other runtimes;
  * our messages must keep the proto package ``inference`` (it is part of the RPC path),
    which collides with tritonclient's generated modules in the default pool when both
    are imported into one process (tests do exactly that).

So the build (setup.py's ``build_py``, which every ``pip install`` and ``pip install -e``
runs) compiles ``*.proto`` beside this file with grpc_tools' protoc into one
FileDescriptorSet, ``descriptors-<hash>.binpb``; at import we add it to our own
``DescriptorPool`` and build message classes from it. Only field numbers reach the wire, so a
private pool is invisible to peers. No protoc runs at import: grpcio-tools is a build
requirement only.

A source checkout used through ``PYTHONPATH`` without being installed builds the file once
(and again after a .proto changes) with one command in the checkout, in an interpreter that
has ``grpcio-tools==1.81.1`` and setuptools::

    python setup.py build_protos

Until then, importing this package raises ImportError saying so. ``<hash>`` is a digest of
the .proto files, so a descriptor set compiled from other .proto contents is never loaded.

Usage::

    from fpgaserve.protos import inference, health
    req = inference.ModelInferRequest(model_name="simple")
    health.HealthCheckResponse.SERVING
"""

from __future__ import annotations

import types
from pathlib import Path

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper

from . import descriptor_file

PROTO_DIR = Path(__file__).resolve().parent
BUILD_COMMAND = "python setup.py build_protos"


def descriptor_path(proto_dir: Path = PROTO_DIR) -> Path:
    """Where the build writes the descriptors of the .proto files now in ``proto_dir``."""
    return descriptor_file.descriptor_path(proto_dir)


def _load_descriptor_set() -> descriptor_pb2.FileDescriptorSet:
    path = descriptor_path()
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        stale = sorted(p.name for p in PROTO_DIR.glob("descriptors-*.binpb"))
        why = (
            f"protos/ holds descriptors compiled from other .proto contents: {', '.join(stale)}"
            if stale
            else "the package was never built"
        )
        raise ImportError(
            f"fpgaserve.protos: {path} is missing ({why}). It is compiled from the .proto files at "
            f"build time: install the package (pip install . or pip install -e .), or in a source checkout "
            f"run `{BUILD_COMMAND}` in {PROTO_DIR.parent} (needs grpcio-tools==1.81.1 and setuptools)"
        ) from None
    fds = descriptor_pb2.FileDescriptorSet()
    fds.ParseFromString(data)
    return fds


POOL = descriptor_pool.DescriptorPool()
DESCRIPTOR_SET = _load_descriptor_set()
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
