"""``card.json``: what ties an xclbin to the hls4ml project next to it.

Nothing inside an xclbin says how many values a row has or what their types are: N_IN, N_OUT
and the precisions come from the project folder. A stale project beside a different xclbin
would hang the kernel or return garbage on a card, so ``fpgaserve pack`` records, in the
version folder, what the xclbin was built from and how its kernel is called::

    {
      "format": 1,
      "kernel_abi": "krnl_rtl",          // abi/ registry name
      "kernel": "krnl_rtl",              // the kernel in the xclbin
      "n_in": 47, "n_out": 1,
      "input": "float", "output": "float",   // what crosses (see abi.KernelIo)
      "rows_per_call": null,             // fixed rows per call (FaaST, legacy kernel_wrapper)
      "firmware_sha256": "...",          // Hls4mlProject.firmware_hash() when packed
      "xclbin": {"file": "facile.xclbin", "uuid": "...", "platform": "...",
                 "interface_uuid": "...", "compute_units": ["krnl_rtl_1"]},   // null: none packed
      "written_by": "fpgaserve pack"
    }

:func:`resolve` is what a load does with it: the xclbin must be the one recorded (UUID), its
kernel must have the recorded ABI's signature, and the project must still be the one the
xclbin was built from (firmware hash, N_IN/N_OUT, precisions); any mismatch is refused with
a message naming both sides. A version without card.json (an xclbin dropped next to a
project by hand) is bound by detection alone, with a warning that nothing ties the two.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ...base import BackendError
from ..project import Hls4mlProject
from . import abi
from .abi import AbiError, KernelAbi, KernelIo
from .axlf import Kernel, Xclbin, read_xclbin

MANIFEST = "card.json"
FORMAT = 1
MAX_BYTES = 1 << 20


class ManifestError(BackendError):
    """card.json is malformed, or disagrees with the xclbin or the project."""


@dataclass(frozen=True)
class XclbinRecord:
    file: str
    uuid: str
    platform: str
    interface_uuid: str
    compute_units: tuple[str, ...]

    @classmethod
    def of(cls, xclbin: Xclbin, kernel: str) -> XclbinRecord:
        return cls(
            os.path.basename(xclbin.path),
            xclbin.uuid,
            xclbin.platform,
            xclbin.interface_uuid,
            tuple(cu.name for cu in xclbin.compute_units_of(kernel)),
        )


@dataclass(frozen=True)
class CardManifest:
    kernel_abi: str
    kernel: str
    io: KernelIo
    firmware_sha256: str
    xclbin: XclbinRecord | None = None
    written_by: str = ""

    # ------------------------------------------------------------------ files
    @classmethod
    def read(cls, version_dir: str | os.PathLike) -> CardManifest | None:
        """The version folder's card.json, None when there is none."""
        path = Path(version_dir) / MANIFEST
        if not path.is_file():
            return None
        try:
            if path.stat().st_size > MAX_BYTES:
                raise ManifestError(f"{path} is larger than {MAX_BYTES} bytes")
            data = json.loads(path.read_text())
        except OSError as e:
            raise ManifestError(f"cannot read {path}: {e.strerror}") from None
        except ValueError as e:
            raise ManifestError(f"{path} is not JSON: {e}") from None
        return cls.from_json(data, str(path))

    @classmethod
    def from_json(cls, data, where: str) -> CardManifest:
        if not isinstance(data, dict):
            raise ManifestError(f"{where} must hold a JSON object")
        if data.get("format") != FORMAT:
            raise ManifestError(f"{where}: format {data.get('format')!s} (this fpgaserve reads format {FORMAT})")

        def field(name, kind, optional=False):
            value = data.get(name)
            if value is None and optional:
                return None
            if not isinstance(value, kind) or isinstance(value, bool):
                raise ManifestError(f"{where}: '{name}' must be a {kind.__name__}")
            return value

        io = KernelIo(
            n_in=field("n_in", int),
            n_out=field("n_out", int),
            input=field("input", str),
            output=field("output", str),
            rows_per_call=field("rows_per_call", int, optional=True),
        )
        if io.n_in < 1 or io.n_out < 1 or (io.rows_per_call is not None and io.rows_per_call < 1):
            raise ManifestError(f"{where}: n_in, n_out and rows_per_call must be positive")
        record = None
        x = data.get("xclbin")
        if x is not None:
            if not isinstance(x, dict):
                raise ManifestError(f"{where}: 'xclbin' must be an object or null")
            try:
                units = tuple(str(u) for u in x.get("compute_units") or ())
                record = XclbinRecord(
                    str(x["file"]), str(x["uuid"]), str(x.get("platform", "")), str(x.get("interface_uuid", "")), units
                )
            except KeyError as e:
                raise ManifestError(f"{where}: 'xclbin' lacks {e}") from None
            if os.path.basename(record.file) != record.file or record.file in ("", ".", ".."):
                raise ManifestError(f"{where}: xclbin file '{record.file}' must be a file name in the version folder")
        return cls(
            kernel_abi=field("kernel_abi", str),
            kernel=field("kernel", str),
            io=io,
            firmware_sha256=field("firmware_sha256", str),
            xclbin=record,
            written_by=str(data.get("written_by", "")),
        )

    def to_json(self) -> dict:
        return {
            "format": FORMAT,
            "kernel_abi": self.kernel_abi,
            "kernel": self.kernel,
            "n_in": self.io.n_in,
            "n_out": self.io.n_out,
            "input": self.io.input,
            "output": self.io.output,
            "rows_per_call": self.io.rows_per_call,
            "firmware_sha256": self.firmware_sha256,
            "xclbin": None
            if self.xclbin is None
            else {
                "file": self.xclbin.file,
                "uuid": self.xclbin.uuid,
                "platform": self.xclbin.platform,
                "interface_uuid": self.xclbin.interface_uuid,
                "compute_units": list(self.xclbin.compute_units),
            },
            "written_by": self.written_by,
        }

    def write(self, version_dir: str | os.PathLike) -> Path:
        path = Path(version_dir) / MANIFEST
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        return path

    # ------------------------------------------------------------------ making one
    @classmethod
    def for_project(cls, project: Hls4mlProject, abi_name: str, xclbin: Xclbin | None = None) -> CardManifest:
        """What pack records: the project built for ``abi_name``, with the xclbin when there is one
        (its kernel must have that ABI's signature and fit the project)."""
        abi_cls = abi.get(abi_name)
        kernel: Kernel | None = None
        if xclbin is not None:
            abi_cls, kernel = abi.choose(xclbin, abi_name)
        io = abi_cls.io_for(project, kernel)
        abi_cls.codecs(io)  # the layout checks (widths, sizes) now, not at the first load
        if kernel is not None:
            abi_cls(io, kernel)
        return cls(
            kernel_abi=abi_cls.name,
            kernel=kernel.name if kernel is not None else abi_cls.kernel_names[0],
            io=io,
            firmware_sha256=project.firmware_hash(),
            xclbin=XclbinRecord.of(xclbin, kernel.name) if xclbin is not None and kernel is not None else None,
            # no version number: a bundled repository's card.json must not change with every release
            written_by="fpgaserve pack",
        )


@dataclass(frozen=True)
class CardBinding:
    """How one model version runs on a card: its xclbin, kernel, ABI and element layout."""

    xclbin: Xclbin
    kernel: Kernel
    abi_class: type[KernelAbi]
    io: KernelIo
    manifest: CardManifest | None
    warnings: tuple[str, ...] = ()

    def make_abi(self) -> KernelAbi:
        """A fresh ABI object (codec scratch is per runner)."""
        return self.abi_class(self.io, self.kernel)

    def describe(self) -> str:
        return f"{self.abi_class.name} kernel {self.kernel.name} of {self.xclbin.describe()}"


def resolve(project: Hls4mlProject, version_dir: str | os.PathLike, xclbin_path: str | os.PathLike) -> CardBinding:
    """Bind the version's project and xclbin (see the module docstring); ManifestError/AbiError/XclbinError."""
    xclbin = read_xclbin(xclbin_path)
    manifest = CardManifest.read(version_dir)
    name = os.path.basename(str(xclbin_path))
    if manifest is None:
        abi_cls, kernel = abi.choose(xclbin)
        io = _io_for(abi_cls, project, kernel, name)
        warning = (
            f"{version_dir} has no {MANIFEST}: nothing ties {name} to the hls4ml project beside it (found a "
            f"{abi_cls.name} kernel and trusted the project's N_IN={io.n_in}, N_OUT={io.n_out}, "
            f"{io.input}/{io.output}); "
            "record them with `fpgaserve pack --hls4ml-project <dir> --xclbin <file>`"
        )
        binding = CardBinding(xclbin, kernel, abi_cls, io, None, (warning,))
    else:
        where = str(Path(version_dir) / MANIFEST)
        record = manifest.xclbin
        if record is not None and record.uuid != xclbin.uuid:
            raise ManifestError(
                f"{where} records xclbin {record.file} with uuid {record.uuid}, but {name} has uuid {xclbin.uuid}: "
                "the xclbin was replaced after packing; pack it again with --xclbin"
            )
        firmware = project.firmware_hash()
        if manifest.firmware_sha256 != firmware:
            raise ManifestError(
                f"{where} records firmware sha256 {manifest.firmware_sha256[:16]}..., but the hls4ml project "
                f"{project.path} now hashes to {firmware[:16]}...: the project changed since the xclbin was packed"
            )
        abi_cls, kernel = abi.choose(xclbin, manifest.kernel_abi, manifest.kernel)
        derived = _io_for(abi_cls, project, kernel, name)
        if not manifest.io.same_as(derived) or manifest.io.rows_per_call != derived.rows_per_call:
            raise ManifestError(
                f"{where} records n_in={manifest.io.n_in} n_out={manifest.io.n_out} {manifest.io.input}/"
                f"{manifest.io.output} rows_per_call={manifest.io.rows_per_call}, but the hls4ml project "
                f"{project.path} has n_in={derived.n_in} n_out={derived.n_out} {derived.input}/{derived.output} "
                f"rows_per_call={derived.rows_per_call}"
            )
        binding = CardBinding(xclbin, kernel, abi_cls, manifest.io, manifest)
    try:
        binding.make_abi()
    except AbiError as e:
        raise AbiError(f"{name}: {e}") from None
    return binding


def _io_for(abi_cls: type[KernelAbi], project: Hls4mlProject, kernel: Kernel, name: str) -> KernelIo:
    try:
        return abi_cls.io_for(project, kernel)
    except AbiError as e:
        raise AbiError(f"{name} has a {abi_cls.name} kernel ({abi_cls.title}), but {e}") from None


__all__ = ["MANIFEST", "CardBinding", "CardManifest", "ManifestError", "XclbinRecord", "resolve"]
