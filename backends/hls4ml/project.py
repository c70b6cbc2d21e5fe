"""An hls4ml project on disk, as fpgaserve reads it.

A model version folder (``bitstreams/<model>/<version>/``) holds the hls4ml project that the
firmware was built from: ``hls4ml_config.yml`` and ``firmware/`` (the top function, defines.h,
parameters.h, weights). Everything the execution modes need is read from here and nothing
else: the C-simulation compiles these sources, the numpy emulator parses the same headers,
the card runs the xclbin that was synthesised from them.

hls4ml's own template library (``firmware/nnet_utils``, ``firmware/ap_types``) is part of any
project hls4ml writes, but it is hls4ml's code, identical for every model: projects in the
repository leave it out and it is taken from the installed hls4ml when the C-simulation is
compiled. A project that carries its own copy uses that copy.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import mmap
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from ..base import BackendError

CONFIG_FILE = "hls4ml_config.yml"
TEMPLATE_LIBRARIES = ("nnet_utils", "ap_types")
#: the one file of nnet_utils hls4ml writes per model (convolutions' im2col buffer fillers):
#: a project that leaves the template library out keeps this file, and it is compiled over
#: the installed library's generic copy
GENERATED_TEMPLATE_FILE = "nnet_utils/nnet_code_gen.h"


class ProjectError(BackendError):
    """The hls4ml project cannot be served: the message names the file and the problem."""


@dataclass(frozen=True)
class IoPort:
    """One argument of the firmware's top function: ``input_t x[47]`` -> ("x", 47, "input_t")."""

    name: str
    size: int
    ctype: str


@dataclass(frozen=True)
class AcceleratorIo:
    """How a VivadoAccelerator project's ``<name>_axi`` wrapper exchanges data with its kernel
    (hls4ml AcceleratorConfig.Precision): "float" or "ap_fixed<W,I>"."""

    input_precision: str
    output_precision: str
    board: str = ""
    platform: str = ""
    interface: str = ""


@dataclass(frozen=True)
class HostIo:
    """The conversions between the host's floats and the firmware, as the kernel makes them.

    ``input``/``output`` are ``"float"`` (an IEEE float32 crosses, the firmware casts it), an
    ``ap_fixed``-family type (the value crosses in that type), or ``None``: the firmware's own
    ``input_t``/``result_t`` crosses (``input_type``/``output_type`` name them). The emulation
    modes reproduce exactly these conversions, so they stay bit-exact with the card whatever
    kernel the project was built for:

    * VivadoAccelerator (``krnl_rtl``): ``T_in``/``T_out`` of ``<name>_axi.h``;
    * VitisAccelerator (``kernel_wrapper``): ``None`` (native elements), or float with ``HW_Quant``;
    * a plain Vivado/Vitis project (FaaST wraps one): ``None``.
    """

    input: str | None
    output: str | None
    input_type: str  # the firmware's input_t, resolved through the typedefs
    output_type: str  # its result_t


class _ConfigLoader(yaml.SafeLoader):
    """hls4ml writes its config with PyYAML's default dumper, which tags tuples as
    ``!!python/tuple``; a safe loader with that one constructor reads it without ever
    executing ``!!python/object`` payloads (other python tags become their plain value)."""


_ConfigLoader.add_constructor(
    "tag:yaml.org,2002:python/tuple", lambda loader, node: tuple(loader.construct_sequence(node))
)


def _plain(loader, suffix, node):
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node)
    return loader.construct_scalar(node)


_ConfigLoader.add_multi_constructor("tag:yaml.org,2002:python/", _plain)
# hls4ml's local tags (Keras 3 projects: `KerasModel: !keras_model 'path/keras_model.keras'`)
# are read as their plain value too; nothing is loaded or executed from them
_ConfigLoader.add_multi_constructor("!", _plain)

# void myproject(input_t x[47], result_t layer6_out[1]) -- io_parallel arrays; io_stream uses
# hls::stream<input_t> &x, which carries no size in the prototype
_PROTOTYPE = re.compile(r"void\s+(\w+)\s*\(([^)]*)\)\s*;", re.S)
_ARRAY_ARG = re.compile(r"^(?:const\s+)?(\w+)\s+(\w+)\s*\[([^\]]+)\]$")
_STREAM_ARG = re.compile(r"^hls::stream\s*<\s*(\w+)\s*>\s*&\s*(\w+)$")
_DEFINE = re.compile(r"^\s*#define\s+(\w+)\s+(\d+)\s*$", re.M)
_TYPEDEF = re.compile(r"^\s*typedef\s+([^;{}]+?)\s+(\w+)\s*;", re.M)
_AXI_TYPEDEF = re.compile(r"typedef\s+([^;{}]+?)\s+(T_in|T_out)\s*;")
_WEIGHT_LOAD = re.compile(r'load_weights_from_txt\s*<[^>]*>\s*\(\s*\w+\s*,\s*"([^"]+)"\s*\)')


def installed_templates_dir() -> Path:
    """hls4ml's Vivado template folder, found without importing hls4ml (which is slow)."""
    spec = importlib.util.find_spec("hls4ml")
    if spec is None or not spec.submodule_search_locations:
        raise ProjectError(
            "hls4ml is not installed: the project has no firmware/nnet_utils and firmware/ap_types "
            "of its own, so the installed hls4ml must provide them"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "templates" / "vivado"


def hls4ml_version() -> str:
    try:
        return importlib.metadata.version("hls4ml")
    except importlib.metadata.PackageNotFoundError:
        return "none"


def load_config(path: Path) -> dict:
    try:
        with open(path) as f:
            config = yaml.load(f, Loader=_ConfigLoader)
    except OSError as e:
        raise ProjectError(f"cannot read {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ProjectError(f"{path} is not valid YAML: {e}") from None
    if not isinstance(config, dict):
        raise ProjectError(f"{path} does not hold an hls4ml configuration (a mapping)")
    return config


def _eval_size(expr: str, defines: dict[str, int], where: str) -> int:
    total = 1
    for factor in expr.split("*"):
        factor = factor.strip()
        if factor.isdigit():
            total *= int(factor)
        elif factor in defines:
            total *= defines[factor]
        else:
            raise ProjectError(f"{where}: cannot evaluate the array size '{expr}'")
    return total


class Hls4mlProject:
    """Read-only view of one hls4ml project folder."""

    def __init__(self, path: Path, config: dict):
        self.path = path
        self.config = config
        self.name = str(config.get("ProjectName") or "myproject")
        self.backend = str(config.get("Backend") or "Vivado")
        self.io_type = str(config.get("IOType") or "io_parallel")
        self.firmware_dir = path / "firmware"
        if not self.firmware_dir.is_dir():
            raise ProjectError(f"hls4ml project {path} has no firmware/ folder")
        self.input, self.output = self._read_ports()
        self.accelerator = self._read_accelerator()

    @classmethod
    def load(cls, directory) -> Hls4mlProject:
        """The project in ``directory`` itself, or in its only subfolder holding hls4ml_config.yml."""
        directory = Path(directory)
        if (directory / CONFIG_FILE).is_file():
            root = directory
        else:
            found = sorted(p.parent for p in directory.glob(f"*/{CONFIG_FILE}"))
            if len(found) != 1:
                what = "no" if not found else f"{len(found)}"
                raise ProjectError(
                    f"{what} hls4ml project in {directory}: expected {CONFIG_FILE} and firmware/ in the version "
                    "folder (or in exactly one subfolder of it)"
                )
            root = found[0]
        return cls(root, load_config(root / CONFIG_FILE))

    # ------------------------------------------------------------------ reading
    def read_firmware(self, relpath: str) -> str:
        path = self.firmware_dir / relpath
        try:
            return path.read_text()
        except OSError as e:
            raise ProjectError(f"hls4ml project {self.path}: cannot read firmware/{relpath}: {e.strerror}") from None

    def generated_template_path(self) -> Path:
        """Where nnet_utils/nnet_code_gen.h comes from as the C-simulation compiles it: the
        project's own (hls4ml writes it per model; pack keeps it only where it differs from the
        installed one), else the installed hls4ml's generic one, which the C-simulation's copy of
        the library (csim/library.py) provides."""
        own = self.firmware_dir / GENERATED_TEMPLATE_FILE
        return own if own.is_file() else installed_templates_dir() / GENERATED_TEMPLATE_FILE

    def _template_error(self, path: Path, e: OSError) -> ProjectError:
        if path.is_relative_to(self.firmware_dir):
            return ProjectError(
                f"hls4ml project {self.path}: cannot read firmware/{GENERATED_TEMPLATE_FILE}: {e.strerror}"
            )
        return ProjectError(
            f"hls4ml project {self.path}: no firmware/{GENERATED_TEMPLATE_FILE} and the installed hls4ml's "
            f"{path} cannot be read: {e.strerror}"
        )

    @contextlib.contextmanager
    def mapped_generated_template(self) -> Iterator[bytes | mmap.mmap]:
        """nnet_utils/nnet_code_gen.h's bytes, mapped read-only rather than read: hls4ml writes
        one statement per im2col slot into it, 250 MB for a 512x512 convolution, which a read
        would hold twice (bytes and text) while the emulator parses it."""
        path = self.generated_template_path()
        try:
            with open(path, "rb") as f:
                if os.fstat(f.fileno()).st_size == 0:
                    mapped = None
                else:
                    mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as e:
            raise self._template_error(path, e) from None
        if mapped is None:
            yield b""
            return
        try:
            yield mapped
        finally:
            mapped.close()

    def defines(self) -> dict[str, int]:
        return {k: int(v) for k, v in _DEFINE.findall(self.read_firmware("defines.h"))}

    def _read_ports(self) -> tuple[IoPort, IoPort]:
        header = f"{self.name}.h"
        text = self.read_firmware(header)
        proto = next((m for m in _PROTOTYPE.finditer(text) if m.group(1) == self.name), None)
        where = f"{self.firmware_dir / header}"
        if proto is None:
            raise ProjectError(f"{where}: no prototype of the top function '{self.name}'")
        args = [" ".join(a.split()) for a in re.sub(r"//[^\n]*", "", proto.group(2)).split(",") if a.strip()]
        defines = None
        ports: list[IoPort] = []
        for arg in args:
            m = _ARRAY_ARG.match(arg)
            if m is None:
                stream = _STREAM_ARG.match(arg)
                if stream is not None:
                    ports.append(self._stream_port(stream.group(2), stream.group(1), len(ports), where, arg))
                    continue
                raise ProjectError(f"{where}: cannot read the argument '{arg}' of {self.name}()")
            ctype, name, size_expr = m.groups()
            if not size_expr.strip().isdigit() and defines is None:
                defines = self.defines()
            ports.append(IoPort(name, _eval_size(size_expr, defines or {}, where), ctype))
        if len(ports) != 2:
            raise ProjectError(
                f"{where}: {self.name}() has {len(ports)} arguments; fpgaserve serves firmware with exactly one "
                "input and one output array (the Alveo kernel streams one tensor each way)"
            )
        return ports[0], ports[1]

    def _stream_port(self, name: str, ctype: str, position: int, where: str, arg: str) -> IoPort:
        """An io_stream port (``hls::stream<input_t> &x``) carries no size. hls4ml's Alveo wrapper
        declares it (``static const unsigned N_IN = 47;`` in ``<name>_axi.h``); a plain project's
        hls4ml_config.yml records each port's shape (``InputShapes``/``OutputShapes``, by name),
        which is what hls4ml's bridge converts (``convert_data<float, input_t, 10*10*2>``)."""
        axi = self.firmware_dir / f"{self.name}_axi.h"
        if not axi.is_file():
            key = "InputShapes" if position == 0 else "OutputShapes"
            shape = (self.config.get(key) or {}).get(name) if isinstance(self.config.get(key), dict) else None
            if isinstance(shape, (list, tuple)) and shape and all(isinstance(d, int) and d > 0 for d in shape):
                return IoPort(name, _product(shape), ctype)
            raise ProjectError(
                f"{where}: the io_stream port '{arg}' has no size: neither hls4ml's accelerator wrapper "
                f"(firmware/{axi.name}, which declares N_IN and N_OUT) nor {key}: {name}: in {CONFIG_FILE}"
            )
        key = "N_IN" if position == 0 else "N_OUT"
        m = re.search(rf"\b{key}\s*=\s*(\d+)\s*;", self.read_firmware(axi.name))
        if m is None:
            raise ProjectError(f"{self.firmware_dir / axi.name}: no '{key} = <n>;' for the io_stream port {name}")
        return IoPort(name, int(m.group(1)), ctype)

    @property
    def backend_kind(self) -> str:
        """hls4ml's backend name, lower case without separators: "vivadoaccelerator", "vitisaccelerator"..."""
        return re.sub(r"[^a-z]", "", self.backend.lower())

    def _read_accelerator(self) -> AcceleratorIo | None:
        acc = self.config.get("AcceleratorConfig")
        has_wrapper = (self.firmware_dir / f"{self.name}_axi.h").is_file()
        # only VivadoAccelerator projects run through the <name>_axi wrapper; a VitisAccelerator
        # project's AcceleratorConfig describes its kernel_wrapper (HW_Quant, Num_Kernel, ...)
        if not isinstance(acc, dict) or not (self.backend_kind == "vivadoaccelerator" or has_wrapper):
            return None
        precision = acc.get("Precision") or {}
        return AcceleratorIo(
            input_precision=str(precision.get("Input", "float")),
            output_precision=str(precision.get("Output", "float")),
            board=str(acc.get("Board", "")),
            platform=str(acc.get("Platform", "")),
            interface=str(acc.get("Interface", "")),
        )

    @property
    def accelerator_config(self) -> dict:
        """hls4ml's AcceleratorConfig block (empty when the project has none)."""
        acc = self.config.get("AcceleratorConfig")
        return acc if isinstance(acc, dict) else {}

    def typedefs(self) -> dict[str, str]:
        """``typedef <type> <name>;`` of firmware/defines.h (name -> type text)."""
        found = {name: " ".join(t.split()) for t, name in _TYPEDEF.findall(self.read_firmware("defines.h"))}
        return found

    def resolve_type(self, ctype: str) -> str:
        """A type name of the firmware resolved through defines.h's typedefs ("input_t" -> "ap_fixed<16,6>")."""
        typedefs = self.typedefs()
        seen = set()
        text = ctype.strip()
        while text in typedefs and text not in seen:
            seen.add(text)
            text = typedefs[text]
        return text

    @property
    def host_io(self) -> HostIo:
        """What crosses between host and firmware (see :class:`HostIo`)."""
        input_type = self.resolve_type(self.input.ctype)
        output_type = self.resolve_type(self.output.ctype)
        if self.accelerator is not None:
            words = self.axi_word_types()
            return HostIo(words[0], words[1], input_type, output_type)
        if _truthy(self.accelerator_config.get("HW_Quant")):
            return HostIo("float", "float", input_type, output_type)
        return HostIo(None, None, input_type, output_type)

    def axi_word_types(self) -> tuple[str, str]:
        """(T_in, T_out) of a VivadoAccelerator project: ``<name>_axi.h`` is what was compiled, so
        its typedefs win over the yaml (hls4ml 1.3.0 writes them as ``fixed<16,6,TRN,WRAP,0>``)."""
        acc = self.accelerator
        assert acc is not None
        names = {"T_in": acc.input_precision, "T_out": acc.output_precision}
        axi = self.firmware_dir / f"{self.name}_axi.h"
        if axi.is_file():
            found = {name: t for t, name in _AXI_TYPEDEF.findall(axi.read_text())}
            names.update({k: " ".join(v.split()) for k, v in found.items()})
        return names["T_in"].strip(), names["T_out"].strip()

    def firmware_hash(self) -> str:
        """sha256 of the project's own firmware files (templates excluded, paths included): what
        an xclbin was synthesised from. card.json records it; a project changed since then is refused."""
        h = hashlib.sha256()
        for p in self.source_files():
            _hash_file(h, p, p.relative_to(self.path).as_posix())
        return h.hexdigest()

    @property
    def input_shape(self) -> tuple[int, ...]:
        """The model's input shape without batch (hls4ml's InputShape when it matches the port)."""
        shape = self.config.get("InputShape")
        if (
            isinstance(shape, (list, tuple))
            and shape
            and all(isinstance(d, int) and d > 0 for d in shape)
            and int(_product(shape)) == self.input.size
        ):
            return tuple(shape)
        return (self.input.size,)

    def weight_files(self) -> list[Path]:
        """Weight files the top function loads at run time, all checked to exist.

        hls4ml's loader calls exit(1) on a missing file, which would take the whole server
        down: this check turns that into a load error for this one model.
        """
        text = self.read_firmware(f"{self.name}.cpp")
        names = _WEIGHT_LOAD.findall(text)
        files = [self.firmware_dir / "weights" / n for n in names]
        missing = [str(p.relative_to(self.path)) for p in files if not p.is_file()]
        if missing:
            raise ProjectError(f"hls4ml project {self.path}: missing weight file(s) {', '.join(missing)}")
        return files

    def _has_own_library(self, lib: str) -> bool:
        """The project carries a full copy of ``lib`` (not just its generated file)."""
        own = self.firmware_dir / lib
        generated = self.firmware_dir / GENERATED_TEMPLATE_FILE
        return own.is_dir() and any(p != generated for p in own.iterdir())

    def generated_template_file(self) -> Path | None:
        """firmware/nnet_utils/nnet_code_gen.h when it must be laid over the installed library."""
        path = self.firmware_dir / GENERATED_TEMPLATE_FILE
        return path if path.is_file() and not self._has_own_library("nnet_utils") else None

    def template_dirs(self) -> dict[str, Path]:
        own = {lib: self.firmware_dir / lib for lib in TEMPLATE_LIBRARIES}
        if all(self._has_own_library(lib) for lib in TEMPLATE_LIBRARIES):
            return own
        installed = installed_templates_dir()
        dirs = {lib: own[lib] if self._has_own_library(lib) else installed / lib for lib in TEMPLATE_LIBRARIES}
        for lib, p in dirs.items():
            if not p.is_dir():
                raise ProjectError(f"hls4ml template library {lib} not found at {p}")
        return dirs

    def source_files(self) -> list[Path]:
        """The project's own files the C-simulation depends on (templates excluded)."""
        skip = set(TEMPLATE_LIBRARIES)
        files = []
        root = self.path.resolve()
        for p in sorted(self.firmware_dir.rglob("*")):
            rel = p.relative_to(self.firmware_dir)
            if rel.parts[0] in skip or not p.is_file():
                continue
            if not p.resolve().is_relative_to(root):
                # compiled and hashed: a symlink must not pull in a file from elsewhere
                raise ProjectError(f"hls4ml project {self.path}: firmware/{rel} links to a file outside the project")
            if p.suffix in (".h", ".hpp", ".cpp", ".cc", ".txt"):
                files.append(p)
        generated = self.generated_template_file()
        if generated is not None:
            if not generated.resolve().is_relative_to(root):
                raise ProjectError(f"hls4ml project {self.path}: firmware/{GENERATED_TEMPLATE_FILE} links outside")
            files.append(generated)
        return files

    def content_hash(self) -> str:
        """sha256 of everything a compiled C-simulation depends on: rebuilt when any of it changes."""
        h = hashlib.sha256()
        h.update(f"hls4ml {hls4ml_version()}\n".encode())
        for p in self.source_files():
            _hash_file(h, p, p.relative_to(self.path).as_posix())
        for lib, root in sorted(self.template_dirs().items()):
            for p in sorted(root.rglob("*")):
                if p.is_file():
                    _hash_file(h, p, f"{lib}/{p.relative_to(root).as_posix()}")
        return h.hexdigest()

    def __repr__(self) -> str:
        return f"Hls4mlProject({str(self.path)!r}, {self.name}, {self.backend}, {self.io_type})"


def _truthy(value) -> bool:
    return value is True or str(value).strip().lower() in ("true", "1", "yes")


def _product(values) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


def _hash_file(h, path: Path, label: str) -> None:
    data = path.read_bytes()
    h.update(f"{label}\0{len(data)}\0".encode())
    h.update(data)
