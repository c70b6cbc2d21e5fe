"""Triton datatypes: wire names, model-config enums, numpy dtypes, typed-contents fields.

BF16 has no numpy dtype; it travels as ``uint16`` holding the raw bfloat16 bits (the upper
half of an IEEE float32), which is exactly what the wire carries. BYTES tensors are numpy
object arrays of ``bytes``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class DataType(NamedTuple):
    wire: str  # "INT32", "BYTES", ... (the KServe/Triton datatype string)
    config: str  # "TYPE_INT32", "TYPE_STRING", ... (model_config.proto DataType enum name)
    dtype: np.dtype  # numpy dtype the backends see
    itemsize: int  # bytes per element on the wire; 0 for variable-size BYTES
    contents_field: str | None  # InferTensorContents field for typed contents; None = raw only


_TABLE = [
    DataType("BOOL", "TYPE_BOOL", np.dtype(np.bool_), 1, "bool_contents"),
    DataType("UINT8", "TYPE_UINT8", np.dtype(np.uint8), 1, "uint_contents"),
    DataType("UINT16", "TYPE_UINT16", np.dtype(np.uint16), 2, "uint_contents"),
    DataType("UINT32", "TYPE_UINT32", np.dtype(np.uint32), 4, "uint_contents"),
    DataType("UINT64", "TYPE_UINT64", np.dtype(np.uint64), 8, "uint64_contents"),
    DataType("INT8", "TYPE_INT8", np.dtype(np.int8), 1, "int_contents"),
    DataType("INT16", "TYPE_INT16", np.dtype(np.int16), 2, "int_contents"),
    DataType("INT32", "TYPE_INT32", np.dtype(np.int32), 4, "int_contents"),
    DataType("INT64", "TYPE_INT64", np.dtype(np.int64), 8, "int64_contents"),
    DataType("FP16", "TYPE_FP16", np.dtype(np.float16), 2, None),
    DataType("FP32", "TYPE_FP32", np.dtype(np.float32), 4, "fp32_contents"),
    DataType("FP64", "TYPE_FP64", np.dtype(np.float64), 8, "fp64_contents"),
    DataType("BYTES", "TYPE_STRING", np.dtype(object), 0, "bytes_contents"),
    DataType("BF16", "TYPE_BF16", np.dtype(np.uint16), 2, None),
]

BY_WIRE: dict[str, DataType] = {t.wire: t for t in _TABLE}
BY_CONFIG: dict[str, DataType] = {t.config: t for t in _TABLE}

# numpy dtype -> wire name, for arrays whose Triton type is not declared anywhere
# (auto-completed configs). uint16 maps to UINT16, never BF16.
_BY_NUMPY: dict[np.dtype, str] = {t.dtype: t.wire for t in _TABLE if t.wire != "BF16"}


def wire_name_for_numpy(dtype: np.dtype) -> str | None:
    dtype = np.dtype(dtype)
    if dtype.kind in ("S", "U", "O"):
        return "BYTES"
    return _BY_NUMPY.get(dtype)
