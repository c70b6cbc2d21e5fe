"""xclbins: building one with hls4ml's own flow, and choosing the one a pack brings along.

Contract:

* :func:`build` runs the hls4ml flow of the kernel ABI on a project already written and fixed
  on disk (hls4ml's ``build()`` reads the files there and does not rewrite them) and returns
  the xclbin it produced or raises PackError; hls4ml ignores the tools' exit codes, so the
  files each step must leave behind are the only signs of success. The caller checked the
  tools first (toolchain.check_*_tools).

  - krnl_rtl: hls4ml 1.3.0's VivadoAccelerator flow: HLS synthesis and IP export
    (``vivado_hls``), kernel packaging (``vivado``), link (``v++``);
    ``xclbin_files/<name>_kernel.xclbin``.
  - kernel_wrapper: the VitisAccelerator backend's (PR #991) ``build(target='hw')``, which
    runs ``make all`` in the project (``v++ -c`` then ``v++ -l``);
    ``build_hw_rel/kernel_wrapper.xclbin``.
  - faast: none; FaaST's own Makefile builds ``alveo_hls4ml.xclbin``.
* :func:`find` lists every ``*.xclbin`` / ``*.awsxclbin`` below a project folder.
* :func:`choose` decides which one file, if any, a pack brings along: ``--xclbin FILE``, else
  the one the build produced, else the only one found; several found -> a warning listing
  them and none packed, since picking one silently could serve a stale bitstream.
* :func:`given` checks ``--xclbin FILE``; :func:`check_file` refuses a file that is not an
  xclbin (no ``xclbin2`` magic).
* :func:`packed_name`: the file's name in the version folder (``<model>.xclbin`` or
  ``<model>.awsxclbin``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from .request import PackError

log = logging.getLogger("fpgaserve.pack")

SUFFIXES = (".xclbin", ".awsxclbin")
#: XRT's axlf container (xclbin.h): "xclbin2" and a NUL; AWS's .awsxclbin is the same container
MAGIC = b"xclbin2\0"


def build(hls_model: Any, kernel_abi: str, platform: str) -> Path:
    if kernel_abi == "krnl_rtl":
        return _build_krnl_rtl(hls_model, platform)
    if kernel_abi == "kernel_wrapper":
        return _build_kernel_wrapper(hls_model)
    # pipeline.pack refuses --build-xclbin for the other ABIs before converting anything
    raise PackError(f"--build-xclbin does not build {kernel_abi} kernels")


def _build_kernel_wrapper(hls_model: Any) -> Path:
    out = Path(hls_model.config.get_output_dir()).resolve()
    # kernel_abi.check_build made sure this backend's build() takes a target
    hls_model.build(target="hw")
    built = out / "build_hw_rel" / "kernel_wrapper.xclbin"
    if not built.is_file():
        raise PackError(
            f"the VitisAccelerator build (`make all`, TARGET=hw) produced no {built.name} in {built.parent}; see the "
            f"v++ logs under {built.parent}"
        )
    return built


def _build_krnl_rtl(hls_model: Any, platform: str) -> Path:
    out = Path(hls_model.config.get_output_dir()).resolve()
    name = hls_model.config.get_project_name()
    hls_model.build(csim=False, synth=True, export=True)
    # make_xclbin passes this folder to v++ as --user_ip_repo_paths; without it the link fails later
    ip = out / f"{name}_prj" / "solution1" / "impl" / "ip"
    if not ip.is_dir():
        raise PackError(
            f"HLS synthesis/export left no IP in {ip}; see vivado_hls.log in {out} (hls4ml ignores the tool's "
            "exit status)"
        )
    hls_model.config.backend.make_xclbin(hls_model, platform)
    built = out / "xclbin_files" / f"{name}_kernel.xclbin"
    if not built.is_file():
        raise PackError(f"the xclbin build produced no {built.name} in {built.parent}; see the vivado/v++ logs there")
    return built


def find(root: Path) -> list[Path]:
    # rglob does not descend into symlinked folders, so a link to a shared build area is not searched
    return sorted(p for p in root.rglob("*") if p.suffix in SUFFIXES and p.is_file())


def check_file(path: Path) -> None:
    try:
        with open(path, "rb") as f:
            head = f.read(len(MAGIC))
    except OSError as e:
        raise PackError(f"cannot read the xclbin {path}: {e.strerror}") from None
    if head != MAGIC:
        raise PackError(f"{path} is not an xclbin: it does not start with the axlf magic 'xclbin2\\0'")


def given(explicit: str) -> Path:
    """``--xclbin FILE``, checked: a .xclbin/.awsxclbin that exists and is an axlf container."""
    path = Path(explicit)
    if path.suffix not in SUFFIXES:
        raise PackError(f"--xclbin {explicit}: expected a .xclbin or .awsxclbin file")
    if not path.is_file():
        raise PackError(f"--xclbin {explicit}: no such file")
    check_file(path)
    return path


def choose(explicit: str | None, built: Path | None, found: list[Path], root: Path | None) -> Path | None:
    """The xclbin to pack (see the module docstring); ``root`` is where ``found`` was searched."""
    if explicit:
        return given(explicit)
    if built is not None:
        check_file(built)
        return built
    if len(found) > 1:
        names = "\n".join(f"  {p.relative_to(root) if root else p}" for p in found)
        log.warning("%s holds %d xclbins; none is packed (choose one with --xclbin FILE):\n%s", root, len(found), names)
        return None
    if found:
        try:
            check_file(found[0])
        except PackError as e:
            log.warning("not packing %s: %s", found[0], e)
            return None
        return found[0]
    return None


def packed_name(model_name: str, path: Path) -> str:
    return f"{model_name}{path.suffix}"
