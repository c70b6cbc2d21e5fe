"""The kernel ABI a pack is for: what is checked before anything is converted, whether the
project (and the xclbin) fit it, and the ``card.json`` that records it.

A version folder serves on a card through one kernel interface (``backends/hls4ml/card/abi``:
krnl_rtl, kernel_wrapper, faast). Nothing in an xclbin says how many values a row has or
what their types are, so pack records them next to the xclbin (``card.json``, see
``card/manifest.py``), and a load refuses a version whose xclbin or project changed since.

Contract (every refusal is a PackError naming both sides and what to do):

* :func:`abi_class` is the request's ABI (``--kernel-abi``).
* :func:`check_settings`: the conversion settings fit the ABI (``--io-precision``,
  ``--compute-units``, ``--batchsize``); checked before anything is converted.
* :func:`check_build`: ``--build-xclbin`` can build the ABI's kernel on this host (the hls4ml
  backend that builds it, the tools, their environment); before anything is converted.
* :func:`check_xclbin_file`: an xclbin's kernel has the ABI's name and argument signature
  (``--xclbin FILE``: before anything is converted).
* :func:`check_project`: a written project fits the ABI, and the xclbin when one is given
  (N_IN/N_OUT and element types the kernel can carry); before any build, and again once the
  xclbin to pack is known.
* :func:`record` writes ``card.json`` into a finished version folder, computed from the files
  there (the firmware hash is of the files as packed) and from the packed xclbin.
"""

from __future__ import annotations

import inspect
from pathlib import Path

from fpgaserve.backends.hls4ml.card import abi
from fpgaserve.backends.hls4ml.card.abi import AbiError, KernelAbi, KernelIo
from fpgaserve.backends.hls4ml.card.axlf import Xclbin, XclbinError, read_xclbin
from fpgaserve.backends.hls4ml.card.manifest import CardManifest, ManifestError
from fpgaserve.backends.hls4ml.project import Hls4mlProject, hls4ml_version

from . import hls_config, toolchain
from .request import IO_STREAM_ABIS, IO_TYPES, NATIVE, PackError, PackRequest

#: how to convert for FaaST's kernel: its fixed packing (one row per 512-bit beat of 16-bit
#: fields, 32 one-field results per beat) leaves no other choice
FAAST_NEEDS = (
    "FaaST's alveo_hls4ml takes a plain io_parallel project with 16-bit input_t and result_t, at most 32 inputs "
    "and one output: convert with e.g. --granularity model --default-precision 'ap_fixed<16,6>' (every type 16 bits)"
)
PR_991 = "https://github.com/fastmachinelearning/hls4ml/pull/991"


def abi_class(req: PackRequest) -> type[KernelAbi]:
    try:
        return abi.get(req.kernel_abi)
    except AbiError as e:
        raise PackError(f"--kernel-abi: {e}") from None


# ---------------------------------------------------------------------------------- settings
def check_settings(req: PackRequest) -> None:
    cls = abi_class(req)
    for flag, value in (("--compute-units", req.compute_units), ("--batchsize", req.batchsize)):
        if value is not None and value < 1:
            raise PackError(f"{flag} must be at least 1, not {value}")
    if req.hls4ml_project:
        # the project was converted already: its files say these, and pack never rewrites them
        given = _given(req, ("--io-precision", req.io_precision), ("--io-type", req.io_type))
        if given:
            raise PackError(
                f"{given} set(s) how a model is converted; --hls4ml-project {req.hls4ml_project} was converted "
                "already, and its hls4ml_config.yml says them"
            )
        return
    if cls.name != "kernel_wrapper":
        given = _given(req)
        if given:
            raise PackError(
                f"{given} set(s) hls4ml VitisAccelerator's Num_Kernel/Batchsize, for --kernel-abi kernel_wrapper; "
                f"the {cls.name} flow ({cls.title}) has no such setting"
            )
    _check_io_precision(req, cls)
    if req.effective_io_type not in IO_TYPES:
        raise PackError(f"--io-type {req.io_type}: hls4ml's io types are {', '.join(IO_TYPES)}")
    if req.effective_io_type == "io_stream" and cls.name not in IO_STREAM_ABIS:
        raise PackError(
            f"--io-type io_stream: the {cls.name} kernel ({cls.title}) takes io_parallel projects: "
            + (
                "FaaST's alveo_hls4ml calls the top function with arrays"
                if cls.name == "faast"
                else "it moves the firmware's arrays, and no hls4ml wrapper turns an io_stream top function's "
                "hls::stream arguments into its buffers"
            )
            + f"; io_stream is packed for --kernel-abi {' or '.join(IO_STREAM_ABIS)} (hls4ml's VivadoAccelerator "
            "wrapper takes arrays for both io types)"
        )


def _given(req: PackRequest, *extra: tuple[str, object]) -> str:
    """The flags of ``extra`` and of --compute-units/--batchsize that were given, comma-joined."""
    flags = (*extra, ("--compute-units", req.compute_units), ("--batchsize", req.batchsize))
    return ", ".join(flag for flag, value in flags if value is not None)


def _check_io_precision(req: PackRequest, cls: type[KernelAbi]) -> None:
    precision = "".join(req.effective_io_precision.split())
    if cls.name == "krnl_rtl":
        if precision == NATIVE:
            raise PackError(
                "--io-precision native: krnl_rtl's RTL moves one 32-bit word per element; give float or an "
                "ap_fixed<W,I> of at most 32 bits"
            )
        try:
            cls.codecs(KernelIo(1, 1, precision, precision))
        except AbiError as e:
            raise PackError(f"--io-precision {precision}: {e}") from None
    elif cls.name == "kernel_wrapper":
        if precision not in ("float", NATIVE):
            raise PackError(
                f"--io-precision {precision}: kernel_wrapper's elements are float (HW_Quant: the kernel converts "
                "float32 to the firmware's types) or native (the firmware's own input_t/result_t, which "
                "--default-precision and --precision-config set)"
            )
    elif cls.name == "faast" and precision != NATIVE:
        raise PackError(
            f"--io-precision {precision}: FaaST's alveo_hls4ml moves the firmware's own 16-bit input_t/result_t "
            "(--io-precision native)"
        )


# ---------------------------------------------------------------------------------- builds
def check_build(req: PackRequest, platform: str) -> None:
    """``--build-xclbin`` for the request's ABI can run here (the caller refused the requests
    that can never build: --xclbin given too, --hls4ml-project, a board without a platform)."""
    cls = abi_class(req)
    if cls.name == "krnl_rtl":
        toolchain.check_vivado_accelerator_tools(platform)
    elif cls.name == "kernel_wrapper":
        if not hls_config.vitis_accelerator_available():
            raise PackError(
                f"--build-xclbin --kernel-abi kernel_wrapper builds with hls4ml's VitisAccelerator backend, which the "
                f"installed hls4ml {hls4ml_version()} lacks: it is hls4ml PR #991 ({PR_991}), not merged. Install "
                "hls4ml from that pull request's branch, or build the xclbin elsewhere and pass it with --xclbin "
                "FILE (without --build-xclbin, pack writes the kernel_wrapper project with hls4ml's Vitis backend)"
            )
        if "target" not in inspect.signature(hls_config.vitis_accelerator_backend().build).parameters:
            # before 2025-07 its build() took synth/vsynth flags and built the legacy two-argument
            # kernel into build/kernel_wrapper.xclbin
            raise PackError(
                "the installed hls4ml's VitisAccelerator backend has no build(target=...) (an early version of PR "
                "#991); install a current one, or run `make` in the project and pass the xclbin with --xclbin FILE"
            )
        toolchain.check_vitis_accelerator_tools(platform)
    else:
        raise PackError(
            f"--build-xclbin does not build {cls.name} kernels: FaaST's own Makefile (hls4ml_c/ of "
            "fastmachinelearning/FaaST) builds alveo_hls4ml.xclbin around the project's firmware. Pack the model "
            "without --build-xclbin, build there, then pack the version folder with --hls4ml-project DIR "
            "--kernel-abi faast --xclbin alveo_hls4ml.xclbin"
        )


# ---------------------------------------------------------------------------------- xclbins
def _read(path: Path, flag: str) -> Xclbin:
    try:
        return read_xclbin(path)
    except XclbinError as e:
        raise PackError(f"{flag}{e}") from None


def _check_kernel(xclbin: Xclbin, path: Path, req: PackRequest) -> None:
    """The xclbin has a kernel of the request's ABI, or a PackError saying what it has."""
    try:
        abi.choose(xclbin, req.kernel_abi)
    except AbiError as e:
        found = abi.detect(xclbin)
        hint = ""
        if len(found) == 1:
            cls, kernel = found[0]
            hint = f"; it holds {kernel.name}, a {cls.name} kernel ({cls.title}): pack it with --kernel-abi {cls.name}"
        raise PackError(f"the xclbin {path} does not fit --kernel-abi {req.kernel_abi}: {e}{hint}") from None


def check_xclbin_file(path: Path, req: PackRequest) -> None:
    """``--xclbin FILE``: readable, with a kernel of the request's ABI."""
    _check_kernel(_read(path, "--xclbin: "), path, req)


# ---------------------------------------------------------------------------------- projects
def check_project(root: Path, req: PackRequest, xclbin_path: Path | None = None) -> CardManifest:
    """The project in ``root`` fits the request's ABI (and the xclbin's kernel when given); the
    manifest it would get, or a PackError naming the project and the ABI (or the xclbin)."""
    xclbin = None
    if xclbin_path is not None:
        xclbin = _read(xclbin_path, "")
        _check_kernel(xclbin, xclbin_path, req)
    return _manifest(Hls4mlProject.load(root), req.kernel_abi, xclbin, xclbin_path, req.source_description())


def record(version_dir: Path, kernel_abi: str, xclbin_file: Path | None, source: str) -> CardManifest:
    """Write card.json for the finished ``version_dir`` (``xclbin_file``: the packed copy in it)."""
    xclbin = _read(xclbin_file, "") if xclbin_file is not None else None
    manifest = _manifest(Hls4mlProject.load(version_dir), kernel_abi, xclbin, xclbin_file, source)
    manifest.write(version_dir)
    return manifest


def _manifest(
    project: Hls4mlProject, abi_name: str, xclbin: Xclbin | None, xclbin_path: Path | None, source: str
) -> CardManifest:
    try:
        return CardManifest.for_project(project, abi_name, xclbin)
    except (AbiError, ManifestError) as e:
        cls = abi.get(abi_name)
        # the ABI's message names the project by its folder, here a temporary one: say "the project"
        detail = str(e).replace(f"hls4ml project {project.path}", "the project").replace(str(project.path), "it")
        against = f"the {cls.name} kernel of {xclbin_path}" if xclbin_path is not None else f"--kernel-abi {cls.name}"
        hints = []
        fitting = [name for name in _fitting(project) if name != cls.name]
        if fitting and xclbin is None:
            hints.append(f"it fits --kernel-abi {' or '.join(fitting)}")
        if cls.name == "faast":
            hints.append(FAAST_NEEDS)
        hint = "".join(f". {h[0].upper()}{h[1:]}" for h in hints)
        raise PackError(f"{source} does not fit {against} ({cls.title}): {detail}{hint}") from None


def _fitting(project: Hls4mlProject) -> list[str]:
    """The ABIs whose kernel could carry the project (its kind of project, sizes, element types)."""
    names = []
    for name in abi.abi_names():
        cls = abi.get(name)
        try:
            cls.codecs(cls.io_for(project))
        except AbiError:
            continue
        names.append(name)
    return names
