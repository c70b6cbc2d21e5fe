"""Request tracing with tritonserver's settings, file format and OpenTelemetry spans.

**Settings.** These are ``--trace-config`` at start and the TraceSetting RPC /
``/v2/trace/setting`` at run time, globally or per model:

* ``trace_level``: ``OFF``, or any of ``TIMESTAMPS`` and ``TENSORS``;
* ``trace_rate``: trace one request in N;
* ``trace_count``: how many more traces, -1 for no limit;
* ``log_frequency``: in triton mode, start a new file every N traces (0: one file);
* ``trace_file`` and ``trace_mode``: fixed at start.

Validation follows tritonserver 2.51 as observed: its texts, unknown keys ignored,
``trace_mode`` not updatable. ``trace_file`` is refused with UNIMPLEMENTED. An unknown
level string is ignored. A model setting set to null falls back to the global one.

**Sampling.** A model with settings of its own has its own counters, otherwise the global
ones count. Every ``trace_rate``-th request of a scope is traced while its ``trace_count``
lasts; the count goes down as traces are taken, as Triton reports it.

**What a trace records.** All times are taken by the engine:

* ``REQUEST_START`` and ``QUEUE_START``: when the request entered the server's statistics;
* ``COMPUTE_START``: its batch began;
* ``COMPUTE_INPUT_END`` and ``COMPUTE_OUTPUT_START``: from the batch's input, infer and
  output durations;
* ``COMPUTE_END``;
* ``REQUEST_END``: when its outcome was handed back.

At ``TENSORS`` level, triton mode adds the request's input tensors (``TENSOR_QUEUE_INPUT``,
at most ``MAX_TENSOR_ELEMENTS`` values each). The frontends' own receive and send times
(Triton's ``GRPC_*`` and ``HTTP_*``) are not recorded: with frontend processes they happen
in another process, and REQUEST_START to REQUEST_END is what the server controls.

**Modes.**

* ``triton`` writes Triton's JSON: an array of ``{"id", "model_name", "model_version",
  "request_id"}`` and ``{"id", "timestamps": [{"name", "ns"}]}`` objects (monotonic ns, as
  Triton's steady clock). A writer thread does the writing, never the event loop. With
  ``log_frequency`` N > 0 every N traces close one file ``<trace_file>.<k>``.
* ``opentelemetry`` exports OTLP/HTTP spans through the OpenTelemetry SDK (a batch span
  processor exports in the background):
  * an ``InferRequest`` span, whose parent is the client's W3C ``traceparent`` (gRPC
    metadata or HTTP header) when it sent one, so the server's spans join the client's trace;
  * a span named after the model, carrying ``triton.model_name``, ``triton.model_version``
    and ``triton.trace_id``, with events REQUEST_START, QUEUE_START and REQUEST_END;
  * a ``compute`` span with the four compute events.

  Times are converted to the epoch once per trace.

**Cost when off.** ``Tracer.active`` is one attribute read per request; frontends ask for
the ``traceparent`` only while it is true.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..datatypes import wire_name_for_numpy
from ..errors import invalid_argument, unimplemented

log = logging.getLogger("fpgaserve.trace")

LEVELS = ("TIMESTAMPS", "TENSORS")
MAX_TENSOR_ELEMENTS = 1 << 16
DEFAULT_RESOURCE = {"service.name": "triton-inference-server"}


class TraceConfigError(ValueError):
    pass


@dataclass
class TraceStartup:
    """What ``--trace-config`` (and the legacy ``--trace-*`` flags) set at start."""

    mode: str = "triton"
    level: tuple[str, ...] = ("OFF",)
    rate: int = 1000
    count: int = -1
    log_frequency: int = 0
    file: str = ""
    url: str = "http://localhost:4318/v1/traces"
    resource: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_RESOURCE))


def _int(key: str, text: str, floor: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise TraceConfigError(f"--trace-config {key}={text}: expected an integer") from None
    if value < floor:
        raise TraceConfigError(f"--trace-config {key}={text}: expected a value >= {floor}")
    return value


def _otlp_url(value: str) -> str:
    """The collector's OTLP/HTTP traces URL. A value without a scheme or path, as SuperSONIC
    writes it (``localhost:4318``), means the collector's HTTP port: ``http://`` and the OTLP
    traces path ``/v1/traces`` are added."""
    url = value if "://" in value else f"http://{value}"
    scheme, _, rest = url.partition("://")
    if "/" not in rest:
        url = f"{scheme}://{rest}/v1/traces"
    return url


def parse_trace_config(items: list[str]) -> TraceStartup:
    """tritonserver's ``--trace-config [<mode>,]<setting>=<value>`` values, in order."""
    cfg = TraceStartup()
    for item in items:
        scope, comma, rest = item.partition(",")
        if not comma or "=" in scope:
            scope, rest = "", item
        key, eq, value = rest.partition("=")
        if not eq:
            raise TraceConfigError(f"--trace-config expects [<mode>,]<setting>=<value>, got '{item}'")
        key = key.strip()
        if scope == "":
            if key == "mode":
                if value not in ("triton", "opentelemetry"):
                    raise TraceConfigError(f"--trace-config mode={value}: expected triton or opentelemetry")
                cfg.mode = value
            elif key == "level":
                v = value.upper()
                if v == "OFF":
                    cfg.level = ("OFF",)
                elif v in LEVELS:
                    cfg.level = tuple(x for x in LEVELS if x in cfg.level or x == v)
                else:
                    raise TraceConfigError(f"--trace-config level={value}: expected OFF, TIMESTAMPS or TENSORS")
            elif key == "rate":
                cfg.rate = _int(key, value, 1)
            elif key == "count":
                cfg.count = _int(key, value, -1)
            else:
                raise TraceConfigError(f"--trace-config: unknown global setting '{key}'")
        elif scope == "triton":
            if key == "file":
                cfg.file = value
            elif key == "log-frequency":
                cfg.log_frequency = _int(key, value, 0)
            else:
                raise TraceConfigError(f"--trace-config triton: unknown setting '{key}'")
        elif scope == "opentelemetry":
            if key == "url":
                cfg.url = _otlp_url(value)
            elif key == "resource":
                rkey, req, rvalue = value.partition("=")
                if not req or not rkey:
                    raise TraceConfigError(f"--trace-config opentelemetry,resource={value}: expected <key>=<value>")
                cfg.resource[rkey] = rvalue
            elif key.startswith("bsp_"):
                pass  # the SDK's batch-processor tuning: its defaults serve
            else:
                raise TraceConfigError(f"--trace-config opentelemetry: unknown setting '{key}'")
        else:
            raise TraceConfigError(f"--trace-config: unknown mode '{scope}' in '{item}'")
    return cfg


@dataclass
class _Scope:
    """Sampling state of the global settings or of one model's own."""

    level: tuple[str, ...]
    rate: int
    count: int
    log_frequency: int
    seen: int = 0

    def take(self, values: dict[str, Any], base: _Scope | TraceStartup) -> None:
        """Each setting from ``values`` (TraceSetting keys) where given, else ``base``'s."""
        for key, attr in _SETTINGS:
            setattr(self, attr, values.get(key, getattr(base, attr)))


# TraceSetting key -> attribute of _Scope (and of TraceStartup, its defaults)
_SETTINGS = (
    ("trace_level", "level"),
    ("trace_rate", "rate"),
    ("trace_count", "count"),
    ("log_frequency", "log_frequency"),
)


class Trace:
    """One traced request (see the module docstring for what it records)."""

    __slots__ = ("compute", "id", "level", "parent", "tensors", "tracer")

    def __init__(self, trace_id: int, level: tuple[str, ...], parent: str, tracer: Tracer):
        self.tracer = tracer
        self.id = trace_id
        self.level = level
        self.parent = parent
        self.compute: tuple[int, int, int] | None = None  # input, infer, output ns of its batch
        self.tensors: list[dict] | None = None


class Tracer:
    def __init__(self, startup: TraceStartup | None = None, repository=None):
        self.startup = startup or TraceStartup()
        self.repository = repository
        s = self.startup
        self._global = _Scope(s.level, s.rate, s.count, s.log_frequency)
        self._models: dict[str, tuple[dict[str, Any], _Scope]] = {}
        self._ids = 0
        self.active = False
        self.on_change: list = []  # callbacks(active: bool): frontends follow the flag
        self._writer: _FileWriter | None = None
        self._otel: _Otel | None = None
        self._refresh()

    # ------------------------------------------------------------------ settings
    def _effective(self, model: str) -> tuple[dict[str, Any], _Scope]:
        override = self._models.get(model)
        return override if override is not None else ({}, self._global)

    def settings(self, model: str = "") -> dict[str, list[str]]:
        scope = self._effective(model)[1] if model else self._global
        return {
            "trace_file": [self.startup.file],
            "trace_level": list(scope.level),
            "trace_rate": [str(scope.rate)],
            "trace_count": [str(scope.count)],
            "log_frequency": [str(scope.log_frequency)],
            "trace_mode": [self.startup.mode],
        }

    def update(self, model: str, settings: dict[str, list[str]]) -> dict[str, list[str]]:
        """Apply TraceSetting ``settings`` (all or none, Triton's checks and texts); the
        settings now in force for ``model`` (or globally)."""
        changes: dict[str, Any] = {}
        cleared: set[str] = set()
        for key, values in settings.items():
            if key == "trace_file":
                if values:
                    raise unimplemented("trace file location can not be updated through network protocol")
            elif key == "trace_mode":
                continue  # fixed at start; tritonserver ignores it too
            elif key not in ("trace_level", "trace_rate", "trace_count", "log_frequency"):
                continue  # tritonserver ignores keys it does not know
            elif not values:
                cleared.add(key)
            elif key == "trace_level":
                upper = [v.upper() for v in values]
                if "OFF" in upper:
                    if len(upper) > 1:
                        raise invalid_argument("Expect only one trace level 'OFF' is specified")
                    changes[key] = ("OFF",)
                else:
                    levels = tuple(x for x in LEVELS if x in upper)
                    if levels:  # unknown names only: nothing changes, as in tritonserver
                        changes[key] = levels
            else:
                text = values[0]
                try:
                    number = int(text)
                except ValueError:
                    number = None
                if key == "trace_count":
                    if number is None or number < -1:
                        raise invalid_argument(f"Unable to parse 'trace_count'. Expecting value >= -1, got: {text}")
                elif number is None or number < 0:
                    raise invalid_argument(f"Unable to parse '{key}', got: {text}")
                changes[key] = number
        # a rate of 0 is refused only where tracing would be on with it (tritonserver keeps it
        # while the level is OFF)
        current = self._effective(model)[1] if model else self._global
        level = changes.get("trace_level", current.level)
        rate = changes.get("trace_rate", current.rate)
        if level != ("OFF",) and rate == 0:
            raise invalid_argument("Attempting to set invalid trace setting :sample rate must be non-zero")
        if model:
            own, _ = self._models.get(model, ({}, None))
            own = {k: v for k, v in own.items() if k not in cleared}
            own.update(changes)
            if own:
                scope = _Scope(("OFF",), 0, 0, 0)
                scope.take(own, self._global)
                self._models[model] = (own, scope)
            else:
                self._models.pop(model, None)
        else:
            g = self._global
            g.take(changes, g)
            for key, attr in _SETTINGS:  # a null setting goes back to its value at start
                if key in cleared and key not in changes:
                    setattr(g, attr, getattr(self.startup, attr))
            for own, scope in self._models.values():  # what models inherit follows
                scope.take(own, g)
        self._refresh()
        return self.settings(model)

    def _refresh(self) -> None:
        scopes = [self._global, *(s for _, s in self._models.values())]
        active = any(s.level != ("OFF",) and s.count != 0 for s in scopes)
        if active != self.active:
            self.active = active
            for callback in list(self.on_change):
                callback(active)

    # ------------------------------------------------------------------ per request
    def start(self, model_name: str, traceparent: str = "") -> Trace | None:
        """A Trace if this request of ``model_name`` is sampled (only called while active)."""
        scope = self._effective(model_name)[1]
        if scope.level == ("OFF",) or scope.count == 0:
            return None
        scope.seen += 1
        if scope.rate <= 0 or scope.seen % scope.rate:
            return None
        if scope.count > 0:
            scope.count -= 1
            if scope.count == 0:
                self._refresh()
        self._ids += 1
        return Trace(self._ids, scope.level, traceparent, self)

    def finish(self, request, error) -> None:
        """Record ``request``'s trace (resolve() calls it when the request is answered)."""
        trace: Trace = request.trace
        request.trace = None
        end = time.monotonic_ns()
        start = request.arrival_ns
        compute_start = request.exec_start_ns or 0
        stamps = [("REQUEST_START", start), ("QUEUE_START", start)]
        compute = None
        if compute_start and trace.compute is not None:
            i_ns, c_ns, o_ns = trace.compute
            compute = [
                ("COMPUTE_START", compute_start),
                ("COMPUTE_INPUT_END", compute_start + i_ns),
                ("COMPUTE_OUTPUT_START", compute_start + i_ns + c_ns),
                ("COMPUTE_END", compute_start + i_ns + c_ns + o_ns),
            ]
        try:
            if self.startup.mode == "opentelemetry":
                if self._otel is None:
                    self._otel = _Otel(self.startup)
                self._otel.export(trace, request, stamps, compute, end, error)
            else:
                self._write_triton(trace, request, stamps + (compute or []) + [("REQUEST_END", end)])
        except Exception:  # tracing must never fail a request
            log.warning("could not record trace %d", trace.id, exc_info=True)

    def _write_triton(self, trace: Trace, request, stamps) -> None:
        if not self.startup.file:
            return
        head: dict[str, Any] = {
            "id": trace.id,
            "model_name": request.model.name,
            "model_version": request.model.version,
        }
        if request.id:
            head["request_id"] = request.id
        entries = [head]
        if "TENSORS" in trace.level:
            for name, array in request.inputs.items():
                entries.append({"id": trace.id, "activity": "TENSOR_QUEUE_INPUT", "tensor": _tensor(name, array)})
        entries.extend({"id": trace.id, "timestamps": [{"name": n, "ns": ns}]} for n, ns in stamps)
        if self._writer is None:
            self._writer = _FileWriter(self.startup.file)
        scope = self._effective(request.model.name)[1]
        self._writer.put(entries, scope.log_frequency)

    def close(self) -> None:
        """Flush and close (at shutdown; blocking: call it off the event loop)."""
        if self._writer is not None:
            self._writer.close()
        if self._otel is not None:
            self._otel.close()


def _tensor(name: str, array: np.ndarray) -> dict:
    flat = np.asarray(array).reshape(-1)[:MAX_TENSOR_ELEMENTS]
    if flat.dtype == object:
        data = ",".join(v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in flat)
    else:
        data = ",".join(map(str, flat.tolist()))
    wire = "BYTES" if array.dtype == object else wire_name_for_numpy(array.dtype)
    return {"name": name, "data": data, "shape": ",".join(map(str, array.shape)), "dtype": wire or str(array.dtype)}


class _FileWriter:
    """Triton's JSON trace file(s), written by one thread (never the event loop)."""

    def __init__(self, path: str):
        self.path = path
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="fpgaserve-trace-writer", daemon=True)
        self._thread.start()

    def put(self, entries: list[dict], log_frequency: int) -> None:
        self._queue.put((entries, log_frequency))

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=10)

    def _run(self) -> None:
        f = None
        traces = index = 0
        try:
            while True:
                item = self._queue.get()
                if item is None:
                    break
                entries, frequency = item
                if f is None:
                    name = f"{self.path}.{index}" if frequency > 0 else self.path
                    f = open(name, "w", encoding="utf-8")  # noqa: SIM115  (closed below)
                    f.write("[")
                    first = True
                for entry in entries:
                    f.write(("" if first else ",") + json.dumps(entry, separators=(",", ":")))
                    first = False
                traces += 1
                f.flush()
                if frequency > 0 and traces % frequency == 0:
                    f.write("]")
                    f.close()
                    f, index = None, index + 1
        except OSError as e:
            log.error("trace file %s: %s; tracing to the file stops", self.path, e.strerror)
        finally:
            if f is not None:
                f.write("]")
                f.close()


class _Otel:
    """Spans through the OpenTelemetry SDK, exported over OTLP/HTTP in the background."""

    def __init__(self, startup: TraceStartup):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.provider = TracerProvider(resource=Resource.create(dict(startup.resource)))
        self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=startup.url)))
        self.tracer = self.provider.get_tracer("fpgaserve")
        self.propagator = TraceContextTextMapPropagator()
        # monotonic ns -> epoch ns, once (spans need wall-clock times)
        self.offset = time.time_ns() - time.monotonic_ns()

    def export(self, trace: Trace, request, stamps, compute, end: int, error) -> None:
        from opentelemetry import trace as otel
        from opentelemetry.trace import SpanKind, Status, StatusCode

        off = self.offset
        parent = self.propagator.extract({"traceparent": trace.parent}) if trace.parent else None
        root = self.tracer.start_span(
            "InferRequest", context=parent, kind=SpanKind.SERVER, start_time=stamps[0][1] + off
        )
        model = self.tracer.start_span(
            request.model.name,
            context=otel.set_span_in_context(root),
            start_time=stamps[0][1] + off,
            attributes={
                "triton.model_name": request.model.name,
                "triton.model_version": request.model.version,
                "triton.trace_id": trace.id,
                "triton.trace_parent_id": 0,
            },
        )
        for name, ns in stamps:
            model.add_event(name, timestamp=ns + off)
        if compute:
            span = self.tracer.start_span(
                "compute", context=otel.set_span_in_context(model), start_time=compute[0][1] + off
            )
            for name, ns in compute:
                span.add_event(name, timestamp=ns + off)
            span.end(end_time=compute[-1][1] + off)
        model.add_event("REQUEST_END", timestamp=end + off)
        if error is not None:
            model.set_status(Status(StatusCode.ERROR, getattr(error, "message", str(error))))
            root.set_status(Status(StatusCode.ERROR))
        model.end(end_time=end + off)
        root.end(end_time=end + off)

    def close(self) -> None:
        self.provider.force_flush(timeout_millis=5000)
        self.provider.shutdown()


__all__ = [
    "Trace",
    "TraceConfigError",
    "TraceStartup",
    "Tracer",
    "parse_trace_config",
]
