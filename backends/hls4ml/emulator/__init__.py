"""Bit-exact numpy emulation of hls4ml firmware (the C-simulation, vectorised).

``model.py`` holds the chain of steps, ``working_set.py`` what it takes in memory; every
other module of this package except ``registry.py`` and ``maths.py`` is one layer family (as
hls4ml keeps one template module per family) and registers its builders when it is
imported, below. Adding a layer is one module and one ``@register``. Every layer is checked
bit for bit against hls4ml's own C-simulation in ``tests/hls4ml/test_hls4ml_*.py``.
"""

import importlib
import pkgutil

from ..firmware_graph import UnsupportedLayerError
from .model import FixedPointModel
from .registry import BUILDERS, STREAM_BUILDERS, register, register_stream

_NOT_FAMILIES = {"model", "registry", "maths", "working_set"}
for _info in pkgutil.iter_modules(__path__):
    if _info.name not in _NOT_FAMILIES:
        importlib.import_module(f"{__name__}.{_info.name}")

__all__ = ["BUILDERS", "STREAM_BUILDERS", "FixedPointModel", "UnsupportedLayerError", "register", "register_stream"]
