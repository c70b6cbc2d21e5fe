"""Model repositories with ensembles, written the same way for fpgaserve (numpy / ONNX models)
and for the real Triton (Python-backend models computing the same), so that tests can send
both servers the same requests.

Composing models (FP32 ``X`` [4] -> ``Y`` [4], max_batch_size 8, a dynamic batcher that waits up
to 50 ms, so concurrent steps batch): ``scale`` (Y = 2 X), ``addone`` (Y = X + 1), and ``adder``
(A, B -> Y = A + B). A row whose first value is below -1000 fails its request with "negative
input" (``scale``, ``addone``). ``onnx_addone`` is ``addone`` as an ONNX graph (fpgaserve's
onnxruntime backend; a Python model on Triton's side, which has no ONNX Runtime).
"""

from __future__ import annotations

from pathlib import Path

COMPOSING = {"scale": "X * 2", "addone": "X + 1"}
BAD_VALUE = -5000.0

_IO = """input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
_ADDER_IO = """input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
_BATCHING = "max_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 50000 }\n"

_NUMPY = """\
import numpy as np


class Model:
    def execute(self, inputs):
        X = inputs["X"]
        if (X[:, 0] < -1000).any():
            raise ValueError("negative input")
        return {{"Y": ({expr}).astype(np.float32)}}
"""

_TRITON = """\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            X = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if (X[:, 0] < -1000).any():
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("negative input")))
                continue
            Y = ({expr}).astype(np.float32)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("Y", Y)]))
        return responses
"""

_NUMPY_ADDER = """\
class Model:
    def execute(self, inputs):
        return {"Y": inputs["A"] + inputs["B"]}
"""

_TRITON_ADDER = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        get = pb_utils.get_input_tensor_by_name
        return [
            pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("Y", get(r, "A").as_numpy() + get(r, "B").as_numpy())]
            )
            for r in requests
        ]
"""


def _write(repo: Path, name: str, config: str, files: dict[str, str | bytes]) -> None:
    (repo / name / "1").mkdir(parents=True, exist_ok=True)
    (repo / name / "config.pbtxt").write_text(config)
    for filename, content in files.items():
        path = repo / name / "1" / filename
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def write_composing(repo: Path, triton: bool) -> None:
    """scale, addone, adder (and onnx_addone) for fpgaserve (numpy/ONNX) or Triton (Python)."""
    backend = "python" if triton else "numpy"
    for name, expr in COMPOSING.items():
        code = (_TRITON if triton else _NUMPY).format(expr=expr)
        _write(repo, name, f'name: "{name}"\nbackend: "{backend}"\n{_BATCHING}{_IO}', {"model.py": code})
    _write(
        repo,
        "adder",
        f'name: "adder"\nbackend: "{backend}"\n{_BATCHING}{_ADDER_IO}',
        {"model.py": _TRITON_ADDER if triton else _NUMPY_ADDER},
    )
    if triton:
        code = _TRITON.format(expr="X + 1")
        _write(repo, "onnx_addone", f'name: "onnx_addone"\nbackend: "python"\n{_BATCHING}{_IO}', {"model.py": code})
    else:
        _write(
            repo,
            "onnx_addone",
            f'name: "onnx_addone"\nplatform: "onnxruntime_onnx"\n{_BATCHING}{_IO}',
            {"model.onnx": addone_onnx()},
        )


def addone_onnx() -> bytes:
    """Y = X + 1 as an ONNX graph with a dynamic batch dimension."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    one = numpy_helper.from_array(np.ones(4, dtype=np.float32), "one")
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "one"], ["Y"])],
        "addone",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 4])],
        initializer=[one],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()


def ensemble_config(
    name: str,
    steps: list[tuple[str, int, dict[str, str], dict[str, str]]],
    inputs=(("IN", "TYPE_FP32", "4"),),
    outputs=(("OUT", "TYPE_FP32", "4"),),
    max_batch_size: int = 8,
    extra: str = "",
) -> str:
    """config.pbtxt of an ensemble; ``steps``: (model, version, input_map, output_map)."""

    def tensors(items):
        return ", ".join(f'{{ name: "{n}" data_type: {t} dims: [ {d} ] }}' for n, t, d in items)

    def maps(kind, pairs):
        return " ".join(f'{kind} {{ key: "{k}" value: "{v}" }}' for k, v in pairs.items())

    step_text = ", ".join(
        f'{{ model_name: "{m}" model_version: {v} {maps("input_map", im)} {maps("output_map", om)} }}'
        for m, v, im, om in steps
    )
    return (
        f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: {max_batch_size}\n'
        f"input [ {tensors(inputs)} ]\noutput [ {tensors(outputs)} ]\n"
        f"ensemble_scheduling {{ step [ {step_text} ] }}\n{extra}"
    )


def step(model: str, x: str, y: str, version: int = -1):
    return (model, version, {"X": x}, {"Y": y})


# good ensembles: name -> config arguments
GOOD = {
    # IN -> scale -> addone -> OUT: OUT = 2 IN + 1
    "pipe": {"steps": [step("scale", "IN", "mid"), step("addone", "mid", "OUT")]},
    # two branches run concurrently, joined: OUT = 2 IN + (IN + 1)
    "diamond": {
        "steps": [
            step("scale", "IN", "a"),
            step("addone", "IN", "b"),
            ("adder", -1, {"A": "a", "B": "b"}, {"Y": "OUT"}),
        ]
    },
    # an ensemble inside an ensemble, then a fixed version: OUT = 2 (2 IN + 1)
    "nested": {"steps": [("pipe", -1, {"IN": "IN"}, {"OUT": "p"}), step("scale", "p", "OUT", version=1)]},
    # an ONNX step: OUT = 2 IN + 1
    "onnx_pipe": {"steps": [step("scale", "IN", "mid"), step("onnx_addone", "mid", "OUT")]},
}

# ensembles Triton refuses: name -> (config arguments, Triton 2.51's load error)
BAD = {
    "bad_unknown_model": (
        {"steps": [step("nosuch", "IN", "OUT")]},
        "ensemble bad_unknown_model contains models that are not available or ambiguous: nosuch",
    ),
    "bad_cycle": (
        {"steps": [step("scale", "IN", "OUT"), step("addone", "b", "c"), step("scale", "c", "b")]},
        "ensemble tensor 'b' is unused in ensemble 'bad_cycle'",
    ),
    "bad_self": (
        {"steps": [("bad_self", -1, {"IN": "IN"}, {"OUT": "OUT"})]},
        "circular dependency between ensembles: bad_self -> ... -> bad_self -> bad_self",
    ),
    # two ensembles that use each other (bad_cycle_a's partner is cycle_b, written with it)
    "bad_cycle_a": (
        {"steps": [("cycle_b", -1, {"IN": "IN"}, {"OUT": "OUT"})]},
        "circular dependency between ensembles: bad_cycle_a -> ... -> cycle_b -> bad_cycle_a",
    ),
    "bad_input_unused": (
        {"steps": [step("scale", "IN", "OUT")], "inputs": (("IN", "TYPE_FP32", "4"), ("IN2", "TYPE_FP32", "4"))},
        "ensemble input 'IN2' for ensemble bad_input_unused' is not used",
    ),
    "bad_output_unproduced": (
        {"steps": [step("scale", "IN", "mid"), step("addone", "mid", "x")]},
        "ensemble output 'OUT' for ensemble bad_output_unproduced' is not used",
    ),
    "bad_step_output_unused": (
        {"steps": [step("scale", "IN", "mid"), step("addone", "IN", "OUT")]},
        "ensemble tensor 'mid' is unused in ensemble 'bad_step_output_unused'",
    ),
    "bad_two_writers": (
        {"steps": [step("scale", "IN", "OUT"), step("addone", "IN", "OUT")]},
        "ensemble tensor 'OUT' can appear in an output map only once for ensemble 'bad_two_writers' step 1",
    ),
    "bad_no_input_map": (
        {"steps": [("scale", -1, {}, {"Y": "OUT"})]},
        "must specify 'input_map' in step 0 of ensemble 'bad_no_input_map'",
    ),
    "bad_model_input": (
        {"steps": [("scale", -1, {"NOPE": "IN"}, {"Y": "OUT"})]},
        "in ensemble bad_model_input, ensemble tensor IN is mapping to non-existing input NOPE in model scale",
    ),
    "bad_model_output": (
        {"steps": [("scale", -1, {"X": "IN"}, {"NOPE": "OUT"})]},
        "in ensemble bad_model_output, ensemble tensor OUT is mapped from non-existing output NOPE in model scale",
    ),
    "bad_input_unmapped": (
        {"steps": [("adder", -1, {"A": "IN"}, {"Y": "OUT"})]},
        "in ensemble bad_input_unmapped, input B in model adder is not mapped to any ensemble tensors",
    ),
    "bad_dtype": (
        {"steps": [step("scale", "IN", "OUT")], "inputs": (("IN", "TYPE_INT32", "4"),)},
        "in ensemble bad_dtype, ensemble tensor IN: inconsistent data type: TYPE_INT32 is inferred from model "
        "bad_dtype while TYPE_FP32 is inferred from model scale",
    ),
    "bad_shape": (
        {"steps": [step("scale", "IN", "OUT")], "outputs": (("OUT", "TYPE_FP32", "2, 2"),)},
        "in ensemble bad_shape, ensemble tensor OUT: inconsistent shape: [-1,2,2] is inferred from model "
        "bad_shape while [-1,4] is inferred from model scale",
    ),
    "bad_version": (
        {"steps": [step("scale", "IN", "OUT", version=7)]},
        "ensemble 'bad_version' depends on 'scale' whose required version 7 is not loaded.",
    ),
    "bad_batch_size": (
        {"steps": [step("scale", "IN", "OUT")], "max_batch_size": 16},
        "ensemble bad_batch_size allows maximum batch size 16, but it contains model scale which only allows "
        "maximum batch size to be 8",
    ),
}

# the errors Triton finds in the ensemble's own config (before it looks at composing models):
# its load RPC answers INTERNAL "failed to load '<name>', failed to poll from model repository"
CONFIG_STAGE = {
    "bad_cycle",
    "bad_input_unused",
    "bad_output_unproduced",
    "bad_step_output_unused",
    "bad_two_writers",
    "bad_no_input_map",
}


# an ensemble whose composing model cannot load (dims 0): Triton's text up to that model's
# own error (which each server words its way)
BROKEN_DEP = "bad_broken_dep"
BROKEN_DEP_TEXT = (
    f"load failed for model '{BROKEN_DEP}': ensemble '{BROKEN_DEP}' depends on 'broken' which has no loaded "
    "version. Model 'broken' loading failed with error: "
)


def write_ensembles(repo: Path, triton: bool = False) -> None:
    """GOOD and BAD ensembles, BROKEN_DEP and the models only they use."""
    for name, args in GOOD.items():
        _write(repo, name, ensemble_config(name, **args), {})  # type: ignore[arg-type]
    for name, (args, _) in BAD.items():
        _write(repo, name, ensemble_config(name, **args), {})  # type: ignore[arg-type]
    _write(repo, "cycle_b", ensemble_config("cycle_b", [("bad_cycle_a", -1, {"IN": "IN"}, {"OUT": "OUT"})]), {})
    backend = "python" if triton else "numpy"
    _write(
        repo,
        "broken",
        f'name: "broken"\nbackend: "{backend}"\n{_BATCHING}{_IO.replace("[ 4 ]", "[ 0 ]")}',
        {"model.py": (_TRITON if triton else _NUMPY).format(expr="X")},
    )
    _write(repo, BROKEN_DEP, ensemble_config(BROKEN_DEP, [step("broken", "IN", "OUT")]), {})
