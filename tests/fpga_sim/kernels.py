"""What each simulated kernel computes, from the bytes in device memory.

A kernel model reads the project the xclbin was built from (the xclbin's folder, or its one
subfolder holding ``hls4ml_config.yml``) and the kernel's metadata, and hands the card core
(``xrt_c/card_core.c``) what its rules need: which registers carry the buffers, lengths and
rows, the element types at the kernel's boundary, the timing, and hls4ml's C-simulation of the
project (its batch entry points, called from C). The core takes the CU's register image (what
XRT's ERT, or the host's register writes, put into the CU's AXI-lite registers), works out which
device memory a call reads and writes and how many rows it processes, and computes the output
bytes. Each ABI is modelled at its real hardware boundary, so a host codec that gets the layout
wrong produces wrong numbers (or a hang), as on a card:

* ``krnl_rtl`` (hls4ml VivadoAccelerator, RTL wrapper around ``<name>_axi``): one 32-bit word
  per element, row-major, ``length_r_in = rows*N_IN`` and ``length_r_out = rows*N_OUT`` words.
  A word is a float32 (``T_in``/``T_out`` = ``float``) or the two's complement of
  ``ap_fixed<ceil8(W),I>`` in its low ``ceil8(W)`` bits: the AXI-stream TDATA of ``<name>_axi``
  is that wide, so upper input bits are not connected (ignored) and upper output bits are zero.
  ``T_in``/``T_out`` are read from ``firmware/<name>_axi.h`` (what was compiled).
* ``kernel_wrapper`` (hls4ml VitisAccelerator, PR #991): the firmware's own ``input_t`` /
  ``result_t`` elements, dense row-major ``in[i*N_IN + j]``, each in the next power-of-two byte
  container (1, 2, 4, 8 bytes) little endian, sign-extended (zero-extended for unsigned types);
  the kernel reads only the low W bits. With ``AcceleratorConfig.HW_Quant`` the elements are
  IEEE float32 and the kernel converts (``(input_t)in[k]``, ``(float)out_buf[j]``). Rows per call:
  ``batchsize`` (current 3-argument kernel) or the project's ``AcceleratorConfig.Batchsize``
  (legacy 2-argument kernel, fixed at compile time).
* ``faast`` (FaaST's ``alveo_hls4ml``): always 16,384 rows per call; input row r is 512-bit beat
  r whose 16-bit field k (bytes 2k..2k+1, little endian) holds the raw bits of feature k
  (``input_t`` must be 16 bits wide, N_IN <= 32, fields >= N_IN ignored); output row r is field
  r % 32 of beat r // 32 (512 beats), the raw 16 bits of the last output element (FaaST writes
  every output element to the same field, so only N_OUT = 1 is meaningful).

The C-simulation is ``fpgaserve.backends.hls4ml.csim.CsimLibrary`` of the project: for
VivadoAccelerator projects it runs ``<name>_axi`` (T_in -> input_t ... result_t -> T_out), for the
others the top function (double/float -> input_t, result_t -> double). Values handed to it are
exactly representable in the boundary type, so the conversions inside are exact; outputs are
checked to be exact values of the output type before they are encoded (a C-simulation that did
not cast is reported, not rounded).

The core memoizes results per model: the last few (input bytes -> output bytes) pairs, compared
byte for byte, so a benchmark sending the same tensor repeatedly pays a compare, not a
C-simulation (FACILE's C-simulation runs about 17k rows/s).
"""

from __future__ import annotations

import copy
import ctypes
import math
import os
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import SimulationError
from .xclbin import XmlKernel

CONFIG_FILE = "hls4ml_config.yml"
FAAST_ROWS = 16384  # STREAMSIZE of FaaST's kernel_params.h
FAAST_OUT_BEATS = 512  # COMPSTREAMSIZE: 32 rows per 512-bit output beat
BEAT = 64  # bytes in a 512-bit beat
DEFAULT_BATCHSIZE = 8192  # hls4ml VitisAccelerator's AcceleratorConfig.Batchsize default

ENV_KERNEL_II = "FPGASERVE_SIM_KERNEL_II"
ENV_KERNEL_LATENCY = "FPGASERVE_SIM_KERNEL_LATENCY"
ENV_KERNEL_CLOCK_MHZ = "FPGASERVE_SIM_KERNEL_CLOCK_MHZ"
ENV_KERNEL_DELAY_MS = "FPGASERVE_SIM_KERNEL_DELAY_MS"


# ---------------------------------------------------------------------------------- types
@dataclass(frozen=True)
class HlsType:
    """A scalar HLS type: ``float``/``double``, or an ap_fixed/ap_int family member."""

    kind: str  # "float" | "double" | "fixed"
    width: int = 32
    integer: int = 32  # I of ap_fixed<W,I>; W for ap_int
    signed: bool = True

    @property
    def frac(self) -> int:
        return self.width - self.integer

    @property
    def container(self) -> int:
        """Bytes of the power-of-two container holding it in memory (C++ sizeof, HLS m_axi)."""
        if self.kind == "float":
            return 4
        if self.kind == "double":
            return 8
        need = -(-self.width // 8)
        size = 1
        while size < need:
            size *= 2
        return size

    def __str__(self) -> str:
        if self.kind != "fixed":
            return self.kind
        return f"ap_{'' if self.signed else 'u'}fixed<{self.width},{self.integer}>"


_TYPE = re.compile(r"^(?:ap_)?(u?)(fixed|int)\s*<\s*(-?\d+)\s*(?:,\s*(-?\d+))?[^<>]*>$")
_ARRAY = re.compile(r"^nnet::array\s*<\s*(.+?)\s*,\s*\d+\s*>$")


def parse_type(text: str) -> HlsType:
    """``float``, ``double``, ``ap_fixed<16,6>``, ``ap_ufixed<8,0,AP_RND>``, ``ap_int<8>``,
    ``ap_uint<10>``, hls4ml's own spelling ``fixed<16,6,TRN,WRAP,0>`` (what hls4ml 1.3.0 writes
    into ``<name>_axi.h`` for ap types), or an io_stream ``nnet::array<T, N>`` (its element)."""
    t = " ".join(text.replace("const", " ").split())
    m = _ARRAY.match(t)
    if m:
        return parse_type(m.group(1))
    if t in ("float", "double"):
        return HlsType(t, 32 if t == "float" else 64)
    m = _TYPE.match(t)
    if m is None:
        raise SimulationError(f"cannot read the HLS type '{text}' (float, double, ap_fixed<W,I>, ap_int<W>)")
    unsigned, kind, w, i = m.groups()
    width = int(w)
    if kind == "fixed" and i is None:
        raise SimulationError(f"cannot read the HLS type '{text}': ap_fixed needs <W,I>")
    integer = int(i) if kind == "fixed" else width
    return HlsType("fixed", width, integer, not unsigned)


# ---------------------------------------------------------------------------------- project facts
_TYPEDEF = re.compile(r"^\s*typedef\s+([^;{}]+?)\s+(\w+)\s*;", re.M)
_AXI_WORD = re.compile(r"typedef\s+([^;{}]+?)\s+(T_in|T_out)\s*;")


def resolve_typedef(project, name: str) -> str:
    """A type name of the firmware resolved through firmware/defines.h (``input_t`` ->
    ``ap_fixed<16,6>``; hls4ml names the output type ``result_t``, whatever the layer)."""
    text = (Path(project.firmware_dir) / "defines.h").read_text()
    typedefs = {n: " ".join(t.split()) for t, n in _TYPEDEF.findall(text)}
    seen: set[str] = set()
    out = name.strip()
    while out in typedefs and out not in seen:
        seen.add(out)
        out = typedefs[out]
    return out


def _truthy(value) -> bool:
    return value is True or str(value).strip().lower() in ("true", "1", "yes")


def accelerator_config(project) -> dict:
    acc = project.config.get("AcceleratorConfig")
    return acc if isinstance(acc, dict) else {}


def hw_quant(project) -> bool:
    """AcceleratorConfig.HW_Quant (PR #991): the kernel takes and returns float32."""
    return _truthy(accelerator_config(project).get("HW_Quant", False))


def axi_word_types(project) -> tuple[HlsType, HlsType]:
    """(T_in, T_out) of ``firmware/<name>_axi.h``, the stream word types krnl_rtl moves."""
    path = Path(project.firmware_dir) / f"{project.name}_axi.h"
    if not path.is_file():
        raise SimulationError(
            f"hls4ml project {project.path} has no firmware/{path.name}: krnl_rtl is hls4ml's VivadoAccelerator "
            "kernel, built around that wrapper"
        )
    found = {name: t for t, name in _AXI_WORD.findall(path.read_text())}
    if "T_in" not in found or "T_out" not in found:
        raise SimulationError(f"{path}: no 'typedef ... T_in;' / 'typedef ... T_out;'")
    return parse_type(found["T_in"]), parse_type(found["T_out"])


def find_project_dir(xclbin_path: str | os.PathLike) -> Path | None:
    """The hls4ml project of an xclbin: its folder, or the one subfolder with hls4ml_config.yml."""
    folder = Path(xclbin_path).parent
    if (folder / CONFIG_FILE).is_file():
        return folder
    found = sorted(folder.glob(f"*/{CONFIG_FILE}"))
    return found[0].parent if len(found) == 1 else None


def load_project(folder: str | os.PathLike):
    from fpgaserve.backends.hls4ml.project import Hls4mlProject

    return Hls4mlProject.load(folder)


def load_csim(project, boundary: str):
    """The project's C-simulation at ``boundary``: "axi" (``<name>_axi``) or "top" (the top function).

    fpgaserve's loader picks the boundary from the project (its accelerator wrapper). A
    VitisAccelerator project carries an AcceleratorConfig but no ``<name>_axi``; should the loader
    take any AcceleratorConfig for a VivadoAccelerator one, the simulator hands it a view of the
    project without it, so the top function is what runs.
    """
    from fpgaserve.backends.hls4ml.csim import CsimLibrary

    has_axi = (Path(project.firmware_dir) / f"{project.name}_axi.h").is_file()
    if boundary == "top" and getattr(project, "accelerator", None) is not None and not has_axi:
        project = copy.copy(project)
        project.accelerator = None
    lib = CsimLibrary.load(project)
    word_types = getattr(lib, "word_types", None)
    if boundary == "top" and word_types is not None:
        raise SimulationError(
            f"{project.path}: the C-simulation runs the {project.name}_axi wrapper, not the top function"
        )
    if boundary == "axi" and not has_axi:
        raise SimulationError(f"{project.path}: no firmware/{project.name}_axi.h for krnl_rtl")
    return lib


# ---------------------------------------------------------------------------------- timing
@dataclass(frozen=True)
class Timing:
    """Kernel time per call: ``(latency + II_eff * (rows - 1)) / f_clk`` plus a fixed delay.

    ``latency``/``ii`` are cycles from the project's csynth report when the version folder has
    one (``reports/*_csynth.xml``: PerformanceEstimates/SummaryOfOverallLatency
    Best-caseLatency and Interval-min, the values hls4ml reports as BestLatency/IntervalMin),
    else from the hls4ml config: II = the largest ReuseFactor, latency *estimated* as
    (ReuseFactor + 4) cycles per configured layer plus 10 (hls4ml's Latency strategy pipelines each
    dense layer over about ReuseFactor cycles plus its adder tree and I/O registers; a rough
    figure, stated as such in ``source``). ``ii_datapath`` is what the ABI's memory path allows:
    krnl_rtl moves one 32-bit word per clock each way (max(N_IN, N_OUT) cycles per row),
    kernel_wrapper ceil(N*bytes/beat) beats per row per port, FaaST one 512-bit beat per row in.
    Environment overrides (read by the card core at every start): FPGASERVE_SIM_KERNEL_II,
    _LATENCY, _CLOCK_MHZ, and FPGASERVE_SIM_KERNEL_DELAY_MS (milliseconds added to every call).
    The formula is the core's (xrt_c/card_core.c ``kernel_seconds``): this is its data.
    """

    latency: int
    ii: int
    ii_datapath: int
    source: str

    def effective(self, core, model_id: int, clock_mhz: float) -> dict:
        """What the card core makes of this timing now (the environment's overrides applied)."""
        out = (ctypes.c_double * 5)()
        core.check(core.py.fpgasim_model_timing(model_id, int(clock_mhz), out), SimulationError)
        latency, ii, ii_eff, clock, delay = (_number(v) for v in out)
        return {
            "latency": latency,
            "ii": ii,
            "ii_eff": ii_eff,
            "clock_mhz": clock,
            "delay_ms": delay,
            "source": self.source,
        }


def _number(v: float) -> float | int:
    return int(v) if float(v).is_integer() else v


def _report_value(root: ET.Element, path: str) -> int | None:
    node = root.find(path)
    if node is None or node.text is None:
        return None
    try:
        return int(node.text.strip())
    except ValueError:
        return None  # "undef"


def project_timing(folder: Path, project, tops: list[str], ii_datapath: int) -> Timing:
    """Timing of the project in ``folder`` (see :class:`Timing`); ``tops`` in order of preference."""
    reports = sorted((folder / "reports").glob("*_csynth.xml")) if (folder / "reports").is_dir() else []
    by_top = {p.name[: -len("_csynth.xml")]: p for p in reports}
    chosen = next((by_top[t] for t in tops if t in by_top), reports[0] if len(reports) == 1 else None)
    if chosen is not None:
        try:
            root = ET.parse(chosen).getroot()
        except ET.ParseError as e:
            raise SimulationError(f"{chosen} is not XML: {e}") from None
        est = "PerformanceEstimates/SummaryOfOverallLatency/"
        latency = _report_value(root, est + "Best-caseLatency")
        ii = _report_value(root, est + "Interval-min")
        if latency is not None and ii is not None:
            return Timing(latency, max(ii, 1), ii_datapath, f"csynth report {chosen.name}")
    hls = project.config.get("HLSConfig") or {}
    factors = []
    layers = 0

    def reuse(block) -> None:
        if isinstance(block, dict) and "ReuseFactor" in block:
            try:
                factors.append(int(block["ReuseFactor"]))
            except (TypeError, ValueError):
                pass

    reuse(hls.get("Model"))
    for group in ("LayerType", "LayerName"):
        for block in (hls.get(group) or {}).values():
            reuse(block)
            if group == "LayerName" and isinstance(block, dict) and "ReuseFactor" in block:
                layers += 1
    ii = max(factors or [1])
    latency = (ii + 4) * max(layers, 1) + 10
    return Timing(latency, ii, ii_datapath, "estimated from the hls4ml config (ReuseFactor); no csynth report")


# ---------------------------------------------------------------------------------- models
def _core_type(t: HlsType):
    from .card_core import Type

    kind = {"float": 0, "double": 1}.get(t.kind, 2)
    return Type(kind, t.width, t.integer, int(t.signed), t.container)


class KernelModel:
    """Base: what the card core needs to plan, time and compute a kernel's calls, read from the
    project and the xclbin's kernel metadata (``register`` hands it to the core).

    The rules themselves are the core's (``xrt_c/card_core.c``: ``plan``, ``kernel_seconds``,
    ``compute``): which device memory a call reads and writes from its registers, how long it
    takes, and its outputs, from the C-simulation called from C (results memoized there on the
    last few inputs, compared byte for byte)."""

    abi = ""
    abi_code = 0

    def __init__(self, kernel: XmlKernel, project, folder: Path, compute: bool = True):
        self.kernel = kernel
        self.project = project
        self.folder = folder
        #: False: a model that plans calls and times them but never computes one (timing mode)
        self.computes = compute
        self.n_in = project.input.size
        self.n_out = project.output.size
        self._args = {a.name: a for a in kernel.args}
        self.timing: Timing
        self.csim = None
        self.t_in: HlsType
        self.t_out: HlsType
        #: the core's id of this model (``register``), 0 before
        self.core_id = 0
        self._core = None

    def arg_id(self, name: str) -> int:
        ident = self._args[name].id
        return -1 if ident is None else ident

    def _roles(self) -> list[str | None]:
        """Argument names by role: input, output, then length_in/length_out (krnl_rtl) or
        batchsize (kernel_wrapper)."""
        raise NotImplementedError

    def descriptor(self):
        """The core's ``struct fpgasim_model`` of this kernel."""
        from .card_core import Model

        d = Model()
        d.abi, d.n_in, d.n_out = self.abi_code, self.n_in, self.n_out
        d.t_in, d.t_out = _core_type(self.t_in), _core_type(self.t_out)
        for role, name in enumerate(self._roles()):
            if name is None:
                continue
            a = self._args.get(name)
            if a is None:
                raise SimulationError(f"kernel {self.kernel.name} has no argument '{name}' in its xclbin metadata")
            d.args[role].id, d.args[role].offset, d.args[role].size = self.arg_id(name), a.offset, a.size
            d.args[role].present, d.args[role].name = 1, name.encode()[:31]
        d.latency, d.ii, d.ii_datapath = self.timing.latency, self.timing.ii, self.timing.ii_datapath
        lib = self.csim
        if lib is not None:
            d.predict_float = ctypes.cast(lib._fn[np.dtype(np.float32)], ctypes.c_void_p).value
            d.predict_double = ctypes.cast(lib._fn[np.dtype(np.float64)], ctypes.c_void_p).value
            d.stack_bytes = lib.stack_bytes
            d.float_in, d.float_out, d.serial = int(lib._float_in), int(lib._float_out), int(lib._serial is not None)
        return d

    def register(self, core) -> int:
        """Hand this model to the card core (once); its id there."""
        if not self.core_id:
            self.core_id = core.check(core.c.fpgasim_model_new(ctypes.byref(self.descriptor())), SimulationError)
            self._core = core
        return self.core_id

    def describe(self, clock_mhz: float) -> dict:
        out = {"abi": self.abi, "n_in": self.n_in, "n_out": self.n_out}
        if self._core is not None:
            out.update(self.timing.effective(self._core, self.core_id, clock_mhz))
            memo = (ctypes.c_uint64 * 2)()
            self._core.py.fpgasim_model_memo(self.core_id, memo)
            out.update(memo_hits=memo[0], memo_misses=memo[1])
        return out


class KrnlRtlModel(KernelModel):
    abi = "krnl_rtl"
    abi_code = 1

    def __init__(self, kernel: XmlKernel, project, folder: Path, compute: bool = True):
        super().__init__(kernel, project, folder, compute)
        self.t_in, self.t_out = axi_word_types(project)
        for what, t in (("T_in", self.t_in), ("T_out", self.t_out)):
            if t.kind == "double" or (t.kind == "fixed" and t.width > 32):
                raise SimulationError(f"{what} = {t} does not fit krnl_rtl's 32-bit data path")
        self.csim = load_csim(project, "axi") if compute else None
        self.timing = project_timing(folder, project, [f"{project.name}_axi", project.name], max(self.n_in, self.n_out))

    def _roles(self) -> list[str | None]:
        return ["fifo_in", "fifo_out", "length_r_in", "length_r_out"]


class KernelWrapperModel(KernelModel):
    abi = "kernel_wrapper"
    abi_code = 2

    def __init__(self, kernel: XmlKernel, project, folder: Path, compute: bool = True):
        super().__init__(kernel, project, folder, compute)
        self.legacy = "batchsize" not in self._args
        self.hw_quant = hw_quant(project)
        if self.hw_quant:
            self.t_in = self.t_out = HlsType("float", 32)
        else:
            self.t_in = parse_type(resolve_typedef(project, project.input.ctype))
            self.t_out = parse_type(resolve_typedef(project, project.output.ctype))
        for t in (self.t_in, self.t_out):
            if t.kind == "fixed" and t.width > 64:
                raise SimulationError(f"{t} is wider than 64 bits: no C container the host and kernel would share")
        acc = accelerator_config(project)
        self.batchsize = int(acc.get("Batchsize", DEFAULT_BATCHSIZE))
        self.csim = load_csim(project, "top") if compute else None
        width = {name: dw for name, (_mode, _rng, dw) in kernel.ports.items()}
        beat_in = max(width.get(self._args["in"].port, 512) // 8, 1)
        beat_out = max(width.get(self._args["out"].port, 512) // 8, 1)
        datapath = max(
            math.ceil(self.n_in * self.t_in.container / beat_in),
            math.ceil(self.n_out * self.t_out.container / beat_out),
            1,
        )
        self.timing = project_timing(folder, project, [project.name], datapath)

    def _roles(self) -> list[str | None]:
        return ["in", "out", None if self.legacy else "batchsize", None]

    def descriptor(self):
        d = super().descriptor()
        d.legacy, d.batchsize, d.hw_quant = int(self.legacy), self.batchsize, int(self.hw_quant)
        return d


class FaastModel(KernelModel):
    abi = "faast"
    abi_code = 3

    def __init__(self, kernel: XmlKernel, project, folder: Path, compute: bool = True):
        super().__init__(kernel, project, folder, compute)
        self.t_in = parse_type(resolve_typedef(project, project.input.ctype))
        self.t_out = parse_type(resolve_typedef(project, project.output.ctype))
        for what, t in (("input_t", self.t_in), ("result_t", self.t_out)):
            if t.kind != "fixed" or t.width != 16:
                raise SimulationError(f"FaaST's kernel moves 16-bit fields; the project's {what} is {t}")
        if self.n_in > 32:
            raise SimulationError(f"FaaST packs one row per 512-bit beat: N_IN={self.n_in} > 32 fields")
        self.csim = load_csim(project, "top") if compute else None
        self.timing = project_timing(folder, project, [project.name], 1)

    def _roles(self) -> list[str | None]:
        return ["in", "out", None, None]


MODELS = {"krnl_rtl": KrnlRtlModel, "kernel_wrapper": KernelWrapperModel, "alveo_hls4ml": FaastModel}


def detect_abi(kernel: XmlKernel) -> str | None:
    """The ABI of a kernel in an xclbin, from its name and argument signature."""
    names = [a.name for a in kernel.args]
    memory = [a for a in kernel.args if a.address_qualifier == 1]
    if kernel.name == "krnl_rtl" and names == ["fifo_in", "fifo_out", "length_r_in", "length_r_out"]:
        return "krnl_rtl"
    if kernel.name == "kernel_wrapper" and names in (["batchsize", "in", "out"], ["in", "out"]) and len(memory) == 2:
        return "kernel_wrapper"
    if kernel.name == "alveo_hls4ml" and names == ["in", "out"] and all("512" in a.type for a in memory):
        return "faast"
    return None


def load_model(kernel: XmlKernel, xclbin_path: str | None, compute: bool = True) -> KernelModel:
    """The model of ``kernel`` for the xclbin at ``xclbin_path`` (raises SimulationError);
    ``compute=False``: without the C-simulation (plans and times calls only)."""
    abi = detect_abi(kernel)
    if abi is None:
        raise SimulationError(
            f"no model for kernel '{kernel.name}' with arguments {[a.name for a in kernel.args]} "
            "(the simulator models hls4ml's krnl_rtl and kernel_wrapper, and FaaST's alveo_hls4ml)"
        )
    if not xclbin_path:
        raise SimulationError(
            f"kernel {kernel.name}: the xclbin was given as bytes, so no hls4ml project is next to it"
        )
    folder = find_project_dir(xclbin_path)
    if folder is None:
        raise SimulationError(
            f"no hls4ml project ({CONFIG_FILE}) next to {xclbin_path} or in one subfolder: "
            f"the simulator cannot compute {kernel.name}"
        )
    project = load_project(folder)
    return MODELS[kernel.name](kernel, project, Path(xclbin_path).parent, compute)
