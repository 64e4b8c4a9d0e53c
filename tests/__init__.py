"""The test suite; `tests.support` holds what the tests share (see tests/conftest.py)."""
