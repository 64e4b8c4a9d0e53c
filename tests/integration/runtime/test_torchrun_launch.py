"""torch's exit barrier between two agents over a real TCPStore, the store's host arriving last and leaving at
once (runtime/torchrun_launch.py): with torch's barrier alone, the other agent loses the store between its `add`
and its `wait` and logs "Error waiting on exit barrier"; with the runtime's, the host waits until it has left."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import time
from datetime import timedelta
from types import SimpleNamespace

import pytest
from torch.distributed import TCPStore
from torch.distributed.elastic.agent.server import api

from vdk.plugin.ml_training.runtime import torchrun_launch

# The agent of node 0: it hosts the rendezvous store, arrives at the exit barrier when told to (a line on its
# stdin), and ends at once when its barrier returns, as torchrun's agent does (its store closes with it).
HOST_AGENT = """
import os, sys
from types import SimpleNamespace
from torch.distributed import TCPStore
from torch.distributed.elastic.agent.server import api
from vdk.plugin.ml_training.runtime import torchrun_launch

if sys.argv[1] == "fixed":
    assert torchrun_launch.make_exit_barrier_safe()
store = TCPStore("127.0.0.1", 0, 2, True, wait_for_workers=False)
print(store.port, flush=True)
sys.stdin.readline()
agent = SimpleNamespace(
    _store=store, _worker_group=SimpleNamespace(group_world_size=2, state="SUCCEEDED"), _exit_barrier_timeout=30
)
api.SimpleElasticAgent._exit_barrier(agent)
print("left", flush=True)
os._exit(0)
"""

AGENT_LOGGER = "torch.distributed.elastic.agent.server.api"


class _LoadedStore:
    """Node 1's store, on a loaded machine: between its `add` and its `wait` in torch's barrier, the host is told
    to arrive, and node 1 is slow to wait: until the host's process has ended (its store closed), or `slow`
    seconds."""

    def __init__(self, store: TCPStore, host: subprocess.Popen, slow: float) -> None:
        self._store, self._host, self._slow = store, host, slow

    def __getattr__(self, name: str):
        return getattr(self._store, name)

    def wait(self, keys, *args):
        self._host.stdin.write("arrive\n")
        self._host.stdin.flush()
        try:
            self._host.wait(self._slow)
        except subprocess.TimeoutExpired:
            pass  # the host is still there (it waits for this agent): node 1 waits now
        return self._store.wait(keys, *args)


def _exit_barrier_of_two(fixed: bool, caplog) -> tuple[list[str], float, subprocess.CompletedProcess]:
    """Node 1's agent arrives first, node 0's (the store's host) last; node 1's errors logged, its seconds in the
    barrier, and the host's end."""
    code = textwrap.dedent(HOST_AGENT)
    host = subprocess.Popen(
        [sys.executable, "-c", code, "fixed" if fixed else "plain"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        port = int(host.stdout.readline())
        store = _LoadedStore(TCPStore("127.0.0.1", port, 2, False, timeout=timedelta(seconds=30)), host, 3.0)
        agent = SimpleNamespace(
            _store=store, _worker_group=SimpleNamespace(group_world_size=2, state="SUCCEEDED"), _exit_barrier_timeout=30
        )
        started = time.monotonic()
        with caplog.at_level(logging.INFO, logger=AGENT_LOGGER):
            api.SimpleElasticAgent._exit_barrier(agent)
        seconds = time.monotonic() - started
        out, err = host.communicate(timeout=30)
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
    errors = [r.getMessage() for r in caplog.records if r.name == AGENT_LOGGER and r.levelno >= logging.WARNING]
    return errors, seconds, subprocess.CompletedProcess(host.args, host.returncode, out, err)


@pytest.fixture
def torch_exit_barrier(monkeypatch):
    """torch's own `_exit_barrier` in this process, whatever wrapped it before; restored after the test."""
    current = api.SimpleElasticAgent.__dict__["_exit_barrier"]
    monkeypatch.setattr(api.SimpleElasticAgent, "_exit_barrier", getattr(current, "__wrapped__", current))


def test_torchs_exit_barrier_alone_fails_the_agent_whose_store_host_left_first(torch_exit_barrier, caplog):
    errors, _, host = _exit_barrier_of_two(fixed=False, caplog=caplog)
    assert host.returncode == 0, host.stderr
    assert any("Error waiting on exit barrier" in e for e in errors), errors  # the race, reproduced


def test_the_runtimes_exit_barrier_keeps_the_store_up_until_every_agent_left(torch_exit_barrier, caplog):
    assert torchrun_launch.make_exit_barrier_safe()
    assert torchrun_launch.make_exit_barrier_safe()  # once: a second call wraps nothing again
    wrapped = api.SimpleElasticAgent.__dict__["_exit_barrier"]
    assert not getattr(wrapped.__wrapped__, "_vdk_leaves_together", False)
    errors, seconds, host = _exit_barrier_of_two(fixed=True, caplog=caplog)
    assert host.returncode == 0, host.stderr
    assert errors == []
    assert "Error waiting on exit barrier" not in host.stderr
    assert seconds < torchrun_launch.LEAVE_SECONDS + 3.0 + 5.0  # node 1 was slow 3 s; never torch's 300 s


def test_the_second_step_is_skipped_quietly_when_torchs_barrier_did_not_succeed():
    """A barrier that timed out (a peer failed): no second wait, so a failed run is not delayed."""
    store = TCPStore("127.0.0.1", 0, 1, True, wait_for_workers=False)
    started = time.monotonic()
    assert torchrun_launch.leave_together(store, 2, "torchelastic/agent/terminal_state/last_member") is False
    assert time.monotonic() - started < 1.0
    assert not store.check([torchrun_launch.LEAVE_KEY])
