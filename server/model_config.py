"""config.pbtxt: parse, validate, normalize, and derive the tensor specs requests are checked against.

The config is kept as the ``inference.ModelConfig`` message of our private pool, *as written*
(SonicTriton compares the ``model_repository_agents`` checksum block byte for byte), with only
Triton's normalizations added (see ``normalize``). Backends never see the message: they get
``config_dict`` (protobuf JSON mapping with field names preserved) and ``TensorSpec``s.
"""

from __future__ import annotations

import base64
import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from google.protobuf import json_format, text_format
from google.protobuf.descriptor import FieldDescriptor

from fpgaserve.protos import inference as pb

from . import datatypes
from .datatypes import DataType

if TYPE_CHECKING:
    # the message classes are built at run time from our private descriptor pool
    # (fpgaserve.protos): to the type checker a config is Any
    ModelConfig: TypeAlias = Any
else:
    ModelConfig = pb.ModelConfig

# platform -> backend, as Triton resolves them
PLATFORM_BACKENDS = {
    "onnxruntime_onnx": "onnxruntime",
}

# an ensemble has no backend: its steps run on the composing models (engine/ensemble_scheduler.py)
ENSEMBLE_PLATFORM = "ensemble"


def is_ensemble(config: ModelConfig) -> bool:
    return config.platform == ENSEMBLE_PLATFORM


MAX_INSTANCES = 256
MAX_PRIORITY_LEVELS = 1024
MAX_SEQUENCE_SLOTS = 65536


class ConfigError(Exception):
    """A config that cannot be served; the message names the file and the problem."""


@dataclass(frozen=True)
class TensorSpec:
    """One input or output as the codec validates it. ``dims`` exclude the batch dim."""

    name: str
    datatype: DataType
    dims: tuple[int, ...]
    optional: bool = False
    allow_ragged_batch: bool = False
    is_shape_tensor: bool = False
    label_filename: str = ""
    #: the config's ``reshape.shape``: the shape the backend sees (clients see ``dims``); None
    #: when the tensor has no reshape (``()`` is a reshape to a scalar per batch row)
    reshape: tuple[int, ...] | None = None

    @property
    def has_variable_dims(self) -> bool:
        return any(d < 0 for d in self.dims)

    @property
    def backend_dims(self) -> tuple[int, ...]:
        """The shape (batch dimension apart) the backend consumes or produces."""
        return self.dims if self.reshape is None else self.reshape


def map_variable_dims(shape: tuple[int, ...], source: tuple[int, ...], target: tuple[int, ...]) -> tuple[int, ...]:
    """``shape`` (which matches ``source``) as ``target`` describes it: the sizes ``shape``
    has at the -1s of ``source`` fill the -1s of ``target`` in order, as Triton maps between
    ``dims`` and ``reshape.shape``. ``validate`` has made sure both have as many -1s and the
    same element count between them, so the result always holds as many elements."""
    variable = iter([size for size, d in zip(shape, source) if d == -1])
    return tuple(next(variable) if d == -1 else d for d in target)


def parse_config_text(text: str, source: str) -> ModelConfig:
    config = ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as e:
        raise ConfigError(f"failed to parse model configuration {source}: {e}") from None
    return config


#: where tritonserver's --model-config-name looks: <model>/configs/<name>.pbtxt
CUSTOM_CONFIG_DIR = "configs"


def config_path(model_dir: Path, custom_name: str = "") -> Path:
    """The configuration file a model loads from: ``<model>/configs/<custom_name>.pbtxt`` when
    ``--model-config-name`` names one that exists there, else ``<model>/config.pbtxt``.

    As tritonserver (2.51, probed 2026-11-26): a name without such a file, or one that is not a
    plain file name (a space, ``../x``), silently selects the default config. A name is only ever
    joined as one path component under ``configs/``, so it cannot reach outside the model folder.
    """
    if custom_name and is_plain_config_name(custom_name):
        custom = model_dir / CUSTOM_CONFIG_DIR / f"{custom_name}.pbtxt"
        if custom.is_file():
            return custom
    return model_dir / "config.pbtxt"


def is_plain_config_name(name: str) -> bool:
    """A name that can only ever be one file name under ``configs/`` (no separator, no NUL, not
    hidden or a parent reference)."""
    return bool(name) and "/" not in name and "\\" not in name and "\0" not in name and not name.startswith(".")


def read_config_file(path: Path) -> ModelConfig:
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"failed to read model configuration {path}: {e.strerror}") from None
    return parse_config_text(text, str(path))


def parse_config_json(text: str) -> ModelConfig:
    """The ``config`` parameter of RepositoryModelLoad: a JSON ModelConfig."""
    config = ModelConfig()
    try:
        json_format.Parse(text, config)
    except (json_format.ParseError, json.JSONDecodeError) as e:
        raise ConfigError(f"failed to parse model configuration override: {e}") from None
    return config


def backend_name(config: ModelConfig) -> str:
    if config.backend:
        return config.backend
    if config.platform in PLATFORM_BACKENDS:
        return PLATFORM_BACKENDS[config.platform]
    return config.platform


def normalize(config: ModelConfig, model_name: str, default_model_filename: str = "") -> None:
    """Triton's normalizations (core model_config_utils.cc), applied in place.

    Only defaults a client could observe and rely on: the name, the version policy,
    instance groups (name, count, kind), the backend's default model filename and, when a
    dynamic batcher is configured, its preferred size. Everything the user wrote is kept as
    written. (Triton also adds GPU pinned-memory ``optimization`` blocks; they mean nothing
    here, so we leave them out.)
    """
    if not config.name:
        config.name = model_name
    if not config.HasField("version_policy"):
        config.version_policy.latest.num_versions = 1
    if is_ensemble(config):
        # Triton gives an ensemble no instance group (it has no instances: validate_ensemble
        # refuses one) and no model file
        return
    if not config.default_model_filename and default_model_filename:
        config.default_model_filename = default_model_filename
    if not config.instance_group:
        # the group Triton adds is named after the model; groups written without a name
        # get "<model>_<index>" (core model_config_utils.cc SetDefaultInstanceCount)
        config.instance_group.add(name=config.name)
    for i, group in enumerate(config.instance_group):
        if not group.name:
            group.name = f"{config.name}_{i}"
        group.count = max(group.count, 1)
        if group.kind == pb.ModelInstanceGroup.Kind.Value("KIND_AUTO"):
            group.kind = pb.ModelInstanceGroup.Kind.Value("KIND_CPU")
    if (
        config.HasField("dynamic_batching")
        and config.max_batch_size > 0
        and not config.dynamic_batching.preferred_batch_size
    ):
        config.dynamic_batching.preferred_batch_size.append(config.max_batch_size)
    if config.HasField("sequence_batching") and config.sequence_batching.max_sequence_idle_microseconds == 0:
        config.sequence_batching.max_sequence_idle_microseconds = 1_000_000


def _datatype(enum_value: int, what: str, source: str) -> DataType:
    try:
        name = pb.DataType.Name(enum_value)
    except ValueError:
        name = str(enum_value)
    dt = datatypes.BY_CONFIG.get(name)
    if dt is None:
        raise ConfigError(f"{source}: {what} has unsupported data_type {name}")
    return dt


def validate(config: ModelConfig, model_name: str, source: str) -> None:
    """Checks Triton makes at load; raises ConfigError naming the file and the problem."""
    if config.name != model_name:
        raise ConfigError(f"{source}: model name '{config.name}' does not match its directory name '{model_name}'")
    if config.max_batch_size < 0:
        raise ConfigError(f"{source}: max_batch_size must be >= 0, got {config.max_batch_size}")
    histogram_buckets(config, source)
    if not backend_name(config):
        raise ConfigError(f"{source}: must specify 'platform' or 'backend'")
    seen: set[tuple[str, str]] = set()
    for kind, tensors in (("input", config.input), ("output", config.output)):
        for t in tensors:
            if not t.name:
                raise ConfigError(f"{source}: model {kind} must specify 'name'")
            if (kind, t.name) in seen:
                raise ConfigError(f"{source}: duplicate {kind} name '{t.name}'")
            seen.add((kind, t.name))
            _datatype(t.data_type, f"{kind} '{t.name}'", source)
            if t.data_type == 0:
                raise ConfigError(f"{source}: {kind} '{t.name}' must specify 'data_type'")
            if not t.dims and not t.HasField("reshape") and config.max_batch_size == 0:
                raise ConfigError(f"{source}: {kind} '{t.name}' must specify 'dims'")
            for d in t.dims:
                if d == 0 or d < -1:
                    raise ConfigError(f"{source}: {kind} '{t.name}' dims must be positive or -1, got {list(t.dims)}")
            if t.HasField("reshape"):
                _validate_reshape(
                    tuple(t.dims), tuple(t.reshape.shape), config.max_batch_size, f"{source}: {kind} '{t.name}'"
                )
    _validate_batch_outputs(config, source)
    if config.HasField("dynamic_batching"):
        for p in config.dynamic_batching.preferred_batch_size:
            if p < 1 or (config.max_batch_size > 0 and p > config.max_batch_size):
                raise ConfigError(
                    f"{source}: dynamic batching preferred size must be positive and <= "
                    f"max_batch_size {config.max_batch_size}, got {p}"
                )
    policy = config.version_policy
    if policy.HasField("latest") and policy.latest.num_versions < 1:
        raise ConfigError(f"{source}: version_policy latest.num_versions must be >= 1")
    # Limits on what a config makes the server build up front (a config may come from a
    # client, RepositoryModelLoad's override): one thread per instance, one queue per
    # priority level, one slot per batch row for direct sequence batching.
    instances = sum(max(1, g.count) for g in config.instance_group)
    if instances > MAX_INSTANCES:
        raise ConfigError(f"{source}: {instances} instances requested; at most {MAX_INSTANCES} per model")
    if config.HasField("dynamic_batching") and config.dynamic_batching.priority_levels > MAX_PRIORITY_LEVELS:
        raise ConfigError(
            f"{source}: dynamic_batching priority_levels {config.dynamic_batching.priority_levels} exceeds "
            f"{MAX_PRIORITY_LEVELS}"
        )
    if config.HasField("sequence_batching") and config.max_batch_size > MAX_SEQUENCE_SLOTS:
        raise ConfigError(
            f"{source}: sequence batching keeps a slot per batch row; max_batch_size {config.max_batch_size} "
            f"exceeds {MAX_SEQUENCE_SLOTS}"
        )


def _variable_chunks(dims: tuple[int, ...]) -> list[int]:
    """The element counts between the -1s of ``dims`` (Triton compares these: [2, 4, -1, 6]
    may become [8, -1, 1, 6], as 2 * 4 = 8 and 6 = 1 * 6)."""
    chunks = [1]
    for d in dims:
        if d == -1:
            chunks.append(1)
        else:
            chunks[-1] *= d
    return chunks


def _validate_reshape(dims: tuple[int, ...], reshape: tuple[int, ...], max_batch_size: int, what: str) -> None:
    """Triton's rules (core ValidateIOShape): the reshape holds the same elements as ``dims``
    for every size the variable dims take, so the server can map one onto the other per
    request without looking at the data."""
    if not reshape and max_batch_size == 0:
        # a non-batching model's tensor would then always be a scalar, which has no batch
        # row to carry it: Triton refuses it too
        raise ConfigError(f"{what} cannot have an empty reshape in a model without batching (max_batch_size 0)")
    for d in reshape:
        if d == 0 or d < -1:
            raise ConfigError(f"{what} reshape dimensions must be positive or -1, got {list(reshape)}")
    dims_chunks, reshape_chunks = _variable_chunks(dims), _variable_chunks(reshape)
    if len(dims_chunks) != len(reshape_chunks):
        raise ConfigError(
            f"{what} has a different number of variable-size dimensions in dims {list(dims)} and "
            f"reshape {list(reshape)}"
        )
    if dims_chunks != reshape_chunks:
        raise ConfigError(f"{what} has a different element count in dims {list(dims)} and reshape {list(reshape)}")


def _validate_batch_outputs(config: ModelConfig, source: str) -> None:
    """``batch_output`` (Triton's ragged_batching.md): each entry scatters model outputs to the
    requests of a batch with the shape of one of their inputs. Only Triton's one kind exists."""
    inputs = {t.name for t in config.input}
    outputs = {t.name for t in config.output}
    targeted: set[str] = set()
    for index, bo in enumerate(config.batch_output):
        what = f"{source}: batch_output {index}"
        try:
            kind = pb.BatchOutput.Kind.Name(bo.kind)
        except ValueError:
            kind = str(bo.kind)
        if kind != "BATCH_SCATTER_WITH_INPUT_SHAPE":
            raise ConfigError(f"{what} has unsupported kind {kind}; the only kind is BATCH_SCATTER_WITH_INPUT_SHAPE")
        if config.max_batch_size == 0:
            raise ConfigError(f"{what} needs a batching model (max_batch_size > 0)")
        if not bo.target_name:
            raise ConfigError(f"{what} must specify 'target_name'")
        if len(bo.source_input) != 1:
            raise ConfigError(f"{what} must name exactly one 'source_input', got {len(bo.source_input)}")
        if bo.source_input[0] not in inputs:
            raise ConfigError(f"{what} source_input '{bo.source_input[0]}' is not an input of the model")
        for target in bo.target_name:
            if target not in outputs:
                raise ConfigError(f"{what} target_name '{target}' is not an output of the model")
            if target in targeted:
                raise ConfigError(f"{what} target_name '{target}' is the target of another batch_output")
            targeted.add(target)


def batch_output_sources(config: ModelConfig) -> dict[str, str]:
    """Output name -> the input whose per-request shape it is scattered with (validated)."""
    return {target: bo.source_input[0] for bo in config.batch_output for target in bo.target_name}


def validate_ensemble(config: ModelConfig) -> None:
    """Triton's checks of an ensemble's own config (core ValidateEnsembleSchedulingConfig),
    made before any composing model is looked at, with its texts: every step names a model and
    maps inputs and outputs, each ensemble tensor is written by one step at most, and the data
    flows: every ensemble input is read, every output is written from the inputs, and every
    other tensor is both written from the inputs and read (so a cycle of steps, whose tensors
    can never become ready, is refused as an unused tensor, as Triton does). Raises
    ConfigError with the bare text (the caller adds the file)."""
    name = config.name
    if not is_ensemble(config):
        if config.HasField("ensemble_scheduling"):
            raise ConfigError(
                f"ensemble scheduling cannot be set for model '{name}' whose platform is not {ENSEMBLE_PLATFORM}"
            )
        return
    if config.instance_group:
        raise ConfigError(f"instance group should not be specified for ensemble '{name}'")
    if config.HasField("optimization"):
        raise ConfigError(f"optimization should not be specified for ensemble '{name}'")
    if config.model_warmup:
        raise ConfigError(f"model_warmup can not be specified for ensemble '{name}'")
    steps = config.ensemble_scheduling.step
    if not steps:
        raise ConfigError(f"must specify 'step' for ensemble '{name}'")
    # the data-flow graph over ensemble tensors: a step's outputs each depend on all its inputs
    written: set[str] = set()
    readers: dict[str, list[str]] = {}  # tensor -> the tensors computed from it
    sources: dict[str, list[str]] = {}  # tensor -> the tensors it is computed from
    order: list[str] = []  # every tensor, first mention first (for a stable error)
    for index, step in enumerate(steps):
        for field, what in (("model_name", "model_name"), ("input_map", "input_map"), ("output_map", "output_map")):
            if not getattr(step, field):
                raise ConfigError(f"must specify '{what}' in step {index} of ensemble '{name}'")
        outs = []
        for tensor in step.output_map.values():
            if tensor in written:
                raise ConfigError(
                    f"ensemble tensor '{tensor}' can appear in an output map only once for ensemble '{name}' "
                    f"step {index}"
                )
            written.add(tensor)
            outs.append(tensor)
            sources.setdefault(tensor, [])
            readers.setdefault(tensor, [])
            if tensor not in order:
                order.append(tensor)
        for tensor in step.input_map.values():
            readers.setdefault(tensor, [])
            sources.setdefault(tensor, [])
            if tensor not in order:
                order.append(tensor)
            for out in outs:
                sources[out].append(tensor)
                readers[tensor].append(out)
    ready: set[str] = set()
    frontier = []
    for t in config.input:
        if t.name not in readers:
            raise ConfigError(f"ensemble input '{t.name}' for ensemble {name}' is not used")  # (sic)
        ready.add(t.name)
        frontier.append(t.name)
    while frontier:
        for nxt in readers[frontier.pop(0)]:
            if nxt not in ready and all(s in ready for s in sources[nxt]):
                ready.add(nxt)
                frontier.append(nxt)
    outputs = set()
    for t in config.output:
        if t.name not in readers:
            raise ConfigError(f"ensemble output '{t.name}' for ensemble {name}' is not used")  # (sic)
        if t.name not in ready:
            raise ConfigError(f"output '{t.name}' for ensemble '{name}' is not written")
        outputs.add(t.name)
    # Triton walks its tensors in a hash map's order, which for libstdc++ is mostly the newest
    # first: the same order here names the same tensor when several are unused
    for tensor in reversed(order):
        if tensor not in outputs and (tensor not in ready or not readers[tensor]):
            raise ConfigError(f"ensemble tensor '{tensor}' is unused in ensemble '{name}'")


def input_specs(config: ModelConfig) -> dict[str, TensorSpec]:
    return {
        t.name: TensorSpec(
            name=t.name,
            datatype=_datatype(t.data_type, f"input '{t.name}'", config.name),
            dims=tuple(t.dims),
            optional=t.optional,
            allow_ragged_batch=t.allow_ragged_batch,
            is_shape_tensor=t.is_shape_tensor,
            reshape=tuple(t.reshape.shape) if t.HasField("reshape") else None,
        )
        for t in config.input
    }


def output_specs(config: ModelConfig) -> dict[str, TensorSpec]:
    return {
        t.name: TensorSpec(
            name=t.name,
            datatype=_datatype(t.data_type, f"output '{t.name}'", config.name),
            dims=tuple(t.dims),
            is_shape_tensor=t.is_shape_tensor,
            label_filename=t.label_filename,
            reshape=tuple(t.reshape.shape) if t.HasField("reshape") else None,
        )
        for t in config.output
    }


def config_dict(config: ModelConfig) -> dict:
    """The config as plain Python data for backends (which never see protobuf)."""
    return json_format.MessageToDict(config, preserving_proto_field_name=True)


def replace_from_dict(config: ModelConfig, completed: dict) -> None:
    """Make ``config`` the config ``completed`` describes (``config_dict``'s form, or Triton's
    JSON): what a backend's auto-complete returned."""
    replacement = ModelConfig()
    try:
        json_format.ParseDict(completed, replacement)
    except (json_format.ParseError, TypeError, ValueError) as e:
        raise ConfigError(f"auto-completed configuration is not valid: {e}") from None
    config.CopyFrom(replacement)


def parameter(config: ModelConfig, key: str, default: str | None = None) -> str | None:
    if key in config.parameters:
        return config.parameters[key].string_value
    return default


def instance_count(config: ModelConfig) -> int:
    return sum(max(1, g.count) for g in config.instance_group) or 1


def triton_json(msg) -> dict:
    """A protobuf message as Triton writes it in JSON (the HTTP model-config endpoint, the
    Python backend's ``model_config`` argument): proto field names, every field present,
    int64 as numbers, enums by name."""
    out: dict[str, Any] = {}
    for fd in msg.DESCRIPTOR.fields:
        value = getattr(msg, fd.name)
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            vfd = fd.message_type.fields_by_name["value"]
            out[fd.name] = {k: _json_value(vfd, v) for k, v in value.items()}
        elif fd.label == FieldDescriptor.LABEL_REPEATED:
            out[fd.name] = [_json_value(fd, v) for v in value]
        elif fd.message_type is not None and not msg.HasField(fd.name):
            continue
        else:
            out[fd.name] = _json_value(fd, value)
    return out


def _json_value(fd, value):
    if fd.message_type is not None:
        return triton_json(value)
    if fd.enum_type is not None:
        ev = fd.enum_type.values_by_number.get(value)
        return ev.name if ev is not None else value
    if fd.type == FieldDescriptor.TYPE_BYTES:
        return base64.b64encode(value).decode()
    return value


def triton_json_from_dict(config: dict) -> dict:
    """``triton_json`` of a config given as ``config_dict`` gives it (what backends hold)."""
    message = ModelConfig()
    json_format.ParseDict(config, message)
    return triton_json(message)


# model_metrics (``--metrics-config histogram_latencies``): the families a config may set buckets
# for, with their defaults; the engine's latency recorder (engine/latency.py) uses the same.
FIRST_RESPONSE_BUCKETS_MS = (100.0, 500.0, 2000.0, 5000.0)
# request and compute histograms (µs). They start at 5 µs, below the queue histogram's
# 100 µs: an hls4ml design computes in a few µs and a request over loopback takes tens, so
# 100 µs as the first bound would put every request of a fast model in one bucket and
# histogram_quantile could not tell 5 µs from 90 µs.
DURATION_BUCKETS_US = (
    5,
    10,
    25,
    50,
    100,
    250,
    500,
    1_000,
    2_500,
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    1_000_000,
    5_000_000,
)
#: histogram families a model's ``model_metrics`` may set buckets for -> the default buckets
HISTOGRAM_FAMILIES: dict[str, tuple[float, ...]] = {
    "nv_inference_first_response_histogram_ms": FIRST_RESPONSE_BUCKETS_MS,
    "nv_inference_request_duration_histogram_us": DURATION_BUCKETS_US,
    "nv_inference_compute_duration_histogram_us": DURATION_BUCKETS_US,
}
#: buckets one histogram may have: every bucket is a series per model version on /metrics
MAX_BUCKETS = 64


def histogram_buckets(config: ModelConfig, source: str = "model_metrics") -> dict[str, tuple[float, ...]]:
    """The ``model_metrics`` histogram buckets of the config: family -> bounds. A family
    fpgaserve does not export, buckets that are not finite and strictly increasing, none or
    more than ``MAX_BUCKETS``, or a family named twice is a ``ConfigError``: a dashboard
    built on buckets the server silently did not use would show wrong quantiles."""
    out: dict[str, tuple[float, ...]] = {}
    for control in config.model_metrics.metric_control:
        family = control.metric_identifier.family
        where = f"{source}: model_metrics metric_control of family '{family}'"
        if family not in HISTOGRAM_FAMILIES:
            raise ConfigError(
                f"{where}: not a histogram family whose buckets can be set (one of: {', '.join(HISTOGRAM_FAMILIES)})"
            )
        if family in out:
            raise ConfigError(f"{where}: the family is given more than once")
        buckets = tuple(control.histogram_options.buckets)
        if not 1 <= len(buckets) <= MAX_BUCKETS:
            raise ConfigError(f"{where}: histogram_options needs 1 to {MAX_BUCKETS} buckets, got {len(buckets)}")
        if not all(math.isfinite(b) for b in buckets):
            raise ConfigError(f"{where}: every bucket bound must be a finite number")
        if any(b >= c for b, c in itertools.pairwise(buckets)):
            raise ConfigError(f"{where}: bucket bounds must be strictly increasing, got {list(buckets)}")
        out[family] = buckets
    return out
