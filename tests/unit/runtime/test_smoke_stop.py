"""The smoke run's agreed end: the first rank that stops says so in the run directory; a rank whose collective
ended because that rank ended stopped with it; an error of its own is still its own."""

from __future__ import annotations

import pytest
import torch

from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime import smoke_stop
from vdk.plugin.ml_training.runtime.steps import SmokeStepsReached

GLOO_PEER_GONE = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
    "[127.0.0.1]:24479. This is typically caused by a remote worker crashing."
)


def test_the_first_rank_to_stop_is_the_one_recorded(tmp_path):
    assert smoke_stop.stopped_by(tmp_path) is None
    smoke_stop.announce(tmp_path, 1, 2)
    smoke_stop.announce(tmp_path, 0, 3)  # a later stop changes nothing
    assert smoke_stop.stopped_by(tmp_path) == {"rank": 1, "steps": 2}


def test_a_collective_that_ended_because_the_stopped_rank_left_is_the_agreed_end(tmp_path):
    peer_gone = RuntimeError(GLOO_PEER_GONE)
    assert smoke_stop.ended_by_peer(peer_gone, tmp_path) is None  # nobody stopped: a failure
    smoke_stop.announce(tmp_path, 0, 2)
    assert smoke_stop.ended_by_peer(peer_gone, tmp_path) == {"rank": 0, "steps": 2}
    try:  # wrapped by the code or a framework: its cause is what counts
        try:
            raise peer_gone
        except RuntimeError as e:
            raise ValueError("evaluation failed") from e
    except ValueError as wrapped:
        assert smoke_stop.ended_by_peer(wrapped, tmp_path) is not None
    assert smoke_stop.ended_by_peer(ValueError("a bug of its own"), tmp_path) is None
    assert smoke_stop.ended_by_peer(RuntimeError("shape mismatch"), tmp_path) is None


def test_a_rank_behind_the_one_that_stopped_takes_its_steps_up_to_there_then_stops(tmp_path, monkeypatch):
    monkeypatch.setenv(protocol.RUN_DIR, str(tmp_path))
    monkeypatch.setattr(smoke_stop, "_check", None)  # the hook stays; this test's check goes with it
    counter = type("Counter", (), {"steps": 0, "listeners": []})()
    smoke_stop.follow(counter, 0)
    optimizer = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)
    optimizer.step()  # nobody stopped yet
    smoke_stop.announce(tmp_path, 1, 2)  # rank 1 stopped after 2 steps: DDP's ranks step in lockstep
    counter.steps = 1
    optimizer.step()  # this rank took 1: it takes its second step
    counter.steps = 2
    with pytest.raises(SmokeStepsReached):
        optimizer.step()  # where rank 1 stopped: this one stops there too
