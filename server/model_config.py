"""config.pbtxt: parse, validate, normalize, and derive the tensor specs requests are checked against.

The config is kept as the ``inference.ModelConfig`` message of our private pool, *as written*
(SonicTriton compares the ``model_repository_agents`` checksum block byte for byte), with only
Triton's normalizations added (see ``normalize``). Backends never see the message: they get
``config_dict`` (protobuf JSON mapping with field names preserved) and ``TensorSpec``s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from google.protobuf import json_format, text_format

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

    @property
    def has_variable_dims(self) -> bool:
        return any(d < 0 for d in self.dims)


def parse_config_text(text: str, source: str) -> ModelConfig:
    config = ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as e:
        raise ConfigError(f"failed to parse model configuration {source}: {e}") from None
    return config


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
    if not config.default_model_filename and default_model_filename:
        config.default_model_filename = default_model_filename
    if not config.HasField("version_policy"):
        config.version_policy.latest.num_versions = 1
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


def input_specs(config: ModelConfig) -> dict[str, TensorSpec]:
    return {
        t.name: TensorSpec(
            name=t.name,
            datatype=_datatype(t.data_type, f"input '{t.name}'", config.name),
            dims=tuple(t.dims),
            optional=t.optional,
            allow_ragged_batch=t.allow_ragged_batch,
            is_shape_tensor=t.is_shape_tensor,
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
        )
        for t in config.output
    }


def config_dict(config: ModelConfig) -> dict:
    """The config as plain Python data for backends (which never see protobuf)."""
    return json_format.MessageToDict(config, preserving_proto_field_name=True)


def parameter(config: ModelConfig, key: str, default: str | None = None) -> str | None:
    if key in config.parameters:
        return config.parameters[key].string_value
    return default


def instance_count(config: ModelConfig) -> int:
    return sum(max(1, g.count) for g in config.instance_group) or 1
