"""The layer registry: which function builds the emulation of each ``nnet::`` call.

As hls4ml keeps one template module per layer family, each family module here registers
its builders with ``@register("kind", ...)``, ``kind`` being the ``nnet::`` function name the
top function calls. A builder is called once, when the model is built, as
``builder(model, layer, in_t)`` and returns ``(op, out_t)`` or ``(op, out_t, op_f64)``:

* ``op``: the layer on int64 raws (one row per sample), the reference formulation;
* ``out_t``: the ``FixedType`` of the array the layer writes;
* ``op_f64`` (optional, may be None): the same integers as float64, exact below 2**52, used
  when every type of the model fits; without it the int64 op runs inside the float64 chain.

A builder refuses what it cannot reproduce bit for bit by raising ``UnsupportedLayerError``
naming the layer; it never guesses. Adding a layer is one module and one registration
(``__init__.py`` imports every module of the package).

io_stream calls (``Layer.stream``) use the builder ``@register_stream`` registered for their
kind when there is one (the stream form computes differently: line-buffer convolutions,
pooling in accum_t, softmax per stream word), else the io_parallel builder, for the kinds
whose stream form computes the same values (dense, element-wise activations, merges).

Fusions (``@register_fusion(first, second, ...)``) are peepholes of the float64 chain: where an
``nnet::first`` call's output is read only by the next call, an ``nnet::second`` (e.g. a relu
then a max pooling), the fusion may return one float64 op computing both from the first's
input (the same integers, cheaper: e.g. the pooling before the relu on a quarter of the
values). It is called once, at build, as ``fusion(model, first, second, in_t, mid_t, op_a,
op_b)`` with both layers, the first's input and output types and both float64 ops (for a
fallback), and returns the fused op or None (no fusion: the two ops run). The int64 ops
always run unfused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Op = Callable[..., Any]
Builder = Callable[..., tuple]

#: nnet:: function name -> builder
BUILDERS: dict[str, Builder] = {}
#: nnet:: function name -> builder of its io_stream form, where that differs
STREAM_BUILDERS: dict[str, Builder] = {}
#: (first kind, second kind) -> fusion of the two float64 ops, see the module docstring
FUSIONS: dict[tuple[str, str], Callable[..., Op | None]] = {}


def register(*kinds: str) -> Callable[[Builder], Builder]:
    """Register the decorated builder for each ``nnet::`` function name in ``kinds``."""
    return _register(BUILDERS, kinds)


def register_stream(*kinds: str) -> Callable[[Builder], Builder]:
    """Register the decorated builder for the io_stream form of each kind in ``kinds``."""
    return _register(STREAM_BUILDERS, kinds)


def register_fusion(first: str, *seconds: str) -> Callable[[Callable[..., Op | None]], Callable[..., Op | None]]:
    """Register the decorated fusion for an ``nnet::first`` call followed by each of ``seconds``."""

    def decorate(fusion: Callable[..., Op | None]) -> Callable[..., Op | None]:
        for second in seconds:
            if (first, second) in FUSIONS:
                raise RuntimeError(f"fusion nnet::{first} -> nnet::{second} is registered twice")
            FUSIONS[(first, second)] = fusion
        return fusion

    return decorate


def builder_for(kind: str, stream: bool) -> Builder | None:
    """The builder of an ``nnet::kind`` call (its stream form's first for an io_stream call)."""
    if stream and kind in STREAM_BUILDERS:
        return STREAM_BUILDERS[kind]
    return BUILDERS.get(kind)


def _register(table: dict[str, Builder], kinds: tuple[str, ...]) -> Callable[[Builder], Builder]:
    def decorate(builder: Builder) -> Builder:
        for kind in kinds:
            if kind in table:
                raise RuntimeError(f"nnet::{kind} is registered twice ({table[kind].__module__}, {builder.__module__})")
            table[kind] = builder
        return builder

    return decorate
