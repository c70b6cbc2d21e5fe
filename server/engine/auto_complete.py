"""Triton's auto-complete: what a config leaves out is filled in from the model's files.

``detect_backend``: a config naming neither platform nor backend gets them from the model file
of its newest version folder (Triton's AutoCompleteBackendFields). ``auto_complete``: a config
without inputs or outputs gets them from the backend (``Backend.describe_io``, or the model's
own ``auto_complete_config`` for Triton's Python backend). ``--disable-auto-complete-config``
turns the second off.
"""

from __future__ import annotations

import re
from pathlib import Path

from .. import datatypes
from .. import model_config as mc
from .model_files import available_versions

# Triton's AutoCompleteBackendFields: a config naming neither platform nor backend (e.g. a
# RepositoryModelLoad override such as {"max_batch_size": 16}) gets them from the model file
# found in the newest version folder.
_DETECTED_BACKENDS = (("model.onnx", "onnxruntime_onnx", "onnxruntime"), ("model.py", "", "numpy"))


def detect_backend(config, model_dir: Path) -> None:
    for version in reversed(available_versions(model_dir)):
        for filename, platform, backend in _DETECTED_BACKENDS:
            path = model_dir / str(version) / filename
            if path.is_file():
                if filename == "model.py" and _is_triton_python_model(path):
                    backend = "python"  # Triton's choice for a model.py; ours is numpy's Model
                config.platform, config.backend = platform, backend
                return


def _is_triton_python_model(path: Path) -> bool:
    """Whether a model.py is written for Triton's Python backend (defines TritonPythonModel)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return re.search(r"^class\s+TritonPythonModel\b", f.read(), re.MULTILINE) is not None
    except OSError:
        return False


def auto_complete(config, backend_cls, version_dir: str) -> None:
    """Triton's auto-complete: fill inputs/outputs (and batching) from the model files."""
    completed = backend_cls.auto_complete(mc.config_dict(config), version_dir)
    if completed is not None:  # the model completed its config itself (Python backend)
        mc.replace_from_dict(config, completed)
        # Triton's normalizations apply to what the model added (a dynamic batcher's default
        # preferred size)
        mc.normalize(config, config.name, backend_cls.default_filename)
        return
    if config.input and config.output:
        return
    described = backend_cls.describe_io(mc.config_dict(config), version_dir)
    if described is None:
        return
    ins, outs, batched = described
    if batched and config.max_batch_size == 0 and not config.input and not config.output:
        # tritonserver's default-max-batch-size backend setting
        config.max_batch_size = 4
    if not batched and config.max_batch_size > 0:
        raise mc.ConfigError(
            f"model '{config.name}' has max_batch_size {config.max_batch_size} but its graph has no "
            "dynamic batch dimension"
        )
    for existing, described_list in ((config.input, ins), (config.output, outs)):
        if existing:
            continue
        for d in described_list:
            t = existing.add()
            t.name = d.name
            t.data_type = mc.pb.DataType.Value(datatypes.BY_WIRE[d.datatype].config)
            t.dims.extend(d.dims if d.dims else [1])
