"""A simulated Alveo card for fpgaserve's tests (never part of the installed package).

``fpga_sim.device`` registers :class:`SimulatedAlveoDevice` with PYNQ 3.0.1's device plug-in
mechanism (``DeviceMeta``) when it is imported, so that ``pynq.Device.devices`` lists simulated
cards and fpgaserve's unmodified hardware path (Overlay, allocate, sync, DefaultIP.call) runs
against them. Import it explicitly, before anything reads ``pynq.Device.devices``: nothing in
this package is imported implicitly, and ``fpga_sim.xclbin`` alone does not register anything.
"""
