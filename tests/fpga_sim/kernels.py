"""What each simulated kernel computes, from the bytes in device memory.

A kernel model takes the CU's register image (what XRT's ERT, or the host's register writes,
put into the CU's AXI-lite registers), works out which device memory it would read and write
and how many rows it processes, and computes the output bytes with hls4ml's C-simulation of the
project the xclbin was built from (the xclbin's folder, or its one subfolder holding
``hls4ml_config.yml``). Each ABI is modelled at its real hardware boundary, so a host codec that
gets the layout wrong produces wrong numbers (or a hang), as on a card:

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

Results are memoized per model: the last few (input bytes -> output bytes) pairs, compared byte
for byte, so a benchmark sending the same tensor repeatedly pays a compare, not a C-simulation
(FACILE's C-simulation runs about 17k rows/s).
"""

from __future__ import annotations

import copy
import math
import os
import re
import threading
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .environ import getenv, getenv_raw
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

MEMO_ENTRIES = 4
MEMO_MAX_BYTES = 256 << 20  # inputs + outputs kept per model


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


def raw_to_values(raw: np.ndarray, t: HlsType) -> np.ndarray:
    """Two's complement (or unsigned) integers holding ``t``'s low W bits -> float64 values."""
    bits = np.asarray(raw).astype(np.uint64) & np.uint64((1 << t.width) - 1)
    values = bits.astype(np.int64)
    if t.signed:
        values = np.where(values >= (1 << (t.width - 1)), values - (1 << t.width), values)
    return values.astype(np.float64) * 2.0**-t.frac


def values_to_raw(values: np.ndarray, t: HlsType, what: str) -> np.ndarray:
    """Exact values of ``t`` -> their integers (int64); anything else is a simulator error."""
    values = np.asarray(values, dtype=np.float64)
    scaled = values * 2.0**t.frac
    raw = np.rint(scaled)
    lo, hi = (-(1 << (t.width - 1)), 1 << (t.width - 1)) if t.signed else (0, 1 << t.width)
    ok = np.isfinite(scaled) & (raw == scaled) & (raw >= lo) & (raw < hi)
    if not ok.all():
        bad = values[~ok][:3].tolist()
        raise SimulationError(f"C-simulation output {bad} is not a value of {what} {t}")
    return raw.astype(np.int64)


def exact_float32(values: np.ndarray, what: str) -> np.ndarray:
    f = np.asarray(values, dtype=np.float64).astype(np.float32)
    same = (f.astype(np.float64) == values) | (np.isnan(values) & np.isnan(f))
    if not same.all():
        raise SimulationError(f"C-simulation output is not a float32 value ({what} = float)")
    return f


def _container_dtype(t: HlsType) -> np.dtype:
    return (
        np.dtype({1: "<i1", 2: "<i2", 4: "<i4", 8: "<i8"}[t.container])
        if t.signed
        else np.dtype({1: "<u1", 2: "<u2", 4: "<u4", 8: "<u8"}[t.container])
    )


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
    Environment overrides (read at every call): FPGASERVE_SIM_KERNEL_II, _LATENCY, _CLOCK_MHZ,
    and FPGASERVE_SIM_KERNEL_DELAY_MS (milliseconds added to every call).
    """

    latency: int
    ii: int
    ii_datapath: int
    source: str

    def effective(self, clock_mhz: float) -> dict:
        ii = _env_number(ENV_KERNEL_II) or self.ii
        latency = _env_number(ENV_KERNEL_LATENCY) or self.latency
        clock = _env_number(ENV_KERNEL_CLOCK_MHZ) or clock_mhz
        return {
            "latency": latency,
            "ii": ii,
            "ii_eff": max(ii, self.ii_datapath),
            "clock_mhz": clock,
            "delay_ms": _env_number(ENV_KERNEL_DELAY_MS) or 0.0,
            "source": self.source,
        }

    def seconds(self, rows: int, clock_mhz: float) -> float:
        # every start asks twice: what ``effective`` makes of the same overrides is kept
        key = (clock_mhz, *[getenv_raw(name) for name in _OVERRIDES])
        made = self.__dict__.get("_seconds_of")
        if made is None or made[0] != key:
            e = self.effective(clock_mhz)
            made = (key, e["latency"], e["ii_eff"], e["clock_mhz"] * 1e6, e["delay_ms"] / 1000.0)
            object.__setattr__(self, "_seconds_of", made)  # not a field: equality and hash are the fields'
        _key, latency, ii_eff, hz, delay_s = made
        cycles = latency + ii_eff * max(rows - 1, 0) if rows > 0 else 1
        return cycles / hz + delay_s


_OVERRIDES = (ENV_KERNEL_II, ENV_KERNEL_LATENCY, ENV_KERNEL_CLOCK_MHZ, ENV_KERNEL_DELAY_MS)


def _env_number(name: str) -> float:
    text = getenv(name)
    if not text:
        return 0.0
    try:
        value = float(text)
    except ValueError:
        raise SimulationError(f"{name} must be a number, got {text!r}") from None
    if value < 0:
        raise SimulationError(f"{name} must not be negative, got {text!r}")
    return value


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


# ---------------------------------------------------------------------------------- calls
@dataclass
class Access:
    """One memory range the kernel touches: argument id, device address, bytes."""

    arg_id: int
    arg: str
    address: int
    nbytes: int


@dataclass
class Call:
    """One kernel invocation as the hardware sees it: rows processed (timing), memory read and
    written, or ``fault`` (why the real kernel would never finish)."""

    rows: int
    reads: list[Access]
    writes: list[Access]
    fault: str | None = None


class _Memo:
    """The last few (rows, input bytes) -> output bytes of one model, compared byte for byte
    (inputs are views of device memory: a hit costs one compare, no copy)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.entries: list[tuple[int, list[bytes], list[bytes]]] = []
        self.hits = 0
        self.misses = 0

    def get(self, rows: int, inputs: list) -> list[bytes] | None:
        with self.lock:
            for i, (r, k, v) in enumerate(self.entries):
                # bytes == memoryview compares element by element in Python's slow path; a
                # contiguous copy compared with memcmp is ~20x faster for megabytes
                if (
                    r == rows
                    and len(k) == len(inputs)
                    and all(len(a) == len(b) and a == bytes(b) for a, b in zip(k, inputs))
                ):
                    self.entries.insert(0, self.entries.pop(i))
                    self.hits += 1
                    return v
            self.misses += 1
            return None

    def put(self, rows: int, inputs: list, value: list[bytes]) -> None:
        def size(entry) -> int:
            return sum(len(x) for x in entry[1]) + sum(len(x) for x in entry[2])

        entry = (rows, [bytes(x) for x in inputs], value)
        if size(entry) > MEMO_MAX_BYTES:
            return
        with self.lock:
            self.entries.insert(0, entry)
            del self.entries[MEMO_ENTRIES:]
            while sum(size(e) for e in self.entries) > MEMO_MAX_BYTES:
                self.entries.pop()


class KernelModel:
    """Base: argument decoding from the register image, memo, timing."""

    abi = ""

    def __init__(self, kernel: XmlKernel, project, folder: Path, compute: bool = True):
        self.kernel = kernel
        self.project = project
        self.folder = folder
        #: False: a model that plans calls and times them but never computes one (the host's
        #: half of a card whose computation runs in its card process, see device_side.py)
        self.computes = compute
        self.n_in = project.input.size
        self.n_out = project.output.size
        self.memo = _Memo()
        self._args = {a.name: a for a in kernel.args}
        self.timing: Timing

    def reg(self, regs: bytes, name: str) -> int:
        a = self._args.get(name)
        if a is None:
            raise SimulationError(f"kernel {self.kernel.name} has no argument '{name}' in its xclbin metadata")
        return int.from_bytes(regs[a.offset : a.offset + a.size].ljust(a.size, b"\0"), "little")

    def arg_id(self, name: str) -> int:
        ident = self._args[name].id
        return -1 if ident is None else ident

    def plan(self, regs: bytes) -> Call:
        raise NotImplementedError

    def compute(self, call: Call, inputs: list) -> list[bytes]:
        """Output bytes for the input bytes (memoized); ``inputs`` are bytes-like, one per read."""
        if not self.computes:
            raise SimulationError(f"this model of {self.kernel.name} plans calls only (the card process computes)")
        hit = self.memo.get(call.rows, inputs)
        if hit is not None:
            return hit
        out = self._compute(call, inputs)
        self.memo.put(call.rows, inputs, out)
        return out

    def _compute(self, call: Call, inputs: list[bytes]) -> list[bytes]:
        raise NotImplementedError

    def describe(self, clock_mhz: float) -> dict:
        return {"abi": self.abi, "n_in": self.n_in, "n_out": self.n_out, **self.timing.effective(clock_mhz)}


class KrnlRtlModel(KernelModel):
    abi = "krnl_rtl"

    def __init__(self, kernel: XmlKernel, project, folder: Path, compute: bool = True):
        super().__init__(kernel, project, folder, compute)
        self.t_in, self.t_out = axi_word_types(project)
        for what, t in (("T_in", self.t_in), ("T_out", self.t_out)):
            if t.kind == "double" or (t.kind == "fixed" and t.width > 32):
                raise SimulationError(f"{what} = {t} does not fit krnl_rtl's 32-bit data path")
        self.csim = load_csim(project, "axi") if compute else None
        self.timing = project_timing(folder, project, [f"{project.name}_axi", project.name], max(self.n_in, self.n_out))

    def plan(self, regs: bytes) -> Call:
        len_in, len_out = self.reg(regs, "length_r_in"), self.reg(regs, "length_r_out")
        addr_in, addr_out = self.reg(regs, "fifo_in"), self.reg(regs, "fifo_out")
        rows = len_in // self.n_in if self.n_in else 0
        call = Call(
            rows,
            [Access(self.arg_id("fifo_in"), "fifo_in", addr_in, 4 * len_in)],
            [Access(self.arg_id("fifo_out"), "fifo_out", addr_out, 4 * len_out)],
        )
        if len_in == 0 or len_in % self.n_in:
            call.fault = f"length_r_in={len_in} is not a positive multiple of N_IN={self.n_in}"
        elif len_out != rows * self.n_out:
            call.fault = (
                f"length_r_out={len_out} but {rows} rows produce {rows * self.n_out} words (N_OUT={self.n_out})"
            )
        return call

    def _decode(self, words: np.ndarray, t: HlsType) -> np.ndarray:
        if t.kind == "float":
            return words.view(np.float32).astype(np.float64)
        return raw_to_values(words, t)

    def _compute(self, call: Call, inputs: list[bytes]) -> list[bytes]:
        words = np.frombuffer(inputs[0], dtype="<u4")
        x = self._decode(words, self.t_in).reshape(call.rows, self.n_in)
        y = np.asarray(self.csim.predict(x), dtype=np.float64).reshape(-1)
        if self.t_out.kind == "float":
            out = exact_float32(y, "T_out").view(np.uint32)
        else:
            out = (values_to_raw(y, self.t_out, "T_out") & ((1 << self.t_out.width) - 1)).astype(np.uint32)
        return [out.astype("<u4").tobytes()]


class KernelWrapperModel(KernelModel):
    abi = "kernel_wrapper"

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

    def plan(self, regs: bytes) -> Call:
        rows = self.batchsize if self.legacy else self.reg(regs, "batchsize")
        return Call(
            rows,
            [Access(self.arg_id("in"), "in", self.reg(regs, "in"), rows * self.n_in * self.t_in.container)],
            [Access(self.arg_id("out"), "out", self.reg(regs, "out"), rows * self.n_out * self.t_out.container)],
        )

    def _compute(self, call: Call, inputs: list[bytes]) -> list[bytes]:
        if call.rows == 0:
            return [b""]
        if self.hw_quant:
            x = np.frombuffer(inputs[0], dtype="<f4").reshape(call.rows, self.n_in)
            y = np.asarray(self.csim.predict(x), dtype=np.float64)
            # the kernel's (float)out_buf[j]: result_t -> float, one rounding (the double the
            # C-simulation returns is exact for result_t up to 53 bits)
            return [y.astype(np.float32).astype("<f4").tobytes()]
        raw = np.frombuffer(inputs[0], dtype=_container_dtype(self.t_in))
        x = raw_to_values(raw, self.t_in).reshape(call.rows, self.n_in) if self.t_in.kind == "fixed" else raw
        y = np.asarray(self.csim.predict(np.ascontiguousarray(x, dtype=np.float64)), dtype=np.float64).reshape(-1)
        if self.t_out.kind == "float":
            return [exact_float32(y, "result_t").astype("<f4").tobytes()]
        if self.t_out.kind == "double":
            return [y.astype("<f8").tobytes()]
        out = values_to_raw(y, self.t_out, "result_t")
        return [out.astype(_container_dtype(self.t_out)).tobytes()]


class FaastModel(KernelModel):
    abi = "faast"

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

    def plan(self, regs: bytes) -> Call:
        return Call(
            FAAST_ROWS,
            [Access(self.arg_id("in"), "in", self.reg(regs, "in"), FAAST_ROWS * BEAT)],
            [Access(self.arg_id("out"), "out", self.reg(regs, "out"), FAAST_OUT_BEATS * BEAT)],
        )

    def _compute(self, call: Call, inputs: list[bytes]) -> list[bytes]:
        fields = np.frombuffer(inputs[0], dtype="<u2").reshape(FAAST_ROWS, 32)[:, : self.n_in]
        x = raw_to_values(fields, self.t_in)
        y = np.asarray(self.csim.predict(x), dtype=np.float64)
        raw = values_to_raw(y[:, -1], self.t_out, "result_t") & 0xFFFF
        return [raw.astype("<u2").tobytes()]


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
