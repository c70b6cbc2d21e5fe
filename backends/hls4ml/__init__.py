"""The hls4ml backend: hls4ml firmware on Alveo cards (through XRT's C API, its pyxrt binding
or PYNQ), or its emulation: bit-exact in numpy (emulator/) or hls4ml's C-simulation (csim/),
float through the packed ONNX reference. backend.py chooses the mode per model; card/ is
everything that touches a card; project.py reads an hls4ml project.

Importing this package is cheap; the execution modes import what they need (XRT, pynq, g++,
onnxruntime) only when a model is loaded in that mode.
"""

#: --fpga-mode values. auto = hardware when a card and an xclbin are there, else numpy when
#: every layer is emulated bit-exactly, else csim (decided per model, see backend.resolve_mode).
FPGA_MODES = ("auto", "hardware", "csim", "numpy", "onnx")
