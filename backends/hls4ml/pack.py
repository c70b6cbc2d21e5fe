"""``fpgaserve pack``: from a trained model (or an hls4ml project) to a served model.

::

    fpgaserve pack facile --pytorch facile.pt --input-shape 47 \\
        --default-precision 'ap_fixed<16,6>' --repository bitstreams

converts the network with hls4ml (VivadoAccelerator backend, io_parallel, the Alveo
``krnl_rtl`` kernel), and writes ``bitstreams/facile/config.pbtxt`` and
``bitstreams/facile/1/``: the model's hls4ml project (hls4ml_config.yml, firmware sources,
weights), the float reference ``model.onnx`` and, with ``--build-xclbin`` on a host with
Vivado and Vitis, the ``.xclbin``.

The version folder keeps the part of the project that belongs to this model. hls4ml's
template library (firmware/nnet_utils, firmware/ap_types, the kernel RTL, tcl scripts and
drivers) is identical for every model and comes from the installed hls4ml when the
C-simulation is compiled; ``--vendor-templates`` keeps hls4ml's full output instead.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import importlib.util
import logging
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .csim import fix_axi_typedefs
from .project import CONFIG_FILE, GENERATED_TEMPLATE_FILE, Hls4mlProject, ProjectError, installed_templates_dir

log = logging.getLogger("fpgaserve.pack")

DEFAULT_PRECISION = "ap_fixed<16,6>"
# files of the hls4ml output that are this model's (everything else is hls4ml's templates)
_MODEL_FILES = (CONFIG_FILE, "firmware")
_TEMPLATE_PARTS = {"nnet_utils", "ap_types"}


class PackError(Exception):
    """A pack request that cannot be carried out; the message says why and what to do."""


@dataclass
class PackRequest:
    name: str
    repository: Path
    version: int = 1
    pytorch: str | None = None
    #: an in-memory nn.Module instead of a file (programmatic use: bitstreams/build_bitstreams.py)
    pytorch_module: Any = None
    state_dict: str | None = None
    onnx: str | None = None
    keras: str | None = None
    hls4ml_project: str | None = None
    input_shape: tuple[int, ...] | None = None
    precision_config: str | None = None
    #: hls4ml config overrides as a dict (programmatic --precision-config), applied after the file
    hls_overrides: dict = field(default_factory=dict)
    default_precision: str = DEFAULT_PRECISION
    granularity: str = "name"
    io_precision: str = "float"
    board: str = "alveo-u250"
    platform: str = "xilinx_u250_xdma_201830_2"
    max_batch_size: int = 16384
    instance_count: int = 1
    queue_delay_us: int | None = None
    input_name: str | None = None
    output_name: str | None = None
    float_reference: str | None = None
    vendor_templates: bool = False
    build_xclbin: bool = False
    force: bool = False
    header: str = ""
    extra_parameters: dict = field(default_factory=dict)


def pack(req: PackRequest) -> Path:
    """Write ``<repository>/<name>/<version>/`` and ``config.pbtxt``; returns the version folder."""
    sources = [s for s in (req.pytorch, req.pytorch_module, req.onnx, req.keras, req.hls4ml_project) if s is not None]
    if len(sources) != 1:
        raise PackError("give exactly one of --pytorch, --onnx, --keras, --hls4ml-project")
    if req.build_xclbin:
        _check_xclbin_tools()
    model_dir = Path(req.repository) / req.name
    version_dir = model_dir / str(req.version)
    if version_dir.exists() and not req.force:
        raise PackError(f"{version_dir} exists; pass --force to replace it")

    with tempfile.TemporaryDirectory(prefix="fpgaserve-pack-") as tmp:
        staging = Path(tmp) / "project"
        reference = Path(tmp) / "model.onnx"
        if req.hls4ml_project:
            _copy_project(Path(req.hls4ml_project), staging)
            if req.float_reference:
                shutil.copyfile(req.float_reference, reference)
        else:
            hls_model = _convert(req, staging, reference)
            if req.build_xclbin:
                _build_xclbin(hls_model, req.platform)
        _fix_accelerator_types(staging)
        _normalize_config(staging)
        project = Hls4mlProject.load(staging)
        project.weight_files()  # refuse a project whose firmware names missing weights

        out = Path(tmp) / "version"
        out.mkdir()
        _keep_model_files(staging, out, req.vendor_templates)
        if reference.is_file():
            shutil.copyfile(reference, out / "model.onnx")
        for xclbin in (
            sorted((staging / "xclbin_files").glob("*.xclbin")) if (staging / "xclbin_files").is_dir() else []
        ):
            shutil.copyfile(xclbin, out / f"{req.name}.xclbin")

        model_dir.mkdir(parents=True, exist_ok=True)
        if version_dir.exists():
            shutil.rmtree(version_dir)
        shutil.copytree(out, version_dir)
    (model_dir / "config.pbtxt").write_text(model_config(req, Hls4mlProject.load(version_dir)))
    return version_dir


# ---------------------------------------------------------------------- conversion
def _hls4ml():
    import hls4ml  # slow import (seconds): only pack and the tests need it

    return hls4ml


def _accelerator_kwargs(req: PackRequest, staging: Path) -> dict:
    return {
        "backend": "VivadoAccelerator",
        "board": req.board,
        "platform": req.platform,
        "interface": "axi_stream",
        "driver": "python",
        "io_type": "io_parallel",
        "input_type": req.io_precision,
        "output_type": req.io_precision,
        "output_dir": str(staging),
        "project_name": "myproject",
    }


def _hls_config(req: PackRequest, generated: dict) -> dict:
    config = copy.deepcopy(generated)
    config.setdefault("Model", {})["Precision"] = req.default_precision
    if req.precision_config:
        try:
            user = yaml.safe_load(Path(req.precision_config).read_text())
        except (OSError, yaml.YAMLError) as e:
            raise PackError(f"cannot read the precision config {req.precision_config}: {e}") from None
        if not isinstance(user, dict):
            raise PackError(f"{req.precision_config}: expected an hls4ml config mapping (Model:, LayerName:, ...)")
        _merge(config, user)
    _merge(config, copy.deepcopy(req.hls_overrides))
    return config


def _merge(base: dict, extra: dict) -> None:
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _merge(base[k], v)
        else:
            base[k] = v


def _convert(req: PackRequest, staging: Path, reference: Path):
    hls4ml = _hls4ml()
    kwargs = _accelerator_kwargs(req, staging)
    try:
        if req.pytorch or req.pytorch_module is not None:
            model = req.pytorch_module.eval() if req.pytorch_module is not None else _load_pytorch(req)
            if not req.input_shape:
                raise PackError("--pytorch needs --input-shape (the shape of one sample, e.g. 47 or 16)")
            generated = hls4ml.utils.config_from_pytorch_model(
                model,
                input_shape=tuple(req.input_shape),
                granularity=req.granularity,
                backend="VivadoAccelerator",
                default_precision=req.default_precision,
            )
            hls_model = hls4ml.converters.convert_from_pytorch_model(
                model, hls_config=_hls_config(req, generated), **kwargs
            )
            if req.float_reference:
                shutil.copyfile(req.float_reference, reference)
            else:
                _export_torch_reference(model, req.input_shape, reference)
        elif req.onnx:
            if importlib.util.find_spec("qonnx") is None:
                raise PackError("--onnx: hls4ml's ONNX converter needs qonnx (pip install 'fpgaserve[qonnx]')")
            model = _qonnx_prepared(req.onnx)
            generated = hls4ml.utils.config_from_onnx_model(
                model,
                granularity=req.granularity,
                backend="VivadoAccelerator",
                default_precision=req.default_precision,
            )
            hls_model = hls4ml.converters.convert_from_onnx_model(
                model, hls_config=_hls_config(req, generated), **kwargs
            )
            if req.float_reference:
                shutil.copyfile(req.float_reference, reference)
            else:
                _onnx_reference(req.onnx, reference)
        else:
            if importlib.util.find_spec("keras") is None:
                raise PackError("--keras needs Keras 3 installed (pip install 'fpgaserve[keras]')")
            _choose_keras_backend()
            import keras

            model = keras.models.load_model(req.keras)
            generated = hls4ml.utils.config_from_keras_model(
                model,
                granularity=req.granularity,
                backend="VivadoAccelerator",
                default_precision=req.default_precision,
            )
            hls_model = hls4ml.converters.convert_from_keras_model(
                model, hls_config=_hls_config(req, generated), **kwargs
            )
            if req.float_reference:
                shutil.copyfile(req.float_reference, reference)
            else:
                _export_keras_reference(model, reference)
    except PackError:
        raise
    except Exception as e:  # hls4ml's converters raise bare Exceptions for unsupported layers
        raise PackError(f"hls4ml could not convert the model: {type(e).__name__}: {e}") from e
    hls_model.write()
    return hls_model


def _choose_keras_backend() -> None:
    """Keras 3 picks its backend when imported (KERAS_BACKEND, default tensorflow). Without
    tensorflow installed, use torch (which fpgaserve's pack extra installs); a user's choice wins."""
    if "KERAS_BACKEND" not in os.environ and importlib.util.find_spec("tensorflow") is None:
        os.environ["KERAS_BACKEND"] = "torch"


def _export_keras_reference(model, reference: Path) -> None:
    """The float reference model.onnx of a Keras 3 model (Keras' own ONNX export)."""
    import warnings

    import numpy as np

    shape = [1 if d is None else int(d) for d in model.inputs[0].shape]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model(np.zeros(shape, np.float32))  # Keras exports only models that have been called
            model.export(str(reference), format="onnx", verbose=False)
    except Exception as e:
        raise PackError(
            f"cannot export the Keras model to ONNX for the float reference ({type(e).__name__}: {e}); "
            "pass --float-reference MODEL.onnx"
        ) from None


def _qonnx_prepared(path: str):
    """The ONNX/QONNX model as hls4ml's ONNX converter expects it: cleaned up (shapes inferred,
    constants folded, Quant nodes kept), channels-last, Gemm as MatMul + Add."""
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.transformation.channels_last import ConvertToChannelsLastAndClean
    from qonnx.transformation.gemm_to_matmul import GemmToMatMul
    from qonnx.util.cleanup import cleanup_model

    try:
        model = cleanup_model(ModelWrapper(path))
        model = model.transform(ConvertToChannelsLastAndClean())
        model = model.transform(GemmToMatMul())
        return cleanup_model(model)
    except Exception as e:
        raise PackError(f"qonnx cannot prepare {path}: {type(e).__name__}: {e}") from None


def _onnx_reference(path: str, reference: Path) -> None:
    """model.onnx for --onnx: the file itself, or for QONNX (Quant nodes, which ONNX Runtime
    cannot run) its QCDQ form (QuantizeLinear/Clip/DequantizeLinear): the same quantized network
    in standard operators."""
    import onnx

    nodes = onnx.load(path).graph.node
    if not any(n.domain.startswith("qonnx") or n.op_type in ("Quant", "BipolarQuant", "Trunc") for n in nodes):
        shutil.copyfile(path, reference)
        return
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.transformation.qonnx_to_qcdq import QuantToQCDQ
    from qonnx.util.cleanup import cleanup_model

    try:
        model = cleanup_model(cleanup_model(ModelWrapper(path)).transform(QuantToQCDQ()))
        left = sorted({n.op_type for n in model.graph.node if n.domain not in ("", "ai.onnx")})
        if left:
            raise ValueError(f"operators ONNX Runtime cannot run remain: {left}")
        model.save(str(reference))
    except Exception as e:
        raise PackError(
            f"cannot turn the QONNX model {path} into a float reference ONNX Runtime runs ({type(e).__name__}: "
            f"{e}); pass --float-reference MODEL.onnx"
        ) from None


def _load_pytorch(req: PackRequest):
    import torch

    spec = req.pytorch
    assert spec is not None  # the caller checked: --pytorch given, no in-memory module
    if ":" in spec and spec.split(":", 1)[0].endswith(".py"):
        # path/to/file.py:Factory -- a module class or function building the network
        path, attr = spec.split(":", 1)
        module_spec = importlib.util.spec_from_file_location(Path(path).stem, path)
        if module_spec is None or module_spec.loader is None:
            raise PackError(f"cannot import {path}")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_spec.name] = module
        module_spec.loader.exec_module(module)
        try:
            model = getattr(module, attr)()
        except AttributeError:
            raise PackError(f"{path} has no '{attr}'") from None
    else:
        # a whole module saved with torch.save(model): unpickling runs code, so only pack
        # files you trust (weights_only=False is required for a full module)
        try:
            model = torch.load(spec, weights_only=False, map_location="cpu")
        except Exception as e:
            raise PackError(f"cannot load the PyTorch model {spec}: {type(e).__name__}: {e}") from None
    if req.state_dict:
        model.load_state_dict(torch.load(req.state_dict, map_location="cpu"))
    if not isinstance(model, torch.nn.Module):
        raise PackError(f"{spec} is a {type(model).__name__}, not a torch.nn.Module")
    return model.eval()


def _export_torch_reference(model, input_shape, reference: Path) -> None:
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (torch.zeros(1, *input_shape),),
            str(reference),
            dynamo=False,
            input_names=["input"],
            output_names=["output"],
            dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
            opset_version=17,
        )


def _check_xclbin_tools() -> None:
    missing = [tool for tool in ("vivado", "v++") if shutil.which(tool) is None]
    if missing:
        raise PackError(
            f"--build-xclbin needs {' and '.join(missing)} on PATH (source Vivado's and Vitis' settings64.sh, "
            "and XRT's setup.sh, first)"
        )


def _build_xclbin(hls_model, platform: str) -> None:
    """hls4ml's own flow: HLS synthesis + export, kernel packaging (vivado), link (v++)."""
    hls_model.build(csim=False, synth=True, export=True)
    hls_model.config.backend.make_xclbin(hls_model, platform)
    out = Path(hls_model.config.get_output_dir()) / "xclbin_files"
    if not list(out.glob("*.xclbin")):
        # make_xclbin ignores the tools' exit codes; the missing file is the only sign
        raise PackError(f"the xclbin build produced no .xclbin in {out}; see the vivado/v++ logs there")


# ---------------------------------------------------------------------- project files
def _copy_project(src: Path, dst: Path) -> None:
    if not (src / CONFIG_FILE).is_file():
        raise PackError(f"{src} is not an hls4ml project (no {CONFIG_FILE})")
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.so", "*.o", "__pycache__"))


def _fix_accelerator_types(root: Path) -> None:
    """hls4ml 1.3.0 writes ``typedef fixed<16,6,TRN,WRAP,0> T_in;`` into myproject_axi.h for
    ap_fixed I/O (its YAML spelling of the type), which is not C++; the packed project gets
    the same rewrite the C-simulation build applies, so Vivado can synthesize it as well."""
    for header in (root / "firmware").glob("*_axi.h"):
        text = header.read_text()
        fixed = fix_axi_typedefs(text)
        if fixed != text:
            header.write_text(fixed)


def _normalize_config(root: Path) -> None:
    """Make hls4ml_config.yml reproducible: hls4ml writes the absolute output folder and a
    random Stamp; the folder becomes "." and the Stamp a hash of the firmware sources."""
    path = root / CONFIG_FILE
    text = path.read_text()
    digest = hashlib.sha256()
    for p in sorted((root / "firmware").rglob("*")):
        rel = p.relative_to(root / "firmware")
        if p.is_file() and rel.parts[0] not in _TEMPLATE_PARTS and p.suffix != ".so":
            digest.update(rel.as_posix().encode() + b"\0" + p.read_bytes())
    # hls4ml also pickles the source model into the file (PytorchModel: !!python/object...):
    # executable payload, tied to the user's Python classes, and not needed to serve; drop it
    text = re.sub(r"(?ms)^(?:PytorchModel|KerasModel|OnnxModel): !!python/.*?(?=^\S)", "", text)
    text = re.sub(r"(?m)^OutputDir: .*$", "OutputDir: .", text)
    text = re.sub(r"(?m)^Stamp: .*$", f"Stamp: {digest.hexdigest()[:8]}", text)
    path.write_text(text)


def _keep_model_files(staging: Path, out: Path, vendor_templates: bool) -> None:
    if vendor_templates:
        shutil.copytree(staging, out, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.so", "xclbin_files"))
        return
    shutil.copyfile(staging / CONFIG_FILE, out / CONFIG_FILE)
    shutil.copytree(
        staging / "firmware",
        out / "firmware",
        ignore=lambda d, names: [n for n in names if n in _TEMPLATE_PARTS or n.endswith(".so")],
    )
    # convolutions' buffer fillers are generated into nnet_utils: keep that file when it is not
    # the installed library's generic one (the C-simulation lays it over the library)
    generated = staging / "firmware" / GENERATED_TEMPLATE_FILE
    generic = installed_templates_dir() / GENERATED_TEMPLATE_FILE
    if generated.is_file() and (not generic.is_file() or generated.read_bytes() != generic.read_bytes()):
        (out / "firmware" / "nnet_utils").mkdir(exist_ok=True)
        shutil.copyfile(generated, out / "firmware" / GENERATED_TEMPLATE_FILE)


# ---------------------------------------------------------------------- config.pbtxt
def model_config(req: PackRequest, project: Hls4mlProject) -> str:
    input_name = req.input_name or project.input.name
    output_name = req.output_name or project.output.name
    dims_in = ", ".join(str(d) for d in project.input_shape)
    lines = [req.header.rstrip("\n")] if req.header else []
    lines += [
        f"# Packed by `fpgaserve pack` from {_source_label(req)}: hls4ml {project.backend}, {project.io_type},",
        f"# I/O precision {project.accelerator.input_precision if project.accelerator else 'n/a'}. "
        "How it runs (card or emulation) is chosen by `fpgaserve --fpga-mode`.",
        f'name: "{req.name}"',
        'backend: "hls4ml"',
        f"max_batch_size: {req.max_batch_size}",
        "input [",
        "  {",
        f'    name: "{input_name}"',
        "    data_type: TYPE_FP32",
        f"    dims: [ {dims_in} ]",
        "  }",
        "]",
        "output [",
        "  {",
        f'    name: "{output_name}"',
        "    data_type: TYPE_FP32",
        f"    dims: [ {project.output.size} ]",
        "  }",
        "]",
        "instance_group [",
        "  {",
        f"    count: {req.instance_count}",
        "    kind: KIND_MODEL",
        "  }",
        "]",
    ]
    if req.queue_delay_us is not None:
        lines += ["dynamic_batching {", f"  max_queue_delay_microseconds: {req.queue_delay_us}", "}"]
    params = {"compute_unit": "krnl_rtl_1", **req.extra_parameters}
    for key, value in params.items():
        lines += ["parameters {", f'  key: "{key}"', f'  value: {{ string_value: "{value}" }}', "}"]
    return "\n".join(lines) + "\n"


def _source_label(req: PackRequest) -> str:
    if req.pytorch_module is not None:
        return f"PyTorch {type(req.pytorch_module).__name__}"
    for flag, value in (
        ("--pytorch", req.pytorch),
        ("--onnx", req.onnx),
        ("--keras", req.keras),
        ("--hls4ml-project", req.hls4ml_project),
    ):
        if value:
            return f"{flag} {Path(value.split(':')[0]).name}"
    return "?"


# ---------------------------------------------------------------------- command line
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
    src.add_argument("--hls4ml-project", metavar="DIR", help="an existing hls4ml project (io_parallel)")
    src.add_argument(
        "--float-reference",
        metavar="MODEL.onnx",
        help="the float reference model.onnx to ship (default: exported from --pytorch, or --onnx itself)",
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
    conv.add_argument("--granularity", choices=("model", "type", "name"), default="name")
    conv.add_argument(
        "--io-precision", default="float", help="what the kernel exchanges with the host: float or ap_fixed<W,I>"
    )
    conv.add_argument("--board", default="alveo-u250")
    conv.add_argument("--platform", default="xilinx_u250_xdma_201830_2", help="Vitis platform for --build-xclbin")
    conv.add_argument(
        "--build-xclbin",
        action="store_true",
        help="run hls4ml's synthesis and xclbin build (needs vivado and v++ on PATH; hours)",
    )
    conv.add_argument(
        "--vendor-templates",
        action="store_true",
        help="keep hls4ml's full output (template library, RTL, scripts) in the version folder",
    )
    serve = p.add_argument_group("serving")
    serve.add_argument("--max-batch-size", type=int, default=16384)
    serve.add_argument("--instance-count", type=int, default=1)
    serve.add_argument("--max-queue-delay-us", type=int, default=None, help="enable dynamic batching with this delay")
    serve.add_argument("--input-name", help="tensor name clients use (default: the firmware's)")
    serve.add_argument("--output-name", help="tensor name clients use (default: the firmware's)")
    p.add_argument("--force", action="store_true", help="replace an existing version folder")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    req = PackRequest(
        name=args.name,
        repository=Path(args.repository),
        version=args.version,
        pytorch=args.pytorch,
        state_dict=args.state_dict,
        onnx=args.onnx,
        keras=args.keras,
        hls4ml_project=args.hls4ml_project,
        input_shape=args.input_shape,
        precision_config=args.precision_config,
        default_precision=args.default_precision,
        granularity=args.granularity,
        io_precision=args.io_precision,
        board=args.board,
        platform=args.platform,
        max_batch_size=args.max_batch_size,
        instance_count=args.instance_count,
        queue_delay_us=args.max_queue_delay_us,
        input_name=args.input_name,
        output_name=args.output_name,
        float_reference=args.float_reference,
        vendor_templates=args.vendor_templates,
        build_xclbin=args.build_xclbin,
        force=args.force,
    )
    try:
        version_dir = pack(req)
    except (PackError, ProjectError) as e:
        print(f"fpgaserve pack: error: {e}", file=sys.stderr)
        return 2
    print(f"packed {req.name} into {version_dir} (config: {version_dir.parent / 'config.pbtxt'})")
    return 0
