"""System shared memory from a hostile client, against a real server.

* A region whose object the client shrinks (``ftruncate``) after registering it -- before a
  request, or over and over *while* requests use it -- fails those requests with
  INVALID_ARGUMENT and never brings the server down (it used to die of SIGBUS).
* A /dev/shm name that is a symlink (to a file the client wants to read or overwrite through
  an identity model), a FIFO (whose open would block), a directory: all refused, the target
  untouched.
* Region names and keys with NUL, newlines or path separators: INVALID_ARGUMENT (keys that
  shm_open itself would refuse keep Triton's INTERNAL text).
* ``--max-shm-regions``: registrations past the limit are refused with UNAVAILABLE, and
  thousands of register/unregister cycles leave the server's file descriptors where they
  were (read from /proc).
"""

from __future__ import annotations

import os
import threading
import uuid
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from support.server_process import CONFORMANCE_REPO, ServerProcess
from support.shm_regions import shm_regions

pytestmark = pytest.mark.timeout(120)

TENSOR = 64  # simple: INT32 [1,16]
A = np.arange(16, dtype=np.int32).reshape(1, 16)
B = np.full((1, 16), 3, dtype=np.int32)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("shm-abuse") / "fpgaserve.log"
    with ServerProcess([CONFORMANCE_REPO], "--allow-client-shm=true", "--max-shm-regions", "8", log_path=log) as proc:
        yield proc
        assert proc.proc.poll() is None, proc.log()


@pytest.fixture
def client(server):
    with grpcclient.InferenceServerClient(server.url) as c:
        c.unregister_system_shared_memory()
        yield c
        c.unregister_system_shared_memory()


@pytest.fixture
def segment():
    with shm_regions("abuse_", "fpgaserve_abuse_") as make:
        yield make


def error_of(fn) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as e:
        fn()
    return e.value


def infer_plain(client):
    inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"), grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(A)
    inputs[1].set_data_from_numpy(B)
    r = client.infer("simple", inputs)
    assert np.array_equal(r.as_numpy("OUTPUT0"), A + B)


def shm_request(region: str, inputs_in_shm: bool = True, outputs_in_shm: bool = False):
    inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"), grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
    if inputs_in_shm:
        inputs[0].set_shared_memory(region, TENSOR, 0)
        inputs[1].set_shared_memory(region, TENSOR, TENSOR)
    else:
        inputs[0].set_data_from_numpy(A)
        inputs[1].set_data_from_numpy(B)
    outputs = [grpcclient.InferRequestedOutput("OUTPUT0"), grpcclient.InferRequestedOutput("OUTPUT1")]
    if outputs_in_shm:
        outputs[0].set_shared_memory(region, TENSOR, 2 * TENSOR)
        outputs[1].set_shared_memory(region, TENSOR, 3 * TENSOR)
    return inputs, outputs


# ----------------------------------------------------------------------------- shrinking


@pytest.mark.parametrize("where", ["inputs", "outputs"])
def test_a_region_shrunk_after_registration_fails_the_request_only(client, segment, where):
    name, key, handle = segment(4 * TENSOR)
    shm.set_shared_memory_region(handle, [A, B])
    client.register_system_shared_memory(name, key, 4 * TENSOR)
    inputs, outputs = shm_request(name, inputs_in_shm=where == "inputs", outputs_in_shm=where == "outputs")
    client.infer("simple", inputs, outputs=outputs)  # fine while whole
    os.truncate(f"/dev/shm{key}", TENSOR // 2)
    err = error_of(lambda: client.infer("simple", inputs, outputs=outputs))
    assert err.status() == "StatusCode.INVALID_ARGUMENT"
    assert f"shared memory region '{name}' is smaller than it was registered" in err.message()
    infer_plain(client)
    # grown back, the same registration works again
    os.truncate(f"/dev/shm{key}", 4 * TENSOR)
    shm.set_shared_memory_region(handle, [A, B])
    r = client.infer("simple", inputs, outputs=outputs)
    if where == "inputs":
        assert np.array_equal(r.as_numpy("OUTPUT0"), A + B)
    else:
        out = shm.get_contents_as_numpy(handle, np.int32, [1, 16], offset=2 * TENSOR)
        assert np.array_equal(out, A + B)


def test_shrinking_and_growing_under_concurrent_requests_never_kills_the_server(server, client, segment):
    name, key, handle = segment(4 * TENSOR)
    shm.set_shared_memory_region(handle, [A, B])
    client.register_system_shared_memory(name, key, 4 * TENSOR)
    path = f"/dev/shm{key}"
    stop = threading.Event()
    flips = [0]

    def flip():
        fd = os.open(path, os.O_RDWR)
        try:
            while not stop.is_set():
                os.ftruncate(fd, 1)
                os.ftruncate(fd, 4 * TENSOR)
                flips[0] += 1
        finally:
            os.close(fd)

    flipper = threading.Thread(target=flip)
    flipper.start()
    outcomes = {"ok": 0, "shrunk": 0}
    try:
        c = grpcclient.InferenceServerClient(server.url)
        for i in range(300):
            inputs, outputs = shm_request(name, inputs_in_shm=True, outputs_in_shm=i % 2 == 1)
            try:
                c.infer("simple", inputs, outputs=outputs)
                outcomes["ok"] += 1
            except InferenceServerException as e:
                assert e.status() == "StatusCode.INVALID_ARGUMENT", e.message()
                assert "is smaller than it was registered" in e.message()
                outcomes["shrunk"] += 1
        c.close()
    finally:
        stop.set()
        flipper.join()
    assert sum(outcomes.values()) == 300
    assert flips[0] > 0
    assert server.proc.poll() is None
    infer_plain(client)


# ----------------------------------------------------------------------------- what may be opened


def test_a_symlink_in_dev_shm_is_refused_and_its_target_untouched(client, tmp_path):
    target = tmp_path / "secret"
    target.write_bytes(b"S" * 4 * TENSOR)
    key = f"/fpgaserve_abuse_link_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    os.symlink(target, f"/dev/shm{key}")
    try:
        err = error_of(lambda: client.register_system_shared_memory("link", key, 4 * TENSOR))
        assert err.status() == "StatusCode.INTERNAL"
        assert err.message() == f"Unable to open shared memory region: '{key}'"
        assert "link" not in [r.name for r in client.get_system_shared_memory_status().regions.values()]
        assert target.read_bytes() == b"S" * 4 * TENSOR
    finally:
        os.unlink(f"/dev/shm{key}")
    infer_plain(client)


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_objects_that_are_not_regular_files_are_refused(client, kind):
    key = f"/fpgaserve_abuse_{kind}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    path = f"/dev/shm{key}"
    os.mkfifo(path) if kind == "fifo" else os.mkdir(path)
    try:
        # a FIFO opened for real would block the server's thread forever
        err = error_of(lambda: client.register_system_shared_memory(kind, key, 16, client_timeout=30))
        assert err.status() == "StatusCode.INTERNAL"
        assert err.message() == f"Unable to open shared memory region: '{key}'"
    finally:
        os.rmdir(path) if kind == "directory" else os.unlink(path)
    infer_plain(client)


@pytest.mark.parametrize("name", ["with\x00nul", "with\nnewline", "with/slash", "with\\backslash", "", "esc\x1b[31m"])
def test_bad_region_names_are_invalid_arguments(client, segment, name):
    _, key, _ = segment(TENSOR)
    err = error_of(lambda: client.register_system_shared_memory(name, key, TENSOR))
    assert err.status() == "StatusCode.INVALID_ARGUMENT"
    assert err.message().startswith("invalid shared memory region name")
    assert "\n" not in err.message() and "\x00" not in err.message()


@pytest.mark.parametrize(
    "key, status",
    [
        ("/has\x00nul", "StatusCode.INVALID_ARGUMENT"),
        ("/has\nnewline", "StatusCode.INVALID_ARGUMENT"),
        ("/../../etc/passwd", "StatusCode.INTERNAL"),
        ("/a/b", "StatusCode.INTERNAL"),
        ("/..", "StatusCode.INTERNAL"),
        ("/", "StatusCode.INTERNAL"),
        ("/" + "x" * 300, "StatusCode.INTERNAL"),
    ],
)
def test_bad_keys(client, key, status):
    err = error_of(lambda: client.register_system_shared_memory("k", key, TENSOR))
    assert err.status() == status
    if status == "StatusCode.INTERNAL":
        assert err.message() == f"Unable to open shared memory region: '{key}'"
    infer_plain(client)


# ----------------------------------------------------------------------------- how many


def _fds(server) -> int:
    return len(os.listdir(f"/proc/{server.proc.pid}/fd"))


def test_region_count_is_bounded_and_fds_do_not_leak(server, client, segment):
    _name, key, _ = segment(TENSOR)
    for i in range(8):
        client.register_system_shared_memory(f"r{i}", key, TENSOR)
    err = error_of(lambda: client.register_system_shared_memory("r8", key, TENSOR))
    assert err.status() == "StatusCode.UNAVAILABLE"
    assert "8 regions are registered, the most this server allows (--max-shm-regions)" in err.message()
    client.unregister_system_shared_memory("r0")
    client.register_system_shared_memory("r8", key, TENSOR)
    client.unregister_system_shared_memory()
    before = _fds(server)
    for i in range(2000):
        client.register_system_shared_memory(f"cycle{i % 8}", key, TENSOR)
        if i % 8 == 7:
            client.unregister_system_shared_memory()
    client.unregister_system_shared_memory()
    assert _fds(server) <= before + 2  # (gRPC may open a descriptor of its own meanwhile)
    infer_plain(client)


def test_the_server_maps_no_client_object(server, client, segment):
    """No mapping of a client's object exists, so no ftruncate can fault the server."""
    name, key, _ = segment(4 * TENSOR)
    client.register_system_shared_memory(name, key, 4 * TENSOR)
    maps = Path(f"/proc/{server.proc.pid}/maps").read_text()
    assert key.lstrip("/") not in maps
