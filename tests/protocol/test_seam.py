"""The seam between the transports and the core (issue 19): one data-plane interface that
both data planes implement and both frontends call with a wire-neutral request; statuses
are wire-neutral and mapped at the edge only, so the core never imports grpc; only the CLI
ends the process.

Unit tests: no server is started.
"""

from __future__ import annotations

import ast
import asyncio
import collections
import inspect
import logging
import subprocess
import sys

import grpc
import numpy as np
import pytest

from fpgaserve.server import model_config
from fpgaserve.server.dataplane import DataPlane, DataPlaneAPI
from fpgaserve.server.dataplane.tensors import WireInput, WireRequest, all_outputs
from fpgaserve.server.engine.model_version import ModelVersion
from fpgaserve.server.engine.request import InferenceRequest
from fpgaserve.server.engine.statistics import BatchStat, Duration, ModelStatistics
from fpgaserve.server.errors import MAX_CLIENT_MESSAGE_BYTES, InferenceError, Status
from fpgaserve.server.frontends import common
from fpgaserve.server.frontends.grpc import GRPC_STATUS
from fpgaserve.server.frontends.http import HTTP_STATUS
from fpgaserve.server.ipc.remote import RemoteDataPlane
from fpgaserve.server.shared_memory import SystemSharedMemoryManager
from support.server_process import CONFORMANCE_REPO, ROOT

# the modules below the frontends: they speak Status, never a wire's codes
CORE = [
    *sorted((ROOT / "server" / "engine").glob("*.py")),
    *sorted((ROOT / "server" / "dataplane").glob("*.py")),
    *sorted((ROOT / "server" / "ipc").glob("*.py")),
    *(ROOT / "server" / name for name in ("errors.py", "shared_memory.py", "log_settings.py")),
]
FRONTENDS = sorted((ROOT / "server" / "frontends").glob("*.py"))


# ----------------------------------------------------------------------------- one data-plane interface

ABSTRACT = sorted(DataPlaneAPI.__abstractmethods__)


def test_the_interface_lists_what_the_frontends_call():
    assert {"infer", "model", "statistics", "load", "shm_register", "trace_settings"} <= set(ABSTRACT)
    assert "shm" in DataPlaneAPI.__annotations__  # the codecs' shared-memory checks


@pytest.mark.parametrize("cls", [DataPlane, RemoteDataPlane])
def test_both_data_planes_implement_every_method(cls):
    assert issubclass(cls, DataPlaneAPI)
    assert not inspect.isabstract(cls), sorted(cls.__abstractmethods__)
    for name in ABSTRACT:
        method = getattr(cls, name)
        assert inspect.iscoroutinefunction(method), name
        declared = inspect.signature(getattr(DataPlaneAPI, name)).parameters
        assert list(inspect.signature(method).parameters) == list(declared), name


def _simple_model() -> ModelVersion:
    model_dir = CONFORMANCE_REPO / "simple"
    config = model_config.read_config_file(model_dir / "config.pbtxt")
    model_config.normalize(config, "simple")
    return ModelVersion("simple", 1, config, str(model_dir / "1"), str(model_dir))


class _Scheduler:
    """Takes the InferenceRequest that DataPlane.infer submits and answers it at once."""

    def __init__(self):
        self.submitted: list[InferenceRequest] = []

    def submit(self, ireq: InferenceRequest) -> asyncio.Future:
        self.submitted.append(ireq)
        future = asyncio.get_running_loop().create_future()
        future.set_result([])
        return future


def test_dataplane_normalizes_the_wire_request_and_keeps_what_the_frontend_collected():
    model = _simple_model()
    scheduler = _Scheduler()
    model.scheduler = scheduler
    dataplane = DataPlane(None, SystemSharedMemoryManager(), None)  # no repository: infer needs none
    a, b = np.arange(32, dtype=np.int32).reshape(2, 16), np.ones((2, 16), np.int32)
    wire = WireRequest(
        model,
        "req-7",
        {"INPUT1": WireInput("INT32", [2, 16], b.tobytes()), "INPUT0": WireInput("INT32", [2, 16], a.tobytes())},
        all_outputs(model)[1:],
        {"sequence_id": 3},
        priority=2,
        timeout_us=5000,
        emit=print,
    )
    assert asyncio.run(dataplane.infer(wire)) == []
    (ireq,) = scheduler.submitted
    assert (ireq.model, ireq.id, ireq.parameters, ireq.priority, ireq.timeout_us) == (
        model,
        "req-7",
        {"sequence_id": 3},
        2,
        5000,
    )
    assert ireq.outputs == wire.outputs and ireq.emit is print and ireq.batch_size == 2 and ireq.arrival_ns > 0
    assert list(ireq.inputs) == ["INPUT0", "INPUT1"]  # Triton core's order: the reverse of the wire's
    assert (ireq.inputs["INPUT0"] == a).all() and (ireq.inputs["INPUT1"] == b).all()
    assert ireq.encode is not None
    # a request that does not fit the model never reaches the scheduler
    wire.inputs["INPUT0"].shape = [2, 15]
    with pytest.raises(InferenceError, match="unexpected shape for input 'INPUT0'") as e:
        asyncio.run(dataplane.infer(wire))
    assert e.value.status is Status.INVALID_ARG and len(scheduler.submitted) == 1
    # nor does any once shutdown has begun
    dataplane.exiting = True
    with pytest.raises(InferenceError, match="shutting down") as e:
        asyncio.run(dataplane.infer(wire))
    assert e.value.status is Status.UNAVAILABLE


@pytest.mark.parametrize("path", FRONTENDS, ids=[p.name for p in FRONTENDS])
def test_frontends_use_the_interface_only(path):
    """Frontends see ``DataPlaneAPI``: they neither normalize, nor check whether the server
    accepts work, nor name either implementation."""
    used = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            used.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Attribute):
            used.add(node.attr)
        elif isinstance(node, ast.Name):
            used.add(node.id)
    assert not used & {"normalize", "check_accepting", "DataPlane", "RemoteDataPlane"}, path.name


# ----------------------------------------------------------------------------- statuses


def test_every_status_has_a_grpc_code_and_an_http_status():
    assert set(GRPC_STATUS) == set(Status)
    assert set(HTTP_STATUS) == set(Status)


def test_status_mapping_is_tritons():
    # grpc_utils.cc: one to one but for the two renamed codes
    assert GRPC_STATUS[Status.INVALID_ARG] is grpc.StatusCode.INVALID_ARGUMENT
    assert GRPC_STATUS[Status.UNSUPPORTED] is grpc.StatusCode.UNIMPLEMENTED
    for status in set(Status) - {Status.INVALID_ARG, Status.UNSUPPORTED}:
        assert GRPC_STATUS[status] is grpc.StatusCode[status.name]
    # HttpCodeFromError: four classes, 400 for everything else
    special = {Status.INTERNAL: 500, Status.NOT_FOUND: 404, Status.UNAVAILABLE: 503, Status.UNSUPPORTED: 501}
    assert {status: special.get(status, 400) for status in Status} == HTTP_STATUS


def test_inference_error_carries_a_status_and_its_text():
    e = InferenceError(Status.NOT_FOUND, "no such thing")
    assert (e.status, e.message, str(e)) == (Status.NOT_FOUND, "no such thing", "no such thing")
    assert repr(e) == "InferenceError(NOT_FOUND, 'no such thing')"
    # between processes a status travels as its member name
    assert Status[e.status.name] is Status.NOT_FOUND


# ----------------------------------------------------------------------------- no grpc below the frontends


def _imported_modules(path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", CORE, ids=[str(p.relative_to(ROOT)) for p in CORE])
def test_core_module_does_not_import_grpc(path):
    grpc_imports = {n for n in _imported_modules(path) if n == "grpc" or n.startswith("grpc.")}
    assert not grpc_imports, f"{path.relative_to(ROOT)} imports {sorted(grpc_imports)}"


def test_core_loads_without_grpc():
    """What the engine's side of the IPC channel loads, in a fresh interpreter: grpc is not
    among it (the protos' compiler, grpc_tools, is a different package)."""
    code = (
        "import sys\n"
        "import fpgaserve.server.dataplane, fpgaserve.server.engine.repository\n"
        "import fpgaserve.server.ipc.engine_server, fpgaserve.server.ipc.remote, fpgaserve.server.ipc.supervisor\n"
        "print(sorted(m for m in sys.modules if m == 'grpc' or m.startswith('grpc.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


# ----------------------------------------------------------------------------- StartupError


def _run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fpgaserve.server.cli", "--model-repository", str(CONFORMANCE_REPO), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "args, line",
    [
        # raised while the server is built, before logging is set up: the line alone on stderr
        (["--grpc-restricted-protocol=health"], "error: --grpc-restricted-protocol option format is"),
        (["--http-use-ssl=true"], "error: --http-use-ssl needs --http-server-cert"),
    ],
)
def test_startup_error_before_logging_is_its_line_on_stderr(args, line):
    done = _run_cli(*args, "--http-port=0", "--grpc-port=0", "--metrics-port=-1")
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(line), done.stderr
    assert "Traceback" not in done.stderr


def test_startup_error_while_starting_is_logged_and_exits_1():
    done = _run_cli("--grpc-use-ssl=true", "--http-port=-1", "--grpc-port=0", "--metrics-port=-1")
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error: " in line]
    assert errors and errors[-1].endswith("fpgaserve] error: --grpc-use-ssl needs --grpc-server-cert"), done.stderr
    assert "Traceback" not in done.stderr


# ----------------------------------------------------------------------------- what both frontends share


def test_failure_never_sends_a_repr_or_an_unbounded_text(caplog):
    log = logging.getLogger("fpgaserve.test")
    err = InferenceError(Status.NOT_FOUND, "gone")
    assert common.failure("X", err, log) is err
    assert common.failure("X", MemoryError(), log).status is Status.UNAVAILABLE
    bug = common.failure("ModelInfer", KeyError("secret <object at 0x7f>"), log)
    assert bug.status is Status.INTERNAL
    assert bug.message == "internal error in ModelInfer (KeyError); the server log has the details"
    assert "failed unexpectedly" in caplog.text  # with its traceback, in the log only
    long = common.failure("X", InferenceError(Status.INVALID_ARG, "x" * 100_000), log)
    assert long.status is Status.INVALID_ARG
    assert len(long.message.encode()) <= MAX_CLIENT_MESSAGE_BYTES and "truncated" in long.message


def test_load_parameters_follow_tritons_rules():
    def text(key, value):
        return value

    def data(key, value):
        return value.encode()

    assert common.load_parameters([], text, data) == (None, None)
    got = common.load_parameters([("config", "{}"), ("file:1/model.onnx", "ab")], text, data)
    assert got == ("{}", {"1/model.onnx": b"ab"})
    with pytest.raises(InferenceError, match=r"^unrecognized load parameter 'bogus'\.$") as e:
        common.load_parameters([("config", "{}"), ("bogus", "")], text, data)
    assert e.value.status is Status.INVALID_ARG
    with pytest.raises(InferenceError, match="'repository_name' specification is not supported") as e:
        common.refuse_repository_name("other")
    assert e.value.status is Status.UNSUPPORTED


def test_statistics_rows_name_the_proto_fields():
    stats = ModelStatistics(success=Duration(2, 30), inference_count=5, execution_count=1, last_inference_ms=9)
    stats.batch_stats[4] = BatchStat(compute_infer=Duration(1, 7))
    view = collections.namedtuple("View", "name version_str stats")("m", "1", stats)
    (row,) = common.statistics_rows([view])
    assert list(row) == ["name", "version", "last_inference", "inference_count", "execution_count"] + [
        "inference_stats",
        "batch_stats",
    ]
    assert row["inference_stats"]["success"] == {"count": 2, "ns": 30}
    assert row["batch_stats"] == [
        {
            "batch_size": 4,
            "compute_input": {"count": 0, "ns": 0},
            "compute_infer": {"count": 1, "ns": 7},
            "compute_output": {"count": 0, "ns": 0},
        }
    ]
