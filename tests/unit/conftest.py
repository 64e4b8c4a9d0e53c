"""Unit tests start no process, no server and open no connection: what does belongs in tests/integration/.
Each such call fails the test that makes it, with that advice, so the split stays true (`make test-fast`)."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest

ADVICE = "a unit test starts no process or server and opens no connection: move this test to tests/integration/"


@pytest.fixture(autouse=True)
def _no_process_or_server(monkeypatch):
    def refused(what: str):
        def refuse(*args, **kwargs):
            raise AssertionError(f"{what}: {ADVICE}")

        return refuse

    monkeypatch.setattr(subprocess.Popen, "__init__", refused("subprocess"))
    monkeypatch.setattr(os, "fork", refused("os.fork"))
    monkeypatch.setattr(os, "posix_spawn", refused("os.posix_spawn"))
    monkeypatch.setattr(socket.socket, "bind", refused("socket.bind"))
    monkeypatch.setattr(socket.socket, "connect", refused("socket.connect"))
