"""Every image test runs in the isolated environment (tests/support/fixtures.py)."""

import socket

import pytest


@pytest.fixture(autouse=True)
def _isolated(isolated_environment):
    """No credentials, CA bundles or caches of the machine reach the builder."""


@pytest.fixture
def no_network(monkeypatch):
    """Any connection attempt fails the test (a dry run of a described base contacts nothing)."""

    def refuse(*args, **kwargs):
        raise AssertionError("the dry run must not contact anything")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
