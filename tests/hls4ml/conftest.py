"""The hls4ml tests: the numpy emulator bit for bit against hls4ml's own C-simulation, layer by layer; the
C-simulation runtime (bounds, build cache, stacks, crashes); io_stream projects; fpgaserve pack; the
bundled models; hls4ml models served in every emulation mode.
"""
