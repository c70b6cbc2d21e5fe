"""A test double of XRT's ``libxrt_coreutil.so.2`` (its C API) over the simulated cards.

:func:`build_xrt_root` compiles ``xrt_coreutil_double.c`` with the machine's ``cc`` into
``DEST/lib/libxrt_coreutil.so.2`` and writes ``DEST/version.json`` as XRT installs it, so DEST
can be ``XILINX_XRT``; the library drives ``fpga_sim.card`` through ``fpga_sim.xrt_c_bridge``
(see both for how). :class:`BuildUnavailable` says why it cannot be built (no ``cc``).
"""

from .build import LIBRARY, SOURCE, BuildFailed, BuildUnavailable, build_xrt_root, default_xrt_root, source_hash

__all__ = ["LIBRARY", "SOURCE", "BuildFailed", "BuildUnavailable", "build_xrt_root", "default_xrt_root", "source_hash"]
