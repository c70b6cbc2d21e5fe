"""An ensemble's plan: its steps as the ensemble scheduler runs them (``plan``), the models
they name (``composing_names``), and Triton's load-time checks of each step against its
composing model's config (``check_composing``).

Loading checks the ensemble in Triton's two stages, with its texts: its own config
(``model_config.validate_ensemble``), then, once the composing models are loaded, each step
against their configs (here). The repository resolves the dependencies (it loads composing
models, and retires an ensemble whose composing model goes).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from fpgaserve.protos import inference as pb

from ..errors import format_shape


class EnsembleError(Exception):
    """An ensemble that cannot load, with Triton's text."""


class Step(NamedTuple):
    position: int  # in the config's step list
    model_name: str
    version: str  # "" = the latest ready version (model_version -1)
    input_map: dict[str, str]  # composing model's input -> ensemble tensor
    output_map: dict[str, str]  # composing model's output -> ensemble tensor


def plan(config) -> list[Step]:
    """The steps of a validated ensemble config."""
    return [
        Step(
            i,
            s.model_name,
            "" if s.model_version < 0 else str(s.model_version),
            dict(s.input_map),
            dict(s.output_map),
        )
        for i, s in enumerate(config.ensemble_scheduling.step)
    ]


def composing_names(config) -> list[str]:
    """The models an ensemble's steps name, each once, in step order."""
    return list(dict.fromkeys(s.model_name for s in config.ensemble_scheduling.step))


# ---------------------------------------------------------------------------- load-time checks


class _Node(NamedTuple):
    """What one model declares an ensemble tensor to be."""

    model: str
    dtype: int
    dims: tuple[int, ...]
    full_dims: tuple[int, ...]  # with the batch dimension (-1) of a batching model


def _node(model: str, batching: bool, tensor) -> _Node:
    # the dims a client of the model sees: a step's tensors pass between models in that shape
    # (the reshape is the backend's own view; Triton 2.51 compares dims too, probed 2026-11-28)
    dims = tuple(tensor.dims)
    return _Node(model, tensor.data_type, dims, ((-1,) if batching else ()) + dims)


def dims_match(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Whether two shapes agree, a -1 on either side matching any size (the steps' checks, at
    load and per request)."""
    return len(a) == len(b) and all(-1 in (x, y) or x == y for x, y in zip(a, b))


def _declare(tensors: dict[str, _Node], tensor: str, node: _Node, ensemble: str) -> None:
    """Record what a step declares ensemble ``tensor`` to be; it must agree with earlier steps."""
    if tensor in tensors:
        _consistent(tensors[tensor], node, f"in ensemble {ensemble}, ensemble tensor {tensor}: ")
    else:
        tensors[tensor] = node


def _consistent(lhs: _Node, rhs: _Node, prefix: str) -> None:
    if lhs.dtype != rhs.dtype:
        raise EnsembleError(
            f"{prefix}inconsistent data type: {pb.DataType.Name(lhs.dtype)} is inferred from model {lhs.model} "
            f"while {pb.DataType.Name(rhs.dtype)} is inferred from model {rhs.model}"
        )
    # a tensor may pass between a non-batching model declaring [-1, d...] and a batching one
    # declaring [d...]: compared with the batch dimension too
    if not dims_match(lhs.dims, rhs.dims) and not dims_match(lhs.full_dims, rhs.full_dims):
        raise EnsembleError(
            f"{prefix}inconsistent shape: {format_shape(lhs.full_dims)} is inferred from model {lhs.model} while "
            f"{format_shape(rhs.full_dims)} is inferred from model {rhs.model}"
        )


def check_composing(config, composing: dict[str, Any]) -> None:
    """Triton's checks of each step against its composing model's config (core
    ValidateEnsembleConfig), in its order and with its texts: batch sizes, every mapped name
    exists, every model input is mapped once, and each ensemble tensor has one data type and
    a compatible shape wherever it appears. ``composing``: model name -> its loaded config.
    Raises EnsembleError."""
    ensemble = config.name
    batching = config.max_batch_size > 0
    tensors: dict[str, _Node] = {}
    for t in config.input:
        tensors[t.name] = _node(ensemble, batching, t)
    for t in config.output:
        tensors.setdefault(t.name, _node(ensemble, batching, t))
    for step in config.ensemble_scheduling.step:
        model = composing[step.model_name]
        name = step.model_name
        if model.max_batch_size != 0 and model.max_batch_size < config.max_batch_size:
            raise EnsembleError(
                f"ensemble {ensemble} allows maximum batch size {config.max_batch_size}, but it contains model "
                f"{name} which only allows maximum batch size to be {model.max_batch_size}"
            )
        if model.model_transaction_policy.decoupled:
            raise EnsembleError(
                f"in ensemble {ensemble}, step of model '{name}' is decoupled, and fpgaserve's ensembles do not "
                "support decoupled composing models"
            )
        model_batching = model.max_batch_size > 0
        inputs = {t.name: t for t in model.input}
        for key, tensor in step.input_map.items():
            if key not in inputs:
                raise EnsembleError(
                    f"in ensemble {ensemble}, ensemble tensor {tensor} is mapping to non-existing input {key} "
                    f"in model {name}"
                )
        for key, spec in inputs.items():
            if key not in step.input_map:
                raise EnsembleError(
                    f"in ensemble {ensemble}, input {key} in model {model.name} is not mapped to any ensemble tensors"
                )
            _declare(tensors, step.input_map[key], _node(name, model_batching, spec), ensemble)
        outputs = {t.name: t for t in model.output}
        for key, tensor in step.output_map.items():
            if key not in outputs:
                raise EnsembleError(
                    f"in ensemble {ensemble}, ensemble tensor {tensor} is mapped from non-existing output {key} "
                    f"in model {name}"
                )
        for key, tensor in step.output_map.items():
            _declare(tensors, tensor, _node(name, model_batching, outputs[key]), ensemble)
