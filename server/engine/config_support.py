"""Which ``config.pbtxt`` fields fpgaserve acts on, and what happens instead for the others.

Users move models over from Triton with configs that carry GPU, cache and rate-limiter
settings; fpgaserve accepts those configs (refusing them would break the move) but must not
ignore them without a word. ``FIELDS`` is the one table of every ``ModelConfig`` field (by
dotted path): the load log names each set field that is not acted on, and docs/models.md is
rendered from the same table (docs/hooks/config_fields.py), so the two cannot drift.

An entry covers its path and everything below it (``optimization`` covers all of its
sub-blocks). A message whose fields are not all treated alike lists each field instead. A
field that is only validated (e.g. ``optimization`` refused on an ensemble) is not acted on.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FieldSupport:
    """One ``ModelConfig`` field (or block) and what fpgaserve does with it.

    ``acted_on``: the server changes its behaviour by it. ``note``: for a field acted on,
    how; for one that is not, what happens instead (it ends up in the load warning).
    ``ignored_values``: for an enum field acted on, the value names that are nonetheless
    not honoured (instance_group ``kind: KIND_GPU``)."""

    path: str
    acted_on: bool
    note: str
    ignored_values: frozenset[str] = frozenset()


def _on(path: str, note: str, ignored_values: frozenset[str] = frozenset()) -> FieldSupport:
    return FieldSupport(path, True, note, ignored_values)


def _off(path: str, note: str) -> FieldSupport:
    return FieldSupport(path, False, note)


FIELDS: tuple[FieldSupport, ...] = (
    _on("name", "must match the model's folder"),
    _on("platform", "selects the backend (onnxruntime_onnx, ensemble)"),
    _on("backend", "selects the backend"),
    _off("runtime", "the backend named by backend/platform runs the model; no other runtime library is loaded"),
    _on("version_policy", "selects the versions served"),
    _on("max_batch_size", "batch dimension and batcher limit"),
    _on("input.name", "tensor name requests are checked against"),
    _on("input.data_type", "datatype requests are checked against"),
    _off("input.format", "no image-format handling; the tensor is passed as its dims say"),
    _on("input.dims", "shape requests are checked against"),
    _on("input.reshape", "the backend sees the reshaped tensor"),
    _on("input.is_shape_tensor", "shape tensors are not batched"),
    _on("input.allow_ragged_batch", "ragged inputs are batched"),
    _on("input.optional", "the input may be left out"),
    _off("input.is_non_linear_format_io", "tensors are always passed in linear layout"),
    _on("output.name", "tensor name responses carry"),
    _on("output.data_type", "datatype of the response tensor"),
    _on("output.dims", "shape of the response tensor"),
    _on("output.reshape", "the response tensor is reshaped"),
    _on("output.label_filename", "classification labels"),
    _on("output.is_shape_tensor", "shape tensors are not split per request"),
    _off("output.is_non_linear_format_io", "tensors are always passed in linear layout"),
    _on("batch_input", "batch tensors are built for the backend"),
    _on("batch_output", "batch outputs are split per request"),
    _off(
        "optimization",
        "no graph optimization, CUDA, accelerator, pinned-memory or eager-batching setting applies "
        "to fpgaserve's backends",
    ),
    _on("dynamic_batching.preferred_batch_size", "batch sizes the dynamic batcher aims for"),
    _on("dynamic_batching.max_queue_delay_microseconds", "how long a batch waits to fill"),
    _on("dynamic_batching.preserve_ordering", "responses released in arrival order"),
    _on("dynamic_batching.priority_levels", "request priority queues"),
    _on("dynamic_batching.default_priority_level", "priority of a request that names none"),
    _on("dynamic_batching.default_queue_policy", "queue size and timeouts"),
    _on("dynamic_batching.priority_queue_policy", "per-priority queue size and timeouts"),
    _on("sequence_batching.direct.max_queue_delay_microseconds", "how long a batch waits to fill"),
    _off(
        "sequence_batching.direct.minimum_slot_utilization",
        "a direct-strategy batch is formed as soon as the queue delay ends, however few slots are busy",
    ),
    _on("sequence_batching.oldest.max_candidate_sequences", "sequences batched at once"),
    _on("sequence_batching.oldest.preferred_batch_size", "batch sizes the oldest strategy aims for"),
    _on("sequence_batching.oldest.max_queue_delay_microseconds", "how long a batch waits to fill"),
    _off(
        "sequence_batching.oldest.preserve_ordering",
        "responses of the oldest strategy are released as their batch completes",
    ),
    _on("sequence_batching.max_sequence_idle_microseconds", "idle sequences are released"),
    _on("sequence_batching.control_input", "control tensors are synthesized"),
    _off(
        "sequence_batching.state",
        "no implicit state: the server keeps no state tensors between requests; the model keeps its own, "
        "keyed by the CORRID control",
    ),
    _off("sequence_batching.iterative_sequence", "requests of a sequence are not re-queued as iterations"),
    _on("ensemble_scheduling.step.model_name", "composing model of the step"),
    _on("ensemble_scheduling.step.model_version", "composing model version of the step"),
    _on("ensemble_scheduling.step.input_map", "tensors fed to the step"),
    _on("ensemble_scheduling.step.output_map", "tensors the step produces"),
    _off("ensemble_scheduling.step.model_namespace", "model names are global; the namespace is not used"),
    _off(
        "ensemble_scheduling.max_inflight_requests",
        "ensemble steps are not throttled; every request runs its steps as soon as their inputs are ready",
    ),
    _off("instance_group.name", "shown in the model's config only; instances are numbered, not named after it"),
    _on(
        "instance_group.kind",
        "instances run as host threads that drive the backend (the card, for hls4ml)",
        ignored_values=frozenset({"KIND_GPU"}),
    ),
    _on("instance_group.count", "number of instances"),
    _off(
        "instance_group.rate_limiter",
        "no rate limiter in fpgaserve; every instance runs whenever it is free",
    ),
    _off("instance_group.gpus", "no GPU placement; instances run on the host (hls4ml cards: the 'cards' parameter)"),
    _off("instance_group.secondary_devices", "no secondary devices are attached to instances"),
    _off("instance_group.profile", "no TensorRT optimization profiles"),
    _off("instance_group.passive", "passive instances are scheduled like any other"),
    _off("instance_group.host_policy", "no host policies (NUMA binding); --cpus sets the CPU set"),
    _on("default_model_filename", "model file of each version"),
    _off("cc_model_filenames", "no per-GPU compute capability files; default_model_filename is loaded"),
    _off("metric_tags", "metric labels are not extended by tags"),
    _on("parameters", "passed to the backend"),
    _on("model_warmup", "warmup requests run at load"),
    _off("model_operations", "no custom operation libraries are loaded"),
    _on("model_transaction_policy.decoupled", "decoupled (streaming) responses"),
    _on("model_repository_agents", "repository agents run at load (checksum)"),
    _off("response_cache", "no response cache in fpgaserve; every request runs"),
    _on(
        "model_metrics",
        "histogram buckets of nv_inference_first_response_histogram_ms and fpgaserve's request and "
        "compute duration histograms",
    ),
)

BY_PATH: dict[str, FieldSupport] = {f.path: f for f in FIELDS}


def _set_fields(message: Any, prefix: str) -> Iterator[tuple[str, Any, Any]]:
    """(dotted path, field descriptor, value) of each field set in ``message``: present
    messages, non-empty repeated fields, non-default scalars (what ``ListFields`` lists)."""
    for field, value in message.ListFields():
        yield prefix + field.name, field, value


def unacted_fields(config: Any) -> list[tuple[str, str]]:
    """(path, what happens instead) for each field set in ``config`` that fpgaserve does not
    act on, each path once, in proto order. ``config`` is the config as written (before
    normalization, which sets fields of its own)."""
    found: dict[str, str] = {}

    def walk(message: Any, prefix: str) -> None:
        for path, field, value in _set_fields(message, prefix):
            entry = BY_PATH.get(path)
            if entry is not None:
                if not entry.acted_on:
                    found.setdefault(path, entry.note)
                elif entry.ignored_values:
                    values = value if field.is_repeated else [value]
                    for v in values:
                        enum_name = field.enum_type.values_by_number[v].name
                        if enum_name in entry.ignored_values:
                            found.setdefault(f"{path}: {enum_name}", entry.note)
                continue
            if field.message_type is None or field.message_type.GetOptions().map_entry:
                # a field without an entry of its own: covered by none (the completeness
                # test keeps this from happening); say so rather than drop it
                found.setdefault(path, "not classified; fpgaserve does not act on it")
                continue
            items = value if field.is_repeated else [value]
            for item in items:
                walk(item, path + ".")

    walk(config, "")
    return list(found.items())


def load_warning(model: str, config: Any) -> str | None:
    """The one WARNING line of a model's load naming every set field not acted on, or None."""
    fields = unacted_fields(config)
    if not fields:
        return None
    # (" | " between fields: the notes themselves use ";", and never "|", which the docs
    # table reserves)
    parts = " | ".join(f"{path}: {note}" for path, note in fields)
    return f"model '{model}': config fields not acted on: {parts}"


def reference_markdown() -> str:
    """The table of docs/models.md ("Config fields"), from ``FIELDS``."""
    rows = ["| Field | Acted on | What fpgaserve does |", "|---|---|---|"]
    for f in FIELDS:
        note = f.note
        if f.ignored_values:
            note += f" ({', '.join(sorted(f.ignored_values))}: not honoured, warned)"
        rows.append(f"| `{f.path}` | {'yes' if f.acted_on else 'no (warned at load)'} | {note} |")
    return "\n".join(rows) + "\n"
