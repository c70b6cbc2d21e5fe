"""``config.pbtxt`` for a packed model.

Contract: :func:`model_config` returns the text of ``<repository>/<name>/config.pbtxt`` for the
request, the packed project (as read back from the version folder) and its card.json
(:class:`CardManifest`): ``backend: "hls4ml"``, FP32 input and output tensors shaped like the
firmware's top function (names from the firmware unless ``--input-name``/``--output-name``),
the batching settings of the request, the instance group (:func:`instance_count`) and the
hls4ml backend's ``parameters``: ``compute_unit: "*"``, every compute unit of the kernel (the
runtime spreads the instances over them). It reads nothing from disk itself.
"""

from __future__ import annotations

import textwrap

from fpgaserve.backends.hls4ml.card.manifest import CardManifest
from fpgaserve.backends.hls4ml.project import Hls4mlProject

from .request import PackRequest

#: instances per compute unit when pack sizes the group: two double-buffer a CU (one instance's
#: DMA to and from the card overlaps the other's kernel run), more only queue behind them
INSTANCES_PER_COMPUTE_UNIT = 2
#: the header comment's text width (after "# ")
HEADER_WIDTH = 96


def instance_count(req: PackRequest, manifest: CardManifest) -> tuple[int, str]:
    """(count, why): ``--instance-count`` when given; else two per compute unit of the packed
    xclbin's kernel; else one (without an xclbin, the emulation modes run the model)."""
    if req.instance_count is not None:
        return req.instance_count, "set by --instance-count"
    units = len(manifest.xclbin.compute_units) if manifest.xclbin is not None else 0
    if manifest.xclbin is None or units == 0:
        return 1, (
            "no xclbin is packed (with one, pack gives each of its compute units "
            f"{INSTANCES_PER_COMPUTE_UNIT} instances: one's DMA overlaps the other's kernel run)"
        )
    return INSTANCES_PER_COMPUTE_UNIT * units, (
        f"{INSTANCES_PER_COMPUTE_UNIT} per compute unit of {manifest.kernel} in {manifest.xclbin.file} ({units}): "
        "one instance's DMA overlaps the other's kernel run"
    )


def model_config(req: PackRequest, project: Hls4mlProject, manifest: CardManifest) -> str:
    input_name = req.input_name or project.input.name
    output_name = req.output_name or project.output.name
    dims_in = ", ".join(str(d) for d in project.input_shape)
    count, why = instance_count(req, manifest)
    lines = [req.header.rstrip("\n")] if req.header else []
    header = (
        f"Packed by `fpgaserve pack` from {req.source_label()}: hls4ml {project.backend}, {project.io_type}, "
        f"kernel ABI {manifest.kernel_abi}, elements {manifest.io.input} in and {manifest.io.output} out "
        "(card.json). How it runs (card or emulation) is chosen by `fpgaserve --fpga-mode`. "
        f"Instances: {why}."
    )
    lines += [f"# {line}" for line in textwrap.wrap(header, HEADER_WIDTH, break_on_hyphens=False)]
    lines += [
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
        f"    count: {count}",
        "    kind: KIND_MODEL",
        "  }",
        "]",
    ]
    if req.queue_delay_us is not None:
        lines += ["dynamic_batching {", f"  max_queue_delay_microseconds: {req.queue_delay_us}", "}"]
    # every compute unit of the kernel, whatever the xclbin holds: the runtime spreads the
    # instances over them on every card the model uses
    params = {"compute_unit": "*", **req.extra_parameters}
    for key, value in params.items():
        lines += ["parameters {", f'  key: "{key}"', f'  value: {{ string_value: "{value}" }}', "}"]
    return "\n".join(lines) + "\n"
