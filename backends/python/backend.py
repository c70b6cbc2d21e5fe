"""``backend: "python"``: Triton's Python backend, each instance in its own process.

A model written for Triton (``<version>/model.py`` with ``class TritonPythonModel``, ``import
triton_python_backend_utils as pb_utils``) is served unchanged: the instance's process
(``fpgaserve.backends.hosting``) imports it and calls ``initialize(args)``,
``execute(requests)`` with the batch's requests (each with its own inputs, as Triton hands
them) and ``finalize()`` (``host.py``, which runs there). A crash of the model's
code (a segfault in an extension, ``os._exit``) fails its batch and restarts the instance; the
server and its other models keep serving.

Settings this implementation cannot honour are refused at load rather than ignored: a
model's ``EXECUTION_ENV_PATH`` (a conda-pack environment: the model runs in the server's
interpreter) and ``--backend-config=python,...`` settings of Triton's stub (shared-memory
pool sizes, stub timeouts).
"""

from __future__ import annotations

import json
import os

from fpgaserve.server import model_config as mc

from ..base import BackendError, BackendRequest, ExecutionFailed
from ..hosting import ChildDied, ProcessBackend, failure_from_child
from .response_flags import RESPONSE_COMPLETE_FINAL

# what the instance process puts on sys.path: triton_python_backend_utils and nothing else of ours
_STUB_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stub")

#: request parameters Triton's frontends turn into request fields (flags, correlation id,
#: priority, timeout, final-response option): a model's ``parameters()`` shows the others only
_HANDLED_PARAMETERS = frozenset(
    ("sequence_id", "sequence_start", "sequence_end", "priority", "timeout", "triton_enable_empty_final_response")
)


#: how long a readiness check waits for the model's is_ready() (Triton's python backend:
#: kUserModelReadinessTimeoutMs, 5000)
IS_READY_TIMEOUT_S = 5.0


def _refuse_unsupported(config: dict, backend_config: dict) -> None:
    parameters = config.get("parameters", {})
    if "EXECUTION_ENV_PATH" in parameters:
        raise BackendError(
            "parameter EXECUTION_ENV_PATH (a conda-pack environment for the Python backend) is not "
            "supported: Python models run in the server's own interpreter; install the model's "
            "packages there and remove the parameter"
        )
    if backend_config:
        keys = ", ".join(sorted(backend_config))
        raise BackendError(
            f"--backend-config=python settings are not supported ({keys}): they size Triton's "
            "shared-memory stub, which this server does not use; remove them"
        )


class PythonBackend(ProcessBackend):
    default_filename = "model.py"
    missing_model_file = "unable to find '{path}' (the Python model file)"
    child_target = "fpgaserve.backends.python.host:PythonModelHost"
    request_level = True
    # requests without dynamic batching travel to the instance process together (each still
    # its own execute call there): one round trip for several under load
    carries_requests = 32

    def __init__(self, config: dict, version_dir: str, instance_index: int, backend_config: dict | None = None):
        _refuse_unsupported(config, backend_config or {})
        self.model_path = self.model_file(config, version_dir)
        self._exec_id = 0  # numbers the batches sent to the child
        # the running batch's requests' cancellation checks: (exec id, [check or None, ...])
        self._cancel_checks: tuple[int, list] = (0, [])
        super().__init__(config, version_dir, instance_index, backend_config)

    def unhealthy_prefix(self) -> str:
        return f"Stub process '{self.instance_name}' is not healthy: "

    # ------------------------------------------------------------------ readiness
    # Triton's TRITONBACKEND_ModelInstanceReady (python_backend r26.04, src/python_be.cc): a
    # dead stub is INTERNAL "Stub process '<instance>' is not healthy."; then the model's
    # optional is_ready() (python_backend r26.03+), whose False, exception, non-bool result or
    # 5 s timeout each make the model not ready with the texts below. Triton's core only logs
    # the text (verbose) and answers "not ready"; here it also shows in the repository index.

    def has_ready_check(self) -> bool:
        return bool((getattr(self, "load_result", None) or {}).get("is_ready"))

    def instance_ready(self) -> str | None:
        why = super().instance_ready()
        if why is None:
            return None
        return f"Stub process '{self.instance_name}' is not healthy. ({why.removeprefix(self.unhealthy_prefix())})"

    def check_ready(self) -> str | None:
        if not self.has_ready_check():
            return None  # no is_ready(): ready while the stub runs, no round trip
        answer = self.ask_child_ready(IS_READY_TIMEOUT_S)
        kind = answer[0]
        if kind == "answer":
            _, ready, error = answer
            if error is not None:
                return error
            return None if ready else f"Model '{self.instance_name}' is not ready (user-defined check failed)."
        if kind == "timeout":
            return "Timed out waiting for user-defined is_ready() response"
        if kind == "busy":
            return "Timed out waiting for in-flight is_ready() response"
        return "Stub process is not healthy while waiting for user-defined is_ready() response"

    def load_args(self) -> tuple:
        model_dir = os.path.dirname(os.path.abspath(self.version_dir))
        args = {
            "model_config": json.dumps(mc.triton_json_from_dict(self.config)),
            "model_instance_kind": "CPU",
            "model_instance_name": self.instance_name,
            "model_instance_device_id": "0",
            "model_repository": model_dir,
            "model_version": self.model_version,
            "model_name": self.model_name,
        }
        host = {"model_path": self.model_path, "stub_dir": _STUB_DIR, "decoupled": self.decoupled}
        return (args, self.version_dir, self.instance_index, host)

    def execute(self, inputs):  # request_level: the scheduler calls execute_requests
        raise NotImplementedError("the Python backend executes requests, not merged batches")

    def execute_requests(self, requests: list[BackendRequest], alone: bool = False) -> list:
        self.ensure_running()
        self._exec_id += 1
        exec_id = self._exec_id
        self.segment.reset()
        put = self.segment.put
        message = [
            (
                r.id,
                r.flags,
                {k: v for k, v in r.parameters.items() if k not in _HANDLED_PARAMETERS} if r.parameters else {},
                [(name, put(array)) for name, array in r.inputs.items()],
                r.requested_outputs,
                r.correlation_id,
            )
            for r in requests
        ]
        self._cancel_checks = (exec_id, [r.cancelled for r in requests])
        self.serving_calls = tuple(r.caller for r in requests if r.caller is not None)
        try:
            self.send(("exec_requests", message, self.decoupled, alone, exec_id))
            if self.decoupled:
                return [self._responses(exec_id)]
            reply = self._reply(exec_id)
            if reply[0] == "failed":
                raise failure_from_child(reply)
            answers: list = []
            for result in reply[1]:
                if result[0] == "ok":
                    answers.append(self.read_tensors(result[1]))
                elif result[0] == "failed":  # (alone) its own execute raised
                    answers.append(ExecutionFailed(failure_from_child(result)))
                else:
                    answers.append(failure_from_child(result))
        except ChildDied as e:
            raise self.crashed(str(e)) from None
        return answers

    def abandoned(self) -> bool:
        checks = self._cancel_checks[1]
        return bool(checks) and all(check is not None and check() for check in checks)

    def request_cancelled(self, exec_id: int, index: int) -> bool:
        running, checks = self._cancel_checks
        if exec_id != running or not 0 <= index < len(checks) or checks[index] is None:
            return False  # a batch that has been answered (its late question), or warm-up
        return bool(checks[index]())

    def _reply(self, exec_id: int) -> tuple:
        """The child's answer to batch ``exec_id`` (what an earlier batch's stream left unread is skipped)."""
        while True:
            message = self.next_message()
            if message[-1] == exec_id and message[0] in ("done_requests", "failed"):
                return message

    def _responses(self, exec_id: int):
        """A decoupled request's responses as the model sends them, until it sends the final
        flag and its execute has returned. Messages of an earlier batch (a stream the scheduler
        stopped reading, having failed it) are skipped.

        An error response without the final flag is yielded as its exception and the stream
        goes on: Triton sends it to the client and then the model's later responses and final
        flag. One with the final flag ends the request with that error."""
        final = done = False
        while not (final and done):
            try:
                message = self.next_message()
            except ChildDied as e:
                raise self.crashed(str(e)) from None
            kind = message[0]
            if message[1 if kind == "response" else -1] not in (exec_id, (exec_id, 0)):
                continue
            if kind == "failed":
                raise failure_from_child(message)
            if kind == "done_requests":
                done = True
                continue
            if kind != "response":
                continue
            _, _, outputs, error, flags = message
            if error is not None:
                if flags & RESPONSE_COMPLETE_FINAL:
                    raise failure_from_child(("error", *error))
                yield failure_from_child(("error", *error))
                continue
            if outputs is not None:
                try:
                    tensors = self.read_tensors(outputs)
                except ChildDied as e:
                    raise self.crashed(str(e)) from None
                yield tensors
            if flags & RESPONSE_COMPLETE_FINAL:
                final = True

    @classmethod
    def auto_complete(cls, config: dict, version_dir: str) -> dict | None:
        """Run the model's ``auto_complete_config`` (in a process of its own, as all model
        code): the completed config, or None when the model defines none."""
        path = cls.model_file(config, version_dir)
        with open(path, encoding="utf-8", errors="replace") as f:
            if "auto_complete_config" not in f.read():
                return None  # no process started for the common case
        probe = _AutoCompleteProbe(config, version_dir, 0, {})
        try:
            return probe.load_result
        finally:
            probe.close()


class _AutoCompleteProbe(PythonBackend):
    child_target = "fpgaserve.backends.python.host:AutoCompleter"
