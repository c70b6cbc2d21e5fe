"""``model_warmup``: the samples a model version runs on every instance before it is READY.

Triton 2.51 (observed with its Python backend): a ``ModelWarmup`` entry becomes
``batch_size`` requests of ONE row each (``[1, *dims]`` for a batching model, ``dims``
otherwise), executed together as one batch, ``count`` times (0 counts as 1), on every
instance, samples in the order of the config; ``batch_size`` 0 runs nothing. A failing
sample fails the version's load (``failed to run warmup sample '<name>': <errors>; ``).
Warm-up requests go straight to the instance, past the scheduler: they are not counted in
the statistics and get no sequence control inputs.

Every size is checked before anything is allocated: a config can come from a client
(RepositoryModelLoad's override), and Triton itself crashes on a huge ``dims`` or on a
``batch_size`` above ``max_batch_size``; here both are refused with a reason.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from fpgaserve.backends.base import BackendError, path_inside

from .. import datatypes
from ..errors import unexpected_shape

# Upper bound on one warm-up sample's input bytes, all its inputs and the batch of its
# batch_size rows together: warm-up data is small by nature, and the bound is what keeps a
# hostile config from making the server allocate without limit.
MAX_WARMUP_SAMPLE_BYTES = 64 * 1024 * 1024
# Upper bound on batch_size x count for one sample, so a config cannot keep a load busy forever.
MAX_WARMUP_RUNS = 1 << 20


class WarmupError(Exception):
    """A warm-up sample that cannot be built or did not run.

    ``code`` is the Triton status name the reason is shown with ("Invalid argument",
    "Internal"): Triton's load error and repository index read "<code>: <text>"."""

    def __init__(self, text: str, code: str = "Invalid argument"):
        super().__init__(text)
        self.text = text
        self.code = code

    @property
    def reason(self) -> str:
        return f"{self.code}: {self.text}"


_NO_ID = "[request id: <id_unknown>] "  # Triton's prefix on a warm-up request's validation errors


@dataclass
class WarmupSample:
    """One ``ModelWarmup`` entry, ready to run: ``inputs`` hold ONE request's tensors."""

    name: str
    batch_size: int
    count: int
    inputs: dict[str, np.ndarray]


def _bytes_elements(raw: bytes, count: int, where: str) -> np.ndarray:
    """``count`` BYTES elements from Triton's layout (each a 4-byte little-endian length,
    then that many bytes); the lengths are checked against what the buffer holds."""
    out = np.empty(count, dtype=object)
    offset = 0
    for i in range(count):
        if offset + 4 > len(raw):
            raise WarmupError(f"{where}: expected {count} BYTES elements, the data holds {i}")
        length = int.from_bytes(raw[offset : offset + 4], "little")
        offset += 4
        if length > len(raw) - offset:
            raise WarmupError(f"{where}: BYTES element {i} has length {length}, past the end of the data")
        out[i] = raw[offset : offset + length]
        offset += length
    return out  # (bytes after the last element are ignored, as Triton reads a longer file's head)


def _read_file(model_dir: str, name: str, needed: int, where: str) -> bytes:
    """The first ``needed`` bytes of a file in the model's ``warmup/`` folder (Triton reads a
    longer file's head; ``needed`` is already bounded). BYTES data: ``needed`` < 0, the
    whole file, which must then be no larger than ``-needed``."""
    warmup_dir = os.path.join(model_dir, "warmup")
    try:
        # kept inside the model's warmup/ folder: the config may come from a client
        path = path_inside(warmup_dir, warmup_dir, name, "input_data_file")
    except BackendError as e:
        raise WarmupError(f"{where}: {e} (it must name a file in the model's warmup/ folder)") from None
    try:
        with open(path, "rb") as f:
            if needed >= 0:
                return f.read(needed)
            size = os.fstat(f.fileno()).st_size
            if size > -needed:
                raise WarmupError(f"{where}: input_data_file '{name}' has {size} bytes, more than {-needed}")
            return f.read(-needed)
    except OSError as e:  # Triton's text
        shown = os.path.join(warmup_dir, name)
        raise WarmupError(f"failed to open text file for read {shown}: {e.strerror}", "Internal") from None


def build_samples(config, model_dir: str, limit: int = MAX_WARMUP_SAMPLE_BYTES) -> list[WarmupSample]:
    """The config's warm-up samples, validated against its inputs (with Triton's texts where
    Triton has one); WarmupError says why not. Nothing is allocated before its size is known
    to be under ``limit``."""
    from fpgaserve.protos import inference as pb

    declared = {t.name: t for t in config.input}
    batched = config.max_batch_size > 0
    samples = []
    for setting in config.model_warmup:
        where = f"warmup setting '{setting.name}'"
        if batched and setting.batch_size > config.max_batch_size:
            raise WarmupError(
                f"{where}: batch_size {setting.batch_size} exceeds the model's max_batch_size {config.max_batch_size}"
            )
        count = max(setting.count, 1)
        if setting.batch_size * count > MAX_WARMUP_RUNS:
            raise WarmupError(f"{where}: batch_size x count is more than {MAX_WARMUP_RUNS} requests")
        inputs: dict[str, np.ndarray] = {}
        sample_bytes = 0
        # a batching model gets the batch_size rows concatenated: the sample costs that much
        copies = max(setting.batch_size, 1) if batched else 1
        for name, spec in setting.inputs.items():
            here = f"{where}, input '{name}'"
            tensor = declared.get(name)
            if tensor is None:  # Triton leaves it out of the request (observed), never allocated
                continue
            if spec.data_type != tensor.data_type:
                declared_type = datatypes.BY_CONFIG.get(pb.DataType.Name(spec.data_type))
                shown = declared_type.wire if declared_type is not None else "<invalid>"
                wanted = datatypes.BY_CONFIG[pb.DataType.Name(tensor.data_type)].wire
                raise WarmupError(
                    f"{_NO_ID}inference input '{name}' data-type is '{shown}', but model '{config.name}' "
                    f"expects '{wanted}'"
                )
            dims = list(spec.dims)
            if any(d < 0 for d in dims):  # Triton's text
                raise WarmupError(
                    f"warmup setting expects all variable-size dimensions are specified for input '{name}'"
                )
            config_dims = list(tensor.dims)
            if len(dims) != len(config_dims) or any(c not in (-1, d) for c, d in zip(config_dims, dims)):
                expected = ([-1] if batched else []) + config_dims
                got = ([1] if batched else []) + dims
                raise WarmupError(unexpected_shape(_NO_ID, name, config.name, expected, got, batched).message)
            dtype = datatypes.BY_CONFIG[pb.DataType.Name(spec.data_type)]
            # bounded before anything is allocated (math.prod of Python ints cannot overflow)
            elements = math.prod(dims)
            per_element = dtype.itemsize or 8  # a BYTES element: one object reference
            sample_bytes += elements * per_element * copies
            if sample_bytes > limit:
                raise WarmupError(
                    f"{here}: dims {dims} of {dtype.wire} with batch_size {setting.batch_size} bring the sample to "
                    f"{sample_bytes} bytes, more than the {limit} a warm-up sample may have"
                )
            shape = ([1] if batched else []) + dims
            kind = spec.WhichOneof("input_data_type")
            if kind == "input_data_file":
                if dtype.wire == "BYTES":
                    raw = _read_file(model_dir, spec.input_data_file, -limit, here)
                    array = _bytes_elements(raw, elements, here)
                else:
                    expected = elements * dtype.itemsize
                    raw = _read_file(model_dir, spec.input_data_file, expected, here)
                    if len(raw) < expected:  # Triton's text (sic: no space before "only")
                        raise WarmupError(
                            f"{_NO_ID}warmup setting expects {expected} bytes, but the data provided from "
                            f"{spec.input_data_file}only has {len(raw)} bytes"
                        )
                    array = np.frombuffer(raw, dtype=dtype.dtype).copy()
            elif dtype.wire == "BYTES":
                # random BYTES are empty strings too: random bytes would not be valid
                # length-prefixed elements
                array = np.full(elements, b"", dtype=object)
            elif kind == "random_data":
                rng = np.random.default_rng()
                array = np.frombuffer(rng.bytes(elements * dtype.itemsize), dtype=dtype.dtype).copy()
                if dtype.wire == "BOOL":
                    array = array.view(np.uint8) & 1
                    array = array.astype(np.bool_)
            else:  # zero_data, or no data kind at all (Triton then sends zeros as well)
                array = np.zeros(elements, dtype=dtype.dtype)
            inputs[name] = array.reshape(shape)
        missing = [n for n, t in declared.items() if n not in inputs and not t.optional]
        if missing and setting.batch_size:  # Triton's text (core checks each request)
            given = "[" + ",".join(f"'{n}'" for n in inputs) + "]"
            optional = sum(1 for t in declared.values() if t.optional)
            expected_n = (
                f"expected {len(declared)} inputs"
                if not optional
                else f"expected number of inputs between {len(declared) - optional} and {len(declared)}"
            )
            raise WarmupError(
                f"{_NO_ID}{expected_n} but got {len(inputs)} inputs for model '{config.name}'. Got input(s) {given}, "
                f"but missing required input(s) [{','.join(repr(n) for n in missing)}]. Please provide all "
                "required input(s)."
            )
        samples.append(WarmupSample(setting.name, setting.batch_size, count, inputs))
    return samples
