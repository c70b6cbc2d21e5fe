"""Bit-exact numpy emulation of hls4ml firmware (the C-simulation, vectorised).

``model.py`` holds the chain of steps; each layer family is one module that registers its
builders (``registry.py``), as hls4ml keeps one template module per layer family. Every
layer is checked bit for bit against hls4ml's own C-simulation in ``tests/test_hls4ml_*.py``.
"""

from ..firmware_graph import UnsupportedLayerError

# the family modules register their builders on import
from . import activations, conv, dense, merge, normalization, pooling, reshape, softmax  # noqa: F401
from .model import FixedPointModel
from .registry import BUILDERS, register

__all__ = ["BUILDERS", "FixedPointModel", "UnsupportedLayerError", "register"]
