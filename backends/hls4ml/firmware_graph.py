"""Read an hls4ml io_parallel project's firmware into a chain of layers.

Sources, all inside the project's ``firmware/``:

* ``defines.h``: ``typedef ap_fixed<16,6> input_t;`` -> the precision of every named type;
* ``parameters.h``: one ``struct configN : nnet::dense_config { ... };`` per layer, with its
  sizes (``n_in``, ``n_out``, ``table_size``...), strategy, reuse factor, kernel and product
  choice and the types it names (``accum_t``, ``table_t``, ... possibly spelled inline);
* ``<project>.cpp``: the call sequence ``nnet::dense<input_t, fc1_result_t, config2>(x,
  layer2_out, w2, b2);`` and the ``load_weights_from_txt<T, N>(w2, "w2.txt")`` lines;
* ``weights/*.txt``: one line of comma separated decimals per array.

Only what hls4ml writes for io_parallel projects is recognised; anything else is reported
with the file and the construct, never guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from .project import Hls4mlProject, ProjectError

_TYPEDEF = re.compile(r"^\s*typedef\s+(.+?)\s+(\w+)\s*;", re.M)
_STRUCT = re.compile(r"struct\s+(\w+)\s*:\s*(?:nnet::)?(\w+)\s*\{(.*?)\n\};", re.S)
_CONST = re.compile(r"static\s+(?:const|constexpr)\s+([\w:]+(?:\s+\w+)?)\s+(\w+)\s*=\s*([^;]+);")
_USING = re.compile(r"using\s+(\w+)\s*=\s*([\w:]+)\s*<")
_LOAD = re.compile(r"load_weights_from_txt\s*<\s*(\w+)\s*,\s*(\d+)\s*>\s*\(\s*(\w+)\s*,\s*\"([^\"]+)\"\s*\)")
_CALL = re.compile(r"\bnnet::(\w+)\s*<([^;]*?)>\s*\(([^;]*?)\)\s*;(?:\s*//\s*(\S+))?")


class UnsupportedLayerError(ProjectError):
    """The firmware contains a layer (or a setting of one) the numpy emulator cannot reproduce."""


@dataclass
class Layer:
    """One ``nnet::`` call of the top function."""

    kind: str  # nnet function name: dense, relu, softmax...
    name: str  # hls4ml layer name from the trailing comment (fc1), else the config name
    template: list[str]  # template arguments, e.g. ["input_t", "fc1_result_t", "config2"]
    args: list[str]  # call arguments
    config_name: str
    config: dict = field(default_factory=dict)  # parsed struct: consts (str), typedefs, usings
    input: str = ""
    output: str = ""
    weights: dict[str, tuple[str, str, int]] = field(default_factory=dict)  # arg -> (file, type, n)

    def describe(self) -> str:
        return f"layer '{self.name}' (nnet::{self.kind}, {self.config_name})"


def _split_top(text: str) -> list[str]:
    """Split on commas outside <> and ()."""
    out: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in text:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//(?!\s*\w+\s*$)[^\n]*", "", text, flags=re.M)


def parse_typedefs(text: str) -> dict[str, str]:
    return {name: " ".join(t.split()) for t, name in _TYPEDEF.findall(text)}


def parse_configs(text: str) -> dict[str, dict]:
    configs = {}
    for name, base, body in _STRUCT.findall(text):
        consts = {n: v.strip() for _t, n, v in _CONST.findall(body)}
        typedefs = parse_typedefs(body)
        usings = dict(_USING.findall(body))
        configs[name] = {"base": base, "consts": consts, "types": typedefs, "using": usings}
    return configs


def const_int(layer: Layer, key: str) -> int:
    value = layer.config.get("consts", {}).get(key)
    if value is None:
        raise UnsupportedLayerError(f"{layer.describe()}: parameters.h has no '{key}' in {layer.config_name}")
    value = value.strip()
    try:
        return int(value, 0)
    except ValueError:
        raise UnsupportedLayerError(
            f"{layer.describe()}: cannot read {key} = '{value}' in {layer.config_name} (parameters.h)"
        ) from None


@dataclass
class FirmwareGraph:
    project: Hls4mlProject
    typedefs: dict[str, str]
    layers: list[Layer]

    def weight_array(self, layer: Layer, arg: str) -> np.ndarray:
        """The float64 values of the weight array passed as ``arg`` (before quantization)."""
        if arg not in layer.weights:
            raise ProjectError(f"{layer.describe()}: no load_weights_from_txt call fills '{arg}'")
        fname, _type, n = layer.weights[arg]
        text = self.project.read_firmware(f"weights/{fname}")
        line = text.splitlines()[0] if text.strip() else ""
        tokens = [t for t in line.split(",") if t.strip()]
        try:
            values = np.array([float(t) for t in tokens], dtype=np.float64)
        except ValueError:
            raise ProjectError(f"firmware/weights/{fname}: not a line of comma separated numbers") from None
        if values.size != n:
            raise ProjectError(f"firmware/weights/{fname}: {values.size} values, the firmware expects {n}")
        return values


# which argument is the layer input and which its output, for each supported call form
_IO_ARGS = {"leaky_relu": (0, 2), "elu": (0, 2), "thresholded_relu": (0, 2), "prelu": (0, 2)}


def read_firmware_graph(project: Hls4mlProject) -> FirmwareGraph:
    if project.io_type != "io_parallel":
        raise ProjectError(
            f"hls4ml project {project.path} uses {project.io_type}; the numpy emulator models io_parallel firmware only"
        )
    typedefs = parse_typedefs(project.read_firmware("defines.h"))
    params = project.read_firmware("parameters.h")
    configs = parse_configs(params)
    top_file = f"{project.name}.cpp"
    top = _strip_comments(project.read_firmware(top_file))
    if "hls::stream" in top:
        raise ProjectError(f"firmware/{top_file} uses hls::stream (io_stream); the numpy emulator models io_parallel")
    loads = {var: (fname, t, int(n)) for t, n, var, fname in _LOAD.findall(top)}
    layers: list[Layer] = []
    for m in _CALL.finditer(top):
        kind, targs, cargs, comment = m.group(1), m.group(2), m.group(3), m.group(4)
        if kind.startswith("load_") or kind in ("convert_data",):
            continue
        template = _split_top(targs)
        args = _split_top(cargs)
        cfg_name = template[-1] if template else ""
        layer = Layer(kind, comment or cfg_name, template, args, cfg_name, configs.get(cfg_name, {}))
        i_in, i_out = _IO_ARGS.get(kind, (0, 1))
        if len(args) <= max(i_in, i_out):
            raise UnsupportedLayerError(
                f"{layer.describe()}: unexpected call nnet::{kind}({cargs}) in firmware/{top_file}"
            )
        layer.input, layer.output = args[i_in], args[i_out]
        layer.weights = {a: loads[a] for a in args if a in loads}
        layers.append(layer)
    if not layers:
        raise ProjectError(f"firmware/{top_file}: no nnet:: layer calls found")
    # the emulator runs layers in order: the firmware must be a simple chain input -> output
    current = project.input.name
    for layer in layers:
        if layer.input != current:
            raise UnsupportedLayerError(
                f"{layer.describe()} reads '{layer.input}' but the previous layer wrote '{current}': the numpy "
                "emulator supports a simple chain of layers (no branches or merges)"
            )
        current = layer.output
    if current != project.output.name:
        raise UnsupportedLayerError(
            f"the last layer writes '{current}', not the output '{project.output.name}': not a simple chain"
        )
    outputs = [layer.output for layer in layers]
    if len(set(outputs)) != len(outputs):
        raise UnsupportedLayerError("a layer output is written twice: not a simple chain")
    return FirmwareGraph(project, typedefs, layers)
