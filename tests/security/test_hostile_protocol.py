"""Hostile clients against a real ``fpgaserve`` process: a protocol fuzzer and a memory-bomb test.

**Protocol fuzzer** (``test_protocol_fuzzer``). One server serves the conformance models and the
bundled hls4ml models in the default ``none`` control mode (so load/unload are refused and no
case can change what later checks rely on). A raw ``grpc.insecure_channel`` with identity
serializers sends arbitrary bytes to every RPC of ``inference.GRPCInferenceService`` and to
``grpc.health.v1.Health/Check``. Cases start from valid seed messages (built with tritonclient's
generated classes) and are mutated

* byte-wise: bit flips, random overwrites, inserted/deleted/duplicated ranges, truncation,
  splices and concatenations of seeds (of any RPC), interesting byte runs;
* on the wire tree: varints set to extreme values or encoded over-long, lying length prefixes,
  wrong wire types, field numbers changed, fields dropped/duplicated/reordered, invalid UTF-8
  in strings, unknown fields, nested-group bombs;
* structurally, on the parsed message: huge/negative/zero/overflowing shape dims, random
  datatypes, random parameter kinds on known keys (sequence_id, priority, timeout,
  shared_memory_*, classification...), hostile strings (NUL, newlines, 100 KB), version
  strings of thousands of digits, model names with '/' and '..', extra/missing raw contents,
  BYTES inputs declaring 2**40 elements with a tiny payload.

Every answer must have a status other than UNKNOWN (and no hang: each call has a deadline),
a code from an allowed set (INTERNAL only with the texts Triton uses it for), a message of at
most 2048+100 bytes that does not look like a Python exception (traceback, repr, gRPC's
"Exception deserializing"), and an OK answer must parse (for ``simple`` and ``simple_identity``
it must also be the right result, for ModelReady the right readiness). Where Triton's answer
is known whatever else the request holds, it is checked too: a version string std::stol
refuses (or a negative one) gets INVALID_ARGUMENT before anything else, the model name
included (observed on Triton 2.51). ModelStreamInfer gets batches of mutated requests on one
stream: every request must be answered exactly once, errors in-stream, with the request id
(or, for bytes that do not parse, the id the message still carries). Every 100 cases the
server must be live and compute ``simple`` exactly.

The per-RPC case counts and status-code histograms are printed (``-s`` shows them), with the
RNG seed. Environment:

* ``FPGASERVE_FUZZ_CASES``: number of cases (default 20000: about 15 s here);
* ``FPGASERVE_FUZZ_SEED``: RNG seed (default fixed), to replay a run.

A long run: ``FPGASERVE_FUZZ_CASES=200000 .venv/bin/python -m pytest -q -s tests/security/test_hostile_protocol.py``

**Memory bomb** (``test_memory_bomb_requests_are_rejected_without_growing_rss``): 1000 small
requests that declare enormous tensors (BYTES ``[1, 2**30]`` with 10 bytes, FP32/INT32 with
huge shapes, typed contents with huge shapes, shapes whose byte size overflows int64) must all
get INVALID_ARGUMENT, the server's RSS must stay within 50 MiB of its warmed-up baseline, and
a known-good request must still work.

Plus fixed cases: LogSettings refuses ``log_file`` (the fuzzer never sends it), a malformed
stream message is answered with the id it still carries, and hostile requests whose answer
from Triton 2.51 is known exactly (observed with the reference tritonserver, .tools/tritonserver)
get that answer: version strings std::stol refuses, or any version string with an unknown
model; shared-memory parameters of the wrong kind, without a region, with typed contents or
with classification; classification <= 0; triton_enable_empty_final_response not a bool.
"""

from __future__ import annotations

import copy
import os
import random
import re
import struct
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message
from tritonclient.grpc import service_pb2

from support.server_process import BUNDLED_REPO, CONFORMANCE_REPO, ServerProcess

# ----------------------------------------------------------------------------- settings

FUZZ_CASES = int(os.environ.get("FPGASERVE_FUZZ_CASES", "20000"))
FUZZ_SEED = int(os.environ.get("FPGASERVE_FUZZ_SEED", "20251124"))
HEALTH_EVERY = 100  # cases between liveness + known-good inference checks
KEEP_EXAMPLES = 5  # failing cases kept (and written out) per kind of problem
CALL_DEADLINE_S = 30.0  # only catches hangs; a busy machine answers in milliseconds
STREAM_DEADLINE_S = 60.0
MAX_MESSAGE_BYTES = 2048 + 100  # the server bounds client-visible texts at 2048 UTF-8 bytes

SERVICE = "inference.GRPCInferenceService"
HEALTH_CHECK = "Health/Check"
STREAM = "ModelStreamInfer"
LARGE = -1  # grpc channel option: no message size limit on our side

# ----------------------------------------------------------------------------- messages and RPCs


def _health_messages():
    """grpc.health.v1 request/response classes (tritonclient has none): a private pool, so
    nothing collides with the server's or anybody else's definitions. The response's enum is
    declared as int32, which is the same on the wire."""
    fdp = descriptor_pb2.FileDescriptorProto(name="hostile_health.proto", package="grpc.health.v1", syntax="proto3")
    for name, ftype, fname in (
        ("HealthCheckRequest", FieldDescriptor.TYPE_STRING, "service"),
        ("HealthCheckResponse", FieldDescriptor.TYPE_INT32, "status"),
    ):
        m = fdp.message_type.add(name=name)
        m.field.add(name=fname, number=1, type=ftype, label=FieldDescriptor.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return tuple(
        message_factory.GetMessageClass(pool.FindMessageTypeByName(f"grpc.health.v1.{n}"))
        for n in ("HealthCheckRequest", "HealthCheckResponse")
    )


HealthCheckRequest, HealthCheckResponse = _health_messages()


def _rpc_table() -> dict[str, tuple[str, type, type]]:
    """name -> (method path, request class, response class), for every RPC of the service."""
    table = {}
    for m in service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods:
        table[m.name] = (
            f"/{SERVICE}/{m.name}",
            getattr(service_pb2, m.input_type.name),
            getattr(service_pb2, m.output_type.name),
        )
    table[HEALTH_CHECK] = ("/grpc.health.v1.Health/Check", HealthCheckRequest, HealthCheckResponse)
    return table


RPCS = _rpc_table()
Infer = service_pb2.ModelInferRequest


def encode(msg: Message) -> bytes:
    """Serialized with map entries in key order: a seed replays the same bytes in every process."""
    return msg.SerializeToString(deterministic=True)


# ----------------------------------------------------------------------------- seeds

SHM_REGION = "fuzz_region"  # registered by the fixture on an object we create
SHM_BYTES = 4096


def bytes_payload(items: list[bytes]) -> bytes:
    """Triton's BYTES wire format: 4-byte little-endian length + data per element."""
    return b"".join(struct.pack("<I", len(x)) + x for x in items)


def infer_seed(
    model: str,
    tensors: list[tuple[str, str, list[int], list]],
    *,
    typed: bool = False,
    rid: str = "",
    outputs: list[str] | None = None,
    version: str = "",
) -> Infer:
    """A valid ModelInferRequest; ``tensors`` is [(name, datatype, shape, values)]."""
    req = Infer(model_name=model, model_version=version, id=rid)
    for name, datatype, shape, values in tensors:
        t = req.inputs.add(name=name, datatype=datatype, shape=shape)
        if datatype == "BYTES":
            if typed:
                t.contents.bytes_contents.extend(values)
            else:
                req.raw_input_contents.append(bytes_payload(values))
            continue
        dtype = {"INT32": "<i4", "INT8": "i1", "FP32": "<f4"}[datatype]
        array = np.asarray(values, dtype=dtype)
        if not typed:
            req.raw_input_contents.append(array.tobytes())
        elif datatype == "FP32":
            t.contents.fp32_contents.extend(array.tolist())
        else:
            t.contents.int_contents.extend(array.tolist())
    for name in outputs or ():
        req.outputs.add(name=name)
    return req


def _simple_tensors(datatype: str, batch: int = 1) -> list[tuple[str, str, list[int], list]]:
    in0 = [i % 100 for i in range(16 * batch)]
    in1 = [3] * (16 * batch)
    return [("INPUT0", datatype, [batch, 16], in0), ("INPUT1", datatype, [batch, 16], in1)]


def _string_tensors(batch: int = 1) -> list[tuple[str, str, list[int], list]]:
    in0 = [str(i).encode() for i in range(16 * batch)]
    in1 = [b"-7"] * (16 * batch)
    return [("INPUT0", "BYTES", [batch, 16], in0), ("INPUT1", "BYTES", [batch, 16], in1)]


def infer_seeds() -> list[Infer]:
    seeds = []
    facile_rows = [float(i % 7) / 7 for i in range(2 * 47)]
    for typed in (False, True):
        seeds += [
            infer_seed("simple", _simple_tensors("INT32"), typed=typed, rid="simple-1"),
            infer_seed("simple", _simple_tensors("INT32", 3), typed=typed, outputs=["OUTPUT1", "OUTPUT0"], version="1"),
            infer_seed("simple_int8", _simple_tensors("INT8"), typed=typed, rid="int8"),
            infer_seed("simple_string", _string_tensors(), typed=typed, rid="string"),
            infer_seed("simple_identity", [("INPUT0", "BYTES", [1, 3], [b"he\x00llo", b"", b"x" * 40])], typed=typed),
            infer_seed("facile", [("input", "FP32", [2, 47], facile_rows)], typed=typed, rid="facile"),
            infer_seed("jet_tagger", [("input", "FP32", [1, 16], [0.5] * 16)], typed=typed),
        ]
    # request parameters of every kind Triton knows
    req = infer_seed("simple", _simple_tensors("INT32"), rid="params")
    req.parameters["sequence_id"].int64_param = 42
    req.parameters["priority"].uint64_param = 1
    req.parameters["timeout"].int64_param = 1_000_000
    req.parameters["custom"].string_param = "value"
    req.parameters["flag"].bool_param = True
    req.parameters["triton_enable_empty_final_response"].bool_param = False
    seeds.append(req)
    req = infer_seed("facile", [("input", "FP32", [1, 47], facile_rows[:47])], rid="facile-params")
    req.parameters["priority"].int64_param = 0
    req.parameters["timeout"].int64_param = 5_000_000
    seeds.append(req)
    # classification on an INT32 and an FP32 output
    req = infer_seed("simple", _simple_tensors("INT32"), outputs=["OUTPUT0", "OUTPUT1"], rid="class")
    req.outputs[0].parameters["classification"].int64_param = 3
    seeds.append(req)
    req = infer_seed("facile", [("input", "FP32", [2, 47], facile_rows)], outputs=["output/BiasAdd"])
    req.outputs[0].parameters["classification"].int64_param = 1
    seeds.append(req)
    # shared memory: an unknown region for an input, our registered region for input and output
    req = infer_seed("simple", _simple_tensors("INT32")[:1], rid="shm-unknown")
    t = req.inputs.add(name="INPUT1", datatype="INT32", shape=[1, 16])
    t.parameters["shared_memory_region"].string_param = "no_such_region"
    t.parameters["shared_memory_byte_size"].int64_param = 64
    seeds.append(req)
    req = Infer(model_name="simple", id="shm-ours")
    for name, offset in (("INPUT0", 0), ("INPUT1", 64)):
        t = req.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        t.parameters["shared_memory_region"].string_param = SHM_REGION
        t.parameters["shared_memory_offset"].int64_param = offset
        t.parameters["shared_memory_byte_size"].int64_param = 64
    out = req.outputs.add(name="OUTPUT0")
    out.parameters["shared_memory_region"].string_param = SHM_REGION
    out.parameters["shared_memory_offset"].int64_param = 128
    out.parameters["shared_memory_byte_size"].int64_param = 64
    seeds.append(req)
    return seeds


def build_seeds(shm_key: str) -> dict[str, list[Message]]:
    pb = service_pb2
    seeds: dict[str, list[Message]] = {
        "ServerLive": [pb.ServerLiveRequest()],
        "ServerReady": [pb.ServerReadyRequest()],
        "ModelReady": [
            pb.ModelReadyRequest(name="simple"),
            pb.ModelReadyRequest(name="facile", version="1"),
            pb.ModelReadyRequest(name="no_such_model", version="2"),
        ],
        "ServerMetadata": [pb.ServerMetadataRequest()],
        "ModelMetadata": [
            pb.ModelMetadataRequest(name="simple"),
            pb.ModelMetadataRequest(name="facile", version="1"),
            pb.ModelMetadataRequest(name="simple_string"),
        ],
        "ModelConfig": [pb.ModelConfigRequest(name="simple"), pb.ModelConfigRequest(name="jet_tagger", version="1")],
        "ModelStatistics": [
            pb.ModelStatisticsRequest(),
            pb.ModelStatisticsRequest(name="simple"),
            pb.ModelStatisticsRequest(name="facile", version="1"),
        ],
        "ModelInfer": infer_seeds(),
        STREAM: infer_seeds(),
        "RepositoryIndex": [
            pb.RepositoryIndexRequest(),
            pb.RepositoryIndexRequest(ready=True),
            pb.RepositoryIndexRequest(repository_name="models"),
        ],
        "RepositoryModelLoad": [pb.RepositoryModelLoadRequest(model_name="simple")],
        "RepositoryModelUnload": [pb.RepositoryModelUnloadRequest(model_name="simple")],
        "SystemSharedMemoryStatus": [
            pb.SystemSharedMemoryStatusRequest(),
            pb.SystemSharedMemoryStatusRequest(name=SHM_REGION),
        ],
        "SystemSharedMemoryRegister": [
            pb.SystemSharedMemoryRegisterRequest(name="fuzz_other", key=shm_key, offset=0, byte_size=SHM_BYTES),
            pb.SystemSharedMemoryRegisterRequest(name="fuzz_part", key=shm_key, offset=1024, byte_size=512),
            pb.SystemSharedMemoryRegisterRequest(name="fuzz_missing", key=shm_key + "_missing", byte_size=64),
        ],
        "SystemSharedMemoryUnregister": [
            pb.SystemSharedMemoryUnregisterRequest(name="fuzz_other"),
            pb.SystemSharedMemoryUnregisterRequest(name="no_such_region"),
        ],
        "CudaSharedMemoryStatus": [
            pb.CudaSharedMemoryStatusRequest(),
            pb.CudaSharedMemoryStatusRequest(name="cuda_region"),
        ],
        "CudaSharedMemoryRegister": [
            pb.CudaSharedMemoryRegisterRequest(name="cuda_region", raw_handle=b"\x01" * 64, device_id=0, byte_size=1024)
        ],
        "CudaSharedMemoryUnregister": [
            pb.CudaSharedMemoryUnregisterRequest(),
            pb.CudaSharedMemoryUnregisterRequest(name="cuda_region"),
        ],
        "TraceSetting": [pb.TraceSettingRequest(), pb.TraceSettingRequest(model_name="simple")],
        "LogSettings": [pb.LogSettingsRequest()],
        HEALTH_CHECK: [HealthCheckRequest(), HealthCheckRequest(service=SERVICE)],
    }
    seeds["RepositoryModelLoad"][0].parameters["config"].string_param = '{"backend": "numpy"}'
    load = pb.RepositoryModelLoadRequest(model_name="fuzz_model")
    load.parameters["config"].string_param = '{"backend": "numpy", "max_batch_size": 0}'
    load.parameters["file:1/model.py"].bytes_param = b"class Model:\n    pass\n"
    seeds["RepositoryModelLoad"].append(load)
    trace = pb.TraceSettingRequest()
    trace.settings["trace_level"].value.append("OFF")
    trace.settings["trace_rate"].value.append("1000")
    seeds["TraceSetting"].append(trace)
    log = pb.LogSettingsRequest()
    log.settings["log_info"].bool_param = True
    log.settings["log_verbose_level"].uint32_param = 0
    log.settings["log_format"].string_param = "default"
    seeds["LogSettings"].append(log)
    return seeds


# ----------------------------------------------------------------------------- hostile values

INTERESTING_INTS = [
    0,
    1,
    -1,
    2,
    -2,
    3,
    8,
    9,
    16,
    17,
    47,
    48,
    255,
    256,
    4095,
    4096,
    4097,
    16384,
    16385,
    2**15,
    2**16,
    2**31 - 1,
    2**31,
    -(2**31),
    2**32,
    2**32 + 16,
    2**40,
    2**53 + 1,
    2**61,
    2**62,
    2**63 - 1,
    -(2**63),
    -(2**63) + 1,
]
INTERESTING_U64 = [2**63, 2**64 - 1]
INTERESTING_DOUBLES = [0.0, -0.0, 0.5, 1e308, -1e308, 5e-324, float("nan"), float("inf"), float("-inf")]
MODEL_NAMES = ["simple", "simple_int8", "simple_string", "simple_identity", "facile", "jet_tagger", "no_such_model"]
HOSTILE_STRINGS = [
    "",
    " ",
    "simple/",
    "../simple",
    "simple/../simple",
    "..",
    ".",
    "/",
    "\\",
    "/etc/passwd",
    "simple\n",
    "simple\r\nx-injected: 1",
    "a\x00b",
    "\x00",
    "\x7f",
    "\x1b[31mred",
    "\u2028",
    "\u0085",
    "\ufeffsimple",
    "é" * 3000,
    "x" * 100_000,
    "%s%s%n%x",
    "{0}{1}",
    "'\"`",
    "\U0001f600" * 700,
    "INPUT0",
    "OUTPUT0",
    "1" * 5000,
]
VERSION_STRINGS = [
    "",
    "1",
    "2",
    "0",
    "-1",
    "+1",
    " 1",
    "1 ",
    "01",
    "1abc",
    "abc",
    "9" * 19,
    "9" * 20,
    "9" * 5000,
    "-" + "9" * 5000,
    "1" + "0" * 3000,
    "\x001",
    "1\n",
    "0x1",
    "1e3",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "-9223372036854775809",
    "   ",
    "+",
    "-",
    "\x0b1",
    "-0",
    "\u0661",
    "\u0661\u0662",
    "1\u0661",
    "\uff11",
    "\x1c1",
    "\u20031",
    "\xa01",  # not digits/blanks for std::stol
]
DATATYPES = [
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
    "BYTES",
    "BF16",
    "",
    "int32",
    "FP32 ",
    "STRING",
    "TYPE_INT32",
    "BYTES\x00",
    "\u00dc",
    "x" * 5000,
]
PARAM_KEYS = [
    "sequence_id",
    "sequence_start",
    "sequence_end",
    "priority",
    "timeout",
    "triton_enable_empty_final_response",
    "triton_grpc_error",
    "triton_other",
    "binary_data_output",
    "custom",
    "",
    "shared_memory_region",
    "shared_memory_offset",
    "shared_memory_byte_size",
    "classification",
    "a\x00b",
    "k" * 3000,
    "headers",
    "config",
    "file:1/model.py",
]
TENSOR_PARAM_KEYS = [
    "shared_memory_region",
    "shared_memory_offset",
    "shared_memory_byte_size",
    "classification",
    "binary_data_size",
    "binary_data",
    "",
    "x",
]
LOG_KEYS = ["log_info", "log_warning", "log_error", "log_verbose_level", "log_format", "log_unknown", ""]
TRACE_KEYS = ["trace_level", "trace_rate", "trace_count", "log_frequency", "trace_mode", "trace_file", "unknown", ""]
REGION_NAMES = [SHM_REGION, "fuzz_other", "fuzz_part", "no_such_region", ""]
INTERESTING_BYTES = [
    b"",
    b"\x00",
    b"\xff" * 10,
    b"\x80" * 11,
    b"\xc3",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"\xfe\xff",
    b"\x0b" * 200,
    b"\x7f\xff\xff\xff",
    b"\xff\xff\xff\xff",
    bytes(range(256)),
]


def hostile_int(rng: random.Random, fd: FieldDescriptor) -> int:
    values = INTERESTING_INTS + [rng.randint(-(2**63), 2**63 - 1)]
    if fd.cpp_type in (FieldDescriptor.CPPTYPE_UINT32, FieldDescriptor.CPPTYPE_UINT64):
        values = [v for v in values if v >= 0] + INTERESTING_U64
    bits = 32 if fd.cpp_type in (FieldDescriptor.CPPTYPE_INT32, FieldDescriptor.CPPTYPE_UINT32) else 64
    signed = fd.cpp_type in (FieldDescriptor.CPPTYPE_INT32, FieldDescriptor.CPPTYPE_INT64)
    lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    return min(max(rng.choice(values), lo), hi)


def hostile_string(rng: random.Random, name: str, context: str) -> str:
    """A string for field ``name`` of message ``context``: mostly values that mean something
    there (model names, versions, keys), sometimes plain hostile text."""
    if rng.random() < 0.3:
        return rng.choice(HOSTILE_STRINGS)
    if name == "key" and context.endswith("SettingsEntry"):
        return rng.choice(LOG_KEYS if "LogSettings" in context else TRACE_KEYS)
    if name == "key" and context.endswith("ParametersEntry"):
        return rng.choice(PARAM_KEYS + TENSOR_PARAM_KEYS)
    if name == "key":  # shm key: ours, missing, or invalid; never an object that exists elsewhere
        return rng.choice(["/fpgaserve_fuzz_missing", "", "/", "//x", "/..", "a/b", "k" * 300])
    if name in ("version", "model_version"):
        return rng.choice(VERSION_STRINGS)
    if name == "datatype":
        return rng.choice(DATATYPES)
    if name in ("model_name", "name") and "SharedMemory" in context:
        return rng.choice(REGION_NAMES)
    if name in ("model_name", "name", "repository_name"):
        return rng.choice(MODEL_NAMES + ["INPUT0", "INPUT1", "OUTPUT0", "OUTPUT1", "input", "output/BiasAdd"])
    if name == "string_param":
        return rng.choice(REGION_NAMES + ["", "true", "42", "default", "ISO8601", "{}", "x" * 100_000])
    if name == "value":  # a TraceSetting value
        return rng.choice(["OFF", "ON", "TIMESTAMPS", "TENSORS", "1000", "-1", "0", "triton", "opentelemetry"])
    return rng.choice(HOSTILE_STRINGS + [rng.choice(MODEL_NAMES)])


def hostile_bytes(rng: random.Random) -> bytes:
    r = rng.random()
    if r < 0.3:
        return rng.choice(INTERESTING_BYTES)
    if r < 0.6:
        return bytes_payload([rng.randbytes(rng.randint(0, 8)) for _ in range(rng.randint(0, 20))])
    if r < 0.95:
        return rng.randbytes(rng.randint(0, 256))
    return rng.randbytes(65536)


def hostile_scalar(rng: random.Random, fd: FieldDescriptor, context: str):
    ct = fd.cpp_type
    if ct == FieldDescriptor.CPPTYPE_STRING:
        if fd.type == FieldDescriptor.TYPE_BYTES:
            return hostile_bytes(rng)
        return hostile_string(rng, fd.name, context)
    if ct == FieldDescriptor.CPPTYPE_BOOL:
        return rng.random() < 0.5
    if ct in (FieldDescriptor.CPPTYPE_DOUBLE, FieldDescriptor.CPPTYPE_FLOAT):
        return rng.choice(INTERESTING_DOUBLES)
    if ct == FieldDescriptor.CPPTYPE_ENUM:
        return rng.choice([0, 1, 2, 3, 99, -1, 2**31 - 1])
    return hostile_int(rng, fd)


# ----------------------------------------------------------------------------- structural mutations


def _is_map(fd: FieldDescriptor) -> bool:
    return fd.message_type is not None and fd.message_type.GetOptions().map_entry


def mutate_generic(rng: random.Random, msg: Message, depth: int = 0) -> None:
    """Set one field anywhere in ``msg`` (chosen at random, recursively) to a hostile value."""
    fields = msg.DESCRIPTOR.fields
    if not fields or depth > 4:
        return
    fd = rng.choice(fields)
    context = msg.DESCRIPTOR.full_name
    container = getattr(msg, fd.name)
    if _is_map(fd):
        key_fd, value_fd = fd.message_type.fields_by_name["key"], fd.message_type.fields_by_name["value"]
        if container and rng.random() < 0.15:
            del container[rng.choice(sorted(container))]
            return
        key = hostile_scalar(rng, key_fd, fd.message_type.full_name)
        if value_fd.message_type is not None:
            mutate_generic(rng, container[key], depth + 1)
        else:
            container[key] = hostile_scalar(rng, value_fd, context)
    elif fd.is_repeated:
        r = rng.random()
        if fd.message_type is not None:
            if container and r < 0.6:
                mutate_generic(rng, rng.choice(container), depth + 1)
            elif container and r < 0.7:
                del container[rng.randrange(len(container))]
            else:
                mutate_generic(rng, container.add(), depth + 1)
        elif container and r < 0.4:
            container[rng.randrange(len(container))] = hostile_scalar(rng, fd, context)
        elif r < 0.5:
            del container[:]
        elif r < 0.6:  # many elements at once (e.g. a 64-dimensional shape)
            value = hostile_scalar(rng, fd, context)
            container.extend([value] * rng.choice([2, 64, 1000]))
        else:
            container.append(hostile_scalar(rng, fd, context))
    elif fd.message_type is not None:
        if rng.random() < 0.15:
            msg.ClearField(fd.name)
        else:
            mutate_generic(rng, container, depth + 1)
    else:
        setattr(msg, fd.name, hostile_scalar(rng, fd, context))


def _random_parameter(rng: random.Random, p: Message, key: str) -> None:
    """A random kind, with a value that is interesting for that kind (or no value at all)."""
    kind = rng.choice(["bool_param", "int64_param", "string_param", "double_param", "uint64_param", None])
    if kind is None:
        p.Clear()
    elif kind == "string_param":
        p.string_param = hostile_string(rng, "string_param", "")
    else:
        setattr(p, kind, hostile_scalar(rng, p.DESCRIPTOR.fields_by_name[kind], key))


def _some_tensor(rng: random.Random, req: Infer):
    if not req.inputs or rng.random() < 0.05:
        return req.inputs.add(name=rng.choice(["INPUT0", "INPUT1", "input"]), datatype="INT32", shape=[1, 16])
    return rng.choice(req.inputs)


def m_shape(rng: random.Random, req: Infer) -> None:
    t = _some_tensor(rng, req)
    r = rng.random()
    if r < 0.5 and t.shape:
        t.shape[rng.randrange(len(t.shape))] = rng.choice(INTERESTING_INTS)
    elif r < 0.65:
        t.shape.append(rng.choice(INTERESTING_INTS))
    elif r < 0.75 and t.shape:
        del t.shape[rng.randrange(len(t.shape))]
    else:
        t.shape[:] = [rng.choice(INTERESTING_INTS) for _ in range(rng.randint(0, 6))]


def m_bytes_bomb(rng: random.Random, req: Infer) -> None:
    """A BYTES input declaring an enormous element count with the payload it had (tiny)."""
    t = _some_tensor(rng, req)
    if rng.random() < 0.3:
        t.datatype = "BYTES"
    t.shape[:] = rng.choice([[1, 2**40], [2**40], [8, 2**40], [1, 2**30], [1, 2**62], [2**31, 2**33], [1, 2**63 - 1]])


def m_datatype(rng: random.Random, req: Infer) -> None:
    _some_tensor(rng, req).datatype = rng.choice(DATATYPES)


def m_request_parameter(rng: random.Random, req: Infer) -> None:
    key = rng.choice(PARAM_KEYS)
    _random_parameter(rng, req.parameters[key], key)


def m_tensor_parameter(rng: random.Random, req: Infer) -> None:
    target = rng.choice(req.outputs) if req.outputs and rng.random() < 0.4 else _some_tensor(rng, req)
    key = rng.choice(TENSOR_PARAM_KEYS)
    _random_parameter(rng, target.parameters[key], key)


def m_shared_memory(rng: random.Random, req: Infer) -> None:
    """A full shared-memory triple (region, offset, byte size) with hostile values."""
    target = rng.choice(req.outputs) if req.outputs and rng.random() < 0.4 else _some_tensor(rng, req)
    target.parameters["shared_memory_region"].string_param = rng.choice(REGION_NAMES + HOSTILE_STRINGS[:12])
    target.parameters["shared_memory_offset"].int64_param = rng.choice(INTERESTING_INTS)
    target.parameters["shared_memory_byte_size"].int64_param = rng.choice(INTERESTING_INTS + [64, 63, 65])


def m_names(rng: random.Random, req: Infer) -> None:
    r = rng.random()
    value = rng.choice(HOSTILE_STRINGS)
    if r < 0.35:
        req.model_name = value
    elif r < 0.6:
        req.id = value
    elif r < 0.85:
        _some_tensor(rng, req).name = value
    else:
        req.outputs.add(name=value)


def m_version(rng: random.Random, req: Infer) -> None:
    req.model_version = rng.choice(VERSION_STRINGS)


def m_raw(rng: random.Random, req: Infer) -> None:
    raw = req.raw_input_contents
    r = rng.random()
    if r < 0.25:
        raw.append(hostile_bytes(rng))
    elif r < 0.45 and raw:
        del raw[rng.randrange(len(raw))]
    elif r < 0.65 and raw:
        i = rng.randrange(len(raw))
        raw[i] = raw[i][: rng.randint(0, len(raw[i]))] if rng.random() < 0.5 else hostile_bytes(rng)
    elif r < 0.8 and raw:
        raw.append(raw[rng.randrange(len(raw))])
    else:
        del raw[:]


def m_typed(rng: random.Random, req: Infer) -> None:
    """Typed contents of a random field (sometimes next to raw contents, which is invalid)."""
    t = _some_tensor(rng, req)
    if rng.random() < 0.6:
        t.ClearField("contents")
    fd = rng.choice(t.contents.DESCRIPTOR.fields)
    getattr(t.contents, fd.name).extend(hostile_scalar(rng, fd, "") for _ in range(rng.choice([0, 1, 16, 17, 47])))
    if rng.random() < 0.5:
        del req.raw_input_contents[:]


def m_outputs(rng: random.Random, req: Infer) -> None:
    r = rng.random()
    if r < 0.2:
        del req.outputs[:]
    elif r < 0.4 and req.outputs:
        req.outputs.append(rng.choice(req.outputs))  # duplicate
    else:
        out = req.outputs.add(name=rng.choice(["OUTPUT0", "OUTPUT1", "output/BiasAdd", "output", "nope"]))
        if rng.random() < 0.6:
            _random_parameter(rng, out.parameters["classification"], "classification")


def m_inputs(rng: random.Random, req: Infer) -> None:
    r = rng.random()
    if r < 0.35 and req.inputs:
        req.inputs.append(rng.choice(req.inputs))  # duplicate input
    elif r < 0.7 and req.inputs:
        del req.inputs[rng.randrange(len(req.inputs))]
    else:
        req.inputs.add(
            name=rng.choice(HOSTILE_STRINGS + ["INPUT2"]),
            datatype=rng.choice(DATATYPES),
            shape=[rng.choice(INTERESTING_INTS)],
        )


def m_model(rng: random.Random, req: Infer) -> None:
    req.model_name = rng.choice(MODEL_NAMES)


def m_generic(rng: random.Random, msg: Message) -> None:
    mutate_generic(rng, msg)


INFER_MUTATIONS = [
    m_shape,
    m_shape,
    m_bytes_bomb,
    m_datatype,
    m_request_parameter,
    m_request_parameter,
    m_tensor_parameter,
    m_shared_memory,
    m_names,
    m_version,
    m_raw,
    m_raw,
    m_typed,
    m_outputs,
    m_inputs,
    m_model,
    m_generic,
    m_generic,
]


# ----------------------------------------------------------------------------- wire-level mutations


def varint(value: int, overlong: int = 0) -> bytes:
    """Protobuf varint of ``value`` (two's complement for negatives); ``overlong`` > 0 pads it
    with that many redundant continuation bytes (legal up to 10 bytes in all, invalid beyond)."""
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if not value:
            out.append(b)
            break
        out.append(b | 0x80)
    if overlong:
        out[-1] |= 0x80
        out += b"\x80" * (overlong - 1) + b"\x00"
    return bytes(out)


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("bad varint")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


@dataclass
class WireField:
    number: int
    wire: int
    value: object  # int (varint), bytes (fixed or opaque payload), list[WireField] (payload that parses)
    length_lie: int | None = None  # length prefix to write instead of the real one
    overlong: int = 0  # redundant continuation bytes in the value's varint (or the length prefix)
    tag_wire: int | None = None  # wire type to write in the tag instead of the real one
    raw: bytes | None = None  # bytes to write verbatim instead of the field (e.g. a group bomb)


def wire_decode(data: bytes, depth: int = 0) -> list[WireField]:
    """A well-formed message as a tree of fields (payloads that parse as messages are expanded)."""
    fields = []
    pos = 0
    while pos < len(data):
        tag, pos = read_varint(data, pos)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise ValueError("field 0")
        if wire == 0:
            value, pos = read_varint(data, pos)
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if pos + size > len(data):
                raise ValueError("truncated")
            value, pos = data[pos : pos + size], pos + size
        elif wire == 2:
            size, pos = read_varint(data, pos)
            if pos + size > len(data):
                raise ValueError("truncated")
            value, pos = data[pos : pos + size], pos + size
            if value and depth < 6:
                try:
                    value = wire_decode(value, depth + 1)
                except ValueError:
                    pass
        else:
            raise ValueError("group")
        fields.append(WireField(number, wire, value))
    return fields


def wire_encode(fields: list[WireField]) -> bytes:
    out = bytearray()
    for f in fields:
        if f.raw is not None:
            out += f.raw
            continue
        out += varint((f.number << 3) | (f.wire if f.tag_wire is None else f.tag_wire))
        if f.wire == 0:
            out += varint(f.value, f.overlong)
        elif f.wire in (1, 5):
            out += f.value
        else:
            payload = wire_encode(f.value) if isinstance(f.value, list) else f.value
            out += varint(len(payload) if f.length_lie is None else f.length_lie, f.overlong)
            out += payload
    return bytes(out)


def _wire_nodes(fields: list[WireField]) -> list[tuple[list, WireField]]:
    nodes = []
    for f in fields:
        nodes.append((fields, f))
        if isinstance(f.value, list):
            nodes += _wire_nodes(f.value)
    return nodes


def _group_bomb(depth: int) -> bytes:
    """Unknown field 999 as nested groups ``depth`` deep (parsers recurse into unknown groups)."""
    return varint((999 << 3) | 3) * depth + varint((999 << 3) | 4) * depth


def wire_mutate(rng: random.Random, data: bytes) -> bytes:
    try:
        tree = wire_decode(data)
    except ValueError:
        return data
    nodes = _wire_nodes(tree)
    lists = [tree] + [f.value for _, f in nodes if isinstance(f.value, list)]
    op = (
        rng.choice(
            [
                "length",
                "length",
                "varint",
                "overlong",
                "tag_wire",
                "number",
                "drop",
                "duplicate",
                "move",
                "payload",
                "payload",
                "unknown",
                "group_bomb",
            ]
        )
        if nodes
        else "unknown"
    )
    if op in ("unknown", "group_bomb") or not nodes:
        target = rng.choice(lists)
        if op == "group_bomb":
            bomb = WireField(999, 3, None, raw=_group_bomb(rng.choice([50, 99, 100, 101, 1000])))
            target.insert(rng.randint(0, len(target)), bomb)
            return wire_encode(tree)
        wire = rng.choice([0, 1, 2, 5])
        value = {0: rng.choice(INTERESTING_INTS), 1: rng.randbytes(8), 5: rng.randbytes(4)}.get(wire)
        number = rng.choice([rng.randint(1, 12), rng.randint(13, 5000), 2**29 - 1, 19000])
        target.insert(rng.randint(0, len(target)), WireField(number, wire, value if wire != 2 else hostile_bytes(rng)))
        return wire_encode(tree)
    parent, node = rng.choice(nodes)
    if op == "length" or (op == "payload" and node.wire != 2):
        if node.wire == 2:
            size = len(wire_encode(node.value)) if isinstance(node.value, list) else len(node.value)
            lies = [0, max(size - 1, 0), size + 1, size + 100, 2**31 - 1, 2**32, 2**63, 2**64 - 1]
            node.length_lie = rng.choice(lies)
        else:
            node.tag_wire = 2  # a "length" where a number is
    elif op == "varint":
        node.wire, node.value = 0, rng.choice(INTERESTING_INTS + INTERESTING_U64)
    elif op == "overlong":
        node.overlong = rng.choice([1, 3, 8, 9, 12, 40])
    elif op == "tag_wire":
        node.tag_wire = rng.choice([w for w in range(8) if w != node.wire])
    elif op == "number":
        node.number = rng.choice([rng.randint(1, 12), 2**29 - 1, 2**29, 19000, 2**32])
    elif op == "drop":
        parent.remove(node)
    elif op == "duplicate":
        parent.insert(rng.randint(0, len(parent)), copy.deepcopy(node))
    elif op == "move":
        parent.remove(node)
        parent.insert(rng.randint(0, len(parent)), node)
    else:  # payload: invalid UTF-8, random bytes, a truncated encoding of what was there
        encoded = wire_encode(node.value) if isinstance(node.value, list) else node.value
        node.value = rng.choice(
            [hostile_bytes(rng), encoded[: rng.randint(0, len(encoded))], encoded + rng.choice(INTERESTING_BYTES)]
        )
    return wire_encode(tree)


def byte_mutate(rng: random.Random, data: bytes, others: list[bytes]) -> bytes:
    buf = bytearray(data)
    op = rng.choice(
        [
            "flip",
            "flip",
            "overwrite",
            "insert",
            "delete",
            "truncate",
            "duplicate",
            "splice",
            "concat",
            "interesting",
            "garbage",
        ]
    )
    pos = rng.randint(0, len(buf))
    if op == "flip" and buf:
        for _ in range(rng.choice([1, 1, 2, 4, 16])):
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
    elif op == "overwrite" and buf:
        for _ in range(rng.randint(1, 8)):
            buf[rng.randrange(len(buf))] = rng.choice([0, 0xFF, 0x7F, 0x80, rng.randrange(256)])
    elif op == "insert":
        buf[pos:pos] = rng.randbytes(rng.randint(1, 64))
    elif op == "delete":
        del buf[pos : pos + rng.randint(1, 64)]
    elif op == "truncate":
        del buf[pos:]
    elif op == "duplicate" and buf:
        start = rng.randrange(len(buf))
        chunk = buf[start : start + rng.randint(1, 128)]
        buf[pos:pos] = chunk * rng.choice([1, 2, 50])
    elif op == "splice":
        other = rng.choice(others)
        buf = buf[:pos] + other[rng.randint(0, len(other)) :]
    elif op == "concat":  # protobuf merges concatenated messages: often valid, with repeated fields doubled
        buf += rng.choice(others)
    elif op == "interesting":
        buf[pos:pos] = rng.choice(INTERESTING_BYTES)
    else:
        buf = bytearray(rng.randbytes(rng.randint(0, 512)))
    return bytes(buf)


# ----------------------------------------------------------------------------- judging answers

ALLOWED_CODES = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.UNIMPLEMENTED,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}
# INTERNAL only where Triton answers INTERNAL too
INTERNAL_TEXTS = re.compile(
    r"^(Unable to open shared memory region: |Invalid shared memory region: |failed to load '"
    r"|shared memory size specified with the request for output .* should be at least )"
)
TRANSPORT_LIMIT = re.compile(r"(larger than max|message too large|exceeds .*limit)", re.IGNORECASE)
PYTHON_LEAKS = (
    "Traceback",
    "Error(",
    "object at 0x",
    "<class ",
    "Exception deserializing",
    "Exception calling",
    "Exception iterating",
    'File "',
    "Unexpected <class",
)
SERVER_BUG_TEXTS = ("internal error in ", "the server ran out of memory")


def parse_or_none(cls: type, data: bytes):
    try:
        return cls.FromString(data)
    except (DecodeError, RuntimeError, ValueError):
        return None


def text_problem(text: str, request: bytes) -> str | None:
    """What is wrong with an error text a client gets (None if nothing)."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_MESSAGE_BYTES:
        return f"error text of {size} bytes (bound: {MAX_MESSAGE_BYTES})"
    for leak in PYTHON_LEAKS:
        if leak in text and leak.encode() not in request:
            return f"error text looks like a Python exception ({leak!r})"
    for bug in SERVER_BUG_TEXTS:
        if bug in text:
            return f"server-side failure: {bug.strip()!r}"
    return None


def status_problem(rpc: str, code: grpc.StatusCode, details: str, request: bytes) -> str | None:
    if code == grpc.StatusCode.UNKNOWN:
        return "status UNKNOWN"
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return f"no answer within {CALL_DEADLINE_S:.0f} s (hang)"
    if code not in ALLOWED_CODES:
        return f"unexpected status {code.name}"
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and not TRANSPORT_LIMIT.search(details):
        return "RESOURCE_EXHAUSTED that is not a transport size limit"
    if code == grpc.StatusCode.INTERNAL and not INTERNAL_TEXTS.search(details):
        req = parse_or_none(RPCS[rpc][1], request) if rpc == "ModelInfer" else None
        # simple_string's model.py raises on strings that are not integers: a model error is
        # INTERNAL in Triton too
        if req is None or req.model_name != "simple_string" or "internal error in" in details:
            return "INTERNAL for a case Triton does not answer INTERNAL"
    return text_problem(details, request)


# Triton parses a request's version string with std::stol before it looks at anything else
# (even the model name); observed on Triton 2.51 for every RPC below, unary and streamed.
VERSION_FIELDS = {
    "ModelReady": ("name", "version"),
    "ModelMetadata": ("name", "version"),
    "ModelConfig": ("name", "version"),
    "ModelStatistics": ("name", "version"),
    "ModelInfer": ("model_name", "model_version"),
    STREAM: ("model_name", "model_version"),
}
NOT_AN_INTEGER = "failed to get model version from specified version string"
NEGATIVE_VERSION = "invalid model version specified"
_STOL = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)")  # strtol: C-locale blanks, sign, ASCII digits


def stol_version(version: str) -> int | None:
    """The version Triton reads from ``version`` (-1 for "", None if std::stol refuses it)."""
    if version == "":
        return -1
    m = _STOL.match(version)
    if m is None or len(m.group(1).lstrip("+-").lstrip("0")) > 19:  # out of range whatever the digits
        return None
    value = int(m.group(1))
    return value if -(2**63) <= value < 2**63 else None


def version_problem(version: str, code: grpc.StatusCode | None, details: str) -> str | None:
    """``code`` None: an in-stream answer (an error iff ``details``)."""
    value = stol_version(version)
    shown = repr(version[:24])
    if value is None or (value < 0 and version != ""):
        want = NOT_AN_INTEGER if value is None else NEGATIVE_VERSION
        if code not in (None, grpc.StatusCode.INVALID_ARGUMENT) or not details.startswith(want):
            got = f"{code.name if code else 'in-stream'} {details[:80]!r}"
            return f"version {shown}: Triton answers INVALID_ARGUMENT '{want} ...' first; got {got}"
    elif details.startswith((NOT_AN_INTEGER, NEGATIVE_VERSION)):
        return f"version {shown} (std::stol reads {value}) refused"
    return None


def ready_problem(req, ready: bool, models: dict[str, set[int]]) -> str | None:
    """ModelReady's answer for a valid version string (names with NUL are left out: Triton
    passes the name on as a C string)."""
    if "\x00" in req.name:
        return None
    value = stol_version(req.version)
    expected = req.name in models and (value == -1 or value in models[req.name])
    if ready != expected:
        return f"ModelReady({req.name[:30]!r}, {req.version[:24]!r}) answered ready={ready}"
    return None


def _raw_or_typed(req: Infer, index: int, tensor, dtype: str) -> np.ndarray | None:
    if req.raw_input_contents:
        if index >= len(req.raw_input_contents):
            return None
        return np.frombuffer(req.raw_input_contents[index], dtype=dtype)
    return np.array(tensor.contents.int_contents, dtype=dtype)


def infer_result_problem(req: Infer, resp) -> str | None:
    """An OK ModelInfer answer must be the right one: id echoed, and for ``simple`` OUTPUT0 =
    IN0 + IN1, OUTPUT1 = IN0 - IN1 (int32, wrapping); for ``simple_identity`` the same bytes."""
    if resp.id != req.id:
        return f"response id {resp.id[:40]!r} is not the request id {req.id[:40]!r}"
    if any("shared_memory_region" in t.parameters for t in req.inputs):
        return None
    if any("shared_memory_region" in o.parameters or "classification" in o.parameters for o in req.outputs):
        return None
    asked = [o.name for o in req.outputs]
    if req.model_name == "simple":
        arrays = {}
        for i, t in enumerate(req.inputs):
            a = _raw_or_typed(req, i, t, "<i4")
            if a is None:
                return None
            arrays[t.name] = a.reshape(list(t.shape))
        want = {"OUTPUT0": arrays["INPUT0"] + arrays["INPUT1"], "OUTPUT1": arrays["INPUT0"] - arrays["INPUT1"]}
        names = asked or ["OUTPUT0", "OUTPUT1"]
        got = [o.name for o in resp.outputs]
        if got != names:
            return f"outputs {got} for requested {names}"
        for o, raw in zip(resp.outputs, resp.raw_output_contents):
            expected = want[o.name]
            right = expected.astype("<i4").tobytes()
            if o.datatype != "INT32" or list(o.shape) != list(expected.shape) or raw != right:
                return f"wrong {o.name} from simple: shape {list(o.shape)}, {len(raw)} bytes"
    elif req.model_name == "simple_identity" and req.raw_input_contents and len(req.inputs) == 1 and not asked:
        if [o.name for o in resp.outputs] != ["OUTPUT0"] or resp.raw_output_contents[0] != req.raw_input_contents[0]:
            return "simple_identity did not return its input"
        if list(resp.outputs[0].shape) != list(req.inputs[0].shape):
            return "simple_identity changed the shape"
    return None


def salvageable_ids(data: bytes) -> set[str]:
    """The ids (field 3) a message that does not parse still carries, read from its top-level
    fields as far as they are well formed."""
    ids, pos = set(), 0
    try:
        while pos < len(data):
            tag, pos = read_varint(data, pos)
            number, wire = tag >> 3, tag & 7
            if wire == 0:
                _, pos = read_varint(data, pos)
            elif wire in (1, 5):
                pos += 8 if wire == 1 else 4
            elif wire == 2:
                size, pos = read_varint(data, pos)
                if pos + size > len(data):
                    break
                if number == 3:
                    ids.add(data[pos : pos + size].decode("utf-8", "replace")[:256])
                pos += size
            else:
                break
    except ValueError:
        pass
    return ids


# ----------------------------------------------------------------------------- the fuzzer


@dataclass
class Finding:
    rpc: str
    case: int
    problem: str
    code: str
    details: str
    request: bytes

    def describe(self) -> str:
        shown = self.request[:300].hex() + ("..." if len(self.request) > 300 else "")
        return (
            f"[{self.rpc} case {self.case}] {self.problem}\n    status {self.code}: {self.details[:300]!r}\n"
            f"    request ({len(self.request)} bytes): {shown}"
        )


class Fuzzer:
    def __init__(self, server: ServerProcess, seeds: dict[str, list[Message]], rng: random.Random):
        self.server = server
        self.rng = rng
        self.seeds = seeds
        self.seed_bytes = {rpc: [encode(m) for m in msgs] for rpc, msgs in seeds.items()}
        self.all_seed_bytes = [b for blobs in self.seed_bytes.values() for b in blobs]
        self.channel = grpc.insecure_channel(
            server.url, options=[("grpc.max_send_message_length", LARGE), ("grpc.max_receive_message_length", LARGE)]
        )
        index = service_pb2.RepositoryIndexResponse.FromString(
            self.call("RepositoryIndex", service_pb2.RepositoryIndexRequest(ready=True).SerializeToString())[2]
        )
        self.models: dict[str, set[int]] = defaultdict(set)  # ready models -> their versions
        for m in index.models:
            if m.version.isdigit():
                self.models[m.name].add(int(m.version))
        self.stats: dict[str, Counter] = defaultdict(Counter)
        self.problems = 0
        self.findings: dict[tuple, list[Finding]] = defaultdict(list)  # kind of problem -> the first examples
        self.case = 0

    # --- transport
    def call(self, rpc: str, data: bytes) -> tuple[grpc.StatusCode, str, bytes | None]:
        stub = self.channel.unary_unary(RPCS[rpc][0], request_serializer=None, response_deserializer=None)
        try:
            return grpc.StatusCode.OK, "", stub(data, timeout=CALL_DEADLINE_S)
        except grpc.RpcError as e:
            return e.code(), e.details() or "", None

    def stream(self, requests: list[bytes]) -> tuple[list[bytes], grpc.StatusCode, str]:
        stub = self.channel.stream_stream(RPCS[STREAM][0], request_serializer=None, response_deserializer=None)
        call = stub(iter(requests), timeout=STREAM_DEADLINE_S)
        responses: list[bytes] = []
        try:
            responses.extend(call)
        except grpc.RpcError as e:
            return responses, e.code(), e.details() or ""
        return responses, grpc.StatusCode.OK, ""

    # --- cases
    def mutated(self, rpc: str) -> bytes:
        rng = self.rng
        seed = rng.choice(self.seeds[rpc])
        r = rng.random()
        if r < 0.05:
            data = encode(seed)
        elif r < 0.5:
            msg = copy.deepcopy(seed)
            mutations = INFER_MUTATIONS if isinstance(msg, Infer) else [m_generic]
            for _ in range(rng.choice([1, 1, 2, 3])):
                rng.choice(mutations)(rng, msg)
            data = encode(msg)
            if rng.random() < 0.15:
                data = byte_mutate(rng, data, self.all_seed_bytes)
        elif r < 0.75:
            data = encode(seed)
            for _ in range(rng.choice([1, 1, 2])):
                data = wire_mutate(rng, data)
        else:
            data = encode(seed)
            for _ in range(rng.choice([1, 1, 2, 3])):
                data = byte_mutate(rng, data, self.all_seed_bytes)
        if rpc == "LogSettings":
            data = without_log_file(data)
        return data

    def record(
        self, rpc: str, outcome: str, problem: str | None, code: str, details: str, data: bytes, cases: int = 1
    ) -> None:
        self.stats[rpc][outcome] += cases
        if problem:
            self.problems += 1
            examples = self.findings[(rpc, re.sub(r"\d+|'[^']*'|\"[^\"]*\"", "#", problem), code)]
            if len(examples) < KEEP_EXAMPLES:
                examples.append(Finding(rpc, self.case, problem, code, details, data))

    def unary_case(self, rpc: str) -> None:
        self.case += 1
        data = self.mutated(rpc)
        code, details, response = self.call(rpc, data)
        problem = status_problem(rpc, code, details, data)
        req = parse_or_none(RPCS[rpc][1], data)
        if problem is None and req is not None and rpc in VERSION_FIELDS:
            problem = version_problem(getattr(req, VERSION_FIELDS[rpc][1]), code, details)
        if problem is None and code == grpc.StatusCode.OK:
            parsed = parse_or_none(RPCS[rpc][2], response)
            if parsed is None:
                problem = "OK response does not parse"
            elif rpc == "ModelInfer":
                problem = infer_result_problem(req, parsed)
            elif rpc == "ModelReady":
                problem = ready_problem(req, parsed.ready, self.models)
        self.record(rpc, code.name, problem, code.name, details, data)

    def stream_case(self, n: int) -> None:
        """``n`` mutated requests on one stream: exactly ``n`` answers, each id accounted for."""
        requests = [self.mutated(STREAM) for _ in range(n)]
        self.case += n
        responses, code, details = self.stream(requests)
        joined = b"".join(requests)
        if code != grpc.StatusCode.OK:
            self.record(STREAM, f"stream {code.name}", f"stream ended with {code.name}", code.name, details, joined, n)
            return
        if len(responses) != n:
            self.record(STREAM, "miscount", f"{len(responses)} responses to {n} requests", "OK", "", joined, n)
            return
        # which ids each request must be answered with: its id, or the ids a malformed one still carries
        expected: list[set[str]] = []
        versions: dict[str, str] = {}  # id -> version, of the requests that parse
        for data in requests:
            req = parse_or_none(Infer, data)
            expected.append({req.id} if req is not None else salvageable_ids(data) or {""})
            if req is not None:
                versions[req.id] = req.model_version
        claims = Counter(i for ids in expected for i in ids)
        answered: Counter = Counter()
        for raw in responses:
            msg = parse_or_none(service_pb2.ModelStreamInferResponse, raw)
            if msg is None:
                self.record(STREAM, "unparsable", "in-stream response does not parse", "OK", "", joined, n)
                return
            rid = msg.infer_response.id
            answered[rid] += 1
            problem = text_problem(msg.error_message, joined) if msg.error_message else None
            if problem is None and claims[rid] == 1 and rid in versions:  # the one request with this id
                problem = version_problem(versions[rid], None, msg.error_message)
            outcome = "in-stream error" if msg.error_message else "OK"
            self.record(STREAM, outcome, problem, "in-stream", msg.error_message, joined)
        for ids in sorted(expected, key=len):  # a request with one possible id first
            match = next((i for i in sorted(ids) if answered[i] > 0), None)
            if match is None:
                self.record(
                    STREAM,
                    "id mismatch",
                    f"no response carries the request id (one of {sorted(ids)[:3]})",
                    "OK",
                    "",
                    joined,
                )
                return
            answered[match] -= 1

    # --- between batches
    def assert_healthy(self, client: grpcclient.InferenceServerClient) -> None:
        assert self.server.proc.poll() is None, f"server died after case {self.case}: {self.server.log()}"
        code, details, response = self.call("ServerLive", b"")
        assert code == grpc.StatusCode.OK and service_pb2.ServerLiveResponse.FromString(response).live, details
        assert_known_good(client)

    def restore_state(self, shm_key: str) -> None:
        """Undo what fuzzed requests may have changed: our region registered (an Unregister may
        have removed it), every log level on (so the server log shows its own errors)."""
        req = service_pb2.SystemSharedMemoryRegisterRequest(name=SHM_REGION, key=shm_key, offset=0, byte_size=SHM_BYTES)
        code, details, _ = self.call("SystemSharedMemoryRegister", req.SerializeToString())
        assert code in (grpc.StatusCode.OK, grpc.StatusCode.ALREADY_EXISTS), details
        log = service_pb2.LogSettingsRequest()
        log.settings["log_verbose_level"].uint32_param = 0
        for key in ("log_info", "log_warning", "log_error"):
            log.settings[key].bool_param = True
        log.settings["log_format"].string_param = "default"
        code, details, _ = self.call("LogSettings", log.SerializeToString())
        assert code == grpc.StatusCode.OK, details


def without_log_file(data: bytes) -> bytes:
    """The fuzzer never changes the server's log file (see test_log_file_cannot_be_changed)."""
    req = parse_or_none(service_pb2.LogSettingsRequest, data)
    if req is None or "log_file" not in req.settings:
        return data
    del req.settings["log_file"]
    return encode(req)


def case_plan(rng: random.Random, total: int) -> list[tuple[str, int]]:
    """(rpc, number of cases) in random order: ModelInfer 35 %, ModelStreamInfer 12 % (in
    streams of 1-16 requests), the rest shared by the other RPCs."""
    others = [rpc for rpc in RPCS if rpc not in ("ModelInfer", STREAM)]
    plan = [("ModelInfer", 1)] * int(total * 0.35)
    stream_left = int(total * 0.12)
    while stream_left > 0:
        n = min(rng.randint(1, 16), stream_left)
        plan.append((STREAM, n))
        stream_left -= n
    rest = total - sum(n for _, n in plan)
    plan += [(others[i % len(others)], 1) for i in range(rest)]
    rng.shuffle(plan)
    return plan


def format_stats(stats: dict[str, Counter]) -> str:
    lines = [f"{'rpc':30} {'cases':>6}  status codes"]
    for rpc in RPCS:
        c = stats.get(rpc, Counter())
        hist = ", ".join(f"{k}={v}" for k, v in sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))
        lines.append(f"{rpc:30} {sum(c.values()):>6}  {hist}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- fixtures and helpers


def assert_known_good(client: grpcclient.InferenceServerClient) -> None:
    in0 = np.arange(16, dtype=np.int32).reshape(1, 16)
    in1 = np.full((1, 16), 5, dtype=np.int32)
    inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"), grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(in0)
    inputs[1].set_data_from_numpy(in1)
    result = client.infer("simple", inputs, client_timeout=CALL_DEADLINE_S)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), in0 + in1)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), in0 - in1)


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


@pytest.fixture(scope="module")
def hserver(tmp_path_factory):
    log = tmp_path_factory.mktemp("hostile") / "fpgaserve.log"
    proc = ServerProcess([CONFORMANCE_REPO, BUNDLED_REPO], "--allow-client-shm=true", log_path=log)
    proc.start(timeout=300)
    yield proc
    rc = proc.stop()
    assert rc == 0, f"server exited with {rc}: {proc.log()}"


@pytest.fixture(scope="module")
def shm_key(hserver):
    """A shared-memory object of our own, registered as SHM_REGION: the only object a fuzzed
    request can reach (hostile keys never name an object that exists)."""
    # fixed length, so that a run replays the same mutations whatever the name
    key = f"/fpgaserve_fuzz_{os.getpid() % 10**7:07d}_{random.randrange(10**9):09d}"
    path = Path("/dev/shm") / key[1:]
    path.write_bytes(bytes(SHM_BYTES))
    yield key
    with grpc.insecure_channel(hserver.url) as channel:
        unregister = channel.unary_unary(RPCS["SystemSharedMemoryUnregister"][0])
        unregister(service_pb2.SystemSharedMemoryUnregisterRequest().SerializeToString(), timeout=CALL_DEADLINE_S)
    path.unlink(missing_ok=True)


@pytest.fixture
def hclient(hserver):
    c = grpcclient.InferenceServerClient(hserver.url)
    yield c
    c.close()


# what the server logs when one of its own code paths failed (``_failure``, a batch that raised
# outside the model, asyncio's reports of lost exceptions), at any log level. A traceback the
# server's formatter wrote is indented ("    | "), and only follows records that are checked
# here by level: the fuzzer turns verbose logging on, where a *model's* error (a mutated string
# that simple_string cannot parse) is logged with its traceback at debug level, as it should be.
LOG_ALARMS = re.compile(
    r"^E\d{4} |^\S+ E \d+ |^Traceback|failed unexpectedly|Task exception was never retrieved|Exception in callback"
)


def log_alarms(path: Path, start: int) -> list[str]:
    with open(path, "rb") as f:
        f.seek(start)
        text = f.read().decode("utf-8", "replace")
    return [line[:300] for line in text.splitlines() if LOG_ALARMS.search(line)]


# ----------------------------------------------------------------------------- tests


@pytest.mark.timeout(300 + FUZZ_CASES // 20)
def test_protocol_fuzzer(hserver, hclient, shm_key):
    rng = random.Random(FUZZ_SEED)
    seeds = build_seeds(shm_key)
    assert set(seeds) == set(RPCS), "every RPC needs seeds"
    fuzzer = Fuzzer(hserver, seeds, rng)
    log_start = hserver.log_path.stat().st_size
    # the seeds themselves are valid: fixed answers, before any mutation
    fuzzer.restore_state(shm_key)
    for rpc in ("ModelInfer", "ServerMetadata", "ModelConfig", "LogSettings", HEALTH_CHECK):
        for msg in seeds[rpc]:
            code, details, _ = fuzzer.call(rpc, msg.SerializeToString())
            expected = grpc.StatusCode.NOT_FOUND if getattr(msg, "id", "") == "shm-unknown" else grpc.StatusCode.OK
            assert code == expected, f"seed of {rpc}: {code.name} {details}"
    started = time.monotonic()
    since_check = 0
    for rpc, n in case_plan(rng, FUZZ_CASES):
        if rpc == STREAM:
            fuzzer.stream_case(n)
        else:
            fuzzer.unary_case(rpc)
        since_check += n
        if since_check >= HEALTH_EVERY:
            since_check = 0
            fuzzer.assert_healthy(hclient)
            fuzzer.restore_state(shm_key)
    fuzzer.assert_healthy(hclient)
    fuzzer.restore_state(shm_key)
    fuzzer.channel.close()
    alarms = log_alarms(hserver.log_path, log_start)

    elapsed = time.monotonic() - started
    print(
        f"\nprotocol fuzzer: seed {FUZZ_SEED} (FPGASERVE_FUZZ_SEED), {fuzzer.case} cases "
        f"(FPGASERVE_FUZZ_CASES={FUZZ_CASES}) in {elapsed:.1f} s, {fuzzer.problems} problem(s)"
    )
    print(format_stats(fuzzer.stats))
    assert hserver.proc.poll() is None, "the server process exited"
    failures = []
    if alarms:
        failures.append(f"the server logged failures of its own ({len(alarms)} lines):\n" + "\n".join(alarms[:20]))
    if fuzzer.findings:
        report = hserver.log_path.with_name("fuzz_findings.txt")
        kinds = sorted(fuzzer.findings.values(), key=lambda fs: (fs[0].rpc, fs[0].case))
        report.write_text("\n".join(f.describe() for fs in kinds for f in fs) + "\n")
        shown = "\n".join(fs[0].describe() for fs in kinds[:20])
        failures.append(
            f"{fuzzer.problems} problem case(s) of {len(kinds)} kinds (seed {FUZZ_SEED}; examples in {report}):\n"
            + shown
        )
    if failures:
        pytest.fail("\n\n".join(failures), pytrace=False)


def _bomb(model: str, datatype: str, shape: list[int], payload: bytes | None = None, **typed) -> bytes:
    req = Infer(model_name=model, id="bomb")
    t = req.inputs.add(name="input" if model == "facile" else "INPUT0", datatype=datatype, shape=shape)
    if payload is not None:
        req.raw_input_contents.append(payload)
    for fieldname, values in typed.items():
        getattr(t.contents, fieldname).extend(values)
    if model == "simple":  # the second input, well formed
        t1 = req.inputs.add(name="INPUT1", datatype=datatype, shape=shape)
        if payload is not None:
            req.raw_input_contents.append(payload)
        else:
            t1.contents.int_contents.extend([1])
    return req.SerializeToString()


TEN_BYTES = b"\x06\x00\x00\x00abcdef"  # one 6-byte BYTES element
MEMORY_BOMBS = {
    "BYTES [1, 2**30], 10 bytes": _bomb("simple_identity", "BYTES", [1, 2**30], TEN_BYTES),
    "BYTES [8, 2**40], 10 bytes": _bomb("simple_identity", "BYTES", [8, 2**40], TEN_BYTES),
    "BYTES [1, 2**30], length prefix 2**32-1": _bomb("simple_identity", "BYTES", [1, 2**30], b"\xff\xff\xff\xffabcdef"),
    "BYTES typed [1, 2**40], one element": _bomb("simple_identity", "BYTES", [1, 2**40], bytes_contents=[b"x"]),
    "BYTES [1, 2**63-1] (bytes overflow int64)": _bomb("simple_identity", "BYTES", [1, 2**63 - 1], TEN_BYTES),
    "BYTES [8, 2**61] (bytes overflow int64)": _bomb("simple_identity", "BYTES", [8, 2**61], TEN_BYTES),
    "FP32 [16384, 47], 4 bytes": _bomb("facile", "FP32", [16384, 47], b"\x00" * 4),
    "FP32 typed [16384, 47], 3 values": _bomb("facile", "FP32", [16384, 47], fp32_contents=[1.0, 2.0, 3.0]),
    "FP32 [2**40, 47], 8 bytes": _bomb("facile", "FP32", [2**40, 47], b"\x00" * 8),
    "FP32 [1, 2**62], 8 bytes": _bomb("facile", "FP32", [1, 2**62], b"\x00" * 8),
    "INT32 [1, 2**40], 8 bytes": _bomb("simple", "INT32", [1, 2**40], b"\x00" * 8),
    "INT32 [2**40, 16], 8 bytes": _bomb("simple", "INT32", [2**40, 16], b"\x00" * 8),
    "INT32 typed [8, 16], one value": _bomb("simple", "INT32", [8, 16], int_contents=[7]),
    "INT32 [2**62, 2**62] (overflow)": _bomb("simple", "INT32", [2**62, 2**62], b"\x00" * 8),
}


@pytest.mark.timeout(300)
def test_memory_bomb_requests_are_rejected_without_growing_rss(hserver, hclient):
    pid = hserver.proc.pid
    with grpc.insecure_channel(hserver.url) as channel:
        infer = channel.unary_unary(RPCS["ModelInfer"][0], request_serializer=None, response_deserializer=None)
        good = [
            infer_seed("simple", _simple_tensors("INT32")).SerializeToString(),
            infer_seed("simple_identity", [("INPUT0", "BYTES", [1, 3], [b"a", b"bc", b"def"])]).SerializeToString(),
            infer_seed("facile", [("input", "FP32", [4, 47], [0.25] * (4 * 47))]).SerializeToString(),
        ]
        for i in range(50):
            infer(good[i % len(good)], timeout=CALL_DEADLINE_S)
        baseline = rss_bytes(pid)
        names = list(MEMORY_BOMBS)
        wrong: list[str] = []
        for i in range(1000):
            name = names[i % len(names)]
            try:
                infer(MEMORY_BOMBS[name], timeout=CALL_DEADLINE_S)
                wrong.append(f"{name}: OK")
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.INVALID_ARGUMENT or text_problem(e.details() or "", b""):
                    wrong.append(f"{name}: {e.code().name} {(e.details() or '')[:200]!r}")
        grown = rss_bytes(pid) - baseline
    print(f"\nmemory bombs: RSS {baseline / 2**20:.1f} MiB after warm-up, {grown / 2**20:+.1f} MiB after 1000 bombs")
    assert not wrong, f"{len(wrong)} of 1000 memory bombs not refused with INVALID_ARGUMENT: {sorted(set(wrong))}"
    assert grown <= 50 * 2**20, f"RSS grew by {grown / 2**20:.1f} MiB over 1000 rejected requests"
    assert_known_good(hclient)
    assert hserver.proc.poll() is None


@pytest.mark.timeout(60)
def test_log_file_cannot_be_changed(hserver):
    """The fuzzer strips log_file from LogSettings; this is what the server does with it."""
    req = service_pb2.LogSettingsRequest()
    req.settings["log_file"].string_param = str(hserver.log_path.with_name("elsewhere.log"))
    with grpc.insecure_channel(hserver.url) as channel:
        call = channel.unary_unary(RPCS["LogSettings"][0])
        with pytest.raises(grpc.RpcError) as e:
            call(req.SerializeToString(), timeout=CALL_DEADLINE_S)
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert not hserver.log_path.with_name("elsewhere.log").exists()


@pytest.mark.timeout(60)
def test_stream_answers_malformed_messages_with_their_id(hserver):
    good = infer_seed("simple", _simple_tensors("INT32"), rid="good-1").SerializeToString()
    # id first, then a length prefix that runs past the end: the id is readable, the message is not
    broken = Infer(id="broken-7", model_name="simple").SerializeToString() + b"\x32\xff\x01abc"
    garbage = b"\xff\xff\xff"
    with grpc.insecure_channel(hserver.url) as channel:
        stream = channel.stream_stream(RPCS[STREAM][0], request_serializer=None, response_deserializer=None)
        responses = [
            service_pb2.ModelStreamInferResponse.FromString(r)
            for r in stream(iter([good, broken, garbage]), timeout=STREAM_DEADLINE_S)
        ]
    by_id = {r.infer_response.id: r for r in responses}
    assert len(responses) == 3 and set(by_id) == {"good-1", "broken-7", ""}
    assert by_id["good-1"].error_message == ""
    assert "not a valid inference.ModelInferRequest" in by_id["broken-7"].error_message
    assert "not a valid inference.ModelInferRequest" in by_id[""].error_message


# Triton 2.51's answers (observed with the reference tritonserver, .tools/tritonserver): the
# version string is read with std::stol (C-locale blanks, ASCII digits, trailing text ignored)
# before anything else, the model name included.
VERSION_CASES = [
    ("ModelReady", "simple", "\u0661", NOT_AN_INTEGER),  # ARABIC-INDIC DIGIT ONE
    ("ModelReady", "simple", "\uff11", NOT_AN_INTEGER),  # FULLWIDTH DIGIT ONE
    ("ModelReady", "simple", "\x1c1", NOT_AN_INTEGER),  # FILE SEPARATOR is no blank for strtol
    ("ModelReady", "simple", "\xa01", NOT_AN_INTEGER),  # NO-BREAK SPACE
    ("ModelMetadata", "simple", "1\u0661", None),  # std::stol reads 1
    ("ModelMetadata", "no_such_model", "abc", NOT_AN_INTEGER),
    ("ModelConfig", "no_such_model", "-1", NEGATIVE_VERSION),
    ("ModelInfer", "no_such_model", "99999999999999999999", NOT_AN_INTEGER),
    ("ModelStatistics", "", "abc", NOT_AN_INTEGER),
    ("ModelStatistics", "", "-1", NEGATIVE_VERSION),
    (STREAM, "no_such_model", "-5", NEGATIVE_VERSION),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "rpc,name,version,error", VERSION_CASES, ids=[f"{c[0]}-{c[1] or 'all'}-{c[2]!r}" for c in VERSION_CASES]
)
def test_version_string_is_read_like_triton_before_the_model(hserver, rpc, name, version, error):
    name_field, version_field = VERSION_FIELDS[rpc]
    data = RPCS[rpc][1](**{name_field: name, version_field: version}).SerializeToString()
    with grpc.insecure_channel(hserver.url) as channel:
        if rpc == STREAM:
            stream = channel.stream_stream(RPCS[STREAM][0], request_serializer=None, response_deserializer=None)
            (raw,) = list(stream(iter([data]), timeout=STREAM_DEADLINE_S))
            code, details = None, service_pb2.ModelStreamInferResponse.FromString(raw).error_message
        else:
            try:
                channel.unary_unary(RPCS[rpc][0])(data, timeout=CALL_DEADLINE_S)
                code, details = grpc.StatusCode.OK, ""
            except grpc.RpcError as e:
                code, details = e.code(), e.details() or ""
    if error is None:
        assert (code, details) in ((grpc.StatusCode.OK, ""), (None, ""))
    else:
        assert code in (grpc.StatusCode.INVALID_ARGUMENT, None) and details.startswith(error), (code, details)


# Shared-memory and parameter errors, with Triton 2.51's answers (observed with the reference
# tritonserver on the same requests). Each request is otherwise valid for ``simple``.
REGION = "hostile_reg"  # registered by the test on our own object, 4096 bytes


def _simple_request(typed: bool = False, outputs: list[str] | None = None) -> Infer:
    return infer_seed("simple", _simple_tensors("INT32"), typed=typed, rid="r", outputs=outputs)


def _set(params, **values) -> None:
    """``params[key]`` = value, the kind taken from the Python type (str, int, bool)."""
    for key, value in values.items():
        kind = {str: "string_param", bool: "bool_param", int: "int64_param"}[type(value)]
        setattr(params[key], kind, value)


def _shm_input0(typed: bool = False, **values) -> Infer:
    """INPUT0 read from our region (64 bytes at offset 0 unless ``values`` say otherwise)."""
    req = _simple_request(typed=typed)
    _set(
        req.inputs[0].parameters,
        **{"shared_memory_region": REGION, "shared_memory_offset": 0, "shared_memory_byte_size": 64, **values},
    )
    if not typed:
        del req.raw_input_contents[0]
    return req


def _shm_output0(**values) -> Infer:
    req = _simple_request(outputs=["OUTPUT0"])
    _set(
        req.outputs[0].parameters,
        **{"shared_memory_region": REGION, "shared_memory_offset": 0, "shared_memory_byte_size": 64, **values},
    )
    return req


def _with(req: Infer, edit) -> Infer:
    edit(req)
    return req


def _duplicate_input1_in_unknown_region(req: Infer) -> None:
    dup = req.inputs.add()
    dup.CopyFrom(req.inputs[1])
    _set(dup.parameters, shared_memory_region="no_such_region", shared_memory_byte_size=64)


PARAMETER_CASES = {
    "shm input with typed contents": (
        lambda: _shm_input0(typed=True),
        "unexpected 'content' provided when using shared memory for input tensor 'INPUT0' for model 'simple'",
    ),
    "offset without region": (
        lambda: _with(_simple_request(), lambda r: _set(r.inputs[0].parameters, shared_memory_offset=0)),
        "'shared_memory_offset' can not be specified without 'shared_memory_region' parameter for tensor 'INPUT0'",
    ),
    "output byte_size without region": (
        lambda: _with(
            _simple_request(outputs=["OUTPUT0"]), lambda r: _set(r.outputs[0].parameters, shared_memory_byte_size=64)
        ),
        (
            "'shared_memory_byte_size' can not be specified without 'shared_memory_region' parameter for tensor "
            "'OUTPUT0'"
        ),
    ),
    "region as int64": (
        lambda: _shm_input0(shared_memory_region=5),
        "invalid value type for 'shared_memory_region' parameter for tensor 'INPUT0', expected string_param.",
    ),
    "offset as string": (
        lambda: _shm_input0(shared_memory_offset="0"),
        "invalid value type for 'shared_memory_offset' parameter for tensor 'INPUT0', expected int64_param.",
    ),
    "byte_size as string": (
        lambda: _shm_input0(shared_memory_byte_size="64"),
        "invalid value type for 'shared_memory_byte_size' parameter for tensor 'INPUT0', expected int64_param.",
    ),
    "negative offset": (
        lambda: _shm_input0(shared_memory_offset=-1),
        f"Invalid offset for shared memory region: '{REGION}'",
    ),
    "zero byte_size": (
        lambda: _shm_input0(shared_memory_byte_size=0),
        f"Invalid offset + byte size for shared memory region: '{REGION}'",
    ),
    "output in shared memory with classification": (
        lambda: _shm_output0(classification=2),
        "output can't set both 'shared_memory_region' and 'classification'",
    ),
    "classification 0": (
        lambda: _with(_simple_request(outputs=["OUTPUT0"]), lambda r: _set(r.outputs[0].parameters, classification=0)),
        "invalid value for 'classification' parameter, expected >= 0",
    ),
    "classification -1": (
        lambda: _with(_simple_request(outputs=["OUTPUT0"]), lambda r: _set(r.outputs[0].parameters, classification=-1)),
        "invalid value for 'classification' parameter, expected >= 0",
    ),
    "triton_enable_empty_final_response as int64": (
        lambda: _with(_simple_request(), lambda r: _set(r.parameters, triton_enable_empty_final_response=1)),
        "invalid value type for 'triton_enable_empty_final_response' parameter, expected bool_param.",
    ),
    "duplicate input naming an unknown region": (
        lambda: _with(_simple_request(), _duplicate_input1_in_unknown_region),
        "[request id: r] input 'INPUT1' already exists in request",
    ),
}


@pytest.fixture(scope="module")
def region(hserver, shm_key):
    req = service_pb2.SystemSharedMemoryRegisterRequest(name=REGION, key=shm_key, offset=0, byte_size=SHM_BYTES)
    with grpc.insecure_channel(hserver.url) as channel:
        channel.unary_unary(RPCS["SystemSharedMemoryRegister"][0])(req.SerializeToString(), timeout=CALL_DEADLINE_S)
    return REGION


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", list(PARAMETER_CASES))
def test_shared_memory_and_parameter_errors_match_triton(hserver, region, case):
    build, text = PARAMETER_CASES[case]
    with grpc.insecure_channel(hserver.url) as channel, pytest.raises(grpc.RpcError) as e:
        channel.unary_unary(RPCS["ModelInfer"][0])(build().SerializeToString(), timeout=CALL_DEADLINE_S)
    assert (e.value.code(), e.value.details()) == (grpc.StatusCode.INVALID_ARGUMENT, text)
