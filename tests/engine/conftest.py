"""The engine tests: the model repository and its control modes, the schedulers (dynamic batcher, sequence
batcher, ensembles, decoupled models, ragged batches), reshape, warm-up, config fields, repository agents,
engine processes, and what the engine reports (statistics, metrics, latency summaries, tracing).
"""
