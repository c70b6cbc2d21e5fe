"""The version folder: the one place its files are put together.

Contract: :class:`VersionContents` lists everything a version folder receives;
:func:`write_version` writes exactly that into an empty folder, and nothing else in pack
writes into a version folder (``pipeline.pack`` then moves the finished folder into the
repository). Layout::

    hls4ml_config.yml, firmware/     the project (project_files.keep_model_files)
    model.onnx                       the float reference, when one was made or given
    <model>.xclbin | .awsxclbin      the bitstream, when one was built, given or found
    reports/<top>_csynth.xml         hls4ml's HLS synthesis report, when the project has one
    card.json                        the kernel ABI, N_IN/N_OUT, element types, firmware hash
                                     and the xclbin's identity (kernel_abi.record), written
                                     last: it describes the other files as they are here

:func:`write_version` returns the :class:`CardManifest` it wrote (config.pbtxt sizes the
instance group from its compute units).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from fpgaserve.backends.hls4ml.card.manifest import CardManifest

from . import kernel_abi, project_files
from . import xclbin as xclbins
from .request import DEFAULT_KERNEL_ABI

REFERENCE_FILE = "model.onnx"
REPORTS_DIR = "reports"


@dataclass
class VersionContents:
    model_name: str
    #: the hls4ml project after its fixes (staging folder)
    project: Path
    vendor_templates: bool = False
    #: the float reference to ship as model.onnx
    reference: Path | None = None
    #: the bitstream to ship (xclbin.choose decided which)
    xclbin: Path | None = None
    #: hls4ml's HLS synthesis report (project_files.synthesis_report)
    synthesis_report: Path | None = None
    #: the kernel ABI the firmware is packed for (card.json)
    kernel_abi: str = DEFAULT_KERNEL_ABI
    #: where the project came from, as messages name it (PackRequest.source_description)
    source: str = "the project"


def write_version(contents: VersionContents, out: Path) -> CardManifest:
    out.mkdir(parents=True, exist_ok=True)
    project_files.keep_model_files(contents.project, out, contents.vendor_templates)
    if contents.reference is not None:
        shutil.copyfile(contents.reference, out / REFERENCE_FILE)
    packed = None
    if contents.xclbin is not None:
        packed = out / xclbins.packed_name(contents.model_name, contents.xclbin)
        shutil.copyfile(contents.xclbin, packed)
    if contents.synthesis_report is not None:
        # the simulated card's timing model and later tooling read latency and II from it
        (out / REPORTS_DIR).mkdir(exist_ok=True)
        shutil.copyfile(contents.synthesis_report, out / REPORTS_DIR / contents.synthesis_report.name)
    # from the folder as written: the firmware hash a load compares is of these files (the
    # template library left out), and the xclbin file named is the packed copy
    return kernel_abi.record(out, contents.kernel_abi, packed, contents.source)
