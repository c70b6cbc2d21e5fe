"""The xclbin reader, the kernel ABIs' choice and checks, and card.json's consistency rules.

The xclbins come from the simulated card's writer (``tests/fpga_sim/xclbin.py``), which lays
them out as ``v++``/``xclbinutil`` do (group sections, bank tags of each platform, kernel XML
per flow), and which has its own independent reader: fpgaserve's ``card/axlf.py`` must agree
with it on every file, and must refuse a damaged file with XclbinError, never anything else.
"""

from __future__ import annotations

import json
import random
import shutil
import struct
from pathlib import Path

import pytest

from fpgaserve.backends import BackendError
from fpgaserve.backends.hls4ml.card import abi
from fpgaserve.backends.hls4ml.card.abi import AbiError, KernelIo
from fpgaserve.backends.hls4ml.card.axlf import XclbinError, read_uuid, read_xclbin
from fpgaserve.backends.hls4ml.card.manifest import MANIFEST, CardManifest, ManifestError, resolve
from fpgaserve.backends.hls4ml.project import Hls4mlProject

ROOT = Path(__file__).resolve().parents[2]
JET = ROOT / "bitstreams" / "jet_tagger" / "1"
FACILE = ROOT / "bitstreams" / "facile" / "1"


@pytest.fixture(scope="module")
def projects(tmp_path_factory):
    """Projects shaped for each flow: the bundled jet tagger (VivadoAccelerator), the same as
    VitisAccelerator native and HW_Quant, and a 16-bit plain Vivado project for FaaST."""
    from fpga_sim.projects import faast_project, kernel_wrapper_project

    root = tmp_path_factory.mktemp("abi_projects")
    rtl = root / "rtl"
    shutil.copytree(JET, rtl, ignore=shutil.ignore_patterns(MANIFEST))
    return {
        "krnl_rtl": rtl,
        "kernel_wrapper": kernel_wrapper_project(JET, root / "kw", num_kernel=2),
        "kernel_wrapper_float": kernel_wrapper_project(JET, root / "kwf", num_kernel=2, hw_quant=True),
        "faast": faast_project(root / "faast"),
    }


def _xclbin(folder: Path, abi_name: str, name: str = "model.xclbin", **kw) -> Path:
    from fpga_sim.xclbin import write_xclbin

    path = folder / name
    write_xclbin(path, kernel_abi=abi_name, project=folder, **kw)
    return path


# ------------------------------------------------------------------------------ reading xclbins
@pytest.mark.parametrize(
    "abi_name,kw",
    [
        ("krnl_rtl", {}),
        ("krnl_rtl", {"cus": 2, "platform": "xilinx_u250_xdma_201830_2"}),  # flat shell: bank0..3
        ("kernel_wrapper", {"cus": 2}),
        (
            "kernel_wrapper",
            {"cus": 2, "platform": "xilinx_u55c_gen3x16_xdma_3_202210_1", "cu_banks": ["HBM[0:3]", "HBM[4:7]"]},
        ),
        ("kernel_wrapper", {"cus": 1, "legacy": True}),
        ("faast", {"platform": "xilinx_u250_xdma_201830_2"}),
        ("krnl_rtl", {"group_sections": False}),
    ],
)
def test_the_reader_agrees_with_the_simulators_reader(projects, tmp_path, abi_name, kw):
    from fpga_sim.xclbin import read_xclbin as sim_read

    folder = tmp_path / "v"
    shutil.copytree(projects[abi_name.replace("_float", "")], folder)
    path = _xclbin(folder, abi_name, **kw)
    ours, theirs = read_xclbin(path), sim_read(path)
    assert ours.uuid == theirs.uuid == read_uuid(path)
    assert ours.platform == theirs.vbnv and ours.interface_uuid == theirs.interface_uuid
    assert ours.has_bitstream
    (kernel,) = ours.kernels.values()
    sim_kernel = theirs.kernels[kernel.name]
    assert [(a.name, a.id, a.offset, a.size, a.type) for a in kernel.args] == [
        (a.name, a.id, a.offset, a.size, a.type) for a in sim_kernel.args
    ]
    assert [cu.name for cu in ours.compute_units_of(kernel.name)] == [cu.name for cu in theirs.cus]
    # the bank (or bank group) each buffer argument of each CU is connected to: the first
    # entry of the group topology, as XRT's kernel.group_id(arg) answers
    topology = {m.index: m.tag for m in (list(theirs.groups) or list(theirs.mems))}
    for cu, sim_cu in zip(ours.compute_units_of(kernel.name), theirs.cus):
        for arg in kernel.args:
            if arg.is_buffer:
                assert arg.id is not None and cu.bank_of(arg.id) is not None
                assert cu.bank_of(arg.id).tag == topology[sim_cu.arg_mems[arg.id][0]], (cu.name, arg.name)
    assert ours.kernel_clock_mhz in (300, 500)


def test_bank_tags_and_groups(projects, tmp_path):
    folder = tmp_path / "v"
    shutil.copytree(projects["kernel_wrapper"], folder)
    flat = read_xclbin(_xclbin(folder, "krnl_rtl", "flat.xclbin", cus=2, platform="xilinx_u250_xdma_201830_2"))
    assert [b.tag for b in flat.banks[:4]] == ["bank0", "bank1", "bank2", "bank3"] and not flat.interface_uuid
    hbm = read_xclbin(
        _xclbin(
            folder,
            "kernel_wrapper",
            "hbm.xclbin",
            cus=2,
            platform="xilinx_u55c_gen3x16_xdma_3_202210_1",
            cu_banks=["HBM[0:3]", "HBM[4:7]"],
        )
    )
    assert hbm.interface_uuid  # a 2RP shell: matched by interface, not by name
    cu2 = hbm.compute_units_of("kernel_wrapper")[1]
    group = cu2.bank_of(hbm.kernels["kernel_wrapper"].arg("in").id)
    # XRT reads the group sections: the argument's bank is the memory bank group v++ made
    assert group.tag == "MBG[4:7]" and group.size == 4 * (512 << 20)


def _valid(tmp_path: Path) -> bytes:
    folder = tmp_path / "v"
    shutil.copytree(JET, folder)
    return _xclbin(folder, "krnl_rtl", cus=2).read_bytes()


def _sections(data: bytes) -> list[tuple[int, int, int]]:
    """(kind, offset, size) of each entry of the section table."""
    n = struct.unpack_from("<I", data, 304 + 144)[0]
    return [struct.unpack_from("<I20xQQ", data, 456 + 40 * i) for i in range(n)]


def _expect_refusal(tmp_path: Path, data: bytes, match: str, name: str = "damaged.xclbin") -> XclbinError:
    """``data`` must be refused with XclbinError matching ``match`` and naming the file; parsing
    it (or any other exception) fails the test."""
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(XclbinError, match=match) as refused:
        read_xclbin(path)
    assert str(path) in str(refused.value)
    with pytest.raises(XclbinError) as refused_uuid:  # the uuid alone is not read from a damaged file either
        read_uuid(path)
    assert str(path) in str(refused_uuid.value)
    return refused.value


def _parses_or_is_refused(tmp_path: Path, data: bytes, name: str) -> None:
    """For random damage, which may spare everything the reader checks (a flipped bit in the
    bitstream): parsing is allowed; any refusal must be an XclbinError naming the file."""
    path = tmp_path / name
    path.write_bytes(data)
    try:
        read_xclbin(path)
    except XclbinError as e:
        assert str(path) in str(e)


# Where a file is cut: a function of the valid file's bytes giving the cut length.
CUTS = {
    "empty": lambda d: 0,
    "inside the magic": lambda d: 5,
    "inside the key block": lambda d: 100,
    "at the header": lambda d: 304,
    "inside the header": lambda d: 304 + 100,
    "after the header": lambda d: 456,
    "inside the section table": lambda d: 456 + 40 * 3 + 17,
    "after the section table": lambda d: 456 + 40 * len(_sections(d)),
    "inside the bitstream": lambda d: _inside(d, 0),
    "inside IP_LAYOUT": lambda d: _inside(d, 8),
    "inside EMBEDDED_METADATA": lambda d: _inside(d, 2),
    "inside the last section": lambda d: max(o + s for _k, o, s in _sections(d)) - 1,
    "one byte short": lambda d: len(d) - 1,
}


def _inside(data: bytes, kind: int) -> int:
    offset, size = next((o, s) for k, o, s in _sections(data) if k == kind)
    return offset + size // 2


@pytest.mark.parametrize("where", list(CUTS))
def test_a_truncated_file_is_refused(tmp_path, where):
    data = _valid(tmp_path)
    cut = CUTS[where](data)
    assert 0 <= cut < len(data)
    if cut < 8:
        match = "is cut short|is not an xclbin"
    elif cut < 456:
        match = f"is cut short: {cut} bytes, less than the 456-byte xclbin header"
    else:
        match = f"is cut short: the header says {len(data)} bytes, the file has {cut}"
    _expect_refusal(tmp_path, data[:cut], match)


# cuts that leave no m_length to rewrite, or cut only xclbinutil's mirror data (after the sections,
# read by nothing)
NO_LENGTH_TO_REWRITE = ("empty", "inside the magic", "inside the key block", "at the header", "one byte short")


@pytest.mark.parametrize("where", [w for w in CUTS if w not in NO_LENGTH_TO_REWRITE])
def test_a_truncated_file_whose_header_length_was_rewritten_is_refused(tmp_path, where):
    """The cut file's m_length made to match it: the section table or a section is then what
    lies beyond the end, and the reader must notice that without the length's help."""
    data = _valid(tmp_path)
    cut = CUTS[where](data)
    bad = bytearray(data[:cut])
    struct.pack_into("<Q", bad, 304, cut)
    match = "the section table .* is cut short|lies beyond the end of the file|less than the 456-byte xclbin header"
    _expect_refusal(tmp_path, bytes(bad), match)


@pytest.mark.parametrize(
    "magic",
    [b"xclbin3\0", b"XCLBIN2\0", b"xclbin2 ", b"xclbin1\0", b"\0" * 8],
    ids=["xclbin3", "upper-case", "no NUL", "xclbin1", "zeros"],
)
def test_a_wrong_magic_is_refused(tmp_path, magic):
    data = bytearray(_valid(tmp_path))
    data[:8] = magic
    _expect_refusal(tmp_path, bytes(data), "is not an xclbin")


def test_text_is_not_an_xclbin(tmp_path):
    _expect_refusal(tmp_path, b"not an xclbin at all" * 40, "is not an xclbin", "text.xclbin")


def _patched(data: bytes, fmt: str, at: int, value: int) -> bytes:
    bad = bytearray(data)
    struct.pack_into(fmt, bad, at, value)
    return bytes(bad)


def _section_field(data: bytes, kind: int, field: str) -> int:
    """Byte offset of ``field`` (offset or size) in the section table entry of ``kind``."""
    index = next(i for i, (k, _o, _s) in enumerate(_sections(data)) if k == kind)
    return 456 + 40 * index + (24 if field == "offset" else 32)


@pytest.mark.parametrize(
    "damage,match",
    [
        ("length one byte more", "is cut short: the header says"),
        ("length one byte less", "the header says .* bytes, the file has .* the header is damaged or bytes were added"),
        ("length zero", "the header says 0 bytes"),
        ("bytes appended", "the header is damaged or bytes were added"),
        ("too many sections", "20000 sections"),
        ("section table beyond the file", r"the section table \(300 sections\) is cut short"),
        ("metadata offset beyond the file", "EMBEDDED_METADATA.* lies beyond the end of the file"),
        ("metadata size beyond the file", "EMBEDDED_METADATA.* lies beyond the end of the file"),
        ("offset wrapping around", "BITSTREAM.* lies beyond the end of the file"),
        ("IP_LAYOUT on the section table", "IP_LAYOUT.* overlaps the header or the section table"),
        ("MEM_TOPOLOGY on the header", "MEM_TOPOLOGY.* overlaps the header or the section table"),
        ("signature length damaged", "the signature length -7 is damaged"),
    ],
)
def test_a_damaged_header_or_section_table_is_refused(tmp_path, damage, match):
    data = _valid(tmp_path)
    n = len(data)
    bad = {
        "length one byte more": lambda: _patched(data, "<Q", 304, n + 1),
        "length one byte less": lambda: _patched(data, "<Q", 304, n - 1),
        "length zero": lambda: _patched(data, "<Q", 304, 0),
        "bytes appended": lambda: data + b"\0" * 8,
        "too many sections": lambda: _patched(data, "<I", 304 + 144, 20000),
        "section table beyond the file": lambda: _patched(data, "<I", 304 + 144, 300),
        "metadata offset beyond the file": lambda: _patched(data, "<Q", _section_field(data, 2, "offset"), n + 10),
        "metadata size beyond the file": lambda: _patched(data, "<Q", _section_field(data, 2, "size"), n),
        "offset wrapping around": lambda: _patched(data, "<Q", _section_field(data, 0, "offset"), 2**64 - 8),
        # parsed from the table, IP_LAYOUT would declare zero compute units and the file pass
        "IP_LAYOUT on the section table": lambda: _patched(data, "<Q", _section_field(data, 8, "offset"), 456),
        "MEM_TOPOLOGY on the header": lambda: _patched(data, "<Q", _section_field(data, 6, "offset"), 304),
        "signature length damaged": lambda: _patched(data, "<i", 8, -7),
    }[damage]()
    _expect_refusal(tmp_path, bad, match)


def test_a_signed_file_is_read(tmp_path):
    """xclbinutil --sign appends the signature and counts it in m_length: not damage."""
    data = bytearray(_valid(tmp_path))
    signature = b"\x30\x82" + b"s" * 300
    struct.pack_into("<i", data, 8, len(signature))
    struct.pack_into("<Q", data, 304, len(data) + len(signature))
    path = tmp_path / "signed.xclbin"
    path.write_bytes(bytes(data) + signature)
    assert read_xclbin(path).compute_units


def test_fuzzed_files_raise_only_xclbin_errors(tmp_path):
    data = _valid(tmp_path)
    rng = random.Random(18)
    for i in range(400):
        bad = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            pos = rng.randrange(304, len(bad))  # keep the magic: everything after it is hostile
            bad[pos] = rng.randrange(256)
        _parses_or_is_refused(tmp_path, bytes(bad), f"fuzz{i % 4}.xclbin")


def test_a_count_larger_than_its_section_is_refused(tmp_path):
    data = bytearray(_valid(tmp_path))
    ours = read_xclbin(tmp_path / "v" / "model.xclbin")
    assert ours.compute_units
    # find IP_LAYOUT (kind 8) in the section table and inflate its count
    n = struct.unpack_from("<I", data, 304 + 144)[0]
    for i in range(n):
        kind, _name, offset, _size = struct.unpack_from("<I16s4xQQ", data, 456 + 40 * i)
        if kind == 8:
            struct.pack_into("<i", data, offset, 10**6)
    with pytest.raises(XclbinError, match="IP_LAYOUT declares 1000000 entries"):
        (tmp_path / "count.xclbin").write_bytes(data)
        read_xclbin(tmp_path / "count.xclbin")


# ------------------------------------------------------------------------------ ABIs
@pytest.mark.parametrize("abi_name", ["krnl_rtl", "kernel_wrapper", "faast"])
def test_each_kernel_is_recognised_by_its_signature(projects, tmp_path, abi_name):
    folder = tmp_path / "v"
    shutil.copytree(projects[abi_name], folder)
    xclbin = read_xclbin(_xclbin(folder, abi_name))
    (found,) = abi.detect(xclbin)
    assert found[0].name == abi_name
    others = [n for n in abi.abi_names() if n != abi_name]
    for other in others:
        with pytest.raises(AbiError, match=f"has no {other} kernel"):
            abi.choose(xclbin, other)


def test_an_unknown_kernel_names_what_it_found(tmp_path):
    from fpga_sim.xclbin import write_xclbin

    folder = tmp_path / "v"
    shutil.copytree(JET, folder)
    path = folder / "model.xclbin"
    write_xclbin(path, kernel_abi="krnl_rtl")
    data = path.read_bytes().replace(b'name="krnl_rtl"', b'name="vadd_rtl"').replace(b"krnl_rtl:", b"vadd_rtl:")
    path.write_bytes(data)
    with pytest.raises(AbiError, match=r"no kernel has a known interface \(vadd_rtl\(int\* fifo_in"):
        abi.choose(read_xclbin(path))


def test_faast_refuses_what_its_packing_cannot_carry():
    faast = abi.get("faast")
    faast.codecs(KernelIo(16, 1, "ap_fixed<16,6>", "ap_fixed<16,6>", 16384))
    with pytest.raises(AbiError, match="at most 32 inputs per row"):
        faast.codecs(KernelIo(47, 1, "ap_fixed<16,6>", "ap_fixed<16,6>", 16384))
    with pytest.raises(AbiError, match="one 16-bit output per row"):
        faast.codecs(KernelIo(16, 5, "ap_fixed<16,6>", "ap_fixed<16,6>", 16384))
    with pytest.raises(AbiError, match=r"result_t is ap_fixed<18,8"):
        faast.codecs(KernelIo(16, 1, "ap_fixed<16,6>", "ap_fixed<18,8>", 16384))
    with pytest.raises(AbiError, match="16384 rows per call, not 100"):
        faast.codecs(KernelIo(16, 1, "ap_fixed<16,6>", "ap_fixed<16,6>", 100))


def test_each_flow_wraps_its_kind_of_project(projects):
    rtl = Hls4mlProject.load(projects["krnl_rtl"])
    vitis = Hls4mlProject.load(projects["kernel_wrapper"])
    plain = Hls4mlProject.load(projects["faast"])
    assert abi.get("krnl_rtl").io_for(rtl) == KernelIo(16, 5, "float", "float")
    with pytest.raises(AbiError, match="krnl_rtl is built from VivadoAccelerator projects"):
        abi.get("krnl_rtl").io_for(vitis)
    with pytest.raises(AbiError, match="kernel_wrapper is built from VitisAccelerator"):
        abi.get("kernel_wrapper").io_for(rtl)
    io = abi.get("kernel_wrapper").io_for(vitis)
    assert (io.input, io.output, io.rows_per_call) == ("ap_fixed<16,6>", "ap_fixed<16,6>", None)
    hw_quant = abi.get("kernel_wrapper").io_for(Hls4mlProject.load(projects["kernel_wrapper_float"]))
    assert (hw_quant.input, hw_quant.output) == ("float", "float")
    assert abi.get("faast").io_for(plain).rows_per_call == 16384
    with pytest.raises(AbiError, match="FaaST wraps a plain hls4ml io_parallel project"):
        abi.get("faast").io_for(rtl)


def test_the_legacy_kernel_wrapper_takes_the_projects_batchsize(projects, tmp_path):
    from fpga_sim.projects import kernel_wrapper_project

    folder = kernel_wrapper_project(JET, tmp_path / "legacy", batchsize=512)
    xclbin = read_xclbin(_xclbin(folder, "kernel_wrapper", legacy=True))
    cls, kernel = abi.choose(xclbin)
    io = cls.io_for(Hls4mlProject.load(folder), kernel)
    assert io.rows_per_call == 512
    kw = cls(io, kernel)
    assert kw.call_rows(10) == 512 and kw.arguments("I", "O", 512) == ["I", "O"]
    with pytest.raises(AbiError, match="must record rows_per_call"):
        cls(KernelIo(16, 5, io.input, io.output), kernel)


def test_a_hw_quant_project_beside_a_native_kernel_is_refused(projects, tmp_path):
    """The element type v++ recorded (ap_fixed<16, 6> const *) contradicts float elements."""
    native = tmp_path / "native"
    shutil.copytree(projects["kernel_wrapper"], native)
    xclbin = read_xclbin(_xclbin(native, "kernel_wrapper"))
    cls, kernel = abi.choose(xclbin)
    with pytest.raises(AbiError, match="the project sends floats"):
        cls(KernelIo(16, 5, "float", "float"), kernel)
    with pytest.raises(AbiError, match="project's element type is ap_fixed<18,8>"):
        cls(KernelIo(16, 5, "ap_fixed<18,8>", "ap_fixed<16,6>"), kernel)


# ------------------------------------------------------------------------------ card.json
@pytest.fixture
def packed(projects, tmp_path):
    """A version folder as `fpgaserve pack --xclbin` leaves it: project, xclbin, card.json."""
    folder = tmp_path / "packed"
    shutil.copytree(projects["krnl_rtl"], folder)
    xclbin = _xclbin(folder, "krnl_rtl", cus=2)
    CardManifest.for_project(Hls4mlProject.load(folder), "krnl_rtl", read_xclbin(xclbin)).write(folder)
    return folder


def test_a_packed_version_binds_without_warnings(packed):
    binding = resolve(Hls4mlProject.load(packed), packed, packed / "model.xclbin")
    assert binding.warnings == () and binding.abi_class.name == "krnl_rtl"
    manifest = CardManifest.read(packed)
    assert manifest is not None and manifest.xclbin is not None
    assert manifest.xclbin.compute_units == ("krnl_rtl_1", "krnl_rtl_2")
    assert CardManifest.from_json(manifest.to_json(), "again") == manifest


def test_a_version_without_card_json_binds_with_a_warning(projects, tmp_path):
    folder = tmp_path / "bare"
    shutil.copytree(projects["krnl_rtl"], folder)
    _xclbin(folder, "krnl_rtl")
    binding = resolve(Hls4mlProject.load(folder), folder, folder / "model.xclbin")
    (warning,) = binding.warnings
    assert "nothing ties model.xclbin to the hls4ml project" in warning and "--xclbin" in warning


def test_a_swapped_xclbin_is_refused(packed):
    from fpga_sim.xclbin import write_xclbin

    recorded = CardManifest.read(packed).xclbin.uuid
    swapped = write_xclbin(packed / "model.xclbin", kernel_abi="krnl_rtl", project=packed)
    with pytest.raises(
        ManifestError, match=f"records xclbin model.xclbin with uuid {recorded}, but model.xclbin has uuid {swapped}"
    ):
        resolve(Hls4mlProject.load(packed), packed, packed / "model.xclbin")


def test_a_changed_project_is_refused(packed):
    weights = next((packed / "firmware" / "weights").glob("*.txt"))
    weights.write_text(weights.read_text().replace("0", "1", 1))
    with pytest.raises(ManifestError, match="the project changed since the xclbin was packed"):
        resolve(Hls4mlProject.load(packed), packed, packed / "model.xclbin")


@pytest.mark.parametrize(
    "edit,message",
    [
        ({"n_in": 15}, "records n_in=15 n_out=5 float/float rows_per_call=None, but the hls4ml project .* has n_in=16"),
        ({"input": "ap_fixed<16,6>"}, "records n_in=16 n_out=5 ap_fixed<16,6>/float"),
        ({"kernel_abi": "faast"}, "has no faast kernel"),
        ({"format": 2}, "format 2"),
        ({"n_out": "5"}, "'n_out' must be a int"),
        ({"xclbin": {"file": "../../etc/passwd", "uuid": "0"}}, "must be a file name in the version folder"),
    ],
)
def test_card_json_that_disagrees_is_refused_naming_both_sides(packed, edit, message):
    path = packed / MANIFEST
    data = json.loads(path.read_text())
    data.update(edit)
    path.write_text(json.dumps(data))
    with pytest.raises(BackendError, match=message):
        resolve(Hls4mlProject.load(packed), packed, packed / "model.xclbin")


def test_card_json_that_is_not_json_is_refused(packed):
    (packed / MANIFEST).write_text("{not json")
    with pytest.raises(ManifestError, match="is not JSON"):
        CardManifest.read(packed)


def test_pack_time_checks_refuse_a_project_the_abi_cannot_carry(projects):
    with pytest.raises(AbiError, match="at most 32 inputs per row"):
        CardManifest.for_project(Hls4mlProject.load(_facile_as_plain(projects)), "faast")


def _facile_as_plain(projects) -> Path:
    """FACILE's firmware as a plain project (its 47 inputs do not fit a 512-bit beat)."""
    folder = projects["faast"].parent / "facile_plain"
    if not folder.exists():
        from fpga_sim.projects import kernel_wrapper_project

        kernel_wrapper_project(FACILE, folder)
        config = folder / "hls4ml_config.yml"
        config.write_text(config.read_text().replace("Backend: VitisAccelerator", "Backend: Vivado"))
    return folder
