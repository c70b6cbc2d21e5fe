"""The engine: model repository and lifecycle, schedulers and batchers, model instances.

It executes protocol-free ``InferenceRequest``s (numpy arrays in, outputs encoded by the
request's own ``encode`` out) and knows nothing of the wire: no gRPC or HTTP, no request or
response message, no shared-memory region. It reads model configurations as Triton's
``ModelConfig`` protobuf messages (model_config.py, the protos' config schema). It finds
backends only through their registry (``fpgaserve.backends.backend_class``) and hosts them in
instance processes through ``fpgaserve.backends.hosting``.

One file a concept: model_version.py (the version and its repository entry), repository.py
(the registry) with its readers (model_reader.py, model_files.py, auto_complete.py) and
version_loader.py, instance.py and instance_thread.py (a model instance), scheduler.py (the
base) and one module per scheduler (direct_scheduler.py, dynamic_batcher.py,
sequence_batcher.py, ensemble_scheduler.py with ensemble_plan.py), then what they record
(statistics.py, latency.py, tracing.py) and what loads with a model (warmup.py, memory.py,
placement.py, repoagents.py, config_support.py)."""
