"""Loading one model version: its instances, their warm-up, its scheduler (the repository
calls this for each version a load selects; model_reader.py chose the backend class).

Instances are built one after another, each backend on its instance's own thread (backends
that keep thread-affine state, such as device handles, are created where they run). A version
runs its instances in instance processes (backends/hosting/) when its config says
``instance_process: true``, or when the backend asks for it (``instance_process_by_default``:
code fpgaserve did not write, such as a compiled C-simulation), decided per version.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from pathlib import Path

from fpgaserve.backends import BackendError
from fpgaserve.backends.hosting import ProcessBackend, hosted

from .. import model_config as mc
from ..errors import InferenceError, internal
from .direct_scheduler import DirectScheduler
from .dynamic_batcher import DynamicBatcher
from .ensemble_plan import Step
from .ensemble_scheduler import EnsembleScheduler
from .instance import ModelInstance
from .latency import LatencyConfig, LatencyRecorder
from .memory import batch_memory
from .model_reader import INSTANCE_PROCESS_PARAMETER
from .model_version import ModelVersion, VersionLoadError
from .scheduler import Scheduler
from .sequence_batcher import SequenceBatcher
from .warmup import WarmupError, build_samples

log = logging.getLogger("fpgaserve.repository")


async def load_version(
    name: str,
    version: int,
    config,
    cls,
    model_dir: Path,
    labels: dict[str, list[str]] | None,
    *,
    latency: LatencyConfig,
    backend_config: dict,
    instance_calls=None,
) -> ModelVersion:
    """Build version ``version`` of model ``name``: its instances (each backend built on its
    instance's own thread, in an instance process where the config or the backend asks for
    one), their warm-up, then its scheduler, started. ``backend_config``: the server's
    ``--backend-config`` settings by backend name; ``instance_calls``: where a backend in an
    instance process sends its calls into the server (BLS requests), injected by the data
    plane (``ProcessBackend.bind_engine``). Raises InferenceError with Triton's load texts
    (VersionLoadError when the warm-up failed)."""
    loop = asyncio.get_running_loop()
    version_dir = str(model_dir / str(version))
    mv = ModelVersion(name, version, config, version_dir, str(model_dir), labels)
    if latency.any_distribution:
        mv.stats.latencies = LatencyRecorder(latency, decoupled=mv.decoupled, buckets=mc.histogram_buckets(config))
    cfg_dict = mc.config_dict(config)
    backend_settings = backend_config.get(mc.backend_name(config), {})
    if (
        not issubclass(cls, ProcessBackend)
        and not mc.parameter(config, INSTANCE_PROCESS_PARAMETER, "")
        and await loop.run_in_executor(None, cls.instance_process_by_default, cfg_dict, version_dir, backend_settings)
    ):
        # per version: what the backend runs (an hls4ml model's fpga-mode) may differ by version
        cls = hosted(cls)
    instances: list[ModelInstance] = []
    index = 0
    try:
        for group in config.instance_group:
            for _ in range(group.count):
                instance = ModelInstance(mv, None, index)
                # Build the backend on the instance's own thread: backends that keep
                # thread-affine state (device handles) are then created where they run.
                try:
                    instance.backend = await loop.run_in_executor(
                        instance.executor,
                        functools.partial(cls, cfg_dict, version_dir, index, backend_config=backend_settings),
                    )
                except BaseException:
                    instance.executor.shutdown(wait=False)
                    raise
                instances.append(instance)
                # a backend in its own process may call models (BLS): through the data plane
                bind = getattr(instance.backend, "bind_engine", None)
                if bind is not None and instance_calls is not None:
                    bind(loop, instance_calls)
                index += 1
        if config.model_warmup:
            await warm_up(mv, instances)
    except WarmupError as e:
        for inst in instances:
            await loop.run_in_executor(None, inst.close)
        raise VersionLoadError(name, version, e.reason) from None
    except BackendError as e:
        for inst in instances:
            await loop.run_in_executor(None, inst.close)
        raise internal(f"failed to load '{name}' version {version}: {e}") from None
    except Exception as e:
        for inst in instances:
            await loop.run_in_executor(None, inst.close)
        detail = e.message if isinstance(e, InferenceError) else f"{type(e).__name__}: {e}"
        raise internal(f"failed to load '{name}' version {version}: {detail}") from None
    mv.scheduler = make_scheduler(mv, instances)
    mv.scheduler.start()
    # what the config lets this version hold, said once per load (see memory.py)
    log.info("%s", batch_memory(config, len(instances), [i.backend for i in instances]).describe())
    return mv


async def warm_up(mv: ModelVersion, instances: list[ModelInstance]) -> None:
    """Run the config's ``model_warmup`` samples on every instance before the version is
    READY (on a card each instance is a compute unit, so every CU is exercised). Samples
    run in the config's order; the instances run each one side by side. The executions
    are counted in the statistics, as Triton counts them. WarmupError: the first
    instance's (in index order) failure."""
    loop = asyncio.get_running_loop()
    samples = await loop.run_in_executor(None, build_samples, mv.config, mv.model_dir)
    where = ", ".join(f"{i.index}" + (f" ({i.backend.location()})" if i.backend.location() else "") for i in instances)
    for sample in samples:
        start = time.monotonic()

        def run(instance: ModelInstance, sample=sample) -> list:
            return [instance.warm_up(sample) for _ in range(sample.count)]

        outcomes = await asyncio.gather(
            *(loop.run_in_executor(i.executor, run, i) for i in instances), return_exceptions=True
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        for outcome in outcomes:
            for executed in outcome:  # type: ignore[union-attr]
                for rows, timings, duration_ns in executed:
                    mv.stats.record_execution(rows, timings)
                    mv.stats.record_successes(rows, duration_ns * rows, [0] * rows, timings)
        log.info(
            "model %s: warm-up '%s' x %d on %d instances [%s] in %.3f s",
            mv.name,
            sample.name,
            sample.count,
            len(instances),
            where,
            time.monotonic() - start,
        )


def ensemble_version(
    name: str, version: int, config, model_dir: Path, labels, steps: list[Step], lookup, latency: LatencyConfig
) -> ModelVersion:
    """Version ``version`` of ensemble ``name``: no instances, its scheduler (started) runs
    ``steps`` on the composing models that ``lookup(name, version)`` resolves per request."""
    mv = ModelVersion(name, version, config, str(model_dir / str(version)), str(model_dir), labels)
    if latency.any_distribution:
        mv.stats.latencies = LatencyRecorder(latency, buckets=mc.histogram_buckets(config))
    mv.scheduler = EnsembleScheduler(mv, steps, lookup)
    mv.scheduler.start()
    return mv


def make_scheduler(model, instances: list[ModelInstance]) -> Scheduler:
    """Triton's choice: a ``dynamic_batching`` block (on a batching model, not decoupled)
    gets the dynamic batcher; otherwise every request executes alone."""
    config = model.config
    if config.HasField("sequence_batching"):
        return SequenceBatcher(model, instances)
    if config.HasField("dynamic_batching") and model.max_batch_size > 0 and not model.decoupled:
        return DynamicBatcher(model, instances)
    return DirectScheduler(model, instances)
