"""Triton's Python backend (``backend: "python"``): models written for Triton, served unchanged
by a real fpgaserve, each instance in its own process.

The models are written here into a temporary repository, as a SONIC site's would be: ``model.py``
with ``class TritonPythonModel`` and ``import triton_python_backend_utils as pb_utils``. The
crash tests kill the instance's process from inside ``execute`` (``os._exit``, a segfault) and
check that the batch fails with a message naming the model and how its process ended, that the
other models keep answering, that the instance comes back, and that it stays down (not ready,
the repository index saying why) after too many restarts. Texts asserted exactly are Triton
2.51's, checked against the real server (instance names, an exception in execute or
initialize, BLS to an unknown model, auto-complete conflicts).
"""

from __future__ import annotations

import json
import os
import queue
import textwrap
import time
import urllib.request
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from support.instance_processes import full_log, instance_processes
from support.server_process import ServerProcess, serve

ADD_SUB = """
import json
import os
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.args = dict(args)
        config = json.loads(args["model_config"])
        self.dtype = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(config, "OUTPUT0")["data_type"])
        pb_utils.Logger.log_info("add_sub initialized as " + args["model_instance_name"])
        # (Triton requires the family to outlive its metrics)
        self.family = pb_utils.MetricFamily("add_sub_requests", "requests add_sub executed",
                                            pb_utils.MetricFamily.COUNTER)
        self.requests = self.family.Metric({"model": args["model_name"]})
        self.size_family = pb_utils.MetricFamily("add_sub_sizes", "input sizes add_sub saw",
                                                 pb_utils.MetricFamily.HISTOGRAM)
        self.sizes = self.size_family.Metric({"model": args["model_name"]}, buckets=[1, 10])

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", (a + b).astype(self.dtype)),
                pb_utils.Tensor("OUTPUT1", (a - b).astype(self.dtype)),
                pb_utils.Tensor("PID", np.array([os.getpid()], dtype=np.int64)),
                pb_utils.Tensor("ARGS", np.array([json.dumps(self.args, sort_keys=True).encode()], dtype=object)),
            ]))
            self.requests.increment(1)
            self.sizes.observe(a.size)
        return responses
"""

ADD_SUB_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "PID" data_type: TYPE_INT64 dims: [ 1 ] }, { name: "ARGS" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

STRINGS = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            upper = np.array([t.upper() for t in text.reshape(-1)], dtype=object).reshape(text.shape)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("UPPER", upper)]))
        return out
"""

STRINGS_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "UPPER" data_type: TYPE_STRING dims: [ -1 ] } ]
"""

# per request: a negative X fails that request alone; the batch's request count is an output
PICKY = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if (x < 0).any():
                out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    "negative input in request " + request.request_id(), pb_utils.TritonError.INVALID_ARG)))
                continue
            n = np.full(x.shape, len(requests), dtype=np.int32)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x * 2), pb_utils.Tensor("N", n)]))
        return out
"""

# (long: the three requests of the batch test must meet in the queue on a loaded machine;
# the batch goes as soon as they have)
PICKY_BATCHER = "dynamic_batching { preferred_batch_size: [ 3 ] max_queue_delay_microseconds: 30000000 }"
PICKY_CONFIG = (
    """
backend: "python"
max_batch_size: 8
"""
    + PICKY_BATCHER
    + """
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""
)

RAISER = """
class TritonPythonModel:
    def execute(self, requests):
        raise ValueError("no luck today")
"""

SCALAR_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "MODE" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "PID" data_type: TYPE_INT64 dims: [ 1 ] } ]
"""

# MODE 0 answers with the process id, 1 exits with status 3, 2 segfaults
CRASHER = """
import ctypes
import os
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            mode = int(pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0])
            if mode == 1:
                os._exit(3)
            if mode == 2:
                ctypes.string_at(0)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("PID", np.array([os.getpid()], dtype=np.int64))]))
        return out
"""

REPEAT = """
import threading
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self.respond, args=(request,)).start()
        return None

    def respond(self, request):
        values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
        sender = request.get_response_sender()
        for i, v in enumerate(values):
            # a negative value is answered with a tensor of the wrong shape
            out = np.array([v] if v >= 0 else [v, v], dtype=np.int32)
            sender.send(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", out),
                pb_utils.Tensor("IDX", np.array([i], dtype=np.uint32))]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""

# an error response for each negative value, and the stream goes on with the next values
REPEAT_ERRORS = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        sender = requests[0].get_response_sender()
        for i, v in enumerate(pb_utils.get_input_tensor_by_name(requests[0], "IN").as_numpy().tolist()):
            if v < 0:
                sender.send(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("negative %d" % v, pb_utils.TritonError.INVALID_ARG)))
                continue
            sender.send(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", np.array([v], dtype=np.int32)),
                pb_utils.Tensor("IDX", np.array([i], dtype=np.uint32))]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

REPEAT_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] } ]
"""

# BLS: calls add_sub (or the model named in MODEL) from inside execute
BLS = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            name = pb_utils.get_input_tensor_by_name(request, "MODEL").as_numpy()[0].decode()
            a = pb_utils.get_input_tensor_by_name(request, "A").as_numpy()
            call = pb_utils.InferenceRequest(
                model_name=name,
                inputs=[pb_utils.Tensor("INPUT0", a), pb_utils.Tensor("INPUT1", np.ones_like(a))],
                requested_output_names=["OUTPUT0"])
            response = call.exec()
            if response.has_error():
                raise pb_utils.TritonModelException(response.error().message())
            total = pb_utils.get_output_tensor_by_name(response, "OUTPUT0").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", total)]))
        return out
"""

BLS_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "MODEL" data_type: TYPE_STRING dims: [ 1 ] }, { name: "A" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""

# BLS beyond exec(): a decoupled model's stream, and two calls awaited together
BLS_MORE = """
import asyncio
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    async def execute(self, requests):
        out = []
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            stream = pb_utils.InferenceRequest(
                model_name="repeat", inputs=[pb_utils.Tensor("IN", values)], requested_output_names=["OUT"])
            responses = list(stream.exec(decoupled=True))
            repeated = [pb_utils.get_output_tensor_by_name(r, "OUT").as_numpy()[0]
                        for r in responses if r.output_tensors()]
            sizes = [len(r.output_tensors()) for r in responses]
            unknown = pb_utils.InferenceRequest(
                model_name="no_such_model", inputs=[pb_utils.Tensor("IN", values)], requested_output_names=["OUT"])
            failed = [int(r.has_error()) for r in unknown.exec(decoupled=True)]
            a = np.array([1, 2, 3, 4], dtype=np.float32)
            calls = [pb_utils.InferenceRequest(
                model_name="add_sub", inputs=[pb_utils.Tensor("INPUT0", a), pb_utils.Tensor("INPUT1", a * k)],
                requested_output_names=["OUTPUT0"]).async_exec() for k in (1, 2)]
            sums = [pb_utils.get_output_tensor_by_name(r, "OUTPUT0").as_numpy() for r in await asyncio.gather(*calls)]
            out.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("REPEATED", np.array(repeated, dtype=np.int32)),
                pb_utils.Tensor("SIZES", np.array(sizes, dtype=np.int32)),
                pb_utils.Tensor("FAILED", np.array(failed, dtype=np.int32)),
                pb_utils.Tensor("SUMS", np.stack(sums))]))
        return out
"""

BLS_MORE_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "REPEATED" data_type: TYPE_INT32 dims: [ -1 ] }, { name: "SUMS" data_type: TYPE_FP32 dims: [ 2, 4 ] },
         { name: "SIZES" data_type: TYPE_INT32 dims: [ -1 ] }, { name: "FAILED" data_type: TYPE_INT32 dims: [ -1 ] } ]
"""

DOUBLE = """
import os
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([
            pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() * 2),
            pb_utils.Tensor("PID", np.array([os.getpid()], dtype=np.int64))]) for r in requests]
"""

DOUBLE_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] }, { name: "PID" data_type: TYPE_INT64 dims: [ 1 ] } ]
"""

# the mechanism hosts any backend: a numpy-backend model in instance processes
NUMPY_HOSTED = """
import os
import numpy as np

class Model:
    def execute(self, inputs):
        if inputs["MODE"][0] == 1:
            os._exit(5)
        return {"PID": np.array([os.getpid()], dtype=np.int64)}
"""

NUMPY_HOSTED_CONFIG = """
backend: "numpy"
parameters { key: "instance_process" value: { string_value: "true" } }
max_batch_size: 0
input [ { name: "MODE" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "PID" data_type: TYPE_INT64 dims: [ 1 ] } ]
"""

AUTO = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [2]})
        auto_complete_model_config.add_output({"name": "Y", "data_type": "TYPE_FP32", "dims": [2]})
        auto_complete_model_config.set_max_batch_size(4)
        auto_complete_model_config.set_dynamic_batching()
        return auto_complete_model_config

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() * 3)]) for r in requests]
"""

# a running sum per sequence: START resets it, the correlation id tells sequences apart
ACCUMULATE = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        out = []
        for request in requests:
            x = int(pb_utils.get_input_tensor_by_name(request, "X").as_numpy().sum())
            key = request.correlation_id()
            if not key:  # the sequence batcher's filler rows must not reach a Python model
                raise ValueError("a request outside any sequence")
            if request.flags() & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START:
                self.sums[key] = 0
            self.sums[key] = self.sums.get(key, 0) + x
            total = self.sums[key]
            if request.flags() & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END:
                del self.sums[key]
            params = np.array([[request.parameters().encode()]], dtype=object)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", np.array([[total]], dtype=np.int32)),
                                                   pb_utils.Tensor("PARAMS", params)]))
        return out
"""

ACCUMULATE_CONFIG = """
backend: "python"
max_batch_size: 4
sequence_batching { max_sequence_idle_microseconds: 60000000 }
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "PARAMS" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

# what execute returns, by MODE: None, no response, a response without the output, a
# response whose output has another data type than declared, something else than a response
ODD = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        mode = int(pb_utils.get_input_tensor_by_name(requests[0], "MODE").as_numpy()[0])
        if mode == 0:
            return None
        if mode == 1:
            return []
        if mode == 2:
            return [pb_utils.InferenceResponse([])]
        if mode == 3:
            return [pb_utils.InferenceResponse([pb_utils.Tensor("PID", np.array([1.5], dtype=np.float32))])]
        return ["not a response"]
"""

BAD_INIT = """
class TritonPythonModel:
    def initialize(self, args):
        raise ValueError("bad weights")

    def execute(self, requests):
        return []
"""

CONDA_CONFIG = """
backend: "python"
parameters { key: "EXECUTION_ENV_PATH" value: { string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }
"""


# waits, while its client is there, for the client to withdraw the request (X == 1), and
# writes down what is_cancelled() said; X == 0 answers at once
PATIENT = """
import os, time
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.path = os.path.join(args["model_repository"], "cancelled.txt")

    def execute(self, requests):
        responses = []
        for request in requests:
            if int(pb_utils.get_input_tensor_by_name(request, "X").as_numpy()[0]) == 1:
                deadline = time.monotonic() + 60
                while not request.is_cancelled() and time.monotonic() < deadline:
                    time.sleep(0.02)
                with open(self.path, "a") as f:
                    f.write(f"{request.request_id()} {request.is_cancelled()}\\n")
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", np.array([7], dtype=np.int32))]))
        return responses
"""

PATIENT_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

# a decoupled model that streams until its client cancels the stream (Triton's way to stop
# a generator early), then ends it with the final flag
TICKER = """
import os, time
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.path = os.path.join(args["model_repository"], "cancelled.txt")

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            deadline = time.monotonic() + 60
            tick = 0
            while not sender.is_cancelled() and time.monotonic() < deadline:
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("Y", np.array([tick], dtype=np.int32))]))
                tick += 1
                time.sleep(0.02)
            with open(self.path, "a") as f:
                f.write(f"{request.request_id()} {sender.is_cancelled()}\\n")
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

TICKER_CONFIG = PATIENT_CONFIG + "model_transaction_policy { decoupled: true }\n"


def _model(repo: Path, name: str, config: str, code: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(f'name: "{name}"\n' + textwrap.dedent(config))
    (repo / name / "1" / "model.py").write_text(textwrap.dedent(code))


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("python_models")
    _model(repo, "add_sub", ADD_SUB_CONFIG, ADD_SUB)
    _model(repo, "strings", STRINGS_CONFIG, STRINGS)
    _model(repo, "picky", PICKY_CONFIG, PICKY)
    _model(repo, "picky_alone", PICKY_CONFIG.replace(PICKY_BATCHER, ""), PICKY)
    _model(repo, "raiser", SCALAR_CONFIG, RAISER)
    for name in ("crash_exit", "crash_segv", "crash_loop"):
        _model(repo, name, SCALAR_CONFIG, CRASHER)
    _model(repo, "repeat", REPEAT_CONFIG, REPEAT)
    _model(repo, "repeat_errors", REPEAT_CONFIG, REPEAT_ERRORS)
    _model(repo, "bls", BLS_CONFIG, BLS)
    _model(repo, "bls_more", BLS_MORE_CONFIG, BLS_MORE)
    _model(repo, "auto", 'backend: "python"\n', AUTO)
    _model(repo, "double", DOUBLE_CONFIG, DOUBLE)
    _model(repo, "numpy_hosted", NUMPY_HOSTED_CONFIG, NUMPY_HOSTED)
    # no backend named: a model.py with TritonPythonModel is a Python-backend model, as in Triton
    _model(repo, "undeclared", DOUBLE_CONFIG.replace('backend: "python"', ""), DOUBLE)
    _model(repo, "conda", CONDA_CONFIG, ADD_SUB)
    _model(repo, "bad_init", SCALAR_CONFIG, BAD_INIT)
    _model(repo, "odd", SCALAR_CONFIG, ODD)
    _model(repo, "accumulate", ACCUMULATE_CONFIG, ACCUMULATE)
    _model(repo, "no_class", SCALAR_CONFIG, "x = 1\n")
    _model(repo, "patient", PATIENT_CONFIG, PATIENT)
    _model(repo, "ticker", TICKER_CONFIG, TICKER)
    return repo


@pytest.fixture(scope="module")
def server(repo, tmp_path_factory):
    log = tmp_path_factory.mktemp("python_log") / "server.log"
    yield from serve(
        ServerProcess(
            [repo],
            "--model-control-mode",
            "explicit",
            "--load-model",
            "*",
            "--strict-readiness",
            "false",
            "--frontend-processes",
            "2",
            log_path=log,
        )
    )


@pytest.fixture
def client(server):
    return grpcclient.InferenceServerClient(server.url)


def _add_sub_inputs(module, a, b):
    ins = [module.InferInput("INPUT0", [4], "FP32"), module.InferInput("INPUT1", [4], "FP32")]
    ins[0].set_data_from_numpy(a)
    ins[1].set_data_from_numpy(b)
    return ins


def _mode(value: int):
    m = grpcclient.InferInput("MODE", [1], "INT32")
    m.set_data_from_numpy(np.array([value], dtype=np.int32))
    return [m]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purposes (its parent has not reaped it yet)
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(") ", 1)[1][0] != "Z"


def test_add_sub_grpc_and_http(server, client):
    a = np.array([1, 2, 3, 4], dtype=np.float32)
    b = np.array([10, 20, 30, 40], dtype=np.float32)
    r = client.infer("add_sub", _add_sub_inputs(grpcclient, a, b))
    assert r.as_numpy("OUTPUT0").tolist() == [11, 22, 33, 44]
    assert r.as_numpy("OUTPUT1").tolist() == [-9, -18, -27, -36]
    assert r.as_numpy("PID")[0] != server.proc.pid  # it ran in its own process
    http = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    r = http.infer("add_sub", _add_sub_inputs(httpclient, a, b), outputs=[httpclient.InferRequestedOutput("OUTPUT1")])
    assert r.as_numpy("OUTPUT1").tolist() == [-9, -18, -27, -36]
    assert r.as_numpy("OUTPUT0") is None


def test_initialize_gets_tritons_args(server, client):

    a = np.zeros(4, dtype=np.float32)
    args = json.loads(client.infer("add_sub", _add_sub_inputs(grpcclient, a, a)).as_numpy("ARGS")[0])
    assert args["model_name"] == "add_sub"
    assert args["model_version"] == "1"
    assert args["model_instance_kind"] == "CPU"
    assert args["model_instance_name"] == "add_sub_0"  # as Triton 2.51 names it
    assert args["model_instance_device_id"] == "0"
    assert Path(args["model_repository"]).name == "add_sub"
    config = json.loads(args["model_config"])
    assert config["name"] == "add_sub"
    assert config["input"][0]["dims"] == [4]  # numbers, as Triton writes them
    assert config["output"][0]["data_type"] == "TYPE_FP32"
    assert all(isinstance(v, str) for v in args.values())


def test_large_tensors_travel_through_shared_memory(server, client):
    # 1 MiB per input: above the inline size, so the data crosses by descriptor
    http = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    config = http.get_model_config("add_sub")
    assert config["input"][0]["dims"] == [4]
    text = np.array([b"x" * 300000, "grüße".encode(), b""], dtype=object)
    t = grpcclient.InferInput("TEXT", [3], "BYTES")
    t.set_data_from_numpy(text)
    r = client.infer("strings", [t])
    assert r.as_numpy("UPPER").tolist() == [b"X" * 300000, "GRüßE".encode(), b""]


def test_large_inputs_are_read_in_place_from_the_frontends_arena(client):
    # a large input reaches the engine in its frontend process's arena; the instance process
    # maps that arena and reads the input there (no copy into its own segment)
    x = np.arange(100_000, dtype=np.float32)
    inp = grpcclient.InferInput("X", [x.size], "FP32")
    inp.set_data_from_numpy(x)
    r = client.infer("double", [inp])
    assert np.array_equal(r.as_numpy("Y"), x * 2)
    pid = int(r.as_numpy("PID")[0])
    with open(f"/proc/{pid}/maps") as f:
        assert "memfd:fpgaserve-arena" in f.read()


def test_one_requests_error_leaves_the_others_of_its_batch(client):
    results: queue.Queue = queue.Queue()
    for i, x in enumerate([5, -1, 7]):
        inp = grpcclient.InferInput("X", [1, 1], "INT32")
        inp.set_data_from_numpy(np.array([[x]], dtype=np.int32))
        client.async_infer(
            "picky",
            [inp],
            partial(lambda q, i, result, error: q.put((i, result, error)), results, i),
            request_id=f"r{i}",
        )
    got = {}
    for _ in range(3):
        i, result, error = results.get(timeout=60)
        got[i] = (result, error)
    assert got[0][1] is None and got[0][0].as_numpy("Y").tolist() == [[10]]
    assert got[2][1] is None and got[2][0].as_numpy("Y").tolist() == [[14]]
    assert got[0][0].as_numpy("N").tolist() == [[3]]  # the three requests were one batch
    error = got[1][1]
    assert error is not None
    assert error.status() == "StatusCode.INVALID_ARGUMENT"
    assert error.message() == "negative input in request r1"


def test_errors_over_http_carry_their_status(server):
    http = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    x = httpclient.InferInput("X", [1, 1], "INT32")
    x.set_data_from_numpy(np.array([[-3]], dtype=np.int32))
    with pytest.raises(InferenceServerException) as e:
        http.infer("picky_alone", [x], request_id="h1")
    assert e.value.status() == "400"
    assert e.value.message() == "negative input in request h1"
    mode = httpclient.InferInput("MODE", [1], "INT32")
    mode.set_data_from_numpy(np.array([0], dtype=np.int32))
    with pytest.raises(InferenceServerException) as e:
        http.infer("raiser", [mode])
    assert e.value.status() == "500"
    assert e.value.message().startswith("Failed to process the request(s) for model 'raiser_0', message: ValueError")


def test_exception_in_execute_fails_the_batch(client):
    with pytest.raises(InferenceServerException) as e:
        client.infer("raiser", _mode(0))
    assert e.value.status() == "StatusCode.INTERNAL"
    message = e.value.message()
    # Triton 2.51's text, exactly (the path is the model's file)
    path = Path(message.split("At:\n  ", 1)[1].split("(", 1)[0])
    assert path.parts[-3:] == ("raiser", "1", "model.py")
    assert message == (
        "Failed to process the request(s) for model 'raiser_0', message: ValueError: no luck today\n\n"
        f"At:\n  {path}(4): execute\n"
    )
    assert client.is_model_ready("raiser")


def test_what_execute_returns_is_checked(client):
    def failure(mode):
        with pytest.raises(InferenceServerException) as e:
            client.infer("odd", _mode(mode))
        assert e.value.status() == "StatusCode.INTERNAL"
        return e.value.message()

    prefix = "Failed to process the request(s) for model 'odd_0', message: "
    # Triton 2.51's texts
    assert failure(1) == prefix + (
        "Number of InferenceResponse objects do not match the number of InferenceRequest objects. "
        "InferenceRequest(s) size is:1, and InferenceResponse(s) size is:0\n"
    )
    assert failure(4) == prefix + (
        "Expected an 'InferenceResponse' object in the execute function return list, found type '<class 'str'>'."
    )
    # as Triton, a response may leave out a requested output: the client gets the others
    assert client.infer("odd", _mode(2)).get_response().outputs == []
    # deliberately not as Triton: None (Triton never answers the request) and an output that
    # is not the declared data type (Triton passes it on as it is) fail the request
    assert failure(0).startswith(prefix + "Number of InferenceResponse objects do not match")
    assert failure(3) == "output 'PID' of model 'odd' has data type float32, but the model configuration declares INT64"


@pytest.mark.parametrize(
    ("model", "mode", "how"),
    [("crash_exit", 1, "exited with status 3"), ("crash_segv", 2, "killed by signal 11 (SIGSEGV)")],
)
def test_crash_fails_the_batch_and_the_instance_restarts(server, client, model, mode, how):
    pid = int(client.infer(model, _mode(0)).as_numpy("PID")[0])
    with pytest.raises(InferenceServerException) as e:
        client.infer(model, _mode(mode))
    assert e.value.status() == "StatusCode.INTERNAL"
    message = e.value.message()
    # Triton's text first (its stub is not restarted; ours is), then what happened
    assert message.startswith(f"Stub process '{model}_0' is not healthy: ")
    assert f"instance '{model}_0' of model '{model}' version 1" in message
    assert how in message
    # the server and the other models keep serving
    a = np.ones(4, dtype=np.float32)
    assert client.infer("add_sub", _add_sub_inputs(grpcclient, a, a)).as_numpy("OUTPUT0").tolist() == [2] * 4
    # the next request starts a new process
    again = int(client.infer(model, _mode(0)).as_numpy("PID")[0])
    assert again != pid
    assert not _alive(pid)
    assert client.is_model_ready(model)
    assert how in full_log(server)


def test_any_backend_runs_in_instance_processes(server, client):
    pid = int(client.infer("numpy_hosted", _mode(0)).as_numpy("PID")[0])
    assert pid != server.proc.pid and pid in instance_processes(server.proc.pid)
    with pytest.raises(InferenceServerException) as e:
        client.infer("numpy_hosted", _mode(1))
    assert e.value.status() == "StatusCode.INTERNAL"
    assert e.value.message() == (
        "the process of instance 'numpy_hosted_0' of model 'numpy_hosted' version 1 exited with status 5 "
        "while executing the batch; the instance restarts"
    )
    assert int(client.infer("numpy_hosted", _mode(0)).as_numpy("PID")[0]) not in (pid, server.proc.pid)


def test_too_many_crashes_leave_the_model_not_ready(server, client):
    for _ in range(4):  # the first and three restarts
        with pytest.raises(InferenceServerException) as e:
            client.infer("crash_loop", _mode(1))
        assert "exited with status 3" in e.value.message()
    assert not client.is_model_ready("crash_loop")
    with pytest.raises(InferenceServerException) as e:
        client.infer("crash_loop", _mode(0))
    assert e.value.status() == "StatusCode.UNAVAILABLE"
    assert "stays down" in e.value.message()
    rows = {m.name: m for m in client.get_model_repository_index().models}
    assert rows["crash_loop"].state == "UNAVAILABLE"
    assert "restarted 3 times" in rows["crash_loop"].reason
    assert client.is_model_ready("add_sub")
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics") as r:
        metrics = r.read().decode()
    assert 'fpgaserve_instance_restarts_total{model="crash_loop",version="1"} 3.0' in metrics


def test_decoupled_responses_stream(client):
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=partial(lambda q, result, error: q.put(error or result), results))
    try:
        inp = grpcclient.InferInput("IN", [3], "INT32")
        inp.set_data_from_numpy(np.array([4, 5, 6], dtype=np.int32))
        client.async_stream_infer("repeat", [inp], request_id="rep")
        got = [results.get(timeout=60) for _ in range(3)]
    finally:
        client.stop_stream()
    for r in got:
        assert not isinstance(r, InferenceServerException), r
    assert [r.as_numpy("OUT").tolist() for r in got] == [[4], [5], [6]]
    assert [r.as_numpy("IDX").tolist() for r in got] == [[0], [1], [2]]


def test_error_responses_between_results_keep_the_stream_going(client):
    """As in Triton: an error response without the final flag reaches the client in-stream,
    and the model's later responses and its final flag still follow."""
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=partial(lambda q, result, error: q.put(error or result), results))
    try:
        inp = grpcclient.InferInput("IN", [4], "INT32")
        inp.set_data_from_numpy(np.array([3, -1, -2, 4], dtype=np.int32))
        client.async_stream_infer("repeat_errors", [inp], request_id="mixed", enable_empty_final_response=True)
        got = [results.get(timeout=60) for _ in range(5)]
    finally:
        client.stop_stream()
    assert [g.message() for g in got[1:3]] == ["negative -1", "negative -2"]
    assert [g.as_numpy("OUT").tolist() for g in (got[0], got[3])] == [[3], [4]]
    final = got[4].get_response()
    assert final.id == "mixed" and final.parameters["triton_final_response"].bool_param is True


def test_a_failed_stream_leaves_nothing_for_the_next_request(client):
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=partial(lambda q, result, error: q.put(error or result), results))
    try:
        inp = grpcclient.InferInput("IN", [3], "INT32")
        inp.set_data_from_numpy(np.array([-1, 50, 51], dtype=np.int32))
        client.async_stream_infer("repeat", [inp], request_id="bad")
        error = results.get(timeout=60)
        assert isinstance(error, InferenceServerException)
        assert "output 'OUT' of model 'repeat' has shape [2]" in error.message()
        inp.set_data_from_numpy(np.array([5, 6, 7], dtype=np.int32))
        client.async_stream_infer("repeat", [inp], request_id="good")
        got = [results.get(timeout=60) for _ in range(3)]
    finally:
        client.stop_stream()
    assert [r.as_numpy("OUT").tolist() for r in got] == [[5], [6], [7]]  # none of 50, 51


def _x(value: int):
    x = grpcclient.InferInput("X", [1], "INT32")
    x.set_data_from_numpy(np.array([value], dtype=np.int32))
    return [x]


def _cancellation_seen(repo: Path, model: str, request_id: str) -> str:
    """What the model wrote down for ``request_id`` (it writes once it saw the cancellation or
    gave up waiting)."""
    path = repo / model / "cancelled.txt"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        for line in path.read_text().splitlines() if path.exists() else []:
            if line.startswith(request_id + " "):
                return line.split(" ", 1)[1]
        time.sleep(0.05)
    return "nothing written"


@pytest.fixture(params=["frontend-processes-2", "in-process"])
def cancellable(request, repo, server, tmp_path):
    """(repository, client) of the shared server (frontends in their own processes, the
    engine hears of a cancellation by message) and of one with the frontends in the engine's
    process (the request's future is cancelled)."""
    if request.param == "frontend-processes-2":
        yield repo, grpcclient.InferenceServerClient(server.url)
        return
    own = tmp_path / "repo"
    _model(own, "patient", PATIENT_CONFIG, PATIENT)
    _model(own, "ticker", TICKER_CONFIG, TICKER)
    with ServerProcess([own], "--frontend-processes", "1", log_path=tmp_path / "server.log") as s:
        yield own, grpcclient.InferenceServerClient(s.url)


def test_a_request_whose_client_gave_up_is_cancelled(cancellable):
    repo, client = cancellable
    with pytest.raises(InferenceServerException) as e:
        client.infer("patient", _x(1), request_id="gave-up", client_timeout=1.0)
    assert e.value.status() == "StatusCode.DEADLINE_EXCEEDED", e.value.message()
    assert _cancellation_seen(repo, "patient", "gave-up") == "True"
    assert client.infer("patient", _x(0)).as_numpy("Y").tolist() == [7]  # the instance serves on


def test_a_decoupled_model_stops_when_its_stream_is_cancelled(cancellable):
    repo, client = cancellable
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=partial(lambda q, result, error: q.put(error or result), results))
    try:
        client.async_stream_infer("ticker", _x(1), request_id="stopped")
        first = [results.get(timeout=60) for _ in range(2)]
    finally:
        client.stop_stream(cancel_requests=True)
    assert [r.as_numpy("Y").tolist() for r in first] == [[0], [1]]
    assert _cancellation_seen(repo, "ticker", "stopped") == "True"
    # the instance is free again: a new stream gets its own responses
    results = queue.Queue()
    client.start_stream(callback=partial(lambda q, result, error: q.put(error or result), results))
    try:
        client.async_stream_infer("ticker", _x(1), request_id="again")
        assert results.get(timeout=60).as_numpy("Y").tolist() == [0]
    finally:
        client.stop_stream(cancel_requests=True)
    assert _cancellation_seen(repo, "ticker", "again") == "True"


def test_sequences_reach_the_model_with_their_flags_and_correlation_id(client):
    def send(value, sequence_id, start=False, end=False):
        x = grpcclient.InferInput("X", [1, 1], "INT32")
        x.set_data_from_numpy(np.array([[value]], dtype=np.int32))
        r = client.infer("accumulate", [x], sequence_id=sequence_id, sequence_start=start, sequence_end=end)
        return int(r.as_numpy("SUM")[0, 0])

    assert send(5, 42, start=True) == 5
    assert send(1, 43, start=True) == 1
    assert send(7, 42) == 12
    assert send(2, 43, end=True) == 3
    assert send(1, 42, end=True) == 13
    assert send(9, 42, start=True, end=True) == 9  # a new sequence starts from nothing
    # parameters() holds the client's own parameters only, as in Triton (the sequence ones are
    # the request's flags and correlation id)
    x = grpcclient.InferInput("X", [1, 1], "INT32")
    x.set_data_from_numpy(np.array([[1]], dtype=np.int32))
    r = client.infer(
        "accumulate", [x], sequence_id=7, sequence_start=True, sequence_end=True, parameters={"site": "T2_US"}
    )
    assert r.as_numpy("PARAMS")[0, 0] == b'{"site":"T2_US"}'  # Triton 2.51's text


def test_bls_calls_another_model(client):
    model = grpcclient.InferInput("MODEL", [1], "BYTES")
    model.set_data_from_numpy(np.array([b"add_sub"], dtype=object))
    a = grpcclient.InferInput("A", [4], "FP32")
    a.set_data_from_numpy(np.array([1, 2, 3, 4], dtype=np.float32))
    assert client.infer("bls", [model, a]).as_numpy("SUM").tolist() == [2, 3, 4, 5]
    model.set_data_from_numpy(np.array([b"no_such_model"], dtype=object))
    with pytest.raises(InferenceServerException) as e:
        client.infer("bls", [model, a])
    assert e.value.message().startswith(
        "Failed to process the request(s) for model 'bls_0', message: TritonModelException: Model no_such_model - "
        "Error when running inference: Failed for execute the inference request. Model 'no_such_model' is not ready."
    )


def test_bls_streams_from_a_decoupled_model_and_awaits_calls(client):
    inp = grpcclient.InferInput("IN", [3], "INT32")
    inp.set_data_from_numpy(np.array([7, 8, 9], dtype=np.int32))
    r = client.infer("bls_more", [inp])
    assert r.as_numpy("REPEATED").tolist() == [7, 8, 9]
    # as Triton 2.51: a stream ends with an empty response; a failed one is its error alone
    assert r.as_numpy("SIZES").tolist() == [1, 1, 1, 0]
    assert r.as_numpy("FAILED").tolist() == [1]
    assert r.as_numpy("SUMS").tolist() == [[2, 4, 6, 8], [3, 6, 9, 12]]


def test_auto_complete_config(client):
    config = client.get_model_config("auto").config
    assert [(i.name, list(i.dims)) for i in config.input] == [("X", [2])]
    assert [(o.name, list(o.dims)) for o in config.output] == [("Y", [2])]
    assert config.max_batch_size == 4
    assert list(config.dynamic_batching.preferred_batch_size) == [4]  # as Triton 2.51 completes it
    assert [(g.name, g.count) for g in config.instance_group] == [("auto", 1)]
    x = grpcclient.InferInput("X", [1, 2], "FP32")
    x.set_data_from_numpy(np.array([[1, 2]], dtype=np.float32))
    assert client.infer("auto", [x]).as_numpy("Y").tolist() == [[3, 6]]


def test_a_config_without_backend_detects_a_triton_python_model(server, client):
    config = client.get_model_config("undeclared").config
    assert config.backend == "python"
    x = grpcclient.InferInput("X", [2], "FP32")
    x.set_data_from_numpy(np.array([1, 2], dtype=np.float32))
    r = client.infer("undeclared", [x])
    assert r.as_numpy("Y").tolist() == [2, 4]
    assert int(r.as_numpy("PID")[0]) in instance_processes(server.proc.pid)


def test_unsupported_settings_are_refused_at_load(client):
    rows = {m.name: m for m in client.get_model_repository_index().models}
    assert rows["conda"].state == "UNAVAILABLE"
    assert "EXECUTION_ENV_PATH" in rows["conda"].reason


def test_load_failures_say_what_the_model_raised(repo, client):
    # the reasons end as Triton 2.51's do ("Internal: " + this, there)
    rows = {m.name: m for m in client.get_model_repository_index().models}
    assert rows["bad_init"].state == "UNAVAILABLE"
    path = repo / "bad_init" / "1" / "model.py"
    assert rows["bad_init"].reason.endswith(f"ValueError: bad weights\n\nAt:\n  {path}(4): initialize")
    assert rows["no_class"].state == "UNAVAILABLE"
    assert rows["no_class"].reason.endswith("AttributeError: module '1.model' has no attribute 'TritonPythonModel'")


def test_logs_and_custom_metrics_reach_the_server(server, client):
    a = np.zeros(4, dtype=np.float32)
    client.infer("add_sub", _add_sub_inputs(grpcclient, a, a))
    assert "add_sub_0: add_sub initialized as add_sub_0" in full_log(server)
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics") as r:
        metrics = r.read().decode()
    samples = {
        ln.rsplit(" ", 1)[0]: float(ln.rsplit(" ", 1)[1]) for ln in metrics.splitlines() if ln.startswith("add_sub_")
    }
    requests = samples['add_sub_requests{model="add_sub"}']
    assert requests >= 1
    # every request's input has 4 elements: none in the bucket up to 1, all in the one up to 10
    assert samples['add_sub_sizes_bucket{le="1.0",model="add_sub"}'] == 0
    assert samples['add_sub_sizes_bucket{le="10.0",model="add_sub"}'] == requests
    assert samples['add_sub_sizes_bucket{le="+Inf",model="add_sub"}'] == requests
    assert samples['add_sub_sizes_count{model="add_sub"}'] == requests
    assert samples['add_sub_sizes_sum{model="add_sub"}'] == 4 * requests


def test_unload_stops_the_instance_process(server, client):
    a = np.zeros(4, dtype=np.float32)
    pid = int(client.infer("add_sub", _add_sub_inputs(grpcclient, a, a)).as_numpy("PID")[0])
    assert pid in instance_processes(server.proc.pid)
    client.unload_model("add_sub")
    deadline = time.monotonic() + 30
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)
    assert pid not in instance_processes(server.proc.pid)
    client.load_model("add_sub")
    assert client.is_model_ready("add_sub")


SLEEPER = """
import os
import time

class TritonPythonModel:
    def initialize(self, args):
        self.marker = os.path.join(args["model_repository"], "executing")

    def execute(self, requests):
        open(self.marker, "w").close()  # tells the test it is inside execute
        time.sleep(3600)  # stuck for good
        return []
"""


def test_unload_kills_an_instance_stuck_in_execute(tmp_path):
    repo = tmp_path / "repo"
    _model(repo, "sleeper", SCALAR_CONFIG, SLEEPER)
    proc = ServerProcess(
        [repo],
        "--model-control-mode",
        "explicit",
        "--load-model",
        "sleeper",
        "--model-unload-timeout-secs",
        "1",
        log_path=tmp_path / "server.log",
    )
    with proc:
        client = grpcclient.InferenceServerClient(proc.url)
        (child,) = instance_processes(proc.proc.pid)
        results: queue.Queue = queue.Queue()
        client.async_infer("sleeper", _mode(0), lambda result, error: results.put(error or result))
        deadline = time.monotonic() + 60
        while not (repo / "sleeper" / "executing").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        client.unload_model("sleeper")
        error = results.get(timeout=60)
        assert isinstance(error, InferenceServerException)
        assert error.status() == "StatusCode.UNAVAILABLE"
        deadline = time.monotonic() + 30
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child)
        assert client.is_server_live()


def test_server_exit_leaves_no_instance_process(repo, tmp_path):
    proc = ServerProcess([repo], "--model-control-mode", "explicit", "--load-model", "strings")
    proc.start()
    try:
        children = instance_processes(proc.proc.pid)
        assert children  # the instance process of 'strings'
    finally:
        proc.proc.kill()  # no shutdown at all: the instance must notice its parent is gone
        proc.proc.wait()
    deadline = time.monotonic() + 30
    while any(_alive(p) for p in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in children)


def _pb_utils():
    """The module models import, loaded here by path (the server never imports it)."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "backends" / "python" / "stub" / "triton_python_backend_utils.py"
    spec = importlib.util.spec_from_file_location("pb_utils_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pb_utils_helpers_behave_as_tritons():
    pb = _pb_utils()
    values = np.array([[b"a", b""], ["grüß", 7]], dtype=object)
    data = pb.serialize_byte_tensor(values)
    assert data == b"\x01\x00\x00\x00a\x00\x00\x00\x00\x06\x00\x00\x00" + "grüß".encode() + b"\x01\x00\x00\x007"
    assert pb.deserialize_bytes_tensor(data).tolist() == [b"a", b"", "grüß".encode(), b"7"]
    assert pb.serialize_byte_tensor(np.zeros(0, dtype=object)) == ()
    assert pb.serialize_byte_tensor(np.zeros(2, dtype=np.float32)) is None
    assert pb.triton_string_to_numpy("TYPE_FP16") is np.float16
    with pytest.raises(KeyError):
        pb.triton_string_to_numpy("TYPE_NOPE")
    assert pb.triton_to_numpy_type(11) is np.float32
    assert pb.numpy_to_triton_type(np.int64) == 9
    assert pb.numpy_to_triton_type(np.bytes_) == 13
    assert pb.using_decoupled_model_transaction_policy({"model_transaction_policy": {"decoupled": True}})
    assert not pb.using_decoupled_model_transaction_policy({})


def test_pb_utils_auto_complete_conflicts_use_tritons_texts():
    pb = _pb_utils()
    config = pb.ModelConfig(
        '{"name": "m", "max_batch_size": 8, "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [4]}]}'
    )
    with pytest.raises(ValueError) as e:
        config.set_max_batch_size(4)
    assert str(e.value) == (
        "configuration specified max_batch_size 8, but in auto-complete-config function for model 'm' "
        "specified max_batch_size 4"
    )
    with pytest.raises(ValueError) as e:
        config.add_input({"name": "X", "data_type": "TYPE_INT32", "dims": [4]})
    assert (
        str(e.value)
        == "unable to load model 'm', configuration expects datatype TYPE_FP32 for input 'X', model provides TYPE_INT32"
    )
    with pytest.raises(ValueError) as e:
        config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [5]})
    assert (
        str(e.value)
        == "model 'm', tensor 'X': the model expects dims [5] but the model configuration specifies dims [4]"
    )
    with pytest.raises(ValueError) as e:
        config.add_output({"name": "Y", "data_type": "TYPE_FP32"})
    assert str(e.value) == "output 'Y' in auto-complete-config function for model 'm' is missing 'dims' property."
    config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [4]})
    config.add_output({"name": "Y", "data_type": "TYPE_FP32", "dims": [1]})
    config.set_model_transaction_policy({"decoupled": True})
    with pytest.raises(ValueError):
        config.set_model_transaction_policy({"decoupled": False})
    assert config.as_dict()["output"] == [{"name": "Y", "data_type": "TYPE_FP32", "dims": [1]}]
    assert config.as_dict()["model_transaction_policy"] == {"decoupled": True}
