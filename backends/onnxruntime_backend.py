"""``platform: "onnxruntime_onnx"`` / ``backend: "onnxruntime"``: ``<version>/model.onnx``.

Thread counts come from the config ``parameters`` with the names Triton's ONNX Runtime
backend uses (``intra_op_thread_count``, ``inter_op_thread_count``). The default intra-op
count is 1: each model instance has its own worker, so instances, not ORT threads, are the
unit of parallelism (and a 2-core host is not oversubscribed).
"""

from __future__ import annotations

import numpy as np

from .base import Backend, BackendError, TensorDescription, config_parameter

# ONNX tensor element type strings -> Triton wire names
_ORT_TYPES = {
    "tensor(bool)": "BOOL",
    "tensor(uint8)": "UINT8",
    "tensor(uint16)": "UINT16",
    "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64",
    "tensor(int8)": "INT8",
    "tensor(int16)": "INT16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(float16)": "FP16",
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(string)": "BYTES",
}


def _session(path: str, config: dict):
    """An ONNX Runtime session of ``path`` with the config's thread counts (see the module
    docstring), on the CPU; BackendError when ORT cannot load it."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    try:
        opts.intra_op_num_threads = int(config_parameter(config, "intra_op_thread_count", "1"))
        opts.inter_op_num_threads = int(config_parameter(config, "inter_op_thread_count", "1"))
    except ValueError as e:
        raise BackendError(f"bad thread count parameter: {e}") from None
    opts.log_severity_level = 3
    try:
        return ort.InferenceSession(path, sess_options=opts, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own exception types
        raise BackendError(f"failed to load ONNX model {path}: {e}") from e


def _describe(args) -> list[tuple[str, str, list]]:
    out = []
    for a in args:
        if a.type not in _ORT_TYPES:
            raise BackendError(f"tensor '{a.name}' has unsupported ONNX type {a.type}")
        dims = [d if isinstance(d, int) and d >= 0 else -1 for d in a.shape]
        out.append((a.name, _ORT_TYPES[a.type], dims))
    return out


class OnnxRuntimeBackend(Backend):
    default_filename = "model.onnx"

    def __init__(self, config: dict, version_dir: str, instance_index: int, backend_config: dict | None = None):
        super().__init__(config, version_dir, instance_index, backend_config)
        self.session = _session(self.model_file(config, version_dir), config)
        self._inputs = {a.name: a.type for a in self.session.get_inputs()}
        declared = config.get("input", [])
        if len(declared) != len(self._inputs) and not any(i.get("optional") for i in declared):
            # Triton's ONNX Runtime backend: a config that does not declare the graph's inputs
            # (auto-complete off, or an override without them) fails the load, with its text
            raise BackendError(
                f"unable to load model '{config.get('name', '')}', configuration expects {len(declared)} inputs, "
                f"model provides {len(self._inputs)}"
            )
        self._string_inputs = frozenset(n for n, t in self._inputs.items() if t == "tensor(string)")
        self._output_names = [o["name"] for o in config.get("output", [])] or [
            o.name for o in self.session.get_outputs()
        ]
        self._string_outputs = any(o.type == "tensor(string)" for o in self.session.get_outputs())
        # The binding's own run, past InferenceSession.run's Python checks (input names, which
        # the engine checked against the config already, and a retry for GPU providers we never
        # enable): 1.7 of ORT's 6.9 µs per call of the bundled `simple` model (measured,
        # ORT 1.32). A private attribute: without it, the public run.
        run = getattr(getattr(self.session, "_sess", None), "run", None)
        self._run = run if callable(run) else None

    @classmethod
    def describe_io(cls, config: dict, version_dir: str):
        session = _session(cls.model_file(config, version_dir), config)
        ins = _describe(session.get_inputs())
        outs = _describe(session.get_outputs())
        # The graph batches when every tensor's first dim is dynamic; Triton then strips it.
        batched = all(len(d) >= 1 and d[0] == -1 for _, _, d in ins + outs)
        strip = 1 if batched else 0
        return (
            [TensorDescription(n, t, tuple(d[strip:])) for n, t, d in ins],
            [TensorDescription(n, t, tuple(d[strip:])) for n, t, d in outs],
            batched,
        )

    @staticmethod
    def open_session(path: str, config: dict):
        """An ONNX Runtime session of the model file ``path``, set up as this backend sets up its
        own (for a backend that runs an ONNX model as part of its work: hls4ml's float
        reference); BackendError when it cannot load."""
        return _session(path, config)

    def execute(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        feed = inputs
        if self._string_inputs:
            feed = dict(inputs)
            for name in self._string_inputs.intersection(inputs):
                # ORT wants str objects; Triton BYTES are raw bytes
                feed[name] = np.vectorize(lambda b: b.decode("utf-8", "surrogateescape"), otypes=[object])(inputs[name])
        if self._run is not None:
            results = self._run(self._output_names, feed, None)
        else:
            results = self.session.run(self._output_names, feed)
        out = dict(zip(self._output_names, results))
        if not self._string_outputs:
            return out
        for name, value in out.items():
            if value.dtype.kind in ("U", "O"):
                out[name] = np.vectorize(
                    lambda s: s.encode("utf-8", "surrogateescape") if isinstance(s, str) else s, otypes=[object]
                )(value)
        return out
