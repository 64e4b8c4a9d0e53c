"""Every image unit test runs in the isolated environment (tests/support/fixtures.py)."""

import pytest


@pytest.fixture(autouse=True)
def _isolated(isolated_environment):
    """No credentials, CA bundles or caches of the machine reach the builder."""
