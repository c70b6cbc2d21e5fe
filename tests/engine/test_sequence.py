"""The sequence batcher (Triton core sequence_batch_scheduler.cc) through gRPC with tritonclient.

Models (tests/models): ``simple_sequence`` (Direct, 8 slots: max_batch_size 8 x 1 instance;
OUTPUT = READY*(INPUT+START)), ``simple_dyna_sequence`` (Oldest, 2 instances, UINT64 CORRID;
OUTPUT = READY*(INPUT+START+END*CORRID)) and ``simple_string_dyna_sequence`` (Oldest, string
CORRID, accumulates per id; END adds int(CORRID)). Models made here in a temporary repository:

* ``seq_idle`` / ``seq_idle_oldest``: simple_sequence / simple_dyna_sequence with
  ``max_sequence_idle_microseconds: 200000``;
* ``seq_idle_one_slot``: the same with max_batch_size 1 (one slot), for backlog + reaper;
* ``acc_direct``: Direct, 2 instances x max_batch_size 2, accumulating per (instance, row)
  slot, so a sequence moved to another slot or a padding row with READY=1 shows;
* ``ctl_direct`` / ``ctl_oldest``: return the START/END/READY/CORRID control tensors they were
  given (plus their dtypes), with int32_false_true, fp32_false_true and bool_false_true
  controls (one inverted) and INT64 / STRING CORRID.

Covered: int64 and string sequence ids; unary and streaming; interleaved sequences on one
stream, results in order per sequence with ids echoed; Triton's error texts (no correlation
id, no START, batch size > 1, a continuation after END, also pipelined on a stream); more
concurrent sequences than Direct slots (backlog); idle timeout; perf_analyzer
``--sequence-length``. No timing assertions: waits are bounded, and the idle tests only wait
*longer* than the idle limit.
"""

from __future__ import annotations

import contextlib
import queue
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from support.server_process import CONFORMANCE_REPO, ServerProcess, serve
from support.waiting import settled

INVALID = "StatusCode.INVALID_ARGUMENT"
SIMPLE_VALUES = [0, 11, 7, 5, 3, 2, 0, 1]
SIMPLE_EXPECTED = [1, 11, 7, 5, 3, 2, 0, 1]  # START adds 1 to the first


# ----------------------------------------------------------------------------- temporary models

CTL_MODEL_PY = """
import numpy as np

NAMES = ("START", "END", "READY", "CORRID")


class Model:
    def execute(self, inputs):
        rows = inputs["INPUT"].shape[0]
        desc = ",".join(f"{n}:{inputs[n].dtype}:{list(inputs[n].shape)[1:]}" for n in NAMES)
        out = {"OUT_" + n: inputs[n] for n in NAMES}
        out["DTYPES"] = np.array([[desc.encode()]] * rows, dtype=object)
        return out
"""


def _ctl_config(name: str, strategy: str, controls: str, corrid_type: str, out_types: dict) -> str:
    outputs = ",\n".join(f'  {{ name: "OUT_{n}" data_type: {t} dims: [ 1 ] }}' for n, t in out_types.items())
    return f"""
name: "{name}"
backend: "numpy"
max_batch_size: 4
input [ {{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [
{outputs},
  {{ name: "DTYPES" data_type: TYPE_STRING dims: [ 1 ] }}
]
sequence_batching {{
  max_sequence_idle_microseconds: 5000000
  {strategy}
  control_input [
{controls},
    {{ name: "CORRID" control [ {{ kind: CONTROL_SEQUENCE_CORRID data_type: {corrid_type} }} ] }}
  ]
}}
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""


CTL_DIRECT = _ctl_config(
    "ctl_direct",
    "direct { }",
    """    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 3, 9 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END fp32_false_true: [ 0.5, 2.5 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] } ] }""",
    "TYPE_INT64",
    {"START": "TYPE_INT32", "END": "TYPE_FP32", "READY": "TYPE_BOOL", "CORRID": "TYPE_INT64"},
)
CTL_OLDEST = _ctl_config(
    "ctl_oldest",
    "oldest { max_candidate_sequences: 4 }",
    """    { name: "START" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0.25, 0.75 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END bool_false_true: [ true, false ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ -7, 7 ] } ] }""",
    "TYPE_STRING",
    {"START": "TYPE_FP32", "END": "TYPE_BOOL", "READY": "TYPE_INT32", "CORRID": "TYPE_STRING"},
)


# Direct with state per slot: each instance keeps an accumulator per batch row. Right only
# if every sequence stays on its (instance, row) slot and padded rows carry READY = 0.
ACC_MODEL_PY = """
import numpy as np


class Model:
    def initialize(self, config, model_dir):
        self.acc = {}

    def execute(self, inputs):
        out = np.zeros(inputs["INPUT"].shape, dtype=np.int32)
        for row in range(out.shape[0]):
            if inputs["READY"][row, 0]:
                base = 0 if inputs["START"][row, 0] else self.acc.get(row, 0)
                self.acc[row] = out[row, 0] = base + int(inputs["INPUT"][row, 0])
        return {"OUTPUT": out}
"""


def _sequence_model_copy(
    repo,
    name: str,
    idle_us: int,
    max_batch_size: int = 8,
    instances: int = 1,
    model_py: str | None = None,
    source: str = "simple_sequence",
) -> None:
    src = CONFORMANCE_REPO / source
    config = (src / "config.pbtxt").read_text()
    config = config.replace(f'name: "{source}"', f'name: "{name}"')
    config = re.sub(r"max_sequence_idle_microseconds: \d+", f"max_sequence_idle_microseconds: {idle_us}", config)
    config = re.sub(r"max_batch_size: \d+", f"max_batch_size: {max_batch_size}", config)
    config = re.sub(r"count: \d+", f"count: {instances}", config)
    assert f'name: "{name}"' in config and f"max_sequence_idle_microseconds: {idle_us}" in config
    assert f"count: {instances}" in config and f"max_batch_size: {max_batch_size}" in config
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(config)
    (repo / name / "1" / "model.py").write_text(model_py or (src / "1" / "model.py").read_text())


@pytest.fixture(scope="module")
def seq_server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("seq_repo")
    _sequence_model_copy(repo, "seq_idle", 200_000)
    _sequence_model_copy(repo, "seq_idle_oldest", 200_000, instances=2, source="simple_dyna_sequence")
    _sequence_model_copy(repo, "seq_idle_one_slot", 200_000, max_batch_size=1)
    _sequence_model_copy(repo, "acc_direct", 5_000_000, max_batch_size=2, instances=2, model_py=ACC_MODEL_PY)
    for name, config in (("ctl_direct", CTL_DIRECT), ("ctl_oldest", CTL_OLDEST)):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(config)
        (repo / name / "1" / "model.py").write_text(CTL_MODEL_PY)
    log = tmp_path_factory.mktemp("seq_server") / "fpgaserve.log"
    yield from serve(ServerProcess([CONFORMANCE_REPO, repo], log_path=log))


@pytest.fixture
def client(seq_server):
    import tritonclient.grpc as grpcclient

    with grpcclient.InferenceServerClient(seq_server.url) as c:
        yield c


# ----------------------------------------------------------------------------- helpers


def value_input(v: int):
    import tritonclient.grpc as grpcclient

    i = grpcclient.InferInput("INPUT", [1, 1], "INT32")
    i.set_data_from_numpy(np.array([[v]], dtype=np.int32))
    return i


def output_of(result, name: str = "OUTPUT"):
    return result.as_numpy(name)[0, 0]


def infer_error(fn) -> tuple[str, str]:
    """Run ``fn``; it must raise InferenceServerException: (status, message)."""
    from tritonclient.utils import InferenceServerException

    with pytest.raises(InferenceServerException) as e:
        fn()
    return str(e.value.status()), e.value.message()


def run_unary_sequence(client, model: str, seq_id, values, prefix: str = "r") -> list:
    out = []
    for k, v in enumerate(values):
        r = client.infer(
            model,
            [value_input(v)],
            request_id=f"{prefix}{k}",
            sequence_id=seq_id,
            sequence_start=k == 0,
            sequence_end=k == len(values) - 1,
            client_timeout=30,
        )
        assert r.get_response().id == f"{prefix}{k}"
        out.append(int(output_of(r)))
    return out


class Stream:
    """A bidirectional ModelStreamInfer stream: send requests, collect (result, error) in arrival order."""

    def __init__(self, client):
        self.client = client
        self.responses: queue.Queue = queue.Queue()
        client.start_stream(callback=lambda result, error: self.responses.put((result, error)))

    def send(self, model: str, value: int, request_id: str, seq_id, start=False, end=False):
        self.client.async_stream_infer(
            model,
            [value_input(value)],
            request_id=request_id,
            sequence_id=seq_id,
            sequence_start=start,
            sequence_end=end,
        )

    def collect(self, n: int, timeout: float = 30.0) -> list:
        deadline = time.monotonic() + timeout
        out = []
        for _ in range(n):
            try:
                out.append(self.responses.get(timeout=max(0.01, deadline - time.monotonic())))
            except queue.Empty:
                pytest.fail(f"only {len(out)} of {n} stream responses within {timeout} s: {out}")
        return out


@contextlib.contextmanager
def stream(client):
    s = Stream(client)
    try:
        yield s
    finally:
        client.stop_stream()


def by_sequence(responses, output: str = "OUTPUT") -> dict[str, list[tuple[str, int]]]:
    """Successful stream responses grouped by the sequence prefix of their id ("<seq>-<k>"),
    in arrival order: {seq: [(id, OUTPUT), ...]}."""
    got: dict[str, list] = {}
    for result, error in responses:
        assert error is None, error
        rid = result.get_response().id
        got.setdefault(rid.rsplit("-", 1)[0], []).append((rid, int(output_of(result, output))))
    return got


def model_stats(client, model: str) -> dict:
    s = client.get_inference_statistics(model).model_stats
    assert len(s) == 1, s
    st = s[0].inference_stats
    return {
        "inference_count": s[0].inference_count,
        "execution_count": s[0].execution_count,
        **{
            k: getattr(st, k).count
            for k in ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")
        },
    }


def settled_stats(client, model: str) -> dict:
    return settled(lambda: model_stats(client, model))


# ----------------------------------------------------------------------------- expected values


@pytest.mark.timeout(60)
@pytest.mark.parametrize("seq_id", [1000, 2**40 + 3, "simple-seq-a"], ids=["int64", "int64-large", "string"])
def test_simple_sequence_unary(client, seq_id):
    assert run_unary_sequence(client, "simple_sequence", seq_id, SIMPLE_VALUES) == SIMPLE_EXPECTED


@pytest.mark.timeout(60)
def test_simple_sequence_stream(client):
    with stream(client) as s:
        for k, v in enumerate(SIMPLE_VALUES):
            s.send("simple_sequence", v, f"a-{k}", 77, start=k == 0, end=k == len(SIMPLE_VALUES) - 1)
        got = by_sequence(s.collect(len(SIMPLE_VALUES)))
    assert got == {"a": [(f"a-{k}", e) for k, e in enumerate(SIMPLE_EXPECTED)]}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("corrid", [1000, 12345])
def test_dyna_sequence_end_times_corrid_unary(client, corrid):
    # Oldest strategy: END*CORRID is added to the last output only
    expected = SIMPLE_EXPECTED[:-1] + [SIMPLE_EXPECTED[-1] + corrid]
    assert run_unary_sequence(client, "simple_dyna_sequence", corrid, SIMPLE_VALUES) == expected


@pytest.mark.timeout(60)
def test_dyna_sequences_interleaved_on_one_stream(client):
    """Three Oldest sequences interleaved request by request on one stream: each sequence's
    results come back in its own order with its ids, and only its END carries its CORRID."""
    seqs = {"x": 501, "y": 502, "z": 9003}
    values = {name: [v + 10 * i for v in SIMPLE_VALUES] for i, name in enumerate(seqs)}
    with stream(client) as s:
        for k in range(len(SIMPLE_VALUES)):
            for name, corrid in seqs.items():
                s.send(
                    "simple_dyna_sequence",
                    values[name][k],
                    f"{name}-{k}",
                    corrid,
                    start=k == 0,
                    end=k == len(SIMPLE_VALUES) - 1,
                )
        got = by_sequence(s.collect(len(seqs) * len(SIMPLE_VALUES)))
    last = len(SIMPLE_VALUES) - 1
    for name, corrid in seqs.items():
        expected = [(f"{name}-{k}", v + (k == 0) + (corrid if k == last else 0)) for k, v in enumerate(values[name])]
        assert got[name] == expected, name


@pytest.mark.timeout(60)
def test_string_ids_accumulate_per_sequence(client):
    """String correlation ids on simple_string_dyna_sequence: two interleaved sequences keep
    separate accumulators; END adds int(CORRID)."""
    seqs = {"s17": "17", "s23": "23"}
    values = {"s17": [1, 2, 3, 4], "s23": [10, 20, 30, 40]}
    with stream(client) as s:
        for k in range(4):
            for name, corrid in seqs.items():
                s.send("simple_string_dyna_sequence", values[name][k], f"{name}-{k}", corrid, start=k == 0, end=k == 3)
        got = by_sequence(s.collect(8))
    for name, corrid in seqs.items():
        acc = np.cumsum(values[name]).tolist()
        acc[-1] += int(corrid)
        assert got[name] == [(f"{name}-{k}", a) for k, a in enumerate(acc)], name
    # and unary, where a new START resets the accumulator for a reused id
    for _ in range(2):
        assert run_unary_sequence(client, "simple_string_dyna_sequence", "31", [5, 6, 7]) == [5, 11, 18 + 31]


@pytest.mark.timeout(60)
def test_int64_and_string_ids_are_distinct_sequences(client):
    """The int64 id 8080 and the string id "8080" are different correlation ids."""
    client.infer("simple_sequence", [value_input(1)], sequence_id=8080, sequence_start=True)
    status, msg = infer_error(lambda: client.infer("simple_sequence", [value_input(1)], sequence_id="8080"))
    assert status == INVALID and "must specify the START flag" in msg, msg
    r = client.infer("simple_sequence", [value_input(4)], sequence_id=8080, sequence_end=True)
    assert output_of(r) == 4


# ----------------------------------------------------------------------------- errors


@pytest.mark.timeout(60)
@pytest.mark.parametrize("model", ["simple_sequence", "simple_dyna_sequence"])
def test_request_without_sequence_id_is_rejected(client, model):
    status, msg = infer_error(lambda: client.infer(model, [value_input(1)], sequence_start=True))
    assert status == INVALID
    assert f"inference request to model '{model}' must specify a non-zero or non-empty correlation ID" in msg, msg


@pytest.mark.timeout(60)
@pytest.mark.parametrize("seq_id", [4242, "never-started"])
def test_first_request_without_start_is_rejected(client, seq_id):
    status, msg = infer_error(lambda: client.infer("simple_sequence", [value_input(1)], sequence_id=seq_id))
    assert status == INVALID
    assert (
        f"inference request for sequence {seq_id} to model 'simple_sequence' must specify the START flag "
        "on the first request of the sequence"
    ) in msg, msg


@pytest.mark.timeout(60)
@pytest.mark.parametrize("model", ["simple_sequence", "simple_dyna_sequence"])
def test_batch_size_above_one_is_rejected(client, model):
    import tritonclient.grpc as grpcclient

    i = grpcclient.InferInput("INPUT", [2, 1], "INT32")
    i.set_data_from_numpy(np.array([[1], [2]], dtype=np.int32))
    status, msg = infer_error(lambda: client.infer(model, [i], sequence_id=606, sequence_start=True))
    assert status == INVALID
    assert (
        f"inference request to model '{model}' must specify batch-size 1 due to requirements of sequence batcher" in msg
    )
    # nothing was started: a continuation with that id has no sequence
    status, msg = infer_error(lambda: client.infer(model, [value_input(1)], sequence_id=606))
    assert "must specify the START flag" in msg, msg


@pytest.mark.timeout(60)
@pytest.mark.parametrize("model", ["simple_sequence", "simple_dyna_sequence"])
def test_sequence_is_gone_after_end(client, model):
    assert len(run_unary_sequence(client, model, 515, [1, 2, 3])) == 3
    status, msg = infer_error(lambda: client.infer(model, [value_input(1)], sequence_id=515))
    assert status == INVALID and "inference request for sequence 515" in msg and "START flag" in msg, msg
    # the id can start a new sequence
    corr = 515 if model == "simple_dyna_sequence" else 0
    assert run_unary_sequence(client, model, 515, [4, 5]) == [5, 5 + corr]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("model", ["simple_sequence", "simple_dyna_sequence"])
def test_continuation_pipelined_after_end_is_rejected(client, model):
    """Triton forgets a correlation id when its END request is *enqueued*: a continuation
    sent right behind the END on the same stream fails even though the END has not run yet,
    while a START pipelined behind it begins a fresh sequence."""
    with stream(client) as s:
        s.send(model, 1, "p-0", 616, start=True)
        s.send(model, 2, "p-1", 616, end=True)
        s.send(model, 3, "late", 616)  # neither START nor part of the ended sequence
        s.send(model, 4, "q-0", 616, start=True)
        s.send(model, 5, "q-1", 616, end=True)
        responses = s.collect(5)
    errors = [e for r, e in responses if e is not None]
    assert len(errors) == 1, responses
    assert "inference request for sequence 616" in str(errors[0]) and "START flag" in str(errors[0]), errors
    corr = 616 if model == "simple_dyna_sequence" else 0
    got = by_sequence([x for x in responses if x[1] is None])
    assert got == {"p": [("p-0", 2), ("p-1", 2 + corr)], "q": [("q-0", 5), ("q-1", 5 + corr)]}, got


# ----------------------------------------------------------------------------- Direct slots and backlog


@pytest.mark.timeout(90)
def test_more_sequences_than_direct_slots_on_one_stream(client):
    """simple_sequence has 8 slots (max_batch_size 8 x 1 instance). 12 sequences, all their
    requests sent up front and interleaved: the 4 without a slot wait in the backlog until a
    slot frees up, then complete; every sequence's results are right and in order."""
    n, length = 12, 5
    with stream(client) as s:
        for k in range(length):
            for i in range(n):
                s.send("simple_sequence", 100 * i + k, f"s{i}-{k}", 3000 + i, start=k == 0, end=k == length - 1)
        got = by_sequence(s.collect(n * length, timeout=60))
    assert sorted(got) == sorted(f"s{i}" for i in range(n))
    for i in range(n):
        assert got[f"s{i}"] == [(f"s{i}-{k}", 100 * i + k + (k == 0)) for k in range(length)], i


@pytest.mark.timeout(90)
def test_more_sequences_than_direct_slots_unary_threads(seq_server):
    """12 clients each running a sequence with blocking unary calls: the backlogged ones
    wait on their START until a slot frees, and all finish correctly."""
    import tritonclient.grpc as grpcclient

    def one(i: int):
        c = grpcclient.InferenceServerClient(seq_server.url)
        try:
            values = [i, 2 * i, 3 * i, 4 * i]
            return run_unary_sequence(c, "simple_sequence", f"thread-{i}", values, prefix=f"t{i}-")
        finally:
            c.close()

    with ThreadPoolExecutor(12) as pool:
        results = list(pool.map(one, range(1, 13), timeout=60))
    for i, out in zip(range(1, 13), results):
        assert out == [i + 1, 2 * i, 3 * i, 4 * i], (i, out)


@pytest.mark.timeout(90)
def test_direct_sequences_stay_on_their_slot(client):
    """acc_direct keeps an accumulator per (instance, batch row): 2 instances x max_batch_size
    2 = 4 slots. 7 interleaved sequences (3 backlogged, then reusing freed slots) all get
    their own running sums, so each stayed pinned to one slot and padding rows were inert."""
    n, length = 7, 5
    values = {i: [(i + 1) * 10 + k for k in range(length)] for i in range(n)}
    with stream(client) as s:
        for k in range(length):
            for i in range(n):
                s.send("acc_direct", values[i][k], f"s{i}-{k}", 7000 + i, start=k == 0, end=k == length - 1)
        got = by_sequence(s.collect(n * length, timeout=60))
    for i in range(n):
        sums = np.cumsum(values[i]).tolist()
        assert got[f"s{i}"] == [(f"s{i}-{k}", sums[k]) for k in range(length)], i


# ----------------------------------------------------------------------------- idle timeout


@pytest.mark.timeout(60)
@pytest.mark.parametrize("model, corrid_term", [("seq_idle", 0), ("seq_idle_oldest", 88)])
def test_idle_sequence_is_ended(client, model, corrid_term):
    """max_sequence_idle_microseconds 200000 (Direct and Oldest copies). After well over
    200 ms without a request the sequence is gone, so a continuation fails (a wait, not a
    timing assertion)."""
    assert output_of(client.infer(model, [value_input(5)], sequence_id=88, sequence_start=True)) == 6
    time.sleep(0.8)
    status, msg = infer_error(lambda: client.infer(model, [value_input(1)], sequence_id=88))
    assert (
        status == INVALID and f"inference request for sequence 88 to model '{model}'" in msg and "START flag" in msg
    ), msg
    # a new START is fine
    r = client.infer(model, [value_input(5)], sequence_id=88, sequence_start=True, sequence_end=True)
    assert output_of(r) == 6 + corrid_term


@pytest.mark.timeout(60)
def test_idle_reaper_frees_the_slot_for_the_backlog(client):
    """seq_idle_one_slot has a single Direct slot. A sequence that never ends holds it; a
    second sequence waits in the backlog and runs once the first is reaped as idle."""
    assert output_of(client.infer("seq_idle_one_slot", [value_input(1)], sequence_id=1, sequence_start=True)) == 2
    r = client.infer(
        "seq_idle_one_slot", [value_input(10)], sequence_id=2, sequence_start=True, sequence_end=True, client_timeout=20
    )
    assert output_of(r) == 11
    status, msg = infer_error(lambda: client.infer("seq_idle_one_slot", [value_input(1)], sequence_id=1))
    assert status == INVALID and "START flag" in msg, msg


# ----------------------------------------------------------------------------- control tensors

CTL_OUTPUTS = ("OUT_START", "OUT_END", "OUT_READY", "OUT_CORRID", "DTYPES")


def _ctl_rows(responses) -> dict[str, tuple]:
    rows = {}
    for result, error in responses:
        assert error is None, error
        rows[result.get_response().id] = tuple(result.as_numpy(n)[0, 0] for n in CTL_OUTPUTS)
    return rows


def _run_ctl(client, model: str, ids: tuple):
    """Two interleaved 3-request sequences and one single-request (START+END) sequence."""
    with stream(client) as s:
        for k in range(3):
            for name, seq_id in (("a", ids[0]), ("b", ids[1])):
                s.send(model, k, f"{name}-{k}", seq_id, start=k == 0, end=k == 2)
        s.send(model, 9, "c-0", ids[2], start=True, end=True)
        return _ctl_rows(s.collect(7))


@pytest.mark.timeout(60)
def test_control_tensors_direct(client):
    # START int32 [3, 9], END fp32 [0.5, 2.5], READY bool [false, true], CORRID INT64
    rows = _run_ctl(client, "ctl_direct", (71, 2**35 + 72, 73))
    dtypes = b"START:int32:[1],END:float32:[1],READY:bool:[1],CORRID:int64:[1]"
    expected = {
        "a-0": (9, 0.5, True, 71, dtypes),
        "a-1": (3, 0.5, True, 71, dtypes),
        "a-2": (3, 2.5, True, 71, dtypes),
        "b-0": (9, 0.5, True, 2**35 + 72, dtypes),
        "b-1": (3, 0.5, True, 2**35 + 72, dtypes),
        "b-2": (3, 2.5, True, 2**35 + 72, dtypes),
        "c-0": (9, 2.5, True, 73, dtypes),
    }
    assert rows == expected


@pytest.mark.timeout(60)
def test_control_tensors_oldest(client):
    # START fp32 [0.25, 0.75], END bool [true, false] (inverted), READY int32 [-7, 7], CORRID STRING
    rows = _run_ctl(client, "ctl_oldest", ("alpha", "beta", "gamma"))
    dtypes = b"START:float32:[1],END:bool:[1],READY:int32:[1],CORRID:object:[1]"
    expected = {
        "a-0": (0.75, True, 7, b"alpha", dtypes),
        "a-1": (0.25, True, 7, b"alpha", dtypes),
        "a-2": (0.25, False, 7, b"alpha", dtypes),
        "b-0": (0.75, True, 7, b"beta", dtypes),
        "b-1": (0.25, True, 7, b"beta", dtypes),
        "b-2": (0.25, False, 7, b"beta", dtypes),
        "c-0": (0.75, False, 7, b"gamma", dtypes),
    }
    assert rows == expected


@pytest.mark.timeout(60)
def test_control_tensors_are_not_model_inputs(client):
    """The controls are synthesized: metadata lists only INPUT, and a client sending one is refused."""
    import tritonclient.grpc as grpcclient

    md = client.get_model_metadata("ctl_direct")
    assert [i.name for i in md.inputs] == ["INPUT"]
    extra = grpcclient.InferInput("START", [1, 1], "INT32")
    extra.set_data_from_numpy(np.array([[1]], dtype=np.int32))
    status, msg = infer_error(
        lambda: client.infer(
            "ctl_direct", [value_input(1), extra], sequence_id=5, sequence_start=True, sequence_end=True
        )
    )
    # Triton counts inputs against the config's (controls are not among them) before anything else
    assert status == INVALID and "expected 1 inputs but got 2 inputs for model 'ctl_direct'" in msg, msg


# ----------------------------------------------------------------------------- perf_analyzer


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_perf_analyzer_sequences(perf_analyzer, seq_server, client):
    before = settled_stats(client, "simple_sequence")
    cmd = [
        perf_analyzer,
        "-m",
        "simple_sequence",
        "-u",
        seq_server.url,
        "-i",
        "grpc",
        "--sequence-length",
        "10",
        "--concurrency-range",
        "4",
        "--measurement-mode",
        "count_windows",
        "--measurement-request-count",
        "200",
        "-s",
        "50",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=100)
    after = settled_stats(client, "simple_sequence")
    info = f"{' '.join(cmd)}\nrc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}\n{seq_server.log()[-2000:]}"
    assert proc.returncode == 0, info
    m = re.search(r"Sequence count: (\d+)", proc.stdout)
    assert m and int(m.group(1)) > 0, info
    d = {k: after[k] - before[k] for k in after}
    assert d["success"] > 0 and d["fail"] == 0, d
    # every request is one inference; each is queued and computed once
    assert d["inference_count"] == d["success"], d
    for k in ("queue", "compute_input", "compute_infer", "compute_output"):
        assert d[k] == d["success"], (k, d)
    # several slots' requests may share one execution, at most 8 (the slots)
    assert -(-d["success"] // 8) <= d["execution_count"] <= d["success"], d
    # PA's own Server block is a window of the same run
    server = re.search(
        r"Server:\s*\n\s*Inference count: (\d+)\s*\n\s*Execution count: (\d+)\s*\n\s*Successful request count: (\d+)",
        proc.stdout,
    )
    assert server, info
    inf, execs, succ = map(int, server.groups())
    assert 0 < succ <= d["success"] and inf == succ and execs <= succ, (server.groups(), d)
