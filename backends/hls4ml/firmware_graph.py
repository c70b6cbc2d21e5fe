"""Read an hls4ml project's firmware (io_parallel or io_stream) into a chain of layers.

Sources, all inside the project's ``firmware/``:

* ``defines.h``: ``typedef ap_fixed<16,6> input_t;`` -> the precision of every named type;
* ``parameters.h``: one ``struct configN : nnet::dense_config { ... };`` per layer, with its
  sizes (``n_in``, ``n_out``, ``table_size``...), strategy, reuse factor, kernel and product
  choice and the types it names (``accum_t``, ``table_t``, ... possibly spelled inline);
* ``<project>.cpp``: the call sequence ``nnet::dense<input_t, fc1_result_t, config2>(x,
  layer2_out, w2, b2);`` and the ``load_weights_from_txt<T, N>(w2, "w2.txt")`` lines;
* ``weights/*.txt``: one line of comma separated decimals per array.

io_stream projects (``hls::stream<T>`` arrays) are read into the same chain: a stream's
element type ``typedef nnet::array<ap_fixed<16,6>, 4*1> layer2_t;`` becomes its value type
(``ap_fixed<16,6>``; the pack size is kept in ``FirmwareGraph.packs``), because the values a
stream carries over one sample, in the order it carries them, are the channels-last flattened
array an io_parallel layer would write; ``nnet::clone_stream(in, out1, out2...)`` becomes one
``clone_stream`` layer per copy (each a cast to the copy's type), and ``Layer.stream`` tells
the registry to prefer a builder registered for the stream form (``register_stream``).

Only what hls4ml writes is recognised; anything else is reported with the file and the
construct, never guessed.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

import numpy as np

from .project import Hls4mlProject, ProjectError

_TYPEDEF = re.compile(r"^\s*typedef\s+(.+?)\s+(\w+)\s*;", re.M)
_STRUCT = re.compile(r"struct\s+(\w+)\s*(?::\s*(?:nnet::)?(\w+)\s*)?\{(.*?)\n\};", re.S)
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
    inputs: list[str] = field(default_factory=list)  # every array the layer reads (merges: two)
    weights: dict[str, tuple[str, str, int]] = field(default_factory=dict)  # arg -> (file, type, n)
    stream: bool = False  # an io_stream call: the arrays are hls::stream<nnet::array<T, pack>>

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


# static members defined after the struct: `const slope3_t hard_sigmoid_config3::slope = 0.2;`
_STATIC_DEF = re.compile(r"^\s*const\s+(\w+)\s+(\w+)::(\w+)\s*=\s*([^;]+);", re.M)


def parse_configs(text: str) -> dict[str, dict]:
    configs = {}
    for name, base, body in _STRUCT.findall(text):
        consts = {n: v.strip() for _t, n, v in _CONST.findall(body)}
        typedefs = parse_typedefs(body)
        usings = dict(_USING.findall(body))
        configs[name] = {"base": base, "consts": consts, "types": typedefs, "using": usings, "statics": {}}
    for ctype, struct, member, value in _STATIC_DEF.findall(text):
        if struct in configs:
            configs[struct]["statics"][member] = (ctype, value.strip())
    return configs


def _eval_const(expr: str, consts: dict[str, str], depth: int = 0) -> int:
    """An unsigned constant expression of a config struct: integers, other constants of the
    same struct, + - * / % and parentheses, DIV_ROUNDUP (C unsigned maths: / truncates)."""
    if depth > 20:
        raise ValueError("constants refer to each other in a cycle")
    tree = ast.parse(expr.strip().replace("DIV_ROUNDUP", "_div_roundup"), mode="eval")

    def ev(node) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name) and node.id in consts:
            return _eval_const(consts[node.id], consts, depth + 1)
        if isinstance(node, ast.BinOp):
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Add):
                return a + b
            if isinstance(node.op, ast.Sub):
                return a - b
            if isinstance(node.op, ast.Mult):
                return a * b
            if isinstance(node.op, ast.Div | ast.FloorDiv) and b != 0 and a >= 0 and b > 0:
                return a // b
            if isinstance(node.op, ast.Mod) and b > 0 and a >= 0:
                return a % b
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "_div_roundup"
            and len(node.args) == 2
        ):
            a, b = ev(node.args[0]), ev(node.args[1])
            if b > 0:
                return -(-a // b)
        raise ValueError(ast.dump(node))

    return ev(tree)


def const_int(layer: Layer, key: str) -> int:
    consts = layer.config.get("consts", {})
    value = consts.get(key)
    if value is None:
        raise UnsupportedLayerError(f"{layer.describe()}: parameters.h has no '{key}' in {layer.config_name}")
    value = value.strip()
    try:
        return int(value, 0)
    except ValueError:
        pass
    try:
        return _eval_const(value, consts)
    except (ValueError, SyntaxError):
        raise UnsupportedLayerError(
            f"{layer.describe()}: cannot read {key} = '{value}' in {layer.config_name} (parameters.h)"
        ) from None


@dataclass
class FirmwareGraph:
    project: Hls4mlProject
    typedefs: dict[str, str]
    layers: list[Layer]
    #: ``unsigned config7_perm[3] = {1, 2, 0};`` arrays of parameters.h (transpose shapes)
    arrays: dict[str, list[int]] = field(default_factory=dict)
    #: every config struct of parameters.h by name (convolutions name their mult_config)
    configs: dict[str, dict] = field(default_factory=dict)
    #: io_stream: element type name -> values per stream word (``nnet::array<T, N>``'s N)
    packs: dict[str, int] = field(default_factory=dict)

    def fill_buffer(self, layer: Layer) -> np.ndarray:
        """The im2col table of a convolution: row p (output pixel, in the order the results are
        written) lists the input index of each buffer slot, -1 for a padding zero. Read from
        the ``fill_buffer_N`` class hls4ml generates into nnet_utils/nnet_code_gen.h (the
        installed library's when the project has none, as the C-simulation compiles it).

        The class holds one statement per slot of every output pixel: 250 MB of text for a
        512x512x3 depthwise convolution (7 million statements). It is read in pieces of
        ``FILL_PIECE_BYTES`` bytes from the mapped file (``_fill_statements``), each piece's
        statements kept as int32 arrays: the load holds the table and those arrays, not the text
        or a Python object per statement (that layer: 1.1 GiB peak before, 0.4 GiB now)."""
        alias = layer.config.get("using", {}).get("fill_buffer", "")
        cls = alias.split("::")[-1]
        n_pixels = const_int(layer, "n_pixels")
        with self.project.mapped_generated_template() as text:
            pieces = _fill_statements(text, cls) if cls else None
        if pieces is None:
            raise UnsupportedLayerError(f"{layer.describe()}: no buffer filler '{alias}' in nnet_utils/nnet_code_gen.h")
        if not pieces:
            raise UnsupportedLayerError(f"{layer.describe()}: cannot read the buffer filler {cls}")
        n_slots = 1 + max(int(p[2].max()) for p in pieces)
        n_rows = 1 + max(int(p[0].max()) for p in pieces)
        table = np.full((n_rows * n_pixels, n_slots), -1, dtype=np.int64)
        for part, pixel, slot, src in pieces:
            table[part.astype(np.int64) * n_pixels + pixel, slot] = src
        return table

    def weight_tokens(self, layer: Layer, arg: str) -> list[str]:
        """The comma separated texts of the weight array passed as ``arg``, as
        ``load_weights_from_txt`` splits its file's first line (each is read by the array
        type's ``operator>>``: a double for ap_fixed, an integer text for ap_int)."""
        if arg not in layer.weights:
            raise ProjectError(f"{layer.describe()}: no load_weights_from_txt call fills '{arg}'")
        fname, _type, n = layer.weights[arg]
        text = self.project.read_firmware(f"weights/{fname}")
        line = text.splitlines()[0] if text.strip() else ""
        tokens = [t.strip() for t in line.split(",") if t.strip()]
        if len(tokens) != n:
            raise ProjectError(f"firmware/weights/{fname}: {len(tokens)} values, the firmware expects {n}")
        return tokens

    def weight_array(self, layer: Layer, arg: str) -> np.ndarray:
        """The float64 values of the weight array passed as ``arg`` (before quantization)."""
        tokens = self.weight_tokens(layer, arg)
        fname, _type, n = layer.weights[arg]
        try:
            values = np.array([float(t) for t in tokens], dtype=np.float64)
        except ValueError:
            raise ProjectError(f"firmware/weights/{fname}: not a line of comma separated numbers") from None
        if values.size != n:
            raise ProjectError(f"firmware/weights/{fname}: {values.size} values, the firmware expects {n}")
        return values


# which arguments are the layer inputs and which its output, for each supported call form
_IO_ARGS = {
    # one entry per line, sorted: (argument indices of the inputs, argument index of the output)
    "einsum": ((0, 1), 2),
    "elu": ((0,), 2),
    "leaky_relu": ((0,), 2),
    "prelu": ((0,), 2),
    "thresholded_relu": ((0,), 2),
}
_MERGES = ("add", "subtract", "multiply", "average", "maximum", "minimum", "dot1d")
#: a fill_buffer_N class's statements: a partition's header, or one buffer slot's assignment
#: (``buffer[pixel][slot] = data[index];`` or ``= 0;`` for a padding zero)
_FILL_STATEMENT = re.compile(
    rb"if\s*\(\s*partition\s*==\s*(\d+)\s*\)|buffer\[(\d+)\]\[(\d+)\]\s*=\s*(?:data\[\s*(\d+)\s*\]|(0))\s*;"
)
#: bytes of a fill_buffer_N class parsed at once (see FirmwareGraph.fill_buffer)
FILL_PIECE_BYTES = 4 << 20

FillStatements = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _fill_statements(text, cls: str) -> list[FillStatements] | None:
    """The assignments of class ``cls`` in nnet_code_gen.h's bytes ``text`` as int32 arrays
    (partition, pixel, slot, data index or -1 for a zero), one tuple per piece of the text;
    None when the class is not there. Statements before the class's first partition header
    belong to no partition and are left out."""
    m = re.search(rb"class\s+" + re.escape(cls.encode()) + rb"\b", text)
    end = text.find(b"\n};", m.end()) if m is not None else -1
    if m is None or end < 0:
        return None
    pieces: list[FillStatements] = []
    partition = -1
    pos = m.start()
    while pos < end:
        # a piece ends after a ';': no statement is cut, and a partition's header holds none
        cut = text.find(b";", pos + FILL_PIECE_BYTES) + 1 if end - pos > FILL_PIECE_BYTES else end
        if cut <= 0 or cut > end:
            cut = end
        found = _FILL_STATEMENT.findall(text, pos, cut)
        pos = cut
        if not found:
            continue
        cols = np.array(found, dtype=bytes).T  # header, pixel, slot, data index, literal 0
        head = cols[0] != b""
        # each statement's partition: the last header before it, in this piece or an earlier one
        last = np.maximum.accumulate(np.where(head, np.arange(head.size), -1))
        headers = np.full(head.size, partition, np.int64)
        headers[head] = cols[0][head].astype(np.int64)
        parts = np.where(last >= 0, headers[np.maximum(last, 0)], partition)
        partition = int(parts[-1])
        keep = ~head & (parts >= 0)
        if not keep.any():
            continue
        zero = cols[4][keep] != b""
        src = np.full(zero.size, -1, np.int32)
        src[~zero] = cols[3][keep][~zero].astype(np.int32)
        pieces.append(
            (parts[keep].astype(np.int32), cols[1][keep].astype(np.int32), cols[2][keep].astype(np.int32), src)
        )
    return pieces


_ALIAS = re.compile(r"\bauto\s*&\s*(\w+)\s*=\s*(\w+)\s*;")
_ARRAY = re.compile(r"^\s*(?:static\s+)?(?:const\s+)?unsigned\s+(\w+)\s*\[\s*\d+\s*\]\s*=\s*\{([^}]*)\}\s*;", re.M)


def _io_args(kind: str) -> tuple[tuple[int, ...], int]:
    if kind in _MERGES or kind.startswith("concatenate"):
        return (0, 1), 2
    return _IO_ARGS.get(kind, ((0,), 1))


_NNET_ARRAY = re.compile(r"^nnet::array\s*<\s*(.+)\s*,\s*([^,<>]+?)\s*>$")


def _stream_typedefs(typedefs: dict[str, str]) -> tuple[dict[str, str], dict[str, int]]:
    """io_stream: ``nnet::array<T, N>`` typedefs -> T, and each such name's pack size N."""
    out, packs = dict(typedefs), {}
    for name, text in typedefs.items():
        m = _NNET_ARRAY.match(text)
        if m is None:
            continue
        try:
            n = _eval_const(m.group(2), {})
        except (ValueError, SyntaxError):
            raise ProjectError(f"firmware/defines.h: cannot read the pack size of {name} = {text}") from None
        out[name], packs[name] = m.group(1).strip(), n
    return out, packs


def read_firmware_graph(project: Hls4mlProject) -> FirmwareGraph:
    if project.io_type not in ("io_parallel", "io_stream"):
        raise ProjectError(
            f"hls4ml project {project.path} uses {project.io_type}; the numpy emulator models io_parallel and "
            "io_stream firmware"
        )
    stream = project.io_type == "io_stream"
    typedefs = parse_typedefs(project.read_firmware("defines.h"))
    packs: dict[str, int] = {}
    if stream:
        typedefs, packs = _stream_typedefs(typedefs)
    params = project.read_firmware("parameters.h")
    configs = parse_configs(params)
    top_file = f"{project.name}.cpp"
    top = _strip_comments(project.read_firmware(top_file))
    if "hls::stream" in top and not stream:
        raise ProjectError(f"firmware/{top_file} uses hls::stream, but hls4ml_config.yml says {project.io_type}")
    loads = {var: (fname, t, int(n)) for t, n, var, fname in _LOAD.findall(top)}
    aliases = dict(_ALIAS.findall(top))  # Reshape/Flatten: `auto& layer5_out = layer4_out;`

    def resolve(name: str) -> str:
        seen = set()
        while name in aliases and name not in seen:
            seen.add(name)
            name = aliases[name]
        return name

    layers: list[Layer] = []
    for m in _CALL.finditer(top):
        kind, targs, cargs, comment = m.group(1), m.group(2), m.group(3), m.group(4)
        if kind.startswith("load_") or kind in ("convert_data",):
            continue
        template = _split_top(targs)
        args = _split_top(cargs)
        cfg_name = template[-1] if template else ""
        layer = Layer(kind, comment or cfg_name, template, args, cfg_name, configs.get(cfg_name, {}), stream=stream)
        if kind == "clone_stream":
            # clone_stream<T, T, N>(in, out1, out2...): one cast layer per copy, each output written once
            for k, out in enumerate(args[1:]):
                copy = Layer(kind, f"{layer.name}[{k}]", template, [args[0], out], cfg_name, {}, stream=stream)
                copy.inputs, copy.input, copy.output = [resolve(args[0])], resolve(args[0]), resolve(out)
                layers.append(copy)
            continue
        i_ins, i_out = _io_args(kind)
        if len(args) <= max(*i_ins, i_out):
            raise UnsupportedLayerError(
                f"{layer.describe()}: unexpected call nnet::{kind}({cargs}) in firmware/{top_file}"
            )
        layer.inputs = [resolve(args[i]) for i in i_ins]
        layer.input, layer.output = layer.inputs[0], resolve(args[i_out])
        layer.weights = {a: loads[a] for a in args if a in loads}
        layers.append(layer)
    if not layers:
        raise ProjectError(f"firmware/{top_file}: no nnet:: layer calls found")
    # the emulator runs the layers in the order of the calls: every array a layer reads must
    # be the input or written by an earlier layer, and each array is written once
    written = {project.input.name}
    for layer in layers:
        for name in layer.inputs:
            if name not in written:
                raise UnsupportedLayerError(
                    f"{layer.describe()} reads '{name}', which no earlier layer wrote (and is not the input)"
                )
        if layer.output in written:
            raise UnsupportedLayerError(f"{layer.describe()}: '{layer.output}' is written twice")
        written.add(layer.output)
    if resolve(project.output.name) != layers[-1].output:
        raise UnsupportedLayerError(
            f"the last layer writes '{layers[-1].output}', not the output '{project.output.name}'"
        )
    arrays = {name: [int(v) for v in body.split(",") if v.strip()] for name, body in _ARRAY.findall(params)}
    return FirmwareGraph(project, typedefs, layers, arrays, configs, packs)
