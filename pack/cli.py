"""``fpgaserve pack ...``: the command line.

Contract: :func:`main` parses the arguments (``fpgaserve pack --help`` lists them), builds a
:class:`~.request.PackRequest` and runs :func:`~.pipeline.pack`; it prints where the model
went and returns 0, or prints ``fpgaserve pack: error: <why>`` on stderr and returns 2 for a
request that cannot be carried out. Warnings (a pack without float reference, several
xclbins found) go to stderr through logging and do not change the exit status.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from fpgaserve.backends.base import BackendError
from fpgaserve.backends.hls4ml.card import abi

from .pipeline import pack
from .request import (
    DEFAULT_BATCH_MEMORY_BUDGET,
    DEFAULT_BATCHSIZE,
    DEFAULT_BOARD,
    DEFAULT_COMPUTE_UNITS,
    DEFAULT_IO_PRECISION,
    DEFAULT_KERNEL_ABI,
    DEFAULT_MAX_BATCH_SIZE,
    DEFAULT_PRECISION,
    DEFAULT_REFERENCE_TIMEOUT_S,
    IO_STREAM_ABIS,
    IO_TYPES,
    PackError,
    PackRequest,
    format_bytes,
    parse_byte_size,
)
from .toolchain import BOARD_PLATFORMS


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fpgaserve pack",
        description="Convert a trained model with hls4ml (or take an hls4ml project) and write it into a "
        "model repository as an hls4ml model: <repository>/<name>/config.pbtxt and <version>/.",
    )
    p.add_argument("name", help="model name (the folder and the name clients use)")
    p.add_argument("--repository", default="bitstreams", help="model repository to write into (default: bitstreams)")
    p.add_argument("--version", type=int, default=1)
    src = p.add_argument_group("source (exactly one)")
    src.add_argument("--pytorch", metavar="MODEL", help="a torch.save()d nn.Module, or file.py:Factory")
    src.add_argument("--state-dict", help="weights to load into the --pytorch module")
    src.add_argument("--onnx", metavar="MODEL.onnx", help="an ONNX model (needs qonnx); also the float reference")
    src.add_argument("--keras", metavar="MODEL.keras", help="a Keras model (needs keras)")
    src.add_argument(
        "--hls4ml-project",
        metavar="DIR",
        help="an existing hls4ml project, written for the --kernel-abi's flow; its config, firmware and HLS "
        "synthesis report are packed, never the Vivado/Vitis run folders",
    )
    src.add_argument(
        "--float-reference",
        metavar="MODEL.onnx",
        help="the float reference model.onnx to ship (default: exported from --pytorch/--keras, or --onnx "
        "itself, QONNX in its QCDQ form)",
    )
    src.add_argument(
        "--reference-timeout",
        type=float,
        default=DEFAULT_REFERENCE_TIMEOUT_S,
        metavar="S",
        help="seconds making the float reference may take (in a child process); past it, or when ONNX Runtime "
        "cannot run the model, pack goes on without model.onnx and --fpga-mode onnx is unavailable for the "
        f"model (default: {DEFAULT_REFERENCE_TIMEOUT_S:g})",
    )
    conv = p.add_argument_group("conversion")
    conv.add_argument(
        "--input-shape",
        type=lambda s: tuple(int(d) for d in s.split(",")),
        help="shape of one sample, e.g. 47 or 16 (PyTorch)",
    )
    conv.add_argument(
        "--precision-config",
        metavar="YAML",
        help="hls4ml config overrides (Model:/LayerName: precisions, ReuseFactor, Strategy)",
    )
    conv.add_argument("--default-precision", default=DEFAULT_PRECISION)
    conv.add_argument(
        "--io-type",
        choices=IO_TYPES,
        help="hls4ml's IOType: arrays between the layers (io_parallel, the default) or hls::stream "
        f"(io_stream: line-buffer convolutions, less memory); io_stream is packed for --kernel-abi "
        f"{' or '.join(IO_STREAM_ABIS)}",
    )
    conv.add_argument("--granularity", choices=("model", "type", "name"), default="name")
    abis = abi.abi_names()
    conv.add_argument(
        "--kernel-abi",
        choices=abis,
        default=DEFAULT_KERNEL_ABI,
        help="the kernel interface the firmware is packed for, recorded in card.json: "
        + "; ".join(f"{name}: {abi.get(name).title}" for name in abis)
        + f" (default: {DEFAULT_KERNEL_ABI}). It picks hls4ml's backend: VivadoAccelerator for krnl_rtl; "
        "VitisAccelerator for kernel_wrapper when the installed hls4ml has it, else Vitis (the project then "
        "records PR #991's AcceleratorConfig); Vivado for faast (a plain project, which FaaST's kernel wraps)",
    )
    defaults = ", ".join(f"{name}: {DEFAULT_IO_PRECISION[name]}" for name in abis if name in DEFAULT_IO_PRECISION)
    conv.add_argument(
        "--io-precision",
        help="what crosses the kernel boundary: krnl_rtl: float or ap_fixed<W,I> (32-bit words); kernel_wrapper: "
        "float (HW_Quant: the kernel converts) or native (the firmware's input_t/result_t); faast: native "
        f"(16-bit fields). Default per ABI ({defaults})",
    )
    conv.add_argument(
        "--compute-units",
        type=int,
        metavar="N",
        help=f"kernel_wrapper: compute units v++ links (Num_Kernel, each on its own bank; default "
        f"{DEFAULT_COMPUTE_UNITS})",
    )
    conv.add_argument(
        "--batchsize",
        type=int,
        metavar="N",
        help="kernel_wrapper: rows per call of the legacy kernel_wrapper(in, out) of PR #991 before 2025-07 "
        f"(Batchsize; default {DEFAULT_BATCHSIZE}); the current kernel takes the rows per call as an argument",
    )
    conv.add_argument("--board", default=DEFAULT_BOARD, help=f"hls4ml board (default: {DEFAULT_BOARD})")
    boards = ", ".join(f"{board}: {platform}" for board, platform in BOARD_PLATFORMS.items())
    conv.add_argument(
        "--platform",
        help="Vitis platform the xclbin is linked for; it must match the shell installed on the card, which "
        "`xbutil examine` on that host shows. Default: the current platform of --board "
        f"({boards})",
    )
    xclbin = p.add_argument_group("bitstream")
    xclbin.add_argument(
        "--build-xclbin",
        action="store_true",
        help="build the xclbin with the --kernel-abi's hls4ml flow (hours). krnl_rtl: VivadoAccelerator, needs "
        "vivado_hls (Vivado <= 2020.1), and vivado and v++ from the Vitis release of the platform (e.g. >= 2022.1 "
        "for *_202210_1); kernel_wrapper: VitisAccelerator (hls4ml PR #991), needs v++ and make, with "
        "XILINX_VITIS, XILINX_XRT and XILINX_VIVADO set; faast: not built here (FaaST's Makefile builds it)",
    )
    xclbin.add_argument(
        "--xclbin",
        metavar="FILE",
        help="an .xclbin or .awsxclbin built elsewhere, packed as <name>.xclbin or <name>.awsxclbin (also: which "
        "one to pack when --hls4ml-project holds several)",
    )
    conv.add_argument(
        "--vendor-templates",
        action="store_true",
        help="keep hls4ml's full output (template library, RTL, scripts) in the version folder",
    )
    serve = p.add_argument_group("serving")
    serve.add_argument(
        "--max-batch-size",
        type=int,
        metavar="N",
        help="rows per batch; its full batch of FP32 inputs and outputs must fit --batch-memory-budget (default: "
        f"as many rows as fit it, at most {DEFAULT_MAX_BATCH_SIZE})",
    )
    serve.add_argument(
        "--batch-memory-budget",
        type=_byte_size,
        default=DEFAULT_BATCH_MEMORY_BUDGET,
        metavar="SIZE",
        help="what one full batch of a model's inputs and outputs may take, e.g. 512MiB or 2GiB (default: "
        f"{format_bytes(DEFAULT_BATCH_MEMORY_BUDGET)}); a model whose single row is larger is refused",
    )
    serve.add_argument(
        "--instance-count",
        type=int,
        help="model instances (default: 2 per compute unit of the packed xclbin's kernel, so that each CU is "
        "double-buffered; 1 without an xclbin)",
    )
    serve.add_argument("--max-queue-delay-us", type=int, default=None, help="enable dynamic batching with this delay")
    serve.add_argument("--input-name", help="tensor name clients use (default: the firmware's)")
    serve.add_argument("--output-name", help="tensor name clients use (default: the firmware's)")
    p.add_argument("--force", action="store_true", help="replace an existing version folder")
    return p


def _byte_size(text: str) -> int:
    try:
        return parse_byte_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def request_from_args(args: argparse.Namespace) -> PackRequest:
    return PackRequest(
        name=args.name,
        repository=Path(args.repository),
        version=args.version,
        pytorch=args.pytorch,
        state_dict=args.state_dict,
        onnx=args.onnx,
        keras=args.keras,
        hls4ml_project=args.hls4ml_project,
        input_shape=args.input_shape,
        io_type=args.io_type,
        precision_config=args.precision_config,
        default_precision=args.default_precision,
        granularity=args.granularity,
        kernel_abi=args.kernel_abi,
        io_precision=args.io_precision,
        compute_units=args.compute_units,
        batchsize=args.batchsize,
        board=args.board,
        platform=args.platform,
        max_batch_size=args.max_batch_size,
        batch_memory_budget=args.batch_memory_budget,
        instance_count=args.instance_count,
        queue_delay_us=args.max_queue_delay_us,
        input_name=args.input_name,
        output_name=args.output_name,
        float_reference=args.float_reference,
        reference_timeout=args.reference_timeout,
        vendor_templates=args.vendor_templates,
        build_xclbin=args.build_xclbin,
        xclbin=args.xclbin,
        force=args.force,
    )


class _Formatter(logging.Formatter):
    """Progress lines as they are; warnings and errors marked as such."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        return f"{record.levelname.lower()}: {text}" if record.levelno >= logging.WARNING else text


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = logging.StreamHandler()
    handler.setFormatter(_Formatter("%(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    req = request_from_args(args)
    try:
        version_dir = pack(req)
    except (PackError, BackendError) as e:  # BackendError: a project or xclbin the backend cannot read
        print(f"fpgaserve pack: error: {e}", file=sys.stderr)
        return 2
    print(f"packed {req.name} into {version_dir} (config: {version_dir.parent / 'config.pbtxt'})")
    return 0
