"""``python -m fpgaserve.backends.hosting <channel fd> <lifeline fd>``: the program of a model
instance's process (``instance_worker.main``), started by ``ProcessBackend``.

An entry of its own, so that the worker module runs under its own name (hosted code imports
it to reach the worker, ``current()``, and must find the one that runs), never as __main__.
"""

import sys

from .instance_worker import main

main(sys.argv[1:])
