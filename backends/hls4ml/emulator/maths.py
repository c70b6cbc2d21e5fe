"""Integer and glibc helpers shared by the layer families."""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import os

import numpy as np

from ..firmware_graph import Layer, UnsupportedLayerError

_LIBM = None


def libm():
    """glibc's single-precision maths, the functions the C-sim's table initialisers call."""
    global _LIBM  # noqa: PLW0603  (loaded once per process, on first use)
    if _LIBM is None:
        lib = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
        for fn in ("expf", "tanhf"):
            getattr(lib, fn).restype = ctypes.c_float
            getattr(lib, fn).argtypes = [ctypes.c_float]
        lib.log.restype = ctypes.c_double
        lib.log.argtypes = [ctypes.c_double]
        _LIBM = lib
    return _LIBM


def blas_single_threaded() -> bool:
    """Whether numpy's OpenBLAS runs one thread, as it decides when it is loaded: the first
    positive OPENBLAS_NUM_THREADS, GOTO_NUM_THREADS or OMP_NUM_THREADS, else the CPUs this
    process may use. The server sets OPENBLAS_NUM_THREADS=1 before numpy is imported (cli.py);
    builders use this only to pick the faster of two bit-identical formulations."""
    for var in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"):
        try:
            n = int(os.environ.get(var, ""))
        except ValueError:
            continue
        if n > 0:
            return n == 1
    affinity = getattr(os, "sched_getaffinity", None)
    return (len(affinity(0)) if affinity is not None else os.cpu_count() or 1) == 1


def f64_map(fn: str, values: np.ndarray) -> np.ndarray:
    """glibc's double-precision function (std::log(double) in the table initialisers)."""
    f = getattr(libm(), fn)
    return np.array([f(float(v)) for v in np.asarray(values, np.float64)], dtype=np.float64)


def f32_map(fn: str, values: np.ndarray) -> np.ndarray:
    f = getattr(libm(), fn)
    return np.array([f(float(v)) for v in np.asarray(values, np.float32)], dtype=np.float32)


def ceillog2(n: int) -> int:
    return max(0, (n - 1).bit_length())


def trunc_div(num: np.ndarray, den: int) -> np.ndarray:
    """C integer division (toward zero) of an int64 array by a positive integer."""
    q = np.abs(num) // np.int64(den)
    return np.where(num < 0, -q, q)


def scaled_trunc(layer: Layer, bits: int, mul: int, den: int):
    """x -> trunc(x * mul / den) in C semantics, for int64 x of ``bits`` bits; the common
    factor is cancelled first so wide inputs with power-of-two table sizes never overflow."""
    g = math.gcd(mul, den)
    mul, den = mul // g, den // g
    if bits + mul.bit_length() > 62:
        raise UnsupportedLayerError(f"{layer.describe()}: x * table_size needs more than 62 bits (int64 raws)")
    m = np.int64(mul)
    if den == 1:
        return lambda x: x * m
    return lambda x: trunc_div(x * m, den)


def wrap32(v: np.ndarray) -> np.ndarray:
    return ((v + np.int64(1 << 31)) & np.int64((1 << 32) - 1)) - np.int64(1 << 31)
