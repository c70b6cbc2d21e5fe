"""``backend: "python"``: Triton's Python backend, one package as Triton's python_backend is.

=============================================  =================================================
``backend.py``                                 the server's side: ``PythonBackend``, an instance
                                               process per instance (``fpgaserve.backends.hosting``)
``host.py``                                    the model's side, in that process: imports
                                               ``model.py`` and calls ``TritonPythonModel``
``stub/triton_python_backend_utils.py``        the module models import (``pb_utils``), put on
                                               the instance process's ``sys.path`` only
``response_flags.py``                          Triton's response flag, shared by both sides
=============================================  =================================================

Importing this package imports nothing: the registry loads ``backend.py`` by name.
"""
