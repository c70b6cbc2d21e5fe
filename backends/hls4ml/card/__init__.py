"""Everything of the hls4ml backend that touches an FPGA card (``--fpga-mode hardware``).

Read top to bottom as a batch flows:

=================  ==========================================================================
``manifest.py``    binds a model version's project and xclbin (``card.json``, consistency)
``axlf.py``        reads the xclbin's metadata (kernels, compute units, banks, platform)
``abi/``           kernel ABIs: how a batch becomes bytes and arguments of one kernel call
``codecs.py``      element layouts the ABIs use (32-bit words, native ap_fixed, float32)
``cards.py``       one object per physical card: its xclbin, compute units, health, recovery
``runner.py``      one model instance on a compute unit: buffers, calls, timeouts
``runtime/``       the card APIs (``api.py``): XRT's C API (the default), ``pyxrt`` and PYNQ 3.0.1
``telemetry.py``   ``fpga_*`` and ``nv_gpu_*`` metrics of cards and emulated devices
``doctor.py``      ``fpgaserve doctor``: checks a host, its cards and a repository
=================  ==========================================================================

Importing this package imports no runtime: ``pyxrt`` or ``pynq`` load when a model first
needs a card.
"""
