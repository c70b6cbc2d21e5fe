"""``os.environ.get`` for the simulator's hot calls.

The card's settings are read at every call (tests change them between calls), and a start or a
sync reads several: ``os.environ.get`` encodes the name and decodes the value each time, which
is most of what a read costs. :func:`getenv` looks the encoded name up in the mapping's own
table (``os.environ._data``, what ``os.environ`` updates on every assignment), so it sees every
change ``os.environ`` sees, for a plain dict lookup when the variable is unset.
"""

from __future__ import annotations

import os

_DATA = getattr(os.environ, "_data", None)
_NAMES: dict[str, bytes] = {}


def getenv_raw(name: str):
    """The value of ``name`` as the environment table holds it (bytes; str where it holds
    str), None if unset: equal values compare equal, for caching what is made of them."""
    if not isinstance(_DATA, dict):  # pragma: no cover - not CPython's POSIX os.environ
        return os.environ.get(name)
    key = _NAMES.get(name)
    if key is None:
        key = _NAMES[name] = os.fsencode(name)
    return _DATA.get(key)


def getenv(name: str) -> str | None:
    """``os.environ.get(name)``."""
    value = getenv_raw(name)
    return value if value is None or isinstance(value, str) else os.fsdecode(value)
