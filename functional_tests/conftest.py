"""The end-to-end tests use the fixtures of the whole suite (a registry, podman, the Debian base)."""

pytest_plugins = ["tests.support.fixtures"]
