"""How much stack an hls4ml C-simulation needs for one row, estimated from the project's sources.

hls4ml's C-simulation keeps every layer's output as a local array of the top function
(io_parallel: ``fc_result_t layer2_out[524288];``), and its layer templates keep their own
temporaries as locals too (``dense_latency``: a product array of n_in * n_out accumulators;
``conv_2d_latency_cl``: an im2col buffer of out_pixels * kernel elements; io_stream layers: the
whole row of a Dense on a flattened stream as one ``nnet::array`` word). A large network
needs hundreds of MB of stack for one row, far past a thread's default 8 MB: the batch shim
runs the firmware on a thread whose stack is sized by :func:`estimate_stack_bytes`.

The estimate, in bytes:

* the top function's local arrays (count x element size, from ``<project>.cpp`` and the
  typedefs of ``defines.h``), plus ``STREAM_OBJECT_BYTES`` per local ``hls::stream`` (its
  words live on the heap, in a std::deque), plus the accelerator wrapper's copies of the row;
* plus, for the layer that needs most, the widest type of the project times the elements its
  templates can keep as locals: its inputs and outputs, its weights, and for a convolution or
  pooling its im2col window (out_pixels x kernel x channels), from its config struct in
  ``parameters.h``;
* times ``SAFETY_FACTOR`` (what the compiler adds: spills, copies of by-value arguments,
  inlined temporaries) plus ``BASE_BYTES`` (the C++ runtime, iostream, the weight loader).

It is an upper-bound-minded estimate, not a measurement: the stack it asks for is virtual
(reserved, not committed: only the pages a row touches are ever backed by memory), so erring
high costs address space, not RAM. A project whose estimate is above the cap
(``FPGASERVE_CSIM_STACK_CAP_MB``, default ``DEFAULT_CAP_BYTES``) cannot be served by the
C-simulation: its load fails naming the model and the size, instead of a SIGSEGV that would
take the server down on the first row.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from ..project import Hls4mlProject, ProjectError

MIB = 1 << 20
#: a row's stack is reserved virtual memory; 4 GiB is what a 64-bit process can spare per
#: concurrent call without crowding its address space, and ~500x a default thread stack
DEFAULT_CAP_BYTES = 4 << 30
CAP_ENV = "FPGASERVE_CSIM_STACK_CAP_MB"
SAFETY_FACTOR = 2
#: libstdc++, iostream and hls4ml's weight loader, below the firmware's own frames
BASE_BYTES = 8 * MIB
#: sizeof(hls::stream<T>) in hls4ml's ap_types (std::string, std::deque, mutex, condition
#: variable: ~200 bytes on x86-64), rounded up
STREAM_OBJECT_BYTES = 256

_TYPEDEF = re.compile(r"^\s*typedef\s+(.+?)\s+(\w+)\s*;", re.M)
_DEFINE = re.compile(r"^\s*#define\s+(\w+)\s+(\d+)\s*$", re.M)
_LOCAL_ARRAY = re.compile(r"^\s*([\w:<>, ]+?)\s+(\w+)\s*\[([^\]]+)\]\s*;", re.M)
_LOCAL_STREAM = re.compile(r"^\s*hls::stream\s*<[^;]*>\s+\w+\s*[(;]", re.M)
_CALL = re.compile(r"\bnnet::\w+\s*<([^;]*?)>\s*\(([^;]*?)\)\s*;")
_CONFIG_STRUCT = re.compile(r"struct\s+(\w+)\s*:[^{]*\{(.*?)\n\};", re.S)
_CONFIG_CONST = re.compile(r"static\s+const\s+unsigned\s+(\w+)\s*=\s*(\d+)\s*;")
_WEIGHT_LOAD = re.compile(r"load_weights_from_txt\s*<\s*[\w:]+\s*,\s*(\d+)\s*>\s*\(\s*(\w+)\s*,")
_AP_TYPE = re.compile(r"^ap_(u?)(fixed|int)\s*<\s*(\d+)")
_NNET_ARRAY = re.compile(r"^nnet::array\s*<\s*(.+)\s*,\s*([^,<>]+?)\s*>$")
_C_TYPES = {"float": 4, "double": 8, "int": 4, "unsigned": 4, "bool": 1, "char": 1, "short": 2, "long": 8}


def stack_cap_bytes(environ: Mapping[str, str] | None = None) -> int:
    """The largest stack a C-simulation may ask for: ``FPGASERVE_CSIM_STACK_CAP_MB`` MiB, else
    ``DEFAULT_CAP_BYTES``. Raises ProjectError naming the variable for a value that is not a
    positive whole number."""
    environ = os.environ if environ is None else environ
    value = environ.get(CAP_ENV, "").strip()
    if not value:
        return DEFAULT_CAP_BYTES
    if not value.isdigit() or int(value) == 0:
        raise ProjectError(f"{CAP_ENV} must be a positive whole number of MiB, got '{value}'")
    return int(value) * MIB


def _ap_bytes(bits: int) -> int:
    """sizeof an ap_int/ap_fixed of ``bits`` bits on x86-64: the smallest of char/short/int/long
    long that holds it, and 64-bit words beyond 64 bits (ap_types' storage)."""
    for size in (1, 2, 4, 8):
        if bits <= 8 * size:
            return size
    return 8 * -(-bits // 64)


class _Sizes:
    """Element sizes of the firmware's type names, through defines.h's typedefs."""

    def __init__(self, typedefs: dict[str, str], defines: dict[str, int]):
        self.typedefs = typedefs
        self.defines = defines

    def count(self, expr: str) -> int | None:
        total = 1
        for factor in expr.split("*"):
            factor = factor.strip()
            if factor.isdigit():
                total *= int(factor)
            elif factor in self.defines:
                total *= self.defines[factor]
            else:
                return None
        return total

    def element_bytes(self, ctype: str) -> int:
        """sizeof one element of ``ctype``: an ``nnet::array`` word's element, else the type."""
        text = " ".join(ctype.split())
        for _ in range(33):
            if text in self.typedefs:
                text = " ".join(self.typedefs[text].split())
                continue
            array = _NNET_ARRAY.match(text)
            if array is None:
                break
            text = " ".join(array.group(1).split())
        return self.bytes_of(text)

    def bytes_of(self, ctype: str, depth: int = 0) -> int:
        text = " ".join(ctype.split())
        if depth > 32:
            raise ProjectError(f"the typedef of '{ctype}' refers to itself")
        if text in self.typedefs:
            return self.bytes_of(self.typedefs[text], depth + 1)
        array = _NNET_ARRAY.match(text)
        if array is not None:
            n = self.count(array.group(2))
            return self.bytes_of(array.group(1), depth + 1) * (n if n is not None else 1)
        ap = _AP_TYPE.match(text)
        if ap is not None:
            return _ap_bytes(int(ap.group(3)))
        return _C_TYPES.get(text.split()[-1] if text else text, 8)


def estimate_stack_bytes(project: Hls4mlProject) -> int:
    """The stack one row of ``project``'s C-simulation needs, in bytes (see the module's
    docstring for how it is estimated). Raises ProjectError when the sources cannot be read."""
    defines_text = project.read_firmware("defines.h")
    sizes = _Sizes(
        {name: " ".join(t.split()) for t, name in _TYPEDEF.findall(defines_text)},
        {k: int(v) for k, v in _DEFINE.findall(defines_text)},
    )
    top = re.sub(r"//[^\n]*", "", project.read_firmware(f"{project.name}.cpp"))
    # the body of the top function: after its parameter list's closing ") {"
    body = top[top.find(") {") :] if ") {" in top else top
    locals_bytes = 0
    counts: dict[str, int] = {project.input.name: project.input.size, project.output.name: project.output.size}
    for ctype, name, size in _LOCAL_ARRAY.findall(body):
        if "static" in ctype.split():  # a static array is not on the stack
            continue
        n = sizes.count(size)
        if n is None:
            continue
        counts[name] = n
        locals_bytes += n * sizes.bytes_of(ctype)
    locals_bytes += STREAM_OBJECT_BYTES * len(_LOCAL_STREAM.findall(body))

    weights = {name: int(n) for n, name in _WEIGHT_LOAD.findall(top)}
    try:
        parameters = project.read_firmware("parameters.h")
    except ProjectError:
        parameters = ""
    configs = {
        name: {k: int(v) for k, v in _CONFIG_CONST.findall(text)} for name, text in _CONFIG_STRUCT.findall(parameters)
    }
    # the widest ELEMENT: an io_stream typedef may be a whole row as one nnet::array word
    # (result_t of a flattened output: millions of elements), counted below as elements
    widest = max([8, *(sizes.element_bytes(t) for t in sizes.typedefs)])
    if project.accelerator is not None:
        # <project>_axi() copies the row into local input_t/result_t arrays around the network
        locals_bytes += widest * (project.input.size + project.output.size)
    layer_elements = 0
    for template_args, call_args in _CALL.findall(body):
        args = [a.strip() for a in call_args.split(",")]
        elements = sum(counts.get(a, 0) + weights.get(a, 0) for a in args)
        config_name = template_args.split(",")[-1].strip()
        c = configs.get(config_name, {})
        elements += c.get("n_in", 0) + c.get("n_out", 0) + c.get("n_elem", 0)
        in_px = c.get("in_height", 1) * c.get("in_width", 0)
        out_px = c.get("out_height", 1) * c.get("out_width", 0)
        kernel = c.get("filt_height", c.get("pool_height", 1)) * c.get("filt_width", c.get("pool_width", 1))
        channels = c.get("n_chan", 1)
        elements += in_px * channels + out_px * c.get("n_filt", channels) + out_px * kernel * channels
        layer_elements = max(layer_elements, elements)
    return SAFETY_FACTOR * (locals_bytes + widest * layer_elements) + BASE_BYTES


def stack_bytes_for(project: Hls4mlProject, model: str | None = None) -> int:
    """:func:`estimate_stack_bytes`, rounded up to a whole MiB, checked against the cap: a
    project that does not fit raises ProjectError naming the model, the estimate and the cap."""
    needed = -(-estimate_stack_bytes(project) // MIB) * MIB
    cap = stack_cap_bytes()
    if needed > cap:
        label = f"model '{model}' (hls4ml project {project.path})" if model else f"hls4ml project {project.path}"
        raise ProjectError(
            f"{label}: its C-simulation needs an estimated {needed // MIB} MiB of stack for one row (its layer "
            f"outputs and temporaries are local arrays), more than the {cap // MIB} MiB cap ({CAP_ENV}); serve it "
            "with --fpga-mode numpy, or make its layers smaller"
        )
    return needed


__all__ = ["CAP_ENV", "DEFAULT_CAP_BYTES", "estimate_stack_bytes", "stack_bytes_for", "stack_cap_bytes"]
