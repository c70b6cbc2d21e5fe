"""Requests for the decoupled ``repeat_int32`` model of tests/models (Triton's repeat contract)."""

from __future__ import annotations

import numpy as np
import tritonclient.grpc as grpcclient


def repeat_inputs(values, delay_ms=1, wait_ms=1):
    n = len(values)
    ins = [
        grpcclient.InferInput("IN", [n], "INT32"),
        grpcclient.InferInput("DELAY", [n], "UINT32"),
        grpcclient.InferInput("WAIT", [1], "UINT32"),
    ]
    ins[0].set_data_from_numpy(np.asarray(values, dtype=np.int32))
    ins[1].set_data_from_numpy(np.full(n, delay_ms, dtype=np.uint32))
    ins[2].set_data_from_numpy(np.array([wait_ms], dtype=np.uint32))
    return ins
