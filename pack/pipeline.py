"""``pack()``: the order of a pack run.

Contract: :func:`pack` turns a :class:`~.request.PackRequest` into
``<repository>/<name>/<version>/`` and ``<repository>/<name>/config.pbtxt`` and returns the
version folder. Everything that can be checked cheaply (one source, the settings against the
kernel ABI, what an xclbin build needs, ``--xclbin FILE`` and its kernel, an existing version
folder) is checked before anything is converted. The work happens in a temporary folder; the
repository is only touched at the end, so a failed pack leaves it as it was. The order inside
matters:

1. the project: converted and written by hls4ml with the kernel ABI's backend (convert.py), or
   copied from ``--hls4ml-project`` without the tools' run folders (project_files.py);
2. its files fixed on disk (project_files.fix_accelerator_types, normalize_config), read back
   as the server reads them and checked against the kernel ABI (kernel_abi.check_project),
   *before* any build: hls4ml's synthesis reads the files as they are on disk, and a project
   that cannot be served is not worth hours of synthesis;
3. the xclbin built from that project (xclbin.build), or chosen (xclbin.choose), and its
   kernel checked against the ABI and the project;
4. the float reference made in a child process under a time limit (reference.py), or copied
   from ``--float-reference``;
5. the version folder written in one place (version.write_version, card.json last), then
   config.pbtxt (model_config.py) from the version folder as the server will read it.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path

from fpgaserve.backends.hls4ml.project import Hls4mlProject

from . import kernel_abi, project_files, reference, toolchain
from . import xclbin as xclbins
from .convert import convert
from .model_config import batch_size_choice, model_config
from .request import PackError, PackRequest
from .version import VersionContents, write_version

log = logging.getLogger("fpgaserve.pack")


def pack(req: PackRequest) -> Path:
    """Write ``<repository>/<name>/<version>/`` and ``config.pbtxt``; returns the version folder."""
    if len(req.sources()) != 1:
        raise PackError("give exactly one of --pytorch, --onnx, --keras, --hls4ml-project")
    kernel_abi.check_settings(req)
    if req.max_batch_size is not None and req.max_batch_size < 0:
        raise PackError(f"--max-batch-size must be 0 (no batching) or more, got {req.max_batch_size}")
    platform = toolchain.resolve_platform(req.board, req.platform)
    if req.build_xclbin:
        if req.xclbin:
            raise PackError("give --xclbin FILE or --build-xclbin, not both")
        if req.hls4ml_project:
            raise PackError(
                "--build-xclbin builds from a converted model; for --hls4ml-project, build the xclbin with hls4ml "
                "and pass it with --xclbin FILE"
            )
        if platform is None:
            raise PackError(f"--build-xclbin makes Alveo xclbins; board '{req.board}' is not an Alveo card")
        kernel_abi.check_build(req, platform)
    if req.xclbin:
        # refuse a missing or foreign file, or another ABI's kernel, before converting anything
        kernel_abi.check_xclbin_file(xclbins.given(req.xclbin), req)
    if req.float_reference and not Path(req.float_reference).is_file():
        raise PackError(f"--float-reference {req.float_reference}: no such file")
    model_dir = Path(req.repository) / req.name
    version_dir = model_dir / str(req.version)
    if version_dir.exists() and not req.force:
        raise PackError(f"{version_dir} exists; pass --force to replace it")

    with tempfile.TemporaryDirectory(prefix="fpgaserve-pack-") as tmp:
        staging = Path(tmp) / "project"
        made_reference = Path(tmp) / "model.onnx"
        if req.hls4ml_project:
            source = Path(req.hls4ml_project)
            project_files.copy_project(source, staging)
        else:
            hls_model = convert(req, staging, platform)
        # fixed on disk before anything reads the project: hls4ml's build synthesizes these files
        project_files.fix_accelerator_types(staging)
        project_files.normalize_config(staging)
        packed = Hls4mlProject.load(staging)
        packed.weight_files()  # refuse a project whose firmware names missing weights
        # the batch size follows from the tensors' sizes: a model whose row alone exceeds the
        # budget is refused here, before any build
        log.info("%s", batch_size_choice(req, packed)[1])
        kernel_abi.check_project(staging, req)  # a project the kernel cannot carry is not worth a build

        if req.hls4ml_project:
            report = project_files.synthesis_report(source)
            # the search walks the run folders (file names only); --xclbin makes it unnecessary
            found = [] if req.xclbin else xclbins.find(source)
            chosen = xclbins.choose(req.xclbin, None, found, source)
        else:
            built = xclbins.build(hls_model, req.kernel_abi, platform) if req.build_xclbin and platform else None
            report = project_files.synthesis_report(staging)
            chosen = xclbins.choose(req.xclbin, built, [], staging)
        if chosen is not None:
            # named as the user knows it (built, given or found), before it is renamed on packing
            kernel_abi.check_project(staging, req, chosen)
        if req.float_reference:
            ref: Path | None = Path(req.float_reference)
        else:
            job = reference.job_for(req)
            ok = job is not None and reference.make_reference(job, made_reference, req.reference_timeout)
            ref = made_reference if ok else None

        out = Path(tmp) / "version"
        manifest = write_version(
            VersionContents(
                model_name=req.name,
                project=staging,
                vendor_templates=req.vendor_templates,
                reference=ref,
                xclbin=chosen,
                synthesis_report=report,
                kernel_abi=req.kernel_abi,
                source=req.source_description(),
            ),
            out,
        )
        model_dir.mkdir(parents=True, exist_ok=True)
        if version_dir.exists():
            shutil.rmtree(version_dir)
        shutil.copytree(out, version_dir)
    (model_dir / "config.pbtxt").write_text(model_config(req, Hls4mlProject.load(version_dir), manifest))
    return version_dir
