"""Which engine process serves a model (``--engine-processes N``).

Card ``c`` belongs to engine process ``c mod N``: that process alone opens it (a card is open
in one process at a time, as XRT/xocl have it). A model goes to the engine process that owns
the cards its ``cards`` parameter lists; a model without one (no card, or any free card) goes
to engine process 0, which then places it on its own cards only. A model whose cards belong to
different engine processes cannot be served: one process must drive all of them.

The decision is made from the model's configuration before it loads (the configuration a load
request overrides it with, else the file in the repository), by every process the same way.
"""

from __future__ import annotations

from pathlib import Path

from .. import model_config as mc


class PlacementError(ValueError):
    pass


def card_engine(card: int, engines: int) -> int:
    return card % engines


def engine_cards_setting(engine: int, engines: int) -> str:
    """The hls4ml backend setting ``engine-cards`` of engine ``engine``: ``<engine>/<engines>``."""
    return f"{engine}/{engines}"


def engine_of_config(config: mc.ModelConfig, engines: int) -> int:
    """The engine process of a model with this configuration (``PlacementError`` if its cards
    span several)."""
    if engines <= 1:
        return 0
    spec = (mc.parameter(config, "cards") or "").replace(" ", "")
    try:
        cards = [int(c) for c in spec.split(",") if c]
    except ValueError:
        return 0  # the backend refuses it with its own words when the model loads
    owners = sorted({card_engine(c, engines) for c in cards if c >= 0})
    if len(owners) > 1:
        raise PlacementError(
            f"parameter cards '{spec}' names cards of engine processes {', '.join(map(str, owners))} "
            f"(--engine-processes {engines}: card c belongs to engine process c mod {engines}); "
            "a model's cards must belong to one engine process"
        )
    return owners[0] if owners else 0


def engine_of_model(model_dir: Path, engines: int, config_name: str = "", config_json: str | None = None) -> int:
    """The engine process of the model in ``model_dir`` (or of ``config_json``, a load's
    override). A configuration that cannot be read goes to engine 0, whose load reports it."""
    if engines <= 1:
        return 0
    try:
        if config_json is not None:
            config = mc.parse_config_json(config_json)
        else:
            config = mc.read_config_file(mc.config_path(model_dir, config_name))
    except mc.ConfigError:
        return 0
    return engine_of_config(config, engines)
