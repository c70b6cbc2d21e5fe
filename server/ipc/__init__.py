"""Inter-process plumbing: gRPC frontend processes feeding one engine (issue 11)."""
