"""The backend tests: Triton's Python backend served unchanged, each instance in its own process, and the
instance processes any backend can run in.
"""
