"""fpgaserve replicas behind a real gRPC load balancer: nginx and HAProxy (issue 10).

Two ``fpgaserve`` processes serve the same repositories (tests/models and bitstreams/, FACILE
in the bit-exact numpy emulation of its hls4ml firmware); nginx or HAProxy runs in front of
them with the production config from ``deploy/`` rendered with loopback ports
(``tests/support/lb_proxies.py``). Through the proxy, Triton's own clients must work as against one
server:

* unary infer, streaming infer (every request answered), gzip, a 32 MiB message each way,
  metadata, config, RepositoryIndex, statistics; results checked exactly (``simple``'s
  add/sub, FACILE against the in-process fixed-point emulation, bit for bit);
* requests are spread: each replica's ModelStatistics, read directly, grows, and the two
  deltas add up to exactly the requests sent;
* perf_analyzer (``--request-count``: the replicas' deltas add up to exactly what it sent)
  and the SonicTriton-like example;
* a replica SIGKILLed in the middle of a concurrent run: only requests that were on it
  fail, with UNAVAILABLE, never with a wrong answer, and nothing is replayed (see
  ``test_replica_killed_mid_run`` for the bound and its reasoning).

No assertion is about time: waits are for events or counts, with generous deadlines that
only turn a hang into a failure. The Envoy config (Envoy is not packaged here) is checked
for the SuperSONIC properties it promises, not run.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from support.debian import require_packages
from support.lb_proxies import ENVOY_YAML, PROXIES, ProxyProcess, upstream_of
from support.server_process import BUNDLED_REPO, CONFORMANCE_REPO, ROOT, ServerProcess
from support.waiting import wait_until

pytestmark = [pytest.mark.timeout(600)]

EXAMPLES = ROOT / "client_examples"
REPLICA_ARGS = ("--fpga-mode", "numpy")  # FACILE bit-exact with csim, no compilation at start
UNAVAILABLE = "StatusCode.UNAVAILABLE"


# ----------------------------------------------------------------------------- fixtures


def start_replicas(repositories, workdir: Path, count: int = 2, envs=None) -> list[ServerProcess]:
    servers = []
    try:
        for i in range(count):
            env = dict(os.environ, **(envs[i] if envs else {}))
            servers.append(
                ServerProcess(repositories, *REPLICA_ARGS, log_path=workdir / f"replica-{i}.log", env=env).start()
            )
    except BaseException:
        for s in servers:
            s.stop()
        raise
    return servers


@pytest.fixture(scope="module")
def replicas(tmp_path_factory):
    servers = start_replicas([CONFORMANCE_REPO, BUNDLED_REPO], tmp_path_factory.mktemp("replicas"))
    yield servers
    codes = [s.stop() for s in servers]
    assert codes == [0, 0], f"replicas exited with {codes}: {[s.log() for s in servers]}"


@pytest.fixture(scope="module", params=PROXIES)
def proxy(request, replicas, tmp_path_factory):
    require_packages(request.param)
    p = ProxyProcess(request.param, [upstream_of(s) for s in replicas], tmp_path_factory.mktemp(request.param))
    p.start()
    yield p
    rc = p.stop()
    assert rc == 0, f"{p.kind} exited with {rc}: {p.log()}"


@pytest.fixture
def client(proxy):
    with grpcclient.InferenceServerClient(proxy.url) as c:
        yield c


@pytest.fixture(scope="module")
def facile_emulation():
    """FACILE as the replicas compute it (--fpga-mode numpy), in process: exact expectations."""
    from fpgaserve.backends.hls4ml.emulator import FixedPointModel
    from fpgaserve.backends.hls4ml.project import Hls4mlProject

    model = FixedPointModel(Hls4mlProject.load(BUNDLED_REPO / "facile" / "1"))
    return lambda x: np.asarray(model.predict(x), dtype=np.float32).reshape(x.shape[0], 1)


# ----------------------------------------------------------------------------- helpers


def simple_inputs(rng, batch: int = 1):
    a = rng.integers(-1000, 1000, (batch, 16), dtype=np.int32)
    b = rng.integers(-1000, 1000, (batch, 16), dtype=np.int32)
    inputs = []
    for name, arr in (("INPUT0", a), ("INPUT1", b)):
        t = grpcclient.InferInput(name, list(arr.shape), "INT32")
        t.set_data_from_numpy(arr)
        inputs.append(t)
    return inputs, a, b


def check_simple(result, a, b) -> None:
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def stats(url: str, model: str) -> dict:
    """One replica's ModelStatistics for ``model``, read directly (not through the proxy)."""
    c = grpcclient.InferenceServerClient(url)
    try:
        s = c.get_inference_statistics(model).model_stats
    finally:
        c.close()
    assert len(s) == 1, s
    st = s[0].inference_stats
    return {
        "success": st.success.count,
        "fail": st.fail.count,
        "inference_count": s[0].inference_count,
        "execution_count": s[0].execution_count,
    }


def settled_stats(url: str, model: str, timeout: float = 30.0) -> dict:
    """Statistics once they stop changing (three equal reads): a response can reach the
    client just before the server counts it."""
    last, same, deadline = stats(url, model), 0, time.monotonic() + timeout
    while same < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
        now = stats(url, model)
        same, last = (same + 1 if now == last else 0), now
    return last


def all_stats(servers, model: str) -> list[dict]:
    return [settled_stats(s.url, model) for s in servers]


def deltas(after: list[dict], before: list[dict], key: str) -> list[int]:
    return [a[key] - b[key] for a, b in zip(after, before)]


wait_for = functools.partial(wait_until, interval=0.01)  # react quickly to a replica's state


# ----------------------------------------------------------------------------- (a) Triton's client through the proxy


def test_unary_infer(client):
    rng = np.random.default_rng(1)
    for batch in (1, 8):
        inputs, a, b = simple_inputs(rng, batch)
        check_simple(client.infer("simple", inputs, request_id=f"unary-{batch}"), a, b)


def test_facile_event_bit_exact(client, facile_emulation):
    """A SonicTriton-sized event (16,000 rows x 47 FP32, ~3 MB: above nginx's default 1 MiB
    body limit and HAProxy's 16 KiB buffers), bit for bit the firmware emulation's answer."""
    x = np.random.default_rng(2).standard_normal((16000, 47), dtype=np.float32)
    inp = grpcclient.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    y = client.infer("facile", [inp]).as_numpy("output/BiasAdd")
    np.testing.assert_array_equal(y, facile_emulation(x))


def test_gzip_compression(client, facile_emulation):
    """grpc-encoding gzip passes through the proxy both ways (per-message compression)."""
    rng = np.random.default_rng(3)
    inputs, a, b = simple_inputs(rng, 8)
    check_simple(client.infer("simple", inputs, compression_algorithm="gzip"), a, b)
    x = rng.standard_normal((4000, 47), dtype=np.float32)
    inp = grpcclient.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    y = client.infer("facile", [inp], compression_algorithm="gzip").as_numpy("output/BiasAdd")
    np.testing.assert_array_equal(y, facile_emulation(x))


def test_large_message_each_way(client):
    """32 MiB in one request and back (simple_identity echoes BYTES): Triton clients send
    messages up to INT32_MAX bytes, so the proxy must not cap bodies or buffer them whole."""
    payload = bytes(np.random.default_rng(4).integers(0, 256, 32 << 20, dtype=np.uint8))
    data = np.array([[payload]], dtype=np.object_)
    inp = grpcclient.InferInput("INPUT0", [1, 1], "BYTES")
    inp.set_data_from_numpy(data)
    out = client.infer("simple_identity", [inp]).as_numpy("OUTPUT0")
    assert out.shape == (1, 1) and out[0, 0] == payload


def test_streaming_infer(proxy):
    """ModelStreamInfer through the proxy: one long HTTP/2 stream; every request answered
    once, with its own id and the right values."""
    n = 64
    rng = np.random.default_rng(5)
    sent: dict[str, tuple] = {}
    got: dict[str, object] = {}
    errors: list = []
    lock = threading.Lock()
    everything = threading.Event()

    def callback(result, error):
        with lock:
            if error is not None:
                errors.append(error)
            else:
                rid = result.get_response().id
                assert rid not in got, f"request {rid} answered twice"
                got[rid] = result
            if len(got) + len(errors) >= n:
                everything.set()

    c = grpcclient.InferenceServerClient(proxy.url)
    try:
        c.start_stream(callback=callback)
        for i in range(n):
            inputs, a, b = simple_inputs(rng, 1 + i % 8)
            sent[str(i)] = (a, b)
            c.async_stream_infer("simple", inputs, request_id=str(i))
        assert everything.wait(120), f"{len(got)} of {n} streamed requests answered"
        c.stop_stream()
    finally:
        c.close()
    assert not errors, errors
    assert sorted(got) == sorted(sent)
    for rid, (a, b) in sent.items():
        check_simple(got[rid], a, b)


def test_metadata_config_index_statistics(client):
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("facile") and client.is_model_ready("simple")
    meta = client.get_server_metadata()
    assert meta.name == "triton" and "statistics" in meta.extensions
    m = client.get_model_metadata("facile")
    assert [(t.name, t.datatype, list(t.shape)) for t in m.inputs] == [("input", "FP32", [-1, 47])]
    assert [(t.name, t.datatype, list(t.shape)) for t in m.outputs] == [("output/BiasAdd", "FP32", [-1, 1])]
    config = client.get_model_config("facile").config
    assert config.name == "facile" and config.max_batch_size == 16384 and config.backend == "hls4ml"
    index = {m.name: m.state for m in client.get_model_repository_index().models}
    assert index.get("facile") == "READY" and index.get("simple") == "READY", index
    s = client.get_inference_statistics("simple").model_stats
    assert len(s) == 1 and s[0].name == "simple" and s[0].version == "1"


def test_errors_keep_their_status(client):
    """A replica's own error passes through unchanged (not turned into a proxy error)."""
    with pytest.raises(InferenceServerException) as e:
        client.get_model_metadata("no_such_model")
    assert e.value.status() == "StatusCode.NOT_FOUND"
    assert "no_such_model" in e.value.message()


# ----------------------------------------------------------------------------- (b) spreading


def test_requests_spread_over_both_replicas(client, replicas):
    n = 40
    before = all_stats(replicas, "simple")
    rng = np.random.default_rng(6)
    for _ in range(n):
        inputs, a, b = simple_inputs(rng)
        check_simple(client.infer("simple", inputs), a, b)
    after = all_stats(replicas, "simple")
    d = deltas(after, before, "success")
    assert sum(d) == n, f"successes per replica {d}: not the {n} requests sent"
    assert all(k > 0 for k in d), f"successes per replica {d}: the proxy did not spread the requests"
    assert deltas(after, before, "fail") == [0, 0]


# ----------------------------------------------------------------------------- (c) perf_analyzer


PA_RUNS = [
    # (id, model, args, rows per request)
    ("simple-c4", "simple", ["--concurrency-range", "4", "--request-count", "400"], 1),
    ("facile-b16000-c2", "facile", ["-b", "16000", "--concurrency-range", "2", "--request-count", "20"], 16000),
]


@pytest.mark.slow
@pytest.mark.parametrize("name, model, args, rows", PA_RUNS, ids=[r[0] for r in PA_RUNS])
def test_perf_analyzer_through_proxy(perf_analyzer, proxy, replicas, tmp_path, name, model, args, rows):
    """perf_analyzer -i grpc -u PROXY: exit 0, a throughput, and the replicas together
    executed exactly the requests it sent, both of them some.

    ``-x 1`` is needed behind a balancer: PA reads ModelStatistics before and after each
    window, and each call lands on either replica. Without an explicit version PA looks for
    the version whose queue count grew between the two snapshots and, when they came from
    different replicas and the second is the smaller, exits 99 with "failed to find the
    requested model version" (seen about one run in eight). With ``-x 1`` it always runs;
    its "Server:" block is then one replica's numbers, or a difference of two replicas'
    counters (even wrapped around below zero): ignore it behind a proxy."""
    requests = int(args[args.index("--request-count") + 1])
    before = all_stats(replicas, model)
    cmd = [perf_analyzer, "-m", model, "-x", "1", "-u", proxy.url, "-i", "grpc", *args, "-f", str(tmp_path / "pa.csv")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    info = f"{' '.join(cmd)}\nrc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}"
    assert proc.returncode == 0, info
    throughput = [float(v) for v in re.findall(r"Throughput: ([0-9.]+) infer/sec", proc.stdout)]
    assert throughput and all(t > 0 for t in throughput), info
    assert (tmp_path / "pa.csv").read_text().count("\n") >= 2, info
    after = all_stats(replicas, model)
    d = deltas(after, before, "success")
    assert sum(d) == requests, f"{d}\n{info}"
    assert all(k > 0 for k in d), f"one replica got nothing: {d}\n{info}"
    assert sum(deltas(after, before, "inference_count")) == requests * rows
    assert deltas(after, before, "fail") == [0, 0]


# ----------------------------------------------------------------------------- (d) SonicTriton-like client


def test_sonic_like_through_proxy(proxy, replicas):
    """client_examples/sonic_like.py checks every event against the float reference. Its
    exact-statistics check reads ONE server (before and after could land on different
    replicas here), so it runs with --no-stats-check and the same check is done here over
    both replicas: inference_count grew by the rows it sent, success by the events."""
    before = all_stats(replicas, "facile")
    proc = subprocess.run(
        [
            sys.executable,
            str(EXAMPLES / "sonic_like.py"),
            "-u",
            proxy.url,
            "--events",
            "4",
            "--no-stats-check",
            "--compression",
            "gzip",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "PASS: sonic_like" in proc.stdout.splitlines(), out
    m = re.search(r"^(\d+) events, (\d+) channels in", proc.stdout, re.M)
    assert m, out
    events, rows = int(m.group(1)), int(m.group(2))
    after = all_stats(replicas, "facile")
    assert sum(deltas(after, before, "success")) == events == 4, out
    assert sum(deltas(after, before, "inference_count")) == rows, out


# ----------------------------------------------------------------------------- (e) a replica dies mid-run

GATE_CONFIG = """name: "gate"
backend: "numpy"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

GATE_MODEL = '''
import os
import time

import numpy as np


class Model:
    """OUTPUT0 = 3 * INPUT0 + 7. While the file named by $LB_TEST_GATE exists, execute()
    holds its request (and creates "<gate>.entered", so the test knows one is held)."""

    def initialize(self, config, model_dir):
        self.gate = os.environ.get("LB_TEST_GATE", "")

    def execute(self, inputs):
        if self.gate and os.path.exists(self.gate):
            open(self.gate + ".entered", "w").close()
            while os.path.exists(self.gate):
                time.sleep(0.005)
        return {"OUTPUT0": (inputs["INPUT0"] * 3 + 7).astype(np.int32)}
'''


def metric(server: ServerProcess, name: str, model: str) -> float:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=5) as r:
        text = r.read().decode()
    m = re.search(rf'^{name}{{[^}}]*model="{model}"[^}}]*}} ([0-9.e+-]+)$', text, re.M)
    assert m, f"no {name} for {model} in /metrics"
    return float(m.group(1))


class Load:
    """``workers`` threads, each with its own client, sending ``gate`` requests through the
    proxy back to back until stopped; every outcome is recorded with the phase in which the
    request started."""

    def __init__(self, url: str, workers: int):
        self.url = url
        self.workers = workers
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.phase = 0
        self.started = 0
        self.records: list[dict] = []  # {seq, phase, outcome: ok|wrong|error, status, message}
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(workers)]

    def _run(self, index: int) -> None:
        rng = np.random.default_rng(100 + index)
        c = grpcclient.InferenceServerClient(self.url)
        try:
            while not self.stop.is_set():
                with self.lock:
                    seq, phase = self.started, self.phase
                    self.started += 1
                x = rng.integers(-10_000, 10_000, (1, 16), dtype=np.int32)
                inp = grpcclient.InferInput("INPUT0", [1, 16], "INT32")
                inp.set_data_from_numpy(x)
                rec = {"seq": seq, "phase": phase, "worker": index}
                try:
                    y = c.infer("gate", [inp]).as_numpy("OUTPUT0")
                    rec["outcome"] = "ok" if np.array_equal(y, x * 3 + 7) else "wrong"
                except InferenceServerException as e:
                    rec.update(outcome="error", status=e.status(), message=e.message())
                with self.changed:
                    self.records.append(rec)
                    self.changed.notify_all()
        finally:
            c.close()

    def count(self, outcome: str, phase: int | None = None) -> int:
        with self.lock:
            return sum(1 for r in self.records if r["outcome"] == outcome and (phase is None or r["phase"] == phase))

    def set_phase(self, phase: int) -> int:
        """Requests started from now on belong to ``phase``; returns how many started before."""
        with self.lock:
            self.phase = phase
            return self.started

    def start(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def join(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(120)
        assert not any(t.is_alive() for t in self.threads), "a worker is stuck in a request"


@pytest.mark.slow
@pytest.mark.parametrize("kind", PROXIES)
def test_replica_killed_mid_run(kind, tmp_path):
    """SIGKILL one of two replicas while ``C`` = 8 clients keep requests in flight.

    To be sure requests are in flight on the victim B when it dies, B's ``gate`` model holds
    the request it is executing once the test creates B's gate file; the test waits until B
    reports a held request (event), reads B's queue length P, and kills B. At that moment at
    least P + 1 requests are on B (the held one and P queued behind it: none can complete).

    Expected, and asserted:

    * no wrong answer, ever; every failure is UNAVAILABLE: nginx answers 502, which the
      deploy config maps to grpc-status 14; HAProxy resets the client's stream with
      RST_STREAM(REFUSED_STREAM), which gRPC reports as UNAVAILABLE "Stream removed";
    * at least P + 1 failures: the requests that were on B are failed, not replayed on A
      (a replay, by the proxy or by the gRPC client, would have made them successes);
    * a bounded number of failures. A request fails only if the proxy put it on a
      connection to B that was open when B died: a new connection to B is refused, and a
      refused connection is retried on A by both configs (nginx: `grpc_next_upstream error
      timeout`; HAProxy: `retry-on conn-failure` + `option redispatch 1`), while a request
      that reached B is never resent (nginx: a POST without `non_idempotent`; HAProxy:
      nothing but conn-failure). Each such request is one of the C requests the clients
      have outstanding at that moment, so the bound is in failures per client:
      - nginx: at most one per client, so at most C in all. nginx carries one request per
        upstream connection, and the first failure marks B failed (max_fails=1, state
        shared by the workers through `zone`) before nginx answers it; from then on nginx
        sends nothing to B, so a client that failed never fails again.
      - HAProxy: at most two per client, 2C in all. HAProxy resets the streams that were
        on B with REFUSED_STREAM while its HTTP/2 mux tears B's connection down, and a
        client that resends at once can be put on that same dying connection and refused
        again (seen under CPU load: 3 of 8 clients failed twice, 7 failures in all); the
        next request opens a new connection, which is refused: HAProxy marks B DOWN
        (observe, on-error mark-down; it does not count the stream resets) and redispatches
        it to A. Without load it is usually just the requests that were on B.
    * once the proxy has seen the failure (nginx: the first failure a client receives;
      nginx marked B failed, max_fails=1, before answering it; HAProxy: its stats page
      shows B DOWN), every request started afterwards succeeds, on A;
    * exact accounting: A's successes + B's successes (read before the kill; B completes
      nothing once a request is held) == the clients' successes, and A failed nothing; so
      no failed request was executed anywhere and no request was executed twice.
    """
    require_packages(kind)
    workers = 8
    repo = tmp_path / "repo"
    (repo / "gate" / "1").mkdir(parents=True)
    (repo / "gate" / "config.pbtxt").write_text(GATE_CONFIG)
    (repo / "gate" / "1" / "model.py").write_text(GATE_MODEL)
    gate = tmp_path / "gate-B"
    a, b = start_replicas([repo], tmp_path, envs=[{}, {"LB_TEST_GATE": str(gate)}])
    proxy = ProxyProcess(kind, [upstream_of(a), upstream_of(b)], tmp_path / kind)
    load = None
    try:
        proxy.start()
        a0, b0 = stats(a.url, "gate"), stats(b.url, "gate")
        load = Load(proxy.url, workers).start()

        # phase 0: both replicas serve
        wait_for(
            lambda: (
                load.count("ok") >= 10 * workers
                and stats(b.url, "gate")["success"] > b0["success"]
                and stats(a.url, "gate")["success"] > a0["success"]
            ),
            "both replicas to serve requests",
            interval=0.05,
        )
        gate.touch()
        wait_for(lambda: Path(f"{gate}.entered").exists(), "a request held on replica B")
        held_on_b = 1 + int(metric(b, "nv_inference_pending_request_count", "gate"))
        b_at_kill = stats(b.url, "gate")  # final: B completes nothing more

        # phase 1: B dies
        started_before_kill = load.set_phase(1)
        b.proc.kill()
        b.proc.wait(30)

        # phase 2: the proxy has seen the failure
        if kind == "nginx":
            wait_for(lambda: load.count("error") > 0, "the first failed request")
        else:
            wait_for(lambda: proxy.server_states().get("replica-1", "").startswith("DOWN"), "HAProxy to mark B DOWN")
        load.set_phase(2)
        wait_for(lambda: load.count("ok", phase=2) >= 50 * workers, "successes after the failure was seen")
        load.join()

        records = load.records
        errors = [r for r in records if r["outcome"] == "error"]
        summary = (
            f"{len(records)} requests ({started_before_kill} started before the kill), {len(errors)} failed, "
            f"{held_on_b} known to be on B at the kill; failures: "
            + "; ".join(
                f"#{r['seq']} (worker {r['worker']}, phase {r['phase']}): {r['status']} {r['message']}"
                for r in errors[:12]
            )
        )
        print(f"{kind}: {summary}")
        assert load.count("wrong") == 0, summary
        assert all(r["status"] == UNAVAILABLE for r in errors), summary
        per_client = Counter(r["worker"] for r in errors)
        assert held_on_b <= len(errors), summary
        if kind == "nginx":
            assert max(per_client.values()) == 1 and len(errors) <= workers, summary
        else:
            assert max(per_client.values()) <= 2 and len(errors) <= 2 * workers, summary
        assert not [r for r in errors if r["phase"] == 2], summary
        assert load.count("ok", phase=2) >= 50 * workers

        # after the run: sequential requests all succeed, on A
        c = grpcclient.InferenceServerClient(proxy.url)
        try:
            for i in range(20):
                x = np.full((1, 16), i, dtype=np.int32)
                inp = grpcclient.InferInput("INPUT0", [1, 16], "INT32")
                inp.set_data_from_numpy(x)
                np.testing.assert_array_equal(c.infer("gate", [inp]).as_numpy("OUTPUT0"), x * 3 + 7)
        finally:
            c.close()
        a_end = settled_stats(a.url, "gate")
        ok = load.count("ok") + 20
        assert a_end["fail"] == a0["fail"], (a_end, a0)
        assert (a_end["success"] - a0["success"]) + (b_at_kill["success"] - b0["success"]) == ok, (
            f"A {a0} -> {a_end}, B {b0} -> {b_at_kill}: the replicas executed a different number of "
            f"requests than the {ok} that succeeded\n{summary}"
        )
    except BaseException:
        print(proxy.log())
        raise
    finally:
        if load is not None:
            load.stop.set()
        proxy.stop()
        a.stop()
        b.stop()


# ----------------------------------------------------------------------------- Envoy (not run)


def test_envoy_config_has_the_supersonic_shape():
    """deploy/envoy/fpgaserve-grpc.yaml, read as data: HTTP/2 upstream, LEAST_REQUEST,
    health checks on /v2/health/ready at each replica's HTTP port, route timeout 0, and
    retries only for requests that cannot have reached a replica; statistics where SuperSONIC's
    Prometheus job scrapes them (port 9901, not loopback) under the listener prefix its dashboard
    selects (ingress_grpc)."""
    import yaml

    config = yaml.safe_load(ENVOY_YAML.read_text())
    assert config["admin"]["address"]["socket_address"] == {"address": "0.0.0.0", "port_value": 9901}
    (listener,) = config["static_resources"]["listeners"]
    (hcm,) = listener["filter_chains"][0]["filters"]
    assert hcm["name"] == "envoy.filters.network.http_connection_manager"
    assert hcm["typed_config"]["stat_prefix"] == "ingress_grpc"
    routes = hcm["typed_config"]["route_config"]["virtual_hosts"][0]["routes"]
    (route,) = routes
    action = route["route"]
    assert action["cluster"] == "fpgaserve_replicas"
    assert action["timeout"] == "0s"
    retry_on = set(action["retry_policy"]["retry_on"].split(","))
    assert retry_on == {"connect-failure", "refused-stream"}, retry_on  # never 5xx/reset/unavailable
    (cluster,) = config["static_resources"]["clusters"]
    assert cluster["name"] == "fpgaserve_replicas"
    assert cluster["lb_policy"] == "LEAST_REQUEST"
    options = cluster["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
    assert "http2_protocol_options" in options["explicit_http_config"]
    (check,) = cluster["health_checks"]
    assert check["http_health_check"]["path"] == "/v2/health/ready"
    assert check["http_health_check"]["codec_client_type"] == "HTTP1"
    endpoints = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"]
    assert len(endpoints) >= 2
    for e in endpoints:
        assert e["endpoint"]["address"]["socket_address"]["port_value"] == 8001
        assert e["endpoint"]["health_check_config"]["port_value"] == 8000
