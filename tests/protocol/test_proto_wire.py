"""Wire compatibility of our hand-written protos/*.proto with NVIDIA Triton's.

The reference is tritonclient's generated modules (``tritonclient.grpc.service_pb2`` and
``model_config_pb2``, default descriptor pool); ours live in the private pool built by
``fpgaserve.protos``. For every message of package ``inference`` (nested types and map
entries included) we check:

* schema: same fields (name, number, type, repeated, map, oneof, referenced type), same
  nested types / enums / oneofs, same enum values, same service methods - both ways;
* binary round trip: a fully populated message built with one side parses on the other
  side with no unknown fields and re-serialises (deterministically) to identical bytes,
  and renders to identical text format (so field *names* agree too);
* text format: realistic config.pbtxt files parse identically into both ModelConfigs.

The grpc.health.v1 messages are compared with grpcio-health-checking's ``health_pb2``
when that package is installed (skipped otherwise); a standalone check of our health
schema always runs.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

# Both sets of classes in one process: that is what the private pool is for.
import tritonclient.grpc.model_config_pb2 as tc_model_config
import tritonclient.grpc.service_pb2 as tc_service
from google.protobuf import descriptor_pool, text_format, unknown_fields
from google.protobuf.descriptor import FieldDescriptor

from fpgaserve import protos

TC_FILES = (tc_model_config.DESCRIPTOR, tc_service.DESCRIPTOR)
OUR_FILES = tuple(protos.POOL.FindFileByName(n) for n in ("model_config.proto", "grpc_service.proto"))

MAX_DEPTH = 12  # recursion bound when populating nested messages (schemas are acyclic)
N_REPEATED = 2  # elements per repeated field / entries per map


# --------------------------------------------------------------------------- helpers


def _all_messages(file_desc):
    """Every message descriptor of a file, nested types and map entries included."""
    out = []

    def walk(d):
        out.append(d)
        for n in d.nested_types:
            walk(n)

    for d in file_desc.message_types_by_name.values():
        walk(d)
    return out


def _all_enums(file_desc):
    out = list(file_desc.enum_types_by_name.values())
    for d in _all_messages(file_desc):
        out.extend(d.enum_types)
    return out


def _is_map(f) -> bool:
    return f.message_type is not None and f.message_type.GetOptions().map_entry


def _type_name(f):
    if f.message_type is not None:
        return f.message_type.full_name
    if f.enum_type is not None:
        return f.enum_type.full_name
    return None


def _message_signature(d) -> dict:
    return {
        "map_entry": d.GetOptions().map_entry,
        "fields": {
            f.name: {
                "number": f.number,
                "type": f.type,
                "repeated": f.is_repeated,
                "required": f.is_required,
                "map": _is_map(f),
                "oneof": f.containing_oneof.name if f.containing_oneof else None,
                "type_name": _type_name(f),
                "has_presence": f.has_presence,
            }
            for f in d.fields
        },
        "oneofs": sorted(o.name for o in d.oneofs),
        "nested_types": sorted(n.name for n in d.nested_types),
        "enum_types": sorted(e.name for e in d.enum_types),
    }


def _enum_signature(e) -> list:
    return [(v.name, v.number) for v in e.values]


def _diff(ours: dict, theirs: dict) -> str:
    lines = []
    for key in sorted(set(ours) | set(theirs)):
        if ours.get(key) != theirs.get(key):
            lines.append(f"  {key}:\n    ours:   {ours.get(key)}\n    triton: {theirs.get(key)}")
    return "\n".join(lines)


def _ours_class(full_name):
    return protos.message_class(full_name)


def _theirs_class(full_name):
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(descriptor_pool.Default().FindMessageTypeByName(full_name))


def _scalar(f, i: int):
    """A non-default value for scalar field ``f`` (element ``i`` of a repeated field)."""
    t, n = f.type, f.number
    if t == FieldDescriptor.TYPE_BOOL:
        return i % 2 == 0  # True, False: element 0 is non-default
    if t in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SFIXED32):
        return -(n * 10 + i + 1)
    if t in (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_SFIXED64):
        return -(2**40 + n * 10 + i)
    if t in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
        return 2**31 + n * 10 + i
    if t in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
        return 2**63 + n * 10 + i
    if t == FieldDescriptor.TYPE_FLOAT:
        return 0.5 + n + i
    if t == FieldDescriptor.TYPE_DOUBLE:
        return -0.25 - n * 1000 - i
    if t == FieldDescriptor.TYPE_STRING:
        return f"{f.name}#{i} µ"
    if t == FieldDescriptor.TYPE_BYTES:
        return bytes([0, 255, i, n]) + f.name.encode()
    if t == FieldDescriptor.TYPE_ENUM:
        nonzero = [v.number for v in f.enum_type.values if v.number != 0]
        return nonzero[i % len(nonzero)] if nonzero else 0  # some enums only have 0
    raise AssertionError(f"unhandled scalar type {t} of {f.full_name}")


def _map_key(f, i: int):
    if f.type == FieldDescriptor.TYPE_STRING:
        return f"key{i}"
    return _scalar(f, i)


def _populate(msg, variant: int, depth: int = 0):
    """Set every field of ``msg`` (recursively); oneofs pick member ``variant % size``."""
    d = msg.DESCRIPTOR
    chosen = {o.name: o.fields[variant % len(o.fields)].name for o in d.oneofs}
    for f in d.fields:
        if f.containing_oneof is not None and chosen[f.containing_oneof.name] != f.name:
            continue
        value = getattr(msg, f.name)
        if _is_map(f):
            kf = f.message_type.fields_by_name["key"]
            vf = f.message_type.fields_by_name["value"]
            for i in range(N_REPEATED):
                key = _map_key(kf, i)
                if vf.message_type is not None:
                    sub = value[key]  # creates the entry
                    if depth < MAX_DEPTH:
                        _populate(sub, variant, depth + 1)
                else:
                    value[key] = _scalar(vf, i)
        elif f.is_repeated:
            if f.message_type is not None:
                for _ in range(N_REPEATED):
                    sub = value.add()
                    if depth < MAX_DEPTH:
                        _populate(sub, variant, depth + 1)
            else:
                value.extend(_scalar(f, i) for i in range(N_REPEATED))
        elif f.message_type is not None:
            value.SetInParent()
            if depth < MAX_DEPTH:
                _populate(value, variant, depth + 1)
        else:
            setattr(msg, f.name, _scalar(f, 0))
    return msg


def _assert_fully_populated(msg, variant: int):
    d = msg.DESCRIPTOR
    chosen = {o.name: o.fields[variant % len(o.fields)].name for o in d.oneofs}
    missing = []
    for f in d.fields:
        if f.containing_oneof is not None and chosen[f.containing_oneof.name] != f.name:
            continue
        if f.is_repeated:
            if len(getattr(msg, f.name)) != N_REPEATED:
                missing.append(f.name)
        elif f.has_presence:
            if not msg.HasField(f.name):
                missing.append(f.name)
        elif f.type == FieldDescriptor.TYPE_ENUM and not f.enum_type.values[-1].number:
            continue  # enum whose only value is 0 cannot be non-default
        elif getattr(msg, f.name) == f.default_value:
            missing.append(f.name)
    assert not missing, f"builder left {d.full_name} fields unset: {missing}"


def _unknown_fields(msg, path: str = "") -> list:
    """Paths of all (recursively) present unknown fields."""
    found = []
    path = path or msg.DESCRIPTOR.full_name
    ufs = unknown_fields.UnknownFieldSet(msg)
    if len(ufs):
        found.append(f"{path}: field numbers {[u.field_number for u in ufs]}")
    for f, value in msg.ListFields():
        if f.message_type is None:
            continue
        if _is_map(f):
            if f.message_type.fields_by_name["value"].message_type is not None:
                for k, v in value.items():
                    found += _unknown_fields(v, f"{path}.{f.name}[{k!r}]")
        elif f.is_repeated:
            for i, v in enumerate(value):
                found += _unknown_fields(v, f"{path}.{f.name}[{i}]")
        else:
            found += _unknown_fields(value, f"{path}.{f.name}")
    return found


def _reachable_max_oneof(d, seen=None) -> int:
    """Largest oneof size reachable from message ``d`` (1 if none)."""
    seen = set() if seen is None else seen
    if d.full_name in seen:
        return 1
    seen.add(d.full_name)
    best = max([len(o.fields) for o in d.oneofs] or [1])
    for f in d.fields:
        if f.message_type is not None:
            best = max(best, _reachable_max_oneof(f.message_type, seen))
    return best


def _check_transfer(src_cls, dst_cls, full_name: str, variant: int, direction: str):
    src = _populate(src_cls(), variant)
    _assert_fully_populated(src, variant)
    data = src.SerializeToString(deterministic=True)
    assert data or not src.DESCRIPTOR.fields, f"{full_name}: populated message serialised to nothing"

    dst = dst_cls.FromString(data)
    unknown = _unknown_fields(dst)
    assert not unknown, f"{direction} {full_name}: unknown fields after parse: {unknown}"
    redata = dst.SerializeToString(deterministic=True)
    assert redata == data, (
        f"{direction} {full_name}: re-serialised bytes differ\n  sent:      {data.hex()}\n  re-encoded: {redata.hex()}"
    )
    # same values under the same field *names* (catches swapped names with equal numbers)
    assert text_format.MessageToString(dst) == text_format.MessageToString(src), (
        f"{direction} {full_name}: text format differs"
    )
    # and back again into the source schema: nothing lost
    assert src_cls.FromString(redata) == src, f"{direction} {full_name}: round trip lost data"


# ------------------------------------------------------------------ parametrisation

TC_MESSAGES = {d.full_name: d for fd in TC_FILES for d in _all_messages(fd)}
TC_ENUMS = {e.full_name: e for fd in TC_FILES for e in _all_enums(fd)}
OUR_MESSAGES = {d.full_name: d for fd in OUR_FILES for d in _all_messages(fd)}
OUR_ENUMS = {e.full_name: e for fd in OUR_FILES for e in _all_enums(fd)}

ROUND_TRIP_CASES = [
    pytest.param(name, v, id=f"{name}-v{v}")
    for name, d in sorted(TC_MESSAGES.items())
    for v in range(_reachable_max_oneof(d))
]


# ------------------------------------------------------------------------- imports


def test_reference_has_expected_scope():
    """Sanity: the reference really is Triton's schema (so the other tests mean something)."""
    assert tc_service.DESCRIPTOR.package == "inference"
    assert "inference.ModelConfig" in TC_MESSAGES and "inference.ModelInferRequest" in TC_MESSAGES
    assert len(TC_MESSAGES) > 100, len(TC_MESSAGES)
    assert len(ROUND_TRIP_CASES) > len(TC_MESSAGES)


def test_private_pool_is_separate_from_default_pool():
    ours = protos.inference.ModelConfig.DESCRIPTOR
    theirs = tc_model_config.ModelConfig.DESCRIPTOR
    assert ours.full_name == theirs.full_name == "inference.ModelConfig"
    assert ours.file.pool is protos.POOL
    assert protos.POOL is not descriptor_pool.Default()
    assert ours is not theirs
    assert protos.inference.ModelConfig is not tc_model_config.ModelConfig


@pytest.mark.parametrize("first", ["fpgaserve", "tritonclient"])
def test_importing_both_in_one_process(first):
    """Importing ours and tritonclient's generated modules together, either order, works."""
    imports = {
        "fpgaserve": "from fpgaserve import protos; protos.inference.ModelInferRequest(model_name='m')",
        "tritonclient": "import tritonclient.grpc; import tritonclient.grpc.model_config_pb2",
    }
    second = "tritonclient" if first == "fpgaserve" else "fpgaserve"
    code = f"{imports[first]}\n{imports[second]}\nimport tritonclient.grpc.service_pb2\nprint('ok')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


# -------------------------------------------------------------------------- schema


def test_same_message_names_both_ways():
    missing = sorted(set(TC_MESSAGES) - set(OUR_MESSAGES))
    extra = sorted(set(OUR_MESSAGES) - set(TC_MESSAGES))
    assert not missing and not extra, f"missing in ours: {missing}\nextra in ours: {extra}"


def test_same_enum_names_both_ways():
    missing = sorted(set(TC_ENUMS) - set(OUR_ENUMS))
    extra = sorted(set(OUR_ENUMS) - set(TC_ENUMS))
    assert not missing and not extra, f"missing in ours: {missing}\nextra in ours: {extra}"


def test_same_file_layout():
    for ours, theirs in zip(OUR_FILES, TC_FILES):
        assert ours.name == theirs.name and ours.package == theirs.package == "inference"
    assert [d.name for d in OUR_FILES[1].dependencies] == [d.name for d in tc_service.DESCRIPTOR.dependencies]


@pytest.mark.parametrize("full_name", sorted(TC_MESSAGES))
def test_message_schema(full_name):
    theirs = _message_signature(TC_MESSAGES[full_name])
    assert full_name in OUR_MESSAGES, f"{full_name} missing in our protos"
    ours = _message_signature(OUR_MESSAGES[full_name])
    if ours != theirs:
        fields = _diff(ours["fields"], theirs["fields"])
        rest = _diff(
            {k: v for k, v in ours.items() if k != "fields"}, {k: v for k, v in theirs.items() if k != "fields"}
        )
        pytest.fail(f"{full_name} differs from Triton's:\n{fields}\n{rest}")


@pytest.mark.parametrize("full_name", sorted(TC_ENUMS))
def test_enum_schema(full_name):
    assert full_name in OUR_ENUMS, f"enum {full_name} missing in our protos"
    assert _enum_signature(OUR_ENUMS[full_name]) == _enum_signature(TC_ENUMS[full_name])


def test_service_methods():
    theirs_sd = tc_service.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    theirs = {
        m.name: (m.input_type.full_name, m.output_type.full_name, m.client_streaming, m.server_streaming)
        for m in theirs_sd.methods
    }
    ours = {
        name: (req.DESCRIPTOR.full_name, resp.DESCRIPTOR.full_name, cs, ss)
        for name, req, resp, cs, ss in protos.service_methods(protos.SERVICE_NAME)
    }
    assert ours == theirs, _diff(ours, theirs)
    assert ours["ModelStreamInfer"][2:] == (True, True)  # bidi
    assert [m.name for m in protos.POOL.FindServiceByName(protos.SERVICE_NAME).methods] == list(theirs)


def test_service_method_classes_are_ours():
    for name, req, resp, _, _ in protos.service_methods(protos.SERVICE_NAME):
        assert req.DESCRIPTOR.file.pool is protos.POOL, name
        assert resp.DESCRIPTOR.file.pool is protos.POOL, name


# ---------------------------------------------------------------------- round trip


@pytest.mark.parametrize("full_name,variant", ROUND_TRIP_CASES)
def test_round_trip_ours_to_triton(full_name, variant):
    _check_transfer(_ours_class(full_name), _theirs_class(full_name), full_name, variant, "ours->triton")


@pytest.mark.parametrize("full_name,variant", ROUND_TRIP_CASES)
def test_round_trip_triton_to_ours(full_name, variant):
    _check_transfer(_theirs_class(full_name), _ours_class(full_name), full_name, variant, "triton->ours")


def test_every_oneof_member_exercised():
    """Each member of each oneof is the chosen one in at least one round-trip case."""
    exercised = set()
    for name, variant in (c.values for c in ROUND_TRIP_CASES):
        for o in TC_MESSAGES[name].oneofs:
            exercised.add(o.fields[variant % len(o.fields)].full_name)
    every = {f.full_name for d in TC_MESSAGES.values() for o in d.oneofs for f in o.fields}
    assert every and every <= exercised, sorted(every - exercised)


def test_namespace_classes_match_pool():
    for name in tc_service.DESCRIPTOR.message_types_by_name:
        assert getattr(protos.inference, name).DESCRIPTOR is protos.POOL.FindMessageTypeByName(f"inference.{name}")
    for name in tc_model_config.DESCRIPTOR.message_types_by_name:
        assert hasattr(protos.inference, name), name
    assert protos.inference.DataType.Value("TYPE_BF16") == 14


# --------------------------------------------------------------------- text format

CONFIG_DYNAMIC = r"""
name: "hls4ml_jet_tagger"
platform: "hls4ml_pynq"
backend: "fpga"
runtime: "libfpga.so"
max_batch_size: 64
version_policy: { specific: { versions: [1, 3] } }
input [
  {
    name: "input_1"
    data_type: TYPE_FP32
    format: FORMAT_NONE
    dims: [ 16 ]
    reshape: { shape: [ 4, 4 ] }
    allow_ragged_batch: true
    optional: false
  },
  {
    name: "mask"
    data_type: TYPE_BOOL
    dims: [ -1 ]
    optional: true
  }
]
output [
  {
    name: "layer13_out"
    data_type: TYPE_FP16
    dims: [ 5 ]
    label_filename: "labels.txt"
  }
]
batch_input [ { kind: BATCH_ACCUMULATED_ELEMENT_COUNT target_name: "offsets" data_type: TYPE_INT32 source_input: "mask" } ]
batch_output [ { target_name: "layer13_out" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "mask" } ]
dynamic_batching {
  preferred_batch_size: [ 16, 64 ]
  max_queue_delay_microseconds: 100
  preserve_ordering: true
  priority_levels: 2
  default_priority_level: 1
  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 5000 allow_timeout_override: true max_queue_size: 128 }
  priority_queue_policy { key: 1 value: { timeout_action: REJECT max_queue_size: 16 } }
  priority_queue_policy { key: 2 value: { default_timeout_microseconds: 100000 } }
}
instance_group [
  {
    name: "u250"
    kind: KIND_MODEL
    count: 2
    rate_limiter { resources [ { name: "dma" global: true count: 1 } ] priority: 1 }
    host_policy: "numa0"
  },
  { kind: KIND_CPU count: 1 passive: true profile: [ "p0" ] }
]
optimization {
  priority: PRIORITY_MAX
  input_pinned_memory { enable: true }
  execution_accelerators { cpu_execution_accelerator: [ { name: "openvino" parameters { key: "threads" value: "4" } } ] }
}
default_model_filename: "model.xclbin"
metric_tags { key: "detector" value: "cms" }
parameters { key: "bitfile" value: { string_value: "jet_tagger.xclbin" } }
parameters [
  { key: "ap_fixed" value: { string_value: "ap_fixed<16,6>" } },
  { key: "dma_in" value: { string_value: "axi_dma_0" } }
]
model_warmup [
  {
    name: "zeros"
    batch_size: 8
    count: 3
    inputs { key: "input_1" value: { data_type: TYPE_FP32 dims: [ 16 ] zero_data: true } }
    inputs { key: "mask" value: { data_type: TYPE_BOOL dims: [ 4 ] input_data_file: "mask.bin" } }
  }
]
model_transaction_policy { decoupled: false }
model_repository_agents {
  agents [
    { name: "checksum" parameters [ { key: "MD5:1/model.xclbin" value: "d41d8cd98f00b204e9800998ecf8427e" } ] }
  ]
}
response_cache { enable: true }
model_metrics {
  metric_control [
    {
      metric_identifier { family: "nv_inference_first_response_histogram_ms" }
      histogram_options { buckets: [ 1, 2.5, 10, 100 ] }
    }
  ]
}
"""

CONFIG_SEQUENCE = r"""
# stateful model driven by the sequence batcher
name: "stateful_fpga"
backend: "fpga"
max_batch_size: 4
version_policy: { latest: { num_versions: 2 } }
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  oldest { max_candidate_sequences: 4 preferred_batch_size: [ 2, 4 ] max_queue_delay_microseconds: 100 preserve_ordering: true }
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END bool_false_true: [ false, true ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
  state [
    {
      input_name: "INPUT_STATE"
      output_name: "OUTPUT_STATE"
      data_type: TYPE_INT32
      dims: [ -1 ]
      initial_state [ { name: "init" data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } ]
      use_same_buffer_for_input_output: true
      use_growable_memory: true
    }
  ]
  iterative_sequence: false
}
instance_group [ { kind: KIND_MODEL count: 1 secondary_devices [ { kind: KIND_NVDLA device_id: 0 } ] } ]
model_transaction_policy { decoupled: true }
"""

CONFIG_ENSEMBLE = r"""
name: "pipeline"
platform: "ensemble"
max_batch_size: 8
version_policy: { all: {} }
input [ { name: "RAW" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "SCORES" data_type: TYPE_FP32 dims: [ 5 ] } ]
ensemble_scheduling {
  step [
    { model_name: "preprocess" model_version: -1 input_map { key: "IN" value: "RAW" } output_map { key: "OUT" value: "features" } },
    { model_name: "hls4ml_jet_tagger" model_version: 1 input_map { key: "input_1" value: "features" } output_map { key: "layer13_out" value: "SCORES" } }
  ]
  max_inflight_requests: 4
}
"""


@pytest.mark.parametrize(
    "pbtxt", [CONFIG_DYNAMIC, CONFIG_SEQUENCE, CONFIG_ENSEMBLE], ids=["dynamic", "sequence", "ensemble"]
)
def test_config_pbtxt_parses_identically(pbtxt):
    ours = text_format.Parse(pbtxt, protos.inference.ModelConfig())
    theirs = text_format.Parse(pbtxt, tc_model_config.ModelConfig())
    ours_bytes = ours.SerializeToString(deterministic=True)
    assert ours_bytes == theirs.SerializeToString(deterministic=True)
    assert text_format.MessageToString(ours) == text_format.MessageToString(theirs)
    # cross-parse of the binary form, too
    assert tc_model_config.ModelConfig.FromString(ours_bytes) == theirs
    assert not _unknown_fields(protos.inference.ModelConfig.FromString(theirs.SerializeToString()))


def test_config_pbtxt_values():
    """The parsed config is what a reader of config.pbtxt expects (not just self-consistent)."""
    cfg = text_format.Parse(CONFIG_DYNAMIC, protos.inference.ModelConfig())
    assert cfg.WhichOneof("scheduling_choice") == "dynamic_batching"
    assert list(cfg.dynamic_batching.preferred_batch_size) == [16, 64]
    assert cfg.dynamic_batching.priority_queue_policy[1].max_queue_size == 16
    assert cfg.instance_group[0].kind == protos.inference.ModelInstanceGroup.KIND_MODEL == 3
    assert cfg.parameters["bitfile"].string_value == "jet_tagger.xclbin"
    assert cfg.parameters["ap_fixed"].string_value == "ap_fixed<16,6>"
    assert list(cfg.version_policy.specific.versions) == [1, 3]
    assert cfg.model_repository_agents.agents[0].parameters["MD5:1/model.xclbin"].startswith("d41d8")
    seq = text_format.Parse(CONFIG_SEQUENCE, protos.inference.ModelConfig())
    assert seq.WhichOneof("scheduling_choice") == "sequence_batching"
    assert seq.sequence_batching.WhichOneof("strategy_choice") == "oldest"
    assert [c.control[0].kind for c in seq.sequence_batching.control_input] == [0, 1, 2, 3]


def test_text_format_rejects_unknown_field():
    with pytest.raises(text_format.ParseError):
        text_format.Parse('name: "x" no_such_field: 1', protos.inference.ModelConfig())


# -------------------------------------------------------------------------- health

HEALTH_MESSAGES = ("grpc.health.v1.HealthCheckRequest", "grpc.health.v1.HealthCheckResponse")


def test_health_schema_standalone():
    req = protos.POOL.FindMessageTypeByName("grpc.health.v1.HealthCheckRequest")
    resp = protos.POOL.FindMessageTypeByName("grpc.health.v1.HealthCheckResponse")
    assert [(f.name, f.number, f.type) for f in req.fields] == [("service", 1, FieldDescriptor.TYPE_STRING)]
    assert [(f.name, f.number, f.type) for f in resp.fields] == [("status", 1, FieldDescriptor.TYPE_ENUM)]
    assert resp.fields[0].enum_type.full_name == "grpc.health.v1.HealthCheckResponse.ServingStatus"
    assert _enum_signature(resp.enum_types_by_name["ServingStatus"]) == [
        ("UNKNOWN", 0),
        ("SERVING", 1),
        ("NOT_SERVING", 2),
        ("SERVICE_UNKNOWN", 3),
    ]
    methods = {
        name: (rq.DESCRIPTOR.full_name, rs.DESCRIPTOR.full_name, cs, ss)
        for name, rq, rs, cs, ss in protos.service_methods(protos.HEALTH_SERVICE_NAME)
    }
    assert methods == {
        "Check": (HEALTH_MESSAGES[0], HEALTH_MESSAGES[1], False, False),
        "Watch": (HEALTH_MESSAGES[0], HEALTH_MESSAGES[1], False, True),
    }
    assert protos.health.HealthCheckResponse.SERVING == 1
    assert protos.health.HealthCheckResponse(status=1).SerializeToString() == b"\x08\x01"


@pytest.fixture(scope="module")
def grpc_health_pb2():
    try:
        from grpc_health.v1 import health_pb2
    except ImportError:
        pytest.skip("grpcio-health-checking not installed: no reference health_pb2 to compare against")
    return health_pb2


def test_health_schema_vs_grpc_health(grpc_health_pb2):
    theirs_file = grpc_health_pb2.DESCRIPTOR
    assert theirs_file.package == "grpc.health.v1"
    for full_name in HEALTH_MESSAGES:
        theirs = theirs_file.pool.FindMessageTypeByName(full_name)
        ours = protos.POOL.FindMessageTypeByName(full_name)
        assert _message_signature(ours) == _message_signature(theirs), full_name
        for e in theirs.enum_types:
            assert _enum_signature(ours.enum_types_by_name[e.name]) == _enum_signature(e)
    theirs_methods = {
        m.name: (m.input_type.full_name, m.output_type.full_name, m.client_streaming, m.server_streaming)
        for m in theirs_file.services_by_name["Health"].methods
    }
    ours_methods = {
        name: (rq.DESCRIPTOR.full_name, rs.DESCRIPTOR.full_name, cs, ss)
        for name, rq, rs, cs, ss in protos.service_methods(protos.HEALTH_SERVICE_NAME)
    }
    # newer grpc health protos add a List RPC (and its messages); we implement Check and Watch
    for name, sig in ours_methods.items():
        assert theirs_methods.get(name) == sig, name


@pytest.mark.parametrize("full_name", HEALTH_MESSAGES)
def test_health_round_trip(grpc_health_pb2, full_name):
    theirs_cls = getattr(grpc_health_pb2, full_name.rsplit(".", 1)[1])
    ours_cls = protos.message_class(full_name)
    _check_transfer(ours_cls, theirs_cls, full_name, 0, "ours->grpc_health")
    _check_transfer(theirs_cls, ours_cls, full_name, 0, "grpc_health->ours")
