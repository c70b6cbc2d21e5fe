"""Alveo platforms and the Xilinx tools an xclbin build needs.

Contract:

* :func:`default_platform` maps an hls4ml ``--board`` to the current Vitis deployment
  platform of that card (the shell ``xbutil examine`` shows on a host, plus its version
  suffix), or None for boards that have no Vitis platform (SoC boards such as pynq-z2).
* :func:`vitis_release` reads the Vitis release a platform was made for out of its name.
* :func:`board_part` is the FPGA part of an Alveo board, for the flows that take a part
  rather than a board (hls4ml's Vivado and Vitis backends).
* :func:`vivado_accelerator_tools` lists what hls4ml 1.3.0's VivadoAccelerator build runs,
  :func:`vitis_accelerator_tools` what hls4ml's VitisAccelerator build (PR #991) runs, each
  tool with the release that provides it; :func:`check_tools` raises
  :class:`~.request.PackError` naming every missing tool (and unset environment variable) at
  once, so a host without them fails in a second instead of after the conversion (or hours
  into a build).

Nothing here runs a tool; only ``PATH`` and the environment are searched.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass

from .request import PackError

#: The Vitis deployment platform of each Alveo card's current shell (AMD UG1120 and the Vitis
#: release notes; the name's 6-digit part is the Vitis release it was created with). hls4ml's
#: own default, xilinx_u250_xdma_201830_2, is the 2018.3 shell that cards have not shipped with
#: for years, and every board got it. alveo-u55c is not a VivadoAccelerator board in hls4ml
#: 1.3.0; it is listed for hls4ml's VitisAccelerator flow, whose default board it is.
BOARD_PLATFORMS = {
    "alveo-u250": "xilinx_u250_gen3x16_xdma_4_1_202210_1",
    "alveo-u200": "xilinx_u200_gen3x16_xdma_2_202110_1",
    "alveo-u280": "xilinx_u280_gen3x16_xdma_1_202211_1",
    "alveo-u50": "xilinx_u50_gen3x16_xdma_5_202210_1",
    "alveo-u55c": "xilinx_u55c_gen3x16_xdma_3_202210_1",
}

#: The FPGA part of each Alveo card (hls4ml's supported_boards.json of its VivadoAccelerator
#: backend and of PR #991's VitisAccelerator backend, which agree). hls4ml's Vivado and Vitis
#: backends take a part, not a board; their default part is a Virtex UltraScale+ of no card.
BOARD_PARTS = {
    "alveo-u250": "xcu250-figd2104-2L-e",
    "alveo-u200": "xcu200-fsgd2104-2-e",
    "alveo-u280": "xcu280-fsvh2892-2L-e",
    "alveo-u50": "xcu50-fsvh2104-2-e",
    "alveo-u55c": "xcu55c-fsvh2892-2L-e",
}

#: what the VitisAccelerator project's Makefile reads from the environment (it stops without
#: them), and what sets each
VITIS_ENVIRONMENT = {
    "XILINX_VITIS": "set by Vitis' settings64.sh",
    "XILINX_XRT": "set by XRT's setup.sh (/opt/xilinx/xrt/setup.sh)",
    "XILINX_VIVADO": "set by Vivado's settings64.sh (Vitis' settings64.sh sources it)",
}

# ..._<YYYY><R><u>_<n>: year, release (1 or 2) and update digit, then the platform's revision
_RELEASE = re.compile(r"_(20\d\d)([1-4])(\d)_\d+$")


def default_platform(board: str) -> str | None:
    """The platform to build for when ``--platform`` is not given."""
    return BOARD_PLATFORMS.get(board)


def resolve_platform(board: str, platform: str | None) -> str | None:
    """``--platform`` if given, else the board's current one; None for boards without one."""
    if platform:
        return platform
    found = default_platform(board)
    if found is None and board.startswith("alveo"):
        known = ", ".join(sorted(BOARD_PLATFORMS))
        raise PackError(
            f"no default Vitis platform is known for board '{board}' (known: {known}); pass --platform NAME "
            "(`xbutil examine` on the card's host shows the installed shell)"
        )
    return found


def board_part(board: str) -> str | None:
    """The FPGA part of an Alveo ``board``; None for boards not listed (hls4ml's default then)."""
    return BOARD_PARTS.get(board)


def vitis_release(platform: str) -> str | None:
    """``xilinx_u250_gen3x16_xdma_4_1_202210_1`` -> "2022.1"; None when the name has no release."""
    m = _RELEASE.search(platform)
    return f"{m.group(1)}.{m.group(2)}" if m else None


@dataclass(frozen=True)
class Tool:
    """A program a build runs, what it is for, and which release provides it."""

    command: str
    purpose: str
    provided_by: str


def vivado_accelerator_tools(platform: str) -> list[Tool]:
    """What hls4ml 1.3.0's VivadoAccelerator ``build()`` + ``make_xclbin()`` run, in order."""
    release = vitis_release(platform)
    vitis = f"Vitis >= {release}" if release else "the Vitis release the platform was made for"
    return [
        # VivadoBackend.build runs `vivado_hls -f build_prj.tcl`; Vivado HLS was replaced by
        # vitis_hls in 2020.2, and hls4ml's VivadoAccelerator backend does not call vitis_hls
        Tool(
            "vivado_hls",
            "HLS synthesis and IP export",
            "Vivado HLS, part of Vivado <= 2020.1 (2020.2 and later ship vitis_hls instead, "
            "which hls4ml 1.3.0's VivadoAccelerator build does not run)",
        ),
        # make_xclbin: `vivado -mode batch -source design.tcl` packages the krnl_rtl kernel
        Tool("vivado", "kernel packaging (design.tcl, package_xo)", f"Vivado, installed with {vitis}"),
        # make_xclbin: `v++ -t hw --platform P --link`; a platform is linked by the Vitis
        # release it was made for or a later one
        Tool("v++", f"linking the xclbin for {platform}", vitis),
    ]


def check_vivado_accelerator_tools(platform: str) -> None:
    """Raise PackError unless every tool of the VivadoAccelerator xclbin flow is on PATH."""
    release = vitis_release(platform)
    note = ""
    if release is not None and release > "2020.1":
        # the one combination that trips people: vivado_hls is gone from the Vitis that links
        # current platforms, so this flow needs two Xilinx installations side by side
        note = (
            f"This flow needs two Xilinx releases side by side for {platform}: Vivado <= 2020.1 for vivado_hls "
            f"and Vitis >= {release} for vivado and v++. "
        )
    check_tools(vivado_accelerator_tools(platform), note=note)


def vitis_accelerator_tools(platform: str) -> list[Tool]:
    """What the VitisAccelerator backend's ``build(target='hw')`` runs: ``make all`` in the project,
    whose Makefile compiles the kernel and links the xclbin with ``v++`` (PR #991, tested by its
    author with Vitis 2022.2)."""
    release = vitis_release(platform)
    vitis = f"Vitis >= {release}" if release else "the Vitis release the platform was made for"
    return [
        Tool("make", "running the project's Makefile (build() runs `make all` there)", "the host's build tools"),
        Tool("v++", f"compiling kernel_wrapper and linking the xclbin for {platform}", vitis),
    ]


def check_vitis_accelerator_tools(platform: str) -> None:
    """Raise PackError unless the VitisAccelerator build's tools are on PATH and its Makefile's
    environment is set."""
    check_tools(vitis_accelerator_tools(platform), environment=VITIS_ENVIRONMENT)


def check_tools(
    tools: list[Tool], flag: str = "--build-xclbin", note: str = "", environment: dict[str, str] | None = None
) -> None:
    """Raise PackError naming every tool of ``tools`` that is not on PATH and every variable of
    ``environment`` (name -> what sets it) that is unset (``note`` is appended)."""
    missing = [t for t in tools if shutil.which(t.command) is None]
    unset = {name: how for name, how in (environment or {}).items() if not os.environ.get(name)}
    if not missing and not unset:
        return
    lines = [f"  {t.command}: {t.purpose}; {t.provided_by}" for t in missing]
    lines += [f"  {name}: {how}" for name, how in unset.items()]
    needs = []
    if missing:
        needs.append(f"{_listed([t.command for t in missing])} on PATH")
    if unset:
        needs.append(f"{_listed(list(unset))} set")
    raise PackError(
        f"{flag} needs {' and '.join(needs)}, which this host lacks:\n"
        + "\n".join(lines)
        + f"\n{note}Source each tool's settings64.sh (and XRT's setup.sh) first, or build for an older "
        "platform with --platform (`xbutil examine` on the card's host shows the installed shell)."
    )


def _listed(names: list[str]) -> str:
    """Names joined as a sentence lists them: "a", "a and b", "a, b and c"."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
