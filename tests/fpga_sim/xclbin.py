"""Write an xclbin (XRT's ``axlf`` container) for hls4ml's VivadoAccelerator Alveo kernel.

The simulated card needs an xclbin to "program": PYNQ reads everything it knows about a
design (``ip_dict``, ``mem_dict``, ``clock_dict``, the compute-unit index) from the xclbin's
metadata sections, never from the bitstream. This module writes those sections the way
``v++ --link`` lays them out for the ``krnl_rtl`` RTL kernel that hls4ml packages
(``templates/vivado_accelerator/alveo``), with no BITSTREAM section: the file can only be
loaded by the simulator, never by a real card.

Layout (XRT ``xclbin.h``, all little-endian)::

    axlf            magic "xclbin2\\0", signature length -1 + 28 x 0xFF, 256 x 0xFF key block,
                    u64 unique id, then axlf_header at byte 304
    axlf_header     152 bytes: length, timestamps, version, mode, ROM uuid, platform VBNV,
                    xclbin uuid (byte 112), debug name, number of sections (byte 144)
    section headers 40 bytes each from byte 456: kind, name[16], offset, size
    payloads        8-byte aligned

Payload structs: mem_topology (i32 count, 40-byte entries from offset 8), connectivity (i32
count, 12-byte entries from offset 4), ip_layout (i32 count, 80-byte entries from offset 8),
clock_freq_topology (u16 count, 136-byte entries from offset 2).
"""

from __future__ import annotations

import os
import struct
import time
import uuid as uuidlib
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import quoteattr

# section kinds (xclbin.h AXLF_SECTION_KIND)
EMBEDDED_METADATA = 2
MEM_TOPOLOGY = 6
CONNECTIVITY = 7
IP_LAYOUT = 8
CLOCK_FREQ_TOPOLOGY = 11

MEM_DDR4 = 1
MEM_HBM = 6
MEM_DRAM = 2
IP_KERNEL = 1
AP_CTRL_HS = 0
CT_DATA = 1
CT_KERNEL = 2

DEFAULT_PLATFORM = "xilinx_u250_gen3x16_xdma_shell_4_1"
# VLNV the hls4ml alveo tcl script archives the kernel under (ipx::archive_core ... fastmachinelearning.org_hls4ml_krnl_rtl_1.0.zip)
KRNL_RTL_VLNV = "fastmachinelearning.org:hls4ml:krnl_rtl:1.0"

# The U250 gen3x16 shell maps its four 16 GiB DDR4 banks at 0x40_0000_0000 + i * 0x10_0000_0000.
DDR_BASE = 0x40_0000_0000
DDR_STRIDE = 0x10_0000_0000
DDR_SIZE = 16 << 30
HBM_BASE = 0x0
HBM_SIZE = 256 << 20
# v++ places the first CU's control interface here on the xdma shells
CU_BASE = 0x180_0000
CU_STRIDE = 0x1_0000
CU_RANGE = 0x1_0000

AXLF_HEADER_OFFSET = 304
AXLF_HEADER_SIZE = 152
SECTION_HEADER_SIZE = 40


@dataclass(frozen=True)
class KernelArg:
    name: str
    address_qualifier: int  # 0 scalar, 1 global pointer
    offset: int
    size: int  # bytes the register holds
    host_size: int
    ctype: str
    port: str


# The control register map of krnl_rtl_control_s_axi.v: CTRL 0x00, GIE/IER/ISR, then the args.
KRNL_RTL_ARGS = (
    KernelArg("fifo_in", 1, 0x10, 8, 8, "int*", "M_AXI_GMEM"),
    KernelArg("fifo_out", 1, 0x1C, 8, 8, "int*", "M_AXI_GMEM"),
    KernelArg("length_r_in", 0, 0x28, 4, 4, "uint", "S_AXI_CONTROL"),
    KernelArg("length_r_out", 0, 0x30, 4, 4, "uint", "S_AXI_CONTROL"),
)


def bank_layout(tag: str, index: int) -> tuple[int, int, int]:
    """(mem type, base address, size in bytes) for a bank tag such as DDR[1] or HBM[3]."""
    kind, _, rest = tag.partition("[")
    number = int(rest.rstrip("]")) if rest else index
    if kind == "HBM":
        return MEM_HBM, HBM_BASE + number * HBM_SIZE, HBM_SIZE
    if kind == "DDR":
        return MEM_DDR4, DDR_BASE + number * DDR_STRIDE, DDR_SIZE
    # PLRAM/host banks are not used by this kernel; give them a distinct, small window
    return MEM_DRAM, 0x100_0000_0000 + index * (128 << 20), 128 << 20


def _metadata_xml(platform: str, kernel: str, vlnv: str, cus: list[str], clock_mhz: int) -> bytes:
    vendor, _, rest = platform.partition("_")
    args = "\n".join(
        f'          <arg name={quoteattr(a.name)} addressQualifier="{a.address_qualifier}" id="{i}" '
        f'port={quoteattr(a.port)} size="0x{a.size:X}" offset="0x{a.offset:X}" hostOffset="0x0" '
        f'hostSize="0x{a.host_size:X}" type={quoteattr(a.ctype)}/>'
        for i, a in enumerate(KRNL_RTL_ARGS)
    )
    instances = "\n".join(
        f"          <instance name={quoteattr(cu)}>\n"
        f'            <addrRemap base="0x{CU_BASE + i * CU_STRIDE:X}" range="0x{CU_RANGE:X}" port="S_AXI_CONTROL"/>\n'
        f"          </instance>"
        for i, cu in enumerate(cus)
    )
    xml = f"""<?xml version="1.0" encoding="UTF-8"?>
<project name={quoteattr(kernel)}>
  <platform vendor={quoteattr(vendor)} boardid={quoteattr(rest.split("_")[0] if rest else "")} name={quoteattr(platform)} featureRomTime="0">
    <version major="1" minor="0"/>
    <description>written by fpgaserve's test suite for the simulated card; no bitstream</description>
    <device name="fpga0" fpgaDevice="virtexuplus:xcu250:figd2104:-2L:e" addrWidth="0">
      <systemClocks>
        <clock port="DATA_CLK" frequency="{clock_mhz}MHz" name="clkwiz_kernel_clk_out1"/>
      </systemClocks>
      <core name="OCL_REGION_0" target="hw" type="clc_region" clockFreq="{clock_mhz}MHz" numComputeUnits="{len(cus)}">
        <kernel name={quoteattr(kernel)} language="ip_c" vlnv={quoteattr(vlnv)} preferredWorkGroupSizeMultiple="0" workGroupSize="1" interrupt="true" hwControlProtocol="ap_ctrl_hs">
          <port name="S_AXI_CONTROL" mode="slave" range="0x{CU_RANGE:X}" dataWidth="32" portType="addressable" base="0x0"/>
          <port name="M_AXI_GMEM" mode="master" range="0xFFFFFFFFFFFFFFFF" dataWidth="32" portType="addressable" base="0x0"/>
{args}
{instances}
        </kernel>
      </core>
    </device>
  </platform>
</project>
"""
    return xml.encode()


def _fixed_str(text: str, size: int) -> bytes:
    raw = text.encode()
    if len(raw) >= size:
        raise ValueError(f"'{text}' does not fit a {size}-byte field")
    return raw + b"\0" * (size - len(raw))


def _mem_topology(banks: list[str], used: set[int]) -> bytes:
    out = struct.pack("<i4x", len(banks))
    for i, tag in enumerate(banks):
        mtype, base, size = bank_layout(tag, i)
        # m_size is in KiB (xclbin.h), m_base_address in bytes
        out += struct.pack("<BB6xqq16s", mtype, 1 if i in used else 0, size // 1024, base, _fixed_str(tag, 16))
    return out


def _connectivity(links: list[tuple[int, int, int]]) -> bytes:
    out = struct.pack("<i", len(links))
    for arg_index, ip_index, mem_index in links:
        out += struct.pack("<iii", arg_index, ip_index, mem_index)
    return out


def _ip_layout(kernel: str, cus: list[str]) -> bytes:
    out = struct.pack("<i4x", len(cus))
    for i, cu in enumerate(cus):
        # properties: bit 0 interrupt enabled, bits 8-15 the control protocol
        properties = 1 | (AP_CTRL_HS << 8)
        out += struct.pack("<IIQ64s", IP_KERNEL, properties, CU_BASE + i * CU_STRIDE, _fixed_str(f"{kernel}:{cu}", 64))
    return out


def _clock_topology(clock_mhz: int) -> bytes:
    clocks = [("DATA_CLK", clock_mhz, CT_DATA), ("KERNEL_CLK", 500, CT_KERNEL)]
    out = struct.pack("<H", len(clocks))
    for name, freq, ctype in clocks:
        out += struct.pack("<hb5x128s", freq, ctype, _fixed_str(name, 128))
    return out


def write_hls4ml_xclbin(
    path,
    *,
    kernel: str = "krnl_rtl",
    cu: str | list[str] | tuple[str, ...] = "krnl_rtl_1",
    platform: str = DEFAULT_PLATFORM,
    banks: tuple[str, ...] = ("DDR[0]", "DDR[1]", "DDR[2]", "DDR[3]"),
    cu_banks: tuple[str, ...] | None = None,
    clock_mhz: int = 300,
    vlnv: str = KRNL_RTL_VLNV,
    xclbin_uuid: str | None = None,
) -> str:
    """Write the xclbin to ``path`` and return its uuid (32 hex digits).

    ``cu`` names one compute unit or several; CU i's single ``m_axi_gmem`` master (both
    buffers go through it, so they share a bank) is connected to ``cu_banks[i]``, by default
    the i-th bank. Only connected banks are marked used, as v++ does, so a one-CU design has
    exactly one used bank and PYNQ's ``default_memory`` works.
    """
    cus = [cu] if isinstance(cu, str) else list(cu)
    if not cus:
        raise ValueError("at least one compute unit")
    banks = list(banks)
    if cu_banks is None:
        cu_banks = tuple(banks[i % len(banks)] for i in range(len(cus)))
    if len(cu_banks) != len(cus):
        raise ValueError("cu_banks needs one bank per compute unit")
    links = []
    used = set()
    for ip_index, bank in enumerate(cu_banks):
        if bank not in banks:
            raise ValueError(f"bank {bank} is not in {banks}")
        mem_index = banks.index(bank)
        used.add(mem_index)
        for arg_index, arg in enumerate(KRNL_RTL_ARGS):
            if arg.address_qualifier == 1:
                links.append((arg_index, ip_index, mem_index))

    uid = uuidlib.UUID(xclbin_uuid) if xclbin_uuid else uuidlib.uuid4()
    sections = [
        (EMBEDDED_METADATA, "", _metadata_xml(platform, kernel, vlnv, cus, clock_mhz)),
        (MEM_TOPOLOGY, "", _mem_topology(banks, used)),
        (CONNECTIVITY, "", _connectivity(links)),
        (IP_LAYOUT, "", _ip_layout(kernel, cus)),
        (CLOCK_FREQ_TOPOLOGY, "", _clock_topology(clock_mhz)),
    ]

    headers_end = AXLF_HEADER_OFFSET + AXLF_HEADER_SIZE + SECTION_HEADER_SIZE * len(sections)
    offset = _align8(headers_end)
    section_headers = b""
    payload = b""
    for kind, name, data in sections:
        section_headers += struct.pack("<I16s4xQQ", kind, _fixed_str(name, 16), offset, len(data))
        padded = data + b"\0" * (_align8(len(data)) - len(data))
        payload += padded
        offset += len(padded)
    total = offset

    magic = b"xclbin2\0"
    # m_signature_length = -1 (unsigned), 28 reserved 0xFF bytes, 256-byte key block of 0xFF
    cipher = struct.pack("<i", -1) + b"\xff" * 28
    key_block = b"\xff" * 256
    unique_id = struct.pack("<Q", int.from_bytes(os.urandom(8), "little"))
    header = struct.pack(
        "<QQQHBBI16s64s16s16sI4x",
        total,  # m_length
        int(time.time()),  # m_timeStamp
        0,  # m_featureRomTimeStamp
        0,  # m_versionPatch
        2,  # m_versionMajor
        14,  # m_versionMinor
        0,  # m_mode: XRT's XCLBIN_FLAT
        b"\0" * 16,  # rom uuid
        _fixed_str(platform, 64),
        uid.bytes,
        b"\0" * 16,  # m_debug_bin
        len(sections),
    )
    assert len(header) == AXLF_HEADER_SIZE
    blob = magic + cipher + key_block + unique_id + header
    assert len(blob) == AXLF_HEADER_OFFSET + AXLF_HEADER_SIZE
    blob += section_headers
    blob += b"\0" * (_align8(headers_end) - headers_end)
    blob += payload
    assert len(blob) == total

    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(blob)
    os.replace(tmp, path)
    return uid.hex


def _align8(n: int) -> int:
    return (n + 7) & ~7
