"""Fixture and helper modules the tests share (tests/ is on pytest's pythonpath: ``from support.x import y``).

No test module imports another test module: what two of them need lives here. Fixtures
shared by every area are in fixture modules registered by tests/conftest.py (``pytest_plugins``);
an area's own fixtures are in its folder's conftest.py.
"""
