"""What model code in an instance process can do to the server: no more than fail its batch.

Each test hosts a numpy-backend model (or a Python-backend one) in a real instance process
(``fpgaserve.backends.hosting``), no server around it, and has the model's own code do what a
hostile or broken model would: send the server a pickle that would run a command, name a
file in a tensor reference, announce a frame of a terabyte, shadow the worker's imports with
its own ``queue.py``, die before the server's first message, leave a process of its own
behind in a session of its own. Each time the batch (or the load) fails with INTERNAL and a
text that says what happened, and the next batch is served by a fresh process. Also: text
outputs of mixed items as Triton writes them, and a frontend's arena unmapped by the instance
processes when it goes. A second or two each (an instance process starts in ~0.3 s).
"""

from __future__ import annotations

import mmap
import os
import signal
import textwrap
from pathlib import Path

import numpy as np
import pytest

from fpgaserve.backends.base import BackendError
from fpgaserve.backends.hosting import hosted, register_shared, unregister_shared
from fpgaserve.backends.numpy_backend import NumpyBackend
from fpgaserve.backends.python.backend import PythonBackend
from fpgaserve.server.errors import InferenceError, Status

HostedNumpy = hosted(NumpyBackend)


def _config(name: str, outputs: str = "TYPE_INT64") -> dict:
    return {
        "name": name,
        "backend": "numpy",
        "max_batch_size": 0,
        "input": [{"name": "X", "data_type": "TYPE_INT64", "dims": [-1]}],
        "output": [{"name": "Y", "data_type": outputs, "dims": [-1]}],
    }


def _version(tmp_path: Path, code: str, name: str = "m") -> str:
    folder = tmp_path / name / "1"
    folder.mkdir(parents=True)
    (folder / "model.py").write_text(textwrap.dedent(code))
    return str(folder)


def _children() -> set[int]:
    pid = os.getpid()
    found = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found |= {int(p) for p in f.read().split()}
        except OSError:
            pass
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


X = np.arange(4, dtype=np.int64)

# MODE (the first element of X) 0: Y = X and the process id; otherwise the hostile act it names
HOSTILE = """
import os, pickle, struct
import numpy as np
from fpgaserve.backends.hosting import current

MARKER = {marker!r}

class Evil:
    def __reduce__(self):
        return (os.system, ("touch " + MARKER,))

class Model:
    def execute(self, inputs):
        mode = int(inputs["X"][0])
        conn = current().channel.conn
        if mode == 1:  # a pickle that would run a command in whoever unpickles it
            conn.send_bytes(pickle.dumps(("done", [("Y", Evil())])))
        elif mode == 2:  # a tensor in a file the server never handed out
            current().send(("done", [("Y", ("<i8", (4,), ("shared", 1, "/etc/hostname", 0)))]))
        elif mode == 3:  # a block outside its segment
            current().send(("done", [("Y", ("<i8", (4,), (1 << 40, 32)))]))
        elif mode == 4:  # an object array: its bytes would be read as pointers
            current().send(("done", [("Y", ("|O8", (4,), b"\\x00" * 32))]))
        elif mode == 5:  # a frame of a terabyte (nothing follows)
            os.write(conn.fileno(), struct.pack("!i", -1) + struct.pack("!Q", 1 << 40))
        elif mode == 6:  # a message of no kind the protocol has
            current().send(("exec", [("Y", ("<i8", (4,), b"\\x00" * 32))]))
        else:
            return {{"Y": inputs["X"].copy(), "PID": np.array([os.getpid()])}}
        import time
        time.sleep(60)  # (the server kills the process long before)
"""


@pytest.mark.parametrize(
    "mode,why",
    [
        (1, "unknown tag"),
        (2, "a tensor reference names a shared mapping (only the server names those)"),
        (3, "a block of 32 bytes at 1099511627776 lies outside the"),
        (4, "a tensor of data type '|O8'"),
        (5, "a frame of 1099511627776 bytes (at most"),
        (6, "a message of unknown kind 'exec'"),
    ],
    ids=["pickle", "foreign-path", "outside-segment", "object-dtype", "huge-frame", "unknown-kind"],
)
def test_a_hostile_reply_fails_its_batch_and_runs_nothing(tmp_path, mode, why):
    marker = tmp_path / "unpickled"
    backend = HostedNumpy(_config("hostile"), _version(tmp_path, HOSTILE.format(marker=str(marker))), 0)
    try:
        first = backend.execute({"X": X})["PID"][0]
        with pytest.raises(InferenceError) as failed:
            backend.execute({"X": np.array([mode, 0, 0, 0], dtype=np.int64)})
        assert failed.value.status is Status.INTERNAL
        text = failed.value.message
        assert text.startswith(
            "the process of instance 'hostile_0_0' of model 'hostile' version 1 sent a malformed message ("
        ), text
        assert why in text and text.endswith(") while executing the batch; the instance restarts"), text
        assert not marker.exists()  # the pickle was never unpickled
        assert not _alive(int(first))  # the process that broke the protocol is gone
        again = backend.execute({"X": X})  # a fresh process serves the next batch
        assert again["Y"].tolist() == X.tolist() and again["PID"][0] != first
    finally:
        backend.close()


FOREIGN_SEGMENT = """
from fpgaserve.backends.hosting import current

class Model:
    def __init__(self):  # answers the load before the worker does, with a file of the host
        current().send(("loaded", "/etc/hostname", None))

    def execute(self, inputs):
        return {"Y": inputs["X"]}
"""


def test_a_segment_the_instance_names_must_be_its_own_sealed_memory_file(tmp_path):
    with pytest.raises(BackendError) as failed:
        HostedNumpy(_config("foreign"), _version(tmp_path, FOREIGN_SEGMENT), 0)
    assert str(failed.value) == (
        "the process of instance 'foreign_0_0' of model 'foreign' version 1 sent a malformed message (its "
        "segment's path '/etc/hostname' is not a descriptor of its own process) while loading"
    )


MIXED_TEXT = """
import numpy as np

class Model:
    def execute(self, inputs):
        return {"Y": np.array([7, 3.5, "y", b"x", None, True], dtype=object)}
"""


def test_text_outputs_of_mixed_items_are_written_as_triton_writes_them(tmp_path):
    backend = HostedNumpy(_config("mixed", "TYPE_STRING"), _version(tmp_path, MIXED_TEXT), 0)
    try:
        # str(item) in UTF-8 for every item that is not bytes (bytes(7) would be seven zero bytes)
        assert backend.execute({"X": X})["Y"].tolist() == [b"7", b"3.5", b"y", b"x", b"None", b"True"]
    finally:
        backend.close()


SHADOWED = """
import queue, json
import numpy as np

class Model:
    def execute(self, inputs):
        return {"Y": np.array([queue.__file__, json.__file__, ""], dtype=object)}
"""

SHADOWED_PYTHON = """
import queue, json
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        import helper
        files = np.array([queue.__file__, json.__file__, helper.NAME], dtype=object)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", files)]) for _ in requests]
"""


def _shadowing_folder(version: str) -> None:
    for name in ("queue", "numpy", "struct", "json", "pickle", "threading"):
        Path(version, f"{name}.py").write_text(f"raise ImportError('the model folder shadowed {name}')\n")
    Path(version, "fpgaserve").mkdir()
    Path(version, "fpgaserve", "__init__.py").write_text("raise ImportError('the model folder shadowed fpgaserve')\n")
    Path(version, "helper.py").write_text("NAME = 'helper of the model'\n")


@pytest.mark.parametrize("backend_class", [HostedNumpy, PythonBackend], ids=["numpy", "python"])
def test_the_model_folder_does_not_shadow_the_workers_imports(tmp_path, backend_class):
    code = SHADOWED if backend_class is HostedNumpy else SHADOWED_PYTHON
    version = _version(tmp_path, code, "shadowed")
    _shadowing_folder(version)
    config = _config("shadowed", "TYPE_STRING") | {"backend": "numpy" if backend_class is HostedNumpy else "python"}
    backend = backend_class(config, version, 0)
    try:
        if backend_class is HostedNumpy:
            files = backend.execute({"X": X})["Y"].tolist()
        else:
            from fpgaserve.backends.base import BackendRequest

            files = backend.execute_requests([BackendRequest({"X": X}, ("Y",), {}, "", 0, 0)])[0]["Y"].tolist()
        assert not files[0].decode().startswith(version) and files[0].decode().endswith("queue.py")
        assert not files[1].decode().startswith(version)
        if backend_class is PythonBackend:  # (as Triton's stub: the version folder comes last on sys.path)
            assert files[2] == b"helper of the model"
    finally:
        backend.close()


class _DiesAtOnce(HostedNumpy):  # type: ignore[misc, valid-type]
    """An instance whose interpreter cannot start, with a load message larger than the
    socket's buffer: the server's first send fails (EPIPE) once the process is gone."""

    def child_env(self) -> dict[str, str]:
        return dict(os.environ, PYTHONHOME="/nonexistent-python-home")

    def load_args(self) -> tuple:
        config = dict(self.config, padding="x" * (8 << 20))
        return (config, self.version_dir, self.instance_index, self.backend_config)


def test_a_failed_first_send_closes_every_descriptor_and_reaps_the_child(tmp_path):
    version = _version(tmp_path, MIXED_TEXT, "dies")
    before_fds, before_children = set(os.listdir("/proc/self/fd")), _children()
    with pytest.raises(BackendError) as failed:
        _DiesAtOnce(_config("dies"), version, 0)
    assert str(failed.value).startswith(
        "the process of instance 'dies_0_0' of model 'dies' version 1 exited with status "
    )
    assert str(failed.value).endswith(" while loading")
    assert set(os.listdir("/proc/self/fd")) <= before_fds  # no channel, lifeline or segment left open
    assert _children() <= before_children  # reaped: no zombie left


LEAVES_A_SESSION = """
import subprocess, time

class Model:
    def __init__(self):
        # as a C-simulation compile's g++ runs: in a session of its own
        child = subprocess.Popen(["sleep", "600"], start_new_session=True)
        with open({pidfile!r}, "w") as f:
            f.write(str(child.pid))
        time.sleep(600)  # a load that never ends

    def execute(self, inputs):
        return {{"Y": inputs["X"]}}
"""


class _QuickLoad(HostedNumpy):  # type: ignore[misc, valid-type]
    @classmethod
    def load_timeout_s(cls, backend_config: dict) -> float:
        return 5.0


def test_an_abandoned_load_leaves_nothing_running(tmp_path):
    pidfile = tmp_path / "started.pid"
    version = _version(tmp_path, LEAVES_A_SESSION.format(pidfile=str(pidfile)), "stuck")
    with pytest.raises(BackendError) as failed:
        _QuickLoad(_config("stuck"), version, 0)
    assert str(failed.value) == (
        "the process of instance 'stuck_0_0' of model 'stuck' version 1 did not answer within 5 s while loading"
    )
    started = int(pidfile.read_text())
    try:
        assert not _alive(started), "the load's own session outlived the abandoned instance"
    finally:
        if _alive(started):
            os.kill(started, signal.SIGKILL)


def test_the_csim_load_limit_agrees_with_the_compile_limit():
    from fpgaserve.backends.hls4ml.csim.hosted import HostedHls4mlBackend
    from fpgaserve.backends.hosting.instance_process import LOAD_TIMEOUT_S

    assert HostedHls4mlBackend.load_timeout_s({}) == LOAD_TIMEOUT_S + 900
    assert HostedHls4mlBackend.load_timeout_s({"csim-compile-timeout-secs": "1800"}) == LOAD_TIMEOUT_S + 1800


ECHO_PID = """
import os
import numpy as np

class Model:
    def execute(self, inputs):
        return {"Y": np.array([int(inputs["X"].sum())]), "PID": np.array([os.getpid()])}
"""


def _mapped(pid: int, name: str) -> bool:
    with open(f"/proc/{pid}/maps") as f:
        return any(name in line for line in f)


def test_an_instance_unmaps_a_frontends_arena_when_it_goes(tmp_path):
    """A frontend process's request arena (server/ipc/arena.py) is read in place by the
    instance processes; when the frontend goes (its ArenaReader closes, unregistering the
    mapping), they unmap it too, instead of pinning up to its whole size for their lifetime."""
    backend = HostedNumpy(_config("arena"), _version(tmp_path, ECHO_PID, "arena"), 0)
    name = f"fpgaserve-test-arena-{os.getpid()}"
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    os.ftruncate(fd, 1 << 20)
    mapping = mmap.mmap(fd, 1 << 20)
    token = register_shared(mapping, f"/proc/{os.getpid()}/fd/{fd}")
    try:
        big = np.frombuffer(mapping, dtype=np.int64, count=8192)  # 64 KiB: travels by reference
        result = backend.execute({"X": big})
        pid = int(result["PID"][0])
        assert _mapped(pid, name)
        del big
        unregister_shared(token)
        backend.execute({"X": X})  # (the release went ahead of this batch on the same channel)
        assert not _mapped(pid, name)
    finally:
        unregister_shared(token)
        backend.close()
        mapping.close()
        os.close(fd)
