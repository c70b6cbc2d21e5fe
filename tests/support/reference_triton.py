"""Helpers for running the REAL NVIDIA Triton server as a reference implementation.

The tests compare fpgaserve against ``tritonserver`` 2.51 (installed by
``/work/shared/tools/get-tritonserver`` into ``.tools/tritonserver``).  That binary
has no ONNX/TF backends, so this module writes a Triton *Python-backend* model
repository that implements the same contracts as Triton's "simple" example family
plus the FACILE dense network:

* ``simple``          mbs 8, INPUT0/INPUT1 INT32 [16] -> OUTPUT0 = IN0+IN1, OUTPUT1 = IN0-IN1
* ``simple_int8``     same with INT8 (add/sub in int32, cast back, i.e. wraps)
* ``simple_string``   same with TYPE_STRING: parse decimal strings, add/sub, format as plain ints
* ``simple_identity`` mbs 8, INPUT0/OUTPUT0 TYPE_STRING [-1], byte-exact identity
* ``facile``          mbs 16384, "input" FP32 [47] -> "output/BiasAdd" FP32 [1],
                      dense 47->36->ReLU->36->ReLU->1 with weights from an .npz file

Tests must skip when :func:`find_tritonserver` returns ``None``.

Typical use::

    exe = find_tritonserver()
    if exe is None:
        pytest.skip("reference tritonserver not installed")
    repo = write_python_backend_repository(tmp_path / "repo")
    proc = start_tritonserver(repo, grpc_port=18001, http_port=18000, metrics_port=18002)
    try:
        ...
    finally:
        stop_tritonserver(proc)
"""

from __future__ import annotations

import filecmp
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from support.tools import triton_stub_bin_dir

__all__ = [
    "ALL_MODELS",
    "FACILE_LAYERS",
    "FACILE_WEIGHT_KEYS",
    "default_facile_weights",
    "facile_reference",
    "find_tritonserver",
    "load_facile_weights",
    "start_tritonserver",
    "stop_tritonserver",
    "wait_until_ready",
    "write_python_backend_repository",
]

PROJECT_ROOT = Path(__file__).resolve().parents[2]
TRITONSERVER_WRAPPER = PROJECT_ROOT / ".tools" / "tritonserver" / "tritonserver"

ALL_MODELS = ("simple", "simple_int8", "simple_string", "simple_identity", "facile")

# (in, out) sizes of the three dense layers of FACILE; ReLU after the first two.
FACILE_LAYERS = ((47, 36), (36, 36), (36, 1))
# keys of the .npz file: kernel "w<i>" has shape (in, out), bias "b<i>" has shape (out,)
FACILE_WEIGHT_KEYS = ("w0", "b0", "w1", "b1", "w2", "b2")
FACILE_MAX_BATCH = 16384
_FACILE_WEIGHTS_FILE = "facile_weights.npz"

PathLike = str | os.PathLike


# --------------------------------------------------------------------------- lookup


def find_tritonserver() -> Path | None:
    """Return the tritonserver wrapper from ``.tools/tritonserver``, or None if absent."""
    exe = TRITONSERVER_WRAPPER
    if exe.is_file() and os.access(exe, os.X_OK):
        return exe
    return None


# --------------------------------------------------------------------------- FACILE weights


def default_facile_weights(seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic FACILE weights (numpy seed ``seed``), float32, He-style scaling."""
    rng = np.random.RandomState(seed)
    weights: dict[str, np.ndarray] = {}
    for i, (n_in, n_out) in enumerate(FACILE_LAYERS):
        weights[f"w{i}"] = (rng.standard_normal((n_in, n_out)) * np.sqrt(2.0 / n_in)).astype(np.float32)
        weights[f"b{i}"] = (rng.standard_normal((n_out,)) * 0.1).astype(np.float32)
    return weights


def load_facile_weights(path: PathLike) -> dict[str, np.ndarray]:
    """Load and validate FACILE weights from an .npz with keys w0,b0,w1,b1,w2,b2."""
    with np.load(path) as data:
        missing = [k for k in FACILE_WEIGHT_KEYS if k not in data]
        if missing:
            raise ValueError(f"{path}: missing FACILE weight arrays {missing}")
        weights = {k: np.asarray(data[k], dtype=np.float32) for k in FACILE_WEIGHT_KEYS}
    for i, (n_in, n_out) in enumerate(FACILE_LAYERS):
        if weights[f"w{i}"].shape != (n_in, n_out) or weights[f"b{i}"].shape != (n_out,):
            raise ValueError(
                f"{path}: layer {i} expects w{i} {(n_in, n_out)} and b{i} {(n_out,)}, got "
                f"{weights[f'w{i}'].shape} and {weights[f'b{i}'].shape}"
            )
    return weights


def facile_reference(x: np.ndarray, weights: Mapping[str, np.ndarray]) -> np.ndarray:
    """NumPy forward pass, identical arithmetic to the Python-backend model (float32)."""
    h = np.asarray(x, dtype=np.float32)
    n = len(FACILE_LAYERS)
    for i in range(n):
        h = h @ weights[f"w{i}"] + weights[f"b{i}"]
        if i < n - 1:
            h = np.maximum(h, np.float32(0))
    return h.astype(np.float32, copy=False)


# --------------------------------------------------------------------------- repository


def _tensor_block(kind: str, tensors: Sequence[tuple]) -> str:
    items = []
    for name, dtype, dims in tensors:
        dims_s = ", ".join(str(d) for d in dims)
        items.append(f'  {{\n    name: "{name}"\n    data_type: {dtype}\n    dims: [ {dims_s} ]\n  }}')
    return f"{kind} [\n" + ",\n".join(items) + "\n]\n"


def _config(name: str, max_batch_size: int, inputs, outputs, extra: str = "") -> str:
    text = f'name: "{name}"\nbackend: "python"\nmax_batch_size: {max_batch_size}\n'
    text += _tensor_block("input", inputs)
    text += _tensor_block("output", outputs)
    if extra:
        text += extra
    return text


def _pair_config(name: str, dtype: str) -> str:
    return _config(
        name,
        8,
        [("INPUT0", dtype, [16]), ("INPUT1", dtype, [16])],
        [("OUTPUT0", dtype, [16]), ("OUTPUT1", dtype, [16])],
    )


_SIMPLE_NUMERIC_PY = '''\
import numpy as np
import triton_python_backend_utils as pb_utils

OUT_DTYPE = np.{dtype}


class TritonPythonModel:
    """OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 (computed in int32, cast back)."""

    def execute(self, requests):
        responses = []
        for request in requests:
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy().astype(np.int32)
            in1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy().astype(np.int32)
            out0 = (in0 + in1).astype(OUT_DTYPE)
            out1 = (in0 - in1).astype(OUT_DTYPE)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", out0),
                pb_utils.Tensor("OUTPUT1", out1),
            ]))
        return responses
'''

_SIMPLE_STRING_PY = '''\
import numpy as np
import triton_python_backend_utils as pb_utils


def _to_int(v):
    if isinstance(v, (bytes, bytearray)):
        v = v.decode("utf-8")
    return int(str(v).strip())


class TritonPythonModel:
    """Decimal strings in, OUTPUT0 = a+b and OUTPUT1 = a-b formatted as plain integers."""

    def execute(self, requests):
        responses = []
        for request in requests:
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            try:
                a = np.vectorize(_to_int, otypes=[object])(in0)
                b = np.vectorize(_to_int, otypes=[object])(in1)
            except ValueError as e:
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("simple_string: input is not a decimal integer: " + str(e))))
                continue
            fmt = np.vectorize(lambda v: str(v).encode("utf-8"), otypes=[object])
            out0 = fmt(a + b).reshape(in0.shape)
            out1 = fmt(a - b).reshape(in0.shape)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", np.asarray(out0, dtype=np.object_)),
                pb_utils.Tensor("OUTPUT1", np.asarray(out1, dtype=np.object_)),
            ]))
        return responses
'''

_SIMPLE_IDENTITY_PY = '''\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """OUTPUT0 = INPUT0, byte for byte (NULs included)."""

    def execute(self, requests):
        responses = []
        for request in requests:
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", np.asarray(in0, dtype=np.object_)),
            ]))
        return responses
'''

_FACILE_PY = '''\
import os

import numpy as np
import triton_python_backend_utils as pb_utils

WEIGHTS_FILE = "{weights_file}"
N_LAYERS = {n_layers}


class TritonPythonModel:
    """FACILE: dense 47 -> 36 -> ReLU -> 36 -> ReLU -> 1, float32."""

    def initialize(self, args):
        path = os.path.join(args["model_repository"], args["model_version"], WEIGHTS_FILE)
        with np.load(path) as data:
            self.w = [np.asarray(data["w%d" % i], dtype=np.float32) for i in range(N_LAYERS)]
            self.b = [np.asarray(data["b%d" % i], dtype=np.float32) for i in range(N_LAYERS)]

    def execute(self, requests):
        responses = []
        for request in requests:
            h = pb_utils.get_input_tensor_by_name(request, "input").as_numpy().astype(np.float32, copy=False)
            for i in range(N_LAYERS):
                h = h @ self.w[i] + self.b[i]
                if i < N_LAYERS - 1:
                    h = np.maximum(h, np.float32(0))
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("output/BiasAdd", np.ascontiguousarray(h, dtype=np.float32)),
            ]))
        return responses
'''


def _write_model(repo: Path, name: str, config: str, model_py: str, extra_files: dict | None = None) -> None:
    model_dir = repo / name
    version_dir = model_dir / "1"
    version_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(config)
    (version_dir / "model.py").write_text(model_py)
    for fname, writer in (extra_files or {}).items():
        writer(version_dir / fname)


def write_python_backend_repository(
    dest: PathLike,
    models: Iterable[str] = ALL_MODELS,
    *,
    facile_weights: PathLike | None = None,
    facile_dynamic_batching: bool = False,
) -> Path:
    """Write a Triton Python-backend model repository into ``dest`` and return its path.

    ``models`` selects from :data:`ALL_MODELS`.  ``facile_weights`` is a path to an .npz
    with arrays w0 (47,36), b0 (36,), w1 (36,36), b1 (36,), w2 (36,1), b2 (1,); when
    None, :func:`default_facile_weights` (numpy seed 0) is used.  The weights are copied
    into ``facile/1/facile_weights.npz`` so the repository is self-contained.
    ``facile_dynamic_batching`` adds ``dynamic_batching {}`` to facile's config.
    """
    repo = Path(dest)
    repo.mkdir(parents=True, exist_ok=True)
    models = tuple(models)
    unknown = [m for m in models if m not in ALL_MODELS]
    if unknown:
        raise ValueError(f"unknown reference model(s) {unknown}; choose from {ALL_MODELS}")

    for name in models:
        if name == "simple":
            _write_model(repo, name, _pair_config(name, "TYPE_INT32"), _SIMPLE_NUMERIC_PY.format(dtype="int32"))
        elif name == "simple_int8":
            _write_model(repo, name, _pair_config(name, "TYPE_INT8"), _SIMPLE_NUMERIC_PY.format(dtype="int8"))
        elif name == "simple_string":
            _write_model(repo, name, _pair_config(name, "TYPE_STRING"), _SIMPLE_STRING_PY)
        elif name == "simple_identity":
            cfg = _config(name, 8, [("INPUT0", "TYPE_STRING", [-1])], [("OUTPUT0", "TYPE_STRING", [-1])])
            _write_model(repo, name, cfg, _SIMPLE_IDENTITY_PY)
        elif name == "facile":
            weights = default_facile_weights(0) if facile_weights is None else load_facile_weights(facile_weights)

            def _save(path: Path, weights=weights) -> None:
                np.savez(path, **weights)

            cfg = _config(
                name,
                FACILE_MAX_BATCH,
                [("input", "TYPE_FP32", [47])],
                [("output/BiasAdd", "TYPE_FP32", [1])],
                extra="dynamic_batching { }\n" if facile_dynamic_batching else "",
            )
            _write_model(
                repo,
                name,
                cfg,
                _FACILE_PY.format(weights_file=_FACILE_WEIGHTS_FILE, n_layers=len(FACILE_LAYERS)),
                {_FACILE_WEIGHTS_FILE: _save},
            )
    return repo


# --------------------------------------------------------------------------- server process


# the Python the stub is built for when it cannot be told from the installation: the one
# ../shared/tools/get-tritonserver documents (it copies the stub for its own python3's version)
DEFAULT_STUB_PYTHON = (3, 11)


def stub_python_version(executable: PathLike | None = None) -> tuple[int, int]:
    """The Python version of the Python-backend stub the tritonserver wrapper uses.

    The installer copies ``python_backend_stubs/<X.Y>/triton_python_backend_stub`` (one per
    Python, each linked against its libpython) into ``backends/python``; the copy identifies it.
    """
    wrapper = Path(executable) if executable is not None else TRITONSERVER_WRAPPER
    root = wrapper.parent / "wheel" / "pytriton" / "tritonserver"
    stub = root / "backends" / "python" / "triton_python_backend_stub"
    if stub.is_file():
        for candidate in sorted((root / "python_backend_stubs").glob("*/triton_python_backend_stub")):
            if filecmp.cmp(stub, candidate, shallow=False):
                major, _, minor = candidate.parent.name.partition(".")
                return int(major), int(minor)
    return DEFAULT_STUB_PYTHON


def _python_bin_dir(executable: PathLike | None = None) -> Path:
    """Directory whose python3 the Python-backend stub runs: the stub's Python version with
    numpy<2 (with numpy 2 the stub returns empty outputs), a small venv tools.py builds once."""
    return triton_stub_bin_dir(stub_python_version(executable))


def wait_until_ready(
    http_port: int, timeout: float = 120.0, proc: subprocess.Popen | None = None, host: str = "127.0.0.1"
) -> None:
    """Poll ``GET /v2/health/ready`` until it answers 200; raise on timeout or process exit."""
    url = f"http://{host}:{http_port}/v2/health/ready"
    deadline = time.monotonic() + timeout
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(
                f"tritonserver exited with code {proc.returncode} before becoming ready" + _log_tail(proc)
            )
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"tritonserver not ready on {url} after {timeout} s" + _log_tail(proc))
        time.sleep(0.25)


def _log_tail(proc: subprocess.Popen | None, n: int = 40) -> str:
    path = getattr(proc, "log_path", None)
    if not path:
        return ""
    try:
        lines = Path(path).read_text(errors="replace").splitlines()[-n:]
    except OSError:
        return ""
    return "\n--- tritonserver log tail ---\n" + "\n".join(lines)


def start_tritonserver(
    repo: PathLike,
    grpc_port: int,
    http_port: int,
    metrics_port: int,
    *,
    extra_args: Sequence[str] = (),
    model_control_mode: str | None = None,
    log_path: PathLike | None = None,
    timeout: float = 120.0,
    executable: PathLike | None = None,
) -> subprocess.Popen:
    """Start the real tritonserver on ``repo`` and wait until ``/v2/health/ready`` is 200.

    The returned Popen has an extra attribute ``log_path`` (stdout+stderr of the server).
    The server runs in its own process group; stop it with :func:`stop_tritonserver`.
    A venv with only numpy<2 (``.tools/venv-triton-stub-<X.Y>``, built on first use) is put
    first on PATH, because the Python-backend stub runs the first ``python3`` on PATH and needs
    numpy<2 (with numpy 2 it returns empty outputs); the project's venv runs numpy 2.
    """
    exe = Path(executable) if executable is not None else find_tritonserver()
    if exe is None:
        raise FileNotFoundError(f"tritonserver wrapper not found at {TRITONSERVER_WRAPPER}")
    repo = Path(repo).resolve()
    cmd = [
        str(exe),
        f"--model-repository={repo}",
        f"--grpc-port={grpc_port}",
        f"--http-port={http_port}",
        f"--metrics-port={metrics_port}",
    ]
    if model_control_mode is not None:
        cmd.append(f"--model-control-mode={model_control_mode}")
    cmd.extend(extra_args)

    env = dict(os.environ)
    env["PATH"] = str(_python_bin_dir(exe)) + os.pathsep + env.get("PATH", "")
    env.pop("PYTHONHOME", None)

    log = Path(log_path) if log_path is not None else repo.parent / f"tritonserver-{grpc_port}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True
        )
    proc.log_path = str(log)  # type: ignore[attr-defined]
    try:
        wait_until_ready(http_port, timeout=timeout, proc=proc)
    except BaseException:
        stop_tritonserver(proc)
        raise
    return proc


def stop_tritonserver(proc: subprocess.Popen, timeout: float = 30.0) -> None:
    """SIGTERM the server (it unloads models and stops its stubs), then SIGKILL its group."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
    # the server was started with start_new_session=True, so its pid is its process group id;
    # this reaps any Python-backend stubs left behind.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


if __name__ == "__main__":  # pragma: no cover - manual helper
    import argparse

    ap = argparse.ArgumentParser(description="write the Python-backend reference repository")
    ap.add_argument("dest")
    ap.add_argument("--models", nargs="*", default=list(ALL_MODELS))
    ap.add_argument("--facile-weights")
    ap.add_argument("--facile-dynamic-batching", action="store_true")
    ns = ap.parse_args()
    print(
        write_python_backend_repository(
            ns.dest, ns.models, facile_weights=ns.facile_weights, facile_dynamic_batching=ns.facile_dynamic_batching
        )
    )
