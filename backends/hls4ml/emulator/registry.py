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
(plus its import in ``__init__.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Op = Callable[..., Any]
Builder = Callable[..., tuple]

#: nnet:: function name -> builder
BUILDERS: dict[str, Builder] = {}


def register(*kinds: str) -> Callable[[Builder], Builder]:
    """Register the decorated builder for each ``nnet::`` function name in ``kinds``."""

    def decorate(builder: Builder) -> Builder:
        for kind in kinds:
            if kind in BUILDERS:
                raise RuntimeError(
                    f"nnet::{kind} is registered twice ({BUILDERS[kind].__module__}, {builder.__module__})"
                )
            BUILDERS[kind] = builder
        return builder

    return decorate
