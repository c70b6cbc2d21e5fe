"""Triton's response flag both sides of the Python backend read: the model's side
(``triton_python_backend_utils``: ``TRITONSERVER_RESPONSE_COMPLETE_FINAL``) gives it to a
decoupled response sender, the server's side (backend.py) ends the request's responses on it.
A module of its own so that the model's process imports nothing else of the backend for it."""

#: TRITONSERVER_RESPONSE_COMPLETE_FINAL (tritonserver.h): the last response of a request
RESPONSE_COMPLETE_FINAL = 1
