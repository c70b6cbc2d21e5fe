"""The hls4ml backend: hls4ml firmware on PYNQ cards, or its bit-exact emulation.

Importing this package is cheap; the execution modes import what they need (pynq, g++,
onnxruntime) only when a model is loaded in that mode.
"""

#: --fpga-mode values. auto = hardware when a card and an xclbin are there, else numpy when
#: every layer is emulated bit-exactly, else csim (decided per model, see backend.resolve_mode).
FPGA_MODES = ("auto", "hardware", "csim", "numpy", "onnx")
