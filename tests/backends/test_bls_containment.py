"""BLS that cannot end, and BLS whose client has gone: a real fpgaserve serving Python models
that call each other (``server/dataplane/bls.py``).

* a model that calls itself with its one instance busy, and a cycle ping -> pong -> ping with
  one instance each, would wait forever (Triton 2.51 wedges: the client's deadline answers
  the client, the instances stay blocked, every later request times out too): the call that
  closes the cycle is refused with UNAVAILABLE naming the models, and the next plain request
  to the same model is answered; with a second instance the same chain is served;
* a model whose client's deadline passes while it waits on a BLS call gets its call withdrawn
  (CANCELLED), so that its instance takes the next request, and the called model sees
  ``is_cancelled()``;
* ``ResponseIterator.cancel()`` (python_backend r25.04): a queued decoupled request is
  withdrawn with Triton's empty CANCELLED response, a running one sees ``is_cancelled()`` and
  its responses go on to its final one.

No timing assertions: every wait is bounded by a client timeout, a hang guard only.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from support.server_process import ServerProcess, serve

# HOPS > 0: call the model named by the config parameter "next" with HOPS - 1, answer what it
# answered (its error as this model's error); HOPS == 0: answer at once
HOPPER = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.next = config["parameters"]["next"]["string_value"]

    def execute(self, requests):
        out = []
        for request in requests:
            hops = int(pb_utils.get_input_tensor_by_name(request, "HOPS").as_numpy()[0])
            if hops == 0:
                out.append(pb_utils.InferenceResponse([pb_utils.Tensor("DONE", np.array([0], dtype=np.int32))]))
                continue
            answer = pb_utils.InferenceRequest(
                model_name=self.next, inputs=[pb_utils.Tensor("HOPS", np.array([hops - 1], dtype=np.int32))],
                requested_output_names=["DONE"]).exec()
            if answer.has_error():
                out.append(pb_utils.InferenceResponse(error=answer.error()))
                continue
            done = pb_utils.get_output_tensor_by_name(answer, "DONE").as_numpy() + 1
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("DONE", done)]))
        return out
"""

HOPPER_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "HOPS" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "DONE" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: COUNT } ]
parameters { key: "next" value: { string_value: "NEXT" } }
"""

# waits (up to 60 s) until the request is withdrawn, then writes down that it saw it; X == 0:
# answers at once
PATIENT = """
import os, time
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.path = os.path.join(args["model_repository"], "seen.txt")

    def execute(self, requests):
        out = []
        for request in requests:
            if int(pb_utils.get_input_tensor_by_name(request, "X").as_numpy()[0]) == 1:
                deadline = time.monotonic() + 60
                while not request.is_cancelled() and time.monotonic() < deadline:
                    time.sleep(0.02)
                with open(self.path, "a") as f:
                    f.write(f"cancelled={request.is_cancelled()}\\n")
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", np.array([7], dtype=np.int32))]))
        return out
"""

# X == 1: a BLS call to patient that waits until it is withdrawn; X == 0: answers at once
IMPATIENT = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if int(x[0]) == 1:
                answer = pb_utils.InferenceRequest(
                    model_name="patient", inputs=[pb_utils.Tensor("X", x)], requested_output_names=["Y"]).exec()
                if answer.has_error():
                    out.append(pb_utils.InferenceResponse(error=answer.error()))
                    continue
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", np.array([1], dtype=np.int32))]))
        return out
"""

SCALAR_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

# streams a tick every 20 ms until its request is withdrawn (60 s at most), then its final flag
TICKER = """
import time
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            deadline = time.monotonic() + 60
            tick = 0
            while not sender.is_cancelled() and time.monotonic() < deadline:
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("Y", np.array([tick], dtype=np.int32))]))
                tick += 1
                time.sleep(0.02)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

# two streams of ticker: the first runs, the second waits behind it (one instance) and is
# cancelled there; then the first is cancelled and read to its end
CANCELLER = """
import numpy as np
import triton_python_backend_utils as pb_utils

def _stream():
    return pb_utils.InferenceRequest(
        model_name="ticker", inputs=[pb_utils.Tensor("X", np.array([1], dtype=np.int32))],
        requested_output_names=["Y"]).exec(decoupled=True)

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            running = _stream()
            first = [next(running), next(running)]
            queued = _stream()
            queued.cancel()
            withdrawn = list(queued)
            running.cancel()
            rest = list(running)
            error = withdrawn[0].error()
            out.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("QUEUED", np.array([len(withdrawn), error.code()], dtype=np.int32)),
                pb_utils.Tensor("QUEUED_TEXT", np.array([error.message().encode()], dtype=np.object_)),
                pb_utils.Tensor("RUNNING", np.array(
                    [sum(1 for r in first + rest if r.output_tensors()), int(rest[-1].output_tensors() == [])],
                    dtype=np.int32)),
            ]))
        return out
"""

CANCELLER_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "QUEUED" data_type: TYPE_INT32 dims: [ 2 ] }, { name: "QUEUED_TEXT" data_type: TYPE_STRING dims: [ 1 ] },
         { name: "RUNNING" data_type: TYPE_INT32 dims: [ 2 ] } ]
"""


def _model(repo: Path, name: str, config: str, code: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(f'name: "{name}"\n' + textwrap.dedent(config))
    (repo / name / "1" / "model.py").write_text(textwrap.dedent(code))


def _hopper(repo: Path, name: str, next_name: str, count: int) -> None:
    config = HOPPER_CONFIG.replace("COUNT", str(count)).replace("NEXT", next_name)
    _model(repo, name, config, HOPPER)


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("bls_models")
    _hopper(repo, "selfish", "selfish", 1)
    _hopper(repo, "ping", "pong", 1)
    _hopper(repo, "pong", "ping", 1)
    _hopper(repo, "ping_wide", "pong_wide", 2)
    _hopper(repo, "pong_wide", "ping_wide", 1)
    _model(repo, "patient", SCALAR_CONFIG, PATIENT)
    _model(repo, "impatient", SCALAR_CONFIG, IMPATIENT)
    _model(repo, "ticker", SCALAR_CONFIG + "model_transaction_policy { decoupled: true }\n", TICKER)
    _model(repo, "canceller", CANCELLER_CONFIG, CANCELLER)
    return repo


@pytest.fixture(scope="module")
def server(repo, tmp_path_factory):
    log = tmp_path_factory.mktemp("bls_log") / "server.log"
    yield from serve(ServerProcess([repo], log_path=log))


@pytest.fixture
def client(server):
    with grpcclient.InferenceServerClient(server.url) as c:
        yield c


def _infer(client, model: str, name: str, value: int, output: str, timeout: float = 60):
    inp = grpcclient.InferInput(name, [1], "INT32")
    inp.set_data_from_numpy(np.array([value], dtype=np.int32))
    return client.infer(model, [inp], client_timeout=timeout).as_numpy(output)


@pytest.mark.parametrize(
    "model,hops,models",
    [("selfish", 1, "selfish"), ("ping", 2, "ping, pong")],
    ids=["calls-itself", "ping-pong-ping"],
)
def test_a_call_only_its_own_chain_could_serve_fails_at_once(client, model, hops, models):
    with pytest.raises(InferenceServerException) as failed:
        _infer(client, model, "HOPS", hops, "DONE")
    assert failed.value.status() == "StatusCode.UNAVAILABLE"
    next_model = {"selfish": "selfish", "ping": "ping"}[model]
    assert failed.value.message() == (
        f"the BLS request to model '{next_model}' cannot be served: every instance that could serve it waits, "
        f"directly or through BLS requests of its own, for this one (models {models}); it is refused rather than "
        "left waiting forever"
    )
    # the instances are free: the next plain request is answered (bounded by the client's timeout)
    assert _infer(client, model, "HOPS", 0, "DONE", timeout=30).tolist() == [0]


def test_the_same_chain_with_an_instance_to_spare_is_served(client):
    # ping_wide (two instances) -> pong_wide -> ping_wide: the second instance serves the last hop
    assert _infer(client, "ping_wide", "HOPS", 2, "DONE").tolist() == [2]


def test_a_call_whose_client_has_gone_is_withdrawn_and_its_instance_freed(client, repo):
    with pytest.raises(InferenceServerException) as failed:
        _infer(client, "impatient", "X", 1, "Y", timeout=2)  # patient waits until withdrawn
    assert failed.value.status() == "StatusCode.DEADLINE_EXCEEDED"
    # impatient's instance was freed (its call withdrawn): a plain request is answered
    assert _infer(client, "impatient", "X", 0, "Y", timeout=30).tolist() == [1]
    # and patient saw the withdrawal (its one instance answers a plain request only after that)
    assert _infer(client, "patient", "X", 0, "Y", timeout=30).tolist() == [7]
    assert (repo / "patient" / "seen.txt").read_text() == "cancelled=True\n"


def test_a_model_cancels_its_decoupled_calls(client):
    inp = grpcclient.InferInput("X", [1], "INT32")
    inp.set_data_from_numpy(np.array([1], dtype=np.int32))
    result = client.infer("canceller", [inp], client_timeout=60)
    # the queued stream: one response, CANCELLED (TritonError code 7) with Triton core's empty text
    assert result.as_numpy("QUEUED").tolist() == [1, 7]
    assert result.as_numpy("QUEUED_TEXT").tolist() == [b""]
    ticks, final_is_empty = result.as_numpy("RUNNING").tolist()
    # the running stream: its ticks (at least the two read before the cancel), then its final, empty one
    assert ticks >= 2 and final_is_empty == 1
