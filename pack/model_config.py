"""``config.pbtxt`` for a packed model.

Contract: :func:`model_config` returns the text of ``<repository>/<name>/config.pbtxt`` for the
request, the packed project (as read back from the version folder) and its card.json
(:class:`CardManifest`): ``backend: "hls4ml"``, FP32 input and output tensors shaped like the
firmware's top function (names from the firmware unless ``--input-name``/``--output-name``),
the batching settings of the request (``max_batch_size`` from :func:`batch_size_choice`), the
instance group (:func:`instance_count`) and the
hls4ml backend's ``parameters``: ``compute_unit: "*"``, every compute unit of the kernel (the
runtime spreads the instances over them). It reads nothing from disk itself.
"""

from __future__ import annotations

import textwrap

from fpgaserve.backends.hls4ml.card.manifest import CardManifest
from fpgaserve.backends.hls4ml.project import Hls4mlProject

from .request import DEFAULT_MAX_BATCH_SIZE, PackError, PackRequest, format_bytes

#: instances per compute unit when pack sizes the group: two double-buffer a CU (one instance's
#: DMA to and from the card overlaps the other's kernel run), more only queue behind them
INSTANCES_PER_COMPUTE_UNIT = 2
#: the header comment's text width (after "# ")
HEADER_WIDTH = 96
#: bytes of one element of the config's tensors (TYPE_FP32 in and out)
FP32_BYTES = 4


def batch_size_choice(req: PackRequest, project: Hls4mlProject) -> tuple[int, str]:
    """(max_batch_size, why): the rows one full batch may have so that its inputs and outputs
    (FP32, as the config declares them) fit ``req.batch_memory_budget``. Without
    ``--max-batch-size``: as many rows as fit, at most DEFAULT_MAX_BATCH_SIZE; with it: that
    value, if its full batch fits. Raises PackError when one row alone, or the given
    max_batch_size's full batch, exceeds the budget: the server holds a full batch per instance
    in flight, so a batch past the budget is memory the operator did not plan for."""
    n_in, n_out = project.input.size, project.output.size
    row = FP32_BYTES * (n_in + n_out)
    budget = req.batch_memory_budget
    per_row = f"{row:,} bytes per row (FP32: {n_in:,} input + {n_out:,} output elements)"
    limit = f"the {format_bytes(budget)} batch memory budget (--batch-memory-budget)"
    if row > budget:
        raise PackError(
            f"one row of '{req.name}' takes {format_bytes(row)}: {per_row}, more than {limit}; raise the budget "
            "if the server can hold it"
        )
    fits = budget // row
    if req.max_batch_size is not None:
        rows = req.max_batch_size
        if rows < 0:
            raise PackError(f"--max-batch-size must be 0 (no batching) or more, got {rows}")
        if rows > fits:
            raise PackError(
                f"--max-batch-size {rows}: a full batch of '{req.name}' would take {format_bytes(rows * row)} "
                f"({rows:,} rows x {per_row}), more than {limit}, which holds {fits:,} rows; lower "
                "--max-batch-size or raise the budget"
            )
        return rows, f"max_batch_size {rows} (--max-batch-size): a full batch is {rows:,} rows x {per_row} = " + (
            f"{format_bytes(rows * row)}, within {limit}"
        )
    rows = min(DEFAULT_MAX_BATCH_SIZE, fits)
    bound = (
        f"the most rows that fit {limit}"
        if rows < DEFAULT_MAX_BATCH_SIZE
        else f"pack's largest batch ({DEFAULT_MAX_BATCH_SIZE}), well within {limit}"
    )
    return rows, f"max_batch_size {rows}: {bound}; a full batch is {rows:,} rows x {per_row} = " + format_bytes(
        rows * row
    )


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
    max_batch_size, batch_why = batch_size_choice(req, project)
    lines = [req.header.rstrip("\n")] if req.header else []
    header = (
        f"Packed by `fpgaserve pack` from {req.source_label()}: hls4ml {project.backend}, {project.io_type}, "
        f"kernel ABI {manifest.kernel_abi}, elements {manifest.io.input} in and {manifest.io.output} out "
        "(card.json). How it runs (card or emulation) is chosen by `fpgaserve --fpga-mode`. "
        f"Instances: {why}. Batch: {batch_why}."
    )
    lines += [f"# {line}" for line in textwrap.wrap(header, HEADER_WIDTH, break_on_hyphens=False)]
    lines += [
        f'name: "{req.name}"',
        'backend: "hls4ml"',
        f"max_batch_size: {max_batch_size}",
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
