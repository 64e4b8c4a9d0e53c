"""Fixtures of the image tests (the registry and the busybox base are in tests/conftest.py)."""

from __future__ import annotations

import socket

import pytest


@pytest.fixture(autouse=True)
def isolated_environment(monkeypatch, tmp_path):
    """No credentials, CA bundles, caches or timestamps of the machine leak into a test."""
    for name in (
        "REGISTRY_AUTH_FILE",
        "SOURCE_DATE_EPOCH",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "PIP_INDEX_URL",
        "PIP_EXTRA_INDEX_URL",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker-config"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "xdg-runtime"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("VDK_ML_TRAINING_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def no_network(monkeypatch):
    """Any connection attempt fails the test (a dry run of a described base contacts nothing)."""

    def refuse(*args, **kwargs):
        raise AssertionError("the dry run must not contact anything")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
