"""Triton's dynamic batcher semantics (triton-protocol.md §9), observed on a real ``fpgaserve``.

Every test uses a "gate" numpy model written into a tmp repository. The model appends one JSON
line per executed batch (its rows' ids and input shapes) to ``<model dir>/batches.log``, and a
batch containing the id ``GATE`` blocks while ``<model dir>/hold`` exists. The pattern:

1. create ``hold``; send request A (id ``GATE``); wait until the log shows A executing, so the
   model's single instance is busy;
2. send the requests under test; after each, wait until the server's
   ``nv_inference_pending_request_count`` gauge shows it queued (this also fixes the arrival
   order);
3. remove ``hold``; collect all responses; assert on the model's log (which requests ran
   together, in which order) and on ModelStatistics ``batch_stats`` / ``execution_count`` /
   ``inference_count``.

Nothing asserts on elapsed time. Where a rule needs time to pass (queue delay, queue
timeout), the test sleeps for longer than the configured duration before releasing, which
only guarantees a lower bound; "must not happen yet" checks observe a short window in which
a wrong server would visibly act.
"""

from __future__ import annotations

import functools
import json
import math
import re
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from support import waiting
from support.server_process import ServerProcess

pytestmark = pytest.mark.timeout(60)

GATE = 1000  # a batch containing this id blocks while <model dir>/hold exists
FAIL = -1  # a batch containing this id raises in execute()
WAIT_S = 15.0  # bound for every "wait until" (never reached by a correct server)

GATE_MODEL_PY = r"""
import json
import os
import time

import numpy as np

GATE = 1000
FAIL = -1
HOLD_SAFETY_S = 20.0  # never block forever, even if a test dies with "hold" in place


class Model:
    def initialize(self, config, version_dir):
        model_dir = os.path.dirname(os.path.abspath(version_dir))
        self.log_path = os.path.join(model_dir, "batches.log")
        self.hold_path = os.path.join(model_dir, "hold")

    def _log(self, entry):
        with open(self.log_path, "a") as f:
            f.write(json.dumps(entry) + "\n")

    def execute(self, inputs):
        ids = inputs["ID"] if "ID" in inputs else inputs["INPUT0"]
        ids = ids.reshape(ids.shape[0], -1)[:, 0]
        entry = {
            "rows": int(ids.shape[0]),
            "ids": [int(i) for i in ids],
            "shapes": {k: list(v.shape) for k, v in sorted(inputs.items())},
        }
        self._log(dict(entry, event="start"))
        if GATE in entry["ids"]:
            deadline = time.monotonic() + HOLD_SAFETY_S
            while os.path.exists(self.hold_path) and time.monotonic() < deadline:
                time.sleep(0.001)
        if FAIL in entry["ids"]:
            self._log(dict(entry, event="raise"))
            raise ValueError("gate model refuses id -1")
        self._log(dict(entry, event="end"))
        return {"OUTPUT0": (ids.reshape(-1, 1) * 2).astype(np.int32)}
"""

IO_FIXED = """
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

IO_VARIABLE = """
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] %s},
  { name: "ID" data_type: TYPE_INT32 dims: [ 1 ] }
]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

# name -> (max_batch_size, scheduling block and extras, io block)
MODELS = {
    "db_preferred": (8, "dynamic_batching { preferred_batch_size: [ 2, 4 ] }", IO_FIXED),
    "db_metrics": (8, "dynamic_batching { preferred_batch_size: [ 2, 4 ] }", IO_FIXED),
    "db_delay_long": (
        8,
        "dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 10000000 }",
        IO_FIXED,
    ),
    "db_delay_short": (
        8,
        "dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 300000 }",
        IO_FIXED,
    ),
    "db_max_batch": (8, "dynamic_batching { }", IO_FIXED),
    "db_shape": (8, "dynamic_batching { }", IO_VARIABLE % ""),
    "db_ragged": (8, "dynamic_batching { }", IO_VARIABLE % "allow_ragged_batch: true "),
    "db_priority": (2, "dynamic_batching { priority_levels: 2 default_priority_level: 2 }", IO_FIXED),
    "db_queue_full": (8, "dynamic_batching { default_queue_policy { max_queue_size: 2 } }", IO_FIXED),
    "db_timeout_reject": (
        8,
        "dynamic_batching { default_queue_policy { timeout_action: REJECT "
        "default_timeout_microseconds: 100000 allow_timeout_override: true } }",
        IO_FIXED,
    ),
    "db_timeout_override": (
        8,
        "dynamic_batching { default_queue_policy { timeout_action: REJECT "
        "default_timeout_microseconds: 10000000 allow_timeout_override: true } }",
        IO_FIXED,
    ),
    "db_timeout_no_override": (
        8,
        "dynamic_batching { default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 10000000 } }",
        IO_FIXED,
    ),
    "db_timeout_zero_default": (
        8,
        "dynamic_batching { default_queue_policy { allow_timeout_override: true } }",
        IO_FIXED,
    ),
    "db_timeout_delay": (
        2,
        "dynamic_batching { default_queue_policy { timeout_action: DELAY "
        "default_timeout_microseconds: 10000000 allow_timeout_override: true } }",
        IO_FIXED,
    ),
    "db_ordered": (
        4,
        "dynamic_batching { preserve_ordering: true }\ninstance_group [ { kind: KIND_CPU count: 2 } ]",
        IO_FIXED,
    ),
    "db_unordered": (
        4,
        "dynamic_batching { preserve_ordering: false }\ninstance_group [ { kind: KIND_CPU count: 2 } ]",
        IO_FIXED,
    ),
    "db_bad_input": (2, "dynamic_batching { }", IO_FIXED),
    "db_raise": (2, "dynamic_batching { }", IO_FIXED),
    "db_cancel": (8, "dynamic_batching { }", IO_FIXED),
    "no_batcher": (8, "", IO_FIXED),
}


def write_model(repo: Path, name: str, max_batch_size: int, scheduling: str, io: str) -> Path:
    d = repo / name
    (d / "1").mkdir(parents=True)
    (d / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "numpy"\nmax_batch_size: {max_batch_size}\n{io}\n{scheduling}\n'
    )
    (d / "1" / "model.py").write_text(GATE_MODEL_PY)
    return d


@pytest.fixture(scope="module")
def batch_server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("batcher_repo")
    for name, (mbs, scheduling, io) in MODELS.items():
        write_model(repo, name, mbs, scheduling, io)
    log = tmp_path_factory.mktemp("batcher_server") / "fpgaserve.log"
    proc = ServerProcess([repo], log_path=log)
    proc.start()
    proc.repo = repo
    yield proc
    for name in MODELS:  # never leave a model blocked: the server would wait on it at exit
        (repo / name / "hold").unlink(missing_ok=True)
    rc = proc.stop()
    assert rc == 0, f"server exited with {rc}: {proc.log()}"


# ----------------------------------------------------------------------------- helpers


def scrape(server) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=5) as r:
        return r.read().decode()


def metric(text: str, name: str, model: str, **labels) -> float:
    """The value of ``name{model=...,<labels>}``; fails if the sample is absent."""
    for line in text.splitlines():
        m = re.match(rf"^{re.escape(name)}\{{(.*)\}} (\S+)$", line)
        if not m:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        if have.get("model") == model and all(have.get(k) == v for k, v in labels.items()):
            return float(m.group(2))
    raise AssertionError(f"no sample {name}{{model={model!r}, {labels}}} in /metrics")


wait_until = functools.partial(waiting.wait_until, timeout=WAIT_S, interval=0.005)


class Gate:
    """One gate model: its hold file, its batch log and its pending-request gauge."""

    def __init__(self, server, model: str):
        self.server = server
        self.model = model
        self.dir = server.repo / model
        self.hold_path = self.dir / "hold"
        self.log_path = self.dir / "batches.log"
        self.log_path.unlink(missing_ok=True)  # each test starts from an empty log

    def hold(self) -> None:
        self.hold_path.touch()

    def release(self) -> None:
        self.hold_path.unlink(missing_ok=True)

    def entries(self, event: str = "start") -> list[dict]:
        if not self.log_path.exists():
            return []
        out = []
        for line in self.log_path.read_text().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:  # a line being written right now
                continue
            if entry["event"] == event:
                out.append(entry)
        return out

    def batches(self, event: str = "start") -> list[list[int]]:
        """Ids of each executed batch, in execution order."""
        return [e["ids"] for e in self.entries(event)]

    def wait_logged(self, ident: int, event: str = "start") -> None:
        wait_until(lambda: any(ident in ids for ids in self.batches(event)), f"{self.model}: id {ident} {event}")

    def pending(self) -> float:
        return metric(scrape(self.server), "nv_inference_pending_request_count", self.model)

    def wait_pending(self, n: int) -> None:
        wait_until(lambda: self.pending() == n, f"{self.model}: {n} pending requests")


class Calls:
    """Asynchronous requests over one tritonclient channel; records completion order."""

    def __init__(self, client, model: str, variable: bool = False):
        self.client = client
        self.model = model
        self.variable = variable
        self.lock = threading.Lock()
        self.results: dict[str, tuple] = {}
        self.order: list[str] = []
        self.events: dict[str, threading.Event] = {}

    def inputs(self, ids, width: int = 4, dtype: str = "INT32"):
        ids = np.asarray(ids, dtype=np.int32).reshape(-1, 1)
        if not self.variable:
            x = grpcclient.InferInput("INPUT0", list(ids.shape), dtype)
            x.set_data_from_numpy(ids.astype(np.float32) if dtype == "FP32" else ids)
            return [x]
        data = np.repeat(ids, width, axis=1)
        x = grpcclient.InferInput("INPUT0", list(data.shape), "INT32")
        x.set_data_from_numpy(data)
        i = grpcclient.InferInput("ID", list(ids.shape), "INT32")
        i.set_data_from_numpy(ids)
        return [x, i]

    def send(self, key: str, ids, width: int = 4, dtype: str = "INT32", **kwargs) -> None:
        event = threading.Event()
        self.events[key] = event

        def done(result, error):
            with self.lock:
                self.results[key] = (result, error)
                self.order.append(key)
            event.set()

        self.client.async_infer(self.model, self.inputs(ids, width, dtype), done, request_id=key, **kwargs)

    def is_done(self, key: str) -> bool:
        return self.events[key].is_set()

    def wait(self, *keys: str, timeout: float = WAIT_S) -> None:
        for key in keys or list(self.events):
            assert self.events[key].wait(timeout), f"{self.model}: no response for {key} after {timeout}s"

    def output(self, key: str) -> np.ndarray:
        self.wait(key)
        result, error = self.results[key]
        assert error is None, f"{key} failed: {error}"
        return result.as_numpy("OUTPUT0")

    def error(self, key: str) -> InferenceServerException:
        self.wait(key)
        _result, error = self.results[key]
        assert error is not None, f"{key} unexpectedly succeeded"
        return error


def statistics(client, model: str) -> dict:
    stats = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
    return {
        "inference_count": int(stats.get("inference_count", 0)),
        "execution_count": int(stats.get("execution_count", 0)),
        "success": int(stats.get("inference_stats", {}).get("success", {}).get("count", 0)),
        "fail": int(stats.get("inference_stats", {}).get("fail", {}).get("count", 0)),
        "batch_stats": {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in stats.get("batch_stats", [])},
    }


def code(error: InferenceServerException) -> str:
    return str(error.status()).replace("StatusCode.", "")


@pytest.fixture
def client(batch_server):
    c = grpcclient.InferenceServerClient(batch_server.url)
    yield c
    c.close()


def gated(batch_server, client, model: str, variable: bool = False):
    """A held gate with request "A" executing; returns (gate, calls)."""
    gate = Gate(batch_server, model)
    calls = Calls(client, model, variable)
    gate.hold()
    calls.send("A", [GATE])
    gate.wait_logged(GATE)
    gate.wait_pending(0)
    return gate, calls


def queue(gate: Gate, calls: Calls, requests) -> None:
    """Send (key, ids, kwargs) one after another, each confirmed queued before the next."""
    n = gate.pending()
    for key, ids, kwargs in requests:
        calls.send(key, ids, **kwargs)
        n += 1
        gate.wait_pending(n)


@pytest.fixture(autouse=True)
def _release_holds(batch_server):
    yield
    for name in MODELS:
        (batch_server.repo / name / "hold").unlink(missing_ok=True)


# ----------------------------------------------------------------------------- preferred sizes


@pytest.mark.timeout(40)
def test_preferred_sizes_largest_reachable_first(batch_server, client):
    """mbs 8, preferred [2, 4], no delay, 7 queued batch-1 requests. When the instance frees
    up the walk covers all 7 (<= 8 rows): prefixes 2 and 4 are preferred, so the largest, 4,
    goes first; of the 3 left, 2 is preferred; the last one goes alone (delay 0)."""
    gate, calls = gated(batch_server, client, "db_preferred")
    queue(gate, calls, [(f"r{i}", [i], {}) for i in range(1, 8)])
    gate.release()
    calls.wait()
    for i in range(1, 8):
        assert calls.output(f"r{i}").tolist() == [[2 * i]]
    assert gate.batches() == [[GATE], [1, 2, 3, 4], [5, 6], [7]]
    s = statistics(client, "db_preferred")
    assert s["batch_stats"] == {1: 2, 4: 1, 2: 1}
    assert s["execution_count"] == 4
    assert s["inference_count"] == 8


# ----------------------------------------------------------------------------- queue delay


@pytest.mark.timeout(40)
def test_queue_delay_holds_partial_batch_until_preferred(batch_server, client):
    """preferred [4], delay 10 s: two queued requests are not sent when the instance frees
    up; two more complete the preferred size 4, which is sent at once (long before 10 s)."""
    gate = Gate(batch_server, "db_delay_long")
    calls = Calls(client, "db_delay_long")
    gate.hold()
    calls.send("A", [GATE, 1001, 1002, 1003])  # 4 rows = preferred: dispatched immediately
    gate.wait_logged(GATE)
    queue(gate, calls, [("b", [1], {}), ("c", [2], {})])
    gate.release()
    calls.output("A")
    # the instance is free: a batcher ignoring the delay would send [b, c] right now
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        assert gate.batches() == [[GATE, 1001, 1002, 1003]], "partial batch sent before the queue delay"
        assert not calls.is_done("b") and not calls.is_done("c")
        time.sleep(0.01)
    assert gate.pending() == 2
    queue(gate, calls, [("d", [3], {})])  # 3 rows: still not preferred, still waiting
    calls.send("e", [4])
    calls.wait()
    assert [calls.output(k).tolist() for k in "bcde"] == [[[2]], [[4]], [[6]], [[8]]]
    assert gate.batches() == [[GATE, 1001, 1002, 1003], [1, 2, 3, 4]]
    s = statistics(client, "db_delay_long")
    assert s["batch_stats"] == {4: 2}
    assert s["inference_count"] == 8


@pytest.mark.timeout(40)
def test_queue_delay_exceeded_sends_largest_batch(batch_server, client):
    """preferred [4], delay 300 ms, mbs 8. Once the oldest request has waited longer than
    the delay, Triton (core dynamic_batch_scheduler.cc GetDynamicBatch) sends everything the
    walk covered, up to max_batch_size: 6 queued requests go as one batch of 6, not 4 + 2.
    And 2 queued requests (no preferred size reachable) are sent after the delay."""
    gate = Gate(batch_server, "db_delay_short")
    calls = Calls(client, "db_delay_short")
    gate.hold()
    calls.send("A", [GATE, 1001, 1002, 1003])
    gate.wait_logged(GATE)
    queue(gate, calls, [(f"r{i}", [i], {}) for i in range(1, 7)])
    time.sleep(0.4)  # every queued request has now waited more than the 300 ms delay
    gate.release()
    calls.wait()
    assert gate.batches() == [[GATE, 1001, 1002, 1003], [1, 2, 3, 4, 5, 6]]

    gate.hold()
    calls.send("A2", [GATE, 1001, 1002, 1003])
    wait_until(lambda: len(gate.batches()) == 3, "the second gated batch executing")
    queue(gate, calls, [("p", [7], {}), ("q", [8], {})])
    gate.release()
    calls.wait()
    assert calls.output("p").tolist() == [[14]] and calls.output("q").tolist() == [[16]]
    assert gate.batches()[2:] == [[GATE, 1001, 1002, 1003], [7, 8]]
    s = statistics(client, "db_delay_short")
    assert s["batch_stats"] == {4: 2, 6: 1, 2: 1}
    assert s["inference_count"] == 16


# ----------------------------------------------------------------------------- max_batch_size


@pytest.mark.timeout(40)
def test_max_batch_size_never_exceeded_and_requests_never_split(batch_server, client):
    """mbs 8, three queued requests of 3 rows: 3+3 fits, 3+3+3 does not, so [6] then [3]."""
    gate, calls = gated(batch_server, client, "db_max_batch")
    requests = {"b": [10, 11, 12], "c": [20, 21, 22], "d": [30, 31, 32]}
    queue(gate, calls, [(k, v, {}) for k, v in requests.items()])
    gate.release()
    calls.wait()
    for k, v in requests.items():
        assert calls.output(k).ravel().tolist() == [2 * i for i in v]
    batches = gate.batches()
    assert batches == [[GATE], [10, 11, 12, 20, 21, 22], [30, 31, 32]]
    for ids in batches:
        assert len(ids) <= 8
    for v in requests.values():  # never split: all rows of a request in exactly one batch
        assert sum(1 for ids in batches if set(v) & set(ids)) == 1
        assert any(set(v) <= set(ids) for ids in batches)
    s = statistics(client, "db_max_batch")
    assert s["batch_stats"] == {1: 1, 6: 1, 3: 1}
    assert s["inference_count"] == 10


# ----------------------------------------------------------------------------- shapes


@pytest.mark.timeout(40)
def test_shape_mismatch_is_not_batched(batch_server, client):
    """A variable-dim input without allow_ragged_batch: [1,4], [1,4], [1,5] queued → the two
    [1,4] requests run together, the [1,5] one alone."""
    gate, calls = gated(batch_server, client, "db_shape", variable=True)
    queue(gate, calls, [("b", [1], {"width": 4}), ("c", [2], {"width": 4}), ("d", [3], {"width": 5})])
    gate.release()
    calls.wait()
    assert [calls.output(k).tolist() for k in "bcd"] == [[[2]], [[4]], [[6]]]
    entries = gate.entries()
    assert [e["ids"] for e in entries] == [[GATE], [1, 2], [3]]
    assert entries[1]["shapes"]["INPUT0"] == [2, 4]
    assert entries[2]["shapes"]["INPUT0"] == [1, 5]
    assert statistics(client, "db_shape")["batch_stats"] == {1: 2, 2: 1}


@pytest.mark.timeout(40)
def test_ragged_input_is_batched_flattened(batch_server, client):
    """With allow_ragged_batch the same three requests form one batch. As in Triton's
    backends (ragged_batching.md), the model receives the ragged input as one 1-D tensor,
    the concatenation of every request's elements: 4 + 4 + 5 = 13."""
    gate, calls = gated(batch_server, client, "db_ragged", variable=True)
    queue(gate, calls, [("b", [1], {"width": 4}), ("c", [2], {"width": 4}), ("d", [3], {"width": 5})])
    gate.release()
    calls.wait()
    assert [calls.output(k).tolist() for k in "bcd"] == [[[2]], [[4]], [[6]]]
    entries = gate.entries()
    assert [e["ids"] for e in entries] == [[GATE], [1, 2, 3]]
    assert entries[1]["shapes"] == {"ID": [3, 1], "INPUT0": [13]}
    assert entries[0]["shapes"]["INPUT0"] == [4]  # a lone request is flattened too
    assert statistics(client, "db_ragged")["batch_stats"] == {1: 1, 3: 1}


# ----------------------------------------------------------------------------- priorities


@pytest.mark.timeout(40)
def test_priority_levels(batch_server, client):
    """priority_levels 2, default 2, mbs 2: requests queued at the default level (no
    priority, priority 2, or an out-of-range priority) run after the later priority-1 ones."""
    gate, calls = gated(batch_server, client, "db_priority")
    queue(
        gate,
        calls,
        [
            ("low1", [1], {}),
            ("low2", [2], {"priority": 2}),
            ("high1", [3], {"priority": 1}),
            ("low3", [4], {"priority": 7}),  # > priority_levels: the default level
            ("high2", [5], {"priority": 1}),
        ],
    )
    gate.release()
    calls.wait()
    assert [calls.output(k).tolist() for k in ("low1", "low2", "high1", "low3", "high2")] == [
        [[2]],
        [[4]],
        [[6]],
        [[8]],
        [[10]],
    ]
    assert gate.batches() == [[GATE], [3, 5], [1, 2], [4]]
    assert statistics(client, "db_priority")["batch_stats"] == {1: 2, 2: 2}


# ----------------------------------------------------------------------------- queue policy


@pytest.mark.timeout(40)
def test_max_queue_size_rejects_at_once(batch_server, client):
    gate, calls = gated(batch_server, client, "db_queue_full")
    queue(gate, calls, [("b", [1], {}), ("c", [2], {})])
    calls.send("d-req", [3])
    err = calls.error("d-req")  # rejected while A still holds the instance
    assert code(err) == "UNAVAILABLE"
    assert "[request id: d-req] Exceeds maximum queue size" in err.message()
    assert gate.pending() == 2
    gate.release()
    calls.wait()
    assert calls.output("b").tolist() == [[2]] and calls.output("c").tolist() == [[4]]
    assert gate.batches() == [[GATE], [1, 2]]
    s = statistics(client, "db_queue_full")
    assert s["batch_stats"] == {1: 1, 2: 1}
    assert s["fail"] == 1
    assert metric(scrape(batch_server), "nv_inference_request_failure", "db_queue_full", reason="REJECTED") == 1


@pytest.mark.timeout(40)
def test_queue_timeout_reject(batch_server, client):
    """REJECT with a 100 ms default: requests queued behind the held one fail with
    UNAVAILABLE "Request timeout expired", without waiting for the instance (Triton's
    batcher rejects expired requests while it waits for a free slot). A request ``timeout``
    above the default cannot raise it."""
    gate, calls = gated(batch_server, client, "db_timeout_reject")
    calls.send("b", [1])
    calls.send("c", [2], timeout=50_000)
    calls.send("d", [3], timeout=10_000_000)  # may only lower the timeout
    for key in "bcd":
        err = calls.error(key)
        assert code(err) == "UNAVAILABLE", (key, err)
        assert "Request timeout expired" in err.message()
    assert not calls.is_done("A")  # all rejected while the instance was still busy
    gate.wait_pending(0)
    gate.release()
    assert calls.output("A").tolist() == [[2 * GATE]]
    assert gate.batches() == [[GATE]]
    s = statistics(client, "db_timeout_reject")
    assert s["inference_count"] == 1 and s["execution_count"] == 1 and s["fail"] == 3
    assert metric(scrape(batch_server), "nv_inference_request_failure", "db_timeout_reject", reason="REJECTED") == 3


@pytest.mark.timeout(40)
def test_queue_timeout_override_lowers(batch_server, client):
    """REJECT, default 10 s, allow_timeout_override: a request timeout of 100 ms applies."""
    gate, calls = gated(batch_server, client, "db_timeout_override")
    queue(gate, calls, [("default", [2], {})])
    calls.send("short", [1], timeout=100_000)  # not awaited as queued: it may expire at once
    err = calls.error("short")
    assert code(err) == "UNAVAILABLE" and "Request timeout expired" in err.message()
    assert not calls.is_done("default")
    gate.release()
    assert calls.output("default").tolist() == [[4]]
    assert gate.batches() == [[GATE], [2]]
    s = statistics(client, "db_timeout_override")
    assert s["batch_stats"] == {1: 2} and s["fail"] == 1


@pytest.mark.timeout(40)
@pytest.mark.parametrize("model", ["db_timeout_no_override", "db_timeout_zero_default"])
def test_queue_timeout_override_ignored(batch_server, client, model):
    """A request ``timeout`` is ignored without allow_timeout_override, and with a default
    of 0 (no timeout) there is nothing it could lower (core PolicyQueue::Enqueue applies it
    only when it is smaller than the default)."""
    gate, calls = gated(batch_server, client, model)
    queue(gate, calls, [("b", [1], {"timeout": 100_000}), ("c", [2], {})])
    time.sleep(0.3)  # b has now waited longer than its own timeout
    gate.release()
    calls.wait()
    assert calls.output("b").tolist() == [[2]] and calls.output("c").tolist() == [[4]]
    assert gate.batches() == [[GATE], [1, 2]]
    assert statistics(client, model)["fail"] == 0


@pytest.mark.timeout(40)
def test_queue_timeout_delay(batch_server, client):
    """DELAY: expired requests still succeed, but only after the live ones (mbs 2)."""
    gate, calls = gated(batch_server, client, "db_timeout_delay")
    queue(gate, calls, [("old1", [1], {"timeout": 100_000}), ("old2", [2], {"timeout": 100_000})])
    time.sleep(0.3)  # old1 and old2 are past their 100 ms timeout
    queue(gate, calls, [("new1", [3], {}), ("new2", [4], {})])
    gate.release()
    calls.wait()
    assert [calls.output(k).tolist() for k in ("old1", "old2", "new1", "new2")] == [[[2]], [[4]], [[6]], [[8]]]
    assert gate.batches() == [[GATE], [3, 4], [1, 2]]
    s = statistics(client, "db_timeout_delay")
    assert s["batch_stats"] == {1: 1, 2: 2} and s["fail"] == 0


# ----------------------------------------------------------------------------- ordering


@pytest.mark.timeout(40)
@pytest.mark.parametrize("model, preserve", [("db_unordered", False), ("db_ordered", True)])
def test_preserve_ordering(batch_server, client, model, preserve):
    """Two instances: "first" blocks in instance 1 while "second" finishes in instance 2.
    Without preserve_ordering "second" is answered first; with it, it waits for "first"."""
    gate = Gate(batch_server, model)
    calls = Calls(client, model)
    gate.hold()
    calls.send("first", [GATE])
    gate.wait_logged(GATE)
    calls.send("second", [1])
    gate.wait_logged(1, "end")  # executed by the other instance
    if preserve:
        deadline = time.monotonic() + 0.3
        while time.monotonic() < deadline:
            assert not calls.is_done("second"), "response released before an earlier request's"
            time.sleep(0.01)
    else:
        calls.wait("second")
        assert not calls.is_done("first")
    gate.release()
    calls.wait()
    assert calls.output("first").tolist() == [[2 * GATE]] and calls.output("second").tolist() == [[2]]
    assert calls.order == (["first", "second"] if preserve else ["second", "first"])
    assert statistics(client, model)["batch_stats"] == {1: 2}


# ----------------------------------------------------------------------------- failures


@pytest.mark.timeout(40)
def test_invalid_request_never_joins_a_batch(batch_server, client):
    gate, calls = gated(batch_server, client, "db_bad_input")
    queue(gate, calls, [("b", [1], {})])
    calls.send("bad", [2], dtype="FP32")
    err = calls.error("bad")
    assert code(err) == "INVALID_ARGUMENT" and "data-type is 'FP32'" in err.message()
    queue(gate, calls, [("d", [3], {})])
    gate.release()
    calls.wait()
    assert calls.output("b").tolist() == [[2]] and calls.output("d").tolist() == [[6]]
    assert gate.batches() == [[GATE], [1, 3]]
    s = statistics(client, "db_bad_input")
    assert s["batch_stats"] == {1: 1, 2: 1} and s["inference_count"] == 3


@pytest.mark.timeout(40)
def test_model_error_fails_exactly_its_batch(batch_server, client):
    """mbs 2: [e, f(-1)] raises in the model → both fail; [g, h] succeeds."""
    gate, calls = gated(batch_server, client, "db_raise")
    queue(gate, calls, [("e", [3], {}), ("f", [FAIL], {}), ("g", [4], {}), ("h", [5], {})])
    gate.release()
    calls.wait()
    for key in "ef":
        err = calls.error(key)
        assert code(err) == "INTERNAL" and "gate model refuses id -1" in err.message(), (key, err)
    assert calls.output("g").tolist() == [[8]] and calls.output("h").tolist() == [[10]]
    assert gate.batches() == [[GATE], [3, FAIL], [4, 5]]
    s = statistics(client, "db_raise")
    assert s["inference_count"] == 3 and s["success"] == 3 and s["fail"] == 2
    # like Triton's backends, an execution whose every response failed is not reported
    assert s["batch_stats"] == {1: 1, 2: 1}
    assert metric(scrape(batch_server), "nv_inference_request_failure", "db_raise", reason="BACKEND") == 2


@pytest.mark.timeout(40)
def test_cancelled_while_queued_never_executes(batch_server, client):
    gate, calls = gated(batch_server, client, "db_cancel")
    queue(gate, calls, [("gone", [1], {"client_timeout": 0.3}), ("kept", [2], {})])
    err = calls.error("gone")
    assert code(err) == "DEADLINE_EXCEEDED"
    time.sleep(0.3)  # let the server see the cancellation before the instance frees up
    gate.release()
    assert calls.output("kept").tolist() == [[4]]
    assert calls.output("A").tolist() == [[2 * GATE]]
    gate.wait_pending(0)
    assert gate.batches() == [[GATE], [2]]
    s = statistics(client, "db_cancel")
    assert s["inference_count"] == 2 and s["batch_stats"] == {1: 2}
    assert metric(scrape(batch_server), "nv_inference_request_failure", "db_cancel", reason="CANCELED") == 1


# ----------------------------------------------------------------------------- no batcher


@pytest.mark.timeout(40)
def test_without_dynamic_batching_each_request_runs_alone(batch_server, client):
    gate, calls = gated(batch_server, client, "no_batcher")
    requests = {"b": [1, 2], "c": [3], "d": [4, 5, 6]}
    queue(gate, calls, [(k, v, {}) for k, v in requests.items()])
    gate.release()
    calls.wait()
    for k, v in requests.items():
        assert calls.output(k).ravel().tolist() == [2 * i for i in v]
    assert gate.batches() == [[GATE], [1, 2], [3], [4, 5, 6]]
    s = statistics(client, "no_batcher")
    assert s["batch_stats"] == {1: 2, 2: 1, 3: 1}
    assert s["execution_count"] == 4 and s["inference_count"] == 7


# ----------------------------------------------------------------------------- metrics


@pytest.mark.timeout(40)
def test_metrics_match_statistics_and_supersonic_load(batch_server, client):
    model = "db_metrics"
    before = scrape(batch_server)
    gate, calls = gated(batch_server, client, model)
    queue(gate, calls, [(f"r{i}", [i], {}) for i in range(1, 6)])
    gate.release()
    calls.wait()
    assert gate.batches() == [[GATE], [1, 2, 3, 4], [5]]
    after = scrape(batch_server)
    s = statistics(client, model)
    assert metric(after, "nv_inference_count", model) == s["inference_count"] == 6
    assert metric(after, "nv_inference_exec_count", model) == s["execution_count"] == 3
    assert metric(after, "nv_inference_request_success", model) == s["success"] == 6
    assert metric(after, "nv_inference_pending_request_count", model) == 0
    # SuperSONIC's autoscaler: queue µs per execution between two scrapes
    d_queue = metric(after, "nv_inference_queue_duration_us", model) - metric(
        before, "nv_inference_queue_duration_us", model
    )
    d_exec = metric(after, "nv_inference_exec_count", model) - metric(before, "nv_inference_exec_count", model)
    assert d_exec == 3
    assert d_queue > 0  # five requests waited behind the held one
    load = d_queue / (d_exec * 1000 + 0.001)
    assert math.isfinite(load) and load >= 0
