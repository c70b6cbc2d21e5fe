"""``--fpga-mode csim``: hls4ml's C-simulation of the firmware, compiled with g++ and called in
batches, beside ``card/`` (hardware) and ``emulator/`` (numpy).

=================  ==========================================================================
``library.py``     ``CsimLibrary``: the project compiled with the batch shim, cached on disk,
                   called through ctypes without the GIL; ``CompileLimits`` bound the build
``batch_shim.cpp`` the C++ entry points that loop over a batch's rows (filled in per project)
``stack.py``       the stack one row needs, estimated from the project's sources
``hosted.py``      the instances in instance processes (csim runs there by default: a crash of
                   the operator's C++ fails its batch, not the server)
=================  ==========================================================================

The names below are the C-simulation's interface for the rest of the backend, ``pack`` and
the command line; importing this package compiles nothing.
"""

from .library import (
    DEFAULT_COMPILE_TIMEOUT_S,
    CompileLimitError,
    CompileLimits,
    CsimLibrary,
    default_cache_dir,
    fix_axi_typedefs,
)

__all__ = [
    "DEFAULT_COMPILE_TIMEOUT_S",
    "CompileLimitError",
    "CompileLimits",
    "CsimLibrary",
    "default_cache_dir",
    "fix_axi_typedefs",
]
