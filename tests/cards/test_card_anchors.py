"""krnl_rtl's interface read from the installed hls4ml's own templates, not from our constants.

fpgaserve's ``krnl_rtl`` ABI (``card/abi/krnl_rtl.py``), its PYNQ runtime's CTRL bits, the
simulated card and the simulator's xclbin writer (``fpga_sim/xclbin.py``) each carry the
kernel's register map and argument order as constants, all from one reading of hls4ml's
VivadoAccelerator Alveo sources. This module parses those sources where hls4ml installed them
(``templates/vivado_accelerator/alveo/``) with small regular-expression parsers and checks every
constant against what it finds:

* ``krnl_rtl_src/krnl_rtl_control_s_axi.v``: the ``ADDR_<ARG>_DATA_0`` localparams (register
  offsets; a ``DATA_1`` word makes a 64-bit register), the user-signal outputs after the
  handshake (argument order and widths), the "Address Info" comment's CTRL bits;
* ``tcl_scripts/axi_stream_design.tcl``: the registers ``ipx::add_register`` declares, in order
  (package_xo numbers the kernel's arguments so), their ``Address_Offset``/``Size``, the
  ``ASSOCIATED_BUSIF`` that makes a register a pointer on ``m_axi_gmem``, the VLNV
  (``-vendor``/``-library``, the archive's version) and ``package_xo -kernel_name``;
* ``krnl_rtl_src/myproject_kernel.v``: the top module's name, its AXI interfaces and their
  data widths (``C_*_DATA_WIDTH`` parameters), the ``interrupt`` output;
* ``krnl_rtl_src/krnl_rtl_int.sv``: ``LP_LENGTH_WIDTH`` (the length registers' width);
* ``python_drivers/axi_stream_driver.py``: the CU the stock driver calls and its argument
  roles (input buffer, output buffer, input element count, output element count).

Skipped, saying why, when hls4ml is not installed or its templates are not where 1.x keeps them.

The second half holds ``card/axlf.py`` to a reader that is not ours: PYNQ 3.0.1's
``pynq.pl_server.xclbin_parser.XclBin``, run in the card venv (``tests/support/tools.py`` builds it
from PyPI once and reuses it; skipped, saying why, only where it cannot be built) on xclbins of
every kernel ABI, with several compute units, flat and 2RP shells, DDR and HBM banks, bank
groups, and without group sections. Compute units, base addresses, VLNVs, control protocols,
arguments (name, id, offset, size, host size, type), memories and each argument's banks, clocks
and the uuid must agree.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.tools import NEEDS_CARD_VENV

ROOT = Path(__file__).resolve().parents[2]
JET = ROOT / "bitstreams" / "jet_tagger" / "1"
ALVEO = Path("templates") / "vivado_accelerator" / "alveo"
FILES = {
    "control": ALVEO / "krnl_rtl_src" / "krnl_rtl_control_s_axi.v",
    "kernel": ALVEO / "krnl_rtl_src" / "myproject_kernel.v",
    "int": ALVEO / "krnl_rtl_src" / "krnl_rtl_int.sv",
    "tcl": ALVEO / "tcl_scripts" / "axi_stream_design.tcl",
    "driver": ALVEO / "python_drivers" / "axi_stream_driver.py",
}
# registers every HLS-style control block has before the arguments (the tcl declares them too)
CONTROL_REGISTERS = ("CTRL", "GIER", "IP_IER", "IP_ISR")


@dataclass(frozen=True)
class TemplateArg:
    name: str
    offset: int
    bits: int
    pointer: bool  # ASSOCIATED_BUSIF m_axi_*: a buffer address, not a scalar
    bus: str  # the master it addresses, or the control port for scalars


@dataclass(frozen=True)
class Templates:
    version: str
    folder: Path
    args: tuple[TemplateArg, ...]
    ctrl_bits: dict[str, int]  # ap_start -> 0, ...
    kernel_name: str
    vlnv: str
    interfaces: dict[str, int]  # m_axi_gmem / s_axi_control -> data width (bits)
    control_addr_bits: int
    interrupt: bool
    length_bits: int
    driver_cu: str
    driver_call: tuple[str, ...]  # the roles of the stock driver's call arguments


def _hls4ml_folder() -> tuple[Path | None, str]:
    spec = importlib.util.find_spec("hls4ml")  # located, not imported (that pulls in its converters)
    if spec is None or not spec.submodule_search_locations:
        return None, "hls4ml is not installed"
    folder = Path(next(iter(spec.submodule_search_locations)))
    missing = [str(p) for p in FILES.values() if not (folder / p).is_file()]
    if missing:
        return None, f"hls4ml at {folder} lacks the VivadoAccelerator Alveo templates ({', '.join(missing)})"
    return folder, ""


def _hex(text: str) -> int:
    return int(text, 16)


def _parse_control(text: str) -> tuple[list[tuple[str, int]], dict[str, int], dict[str, int], int]:
    """(user-signal outputs in order with widths, ADDR_* localparams, CTRL bits, address bits)."""
    addrs = {m[1]: _hex(m[2]) for m in re.finditer(r"\b(ADDR_\w+)\s*=\s*\d+'h([0-9a-fA-F]+)", text)}
    user = text.split("// user signals", 1)[1].split(");", 1)[0]
    outputs = [
        (m[2], int(m[1]) + 1 if m[1] else 1)
        for m in re.finditer(r"output\s+wire\s+(?:\[(\d+):0\]\s*)?(\w+)", user)
        if not m[2].startswith("ap_")
    ]
    info = text.split("Address Info", 1)[1]
    ctrl = info.split("// 0x00", 1)[1].split("// 0x04", 1)[0]
    bits = {m[2]: int(m[1]) for m in re.finditer(r"bit\s+(\d+)\s+-\s+(\w+)", ctrl)}
    (width,) = re.findall(r"C_S_AXI_ADDR_WIDTH\s*=\s*(\d+)", text)[:1]
    return outputs, addrs, bits, int(width)


def _parse_tcl(text: str) -> dict:
    registers = re.findall(r"^ipx::add_register\s+(\w+)\s", text, re.M)
    on = r"\s+\[ipx::get_registers\s+(\w+)\s"
    offsets = {m[2]: _hex(m[1]) for m in re.finditer(r"set_property\s+Address_Offset\s+0x([0-9a-fA-F]+)" + on, text)}
    sizes = {m[2]: int(m[1]) for m in re.finditer(r"set_property\s+Size\s+(\d+)" + on, text)}
    busif = {
        m[2]: m[1]
        for m in re.finditer(
            r"set_property\s+Value\s+(\w+)\s+\[ipx::get_register_parameters\s+ASSOCIATED_BUSIF\s+-of_objects"
            r"\s+\[ipx::get_registers\s+(\w+)\s",
            text,
        )
    }
    package = re.search(r"ipx::package_project\b.*?-vendor\s+(\S+)\s+-library\s+(\S+)", text)
    assert package, "the tcl script no longer packages the IP as this parser expects"
    # the archive is named <vendor>_<library>_<name>_<version>.zip
    prefix = re.escape(f"{package[1]}_{package[2]}_")
    archive = re.search(r"ipx::archive_core\s+\S*/" + prefix + r"(\w+)_(\d+(?:\.\d+)*)\.zip", text)
    kernel = re.search(r"package_xo\b.*?-kernel_name\s+(\w+)", text)
    assert archive and kernel, "the tcl script no longer archives and packages the kernel as this parser expects"
    return {
        "registers": registers,
        "offsets": offsets,
        "sizes": sizes,
        "busif": busif,
        "vlnv": f"{package[1]}:{package[2]}:{archive[1]}:{archive[2]}",
        "kernel_name": kernel[1],
    }


def _parse_kernel(text: str) -> tuple[str, dict[str, int], bool]:
    """(module name, AXI interface -> data width, has an interrupt output) of myproject_kernel.v."""
    (module,) = re.findall(r"^module\s+(\w+)", text, re.M)
    params = {m[1]: int(m[2]) for m in re.finditer(r"parameter\s+integer\s+(\w+)\s*=\s*(\d+)", text)}
    header = text.split("module", 1)[1].split(");", 1)[0]
    ports = re.findall(r"(?:input|output)\s+wire\s+(?:\[[^\]]*\]\s*)?(\w+)", header)
    interfaces = sorted({m[1] for p in ports if (m := re.match(r"([ms]_axi_[a-z0-9]+)_[A-Z]+$", p))})
    widths = {i: params[f"C_{i.upper()}_DATA_WIDTH"] for i in interfaces}
    return module, widths, "interrupt" in ports


def _parse_driver(text: str) -> tuple[str, tuple[str, ...]]:
    """The CU ``predict`` calls and each argument's role, from the expressions the driver passes."""
    tree = ast.parse(text)
    assigned = {
        node.targets[0].id: ast.unparse(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
    }
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "call"
        and isinstance(node.func.value, ast.Attribute)
    ]
    assert len(calls) == 1, "the stock driver no longer makes one kernel call"
    (call,) = calls
    assert isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Attribute)
    roles = []
    for arg in call.args:
        text = ast.unparse(arg)
        text = assigned.get(text, text)
        roles.append(
            {
                "self.input_buffer": "input buffer",
                "self.output_buffer": "output buffer",
                "np.prod(X.shape)": "input elements",
                "np.prod(y_shape)": "output elements",
            }.get(text, text)
        )
    return call.func.value.attr, tuple(roles)


@pytest.fixture(scope="module")
def templates() -> Templates:
    folder, why = _hls4ml_folder()
    if folder is None:
        pytest.skip(why)
    read = {key: (folder / path).read_text() for key, path in FILES.items()}
    outputs, addrs, ctrl_bits, addr_bits = _parse_control(read["control"])
    tcl = _parse_tcl(read["tcl"])
    module, interfaces, interrupt = _parse_kernel(read["kernel"])
    (length_bits,) = re.findall(r"LP_LENGTH_WIDTH\s*=\s*(\d+)", read["int"])
    driver_cu, driver_call = _parse_driver(read["driver"])
    control_port = next(i for i in interfaces if i.startswith("s_axi_"))

    # the sources agree with one another before anything of ours is compared with them
    arg_names = [r for r in tcl["registers"] if r not in CONTROL_REGISTERS]
    assert tcl["registers"][: len(CONTROL_REGISTERS)] == list(CONTROL_REGISTERS)
    assert [name for name, _ in outputs] == arg_names, (outputs, tcl["registers"])
    assert module == tcl["kernel_name"] == tcl["vlnv"].split(":")[2]
    args = []
    for name, bits in outputs:
        offset = addrs[f"ADDR_{name.upper()}_DATA_0"]
        assert offset == tcl["offsets"][name] and bits == tcl["sizes"][name], name
        words = [k for k in addrs if k.startswith(f"ADDR_{name.upper()}_DATA_")]
        assert len(words) * 32 == bits, (name, words)
        bus = tcl["busif"].get(name, control_port)
        args.append(TemplateArg(name, offset, bits, name in tcl["busif"], bus))
    assert len(args) == 4 and len(ctrl_bits) >= 4, "the parsers found less than the kernel has"
    return Templates(
        version=importlib.metadata.version("hls4ml"),
        folder=folder,
        args=tuple(args),
        ctrl_bits=ctrl_bits,
        kernel_name=tcl["kernel_name"],
        vlnv=tcl["vlnv"],
        interfaces=interfaces,
        control_addr_bits=addr_bits,
        interrupt=interrupt,
        length_bits=int(length_bits),
        driver_cu=driver_cu,
        driver_call=driver_call,
    )


def _expected_args(t: Templates) -> list[tuple]:
    return [(a.name, a.offset, a.bits // 8, a.pointer, a.bus) for a in t.args]


def test_the_abi_has_the_templates_arguments(templates):
    from fpgaserve.backends.hls4ml.card.abi import krnl_rtl

    assert list(krnl_rtl.ARGS) == [a.name for a in templates.args], templates.version
    assert krnl_rtl.KrnlRtl.kernel_names == (templates.kernel_name,)
    pointers = [a.name for a in templates.args if a.pointer]
    assert [krnl_rtl.KrnlRtl.input_name, krnl_rtl.KrnlRtl.output_name] == pointers
    # XRT passes scalars as C int: the cap must fit the RTL's length registers too
    assert 2**templates.length_bits > krnl_rtl.MAX_WORDS
    assert all(a.bits == templates.length_bits for a in templates.args if not a.pointer)


def test_the_xclbin_writer_declares_the_templates_kernel(templates):
    from fpga_sim.xclbin import kernel_spec

    spec = kernel_spec("krnl_rtl")
    assert spec.name == templates.kernel_name and spec.vlnv == templates.vlnv
    assert [a.id for a in spec.args] == list(range(len(templates.args)))  # package_xo's numbering
    assert [(a.name, a.offset, a.size, a.address_qualifier == 1, a.port) for a in spec.args] == _expected_args(
        templates
    )
    assert {p.name: p.data_width for p in spec.ports} == templates.interfaces
    control = next(p for p in spec.ports if p.mode == "slave")
    assert control.range >= 2**templates.control_addr_bits  # the whole register file is reachable
    assert spec.cu_names(1) == [templates.driver_cu]  # v++'s default CU name, the one the driver calls


def test_an_xclbin_read_back_and_a_call_follow_the_templates(templates, tmp_path):
    """Through the files themselves: the writer's xclbin, read by card/axlf.py, and the
    arguments the ABI passes for a call, in the roles the stock driver gives them."""
    from fpga_sim.xclbin import write_xclbin
    from fpgaserve.backends.hls4ml.card import abi
    from fpgaserve.backends.hls4ml.card.axlf import read_xclbin

    folder = tmp_path / "v"
    shutil.copytree(JET, folder)
    write_xclbin(folder / "model.xclbin", kernel_abi="krnl_rtl", project=folder, cus=2)
    xclbin = read_xclbin(folder / "model.xclbin")
    cls, kernel = abi.choose(xclbin)
    assert cls.name == "krnl_rtl" and kernel.name == templates.kernel_name and kernel.vlnv == templates.vlnv
    assert [(a.name, a.offset, a.size, a.is_buffer, a.port) for a in kernel.args] == _expected_args(templates)
    assert {p.name: p.data_width for p in kernel.ports} == templates.interfaces
    assert xclbin.compute_units[0].name == templates.driver_cu
    assert all(cu.interrupt == templates.interrupt for cu in xclbin.compute_units)
    # CTRL has ap_start/done/idle/ready and no ap_continue (ap_ctrl_chain's bit 4): ap_ctrl_hs
    assert "ap_continue" not in templates.ctrl_bits and kernel.control_protocol == "ap_ctrl_hs"
    assert all(cu.control_protocol == "ap_ctrl_hs" for cu in xclbin.compute_units)
    io = abi.KernelIo(16, 5, "float", "float")
    rows = 7
    roles = {
        "input buffer": "IN",
        "output buffer": "OUT",
        "input elements": rows * io.n_in,
        "output elements": rows * io.n_out,
    }
    assert cls(io, kernel).arguments("IN", "OUT", rows) == [roles[r] for r in templates.driver_call]


def test_the_ctrl_bits_are_the_templates(templates):
    """The PYNQ runtime starts and polls a CU through CTRL itself; the simulated card models it."""
    from fpga_sim import card as simcard
    from fpgaserve.backends.hls4ml.card.runtime import pynq as runtime

    bit = {name: 1 << b for name, b in templates.ctrl_bits.items()}
    assert (bit["ap_start"], bit["ap_idle"]) == (runtime.AP_START, runtime.AP_IDLE)
    assert (
        bit["ap_start"],
        bit["ap_done"],
        bit["ap_idle"],
        bit["ap_ready"],
        bit["auto_restart"],
    ) == (simcard.AP_START, simcard.AP_DONE, simcard.AP_IDLE, simcard.AP_READY, simcard.AUTO_RESTART)


# ------------------------------------------------------------------------------ PYNQ's XclBin
# Each xclbin the writer can lay out differently: (name, kernel ABI, write_xclbin arguments).
PYNQ_CASES = [
    ("krnl_rtl", "krnl_rtl", {}),
    ("krnl_rtl_two_banks", "krnl_rtl", {"cus": ["krnl_rtl_1", "krnl_rtl_2"], "cu_banks": ["DDR[0]", "DDR[1]"]}),
    ("krnl_rtl_flat_shell", "krnl_rtl", {"cus": 2, "platform": "xilinx_u250_xdma_201830_2"}),
    ("krnl_rtl_u50_hbm", "krnl_rtl", {"cus": 2, "platform": "xilinx_u50_gen3x16_xdma_5_202210_1"}),
    ("krnl_rtl_no_groups", "krnl_rtl", {"group_sections": False}),
    ("kernel_wrapper", "kernel_wrapper", {"cus": 2}),
    (
        "kernel_wrapper_hbm_groups",
        "kernel_wrapper",
        {"cus": 2, "platform": "xilinx_u55c_gen3x16_xdma_3_202210_1", "cu_banks": ["HBM[0:3]", "HBM[4:7]"]},
    ),
    ("kernel_wrapper_legacy", "kernel_wrapper", {"cus": 1, "legacy": True}),
    ("faast", "faast", {"platform": "xilinx_u250_xdma_201830_2"}),
]
# Runs under the card venv's interpreter: PYNQ's parse of each file, as JSON.
PYNQ_SCRIPT = """
import json, sys
import pynq
from pynq.pl_server.xclbin_parser import XclBin
out = {"version": pynq.__version__, "files": {}}
for path in sys.argv[1:]:
    x = XclBin(path)
    out["files"][path] = {"ip_dict": x.ip_dict, "mem_dict": x.mem_dict, "clock_dict": x.clock_dict}
print(json.dumps(out))
"""


def _pynq_python() -> str:
    if importlib.util.find_spec("pynq") is not None:  # this module running in the card venv
        return sys.executable
    from support.tools import card_venv_python

    return card_venv_python()  # skips, saying why, when the venv cannot be built


@pytest.fixture(scope="module")
def pynq_parsed(tmp_path_factory) -> tuple[str, dict[str, tuple[Path, dict]]]:
    """(pynq version, {case: (xclbin, PYNQ's dicts)}): every case written, then parsed by PYNQ
    in one run of the card venv's interpreter."""
    python = _pynq_python()
    from fpga_sim.projects import faast_project, kernel_wrapper_project
    from fpga_sim.xclbin import write_xclbin

    root = tmp_path_factory.mktemp("pynq_xclbins")
    projects = {
        "krnl_rtl": Path(shutil.copytree(JET, root / "rtl")),
        "kernel_wrapper": kernel_wrapper_project(JET, root / "kw", num_kernel=2),
        "faast": faast_project(root / "faast"),
    }
    paths = {}
    for name, abi_name, kw in PYNQ_CASES:
        path = root / f"{name}.xclbin"
        write_xclbin(path, kernel_abi=abi_name, project=projects[abi_name], **kw)
        paths[name] = path
    proc = subprocess.run(
        [python, "-c", PYNQ_SCRIPT, *map(str, paths.values())],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    parsed = json.loads(proc.stdout)
    return parsed["version"], {name: (path, parsed["files"][str(path)]) for name, path in paths.items()}


@NEEDS_CARD_VENV
@pytest.mark.parametrize("case", [name for name, _, _ in PYNQ_CASES])
def test_pynq_reads_our_xclbins_as_our_reader_does(pynq_parsed, case):
    from fpgaserve.backends.hls4ml.card.axlf import read_xclbin

    version, files = pynq_parsed
    path, theirs = files[case]
    ours = read_xclbin(path)
    where = f"{case} (pynq {version})"

    # PYNQ reads MEM_TOPOLOGY (never the group sections): our plain banks
    mem = theirs["mem_dict"]
    assert {t: (m["idx"], m["type"], bool(m["used"]), m["size"], m["base_address"]) for t, m in mem.items()} == {
        b.tag: (b.index, b.type, b.used, b.size, b.base) for b in ours.banks
    }, where
    assert {c["name"]: c["frequency"] for c in theirs["clock_dict"].values()} == ours.clocks, where

    cus = {cu.name: cu for cu in ours.compute_units}
    assert sorted(theirs["ip_dict"]) == sorted(cus), where
    assert len(ours.kernels) == 1 and all(cu.kernel in ours.kernels for cu in cus.values()), where
    for name, ip in theirs["ip_dict"].items():
        cu = cus[name]
        kernel = ours.kernels[cu.kernel]
        what = f"{where}: {name}"
        # the XML's addrRemap (PYNQ) and IP_LAYOUT (ours) must place and name the CU alike
        assert (ip["cu_name"], ip["index"], ip["phys_addr"]) == (f"{cu.kernel}:{cu.name}", cu.index, cu.base), what
        assert ip["xclbin_uuid"] == ours.uuid, what
        assert ip["type"] == kernel.vlnv, what
        assert ip["hw_control_protocol"] == kernel.control_protocol == cu.control_protocol, what
        assert ip["addr_range"] == max(p.range for p in kernel.ports if p.mode == "slave"), what
        regs = {k: r for k, r in ip["registers"].items() if k != "CTRL"}
        assert ("AP_CONTINUE" in ip["registers"]["CTRL"]["fields"]) == (kernel.control_protocol == "ap_ctrl_chain")
        assert sorted(
            ((r["id"], k, r["address_offset"], r["size"] // 8, r["host_size"], r["type"]) for k, r in regs.items()),
        ) == [(a.id, a.name, a.offset, a.size, a.host_size, a.type) for a in kernel.args], what
        for arg in kernel.args:
            reg = regs[arg.name]
            pynq_banks = reg.get("MBG") or ([reg["memory"]] if "memory" in reg else [])
            assert arg.is_buffer == bool(pynq_banks), (what, arg.name)
            assert arg.id is not None
            assert _as_plain_banks(ours, cu.banks.get(arg.id, ())) == pynq_banks, (what, arg.name)


def _as_plain_banks(xclbin, banks) -> list[str]:
    """Our banks of an argument as MEM_TOPOLOGY tags: a bank group (GROUP_TOPOLOGY, which XRT
    and our reader prefer) as the banks it spans, in topology order, as PYNQ lists them."""
    out = []
    plain = {b.tag: b for b in xclbin.banks}
    for bank in banks:
        if bank.tag in plain:
            out.append(bank.tag)
            continue
        inside = [b for b in xclbin.banks if b.type == bank.type and bank.base <= b.base < bank.base + bank.size]
        assert inside and sum(b.size for b in inside) == bank.size, (bank, inside)
        out.extend(b.tag for b in inside)
    return out
