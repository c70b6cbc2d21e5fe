"""Read an xclbin (XRT's ``axlf`` container) without XRT or its tools.

fpgaserve reads xclbins itself for three things no runtime call answers the same way on every
host: which kernel ABI the firmware has (kernel name and argument signature, ``abi/``), whether
the xclbin belongs to the project next to it (``manifest.py``), and what ``fpgaserve doctor``
compares against the card (platform, interface UUID, compute units and their banks). The
layout follows XRT's ``xclbin.h`` (``src/runtime_src/core/include/xrt/detail/xclbin.h``), all
little-endian:

=====================  =====================================================================
bytes 0..303           magic ``xclbin2\\0``, signature length, reserved, key block, unique id
bytes 304..455         ``axlf_header``: length, timestamps, version, mode (u16 at +28),
                       interface UUID (+32, the shell's), platform VBNV (+48, 64 bytes),
                       xclbin UUID (+112), debug name, number of sections (+144)
bytes 456..            section headers, 40 bytes each: kind, name[16], offset, size
payloads               8-byte aligned; only the metadata sections are read (never the bitstream)
=====================  =====================================================================

Array sections are ``[count][padding][array]``: MEM_TOPOLOGY/GROUP_TOPOLOGY (i32 count, 40-byte
entries from 8), CONNECTIVITY/GROUP_CONNECTIVITY (i32, 12-byte entries from 4), IP_LAYOUT (i32,
80-byte entries from 8), CLOCK_FREQ_TOPOLOGY (i16, 136-byte entries from 2). Kernels and their
arguments come from the EMBEDDED_METADATA XML, as XRT itself reads them
(``xclbin_parser.cpp``): arguments sorted by ``id``, arguments sharing an id merged; compute
units are the IP_LAYOUT entries named ``<kernel>:<instance>``. Like XRT (``Runtime.
use_xclbin_group_sections``), bank connections come from GROUP_TOPOLOGY/GROUP_CONNECTIVITY
when v++ wrote them (2020.2 on) and from MEM_TOPOLOGY/CONNECTIVITY otherwise.

An xclbin may come from anywhere the model repository does, so every count, offset and size
is checked against the file before it is used, and sizes are bounded; a malformed file raises
:class:`XclbinError` naming the file and what is wrong. The header's ``m_length`` must be the
file's size, as xclbinutil writes it (a signature appended by ``--sign`` is counted in it, and
xclbinutil refuses any other size): a file cut anywhere, or with bytes added, is refused even
where the cut spares every section this module reads, since the card would be programmed with it.
"""

from __future__ import annotations

import json
import os
import struct
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import BinaryIO

from ...base import BackendError

MAGIC = b"xclbin2\0"  # the drivers (xocl, zocl) compare all 8 bytes, the NUL included
HEADER_OFFSET = 304
HEADER_SIZE = 152
SECTIONS_OFFSET = HEADER_OFFSET + HEADER_SIZE
SECTION_HEADER_SIZE = 40
MAX_SECTIONS = 10000  # XRT refuses more
MAX_METADATA_BYTES = 64 << 20  # any one metadata section; real ones are kilobytes

# axlf_section_kind
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
    0: "BITSTREAM",
    1: "CLEARING_BITSTREAM",
    2: "EMBEDDED_METADATA",
    3: "FIRMWARE",
    4: "DEBUG_DATA",
    5: "SCHED_FIRMWARE",
    6: "MEM_TOPOLOGY",
    7: "CONNECTIVITY",
    8: "IP_LAYOUT",
    9: "DEBUG_IP_LAYOUT",
    10: "DESIGN_CHECK_POINT",
    11: "CLOCK_FREQ_TOPOLOGY",
    12: "MCS",
    13: "BMC",
    14: "BUILD_METADATA",
    15: "KEYVALUE_METADATA",
    16: "USER_METADATA",
    17: "DNA_CERTIFICATE",
    18: "PDI",
    19: "BITSTREAM_PARTIAL_PDI",
    20: "PARTITION_METADATA",
    21: "EMULATION_DATA",
    22: "SYSTEM_METADATA",
    23: "SOFT_KERNEL",
    24: "ASK_FLASH",
    25: "AIE_METADATA",
    26: "GROUP_TOPOLOGY",
    27: "GROUP_CONNECTIVITY",
}
# XCLBIN_MODE (u16 at header + 28)
MODES = {0: "flat", 1: "pr", 2: "tandem_stage2", 3: "tandem_stage2_with_pr", 4: "hw_emu", 5: "sw_emu", 6: "hw_emu_pr"}
# MEM_TYPE
MEM_TYPES = {
    0: "DDR3",
    1: "DDR4",
    2: "DRAM",
    3: "STREAMING",
    4: "PREALLOCATED_GLOB",
    5: "ARE",
    6: "HBM",
    7: "BRAM",
    8: "URAM",
    9: "STREAMING_CONNECTION",
    10: "HOST",
    11: "PS_KERNEL",
}
IP_KERNEL = 1
IP_PS_KERNEL = 7
# IP_CONTROL, bits 8-15 of ip_data.properties for kernels
CONTROL_PROTOCOLS = {0: "ap_ctrl_hs", 1: "ap_ctrl_chain", 2: "ap_ctrl_none", 3: "ap_ctrl_me", 4: "accel_adapter"}

# argument address qualifiers (XRT: scalar=0, global=1, constant=2, local=3, stream=4)
ARG_SCALAR = 0
ARG_GLOBAL = 1
ARG_CONSTANT = 2
ARG_STREAM = 4


class XclbinError(BackendError):
    """The file is not an xclbin fpgaserve can read; the message names the file and the fault."""


@dataclass(frozen=True)
class MemoryBank:
    """One MEM_TOPOLOGY (or GROUP_TOPOLOGY) entry."""

    index: int
    tag: str  # "bank0", "DDR[1]", "HBM[3]", "PLRAM[0]", or a group "MBG[0:31]"
    type: str  # MEM_TYPES name
    used: bool
    size: int  # bytes (the file stores KiB)
    base: int

    def __str__(self) -> str:
        return self.tag


@dataclass(frozen=True)
class KernelArg:
    """One ``<arg>`` of a kernel in the embedded metadata."""

    id: int | None  # None: an argument without an index (RTL streams)
    name: str
    address_qualifier: int
    port: str
    offset: int  # register offset in the CU's control space
    size: int  # register bytes
    host_size: int
    type: str  # the HLS front end's text: "float*", "unsigned int", "ap_uint<512> const *", ...

    @property
    def is_buffer(self) -> bool:
        """A pointer into card memory (global or constant): the host passes a buffer object."""
        return self.address_qualifier in (ARG_GLOBAL, ARG_CONSTANT)

    @property
    def is_scalar(self) -> bool:
        return self.address_qualifier == ARG_SCALAR

    @property
    def element_type(self) -> str:
        """A pointer's element type without ``const``, ``*`` and spaces: "ap_fixed<16,6>", "float"."""
        text = self.type.replace("*", " ").replace("&", " ")
        words = [w for w in text.split() if w not in ("const", "volatile", "restrict", "__restrict")]
        return "".join(" ".join(words).split())


@dataclass(frozen=True)
class KernelPort:
    name: str
    mode: str  # master, slave, read_only, write_only
    data_width: int  # bits
    range: int
    port_type: str  # addressable, stream


@dataclass(frozen=True)
class Kernel:
    """A kernel as the embedded metadata declares it (``<kernel>``)."""

    name: str
    language: str  # "c" (HLS C++), "ip"/"ip_c" (RTL)
    vlnv: str
    control_protocol: str  # hwControlProtocol, "" when the xclbin predates the attribute
    args: tuple[KernelArg, ...]
    ports: tuple[KernelPort, ...]

    def arg(self, name: str) -> KernelArg | None:
        return next((a for a in self.args if a.name == name), None)

    def port(self, name: str) -> KernelPort | None:
        lowered = name.lower()
        return next((p for p in self.ports if p.name.lower() == lowered), None)

    def signature(self) -> str:
        """``name(type name, ...)`` as a person reads it, for messages."""
        return f"{self.name}({', '.join(f'{a.type} {a.name}'.strip() for a in self.args)})"


@dataclass(frozen=True)
class ComputeUnit:
    """An IP_LAYOUT kernel instance: ``krnl_rtl:krnl_rtl_1`` -> kernel krnl_rtl, name krnl_rtl_1."""

    index: int  # position in IP_LAYOUT (what CONNECTIVITY refers to)
    kernel: str
    name: str
    base: int
    control_protocol: str
    interrupt: bool
    banks: dict[int, tuple[MemoryBank, ...]] = field(default_factory=dict)  # arg id -> banks it is connected to

    def bank_of(self, arg_id: int) -> MemoryBank | None:
        """The one bank an argument is connected to (the first, as XRT's group_id picks), or None."""
        banks = self.banks.get(arg_id, ())
        return banks[0] if banks else None


@dataclass(frozen=True)
class Xclbin:
    """The metadata of one xclbin file."""

    path: str
    uuid: str  # 32 lower-case hex digits, as xclbinutil prints it without dashes
    platform: str  # m_platformVBNV: the shell the xclbin was linked for
    interface_uuid: str  # the shell interface (2RP/DFX shells); "" when zero
    mode: str
    version: str  # XRT version of the packager, "2.14.354"
    sections: tuple[tuple[str, int], ...]  # (kind name, size) in file order
    banks: tuple[MemoryBank, ...]
    compute_units: tuple[ComputeUnit, ...]
    kernels: dict[str, Kernel]
    clocks: dict[str, int]  # clock name -> MHz
    build_metadata: dict | None = None

    @property
    def has_bitstream(self) -> bool:
        """A BITSTREAM (or PDI) section: a file a card can be programmed with (an AWS .awsxclbin
        carries the AGFI id there)."""
        return any(kind in ("BITSTREAM", "PDI", "BITSTREAM_PARTIAL_PDI") for kind, _ in self.sections)

    @property
    def kernel_clock_mhz(self) -> int | None:
        for name in ("KERNEL_CLK", "DATA_CLK"):
            if name in self.clocks:
                return self.clocks[name]
        return next(iter(self.clocks.values()), None)

    def compute_units_of(self, kernel: str) -> list[ComputeUnit]:
        return [cu for cu in self.compute_units if cu.kernel == kernel]

    def describe(self) -> str:
        kernels = ", ".join(f"{k} x{len(self.compute_units_of(k))}" for k in sorted(self.kernels)) or "no kernels"
        return f"{os.path.basename(self.path)} (uuid {self.uuid}, platform {self.platform or '?'}, {kernels})"


# ------------------------------------------------------------------------------------- reading
def read_uuid(path: str | os.PathLike) -> str:
    """Only the xclbin UUID (cheap: reads the header and checks the section table, no payload)."""
    where = str(path)
    with _open(path) as f:
        head = _read_header(f, where)
        _read_section_table(f, where, head["sections"], head["file_size"])
    return head["uuid"]


def read_xclbin(path: str | os.PathLike) -> Xclbin:
    """Parse the metadata of ``path``; raises :class:`XclbinError` for anything malformed."""
    where = str(path)
    with _open(path) as f:
        head = _read_header(f, where)
        table = _read_section_table(f, where, head["sections"], head["file_size"])
        payload: dict[int, bytes] = {}
        for kind, _name, offset, size in table:
            if kind in _METADATA_KINDS and kind not in payload:  # several of one kind: the first, as XRT
                if size > MAX_METADATA_BYTES:
                    raise XclbinError(f"{where}: {SECTION_NAMES.get(kind, kind)} section of {size} bytes is too large")
                f.seek(offset)
                data = f.read(size)
                if len(data) != size:
                    raise XclbinError(f"{where}: {SECTION_NAMES.get(kind, kind)} section is cut short")
                payload[kind] = data
    topology = _mem_topology(payload.get(GROUP_TOPOLOGY) or payload.get(MEM_TOPOLOGY), where)
    plain = _mem_topology(payload.get(MEM_TOPOLOGY), where) if GROUP_TOPOLOGY in payload else topology
    connections = _connectivity(payload.get(GROUP_CONNECTIVITY) or payload.get(CONNECTIVITY), where)
    kernels = _kernels(payload.get(EMBEDDED_METADATA), where)
    cus = _ip_layout(payload.get(IP_LAYOUT), where, kernels, connections, topology)
    return Xclbin(
        path=os.path.abspath(where),
        uuid=head["uuid"],
        platform=head["platform"],
        interface_uuid=head["interface_uuid"],
        mode=head["mode"],
        version=head["version"],
        sections=tuple((SECTION_NAMES.get(kind, str(kind)), size) for kind, _n, _o, size in table),
        banks=plain,
        compute_units=cus,
        kernels=kernels,
        clocks=_clocks(payload.get(CLOCK_FREQ_TOPOLOGY), where),
        build_metadata=_json(payload.get(BUILD_METADATA), where, "BUILD_METADATA"),
    )


_METADATA_KINDS = {
    EMBEDDED_METADATA,
    MEM_TOPOLOGY,
    CONNECTIVITY,
    IP_LAYOUT,
    CLOCK_FREQ_TOPOLOGY,
    BUILD_METADATA,
    GROUP_TOPOLOGY,
    GROUP_CONNECTIVITY,
}


def _open(path) -> BinaryIO:
    try:
        return open(path, "rb")
    except OSError as e:
        raise XclbinError(f"cannot read {path}: {e.strerror}") from None


def _cstr(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", errors="replace")


def _read_header(f: BinaryIO, where: str) -> dict:
    head = f.read(SECTIONS_OFFSET)
    if not head.startswith(MAGIC) and not (head and MAGIC.startswith(head)):
        raise XclbinError(f"{where} is not an xclbin (it does not start with the magic 'xclbin2\\0')")
    if len(head) < SECTIONS_OFFSET:
        raise XclbinError(
            f"{where} is cut short: {len(head)} bytes, less than the {SECTIONS_OFFSET}-byte xclbin header"
        )
    f.seek(0, os.SEEK_END)
    file_size = f.tell()
    h = HEADER_OFFSET
    (signature,) = struct.unpack_from("<i", head, len(MAGIC))
    (length,) = struct.unpack_from("<Q", head, h)
    patch, major, minor, mode = struct.unpack_from("<HBBH", head, h + 24)
    (sections,) = struct.unpack_from("<I", head, h + 144)
    if signature < -1 or signature > file_size:
        raise XclbinError(f"{where}: the signature length {signature} is damaged (-1: unsigned)")
    if sections > MAX_SECTIONS:
        raise XclbinError(f"{where}: the header declares {sections} sections (XRT accepts at most {MAX_SECTIONS})")
    if length > file_size:
        raise XclbinError(f"{where} is cut short: the header says {length} bytes, the file has {file_size}")
    if length < file_size:
        raise XclbinError(
            f"{where}: the header says {length} bytes, the file has {file_size} (xclbinutil writes the file's "
            "size there, a signature included: the header is damaged or bytes were added)"
        )
    interface = head[h + 32 : h + 48]
    return {
        "file_size": file_size,
        "sections": sections,
        "mode": MODES.get(mode, f"mode {mode}"),
        "version": f"{major}.{minor}.{patch}",
        "interface_uuid": interface.hex() if interface.strip(b"\0") else "",
        "platform": _cstr(head[h + 48 : h + 112]),
        "uuid": head[h + 112 : h + 128].hex(),
    }


def _read_section_table(f: BinaryIO, where: str, count: int, file_size: int) -> list[tuple[int, str, int, int]]:
    f.seek(SECTIONS_OFFSET)
    raw = f.read(count * SECTION_HEADER_SIZE)
    if len(raw) != count * SECTION_HEADER_SIZE:
        raise XclbinError(f"{where}: the section table ({count} sections) is cut short")
    table = []
    table_end = SECTIONS_OFFSET + count * SECTION_HEADER_SIZE
    for i in range(count):
        kind, name, offset, size = struct.unpack_from("<I16s4xQQ", raw, i * SECTION_HEADER_SIZE)
        if offset + size > file_size:
            raise XclbinError(
                f"{where}: section {i} ({SECTION_NAMES.get(kind, kind)}) lies beyond the end of the file "
                f"(offset {offset}, size {size}, file {file_size} bytes)"
            )
        if size and offset < table_end:
            raise XclbinError(
                f"{where}: section {i} ({SECTION_NAMES.get(kind, kind)}) overlaps the header or the section table "
                f"(offset {offset}; the table ends at {table_end})"
            )
        table.append((kind, _cstr(name), offset, size))
    return table


def _array(data: bytes, where: str, what: str, count_fmt: str, start: int, elem: int) -> tuple[int, bytes]:
    (count,) = struct.unpack_from(count_fmt, data, 0) if len(data) >= struct.calcsize(count_fmt) else (0,)
    if count < 0 or start + count * elem > len(data):
        raise XclbinError(f"{where}: {what} declares {count} entries, more than its {len(data)} bytes hold")
    return count, data


def _mem_topology(data: bytes | None, where: str) -> tuple[MemoryBank, ...]:
    if not data:
        return ()
    count, data = _array(data, where, "MEM_TOPOLOGY", "<i", 8, 40)
    banks = []
    for i in range(count):
        mtype, used, size_kb, base, tag = struct.unpack_from("<BB6xQQ16s", data, 8 + 40 * i)
        kind = MEM_TYPES.get(mtype, f"type {mtype}")
        streaming = mtype == 9  # route/flow ids, not a size and an address
        banks.append(
            MemoryBank(i, _cstr(tag), kind, bool(used), 0 if streaming else size_kb * 1024, 0 if streaming else base)
        )
    return tuple(banks)


def _connectivity(data: bytes | None, where: str) -> list[tuple[int, int, int]]:
    if not data:
        return []
    count, data = _array(data, where, "CONNECTIVITY", "<i", 4, 12)
    return [struct.unpack_from("<iii", data, 4 + 12 * i) for i in range(count)]


def _clocks(data: bytes | None, where: str) -> dict[str, int]:
    if not data:
        return {}
    count, data = _array(data, where, "CLOCK_FREQ_TOPOLOGY", "<h", 2, 136)
    clocks = {}
    for i in range(count):
        freq, _ctype, name = struct.unpack_from("<HB5x128s", data, 2 + 136 * i)
        clocks[_cstr(name) or f"clock{i}"] = freq
    return clocks


def _json(data: bytes | None, where: str, what: str) -> dict | None:
    if not data:
        return None
    try:
        value = json.loads(data.rstrip(b"\0").decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise XclbinError(f"{where}: {what} is not JSON") from None
    return value if isinstance(value, dict) else None


def _int(text: str | None, where: str, what: str, default: int | None = 0) -> int:
    if text is None or text.strip() == "":
        if default is None:
            raise XclbinError(f"{where}: {what} is missing")
        return default
    try:
        return int(text.strip(), 0)
    except ValueError:
        raise XclbinError(f"{where}: {what} '{text}' is not a number") from None


def _kernels(data: bytes | None, where: str) -> dict[str, Kernel]:
    """``<project><platform><device><core><kernel>`` of the embedded metadata XML."""
    if not data:
        return {}
    try:
        root = ET.fromstring(data.rstrip(b"\0"))
    except ET.ParseError as e:
        raise XclbinError(f"{where}: EMBEDDED_METADATA is not well-formed XML ({e})") from None
    kernels: dict[str, Kernel] = {}
    for k in root.iter("kernel"):
        name = k.get("name", "")
        if not name:
            continue
        ports = tuple(
            KernelPort(
                p.get("name", ""),
                p.get("mode", ""),
                _int(p.get("dataWidth"), where, f"kernel {name} port dataWidth"),
                _int(p.get("range"), where, f"kernel {name} port range"),
                p.get("portType", ""),
            )
            for p in k.iter("port")
        )
        merged: dict[int | None, KernelArg] = {}
        for a in k.iter("arg"):
            what = f"kernel {name} argument {a.get('name', '?')}"
            arg_id = _int(a.get("id"), where, f"{what} id", None) if (a.get("id") or "").strip() else None
            arg = KernelArg(
                id=arg_id,
                name=a.get("name", ""),
                address_qualifier=_int(a.get("addressQualifier"), where, f"{what} addressQualifier"),
                port=a.get("port", ""),
                offset=_int(a.get("offset"), where, f"{what} offset"),
                size=_int(a.get("size"), where, f"{what} size"),
                host_size=_int(a.get("hostSize"), where, f"{what} hostSize"),
                type=a.get("type", ""),
            )
            seen = merged.get(arg_id) if arg_id is not None else None
            if seen is not None:  # old xclbins split a 64-bit argument in two entries with one id
                arg = KernelArg(
                    seen.id,
                    seen.name,
                    seen.address_qualifier,
                    seen.port,
                    min(seen.offset, arg.offset),
                    seen.size + arg.size,
                    seen.host_size + arg.host_size,
                    seen.type,
                )
            merged[arg_id if arg_id is not None else -1 - len(merged)] = arg
        args = tuple(sorted(merged.values(), key=lambda a: (a.id is None, a.id if a.id is not None else 0)))
        kernels[name] = Kernel(
            name=name,
            language=k.get("language", ""),
            vlnv=k.get("vlnv", ""),
            control_protocol=k.get("hwControlProtocol", ""),
            args=args,
            ports=ports,
        )
    return kernels


def _ip_layout(
    data: bytes | None,
    where: str,
    kernels: dict[str, Kernel],
    connections: list[tuple[int, int, int]],
    topology: tuple[MemoryBank, ...],
) -> tuple[ComputeUnit, ...]:
    if not data:
        return ()
    count, data = _array(data, where, "IP_LAYOUT", "<i", 8, 80)
    cus = []
    for i in range(count):
        ip_type, props, base, raw_name = struct.unpack_from("<IIQ64s", data, 8 + 80 * i)
        if ip_type not in (IP_KERNEL, IP_PS_KERNEL):
            continue
        full = _cstr(raw_name)
        kernel, sep, instance = full.partition(":")
        if not sep or not instance:
            raise XclbinError(f"{where}: IP_LAYOUT entry '{full}' is not named '<kernel>:<instance>'")
        banks: dict[int, list[MemoryBank]] = {}
        for arg_index, ip_index, mem_index in connections:
            if ip_index != i:
                continue
            if not 0 <= mem_index < len(topology):
                raise XclbinError(f"{where}: CONNECTIVITY names memory {mem_index}; the topology has {len(topology)}")
            banks.setdefault(arg_index, []).append(topology[mem_index])
        cus.append(
            ComputeUnit(
                index=i,
                kernel=kernel,
                name=instance,
                base=base,
                control_protocol=CONTROL_PROTOCOLS.get((props >> 8) & 0xFF, f"control {(props >> 8) & 0xFF}"),
                interrupt=bool(props & 1),
                banks={k: tuple(v) for k, v in banks.items()},
            )
        )
    return tuple(cus)


__all__ = [
    "ComputeUnit",
    "Kernel",
    "KernelArg",
    "KernelPort",
    "MemoryBank",
    "Xclbin",
    "XclbinError",
    "read_uuid",
    "read_xclbin",
]
