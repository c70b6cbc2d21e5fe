"""The engine: model repository and lifecycle, schedulers and batchers, model instances.

It executes protocol-free ``InferenceRequest``s (numpy arrays in, encoded outputs out) and
knows nothing of gRPC, HTTP or shared memory."""
