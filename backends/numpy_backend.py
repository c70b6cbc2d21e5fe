"""``backend: "numpy"``: a Python model in ``<version>/model.py``.

``model.py`` defines ``class Model`` with an optional
``initialize(self, config: dict, model_dir: str)`` and
``execute(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]`` that works on a
whole batch. Exceptions from ``execute`` fail that batch with INTERNAL; the model stays loaded.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys

import numpy as np

from .base import Backend, BackendError

_module_ids = itertools.count()


class NumpyBackend(Backend):
    default_filename = "model.py"
    executes_model_files = True  # imports model.py

    def __init__(self, config: dict, version_dir: str, instance_index: int, backend_config: dict | None = None):
        super().__init__(config, version_dir, instance_index, backend_config)
        path = self.model_file(config, version_dir)
        # A fresh module object per instance: instances must not share module-level state
        # by accident, and reloading a changed model.py must not see the old module.
        module_name = f"fpgaserve_numpy_model_{next(_module_ids)}"
        spec = importlib.util.spec_from_file_location(module_name, path)
        # TODO: spec is None when default_model_filename does not end in .py, and this fails
        # with an AttributeError rather than a BackendError (kept as is: behaviour unchanged).
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)  # type: ignore[union-attr]
        except BaseException as e:  # model code may even raise SystemExit at import
            sys.modules.pop(module_name, None)
            raise BackendError(f"failed to import {path}: {type(e).__name__}: {e}") from None
        finally:
            self._module_name = module_name
        model_cls = getattr(module, "Model", None)
        if model_cls is None:
            raise BackendError(f"{path} does not define 'class Model'")
        try:
            self.model = model_cls()
            init = getattr(self.model, "initialize", None)
            if init is not None:
                init(config, version_dir)
        except BaseException as e:
            raise BackendError(f"{path}: Model initialization failed: {type(e).__name__}: {e}") from None
        if not callable(getattr(self.model, "execute", None)):
            raise BackendError(f"{path}: Model has no execute(inputs) method")

    def execute(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.model.execute(inputs)

    def close(self) -> None:
        finalize = getattr(self.model, "finalize", None)
        if finalize is not None:
            finalize()
        sys.modules.pop(self._module_name, None)
