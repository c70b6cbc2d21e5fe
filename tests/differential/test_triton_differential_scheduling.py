"""Differential test of the schedulers: the same requests to the real Triton and to fpgaserve.

Like tests/differential/test_triton_differential.py, identical serialized requests go over raw gRPC to
the real Triton 2.51 (Python-backend models written here) and to fpgaserve (numpy-backend
models with the same names and configs); the gRPC status code and message text must match.

* sequence batcher (Direct, START/READY controls): request validation errors;
* dynamic batcher queue policy: ``max_queue_size`` overflow and ``timeout_action: REJECT``.

Queue errors depend on timing (how many requests overflow), so those cases compare the set
of distinct errors the rejected requests got, not the number of rejections.
"""

from __future__ import annotations

import shutil
import threading
import time

import grpc
import numpy as np
import pytest

from fpgaserve.protos import inference as pb
from support.differential import SERVICE, raw_call
from support.reference_triton import start_tritonserver, stop_tritonserver
from support.server_process import CONFORMANCE_REPO, ServerProcess, free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SEQ_MODEL = "simple_sequence"
QUEUE_FULL_MODEL = "slow_queue_full"
QUEUE_TIMEOUT_MODEL = "slow_queue_timeout"
EXEC_S = 0.3

_SEQ_CONFIG_TAIL = """
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }
  ]
}
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

_SEQ_PY = '''\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """OUTPUT = READY * (INPUT + START), like tests/models/simple_sequence."""

    def execute(self, requests):
        responses = []
        for request in requests:
            get = lambda n: pb_utils.get_input_tensor_by_name(request, n).as_numpy()
            out = get("READY") * (get("INPUT") + get("START"))
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT", out)]))
        return responses
'''

_SLOW_TRITON_PY = f"""\
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep({EXEC_S})
        return [
            pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests
        ]
"""

_SLOW_NUMPY_PY = f"""\
import time


class Model:
    def execute(self, inputs):
        time.sleep({EXEC_S})
        return {{"OUTPUT0": inputs["INPUT0"]}}
"""

_SLOW_IO = """
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

QUEUE_MODELS = {
    QUEUE_FULL_MODEL: "dynamic_batching { default_queue_policy { max_queue_size: 1 } }\n",
    QUEUE_TIMEOUT_MODEL: (
        "dynamic_batching { default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 50000 } }\n"
    ),
}


def _write(repo, name, config, model_file, code):
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(config)
    (repo / name / "1" / model_file).write_text(code)


def _write_triton_repo(repo):
    seq_io = (
        'input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
    )
    _write(
        repo,
        SEQ_MODEL,
        f'name: "{SEQ_MODEL}"\nbackend: "python"\nmax_batch_size: 8\n{seq_io}{_SEQ_CONFIG_TAIL}',
        "model.py",
        _SEQ_PY,
    )
    for name, sched in QUEUE_MODELS.items():
        _write(
            repo,
            name,
            f'name: "{name}"\nbackend: "python"\nmax_batch_size: 1\n{_SLOW_IO}{sched}',
            "model.py",
            _SLOW_TRITON_PY,
        )


def _write_fpgaserve_repo(repo):
    repo.mkdir(parents=True, exist_ok=True)
    shutil.copytree(CONFORMANCE_REPO / SEQ_MODEL, repo / SEQ_MODEL)
    for name, sched in QUEUE_MODELS.items():
        _write(
            repo,
            name,
            f'name: "{name}"\nbackend: "numpy"\nmax_batch_size: 1\n{_SLOW_IO}{sched}',
            "model.py",
            _SLOW_NUMPY_PY,
        )


@pytest.fixture(scope="module")
def servers(tritonserver_path, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("differential_scheduling")
    triton_repo, our_repo = tmp / "triton_repo", tmp / "fpgaserve_repo"
    _write_triton_repo(triton_repo)
    _write_fpgaserve_repo(our_repo)
    ports = [free_port() for _ in range(3)]
    triton = start_tritonserver(triton_repo, *ports, log_path=tmp / "triton.log")
    try:
        ours = ServerProcess([our_repo], log_path=tmp / "fpgaserve.log").start()
    except BaseException:
        stop_tritonserver(triton)
        raise
    try:
        yield f"localhost:{ports[0]}", ours.url
    finally:
        ours.stop()
        stop_tritonserver(triton)


# ----------------------------------------------------------------------------- sequence batcher


def _seq(corrid=None, *, start=False, end=False, batch=1, request_id="", kind=None):
    req = pb.ModelInferRequest(model_name=SEQ_MODEL, id=request_id)
    t = req.inputs.add()
    t.name, t.datatype = "INPUT", "INT32"
    t.shape.extend([batch, 1])
    req.raw_input_contents.append(np.arange(1, batch + 1, dtype=np.int32).tobytes())
    if corrid is not None:
        kind = kind or (
            "string_param" if isinstance(corrid, str) else "bool_param" if isinstance(corrid, bool) else "int64_param"
        )
        setattr(req.parameters["sequence_id"], kind, corrid)
    if start:
        req.parameters["sequence_start"].bool_param = True
    if end:
        req.parameters["sequence_end"].bool_param = True
    return req


def _infer(url, req):
    return raw_call(url, "ModelInfer", req, pb.ModelInferResponse)


def _infer_with_output(url, req):
    """(code, message) and, on success, the outputs (name, datatype, shape, raw bytes)."""
    with grpc.insecure_channel(url) as channel:
        rpc = channel.unary_unary(
            SERVICE + "ModelInfer", request_serializer=None, response_deserializer=pb.ModelInferResponse.FromString
        )
        try:
            resp = rpc(req.SerializeToString(), timeout=30)
        except grpc.RpcError as e:
            return e.code(), e.details(), None
    outputs = [(o.name, o.datatype, list(o.shape)) for o in resp.outputs]
    return grpc.StatusCode.OK, "", (outputs, list(resp.raw_output_contents))


SEQ_CASES = {
    "no sequence_id": lambda rid: [_seq(None, start=True, request_id=rid)],
    "sequence_id 0": lambda rid: [_seq(0, start=True, request_id=rid)],
    "empty string sequence_id": lambda rid: [_seq("", start=True, request_id=rid)],
    "first request without START (int id)": lambda rid: [_seq(4242, request_id=rid)],
    "first request without START (string id)": lambda rid: [_seq("seq-abc", request_id=rid)],
    "batch size 2": lambda rid: [_seq(4343, start=True, batch=2, request_id=rid)],
    "bool sequence_id": lambda rid: [_seq(True, start=True, request_id=rid)],
    "double sequence_id": lambda rid: [_seq(1.5, start=True, request_id=rid, kind="double_param")],
    "uint64 sequence_id": lambda rid: [_seq(4646, start=True, request_id=rid, kind="uint64_param")],
    "first request END without START": lambda rid: [_seq(4747, end=True, request_id=rid)],
    "START twice (restart)": lambda rid: [
        _seq(4848, start=True, request_id=rid),
        _seq(4848, start=True, end=True, request_id=rid),
    ],
    "continue after END": lambda rid: [
        _seq(4444, start=True, end=True, request_id=rid),
        _seq(4444, request_id=rid),
    ],
    "START, continue, END, continue": lambda rid: [
        _seq("s-4545", start=True, request_id=rid),
        _seq("s-4545", request_id=rid),
        _seq("s-4545", end=True, request_id=rid),
        _seq("s-4545", request_id=rid),
    ],
}


@pytest.mark.parametrize("request_id", ["", "seq-req-1"], ids=["no-id", "with-id"])
@pytest.mark.parametrize("case", list(SEQ_CASES))
def test_sequence_errors_match_triton(servers, case, request_id):
    triton, ours = servers
    # the correlation IDs are shared by the two parametrizations: make them unique per id
    build = SEQ_CASES[case]
    expected = [_infer_with_output(triton, r) for r in _uniquify(build(request_id), request_id)]
    got = [_infer_with_output(ours, r) for r in _uniquify(build(request_id), request_id)]
    assert got == expected


def _uniquify(requests, request_id):
    if not request_id:
        return requests
    for r in requests:
        p = r.parameters.get("sequence_id")
        if p is None:
            continue
        if p.WhichOneof("parameter_choice") == "int64_param" and p.int64_param:
            p.int64_param += 100_000
        elif p.WhichOneof("parameter_choice") == "string_param" and p.string_param:
            p.string_param += "-x"
    return requests


# ----------------------------------------------------------------------------- queue policy


def _slow(model, request_id, value):
    req = pb.ModelInferRequest(model_name=model, id=request_id)
    t = req.inputs.add()
    t.name, t.datatype = "INPUT0", "INT32"
    t.shape.extend([1, 1])
    req.raw_input_contents.append(np.array([[value]], dtype=np.int32).tobytes())
    return req


def _burst(url, model, request_id, n=6, gap_s=0.03):
    """Send n requests, gap_s apart (the first one occupies the only instance for EXEC_S);
    return the (code, message) of every request, in send order."""
    results = [None] * n

    def run(i):
        results[i] = _infer(url, _slow(model, request_id, i))

    threads = []
    for i in range(n):
        th = threading.Thread(target=run, args=(i,))
        th.start()
        threads.append(th)
        time.sleep(gap_s)
    for th in threads:
        th.join(30)
    return results


def _errors(results):
    assert results[0] == (grpc.StatusCode.OK, ""), results  # the first one executes
    return {r for r in results if r[0] != grpc.StatusCode.OK}


@pytest.mark.parametrize("request_id", ["", "queue-req-7"], ids=["no-id", "with-id"])
@pytest.mark.parametrize("model", [QUEUE_FULL_MODEL, QUEUE_TIMEOUT_MODEL])
def test_queue_policy_errors_match_triton(servers, model, request_id):
    triton, ours = servers
    expected = _errors(_burst(triton, model, request_id))
    got = _errors(_burst(ours, model, request_id))
    assert expected, "Triton rejected nothing: the burst did not overflow its queue"
    assert got == expected
