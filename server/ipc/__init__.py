"""The server's processes talking to each other: frontend processes (``--frontend-processes``)
serving clients for N engine processes (``--engine-processes``), each engine serving its own
models. ``remote.RemoteDataPlane`` is the data plane a frontend process calls; the engine's
``engine_server.EngineServer`` answers it; ``arena.py`` holds tensors in shared memory between
them; ``engines.py`` starts and routes to the other engines; ``supervisor.py`` keeps the
frontend processes running; ``frontend_process.py`` and ``engine_process.py`` are the programs."""
