"""A simulated Alveo card for fpgaserve's tests (never part of the installed package).

One card model behind the three host APIs fpgaserve drives cards with: its per-event rules
(DMA timeline, ERT queues and states, kernel timing, start checks, completion, device memory, the
kernels' computation) in C (``xrt_c/card_core.c``, loaded by ``card_core.py``), its cold path
(XRT's load/reset/context rules, persistent state, telemetry) in ``card.py``:

* ``xrt_python/pyxrt``: a test-only ``pyxrt`` module (XRT 2.17's binding surface); put
  ``tests/fpga_sim/xrt_python`` first on ``sys.path`` and ``import pyxrt`` finds it;
* ``pynq_device``: a PYNQ 3.0.1 Device plug-in, registered with PYNQ when imported;
* ``xrt_c``: a C double of XRT's ``libxrt_coreutil.so.2`` (its C API), built with ``cc``; a
  process without Python (``native.py``: a native host program) embeds one for the cold path.

``xclbin.py`` writes (and reads) xclbins the way v++ lays them out, ``kernels.py`` computes the
three kernel ABIs with the project's C-simulation, ``bin/xbutil`` resets and examines the cards,
``serve.py`` runs fpgaserve against them. Nothing here is imported implicitly.
"""
