"""The float reference ``model.onnx``, made in a child process under a time limit.

``--fpga-mode onnx`` serves a version's ``model.onnx``: the trained network in float, a quick
stand-in for the firmware. It is a convenience, so making it must not cost the pack: the
exporters behind it can take unbounded time (qonnx's ``cleanup_model`` spent minutes in
``_restore_finn_ops`` on a separable-convolution QONNX model before it was stopped), and a
Python thread cannot be stopped, but a process can.

Contract:

* :func:`job_for` returns the :class:`ReferenceJob` that makes the request's reference
  (PyTorch, Keras, ONNX/QONNX), or None when ``--float-reference`` names a file to copy.
  A job is a picklable description of the work, not the work's result.
* :func:`make_reference` runs ``job.make(out)`` in a freshly spawned Python process, then
  checks there that ONNX Runtime loads the file and runs one row of zeros through it. It
  returns True when ``out`` holds such a file. On any failure of the job, a crash of the
  child, or the time limit (the child is killed) it removes ``out``, logs a warning that the
  model will be packed without ``model.onnx`` (so ``--fpga-mode onnx`` is unavailable for it)
  and returns False; it never raises for the reference's own problems and never waits longer
  than ``timeout`` seconds.
* Any object with a ``make(out: Path)`` method that pickles can be run (the tests pass jobs of
  their own). A job that cannot be pickled (an in-memory PyTorch module of a class defined in
  a function) runs in this process instead, without the limit, and says so.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .request import PackRequest

log = logging.getLogger("fpgaserve.pack")


class ReferenceJob(Protocol):
    def make(self, out: Path) -> None: ...


@dataclass
class TorchFileJob:
    """--pytorch FILE.pt or file.py:Factory: the child loads the module again (a module class
    defined in the user's file cannot be unpickled in another process)."""

    spec: str
    state_dict: str | None
    input_shape: tuple[int, ...]

    def make(self, out: Path) -> None:
        from . import from_pytorch

        from_pytorch.export_reference(from_pytorch.load(self.spec, self.state_dict), self.input_shape, out)


@dataclass
class TorchModuleJob:
    """An in-memory nn.Module (programmatic pack), pickled into the child."""

    module: Any
    input_shape: tuple[int, ...]

    def make(self, out: Path) -> None:
        from . import from_pytorch

        from_pytorch.export_reference(self.module.eval(), self.input_shape, out)


@dataclass
class KerasJob:
    path: str

    def make(self, out: Path) -> None:
        from . import from_keras

        from_keras.export_reference(from_keras.load(self.path), out)


@dataclass
class OnnxJob:
    path: str

    def make(self, out: Path) -> None:
        from . import from_onnx

        from_onnx.make_reference(self.path, out)


def job_for(req: PackRequest) -> ReferenceJob | None:
    """How the request's reference is made; None for --float-reference (a file to copy) or
    --hls4ml-project (no trained model to export)."""
    if req.float_reference or req.hls4ml_project:
        return None
    if req.pytorch_module is not None:
        return TorchModuleJob(req.pytorch_module, tuple(req.input_shape or ()))
    if req.pytorch:
        return TorchFileJob(req.pytorch, req.state_dict, tuple(req.input_shape or ()))
    if req.keras:
        return KerasJob(req.keras)
    if req.onnx:
        return OnnxJob(req.onnx)
    return None


def make_reference(job: ReferenceJob, out: Path, timeout: float) -> bool:
    """Run ``job`` in a child process for at most ``timeout`` seconds; see the module docstring."""
    try:
        payload = pickle.dumps(job)
    except Exception as e:  # pickle raises PicklingError, AttributeError or TypeError for local classes
        log.warning(
            "the float reference job cannot be sent to a child process (%s: %s); making it in this process, "
            "without the %g s limit",
            type(e).__name__,
            e,
            timeout,
        )
        return _unavailable(out, _run_and_check(job, out))
    status = out.with_name(out.name + ".status")
    job_file = out.with_name(out.name + ".job")
    status.unlink(missing_ok=True)
    # a file, not a pipe: writing a large job (a module's weights) into a pipe would wait for
    # the child to read it, outside the time limit
    job_file.write_bytes(pickle.dumps((sys.path, payload, str(out), str(status))))
    log.info("making the float reference model.onnx (at most %g s)", timeout)
    # A fresh interpreter, not fork: the parent has imported torch/hls4ml and may hold their
    # thread pools and locks, which a forked child inherits in whatever state they were in. Not
    # multiprocessing's spawn either: it re-imports the parent's __main__, which fails for a
    # script read from stdin. Its own session, so that killing it takes whatever it started.
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(job_file)], start_new_session=True)
    problem: str | None
    try:
        child.wait(timeout)
        problem = _reported(status, child.returncode)
    except subprocess.TimeoutExpired:
        problem = f"making it took longer than {timeout:g} s (--reference-timeout); the child process was killed"
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        status.unlink(missing_ok=True)
        job_file.unlink(missing_ok=True)
    return _unavailable(out, problem)


# the child's whole program: read the job, find modules where the parent finds them, run
_CHILD = """\
import pickle, sys
with open(sys.argv[1], "rb") as f:
    path, payload, out, status = pickle.load(f)
sys.path[:] = path
from fpgaserve.pack.reference import child_main
child_main(payload, out, status)
"""


def child_main(payload: bytes, out: str, status: str) -> None:
    """In the child: make and check the reference, then leave one message (None = success)."""
    try:
        job = pickle.loads(payload)
    except Exception as e:
        problem: str | None = f"the child process cannot load the job ({type(e).__name__}: {e})"
    else:
        problem = _run_and_check(job, Path(out))
    Path(status).write_text(json.dumps({"problem": problem}))


def _reported(status: Path, returncode: int) -> str | None:
    try:
        return json.loads(status.read_text())["problem"]
    except (OSError, ValueError, KeyError):
        # no word from it: killed, or crashed in native code
        return f"the child process making it died (exit status {returncode})"


def _unavailable(out: Path, problem: str | None) -> bool:
    if problem is None:
        return True
    out.unlink(missing_ok=True)
    log.warning(
        "no float reference (model.onnx) is packed: %s. --fpga-mode onnx will be unavailable for this model "
        "(pass --float-reference MODEL.onnx to ship one); the firmware's own modes are not affected.",
        problem,
    )
    return False


def _run_and_check(job: ReferenceJob, out: Path) -> str | None:
    """Make the reference and load it once; None on success, else what went wrong."""
    from .from_onnx import ReferenceUnavailable

    try:
        job.make(out)
        _check_runnable(out)
    except ReferenceUnavailable as e:  # says all there is to say
        return str(e)
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return None


def _check_runnable(path: Path) -> None:
    """ONNX Runtime loads the file and computes one row of zeros, as --fpga-mode onnx will."""
    import numpy as np
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {}
    for arg in session.get_inputs():
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in arg.shape]
        dtype = np.float64 if arg.type == "tensor(double)" else np.float32
        feeds[arg.name] = np.zeros(shape, dtype)
    session.run(None, feeds)
