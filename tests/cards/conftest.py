"""The card tests: the simulated Alveo cards (tests/fpga_sim) through every card API (XRT's C API, pyxrt,
PYNQ), the kernel ABIs, xclbin and card.json, the card runner, the hardware path served end to end,
``fpgaserve doctor`` and card telemetry.
"""
