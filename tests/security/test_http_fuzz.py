"""Fuzzing the HTTP frontend's parser and codec through a real socket.

Valid inference requests (JSON tensors, binary tensors, BYTES, shared-memory parameters) are
mutated at three levels -- the JSON document (values of other types, missing and extra keys,
huge and negative numbers, deep nesting), the bytes (flips, truncation, insertion) and the
headers (Inference-Header-Content-Length, Content-Encoding, compressed garbage) -- and sent
to one server over keep-alive connections. Every answer must be a well-formed HTTP response
with an expected status and, for errors, a JSON ``{"error": text}`` (500 only for the model's
own failure, e.g. simple_string parsing a mutated number -- never the frontend's "internal
error"); the server must stay ready and log no unexpected failure.

``FPGASERVE_HTTP_FUZZ_CASES`` sets the number of cases (default 400; the seed is fixed, so
a failure reproduces: ``FPGASERVE_HTTP_FUZZ_SEED`` picks another sequence).
"""

from __future__ import annotations

import copy
import gzip
import http.client
import json
import os
import random
import zlib

import numpy as np
import pytest

from support.server_process import CONFORMANCE_REPO, ServerProcess

pytestmark = pytest.mark.timeout(900)

CASES = int(os.environ.get("FPGASERVE_HTTP_FUZZ_CASES", "400"))
SEED = int(os.environ.get("FPGASERVE_HTTP_FUZZ_SEED", "12"))
ALLOWED = {200, 400, 403, 404, 405, 408, 413, 500, 501, 503}


def base_requests() -> list[tuple[str, dict, list[bytes]]]:
    """(model, JSON header, binary parts) of valid requests."""
    sixteen = list(range(16))
    ones = np.ones(16, dtype=np.int32).tobytes()
    strings = b"".join(len(s).to_bytes(4, "little") + s for s in (str(i).encode() for i in range(16)))
    return [
        (
            "simple",
            {
                "id": "a",
                "inputs": [
                    {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": sixteen},
                    {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [sixteen]},
                ],
                "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}, {"name": "OUTPUT1"}],
            },
            [],
        ),
        (
            "simple",
            {
                "parameters": {"binary_data_output": True, "priority": 1},
                "inputs": [
                    {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "parameters": {"binary_data_size": 64}},
                    {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "parameters": {"binary_data_size": 64}},
                ],
            },
            [ones, ones],
        ),
        (
            "simple_string",
            {
                "inputs": [
                    {"name": "INPUT0", "datatype": "BYTES", "shape": [1, 16], "data": [str(i) for i in range(16)]},
                    {
                        "name": "INPUT1",
                        "datatype": "BYTES",
                        "shape": [1, 16],
                        "parameters": {"binary_data_size": len(strings)},
                    },
                ],
                "outputs": [{"name": "OUTPUT0", "parameters": {"classification": 2}}],
            },
            [strings],
        ),
        (
            "simple",
            {
                "inputs": [
                    {
                        "name": "INPUT0",
                        "datatype": "INT32",
                        "shape": [1, 16],
                        "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 64},
                    },
                    {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": sixteen},
                ]
            },
            [],
        ),
    ]


ODD_VALUES = [
    None,
    True,
    -1,
    0,
    2**64,
    -(2**63) - 1,
    1e308,
    "",
    "x" * 300,
    "\u2028\x00",
    [],
    {},
    [[[]]],
    [1, "a", None],
    {"a": [1, {"b": 2}]},
]


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, (*prefix, i))


def _set(obj, path, value):
    for p in path[:-1]:
        obj = obj[p]
    if isinstance(obj, dict) or (isinstance(obj, list) and -len(obj) <= path[-1] < len(obj)):
        obj[path[-1]] = value


def _delete(obj, path):
    for p in path[:-1]:
        obj = obj[p]
    if isinstance(obj, dict):
        obj.pop(path[-1], None)
    elif isinstance(obj, list) and path[-1] < len(obj):
        del obj[path[-1]]


def mutate(rng: random.Random, model: str, header: dict, parts: list[bytes]):
    """(path, body, headers) of one mutated request."""
    header = copy.deepcopy(header)
    parts = list(parts)
    for _ in range(rng.randint(1, 3)):
        paths = [p for p in _paths(header) if p]
        kind = rng.random()
        if kind < 0.45 and paths:
            _set(header, rng.choice(paths), copy.deepcopy(rng.choice(ODD_VALUES)))
        elif kind < 0.6 and paths:
            _delete(header, rng.choice(paths))
        elif kind < 0.7:
            header[rng.choice(["extra", "parameters", "outputs", "inputs", "id"])] = copy.deepcopy(
                rng.choice(ODD_VALUES)
            )
        elif kind < 0.78:  # deep nesting, spliced into the text below (json.dumps would recurse)
            _set(header, rng.choice(paths) if paths else ("x",), f"__DEEP{rng.choice([10, 600, 5000])}__")
        elif kind < 0.86 and parts:
            i = rng.randrange(len(parts))
            parts[i] = parts[i][: rng.randrange(len(parts[i]) + 1)] + rng.randbytes(rng.randrange(8))
    text = json.dumps(header).encode()
    for depth in (10, 600, 5000):
        text = text.replace(f'"__DEEP{depth}__"'.encode(), b"[" * depth + b"]" * depth)
    body = text + b"".join(parts)
    headers = {"Content-Type": "application/json"}
    if parts or rng.random() < 0.2:
        length = len(text)
        choice = rng.random()
        if choice < 0.15:
            headers["Inference-Header-Content-Length"] = rng.choice(
                ["-1", "abc", "", str(2**40), "0", " 5", "1e3", "+-5", "9" * 50]
            )
        elif choice < 0.3:
            headers["Inference-Header-Content-Length"] = str(rng.randrange(len(body) + 2))
        else:
            headers["Inference-Header-Content-Length"] = str(length)
    if rng.random() < 0.15:  # byte-level damage
        b = bytearray(body)
        for _ in range(rng.randint(1, 8)):
            if b:
                b[rng.randrange(len(b))] = rng.randrange(256)
        body = bytes(b[: rng.randrange(len(b) + 1)] if rng.random() < 0.3 else b)
    coding = rng.random()
    if coding < 0.1:
        headers["Content-Encoding"] = "gzip"
        body = gzip.compress(body) if rng.random() < 0.7 else rng.randbytes(40)
    elif coding < 0.15:
        headers["Content-Encoding"] = "deflate"
        body = zlib.compress(body)[: rng.choice([None, 10])]
    elif coding < 0.17:
        headers["Content-Encoding"] = rng.choice(["br", "identity, gzip", "x" * 100])
    if rng.random() < 0.1:
        headers["Accept-Encoding"] = rng.choice(["gzip;q=0.1, deflate", "deflate;q=abc", "*", "gzip;q=0"])
    version = rng.choice(["", "", "", "/versions/1", "/versions/0", "/versions/999999999999999999999"])
    return f"/v2/models/{model}{version}/infer", body, headers


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("http_fuzz") / "fpgaserve.log"
    with ServerProcess([CONFORMANCE_REPO], "--http-max-input-size", "1000000", log_path=log) as s:
        yield s


def test_fuzzed_inference_requests(server):
    rng = random.Random(SEED)
    bases = base_requests()
    conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=60)
    statuses: dict[int, int] = {}
    try:
        for i in range(CASES):
            model, header, parts = rng.choice(bases)
            path, body, headers = mutate(rng, model, header, parts)
            try:
                conn.request("POST", path, body=body, headers=headers)
                r = conn.getresponse()
                raw = r.read()
            except (http.client.HTTPException, ConnectionError):
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=60)
                conn.request("POST", path, body=body, headers=headers)
                r = conn.getresponse()
                raw = r.read()
            statuses[r.status] = statuses.get(r.status, 0) + 1
            context = f"case {i} (seed {SEED}): {path} {headers} {body[:300]!r} -> {r.status} {raw[:300]!r}"
            assert r.status in ALLOWED, context
            if r.status >= 400 and r.getheader("Content-Type", "").startswith("application/json"):
                err = json.loads(raw)
                assert set(err) == {"error"} and isinstance(err["error"], str) and err["error"], context
                assert "Traceback" not in err["error"] and "object at 0x" not in err["error"], context
                assert not err["error"].startswith("internal error in"), context
            if r.getheader("Connection", "").lower() == "close":
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=60)
    finally:
        conn.close()
    assert server.http_up(), server.log()
    log = server.log()
    assert "failed unexpectedly" not in log and "Traceback" not in log, log
    assert statuses.get(400, 0) > 0, statuses
