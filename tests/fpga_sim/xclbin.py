"""Write and read xclbins (XRT's ``axlf`` container) the way ``v++ --link`` lays them out.

The simulated card needs xclbins to "program". Their layout is not one of our own: the writer
produces the container as v++/xclbinutil write it (XRT's ``xclbin.h``, whose offsets were checked
against gcc's offsetof) for the three kernels hls4ml firmware reaches an Alveo card through, and
the reader parses it back the way XRT does (group sections first). A host runtime that reads these
files is therefore exercised against the real layout; PYNQ's own ``XclBin`` parser reads them (the
tests check it; ``xclbinutil`` was not available to check against). What is the simulator's own:
the shells' interface uuids and feature-ROM timestamps (derived from the VBNV, see
:func:`shell_info`) and the exact bank base addresses of some platforms.

What is *not* real is the bitstream: the BITSTREAM section holds a short ASCII placeholder
(``FPGASERVE-SIMULATED-XCLBIN``), so no real card or XRT shell could ever program one of these
files. BUILD_METADATA says the same in ``generated_by.options``.

Layout (all little endian, natural C alignment)::

    0x000  axlf          magic "xclbin2\\0", m_signature_length -1, 28 x 0xFF reserved,
                         256 x 0xFF key block, u64 m_uniqueId
    0x130  axlf_header   m_length (exact file size), m_timeStamp, m_featureRomTimeStamp,
                         version patch/major/minor, u16 m_mode, u16 m_actionMask,
                         m_interface_uuid[16] (header+32), m_platformVBNV[64],
                         xclbin uuid[16] (header+112), m_debug_bin[16], u32 m_numSections
    0x1C8  section headers (40 bytes: u32 kind, char name[16], pad, u64 offset, u64 size)
           payloads, each 8-byte aligned
           "XCLBIN_MIRROR_DATA_START" + JSON + "XCLBIN_MIRROR_DATA_END" (xclbinutil's mirror)

Array sections are ``[count][pad to the element's alignment][elements]``: MEM_TOPOLOGY and
GROUP_TOPOLOGY (i32, array at 8, 40-byte mem_data), CONNECTIVITY and GROUP_CONNECTIVITY
(i32, array at 4, 12-byte connection), IP_LAYOUT (i32, array at 8, 80-byte ip_data),
CLOCK_FREQ_TOPOLOGY (i16, array at 2, 136-byte clock_freq).

The three kernel ABIs (see ``KERNEL_ABIS``), argument tables from the sources they come from:

* ``krnl_rtl`` - hls4ml 1.3.0 VivadoAccelerator Alveo RTL wrapper, packaged by ``package_xo``
  (register map of ``krnl_rtl_control_s_axi.v``); CUs ``krnl_rtl_1..``.
* ``kernel_wrapper`` - hls4ml's VitisAccelerator backend (PR #991): current
  ``kernel_wrapper(batchsize, in, out)`` or legacy ``kernel_wrapper(in, out)``; CUs
  ``kernel_wrapper_1..``, each master port on its own bank(s).
* ``faast`` - FaaST's ``alveo_hls4ml(const ap_uint<512>* in, ap_uint<512>* out)``, one
  ``m_axi_gmem`` port of 512 bits; CUs ``alveo_hls4ml_0..``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import struct
import time
import uuid as uuidlib
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

# ---------------------------------------------------------------------------------- constants
# enum axlf_section_kind (xclbin.h)
BITSTREAM = 0
EMBEDDED_METADATA = 2
MEM_TOPOLOGY = 6
CONNECTIVITY = 7
IP_LAYOUT = 8
CLOCK_FREQ_TOPOLOGY = 11
BUILD_METADATA = 14
PARTITION_METADATA = 20
GROUP_TOPOLOGY = 26
GROUP_CONNECTIVITY = 27
SECTION_NAMES = {
    BITSTREAM: "BITSTREAM",
    EMBEDDED_METADATA: "EMBEDDED_METADATA",
    MEM_TOPOLOGY: "MEM_TOPOLOGY",
    CONNECTIVITY: "CONNECTIVITY",
    IP_LAYOUT: "IP_LAYOUT",
    CLOCK_FREQ_TOPOLOGY: "CLOCK_FREQ_TOPOLOGY",
    BUILD_METADATA: "BUILD_METADATA",
    GROUP_TOPOLOGY: "GROUP_TOPOLOGY",
    GROUP_CONNECTIVITY: "GROUP_CONNECTIVITY",
}

# enum MEM_TYPE
MEM_DDR4 = 1
MEM_DRAM = 2
MEM_HBM = 6
MEM_TYPE_NAMES = {
    0: "MEM_DDR3",
    1: "MEM_DDR4",
    2: "MEM_DRAM",
    3: "MEM_STREAMING",
    4: "MEM_PREALLOCATED_GLOB",
    5: "MEM_ARE",
    6: "MEM_HBM",
    7: "MEM_BRAM",
    8: "MEM_URAM",
    9: "MEM_STREAMING_CONNECTION",
    10: "MEM_HOST",
    11: "MEM_PS_KERNEL",
}
# enum IP_TYPE, IP_CONTROL, CLOCK_TYPE, XCLBIN_MODE
IP_KERNEL = 1
AP_CTRL_HS = 0
AP_CTRL_CHAIN = 1
CONTROL_PROTOCOLS = {"ap_ctrl_hs": AP_CTRL_HS, "ap_ctrl_chain": AP_CTRL_CHAIN, "ap_ctrl_none": 2}
CT_DATA = 1
CT_KERNEL = 2
CLOCK_TYPE_NAMES = {0: "UNUSED", 1: "DATA", 2: "KERNEL", 3: "SYSTEM"}
XCLBIN_FLAT = 0
XCLBIN_PR = 1

MAGIC = b"xclbin2\0"
AXLF_HEADER_OFFSET = 304
AXLF_HEADER_SIZE = 152
SECTION_TABLE_OFFSET = AXLF_HEADER_OFFSET + AXLF_HEADER_SIZE  # 456
SECTION_HEADER_SIZE = 40
_HEADER = struct.Struct("<QQQHBBHH16s64s16s16sI4x")  # axlf_header, 152 bytes
_SECTION = struct.Struct("<I16s4xQQ")
_MEM_DATA = struct.Struct("<BB6xQQ16s")
_CONNECTION = struct.Struct("<iii")
_IP_DATA = struct.Struct("<IIQ64s")
_CLOCK = struct.Struct("<HB5x128s")
assert _HEADER.size == AXLF_HEADER_SIZE and _SECTION.size == SECTION_HEADER_SIZE
assert (_MEM_DATA.size, _CONNECTION.size, _IP_DATA.size, _CLOCK.size) == (40, 12, 80, 136)

MIRROR_START = b"XCLBIN_MIRROR_DATA_START"
MIRROR_END = b"XCLBIN_MIRROR_DATA_END"
BITSTREAM_PLACEHOLDER = (
    b"FPGASERVE-SIMULATED-XCLBIN: written by fpgaserve's test suite (tests/fpga_sim) for the simulated "
    b"Alveo card. This is not a bitstream; no real card or XRT shell can program it.\n"
)
#: the XRT release of the xclbinutil that v++ 2022.2 packages with (header version bytes)
PACKAGER_VERSION = (2, 14, 354)
VITIS_VERSION = "2022.2"

DEFAULT_PLATFORM = "xilinx_u250_gen3x16_xdma_shell_4_1"
DEFAULT_CLOCK_MHZ = 300  # v++'s default for ap_clk on Alveo (clock id 0, DATA_CLK)
KERNEL_CLK_MHZ = 500  # ap_clk_2 (clock id 1, KERNEL_CLK)

#: first CU's AXI-lite base on the xdma shells, and the stride v++ places CUs at
CU_BASE = 0x180_0000
CU_STRIDE = 0x1_0000


# ---------------------------------------------------------------------------------- shells
@dataclass(frozen=True)
class BankSpec:
    """One MEM_TOPOLOGY entry: tag, MEM_TYPE, base address, size in bytes."""

    tag: str
    mem_type: int
    base: int
    size: int


@dataclass(frozen=True)
class ShellInfo:
    """What the simulator knows about a shell (the card's static region).

    ``interface_uuid`` is non-empty for 2RP (DFX) shells, where XRT matches xclbins by interface
    uuid and skips the feature-ROM timestamp check; flat/1RP shells (``*_201830_*``) have none
    and match by ``rom_timestamp``. The uuids and timestamps are *derived from the VBNV* (a hash)
    because the real values of each shell are not public in one place: they are consistent
    between cards and the xclbins this module writes, not the ones a real shell reports.
    """

    vbnv: str
    interface_uuid: str  # 32 hex digits, or "" (no interface uuid)
    rom_timestamp: int
    logic_uuid: str  # 32 hex digits
    fpga_part: str
    banks: tuple[BankSpec, ...]


# 2RP platform names as v++ --platform takes them -> the shell VBNV the card's ROM reports
PLATFORM_SHELLS = {
    "xilinx_u250_gen3x16_xdma_4_1_202210_1": "xilinx_u250_gen3x16_xdma_shell_4_1",
    "xilinx_u55c_gen3x16_xdma_3_202210_1": "xilinx_u55c_gen3x16_xdma_base_3",
    "xilinx_u50_gen3x16_xdma_5_202210_1": "xilinx_u50_gen3x16_xdma_base_5",
    "xilinx_u280_gen3x16_xdma_1_202211_1": "xilinx_u280_gen3x16_xdma_base_1",
}
_FLAT_SHELL = re.compile(r"_(2018|2019)\d\d_\d+$")
_GIB = 1 << 30
_DDR_BASE = 0x40_0000_0000
_DDR_STRIDE = 0x10_0000_0000
_PLRAM_BASE = 0x30_0000_0000
_PLRAM_SIZE = 128 << 10


def _digest(text: str) -> bytes:
    return hashlib.sha256(f"fpgaserve-sim-shell:{text}".encode()).digest()


def shell_of(platform: str) -> str:
    """The shell VBNV a card reports for an xclbin built with ``v++ --platform <platform>``."""
    return PLATFORM_SHELLS.get(platform, platform)


def is_flat_shell(vbnv: str) -> bool:
    """Flat/1RP shells (``xilinx_u250_xdma_201830_2``): matched by feature-ROM timestamp."""
    return bool(_FLAT_SHELL.search(vbnv))


def platform_banks(vbnv: str) -> tuple[BankSpec, ...]:
    """The memory banks (MEM_TOPOLOGY tags, in order) a platform exposes.

    U200/U250 ``xdma_201830`` shells name their DDR banks ``bank0..3`` (platforminfo's SP tags;
    ``DDR[n]`` is the alias v++ accepts); the gen3x16 DFX shells ``DDR[0..3]``; U50/U55C HBM
    pseudo-channels ``HBM[0..31]`` (256 MiB, 512 MiB on the U55C); U280 both. PLRAMs follow, as
    MEM_DRAM of 128 KiB (U250: four, one per SLR). HBM entries are MEM_DRAM too: that is the type
    a U50's driver log reports for them (the xocl driver classifies banks by tag, not type).
    """
    v = vbnv.lower()
    banks: list[BankSpec] = []
    if "u55c" in v or "u50" in v or "u280" in v:
        if "u280" in v:
            banks += [BankSpec(f"DDR[{i}]", MEM_DDR4, _DDR_BASE + i * _DDR_STRIDE, 16 * _GIB) for i in range(2)]
        hbm = (512 << 20) if "u55c" in v else (256 << 20)
        banks += [BankSpec(f"HBM[{i}]", MEM_DRAM, i * hbm, hbm) for i in range(32)]
        plrams = 3
    else:
        name = "bank{}" if is_flat_shell(vbnv) and ("u250" in v or "u200" in v) else "DDR[{}]"
        banks += [BankSpec(name.format(i), MEM_DDR4, _DDR_BASE + i * _DDR_STRIDE, 16 * _GIB) for i in range(4)]
        plrams = 3 if "u200" in v else 4
    banks += [BankSpec(f"PLRAM[{i}]", MEM_DRAM, _PLRAM_BASE + i * 0x20000, _PLRAM_SIZE) for i in range(plrams)]
    return tuple(banks)


def shell_info(vbnv: str) -> ShellInfo:
    """The simulator's description of the shell ``vbnv`` (see :class:`ShellInfo`)."""
    d = _digest(vbnv)
    flat = is_flat_shell(vbnv)
    v = vbnv.lower()
    part = {
        "u55c": "xcu55c-fsvh2892-2L-e",
        "u50": "xcu50-fsvh2104-2-e",
        "u280": "xcu280-fsvh2892-2L-e",
        "u200": "xcu200-fsgd2104-2-e",
    }
    fpga = next((p for k, p in part.items() if k in v), "xcu250-figd2104-2L-e")
    return ShellInfo(
        vbnv=vbnv,
        interface_uuid="" if flat else d[:16].hex(),
        rom_timestamp=(int.from_bytes(d[16:24], "little") & 0x7FFF_FFFF) | 0x5000_0000 if flat else 0,
        logic_uuid=_digest("logic:" + vbnv)[:16].hex(),
        fpga_part=fpga,
        banks=platform_banks(vbnv),
    )


# ---------------------------------------------------------------------------------- kernels
@dataclass(frozen=True)
class PortSpec:
    name: str
    mode: str  # master | slave
    range: int
    data_width: int


@dataclass(frozen=True)
class ArgSpec:
    """One ``<arg>`` of the kernel XML (offsets in the CU's AXI-lite register map)."""

    id: int
    name: str
    address_qualifier: int  # 0 scalar, 1 global (m_axi pointer)
    port: str
    size: int
    offset: int
    type: str


@dataclass(frozen=True)
class KernelSpec:
    abi: str
    name: str
    language: str
    vlnv: str
    hw_control_protocol: str
    ports: tuple[PortSpec, ...]
    args: tuple[ArgSpec, ...]
    first_cu: int  # CU numbering: krnl_rtl_1 / kernel_wrapper_1 (v++ default) or alveo_hls4ml_0 (FaaST's nk)

    def cu_names(self, n: int) -> list[str]:
        return [f"{self.name}_{self.first_cu + i}" for i in range(n)]

    @property
    def memory_args(self) -> tuple[ArgSpec, ...]:
        return tuple(a for a in self.args if a.address_qualifier == 1)


KERNEL_ABIS = ("krnl_rtl", "kernel_wrapper", "faast")
_MAX64 = 0xFFFF_FFFF_FFFF_FFFF


def kernel_spec(
    abi: str, *, element_in: str = "float", element_out: str = "float", legacy: bool = False, port_width: int = 512
) -> KernelSpec:
    """The kernel XML of one ABI, as v++/package_xo emit it.

    * krnl_rtl: ``package_xo -kernel_name krnl_rtl`` of hls4ml's IP (RTL, ``language="ip_c"``):
      ``fifo_in``/``fifo_out`` (64-bit pointers at 0x10/0x1C) on the one 32-bit ``m_axi_gmem``
      master, ``length_r_in``/``length_r_out`` (word counts, 0x28/0x30), ``ap_ctrl_hs``.
    * kernel_wrapper: an HLS C++ kernel (``language="c"``, ``ap_ctrl_chain``): ``batchsize`` at
      0x10, ``in`` at 0x18 on ``M_AXI_GMEM0``, ``out`` at 0x24 on ``M_AXI_GMEM1``; the legacy
      2-argument kernel has ``in`` at 0x10 and ``out`` at 0x1C. ``element_in``/``element_out`` are
      the pointer element types as the HLS front end prints them (``ap_fixed<16, 6>`` or ``float``).
      The m_axi data width (``port_width``) is Vitis HLS's automatic widening (512 bits); the
      offsets and port names are the standard Vitis HLS layout, not read from a real kernel.xml.
    * faast: FaaST's ``alveo_hls4ml``: ``in`` 0x10 and ``out`` 0x1C, both ``ap_uint<512>`` on
      one 512-bit ``M_AXI_GMEM``, ``ap_ctrl_hs`` (its shipped kernel.xml).
    """
    if abi == "krnl_rtl":
        ports = (PortSpec("s_axi_control", "slave", 0x10000, 32), PortSpec("m_axi_gmem", "master", _MAX64, 32))
        args = (
            ArgSpec(0, "fifo_in", 1, "m_axi_gmem", 8, 0x10, "int*"),
            ArgSpec(1, "fifo_out", 1, "m_axi_gmem", 8, 0x1C, "int*"),
            ArgSpec(2, "length_r_in", 0, "s_axi_control", 4, 0x28, "uint"),
            ArgSpec(3, "length_r_out", 0, "s_axi_control", 4, 0x30, "uint"),
        )
        return KernelSpec(
            abi, "krnl_rtl", "ip_c", "fastmachinelearning.org:hls4ml:krnl_rtl:1.0", "ap_ctrl_hs", ports, args, 1
        )
    if abi == "kernel_wrapper":
        ports = (
            PortSpec("M_AXI_GMEM0", "master", _MAX64, port_width),
            PortSpec("M_AXI_GMEM1", "master", _MAX64, port_width),
            PortSpec("S_AXI_CONTROL", "slave", 0x1000, 32),
        )
        t_in, t_out = f"{element_in} const *", f"{element_out}*"
        if legacy:
            args = (
                ArgSpec(0, "in", 1, "M_AXI_GMEM0", 8, 0x10, t_in),
                ArgSpec(1, "out", 1, "M_AXI_GMEM1", 8, 0x1C, t_out),
            )
        else:
            args = (
                ArgSpec(0, "batchsize", 0, "S_AXI_CONTROL", 4, 0x10, "unsigned int"),
                ArgSpec(1, "in", 1, "M_AXI_GMEM0", 8, 0x18, t_in),
                ArgSpec(2, "out", 1, "M_AXI_GMEM1", 8, 0x24, t_out),
            )
        return KernelSpec(
            abi, "kernel_wrapper", "c", "xilinx.com:hls:kernel_wrapper:1.0", "ap_ctrl_chain", ports, args, 1
        )
    if abi == "faast":
        ports = (PortSpec("M_AXI_GMEM", "master", _MAX64, 512), PortSpec("S_AXI_CONTROL", "slave", 0x1000, 32))
        args = (
            ArgSpec(0, "in", 1, "M_AXI_GMEM", 8, 0x10, "ap_uint<512> const *"),
            ArgSpec(1, "out", 1, "M_AXI_GMEM", 8, 0x1C, "ap_uint<512>*"),
        )
        return KernelSpec(abi, "alveo_hls4ml", "c", "xilinx.com:hls:alveo_hls4ml:1.0", "ap_ctrl_hs", ports, args, 0)
    raise ValueError(f"unknown kernel ABI '{abi}' (one of {', '.join(KERNEL_ABIS)})")


_FIXED_TYPE = re.compile(r"^(ap_u?fixed|ap_u?int)\s*<\s*([^<>]*)>$")


def hls_type_string(ctype: str) -> str:
    """A C++ element type as the Vitis HLS front end prints it in kernel.xml:
    ``ap_fixed<16,6>`` -> ``ap_fixed<16, 6>`` (clang's ", " between template arguments)."""
    text = " ".join(ctype.split())
    m = _FIXED_TYPE.match(text)
    if m is None:
        return text
    params = [p.strip() for p in m.group(2).split(",")]
    return f"{m.group(1)}<{', '.join(params)}>"


def project_element_types(project_dir: str | os.PathLike) -> tuple[str, str, bool]:
    """(input element, output element, HW_Quant) of a VitisAccelerator project, for the
    kernel_wrapper's argument type strings: the ``input_t``/``result_t`` of the top function
    resolved through firmware/defines.h, or ``float`` for both when AcceleratorConfig.HW_Quant."""
    from fpgaserve.backends.hls4ml.project import Hls4mlProject

    from .kernels import hw_quant, resolve_typedef

    project = Hls4mlProject.load(project_dir)
    if hw_quant(project):
        return "float", "float", True
    return (
        hls_type_string(resolve_typedef(project, project.input.ctype)),
        hls_type_string(resolve_typedef(project, project.output.ctype)),
        False,
    )


# ---------------------------------------------------------------------------------- writer
def _fixed(text: str, size: int) -> bytes:
    raw = text.encode()
    if len(raw) >= size:
        raise ValueError(f"'{text}' does not fit a {size}-byte field (NUL-terminated)")
    return raw + b"\0" * (size - len(raw))


def _align8(n: int) -> int:
    return (n + 7) & ~7


def _xml_attr(value: object) -> str:
    """An XML attribute value as v++ writes it: ``&``, ``<`` and ``"`` escaped, ``>`` left alone
    (``type="ap_fixed&lt;16, 6>*"``)."""
    return '"' + str(value).replace("&", "&amp;").replace("<", "&lt;").replace('"', "&quot;") + '"'


def _expand_tag(tag: str) -> list[str]:
    """``HBM[0:3]`` -> HBM[0] .. HBM[3]; ``HBM[4]``/``bank1`` unchanged (v++ sp= syntax)."""
    m = re.fullmatch(r"(\w+)\[(\d+):(\d+)\]", tag)
    if m is None:
        return [tag]
    lo, hi = int(m.group(2)), int(m.group(3))
    return [f"{m.group(1)}[{i}]" for i in range(lo, hi + 1)]


def _resolve_tag(tag: str, tags: list[str]) -> int:
    """MEM_TOPOLOGY index of a connectivity target; ``DDR[n]`` also names ``bank<n>`` (v++ alias)."""
    if tag in tags:
        return tags.index(tag)
    m = re.fullmatch(r"DDR\[(\d+)\]", tag)
    if m and f"bank{m.group(1)}" in tags:
        return tags.index(f"bank{m.group(1)}")
    m = re.fullmatch(r"bank(\d+)", tag)
    if m and f"DDR[{m.group(1)}]" in tags:
        return tags.index(f"DDR[{m.group(1)}]")
    raise ValueError(f"memory '{tag}' is not one of the platform's banks {tags}")


def _group_tag(members: list[int]) -> str:
    """xclbinutil's ``MBG[0:3]`` / ``MBG[0,2:4]`` naming of a memory bank group (15 chars max)."""
    runs: list[list[int]] = []
    for m in members:
        if runs and m == runs[-1][1] + 1:
            runs[-1][1] = m
        else:
            runs.append([m, m])
    parts = [str(a) if a == b else f"{a}:{b}" for a, b in runs]
    return f"MBG[{','.join(parts)}]"[:15]


def _cu_connections(spec: KernelSpec, cu_banks: object, n_cus: int, tags: list[str]) -> list[dict[int, list[int]]]:
    """Per CU: {arg id: [MEM_TOPOLOGY indices]} from ``cu_banks``.

    Each entry of ``cu_banks`` is a tag (every memory argument of that CU on it, what
    ``sp=<cu>.m_axi_gmem:bank0`` does for a one-port kernel) or a {argument name: tag} mapping;
    a tag may be a range (``HBM[0:3]``).
    """
    if cu_banks is None:
        raise AssertionError("cu_banks resolved by the caller")
    entries = list(cu_banks)  # type: ignore[call-overload]
    if len(entries) != n_cus:
        raise ValueError(f"cu_banks has {len(entries)} entries for {n_cus} compute units")
    out = []
    for entry in entries:
        per_arg: dict[int, list[int]] = {}
        for arg in spec.memory_args:
            tag = entry.get(arg.name) if isinstance(entry, dict) else entry
            if tag is None:
                raise ValueError(f"cu_banks entry {entry!r} names no memory for argument '{arg.name}'")
            per_arg[arg.id] = [_resolve_tag(t, tags) for t in _expand_tag(str(tag))]
        out.append(per_arg)
    return out


def _default_cu_banks(abi: str, n_cus: int, banks: tuple[BankSpec, ...]) -> list[object]:
    """Where each flow puts its CUs when nothing is said: FaaST and hls4ml's VitisAccelerator
    give CU i its own bank i (DDR), or two disjoint HBM ranges (in, out) on HBM platforms
    (``channels // (2*N)`` pseudo-channels each, PR #991's accelerator_card.cfg); v++'s default
    for krnl_rtl (no connectivity file) puts every CU on the first bank."""
    ddr = [b.tag for b in banks if not b.tag.startswith(("HBM", "PLRAM"))]
    hbm = [b.tag for b in banks if b.tag.startswith("HBM")]
    if abi == "krnl_rtl":
        first = (ddr or hbm)[0]
        return [first] * n_cus
    if abi == "kernel_wrapper" and hbm and not ddr:
        c = max(1, len(hbm) // (2 * n_cus))
        return [
            {"in": f"HBM[{2 * i * c}:{(2 * i + 1) * c - 1}]", "out": f"HBM[{(2 * i + 1) * c}:{(2 * i + 2) * c - 1}]"}
            for i in range(n_cus)
        ]
    pool = ddr or hbm
    if n_cus > len(pool):
        raise ValueError(f"{n_cus} compute units but only {len(pool)} banks to give each its own")
    return [pool[i] for i in range(n_cus)]


def _mem_section(entries: list[tuple[int, int, int, int, str]]) -> bytes:
    out = struct.pack("<i4x", len(entries))
    for mem_type, used, size, base, tag in entries:
        out += _MEM_DATA.pack(mem_type, used, size // 1024, base, _fixed(tag, 16))
    return out


def _connectivity_section(links: list[tuple[int, int, int]]) -> bytes:
    return struct.pack("<i", len(links)) + b"".join(_CONNECTION.pack(*link) for link in links)


def _metadata_xml(
    stem: str, shell: ShellInfo, platform: str, spec: KernelSpec, cus: list[str], clock_mhz: int
) -> bytes:
    vendor = platform.split("_", 1)[0]
    board = platform.split("_")[1] if "_" in platform else ""
    lines = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f"<project name={_xml_attr(stem)}>",
        f"  <platform vendor={_xml_attr(vendor)} boardid={_xml_attr(board)} name={_xml_attr(platform)} "
        f'featureRomTime="{shell.rom_timestamp}">',
        '    <version major="1" minor="0"/>',
        "    <description/>",
        f'    <device name="fpga0" fpgaDevice={_xml_attr(shell.fpga_part)} addrWidth="0">',
        f'      <core name="OCL_REGION_0" target="bitstream" type="clc_region" clockFreq="0MHz" '
        f'numComputeUnits="{len(cus)}">',
        "        <kernelClocks>",
        f'          <clock port="DATA_CLK" frequency="{clock_mhz:.6f}MHz"/>',
        f'          <clock port="KERNEL_CLK" frequency="{KERNEL_CLK_MHZ:.6f}MHz"/>',
        "        </kernelClocks>",
        f"        <kernel name={_xml_attr(spec.name)} language={_xml_attr(spec.language)} vlnv={_xml_attr(spec.vlnv)} "
        'preferredWorkGroupSizeMultiple="0" workGroupSize="1" debug="false" interrupt="true" '
        f"hwControlProtocol={_xml_attr(spec.hw_control_protocol)}>",
        f'          <module name="{spec.name}"/>',
    ]
    for p in spec.ports:
        lines.append(
            f'          <port name={_xml_attr(p.name)} mode={_xml_attr(p.mode)} range="0x{p.range:X}" '
            f'dataWidth="{p.data_width}" portType="addressable" base="0x0"/>'
        )
    for a in spec.args:
        lines.append(
            f'          <arg name={_xml_attr(a.name)} addressQualifier="{a.address_qualifier}" id="{a.id}" '
            f'port={_xml_attr(a.port)} size="0x{a.size:X}" offset="0x{a.offset:X}" hostOffset="0x0" '
            f'hostSize="0x{a.size:X}" type={_xml_attr(a.type)}/>'
        )
    lines += [
        '          <compileWorkGroupSize x="1" y="1" z="1"/>',
        '          <maxWorkGroupSize x="1" y="1" z="1"/>',
        "          <string_table/>",
    ]
    slave = next(p for p in spec.ports if p.mode == "slave")
    for i, cu in enumerate(cus):
        lines += [
            f"          <instance name={_xml_attr(cu)}>",
            f'            <addrRemap base="0x{CU_BASE + i * CU_STRIDE:08X}" range="0x{CU_STRIDE:X}" '
            f"port={_xml_attr(slave.name)}/>",
            "          </instance>",
        ]
    lines.append("        </kernel>")
    for cu in cus:
        for p in spec.ports:
            lines.append(
                f'        <connection srcType="core" srcInst="OCL_REGION_0" srcPort={_xml_attr(p.name)} '
                f'dstType="kernel" dstInst={_xml_attr(cu)} dstPort={_xml_attr(p.name)}/>'
            )
    lines += ["      </core>", "    </device>", "  </platform>", "</project>", ""]
    return "\n".join(lines).encode()


def _build_metadata(
    stem: str, shell: ShellInfo, platform: str, spec: KernelSpec, cus: list[str], clock_mhz: int, cfg: list[str]
) -> bytes:
    now = time.strftime("%a %b %d %H:%M:%S %Y")
    kernel = {
        "name": spec.name,
        "ports": [
            {
                "name": p.name,
                "mode": p.mode,
                "range": f"0x{p.range:X}",
                "data_width": str(p.data_width),
                "port_type": "addressable",
                "base": "0x0",
            }
            for p in spec.ports
        ],
        "arguments": [
            {
                "name": a.name,
                "address_qualifier": str(a.address_qualifier),
                "id": str(a.id),
                "port": a.port,
                "size": f"0x{a.size:X}",
                "offset": f"0x{a.offset:X}",
                "host_offset": "0x0",
                "host_size": f"0x{a.size:X}",
                "type": a.type,
            }
            for a in spec.args
        ],
        "instances": [{"name": cu} for cu in cus],
    }
    meta = {
        "build_metadata": {
            "dsa": {
                "vendor": platform.split("_", 1)[0],
                "board_id": platform.split("_")[1] if "_" in platform else "",
                "name": platform,
                "version_major": "1",
                "version_minor": "0",
                "description": "",
                "generated_by": {"name": "Vivado", "version": VITIS_VERSION},
                "board": {"name": "", "vendor": "xilinx.com", "part": shell.fpga_part},
                "feature_roms": [{"time_epoch": str(shell.rom_timestamp)}],
            },
            "xclbin": {
                "generated_by": {
                    "name": "v++",
                    "version": VITIS_VERSION,
                    "cl": "3671529",
                    "time_stamp": now,
                    "options": (
                        f"v++ --target hw --link --platform {platform} --kernel_frequency 0:{clock_mhz} "
                        + " ".join(f"--connectivity.{c}" for c in cfg)
                        + f" -o {stem}.xclbin  # SIMULATED: written by fpgaserve tests/fpga_sim, no bitstream"
                    ),
                },
                "user_regions": [
                    {
                        "name": "OCL_REGION_0",
                        "type": "clc_region",
                        "instance_path": "WRAPPER_INST/level1/ulp",
                        "base_address": "",
                        "kernels": [kernel],
                    }
                ],
                "packaged_by": {
                    "name": "xclbinutil",
                    "version": ".".join(str(v) for v in PACKAGER_VERSION),
                    "hash": "simulated",
                    "time_stamp": now,
                },
            },
        }
    }
    return json.dumps(meta, indent=4).encode()


def _clock_section(clock_mhz: int) -> bytes:
    clocks = [(clock_mhz, CT_DATA, "DATA_CLK"), (KERNEL_CLK_MHZ, CT_KERNEL, "KERNEL_CLK")]
    return struct.pack("<h", len(clocks)) + b"".join(_CLOCK.pack(f, t, _fixed(n, 128)) for f, t, n in clocks)


def write_xclbin(
    path: str | os.PathLike,
    *,
    kernel_abi: str = "krnl_rtl",
    cus: int | list[str] | tuple[str, ...] | None = None,
    platform: str = DEFAULT_PLATFORM,
    interface_uuid: str | None = None,
    banks: tuple[str, ...] | list[str] | None = None,
    cu_banks: list[object] | tuple[object, ...] | None = None,
    clock_mhz: int = DEFAULT_CLOCK_MHZ,
    xclbin_uuid: str | None = None,
    project: str | os.PathLike | None = None,
    element_in: str | None = None,
    element_out: str | None = None,
    legacy: bool = False,
    group_sections: bool = True,
    mode: int = XCLBIN_PR,
) -> str:
    """Write an xclbin for one of the kernel ABIs (``krnl_rtl``, ``kernel_wrapper``, ``faast``) and
    return its uuid (32 lower-case hex digits, the form PYNQ reports; XRT's is the dashed form).

    * ``cus``: how many compute units, or their names (default: 1; FaaST's 4). Names follow each
      flow (``krnl_rtl_1``, ``kernel_wrapper_1``, ``alveo_hls4ml_0``).
    * ``platform``: the VBNV written into the header (``m_platformVBNV``); ``interface_uuid``
      (32 hex, default the one the simulator's cards with that shell report, empty on flat
      shells) goes to ``m_interface_uuid`` (header+32).
    * ``banks``: the MEM_TOPOLOGY tags (default: the platform's, see :func:`platform_banks`);
      ``cu_banks``: per CU a tag or {argument: tag} (see :func:`_cu_connections`); a range
      ``HBM[0:3]`` connects the argument to several banks, and the group sections then carry a
      memory bank group ``MBG[0:3]`` for it, as xclbinutil creates them.
    * ``project``: hls4ml project folder whose ``input_t``/``result_t`` (or HW_Quant float) give
      the kernel_wrapper's argument types; or pass ``element_in``/``element_out`` (HLS spelling).
    * ``legacy``: the 2-argument ``kernel_wrapper(in, out)`` of PR #991 before July 2025.
    * ``group_sections``: add GROUP_TOPOLOGY/GROUP_CONNECTIVITY (v++ 2020.2 and later do).
    * ``mode``: ``m_mode`` (XCLBIN_PR for hardware xclbins on Alveo's partial-reconfiguration shells).
    """
    if kernel_abi == "kernel_wrapper" and (element_in is None or element_out is None):
        if project is not None:
            p_in, p_out, _ = project_element_types(project)
            element_in = element_in or p_in
            element_out = element_out or p_out
        else:
            element_in = element_in or "float"
            element_out = element_out or "float"
    spec = kernel_spec(kernel_abi, element_in=element_in or "float", element_out=element_out or "float", legacy=legacy)
    if cus is None:
        cus = 4 if kernel_abi == "faast" else 1
    cu_names = spec.cu_names(cus) if isinstance(cus, int) else list(cus)
    if not cu_names:
        raise ValueError("at least one compute unit")
    shell = shell_info(shell_of(platform))
    if banks is None:
        bank_specs = shell.banks
    else:
        by_tag = {b.tag: b for b in platform_banks(shell_of(platform))}
        bank_specs = tuple(by_tag.get(t) or _bank_for_tag(t, i) for i, t in enumerate(banks))
    tags = [b.tag for b in bank_specs]
    if cu_banks is None:
        cu_banks = _default_cu_banks(kernel_abi, len(cu_names), bank_specs)
    conns = _cu_connections(spec, cu_banks, len(cu_names), tags)
    if interface_uuid is None:
        interface_uuid = shell.interface_uuid
    iface = bytes.fromhex(interface_uuid.replace("-", "")) if interface_uuid else b"\0" * 16
    if len(iface) != 16:
        raise ValueError(f"interface_uuid must be 16 bytes of hex, got {interface_uuid!r}")
    uid = uuidlib.UUID(xclbin_uuid) if xclbin_uuid else uuidlib.uuid4()
    stem = Path(path).stem

    used = sorted({m for per_arg in conns for mems in per_arg.values() for m in mems})
    mem_entries = [(b.mem_type, 1 if i in used else 0, b.size, b.base, b.tag) for i, b in enumerate(bank_specs)]
    links = []
    for ip_index, per_arg in enumerate(conns):
        for arg_id, mems in per_arg.items():
            links.extend((arg_id, ip_index, m) for m in mems)
    # xclbinutil's bank grouping: an argument on several address-contiguous used banks of one
    # kind gets one MBG entry appended to a copy of the topology (same indices before it)
    group_entries = list(mem_entries)
    group_index: dict[tuple[int, ...], int] = {}
    group_links = []
    for ip_index, per_arg in enumerate(conns):
        for arg_id, mems in per_arg.items():
            if len(mems) > 1 and _contiguous(bank_specs, mems):
                key = tuple(mems)
                if key not in group_index:
                    first = bank_specs[mems[0]]
                    group_index[key] = len(group_entries)
                    total = sum(bank_specs[m].size for m in mems)
                    group_entries.append((first.mem_type, 1, total, first.base, _group_tag(list(mems))))
                group_links.append((arg_id, ip_index, group_index[key]))
            else:
                group_links.extend((arg_id, ip_index, m) for m in mems)

    ip_layout = struct.pack("<i4x", len(cu_names))
    control = CONTROL_PROTOCOLS[spec.hw_control_protocol]
    for i, cu in enumerate(cu_names):
        # properties: interrupt enabled (bit 0), interrupt id (bits 1-7), control protocol (bits 8-15)
        properties = 1 | (i << 1) | (control << 8)
        ip_layout += _IP_DATA.pack(IP_KERNEL, properties, CU_BASE + i * CU_STRIDE, _fixed(f"{spec.name}:{cu}", 64))

    cfg = [f"nk={spec.name}:{len(cu_names)}:{'.'.join(cu_names)}"]
    for cu, per_arg in zip(cu_names, conns):
        for arg in spec.memory_args:
            cfg.append(f"sp={cu}.{arg.name}:{','.join(tags[m] for m in per_arg[arg.id])}")
    sections = [
        (BITSTREAM, stem, BITSTREAM_PLACEHOLDER),
        (MEM_TOPOLOGY, "mem_topology", _mem_section(mem_entries)),
        (IP_LAYOUT, "ip_layout", ip_layout),
        (CONNECTIVITY, "connectivity", _connectivity_section(links)),
        (CLOCK_FREQ_TOPOLOGY, "clock_freq_topology", _clock_section(clock_mhz)),
        (BUILD_METADATA, "build_metadata", _build_metadata(stem, shell, platform, spec, cu_names, clock_mhz, cfg)),
        (EMBEDDED_METADATA, "embedded_metadata", _metadata_xml(stem, shell, platform, spec, cu_names, clock_mhz)),
    ]
    if group_sections:
        sections += [
            (GROUP_TOPOLOGY, "group_topology", _mem_section(group_entries)),
            (GROUP_CONNECTIVITY, "group_connectivity", _connectivity_section(group_links)),
        ]

    table_end = SECTION_TABLE_OFFSET + SECTION_HEADER_SIZE * len(sections)
    offset = _align8(table_end)
    table = b""
    payload = b""
    for kind, name, data in sections:
        table += _SECTION.pack(kind, _fixed(name[:15], 16), offset, len(data))
        padded = data + b"\0" * (_align8(len(data)) - len(data))
        payload += padded
        offset += len(padded)
    now = int(time.time())
    mirror = {
        "schema_version": {"major": "1", "minor": "0", "patch": "0"},
        "header": {
            "Magic": "xclbin2",
            "SignatureLength": "ffffffff",
            "TimeStamp": str(now),
            "FeatureRomTimeStamp": str(shell.rom_timestamp if not interface_uuid else 0),
            "Version": ".".join(str(v) for v in PACKAGER_VERSION),
            "Mode": "XCLBIN_PR" if mode == XCLBIN_PR else str(mode),
            "InterfaceUUID": iface.hex(),
            "PlatformVBNV": platform,
            "XclBinUUID": uid.hex,
            "DebugBin": "",
        },
        "section_header": [{"Kind": str(k), "Name": n, "Size": hex(len(d))} for k, n, d in sections],
    }
    tail = MIRROR_START + json.dumps(mirror, separators=(",", ":")).encode() + MIRROR_END
    total = offset + len(tail)

    major, minor, patch = PACKAGER_VERSION
    header = _HEADER.pack(
        total,  # m_length: the whole file, mirror data included
        now,  # m_timeStamp
        0 if interface_uuid else shell.rom_timestamp,  # m_featureRomTimeStamp: 2RP shells skip the check
        patch,
        major,
        minor,
        mode,
        0,  # m_actionMask
        iface,
        _fixed(platform, 64),
        uid.bytes,
        b"\0" * 16,  # m_debug_bin
        len(sections),
    )
    top = MAGIC + struct.pack("<i", -1) + b"\xff" * 28 + b"\xff" * 256 + struct.pack("<Q", now) + header
    assert len(top) == SECTION_TABLE_OFFSET
    blob = top + table + b"\0" * (_align8(table_end) - table_end) + payload + tail
    assert len(blob) == total
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(blob)
    os.replace(tmp, path)
    return uid.hex


def _contiguous(banks: tuple[BankSpec, ...], mems: list[int]) -> bool:
    kinds = {banks[m].mem_type for m in mems}
    if len(kinds) != 1 or not kinds <= {MEM_DDR4, MEM_DRAM, MEM_HBM}:
        return False
    ordered = sorted(mems, key=lambda m: banks[m].base)
    return all(banks[a].base + banks[a].size == banks[b].base for a, b in itertools.pairwise(ordered))


def _bank_for_tag(tag: str, index: int) -> BankSpec:
    """A bank the platform table does not list: DDR-like tags at the DDR window, HBM by number."""
    m = re.fullmatch(r"HBM\[(\d+)\]", tag)
    if m:
        return BankSpec(tag, MEM_DRAM, int(m.group(1)) * (256 << 20), 256 << 20)
    m = re.fullmatch(r"(?:DDR\[(\d+)\]|bank(\d+))", tag)
    if m:
        n = int(m.group(1) or m.group(2))
        return BankSpec(tag, MEM_DDR4, _DDR_BASE + n * _DDR_STRIDE, 16 * _GIB)
    return BankSpec(tag, MEM_DRAM, 0x100_0000_0000 + index * (128 << 20), 128 << 20)


def write_hls4ml_xclbin(
    path: str | os.PathLike,
    *,
    kernel: str = "krnl_rtl",
    cu: str | list[str] | tuple[str, ...] = "krnl_rtl_1",
    platform: str = DEFAULT_PLATFORM,
    banks: tuple[str, ...] | list[str] | None = None,
    cu_banks: tuple[object, ...] | list[object] | None = None,
    clock_mhz: int = DEFAULT_CLOCK_MHZ,
    xclbin_uuid: str | None = None,
) -> str:
    """hls4ml's VivadoAccelerator ``krnl_rtl`` xclbin (the long-standing helper of the test suite).

    ``cu``: one CU name or several; CU i's one ``m_axi_gmem`` master (both buffers go through
    it) is connected to ``cu_banks[i]``, by default the i-th DDR/HBM bank of ``banks`` (the
    platform's, wrapping around). Only connected banks are marked used, as v++ does. Returns the
    uuid (32 hex digits).
    """
    if kernel != "krnl_rtl":
        raise ValueError("write_hls4ml_xclbin writes krnl_rtl; use write_xclbin(kernel_abi=...) for other kernels")
    names = [cu] if isinstance(cu, str) else list(cu)
    tags = list(banks) if banks is not None else [b.tag for b in platform_banks(shell_of(platform))]
    if cu_banks is None:
        pool = [t for t in tags if not t.startswith("PLRAM")] or tags
        cu_banks = [pool[i % len(pool)] for i in range(len(names))]
    return write_xclbin(
        path,
        kernel_abi="krnl_rtl",
        cus=names,
        platform=platform,
        banks=tags,
        cu_banks=list(cu_banks),
        clock_mhz=clock_mhz,
        xclbin_uuid=xclbin_uuid,
    )


# ---------------------------------------------------------------------------------- reader
class XclbinError(ValueError):
    """The file is not an xclbin XRT would accept (the message is XRT's where it has one)."""


@dataclass(frozen=True)
class MemBank:
    """One entry of the topology XRT uses (GROUP_TOPOLOGY when present): ``members`` are the
    MEM_TOPOLOGY indices it spans (itself for a plain bank, several for an ``MBG`` group)."""

    index: int
    tag: str
    mem_type: int
    used: bool
    base: int
    size: int
    members: tuple[int, ...]


@dataclass(frozen=True)
class XmlArg:
    id: int | None
    name: str
    address_qualifier: int
    port: str
    size: int
    offset: int
    type: str


@dataclass
class XmlKernel:
    name: str
    language: str
    vlnv: str
    hw_control_protocol: str
    ports: dict[str, tuple[str, int, int]]  # name -> (mode, range, data width)
    args: list[XmlArg]
    instances: list[str]

    @property
    def register_span(self) -> int:
        """The AXI-lite range of the first slave port (XRT's default 64 KiB without one)."""
        return next((r for mode, r, _ in self.ports.values() if mode == "slave"), 0x10000)


@dataclass
class ComputeUnit:
    """One CU as XRT sees it: ``index`` is XRT's CU index (sorted by interrupt id, or by base
    address when every id is 0), ``ip_index`` its IP_LAYOUT entry; ``arg_mems`` maps argument id
    -> topology indices (group topology), ``arg_banks`` -> the physical MEM_TOPOLOGY banks."""

    index: int
    ip_index: int
    kernel: str
    name: str
    base: int
    irq: int
    control: int
    arg_mems: dict[int, list[int]] = field(default_factory=dict)
    arg_banks: dict[int, set[int]] = field(default_factory=dict)


@dataclass
class Xclbin:
    path: str | None
    data: bytes
    uuid: str  # 32 lower-case hex digits
    vbnv: str
    interface_uuid: str  # 32 hex or ""
    feature_rom_timestamp: int
    mode: int
    sections: dict[int, list[bytes]]
    mems: list[MemBank]  # MEM_TOPOLOGY (physical banks)
    groups: list[MemBank]  # GROUP_TOPOLOGY, or MEM_TOPOLOGY again
    kernels: dict[str, XmlKernel]
    cus: list[ComputeUnit]
    clocks: list[tuple[str, int, int]]  # (name, CLOCK_TYPE, MHz)

    @property
    def data_clock_mhz(self) -> int:
        """Frequency of the clock kernels' ``ap_clk`` runs on (clock id 0, type DATA)."""
        for name, kind, mhz in self.clocks:
            if kind == CT_DATA or name == "DATA_CLK":
                return mhz
        return self.clocks[0][2] if self.clocks else DEFAULT_CLOCK_MHZ

    def section(self, kind: int) -> bytes | None:
        found = self.sections.get(kind)
        return found[0] if found else None


def read_xclbin(source: str | os.PathLike | bytes) -> Xclbin:
    """Parse an xclbin as XRT does (the simulator's own reader; fpgaserve has its own).

    Raises :class:`XclbinError` with XRT's message for what XRT refuses: a missing magic
    ("Invalid xclbin"), a file shorter than its ``m_length``, sections outside the file.
    """
    path = None
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
    else:
        path = str(source)
        try:
            data = Path(path).read_bytes()
        except OSError:
            raise XclbinError(f"Failed to open file '{path}' for reading") from None
    if len(data) < SECTION_TABLE_OFFSET + SECTION_HEADER_SIZE or data[:7] != MAGIC[:7]:
        raise XclbinError("Invalid xclbin")
    (length, _ts, rom_ts, _patch, _major, _minor, mode, _mask, iface, vbnv, uid, _debug, n_sections) = (
        _HEADER.unpack_from(data, AXLF_HEADER_OFFSET)
    )
    if length != len(data):
        raise XclbinError("m_length does not match buffer size")
    if n_sections > 10000:
        raise XclbinError("Invalid xclbin")
    sections: dict[int, list[bytes]] = {}
    for i in range(n_sections):
        kind, _name, offset, size = _SECTION.unpack_from(data, SECTION_TABLE_OFFSET + i * SECTION_HEADER_SIZE)
        if offset + size > len(data):
            raise XclbinError("Invalid xclbin")
        sections.setdefault(kind, []).append(data[offset : offset + size])

    def first(kind: int) -> bytes | None:
        return sections[kind][0] if kind in sections else None

    mems = _read_mems(first(MEM_TOPOLOGY))
    group_raw = first(GROUP_TOPOLOGY)
    groups = _read_mems(group_raw) if group_raw is not None else list(mems)
    groups = [_with_members(g, mems) for g in groups]
    mems = [_with_members(m, mems) for m in mems]
    xml = first(EMBEDDED_METADATA)
    kernels = _read_kernels(xml) if xml is not None else {}
    cus = _read_cus(first(IP_LAYOUT))
    links = _read_links(first(CONNECTIVITY))
    group_links = _read_links(first(GROUP_CONNECTIVITY)) if GROUP_CONNECTIVITY in sections else links
    by_ip = {cu.ip_index: cu for cu in cus}
    for arg_id, ip, mem in group_links:
        if ip in by_ip:
            by_ip[ip].arg_mems.setdefault(arg_id, []).append(mem)
    for arg_id, ip, mem in links:
        if ip in by_ip:
            by_ip[ip].arg_banks.setdefault(arg_id, set()).add(mem)
    clocks = []
    raw = first(CLOCK_FREQ_TOPOLOGY)
    if raw:
        (count,) = struct.unpack_from("<h", raw, 0)
        for i in range(count):
            mhz, kind, name = _CLOCK.unpack_from(raw, 2 + i * _CLOCK.size)
            clocks.append((name.split(b"\0", 1)[0].decode(), kind, mhz))
    return Xclbin(
        path=path,
        data=data,
        uuid=uid.hex(),
        vbnv=vbnv.split(b"\0", 1)[0].decode(errors="replace"),
        interface_uuid="" if iface == b"\0" * 16 else iface.hex(),
        feature_rom_timestamp=rom_ts,
        mode=mode,
        sections=sections,
        mems=mems,
        groups=groups,
        kernels=kernels,
        cus=cus,
        clocks=clocks,
    )


def _read_mems(raw: bytes | None) -> list[MemBank]:
    if not raw:
        return []
    (count,) = struct.unpack_from("<i", raw, 0)
    if len(raw) != 8 + count * _MEM_DATA.size:
        raise XclbinError("Invalid xclbin: mem_topology section size")
    out = []
    for i in range(count):
        mem_type, used, size_kb, base, tag = _MEM_DATA.unpack_from(raw, 8 + i * _MEM_DATA.size)
        out.append(MemBank(i, tag.split(b"\0", 1)[0].decode(), mem_type, bool(used), base, size_kb * 1024, (i,)))
    return out


def _with_members(bank: MemBank, phys: list[MemBank]) -> MemBank:
    """A group entry spans the physical banks inside its address range (same type)."""
    if bank.index < len(phys) and phys[bank.index].tag == bank.tag:
        return bank
    members = tuple(
        m.index
        for m in phys
        if m.mem_type == bank.mem_type and bank.base <= m.base and m.base + m.size <= bank.base + bank.size
    )
    return MemBank(bank.index, bank.tag, bank.mem_type, bank.used, bank.base, bank.size, members or (bank.index,))


def _read_links(raw: bytes | None) -> list[tuple[int, int, int]]:
    if not raw:
        return []
    (count,) = struct.unpack_from("<i", raw, 0)
    if len(raw) != 4 + count * _CONNECTION.size:
        raise XclbinError("Invalid xclbin: connectivity section size")
    return [_CONNECTION.unpack_from(raw, 4 + i * _CONNECTION.size) for i in range(count)]


def _read_cus(raw: bytes | None) -> list[ComputeUnit]:
    if not raw:
        return []
    (count,) = struct.unpack_from("<i", raw, 0)
    cus = []
    for i in range(count):
        ip_type, props, base, name = _IP_DATA.unpack_from(raw, 8 + i * _IP_DATA.size)
        if ip_type != IP_KERNEL:
            continue
        full = name.split(b"\0", 1)[0].decode()
        kernel, _, inst = full.partition(":")
        cus.append(ComputeUnit(-1, i, kernel, inst, base, (props & 0xFE) >> 1, (props & 0xFF00) >> 8))
    # xclbin_parser.cpp get_cus: by interrupt id unless every id is 0 ("legacy": by base address)
    if all(cu.irq == 0 for cu in cus):
        cus.sort(key=lambda cu: cu.base)
    else:
        cus.sort(key=lambda cu: (cu.base == _MAX64, cu.irq))
    for i, cu in enumerate(cus):
        cu.index = i
    return cus


def _int(text: str | None, default: int = 0) -> int:
    if text is None or text == "":
        return default
    return int(text, 0)


def _read_kernels(raw: bytes) -> dict[str, XmlKernel]:
    try:
        root = ET.fromstring(raw.rstrip(b"\0"))
    except ET.ParseError as e:
        raise XclbinError(f"Invalid xclbin: EMBEDDED_METADATA is not XML ({e})") from None
    out = {}
    for k in root.findall("platform/device/core/kernel"):
        ports = {
            p.get("name", ""): (p.get("mode", ""), _int(p.get("range"), 0x10000), _int(p.get("dataWidth"), 32))
            for p in k.findall("port")
        }
        args = []
        for a in k.findall("arg"):
            ident = a.get("id", "")
            args.append(
                XmlArg(
                    id=int(ident) if ident.strip() else None,
                    name=a.get("name", ""),
                    address_qualifier=_int(a.get("addressQualifier")),
                    port=a.get("port", "no-port"),
                    size=_int(a.get("size")),
                    offset=_int(a.get("offset")),
                    type=a.get("type", "no-type"),
                )
            )
        args.sort(key=lambda a: (a.id is None, a.id or 0))
        out[k.get("name", "")] = XmlKernel(
            name=k.get("name", ""),
            language=k.get("language", ""),
            vlnv=k.get("vlnv", ""),
            hw_control_protocol=k.get("hwControlProtocol", "ap_ctrl_hs"),
            ports=ports,
            args=args,
            instances=[i.get("name", "") for i in k.findall("instance")],
        )
    return out
