"""A numpy-backend ``model.py`` that records each execute() it receives (tests/engine/test_warmup.py,
tests/differential/test_triton_differential_warmup.py)."""

from __future__ import annotations

# Records each execute(): [instance id, rows, first input's shape, dtype, values].
RECORDING_MODEL = """
import json, os
import numpy as np

class Model:
    def initialize(self, config, version_dir):
        self.path = os.path.join(os.path.dirname(version_dir), "record.jsonl")
        params = config.get("parameters", {})
        self.fail = params.get("fail", {}).get("string_value", "")

    def execute(self, inputs):
        x = inputs["INPUT0"]
        values = [v.decode("latin-1") if isinstance(v, bytes) else float(v) for v in x.reshape(-1)]
        with open(self.path, "a") as f:
            f.write(json.dumps([id(self), int(x.shape[0]), list(x.shape), str(x.dtype), values]) + "\\n")
        if self.fail:
            raise ValueError(self.fail)
        return {"OUTPUT0": x}
"""
