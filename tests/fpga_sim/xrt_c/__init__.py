"""A test double of XRT's ``libxrt_coreutil.so.2`` (its C API) over the simulated cards.

:func:`build_xrt_root` compiles ``xrt_coreutil_double.c`` with the machine's ``cc`` into
``DEST/lib/libxrt_coreutil.so.2`` and writes ``DEST/version.json`` as XRT installs it, so DEST
can be ``XILINX_XRT``. The library calls the card core (``card_core.c``, built by
:func:`build_core` into ``libfpgasim_card.so``, the per-event rules of the simulated card) for
every sync, start and wait, and ``fpga_sim.xrt_c_bridge`` for the cold path (opening, loading,
contexts). :class:`BuildUnavailable` says why it cannot be built (no ``cc``).
"""

from .build import (
    CORE_LIBRARY,
    LIBRARY,
    SOURCE,
    BuildFailed,
    BuildUnavailable,
    build_core,
    build_xrt_root,
    default_core_path,
    default_xrt_root,
    source_hash,
)

__all__ = [
    "CORE_LIBRARY",
    "LIBRARY",
    "SOURCE",
    "BuildFailed",
    "BuildUnavailable",
    "build_core",
    "build_xrt_root",
    "default_core_path",
    "default_xrt_root",
    "source_hash",
]
