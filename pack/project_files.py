"""Which files of an hls4ml project a pack takes, and the fixes it applies to them.

An hls4ml project folder holds two kinds of things: what hls4ml's writer wrote (the config,
``firmware/``, the kernel RTL in ``src/``, test vectors in ``tb_data/``, tcl scripts and
drivers at the top) and what the Xilinx tools left there when the project was built
(``<name>_prj/``, ``<name>_vivado_accelerator/``, ``hls4ml_IP/``, ``xo_files/``,
``xclbin_files/``, ``build_hw_*/``, ``_x/``, ``.Xil/``, logs: many GB). Only the first kind is
ever copied.

Contract:

* :func:`copy_project` copies a user's project (``--hls4ml-project``) into the staging folder:
  the writer's output only, never a tool's run folder.
* :func:`fix_accelerator_types` rewrites hls4ml 1.3.0's invalid ``typedef fixed<...>`` lines
  in ``firmware/*_axi.h`` in place; running it twice changes nothing.
* :func:`normalize_config` makes ``hls4ml_config.yml`` reproducible (no absolute paths, no
  random stamp, no pickled source model).
* :func:`add_accelerator_config` adds an ``AcceleratorConfig`` block to a project whose
  config has none (the kernel_wrapper project the Vitis backend writes).
* :func:`synthesis_report` finds the HLS synthesis report (``csynth.xml``) of a built project.
* :func:`keep_model_files` copies into the version folder the project files it keeps: the
  config and the model's own firmware, or with ``vendor_templates`` everything the writer wrote.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

import yaml

from fpgaserve.backends.hls4ml.csim import fix_axi_typedefs
from fpgaserve.backends.hls4ml.project import (
    CONFIG_FILE,
    GENERATED_TEMPLATE_FILE,
    TEMPLATE_LIBRARIES,
    installed_templates_dir,
    load_config,
)

from .request import PackError

#: folders hls4ml's VivadoAccelerator writer creates (everything else in a project folder that
#: is a folder was made by a tool run)
WRITER_FOLDERS = ("firmware", "src", "tb_data")
#: top-level files of the writer's kinds: scripts, sources, drivers, configs
_WRITER_SUFFIXES = {".tcl", ".py", ".sh", ".cpp", ".h", ".hpp", ".yml", ".yaml", ".cfg", ".ini", ".json"}
_WRITER_NAMES = {"Makefile"}
#: compiled files the C-simulation or a tool left inside the writer's folders
_BUILD_PRODUCTS = ("*.so", "*.o", "__pycache__", ".Xil", "*.log", "*.jou")


def copy_project(src: Path, dst: Path) -> None:
    if not (src / CONFIG_FILE).is_file():
        raise PackError(f"{src} is not an hls4ml project (no {CONFIG_FILE})")
    if not (src / "firmware").is_dir():
        raise PackError(f"{src} is not an hls4ml project (no firmware/)")
    dst.mkdir(parents=True, exist_ok=True)
    for path in sorted(src.iterdir()):
        if path.is_dir() and path.name in WRITER_FOLDERS:
            shutil.copytree(path, dst / path.name, ignore=shutil.ignore_patterns(*_BUILD_PRODUCTS))
        elif path.is_file() and (path.suffix in _WRITER_SUFFIXES or path.name in _WRITER_NAMES):
            shutil.copyfile(path, dst / path.name)


def fix_accelerator_types(root: Path) -> None:
    """hls4ml 1.3.0 writes ``typedef fixed<16,6,TRN,WRAP,0> T_in;`` into myproject_axi.h for
    ap_fixed I/O (its YAML spelling of the type), which is not C++; the project gets the same
    rewrite the C-simulation build applies, so that HLS can synthesize it as well."""
    for header in (root / "firmware").glob("*_axi.h"):
        text = header.read_text()
        fixed = fix_axi_typedefs(text)
        if fixed != text:
            header.write_text(fixed)


def normalize_config(root: Path) -> None:
    """Make hls4ml_config.yml reproducible: hls4ml writes the absolute output folder and a
    random Stamp; the folder becomes "." and the Stamp a hash of the firmware sources."""
    path = root / CONFIG_FILE
    text = path.read_text()
    digest = hashlib.sha256()
    for p in sorted((root / "firmware").rglob("*")):
        rel = p.relative_to(root / "firmware")
        if p.is_file() and rel.parts[0] not in TEMPLATE_LIBRARIES and p.suffix != ".so":
            digest.update(rel.as_posix().encode() + b"\0" + p.read_bytes())
    # hls4ml also pickles the source model into the file (PytorchModel: !!python/object...):
    # executable payload, tied to the user's Python classes, and not needed to serve; drop it
    text = re.sub(r"(?ms)^(?:PytorchModel|KerasModel|OnnxModel): !!python/.*?(?=^\S)", "", text)
    text = re.sub(r"(?m)^OutputDir: .*$", "OutputDir: .", text)
    text = re.sub(r"(?m)^Stamp: .*$", f"Stamp: {digest.hexdigest()[:8]}", text)
    path.write_text(text)


def add_accelerator_config(root: Path, block: dict) -> None:
    """Append ``AcceleratorConfig: <block>`` to hls4ml_config.yml. Appended as text rather than
    re-dumped: the rest of the file stays exactly as hls4ml wrote it (its python tags included,
    which normalize_config removes later), and a top-level key may follow any other."""
    path = root / CONFIG_FILE
    text = path.read_text()
    if "AcceleratorConfig" in load_config(path):
        raise PackError(f"{path} already has an AcceleratorConfig; not adding another")
    if text and not text.endswith("\n"):
        text += "\n"
    path.write_text(text + yaml.safe_dump({"AcceleratorConfig": block}, sort_keys=False))


def synthesis_report(root: Path) -> Path | None:
    """``<name>_prj/<solution>/syn/report/<top>_csynth.xml`` as hls4ml's parse_vivado_report
    finds it: the top is ``<name>_axi`` for VivadoAccelerator (the wrapper is what HLS
    synthesizes), the solution the first one the HLS project lists (usually solution1). A
    VitisAccelerator project is synthesized by ``v++ -c`` inside its build folder instead."""
    config = load_config(root / CONFIG_FILE)
    name = str(config.get("ProjectName") or "myproject")
    backend = re.sub(r"[^a-z]", "", str(config.get("Backend") or "").lower())
    if backend == "vitisaccelerator":
        return _kernel_wrapper_report(root)
    prj = root / f"{name}_prj"
    if not prj.is_dir():
        return None
    top = f"{name}_axi" if backend == "vivadoaccelerator" else name
    solutions = []
    for app in ("vivado_hls.app", "hls.app"):
        if (prj / app).is_file():
            solutions = re.findall(r'<solution\s+name="([^"]+)"', (prj / app).read_text(errors="replace"))
            break
    for solution in [*solutions, *sorted(p.name for p in prj.glob("solution*"))]:
        report = prj / solution / "syn" / "report" / f"{top}_csynth.xml"
        if report.is_file():
            return report
    return None


def _kernel_wrapper_report(root: Path) -> Path | None:
    """The csynth report of kernel_wrapper after PR #991's ``make`` (target hw): ``v++ -c`` keeps
    the HLS project under its --temp_dir, ``build_hw_rel/xo``, as
    ``<kernel>/<kernel>/solution/syn/report/<kernel>_csynth.xml`` (UG1393's layout of v++'s
    temporary folder; not checked against a real build)."""
    temp = root / "build_hw_rel" / "xo"
    if not temp.is_dir():
        return None
    found = sorted(p for p in temp.rglob("kernel_wrapper_csynth.xml") if p.parent.parts[-2:] == ("syn", "report"))
    return found[0] if found else None


def keep_model_files(root: Path, out: Path, vendor_templates: bool) -> None:
    if vendor_templates:
        # hls4ml's full output: what the writer wrote, never a tool's run folder
        copy_project(root, out)
        return
    shutil.copyfile(root / CONFIG_FILE, out / CONFIG_FILE)
    shutil.copytree(
        root / "firmware",
        out / "firmware",
        ignore=lambda d, names: [n for n in names if n in TEMPLATE_LIBRARIES or n.endswith((".so", ".o"))],
    )
    # convolutions' buffer fillers are generated into nnet_utils: keep that file when it is not
    # the installed library's generic one (the C-simulation lays it over the library)
    generated = root / "firmware" / GENERATED_TEMPLATE_FILE
    generic = installed_templates_dir() / GENERATED_TEMPLATE_FILE
    if generated.is_file() and (not generic.is_file() or generated.read_bytes() != generic.read_bytes()):
        (out / "firmware" / "nnet_utils").mkdir(exist_ok=True)
        shutil.copyfile(generated, out / "firmware" / GENERATED_TEMPLATE_FILE)
