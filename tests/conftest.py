"""The shared fixtures (tests/support/fixtures.py) are a plugin of the whole suite."""

pytest_plugins = ["tests.support.fixtures"]
