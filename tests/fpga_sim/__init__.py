"""A simulated Alveo card for fpgaserve's tests (never part of the installed package).

One core (``card.py``: XRT's load/reset/ERT rules, buffers, timing, persistent state) behind the
two host APIs fpgaserve drives cards with:

* ``xrt_python/pyxrt``: a test-only ``pyxrt`` module (XRT 2.17's binding surface); put
  ``tests/fpga_sim/xrt_python`` first on ``sys.path`` and ``import pyxrt`` finds it;
* ``pynq_device``: a PYNQ 3.0.1 Device plug-in, registered with PYNQ when imported.

``xclbin.py`` writes (and reads) xclbins the way v++ lays them out, ``kernels.py`` computes the
three kernel ABIs with the project's C-simulation, ``bin/xbutil`` resets and examines the cards,
``serve.py`` runs fpgaserve against them. Nothing here is imported implicitly.
"""
