"""Transport behaviour of a real ``fpgaserve`` process, driven by the real tritonclient.

Large messages (≥ 50 MiB each way), message-size limits, gzip/deflate, deadlines and
cancellation (a request that expires or is cancelled while queued never executes),
hundreds of concurrent requests (aio and threads), keepalive pings, grpc.health.v1,
the SIGTERM drain and the HTTP health endpoints.

Models used besides ``tests/models``, written into a tmp repository:

* ``identity_fp32`` - numpy backend, max_batch_size 0, FP32 [-1] -> [-1], OUTPUT0 = INPUT0;
* ``slow`` - numpy backend, one instance, INT32 IN [2] = (tag, sleep_ms): appends ``tag`` to a
  log file when it starts executing, sleeps ``sleep_ms`` and returns OUT = IN. The log is
  the ground truth of what the server really executed;
* ``slow_batched`` - the same behind a dynamic batcher (max_batch_size 8, IN [1,2] per request).
"""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aiogrpcclient
from tritonclient.utils import InferenceServerException

from support.server_process import CONFORMANCE_REPO, ServerProcess, serve

# ----------------------------------------------------------------------------- helpers

IDENTITY_FP32_CONFIG = """
name: "identity_fp32"
backend: "numpy"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""

IDENTITY_MODEL_PY = """
class Model:
    def execute(self, inputs):
        return {"OUTPUT0": inputs["INPUT0"]}
"""

SLOW_CONFIG = """
name: "slow"
backend: "numpy"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 2 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "log" value { string_value: "%s" } }
"""

SLOW_MODEL_PY = """
import time


class Model:
    def initialize(self, config, model_dir):
        self.log = config["parameters"]["log"]["string_value"]

    def execute(self, inputs):
        x = inputs["IN"]
        tag, sleep_ms = int(x[0]), int(x[1])
        with open(self.log, "a") as f:
            f.write(f"{tag}\\n")
        time.sleep(sleep_ms / 1000.0)
        return {"OUT": x.copy()}
"""

# the same with Triton's dynamic batcher in front (requests are [1,2] rows)
SLOW_BATCHED_CONFIG = """
name: "slow_batched"
backend: "numpy"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 2 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
dynamic_batching { }
parameters { key: "log" value { string_value: "%s" } }
"""

SLOW_BATCHED_MODEL_PY = """
import time


class Model:
    def initialize(self, config, model_dir):
        self.log = config["parameters"]["log"]["string_value"]

    def execute(self, inputs):
        x = inputs["IN"]
        with open(self.log, "a") as f:
            f.writelines(f"{int(row[0])}\\n" for row in x)
        time.sleep(max(int(row[1]) for row in x) / 1000.0)
        return {"OUT": x.copy()}
"""

BROKEN_CONFIG = 'name: "broken"\nbackend: "numpy"\nmax_batch_size: 0\ninput [ { name: "X" \n'


def write_model(repo: Path, name: str, config: str, model_py: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(config)
    (repo / name / "1" / "model.py").write_text(model_py)


def make_repo(root: Path, slow_log: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    for name in ("simple", "simple_identity"):
        shutil.copytree(CONFORMANCE_REPO / name, repo / name)
    write_model(repo, "identity_fp32", IDENTITY_FP32_CONFIG, IDENTITY_MODEL_PY)
    write_model(repo, "slow", SLOW_CONFIG % slow_log, SLOW_MODEL_PY)
    write_model(repo, "slow_batched", SLOW_BATCHED_CONFIG % slow_log, SLOW_BATCHED_MODEL_PY)
    return repo


def read_tags(log: Path) -> list[int]:
    if not log.exists():
        return []
    return [int(line) for line in log.read_text().split()]


def wait_for(predicate, timeout: float = 20.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def simple_inputs(i: int, batch: int = 1, mod=grpcclient):
    """Distinct INPUT0/INPUT1 for request ``i`` and the expected sum/difference."""
    in0 = (np.arange(16, dtype=np.int32) + i).reshape(1, 16).repeat(batch, axis=0)
    in1 = np.full((batch, 16), 3 * i + 1, dtype=np.int32)
    inputs = [mod.InferInput("INPUT0", [batch, 16], "INT32"), mod.InferInput("INPUT1", [batch, 16], "INT32")]
    inputs[0].set_data_from_numpy(in0)
    inputs[1].set_data_from_numpy(in1)
    return inputs, in0 + in1, in0 - in1


def slow_inputs(tag: int, sleep_ms: int, mod=grpcclient, model: str = "slow"):
    shape = [1, 2] if model == "slow_batched" else [2]
    x = mod.InferInput("IN", shape, "INT32")
    x.set_data_from_numpy(np.array([tag, sleep_ms], dtype=np.int32).reshape(shape))
    return [x]


def infer_slow(client, tag: int, sleep_ms: int, client_timeout=None, model: str = "slow"):
    result = client.infer(model, slow_inputs(tag, sleep_ms, model=model), client_timeout=client_timeout)
    out = result.as_numpy("OUT")
    assert out.reshape(-1).tolist() == [tag, sleep_ms]
    return tag


def http_status_or_none(proc: ServerProcess, path: str):
    """The probe's status, or None once the listener is gone. A timeout (a loaded machine)
    says nothing about readiness, so it is reported as the last known state: ready."""
    try:
        return proc.http_status(path)
    except OSError as e:
        if isinstance(getattr(e, "reason", e), TimeoutError):
            return 200
        return None  # connection refused/reset: listener closed


def status_of(exc: InferenceServerException) -> str:
    return str(exc.status())


def execution_count(client, model: str) -> int:
    stats = client.get_inference_statistics(model)
    return stats.model_stats[0].execution_count


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def slow_log(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("slowlog") / "executed.log"


@pytest.fixture(scope="module")
def tserver(tmp_path_factory, slow_log):
    root = tmp_path_factory.mktemp("transport")
    repo = make_repo(root, slow_log)
    yield from serve(ServerProcess([repo], log_path=root / "fpgaserve.log"))


@pytest.fixture
def tclient(tserver):
    with grpcclient.InferenceServerClient(tserver.url) as c:
        yield c


def assert_healthy(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    inputs, s, d = simple_inputs(7)
    r = client.infer("simple", inputs)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), s)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), d)


# ----------------------------------------------------------------------------- large messages

LARGE_ELEMENTS = 13_500_000  # FP32: 54 MB request and 54 MB response


@pytest.mark.timeout(120)
def test_large_fp32_round_trip_over_50_mib(tclient):
    data = np.random.default_rng(1).standard_normal(LARGE_ELEMENTS, dtype=np.float32)
    assert data.nbytes >= 50 * 1024 * 1024
    x = grpcclient.InferInput("INPUT0", [LARGE_ELEMENTS], "FP32")
    x.set_data_from_numpy(data)
    result = tclient.infer("identity_fp32", [x])
    out = result.as_numpy("OUTPUT0")
    assert out.shape == (LARGE_ELEMENTS,)
    assert np.array_equal(out, data)
    assert_healthy(tclient)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_large_bytes_round_trip_10m_elements(tclient):
    """Triton qa/L0_grpc: 10,485,760 BYTES elements (~50 MiB each way) through string identity."""
    n = 10_485_760
    data = np.array([b"x1234"], dtype=object).repeat(n)  # 4+5 bytes each on the wire: 94 MB
    data[0], data[n // 2], data[-1] = b"first", b"mi\x00d", b""
    x = grpcclient.InferInput("INPUT0", [1, n], "BYTES")
    x.set_data_from_numpy(data.reshape(1, n))
    result = tclient.infer("simple_identity", [x])
    out = result.as_numpy("OUTPUT0")
    assert out.shape == (1, n)
    assert out[0, 0] == b"first" and out[0, n // 2] == b"mi\x00d" and out[0, -1] == b""
    assert np.array_equal(out.reshape(-1), data)
    assert_healthy(tclient)


@pytest.mark.timeout(60)
def test_grpc_max_message_size_rejects_larger_request(tmp_path, slow_log):
    repo = make_repo(tmp_path, slow_log)
    limit = 1024 * 1024
    with ServerProcess([repo], "--grpc-max-message-size", str(limit), log_path=tmp_path / "log") as proc:
        client = grpcclient.InferenceServerClient(proc.url)
        try:
            big = np.zeros(2 * limit // 4, dtype=np.float32)  # 2 MiB of payload
            x = grpcclient.InferInput("INPUT0", list(big.shape), "FP32")
            x.set_data_from_numpy(big)
            with pytest.raises(InferenceServerException) as e:
                client.infer("identity_fp32", [x])
            assert status_of(e.value) == "StatusCode.RESOURCE_EXHAUSTED"
            assert "larger than max" in e.value.message()
            assert f"vs. {limit})" in e.value.message()
            # below the limit still works, and the server keeps serving
            small = np.arange(1000, dtype=np.float32)
            x = grpcclient.InferInput("INPUT0", [1000], "FP32")
            x.set_data_from_numpy(small)
            assert np.array_equal(client.infer("identity_fp32", [x]).as_numpy("OUTPUT0"), small)
            assert_healthy(client)
        finally:
            client.close()


# ----------------------------------------------------------------------------- compression


@pytest.mark.timeout(60)
@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compression_sync(tclient, algorithm):
    for i in range(3):
        inputs, s, d = simple_inputs(100 + i, batch=4)
        r = tclient.infer("simple", inputs, compression_algorithm=algorithm)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), s)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), d)
    # a compressible 4 MB tensor too
    data = np.repeat(np.arange(1000, dtype=np.float32), 1000)
    x = grpcclient.InferInput("INPUT0", [data.size], "FP32")
    x.set_data_from_numpy(data)
    r = tclient.infer("identity_fp32", [x], compression_algorithm=algorithm)
    assert np.array_equal(r.as_numpy("OUTPUT0"), data)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compression_aio(tserver, algorithm):
    async def run():
        client = aiogrpcclient.InferenceServerClient(tserver.url)
        try:
            for i in range(3):
                inputs, s, d = simple_inputs(200 + i, batch=2, mod=aiogrpcclient)
                r = await client.infer("simple", inputs, compression_algorithm=algorithm)
                np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), s)
                np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), d)
        finally:
            await client.close()

    asyncio.run(run())


# ----------------------------------------------------------------------------- deadlines, cancellation


@pytest.mark.timeout(60)
def test_deadline_shorter_than_work_is_deadline_exceeded(tclient, slow_log):
    with pytest.raises(InferenceServerException) as e:
        infer_slow(tclient, tag=1, sleep_ms=1500, client_timeout=0.2)
    assert status_of(e.value) == "StatusCode.DEADLINE_EXCEEDED"
    # the server keeps serving, including the same model once it is free again
    assert_healthy(tclient)
    assert infer_slow(tclient, tag=2, sleep_ms=0, client_timeout=30) == 2


@pytest.mark.timeout(90)
@pytest.mark.parametrize("model", ["slow", "slow_batched"])
def test_expired_or_cancelled_queued_requests_never_execute(tserver, tclient, slow_log, model):
    """Queue requests behind a slow one; the ones whose deadline passes (or that the client
    cancels) while still queued must never reach the model: the model's own log and
    ModelStatistics.execution_count prove it. ``slow_batched`` has a dynamic batcher."""
    executed_before = execution_count(tclient, model)
    tags_before = read_tags(slow_log)

    expired_tags = [11, 12, 13, 14]
    cancelled_tags = [21, 22, 23]
    aio_cancelled_tags = [31, 32, 33]
    errors: dict[int, str] = {}
    callbacks_done = threading.Event()
    cancel_results: dict[int, object] = {}

    def on_done(tag):
        def cb(result, error):
            cancel_results[tag] = error if error is not None else result
            if len(cancel_results) == len(cancelled_tags):
                callbacks_done.set()

        return cb

    with ThreadPoolExecutor(max_workers=8) as pool:
        blocker = pool.submit(infer_slow, tclient, 10, 3500, 60, model)
        wait_for(lambda: 10 in read_tags(slow_log)[len(tags_before) :], what="the blocker to execute")

        # 1) deadlines that expire while queued behind the blocker
        def expiring(tag):
            try:
                infer_slow(tclient, tag, 0, client_timeout=0.3, model=model)
            except InferenceServerException as e:
                errors[tag] = status_of(e)

        expiring_futures = [pool.submit(expiring, t) for t in expired_tags]

        # 2) explicit cancellation of queued requests (sync client, future API)
        contexts = [
            tclient.async_infer(model, slow_inputs(t, 0, model=model), on_done(t), client_timeout=60)
            for t in cancelled_tags
        ]

        # 3) explicit cancellation from the asyncio client
        async def aio_cancel():
            client = aiogrpcclient.InferenceServerClient(tserver.url)
            try:
                tasks = [
                    asyncio.ensure_future(client.infer(model, slow_inputs(t, 0, aiogrpcclient, model)))
                    for t in aio_cancelled_tags
                ]
                await asyncio.sleep(0.3)
                for task in tasks:
                    task.cancel()
                results = await asyncio.gather(*tasks, return_exceptions=True)
                assert all(isinstance(r, asyncio.CancelledError) for r in results), results
            finally:
                await client.close()

        time.sleep(0.2)  # let the cancellable requests reach the server's queue
        for ctx in contexts:
            ctx.cancel()
        asyncio.run(aio_cancel())

        for f in expiring_futures:
            f.result(timeout=30)
        assert blocker.result(timeout=30) == 10
        assert callbacks_done.wait(10)

    assert errors == dict.fromkeys(expired_tags, "StatusCode.DEADLINE_EXCEEDED")
    for tag in cancelled_tags:
        err = cancel_results[tag]
        assert isinstance(err, InferenceServerException), err
        assert status_of(err) == "StatusCode.CANCELLED"

    # a later request still runs; give any wrongly queued request time to run before it
    assert infer_slow(tclient, 99, 0, client_timeout=30, model=model) == 99
    executed = read_tags(slow_log)[len(tags_before) :]
    assert executed == [10, 99], f"requests that expired/cancelled in the queue executed: {executed}"
    assert execution_count(tclient, model) - executed_before == 2
    assert_healthy(tclient)


# ----------------------------------------------------------------------------- concurrency

N_CONCURRENT = 320


@pytest.mark.timeout(120)
def test_hundreds_of_concurrent_aio_requests(tserver):
    async def run():
        client = aiogrpcclient.InferenceServerClient(tserver.url)
        try:

            async def one(i):
                inputs, s, d = simple_inputs(i, batch=1 + i % 8, mod=aiogrpcclient)
                r = await client.infer("simple", inputs, request_id=f"aio-{i}")
                assert r.get_response().id == f"aio-{i}"
                np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), s)
                np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), d)
                return i

            done = await asyncio.gather(*(one(i) for i in range(N_CONCURRENT)))
            assert done == list(range(N_CONCURRENT))
        finally:
            await client.close()

    asyncio.run(run())


@pytest.mark.timeout(120)
def test_hundreds_of_concurrent_threaded_sync_requests(tserver):
    client = grpcclient.InferenceServerClient(tserver.url)
    barrier = threading.Barrier(N_CONCURRENT, timeout=60)

    def one(i):
        inputs, s, d = simple_inputs(10_000 + i, batch=1 + i % 8)
        barrier.wait()  # release all requests at once
        r = client.infer("simple", inputs, request_id=str(i))
        assert r.get_response().id == str(i)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), s)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), d)
        return i

    try:
        with ThreadPoolExecutor(max_workers=N_CONCURRENT) as pool:
            done = list(pool.map(one, range(N_CONCURRENT)))
        assert done == list(range(N_CONCURRENT))
    finally:
        client.close()


@pytest.mark.timeout(120)
def test_concurrent_requests_on_the_slow_model_all_complete(tserver, slow_log):
    """Many in-flight requests queued on a one-instance model: each gets its own answer."""

    async def run():
        client = aiogrpcclient.InferenceServerClient(tserver.url)
        try:

            async def one(tag):
                r = await client.infer("slow", slow_inputs(tag, 1, aiogrpcclient))
                return r.as_numpy("OUT").tolist()

            tags = list(range(5000, 5100))
            results = await asyncio.gather(*(one(t) for t in tags))
            assert results == [[t, 1] for t in tags]
        finally:
            await client.close()

    asyncio.run(run())


# ----------------------------------------------------------------------------- keepalive

KEEPALIVE = {
    "keepalive_time_ms": 1000,
    "keepalive_timeout_ms": 2000,
    "keepalive_permit_without_calls": True,
    "http2_max_pings_without_data": 0,
}


def _keepalive_session(url: str) -> None:
    """Requests, idle periods and a long call while the client pings every second."""
    client = grpcclient.InferenceServerClient(url, keepalive_options=grpcclient.KeepAliveOptions(**KEEPALIVE))
    try:
        for round_ in range(2):
            inputs, s, _ = simple_inputs(round_)
            np.testing.assert_array_equal(client.infer("simple", inputs).as_numpy("OUTPUT0"), s)
            time.sleep(2.5)  # idle: only keepalive pings on the connection
        # a call that lasts several ping periods with no data on the stream
        assert infer_slow(client, 7000, 4500, client_timeout=30) == 7000
        assert client.is_server_ready()
    finally:
        client.close()


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_keepalive_client_survives_idle_and_long_calls(tserver):
    _keepalive_session(tserver.url)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_keepalive_control_strict_server_sends_goaway(tmp_path, slow_log):
    """Control: a strict ping policy (5 min interval, 1 strike) cuts the same client off,
    so the test above would notice a server that sends GOAWAY on keepalive pings."""
    repo = make_repo(tmp_path, slow_log)
    strict = ["--grpc-http2-min-recv-ping-interval-without-data", "300000", "--grpc-http2-max-ping-strikes", "1"]
    with ServerProcess([repo], *strict, log_path=tmp_path / "log") as proc:
        with pytest.raises(InferenceServerException) as e:
            _keepalive_session(proc.url)
        assert status_of(e.value) == "StatusCode.UNAVAILABLE"


# ----------------------------------------------------------------------------- grpc.health.v1


def health_check(url: str, service: str = ""):
    from fpgaserve.protos import health

    with grpc.insecure_channel(url) as channel:
        check = channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=health.HealthCheckRequest.SerializeToString,
            response_deserializer=health.HealthCheckResponse.FromString,
        )
        return check(health.HealthCheckRequest(service=service), timeout=10).status


@pytest.mark.timeout(30)
def test_health_check_serving_when_ready(tserver, tclient):
    from fpgaserve.protos import health

    assert tclient.is_server_ready()
    assert health_check(tserver.url) == health.HealthCheckResponse.SERVING
    # Triton answers for the whole server, whatever the service name
    assert health_check(tserver.url, "inference.GRPCInferenceService") == health.HealthCheckResponse.SERVING


@pytest.mark.timeout(60)
@pytest.mark.parametrize("strict", [True, False])
def test_health_check_with_a_failed_model(tmp_path, strict):
    from fpgaserve.protos import health

    repo = tmp_path / "repo"
    shutil.copytree(CONFORMANCE_REPO / "simple", repo / "simple")
    (repo / "broken" / "1").mkdir(parents=True)
    (repo / "broken" / "config.pbtxt").write_text(BROKEN_CONFIG)
    args = [] if strict else ["--strict-readiness=false"]
    proc = ServerProcess([repo], *args, log_path=tmp_path / "log")
    proc.start(wait_ready=False)
    try:
        client = grpcclient.InferenceServerClient(proc.url)
        try:
            assert client.is_server_live()
            assert client.is_model_ready("simple")
            assert client.is_server_ready() is (not strict)
            expected = health.HealthCheckResponse.NOT_SERVING if strict else health.HealthCheckResponse.SERVING
            assert health_check(proc.url) == expected
            assert proc.http_status("/v2/health/ready") == (400 if strict else 200)
            inputs, s, _ = simple_inputs(3)
            np.testing.assert_array_equal(client.infer("simple", inputs).as_numpy("OUTPUT0"), s)
        finally:
            client.close()
    finally:
        assert proc.stop() == 0


# ----------------------------------------------------------------------------- SIGTERM drain

EXIT_TIMEOUT = 15


@pytest.mark.timeout(90)
def test_sigterm_drains_in_flight_requests_then_exits_zero(tmp_path):
    log = tmp_path / "executed.log"
    repo = make_repo(tmp_path, log)
    proc = ServerProcess([repo], "--exit-timeout-secs", str(EXIT_TIMEOUT), log_path=tmp_path / "server.log")
    proc.start()
    client = grpcclient.InferenceServerClient(proc.url)
    try:
        tags = [1, 2, 3, 4]
        with ThreadPoolExecutor(max_workers=len(tags)) as pool:
            futures = [pool.submit(infer_slow, client, tags[0], 1500, 60)]
            wait_for(lambda: tags[0] in read_tags(log), what="the first request to execute")
            futures += [pool.submit(infer_slow, client, t, 300, 60) for t in tags[1:]]
            time.sleep(0.5)  # all of them are now in flight (one executing, three queued)
            proc.terminate()
            # the server stops reporting ready while it drains
            wait_for(lambda: http_status_or_none(proc, "/v2/health/ready") != 200, timeout=10, what="not ready")
            # new requests are refused, on a new connection and on the existing one
            fresh = grpcclient.InferenceServerClient(proc.url)
            try:
                with pytest.raises(InferenceServerException) as e:
                    fresh.infer("simple", simple_inputs(1)[0], client_timeout=5)
                # Never served. Usually UNAVAILABLE (listener closed); on a loaded machine the
                # connection can land in the backlog of a gRPC core that is shutting down and
                # is then never answered (deadline) or cancelled by the core's shutdown.
                assert status_of(e.value) in (
                    "StatusCode.UNAVAILABLE",
                    "StatusCode.DEADLINE_EXCEEDED",
                    "StatusCode.CANCELLED",
                ), e.value
            finally:
                fresh.close()
            with pytest.raises(InferenceServerException) as e:
                client.infer("simple", simple_inputs(2)[0], client_timeout=5)
            assert status_of(e.value) == "StatusCode.UNAVAILABLE", e.value
            # every in-flight request completes successfully
            assert [f.result(timeout=EXIT_TIMEOUT) for f in futures] == tags
        # the wait's timeout only catches a hang (exit-timeout plus slack), it measures nothing
        rc = proc.wait(timeout=EXIT_TIMEOUT + 30)
        assert rc == 0, proc.log()
        assert sorted(read_tags(log)) == tags
    finally:
        client.close()
        proc.stop()


@pytest.mark.timeout(90)
def test_sigterm_exit_timeout_bounds_the_drain(tmp_path):
    """A request far longer than --exit-timeout-secs (a hung backend) is abandoned; the
    process exits promptly rather than when the model finally returns, with status 1 and
    Triton's line, as Triton 2.51 does when its exit timeout expires."""
    log = tmp_path / "executed.log"
    repo = make_repo(tmp_path, log)
    proc = ServerProcess([repo], "--exit-timeout-secs", "1", log_path=tmp_path / "server.log")
    proc.start()
    client = grpcclient.InferenceServerClient(proc.url)
    try:
        with ThreadPoolExecutor(max_workers=1) as pool:
            f = pool.submit(infer_slow, client, 1, 120_000, 60)
            wait_for(lambda: 1 in read_tags(log), what="the request to execute")
            proc.terminate()
            with pytest.raises(InferenceServerException):
                f.result(timeout=30)
        assert proc.wait(timeout=30) == 1, proc.log()
        assert "failed to stop server: Internal - Exit timeout expired. Exiting immediately." in proc.log()
    finally:
        client.close()
        proc.stop()


# ----------------------------------------------------------------------------- HTTP health


@pytest.mark.timeout(30)
def test_http_health_endpoints(tserver):
    assert tserver.http_status("/v2/health/live") == 200
    assert tserver.http_status("/v2/health/ready") == 200
    assert tserver.http_status("/v2/models/simple/ready") == 200
    assert tserver.http_status("/v2/models/simple/versions/1/ready") == 200
    assert tserver.http_status("/v2/models/nope/ready") == 400
    assert tserver.http_status("/v2/models/simple/versions/3/ready") == 400
